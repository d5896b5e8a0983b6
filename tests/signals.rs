//! Stop signals end a client run with what it measured: SIGINT, SIGTERM or SIGHUP mid-test
//! stops the test, prints the rows (and with text, the totals so far) in every format, says
//! why on stderr and ends by the signal (status 128 + it, so a shell loop stops too); the server hears why; `compare` keeps its
//! finished rows; `lab -J` keeps its document and still leaves no namespace behind.
//!
//! Each test signals only once the run has shown it is under way: the first interval row
//! on stdout where the format streams one, else (`-J` prints once, at its end) the run's
//! `stream-0` thread. The tests run one at a time: each keeps both cores busy.

mod util;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use util::{bin, rows, threads};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Longest any run here may take after its signal before the test calls it stuck.
const STOP_LIMIT: Duration = Duration::from_secs(5);
/// Longest a run may take to show that it is under way.
const START_LIMIT: Duration = Duration::from_secs(10);

/// A pinperf child whose stdout lines are collected (and announced) as they arrive.
struct Watched {
    args: Vec<String>,
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
    started: Instant,
}

/// What a watched run ended with.
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// From the signal to the exit.
    stop: Duration,
    explain: String,
}

impl Watched {
    fn spawn(args: &[&str]) -> Watched {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        Watched::start(cmd, args)
    }

