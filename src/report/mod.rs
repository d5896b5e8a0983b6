//! The client's reporter: the one thread that joins its own sender intervals with the
//! receiver's rows, computes every statistic once into the report model, and is the only
//! writer of stdout. (The server's reporter, which sends receiver rows, lives with the
//! server.) Formatters (one per format) print the model and compute nothing.

pub(crate) mod diagnosis;
pub(crate) mod fairness;
pub mod finding;
pub mod format;
pub(crate) mod interval;
pub mod model;
pub mod peer;
pub(crate) mod prefix;

/// How a header's `started_at` is written: local time with its offset from UTC.
pub const STARTED_AT: &str = "%Y-%m-%dT%H:%M:%S%z";

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, select};

use crate::data::stream::Batch;
use crate::data::stream::TcpSample;
use crate::error::{Error, Result};
use crate::os::cpu::{self, CpuReport};
use crate::os::kstat::KernelReport;
use crate::report::finding::Finding;
use crate::wire::{ReceiverDone, ReceiverRow};
use interval::{ClosedInterval, IntervalCutter, RttStats, StreamSlice};
use model::{
    CpuSummary, CpuUtilization, Header, IntervalReport, KernelSummary, RttSummary, SideTotal,
    StreamRow, SumRow, Summary, TestFairness, UdpFigures,
};

/// One output format.
pub(crate) trait Formatter: Send {
    fn header(&mut self, header: &Header) -> io::Result<()>;
    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()>;
    fn summary(&mut self, summary: &Summary) -> io::Result<()>;
    /// The test failed with `error` (after the totals so far, or with none): every format
    /// says so on stdout, as well as the one-line error on stderr.
    fn failed(&mut self, _error: &str) -> io::Result<()> {
        Ok(())
    }
    /// The test was cut short (a signal) after `summary`'s totals so far: both are said,
    /// the totals first.
    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        self.summary(summary)?;
        self.failed(error)
    }
    /// A stream failed `at` seconds into the test: said the moment it is known, before
    /// the partial results.
    fn stream_failed(&mut self, _at: f64, _error: &str) -> io::Result<()> {
        Ok(())
    }
    /// `--get-server-output`: the server's own lines about the test, handed over before
    /// the totals (a format prints them where its readers look: text after the totals).
    fn server_output(&mut self, _text: &str) -> io::Result<()> {
        Ok(())
    }
}

/// Whether the report could be written: shared by the reporter, which writes it, and the
/// client's main thread, which stops the test when nobody reads it any more.
#[derive(Clone, Default)]
pub(crate) struct Output(Arc<parking_lot::Mutex<Option<io::Error>>>);

impl Output {
    /// Writing the report failed (a closed pipe, a full disk).
    pub(crate) fn closed(&self) -> bool {
        self.0.lock().is_some()
    }

    /// Why it failed: a closed pipe is [`Error::OutputClosed`] (not a failure of the test).
    pub(crate) fn error(&self) -> Option<Error> {
        self.0.lock().as_ref().map(|e| match e.kind() {
            io::ErrorKind::BrokenPipe => Error::OutputClosed,
            kind => Error::io("write the report", io::Error::new(kind, e.to_string())),
        })
    }

    /// Records the result of one write; true while the output works.
    pub(crate) fn check(&self, r: io::Result<()>) -> bool {
        match r {
            Ok(()) => !self.closed(),
            Err(e) => {
                self.0.lock().get_or_insert(e);
                false
            }
        }
    }
}

/// What the client's reporter hands back: both sides' byte counts per stream.
#[derive(Debug, Clone)]
pub(crate) struct ClientTotals {
    /// Every direction's streams, in order.
    pub sent: Vec<u64>,
    pub received: Option<Vec<u64>>,
    /// The summaries that were printed, one per direction (none when the totals never came).
    pub summaries: Vec<Summary>,
}

/// Events from the control connection (and the client's main thread) that the client's
/// reporter consumes.
#[derive(Debug)]
pub(crate) enum RemoteEvent {
    /// A server receiver's interval (a direction the client sends).
    Row(ReceiverRow),
    /// A server sender's interval (a direction the server sends: `-R`, `--bidir`).
    SenderInterval(ClosedInterval),
    /// The server's totals, once every stream there has ended.
    Done(Box<ReceiverDone>),
    /// The client's own CPU over the test (sent by the client's main thread once its
    /// stream threads are joined).
    LocalCpu(CpuReport),
    /// The client's kernel TCP drop counters over the test.
    LocalKernel(crate::os::kstat::KernelReport),
    /// The test failed: the reporter hands this to the formatter instead of a summary.
    Failed(String),
    /// The test was stopped (a signal, a failed stream or peer) `at` seconds in: every
    /// format keeps the totals of the receivers' rows so far, then `Failed` says why.
    /// `say` is a live line for text.
    CutShort { at: f64, say: Option<String> },
    /// A local stream failed `at` seconds into the test (said live, before `Failed`).
    StreamFailed { at: f64, error: String },
}

/// One direction of a test, as the client's reporter gets it: this end's stream threads'
/// batches (its senders when the client sends, its receivers when the server does), cut
/// here; the other half comes from the server.
pub(crate) struct Feed {
    /// The server sends this direction (`-R`, or `--bidir`'s second).
    pub reverse: bool,
    pub batches: Receiver<Batch>,
    pub free: Sender<Batch>,
    pub cutter: IntervalCutter,
}

/// Whole-test RTT statistics (weighted by samples).
#[derive(Default, Clone, Copy)]
struct RttAgg {
    min: f64,
    max: f64,
    sum: f64,
    n: u64,
}

impl RttAgg {
    fn add(&mut self, r: &RttSummary) {
        if r.samples == 0 {
            return;
        }
        self.min = if self.n == 0 {
            r.min_us
        } else {
            self.min.min(r.min_us)
        };
        self.max = self.max.max(r.max_us);
        self.sum += r.avg_us * r.samples as f64;
        self.n += r.samples;
    }

    fn summary(&self) -> Option<RttSummary> {
        (self.n > 0).then(|| RttSummary {
            min_us: self.min,
            avg_us: self.sum / self.n as f64,
            max_us: self.max,
            median_us: None,
            samples: self.n,
        })
    }

    fn of<'a>(it: impl Iterator<Item = &'a RttSummary>) -> Option<RttSummary> {
        let mut agg = RttAgg::default();
        it.for_each(|r| agg.add(r));
        agg.summary()
    }
}

/// Per-stream whole-test state of the client's reporter.
#[derive(Default, Clone)]
struct StreamTotal {
    kernel: RttAgg,
    block: RttAgg,
    retransmits: Option<u64>,
    last: Option<TcpSample>,
    /// The largest congestion window at an interval's end.
    max_cwnd: Option<u64>,
    starved_intervals: u32,
    /// Runs of intervals in which this stream read nothing while others did.
    stalls: diagnosis::StallLog,
    /// Bytes received and sent in `-O`'s omitted intervals.
    omitted_received: u64,
    omitted_sent: u64,
    /// `-u`: the sequences the receiver saw sent in the omitted intervals (received and
    /// lost): UDP's omit boundary is this sequence, not a time on each end's clock.
    omitted_seqs: u64,
    /// `-u`: datagrams received (`packets`), out of order, duplicated, dropped by the
    /// receiver's socket, and the last jitter, over the measured intervals.
    udp: Option<UdpFigures>,
}

/// Everything the client's reporter accumulates across intervals.
#[derive(Clone)]
struct Totals {
    streams: Vec<StreamTotal>,
    intervals: u32,
    /// Runs of intervals in which no stream read anything.
    stalls: diagnosis::StallLog,
    /// A test cut short before the sender reported any interval past `-O`'s seconds: the
    /// totals are the receiver's alone, and the sender's figures are unknown (not zero).
    sender_silent: bool,
}

impl Totals {
    fn new(streams: usize) -> Self {
        Totals {
            streams: vec![StreamTotal::default(); streams],
            intervals: 0,
            stalls: diagnosis::StallLog::whole_test(),
            sender_silent: false,
        }
    }
}

/// One direction's halves waiting to be joined, and its totals.
struct Direction {
    reverse: bool,
    /// `-u`: receiver rows carry every stream's datagram counts.
    udp: bool,
    cutter: IntervalCutter,
    /// Local batches still coming.
    open: bool,
    /// Sender intervals (with the cores' counters read when a local one closed, `--cpu`).
    senders: BTreeMap<u32, (ClosedInterval, Option<Vec<cpu::CoreTicks>>)>,
    receivers: BTreeMap<u32, ReceiverRow>,
    next: u32,
    totals: Totals,
    /// What the receiver's rows held so far (the CPU's bytes of a cut-short test).
    rows_received: Vec<u64>,
    /// The receiver's and the sender's bytes in joined intervals, and where the last
    /// joined one ended.
    joined_received: Vec<u64>,
    joined_sent: Vec<u64>,
    joined_until_us: Option<u64>,
    /// The last of `-O`'s omitted intervals the local cutter closed.
    omitted_through: Option<u32>,
}

