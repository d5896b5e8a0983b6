//! Plain-words findings at the end of a test, each only when the numbers show it: stalls
//! (the whole test or a stream reading nothing for whole intervals), a standing queue in
//! the socket buffers (block RTT far above the path's RTT once a block's own write time is
//! taken out, with the window that would avoid it), many retransmits, retransmits
//! concentrated in a few streams, and streams starved while others ran. Pure functions of
//! the report model; the client's reporter calls them once, at the end.

use super::model::{Fairness, Header, KernelSummary, StreamRow, UdpFigures};
use crate::data::stream::echo::HEADER_LEN;

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

/// A queue counts as "standing" when blocks wait this many times the path RTT…
const QUEUE_FACTOR: f64 = 4.0;
/// …and at least this long, microseconds.
const QUEUE_MIN_US: f64 = 1000.0;

/// The findings, one `String` per line (without the leading `# `).
pub fn diagnose(e: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    stalls(e, &mut out);
    standing_queue(e, &mut out);
    retransmit_share(e, &mut out);
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

/// A rate in words that never rounds a real rate to nothing: `27896 Mb/s`, `2.50 Mb/s`,
/// `250 kb/s`, `12 b/s`.
pub fn human_rate(bps: f64) -> String {
    if bps >= 10e6 {
        format!("{:.0} Mb/s", bps / 1e6)
    } else if bps >= 1e6 {
        format!("{:.2} Mb/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.0} kb/s", bps / 1e3)
    } else {
        format!("{bps:.0} b/s")
    }
}

/// Seconds into the test as a person writes them: `1.5`, `1.25`, `3.0`.
fn secs(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0');
    if text.ends_with('.') {
        format!("{text}0")
    } else {
        text.to_string()
    }
}

/// A run of consecutive intervals in which nothing was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// Seconds into the test: the first empty interval's begin, the last one's end.
    pub start: f64,
    pub end: f64,
    pub intervals: u32,
    /// Some other stream read data during it.
    pub others_read: bool,
}

/// The stalls of the whole test or of one stream, fed interval by interval (O(1) state, so
/// any test length is fine). A stream's stall counts only when other streams read data
/// during it: when nothing moved, the whole test's stall says so once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StallLog {
    /// The whole test's log (every stall counts), not a stream's.
    whole_test: bool,
    open: Option<Stall>,
    /// Stalls that count: how many, their intervals in all, and the longest.
    pub count: u32,
    pub intervals: u32,
    pub longest: Option<Stall>,
}

impl StallLog {
    /// The log of the whole test (all streams together).
    pub fn whole_test() -> StallLog {
        StallLog {
            whole_test: true,
            ..StallLog::default()
        }
    }

    /// One more interval, `start..end` seconds: whether this log read nothing in it, and
    /// whether any other stream read something.
    pub fn step(&mut self, start: f64, end: f64, read_nothing: bool, others_read: bool) {
        if !read_nothing {
            self.finish();
            return;
        }
        let run = self.open.get_or_insert(Stall {
            start,
            end,
            intervals: 0,
            others_read: false,
        });
        run.end = end;
        run.intervals += 1;
        run.others_read |= others_read;
    }

    /// Closes the open stall, if any (at the end of the test).
    pub fn finish(&mut self) {
        let Some(run) = self.open.take() else { return };
        if !(self.whole_test || run.others_read) {
            return;
        }
        self.count += 1;
        self.intervals += run.intervals;
        if self.longest.is_none_or(|l| run.intervals > l.intervals) {
            self.longest = Some(run);
        }
    }

    /// "from 1.5 s to 3.0 s (3 intervals)", or with several stalls "in 3 stretches of 5
    /// intervals in all, the longest from … (3 intervals)".
    fn describe(&self) -> Option<String> {
        let l = self.longest?;
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        let longest = format!(
            "from {} s to {} s ({} interval{})",
            secs(l.start),
            secs(l.end),
            l.intervals,
            plural(l.intervals)
        );
        Some(if self.count == 1 {
            longest
        } else {
            format!(
                "in {} stretches of {} intervals in all, the longest {longest}",
                self.count, self.intervals
            )
        })
    }
}

