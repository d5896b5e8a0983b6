//! Stream threads: one per TCP stream on each end, named `stream-N`, pinned per the plan,
//! doing blocking `write()` (sender) or `read()` (receiver) of whole blocks. Each block
//! gets one clock reading and one [`BlockRecord`] in a [`Batch`]; batches go to the
//! reporter over a bounded crossbeam channel and come back through a free list, so the
//! steady state allocates nothing and pays one channel message per batch.
//!
//! Invariant (what lets the reporter close intervals exactly): every batch carries a
//! watermark — a time such that this stream will never again record a block stamped
//! earlier. Socket timeouts of [`WAKE`] bound how long a thread can sit in a blocking call,
//! so an idle or starved stream still advances its watermark.

pub mod clock;
pub(crate) mod echo;
pub(crate) mod receiver;
pub(crate) mod sender;
pub(crate) mod sendfile;
pub(crate) mod single;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod zerocopy;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};

use std::io::Read;
use std::net::TcpStream;

use crate::error::{Error, Result};
use crate::timeouts::{self, Progress};
pub use crate::wire::measure::{TcpSample, UdpSnapshot};
pub use clock::BlockClock;

/// Longest a stream thread stays inside one blocking call (SO_SNDTIMEO / SO_RCVTIMEO).
pub(crate) const WAKE: Duration = Duration::from_millis(50);
/// A batch is sent when it holds this many records… (every batch may wake the reporter and
/// a sender's carries a `TCP_INFO` sample; at 8 KiB blocks and tens of Gbit/s, 4096 fill in ms)
pub const BATCH_RECORDS: usize = 4096;
/// …or when its oldest record is this old.
pub const FLUSH_EVERY_NS: u64 = 20_000_000;
/// Batches in flight per stream before a stream thread waits for the reporter.
pub const BATCHES_IN_FLIGHT: usize = 16;

/// How a stream's bytes cross between the program and the kernel: copied both ways (the
/// default, as every peer's default), or without the copy on one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copying {
    /// `-Z`: senders send without copying the block into the kernel: by `sendfile` from a
    /// memfd ([`sendfile`]; page references, which loopback hands the receiver as they
    /// are), or with `MSG_ZEROCOPY` ([`zerocopy`]; pinned pages, which loopback copies
    /// after all, on delivery).
    pub zerocopy: Option<crate::choices::ZeroCopy>,
    /// `--skip-rx-copy`: receivers take the bytes with `MSG_TRUNC` (the kernel consumes and
    /// counts them without copying them out), copying only the block headers echoes need.
    pub skip_rx_copy: bool,
    /// Receivers of fast streams on small-MSS paths raise `SO_RCVLOWAT` to a read's worth
    /// (`--no-rcvlowat` turns it off).
    pub low_water: bool,
}

/// One block written or read: when (ns since the test's start) and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub t_ns: u64,
    pub bytes: u32,
}

/// One block's round trip (thrulay's block RTT): when the echo came back, and how long
/// after the block was stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRtt {
    pub t_ns: u64,
    pub rtt_ns: u64,
}

impl TcpSample {
    /// Samples `TCP_INFO` of `stream` now.
    pub(crate) fn read(stream: &std::net::TcpStream, t_ns: u64) -> Option<TcpSample> {
        crate::os::net::tcp_info(stream).map(|i| TcpSample {
            t_ns,
            rtt_us: i.rtt_us,
            rttvar_us: i.rttvar_us,
            min_rtt_us: i.min_rtt_us,
            total_retrans: i.total_retrans,
            cwnd_bytes: u64::from(i.snd_cwnd) * u64::from(i.snd_mss),
            delivery_rate_bps: i.delivery_rate.saturating_mul(8),
            pacing_rate_bps: i.pacing_rate.saturating_mul(8),
            notsent_bytes: i.notsent_bytes,
            sndbuf_bytes: socket2::SockRef::from(stream)
                .send_buffer_size()
                .unwrap_or(0) as u64,
        })
    }
}

/// A batch of one stream's records, with its watermark.
#[derive(Debug, Default)]
pub struct Batch {
    pub stream: u16,
    pub records: Vec<BlockRecord>,
    pub samples: Vec<TcpSample>,
    pub block_rtts: Vec<BlockRtt>,
    /// UDP receivers only: one cumulative snapshot per record, same stamps.
    pub udp: Vec<UdpSnapshot>,
    /// No later record of this stream will be stamped before this.
    pub watermark_ns: u64,
    /// The stream has ended: no more records at all.
    pub done: bool,
    /// The stream ended early (an error or an abort): this last batch came from dropping
    /// its batcher, not from its final flush.
    pub early: bool,
}

