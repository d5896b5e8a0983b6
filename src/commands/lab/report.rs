//! The lab's own figures and warnings: one model ([`LabPath`], [`LabRelay`], [`LabEnd`]),
//! filled once by `run`'s thread, and [`LabOut`], which prints it in the run's format:
//! - text: `# lab…` lines on stdout, between the client's report and after it;
//! - CSV: the same lines on stderr, so stdout stays one table;
//! - `--json-lines`: `lab_path`, `lab_relay` (one per direction) and `lab_end` events on
//!   stdout, shaped like the client's (`{"event":…,"data":{…}}`), before and after them;
//! - `-J`: a `"lab"` member added to the client's document. The relays stop after the
//!   client's report is built, so the client writes its document into a [`Captured`]
//!   buffer and `end` prints it, with `lab`, once the namespaces are gone. Only warnings
//!   and the teardown line go to stderr. Should the client have written something that is
//!   not one JSON object, it is printed unchanged and the lab's lines go to stderr.
//!
//! Formatters compute nothing: every figure is computed here, once, from the relays'
//! counters. Only `run`'s thread writes through [`LabOut`]; a closed stdout is never an
//! error (the lab stops writing and still tears down), and nothing here panics.

use std::io::{self, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::relay::{self, RelayStats};
use super::{PathSpec, note};
use crate::choices::Format;
pub use crate::commands::saved::lab::{Direction, Ends, LabEnd, LabPath, LabRelay, RelayCpus};
use crate::commands::saved::lab::{rate_text, tun_text};
use crate::report::Formatter;

/// Late deliveries are scheduling noise up to one packet in this many, or fewer than
/// [`LATE_FEW`].
const LATE_NOISE_PACKETS: u64 = 1000;
const LATE_FEW: u64 = 10;
/// Share of the path's rate at which a run counts as paced by the path even with late
/// deliveries: TCP/IP headers alone take up to 4 % of the wire at MTU 1500.
const PATH_PACE_SHARE: f64 = 0.9;

impl LabPath {
    pub fn new(spec: &PathSpec, namespaces: Ends<String>, relay_cpus: RelayCpus) -> LabPath {
        LabPath {
            rtt_ms: spec.rtt.as_secs_f64() * 1e3,
            rate_bps: spec.rate_bps,
            queue_bytes: spec.queue_bytes,
            bdp_bytes: spec.bdp(),
            loss: spec.loss,
            mtu: spec.mtu,
            namespaces,
            addresses: Ends {
                client: super::CLIENT_ADDR,
                server: super::SERVER_ADDR,
            },
            relay_cpus,
            blackout_from_s: spec.blackout.map(|b| b.from_ns as f64 / 1e9),
            blackout_udp_only: spec.blackout.is_some_and(|b| b.udp_only),
        }
    }
}

impl LabRelay {
    pub fn new(direction: Direction, s: &RelayStats) -> LabRelay {
        let wall_s = s.wall.as_secs_f64();
        LabRelay {
            direction,
            packets: s.path.packets,
            bytes: s.path.bytes,
            queue_drops: s.path.queue_drops,
            loss_drops: s.path.loss_drops,
            blackout_drops: s.blackout_drops,
            peak_queue_bytes: s.path.peak_queue_bytes,
            late_deliveries: s.late,
            worst_late_ns: s.worst_late_ns,
            late_after_ns: relay::LATE_NS,
            write_errors: s.write_errors,
            cpu_us: s.cpu_us,
            wall_s,
            cpu_percent: if wall_s > 0.0 {
                s.cpu_us as f64 / 1e6 / wall_s * 100.0
            } else {
                0.0
            },
        }
    }
}

/// A warning for `warnings`, and its line where the lab prints lines (none when it was
/// already said on stderr as it happened).
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub message: String,
    pub line: Option<String>,
}

impl Warning {
    /// A warning already said on stderr: it only joins `warnings`.
    pub fn said(message: String) -> Warning {
        Warning {
            message,
            line: None,
        }
    }
}

/// What a run could reach: the path's rate, or the test's own `-b` when that is lower;
/// and what else kept it below that (`--loss`, a blackout, a test too short to leave
/// slow start), which a low rate cannot be told from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    pub bps: u64,
    /// The flag that asked for less than the path's rate (`-b` or `--fq-rate`, times the
    /// streams), if one did.
    pub set_by: Option<&'static str>,
    pub other: Option<&'static str>,
    /// `-M`: the segments the relay forwards are this size, whatever `--mtu` allows.
    pub mss: Option<u32>,
}

