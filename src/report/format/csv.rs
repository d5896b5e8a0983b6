//! CSV output: one header row, then one row per stream per interval and an explicit `sum`
//! row per interval, then `total` rows per stream and one `total_sum` row at the end; CPU
//! rows follow (`cpu_process`, `cpu_thread` per thread that ran streams, named in `thread`
//! and with its `stream` when it ran one, and `cpu_core` per side, `cpu_efficiency`), and
//! with `--cpu` a `cpu_core` row per core per interval; `--get-server-output` adds a
//! `server_output` row per line of the server's (the line in `text`) before the totals;
//! a test that failed or was
//! interrupted ends with an `error` row (the message in `error`), after the header even
//! when it failed before it started. Base units only: bytes, bits per
//! second, microseconds, percent. Empty cells are values not measured or not applicable.
//!
//! The columns are declared once, as the fields of [`Record`] (`csv_record!`): the header
//! is derived from that list and every row kind is a `Record`, so no row can have a cell
//! too many or too few. Cells are quoted per RFC 4180 by the `csv` crate ([`join`]). `compare`
//! declares its own table with the same macro.

use std::io::{self, Write};

use crate::os::cpu::{CoreLoad, CpuReport};
use crate::report::Formatter;
use crate::report::model::{
    Fairness, Header, IntervalReport, LeftOut, RttSummary, StreamRow, SumRow, Summary, ThreadCpu,
    UdpFigures,
};

/// Declares a CSV table: a struct with one `String` field per column, in column order (an
/// unset field is an empty cell), its column names `NAMES`, the header line `HEADER`
/// derived from the same list, and `line()`, which writes every cell in order through
/// [`join`].
macro_rules! csv_record {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $first:ident $(, $rest:ident)* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        $vis struct $name {
            $vis $first: String,
            $($vis $rest: String,)*
        }

        impl $name {
            /// The column names, in order.
            #[allow(dead_code)]
            $vis const NAMES: &'static [&'static str] =
                &[stringify!($first) $(, stringify!($rest))*];

            /// The header line: the column names joined by commas.
            $vis const HEADER: &'static str =
                concat!(stringify!($first) $(, ",", stringify!($rest))*);

            /// The row as one CSV line (without the line end).
            $vis fn line(&self) -> String {
                $crate::report::format::csv::join(&[&self.$first $(, &self.$rest)*])
            }
        }
    };
}
pub(crate) use csv_record;

/// Cells as one RFC 4180 line (without the line end): each quoted, with quotes doubled,
/// only when it holds a comma, a quote or a line break.
pub fn join(cells: &[&str]) -> String {
    let mut w = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Necessary)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    // Writing to memory cannot fail; a single empty cell is quoted so the line is not blank.
    let _ = w.write_record(cells);
    let mut line = w
        .into_inner()
        .map_err(|e| e.into_error())
        .unwrap_or_default();
    line.pop();
    String::from_utf8(line).unwrap_or_default()
}

csv_record! {
    /// One row of the CSV output, whatever its kind.
    pub struct Record {
        kind,
        interval,
        stream,
        start_us,
        end_us,
        bytes,
        bits_per_second,
        sent_bytes,
        retransmits,
        snd_cwnd_bytes,
        srtt_us,
        min_rtt_us,
        delivery_rate_bps,
        notsent_bytes,
        block_rtt_min_us,
        block_rtt_avg_us,
        block_rtt_max_us,
        block_rtt_median_us,
        block_rtt_samples,
        jain,
        min_share,
        max_share,
        starved,
        side,
        thread,
        core,
        cpu_user_us,
        cpu_sys_us,
        cpu_percent,
        busy_percent,
        softirq_percent,
        gbps_per_busy_core,
        cpu_seconds_per_gb,
        direction,
        packets,
        lost_packets,
        lost_percent,
        out_of_order,
        duplicates,
        jitter_ms,
        error,
        text,
    }
}

