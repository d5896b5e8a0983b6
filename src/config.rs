//! Turns parsed [`Args`] into a validated [`Mode`]. The test's own parameters are checked
//! by [`TestParams::validate`] (the rule the server applies too); this module checks only
//! what is local: the mode, the address family, pinning, the server's limits. Every
//! client configuration, the CLI's, `compare`'s and the lab's, is built by
//! [`ClientConfig::new`].

use std::net::IpAddr;
use std::time::Duration;

use crate::choices::{Engine, Format};
use crate::cli::{Args, DEFAULT_PORT, TargetArgs};
use crate::data::pin::Affinity;
use crate::error::{Error, Result};
use crate::os::net::{Family, Source};
use crate::units::format_size;
use crate::wire::params::{Limits, MAX_WINDOW, MIN_INTERVAL, MIN_WINDOW, TestParams};

/// What this invocation does.
#[derive(Debug)]
pub enum Mode {
    Server(Box<ServerConfig>),
    Client(Box<ClientConfig>),
}

/// Where the server is: `host` and `port`, or an in-process server with `loopback`.
#[derive(Debug, Clone)]
pub struct Target {
    /// Server host; `None` with `loopback`.
    pub host: Option<String>,
    pub port: u16,
    /// `-B`, `--bind-dev`, `--cport`, `-m`, `-L`: where connections come from.
    pub source: Source,
    pub family: Family,
    pub connect_timeout: Duration,
    pub loopback: bool,
    /// What the server speaks (`--peer`).
    pub peer: crate::choices::Peer,
}

impl Target {
    /// Checks `-c`/`--loopback`/`-B`/`-4`/`-6` together.
    pub fn from_args(a: &TargetArgs) -> Result<Target> {
        if a.loopback && a.client.is_some() {
            return Err(usage("-c and --loopback exclude each other: choose one"));
        }
        if a.loopback && a.bind.is_some() {
            return Err(usage("-B: --loopback always uses 127.0.0.1; drop -B"));
        }
        if let (true, Some(port)) = (a.loopback, a.port) {
            return Err(usage(format!(
                "-p {port}: --loopback's in-process server listens on an ephemeral port; drop \
                 -p (or run pinperf -s -p {port} and pinperf -c 127.0.0.1 -p {port})"
            )));
        }
        // A source address of the other family fails at bind() with "Invalid argument".
        if let (Some(Ok(host)), Some(bind)) =
            (a.client.as_deref().map(str::parse::<IpAddr>), a.bind)
            && host.is_ipv4() != bind.is_ipv4()
        {
            let family = |ip: IpAddr| if ip.is_ipv4() { "IPv4" } else { "IPv6" };
            return Err(usage(format!(
                "-B {bind}: an {} address, but -c {host} is {}: bind an address of the \
                 server's family",
                family(bind),
                family(host)
            )));
        }
        // A source address fixes the family: the server's addresses of the other family
        // cannot be reached from it, so name resolution keeps only those of its own.
        let family = match (family(a), a.bind) {
            (Family::Any, Some(ip)) if ip.is_ipv4() => Family::V4,
            (Family::Any, Some(_)) => Family::V6,
            (Family::V4, Some(ip @ IpAddr::V6(_))) | (Family::V6, Some(ip @ IpAddr::V4(_))) => {
                let (flag, asks) = if a.ipv4 {
                    ("-4", "IPv4")
                } else {
                    ("-6", "IPv6")
                };
                return Err(usage(format!(
                    "-B {ip}: {flag} asks for {asks}, this address is not: drop one of them"
                )));
            }
            (f, _) => f,
        };
        if a.loopback && a.ipv6 {
            return Err(usage(
                "-6: --loopback runs on 127.0.0.1; use -c ::1 against a server for IPv6",
            ));
        }
        if a.loopback && a.peer == crate::choices::Peer::Iperf3 {
            return Err(usage(
                "--peer iperf3: --loopback starts a pinperf server; use -c HOST against an \
                 iperf3 server",
            ));
        }
        if a.client.is_some() && a.port == Some(0) {
            return Err(usage(format!(
                "-p 0: a client connects to the server's port (1-65535; without -p, {DEFAULT_PORT})"
            )));
        }
        if a.connect_timeout.is_zero() {
            return Err(usage(
                "--connect-timeout 0: give the connection some time, e.g. 5 (seconds)",
            ));
        }
        Ok(Target {
            host: a.client.clone(),
            port: a.port(),
            source: source(a)?,
            family,
            connect_timeout: a.connect_timeout,
            loopback: a.loopback,
            peer: a.peer,
        })
    }
}

