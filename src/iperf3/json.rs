//! `--format iperf3-json`: one document in the shape and JSON types of iperf3 3.x's `-J`
//! (`start`, `intervals`, `end`; facts about the shape read from esnet/iperf's
//! `iperf_api.c`, `iperf_client_api.c` and `iperf_tcp.c`), so a reader of iperf3's
//! documents (perfSONAR's pScheduler, dashboards) reads pinperf's unchanged. Everything
//! pinperf measured beyond it — block RTT, fairness, pin plans, CPU per thread and core,
//! the diagnosis — is in one more top-level member, `"pinperf"`: the `-J` document
//! itself, which `pinperf report` and `pinperf plot` read back.
//!
//! Runs on the client's `reporter` thread (or the main thread of `pinperf report`). It
//! collects like `-J` and prints once, at the end; it reshapes the model and computes
//! nothing (whole seconds and whole microseconds are iperf3's integer types).
//!
//! Integers where iperf3 writes integers (`socket`, `bytes`, `retransmits`, `snd_cwnd`,
//! `rtt`, `packets`, ...), floats where it writes floats (`start`, `end`, `seconds`,
//! `bits_per_second`, `jitter_ms`, `lost_percent`, `cpu_utilization_percent`'s members,
//! `test_start.interval`), booleans for `omitted` and `sender`, integers 0/1 for
//! `test_start.reverse` and `bidir`, as iperf3 does. The shape follows each stream's role
//! on this host, as iperf3's client does: a sending TCP stream's interval rows carry
//! `retransmits`, `snd_cwnd`, ...; a receiving one's do not; UDP rows carry `packets`
//! (sending) or the loss figures (receiving).
//!
//! Where the values come from, and the keys iperf3 always writes that pinperf has no
//! measurement for (written with iperf3's type and the value iperf3 itself writes when it
//! has none: 0, an empty string):
//! - `socket`: pinperf's stream number (with `--bidir` the server-to-client streams
//!   follow the client's: N to 2N-1), not a file descriptor.
//! - `start.connected[]`: the control connection's hosts; `local_port` and `remote_port`
//!   are 0 (the data connections' ports are not in pinperf's report).
//! - `start.cookie`: `""` (pinperf's test cookie is a secret; it is not printed).
//! - `start.system_info` and `start.timestamp`: this host and the test's start, read
//!   live; `""` and 0 when a saved test is converted (`pinperf report --format
//!   iperf3-json`), whose document does not hold them.
//! - `snd_wnd` and `end.streams[].sender.max_snd_wnd`: 0 (pinperf does not read the
//!   peer's receive window from `TCP_INFO`).
//! - `pmtu`: the path MTU read at the test's start, the same in every interval.
//! - `test_start.bytes`, `blocks`: 0 (pinperf runs by time only, so these are the test's
//!   real settings); `tos` is `-S`'s byte, 0 without it; `test_start.omit` and `duration` are whole
//!   seconds, rounded up (the exact ones are in `pinperf.start`).
//! - `rtt`, `rttvar`, `max_rtt`, `min_rtt`, `mean_rtt`: the kernel's smoothed RTT in whole
//!   microseconds (`rtt`: its mean over the interval; the `max`/`min`/`mean` over the
//!   test's samples); these, `retransmits`, `snd_cwnd` and `max_snd_cwnd` are 0 where the
//!   sender's `TCP_INFO` is not known (an iperf3 server's sender under `-R`).
//! - `cpu_utilization_percent`: 0 for a side not measured; in one process
//!   (`--loopback`) the process's CPU, both ends' work, is `host_*`, and `remote_*` is 0.
//! - `receiver_tcp_congestion` (or `sender_` under `-R`): the other end's congestion
//!   control is known only on one host (both ends use `-C`, else the host's default); on
//!   two hosts the key is left out, as iperf3 leaves it out when its peer did not say.
//!
//! The interval rows are iperf3's: a sending host's rows carry what its senders wrote in
//! the interval (and, UDP, those bytes as datagrams), a receiving host's what it read (and
//! its loss and jitter); the receiver's view of every interval is in `pinperf.intervals`.
//! The totals in `end` keep iperf3's sides (`sender` the bytes written, `receiver` the
//! bytes read). Times
//! are iperf3's: seconds since the test's start for `-O`'s omitted rows, since their end
//! for the rest and for `end` (iperf3 restarts its clock after them). Keys newer iperf3
//! versions added and pinperf has no measurement for are not written: `reorder`,
//! `test_start.gso`, `test_start.gro`.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::report::format::json::{Document, Printer, WholeDocument};
use crate::report::model::{Direction, Header, SideTotal, StreamRow, SumRow, Summary, UdpFigures};
use crate::wire::params::Budget;

/// When and on what the test ran, as iperf3's `start` says it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunFacts {
    /// Milliseconds since the Unix epoch at the test's start (None: not known).
    pub started_ms: Option<u64>,
    /// `uname`'s system, node, release, version and machine (iperf3's `system_info`).
    pub system_info: String,
}

