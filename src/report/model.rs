//! The report model: plain data every formatter prints and never recomputes. Built by the
//! client's reporter from the receiver's rows (the truth for Mb/s) joined with the
//! sender's own intervals (block RTT, `TCP_INFO`, bytes written). Field names follow
//! iperf3's JSON where the concept is the same (`bytes`, `bits_per_second`,
//! `retransmits`, `snd_cwnd`, `rtt`, `sum_sent`, `sum_received`); times in seconds as
//! iperf3 does, RTTs in microseconds, rates in bits per second.

use serde::{Deserialize, Serialize};

use crate::choices::Engine;
use crate::data::pin::PinPlan;
use crate::os::cpu::{CoreLoad, CpuReport};
use crate::os::netinfo::{PathInfo, WindowGrant};
use crate::report::peer::Peer;
pub use crate::wire::params::Direction;

/// Everything known before the first byte moves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub software: String,
    pub local: String,
    pub remote: String,
    pub remote_software: String,
    pub streams: u16,
    pub block_bytes: u64,
    pub local_window: WindowGrant,
    pub remote_window: WindowGrant,
    pub path: PathInfo,
    pub local_pin: PinPlan,
    pub remote_pin: PinPlan,
    /// Why this placement (e.g. the same-host rule), when there is something to say.
    pub placement_note: Option<String>,
    pub duration_s: f64,
    /// `-n`/`-k`: what ends the test (then `duration_s` is the longest it may run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::wire::params::Budget>,
    /// `-O`: seconds run before `duration_s` and left out of the totals.
    #[serde(default)]
    pub omit_s: f64,
    pub interval_s: f64,
    /// Block-header echoes (block RTT) are on.
    pub echo: bool,
    /// Congestion control of the data connections (as the sender's socket reports it).
    pub congestion: String,
    /// Client and server on one host (their cores are the same cores).
    pub same_host: bool,
    /// Client and server in one process (`--loopback`): process CPU counts both.
    pub same_process: bool,
    /// `--cpu`: per-core load per interval.
    pub cpu_intervals: bool,
    /// How the sender drove its streams.
    pub engine: Engine,
    /// Which ends send: the client (`forward`), the server (`reverse`, `-R`), or both at
    /// once (`bidir`, each direction with its own streams, rows and totals).
    #[serde(default = "forward")]
    pub direction: Direction,
    /// `-u`: UDP datagrams of `block_bytes` at `rate_bps` per stream.
    #[serde(default)]
    pub udp: bool,
    /// `-b` per stream, bits/s (absent: as fast as possible).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// `--fq-rate` per TCP stream (the kernel's pacing), bits/s.
    #[serde(default)]
    pub fq_rate_bps: Option<u64>,
    /// `-S`: the IP TOS byte of the data sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// With `-S`: the TOS byte this end's data sockets carry, read back (Linux keeps a TCP
    /// socket's ECN bits for itself: `-S 0x2b` carries 0x28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos_carried: Option<u8>,
    /// `-M`: the MSS asked of the data connections (`path.mss` is the one in use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss_asked: Option<u32>,
    /// `-N`: TCP_NODELAY on the data connections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_delay: bool,
    /// The `SO_RCVLOWAT` mark pinperf's receivers raise while a stream is fast, bytes,
    /// where they may (`receiver::low_water_applies`); absent with `--no-rcvlowat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvlowat_bytes: Option<u64>,
    /// `--realtime`: UDP receiving threads ran at real-time priority (SCHED_FIFO).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub realtime: bool,
    /// When the test started, in this host's time with its offset
    /// (`2026-12-03T13:40:00+0000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// This host's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_host: Option<String>,
    /// The server's name, as it said it (absent from older servers and other tools').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_host: Option<String>,
    /// What the far end reports (not saved: a saved document's reader sets it).
    #[serde(skip)]
    pub peer: Peer,
}