impl Ceiling {
    /// The path's `rate_bps`, nothing else in the way.
    pub fn path(rate_bps: u64) -> Ceiling {
        Ceiling {
            bps: rate_bps,
            set_by: None,
            other: None,
            mss: None,
        }
    }
}

/// What the lab says about deliveries later than [`relay::LATE_NS`], of `packets` in
/// both directions: nothing when at most one in [`LATE_NOISE_PACKETS`] (or fewer than
/// [`LATE_FEW`]) was late; a note that the path (or `-b`) still set the pace when the run
/// received at least [`PATH_PACE_SHARE`] of its `ceiling`, or that something else slowed
/// it; otherwise (or with no summary: a failed run) that the relay, not the path, limited
/// the run.
pub fn late_warning(
    late: u64,
    packets: u64,
    worst_late_ns: u64,
    received_bps: Option<f64>,
    ceiling: Ceiling,
) -> Option<Warning> {
    if late.saturating_mul(LATE_NOISE_PACKETS) <= packets || late < LATE_FEW {
        return None;
    }
    let late_ms = relay::LATE_NS / 1_000_000;
    let share = received_bps.map_or(0.0, |r| r / ceiling.bps.max(1) as f64);
    let late_text = format!(
        "{late} of {packets} packets were delivered more than {late_ms} ms late (worst {:.1} ms)",
        worst_late_ns as f64 / 1e6
    );
    let (what, who) = match ceiling.set_by {
        Some(flag) => (format!("{flag}'s"), flag),
        None => ("the path's".to_string(), "the path"),
    };
    let (message, kind) = match (share >= PATH_PACE_SHARE, ceiling.other) {
        (true, _) => (
            format!(
                "{late_text}, but the run reached {:.0} % of {what} {}: {who} set the pace",
                share * 100.0,
                rate_text(ceiling.bps),
            ),
            "note",
        ),
        (false, Some(other)) if received_bps.is_some() => (
            format!(
                "{late_text}; with {other}, the run's rate does not show whether that limited it"
            ),
            "note",
        ),
        _ => (
            format!(
                "the relay delivered {late} packets more than {late_ms} ms late: it, not the \
                 emulated path, limited this run; lower --rate or {}",
                match ceiling.mss {
                    Some(m) => format!("raise -M {m} (it sets the packets' size, not --mtu)"),
                    None => "use a larger --mtu".into(),
                }
            ),
            "warning",
        ),
    };
    let line = format!("# lab: {kind}: {message}");
    Some(Warning {
        message,
        line: Some(line),
    })
}

/// The `--json-lines` events of the lab.
#[derive(Serialize)]
#[serde(tag = "event", content = "data")]
enum LabEvent<'a> {
    #[serde(rename = "lab_path")]
    Path(&'a LabPath),
    #[serde(rename = "lab_relay")]
    Relay(&'a LabRelay),
    #[serde(rename = "lab_end")]
    End(&'a LabEnd),
}

/// `-J`'s `lab` member. A part the run never reached is null.
#[derive(Serialize)]
struct LabMember<'a> {
    path: Option<&'a LabPath>,
    forward: Option<&'a LabRelay>,
    #[serde(rename = "return")]
    back: Option<&'a LabRelay>,
    #[serde(flatten)]
    end: &'a LabEnd,
}

/// The client's `-J` output, kept in memory until the lab adds its figures to it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where the report goes (stdout or `--logfile`), shared by the client's formatter and the
/// lab's own lines so they come out in order.
#[derive(Clone)]
struct Sink(Arc<Mutex<Box<dyn Write + Send>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().flush()
    }
}

/// Both formatters hear every event: the report, and the document the side files are
/// drawn from.
struct Tee(Box<dyn Formatter>, Box<dyn Formatter>);

impl Formatter for Tee {
    fn header(&mut self, h: &crate::report::model::Header) -> io::Result<()> {
        let _ = self.1.header(h);
        self.0.header(h)
    }
    fn interval(&mut self, i: &crate::report::model::IntervalReport) -> io::Result<()> {
        let _ = self.1.interval(i);
        self.0.interval(i)
    }
    fn summary(&mut self, s: &crate::report::model::Summary) -> io::Result<()> {
        let _ = self.1.summary(s);
        self.0.summary(s)
    }
    fn failed(&mut self, error: &str) -> io::Result<()> {
        let _ = self.1.failed(error);
        self.0.failed(error)
    }
    fn cut_short(&mut self, s: &crate::report::model::Summary, error: &str) -> io::Result<()> {
        let _ = self.1.cut_short(s, error);
        self.0.cut_short(s, error)
    }
    fn stream_failed(&mut self, at: f64, error: &str) -> io::Result<()> {
        let _ = self.1.stream_failed(at, error);
        self.0.stream_failed(at, error)
    }
    fn server_output(&mut self, text: &str) -> io::Result<()> {
        let _ = self.1.server_output(text);
        self.0.server_output(text)
    }
}