impl Batch {
    fn with_capacity(stream: u16) -> Self {
        Batch {
            stream,
            records: Vec::with_capacity(BATCH_RECORDS),
            samples: Vec::with_capacity(4),
            block_rtts: Vec::with_capacity(64),
            ..Batch::default()
        }
    }
}

/// The channels between stream threads and a reporter.
pub struct BatchChannels {
    pub tx: Sender<Batch>,
    pub rx: Receiver<Batch>,
    pub free_tx: Sender<Batch>,
    pub free_rx: Receiver<Batch>,
}

impl BatchChannels {
    /// Channels sized for `streams` streams.
    pub fn new(streams: usize) -> Self {
        let cap = BATCHES_IN_FLIGHT * streams.max(1);
        let (tx, rx) = crossbeam_channel::bounded(cap);
        let (free_tx, free_rx) = crossbeam_channel::bounded(cap);
        BatchChannels {
            tx,
            rx,
            free_tx,
            free_rx,
        }
    }
}

/// The test's time origin, shared by a side's stream threads and its reporter.
#[derive(Debug, Clone, Copy)]
pub struct TestClock {
    pub t0: Instant,
}

impl TestClock {
    /// Nanoseconds from the start to `now` (0 before the start).
    #[inline]
    pub fn ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.t0).as_nanos() as u64
    }
}

/// A stream thread's side of the batch channels.
pub struct Batcher {
    stream: u16,
    tx: Sender<Batch>,
    free: Receiver<Batch>,
    cur: Batch,
    first_ns: Option<u64>,
    /// The final flush (`done`) went out.
    finished: bool,
}

impl Batcher {
    pub fn new(stream: u16, tx: Sender<Batch>, free: Receiver<Batch>) -> Self {
        Batcher {
            stream,
            tx,
            free,
            cur: Batch::with_capacity(stream),
            first_ns: None,
            finished: false,
        }
    }

    /// Records a block; returns true when the batch should be flushed now.
    #[inline]
    pub fn push(&mut self, t_ns: u64, bytes: u32) -> bool {
        self.cur.records.push(BlockRecord { t_ns, bytes });
        let first = *self.first_ns.get_or_insert(t_ns);
        self.cur.records.len() >= BATCH_RECORDS || t_ns.saturating_sub(first) >= FLUSH_EVERY_NS
    }

    /// Records a UDP receiver's counts after its latest record (stamped the same).
    #[inline]
    pub fn push_udp(&mut self, snapshot: UdpSnapshot) {
        self.cur.udp.push(snapshot);
    }

    /// Records a block's round trip.
    #[inline]
    pub fn push_rtt(&mut self, t_ns: u64, rtt_ns: u64) {
        self.cur.block_rtts.push(BlockRtt { t_ns, rtt_ns });
    }

    /// Sends the current batch with `watermark_ns` (and a TCP sample) and takes a fresh
    /// one from the free list. Errors when the reporter is gone.
    pub fn flush(
        &mut self,
        watermark_ns: u64,
        sample: Option<TcpSample>,
        done: bool,
    ) -> Result<()> {
        let next = match self.free.try_recv() {
            Ok(mut b) => {
                b.records.clear();
                b.samples.clear();
                b.block_rtts.clear();
                b.udp.clear();
                b.stream = self.stream;
                b.done = false;
                b.early = false;
                b
            }
            Err(_) => Batch::with_capacity(self.stream),
        };
        let mut full = std::mem::replace(&mut self.cur, next);
        full.watermark_ns = watermark_ns;
        full.done = done;
        full.samples.extend(sample);
        self.first_ns = None;
        self.finished |= done;
        self.tx
            .send(full)
            .map_err(|_| Error::Test(format!("stream-{}: the reporter has stopped", self.stream)))
    }
}

impl Drop for Batcher {
    /// A stream that ends early (an error, an abort) still hands over what it recorded
    /// since its last flush: every byte a `write()` took counts in the sender's total, as
    /// the receiver's rows count what arrived. After a final flush there is nothing left.
    /// Without a final flush it says so (`early`), empty or not: the reporter then makes no
    /// interval past the stream's last record (a server made a 2.0-3.0 row of 0 for a
    /// connection reset at 1.51 s of `-t 3`).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut last = std::mem::take(&mut self.cur);
        last.stream = self.stream;
        last.early = true;
        last.watermark_ns = [
            last.records.last().map(|r| r.t_ns),
            last.block_rtts.last().map(|r| r.t_ns),
            last.udp.last().map(|u| u.t_ns),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
        last.done = true;
        // A destructor must not hang on a reporter that stopped draining.
        let _ = self.tx.send_timeout(last, crate::timeouts::CONTROL_WRITE);
    }
}

