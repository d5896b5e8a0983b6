#!/usr/bin/env bash
# Do the tools that read iperf3's -J read pinperf's? pinperf's iperf3 command line
# (`pinperf iperf3 -c ... -J`) against `iperf3 -s` for TCP, -P 4, -R and UDP, and (as root)
# UDP through `pinperf lab --loss 1%`, each document read by iperf3-python's TestResult
# (pip, in a throwaway venv) and by pScheduler's own iperf3 parser (its
# iperf3_parser.py from a perfsonar/pscheduler checkout, PSCHEDULER_GIT, read with
# `git show`; its `pscheduler` import is given a do-nothing Log), and by the field mapping
# of edgard/iperf3_exporter (internal/iperf/iperf.go: TCP from end.sum_sent and
# end.sum_received, UDP "sent" from end.streams[0].udp and "received" from end.sum; Go
# is not on these hosts, so its mapping is applied here, path for path). Prints what each
# read.
#
#   PSCHEDULER_GIT=/path/to/pscheduler/.git bench-scripts/iperf3-readers.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PSCHEDULER_GIT=${PSCHEDULER_GIT:-/work/.mirror/perfsonar+pscheduler/repo}
start_run iperf3-readers
work=$(mktemp -d /tmp/pinperf-readers.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
python3 -m venv "$work/venv" && "$work/venv/bin/pip" install -q iperf3
mkdir -p "$work/ps/pscheduler"
printf 'class Log:\n    def __init__(self, *a, **k): pass\n    def __getattr__(self, n): return lambda *a, **k: None\n' \
  >"$work/ps/pscheduler/__init__.py"
git --git-dir="$PSCHEDULER_GIT" show HEAD:pscheduler-tool-iperf3/iperf3/iperf3_parser.py \
  >"$work/ps/iperf3_parser.py"
"$IPERF3" -s -p 5451 >/dev/null 2>&1 & pids+=($!)
echo "iperf3: $("$IPERF3" -v | head -1)" >>"$out/env.txt"
sleep 0.5
docs=()
for args in "-t 2" "-t 2 -P 4" "-t 2 -R" "-t 2 -u -b 100M"; do
  f="$work/$(echo "$args" | tr ' ' '_').json"
  "$PINPERF" iperf3 -c 127.0.0.1 -p 5451 $args -J >"$f"
  docs+=("$f")
done
if [ "$(id -u)" = 0 ]; then
  f="$work/lab_udp_loss_1pct.json"
  "$PINPERF" lab --rtt 10ms --rate 1G --loss 1% -- -u -b 100M -t 2 -l 1400 --format iperf3-json \
    >"$f" 2>/dev/null
  docs+=("$f")
else
  echo "skipped the lab case: it needs root"
fi
PYTHONPATH="$work/ps" "$work/venv/bin/python" - "${docs[@]}" <<'PY' | tee "$out/table.md"
import json, os, sys
from iperf3.iperf3 import TestResult
import iperf3_parser
def exporter(doc):
    """iperf3_exporter's Result from a document, as its iperf.go fills it."""
    end = doc.get("end", {})
    if doc["start"]["test_start"]["protocol"] != "UDP":
        s, r = end.get("sum_sent", {}), end.get("sum_received", {})
        return (f"sent {s.get('bits_per_second', 0) / 1e6:.0f} Mb/s, received "
                f"{r.get('bits_per_second', 0) / 1e6:.0f} Mb/s, retr {s.get('retransmits', 0)}")
    sent = (end.get("streams") or [{}])[0].get("udp", {})
    got = end.get("sum", {})
    return (f"sent {sent.get('bits_per_second', 0) / 1e6:.0f} Mb/s; received "
            f"{got.get('bits_per_second', 0) / 1e6:.0f} Mb/s, lost {got.get('lost_packets', 0)}/"
            f"{got.get('packets', 0)} ({got.get('lost_percent', 0):.2f} %)")
print("| document | iperf3-python TestResult | pScheduler parse_output | iperf3_exporter |")
print("|---|---|---|---|")
for f in sys.argv[1:]:
    text = open(f).read()
    r = TestResult(text)
    if r.protocol == "TCP":
        py = f"TCP x{r.num_streams}: sent {r.sent_Mbps:.0f} Mb/s, received {r.received_Mbps:.0f} Mb/s, retr {r.retransmits}"
    else:
        py = f"UDP: {r.Mbps:.0f} Mb/s, lost {r.lost_packets}/{r.packets} ({r.lost_percent:.2f} %), jitter {r.jitter_ms:.3f} ms"
    ps = iperf3_parser.parse_output(text.splitlines(True))
    s = ps.get("summary", {}).get("summary", {})
    got = "failed: " + ps["error"] if not ps["succeeded"] else \
        f"{s.get('throughput-bits', 0) / 1e6:.0f} Mb/s, retr {s.get('retransmits')}, lost {s.get('lost')}/{s.get('sent')}, {len(ps['intervals'])} intervals"
    print(f"| {os.path.basename(f)} | {py} | {got} | {exporter(json.loads(text))} |")
PY
