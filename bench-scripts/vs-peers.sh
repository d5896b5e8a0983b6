#!/usr/bin/env bash
# pinperf against iperf 2, iperf3 and the yardstick (blast), on loopback, side by side:
# blocks 8k and 128k, 1, 2 and 4 streams, ROUNDS interleaved rounds of SECS each, medians.
# Throughput is the receiver's for pinperf and iperf3, the sender's for iperf 2 and blast
# (on loopback they differ by at most a socket buffer: < 0.1 % of a 4 s run). The last
# column is the placement pinperf's default chose, from its `# pin plan:` line: paired
# (each stream's sender and receiver on one core) or split (on two).
#
#   bench-scripts/vs-peers.sh                 # defaults: SECS=4 ROUNDS=5
#   SECS=2 ROUNDS=3 BLOCKS="8k" STREAMS="1 4" bench-scripts/vs-peers.sh
#   CC=bbr IPERF3=/work/peers/iperf3/bin/iperf3 bench-scripts/vs-peers.sh
#   MSS=1448 BLOCKS=128k bench-scripts/vs-peers.sh   # 1500-byte frames' segments on loopback
#   ALSO=--no-rcvlowat bench-scripts/vs-peers.sh     # pinperf with these flags too, interleaved
#
# CC runs every tool under that congestion control (-C / iperf3 -C / iperf -Z); MSS caps
# every tool's segments (-M, all three). The yardstick takes neither: it runs under
# bench-scripts/sockopt-shim.c (LD_PRELOAD), which sets TCP_CONGESTION and TCP_MAXSEG on
# its sockets (it sits out when gcc cannot build the shim). IPERF3 and IPERF2 name the
# peers' binaries (lib.sh), whose versions env.txt records.
#
# Writes bench-results/vs-peers-*/{env.txt,raw.csv,summary.csv} and prints the summary.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-4}
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"8k 128k"}
STREAMS=${STREAMS:-"1 2 4"}
CC=${CC:-}
pcc=() i3cc=() i2cc=()
if [ -n "$CC" ]; then pcc=(-C "$CC"); i3cc=(-C "$CC"); i2cc=(-Z "$CC"); fi
MSS=${MSS:-}
read -ra also_flags <<<"${ALSO:-}"
if [ -n "$MSS" ]; then pcc+=(-M "$MSS"); i3cc+=(-M "$MSS"); i2cc+=(-M "$MSS"); fi
[[ $SECS =~ ^[0-9]+$ ]] || { echo "SECS=$SECS: whole seconds only (iperf3 3.12 never ends a fractional -t)" >&2; exit 2; }
ensure_peers
build_blast
start_run vs-peers
echo "cc: ${CC:-system default}" >>"$out/env.txt"
echo "mss: ${MSS:-path default}" >>"$out/env.txt"
echo "also: pinperf ${ALSO:-(none)}" >>"$out/env.txt"
# The yardstick's -C and -M: the shim, preloaded into its server and client.
blast_env=()
if [ -n "$BLAST" ] && { [ -n "$CC" ] || [ -n "$MSS" ]; }; then
  if build_shim; then
    blast_env=(env LD_PRELOAD="$SHIM" SHIM_CC="$CC" SHIM_MSS="$MSS")
  else
    echo "note: could not build the sockopt shim; the yardstick sits out" >&2
    BLAST=
  fi
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

