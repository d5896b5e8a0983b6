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
use crate::data::stream::{Awake, Batcher, StreamCtx, WAKE, aborted, wait_paced};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::{self, CpuTime};
use crate::os::sys;

/// What a UDP sender is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSend {
    /// Bits/s of UDP payload; `None`: as fast as the socket takes them.
    pub rate_bps: Option<u64>,
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
    let id = ctx.id;
    let dg = plan.datagram;
    let least = plan.wire.header_bytes();
    if !(least..=MAX_DATAGRAM).contains(&dg) {
        return Err(Error::Usage(format!(
            "-l {dg}: a UDP datagram holds {least} to {MAX_DATAGRAM} bytes"
        )));
    }
    ctx.pin()?;
    sock.set_write_timeout(Some(WAKE))
        .op(|| format!("stream-{id}: set SO_SNDTIMEO"))?;
    if plan.rate_bps.is_some() {
        sys::set_timer_slack(1_000);
    }
    // GSO: as many datagrams per message as fit 64 segments and one IP packet.
    let segs = (MAX_DATAGRAM / dg).min(64);
    let mut gso = plan.gso && segs > 1 && sys::udp_gso_supported(sock.as_fd());
    let per_batch = match plan.rate_bps {
        Some(r) => (Pacer::bytes_in(r, pace::QUANTUM) as usize / dg).max(1),
        None => (UNPACED_BATCH_BYTES / dg).max(1),
    }
    .min(sys::MAX_MSGS * segs);
    let mut buf = vec![0x5au8; per_batch * dg];
    let mut batcher = Batcher::new(id, ctx.batches.clone(), ctx.free.clone());

    let clock = ctx.wait_start()?;
    let cpu_start = cpu::thread();
    let mut pacer = plan.rate_bps.map(|r| Pacer::new(r, clock.t0));
    let end_ns = plan.run_time.as_nanos() as u64;
    let mut out = UdpSendOutcome {
        id,
        datagrams: 0,
        bytes: 0,
        cpu: CpuTime::default(),
        gso,
        refused: 0,
        no_buffer: 0,
        forgiven: Duration::ZERO,
    };
    // Every clock reading, the pacer's wake-ups included, is looked at for a stretch in
    // which this thread did not run: a sender paused past the stall limit fails the test.
    let mut awake = Awake::new(clock.ns(Instant::now()));
    let mut paused = None;
    loop {
        let waited = wait_paced(pacer.as_mut(), &ctx, &clock, end_ns, &mut batcher, |t| {
            if let Err(e) = awake.check(id, t) {
                paused.get_or_insert(e);
            }
            None
        })?;
        let stamp_ns = clock.ns(Instant::now());
        awake.check(id, stamp_ns)?;
        if let Some(e) = paused.take() {
            return Err(e);
        }
        if !waited || stamp_ns >= end_ns {
            break;
        }
        for (k, d) in buf.chunks_mut(dg).enumerate() {
            let h = Header {
                stream: id,
                seq: out.datagrams + k as u64,
                send_ns: stamp_ns,
            };
            plan.wire.write(&h, d);
        }
        // Send the batch; what a refusal or a timeout leaves is sent again.
        let mut off = 0;
        while off < buf.len() {
            let msg_len = if gso { segs * dg } else { dg };
            let seg = gso.then_some(dg as u16);
            match sys::send_datagrams(sock.as_fd(), &buf[off..], msg_len, seg) {
                Ok(n) => off = (off + n * msg_len).min(buf.len()),
                Err(e) => {
                    let t_ns = clock.ns(Instant::now());
                    // A socket that refuses for a while (ENOBUFS, a full buffer) is this
                    // thread running, not paused: its readings count.
                    awake.check(id, t_ns)?;
                    match (e.kind(), e.raw_os_error()) {
                        (ErrorKind::ConnectionRefused, _) => out.refused += 1,
                        (_, Some(libc::ENOBUFS)) => {
                            out.no_buffer += 1;
                            std::thread::sleep(NO_BUFFER_PAUSE);
                        }
                        (_, Some(libc::EINVAL | libc::EIO)) if gso => {
                            // The path or the device takes no GSO (a datagram above the
                            // path MTU, no checksum offload): send them one by one.
                            gso = false;
                            out.gso = false;
                        }
                        (ErrorKind::WouldBlock | ErrorKind::TimedOut, _) => {
                            batcher.flush(t_ns, None, false)?;
                        }
                        (ErrorKind::Interrupted, _) => {}
                        (_, Some(libc::EMSGSIZE)) => {
                            return Err(Error::io(
                                format!(
                                    "stream-{id}: send a {dg}-byte datagram (too large for \
                                     this path: a smaller -l)"
                                ),
                                e,
                            ));
                        }
                        _ => return Err(Error::io(format!("stream-{id}: send"), e)),
                    }
                    if ctx.aborted() {
                        return Err(aborted(id));
                    }
                    if t_ns >= end_ns {
                        break;
                    }
                }
            }
        }
        let sent = off / dg;
        let bytes = (sent * dg) as u64;
        out.datagrams += sent as u64;
        out.bytes += bytes;
        if let Some(p) = pacer.as_mut() {
            p.sent(bytes);
        }
        let t_ns = clock.ns(Instant::now());
        awake.check(id, t_ns)?;
        if bytes > 0 && batcher.push(t_ns, bytes as u32) || t_ns >= end_ns {
            if ctx.aborted() {
                return Err(aborted(id));
            }
            batcher.flush(t_ns, None, false)?;
        }
        if off < buf.len() {
            break; // the end came while the batch waited for the socket
        }
    }
    let t_ns = clock.ns(Instant::now());
    batcher.flush(t_ns, None, true)?;
    out.cpu = cpu::thread_since(cpu_start);
    out.forgiven = pacer.map_or(Duration::ZERO, |p| p.forgiven());
    Ok(out)
}
