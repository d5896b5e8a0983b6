//! What a server holds a running test to, whatever its client asked for: an end (the run
//! time and a bounded drain, [`timeouts::drain`]), `--max-rate` on the bytes that
//! arrive, and `--server-bitrate-limit` on all the bytes its streams move. Both protocols' servers look at it while they watch a test; a test past either
//! fails with [`Error::Exceeded`], which the log counts among refusals.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::timeouts;
use crate::units;
use crate::wire::params::TotalRate;

/// How far above `--max-rate` a stream's average may run before it is cut: a paced
/// sender's average sits on its rate; 10 % is far above any clock's disagreement.
const RATE_MARGIN: f64 = 1.10;

/// The burst a stream may run ahead of `--max-rate`, as time at the rate (and two blocks
/// more, for a paced sender's first writes).
const RATE_BURST: Duration = Duration::from_millis(500);

/// The shortest span `--server-bitrate-limit RATE/0` (the whole test so far) averages
/// over: iperf3 looks once per second.
const TOTAL_MIN_SPAN: Duration = Duration::from_secs(1);

/// Each stream's bytes so far, as its reporter's cutter counted them, set batch by batch:
/// what the watcher checks `--max-rate` and the drain's rate against.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arrived(Arc<Vec<AtomicU64>>);

impl Arrived {
    pub(crate) fn new(streams: usize) -> Arrived {
        Arrived(Arc::new((0..streams).map(|_| AtomicU64::new(0)).collect()))
    }

    pub(crate) fn set(&self, stream: usize, bytes: u64) {
        if let Some(b) = self.0.get(stream) {
            b.store(bytes, Ordering::Relaxed);
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
    /// `--fq-rate` is set: the kernel's bursts may come up to `PACED_BURST_MAX` apart.
    paced: bool,
    /// Set at the run time's end: when the test must be over, and why that long.
    end: Option<(Instant, String)>,
    /// The drain so far: what the sockets may hold, and their progress (bytes read and
    /// acknowledged) at the run time's end and at the last look.
    drain: Option<Drain>,
    /// `--server-bitrate-limit`, and the bytes moved at the looks within its window (the
    /// oldest at least the window's age), oldest first.
    total: Option<(TotalRate, VecDeque<(Instant, u64)>)>,
}

#[derive(Debug, Clone, Copy)]
struct Drain {
    queued: u64,
    at_end: u64,
    last: (Instant, u64),
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
            paced: test.fq_rate_bps.is_some(),
            sockets,
            end: None,
            drain: None,
            total: None,
        }
    }

    /// Holds the test to `--server-bitrate-limit` too.
    pub(crate) fn with_total_rate(mut self, limit: Option<TotalRate>) -> Bounds {
        self.total = limit.map(|l| (l, VecDeque::from([(self.t0, 0)])));
        self
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
        if let Some(cut) = self.check_total(now, moved) {
            return Some(cut);
        }
        if elapsed < self.run_time {
            return None;
        }
        if self.end.is_none() {
            self.begin_drain(now, moved);
        }
        if self.end.as_ref().is_none_or(|(end, _)| now < *end) {
            return None;
        }
        // A drain still moving at a real rate, and no more than the sockets could hold,
        // is given another step: a slow path's honest queue is not cut, a trickle or a
        // sender that kept writing is.
        let progress = self.progress();
        let (end, why) = self.end.as_mut()?;
        if let Some(d) = self.drain.as_mut() {
            let secs = now
                .saturating_duration_since(d.last.0)
                .as_secs_f64()
                .max(1e-3);
            let bps = progress.saturating_sub(d.last.1) as f64 * 8.0 / secs;
            let drained = progress.saturating_sub(d.at_end);
            if bps >= timeouts::DRAIN_MOVING as f64 && drained <= d.queued {
                d.last = (now, progress);
                *end = now + timeouts::DRAIN_STEP;
                return None;
            }
        }
        Some(Error::Exceeded(format!(
            "the test ran past its end: it was given {why}; cut {:.2} s in",
            elapsed.as_secs_f64()
        )))
    }

