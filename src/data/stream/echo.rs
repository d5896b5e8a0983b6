//! Block RTT, thrulay's way. Every block starts with a 16-byte header (sequence number and
//! the sender's timestamp). The receiver finds headers in its byte stream and echoes the
//! newest one back on its echo connection, at most once per [`ECHO_EVERY_NS`]; the sender
//! reads each echo as it arrives and records `arrival - stamp`, the arrival being the
//! kernel's receive timestamp of the echo (`SO_TIMESTAMPNS`). That RTT includes every queue
//! the block waited in, the sender's socket buffer first of all: it is how an oversized
//! window shows itself.
//!
//! Echoes must be read as they arrive, not only stamped: echoes left unread are merged by
//! the kernel into one receive buffer that carries the newest one's arrival stamp
//! (`tcp_try_coalesce`), so the older ones' RTTs would read long. The single engine's
//! `poll()` reads them at once; a blocking sender's thread cannot while it waits in
//! `write()`, so the process's `echo` thread reads them for it ([`EchoReader`]). An echo
//! that was merged all the same (a reader held up for more than [`ECHO_EVERY_NS`]) is left
//! out, never counted with a stamp that is not its own ([`EchoCollector::coalesced`]).
//!
//! Costs, by design: the receiver does at most one non-blocking `send()` per 5 ms; the
//! sender's `echo` thread one wake-up per echo, or one read per 2.5 ms for all streams when
//! echoes come closer (one `recvmsg()` per echo and one more per stream that finds none, a
//! CLOCK_REALTIME reading), and each stream thread one channel look per [`LOOK_EVERY_NS`].
//!
//! A lost echo connection (closed or reset before the data ended) fails its stream, and so
//! the test, like a lost data connection: a test asked for block RTT, and rows that quietly
//! go `-` would hide that the measurement changed. `--no-echo` runs without it.

use std::io;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::clock::{TOGETHER_NS, read_together};
use super::{TestClock, spawn_named};
use crate::error::{Error, Result};
use crate::os::sys;

/// Header bytes at the start of every block.
pub const HEADER_LEN: usize = 16;
/// A lone stream's receiver echoes at most this often: 200 samples a second. At 1 ms the echoes
/// cost 3 % of a 54 Gbit/s loopback stream (bench-scripts/echo-cost.sh, cubic, 128k); at
/// 5 ms the cost is within run-to-run noise.
pub const ECHO_EVERY_NS: u64 = 5_000_000;
/// The gap between one stream's echoes when several streams echo in one direction: 50
/// samples a second per stream ([`echo_gap_ns`]).
pub const ECHO_GAP_SHARED_NS: u64 = 20_000_000;

/// The least gap between one stream's echoes when `streams` streams echo in one
/// direction: [`ECHO_EVERY_NS`] for one, [`ECHO_GAP_SHARED_NS`] for more. Every echo wakes
/// the sender's `echo` thread; on a saturated two-core loopback, echoes every 5 ms cost
/// 128k × 2 four to six percent of its rate, every 10 ms about three, every 20 ms nothing
/// measurable, and one stream's every 5 ms nothing measurable (echo-cost.sh).
pub fn echo_gap_ns(streams: usize) -> u64 {
    match streams {
        0 | 1 => ECHO_EVERY_NS,
        _ => ECHO_GAP_SHARED_NS,
    }
}

/// Writes block `seq`'s header, stamped `stamp_ns` since the start, into `block`; nothing
/// into a block shorter than the header (an iperf3 peer's, which has no echoes to read it).
#[inline]
pub fn stamp(block: &mut [u8], seq: u64, stamp_ns: u64) {
    if block.len() < HEADER_LEN {
        return;
    }
    block[..8].copy_from_slice(&seq.to_le_bytes());
    block[8..HEADER_LEN].copy_from_slice(&stamp_ns.to_le_bytes());
}

fn decode(h: &[u8; HEADER_LEN]) -> (u64, u64) {
    let seq = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
    let stamp = u64::from_le_bytes(h[8..].try_into().expect("8 bytes"));
    (seq, stamp)
}

/// Receiver side: follows block boundaries through arbitrary `read()` chunks and keeps the
/// newest complete header; sends it back without ever blocking.
pub struct HeaderEcho {
    block: usize,
    pos: usize,
    hdr: [u8; HEADER_LEN],
    /// The current block's header bytes were all read, none skipped ([`HeaderEcho::skip`]).
    hdr_whole: bool,
    newest: Option<[u8; HEADER_LEN]>,
    /// Blocks begun so far (the current block's sequence number is this less one).
    blocks: u64,
    /// The first block whose header carried another block's sequence number: (block, the
    /// number it carried).
    mismatch: Option<(u64, u64)>,
    pending: [u8; HEADER_LEN],
    pending_len: usize,
    next_echo_ns: u64,
    /// The least gap between two echoes.
    gap_ns: u64,
}