/// `-u`: a row's datagram cells (empty for TCP).
fn udp_cells(mut row: Record, u: Option<UdpFigures>) -> Record {
    if let Some(u) = u {
        row.packets = u.packets.to_string();
        row.lost_packets = u.lost_packets.to_string();
        row.lost_percent = fixed(Some(u.lost_percent), 4);
        row.out_of_order = u.out_of_order.to_string();
        row.duplicates = u.duplicates.to_string();
        row.jitter_ms = fixed(Some(u.jitter_ms), 4);
    }
    row
}

/// The `direction` cell of a row that belongs to one: who sent its bytes.
fn direction(reverse: bool) -> String {
    match reverse {
        true => "server_to_client".into(),
        false => "client_to_server".into(),
    }
}

/// The header row (derived from [`Record`]'s fields).
pub const COLUMNS: &str = Record::HEADER;

pub struct CsvFormatter<W: Write> {
    out: W,
    /// The header row is out (a test that failed before it started still gets one).
    started: bool,
}

impl<W: Write> CsvFormatter<W> {
    pub fn new(out: W) -> Self {
        CsvFormatter {
            out,
            started: false,
        }
    }

    fn write(&mut self, rows: impl IntoIterator<Item = Record>) -> io::Result<()> {
        for row in rows {
            writeln!(self.out, "{}", row.line())?;
        }
        Ok(())
    }
}

/// An absent value is an empty cell.
fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// A number with `digits` decimals; absent is empty.
fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

/// Seconds to whole microseconds.
fn us(secs: f64) -> String {
    ((secs * 1e6).round() as u64).to_string()
}

/// Fills the block RTT columns.
fn block_rtt(row: Record, r: Option<RttSummary>) -> Record {
    let Some(r) = r else { return row };
    Record {
        block_rtt_min_us: fixed(Some(r.min_us), 1),
        block_rtt_avg_us: fixed(Some(r.avg_us), 1),
        block_rtt_max_us: fixed(Some(r.max_us), 1),
        block_rtt_median_us: fixed(r.median_us, 1),
        block_rtt_samples: r.samples.to_string(),
        ..row
    }
}

/// A `stream` or `total` row.
fn stream_row(kind: &str, interval: &str, r: &StreamRow) -> Record {
    let row = Record {
        kind: kind.into(),
        interval: interval.into(),
        stream: r.stream.to_string(),
        start_us: us(r.start),
        end_us: us(r.end),
        bytes: r.bytes.to_string(),
        bits_per_second: fixed(Some(r.bits_per_second), 0),
        sent_bytes: r.sent_bytes.to_string(),
        retransmits: opt(r.retransmits),
        snd_cwnd_bytes: opt(r.snd_cwnd),
        srtt_us: opt(r.rtt.map(|v| v.round() as u64)),
        min_rtt_us: opt(r.min_rtt),
        delivery_rate_bps: opt(r.delivery_rate),
        notsent_bytes: opt(r.notsent_bytes),
        ..Record::default()
    };
    udp_cells(block_rtt(row, r.block_rtt), r.udp)
}

/// A `sum` or `total_sum` row.
fn sum_row(kind: &str, interval: &str, s: &SumRow, f: &Fairness, starved: u32) -> Record {
    let row = Record {
        kind: kind.into(),
        interval: interval.into(),
        start_us: us(s.start),
        end_us: us(s.end),
        bytes: s.bytes.to_string(),
        bits_per_second: fixed(Some(s.bits_per_second), 0),
        sent_bytes: s.sent_bytes.to_string(),
        retransmits: opt(s.retransmits),
        snd_cwnd_bytes: opt(s.snd_cwnd),
        srtt_us: opt(s.kernel_rtt.map(|k| k.avg_us.round() as u64)),
        min_rtt_us: opt(s.min_rtt),
        jain: fixed(f.jain, 6),
        min_share: fixed(f.min_share, 6),
        max_share: fixed(f.max_share, 6),
        starved: starved.to_string(),
        ..Record::default()
    };
    udp_cells(block_rtt(row, s.block_rtt), s.udp)
}

