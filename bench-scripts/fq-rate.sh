#!/usr/bin/env bash
# Kernel pacing (--fq-rate) on loopback, pinperf against iperf3 in the same run: for each
# rate, the receiver's rate (as each tool reports it, from its JSON) and the wall time of
# a -t SECS test, under cubic and bbr. Interleaved (the tools' order rotates per round),
# medians over ROUNDS. What it shows: the rate is held (received / asked, the kernel's
# unpaced first ten segments included) and the test ends on time (wall / SECS).
#
#   bench-scripts/fq-rate.sh                       # defaults: SECS=3 ROUNDS=3
#   RATES="1M 10M" CCS=cubic bench-scripts/fq-rate.sh
#
# Writes bench-results/fq-rate-*/{env.txt,raw.csv,summary.csv,table.txt}.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-3}
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-"1M 10M 100M 1G"}
CCS=${CCS:-"cubic bbr"}
ensure_peers
start_run fq-rate

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$IPERF3" -s -B 127.0.0.1 -p 5213 >/dev/null 2>&1 & pids+=($!)
sleep 0.5

# Prints "received_mbps,wall_s" for TOOL CC RATE (NA on a failed run).
point() {
  local tool=$1 cc=$2 rate=$3 t0 t1 doc mbps
  t0=$(date +%s.%N)
  case $tool in
    pinperf) doc=$("$PINPERF" --loopback -C "$cc" -t "$SECS" --fq-rate "$rate" -J 2>/dev/null || true) ;;
    iperf3) doc=$("$IPERF3" -c 127.0.0.1 -p 5213 -C "$cc" -t "$SECS" --fq-rate "$rate" -J 2>/dev/null || true) ;;
  esac
  t1=$(date +%s.%N)
  mbps=$(python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))' <<<"$doc" 2>/dev/null || echo NA)
  echo "$mbps,$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"
}

echo "cc,rate,tool,round,received_mbps,wall_s" >"$out/raw.csv"
tools=(pinperf iperf3)
for cc in $CCS; do
  for rate in $RATES; do
    for ((r = 0; r < ROUNDS; r++)); do
      for tool in $(rotate "$r" "${tools[@]}"); do
        echo "$cc,$rate,$tool,$r,$(point "$tool" "$cc" "$rate")" | tee -a "$out/raw.csv"
      done
    done
  done
done

python3 - "$out" "$SECS" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
out, secs = sys.argv[1], float(sys.argv[2])
def bps(text):
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
groups = {}
for r in rows:
    groups.setdefault((r["cc"], r["rate"], r["tool"]), []).append(r)
summary = []
for (cc, rate, tool), rs in groups.items():
    got = [float(r["received_mbps"]) for r in rs if r["received_mbps"] != "NA"]
    wall = [float(r["wall_s"]) for r in rs]
    med = statistics.median(got) if got else float("nan")
    summary.append((cc, rate, tool, len(got), med, med * 1e6 / bps(rate), statistics.median(wall)))
with open(f"{out}/summary.csv", "w") as f:
    f.write("cc,rate,tool,runs,median_received_mbps,received_over_asked,median_wall_s\n")
    for s in summary:
        f.write("%s,%s,%s,%d,%.3f,%.4f,%.3f\n" % s)
print(f"--fq-rate on loopback, -t {secs:g}: medians (received/asked; wall time / -t)")
print("%-6s %-6s %22s %22s %14s" % ("cc", "rate", "pinperf recv/asked", "iperf3 recv/asked", "wall p / i3"))
by = {(s[0], s[1], s[2]): s for s in summary}
for cc, rate in dict.fromkeys((s[0], s[1]) for s in summary):
    p, i = by.get((cc, rate, "pinperf")), by.get((cc, rate, "iperf3"))
    cell = lambda s: "%9.3f (%.3f)" % (s[4], s[5]) if s else "-"
    wall = "%.2f / %.2f" % (p[6] / secs, i[6] / secs) if p and i else "-"
    print("%-6s %-6s %22s %22s %14s" % (cc, rate, cell(p), cell(i), wall))
PY
