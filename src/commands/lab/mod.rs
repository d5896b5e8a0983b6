//! `pinperf lab`: an emulated long fat path on one host, and a test over it.
//!
//! Two network namespaces (`pinperf-lab-<pid>-client`, `…-server`), each with one TUN
//! device (`plab0`, 198.18.0.2 and 198.18.0.1, the benchmarking range). Two pinned relay
//! threads move packets between the devices through the path model: drop-tail queue, link
//! rate, one-way delay (this kernel has no netem, so delay lives in user space). A pinperf
//! server runs on a thread inside the server namespace, the client on a thread inside the
//! client namespace; both are this process, so CPU is counted once.
//!
//! Teardown deletes both namespaces (their devices go with them) on every way out: normal
//! end, error, panic and a closed stdout (a [`TeardownGuard`] dropped by `run`), and
//! SIGINT/SIGTERM/SIGHUP (taken by a `lab-signals` thread; the run exits 128 + signal).
//! A signal while the client's test runs stops that test the way it stops any client
//! ([`crate::signals`]): it prints what it measured in its format, then `run` tears down;
//! the `lab-signals` thread tears down and exits itself when no test runs (nor its results
//! are still being printed), at a second signal, or when the run has not ended
//! [`crate::timeouts::SIGNAL_GRACE`] after the first.
//! Invariants: a name joins the teardown list before `ip netns add` runs, and the list's
//! lock is held across that call, so a signal's teardown waits for a creation in progress
//! and then deletes it; after the first teardown nothing more is created; teardown
//! reports only namespaces that existed and were deleted; no `ip` child outlives the lab.
//! Namespaces left by a lab that was SIGKILLed are removed on the next run.
//!
//! Output: the lab's figures go out in the client's format ([`report`]: lines with text and
//! CSV, events with `--json-lines`, a `lab` member of the `-J` document), and never panic.
//! A closed stdout (`pinperf lab | head -1`) means nobody reads: the lab stops writing, says
//! nothing about it, and still tears down.

pub mod path;
pub mod relay;
pub mod report;

use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use parking_lot::Mutex;

use crate::choices::Format;
use crate::cli::{Args, LabArgs, OutputArgs};
use crate::commands::diagnose::{self, Session};
use crate::config::{self, ClientConfig, ServerConfig};
use crate::data::pin::{self, Affinity};
use crate::data::stream::spawn_named;
use crate::error::{Error, Result};
use crate::os::sys;
use crate::report::Formatter;
use crate::report::model::Summary;
use crate::server::Server;
use crate::units;
use path::Path;
use relay::RelayStats;
use report::{Direction, Ends, LabOut, LabPath, LabRelay, RelayCpus, Warning};

/// The server's and the client's address on the emulated path.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The TUN device's name inside each namespace.
const DEVICE: &str = "plab0";
/// Prefix of every namespace a lab creates.
pub const NETNS_PREFIX: &str = "pinperf-lab-";
/// Kernel-side packet queue of each TUN device: room for bursts the relay has not read yet.
const TXQUEUELEN: &str = "10000";
/// SCHED_FIFO priority of the relay threads (1 is the lowest real-time priority).
const RELAY_PRIORITY: i32 = 10;

/// The emulated path, validated.
#[derive(Debug, Clone, Copy)]
pub struct PathSpec {
    pub rtt: Duration,
    pub rate_bps: u64,
    pub queue_bytes: u64,
    pub loss: f64,
    pub mtu: u32,
    /// `--blackout-from`, `--blackout-udp-only`.
    pub blackout: Option<path::Blackout>,
}

impl PathSpec {
    /// Bandwidth-delay product in bytes.
    pub fn bdp(&self) -> u64 {
        (self.rate_bps as f64 * self.rtt.as_secs_f64() / 8.0) as u64
    }

    fn direction(&self, seed: u64) -> Path {
        Path::new(
            self.rate_bps,
            self.rtt.as_nanos() as u64 / 2,
            self.queue_bytes,
            self.loss,
            seed,
        )
    }
}

/// Checks the path options; errors name the flag.
pub fn path_spec(a: &LabArgs) -> Result<PathSpec> {
    let usage = |m: String| Error::Usage(m);
    let longest = crate::timeouts::LONGEST_RTT;
    if a.rtt < Duration::from_micros(100) || a.rtt > longest {
        return Err(usage(format!(
            "--rtt {}s: use 0.1ms (an emulated path needs a delay to emulate) to {}s (the \
             longest round trip pinperf's handshake deadlines leave room for)",
            a.rtt.as_secs_f64(),
            longest.as_secs()
        )));
    }
    if a.rate < 1_000_000 {
        return Err(usage("--rate: at least 1M (1 Mbit/s)".into()));
    }
    if !(1280..=65535).contains(&a.mtu) {
        return Err(usage(format!("--mtu {}: use 1280 to 65535", a.mtu)));
    }
    if a.blackout_from.is_some_and(|f| f.is_zero()) {
        return Err(usage(
            "--blackout-from 0: the path would be dead before the test's handshake; give the \
             time into the run it dies (1s, say)"
                .into(),
        ));
    }
    let loss = parse_loss(&a.loss).map_err(|e| usage(format!("--loss: {e}")))?;
    let mut spec = PathSpec {
        rtt: a.rtt,
        rate_bps: a.rate,
        queue_bytes: 0,
        loss,
        mtu: a.mtu,
        blackout: a.blackout_from.map(|from| path::Blackout {
            from_ns: u64::try_from(from.as_nanos()).unwrap_or(u64::MAX),
            udp_only: a.blackout_udp_only,
        }),
    };
    let Some(queue) = &a.queue else {
        // The default: one BDP, which a thin, short path (1M at 1 ms: 125 bytes) needs
        // raised to the one packet any queue must hold.
        spec.queue_bytes = spec.bdp().max(u64::from(a.mtu));
        return Ok(spec);
    };
    spec.queue_bytes =
        parse_queue(queue, spec.bdp()).map_err(|e| usage(format!("--queue: {e}")))?;
    if spec.queue_bytes < u64::from(a.mtu) {
        // A multiple of the BDP is named with what made it.
        let of_bdp = if queue.to_ascii_lowercase().ends_with("bdp") {
            format!(
                " (of a {}-byte BDP at --rate {} and --rtt {}s)",
                spec.bdp(),
                crate::units::format_rate(a.rate),
                a.rtt.as_secs_f64()
            )
        } else {
            String::new()
        };
        return Err(usage(format!(
            "--queue {}: {} bytes{of_bdp} do not hold one {}-byte packet; give --queue {} or more",
            queue, spec.queue_bytes, a.mtu, a.mtu
        )));
    }
    Ok(spec)
}