/// `-F FILE`: a TCP test whose blocks are the file's bytes, which therefore carry no echo
/// header (kernel RTT only); without `-n`/`-k` a sending test ends at the file's end, as
/// iperf3's does. The file must exist to be sent; one to receive into is created.
fn with_file(test: &mut TestParams) -> Result<()> {
    let Some(path) = test.file.clone() else {
        return Ok(());
    };
    let shown = path.display();
    if test.udp {
        return Err(usage(format!(
            "-F {shown}: cannot transfer a file using UDP (iperf3's rule); drop -u"
        )));
    }
    if test.zerocopy.is_some() || test.skip_rx_copy {
        return Err(usage(format!(
            "-F {shown}: the file's bytes are copied; drop -Z and --skip-rx-copy"
        )));
    }
    test.transport.no_echo = true;
    if test.reverse {
        return Ok(());
    }
    let size = std::fs::metadata(&path)
        .map_err(|e| usage(format!("-F {shown}: cannot send it: {e}")))?
        .len();
    if size == 0 {
        return Err(usage(format!(
            "-F {shown}: the file is empty: nothing to send"
        )));
    }
    if test.budget().is_none() {
        test.bytes = Some(size);
    }
    Ok(())
}

/// A client's `-B`, `--bind-dev`, `--cport`, `-m` and `-L`, checked against each other.
fn source(a: &TargetArgs) -> Result<Source> {
    if a.loopback && (a.bind_dev.is_some() || a.cport.is_some() || a.flowlabel.is_some()) {
        return Err(usage(
            "--bind-dev, --cport and --flowlabel are for -c HOST: --loopback's server is in \
             this process, on 127.0.0.1",
        ));
    }
    if let (Some(label), true) = (a.flowlabel, a.ipv4) {
        return Err(usage(format!(
            "--flowlabel {label}: unable to set IPv6 flow label: -4 asks for IPv4 (drop one)"
        )));
    }
    Ok(Source {
        ip: a.bind,
        device: a.bind_dev.clone(),
        port: a.cport,
        mptcp: a.mptcp,
        flowlabel: a.flowlabel,
    })
}

/// A client's test: the parameters sent to the server and what stays local.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub target: Target,
    /// What the server is asked for (validated against [`Limits::PROTOCOL`]).
    pub test: TestParams,
    /// `-A`: the local streams' pinning.
    pub affinity: Affinity,
    pub format: Format,
    /// `--cpu`: a per-core CPU line per interval.
    pub cpu_intervals: bool,
    /// `--engine`.
    pub engine: Engine,
    /// The server runs in this process (`--loopback`, `compare --loopback`, the lab): CPU
    /// is counted once.
    pub same_process: bool,
    /// `--auth USER` and its secret.
    pub auth: Option<crate::server::auth::ClientAuth>,
    /// `--peer`: what the server speaks.
    pub peer: crate::choices::Peer,
    /// `--username` and `--rsa-public-key-path`: iperf3's credentials for its server.
    pub iperf3_auth: Option<crate::iperf3::auth::Credentials>,
    /// `--snd-timeout` and `--cntl-ka`: this end's own socket options.
    pub sockets: crate::os::net::HostSockets,
    /// No warnings on stderr: a placement probe's, which the test itself gives again.
    pub quiet: bool,
    /// One stream on this host may be placed by a probe (`client::probe`); off where the
    /// caller keeps placement fixed across its runs (`diagnose`).
    pub placement_probe: bool,
}

