#!/usr/bin/env bash
# What a gigabit costs in CPU: Gbit/s per busy core at 8 KiB and 256 KiB blocks, for pinperf
# pinned and unpinned, threaded and single-threaded, and for iperf 2 and iperf3 at the same
# points. Busy cores are measured the same way for every tool: the whole machine's
# /proc/stat busy time over the run (softirq included), so no tool grades itself.
# Loopback, STREAMS streams, ROUNDS interleaved rounds of SECS, medians.
#
# CC=cubic runs every tool under that congestion control (-C / iperf3 -C / iperf -Z);
# by default all use the system's. IPERF3/IPERF2 name the peers' binaries (lib.sh);
# PINPERF_VARIANTS picks pinperf's variants (default: threads and single, auto and none).
#
#   bench-scripts/cpu-compare.sh     # SECS=3 ROUNDS=3 BLOCKS="8k 256k" STREAMS=2 CC=
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-3}
ROUNDS=${ROUNDS:-3}
BLOCKS=${BLOCKS:-"8k 256k"}
STREAMS=${STREAMS:-2}
CC=${CC:-}
pcc=() i3cc=() i2cc=()
if [ -n "$CC" ]; then pcc=(-C "$CC"); i3cc=(-C "$CC"); i2cc=(-Z "$CC"); fi
[[ $SECS =~ ^[0-9]+$ ]] || { echo "SECS=$SECS: whole seconds only (iperf3 3.12 never ends a fractional -t)" >&2; exit 2; }
ensure_peers
start_run cpu-compare
echo "cc: ${CC:-system default}" >>"$out/env.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$PINPERF" -s -B 127.0.0.1 -p 5312 2>/dev/null & pids+=($!)
variants=(${PINPERF_VARIANTS:-pinperf-threads-auto pinperf-threads-none pinperf-single-auto pinperf-single-none})
if command -v "$IPERF3" >/dev/null; then "$IPERF3" -s -B 127.0.0.1 -p 5212 >/dev/null 2>&1 & pids+=($!); variants+=(iperf3); fi
if command -v "$IPERF2" >/dev/null; then "$IPERF2" -s -B 127.0.0.1 -p 5012 >/dev/null 2>&1 & pids+=($!); variants+=(iperf2); fi
sleep 0.5

run_variant() { # variant block -> Gbit/s
  case $1 in
    pinperf-*)
      IFS=- read -r _ engine pin <<<"$1"
      "$PINPERF" -c 127.0.0.1 -p 5312 -l "$2" -P "$STREAMS" -t "$SECS" -i "$SECS" -A "$pin" --engine "$engine" "${pcc[@]}" -J | gbps_json ;;
    iperf3) "$IPERF3" -c 127.0.0.1 -p 5212 -l "$(to_bytes "$2")" -P "$STREAMS" -t "$SECS" "${i3cc[@]}" -J | gbps_json ;;
    iperf2)
      "$IPERF2" -c 127.0.0.1 -p 5012 -l "$(to_bytes "$2")" -P "$STREAMS" -t "$SECS" "${i2cc[@]}" -y C |
        awk -F, '$6 == -1 {sum = $9; have = 1} $6 != -1 {s += $9} END {if (NR) printf "%.3f\n", (have ? sum : s) / 1e9}' ;;
  esac
}

raw=$out/raw.csv
echo "round,block,streams,variant,gbps,busy_cores,gbps_per_busy_core" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for b in $BLOCKS; do
    for v in $(rotate "$r" "${variants[@]}"); do
      IFS=, read -r g bc <<<"$(run_with_cpu run_variant "$v" "$b")"
      eff=$(awk -v g="$g" -v c="$bc" 'BEGIN {printf "%.3f\n", (c > 0 && g != "NA" ? g / c : 0)}')
      echo "$r,$b,$STREAMS,$v,$g,$bc,$eff" | tee -a "$raw" >&2
      sleep 0.3
    done
  done
done
python3 - "$raw" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["gbps"] != "NA"]
cells = {}
for r in rows:
    cells.setdefault((r["block"], r["variant"]), []).append(r)
def med(rs, k):
    return statistics.median(float(x[k]) for x in rs)
print("| block | variant | Gbit/s | busy cores | Gbit/s per busy core |")
print("|---|---|---|---|---|")
for (b, v), rs in sorted(cells.items(), key=lambda kv: (int(kv[0][0].rstrip("kKmM")), kv[0][1])):
    print(f"| {b} | {v} | {med(rs, 'gbps'):.2f} | {med(rs, 'busy_cores'):.2f} | {med(rs, 'gbps_per_busy_core'):.2f} |")
PY
