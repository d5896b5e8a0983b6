//! End-to-end tests of the habits users bring: iperf3's text flags (`-f`,
//! `-T`, `--timestamps`, `-V`, `--logfile`, `--forceflush`, `--get-server-output`), shell
//! completions and the man page. The real binary over
//! loopback; numbers are checked against the run's own saved document.

mod util;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use pinperf::report::format::json::Document;
use util::{Spawned, arg, pinperf, saved, scratch, wait_until};

const LIMIT: Duration = Duration::from_secs(30);

/// The rate column of the `#(**)` line.
fn total_rate(text: &str) -> f64 {
    let line = text.lines().find(|l| l.contains("#(**)")).expect("a total");
    let after = &line[line.find("#(**)").unwrap() + 5..];
    after.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// `-f g` prints Gbit/s (decimal, as iperf3); `report -f M` the same run in MiB/s
/// (binary bytes); both against the saved bits per second.
#[test]
fn rate_units_follow_iperf3s_f() {
    let dir = scratch("rate_units");
    let json = dir.join("r.json");
    let run = pinperf(
        &[
            "--loopback",
            "-t",
            "0.5",
            "-f",
            "g",
            "--json-file",
            arg(&json),
        ],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    assert!(text.contains(" Gb/s  RTT, ms:"), "{}", run.explain());
    let bps = saved(&json).end.expect("totals").sum.bits_per_second;
    assert_eq!(total_rate(&text), (bps / 1e9 * 1000.0).round() / 1000.0);
    let mib = pinperf(&["report", arg(&json), "-f", "M"], LIMIT);
    mib.assert_ok();
    assert!(mib.stdout().contains(" MiB/s  RTT, ms:"));
    let want = bps / 8.0 / 1048576.0;
    assert!((total_rate(&mib.stdout()) - want).abs() < 0.001, "{want}");
    let bad = pinperf(&["--loopback", "-f", "x"], LIMIT);
    assert_eq!(bad.code(), Some(2), "{}", bad.explain());
}

/// `-T` starts every text line with "TITLE:  " (iperf3's shape) after `--timestamps`'
/// time, `fgrep '**'` still gives one line, and `-J`'s document carries the title.
#[test]
fn title_and_timestamps_prefix_every_line() {
    let run = pinperf(
        &[
            "--loopback",
            "-t",
            "0.5",
            "-T",
            "lab 1",
            "--timestamps=%H:%M:%S ",
        ],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    assert!(text.lines().count() > 10, "{}", run.explain());
    for line in text.lines() {
        let (time, rest) = line.split_at(9);
        let clock: Vec<&str> = time.trim_end().split(':').collect();
        assert!(
            clock.len() == 3
                && clock
                    .iter()
                    .all(|c| c.len() == 2 && c.parse::<u8>().is_ok()),
            "{line}"
        );
        assert!(
            rest.starts_with("lab 1:  #") || rest.starts_with("lab 1:  ("),
            "{line}"
        );
    }
    assert_eq!(text.lines().filter(|l| l.contains("**")).count(), 1);

    // The default format is "%c ": the date and time, as iperf3's.
    let run = pinperf(&["--loopback", "-t", "0.3", "--timestamps"], LIMIT);
    run.assert_ok();
    for line in run.stdout().lines() {
        let fields: Vec<&str> = line.split_whitespace().take(5).collect();
        assert!(
            fields.len() == 5 && fields[3].matches(':').count() == 2,
            "{line}"
        );
    }

    let run = pinperf(&["--loopback", "-t", "0.3", "-T", "lab 1", "-J"], LIMIT);
    run.assert_ok();
    let doc: Document = serde_json::from_slice(&run.output.stdout).expect("a document");
    assert_eq!(doc.title.as_deref(), Some("lab 1"));
}

/// `-V` adds each stream's details under its rows: what the sender wrote (equal to the
/// saved document's sent bytes), srtt and the rest of `TCP_INFO`.
#[test]
fn verbose_adds_each_streams_details() {
    let dir = scratch("verbose");
    let json = dir.join("r.json");
    let run = pinperf(
        &[
            "--loopback",
            "-P",
            "2",
            "-t",
            "0.5",
            "-V",
            "--json-file",
            arg(&json),
        ],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    let end = saved(&json).end.expect("totals");
    for s in &end.streams {
        let want = format!("#   ({:>2}) sent {}B, srtt ", s.stream, s.sent_bytes);
        assert!(text.contains(&want), "{want}\n{}", run.explain());
    }
    let plain = pinperf(&["report", arg(&json)], LIMIT);
    assert!(!plain.stdout().contains(" sent "), "only with -V");
}

/// `--logfile` appends the report to the file (stdout stays empty), rows as they come:
/// the first interval is in the file while the test still runs (`--forceflush`).
#[test]
fn logfile_appends_live() {
    let dir = scratch("logfile");
    let log = dir.join("run.log");
    std::fs::write(&log, "earlier\n").unwrap();
    let mut run = Spawned::start(&[
        "--loopback",
        "-t",
        "1.5",
        "-i",
        "0.25",
        "--logfile",
        arg(&log),
        "--forceflush",
    ]);
    wait_until(
        "the first interval row in the logfile",
        Duration::from_secs(10),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines().any(|l| l.starts_with("( 0)")).then_some(())
        },
        || std::fs::read_to_string(&log).unwrap_or_default(),
    );
    assert!(run.is_running(), "the row came before the test ended");
    let done = run.finish(LIMIT);
    done.assert_ok();
    assert_eq!(done.stdout(), "", "the report went to the file");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("earlier\n# pinperf"), "appended: {text}");
    assert_eq!(text.lines().filter(|l| l.contains("**")).count(), 1);
    let bad = pinperf(&["--loopback", "--logfile", "/nonexistent/x.log"], LIMIT);
    assert_eq!(bad.code(), Some(1));
    assert!(bad.stderr().contains("--logfile /nonexistent/x.log: open"));
}

/// `-s --logfile` appends the server's log to the file (stderr says nothing), and
/// `--timestamps` and `-T` start each text line, as iperf3 -s's; JSON lines take no prefix.
#[test]
fn a_server_logs_to_its_logfile_with_iperf3s_prefixes() {
    let dir = scratch("server-logfile");
    let log = dir.join("server.log");
    std::fs::write(&log, "earlier\n").unwrap();
    let mut server = Spawned::start(&[
        "-s",
        "-1",
        "-B",
        "127.0.0.1",
        "-p",
        "0",
        "--logfile",
        arg(&log),
        "--timestamps=[%Y] ",
        "-T",
        "srv",
        "-J",
    ]);
    let listening = wait_until(
        "the listening line in the logfile",
        Duration::from_secs(10),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .find(|l| l.contains("listening on "))
                .map(str::to_string)
        },
        || std::fs::read_to_string(&log).unwrap_or_default(),
    );
    let port = util::listening_port(&listening)
        .unwrap_or_else(|| panic!("no port in {listening:?}"))
        .to_string();
    pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "0.3"], LIMIT).assert_ok();
    let done = server.finish(LIMIT);
    done.assert_ok();
    assert_eq!(done.stderr(), "", "the log went to the file");
    let text = std::fs::read_to_string(&log).unwrap();
    let year = text.lines().nth(1).and_then(|l| l.get(1..5)).unwrap_or("");
    assert!(year.parse::<u32>().is_ok_and(|y| y >= 2024), "{text}");
    let prefix = format!("[{year}] srv:  pinperf: ");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "earlier", "appended: {text}");
    assert!(lines.len() >= 4, "listening, test, done: {text}");
    for line in &lines[1..] {
        assert!(line.starts_with(&prefix), "{line:?} in {text}");
    }
    assert!(text.contains("done, received "), "{text}");
    // iperf3 -s's -J is taken (a unit file moved over still starts) and said ignored.
    assert!(
        text.contains("pinperf: -J ignored: iperf3 -s takes it"),
        "{text}"
    );
    // A JSON line stays one object: no prefix to give it.
    let bad = pinperf(&["-s", "--log-format", "json", "-T", "srv"], LIMIT);
    assert_eq!(bad.code(), Some(2), "{}", bad.explain());
    assert!(
        bad.stderr()
            .contains("-T/--title: starts the server's text log lines")
    );
}