impl Header {
    /// What the header says of the test's parameters, the one place they are copied in;
    /// each end fills in the rest (addresses, windows, path, pinning, engine) by struct
    /// update.
    pub fn of_test(test: &crate::wire::params::TestParams) -> Header {
        Header {
            software: String::new(),
            local: String::new(),
            remote: String::new(),
            remote_software: String::new(),
            streams: test.streams,
            block_bytes: test.block_bytes(),
            local_window: WindowGrant::default(),
            remote_window: WindowGrant::default(),
            path: PathInfo::default(),
            local_pin: PinPlan(Vec::new()),
            remote_pin: PinPlan(Vec::new()),
            placement_note: None,
            duration_s: test.duration().as_secs_f64(),
            budget: test.budget(),
            omit_s: test.omit().as_secs_f64(),
            interval_s: test.interval().as_secs_f64(),
            echo: test.echo(),
            congestion: String::new(),
            same_host: false,
            same_process: false,
            cpu_intervals: false,
            engine: Engine::Threads,
            direction: test.direction(),
            udp: test.udp,
            rate_bps: test.rate(),
            fq_rate_bps: test.fq_rate_bps,
            tos: test.tos,
            tos_carried: None,
            mss_asked: test.mss(),
            started_at: None,
            local_host: None,
            remote_host: None,
            no_delay: test.no_delay(),
            rcvlowat_bytes: None,
            realtime: test.realtime_receivers(),
            peer: Peer::default(),
        }
    }

    /// When the senders planned to stop, seconds from the start: `-O`'s omitted seconds
    /// and `-t`'s measured ones (as `TestParams::run_time`).
    pub fn run_time_s(&self) -> f64 {
        self.omit_s + self.duration_s
    }

    /// What each write carries, for titles: `128k blocks`, `1472 UDP datagrams`.
    pub fn payload(&self) -> String {
        let size = crate::units::format_size(self.block_bytes);
        match self.udp {
            true => format!("{size} UDP datagrams"),
            false => format!("{size} blocks"),
        }
    }
}

fn forward() -> Direction {
    Direction::Forward
}

/// RTT statistics, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RttSummary {
    pub min_us: f64,
    pub avg_us: f64,
    pub max_us: f64,
    /// Kept for block RTT per interval; absent for kernel srtt and for whole-test totals.
    pub median_us: Option<f64>,
    pub samples: u64,
}

/// One stream over one span (an interval, or the whole test).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRow {
    pub stream: u16,
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    /// Bytes the receiver read.
    pub bytes: u64,
    /// What the receiver saw: `bytes` over the span.
    pub bits_per_second: f64,
    /// Bytes the sender's `write()` calls returned in the matching sender span.
    pub sent_bytes: u64,
    pub retransmits: Option<u64>,
    /// Congestion window at the span's end, bytes.
    pub snd_cwnd: Option<u64>,
    /// Kernel smoothed RTT (mean of samples), its variation and the connection's min RTT.
    pub rtt: Option<f64>,
    pub rttvar: Option<u32>,
    pub min_rtt: Option<u32>,
    pub delivery_rate: Option<u64>,
    pub pacing_rate: Option<u64>,
    /// Bytes written but not yet sent, at the span's end.
    pub notsent_bytes: Option<u32>,
    /// The send buffer's size at the span's end (`SO_SNDBUF`, after autotuning).
    pub sndbuf: Option<u64>,
    /// Kernel srtt over the span's samples.
    pub kernel_rtt: Option<RttSummary>,
    /// Block RTT (header echoes): every queue a block waited in, both ways.
    pub block_rtt: Option<RttSummary>,
    /// `-u`: the receiver's datagram accounting (absent for TCP).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpFigures>,
    /// In the totals only: the sender's side of the stream over the same span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<SentTotal>,
}