impl ClientConfig {
    /// The one constructor: validates `test` as the server will, and that `-C` exists
    /// here, so a typo is a usage error before any connection. Output defaults to text.
    pub fn new(target: Target, test: TestParams, affinity: Affinity) -> Result<ClientConfig> {
        let mut test = test;
        // --fq-rate 0 is no pacing, as iperf3's (and its wire's) 0; -i 0 (or past -t) is
        // sent as the interval it means, which every pinperf server takes.
        test.fq_rate_bps = test.fq_rate_bps.filter(|&r| r > 0);
        if test.interval.is_some() {
            test.interval = Some(test.interval());
        }
        use crate::choices::Peer;
        let limits = match target.peer {
            Peer::Iperf3 => crate::iperf3::limits(Limits::PROTOCOL),
            _ => Limits::PROTOCOL,
        };
        if let Err(why) = test.validate(&limits) {
            // What an iperf3 peer would take (a shorter block or datagram) names the flag.
            let iperf3 = target.peer == Peer::Auto
                && !target.loopback
                && test
                    .validate(&crate::iperf3::limits(Limits::PROTOCOL))
                    .is_ok();
            return Err(Error::Usage(match iperf3 {
                true => format!("{why} (an iperf3 peer takes it: --peer iperf3)"),
                false => why,
            }));
        }
        if let Some(name) = &test.transport.congestion {
            crate::os::net::check_congestion(name)?;
        }
        // Data connection k comes from --cport + k: the last must be a port.
        if let Some(port) = target.source.port {
            let last = usize::from(port) + test.threads() - 1;
            if last > usize::from(u16::MAX) {
                return Err(usage(format!(
                    "--cport {port}: {} data connections would take ports {port} to {last}; \
                     the highest --cport for them is {}",
                    test.threads(),
                    usize::from(u16::MAX) + 1 - test.threads()
                )));
            }
        }
        Ok(ClientConfig {
            same_process: target.loopback,
            peer: target.peer,
            target,
            test,
            affinity,
            format: Format::Text,
            cpu_intervals: false,
            engine: Engine::Threads,
            auth: None,
            iperf3_auth: None,
            sockets: Default::default(),
            quiet: false,
            placement_probe: true,
        })
    }
}

/// How the server listens and what it allows.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `--rcv-timeout`: every test's receivers here end it after this long with nothing read.
    pub rcv_timeout: Option<Duration>,
    pub bind: Option<IpAddr>,
    pub port: u16,
    pub family: Family,
    pub one_off: bool,
    pub limits: Limits,
    pub data_port: Option<u16>,
    pub affinity: Affinity,
    /// No log lines on stderr (the in-process `--loopback` server).
    pub quiet: bool,
    /// The process's stop signals (SIGINT, SIGTERM, SIGHUP) are this server's (`-s`): a
    /// running test is stopped and its client told why, the log says so, then the process
    /// ends by the signal. An in-process server (`--loopback`, `lab`) leaves them to its
    /// client.
    pub signals: bool,
    /// `--auth-keys`: clients must authenticate.
    pub auth: Option<crate::server::auth::Keys>,
    /// `--rsa-private-key-path` and `--authorized-users-path`: iperf3's clients must
    /// authenticate by its RSA scheme.
    pub iperf3_gate: Option<std::sync::Arc<crate::iperf3::auth::Gate>>,
    /// `--allow`: the networks served (empty: all).
    pub allow: Vec<crate::server::allow::Cidr>,
    /// `--max-tests-per-minute` per source.
    pub max_tests_per_minute: Option<u32>,
    /// `--idle-timeout` (with `-1`): how long the server waits for a test.
    pub idle_timeout: Option<Duration>,
    /// Where and how the log is written: `--log-format`, `--logfile`, `--timestamps`, `-T`.
    pub log: LogOutput,
    /// `--format iperf3-json`: each iperf3 client's test as `iperf3 -s -J` writes it, on
    /// stdout.
    pub iperf3_documents: bool,
    /// `-D`: run in the background once listening.
    pub daemon: bool,
    /// `-I`: the file the server's process ID is written to, removed when it exits.
    pub pidfile: Option<std::path::PathBuf>,
    /// `--snd-timeout` and `--cntl-ka`: set on the listeners, so every connection has them.
    pub sockets: crate::os::net::HostSockets,
}

impl ServerConfig {
    /// A `-s` server, which others reach: it bounds what a test does and counts failures
    /// per source. An in-process one (`--loopback`, `compare`, the lab) serves its own
    /// client only.
    pub fn public(&self) -> bool {
        self.signals
    }
}

/// The server's log (`serverlog`): JSON lines or text, on stderr or appended to
/// `--logfile`'s file; text lines start with `--timestamps`'s time and `-T`'s title, as
/// iperf3 -s's do (JSON lines carry `time` already).
#[derive(Debug, Clone, Default)]
pub struct LogOutput {
    pub json: bool,
    pub file: Option<std::path::PathBuf>,
    pub timestamps: Option<String>,
    pub title: Option<String>,
    /// iperf3 -s's report flags given here, said once in the log as ignored.
    pub ignored: Vec<&'static str>,
}

