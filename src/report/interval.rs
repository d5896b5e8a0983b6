//! Cuts block records into intervals **by each block's timestamp**. An interval closes only
//! when every stream's watermark has passed its end (or the stream is done), so no byte
//! can fall between two intervals or into the wrong one. The last interval is open-ended:
//! it takes everything stamped after its begin and ends at the last record.
//! Used by the reporter thread of each side; no sockets, no clock: tested with synthetic
//! batches.

use std::collections::VecDeque;
use std::time::Duration;

use crate::data::stream::{Batch, TcpSample, UdpSnapshot};
pub use crate::wire::measure::{ClosedInterval, RttStats, StreamSlice, UdpSlice};

#[derive(Debug, Clone, Default)]
struct StreamAcc {
    bytes: u64,
    srtt_min: u32,
    srtt_max: u32,
    srtt_sum: u64,
    srtt_n: u32,
    last_sample: Option<TcpSample>,
    block_rtts_us: Vec<u32>,
    /// A UDP receiver's last snapshot stamped in this interval.
    udp_last: Option<UdpSnapshot>,
}

impl StreamAcc {
    fn add_sample(&mut self, s: TcpSample) {
        if s.rtt_us > 0 {
            if self.srtt_n == 0 || s.rtt_us < self.srtt_min {
                self.srtt_min = s.rtt_us;
            }
            self.srtt_max = self.srtt_max.max(s.rtt_us);
            self.srtt_sum += u64::from(s.rtt_us);
            self.srtt_n += 1;
        }
        self.last_sample = Some(s);
    }

    fn srtt(&self) -> Option<RttStats> {
        (self.srtt_n > 0).then(|| RttStats {
            min_us: self.srtt_min,
            avg_us: self.srtt_sum as f64 / f64::from(self.srtt_n),
            max_us: self.srtt_max,
            median_us: None,
            samples: self.srtt_n,
        })
    }
}

/// Interval cutter for one side of a test.
pub struct IntervalCutter {
    /// Each interval's end, ns since the start; the last is the planned end of the test.
    ends_ns: Vec<u64>,
    /// Intervals `0..omitted` are inside `-O`'s omitted seconds.
    omitted: u32,
    count: u32,
    first_open: u32,
    open: VecDeque<Vec<StreamAcc>>,
    watermarks: Vec<u64>,
    done: Vec<bool>,
    last_record_ns: Vec<u64>,
    prev_retrans: Vec<Option<u32>>,
    /// Each UDP stream's last snapshot in an interval already closed.
    prev_udp: Vec<Option<UdpSnapshot>>,
    totals: Vec<u64>,
    /// The test was stopped before its end ([`IntervalCutter::stop`]).
    stopped: bool,
    /// Subtracted from every record's time ([`IntervalCutter::arriving_after`]).
    delay_ns: u64,
    /// A record has been added (the delay is checked against the first).
    arrived: bool,
}

impl IntervalCutter {
    /// A cutter for `streams` streams: `omit` (which may be zero) then `duration`, each
    /// cut in steps of `interval` from its own start, so no interval straddles the end of
    /// the omitted part.
    pub fn new(streams: usize, duration: Duration, interval: Duration, omit: Duration) -> Self {
        let interval_ns = (interval.as_nanos() as u64).max(1);
        let mut ends_ns = Vec::new();
        let omit_ns = omit.as_nanos() as u64;
        Self::cut(&mut ends_ns, 0, omit_ns, interval_ns);
        let omitted = ends_ns.len() as u32;
        let duration_ns = (duration.as_nanos() as u64).max(1);
        Self::cut(&mut ends_ns, omit_ns, duration_ns, interval_ns);
        let count = ends_ns.len() as u32;
        IntervalCutter {
            ends_ns,
            omitted,
            count,
            first_open: 0,
            open: VecDeque::new(),
            watermarks: vec![0; streams],
            done: vec![false; streams],
            last_record_ns: vec![0; streams],
            prev_retrans: vec![None; streams],
            prev_udp: vec![None; streams],
            totals: vec![0; streams],
            stopped: false,
            delay_ns: 0,
            arrived: false,
        }
    }