impl RunFacts {
    /// This host, now.
    pub(super) fn here_now() -> RunFacts {
        let read = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let parts = [
            read("ostype"),
            read("hostname"),
            read("osrelease"),
            read("version"),
            std::env::consts::ARCH.to_string(),
        ];
        RunFacts {
            started_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.as_millis() as u64),
            system_info: parts
                .iter()
                .filter(|p| !p.is_empty())
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// `--format iperf3-json`: iperf3's shape of the collected test.
pub struct Iperf3Printer<W> {
    out: W,
    /// A live run: the host and the time are read when the test starts.
    live: bool,
    facts: RunFacts,
    /// `--extra-data`: written beside the document's title.
    extra_data: Option<String>,
}

impl<W> Iperf3Printer<W> {
    /// A printer for a test running now.
    pub(super) fn live(out: W, extra_data: Option<String>) -> Self {
        Iperf3Printer {
            out,
            live: true,
            facts: RunFacts::default(),
            extra_data,
        }
    }
}

impl<W: Write + Send> Printer for Iperf3Printer<W> {
    fn started(&mut self) {
        if self.live {
            self.facts = RunFacts::here_now();
        }
    }

    fn print(&mut self, doc: Option<Document>, title: Option<&str>, error: &str) -> io::Result<()> {
        let out = &mut self.out;
        match doc {
            Some(doc) => {
                let mut whole = document(&doc, &self.facts);
                whole.extra_data = self.extra_data.as_deref();
                serde_json::to_writer_pretty(&mut *out, &whole)?
            }
            None => {
                // Failed before the test started: this host is still known.
                if self.live {
                    self.facts = RunFacts::here_now();
                }
                let mut doc = failed_early(title, error, &self.facts);
                doc.extra_data = self.extra_data.as_deref();
                serde_json::to_writer_pretty(&mut *out, &doc)?
            }
        }
        writeln!(out)?;
        out.flush()
    }
}

/// `--format iperf3-json`: collects the test like `-J`, prints iperf3's shape once.
pub type Iperf3JsonFormatter<W> = WholeDocument<Iperf3Printer<W>>;

impl<W: Write> WholeDocument<Iperf3Printer<W>> {
    /// For a test running now; `extra_data` is `--extra-data`'s.
    pub fn new(out: W, extra_data: Option<String>) -> Self {
        WholeDocument::with_printer(Iperf3Printer::live(out, extra_data))
    }

    /// For a saved test: its time and host are not known.
    pub fn replayed(out: W) -> Self {
        WholeDocument::with_printer(Iperf3Printer {
            out,
            live: false,
            facts: RunFacts::default(),
            extra_data: None,
        })
    }
}

/// The whole document.
#[derive(Serialize)]
struct Iperf3Doc<'a> {
    start: Start,
    intervals: Vec<Interval>,
    end: End,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_output_text: Option<&'a str>,
    /// pinperf's own `-J` document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pinperf: Option<&'a Document>,
}

#[derive(Serialize)]
pub(super) struct Start {
    connected: Vec<Connected>,
    version: String,
    system_info: String,
    #[serde(flatten)]
    test: Option<StartTest>,
}

#[derive(Serialize)]
pub(super) struct Connected {
    pub(super) socket: u64,
    pub(super) local_host: String,
    pub(super) local_port: u64,
    pub(super) remote_host: String,
    pub(super) remote_port: u64,
}

#[derive(Serialize)]
struct StartTest {
    timestamp: Timestamp,
    connecting_to: HostPort,
    cookie: String,
    /// TCP only: the MSS in use, under iperf3's key for it: `tcp_mss` when `-M` set it
    /// (the value asked, as iperf3 writes it), `tcp_mss_default` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss_default: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss: Option<u64>,
    target_bitrate: u64,
    fq_rate: u64,
    sock_bufsize: u64,
    sndbuf_actual: u64,
    rcvbuf_actual: u64,
    test_start: TestStart,
}

#[derive(Serialize)]
pub(super) struct Timestamp {
    pub(super) time: String,
    pub(super) timesecs: u64,
    pub(super) timemillisecs: u64,
}

#[derive(Serialize)]
pub(super) struct HostPort {
    pub(super) host: String,
    pub(super) port: u64,
}

#[derive(Serialize)]
pub(super) struct TestStart {
    pub(super) protocol: &'static str,
    pub(super) num_streams: u64,
    pub(super) blksize: u64,
    pub(super) omit: u64,
    pub(super) duration: u64,
    pub(super) bytes: u64,
    pub(super) blocks: u64,
    pub(super) reverse: u64,
    pub(super) tos: u64,
    pub(super) target_bitrate: u64,
    pub(super) bidir: u64,
    pub(super) fqrate: u64,
    pub(super) interval: f64,
}

#[derive(Serialize, Default)]
pub(super) struct Interval {
    pub(super) streams: Vec<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_bidir_reverse: Option<Entry>,
}

/// One of iperf3's span objects: an interval's stream or sum, a stream's total on one
/// side, a test's sum. The members a role lacks are left out, in iperf3's order.
#[derive(Serialize, Default)]
pub(super) struct Entry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) socket: Option<u64>,
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) seconds: f64,
    pub(super) bytes: u64,
    pub(super) bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retransmits: Option<u64>,
    #[serde(flatten)]
    pub(super) tcp_now: Option<TcpNow>,
    #[serde(flatten)]
    pub(super) tcp_peaks: Option<TcpPeaks>,
    /// A UDP sender's interval: datagrams sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) packets: Option<u64>,
    #[serde(flatten)]
    pub(super) udp: Option<UdpLoss>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) out_of_order: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) omitted: Option<bool>,
    pub(super) sender: bool,
}

/// A sending TCP stream's `TCP_INFO` at an interval's end.
#[derive(Serialize)]
pub(super) struct TcpNow {
    pub(super) snd_cwnd: u64,
    pub(super) snd_wnd: u64,
    pub(super) rtt: u64,
    pub(super) rttvar: u64,
    pub(super) pmtu: u64,
}

/// A sending TCP stream's `TCP_INFO` over the test.
#[derive(Serialize, Default)]
pub(super) struct TcpPeaks {
    pub(super) max_snd_cwnd: u64,
    pub(super) max_snd_wnd: u64,
    pub(super) max_rtt: u64,
    pub(super) min_rtt: u64,
    pub(super) mean_rtt: u64,
}

