//! A stream thread's per-block clock. Every `write()`/`read()` gets a stamp, so the clock
//! reading is most of the per-block bookkeeping (DESIGN: under 1 % of an 8 KiB write).
//! Where the kernel keeps time with the CPU's time-stamp counter (clocksource `tsc`:
//! invariant and synchronised across CPUs), a stamp is one `rdtsc` scaled to ns, about
//! half the cost of the vDSO `clock_gettime` behind `Instant::now()`; elsewhere it is
//! `Instant::now()`.
//!
//! The scale comes from the monotonic clock itself: [`BlockClock::anchor`] (called at
//! every batch flush, so at least every 20 ms and every 1024 blocks) reads both clocks,
//! re-fits ns per tick over everything since the thread's first reading, and restarts the
//! extrapolation there. A stamp is therefore never more than one flush span of
//! extrapolation away from a real `CLOCK_MONOTONIC` reading (at a fit error of 1e-4 that is
//! 2 µs; interval cuts need 50 µs). Stamps never go backwards, and a flush's watermark is
//! an anchor at or after every stamp before it. Until the first fit spans 1 ms, stamps are
//! `Instant::now()` readings.

use std::sync::OnceLock;
use std::time::Instant;

use super::TestClock;
use crate::os::sys;

/// Shortest span over which ticks are fitted to ns.
const MIN_FIT_NS: u64 = 1_000_000;

/// Most ticks between the two TSC readings around a monotonic one before the scale is
/// known (5 µs at 4 GHz; unpreempted they are a few hundred apart): more, and the thread
/// was preempted between them. The first pair stays in every later fit.
const PAIR_TICKS: u64 = 20_000;

/// How far apart two readings of one clock around a reading of another may be for the
/// three to count as taken together: further, the thread was preempted between them.
pub(crate) const TOGETHER_NS: u64 = 10_000;

/// Reads `inner` between two readings of `outer`, again (up to 8 times) while `apart` says
/// their distance shows a preemption; returns `outer` at their midpoint, and `inner`. A
/// time on one clock placed on another is only as good as this pairing.
pub(crate) fn read_together(
    outer: impl Fn() -> u64,
    inner: impl Fn() -> u64,
    apart: impl Fn(u64) -> bool,
) -> (u64, u64) {
    let mut tries = 0;
    loop {
        let before = outer();
        let n = inner();
        let after = outer();
        tries += 1;
        if !apart(after.saturating_sub(before)) || tries == 8 {
            return (before / 2 + after / 2, n);
        }
    }
}

/// Fixed-point shift of the ns-per-tick factor.
const SHIFT: u32 = 32;

/// A stream thread's clock: ns since the test's start, per block.
#[derive(Debug, Clone)]
pub struct BlockClock {
    test: TestClock,
    /// Stamps come from the TSC (fitted and anchored).
    tsc: bool,
    base_tsc: u64,
    base_ns: u64,
    anchor_tsc: u64,
    anchor_ns: u64,
    /// ns per tick, << SHIFT; 0 until a fit spans [`MIN_FIT_NS`].
    mult: u64,
    last_ns: u64,
}

impl BlockClock {
    /// A clock on the test's time line; takes its first reading now (call after the start).
    pub fn new(test: TestClock) -> Self {
        static TSC: OnceLock<bool> = OnceLock::new();
        let tsc = *TSC.get_or_init(sys::tsc_keeps_time);
        let mut c = BlockClock {
            test,
            tsc,
            base_tsc: 0,
            base_ns: 0,
            anchor_tsc: 0,
            anchor_ns: 0,
            mult: 0,
            last_ns: 0,
        };
        if tsc {
            let (t, n) = c.pair();
            (c.base_tsc, c.base_ns, c.anchor_tsc, c.anchor_ns, c.last_ns) = (t, n, t, n, n);
        }
        c
    }

    /// A TSC reading and a monotonic reading taken together (the TSC at their midpoint,
    /// see [`read_together`]): before the scale is known, the TSC readings at most
    /// [`PAIR_TICKS`] apart.
    fn pair(&self) -> (u64, u64) {
        let inner = || self.test.ns(Instant::now());
        read_together(sys::rdtsc, inner, |ticks| match self.mult {
            0 => ticks > PAIR_TICKS,
            m => (u128::from(ticks) * u128::from(m)) >> SHIFT > u128::from(TOGETHER_NS),
        })
    }