/// Stream stall lines beyond this many are summed up in one.
const STALLED_STREAM_LINES: usize = 4;

/// The whole test, or single streams while others ran, reading nothing for whole
/// intervals: a paused process, a stalled path, a stream stuck in loss recovery.
fn stalls(e: &Evidence, out: &mut Vec<String>) {
    // On a path whose round trip is longer than an interval, the first intervals are empty
    // because the first bytes are still on their way, not because anything stalled.
    let path_s = e
        .streams
        .iter()
        .filter_map(|r| r.min_rtt)
        .min()
        .map_or(0.0, |us| f64::from(us) / 1e6);
    let log = e.test_stalls;
    let only_the_first_trip = log.count == 1
        && log
            .longest
            .as_ref()
            .is_some_and(|l| l.start == 0.0 && l.end <= 2.0 * path_s);
    // A sender paced (-b) below a block per interval leaves intervals empty by design: a
    // stretch no longer than its blocks' spacing (and an interval) is the pacing's.
    let spacing_s = e
        .header
        .rate_bps
        .filter(|&r| r > 0)
        .map_or(0.0, |r| e.header.block_bytes as f64 * 8.0 / r as f64);
    let paced = spacing_s >= e.header.interval_s
        && log
            .longest
            .as_ref()
            .is_some_and(|l| l.end - l.start <= spacing_s + e.header.interval_s);
    if let Some(when) = log.describe().filter(|_| !only_the_first_trip && !paced) {
        out.push(format!(
            "diagnosis: no data moved {when}: a sender or receiver was stopped (paused, or \
             not scheduled) or the path stalled."
        ));
    }
    let mut stalled: Vec<(u16, &StallLog)> = e
        .streams
        .iter()
        .zip(e.stream_stalls)
        .filter(|(_, log)| log.count > 0)
        .map(|(s, log)| (s.stream, log))
        .collect();
    stalled.sort_by_key(|(id, log)| (std::cmp::Reverse(log.intervals), *id));
    for (id, log) in stalled.iter().take(STALLED_STREAM_LINES) {
        if let Some(when) = log.describe() {
            out.push(format!(
                "diagnosis: stream {id} read nothing {when} while others moved data: its \
                 connection waited out a retransmission timeout, or the other streams held \
                 the shared queue."
            ));
        }
    }
    if stalled.len() > STALLED_STREAM_LINES {
        let mut rest: Vec<u16> = stalled[STALLED_STREAM_LINES..]
            .iter()
            .map(|(id, _)| *id)
            .collect();
        rest.sort_unstable();
        out.push(format!(
            "diagnosis: streams {} also read nothing for whole intervals while others moved \
             data.",
            list(&rest)
        ));
    }
}

