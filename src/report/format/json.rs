//! JSON output: `-J` prints one document `{start, intervals, end}` when the test ends;
//! `--json-lines` prints one event object per line as it happens
//! (`{"event":"start",...}`, `{"event":"interval",...}`, `{"event":"end",...}`).
//! [`WholeDocument`] collects the test for every format that prints one document at the
//! end, each with its own [`Printer`].

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::report::Formatter;
use crate::report::model::{Direction, Header, IntervalReport, Summary};

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

/// A test's document as it comes in, for the formats that print it whole when the test
/// ends.
#[derive(Default)]
struct Collector {
    doc: Option<Document>,
    title: Option<String>,
    /// Summaries still to come before the document is whole (two with `--bidir`).
    ends_left: usize,
}

impl Collector {
    /// Files a direction's summary in the document.
    fn file(&mut self, summary: &Summary) {
        if let Some(doc) = &mut self.doc {
            doc.file(summary);
        }
        self.ends_left = self.ends_left.saturating_sub(1);
    }

    /// The document so far (with `summary`, the totals of a test cut short) and why the
    /// test stopped; None when it failed before its header.
    fn failed(&mut self, summary: Option<&Summary>, error: &str) -> Option<Document> {
        if let Some(s) = summary {
            self.file(s);
        }
        let mut doc = self.doc.take()?;
        doc.error = Some(error.to_string());
        Some(doc)
    }
}

/// How a whole-document format writes the test once it is over.
pub(crate) trait Printer: Send {
    /// The test's header has arrived: the test starts now.
    fn started(&mut self) {}
    /// Writes the document, or (None: the test failed before its header) one with no
    /// start, intervals or end beside `-T`'s `title` and `error`.
    fn print(&mut self, doc: Option<Document>, title: Option<&str>, error: &str) -> io::Result<()>;
}

/// A format that collects the test and prints one document when it ends (`-J`,
/// `--format iperf3-json`): the document with its totals, or, when the test failed or was
/// cut short, with what was measured and the reason in `error` (as iperf3 -J keeps its end
/// sums when interrupted).
pub struct WholeDocument<P> {
    collected: Collector,
    printer: P,
}

impl<P> WholeDocument<P> {
    pub(crate) fn with_printer(printer: P) -> Self {
        WholeDocument {
            collected: Collector::default(),
            printer,
        }
    }

    /// The document's `"title"` (`-T`, as iperf3's).
    pub fn titled(mut self, title: Option<String>) -> Self {
        self.collected.title = title;
        self
    }
}

impl<P: Printer> Formatter for WholeDocument<P> {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        self.printer.started();
        let c = &mut self.collected;
        c.doc = Some(Document::new(c.title.clone(), header.clone()));
        c.ends_left = header.direction.reversed().len();
        Ok(())
    }

    fn interval(&mut self, interval: &IntervalReport) -> io::Result<()> {
        if let Some(doc) = &mut self.collected.doc {
            doc.intervals.push(interval.clone());
        }
        Ok(())
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.collected.file(summary);
        match (self.collected.ends_left, self.collected.doc.take()) {
            (0, Some(doc)) => self.printer.print(Some(doc), None, ""),
            (_, doc) => {
                self.collected.doc = doc;
                Ok(())
            }
        }
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        if let Some(doc) = &mut self.collected.doc {
            doc.server_output_text = Some(text.to_string());
        }
        Ok(())
    }

    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        let doc = self.collected.failed(Some(summary), error);
        self.printer
            .print(doc, self.collected.title.as_deref(), error)
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        let doc = self.collected.failed(None, error);
        self.printer
            .print(doc, self.collected.title.as_deref(), error)
    }
}

/// `-J`: pinperf's document, pretty-printed.
pub struct JsonPrinter<W>(W);

impl<W: Write + Send> Printer for JsonPrinter<W> {
    fn print(&mut self, doc: Option<Document>, title: Option<&str>, error: &str) -> io::Result<()> {
        let out = &mut self.0;
        match doc {
            Some(doc) => serde_json::to_writer_pretty(&mut *out, &doc)?,
            // The document's keys, in its order: a script reading `end` finds null,
            // `pinperf report` the error.
            None => {
                #[derive(Serialize)]
                struct Unstarted<'a> {
                    #[serde(skip_serializing_if = "Option::is_none")]
                    title: Option<&'a str>,
                    start: Option<Header>,
                    intervals: [IntervalReport; 0],
                    end: Option<Summary>,
                    error: &'a str,
                }
                let doc = Unstarted {
                    title,
                    start: None,
                    intervals: [],
                    end: None,
                    error,
                };
                serde_json::to_writer_pretty(&mut *out, &doc)?
            }
        }
        writeln!(out)?;
        out.flush()
    }
}

/// `-J`: collects, prints once.
pub type JsonFormatter<W> = WholeDocument<JsonPrinter<W>>;

impl<W: Write> WholeDocument<JsonPrinter<W>> {
    pub fn new(out: W) -> Self {
        WholeDocument::with_printer(JsonPrinter(out))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::diagnosis;
    use crate::report::finding::{Finding, UnfairShares};
    use crate::report::model::sample;

    fn unfair() -> Finding {
        Finding::new(UnfairShares {
            jain: 0.865,
            min_share_percent: 2.8,
            max_share_percent: 19.0,
            equal_share_percent: 12.5,
        })
    }

    /// A document saved before findings were recorded loads without them, and writes
    /// out again without the key (not as an empty list: nothing says none were found).
    #[test]
    fn a_document_without_findings_loads_and_keeps_its_shape() {
        let mut doc = Document::new(None, sample::header());
        doc.end = Some(sample::summary());
        let text = serde_json::to_string(&doc).unwrap();
        assert!(!text.contains("\"findings\""), "{text}");
        let back: Document = serde_json::from_str(&text).unwrap();
        let end = back.end.unwrap();
        assert_eq!(end.findings, None);
        assert_eq!(end.diagnosis, sample::summary().diagnosis);
    }

    /// Findings are written next to the words of `diagnosis`, as data, and read back.
    #[test]
    fn findings_are_written_as_data_beside_the_words() {
        let mut s = sample::summary();
        s.diagnosis.clear();
        diagnosis::file(&mut s, [unfair()]);
        assert_eq!(s.diagnosis, vec![unfair().words]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["diagnosis"][0], unfair().words.as_str());
        let f = &json["findings"][0];
        assert_eq!(f["kind"], "unfair_shares");
        assert_eq!(f["figures"]["jain"], 0.865);
        assert_eq!(f["figures"]["equal_share_percent"], 12.5);
        assert_eq!(f["advice"]["flags"], serde_json::json!([]));
        assert_eq!(f["words"], json["diagnosis"][0]);
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back.findings, Some(vec![unfair()]));
    }
}
