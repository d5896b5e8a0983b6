//! Helpers for the end-to-end tests: run the real binary, start a server on an ephemeral
//! port (killed on drop), parse the text report, and explain failures with the command,
//! status, stdout and stderr.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Runs pinperf with `args`, killing it after `limit`.
pub fn pinperf(args: &[&str], limit: Duration) -> Run {
    let start = Instant::now();
    let mut child = spawn(args);
    loop {
        if child.try_wait().expect("wait").is_some() || start.elapsed() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("collect output");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        output,
        elapsed: start.elapsed(),
    }
}

/// Spawns pinperf with piped stdout/stderr.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pinperf")
}

/// A `pinperf -s` on 127.0.0.1 and an ephemeral port; killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["-s", "-B", "127.0.0.1", "-p", "0"];
        args.extend_from_slice(extra);
        let mut child = spawn(&args);
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let port = rest
                        .split(' ')
                        .next()
                        .and_then(|a| a.rsplit(':').next())
                        .and_then(|p| p.parse::<u16>().ok());
                    let _ = tx.send(port);
                }
                log2.lock().unwrap().push(line);
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(5))
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "server did not report its port; log: {:?}",
                    log.lock().unwrap()
                )
            });
        Server { child, port, log }
    }

    pub fn port_arg(&self) -> String {
        self.port.to_string()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let nums: Vec<u64> = line
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

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
