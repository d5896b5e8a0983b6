//! The iperf3 personality's server flags, end to end: `-D`/`-I` (a server that returns at
//! once, runs on with its PID in the file, and removes it when it exits),
//! `--server-max-duration` and `--server-bitrate-limit` (refused at the handshake and cut
//! while running, with iperf3's codes to an iperf3-protocol client and words to pinperf's),
//! and `-d` (a `-J` document stays one document). The real iperf3 is used where it is
//! installed; the codes are checked on the wire by a client of iperf3's protocol.

mod util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use util::iperf3::{LIMIT, iperf3, iperf3_client};
use util::{Spawned, pinperf};

/// `pinperf iperf3 -s -B 127.0.0.1 -p PORT EXTRA` on a free port, once it listens.
fn personality_server(extra: &[&str]) -> (Spawned, String) {
    let port = util::free_port();
    let port_arg = port.to_string();
    let mut args = vec!["iperf3", "-s", "-B", "127.0.0.1", "-p", &port_arg];
    args.extend_from_slice(extra);
    let mut server = Spawned::start(&args);
    listens(port, &mut || server.explain());
    (server, port_arg)
}

/// Waits until something listens on 127.0.0.1:`port`.
fn listens(port: u16, seen: &mut dyn FnMut() -> String) {
    util::wait_until(
        "the server to listen",
        Duration::from_secs(10),
        || util::iperf3::listening(port).then_some(()),
        seen,
    );
}

/// `pinperf iperf3 -c 127.0.0.1 -p PORT ARGS`, to its end.
fn personality_client(port: &str, args: &[&str]) -> util::Run {
    let mut all = vec!["iperf3", "-c", "127.0.0.1", "-p", port];
    all.extend_from_slice(args);
    pinperf(&all, LIMIT)
}

/// Sends a one-stream TCP test's parameters (`params`, iperf3's JSON) over iperf3's
/// protocol and reads the state byte that answers them: the control connection, and the
/// SERVER_ERROR code when the answer is one.
fn iperf3_params(port: &str, params: &str) -> (TcpStream, Option<i32>) {
    let mut c = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    c.set_read_timeout(Some(LIMIT)).unwrap();
    c.write_all(b"abcdefghijklmnopqrstuvwxyz0123456789\0")
        .unwrap();
    let mut state = [0u8; 1];
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 9, "PARAM_EXCHANGE");
    c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
    c.write_all(params.as_bytes()).unwrap();
    let code = server_error(&mut c);
    (c, code)
}

/// The next state byte on `c`: `None` for any but SERVER_ERROR, else its iperf3 code.
fn server_error(c: &mut TcpStream) -> Option<i32> {
    let mut state = [0u8; 1];
    c.read_exact(&mut state).unwrap();
    if state[0] as i8 != -2 {
        return None;
    }
    let mut code = [0u8; 8];
    c.read_exact(&mut code).unwrap();
    Some(i32::from_be_bytes(code[..4].try_into().unwrap()))
}

/// Kills a daemonized server left running by a failed assertion.
struct Reap(Option<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|_| std::thread::panicking()) {
            util::kill_with(pid, "KILL");
        }
    }
}

/// `-D -I FILE -1`: the command returns 0 at once, the file names the running server (not
/// the command's process), a second server with the file is refused while it runs, a
/// client is served, and the server then exits and removes the file.
#[test]
fn a_daemon_writes_its_pidfile_serves_and_removes_it() {
    let dir = util::scratch("a_daemon_writes_its_pidfile_serves_and_removes_it");
    let pidfile = dir.join("server.pid");
    let port = util::free_port().to_string();
    let started = Spawned::start(&[
        "iperf3",
        "-s",
        "-1",
        "-D",
        "-I",
        util::arg(&pidfile),
        "-B",
        "127.0.0.1",
        "-p",
        &port,
    ])
    .finish(LIMIT);
    started.assert_ok();
    let pid: u32 = util::wait_until(
        "the pidfile",
        Duration::from_secs(5),
        || std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok(),
        || format!("no PID in {}: {}", pidfile.display(), started.explain()),
    );
    let mut reap = Reap(Some(pid));
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} of the pidfile is not running"
    );
    let second = pinperf(
        &[
            "iperf3",
            "-s",
            "-I",
            util::arg(&pidfile),
            "-B",
            "127.0.0.1",
            "-p",
            "0",
        ],
        LIMIT,
    );
    assert_eq!(second.code(), Some(2), "{}", second.explain());
    assert!(
        second.stderr().contains("is running with it"),
        "{}",
        second.explain()
    );
    listens(port.parse().unwrap(), &mut || {
        "the daemon does not listen".into()
    });
    personality_client(&port, &["-t", "1"]).assert_ok();
    util::wait_until(
        "the daemon's exit",
        Duration::from_secs(5),
        || {
            (!pidfile.exists() && !std::path::Path::new(&format!("/proc/{pid}")).exists())
                .then_some(())
        },
        || {
            format!(
                "{} still there, or process {pid} still runs",
                pidfile.display()
            )
        },
    );
    reap.0 = None;
}

