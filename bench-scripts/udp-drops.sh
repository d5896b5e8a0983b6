#!/usr/bin/env bash
# Who held the receiver's core when UDP datagrams were dropped. Runs each tool at RATE on
# loopback under `perf record -a` of the kernel's receive-queue drops
# (udp:udp_fail_queue_rcv_skb) and the scheduler's switches and wake-ups, then splits the
# drops into bursts (a gap of more than 1 ms starts a new one) and says, at each burst's
# first drop, what the receiving thread was doing:
#   running  - on its core, not keeping up (how long it had run);
#   waiting  - runnable but off its core (how long, and which tasks held the core meanwhile);
#   asleep   - blocked (a drop then means the wake-up itself came late).
# Only the tool's own threads are candidates (pinperf's stream-N, iperf3's): the sender is
# the one in whose context most drops happened (loopback delivers in the sender's
# softirq), the receiver the one that ran longest besides it. perf's own thread shows
# among what held the receiver's core: it is part of what a traced run costs.
# Output: runs.csv (every burst), table.txt (per tool: drops and bursts by state, the
# tasks that held a waiting receiver's core longest), and each run's trace (*.txt.gz), cut
# to the 20 ms before each burst unless KEEP_TRACES=1.
#
#   RATE=20G SIZE=1472 ROUNDS=3 bench-scripts/udp-drops.sh
#   IPERF3=/work/peers/bin/iperf3-321 TOOLS="pinperf iperf3" bench-scripts/udp-drops.sh
#
# Needs root and perf (apt install linux-perf). Every tool gets the same -w WINDOW;
# iperf3 gets IPERF3_ARGS (--gsro by default: GSO and GRO as pinperf uses them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RATE=${RATE:-20G}
SIZE=${SIZE:-1472}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-8M}
TOOLS=${TOOLS:-"pinperf iperf3"}
PINPERF_ARGS=${PINPERF_ARGS:-}
IPERF3_ARGS=${IPERF3_ARGS---gsro}
command -v perf >/dev/null || { echo "udp-drops.sh: needs perf (apt install linux-perf)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "udp-drops.sh: perf record -a of tracepoints needs root" >&2; exit 2; }
ensure_peers
start_run udp-drops
echo "rate $RATE, datagrams $SIZE B, every tool -w $WINDOW, $SECS s; pinperf options: ${PINPERF_ARGS:-(none)}; iperf3 options: ${IPERF3_ARGS:-(none)}" >>"$out/env.txt"

pids=()
cleanup() { for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
tools=()
for t in $TOOLS; do
  case $t in
    pinperf) tools+=(pinperf) ;;
    iperf3)
      if command -v "$IPERF3" >/dev/null; then
        "$IPERF3" -s -B 127.0.0.1 -p 5213 >/dev/null 2>&1 & pids+=($!); tools+=(iperf3)
      else
        echo "note: no $IPERF3; running without iperf3" >&2
      fi ;;
  esac
done
sleep 0.5

# The command line of one tool's run, into cmd[].
tool_cmd() {
  case $1 in
    # shellcheck disable=SC2206
    pinperf) cmd=("$PINPERF" --loopback -u -b "$RATE" -l "$SIZE" -w "$WINDOW" -t "$SECS" $PINPERF_ARGS) ;;
    # shellcheck disable=SC2206
    iperf3) cmd=("$IPERF3" -c 127.0.0.1 -p 5213 -u -b "$RATE" -l "$SIZE" -w "$WINDOW" -t "$SECS" $IPERF3_ARGS) ;;
  esac
}