/// What a stream thread needs besides its socket.
pub(crate) struct StreamCtx {
    pub id: u16,
    pub cpu: Option<usize>,
    pub block_bytes: usize,
    /// `-b`: the stream's rate, bits/s (`None`: as fast as it goes).
    pub rate_bps: Option<u64>,
    /// `-b RATE/BURST`: blocks sent back to back before the pacer waits.
    pub burst: Option<u32>,
    /// `-n`/`-k`: the direction's budget, shared by its streams.
    pub budget: Option<Arc<crate::data::budget::Spend>>,
    /// `-F`: the file a sender's blocks come from, or a receiver writes to.
    pub file: Option<Arc<std::path::Path>>,
    /// `--rcv-timeout`: the direction's receivers' shared idle watch.
    pub idle: Option<Arc<Idle>>,
    /// `--realtime`: the thread runs at real-time priority ([`REALTIME_PRIORITY`]).
    pub realtime: bool,
    /// The echo connection for block RTT (`None` with `--no-echo`): the receiver writes
    /// header echoes to it and the sender reads them, so the data connection stays one-way.
    pub echo: Option<std::net::TcpStream>,
    /// The least gap between a receiver's echoes ([`echo::echo_gap_ns`]).
    pub echo_gap_ns: u64,
    pub batches: Sender<Batch>,
    pub free: Receiver<Batch>,
    /// Receives the test's start instant (one message per stream thread).
    pub start: Receiver<Instant>,
    /// Set by the owner to stop every stream at once (peer gone, error elsewhere).
    pub abort: Arc<AtomicBool>,
}

impl StreamCtx {
    /// Pins the calling thread per the plan, and gives it real-time priority when asked.
    pub(crate) fn pin(&self) -> Result<()> {
        if let Some(cpu) = self.cpu {
            crate::data::pin::pin_current(cpu)
                .map_err(|e| Error::Test(format!("stream-{}: {e}", self.id)))?;
        }
        if self.realtime {
            crate::os::sys::set_realtime(REALTIME_PRIORITY).map_err(|e| {
                Error::Test(format!(
                    "stream-{}: {}",
                    self.id,
                    realtime_refused("--realtime", &e)
                ))
            })?;
        }
        Ok(())
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// `--rcv-timeout`, at a receiver's wake with nothing read (its last read at
    /// `last_read_ns`): the error once the direction has read nothing for the limit.
    pub(crate) fn idle_past(&self, t_ns: u64, last_read_ns: u64) -> Result<()> {
        match &self.idle {
            Some(idle) => {
                idle.read_at(last_read_ns);
                idle.check(self.id, t_ns)
            }
            None => Ok(()),
        }
    }

    /// Waits for the start signal; an error when the test was called off first.
    pub(crate) fn wait_start(&self) -> Result<TestClock> {
        self.start.recv().map(|t0| TestClock { t0 }).map_err(|_| {
            Error::Test(format!(
                "stream-{}: the test was called off before it started",
                self.id
            ))
        })
    }
}

/// What a direction's streams share besides their channels: the pace of its senders and
/// its budget.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared {
    pub rate_bps: Option<u64>,
    pub burst: Option<u32>,
    pub budget: Option<Arc<crate::data::budget::Spend>>,
    /// `-F`: each stream's file.
    pub file: Option<Arc<std::path::Path>>,
    /// `--rcv-timeout`: one watch for the direction's receivers.
    pub idle: Option<Arc<Idle>>,
    /// `--realtime`: the direction's threads run at real-time priority.
    pub realtime: bool,
}

/// `--realtime`'s SCHED_FIFO priority: the lowest, enough to preempt every ordinary task
/// and below the kernel's own real-time threads.
pub(crate) const REALTIME_PRIORITY: i32 = 1;

/// Why `flag` (`--realtime`, `--allow-realtime`) cannot be had here, and the fix.
fn realtime_refused(flag: &str, e: &std::io::Error) -> String {
    format!("{flag}: SCHED_FIFO refused ({e}); run as root or with CAP_SYS_NICE, or drop {flag}")
}

/// `flag` asks for real-time receivers in this process: refused now, before any test,
/// when the process may not have them.
pub(crate) fn check_realtime(flag: &str) -> Result<()> {
    crate::os::sys::may_realtime(REALTIME_PRIORITY)
        .map_err(|e| Error::Usage(realtime_refused(flag, &e)))
}

/// `--rcv-timeout`: when a direction's receivers last read anything, kept by each at its
/// flushes (not per read) and looked at when one wakes with nothing read; nothing read by
/// any of them for the limit ends the test, as iperf3's receiving end does.
#[derive(Debug)]
pub(crate) struct Idle {
    limit_ns: u64,
    last_ns: AtomicU64,
}

