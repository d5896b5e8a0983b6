#!/usr/bin/env bash
# Streams 1, 2, 4, 8, 16: aggregate, fairness and CPU per stream count, threads and single
# engine, on loopback against a pinperf server (pinperf compare --csv).
#
#   bench-scripts/stream-sweep.sh         # SECS=2 BLOCK=128k ENGINES=threads,single
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-2}
BLOCK=${BLOCK:-128k}
ENGINES=${ENGINES:-threads,single}
start_run stream-sweep
"$PINPERF" -s -B 127.0.0.1 -p 5314 2>/dev/null &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
sleep 0.3

"$PINPERF" compare -c 127.0.0.1 -p 5314 --blocks "$BLOCK" --streams 1,2,4,8,16 --engines "$ENGINES" \
  -t "$SECS" --csv | tee "$out/raw.csv" >&2
python3 - "$out/raw.csv" <<'PY' | tee "$out/table.txt"
import csv, sys
print("| streams | engine | Mb/s | Jain | retransmits | local CPU % | remote CPU % | Gbit/s per busy core |")
print("|---|---|---|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    f = lambda k, d=1: f"{float(r[k]):.{d}f}" if r[k] else "-"
    print(f"| {r['streams']} | {r['engine']} | {float(r['bits_per_second']) / 1e6:.1f} | {f('jain', 3)} | "
          f"{r['retransmits'] or '-'} | {f('local_cpu_percent')} | {f('remote_cpu_percent')} | {f('gbps_per_busy_core', 2)} |")
PY
