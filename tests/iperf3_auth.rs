//! iperf3's RSA authentication against the real iperf3 (Debian's 3.12, which pads with
//! PKCS#1 v1.5: both ends here take `--use-pkcs1-padding`), both ways, and between two
//! pinperf ends with OAEP. The key pair and users file (mary/secret) are fixtures. Each
//! test skips, saying so, when no `iperf3` is on PATH.

mod util;

use std::process::{Command, Stdio};
use std::time::Duration;

use util::iperf3::{LIMIT, iperf3, listening};
use util::{Server, pinperf};

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/iperf3-auth/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `pinperf -c … --peer iperf3` with mary's credentials and `password`.
fn client(port: u16, password: &str, extra: &[&str]) -> util::Run {
    let key = fixture("public.pem");
    let port = port.to_string();
    let mut args = vec![
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--peer",
        "iperf3",
        "-t",
        "0.5",
        "--username",
        "mary",
        "--rsa-public-key-path",
        &key,
    ];
    args.extend_from_slice(extra);
    let t0 = std::time::Instant::now();
    let output = Command::new("timeout")
        .arg(LIMIT.as_secs().to_string())
        .arg(util::bin())
        .args(&args)
        .env("IPERF3_PASSWORD", password)
        .stdin(Stdio::null())
        .output()
        .expect("run pinperf");
    util::Run {
        args: args.iter().map(|a| a.to_string()).collect(),
        output,
        elapsed: t0.elapsed(),
    }
}

/// Spawns `cmd` (a server told to listen on `port`) and waits until it listens.
fn listening_on(mut cmd: Command, port: u16) -> std::process::Child {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the server");
    util::wait_until(
        "the server listens",
        Duration::from_secs(5),
        || listening(port).then_some(()),
        String::new,
    );
    child
}

/// Waits for a server that should end on its own, and says whether it ended well.
fn ends_well(child: &mut std::process::Child, what: &str) -> bool {
    util::wait_until(
        what,
        Duration::from_secs(5),
        || child.try_wait().ok().flatten(),
        String::new,
    )
    .success()
}

/// `iperf3 -s -1` with the fixture key and users.
fn iperf3_server() -> (std::process::Child, u16) {
    let port = util::free_port();
    let mut cmd = Command::new("iperf3");
    cmd.args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
        .args(["--rsa-private-key-path", &fixture("private.pem")])
        .args(["--authorized-users-path", &fixture("users.csv")]);
    (listening_on(cmd, port), port)
}

/// The real `iperf3 -c 127.0.0.1 -p port -t 1` as mary, with `password` and `extra`.
fn iperf3_as_mary(port: &str, password: &str, extra: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg(LIMIT.as_secs().to_string())
        .args(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "1"])
        .args([
            "--username",
            "mary",
            "--rsa-public-key-path",
            &fixture("public.pem"),
        ])
        .args(extra)
        .env("IPERF3_PASSWORD", password)
        .output()
        .expect("run iperf3 -c")
}

#[test]
fn pinperfs_credentials_open_an_iperf3_server_and_a_wrong_password_does_not() {
    let test = "pinperfs_credentials_open_an_iperf3_server_and_a_wrong_password_does_not";
    if iperf3(test).is_none() {
        return;
    }
    let (mut server, port) = iperf3_server();
    client(port, "secret", &["--use-pkcs1-padding"]).assert_ok();
    let _ = server.wait();
    let (mut server, port) = iperf3_server();
    let run = client(port, "guess", &["--use-pkcs1-padding"]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains("test authorization failed"),
        "{}",
        run.explain()
    );
    let _ = server.kill();
    let _ = server.wait();
}

