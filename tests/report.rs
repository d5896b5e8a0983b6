//! End-to-end tests of what the report says: totals that span the test however
//! the data moved, stalls named, the single engine's CPU as measured, and the text
//! format's headings. The real binary over loopback; no speed thresholds.

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pinperf::report::format::json::{Document, Event};
use pinperf::report::model::{SideTotal, StreamRow, Summary};
use util::{Server, pinperf};

const LIMIT: Duration = Duration::from_secs(30);

/// Sends `signal` (`STOP`, `CONT`) to `child` with kill(1): tests keep off `unsafe`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {}", child.id());
}

/// Runs pinperf with `--json-lines` appended, stops it for `pause` right after its first
/// interval event, and returns every event and its stderr.
fn paused_after_first_interval(args: &[&str], pause: Duration) -> (Vec<Event>, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json-lines");
    let mut child = util::spawn(&all);
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + LIMIT;
    let first = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let interval = line.contains(r#""event":"interval""#);
                lines.push(line);
                if interval {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    if first {
        signal(&child, "STOP");
        std::thread::sleep(pause);
        signal(&child, "CONT");
    }
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() && started.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("collect output");
    reader.join().expect("reader");
    lines.extend(rx.try_iter());
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let explain = format!(
        "\ncommand: pinperf {}\nstatus: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{stderr}",
        all.join(" "),
        output.status,
        lines.join("\n")
    );
    assert!(first, "no interval event{explain}");
    assert_eq!(output.status.code(), Some(0), "{explain}");
    let events = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}{explain}")))
        .collect();
    (events, explain)
}

fn end_of(events: &[Event], explain: &str) -> Summary {
    events
        .iter()
        .find_map(|e| match e {
            Event::End(s) => Some((**s).clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no end event{explain}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs())
}

/// Every total (each stream, the sum, both sides) spans `start..end` and its rate is its
/// bytes over that span.
fn assert_spans(s: &Summary, start: f64, at_least: f64, explain: &str) {
    let end = s.sum.end;
    assert!(end - start >= at_least, "span {start}..{end}{explain}");
    let check = |what: &str, row_start: f64, row_end: f64, seconds: f64, bytes: u64, bps: f64| {
        assert_eq!((row_start, row_end), (start, end), "{what} span{explain}");
        assert!(
            close(seconds, end - start),
            "{what} seconds {seconds}{explain}"
        );
        let want = bytes as f64 * 8.0 / (end - start);
        assert!(
            close(bps, want),
            "{what}: {bps} b/s, bytes say {want}{explain}"
        );
    };
    let sum = &s.sum;
    check(
        "sum",
        sum.start,
        sum.end,
        sum.seconds,
        sum.bytes,
        sum.bits_per_second,
    );
    for r in &s.streams {
        let StreamRow {
            start,
            end,
            seconds,
            bytes,
            bits_per_second,
            ..
        } = *r;
        check(
            &format!("stream {}", r.stream),
            start,
            end,
            seconds,
            bytes,
            bits_per_second,
        );
    }
    for (what, t) in [("sum_sent", &s.sum_sent), ("sum_received", &s.sum_received)] {
        let SideTotal {
            start,
            end,
            seconds,
            bytes,
            bits_per_second,
            ..
        } = *t;
        check(what, start, end, seconds, bytes, bits_per_second);
    }
}

/// Issue 15: a paused test (`--loopback`: client and server stop together) keeps its
/// totals over the whole test, rates equal to bytes over that span, and names the stall.
#[test]
fn a_paused_test_is_averaged_over_the_test_and_the_stall_is_named() {
    let (events, explain) = paused_after_first_interval(
        &["--loopback", "-t", "3", "-i", "0.5"],
        Duration::from_millis(1500),
    );
    let s = end_of(&events, &explain);
    assert_spans(&s, 0.0, 3.0, &explain);
    assert!(s.reconciled(), "{explain}");
    assert!(
        s.diagnosis
            .iter()
            .any(|l| l.starts_with("diagnosis: no data moved from ")
                && l.contains("the path stalled")),
        "{:?}{explain}",
        s.diagnosis
    );
}

/// Issue 15: a client paused past its planned end (the server running on) printed
/// `#(**) 0.000 1.307 40119.231`: the seconds that moved data, not the test. The total
/// spans to the planned end, in JSON and in the text's `#(**)` line.
#[test]
fn a_client_paused_past_the_end_is_averaged_over_the_test() {
    let server = Server::start(&[]);
    let port = server.port_arg();
    let (events, explain) = paused_after_first_interval(
        &["-c", "127.0.0.1", "-p", &port, "-t", "2", "-i", "0.5"],
        Duration::from_millis(2300),
    );
    let s = end_of(&events, &explain);
    assert_spans(&s, 0.0, 2.0, &explain);
    assert!(
        s.diagnosis
            .iter()
            .any(|l| l.starts_with("diagnosis: no data moved ")),
        "{:?}{explain}",
        s.diagnosis
    );
}

/// With `-O`, the totals start at the end of the omitted seconds and still reach `-O + -t`.
#[test]
fn omitted_seconds_start_the_span() {
    let run = pinperf(
        &["--loopback", "-t", "1", "-O", "0.5", "-i", "0.25", "-J"],
        LIMIT,
    );
    run.assert_ok();
    let doc: Document =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    let s = doc.end.expect("end");
    assert_spans(&s, 0.5, 1.0, &run.explain());
}

/// Issue 15: `--engine single` divided its one thread's CPU evenly among the streams. The
/// report lists what was measured: one `stream-mux` thread on the sending side (the
/// receiving side still has a thread per stream), in JSON and in text.
#[test]
fn the_single_engine_reports_its_one_thread() {
    let args = ["--loopback", "--engine", "single", "-P", "2", "-t", "1"];
    let run = pinperf(&[&args[..], &["-J"]].concat(), LIMIT);
    run.assert_ok();
    let doc: Document =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    let cpu = doc.end.expect("end").cpu.expect("cpu");
    let local: Vec<&str> = cpu.local.streams.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(local, ["stream-mux"], "{}", run.explain());
    assert!(cpu.local.streams[0].total_us() > 0, "{}", run.explain());
    let remote = cpu.remote.expect("remote cpu");
    let remote: Vec<&str> = remote.streams.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(remote, ["stream-0", "stream-1"], "{}", run.explain());

    let run = pinperf(&args, LIMIT);
    run.assert_ok();
    let text = run.stdout();
    let local = text
        .lines()
        .find(|l| l.starts_with("# CPU local threads (senders): "))
        .unwrap_or_else(|| panic!("no local threads line{}", run.explain()));
    assert!(
        local.starts_with("# CPU local threads (senders): stream-mux ")
            && !local.contains("stream-1"),
        "{local}"
    );
}

/// `pinperf report` of the saved documents in `tests/fixtures/saved/` renders each format
/// exactly as recorded in `expected/`, so a refactor of the reporter or its formatters that
/// changes one byte fails here. `PINPERF_BLESS=1` records the current output instead.
#[test]
fn saved_documents_render_byte_for_byte_as_recorded() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/saved");
    let bless = std::env::var_os("PINPERF_BLESS").is_some();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 9, "saved documents: {names:?}");
    let mut differ = Vec::new();
    for name in &names {
        for format in ["text", "csv", "json", "iperf3-json"] {
            if name == "compare" && format == "iperf3-json" {
                continue; // a comparison has no iperf3 shape
            }
            let doc = dir.join(format!("{name}.json"));
            let doc = doc.to_str().expect("utf-8 path");
            let run = pinperf(&["report", "--format", format, doc], LIMIT);
            run.assert_ok();
            let expected = dir.join("expected").join(format!("{name}.{format}"));
            if bless {
                std::fs::write(&expected, &run.output.stdout).expect("bless");
            } else if std::fs::read(&expected).ok().as_deref() != Some(&run.output.stdout[..]) {
                differ.push(format!("{name}.{format}"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "these renderings differ from tests/fixtures/saved/expected/ (diff them with \
         `pinperf report --format F tests/fixtures/saved/NAME.json`): {differ:?}"
    );
}
