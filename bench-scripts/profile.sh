#!/usr/bin/env bash
# Where the CPU goes, both ends at once: each tool in turn on loopback under perf
# (cpu-clock sampling, whole machine, call graphs: client, server and softirq together),
# at BLOCK and each of STREAMS, under each of CCS. Per run: Gbit/s, busy cores
# (/proc/stat), CPU-ns per byte (and cycles per byte at the CPU's nominal clock: this VM
# has no hardware counters), the time by category (copy, TCP/IP, syscall entry, scheduler
# and wakeups, clock, the tool's own code, idle) and the top symbols per command.
#
#   IPERF3=/work/peers/iperf3/bin/iperf3 bench-scripts/profile.sh
#   # BLOCK=8k STREAMS="1 2" CCS="cubic bbr" TOOLS="pinperf iperf2 blast" SECS=4 PINPERF_ARGS=
#
# TOOLS may name blast, the yardstick (../shared/yardstick/blast.c), run under each CC
# through bench-scripts/sockopt-shim.c as vs-peers.sh runs it.
set -euo pipefail
# perf needs symbols: the release build with them (target/profiling/pinperf).
PINPERF_PROFILE=${PINPERF_PROFILE:-profiling}
source "$(dirname "$0")/lib.sh"
BLOCK=${BLOCK:-8k}
STREAMS=${STREAMS:-"1 2"}
CCS=${CCS:-"cubic bbr"}
TOOLS=${TOOLS:-"pinperf iperf2"}
SECS=${SECS:-4}
PINPERF_ARGS=${PINPERF_ARGS:-}
command -v perf >/dev/null || { echo "perf is missing: apt-get install -y linux-perf" >&2; exit 2; }
ensure_peers
build_blast
[[ " $TOOLS " != *" blast "* ]] || build_shim
start_run profile
mhz=$(awk -F: '/cpu MHz/ {print $2; exit}' /proc/cpuinfo)

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$PINPERF" -s -B 127.0.0.1 -p 5314 2>/dev/null & pids+=($!)
"$IPERF2" -s -B 127.0.0.1 -p 5014 >/dev/null 2>&1 & pids+=($!)
"$IPERF3" -s -B 127.0.0.1 -p 5214 >/dev/null 2>&1 & pids+=($!)
# The yardstick's server takes its congestion control from each client (the sender's is
# what counts); the shim sets it on the client.
if [ -n "$BLAST" ]; then "$BLAST" -s 5310 >/dev/null 2>&1 & pids+=($!); fi
sleep 0.5

run_tool() { # tool streams cc -> Gbit/s
  case $1 in
    pinperf)
      # shellcheck disable=SC2086
      "$PINPERF" -c 127.0.0.1 -p 5314 -l "$BLOCK" -P "$2" -t "$SECS" -i "$SECS" -C "$3" $PINPERF_ARGS -J |
        python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))' ;;
    iperf3)
      "$IPERF3" -c 127.0.0.1 -p 5214 -l "$(to_bytes "$BLOCK")" -P "$2" -t "$SECS" -C "$3" -J |
        python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))' ;;
    iperf2)
      "$IPERF2" -c 127.0.0.1 -p 5014 -l "$(to_bytes "$BLOCK")" -P "$2" -t "$SECS" -Z "$3" -y C |
        awk -F, '$6 == -1 {sum = $9; have = 1} $6 != -1 {s += $9} END {if (NR) printf "%.3f\n", (have ? sum : s) / 1e9}' ;;
    blast)
      LD_PRELOAD="$SHIM" SHIM_CC="$3" "$BLAST" -c 127.0.0.1 5310 "$(to_bytes "$BLOCK")" "$SECS" "$2" pin | awk '{print $(NF-1)}' ;;
  esac
}