/// A pinperf server with iperf3's gate: an iperf3 client with the password tests, one
/// with another is refused (logged as `auth`), and a pinperf client of pinperf's own
/// protocol is told what the server takes.
#[test]
fn an_iperf3_client_authenticates_at_a_pinperf_server() {
    let test = "an_iperf3_client_authenticates_at_a_pinperf_server";
    if iperf3(test).is_none() {
        return;
    }
    let (key, users) = (fixture("private.pem"), fixture("users.csv"));
    let mut server = Server::start(&[
        "--rsa-private-key-path",
        &key,
        "--authorized-users-path",
        &users,
        "--use-pkcs1-padding",
    ]);
    let port = server.port_arg();
    let iperf3 = |password: &str| iperf3_as_mary(&port, password, &[]);
    let ok = iperf3("secret");
    assert!(ok.status.success(), "{ok:?}{}", server.explain());
    server.wait_for_log("user mary", Duration::from_secs(5));
    let bad = iperf3("guess");
    assert!(!bad.status.success(), "{bad:?}");
    let said = String::from_utf8_lossy(&bad.stderr) + String::from_utf8_lossy(&bad.stdout);
    assert!(said.contains("authorization failed"), "{said}");
    server.wait_for_log("unknown, or a wrong password", Duration::from_secs(5));
    let native = pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "0.5"], LIMIT);
    assert_eq!(native.code(), Some(1), "{}", native.explain());
    assert!(
        native.stderr().contains("iperf3's RSA authentication only"),
        "{}",
        native.explain()
    );
}

/// Two pinperf ends, OAEP as iperf3 3.17 and later: the client's credentials open the
/// server; without them it is refused.
#[test]
fn two_pinperf_ends_speak_iperf3s_oaep_credentials() {
    let (key, users) = (fixture("private.pem"), fixture("users.csv"));
    let server = Server::start(&[
        "--rsa-private-key-path",
        &key,
        "--authorized-users-path",
        &users,
    ]);
    client(server.port, "secret", &[]).assert_ok();
    // Credentials to a server that asks none are not needed, and not refused (as at
    // iperf3's server).
    client(Server::start(&[]).port, "secret", &[]).assert_ok();
    let port = server.port_arg();
    let bare = pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "--peer",
            "iperf3",
            "-t",
            "0.5",
        ],
        LIMIT,
    );
    assert_eq!(bare.code(), Some(1), "{}", bare.explain());
    assert!(
        bare.stderr().contains("test authorization failed"),
        "{}",
        bare.explain()
    );
}

/// pScheduler's server command, `iperf3 -s -1 --idle-timeout N --json -p PORT` with its
/// key and users, run through pinperf's iperf3 command line: a real iperf3 client with
/// the credentials tests, then the one-off server ends; with no client it ends when idle.
#[test]
fn pschedulers_server_command_serves_an_authenticated_iperf3_client() {
    let test = "pschedulers_server_command_serves_an_authenticated_iperf3_client";
    if iperf3(test).is_none() {
        return;
    }
    let server = |idle: &str| {
        let port = util::free_port();
        let mut cmd = Command::new(util::bin());
        cmd.args(["iperf3", "-s", "-1", "--idle-timeout", idle, "--json"])
            .args([
                "-B",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--use-pkcs1-padding",
            ])
            .args(["--authorized-users-path", &fixture("users.csv")])
            .args(["--rsa-private-key-path", &fixture("private.pem")]);
        (listening_on(cmd, port), port)
    };
    let (mut child, port) = server("10");
    let out = iperf3_as_mary(&port.to_string(), "secret", &["-J"]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["end"]["sum_received"]["bytes"].as_u64() > Some(0),
        "{doc}"
    );
    assert!(ends_well(&mut child, "the one-off server ends"));
    let (mut idle, _) = server("1");
    assert!(ends_well(&mut idle, "the idle server ends"));
}

/// iperf3 credentials that fail count against their source as pinperf's do: the fourth
/// failure within a minute locks the address out, and the log says for how long.
#[test]
fn failed_iperf3_credentials_lock_their_source_out() {
    let test = "failed_iperf3_credentials_lock_their_source_out";
    if iperf3(test).is_none() {
        return;
    }
    let (key, users) = (fixture("private.pem"), fixture("users.csv"));
    let mut server = Server::start(&[
        "--rsa-private-key-path",
        &key,
        "--authorized-users-path",
        &users,
        "--use-pkcs1-padding",
    ]);
    let port = server.port_arg();
    for _ in 0..4 {
        let out = iperf3_as_mary(&port, "guess", &[]);
        assert!(!out.status.success(), "{out:?}");
    }
    server.wait_for_log("its connections are refused for", Duration::from_secs(5));
}
