//! A stream that dies mid-test fails the test at once, with its cause: one of three data
//! connections is reset with `ss -K` (root and a kernel with socket destroy; the test says
//! plainly when it skips), and the client must exit 1 within a second, say which stream
//! failed and why, live, and keep what it measured.

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::{Server, bin, free_port};

fn can_kill_sockets() -> Result<(), String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !root {
        return Err("ss -K needs root".into());
    }
    match Command::new("ss").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("no ss (iproute2)".into()),
    }
}

/// Whether `test` can run: `ss -K` and iperf3 are here (each skip is said).
fn can_kill_sockets_beside_iperf3(test: &str) -> bool {
    if let Err(why) = can_kill_sockets() {
        util::skipped(test, &why);
        return false;
    }
    util::iperf3::iperf3(test).is_some()
}

/// The server's connections on `data_port`: (client port, bytes received), from `ss -i`.
fn connections(data_port: u16) -> Vec<(u16, u64)> {
    let out = Command::new("ss")
        .args(["-tniH", "state", "established"])
        .arg(format!("( sport = :{data_port} )"))
        .output()
        .expect("run ss");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut found = Vec::new();
    let mut port = None;
    for word in text.split_whitespace() {
        if let Some(p) = word.strip_prefix("127.0.0.1:")
            && p != data_port.to_string()
        {
            port = p.parse().ok();
        }
        if let (Some(p), Some(b)) = (port, word.strip_prefix("bytes_received:")) {
            found.push((p, b.parse().unwrap_or(0)));
            port = None;
        }
    }
    found.sort_unstable();
    found
}

/// Resets the server's connection from client port `port` on `data_port`.
fn reset(data_port: u16, port: u16) {
    destroy(&format!("( sport = :{data_port} and dport = :{port} )"));
}

/// Destroys the client's end of its connection from `port` to `server_port`: the client
/// reads "Software caused connection abort", the server a reset.
fn destroy_client_end(server_port: u16, port: u16) {
    destroy(&format!("( dport = :{server_port} and sport = :{port} )"));
}

/// `ss -K` on the established sockets `filter` selects.
fn destroy(filter: &str) {
    let _ = Command::new("ss")
        .args(["-K", "state", "established"])
        .arg(filter)
        .output();
}

/// Resets the `nth` (by client port) connection on `data_port`; true when there was one.
fn reset_one(data_port: u16, nth: usize) -> bool {
    let Some(&(port, _)) = connections(data_port).get(nth) else {
        return false;
    };
    reset(data_port, port);
    true
}

/// The server's socket is the one killed: its word leads, this end's reset (a
/// consequence) follows it (the client led with its own "connection reset by peer").
#[test]
fn a_reset_data_connection_fails_the_test_within_a_second_with_its_cause() {
    let Some(stderr) = reset_fails_the_test(
        "a_reset_data_connection_fails_the_test_within_a_second",
        &[],
    ) else {
        return;
    };
    let line = stderr
        .lines()
        .find(|l| l.starts_with("pinperf: "))
        .unwrap_or("");
    let (before, _) = line
        .split_once(" reported: stream-")
        .unwrap_or_else(|| panic!("the server's word: {stderr}"));
    assert!(
        !before.contains("stream-"),
        "the server's word first: {stderr}"
    );
}

/// The same when the server sends (`-R`): the client's receiving stream names the reset.
#[test]
fn a_reset_data_connection_fails_a_reverse_test_within_a_second() {
    reset_fails_the_test(
        "a_reset_data_connection_fails_a_reverse_test_within_a_second",
        &["-R"],
    );
}

/// And both ways at once (`--bidir`): one of the six connections dies, the test fails.
#[test]
fn a_reset_data_connection_fails_a_bidir_test_within_a_second() {
    reset_fails_the_test(
        "a_reset_data_connection_fails_a_bidir_test_within_a_second",
        &["--bidir"],
    );
}

