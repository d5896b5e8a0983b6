#!/usr/bin/env bash
# Which placement of sender and receiver threads is fastest when both ends share a host?
# pinperf --loopback with explicit -A LOCAL/REMOTE plans on cores 0 and 1:
#   split  — every stream's receiver on the other core from its sender (0,1/1,0)
#   paired — every stream's sender and receiver on the same core, streams spread (0,1/0,1)
#   half   — senders pinned as paired, receivers left to the scheduler (0,1/none): the
#            yardstick's way (blast pins its client threads only)
#   none   — the scheduler decides (-A none)
# ROUNDS interleaved rounds of SECS each, medians. Needs at least 2 cores.
#
#   bench-scripts/placement.sh            # SECS=2 ROUNDS=5 BLOCKS="8k 128k" STREAMS="1 2 4"
#   CC=bbr MSS=1448 bench-scripts/placement.sh   # under bbr, segments of 1500-byte frames
#   UDP=30G BLOCKS="1472 8k" bench-scripts/placement.sh  # UDP at 30G per stream: loss too
#   WINDOW=8M UDP=30G bench-scripts/placement.sh   # with -w 8M (udp-vs-peers.sh's buffers)
#
# With UDP=RATE each run is `-u -b RATE -l BLOCK` and the receiver's loss (percent) is
# recorded beside its rate; summary.csv then holds the median of both.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"8k 128k"}
STREAMS=${STREAMS:-"1 2 4"}
CC=${CC:-}
MSS=${MSS:-}
extra=()
if [ -n "$CC" ]; then extra+=(-C "$CC"); fi
if [ -n "$MSS" ]; then extra+=(-M "$MSS"); fi
UDP=${UDP:-}
PLACEMENTS=${PLACEMENTS:-"split paired half none"}
if [ -n "$UDP" ]; then extra+=(-u -b "$UDP"); fi
WINDOW=${WINDOW:-}
if [ -n "$WINDOW" ]; then extra+=(-w "$WINDOW"); fi
[ "$(nproc)" -ge 2 ] || { echo "placement.sh needs 2 cores; this host has $(nproc)" >&2; exit 1; }
start_run placement
echo "cc: ${CC:-system default}; mss: ${MSS:-path default}; udp: ${UDP:-no (TCP)}; window: ${WINDOW:-default}" >>"$out/env.txt"

plan() { # name streams -> -A value
  case $1 in
    split) [ "$2" = 1 ] && echo "0/1" || echo "0,1/1,0" ;;
    paired) [ "$2" = 1 ] && echo "0/0" || echo "0,1/0,1" ;;
    half) [ "$2" = 1 ] && echo "0/none" || echo "0,1/none" ;;
    none) echo none ;;
  esac
}

raw=$out/raw.csv
echo "round,block,streams,placement,gbps,lost_percent" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for b in $BLOCKS; do
    for p in $STREAMS; do
      for pl in $(rotate "$r" $PLACEMENTS); do
        # The total line: Mb/s in field 4; with UDP its lost% is field 8.
        res=$("$PINPERF" --loopback -l "$b" -P "$p" -t "$SECS" -i "$SECS" -A "$(plan "$pl" "$p")" "${extra[@]}" |
          awk -v udp="$UDP" '/^#\(\*\*\)/ {printf "%.3f,%s\n", $4 / 1000, (udp == "" ? "" : $8)}')
        echo "$r,$b,$p,$pl,${res:-NA,NA}" | tee -a "$raw" >&2
      done
    done
  done
done
medians "$raw" block,streams,placement gbps | tee "$out/summary.csv"
if [ -n "$UDP" ]; then medians "$raw" block,streams,placement lost_percent | tee "$out/loss.csv"; fi
