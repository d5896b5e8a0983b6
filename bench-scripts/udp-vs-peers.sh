#!/usr/bin/env bash
# UDP on loopback, pinperf against iperf3 (a 3.21 with --gsro: GSO and GRO as pinperf
# uses them) and iperf 2 in the same run, every tool with the same socket buffers
# (-w WINDOW), in two parts:
#
# 1. Loss at fixed total rates (RATES, split over the streams): ROUNDS interleaved rounds,
#    each tool's median loss and received rate (loss.csv, loss-rate.csv, loss-table.txt).
# 2. The loss-free ceiling: the highest rate each tool carries with at most MAXLOSS %
#    loss (default 0: none at all), per datagram size and stream count. Each is a search
#    per tool: double the per-stream rate from START Mbit/s until a run loses more than
#    MAXLOSS, then bisect until the bounds are within STEP (10 %) or PROBES runs were
#    spent. A probe passes when its loss is at most MAXLOSS and the receiver got at least
#    95 % of the asked rate (a sender that cannot reach a rate loses nothing, and that
#    rate must not count as carried). The tools' probes are interleaved (one probe of each
#    tool per step, their order rotated), so a noisy moment hits all of them.
#    CEILING_ROUNDS searches, medians (best.csv, summary.csv, table.txt).
# Loss and rate are the receiver's as each tool reports them (pinperf and iperf3 from
# their JSON, iperf 2 from its server reports; a run iperf 2 ends without a server report
# for every stream counts as a failed probe, like a lossy one).
#
#   IPERF3=/work/peers/iperf3-3.21/bin/iperf3 bench-scripts/udp-vs-peers.sh
#   SECS=2 SIZES=1472 STREAMS=1 RATES="10G 30G" TOOLS="pinperf iperf3" bench-scripts/udp-vs-peers.sh
#   RATES= bench-scripts/udp-vs-peers.sh      # ceilings only; CEILING_ROUNDS=0: the table only
#   PINPERF_ARGS=--no-gsro IPERF3_ARGS= bench-scripts/udp-vs-peers.sh   # no GSO/GRO on either
#   TOOLS="pinperf pinperf_rt iperf3" bench-scripts/udp-vs-peers.sh      # pinperf_rt: --realtime
#
# pinperf_rt is pinperf with --realtime (its receiving thread at SCHED_FIFO, needs root):
# no peer has its like (iperf3 has none; its own receiver under chrt -f lost more here,
# 2.4 % at 30G, as its thread never sleeps), so it is a row of its own, not a peer's match.
#
# Needs `pinperf --loopback -u -b RATE -l SIZE -P N -w W -t T -J` (its JSON read in
# pinperf_point below: adjust there if the field names move).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-3}
ROUNDS=${ROUNDS:-3}
CEILING_ROUNDS=${CEILING_ROUNDS:-1}
SIZES=${SIZES:-"1472 8192"}
STREAMS=${STREAMS:-"1 2"}
RATES=${RATES-"10G 20G 30G 45G"}
TOOLS=${TOOLS:-"pinperf iperf3 iperf2"}
WINDOW=${WINDOW:-8M}     # every tool's -w
MAXLOSS=${MAXLOSS:-0}
START=${START:-2000}     # Mbit/s per stream, first probe
CAP=${CAP:-64000}        # Mbit/s per stream, never probed above
STEP=${STEP:-1.10}       # bisect until hi / lo <= STEP
PROBES=${PROBES:-12}     # at most this many runs per tool and point
PINPERF_ARGS=${PINPERF_ARGS:-}      # extra pinperf options (e.g. --no-gsro)
IPERF3_ARGS=${IPERF3_ARGS---gsro}   # iperf3 3.21's GSO/GRO; empty for an older iperf3
[[ $SECS =~ ^[0-9]+$ ]] || { echo "SECS=$SECS: whole seconds only (iperf3 3.12 never ends a fractional -t)" >&2; exit 2; }
ensure_peers
start_run udp-vs-peers
{
  echo "pinperf options: ${PINPERF_ARGS:-(none)}; iperf3 options: ${IPERF3_ARGS:-(none)}"
  echo "every tool: -w $WINDOW; loss-free: at most $MAXLOSS % lost"
} >>"$out/env.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

tools=()
for t in $TOOLS; do
  case $t in
    pinperf) tools+=(pinperf) ;;
    pinperf_rt) if chrt -f 1 true 2>/dev/null; then tools+=(pinperf_rt); else echo "pinperf_rt left out: this user may not have SCHED_FIFO (--realtime needs root or CAP_SYS_NICE)" >&2; fi ;;
    iperf3) if command -v "$IPERF3" >/dev/null; then "$IPERF3" -s -B 127.0.0.1 -p 5212 >/dev/null 2>&1 & pids+=($!); tools+=(iperf3); fi ;;
    iperf2) if command -v "$IPERF2" >/dev/null; then "$IPERF2" -s -u -w "$WINDOW" -B 127.0.0.1 -p 5012 >/dev/null 2>&1 & pids+=($!); tools+=(iperf2); fi ;;
  esac