impl Direction {
    /// A test cut short: each stream's sent and received bytes and their span, both over
    /// the joined intervals. This end's sender wrote on past the receiver's last row (the
    /// server died at 1.5 s; its last row ended at 1.0); counting that against the rows'
    /// span made "sent" 59.8 Gbit/s on a 40 Gbit/s host. UDP's loss is sent less
    /// received, so both must cover the same intervals too.
    fn cut_short_totals(&self) -> Option<(Vec<u64>, Vec<u64>, u64)> {
        let until = self.joined_until_us?;
        let received = self.joined_received.clone();
        // TCP delivers in order: every byte read was written. The far sender's count is
        // its report, on its own clock, which the receiver's row (cut on this clock at
        // the same interval) can pass by a few blocks (a Ctrl-C of -R read 917504 bytes
        // more than "sender wrote"): the sender wrote at least what was read. A silent
        // sender's count stays unknown (0, with `sender_silent`), not made up.
        let sent = match self.udp || self.totals.sender_silent {
            true => self.joined_sent.clone(),
            false => self
                .joined_sent
                .iter()
                .zip(&received)
                .map(|(&s, &r)| s.max(r))
                .collect(),
        };
        Some((sent, received, until))
    }

    fn new(feed_reverse: bool, cutter: IntervalCutter, streams: usize, udp: bool) -> Self {
        Direction {
            reverse: feed_reverse,
            udp,
            cutter,
            open: true,
            senders: BTreeMap::new(),
            receivers: BTreeMap::new(),
            next: 0,
            totals: Totals::new(streams),
            rows_received: vec![0; streams],
            joined_received: vec![0; streams],
            joined_sent: vec![0; streams],
            joined_until_us: None,
            omitted_through: None,
        }
    }

    fn add_row(&mut self, row: ReceiverRow) {
        for (sum, bytes) in self.rows_received.iter_mut().zip(&row.bytes) {
            *sum += bytes;
        }
        self.receivers.insert(row.index, row);
    }

    fn add_sender(&mut self, iv: ClosedInterval, cores: Option<Vec<cpu::CoreTicks>>) {
        self.senders.insert(iv.index, (iv, cores));
    }

    /// Moves what the local cutter closed to its half.
    fn pop_local(&mut self, cores: &mut impl FnMut() -> Option<Vec<cpu::CoreTicks>>) {
        while let Some(iv) = self.cutter.pop_ready() {
            if iv.omitted {
                self.omitted_through = Some(iv.index);
            }
            if self.reverse {
                self.add_row(receiver_row(&iv, self.udp));
            } else {
                self.add_sender(iv, cores());
            }
        }
    }

    /// A test cut short: the receiver's rows whose sender half never came (the sender
    /// vanished before it reported them) are still what the receiver measured, so they are
    /// printed, each joined with a sender half that holds nothing (no bytes, RTT or
    /// `TCP_INFO` made up). They count in the totals only when the sender reported no
    /// interval past `-O`'s seconds ([`Totals::sender_silent`]); otherwise they are marked
    /// `uncounted` and the totals end with the sender's last report, so both ends' counts
    /// cover the same span.
    fn join_without_senders(&mut self) -> Vec<IntervalReport> {
        if !self.reverse {
            // This end sends: its own halves are all in once its batches end.
            return Vec::new();
        }
        let missing: Vec<(u32, u64, u64)> = self
            .receivers
            .range(self.next..)
            .filter(|(k, _)| !self.senders.contains_key(k))
            .map(|(&k, r)| (k, r.begin_us, r.end_us))
            .collect();
        if missing.is_empty() {
            return Vec::new();
        }
        for &(index, begin_us, end_us) in &missing {
            let iv = ClosedInterval {
                index,
                omitted: self.omitted_through.is_some_and(|o| index <= o),
                begin_ns: begin_us * 1000,
                end_ns: end_us * 1000,
                streams: vec![StreamSlice::default(); self.rows_received.len()],
            };
            self.senders.insert(index, (iv, None));
        }
        // Silent: no interval past -O's omitted seconds came from the sender.
        self.totals.sender_silent = self.totals.intervals == 0;
        let counted = self.totals.sender_silent;
        self.joined(counted).into_iter().map(|(r, _)| r).collect()
    }

    /// The next intervals whose both halves are in, joined.
    fn ready(&mut self) -> Vec<(IntervalReport, Option<Vec<cpu::CoreTicks>>)> {
        self.joined(true)
    }

    /// [`Direction::ready`]; rows not `counted` are marked `uncounted` and joined against
    /// a copy of the totals, so nothing of theirs reaches the totals or `joined_*`.
    fn joined(&mut self, counted: bool) -> Vec<(IntervalReport, Option<Vec<cpu::CoreTicks>>)> {
        let mut out = Vec::new();
        let mut scratch = (!counted).then(|| self.totals.clone());
        let k = &mut self.next;
        while self.senders.contains_key(k) && self.receivers.contains_key(k) {
            let (Some((l, cores)), Some(r)) = (self.senders.remove(k), self.receivers.remove(k))
            else {
                break;
            };
            *k += 1;
            let mut report = join(&l, &r, scratch.as_mut().unwrap_or(&mut self.totals));
            report.reverse = self.reverse;
            report.uncounted = !counted;
            out.push((report, cores));
            if counted {
                for (sum, bytes) in self.joined_received.iter_mut().zip(&r.bytes) {
                    *sum += bytes;
                }
                for (sum, slice) in self.joined_sent.iter_mut().zip(&l.streams) {
                    *sum += slice.bytes;
                }
                self.joined_until_us = Some(r.end_us);
            }
        }
        out
    }
}

/// The joined interval to print next: the lowest index, the client's direction first,
/// held while another direction may still join an earlier one (unless the test `ended`).
fn next_in_order(
    pending: &mut [VecDeque<IntervalReport>],
    dirs: &[Direction],
    ended: bool,
) -> Option<IntervalReport> {
    let (k, d) = pending
        .iter()
        .enumerate()
        .filter_map(|(d, q)| q.front().map(|r| (r.index, d)))
        .min()?;
    let waits =
        |e: usize| pending[e].is_empty() && (dirs[e].next < k || (dirs[e].next == k && e < d));
    if !ended && (0..dirs.len()).any(|e| e != d && waits(e)) {
        return None;
    }
    pending[d].pop_front()
}

/// A receiver's closed interval as the row it sends: bytes per stream over its span.
/// With `udp`, every stream has its datagram counts, zeros for one that has received
/// nothing yet (the rows stay in stream order).
pub(crate) fn receiver_row(iv: &ClosedInterval, udp: bool) -> ReceiverRow {
    ReceiverRow {
        index: iv.index,
        begin_us: iv.begin_ns / 1000,
        end_us: iv.end_ns / 1000,
        bytes: iv.streams.iter().map(|s| s.bytes).collect(),
        udp: match udp {
            true => iv
                .streams
                .iter()
                .map(|s| s.udp.unwrap_or_default())
                .collect(),
            false => Vec::new(),
        },
    }
}

/// The client's reporter: for each direction, cut this end's records, join them with the
/// server's half by interval index, print each interval as soon as both halves are in,
/// then each direction's summary.
pub(crate) fn run_reporter(
    header: Header,
    feeds: Vec<Feed>,
    remote: Receiver<RemoteEvent>,
    out: Box<dyn Formatter>,
    output: Output,
) -> Result<ClientTotals> {
    let (streams, udp) = (header.streams as usize, header.udp);
    let mut r = Reporter::new(header, out, output);
    let mut inputs = Vec::with_capacity(feeds.len());
    for f in feeds {
        r.dirs
            .push(Direction::new(f.reverse, f.cutter, streams, udp));
        r.pending.push(VecDeque::new());
        inputs.push((f.batches, f.free));
    }
    let never = crossbeam_channel::never();
    // A direction's batches while its threads send them; a closed channel is always
    // ready, so once it is closed the select waits on `never` instead (else it spins).
    let batches = |dirs: &[Direction], i: usize| match dirs.get(i).is_some_and(|d| d.open) {
        true => inputs.get(i).map_or(&never, |(rx, _)| rx),
        false => &never,
    };
    let on_batch = |r: &mut Reporter, i: usize, msg: std::result::Result<Batch, _>| match msg {
        Ok(batch) => {
            r.dirs[i].cutter.add(&batch);
            let _ = inputs[i].1.try_send(batch);
        }
        Err(_) => r.streams_ended(i),
    };
    while r.remote_open || r.dirs.iter().any(|d| d.open) {
        let (b0, b1) = (batches(&r.dirs, 0), batches(&r.dirs, 1));
        select! {
            recv(b0) -> msg => on_batch(&mut r, 0, msg),
            recv(b1) -> msg => on_batch(&mut r, 1, msg),
            recv(remote) -> msg => match msg {
                Ok(event) => r.event(event),
                Err(_) => r.remote_open = false,
            },
        }
        r.cut();
    }
    Ok(r.finish())
}

/// The client's reporter's state: every direction's halves and totals, what the other
/// threads said of the test, and the formatter it alone writes to.
struct Reporter {
    header: Header,
    dirs: Vec<Direction>,
    /// Joined intervals per direction, printed in interval order across directions.
    pending: Vec<VecDeque<IntervalReport>>,
    out: Box<dyn Formatter>,
    output: Output,
    /// Every write so far worked: after a failed one nothing more is written.
    output_ok: bool,
    remote_open: bool,
    done: Option<ReceiverDone>,
    local_cpu: Option<CpuReport>,
    local_kernel: Option<KernelReport>,
    failed: Option<String>,
    cut_short: bool,
    /// A signal's live line, said once the span of the totals is known.
    interrupted: Option<(f64, String)>,
    /// With --cpu: the cores' counters where the last interval ended.
    prev_cores: Option<Vec<cpu::CoreTicks>>,
}