impl Idle {
    pub(crate) fn new(limit: Duration) -> Idle {
        Idle {
            limit_ns: limit.as_nanos() as u64,
            last_ns: AtomicU64::new(0),
        }
    }

    /// A receiver read something at `t_ns` (since the test's start).
    pub(crate) fn read_at(&self, t_ns: u64) {
        self.last_ns.fetch_max(t_ns, Ordering::Relaxed);
    }

    /// The error once no receiver of the direction has read for the limit, at `t_ns`.
    pub(crate) fn check(&self, id: u16, t_ns: u64) -> Result<()> {
        let idle_ns = t_ns.saturating_sub(self.last_ns.load(Ordering::Relaxed));
        if idle_ns < self.limit_ns {
            return Ok(());
        }
        Err(Error::Test(format!(
            "stream-{id}: no data received for {:.1} s (--rcv-timeout {:.1})",
            idle_ns as f64 / 1e9,
            self.limit_ns as f64 / 1e9
        )))
    }
}

/// One side's stream threads: spawned pinned and waiting, started together, stopped
/// together, joined with the first failure named. Normally one `stream-N` thread per
/// stream; the `single` engine runs every stream on one `stream-mux` thread.
pub(crate) struct StreamSet<T> {
    /// Each worker's outcome, and its thread's CPU time whatever the outcome.
    workers: Vec<std::thread::JoinHandle<(Result<Vec<T>>, crate::os::cpu::CpuTime)>>,
    streams: usize,
    abort: Arc<AtomicBool>,
    start_tx: Sender<Instant>,
    failure: Arc<parking_lot::Mutex<Option<Failure>>>,
    /// `-n`/`-k`: the direction's budget.
    budget: Option<Arc<crate::data::budget::Spend>>,
}

/// The first stream of a side to fail, as it happened: the owner polls for it so the test
/// stops at once and names the cause, rather than waiting for `-t` to pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub at: Instant,
    pub error: String,
    /// The other end closed or reset the connection: its own word, if it says one, is the
    /// cause ([`Error::peer_closed`]).
    pub peer_closed: bool,
}

/// A stream's sockets: data (a `TcpStream`, or a connected `UdpSocket` for UDP), and the
/// echo connection when block RTT is on.
pub(crate) struct StreamSocks<S = TcpStream> {
    pub data: S,
    pub echo: Option<std::net::TcpStream>,
}

/// The reporter's ends of a side's batch channels.
pub(crate) type ReporterEnds = (Receiver<Batch>, Sender<Batch>);

/// What both engines start from: the (empty) set, one context per stream with its echo
/// connection, the data sockets in stream order, and the reporter's channel ends.
type Prepared<T, S> = (StreamSet<T>, Vec<StreamCtx>, Vec<S>, ReporterEnds);

