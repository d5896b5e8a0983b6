//! Speaking iperf3, against the real iperf3 binary (Debian's 3.12 in CI; `.ci/run` installs
//! it): pinperf's client against `iperf3 -s`, `iperf3 -c` against `pinperf -s`, both
//! ends' byte counts compared, and refusals both ways. Each test skips, saying so, when
//! no `iperf3` is on PATH.

mod util;

use std::time::Duration;

use serde_json::Value;
use util::iperf3::{Iperf3Server, LIMIT, iperf3, iperf3_client};
use util::{Server, pinperf};

fn bytes(doc: &Value, sum: &str) -> u64 {
    doc["end"][sum]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.{sum}.bytes in {doc}"))
}

/// pinperf's client against `iperf3 -s`: exit 0, and pinperf's count of what its pinned
/// threads moved is the iperf3 server's own count of what it received or sent.
fn client_against_iperf3(test: &str, args: &[&str], reverse: bool) {
    if iperf3(test).is_none() {
        return;
    }
    let server = Iperf3Server::start(&[]);
    let port = server.port.to_string();
    let mut all = vec![
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--peer",
        "iperf3",
        "-t",
        "1",
    ];
    all.extend_from_slice(args);
    let run = pinperf(&all, LIMIT);
    run.assert_ok();
    let out = run.stdout();
    assert!(
        out.contains("iperf3 server; live rows are this end's counts"),
        "{}",
        run.explain()
    );
    let (sent, received) = util::byte_totals(&out).unwrap_or_else(|| panic!("{}", run.explain()));
    let doc = server.document();
    // Both count at the socket layer: what write() took and what read() returned.
    match reverse {
        false => assert_eq!(bytes(&doc, "sum_received"), sent, "{}", run.explain()),
        true => assert_eq!(bytes(&doc, "sum_sent"), received, "{}", run.explain()),
    }
    assert_eq!(sent, received, "{}", run.explain());
}

#[test]
fn pinperf_client_against_iperf3_server_one_stream() {
    client_against_iperf3(
        "pinperf_client_against_iperf3_server_one_stream",
        &["-P", "1"],
        false,
    );
}

#[test]
fn pinperf_client_against_iperf3_server_four_streams() {
    client_against_iperf3(
        "pinperf_client_against_iperf3_server_four_streams",
        &["-P", "4"],
        false,
    );
}

#[test]
fn pinperf_client_against_iperf3_server_reverse() {
    client_against_iperf3(
        "pinperf_client_against_iperf3_server_reverse",
        &["-R", "-P", "2"],
        true,
    );
}

#[test]
fn pinperf_client_detects_an_iperf3_server_and_switches() {
    let test = "pinperf_client_detects_an_iperf3_server_and_switches";
    if iperf3(test).is_none() {
        return;
    }
    let server = Iperf3Server::start(&[]);
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &server.port.to_string(), "-t", "1"],
        LIMIT,
    );
    run.assert_ok();
    assert!(
        run.stderr().contains("speaking iperf3"),
        "{}",
        run.explain()
    );
    let (sent, _) = util::byte_totals(&run.stdout()).expect("totals");
    assert_eq!(bytes(&server.document(), "sum_received"), sent);
}

/// `iperf3 -c … -J` against `pinperf -s`: exit 0, a valid document whose receiver side
/// (pinperf's count) equals iperf3's sender side to the byte, and the server's log says
/// the same number.
fn iperf3_against_pinperf(test: &str, args: &[&str], reverse: bool) -> Option<Value> {
    iperf3(test)?;
    let mut server = Server::start(&[]);
    let mut all = vec!["-t", "1", "-J"];
    all.extend_from_slice(args);
    let (code, out, err, _) = iperf3_client(server.port, &all);
    assert_eq!(
        code,
        Some(0),
        "iperf3 -c failed: {out}{err}\nserver log:\n{}",
        server.log()
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert!(doc.get("error").is_none(), "{doc}");
    let (sent, received) = (bytes(&doc, "sum_sent"), bytes(&doc, "sum_received"));
    match reverse {
        // pinperf receives: it reads until each stream has what iperf3 says it wrote.
        false => assert_eq!(sent, received, "{doc}"),
        // iperf3 receives: it counts what it has read when it sends TEST_END; what its
        // socket still holds then is never counted (the two cannot agree to the byte).
        true => assert!(received <= sent && received > 0, "{doc}"),
    }
    let line = server.wait_for_log("iperf3 test from", Duration::from_secs(5));
    let logged = server.wait_for_log("done, received", Duration::from_secs(5));
    let count = if reverse { sent } else { received };
    assert!(
        logged.contains(&format!(
            "{} {count} bytes",
            if reverse { "sent" } else { "received" }
        )),
        "{line}\n{logged}"
    );
    Some(doc)
}

#[test]
fn iperf3_client_against_pinperf_server_four_streams_json() {
    let Some(doc) = iperf3_against_pinperf(
        "iperf3_client_against_pinperf_server_four_streams_json",
        &["-P", "4"],
        false,
    ) else {
        return;
    };
    assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(4));
}

