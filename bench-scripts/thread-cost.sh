#!/usr/bin/env bash
# What each of pinperf's threads costs mid-run: context switches (voluntary: it slept;
# involuntary: it was preempted) and CPU ticks per thread over a WINDOW-second sample
# of a running `pinperf --loopback` test, per round; medians per thread name. Shows which
# thread wakes how often (the reporter per batch, echo per block RTT) beside the stream
# threads doing the work. BINS compares builds: name=path pairs, run interleaved.
#
#   bench-scripts/thread-cost.sh                       # -C cubic -l 8k -P 2, this build
#   BINS="base=/tmp/base/pinperf new=target/release/pinperf" ARGS="-C bbr -l 8k -P 1" \
#     bench-scripts/thread-cost.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-2}
ARGS=${ARGS:-"-C cubic -l 8k -P 2"}
BINS=${BINS:-"pinperf=$PINPERF"}
[ -d /proc/self/task ] || { echo "thread-cost.sh needs Linux's /proc/PID/task" >&2; exit 1; }
start_run thread-cost
echo "args: $ARGS; window: ${WINDOW}s; bins: $BINS" >>"$out/env.txt"

# One line per thread of process $1: name-tid voluntary involuntary utime+stime ticks.
snapshot() {
  local t
  for t in /proc/"$1"/task/*; do
    [ -r "$t/status" ] || continue
    echo "$(cat "$t/comm" 2>/dev/null)-${t##*/}" \
      "$(awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2} END {print v + 0, n + 0}' "$t/status" 2>/dev/null)" \
      "$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null)"
  done | sort
}

raw=$out/raw.csv
echo "round,bin,thread,voluntary,involuntary,ticks" >"$raw"
secs=$(awk -v w="$WINDOW" 'BEGIN {print int(w) + 3}')
for ((r = 0; r < ROUNDS; r++)); do
  for pair in $(rotate "$r" $BINS); do
    name=${pair%%=*} bin=${pair#*=}
    # shellcheck disable=SC2086 # ARGS is a list of flags
    "$bin" --loopback $ARGS -t "$secs" >"$out/last-$name.txt" 2>&1 &
    pid=$!
    sleep 1.2
    a=$(snapshot "$pid")
    sleep "$WINDOW"
    b=$(snapshot "$pid")
    wait "$pid" || echo "note: $name exited non-zero in round $r" >&2
    # Threads present in both snapshots; the tid is dropped so names pair across rounds
    # (a name shared by a client and a server thread gets its side from tid order).
    join <(echo "$a") <(echo "$b") |
      awk -v r="$r" -v n="$name" '{
          name = $1; sub(/-[0-9]+$/, "", name); k[name]++
          if (k[name] > 1) name = name "#" k[name]
          printf "%s,%s,%s,%d,%d,%d\n", r, n, name, $5 - $2, $6 - $3, $7 - $4 }' >>"$raw"
    sleep 0.3
  done
done
for m in voluntary involuntary ticks; do
  echo "# median $m per thread over ${WINDOW}s"
  medians "$raw" bin,thread "$m"
done | tee "$out/summary.txt"
tar -C "$out" -czf "$out/raw.tar.gz" raw.csv && rm "$out/raw.csv"