/// `2bdp`, `0.5bdp` (multiples of the bandwidth-delay product) or a size (`4M`).
pub fn parse_queue(text: &str, bdp: u64) -> std::result::Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    if let Some(n) = t.strip_suffix("bdp") {
        let n: f64 = n.parse().map_err(|_| {
            format!("'{text}' is not a multiple of the BDP (examples: 1bdp, 0.5bdp)")
        })?;
        if !n.is_finite() || n <= 0.0 || n > 1000.0 {
            return Err(format!("'{text}': use 0 < N <= 1000"));
        }
        Ok((bdp as f64 * n) as u64)
    } else {
        units::parse_size(text).map_err(|e| format!("{e}, or a multiple of the BDP like 2bdp"))
    }
}

/// `0.1%` or a fraction `0.001`.
pub fn parse_loss(text: &str) -> std::result::Result<f64, String> {
    let t = text.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a loss rate (examples: 0.01%, 0.0001)"))?;
    let p = v / scale;
    if !(0.0..=1.0).contains(&p) {
        // A bare number is a fraction: 1.5 is 150 %, which a 1.5 % meant as `1.5%` is not.
        return Err(match (scale == 1.0, v > 1.0 && v <= 100.0) {
            (true, true) => format!("'{text}' is a fraction above 1 (a percentage is '{t}%')"),
            _ => format!("'{text}' is not between 0 and 100 % (0.01%, or a fraction 0.0001)"),
        });
    }
    Ok(p)
}

/// Parses the options after `--` as a client's and checks them before anything is created.
#[cfg(test)]
pub fn client_config(a: &LabArgs) -> Result<ClientConfig> {
    client_options(a).map(|(cfg, _)| cfg)
}

/// The client's configuration and its output flags, from the options after `--`.
pub fn client_options(a: &LabArgs) -> Result<(ClientConfig, crate::cli::OutputArgs)> {
    if let Some(msg) =
        crate::cli::not_yet(&a.client_args).or_else(|| crate::cli::detached_method(&a.client_args))
    {
        return Err(Error::Usage(format!("client options after `--`: {msg}")));
    }
    let argv = std::iter::once("pinperf lab --".to_string()).chain(a.client_args.iter().cloned());
    let argv = crate::cli::attach_signed_values(argv.collect());
    let clap_error = |e: clap::Error| {
        let text = e.to_string();
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string();
        Error::Usage(format!("client options after `--`: {first}"))
    };
    let matches = Args::command()
        .try_get_matches_from(argv)
        .map_err(clap_error)?;
    if let Some(msg) = crate::cli::server_option(&matches) {
        return Err(Error::Usage(format!("client options after `--`: {msg}")));
    }
    let mut args = Args::from_arg_matches(&matches).map_err(clap_error)?;
    if args.server || args.target.client.is_some() || args.target.loopback || args.command.is_some()
    {
        return Err(Error::Usage(
            "pinperf lab runs its own server and client: leave -s, -c, --loopback and \
             subcommands out of the options after `--`"
                .into(),
        ));
    }
    if let Some(port) = args.target.port {
        return Err(Error::Usage(format!(
            "client options after `--`: -p {port}: the lab's server listens on an ephemeral \
             port in its own namespace; drop -p"
        )));
    }
    if args.target.bind.is_some() || args.target.ipv6 {
        return Err(Error::Usage(
            "the lab path is IPv4 198.18.0.2 -> 198.18.0.1: leave -B and -6 out".into(),
        ));
    }
    if args.target.peer == crate::choices::Peer::Iperf3 {
        return Err(Error::Usage(
            "--peer iperf3: the lab's server is pinperf's own; drop --peer".into(),
        ));
    }
    args.target.client = Some(SERVER_ADDR.to_string());
    args.target.peer = crate::choices::Peer::Pinperf;
    match config::from_args(&args)? {
        config::Mode::Client(mut cfg) => {
            cfg.same_process = true;
            Ok((*cfg, args.output))
        }
        config::Mode::Server(_) => unreachable!("-s was rejected above"),
    }
}

