#!/usr/bin/env bash
# DESIGN's rule: per-block timing must cost under 1 % of a stream thread's CPU at 8 KiB
# blocks. Measures pinperf's per-block bookkeeping (clock reading, record, batch flushes)
# against an 8 KiB (and 128 KiB) blocking write on loopback; ROUNDS runs, medians.
#
#   bench-scripts/timing-cost.sh        # ROUNDS=5 BLOCKS="8192 131072"
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"8192 131072"}
[ -n "${NO_BUILD:-}" ] || (cd "$root" && cargo build --release --quiet --example timing_cost)
start_run timing-cost
raw=$out/raw.csv
echo "round,block,bookkeeping_ns_per_block,write_ns_per_block,bookkeeping_percent" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for b in $BLOCKS; do
    "$root/target/release/examples/timing_cost" "$b" | tail -1 | sed "s/^/$r,/" | tee -a "$raw" >&2
  done
done
medians "$raw" block bookkeeping_percent | tee "$out/summary.csv"
medians "$raw" block bookkeeping_ns_per_block | tail -n +2
medians "$raw" block write_ns_per_block | tail -n +2