    /// The cutter for a test's parameters.
    pub fn for_test(streams: usize, p: &crate::wire::params::TestParams) -> Self {
        Self::new(streams, p.duration(), p.interval(), p.omit())
    }

    /// For receivers whose clock started `delay` before the first byte could reach them
    /// (a server's, started as it told the client to send: the data comes a round trip
    /// later): their records are cut on the senders' clock, so a long path's round trip is
    /// not an empty start, a longer test, and a lower rate.
    /// The delay is at most [`crate::timeouts::LONGEST_RTT`] and never past the first
    /// record's time.
    pub fn arriving_after(mut self, delay: Duration) -> Self {
        self.delay_ns = delay.min(crate::timeouts::LONGEST_RTT).as_nanos() as u64;
        self
    }

    /// Appends the ends of intervals of `step` covering `[from, from + span)`; a remainder
    /// shorter than 1 % of a step is folded into the last one rather than made a sliver.
    fn cut(ends: &mut Vec<u64>, from: u64, span: u64, step: u64) {
        if span == 0 {
            return;
        }
        let count = span.saturating_sub(step / 100).div_ceil(step).max(1);
        for k in 1..count {
            ends.push(from + k * step);
        }
        ends.push(from + span);
    }

    /// Number of intervals the test will have.
    #[cfg(test)]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Bytes per stream over the whole test so far.
    pub fn totals(&self) -> &[u64] {
        &self.totals
    }

    /// The latest record of any stream, ns since the start.
    pub fn last_record_ns(&self) -> u64 {
        self.last_record_ns.iter().copied().max().unwrap_or(0)
    }

    fn index_of(&self, t_ns: u64) -> u32 {
        let idx = (self.ends_ns.partition_point(|&end| end <= t_ns) as u32).min(self.count - 1);
        // Defensive: a record for an interval already closed (a broken watermark) is
        // counted in the oldest open interval rather than lost.
        idx.max(self.first_open)
    }

    fn slot(&mut self, idx: u32) -> &mut Vec<StreamAcc> {
        let pos = (idx - self.first_open) as usize;
        let streams = self.watermarks.len();
        while self.open.len() <= pos {
            self.open.push_back(vec![StreamAcc::default(); streams]);
        }
        &mut self.open[pos]
    }

    /// Adds a batch of one stream's records. Stream ids outside the test are ignored.
    pub fn add(&mut self, batch: &Batch) {
        let s = batch.stream as usize;
        if s >= self.watermarks.len() {
            return;
        }
        // A first byte earlier than the delay says it was overestimated (a handshake
        // that met a queue): the records are never moved before it.
        if let Some(first) = batch.records.first().filter(|_| !self.arrived) {
            self.delay_ns = self.delay_ns.min(first.t_ns);
            self.arrived = true;
        }
        let delay_ns = self.delay_ns;
        let at = |t_ns: u64| t_ns.saturating_sub(delay_ns);
        for r in &batch.records {
            let idx = self.index_of(at(r.t_ns));
            self.slot(idx)[s].bytes += u64::from(r.bytes);
            self.totals[s] += u64::from(r.bytes);
            self.last_record_ns[s] = self.last_record_ns[s].max(at(r.t_ns));
        }
        for sample in &batch.samples {
            let idx = self.index_of(at(sample.t_ns));
            self.slot(idx)[s].add_sample(*sample);
        }
        for snap in &batch.udp {
            let idx = self.index_of(at(snap.t_ns));
            let acc = &mut self.slot(idx)[s];
            // Snapshots are cumulative: the latest one stands for the interval.
            if acc.udp_last.is_none_or(|l| l.t_ns <= snap.t_ns) {
                acc.udp_last = Some(*snap);
            }
        }
        for rtt in &batch.block_rtts {
            let idx = self.index_of(at(rtt.t_ns));
            let us = u32::try_from(rtt.rtt_ns / 1000).unwrap_or(u32::MAX);
            self.slot(idx)[s].block_rtts_us.push(us);
        }
        self.watermarks[s] = self.watermarks[s].max(at(batch.watermark_ns));
        self.done[s] |= batch.done;
        // A stream that ended early stopped the test (see `stop`).
        self.stopped |= batch.early;
    }