done
sleep 0.5

# Each *_point prints "LOSS_PERCENT RECEIVED_GBPS" for SIZE STREAMS RATE_MBPS (per
# stream), or nothing when the run failed.
pinperf_point() {
  # ADJUST HERE if the lead's JSON differs: loss from end.sum.lost_percent, rate from
  # end.sum_received.bits_per_second.
  # shellcheck disable=SC2086
  "$PINPERF" --loopback -u -b "${3}M" -l "$1" -P "$2" -w "$WINDOW" -t "$SECS" $PINPERF_ARGS -J 2>/dev/null |
    python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
print("%.4f %.4f" % (e["sum"]["lost_percent"], e["sum_received"]["bits_per_second"] / 1e9))'
}
pinperf_rt_point() {
  PINPERF_ARGS="$PINPERF_ARGS --realtime" pinperf_point "$@"
}
iperf3_point() {
  # shellcheck disable=SC2086
  "$IPERF3" -c 127.0.0.1 -p 5212 -u -b "${3}M" -l "$1" -P "$2" -w "$WINDOW" -t "$SECS" $IPERF3_ARGS -J 2>/dev/null |
    python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
s = e.get("sum_received") or e["sum"]
loss = s.get("lost_percent", e["sum"]["lost_percent"])
print("%.4f %.4f" % (loss, s["bits_per_second"] / 1e9))'
}
iperf2_point() {
  # iperf 2.1's CSV (-y C) carries no server report for UDP: read the text. One "Server
  # Report:" per stream, each followed by "... X Mbits/sec  J ms LOST/TOTAL (P%)"; a run
  # missing any stream's report (iperf 2's "did not receive ack of last datagram") fails.
  "$IPERF2" -c 127.0.0.1 -p 5012 -u -b "${3}M" -l "$1" -P "$2" -w "$WINDOW" -t "$SECS" 2>&1 |
    python3 -c '
import re, sys
want, lines = int(sys.argv[1]), sys.stdin.read().splitlines()
scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
bps = lost = total = n = 0
for i, line in enumerate(lines):
    if "Server Report:" not in line:
        continue
    for row in lines[i + 1 : i + 3]:
        m = re.search(r"([\d.]+) ([KMG]?)bits/sec\s+[\d.]+ ms\s+(\d+)/\s*(\d+)", row)
        if m:
            bps += float(m[1]) * scale[m[2]]
            lost += int(m[3])
            total += int(m[4])
            n += 1
            break
if n == want and total > 0:
    print("%.4f %.4f" % (lost / total * 100, bps / 1e9))' "$2"
}


# Part 1: loss at fixed total rates.
fixed=$out/loss-raw.csv
echo "round,size,streams,rate,tool,lost_percent,received_gbps" >"$fixed"
for ((r = 0; r < ROUNDS; r++)); do
  for rate in $RATES; do
    for size in $SIZES; do
      for p in $STREAMS; do
        per=$(awk -v r="${rate%[gG]}" -v p="$p" 'BEGIN {printf "%d", r * 1000 / p}')
        for t in $(rotate "$r" "${tools[@]}"); do
          res=$("${t}_point" "$size" "$p" "$per" || true)
          read -r loss gbps <<<"${res:-NA NA}"
          echo "$r,$size,$p,$rate,$t,$loss,$gbps" | tee -a "$fixed" >&2
          sleep 0.3
        done
      done
    done
  done
done
if [ -n "$RATES" ]; then
  medians "$fixed" size,streams,rate,tool lost_percent >"$out/loss.csv"
  medians "$fixed" size,streams,rate,tool received_gbps >"$out/loss-rate.csv"
  python3 - "$out/loss.csv" "$out/loss-rate.csv" "$WINDOW" <<'PY' | tee "$out/loss-table.txt"
import csv, sys
def read(path, col):
    return {(r["size"], r["streams"], r["rate"], r["tool"]): float(r[col]) for r in csv.DictReader(open(path))}