/// The single engine (one thread, poll) names its socket's own error too, as the threads
/// engine's write does: it said only "stream-1: the connection failed".
#[test]
fn a_reset_data_connection_fails_a_single_engine_test_with_its_error() {
    // This end's own error follows the server's word when its write met the reset before
    // the word came; on a loaded host the word can come first (then there is no "here").
    // Which stream: the reset one, or another the server closed once it failed, when one
    // poll() finds both failed (CI: "here: stream-0"); nothing here can order two resets.
    for _ in 0..3 {
        let Some(stderr) = reset_fails_the_test(
            "a_reset_data_connection_fails_a_single_engine_test_with_its_error",
            &["--engine", "single"],
        ) else {
            return;
        };
        // This end's own error: after the server's word, or alone when that word did not
        // come in time (the write met the reset and nothing else was heard).
        let here = match stderr.split_once("; here: ") {
            Some((_, here)) => here,
            None if !stderr.contains(" reported: ") => stderr.trim_start_matches("pinperf: "),
            None => {
                eprintln!("the server's word came first, again: {stderr}");
                continue;
            }
        };
        let error = here
            .strip_prefix("stream-")
            .and_then(|h| h.split_once(": "))
            .filter(|(id, _)| id.parse::<u8>().is_ok_and(|id| id < 3))
            .map(|(_, error)| error);
        assert!(
            error.is_some_and(|e| e.starts_with("write: Connection reset by peer")),
            "{stderr}"
        );
        eprintln!("single engine: {stderr}");
        return;
    }
    panic!("3 runs, and in none did this end's write meet the reset before the server's word");
}

/// Against an iperf3 server: the client names the stream, then whatever the server said
/// (3.12 ends its test and closes when a data connection dies).
#[test]
fn a_reset_data_connection_fails_a_test_against_an_iperf3_server_within_a_second() {
    let test = "a_reset_data_connection_fails_a_test_against_an_iperf3_server_within_a_second";
    if !can_kill_sockets_beside_iperf3(test) {
        return;
    }
    // Control and data share iperf3's port: the data connections are the ones that
    // received the most.
    let server = util::iperf3::Iperf3Server::start(&[]);
    let port = server.port;
    let stderr = reset_fails(&port.to_string(), &["--peer", "iperf3"], || {
        let mut found = connections(port);
        found.sort_unstable_by_key(|&(_, bytes)| bytes);
        found
            .last()
            .map(|&(client, _)| reset(port, client))
            .is_some()
    });
    // Whichever the client saw first, the stream is named first; iperf3 3.12 then closes
    // the control connection, 3.21 says nothing, and what it said follows the stream.
    assert!(
        stderr.starts_with("pinperf: stream-"),
        "the stream is named first: {stderr}"
    );
    if let Some(at) = stderr.find("the iperf3 server") {
        assert!(
            stderr[..at].ends_with("; "),
            "the server's word follows: {stderr}"
        );
    }
}

/// Against an iperf3 server, this end's control connection destroyed (`ss -K` on its
/// socket here): its error is the cause, not "the iperf3 server closed the control
/// connection" read after it, nor a stream the server closed then.
#[test]
fn a_control_connection_destroyed_against_an_iperf3_server_is_the_cause() {
    let test = "a_control_connection_destroyed_against_an_iperf3_server_is_the_cause";
    if !can_kill_sockets_beside_iperf3(test) {
        return;
    }
    let server = util::iperf3::Iperf3Server::start(&[]);
    let port = server.port;
    let child = Command::new(bin())
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--peer",
            "iperf3",
        ])
        .args(["-t", "6", "-i", "0.5"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    // Control and data share the port: the control connection is the one with little on it.
    let control = util::wait_until(
        "a stream with data beside the control connection",
        Duration::from_secs(3),
        || {
            let found = connections(port);
            let moving = found.iter().any(|&(_, bytes)| bytes > 1 << 20);
            let quiet = found.iter().find(|&&(_, bytes)| bytes < 1 << 16);
            (found.len() == 2 && moving).then_some(quiet.map(|&(client, _)| client))?
        },
        || format!("{:?}", connections(port)),
    );
    destroy_client_end(port, control);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "pinperf: read the control connection to the iperf3 server 127.0.0.1:{port}: \
             Software caused connection abort"
        )),
        "{stderr}"
    );
}