impl HeaderEcho {
    pub fn new(block: usize) -> Self {
        HeaderEcho {
            block,
            pos: 0,
            hdr: [0; HEADER_LEN],
            hdr_whole: true,
            newest: None,
            blocks: 0,
            mismatch: None,
            pending: [0; HEADER_LEN],
            pending_len: 0,
            next_echo_ns: 0,
            gap_ns: ECHO_EVERY_NS,
        }
    }

    /// The same tracker echoing at most once per `gap_ns` (see [`echo_gap_ns`]).
    pub fn with_gap(mut self, gap_ns: u64) -> Self {
        self.gap_ns = gap_ns;
        self
    }

    /// Feeds the bytes of one `read()`.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.pos < HEADER_LEN {
                if self.pos == 0 {
                    self.hdr_whole = true;
                    self.blocks += 1;
                }
                let take = (HEADER_LEN - self.pos).min(chunk.len());
                self.hdr[self.pos..self.pos + take].copy_from_slice(&chunk[..take]);
                self.pos += take;
                chunk = &chunk[take..];
                if self.pos == HEADER_LEN && self.hdr_whole {
                    self.check_header();
                }
            }
            let skip = (self.block - self.pos).min(chunk.len());
            self.pos += skip;
            chunk = &chunk[skip..];
            if self.pos == self.block {
                self.pos = 0;
            }
        }
    }

    /// A whole header was read: it is the newest unless it carries another block's
    /// sequence number (data changed in flight: a `-Z sendfile` region rewritten while the
    /// kernel still held its page), which is never echoed and is kept for
    /// [`HeaderEcho::mismatch`].
    fn check_header(&mut self) {
        let (seq, _) = decode(&self.hdr);
        let block = self.blocks - 1;
        if seq == block {
            self.newest = Some(self.hdr);
        } else {
            self.mismatch.get_or_insert((block, seq));
        }
    }

    #[cfg(test)]
    /// The first block whose header carried another block's sequence number, and the
    /// number it carried: the bytes that arrived are not the bytes that were sent.
    pub fn mismatch(&self) -> Option<(u64, u64)> {
        self.mismatch
    }

    /// Stream `id`'s error once a header did not match its block ([`HeaderEcho::mismatch`]).
    pub fn changed_in_flight(&self, id: u16) -> Option<crate::error::Error> {
        self.mismatch.map(|(block, carried)| {
            crate::error::Error::Test(format!(
                "stream-{id}: block {block} arrived with block {carried}'s header: the bytes \
                 changed in flight (a -Z buffer rewritten while the kernel still held its \
                 pages, or a block the sender skipped)"
            ))
        })
    }

    /// Advances over `n` bytes the kernel consumed without copying them out
    /// (`--skip-rx-copy`): a header among them is not echoed.
    pub fn skip(&mut self, mut n: usize) {
        while n > 0 {
            if self.pos == 0 {
                self.blocks += 1;
            }
            if self.pos < HEADER_LEN {
                self.hdr_whole = false;
            }
            let take = (self.block - self.pos).min(n);
            self.pos += take;
            n -= take;
            if self.pos == self.block {
                self.pos = 0;
            }
        }
    }

    /// How many bytes a `--skip-rx-copy` receiver should copy out next to see a header
    /// (`Some(n)`, up to the end of the header), or may skip before the next block starts
    /// (`None`: skip up to [`HeaderEcho::to_next_block`]), given that an echo is due at
    /// `t_ns`. A header partly copied is always finished.
    pub fn header_read(&self, t_ns: u64) -> Option<usize> {
        let mid_header = self.pos > 0 && self.pos < HEADER_LEN && self.hdr_whole;
        let at_start_and_due = self.pos == 0 && t_ns >= self.next_echo_ns;
        (mid_header || at_start_and_due).then(|| HEADER_LEN - self.pos)
    }

    /// True when an echo is due at `t_ns` (a receiver skipping copies then stops at the
    /// next block's start to copy its header).
    pub fn due(&self, t_ns: u64) -> bool {
        t_ns >= self.next_echo_ns
    }

    /// Bytes to the start of the next block.
    pub fn to_next_block(&self) -> usize {
        self.block - self.pos
    }

    /// Echoes the newest header if it is time; never blocks. A partly sent echo is finished
    /// before any other, so the return stream stays aligned. A full return path skips the
    /// echo; an error means the echo connection is gone.
    pub fn maybe_echo(&mut self, sock: &impl AsFd, t_ns: u64) -> io::Result<()> {
        if self.pending_len > 0 {
            let off = HEADER_LEN - self.pending_len;
            match sys::send_nowait(sock.as_fd(), &self.pending[off..]) {
                Ok(n) => self.pending_len -= n.min(self.pending_len),
                Err(e) => return full_or(e),
            }
            if self.pending_len > 0 {
                return Ok(());
            }
        }
        if t_ns < self.next_echo_ns {
            return Ok(());
        }
        let Some(h) = self.newest.take() else {
            return Ok(());
        };
        self.next_echo_ns = t_ns + self.gap_ns;
        match sys::send_nowait(sock.as_fd(), &h) {
            Ok(n) if n == HEADER_LEN => {}
            Ok(n) => {
                self.pending = h;
                self.pending_len = HEADER_LEN - n;
            }
            Err(e) => return full_or(e),
        }
        Ok(())
    }
}