    /// The stamp for a block that just went through the socket: ns since the start.
    #[inline]
    pub fn now_ns(&mut self) -> u64 {
        if self.mult == 0 {
            return self.exact();
        }
        let ticks = sys::rdtsc().saturating_sub(self.anchor_tsc);
        let ns = self.anchor_ns + ((u128::from(ticks) * u128::from(self.mult)) >> SHIFT) as u64;
        self.last_ns = self.last_ns.max(ns);
        self.last_ns
    }

    /// A clock that always reads `Instant::now()` (for a thread that also stamps with
    /// `Instant` elsewhere, e.g. a paced sender's waits, whose watermarks a TSC stamp
    /// could fall microseconds behind).
    pub fn monotonic(test: TestClock) -> Self {
        BlockClock {
            tsc: false,
            ..BlockClock::new(test)
        }
    }

    /// A monotonic reading (never before an earlier stamp).
    fn exact(&mut self) -> u64 {
        self.last_ns = self.last_ns.max(self.test.ns(Instant::now()));
        self.last_ns
    }

    /// Reads the monotonic clock, re-fits the TSC to it and restarts the extrapolation
    /// there; returns that reading (at or after every stamp so far: a batch's watermark).
    pub fn anchor(&mut self) -> u64 {
        if !self.tsc {
            return self.exact();
        }
        let (t, n) = self.pair();
        let (span_ns, span_ticks) = (
            n.saturating_sub(self.base_ns),
            t.saturating_sub(self.base_tsc),
        );
        if span_ns >= MIN_FIT_NS && span_ticks > 0 {
            self.mult = ((u128::from(span_ns) << SHIFT) / u128::from(span_ticks)) as u64;
        }
        // Extrapolation restarts at the reading itself: stamps that ran ahead of it wait
        // for it (they never go back) rather than carrying the lead into every later stamp.
        self.last_ns = self.last_ns.max(n);
        self.anchor_tsc = t;
        self.anchor_ns = n;
        self.last_ns
    }

    /// True when stamps come from the time-stamp counter.
    pub fn uses_tsc(&self) -> bool {
        self.tsc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Stamps stay within 50 µs of the monotonic clock between anchors 20 ms apart, never go
    /// backwards, and an anchor is never before an earlier stamp.
    #[test]
    fn stamps_track_the_monotonic_clock_and_never_go_back() {
        let test = TestClock { t0: Instant::now() };
        let mut c = BlockClock::new(test);
        let mut last = 0;
        let mut worst = 0i64;
        let until = Instant::now() + Duration::from_millis(300);
        let mut next_anchor = Instant::now();
        while Instant::now() < until {
            if Instant::now() >= next_anchor {
                let a = c.anchor();
                assert!(a >= last, "anchor {a} before stamp {last}");
                last = a;
                next_anchor += Duration::from_millis(20);
            }
            let before = test.ns(Instant::now());
            let s = c.now_ns();
            let after = test.ns(Instant::now());
            assert!(s >= last, "stamp {s} went back from {last}");
            last = s;
            // Only readings the scheduler did not interrupt bound the stamp's error.
            if after - before < 5_000 {
                worst = worst
                    .max(before as i64 - s as i64)
                    .max(s as i64 - after as i64);
            }
        }
        eprintln!(
            "tsc: {}; worst gap to the monotonic clock {worst} ns",
            c.uses_tsc()
        );
        assert!(worst < 50_000, "a stamp was {worst} ns off");
    }

    /// Stamps that ran ahead of the monotonic clock (a scale fitted over a preempted
    /// reading) are back on it after the next anchor: they wait for it, and the lead does
    /// not carry into later stamps.
    #[test]
    fn a_stamp_ahead_of_the_clock_does_not_stay_ahead() {
        let test = TestClock { t0: Instant::now() };
        let mut c = BlockClock::new(test);
        if !c.uses_tsc() {
            eprintln!(
                "SKIPPED: a_stamp_ahead_of_the_clock_does_not_stay_ahead: clocksource is not \
                 tsc (stamps are monotonic readings)"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
        c.anchor();
        // A stamp 1 ms ahead, as a bad fit extrapolates.
        c.last_ns += 1_000_000;
        c.anchor();
        std::thread::sleep(Duration::from_millis(3));
        let before = test.ns(Instant::now());
        let s = c.now_ns();
        assert!(
            s < before + 50_000,
            "a stamp {} µs ahead of the clock after the anchor",
            (s - before) / 1000
        );
    }
}