impl<T: Send + 'static> StreamSet<T> {
    fn prepare<S>(
        socks: Vec<StreamSocks<S>>,
        plan: &crate::data::pin::PinPlan,
        block_bytes: usize,
        shared: Shared,
    ) -> Prepared<T, S> {
        let (datas, echoes): (Vec<_>, Vec<_>) = socks.into_iter().map(|s| (s.data, s.echo)).unzip();
        let n = echoes.len();
        let channels = BatchChannels::new(n);
        let (start_tx, start_rx) = crossbeam_channel::bounded(n);
        let set = StreamSet {
            workers: Vec::new(),
            streams: n,
            abort: Arc::new(AtomicBool::new(false)),
            start_tx,
            failure: Arc::default(),
            budget: shared.budget.clone(),
        };
        let ctxs = echoes
            .into_iter()
            .enumerate()
            .map(|(id, echo)| StreamCtx {
                id: id as u16,
                cpu: plan.0.get(id).copied().flatten(),
                block_bytes,
                rate_bps: shared.rate_bps,
                burst: shared.burst,
                budget: shared.budget.clone(),
                file: shared.file.clone(),
                idle: shared.idle.clone(),
                realtime: shared.realtime,
                echo,
                echo_gap_ns: echo::echo_gap_ns(n),
                batches: channels.tx.clone(),
                free: channels.free_rx.clone(),
                start: start_rx.clone(),
                abort: Arc::clone(&set.abort),
            })
            .collect();
        (set, ctxs, datas, (channels.rx, channels.free_tx))
    }

    /// Spawns `stream-N` for each socket, pinned per `plan`, running `body`; each waits for
    /// [`StreamSet::start`]. Returns the set and the reporter's ends of the batch channels.
    /// The sockets are TCP connections or connected UDP sockets.
    #[cfg(test)]
    pub(crate) fn spawn<S, F>(
        socks: Vec<StreamSocks<S>>,
        plan: &crate::data::pin::PinPlan,
        block_bytes: usize,
        body: F,
    ) -> Result<(StreamSet<T>, Receiver<Batch>, Sender<Batch>)>
    where
        S: Send + 'static,
        F: Fn(StreamCtx, S) -> Result<T> + Send + Clone + 'static,
    {
        Self::spawn_with(socks, plan, block_bytes, Shared::default(), body)
    }

    /// [`StreamSet::spawn`] with each stream's rate (`-b`), burst and budget in its
    /// [`StreamCtx`].
    pub(crate) fn spawn_with<S, F>(
        socks: Vec<StreamSocks<S>>,
        plan: &crate::data::pin::PinPlan,
        block_bytes: usize,
        shared: Shared,
        body: F,
    ) -> Result<(StreamSet<T>, Receiver<Batch>, Sender<Batch>)>
    where
        S: Send + 'static,
        F: Fn(StreamCtx, S) -> Result<T> + Send + Clone + 'static,
    {
        let (mut set, ctxs, datas, (rx, free_tx)) = Self::prepare(socks, plan, block_bytes, shared);
        for (ctx, sock) in ctxs.into_iter().zip(datas) {
            let body = body.clone();
            let name = format!("stream-{}", ctx.id);
            let report = set.reporter();
            match spawn_named(name, move || {
                timed(|| report(body(ctx, sock).map(|v| vec![v])))
            }) {
                Ok(h) => set.workers.push(h),
                Err(e) => {
                    // Threads already waiting see the start channel close and end.
                    set.abort();
                    return Err(e);
                }
            }
        }
        Ok((set, rx, free_tx))
    }

    /// Spawns one `stream-mux` thread that runs every stream (the `single` engine).
    pub(crate) fn spawn_single<F>(
        socks: Vec<StreamSocks>,
        plan: &crate::data::pin::PinPlan,
        block_bytes: usize,
        body: F,
    ) -> Result<(StreamSet<T>, Receiver<Batch>, Sender<Batch>)>
    where
        F: FnOnce(Vec<StreamCtx>, Vec<std::net::TcpStream>) -> Result<Vec<T>> + Send + 'static,
    {
        let (mut set, ctxs, datas, (rx, free_tx)) =
            Self::prepare(socks, plan, block_bytes, Shared::default());
        let report = set.reporter();
        set.workers.push(spawn_named("stream-mux".into(), move || {
            timed(|| report(body(ctxs, datas)))
        })?);
        Ok((set, rx, free_tx))
    }

    /// What a worker calls with its result: a failure (other than being told to stop) is
    /// recorded as the side's first, and every other stream is told to stop. A failure
    /// of this end's own (not the peer closing or resetting the connection) replaces a
    /// first that was: a socket destroyed here may wake its thread after another stream
    /// already read the reset the far end sent once it saw that socket go.
    fn reporter<V>(&self) -> impl FnOnce(Result<V>) -> Result<V> + Send + 'static {
        let (failure, abort) = (Arc::clone(&self.failure), Arc::clone(&self.abort));
        move |result| {
            if let Err(e) = &result
                && !matches!(e, Error::Aborted(_))
            {
                let mut first = failure.lock();
                if first
                    .as_ref()
                    .is_none_or(|f| f.peer_closed && !e.peer_closed())
                {
                    *first = Some(Failure {
                        at: Instant::now(),
                        error: e.to_string(),
                        peer_closed: e.peer_closed(),
                    });
                }
                abort.store(true, Ordering::Relaxed);
            }
            result
        }
    }

    /// True when every stream thread has ended.
    pub(crate) fn finished(&self) -> bool {
        self.workers.iter().all(|w| w.is_finished())
    }

    /// `-n`/`-k`: whether every stream has stopped writing, its budget spent (or its
    /// thread ended); `None` without a budget.
    pub(crate) fn budget_sent(&self) -> Option<bool> {
        self.budget
            .as_ref()
            .map(|b| b.senders_stopped() >= self.streams || self.finished())
    }

    /// `-n`/`-k`: the direction's budget, if it has one.
    pub(crate) fn budget(&self) -> Option<&crate::data::budget::Spend> {
        self.budget.as_deref()
    }

    /// The first stream failure so far, if any.
    pub(crate) fn failure(&self) -> Option<Failure> {
        self.failure.lock().clone()
    }

    /// Releases every stream with the common start instant.
    pub(crate) fn start(&self, t0: Instant) {
        for _ in 0..self.streams {
            let _ = self.start_tx.send(t0);
        }
    }

    /// Tells every stream to stop at its next wake-up.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }

    /// Joins all streams: their outcomes, the CPU time of each thread that failed (its
    /// outcome, which holds it otherwise, is lost), and the first error that is a cause (a
    /// stream stopped because another failed is never named; it is the error only when
    /// nothing else failed, i.e. the owner aborted the test).
    pub(crate) fn join(
        self,
    ) -> (
        Vec<T>,
        Vec<(String, crate::os::cpu::CpuTime)>,
        Option<Error>,
    ) {
        let StreamSet {
            workers,
            abort,
            start_tx,
            ..
        } = self;
        drop(start_tx);
        let mut outcomes = Vec::new();
        let mut failed_cpu = Vec::new();
        let mut first = None;
        for h in workers {
            let name = h.thread().name().unwrap_or("stream").to_string();
            let (outcome, cpu) = h.join().unwrap_or_else(|_| {
                let e = Error::Test(format!("{name}: thread panicked"));
                (Err(e), crate::os::cpu::CpuTime::default())
            });
            match outcome {
                Ok(v) => outcomes.extend(v),
                Err(e) => {
                    failed_cpu.push((name, cpu));
                    abort.store(true, Ordering::Relaxed);
                    let replace = match (&first, &e) {
                        (None, _) => true,
                        (Some(Error::Aborted(_)), err) => !matches!(err, Error::Aborted(_)),
                        _ => false,
                    };
                    if replace {
                        first = Some(e);
                    }
                }
            }
        }
        (outcomes, failed_cpu, first)
    }
}

