//! Findings at the end of a test, each only when the numbers show it: stalls (the whole
//! test or a stream reading nothing for whole intervals), a standing queue in the socket
//! buffers (block RTT far above the path's RTT once a block's own write time is taken out,
//! with the window that would avoid it), many retransmits, retransmits concentrated in a
//! few streams, loss holding a loss-based congestion control below its window, streams starved while others ran, drops inside the hosts' kernels, UDP
//! senders short of `-b`, a long drain past `-t` and uneven shares.
//!
//! Each check returns [`Finding`]s (`report::finding`: the figures, advice and words).
//! Pure functions of the report model; the client's reporter calls them once, at the end.
//! One file per family of checks.

use super::finding::Finding;
use super::model::{Header, StreamRow, Summary};

mod drops;
mod queue;
mod retransmits;
mod senders;
mod shares;
mod stalls;

pub use drops::{kernel_drops, udp_kernel_drops, udp_receiver_drops};
pub use senders::{long_drain, udp_sender_short};
pub use shares::unfair_shares;
pub use stalls::StallLog;

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
    /// Runs of intervals in which no stream read anything.
    pub test_stalls: &'a StallLog,
    /// Per stream: runs of intervals in which it read nothing while others did.
    pub stream_stalls: &'a [StallLog],
}

/// The findings of the checks on the whole test's rows, in the order text prints them.
pub fn diagnose(e: &Evidence) -> Vec<Finding> {
    let mut out = Vec::new();
    stalls::stalls(e, &mut out);
    queue::standing_queue(e, &mut out);
    out.extend(retransmits::retransmit_share(e));
    out.extend(retransmits::concentrated_retransmits(e));
    out.extend(retransmits::loss_limited(e));
    out.extend(stalls::starvation(e));
    out
}

/// Files findings in a summary: their words in `diagnosis` (what text prints), the
/// findings themselves in `findings`, so the two never disagree.
pub fn file(s: &mut Summary, found: impl IntoIterator<Item = Finding>) {
    for f in found {
        s.diagnosis.push(f.words.clone());
        s.findings.get_or_insert_with(Vec::new).push(f);
    }
}

