//! Helpers for the end-to-end tests: run the real binary, start a server on an ephemeral
//! port (killed on drop), parse the text report, and explain failures with the command,
//! status, stdout and stderr.
//!
//! Tests sequence on what the processes say, never on sleeps: [`Spawned::wait_for_line`]
//! waits for a line of a running client's stdout (its first interval row, say),
//! [`Server::wait_for_log`] for a line of the server's stderr log (`test from …` when a test
//! is accepted, `… failed: …` or `… done, received …` when it ends), [`ControlTap::wait_for`]
//! for a control message on its way from server to client (for `-J`, which prints nothing
//! until the end), [`wait_until`] for anything else observable (a `/proc` state). Each wait
//! returns as soon as the event is there, and panics after its timeout (or when the
//! process's output ends first) with the command, what it waited for and what it saw.

#![allow(dead_code)]

pub mod iperf3;

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pinperf::wire::ControlMsg;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pinperf")
}

/// A finished run with everything needed to explain a failure.
pub struct Run {
    pub args: Vec<String>,
    pub output: Output,
    pub elapsed: Duration,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
    /// Everything about the run, for assertion messages.
    pub fn explain(&self) -> String {
        format!(
            "\ncommand: pinperf {}\nstatus: {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.output.status,
            self.elapsed,
            self.stdout(),
            self.stderr()
        )
    }
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code(), Some(0), "expected success{}", self.explain());
        self
    }
}

/// Runs pinperf with `args` to its end, killing it after `limit`.
pub fn pinperf(args: &[&str], limit: Duration) -> Run {
    Spawned::start(args).finish(limit)
}

/// Spawns pinperf with piped stdout/stderr (for tests that read neither while it runs).
pub fn spawn(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pinperf")
}

/// Says that `test` skipped and why, as `SKIPPED: test: reason` on the test process's
/// stderr itself: `eprintln!` inside a test is captured and shown only if the test fails,
/// and a skip must show in every run.
pub fn skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// The effective user is root (from /proc, without unsafe code).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().nth(1).map(String::from))
        })
        .flatten()
        .as_deref()
        == Some("0")
}

/// Whether this process may run threads at SCHED_FIFO (root, or CAP_SYS_NICE, and no
/// cgroup that forbids it): `chrt -f 1 true` runs.
pub fn may_fifo() -> Result<(), String> {
    match std::process::Command::new("chrt")
        .args(["-f", "1", "true"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "chrt -f 1 failed here ({}); CI runs it as root",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("no chrt here ({e})")),
    }
}

/// The kernel offers bbr (`net.ipv4.tcp_available_congestion_control`).
pub fn has_bbr() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .is_ok_and(|a| a.split_whitespace().any(|c| c == "bbr"))
}

/// Polls `probe` (every 5 ms) until it returns `Some`, for at most `timeout`. On timeout,
/// panics saying what was awaited and, from `seen`, what was seen instead.
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Option<T>,
    seen: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!(
                "waited {timeout:?} for {what}; it did not happen\n{}",
                seen()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One of a child's output pipes, read to its end by a thread of its own: the bytes so
/// far, whether the pipe has closed, and a condition variable signalled when either changes.
struct Pipe {
    state: Mutex<(Vec<u8>, bool)>,
    changed: Condvar,
}

/// Why [`Pipe::wait_lines`] gave up.
enum Gave {
    Timeout,
    Closed,
}

impl Pipe {
    fn collect(mut src: impl Read + Send + 'static) -> (Arc<Pipe>, JoinHandle<()>) {
        let pipe = Arc::new(Pipe {
            state: Mutex::new((Vec::new(), false)),
            changed: Condvar::new(),
        });
        let p = Arc::clone(&pipe);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = src.read(&mut buf).unwrap_or(0);
                let mut st = p.state.lock().unwrap();
                if n == 0 {
                    st.1 = true;
                } else {
                    st.0.extend_from_slice(&buf[..n]);
                }
                p.changed.notify_all();
                if n == 0 {
                    return;
                }
            }
        });
        (pipe, reader)
    }

    fn bytes(&self) -> Vec<u8> {
        self.state.lock().unwrap().0.clone()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.state.lock().unwrap().0).into_owned()
    }

    /// Waits until `count` complete lines satisfy `pred`; returns them. Gives up at
    /// `timeout`, or as soon as the pipe closes without them.
    fn wait_lines(
        &self,
        pred: &dyn Fn(&str) -> bool,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<String>, Gave> {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&st.0);
            // Only newline-terminated lines: a line still being written is not seen yet.
            let complete = text.rfind('\n').map_or("", |end| &text[..end]);
            let found: Vec<String> = complete
                .lines()
                .filter(|l| pred(l))
                .take(count)
                .map(String::from)
                .collect();
            if found.len() == count {
                return Ok(found);
            }
            if st.1 {
                return Err(Gave::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Gave::Timeout);
            }
            st = self.changed.wait_timeout(st, deadline - now).unwrap().0;
        }
    }
}