/// Runs a worker's `body` and measures its thread's CPU time, whatever it returns.
fn timed<V>(body: impl FnOnce() -> V) -> (V, crate::os::cpu::CpuTime) {
    let start = crate::os::cpu::thread();
    let v = body();
    (v, crate::os::cpu::thread_since(start))
}

/// How a sender's connection ends after `shutdown(SHUT_WR)` ([`drain_to_eof`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Drain {
    /// At the receiver's EOF: a pinperf receiver reads every byte, so a reset is a failure.
    #[default]
    ToEof,
    /// At its EOF or its reset: an iperf3 receiver stops reading at `TEST_END` and closes
    /// with data unread (a slow reader), which resets the connection; its count of what it
    /// read comes with its results.
    ToEofOrReset,
}

/// After `shutdown(SHUT_WR)`: reads until the receiver closes (it does once it has read
/// our EOF), so closing our end never resets data still in flight. As long as the receiver
/// keeps acknowledging data this waits (a large buffer on a slow path drains for minutes;
/// a `-s` server bounds how long, see `server::bounds`);
/// it fails after [`timeouts::STALL`] without an acknowledged byte, or on abort.
pub(crate) fn drain_to_eof(
    id: u16,
    sock: &mut TcpStream,
    abort: &AtomicBool,
    drain: Drain,
) -> Result<()> {
    let acked = |s: &TcpStream| crate::os::net::tcp_info(s).map_or(0, |i| i.bytes_acked);
    let mut progress = Progress::new(timeouts::STALL, acked(sock), Instant::now());
    let mut sink = [0u8; 4096];
    loop {
        if abort.load(Ordering::Relaxed) {
            return Err(aborted(id));
        }
        match sock.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if drain == Drain::ToEofOrReset
                    && e.kind() == std::io::ErrorKind::ConnectionReset =>
            {
                return Ok(());
            }
            Err(e) => return Err(Error::io(format!("stream-{id}: read end of data"), e)),
        }
        if progress.stalled(acked(sock), Instant::now()) {
            let waiting = crate::os::net::tcp_info(sock).map_or(0, |i| i.notsent_bytes);
            return Err(Error::Test(format!(
                "stream-{id}: the receiver acknowledged nothing for {} s after the test's end \
                 ({waiting} bytes not yet sent): it stopped reading or the path is down",
                timeouts::STALL.as_secs()
            )));
        }
    }
}

/// Waits for `pacer` (a paced stream's schedule; `None`: returns at once), flushing the
/// watermark (with `sample(t_ns)`) every [`WAKE`] so a slow rate never holds intervals
/// back. `Ok(false)` when the run time (`end_ns`) passed first; an error on abort.
pub(crate) fn wait_paced(
    pacer: Option<&mut crate::data::pace::Pacer>,
    ctx: &StreamCtx,
    clock: &TestClock,
    end_ns: u64,
    batcher: &mut Batcher,
    mut sample: impl FnMut(u64) -> Option<TcpSample>,
) -> Result<bool> {
    let Some(p) = pacer else {
        return Ok(true);
    };
    while !p.wait(WAKE) {
        let t_ns = clock.ns(Instant::now());
        if ctx.aborted() {
            return Err(aborted(ctx.id));
        }
        if t_ns >= end_ns {
            return Ok(false);
        }
        batcher.flush(t_ns, sample(t_ns), false)?;
    }
    Ok(true)
}

