//! Saved results: reads a `-J` document back (a test's, a `lab`'s, a `compare`'s or a
//! `diagnose`'s)
//! through the same serde types that wrote it, so `pinperf report` and `pinperf plot`
//! render exactly what the run measured. Every failure names the file. Runs on the main
//! thread of `pinperf plot` / `pinperf report`.

use std::path::Path;

pub mod lab;

use crate::commands::compare::CompareDoc;
use crate::error::{Error, Result};
use crate::report::Formatter;
use crate::report::format::json::Document;

/// A saved test: the client's document, and the lab's bottleneck rate and own figures
/// when a `pinperf lab` run wrote it.
#[derive(Debug, Clone)]
pub(crate) struct SavedTest {
    pub doc: Document,
    pub lab_rate_bps: Option<u64>,
    pub lab: Option<lab::SavedLab>,
}

/// What a saved file holds.
#[derive(Debug, Clone)]
pub(crate) enum Saved {
    Test(Box<SavedTest>),
    Compare(CompareDoc),
    /// A `pinperf diagnose -J` document.
    Diagnose(Box<crate::commands::diagnose::DiagnoseDoc>),
    /// A test that failed before it started: only its error (no server, refused, busy).
    Failed(String),
}

impl Saved {
    /// Why a failed test's document has nothing to `show` (render, plot ...).
    pub(crate) fn nothing_to(show: &str, path: &Path, error: &str) -> Error {
        Error::Usage(format!(
            "{}: the test failed before it started, nothing to {show}: {error}",
            path.display()
        ))
    }
}

/// Reads and parses `path`.
pub(crate) fn load(path: &Path) -> Result<Saved> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        // Bytes that are not text are no document (a usage error, as any other one).
        std::io::ErrorKind::InvalidData => {
            Error::Usage(format!("{name}: not a pinperf -J document: not text ({e})"))
        }
        _ => Error::io(format!("read {name}"), e),
    })?;
    parse(&text).map_err(|why| Error::Usage(format!("{name}: {why}")))
}

/// Parses a saved document; the error says what is wrong with it (the caller adds the
/// file's name).
pub(crate) fn parse(text: &str) -> std::result::Result<Saved, String> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("not a pinperf -J document: not JSON ({e})"))?;
    let Some(obj) = value.as_object() else {
        return Err("not a pinperf -J document: not a JSON object".into());
    };
    // `--format iperf3-json` keeps pinperf's own document under "pinperf".
    if let Some(own) = obj.get("pinperf").filter(|p| p.is_object()) {
        return parse_test(own.clone(), "pinperf -J document (the \"pinperf\" member)");
    }
    if obj.contains_key("verdict") && obj.contains_key("runs") {
        let doc = serde_json::from_value(value)
            .map_err(|e| format!("not a pinperf diagnose -J document: {e}"))?;
        return Ok(Saved::Diagnose(Box::new(doc)));
    }
    if obj.contains_key("rows") {
        let doc: CompareDoc = serde_json::from_value(value)
            .map_err(|e| format!("not a pinperf compare -J document: {e}"))?;
        return Ok(Saved::Compare(doc));
    }
    // iperf3's shape (`start.connected`) without pinperf's document: an iperf3 client's,
    // or one that `--format iperf3-json` wrote for a test that failed before its start.
    let iperf3_shape = obj
        .get("start")
        .is_some_and(|s| s.get("connected").is_some());
    // A test that failed before its start: `-J` writes `"start": null` (older ones no
    // `start`).
    let started = obj.get("start").is_some_and(|s| !s.is_null());
    if let (false, Some(error)) = (started && !iperf3_shape, obj.get("error")) {
        return Ok(Saved::Failed(error.as_str().unwrap_or("?").to_string()));
    }
    if iperf3_shape {
        return Err(
            "an iperf3 -J document without pinperf's own under \"pinperf\": pinperf reads \
             its own documents (-J, --json-file, or --format iperf3-json)"
                .into(),
        );
    }
    if !obj.contains_key("start") || !obj.contains_key("intervals") {
        return Err(
            "not a pinperf -J document: it has neither \"start\" and \"intervals\" (a test) \
             nor \"rows\" (a comparison); --json-lines and CSV output cannot be read back"
                .into(),
        );
    }
    parse_test(value, "pinperf -J document")
}

