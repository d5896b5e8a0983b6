#!/usr/bin/env bash
# The diagnose table: one run of `pinperf diagnose -J` per case (a lab path with one known
# limit, and loopback with a busy loop on the receiver's core), each kept as its document
# (case.json), its progress lines (case.progress), the text and HTML rendered from the
# document (case.txt, case.html) and its wall time (case.time). Root (the lab). Each run
# holds /tmp/pinperf-cpu.lock so it never overlaps another benchmark.
set -euo pipefail
bin=${PINPERF:-target/release/pinperf}
out=${1:-bench-results/diagnose-table-$(date -u +%Y%m%d-%H%M)}
budget=${BUDGET:-60s}
mkdir -p "$out"
{
    echo "kernel: $(uname -r)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"
    echo "git: $(git rev-parse --short HEAD)"
    echo "budget: $budget"
    sysctl net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem \
        net.ipv4.tcp_congestion_control
} > "$out/environment.txt"

# case name, then the command after the binary.
run_case() {
    local name=$1
    shift
    flock /tmp/pinperf-cpu.lock /usr/bin/time -f "%e" -o "$out/$name.time" \
        "$bin" "$@" > "$out/$name.json" 2> "$out/$name.progress" || true
    "$bin" report "$out/$name.json" > "$out/$name.txt" || true
    "$bin" report "$out/$name.json" -o "$out/$name.html" || true
    echo "$name: $(cat "$out/$name.time") s wall"
}

run_case loss lab --rtt 60ms --rate 1G --loss 0.1% -- diagnose -C cubic --budget "$budget" -J
run_case rmem-cap lab --rtt 60ms --rate 1G -- diagnose -w 16M --budget "$budget" -J
run_case deep-queue lab --rtt 60ms --rate 1G --queue 8bdp -- \
    diagnose -w 256M --force-window --budget "$budget" -J
run_case rate-cap lab --rtt 60ms --rate 1G -- \
    diagnose -w 8M --force-window --budget "$budget" -J

# Loopback: a busy loop on the core the server's receiver is placed on (the second allowed
# core), held for the diagnosis only; the diagnosis is not told about it.
core=$(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' | sed -n 2p | cut -d- -f1)
flock /tmp/pinperf-cpu.lock bash -c '
    taskset -c "$1" sh -c "while :; do :; done" & spin=$!
    trap "kill $spin" EXIT
    /usr/bin/time -f "%e" -o "$2/loopback-busy-core.time" "$3" diagnose --loopback \
        --budget "$4" -J > "$2/loopback-busy-core.json" 2> "$2/loopback-busy-core.progress"
' _ "${core:-1}" "$out" "$bin" "$budget" || true
"$bin" report "$out/loopback-busy-core.json" > "$out/loopback-busy-core.txt" || true
"$bin" report "$out/loopback-busy-core.json" -o "$out/loopback-busy-core.html" || true
echo "loopback-busy-core: $(cat "$out/loopback-busy-core.time") s wall"