/// The lab's figures, and where they go in this run's format. Used by `run`'s thread only.
pub struct LabOut {
    format: Format,
    /// The client's text flags (`-T`, `-V`, `-f`, `--timestamps`).
    text: crate::cli::TextArgs,
    /// stdout, or `--logfile`.
    sink: Sink,
    /// `--plot`, `--html`, `--json-file`: written once the lab's figures are in, from the
    /// client's document (`doc`) with them added.
    files: Option<crate::commands::output::SideFiles>,
    doc: Captured,
    /// Writing a side file failed.
    files_error: Option<crate::error::Error>,
    /// Whether the lab's output could be written, as for the client's report: after a
    /// closed pipe or a write error nothing more is written.
    output: crate::report::Output,
    /// `-J`: what the client wrote.
    captured: Captured,
    /// `-J`: the lab's lines, held back for stderr in case the client's output cannot carry
    /// the figures.
    held: Vec<String>,
    path: Option<LabPath>,
    forward: Option<LabRelay>,
    back: Option<LabRelay>,
    end: LabEnd,
}

impl LabOut {
    /// The lab's output in `format`, with the client's output flags `o`. Its files are
    /// created now, before anything of the lab is.
    pub fn new(format: Format, o: &crate::cli::OutputArgs) -> crate::error::Result<LabOut> {
        Ok(LabOut {
            format,
            text: o.text.clone(),
            sink: Sink(Arc::new(Mutex::new(
                crate::commands::output::report_writer(o)?,
            ))),
            files: crate::commands::output::SideFiles::create(o)?,
            doc: Captured::default(),
            files_error: None,
            output: crate::report::Output::default(),
            captured: Captured::default(),
            held: Vec::new(),
            path: None,
            forward: None,
            back: None,
            end: LabEnd::default(),
        })
    }

    /// The formatter the client prints through: stdout (or `--logfile`), or with `-J` the
    /// buffer the lab adds its figures to; and with side files, the document they take.
    pub fn client_formatter(&self) -> Box<dyn Formatter> {
        let out: Box<dyn Write + Send> = match self.format {
            Format::Json => Box::new(self.captured.clone()),
            _ => Box::new(self.sink.clone()),
        };
        let display = crate::commands::output::display(self.format, &self.text, out);
        match self.files {
            None => display,
            Some(_) => {
                let doc = Box::new(self.doc.clone());
                Box::new(Tee(
                    display,
                    crate::commands::output::display(Format::Json, &self.text, doc),
                ))
            }
        }
    }

    /// Where a diagnosis prints, and whether as its `-J` document: the lab's report
    /// (stdout), or with `-J` the buffer the lab adds its figures to, as
    /// [`LabOut::client_formatter`]'s.
    pub fn diagnosis_writer(&self) -> (bool, Box<dyn Write + Send>) {
        match self.format {
            Format::Json => (true, Box::new(self.captured.clone())),
            _ => (false, Box::new(self.sink.clone())),
        }
    }

