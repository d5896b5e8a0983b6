//! iperf3's command line (`pinperf iperf3 ARGS`, or the binary run under the name `iperf3`):
//! iperf3 3.21's flags with iperf3's meanings and defaults, turned into the same test in
//! pinperf's own flags, so the test runs on pinperf's pinned threads and is checked by the
//! same rules. A flag of iperf3's that this cannot honour yet is refused by name. A client
//! reports as iperf3 does: its text (`--format iperf3-text`, in iperf3's adaptive units
//! unless `-f` chose one), or with `-J` its JSON. A server keeps pinperf's log on stderr;
//! its `-J` writes iperf3's document of each test on stdout (`--format iperf3-json`, see
//! [`super::server_doc`]) and makes the log JSON lines, and its report flags (`-i`, `-f`,
//! `-V`) are said in the log to be ignored.

use std::ffi::OsString;

use clap::Parser;

use crate::wire::params::Limits;

/// iperf3's default control port.
pub const PORT: u16 = 5201;

/// iperf3 3.21's flags that the personality honours, under iperf3's names; a long flag
/// may be shortened while it stays unambiguous, as getopt_long takes it
/// (`--authorized-user` in iperf3's own auth_test.sh).
#[derive(Debug, Parser)]
#[command(
    name = "iperf3",
    disable_version_flag = true,
    infer_long_args = true,
    about = "iperf3's command line, run on pinperf's pinned threads"
)]
pub struct Iperf3Args {
    /// Run in server mode.
    #[arg(short = 's', long)]
    pub server: bool,
    /// Run in client mode, connecting to HOST.
    #[arg(short = 'c', long, value_name = "HOST")]
    pub client: Option<String>,
    /// Server port to listen on / connect to.
    #[arg(short = 'p', long, default_value_t = PORT)]
    pub port: u16,
    /// Bind to the interface associated with the address.
    #[arg(short = 'B', long, value_name = "HOST")]
    pub bind: Option<String>,
    /// Only use IPv4.
    #[arg(short = '4', long = "version4")]
    pub version4: bool,
    /// Only use IPv6.
    #[arg(short = '6', long = "version6", conflicts_with = "version4")]
    pub version6: bool,
    /// Seconds between periodic reports (0 disables them).
    #[arg(short = 'i', long, value_name = "SECS")]
    pub interval: Option<String>,
    /// Format to report: Kbits, Mbits, Gbits, Tbits (k, m, g, t; upper case for bytes).
    #[arg(short = 'f', long, value_name = "UNIT")]
    pub format: Option<String>,
    /// Output in JSON format.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Output in line-delimited JSON format, an event a line as the test runs.
    #[arg(long)]
    pub json_stream: bool,
    /// Send output to a log file.
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<String>,
    /// Force flushing output at every interval.
    #[arg(long)]
    pub forceflush: bool,
    /// Emit a timestamp at the start of each output line.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true)]
    pub timestamps: Option<Option<String>>,
    /// More detailed output.
    #[arg(short = 'V', long)]
    pub verbose: bool,
    /// CPU affinity: n for this end, n,m for this end and the server.
    #[arg(short = 'A', long, value_name = "n[,m]")]
    pub affinity: Option<String>,
    /// Server: handle one client connection, then exit.
    #[arg(short = '1', long = "one-off")]
    pub one_off: bool,
    /// Use UDP rather than TCP.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// Timeout for the control connection setup, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub connect_timeout: Option<u64>,
    /// Target bitrate in bits/s (0 for unlimited); the default 1 Mbit/s for UDP; a slash
    /// and a count of blocks for bursts.
    #[arg(
        short = 'b',
        long,
        visible_alias = "bandwidth",
        value_name = "RATE[/BURST]"
    )]
    pub bitrate: Option<String>,
    /// Number of bytes to transmit (instead of -t).
    #[arg(short = 'n', long, value_name = "SIZE")]
    pub bytes: Option<String>,
    /// Number of blocks (packets) to transmit (instead of -t or -n).
    #[arg(short = 'k', long, value_name = "COUNT")]
    pub blockcount: Option<String>,
    /// Socket pacing rate in bits/s (fair queueing).
    #[arg(long, value_name = "RATE")]
    pub fq_rate: Option<String>,
    /// Time in seconds to transmit for.
    #[arg(short = 't', long, value_name = "SECS")]
    pub time: Option<String>,
    /// Length of the buffer to read or write.
    #[arg(short = 'l', long, visible_alias = "length", value_name = "SIZE")]
    pub len: Option<String>,
    /// Number of parallel client streams to run.
    #[arg(short = 'P', long, value_name = "N")]
    pub parallel: Option<String>,
    /// Run in reverse mode (the server sends, the client receives).
    #[arg(short = 'R', long)]
    pub reverse: bool,
    /// Run in bidirectional mode.
    #[arg(long, conflicts_with = "reverse")]
    pub bidir: bool,
    /// Set the window size (socket buffer size).
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    /// Set the TCP congestion control algorithm.
    #[arg(
        short = 'C',
        long,
        visible_alias = "linux-congestion",
        value_name = "ALGO"
    )]
    pub congestion: Option<String>,
    /// Set the TCP maximum segment size.
    #[arg(short = 'M', long, value_name = "BYTES")]
    pub set_mss: Option<String>,
    /// Set TCP no delay, disabling Nagle's algorithm.
    #[arg(short = 'N', long)]
    pub no_delay: bool,
    /// Set the IP type of service byte.
    #[arg(short = 'S', long, value_name = "TOS")]
    pub tos: Option<String>,
    /// Use a zero-copy method of sending data.
    #[arg(short = 'Z', long)]
    pub zerocopy: bool,
    /// Ignore the received payload (MSG_TRUNC).
    #[arg(long)]
    pub skip_rx_copy: bool,
    /// Set the IPv6 flow label of the data connections.
    #[arg(short = 'L', long, value_name = "N")]
    pub flowlabel: Option<String>,
    /// Use MPTCP rather than plain TCP.
    #[arg(short = 'm', long)]
    pub mptcp: bool,
    /// Bind the data streams to this client port (stream k to PORT+k).
    #[arg(long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Bind to the network interface with SO_BINDTODEVICE.
    #[arg(long, value_name = "DEV")]
    pub bind_dev: Option<String>,
    /// UDP GSO/GRO (pinperf's UDP uses them unless its --no-gsro).
    #[arg(long)]
    pub gsro: bool,
    /// 64-bit UDP counters (pinperf's datagrams always carry them).
    #[arg(long)]
    pub udp_counters_64bit: bool,
    /// A repeating payload (pinperf's blocks are always a repeated byte).
    #[arg(long)]
    pub repeating_payload: bool,
    /// Set IPv4 Don't Fragment on UDP datagrams.
    #[arg(long)]
    pub dont_fragment: bool,
    /// Data string to include in the JSON output.
    #[arg(long, value_name = "STR", allow_hyphen_values = true)]
    pub extra_data: Option<String>,
    /// Pacing timer interval in microseconds (pinperf's pacer keeps its own).
    #[arg(long, value_name = "USEC")]
    pub pacing_timer: Option<String>,
    /// Disable fair-queuing based socket pacing (deprecated in iperf3: --fq-rate 0).
    #[arg(long)]
    pub no_fq_socket_pacing: bool,
    /// With --json-stream: the whole JSON document at the end too (alone: nothing).
    #[arg(long)]
    pub json_stream_full_output: bool,
    /// Client: send this file (ending at its end without -t), or receive (-R) into it.
    #[arg(short = 'F', long, value_name = "FILE")]
    pub file: Option<String>,
    /// Perform pre-test for N seconds and omit the pre-test statistics.
    #[arg(short = 'O', long, value_name = "SECS")]
    pub omit: Option<String>,
    /// Prefix every output line with this string.
    #[arg(short = 'T', long, value_name = "STR")]
    pub title: Option<String>,
    /// Get results from the server.
    #[arg(long)]
    pub get_server_output: bool,
    /// Server: with -1, exit when no client has come for this many seconds.
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<String>,
    /// Client: the username for iperf3's RSA authentication (password: $IPERF3_PASSWORD).
    #[arg(long, value_name = "USER")]
    pub username: Option<String>,
    /// Client: the server's RSA public key (PEM).
    #[arg(long, value_name = "FILE")]
    pub rsa_public_key_path: Option<String>,
    /// Server: the RSA private key that opens the clients' credentials (PEM).
    #[arg(long, value_name = "FILE")]
    pub rsa_private_key_path: Option<String>,
    /// Server: the authorized users file (`user,sha256` lines).
    #[arg(long, value_name = "FILE")]
    pub authorized_users_path: Option<String>,
    /// Server: the largest difference between the client's clock and this one, seconds.
    #[arg(long, value_name = "SECS")]
    pub time_skew_threshold: Option<String>,
    /// The DSCP (0-63, or a name: af11, cs1, ef, va, ...), as the TOS byte's upper six bits.
    #[arg(long, value_name = "DSCP")]
    pub dscp: Option<String>,
    /// PKCS#1 v1.5 padding for the credentials, for peers before iperf3 3.17.
    #[arg(long)]
    pub use_pkcs1_padding: bool,
    /// Server: run as a daemon.
    #[arg(short = 'D', long)]
    pub daemon: bool,
    /// Write the server's PID to FILE (removed at exit).
    #[arg(short = 'I', long, value_name = "FILE")]
    pub pidfile: Option<String>,
    /// Debugging output (here: -V's detail in text; documents are unchanged).
    #[arg(short = 'd', long, value_name = "LEVEL", num_args = 0..=1, require_equals = true)]
    pub debug: Option<Option<String>>,
    /// Server: the longest test (-t plus -O) a client may ask for, seconds (0: no limit).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub server_max_duration: Option<String>,
    /// Server: the highest total rate of a test, averaged over SECS (default 5).
    #[arg(long, value_name = "RATE[/SECS]")]
    pub server_bitrate_limit: Option<String>,
    /// TCP_USER_TIMEOUT on this end's connections, in milliseconds.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub snd_timeout: Option<String>,
    /// TCP keepalive on the control connection: IDLE/INTV/CNT seconds, each optional.
    #[arg(long, value_name = "IDLE/INTV/CNT", num_args = 0..=1, require_equals = true)]
    pub cntl_ka: Option<Option<String>>,
    /// Idle timeout for receiving data, in milliseconds.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub rcv_timeout: Option<String>,
}