echo "tool,cc,streams,gbps,busy_cores,cpu_ns_per_byte,cycles_per_byte" >"$out/runs.csv"
for cc in $CCS; do
  for p in $STREAMS; do
    for tool in $TOOLS; do
      tag=$tool-$cc-$p
      t0=$(cpu_ticks)
      g=$(perf record -q -e cpu-clock -F 999 -a -g -o "$out/$tag.data" -- bash -c "$(declare -f run_tool to_bytes); PINPERF='$PINPERF' IPERF2='$IPERF2' IPERF3='$IPERF3' BLAST='$BLAST' SHIM='$SHIM' BLOCK='$BLOCK' SECS='$SECS' PINPERF_ARGS='$PINPERF_ARGS' run_tool $tool $p $cc" 2>/dev/null)
      t1=$(cpu_ticks)
      bc=$(busy_cores "$t0" "$t1")
      nspb=$(awk -v g="$g" -v c="$bc" 'BEGIN {printf "%.4f", 8 * c / g}')
      cpb=$(awk -v n="$nspb" -v m="$mhz" 'BEGIN {printf "%.3f", n * m / 1000}')
      echo "$tool,$cc,$p,$g,$bc,$nspb,$cpb" | tee -a "$out/runs.csv" >&2
      perf report -i "$out/$tag.data" --no-children --sort comm,dso,sym --stdio -g none 2>/dev/null |
        grep -E '^ +[0-9.]+%' >"$out/top-$tag.txt" || true
      sed -i 41,\$d "$out/top-$tag.txt"
      perf report -i "$out/$tag.data" --no-children --sort sym --stdio -g none 2>/dev/null |
        grep -E '^ +[0-9.]+%' >"$out/syms-$tag.txt" || true
      rm -f "$out/$tag.data"
      sleep 0.3
    done
  done
done

# Time by category, from the flat symbol lists (share of all samples, idle included).
python3 - "$out" <<'PY' | tee "$out/table.txt"
import csv, glob, os, re, sys
out = sys.argv[1]
cats = [
    ("idle", r"halt|idle|cpuidle|mwait|poll_idle"),
    ("copy", r"copy_user|copy_to_iter|copy_from_iter|memcpy|rep_movs|copy_page|csum_partial_copy|skb_copy_datagram"),
    ("clock", r"clock_gettime|vdso|read_tsc|ktime_get|Instant"),
    ("sched+wakeup", r"schedule|switch_to|try_to_wake|wake_up|finish_task|enqueue|dequeue|pick_next|update_curr|futex|sk_wait|autoremove_wake"),
    ("syscall entry", r"entry_SYSCALL|syscall_|do_syscall|__x64_sys|ksys_|__sys_|exit_to_user|syscall_exit|fdget|sock_sendmsg|sock_recvmsg|__libc_(send|recv|write|read)|^write$|^read$|__GI___libc"),
    ("tcp/ip+skb", r"tcp_|ip_|__ip|skb|kfree|kmalloc|kmem_cache|__alloc|page_frag|net_rx|napi|__netif|netif|loopback|dev_|__dev|__local_bh|do_softirq|__napi|sk_|lock_sock|release_sock|inet_|mem_cgroup|__slab|slab|refill|nf_|validate_xmit|qdisc|__qdisc|sch_"),
    ("tool", r"pinperf|crossbeam|Batcher|iperf|Listener|reporter|thread_|blast|^srv$|^cli$"),
]
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
head = "| tool | cc | streams | Gbit/s | busy cores | CPU-ns/B | cycles/B | " + " | ".join(c for c, _ in cats) + " | other |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for r in runs:
    tag = f"{r['tool']}-{r['cc']}-{r['streams']}"
    shares = {c: 0.0 for c, _ in cats}
    other = 0.0
    for line in open(os.path.join(out, f"syms-{tag}.txt")):
        m = re.match(r"\s*([0-9.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2)
        for c, rx in cats:
            if re.search(rx, sym):
                shares[c] += pct
                break
        else:
            other += pct
    print(f"| {r['tool']} | {r['cc']} | {r['streams']} | {r['gbps']} | {r['busy_cores']} | {r['cpu_ns_per_byte']} | {r['cycles_per_byte']} | "
          + " | ".join(f"{shares[c]:.1f}" for c, _ in cats) + f" | {other:.1f} |")
PY