/// A stream's sender over the whole test (iperf3's `end.streams[].sender`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SentTotal {
    /// `sent_bytes` over the span.
    pub bits_per_second: f64,
    /// The largest congestion window the stream's `TCP_INFO` showed at an interval's end
    /// (absent without `TCP_INFO`), bytes.
    pub max_snd_cwnd: Option<u64>,
}

/// A UDP span's datagrams, under iperf3's names where iperf3 has the concept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpFigures {
    /// Datagrams the sender sent (in the totals; an interval's are what its highest
    /// sequence says).
    pub packets: u64,
    /// Of those, never received: in the totals `packets` less those received, so the
    /// tail a dead path swallowed counts.
    pub lost_packets: u64,
    pub lost_percent: f64,
    /// Received after a later one (they filled a gap).
    pub out_of_order: u64,
    /// Received more than once (counted once above).
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter at the span's end (the streams' mean in a sum), ms.
    pub jitter_ms: f64,
    /// Datagrams the receiver's kernel dropped on its full socket buffer (`SO_RXQ_OVFL`;
    /// with GRO, drop events).
    pub rxq_drops: u64,
}

impl UdpFigures {
    /// The figures of several streams together: counts add, jitter is their mean.
    pub fn sum<'a>(parts: impl Iterator<Item = &'a UdpFigures>) -> Option<UdpFigures> {
        let (mut total, mut n) = (UdpFigures::default(), 0u32);
        for p in parts {
            total.packets += p.packets;
            total.lost_packets += p.lost_packets;
            total.out_of_order += p.out_of_order;
            total.duplicates += p.duplicates;
            total.rxq_drops += p.rxq_drops;
            total.jitter_ms += p.jitter_ms;
            n += 1;
        }
        (n > 0).then(|| {
            total.jitter_ms /= f64::from(n);
            total.lost_percent = percent(total.lost_packets, total.packets);
            total
        })
    }
}

/// `part` of `whole` in percent (0 when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> f64 {
    match whole {
        0 => 0.0,
        w => part as f64 * 100.0 / w as f64,
    }
}

/// How evenly the streams shared a span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// Jain's index over the streams' bytes: 1 = equal, 1/N = one stream got everything.
    pub jain: Option<f64>,
    /// Smallest and largest stream share of the bytes (0..1).
    pub min_share: Option<f64>,
    pub max_share: Option<f64>,
    /// Streams that read nothing in the span.
    pub starved: u32,
    pub streams: u32,
}

/// All streams together over one interval. Never confusable with a stream row: it is its
/// own type, under `sum`, with `"sum": true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SumRow {
    pub sum: bool,
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub sent_bytes: u64,
    pub retransmits: Option<u64>,
    /// The streams' congestion windows at the span's end added up, bytes (absent when no
    /// stream has one).
    pub snd_cwnd: Option<u64>,
    /// The lowest of the streams' connection min RTTs: the path without queues.
    pub min_rtt: Option<u32>,
    pub block_rtt: Option<RttSummary>,
    pub kernel_rtt: Option<RttSummary>,
    pub fairness: Fairness,
    /// `-u`: the streams' datagrams together.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpFigures>,
}

/// One interval: a row per stream and their sum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalReport {
    pub index: u32,
    /// Inside `-O`'s omitted seconds: shown, left out of the totals.
    #[serde(default)]
    pub omitted: bool,
    /// A test cut short: the receiver measured this row after the sender's last report
    /// (which it never sent); shown, with no sender figures, left out of the totals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uncounted: bool,
    pub streams: Vec<StreamRow>,
    pub sum: SumRow,
    /// With `--cpu`: this host's cores over the interval (as the client printed it).
    pub cores: Option<Vec<CoreLoad>>,
    /// The server sent these bytes (`-R`, or `--bidir`'s second direction).
    #[serde(default)]
    pub reverse: bool,
}

/// Why a row is shown but left out of the totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// Inside `-O`'s omitted seconds.
    Omitted,
    /// Past the sender's last report in a test cut short.
    Uncounted,
}

