//! CSV output: one header row, then one row per stream per interval and an explicit `sum`
//! row per interval, then `total` rows per stream and one `total_sum` row at the end. Base
//! units only: bytes, bits per second, microseconds. Empty cells are values not measured.

use std::io::{self, Write};

use super::Formatter;
use super::model::{Fairness, Header, IntervalReport, RttSummary, StreamRow, SumRow, Summary};

/// The header row.
pub const COLUMNS: &str = "kind,interval,stream,start_us,end_us,bytes,bits_per_second,sent_bytes,\
retransmits,snd_cwnd_bytes,srtt_us,min_rtt_us,delivery_rate_bps,notsent_bytes,\
block_rtt_min_us,block_rtt_avg_us,block_rtt_max_us,block_rtt_median_us,block_rtt_samples,\
jain,min_share,max_share,starved";

pub struct CsvFormatter<W: Write> {
    out: W,
}

impl<W: Write> CsvFormatter<W> {
    pub fn new(out: W) -> Self {
        CsvFormatter { out }
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn us(secs: f64) -> u64 {
    (secs * 1e6).round() as u64
}

fn rtt_cells(r: Option<RttSummary>) -> String {
    match r {
        Some(r) => format!(
            "{:.1},{:.1},{:.1},{},{}",
            r.min_us,
            r.avg_us,
            r.max_us,
            r.median_us.map(|m| format!("{m:.1}")).unwrap_or_default(),
            r.samples
        ),
        None => ",,,,".into(),
    }
}

fn stream_line(kind: &str, interval: &str, r: &StreamRow) -> String {
    format!(
        "{kind},{interval},{},{},{},{},{:.0},{},{},{},{},{},{},{},{},,,,",
        r.stream,
        us(r.start),
        us(r.end),
        r.bytes,
        r.bits_per_second,
        r.sent_bytes,
        opt(r.retransmits),
        opt(r.snd_cwnd),
        opt(r.rtt.map(|v| v.round() as u64)),
        opt(r.min_rtt),
        opt(r.delivery_rate),
        opt(r.notsent_bytes),
        rtt_cells(r.block_rtt),
    )
}

fn sum_line(kind: &str, interval: &str, s: &SumRow, f: &Fairness, starved: u32) -> String {
    format!(
        "{kind},{interval},,{},{},{},{:.0},{},{},,{},,,,{},{},{},{},{}",
        us(s.start),
        us(s.end),
        s.bytes,
        s.bits_per_second,
        s.sent_bytes,
        opt(s.retransmits),
        opt(s.kernel_rtt.map(|k| k.avg_us.round() as u64)),
        rtt_cells(s.block_rtt),
        opt(f.jain.map(|j| format!("{j:.6}"))),
        opt(f.min_share.map(|v| format!("{v:.6}"))),
        opt(f.max_share.map(|v| format!("{v:.6}"))),
        starved
    )
}

impl<W: Write + Send> Formatter for CsvFormatter<W> {
    fn header(&mut self, _header: &Header) -> io::Result<()> {
        writeln!(self.out, "{COLUMNS}")?;
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalReport) -> io::Result<()> {
        let idx = iv.index.to_string();
        for r in &iv.streams {
            writeln!(self.out, "{}", stream_line("stream", &idx, r))?;
        }
        writeln!(
            self.out,
            "{}",
            sum_line(
                "sum",
                &idx,
                &iv.sum,
                &iv.sum.fairness,
                iv.sum.fairness.starved
            )
        )?;
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        for r in &s.streams {
            writeln!(self.out, "{}", stream_line("total", "", r))?;
        }
        writeln!(
            self.out,
            "{}",
            sum_line(
                "total_sum",
                "",
                &s.sum,
                &s.fairness.totals,
                s.fairness.starved_intervals
            )
        )?;
        self.out.flush()
    }
}