impl ServerConfig {
    /// A quiet server inside this process (`--loopback`, `compare --loopback`, the lab) on
    /// `bind` and an ephemeral port, with the protocol's limits.
    pub fn in_process(bind: IpAddr, one_off: bool, affinity: Affinity) -> ServerConfig {
        ServerConfig {
            rcv_timeout: None,
            bind: Some(bind),
            port: 0,
            family: if bind.is_ipv6() {
                Family::V6
            } else {
                Family::V4
            },
            one_off,
            limits: Limits::PROTOCOL,
            data_port: None,
            affinity,
            quiet: true,
            signals: false,
            auth: None,
            iperf3_gate: None,
            allow: Vec::new(),
            max_tests_per_minute: None,
            idle_timeout: None,
            log: LogOutput::default(),
            iperf3_documents: false,
            daemon: false,
            pidfile: None,
            sockets: Default::default(),
        }
    }
}

fn family(a: &TargetArgs) -> Family {
    match (a.ipv4, a.ipv6) {
        (true, _) => Family::V4,
        (_, true) => Family::V6,
        _ => Family::Any,
    }
}

/// Validates the arguments and decides the mode.
pub fn from_args(args: &Args) -> Result<Mode> {
    let t = &args.target;
    let modes = [args.server, t.client.is_some(), t.loopback];
    match modes.iter().filter(|m| **m).count() {
        0 => {
            return Err(usage(
                "choose a mode: -s (server), -c HOST (client) or --loopback",
            ));
        }
        1 => {}
        _ => {
            return Err(usage(
                "-s, -c and --loopback exclude each other: choose one",
            ));
        }
    }
    let (local_plan, remote_plan) = crate::data::pin::parse_plan(&args.affinity).map_err(usage)?;
    if args.server {
        if args.auth.is_some() {
            return Err(usage(
                "--auth is a client option; a server requires authentication with --auth-keys FILE",
            ));
        }
        if remote_plan.is_some() {
            return Err(usage("-A: a server takes one CPU list, not LOCAL/REMOTE"));
        }
        return Ok(Mode::Server(Box::new(server_config(args, local_plan)?)));
    }
    let target = Target::from_args(t)?;
    // `-A none` means both ends, as `auto` does (a remote plan is named after a `/`).
    let remote_plan = match (&local_plan, remote_plan) {
        (Affinity::None, None) => Some(Affinity::None),
        (_, remote) => remote,
    };
    let mut test = args.test.to_params(remote_plan);
    with_file(&mut test)?;
    if test.rcv_timeout.is_some() && test.direction() == crate::wire::params::Direction::Forward {
        return Err(usage(
            "--rcv-timeout: client receive timeout is valid only in receiving mode (-R or \
             --bidir), as iperf3's",
        ));
    }
    let mut cfg = ClientConfig::new(target, test, local_plan)?;
    cfg.format = output_format(args);
    cfg.cpu_intervals = args.cpu;
    cfg.engine = args.engine;
    cfg.auth = client_auth(args)?;
    cfg.iperf3_auth = crate::iperf3::auth::credentials(args).map_err(usage)?;
    cfg.sockets = host_sockets(args);
    cfg.check_engine()?;
    Ok(Mode::Client(Box::new(cfg)))
}

impl ClientConfig {
    /// What `--engine single` cannot do, said before any connection: one rule for a
    /// single test and every row of `compare` (which sets the engine per row).
    pub(crate) fn check_engine(&self) -> Result<()> {
        if self.engine == Engine::Single && (self.test.udp || self.test.rate().is_some()) {
            return Err(Error::Usage(
                "--engine single: its one thread neither paces (-b) nor sends UDP (-u); use the \
                 default --engine threads"
                    .into(),
            ));
        }
        if self.engine == Engine::Single && self.test.zerocopy.is_some() {
            // Said before any connection (it was found by the sender, after the handshake).
            return Err(Error::Usage(
                "-Z: the single engine sends with copies; use the default --engine threads".into(),
            ));
        }
        if self.engine == Engine::Single
            && self.test.direction() != crate::wire::params::Direction::Forward
        {
            return Err(Error::Usage(
                "--engine single drives the client's senders; with -R or --bidir the server sends \
                 on its own threads: use the default --engine threads"
                    .into(),
            ));
        }
        Ok(())
    }
}