    /// Starts `cmd` with the stop signals at their default disposition, whatever this
    /// process inherited (a harness started in the background ignores SIGINT, and pinperf
    /// keeps ignoring what it was started ignoring).
    fn start(mut cmd: Command, args: &[&str]) -> Watched {
        util::default_stop_signals(&mut cmd);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pinperf");
        let out = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr piped");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        Watched {
            args: args.iter().map(|s| s.to_string()).collect(),
            child,
            lines,
            stdout: Vec::new(),
            stderr,
            started: Instant::now(),
        }
    }

    /// Reads stdout until a line satisfies `ready`; panics (killing the child) after
    /// [`START_LIMIT`] or at the end of stdout.
    fn wait_line(&mut self, what: &str, ready: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = ready(&line);
                    self.stdout.push(line);
                    if hit {
                        return;
                    }
                }
                Err(e) => self.give_up(&format!("no {what} on stdout ({e:?})")),
            }
        }
    }

    /// Waits until the child runs a thread named `name` (its streams exist: their test
    /// may still be in its handshake).
    fn wait_thread(&mut self, name: &str) {
        let deadline = Instant::now() + START_LIMIT;
        while !threads(self.child.id()).iter().any(|(n, _)| n == name) {
            if Instant::now() > deadline || self.child.try_wait().ok().flatten().is_some() {
                self.give_up(&format!("no thread {name}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the child has no thread named `name` (a run of it ended).
    fn wait_no_thread(&mut self, name: &str) {
        let deadline = Instant::now() + START_LIMIT;
        while threads(self.child.id()).iter().any(|(n, _)| n == name) {
            if Instant::now() > deadline {
                self.give_up(&format!("thread {name} never ended"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn give_up(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "pinperf {}: {why} after {:?}; stdout so far:\n{}",
            self.args.join(" "),
            self.started.elapsed(),
            self.stdout.join("\n")
        );
    }

    /// Sends `sig` to the child, waits for it to exit (at most [`STOP_LIMIT`]) and
    /// collects everything it wrote.
    fn stop_with(self, sig: i32) -> Ended {
        self.stop_with_twice(sig, None)
    }

    /// [`Watched::stop_with`], then `sig` again `again` after it.
    fn stop_with_twice(mut self, sig: i32, again: Option<Duration>) -> Ended {
        let at = self.started.elapsed();
        send(self.child.id(), sig);
        let signalled = Instant::now();
        if let Some(gap) = again {
            std::thread::sleep(gap);
            send(self.child.id(), sig);
        }
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for pinperf") {
                break status;
            }
            if signalled.elapsed() > STOP_LIMIT {
                self.give_up(&format!("still running {STOP_LIMIT:?} after signal {sig}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let stop = signalled.elapsed();
        self.stdout.extend(self.lines.iter());
        let stdout = self.stdout.join("\n");
        let stderr = self.stderr.join().unwrap_or_default();
        let explain = format!(
            "\ncommand: pinperf {}\nsignal {sig} at {at:?}; {status:?} {stop:?} later\n\
             --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            self.args.join(" ")
        );
        Ended {
            status,
            stdout,
            stderr,
            stop,
            explain,
        }
    }
}

impl Ended {
    /// Exited (not killed) with `code`, within [`STOP_LIMIT`], naming the signal on stderr.
    fn assert_stopped(&self, code: i32, name: &str) {
        // It printed, then ended by the signal itself (the shell's status is 128 + it),
        // so a shell loop around it stops as well.
        assert_eq!(
            self.status.signal(),
            Some(code - 128),
            "ended by the signal after printing (exit code {:?}){}",
            self.status.code(),
            self.explain
        );
        let reason = format!("pinperf: interrupted by {name} ");
        assert!(
            self.stderr.lines().any(|l| l.starts_with(&reason)),
            "stderr names the signal: {reason:?}{}",
            self.explain
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.explain);
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}{}", self.explain))
    }
}

/// Sends `sig` to `pid` at once.
#[allow(unsafe_code)]
fn send(pid: u32, sig: i32) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill() takes plain integers and touches no memory of ours; `pid` is our own
    // child, not yet waited for, so the number cannot name another process.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

fn is_first_row(line: &str) -> bool {
    line.starts_with("( 0)")
}

/// Text: the rows so far, a `#(**)` line over what the receiver reported, the reason.
fn text_run_stopped_by(sig: i32, name: &str, code: i32, way: &[&str]) {
    let _one = ONE_AT_A_TIME.lock();
    let mut args = vec!["--loopback", "-t", "10"];
    args.extend_from_slice(way);
    let mut run = Watched::spawn(&args);
    run.wait_line("first row", is_first_row);
    let end = run.stop_with(sig);
    end.assert_stopped(code, name);
    let rows = rows(&end.stdout);
    let live: Vec<_> = rows.iter().filter(|r| !r.summary).collect();
    assert!(!live.is_empty(), "interval rows{}", end.explain);
    let totals: Vec<_> = rows.iter().filter(|r| r.label == "**").collect();
    assert_eq!(totals.len(), 1, "one #(**) line{}", end.explain);
    let last = live.last().map_or(0.0, |r| r.end);
    assert!(
        totals[0].end <= last + 1e-9 && totals[0].end > 0.0 && totals[0].mbps > 0.0,
        "the totals cover the rows received, nothing later{}",
        end.explain
    );
    // The live line names the span the totals cover, the same one (review: under -R it
    // said "up to 2.000 s" over totals to 2.345 s).
    let said = end
        .stdout
        .lines()
        .find(|l| l.contains(&format!("interrupted by {name}")))
        .unwrap_or_else(|| panic!("the report says it was interrupted{}", end.explain));
    let up_to = said
        .split_once("rows up to ")
        .and_then(|(_, t)| t.split(' ').next())
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("the span in {said:?}{}", end.explain));
    assert!(
        (up_to - totals[0].end).abs() < 0.0015,
        "{way:?}: said up to {up_to} s, totals end at {}{}",
        totals[0].end,
        end.explain
    );
    eprintln!(
        "{name}: exit {code} {:?} after the signal, {} rows, {}",
        end.stop,
        live.len(),
        end.stdout
            .lines()
            .find(|l| l.starts_with("#(**)"))
            .unwrap_or("")
    );
}

#[test]
fn sigint_mid_test_prints_rows_and_totals_so_far_and_exits_130() {
    text_run_stopped_by(libc::SIGINT, "SIGINT", 130, &[]);
}

/// Stopped before the receiver's first row: no totals, and the live line says why without
/// blaming `-O`, which was not given (it said "it stopped within -O's omitted seconds").
#[test]
fn sigint_before_the_first_row_says_so_and_names_no_omit() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&["--loopback", "-t", "10", "-i", "5"]);
    // Past the handshake (a signal 12 ms in, with the threads already there, was
    // "interrupted during the handshake") and the placement probe before it: the header
    // is out; before the first row at 5 s.
    run.wait_line("header", |l| l.starts_with("#(ID)"));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    assert!(
        end.stdout
            .contains("; no totals: it stopped before the receiver's first row"),
        "{}",
        end.explain
    );
    assert!(!end.stdout.contains("-O"), "{}", end.explain);
    assert!(!end.stdout.contains("#(**)"), "{}", end.explain);
}

/// GNU `timeout` signals the process and then its process group: two SIGTERMs a moment
/// apart are one stop, which prints what was measured (the second ended the run at once,
/// without totals, 2 runs in 4).
#[test]
fn two_signals_a_moment_apart_are_one_stop() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&["--loopback", "-t", "10"]);
    run.wait_line("first row", is_first_row);
    let end = run.stop_with_twice(libc::SIGTERM, Some(Duration::from_millis(20)));
    end.assert_stopped(143, "SIGTERM");
    assert!(end.stdout.contains("#(**)"), "{}", end.explain);
    assert!(
        !end.stderr.contains("second stop signal"),
        "{}",
        end.explain
    );
}

#[test]
fn sigterm_mid_test_exits_143() {
    text_run_stopped_by(libc::SIGTERM, "SIGTERM", 143, &[]);
}

// The server's threads send: its reports end with it while this end's rows go on.
#[test]
fn sigterm_mid_reverse_test_totals_the_span_it_names() {
    text_run_stopped_by(libc::SIGTERM, "SIGTERM", 143, &["-R", "-i", "0.5"]);
}

#[test]
fn sigterm_mid_reverse_udp_test_totals_the_span_it_names() {
    text_run_stopped_by(
        libc::SIGTERM,
        "SIGTERM",
        143,
        &["-R", "-u", "-b", "100M", "-i", "0.5"],
    );
}

/// Against an iperf3 server (review: no live line, no totals, and a made-up 3.000-4.000
/// row of 0.000 after a stop at 2.5 s of -t 4): the rows so far, marked cut short, with
/// totals that say they are this end's counts, and no row after the last byte.
#[test]
fn sigterm_against_an_iperf3_server_keeps_this_ends_rows_and_totals() {
    let test = "sigterm_against_an_iperf3_server_keeps_this_ends_rows_and_totals";
    if util::iperf3::iperf3(test).is_none() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock();
    let server = util::iperf3::Iperf3Server::start(&[]);
    let port = server.port.to_string();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--peer",
        "iperf3",
        "-t",
        "4",
        "-i",
        "1",
    ];
    let mut run = Watched::spawn(&args);
    run.wait_line("the second row", |l| l.starts_with("( 0)    1.000"));
    let end = run.stop_with(libc::SIGTERM);
    end.assert_stopped(143, "SIGTERM");
    let rows = rows(&end.stdout);
    let live: Vec<_> = rows.iter().filter(|r| !r.summary).collect();
    let last = live.last().map_or(0.0, |r| r.end);
    assert!(last < 4.0, "no row past the stop{}", end.explain);
    let totals: Vec<_> = rows.iter().filter(|r| r.label == "**").collect();
    assert_eq!(totals.len(), 1, "one #(**) line{}", end.explain);
    assert!((totals[0].end - last).abs() < 0.0015, "{}", end.explain);
    assert!(
        end.stdout
            .contains("; the totals below are this end's counts up to ")
            && end.stdout.contains("# bytes: this end wrote "),
        "{}",
        end.explain
    );
}

#[test]
fn sigint_mid_test_with_json_prints_a_document_with_its_intervals_and_the_error() {
    let _one = ONE_AT_A_TIME.lock();
    // Two streams: one stream's placement probe would start stream threads of its own.
    let mut run = Watched::spawn(&["--loopback", "-t", "10", "-i", "0.5", "-J", "-P", "2"]);
    run.wait_thread("stream-1");
    // -J prints nothing before its end: let two intervals pass once the streams exist.
    std::thread::sleep(Duration::from_millis(1100));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    let doc = end.json();
    let intervals = doc["intervals"].as_array().map_or(0, Vec::len);
    assert!(intervals >= 1, "intervals measured{}", end.explain);
    // The totals so far, as iperf3 -J keeps its end sums when interrupted, marked so.
    assert_eq!(
        doc["end"]["cut_short"], true,
        "end marked cut short{}",
        end.explain
    );
    let end_bytes = doc["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let rows: u64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|iv| iv["sum"]["bytes"].as_u64())
        .sum();
    assert_eq!(
        end_bytes, rows,
        "the end sums the rows received{}",
        end.explain
    );
    let error = doc["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("interrupted by SIGINT ") && error.ends_with(" s into the test"),
        "error {error:?}{}",
        end.explain
    );
    eprintln!("-J: exit 130, {intervals} intervals, error {error:?}");
}

#[test]
fn sigint_mid_test_with_json_lines_ends_with_an_error_event() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&["--loopback", "-t", "10", "--json-lines"]);
    run.wait_line("interval event", |l| l.contains(r#""event":"interval""#));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    let events: Vec<Value> = end
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}{}", end.explain)))
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"start"), "{kinds:?}{}", end.explain);
    assert!(kinds.contains(&"interval"), "{kinds:?}{}", end.explain);
    // The totals so far, then why it stopped.
    assert_eq!(
        kinds[kinds.len().saturating_sub(2)..],
        ["end", "error"],
        "{kinds:?}{}",
        end.explain
    );
    let error = events.last().and_then(|e| e["data"].as_str()).unwrap_or("");
    assert!(error.starts_with("interrupted by SIGINT "), "{error}");
    eprintln!("--json-lines: exit 130, events {kinds:?}");
}

#[test]
fn sigint_mid_test_with_csv_ends_with_an_error_row() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&["--loopback", "-t", "10", "--csv"]);
    run.wait_line("sum row", |l| l.starts_with("sum,"));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    let mut lines = end.stdout.lines();
    let columns: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let error_col = columns.iter().position(|c| *c == "error");
    let rows: Vec<Vec<&str>> = lines
        .map(|l| l.splitn(columns.len(), ',').collect())
        .collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    // The totals so far, then why it stopped: a script keeping the rows sees it failed.
    assert!(kinds.contains(&"total_sum"), "{kinds:?}{}", end.explain);
    assert_eq!(kinds.last(), Some(&"error"), "{kinds:?}{}", end.explain);
    let error = error_col.and_then(|c| rows.last()?.get(c).copied());
    assert!(
        error.is_some_and(|e| e
            .trim_start_matches('"')
            .starts_with("interrupted by SIGINT ")),
        "{error:?}{}",
        end.explain
    );
    eprintln!("--csv: exit 130, ends with {:?}", rows.last());
}

