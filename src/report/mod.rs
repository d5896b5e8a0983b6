//! Reporters: the one thread per side that turns stream batches into interval rows.
//! The server's reporter sends receiver rows over the control connection as each interval
//! closes; the client's joins them with its own sender intervals and is the only writer of
//! stdout. Formatters (one per format) print the model and compute nothing.

pub mod interval;
pub mod model;
pub mod text;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, select};

use crate::error::Result;
use crate::protocol::{Control, ControlMsg, ReceiverDone, ReceiverRow};
use crate::stream::Batch;
use interval::{ClosedInterval, IntervalCutter, StreamSlice};
use model::{Header, IntervalReport, RowStats, RttMs, StreamRow, Summary};

/// One output format.
pub trait Formatter: Send {
    fn header(&mut self, header: &Header) -> io::Result<()>;
    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()>;
    fn summary(&mut self, summary: &Summary) -> io::Result<()>;
}

/// What the server's reporter found once every stream ended.
#[derive(Debug, Clone)]
pub struct ReceiverTotals {
    pub bytes: Vec<u64>,
    pub last_ns: u64,
}

/// The server side: cut receiver records into intervals and send each as a `Row`.
pub fn run_receiver_reporter(
    rx: Receiver<Batch>,
    free: Sender<Batch>,
    mut cutter: IntervalCutter,
    control: Arc<Control>,
) -> Result<ReceiverTotals> {
    let send_ready = |cutter: &mut IntervalCutter| -> Result<()> {
        while let Some(iv) = cutter.pop_ready() {
            control.send(&ControlMsg::Row(ReceiverRow {
                index: iv.index,
                begin_us: iv.begin_ns / 1000,
                end_us: iv.end_ns / 1000,
                bytes: iv.streams.iter().map(|s| s.bytes).collect(),
            }))?;
        }
        Ok(())
    };
    for batch in rx {
        cutter.add(&batch);
        let _ = free.try_send(batch);
        send_ready(&mut cutter)?;
    }
    // Every stream thread is gone: whatever is left closes now.
    cutter.finish();
    send_ready(&mut cutter)?;
    Ok(ReceiverTotals {
        bytes: cutter.totals().to_vec(),
        last_ns: cutter.last_record_ns(),
    })
}

/// What the client's reporter hands back: both sides' byte counts per stream.
#[derive(Debug, Clone)]
pub struct ClientTotals {
    pub sent: Vec<u64>,
    pub received: Option<Vec<u64>>,
    /// Output could not be written (closed pipe): not a test failure.
    pub output_closed: bool,
}

/// Events from the control connection that the client's reporter consumes.
#[derive(Debug)]
pub enum RemoteEvent {
    Row(ReceiverRow),
    Done(ReceiverDone),
}

#[derive(Default, Clone)]
struct StreamTotal {
    rtt_min: f64,
    rtt_max: f64,
    rtt_sum: f64,
    rtt_n: u64,
    retransmits: Option<u64>,
    cwnd: Option<u64>,
}

/// The client side: cut the sender's records, join with the receiver's rows by interval
/// index, print each interval as soon as both halves are in, then the summary.
pub fn run_sender_reporter(
    header: Header,
    local: Receiver<Batch>,
    free: Sender<Batch>,
    remote: Receiver<RemoteEvent>,
    mut cutter: IntervalCutter,
    mut out: Box<dyn Formatter>,
) -> Result<ClientTotals> {
    let streams = header.streams as usize;
    let mut output_ok = write_ok(out.header(&header));
    let mut locals: BTreeMap<u32, ClosedInterval> = BTreeMap::new();
    let mut remotes: BTreeMap<u32, ReceiverRow> = BTreeMap::new();
    let mut next = 0u32;
    let mut totals = vec![StreamTotal::default(); streams];
    let mut done: Option<ReceiverDone> = None;
    let (mut local_open, mut remote_open) = (true, true);

    while local_open || remote_open {
        select! {
            recv(local) -> msg => match msg {
                Ok(batch) => {
                    cutter.add(&batch);
                    let _ = free.try_send(batch);
                }
                Err(_) => {
                    local_open = false;
                    cutter.finish();
                }
            },
            recv(remote) -> msg => match msg {
                Ok(RemoteEvent::Row(row)) => { remotes.insert(row.index, row); }
                Ok(RemoteEvent::Done(d)) => done = Some(d),
                Err(_) => remote_open = false,
            },
        }
        while let Some(iv) = cutter.pop_ready() {
            locals.insert(iv.index, iv);
        }
        while let (Some(l), Some(r)) = (locals.get(&next), remotes.get(&next)) {
            let report = join(l, r, &mut totals);
            if output_ok {
                output_ok = write_ok(out.interval(&report));
            }
            locals.remove(&next);
            remotes.remove(&next);
            next += 1;
        }
    }
    let sent = cutter.totals().to_vec();
    if let Some(d) = &done {
        let summary = summarize(&sent, d, &totals);
        if output_ok {
            output_ok = write_ok(out.summary(&summary));
        }
    }
    Ok(ClientTotals {
        sent,
        received: done.map(|d| d.bytes),
        output_closed: !output_ok,
    })
}

