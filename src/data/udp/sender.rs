//! The sending UDP stream thread: paced batches of datagrams until the run time, one
//! clock reading to stamp a batch and one to record it, `sendmmsg` with UDP GSO where the
//! kernel and the path take it (plain `sendmmsg` otherwise).
//!
//! A refused send (`ECONNREFUSED`: the peer's port was closed when an earlier datagram
//! arrived) and a full device queue (`ENOBUFS`) are counted and the same datagrams are
//! sent again: neither fails the test, and a sequence is used only by a datagram that left.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::MAX_DATAGRAM;
use super::wire::{Format, Header};
use crate::data::pace::{self, Pacer};
use crate::data::page_buf::PageBuf;
use crate::data::stream::{Awake, Batcher, StreamCtx, TestClock, WAKE, aborted, wait_paced};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::{self, CpuTime};
use crate::os::sys;

/// What a UDP sender is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSend {
    /// Bits/s of UDP payload; `None`: as fast as the socket takes them.
    pub rate_bps: Option<u64>,
    /// `-b RATE/BURST`: datagrams sent back to back, then a wait that keeps the rate.
    pub burst: Option<u32>,
    /// Payload bytes per datagram (`-l`, or [`crate::wire::params::datagram_for_mtu`]).
    pub datagram: usize,
    /// Stop sending this long after the start.
    pub run_time: Duration,
    /// Use UDP GSO where the kernel has it (off: one datagram per message, `--no-gsro`).
    pub gso: bool,
    /// The header each datagram carries (pinperf's, or iperf3's with an iperf3 peer).
    pub wire: Format,
}

/// What a UDP sender did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSendOutcome {
    pub id: u16,
    /// Datagrams and payload bytes that left (sequences 0..datagrams).
    pub datagrams: u64,
    pub bytes: u64,
    /// This thread's CPU from the start to its last send.
    pub cpu: CpuTime,
    /// UDP GSO was used to the end (false: unsupported, or refused and dropped).
    pub gso: bool,
    /// Sends refused with ECONNREFUSED (nobody listened at the peer's port) and with
    /// ENOBUFS (the device queue was full), each retried.
    pub refused: u64,
    pub no_buffer: u64,
    /// Schedule time given up after stalls (see [`crate::data::pace::DEBT`]).
    pub forgiven: Duration,
}

/// Most payload bytes one unpaced batch holds.
const UNPACED_BATCH_BYTES: usize = 512 << 10;
/// Wait after ENOBUFS before sending again.
const NO_BUFFER_PAUSE: Duration = Duration::from_micros(50);

/// Runs one sending UDP stream (call on its own `stream-N` thread).
pub fn send(ctx: StreamCtx, sock: UdpSocket, plan: UdpSend) -> Result<UdpSendOutcome> {
    let dg = plan.datagram;
    let least = plan.wire.header_bytes();
    if !(least..=MAX_DATAGRAM).contains(&dg) {
        return Err(Error::Usage(format!(
            "-l {dg}: a UDP datagram holds {least} to {MAX_DATAGRAM} bytes"
        )));
    }
    ctx.pin()?;
    let mut sender = UdpSender::new(ctx, sock, plan)?;
    let cpu_start = cpu::thread();
    sender.send_until_end()?;
    let t_ns = sender.clock.ns(Instant::now());
    sender.batcher.flush(t_ns, None, true)?;
    let mut out = sender.out;
    out.cpu = cpu::thread_since(cpu_start);
    out.forgiven = sender.pacer.map_or(Duration::ZERO, |p| p.forgiven());
    Ok(out)
}

