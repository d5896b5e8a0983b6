//! Stalls and starvation: the whole test, or single streams while others ran, reading
//! nothing for whole intervals. [`StallLog`] is fed interval by interval by the reporter;
//! the checks read the logs once, at the end.

use super::Evidence;
use crate::report::finding::{Finding, MoreStalledStreams, Stalls, Starvation};
use crate::report::finding::{StreamStall, TestStall};

/// A run of consecutive intervals in which nothing was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// Seconds into the test: the first empty interval's begin, the last one's end.
    pub start: f64,
    pub end: f64,
    pub intervals: u32,
    /// Some other stream read data during it.
    pub others_read: bool,
}

/// The stalls of the whole test or of one stream, fed interval by interval (O(1) state, so
/// any test length is fine). A stream's stall counts only when other streams read data
/// during it: when nothing moved, the whole test's stall says so once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StallLog {
    /// The whole test's log (every stall counts), not a stream's.
    whole_test: bool,
    open: Option<Stall>,
    /// Stalls that count: how many, their intervals in all, and the longest.
    pub count: u32,
    pub intervals: u32,
    pub longest: Option<Stall>,
}

impl StallLog {
    /// The log of the whole test (all streams together).
    pub fn whole_test() -> StallLog {
        StallLog {
            whole_test: true,
            ..StallLog::default()
        }
    }

    /// One more interval, `start..end` seconds: whether this log read nothing in it, and
    /// whether any other stream read something.
    pub fn step(&mut self, start: f64, end: f64, read_nothing: bool, others_read: bool) {
        if !read_nothing {
            self.finish();
            return;
        }
        let run = self.open.get_or_insert(Stall {
            start,
            end,
            intervals: 0,
            others_read: false,
        });
        run.end = end;
        run.intervals += 1;
        run.others_read |= others_read;
    }

    /// Closes the open stall, if any (at the end of the test).
    pub fn finish(&mut self) {
        let Some(run) = self.open.take() else { return };
        if !(self.whole_test || run.others_read) {
            return;
        }
        self.count += 1;
        self.intervals += run.intervals;
        if self.longest.is_none_or(|l| run.intervals > l.intervals) {
            self.longest = Some(run);
        }
    }
}

/// Stream stall lines beyond this many are summed up in one.
const STALLED_STREAM_LINES: usize = 4;

/// The whole test, or single streams while others ran, reading nothing for whole
/// intervals: a paused process, a stalled path, a stream stuck in loss recovery.
pub(super) fn stalls(e: &Evidence, out: &mut Vec<Finding>) {
    if let Some(stalls) = stalls_of(e.test_stalls).filter(|_| !expected_gap(e)) {
        out.push(Finding::new(TestStall { stalls }));
    }
    let mut stalled: Vec<(u16, &StallLog)> = e
        .streams
        .iter()
        .zip(e.stream_stalls)
        .filter(|(_, log)| log.count > 0)
        .map(|(s, log)| (s.stream, log))
        .collect();
    stalled.sort_by_key(|(id, log)| (std::cmp::Reverse(log.intervals), *id));
    for (stream, log) in stalled.iter().take(STALLED_STREAM_LINES) {
        if let Some(stalls) = stalls_of(log) {
            let stream = *stream;
            out.push(Finding::new(StreamStall { stream, stalls }));
        }
    }
    if stalled.len() > STALLED_STREAM_LINES {
        let mut streams: Vec<u16> = stalled[STALLED_STREAM_LINES..]
            .iter()
            .map(|(id, _)| *id)
            .collect();
        streams.sort_unstable();
        out.push(Finding::new(MoreStalledStreams { streams }));
    }
}

/// The whole test's one stall is no stall: the first round trip of a long path, or the
/// gap between blocks of a sender paced below a block per interval.
fn expected_gap(e: &Evidence) -> bool {
    let log = e.test_stalls;
    // On a path whose round trip is longer than an interval, the first intervals are empty
    // because the first bytes are still on their way, not because anything stalled.
    let path_s = e
        .streams
        .iter()
        .filter_map(|r| r.min_rtt)
        .min()
        .map_or(0.0, |us| f64::from(us) / 1e6);
    let only_the_first_trip = log.count == 1
        && log
            .longest
            .as_ref()
            .is_some_and(|l| l.start == 0.0 && l.end <= 2.0 * path_s);
    // A sender paced (-b) below a block per interval leaves intervals empty by design: a
    // stretch no longer than its blocks' spacing (and an interval) is the pacing's.
    let spacing_s = e
        .header
        .rate_bps
        .filter(|&r| r > 0)
        .map_or(0.0, |r| e.header.block_bytes as f64 * 8.0 / r as f64);
    let paced = spacing_s >= e.header.interval_s
        && log
            .longest
            .as_ref()
            .is_some_and(|l| l.end - l.start <= spacing_s + e.header.interval_s);
    only_the_first_trip || paced
}

/// Streams that read nothing in intervals in which others did. Intervals in which no
/// stream read anything are the whole test's stalls (said by [`stalls`]), not starvation.
pub(super) fn starvation(e: &Evidence) -> Option<Finding> {
    let alone: Vec<u32> = e
        .starved_intervals
        .iter()
        .map(|n| n.saturating_sub(e.test_stalls.intervals))
        .collect();
    let streams: Vec<u16> = e
        .streams
        .iter()
        .zip(&alone)
        .filter(|(_, n)| **n > 0)
        .map(|(s, _)| s.stream)
        .collect();
    let total_bytes: u64 = e.streams.iter().map(|s| s.bytes).sum();
    if streams.is_empty() || total_bytes == 0 || e.streams.len() < 2 {
        return None;
    }
    Some(Finding::new(Starvation {
        streams,
        starved_intervals: alone.iter().sum(),
        stream_intervals: e.intervals * e.streams.len() as u32,
    }))
}

/// A log's stalls as figures; None when it has none.
fn stalls_of(log: &StallLog) -> Option<Stalls> {
    let l = log.longest?;
    Some(Stalls {
        longest_from_s: l.start,
        longest_to_s: l.end,
        longest_intervals: l.intervals,
        stretches: log.count,
        intervals: log.intervals,
    })
}