/// The error of a stream whose echo connection is gone.
pub fn lost(id: u16, e: io::Error) -> Error {
    let why = format!("{e}; block RTT needs it (--no-echo runs without)");
    Error::io(
        format!("stream-{id}: the echo connection failed"),
        io::Error::new(e.kind(), why),
    )
}

/// The error of stream `id`, one of whose connections failed with `first`. When that is
/// only the far end closing or resetting it, an error of this end's own that either of the
/// stream's connections holds is the cause instead: `data` (with the operation that uses
/// it, "write" or "read") or the echo connection (`echo`, whose thread may have seen the
/// error first: `reader`). A far end whose stream failed on one connection closes the
/// other too, and that may be what this end saw first (`ss -K` on the echo connection
/// here: 3 runs in 6 named the data write's "connection reset by peer").
pub(crate) fn cause_of(
    id: u16,
    first: Error,
    data: (&std::net::TcpStream, &str),
    echo: Option<&std::net::TcpStream>,
    reader: Option<&mut EchoReader>,
) -> Error {
    if !first.peer_closed() {
        return first;
    }
    let own = |e: &io::Error| !crate::error::closed_by_peer(e);
    let (sock, op) = data;
    if let Some(e) = sock.take_error().ok().flatten().filter(own) {
        return Error::io(format!("stream-{id}: {op}"), e);
    }
    let seen = reader
        .and_then(|r| r.shared.failed.lock().take())
        .filter(own);
    let pending = || echo.and_then(|s| s.take_error().ok().flatten()).filter(own);
    match seen.or_else(pending) {
        Some(e) => lost(id, e),
        None => first,
    }
}

/// A would-block is a full path (skip); anything else is the error.
fn full_or(e: io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
        _ => Err(e),
    }
}

/// How often a blocking sender's stream thread takes the RTTs its [`EchoReader`] measured:
/// it only bounds how long a sample waits to be recorded (the arrival is the kernel's).
pub const LOOK_EVERY_NS: u64 = ECHO_EVERY_NS;

/// Sender side: reassembles echoed headers from non-blocking reads, to be called when the
/// echo socket is readable. With [`EchoCollector::stamp_arrivals`] on, each echo's arrival
/// is the kernel's receive timestamp of the segment that completed it, so a read a little
/// late is as exact as one at once; without it (or on a kernel that gives no stamp) the
/// arrival is the time of the read.
#[derive(Default)]
pub struct EchoCollector {
    partial: [u8; HEADER_LEN],
    have: usize,
    buf: Vec<u8>,
    kernel_stamps: bool,
    /// Echoes whose arrival came from the kernel's stamp, and from the look's time.
    pub stamped: u64,
    pub unstamped: u64,
    /// Stamped echoes left out: read from a buffer a later echo was merged into, so the
    /// stamp was the later one's arrival (counted in `stamped` too).
    pub coalesced: u64,
}

impl EchoCollector {
    pub fn new() -> Self {
        EchoCollector {
            buf: vec![0; 4096],
            ..EchoCollector::default()
        }
    }

    /// Asks the kernel to stamp the echo socket's arrivals (`SO_TIMESTAMPNS`); a kernel that
    /// refuses leaves the collector timing echoes by its looks.
    pub fn stamp_arrivals(&mut self, sock: &impl AsFd) -> io::Result<()> {
        sys::set_rx_timestamps(sock.as_fd())?;
        self.kernel_stamps = true;
        Ok(())
    }