    /// `--server-bitrate-limit`: the bytes moved over its window (the whole test so far,
    /// at least [`TOTAL_MIN_SPAN`]) averaging more than it; nothing is judged before a
    /// whole window has passed, as iperf3 judges.
    fn check_total(&mut self, now: Instant, moved: u64) -> Option<Error> {
        let (limit, seen) = self.total.as_mut()?;
        seen.push_back((now, moved));
        let over = limit
            .over
            .unwrap_or_else(|| now.saturating_duration_since(self.t0).max(TOTAL_MIN_SPAN));
        while seen
            .get(1)
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) >= over)
        {
            seen.pop_front();
        }
        let &(from, base) = seen.front()?;
        let span = now.saturating_duration_since(from);
        if span < over || span.is_zero() {
            return None;
        }
        let bps = moved.saturating_sub(base) as f64 * 8.0 / span.as_secs_f64();
        (bps > limit.bps as f64).then(|| {
            Error::Exceeded(format!(
                "the test's streams moved {:.1} Mbit/s together over {:.2} s, more than \
                 --server-bitrate-limit {}",
                bps / 1e6,
                span.as_secs_f64(),
                units::format_rate(limit.bps)
            ))
        })
    }

    /// At the run time's end: the drain the test is given, from its sockets' buffers, the
    /// rate it ran (`moved` bytes over the run time) and its round trips.
    fn begin_drain(&mut self, now: Instant, moved: u64) {
        let queued: u64 = self
            .sockets
            .iter()
            .map(|s| queue_bound(s.as_fd(), self.window))
            .sum();
        let rate = (moved as f64 * 8.0 / self.run_time.as_secs_f64().max(1e-3)) as u64;
        // The data connections' round trip now, queues included, when longer.
        let rtt = self
            .sockets
            .iter()
            .map(|s| data_rtt(s.as_fd()))
            .fold(self.rtt, Duration::max);
        let paced = match self.paced {
            true => timeouts::PACED_BURST_MAX,
            false => Duration::ZERO,
        };
        let drain = timeouts::drain(queued, rate, rtt) + paced;
        let why = format!(
            "{:.2} s to run and {:.2} s to drain ({} KiB its sockets may hold, at {:.1} \
             Mbit/s)",
            self.run_time.as_secs_f64(),
            drain.as_secs_f64(),
            queued >> 10,
            rate.max(timeouts::DRAIN_RATE_FLOOR) as f64 / 1e6
        );
        let progress = self.progress();
        self.end = Some((self.t0 + self.run_time + drain, why));
        self.drain = Some(Drain {
            queued,
            at_end: progress,
            last: (now, progress),
        });
    }

    /// Bytes read and acknowledged on the TCP data sockets so far (UDP's end on their own).
    pub(crate) fn progress(&self) -> u64 {
        self.sockets
            .iter()
            .filter_map(|s| crate::os::sys::tcp_info(s.as_fd()).ok())
            .map(|(i, _)| i.bytes_received + i.bytes_acked)
            .sum()
    }
}

/// A data connection's smoothed round trip (zero for UDP).
fn data_rtt(fd: std::os::fd::BorrowedFd) -> Duration {
    crate::os::sys::tcp_info(fd).map_or(Duration::ZERO, |(i, _)| {
        Duration::from_micros(u64::from(i.rtt_us))
    })
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

    /// `--server-bitrate-limit`: judged once a whole window has passed, on the bytes moved
    /// within the last window (or, with `/0`, since the start, after a second).
    #[test]
    fn a_test_past_the_total_rate_is_cut() {
        let limited = |text| {
            let b = bounds(None, 30.0);
            let t0 = b.t0;
            let at = move |ms| t0 + Duration::from_millis(ms);
            (
                b.with_total_rate(crate::wire::params::TotalRate::parse(text).ok()),
                at,
            )
        };
        // 8 Mbit/s over 2 s: 2 MB may move in any 2 s. 3 MB in the first second is not
        // judged before 2 s; then it is 12 Mbit/s, and cut.
        let (mut b, at) = limited("8M/2");
        assert!(b.check(at(1000), &[], 3_000_000).is_none());
        assert!(b.check(at(1900), &[], 3_000_000).is_none());
        let e = b.check(at(2000), &[], 3_000_000).expect("cut").to_string();
        assert!(
            e.contains(
                "moved 12.0 Mbit/s together over 2.00 s, more than --server-bitrate-limit 8M"
            ),
            "{e}"
        );
        // The window slides: 1.9 MB in the last 2 s passes, 4.1 MB is cut.
        let (mut b, at) = limited("8M/2");
        assert!(b.check(at(1000), &[], 1_000_000).is_none());
        assert!(b.check(at(2000), &[], 2_000_000).is_none());
        assert!(b.check(at(3000), &[], 2_900_000).is_none());
        assert!(b.check(at(4000), &[], 6_100_000).is_some(), "4.1 MB in 2 s");
        // /0: the whole test so far, judged after a second.
        let (mut b, at) = limited("8M/0");
        assert!(
            b.check(at(500), &[], 5_000_000).is_none(),
            "before a second"
        );
        assert!(b.check(at(3000), &[], 3_000_000).is_none(), "1 MB/s");
        assert!(b.check(at(4000), &[], 4_100_000).is_some(), "8.2 Mbit/s");
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

    /// Past its drain, a test whose connection still moves at 800 kbit/s (a slow path's
    /// queue) is given more time, one that trickles a byte per 100 ms is cut: both over
    /// real loopback connections, watched as the server watches them.
    #[test]
    fn a_moving_drain_is_given_time_and_a_trickle_is_cut() {
        use std::io::{Read, Write};
        let pair = |chunk: usize| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut rx, _) = l.accept().unwrap();
            let dup = std::os::fd::AsFd::as_fd(&rx).try_clone_to_owned().unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while rx.read(&mut buf).is_ok_and(|n| n > 0) {}
            });
            std::thread::spawn(move || {
                let block = vec![7u8; chunk];
                while tx.write_all(&block).is_ok() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            dup
        };
        let mut test = crate::wire::params::TestParams::defaults();
        test.duration = Duration::from_millis(200);
        let t0 = Instant::now();
        let mut moving = Bounds::new(t0, &test, Duration::ZERO, None, vec![pair(10_000)]);
        let mut trickle = Bounds::new(t0, &test, Duration::ZERO, None, vec![pair(1)]);
        let (mut moving_cut, mut trickle_cut) = (None, None);
        while t0.elapsed() < Duration::from_millis(2200) {
            let now = Instant::now();
            if moving.check(now, &[], 0).is_some() {
                moving_cut.get_or_insert(t0.elapsed());
            }
            if trickle.check(now, &[], 0).is_some() {
                trickle_cut.get_or_insert(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(moving_cut, None, "a drain at 800 kbit/s");
        let cut = trickle_cut.expect("the trickle is cut");
        assert!(cut < Duration::from_millis(1800), "cut {cut:?} in");
    }
}
