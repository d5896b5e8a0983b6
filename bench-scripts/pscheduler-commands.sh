#!/usr/bin/env bash
# pScheduler's iperf3 commands with pinperf on one side and a real iperf3 on the other.
# The server runs pScheduler's server command (`-s -1 --idle-timeout N --json -p PORT`,
# with the RSA options for the auth cases); the client its client command (`-p PORT -c
# HOST -t T --json` and the case's flags). Both documents go through pScheduler's own
# parser (iperf3_parser.py from a perfsonar/pscheduler checkout, PSCHEDULER_GIT, read with
# `git show`; its `pscheduler` import is given a do-nothing Log), and the result is taken
# as pScheduler's merged-results takes it: the client's, or for -R the server's with the
# client's receiver throughput. Each pinperf document's figures are set beside its own
# "pinperf" member's (pinperf's native report of the same run).
#
#   IPERF3=/work/peers/iperf3-3.21/bin/iperf3 bench-scripts/pscheduler-commands.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PSCHEDULER_GIT=${PSCHEDULER_GIT:-/work/.mirror/perfsonar+pscheduler/repo}
start_run pscheduler-commands
work=$(mktemp -d /tmp/pinperf-psched.XXXXXX)
trap 'pkill -f "idle-timeout 9 --json -p 54" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/ps/pscheduler"
printf 'class Log:\n    def __init__(self, *a, **k): pass\n    def __getattr__(self, n): return lambda *a, **k: None\n' \
  >"$work/ps/pscheduler/__init__.py"
git --git-dir="$PSCHEDULER_GIT" show HEAD:pscheduler-tool-iperf3/iperf3/iperf3_parser.py \
  >"$work/ps/iperf3_parser.py"
auth="$root/tests/fixtures/iperf3-auth"
server_auth="--rsa-private-key-path $auth/private.pem --authorized-users-path $auth/users.csv"
client_auth="--rsa-public-key-path $auth/public.pem --username mary"
export IPERF3_PASSWORD=secret
echo "iperf3: $($IPERF3 -v | head -1)" >>"$out/env.txt"

cases=(
  "tcp|-t 3"
  "P4|-t 3 -P 4"
  "reverse|-t 3 -R"
  "udp|-t 3 -u -b 100M"
  "bidir|-t 3 --bidir"
  "omit|-t 3 -O 1"
  "window|-t 3 -w 4M"
  "mss|-t 3 -M 1400"
  "tos|-t 3 -S 32"
  "congestion|-t 3 -C reno"
  "zerocopy|-t 3 -Z"
  "fq-rate|-t 3 --fq-rate 1G"
  "auth|-t 3 AUTH"
  "auth-reverse|-t 3 -R AUTH"
  "flowlabel|-t 3 -L 4660 V6"
)
port=5440
for c in "${cases[@]}"; do
  name=${c%%|*}
  flags=${c#*|}
  s_extra="" c_extra="" host=127.0.0.1
  if [[ $flags == *V6* ]]; then
    flags=${flags/V6/}
    host=::1
  fi
  if [[ $flags == *AUTH* ]]; then
    flags=${flags/AUTH/}
    s_extra=$server_auth c_extra=$client_auth
  fi
  for orient in pinperf-server pinperf-client; do
    port=$((port + 1))
    case $orient in
      pinperf-server) srv=("$PINPERF" iperf3) cli=("$IPERF3") ;;
      pinperf-client) srv=("$IPERF3") cli=("$PINPERF" iperf3) ;;
    esac
    # shellcheck disable=SC2086
    "${srv[@]}" $s_extra -s -1 --idle-timeout 9 --json -p $port >"$work/$name.$orient.server.json" \
      2>"$work/$name.$orient.server.err" &
    spid=$!
    sleep 0.4
    # shellcheck disable=SC2086
    "${cli[@]}" $c_extra -p $port -c $host $flags --json >"$work/$name.$orient.client.json" \
      2>"$work/$name.$orient.client.err" && crc=0 || crc=$?
    wait $spid && src=0 || src=$?
    echo "$name|$orient|$flags|$crc|$src" >>"$work/runs.txt"
  done
done

PYTHONPATH="$work/ps" python3 - "$work" <<'PY' | tee "$out/table.md"
import json, os, sys
import iperf3_parser
work = sys.argv[1]
def parsed(path):
    text = open(path).read()
    return iperf3_parser.parse_output(text.splitlines(True)), text
def own(doc):
    """pinperf's own figures for the run: its native document's totals."""
    p = doc.get("pinperf") if isinstance(doc, dict) else None
    if not p or not p.get("end"):
        return "-"
    e = p["end"]
    rx = e.get("sum_received", {}).get("bits_per_second")
    return f"{rx / 1e6:.0f} Mb/s received" if rx else "-"
print("| case | pinperf is | exit c/s | pScheduler result (merged) | retr | lost/sent | intervals | pinperf's own |")
print("|---|---|---|---|---|---|---|---|")
ok = bad = 0
for line in open(os.path.join(work, "runs.txt")):
    name, orient, flags, crc, src = line.strip().split("|")
    c, ctext = parsed(f"{work}/{name}.{orient}.client.json")
    s, stext = parsed(f"{work}/{name}.{orient}.server.json")
    reverse = " -R" in f" {flags}"
    # pScheduler's merged-results: the server's result for -R, with the client's
    # receiver throughput copied in; the client's otherwise.
    r = s if reverse else c
    if reverse and r.get("succeeded") and c.get("succeeded"):
        r["summary"]["summary"]["receiver-throughput-bits"] = c["summary"]["summary"].get("throughput-bits")
    good = c.get("succeeded") and s.get("succeeded") and crc == "0" and src == "0"
    ok, bad = ok + bool(good), bad + (not good)
    if not r.get("succeeded"):
        print(f"| {name} `{flags}` | {orient} | {crc}/{src} | failed: {r.get('error')} | | | | |")
        continue
    sm = r["summary"]["summary"]
    doc = json.loads(ctext if orient == "pinperf-client" else stext)
    rx = sm.get("receiver-throughput-bits")
    print(f"| {name} `{flags}` | {orient} | {crc}/{src} | {sm.get('throughput-bits', 0) / 1e6:.0f} Mb/s"
          f"{f', receiver {rx / 1e6:.0f}' if rx else ''} | {sm.get('retransmits', '')} | "
          f"{sm.get('lost', '')}/{sm.get('sent', '')} | {len(r['intervals'])} | {own(doc)} |")
print(f"\n{ok} of {ok + bad} runs: both ends exit 0 and both documents parse.")
PY
for f in "$work"/*.err; do [ -s "$f" ] && { echo "== $(basename "$f")"; head -3 "$f"; }; done >"$out/stderr.txt" || true
tar -czf "$out/raw.tar.gz" -C "$work" .
echo "results in $out"