tools=(pinperf)
[ ${#also_flags[@]} -eq 0 ] || tools+=(also)
"$PINPERF" -s -B 127.0.0.1 -p 5311 2>/dev/null & pids+=($!)
if command -v "$IPERF3" >/dev/null; then "$IPERF3" -s -B 127.0.0.1 -p 5211 >/dev/null 2>&1 & pids+=($!); tools+=(iperf3); fi
if command -v "$IPERF2" >/dev/null; then "$IPERF2" -s -B 127.0.0.1 -p 5011 >/dev/null 2>&1 & pids+=($!); tools+=(iperf2); fi
if [ -n "$BLAST" ]; then "${blast_env[@]}" "$BLAST" -s 5310 >/dev/null 2>&1 & pids+=($!); tools+=(blast); fi
sleep 0.5

pinperf_text() { # block streams [flags] -> pinperf's text report
  "$PINPERF" -c 127.0.0.1 -p 5311 -l "$1" -P "$2" -t "$SECS" -i "$SECS" "${pcc[@]}" "${@:3}"
}
total_gbps() { awk '/^#\(\*\*\)/ {printf "%.3f\n", $4 / 1000}'; }
run_pinperf() { # block streams -> Gbit/s (receiver); the placement it chose to placement.csv
  local text
  text=$(pinperf_text "$1" "$2")
  # `# pin plan: local stream-0:cpu0; remote stream-0:cpu1`: the same cores on both ends
  # is paired, any other split.
  echo "$text" | awk -F'; ' -v pt="$r,$1,$2" '/^# pin plan:/ {
    sub(/^# pin plan: local /, "", $1); sub(/^remote /, "", $2)
    print pt "," ($1 == $2 ? "paired" : "split")}' >>"$out/placement.csv"
  echo "$text" | total_gbps
}
run_also() { pinperf_text "$1" "$2" "${also_flags[@]}" | total_gbps; } # with ALSO's flags
run_iperf3() {
  "$IPERF3" -c 127.0.0.1 -p 5211 -l "$(to_bytes "$1")" -P "$2" -t "$SECS" "${i3cc[@]}" -J |
    python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}
run_iperf2() {
  "$IPERF2" -c 127.0.0.1 -p 5011 -l "$(to_bytes "$1")" -P "$2" -t "$SECS" "${i2cc[@]}" -y C |
    awk -F, '$6 == -1 {sum = $9; have = 1} $6 != -1 {s += $9} END {if (NR) printf "%.3f\n", (have ? sum : s) / 1e9}'
}
run_blast() {
  "${blast_env[@]}" "$BLAST" -c 127.0.0.1 5310 "$(to_bytes "$1")" "$SECS" "$2" pin | awk '{print $(NF-1)}'
}

raw=$out/raw.csv
echo "round,block,streams,tool,gbps" >"$raw"
echo "round,block,streams,placement" >"$out/placement.csv"
for ((r = 0; r < ROUNDS; r++)); do
  for b in $BLOCKS; do
    for p in $STREAMS; do
      for tool in $(rotate "$r" "${tools[@]}"); do
        g=$("run_$tool" "$b" "$p" || echo "")
        echo "$r,$b,$p,$tool,${g:-NA}" | tee -a "$raw" >&2
        sleep 0.3
      done
    done
  done
done

medians "$raw" block,streams,tool gbps >"$out/summary.csv"
python3 - "$out/summary.csv" "$out/placement.csv" <<'PY' | tee "$out/table.txt"
import collections, csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
# The placement pinperf's default chose at each point (the most frequent over the rounds).
chosen = collections.defaultdict(collections.Counter)
for r in csv.DictReader(open(sys.argv[2])):
    chosen[(r["block"], int(r["streams"]))][r["placement"]] += 1
pts = {}
for r in rows:
    pts.setdefault((r["block"], int(r["streams"])), {})[r["tool"]] = float(r["median_gbps"])
tools = ["pinperf", "iperf2", "iperf3", "blast"]
also = any("also" in v for v in pts.values())
if also:
    tools.insert(1, "also")
print("| block | streams | " + " | ".join(t for t in tools) + " | pinperf / best peer | pinperf / blast |"
      + (" pinperf / also |" if also else "") + " placement |")
print("|---|---|" + "---|" * (len(tools) + 3 + also))
for (b, p), v in sorted(pts.items(), key=lambda kv: (int(kv[0][0].rstrip("kKmM")), kv[0][1])):
    peers = [v[t] for t in ("iperf2", "iperf3") if t in v]
    best = max(peers) if peers else None
    cells = [f"{v[t]:.2f}" if t in v else "-" for t in tools]
    ratio = f"{v['pinperf'] / best:.2f}x" if best else "-"
    yard = f"{v['pinperf'] / v['blast']:.2f}x" if "blast" in v else "-"
    placed = ", ".join(k for k, _ in chosen[(b, p)].most_common()) or "-"
    vs_also = (f" {v['pinperf'] / v['also']:.3f}x |" if "also" in v else " - |") if also else ""
    print(f"| {b} | {p} | " + " | ".join(cells) + f" | {ratio} | {yard} |{vs_also} {placed} |")
PY
echo "raw runs: $raw" >&2
