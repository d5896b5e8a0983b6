//! The real iperf3 for the tests that talk to it (`tests/iperf3.rs`, `tests/iperf3_json.rs`):
//! whether it is installed (a visible skip when not), an `iperf3 -s -1 -J` on a free port
//! that is killed on drop, an `iperf3 -c` run to its end, and a client of iperf3's protocol
//! that stops at CREATE_STREAMS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest any iperf3 or pinperf run of these tests may take.
pub const LIMIT: Duration = Duration::from_secs(20);

/// The iperf3 binary, or a visible skip.
pub fn iperf3(test: &str) -> Option<&'static str> {
    let found = Command::new("iperf3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        super::skipped(test, "no iperf3 on PATH (apt-get install iperf3)");
    }
    found.then_some("iperf3")
}

/// Whether something listens on 127.0.0.1:`port` (from /proc/net/tcp, without
/// connecting: a connection would be an iperf3 client to the server).
pub fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} 00000000:0000 0A");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| t.contains(&needle))
}

/// The server-side connections established on `port` (IPv4): a test under way has its
/// control connection and at least one data connection.
pub fn established(port: u16) -> usize {
    let local = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/tcp").map_or(0, |t| {
        t.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((*f.get(1)?, *f.get(3)?))
            })
            .filter(|(addr, state)| format!("{addr} ").ends_with(&local) && *state == "01")
            .count()
    })
}

/// `iperf3 -s -1 -J` on a free port: one test, then its JSON document. Killed on drop.
pub struct Iperf3Server {
    child: Option<Child>,
    pub port: u16,
}

impl Iperf3Server {
    pub fn start(extra: &[&str]) -> Iperf3Server {
        let mut args = vec!["-1", "-J"];
        args.extend_from_slice(extra);
        Iperf3Server::spawn(&args)
    }

    /// `iperf3 -s` serving test after test (no `-1`), in text.
    pub fn serving() -> Iperf3Server {
        Iperf3Server::spawn(&[])
    }

    fn spawn(extra: &[&str]) -> Iperf3Server {
        let port = super::free_port();
        let child = Command::new("iperf3")
            .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3 -s");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !listening(port) {
            assert!(
                Instant::now() < deadline,
                "iperf3 -s never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Iperf3Server {
            child: Some(child),
            port,
        }
    }

    /// The server's process id (to stop and continue it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Kills the server now (SIGKILL: it says nothing to its client).
    pub fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's document once its one test is over.
    pub fn document(mut self) -> Value {
        let child = self.child.take().expect("child");
        let out = child.wait_with_output().expect("iperf3 -s output");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "iperf3 -s wrote no JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `iperf3 -c 127.0.0.1 -p port args` to its end (at most [`LIMIT`]).
pub fn iperf3_client(port: u16, args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let t0 = Instant::now();
    let out = Command::new("timeout")
        .arg(LIMIT.as_secs().to_string())
        .args(["iperf3", "-c", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run iperf3 -c");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed(),
    )
}

/// A client of iperf3's protocol at 127.0.0.1:`port` that sends its cookie and a 2-stream
/// TCP test's parameters, reads CREATE_STREAMS, and connects no stream: a test held in its
/// setup until the connection is dropped.
pub fn stalled_in_setup(port: u16) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"abcdefghijklmnopqrstuvwxyz0123456789\0")
        .unwrap();
    let mut state = [0u8; 1];
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 9, "PARAM_EXCHANGE");
    let params = br#"{"tcp":true,"omit":0,"time":1,"parallel":2,"len":131072}"#;
    c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
    c.write_all(params).unwrap();
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 10, "CREATE_STREAMS");
    c
}