impl IntervalReport {
    /// Whether (and why) the totals leave this row out: `-O`'s seconds first.
    pub fn left_out(&self) -> Option<LeftOut> {
        match (self.omitted, self.uncounted) {
            (true, _) => Some(LeftOut::Omitted),
            (false, true) => Some(LeftOut::Uncounted),
            (false, false) => None,
        }
    }
}

/// Bytes and rate of one side, over the whole test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SideTotal {
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
    /// Not known ([`SideTotal::unknown`]): written as `null`.
    #[serde(skip)]
    pub unknown: bool,
}

impl SideTotal {
    /// A side whose count never came (a sender silent before its first row; a late
    /// peer's count, which comes only with the results a test cut short does not get):
    /// zero here, `null` in JSON, not this end's count made out to be the other's.
    pub fn unknown() -> SideTotal {
        SideTotal {
            start: 0.0,
            end: 0.0,
            seconds: 0.0,
            bytes: 0,
            bits_per_second: 0.0,
            retransmits: None,
            unknown: true,
        }
    }
}

/// `sum_sent`/`sum_received` as JSON: `null` for an unknown side.
mod side_or_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::SideTotal;

    pub fn serialize<S: Serializer>(side: &SideTotal, s: S) -> Result<S::Ok, S::Error> {
        match side.unknown {
            true => s.serialize_none(),
            false => side.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SideTotal, D::Error> {
        Ok(Option::<SideTotal>::deserialize(d)?.unwrap_or_else(SideTotal::unknown))
    }
}

/// Fairness over the whole test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestFairness {
    /// Over the streams' totals.
    #[serde(flatten)]
    pub totals: Fairness,
    /// Stream-intervals in which a stream read nothing, of all stream-intervals.
    pub starved_intervals: u32,
    pub stream_intervals: u32,
}

/// The end of the test. Every total in it (each stream, `sum`, `sum_sent`,
/// `sum_received`) spans the test: from `-O`'s end (0 without it) to the later of the
/// planned end (`omit_s + duration_s`) and the last byte, and its rate is its bytes over
/// that span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Per-stream totals (receiver bytes, sender bytes, whole-test RTTs).
    pub streams: Vec<StreamRow>,
    pub sum: SumRow,
    /// `null` when unknown ([`SideTotal::unknown`]).
    #[serde(with = "side_or_null")]
    pub sum_sent: SideTotal,
    #[serde(with = "side_or_null")]
    pub sum_received: SideTotal,
    pub fairness: TestFairness,
    /// Plain-words findings, only when the numbers show them.
    pub diagnosis: Vec<String>,
    /// The same findings as data, one per line of `diagnosis`: kind, figures, advice and
    /// words. Absent (not empty) in documents saved before findings were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<Vec<crate::report::finding::Finding>>,
    /// iperf3's summary figures: percent of one core, local and remote.
    pub cpu_utilization_percent: Option<CpuUtilization>,
    /// Both ends' CPU in full, and what the throughput cost.
    pub cpu: Option<CpuSummary>,
    /// Both ends' kernel TCP drop and memory-pressure counters over the test.
    pub kernel: Option<KernelSummary>,
    /// Bytes sent and received in `-O`'s omitted seconds (not in the totals above). TCP
    /// cuts both at the receiver's byte, so the two are equal (the omitted rows' own
    /// `sent_bytes` stay on the sender's clock, so they add up to more); UDP at its
    /// sequence.
    #[serde(default)]
    pub omitted: Omitted,
    /// The test was cut short (a failure, a signal): the totals, sent and received, are
    /// over the intervals both ends reported so far (what the sender wrote after the
    /// receiver's last row is in neither); over TCP the sent count is at least what was
    /// read.
    #[serde(default)]
    pub cut_short: bool,
    /// Cut short before the sender reported any interval past `-O`'s seconds: the totals
    /// are the receiver's rows alone, and the sender's bytes, rate and retransmits are
    /// unknown (not zero).
    #[serde(default)]
    pub sender_silent: bool,
    /// The server sent these bytes (`-R`, or `--bidir`'s second direction).
    #[serde(default)]
    pub reverse: bool,
}

