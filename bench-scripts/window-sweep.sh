#!/usr/bin/env bash
# What a window costs in queueing: pinperf --loopback over -w sizes (and autotuning),
# recording throughput, block RTT (every queue a block met), kernel min RTT (the path)
# and whether pinperf's diagnosis flagged a standing queue. ROUNDS interleaved, medians.
#
#   bench-scripts/window-sweep.sh       # SECS=2 ROUNDS=3 WINDOWS="auto 64k 256k 1M 4M" BLOCK=128k
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-2}
ROUNDS=${ROUNDS:-3}
WINDOWS=${WINDOWS:-"auto 64k 256k 1M 4M"}
BLOCK=${BLOCK:-128k}
STREAMS=${STREAMS:-1}
CC=${CC:-}
start_run window-sweep

extract() {
  python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
s = e["sum"]
path = min((r["min_rtt"] for r in e["streams"] if r["min_rtt"]), default=None)
block = s["block_rtt"]["avg_us"] if s["block_rtt"] else None
print("%.3f,%s,%s,%d" % (e["sum_received"]["bits_per_second"] / 1e9,
      "" if block is None else "%.1f" % block, "" if path is None else path,
      any("standing queue" in d for d in e["diagnosis"])))'
}

raw=$out/raw.csv
echo "round,window,gbps,block_rtt_avg_us,min_rtt_us,queue_diagnosed" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for w in $(rotate "$r" $WINDOWS); do
    args=(--loopback -l "$BLOCK" -P "$STREAMS" -t "$SECS" -i "$SECS" -J)
    [ "$w" = auto ] || args+=(-w "$w")
    [ -z "$CC" ] || args+=(-C "$CC")
    echo "$r,$w,$("$PINPERF" "${args[@]}" | extract)" | tee -a "$raw" >&2
  done
done
python3 - "$raw" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
order = []
for r in rows:
    if r["window"] not in order:
        order.append(r["window"])
def med(vals):
    vals = [float(v) for v in vals if v != ""]
    return statistics.median(vals) if vals else float("nan")
print("| -w | Gbit/s | block RTT avg, ms | kernel min RTT, ms | standing queue diagnosed |")
print("|---|---|---|---|---|")
key = lambda w: (w != "auto", int(w.rstrip("kMG")) * {"k": 1, "M": 1024, "G": 1 << 20}.get(w[-1], 1) if w != "auto" else 0)
for w in sorted(order, key=key):
    g = [r for r in rows if r["window"] == w]
    flagged = sum(int(r["queue_diagnosed"]) for r in g)
    print(f"| {w} | {med(r['gbps'] for r in g):.2f} | {med(r['block_rtt_avg_us'] for r in g) / 1e3:.3f} | "
          f"{med(r['min_rtt_us'] for r in g) / 1e3:.3f} | {flagged} of {len(g)} runs |")
PY