fn describe(gave: Gave, timeout: Duration) -> String {
    match gave {
        Gave::Timeout => format!("waited {timeout:?}"),
        Gave::Closed => "the output ended (the process exited) first".to_string(),
    }
}

/// A running pinperf whose stdout and stderr are collected as they come, so a test can
/// wait for a line (say, the first interval row) before acting. Killed on drop.
pub struct Spawned {
    pub child: Child,
    pub args: Vec<String>,
    started: Instant,
    stdout: Arc<Pipe>,
    stderr: Arc<Pipe>,
    readers: Vec<JoinHandle<()>>,
}

impl Spawned {
    pub fn start(args: &[&str]) -> Spawned {
        let started = Instant::now();
        let mut child = spawn(args);
        let (stdout, out_reader) = Pipe::collect(child.stdout.take().expect("stdout"));
        let (stderr, err_reader) = Pipe::collect(child.stderr.take().expect("stderr"));
        Spawned {
            child,
            args: args.iter().map(|s| s.to_string()).collect(),
            started,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Time since it was spawned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// The command, its state and its output so far, for assertion messages.
    pub fn explain(&mut self) -> String {
        let state = match self.child.try_wait() {
            Ok(None) => "running".to_string(),
            Ok(Some(status)) => format!("{status}"),
            Err(e) => format!("unknown ({e})"),
        };
        format!(
            "\ncommand: pinperf {}\nstate: {state} after {:?}\n--- stdout so far ---\n{}\n--- stderr so far ---\n{}",
            self.args.join(" "),
            self.elapsed(),
            self.stdout(),
            self.stderr()
        )
    }

    /// Waits until a complete stdout line satisfies `pred` and returns it. Panics, with
    /// `what` (the awaited line, in words) and everything seen, after `timeout` or as soon
    /// as the process's output ends without it.
    pub fn wait_for_line(
        &mut self,
        what: &str,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> String {
        match self.stdout.wait_lines(&pred, 1, timeout) {
            Ok(mut lines) => lines.remove(0),
            Err(gave) => panic!(
                "waiting for {what} on stdout: {}{}",
                describe(gave, timeout),
                self.explain()
            ),
        }
    }

    /// Kills it (if still running) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for it to exit (killing it after `limit`) and collects everything it wrote.
    pub fn finish(&mut self, limit: Duration) -> Run {
        let deadline = self.started + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                break self.child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.elapsed();
        // The pipes close when the process (and any child holding them) has gone.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        Run {
            args: self.args.clone(),
            output: Output {
                status,
                stdout: self.stdout.bytes(),
                stderr: self.stderr.bytes(),
            },
            elapsed,
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `kill SIG pid` (the tests deny unsafe code).
pub fn kill_with(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// True for a per-stream interval row of the text report (`( 0)      0.000      1.000 …`),
/// not a `(sum)` row or a `#(…)` total.
pub fn is_interval_row(line: &str) -> bool {
    rows(line)
        .first()
        .is_some_and(|r| !r.summary && r.label != "sum")
}

/// The port in a server's `listening on ADDR:PORT (…)` log line (any prefix before it).
pub fn listening_port(line: &str) -> Option<u16> {
    line.split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

/// A `pinperf -s` on 127.0.0.1 and an ephemeral port; killed on drop. Its stderr (the
/// server's log) is collected as it comes.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub args: Vec<String>,
    log: Arc<Pipe>,
    _reader: JoinHandle<()>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["-s", "-B", "127.0.0.1", "-p", "0"];
        args.extend_from_slice(extra);
        let mut child = spawn(&args);
        let (log, reader) = Pipe::collect(child.stderr.take().expect("stderr"));
        let mut server = Server {
            child,
            port: 0,
            args: args.iter().map(|s| s.to_string()).collect(),
            log,
            _reader: reader,
        };
        let line = server.wait_for_log("listening on ", Duration::from_secs(10));
        server.port = listening_port(&line)
            .unwrap_or_else(|| panic!("no port in {line:?}{}", server.explain()));
        server
    }

    pub fn port_arg(&self) -> String {
        self.port.to_string()
    }

    /// Ends the server (killed if still running) and returns all it wrote on stdout.
    pub fn stdout_at_exit(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut out, &mut text).expect("the server's stdout");
        }
        text
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.log.text()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// The command, its state and its log so far, for assertion messages.
    pub fn explain(&mut self) -> String {
        let state = match self.child.try_wait() {
            Ok(None) => "running".to_string(),
            Ok(Some(status)) => format!("{status}"),
            Err(e) => format!("unknown ({e})"),
        };
        format!(
            "\nserver: pinperf {}\nstate: {state}\n--- server log so far ---\n{}",
            self.args.join(" "),
            self.log()
        )
    }

    /// Waits until a log line contains `needle` and returns it; panics with the whole log
    /// after `timeout` or when the server exits first.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for_logs(needle, 1, timeout).remove(0)
    }

    /// Waits until `count` log lines contain `needle` and returns them.
    pub fn wait_for_logs(&mut self, needle: &str, count: usize, timeout: Duration) -> Vec<String> {
        match self
            .log
            .wait_lines(&|l: &str| l.contains(needle), count, timeout)
        {
            Ok(lines) => lines,
            Err(gave) => panic!(
                "waiting for {count} server log line(s) containing {needle:?}: {}{}",
                describe(gave, timeout),
                self.explain()
            ),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pass-through for one control connection: the client connects to `port`, the tap
/// to the server, and every byte is forwarded unchanged both ways. It decodes the server's
/// messages as they pass, so a test can wait for one (say, the first interval `row`) when
/// neither process prints anything at that moment. Either side closing closes the other.
pub struct ControlTap {
    pub port: u16,
    /// The server's messages forwarded to the client so far.
    seen: Arc<(Mutex<Vec<ControlMsg>>, Condvar)>,
}

impl ControlTap {
    pub fn start(server_port: u16) -> ControlTap {
        use std::io::Write;
        use std::net::{Shutdown, TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tap");
        let port = listener.local_addr().expect("tap address").port();
        let seen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let seen2 = Arc::clone(&seen);
        std::thread::spawn(move || {
            let Ok((mut client, _)) = listener.accept() else {
                return;
            };
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", server_port)) else {
                return;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(Shutdown::Write);
            });
            let peer = server.peer_addr().unwrap();
            let mut preamble = [0u8; 8];
            if server.read_exact(&mut preamble).is_ok() && client.write_all(&preamble).is_ok() {
                loop {
                    let mut tee = Tee {
                        inner: &mut server,
                        copy: Vec::new(),
                    };
                    let msg = pinperf::wire::read_frame(&mut tee, peer);
                    if client.write_all(&tee.copy).is_err() {
                        break;
                    }
                    let Ok(msg) = msg else { break };
                    let (msgs, changed) = &*seen2;
                    msgs.lock().unwrap().push(msg);
                    changed.notify_all();
                }
            }
            let _ = client.shutdown(Shutdown::Write);
        });
        ControlTap { port, seen }
    }

    pub fn port_arg(&self) -> String {
        self.port.to_string()
    }

    /// The server's messages forwarded to the client so far.
    pub fn messages(&self) -> Vec<ControlMsg> {
        self.seen.0.lock().unwrap().clone()
    }

    /// Waits until the tap has forwarded a server message that satisfies `pred` and
    /// returns it; panics after `timeout` with `what` and the messages forwarded.
    pub fn wait_for(
        &self,
        what: &str,
        pred: impl Fn(&ControlMsg) -> bool,
        timeout: Duration,
    ) -> ControlMsg {
        let deadline = Instant::now() + timeout;
        let (msgs, changed) = &*self.seen;
        let mut m = msgs.lock().unwrap();
        loop {
            if let Some(found) = m.iter().find(|msg| pred(msg)) {
                return found.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "waited {timeout:?} for the server to send {what}; it sent:\n{:#?}",
                    *m
                );
            }
            m = changed.wait_timeout(m, deadline - now).unwrap().0;
        }
    }
}

/// Reads through to `inner`, keeping a copy of what it read.
struct Tee<'a, R> {
    inner: &'a mut R,
    copy: Vec<u8>,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// One `( N)`, `(sum)`, `#( N)` or `#(**)` row of the text report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub summary: bool,
    pub begin: f64,
    pub end: f64,
    pub mbps: f64,
}

/// Parses every data row of a text report.
pub fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|line| {
            let summary = line.starts_with("#(");
            let body = line.strip_prefix('#').unwrap_or(line);
            if !body.starts_with('(') || body.starts_with("(ID)") {
                return None;
            }
            let close = body.find(')')?;
            let label = body[1..close].trim().to_string();
            let mut fields = body[close + 1..].split_whitespace();
            let mut num = || fields.next().and_then(|f| f.parse::<f64>().ok());
            Some(Row {
                label,
                summary,
                begin: num()?,
                end: num()?,
                mbps: num()?,
            })
        })
        .collect()
}

/// The `# bytes:` line's (sent, received).
pub fn byte_totals(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("# bytes:"))?;
    // The counts, not the verdict after them (which may name iperf3).
    let counts = line.strip_prefix("# bytes:")?.split(':').next()?;
    let nums: Vec<u64> = counts
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    match nums.as_slice() {
        [sent, received] => Some((*sent, *received)),
        _ => None,
    }
}