/// A UDP receiver's view.
#[derive(Serialize)]
pub(super) struct UdpLoss {
    pub(super) jitter_ms: f64,
    pub(super) lost_packets: u64,
    pub(super) packets: u64,
    pub(super) lost_percent: f64,
}

#[derive(Serialize, Default)]
pub(super) struct End {
    #[serde(flatten)]
    pub(super) whole: Option<EndWhole>,
}

#[derive(Serialize, Default)]
pub(super) struct EndWhole {
    pub(super) streams: Vec<EndStream>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_sent: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_received: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_bidir_reverse: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_sent_bidir_reverse: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sum_received_bidir_reverse: Option<Entry>,
    pub(super) cpu_utilization_percent: Cpu,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sender_tcp_congestion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) receiver_tcp_congestion: Option<String>,
}

#[derive(Serialize, Default)]
pub(super) struct EndStream {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sender: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) receiver: Option<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) udp: Option<Entry>,
}

#[derive(Serialize, Default)]
pub(super) struct Cpu {
    pub(super) host_total: f64,
    pub(super) host_user: f64,
    pub(super) host_system: f64,
    pub(super) remote_total: f64,
    pub(super) remote_user: f64,
    pub(super) remote_system: f64,
}

/// A float as JSON can carry it (serde writes NaN and infinities as `null`, which no
/// reader of iperf3's floats expects).
pub(super) fn float(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Microseconds as iperf3's whole microseconds.
fn micros(us: f64) -> u64 {
    float(us).max(0.0).round() as u64
}

/// Seconds as iperf3's whole seconds (`-t`, `-O`), rounded up.
fn whole_seconds(s: f64) -> u64 {
    float(s).max(0.0).ceil() as u64
}

/// What a direction's streams are on this host, as iperf3's client reports them (here and
/// in `--format iperf3-text`).
#[derive(Clone, Copy)]
pub(super) struct Role {
    /// This host sends them (not `-R`'s direction).
    pub(super) sender: bool,
    pub(super) udp: bool,
    /// The test runs both ways (`--bidir`).
    pub(super) bidir: bool,
    /// Its streams' `socket` numbers (the text's `[ ID]`) start here.
    pub(super) first_socket: u64,
    /// Where iperf3's clock starts, seconds on pinperf's: `-O`'s end (iperf3 restarts its
    /// clock after the omitted seconds), 0 for the omitted rows themselves.
    pub(super) clock_from: f64,
    /// UDP's datagram: a sender's bytes over it are its datagrams.
    pub(super) datagram: u64,
}

impl Role {
    pub(super) fn of(header: &Header, reverse: bool) -> Role {
        let k = header
            .direction
            .reversed()
            .iter()
            .position(|&r| r == reverse)
            .unwrap_or(0);
        Role {
            sender: !reverse,
            udp: header.udp,
            bidir: header.direction == Direction::Bidir,
            first_socket: k as u64 * u64::from(header.streams),
            clock_from: header.omit_s,
            datagram: header.block_bytes.max(1),
        }
    }

    /// `--bidir`'s server-to-client direction: its sums are iperf3's `*_bidir_reverse`.
    fn bidir_reverse(&self) -> bool {
        self.bidir && !self.sender
    }

    /// The role of `-O`'s omitted rows: on the test's own clock.
    pub(super) fn omitted(self) -> Role {
        Role {
            clock_from: 0.0,
            ..self
        }
    }

    fn socket(&self, stream: u16) -> u64 {
        self.first_socket + u64::from(stream)
    }
}

/// An address's host and port (`"?"` and 0 when it is not one).
fn host_port(addr: &str) -> HostPort {
    match addr.parse::<SocketAddr>() {
        Ok(a) => HostPort {
            host: a.ip().to_string(),
            port: u64::from(a.port()),
        },
        Err(_) => HostPort {
            host: addr.to_string(),
            port: 0,
        },
    }
}

fn loss(u: &UdpFigures) -> UdpLoss {
    UdpLoss {
        jitter_ms: float(u.jitter_ms),
        lost_packets: u.lost_packets,
        packets: u.packets,
        lost_percent: float(u.lost_percent),
    }
}

/// The span (on iperf3's clock) and bytes every entry has.
fn span(start: f64, end: f64, seconds: f64, bytes: u64, bits_per_second: f64, role: Role) -> Entry {
    let clock = |t: f64| float((t - role.clock_from).max(0.0));
    Entry {
        start: clock(start),
        end: clock(end),
        seconds: float(seconds),
        bytes,
        bits_per_second: float(bits_per_second),
        sender: role.sender,
        ..Entry::default()
    }
}

/// The bytes of an interval row as iperf3 writes them: a sending host's are what its
/// senders wrote in the span, a receiving host's what it read.
fn row_bytes(role: Role, seconds: f64, (sent, read, read_bps): (u64, u64, f64)) -> (u64, f64) {
    match role.sender {
        true => (sent, sent as f64 * 8.0 / seconds.max(1e-9)),
        false => (read, read_bps),
    }
}

/// A stream's interval row.
fn interval_stream(r: &StreamRow, omitted: bool, role: Role, header: &Header) -> Entry {
    let (bytes, bps) = row_bytes(role, r.seconds, (r.sent_bytes, r.bytes, r.bits_per_second));
    let mut e = span(r.start, r.end, r.seconds, bytes, bps, role);
    e.socket = Some(role.socket(r.stream));
    e.omitted = Some(omitted);
    let udp = r.udp.unwrap_or_default();
    match (role.udp, role.sender) {
        (false, true) => {
            e.retransmits = Some(r.retransmits.unwrap_or(0));
            e.tcp_now = Some(TcpNow {
                snd_cwnd: r.snd_cwnd.unwrap_or(0),
                snd_wnd: 0,
                rtt: r.rtt.map_or(0, micros),
                rttvar: r.rttvar.map_or(0, u64::from),
                pmtu: header.path.mtu.map_or(0, u64::from),
            });
        }
        (false, false) => {}
        (true, true) => e.packets = Some(bytes / role.datagram),
        (true, false) => e.udp = Some(loss(&udp)),
    }
    e
}

/// An interval's sum row.
fn interval_sum(s: &SumRow, omitted: bool, role: Role) -> Entry {
    let (bytes, bps) = row_bytes(role, s.seconds, (s.sent_bytes, s.bytes, s.bits_per_second));
    let mut e = span(s.start, s.end, s.seconds, bytes, bps, role);
    e.omitted = Some(omitted);
    let udp = s.udp.unwrap_or_default();
    match (role.udp, role.sender) {
        (false, true) => e.retransmits = Some(s.retransmits.unwrap_or(0)),
        (false, false) => {}
        (true, true) => e.packets = Some(bytes / role.datagram),
        (true, false) => e.udp = Some(loss(&udp)),
    }
    e
}

/// The intervals, both directions of `--bidir` in one entry per interval as iperf3 has
/// them (the client's streams first). A cut-short test's rows past the sender's last
/// report are left out: iperf3's document has no mark for them, and `end` leaves them out.
pub(super) fn intervals(doc: &Document) -> Vec<Interval> {
    let header = &doc.start;
    let mut out: Vec<(u32, Interval)> = Vec::new();
    for iv in doc.intervals.iter().filter(|iv| !iv.uncounted) {
        let role = Role::of(header, iv.reverse);
        let role = if iv.omitted { role.omitted() } else { role };
        if out.last().is_none_or(|(index, _)| *index != iv.index) {
            out.push((iv.index, Interval::default()));
        }
        let entry = &mut out.last_mut().expect("pushed above").1;
        entry.streams.extend(
            iv.streams
                .iter()
                .map(|r| interval_stream(r, iv.omitted, role, header)),
        );
        let sum = Some(interval_sum(&iv.sum, iv.omitted, role));
        match role.bidir_reverse() {
            true => entry.sum_bidir_reverse = sum,
            false => entry.sum = sum,
        }
    }
    out.into_iter().map(|(_, iv)| iv).collect()
}

/// A stream's totals: TCP's sender and receiver sides, or UDP's one entry; `s`'s unknown
/// sides ([`SideTotal::unknown`]) are left out of it too.
fn end_stream(r: &StreamRow, role: Role, s: &Summary) -> EndStream {
    let sent_bps = r.sent.map_or(0.0, |s| s.bits_per_second);
    let mut sender = span(r.start, r.end, r.seconds, r.sent_bytes, sent_bps, role);
    sender.socket = Some(role.socket(r.stream));
    if role.udp {
        // No receiver's figures (an iperf3 server's, cut short before its results): none
        // are made up.
        sender.udp = r.udp.as_ref().map(loss);
        sender.out_of_order = r.udp.map(|u| u.out_of_order);
        return EndStream {
            udp: Some(sender),
            ..EndStream::default()
        };
    }
    let rtt = |pick: fn(&crate::report::model::RttSummary) -> f64| {
        r.kernel_rtt.as_ref().map_or(0, |k| micros(pick(k)))
    };
    sender.retransmits = Some(r.retransmits.unwrap_or(0));
    sender.tcp_peaks = Some(TcpPeaks {
        max_snd_cwnd: r.sent.and_then(|s| s.max_snd_cwnd).unwrap_or(0),
        max_snd_wnd: 0,
        max_rtt: rtt(|k| k.max_us),
        min_rtt: rtt(|k| k.min_us),
        mean_rtt: rtt(|k| k.avg_us),
    });
    let mut receiver = span(r.start, r.end, r.seconds, r.bytes, r.bits_per_second, role);
    receiver.socket = Some(role.socket(r.stream));
    EndStream {
        sender: Some(sender).filter(|_| !s.sum_sent.unknown),
        receiver: Some(receiver).filter(|_| !s.sum_received.unknown),
        udp: None,
    }
}

fn side(t: &SideTotal, role: Role) -> Entry {
    span(t.start, t.end, t.seconds, t.bytes, t.bits_per_second, role)
}

/// A direction's sums: TCP's `sum_sent` and `sum_received`; UDP's `sum` (the sender's
/// bytes with the receiver's loss), `sum_sent` (the sender's view: no loss seen) and
/// `sum_received`, whose `sender` iperf3 fixes at true and false.
fn end_sums(s: &Summary, role: Role) -> [Option<Entry>; 3] {
    let mut sent = side(&s.sum_sent, role);
    let mut received = side(&s.sum_received, role);
    // A side whose count never came is left out (as iperf3 leaves what it lacks).
    let known = |side: &SideTotal| !side.unknown;
    if !role.udp {
        sent.retransmits = Some(s.sum_sent.retransmits.unwrap_or(0));
        return [
            None,
            Some(sent).filter(|_| known(&s.sum_sent)),
            Some(received).filter(|_| known(&s.sum_received)),
        ];
    }
    // The sender's bytes, or (unknown: a silent sender) the receiver's.
    let mut sum = match s.sum_sent.unknown {
        false => side(&s.sum_sent, role),
        true => side(&s.sum_received, role),
    };
    // Without the receiver's figures (see `end_stream`) the datagram counts stay out.
    if let Some(udp) = s.sum.udp {
        sum.udp = Some(loss(&udp));
        sent.udp = Some(UdpLoss {
            jitter_ms: 0.0,
            lost_packets: 0,
            packets: udp.packets,
            lost_percent: 0.0,
        });
        received.udp = Some(loss(&udp));
    }
    sent.sender = true;
    received.sender = false;
    [
        Some(sum),
        Some(sent).filter(|_| known(&s.sum_sent)),
        Some(received).filter(|_| known(&s.sum_received)),
    ]
}

/// The congestion control on the data connections: `(sender, receiver)`.
fn congestion(header: &Header) -> (Option<String>, Option<String>) {
    if header.udp {
        return (None, None);
    }
    let local = Some(header.congestion.clone()).filter(|c| !c.is_empty() && c != "?");
    // On one host both ends use -C's algorithm, or the host's default.
    let remote = local.clone().filter(|_| header.same_host);
    match header.direction {
        Direction::Reverse => (remote, local),
        Direction::Forward | Direction::Bidir => (local, remote),
    }
}

pub(super) fn end(doc: &Document) -> End {
    let header = &doc.start;
    let summaries: Vec<&Summary> = doc.end.iter().chain(doc.end_reverse.iter()).collect();
    if summaries.is_empty() {
        return End::default();
    }
    let mut whole = EndWhole {
        cpu_utilization_percent: cpu(doc.end.as_ref()),
        ..EndWhole::default()
    };
    for s in summaries {
        let role = Role::of(header, s.reverse);
        whole
            .streams
            .extend(s.streams.iter().map(|r| end_stream(r, role, s)));
        let [sum, sent, received] = end_sums(s, role);
        match role.bidir_reverse() {
            false => (whole.sum, whole.sum_sent, whole.sum_received) = (sum, sent, received),
            true => {
                (
                    whole.sum_bidir_reverse,
                    whole.sum_sent_bidir_reverse,
                    whole.sum_received_bidir_reverse,
                ) = (sum, sent, received)
            }
        }
    }
    (whole.sender_tcp_congestion, whole.receiver_tcp_congestion) = congestion(header);
    End { whole: Some(whole) }
}

/// Both ends' CPU from the totals that carry it (0 for what was not measured).
fn cpu(s: Option<&Summary>) -> Cpu {
    let c = s.and_then(|s| s.cpu_utilization_percent);
    let get = |v: Option<f64>| float(v.unwrap_or(0.0));
    Cpu {
        host_total: get(c.map(|c| c.host_total)),
        host_user: get(c.map(|c| c.host_user)),
        host_system: get(c.map(|c| c.host_system)),
        remote_total: get(c.and_then(|c| c.remote_total)),
        remote_user: get(c.and_then(|c| c.remote_user)),
        remote_system: get(c.and_then(|c| c.remote_system)),
    }
}

pub(super) fn start(header: &Header, facts: &RunFacts) -> Start {
    let local = host_port(&header.local);
    let remote = host_port(&header.remote);
    let connected = header
        .direction
        .reversed()
        .iter()
        .flat_map(|&reverse| {
            let role = Role::of(header, reverse);
            (0..header.streams).map(move |i| role.socket(i))
        })
        .map(|socket| Connected {
            socket,
            local_host: local.host.clone(),
            local_port: 0,
            remote_host: remote.host.clone(),
            remote_port: 0,
        })
        .collect();
    let started_ms = facts.started_ms.unwrap_or(0);
    let rate = header.rate_bps.unwrap_or(0);
    let fq_rate = header.fq_rate_bps.unwrap_or(0);
    Start {
        connected,
        version: header.software.clone(),
        system_info: facts.system_info.clone(),
        test: Some(StartTest {
            timestamp: Timestamp {
                time: facts
                    .started_ms
                    .map_or(String::new(), |ms| http_date(ms / 1000)),
                timesecs: started_ms / 1000,
                timemillisecs: started_ms,
            },
            connecting_to: remote,
            cookie: String::new(),
            tcp_mss_default: (!header.udp && header.mss_asked.is_none())
                .then(|| header.path.mss.map_or(0, u64::from)),
            tcp_mss: header.mss_asked.map(u64::from),
            target_bitrate: rate,
            fq_rate,
            sock_bufsize: header.local_window.requested.unwrap_or(0),
            sndbuf_actual: header.local_window.sndbuf,
            rcvbuf_actual: header.local_window.rcvbuf,
            test_start: test_start(header),
        }),
    }
}

/// `start.test_start`: the test's parameters as iperf3 lists them (both ends' documents).
pub(super) fn test_start(header: &Header) -> TestStart {
    let rate = header.rate_bps.unwrap_or(0);
    let fq_rate = header.fq_rate_bps.unwrap_or(0);
    TestStart {
        protocol: if header.udp { "UDP" } else { "TCP" },
        num_streams: u64::from(header.streams),
        blksize: header.block_bytes,
        omit: whole_seconds(header.omit_s),
        // iperf3 writes a count test's count and no duration (0).
        duration: match header.budget {
            Some(_) => 0,
            None => whole_seconds(header.duration_s),
        },
        bytes: match header.budget {
            Some(Budget::Bytes(n)) => n,
            _ => 0,
        },
        blocks: match header.budget {
            Some(Budget::Blocks(n)) => n,
            _ => 0,
        },
        reverse: u64::from(header.direction == Direction::Reverse),
        tos: header.tos.map_or(0, u64::from),
        target_bitrate: rate,
        bidir: u64::from(header.direction == Direction::Bidir),
        fqrate: fq_rate,
        interval: float(header.interval_s),
    }
}

/// The iperf3-shaped document of a collected test.
fn document<'a>(doc: &'a Document, facts: &RunFacts) -> Iperf3Doc<'a> {
    Iperf3Doc {
        start: start(&doc.start, facts),
        intervals: intervals(doc),
        end: end(doc),
        error: doc.error.as_deref(),
        title: doc.title.as_deref(),
        extra_data: None,
        server_output_text: doc.server_output_text.as_deref(),
        pinperf: Some(doc),
    }
}

