#!/usr/bin/env bash
# The multi-stream fairness study over `pinperf lab` (root): the seed's 60 ms path scaled
# to what two cores can emulate (1 Gbit/s bottleneck, drop-tail queue of 1 BDP, MTU 9000).
#
#   1. relay capacity: one 2 ms path at RATES; received Mb/s / rate, late relay deliveries.
#   2. the study: streams 1 2 4 8 16 x windows x congestion control (threads engine), and
#      the single engine at 8 and 16 streams.
#      windows: seed  = -w 256M (the seed's request; forced past net.core.wmem_max, so
#                       the kernel grants 512 MB like the seed's hosts),
#               bdp   = -w 8M   (one BDP, 7.5 MB, per stream),
#               share = -w BDP/N rounded up to a power of two (the window the tool's
#                       standing-queue diagnosis recommends),
#               auto  = no -w   (kernel autotuning, capped by net.ipv4.tcp_wmem[2]).
#   4. MTU: 4 streams, share window, cubic, at each of MTUS: Mb/s and CPU-seconds per GB
#      (the whole process: both ends' stacks and the relay, all per-packet costs here).
#   3. the seed's hosts: 2005's 2-4 GB machines had a small net.ipv4.tcp_mem. With
#      TCP_MEMS set, the 8- and 16-stream seed-window runs are repeated under each value
#      (pages "min pressure max"); the host's value is restored on exit. TCP_MEMS="" skips.
#
#   sudo bench-scripts/wan-lab.sh      # SECS=15 RTT=60ms RATE=1G QUEUE=1bdp
#
# Every run's JSON (stdout) and lab lines (stderr) are kept under runs/; table.md is the
# summary. One round per point: the emulated path is deterministic, the hosts are not;
# ROUNDS=3 for medians.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "wan-lab.sh: pinperf lab needs root" >&2; exit 2; }
SECS=${SECS:-15}
RTT=${RTT:-60ms}
RATE=${RATE:-1G}
QUEUE=${QUEUE:-1bdp}
STREAMS=${STREAMS:-"1 2 4 8 16"}
WINDOWS=${WINDOWS:-"seed bdp share auto"}
CCS=${CCS:-"cubic bbr"}
ROUNDS=${ROUNDS:-1}
RATES=${RATES:-"1G 2G 3G 4G"}
TCP_MEMS=${TCP_MEMS-"24000 32000 48000;4000 6000 8000"}
MTUS=${MTUS:-"1500 9000"}
SECTIONS=${SECTIONS:-"relay study seedmem mtu"}
start_run wan-lab
mkdir -p "$out/runs"

host_tcp_mem=$(sysctl -n net.ipv4.tcp_mem)
trap 'sysctl -qw net.ipv4.tcp_mem="$host_tcp_mem"' EXIT

# BDP of the study's path in bytes.
bdp=$(python3 -c "
import re
def secs(t):
    m = re.fullmatch(r'([0-9.]+)(ms|s)?', t); v = float(m.group(1))
    return v / 1e3 if m.group(2) == 'ms' else v
def rate(t):
    m = re.fullmatch(r'([0-9.]+)([kKmMgG]?)', t)
    return float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2).lower()]
print(int(rate('$RATE') * secs('$RTT') / 8))")

window_flags() { # window-name streams -> client flags
  case $1 in
    seed) echo "-w 256M --force-window" ;;
    bdp) echo "-w 8M --force-window" ;;
    share)
      python3 -c "
b = $bdp // $2; w = 1 << max(b - 1, 1).bit_length()
print('-w %dk --force-window' % (w // 1024))" ;;
    auto) echo "" ;;
  esac
}

# Waits (up to 60 s) until the host's TCP memory is back near idle, so no run inherits an
# earlier one's sockets (or memory pressure); says so when it is not.
settle() {
  local pages i
  for ((i = 0; i < 60; i++)); do
    pages=$(awk '$1 == "TCP:" { for (f = 2; f < NF; f++) if ($f == "mem") print $(f + 1) }' /proc/net/sockstat)
    [ "$pages" -lt 10000 ] && return 0
    sleep 1
  done
  echo "note: TCP memory still at $pages pages after 60 s" >&2
}

# lab RUN-NAME PATH-FLAGS -- CLIENT-FLAGS
lab() {
  local name=$1; shift
  settle
  "$PINPERF" lab "$@" >"$out/runs/$name.json" 2>"$out/runs/$name.err" ||
    echo "run $name failed: $(tail -1 "$out/runs/$name.err")" >&2
}

echo "section,round,rate,rtt,queue,streams,window,window_flags,cc,engine,tcp_mem,run" >"$out/runs.csv"
record() { echo "$*" | tr ' ' ',' >>"$out/runs.csv"; }

on() { [[ " $SECTIONS " == *" $1 "* ]]; }

for ((r = 0; r < ROUNDS; r++)); do
  # 1. relay capacity
  on relay && for rate in $RATES; do
    name="relay-$rate-r$r"
    lab "$name" --rtt 2ms --rate "$rate" -- -P 2 -t 5 -i 5 -C cubic -J
    record relay "$r" "$rate" 2ms 1bdp 2 auto - cubic threads host "$name"
  done
  # 2. the study
  on study && for p in $STREAMS; do
    for w in $WINDOWS; do
      flags=$(window_flags "$w" "$p")
      for cc in $CCS; do
        engines=threads
        if [ "$p" -ge 8 ] && { [ "$w" = seed ] || [ "$w" = share ]; }; then engines="threads single"; fi
        for eng in $engines; do
          name="study-P$p-$w-$cc-$eng-r$r"
          echo "$name ($flags)" >&2
          # shellcheck disable=SC2086
          lab "$name" --rtt "$RTT" --rate "$RATE" --queue "$QUEUE" -- \
            -P "$p" -t "$SECS" -i 1 $flags -C "$cc" --engine "$eng" -J
          record study "$r" "$RATE" "$RTT" "$QUEUE" "$p" "$w" "${flags// /_}" "$cc" "$eng" host "$name"
        done
      done
    done
  done
  # 3. the seed's hosts: small tcp_mem
  IFS=';' read -ra mems <<<"$TCP_MEMS"
  on seedmem && for mem in "${mems[@]}"; do
    [ -n "$mem" ] || continue
    for p in 8 16; do
      for cc in $CCS; do
        name="seedmem-P$p-${mem// /_}-$cc-r$r"
        echo "$name" >&2
        sysctl -qw net.ipv4.tcp_mem="$mem"
        lab "$name" --rtt "$RTT" --rate "$RATE" --queue "$QUEUE" -- \
          -P "$p" -t "$SECS" -i 1 -w 256M --force-window -C "$cc" -J
        sysctl -qw net.ipv4.tcp_mem="$host_tcp_mem"
        record seedmem "$r" "$RATE" "$RTT" "$QUEUE" "$p" seed "-w_256M_--force-window" "$cc" threads "${mem// /_}" "$name"
      done
    done
  done
  # 4. MTU
  on mtu && for mtu in $MTUS; do
    name="mtu-$mtu-r$r"
    echo "$name" >&2
    flags=$(window_flags share 4)
    # shellcheck disable=SC2086
    lab "$name" --rtt "$RTT" --rate "$RATE" --queue "$QUEUE" --mtu "$mtu" -- \
      -P 4 -t "$SECS" -i 1 $flags -C cubic -J
    record mtu "$r" "$RATE" "$RTT" "$QUEUE" 4 share "${flags// /_}" cubic threads "mtu$mtu" "$name"
  done
done

python3 "$root/bench-scripts/wan-lab-table.py" "$out" | tee "$out/table.md"
