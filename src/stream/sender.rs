//! The sending stream thread: blocking `write()` of `-l`-sized blocks until the test's
//! duration has passed, one clock reading and one record per `write()`, a `TCP_INFO`
//! sample per batch; then `shutdown(SHUT_WR)` and a drain to EOF so nothing is reset.
//! With a rate (`-b`), each write waits for the stream's [`Pacer`] and holds at most
//! [`pace::QUANTUM`] of the rate (a block is written in pieces when it holds more).

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use super::echo::{self, EchoCollector};
use super::{Batcher, StreamCtx, TcpSample, WAKE, aborted, is_timeout};
use crate::cpu::{self, CpuTime};
use crate::error::{Error, IoContext, Result};
use crate::pace::{self, Pacer};

/// What a sender did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    pub id: u16,
    pub bytes: u64,
    pub writes: u64,
    /// This thread's CPU from the start to its last write.
    pub cpu: CpuTime,
}

/// Runs one sending stream (call on its own `stream-N` thread).
pub fn run(ctx: StreamCtx, mut sock: TcpStream, run_time: Duration) -> Result<SendOutcome> {
    let id = ctx.id;
    let mut reset = crate::net::ResetOnDrop::new(&sock);
    ctx.pin()?;
    sock.set_write_timeout(Some(WAKE))
        .op(|| format!("stream-{id}: set SO_SNDTIMEO"))?;
    sock.set_read_timeout(Some(WAKE))
        .op(|| format!("stream-{id}: set SO_RCVTIMEO"))?;
    let mut block = vec![0x5au8; ctx.block_bytes];
    let mut echoes = EchoCollector::new();
    let mut seq = 0u64;
    // Each block is stamped with the time the previous write() returned: the moment this
    // block starts into the socket, without a second clock reading per block.
    let mut stamp_ns = 0u64;
    let mut batcher = Batcher::new(id, ctx.batches.clone(), ctx.free.clone());

    // Bytes per write: a whole block, or the rate's quantum when that is less.
    let piece = ctx.rate_bps.map_or(block.len(), |r| {
        (Pacer::bytes_in(r, pace::QUANTUM) as usize).clamp(1, block.len())
    });
    if ctx.rate_bps.is_some() {
        crate::sys::set_timer_slack(1_000);
    }

    let clock = ctx.wait_start()?;
    let cpu_start = cpu::thread();
    let mut pacer = ctx.rate_bps.map(|r| Pacer::new(r, clock.t0));
    let end_ns = run_time.as_nanos() as u64;
    let mut bytes: u64 = 0;
    let mut writes: u64 = 0;
    let mut offset = 0usize;
    loop {
        if pacer.is_some() {
            let sample = |t_ns| TcpSample::read(&sock, t_ns);
            if !super::wait_paced(pacer.as_mut(), &ctx, &clock, end_ns, &mut batcher, sample)? {
                break;
            }
            if offset == 0 {
                // The block starts into the socket now, not when the previous write returned.
                stamp_ns = clock.ns(Instant::now());
            }
        }
        if offset == 0 {
            echo::stamp(&mut block, seq, stamp_ns);
            seq += 1;
        }
        let upto = (offset + piece).min(block.len());
        match sock.write(&block[offset..upto]) {
            Ok(0) => {
                return Err(Error::Test(format!(
                    "stream-{id}: the connection accepted no more data"
                )));
            }
            Ok(n) => {
                let t_ns = clock.ns(Instant::now());
                stamp_ns = t_ns;
                if let Some(echo_sock) = &ctx.echo
                    && echoes.due(t_ns)
                {
                    echoes
                        .drain(echo_sock, t_ns, |rtt_ns| batcher.push_rtt(t_ns, rtt_ns))
                        .map_err(|e| echo::lost(id, e))?;
                }
                bytes += n as u64;
                writes += 1;
                if let Some(p) = pacer.as_mut() {
                    p.sent(n as u64);
                }
                offset = (offset + n) % block.len();
                let past_end = t_ns >= end_ns;
                if batcher.push(t_ns, n as u32) || past_end {
                    if ctx.aborted() {
                        return Err(aborted(id));
                    }
                    batcher.flush(t_ns, TcpSample::read(&sock, t_ns), false)?;
                }
                if past_end {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {
                let t_ns = clock.ns(Instant::now());
                stamp_ns = t_ns;
                if let Some(echo_sock) = &ctx.echo {
                    echoes
                        .drain(echo_sock, t_ns, |rtt_ns| batcher.push_rtt(t_ns, rtt_ns))
                        .map_err(|e| echo::lost(id, e))?;
                }
                if ctx.aborted() {
                    return Err(aborted(id));
                }
                batcher.flush(t_ns, TcpSample::read(&sock, t_ns), false)?;
                if t_ns >= end_ns {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(format!("stream-{id}: write"), e)),
        }
    }
    let t_ns = clock.ns(Instant::now());
    batcher.flush(t_ns, TcpSample::read(&sock, t_ns), true)?;
    let cpu = cpu::thread_since(cpu_start);
    sock.shutdown(Shutdown::Write)
        .op(|| format!("stream-{id}: shutdown(SHUT_WR)"))?;
    super::drain_to_eof(id, &mut sock, &ctx.abort)?;
    reset.disarm();
    Ok(SendOutcome {
        id,
        bytes,
        writes,
        cpu,
    })
}
