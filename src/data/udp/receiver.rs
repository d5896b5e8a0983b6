//! The receiving UDP stream thread: `recvmmsg` (GRO segments split by their size) until
//! its deadline, one clock reading per call, every datagram through the stream's
//! [`Accounting`], and per call one block record with the snapshot of the counts after it.
//! `SO_RCVTIMEO` of [`WAKE`] bounds each wait, so the watermark advances while nothing
//! arrives (a dead path included) and the deadline is kept.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::counters::{Accounting, UdpCounters};
use super::wire::Format;
use crate::data::page_buf::PageBuf;
use crate::data::stream::{Batcher, StreamCtx, WAKE, aborted};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::{self, CpuTime};
use crate::os::sys::{self, RecvMeta};

/// Messages per `recvmmsg` call.
const SLOTS: usize = 32;
/// Bytes per message: the largest UDP payload, or a GRO buffer of coalesced datagrams.
const SLOT_BYTES: usize = 1 << 16;

/// What a UDP receiver counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UdpRecvOutcome {
    pub id: u16,
    pub counters: UdpCounters,
    /// This thread's CPU from the start to its deadline.
    pub cpu: CpuTime,
    /// The kernel handed over coalesced datagrams (GRO) at least once.
    pub gro_seen: bool,
}

/// Runs one receiving UDP stream (call on its own `stream-N` thread) until `until` after
/// the start (the sender's run time plus a settle time, the owner's choice), reading
/// datagrams of `wire`'s format.
pub fn receive(
    ctx: StreamCtx,
    sock: UdpSocket,
    until: Duration,
    wire: Format,
) -> Result<UdpRecvOutcome> {
    let id = ctx.id;
    ctx.pin()?;
    sock.set_read_timeout(Some(WAKE))
        .op(|| format!("stream-{id}: set SO_RCVTIMEO"))?;
    let mut bufs = PageBuf::resident(SLOTS * SLOT_BYTES);
    let mut meta = [RecvMeta::default(); SLOTS];
    let mut acc = Accounting::new(id).reading(wire);
    let mut gro_seen = false;
    let mut batcher = Batcher::new(id, ctx.batches.clone(), ctx.free.clone());

    let clock = ctx.wait_start()?;
    let cpu_start = cpu::thread();
    let listen_ns = until.as_nanos() as u64;
    let mut budget = ctx.budget.as_ref().map(|b| BudgetEnd::new(b, &ctx, wire));
    let mut last_read_ns = 0;
    loop {
        // A budgeted stream's end moves on with each datagram: taken afresh every pass.
        let until_ns = budget
            .as_ref()
            .map_or(listen_ns, |b| listen_ns.min(b.end_ns()));
        match sys::recv_datagrams(sock.as_fd(), &mut bufs, SLOT_BYTES, &mut meta) {
            Ok(n) => {
                let t_ns = clock.ns(Instant::now());
                last_read_ns = t_ns;
                let bytes = account(&mut acc, &meta[..n], &bufs, t_ns, &mut gro_seen);
                if let Some(b) = budget.as_mut() {
                    b.arrived(bytes, t_ns);
                }
                batcher.push_udp(acc.counters.snapshot(t_ns));
                let full = batcher.push(t_ns, u32::try_from(bytes).unwrap_or(u32::MAX));
                if full || t_ns >= until_ns {
                    if ctx.aborted() {
                        return Err(aborted(id));
                    }
                    ctx.idle.iter().for_each(|i| i.read_at(t_ns));
                    batcher.flush(t_ns, None, false)?;
                }
                if t_ns >= until_ns {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock
                        | ErrorKind::TimedOut
                        | ErrorKind::Interrupted
                        | ErrorKind::ConnectionRefused
                ) =>
            {
                let t_ns = clock.ns(Instant::now());
                if ctx.aborted() {
                    return Err(aborted(id));
                }
                batcher.flush(t_ns, None, false)?;
                if t_ns >= until_ns {
                    break;
                }
                ctx.idle_past(t_ns, last_read_ns)?;
            }
            Err(e) => return Err(Error::io(format!("stream-{id}: receive"), e)),
        }
    }
    let t_ns = clock.ns(Instant::now());
    batcher.flush(t_ns, None, true)?;
    Ok(UdpRecvOutcome {
        id,
        counters: acc.counters,
        cpu: cpu::thread_since(cpu_start),
        gro_seen,
    })
}

/// `-n`/`-k`: a receiving stream of a budgeted direction ends once the direction's whole
/// budget has arrived, or when nothing more has for a while (datagrams lost, or the budget
/// spent by the other streams): [`BUDGET_IDLE`], or four datagrams' time at the rate when
/// that is longer. From an iperf3 peer, by the idle time only: an iperf3 sender sends on
/// past the budget until `TEST_END`, and a socket closed before then refuses its datagrams.
struct BudgetEnd<'a> {
    spend: &'a crate::data::budget::Spend,
    idle_ns: u64,
    last_ns: u64,
    /// The whole budget's arrival ends the stream (a pinperf sender stops at it).
    at_budget: bool,
}

/// How long a budgeted direction's receiver waits for a next datagram at least.
const BUDGET_IDLE: Duration = Duration::from_secs(1);

impl<'a> BudgetEnd<'a> {
    fn new(spend: &'a crate::data::budget::Spend, ctx: &StreamCtx, wire: Format) -> BudgetEnd<'a> {
        let gap_ns = ctx.rate_bps.map_or(0, |r| {
            (ctx.block_bytes as u128 * 8 * 4 * 1_000_000_000 / u128::from(r.max(1))) as u64
        });
        BudgetEnd {
            spend,
            idle_ns: (BUDGET_IDLE.as_nanos() as u64).max(gap_ns),
            last_ns: 0,
            at_budget: wire == Format::Pinperf,
        }
    }

    fn arrived(&mut self, bytes: u64, t_ns: u64) {
        self.spend.arrived(bytes);
        self.last_ns = t_ns;
    }

    /// When this stream stops: now once the budget has arrived, else an idle time after
    /// its last datagram (or the start).
    fn end_ns(&self) -> u64 {
        match self.at_budget && self.spend.all_arrived() {
            true => 0,
            false => self.last_ns.saturating_add(self.idle_ns),
        }
    }
}

/// Counts the `meta.len()` messages one `recvmmsg` filled (each a datagram, or several
/// coalesced by GRO) into `acc`; the payload bytes they held.
#[inline]
fn account(
    acc: &mut Accounting,
    meta: &[RecvMeta],
    bufs: &[u8],
    t_ns: u64,
    gro_seen: &mut bool,
) -> u64 {
    let mut bytes = 0u64;
    for (m, slot) in meta.iter().zip(bufs.chunks(SLOT_BYTES)) {
        if let Some(drops) = m.rxq_drops {
            acc.rxq_drops(drops);
        }
        if m.truncated {
            acc.truncated();
            continue;
        }
        let data = &slot[..m.len.min(slot.len())];
        match m.gro_size {
            Some(seg) if (seg as usize) < data.len() => {
                *gro_seen = true;
                for d in data.chunks(seg as usize) {
                    bytes += acc.datagram(d, t_ns);
                }
            }
            _ => bytes += acc.datagram(data, t_ns),
        }
    }
    bytes
}
