//! Two network namespaces on this host, joined by a veth pair (198.18.0.1, the client's,
//! and 198.18.0.2, the server's): what holds between hosts that are not loopback. Root
//! only; elsewhere each test prints `SKIPPED: <test>: <reason>`.

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use util::{Run, bin};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const SERVER_IP: &str = "198.18.0.2";

/// The two namespaces, removed on drop (their veth ends go with them).
struct Pair {
    names: [String; 2],
}

impl Pair {
    /// The pair, or `None` (having said why) where this process cannot make namespaces.
    fn new(test: &str) -> Option<Pair> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let k = N.fetch_add(1, Ordering::Relaxed);
        let names = ["c", "s"].map(|end| format!("pp-{}-{k}-{end}", std::process::id()));
        let pair = Pair { names };
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let [c, s] = &pair.names;
        let made = ip(&["netns", "add", c])
            && ip(&["netns", "add", s])
            && ip(&[
                "link", "add", "veth0", "netns", c, "type", "veth", "peer", "name", "veth0",
                "netns", s,
            ]);
        if !made {
            util::skipped(
                test,
                "could not make two network namespaces and a veth pair (needs root and \
                 iproute2; CI runs these tests as root)",
            );
            return None;
        }
        for (ns, addr) in [(c, "198.18.0.1/24"), (s, "198.18.0.2/24")] {
            assert!(ip(&["-n", ns, "addr", "add", addr, "dev", "veth0"]));
            assert!(ip(&["-n", ns, "link", "set", "veth0", "up"]));
            assert!(ip(&["-n", ns, "link", "set", "lo", "up"]));
        }
        Some(pair)
    }

    /// `program args` in namespace `side`.
    fn command(&self, side: usize, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[side], program])
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// `program args` in the client's namespace, to its end (killed after 20 s).
    fn run(&self, program: &str, args: &[&str]) -> Run {
        let started = Instant::now();
        let mut with_limit = vec!["20", program];
        with_limit.extend_from_slice(args);
        let output: Output = self
            .command(CLIENT, "timeout", &with_limit)
            .output()
            .expect("run ip netns exec");
        Run {
            args: args.iter().map(|s| s.to_string()).collect(),
            output,
            elapsed: started.elapsed(),
        }
    }

    /// `pinperf -s -p 5301` and `extra` in the server's namespace, once it listens.
    fn server(&self, extra: &[&str]) -> Child {
        let mut args = vec!["-s", "-p", "5301"];
        args.extend_from_slice(extra);
        let mut child = self
            .command(SERVER, bin(), &args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the server");
        let mut log = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            if log.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("the server exited before it listened");
            }
        }
        // Drained from here on, so the server never blocks on its log.
        std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
        child
    }

    /// Drops every packet into the server's namespace but TCP and UDP to port 5301.
    fn firewall_all_but_5301(&self, test: &str) -> bool {
        let rules = "table inet only5301 { chain input { type filter hook input priority 0; \
                     policy drop; tcp dport 5301 accept; udp dport 5301 accept; }; }";
        let ok = self
            .command(SERVER, "nft", &[rules])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            util::skipped(test, "no nft here (apt-get install nftables)");
        }
        ok
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Busy cores on the efficiency line (`… (0.97 busy cores); …`).
fn busy_cores(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("# CPU efficiency:"))?;
    let before = &line[..line.find(" busy cores")?];
    before[before.rfind('(')? + 1..].parse().ok()
}

/// Two namespaces of one host are one host: its cores are counted once (as `--loopback`
/// counts them), not once per end, so busy cores never exceed the host's.
#[test]
fn two_namespaces_of_one_host_count_its_cores_once() {
    let test = "two_namespaces_of_one_host_count_its_cores_once";
    let Some(pair) = Pair::new(test) else {
        return;
    };
    let _server = Killed(pair.server(&[]));
    let run = pair.run(bin(), &["-c", SERVER_IP, "-p", "5301", "-t", "1"]);
    run.assert_ok();
    let text = run.stdout();
    assert!(
        text.contains("# CPU this host (both ends) cores:"),
        "{}",
        run.explain()
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = busy_cores(&text).unwrap_or_else(|| panic!("no busy cores{}", run.explain()));
    assert!(
        busy <= cores + 0.05,
        "{busy} busy cores of {cores}{}",
        run.explain()
    );
}

/// A server behind a firewall that passes only its control port serves every kind of
/// test: all of a test's connections and datagrams go to that one port.
#[test]
fn a_server_behind_a_one_port_firewall_serves_every_direction_and_udp() {
    let test = "a_server_behind_a_one_port_firewall_serves_every_direction_and_udp";
    let Some(pair) = Pair::new(test) else {
        return;
    };
    if !pair.firewall_all_but_5301(test) {
        return;
    }
    let _server = Killed(pair.server(&[]));
    for extra in [
        &[][..],
        &["-R"],
        &["--bidir", "-P", "2"],
        &["-u", "-b", "100M"],
        &["-u", "-b", "100M", "-R"],
    ] {
        let mut args = vec!["-c", SERVER_IP, "-p", "5301", "-t", "0.5"];
        args.extend_from_slice(extra);
        let run = pair.run(bin(), &args);
        run.assert_ok();
        assert!(
            run.stdout().contains("receiver read") || run.stdout().contains("receiver got"),
            "{}",
            run.explain()
        );
    }
}

/// iperf3's client through the same firewall: its streams use the one port too.
#[test]
fn an_iperf3_client_runs_through_a_one_port_firewall() {
    let test = "an_iperf3_client_runs_through_a_one_port_firewall";
    if Command::new("iperf3").arg("--version").output().is_err() {
        util::skipped(test, "no iperf3 on PATH (apt-get install iperf3)");
        return;
    }
    let Some(pair) = Pair::new(test) else {
        return;
    };
    if !pair.firewall_all_but_5301(test) {
        return;
    }
    let _server = Killed(pair.server(&[]));
    for extra in [&["-P", "2"][..], &["-R"], &["-u", "-b", "50M"]] {
        let mut args = vec!["-c", SERVER_IP, "-p", "5301", "-t", "1"];
        args.extend_from_slice(extra);
        let run = pair.run("iperf3", &args);
        run.assert_ok();
        assert!(run.stdout().contains("receiver"), "{}", run.explain());
    }
}

/// What an `--data-port 0` server (an ephemeral data port per test) does behind the same
/// firewall: its data connections are dropped, which is why one port is the default.
#[test]
fn an_ephemeral_data_port_is_what_the_firewall_stops() {
    let test = "an_ephemeral_data_port_is_what_the_firewall_stops";
    let Some(pair) = Pair::new(test) else {
        return;
    };
    if !pair.firewall_all_but_5301(test) {
        return;
    }
    let _server = Killed(pair.server(&["--data-port", "0"]));
    let run = pair.run(
        "timeout",
        &["2", bin(), "-c", SERVER_IP, "-p", "5301", "-t", "0.5"],
    );
    assert_ne!(run.code(), Some(0), "{}", run.explain());
}
