//! Pacing a stream thread to a rate in bits/s (`-b`): TCP blocks and UDP batches alike.
//!
//! The schedule is cumulative: the bytes accounted so far are due at
//! `origin + bytes × 8 / rate`, and the next chunk leaves only when they are, so a sender is
//! never ahead of its rate (no burst beyond the chunk it was given). The wait sleeps on a
//! timer to [`SPIN`] before the due time and spins the rest, so a late timer wake-up does
//! not become a gap. A sender that fell behind (descheduled on a busy host, a full socket)
//! catches up at most [`CATCH_UP`] of the schedule at full speed and the rest at
//! [`CATCH_UP_SPEED`] times the rate, so the test still carries the rate asked and a stall
//! never turns into a line-rate burst; only a debt beyond [`DEBT`] is forgiven (counted in
//! [`Pacer::forgiven`]), and a stream's wake-up for the start up to [`WAKE_SLACK`].
//! Forgiving every debt beyond `CATCH_UP` lost 5 to 13 % of `-b 1G` on a 2-core host at
//! load 3, where iperf3, which catches all of it up at full speed, kept 1000 Mbit/s.
//!
//! With a burst (`-b RATE/BURST`, [`Pacer::with_burst`]) the schedule counts in whole
//! bursts: a burst's first chunk waits until the bursts before it are due, the rest follow
//! it at once, so the rate is kept on average and the bursts are back to back.
//!
//! Used by one stream thread at a time (no sharing); no allocation, no I/O.

use std::time::{Duration, Instant};

/// The last stretch before a due time that is spun rather than slept.
pub const SPIN: Duration = Duration::from_micros(50);
/// How far behind its schedule a sender may catch up at full speed.
pub const CATCH_UP: Duration = Duration::from_millis(5);
/// How many times its rate a sender that fell further behind runs until it has caught up.
pub const CATCH_UP_SPEED: u32 = 2;
/// The debt a sender catches up; a stall longer than this is forgiven beyond it.
pub const DEBT: Duration = Duration::from_secs(1);
/// The most of a stream thread's wake-up after the test's start its schedule gives up
/// ([`Pacer::from_wake`]); measured at 0.1 to 2.3 ms on a 2-core host at `-b 22G`.
pub const WAKE_SLACK: Duration = Duration::from_millis(10);
/// The span one chunk should cover: a TCP write or a UDP batch holds at most this much of
/// the rate (but at least one block or datagram), so bursts stay this short.
pub const QUANTUM: Duration = Duration::from_micros(500);

/// What the schedule says at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The next chunk may leave now.
    Go,
    /// The next chunk is due this much later.
    Wait(Duration),
}

/// A rate's schedule for one stream.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_bps: u64,
    origin: Instant,
    bytes: u64,
    forgiven: Duration,
    /// The same bytes on a schedule at [`CATCH_UP_SPEED`] times the rate, which falls
    /// behind as the sender keeps its rate and gives up all but [`CATCH_UP`] of its lead:
    /// it holds back only a sender catching up.
    fast_origin: Instant,
    /// The bytes of one burst (1: none); the schedule counts whole bursts.
    burst_bytes: u64,
}

impl Pacer {
    /// A schedule at `rate_bps` (at least 1) starting at `start`.
    pub fn new(rate_bps: u64, start: Instant) -> Pacer {
        Pacer {
            rate_bps: rate_bps.max(1),
            origin: start,
            bytes: 0,
            forgiven: Duration::ZERO,
            fast_origin: start,
            burst_bytes: 1,
        }
    }

    /// A stream thread's schedule at `rate_bps` for a test that started at `t0`, begun as
    /// the thread wakes for it: up to [`WAKE_SLACK`] of its wake-up is given up (counted
    /// in [`Pacer::forgiven`]), not caught up at full speed in a burst that a receiver
    /// sharing its core would pay for in drops; a later wake-up owes the rest.
    pub fn from_wake(rate_bps: u64, t0: Instant) -> Pacer {
        let late = Instant::now().saturating_duration_since(t0).min(WAKE_SLACK);
        let mut p = Pacer::new(rate_bps, t0 + late);
        p.forgiven = late;
        p
    }

    /// The same schedule in bursts of `bytes`: each burst leaves back to back once the
    /// bursts before it are due.
    pub fn with_burst(mut self, bytes: u64) -> Pacer {
        self.burst_bytes = bytes.max(1);
        self
    }

    /// Bytes the rate carries in `span` (for sizing chunks), at least 1.
    pub fn bytes_in(rate_bps: u64, span: Duration) -> u64 {
        let b = u128::from(rate_bps) * span.as_nanos() / 8 / 1_000_000_000;
        u64::try_from(b).unwrap_or(u64::MAX).max(1)
    }