#[test]
fn a_signal_the_run_was_started_ignoring_stays_ignored() {
    let _one = ONE_AT_A_TIME.lock();
    // As `nohup pinperf …` starts it: SIGHUP ignored. The test runs to its end.
    let args = ["--loopback", "-t", "2"];
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"trap "" HUP; exec "$0" "$@""#)
        .arg(bin())
        .args(args);
    let mut run = Watched::start(cmd, &args);
    run.wait_line("first row", is_first_row);
    let end = run.stop_with(libc::SIGHUP);
    assert_eq!(end.status.code(), Some(0), "{}", end.explain);
    assert_eq!(
        rows(&end.stdout).iter().filter(|r| r.label == "**").count(),
        1,
        "{}",
        end.explain
    );
    assert!(!end.stderr.contains("interrupted"), "{}", end.explain);
}

#[test]
fn a_signal_ends_a_run_stuck_in_its_handshake_at_once() {
    let _one = ONE_AT_A_TIME.lock();
    // A "server" that accepts and never answers: the client waits for its preamble, in
    // short polls that look at the signal (not for the 10 s the handshake may take).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut run = Watched::spawn(&["-c", "127.0.0.1", "-p", &port, "-t", "1"]);
    let (_conn, _) = listener.accept().unwrap();
    run.wait_thread("signals");
    let end = run.stop_with(libc::SIGINT);
    assert_eq!(end.status.signal(), Some(libc::SIGINT), "{}", end.explain);
    assert!(end.stop < Duration::from_secs(1), "{}", end.explain);
    assert!(
        end.stderr
            .contains("pinperf: interrupted by SIGINT while connecting"),
        "{}",
        end.explain
    );
}