/// iperf3's SCTP flags: refused in the words of an iperf3 built without SCTP.
const SCTP: &[&str] = &["--sctp", "-X", "--xbind", "--nstreams"];

/// `-v`/`--version`: the iperf3 version whose command line this takes first (readers such
/// as pScheduler take the second word for the version), then pinperf's.
pub fn version(args: &[String]) -> Option<String> {
    matches!(args, [a] if a == "-v" || a == "--version").then(|| {
        format!(
            "iperf 3.21 (pinperf {}: iperf3's command line on pinperf's pinned threads)\n",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// Whether `argv0` (the program's name as run) asks for iperf3's command line.
pub fn is_iperf3_name(argv0: &str) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "iperf3")
}

/// iperf3's arguments (without the program name) as pinperf's own, program name first;
/// an iperf3 flag that cannot be honoured yet, or one whose value pinperf's flags cannot
/// say, is an error naming it.
pub fn native_argv(args: &[String]) -> Result<Vec<String>, String> {
    if let Some(flag) = args.iter().take_while(|a| *a != "--").find_map(|a| {
        let flag = a.split('=').next().unwrap_or(a);
        SCTP.contains(&flag).then_some(flag)
    }) {
        return Err(format!(
            "parameter error - {flag}: an option you are trying to set is not implemented yet \
             (pinperf runs TCP and UDP)"
        ));
    }
    let parsed = Iperf3Args::try_parse_from(
        std::iter::once(OsString::from("iperf3")).chain(args.iter().map(OsString::from)),
    )
    .unwrap_or_else(|e| e.exit());
    parsed.to_native()
}

impl Iperf3Args {
    /// The same test (or server) in pinperf's flags.
    fn to_native(&self) -> Result<Vec<String>, String> {
        let mut out: Vec<String> = vec!["pinperf".into()];
        match (self.server, &self.client) {
            (true, Some(_)) => return Err("-s and -c: choose one".into()),
            (false, None) => {
                return Err("parameter error - must either be a client (-c) or server (-s)".into());
            }
            (true, None) => out.push("-s".into()),
            (false, Some(host)) => out.extend(["-c".into(), host_dev(host).0.into()]),
        }
        out.extend(["-p".into(), self.port.to_string()]);
        self.same_meaning(&mut out);
        self.converted(&mut out)?;
        self.server_side(&mut out)?;
        self.socket_flags(&mut out);
        self.sockets(&mut out);
        self.quietly_ours(&mut out);
        Ok(out)
    }

    /// The flags that mean in pinperf what they mean in iperf3, passed on as they came.
    fn same_meaning(&self, out: &mut Vec<String>) {
        let plain = [
            (self.version4, "-4"),
            (self.version6, "-6"),
            (self.one_off, "-1"),
            (self.udp, "-u"),
            (self.reverse, "-R"),
            (self.bidir, "--bidir"),
            (self.no_delay, "-N"),
            (self.skip_rx_copy, "--skip-rx-copy"),
            (self.get_server_output, "--get-server-output"),
            (self.forceflush, "--forceflush"),
            (self.verbose, "-V"),
            // The credentials' padding; without credentials it pads nothing (pScheduler
            // adds it for old peers whether or not it authenticates).
            (
                self.use_pkcs1_padding
                    && (self.username.is_some() || self.rsa_private_key_path.is_some()),
                "--use-pkcs1-padding",
            ),
        ];
        out.extend(
            plain
                .into_iter()
                .filter(|&(given, _)| given)
                .map(|(_, f)| f.to_string()),
        );
        let valued = [
            ("-i", &self.interval),
            ("-f", &self.format),
            ("--logfile", &self.logfile),
            ("-b", &self.bitrate),
            ("--fq-rate", &self.fq_rate),
            ("-l", &self.len),
            ("-P", &self.parallel),
            ("-w", &self.window),
            ("-C", &self.congestion),
            ("-M", &self.set_mss),
            ("-S", &self.tos),
            ("-O", &self.omit),
            ("-T", &self.title),
            ("--idle-timeout", &self.idle_timeout),
            ("--username", &self.username),
            ("--rsa-public-key-path", &self.rsa_public_key_path),
            ("--rsa-private-key-path", &self.rsa_private_key_path),
            ("--authorized-users-path", &self.authorized_users_path),
            ("--time-skew-threshold", &self.time_skew_threshold),
        ];
        for (f, v) in valued {
            if let Some(v) = v {
                out.extend([f.to_string(), v.clone()]);
            }
        }
    }

    /// The flags whose iperf3 meaning takes another spelling in pinperf.
    fn converted(&self, out: &mut Vec<String>) -> Result<(), String> {
        match (&self.dscp, &self.tos) {
            (Some(_), Some(_)) => return Err("--dscp and -S: the same byte; give one".into()),
            (Some(d), None) => out.extend(["-S".into(), dscp_tos(d)?.to_string()]),
            _ => {}
        }
        self.end_condition(out)?;
        if let Some(ms) = self.connect_timeout {
            // iperf3 counts milliseconds; pinperf's flag takes seconds.
            out.extend([
                "--connect-timeout".into(),
                format!("{}", ms as f64 / 1000.0),
            ]);
        }
        if let Some(a) = &self.affinity {
            out.extend(["-A".into(), affinity(a, self.server)?]);
        }
        if self.zerocopy {
            out.push("-Z=sendfile".into());
        }
        match &self.timestamps {
            Some(Some(f)) => out.push(format!("--timestamps={f}")),
            Some(None) => out.push("--timestamps".into()),
            None => {}
        }
        if self.json_stream && !self.server {
            out.extend(["--format".into(), "iperf3-json-stream".into()]);
        } else if (self.json || self.json_stream) && self.server {
            // A server's -J: each test's document on stdout, the log as JSON lines.
            out.extend(["--format", "iperf3-json", "--log-format", "json"].map(String::from));
        } else if self.json {
            out.extend(["--format".into(), "iperf3-json".into()]);
        } else if !self.server {
            // iperf3's text, in its units: adaptive unless -f chose one. (A server's
            // report flags are its log's; it keeps pinperf's.)
            out.extend(["--format".into(), "iperf3-text".into()]);
            if self.format.is_none() {
                out.extend(["-f".into(), "a".into()]);
            }
        }
        if !self.server {
            // What iperf3 speaks: a pinperf server speaks it too, so there is nothing to
            // find out (and no wait for it).
            out.extend(["--peer".into(), "iperf3".into()]);
        }
        Ok(())
    }
}

impl Iperf3Args {
    /// Where connections come from and what they are: `-B` and `-c` with iperf3's
    /// `ADDR%DEV` (`--bind-dev`'s shorthand; `--bind-dev` itself wins), `--cport`, `-m`,
    /// `-L`; `--dont-fragment` (UDP's).
    fn sockets(&self, out: &mut Vec<String>) {
        let (bind, bind_dev) = match self.bind.as_deref().map(host_dev) {
            Some((b, dev)) => (Some(b), dev),
            None => (None, None),
        };
        let host_dev = self.client.as_deref().and_then(|c| host_dev(c).1);
        if let Some(b) = bind {
            out.extend(["-B".into(), b.into()]);
        }
        if let Some(dev) = self.bind_dev.as_deref().or(host_dev).or(bind_dev) {
            out.extend(["--bind-dev".into(), dev.into()]);
        }
        if let Some(port) = self.cport {
            out.extend(["--cport".into(), port.to_string()]);
        }
        if let Some(label) = &self.flowlabel {
            out.extend(["--flowlabel".into(), label.clone()]);
        }
        if self.mptcp {
            out.push("--mptcp".into());
        }
        if self.dont_fragment && self.udp {
            out.push("--dont-fragment".into());
        }
        if let Some(f) = &self.file {
            out.extend(["-F".into(), f.clone()]);
        }
    }

    /// Flags pinperf honours by what it always does, or by its own means: taken, and where
    /// that differs from iperf3's, said on stderr.
    fn quietly_ours(&self, out: &mut Vec<String>) {
        // --gsro, --udp-counters-64bit and --repeating-payload: pinperf's UDP always
        // batches with GSO/GRO and sends 64-bit sequences; its blocks are a repeated byte.
        if let Some(t) = &self.pacing_timer {
            eprintln!(
                "pinperf: warning: --pacing-timer {t}: pinperf paces -b with its own timer (500 us \
                 batches); ignored"
            );
        }
        if let Some(e) = &self.extra_data {
            out.extend(["--extra-data".into(), e.clone()]);
        }
        if self.no_fq_socket_pacing {
            // iperf3 3.21 takes it as --fq-rate 0: no socket pacing.
            if let Some(i) = out.iter().position(|a| a == "--fq-rate") {
                out.drain(i..(i + 2).min(out.len()));
            }
        }
        if self.json_stream_full_output
            && let Some(f) = out.iter_mut().find(|a| *a == "iperf3-json-stream")
        {
            *f = "iperf3-json-stream-full".into();
        }
    }
}

/// iperf3's `HOST%DEV`: the host, and the interface to bind to, unless it is an IPv6
/// link-local literal, whose `%` names its scope and stays.
fn host_dev(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('%') {
        Some((host, dev)) if !dev.is_empty() => {
            let link_local = host
                .parse::<std::net::Ipv6Addr>()
                .is_ok_and(|ip| ip.is_unicast_link_local());
            match link_local {
                true => (spec, None),
                false => (host, Some(dev)),
            }
        }
        _ => (spec, None),
    }
}

impl Iperf3Args {
    /// `-t`, `-n` or `-k`: one of them (iperf3 refuses two), and a count of 0 is none.
    fn end_condition(&self, out: &mut Vec<String>) -> Result<(), String> {
        let counted =
            |v: &Option<String>| v.clone().filter(|v| crate::units::parse_size(v) != Ok(0));
        let given = [
            ("-t", self.time.clone()),
            ("-n", counted(&self.bytes)),
            ("-k", counted(&self.blockcount)),
        ];
        let mut given = given.into_iter().filter_map(|(f, v)| v.map(|v| (f, v)));
        match (given.next(), given.next()) {
            (Some(_), Some(_)) => {
                Err("only one test end condition (-t, -n, -k) may be specified".into())
            }
            (Some(("-t", t)), None) => {
                out.extend(["-t".into(), time(&t)?]);
                Ok(())
            }
            (Some((flag, v)), None) => {
                out.extend([flag.into(), v]);
                Ok(())
            }
            (None, _) => Ok(()),
        }
    }
}

/// `--dscp`: iperf3's names (the TOS byte they stand for) or a number 0-63 in C's
/// notation, shifted into the TOS byte's upper six bits.
fn dscp_tos(d: &str) -> Result<u8, String> {
    const NAMES: &[(&str, u8)] = &[
        ("af11", 0x28),
        ("af12", 0x30),
        ("af13", 0x38),
        ("af21", 0x48),
        ("af22", 0x50),
        ("af23", 0x58),
        ("af31", 0x68),
        ("af32", 0x70),
        ("af33", 0x78),
        ("af41", 0x88),
        ("af42", 0x90),
        ("af43", 0x98),
        ("cs0", 0x00),
        ("cs1", 0x20),
        ("cs2", 0x40),
        ("cs3", 0x60),
        ("cs4", 0x80),
        ("cs5", 0xa0),
        ("cs6", 0xc0),
        ("cs7", 0xe0),
        ("ef", 0xb8),
        ("va", 0xb0),
        ("lowdelay", 0x10),
        ("throughput", 0x08),
        ("reliability", 0x04),
    ];
    if let Some((_, tos)) = NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(d.trim())) {
        return Ok(*tos);
    }
    crate::cli::c_number(d)
        .filter(|v| *v <= 63)
        .map(|v| (v as u8) << 2)
        .ok_or_else(|| format!("--dscp {d}: a DSCP 0 to 63, or a name such as af11, cs1, ef"))
}

/// `-t`: iperf3's seconds, where 0 is no time limit (the protocol's longest test).
fn time(t: &str) -> Result<String, String> {
    match t.trim().parse::<f64>() {
        Ok(0.0) => Ok(Limits::PROTOCOL.max_duration.as_secs().to_string()),
        Ok(s) if s > 0.0 => Ok(t.trim().into()),
        _ => Err(format!("-t {t}: a number of seconds (0: no limit)")),
    }
}

/// `-A n[,m]`: this end's core, and (client) the server's, as pinperf's `LOCAL/REMOTE`.
fn affinity(a: &str, server: bool) -> Result<String, String> {
    let cores: Vec<&str> = a.split(',').map(str::trim).collect();
    let core = |c: &str| {
        crate::cli::c_number(c)
            .map(|n| n.to_string())
            .ok_or_else(|| format!("-A {a}: a core number, or two as n,m"))
    };
    match cores.as_slice() {
        [n] => core(n),
        [n, m] if !server => Ok(format!("{}/{}", core(n)?, core(m)?)),
        [_, _] => Err(format!("-A {a}: a server takes one core (n)")),
        _ => Err(format!("-A {a}: a core number, or two as n,m")),
    }
}

impl Iperf3Args {
    /// `-D`, `-I`, `-d`, `--server-max-duration` and `--server-bitrate-limit`.
    fn server_side(&self, out: &mut Vec<String>) -> Result<(), String> {
        let server_only = [
            (self.daemon, "-D"),
            (self.server_max_duration.is_some(), "--server-max-duration"),
            (
                self.server_bitrate_limit.is_some(),
                "--server-bitrate-limit",
            ),
        ];
        if let Some((_, flag)) = server_only.iter().find(|(set, _)| *set && !self.server) {
            return Err(format!(
                "{flag}: a server option (-s); some option you are trying to set is server only"
            ));
        }
        if self.daemon {
            out.push("-D".into());
        }
        match &self.pidfile {
            Some(f) if self.server => out.extend(["-I".into(), f.clone()]),
            Some(f) => {
                return Err(format!(
                    "-I {f}: pinperf writes a pidfile for a server (-s) only"
                ));
            }
            None => {}
        }
        // iperf3's debug lines go to stdout among its text; here -V's detail does, and a
        // document (-J, --json-stream) stays one document.
        if self.debug.is_some() && !self.verbose {
            out.push("-V".into());
        }
        if let Some(secs) = &self.server_max_duration {
            out.extend(["--max-duration".into(), max_duration(secs)?]);
        }
        if let Some(limit) = &self.server_bitrate_limit {
            out.extend(["--server-bitrate-limit".into(), limit.clone()]);
        }
        Ok(())
    }
}

impl Iperf3Args {
    /// `--snd-timeout` and `--cntl-ka`: pinperf's flags of the same names and meaning.
    fn socket_flags(&self, out: &mut Vec<String>) {
        if let Some(ms) = &self.snd_timeout {
            out.extend(["--snd-timeout".into(), ms.clone()]);
        }
        if let Some(ms) = &self.rcv_timeout {
            out.extend(["--rcv-timeout".into(), ms.clone()]);
        }
        match &self.cntl_ka {
            Some(Some(ka)) => out.push(format!("--cntl-ka={ka}")),
            Some(None) => out.push("--cntl-ka".into()),
            None => {}
        }
    }
}

/// `--server-max-duration`: iperf3's whole seconds, 0 (its default) for no limit.
fn max_duration(secs: &str) -> Result<String, String> {
    let longest = Limits::PROTOCOL.max_duration.as_secs();
    match secs.trim().parse::<u64>() {
        Ok(0) => Ok(longest.to_string()),
        Ok(s) if s <= longest => Ok(s.to_string()),
        _ => Err(format!(
            "--server-max-duration {secs}: whole seconds, 0 to {longest} (0: no limit)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(args: &[&str]) -> Result<Vec<String>, String> {
        native_argv(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn iperf3s_defaults_and_units_become_pinperfs() {
        let argv = native(&[
            "-c",
            "h",
            "--connect-timeout",
            "3000",
            "-A",
            "0,1",
            "-t",
            "0",
        ])
        .unwrap();
        let line = argv.join(" ");
        assert!(line.starts_with("pinperf -c h -p 5201"), "{line}");
        assert!(line.contains("--connect-timeout 3 "), "{line}");
        assert!(line.contains("-A 0/1"), "{line}");
        assert!(line.contains("-t 86400"), "{line}");
        assert!(line.contains("--format iperf3-text -f a"), "{line}");
        let unit = native(&["-c", "h", "-f", "M"]).unwrap().join(" ");
        assert!(unit.contains("-f M") && !unit.contains("-f a"), "{unit}");
        let json = native(&["-c", "h", "-J"]).unwrap().join(" ");
        assert!(json.contains("--format iperf3-json") && !json.contains("iperf3-text"));
        let server = native(&["-s", "-1", "-J", "-p", "5301"]).unwrap().join(" ");
        assert_eq!(
            server,
            "pinperf -s -p 5301 -1 --format iperf3-json --log-format json"
        );
    }

    #[test]
    fn a_long_flag_may_be_shortened_while_it_is_unambiguous() {
        let line = native(&["-s", "--authorized-user=u.csv", "--rsa-private-key-path=k"])
            .unwrap()
            .join(" ");
        assert!(line.contains("--authorized-users-path u.csv"), "{line}");
    }

    #[test]
    fn a_dscp_becomes_its_tos_byte() {
        for (dscp, tos) in [
            ("10", 40),
            ("AF11", 40),
            ("ef", 184),
            ("0x2e", 184),
            ("0", 0),
        ] {
            assert_eq!(dscp_tos(dscp), Ok(tos), "{dscp}");
        }
        assert!(dscp_tos("64").is_err() && dscp_tos("af99").is_err());
        let line = native(&["-c", "h", "--dscp", "ef"]).unwrap().join(" ");
        assert!(line.contains("-S 184"), "{line}");
        assert!(native(&["-c", "h", "--dscp", "ef", "-S", "4"]).is_err());
    }

    /// `-v` says the iperf3 version first, as its readers expect (`iperf 3.21 ...`).
    #[test]
    fn the_version_reads_as_iperf3s() {
        let v = version(&["-v".to_string()]).unwrap();
        assert_eq!(v.split_whitespace().nth(1), Some("3.21"), "{v}");
        assert!(v.contains("pinperf"), "{v}");
        assert_eq!(version(&["-v".to_string(), "-c".to_string()]), None);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        for flag in ["--sctp", "-X", "--nstreams"] {
            let e = native(&["-c", "h", flag, "1"]).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "parameter error - {flag}: an option you are trying to set is not \
                     implemented yet (pinperf runs TCP and UDP)"
                )
            );
        }
        assert!(
            native(&["-s", "-A", "0,1"])
                .unwrap_err()
                .contains("one core")
        );
        assert!(
            native(&["-p", "1"])
                .unwrap_err()
                .contains("client (-c) or server (-s)")
        );
        assert!(is_iperf3_name("/usr/lib/pinperf/iperf3") && !is_iperf3_name("pinperf"));
    }

    /// `-n`, `-k` and bursts pass on; two end conditions are refused in iperf3's words,
    /// and a count of 0 is none (iperf3's default).
    #[test]
    fn byte_and_block_counts_and_bursts_pass_on() {
        let line = |a: &[&str]| native(a).map(|v| v.join(" "));
        assert!(line(&["-c", "h", "-n", "5M"]).unwrap().contains(" -n 5M"));
        assert!(
            line(&["-c", "h", "--blockcount", "10K"])
                .unwrap()
                .contains(" -k 10K")
        );
        assert!(
            line(&["-c", "h", "-u", "-b", "10M/100"])
                .unwrap()
                .contains(" -b 10M/100")
        );
        let zero = line(&["-c", "h", "-n", "0"]).unwrap();
        assert!(!zero.contains("-n"), "{zero}");
        for two in [&["-t", "3", "-n", "1M"][..], &["-n", "1M", "-k", "9"]] {
            let argv: Vec<&str> = ["-c", "h"].iter().chain(two).copied().collect();
            assert_eq!(
                native(&argv),
                Err("only one test end condition (-t, -n, -k) may be specified".into())
            );
        }
    }

    /// The server's iperf3 flags in pinperf's: `-D`, `-I`, `-d` (as `-V`), iperf3's
    /// seconds for `--server-max-duration` (0: no limit) and `--server-bitrate-limit`.
    #[test]
    fn server_flags_become_pinperfs() {
        let longest = Limits::PROTOCOL.max_duration.as_secs().to_string();
        for (args, want) in [
            (&["-s", "-D", "-I", "/run/p.pid"][..], "-D -I /run/p.pid"),
            (&["-s", "--daemon", "--pidfile=p"], "-D -I p"),
            (&["-s", "--server-max-duration", "30"], "--max-duration 30"),
            (
                &["-s", "--server-max-duration", "0"],
                &*format!("--max-duration {longest}"),
            ),
            (
                &["-s", "--server-bitrate-limit", "1G/2"],
                "--server-bitrate-limit 1G/2",
            ),
            (&["-c", "h", "-d"], "-V"),
            (&["-c", "h", "--debug=2", "-J"], "-V"),
            (
                &["-c", "h", "--snd-timeout", "5000", "--cntl-ka=30/5/3"],
                "--snd-timeout 5000 --cntl-ka=30/5/3",
            ),
            (&["-s", "--cntl-ka"], "-s -p 5201 --cntl-ka"),
        ] {
            let line = native(args).unwrap().join(" ");
            assert!(line.ends_with(want), "{args:?}: {line}");
        }
        let json = native(&["-c", "h", "-d", "-J"]).unwrap().join(" ");
        assert!(json.contains("--format iperf3-json"), "{json}");
    }

    /// Server-only flags on a client, and values iperf3 refuses, name the flag.
    #[test]
    fn server_flags_out_of_place_are_refused_by_name() {
        for (args, start) in [
            (&["-c", "h", "-D"][..], "-D: a server option"),
            (
                &["-c", "h", "--server-max-duration", "5"],
                "--server-max-duration: a server",
            ),
            (
                &["-c", "h", "--server-bitrate-limit", "1M"],
                "--server-bitrate-limit: a server",
            ),
            (
                &["-c", "h", "-I", "f"],
                "-I f: pinperf writes a pidfile for a server",
            ),
            (
                &["-s", "--server-max-duration", "-1"],
                "--server-max-duration -1: whole",
            ),
            (
                &["-s", "--server-max-duration", "86401"],
                "--server-max-duration 86401: whole",
            ),
        ] {
            let e = native(args).unwrap_err();
            assert!(e.starts_with(start), "{args:?}: {e}");
        }
    }

    /// `-B`, `HOST%DEV`, `--bind-dev`, `--cport`, `-m`, `-L` and `--dont-fragment` become
    /// pinperf's; an IPv6 link-local literal keeps its scope.
    #[test]
    fn where_connections_come_from_passes_on() {
        let line = |a: &[&str]| native(a).unwrap().join(" ");
        let l = line(&[
            "-c",
            "h%eth1",
            "-B",
            "192.0.2.1",
            "--cport",
            "5000",
            "-m",
            "-L",
            "0x12",
        ]);
        assert!(l.starts_with("pinperf -c h -p 5201"), "{l}");
        for part in [
            "-B 192.0.2.1",
            "--bind-dev eth1",
            "--cport 5000",
            "--mptcp",
            "--flowlabel 0x12",
        ] {
            assert!(l.contains(part), "{part}: {l}");
        }
        let given = line(&["-c", "h%eth1", "--bind-dev", "eth2"]);
        assert!(
            given.contains("--bind-dev eth2") && !given.contains("eth1"),
            "{given}"
        );
        let b = line(&["-c", "h", "-B", "192.0.2.1%eth3"]);
        assert!(b.contains("-B 192.0.2.1 --bind-dev eth3"), "{b}");
        assert_eq!(host_dev("fe80::1%eth0"), ("fe80::1%eth0", None));
        assert_eq!(host_dev("2001:db8::1%eth0"), ("2001:db8::1", Some("eth0")));
        assert!(line(&["-c", "h", "-u", "--dont-fragment"]).contains("--dont-fragment"));
        assert!(!line(&["-c", "h", "--dont-fragment"]).contains("--dont-fragment"));
        assert!(line(&["-c", "h", "--file", "f.bin"]).contains("-F f.bin"));
    }

    /// Flags pinperf honours by its own means pass, or change what pinperf does as they
    /// change iperf3's.
    #[test]
    fn flags_pinperf_honours_its_own_way_are_taken() {
        let line = |a: &[&str]| native(a).unwrap().join(" ");
        let l = line(&[
            "-c",
            "h",
            "-u",
            "--gsro",
            "--udp-counters-64bit",
            "--repeating-payload",
        ]);
        assert!(!l.contains("gsro") && !l.contains("64bit"), "{l}");
        let fq = line(&["-c", "h", "--fq-rate", "1G", "--no-fq-socket-pacing"]);
        assert!(!fq.contains("--fq-rate"), "{fq}");
        let full = line(&["-c", "h", "--json-stream", "--json-stream-full-output"]);
        assert!(full.contains("--format iperf3-json-stream-full"), "{full}");
        let alone = line(&["-c", "h", "--json-stream-full-output"]);
        assert!(alone.contains("--format iperf3-text"), "{alone}");
        let idle = line(&["-c", "h", "--rcv-timeout", "5000"]);
        assert!(idle.contains("--rcv-timeout 5000"), "{idle}");
        let extra = line(&["-c", "h", "-J", "--extra-data", "-site a-"]);
        assert!(extra.contains("--extra-data -site a-"), "{extra}");
    }
}
