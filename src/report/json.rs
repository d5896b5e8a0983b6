//! JSON output: `-J` prints one document `{start, intervals, end}` when the test ends;
//! `--json-lines` prints one event object per line as it happens
//! (`{"event":"start",...}`, `{"event":"interval",...}`, `{"event":"end",...}`).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::Formatter;
use super::model::{Direction, Header, IntervalReport, Summary};

/// The whole-test document of `-J`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// `-T TITLE` (as iperf3's `"title"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub start: Header,
    pub intervals: Vec<IntervalReport>,
    pub end: Option<Summary>,
    /// `--bidir`: the server-to-client direction's totals (`end` holds the client's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reverse: Option<Summary>,
    /// `--get-server-output`: the server's own lines (iperf3's name for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
    /// Why the test failed; `end` is then null and `intervals` hold what was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Document {
    /// Files a direction's summary: `end_reverse` for `--bidir`'s server-to-client one,
    /// `end` otherwise. True once every direction's is in.
    pub fn file(&mut self, summary: &Summary) -> bool {
        let bidir = self.start.direction == Direction::Bidir;
        match summary.reverse && bidir {
            true => self.end_reverse = Some(summary.clone()),
            false => self.end = Some(summary.clone()),
        }
        self.end.is_some() && (!bidir || self.end_reverse.is_some())
    }

    /// A test's document before its first interval.
    pub fn new(title: Option<String>, start: Header) -> Document {
        Document {
            title,
            start,
            intervals: Vec::new(),
            end: None,
            end_reverse: None,
            server_output_text: None,
            error: None,
        }
    }
}

/// One line of `--json-lines`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum Event {
    Start(Box<Header>),
    Interval(Box<IntervalReport>),
    End(Box<Summary>),
    /// The test failed with this message; no `end` follows.
    Error(String),
    /// A stream failed `at` seconds into the test (the `error` event follows).
    StreamFailed {
        at: f64,
        error: String,
    },
    /// `--get-server-output`: the server's own lines.
    ServerOutput(String),
}

/// `-J`: collects, prints once.
pub struct JsonFormatter<W: Write> {
    out: W,
    doc: Option<Document>,
    title: Option<String>,
    /// Summaries still to come before the document is whole (two with `--bidir`).
    ends_left: usize,
}

impl<W: Write> JsonFormatter<W> {
    pub fn new(out: W) -> Self {
        JsonFormatter {
            out,
            doc: None,
            title: None,
            ends_left: 1,
        }
    }

    /// The document's `"title"` (`-T`).
    pub fn titled(mut self, title: Option<String>) -> Self {
        self.title = title;
        self
    }

    /// Files a direction's summary in the document.
    fn file(&mut self, summary: &Summary) {
        if let Some(doc) = &mut self.doc {
            doc.file(summary);
        }
        self.ends_left = self.ends_left.saturating_sub(1);
    }
}

impl<W: Write + Send> Formatter for JsonFormatter<W> {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        self.doc = Some(Document::new(self.title.clone(), header.clone()));
        self.ends_left = header.direction.reversed().len();
        Ok(())
    }

    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.intervals.push(interval.clone());
        }
        Ok(())
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.file(summary);
        if self.ends_left > 0 {
            return Ok(());
        }
        let Some(doc) = self.doc.take() else {
            return Ok(());
        };
        serde_json::to_writer_pretty(&mut self.out, &doc)?;
        writeln!(self.out)?;
        self.out.flush()
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        if let Some(doc) = &mut self.doc {
            doc.server_output_text = Some(text.to_string());
        }
        Ok(())
    }

    /// One document with both the totals so far and why the test stopped (as iperf3 -J
    /// keeps its end sums when interrupted).
    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        self.file(summary);
        self.failed(error)
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        match self.doc.take() {
            Some(mut doc) => {
                doc.error = Some(error.to_string());
                serde_json::to_writer_pretty(&mut self.out, &doc)?;
            }
            None => serde_json::to_writer(&mut self.out, &serde_json::json!({ "error": error }))?,
        }
        writeln!(self.out)?;
        self.out.flush()
    }
}

/// `--json-lines`: one event per line, flushed as it happens.
pub struct JsonLinesFormatter<W: Write> {
    out: W,
}

impl<W: Write> JsonLinesFormatter<W> {
    pub fn new(out: W) -> Self {
        JsonLinesFormatter { out }
    }

    fn emit(&mut self, event: &Event) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

impl<W: Write + Send> Formatter for JsonLinesFormatter<W> {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        self.emit(&Event::Start(Box::new(header.clone())))
    }

    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()> {
        self.emit(&Event::Interval(Box::new(interval.clone())))
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.emit(&Event::End(Box::new(summary.clone())))
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        self.emit(&Event::Error(error.to_string()))
    }

    fn stream_failed(&mut self, at: f64, error: &str) -> io::Result<()> {
        self.emit(&Event::StreamFailed {
            at,
            error: error.to_string(),
        })
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        self.emit(&Event::ServerOutput(text.to_string()))
    }
}