/// Notices that this end's own thread did not run for longer than [`timeouts::STALL`]
/// between readings of the test clock that come at most a wake-up apart: the process was
/// paused (SIGSTOP, a debugger) or starved of CPU, and the test it ran is not the one asked.
pub(crate) struct Awake {
    last_ns: u64,
}

impl Awake {
    pub(crate) fn new(t_ns: u64) -> Awake {
        Awake { last_ns: t_ns }
    }

    /// A reading of the test clock; an error naming the stretch when it follows the last
    /// one by more than the stall limit.
    pub(crate) fn check(&mut self, id: u16, t_ns: u64) -> Result<()> {
        let (from, gap) = (self.last_ns, t_ns.saturating_sub(self.last_ns));
        self.last_ns = self.last_ns.max(t_ns);
        if gap <= timeouts::STALL.as_nanos() as u64 {
            return Ok(());
        }
        Err(Error::Test(format!(
            "stream-{id}: this end did not run for {:.1} s ({:.1} s to {:.1} s into the \
             test), past the stall limit of {} s: the process was paused (SIGSTOP, a \
             debugger) or not scheduled",
            gap as f64 / 1e9,
            from as f64 / 1e9,
            t_ns as f64 / 1e9,
            timeouts::STALL.as_secs()
        )))
    }
}

/// The error of a stream told to stop because another part of the test failed (never
/// reported as the test's cause: see [`StreamSet::join`]).
pub(crate) fn aborted(id: u16) -> Error {
    Error::Aborted(format!("stream-{id}"))
}

/// What `rx` carries until it closes, each message waited for by parking. A reporter
/// shares its cores with the streams, and crossbeam's `recv()` spins and calls
/// `sched_yield` up to four times before it parks: hundreds of yields a second, each
/// switching a stream thread out and back. `Select` parks at once.
pub(crate) fn parked<T>(rx: &Receiver<T>) -> impl Iterator<Item = T> + '_ {
    let mut ready = Select::new();
    ready.recv(rx);
    std::iter::from_fn(move || match rx.try_recv() {
        Ok(m) => Some(m),
        Err(TryRecvError::Disconnected) => None,
        Err(TryRecvError::Empty) => ready.select().recv(rx).ok(),
    })
}

/// Spawns a named thread running `body`.
pub(crate) fn spawn_named<T: Send + 'static>(
    name: String,
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(body)
        .map_err(|e| Error::io(format!("spawn thread {name}"), e))
}

