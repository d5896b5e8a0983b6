#!/usr/bin/env bash
# iperf3's own release check of its RSA authentication (esnet/iperf auth_test.sh): a fresh
# key pair and users file, a server with `--rsa-private-key-path=... --authorized-user=...`
# (a shortened long flag, as getopt_long takes it), then four clients: the right password,
# two wrong ones (one long, with commas), the right one again. Run for every pairing of
# pinperf (as `pinperf iperf3`) and a real iperf3 on either side; each client's exit status
# must be iperf3's (0, 1, 1, 0), and the server must serve the last one after refusing two.
#
#   IPERF3=/work/peers/iperf3-3.21/bin/iperf3 bench-scripts/iperf3-auth-test.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
start_run iperf3-auth-test
work=$(mktemp -d /tmp/pinperf-authtest.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
openssl genrsa -out private.pem 2048 2>/dev/null
openssl rsa -in private.pem -outform PEM -pubout -out public.pem 2>/dev/null
user=mario password=luigi
echo "$user,$(echo -n "{$user}$password" | sha256sum | awk '{ print $1 }')" >authorized-user.txt
echo "iperf3: $($IPERF3 -v | head -1)" >>"$out/env.txt"
passwords=("$password" "very incorrect"
  "very,very,very, incorrect, and really, really, really, really, really long. Just to check."
  "$password")
want="0 1 1 0"
port=5470
pass=0 total=0
{
  echo "| server | client | exit statuses (want $want) | as iperf3's |"
  echo "|---|---|---|---|"
  for server in pinperf iperf3; do
    for client in pinperf iperf3; do
      port=$((port + 1))
      srv=("$IPERF3"); [ $server = pinperf ] && srv=("$PINPERF" iperf3)
      cli=("$IPERF3"); [ $client = pinperf ] && cli=("$PINPERF" iperf3)
      "${srv[@]}" -s -p $port --rsa-private-key-path=./private.pem \
        --authorized-user=./authorized-user.txt >"server-$server-$client.txt" 2>&1 &
      spid=$!
      sleep 0.5
      got=()
      for pw in "${passwords[@]}"; do
        IPERF3_PASSWORD=$pw "${cli[@]}" -c localhost -p $port -t 1 \
          --rsa-public-key-path=./public.pem --username=$user >>"client-$server-$client.txt" 2>&1 &&
          got+=(0) || got+=($?)
        sleep 0.3
      done
      kill $spid 2>/dev/null || true
      wait $spid 2>/dev/null || true
      total=$((total + 1))
      verdict=no
      [ "${got[*]}" = "$want" ] && { verdict=yes; pass=$((pass + 1)); }
      echo "| $server | $client | ${got[*]} | $verdict |"
    done
  done
  echo
  echo "$pass of $total pairings exit as iperf3's auth_test.sh expects."
} | tee "$out/table.md"
tar -czf "$out/raw.tar.gz" -C "$work" --exclude='*.pem' .
echo "results in $out"