/// Block RTT far above the path's: blocks queued somewhere. A block's own write time at
/// the measured rate is in every sample (the sender reads echoes between writes), so it is
/// taken out before anything is called a queue; a queue larger than the buffers that were
/// set (`-w`) is not in those buffers; and the advice never repeats the window in use, nor
/// asks for a larger one to cure a queue.
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
    let streams = e.streams.len().max(1) as f64;
    let per_stream_bps = e.rate_bps / streams;
    // No rate, no queue to size and no bandwidth-delay product: a stall says the rest.
    let (Some(path_us), true, true) = (path_us, n > 0, per_stream_bps >= 1.0) else {
        return;
    };
    let path_us = f64::from(path_us);
    let block_us = sum / n as f64;
    if block_us < QUEUE_FACTOR * path_us || block_us - path_us < QUEUE_MIN_US {
        return;
    }
    let block_bytes = e.header.block_bytes as f64;
    let write_us = block_bytes * 8.0 / per_stream_bps * 1e6;
    // A sender paced by -b writes a block in pieces of pace::QUANTUM of its rate (at least
    // a byte) and reads echoes between them: a sample holds the pacing of the header's
    // bytes after the first piece (at -b 10k, 15 more one-byte pieces: 12 ms), not the
    // whole block's write.
    let paced = e.header.rate_bps.filter(|_| !e.header.udp).map(|rate| {
        let rate = rate.max(1) as f64;
        let piece = (rate * crate::data::pace::QUANTUM.as_secs_f64() / 8.0).max(1.0);
        let header_us = (HEADER_LEN as f64 - piece).max(0.0) * 8.0 / rate * 1e6;
        (rate as u64, header_us.min(write_us))
    });
    let write_us = paced.map_or(write_us, |(_, us)| us);
    let queue_us = block_us - path_us - write_us;
    let waited = format!(
        "diagnosis: blocks waited {:.2} ms on average against a path RTT of {:.3} ms (kernel \
         min_rtt)",
        block_us / 1e3,
        path_us / 1e3
    );
    let block = match paced {
        Some((rate, _)) => format!(
            "-b {} paces out each block's {HEADER_LEN}-byte header in {:.2} ms",
            human_rate(rate as f64),
            write_us / 1e3
        ),
        None => format!(
            "-l {} takes {:.2} ms to write at {} per stream",
            crate::units::format_size(e.header.block_bytes),
            write_us / 1e3,
            human_rate(per_stream_bps)
        ),
    };
    if queue_us < QUEUE_MIN_US || queue_us + path_us < QUEUE_FACTOR * path_us {
        if write_us < 0.5 * (block_us - path_us) {
            return;
        }
        out.push(match paced {
            Some(_) => format!(
                "{waited}: that is the pacing of each block's header ({block}), not a queue."
            ),
            None => format!(
                "{waited}: that is each block's own write time ({block}; the sender reads \
                 echoes between writes), not a queue. A smaller -l gives a finer block RTT."
            ),
        });
        return;
    }
    // A sender that -b held below the path's rate: its socket buffer empties between
    // pieces (nothing unsent beyond a block at the end), and the wait is elsewhere (the
    // receiver waking to read and echo, delayed ACKs between paced pieces), which no -w
    // shortens (-b 100M on loopback was told of a standing queue and -w 64k,
    // which changed nothing). Paced at about the bottleneck's rate a queue does stand
    // (lab --rate 100M -b 100M, 1.5 MiB unsent and growing): the rate alone
    // does not tell the two apart.
    let emptied = e.streams.iter().all(|s| {
        s.notsent_bytes
            .is_none_or(|b| u64::from(b) <= e.header.block_bytes)
    });
    let held = |&(rate, _): &(u64, f64)| {
        per_stream_bps >= KEPT_RATE * rate as f64 && emptied && queue_us < PACED_WAIT_US
    };
    if let Some((rate, _)) = paced.filter(held) {
        out.push(format!(
            "{waited}: -b {} paced the sender below what the path takes, so the {:.2} ms \
             beyond the path's RTT and the header's pacing are not a queue in its socket \
             buffers and a smaller -w would not shorten them: they are the receiver waking to \
             read and echo, or acknowledgements delayed between paced pieces.",
            human_rate(rate as f64),
            queue_us / 1e3
        ));
        return;
    }
    let queue = per_stream_bps * queue_us / 1e6 / 8.0;
    let sndbuf = e
        .streams
        .iter()
        .filter_map(|s| s.sndbuf)
        .max()
        .unwrap_or(e.header.local_window.sndbuf);
    let window = e.header.local_window.requested;
    // With -w the buffers are fixed: the sender's and the receiver's are all a block can
    // queue in on the hosts. Autotuned receive buffers grow unseen, so no bound then.
    let buffers = window.map(|_| sndbuf + e.header.remote_window.rcvbuf);
    let own_write = if write_us >= 0.1 * (block_us - path_us) {
        match paced {
            Some(_) => format!(" beyond the pacing of each block's header ({block})"),
            None => format!(" beyond each block's own write time ({block})"),
        }
    } else {
        String::new()
    };
    if let Some(b) = buffers.filter(|&b| queue > 1.25 * b as f64) {
        out.push(format!(
            "{waited}: {:.2} ms{own_write} would be a queue of {} per stream, more than the \
             socket buffers hold ({} sent + received): the blocks waited elsewhere (a receiver \
             slow to read, a thread not scheduled), not in a too-large window.",
            queue_us / 1e3,
            human_bytes(queue),
            human_bytes(b as f64)
        ));
        return;
    }
    out.push(format!(
        "{waited}: a standing queue of about {} per stream in the socket buffers{own_write}.",
        human_bytes(queue)
    ));
    let bdp = per_stream_bps * path_us / 1e6 / 8.0;
    // The per-stream BDP rounded up to a power of two: Linux doubles the request, which is
    // the headroom. On the lab's 60 ms path these windows kept 95-98 % of the bottleneck at
    // 1 to 16 streams with Jain >= 0.999 and no retransmits (bench-scripts/wan-lab.sh).
    let suggest = (bdp.max(65536.0) as u64).next_power_of_two();
    let how = if window.is_some() {
        "granted"
    } else {
        "autotuned"
    };
    let product = format!(
        "({} x {:.3} ms = {} per stream)",
        human_rate(per_stream_bps),
        path_us / 1e3,
        human_bytes(bdp)
    );
    match window {
        Some(w) if w <= suggest => out.push(format!(
            "diagnosis: the window (-w {}, {} granted) is already at or below what the path \
             needs {product}, so a smaller one would cost rate: the queue is not the window's. \
             Look at the block size ({block}) and at the receiver keeping up (its CPU).",
            crate::units::format_size(w),
            human_bytes(sndbuf as f64)
        )),
        _ => out.push(format!(
            "diagnosis: the send buffer ({} {how}) is far above the bandwidth-delay product \
             {product}; -w {} should keep the rate without the queue.",
            human_bytes(sndbuf as f64),
            crate::units::format_size(suggest)
        )),
    }
}