/// An iperf3 client whose own end of a data connection is destroyed (`ss -K` on its socket)
/// fails and sends IPERF_DONE as it exits: the server's log says the client ended the test
/// (it said "protocol error ...: expected TEST_END, got IPERF_DONE").
#[test]
fn an_iperf3_client_that_fails_on_its_own_is_named_in_the_servers_log() {
    let test = "an_iperf3_client_that_fails_on_its_own_is_named_in_the_servers_log";
    if !can_kill_sockets_beside_iperf3(test) {
        return;
    }
    let mut server = Server::start(&[]);
    let port = server.port;
    let mut iperf3 = Command::new("iperf3")
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "10",
            "-P",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run iperf3");
    // Control and data share the port: the data connections are the two with bytes.
    let data = util::wait_until(
        "two stream connections with data on them",
        Duration::from_secs(3),
        || {
            let moving: Vec<u16> = connections(port)
                .into_iter()
                .filter(|&(_, bytes)| bytes > 100_000)
                .map(|(client, _)| client)
                .collect();
            (moving.len() == 2).then_some(moving)
        },
        || format!("{:?}", connections(port)),
    );
    destroy_client_end(port, data[0]);
    let line = server.wait_for_log("failed", Duration::from_secs(5));
    let _ = iperf3.kill();
    let _ = iperf3.wait();
    assert!(
        line.contains("the iperf3 client") && line.contains("ended the test"),
        "{line}\n{}",
        server.log()
    );
}

/// Resets one of three data connections once the first interval is out, and checks the
/// client: exit 1 within a second, a live `stream_failed` event, the totals so far marked
/// cut short, then the error naming the root cause.
fn reset_fails_the_test(test: &str, extra: &[&str]) -> Option<String> {
    if let Err(why) = can_kill_sockets() {
        util::skipped(test, &why);
        return None;
    }
    let data_port = free_port();
    let server = Server::start(&["--data-port", &data_port.to_string()]);
    Some(reset_fails(&server.port_arg(), extra, || {
        reset_one(data_port, 1)
    }))
}

