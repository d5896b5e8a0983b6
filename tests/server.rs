//! The server under hostile or unlucky conditions: clients that vanish during stream setup,
//! idle and garbage connections on the data port, IPv4 and IPv6 clients of one server,
//! options that would fail every test, and a process out of file descriptors. Each test
//! runs the real binary and sequences itself on the server's log lines or on connection
//! state, never on fixed sleeps.

mod util;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pinperf::wire::{self, Accept, ControlMsg, PROTOCOL_VERSION, TestParams};
use util::{Run, Server, pinperf, spawn};

const LIMIT: Duration = Duration::from_secs(20);

/// A `pinperf -s` started with exactly the given arguments (no forced `-B`), killed on drop.
struct Srv {
    child: Child,
    /// What the server printed after `listening on`.
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    fn start(args: &[&str]) -> Srv {
        Srv::start_with(args, |line| {
            line.split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next()?.parse().ok())
        })
    }

    /// A server with `--log-format json` among `args`: its address from the `listening` event.
    fn start_json(args: &[&str]) -> Srv {
        Srv::start_with(args, |line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v["event"] == "listening").then(|| v["address"].as_str()?.parse().ok())?
        })
    }

    fn start_with(args: &[&str], addr_of: fn(&str) -> Option<SocketAddr>) -> Srv {
        let mut argv = vec!["-s"];
        argv.extend_from_slice(args);
        let mut child = spawn(&argv);
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(addr) = addr_of(&line) {
                    let _ = tx.send(Some(addr));
                }
                log2.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(5))
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "pinperf {argv:?} did not report its address; log: {:?}",
                    log.lock().unwrap()
                )
            });
        Srv { child, addr, log }
    }

    fn port(&self) -> String {
        self.addr.port().to_string()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits until `n` log lines contain `needle`; false if `within` passes first.
    fn wait_for_n(&self, needle: &str, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.count(needle) < n {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    fn wait_for(&self, needle: &str, within: Duration) -> bool {
        self.wait_for_n(needle, 1, within)
    }

    /// User plus system CPU of the server process, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real client run against `host` and `port`: `-t 0.3` unless `extra` says otherwise.
fn client(host: &str, port: &str, extra: &[&str]) -> Run {
    let mut args = vec!["-c", host, "-p", port];
    if !extra.contains(&"-t") {
        args.extend(["-t", "0.3", "-i", "0.3"]);
    }
    args.extend_from_slice(extra);
    pinperf(&args, LIMIT)
}

/// Speaks the protocol up to the server's Accept, as a client would, and returns the
/// control connection and the Accept.
fn handshake(addr: SocketAddr, params: TestParams) -> (TcpStream, Accept) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(wire::PREAMBLE).unwrap();
    s.write_all(&wire::encode(&ControlMsg::Hello {
        version: PROTOCOL_VERSION,
        software: "a raw test client".into(),
    }))
    .unwrap();
    s.write_all(&wire::encode(&ControlMsg::Params(params)))
        .unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    assert_eq!(&pre, wire::PREAMBLE);
    let peer = s.peer_addr().unwrap();
    match wire::read_frame(&mut s, peer).unwrap() {
        ControlMsg::Welcome { .. } => {}
        other => panic!("expected welcome, got {other:?}"),
    }
    match wire::read_frame(&mut s, peer).unwrap() {
        ControlMsg::Accept(accept) => (s, accept),
        other => panic!("expected accept, got {other:?}"),
    }
}

/// `--realtime`: a server started with `--allow-realtime` says in its Accept that it
/// granted it, and a client whose server answers without the grant (as a pinperf that
/// predates the flag does: it drops the unknown field) refuses the answer by name rather
/// than report real-time receivers the server never ran.
#[test]
fn the_realtime_grant_travels_in_the_accept_and_an_answer_without_it_is_refused() {
    let udp = TestParams {
        udp: true,
        rate_bps: Some(1_000_000),
        realtime: true,
        ..TestParams::defaults()
    };
    // What a server that predates --realtime answers: its Accept for the same test.
    let plain = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let without = TestParams {
        realtime: false,
        ..udp.clone()
    };
    let (ctl, old_answer) = handshake(plain.addr, without);
    drop(ctl);
    assert!(!old_answer.realtime, "{old_answer:?}");
    match util::may_fifo() {
        Ok(()) => {
            let granting = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--allow-realtime"]);
            let (_ctl, accept) = handshake(granting.addr, udp.clone());
            assert!(accept.realtime, "{accept:?}");
        }
        Err(why) => util::skipped(
            "the_realtime_grant_travels_in_the_accept (the granting server)",
            &why,
        ),
    }
    // A server of the protocol's version that ignores the request.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let old = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The client sends Hello only once its preamble is answered (an iperf3 server
        // stays silent).
        s.write_all(wire::PREAMBLE).unwrap();
        let mut pre = [0u8; 8];
        s.read_exact(&mut pre).unwrap();
        assert!(matches!(
            wire::read_frame(&mut s, peer).unwrap(),
            ControlMsg::Hello { .. }
        ));
        s.write_all(&wire::encode(&ControlMsg::Welcome {
            version: PROTOCOL_VERSION,
            software: "pinperf 0.0.9".into(),
        }))
        .unwrap();
        let asked = match wire::read_frame(&mut s, peer).unwrap() {
            ControlMsg::Params(p) => p,
            other => panic!("expected params, got {other:?}"),
        };
        s.write_all(&wire::encode(&ControlMsg::Accept(old_answer)))
            .unwrap();
        // The client leaves without a data connection.
        let _ = s.read_to_end(&mut Vec::new());
        asked.realtime
    });
    let run = client(
        "127.0.0.1",
        &port,
        &["-u", "-b", "1M", "--realtime", "-t", "0.2"],
    );
    assert!(old.join().unwrap(), "the client asked for --realtime");
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains(
            "--realtime: the server (pinperf 0.0.9) did not grant it: it predates --realtime"
        ),
        "{}",
        run.explain()
    );
    assert!(!run.stdout().contains("# priority:"), "{}", run.explain());
}

/// Reads a refused connection's answer: preamble, then the Refuse reason.
fn refusal(mut s: TcpStream) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).ok()?;
    let peer = s.peer_addr().ok()?;
    match wire::read_frame(&mut s, peer).ok()? {
        ControlMsg::Refuse { reason } => Some(reason),
        _ => None,
    }
}

fn has_ipv6_loopback() -> bool {
    TcpListener::bind("[::1]:0").is_ok()
}

/// A test this client refuses once its streams are connected (a --fq-rate too slow for
/// the kernel's bursts) is told to the server, which logs the reason (it logged "the
/// client gave up while connecting its streams") and serves the next test.
#[test]
fn a_client_side_refusal_reaches_the_servers_log() {
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let run = client("127.0.0.1", &port, &["-t", "1", "--fq-rate", "50k"]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.explain());
    let line = server.wait_for_log(" failed: ", Duration::from_secs(5));
    assert!(line.contains("reported: --fq-rate 50k: "), "{line}");
    client("127.0.0.1", &port, &[]).assert_ok();
}

