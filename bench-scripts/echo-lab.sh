#!/usr/bin/env bash
# Do both engines measure the same block RTT? In `pinperf lab` (root): a 60 ms, 1 Gbit/s
# path, 8 streams, -w BDP/8, 128 KiB blocks, where a blocked write() lasts long. Echoes must
# be read before the next one arrives (unread ones are merged by the kernel and stamped with
# the newest arrival), and both engines must keep their send buffers equally full (block RTT
# includes that queue). Per binary (BEFORE: an older build, to show a change; PINPERF: this
# one) and engine, ROUNDS runs: block RTT min and median (median over every stream's
# interval medians), and their gaps to the single engine.
#
#   sudo BEFORE=/path/to/old/pinperf bench-scripts/echo-lab.sh   # SECS=10 ROUNDS=2
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "echo-lab.sh: pinperf lab needs root" >&2; exit 2; }
SECS=${SECS:-10}
ROUNDS=${ROUNDS:-2}
RTT=${RTT:-60ms}
RATE=${RATE:-1G}
STREAMS=${STREAMS:-8}
BEFORE=${BEFORE:-}
start_run echo-lab
mkdir -p "$out/runs"
bdp=$(python3 -c "print(int(float('${RATE%G}') * 1e9 * float('${RTT%ms}') / 1e3 / 8))")
window=$((bdp / STREAMS))
echo "path: rtt $RTT rate $RATE; -P $STREAMS -w $window (BDP/$STREAMS) -l 128k" >>"$out/env.txt"
[ -n "$BEFORE" ] && echo "before: $BEFORE ($("$BEFORE" --version))" >>"$out/env.txt"

bins=(after)
[ -n "$BEFORE" ] && bins=(before after)
echo "round,binary,engine,gbps,rtt_min_ms,rtt_median_ms,kernel_srtt_ms" >"$out/raw.csv"
for ((r = 0; r < ROUNDS; r++)); do
  for bin in "${bins[@]}"; do
    exe=$PINPERF
    [ "$bin" = before ] && exe=$BEFORE
    for engine in threads single; do
      name=$bin-$engine-$r
      "$exe" lab --rtt "$RTT" --rate "$RATE" -- -P "$STREAMS" -w "$window" -l 128k -t "$SECS" -i 1 \
        --engine "$engine" -J >"$out/runs/$name.json" 2>"$out/runs/$name.err" || { echo "$name failed" >&2; continue; }
      python3 - "$out/runs/$name.json" "$r" "$bin" "$engine" <<'PY' | tee -a "$out/raw.csv" >&2
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
meds, mins = [], []
for iv in doc["intervals"]:
    for s in iv["streams"]:
        b = s.get("block_rtt")
        if b and b.get("samples"):
            mins.append(b["min_us"])
            if b.get("median_us") is not None:
                meds.append(b["median_us"])
end = doc["end"]
srtt = [(s.get("kernel_rtt") or {}).get("avg_us") or s.get("rtt") for s in end.get("streams", [])]
srtt = [float(x) for x in srtt if x]
print(",".join([sys.argv[2], sys.argv[3], sys.argv[4],
                "%.3f" % (end["sum_received"]["bits_per_second"] / 1e9),
                "%.3f" % (min(mins) / 1e3), "%.3f" % (statistics.median(meds) / 1e3),
                "%.3f" % (statistics.median(srtt) / 1e3) if srtt else "NA"]))
PY
    done
  done
done
python3 - "$out/raw.csv" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
g = {}
for r in rows:
    g.setdefault((r["binary"], r["engine"]), []).append(r)
med = lambda rs, k: statistics.median(float(x[k]) for x in rs)
print("| binary | engine | runs | Gbit/s | block RTT min ms | block RTT median ms | min gap to single ms | median gap to single ms |")
print("|---|---|---|---|---|---|---|---|")
for (b, e), rs in sorted(g.items()):
    s = g.get((b, "single"))
    gap = lambda k: f"{med(rs, k) - med(s, k):+.3f}" if s else "-"
    print(f"| {b} | {e} | {len(rs)} | {med(rs, 'gbps'):.3f} | {med(rs, 'rtt_min_ms'):.3f} | {med(rs, 'rtt_median_ms'):.3f} | {gap('rtt_min_ms')} | {gap('rtt_median_ms')} |")
PY