/// What `-O` left out of the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Omitted {
    pub seconds: f64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
}

/// Kernel TCP counters of the sending (client) and receiving (server) end. When both ends
/// share a network namespace the counters are one set, in `sender`, and `receiver` is
/// absent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KernelSummary {
    pub sender: crate::os::kstat::KernelReport,
    pub receiver: Option<crate::os::kstat::KernelReport>,
    pub shared_namespace: bool,
}

/// iperf3's `cpu_utilization_percent`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuUtilization {
    pub host_total: f64,
    pub host_user: f64,
    pub host_system: f64,
    pub remote_total: Option<f64>,
    pub remote_user: Option<f64>,
    pub remote_system: Option<f64>,
}

/// Both ends' CPU over the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuSummary {
    pub local: CpuReport,
    pub remote: Option<CpuReport>,
    /// One host: the cores are counted once.
    pub same_host: bool,
    /// One process (`--loopback`): process times hold both ends and are counted once.
    pub same_process: bool,
    /// Cores kept busy on the host(s) involved (sum of busy fractions).
    pub busy_cores: f64,
    /// Received Gbit/s per busy core.
    pub gbps_per_busy_core: Option<f64>,
    /// Process CPU-seconds (both ends) per gigabyte received.
    pub cpu_seconds_per_gb: Option<f64>,
}

/// One stream thread's CPU over its side's span, in percent of one core (as
/// `CpuReport::host_total` is for the whole process).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadCpu {
    /// The thread's name (`stream-N`, `stream-mux`).
    pub name: String,
    pub total_percent: f64,
    pub user_percent: f64,
    pub sys_percent: f64,
}

impl ThreadCpu {
    /// Each thread of `report` that ran streams, in its order (a report from a peer that
    /// sent no names has its threads named by stream id).
    pub fn of(report: &CpuReport) -> Vec<ThreadCpu> {
        let pct = |us: u64| us as f64 / 1e6 / report.seconds * 100.0;
        report
            .streams
            .iter()
            .enumerate()
            .map(|(i, t)| ThreadCpu {
                name: match t.name.as_str() {
                    "" => format!("stream-{i}"),
                    name => name.to_string(),
                },
                total_percent: pct(t.total_us()),
                user_percent: pct(t.user_us),
                sys_percent: pct(t.sys_us),
            })
            .collect()
    }
}

impl Summary {
    /// Bytes the sender wrote over the whole run, `-O`'s seconds included.
    pub fn sent_whole_run(&self) -> u64 {
        self.sum_sent.bytes + self.omitted.sent_bytes
    }

    /// Bytes the receiver read over the whole run, `-O`'s seconds included.
    pub fn received_whole_run(&self) -> u64 {
        self.sum_received.bytes + self.omitted.received_bytes
    }

    /// Sender and receiver agree to the byte over the whole test (the whole run: a late
    /// peer splits at `-O` on its own clock, which differs by what was in flight).
    pub fn reconciled(&self) -> bool {
        self.sent_whole_run() == self.received_whole_run()
    }

    /// `-u`: the datagrams of the whole test, each stream's sent count from its sender
    /// and received from its receiver.
    pub fn udp(&self) -> Option<UdpFigures> {
        self.sum.udp
    }
}

/// A fixed report for formatter tests: three streams (one with no `TCP_INFO`, one
/// starved), an interval with per-core load, and a summary with both ends' CPU.
#[cfg(test)]
pub(crate) mod sample {
    use super::*;
    use crate::os::cpu::{CpuTime, ThreadTime};

    fn rtt(min_us: f64, avg_us: f64, max_us: f64, median_us: Option<f64>) -> RttSummary {
        RttSummary {
            min_us,
            avg_us,
            max_us,
            median_us,
            samples: 197,
        }
    }