    /// The lab's member of a document.
    fn member(&self) -> LabMember<'_> {
        LabMember {
            path: self.path.as_ref(),
            forward: self.forward.as_ref(),
            back: self.back.as_ref(),
            end: &self.end,
        }
    }

    /// Writes the side files from the client's document with the lab's figures; none
    /// (and no empty file) when the client wrote no document.
    fn write_files(&mut self) {
        let Some(files) = self.files.take() else {
            return;
        };
        let captured = std::mem::take(&mut *self.doc.0.lock());
        let text = with_lab(&captured, &self.member());
        let test = text
            .as_deref()
            .and_then(|t| match crate::commands::saved::parse(t) {
                Ok(crate::commands::saved::Saved::Test(test)) => Some(test),
                _ => None,
            });
        let (Some(test), Some(text)) = (test, text) else {
            files.discard();
            return;
        };
        if let Err(e) = files.write(&test, text.as_bytes()) {
            note(&format!("pinperf lab: {e}"));
            self.files_error = Some(crate::error::Error::io("the lab's side files", e));
        }
    }

    /// The path, before the test; false once nobody reads.
    pub fn path(&mut self, path: LabPath) -> bool {
        let ok = self.say(&path.text(), || LabEvent::Path(&path));
        self.path = Some(path);
        ok
    }

    /// One relay direction's figures, after the test.
    pub fn relay(&mut self, relay: LabRelay) {
        self.say(&relay.text(), || LabEvent::Relay(&relay));
        match relay.direction {
            Direction::Forward => self.forward = Some(relay),
            Direction::Return => self.back = Some(relay),
        }
    }

    /// The TUN devices' own drops, after the test.
    pub fn tun_drops(&mut self, drops: Ends<Option<u64>>) {
        let line = tun_text(&drops);
        self.end.tun_drops = drops;
        self.line(&line);
    }

    pub fn warning(&mut self, warning: Warning) {
        if let Some(line) = &warning.line {
            self.line(line);
        }
        self.end.warnings.push(warning.message);
    }

    /// The last of it, once the lab is torn down: `removed` (the namespaces teardown
    /// deleted), `failed` (a warning for each it could not) and `line`, the text line
    /// saying both; with `-J`, the client's document with `lab` added.
    pub fn end(&mut self, removed: Vec<String>, failed: Vec<String>, line: &str) {
        self.end.removed = removed;
        self.end.warnings.extend(failed);
        self.write_files();
        match self.format {
            Format::Text
            | Format::Csv
            | Format::Iperf3Json
            | Format::Iperf3Text
            | Format::Iperf3JsonStream
            | Format::Iperf3JsonStreamFull => {
                self.line(line);
            }
            Format::JsonLines => {
                let end = std::mem::take(&mut self.end);
                self.event(&LabEvent::End(&end));
                self.end = end;
            }
            Format::Json => self.document(line),
        }
    }

    /// `-J`: prints the client's document with `lab` added, and on stderr the warnings and
    /// `line`; or, when the client wrote no JSON object, what it wrote and all the lab's
    /// lines on stderr.
    fn document(&mut self, line: &str) {
        let captured = std::mem::take(&mut *self.captured.0.lock());
        let (stdout, stderr) = match with_lab(&captured, &self.member()) {
            Some(doc) => {
                let warnings = self.held.iter().filter(|l| is_warning(l));
                (doc.into_bytes(), warnings.cloned().collect::<Vec<_>>())
            }
            None => (captured, std::mem::take(&mut self.held)),
        };
        for l in stderr.iter().map(String::as_str).chain([line]) {
            note(l);
        }
        if !stdout.is_empty() {
            self.write(&stdout, true);
        }
    }

    /// Says one thing in this format: `line` as text, `event` with `--json-lines`, held
    /// back with `-J`. False once nobody reads.
    fn say<'a>(&mut self, line: &str, event: impl FnOnce() -> LabEvent<'a>) -> bool {
        match self.format {
            Format::JsonLines => self.event(&event()),
            _ => self.line(line),
        }
    }

    /// One text line: on stdout with text, on stderr with CSV and iperf3-json (whose
    /// document has iperf3's members and pinperf's own only), held with `-J`; none with
    /// `--json-lines`, whose events carry the figures.
    fn line(&mut self, line: &str) -> bool {
        match self.format {
            // With the client's prefixes (`--timestamps`, `-T`), as its own lines.
            Format::Text | Format::Iperf3Text => {
                let prefix = crate::report::prefix::line_prefix(
                    self.text.timestamps.as_deref(),
                    self.text.title.as_deref(),
                )
                .unwrap_or_default();
                self.write(format!("{prefix}{line}\n").as_bytes(), true)
            }
            Format::Csv
            | Format::Iperf3Json
            | Format::Iperf3JsonStream
            | Format::Iperf3JsonStreamFull => self.write(format!("{line}\n").as_bytes(), false),
            Format::Json => {
                self.held.push(line.to_string());
                true
            }
            Format::JsonLines => true,
        }
    }

    /// One `--json-lines` event on stdout.
    fn event(&mut self, event: &LabEvent) -> bool {
        match serde_json::to_string(event) {
            Ok(json) => self.write(format!("{json}\n").as_bytes(), true),
            Err(e) => {
                note(&format!(
                    "pinperf lab: the lab's event was not written: {e}"
                ));
                true
            }
        }
    }

    /// Writes and flushes `bytes`; false once nobody reads. A closed pipe is not an error
    /// and is not reported (ripgrep); another write error is reported once.
    fn write(&mut self, bytes: &[u8], stdout: bool) -> bool {
        if self.output.closed() {
            return false;
        }
        let written = if stdout {
            let mut out = self.sink.0.lock();
            out.write_all(bytes).and_then(|()| out.flush())
        } else {
            io::stderr().lock().write_all(bytes)
        };
        let ok = self.output.check(written);
        if let Some(e) = self.write_error() {
            note(&format!("pinperf lab: {e}"));
        }
        ok
    }

    /// A write error other than a closed pipe, which fails the run (exit 1).
    pub fn write_error(&self) -> Option<crate::error::Error> {
        self.output
            .error()
            .filter(|e| !matches!(e, crate::error::Error::OutputClosed))
            .or_else(|| {
                self.files_error
                    .as_ref()
                    .map(|e| crate::error::Error::Test(e.to_string()))
            })
    }
}