/// A report or picture file that fills up fails the run with the flag and the file named
/// (`--logfile /dev/full: No space left on device`), not a bare "write the report".
#[test]
fn a_full_output_file_is_named_by_its_flag() {
    if !std::path::Path::new("/dev/full").exists() {
        util::skipped(
            "a_full_output_file_is_named_by_its_flag",
            "no /dev/full here",
        );
        return;
    }
    let dir = scratch("full-output");
    let svg = dir.join("full.svg");
    std::os::unix::fs::symlink("/dev/full", &svg).expect("symlink");
    for (flag, path) in [("--logfile", "/dev/full"), ("--plot", arg(&svg))] {
        let run = pinperf(&["--loopback", "-t", "0.3", "-i", "0.1", flag, path], LIMIT);
        assert_eq!(run.code(), Some(1), "{flag}: {}", run.stderr());
        let said = format!("{flag} {path}: No space left on device");
        assert!(run.stderr().contains(&said), "{flag}: {}", run.stderr());
    }
}

/// `--get-server-output`: a separate server's own lines about the test (its start and end
/// log lines, and what its stream threads counted per interval) after the client's
/// totals in text and as `server_output_text` in `-J`; its byte counts are the report's.
#[test]
fn get_server_output_brings_the_servers_own_lines() {
    let server = util::Server::start(&[]);
    let port = server.port_arg();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "1",
        "-P",
        "2",
        "--get-server-output",
    ];
    let run = pinperf(&args, LIMIT);
    run.assert_ok();
    let text = run.stdout();
    let at = text
        .find("# server output (--get-server-output):")
        .unwrap_or_else(|| panic!("no server output{}", run.explain()));
    assert!(
        text[..at].contains("#(**)"),
        "after the totals{}",
        run.explain()
    );
    let server_lines: Vec<&str> = text[at..].lines().skip(1).collect();
    assert!(
        server_lines[0].starts_with("#   pinperf: test from 127.0.0.1:"),
        "{text}"
    );
    assert!(
        server_lines.last().unwrap().contains(": done, received "),
        "{text}"
    );
    // Its per-interval counts add up to what the report says the receiver read.
    let counted: u64 = server_lines
        .iter()
        .filter(|l| l.starts_with("#   stream-"))
        .filter_map(|l| {
            l.split(" received ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    let (_, received) = util::byte_totals(&text).expect("a bytes line");
    assert_eq!(counted, received, "{text}");

    let mut json = args.to_vec();
    json.push("-J");
    let run = pinperf(&json, LIMIT);
    run.assert_ok();
    let doc: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    let server_text = doc["server_output_text"].as_str().unwrap_or_default();
    assert!(
        server_text.contains(": done, received "),
        "{}",
        run.explain()
    );
    // Without the flag the document has no such member.
    let run = pinperf(&["--loopback", "-t", "0.5", "-J"], LIMIT);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    assert!(doc.get("server_output_text").is_none());
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Feeds `input` to `cmd`'s stdin; its status and stdout.
fn pipe(cmd: &mut Command, input: &[u8]) -> (bool, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `pinperf completions bash | bash -n` passes and the script completes pinperf's own
/// flags and subcommands; zsh and fish scripts are checked by their shells when present.
#[test]
fn completion_scripts_parse_in_their_shells() {
    let bash = pinperf(&["completions", "bash"], LIMIT);
    bash.assert_ok();
    let script = bash.stdout();
    for word in ["--plot", "--logfile", "report", "completions"] {
        assert!(script.contains(word), "{word}");
    }
    let (ok, _, err) = pipe(Command::new("bash").arg("-n"), script.as_bytes());
    assert!(ok, "bash -n: {err}");
    // Broken on purpose, to show `bash -n` would catch a bad script.
    let (ok, _, _) = pipe(Command::new("bash").arg("-n"), b"_pinperf() { if; }");
    assert!(!ok);
    for (shell, plot, check) in [
        ("zsh", "--plot", vec!["zsh", "-n"]),
        ("fish", "-l plot", vec!["fish", "--no-execute"]),
    ] {
        let run = pinperf(&["completions", shell], LIMIT);
        run.assert_ok();
        assert!(run.stdout().contains(plot), "{shell}");
        if !have(check[0]) {
            util::skipped(
                "completion_scripts_parse_in_their_shells",
                &format!("no {shell} here"),
            );
            continue;
        }
        let (ok, _, err) = pipe(
            Command::new(check[0]).args(&check[1..]),
            run.output.stdout.as_slice(),
        );
        assert!(ok, "{shell}: {err}");
    }
}

/// `pinperf man | man -l -` renders a page with the name, the options and the
/// subcommands.
#[test]
fn the_man_page_renders() {
    let page = pinperf(&["man"], LIMIT);
    page.assert_ok();
    let roff = page.stdout();
    assert!(roff.starts_with(".ie \\n(.g .ds Aq"), "{roff:.200}");
    if !have("man") {
        util::skipped(
            "the_man_page_renders",
            "no man(1) here (apt-get install man-db)",
        );
        return;
    }
    let (ok, text, err) = pipe(
        Command::new("man")
            .args(["-l", "-"])
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100"),
        roff.as_bytes(),
    );
    assert!(ok, "man -l -: {err}");
    for want in [
        "NAME",
        "pinperf",
        "SUBCOMMANDS",
        "--plot",
        "--timestamps",
        "completions",
    ] {
        assert!(
            text.contains(want),
            "{want} in the rendered page:\n{text:.2000}"
        );
    }
}