#[test]
fn a_client_gone_after_accept_frees_the_server_at_once() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let mut params = TestParams::defaults();
    params.streams = 2;
    params.duration = Duration::from_millis(500);
    let (mut ctl, accept) = handshake(server.addr, params);
    assert_ne!(accept.data_port, 0);
    // The client closes its control connection without opening a data connection. The
    // server must notice now, not after the 10 s the data connections may take: it says
    // why and closes within the 2 s this read waits.
    let (peer, me) = (ctl.peer_addr().unwrap(), ctl.local_addr().unwrap());
    ctl.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    ctl.shutdown(Shutdown::Write).unwrap();
    let closed = Instant::now();
    match wire::read_frame(&mut ctl, peer) {
        Ok(ControlMsg::Error { reason }) => assert!(
            reason.starts_with("the client gave up while connecting its streams (0 of 4"),
            "{reason}"
        ),
        other => panic!(
            "expected the server's error within 2 s, got {other:?} after {:?}\n{}",
            closed.elapsed(),
            server.log()
        ),
    }
    let mut rest = Vec::new();
    assert_eq!(ctl.read_to_end(&mut rest).unwrap(), 0, "then it closes");
    // The slot is free at once: the next client runs, it is not told "busy".
    let run = client("127.0.0.1", &server.port(), &[]);
    run.assert_ok();
    assert!(
        server.wait_for(": done, received", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    assert!(
        server.log().contains(&format!(
            "test from {me} failed: the client gave up while connecting its streams"
        )),
        "{}",
        server.log()
    );
}

/// A control-connection relay for one real client: copies client→server as is and
/// server→client frame by frame; when the server's Accept passes, it first opens `idle`
/// silent connections and, with any, one garbage connection to the data port, so the
/// server has them queued before the client's real data connections. Returns the relay's
/// address and a handle giving back those extra connections when the test ends.
fn relay(server: SocketAddr, idle: usize) -> (SocketAddr, JoinHandle<Vec<TcpStream>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let mut up = TcpStream::connect(server).unwrap();
        let (mut from_client, mut to_server) =
            (client.try_clone().unwrap(), up.try_clone().unwrap());
        let forward = std::thread::spawn(move || {
            let _ = std::io::copy(&mut from_client, &mut to_server);
            let _ = to_server.shutdown(Shutdown::Write);
        });
        let mut to_client = client;
        let mut extra = Vec::new();
        let mut pre = [0u8; 8];
        if up.read_exact(&mut pre).is_ok() && to_client.write_all(&pre).is_ok() {
            let peer = up.peer_addr().unwrap();
            while let Ok(msg) = wire::read_frame(&mut up, peer) {
                if let ControlMsg::Accept(a) = &msg {
                    let data = SocketAddr::new(server.ip(), a.data_port);
                    for _ in 0..idle {
                        extra.push(TcpStream::connect(data).unwrap());
                    }
                    if idle > 0 {
                        let mut garbage = TcpStream::connect(data).unwrap();
                        garbage.write_all(&[0xff; 11]).unwrap();
                        extra.push(garbage);
                    }
                }
                if to_client.write_all(&wire::encode(&msg)).is_err() {
                    break;
                }
            }
        }
        let _ = to_client.shutdown(Shutdown::Write);
        let _ = forward.join();
        extra
    });
    (addr, handle)
}

#[test]
fn idle_and_garbage_data_connections_do_not_delay_the_real_ones() {
    let data_port = util::free_port().to_string();
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--data-port", &data_port]);
    let args = ["-P", "2", "-t", "0.5", "-i", "0.5"];
    // Without them, for comparison, through the same relay.
    let (addr, without_relay) = relay(server.addr, 0);
    let without = client("127.0.0.1", &addr.port().to_string(), &args);
    without.assert_ok();
    without_relay.join().unwrap();
    let (addr, with_relay) = relay(server.addr, 3);
    let with = client("127.0.0.1", &addr.port().to_string(), &args);
    let extra = with_relay.join().unwrap();
    with.assert_ok();
    assert_eq!(extra.len(), 4, "3 idle + 1 garbage connection were made");
    // The server saw them first, and dropped them without waiting on them; the garbage
    // one is a refusal like any other, for a log rule on "refused client".
    assert!(
        server.wait_for(
            "closed 3 data connection(s) that sent no stream hello",
            Duration::from_secs(2)
        ),
        "{}",
        server.log()
    );
    assert!(
        server
            .log()
            .lines()
            .any(|l| l.starts_with("pinperf: refused client 127.0.0.1:")
                && l.ends_with(": a data connection with a wrong test cookie or stream id")),
        "{}",
        server.log()
    );
    // About as long as without them (reading hellos one at a time took 10 s per idle one).
    assert!(
        with.elapsed < without.elapsed + Duration::from_secs(3),
        "with idle connections {:?}, without {:?}{}",
        with.elapsed,
        without.elapsed,
        with.explain()
    );
}

