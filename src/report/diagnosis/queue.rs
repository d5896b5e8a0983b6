//! Block RTT far above the path's: blocks queued somewhere. A block's own write time at
//! the measured rate is in every sample (the sender reads echoes between writes), so it is
//! taken out before anything is called a queue; a queue larger than the buffers that were
//! set (`-w`) is not in those buffers; and the advice never repeats the window in use, nor
//! asks for a larger one to cure a queue.

use super::{Evidence, KEPT_RATE};
use crate::data::stream::echo::HEADER_LEN;
use crate::report::finding::{Bdp, BlockWait, BlockWrite, Finding, PacedBelowPath};
use crate::report::finding::{QueueBeyondBuffers, StandingQueue, WindowAboveBdp};
use crate::report::finding::{WindowNotTheCause, WriteTimeNotQueue};

/// A queue counts as "standing" when blocks wait this many times the path RTT…
const QUEUE_FACTOR: f64 = 4.0;
/// …and at least this long, microseconds.
const QUEUE_MIN_US: f64 = 1000.0;

/// The longest wait a paced sender's blocks are put down to the receiver's wake-up and
/// delayed ACKs (Linux delays an ACK up to 40 ms) rather than a queue.
const PACED_WAIT_US: f64 = 40_000.0;

/// The block RTT figures of one test, in microseconds, once they show a wait worth a line.
struct Wait<'a> {
    e: &'a Evidence<'a>,
    path_us: f64,
    block_us: f64,
    write_us: f64,
    queue_us: f64,
    per_stream_bps: f64,
    /// `-b` over TCP: the rate the sender was paced at.
    paced_bps: Option<u64>,
    figures: BlockWait,
}

/// Block RTT far above the path's: what the wait is, and when it is a queue in the
/// socket buffers, the window that would avoid it.
pub(super) fn standing_queue(e: &Evidence, out: &mut Vec<Finding>) {
    let Some(w) = Wait::of(e) else { return };
    if w.queue_us < QUEUE_MIN_US || w.queue_us + w.path_us < QUEUE_FACTOR * w.path_us {
        if w.write_us >= 0.5 * (w.block_us - w.path_us) {
            out.push(Finding::new(WriteTimeNotQueue { wait: w.figures }));
        }
        return;
    }
    if let Some(f) = w.held_by_pacing() {
        out.push(f);
        return;
    }
    w.in_buffers(out);
}