    /// Marks every stream done (their threads are gone), so all intervals can close.
    pub fn finish(&mut self) {
        self.done.iter_mut().for_each(|d| *d = true);
    }

    /// The test was stopped before its end (a signal, a failure): no interval that begins
    /// after the last record is made, the planned last one included (a test that ran its
    /// course keeps that one, which may hold nothing when its path went quiet).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// True when every interval has been handed out.
    #[cfg(test)]
    pub fn is_complete(&self) -> bool {
        self.first_open >= self.count
    }

    /// The next interval whose end every stream has passed, if any.
    pub fn pop_ready(&mut self) -> Option<ClosedInterval> {
        let k = self.first_open;
        if k >= self.count || !self.ready(k) {
            return None;
        }
        let begin_ns = k.checked_sub(1).map_or(0, |p| self.ends_ns[p as usize]);
        let Some(end_ns) = self.end_of(k, begin_ns) else {
            self.first_open = self.count;
            return None;
        };
        self.slot(k);
        let accs = self.open.pop_front().expect("slot k exists");
        self.first_open += 1;
        let streams = (accs.into_iter().enumerate())
            .map(|(s, acc)| self.slice(s, acc))
            .collect();
        Some(ClosedInterval {
            index: k,
            omitted: k < self.omitted,
            begin_ns,
            end_ns,
            streams,
        })
    }

    /// Every stream has passed interval `k`'s end or is done (all of them, for the last).
    fn ready(&self, k: u32) -> bool {
        let last = k + 1 == self.count;
        let nominal_end = self.ends_ns[k as usize];
        (self.watermarks.iter().zip(&self.done)).all(|(w, d)| *d || (!last && *w >= nominal_end))
    }

    /// Where interval `k`, begun at `begin_ns`, ends; none when a stopped test makes no
    /// interval from `k` on.
    fn end_of(&self, k: u32, begin_ns: u64) -> Option<u64> {
        let last = k + 1 == self.count;
        let nominal_end = self.ends_ns[k as usize];
        let all_done = self.done.iter().all(|d| *d);
        if self.stopped && all_done && k > 0 && self.last_record_ns() < begin_ns {
            return None;
        }
        // The planned last interval ends at its nominal end (or past it, at a drain's
        // last byte) unless the test was stopped: then, like any other, at its last record.
        Some(if last && !(self.stopped && all_done) {
            nominal_end.max(self.last_record_ns())
        } else if last && self.last_record_ns() >= nominal_end {
            self.last_record_ns()
        } else if all_done
            && self.last_record_ns() < nominal_end
            && self.watermarks.iter().any(|&w| w < nominal_end)
        {
            // Every stream ended early (the test was stopped): the interval holding the
            // last record ends there, and none follows it (none at all without a record).
            // Streams that lived past the interval with nothing to record (a sender
            // paused, then past its run time) close it at its end, holding nothing.
            let nothing = self.last_record_ns() == 0;
            if nothing || (k > 0 && self.last_record_ns() < begin_ns) {
                return None;
            }
            self.last_record_ns().max(begin_ns)
        } else {
            nominal_end
        })
    }

    /// Stream `s`'s part of the interval closing with `acc`: its retransmits and datagram
    /// counts are the differences from the interval before.
    fn slice(&mut self, s: usize, mut acc: StreamAcc) -> StreamSlice {
        let retransmits = acc.last_sample.map(|sample| {
            let before = self.prev_retrans[s].unwrap_or(0);
            self.prev_retrans[s] = Some(sample.total_retrans);
            u64::from(sample.total_retrans.saturating_sub(before))
        });
        let udp = match (acc.udp_last, self.prev_udp[s]) {
            (Some(now), before) => {
                self.prev_udp[s] = Some(now);
                Some(UdpSlice::between(&before.unwrap_or_default(), &now))
            }
            // A UDP stream without a snapshot in this interval received nothing
            // in it; its jitter stands.
            (None, Some(before)) => Some(UdpSlice::between(&before, &before)),
            (None, None) => None,
        };
        StreamSlice {
            bytes: acc.bytes,
            srtt: acc.srtt(),
            block_rtt: RttStats::of(&mut acc.block_rtts_us),
            retransmits,
            last: acc.last_sample,
            udp,
        }
    }
}