    fn stream(stream: u16, start: f64, end: f64, bytes: u64, tcp: bool) -> StreamRow {
        StreamRow {
            stream,
            start,
            end,
            seconds: end - start,
            bytes,
            bits_per_second: bytes as f64 * 8.0 / (end - start),
            sent_bytes: bytes + u64::from(stream),
            retransmits: tcp.then_some(3),
            snd_cwnd: tcp.then_some(1_047_728 + u64::from(stream) * 1024),
            rtt: tcp.then_some(80.6),
            rttvar: tcp.then_some(20),
            min_rtt: tcp.then_some(30 + u32::from(stream)),
            delivery_rate: tcp.then_some(27_571_789_472),
            pacing_rate: tcp.then_some(55_000_000_000),
            notsent_bytes: tcp.then_some(2544),
            sndbuf: tcp.then_some(4_194_304),
            kernel_rtt: tcp.then(|| rtt(60.0, 80.6, 101.0, None)),
            block_rtt: (bytes > 0).then(|| rtt(41.0, 2173.04, 3958.0, Some(2449.05))),
            udp: None,
            sent: None,
        }
    }

    fn streams(start: f64, end: f64) -> Vec<StreamRow> {
        vec![
            stream(0, start, end, 3_458_727_936, true),
            stream(1, start, end, 3_714_842_624, true),
            stream(2, start, end, 0, false),
        ]
    }

    fn sum(start: f64, end: f64) -> SumRow {
        SumRow {
            sum: true,
            start,
            end,
            seconds: end - start,
            bytes: 7_173_570_560,
            bits_per_second: 57_279_790_158.4,
            sent_bytes: 7_173_570_563,
            retransmits: Some(6),
            snd_cwnd: Some(2_096_480),
            min_rtt: Some(30),
            block_rtt: Some(rtt(41.0, 1953.55, 3958.0, None)),
            kernel_rtt: Some(rtt(60.0, 80.6, 101.0, None)),
            fairness: Fairness {
                jain: Some(0.6654321987),
                min_share: Some(0.0),
                max_share: Some(0.517851234),
                starved: 1,
                streams: 3,
            },
            udp: None,
        }
    }

    fn cores() -> Vec<CoreLoad> {
        vec![
            CoreLoad {
                cpu: 0,
                busy_percent: 99.456,
                softirq_percent: 12.344,
                idle_percent: 0.544,
            },
            CoreLoad {
                cpu: 3,
                busy_percent: 5.0,
                softirq_percent: 0.0,
                idle_percent: 95.0,
            },
        ]
    }

    fn cpu_report(seconds: f64) -> CpuReport {
        CpuReport {
            seconds,
            process: CpuTime {
                user_us: 123_456,
                sys_us: 789_012,
            },
            host_total: 91.2468,
            host_user: 12.3456,
            host_system: 78.9012,
            streams: vec![
                ThreadTime {
                    name: "stream-0".into(),
                    user_us: 100_000,
                    sys_us: 650_000,
                },
                ThreadTime {
                    name: "stream-1".into(),
                    user_us: 3,
                    sys_us: 0,
                },
            ],
            cores: cores(),
            send_path: None,
        }
    }

    /// One stream over loopback, two seconds, no `-w`.
    pub(crate) fn header() -> Header {
        let mut test = crate::wire::params::TestParams::defaults();
        test.duration = std::time::Duration::from_secs(2);
        Header {
            software: "pinperf test".into(),
            local: "127.0.0.1:40000".into(),
            remote: "127.0.0.1:5201".into(),
            remote_software: "pinperf test".into(),
            congestion: "cubic".into(),
            same_host: true,
            same_process: true,
            ..Header::of_test(&test)
        }
    }

    pub(crate) fn interval() -> IntervalReport {
        IntervalReport {
            index: 4,
            omitted: false,
            uncounted: false,
            streams: streams(1.0018994, 1.2504),
            sum: sum(1.0018994, 1.2504),
            cores: Some(cores()),
            reverse: false,
        }
    }

