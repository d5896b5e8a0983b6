# Shared helpers for the bench scripts (sourced, not run).
# Every script records the environment beside its raw per-run CSV, interleaves the tools
# it compares (A B C, B C A, ...) and summarises by medians: these machines are noisy.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The cargo profile to build and run: release (stripped, what users install), or profiling
# (release with symbols and line tables, for perf; profile.sh sets it).
PINPERF_PROFILE=${PINPERF_PROFILE:-release}
PINPERF=${PINPERF:-$root/target/$PINPERF_PROFILE/pinperf}
YARDSTICK=${YARDSTICK:-$root/../shared/yardstick/blast.c}
BLAST=${BLAST:-/tmp/pinperf-blast}
# The peers to run: IPERF3 names the iperf3 (e.g. a threaded >= 3.16 built from the
# esnet/iperf source outside the repo: IPERF3=/work/peers/iperf3/bin/iperf3), IPERF2 the
# iperf 2. Their versions go into env.txt.
IPERF3=${IPERF3:-iperf3}
IPERF2=${IPERF2:-iperf}

# Every run's start: out=bench-results/NAME-<time> (or $OUT), a fresh release build, and
# the environment recorded beside the raw results. Call after installing peers.
start_run() {
  out=${OUT:-$root/bench-results/$1-$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$out"
  build_pinperf
  record_env "$out/env.txt"
}

# Builds unless PINPERF names a binary built elsewhere (NO_BUILD=1 skips the build: a run
# under `flock -x` must not wait for its own shared-lock build).
build_pinperf() {
  [ -n "${NO_BUILD:-}" ] || (cd "$root" && cargo build --profile "$PINPERF_PROFILE" --quiet)
}

build_blast() {
  if [ -f "$YARDSTICK" ]; then
    gcc -O2 -pthread -o "$BLAST" "$YARDSTICK"
  else
    echo "note: no yardstick at $YARDSTICK (set YARDSTICK=path/to/blast.c); skipping it" >&2
    BLAST=""
  fi
}

# Builds bench-scripts/sockopt-shim.c into $SHIM: run under LD_PRELOAD, it sets SHIM_CC
# (TCP_CONGESTION) and SHIM_MSS (TCP_MAXSEG) on the yardstick's sockets, so blast runs in
# the same regime as the tools it is set beside. Fails when gcc does.
SHIM=${SHIM:-/tmp/pinperf-sockopt-shim.so}
build_shim() {
  gcc -O2 -shared -fPIC -o "$SHIM" "$root/bench-scripts/sockopt-shim.c" -ldl
}

# Installs Debian's iperf (2) and iperf3 when missing and we are root; says so otherwise.
ensure_peers() {
  local missing=()
  command -v "$IPERF2" >/dev/null || { [ "$IPERF2" = iperf ] && missing+=(iperf); }
  command -v "$IPERF3" >/dev/null || { [ "$IPERF3" = iperf3 ] && missing+=(iperf3); }
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; } ||
        echo "note: could not install ${missing[*]}; comparing without them" >&2
    else
      echo "note: ${missing[*]} not installed (run as root to install); comparing without them" >&2
    fi
  fi
}

record_env() {
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "git: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null)$(cd "$root" && git diff --quiet 2>/dev/null || echo '+dirty')"
    echo "kernel: $(uname -r)"
    echo "loadavg at start: $(cat /proc/loadavg)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc)"
    echo "pinperf: $("$PINPERF" --version 2>/dev/null)"
    command -v "$IPERF2" >/dev/null && echo "iperf: $(command -v "$IPERF2"): $("$IPERF2" -v 2>&1 | head -1)"
    command -v "$IPERF3" >/dev/null && echo "iperf3: $(command -v "$IPERF3"): $("$IPERF3" -v 2>&1 | head -1)"
    for s in net.core.wmem_max net.core.rmem_max net.ipv4.tcp_wmem net.ipv4.tcp_rmem net.ipv4.tcp_congestion_control kernel.sched_rt_runtime_us; do
      echo "$s: $(sysctl -n $s 2>/dev/null | tr '\t' ' ')"
    done
  } >"$1"
}

# Size with a binary suffix (8k, 128k, 1M) to bytes.
to_bytes() {
  local v=${1%[kKmMgG]} s=${1: -1}
  case $s in k | K) echo $((v * 1024)) ;; m | M) echo $((v * 1048576)) ;; g | G) echo $((v * 1073741824)) ;; *) echo "$1" ;; esac
}

# Rotates a word list by N: rotate 1 a b c -> b c a (interleaving order per round).
rotate() {
  local n=$1; shift
  local arr=("$@") k=${#arr[@]} i
  for ((i = 0; i < k; i++)); do printf '%s ' "${arr[$(((i + n) % k))]}"; done
}

# Medians by key columns of a CSV; prints a table. Usage: medians FILE KEYCOLS VALUECOL
medians() {
  python3 - "$@" <<'PY'
import csv, statistics, sys
path, keys, val = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
groups = {}
with open(path) as f:
    for row in csv.DictReader(f):
        try:
            v = float(row[val])
        except ValueError:
            continue
        groups.setdefault(tuple(row[k] for k in keys), []).append(v)
print(",".join(keys + ["runs", "median_" + val]))
for k, vs in sorted(groups.items()):
    print(",".join(list(k) + [str(len(vs)), f"{statistics.median(vs):.3f}"]))
PY
}

# Whole-machine CPU ticks: "busy total" from /proc/stat's aggregate line.
cpu_ticks() {
  awk '/^cpu / {idle = $5 + $6; total = 0; for (i = 2; i <= 9; i++) total += $i; print total - idle, total}' /proc/stat
}

# Busy cores between two cpu_ticks readings: busy_cores "B0 T0" "B1 T1"
busy_cores() {
  local b0 t0 b1 t1
  read -r b0 t0 <<<"$1"
  read -r b1 t1 <<<"$2"
  awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v n="$(nproc)" 'BEGIN {printf "%.3f\n", (t > 0 ? b / t * n : 0)}'
}

# Receiver's Gbit/s from a pinperf or iperf3 -J document on stdin.
gbps_json() { python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'; }

# Runs a command that prints Gbit/s; prints "gbps,busy_cores" (NA when it failed), the busy
# cores measured over the run from /proc/stat the same way for every tool.
run_with_cpu() {
  local t0 t1 g
  t0=$(cpu_ticks)
  g=$("$@" || echo "")
  t1=$(cpu_ticks)
  echo "${g:-NA},$(busy_cores "$t0" "$t1")"
}
