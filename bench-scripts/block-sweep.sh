#!/usr/bin/env bash
# The seed's block-size loop (seeds/001_*), as users run it, and the same sweep built in.
#   1. for l in 8192 ... 1048576; do pinperf -c H -l $l | fgrep '**'; done
#   2. pinperf compare --blocks 8k..1m --csv
# Loopback against a pinperf server; SECS per size. Writes raw output and a summary.
#
#   bench-scripts/block-sweep.sh          # SECS=2 STREAMS=1
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-2}
STREAMS=${STREAMS:-1}
start_run block-sweep
"$PINPERF" -s -B 127.0.0.1 -p 5313 2>/dev/null &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
sleep 0.3

echo "# 1. the seed's shell loop" | tee "$out/loop.txt"
for l in 8192 16384 32768 65536 131072 262144 524288 1048576; do
  "$PINPERF" -c 127.0.0.1 -p 5313 -l $l -P "$STREAMS" -t "$SECS" -i "$SECS" | fgrep '**'
done | tee -a "$out/loop.txt"

echo "# 2. built in: pinperf compare --blocks 8k..1m" >&2
"$PINPERF" compare -c 127.0.0.1 -p 5313 --blocks 8k..1m --streams "$STREAMS" -t "$SECS" --csv | tee "$out/raw.csv" >&2
python3 - "$out/raw.csv" <<'PY' | tee "$out/table.txt"
import csv, sys
print("| block | Mb/s | local CPU % | remote CPU % | Gbit/s per busy core | CPU-s per GB |")
print("|---|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    f = lambda k, d=1: f"{float(r[k]):.{d}f}" if r[k] else "-"
    print(f"| {r['block_bytes']} | {float(r['bits_per_second']) / 1e6:.1f} | {f('local_cpu_percent')} | "
          f"{f('remote_cpu_percent')} | {f('gbps_per_busy_core', 2)} | {f('cpu_seconds_per_gb', 3)} |")
PY