/// A test's document (`what` names it in the error).
fn parse_test(value: serde_json::Value, what: &str) -> std::result::Result<Saved, String> {
    let lab_rate_bps = value
        .pointer("/lab/path/rate_bps")
        .and_then(serde_json::Value::as_u64);
    let lab = value
        .get("lab")
        .filter(|l| l.is_object())
        .map(lab::SavedLab::read);
    let mut doc: Document =
        serde_json::from_value(value).map_err(|e| format!("not a {what}: {e}"))?;
    // The document keeps the peer's name, not what it reports: the name says it.
    doc.start.peer = crate::iperf3::wording::of_remote_software(&doc.start.remote_software);
    Ok(Saved::Test(Box::new(SavedTest {
        doc,
        lab_rate_bps,
        lab,
    })))
}

/// Feeds a saved test to a formatter in the order the run did: the header, each interval,
/// then the totals (with the error beside them when the test was cut short), or only the
/// error when the test failed before its totals. Live-only lines (a stream's `# failed at`)
/// are not in the document and are not repeated.
pub(crate) fn replay(doc: &Document, out: &mut dyn Formatter) -> std::io::Result<()> {
    out.header(&doc.start)?;
    for iv in &doc.intervals {
        out.interval(iv)?;
    }
    if let Some(text) = &doc.server_output_text {
        out.server_output(text)?;
    }
    // Every direction's totals in the order the run printed them (`--bidir`: the
    // client's, then `end_reverse`); a cut-short test's error beside the last.
    let ends: Vec<&crate::report::model::Summary> =
        doc.end.iter().chain(doc.end_reverse.iter()).collect();
    match (ends.split_last(), &doc.error) {
        (Some((last, rest)), error) => {
            for s in rest {
                out.summary(s)?;
            }
            match error {
                Some(e) => out.cut_short(last, e),
                None => out.summary(last),
            }
        }
        (None, Some(e)) => out.failed(e),
        (None, None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_documents_say_what_is_wrong() {
        let err = |t: &str| parse(t).unwrap_err();
        assert!(err("{").starts_with("not a pinperf -J document: not JSON"));
        assert_eq!(err("[1]"), "not a pinperf -J document: not a JSON object");
        assert!(err("{\"a\": 1}").contains("neither \"start\""));
        assert!(
            err("{\"start\": 1, \"intervals\": []}").starts_with("not a pinperf -J document: "),
        );
        assert!(err("{\"rows\": 3}").starts_with("not a pinperf compare -J document: "));
        assert!(
            err("{\"start\": {\"connected\": []}, \"intervals\": [], \"end\": {}}")
                .starts_with("an iperf3 -J document without pinperf's own")
        );
        let failed = |t: &str| match parse(t) {
            Ok(Saved::Failed(e)) => e,
            other => panic!("{t}: read as {other:?}"),
        };
        assert_eq!(
            failed("{\"start\": {\"connected\": []}, \"end\": {}, \"error\": \"refused\"}"),
            "refused"
        );
        assert!(
            err("{\"start\": {}, \"pinperf\": {\"start\": 1}}")
                .starts_with("not a pinperf -J document (the \"pinperf\" member): ")
        );
        assert_eq!(
            failed("{\"error\": \"connect to h:1: refused\"}"),
            "connect to h:1: refused"
        );
        assert_eq!(
            failed(r#"{"start": null, "intervals": [], "end": null, "error": "refused"}"#),
            "refused"
        );
    }

    /// `--format iperf3-json` keeps the `-J` document under "pinperf": `pinperf report`
    /// and `pinperf plot` read that back.
    #[test]
    fn an_iperf3_json_document_is_read_through_its_pinperf_member() {
        use crate::iperf3::json::Iperf3JsonFormatter;
        use crate::report::Formatter;
        use crate::report::model::sample;
        let mut out = Vec::new();
        let mut f = Iperf3JsonFormatter::new(&mut out, None);
        f.header(&sample::header()).unwrap();
        f.interval(&sample::interval()).unwrap();
        f.summary(&sample::summary()).unwrap();
        drop(f);
        let Ok(Saved::Test(t)) = parse(std::str::from_utf8(&out).unwrap()) else {
            panic!("not read back: {}", String::from_utf8_lossy(&out));
        };
        // (Floats read back to within serde_json's parsing, so compare what is exact.)
        assert_eq!(t.doc.intervals.len(), 1);
        assert_eq!(t.doc.intervals[0].sum.bytes, sample::interval().sum.bytes);
        let end = t.doc.end.expect("the totals");
        assert_eq!(end.sum_received.bytes, sample::summary().sum_received.bytes);
        assert_eq!(end.diagnosis, sample::summary().diagnosis);
    }
}