impl Reporter {
    /// Writes the header; the caller adds the directions.
    fn new(header: Header, mut out: Box<dyn Formatter>, output: Output) -> Self {
        let output_ok = output.check(out.header(&header));
        Reporter {
            prev_cores: header.cpu_intervals.then(cpu::cores),
            header,
            dirs: Vec::new(),
            pending: Vec::new(),
            out,
            output,
            output_ok,
            remote_open: true,
            done: None,
            local_cpu: None,
            local_kernel: None,
            failed: None,
            cut_short: false,
            interrupted: None,
        }
    }

    /// Writes through the formatter while the output works; false once it does not.
    fn write(&mut self, w: impl FnOnce(&mut dyn Formatter) -> io::Result<()>) -> bool {
        if self.output_ok {
            self.output_ok = self.output.check(w(self.out.as_mut()));
        }
        self.output_ok
    }

    /// Direction `i`'s stream threads are gone: its cutter closes what it holds.
    fn streams_ended(&mut self, i: usize) {
        self.dirs[i].open = false;
        self.dirs[i].cutter.finish();
    }

    /// The test stops short: no cutter makes an interval past its last record.
    fn stop(&mut self) {
        self.cut_short = true;
        self.dirs.iter_mut().for_each(|d| d.cutter.stop());
    }

    fn event(&mut self, event: RemoteEvent) {
        match event {
            RemoteEvent::Row(row) => {
                if let Some(d) = self.dirs.iter_mut().find(|d| !d.reverse) {
                    d.add_row(row);
                }
            }
            RemoteEvent::SenderInterval(iv) => {
                if let Some(d) = self.dirs.iter_mut().find(|d| d.reverse) {
                    d.add_sender(iv, None);
                }
            }
            RemoteEvent::Done(d) => self.done = Some(*d),
            RemoteEvent::LocalCpu(c) => self.local_cpu = Some(c),
            RemoteEvent::LocalKernel(k) => self.local_kernel = Some(k),
            RemoteEvent::Failed(e) => self.failed = Some(e),
            RemoteEvent::CutShort { at, say } => {
                self.stop();
                // Said after the last row, when the span the totals cover is known.
                if let Some(say) = say {
                    self.interrupted = Some((at, say));
                }
            }
            RemoteEvent::StreamFailed { at, error } => {
                // The others stop with it: the totals are over what was measured.
                self.stop();
                self.write(|o| o.stream_failed(at, &error));
            }
        }
    }

    /// After every event: what the cutters closed joins its other half, and every joined
    /// interval whose turn it is is printed.
    fn cut(&mut self) {
        let prev_cores = &mut self.prev_cores;
        for (i, d) in self.dirs.iter_mut().enumerate() {
            // With --cpu: the cores' counters when the first direction's local interval
            // closed, the closest this thread gets to the interval's end.
            let mut cores = || (i == 0 && prev_cores.is_some()).then(cpu::cores);
            d.pop_local(&mut cores);
            for (mut report, cores) in d.ready() {
                if let (Some(prev), Some(now)) = (prev_cores.as_mut(), cores) {
                    report.cores = Some(cpu::core_loads(prev, &now));
                    *prev = now;
                }
                self.pending[i].push_back(report);
            }
        }
        let ended = !self.remote_open && self.dirs.iter().all(|d| !d.open);
        if ended && self.cut_short {
            for (i, d) in self.dirs.iter_mut().enumerate() {
                self.pending[i].extend(d.join_without_senders());
            }
        }
        while let Some(report) = next_in_order(&mut self.pending, &self.dirs, ended) {
            self.write(|o| o.interval(&report));
        }
    }

    /// Direction `d`'s sent and received bytes per stream and their span: the server's
    /// totals, or (a test cut short) the joined rows so far, both over the same span.
    fn totals_of(&self, d: &Direction) -> Option<(Vec<u64>, Vec<u64>, u64)> {
        match (&self.done, self.cut_short) {
            (_, true) => d.cut_short_totals(),
            (Some(done), false) => Some(match d.reverse {
                true => (
                    done.sent.clone(),
                    d.cutter.totals().to_vec(),
                    d.cutter.last_record_ns() / 1000,
                ),
                false => (
                    d.cutter.totals().to_vec(),
                    done.bytes.clone(),
                    done.elapsed_us,
                ),
            }),
            (None, false) => None,
        }
    }

    /// A test cut short inside `-O`'s seconds measured nothing that counts: no totals.
    fn counts(&self, elapsed_us: u64) -> bool {
        !(self.failed.is_some() && elapsed_us as f64 / 1e6 <= self.header.omit_s)
    }

    /// The test is over: each direction's totals, the whole test's counters with the
    /// first, the server's output, then the totals printed.
    fn finish(mut self) -> ClientTotals {
        if let Some((at, say)) = self.interrupted.take() {
            self.say_interrupted(at, &say);
        }
        let (mut summaries, sent, received) = self.summaries();
        // A test cut short: the CPU ran to its end, so every row the receivers reported
        // counts (rows past the totals' span included).
        let all_bytes: u64 = match self.cut_short {
            true => self.dirs.iter().flat_map(|d| &d.rows_received).sum(),
            false => summaries
                .iter()
                .map(|s| s.sum_received.bytes + s.omitted.received_bytes)
                .sum(),
        };
        if let Some(s) = summaries.first_mut() {
            self.add_whole_test(s, all_bytes);
        }
        if let Some(text) = self.done.as_mut().and_then(|d| d.server_output.take()) {
            self.write(|o| o.server_output(&text));
        }
        // A test cut short says why after its last totals.
        let failed = self.failed.take();
        let last = summaries.len().saturating_sub(1);
        for (i, s) in summaries.iter().enumerate() {
            let written = self.write(|o| match &failed {
                Some(e) if i == last => o.cut_short(s, e),
                _ => o.summary(s),
            });
            if !written {
                break;
            }
        }
        if let (true, Some(e)) = (summaries.is_empty(), &failed) {
            self.write(|o| o.failed(e));
        }
        ClientTotals {
            sent,
            received: (self.done.is_some() && !self.cut_short).then_some(received),
            summaries,
        }
    }

    /// A signal's live line, `say` with the span the totals below use (the earliest
    /// direction's).
    fn say_interrupted(&mut self, at: f64, say: &str) {
        let until = self
            .dirs
            .iter()
            .filter_map(|d| self.totals_of(d))
            .map(|t| t.2)
            .filter(|&u| self.counts(u))
            .min();
        let line = match until {
            // A peer that reports late: the rows are this end's counts (its own come only
            // with the results, which a test cut short does not get).
            Some(until) if self.header.peer.reports_late() => format!(
                "{say}; the totals below are this end's counts up to {:.3} s",
                until as f64 / 1e6
            ),
            Some(until) => format!(
                "{say}; the totals below are over the receiver's rows up to {:.3} s{}",
                until as f64 / 1e6,
                match self.header.udp {
                    true => " (datagrams by the receiver's sequence numbers)",
                    false => "",
                }
            ),
            None if at <= self.header.omit_s => {
                format!("{say}; no totals: it stopped within -O's omitted seconds")
            }
            None => format!("{say}; no totals: it stopped before the receiver's first row"),
        };
        self.write(|o| o.stream_failed(at, &line));
    }

    /// Each direction's summary that counts, and every stream's sent and received bytes.
    fn summaries(&mut self) -> (Vec<Summary>, Vec<u64>, Vec<u64>) {
        let (mut summaries, mut sent_all, mut received_all) = (Vec::new(), Vec::new(), Vec::new());
        let failed = self.failed.is_some();
        for i in 0..self.dirs.len() {
            let Some((sent, received, elapsed_us)) = self.totals_of(&self.dirs[i]) else {
                continue;
            };
            sent_all.extend(&sent);
            received_all.extend(&received);
            if !self.counts(elapsed_us) {
                continue;
            }
            let d = &mut self.dirs[i];
            if let (Some(done), false, true) = (&self.done, self.cut_short, d.reverse) {
                // A far sender whose rows had no retransmits (a peer that reports late)
                // gave its count with the totals.
                for (t, &r) in d.totals.streams.iter_mut().zip(&done.retransmits) {
                    t.retransmits = t.retransmits.or(r);
                }
            }
            let (header, reverse) = (&self.header, d.reverse);
            let mut s = summarize(
                header,
                &sent,
                &received,
                elapsed_us,
                &mut d.totals,
                failed,
                reverse,
            );
            // Cut short against a peer that reports late: the rows are this end's counts,
            // and the peer's comes only with its results. Its side is unknown, not this
            // end's again.
            if failed && header.peer.reports_late() {
                match reverse {
                    false => s.sum_received = SideTotal::unknown(),
                    true => s.sum_sent = SideTotal::unknown(),
                }
            }
            summaries.push(s);
        }
        (summaries, sent_all, received_all)
    }