    /// Reads whatever echoes are queued (never blocks) and calls `on_rtt(rtt_ns)` for each:
    /// from the block's stamp to the echo's arrival (the kernel's stamp, placed on the
    /// test clock, or the look's time), leaving out stamped echoes a later one was merged
    /// with. `now_ns` reads the test clock. An error when the echo connection was closed
    /// or failed.
    pub fn drain(
        &mut self,
        sock: &impl AsFd,
        now_ns: impl Fn() -> u64,
        mut on_rtt: impl FnMut(u64),
    ) -> io::Result<()> {
        // The look's time on the test clock and on CLOCK_REALTIME, read together once the
        // first echo is in ([`read_together`]; a stamp `d` ns before the second arrived `d` ns
        // before the first). Read apart, a thread preempted between them would place
        // arrivals early by the preemption, and short RTTs would read 0.
        let mut look: Option<(u64, u64)> = None; // (realtime, test clock)
        // The newest kernel-stamped echo (its segment's stamp, its RTT), held until a read
        // shows that no later echo shares its segment's stamp.
        let mut held: Option<(u64, u64)> = None;
        loop {
            // With kernel stamps, read one echo at a time, so each gets its own segment's
            // stamp (the kernel reports the last segment a read touched).
            let want = if self.kernel_stamps {
                HEADER_LEN - self.have
            } else {
                self.buf.len()
            };
            let Some((n, stamp)) = self.read(sock, want)? else {
                break;
            };
            if n == 0 {
                return Err(closed(sock));
            }
            // Echoes that waited unread in the receive queue were merged into one buffer,
            // which carries the newest one's arrival: only that one's stamp is its own.
            if let (Some(k), Some((hk, _))) = (stamp, held)
                && k == hk
            {
                held = None;
                self.coalesced += 1;
            }
            let (real, mono) = *look.get_or_insert_with(|| {
                read_together(sys::realtime_ns, &now_ns, |ns| ns > TOGETHER_NS)
            });
            let arrival_ns = match stamp {
                Some(k) => mono.saturating_sub(real.saturating_sub(k)),
                None => mono,
            };
            self.headers(n, arrival_ns, stamp, &mut held, &mut on_rtt);
            if n < want {
                break;
            }
        }
        if let Some((_, r)) = held {
            on_rtt(r);
        }
        Ok(())
    }

    /// One non-blocking read of up to `want` bytes, with the kernel's stamp when asked
    /// for; `None` when nothing is queued.
    fn read(&mut self, sock: &impl AsFd, want: usize) -> io::Result<Option<(usize, Option<u64>)>> {
        let got = if self.kernel_stamps {
            sys::recv_stamped_nowait(sock.as_fd(), &mut self.buf[..want])
        } else {
            sys::recv_nowait(sock.as_fd(), &mut self.buf[..want]).map(|n| (n, None))
        };
        match got {
            Ok(read) => Ok(Some(read)),
            Err(e) => full_or(e).map(|()| None),
        }
    }

    /// The `n` bytes just read, joined to the partial header before them: each whole
    /// header's RTT to `on_rtt`, a kernel-stamped one held in `held` until a later read
    /// shows no echo after it shares its stamp.
    fn headers(
        &mut self,
        n: usize,
        arrival_ns: u64,
        stamp: Option<u64>,
        held: &mut Option<(u64, u64)>,
        on_rtt: &mut impl FnMut(u64),
    ) {
        let mut chunk = &self.buf[..n];
        while !chunk.is_empty() {
            let take = (HEADER_LEN - self.have).min(chunk.len());
            self.partial[self.have..self.have + take].copy_from_slice(&chunk[..take]);
            self.have += take;
            chunk = &chunk[take..];
            if self.have < HEADER_LEN {
                continue;
            }
            self.have = 0;
            let (_seq, stamp_ns) = decode(&self.partial);
            let rtt_ns = arrival_ns.saturating_sub(stamp_ns);
            match stamp {
                Some(k) => {
                    self.stamped += 1;
                    if let Some((_, r)) = held.replace((k, rtt_ns)) {
                        on_rtt(r);
                    }
                }
                None => {
                    self.unstamped += 1;
                    on_rtt(rtt_ns);
                }
            }
        }
    }
}

/// The error of an echo connection that read EOF: a socket destroyed here reads as EOF
/// before its error.
fn closed(sock: &impl AsFd) -> io::Error {
    socket2::SockRef::from(sock)
        .take_error()
        .ok()
        .flatten()
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the receiver closed it"))
}

/// How long the `echo` thread's `poll()` waits at most while it serves streams: streams
/// that come or go ring its bell, so this only bounds how long a missed ring could go
/// unseen. With no stream it waits for the bell alone.
const HUB_WAKE_MS: i32 = 200;
/// Least time between two reads of the `echo` thread while echoes come closer than this:
/// half the least gap between one stream's echoes, so each is read before the next can
/// arrive, and however many streams it serves the thread reads at most about 400 times a
/// second (a sleep before a read is a second wake-up). Sparser echoes wake it once each:
/// sleeping out the gap after every read would double its wake-ups.
const HUB_GAP: Duration = Duration::from_nanos(ECHO_EVERY_NS / 2);
/// Echoes held for a stream thread (it takes them every [`LOOK_EVERY_NS`] or
/// [`super::WAKE`] at most: this is seconds of them).
const READER_QUEUE: usize = 1024;

