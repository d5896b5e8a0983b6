#!/usr/bin/env bash
# iperf3's own release checklist (esnet/iperf test_commands.sh, its client commands) run
# three ways on loopback: the real iperf3 client against `iperf3 -s` (the reference),
# pinperf's iperf3 command line against `iperf3 -s`, and against `pinperf iperf3 -s`. A
# command passes when it exits 0 (with -J, when its output also parses as JSON). Prints
# each command's three results and the counts; `-t 5` becomes `-t $SECS`.
#
#   bench-scripts/iperf3-commands.sh          # SECS=1 HOST=localhost IPERF3=iperf3
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-1}
HOST=${HOST:-localhost}
start_run iperf3-commands
link_dir=$(mktemp -d /tmp/pinperf-as-iperf3.XXXXXX)
ln -s "$PINPERF" "$link_dir/iperf3"
AS_IPERF3=$link_dir/iperf3
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$link_dir"
}
trap cleanup EXIT
"$IPERF3" -s -p 5431 >/dev/null 2>&1 & pids+=($!)
echo "iperf3: $("$IPERF3" -v | head -1)" >>"$out/env.txt"
"$AS_IPERF3" -s -p 5432 >/dev/null 2>&1 & pids+=($!)
sleep 0.5

commands=(
  "-V -t 5 -T test1" "-u -V -t 5" "-i .3 -O 2 -t 5" "-i 1 -J -t 5" "-4 -t 5" "-4 -u -t 5"
  "-6 -t 5" "-6 -u -t 5" "-V -t 5 --fq-rate 5m" "-u -V -t 5 --fq-rate 5m" "--sctp -V -t 5"
  "-P 3 -t 5" "-u -P 3 -t 5" "-P 2 -t 5 -R" "-u -P 2 -t 5 -R" "-P 2 -t 5 --bidir"
  "-u -P 2 -t 5 --bidir" "-Z -t 5" "-Z -t 5 -R" "-t 5 -w 8M" "-n 5M" "-n 5M -u -b1G"
  "-n 5M -R" "-n 5M -u -b1G -R" "-n 5M -t 5" "-k 1K" "-k 1K -u -b1G" "-k 1K -R"
  "-k 1K -u -b1G -R" "-A 2/2" "-A 2/2 -u -b1G" "-u -b1G/100" "-C reno -V" "-M 1000 -V"
)

# bin port args -> ok|FAIL
run() {
  local out
  if out=$(timeout 30 "$1" -c "$HOST" -p "$2" ${3//-t 5/-t $SECS} 2>&1); then
    if [[ " $3 " == *" -J "* ]] && ! python3 -c 'import json,sys; json.loads(sys.stdin.read())' <<<"$out" 2>/dev/null; then
      echo "FAIL(json)"
    else
      echo ok
    fi
  else
    echo FAIL
  fi
}

table=$out/table.md
{
  echo "| command | iperf3 → iperf3 -s | pinperf iperf3 → iperf3 -s | pinperf iperf3 → pinperf iperf3 -s |"
  echo "|---|---|---|---|"
} >"$table"
ref=0; vs_real=0; vs_own=0; both=0
for c in "${commands[@]}"; do
  a=$(run "$IPERF3" 5431 "$c"); b=$(run "$AS_IPERF3" 5431 "$c"); d=$(run "$AS_IPERF3" 5432 "$c")
  echo "| \`iperf3 -c $HOST $c\` | $a | $b | $d |" | tee -a "$table"
  [ "$a" = ok ] && ref=$((ref + 1))
  [ "$a" = ok ] && [ "$b" = ok ] && vs_real=$((vs_real + 1))
  [ "$a" = ok ] && [ "$d" = ok ] && vs_own=$((vs_own + 1))
  [ "$a" = ok ] && [ "$b" = ok ] && [ "$d" = ok ] && both=$((both + 1))
done
{
  echo
  echo "Of ${#commands[@]} commands, $ref pass with the real iperf3; of those, pinperf's iperf3"
  echo "command line passes $vs_real against iperf3 -s and $vs_own against its own server ($both both)."
} | tee -a "$table"