impl<'a> Wait<'a> {
    /// The wait, when blocks waited [`QUEUE_FACTOR`] times the path's RTT and
    /// [`QUEUE_MIN_US`] beyond it; None without a path RTT, block RTT or rate.
    fn of(e: &'a Evidence<'a>) -> Option<Wait<'a>> {
        let path_us = e
            .streams
            .iter()
            .filter_map(|s| s.min_rtt)
            .filter(|&v| v > 0);
        let path_us = f64::from(path_us.min()?);
        let (sum, n) = e
            .streams
            .iter()
            .filter_map(|s| s.block_rtt)
            .fold((0.0, 0u64), |(sum, n), r| {
                (sum + r.avg_us * r.samples as f64, n + r.samples)
            });
        let per_stream_bps = e.rate_bps / e.streams.len().max(1) as f64;
        // No rate, no queue to size and no bandwidth-delay product: a stall says the rest.
        if n == 0 || per_stream_bps < 1.0 {
            return None;
        }
        let block_us = sum / n as f64;
        if block_us < QUEUE_FACTOR * path_us || block_us - path_us < QUEUE_MIN_US {
            return None;
        }
        let block_bytes = e.header.block_bytes;
        let write_us = block_bytes as f64 * 8.0 / per_stream_bps * 1e6;
        let paced = paced_header_us(e, write_us);
        let write = match paced {
            Some((rate_bps, us)) => BlockWrite::Pacing {
                rate_bps,
                header_bytes: HEADER_LEN,
                header_ms: us / 1e3,
            },
            None => BlockWrite::Writing {
                block_bytes,
                per_stream_bps,
                write_ms: write_us / 1e3,
            },
        };
        let write_us = paced.map_or(write_us, |(_, us)| us);
        Some(Wait {
            e,
            path_us,
            block_us,
            write_us,
            queue_us: block_us - path_us - write_us,
            per_stream_bps,
            paced_bps: paced.map(|(rate, _)| rate),
            figures: BlockWait {
                block_rtt_ms: block_us / 1e3,
                path_rtt_ms: path_us / 1e3,
                write,
            },
        })
    }

    /// A sender that -b held below the path's rate: its socket buffer empties between
    /// pieces (nothing unsent beyond a block at the end), and the wait is elsewhere (the
    /// receiver waking to read and echo, delayed ACKs between paced pieces), which no -w
    /// shortens. Paced at about the bottleneck's rate a queue does stand (unsent bytes
    /// growing): the rate alone does not tell the two apart.
    fn held_by_pacing(&self) -> Option<Finding> {
        let rate_bps = self.paced_bps?;
        let block_bytes = self.e.header.block_bytes;
        let emptied = self
            .e
            .streams
            .iter()
            .all(|s| s.notsent_bytes.is_none_or(|b| u64::from(b) <= block_bytes));
        let held = self.per_stream_bps >= KEPT_RATE * rate_bps as f64
            && emptied
            && self.queue_us < PACED_WAIT_US;
        held.then(|| {
            Finding::new(PacedBelowPath {
                wait: self.figures,
                rate_bps,
                beyond_ms: self.queue_us / 1e3,
            })
        })
    }

    /// A queue the socket buffers could hold is a standing queue there, followed by what
    /// the window has to do with it; a larger one is elsewhere.
    fn in_buffers(&self, out: &mut Vec<Finding>) {
        let h = self.e.header;
        let queue_bytes = self.per_stream_bps * self.queue_us / 1e6 / 8.0;
        let sndbuf = self.e.streams.iter().filter_map(|s| s.sndbuf).max();
        let sndbuf_bytes = sndbuf.unwrap_or(h.local_window.sndbuf);
        let window = h.local_window.requested;
        // With -w the buffers are fixed: the sender's and the receiver's are all a block can
        // queue in on the hosts. Autotuned receive buffers grow unseen, so no bound then.
        let buffers = window.map(|_| sndbuf_bytes + h.remote_window.rcvbuf);
        let write_named = self.write_us >= 0.1 * (self.block_us - self.path_us);
        if let Some(buffers_bytes) = buffers.filter(|&b| queue_bytes > 1.25 * b as f64) {
            out.push(Finding::new(QueueBeyondBuffers {
                wait: self.figures,
                queue_ms: self.queue_us / 1e3,
                write_named,
                queue_bytes,
                buffers_bytes,
            }));
            return;
        }
        out.push(Finding::new(StandingQueue {
            wait: self.figures,
            queue_bytes,
            write_named,
        }));
        out.push(self.window_advice(window, sndbuf_bytes));
    }

    /// The window against the path's need: the one to ask for, or (the window already at
    /// or below it) what else to look at.
    fn window_advice(&self, window: Option<u64>, sndbuf_bytes: u64) -> Finding {
        let bdp_bytes = self.per_stream_bps * self.path_us / 1e6 / 8.0;
        // The per-stream BDP rounded up to a power of two: Linux doubles the request, which
        // is the headroom. On a 60 ms path these windows kept 95-98 % of the bottleneck at
        // 1 to 16 streams with Jain >= 0.999 and no retransmits (bench-scripts/wan-lab.sh).
        let suggest = (bdp_bytes.max(65536.0) as u64).next_power_of_two();
        let bdp = Bdp {
            per_stream_bps: self.per_stream_bps,
            path_rtt_ms: self.path_us / 1e3,
            bdp_bytes,
        };
        match window {
            Some(window_bytes) if window_bytes <= suggest => Finding::new(WindowNotTheCause {
                window_bytes,
                sndbuf_bytes,
                bdp,
                write: self.figures.write,
            }),
            _ => Finding::new(WindowAboveBdp {
                sndbuf_bytes,
                autotuned: window.is_none(),
                bdp,
                window_bytes: suggest,
            }),
        }
    }
}

/// A sender paced by -b writes a block in pieces of pace::QUANTUM of its rate (at least a
/// byte) and reads echoes between them: a sample holds the pacing of the header's bytes
/// after the first piece (at -b 10k, 15 more one-byte pieces: 12 ms), not the whole
/// block's write. The rate and that pacing in microseconds, for a paced TCP sender.
fn paced_header_us(e: &Evidence, write_us: f64) -> Option<(u64, f64)> {
    let rate = e.header.rate_bps.filter(|_| !e.header.udp)?;
    let rate = rate.max(1) as f64;
    let piece = (rate * crate::data::pace::QUANTUM.as_secs_f64() / 8.0).max(1.0);
    let header_us = (HEADER_LEN as f64 - piece).max(0.0) * 8.0 / rate * 1e6;
    Some((rate as u64, header_us.min(write_us)))
}
