#!/usr/bin/env bash
# -b pacing on a busy host: the sender's rate over the asked one (end.sum_sent of each
# tool's JSON), pinperf against iperf3 (and against BASE, an older pinperf binary, when
# given), with LOAD busy loops running beside them to stand for a shared machine.
# Interleaved (the order rotates per round), medians over ROUNDS, under cubic and bbr.
# What it shows: whether a stream thread descheduled for a while still carries the rate
# asked (pinperf catches up at up to twice the rate; iperf3 at full speed).
#
#   bench-scripts/pace-load.sh                          # SECS=2 ROUNDS=5 LOAD=2
#   BASE=/tmp/pinperf-old bench-scripts/pace-load.sh
#
# Writes bench-results/pace-load-*/{env.txt,raw.csv,table.txt}.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
LOAD=${LOAD:-2}
CCS=${CCS:-"cubic bbr"}
BASE=${BASE:-}
ensure_peers
start_run pace-load

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$IPERF3" -s -B 127.0.0.1 -p 5214 >/dev/null 2>&1 & pids+=($!)
for ((i = 0; i < LOAD; i++)); do (while :; do :; done) & pids+=($!); done
sleep 0.5

# Prints the sender's Mbit/s for TOOL CC MODE (NA on a failed run).
point() {
  local tool=$1 cc=$2 mode=$3 args doc
  case $mode in
    tcp-1G) args=(-b 1G) ;;
    udp-10M) args=(-u -b 10M -l 100) ;;
  esac
  [ "${mode%%-*}" = udp ] || args+=(-C "$cc")
  case $tool in
    pinperf) doc=$("$PINPERF" --loopback -t "$SECS" "${args[@]}" -J 2>/dev/null || true) ;;
    base) doc=$("$BASE" --loopback -t "$SECS" "${args[@]}" -J 2>/dev/null || true) ;;
    iperf3) doc=$("$IPERF3" -c 127.0.0.1 -p 5214 -t "$SECS" "${args[@]}" -J 2>/dev/null || true) ;;
  esac
  python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_sent"]["bits_per_second"] / 1e6))' <<<"$doc" 2>/dev/null || echo NA
}

echo "cc,mode,tool,round,sent_mbps" >"$out/raw.csv"
tools=(pinperf iperf3)
[ -z "$BASE" ] || tools+=(base)
for cc in $CCS; do
  for mode in tcp-1G udp-10M; do
    for ((r = 0; r < ROUNDS; r++)); do
      for tool in $(rotate "$r" "${tools[@]}"); do
        echo "$cc,$mode,$tool,$r,$(point "$tool" "$cc" "$mode")" | tee -a "$out/raw.csv"
      done
    done
  done
done

python3 - "$out" "$LOAD" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
out, load = sys.argv[1], sys.argv[2]
asked = {"tcp-1G": 1000.0, "udp-10M": 10.0}
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
med = {}
for r in rows:
    if r["sent_mbps"] != "NA":
        med.setdefault((r["cc"], r["mode"], r["tool"]), []).append(float(r["sent_mbps"]))
med = {k: (statistics.median(v), len(v)) for k, v in med.items()}
tools = [t for t in ("pinperf", "base", "iperf3") if any(k[2] == t for k in med)]
print(f"-b on loopback beside {load} busy loops: median sent/asked (runs)")
print("%-6s %-8s" % ("cc", "mode") + "".join("%18s" % t for t in tools) + "%16s" % "pinperf/iperf3")
for cc, mode in dict.fromkeys((k[0], k[1]) for k in med):
    cells = []
    for t in tools:
        m = med.get((cc, mode, t))
        cells.append("%12.4f (%d)" % (m[0] / asked[mode], m[1]) if m else "-")
    p, i = med.get((cc, mode, "pinperf")), med.get((cc, mode, "iperf3"))
    ratio = "%.4f" % (p[0] / i[0]) if p and i else "-"
    print("%-6s %-8s" % (cc, mode) + "".join("%18s" % c for c in cells) + "%16s" % ratio)
PY