/// The share of `-b` a sender reaches to count as having kept the rate asked (TCP: paced,
/// with no standing queue to advise on; UDP: not short of the load it was to offer).
const KEPT_RATE: f64 = 0.95;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::finding::human_rate;
    use crate::report::model::{Fairness, Header, KernelSummary, RttSummary, UdpFigures};

    // The checks' words, as text prints them: the tests below read those.
    fn diagnose(e: &Evidence) -> Vec<String> {
        super::diagnose(e).into_iter().map(|f| f.words).collect()
    }

    fn kernel_drops(k: &KernelSummary, retransmits: u64, streams: usize) -> Option<String> {
        super::kernel_drops(k, retransmits, streams).map(|f| f.words)
    }

    fn udp_kernel_drops(k: &KernelSummary) -> Option<String> {
        super::udp_kernel_drops(k).map(|f| f.words)
    }

    fn udp_receiver_drops(u: &UdpFigures, h: &Header, reverse: bool) -> Option<String> {
        super::udp_receiver_drops(u, h, reverse).map(|f| f.words)
    }

    fn udp_sender_short(sent_bps: f64, h: &Header) -> Option<String> {
        super::udp_sender_short(sent_bps, h).map(|f| f.words)
    }

    fn long_drain(omit: f64, duration: f64, end: f64, queued: u64, rows: bool) -> Option<String> {
        super::long_drain(omit, duration, end, queued, rows).map(|f| f.words)
    }

    fn unfair_shares(f: &Fairness) -> Option<String> {
        super::unfair_shares(f).map(|f| f.words)
    }

    fn header(sndbuf: u64) -> Header {
        let mut test = crate::wire::params::TestParams::defaults();
        test.streams = 2;
        Header {
            local_window: crate::os::netinfo::WindowGrant {
                sndbuf,
                ..Default::default()
            },
            congestion: "cubic".into(),
            ..Header::of_test(&test)
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
            udp: None,
            sent: None,
        }
    }

    /// Loss on a long path with no queue on it, cubic far below its window (the 60 ms,
    /// 0.1 % loss path: 172 Mb/s with -w 16M): named, with Reno's ceiling and -C bbr.
    /// Not under bbr, not with a queue on the path, not near what the window allows.
    #[test]
    fn loss_limited_tcp_is_named() {
        use crate::report::finding::Kind;
        let mut h = header(32 << 20);
        h.path.mss = Some(1448);
        let lossy = |srtt_us: f64| {
            let mut r = row(0, 129_000_000, 60_000, 61_000.0, 15);
            r.sndbuf = Some(32 << 20);
            r.kernel_rtt = Some(RttSummary {
                min_us: 60_000.0,
                avg_us: srtt_us,
                max_us: srtt_us,
                median_us: None,
                samples: 50,
            });
            r
        };
        let found = |h: &Header, streams: &[StreamRow], rate_bps: f64| {
            super::diagnose(&Evidence {
                header: h,
                streams,
                starved_intervals: &[0],
                intervals: 6,
                rate_bps,
                test_stalls: &StallLog::whole_test(),
                stream_stalls: &[],
            })
            .into_iter()
            .find(|f| matches!(f.kind, Kind::LossLimited(_)))
        };
        let f = found(&h, &[lossy(61_000.0)], 172e6).expect("loss-limited");
        let Kind::LossLimited(l) = &f.kind else {
            unreachable!()
        };
        // 15 of 129e6 / 1448 = 89088 segments: p = 1.68e-4; 1448 B x 8 / 60 ms x 1.22 / √p.
        assert!((l.mathis_bps / 1e6 - 18.2).abs() < 0.1, "{l:?}");
        assert!(
            f.words.contains("cubic backs off at each loss"),
            "{}",
            f.words
        );
        assert!(f.words.contains("try -C bbr"), "{}", f.words);
        assert!(
            f.advice.flags.iter().any(|s| s.name == "-C"),
            "{:?}",
            f.advice
        );
        assert!(
            found(&h, &[lossy(200_000.0)], 172e6).is_none(),
            "a queue on the path"
        );
        assert!(
            found(&h, &[lossy(61_000.0)], 2e9).is_none(),
            "near the window's rate"
        );
        h.congestion = "bbr".into();
        assert!(found(&h, &[lossy(61_000.0)], 172e6).is_none(), "bbr");
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
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &[],
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

    /// The standing queue above as data: its kind, the figures the words rest on, the
    /// window advised, and words equal to the prose text prints.
    #[test]
    fn a_standing_queue_is_data_with_its_figures_and_advice() {
        use crate::report::finding::{
            Bdp, BlockWait, BlockWrite, Change, Kind, StandingQueue, WindowAboveBdp,
        };
        let h = header(8 << 20);
        let streams = [
            row(0, 1000, 60_000, 900_000.0, 0),
            row(1, 1000, 60_000, 900_000.0, 0),
        ];
        let found = super::diagnose(&Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[0, 0],
            intervals: 10,
            rate_bps: 1e9,
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &[],
        });
        assert_eq!(found.len(), 2, "{found:?}");
        // 128 KiB blocks at 500 Mb/s per stream take 2.10 ms: the rest of the 840 ms
        // beyond the path's RTT is the queue.
        let wait = BlockWait {
            block_rtt_ms: 900.0,
            path_rtt_ms: 60.0,
            write: BlockWrite::Writing {
                block_bytes: 128 << 10,
                per_stream_bps: 5e8,
                write_ms: 2.097152,
            },
        };
        let Kind::StandingQueue(q) = found[0].kind else {
            panic!("{:?}", found[0].kind)
        };
        assert_eq!(q.wait, wait);
        assert!((q.queue_bytes - 52_368_928.0).abs() < 1.0, "{q:?}");
        assert_eq!(
            q,
            StandingQueue {
                wait,
                queue_bytes: q.queue_bytes,
                write_named: false
            }
        );
        assert!(found[0].advice.flags.is_empty() && found[0].advice.sysctls.is_empty());
        assert_eq!(
            found[0].words,
            "diagnosis: blocks waited 900.00 ms on average against a path RTT of 60.000 ms \
             (kernel min_rtt): a standing queue of about 49.9 MiB per stream in the socket \
             buffers."
        );
        assert_eq!(
            found[1].kind,
            Kind::WindowAboveBdp(WindowAboveBdp {
                sndbuf_bytes: 8 << 20,
                autotuned: true,
                bdp: Bdp {
                    per_stream_bps: 5e8,
                    path_rtt_ms: 60.0,
                    bdp_bytes: 3_750_000.0,
                },
                window_bytes: 4 << 20,
            })
        );
        let advised = &found[1].advice.flags;
        assert_eq!(advised.len(), 1, "{advised:?}");
        assert_eq!(
            (
                advised[0].name.as_str(),
                advised[0].change,
                advised[0].value.as_deref()
            ),
            ("-w", Change::Set, Some("4M"))
        );
        assert_eq!(
            found[1].words,
            "diagnosis: the send buffer (8.0 MiB autotuned) is far above the bandwidth-delay \
             product (500 Mb/s x 60.000 ms = 3.6 MiB per stream); -w 4M should keep the rate \
             without the queue."
        );
        assert_eq!(found[1].to_string(), found[1].words);
        // In JSON: the kind, its figures and advice by name, and the words.
        let json = serde_json::to_value(&found[1]).unwrap();
        assert_eq!(json["kind"], "window_above_bdp");
        assert_eq!(json["figures"]["window_bytes"], 4 << 20);
        assert_eq!(json["figures"]["path_rtt_ms"], 60.0);
        assert_eq!(
            json["advice"],
            serde_json::json!({"flags": [{"name": "-w", "change": "set", "value": "4M"}],
                               "sysctls": []})
        );
        assert_eq!(json["words"], found[1].words.as_str());
        let back: crate::report::finding::Finding = serde_json::from_value(json).unwrap();
        assert_eq!(back, found[1]);
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
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &[],
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
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &[],
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
        use crate::os::kstat::{KernelReport, TcpDrops};
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
                udp: None,
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
                udp: Some(crate::os::kstat::UdpDrops {
                    rcvbuf_errors: 7,
                    in_errors: 9,
                    ..Default::default()
                }),
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
        let line = long_drain(0.0, 15.0, 26.1, 3 << 30, false).unwrap();
        assert!(
            line.contains("11.1 s past -t 15:") && line.contains("3.0 GiB"),
            "{line}"
        );
        assert_eq!(long_drain(0.0, 15.0, 15.3, 1 << 20, false), None);
        assert!(line.contains("the last row covers that drain"), "{line}");
        // Against a peer that reports late the rows are this end's writes, on time:
        // none of them covers the drain.
        let line = long_drain(0.0, 2.0, 3.6, 1 << 20, true).unwrap();
        assert!(
            line.contains("; the totals cover that drain (the rows are this end's writes"),
            "{line}"
        );
        assert_eq!(
            long_drain(0.0, 60.0, 65.0, 1 << 20, false),
            None,
            "under 10 % of a long test"
        );
    }

    /// `-t 2.5` is printed as given, not rounded to `-t 2`; `-O` moves the planned end.
    #[test]
    fn a_drain_names_the_duration_as_given() {
        let line = long_drain(0.0, 2.5, 4.0, 1 << 20, false).unwrap();
        assert!(line.contains("1.5 s past -t 2.5:"), "{line}");
        let line = long_drain(1.0, 2.5, 5.0, 1 << 20, false).unwrap();
        assert!(line.contains("1.5 s past -t 2.5 -O 1:"), "{line}");
        assert_eq!(
            long_drain(1.0, 2.5, 3.6, 1 << 20, false),
            None,
            "-O is not lateness"
        );
    }

    /// The evidence of one stream with `rate_bps`, a block RTT and a path RTT, under
    /// `header`.
    fn one_stream(h: &Header, row: StreamRow, rate_bps: f64) -> Vec<String> {
        let streams = [row];
        diagnose(&Evidence {
            header: h,
            streams: &streams,
            starved_intervals: &[0],
            intervals: 10,
            rate_bps,
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &[StallLog::default()],
        })
    }

    fn windowed(block_bytes: u64, requested: u64, sndbuf: u64, rcvbuf: u64) -> Header {
        let mut h = header(sndbuf);
        h.block_bytes = block_bytes;
        h.local_window.requested = Some(requested);
        h.remote_window = crate::os::netinfo::WindowGrant {
            requested: Some(requested),
            sndbuf,
            rcvbuf,
            ..Default::default()
        };
        h.streams = 1;
        h
    }

    /// `-l 64M -w 64k` at 27896 Mb/s, path 4 µs, block RTT 19.241 ms: 64 MiB take
    /// 19.24 ms to write at that rate, so the wait is the block's own write time, not a
    /// queue, and no window is advised.
    #[test]
    fn a_blocks_own_write_time_is_not_a_queue() {
        let h = windowed(64 << 20, 64 << 10, 128 << 10, 128 << 10);
        let d = one_stream(&h, row(0, 1000, 4, 19_241.0, 0), 27_896.226e6);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            !d[0].contains("standing queue") && !d[0].contains("-w"),
            "{d:?}"
        );
        assert!(
            d[0].contains("blocks waited 19.24 ms")
                && d[0].contains(
                    "each block's own write time (-l 64M takes 19.25 ms to write \
                                  at 27896 Mb/s per stream"
                ),
            "{d:?}"
        );
    }

    /// `-b 10k`, block RTT 11.85 ms: a paced sender writes one-byte pieces at that rate
    /// and reads echoes between them, so the wait is the pacing of the 16-byte header
    /// after its first byte (12 ms), not a 128 KiB block's write time, and no advice
    /// about -l.
    #[test]
    fn a_paced_senders_wait_is_its_header_s_pacing() {
        let mut h = windowed(128 << 10, 64 << 10, 128 << 10, 128 << 10);
        h.rate_bps = Some(10_000);
        let d = one_stream(&h, row(0, 1000, 4, 11_850.0, 0), 10_008.0);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains(
                "the pacing of each block's header (-b 10 kb/s paces out each \
                           block's 16-byte header in 12.00 ms), not a queue."
            ) && !d[0].contains("-l "),
            "{d:?}"
        );
    }

    /// `-b 100M` (block RTT 1.07 ms, path 6 us, 4 MiB autotuned): a sender held to -b
    /// leaves no queue in its socket buffers, so no -w is advised; one that fell short of
    /// -b (the path took less) still gets the queue and the advice.
    #[test]
    fn a_sender_held_to_its_rate_has_no_standing_queue_to_advise_on() {
        let mut h = header(4 << 20);
        h.streams = 1;
        h.rate_bps = Some(100_000_000);
        let d = one_stream(&h, row(0, 1000, 6, 1_070.0, 0), 99.99e6);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("-b 100 Mb/s paced the sender below what the path takes")
                && d[0].contains("a smaller -w would not shorten them"),
            "{d:?}"
        );
        let d = one_stream(&h, row(0, 1000, 6, 1_070.0, 0), 60e6);
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
        assert!(
            d[1].contains("should keep the rate without the queue"),
            "{d:?}"
        );
        // At about the bottleneck's rate a queue stands: 1.5 MiB unsent at the end, or a
        // wait past any delayed ACK (90 ms on a 10 ms path).
        let mut queued = row(0, 1000, 10_000, 90_000.0, 0);
        queued.notsent_bytes = Some(1_560_000);
        let d = one_stream(&h, queued.clone(), 95.4e6);
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
        queued.notsent_bytes = None;
        let d = one_stream(&h, queued, 95.4e6);
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
    }

    /// `-w 1k` (granted 4608 and 2304 B) at 160 Mb/s with a block RTT of 7.46 ms: a
    /// 128 KiB block takes 6.55 ms to write, the rest is under a millisecond: no queue,
    /// no advice.
    #[test]
    fn a_tiny_window_is_not_blamed_for_the_block_size() {
        let h = windowed(128 << 10, 1 << 10, 4608, 2304);
        let d = one_stream(&h, row(0, 1000, 4, 7_458.7, 0), 160e6);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            !d[0].contains("145.6 KiB") && !d[0].contains("-w 64k"),
            "{d:?}"
        );
        assert!(
            d[0].contains("-l 128k takes 6.55 ms to write at 160 Mb/s"),
            "{d:?}"
        );
        // A longer wait than the write time is still not a queue in 6.8 KiB of buffers.
        let d = one_stream(&h, row(0, 1000, 4, 10_000.0, 0), 160e6);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("more than the socket buffers hold (6.8 KiB sent + received)")
                && d[0].contains("not in a too-large window")
                && !d[0].contains("-w 64k"),
            "{d:?}"
        );
    }

    /// A real queue with the window already at the suggestion: no advice to use the same
    /// window (or a larger one), but what else to look at.
    #[test]
    fn the_window_in_use_is_never_advised() {
        // 10 Mb/s, path 20 ms: BDP 25 KiB, suggestion 64k = the window in use. Block RTT
        // 150 ms: 8k blocks take 6.6 ms, a queue of about 150 KiB fits 256 KiB of buffers.
        let h = windowed(8 << 10, 64 << 10, 128 << 10, 128 << 10);
        let d = one_stream(&h, row(0, 1000, 20_000, 150_000.0, 0), 10e6);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
        assert!(
            d[1].contains("the window (-w 64k, 128.0 KiB granted) is already at or below")
                && d[1].contains("(10 Mb/s x 20.000 ms = 24.4 KiB per stream)")
                && d[1].contains("-l 8k takes 6.55 ms"),
            "{d:?}"
        );
        assert!(!d[1].contains("-w 64k should"), "{d:?}");
        // A window above the suggestion gets the suggestion.
        let h = windowed(8 << 10, 1 << 20, 2 << 20, 2 << 20);
        let d = one_stream(&h, row(0, 1000, 20_000, 150_000.0, 0), 10e6);
        assert!(d[1].contains("; -w 64k should keep the rate"), "{d:?}");
    }

    /// Rates below 10 Mb/s keep their figures (not `0 Mb/s`); no rate at all sizes
    /// nothing.
    #[test]
    fn small_rates_are_worded_and_no_rate_sizes_nothing() {
        assert_eq!(human_rate(27_896.226e6), "27896 Mb/s");
        assert_eq!(human_rate(2.5e6), "2.50 Mb/s");
        assert_eq!(human_rate(250e3), "250 kb/s");
        assert_eq!(human_rate(12.0), "12 b/s");
        let mut h = header(8 << 20);
        h.block_bytes = 8 << 10;
        let streams = [
            row(0, 1000, 21_182, 900_000.0, 0),
            row(1, 1000, 21_182, 900_000.0, 0),
        ];
        let at = |rate_bps| {
            diagnose(&Evidence {
                header: &h,
                streams: &streams,
                starved_intervals: &[0, 0],
                intervals: 10,
                rate_bps,
                test_stalls: &StallLog::whole_test(),
                stream_stalls: &[],
            })
        };
        let d = at(0.9e6);
        assert!(d.iter().all(|l| !l.contains(" 0 Mb/s")), "{d:?}");
        assert!(
            d.iter().any(|l| l.contains("(450 kb/s x 21.182 ms = ")),
            "{d:?}"
        );
        assert!(at(0.0).is_empty());
    }

    fn log(whole_test: bool, steps: &[(f64, bool, bool)]) -> StallLog {
        let mut l = if whole_test {
            StallLog::whole_test()
        } else {
            StallLog::default()
        };
        for &(start, nothing, others) in steps {
            l.step(start, start + 0.5, nothing, others);
        }
        l.finish();
        l
    }

    #[test]
    fn stall_logs_count_runs_and_keep_the_longest() {
        let l = log(
            true,
            &[
                (0.0, false, false),
                (0.5, true, false),
                (1.0, false, false),
                (1.5, true, false),
                (2.0, true, false),
                (2.5, true, false),
            ],
        );
        assert_eq!((l.count, l.intervals), (2, 4));
        let longest = l.longest.unwrap();
        assert_eq!(
            (longest.start, longest.end, longest.intervals),
            (1.5, 3.0, 3)
        );
        // A stream's run counts only when others read data during it.
        let l = log(false, &[(0.0, true, false), (0.5, false, false)]);
        assert_eq!(l.count, 0);
        let l = log(false, &[(0.0, true, false), (0.5, true, true)]);
        assert_eq!((l.count, l.intervals), (1, 2));
    }

    /// A 4 s path's first second is empty because the first bytes are on their way: no
    /// stall is said for it; the same empty second on a 3 ms path is one.
    #[test]
    fn the_first_round_trip_of_a_long_path_is_not_a_stall() {
        let h = header(1 << 20);
        let test = log(
            true,
            &[(0.0, true, false), (0.5, true, false), (1.0, false, false)],
        );
        let said = |min_rtt_us: u32| {
            diagnose(&Evidence {
                header: &h,
                streams: &[row(0, 1000, min_rtt_us, 60.0, 0)],
                starved_intervals: &[2],
                intervals: 3,
                rate_bps: 1e9,
                test_stalls: &test,
                stream_stalls: &[StallLog::default()],
            })
            .iter()
            .any(|l| l.starts_with("diagnosis: no data moved"))
        };
        assert!(!said(4_000_000), "a 4 s path");
        assert!(said(3_000), "a 3 ms path");
    }

    /// `-b 1M` of 128k blocks sends one block every 1.05 s: empty 0.5 s intervals are the
    /// pacing's ("no data moved" at -b 1); at -b 100M they are a stall.
    #[test]
    fn a_pacing_slower_than_a_block_per_interval_is_not_a_stall() {
        let test = log(
            true,
            &[(0.0, false, false), (0.5, true, false), (1.0, false, false)],
        );
        let said = |rate: u64| {
            let mut h = header(1 << 20);
            h.rate_bps = Some(rate);
            h.interval_s = 0.5;
            diagnose(&Evidence {
                header: &h,
                streams: &[row(0, 1000, 3_000, 60.0, 0)],
                starved_intervals: &[0],
                intervals: 3,
                rate_bps: 1e6,
                test_stalls: &test,
                stream_stalls: &[StallLog::default()],
            })
            .iter()
            .any(|l| l.starts_with("diagnosis: no data moved"))
        };
        assert!(!said(1_000_000), "-b 1M");
        assert!(said(100_000_000), "-b 100M");
    }

    /// A paused sender (SIGSTOP from 1.3 s to 3.8 s of `-t 3`) and a stream
    /// that read nothing while the others ran: each said with when and how long.
    #[test]
    fn stalls_are_said_with_when_and_how_long() {
        let h = header(1 << 20);
        let streams = [row(0, 1000, 50, 60.0, 0), row(1, 1000, 50, 60.0, 0)];
        let test = log(
            true,
            &[
                (1.0, false, false),
                (1.5, true, false),
                (2.0, true, false),
                (2.5, true, false),
            ],
        );
        let s1 = log(false, &[(0.0, true, true), (0.5, false, false)]);
        let d = diagnose(&Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[3, 4],
            intervals: 4,
            rate_bps: 1e9,
            test_stalls: &test,
            stream_stalls: &[StallLog::default(), s1],
        });
        assert_eq!(
            d[0],
            "diagnosis: no data moved from 1.5 s to 3.0 s (3 intervals): a sender or receiver was \
             stopped (paused, or not scheduled) or the path stalled."
        );
        assert!(
            d[1].starts_with(
                "diagnosis: stream 1 read nothing from 0.0 s to 0.5 s (1 interval) while others \
                 moved data:"
            ),
            "{d:?}"
        );
        assert!(d[2].contains("stream 1 read nothing in 1 of 8"), "{d:?}");
        // Both streams read nothing in the 3 stalled intervals: the test's stall, not
        // starvation "while others ran".
        let d = diagnose(&Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[3, 3],
            intervals: 4,
            rate_bps: 1e9,
            test_stalls: &test,
            stream_stalls: &[StallLog::default(), StallLog::default()],
        });
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("diagnosis: no data moved"), "{d:?}");
    }

    #[test]
    fn many_stalled_streams_are_summed_up() {
        let h = header(1 << 20);
        let streams: Vec<StreamRow> = (0..6).map(|i| row(i, 1000, 50, 60.0, 0)).collect();
        let stalls: Vec<StallLog> = (0..6)
            .map(|i| log(false, &vec![(0.0, true, true); i + 1]))
            .collect();
        let d = diagnose(&Evidence {
            header: &h,
            streams: &streams,
            starved_intervals: &[1, 2, 3, 4, 5, 6],
            intervals: 10,
            rate_bps: 1e9,
            test_stalls: &StallLog::whole_test(),
            stream_stalls: &stalls,
        });
        let stalled: Vec<&String> = d
            .iter()
            .filter(|l| l.contains("while others moved"))
            .collect();
        assert_eq!(stalled.len(), 5, "{d:?}");
        assert!(stalled[0].contains("stream 5 read nothing from 0.0 s to 0.5 s (6 intervals)"));
        assert!(
            stalled[4].contains("streams 0, 1 also read nothing"),
            "{d:?}"
        );
    }

    /// Retransmits of 1 % of the segments or more (and at least 10) get a line.
    #[test]
    fn many_retransmits_get_a_line() {
        let mut h = header(1 << 20);
        h.path.mss = Some(1448);
        // 2 x 1 GB sent = about 1.38 M segments; 44 220 retransmits = 3.2 %.
        let streams = [
            row(0, 1_000_000_000, 50, 60.0, 22_000),
            row(1, 1_000_000_000, 50, 60.0, 22_220),
        ];
        let e = |h: &Header| {
            diagnose(&Evidence {
                header: h,
                streams: &streams,
                starved_intervals: &[0, 0],
                intervals: 10,
                rate_bps: 1e9,
                test_stalls: &StallLog::whole_test(),
                stream_stalls: &[],
            })
        };
        let d = e(&h);
        let line = d
            .iter()
            .find(|l| l.contains("retransmitted"))
            .expect("a line");
        assert!(
            line.starts_with("diagnosis: 44220 segments retransmitted, 3.2% of the about 1381215 sent (MSS 1448 B"),
            "{line}"
        );
        assert!(
            line.contains("on the path") && line.contains("smaller -w"),
            "{line}"
        );
        assert!(!line.contains("bbr"), "{line}");
        h.congestion = "bbr".into();
        assert!(e(&h).iter().any(|l| l.contains("bbr also retransmits")));
        // No MSS to count segments: nothing.
        h.path.mss = None;
        assert!(!e(&h).iter().any(|l| l.contains("retransmitted")));
        // Under 1 % of the segments, or fewer than 10 in all: nothing.
        h.path.mss = Some(1448);
        let few = |bytes: u64, retr: u64| {
            let streams = [row(0, bytes, 50, 60.0, retr)];
            diagnose(&Evidence {
                header: &h,
                streams: &streams,
                starved_intervals: &[0],
                intervals: 10,
                rate_bps: 1e9,
                test_stalls: &StallLog::whole_test(),
                stream_stalls: &[],
            })
            .iter()
            .any(|l| l.contains("retransmitted"))
        };
        assert!(!few(1_000_000_000, 6_000), "0.9 %");
        assert!(few(1_000_000_000, 7_000), "1.0 %");
        assert!(!few(14_480, 9), "9 of 10 segments");
        assert!(few(14_480, 10));
    }

    /// A UDP test names the receiving kernel's buffer drops from its namespace counters.
    #[test]
    fn udp_drops_in_the_receiving_kernel_are_named() {
        let line = udp_kernel_drops(&kernel(0, 0)).unwrap();
        assert!(
            line.contains("dropped 7 UDP datagrams for full socket buffers"),
            "{line}"
        );
        let mut quiet = kernel(0, 0);
        quiet.receiver = None;
        assert_eq!(udp_kernel_drops(&quiet), None);
    }

    /// A UDP sender below its -b is named; one at its rate is not.
    #[test]
    fn a_udp_sender_short_of_its_rate_is_named() {
        let mut h = header(0);
        h.rate_bps = Some(40_000_000_000);
        h.block_bytes = 1472;
        let line = udp_sender_short(8.4e9, &h).unwrap();
        assert!(
            line.contains("8400.0 Mb/s per stream, 21% of the -b 40G asked"),
            "{line}"
        );
        assert_eq!(udp_sender_short(39.9e9, &h), None);
        h.rate_bps = None;
        assert_eq!(udp_sender_short(1.0, &h), None);
    }

    /// A receiver's own buffer overflowed: the buffer named is the receiving end's, and a
    /// server's is as large as its --max-window lets a client ask for.
    #[test]
    fn receiver_drops_name_the_receivers_buffer_and_the_servers_cap() {
        let u = UdpFigures {
            packets: 1000,
            lost_packets: 40,
            rxq_drops: 40,
            ..Default::default()
        };
        let mut h = header(1 << 20);
        h.remote_window.rcvbuf = 128 << 10;
        h.local_window.rcvbuf = 4 << 20;
        let forward = udp_receiver_drops(&u, &h, false).unwrap();
        assert!(
            forward.contains("all of the 40 datagrams lost"),
            "{forward}"
        );
        assert!(
            forward.contains("its buffer is 128k, up to the server's --max-window"),
            "{forward}"
        );
        // -R, and --bidir's server-to-client direction: the client's buffer.
        let reverse = udp_receiver_drops(&u, &h, true).unwrap();
        assert!(reverse.contains("(its buffer is 4M)"), "{reverse}");
        // Receivers not at real-time priority: --realtime is the first remedy named.
        assert!(
            forward.contains(
                "kept off its core by other tasks): --realtime (receivers at SCHED_FIFO: root, \
                 and a server started with --allow-realtime), a larger -w"
            ),
            "{forward}"
        );
        let advised = |h: &Header| -> Vec<String> {
            let found = super::udp_receiver_drops(&u, h, false).unwrap();
            found.advice.flags.into_iter().map(|s| s.name).collect()
        };
        assert_eq!(advised(&h), ["--realtime", "-w", "-b"]);
        h.realtime = true;
        assert_eq!(advised(&h), ["-w", "-b"]);
        // An iperf3 server has no real-time receivers to offer.
        let iperf3 = Header {
            realtime: false,
            peer: crate::iperf3::wording::server(),
            ..h.clone()
        };
        assert_eq!(advised(&iperf3), ["-w", "-b"]);
        let realtime = udp_receiver_drops(&u, &h, false).unwrap();
        assert!(
            realtime.contains("did not keep up even at real-time priority: a larger -w"),
            "{realtime}"
        );
        assert_eq!(
            udp_receiver_drops(&UdpFigures::default(), &h, true),
            None,
            "no drops, no line"
        );
    }
}