    /// Both ends' CPU and kernel counters cover the whole test: with the first direction's
    /// totals `s` (`end`, where iperf3's readers look for `cpu_utilization_percent`), set
    /// against every direction's bytes.
    fn add_whole_test(&mut self, s: &mut Summary, all_bytes: u64) {
        let remote_cpu = self.done.as_ref().and_then(|d| d.cpu.clone());
        if let Some(mut local) = self.local_cpu.take() {
            if self.header.engine == crate::choices::Engine::Single {
                local = local.on_one_thread(cpu::MUX_THREAD);
            }
            add_cpu(s, &self.header, local, remote_cpu, all_bytes);
        }
        if let Some(local) = self.local_kernel.take() {
            let remote = self.done.as_ref().and_then(|d| d.kernel);
            // The kernel's drops are the receiver's; the report names them by role.
            let (sender, receiver) = match s.reverse {
                false => (local, remote),
                true => match remote {
                    Some(r) => (r, Some(local)),
                    None => (local, None),
                },
            };
            add_kernel(s, sender, receiver);
        }
    }
}

fn summary_of(r: &RttStats) -> RttSummary {
    RttSummary {
        min_us: f64::from(r.min_us),
        avg_us: r.avg_us,
        max_us: f64::from(r.max_us),
        median_us: r.median_us.map(f64::from),
        samples: u64::from(r.samples),
    }
}

fn bps(bytes: u64, secs: f64) -> f64 {
    crate::units::mbps(bytes, secs) * 1e6
}

/// A stream row from the receiver's bytes and the sender's view of the same span.
fn stream_row(
    stream: u16,
    start: f64,
    end: f64,
    bytes: u64,
    sent_bytes: u64,
    last: Option<TcpSample>,
) -> StreamRow {
    StreamRow {
        stream,
        start,
        end,
        seconds: end - start,
        bytes,
        bits_per_second: bps(bytes, end - start),
        sent_bytes,
        retransmits: None,
        snd_cwnd: last.map(|l| l.cwnd_bytes),
        rtt: None,
        rttvar: last.map(|l| l.rttvar_us),
        min_rtt: last.map(|l| l.min_rtt_us).filter(|&v| v > 0),
        delivery_rate: last.map(|l| l.delivery_rate_bps),
        pacing_rate: last.map(|l| l.pacing_rate_bps),
        notsent_bytes: last.map(|l| l.notsent_bytes),
        sndbuf: last.map(|l| l.sndbuf_bytes).filter(|&v| v > 0),
        kernel_rtt: None,
        block_rtt: None,
        udp: None,
        sent: None,
    }
}

fn join(local: &ClosedInterval, remote: &ReceiverRow, totals: &mut Totals) -> IntervalReport {
    let start = remote.begin_us as f64 / 1e6;
    let end = remote.end_us as f64 / 1e6;
    let mut rows = Vec::with_capacity(local.streams.len());
    // Starved: read nothing while another stream read (fairness::of's rule).
    let moved = remote.bytes.iter().any(|&b| b > 0);
    for (s, slice) in local.streams.iter().enumerate() {
        let bytes = remote.bytes.get(s).copied().unwrap_or(0);
        let mut row = stream_row(s as u16, start, end, bytes, slice.bytes, slice.last);
        row.retransmits = slice.retransmits;
        row.kernel_rtt = slice.srtt.as_ref().map(summary_of);
        row.rtt = row.kernel_rtt.map(|k| k.avg_us);
        row.block_rtt = slice.block_rtt.as_ref().map(summary_of);
        let udp = remote.udp.get(s);
        row.udp = udp.map(|u| UdpFigures {
            packets: u.packets + u.lost,
            lost_packets: u.lost,
            lost_percent: u.lost_percent,
            out_of_order: u.out_of_order,
            duplicates: u.duplicates,
            jitter_ms: u.jitter_ms,
            rxq_drops: u.rxq_drops,
        });
        if let Some(t) = totals.streams.get_mut(s) {
            if local.omitted {
                t.omitted_received += bytes;
                t.omitted_sent += slice.bytes;
                t.omitted_seqs += udp.map_or(0, |u| u.packets + u.lost);
                rows.push(row);
                continue;
            }
            if let Some(k) = &row.kernel_rtt {
                t.kernel.add(k);
            }
            if let Some(b) = &row.block_rtt {
                t.block.add(b);
            }
            if let Some(retr) = slice.retransmits {
                *t.retransmits.get_or_insert(0) += retr;
            }
            t.last = slice.last.or(t.last);
            t.max_cwnd = t.max_cwnd.max(row.snd_cwnd);
            t.starved_intervals += u32::from(bytes == 0 && moved);
            if let Some(u) = udp {
                let d = t.udp.get_or_insert_default();
                d.packets += u.packets;
                d.lost_packets += u.lost;
                d.out_of_order += u.out_of_order;
                d.duplicates += u.duplicates;
                d.rxq_drops += u.rxq_drops;
                d.jitter_ms = u.jitter_ms;
            }
        }
        rows.push(row);
    }
    totals.intervals += u32::from(!local.omitted);
    let sum = sum_row(&rows, start, end);
    if !local.omitted {
        totals.stalls.step(start, end, sum.bytes == 0, false);
        for (t, row) in totals.streams.iter_mut().zip(&rows) {
            t.stalls
                .step(start, end, row.bytes == 0, sum.bytes > row.bytes);
        }
    }
    IntervalReport {
        index: local.index,
        omitted: local.omitted,
        uncounted: false,
        streams: rows,
        sum,
        cores: None,
        reverse: false,
    }
}

/// The sum of stream rows over one span: bytes, retransmits and congestion windows add;
/// RTTs combine weighted by samples, min RTT is the lowest; fairness over the streams' bytes.
fn sum_row(rows: &[StreamRow], start: f64, end: f64) -> SumRow {
    let bytes: u64 = rows.iter().map(|r| r.bytes).sum();
    let byte_counts: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
    SumRow {
        sum: true,
        start,
        end,
        seconds: end - start,
        bytes,
        bits_per_second: bps(bytes, end - start),
        sent_bytes: rows.iter().map(|r| r.sent_bytes).sum(),
        retransmits: rows
            .iter()
            .filter_map(|r| r.retransmits)
            .reduce(|a, b| a + b),
        snd_cwnd: rows.iter().filter_map(|r| r.snd_cwnd).reduce(|a, b| a + b),
        min_rtt: rows.iter().filter_map(|r| r.min_rtt).min(),
        block_rtt: RttAgg::of(rows.iter().filter_map(|r| r.block_rtt.as_ref())),
        kernel_rtt: RttAgg::of(rows.iter().filter_map(|r| r.kernel_rtt.as_ref())),
        fairness: fairness::of(&byte_counts),
        udp: UdpFigures::sum(rows.iter().filter_map(|r| r.udp.as_ref())),
    }
}

/// Adds both ends' CPU and the efficiency figures to the summary. On one host the cores
/// are counted once; in one process (`--loopback`, and `pinperf lab`, whose ends sit in
/// different network namespaces of one process, so the peer is not a loopback address)
/// so is the process time, and one process is one host: its cores are counted once too.
fn add_cpu(
    summary: &mut Summary,
    header: &Header,
    local: CpuReport,
    remote: Option<CpuReport>,
    whole_bytes: u64,
) {
    let one_host = header.same_host || header.same_process;
    // In one process both ends' process times are the same figure: said once, as the
    // host's, so a reader adding local and remote does not count it twice.
    let remote_process = remote.as_ref().filter(|_| !header.same_process);
    summary.cpu_utilization_percent = Some(CpuUtilization {
        host_total: local.host_total,
        host_user: local.host_user,
        host_system: local.host_system,
        remote_total: remote_process.map(|r| r.host_total),
        remote_user: remote_process.map(|r| r.host_user),
        remote_system: remote_process.map(|r| r.host_system),
    });
    // The far end's figure, or 0 where this end's counts it already (`counted`).
    let far = |counted: bool, f: &dyn Fn(&CpuReport) -> f64| {
        remote.as_ref().filter(|_| !counted).map_or(0.0, f)
    };
    let busy_cores = local.busy_cores() + far(one_host, &CpuReport::busy_cores);
    // The cores' busy time, over each end's own CPU span (which runs past the rate's span
    // by UDP's settle time, or to where a test cut short stopped).
    let busy_core_seconds =
        local.busy_cores() * local.seconds + far(one_host, &|r| r.busy_cores() * r.seconds);
    let process_s = |r: &CpuReport| r.process.total_us() as f64 / 1e6;
    let cpu_seconds = process_s(&local) + far(header.same_process, &process_s);
    // CPU is measured over the whole run, `-O`'s seconds and every direction included: so
    // are the bytes (`whole_bytes`), set against the busy core-seconds of that same span
    // (against the rate's span, a UDP test looked 1.4x as efficient as it was, and a test
    // stopped early 14x: 468 Gbit/s per busy core at 0.336 CPU-seconds per GB).
    let gb = whole_bytes as f64 / 1e9;
    summary.cpu = Some(CpuSummary {
        local,
        remote,
        same_host: one_host,
        same_process: header.same_process,
        busy_cores,
        gbps_per_busy_core: (busy_core_seconds > 0.0).then(|| gb * 8.0 / busy_core_seconds),
        cpu_seconds_per_gb: (gb > 0.0).then(|| cpu_seconds / gb),
    });
}

