#!/usr/bin/env bash
# The README's WAN case, run again and again (root): `pinperf lab --rtt RTT --rate RATE --
# -P N -t SECS` ROUNDS times for each N in STREAMS. A row per run: exit code, received
# Mb/s, Jain's index, retransmits and whether each stream's sent and received bytes agree.
# What it checks is that the case runs to the end every time, not how fast.
#
#   sudo bench-scripts/lab-repeat.sh        # ROUNDS=10 STREAMS="8 16" SECS=15 CC=bbr
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "lab-repeat.sh: pinperf lab needs root" >&2; exit 2; }
ROUNDS=${ROUNDS:-10}
STREAMS=${STREAMS:-"8 16"}
SECS=${SECS:-15}
RTT=${RTT:-60ms}
RATE=${RATE:-1G}
CC=${CC:-bbr}
start_run lab-repeat
mkdir -p "$out/runs"

echo "streams,round,exit,mbps,jain,retransmits,reconciled" >"$out/runs.csv"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in $STREAMS; do
    base="$out/runs/P$n-r$r"
    rc=0
    "$PINPERF" lab --rtt "$RTT" --rate "$RATE" -- -P "$n" -t "$SECS" -C "$CC" -J \
      >"$base.json" 2>"$base.err" || rc=$?
    python3 - "$base.json" "$n" "$r" "$rc" >>"$out/runs.csv" <<'PY'
import json, sys
path, n, r, rc = sys.argv[1:]
try:
    end = json.load(open(path))["end"]
    got = end["sum_received"]
    ok = all(s["bytes"] == s["sent_bytes"] for s in end["streams"])
    print(f'{n},{r},{rc},{got["bits_per_second"] / 1e6:.1f},'
          f'{end["fairness"]["jain"]:.3f},{got.get("retransmits") or end["sum_sent"].get("retransmits")},'
          f'{"yes" if ok and not end["cut_short"] else "no"}')
except Exception as e:
    print(f'{n},{r},{rc},,,,no ({type(e).__name__})')
PY
    tail -1 "$out/runs.csv"
  done
done

python3 - "$out/runs.csv" >"$out/table.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| streams | runs | to the end, reconciled | median Mb/s | median Jain |")
print("|---|---|---|---|---|")
for n in sorted({r["streams"] for r in rows}, key=int):
    rs = [r for r in rows if r["streams"] == n]
    ok = [r for r in rs if r["exit"] == "0" and r["reconciled"] == "yes"]
    med = lambda k: statistics.median(float(r[k]) for r in ok) if ok else float("nan")
    print(f"| {n} | {len(rs)} | {len(ok)} | {med('mbps'):.1f} | {med('jain'):.3f} |")
PY
cat "$out/table.md"
"$root/bench-scripts/pack-results.sh" "$out" 2>/dev/null || true
