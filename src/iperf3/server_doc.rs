//! `pinperf -s --format iperf3-json` (`pinperf iperf3 -s -J`): the server's own document
//! of each iperf3 client's test, written whole on stdout when the test ends, in the shape
//! `iperf3 -s -J` writes (read from iperf3 3.21's server documents): `start` with
//! `accepted_connection` and the test's cookie, `intervals` as this host counted them
//! (`sender` true where it sends: `-R`), `end` per stream and summed. pScheduler takes the
//! server's document as the result of a `-R` test.
//!
//! Where it parts from iperf3's: iperf3's server writes 0 for the far end's bytes,
//! datagrams and CPU, although the results exchange told it them; this one writes what the
//! client reported (`end.streams[].sender` of a receiving server is the client's bytes
//! written, a sending server's UDP `end.sum` carries the client's loss and jitter). Before
//! the exchange (a failed test) the far end's side is left out. `socket` numbers follow
//! the client document's (the stream's index, `--bidir`'s server-to-client streams after
//! the client's), not file descriptors.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use serde::Serialize;

use super::json::{
    Connected, Cpu, End, EndStream, EndWhole, Entry, HostPort, Interval, RunFacts, TcpNow,
    TcpPeaks, TestStart, Timestamp, UdpLoss, float, http_date,
};
use super::{Results, StreamResult, stream_id};
use crate::wire::measure::{ClosedInterval, StreamSlice};
use crate::wire::params::TestParams;

/// What the server knows of a test once its streams are connected.
pub(crate) struct Opening {
    connected: Vec<Connected>,
    accepted: SocketAddr,
    cookie: String,
    sndbuf: u64,
    rcvbuf: u64,
    mss: Option<u64>,
    facts: RunFacts,
}

impl Opening {
    /// The test's data sockets (`fds`, in stream order), its client's control address and
    /// its cookie; the first socket's buffers and MSS stand for all, as iperf3's do.
    pub(crate) fn of(fds: &[OwnedFd], accepted: SocketAddr, cookie: &[u8], udp: bool) -> Opening {
        let addr = |a: std::io::Result<socket2::SockAddr>| a.ok().and_then(|a| a.as_socket());
        let connected = fds
            .iter()
            .enumerate()
            .map(|(i, fd)| {
                let s = socket2::SockRef::from(fd);
                let (local, remote) = (addr(s.local_addr()), addr(s.peer_addr()));
                let host = |a: Option<SocketAddr>| {
                    a.map_or("?".into(), |a| a.ip().to_canonical().to_string())
                };
                Connected {
                    socket: i as u64,
                    local_host: host(local),
                    local_port: local.map_or(0, |a| u64::from(a.port())),
                    remote_host: host(remote),
                    remote_port: remote.map_or(0, |a| u64::from(a.port())),
                }
            })
            .collect();
        let first = fds.first().map(socket2::SockRef::from);
        let size = |f: fn(&socket2::SockRef) -> std::io::Result<usize>| {
            first
                .as_ref()
                .and_then(|s| f(s).ok())
                .map_or(0, |n| n as u64)
        };
        Opening {
            connected,
            accepted,
            cookie: String::from_utf8_lossy(cookie.strip_suffix(&[0]).unwrap_or(cookie)).into(),
            sndbuf: size(|s| s.send_buffer_size()),
            rcvbuf: size(|s| s.recv_buffer_size()),
            mss: (!udp)
                .then(|| first.as_ref().and_then(|s| s.tcp_mss().ok()).map(u64::from))
                .flatten(),
            facts: RunFacts::here_now(),
        }
    }
}

/// A test's figures for its document: what this end cut into intervals (per direction, in
/// [`TestParams::direction`]'s order) and both ends' results, once exchanged.
pub(crate) struct Figures<'a> {
    pub cuts: &'a [Vec<ClosedInterval>],
    pub ours: Option<&'a Results>,
    pub theirs: Option<&'a Results>,
}