/// Adds both ends' kernel counters (once when both ends share a namespace) and, when the
/// receiver's kernel dropped segments, the diagnosis that says so.
fn add_kernel(s: &mut Summary, local: KernelReport, remote: Option<KernelReport>) {
    let shared = remote.is_some_and(|r| r.netns.is_some() && r.netns == local.netns);
    let k = KernelSummary {
        sender: local,
        receiver: if shared { None } else { remote },
        shared_namespace: shared,
    };
    let retransmits = s.sum_sent.retransmits.unwrap_or(0);
    let streams = s.streams.len();
    diagnosis::file(s, diagnosis::kernel_drops(&k, retransmits, streams));
    if s.sum.udp.is_some() {
        diagnosis::file(s, diagnosis::udp_kernel_drops(&k));
    }
    s.kernel = Some(k);
}

/// The whole test's summary, over the test's span: from `-O`'s end (0 without it) to the
/// later of the planned end (`-O` + `-t`) and the last byte. A test whose data stopped
/// early (a paused sender, a stalled path) is not averaged over only the seconds that
/// moved data, and one that drained past `-t` is averaged over the drain too.
fn summarize(
    header: &Header,
    sent: &[u64],
    received: &[u64],
    elapsed_us: u64,
    totals: &mut Totals,
    cut_short: bool,
    reverse: bool,
) -> Summary {
    let start = header.omit_s;
    // A test cut short (a failure, a signal) spans what it ran, not what it planned; one
    // with a budget (-n, -k) what it took to send it.
    let planned = if cut_short || header.budget.is_some() {
        start
    } else {
        header.run_time_s()
    };
    let end = (elapsed_us as f64 / 1e6).max(planned);
    let whole = Whole {
        header,
        start,
        end,
        cut_short,
        reverse,
    };
    whole.settle_omitted(totals);
    totals.stalls.finish();
    totals.streams.iter_mut().for_each(|t| t.stalls.finish());
    let at = |v: &[u64], s: usize| v.get(s).copied().unwrap_or(0);
    let rows: Vec<StreamRow> = totals
        .streams
        .iter()
        .enumerate()
        .map(|(s, t)| {
            whole.stream_total(s, t, (at(sent, s), at(received, s)), totals.sender_silent)
        })
        .collect();
    let sum = sum_row(&rows, start, end);
    let findings = whole.findings(totals, &rows, &sum);
    whole.summary(totals, rows, sum, findings)
}

/// What the steps of [`summarize`] share: the test, the span of its totals, how it ended.
struct Whole<'a> {
    header: &'a Header,
    start: f64,
    end: f64,
    cut_short: bool,
    reverse: bool,
}