/// A blocking sender's echoes, read soon after they arrive by the process's `echo` thread,
/// so that none waits unread while its stream thread sits in a `write()` that waits for
/// buffer space. Echoes that wait unread are merged by the kernel into one buffer stamped
/// with the newest one's arrival, so even kernel stamps could not time them (lab: 80 % of
/// the threads engine's echoes were merged, and its block-RTT median read 37 ms above the
/// single engine's, whose `poll()` reads each echo at once). One thread serves every
/// stream and wakes at most once per [`HUB_GAP`]: a thread per stream woke once per echo,
/// 1 600 times a second at `-P 8`, and cost a saturated two-core loopback test ~10 %.
/// The stream thread takes the RTTs with [`EchoReader::take`] between writes.
pub struct EchoReader {
    rtts: crossbeam_channel::Receiver<u64>,
    shared: Arc<Shared>,
    next_look_ns: u64,
}

/// What a stream and the `echo` thread share about its echo connection.
#[derive(Default)]
struct Shared {
    /// Why the echo connection failed, once it has.
    failed: Mutex<Option<io::Error>>,
    /// The stream takes no more echoes: the `echo` thread lets go of the connection.
    stop: AtomicBool,
}

/// A stream's echo connection, as the `echo` thread serves it.
struct Lane {
    sock: TcpStream,
    clock: TestClock,
    rtts: crossbeam_channel::Sender<u64>,
    shared: Arc<Shared>,
    collector: EchoCollector,
}

/// The `echo` thread's inbox: lanes to add, and its bell once it runs.
struct Hub {
    state: Mutex<HubState>,
}

struct HubState {
    lanes: Vec<Lane>,
    /// Written to when a lane comes or goes, to wake the thread from `poll()`; `None`
    /// until the thread runs.
    bell: Option<UnixStream>,
}

static HUB: Hub = Hub {
    state: Mutex::new(HubState {
        lanes: Vec::new(),
        bell: None,
    }),
};

impl Hub {
    /// Wakes the `echo` thread from `poll()`. A full bell already will.
    fn ring(state: &HubState) {
        if let Some(mut bell) = state.bell.as_ref() {
            let _ = bell.write(&[1]);
        }
    }
}

impl EchoReader {
    /// Hands a second handle of stream `id`'s echo connection to the `echo` thread (started
    /// on first use), which times arrivals on `clock` (call after the start).
    pub(crate) fn start(id: u16, sock: &TcpStream, clock: TestClock) -> Result<EchoReader> {
        let sock = sock.try_clone().map_err(|e| {
            Error::io(
                format!("stream-{id}: a second handle on the echo connection"),
                e,
            )
        })?;
        let mut collector = EchoCollector::new();
        // A kernel that refuses leaves the arrival to the read, which is prompt here.
        let _ = collector.stamp_arrivals(&sock);
        let (tx, rtts) = crossbeam_channel::bounded(READER_QUEUE);
        let shared = Arc::<Shared>::default();
        let mut state = HUB.state.lock();
        if state.bell.is_none() {
            let (bell, hears) =
                bell().map_err(|e| Error::io(format!("stream-{id}: the echo thread's bell"), e))?;
            spawn_named("echo".into(), move || serve(&HUB, hears))?;
            state.bell = Some(bell);
        }
        state.lanes.push(Lane {
            sock,
            clock,
            rtts: tx,
            shared: Arc::clone(&shared),
            collector,
        });
        Hub::ring(&state);
        Ok(EchoReader {
            rtts,
            shared,
            next_look_ns: 0,
        })
    }

    /// True when a look is due at `now_ns` (once per [`LOOK_EVERY_NS`]).
    #[inline]
    pub fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.next_look_ns
    }

    /// Calls `on_rtt(rtt_ns)` for every echo read since the last call; an error once the
    /// echo connection has failed.
    pub fn take(&mut self, now_ns: u64, mut on_rtt: impl FnMut(u64)) -> io::Result<()> {
        self.next_look_ns = now_ns + LOOK_EVERY_NS;
        self.rtts.try_iter().for_each(&mut on_rtt);
        match self.shared.failed.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Takes no more echoes: the `echo` thread wakes and closes its handle (the connection
    /// stays open as long as the caller's handle does).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        Hub::ring(&HUB.state.lock());
    }
}

impl Drop for EchoReader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `echo` thread's bell: a non-blocking pair, the ringing end and the end it hears on.
fn bell() -> io::Result<(UnixStream, UnixStream)> {
    let (bell, hears) = UnixStream::pair()?;
    bell.set_nonblocking(true)?;
    hears.set_nonblocking(true)?;
    Ok((bell, hears))
}

