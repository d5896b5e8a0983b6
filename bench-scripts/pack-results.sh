#!/usr/bin/env bash
# Before committing a run: keeps each DIR's env.txt, table.txt, loss-table.txt, table.md, summary.csv, runs.csv
# as they are and packs everything else (raw CSV, per-run JSON, perf symbol lists) into
# DIR/raw.tar.gz, so a run is a handful of files, not hundreds.
#
#   bench-scripts/pack-results.sh bench-results/vs-peers-cubic-*
set -euo pipefail
for dir in "$@"; do
  [ -d "$dir" ] || continue
  mapfile -t raw < <(cd "$dir" && find . -mindepth 1 -maxdepth 1 \
    ! -name env.txt ! -name table.txt ! -name loss-table.txt ! -name table.md ! -name summary.csv ! -name runs.csv ! -name raw.tar.gz -printf '%P\n' | sort)
  [ ${#raw[@]} -gt 0 ] || continue
  # A run that packed its own raw output already is left as it is.
  [ ! -e "$dir/raw.tar.gz" ] || { echo "$dir: has a raw.tar.gz already; left alone" >&2; continue; }
  tar -czf "$dir/raw.tar.gz" -C "$dir" "${raw[@]}"
  (cd "$dir" && rm -rf -- "${raw[@]}")
  echo "$dir: packed ${#raw[@]} entries into raw.tar.gz" >&2
done
