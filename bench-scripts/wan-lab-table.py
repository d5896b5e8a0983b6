#!/usr/bin/env python3
"""Summarises a wan-lab.sh run directory (runs.csv + runs/NAME.json|.err) as markdown.

Medians over rounds for every figure; a failed run (no JSON) is listed as failed."""
import csv
import json
import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
RELAY = re.compile(
    r"# lab relay forward.*?queue drops (\d+), random-loss drops (\d+); peak queue ([\d.]+) MiB; "
    r"late deliveries (\d+) \(worst ([\d.]+) ms\); write errors (\d+); relay CPU ([\d.]+) %")


def load(name):
    try:
        doc = json.loads((out / "runs" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    if "end" not in doc or doc["end"] is None:
        return None
    # The relay's figures: the document's "lab" member (pinperf since the lab joined -J),
    # else the relay line older runs left on stderr.
    fwd = (doc.get("lab") or {}).get("forward")
    m = None if fwd else RELAY.search((out / "runs" / f"{name}.err").read_text())
    e, s = doc["end"], doc["start"]
    kern = e.get("kernel") or {}
    recv = (kern.get("receiver") or kern.get("sender") or {}).get("drops", {})
    pressures = sum((kern.get(k) or {}).get("drops", {}).get("memory_pressures", 0)
                    for k in ("sender", "receiver"))
    diag = " ".join(e.get("diagnosis") or [])
    tags = [t for t, k in (("queue", "standing queue"), ("kernel", "receiving kernel"),
                           ("pressure", "memory pressure"), ("uneven", "evenly"),
                           ("retr", "retransmits were in"), ("starved", "starved"))
            if k in diag]
    f = e["fairness"]
    return {
        "mbps": e["sum_received"]["bits_per_second"] / 1e6,
        "jain": f["jain"] or 0.0,
        "min_share": (f["min_share"] or 0.0) * 100,
        "max_share": (f["max_share"] or 0.0) * 100,
        "starved": f["starved_intervals"],
        "stream_intervals": f["stream_intervals"],
        "block_rtt": ((e["sum"].get("block_rtt") or {}).get("avg_us") or 0) / 1e3,
        "block_rtt_max": ((e["sum"].get("block_rtt") or {}).get("max_us") or 0) / 1e3,
        "srtt": ((e["sum"].get("kernel_rtt") or {}).get("avg_us") or 0) / 1e3,
        "retr": (e.get("sum_sent") or {}).get("retransmits") or 0,
        "sndbuf": s["local_window"]["sndbuf"],
        "seconds": e["sum_received"]["seconds"],
        "queue_drops": fwd["queue_drops"] if fwd else int(m.group(1)) if m else None,
        "late": fwd["late_deliveries"] if fwd else int(m.group(4)) if m else None,
        "relay_cpu": fwd["cpu_percent"] if fwd else float(m.group(7)) if m else None,
        "kernel_drops": sum(recv.get(k, 0) for k in
                            ("rcvq_drops", "ofo_drops", "rcv_pruned", "ofo_pruned", "backlog_drops")),
        "pressures": pressures,
        "cpu_s_per_gb": (e.get("cpu") or {}).get("cpu_seconds_per_gb"),
        "host_peak": max([(kern.get(k) or {}).get("tcp_pages_peak") or 0 for k in ("sender", "receiver")]),
        "diag": ",".join(tags) or "-",
    }


def med(runs, key):
    vals = [r[key] for r in runs if r and r[key] is not None]
    return statistics.median(vals) if vals else None


def size(b):
    for unit, shift in (("G", 30), ("M", 20), ("k", 10)):
        if b >= 1 << shift:
            return f"{b / (1 << shift):g}{unit}"
    return str(b)


groups = {}
for row in csv.DictReader(open(out / "runs.csv")):
    key = tuple(row[k] for k in ("section", "rate", "rtt", "queue", "streams", "window",
                                 "window_flags", "cc", "engine", "tcp_mem"))
    groups.setdefault(key, []).append(load(row["run"]))

if any(k[0] == "relay" for k in groups):
    print("## Relay capacity (2 ms RTT, 2 streams, cubic)\n")
    print("| rate | received Mb/s | of the rate | late deliveries (>1 ms) | forward relay CPU | runs |")
    print("|---|---|---|---|---|---|")
for key, runs in groups.items():
    if key[0] != "relay":
        continue
    m = re.fullmatch(r"([\d.]+)([kMG]?)", key[1])
    rate = float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    ok = [r for r in runs if r]
    if not ok:
        print(f"| {key[1]} | failed | | | | {len(runs)} |")
        continue
    mbps = med(ok, "mbps")
    print(f"| {key[1]} | {mbps:.0f} | {mbps * 1e6 / rate * 100:.1f} % | {med(ok, 'late'):.0f} | "
          f"{med(ok, 'relay_cpu'):.1f} % | {len(ok)} |")

for section, title in (("study", "Fairness study"), ("seedmem", "The seed's hosts: small net.ipv4.tcp_mem, 256M windows")):
    keys = [k for k in groups if k[0] == section]
    if not keys:
        continue
    k0 = keys[0]
    print(f"\n## {title} ({k0[2]} RTT, {k0[1]}bit/s bottleneck, {k0[3]} drop-tail queue)\n")
    print("| streams | window (sndbuf granted) | CC | engine | tcp_mem | Mb/s | of bottleneck | Jain | shares % | "
          "starved | block RTT avg / max ms | srtt ms | retr | path drops | kernel drops | mem pressure | "
          "host TCP pages peak | length s | diagnosis | runs |")
    print("|" + "---|" * 20)
    m = re.fullmatch(r"([\d.]+)([kMG]?)", k0[1])
    rate = float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    for key in sorted(keys, key=lambda k: (k[9], int(k[4]), k[5], k[7], k[8])):
        runs = [r for r in groups[key] if r]
        if not runs:
            print(f"| {key[4]} | {key[5]} | {key[7]} | {key[8]} | {key[9]} | failed |" + " |" * 14 + f" {len(groups[key])} |")
            continue
        mbps = med(runs, "mbps")
        print(f"| {key[4]} | {key[5]} ({size(med(runs, 'sndbuf'))}) | {key[7]} | {key[8]} | {key[9].replace('_', ' ')} | "
              f"{mbps:.0f} | {mbps * 1e6 / rate * 100:.0f} % | {med(runs, 'jain'):.3f} | "
              f"{med(runs, 'min_share'):.1f}–{med(runs, 'max_share'):.1f} | "
              f"{med(runs, 'starved'):.0f}/{med(runs, 'stream_intervals'):.0f} | "
              f"{med(runs, 'block_rtt'):.0f} / {med(runs, 'block_rtt_max'):.0f} | {med(runs, 'srtt'):.0f} | "
              f"{med(runs, 'retr'):.0f} | {med(runs, 'queue_drops'):.0f} | {med(runs, 'kernel_drops'):.0f} | "
              f"{med(runs, 'pressures'):.0f} | {med(runs, 'host_peak'):.0f} | {med(runs, 'seconds'):.1f} | "
              f"{runs[0]['diag']} | {len(runs)} |")

mtu_keys = [k for k in groups if k[0] == "mtu"]
if mtu_keys:
    print(f"\n## MTU ({mtu_keys[0][2]} RTT, {mtu_keys[0][1]}bit/s, 4 streams, share window, cubic)\n")
    print("| MTU | Mb/s | retr | process CPU-s per GB (both ends and relay) | forward relay CPU | late deliveries | runs |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(mtu_keys, key=lambda k: int(k[9][3:])):
        runs = [r for r in groups[key] if r]
        if not runs:
            print(f"| {key[9][3:]} | failed | | | | | {len(groups[key])} |")
            continue
        print(f"| {key[9][3:]} | {med(runs, 'mbps'):.0f} | {med(runs, 'retr'):.0f} | "
              f"{med(runs, 'cpu_s_per_gb'):.3f} | {med(runs, 'relay_cpu'):.1f} % | {med(runs, 'late'):.0f} | {len(runs)} |")
