//! Where a client run's report goes and what it leaves behind: the chosen format with
//! iperf3's text flags (`-f`, `-T`, `--timestamps`, `-V`, `--logfile`, `--forceflush`), and
//! the side files written from the whole document when the test ends (`--plot`, `--html`,
//! `--json-file`). `Capture` runs on the client's `reporter` thread; the rest on the
//! main thread.

use std::fs::File;
use std::io::{self, BufWriter, LineWriter, Write};
use std::path::{Path, PathBuf};

use crate::choices::Format;
use crate::cli::{OutputArgs, TextArgs};
use crate::commands::saved::SavedTest;
use crate::commands::{html, plot};
use crate::config::ClientConfig;
use crate::error::{Error, Result};
use crate::iperf3::json::Iperf3JsonFormatter;
use crate::iperf3::text::Iperf3TextFormatter;
use crate::report::Formatter;
use crate::report::format::csv::CsvFormatter;
use crate::report::format::json::{Document, JsonFormatter, JsonLinesFormatter};
use crate::report::format::text::{TextFormatter, TextOptions};
use crate::report::model::{Header, IntervalReport, Summary};

impl TextArgs {
    pub(crate) fn options(&self) -> TextOptions {
        TextOptions {
            unit: self.unit,
            verbose: self.verbose,
        }
    }
}

/// The title a picture or page gets when `-T` gave none: what was tested.
pub(crate) fn default_title(h: &Header) -> String {
    format!(
        "pinperf {} -> {}: {} stream{}, {}, {} s",
        h.local,
        h.remote,
        h.streams,
        if h.streams == 1 { "" } else { "s" },
        h.payload(),
        h.duration_s
    )
}

/// A writer for the report: `--logfile` (appended to, as iperf3 does) or stdout; a
/// file is buffered and flushed where the formatter flushes (every interval), or at every
/// line with `--forceflush`.
pub(crate) fn report_writer(o: &OutputArgs) -> Result<Box<dyn Write + Send>> {
    let Some(path) = &o.logfile else {
        return Ok(Box::new(io::stdout()));
    };
    let file = File::options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("--logfile {}: open", path.display()), e))?;
    let file = Named {
        what: format!("--logfile {}", path.display()),
        inner: file,
    };
    Ok(match o.forceflush {
        true => Box::new(LineWriter::new(file)),
        false => Box::new(BufWriter::new(file)),
    })
}

/// A writer whose errors say which flag's file failed (`--logfile /dev/full: No space
/// left on device`), keeping the error's kind.
struct Named<W> {
    what: String,
    inner: W,
}

impl<W> Named<W> {
    fn name(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.what))
    }
}

impl<W: Write> Write for Named<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.name(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.name(e))
    }
}

/// The formatter of a client run: the chosen format with the text flags, and a capture
/// that writes `--plot` / `--html` when the test ends.
pub(crate) fn client_output(format: Format, o: &OutputArgs) -> Result<Box<dyn Formatter>> {
    let inner = display(format, &o.text, report_writer(o)?);
    Ok(match SideFiles::create(o)? {
        None => inner,
        Some(files) => Box::new(Capture {
            inner,
            doc: None,
            title: o.text.title.clone(),
            files: Some(files),
        }),
    })
}

/// The report in `format` on `out`, with the text flags.
pub(crate) fn display(
    format: Format,
    t: &TextArgs,
    out: Box<dyn Write + Send>,
) -> Box<dyn Formatter> {
    match format {
        Format::Text => Box::new(TextFormatter::with_options(
            crate::report::prefix::Prefixed::new(out, t.timestamps.clone(), t.title.clone()),
            t.options(),
        )),
        Format::Json => Box::new(JsonFormatter::new(out).titled(t.title.clone())),
        Format::JsonLines => Box::new(JsonLinesFormatter::new(out)),
        Format::Csv => Box::new(CsvFormatter::new(out)),
        Format::Iperf3Json => {
            Box::new(Iperf3JsonFormatter::new(out, t.extra_data.clone()).titled(t.title.clone()))
        }
        Format::Iperf3JsonStream | Format::Iperf3JsonStreamFull => Box::new(
            crate::iperf3::json_stream::Iperf3StreamFormatter::new(
                out,
                format == Format::Iperf3JsonStreamFull,
                t.extra_data.clone(),
            )
            .titled(t.title.clone()),
        ),
        Format::Iperf3Text => Box::new(Iperf3TextFormatter::new(
            crate::report::prefix::Prefixed::new(out, t.timestamps.clone(), t.title.clone()),
            t.unit,
            t.verbose,
        )),
    }
}

/// The files a run leaves beside its report (`--plot`, `--html`, `--json-file`), written
/// from the whole document once the test has ended.
pub(crate) struct SideFiles {
    plot: Option<Made>,
    html: Option<Made>,
    json: Option<Made>,
    title: Option<String>,
    options: TextOptions,
}

impl SideFiles {
    /// The files `o` asks for, if any: checked and created now, so a wrong name or
    /// directory stops the run before it starts.
    pub(crate) fn create(o: &OutputArgs) -> Result<Option<SideFiles>> {
        if o.plot.is_none() && o.html.is_none() && o.json_file.is_none() {
            return Ok(None);
        }
        let plot = match &o.plot {
            Some(path) => {
                plot::picture_kind(path, "--plot")?;
                Some(create(path, "--plot")?)
            }
            None => None,
        };
        let made = |path: &Option<PathBuf>, flag| path.as_ref().map(|p| create(p, flag));
        Ok(Some(SideFiles {
            plot,
            html: made(&o.html, "--html").transpose()?,
            json: made(&o.json_file, "--json-file").transpose()?,
            title: o.text.title.clone(),
            options: o.text.options(),
        }))
    }