fn write_ok(r: io::Result<()>) -> bool {
    match r {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => false,
        Err(e) => {
            eprintln!("pinperf: writing the report failed: {e}");
            false
        }
    }
}

fn rtt_ms(slice: &StreamSlice) -> Option<RttMs> {
    slice.rtt.map(|r| RttMs {
        min: f64::from(r.min_us) / 1e3,
        avg: r.avg_us / 1e3,
        max: f64::from(r.max_us) / 1e3,
    })
}

fn bps(bytes: u64, secs: f64) -> f64 {
    crate::units::mbps(bytes, secs) * 1e6
}

fn join(
    local: &ClosedInterval,
    remote: &ReceiverRow,
    totals: &mut [StreamTotal],
) -> IntervalReport {
    let begin_s = remote.begin_us as f64 / 1e6;
    let end_s = remote.end_us as f64 / 1e6;
    let span = end_s - begin_s;
    let mut rows = Vec::with_capacity(local.streams.len());
    for (s, slice) in local.streams.iter().enumerate() {
        let bytes = remote.bytes.get(s).copied().unwrap_or(0);
        let rtt = rtt_ms(slice);
        if let (Some(t), Some(r)) = (totals.get_mut(s), slice.rtt) {
            let (min, max) = (f64::from(r.min_us) / 1e3, f64::from(r.max_us) / 1e3);
            t.rtt_min = if t.rtt_n == 0 {
                min
            } else {
                t.rtt_min.min(min)
            };
            t.rtt_max = t.rtt_max.max(max);
            t.rtt_sum += r.avg_us / 1e3 * f64::from(r.samples);
            t.rtt_n += u64::from(r.samples);
        }
        if let Some(t) = totals.get_mut(s) {
            if let Some(retr) = slice.retransmits {
                *t.retransmits.get_or_insert(0) += retr;
            }
            t.cwnd = slice.cwnd_bytes.or(t.cwnd);
        }
        rows.push(StreamRow {
            stream: s as u16,
            stats: RowStats {
                begin_s,
                end_s,
                bytes,
                bits_per_second: bps(bytes, span),
                sent_bytes: slice.bytes,
                rtt_ms: rtt,
                retransmits: slice.retransmits,
                snd_cwnd: slice.cwnd_bytes,
            },
        });
    }
    let sum = sum_rows(&rows, begin_s, end_s);
    IntervalReport {
        index: local.index,
        streams: rows,
        sum,
    }
}

/// The sum of stream rows over one span: bytes add, RTT takes the extremes and the mean of
/// the means, retransmits add, cwnd adds.
fn sum_rows(rows: &[StreamRow], begin_s: f64, end_s: f64) -> RowStats {
    let bytes: u64 = rows.iter().map(|r| r.stats.bytes).sum();
    let rtts: Vec<RttMs> = rows.iter().filter_map(|r| r.stats.rtt_ms).collect();
    let rtt_ms = (!rtts.is_empty()).then(|| RttMs {
        min: rtts.iter().map(|r| r.min).fold(f64::INFINITY, f64::min),
        avg: rtts.iter().map(|r| r.avg).sum::<f64>() / rtts.len() as f64,
        max: rtts.iter().map(|r| r.max).fold(0.0, f64::max),
    });
    let add = |f: fn(&RowStats) -> Option<u64>| -> Option<u64> {
        rows.iter().filter_map(|r| f(&r.stats)).reduce(|a, b| a + b)
    };
    RowStats {
        begin_s,
        end_s,
        bytes,
        bits_per_second: bps(bytes, end_s - begin_s),
        sent_bytes: rows.iter().map(|r| r.stats.sent_bytes).sum(),
        rtt_ms,
        retransmits: add(|s| s.retransmits),
        snd_cwnd: add(|s| s.snd_cwnd),
    }
}

fn summarize(sent: &[u64], done: &ReceiverDone, totals: &[StreamTotal]) -> Summary {
    let end_s = done.elapsed_us as f64 / 1e6;
    let rows: Vec<StreamRow> = totals
        .iter()
        .enumerate()
        .map(|(s, t)| {
            let bytes = done.bytes.get(s).copied().unwrap_or(0);
            StreamRow {
                stream: s as u16,
                stats: RowStats {
                    begin_s: 0.0,
                    end_s,
                    bytes,
                    bits_per_second: bps(bytes, end_s),
                    sent_bytes: sent.get(s).copied().unwrap_or(0),
                    rtt_ms: (t.rtt_n > 0).then(|| RttMs {
                        min: t.rtt_min,
                        avg: t.rtt_sum / t.rtt_n as f64,
                        max: t.rtt_max,
                    }),
                    retransmits: t.retransmits,
                    snd_cwnd: t.cwnd,
                },
            }
        })
        .collect();
    let sum = sum_rows(&rows, 0.0, end_s);
    Summary {
        sent_bytes: sent.iter().sum(),
        received_bytes: done.bytes.iter().sum(),
        streams: rows,
        sum,
    }
}
