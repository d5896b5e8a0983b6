#!/usr/bin/env bash
# What block-RTT echoes cost: pinperf with echoes (default) against --no-echo, loopback,
# 8k and 128k blocks, ROUNDS interleaved rounds of SECS each, medians and their ratio.
# Target: echo / no-echo >= 0.98.
#
# CCS lists congestion controls to run under ("default" = the system's, no -C).
#
#   bench-scripts/echo-cost.sh          # SECS=3 ROUNDS=7 BLOCKS="8k 128k" STREAMS=1 CCS="default cubic"
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-3}
ROUNDS=${ROUNDS:-7}
BLOCKS=${BLOCKS:-"8k 128k"}
STREAMS=${STREAMS:-1}
CCS=${CCS:-"default cubic"}
start_run echo-cost

gbps() { # json on stdin -> received Gbit/s
  python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}

raw=$out/raw.csv
echo "round,cc,block,streams,mode,gbps" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for cc in $CCS; do
    ccflag=()
    [ "$cc" = default ] || ccflag=(-C "$cc")
    for b in $BLOCKS; do
      for mode in $(rotate "$r" echo no-echo); do
        flag=("${ccflag[@]}")
        [ "$mode" = no-echo ] && flag+=(--no-echo)
        g=$("$PINPERF" --loopback -l "$b" -P "$STREAMS" -t "$SECS" -i "$SECS" -J "${flag[@]}" | gbps)
        echo "$r,$cc,$b,$STREAMS,$mode,$g" | tee -a "$raw" >&2
      done
    done
  done
done
medians "$raw" cc,block,streams,mode gbps >"$out/summary.csv"
# Loopback under bbr is bimodal (runs land near one of two rates in either mode), so the
# ratio of medians can flip with one run; the ratio of means is printed beside it.
python3 - "$raw" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
runs = {}
for r in csv.DictReader(open(sys.argv[1])):
    try:
        runs.setdefault((r["cc"], r["block"], r["streams"], r["mode"]), []).append(float(r["gbps"]))
    except ValueError:
        pass
print("| congestion control | block | streams | echo Gbit/s (median) | --no-echo Gbit/s (median) | ratio of medians | ratio of means | runs |")
print("|---|---|---|---|---|---|---|---|")
for (c, b, p) in sorted({k[:3] for k in runs}, key=lambda k: (k[0], int(k[1].rstrip("kKmM")), k[2])):
    e, n = runs.get((c, b, p, "echo")), runs.get((c, b, p, "no-echo"))
    if e and n:
        me, mn = statistics.median(e), statistics.median(n)
        print(f"| {c} | {b} | {p} | {me:.2f} | {mn:.2f} | {me / mn:.3f} | "
              f"{statistics.mean(e) / statistics.mean(n):.3f} | {len(e)} |")
PY