    /// Nothing was measured: no picture, and no empty file left behind.
    pub(crate) fn discard(mut self) {
        let files = [self.plot.take(), self.html.take(), self.json.take()];
        for made in files.into_iter().flatten() {
            let _ = std::fs::remove_file(&made.path);
            crate::signals::written(&made.path);
        }
    }

    /// Writes each file of `test` (`json`: the document as it is to be saved, as `-J`
    /// prints it).
    pub(crate) fn write(mut self, test: &SavedTest, json: &[u8]) -> io::Result<()> {
        let title = self
            .title
            .clone()
            .unwrap_or_else(|| default_title(&test.doc.start));
        if let Some(mut made) = self.json.take() {
            made.file.write_all(json).map_err(|e| made.failed(e))?;
            crate::signals::written(&made.path);
        }
        if let Some(made) = self.plot.take_if(|_| test.doc.intervals.is_empty()) {
            // No row to draw (a test that failed before its first): no empty axes.
            let _ = std::fs::remove_file(&made.path);
            crate::signals::written(&made.path);
            stderrln!(
                "pinperf: {} {}: not written: no interval was reported, nothing to plot",
                made.flag,
                made.path.display()
            );
        }
        if let Some(mut made) = self.plot.take() {
            let bytes = plot::test_svg(&test.doc, test.lab_rate_bps, &title)
                .and_then(|svg| plot::encode(&made.path, "--plot", &svg))
                .map_err(|e| made.failed(io::Error::other(e.to_string())))?;
            made.file.write_all(&bytes).map_err(|e| made.failed(e))?;
            crate::signals::written(&made.path);
        }
        if let Some(mut made) = self.html.take() {
            let page = html::test_page(test, &title, self.options)
                .map_err(|e| made.failed(io::Error::other(e.to_string())))?;
            made.file
                .write_all(page.as_bytes())
                .map_err(|e| made.failed(e))?;
            crate::signals::written(&made.path);
        }
        Ok(())
    }
}

/// A file a flag asked for, created before the test so a wrong path stops it early.
struct Made {
    flag: &'static str,
    path: PathBuf,
    file: File,
}

impl Made {
    /// Why writing it failed, naming the flag and the file (`--plot x.svg: ...`), with
    /// the failure's kind (a side file is no report on stdout: a closed pipe is an error).
    fn failed(&self, e: io::Error) -> io::Error {
        let kind = match e.kind() {
            io::ErrorKind::BrokenPipe => io::ErrorKind::Other,
            kind => kind,
        };
        io::Error::new(kind, format!("{} {}: {e}", self.flag, self.path.display()))
    }
}

fn create(path: &Path, flag: &'static str) -> Result<Made> {
    let file = File::create(path)
        .map_err(|e| Error::io(format!("{flag} {}: create", path.display()), e))?;
    crate::signals::unwritten(path);
    Ok(Made {
        flag,
        path: path.to_path_buf(),
        file,
    })
}

/// Runs one test as configured; prints the report on stdout (or `--logfile`), and in the
/// machine formats a failure too (`-J` prints what it has with an `error` field, as iperf3
/// -J does). It lives here, not in `client`, so `client` does not depend on the plots.
pub(crate) fn run_client(cfg: ClientConfig, o: &OutputArgs) -> Result<()> {
    let out = client_output(cfg.format, o)?;
    crate::client::run_with(cfg, out).map(|_| ())
}

/// Passes everything to the run's formatter and keeps the document, to draw it when the
/// test ends (with its totals, or with what it measured and why it failed).
struct Capture {
    inner: Box<dyn Formatter>,
    doc: Option<Document>,
    title: Option<String>,
    files: Option<SideFiles>,
}

impl Capture {
    fn finish(&mut self) -> io::Result<()> {
        let Some(files) = self.files.take() else {
            return Ok(());
        };
        let Some(doc) = self.doc.take() else {
            files.discard();
            return Ok(());
        };
        let mut json = serde_json::to_vec_pretty(&doc).map_err(io::Error::from)?;
        json.push(b'\n');
        let test = SavedTest {
            doc,
            lab_rate_bps: None,
            lab: None,
        };
        files.write(&test, &json)
    }
}

impl Formatter for Capture {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        self.doc = Some(Document::new(self.title.clone(), header.clone()));
        self.inner.header(header)
    }

    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.intervals.push(interval.clone());
        }
        self.inner.interval(interval)
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        // With `--bidir` the document is whole after the second direction's totals.
        let whole = self.doc.as_mut().is_none_or(|doc| doc.file(summary));
        let r = self.inner.summary(summary);
        if whole {
            self.finish()?;
        }
        r
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.error = Some(error.to_string());
        }
        let r = self.inner.failed(error);
        self.finish()?;
        r
    }

    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.file(summary);
            doc.error = Some(error.to_string());
        }
        let r = self.inner.cut_short(summary, error);
        self.finish()?;
        r
    }

    fn stream_failed(&mut self, at: f64, error: &str) -> io::Result<()> {
        self.inner.stream_failed(at, error)
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.server_output_text = Some(text.to_string());
        }
        self.inner.server_output(text)
    }
}