/// Runs a client against the server on `port` and resets a data connection with `reset`
/// (true when it found one) after the first interval; asserts what the client did and
/// returns its stderr.
fn reset_fails(port: &str, extra: &[&str], reset: impl Fn() -> bool) -> String {
    let mut child = Command::new(bin())
        .args(["-c", "127.0.0.1", "-p", port])
        .args([
            "-P",
            "3",
            "-t",
            "8",
            "-i",
            "0.5",
            "--no-echo",
            "--json-lines",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Wait for the first interval: the streams run.
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("read");
        let first_interval = line.contains("\"event\":\"interval\"");
        seen.push(line);
        if first_interval {
            break;
        }
    }
    assert!(reset(), "no data connection to reset; output {seen:?}");
    let reset_at = Instant::now();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    let took = reset_at.elapsed();
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap();
    let explain = format!("status {status:?} after {took:?}\nstdout {rest:#?}\nstderr {stderr}");
    assert_eq!(status.code(), Some(1), "{explain}");
    assert!(
        took < Duration::from_secs(1),
        "took {took:?} to fail: {explain}"
    );
    // The stream that died is named: by a live stream_failed event when this end's
    // stream read the reset first, or by the server's word when that came first (it
    // arrives on the control connection, so nothing orders the two).
    let failed = rest
        .iter()
        .find(|l| l.contains("\"event\":\"stream_failed\""))
        .or_else(|| {
            rest.iter().find(|l| {
                l.contains("\"event\":\"error\"")
                    && l.contains(" reported: stream-")
                    && l.contains("on the server")
            })
        })
        .unwrap_or_else(|| panic!("no live stream_failed event nor the server's: {explain}"));
    assert!(failed.contains("stream-"), "{explain}");
    assert!(
        rest.last()
            .is_some_and(|l| l.contains("\"event\":\"error\"")),
        "the last event is the error: {explain}"
    );
    // The streams that ran keep their totals over the rows so far, marked cut short.
    let end = rest
        .iter()
        .find(|l| l.contains("\"event\":\"end\""))
        .unwrap_or_else(|| panic!("no end event with the totals so far: {explain}"));
    assert!(end.contains("\"cut_short\":true"), "{explain}");
    // The cause, not a consequence: a reset or abort, never "stopped because aborted".
    // An iperf3 server that ends its test on the reset closes the other streams too; one
    // of them may fail here first (a broken pipe), and then its closing is the cause.
    let server_closed =
        stderr.contains("Broken pipe") && stderr.contains("closed the control connection");
    assert!(
        stderr.contains("reset") || stderr.contains("abort") || server_closed,
        "root cause named: {explain}"
    );
    assert!(
        !stderr.contains("stopped because the test was aborted"),
        "{explain}"
    );
    stderr
}

/// A stderr nobody reads any more (`2>&1 | head -1`, a log reader that left) loses lines,
/// never a test: the server's control thread and the client panicked on their next line
/// ("failed printing to stderr"), so every test failed and the client exited 101.
#[test]
fn a_closed_stderr_loses_lines_not_tests() {
    let mut server = Command::new(bin())
        .args(["-s", "-B", "127.0.0.1", "-p", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut listening = String::new();
    BufReader::new(server.stderr.take().expect("stderr"))
        .read_line(&mut listening)
        .expect("listening line");
    // The reader is gone here: the server's next log line meets a closed pipe.
    let port = util::listening_port(&listening)
        .unwrap_or_else(|| panic!("no port in {listening:?}"))
        .to_string();
    for _ in 0..2 {
        let out = Command::new(bin())
            .args(["-c", "127.0.0.1", "-p", &port, "-t", "0.2"])
            .output()
            .expect("client");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
    }
    assert!(
        server.try_wait().expect("wait").is_none(),
        "the server runs on"
    );
    let _ = server.kill();
    let _ = server.wait();

    // The client: -w 1G over net.core.wmem_max warns on stderr, closed before it runs.
    let wmem_max: u64 = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u64::MAX);
    if wmem_max >= 1 << 30 {
        util::skipped(
            "a_closed_stderr_loses_lines_not_tests (client half)",
            "net.core.wmem_max allows -w 1G: no warning to write",
        );
        return;
    }
    let mut client = Command::new(bin())
        .args(["--loopback", "-t", "0.2", "-w", "1G"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    drop(client.stderr.take());
    let status = client.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "-w 1G warned into a closed pipe");
}

#[test]
fn a_closed_pipe_stops_the_test_quietly_and_a_full_disk_is_an_error() {
    let started = Instant::now();
    let mut child = Command::new(bin())
        .args(["--loopback", "-t", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    // The reader is gone (`| head -1`): the test stops at its next row, not at -t.
    let status = child.wait().expect("wait");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap();
    assert!(first.starts_with("# pinperf"), "{first}");
    assert_eq!(status.code(), Some(0), "quiet stop; stderr {stderr}");
    assert!(stderr.is_empty(), "nothing said on a closed pipe: {stderr}");
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "ran to the end of -t 3 although nobody read: {:?}",
        started.elapsed()
    );

    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(full) = full else {
        util::skipped(
            "a_closed_pipe_stops_the_test_quietly (/dev/full half)",
            "no /dev/full here",
        );
        return;
    };
    // Text writes every row; -J writes once, at the end; compare its table: each fails.
    let runs: [&[&str]; 3] = [
        &["--loopback", "-t", "0.3"],
        &["--loopback", "-t", "0.3", "-J"],
        &["compare", "--loopback", "--blocks", "8k", "-t", "1"],
    ];
    for args in runs {
        let out = Command::new(bin())
            .args(args)
            .stdout(full.try_clone().expect("dup /dev/full"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(": No space left"), "{args:?}: {stderr}");
    }
    // And a comparison nobody reads any more stops quietly, as a single test does.
    let mut child = Command::new(bin())
        .args(["compare", "--loopback", "--blocks", "8k,16k,32k", "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn compare");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    let status = child.wait().expect("wait");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap();
    assert_eq!(status.code(), Some(0), "compare | head -1: {stderr}");
    assert!(stderr.is_empty(), "nothing said on a closed pipe: {stderr}");
    // `-J` too: its one document is written at the end, into a pipe closed by then (it
    // said "write the comparison: Broken pipe" and exited 1).
    let mut child = Command::new(bin())
        .args(["compare", "--loopback", "--blocks", "8k", "-t", "0.2", "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn compare -J");
    drop(child.stdout.take());
    let status = child.wait().expect("wait");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap();
    assert_eq!(status.code(), Some(0), "compare -J | true: {stderr}");
    assert!(stderr.is_empty(), "nothing said on a closed pipe: {stderr}");
}

/// A connection destroyed on the client (`ss -K` on its socket there): the client's own
/// error ("Software caused connection abort") is the cause on both ends. The server read
/// resets on other streams once the client stopped, and logged one of those (the wrong
/// stream in 4 runs of 5); the client's write on the data connection met the server's
/// reset after its echo connection died, and named that; with the data connection
/// destroyed, the echo connection the server then closed was named (2 runs in 6).
#[test]
fn a_connection_destroyed_on_the_client_is_the_cause_on_both_ends() {
    let test = "a_connection_destroyed_on_the_client_is_the_cause_on_both_ends";
    if let Err(why) = can_kill_sockets() {
        util::skipped(test, &why);
        return;
    }
    // (block RTT on, the connection destroyed is the echo connection)
    for (echo, kill_echo) in [(false, false), (true, true), (true, false)] {
        let data_port = free_port();
        let mut server = Server::start(&["--data-port", &data_port.to_string()]);
        let mut client = Command::new(bin());
        client
            .args(["-c", "127.0.0.1", "-p", &server.port_arg()])
            .args(["-P", "2", "-t", "6", "-i", "0.5"]);
        if !echo {
            client.arg("--no-echo");
        }
        let child = client
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client");
        // Echo connections carry little; the data connections most.
        let want = if echo { 4 } else { 2 };
        let deadline = Instant::now() + Duration::from_secs(3);
        let conns = loop {
            let conns = connections(data_port);
            if conns.len() == want && conns.iter().filter(|c| c.1 > 1 << 20).count() == 2 {
                break conns;
            }
            assert!(Instant::now() < deadline, "connections: {conns:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (port, _) = match kill_echo {
            true => conns.iter().min_by_key(|c| c.1),
            false => conns.iter().max_by_key(|c| c.1),
        }
        .copied()
        .expect("a connection");
        destroy_client_end(data_port, port);
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let cause = match kill_echo {
            true => "the echo connection failed: Software caused connection abort",
            false => "write: Software caused connection abort",
        };
        let line = stderr.lines().find(|l| l.starts_with("pinperf: stream-"));
        assert!(
            line.is_some_and(|l| l.split_once(": stream-").is_some_and(|(_, r)| r
                .split_once(": ")
                .is_some_and(|(_, r)| r.starts_with(cause)))),
            "echo {echo} kill_echo {kill_echo}: the client's own error first: {stderr}"
        );
        let logged = server.wait_for_log(" failed: ", Duration::from_secs(3));
        let (_, theirs) = logged.split_once(" reported: stream-").unwrap_or_else(|| {
            panic!("echo {echo} kill_echo {kill_echo}: the client's word: {logged}")
        });
        assert!(
            theirs
                .split_once(": ")
                .is_some_and(|(_, r)| r.starts_with(cause)),
            "echo {echo} kill_echo {kill_echo}: the server logs the client's cause first: {logged}"
        );
        eprintln!("echo {echo} kill_echo {kill_echo}: client: {stderr}server: {logged}");
    }
}

#[test]
fn a_reset_echo_connection_fails_the_test_and_says_so() {
    if let Err(why) = can_kill_sockets() {
        util::skipped("a_reset_echo_connection_fails_the_test_and_says_so", &why);
        return;
    }
    let data_port = free_port();
    let server = Server::start(&["--data-port", &data_port.to_string()]);
    let child = Command::new(bin())
        .args(["-c", "127.0.0.1", "-p", &server.port_arg()])
        .args(["-t", "6", "-i", "0.5", "-J"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    // The echo connection has carried only its hello; wait until data flows.
    let deadline = Instant::now() + Duration::from_secs(3);
    let echo = loop {
        let conns = connections(data_port);
        if conns.len() == 2 && conns.iter().any(|c| c.1 > 1 << 20) {
            break conns.iter().min_by_key(|c| c.1).map(|c| c.0);
        }
        assert!(
            Instant::now() < deadline,
            "no data and echo connection: {conns:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    reset(data_port, echo.expect("echo connection"));
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the echo connection failed"), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a -J document");
    // The reset comes in the first interval: no row, so no totals and no empty row; a
    // reset after rows keeps their totals (the data connection's test above).
    assert!(
        doc["intervals"].as_array().is_some_and(|ivs| ivs
            .iter()
            .all(|iv| iv["sum"]["seconds"].as_f64() > Some(0.0))),
        "no zero-length rows: {doc}"
    );
    assert!(
        doc["end"].is_null() || doc["end"]["cut_short"] == true,
        "totals of a failed test are marked cut short: {doc}"
    );
    assert!(
        doc["error"]
            .as_str()
            .unwrap_or("")
            .contains("echo connection"),
        "{doc}"
    );
}

/// An iperf3 server stopped by a signal says so (`SERVER_TERMINATE`) and closes its data
/// connections: that is the cause, not the streams it resets, so no stream is said to have
/// failed and the totals so far are marked cut short.
#[test]
fn an_iperf3_server_stopped_by_a_signal_is_the_cause_not_its_streams() {
    let test = "an_iperf3_server_stopped_by_a_signal_is_the_cause_not_its_streams";
    if util::iperf3::iperf3(test).is_none() {
        return;
    }
    let port = free_port();
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iperf3 -s");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !util::iperf3::listening(port) {
        assert!(Instant::now() < deadline, "iperf3 -s never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut child = Command::new(bin())
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--peer",
            "iperf3",
        ])
        .args(["-P", "2", "-t", "8", "-i", "0.5", "--json-lines"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    for line in lines.by_ref() {
        if line.expect("read").contains("\"event\":\"interval\"") {
            break;
        }
    }
    // SIGTERM to the iperf3 server this test started.
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let stopped = Instant::now();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    let took = stopped.elapsed();
    let _ = server.kill();
    let _ = server.wait();
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap();
    let explain = format!("status {status:?} after {took:?}\nstdout {rest:#?}\nstderr {stderr}");
    assert_eq!(status.code(), Some(1), "{explain}");
    assert!(took < Duration::from_secs(2), "{explain}");
    assert!(
        stderr.contains("SERVER_TERMINATE"),
        "the server's word: {explain}"
    );
    assert!(!stderr.contains("pinperf: stream-"), "{explain}");
    assert!(
        !rest
            .iter()
            .any(|l| l.contains("\"event\":\"stream_failed\"")),
        "{explain}"
    );
    assert!(
        rest.iter()
            .any(|l| l.contains("\"event\":\"end\"") && l.contains("\"cut_short\":true")),
        "the totals so far, cut short: {explain}"
    );
}

/// A server out of descriptors while it accepts the data connections closes its listener:
/// the client's connect is refused after the handshake, and the server's word, which names
/// the cause, leads (it said only "Connection refused" and blamed the port 4 runs in 6).
#[test]
fn a_server_out_of_descriptors_in_setup_is_named_by_the_client() {
    let test = "a_server_out_of_descriptors_in_setup_is_named_by_the_client";
    let Some((mut server, port, drain)) = server_with_16_descriptors(test) else {
        return;
    };
    let run = util::pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "1",
            "-P",
            "8",
        ],
        Duration::from_secs(10),
    );
    let _ = server.kill();
    let _ = server.wait();
    let logged: Vec<String> = drain.iter().collect();
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    let stderr = run.stderr();
    assert!(
        stderr.starts_with(&format!(
            "pinperf: 127.0.0.1:{port} reported: accept data connection: the server is out \
             of file descriptors"
        )),
        "{}\nserver log: {logged:#?}",
        run.explain()
    );
}

/// A `pinperf -s` on 127.0.0.1 limited to 16 open files (`prlimit`), its port, and a
/// thread collecting its log; None (said) without prlimit.
fn server_with_16_descriptors(
    test: &str,
) -> Option<(std::process::Child, u16, std::sync::mpsc::Receiver<String>)> {
    if Command::new("prlimit").arg("--version").output().is_err() {
        util::skipped(test, "no prlimit (util-linux)");
        return None;
    }
    let mut server = Command::new("prlimit")
        .args(["--nofile=16", bin(), "-s", "-B", "127.0.0.1", "-p", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn prlimit pinperf -s");
    let mut log = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let port = log
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| util::listening_port(&l))
        .expect("the server's port");
    // The rest of its log comes through a channel as it is written.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in log.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Some((server, port, rx))
}

/// The same server out of descriptors while it sets up an iperf3 client's 6 streams: the
/// client hears why (SERVER_ERROR, iperf3's "unable to initialize stream"); it said only
/// "control socket has closed unexpectedly".
#[test]
fn an_iperf3_client_hears_why_the_server_could_not_set_up_its_streams() {
    let test = "an_iperf3_client_hears_why_the_server_could_not_set_up_its_streams";
    if util::iperf3::iperf3(test).is_none() {
        return;
    }
    let Some((mut server, port, drain)) = server_with_16_descriptors(test) else {
        return;
    };
    let (code, stdout, stderr, _) = util::iperf3::iperf3_client(port, &["-t", "1", "-P", "6"]);
    // The client ends when it hears; the server logs its failure after telling it.
    let _ = server.kill();
    let _ = server.wait();
    let logged: Vec<String> = drain.iter().collect();
    let explain = format!("{code:?}\n{stdout}\n{stderr}\nserver log: {logged:#?}");
    assert_eq!(code, Some(1), "{explain}");
    // Which step runs out first depends on the descriptors the server holds meanwhile:
    // usually duplicating the streams' sockets ("unable to initialize stream"), sometimes
    // accepting the last stream ("unable to accept stream connection", at the deadline).
    let heard = format!("{stdout}{stderr}");
    assert!(
        heard.contains("error - unable to initialize stream")
            || heard.contains("error - unable to accept stream connection"),
        "{explain}"
    );
}

/// `--rcv-timeout MS`, iperf3's: a receiving end that reads nothing for that long ends the
/// test, named, on a server (every test it receives) and on a client (`-R`); a trickle
/// within the limit runs to its end.
#[test]
fn a_receiver_idle_past_its_rcv_timeout_ends_the_test() {
    let server = Server::start(&["--rcv-timeout", "1000"]);
    let port = server.port_arg();
    let udp = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-u",
        "-l",
        "1400",
        "-t",
        "4",
    ];
    let slow = [&udp[..], &["-b", "1k"]].concat();
    let run = util::pinperf(&slow, Duration::from_secs(10));
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    // The idle time is read on the receiver's next wake-up: 1.0 s, or 1.1 on a busy host.
    let err = run.stderr();
    assert!(
        ["1.0", "1.1"]
            .iter()
            .any(|s| err.contains(&format!("no data received for {s} s (--rcv-timeout 1.0)"))),
        "{}",
        run.explain()
    );
    assert!(
        run.elapsed < Duration::from_secs(3),
        "cut at the limit: {}",
        run.explain()
    );
    let mine = [&udp[..], &["-b", "1k", "-R", "--rcv-timeout", "1000"]].concat();
    let run = util::pinperf(&mine, Duration::from_secs(10));
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains("(--rcv-timeout 1.0)"),
        "{}",
        run.explain()
    );
    let trickle = [&udp[..], &["-b", "200k", "-t", "1.5"]].concat();
    util::pinperf(&trickle, Duration::from_secs(10)).assert_ok();
}