#[test]
fn the_server_hears_that_the_client_was_interrupted() {
    let _one = ONE_AT_A_TIME.lock();
    let server = util::Server::start(&[]);
    let port = server.port_arg();
    let mut run = Watched::spawn(&["-c", "127.0.0.1", "-p", &port, "-t", "10", "-i", "0.5"]);
    run.wait_line("first row", is_first_row);
    let end = run.stop_with(libc::SIGHUP);
    end.assert_stopped(129, "SIGHUP");
    let deadline = Instant::now() + STOP_LIMIT;
    while !server.log().contains("reported: interrupted by SIGHUP") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        server.log().contains("reported: interrupted by SIGHUP"),
        "the server names the client's reason, not the resets after it\nserver log:\n{}{}",
        server.log(),
        end.explain
    );
}

#[test]
fn sigint_during_the_second_compare_run_keeps_the_first_row_and_says_why() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&[
        "compare",
        "--loopback",
        "--blocks",
        "8k,16k,32k",
        "-t",
        "1",
        "-J",
    ]);
    // Each run has its `stream-0` threads; between runs (the settle pause) there are none.
    run.wait_thread("stream-0");
    run.wait_no_thread("stream-0");
    run.wait_thread("stream-0");
    std::thread::sleep(Duration::from_millis(200));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    let doc = end.json();
    let rows = doc["rows"].as_array().cloned().unwrap_or_default();
    assert!(!rows.is_empty(), "the finished run's row{}", end.explain);
    assert!(rows.len() < 3, "the stopped run has no row{}", end.explain);
    assert_eq!(rows[0]["block_bytes"], 8192, "{}", end.explain);
    assert!(rows[0]["bits_per_second"].as_f64().unwrap_or(0.0) > 0.0);
    let error = doc["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("interrupted by SIGINT ") && error.contains("run 2 of 3"),
        "error {error:?}{}",
        end.explain
    );
    assert_eq!(
        doc["configurations"], 3,
        "the matrix planned{}",
        end.explain
    );
    // Read back, it says it stopped, and how far it got (it showed a finished, smaller
    // matrix): text, and CSV's last row with only its error cell.
    let saved = std::env::temp_dir().join(format!("pinperf-compare-{}.json", std::process::id()));
    std::fs::write(&saved, &end.stdout).expect("save the document");
    let text = util::pinperf(&["report", saved.to_str().unwrap()], STOP_LIMIT);
    let csv = util::pinperf(
        &["report", "--format", "csv", saved.to_str().unwrap()],
        STOP_LIMIT,
    );
    let _ = std::fs::remove_file(&saved);
    let last = text.stdout().lines().last().unwrap_or("").to_string();
    assert!(
        last.starts_with("# interrupted by SIGINT ")
            && last.ends_with(&format!("{} of 3 configurations ran", rows.len())),
        "{}",
        text.explain()
    );
    assert!(
        csv.stdout()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with(",,,") && l.contains("interrupted by SIGINT ")),
        "{}",
        csv.explain()
    );
    eprintln!(
        "compare -J: exit 130, {} row(s), error {error:?}; report: {last:?}",
        rows.len()
    );
}