/// The share of `-b` a sender reaches to count as having kept the rate asked (TCP: paced,
/// with no standing queue to advise on; UDP: not short of the load it was to offer).
const KEPT_RATE: f64 = 0.95;

/// The longest wait a paced sender's blocks are put down to the receiver's wake-up and
/// delayed ACKs (Linux delays an ACK up to 40 ms) rather than a queue.
const PACED_WAIT_US: f64 = 40_000.0;

/// Retransmitted segments at least this share of the segments sent…
const RETRANSMIT_SHARE: f64 = 0.01;
/// …and at least this many, get a line.
const RETRANSMIT_MIN: u64 = 10;

/// Many retransmits: segments lost on the path or in a queue that overflowed.
fn retransmit_share(e: &Evidence, out: &mut Vec<String>) {
    let retransmits: u64 = e.streams.iter().filter_map(|s| s.retransmits).sum();
    let sent: u64 = e.streams.iter().map(|s| s.sent_bytes).sum();
    let Some(mss) = e.header.path.mss.filter(|&m| m > 0) else {
        return;
    };
    let segments = sent as f64 / f64::from(mss);
    if retransmits < RETRANSMIT_MIN || segments < 1.0 {
        return;
    }
    let share = retransmits as f64 / segments;
    if share < RETRANSMIT_SHARE {
        return;
    }
    let bbr = if e.header.congestion == "bbr" {
        "; bbr also retransmits by design while it probes for bandwidth (compare with -C cubic)"
    } else {
        ""
    };
    out.push(format!(
        "diagnosis: {retransmits} segments retransmitted, {:.1}% of the about {:.0} sent \
         (MSS {mss} B, {} of {}): segments were lost, on the path, or in a bottleneck queue \
         that overflows when the windows exceed what it holds (try a smaller -w){bbr}.",
        share * 100.0,
        segments,
        human_bytes(retransmits as f64 * f64::from(mss)),
        human_bytes(sent as f64)
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

/// Streams that read nothing in intervals in which others did. Intervals in which no
/// stream read anything are the whole test's stalls (said by [`stalls`]), not starvation.
fn starvation(e: &Evidence, out: &mut Vec<String>) {
    let alone: Vec<u32> = e
        .starved_intervals
        .iter()
        .map(|n| n.saturating_sub(e.test_stalls.intervals))
        .collect();
    let starved: Vec<u16> = e
        .streams
        .iter()
        .zip(&alone)
        .filter(|(_, n)| **n > 0)
        .map(|(s, _)| s.stream)
        .collect();
    let total_bytes: u64 = e.streams.iter().map(|s| s.bytes).sum();
    if starved.is_empty() || total_bytes == 0 || e.streams.len() < 2 {
        return;
    }
    let count: u32 = alone.iter().sum();
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

/// A UDP receiver whose own socket buffer overflowed (`SO_RXQ_OVFL`): the datagrams
/// reached its host and were dropped there because its thread did not read them fast
/// enough, not on the path. The remedy is a larger buffer (`-w`) or a lower rate.
/// `reverse`: the data went from the server to the client (`-R`, or `--bidir`'s second
/// direction), whose buffer it names.
pub fn udp_receiver_drops(u: &UdpFigures, header: &Header, reverse: bool) -> Option<String> {
    if u.rxq_drops == 0 {
        return None;
    }
    // A server's buffer is as large as its --max-window lets a client ask for.
    let (window, cap) = match reverse {
        true => (header.local_window.rcvbuf, ""),
        false => (
            header.remote_window.rcvbuf,
            ", up to the server's --max-window",
        ),
    };
    Some(format!(
        "diagnosis: the receiver's own socket buffer overflowed {} time(s) (SO_RXQ_OVFL; \
         with GRO one drop may hold up to 64 datagrams): {} of the {} datagrams lost were \
         dropped on the receiving host, not on the path; its thread did not keep up: a \
         larger -w (its buffer is {}{cap}) or a lower -b.",
        u.rxq_drops,
        if u.rxq_drops >= u.lost_packets {
            "all"
        } else {
            "some"
        },
        u.lost_packets,
        crate::units::format_size(window)
    ))
}

/// UDP senders that wrote less than `-b` asked: the sending end could not keep up (its
/// CPU, its socket, or datagrams too small for the rate), so the test did not offer the
/// path the load it was asked to. `sent_bps` is per stream, over the test's span.
pub fn udp_sender_short(sent_bps: f64, header: &Header) -> Option<String> {
    let asked = header.rate_bps? as f64;
    (sent_bps < KEPT_RATE * asked).then(|| {
        format!(
            "diagnosis: the senders wrote {:.1} Mb/s per stream, {:.0}% of the -b {} asked: \
             the sending host could not keep up (CPU, or -l {} too small for the rate); the \
             loss figures are for the load actually offered.",
            sent_bps / 1e6,
            sent_bps * 100.0 / asked,
            crate::units::format_rate(asked as u64),
            header.block_bytes
        )
    })
}

/// The receiving end's kernel counted UDP datagrams it dropped for full socket buffers
/// (`RcvbufErrors` of `/proc/net/snmp`, for its whole namespace: other programs' sockets
/// count too).
pub fn udp_kernel_drops(k: &KernelSummary) -> Option<String> {
    let udp = k.receiver.unwrap_or(k.sender).udp?;
    (udp.rcvbuf_errors > 0).then(|| {
        format!(
            "diagnosis: the receiving host's kernel dropped {} UDP datagrams for full socket \
             buffers during the test (RcvbufErrors, {} in errors in all; namespace-wide).",
            udp.rcvbuf_errors, udp.in_errors
        )
    })
}

/// A test that ended well after `-t`: the senders stopped writing on time, and the rest was
/// data queued in their socket buffers. `queued_bytes` is what the senders held unsent at
/// their last write (`tcpi_notsent_bytes`), the bulk of what the receivers read afterwards.
/// `omit_s` and `duration_s` are `-O` and `-t` as given: the planned end is their sum.
/// `senders_rows`: the rows are the senders' counts (a client sending to an iperf3
/// server), which end on time, so only the totals cover the drain.
pub fn long_drain(
    omit_s: f64,
    duration_s: f64,
    end_s: f64,
    queued_bytes: u64,
    senders_rows: bool,
) -> Option<String> {
    let late = end_s - omit_s - duration_s;
    if late < DRAIN_MIN_S.max(DRAIN_SHARE * duration_s) {
        return None;
    }
    let omit = if omit_s > 0.0 {
        format!(" -O {omit_s}")
    } else {
        String::new()
    };
    let covers = match senders_rows {
        true => "the totals cover that drain (the rows are this end's writes, which ended on time)",
        false => "the last row covers that drain",
    };
    Some(format!(
        "diagnosis: the test ran {late:.1} s past -t {duration_s}{omit}: the senders stopped \
         writing on time with {} still unsent in their socket buffers, which the receivers \
         read afterwards; {covers}. A window near the bandwidth-delay product ends on time.",
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
        // Against an iperf3 server the rows are this end's writes: none covers the drain
        // (`-l 1` said the last row did, and it ended at 2.0 of 3.6 s).
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

    /// `-l 64M -w 64k` on loopback (27896 Mb/s, path 4 µs, block RTT 19.241 ms)
    /// reported a 64 MiB standing queue and advised `-w 64k`, the window in use. 64 MiB
    /// take 19.24 ms to write at that rate: the wait is the block's own write time.
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

    /// `-b 10k` on loopback: block RTT 11.85 ms was called each 128 KiB block's write time
    /// at the measured rate (104807 ms, longer than the test). A paced sender writes
    /// one-byte pieces at that rate and reads echoes between them: the wait is the pacing
    /// of the 16-byte header after its first byte (12 ms), and no advice about -l.
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

    /// `-b 100M` on loopback (block RTT 1.07 ms, path 6 us, 4 MiB autotuned) was
    /// told of a 13 KiB standing queue in the socket buffers and `-w 64k`, which changed
    /// nothing. A sender held to -b leaves no queue in them; one that fell short of -b
    /// (the path took less) still gets the queue and the advice.
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
        // wait past any delayed ACK (a lab run: 75 to 122 ms on a 10 ms path).
        let mut queued = row(0, 1000, 10_000, 90_000.0, 0);
        queued.notsent_bytes = Some(1_560_000);
        let d = one_stream(&h, queued.clone(), 95.4e6);
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
        queued.notsent_bytes = None;
        let d = one_stream(&h, queued, 95.4e6);
        assert!(d[0].contains("a standing queue of about"), "{d:?}");
    }

    /// `-w 1k` (granted 4608 and 2304 B) at 160 Mb/s with a block RTT of 7.46 ms
    /// reported a 145.6 KiB queue in 4.5 KiB buffers and advised `-w 64k`. A 128 KiB block
    /// takes 6.55 ms to write: the rest is under a millisecond, no queue, no advice.
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

    /// A 1 Mb/s lab test printed `0 Mb/s x 21.182 ms`. Small rates keep their
    /// figures; no rate at all sizes nothing.
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
        // Both streams read nothing in the 3 stalled intervals: not starved "while others
        // ran" (a paused client printed that too).
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

    /// A lab run with 44 220 retransmits had no line about them.
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
        // -R, and --bidir's server-to-client direction (it named the server's).
        let reverse = udp_receiver_drops(&u, &h, true).unwrap();
        assert!(reverse.contains("(its buffer is 4M)"), "{reverse}");
        assert_eq!(
            udp_receiver_drops(&UdpFigures::default(), &h, true),
            None,
            "no drops, no line"
        );
    }
}
