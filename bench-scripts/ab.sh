#!/usr/bin/env bash
# Did a change cost speed? Runs pinperf built from BASE (a git revision) and from the work
# tree side by side with iperf 2 as the peer, interleaved per round, on loopback: Gbit/s and
# Gbit/s per busy core (the machine's /proc/stat, as cpu-compare.sh) under each congestion
# control, medians, and the ratios new/base and new/iperf 2.
#
#   BASE=2982606 bench-scripts/ab.sh     # SECS=3 ROUNDS=5 BLOCKS="8k 128k" STREAMS=2 CCS="cubic bbr"
set -euo pipefail
source "$(dirname "$0")/lib.sh"

BASE=${BASE:?set BASE to the git revision to compare against}
SECS=${SECS:-3}
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"8k 128k"}
STREAMS=${STREAMS:-2}
CCS=${CCS:-"cubic bbr"}
[[ $SECS =~ ^[0-9]+$ ]] || { echo "SECS=$SECS: whole seconds only" >&2; exit 2; }
ensure_peers
start_run ab

# The base build, outside the work tree (BASE_BIN: one built already, from BASE).
if [ -z "${BASE_BIN:-}" ]; then
  base_dir=$(mktemp -d /tmp/pinperf-base.XXXXXX)
  (cd "$root" && git worktree add -q --detach "$base_dir" "$BASE")
  (cd "$base_dir" && cargo build --release --quiet)
  BASE_BIN=$base_dir/target/release/pinperf
fi
echo "base: $BASE ($(cd "$root" && git rev-parse --short "$BASE"))" >>"$out/env.txt"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -z "${base_dir:-}" ] || (cd "$root" && git worktree remove --force "$base_dir") || true
}
trap cleanup EXIT
"$BASE_BIN" -s -B 127.0.0.1 -p 5321 2>/dev/null & pids+=($!)
"$PINPERF" -s -B 127.0.0.1 -p 5322 2>/dev/null & pids+=($!)
variants=(base new)
if command -v iperf >/dev/null; then iperf -s -B 127.0.0.1 -p 5023 >/dev/null 2>&1 & pids+=($!); variants+=(iperf2); fi
sleep 0.5

gbps_json() { python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'; }

run_variant() { # variant block cc -> Gbit/s
  case $1 in
    base) "$BASE_BIN" -c 127.0.0.1 -p 5321 -l "$2" -P "$STREAMS" -t "$SECS" -i "$SECS" -C "$3" -J | gbps_json ;;
    new) "$PINPERF" -c 127.0.0.1 -p 5322 -l "$2" -P "$STREAMS" -t "$SECS" -i "$SECS" -C "$3" -J | gbps_json ;;
    iperf2)
      iperf -c 127.0.0.1 -p 5023 -l "$(to_bytes "$2")" -P "$STREAMS" -t "$SECS" -Z "$3" -y C |
        awk -F, '$6 == -1 {sum = $9; have = 1} $6 != -1 {s += $9} END {if (NR) printf "%.3f\n", (have ? sum : s) / 1e9}' ;;
  esac
}

raw=$out/raw.csv
echo "round,cc,block,streams,variant,gbps,busy_cores,gbps_per_busy_core" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for cc in $CCS; do
    for b in $BLOCKS; do
      for v in $(rotate "$r" "${variants[@]}"); do
        t0=$(cpu_ticks)
        g=$(run_variant "$v" "$b" "$cc" || echo "")
        t1=$(cpu_ticks)
        bc=$(busy_cores "$t0" "$t1")
        eff=$(awk -v g="${g:-0}" -v c="$bc" 'BEGIN {printf "%.3f\n", (c > 0 ? g / c : 0)}')
        echo "$r,$cc,$b,$STREAMS,$v,${g:-NA},$bc,$eff" | tee -a "$raw" >&2
        sleep 0.3
      done
    done
  done
done
python3 - "$raw" <<'PY' | tee "$out/table.md"
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["gbps"] != "NA"]
cells = {}
for r in rows:
    cells.setdefault((r["cc"], r["block"], r["variant"]), []).append(r)
def med(cc, b, v, k):
    rs = cells.get((cc, b, v))
    return statistics.median(float(x[k]) for x in rs) if rs else float("nan")
keys = sorted({(r["cc"], r["block"]) for r in rows}, key=lambda k: (k[0], int(k[1].rstrip("kKmM"))))
print("| CC | block | measure | base | new | iperf 2 | new / base | new / iperf 2 | rounds |")
print("|---|---|---|---|---|---|---|---|---|")
for cc, b in keys:
    n = len(cells.get((cc, b, "new"), []))
    for k, name in (("gbps", "Gbit/s"), ("gbps_per_busy_core", "Gbit/s per busy core")):
        base, new, i2 = (med(cc, b, v, k) for v in ("base", "new", "iperf2"))
        print(f"| {cc} | {b} | {name} | {base:.2f} | {new:.2f} | {i2:.2f} | {new / base:.3f}x | {new / i2:.3f}x | {n} |")
PY
tar -C "$out" -czf "$out/raw.tar.gz" raw.csv && rm "$out/raw.csv"