impl Whole<'_> {
    /// Where `-O`'s omitted bytes end on the sender's side of each stream.
    fn settle_omitted(&self, totals: &mut Totals) {
        let header = self.header;
        if header.udp && !self.cut_short {
            // -O's end by sequence: a datagram sent before the sender's boundary but read
            // after the receiver's was counted received and not sent, hiding that much loss.
            let datagram = header.block_bytes.max(1);
            for t in &mut totals.streams {
                t.omitted_sent = t.omitted_seqs * datagram;
            }
        } else if !header.udp {
            // -O's end at the same byte of each stream: the receiver's, where the totals
            // start. Cut on the sender's clock, what its socket buffers held then was counted
            // sent inside -O and received after it, and the totals read more received than
            // sent (by up to the buffers and the window: 16 MB at -w 8M).
            for t in &mut totals.streams {
                t.omitted_sent = t.omitted_received;
            }
        }
    }

    /// Stream `s`'s row over the whole span, from its `(sent, received)` bytes.
    fn stream_total(
        &self,
        s: usize,
        t: &StreamTotal,
        (sent, bytes): (u64, u64),
        sender_silent: bool,
    ) -> StreamRow {
        let (header, start, end) = (self.header, self.start, self.end);
        let mut row = stream_row(
            s as u16,
            start,
            end,
            bytes.saturating_sub(t.omitted_received),
            sent.saturating_sub(t.omitted_sent),
            t.last,
        );
        // UDP cut short: what the sender sent over the receiver's rows is what their
        // sequence numbers say (its own last row runs on to when it stopped, past the
        // receiver's: "sender wrote" one datagram more than "sender sent").
        // Not when the receiver saw none (they say nothing then: a path that let none
        // through keeps the sender's count), nor when the sender never reported (its
        // count stays unknown, not made up).
        if let (true, true, Some(got)) = (header.udp, self.cut_short, t.udp)
            && got.packets > 0
            && !sender_silent
        {
            row.sent_bytes = (got.packets + got.lost_packets) * header.block_bytes.max(1);
        }
        row.retransmits = t.retransmits;
        row.kernel_rtt = t.kernel.summary();
        row.rtt = row.kernel_rtt.map(|k| k.avg_us);
        row.block_rtt = t.block.summary();
        row.sent = Some(model::SentTotal {
            bits_per_second: bps(row.sent_bytes, end - start),
            max_snd_cwnd: t.max_cwnd,
        });
        if header.udp {
            row.udp = self.datagrams(row.sent_bytes, t.udp);
        }
        row
    }

    /// `-u`: a stream's datagrams over the span, from what the sender sent and the
    /// receiver `got`.
    fn datagrams(&self, sent_bytes: u64, got: Option<UdpFigures>) -> Option<UdpFigures> {
        // UDP's totals settle on the sender's count: every datagram it sent and the
        // receiver never got is lost, the tail a dead path swallowed included.
        if !self.cut_short {
            let got = got.unwrap_or_default();
            let sent = sent_bytes / self.header.block_bytes.max(1);
            let lost = sent.saturating_sub(got.packets);
            return Some(UdpFigures {
                packets: sent,
                lost_packets: lost,
                lost_percent: model::percent(lost, sent),
                ..got
            });
        }
        // A test cut short settles on the receiver's rows it spans: what their sequence
        // numbers say was sent, received and lost (the sender's count per interval runs
        // on its own clock, so datagrams in flight across the last row's end would count
        // as lost, or as received and not sent). No receiver's row (a peer that reports
        // late sends them with its results, which a test cut short never gets): unknown,
        // not zero.
        got.map(|got| {
            let sent = got.packets + got.lost_packets;
            UdpFigures {
                packets: sent,
                lost_percent: model::percent(got.lost_packets, sent),
                ..got
            }
        })
    }

    /// The checks on the whole test's rows, in the order text prints them.
    fn findings(&self, totals: &Totals, rows: &[StreamRow], sum: &SumRow) -> Vec<Finding> {
        let (header, seconds) = (self.header, self.end - self.start);
        let starved: Vec<u32> = totals.streams.iter().map(|t| t.starved_intervals).collect();
        let stream_stalls: Vec<diagnosis::StallLog> =
            totals.streams.iter().map(|t| t.stalls.clone()).collect();
        let mut diagnosis = diagnosis::diagnose(&diagnosis::Evidence {
            header,
            streams: rows,
            starved_intervals: &starved,
            intervals: totals.intervals,
            rate_bps: sum.bits_per_second,
            test_stalls: &totals.stalls,
            stream_stalls: &stream_stalls,
        });
        diagnosis.extend(diagnosis::unfair_shares(&sum.fairness));
        if let Some(u) = &sum.udp {
            diagnosis.extend(diagnosis::udp_receiver_drops(u, header, self.reverse));
            // A test in which nothing moved for a while (a paused sender) is said so above;
            // its senders' average is no measure of what their host could keep up with.
            if !self.cut_short && totals.stalls.count == 0 {
                let per_stream = bps(sum.sent_bytes, seconds) / rows.len().max(1) as f64;
                diagnosis.extend(diagnosis::udp_sender_short(per_stream, header));
            }
        }
        // What the senders still held unsent when they stopped writing (their last sample).
        let queued: u64 = rows
            .iter()
            .filter_map(|r| r.notsent_bytes)
            .map(u64::from)
            .sum();
        diagnosis.extend(diagnosis::long_drain(
            header.omit_s,
            header.duration_s,
            self.end,
            queued,
            header.peer.reports_late() && !self.reverse,
        ));
        diagnosis
    }

    /// The summary of the stream `rows`, their `sum` and the `findings` on them.
    fn summary(
        &self,
        totals: &Totals,
        rows: Vec<StreamRow>,
        sum: SumRow,
        findings: Vec<Finding>,
    ) -> Summary {
        let (start, end) = (self.start, self.end);
        let side = |bytes: u64, retransmits: Option<u64>| SideTotal {
            start,
            end,
            seconds: end - start,
            bytes,
            bits_per_second: bps(bytes, end - start),
            retransmits,
            unknown: false,
        };
        let sent_bytes: u64 = rows.iter().map(|r| r.sent_bytes).sum();
        Summary {
            sum_sent: match totals.sender_silent {
                true => SideTotal::unknown(),
                false => side(sent_bytes, sum.retransmits),
            },
            sum_received: side(sum.bytes, None),
            fairness: TestFairness {
                totals: sum.fairness,
                starved_intervals: totals.streams.iter().map(|t| t.starved_intervals).sum(),
                stream_intervals: totals.intervals * rows.len() as u32,
            },
            streams: rows,
            sum,
            diagnosis: findings.iter().map(|f| f.words.clone()).collect(),
            findings: Some(findings),
            cpu_utilization_percent: None,
            cpu: None,
            kernel: None,
            cut_short: self.cut_short,
            sender_silent: totals.sender_silent,
            omitted: model::Omitted {
                seconds: start,
                sent_bytes: totals.streams.iter().map(|t| t.omitted_sent).sum(),
                received_bytes: totals.streams.iter().map(|t| t.omitted_received).sum(),
            },
            reverse: self.reverse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::cpu::{CoreLoad, CpuTime, ThreadTime};

    /// Two cores at `busy` percent each over 2 s, one second of process CPU.
    fn two_cores(busy: f64) -> CpuReport {
        CpuReport {
            seconds: 2.0,
            process: CpuTime {
                user_us: 100_000,
                sys_us: 900_000,
            },
            host_total: 50.0,
            host_user: 5.0,
            host_system: 45.0,
            streams: Vec::new(),
            cores: (0..2)
                .map(|cpu| CoreLoad {
                    cpu,
                    busy_percent: busy,
                    softirq_percent: 0.0,
                    idle_percent: 100.0 - busy,
                })
                .collect(),
            send_path: None,
        }
    }

    fn cpu_of(same_host: bool, same_process: bool) -> CpuSummary {
        let mut header = model::sample::header();
        header.same_host = same_host;
        header.same_process = same_process;
        let mut s = model::sample::summary();
        s.sum_received.bytes = 2_000_000_000;
        s.sum_received.bits_per_second = 8e9;
        (s.sum_received.start, s.sum_received.end) = (0.0, 2.0);
        add_cpu(
            &mut s,
            &header,
            two_cores(100.0),
            Some(two_cores(100.0)),
            2_000_000_000,
        );
        s.cpu.unwrap()
    }

    /// With `-O` the CPU covers the omitted seconds too; so must the bytes it is set against
    /// (review: `-O 2 -t 1` reported 2.5x the CPU-seconds per GB of `-t 1`).
    #[test]
    fn efficiency_counts_the_omitted_seconds_the_cpu_covers() {
        let header = model::sample::header();
        let mut s = model::sample::summary();
        (s.sum_received.start, s.sum_received.end) = (2.0, 3.0);
        s.sum_received.bytes = 1_000_000_000;
        s.omitted.received_bytes = 2_000_000_000;
        let mut whole_run = two_cores(100.0);
        whole_run.seconds = 3.0;
        add_cpu(&mut s, &header, whole_run, None, 3_000_000_000);
        let cpu = s.cpu.unwrap();
        // 3 GB in 3 s on 2 busy cores; the process's CPU over 3 GB.
        assert_eq!(cpu.gbps_per_busy_core, Some(4.0));
        assert_eq!(
            cpu.cpu_seconds_per_gb,
            Some(two_cores(100.0).process.total_us() as f64 / 1e6 / 3.0)
        );
    }

    /// The CPU runs past the rate's span (UDP's settle time, a test stopped early): Gbit/s
    /// per busy core is over the CPU's span too (review: a UDP test said 33.28 Gbit/s per
    /// busy core beside 0.323 CPU-seconds per GB, i.e. 24.8; a stopped one 468.62).
    #[test]
    fn efficiency_sets_bytes_against_the_cpu_s_own_span() {
        let header = model::sample::header();
        let mut s = model::sample::summary();
        (s.sum_received.start, s.sum_received.end) = (0.0, 1.0);
        s.sum_received.bytes = 1_000_000_000;
        // Two cores half busy over 1.25 s: 1.25 busy core-seconds for 8 Gbit.
        let mut cpu = two_cores(50.0);
        cpu.seconds = 1.25;
        add_cpu(&mut s, &header, cpu, None, 1_000_000_000);
        let cpu = s.cpu.unwrap();
        assert_eq!(cpu.busy_cores, 1.0);
        assert_eq!(cpu.gbps_per_busy_core, Some(6.4));
    }

    /// `pinperf lab` runs both ends in one process but different namespaces, so
    /// the peer is not loopback (`same_host` false) while `same_process` is true: its two
    /// cores were counted twice (busy cores 2.2 on a 2-core machine). One process is one
    /// host: the cores and the process time count once.
    #[test]
    fn one_process_counts_its_host_once() {
        let lab = cpu_of(false, true);
        assert_eq!(lab.busy_cores, 2.0);
        assert!(lab.same_host, "one process, one host");
        assert_eq!(lab.gbps_per_busy_core, Some(4.0));
        // 1 s of process CPU (counted once) for 2 GB.
        assert_eq!(lab.cpu_seconds_per_gb, Some(0.5));

        let loopback = cpu_of(true, true);
        assert_eq!(
            (loopback.busy_cores, loopback.cpu_seconds_per_gb),
            (2.0, Some(0.5))
        );

        // Two processes on one host: cores once, process times both.
        let same_host = cpu_of(true, false);
        assert_eq!(
            (same_host.busy_cores, same_host.cpu_seconds_per_gb),
            (2.0, Some(1.0))
        );

        // Two hosts: both ends' cores and process times.
        let two_hosts = cpu_of(false, false);
        assert!(!two_hosts.same_host);
        assert_eq!(
            (two_hosts.busy_cores, two_hosts.gbps_per_busy_core),
            (4.0, Some(2.0))
        );
    }

    /// `--engine single` divided its one thread's CPU evenly among the streams.
    /// Its report has one `stream-mux` thread with the time measured (put on the first
    /// stream by the engine), and every format prints that thread.
    #[test]
    fn the_single_engine_lists_its_one_thread() {
        let thread = |name: &str, user_us, sys_us| ThreadTime {
            name: name.into(),
            user_us,
            sys_us,
        };
        let mut measured = two_cores(100.0);
        measured.seconds = 1.0;
        measured.streams = vec![
            thread("stream-0", 10_000, 490_000),
            thread("stream-1", 0, 0),
        ];
        let mux = measured.on_one_thread(cpu::MUX_THREAD);
        assert_eq!(mux.streams, vec![thread("stream-mux", 10_000, 490_000)]);

        let mut s = model::sample::summary();
        s.cpu.as_mut().unwrap().local = mux;
        let mut text = Vec::new();
        format::text::TextFormatter::new(&mut text)
            .summary(&s)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("# CPU local threads (senders): stream-mux 50.0% (user 1.0, sys 49.0)\n"),
            "{text}"
        );
        let mut out = Vec::new();
        format::csv::CsvFormatter::new(&mut out)
            .summary(&s)
            .unwrap();
        let rows = format::csv::parse(&String::from_utf8(out).unwrap());
        let col = |name: &str| {
            format::csv::Record::NAMES
                .iter()
                .position(|c| *c == name)
                .unwrap()
        };
        let threads: Vec<_> = rows
            .iter()
            .filter(|r| r[0] == "cpu_thread" && r[col("side")] == "local")
            .map(|r| (r[col("thread")].as_str(), r[col("stream")].as_str()))
            .collect();
        assert_eq!(threads, [("stream-mux", "")]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["cpu"]["local"]["streams"][0]["name"], "stream-mux");
    }

    fn no_totals(streams: usize) -> Totals {
        Totals::new(streams)
    }

    /// A stream is starved in an interval when it read nothing while another read: a
    /// lone stream paced below a block per interval (-P 1 -b 1) was counted starved.
    #[test]
    fn starved_means_nothing_read_while_another_stream_read() {
        let joined = |bytes: &[u64]| {
            let local = ClosedInterval {
                index: 0,
                omitted: false,
                begin_ns: 0,
                end_ns: 1_000_000_000,
                streams: vec![StreamSlice::default(); bytes.len()],
            };
            let remote = ReceiverRow {
                index: 0,
                begin_us: 0,
                end_us: 1_000_000,
                bytes: bytes.to_vec(),
                udp: Vec::new(),
            };
            let mut t = no_totals(bytes.len());
            join(&local, &remote, &mut t);
            t.streams
                .iter()
                .map(|s| s.starved_intervals)
                .collect::<Vec<_>>()
        };
        assert_eq!(joined(&[0]), [0]);
        assert_eq!(joined(&[0, 0]), [0, 0]);
        assert_eq!(joined(&[0, 7]), [1, 0]);
    }

    /// A client paused from 1.3 s to 3.8 s of `-t 3` printed `#(**) 0.000 1.307
    /// 40119.231`: its data ended at 1.307 s. The totals span to the planned end, or to the
    /// last byte when that is later; -O moves both ends.
    #[test]
    fn totals_span_the_test_not_the_seconds_that_moved_data() {
        let mut h = model::sample::header();
        h.duration_s = 3.0;
        h.streams = 2;
        let bytes = vec![3_000_000_000, 1_000_000_000];
        let s = summarize(
            &h,
            &bytes,
            &bytes,
            1_307_000,
            &mut no_totals(2),
            false,
            false,
        );
        let cut = summarize(
            &h,
            &bytes,
            &bytes,
            1_307_000,
            &mut no_totals(2),
            true,
            false,
        );
        assert_eq!(cut.sum.end, 1.307, "a test cut short spans what it ran");
        for (start, end, seconds) in [
            (s.sum.start, s.sum.end, s.sum.seconds),
            (s.streams[1].start, s.streams[1].end, s.streams[1].seconds),
            (s.sum_sent.start, s.sum_sent.end, s.sum_sent.seconds),
            (
                s.sum_received.start,
                s.sum_received.end,
                s.sum_received.seconds,
            ),
        ] {
            assert_eq!((start, end, seconds), (0.0, 3.0, 3.0));
        }
        assert_eq!(s.sum.bits_per_second, 4e9 * 8.0 / 3.0);
        assert_eq!(s.streams[1].bits_per_second, 1e9 * 8.0 / 3.0);
        assert_eq!(s.sum_received.bits_per_second, 4e9 * 8.0 / 3.0);

        // A drain past the planned end counts to the last byte.
        let s = summarize(
            &h,
            &bytes,
            &bytes,
            4_000_000,
            &mut no_totals(2),
            false,
            false,
        );
        assert_eq!((s.sum.end, s.sum.bits_per_second), (4.0, 4e9 * 8.0 / 4.0));

        // -O 1 -t 3: from 1 s to 4 s.
        h.omit_s = 1.0;
        let s = summarize(
            &h,
            &bytes,
            &bytes,
            2_000_000,
            &mut no_totals(2),
            false,
            false,
        );
        assert_eq!((s.sum.start, s.sum.end, s.sum.seconds), (1.0, 4.0, 3.0));
    }

    /// The reporter feeds every interval to the stall logs: a run of empty intervals for
    /// the whole test, and a stream's own run while the other stream read.
    #[test]
    fn joined_intervals_feed_the_stall_logs() {
        use interval::StreamSlice;
        let mut totals = no_totals(2);
        let iv = |index: u32, b: [u64; 2]| {
            let local = ClosedInterval {
                index,
                begin_ns: u64::from(index) * 500_000_000,
                end_ns: u64::from(index + 1) * 500_000_000,
                omitted: false,
                streams: vec![
                    StreamSlice {
                        bytes: 0,
                        srtt: None,
                        block_rtt: None,
                        retransmits: None,
                        last: None,
                        udp: None,
                    };
                    2
                ],
            };
            let remote = ReceiverRow {
                index,
                begin_us: u64::from(index) * 500_000,
                end_us: u64::from(index + 1) * 500_000,
                bytes: b.to_vec(),
                udp: Vec::new(),
            };
            (local, remote)
        };
        for (i, b) in [[5, 5], [0, 5], [0, 0], [0, 0], [5, 5]]
            .into_iter()
            .enumerate()
        {
            let (l, r) = iv(i as u32, b);
            join(&l, &r, &mut totals);
        }
        let mut h = model::sample::header();
        h.streams = 2;
        h.duration_s = 2.5;
        let s = summarize(
            &h,
            &[15, 15],
            &[15, 15],
            2_500_000,
            &mut totals,
            false,
            false,
        );
        assert!(
            s.diagnosis.iter().any(
                |l| l.starts_with("diagnosis: no data moved from 1.0 s to 2.0 s (2 intervals)")
            ),
            "{:?}",
            s.diagnosis
        );
        assert!(
            s.diagnosis.iter().any(|l| l
                .starts_with("diagnosis: stream 0 read nothing from 0.5 s to 2.0 s (3 intervals)")),
            "{:?}",
            s.diagnosis
        );
    }

    /// The totals carry each stream's sender side as iperf3's `end.streams[].sender`
    /// has it: the bytes written over the test's span, and the largest congestion window
    /// an interval ended with (omitted intervals left out, as from the other totals).
    #[test]
    fn totals_carry_the_sender_s_rate_and_largest_cwnd() {
        let sample = |cwnd_bytes| crate::wire::measure::TcpSample {
            cwnd_bytes,
            ..crate::wire::measure::TcpSample::default()
        };
        let interval = |index: u32, omitted: bool, cwnd: Option<u64>| {
            let local = ClosedInterval {
                index,
                begin_ns: u64::from(index) * 500_000_000,
                end_ns: u64::from(index + 1) * 500_000_000,
                omitted,
                streams: vec![interval::StreamSlice {
                    bytes: 100,
                    srtt: None,
                    block_rtt: None,
                    retransmits: None,
                    last: cwnd.map(sample),
                    udp: None,
                }],
            };
            let remote = ReceiverRow {
                index,
                begin_us: u64::from(index) * 500_000,
                end_us: u64::from(index + 1) * 500_000,
                bytes: vec![100],
                udp: Vec::new(),
            };
            (local, remote)
        };
        let mut totals = no_totals(1);
        for (i, omitted, cwnd) in [
            (0, true, Some(900_000)),
            (1, false, Some(40_000)),
            (2, false, None),
            (3, false, Some(60_000)),
            (4, false, Some(50_000)),
        ] {
            let (l, r) = interval(i, omitted, cwnd);
            join(&l, &r, &mut totals);
        }
        let mut h = model::sample::header();
        h.duration_s = 2.0;
        h.omit_s = 0.5;
        let s = summarize(&h, &[500], &[500], 2_500_000, &mut totals, false, false);
        let sent = s.streams[0].sent.expect("a total has its sender side");
        assert_eq!(sent.max_snd_cwnd, Some(60_000));
        assert!(
            (sent.bits_per_second - 400.0 * 8.0 / 2.0).abs() < 1e-6,
            "{sent:?}"
        );
        let without_tcp_info =
            summarize(&h, &[0], &[0], 2_500_000, &mut no_totals(1), false, false);
        assert_eq!(without_tcp_info.streams[0].sent.unwrap().max_snd_cwnd, None);
    }

    /// A UDP stream that has received nothing yet still has its place in the row: the
    /// counts stay with their streams (review: a filter shifted stream 1's to stream 0).
    #[test]
    fn udp_rows_keep_every_stream_in_order() {
        use crate::wire::measure::{StreamSlice, UdpSlice};
        let slice = |udp: Option<UdpSlice>| StreamSlice {
            bytes: 0,
            srtt: None,
            block_rtt: None,
            retransmits: None,
            last: None,
            udp,
        };
        let got = UdpSlice {
            packets: 7,
            ..crate::wire::measure::UdpSlice::default()
        };
        let iv = ClosedInterval {
            index: 0,
            omitted: false,
            begin_ns: 0,
            end_ns: 1,
            streams: vec![slice(None), slice(Some(got))],
        };
        assert_eq!(receiver_row(&iv, true).udp, [UdpSlice::default(), got]);
        assert!(receiver_row(&iv, false).udp.is_empty());
    }

    /// A test cut short when the sending server vanished (`--bidir`'s second direction,
    /// `-R`): the rows this end received are printed (found by the vanished-server test:
    /// --bidir printed no RX row and no RX totals at all). They count in the totals only
    /// when the sender reported nothing: otherwise the totals end at its last report
    /// (review: a -R test stopped at 2.3 s summed the receiver to 2.345 s against the
    /// sender's 2.0 s, and -u -R said "receiver got 287, lost 0" under rows of 324).
    #[test]
    fn the_receivers_rows_stay_when_the_sender_vanished_before_reporting_them() {
        let row = |index: u32, bytes: u64, udp: bool| ReceiverRow {
            index,
            begin_us: u64::from(index) * 500_000,
            end_us: u64::from(index + 1) * 500_000,
            bytes: vec![bytes, bytes],
            udp: match udp {
                true => vec![
                    crate::wire::measure::UdpSlice {
                        packets: bytes / 10,
                        lost: u64::from(index) + 1,
                        ..crate::wire::measure::UdpSlice::default()
                    };
                    2
                ],
                false => Vec::new(),
            },
        };
        let sender = |index: u32, bytes: u64| ClosedInterval {
            index,
            omitted: false,
            begin_ns: u64::from(index) * 500_000_000,
            end_ns: u64::from(index + 1) * 500_000_000,
            streams: vec![
                StreamSlice {
                    bytes,
                    srtt: None,
                    block_rtt: None,
                    retransmits: Some(0),
                    last: None,
                    udp: None,
                };
                2
            ],
        };
        let receiving = |udp: bool| {
            let mut params = crate::wire::params::TestParams::defaults();
            params.udp = udp;
            Direction::new(true, IntervalCutter::for_test(2, &params), 2, udp)
        };
        let mut header = model::sample::header();
        header.streams = 2;
        header.block_bytes = 10;
        for udp in [false, true] {
            header.udp = udp;
            // This end receives (-R, or --bidir's second direction); the server's sender
            // reported interval 0 and vanished before its report of interval 1.
            let mut d = receiving(udp);
            d.add_row(row(0, 100, udp));
            d.add_row(row(1, 70, udp));
            d.add_sender(sender(0, 120), None);
            assert_eq!(d.ready().len(), 1);
            let late = d.join_without_senders();
            assert_eq!(late.len(), 1, "interval 1, from the receiver's row alone");
            assert_eq!(
                (late[0].index, late[0].reverse, late[0].sum.bytes),
                (1, true, 140)
            );
            assert_eq!(late[0].sum.sent_bytes, 0, "no sender figures are made up");
            assert!(late[0].uncounted, "marked: not in the totals");
            assert_eq!(late[0].streams[0].retransmits, None);
            // The totals end with the sender's last report, for both ends' counts.
            assert_eq!(d.joined_received, vec![100, 100], "udp {udp}");
            assert_eq!(d.joined_until_us, Some(500_000));
            assert!(!d.totals.sender_silent);
            let s = summarize(
                &header,
                &[120, 120],
                &d.joined_received,
                500_000,
                &mut d.totals,
                true,
                false,
            );
            assert_eq!(s.sum_received.bytes, 200);
            if udp {
                let u = s.udp().unwrap();
                // By the receiver's sequence numbers over interval 0: 10 received and 1
                // lost per stream (the sender's 12 each, on its own clock, are not used).
                assert_eq!((u.packets, u.lost_packets), (22, 2));
            }
            assert!(!s.sender_silent);
            // The far sender's last report on its own clock fell behind the receiver's
            // row on this one: it wrote at least what was read (TCP); UDP keeps its count.
            let mut d = receiving(udp);
            d.add_row(row(0, 100, udp));
            d.add_row(row(1, 70, udp));
            d.add_sender(sender(0, 90), None);
            d.ready();
            d.join_without_senders();
            let (sent, received, _) = d.cut_short_totals().unwrap();
            assert_eq!(received, vec![100, 100]);
            assert_eq!(sent, if udp { vec![90, 90] } else { vec![100, 100] });
        }
        // The sender reported nothing (it vanished within the first interval): the
        // receiver's rows are all there is, counted, with the sender's figures unknown
        // and UDP's loss by sequence kept (review: it showed 0 lost under rows of 42 %).
        for udp in [false, true] {
            header.udp = udp;
            let mut d = receiving(udp);
            d.add_row(row(0, 100, udp));
            let late = d.join_without_senders();
            assert_eq!(late.len(), 1);
            assert!(!late[0].uncounted, "the totals' only rows");
            assert_eq!(
                (d.joined_received.clone(), d.joined_until_us),
                (vec![100, 100], Some(500_000))
            );
            let (sent, _, _) = d.cut_short_totals().unwrap();
            assert_eq!(
                sent,
                [0, 0],
                "unknown, not made up from the receiver's count"
            );
            let s = summarize(
                &header,
                &sent,
                &d.joined_received,
                500_000,
                &mut d.totals,
                true,
                false,
            );
            assert!(s.sender_silent);
            // Unknown, `null` in JSON: not a count of 0.
            assert!(s.sum_sent.unknown, "{:?}", s.sum_sent);
            assert_eq!(s.sum_received.bytes, 200);
            if udp {
                let u = s.udp().unwrap();
                assert_eq!((u.packets, u.lost_packets), (22, 2));
            }
        }
        // -O: a sender that reported only omitted intervals reported nothing that
        // counts (review: the totals stopped inside -O and never printed).
        header.udp = false;
        let mut d = receiving(false);
        d.add_row(row(0, 100, false));
        d.add_row(row(1, 70, false));
        let mut omitted = sender(0, 120);
        omitted.omitted = true;
        d.add_sender(omitted, None);
        assert_eq!(d.ready().len(), 1);
        assert_eq!(d.join_without_senders().len(), 1);
        assert!(d.totals.sender_silent);
        assert_eq!(d.joined_until_us, Some(1_000_000), "interval 1 counts");
        // This end's own sending direction never needs it.
        let mut forward = Direction::new(
            false,
            IntervalCutter::for_test(2, &crate::wire::params::TestParams::defaults()),
            2,
            false,
        );
        forward.add_row(row(0, 100, false));
        assert!(forward.join_without_senders().is_empty());
        // This end sent on past the receiver's last row (the server died at 1.5 s, its
        // last row ended at 0.5): sent and received over that row's span alone, or the
        // sent rate counted 1.5 s of bytes over 0.5 s (59.8 Gbit/s on a 40 Gbit/s host).
        forward.add_sender(sender(0, 120), None);
        forward.add_sender(sender(1, 130), None);
        forward.add_sender(sender(2, 140), None);
        assert_eq!(forward.ready().len(), 1);
        assert_eq!(
            forward.cut_short_totals(),
            Some((vec![120, 120], vec![100, 100], 500_000))
        );
    }

    /// Second `index` of one stream: the sender's half (`sent` bytes) and the receiver's
    /// row (`got` bytes, and UDP's datagram counts).
    fn one_second(
        index: u32,
        omitted: bool,
        sent: u64,
        got: u64,
        udp: Option<crate::wire::measure::UdpSlice>,
    ) -> (ClosedInterval, ReceiverRow) {
        let local = ClosedInterval {
            index,
            begin_ns: u64::from(index) * 1_000_000_000,
            end_ns: u64::from(index + 1) * 1_000_000_000,
            omitted,
            streams: vec![crate::wire::measure::StreamSlice {
                bytes: sent,
                ..Default::default()
            }],
        };
        let remote = ReceiverRow {
            index,
            begin_us: u64::from(index) * 1_000_000,
            end_us: u64::from(index + 1) * 1_000_000,
            bytes: vec![got],
            udp: udp.into_iter().collect(),
        };
        (local, remote)
    }

    /// `-u -O`: the omitted seconds end at a sequence, not at a time on each end's clock
    /// (review: datagrams in flight at the boundary were counted received but not sent,
    /// hiding that much loss).
    #[test]
    fn udp_omit_ends_at_the_receivers_sequence() {
        use crate::wire::measure::UdpSlice;
        let datagram = 1000u64;
        let mut totals = no_totals(1);
        let iv = |index: u32, omitted: bool, sent: u64, got: UdpSlice| {
            one_second(
                index,
                omitted,
                sent * datagram,
                got.packets * datagram,
                Some(got),
            )
        };
        // The sender wrote 100 datagrams in each second; 10 of the first second's were
        // still in flight at the receiver's boundary, and 5 of the rest were lost.
        let omitted = UdpSlice {
            packets: 90,
            ..crate::wire::measure::UdpSlice::default()
        };
        let counted = UdpSlice {
            packets: 105,
            lost: 5,
            ..crate::wire::measure::UdpSlice::default()
        };
        for (l, r) in [iv(0, true, 100, omitted), iv(1, false, 100, counted)] {
            join(&l, &r, &mut totals);
        }
        let mut h = model::sample::header();
        h.streams = 1;
        h.udp = true;
        h.block_bytes = datagram;
        h.omit_s = 1.0;
        h.duration_s = 1.0;
        let all = 200 * datagram;
        let s = summarize(
            &h,
            &[all],
            &[195 * datagram],
            2_000_000,
            &mut totals,
            false,
            false,
        );
        let u = s.streams[0].udp.expect("UDP figures");
        assert_eq!((u.packets, u.lost_packets), (110, 5), "{u:?}");
        assert_eq!(s.streams[0].sent_bytes, 110 * datagram);
        // The whole run still adds up to what the sender wrote.
        assert_eq!(s.omitted.sent_bytes + s.sum_sent.bytes, all);
    }

    /// UDP cut short (the server stopped at 1.57 s): the sender's last row runs to when it
    /// stopped, a datagram past the receiver's last row; the totals' sent bytes are what
    /// the receiver's sequence numbers say was sent, as their datagram counts (it printed
    /// "sender wrote" 301 datagrams beside "sender sent 300, lost 0").
    #[test]
    fn udp_cut_short_sends_what_the_receivers_sequences_say() {
        use crate::wire::measure::UdpSlice;
        let datagram = 1000u64;
        let mut totals = no_totals(1);
        let got = UdpSlice {
            packets: 298,
            lost: 2,
            ..UdpSlice::default()
        };
        let (l, r) = one_second(0, false, 301 * datagram, 298 * datagram, Some(got));
        join(&l, &r, &mut totals);
        let mut h = model::sample::header();
        (h.streams, h.udp, h.block_bytes) = (1, true, datagram);
        let s = summarize(
            &h,
            &[301 * datagram],
            &[298 * datagram],
            1_000_000,
            &mut totals,
            true,
            false,
        );
        let u = s.streams[0].udp.expect("UDP figures");
        assert_eq!((u.packets, u.lost_packets), (300, 2), "{u:?}");
        assert_eq!(s.sum_sent.bytes, 300 * datagram);
        assert_eq!(s.sum_received.bytes, 298 * datagram);
        // A path that let none through: the sequence numbers say nothing, the sender's
        // count stands (it read 0 sent).
        let mut totals = no_totals(1);
        let (l, r) = one_second(0, false, 301 * datagram, 0, Some(UdpSlice::default()));
        join(&l, &r, &mut totals);
        let s = summarize(
            &h,
            &[301 * datagram],
            &[0],
            1_000_000,
            &mut totals,
            true,
            false,
        );
        assert_eq!(s.sum_sent.bytes, 301 * datagram);
    }

    /// TCP `-O`: the omitted seconds end at the same byte of the stream on both sides, the
    /// receiver's (review: cut on each end's clock, what the buffers held at the boundary
    /// was counted sent inside -O and received after it: more received than sent).
    #[test]
    fn tcp_omit_ends_at_the_receivers_byte() {
        let mut totals = no_totals(1);
        let iv = |index: u32, omitted: bool, sent: u64, got: u64| {
            one_second(index, omitted, sent, got, None)
        };
        // 10 of the sender's first 100 bytes were in its buffers at the boundary.
        for (l, r) in [iv(0, true, 100, 90), iv(1, false, 100, 110)] {
            join(&l, &r, &mut totals);
        }
        let mut h = model::sample::header();
        h.streams = 1;
        h.omit_s = 1.0;
        h.duration_s = 1.0;
        let s = summarize(&h, &[200], &[200], 2_000_000, &mut totals, false, false);
        assert_eq!((s.sum_sent.bytes, s.sum_received.bytes), (110, 110));
        assert_eq!((s.omitted.sent_bytes, s.omitted.received_bytes), (90, 90));
        assert!(s.reconciled());
    }
}