    pub(crate) fn summary() -> Summary {
        let end = 1.0018994;
        let side = |bytes: u64, retransmits: Option<u64>| SideTotal {
            start: 0.0,
            end,
            seconds: end,
            bytes,
            bits_per_second: bytes as f64 * 8.0 / end,
            retransmits,
            unknown: false,
        };
        let sum = sum(0.0, end);
        Summary {
            streams: streams(0.0, end),
            sum_sent: side(sum.sent_bytes, sum.retransmits),
            sum_received: side(sum.bytes, None),
            fairness: TestFairness {
                totals: sum.fairness,
                starved_intervals: 4,
                stream_intervals: 12,
            },
            sum,
            diagnosis: vec!["one stream starved".into()],
            findings: None,
            cpu_utilization_percent: Some(CpuUtilization {
                host_total: 91.2468,
                host_user: 12.3456,
                host_system: 78.9012,
                remote_total: Some(40.0),
                remote_user: Some(10.0),
                remote_system: Some(30.0),
            }),
            cpu: Some(CpuSummary {
                local: cpu_report(1.0),
                remote: Some(cpu_report(0.9876)),
                same_host: false,
                same_process: false,
                busy_cores: 2.0891,
                gbps_per_busy_core: Some(27.41876543),
                cpu_seconds_per_gb: Some(0.12345678),
            }),
            kernel: None,
            omitted: Omitted::default(),
            cut_short: false,
            sender_silent: false,
            reverse: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sum_row;

    /// A side whose count never came is `null`, and reads back as unknown; a known one
    /// round-trips as it was.
    #[test]
    fn an_unknown_side_is_null_in_json_and_reads_back_unknown() {
        let mut s = sample::summary();
        s.sum_received = SideTotal::unknown();
        let v = serde_json::to_value(&s).unwrap();
        assert!(v["sum_received"].is_null(), "{v}");
        assert_eq!(v["sum_sent"]["bytes"], s.sum_sent.bytes);
        let back: Summary = serde_json::from_value(v).unwrap();
        assert!(back.sum_received.unknown && back.sum_received.bytes == 0);
        assert_eq!(back.sum_sent, s.sum_sent);
    }

    /// The sum row carries what text used to add up itself: the streams' congestion windows
    /// (streams without `TCP_INFO` add nothing) and the lowest min RTT, and JSON has them.
    #[test]
    fn sum_rows_add_cwnd_and_keep_the_lowest_min_rtt() {
        let rows = sample::interval().streams;
        assert_eq!(rows[2].snd_cwnd, None);
        let sum = sum_row(&rows, 1.0, 1.25);
        assert_eq!(sum.snd_cwnd, Some(1_047_728 + 1_048_752));
        assert_eq!(sum.min_rtt, Some(30));
        let json = serde_json::to_value(&sum).unwrap();
        assert_eq!(json["snd_cwnd"], 2_096_480);
        assert_eq!(json["min_rtt"], 30);

        let without_tcp_info = sum_row(&rows[2..], 1.0, 1.25);
        assert_eq!(without_tcp_info.snd_cwnd, None);
        assert_eq!(without_tcp_info.min_rtt, None);
        assert_eq!(sum_row(&[], 1.0, 1.25).snd_cwnd, None);
    }

    #[test]
    fn thread_cpu_is_percent_of_one_core_over_the_span() {
        let cpu = sample::summary().cpu.unwrap();
        let t = ThreadCpu::of(cpu.remote.as_ref().unwrap());
        assert_eq!(t.len(), 2);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(t[0].total_percent, 75.0 / 0.9876), "{t:?}");
        assert!(close(t[0].user_percent, 10.0 / 0.9876), "{t:?}");
        assert!(close(t[0].sys_percent, 65.0 / 0.9876), "{t:?}");
    }
}