    /// When everything accounted so far is due (the next chunk may leave then).
    pub fn due(&self) -> Instant {
        self.origin + self.span(1)
    }

    /// When the next chunk may leave: everything accounted so far is due, and a sender
    /// catching up has not run ahead of [`CATCH_UP_SPEED`] times the rate.
    fn next(&self) -> Instant {
        self.due().max(self.fast_origin + self.span(CATCH_UP_SPEED))
    }

    /// The time the bytes so far take at `speed` times the rate.
    fn span(&self, speed: u32) -> Duration {
        let rate = u128::from(self.rate_bps) * u128::from(speed);
        let whole = self.bytes - self.bytes % self.burst_bytes;
        let ns = u128::from(whole) * 8 * 1_000_000_000 / rate;
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Schedule time given up after stalls longer than [`DEBT`].
    pub fn forgiven(&self) -> Duration {
        self.forgiven
    }

    /// Accounts `bytes` that have left.
    #[inline]
    pub fn sent(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// What the schedule says at `now`; forgives a debt beyond [`DEBT`].
    pub fn step(&mut self, now: Instant) -> Step {
        let behind = now.saturating_duration_since(self.due());
        if behind > DEBT {
            let forgive = behind - DEBT;
            self.origin += forgive;
            self.forgiven += forgive;
        }
        // The fast schedule's lead beyond CATCH_UP of the rate (CATCH_UP / speed of its
        // own) is given up: at most that leaves at full speed.
        let lead = CATCH_UP / CATCH_UP_SPEED;
        let fast_due = self.fast_origin + self.span(CATCH_UP_SPEED);
        if let Some(ahead) = now.checked_duration_since(fast_due + lead) {
            self.fast_origin += ahead;
        }
        match self
            .next()
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        {
            Some(early) => Step::Wait(early),
            None => Step::Go,
        }
    }

    /// Waits until the next chunk may leave, but at most about `max` (so the caller can
    /// flush, look at its abort flag and its end time): true when it may leave now.
    pub fn wait(&mut self, max: Duration) -> bool {
        let left = match self.step(Instant::now()) {
            Step::Go => return true,
            Step::Wait(left) => left,
        };
        if left > max {
            std::thread::sleep(max);
            return false;
        }
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        }
        let due = self.next();
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Chunks of 100 bytes the schedule lets leave at `now` without a wait.
    fn at_once(p: &mut Pacer, now: Instant) -> u64 {
        let mut n = 0;
        while n < 1_000_000 && p.step(now) == Step::Go {
            p.sent(100);
            n += 100;
        }
        n
    }

    #[test]
    fn a_late_wake_up_is_given_up_to_its_slack_and_not_burst() {
        // 8 Mbit/s: 1000 bytes per ms. Woken 3 ms (or, on a loaded host, a little more)
        // after the start: nothing is owed. The schedule's times are read from the pacer
        // (its first due time is its wake-up), so a slow test host changes nothing.
        let mut p = Pacer::from_wake(8_000_000, Instant::now() - 3 * MS);
        let woke = p.due();
        assert!(
            (3 * MS..=WAKE_SLACK).contains(&p.forgiven()),
            "{:?}",
            p.forgiven()
        );
        assert_eq!(
            at_once(&mut p, woke),
            100,
            "one chunk at the wake-up, no burst"
        );
        // Then at the rate: 1 ms on, 1 ms' worth more (the chunk due then leaves then).
        assert_eq!(at_once(&mut p, woke + MS), 1000);
        // Woken 100 ms late: 10 ms given up, the other 90 owed as after any stall (the
        // first CATCH_UP of it at once).
        let t0 = Instant::now() - 100 * MS;
        let mut p = Pacer::from_wake(8_000_000, t0);
        assert_eq!(p.forgiven(), WAKE_SLACK);
        assert_eq!(p.due(), t0 + WAKE_SLACK);
        let burst = at_once(&mut p, t0 + 100 * MS);
        assert!((5_000..=5_100).contains(&burst), "{burst} bytes at once");
    }

    #[test]
    fn the_schedule_is_cumulative_and_never_early() {
        let t0 = Instant::now();
        // 8 Mbit/s: 1000 bytes per ms.
        let mut p = Pacer::new(8_000_000, t0);
        assert_eq!(p.step(t0), Step::Go);
        p.sent(1000);
        assert_eq!(p.step(t0), Step::Wait(MS));
        assert_eq!(p.step(t0 + MS / 4), Step::Wait(Duration::from_micros(750)));
        assert_eq!(p.step(t0 + MS), Step::Go);
        p.sent(3000);
        assert_eq!(p.due(), t0 + 4 * MS);
        assert_eq!(Pacer::bytes_in(8_000_000, MS), 1000);
        assert_eq!(Pacer::bytes_in(1, MS), 1, "a chunk is never empty");
    }

    #[test]
    fn a_stall_is_caught_up_at_twice_the_rate_and_only_a_long_one_forgiven() {
        let t0 = Instant::now();
        // 8 Mbit/s: 1000 bytes per ms; 2000 per ms catching up.
        let mut p = Pacer::new(8_000_000, t0);
        p.sent(1000);
        // 3 ms late: within CATCH_UP, caught up at once (the schedule keeps its origin).
        assert_eq!(p.step(t0 + 4 * MS), Step::Go);
        p.sent(3000);
        assert_eq!(p.step(t0 + 4 * MS), Step::Go);
        assert_eq!(p.due(), t0 + 4 * MS);
        // 100 ms late: CATCH_UP's worth leaves at once, then twice the rate until the
        // debt is paid; nothing is forgiven.
        let late = t0 + 104 * MS;
        assert_eq!(p.step(late), Step::Go);
        p.sent(Pacer::bytes_in(8_000_000, CATCH_UP));
        assert_eq!(p.step(late), Step::Go, "the burst is CATCH_UP of the rate");
        p.sent(2000);
        assert_eq!(p.step(late), Step::Wait(MS), "then 2000 bytes per ms");
        // The 100 ms debt is paid 95 ms on (5 ms of it in the burst): 190 ms of the rate
        // sent in 95 ms.
        p.sent(188_000);
        assert_eq!(p.step(late + 95 * MS), Step::Go);
        assert_eq!(p.due(), late + 95 * MS);
        p.sent(1000);
        assert_eq!(p.step(late + 95 * MS), Step::Wait(MS), "back to the rate");
        assert_eq!(p.forgiven(), Duration::ZERO);
        // 3 s late: all but DEBT is forgiven.
        let due = p.due();
        assert_eq!(p.step(due + 3 * DEBT), Step::Go);
        assert_eq!(p.forgiven(), 2 * DEBT);
        assert_eq!(p.due(), due + 2 * DEBT);
    }

    /// A burst of 4 leaves at once; the next waits until the first 4 are due.
    #[test]
    fn a_burst_leaves_back_to_back_and_keeps_the_rate() {
        let t0 = Instant::now();
        // 8 Mbit/s, 1000-byte blocks in bursts of 4: 4 ms per burst.
        let mut p = Pacer::new(8_000_000, t0).with_burst(4000);
        for _ in 0..3 {
            p.sent(1000);
            assert_eq!(p.step(t0), Step::Go);
        }
        p.sent(1000);
        assert_eq!(p.step(t0), Step::Wait(4 * MS));
        assert_eq!(p.step(t0 + 4 * MS), Step::Go);
        for _ in 0..3 {
            p.sent(1000);
            assert_eq!(p.step(t0 + 4 * MS), Step::Go);
        }
        p.sent(1000);
        assert_eq!(p.step(t0 + 4 * MS), Step::Wait(4 * MS));
    }

    /// Real sleeping and spinning: 200 chunks of 1 ms at 80 Mbit/s. No chunk leaves before
    /// its due time, and the median gap is the rate's (the machine may be loaded, so the
    /// bounds allow for late wake-ups, never for early ones).
    #[test]
    fn real_waits_are_even_and_never_ahead_of_the_rate() {
        crate::os::sys::set_timer_slack(1_000);
        let chunk = 10_000u64; // 1 ms at 80 Mbit/s
        let t0 = Instant::now();
        let mut p = Pacer::new(80_000_000, t0);
        let mut times = Vec::with_capacity(200);
        for i in 0..200u64 {
            while !p.wait(Duration::from_millis(50)) {}
            let now = Instant::now();
            let allowed = t0 + Duration::from_micros(1000 * i) + p.forgiven();
            assert!(now >= allowed, "chunk {i} left before its time");
            times.push(now);
            p.sent(chunk);
        }
        let mut gaps: Vec<u64> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_micros() as u64)
            .collect();
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        // Never early (above); late wake-ups on a loaded machine stretch the median.
        assert!((950..=1500).contains(&median), "median gap {median} us");
        let span = times[199] - t0;
        assert!(
            span >= 199 * MS && span < 199 * MS + 100 * MS,
            "199 chunks took {span:?}"
        );
    }
}
