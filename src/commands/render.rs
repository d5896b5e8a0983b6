//! The commands that render saved results again (`pinperf plot`, `pinperf report`) or
//! describe the tool (`completions`, `man`). They run on the main thread.

use std::io::{self, Write};
use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Args, CompletionsArgs, PlotArgs, ReportArgs, ReportFormat};
use crate::commands::compare::{self, CompareDoc};
use crate::commands::diagnose::DiagnoseDoc;
use crate::commands::output::default_title;
use crate::commands::saved::{self, Saved, SavedTest};
use crate::commands::{html, plot};
use crate::error::{Error, Result};
use crate::iperf3::json::Iperf3JsonFormatter;
use crate::report::Formatter;
use crate::report::format::csv::CsvFormatter;
use crate::report::format::text::TextFormatter;

/// The client's entry point lives with its output, in [`crate::commands::output`].
pub(crate) use crate::commands::output::run_client;

/// Writes `bytes` to `path`, or to stdout (a closed pipe is quiet).
fn emit(path: Option<&Path>, bytes: &[u8]) -> Result<()> {
    match path {
        Some(path) => std::fs::write(path, bytes)
            .map_err(|e| Error::io(format!("write {}", path.display()), e)),
        None => {
            let mut out = io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(|e| match e.kind() {
                    io::ErrorKind::BrokenPipe => Error::OutputClosed,
                    _ => Error::io("write to stdout", e),
                })
        }
    }
}

/// `pinperf plot FILE.json -o OUT.svg|png`.
pub(crate) fn run_plot(a: &PlotArgs) -> Result<()> {
    plot::picture_kind(&a.output, "-o")?;
    let svg = match saved::load(&a.file)? {
        Saved::Test(t) => {
            // A test that failed before its first row has only its error to show.
            if t.doc.intervals.is_empty() {
                let why = t.doc.error.as_deref().unwrap_or("the document has no rows");
                return Err(Error::Usage(format!(
                    "{}: no interval was reported, nothing to plot: {why}",
                    a.file.display()
                )));
            }
            let title = a
                .title
                .clone()
                .unwrap_or_else(|| default_title(&t.doc.start));
            plot::test_svg(&t.doc, t.lab_rate_bps, &title)?
        }
        Saved::Compare(c) => {
            if let Some(why) = c.nothing_measured() {
                return Err(Error::Usage(format!(
                    "{}: no configuration of the comparison measured anything, nothing to \
                     plot: {why}",
                    a.file.display()
                )));
            }
            let title = a.title.clone().unwrap_or_else(|| compare_title(&c));
            plot::compare_svg(&c, &title)?
        }
        Saved::Diagnose(_) => {
            return Err(Error::Usage(format!(
                "{}: a diagnosis has no plot yet; `pinperf report {} -o OUT.html` draws its runs",
                a.file.display(),
                a.file.display()
            )));
        }
        Saved::Failed(e) => return Err(Saved::nothing_to("plot", &a.file, &e)),
    };
    let bytes = plot::encode(&a.output, "-o", &svg)
        .map_err(|e| Error::Test(format!("-o {}: {e}", a.output.display())))?;
    std::fs::write(&a.output, bytes)
        .map_err(|e| Error::io(format!("-o {}: write", a.output.display()), e))
}

fn compare_title(c: &CompareDoc) -> String {
    format!(
        "pinperf compare against {}: {} configurations, {} s each",
        c.target,
        c.rows.len(),
        c.seconds
    )
}

/// What `pinperf report` writes: `--format`, else `-o`'s extension, else text; a
/// picture's extension is `pinperf plot`'s, not text in a file named for a picture.
fn report_format(a: &ReportArgs) -> Result<ReportFormat> {
    let ext = a
        .output
        .as_ref()
        .and_then(|p| p.extension())
        .and_then(|e| e.to_str())
        .map(str::to_lowercase);
    // A run's own output flags (`--csv`, `-J`, `--html`) are taken here too.
    match (a.format, a.csv, a.json, &a.html) {
        (Some(f), ..) => return Ok(f),
        (_, true, ..) => return Ok(ReportFormat::Csv),
        (_, _, true, _) => return Ok(ReportFormat::Json),
        (.., Some(_)) => return Ok(ReportFormat::Html),
        _ => {}
    }
    Ok(match ext.as_deref() {
        Some("html" | "htm") => ReportFormat::Html,
        Some("csv") => ReportFormat::Csv,
        Some("json") => ReportFormat::Json,
        Some(pic @ ("svg" | "png")) => {
            return Err(Error::Usage(format!(
                "-o {}: pinperf report writes text, CSV, JSON or HTML; a .{pic} picture is \
                 `pinperf plot {} -o {}`",
                a.output.as_deref().unwrap_or(Path::new("")).display(),
                a.file.display(),
                a.output.as_deref().unwrap_or(Path::new("")).display(),
            )));
        }
        _ => ReportFormat::Text,
    })
}