/// `cpu_core` rows: one per core of `side`, over an interval or (interval empty) the test.
fn core_rows<'a>(
    side: &'a str,
    interval: &'a str,
    cores: &'a [CoreLoad],
) -> impl Iterator<Item = Record> + 'a {
    cores.iter().map(move |c| Record {
        kind: "cpu_core".into(),
        interval: interval.into(),
        side: side.into(),
        core: c.cpu.to_string(),
        busy_percent: fixed(Some(c.busy_percent), 2),
        softirq_percent: fixed(Some(c.softirq_percent), 2),
        ..Record::default()
    })
}

/// A side's `cpu_process`, `cpu_thread` and `cpu_core` rows over the test.
fn side_rows(side: &str, r: &CpuReport) -> Vec<Record> {
    let mut out = vec![Record {
        kind: "cpu_process".into(),
        side: side.into(),
        cpu_user_us: r.process.user_us.to_string(),
        cpu_sys_us: r.process.sys_us.to_string(),
        cpu_percent: fixed(Some(r.host_total), 2),
        ..Record::default()
    }];
    let threads = r.streams.iter().zip(ThreadCpu::of(r));
    out.extend(threads.map(|(t, pct)| Record {
        kind: "cpu_thread".into(),
        stream: opt(t.stream()),
        side: side.into(),
        thread: pct.name,
        cpu_user_us: t.user_us.to_string(),
        cpu_sys_us: t.sys_us.to_string(),
        cpu_percent: fixed(Some(pct.total_percent), 2),
        ..Record::default()
    }));
    out.extend(core_rows(side, "", &r.cores));
    out
}