/// Threads of a process: (name, Cpus_allowed_list).
pub fn threads(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        out.push((comm.trim().to_string(), allowed));
    }
    out
}

/// Threads of a process: (name, scheduling policy, real-time priority), from each
/// thread's `stat` (fields 41 and 40; policy 0 is SCHED_OTHER, 1 SCHED_FIFO).
pub fn sched_policies(pid: u32) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        // After ") " comes field 3 (state): field N is at N - 3.
        let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u32>().ok());
        if let (Some(prio), Some(policy)) = (field(40), field(41)) {
            out.push((stat[open + 1..close].to_string(), policy, prio));
        }
    }
    out.sort();
    out
}

/// The CPU time process `pid` has used, in clock ticks (user and system, all threads; 0
/// once it is gone). A client's handshake uses next to none: 20 ticks (0.2 s) say its
/// streams are moving data.
pub fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = after.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

/// A TCP port on 127.0.0.1 that nothing listens on right now, and that nothing else is
/// likely to take before its user binds it: below the kernel's ephemeral range, which every
/// connect() and bind to port 0 draws from (a port from it, free when looked at, was
/// another test's connection's by the time a server bound it: "--data-port …: the port is
/// in use", 1 fresh-clone CI run). Each call takes the next port of a walk that starts at
/// a place of this process's own (a random pick per call likely gave two threads of one
/// test binary the same port; a walk cannot hand one out twice).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    const LOW: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOW);
    if span > 0 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let start = std::process::id().wrapping_mul(2_654_435_761) ^ nanos;
        let _ = NEXT.compare_exchange(u32::MAX, start % span, Ordering::AcqRel, Ordering::Acquire);
        for _ in 0..64 {
            let port = (LOW + NEXT.fetch_add(1, Ordering::AcqRel) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Resets SIGINT, SIGTERM and SIGHUP to their default disposition in `cmd`'s child.
#[allow(unsafe_code)]
pub fn default_stop_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only signal(),
    // which is async-signal-safe, with constant arguments.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// `cmd` with the stop signals at their default disposition in its child, whatever the
/// test harness was started with: tests that signal a run must not depend on it.
pub fn with_default_stop_signals(mut cmd: Command) -> Command {
    default_stop_signals(&mut cmd);
    cmd
}

/// A fresh directory for one test's files, under cargo's temporary directory for
/// integration tests (kept after the test, to look at).
pub fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A path as a command-line argument.
pub fn arg(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A saved `-J` document, parsed into the report's own types.
pub fn saved(path: &std::path::Path) -> pinperf::report::format::json::Document {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a -J document: {e}", path.display()))
}

/// The TOS byte (`ss --tos`) of each established TCP socket process `pid` holds, as `ss`
/// prints it (`0x28`, `0`); `None` when `ss` cannot run here.
pub fn tcp_tos_of(pid: u32) -> Option<Vec<String>> {
    tcp_sockets_of(pid, "tos")
}

/// `ss`'s `key:` value (`mss`, `tos`) of each established TCP socket process `pid` holds;
/// `None` when `ss` cannot run here.
pub fn tcp_sockets_of(pid: u32, key: &str) -> Option<Vec<String>> {
    let out = Command::new("ss")
        .args(["-tnpiOH", "--tos", "state", "established"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let owner = format!("pid={pid},");
    let key = format!("{key}:");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&owner))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(key.as_str()))
            })
            .map(str::to_string)
            .collect(),
    )
}