fn server_config(args: &Args, affinity: Affinity) -> Result<ServerConfig> {
    let limits = server_limits(args)?;
    if args.allow_realtime {
        crate::data::stream::check_realtime("--allow-realtime")?;
    }
    let (port, family) = server_address(args)?;
    // Checked now, not at each test: a CPU this host lacks would refuse every client.
    let allowed = crate::data::pin::allowed_cpus();
    if let Affinity::List(list) = &affinity {
        crate::data::pin::plan(&affinity, 1, &allowed).map_err(|why| {
            usage(format!(
                "-A {}: {why}",
                crate::data::pin::format_cpu_list(list)
            ))
        })?;
    }
    if args.idle_timeout.is_some_and(|t| t.is_zero()) {
        return Err(usage(
            "--idle-timeout 0: at least a second (leave it out to wait on)",
        ));
    }
    // -J on a server is iperf3's flag and said to be ignored (server_log); --format
    // iperf3-json is the one report a server writes.
    let format = args.format;
    if !matches!(format, Format::Text | Format::Iperf3Json) {
        let name = clap::ValueEnum::to_possible_value(&format)
            .map_or(String::new(), |v| v.get_name().to_string());
        return Err(usage(format!(
            "--format {name}: a client's report; a server writes iperf3's document of each \
             iperf3 client's test with --format iperf3-json, and logs every test to stderr"
        )));
    }
    if args.max_tests_per_minute == Some(0) {
        return Err(usage(
            "--max-tests-per-minute 0: must be at least 1 (leave it out for no limit)",
        ));
    }
    let t = &args.target;
    let client_only = [
        (args.test.file.is_some(), "-F FILE"),
        (
            t.bind_dev.is_some(),
            "--bind-dev DEV (a server listens on -B ADDR, the device's address)",
        ),
        (t.cport.is_some(), "--cport"),
        (t.mptcp, "--mptcp"),
        (t.flowlabel.is_some(), "--flowlabel"),
    ];
    if let Some((_, flag)) = client_only.iter().find(|(given, _)| *given) {
        return Err(usage(format!(
            "{flag}: a client's flag; a server does not take it"
        )));
    }
    Ok(ServerConfig {
        rcv_timeout: args.test.rcv_timeout.map(Duration::from_millis),
        bind: args.target.bind,
        port,
        family,
        one_off: args.one_off,
        limits,
        data_port: args.data_port,
        affinity,
        quiet: false,
        signals: true,
        auth: args
            .auth_keys
            .as_deref()
            .map(crate::server::auth::Keys::load)
            .transpose()?,
        allow: crate::server::allow::parse_list(&args.allow).map_err(usage)?,
        iperf3_gate: crate::iperf3::auth::gate(args).map_err(usage)?,
        max_tests_per_minute: args.max_tests_per_minute,
        idle_timeout: args.idle_timeout,
        log: server_log(args)?,
        iperf3_documents: format == Format::Iperf3Json,
        daemon: args.daemon,
        pidfile: args.pidfile.clone(),
        sockets: host_sockets(args),
    })
}

/// `--snd-timeout` (0: the system's) and `--cntl-ka`.
fn host_sockets(args: &Args) -> crate::os::net::HostSockets {
    crate::os::net::HostSockets {
        user_timeout: args
            .snd_timeout
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis),
        keepalive: args.cntl_ka,
    }
}

/// `--max-streams`, `--max-duration`, `--max-window`, `--max-rate` and `--no-udp`: the
/// bounds every test must keep, each within the protocol's.
fn server_limits(args: &Args) -> Result<Limits> {
    let max = Limits::PROTOCOL;
    if !(1..=max.max_streams).contains(&args.max_streams) {
        return Err(usage(format!(
            "--max-streams {}: must be 1 to {}",
            args.max_streams, max.max_streams
        )));
    }
    if args.max_duration < MIN_INTERVAL {
        return Err(usage("--max-duration: must be at least 0.1 seconds"));
    }
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&args.max_window) {
        return Err(usage(format!(
            "--max-window {}: must be {} to {} (the window a client may ask for with -w)",
            format_size(args.max_window),
            format_size(MIN_WINDOW),
            format_size(MAX_WINDOW)
        )));
    }
    Ok(Limits {
        max_streams: args.max_streams,
        max_window_bytes: args.max_window,
        max_duration: args.max_duration,
        max_rate_bps: args.max_rate,
        udp: !args.no_udp,
        realtime: args.allow_realtime,
        server: true,
        total_rate: args.server_bitrate_limit,
        ..Limits::PROTOCOL
    })
}