/// The `echo` thread: waits for echoes on every stream's connection and reads them as they
/// arrive (at most once per [`HUB_GAP`] while they come closer); a failed connection is
/// its stream's error. `hears` wakes it when a stream comes or goes; with none it waits
/// for that alone.
fn serve(hub: &Hub, mut hears: UnixStream) {
    let mut lanes: Vec<Lane> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut last_woke: Option<Instant> = None;
    loop {
        lanes.append(&mut hub.state.lock().lanes);
        lanes.retain(|l| !l.shared.stop.load(Ordering::Relaxed));
        fds.clear();
        fds.push(sys::pollfd(hears.as_raw_fd(), libc::POLLIN));
        fds.extend(
            lanes
                .iter()
                .map(|l| sys::pollfd(l.sock.as_raw_fd(), libc::POLLIN)),
        );
        let wait_ms = if lanes.is_empty() { -1 } else { HUB_WAKE_MS };
        match sys::poll(&mut fds, wait_ms) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                for l in &lanes {
                    *l.shared.failed.lock() = Some(io::Error::new(e.kind(), e.to_string()));
                    l.shared.stop.store(true, Ordering::Relaxed);
                }
                // Not a spin if poll() keeps failing with no stream left to fail.
                std::thread::sleep(HUB_GAP);
                continue;
            }
        }
        if fds[0].revents != 0 {
            while hears.read(&mut [0; 64]).is_ok_and(|n| n > 0) {}
        }
        let woke = Instant::now();
        let close = last_woke.is_some_and(|w| woke - w < HUB_GAP);
        last_woke = Some(woke);
        for (l, fd) in lanes.iter_mut().zip(&fds[1..]) {
            if fd.revents == 0 {
                continue;
            }
            let clock = l.clock;
            let rtts = &l.rtts;
            // A full queue (a stream thread that stopped taking) drops samples, never blocks.
            let now_ns = || clock.ns(Instant::now());
            if let Err(e) = l.collector.drain(&l.sock, now_ns, |rtt_ns| {
                let _ = rtts.try_send(rtt_ns);
            }) {
                *l.shared.failed.lock() = Some(e);
                l.shared.stop.store(true, Ordering::Relaxed);
            }
        }
        if let Some(rest) = HUB_GAP.checked_sub(woke.elapsed()).filter(|_| close) {
            std::thread::sleep(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn blocks(n: u64, block: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for seq in 0..n {
            let mut b = vec![0xa5u8; block];
            stamp(&mut b, seq, 1000 + seq);
            out.extend(b);
        }
        out
    }

    #[test]
    fn headers_are_found_across_any_chunking() {
        let data = blocks(5, 40);
        for chunk in [1, 7, 16, 39, 40, 41, 200] {
            let mut echo = HeaderEcho::new(40);
            let mut seen = Vec::new();
            for c in data.chunks(chunk) {
                echo.feed(c);
                if let Some(h) = echo.newest {
                    seen.push(decode(&h));
                }
            }
            assert_eq!(seen.last(), Some(&(4, 1004)), "chunk {chunk}");
            seen.dedup();
            if chunk <= 40 {
                assert_eq!(
                    seen,
                    (0..5).map(|s| (s, 1000 + s)).collect::<Vec<_>>(),
                    "chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn a_receiver_skipping_copies_copies_only_the_headers_it_echoes() {
        let data = blocks(4, 40);
        let mut echo = HeaderEcho::new(40);
        let mut at = 0;
        let mut copied = 0;
        // Not due: everything may be skipped, and no header is seen.
        echo.next_echo_ns = 100;
        assert_eq!(echo.header_read(0), None);
        echo.skip(50);
        at += 50;
        assert!(echo.newest.is_none());
        // Due: skip to the next block's start, then copy its 16 header bytes, in pieces.
        assert_eq!(echo.header_read(100), None);
        let to = echo.to_next_block();
        assert_eq!(to, 30);
        echo.skip(to);
        at += to;
        assert_eq!(echo.header_read(100), Some(HEADER_LEN));
        echo.feed(&data[at..at + 5]);
        at += 5;
        copied += 5;
        assert_eq!(
            echo.header_read(0),
            Some(HEADER_LEN - 5),
            "a started header is finished"
        );
        echo.feed(&data[at..at + 11]);
        at += 11;
        copied += 11;
        assert_eq!(echo.newest.map(|h| decode(&h)), Some((2, 1002)));
        assert_eq!(copied, HEADER_LEN);
        // A header skipped part-way is never echoed.
        let mut echo = HeaderEcho::new(40);
        echo.skip(3);
        echo.feed(&data[3..40]);
        assert!(echo.newest.is_none());
        let _ = at;
    }

    /// A header that is not its block's (data changed in flight) is never echoed, and the
    /// first such block is kept, whether its header was copied or the bytes before skipped.
    #[test]
    fn a_header_carrying_another_blocks_sequence_is_never_echoed() {
        let mut data = blocks(4, 40);
        stamp(&mut data[80..], 6, 1006);
        for skip_first in [false, true] {
            let mut echo = HeaderEcho::new(40);
            match skip_first {
                false => echo.feed(&data[..40]),
                true => echo.skip(40),
            }
            echo.feed(&data[40..80]);
            assert_eq!(echo.newest.map(|h| decode(&h)), Some((1, 1001)));
            echo.newest = None;
            echo.feed(&data[80..120]);
            assert_eq!(echo.newest, None, "block 2 came with block 6's header");
            assert_eq!(echo.mismatch(), Some((2, 6)));
            echo.feed(&data[120..]);
            assert_eq!(echo.newest.map(|h| decode(&h)), Some((3, 1003)));
            assert_eq!(echo.mismatch(), Some((2, 6)), "the first is kept");
        }
    }

    #[test]
    fn echoes_round_trip_over_a_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = l.accept().unwrap();
        sender.write_all(&blocks(3, 64)).unwrap();
        let mut buf = vec![0u8; 64 * 3];
        receiver.read_exact(&mut buf).unwrap();
        let mut echo = HeaderEcho::new(64);
        echo.feed(&buf);
        echo.maybe_echo(&receiver, 5_000_000).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut collector = EchoCollector::new();
        let mut rtts = Vec::new();
        collector
            .drain(&sender, || 10_000, |r| rtts.push(r))
            .unwrap();
        // Only the newest header (block 2, stamped 1002) is echoed.
        assert_eq!(rtts, vec![10_000 - 1002]);
        // Within ECHO_EVERY_NS nothing more is sent even with a new header (block 3's).
        let mut next = vec![0xa5u8; 64];
        stamp(&mut next, 3, 1003);
        echo.feed(&next);
        assert!(echo.newest.is_some() && echo.mismatch().is_none());
        echo.maybe_echo(&receiver, 5_000_000 + ECHO_EVERY_NS - 1)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        collector
            .drain(&sender, || 20_000, |r| rtts.push(r))
            .unwrap();
        assert_eq!(rtts.len(), 1);
    }

    /// With several streams a receiver echoes once per [`ECHO_GAP_SHARED_NS`], not once per
    /// [`ECHO_EVERY_NS`].
    #[test]
    fn several_streams_echo_less_often() {
        assert_eq!(echo_gap_ns(1), ECHO_EVERY_NS);
        assert_eq!(echo_gap_ns(2), ECHO_GAP_SHARED_NS);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (receiver, _) = l.accept().unwrap();
        let mut echo = HeaderEcho::new(64).with_gap(echo_gap_ns(2));
        let mut echoed = 0;
        let mut collector = EchoCollector::new();
        // A block every ms for 60 ms: echoes at 0, 20 and 40 ms.
        for seq in 0..60u64 {
            let mut block = vec![0u8; 64];
            stamp(&mut block, seq, seq * 1_000_000);
            echo.feed(&block);
            echo.maybe_echo(&receiver, seq * 1_000_000).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        collector
            .drain(&sender, || 100_000_000, |_| echoed += 1)
            .unwrap();
        assert_eq!(echoed, 3);
    }

    /// An echo read 100 ms after it arrived (as after a blocked write) is timed by the
    /// kernel's arrival stamp, not by the late look.
    #[test]
    fn a_late_look_does_not_add_to_a_kernel_stamped_rtt() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (receiver, _) = l.accept().unwrap();
        let t0 = std::time::Instant::now();
        let ns = || t0.elapsed().as_nanos() as u64;
        let mut collector = EchoCollector::new();
        collector.stamp_arrivals(&sender).unwrap();
        let mut echo = HeaderEcho::new(64);
        let mut block = vec![0u8; 64];
        // The kernel turns receive stamping on asynchronously (a static key flipped by a
        // work item): wait until an echo comes back stamped.
        let mut at = ECHO_EVERY_NS;
        for _ in 0..100 {
            stamp(&mut block, echo.blocks, ns());
            echo.feed(&block);
            echo.maybe_echo(&receiver, at).unwrap();
            at += ECHO_EVERY_NS;
            std::thread::sleep(std::time::Duration::from_millis(10));
            collector.drain(&sender, ns, |_| {}).unwrap();
            if collector.stamped > 0 {
                break;
            }
        }
        assert!(collector.stamped > 0, "no echo was stamped by the kernel");
        let stamped = collector.stamped;
        stamp(&mut block, echo.blocks, ns());
        echo.feed(&block);
        echo.maybe_echo(&receiver, at).unwrap();
        at += ECHO_EVERY_NS;
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut rtts = Vec::new();
        collector.drain(&sender, ns, |r| rtts.push(r)).unwrap();
        assert_eq!(rtts.len(), 1);
        assert_eq!(collector.stamped, stamped + 1);
        assert!(
            rtts[0] < 50_000_000,
            "rtt {} ns includes the late look",
            rtts[0]
        );
        // Without the kernel's stamp, the same late look is the arrival.
        let mut plain = EchoCollector::new();
        stamp(&mut block, echo.blocks, ns());
        echo.feed(&block);
        echo.maybe_echo(&receiver, at).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        plain.drain(&sender, ns, |r| rtts.push(r)).unwrap();
        assert_eq!(plain.unstamped, 1);
        assert!(rtts[1] >= 100_000_000, "{rtts:?}");
    }

    /// A stream that comes while the `echo` thread waits on another has its echoes read at
    /// once, and one that stops is let go at once: neither waits out the thread's `poll()`
    /// ([`HUB_WAKE_MS`]).
    #[test]
    fn the_echo_thread_wakes_for_streams_that_come_and_go() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let clock = TestClock { t0: Instant::now() };
        let quiet = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_quiet_far, _) = l.accept().unwrap();
        let _quiet_reader = EchoReader::start(0, &quiet, clock).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = l.accept().unwrap();
        let mut reader = EchoReader::start(1, &sender, clock).unwrap();
        let prompt = Duration::from_millis(HUB_WAKE_MS as u64 / 2);

        let mut h = [0u8; HEADER_LEN];
        stamp(&mut h, 0, clock.ns(Instant::now()));
        let sent = Instant::now();
        receiver.write_all(&h).unwrap();
        let mut rtts = Vec::new();
        while rtts.is_empty() && sent.elapsed() < 2 * prompt {
            std::thread::sleep(Duration::from_millis(2));
            reader
                .take(clock.ns(Instant::now()), |r| rtts.push(r))
                .unwrap();
        }
        assert!(
            sent.elapsed() < prompt,
            "the new stream's echo was read after {:?}",
            sent.elapsed()
        );
        assert_eq!(rtts.len(), 1);

        drop(reader);
        drop(sender);
        receiver.set_read_timeout(Some(2 * prompt)).unwrap();
        let stopped = Instant::now();
        assert_eq!(
            receiver.read(&mut [0; 16]).unwrap(),
            0,
            "the echo connection closed"
        );
        assert!(
            stopped.elapsed() < prompt,
            "the stopped stream's connection was let go after {:?}",
            stopped.elapsed()
        );
    }

    /// Echoes that wait unread are merged by the kernel into one buffer stamped with the
    /// newest one's arrival: only that one is counted, never the older ones with its stamp.
    #[test]
    fn merged_echoes_are_left_out_not_timed_by_the_newest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = l.accept().unwrap();
        receiver.set_nodelay(true).unwrap();
        let t0 = std::time::Instant::now();
        let ns = || t0.elapsed().as_nanos() as u64;
        let mut collector = EchoCollector::new();
        collector.stamp_arrivals(&sender).unwrap();
        let mut h = [0u8; HEADER_LEN];
        // Until the kernel stamps (see a_late_look_does_not_add_to_a_kernel_stamped_rtt).
        for _ in 0..100 {
            stamp(&mut h, 0, ns());
            receiver.write_all(&h).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            collector.drain(&sender, ns, |_| {}).unwrap();
            if collector.stamped > 0 {
                break;
            }
        }
        assert!(collector.stamped > 0, "no echo was stamped by the kernel");
        // Four echoes 30 ms apart, read together after the last.
        for seq in 1..=4 {
            stamp(&mut h, seq, ns());
            receiver.write_all(&h).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        let mut rtts = Vec::new();
        collector.drain(&sender, ns, |r| rtts.push(r)).unwrap();
        eprintln!(
            "4 echoes read late: RTTs {rtts:?} ns, {} merged",
            collector.coalesced
        );
        assert!(
            rtts.iter().all(|r| *r < 20_000_000),
            "an echo was timed by a later one's arrival: {rtts:?}"
        );
        assert_eq!(rtts.len() as u64 + collector.coalesced, 4);
        assert!(
            collector.coalesced > 0,
            "the kernel merged none of 4 unread echoes: nothing was tested"
        );
    }

    #[test]
    fn a_closed_or_reset_echo_connection_is_an_error_not_silence() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (receiver, _) = l.accept().unwrap();
        drop(receiver);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut collector = EchoCollector::new();
        let err = collector.drain(&sender, || 1, |_| {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        // The other way: echoing into a connection the sender has reset.
        let sender2 = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (receiver2, _) = l.accept().unwrap();
        socket2::SockRef::from(&sender2)
            .set_linger(Some(std::time::Duration::ZERO))
            .unwrap();
        drop(sender2);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut echo = HeaderEcho::new(64);
        echo.feed(&blocks(1, 64));
        assert!(echo.maybe_echo(&receiver2, 5_000_000).is_err());
    }
}
