#!/usr/bin/env bash
# What the copy-avoiding modes save: Gbit/s and CPU-seconds per GB (whole machine, from
# /proc/stat, softirq included, the same for every tool) for pinperf's default, -Z's two
# methods (-Z=sendfile, the default: sendfile from a memfd; -Z=msg: MSG_ZEROCOPY) and
# --skip-rx-copy (MSG_TRUNC), beside iperf3's default, -Z (sendfile from a file) and
# --skip-rx-copy (3.17+), at BLOCKS, STREAMS streams, ROUNDS interleaved rounds, medians;
# each pinperf mode as a ratio to iperf3's same mode (both -Z methods to iperf3's -Z).
#
# On loopback the kernel copies MSG_ZEROCOPY pages after all when it delivers them to the
# receiving socket, so -Z=msg can only add its page pinning and completions there (raw.csv
# counts the sends it copied); sendfile's page references reach the receiving socket as
# they are, so loopback saves the sender's copy. Only a NIC with scatter-gather shows what
# MSG_ZEROCOPY saves. --skip-rx-copy saves the receiver's copy anywhere.
#
# Placement: pinperf's auto plan puts a loopback stream's sender and receiver on one core
# (fastest for copying, bench-scripts/placement.sh); iperf3 leaves them to the scheduler,
# which spreads them. SPLIT (a -A plan, default 0/1; empty to skip) runs every pinperf mode
# a second time with sender and receiver on different cores, as `pinperf-MODE-split`.
#
#   IPERF3=/work/peers/iperf3/bin/iperf3 bench-scripts/zerocopy-compare.sh
#   # SECS=3 ROUNDS=5 BLOCKS="64k 1M" STREAMS=1 CC= SPLIT=0/1
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SECS=${SECS:-3}
ROUNDS=${ROUNDS:-5}
BLOCKS=${BLOCKS:-"64k 1M"}
STREAMS=${STREAMS:-1}
CC=${CC:-}
SPLIT=${SPLIT-0/1}
pcc=() i3cc=()
if [ -n "$CC" ]; then pcc=(-C "$CC"); i3cc=(-C "$CC"); fi
ensure_peers
start_run zerocopy-compare
echo "cc: ${CC:-system default}" >>"$out/env.txt"
echo "split plan: ${SPLIT:-none} (pinperf-*-split: -A $SPLIT)" >>"$out/env.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$PINPERF" -s -B 127.0.0.1 -p 5313 2>/dev/null & pids+=($!)
variants=(pinperf-default pinperf-sendfile pinperf-msg pinperf-skip-rx)
if [ -n "$SPLIT" ]; then variants+=(pinperf-default-split pinperf-sendfile-split pinperf-msg-split pinperf-skip-rx-split); fi
if command -v "$IPERF3" >/dev/null; then
  "$IPERF3" -s -B 127.0.0.1 -p 5213 >/dev/null 2>&1 & pids+=($!)
  variants+=(iperf3-default iperf3-zerocopy)
  # --skip-rx-copy came with iperf3 3.17.
  if "$IPERF3" --help 2>&1 | grep -q -- --skip-rx-copy; then variants+=(iperf3-skip-rx); fi
fi
sleep 0.5

sendpath=$(mktemp)
trap 'cleanup; rm -f "$sendpath"' EXIT
run_variant() { # variant block -> Gbit/s (pinperf's -Z counts to $sendpath)
  local tool=${1%%-*} mode=${1#*-} flags=()
  if [[ $mode == *-split ]]; then mode=${mode%-split} flags=(-A "$SPLIT"); fi
  case $tool in
    pinperf)
      case $mode in sendfile) flags+=(-Z=sendfile) ;; msg) flags+=(-Z=msg) ;; skip-rx) flags+=(--skip-rx-copy) ;; esac
      "$PINPERF" -c 127.0.0.1 -p 5313 -l "$2" -P "$STREAMS" -t "$SECS" -i "$SECS" "${pcc[@]}" "${flags[@]}" -J |
        python3 -c 'import json,sys
d = json.load(sys.stdin)["end"]
p = (d.get("cpu") or {}).get("local", {}).get("send_path") or {}
open(sys.argv[1], "w").write("%s,%s" % (p.get("sends", ""), "" if p.get("copied") is None else p["copied"]))
print("%.3f" % (d["sum_received"]["bits_per_second"] / 1e9))' "$sendpath" ;;
    iperf3)
      case $mode in zerocopy) flags=(-Z) ;; skip-rx) flags=(--skip-rx-copy) ;; esac
      "$IPERF3" -c 127.0.0.1 -p 5213 -l "$(to_bytes "$2")" -P "$STREAMS" -t "$SECS" "${i3cc[@]}" "${flags[@]}" -J | gbps_json ;;
  esac
}

raw=$out/raw.csv
echo "round,block,streams,variant,gbps,busy_cores,cpu_s_per_gb,zc_sends,zc_copied" >"$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for b in $BLOCKS; do
    for v in $(rotate "$r" "${variants[@]}"); do
      echo "," >"$sendpath"
      IFS=, read -r g bc <<<"$(run_with_cpu run_variant "$v" "$b")"
      # CPU-seconds per GB: busy cores x seconds / (Gbit/s x seconds / 8).
      c=$(awk -v g="$g" -v c="$bc" 'BEGIN {printf "%.4f\n", (g != "NA" && g > 0 ? c * 8 / g : 0)}')
      echo "$r,$b,$STREAMS,$v,$g,$bc,$c,$(cat "$sendpath")" | tee -a "$raw" >&2
      sleep 0.3
    done
  done
done
python3 - "$raw" <<'PY' | tee "$out/table.txt"
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["gbps"] != "NA"]
cells = {}
for r in rows:
    cells.setdefault((r["block"], r["variant"]), []).append(r)
med = lambda rs, k: statistics.median(float(x[k]) for x in rs)
size = lambda b: int(b.rstrip("kKmM")) * (1 << 20 if b[-1] in "mM" else 1 << 10 if b[-1] in "kK" else 1)
# iperf3's mode beside each of pinperf's: both -Z methods beside iperf3's -Z.
same = {"default": "default", "sendfile": "zerocopy", "msg": "zerocopy", "skip-rx": "skip-rx"}
print("| block | variant | Gbit/s | busy cores | CPU-s per GB | vs iperf3 same mode: Gbit/s | CPU-s/GB | -Z sends copied by the kernel |")
print("|---|---|---|---|---|---|---|---|")
for (b, v), rs in sorted(cells.items(), key=lambda kv: (size(kv[0][0]), kv[0][1])):
    tool, mode = v.split("-", 1)
    mode = mode.removesuffix("-split")
    peer = cells.get((b, "iperf3-" + same.get(mode, mode))) if tool == "pinperf" else None
    ratio = lambda k: f"{med(rs, k) / med(peer, k):.2f}x" if peer else "-"
    sends = sum(int(x["zc_sends"] or 0) for x in rs)
    copied = [int(x["zc_copied"]) for x in rs if x.get("zc_copied")]
    zc = f"{sum(copied)} of {sends}" if copied else ("none reported" if sends else "-")
    print(f"| {b} | {v} | {med(rs, 'gbps'):.2f} | {med(rs, 'busy_cores'):.2f} | {med(rs, 'cpu_s_per_gb'):.3f} | {ratio('gbps')} | {ratio('cpu_s_per_gb')} | {zc} |")
PY