/// One sending UDP stream's state from its start to its last batch.
struct UdpSender {
    ctx: StreamCtx,
    sock: UdpSocket,
    plan: UdpSend,
    /// Datagrams per GSO message: as many as fit 64 segments and one IP packet.
    segs: usize,
    /// Each batch's datagrams, headers rewritten per batch.
    buf: PageBuf,
    /// This batch's bytes of `buf`: all of it, or what is left of `-n`/`-k`'s budget.
    len: usize,
    batcher: Batcher,
    clock: TestClock,
    pacer: Option<Pacer>,
    end_ns: u64,
    /// Every clock reading, the pacer's wake-ups included, is looked at for a stretch in
    /// which this thread did not run: a sender paused past the stall limit fails the test.
    awake: Awake,
    out: UdpSendOutcome,
}

impl UdpSender {
    /// Sets the socket up, sizes the batch and waits for the test's start.
    fn new(ctx: StreamCtx, sock: UdpSocket, plan: UdpSend) -> Result<UdpSender> {
        let (id, dg) = (ctx.id, plan.datagram);
        sock.set_write_timeout(Some(WAKE))
            .op(|| format!("stream-{id}: set SO_SNDTIMEO"))?;
        if plan.rate_bps.is_some() {
            sys::set_timer_slack(1_000);
        }
        let segs = (MAX_DATAGRAM / dg).min(64);
        let gso = plan.gso && segs > 1 && sys::udp_gso_supported(sock.as_fd());
        // A burst is a batch (or, past what one call sends, a few back to back).
        let per_batch = match (plan.rate_bps, plan.burst) {
            (Some(_), Some(b)) => b as usize,
            (Some(r), None) => (Pacer::bytes_in(r, pace::QUANTUM) as usize / dg).max(1),
            (None, _) => (UNPACED_BATCH_BYTES / dg).max(1),
        }
        .min(sys::MAX_MSGS * segs);
        let burst = u64::from(plan.burst.unwrap_or(1)) * dg as u64;
        let batcher = Batcher::new(id, ctx.batches.clone(), ctx.free.clone());
        // Filled before the start: a batch's megabyte of fresh pages takes milliseconds to
        // fault in, a debt the pacer would then catch up in one burst.
        let buf = PageBuf::filled(per_batch * dg, 0x5a);
        let clock = ctx.wait_start()?;
        Ok(UdpSender {
            pacer: plan
                .rate_bps
                .map(|r| Pacer::from_wake(r, clock.t0).with_burst(burst)),
            end_ns: plan.run_time.as_nanos() as u64,
            awake: Awake::new(clock.ns(Instant::now())),
            out: UdpSendOutcome {
                id,
                datagrams: 0,
                bytes: 0,
                cpu: CpuTime::default(),
                gso,
                refused: 0,
                no_buffer: 0,
                forgiven: Duration::ZERO,
            },
            ctx,
            sock,
            plan,
            segs,
            buf,
            len: per_batch * dg,
            batcher,
            clock,
        })
    }

    /// Paced batches until the test's time is up.
    fn send_until_end(&mut self) -> Result<()> {
        let id = self.ctx.id;
        loop {
            let mut paused = None;
            let awake = &mut self.awake;
            let (ctx, clock, end_ns) = (&self.ctx, &self.clock, self.end_ns);
            let waited = wait_paced(
                self.pacer.as_mut(),
                ctx,
                clock,
                end_ns,
                &mut self.batcher,
                |t| {
                    if let Err(e) = awake.check(id, t) {
                        paused.get_or_insert(e);
                    }
                    None
                },
            )?;
            let stamp_ns = self.clock.ns(Instant::now());
            self.awake.check(id, stamp_ns)?;
            if let Some(e) = paused.take() {
                return Err(e);
            }
            if !waited || stamp_ns >= self.end_ns || !self.grant() {
                return Ok(());
            }
            self.stamp(stamp_ns);
            let off = self.send_batch()?;
            self.count(off)?;
            if off < self.len {
                return Ok(()); // the end came while the batch waited for the socket
            }
        }
    }