/// Runs `pinperf lab`.
pub fn run(a: &LabArgs) -> Result<()> {
    let spec = path_spec(a)?;
    let (mut test, format, output) = lab_test(a, &spec)?;
    check_host()?;
    // net.ipv4.tcp_mem is visible only here, in the initial namespace: read it once now.
    let _ = crate::os::kstat::tcp_mem();
    // Signals are taken by one thread from here on, so teardown runs whatever is running.
    sys::block_stop_signals().map_err(|e| Error::io("block SIGINT/SIGTERM", e))?;
    let teardown = TeardownGuard::default();
    spawn_signal_thread(teardown.shared())?;
    let mut out = LabOut::new(format, &output)?;
    let result = run_lab(&spec, &mut test, &teardown, &mut out);
    finish(result, &teardown, &mut out)
}

/// What the lab runs over its path: the client test of the options after `--`, or with
/// `-- diagnose …` a diagnosis (`-J`: its document, with the lab's figures added).
enum LabTest {
    Client(Box<ClientConfig>),
    Diagnose(Box<Session>),
}

/// The lab's test from the options after `--`, its output format and flags, all checked
/// before anything is created.
fn lab_test(a: &LabArgs, spec: &PathSpec) -> Result<(LabTest, Format, OutputArgs)> {
    if a.client_args.first().is_some_and(|w| w == "diagnose") {
        if a.blackout_from.is_some() {
            return Err(Error::Usage(
                "--blackout-from with diagnose after `--`: not supported; drop one".into(),
            ));
        }
        let argv = std::iter::once("pinperf").chain(a.client_args.iter().map(String::as_str));
        let args = <Args as clap::Parser>::try_parse_from(argv)
            .map_err(|e| Error::Usage(format!("diagnose after `--`: {}", first_line(&e))))?;
        let Some(crate::cli::Command::Diagnose(d)) = args.command else {
            return Err(Error::Usage(
                "diagnose after `--`: expected its options".into(),
            ));
        };
        let session = diagnose::lab_session(&d, SERVER_ADDR)?;
        let format = if d.json { Format::Json } else { Format::Text };
        let test = LabTest::Diagnose(Box::new(session));
        return Ok((test, format, OutputArgs::default()));
    }
    let (cfg, output) = client_options(a)?;
    check_blackout(a, spec, &cfg)?;
    let format = cfg.format;
    Ok((LabTest::Client(Box::new(cfg)), format, output))
}

/// The first line of a clap error, without its `error: `.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or("");
    line.trim_start_matches("error: ").to_string()
}

/// A blackout must start while the test still runs. The path comes up just before the
/// handshake: a blackout past the handshake (a few round trips, two per data and echo
/// connection) and the test's planned end (-O and -t) would never be seen.
fn check_blackout(a: &LabArgs, spec: &PathSpec, cfg: &ClientConfig) -> Result<()> {
    let Some(from) = a.blackout_from else {
        return Ok(());
    };
    let connections = u32::try_from(2 * cfg.test.threads()).unwrap_or(u32::MAX);
    let setup = spec.rtt.saturating_mul(4 + 2 * connections);
    let end = cfg.test.run_time() + setup;
    if from >= end {
        return Err(Error::Usage(format!(
            "--blackout-from {}s: the test ends about {:.1}s after the path comes up (its \
             handshake over --rtt, then -O and -t); use less, or a longer -t after --",
            from.as_secs_f64(),
            end.as_secs_f64()
        )));
    }
    Ok(())
}

/// What the lab needs of this host: root, a TUN device and iproute2's `ip`.
fn check_host() -> Result<()> {
    if !sys::is_root() {
        return Err(Error::Usage(
            "pinperf lab creates network namespaces and TUN devices: run it as root".into(),
        ));
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err(Error::Test(
            "pinperf lab needs /dev/net/tun (modprobe tun)".into(),
        ));
    }
    ip(&["-V"]).map_err(|_| {
        Error::Test("pinperf lab needs iproute2's `ip` (apt-get install iproute2)".into())
    })?;
    Ok(())
}

/// The `lab-signals` thread: at a stop signal it tears the lab down and exits the process
/// by that signal, after letting a running test stop and print (see the module's doc).
fn spawn_signal_thread(on_signal: Arc<Mutex<Teardown>>) -> Result<()> {
    spawn_named("lab-signals".into(), move || -> Result<()> {
        let mut sig = sys::wait_stop_signal();
        let first = std::time::Instant::now();
        // The client's test (running, or starting later) stops at this and prints.
        crate::signals::record(sig);
        // Waits for an `ip netns add` in progress, and keeps the lock until the process
        // is gone, so the main thread creates nothing after this teardown.
        let mut list = on_signal.lock();
        if list.results_pending {
            // `run` tears down once the test has stopped and the results are printed, and
            // the process ends with it.
            drop(list);
            let grace = Some(crate::timeouts::SIGNAL_GRACE);
            if let Some(again) = crate::signals::another(first, grace) {
                sig = again;
            }
            list = on_signal.lock();
        }
        list.run();
        // Waits for an `ip` child of another thread to finish, and starts no more.
        let _no_more_ip = IP_RUNNING.lock();
        note(&signal_text(sig, &list.removed));
        sys::die_by(sig);
    })?;
    Ok(())
}

/// Tears down, prints what was removed, and gives the run's outcome: a write error of
/// the lab's output if nothing else failed, and a signal's error if one came.
fn finish(result: Result<()>, teardown: &TeardownGuard, out: &mut LabOut) -> Result<()> {
    let removed = teardown.finish();
    let gone = removed.iter().filter(|r| r.failure.is_none());
    let failed = removed.iter().filter_map(|r| {
        let why = r.failure.as_ref()?;
        Some(format!("netns {} not removed: {why}", r.netns))
    });
    out.end(
        gone.map(|r| r.netns.clone()).collect(),
        failed.collect(),
        &format!("# lab: removed {}", removed_text(&removed)),
    );
    teardown.0.lock().results_pending = false;
    let result = match (result, out.write_error()) {
        (Ok(()), Some(e)) => Err(e),
        (result, _) => result,
    };
    match crate::signals::received() {
        Some(sig) => {
            note(&signal_text(sig, &teardown.0.lock().removed));
            // The client's own error names the signal and when it came.
            match result {
                Err(e @ Error::Interrupted { .. }) => Err(e),
                _ => Err(crate::signals::interrupted(sig, "during the lab")),
            }
        }
        None => result,
    }
}