for r in $(seq 1 "$ROUNDS"); do
  for t in $(rotate "$r" "${tools[@]}"); do
    tool_cmd "$t"
    # perf's messages (a lost-events warning among them) and the tool's stderr go to
    # $t-$r.perf.log.
    perf record -q -a -m 1024 -o "$out/perf.data" \
      -e udp:udp_fail_queue_rcv_skb -e sched:sched_switch -e sched:sched_wakeup \
      -- "${cmd[@]}" >"$out/$t-$r.out" 2>"$out/$t-$r.perf.log" || echo "round $r: $t failed (see $t-$r.out, $t-$r.perf.log)" >&2
    [ -s "$out/perf.data" ] || { echo "round $r: $t: perf recorded nothing (see $t-$r.perf.log)" >&2; continue; }
    perf script -i "$out/perf.data" 2>>"$out/$t-$r.perf.log" | gzip >"$out/$t-$r.txt.gz" || true
    rm -f "$out/perf.data"
  done
done

python3 - "$out" <<'PY'
import collections, csv, glob, gzip, os, re, sys

out = sys.argv[1]
line_re = re.compile(r"^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
switch_re = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
wakeup_re = re.compile(r"comm=(.*?) pid=(\d+) .*target_cpu=(\d+)")


def events(path):
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            m = line_re.match(line)
            if m:
                comm, pid, cpu, t, ev, rest = m.groups()
                yield comm, int(pid), int(cpu), float(t), ev, rest


def analyse(path, tool):
    evs = list(events(path))
    mine = (lambda c: c.startswith("stream-")) if tool == "pinperf" else (lambda c: c == tool)
    drops = [e for e in evs if e[4] == "udp:udp_fail_queue_rcv_skb"]
    by_tool = collections.Counter(e[1] for e in drops if mine(e[0]))
    if not by_tool:
        return [], len(drops)
    sender = by_tool.most_common(1)[0][0]
    ran, since = collections.Counter(), {}
    for comm, pid, cpu, t, ev, rest in evs:
        if ev == "sched:sched_switch":
            m = switch_re.search(rest)
            if m:
                if cpu in since:
                    ran[since[cpu][0]] += t - since[cpu][1]
                since[cpu] = (int(m.group(5)), t) if mine(m.group(4)) else (0, t)
    ran.pop(0, None)
    ran.pop(sender, None)
    rx = ran.most_common(1)[0][0] if ran else None
    names = {}
    # Per CPU: the task on it since when; the receiver's last state change.
    on_cpu = {}
    held = collections.defaultdict(lambda: collections.defaultdict(float))  # cpu -> pid -> s
    rx_state, rx_since, rx_cpu = "unknown", None, None
    wait_marks = {}  # cpu -> (pid -> seconds held) snapshot when the receiver began waiting
    bursts, last_drop = [], None

    def account(cpu, t):
        if cpu in on_cpu:
            pid, since = on_cpu[cpu]
            held[cpu][pid] += t - since
            on_cpu[cpu] = (pid, t)

    for comm, pid, cpu, t, ev, rest in evs:
        if ev == "sched:sched_switch":
            m = switch_re.search(rest)
            if not m:
                continue
            pcomm, ppid, pstate, ncomm, npid = m.group(1), int(m.group(2)), m.group(3), m.group(4), int(m.group(5))
            names[ppid], names[npid] = pcomm, ncomm
            account(cpu, t)
            on_cpu[cpu] = (npid, t)
            if ppid == rx:
                rx_cpu, rx_since = cpu, t
                rx_state = "waiting" if pstate.startswith("R") else "asleep"
                if rx_state == "waiting":
                    wait_marks = {cpu: dict(held[cpu])}
            if npid == rx:
                rx_state, rx_since, rx_cpu = "running", t, cpu
        elif ev == "sched:sched_wakeup":
            m = wakeup_re.search(rest)
            if m and int(m.group(2)) == rx and rx_state == "asleep":
                rx_cpu, rx_since, rx_state = int(m.group(3)), t, "waiting"
                account(rx_cpu, t)
                wait_marks = {rx_cpu: dict(held[rx_cpu])}
        elif ev == "udp:udp_fail_queue_rcv_skb":
            if last_drop is not None and t - last_drop <= 0.001:
                bursts[-1]["drops"] += 1
            else:
                holders = []
                if rx_state == "waiting" and rx_cpu is not None:
                    account(rx_cpu, t)
                    before = wait_marks.get(rx_cpu, {})
                    spent = {p: s - before.get(p, 0.0) for p, s in held[rx_cpu].items()}
                    top = sorted(((s, p) for p, s in spent.items() if s > 50e-6), reverse=True)[:3]
                    holders = [("sender" if p == sender else names.get(p, "?"), p, s * 1e3) for s, p in top]
                bursts.append({"t": t, "drops": 1, "state": rx_state,
                               "for_ms": (t - rx_since) * 1e3 if rx_since else float("nan"),
                               "cpu": rx_cpu, "holders": holders})
            last_drop = t
    t0 = evs[0][3]
    for b in bursts:
        b["abs"], b["t"] = b["t"], b["t"] - t0
    return bursts, len(drops)


def trim(path, bursts):
    """Keeps only the trace's lines from 20 ms before each burst to 2 ms after it."""
    spans = [(b["abs"] - 0.020, b["abs"] + 0.002) for b in bursts]
    kept = []
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            m = line_re.match(line)
            if m and any(a <= float(m.group(4)) <= z for a, z in spans):
                kept.append(line)
    with gzip.open(path, "wt") as f:
        f.writelines(kept)


def loss_of(path):
    """The run's loss % as the tool printed it (pinperf's #(**) line, iperf3's receiver line)."""
    try:
        text = open(path).read()
    except OSError:
        return "?"
    m = re.search(r"^#\(\*\*\)(?:\s+\S+){6}\s+(\S+)", text, re.M) or re.search(r"\(([\d.]+)%\)\s+receiver", text)
    return m.group(1) if m else "?"


rows, totals, losses = [], collections.Counter(), collections.defaultdict(list)
lossy_traces = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(out, "*-*.txt.gz"))):
    tool, rnd = os.path.basename(path)[:-len(".txt.gz")].rsplit("-", 1)
    bursts, n = analyse(path, tool)
    totals[tool] += n
    losses[tool].append(loss_of(path[:-len(".txt.gz")] + ".out"))
    try:
        if re.search(r"lost \d+ (chunks|events)|PERF_RECORD_LOST", open(path[:-len(".txt.gz")] + ".perf.log").read(), re.I):
            lossy_traces[tool].append(rnd)
    except OSError:
        pass
    if os.environ.get("KEEP_TRACES") != "1":
        trim(path, bursts)
    for b in bursts:
        rows.append({"tool": tool, "round": rnd, "t_s": f"{b['t']:.4f}", "drop_events": b["drops"],
                     "receiver": b["state"], "for_ms": f"{b['for_ms']:.2f}", "cpu": b["cpu"],
                     "held_by": " ".join(f"{n}:{p}={ms:.2f}ms" for n, p, ms in b["holders"]),
                     "holders": b["holders"]})
with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["tool", "round", "t_s", "drop_events", "receiver", "for_ms", "cpu", "held_by"],
                       extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
with open(os.path.join(out, "table.txt"), "w") as f:
    for tool in sorted(totals):
        mine = [r for r in rows if r["tool"] == tool]
        states = collections.Counter(r["receiver"] for r in mine)
        drops_by = collections.Counter()
        for r in mine:
            drops_by[r["receiver"]] += r["drop_events"]
        holders = collections.Counter()
        for r in mine:
            for name, _, ms in r["holders"]:
                holders[name] += ms
        print(f"{tool}: {totals[tool]} drop events in {len(mine)} bursts; by the receiver's state: "
              + ", ".join(f"{s} {states[s]} bursts / {drops_by[s]} drops" for s in sorted(states)), file=f)
        print(f"  loss % per run: {' '.join(losses[tool])}", file=f)
        if lossy_traces[tool]:
            print(f"  perf lost events in rounds {' '.join(lossy_traces[tool])}: their states are suspect", file=f)
        if holders:
            print(f"  its core held while it waited (ms, all bursts): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in holders.most_common(6)), file=f)
print(open(os.path.join(out, "table.txt")).read(), end="")
PY
echo "results in $out"