/// `pinperf report FILE.json [-o OUT] [--format ...]`.
pub(crate) fn run_report(a: &ReportArgs) -> Result<()> {
    let format = report_format(a)?;
    let bytes = match saved::load(&a.file)? {
        Saved::Test(t) => test_report(&t, format, a)?,
        Saved::Compare(c) => compare_report(&c, format, a)?,
        Saved::Diagnose(d) => diagnose_report(&d, format, a)?,
        // As the live --csv wrote it: the header, then the error row.
        Saved::Failed(e) if format == ReportFormat::Csv => {
            let mut buf = Vec::new();
            CsvFormatter::new(&mut buf)
                .failed(&e)
                .map_err(|e| Error::io("render the report", e))?;
            buf
        }
        Saved::Failed(e) => return Err(Saved::nothing_to("show", &a.file, &e)),
    };
    emit(a.output.as_deref().or(a.html.as_deref()), &bytes)
}

/// A saved diagnosis as text (its verdict and runs), JSON or HTML.
fn diagnose_report(d: &DiagnoseDoc, format: ReportFormat, a: &ReportArgs) -> Result<Vec<u8>> {
    Ok(match format {
        ReportFormat::Text => crate::commands::diagnose::text::verdict(d).into_bytes(),
        ReportFormat::Json => json(d)?,
        ReportFormat::Html => {
            let title = (a.text.title.clone())
                .unwrap_or_else(|| format!("pinperf diagnose against {}", d.target));
            html::diagnose_page(d, &title).into_bytes()
        }
        ReportFormat::Csv | ReportFormat::Iperf3Json => {
            return Err(Error::Usage(format!(
                "{}: a diagnosis is written as text, JSON or HTML",
                a.file.display()
            )));
        }
    })
}

/// A saved test in `format`; the run's `-T` is in the document, and `-T` here replaces it.
fn test_report(t: &SavedTest, format: ReportFormat, a: &ReportArgs) -> Result<Vec<u8>> {
    let title = a.text.title.clone().or_else(|| t.doc.title.clone());
    let rendered = |e| Error::io("render the report", e);
    Ok(match format {
        ReportFormat::Text => test_text(t, a, title)?,
        ReportFormat::Csv => {
            let mut buf = Vec::new();
            saved::replay(&t.doc, &mut CsvFormatter::new(&mut buf)).map_err(rendered)?;
            buf
        }
        ReportFormat::Json => json(&t.doc)?,
        ReportFormat::Iperf3Json => {
            let mut buf = Vec::new();
            let mut f = Iperf3JsonFormatter::replayed(&mut buf).titled(title);
            saved::replay(&t.doc, &mut f).map_err(rendered)?;
            drop(f);
            buf
        }
        ReportFormat::Html => {
            let title = title.unwrap_or_else(|| default_title(&t.doc.start));
            html::test_page(t, &title, a.text.options())?.into_bytes()
        }
    })
}

/// A saved test's text as the run printed it: a lab's lines (unprefixed, as they went
/// around the client's report), then the client's lines with the text flags.
fn test_text(t: &SavedTest, a: &ReportArgs, title: Option<String>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let lab_lines = |buf: &mut Vec<u8>, lines: Vec<String>| {
        for l in lines {
            buf.extend_from_slice(l.as_bytes());
            buf.push(b'\n');
        }
    };
    lab_lines(
        &mut buf,
        t.lab.as_ref().map(|l| l.before()).unwrap_or_default(),
    );
    let mut f = TextFormatter::with_options(
        crate::report::prefix::Prefixed::new(&mut buf, a.text.timestamps.clone(), title),
        a.text.options(),
    );
    saved::replay(&t.doc, &mut f).map_err(|e| Error::io("render the report", e))?;
    drop(f);
    lab_lines(
        &mut buf,
        t.lab.as_ref().map(|l| l.after()).unwrap_or_default(),
    );
    Ok(buf)
}

/// A saved comparison in `format`: its table as `compare` printed it, or a page.
fn compare_report(c: &CompareDoc, format: ReportFormat, a: &ReportArgs) -> Result<Vec<u8>> {
    Ok(match format {
        ReportFormat::Text => compare::text_table(c).into_bytes(),
        ReportFormat::Csv => compare::csv_table(c).into_bytes(),
        ReportFormat::Json => json(c)?,
        ReportFormat::Iperf3Json => {
            return Err(Error::Usage(format!(
                "{}: a comparison has no iperf3 shape (--format iperf3-json is a test's); \
                 use --format json or csv",
                a.file.display()
            )));
        }
        ReportFormat::Html => {
            let title = a.text.title.clone().unwrap_or_else(|| compare_title(c));
            html::compare_page(c, &title)?.into_bytes()
        }
    })
}

/// A saved document as pretty JSON, as `-J` wrote it.
fn json(v: &impl serde::Serialize) -> Result<Vec<u8>> {
    let mut buf = serde_json::to_vec_pretty(v).map_err(|e| Error::Test(format!("JSON: {e}")))?;
    buf.push(b'\n');
    Ok(buf)
}

/// `pinperf completions SHELL`.
pub(crate) fn run_completions(a: &CompletionsArgs) -> Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut Args::command(), "pinperf", &mut buf);
    emit(None, &buf)
}

/// `pinperf man`: the man page in roff.
pub(crate) fn run_man() -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Args::command())
        .render(&mut buf)
        .map_err(|e| Error::io("render the man page", e))?;
    emit(None, &buf)
}