/// The document, or (a test that failed) as much of it as was known, with its error:
/// iperf3's members in iperf3's order, indented as JSON readers and people expect.
pub(crate) fn render(
    test: &TestParams,
    opening: &Opening,
    figures: &Figures,
    error: Option<&str>,
) -> String {
    let doc = Doc {
        start: start(test, opening),
        intervals: intervals(test, figures.cuts),
        end: match (figures.ours, figures.theirs) {
            (Some(ours), Some(theirs)) => end(test, figures.cuts, ours, theirs),
            _ => End::default(),
        },
        error,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// The document of a test that failed before its streams were connected (refused
/// parameters or credentials, streams that never came): what iperf3's server writes then,
/// `start` with the connection and cookie, no intervals, and the error.
pub(crate) fn render_early(accepted: SocketAddr, cookie: &[u8], error: &str) -> String {
    let o = Opening::of(&[], accepted, cookie, false);
    let ms = o.facts.started_ms.unwrap_or(0);
    let doc = serde_json::json!({
        "start": {
            "connected": [],
            "version": crate::wire::SOFTWARE,
            "system_info": o.facts.system_info,
            "timestamp": Timestamp {
                time: http_date(ms / 1000),
                timesecs: ms / 1000,
                timemillisecs: ms,
            },
            "accepted_connection": HostPort {
                host: o.accepted.ip().to_canonical().to_string(),
                port: u64::from(o.accepted.port()),
            },
            "cookie": o.cookie,
        },
        "intervals": [],
        "end": {},
        "error": format!("error - {error}"),
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Writes a document whole on stdout, as `iperf3 -s -J` does after each test; a closed
/// stdout loses it, never the server.
pub(crate) fn print(doc: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{doc}\n").as_bytes());
    let _ = out.flush();
}

#[derive(Serialize)]
struct Doc<'a> {
    start: Start<'a>,
    intervals: Vec<Interval>,
    end: End,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// `start` as an iperf3 server writes it.
#[derive(Serialize)]
struct Start<'a> {
    connected: &'a [Connected],
    version: &'static str,
    system_info: &'a str,
    sock_bufsize: u64,
    sndbuf_actual: u64,
    rcvbuf_actual: u64,
    timestamp: Timestamp,
    accepted_connection: HostPort,
    cookie: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss_default: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss: Option<u64>,
    target_bitrate: u64,
    fq_rate: u64,
    test_start: TestStart,
}

fn start<'a>(test: &TestParams, o: &'a Opening) -> Start<'a> {
    let ms = o.facts.started_ms.unwrap_or(0);
    let header = crate::report::model::Header::of_test(test);
    let asked = test.mss().map(u64::from);
    Start {
        connected: &o.connected,
        version: crate::wire::SOFTWARE,
        system_info: &o.facts.system_info,
        sock_bufsize: test.window_bytes.unwrap_or(0),
        sndbuf_actual: o.sndbuf,
        rcvbuf_actual: o.rcvbuf,
        timestamp: Timestamp {
            time: http_date(ms / 1000),
            timesecs: ms / 1000,
            timemillisecs: ms,
        },
        accepted_connection: HostPort {
            host: o.accepted.ip().to_canonical().to_string(),
            port: u64::from(o.accepted.port()),
        },
        cookie: &o.cookie,
        tcp_mss_default: asked.is_none().then_some(o.mss).flatten(),
        tcp_mss: asked.filter(|_| !test.udp),
        target_bitrate: test.rate().unwrap_or(0),
        fq_rate: test.fq_rate_bps.unwrap_or(0),
        test_start: super::json::test_start(&header),
    }
}

/// Direction `k`'s part in the document: whether this host sends it, where its socket
/// numbers start, and iperf3's clock (restarted at `-O`'s end).
#[derive(Clone, Copy)]
struct Part {
    sends: bool,
    udp: bool,
    first: usize,
    omit_s: f64,
    datagram: u64,
}

impl Part {
    fn all(test: &TestParams) -> Vec<Part> {
        let n = test.streams as usize;
        (test.direction().reversed().iter().enumerate())
            .map(|(k, &reverse)| Part {
                sends: reverse,
                udp: test.udp,
                first: k * n,
                omit_s: test.omit().as_secs_f64(),
                datagram: test.block_bytes().max(1),
            })
            .collect()
    }

    /// A span of seconds on this end's clock, written on iperf3's: from `from`.
    fn span(&self, begin_s: f64, end_s: f64, bytes: u64, from: f64) -> Entry {
        let seconds = end_s - begin_s;
        Entry {
            start: float((begin_s - from).max(0.0)),
            end: float((end_s - from).max(0.0)),
            seconds: float(seconds),
            bytes,
            bits_per_second: float(bytes as f64 * 8.0 / seconds.max(1e-9)),
            sender: self.sends,
            ..Entry::default()
        }
    }
}

fn intervals(test: &TestParams, cuts: &[Vec<ClosedInterval>]) -> Vec<Interval> {
    let parts = Part::all(test);
    let rows = cuts.iter().map(Vec::len).max().unwrap_or(0);
    (0..rows)
        .map(|j| {
            let mut out = Interval::default();
            for (k, (part, cut)) in parts.iter().zip(cuts).enumerate() {
                let Some(iv) = cut.get(j) else { continue };
                let (b, e) = (iv.begin_ns as f64 / 1e9, iv.end_ns as f64 / 1e9);
                // iperf3 restarts its clock at -O's end: the omitted rows keep the test's.
                let from = if iv.omitted { 0.0 } else { part.omit_s };
                let row = |s: &StreamSlice| {
                    interval_entry(part, s, part.span(b, e, s.bytes, from), iv.omitted)
                };
                let entries: Vec<Entry> = iv.streams.iter().map(row).collect();
                let mut sum = part.span(b, e, entries.iter().map(|x| x.bytes).sum(), from);
                sum.omitted = Some(iv.omitted);
                summed(part, &mut sum, &iv.streams);
                out.streams
                    .extend(entries.into_iter().enumerate().map(|(i, mut x)| {
                        x.socket = Some((part.first + i) as u64);
                        x
                    }));
                match k {
                    0 => out.sum = Some(sum),
                    _ => out.sum_bidir_reverse = Some(sum),
                }
            }
            out
        })
        .collect()
}

/// A stream's interval entry: a TCP sender's `TCP_INFO` at the interval's end, a UDP
/// sender's datagrams, a UDP receiver's loss.
fn interval_entry(part: &Part, s: &StreamSlice, mut e: Entry, omitted: bool) -> Entry {
    e.omitted = Some(omitted);
    match (part.udp, part.sends) {
        (false, true) => {
            e.retransmits = Some(s.retransmits.unwrap_or(0));
            e.tcp_now = Some(TcpNow {
                snd_cwnd: s.last.map_or(0, |t| t.cwnd_bytes),
                snd_wnd: 0,
                rtt: s.last.map_or(0, |t| u64::from(t.rtt_us)),
                rttvar: s.last.map_or(0, |t| u64::from(t.rttvar_us)),
                pmtu: 0,
            });
        }
        (false, false) => {}
        (true, true) => e.packets = Some(s.bytes / part.datagram),
        (true, false) => {
            let u = s.udp.unwrap_or_default();
            e.udp = Some(udp_loss(u.packets + u.lost, u.lost, u.jitter_ms));
        }
    }
    e
}

/// An interval's sum of the streams' entries.
fn summed(part: &Part, sum: &mut Entry, streams: &[StreamSlice]) {
    match (part.udp, part.sends) {
        (false, true) => sum.retransmits = Some(streams.iter().filter_map(|s| s.retransmits).sum()),
        (false, false) => {}
        (true, true) => sum.packets = Some(streams.iter().map(|s| s.bytes / part.datagram).sum()),
        (true, false) => {
            let slices: Vec<_> = streams.iter().map(|s| s.udp.unwrap_or_default()).collect();
            let lost = slices.iter().map(|u| u.lost).sum();
            let packets = slices.iter().map(|u| u.packets + u.lost).sum();
            let jitter =
                slices.iter().map(|u| u.jitter_ms).sum::<f64>() / slices.len().max(1) as f64;
            sum.udp = Some(udp_loss(packets, lost, jitter));
        }
    }
}

fn udp_loss(expected: u64, lost: u64, jitter_ms: f64) -> UdpLoss {
    UdpLoss {
        jitter_ms: float(jitter_ms),
        lost_packets: lost,
        packets: expected,
        lost_percent: float(crate::report::model::percent(lost, expected)),
    }
}

/// `end`: each stream's sides from the two ends' results (the sender's bytes from the
/// sender's, the receiver's from the receiver's), summed per direction; both ends' CPU.
fn end(test: &TestParams, cuts: &[Vec<ClosedInterval>], ours: &Results, theirs: &Results) -> End {
    let n = test.streams as usize;
    let mut whole = EndWhole {
        cpu_utilization_percent: Cpu {
            host_total: float(ours.cpu_util_total),
            host_user: float(ours.cpu_util_user),
            host_system: float(ours.cpu_util_system),
            remote_total: float(theirs.cpu_util_total),
            remote_user: float(theirs.cpu_util_user),
            remote_system: float(theirs.cpu_util_system),
        },
        ..EndWhole::default()
    };
    for (k, part) in Part::all(test).iter().enumerate() {
        let (sender, receiver) = match part.sends {
            true => (ours, theirs),
            false => (theirs, ours),
        };
        let pair = |i: usize| {
            let id = stream_id(part.first + i);
            (sender.stream(id), receiver.stream(id))
        };
        let cut = cuts.get(k).map_or(&[][..], Vec::as_slice);
        let streams: Vec<EndStream> = (0..n).map(|i| end_stream(part, i, pair(i), cut)).collect();
        let seconds = (0..n)
            .filter_map(|i| ours.stream(stream_id(part.first + i)))
            .map(|r| r.end_time)
            .fold(0.0, f64::max);
        whole.streams.extend(streams);
        let sides: Vec<_> = (0..n).map(pair).collect();
        let [sum, sent, received] = end_sums(part, &sides, seconds);
        match k {
            0 => (whole.sum, whole.sum_sent, whole.sum_received) = (sum, sent, received),
            _ => {
                (
                    whole.sum_bidir_reverse,
                    whole.sum_sent_bidir_reverse,
                    whole.sum_received_bidir_reverse,
                ) = (sum, sent, received)
            }
        }
    }
    // This end's congestion control under its role's key alone, as iperf3 3.21's server
    // writes it (with --bidir, as the sender's); the client's is in the client's document.
    if !test.udp {
        let sends = test.direction().reversed().contains(&true);
        let mine = ours.congestion_used.clone();
        match sends {
            true => whole.sender_tcp_congestion = mine,
            false => whole.receiver_tcp_congestion = mine,
        }
    }
    End { whole: Some(whole) }
}

type Sides<'a> = (Option<&'a StreamResult>, Option<&'a StreamResult>);

/// Stream `i`'s totals: TCP's sender and receiver sides, or UDP's one entry (the
/// sender's bytes, the receiver's loss and jitter).
fn end_stream(
    part: &Part,
    i: usize,
    (sender, receiver): Sides,
    cut: &[ClosedInterval],
) -> EndStream {
    let socket = Some((part.first + i) as u64);
    let side = |r: Option<&StreamResult>| {
        r.map(|r| Entry {
            socket,
            ..part.span(0.0, r.end_time, r.bytes, 0.0)
        })
    };
    if part.udp {
        let mut e = side(sender);
        if let (Some(e), Some(r)) = (e.as_mut(), receiver) {
            let expected = u64::try_from(r.packets).unwrap_or(0);
            e.udp = Some(udp_loss(
                expected,
                u64::try_from(r.errors).unwrap_or(0),
                r.jitter * 1e3,
            ));
            e.out_of_order = Some(0);
        }
        return EndStream {
            udp: e,
            ..EndStream::default()
        };
    }
    // A sending server's side carries its retransmits and TCP_INFO peaks, as iperf3's.
    let mut sent = side(sender);
    if let (Some(e), true) = (sent.as_mut(), part.sends) {
        e.retransmits = Some(sender.map_or(0, |r| u64::try_from(r.retransmits).unwrap_or(0)));
        e.tcp_peaks = Some(peaks(cut, i));
    }
    EndStream {
        sender: sent,
        receiver: side(receiver),
        udp: None,
    }
}

/// A sending stream's largest cwnd and its kernel RTT's range and mean over the test.
fn peaks(cut: &[ClosedInterval], i: usize) -> TcpPeaks {
    let slices = cut
        .iter()
        .filter(|iv| !iv.omitted)
        .filter_map(|iv| iv.streams.get(i));
    let mut p = TcpPeaks::default();
    let (mut sum, mut n) = (0.0, 0u32);
    for s in slices {
        if let Some(t) = s.last {
            p.max_snd_cwnd = p.max_snd_cwnd.max(t.cwnd_bytes);
        }
        if let Some(r) = s.srtt {
            p.max_rtt = p.max_rtt.max(u64::from(r.max_us));
            p.min_rtt = match p.min_rtt {
                0 => u64::from(r.min_us),
                m => m.min(u64::from(r.min_us)),
            };
            sum += r.avg_us * f64::from(r.samples);
            n += r.samples;
        }
    }
    p.mean_rtt = if n > 0 {
        (sum / f64::from(n)) as u64
    } else {
        0
    };
    p
}

/// A direction's sums: TCP's `sum_sent` and `sum_received`; UDP's `sum` (the sender's
/// bytes, the receiver's loss), `sum_sent` (the sender's datagrams, no loss seen) and
/// `sum_received`; a side neither end reported is left out.
fn end_sums<'a>(part: &Part, sides: &[Sides<'a>], seconds: f64) -> [Option<Entry>; 3] {
    let total = |known: Vec<&'a StreamResult>| {
        (!known.is_empty()).then(|| {
            let bytes = known.iter().map(|r| r.bytes).sum();
            (part.span(0.0, seconds, bytes, 0.0), known)
        })
    };
    let sent = total(sides.iter().filter_map(|s| s.0).collect());
    let received = total(sides.iter().filter_map(|s| s.1).collect());
    let count = |rs: &[&StreamResult], f: fn(&StreamResult) -> i64| -> u64 {
        rs.iter().map(|r| u64::try_from(f(r)).unwrap_or(0)).sum()
    };
    let clean = |e: Entry| Entry { omitted: None, ..e };
    if !part.udp {
        let sent = sent.map(|(mut e, rs)| {
            e.retransmits = part.sends.then(|| count(&rs, |r| r.retransmits));
            clean(e)
        });
        return [None, sent, received.map(|(e, _)| clean(e))];
    }
    let loss = received.as_ref().map(|(_, rs)| {
        let jitter = rs.iter().map(|r| r.jitter * 1e3).sum::<f64>() / rs.len() as f64;
        udp_loss(count(rs, |r| r.packets), count(rs, |r| r.errors), jitter)
    });
    let sum = sent.as_ref().map(|(e, _)| Entry {
        udp: loss
            .as_ref()
            .map(|l| udp_loss(l.packets, l.lost_packets, l.jitter_ms)),
        ..clean(part.span(0.0, seconds, e.bytes, 0.0))
    });
    let sent = sent.map(|(e, rs)| Entry {
        udp: Some(udp_loss(count(&rs, |r| r.packets), 0, 0.0)),
        sender: true,
        ..clean(e)
    });
    let received = received.map(|(e, _)| Entry {
        udp: loss,
        sender: false,
        ..clean(e)
    });
    [sum, sent, received]
}