    /// `-n`/`-k`: the datagrams of the next batch the budget still holds (false: none);
    /// a whole batch without a budget.
    fn grant(&mut self) -> bool {
        let dg = self.plan.datagram;
        let Some(budget) = &self.ctx.budget else {
            return true;
        };
        self.len = budget.take((self.buf.len() / dg) as u64) as usize * dg;
        if self.len == 0 {
            budget.sender_stopped();
        }
        self.len > 0
    }

    /// The batch's headers: the next sequences, stamped `stamp_ns`.
    fn stamp(&mut self, stamp_ns: u64) {
        let dg = self.plan.datagram;
        for (k, d) in self.buf[..self.len].chunks_mut(dg).enumerate() {
            let h = Header {
                stream: self.ctx.id,
                seq: self.out.datagrams + k as u64,
                send_ns: stamp_ns,
            };
            self.plan.wire.write(&h, d);
        }
    }

    /// Sends the batch; what a refusal or a timeout leaves is sent again until the end.
    /// The bytes that left.
    fn send_batch(&mut self) -> Result<usize> {
        let dg = self.plan.datagram;
        let mut off = 0;
        while off < self.len {
            let msg_len = if self.out.gso { self.segs * dg } else { dg };
            let seg = self.out.gso.then_some(dg as u16);
            match sys::send_datagrams(self.sock.as_fd(), &self.buf[off..self.len], msg_len, seg) {
                Ok(n) => off = (off + n * msg_len).min(self.len),
                Err(e) => {
                    if self.send_failed(e)? {
                        break;
                    }
                }
            }
        }
        Ok(off)
    }

    /// A send that took nothing: counted and retried, or the test's error. Whether the
    /// test's time is up.
    fn send_failed(&mut self, e: std::io::Error) -> Result<bool> {
        let (id, dg) = (self.ctx.id, self.plan.datagram);
        let t_ns = self.clock.ns(Instant::now());
        // A socket that refuses for a while (ENOBUFS, a full buffer) is this thread
        // running, not paused: its readings count.
        self.awake.check(id, t_ns)?;
        match (e.kind(), e.raw_os_error()) {
            (ErrorKind::ConnectionRefused, _) => self.out.refused += 1,
            (_, Some(libc::ENOBUFS)) => {
                self.out.no_buffer += 1;
                std::thread::sleep(NO_BUFFER_PAUSE);
            }
            // The path or the device takes no GSO (a datagram above the path MTU, no
            // checksum offload): send them one by one.
            (_, Some(libc::EINVAL | libc::EIO)) if self.out.gso => self.out.gso = false,
            (ErrorKind::WouldBlock | ErrorKind::TimedOut, _) => {
                self.batcher.flush(t_ns, None, false)?;
            }
            (ErrorKind::Interrupted, _) => {}
            (_, Some(libc::EMSGSIZE)) => {
                return Err(Error::io(
                    format!(
                        "stream-{id}: send a {dg}-byte datagram (too large for this path: a \
                         smaller -l)"
                    ),
                    e,
                ));
            }
            _ => return Err(Error::io(format!("stream-{id}: send"), e)),
        }
        if self.ctx.aborted() {
            return Err(aborted(id));
        }
        Ok(t_ns >= self.end_ns)
    }

    /// The `off` bytes that left: counted, paced, and recorded.
    fn count(&mut self, off: usize) -> Result<()> {
        let dg = self.plan.datagram;
        let sent = off / dg;
        let bytes = (sent * dg) as u64;
        self.out.datagrams += sent as u64;
        self.out.bytes += bytes;
        if let Some(p) = self.pacer.as_mut() {
            p.sent(bytes);
        }
        let t_ns = self.clock.ns(Instant::now());
        self.awake.check(self.ctx.id, t_ns)?;
        if bytes > 0 && self.batcher.push(t_ns, bytes as u32) || t_ns >= self.end_ns {
            if self.ctx.aborted() {
                return Err(aborted(self.ctx.id));
            }
            self.batcher.flush(t_ns, None, false)?;
        }
        Ok(())
    }
}