/// `--server-max-duration 2`: a longer test (or -t plus -O) is refused at the handshake,
/// with iperf3's code 37 to its protocol and its words to pinperf's client; a shorter one
/// runs.
#[test]
fn a_test_longer_than_the_server_max_duration_is_refused() {
    let (_server, port) = personality_server(&["--server-max-duration", "2"]);
    let long = r#"{"tcp":true,"omit":0,"time":3,"parallel":1,"len":131072}"#;
    assert_eq!(iperf3_params(&port, long).1, Some(37));
    let omit = r#"{"tcp":true,"omit":2,"time":1,"parallel":1,"len":131072}"#;
    assert_eq!(iperf3_params(&port, omit).1, Some(37));
    let run = personality_client(&port, &["-t", "3"]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("client's requested duration exceeds the server's maximum permitted limit"),
        "{}",
        run.explain()
    );
    personality_client(&port, &["-t", "1"]).assert_ok();
    if iperf3("a_test_longer_than_the_server_max_duration_is_refused").is_some() {
        let (code, _, err, _) = iperf3_client(port.parse().unwrap(), &["-t", "3"]);
        assert_eq!(code, Some(1), "{err}");
    }
}

/// `--server-bitrate-limit 40M/1`: a test asking for more (-b times -P) is refused with
/// iperf3's code 27; one that moves more than 40 Mbit/s over a second is cut in about
/// two, told why; one within it runs.
#[test]
fn a_test_past_the_server_bitrate_limit_is_refused_or_cut() {
    let (_server, port) = personality_server(&["--server-bitrate-limit", "40M/1"]);
    let asks = r#"{"tcp":true,"omit":0,"time":2,"parallel":2,"len":131072,"bandwidth":30000000}"#;
    assert_eq!(iperf3_params(&port, asks).1, Some(27));

    let t0 = Instant::now();
    let run = pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "5"], LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("more than --server-bitrate-limit 40M"),
        "{}",
        run.explain()
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{}", run.explain());

    personality_client(&port, &["-t", "1", "-b", "10M", "-P", "2"]).assert_ok();
    if iperf3("a_test_past_the_server_bitrate_limit_is_refused_or_cut").is_some() {
        let (code, _, err, took) = iperf3_client(port.parse().unwrap(), &["-t", "5"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(took < Duration::from_secs(4), "{took:?}: {err}");
        let (code, _, err, _) = iperf3_client(port.parse().unwrap(), &["-b", "50M", "-t", "1"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("total required bandwidth"), "{err}");
    }
}

/// `-d` with `-J`: iperf3's debug flag leaves stdout one JSON document; in text it adds
/// -V's lines.
#[test]
fn debug_keeps_the_json_document_whole() {
    let (_server, port) = personality_server(&[]);
    let run = personality_client(&port, &["-t", "1", "-d", "-J"]);
    run.assert_ok();
    let doc: serde_json::Value = serde_json::from_str(&run.stdout())
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", run.explain()));
    assert!(
        doc["end"]["sum_received"]["bytes"].as_u64() > Some(0),
        "{doc}"
    );
    let text = personality_client(&port, &["-t", "1", "--debug"]);
    text.assert_ok();
    assert!(
        text.stdout().contains("snd_tcp_congestion"),
        "{}",
        text.explain()
    );
}

/// The keepalive timers `ss` shows on the established connections to or from `port`.
fn keepalive_timers(port: &str) -> Option<Vec<String>> {
    let filter = format!("( sport = :{port} or dport = :{port} )");
    let out = std::process::Command::new("ss")
        .args(["-tnoH", "state", "established", &filter])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Some(
        text.lines()
            .filter(|l| l.contains("timer:(keepalive"))
            .map(str::to_string)
            .collect(),
    )
}

/// `--cntl-ka=IDLE/INTV/CNT` on both ends: during the test the client's control connection
/// and the server's connections carry keepalive timers of their own IDLE (`ss` shows the
/// time left: 3x s of the client's 40, 4x s of the server's 50); without the flag, none
/// does.
#[test]
fn cntl_ka_sets_keepalive_on_the_control_connection() {
    let test = "cntl_ka_sets_keepalive_on_the_control_connection";
    if keepalive_timers("1").is_none() {
        util::skipped(test, "no ss (iproute2) to read the sockets' timers");
        return;
    }
    for ka in [true, false] {
        let extra: &[&str] = if ka { &["--cntl-ka=50/5/3"] } else { &[] };
        let (_server, port) = personality_server(extra);
        let mut args = vec!["iperf3", "-c", "127.0.0.1", "-p", &port, "-t", "1"];
        if ka {
            args.push("--cntl-ka=40/5/3");
        }
        let mut client = Spawned::start(&args);
        std::thread::sleep(Duration::from_millis(500));
        let timers = keepalive_timers(&port).unwrap_or_default();
        client.finish(LIMIT).assert_ok();
        let from_client = timers
            .iter()
            .any(|l| l.contains(&format!(":{port} ")) && l.contains("keepalive,3"));
        let at_server = timers.iter().any(|l| l.contains("keepalive,4"));
        match ka {
            true => assert!(from_client && at_server, "{timers:#?}"),
            false => assert!(timers.is_empty(), "{timers:#?}"),
        }
    }
}