/// Root, /dev/net/tun and iproute2 with a namespace really made and removed; else why not.
fn lab_capability() -> Result<(), String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        return Err("needs root (network namespaces)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("no /dev/net/tun".into());
    }
    let probe = format!("pinperf-sigtest-{}", std::process::id());
    let ip = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !ip(&["netns", "add", &probe]) {
        return Err("cannot create a network namespace (`ip netns add`)".into());
    }
    ip(&["netns", "delete", &probe]);
    Ok(())
}

/// The lab's namespaces of process `pid` still present.
fn lab_leftovers(pid: u32) -> Vec<String> {
    let prefix = format!("pinperf-lab-{pid}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sigint_mid_lab_test_with_json_keeps_the_document_and_leaves_no_namespace() {
    let test = "sigint_mid_lab_test_with_json_keeps_the_document_and_leaves_no_namespace";
    if let Err(why) = lab_capability() {
        eprintln!("SKIPPED: {test}: {why}");
        return;
    }
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&[
        "lab", "--rtt", "2ms", "--rate", "100M", "--", "-t", "10", "-i", "0.5", "-J",
    ]);
    let pid = run.child.id();
    run.wait_thread("stream-0");
    assert_eq!(
        lab_leftovers(pid).len(),
        2,
        "the lab runs in two namespaces"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let end = run.stop_with(libc::SIGINT);
    end.assert_stopped(130, "SIGINT");
    let doc = end.json();
    let intervals = doc["intervals"].as_array().map_or(0, Vec::len);
    assert!(intervals >= 1, "intervals measured{}", end.explain);
    let error = doc["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("interrupted by SIGINT "),
        "{error}{}",
        end.explain
    );
    assert!(
        end.stderr
            .contains("pinperf lab: signal 2, stopped; removed netns"),
        "{}",
        end.explain
    );
    assert!(
        lab_leftovers(pid).is_empty(),
        "namespaces left{}",
        end.explain
    );
    eprintln!(
        "lab -J: exit 130 {:?} after the signal, {intervals} intervals, nothing left",
        end.stop
    );
}

/// The seed's shell loop (`for l in …; do pinperf … | fgrep '**'; done`) must stop at the
/// first Ctrl-C: pinperf prints, then ends by SIGINT itself, so bash ends the loop. A real
/// terminal is needed for a real Ctrl-C: python3's `pty` gives one (skipped without it).
#[test]
fn ctrl_c_stops_a_shell_loop_around_pinperf() {
    let _one = ONE_AT_A_TIME.lock();
    let have_python = Command::new("python3")
        .arg("-c")
        .arg("import pty")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_python {
        util::skipped(
            "ctrl_c_stops_a_shell_loop_around_pinperf",
            "no python3 for a pty",
        );
        return;
    }
    let script = r#"
import glob, os, pty, select, signal, sys, time
def streaming():
    # A stream-0 thread of this test's own pinperf (its path is argv[1]).
    for comm in glob.glob("/proc/[0-9]*/task/*/comm"):
        try:
            proc = comm.split("/task/")[0]
            if (open(comm).read().strip() == "stream-0"
                    and open(proc + "/cmdline", "rb").read().split(b"\0")[0]
                    == sys.argv[1].encode()):
                return True
        except OSError:
            pass
    return False
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp("bash", ["bash", "--norc", "-c",
        'for i in 1 2 3; do "$0" --loopback -t 3 | fgrep "**"; echo "next $i"; done; echo LOOP-END',
        sys.argv[1]])
out, t0, sent = b"", time.time(), False
while time.time() - t0 < 15:
    if select.select([fd], [], [], 0.05)[0]:
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d:
            break
        out += d
    if not sent and streaming():
        time.sleep(0.3)
        os.write(fd, b"\x03")
        sent = True
_, status = os.waitpid(pid, 0)
print(out.decode(errors="replace"))
print("STATUS", status, "SENT", sent)
"#;
    // Whatever the harness ignores (a background job ignores SIGINT), the terminal's
    // Ctrl-C must reach the loop as it would at a prompt.
    let out = util::with_default_stop_signals(Command::new("python3"))
        .arg("-c")
        .arg(script)
        .arg(bin())
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SENT True"), "no stream ever ran:\n{text}");
    assert!(
        !text.contains("next 2"),
        "the loop went on after ^C:\n{text}"
    );
    assert!(
        !text.contains("LOOP-END"),
        "the loop went on after ^C:\n{text}"
    );
    // bash ended by SIGINT itself (wait status 2), as a shell does when its child did.
    assert!(
        text.contains("STATUS 2 "),
        "bash was not ended by SIGINT:\n{text}"
    );
}

/// `pinperf -s` stopped by SIGTERM during a test: the test stops, its client hears why
/// (it said only "closed the control connection"), an iperf3 client hears iperf3's "the
/// server has terminated", the log says so, and the server still ends by the signal.
#[test]
fn a_server_stopped_by_sigterm_tells_its_client_and_its_log() {
    for iperf3_client in [false, true] {
        if iperf3_client
            && util::iperf3::iperf3("a_server_stopped_by_sigterm_tells_its_client_and_its_log")
                .is_none()
        {
            continue;
        }
        // One-off (-1) for one of the two: its test's result must not end it first.
        let mut server = util::Server::start(if iperf3_client { &[] } else { &["-1"] });
        let port = server.port_arg();
        let client = std::thread::spawn(move || match iperf3_client {
            false => {
                let run = util::pinperf(
                    &["-c", "127.0.0.1", "-p", &port, "-t", "8"],
                    Duration::from_secs(12),
                );
                (run.code(), run.stdout() + &run.stderr())
            }
            true => {
                let (code, out, err, _) =
                    util::iperf3::iperf3_client(port.parse().unwrap(), &["-t", "8"]);
                (code, out + &err)
            }
        });
        server.wait_for_log("stream(s)", Duration::from_secs(5));
        // Under way: the data moves (a signal before the start would find no test).
        std::thread::sleep(Duration::from_millis(300));
        let sent = Instant::now();
        util::kill_with(server.child.id(), "-TERM");
        let status = loop {
            if let Some(status) = server.child.try_wait().expect("wait") {
                break status;
            }
            if sent.elapsed() > Duration::from_secs(5) {
                panic!(
                    "the server still runs 5 s after SIGTERM{}",
                    server.explain()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (code, said) = client.join().expect("client");
        let explain = format!("client {code:?}: {said}{}", server.explain());
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{explain}");
        assert!(sent.elapsed() < Duration::from_secs(3), "{explain}");
        assert_eq!(code, Some(1), "{explain}");
        let heard = match iperf3_client {
            false => "reported: the server was stopped by SIGTERM",
            true => "the server has terminated",
        };
        assert!(said.contains(heard), "{explain}");
        // The process is gone; its last line may still be on its way through the pipe.
        server.wait_for_log("pinperf: server stopped by SIGTERM", Duration::from_secs(2));
        let log = server.log();
        assert!(
            log.contains("failed: the server was stopped by SIGTERM")
                && log
                    .trim_end()
                    .ends_with("pinperf: server stopped by SIGTERM"),
            "{explain}"
        );
    }
}

/// iperf3's JSON stream stopped by SIGTERM mid-test: the intervals so far, then `error`
/// (the signal), then `end` with the totals so far, every line one JSON object, as
/// iperf3's `--json-stream` ends an interrupted test.
#[test]
fn sigterm_ends_the_iperf3_json_stream_with_error_and_the_totals_so_far() {
    let _one = ONE_AT_A_TIME.lock();
    let mut run = Watched::spawn(&[
        "--loopback",
        "-t",
        "10",
        "-i",
        "0.3",
        "--format",
        "iperf3-json-stream",
    ]);
    run.wait_line("an interval event", |l| {
        l.starts_with(r#"{"event":"interval""#)
    });
    let end = run.stop_with(libc::SIGTERM);
    end.assert_stopped(143, "SIGTERM");
    let events: Vec<serde_json::Value> = end
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}{}", end.explain)))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names.first(), Some(&"start"), "{}", end.explain);
    assert!(names.contains(&"interval"), "{}", end.explain);
    assert_eq!(
        names[names.len() - 2..],
        ["error", "end"],
        "{}",
        end.explain
    );
    let error = events[events.len() - 2]["data"].as_str().unwrap_or("");
    assert!(error.contains("SIGTERM"), "{}", end.explain);
    let sent = &events[events.len() - 1]["data"]["sum_sent"]["bytes"];
    assert!(sent.as_u64() > Some(0), "{}", end.explain);
}