#[test]
fn iperf3_client_against_pinperf_server_reverse() {
    iperf3_against_pinperf(
        "iperf3_client_against_pinperf_server_reverse",
        &["-R"],
        true,
    );
}

#[test]
fn iperf3_client_gets_pinned_stream_threads_and_its_normal_report() {
    let test = "iperf3_client_gets_pinned_stream_threads_and_its_normal_report";
    if iperf3(test).is_none() {
        return;
    }
    let server = Server::start(&[]);
    let pid = server.child.id();
    let port = server.port;
    let client = std::thread::spawn(move || iperf3_client(port, &["-P", "4", "-t", "2"]));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = util::wait_until(
        "stream-0..3 threads on the server",
        Duration::from_secs(5),
        || {
            // Named at spawn, pinned a moment later by the thread itself.
            let t = util::threads(pid);
            let pinned = |a: &String| cores == 1 || !a.contains(['-', ',']);
            let streams = t
                .iter()
                .filter(|(n, a)| n.starts_with("stream-") && pinned(a));
            (streams.count() == 4).then_some(t)
        },
        || format!("{:?}", util::threads(pid)),
    );
    let (code, out, err, _) = client.join().expect("client thread");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("iperf Done."), "{out}");
    assert!(out.contains("receiver"), "{out}");
    for i in 0..4 {
        let (_, allowed) = threads
            .iter()
            .find(|(n, _)| *n == format!("stream-{i}"))
            .unwrap_or_else(|| panic!("no stream-{i} in {threads:?}"));
        if cores > 1 {
            assert!(
                !allowed.contains(['-', ',']),
                "stream-{i} not pinned: {allowed}"
            );
        }
    }
}

#[test]
fn a_busy_pinperf_server_refuses_an_iperf3_client_at_once() {
    let test = "a_busy_pinperf_server_refuses_an_iperf3_client_at_once";
    if iperf3(test).is_none() {
        return;
    }
    let mut server = Server::start(&[]);
    let port = server.port;
    let first = std::thread::spawn(move || iperf3_client(port, &["-t", "3"]));
    server.wait_for_log("iperf3 test from", Duration::from_secs(5));
    let (code, out, err, took) = iperf3_client(port, &["-t", "1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(format!("{out}{err}").contains("busy"), "{out}{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(first.join().expect("first").0, Some(0));
}

#[test]
fn a_pinperf_server_refuses_an_iperf3_client_over_its_limit_with_a_reason() {
    let test = "a_pinperf_server_refuses_an_iperf3_client_over_its_limit_with_a_reason";
    if iperf3(test).is_none() {
        return;
    }
    let mut server = Server::start(&["--max-streams", "2"]);
    let (code, out, err, took) = iperf3_client(server.port, &["-P", "4", "-t", "1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("parallel streams"),
        "{out}{err}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let log = server.wait_for_log("refused", Duration::from_secs(5));
    assert!(log.contains("--max-streams"), "{log}");
    // And a UDP test, which this server does not run for iperf3 clients.
    let (code, out, err, _) = iperf3_client(server.port, &["-u", "-t", "1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(format!("{out}{err}").contains("protocol"), "{out}{err}");
}

#[test]
fn a_busy_iperf3_server_refuses_pinperf_with_the_reason() {
    let test = "a_busy_iperf3_server_refuses_pinperf_with_the_reason";
    if iperf3(test).is_none() {
        return;
    }
    let server = Iperf3Server::start(&[]);
    let port = server.port;
    let first = std::thread::spawn(move || iperf3_client(port, &["-t", "3"]));
    std::thread::sleep(Duration::from_millis(500));
    let run = pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--peer",
            "iperf3",
            "-t",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(run.stderr().contains("busy"), "{}", run.explain());
    assert!(run.elapsed < Duration::from_secs(3), "{}", run.explain());
    assert_eq!(first.join().expect("first").0, Some(0));
}

#[test]
fn options_an_iperf3_server_cannot_take_are_refused_by_name() {
    // No iperf3 needed: refused before any connection.
    let port = util::free_port().to_string();
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &port, "--peer", "iperf3", "-u"],
        LIMIT,
    );
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("-u: not available against an iperf3 server"),
        "{}",
        run.explain()
    );
}
