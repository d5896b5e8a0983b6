#!/usr/bin/env bash
# How sender and receiver threads sharing a core take turns: pinperf against the yardstick
# (blast) at one point on loopback, ROUNDS interleaved rounds. In the middle of each run it
# samples, for SAMPLE seconds, the context switches on each core (`perf stat -a -A`) and,
# from `ss -tinm`, each data receiver's receive buffer (skmem rb) and receive-side RTT
# estimate (rcv_rtt, what autotuning sizes the buffer by) and each sender's rwnd_limited
# share. A receiver that keeps up sleeps on an empty queue and wakes its core at each
# arrival; one that falls behind leaves the sender blocked on a full window instead.
#
#   bench-scripts/wake-modes.sh      # CC=cubic BLOCK=128k STREAMS=2 SECS=4 SAMPLE=2 ROUNDS=5
#
# Writes bench-results/wake-modes-*/{env.txt,raw.csv,summary.csv} and prints the summary:
# per tool, medians of Gbit/s, switches per core per second, switches per GB, the
# receivers' rb (MB) and the senders' rwnd_limited (%).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

CC=${CC:-cubic}
BLOCK=${BLOCK:-128k}
STREAMS=${STREAMS:-2}
SECS=${SECS:-4}
SAMPLE=${SAMPLE:-2}
ROUNDS=${ROUNDS:-5}
[[ $SECS =~ ^[0-9]+$ ]] || { echo "SECS=$SECS: whole seconds only" >&2; exit 2; }
# The sample starts 1 s in and must end before the run does (a one-stream run spends its
# first 0.7 s probing placement: STREAMS=1 wants SECS >= SAMPLE + 2 too).
[ "$SECS" -ge $((SAMPLE + 2)) ] || { echo "SECS=$SECS: at least SAMPLE + 2 ($((SAMPLE + 2)))" >&2; exit 2; }
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 2; }
perf stat -a -e context-switches -x, -- true >/dev/null 2>&1 ||
  { echo "perf stat -a fails here (perf for this kernel? kernel.perf_event_paranoid?)" >&2; exit 2; }
command -v ss >/dev/null || { echo "needs ss (apt-get install iproute2)" >&2; exit 2; }
build_blast
[ -n "$BLAST" ] || { echo "needs the yardstick (YARDSTICK=path/to/blast.c)" >&2; exit 2; }
build_shim || { echo "could not build the sockopt shim" >&2; exit 2; }
start_run wake-modes
echo "cc: $CC; block: $BLOCK; streams: $STREAMS; secs: $SECS; sample: $SAMPLE" >>"$out/env.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$PINPERF" -s -B 127.0.0.1 -p 5311 >/dev/null 2>&1 & pids+=($!)
LD_PRELOAD="$SHIM" SHIM_CC="$CC" "$BLAST" -s 5310 >/dev/null 2>&1 & pids+=($!)
sleep 0.5

# One run of `tool` in the background; after a second, the sample; then its Gbit/s.
sample() { # tool port -> raw.csv row
  local tool=$1 port=$2 log
  log=$(mktemp)
  case $tool in
    pinperf) "$PINPERF" -c 127.0.0.1 -p "$port" -l "$BLOCK" -P "$STREAMS" -t "$SECS" -i "$SECS" -C "$CC" >"$log" ;;
    blast) LD_PRELOAD="$SHIM" SHIM_CC="$CC" "$BLAST" -c 127.0.0.1 "$port" "$(to_bytes "$BLOCK")" "$SECS" "$STREAMS" pin >"$log" ;;
  esac &
  local run=$!
  sleep 1
  local cs
  cs=$(perf stat -a -A -e context-switches -x, -- sleep "$SAMPLE" 2>&1 >/dev/null |
    awk -F, '/context-switches/ && $2 ~ /^[0-9]+$/ {gsub(/CPU/, "", $1); printf "%s%s:%s", sep, $1, $2; sep = " "}')
  # Receivers: the server's end (local port) of connections that carried data; senders: the
  # client's end, which alone reports rwnd_limited.
  local socks
  socks=$(ss -tinmH state established "( sport = :$port or dport = :$port )")
  wait "$run"
  local gbps
  case $tool in
    pinperf) gbps=$(awk '/^#\(\*\*\)/ {printf "%.3f", $4 / 1000}' "$log") ;;
    blast) gbps=$(awk '{print $(NF-1)}' "$log") ;;
  esac
  rm -f "$log"
  echo "$socks" | awk -v port=":$port" -v pre="$r,$tool,$gbps,$cs" '
    /^[0-9]/ {local = $3}
    /skmem/ {
      rx = 0; if (match($0, /bytes_received:[0-9]+/)) rx = substr($0, RSTART + 15, RLENGTH - 15) + 0
      if (local ~ port "$" && rx > 1e8) {
        match($0, /rb[0-9]+/); rb = rb sep1 sprintf("%.1f", substr($0, RSTART + 2, RLENGTH - 2) / 1e6)
        v = "-"; if (match($0, /rcv_rtt:[0-9.]+/)) v = substr($0, RSTART + 8, RLENGTH - 8)
        rtt = rtt sep1 v; sep1 = " "
      }
      if (match($0, /rwnd_limited:[0-9]+ms\([0-9.]+%/)) {
        s = substr($0, RSTART, RLENGTH); sub(/.*\(/, "", s); sub(/%/, "", s)
        lim = lim sep2 s; sep2 = " "
      }
    }
    END {print pre "," rb "," rtt "," lim}' >>"$out/raw.csv"
}

echo "round,tool,gbps,switches_per_cpu,receiver_rb_mb,receiver_rcv_rtt_ms,sender_rwnd_limited_pct" >"$out/raw.csv"
for r in $(seq 1 "$ROUNDS"); do
  sample pinperf 5311
  sample blast 5310
done

# Medians per tool: Gbit/s, switches per core per second, switches per GB moved, the
# receivers' largest rb and the senders' mean rwnd_limited.
python3 - "$out" "$SAMPLE" <<'EOF'
import csv, statistics, sys
out, sample = sys.argv[1], float(sys.argv[2])
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
med = lambda xs: statistics.median(xs) if xs else float("nan")
with open(f"{out}/summary.csv", "w") as f:
    w = csv.writer(f)
    w.writerow(["tool", "runs", "gbps", "switches_per_core_s", "switches_per_gb", "receiver_rb_mb_max", "sender_rwnd_limited_pct"])
    for tool in dict.fromkeys(r["tool"] for r in rows):
        rs = [r for r in rows if r["tool"] == tool and r["gbps"] and r["switches_per_cpu"]]
        cs = lambda r: [float(x.split(":")[1]) for x in r["switches_per_cpu"].split()]
        per_core = [statistics.mean(cs(r)) / sample for r in rs]
        per_gb = [sum(cs(r)) / (float(r["gbps"]) / 8 * sample) for r in rs]
        rb = [max(map(float, r["receiver_rb_mb"].split())) for r in rs if r["receiver_rb_mb"]]
        lim = [statistics.mean(map(float, r["sender_rwnd_limited_pct"].split())) for r in rs if r["sender_rwnd_limited_pct"]]
        w.writerow([tool, len(rs), f"{med([float(r['gbps']) for r in rs]):.2f}", f"{med(per_core):.0f}",
                    f"{med(per_gb):.0f}", f"{med(rb):.1f}", f"{med(lim):.1f}"])
EOF
column -s, -t "$out/summary.csv"
echo "raw: $out/raw.csv"