impl<W: Write + Send> Formatter for CsvFormatter<W> {
    fn header(&mut self, _header: &Header) -> io::Result<()> {
        self.started = true;
        writeln!(self.out, "{COLUMNS}")?;
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalReport) -> io::Result<()> {
        let idx = iv.index.to_string();
        // -O's omitted intervals and a cut-short test's rows past the sender's last report:
        // their own kinds, so sums over `stream` rows stay the totals.
        let (stream, sum) = match iv.left_out() {
            Some(LeftOut::Omitted) => ("omitted_stream", "omitted_sum"),
            Some(LeftOut::Uncounted) => ("uncounted_stream", "uncounted_sum"),
            None => ("stream", "sum"),
        };
        let with_direction = |mut r: Record| {
            r.direction = direction(iv.reverse);
            r
        };
        let streams = iv.streams.iter().map(|r| stream_row(stream, &idx, r));
        self.write(streams.map(with_direction))?;
        let f = &iv.sum.fairness;
        self.write([with_direction(sum_row(sum, &idx, &iv.sum, f, f.starved))])?;
        if let Some(cores) = &iv.cores {
            self.write(core_rows("local", &idx, cores))?;
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        let with_direction = |mut r: Record| {
            r.direction = direction(s.reverse);
            r
        };
        self.write(
            s.streams
                .iter()
                .map(|r| with_direction(stream_row("total", "", r))),
        )?;
        let f = &s.fairness;
        self.write([with_direction(sum_row(
            "total_sum",
            "",
            &s.sum,
            &f.totals,
            f.starved_intervals,
        ))])?;
        if let Some(cpu) = &s.cpu {
            self.write(side_rows("local", &cpu.local))?;
            if let Some(r) = &cpu.remote {
                self.write(side_rows("remote", r))?;
            }
            self.write([Record {
                kind: "cpu_efficiency".into(),
                gbps_per_busy_core: fixed(cpu.gbps_per_busy_core, 4),
                cpu_seconds_per_gb: fixed(cpu.cpu_seconds_per_gb, 4),
                ..Record::default()
            }])?;
        }
        self.out.flush()
    }

    /// One `error` row, after the totals so far (if any): a script that keeps the rows
    /// sees the run failed, and why, without reading stderr or the exit code.
    fn failed(&mut self, error: &str) -> io::Result<()> {
        if !self.started {
            // Failed before it started (no server, refused, busy): the columns, then why.
            self.started = true;
            writeln!(self.out, "{COLUMNS}")?;
        }
        self.write([Record {
            kind: "error".into(),
            error: error.into(),
            ..Record::default()
        }])?;
        self.out.flush()
    }

    /// `--get-server-output`: a `server_output` row per line of the server's, the line in
    /// `text`, escaped (the server's words reach whatever shows the file).
    fn server_output(&mut self, text: &str) -> io::Result<()> {
        self.write(text.lines().map(|line| Record {
            kind: "server_output".into(),
            text: crate::wire::printable(line, usize::MAX),
            ..Record::default()
        }))?;
        self.out.flush()
    }
}
/// Splits CSV text into records per RFC 4180, as a reader of our output does: for tests.
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes())
        .records()
        .map(|r| r.expect("CSV records").iter().map(String::from).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::sample;

    #[test]
    fn escape_quotes_only_cells_that_need_it() {
        for (cell, want) in [
            ("", ""),
            ("12345", "12345"),
            ("local", "local"),
            ("a,b", "\"a,b\""),
            ("say \"hi\"", "\"say \"\"hi\"\"\""),
            ("two\nlines", "\"two\nlines\""),
            ("cr\r", "\"cr\r\""),
        ] {
            let line = join(&[cell, "x"]);
            assert_eq!(line, format!("{want},x"), "{cell:?}");
            assert_eq!(parse(&format!("{line}\n")), [[cell, "x"]], "{cell:?}");
        }
    }

    #[test]
    fn the_header_is_the_column_list() {
        assert_eq!(COLUMNS, Record::NAMES.join(","));
        assert_eq!(Record::NAMES.len(), 42);
        assert_eq!(parse(COLUMNS), [Record::NAMES]);
    }

    /// Prints the sample report (an interval with cores, a summary with both ends' CPU, cut
    /// short by a failure).
    fn sample_output() -> String {
        let mut out = Vec::new();
        let mut f = CsvFormatter::new(&mut out);
        f.header(&sample::header()).unwrap();
        f.interval(&sample::interval()).unwrap();
        f.server_output("Accepted connection from 127.0.0.1\nTest complete, 2 streams")
            .unwrap();
        f.cut_short(
            &sample::summary(),
            "stream-1: read: Connection reset by peer, here",
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// (column, cell) pairs.
    type Cells = &'static [(&'static str, &'static str)];

    /// Every row kind: one cell per column, and its values in the columns they belong to.
    #[test]
    fn every_row_kind_has_one_cell_per_column() {
        let records = parse(&sample_output());
        assert_eq!(records[0], Record::NAMES);
        let rows: Vec<&Vec<String>> = records[1..].iter().collect();
        for row in &rows {
            assert_eq!(row.len(), Record::NAMES.len(), "{row:?}");
        }
        let col = |name: &str| Record::NAMES.iter().position(|c| *c == name).unwrap();
        // (kind, interval, cells): the row of that kind whose first two listed cells match
        // holds all the listed cells.
        let table: &[(&str, &str, Cells)] = &[
            (
                "stream",
                "4",
                &[
                    ("stream", "1"),
                    ("snd_cwnd_bytes", "1048752"),
                    ("min_rtt_us", "31"),
                    ("block_rtt_median_us", "2449.1"),
                    ("jain", ""),
                    ("side", ""),
                ],
            ),
            (
                "sum",
                "4",
                &[
                    ("stream", ""),
                    ("bytes", "7173570560"),
                    ("bits_per_second", "57279790158"),
                    ("snd_cwnd_bytes", "2096480"),
                    ("srtt_us", "81"),
                    ("min_rtt_us", "30"),
                    ("delivery_rate_bps", ""),
                    ("block_rtt_avg_us", "1953.5"),
                    ("block_rtt_median_us", ""),
                    ("jain", "0.665432"),
                    ("starved", "1"),
                    ("side", ""),
                ],
            ),
            (
                "cpu_core",
                "4",
                &[
                    ("side", "local"),
                    ("core", "3"),
                    ("busy_percent", "5.00"),
                    ("cpu_percent", ""),
                    ("bytes", ""),
                ],
            ),
            (
                "total",
                "",
                &[
                    ("stream", "2"),
                    ("bytes", "0"),
                    ("sent_bytes", "2"),
                    ("retransmits", ""),
                    ("block_rtt_samples", ""),
                ],
            ),
            (
                "total_sum",
                "",
                &[
                    ("start_us", "0"),
                    ("end_us", "1001899"),
                    ("starved", "4"),
                    ("max_share", "0.517851"),
                ],
            ),
            (
                "cpu_process",
                "",
                &[
                    ("side", "remote"),
                    ("cpu_user_us", "123456"),
                    ("cpu_sys_us", "789012"),
                    ("cpu_percent", "91.25"),
                    ("core", ""),
                ],
            ),
            (
                "cpu_thread",
                "",
                &[
                    ("stream", "0"),
                    ("side", "remote"),
                    ("thread", "stream-0"),
                    ("cpu_user_us", "100000"),
                    ("cpu_percent", "75.94"),
                ],
            ),
            (
                "cpu_efficiency",
                "",
                &[
                    ("side", ""),
                    ("gbps_per_busy_core", "27.4188"),
                    ("cpu_seconds_per_gb", "0.1235"),
                ],
            ),
            (
                "error",
                "",
                &[
                    ("error", "stream-1: read: Connection reset by peer, here"),
                    ("bytes", ""),
                ],
            ),
            (
                "server_output",
                "",
                &[("text", "Test complete, 2 streams"), ("error", "")],
            ),
        ];
        for (kind, interval, cells) in table {
            let of_kind: Vec<_> = rows.iter().filter(|r| r[0] == *kind).collect();
            assert!(!of_kind.is_empty(), "no {kind} row");
            let row = of_kind
                .iter()
                .find(|r| cells.iter().take(2).all(|(c, v)| r[col(c)] == *v))
                .unwrap_or_else(|| panic!("no {kind} row with {:?}: {of_kind:?}", &cells[..2]));
            assert_eq!(row[col("interval")], *interval, "{kind}");
            for (c, v) in *cells {
                assert_eq!(row[col(c)], *v, "{kind} {c}: {row:?}");
            }
        }
        let kinds: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(
            kinds.len(),
            table.len(),
            "a row kind the table misses: {kinds:?}"
        );
    }

    /// A test that failed before it started (no server, busy, refused): the header, then
    /// the error row; a reader keyed by column names took the error row for the header.
    #[test]
    fn a_test_that_failed_before_it_started_has_the_header_then_its_error() {
        let mut out = Vec::new();
        CsvFormatter::new(&mut out)
            .failed("connect to 127.0.0.1:6299: Connection refused")
            .unwrap();
        let records = parse(&String::from_utf8(out).unwrap());
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[0], Record::NAMES);
        assert_eq!(records[1][0], "error");
        let error = Record::NAMES.iter().position(|c| *c == "error").unwrap();
        assert_eq!(
            records[1][error],
            "connect to 127.0.0.1:6299: Connection refused"
        );
    }

    /// A text cell with a comma, a quote and a line break stays one cell.
    #[test]
    fn a_cell_with_comma_quote_and_newline_stays_one_cell() {
        let nasty = "peer said \"no\", then\nclosed";
        let row = Record {
            kind: "cpu_core".into(),
            side: nasty.into(),
            core: "7".into(),
            ..Record::default()
        };
        let records = parse(&format!("{}\n{}\n", row.line(), row.line()));
        assert_eq!(records.len(), 2);
        for r in records {
            assert_eq!(r.len(), Record::NAMES.len());
            assert_eq!(
                r[Record::NAMES.iter().position(|c| *c == "side").unwrap()],
                nasty
            );
            assert_eq!(
                r[Record::NAMES.iter().position(|c| *c == "core").unwrap()],
                "7"
            );
        }
    }
}
