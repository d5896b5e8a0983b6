//! Text output in thrulay's shape: `#` header lines, `( N)` rows per stream per interval
//! (begin, end, Mb/s, RTT min/avg/max in ms, then appended columns), `(sum)` rows when
//! there are several streams, `#( N)` totals and exactly one `#(**)` line, so
//! `fgrep '**'` in a shell loop yields one line per run. Flushes after every interval.

use std::io::{self, Write};

use super::Formatter;
use super::model::{Header, IntervalReport, RowStats, Summary};
use crate::units::format_size;

/// Writes the text format to `out`.
pub struct TextFormatter<W: Write> {
    out: W,
    streams: u16,
}

impl<W: Write> TextFormatter<W> {
    pub fn new(out: W) -> Self {
        TextFormatter { out, streams: 0 }
    }
}

fn opt_bytes(v: Option<u32>) -> String {
    v.map_or("?".to_string(), |v| format!("{v}B"))
}

fn row(label: &str, r: &RowStats) -> String {
    let (min, avg, max) = match r.rtt_ms {
        Some(rtt) => (
            format!("{:.3}", rtt.min),
            format!("{:.3}", rtt.avg),
            format!("{:.3}", rtt.max),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    let retr = r.retransmits.map_or("-".to_string(), |v| v.to_string());
    let cwnd = r
        .snd_cwnd
        .map_or("-".to_string(), |v| (v / 1024).to_string());
    format!(
        "{label} {:>8.3} {:>8.3} {:>11.3} {:>8} {:>8} {:>8} {:>6} {:>9}",
        r.begin_s,
        r.end_s,
        r.bits_per_second / 1e6,
        min,
        avg,
        max,
        retr,
        cwnd
    )
}

fn id(stream: u16) -> String {
    format!("({stream:>2})")
}

impl<W: Write + Send> Formatter for TextFormatter<W> {
    fn header(&mut self, h: &Header) -> io::Result<()> {
        self.streams = h.streams;
        let o = &mut self.out;
        writeln!(
            o,
            "# {}: {} -> {} ({}), {} TCP stream{}",
            h.software,
            h.local,
            h.remote,
            h.remote_software,
            h.streams,
            if h.streams == 1 { "" } else { "s" }
        )?;
        match h.local_window.requested {
            Some(req) => writeln!(
                o,
                "# local window = {}B; remote window = {}B (requested -w {} = {}B; Linux grants twice the request)",
                h.local_window.sndbuf,
                h.remote_window.rcvbuf,
                format_size(req),
                req
            )?,
            None => writeln!(
                o,
                "# local window = {}B; remote window = {}B (no -w: kernel autotuning, sizes at start)",
                h.local_window.sndbuf, h.remote_window.rcvbuf
            )?,
        }
        writeln!(o, "# block size = {}B", h.block_bytes)?;
        writeln!(
            o,
            "# MTU: {}; MSS: {}",
            opt_bytes(h.path.mtu),
            opt_bytes(h.path.mss)
        )?;
        writeln!(
            o,
            "# pin plan: local {}; remote {}",
            h.local_pin, h.remote_pin
        )?;
        if let Some(note) = &h.placement_note {
            writeln!(o, "# placement: {note}")?;
        }
        writeln!(
            o,
            "# test duration = {}s; reporting interval = {}s",
            h.duration_s, h.interval_s
        )?;
        writeln!(
            o,
            "#(ID)  begin, s   end, s        Mb/s  RTT, ms: min      avg      max   retr  cwnd, KiB"
        )?;
        o.flush()
    }

    fn interval(&mut self, iv: &IntervalReport) -> io::Result<()> {
        for s in &iv.streams {
            writeln!(self.out, "{}", row(&id(s.stream), &s.stats))?;
        }
        if self.streams > 1 {
            writeln!(self.out, "{}", row("(sum)", &iv.sum))?;
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        for st in &s.streams {
            writeln!(self.out, "#{}", row(&id(st.stream), &st.stats))?;
        }
        writeln!(self.out, "#{}", row("(**)", &s.sum))?;
        let verdict = if s.reconciled() { "equal" } else { "MISMATCH" };
        writeln!(
            self.out,
            "# bytes: sender wrote {}, receiver read {}: {verdict}",
            s.sent_bytes, s.received_bytes
        )?;
        self.out.flush()
    }
}