/// The control port and address family to listen on, `--data-port` apart from the one
/// and `-B` of the other.
fn server_address(args: &Args) -> Result<(u16, Family)> {
    let port = args.target.port();
    if args.data_port == Some(port) && port != 0 {
        return Err(usage(format!(
            "--data-port {port}: must differ from the control port (-p {port})"
        )));
    }
    let family = family(&args.target);
    match (family, args.target.bind) {
        (Family::V4, Some(ip @ IpAddr::V6(_))) => Err(usage(format!(
            "-B {ip}: not an IPv4 address, and -4 listens on IPv4 only"
        ))),
        (Family::V6, Some(ip @ IpAddr::V4(_))) => Err(usage(format!(
            "-B {ip}: not an IPv6 address, and -6 listens on IPv6 only"
        ))),
        _ => Ok((port, family)),
    }
}

/// `--log-format`, `--logfile`, `--timestamps` and `-T` for the server's log.
fn server_log(args: &Args) -> Result<LogOutput> {
    let json = args.log_format == "json";
    let text = &args.output.text;
    if json {
        let prefix = [
            (text.timestamps.is_some(), "--timestamps"),
            (text.title.is_some(), "-T/--title"),
        ];
        if let Some((_, flag)) = prefix.into_iter().find(|(set, _)| *set) {
            return Err(usage(format!(
                "{flag}: starts the server's text log lines; --log-format json lines carry \
                 \"time\" (and no prefix, so each line stays one JSON object)"
            )));
        }
    }
    let ignored = [
        (args.json, "-J"),
        (text.verbose, "-V"),
        (text.unit != crate::choices::RateUnit::default(), "-f"),
    ]
    .into_iter()
    .filter_map(|(set, flag)| set.then_some(flag))
    .collect();
    Ok(LogOutput {
        json,
        file: args.output.logfile.clone(),
        timestamps: text.timestamps.clone(),
        title: text.title.clone(),
        ignored,
    })
}

/// `--auth USER` with its secret; server-only authentication flags are refused here.
fn client_auth(args: &Args) -> Result<Option<crate::server::auth::ClientAuth>> {
    if let Some(path) = &args.auth_keys {
        return Err(usage(format!(
            "--auth-keys {}: a server option (-s); a client authenticates with --auth USER",
            path.display()
        )));
    }
    args.auth
        .as_deref()
        .map(|user| {
            crate::server::auth::ClientAuth::new(
                user,
                args.auth_secret_file.as_deref(),
                std::env::var(crate::server::auth::SECRET_ENV).ok(),
            )
        })
        .transpose()
}

/// `--format`, or the shortcut flags (clap rejects more than one).
fn output_format(args: &Args) -> Format {
    match (args.json, args.json_lines, args.csv) {
        (true, _, _) => Format::Json,
        (_, true, _) => Format::JsonLines,
        (_, _, true) => Format::Csv,
        _ => args.format,
    }
}