/// True for the errors a socket timeout produces.
#[inline]
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `parked` hands over what was queued, waits for what comes later, and ends when
    /// every sender is gone.
    #[test]
    fn parked_yields_every_message_and_ends_when_the_channel_closes() {
        let (tx, rx) = crossbeam_channel::bounded(4);
        tx.send(1).unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send(2).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            tx.send(3).unwrap();
        });
        let got: Vec<i32> = parked(&rx).collect();
        late.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
        let (tx, rx) = crossbeam_channel::bounded(4);
        tx.send(4).unwrap();
        tx.send(5).unwrap();
        drop(tx);
        assert_eq!(
            parked(&rx).collect::<Vec<_>>(),
            [4, 5],
            "queued before the close"
        );
    }

    /// `--rcv-timeout`: a read by any receiver of the direction keeps it alive; the limit
    /// past the last read ends it, named.
    #[test]
    fn the_idle_watch_counts_any_receivers_reads() {
        let idle = Idle::new(Duration::from_millis(1500));
        assert!(idle.check(0, 1_400_000_000).is_ok(), "from the start");
        idle.read_at(1_000_000_000);
        idle.read_at(400_000_000);
        assert!(
            idle.check(1, 2_400_000_000).is_ok(),
            "the latest read counts"
        );
        let e = idle.check(1, 2_500_000_000).unwrap_err().to_string();
        assert_eq!(
            e,
            "stream-1: no data received for 1.5 s (--rcv-timeout 1.5)"
        );
    }

    /// Clock readings a wake-up apart pass; one more than the stall limit after the last
    /// is this end paused, named with its stretch.
    #[test]
    fn a_thread_that_did_not_run_past_the_stall_limit_says_so() {
        let s = 1_000_000_000u64;
        let mut a = Awake::new(0);
        assert!(a.check(3, s / 2).is_ok());
        assert!(a.check(3, s / 2 + 10 * s).is_ok(), "exactly the limit");
        let e = a.check(3, 22 * s).expect_err("11.5 s without a reading");
        assert!(
            e.to_string()
                .starts_with("stream-3: this end did not run for 11.5 s (10.5 s to 22.0 s"),
            "{e}"
        );
    }

    /// A stream thread that fails still says what CPU it used (review: a --bidir test
    /// cut short by a reset listed only the threads that ended cleanly).
    #[test]
    fn a_failed_stream_threads_cpu_time_is_kept() {
        let socks = (0..2)
            .map(|_| StreamSocks {
                data: (),
                echo: None,
            })
            .collect();
        let plan = crate::data::pin::PinPlan(vec![None, None]);
        let (set, _rx, _free) = StreamSet::spawn(socks, &plan, 1024, |ctx, ()| {
            if ctx.id == 1 {
                return Ok(1u16);
            }
            // Busy for 50 ms of its own CPU, then fail.
            let start = crate::os::cpu::thread();
            while crate::os::cpu::thread_since(start).total_us() < 50_000 {
                std::hint::black_box(0u64.wrapping_add(1));
            }
            Err(Error::Test("stream-0: boom".into()))
        })
        .expect("spawned");
        let (outcomes, failed, first) = set.join();
        assert_eq!(outcomes, [1]);
        assert_eq!(first.map(|e| e.to_string()), Some("stream-0: boom".into()));
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, "stream-0");
        assert!(failed[0].1.total_us() >= 50_000, "{:?}", failed[0].1);
    }

    /// A reset read first (the far end's answer) gives way to this end's own failure
    /// that came after it (the socket destroyed here, whose thread woke later); a second
    /// reset does not replace the first.
    #[test]
    fn this_ends_own_failure_is_the_cause_over_a_reset_read_first() {
        let socks = (0..3)
            .map(|_| StreamSocks {
                data: (),
                echo: None,
            })
            .collect();
        let plan = crate::data::pin::PinPlan(vec![None, None, None]);
        // Each stream fails once the one before it has: 0 (a reset), 1 (its own), 2 (a reset).
        let turns: Vec<_> = (0..3)
            .map(|_| crossbeam_channel::bounded::<()>(1))
            .collect();
        let waits: Vec<_> = turns.iter().map(|(_, rx)| rx.clone()).collect();
        let hands: Vec<_> = turns.iter().map(|(tx, _)| tx.clone()).collect();
        let (set, _rx, _free) = StreamSet::spawn(socks, &plan, 1024, move |ctx, ()| {
            let id = usize::from(ctx.id);
            if id > 0 {
                let _ = waits[id].recv();
            }
            let kind = match id {
                1 => std::io::ErrorKind::ConnectionAborted,
                _ => std::io::ErrorKind::ConnectionReset,
            };
            let result: Result<()> = Err(Error::io(format!("stream-{id}: read"), kind.into()));
            if let Some(next) = hands.get(id + 1) {
                let _ = next.send(());
            }
            result
        })
        .expect("spawned");
        while !set.finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let f = set.failure().expect("a failure");
        assert!(f.error.starts_with("stream-1: read"), "{}", f.error);
        assert!(!f.peer_closed);
    }

    #[test]
    fn a_stream_that_stops_between_flushes_still_hands_over_its_records() {
        let ch = BatchChannels::new(1);
        let mut b = Batcher::new(3, ch.tx.clone(), ch.free_rx.clone());
        b.push(1_000, 8192);
        b.flush(1_500, None, false).expect("flushed");
        b.push(2_000, 8192);
        b.push(2_500, 4096);
        drop(b); // an error return: no final flush
        let first = ch.rx.try_recv().expect("the flushed batch");
        assert_eq!((first.records.len(), first.done), (1, false));
        let last = ch.rx.try_recv().expect("the records after the last flush");
        let bytes: u32 = last.records.iter().map(|r| r.bytes).sum();
        assert_eq!((bytes, last.watermark_ns, last.done), (12288, 2_500, true));
        assert!(
            last.early && !first.early,
            "the dropped batcher's batch says it ended early"
        );
        assert!(ch.rx.try_recv().is_err(), "nothing more");

        // Ended early with nothing since its last flush: an empty batch says so.
        let mut b = Batcher::new(1, ch.tx.clone(), ch.free_rx.clone());
        b.push(1_000, 1);
        b.flush(1_000, None, false).expect("flushed");
        drop(b);
        assert!(ch.rx.try_recv().is_ok_and(|b| !b.early));
        let last = ch.rx.try_recv().expect("an empty batch marked early");
        assert!(last.records.is_empty() && last.early && last.done && last.stream == 1);

        // After a final flush, dropping sends nothing.
        let mut b = Batcher::new(0, ch.tx.clone(), ch.free_rx.clone());
        b.push(1_000, 1);
        b.flush(1_000, None, true).expect("flushed");
        drop(b);
        assert!(ch.rx.try_recv().is_ok_and(|b| b.done && !b.early));
        assert!(
            ch.rx.try_recv().is_err(),
            "no empty batch after the final one"
        );
    }
}