/// A warning or note line of the lab (the ones `-J` keeps on stderr).
fn is_warning(line: &str) -> bool {
    line.starts_with("# lab: warning: ") || line.starts_with("# lab: note: ")
}

/// The client's `-J` output `doc` with `"lab": lab` as its last member, the client's text
/// (and so the order of its members) kept as it was; a one-line document is pretty-printed
/// first. None when `doc` is not one JSON object (or already has `lab`).
fn with_lab(doc: &[u8], lab: &impl Serialize) -> Option<String> {
    let parsed: serde_json::Value = serde_json::from_slice(doc).ok()?;
    let members = parsed.as_object()?;
    if members.contains_key("lab") {
        return None;
    }
    let text = std::str::from_utf8(doc).ok()?.trim();
    let pretty;
    let text = if text.contains('\n') {
        text
    } else {
        pretty = serde_json::to_string_pretty(&parsed).ok()?;
        &pretty
    };
    let body = text.strip_suffix('}')?.trim_end();
    let comma = if members.is_empty() { "" } else { "," };
    // Pretty JSON has no raw newline inside a string: each one starts a line to indent.
    let lab = serde_json::to_string_pretty(lab)
        .ok()?
        .replace('\n', "\n  ");
    let out = format!("{body}{comma}\n  \"lab\": {lab}\n}}\n");
    serde_json::from_str::<serde_json::Value>(&out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::saved::lab::SavedLab;

    /// A part an older lab wrote without a later field is left out, not the rest; a
    /// document without `removed` says nothing of teardown (it said "removed nothing").
    #[test]
    fn a_saved_lab_missing_a_field_keeps_its_other_lines() {
        let relay = |d| serde_json::to_value(LabRelay::new(d, &RelayStats::default())).unwrap();
        let mut forward = relay(Direction::Forward);
        forward.as_object_mut().unwrap().remove("late_after_ns");
        let lab = serde_json::json!({
            "path": null,
            "forward": forward,
            "return": relay(Direction::Return),
            "tun_drops": {"client": 0, "server": 0},
            "warnings": [],
        });
        let after = SavedLab::read(&lab).after();
        assert!(after[0].starts_with("# lab relay return"), "{after:?}");
        assert!(after[1].starts_with("# lab: TUN device drops"), "{after:?}");
        assert_eq!(after.len(), 2, "{after:?}");
    }

    const RATE: u64 = 200_000_000;

    #[test]
    fn late_deliveries_are_noise_up_to_one_in_a_thousand() {
        assert_eq!(
            late_warning(10, 10_000, 3_000_000, Some(1e8), Ceiling::path(RATE)),
            None
        );
        assert_eq!(late_warning(0, 0, 0, None, Ceiling::path(RATE)), None);
    }

    #[test]
    fn late_deliveries_in_a_run_at_the_path_s_rate_only_get_a_note() {
        let w =
            late_warning(30, 10_000, 2_470_000, Some(185e6), Ceiling::path(RATE)).expect("said");
        assert_eq!(
            w.message,
            "30 of 10000 packets were delivered more than 1 ms late (worst 2.5 ms), but the \
             run reached 92 % of the path's 200 Mbit/s: the path set the pace"
        );
        assert_eq!(w.line, Some(format!("# lab: note: {}", w.message)));
        // Exactly the share: still the path's pace.
        let at = late_warning(30, 10_000, 0, Some(180e6), Ceiling::path(RATE)).expect("said");
        assert!(at.message.ends_with("the path set the pace"), "{at:?}");
    }

    /// A run held below the path by its own -b, by --loss, a blackout or slow start is not
    /// the relay's doing: its late deliveries get a note (or nothing), not a warning.
    #[test]
    fn late_deliveries_in_a_run_held_back_by_something_else_only_get_a_note() {
        assert_eq!(
            late_warning(9, 160, 3_000_000, Some(1e6), Ceiling::path(RATE)),
            None
        );
        let by_b = Ceiling {
            bps: 20_000_000,
            set_by: Some("-b"),
            ..Ceiling::path(RATE)
        };
        let w = late_warning(14, 5_000, 1_500_000, Some(19.6e6), by_b).expect("said");
        assert_eq!(
            w.message,
            "14 of 5000 packets were delivered more than 1 ms late (worst 1.5 ms), but the \
             run reached 98 % of -b's 20 Mbit/s: -b set the pace"
        );
        let lossy = Ceiling {
            other: Some("--loss"),
            ..Ceiling::path(RATE)
        };
        let w = late_warning(30, 10_000, 2_470_000, Some(50e6), lossy).expect("said");
        assert_eq!(
            w.line.as_deref(),
            Some(
                "# lab: note: 30 of 10000 packets were delivered more than 1 ms late (worst \
                 2.5 ms); with --loss, the run's rate does not show whether that limited it"
            )
        );
    }

    #[test]
    fn late_deliveries_below_the_path_s_rate_blame_the_relay() {
        let strong = "the relay delivered 30 packets more than 1 ms late: it, not the \
                      emulated path, limited this run; lower --rate or use a larger --mtu";
        for received in [Some(179e6), Some(0.0), None] {
            let w =
                late_warning(30, 10_000, 2_470_000, received, Ceiling::path(RATE)).expect("said");
            assert_eq!(w.message, strong, "{received:?}");
            assert_eq!(w.line, Some(format!("# lab: warning: {strong}")));
        }
        // -M, not the MTU, sets the packets' size then.
        let capped = Ceiling {
            mss: Some(1000),
            ..Ceiling::path(RATE)
        };
        let w = late_warning(30, 10_000, 2_470_000, None, capped).expect("said");
        assert!(
            w.message
                .ends_with("lower --rate or raise -M 1000 (it sets the packets' size, not --mtu)"),
            "{}",
            w.message
        );
    }

    #[test]
    fn the_lab_member_goes_last_and_keeps_the_client_s_document_as_it_was() {
        let client = "{\n  \"start\": {\n    \"b\": 1,\n    \"a\": [\n      2\n    ]\n  },\n  \
                      \"end\": null,\n  \"error\": \"x\\ny\"\n}\n";
        let lab = serde_json::json!({ "path": { "mtu": 9000 }, "warnings": ["w"] });
        let doc = with_lab(client.as_bytes(), &lab).expect("an object");
        let (kept, added) = doc.split_at(client.trim_end().len() - 2);
        assert_eq!(kept, &client[..kept.len()], "{doc}");
        assert_eq!(
            added,
            ",\n  \"lab\": {\n    \"path\": {\n      \"mtu\": 9000\n    },\n    \
             \"warnings\": [\n      \"w\"\n    ]\n  }\n}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["lab"]["path"]["mtu"], 9000);
        assert_eq!(v["error"], "x\ny");
    }

    #[test]
    fn a_one_line_document_gets_lab_and_anything_else_is_left_alone() {
        let lab = serde_json::json!({ "removed": [] });
        let doc = with_lab(br#"{"error":"refused"}"#, &lab).expect("an object");
        assert_eq!(
            doc,
            "{\n  \"error\": \"refused\",\n  \"lab\": {\n    \"removed\": []\n  }\n}\n"
        );
        assert_eq!(
            with_lab(b"{}", &lab).as_deref(),
            Some("{\n  \"lab\": {\n    \"removed\": []\n  }\n}\n")
        );
        for not_one_object in [&b""[..], b"[1]", b"{\"end\":", b"{} {}", b"{\"lab\":1}"] {
            assert_eq!(with_lab(not_one_object, &lab), None);
        }
    }

    #[test]
    fn lab_events_have_the_client_s_shape() {
        let end = LabEnd {
            tun_drops: Ends {
                client: Some(0),
                server: None,
            },
            warnings: vec![],
            removed: vec!["pinperf-lab-1-server".into()],
        };
        assert_eq!(
            serde_json::to_string(&LabEvent::End(&end)).unwrap(),
            r#"{"event":"lab_end","data":{"tun_drops":{"client":0,"server":null},"warnings":[],"removed":["pinperf-lab-1-server"]}}"#
        );
    }
}
