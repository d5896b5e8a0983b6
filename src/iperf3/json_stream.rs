//! `--format iperf3-json-stream` (iperf3's `--json-stream`): one JSON object a line, each
//! `{"event": NAME, "data": ...}`, written as the test goes: `start` (iperf3's `start`
//! object) when it starts, `interval` for each interval (both directions of `--bidir` in
//! one), then `error` (its words) when it failed, `server_output_text` with
//! `--get-server-output`, and `end` (iperf3's `end`; `{}` for a test that never started).
//! The objects are `--format iperf3-json`'s, built by the same functions.

use std::io::{self, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::json::{Iperf3Printer, RunFacts};
use crate::report::Formatter;
use crate::report::format::json::{Document, Printer, WholeDocument};
use crate::report::model::{Header, IntervalReport, Summary};

/// The writer both halves share: the live events and the end the collector prints.
struct Shared<W>(Arc<Mutex<W>>);

impl<W> Clone for Shared<W> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<W: Write> Shared<W> {
    /// One event line, flushed (a reader follows the test as it runs).
    fn event(&self, event: &str, data: &impl Serialize) -> io::Result<()> {
        #[derive(Serialize)]
        struct Line<'a, D> {
            event: &'a str,
            data: &'a D,
        }
        let mut out = self.0.lock();
        serde_json::to_writer(&mut *out, &Line { event, data })?;
        writeln!(out)?;
        out.flush()
    }
}

/// Prints the end events once the collected test is over.
impl<W: Write> Write for Shared<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().flush()
    }
}

/// The closing events; with `--json-stream-full-output`, then the whole `-J` document.
struct EndPrinter<W> {
    out: Shared<W>,
    full: Option<Iperf3Printer<Shared<W>>>,
}

impl<W: Write + Send> Printer for EndPrinter<W> {
    fn started(&mut self) {
        if let Some(full) = &mut self.full {
            full.started();
        }
    }

    fn print(&mut self, doc: Option<Document>, title: Option<&str>, error: &str) -> io::Result<()> {
        if !error.is_empty() {
            self.out.event("error", &error)?;
        }
        match &doc {
            Some(doc) => {
                if let Some(text) = &doc.server_output_text {
                    self.out.event("server_output_text", text)?;
                }
                self.out.event("end", &super::json::end(doc))?;
            }
            None => self.out.event("end", &serde_json::json!({}))?,
        }
        match &mut self.full {
            Some(full) => full.print(doc, title, error),
            None => Ok(()),
        }
    }
}

/// `--format iperf3-json-stream`: the events live, the end from the collected test.
pub struct Iperf3StreamFormatter<W> {
    out: Shared<W>,
    whole: WholeDocument<EndPrinter<W>>,
    /// The test's header, and the rows of the interval not yet written (one index: with
    /// `--bidir`, both directions' rows).
    header: Option<Header>,
    pending: Vec<IntervalReport>,
}

impl<W: Write + Send> Iperf3StreamFormatter<W> {
    /// The event lines on `out`; `full`: then the whole document (`--json-stream-full-output`)
    /// with `extra_data`.
    pub fn new(out: W, full: bool, extra_data: Option<String>) -> Self {
        let out = Shared(Arc::new(Mutex::new(out)));
        let full = full.then(|| Iperf3Printer::live(out.clone(), extra_data));
        Iperf3StreamFormatter {
            whole: WholeDocument::with_printer(EndPrinter {
                out: out.clone(),
                full,
            }),
            out,
            header: None,
            pending: Vec::new(),
        }
    }

    /// The pending interval as iperf3's `interval` event.
    /// `-T`'s title, in the whole document of `--json-stream-full-output`.
    pub fn titled(mut self, title: Option<String>) -> Self {
        self.whole = self.whole.titled(title);
        self
    }

    fn flush(&mut self) -> io::Result<()> {
        let Some(header) = &self.header else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut doc = Document::new(None, header.clone());
        doc.intervals = std::mem::take(&mut self.pending);
        for interval in super::json::intervals(&doc) {
            self.out.event("interval", &interval)?;
        }
        Ok(())
    }
}

impl<W: Write + Send> Formatter for Iperf3StreamFormatter<W> {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        self.whole.header(header)?;
        self.header = Some(header.clone());
        let start = super::json::start(header, &RunFacts::here_now());
        self.out.event("start", &start)
    }

    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()> {
        self.whole.interval(interval)?;
        if self
            .pending
            .first()
            .is_some_and(|p| p.index != interval.index)
        {
            self.flush()?;
        }
        self.pending.push(interval.clone());
        Ok(())
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.flush()?;
        self.whole.summary(summary)
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        self.whole.server_output(text)
    }

    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        self.flush()?;
        self.whole.cut_short(summary, error)
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        self.flush()?;
        self.whole.failed(error)
    }
}