/// Cuts one side's batches of a whole test at once (for tests of stream threads).
#[cfg(test)]
pub(crate) fn cut(
    streams: usize,
    batches: &[Batch],
    duration: Duration,
    interval: Duration,
) -> Vec<ClosedInterval> {
    let mut c = IntervalCutter::new(streams, duration, interval, Duration::ZERO);
    batches.iter().for_each(|b| c.add(b));
    c.finish();
    std::iter::from_fn(|| c.pop_ready()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stream::BlockRecord;

    const MS: u64 = 1_000_000;

    fn batch(stream: u16, records: &[(u64, u32)], watermark_ns: u64, done: bool) -> Batch {
        Batch {
            stream,
            records: records
                .iter()
                .map(|&(t_ns, bytes)| BlockRecord { t_ns, bytes })
                .collect(),
            samples: Vec::new(),
            block_rtts: Vec::new(),
            udp: Vec::new(),
            watermark_ns,
            done,
            early: false,
        }
    }

    /// A server's receivers: records a round trip (600 ms) after its clock started fall in
    /// the intervals of the senders' clock, and the test ends where the senders stopped
    /// (a 3 s UDP test over 600 ms ran 3.6 s at 83 % of -b, "the sending host
    /// could not keep up").
    #[test]
    fn receivers_records_are_cut_on_the_senders_clock() {
        // A 2 s test in 1 s intervals, its records `ms` late.
        let late = |ms| {
            IntervalCutter::new(
                1,
                Duration::from_secs(2),
                Duration::from_secs(1),
                Duration::ZERO,
            )
            .arriving_after(Duration::from_millis(ms))
        };
        let mut c = late(600);
        c.add(&batch(
            0,
            &[
                (600 * MS, 10),
                (1599 * MS, 20),
                (1600 * MS, 40),
                (2599 * MS, 80),
            ],
            2600 * MS,
            true,
        ));
        let rows: Vec<_> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| (iv.begin_ns, iv.end_ns, iv.streams[0].bytes))
            .collect();
        assert_eq!(rows, [(0, 1000 * MS, 30), (1000 * MS, 2000 * MS, 120)]);
        assert_eq!(c.last_record_ns(), 1999 * MS);
        // A delay above the first byte's time (overestimated): moved back to that byte.
        let mut c = late(900);
        c.add(&batch(
            0,
            &[(600 * MS, 10), (1650 * MS, 20)],
            2000 * MS,
            true,
        ));
        let rows: Vec<_> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| iv.streams[0].bytes)
            .collect();
        assert_eq!(rows, [10, 20]);
        assert_eq!(c.last_record_ns(), 1050 * MS);
    }

    #[test]
    fn records_fall_in_the_interval_of_their_timestamp() {
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(3),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        assert_eq!(c.count(), 3);
        // One batch straddling the 1 s boundary: the bytes split by timestamp.
        c.add(&batch(
            0,
            &[(999 * MS, 10), (1000 * MS, 20), (2500 * MS, 40)],
            2500 * MS,
            false,
        ));
        let first = c.pop_ready().unwrap();
        assert_eq!(
            (
                first.index,
                first.begin_ns,
                first.end_ns,
                first.streams[0].bytes
            ),
            (0, 0, 1000 * MS, 10)
        );
        let second = c.pop_ready().unwrap();
        assert_eq!(second.streams[0].bytes, 20);
        // The last interval waits for the stream to be done.
        assert!(c.pop_ready().is_none());
        c.add(&batch(0, &[(3100 * MS, 5)], 3100 * MS, true));
        let last = c.pop_ready().unwrap();
        assert_eq!((last.streams[0].bytes, last.end_ns), (45, 3100 * MS));
        assert!(c.is_complete());
        assert_eq!(c.totals(), &[75]);
    }

    #[test]
    fn an_interval_waits_for_the_slowest_watermark() {
        let mut c = IntervalCutter::new(
            2,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        c.add(&batch(0, &[(1500 * MS, 1)], 1500 * MS, false));
        assert!(c.pop_ready().is_none(), "stream 1 has not passed 1 s yet");
        // A starved stream advances its watermark with an empty batch: the interval closes
        // with zero bytes for it.
        c.add(&batch(1, &[], 1001 * MS, false));
        let iv = c.pop_ready().unwrap();
        assert_eq!(
            iv.streams.iter().map(|s| s.bytes).collect::<Vec<_>>(),
            vec![0, 0]
        );
    }

    #[test]
    fn contiguous_intervals_and_no_byte_lost() {
        let mut c = IntervalCutter::new(
            3,
            Duration::from_millis(2500),
            Duration::from_millis(500),
            Duration::ZERO,
        );
        let mut sent = 0u64;
        for t in (0..2600).step_by(7) {
            let s = (t % 3) as u16;
            c.add(&batch(s, &[(t * MS, t as u32 + 1)], t * MS, false));
            sent += t + 1;
        }
        c.finish();
        let mut got = 0u64;
        let mut expect_begin = 0;
        while let Some(iv) = c.pop_ready() {
            assert_eq!(iv.begin_ns, expect_begin);
            expect_begin = iv.end_ns;
            got += iv.streams.iter().map(|s| s.bytes).sum::<u64>();
        }
        assert_eq!(c.count(), 5);
        assert_eq!(got, sent);
    }

    #[test]
    fn block_rtts_fall_in_their_interval_with_a_median() {
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        let mut b = batch(0, &[], 1500 * MS, false);
        b.block_rtts = [
            (100, 5_000),
            (200, 1_000),
            (300, 3_000),
            (400, 9_000),
            (1100, 7_000),
        ]
        .iter()
        .map(|&(t_ms, rtt_ns)| crate::data::stream::BlockRtt {
            t_ns: t_ms * MS,
            rtt_ns,
        })
        .collect();
        c.add(&b);
        let rtt = c.pop_ready().unwrap().streams[0].block_rtt.unwrap();
        assert_eq!(
            (rtt.min_us, rtt.max_us, rtt.median_us, rtt.samples),
            (1, 9, Some(4), 4)
        );
        assert_eq!(rtt.avg_us, 4.5);
        c.finish();
        assert_eq!(
            c.pop_ready().unwrap().streams[0]
                .block_rtt
                .unwrap()
                .median_us,
            Some(7)
        );
        assert_eq!(RttStats::of(&mut [3, 1, 2]).unwrap().median_us, Some(2));
        assert_eq!(RttStats::of(&mut []), None);
    }

    #[test]
    fn retransmits_are_per_interval_deltas() {
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        let sample = |t_ns, total_retrans, rtt_us| TcpSample {
            t_ns,
            rtt_us,
            total_retrans,
            cwnd_bytes: 1000,
            ..TcpSample::default()
        };
        let mut b = batch(0, &[], 1200 * MS, false);
        b.samples = vec![
            sample(100 * MS, 3, 100),
            sample(900 * MS, 5, 300),
            sample(1100 * MS, 9, 200),
        ];
        c.add(&b);
        let iv = c.pop_ready().unwrap();
        assert_eq!(iv.streams[0].retransmits, Some(5));
        assert_eq!(iv.streams[0].srtt.unwrap().min_us, 100);
        assert_eq!(iv.streams[0].srtt.unwrap().max_us, 300);
        c.finish();
        assert_eq!(c.pop_ready().unwrap().streams[0].retransmits, Some(4));
    }

    #[test]
    fn omitted_seconds_are_cut_on_their_own_and_marked() {
        // -O 1.5 -t 2 -i 1: [0,1) [1,1.5) omitted, then [1.5,2.5) [2.5,3.5).
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::from_millis(1500),
        );
        assert_eq!(c.count(), 4);
        let ms = 1_000_000;
        c.add(&batch(
            0,
            &[(0, 1), (1200 * ms, 2), (1600 * ms, 4), (3000 * ms, 8)],
            3600 * ms,
            true,
        ));
        let got: Vec<(bool, u64, u64, u64)> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| {
                (
                    iv.omitted,
                    iv.begin_ns / ms,
                    iv.end_ns / ms,
                    iv.streams[0].bytes,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (true, 0, 1000, 1),
                (true, 1000, 1500, 2),
                (false, 1500, 2500, 4),
                (false, 2500, 3500, 8)
            ]
        );
    }

    #[test]
    fn a_test_stopped_early_ends_its_rows_at_the_last_record() {
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(8),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        let ms = 1_000_000;
        c.add(&batch(
            0,
            &[(500 * ms, 1), (2500 * ms, 2), (3060 * ms, 4)],
            3060 * ms,
            true,
        ));
        let got: Vec<(u64, u64, u64)> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| (iv.begin_ns / ms, iv.end_ns / ms, iv.streams[0].bytes))
            .collect();
        assert_eq!(
            got,
            [
                (0, 1000, 1),
                (1000, 2000, 0),
                (2000, 3000, 2),
                (3000, 3060, 4)
            ]
        );
    }

    /// Stopped inside the second-to-last interval: the planned last one, which began
    /// after the last record, is not made (a test with `-t 4` stopped at 2.5 s
    /// printed a 3.000-4.000 row of 0.000); a test that ran its course keeps it.
    #[test]
    fn a_stopped_test_makes_no_last_interval_after_its_last_record() {
        let ms = 1_000_000;
        let rows = |stopped: bool| {
            let mut c = IntervalCutter::new(
                1,
                Duration::from_secs(4),
                Duration::from_secs(1),
                Duration::ZERO,
            );
            c.add(&batch(0, &[(500 * ms, 1), (2500 * ms, 2)], 2500 * ms, true));
            if stopped {
                c.stop();
            }
            std::iter::from_fn(|| c.pop_ready())
                .map(|iv| (iv.begin_ns / ms, iv.end_ns / ms))
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(true), [(0, 1000), (1000, 2000), (2000, 2500)]);
        assert_eq!(rows(false).last(), Some(&(3000, 4000)), "{:?}", rows(false));
    }

    /// A sender paused from 1.5 s to 9.5 s of `-t 5` (SIGSTOP), then past its run time:
    /// its last batch comes at 9.5 s with nothing in it. The rows of the pause are made,
    /// holding nothing (a UDP client printed two rows of five and exited 0).
    #[test]
    fn a_stream_that_lived_through_a_silent_stretch_keeps_its_rows() {
        let ms = 1_000_000;
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(5),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        c.add(&batch(0, &[(500 * ms, 1), (1500 * ms, 2)], 9500 * ms, true));
        c.finish();
        let rows: Vec<_> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| (iv.begin_ns / ms, iv.end_ns / ms, iv.streams[0].bytes))
            .collect();
        assert_eq!(
            rows,
            [
                (0, 1000, 1),
                (1000, 2000, 2),
                (2000, 3000, 0),
                (3000, 4000, 0),
                (4000, 5000, 0)
            ]
        );
    }

    /// A stream's batch marked `early` (its thread failed or was aborted) stops the cutter
    /// by itself: the server's, which hears of no failure, made a 2.0-3.0 row of 0 for a
    /// connection reset at 1.51 s of `-t 3`.
    #[test]
    fn a_stream_that_ended_early_stops_the_rows_at_its_last_record() {
        let ms = 1_000_000;
        let mut c = IntervalCutter::new(
            1,
            Duration::from_secs(3),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        let mut last = batch(0, &[(500 * ms, 1), (1510 * ms, 2)], 1510 * ms, true);
        last.early = true;
        c.add(&last);
        c.finish();
        let rows: Vec<_> = std::iter::from_fn(|| c.pop_ready())
            .map(|iv| (iv.begin_ns / ms, iv.end_ns / ms))
            .collect();
        assert_eq!(rows, [(0, 1000), (1000, 1510)]);
    }

    /// Stopped inside the planned last interval (`-t 3 -i 5` interrupted at 2.1 s, or
    /// `-i 2` at 2.01 s): it ends at the last record, not at the planned end
    /// (rows and totals "up to 3.000 s" for a test stopped at 2.1 s, the rate 30 % low).
    #[test]
    fn a_test_stopped_in_its_last_interval_ends_it_at_the_last_record() {
        let ms = 1_000_000;
        let rows = |interval_s: u64, stopped: bool| {
            let mut c = IntervalCutter::new(
                1,
                Duration::from_secs(3),
                Duration::from_secs(interval_s),
                Duration::ZERO,
            );
            c.add(&batch(0, &[(500 * ms, 1), (2100 * ms, 2)], 2100 * ms, true));
            if stopped {
                c.stop();
            }
            std::iter::from_fn(|| c.pop_ready())
                .map(|iv| (iv.begin_ns / ms, iv.end_ns / ms, iv.streams[0].bytes))
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(3, true), [(0, 2100, 3)]);
        assert_eq!(rows(2, true), [(0, 2000, 1), (2000, 2100, 2)]);
        assert_eq!(
            rows(3, false),
            [(0, 3000, 3)],
            "ran its course: the planned end"
        );
    }

    #[test]
    fn a_test_stopped_before_its_first_record_has_no_rows() {
        let mut c = IntervalCutter::new(
            2,
            Duration::from_secs(8),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        c.finish();
        assert!(c.pop_ready().is_none(), "no zero-length row");
    }

    fn snap(t_ms: u64, packets: u64, highest: u64, ooo: u64, rxq: u64) -> UdpSnapshot {
        UdpSnapshot {
            t_ns: t_ms * MS,
            packets,
            bytes: packets * 100,
            highest_seq_plus_one: highest,
            out_of_order: ooo,
            duplicates: 0,
            jitter_us: t_ms as f64,
            rxq_drops: rxq,
        }
    }

    #[test]
    fn udp_intervals_are_differences_of_the_receivers_snapshots() {
        let mut c = IntervalCutter::new(
            2,
            Duration::from_secs(4),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        // Stream 0 is UDP: one snapshot per record. Second 0: 10 of 10; second 1: 8 of
        // the next 10 (2 lost, 1 receive-queue drop); second 2: nothing arrives; second 3:
        // sequences 20..30 and both of second 1's missing ones, late.
        let recs = [(500, 10), (1500, 8), (3500, 12)];
        let mut b = batch(0, &recs.map(|(t, n)| (t * MS, n * 100)), 4000 * MS, true);
        b.udp = vec![
            snap(500, 10, 10, 0, 0),
            snap(1500, 18, 20, 0, 1),
            snap(3500, 30, 30, 2, 1),
        ];
        c.add(&b);
        // Stream 1 is TCP.
        c.add(&batch(1, &[(100 * MS, 5)], 4000 * MS, true));
        let rows: Vec<ClosedInterval> = std::iter::from_fn(|| c.pop_ready()).collect();
        assert_eq!(rows.len(), 4);
        assert!(
            rows.iter().all(|r| r.streams[1].udp.is_none()),
            "TCP has none"
        );
        let udp: Vec<UdpSlice> = rows.iter().map(|r| r.streams[0].udp.unwrap()).collect();
        let got: Vec<(u64, u64, u64, u64)> = udp
            .iter()
            .map(|u| (u.packets, u.lost, u.out_of_order, u.rxq_drops))
            .collect();
        assert_eq!(
            got,
            [(10, 0, 0, 0), (8, 2, 0, 1), (0, 0, 0, 0), (12, 0, 2, 0)]
        );
        assert_eq!(udp[1].lost_percent, 20.0);
        // Jitter is the estimate at the interval's last snapshot; it stands while idle.
        assert_eq!(
            udp.iter().map(|u| u.jitter_ms).collect::<Vec<_>>(),
            [0.5, 1.5, 1.5, 3.5]
        );
        assert_eq!(
            rows.iter().map(|r| r.streams[0].bytes).sum::<u64>(),
            3000,
            "bytes come from the records, as for TCP"
        );
        // A slice travels on the control connection.
        let json = serde_json::to_string(&rows[1]).unwrap();
        let back: ClosedInterval = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rows[1]);
    }

    #[test]
    fn a_udp_slice_never_counts_negative_loss() {
        let before = snap(0, 10, 12, 0, 0);
        // Late arrivals filled the earlier gap and nothing new was expected.
        let after = snap(1000, 12, 12, 2, 0);
        let s = UdpSlice::between(&before, &after);
        assert_eq!((s.packets, s.lost, s.lost_percent), (2, 0, 0.0));
        assert_eq!(UdpSlice::between(&after, &after).lost_percent, 0.0);
    }
}