loss, got = read(sys.argv[1], "median_lost_percent"), read(sys.argv[2], "median_received_gbps")
tools = [t for t in ("pinperf", "pinperf_rt", "iperf3", "iperf2") if any(k[3] == t for k in loss)]
print(f"Median loss % (received Gbit/s) at fixed total rates, loopback, -w {sys.argv[3]} on every tool")
print("| datagram | streams | rate | " + " | ".join(tools) + " |")
print("|---|---|---|" + "---|" * len(tools))
for key in sorted({k[:3] for k in loss}, key=lambda k: (int(k[0]), int(k[1]), float(k[2].rstrip("gG")))):
    cells = [f"{loss[key + (t,)]:.3f} ({got.get(key + (t,), 0):.1f})" if key + (t,) in loss else "-" for t in tools]
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
PY
fi

# Part 2: the loss-free ceilings.
raw=$out/raw.csv
echo "round,size,streams,tool,probe,rate_mbps_per_stream,lost_percent,received_gbps,ok" >"$raw"
best=$out/best.csv
echo "round,size,streams,tool,best_mbps_per_stream,received_gbps,probes" >"$best"

for ((r = 0; r < CEILING_ROUNDS; r++)); do
  for size in $SIZES; do
    for p in $STREAMS; do
      declare -A lo=() hi=() next=() got=() n=()
      for t in "${tools[@]}"; do lo[$t]=0; hi[$t]=0; next[$t]=$START; got[$t]=""; n[$t]=0; done
      for ((step = 0; step < PROBES; step++)); do
        active=()
        for t in "${tools[@]}"; do [ "${next[$t]}" != 0 ] && active+=("$t"); done
        [ ${#active[@]} -eq 0 ] && break
        for t in $(rotate "$step" "${active[@]}"); do
          rate=${next[$t]}
          res=$("${t}_point" "$size" "$p" "$rate" || true)
          read -r loss gbps <<<"${res:-NA NA}"
          ok=0
          # A probe passes when it lost at most MAXLOSS and the receiver really got (within
          # 5 %) the rate asked for: a sender that cannot reach it loses nothing, and its
          # asked rate must not count as carried.
          [ "$loss" != NA ] && awk -v l="$loss" -v m="$MAXLOSS" -v g="$gbps" -v want="$((rate * p))" \
            'BEGIN {exit !(l <= m && g * 1000 >= 0.95 * want)}' && ok=1
          n[$t]=$((n[$t] + 1))
          echo "$r,$size,$p,$t,${n[$t]},$rate,$loss,$gbps,$ok" | tee -a "$raw" >&2
          if [ $ok = 1 ]; then lo[$t]=$rate; got[$t]=$gbps; else hi[$t]=$rate; fi
          # The next probe: double until a failure, then bisect; 0 = this point is done.
          next[$t]=$(awk -v lo="${lo[$t]}" -v hi="${hi[$t]}" -v cap="$CAP" -v s="$STEP" 'BEGIN {
            if (hi == 0) { n = lo * 2; print (n > cap ? (lo >= cap ? 0 : cap) : n); exit }
            if (lo == 0) { n = int(hi / 2); print (n < 1 ? 0 : n); exit }
            print (hi / lo <= s ? 0 : int((lo + hi) / 2)) }')
          sleep 0.3
        done
      done
      for t in "${tools[@]}"; do
        echo "$r,$size,$p,$t,${lo[$t]},${got[$t]:-NA},${n[$t]}" >>"$best"
      done
      unset lo hi next got n
    done
  done
done

[ "$CEILING_ROUNDS" -gt 0 ] || exit 0
medians "$best" size,streams,tool best_mbps_per_stream >"$out/summary.csv"
python3 - "$out/summary.csv" "$MAXLOSS" <<'PY' | tee "$out/table.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pts = {}
for r in rows:
    pts.setdefault((int(r["size"]), int(r["streams"])), {})[r["tool"]] = float(r["median_best_mbps_per_stream"])
tools = [t for t in ("pinperf", "pinperf_rt", "iperf3", "iperf2") if any(t in v for v in pts.values())]
ours = [t for t in ("pinperf", "pinperf_rt") if t in tools]
print(f"Highest total rate (Mbit/s, all streams) with <= {sys.argv[2]} % loss, loopback (median of the searches)")
print("| datagram | streams | " + " | ".join(tools) + " | " + " | ".join(f"{t} / best peer" for t in ours) + " |")
print("|---|---|" + "---|" * (len(tools) + len(ours)))
for (size, p), v in sorted(pts.items()):
    peers = [v[t] * p for t in ("iperf3", "iperf2") if t in v]
    best = max(peers) if peers else 0
    cells = [f"{v[t] * p:.0f}" if t in v else "-" for t in tools]
    ratios = [f"{v[t] * p / best:.2f}x" if best > 0 and t in v else "-" for t in ours]
    print(f"| {size} | {p} | " + " | ".join(cells + ratios) + " |")
PY
echo "raw probes: $raw" >&2
