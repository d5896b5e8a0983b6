# Shared helpers for the bench scripts (sourced, not run).
# Every script records the environment beside its raw per-run CSV, interleaves the tools
# it compares (A B C, B C A, ...) and summarises by medians: these machines are noisy.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PINPERF=${PINPERF:-$root/target/release/pinperf}
YARDSTICK=${YARDSTICK:-$root/../shared/yardstick/blast.c}
BLAST=${BLAST:-/tmp/pinperf-blast}

# Every run's start: out=bench-results/NAME-<time> (or $OUT), a fresh release build, and
# the environment recorded beside the raw results. Call after installing peers.
start_run() {
  out=${OUT:-$root/bench-results/$1-$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$out"
  build_pinperf
  record_env "$out/env.txt"
}

build_pinperf() {
  (cd "$root" && cargo build --release --quiet)
}

build_blast() {
  if [ -f "$YARDSTICK" ]; then
    gcc -O2 -pthread -o "$BLAST" "$YARDSTICK"
  else
    echo "note: no yardstick at $YARDSTICK (set YARDSTICK=path/to/blast.c); skipping it" >&2
    BLAST=""
  fi
}

# Installs Debian's iperf (2) and iperf3 when missing and we are root; says so otherwise.
ensure_peers() {
  local missing=()
  command -v iperf >/dev/null || missing+=(iperf)
  command -v iperf3 >/dev/null || missing+=(iperf3)
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
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc)"
    echo "pinperf: $("$PINPERF" --version 2>/dev/null)"
    command -v iperf >/dev/null && echo "iperf: $(iperf -v 2>&1 | head -1)"
    command -v iperf3 >/dev/null && echo "iperf3: $(iperf3 -v 2>&1 | head -1)"
    for s in net.core.wmem_max net.core.rmem_max net.ipv4.tcp_wmem net.ipv4.tcp_rmem net.ipv4.tcp_congestion_control; do
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
