//! Cuts block records into intervals **by each block's timestamp**. An interval closes only
//! when every stream's watermark has passed its end (or the stream is done), so no byte
//! can fall between two intervals or into the wrong one. The last interval is open-ended:
//! it takes everything stamped after its begin and ends at the last record.
//! Used by the reporter thread of each side; no sockets, no clock: tested with synthetic
//! batches.

use std::collections::VecDeque;
use std::time::Duration;

use crate::stream::{Batch, TcpSample};

/// Kernel RTT statistics over an interval (from `TCP_INFO` samples), microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttStats {
    pub min_us: u32,
    pub avg_us: f64,
    pub max_us: u32,
    pub samples: u32,
}

#[derive(Debug, Clone, Default)]
struct StreamAcc {
    bytes: u64,
    rtt_min: u32,
    rtt_max: u32,
    rtt_sum: u64,
    rtt_n: u32,
    last_sample: Option<TcpSample>,
}

impl StreamAcc {
    fn add_sample(&mut self, s: TcpSample) {
        if s.rtt_us > 0 {
            if self.rtt_n == 0 || s.rtt_us < self.rtt_min {
                self.rtt_min = s.rtt_us;
            }
            self.rtt_max = self.rtt_max.max(s.rtt_us);
            self.rtt_sum += u64::from(s.rtt_us);
            self.rtt_n += 1;
        }
        self.last_sample = Some(s);
    }

    fn rtt(&self) -> Option<RttStats> {
        (self.rtt_n > 0).then(|| RttStats {
            min_us: self.rtt_min,
            avg_us: self.rtt_sum as f64 / f64::from(self.rtt_n),
            max_us: self.rtt_max,
            samples: self.rtt_n,
        })
    }
}

/// One stream's share of a closed interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSlice {
    pub bytes: u64,
    pub rtt: Option<RttStats>,
    /// Retransmits during the interval (from `tcpi_total_retrans`), when sampled.
    pub retransmits: Option<u64>,
    /// Congestion window at the interval's last sample, bytes.
    pub cwnd_bytes: Option<u64>,
}

/// A closed interval: `[begin_ns, end_ns)` since the start, one slice per stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedInterval {
    pub index: u32,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub streams: Vec<StreamSlice>,
}

/// Interval cutter for one side of a test.
pub struct IntervalCutter {
    interval_ns: u64,
    duration_ns: u64,
    count: u32,
    first_open: u32,
    open: VecDeque<Vec<StreamAcc>>,
    watermarks: Vec<u64>,
    done: Vec<bool>,
    last_record_ns: Vec<u64>,
    prev_retrans: Vec<Option<u32>>,
    totals: Vec<u64>,
}

impl IntervalCutter {
    /// A cutter for `streams` streams over `duration` in steps of `interval`.
    pub fn new(streams: usize, duration: Duration, interval: Duration) -> Self {
        let interval_ns = (interval.as_nanos() as u64).max(1);
        let duration_ns = (duration.as_nanos() as u64).max(1);
        // Intervals of `interval` from 0; a remainder shorter than 1 % of an interval is
        // folded into the last one rather than making a sliver row.
        let count = duration_ns
            .saturating_sub(interval_ns / 100)
            .div_ceil(interval_ns)
            .max(1);
        IntervalCutter {
            interval_ns,
            duration_ns,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            first_open: 0,
            open: VecDeque::new(),
            watermarks: vec![0; streams],
            done: vec![false; streams],
            last_record_ns: vec![0; streams],
            prev_retrans: vec![None; streams],
            totals: vec![0; streams],
        }
    }

    /// Number of intervals the test will have.
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
        let idx = (t_ns / self.interval_ns).min(u64::from(self.count - 1)) as u32;
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
        for r in &batch.records {
            let idx = self.index_of(r.t_ns);
            self.slot(idx)[s].bytes += u64::from(r.bytes);
            self.totals[s] += u64::from(r.bytes);
            self.last_record_ns[s] = self.last_record_ns[s].max(r.t_ns);
        }
        for sample in &batch.samples {
            let idx = self.index_of(sample.t_ns);
            self.slot(idx)[s].add_sample(*sample);
        }
        self.watermarks[s] = self.watermarks[s].max(batch.watermark_ns);
        self.done[s] |= batch.done;
    }

    /// Marks every stream done (their threads are gone), so all intervals can close.
    pub fn finish(&mut self) {
        self.done.iter_mut().for_each(|d| *d = true);
    }

    /// True when every interval has been handed out.
    pub fn is_complete(&self) -> bool {
        self.first_open >= self.count
    }

    /// The next interval whose end every stream has passed, if any.
    pub fn pop_ready(&mut self) -> Option<ClosedInterval> {
        let k = self.first_open;
        if k >= self.count {
            return None;
        }
        let last = k + 1 == self.count;
        let nominal_end = if last {
            self.duration_ns
        } else {
            (u64::from(k) + 1) * self.interval_ns
        };
        let ready = self
            .watermarks
            .iter()
            .zip(&self.done)
            .all(|(w, d)| *d || (!last && *w >= nominal_end));
        if !ready {
            return None;
        }
        let end_ns = if last {
            nominal_end.max(self.last_record_ns())
        } else {
            nominal_end
        };
        let accs = self.slot(k).clone();
        self.open.pop_front();
        self.first_open += 1;
        let streams = accs
            .into_iter()
            .enumerate()
            .map(|(s, acc)| {
                let (retransmits, cwnd_bytes) = match acc.last_sample {
                    Some(sample) => {
                        let before = self.prev_retrans[s].unwrap_or(0);
                        self.prev_retrans[s] = Some(sample.total_retrans);
                        (
                            Some(u64::from(sample.total_retrans.saturating_sub(before))),
                            Some(sample.cwnd_bytes),
                        )
                    }
                    None => (None, None),
                };
                StreamSlice {
                    bytes: acc.bytes,
                    rtt: acc.rtt(),
                    retransmits,
                    cwnd_bytes,
                }
            })
            .collect();
        Some(ClosedInterval {
            index: k,
            begin_ns: u64::from(k) * self.interval_ns,
            end_ns,
            streams,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::BlockRecord;

    const MS: u64 = 1_000_000;

    fn batch(stream: u16, records: &[(u64, u32)], watermark_ns: u64, done: bool) -> Batch {
        Batch {
            stream,
            records: records
                .iter()
                .map(|&(t_ns, bytes)| BlockRecord { t_ns, bytes })
                .collect(),
            samples: Vec::new(),
            watermark_ns,
            done,
        }
    }

    #[test]
    fn records_fall_in_the_interval_of_their_timestamp() {
        let mut c = IntervalCutter::new(1, Duration::from_secs(3), Duration::from_secs(1));
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
        let mut c = IntervalCutter::new(2, Duration::from_secs(2), Duration::from_secs(1));
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
        let mut c = IntervalCutter::new(3, Duration::from_millis(2500), Duration::from_millis(500));
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
    fn retransmits_are_per_interval_deltas() {
        let mut c = IntervalCutter::new(1, Duration::from_secs(2), Duration::from_secs(1));
        let sample = |t_ns, total_retrans, rtt_us| TcpSample {
            t_ns,
            rtt_us,
            rttvar_us: 0,
            total_retrans,
            cwnd_bytes: 1000,
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
        assert_eq!(iv.streams[0].rtt.unwrap().min_us, 100);
        assert_eq!(iv.streams[0].rtt.unwrap().max_us, 300);
        c.finish();
        assert_eq!(c.pop_ready().unwrap().streams[0].retransmits, Some(4));
    }
}
