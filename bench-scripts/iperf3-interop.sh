#!/usr/bin/env bash
# pinperf's client against an iperf3 server, beside iperf3's own client against the same
# server: loopback, interleaved (iperf3, pinperf, then pinperf, iperf3, ...), medians per
# congestion control and stream count. Both read the receiver's figure from JSON: iperf3
# -J end.sum_received.bits_per_second, pinperf -J end.sum_received.bits_per_second (the
# iperf3 server's count of what it read, over the span until its kernel had the last
# byte). IPERF3=path picks the iperf3 (server and client; default the one on PATH,
# Debian's 3.12). ENGINES="threads single" also runs pinperf's single engine (one thread,
# non-blocking writes and poll(), as iperf3's client writes) in the same rounds, as a
# diagnosis of the threaded sender's blocking writes; its rows are "pinperf-single".
# BASE=path runs an older pinperf binary in the same rounds (rows "base"). The table
# also gives each tool's median receiving span past -t (end.sum_received.seconds - SECS):
# time counted into the rate that carried no data.
#
#   flock -x /tmp/pinperf-bench.lock bench-scripts/iperf3-interop.sh
#   ROUNDS=5 SECS=3 STREAMS="1 2" CCS="cubic bbr" ENGINES=threads (defaults)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
IPERF3=${IPERF3:-$(command -v iperf3 || true)}
[ -n "$IPERF3" ] || { echo "iperf3 not found (apt-get install iperf3, or IPERF3=path)" >&2; exit 1; }
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-3}
STREAMS=${STREAMS:-"1 2"}
CCS=${CCS:-"cubic bbr"}
ENGINES=${ENGINES:-threads}
tools="iperf3"
BASE=${BASE:-}
for e in $ENGINES; do
  case $e in
    threads) tools="$tools pinperf" ;;
    single) tools="$tools pinperf-single" ;;
    *) echo "ENGINES: threads or single, not $e" >&2; exit 2 ;;
  esac
done
[ -z "$BASE" ] || tools="$tools base"
start_run iperf3-interop
"$IPERF3" --version | head -1 >> "$out/env.txt"
PORT=${PORT:-15299}
"$IPERF3" -s -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 0.5
echo "tool,cc,streams,round,bits_per_second,sender_bytes,receiver_bytes,seconds" > "$out/raw.csv"
gbps() { python3 -c 'import json,sys; d=json.load(sys.stdin); e=d["end"]; print(e["sum_received"]["bits_per_second"], e["sum_sent"]["bytes"], e["sum_received"]["bytes"], e["sum_received"]["seconds"], sep=",")'; }
run_tool() { # tool cc streams round
  local json
  case $1 in
    iperf3) json=$("$IPERF3" -c 127.0.0.1 -p "$PORT" -t "$SECS" -P "$3" -C "$2" -J) ;;
    pinperf) json=$("$PINPERF" -c 127.0.0.1 -p "$PORT" --peer iperf3 -t "$SECS" -P "$3" -C "$2" -J 2>>"$out/pinperf-stderr.txt") ;;
    base) json=$("$BASE" -c 127.0.0.1 -p "$PORT" --peer iperf3 -t "$SECS" -P "$3" -C "$2" -J 2>>"$out/pinperf-stderr.txt") ;;
    pinperf-single) json=$("$PINPERF" -c 127.0.0.1 -p "$PORT" --peer iperf3 --engine single -t "$SECS" -P "$3" -C "$2" -J 2>>"$out/pinperf-stderr.txt") ;;
  esac
  echo "$json" | gzip -c >> "$out/raw-json.gz"
  echo "$1,$2,$3,$4,$(echo "$json" | gbps)" >> "$out/raw.csv"
  sleep 0.3
}
for cc in $CCS; do
  for p in $STREAMS; do
    for r in $(seq 1 "$ROUNDS"); do
      # Interleaved: the tools in order on odd rounds, reversed on even ones.
      if [ $((r % 2)) = 1 ]; then order=$tools; else order=$(echo $tools | tr ' ' '\n' | tac | tr '\n' ' '); fi
      for tool in $order; do run_tool "$tool" "$cc" "$p" "$r"; done
    done
  done
done
python3 - "$out" "$SECS" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/raw.csv")))
secs = float(sys.argv[2])
keys = sorted({(r["cc"], int(r["streams"])) for r in rows})
tools = [t for t in ("iperf3", "pinperf", "pinperf-single", "base") if any(r["tool"] == t for r in rows)]
others = tools[1:]
head = ["cc", "streams", "iperf3 -c → iperf3 -s, Gbit/s (median)"]
head += [f"{t} → iperf3 -s, Gbit/s (median)" for t in others]
head += [f"{t} / iperf3" for t in others]
head += [f"{t} span past -t, ms" for t in tools] + ["runs each"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for cc, p in keys:
    m, span = {}, {}
    for tool in tools:
        mine = [r for r in rows if r["tool"] == tool and r["cc"] == cc and int(r["streams"]) == p]
        m[tool] = (statistics.median(float(r["bits_per_second"]) / 1e9 for r in mine), len(mine))
        span[tool] = statistics.median((float(r["seconds"]) - secs) * 1e3 for r in mine)
    cells = [cc, str(p), f"{m['iperf3'][0]:.2f}"]
    cells += [f"{m[t][0]:.2f}" for t in others]
    cells += [f"{m[t][0] / m['iperf3'][0]:.3f}" for t in others]
    cells += [f"{span[t]:.1f}" for t in tools] + [str(m["iperf3"][1])]
    print("| " + " | ".join(cells) + " |")
print()
for tool in tools:
    late = sorted((float(r["seconds"]) - secs) * 1e3 for r in rows if r["tool"] == tool)
    print(f"{tool}: span past -t over all {len(late)} runs: max {late[-1]:.1f} ms, "
          f"{sum(x > 30 for x in late)} past 30 ms (a delayed ACK counted as receiving)")
PY
gzip -f "$out/raw.csv"
echo "results in $out"
