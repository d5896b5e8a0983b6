//! Plain-words findings at the end of a test, each only when the numbers show it:
//! a standing queue in the sender's socket buffer (block RTT far above the path's RTT,
//! with the window that would avoid it), retransmits concentrated in a few streams, and
//! streams starved while others ran.

use super::model::{Fairness, Header, KernelSummary, StreamRow};

/// What the diagnosis looks at.
pub struct Evidence<'a> {
    pub header: &'a Header,
    /// Whole-test rows per stream.
    pub streams: &'a [StreamRow],
    /// Per stream: intervals in which it read nothing.
    pub starved_intervals: &'a [u32],
    pub intervals: u32,
    /// Total received rate, bits per second.
    pub rate_bps: f64,
}

/// A queue counts as "standing" when blocks wait this many times the path RTT…
const QUEUE_FACTOR: f64 = 4.0;
/// …and at least this long, microseconds.
const QUEUE_MIN_US: f64 = 1000.0;

/// The findings, one `String` per line (without the leading `# `).
pub fn diagnose(e: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    standing_queue(e, &mut out);
    concentrated_retransmits(e, &mut out);
    starvation(e, &mut out);
    out
}

/// Binary size in the largest whole unit with one decimal: 3.1 MiB.
pub fn human_bytes(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn standing_queue(e: &Evidence, out: &mut Vec<String>) {
    let path_us = e
        .streams
        .iter()
        .filter_map(|s| s.min_rtt)
        .filter(|&v| v > 0)
        .min();
    let (sum, n) = e
        .streams
        .iter()
        .filter_map(|s| s.block_rtt)
        .fold((0.0, 0u64), |(sum, n), r| {
            (sum + r.avg_us * r.samples as f64, n + r.samples)
        });
    let (Some(path_us), true) = (path_us, n > 0) else {
        return;
    };
    let path_us = f64::from(path_us);
    let block_us = sum / n as f64;
    if block_us < QUEUE_FACTOR * path_us || block_us - path_us < QUEUE_MIN_US {
        return;
    }
    let streams = e.streams.len().max(1) as f64;
    let per_stream_bps = e.rate_bps / streams;
    let bdp = per_stream_bps * path_us / 1e6 / 8.0;
    let queue = per_stream_bps * (block_us - path_us) / 1e6 / 8.0;
    // The per-stream BDP rounded up to a power of two: Linux doubles the request, which is
    // the headroom. On the lab's 60 ms path these windows kept 95-98 % of the bottleneck at
    // 1 to 16 streams with Jain >= 0.999 and no retransmits (bench-scripts/wan-lab.sh).
    let suggest = (bdp.max(65536.0) as u64).next_power_of_two();
    out.push(format!(
        "diagnosis: blocks waited {:.2} ms on average against a path RTT of {:.3} ms (kernel \
         min_rtt): a standing queue of about {} per stream in the socket buffers.",
        block_us / 1e3,
        path_us / 1e3,
        human_bytes(queue)
    ));
    let sndbuf = e
        .streams
        .iter()
        .filter_map(|s| s.sndbuf)
        .max()
        .unwrap_or(e.header.local_window.sndbuf);
    let how = if e.header.local_window.requested.is_some() {
        "granted"
    } else {
        "autotuned"
    };
    out.push(format!(
        "diagnosis: the send buffer ({} {how}) is far above the bandwidth-delay product \
         ({:.0} Mb/s x {:.3} ms = {} per stream); -w {} should keep the rate without the queue.",
        human_bytes(sndbuf as f64),
        per_stream_bps / 1e6,
        path_us / 1e3,
        human_bytes(bdp),
        crate::units::format_size(suggest)
    ));
}

fn list(ids: &[u16]) -> String {
    ids.iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn concentrated_retransmits(e: &Evidence, out: &mut Vec<String>) {
    let mut retr: Vec<(u16, u64)> = e
        .streams
        .iter()
        .map(|s| (s.stream, s.retransmits.unwrap_or(0)))
        .collect();
    let total: u64 = retr.iter().map(|r| r.1).sum();
    if retr.len() < 2 || total < 10 {
        return;
    }
    retr.sort_by_key(|r| std::cmp::Reverse(r.1));
    let k = (retr.len() / 4).max(1);
    let top: u64 = retr[..k].iter().map(|r| r.1).sum();
    let share = top as f64 / total as f64;
    if share < 0.75 {
        return;
    }
    let mut ids: Vec<u16> = retr[..k].iter().map(|r| r.0).collect();
    ids.sort_unstable();
    out.push(format!(
        "diagnosis: {:.0}% of the {total} retransmits were in stream{} {} of {}: look at what \
         they do not share with the others (path, queue, core).",
        share * 100.0,
        if k == 1 { "" } else { "s" },
        list(&ids),
        retr.len()
    ));
}

fn starvation(e: &Evidence, out: &mut Vec<String>) {
    let starved: Vec<u16> = e
        .streams
        .iter()
        .zip(e.starved_intervals)
        .filter(|(_, n)| **n > 0)
        .map(|(s, _)| s.stream)
        .collect();
    let total_bytes: u64 = e.streams.iter().map(|s| s.bytes).sum();
    if starved.is_empty() || total_bytes == 0 || e.streams.len() < 2 {
        return;
    }
    let count: u32 = e.starved_intervals.iter().sum();
    out.push(format!(
        "diagnosis: stream{} {} read nothing in {count} of {} stream-intervals (starved) while \
         others ran.",
        if starved.len() == 1 { "" } else { "s" },
        list(&starved),
        e.intervals * e.streams.len() as u32
    ));
}

/// Drops and memory limits inside the hosts' kernels: segments the receiver threw away
/// after the path had delivered them, TCP memory pressure, and the host's TCP memory near
/// net.ipv4.tcp_mem (also when the pressure began before the test: other sockets, such as
/// an earlier test's, held the memory). One line, only when something shows.
pub fn kernel_drops(k: &KernelSummary, retransmits: u64, streams: usize) -> Option<String> {
    let receiver = k.receiver.unwrap_or(k.sender).drops;
    let ends = [Some(k.sender), k.receiver];
    let ends = ends.iter().flatten();
    let pressures: u64 = ends.clone().map(|e| e.drops.memory_pressures).sum();
    let peak = ends.clone().filter_map(|e| e.tcp_pages_peak).max();
    let start = ends.clone().filter_map(|e| e.tcp_pages_start).max();
    let limits = ends.clone().find_map(|e| e.tcp_mem_pages);
    let dropped = receiver.receiver_drops();
    let near_limit = matches!((peak, limits), (Some(p), Some(m)) if p >= m[1]);
    if dropped == 0 && pressures == 0 && !near_limit {
        return None;
    }
    let mut parts = Vec::new();
    if dropped > 0 {
        parts.push(format!(
            "the receiving kernel discarded {dropped} segments the path had delivered \
             (TCPRcvQDrop {}, TCPOFODrop {}, pruned {})",
            receiver.rcvq_drops,
            receiver.ofo_drops,
            receiver.rcv_pruned + receiver.ofo_pruned
        ));
    }
    if pressures > 0 {
        parts.push(format!("TCP entered memory pressure {pressures} times"));
    }
    if let (Some(p), Some(m)) = (peak, limits) {
        let mut text = format!(
            "the host's TCP memory peaked at {p} pages (net.ipv4.tcp_mem = {} {} {}: from {} \
             on, Linux shrinks every receive window to a few segments until TCP uses less than \
             {}; at {} every socket waits for memory)",
            m[0], m[1], m[2], m[1], m[0], m[2]
        );
        if let Some(s) = start.filter(|&s| s >= m[0]) {
            text.push_str(&format!(
                "; other sockets already held {s} pages when the test started"
            ));
        }
        parts.push(text);
    }
    let retr = if retransmits > 0 {
        format!(", against {retransmits} retransmits")
    } else {
        String::new()
    };
    Some(format!(
        "diagnosis: {}{retr}: the {streams} streams' socket buffers together ask for more memory \
         than the kernel lets TCP use; ask for smaller windows (-w) or raise net.ipv4.tcp_mem.",
        parts.join(", and ")
    ))
}

/// The receivers kept reading this long past `-t` (and at least this share of it) before
/// a line says why.
const DRAIN_MIN_S: f64 = 1.0;
const DRAIN_SHARE: f64 = 0.1;

/// A test that ended well after `-t`: the senders stopped writing on time, and the rest was
/// data queued in their socket buffers. `queued_bytes` is what the senders held unsent at
/// their last write (`tcpi_notsent_bytes`), the bulk of what the receivers read afterwards.
pub fn long_drain(duration_s: f64, end_s: f64, queued_bytes: u64) -> Option<String> {
    let late = end_s - duration_s;
    if late < DRAIN_MIN_S.max(DRAIN_SHARE * duration_s) {
        return None;
    }
    Some(format!(
        "diagnosis: the test ran {late:.1} s past -t {duration_s:.0}: the senders stopped \
         writing on time with {} still unsent in their socket buffers, which the receivers \
         read afterwards; the last row covers that drain. A window near the bandwidth-delay product \
         ends on time.",
        human_bytes(queued_bytes as f64)
    ))
}

/// Jain's index below this over the whole test is worth a line.
const UNFAIR_JAIN: f64 = 0.9;

/// Streams that did not share the path evenly over the whole test.
pub fn unfair_shares(f: &Fairness) -> Option<String> {
    let (jain, lo, hi) = (f.jain?, f.min_share?, f.max_share?);
    if f.streams < 2 || jain >= UNFAIR_JAIN {
        return None;
    }
    Some(format!(
        "diagnosis: the streams did not share the path evenly: Jain {jain:.3}, shares from \
         {:.1}% to {:.1}% (equal would be {:.1}% each).",
        lo * 100.0,
        hi * 100.0,
        100.0 / f64::from(f.streams)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::RttSummary;

    fn header(sndbuf: u64) -> Header {
        Header {
            software: String::new(),
            local: String::new(),
            remote: String::new(),
            remote_software: String::new(),
            streams: 2,
            block_bytes: 131072,
            local_window: crate::netinfo::WindowGrant {
                sndbuf,
                ..Default::default()
            },
            remote_window: Default::default(),
            path: Default::default(),
            local_pin: crate::pin::PinPlan(vec![]),
            remote_pin: crate::pin::PinPlan(vec![]),
            placement_note: None,
            duration_s: 10.0,
            omit_s: 0.0,
            interval_s: 1.0,
            echo: true,
            congestion: "cubic".into(),
            same_host: false,
            same_process: false,
            cpu_intervals: false,
            engine: crate::choices::Engine::Threads,
        }
    }

    fn row(stream: u16, bytes: u64, min_rtt: u32, block_avg_us: f64, retr: u64) -> StreamRow {
        StreamRow {
            stream,
            start: 0.0,
            end: 10.0,
            seconds: 10.0,
            bytes,
            bits_per_second: bytes as f64 * 0.8,
            sent_bytes: bytes,
            retransmits: Some(retr),
            snd_cwnd: None,
            rtt: None,
            rttvar: None,
            min_rtt: Some(min_rtt),
            delivery_rate: None,
            pacing_rate: None,
            notsent_bytes: None,
            sndbuf: None,
            kernel_rtt: None,
            block_rtt: Some(RttSummary {
                min_us: 1.0,
                avg_us: block_avg_us,
                max_us: 1.0,
                median_us: None,
                samples: 100,
            }),
        }
    }

    #[test]
    fn a_standing_queue_is_named_with_the_window_to_use() {
        let h = header(8 << 20);
        let streams = [
            row(0, 1000, 60_000, 900_000.0, 0),
            row(1, 1000, 60_000, 900_000.0, 0),
        ];
        let e = Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[0, 0],
            intervals: 10,
            rate_bps: 1e9,
        };
        let d = diagnose(&e);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].contains("blocks waited 900.00 ms on average against a path RTT of 60.000 ms"),
            "{}",
            d[0]
        );
        // 500 Mb/s per stream x 60 ms = 3.6 MiB BDP, rounded up to a power of two: 4M.
        assert!(
            d[1].contains("(8.0 MiB autotuned)") && d[1].contains("= 3.6 MiB per stream); -w 4M"),
            "{}",
            d[1]
        );
    }

    #[test]
    fn no_finding_when_the_numbers_are_healthy() {
        let h = header(8 << 20);
        let streams = [
            row(0, 1000, 60_000, 61_000.0, 3),
            row(1, 1000, 60_000, 62_000.0, 2),
        ];
        let e = Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[0, 0],
            intervals: 10,
            rate_bps: 1e9,
        };
        assert!(diagnose(&e).is_empty());
    }

    #[test]
    fn concentrated_retransmits_and_starvation_are_named() {
        let h = header(1 << 20);
        let streams = [
            row(0, 1000, 50, 60.0, 1),
            row(1, 0, 50, 60.0, 0),
            row(2, 1000, 50, 60.0, 95),
            row(3, 1000, 50, 60.0, 4),
        ];
        let e = Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[0, 10, 0, 2],
            intervals: 10,
            rate_bps: 1e9,
        };
        let d = diagnose(&e);
        assert_eq!(
            d,
            vec![
                "diagnosis: 95% of the 100 retransmits were in stream 2 of 4: look at what they do not share \
                 with the others (path, queue, core)."
                    .to_string(),
                "diagnosis: streams 1, 3 read nothing in 12 of 40 stream-intervals (starved) while others ran."
                    .to_string(),
            ]
        );
    }

    fn kernel(receiver_ofo: u64, pressures: u64) -> KernelSummary {
        use crate::kstat::{KernelReport, TcpDrops};
        KernelSummary {
            sender: KernelReport {
                netns: Some(1),
                drops: TcpDrops {
                    memory_pressures: pressures,
                    ..Default::default()
                },
                tcp_mem_pages: Some([4000, 6000, 8000]),
                tcp_pages_start: Some(100),
                tcp_pages_peak: Some(3000),
            },
            receiver: Some(KernelReport {
                netns: Some(2),
                drops: TcpDrops {
                    ofo_drops: receiver_ofo,
                    ..Default::default()
                },
                tcp_mem_pages: Some([4000, 6000, 8000]),
                tcp_pages_start: Some(100),
                tcp_pages_peak: Some(3000),
            }),
            shared_namespace: false,
        }
    }

    #[test]
    fn kernel_drops_are_named_only_when_the_counters_moved() {
        assert_eq!(kernel_drops(&kernel(0, 0), 100, 8), None);
        let line = kernel_drops(&kernel(386, 41), 1341, 8).unwrap();
        assert!(line.contains("discarded 386 segments"), "{line}");
        assert!(line.contains("memory pressure 41 times"), "{line}");
        assert!(line.contains("peaked at 3000 pages"), "{line}");
        assert!(!line.contains("already held"), "{line}");
        assert!(line.contains("tcp_mem = 4000 6000 8000"), "{line}");
        assert!(
            line.contains("1341 retransmits") && line.contains("8 streams"),
            "{line}"
        );
        // Pressure that began before the test shows in the host's TCP memory only.
        let mut k = kernel(0, 0);
        k.receiver.as_mut().unwrap().tcp_pages_start = Some(7000);
        k.receiver.as_mut().unwrap().tcp_pages_peak = Some(7100);
        let line = kernel_drops(&k, 0, 4).unwrap();
        assert!(line.contains("peaked at 7100 pages"), "{line}");
        assert!(line.contains("already held 7000 pages"), "{line}");
        // The sender's own receive counters are not the receiver's.
        let mut k = kernel(0, 0);
        k.sender.drops.ofo_drops = 50;
        assert_eq!(kernel_drops(&k, 10, 2), None);
        // One namespace for both ends: its counters are the receiver's too.
        k.receiver = None;
        k.shared_namespace = true;
        assert!(kernel_drops(&k, 10, 2).unwrap().contains("discarded 50"));
    }

    #[test]
    fn uneven_shares_get_a_line_even_ones_do_not() {
        let f = |jain, lo, hi, streams| Fairness {
            jain: Some(jain),
            min_share: Some(lo),
            max_share: Some(hi),
            starved: 0,
            streams,
        };
        let line = unfair_shares(&f(0.865, 0.028, 0.19, 8)).unwrap();
        assert!(
            line.contains("Jain 0.865") && line.contains("2.8% to 19.0%"),
            "{line}"
        );
        assert!(line.contains("12.5% each"), "{line}");
        assert_eq!(unfair_shares(&f(0.95, 0.1, 0.15, 8)), None);
        assert_eq!(unfair_shares(&f(0.5, 0.0, 1.0, 1)), None);
    }

    #[test]
    fn a_long_drain_is_named_a_short_one_is_not() {
        let line = long_drain(15.0, 26.1, 3 << 30).unwrap();
        assert!(
            line.contains("11.1 s past -t 15") && line.contains("3.0 GiB"),
            "{line}"
        );
        assert_eq!(long_drain(15.0, 15.3, 1 << 20), None);
        assert_eq!(
            long_drain(60.0, 65.0, 1 << 20),
            None,
            "under 10 % of a long test"
        );
    }
}