fn usage(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(argv: &[&str]) -> Result<Mode> {
        let mut full = vec!["pinperf"];
        full.extend_from_slice(argv);
        from_args(&Args::try_parse_from(full).expect("syntax ok"))
    }

    fn usage_text(argv: &[&str]) -> String {
        match parse(argv) {
            Err(Error::Usage(msg)) => msg,
            other => panic!("expected a usage error for {argv:?}, got {other:?}"),
        }
    }

    #[test]
    fn cport_takes_the_last_ports_its_data_connections_fit() {
        assert!(parse(&["-c", "h", "--cport", "65534", "-P", "2"]).is_ok());
        assert!(parse(&["-c", "h", "--cport", "65535"]).is_ok());
        assert!(usage_text(&["-c", "h", "--cport", "65535", "-P", "2"]).contains("65534"));
    }

    #[test]
    fn rejects_bad_combinations_with_the_flag_named() {
        let table: &[(&[&str], &str)] = &[
            (
                &[],
                "choose a mode: -s (server), -c HOST (client) or --loopback",
            ),
            (
                &["-s", "--loopback"],
                "-s, -c and --loopback exclude each other: choose one",
            ),
            (&["--loopback", "-P", "0"], "-P 0: streams must be 1 to 256"),
            (
                &["-c", "h", "--cport", "65535", "-P", "2", "--bidir"],
                "--cport 65535: 4 data connections would take ports 65535 to 65538; the highest --cport for them is 65532",
            ),
            (
                &["--loopback", "-P", "257"],
                "-P 257: streams must be 1 to 256",
            ),
            (
                &["--loopback", "-l", "8"],
                "-l 8: block size must be 64 to 67108864 bytes (64 to 64M)",
            ),
            // A client of a server not known yet: what an iperf3 peer would take.
            (
                &["-c", "h", "-l", "8"],
                "-l 8: block size must be 64 to 67108864 bytes (64 to 64M) (an iperf3 peer takes it: --peer iperf3)",
            ),
            (
                &["-c", "h", "--peer", "pinperf", "-u", "-l", "20"],
                "-l 20: a UDP datagram must be 32 to 65507 bytes",
            ),
            (
                &["--loopback", "-l", "128M"],
                "-l 128M: block size must be 64 to 67108864 bytes (64 to 64M)",
            ),
            (
                &["--loopback", "-w", "2G"],
                "-w 2G: window must be 1k to 1G (the kernel stores twice the request in an int)",
            ),
            (
                &["--loopback", "-p", "6150"],
                "-p 6150: --loopback's in-process server listens on an ephemeral port; drop -p \
                 (or run pinperf -s -p 6150 and pinperf -c 127.0.0.1 -p 6150)",
            ),
            (
                &["--loopback", "-p", "5301"],
                "-p 5301: --loopback's in-process server listens on an ephemeral port; drop -p \
                 (or run pinperf -s -p 5301 and pinperf -c 127.0.0.1 -p 5301)",
            ),
            (
                &["-c", "127.0.0.1", "-p", "0"],
                "-p 0: a client connects to the server's port (1-65535; without -p, 5301)",
            ),
            (
                &["-c", "::1", "-B", "127.0.0.1"],
                "-B 127.0.0.1: an IPv4 address, but -c ::1 is IPv6: bind an address of the \
                 server's family",
            ),
            (
                &["-c", "localhost", "-4", "-B", "::1"],
                "-B ::1: -4 asks for IPv4, this address is not: drop one of them",
            ),
            (
                &["--loopback", "-i", "0.01"],
                "-i 0.01: interval must be at least 0.1 seconds",
            ),
            (
                &["--loopback", "-t", "0"],
                "-t 0: duration must be 0.1 to 86400 seconds",
            ),
            (
                &["-s", "-A", "0/1"],
                "-A: a server takes one CPU list, not LOCAL/REMOTE",
            ),
            (
                &["-s", "--max-streams", "0"],
                "--max-streams 0: must be 1 to 256",
            ),
            (
                &["-s", "--max-window", "0"],
                "--max-window 0: must be 1k to 1G (the window a client may ask for with -w)",
            ),
            (
                &["-s", "--max-window", "1023"],
                "--max-window 1023: must be 1k to 1G (the window a client may ask for with -w)",
            ),
            (
                &["-s", "--max-window", "2G"],
                "--max-window 2G: must be 1k to 1G (the window a client may ask for with -w)",
            ),
            (
                &["-s", "--data-port", "5301"],
                "--data-port 5301: must differ from the control port (-p 5301)",
            ),
            (
                &["-s", "-p", "7000", "--data-port", "7000"],
                "--data-port 7000: must differ from the control port (-p 7000)",
            ),
            (
                &["-s", "-4", "-B", "::1"],
                "-B ::1: not an IPv4 address, and -4 listens on IPv4 only",
            ),
            (
                &["-s", "-6", "-B", "127.0.0.1"],
                "-B 127.0.0.1: not an IPv6 address, and -6 listens on IPv6 only",
            ),
            (
                &["--loopback", "-A", "fast"],
                "-A fast: expected auto, none, or a CPU list like 0,2-3 (optionally LOCAL/REMOTE)",
            ),
        ];
        for (argv, expected) in table {
            assert_eq!(usage_text(argv), *expected, "argv {argv:?}");
        }
    }

    /// iperf3's habits that mean something: `--fq-rate 0` is no pacing, `-i 0` one row
    /// over the whole test (both were refused).
    #[test]
    fn iperf3s_zeroes_mean_what_they_mean_there() {
        let Ok(Mode::Client(cfg)) = parse(&["--loopback", "--fq-rate", "0", "-t", "2", "-i", "0"])
        else {
            panic!("--fq-rate 0 -i 0 refused");
        };
        assert_eq!(cfg.test.fq_rate_bps, None);
        assert_eq!(cfg.test.interval, Some(Duration::from_secs(2)), "as sent");
    }

    #[test]
    fn accepts_a_typical_client() {
        let Mode::Client(c) =
            parse(&["-c", "h", "-P", "4", "-l", "64k", "-w", "4M", "-t", "3"]).unwrap()
        else {
            panic!("client expected");
        };
        assert_eq!(
            (c.test.streams, c.test.block_bytes(), c.test.window_bytes),
            (4, 65536, Some(4 << 20))
        );
        assert_eq!(c.test.duration(), Duration::from_secs(3));
        assert_eq!(c.test.interval(), Duration::from_secs(1));
        assert_eq!(c.test.pin, None, "auto: the server's own plan");
        let Mode::Client(c) = parse(&["-c", "h", "-A", "none"]).unwrap() else {
            panic!("client expected");
        };
        assert_eq!(
            (c.affinity, c.test.pin),
            (Affinity::None, Some(Affinity::None))
        );
        let Mode::Client(c) = parse(&["--loopback", "-t", "0.5"]).unwrap() else {
            panic!("client expected");
        };
        assert_eq!(
            c.test.interval(),
            Duration::from_millis(500),
            "-i defaults to min(1 s, -t)"
        );
        assert_eq!(c.affinity, Affinity::Auto);
    }

    #[test]
    fn a_server_cpu_list_is_checked_against_the_allowed_cpus_at_startup() {
        let allowed = crate::data::pin::format_cpu_list(&crate::data::pin::allowed_cpus());
        assert_eq!(
            usage_text(&["-s", "-A", "0,4095"]),
            format!("-A 0,4095: CPU 4095 is not available to this process (allowed: {allowed})")
        );
        let first = crate::data::pin::allowed_cpus()[0].to_string();
        let Mode::Server(s) = parse(&["-s", "-A", &first]).unwrap() else {
            panic!("server expected")
        };
        assert_eq!(s.affinity, Affinity::List(vec![first.parse().unwrap()]));
    }

    #[test]
    fn server_ports_and_families() {
        let Mode::Server(s) = parse(&["-s", "-p", "0", "--data-port", "0"]).unwrap() else {
            panic!("server expected")
        };
        assert_eq!((s.port, s.data_port), (0, Some(0)), "both ephemeral");
        let family = |argv: &[&str]| match parse(argv).unwrap() {
            Mode::Server(s) => s.family,
            other => panic!("server expected, got {other:?}"),
        };
        assert_eq!(family(&["-s"]), Family::Any, "dual-stack by default");
        assert_eq!(family(&["-s", "-4"]), Family::V4);
        assert_eq!(family(&["-s", "-6", "-B", "::1"]), Family::V6);
    }

    #[test]
    fn an_option_given_twice_takes_its_last_value_and_lists_add_up() {
        let Mode::Client(c) = parse(&["-c", "h", "-t", "1", "-P", "2", "-t", "5"]).unwrap() else {
            panic!("client expected");
        };
        assert_eq!(
            (c.test.duration(), c.test.streams),
            (Duration::from_secs(5), 2)
        );
        let Mode::Server(s) =
            parse(&["-s", "--allow", "127.0.0.1/32", "--allow", "10.0.0.0/8"]).unwrap()
        else {
            panic!("server expected");
        };
        assert_eq!(s.allow.len(), 2, "{:?}", s.allow);
    }

    #[test]
    fn a_clients_source_address_picks_the_family_of_the_servers_addresses() {
        let family = |argv: &[&str]| match parse(argv).unwrap() {
            Mode::Client(c) => c.target.family,
            other => panic!("client expected, got {other:?}"),
        };
        assert_eq!(family(&["-c", "localhost"]), Family::Any);
        assert_eq!(family(&["-c", "localhost", "-B", "::1"]), Family::V6);
        assert_eq!(family(&["-c", "localhost", "-B", "127.0.0.1"]), Family::V4);
        assert_eq!(family(&["-c", "localhost", "-6", "-B", "::1"]), Family::V6);
    }

    #[test]
    fn server_defaults_match_the_documented_limits() {
        let Mode::Server(s) = parse(&["-s"]).unwrap() else {
            panic!("server expected")
        };
        assert_eq!(s.port, 5301);
        assert_eq!(s.limits.max_streams, 128);
        assert_eq!(s.limits.max_window_bytes, 1 << 30);
        assert_eq!(s.limits.max_duration, Duration::from_secs(3600));
    }
}
