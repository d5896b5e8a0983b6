//! What a server holds a running test to, whatever its client asked for: an end (the run
//! time and a bounded drain, [`timeouts::drain`]) and `--max-rate` on the bytes that
//! arrive. Both protocols' servers look at it while they watch a test; a test past either
//! fails with [`Error::Exceeded`], which the log counts among refusals.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::timeouts;
use crate::units;

/// How far above `--max-rate` a stream's average may run before it is cut: a paced
/// sender's average sits on its rate; 10 % is far above any clock's disagreement.
const RATE_MARGIN: f64 = 1.10;

/// The burst a stream may run ahead of `--max-rate`, as time at the rate (and two blocks
/// more, for a paced sender's first writes).
const RATE_BURST: Duration = Duration::from_millis(500);

/// Each receiving stream's bytes so far, added by its reporter batch by batch: what the
/// watcher checks `--max-rate` and the drain's rate against.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arrived(Arc<Vec<AtomicU64>>);

impl Arrived {
    pub(crate) fn new(streams: usize) -> Arrived {
        Arrived(Arc::new((0..streams).map(|_| AtomicU64::new(0)).collect()))
    }

    pub(crate) fn add(&self, stream: usize, bytes: u64) {
        if let Some(b) = self.0.get(stream) {
            b.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub(crate) fn bytes(&self) -> Vec<u64> {
        self.0.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }
}

/// One test's bounds, checked by the server's watcher every poll.
pub(crate) struct Bounds {
    t0: Instant,
    run_time: Duration,
    rtt: Duration,
    /// `--max-rate`: bits per second per stream.
    max_rate_bps: Option<u64>,
    /// The block (datagram) size: a paced sender's writes come a block at a time.
    block: u64,
    /// `-w`: both ends' buffers.
    window: Option<u64>,
    /// The test's data sockets (duplicates): their buffers, read at the run time's end,
    /// are what may still be queued.
    sockets: Vec<OwnedFd>,
    /// Set at the run time's end: when the test must be over, and why that long.
    end: Option<(Instant, String)>,
}

impl Bounds {
    pub(crate) fn new(
        t0: Instant,
        test: &crate::wire::params::TestParams,
        rtt: Duration,
        max_rate_bps: Option<u64>,
        sockets: Vec<OwnedFd>,
    ) -> Bounds {
        Bounds {
            t0,
            run_time: test.run_time(),
            rtt,
            max_rate_bps,
            block: test.block_bytes(),
            window: test.window_bytes,
            sockets,
            end: None,
        }
    }

    /// Why the test must stop now, or None while it is within bounds. `received` is each
    /// receiving stream's bytes so far (none when this end only sends), `moved` every
    /// byte this end's streams have counted, either way.
    pub(crate) fn check(&mut self, now: Instant, received: &[u64], moved: u64) -> Option<Error> {
        let elapsed = now.saturating_duration_since(self.t0);
        if let Some(max) = self.max_rate_bps {
            let allowed = max as f64 / 8.0 * (RATE_MARGIN * elapsed.as_secs_f64())
                + max as f64 / 8.0 * RATE_BURST.as_secs_f64()
                + 2.0 * self.block as f64;
            if let Some((id, &bytes)) = received
                .iter()
                .enumerate()
                .find(|&(_, &b)| b as f64 > allowed)
            {
                let secs = elapsed.as_secs_f64().max(1e-3);
                return Some(Error::Exceeded(format!(
                    "stream-{id} exceeded --max-rate {} per stream: {bytes} bytes arrived in \
                     {secs:.2} s ({:.1} Mbit/s)",
                    units::format_rate(max),
                    units::mbps(bytes, secs)
                )));
            }
        }
        if elapsed < self.run_time {
            return None;
        }
        let (end, why) = self.end.get_or_insert_with(|| {
            let queued: u64 = self
                .sockets
                .iter()
                .map(|s| queue_bound(s.as_fd(), self.window))
                .sum();
            let rate = (moved as f64 * 8.0 / self.run_time.as_secs_f64().max(1e-3)) as u64;
            let drain = timeouts::drain(queued, rate, self.rtt);
            let why = format!(
                "{:.2} s to run and {:.2} s to drain ({} KiB its sockets may hold, at {:.1} \
                 Mbit/s)",
                self.run_time.as_secs_f64(),
                drain.as_secs_f64(),
                queued >> 10,
                rate.max(timeouts::DRAIN_RATE_FLOOR) as f64 / 1e6
            );
            (self.t0 + self.run_time + drain, why)
        });
        (now >= *end).then(|| {
            Error::Exceeded(format!(
                "the test ran past its end: it was given {why}; cut {:.2} s in",
                elapsed.as_secs_f64()
            ))
        })
    }
}

/// The most a data socket and its peer's may still hold queued: twice the buffer on the
/// side of its flow, as the kernel has it now (autotuning grows it with the flow, and the
/// peer's buffer of one stream grows alike): a receiver's receive buffer, a sender's send
/// buffer; twice `-w` when the client set both ends' buffers to it.
fn queue_bound(fd: std::os::fd::BorrowedFd, window: Option<u64>) -> u64 {
    let sock = socket2::SockRef::from(&fd);
    let sends = crate::os::sys::tcp_info(fd).is_ok_and(|(i, _)| i.bytes_acked > i.bytes_received);
    let buffer = match sends {
        true => sock.send_buffer_size(),
        false => sock.recv_buffer_size(),
    };
    2 * (buffer.unwrap_or(0) as u64).max(window.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max_rate: Option<u64>, secs: f64) -> Bounds {
        let mut test = crate::wire::params::TestParams::defaults();
        test.duration = Duration::from_secs_f64(secs);
        test.len = Some(1000);
        Bounds::new(Instant::now(), &test, Duration::ZERO, max_rate, Vec::new())
    }

    /// A stream may run 10 % and half a second's bytes ahead of `--max-rate`, no more.
    #[test]
    fn a_stream_past_the_max_rate_is_cut() {
        let mut b = bounds(Some(8_000_000), 10.0);
        let at = b.t0 + Duration::from_secs(2);
        // 1 MB/s: 2.2 MB in 2 s, 0.5 MB of burst, two blocks.
        assert!(b.check(at, &[2_700_000, 0], 0).is_none());
        let e = b.check(at, &[0, 2_702_001], 0).expect("cut");
        assert!(matches!(e, Error::Exceeded(_)));
        assert!(
            e.to_string()
                .starts_with("stream-1 exceeded --max-rate 8M per stream: 2702001 bytes"),
            "{e}"
        );
    }

    /// Past the run time, the test is given the drain its sockets allow and then cut.
    #[test]
    fn a_test_past_its_drain_is_cut() {
        let mut b = bounds(None, 1.0);
        let t0 = b.t0;
        let t = |ms| t0 + Duration::from_millis(ms);
        let (during, late) = (t(900), t(1999));
        assert!(b.check(during, &[], 0).is_none());
        // No sockets, nothing moved: the drain is its fixed part.
        assert!(b.check(late, &[], 0).is_none());
        let e = b.check(t(2001), &[], 0).expect("cut");
        assert!(
            e.to_string()
                .contains("given 1.00 s to run and 1.00 s to drain (0 KiB"),
            "{e}"
        );
    }
}
