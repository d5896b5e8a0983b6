//! CSV output: one header row, then one row per stream per interval and an explicit `sum`
//! row per interval, then `total` rows per stream and one `total_sum` row at the end; CPU
//! rows follow (`cpu_process`, `cpu_thread` and `cpu_core` per side, `cpu_efficiency`), and
//! with `--cpu` a `cpu_core` row per core per interval. Base units only: bytes, bits per
//! second, microseconds, percent. Empty cells are values not measured or not applicable.

use std::io::{self, Write};

use super::Formatter;
use super::model::{Fairness, Header, IntervalReport, RttSummary, StreamRow, SumRow, Summary};
use crate::cpu::{CoreLoad, CpuReport};

/// The header row.
pub const COLUMNS: &str = "kind,interval,stream,start_us,end_us,bytes,bits_per_second,sent_bytes,\
retransmits,snd_cwnd_bytes,srtt_us,min_rtt_us,delivery_rate_bps,notsent_bytes,\
block_rtt_min_us,block_rtt_avg_us,block_rtt_max_us,block_rtt_median_us,block_rtt_samples,\
jain,min_share,max_share,starved,\
side,core,cpu_user_us,cpu_sys_us,cpu_percent,busy_percent,softirq_percent,gbps_per_busy_core,cpu_seconds_per_gb";

/// Commas that leave the CPU columns empty on traffic rows.
const NO_CPU: &str = ",,,,,,,,,";

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
        "{kind},{interval},{},{},{},{},{:.0},{},{},{},{},{},{},{},{},,,,{NO_CPU}",
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
        "{kind},{interval},,{},{},{},{:.0},{},{},,{},,,,{},{},{},{},{}{NO_CPU}",
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

/// A CPU row: the traffic columns empty but kind, interval and stream.
fn cpu_line(kind: &str, interval: &str, stream: &str, cells: &str) -> String {
    format!("{kind},{interval},{stream},,,,,,,,,,,,,,,,,,,,,{cells}")
}

fn core_rows(side: &str, interval: &str, cores: &[CoreLoad]) -> Vec<String> {
    cores
        .iter()
        .map(|c| {
            cpu_line(
                "cpu_core",
                interval,
                "",
                &format!(
                    "{side},{},,,,{:.2},{:.2},,",
                    c.cpu, c.busy_percent, c.softirq_percent
                ),
            )
        })
        .collect()
}

fn side_rows(side: &str, r: &CpuReport) -> Vec<String> {
    let pct = |us: u64| us as f64 / 1e6 / r.seconds * 100.0;
    let mut out = vec![cpu_line(
        "cpu_process",
        "",
        "",
        &format!(
            "{side},,{},{},{:.2},,,,",
            r.process.user_us, r.process.sys_us, r.host_total
        ),
    )];
    for (i, t) in r.streams.iter().enumerate() {
        out.push(cpu_line(
            "cpu_thread",
            "",
            &i.to_string(),
            &format!(
                "{side},,{},{},{:.2},,,,",
                t.user_us,
                t.sys_us,
                pct(t.total_us())
            ),
        ));
    }
    out.extend(core_rows(side, "", &r.cores));
    out
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
        for line in iv
            .cores
            .as_deref()
            .map(|c| core_rows("local", &idx, c))
            .unwrap_or_default()
        {
            writeln!(self.out, "{line}")?;
        }
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
        if let Some(cpu) = &s.cpu {
            let mut lines = side_rows("local", &cpu.local);
            if let Some(r) = &cpu.remote {
                lines.extend(side_rows("remote", r));
            }
            lines.push(cpu_line(
                "cpu_efficiency",
                "",
                "",
                &format!(
                    ",,,,,,,{},{}",
                    opt(cpu.gbps_per_busy_core.map(|v| format!("{v:.4}"))),
                    opt(cpu.cpu_seconds_per_gb.map(|v| format!("{v:.4}")))
                ),
            ));
            for line in lines {
                writeln!(self.out, "{line}")?;
            }
        }
        self.out.flush()
    }
}