/// The line a lab stopped by signal `sig` ends with, naming every namespace it removed.
fn signal_text(sig: i32, removed: &[Removal]) -> String {
    format!(
        "pinperf lab: signal {sig}, stopped; removed {}",
        removed_text(removed)
    )
}

/// A warning or notice on stderr. Never panics: when stderr itself is closed there is
/// nowhere left to say anything, and the lab goes on (and tears down).
fn note(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// The lab proper: namespaces and TUN devices, a relay each way, then the test; the
/// relays' figures and warnings go to `out` once the test has ended.
fn run_lab(
    spec: &PathSpec,
    test: &mut LabTest,
    teardown: &TeardownGuard,
    out: &mut LabOut,
) -> Result<()> {
    remove_stale_namespaces();
    let pid = std::process::id();
    let server_ns = format!("{NETNS_PREFIX}{pid}-server");
    let client_ns = format!("{NETNS_PREFIX}{pid}-client");
    let server = Netns::create(&server_ns, teardown)?;
    let client = Netns::create(&client_ns, teardown)?;
    let server_tun = server.tun(SERVER_ADDR, CLIENT_ADDR, spec.mtu)?;
    let client_tun = client.tun(CLIENT_ADDR, SERVER_ADDR, spec.mtu)?;

    let allowed = pin::allowed_cpus();
    let cpus = RelayCpus {
        forward: allowed.last().copied(),
        back: allowed.first().copied(),
    };
    let ends = Ends {
        client: client_ns,
        server: server_ns,
    };
    if !out.path(LabPath::new(spec, ends, cpus)) {
        // Nobody reads the results (stdout closed before the test began): stop quietly;
        // `run` tears down.
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The path comes up now: a blackout counts from here.
    let up = (spec.blackout, std::time::Instant::now());
    let mtu = spec.mtu as usize;
    let forward = spawn_relay(
        "lab-forward",
        (client_tun.clone(), server_tun.clone()),
        (spec.direction(0x9e37), mtu, up),
        cpus.forward,
        &stop,
    )?;
    let back = spawn_relay(
        "lab-return",
        (server_tun.clone(), client_tun.clone()),
        (spec.direction(0x7f4a), mtu, up),
        cpus.back,
        &stop,
    )?;

    let (outcome, params) = match test {
        LabTest::Client(cfg) => {
            let formatter = out.client_formatter();
            let summary = serve_and_test(&server, &client, cfg, teardown, formatter);
            let bps = summary.map(|s| Some(s.sum_received.bits_per_second));
            (bps, cfg.test.clone())
        }
        LabTest::Diagnose(session) => {
            let to = out.diagnosis_writer();
            let verdict = serve_and_diagnose(&server, &client, session, to, teardown);
            (
                verdict.map(|()| None),
                crate::wire::params::TestParams::defaults(),
            )
        }
    };
    stop.store(true, Ordering::Relaxed);
    let relays = (join_relay(forward)?, join_relay(back)?);
    let received_bps = outcome.as_ref().ok().copied().flatten();
    let netns = Ends {
        client: &client,
        server: &server,
    };
    report_relays(out, relays, netns, received_bps, (spec, &params));
    outcome.map(|_| ())
}

/// What the relays did, once the test has ended: their figures, the TUN devices' drops,
/// and their warnings (no real-time priority; late deliveries that may have held the
/// run, which received `received_bps`, below what the path allowed).
fn report_relays(
    out: &mut LabOut,
    ((fwd, fwd_priority), (ret, ret_priority)): (RelayEnd, RelayEnd),
    netns: Ends<&Netns>,
    received_bps: Option<f64>,
    (spec, test): (&PathSpec, &crate::wire::params::TestParams),
) {
    out.relay(LabRelay::new(Direction::Forward, &fwd));
    out.relay(LabRelay::new(Direction::Return, &ret));
    out.tun_drops(Ends {
        client: netns.client.tun_drops(),
        server: netns.server.tun_drops(),
    });
    for warning in [fwd_priority, ret_priority].into_iter().flatten() {
        out.warning(warning);
    }
    if let Some(warning) = report::late_warning(
        fwd.late + ret.late,
        fwd.path.packets + ret.path.packets,
        fwd.worst_late_ns.max(ret.worst_late_ns),
        received_bps,
        ceiling(spec, test),
    ) {
        out.warning(warning);
    }
}

/// A relay thread, `name`, pinned to `cpu`: moves packets `from` one TUN device `to` the
/// other through `path` until `stop` is set.
fn spawn_relay(
    name: &str,
    (from, to): (Arc<File>, Arc<File>),
    (path, mtu, up): (Path, usize, (Option<path::Blackout>, std::time::Instant)),
    cpu: Option<usize>,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<RelayEnd>>> {
    let stop = stop.clone();
    let name = name.to_string();
    spawn_named(name.clone(), move || {
        if let Some(cpu) = cpu {
            pin::pin_current(cpu).map_err(Error::Test)?;
        }
        // Real-time priority: a packet's due time must not wait for a stream thread's
        // time slice on the same core. The relay sleeps between packets, and the
        // kernel's RT throttling still leaves others 5 % of the core in the worst case.
        let priority = sys::set_realtime(RELAY_PRIORITY).err().map(|e| {
            let warning = format!("relay {name} keeps normal priority (SCHED_FIFO: {e})");
            note(&format!("pinperf lab: {warning}"));
            Warning::said(warning)
        });
        Ok((relay::run(&from, &to, path, mtu, up, &stop), priority))
    })
}

/// What the run could reach over `spec`'s path, and what else held it back (see
/// [`report::late_warning`]).
fn ceiling(spec: &PathSpec, test: &crate::wire::params::TestParams) -> report::Ceiling {
    // -b (UDP's default rate without it) or --fq-rate, per stream, whichever is lower.
    let per_stream = match (test.rate(), test.fq_rate_bps) {
        (Some(b), Some(fq)) if fq < b => Some((fq, "--fq-rate")),
        (Some(b), _) => Some((b, "-b")),
        (None, fq) => fq.map(|fq| (fq, "--fq-rate")),
    };
    let asked = per_stream.map(|(b, flag)| (b.saturating_mul(u64::from(test.streams)), flag));
    // Slow start takes about log2(BDP in packets) round trips; ten is a test too short to
    // show the path's rate.
    let short = test.run_time() < spec.rtt * 10;
    let other = match () {
        _ if spec.loss > 0.0 => Some("--loss"),
        _ if spec.blackout.is_some() => Some("--blackout-from"),
        _ if short => Some("-t shorter than ten round trips"),
        _ => None,
    };
    let mut c = report::Ceiling::path(spec.rate_bps);
    if let Some((a, flag)) = asked.filter(|&(a, _)| a < spec.rate_bps) {
        (c.bps, c.set_by) = (a, Some(flag));
    }
    c.other = other;
    // -M sets the packets' size only where it is below what the MTU allows.
    c.mss = test
        .transport
        .mss
        .filter(|&m| u64::from(m) + 40 < u64::from(spec.mtu));
    c
}

/// Runs the server on a thread inside `server`'s namespace and the client inside
/// `client`'s, printing through `formatter`; returns the client's result. From the client's
/// start the teardown list says that results are pending (`run` clears it once it has
/// printed them): a signal then lets the test stop and everything print before the lab is
/// torn down.
fn serve_and_test(
    server: &Netns,
    client: &Netns,
    cfg: &mut ClientConfig,
    teardown: &TeardownGuard,
    formatter: Box<dyn Formatter>,
) -> Result<Summary> {
    cfg.target.port = start_server(server, true)?;
    let cfg = cfg.clone();
    in_client_netns(client, teardown, move || {
        crate::client::run_with(cfg, formatter)
    })
}

/// As [`serve_and_test`], for a diagnosis: its runs, one after another, from the client's
/// namespace to the one server, and its verdict.
fn serve_and_diagnose(
    server: &Netns,
    client: &Netns,
    session: &mut Session,
    (json, out): (bool, Box<dyn std::io::Write + Send>),
    teardown: &TeardownGuard,
) -> Result<()> {
    // Its runs, one after another, to one server.
    session.serve_at(start_server(server, false)?);
    let session = session.clone();
    in_client_netns(client, teardown, move || session.run_and_print(json, out))
}

/// Starts the lab's server on a thread inside `server`'s namespace (`one_off`: for one
/// test); its port.
fn start_server(server: &Netns, one_off: bool) -> Result<u16> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let server_file = server
        .file
        .try_clone()
        .map_err(|e| Error::io("dup netns handle", e))?;
    spawn_named("lab-server".into(), move || {
        let bound = (|| {
            sys::enter_netns(server_file.as_fd())
                .map_err(|e| Error::io("enter server netns", e))?;
            let s = Server::bind(ServerConfig::in_process(
                IpAddr::V4(SERVER_ADDR),
                one_off,
                Affinity::Auto,
            ))?;
            let port = s.local_addr()?.port();
            Ok((s, port))
        })();
        match bound {
            Ok((s, port)) => {
                let _ = tx.send(Ok(port));
                s.run()
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                Ok(())
            }
        }
    })?;
    rx.recv_timeout(crate::timeouts::HANDSHAKE)
        .map_err(|_| Error::Test("the lab server did not start in time".into()))?
}

/// Runs `test` on the `lab-client` thread inside `client`'s namespace, once the teardown
/// list says results are pending; its result.
fn in_client_netns<T: Send + 'static>(
    client: &Netns,
    teardown: &TeardownGuard,
    test: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let client_file = client
        .file
        .try_clone()
        .map_err(|e| Error::io("dup netns handle", e))?;
    {
        let mut list = teardown.0.lock();
        if list.done {
            return Err(Error::Test(
                "the lab is being torn down: the test does not start".into(),
            ));
        }
        list.results_pending = true;
    }
    let handle = spawn_named("lab-client".into(), move || {
        sys::enter_netns(client_file.as_fd()).map_err(|e| Error::io("enter client netns", e))?;
        test()
    });
    handle.and_then(|h| {
        h.join()
            .map_err(|_| Error::Test("the lab client thread panicked".into()))?
    })
}

/// A relay's figures, and the warning it gave when it could not get real-time priority.
type RelayEnd = (RelayStats, Option<Warning>);

fn join_relay(h: std::thread::JoinHandle<Result<RelayEnd>>) -> Result<RelayEnd> {
    h.join()
        .map_err(|_| Error::Test("a lab relay thread panicked".into()))?
}

/// Held while an `ip` child runs. The `lab-signals` thread takes it after its teardown and
/// keeps it until the process exits, so no `ip` child outlives the lab (an orphan still
/// working on a namespace being deleted). Never held while taking the teardown list's lock.
static IP_RUNNING: Mutex<()> = Mutex::new(());

/// Runs `ip ARGS`; the error carries its stderr.
fn ip(args: &[&str]) -> Result<()> {
    let _running = IP_RUNNING.lock();
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::io("run `ip` (iproute2)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Test(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The namespaces this run names, deleted by whoever gets there first: the end of `run`
/// (or its unwinding, through [`TeardownGuard`]) or the `lab-signals` thread. Always used
/// behind one lock, which [`Netns::create`] holds across `ip netns add`.
#[derive(Default)]
struct Teardown {
    /// Each name is added before its namespace is created, so teardown never misses one.
    namespaces: Vec<String>,
    /// Set by the first teardown: no namespace may be created after it.
    done: bool,
    /// Every namespace a teardown removed so far, whichever thread ran it.
    removed: Vec<Removal>,
    /// The client's test runs, or its results and the lab's are still being printed: a
    /// signal lets `run` finish them before tearing down.
    results_pending: bool,
}

/// One namespace teardown found: deleted, or not (`failure` says why).
#[derive(Debug, Clone, PartialEq)]
struct Removal {
    netns: String,
    failure: Option<String>,
}

impl std::fmt::Display for Removal {
    /// `netns NAME`, or `netns NAME FAILED (why)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "netns {}", self.netns)?;
        match &self.failure {
            Some(why) => write!(f, " FAILED ({why})"),
            None => Ok(()),
        }
    }
}

impl Teardown {
    /// Deletes each listed namespace that exists; returns one entry per namespace it found.
    /// Empty when none existed.
    fn run(&mut self) -> Vec<Removal> {
        self.done = true;
        let removed: Vec<Removal> = self
            .namespaces
            .drain(..)
            .filter(|ns| netns_exists(ns))
            .map(|netns| Removal {
                failure: ip(&["netns", "delete", &netns])
                    .err()
                    .map(|e| e.to_string()),
                netns,
            })
            .collect();
        self.removed.extend(removed.iter().cloned());
        removed
    }
}

/// What a teardown removed, for the lab's last line and the signal message.
fn removed_text(removed: &[Removal]) -> String {
    if removed.is_empty() {
        "nothing (no namespace had been created)".into()
    } else {
        removed
            .iter()
            .map(Removal::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// True when `/run/netns/NAME` exists, i.e. `ip netns add NAME` created it.
fn netns_exists(name: &str) -> bool {
    std::path::Path::new(&format!("/run/netns/{name}")).exists()
}

/// Owns the teardown list for `run`: tears the lab down when dropped, so an error, a panic
/// or an early return cannot leave a namespace. `finish` tears down on the normal way out
/// and says what it removed; the drop after it finds nothing left.
#[derive(Default)]
struct TeardownGuard(Arc<Mutex<Teardown>>);

impl TeardownGuard {
    /// The list, for the `lab-signals` thread.
    fn shared(&self) -> Arc<Mutex<Teardown>> {
        self.0.clone()
    }

    /// Tears down now; what was removed.
    fn finish(&self) -> Vec<Removal> {
        self.0.lock().run()
    }
}

impl Drop for TeardownGuard {
    fn drop(&mut self) {
        let removed = self.finish();
        if !removed.is_empty() {
            note(&format!("pinperf lab: removed {}", removed_text(&removed)));
        }
    }
}

/// A namespace of this run.
struct Netns {
    name: String,
    file: File,
}

impl Netns {
    /// Creates namespace `name` with its loopback up. The name is listed for teardown
    /// first, and the list stays locked while `ip netns add` runs: a signal's teardown
    /// waits for the namespace to exist, then deletes it.
    fn create(name: &str, teardown: &TeardownGuard) -> Result<Netns> {
        {
            let mut list = teardown.0.lock();
            if list.done {
                return Err(Error::Test(format!(
                    "the lab is being torn down: netns {name} not created"
                )));
            }
            list.namespaces.push(name.to_string());
            ip(&["netns", "add", name])?;
        }
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        let file = File::open(format!("/run/netns/{name}"))
            .map_err(|e| Error::io(format!("open /run/netns/{name}"), e))?;
        Ok(Netns {
            name: name.to_string(),
            file,
        })
    }

    /// Creates this namespace's TUN device (from a thread that enters the namespace, since
    /// a device belongs to its creator's namespace), addresses and raises it.
    fn tun(&self, local: Ipv4Addr, peer: Ipv4Addr, mtu: u32) -> Result<Arc<File>> {
        let ns = self
            .file
            .try_clone()
            .map_err(|e| Error::io("dup netns handle", e))?;
        let fd = std::thread::scope(|s| {
            s.spawn(|| {
                sys::enter_netns(ns.as_fd())?;
                sys::tun_open(DEVICE)
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
        })
        .map_err(|e| {
            Error::io(
                format!("create TUN device {DEVICE} in netns {}", self.name),
                e,
            )
        })?;
        let mtu = mtu.to_string();
        let n = self.name.as_str();
        ip(&[
            "-n",
            n,
            "link",
            "set",
            "dev",
            DEVICE,
            "mtu",
            &mtu,
            "txqueuelen",
            TXQUEUELEN,
            "up",
        ])?;
        let addr = format!("{local}/32");
        let peer = format!("{peer}/32");
        ip(&["-n", n, "addr", "add", &addr, "peer", &peer, "dev", DEVICE])?;
        Ok(Arc::new(File::from(fd)))
    }

    /// Packets the TUN device dropped before the relay read them (tx_dropped).
    fn tun_drops(&self) -> Option<u64> {
        let _running = IP_RUNNING.lock();
        let out = Command::new("ip")
            .args(["-n", &self.name, "-s", "-j", "link", "show", "dev", DEVICE])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v.get(0)?
            .get("stats64")?
            .get("tx")?
            .get("dropped")?
            .as_u64()
    }
}

/// Deletes namespaces left by labs whose process no longer exists (killed with SIGKILL).
fn remove_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            && ip(&["netns", "delete", &name]).is_ok()
        {
            note(&format!(
                "pinperf lab: removed netns {name} left by an earlier lab (pid {pid}, gone)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The run's ceiling: the path's rate, or the test's own rate below it (-b, UDP's
    /// default 1 Mbit/s, --fq-rate), times the streams; and what else slows it.
    #[test]
    fn a_runs_ceiling_is_the_lower_of_the_path_and_what_the_test_asked_for() {
        let spec = PathSpec {
            rtt: Duration::from_millis(10),
            rate_bps: 100_000_000,
            queue_bytes: 1 << 20,
            loss: 0.0,
            mtu: 9000,
            blackout: None,
        };
        let mut test = crate::wire::params::TestParams::defaults();
        test.duration = Duration::from_secs(2);
        let c = ceiling(&spec, &test);
        assert_eq!((c.bps, c.set_by, c.other), (100_000_000, None, None));
        test.udp = true;
        assert_eq!(ceiling(&spec, &test).bps, 1_000_000, "UDP's default rate");
        (test.udp, test.streams, test.rate_bps) = (false, 2, Some(20_000_000));
        let c = ceiling(&spec, &test);
        assert_eq!((c.bps, c.set_by), (40_000_000, Some("-b")));
        test.fq_rate_bps = Some(5_000_000);
        let c = ceiling(&spec, &test);
        assert_eq!(
            (c.bps, c.set_by),
            (10_000_000, Some("--fq-rate")),
            "below -b"
        );
        test.rate_bps = Some(80_000_000);
        test.fq_rate_bps = None;
        assert_eq!(ceiling(&spec, &test).bps, 100_000_000, "-b over the path");
        let lossy = PathSpec { loss: 0.01, ..spec };
        assert_eq!(ceiling(&lossy, &test).other, Some("--loss"));
        test.duration = Duration::from_millis(90);
        assert_eq!(
            ceiling(&spec, &test).other,
            Some("-t shorter than ten round trips")
        );
        // -M sets the packets' size where the MTU allows larger ones, not past it.
        test.transport.mss = Some(1000);
        assert_eq!(ceiling(&spec, &test).mss, Some(1000));
        let small = PathSpec { mtu: 1000, ..spec };
        assert_eq!(ceiling(&small, &test).mss, None);
    }

    #[test]
    fn teardown_reports_only_namespaces_that_existed() {
        let mut list = Teardown {
            namespaces: vec![format!("{NETNS_PREFIX}0-never-created")],
            ..Teardown::default()
        };
        let removed = list.run();
        assert!(removed.is_empty(), "{removed:?}");
        assert_eq!(
            removed_text(&removed),
            "nothing (no namespace had been created)"
        );
        assert!(list.done && list.namespaces.is_empty());
        let names = [
            Removal {
                netns: "a".into(),
                failure: None,
            },
            Removal {
                netns: "b".into(),
                failure: Some("busy".into()),
            },
        ];
        assert_eq!(removed_text(&names), "netns a, netns b FAILED (busy)");
    }

    #[test]
    fn a_panic_after_a_namespace_is_created_still_removes_it() {
        if !sys::is_root() || ip(&["-V"]).is_err() {
            eprintln!(
                "SKIPPED: a_panic_after_a_namespace_is_created_still_removes_it: needs root \
                 and iproute2"
            );
            return;
        }
        let name = format!("{NETNS_PREFIX}{}-unit-guard", std::process::id());
        let unwound = std::panic::catch_unwind(|| {
            let teardown = TeardownGuard::default();
            let created = Netns::create(&name, &teardown);
            assert!(netns_exists(&name), "created: {:?}", created.err());
            panic!("a bug mid-lab");
        });
        assert!(unwound.is_err());
        assert!(!netns_exists(&name), "{name} left after a panic");
        let teardown = TeardownGuard::default();
        teardown.finish();
        let e = Netns::create(&name, &teardown).err().expect("refused");
        assert!(e.to_string().contains("being torn down"), "{e}");
        assert!(!netns_exists(&name), "nothing is created after a teardown");
    }

    #[test]
    fn queue_sizes_in_bdp_or_bytes() {
        let bdp = 7_500_000;
        assert_eq!(parse_queue("2bdp", bdp), Ok(15_000_000));
        assert_eq!(parse_queue("0.5BDP", bdp), Ok(3_750_000));
        assert_eq!(parse_queue("4M", bdp), Ok(4 << 20));
        assert!(parse_queue("bdp", bdp).is_err());
        assert!(parse_queue("-1bdp", bdp).is_err());
        assert!(parse_queue("lots", bdp).unwrap_err().contains("2bdp"));
    }

    #[test]
    fn loss_as_percent_or_fraction() {
        assert_eq!(parse_loss("0"), Ok(0.0));
        assert_eq!(parse_loss("1%"), Ok(0.01));
        assert_eq!(parse_loss("0.001"), Ok(0.001));
        assert!(parse_loss("101%").is_err());
        assert_eq!(
            parse_loss("1.5"),
            Err("'1.5' is a fraction above 1 (a percentage is '1.5%')".into())
        );
        assert!(parse_loss("x").is_err());
    }

    fn lab_args(extra: &[&str]) -> LabArgs {
        let argv = ["pinperf", "lab"].iter().chain(extra.iter());
        match Args::try_parse_from(argv).unwrap().command {
            Some(crate::cli::Command::Lab(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_blackout_is_a_moment_and_optionally_udp_only() {
        assert_eq!(path_spec(&lab_args(&[])).unwrap().blackout, None);
        let spec = path_spec(&lab_args(&["--blackout-from", "2s"])).unwrap();
        assert_eq!(
            spec.blackout,
            Some(path::Blackout {
                from_ns: 2_000_000_000,
                udp_only: false
            })
        );
        let spec = path_spec(&lab_args(&[
            "--blackout-from",
            "1.5",
            "--blackout-udp-only",
        ]))
        .unwrap();
        assert_eq!(
            spec.blackout.map(|b| (b.from_ns, b.udp_only)),
            Some((1_500_000_000, true))
        );
        let argv = ["pinperf", "lab", "--blackout-udp-only"];
        assert!(Args::try_parse_from(argv).is_err(), "needs --blackout-from");
    }

    #[test]
    fn the_default_path_is_the_fairness_study_s() {
        let spec = path_spec(&lab_args(&[])).unwrap();
        assert_eq!(spec.rtt, Duration::from_millis(60));
        assert_eq!(spec.rate_bps, 1_000_000_000);
        assert_eq!(spec.bdp(), 7_500_000);
        assert_eq!(spec.queue_bytes, 7_500_000);
        assert_eq!(spec.mtu, 9000);
    }

    #[test]
    fn client_options_after_the_separator_are_checked_before_anything_is_created() {
        let cfg = client_config(&lab_args(&["--", "-P", "8", "-w", "16M", "-t", "20"])).unwrap();
        assert_eq!(cfg.test.streams, 8);
        assert_eq!(cfg.test.window_bytes, Some(16 << 20));
        assert_eq!(cfg.target.host.as_deref(), Some("198.18.0.1"));
        let with = [
            "--", "-V", "-T", "t", "--plot", "p.svg", "--html", "r.html", "-f", "g",
        ];
        let (_, output) = client_options(&lab_args(&with)).unwrap();
        assert!(output.text.verbose && output.plot.is_some() && output.html.is_some());
        let e = client_config(&lab_args(&["--", "-c", "10.0.0.1"])).unwrap_err();
        assert!(e.to_string().contains("leave -s, -c"), "{e}");
        // Its server is pinperf's own: no iperf3 hint, and no --peer iperf3.
        let e = client_config(&lab_args(&["--", "-l", "8"])).unwrap_err();
        assert!(!e.to_string().contains("iperf3"), "{e}");
        let e = client_config(&lab_args(&["--", "--peer", "iperf3"])).unwrap_err();
        assert!(
            e.to_string().contains("the lab's server is pinperf's own"),
            "{e}"
        );
        let e = client_config(&lab_args(&["--", "-p", "6000"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("client options after `--`: -p 6000: the lab's server"),
            "{e}"
        );
        let e = client_config(&lab_args(&["--", "--max-rate", "1M"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("client options after `--`: --max-rate: a server option"),
            "{e}"
        );
        let e = client_config(&lab_args(&["--", "-P", "x"])).unwrap_err();
        assert!(e.to_string().contains("client options after `--`"), "{e}");
        assert!(matches!(e, Error::Usage(_)));
        let e = path_spec(&lab_args(&["--queue", "100"])).unwrap_err();
        assert!(e.to_string().contains("--queue"), "{e}");
        // Past the longest round trip the handshake's deadlines hold (the client's default
        // --connect-timeout is above it).
        let e = path_spec(&lab_args(&["--rtt", "4.5s"])).unwrap_err();
        assert!(e.to_string().starts_with("--rtt 4.5s: use 0.1ms"), "{e}");
        assert!(
            e.to_string().contains("to 4s (the longest round trip"),
            "{e}"
        );
        assert!(path_spec(&lab_args(&["--rtt", "4s"])).is_ok());
        let args = crate::cli::Args::try_parse_from(["pinperf", "-c", "h"]).unwrap();
        assert!(args.target.connect_timeout > crate::timeouts::LONGEST_RTT);
        let e = path_spec(&lab_args(&["--blackout-from", "0"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--blackout-from 0: the path would be dead")
        );
        assert!(path_spec(&lab_args(&["--blackout-from", "1ms"])).is_ok());
        // 1bdp of a thin, short path, asked for: what made it so small, and the fix.
        let thin = ["--rate", "1M", "--rtt", "1ms"];
        let e = path_spec(&lab_args(&[&thin[..], &["--queue", "1bdp"]].concat())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--queue 1bdp: 125 bytes (of a 125-byte BDP at --rate 1M and --rtt 0.001s) do not \
             hold one 9000-byte packet; give --queue 9000 or more"
        );
        // The default is one BDP, raised to the one packet a queue must hold.
        assert_eq!(path_spec(&lab_args(&thin)).unwrap().queue_bytes, 9000);
        let wide = path_spec(&lab_args(&["--rate", "1G", "--rtt", "10ms"])).unwrap();
        assert_eq!(wide.queue_bytes, wide.bdp());
    }
}