/// A test that failed before its header: what iperf3 -J writes then.
fn failed_early<'a>(title: Option<&'a str>, error: &'a str, facts: &RunFacts) -> Iperf3Doc<'a> {
    Iperf3Doc {
        start: Start {
            connected: Vec::new(),
            version: crate::wire::SOFTWARE.to_string(),
            system_info: facts.system_info.clone(),
            test: None,
        },
        intervals: Vec::new(),
        end: End::default(),
        error: Some(error),
        title,
        extra_data: None,
        server_output_text: None,
        pinperf: None,
    }
}

/// `secs` since the Unix epoch as RFC 7231's date, in GMT (iperf3's `timestamp.time`):
/// `Mon, 30 Nov 2026 18:56:56 GMT`.
pub(super) fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // The civil date of a day count (proleptic Gregorian, eras of 400 years from
    // 0000-03-01, so leap days end a year).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Formatter;
    use crate::report::model::{SentTotal, sample};
    use serde_json::Value;

    fn facts() -> RunFacts {
        RunFacts {
            started_ms: Some(1_796_065_016_250),
            system_info: "Linux vm 6.18 #1 SMP x86_64".into(),
        }
    }

    /// The sample test (one interval, three streams: one without `TCP_INFO`) as the
    /// iperf3-shaped JSON value, with `edit` applied to the collected document first.
    fn rendered(edit: impl FnOnce(&mut Document)) -> Value {
        let mut summary = sample::summary();
        for r in &mut summary.streams {
            r.sent = Some(SentTotal {
                bits_per_second: 8e9,
                max_snd_cwnd: r.snd_cwnd.map(|c| c + 1),
            });
        }
        let mut doc = Document::new(Some("t".into()), sample::header());
        doc.intervals.push(sample::interval());
        doc.end = Some(summary);
        edit(&mut doc);
        serde_json::to_value(document(&doc, &facts())).unwrap()
    }

    fn integer(v: &Value) -> bool {
        v.is_u64()
    }

    /// A float as JSON writes it: with a decimal point or an exponent, even when whole.
    fn float(v: &Value) -> bool {
        v.is_f64()
    }

    /// A side whose count never came (an iperf3 peer's, cut short; a silent sender) is
    /// left out of the sums and of each stream's entry, not filled with this end's count
    /// or zeros; UDP's `sum` then carries the receiver's bytes.
    #[test]
    fn unknown_sides_are_left_out_not_made_up() {
        let tcp = rendered(|d| {
            let end = d.end.as_mut().unwrap();
            end.cut_short = true;
            end.sum_received = SideTotal::unknown();
        });
        let end = &tcp["end"];
        assert!(end.get("sum_received").is_none(), "{end}");
        assert!(end["sum_sent"]["bytes"].as_u64().unwrap_or(0) > 0, "{end}");
        assert!(end["streams"][0].get("receiver").is_none(), "{end}");
        assert!(end["streams"][0]["sender"]["bytes"].is_u64(), "{end}");

        let udp = rendered(|d| {
            d.start.udp = true;
            let end = d.end.as_mut().unwrap();
            end.sender_silent = true;
            end.sum_sent = SideTotal::unknown();
        });
        let end = &udp["end"];
        assert!(end.get("sum_sent").is_none(), "{end}");
        assert_eq!(end["sum"]["bytes"], end["sum_received"]["bytes"], "{end}");
        assert!(end["sum"]["bytes"].as_u64().unwrap_or(0) > 0, "{end}");
    }

    /// iperf3's types, member by member: integers for counts, sizes and microseconds,
    /// floats for times, rates and percentages (even when whole), booleans for
    /// `omitted`/`sender`, 0/1 integers for `reverse` and `bidir`.
    #[test]
    fn members_have_iperf3_s_json_types() {
        let doc = rendered(|_| {});
        type Is = fn(&Value) -> bool;
        let cases: [(&str, Is); 32] = [
            ("/start/connected/0/socket", integer),
            ("/start/connected/0/local_port", integer),
            ("/start/connecting_to/port", integer),
            ("/start/timestamp/timesecs", integer),
            ("/start/timestamp/time", Value::is_string),
            ("/start/cookie", Value::is_string),
            ("/start/tcp_mss_default", integer),
            ("/start/sndbuf_actual", integer),
            ("/start/test_start/duration", integer),
            ("/start/test_start/reverse", integer),
            ("/start/test_start/bidir", integer),
            ("/start/test_start/interval", float),
            ("/intervals/0/streams/0/socket", integer),
            ("/intervals/0/streams/0/start", float),
            ("/intervals/0/streams/0/bytes", integer),
            ("/intervals/0/streams/0/bits_per_second", float),
            ("/intervals/0/streams/0/retransmits", integer),
            ("/intervals/0/streams/0/snd_cwnd", integer),
            ("/intervals/0/streams/0/rtt", integer),
            ("/intervals/0/streams/0/rttvar", integer),
            ("/intervals/0/streams/0/pmtu", integer),
            ("/intervals/0/streams/0/omitted", Value::is_boolean),
            ("/intervals/0/streams/0/sender", Value::is_boolean),
            ("/intervals/0/sum/retransmits", integer),
            ("/end/streams/0/sender/max_snd_cwnd", integer),
            ("/end/streams/0/sender/mean_rtt", integer),
            ("/end/streams/0/receiver/seconds", float),
            ("/end/sum_sent/retransmits", integer),
            ("/end/sum_received/start", float),
            ("/end/cpu_utilization_percent/host_total", float),
            ("/end/cpu_utilization_percent/remote_total", float),
            ("/end/sender_tcp_congestion", Value::is_string),
        ];
        for (path, is) in cases {
            let v = doc
                .pointer(path)
                .unwrap_or_else(|| panic!("no {path} in {doc:#}"));
            assert!(is(v), "{path} = {v}");
        }
        // Whole floats stay floats: the sample's summary starts at 0.
        assert_eq!(doc["end"]["sum_sent"]["start"].to_string(), "0.0");
        // The values are the model's: the receiver's bytes in rows, both sides in `end`.
        let s = sample::summary();
        assert_eq!(doc["end"]["sum_sent"]["bytes"], s.sum_sent.bytes);
        assert_eq!(doc["end"]["sum_received"]["bytes"], s.sum_received.bytes);
        assert_eq!(
            doc["end"]["streams"][0]["sender"]["bytes"],
            s.streams[0].sent_bytes
        );
        assert_eq!(
            doc["end"]["streams"][0]["sender"]["max_snd_cwnd"],
            1_047_729
        );
        assert_eq!(doc["end"]["streams"][0]["sender"]["mean_rtt"], 81);
        assert_eq!(doc["intervals"][0]["streams"][0]["rtt"], 81);
        // A stream without TCP_INFO: iperf3's zeros, never null.
        assert_eq!(doc["intervals"][0]["streams"][2]["snd_cwnd"], 0);
        assert_eq!(doc["end"]["streams"][2]["sender"]["max_rtt"], 0);
        assert_eq!(
            doc["start"]["timestamp"]["time"],
            "Mon, 30 Nov 2026 18:56:56 GMT"
        );
        assert_eq!(doc["title"], "t");
        assert_eq!(doc["pinperf"]["end"]["fairness"]["starved"], 1);
    }

    /// serde writes a non-finite float as `null`; iperf3's readers expect a number.
    #[test]
    fn a_float_that_is_not_finite_is_written_as_zero() {
        let doc = rendered(|d| {
            let end = d.end.as_mut().unwrap();
            end.sum_sent.bits_per_second = f64::NAN;
            end.cpu_utilization_percent.as_mut().unwrap().host_total = f64::INFINITY;
        });
        assert_eq!(
            doc["end"]["sum_sent"]["bits_per_second"].as_f64(),
            Some(0.0)
        );
        let cpu = &doc["end"]["cpu_utilization_percent"];
        assert_eq!(cpu["host_total"].as_f64(), Some(0.0));
    }

    /// `-R`: this host receives, so rows have no `TCP_INFO` members and `sender` is false;
    /// UDP rows carry iperf3's receiver figures.
    /// A sending host's rows are what its senders wrote (UDP: as datagrams), whatever
    /// the receiver read of it; a receiving host's are what it read.
    #[test]
    fn interval_rows_carry_the_bytes_of_this_host_s_role() {
        let lossy = |reverse: bool| {
            rendered(|d| {
                d.start.udp = true;
                d.start.block_bytes = 1000;
                d.start.direction = [Direction::Forward, Direction::Reverse][usize::from(reverse)];
                let iv = &mut d.intervals[0];
                iv.reverse = reverse;
                let row = &mut iv.streams[0];
                (row.bytes, row.sent_bytes) = (600_000, 1_000_000);
                row.udp = Some(UdpFigures {
                    packets: 600,
                    lost_packets: 400,
                    ..UdpFigures::default()
                });
            })
        };
        let sent = lossy(false);
        let row = &sent["intervals"][0]["streams"][0];
        assert_eq!(
            (row["bytes"].as_u64(), row["packets"].as_u64()),
            (Some(1_000_000), Some(1000))
        );
        let seconds = row["seconds"].as_f64().unwrap();
        assert_eq!(
            row["bits_per_second"].as_f64(),
            Some(8e6 / seconds),
            "{row}"
        );
        let read = lossy(true);
        let row = &read["intervals"][0]["streams"][0];
        assert_eq!(row["bytes"].as_u64(), Some(600_000), "{row}");
        assert_eq!(row["lost_packets"].as_u64(), Some(400), "{row}");
    }

    #[test]
    fn a_receiving_host_writes_iperf3_s_receiver_shape() {
        let doc = rendered(|d| {
            d.start.direction = Direction::Reverse;
            d.intervals[0].reverse = true;
            d.end.as_mut().unwrap().reverse = true;
        });
        let row = &doc["intervals"][0]["streams"][0];
        assert_eq!(row["sender"], false);
        assert!(
            row.get("retransmits").is_none() && row.get("snd_cwnd").is_none(),
            "{row}"
        );
        assert_eq!(doc["start"]["test_start"]["reverse"], 1);
        assert_eq!(doc["end"]["sum_sent"]["sender"], false);

        let udp = rendered(|d| {
            d.start.udp = true;
            d.start.direction = Direction::Reverse;
            d.intervals[0].reverse = true;
            let figures = Some(UdpFigures {
                packets: 10,
                lost_packets: 1,
                lost_percent: 10.0,
                ..UdpFigures::default()
            });
            d.intervals[0].streams[0].udp = figures;
            let end = d.end.as_mut().unwrap();
            end.streams[0].udp = figures;
            end.sum.udp = figures;
        });
        let row = &udp["intervals"][0]["streams"][0];
        assert_eq!(
            (row["packets"].as_u64(), row["lost_packets"].as_u64()),
            (Some(10), Some(1))
        );
        assert!(row["lost_percent"].is_f64(), "{row}");
        assert!(udp["start"].get("tcp_mss_default").is_none());
        let capped = rendered(|d| d.start.mss_asked = Some(1000));
        assert_eq!(capped["start"]["tcp_mss"], 1000);
        assert!(capped["start"].get("tcp_mss_default").is_none());
        assert!(udp["end"]["streams"][0]["udp"]["out_of_order"].is_u64());
        assert_eq!(udp["end"]["sum_sent"]["lost_packets"], 0);
        assert_eq!(udp["end"]["sum_received"]["lost_packets"], 1);
        assert_eq!(udp["end"]["sum_received"]["sender"], false);
        assert!(udp["end"].get("sender_tcp_congestion").is_none());
    }

    /// `--bidir`: one iperf3 interval holds both directions' streams (the server's
    /// numbered after the client's) and their sums under `sum` and `sum_bidir_reverse`.
    #[test]
    fn bidir_directions_share_each_interval_and_end() {
        let doc = rendered(|d| {
            d.start.direction = Direction::Bidir;
            d.start.streams = 3;
            let mut back = d.intervals[0].clone();
            back.reverse = true;
            d.intervals.push(back);
            let mut end = d.end.clone().unwrap();
            end.reverse = true;
            d.end_reverse = Some(end);
        });
        assert_eq!(doc["intervals"].as_array().map(Vec::len), Some(1));
        let sockets: Vec<_> = doc["intervals"][0]["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["socket"].as_u64().unwrap(),
                    s["sender"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            sockets,
            [
                (0, true),
                (1, true),
                (2, true),
                (3, false),
                (4, false),
                (5, false)
            ]
        );
        assert_eq!(doc["intervals"][0]["sum_bidir_reverse"]["sender"], false);
        assert_eq!(doc["end"]["sum_sent_bidir_reverse"]["sender"], false);
        assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(6));
        assert_eq!(doc["start"]["connected"].as_array().map(Vec::len), Some(6));
        assert_eq!(doc["start"]["test_start"]["bidir"], 1);
    }

    /// A cut-short test's rows past the sender's last report are left out of iperf3's
    /// intervals, as they are of `end` (review: they looked like any other interval).
    #[test]
    fn uncounted_rows_are_not_iperf3_intervals() {
        let doc = rendered(|d| {
            let mut late = d.intervals[0].clone();
            late.index = 1;
            late.uncounted = true;
            d.intervals.push(late);
        });
        assert_eq!(doc["intervals"].as_array().map(Vec::len), Some(1));
    }

    /// `-O`: iperf3 restarts its clock after the omitted seconds, so the counted rows and
    /// `end` start at 0; the omitted rows keep the test's clock (they started
    /// at 1.0 under `-O 1`, where iperf3 -J has 0).
    #[test]
    fn the_clock_restarts_after_the_omitted_seconds() {
        let doc = rendered(|d| {
            d.start.omit_s = 1.0;
            let counted = &mut d.intervals[0];
            (counted.sum.start, counted.sum.end) = (1.0, 2.0);
            let mut omitted = counted.clone();
            omitted.index -= 1;
            omitted.omitted = true;
            (omitted.sum.start, omitted.sum.end) = (0.0, 1.0);
            d.intervals.insert(0, omitted);
            let end = d.end.as_mut().unwrap();
            (end.sum_sent.start, end.sum_sent.end) = (1.0, 2.0);
        });
        let span = |p: &str| {
            let at = |k: &str| doc.pointer(&format!("{p}/{k}")).and_then(Value::as_f64);
            (at("start"), at("end"))
        };
        assert_eq!(span("/intervals/0/sum"), (Some(0.0), Some(1.0)));
        assert_eq!(span("/intervals/1/sum"), (Some(0.0), Some(1.0)));
        assert_eq!(span("/end/sum_sent"), (Some(0.0), Some(1.0)));
    }

    /// A failure: what was measured, `end` empty and `error`, as iperf3 -J; before the
    /// header, iperf3's bare `start`.
    #[test]
    fn failures_keep_iperf3_s_shape() {
        let mut out = Vec::new();
        let mut f = Iperf3JsonFormatter::replayed(&mut out);
        f.header(&sample::header()).unwrap();
        f.interval(&sample::interval()).unwrap();
        f.failed("stream-0: reset").unwrap();
        drop(f);
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["end"], serde_json::json!({}));
        assert_eq!(doc["error"], "stream-0: reset");
        assert_eq!(doc["intervals"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            doc["start"]["timestamp"]["timesecs"], 0,
            "a replay has no clock"
        );

        let mut out = Vec::new();
        Iperf3JsonFormatter::new(&mut out, None)
            .failed("connect: refused")
            .unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["start"]["connected"], serde_json::json!([]));
        assert!(
            doc["start"]["version"]
                .as_str()
                .unwrap()
                .starts_with("pinperf")
        );
        assert_eq!(
            (doc["end"].clone(), doc["error"].clone()),
            (serde_json::json!({}), "connect: refused".into())
        );

        // Cut short: the totals so far and the reason.
        let mut out = Vec::new();
        let mut f = Iperf3JsonFormatter::new(&mut out, None);
        f.header(&sample::header()).unwrap();
        f.cut_short(&sample::summary(), "interrupted").unwrap();
        drop(f);
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert!(doc["end"]["sum_sent"]["bytes"].is_u64());
        assert_eq!(doc["error"], "interrupted");
    }

    #[test]
    fn dates_are_iperf3_s_gmt_text() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(1_796_065_016), "Mon, 30 Nov 2026 18:56:56 GMT");
        assert_eq!(http_date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
    }
}