#[test]
fn without_b_the_server_listens_dual_stack() {
    let server = Srv::start(&["-p", "0"]);
    assert!(
        server.addr.ip().is_unspecified(),
        "listens on {}",
        server.addr
    );
    let port = server.port();
    client("127.0.0.1", &port, &[]).assert_ok();
    assert!(
        server.wait_for("test from 127.0.0.1:", Duration::from_secs(2)),
        "an IPv4 client is named by its IPv4 address\n{}",
        server.log()
    );
    if !has_ipv6_loopback() {
        util::skipped(
            "without_b_the_server_listens_dual_stack (-c ::1)",
            "this host has no IPv6 loopback (cannot bind [::1])",
        );
        return;
    }
    assert_eq!(
        server.addr.ip().to_string(),
        "::",
        "IPv6 wildcard, dual-stack"
    );
    let run = client("::1", &port, &["-P", "2"]);
    run.assert_ok();
    assert!(
        server.wait_for("test from [::1]:", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    assert!(!server.log().contains("::ffff:"), "{}", server.log());
}

#[test]
fn server_dash_4_and_dash_6_listen_on_one_family_only() {
    let v4 = Srv::start(&["-4", "-p", "0"]);
    assert_eq!(v4.addr.to_string(), format!("0.0.0.0:{}", v4.port()));
    client("127.0.0.1", &v4.port(), &[]).assert_ok();
    if !has_ipv6_loopback() {
        util::skipped(
            "server_dash_4_and_dash_6_listen_on_one_family_only (-6)",
            "this host has no IPv6 loopback (cannot bind [::1])",
        );
        return;
    }
    let run = client("::1", &v4.port(), &[]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains(&format!("connect to [::1]:{}", v4.port())),
        "{}",
        run.explain()
    );
    let v6 = Srv::start(&["-6", "-p", "0"]);
    assert_eq!(v6.addr.to_string(), format!("[::]:{}", v6.port()));
    client("::1", &v6.port(), &[]).assert_ok();
    let run = client("127.0.0.1", &v6.port(), &[]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains(&format!("connect to 127.0.0.1:{}", v6.port())),
        "{}",
        run.explain()
    );
}

#[test]
fn options_that_would_fail_every_test_are_refused_at_startup() {
    let limit = Duration::from_secs(5);
    let cases: [(&[&str], &str); 4] = [
        (
            &["-s", "-p", "0", "-A", "0,4095"],
            "pinperf: -A 0,4095: CPU 4095 is not available to this process (allowed: ",
        ),
        (
            &["-s", "-p", "7001", "--data-port", "7001"],
            "pinperf: --data-port 7001: must differ from the control port (-p 7001)\n",
        ),
        (
            &["-s", "-p", "0", "--max-window", "0"],
            "pinperf: --max-window 0: must be 1k to 1G (the window a client may ask for with -w)\n",
        ),
        (
            &["-s", "-p", "0", "--max-window", "512"],
            "pinperf: --max-window 512: must be 1k to 1G (the window a client may ask for with -w)\n",
        ),
    ];
    for (args, expected) in cases {
        let run = pinperf(args, limit);
        assert_eq!(run.code(), Some(2), "exits 2 at once{}", run.explain());
        assert!(run.stderr().starts_with(expected), "{}", run.explain());
    }
}

/// A `--data-port` another program listens on is refused at startup with the flag and the
/// fix, and by name to a client should it be taken later; the server started, then every
/// test failed with "bind 127.0.0.1:6110: Address already in use".
#[test]
fn a_data_port_in_use_is_refused_at_startup_by_its_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port().to_string();
    let run = pinperf(
        &["-s", "-B", "127.0.0.1", "-p", "0", "--data-port", &port],
        Duration::from_secs(5),
    );
    let says = format!("pinperf: --data-port {port}: the port is in use (another server there?)");
    assert_eq!(run.code(), Some(2), "exits 2 at once{}", run.explain());
    assert!(run.stderr().starts_with(&says), "{}", run.explain());
}

/// A port another program holds on one address only (127.0.0.2) leaves a wildcard server
/// the others: it starts, says so, and serves a test over 127.0.0.1 (the
/// startup probe on the wildcard refused to start).
#[test]
fn a_data_port_held_on_one_address_leaves_the_server_the_others() {
    let taken = std::net::TcpListener::bind("127.0.0.2:0").expect("bind");
    let port = taken.local_addr().expect("address").port().to_string();
    let server = Srv::start(&["-4", "-p", "0", "--data-port", &port]);
    let note =
        format!("--data-port {port} is in use on some of this host's addresses (not 127.0.0.1)");
    assert!(server.wait_for(&note, LIMIT), "{}", server.log());
    client("127.0.0.1", &server.port(), &[]).assert_ok();
}

/// Identical silent peers are logged alike: each handshake's own read times out at its
/// deadline and says what the peer did; the acceptor's cut, for one stuck elsewhere,
/// comes later (at the same moment, either wording won the race).
#[test]
fn silent_peers_are_logged_with_one_wording() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let silent: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(server.addr).expect("connect"))
        .collect();
    assert!(
        server.wait_for_n("refused client", silent.len(), Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let log = server.log();
    for line in log.lines().filter(|l| l.contains("refused client")) {
        assert!(
            line.ends_with("sent nothing on the control connection in time"),
            "{log}"
        );
    }
}

/// A flag of the other mode is refused by name (`-s -R`, `-s -P 4`, a client's
/// `--max-streams 2 -P 4` and `--loopback --max-rate 1M` ran, the flag ignored).
#[test]
fn a_flag_of_the_other_mode_is_refused_by_name() {
    let limit = Duration::from_secs(5);
    let client = "a client option; a server (-s) takes each test's parameters from its client";
    let server =
        "a server option (pinperf -s); a client, and --loopback's in-process server, take none";
    let report = "a client's report option; a server (-s) logs each test (text, or \
                  --log-format json) to stderr or --logfile, and its client reports it";
    let cases: [(&[&str], &str, &str); 8] = [
        (&["-s", "-p", "0", "-R"], "-R/--reverse", client),
        (
            &["-s", "-p", "0", "--connect-timeout", "3"],
            "--connect-timeout",
            client,
        ),
        (&["-s", "-p", "0", "--json-lines"], "--json-lines", report),
        (&["-s", "-p", "0", "--cpu"], "--cpu", report),
        (
            &["-s", "-p", "0", "-P", "4", "-t", "3"],
            "-P/--parallel",
            client,
        ),
        (&["-s", "-p", "0", "--engine", "single"], "--engine", client),
        (
            &["-c", "127.0.0.1", "-p", "1", "--max-streams", "2"],
            "--max-streams",
            server,
        ),
        (&["--loopback", "--max-rate", "1M"], "--max-rate", server),
    ];
    for (args, flag, why) in cases {
        let run = pinperf(args, limit);
        assert_eq!(run.code(), Some(2), "{args:?}{}", run.explain());
        assert_eq!(
            run.stderr(),
            format!("pinperf: {flag}: {why}\n"),
            "{args:?}"
        );
    }
}

#[test]
fn the_server_log_calls_its_peer_the_client() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--max-streams", "1"]);
    let port = server.port();
    let run = client("127.0.0.1", &port, &["-P", "2"]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        server.wait_for(
            "failed: refused the client's test: -P 2: streams must be 1 to 1 (this server's --max-streams)",
            Duration::from_secs(2)
        ),
        "{}",
        server.log()
    );
    // A busy answer, while a real test runs (a silent connection holds nothing), with
    // the time it has left.
    let mut running =
        util::Spawned::start(&["-c", "127.0.0.1", "-p", &port, "-t", "1.5", "-i", "0.5"]);
    assert!(
        server.wait_for("stream(s), block", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let run = client("127.0.0.1", &port, &[]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("refused the test: server busy: a test is running, about "),
        "{}",
        run.explain()
    );
    assert!(
        server.wait_for("refused client 127.0.0.1:", Duration::from_secs(3)),
        "{}",
        server.log()
    );
    let first = running.finish(LIMIT);
    first.assert_ok();
    let log = server.log();
    for line in log.lines() {
        assert!(
            !line.contains("server 127.0.0.1") && !line.contains("server [::1]"),
            "the server's log names its peer \"server\": {line}\n{log}"
        );
    }
}

/// The lowest file-descriptor limit that leaves `free` descriptors to process `pid`.
fn limit_leaving(pid: u32, free: usize) -> usize {
    let used: Vec<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut n = 0;
    let mut left = free;
    while left > 0 {
        if !used.contains(&n) {
            left -= 1;
        }
        n += 1;
    }
    n
}

#[test]
fn a_server_out_of_file_descriptors_says_so_once_and_recovers() {
    let has_prlimit = std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_prlimit {
        util::skipped(
            "a_server_out_of_file_descriptors_says_so_once_and_recovers",
            "no prlimit (util-linux) to lower the server's descriptor limit",
        );
        return;
    }
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    // Room for one whole test later (control, its clone, data listener, data, echo, a
    // /proc file), and few enough for a holder of the slot and busy answers to use up.
    const FREE: usize = 8;
    let limit = limit_leaving(server.child.id(), FREE);
    let set = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &server.child.id().to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .unwrap();
    assert!(set.success(), "prlimit failed");
    // Silent connections, each in its handshake (two descriptors: the connection and
    // the acceptor's handle to cut it) until its 2 s deadline: the descriptors run out.
    let idle: Vec<TcpStream> = (0..FREE)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    assert!(
        server.wait_for("pinperf: out of file descriptors", Duration::from_secs(3)),
        "{}",
        server.log()
    );
    let (cpu0, t0) = (server.cpu_ticks(), Instant::now());
    // Out of descriptors until the silent handshakes are cut (after 2 s).
    assert!(
        server.wait_for("refused client 127.0.0.1:", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let (cpu, wall) = (server.cpu_ticks() - cpu0, t0.elapsed());
    let ticks_per_s = 100.0; // USER_HZ on Linux
    assert!(
        (cpu as f64 / ticks_per_s) < 0.5 * wall.as_secs_f64(),
        "the acceptor spun: {cpu} ticks of CPU in {wall:?}"
    );
    let answers: Vec<Option<String>> = idle.into_iter().map(refusal).collect();
    let out_of_fds =
        format!("server out of file descriptors (its `ulimit -n` is {limit}); try again later");
    // A cut handshake hears the preamble and then the close: no reason (it sent nothing).
    assert!(
        answers
            .iter()
            .all(|a| a.is_none() || a.as_deref() == Some(&out_of_fds)),
        "{answers:?}"
    );
    let refused = answers
        .iter()
        .filter(|a| a.as_deref() == Some(&out_of_fds))
        .count();
    assert!(refused >= 1, "{answers:?}\n{}", server.log());
    let deadline = Instant::now() + Duration::from_secs(5);
    let run = loop {
        let run = client("127.0.0.1", &server.port(), &[]);
        let retry = run.stderr().contains("busy") || run.stderr().contains("file descriptors");
        if run.code() == Some(0) || !retry || Instant::now() > deadline {
            break run;
        }
    };
    run.assert_ok();
    let log = server.log();
    assert_eq!(
        server.count("out of file descriptors"),
        1,
        "one line per burst\n{log}"
    );
    assert!(
        log.contains(&format!(
            "pinperf: file descriptors are free again ({refused} client(s) refused meanwhile)"
        )),
        "{log}"
    );
}

/// A peer's parameters are checked before anything uses them: an empty server CPU list
/// (which no command line makes) is refused with its reason, and the server serves on.
#[test]
fn crafted_parameters_are_refused_and_the_server_serves_on() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let mut params = serde_json::to_value(ControlMsg::Params(TestParams::defaults())).unwrap();
    params["pin"] = serde_json::json!({ "list": [] });
    let body = serde_json::to_vec(&params).unwrap();
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(wire::PREAMBLE).unwrap();
    s.write_all(&wire::encode(&ControlMsg::Hello {
        version: PROTOCOL_VERSION,
        software: "a crafted client".into(),
    }))
    .unwrap();
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let peer = s.peer_addr().unwrap();
    assert!(matches!(
        wire::read_frame(&mut s, peer).unwrap(),
        ControlMsg::Welcome { .. }
    ));
    match wire::read_frame(&mut s, peer).unwrap() {
        ControlMsg::Refuse { reason } => assert!(reason.contains("CPU list"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}\n{}", server.log()),
    }
    drop(s);
    client("127.0.0.1", &server.port(), &[]).assert_ok();
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// Open descriptors and threads of process `pid`.
fn fds_and_threads(pid: u32) -> (usize, usize) {
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count());
    (
        count(format!("/proc/{pid}/fd")),
        count(format!("/proc/{pid}/task")),
    )
}

/// Waits until process `pid` is back to `baseline` descriptors and threads; returns what
/// it has when `within` passes first.
fn back_to(pid: u32, baseline: (usize, usize), within: Duration) -> (usize, usize) {
    let deadline = Instant::now() + within;
    loop {
        let now = fds_and_threads(pid);
        if now == baseline || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 12, Show 1: a connection that says nothing holds no test slot. A real client
/// 0.5 s after it is served and finishes normally while the silent one is still open (its
/// handshake deadline is 2 s); afterwards the server is back to its descriptors and threads.
#[test]
fn an_idle_connection_does_not_keep_a_real_client_out() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let pid = server.child.id();
    let baseline = fds_and_threads(pid);
    let idle = TcpStream::connect(server.addr).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let run = client("127.0.0.1", &server.port(), &[]);
    run.assert_ok();
    assert!(
        util::byte_totals(&run.stdout()).is_some(),
        "{}",
        run.explain()
    );
    // The silent connection is still open: it was never cut to make room.
    idle.set_nonblocking(true).unwrap();
    let mut b = [0u8; 16];
    assert!(
        matches!((&idle).read(&mut b), Ok(8)),
        "the silent connection got only the preamble so far\n{}",
        server.log()
    );
    drop(idle);
    let after = back_to(pid, baseline, Duration::from_secs(3));
    println!("server fds/threads: baseline {baseline:?}, after {after:?}");
    assert_eq!(after, baseline, "{}", server.log());
    assert!(!server.log().contains("busy"), "{}", server.log());
}

/// Issue 12, Show 1: 1000 idle or half-open connections (silent; a partial preamble; a
/// partial frame, then the write side shut), then a real client 0.5 s later: served. The
/// server's descriptors and threads return to their baseline once they are gone.
#[test]
fn a_thousand_idle_and_half_open_connections_do_not_keep_a_real_client_out() {
    const N: usize = 1000;
    let soft_limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(0);
    if soft_limit < N + 200 {
        util::skipped(
            "a_thousand_idle_and_half_open_connections_do_not_keep_a_real_client_out",
            &format!(
                "`ulimit -n` is {soft_limit}; 1000 connections need {}",
                N + 200
            ),
        );
        return;
    }
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let pid = server.child.id();
    let baseline = fds_and_threads(pid);
    let mut peak = baseline;
    let mut held = Vec::with_capacity(N);
    for i in 0..N {
        let mut s = TcpStream::connect(server.addr).unwrap();
        // The server may already have cut this one (it holds at most 64 handshakes and
        // drops the oldest): a write then fails, which is the protection working.
        match i % 4 {
            0 | 1 => {}
            2 => {
                let _ = s.write_all(&wire::PREAMBLE[..4]);
            }
            _ => {
                let _ = s.write_all(wire::PREAMBLE);
                let _ = s.write_all(&[0, 0, 1]);
                let _ = s.shutdown(Shutdown::Write);
            }
        }
        held.push(s);
        if i % 100 == 0 {
            let now = fds_and_threads(pid);
            peak = (peak.0.max(now.0), peak.1.max(now.1));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let run = client("127.0.0.1", &server.port(), &[]);
    run.assert_ok();
    drop(held);
    let after = back_to(pid, baseline, Duration::from_secs(3));
    println!(
        "server fds/threads: baseline {baseline:?}, peak seen while connecting {peak:?}, after {after:?}"
    );
    assert_eq!(after, baseline, "{}", server.log());
    // Bounded meanwhile: at most 128 control threads (64 handshakes, the rest cut and
    // ending), a socket each, plus the 64 handshakes' handles to cut them.
    assert!(
        peak.0 <= baseline.0 + 128 + 64 + 16 && peak.1 <= baseline.1 + 128 + 16,
        "{peak:?}"
    );
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// A running test is not touched by a crowd of silent and garbage connections: it
/// finishes normally, every byte accounted for.
#[test]
fn a_running_test_is_not_touched_by_idle_and_garbage_connections() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let port = server.port();
    let mut running =
        util::Spawned::start(&["-c", "127.0.0.1", "-p", &port, "-t", "1", "-i", "0.5"]);
    assert!(
        server.wait_for("stream(s), block", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let crowd: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            if i % 2 == 1 {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            }
            s
        })
        .collect();
    let run = running.finish(LIMIT);
    run.assert_ok();
    let (sent, received) = util::byte_totals(&run.stdout()).expect("bytes line");
    assert_eq!(sent, received, "{}", run.explain());
    drop(crowd);
    client("127.0.0.1", &port, &[]).assert_ok();
}

/// A keys file with `mode`, in a fresh directory; returns its path.
fn keys_file(name: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("pinperf-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys");
    std::fs::write(&path, "# test users\nalice:correct horse\nbob:battery\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A client run with `PINPERF_SECRET` set (or removed with `None`).
fn client_with_secret(port: &str, secret: Option<&str>, extra: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(util::bin());
    cmd.args(["-c", "127.0.0.1", "-p", port, "-t", "0.3", "-i", "0.3"])
        .args(extra)
        .stdin(std::process::Stdio::null());
    match secret {
        Some(s) => cmd.env("PINPERF_SECRET", s),
        None => cmd.env_remove("PINPERF_SECRET"),
    };
    cmd.output().unwrap()
}

fn explain(out: &std::process::Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Issue 12, Show 2: the authentication matrix.
#[test]
fn authentication_matrix() {
    // No keys, no --auth: runs.
    let open = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let out = client_with_secret(&open.port(), None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    drop(open);

    let keys = keys_file("matrix", 0o600);
    let server = Srv::start(&[
        "-p",
        "0",
        "-B",
        "127.0.0.1",
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    let port = server.port();
    let failed = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(1), "{}", explain(out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.trim_end()
                .ends_with("refused the test: authentication failed"),
            "{}",
            explain(out)
        );
    };
    // Keys on the server, none on the client: the fix, by flag.
    let none = client_with_secret(&port, None, &[]);
    assert_eq!(none.status.code(), Some(1), "{}", explain(&none));
    assert!(
        String::from_utf8_lossy(&none.stderr)
            .contains("refused the test: this server requires authentication: give --auth USER"),
        "{}",
        explain(&none)
    );
    assert!(
        server.wait_for(
            "no credentials (the client sent params)",
            Duration::from_secs(2)
        ),
        "{}",
        server.log()
    );
    // A wrong secret; an unknown user.
    failed(&client_with_secret(
        &port,
        Some("wrong"),
        &["--auth", "alice"],
    ));
    assert!(
        server.wait_for("(user alice): wrong secret", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    failed(&client_with_secret(
        &port,
        Some("battery"),
        &["--auth", "mallory"],
    ));
    assert!(
        server.wait_for("(user mallory): unknown user", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    // The right secret, from the environment and from a file.
    let out = client_with_secret(&port, Some("correct horse"), &["--auth", "alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(
        server.wait_for("user alice", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    let secret = keys.with_file_name("bob.secret");
    std::fs::write(&secret, "battery\n").unwrap();
    let out = client_with_secret(
        &port,
        None,
        &[
            "--auth",
            "bob",
            "--auth-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    // The log says which user from where; the client only ever heard the two words.
    let log = server.log();
    assert!(log.contains("refused client 127.0.0.1:"), "{log}");
    let _ = std::fs::remove_dir_all(keys.parent().unwrap());
}

/// Issue 12, Show 2: a recorded authenticated exchange, sent again byte for byte, is
/// refused (the server's challenge is new each time); so is one with a parameter changed.
#[test]
fn a_replayed_handshake_is_refused() {
    let keys = keys_file("replay", 0o600);
    let server = Srv::start(&[
        "-p",
        "0",
        "-B",
        "127.0.0.1",
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    // A recording pass-through for the control connection (data connections go to the
    // server's data port directly).
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port().to_string();
    let recorded = Arc::new(Mutex::new(Vec::<u8>::new()));
    let rec2 = Arc::clone(&recorded);
    let target = server.addr;
    std::thread::spawn(move || {
        let (mut client, _) = proxy.accept().unwrap();
        let mut server = TcpStream::connect(target).unwrap();
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
            let _ = c2.shutdown(Shutdown::Write);
        });
        let mut buf = [0u8; 4096];
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 || server.write_all(&buf[..n]).is_err() {
                break;
            }
            rec2.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        let _ = server.shutdown(Shutdown::Write);
    });
    let out = client_with_secret(&proxy_port, Some("correct horse"), &["--auth", "alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let bytes = recorded.lock().unwrap().clone();
    // The recording: preamble, hello, auth_request, auth_proof, params (then bye).
    let frames = split_frames(&bytes[8..]);
    let kinds: Vec<String> = frames
        .iter()
        .map(|f| serde_json::from_slice::<serde_json::Value>(f).unwrap()["type"].to_string())
        .collect();
    assert_eq!(
        &kinds[..4],
        [
            "\"hello\"",
            "\"auth_request\"",
            "\"auth_proof\"",
            "\"params\""
        ],
        "{kinds:?}"
    );
    // The handshake: the preamble and those four frames (the client's bye stays out).
    let len = 8 + frames[..4].iter().map(|f| 4 + f.len()).sum::<usize>();
    let bytes = bytes[..len].to_vec();
    let replay = |bytes: &[u8]| -> String {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(bytes).unwrap();
        let mut pre = [0u8; 8];
        s.read_exact(&mut pre).unwrap();
        let peer = server.addr;
        loop {
            match wire::read_frame(&mut s, peer).unwrap_or_else(|e| panic!("{e}\n{}", server.log()))
            {
                ControlMsg::Welcome { .. } | ControlMsg::Challenge { .. } => {}
                ControlMsg::Refuse { reason } => return reason,
                other => panic!("expected a refusal, got {other:?}\n{}", server.log()),
            }
        }
    };
    assert_eq!(replay(&bytes), "authentication failed");
    assert!(
        server.wait_for(
            "the exchange was replayed or altered",
            Duration::from_secs(2)
        ),
        "{}",
        server.log()
    );
    // The same recording with 1 stream changed to 9 in its parameters.
    let mut changed = bytes.clone();
    let at = changed
        .windows(11)
        .position(|w| w == b"\"streams\":1")
        .expect("streams in the recorded parameters");
    changed[at + 10] = b'9';
    assert_eq!(replay(&changed), "authentication failed");
    let _ = std::fs::remove_dir_all(keys.parent().unwrap());
}

/// The frame bodies in `bytes` (length-prefixed), as far as they are whole.
fn split_frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        if bytes.len() < 4 + len {
            break;
        }
        out.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

/// Issue 12, Show 2: a keys file every user may read stops the server at startup, exit 2.
#[test]
fn a_world_readable_keys_file_is_refused_at_startup() {
    let keys = keys_file("world", 0o644);
    let run = pinperf(
        &["-s", "-p", "0", "--auth-keys", keys.to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert_eq!(
        run.stderr().trim_end(),
        format!(
            "pinperf: --auth-keys {0}: readable by every user (mode 0644); its secrets must not \
             be: run `chmod o-rwx {0}`",
            keys.display()
        ),
        "{}",
        run.explain()
    );
    let _ = std::fs::remove_dir_all(keys.parent().unwrap());
}

/// Issue 12, Show 3: `--allow 127.0.0.2/32` closes a client from 127.0.0.1 at once and
/// logs it; `--allow 127.0.0.0/8` serves it.
#[test]
fn the_allow_list_refuses_other_addresses_and_serves_its_own() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--allow", "127.0.0.2/32"]);
    let run = client("127.0.0.1", &server.port(), &[]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        server.wait_for("refused client 127.0.0.1:", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    assert!(
        server.log().contains(": address not in --allow"),
        "{}",
        server.log()
    );
    drop(server);
    let server = Srv::start(&[
        "-p",
        "0",
        "-B",
        "127.0.0.1",
        "--allow",
        "10.0.0.0/8,127.0.0.0/8",
    ]);
    client("127.0.0.1", &server.port(), &[]).assert_ok();
}

/// `--max-tests-per-minute 1`: the second test from one address within the minute is
/// refused with the flag named and the wait.
#[test]
fn the_per_source_rate_is_named_in_its_refusal() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--max-tests-per-minute", "1"]);
    client("127.0.0.1", &server.port(), &[]).assert_ok();
    let run = client("127.0.0.1", &server.port(), &[]);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains(
            "refused the test: too many tests from 127.0.0.1: at most 1 per minute (this \
             server's --max-tests-per-minute); try again in "
        ),
        "{}",
        run.explain()
    );
}

/// A sparse UDP test (one datagram at -b 1k -l 1000 in 0.5 s) is logged over its
/// duration, as the client's totals are: it was "65507 bytes in 0.000 s (1164.569 Mb/s)",
/// the span from the first datagram to the last.
#[test]
fn a_sparse_udp_test_is_logged_over_its_duration() {
    let server = Srv::start_json(&["-p", "0", "-B", "127.0.0.1", "--log-format", "json"]);
    let run = client(
        "127.0.0.1",
        &server.port(),
        &["-u", "-b", "1k", "-l", "1000", "-t", "0.5"],
    );
    run.assert_ok();
    assert!(
        server.wait_for("\"test_end\"", Duration::from_secs(3)),
        "{}",
        server.log()
    );
    let log = server.log();
    let end: serde_json::Value = log
        .lines()
        .find(|l| l.contains("\"test_end\""))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .unwrap();
    let secs = end["seconds"].as_f64().unwrap();
    let bytes = end["received_bytes"].as_u64().unwrap();
    assert!((0.5..1.5).contains(&secs), "{end}");
    assert!(bytes >= 1000, "{end}");
    let bps = end["bits_per_second"].as_f64().unwrap();
    assert!((bps - bytes as f64 * 8.0 / secs).abs() < 1.0, "{end}");
}

/// Issue 12, Show 4: `--log-format json` writes one JSON object per line: listening, the
/// test's start with its peer and parameters, its end with the totals, and a refusal
/// with its reason's word.
#[test]
fn the_json_log_has_one_event_per_line() {
    let server = Srv::start_json(&["-p", "0", "-B", "127.0.0.1", "--log-format", "json"]);
    let run = client("127.0.0.1", &server.port(), &["-P", "2"]);
    run.assert_ok();
    let (_, received) = util::byte_totals(&run.stdout()).expect("bytes line");
    assert!(
        server.wait_for("\"test_end\"", Duration::from_secs(3)),
        "{}",
        server.log()
    );
    drop(TcpStream::connect(server.addr).unwrap());
    assert!(
        server.wait_for("\"refused\"", Duration::from_secs(4)),
        "{}",
        server.log()
    );
    let events: Vec<serde_json::Value> = server
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for e in &events {
        println!("{e}");
        assert!(e["time"].as_f64().is_some(), "{e}");
    }
    let find = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event in {events:?}"))
    };
    assert_eq!(find("listening")["address"], server.addr.to_string());
    let start = find("test_start");
    assert!(start["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_eq!(start["params"]["streams"], 2);
    let end = find("test_end");
    assert_eq!(end["peer"], start["peer"]);
    assert_eq!(end["received_bytes"].as_u64(), Some(received));
    let refused = find("refused");
    assert_eq!(refused["why"], "handshake");
}

/// A connection that starts like an iperf3 cookie and then says nothing is logged in
/// words, not as a raw errno ("iperf3 cookie: Resource temporarily
/// unavailable (os error 11)").
#[test]
fn a_half_sent_cookie_is_named_in_the_log() {
    let mut server = Server::start(&[]);
    let mut conn = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    conn.write_all(b"abcdefg").unwrap();
    let line = server.wait_for_log("refused client", LIMIT);
    assert!(
        line.contains("it sent the start of an iperf3 cookie, then nothing for ")
            && !line.contains("os error"),
        "{line}"
    );
}

/// A peer's words reach the log escaped: an iperf3 client's congestion control name
/// carrying a newline, a forged refusal and a terminal escape is refused on one line,
/// and no line of the log is the forged one.
#[test]
fn a_peers_words_cannot_forge_a_log_line() {
    let mut server = Server::start(&[]);
    let mut c = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    c.write_all(b"abcdefghijklmnopqrstuvwxyz0123456789\0")
        .unwrap();
    let mut state = [0u8; 1];
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 9, "PARAM_EXCHANGE");
    let forged = "x\npinperf: refused client 203.0.113.7:5555 (user alice): wrong secret\u{1b}[2K";
    let params = serde_json::json!({
        "tcp": true, "omit": 0, "time": 1, "parallel": 1, "len": 131072, "congestion": forged,
    })
    .to_string();
    c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
    c.write_all(params.as_bytes()).unwrap();
    server.wait_for_log("203.0.113.7", LIMIT);
    forged_line_escaped(
        &server.log(),
        "x\\u{a}pinperf: refused client 203.0.113.7:5555",
    );
}

/// The forged line's name shows escaped (`escaped`) on one line, and no line of the log
/// is the forged one or holds an escape character.
fn forged_line_escaped(log: &str, escaped: &str) {
    assert!(log.contains(escaped), "the name escaped: {log}");
    assert!(
        !log.lines()
            .any(|l| l.starts_with("pinperf: refused client 203.0.113.7"))
            && !log.contains('\u{1b}'),
        "{log}"
    );
}

/// An iperf3 test's stream connections come from its client only: the cookie, which
/// anyone on the path can read, does not let another address add a stream.
#[test]
fn an_iperf3_tests_streams_come_from_its_client_only() {
    let mut server = Server::start(&[]);
    let _held = util::iperf3::stalled_in_setup(server.port);
    let stranger =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = "127.0.0.2:0".parse().unwrap();
    stranger.bind(&from.into()).unwrap();
    let to: SocketAddr = ([127, 0, 0, 1], server.port).into();
    stranger.connect(&to.into()).unwrap();
    let mut stranger = TcpStream::from(stranger);
    stranger
        .write_all(b"abcdefghijklmnopqrstuvwxyz0123456789\0")
        .unwrap();
    let line = server.wait_for_log("refused client 127.0.0.2:", LIMIT);
    assert!(
        line.contains(": an iperf3 stream connection, but the test belongs to 127.0.0.1:"),
        "{line}"
    );
    // Refused: the server closes it.
    stranger.set_read_timeout(Some(LIMIT)).unwrap();
    match stranger.read(&mut [0u8; 1]) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the stranger's connection was not closed: {other:?}"),
    }
}

/// `-s -B` with an address this host does not have names the flag (it said only "bind
/// 198.18.255.254:...: Cannot assign requested address"). No packet is sent:
/// 198.18.0.0/15 is the benchmarking range, and the bind fails first.
#[test]
fn a_server_bound_to_an_address_it_lacks_names_minus_b() {
    let run = pinperf(&["-s", "-B", "198.18.255.254", "-p", "0"], LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("(-B 198.18.255.254: not an address of this host?)"),
        "{}",
        run.explain()
    );
}

/// A `-1` server whose one test is still setting up refuses a second client at once: it
/// waited for the slot, took it when the first failed, and the process then exited under
/// it ("closed the control connection").
#[test]
fn a_one_off_server_refuses_a_second_client_while_its_test_sets_up() {
    let mut server = Server::start(&["-1"]);
    let first = util::iperf3::stalled_in_setup(server.port);
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &server.port_arg(), "-t", "1"],
        LIMIT,
    );
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains("refused the test: server busy"),
        "{}",
        run.explain()
    );
    assert!(run.elapsed < Duration::from_secs(1), "{}", run.explain());
    drop(first);
    server.wait_for_log(" failed: ", LIMIT);
}

/// Opens stream 0's data connection of an accepted test (no echo) and waits for Start.
fn start_stream(ctl: &mut TcpStream, accept: &Accept) -> TcpStream {
    let mut data = TcpStream::connect(("127.0.0.1", accept.data_port)).unwrap();
    let mut hello = accept.cookie.to_le_bytes().to_vec();
    hello.extend([0, 0, 0]);
    data.write_all(&hello).unwrap();
    let peer = ctl.peer_addr().unwrap();
    match wire::read_frame(ctl, peer).unwrap() {
        ControlMsg::Start => data,
        other => panic!("expected start, got {other:?}"),
    }
}

/// Writes to `data` from a thread: `chunk` bytes every `every`, until the connection fails.
fn keep_writing(mut data: TcpStream, chunk: usize, every: Duration) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let (block, mut sent) = (vec![0u8; chunk], 0);
        while data.write_all(&block).is_ok() {
            sent += chunk as u64;
            std::thread::sleep(every);
        }
        sent
    })
}

/// The server's last word on `ctl`, past its rows: its Error's reason, and when it came.
fn servers_error(ctl: &mut TcpStream, since: Instant) -> (String, Duration) {
    let peer = ctl.peer_addr().unwrap();
    ctl.set_read_timeout(Some(LIMIT)).unwrap();
    loop {
        match wire::read_frame(ctl, peer) {
            Ok(ControlMsg::Error { reason }) => return (reason, since.elapsed()),
            Ok(_) => {}
            Err(e) => panic!("no error from the server: {e}"),
        }
    }
}

/// A client that asks for half a second and then keeps its stream open a byte at a time
/// is cut at its run time and drain (about a second on loopback), told so, logged among
/// refusals, and the next client is served. It held the server as long as it liked.
#[test]
fn a_client_that_trickles_past_its_end_is_cut_and_the_next_served() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let mut params = TestParams::defaults();
    params.streams = 1;
    params.duration = Duration::from_millis(500);
    params.transport.no_echo = true;
    let (mut ctl, accept) = handshake(server.addr, params);
    let data = start_stream(&mut ctl, &accept);
    let t0 = Instant::now();
    let _trickle = keep_writing(data, 1, Duration::from_millis(100));
    let (reason, after) = servers_error(&mut ctl, t0);
    assert!(
        reason.starts_with("the test ran past its end: it was given 0.50 s to run and "),
        "{reason}"
    );
    assert!(
        after < Duration::from_secs(4),
        "cut {after:?} in: {reason}\n{}",
        server.log()
    );
    assert!(
        server.wait_for("the test ran past its end", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    assert!(
        server.log().contains("refused client 127.0.0.1:"),
        "{}",
        server.log()
    );
    client("127.0.0.1", &server.port(), &[]).assert_ok();
}

/// A client that asks for `-b 10M` under `--max-rate 10M` and sends as fast as it can is
/// cut within a second, told by how much, and the next client is served.
#[test]
fn a_stream_past_the_max_rate_is_cut() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1", "--max-rate", "10M"]);
    let mut params = TestParams::defaults();
    params.streams = 1;
    params.duration = Duration::from_secs(5);
    params.rate_bps = Some(10_000_000);
    params.transport.no_echo = true;
    let (mut ctl, accept) = handshake(server.addr, params);
    let data = start_stream(&mut ctl, &accept);
    let t0 = Instant::now();
    let _blast = keep_writing(data, 1 << 16, Duration::ZERO);
    let (reason, after) = servers_error(&mut ctl, t0);
    assert!(
        reason.starts_with("stream-0 exceeded --max-rate 10M per stream: "),
        "{reason}"
    );
    assert!(after < Duration::from_secs(2), "cut {after:?} in: {reason}");
    assert!(
        server.wait_for("refused client 127.0.0.1:", Duration::from_secs(2)),
        "{}",
        server.log()
    );
    client("127.0.0.1", &server.port(), &["-b", "10M"]).assert_ok();
}

/// An iperf3-protocol client's test, running: its control connection (past TEST_RUNNING)
/// and its one stream's connection.
fn iperf3_running(port: u16, params: &str) -> (TcpStream, TcpStream) {
    let cookie = b"abcdefghijklmnopqrstuvwxyz0123456789\0";
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    c.write_all(cookie).unwrap();
    let mut state = [0u8; 1];
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 9, "PARAM_EXCHANGE");
    c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
    c.write_all(params.as_bytes()).unwrap();
    c.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 10, "CREATE_STREAMS");
    let mut data = TcpStream::connect(("127.0.0.1", port)).unwrap();
    data.write_all(cookie).unwrap();
    for want in [1, 2] {
        c.read_exact(&mut state).unwrap();
        assert_eq!(state[0], want, "TEST_START, TEST_RUNNING");
    }
    (c, data)
}

/// The iperf3 error code of the SERVER_ERROR an iperf3 server sends next on `c`.
fn iperf3_server_error(c: &mut TcpStream, since: Instant) -> (i32, Duration) {
    let mut b = [0u8; 9];
    c.read_exact(&mut b).unwrap();
    assert_eq!(b[0] as i8, -2, "SERVER_ERROR");
    (
        i32::from_be_bytes(b[1..5].try_into().unwrap()),
        since.elapsed(),
    )
}

/// Over iperf3's protocol too: a client that asks for 1 s and never sends TEST_END,
/// trickling a byte at a time, is cut (iperf3's code 160) at its run time and drain; one
/// that asks for 10 Mbit/s under `--max-rate 10M` and sends at once all it can is cut
/// (code 27) within a second. Each is logged among refusals, and a real client is served.
#[test]
fn an_iperf3_client_past_its_end_or_its_rate_is_cut() {
    let mut server = Server::start(&["--max-rate", "10M"]);
    let params = r#"{"tcp":true,"omit":0,"time":1,"parallel":1,"len":1000,"bandwidth":10000000}"#;
    let (mut c, data) = iperf3_running(server.port, params);
    let t0 = Instant::now();
    let _trickle = keep_writing(data, 1, Duration::from_millis(100));
    let (code, after) = iperf3_server_error(&mut c, t0);
    assert_eq!(code, 160, "IESERVERTESTDURATIONEXPIRED");
    assert!(after < Duration::from_secs(3), "cut {after:?} in");
    let line = server.wait_for_log("the test ran past its end", LIMIT);
    assert!(line.contains("refused client 127.0.0.1:"), "{line}");

    let (mut c, data) = iperf3_running(server.port, params);
    let t0 = Instant::now();
    let _blast = keep_writing(data, 1 << 16, Duration::ZERO);
    let (code, after) = iperf3_server_error(&mut c, t0);
    assert_eq!(code, 27, "IETOTALRATE");
    assert!(after < Duration::from_secs(2), "cut {after:?} in");
    let line = server.wait_for_log("exceeded --max-rate 10M", LIMIT);
    assert!(line.contains("refused client 127.0.0.1:"), "{line}");
    client("127.0.0.1", &server.port_arg(), &["-b", "10M"]).assert_ok();
}

/// Under `--auth-keys`, an iperf3 client (which cannot authenticate) is refused right
/// after its cookie, before its parameters: SERVER_ERROR 142 comes where PARAM_EXCHANGE
/// would, so nothing it could send (a forged `-C` name) is read or logged.
#[test]
fn an_iperf3_client_is_refused_before_its_parameters_under_auth_keys() {
    let keys = keys_file("iperf3-first", 0o600);
    let mut server = Server::start(&["--auth-keys", &keys.to_string_lossy()]);
    let mut c = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    c.write_all(b"abcdefghijklmnopqrstuvwxyz0123456789\0")
        .unwrap();
    let (code, _) = iperf3_server_error(&mut c, Instant::now());
    assert_eq!(code, 142, "IEAUTHTEST");
    let line = server.wait_for_log("refused client 127.0.0.1:", LIMIT);
    assert!(
        line.ends_with(
            "iperf3 client: this server requires pinperf's authentication (--auth-keys)"
        ),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(keys.parent().unwrap());
}

/// A source guessing secrets is answered three times, told on the fourth that its
/// connections are refused for a second, and meanwhile closed unanswered (not logged one
/// by one), while another address is served; past the lockout it is served again, and
/// the log says how many connections were closed. 14,211 guesses in 5 s were each
/// answered and logged.
#[test]
fn a_source_that_guesses_secrets_is_locked_out_and_told_for_how_long() {
    let keys = keys_file("guessing", 0o600);
    let server = Srv::start(&[
        "-p",
        "0",
        "-B",
        "0.0.0.0",
        "--auth-keys",
        &keys.to_string_lossy(),
    ]);
    let port = server.port();
    let guess = || client_with_secret(&port, Some("wrong"), &["--auth", "alice"]);
    for _ in 0..3 {
        let out = guess();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.trim_end().ends_with("authentication failed"),
            "{}",
            explain(&out)
        );
    }
    let fourth = guess();
    assert!(
        String::from_utf8_lossy(&fourth.stderr).contains(
            "authentication failed; 3 failures from this address within 60 s before this one: \
             its connections are refused for 1 s"
        ),
        "{}",
        explain(&fourth)
    );
    // The fourth refusal's line may reach the log after the client has its answer.
    util::wait_until(
        "the lockout in the log",
        Duration::from_secs(5),
        || {
            server
                .log()
                .contains("its connections are refused for 1 s")
                .then_some(())
        },
        || server.log(),
    );
    let lines = server.log().lines().count();
    let locked = guess();
    assert_eq!(locked.status.code(), Some(1), "{}", explain(&locked));
    assert!(
        !String::from_utf8_lossy(&locked.stderr).contains("authentication failed"),
        "closed unanswered: {}",
        explain(&locked)
    );
    let right = client_with_secret(&port, Some("correct horse"), &["--auth", "alice"]);
    assert_eq!(
        right.status.code(),
        Some(1),
        "the source is locked out, whoever it is"
    );
    // Another address is served meanwhile.
    let other = std::process::Command::new(util::bin())
        .args([
            "-c",
            "127.0.0.1",
            "-B",
            "127.0.0.2",
            "-p",
            &port,
            "-t",
            "0.3",
            "-i",
            "0.3",
        ])
        .args(["--auth", "alice"])
        .env("PINPERF_SECRET", "correct horse")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(0), "{}", explain(&other));
    assert_eq!(
        server
            .log()
            .lines()
            .filter(|l| l.contains("refused client 127.0.0.1"))
            .count(),
        4,
        "the locked-out connections are not logged one by one:\n{}",
        server.log()
    );
    assert!(
        server.log().lines().count() <= lines + 3,
        "{}",
        server.log()
    );
    std::thread::sleep(Duration::from_millis(1100));
    let after = client_with_secret(&port, Some("correct horse"), &["--auth", "alice"]);
    assert_eq!(after.status.code(), Some(0), "{}", explain(&after));
    assert!(
        server.wait_for(
            "2 connection(s) from 127.0.0.1 closed unanswered while it was locked out",
            Duration::from_secs(2)
        ),
        "{}",
        server.log()
    );
    let _ = std::fs::remove_dir_all(keys.parent().unwrap());
}

/// A source that takes the test slot and runs no test (an iperf3 client that sends its
/// parameters and leaves before connecting a stream) is locked out on its fourth: a loop
/// of them wrote 110,906 log lines in 40 s.
#[test]
fn a_source_that_takes_the_slot_for_nothing_is_locked_out() {
    let mut server = Server::start(&[]);
    for k in 1..=4 {
        drop(util::iperf3::stalled_in_setup(server.port));
        server.wait_for_logs("stream connections had arrived", k, LIMIT);
    }
    let line = server.wait_for_log("its connections are refused for 1 s", LIMIT);
    assert!(
        line.contains("3 failures from this address within 60 s"),
        "{line}"
    );
}

/// Over pinperf's protocol too: a `-C` name carrying a newline, a forged line and a
/// terminal escape is refused, and the log shows it escaped, on the refusal's own line.
#[test]
fn a_pinperf_clients_words_cannot_forge_a_log_line() {
    let server = Srv::start(&["-p", "0", "-B", "127.0.0.1"]);
    let mut params = TestParams::defaults();
    let forged = "x\npinperf: refused client 203.0.113.7:5555 (user alice): wrong secret\u{1b}[2K";
    params.transport.congestion = Some(forged.into());
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(wire::PREAMBLE).unwrap();
    s.write_all(&wire::encode(&ControlMsg::Hello {
        version: PROTOCOL_VERSION,
        software: "a raw test client".into(),
    }))
    .unwrap();
    s.write_all(&wire::encode(&ControlMsg::Params(params)))
        .unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let peer = s.peer_addr().unwrap();
    loop {
        match wire::read_frame(&mut s, peer).unwrap() {
            ControlMsg::Refuse { reason } => {
                assert!(
                    reason.starts_with("-C 'x\npinperf"),
                    "the client hears it as sent"
                );
                break;
            }
            ControlMsg::Welcome { .. } => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert!(server.wait_for("203.0.113.7", LIMIT), "{}", server.log());
    forged_line_escaped(
        &server.log(),
        "-C 'x\\u{a}pinperf: refused client 203.0.113.7:5555",
    );
}

/// A server's refusal reason is printed escaped by the client: a fake server's newline,
/// forged line and terminal escapes (it set the terminal's title) reach no terminal raw.
#[test]
fn a_servers_words_reach_the_clients_terminal_escaped() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(wire::PREAMBLE).unwrap();
        let reason = "busy\npinperf: test passed\u{1b}]0;owned\u{7}".to_string();
        s.write_all(&wire::encode(&ControlMsg::Refuse { reason }))
            .unwrap();
        let _ = s.read(&mut [0u8; 4096]);
    });
    let run = client("127.0.0.1", &port, &[]);
    let _ = fake.join();
    let err = run.stderr();
    assert_eq!(run.output.status.code(), Some(1), "{}", run.explain());
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(
        err.contains("busy\\u{a}pinperf: test passed\\u{1b}]0;owned"),
        "{err:?}"
    );
    assert!(
        !err.lines().any(|l| l.starts_with("pinperf: test passed")),
        "{err:?}"
    );
}

/// `-1 --idle-timeout`: no test within it, and the server ends on its own, status 0 (as
/// pScheduler's `iperf3 -s -1 --idle-timeout N` expects); a test that comes in time is
/// served, and then the one-off server ends as always.
#[test]
fn a_one_off_server_ends_when_no_test_comes_within_its_idle_timeout() {
    let mut idle = Server::start(&["-1", "--idle-timeout", "0.5"]);
    let status = util::wait_until(
        "the idle server ends",
        Duration::from_secs(5),
        || idle.child.try_wait().ok().flatten(),
        String::new,
    );
    assert!(status.success(), "{status}{}", idle.explain());
    assert!(
        idle.log().contains("no test for 0.5 s (--idle-timeout)"),
        "{}",
        idle.explain()
    );
    let mut served = Server::start(&["-1", "--idle-timeout", "3"]);
    client("127.0.0.1", &served.port_arg(), &["-t", "0.5"]).assert_ok();
    let status = util::wait_until(
        "the one-off server ends",
        Duration::from_secs(5),
        || served.child.try_wait().ok().flatten(),
        String::new,
    );
    assert!(status.success(), "{status}{}", served.explain());
}
