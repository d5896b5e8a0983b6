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
# Per congestion control and block: ratio of medians, ratio of means, the median of the
# per-round ratios (echo and --no-echo run back to back in each round), and a bootstrap 95 %
# interval of the ratio of means over rounds: how finely these runs can resolve a cost.
import csv, random, statistics, sys
rounds = {}
for r in csv.DictReader(open(sys.argv[1])):
    try:
        rounds.setdefault((r["cc"], r["block"], r["streams"]), {}).setdefault(r["round"], {})[r["mode"]] = float(r["gbps"])
    except ValueError:
        pass
random.seed(1)
print("| congestion control | block | streams | echo Gbit/s (median) | --no-echo Gbit/s (median) | ratio of medians | ratio of means | median of per-round ratios | 95 % interval (ratio of means) | runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (c, b, p) in sorted(rounds, key=lambda k: (k[0], int(k[1].rstrip("kKmM")), k[2])):
    pairs = [(v["echo"], v["no-echo"]) for v in rounds[(c, b, p)].values() if len(v) == 2]
    if not pairs:
        continue
    e, n = [x[0] for x in pairs], [x[1] for x in pairs]
    boot = sorted(
        statistics.mean(x[0] for x in s) / statistics.mean(x[1] for x in s)
        for s in ([random.choice(pairs) for _ in pairs] for _ in range(5000)))
    print(f"| {c} | {b} | {p} | {statistics.median(e):.2f} | {statistics.median(n):.2f} | "
          f"{statistics.median(e) / statistics.median(n):.3f} | {statistics.mean(e) / statistics.mean(n):.3f} | "
          f"{statistics.median(a / b for a, b in pairs):.3f} | {boot[125]:.3f}–{boot[4874]:.3f} | {len(pairs)} |")
PY
