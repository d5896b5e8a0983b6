//! Command-line syntax (clap derive). Only syntax lives here: unit parsing via the
//! `units` parsers so clap names the flag in its error. Ranges, combinations and
//! defaults that depend on each other are checked in `config`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::choices::{Engine, Format, RateUnit, TableFormat};
use crate::units;

mod test_args;
pub(crate) use test_args::c_number;
pub use test_args::{TestArgs, TransportArgs};

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a matrix of configurations against one server: one row each with Mb/s, CPU on
    /// both ends, Gbit/s per busy core, retransmits and fairness.
    Compare(Box<CompareArgs>),
    /// Name what limits the path and the hosts, and the setting that lifts it: a few runs
    /// chosen one by one from what each showed, within --budget, and a verdict.
    Diagnose(Box<DiagnoseArgs>),
    /// Emulate a long fat path between two network namespaces (root only) and run a test
    /// over it: `pinperf lab --rtt 60ms --rate 1G -- -P 8 -t 20`.
    Lab(LabArgs),
    /// Plot a saved result (`-J` of a test, `compare` or `lab`) as SVG or PNG: a test's
    /// per-stream Mb/s with the sum, RTTs and fairness over time; a comparison's Gbit/s
    /// and Gbit/s per busy core against the swept dimension.
    Plot(PlotArgs),
    /// Print a saved result (`-J` of a test, `compare` or `lab`) again: as the text the run
    /// printed, CSV, JSON, or a one-file HTML report (`-o OUT.html`).
    Report(ReportArgs),
    /// Print a shell completion script: `pinperf completions bash > /etc/bash_completion.d/pinperf`.
    Completions(CompletionsArgs),
    /// Print the man page (roff): `pinperf man | man -l -`.
    Man,
}

/// `pinperf plot`.
#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// A saved `-J` document.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    /// The picture to write: `.svg` or `.png`.
    #[arg(short = 'o', long, value_name = "OUT")]
    pub output: PathBuf,
    /// The plot's title (default: what was tested).
    #[arg(short = 'T', long, value_name = "TITLE", allow_hyphen_values = true)]
    pub title: Option<String>,
}

/// What `pinperf report` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
    Csv,
    Html,
    /// The test in iperf3 3.x's `-J` shape (its time and host are not in a saved test).
    #[value(name = "iperf3-json")]
    Iperf3Json,
}

/// `pinperf report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A saved `-J` document.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    /// Write here instead of stdout; `.html` (and `.csv`, `.json`) choose the format.
    #[arg(short = 'o', long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Output format (default: from -o's extension, else text).
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// `--format csv`, as a run takes it.
    #[arg(long, conflicts_with = "format")]
    pub csv: bool,
    /// `--format json`, as a run takes it.
    #[arg(short = 'J', long, conflicts_with_all = ["format", "csv"])]
    pub json: bool,
    /// `-o FILE.html`, as a run takes it.
    #[arg(long, value_name = "FILE.html", conflicts_with_all = ["output", "format", "csv", "json"])]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub text: TextArgs,
}

/// `pinperf completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// iperf3's text-output flags (a test's, and `pinperf report`'s).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TextArgs {
    /// Rate unit of the text rows, as iperf3's -f: k, m, g (Kbit/s, Mbit/s, Gbit/s) or
    /// K, M, G (KiB/s, MiB/s, GiB/s).
    #[arg(
        short = 'f',
        long = "rate-unit",
        allow_negative_numbers = true,
        value_enum,
        value_name = "UNIT",
        default_value = "m",
        hide_possible_values = true,
        help_heading = "Output"
    )]
    pub unit: RateUnit,
    /// Start every text line with "TITLE:  " (JSON: a "title" member; HTML: the title; -s:
    /// each text log line).
    #[arg(
        short = 'T',
        long,
        value_name = "TITLE",
        allow_hyphen_values = true,
        help_heading = "Output"
    )]
    pub title: Option<String>,
    /// Start every text line with the local time, by strftime's FORMAT (default "%c "); with
    /// -s, each text log line.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "%c ", help_heading = "Output")]
    pub timestamps: Option<String>,
    /// More detail in text: each stream's TCP_INFO (srtt, rttvar, min_rtt, delivery and
    /// pacing rate, unsent bytes, send buffer) and block-RTT median under its rows.
    #[arg(short = 'V', long, help_heading = "Output")]
    pub verbose: bool,
    /// A string written as "extra_data" in iperf3-json documents (iperf3's --extra-data).
    #[arg(
        long,
        value_name = "STR",
        allow_hyphen_values = true,
        help_heading = "Output"
    )]
    pub extra_data: Option<String>,
}

/// Where a test's report goes besides stdout's format (a client's flags).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    #[command(flatten)]
    pub text: TextArgs,
    /// Append the report to FILE instead of stdout (as iperf3's --logfile); with -s, the
    /// server's log instead of stderr.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub logfile: Option<PathBuf>,
    /// Flush every line as it is written (pinperf flushes every interval anyway).
    #[arg(long, help_heading = "Output")]
    pub forceflush: bool,
    /// Also save the test as the -J document in FILE when it ends, whatever stdout's format
    /// (read it later with `pinperf report FILE` or `pinperf plot FILE`).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json_file: Option<PathBuf>,
    /// Also plot the test into FILE (.svg or .png) when it ends.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub plot: Option<PathBuf>,
    /// Also write a one-file HTML report (header, plots, totals, CPU, diagnosis) to FILE.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub html: Option<PathBuf>,
}

/// `pinperf lab`: path options, then `--` and the client's options.
#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// Round-trip time of the path (half each way).
    #[arg(long, value_name = "TIME", default_value = "60ms", value_parser = units::parse_duration)]
    pub rtt: Duration,
    /// Bottleneck rate, both directions, counted in IP bytes: 200M, 1G.
    #[arg(long, value_name = "RATE", default_value = "1G", value_parser = units::parse_rate_bps)]
    pub rate: u64,
    /// Drop-tail queue in front of the bottleneck: a multiple of the bandwidth-delay
    /// product (2bdp, 0.25bdp) or bytes (4M) [default: 1bdp, and at least one --mtu packet].
    #[arg(long, value_name = "SIZE")]
    pub queue: Option<String>,
    /// Random loss per packet, each direction: 0.01% or 0.0001.
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "P",
        default_value = "0"
    )]
    pub loss: String,
    /// MTU of the path.
    #[arg(long, default_value_t = 9000)]
    pub mtu: u32,
    /// The path dies this long after it comes up (just before the client starts; the
    /// test's own clock starts after its handshake): every packet from then on is dropped,
    /// both directions.
    #[arg(long, value_name = "TIME", value_parser = units::parse_duration)]
    pub blackout_from: Option<Duration>,
    /// With --blackout-from: drop only UDP, so the control connection lives on (the case
    /// where iperf3 reports 0 % loss).
    #[arg(long, requires = "blackout_from")]
    pub blackout_udp_only: bool,
    /// Client options, after `--` (as for `pinperf -c`; the lab supplies the host).
    #[arg(last = true, value_name = "CLIENT OPTIONS")]
    pub client_args: Vec<String>,
}

/// `pinperf compare`: axes take lists (`8k,64k`) or doubling ranges (`8k..1m`, `1..16`).
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Block sizes: 8k,64k,256k or 8k..1m [default: each protocol's -l: 128k for TCP,
    /// 1472 for UDP].
    #[arg(long, value_name = "LIST")]
    pub blocks: Option<String>,
    /// Stream counts: 1,2,4 or 1..16.
    #[arg(long, value_name = "LIST", default_value = "1")]
    pub streams: String,
    /// Windows: auto (kernel autotuning) and/or sizes: auto,1M,16M.
    #[arg(long, value_name = "LIST", default_value = "auto")]
    pub windows: String,
    /// Pinning: auto (this end's plan; the server keeps its own -A, as with the client's
    /// -A auto), none (neither end pins).
    #[arg(long, value_name = "LIST", default_value = "auto")]
    pub pins: String,
    /// Sender engines: threads,single.
    #[arg(long, value_name = "LIST", default_value = "threads")]
    pub engines: String,

    /// How bytes cross into and out of the kernel: default,zerocopy,sendfile,msg-zerocopy,
    /// skip-rx (zerocopy is -Z on the sender, sendfile and msg-zerocopy its two methods,
    /// skip-rx is --skip-rx-copy on the receiver).
    #[arg(long, value_name = "LIST", default_value = "default")]
    pub copy: String,

    /// Protocols to compare: tcp, udp (UDP needs --blocks of at most 65507 bytes).
    #[arg(long, value_name = "LIST", default_value = "tcp")]
    pub protocols: String,

    /// Rates per stream (-b) to compare: 100M,1G; 0 = as fast as possible [default: 0].
    #[arg(long, value_name = "LIST")]
    pub rates: Option<String>,
    /// Seconds each configuration runs but leaves out of its row (as -O).
    #[arg(short = 'O', allow_negative_numbers = true, long, value_name = "SECS", default_value = "0", value_parser = units::parse_duration)]
    pub omit: Duration,
    /// Seconds per configuration.
    #[arg(short = 't', allow_negative_numbers = true, long = "time", value_name = "SECS", default_value = "3", value_parser = units::parse_duration)]
    pub duration: Duration,
    /// Pause between configurations.
    #[arg(long, value_name = "SECS", default_value = "0.5", value_parser = units::parse_duration)]
    pub settle: Duration,
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TableFormat,
    /// Same as --format json.
    #[arg(short = 'J', long, conflicts_with_all = ["format", "csv"])]
    pub json: bool,
    /// Same as --format csv.
    #[arg(long, conflicts_with = "format")]
    pub csv: bool,
}

/// `pinperf diagnose HOST`.
#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {
    /// The server (as -c HOST).
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Wall-clock time all runs must fit in.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = units::parse_duration)]
    pub budget: Duration,
    /// The baseline's congestion control (-C) [default: the system's].
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// The baseline's window (-w) [default: autotuning].
    #[arg(short = 'w', long, value_name = "SIZE", value_parser = units::parse_size)]
    pub window: Option<u64>,
    /// The baseline's -w past net.core.{w,r}mem_max (SO_*BUFFORCE; root), as a host whose
    /// sysctls allow it would grant.
    #[arg(long, requires = "window")]
    pub force_window: bool,
    /// The baseline's block (-l) [default: 128k].
    #[arg(short = 'l', long = "len", value_name = "SIZE", value_parser = units::parse_size)]
    pub block: Option<u64>,
    /// Seconds per run [default: a fifth of --budget less 0.5 s, 1 to 5 s].
    #[arg(short = 't', long = "time", value_name = "SECS", value_parser = units::parse_duration)]
    pub duration: Option<Duration>,
    /// The verdict and the runs as JSON (progress lines go to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// Where the server is and how to reach it (a client's and `compare`'s).
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// Run as a client of the server at HOST.
    #[arg(short = 'c', long, value_name = "HOST", help_heading = "Mode")]
    pub client: Option<String>,

    /// Run against an in-process server on 127.0.0.1 (one command, a real test).
    #[arg(long, help_heading = "Mode")]
    pub loopback: bool,

    /// Control port: the server listens on it, the client connects to it [default: 5301].
    // No clap default: a -p given, even 5301, is told from none (`--loopback -p 5301`).
    #[arg(
        short = 'p',
        allow_negative_numbers = true,
        long,
        help_heading = "Connection"
    )]
    pub port: Option<u16>,

    /// Local address to bind (server: listen address; client: source address).
    #[arg(short = 'B', long, value_name = "ADDR", help_heading = "Connection")]
    pub bind: Option<IpAddr>,

    /// Use IPv4 only.
    #[arg(
        short = '4',
        long = "ipv4",
        visible_alias = "version4",
        conflicts_with = "ipv6",
        help_heading = "Connection"
    )]
    pub ipv4: bool,

    /// Use IPv6 only.
    #[arg(
        short = '6',
        long = "ipv6",
        visible_alias = "version6",
        help_heading = "Connection"
    )]
    pub ipv6: bool,

    /// Give up connecting after this long (client).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = units::parse_duration,
          allow_negative_numbers = true, help_heading = "Connection")]
    pub connect_timeout: Duration,

    /// Client: every connection leaves by this network interface (SO_BINDTODEVICE).
    #[arg(long, value_name = "DEV", help_heading = "Connection")]
    pub bind_dev: Option<String>,

    /// Client: data connection k (directions in order) comes from port PORT+k, as iperf3's
    /// --cport; the control connection keeps a kernel-chosen port.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..),
          help_heading = "Connection")]
    pub cport: Option<u16>,

    /// Client: data connections are MPTCP (the server's end falls back to TCP unless it
    /// listens with MPTCP too).
    #[arg(short = 'm', long, help_heading = "Connection")]
    pub mptcp: bool,

    /// Client: data connections carry this IPv6 flow label (1-0xfffff, C notation).
    #[arg(short = 'L', long, value_name = "N", value_parser = parse_flowlabel,
          help_heading = "Connection")]
    pub flowlabel: Option<u32>,

    /// What the server speaks: auto (pinperf, or iperf3 when the server stays silent after
    /// pinperf's preamble), pinperf, or iperf3 (its control protocol; pinned threads here).
    #[arg(long, value_enum, default_value = "auto", help_heading = "Connection")]
    pub peer: crate::choices::Peer,
}

/// `--flowlabel`: an IPv6 flow label, 1 to 0xfffff in C's notation (as iperf3's `-L`).
fn parse_flowlabel(text: &str) -> Result<u32, String> {
    c_number(text)
        .filter(|v| (1..=0xf_ffff).contains(v))
        .map(|v| v as u32)
        .ok_or_else(|| format!("'{}': a flow label is 1 to 0xfffff", text.trim()))
}

/// Flags users bring from iperf3 that pinperf's own command line does not have, with what
/// to do instead. Checked before clap, so the answer is this hint rather than "a similar
/// argument" (clap offers `--version` for `--version4`'s typo and `--udp` for `--dscp`).
const NOT_YET: &[(&str, &str, &str)] = &[
    (
        "-d",
        "--debug",
        "the report and the server's log say what happened",
    ),
    (
        "",
        "--json-stream",
        "use --format iperf3-json-stream (pinperf's own events: --json-lines)",
    ),
    (
        "",
        "--json-stream-full-output",
        "use --format iperf3-json-stream-full",
    ),
    (
        "",
        "--dscp",
        "give the TOS byte with -S: the DSCP shifted left by 2 (--dscp 10 is -S 40)",
    ),
    ("", "--sctp", "pinperf runs TCP and UDP only"),
    ("-X", "--xbind", "pinperf runs TCP and UDP only"),
    ("", "--nstreams", "pinperf runs TCP and UDP only"),
    (
        "",
        "--gsro",
        "pinperf's UDP uses GSO and GRO unless --no-gsro",
    ),
    (
        "",
        "--udp-counters-64bit",
        "pinperf's datagrams always carry 64-bit sequences",
    ),
    ("", "--repeating-payload", "pinperf sends generated blocks"),
    ("", "--pacing-timer", "pinperf paces -b with its own timer"),
    (
        "",
        "--no-fq-socket-pacing",
        "pinperf paces with fq only when --fq-rate asks",
    ),
    (
        "",
        "--server-max-duration",
        "a pinperf server refuses longer tests with --max-duration SECS",
    ),
];

/// A usage error for a flag iperf3 has and pinperf not (yet), naming what to do instead.
/// Only the arguments before `--` are looked at.
pub fn not_yet<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    argv.iter()
        .map(AsRef::as_ref)
        .take_while(|a| *a != "--")
        .find_map(|arg| {
            let flag = arg.split('=').next().unwrap_or(arg);
            NOT_YET
                .iter()
                .find(|(short, long, _)| {
                    (!short.is_empty() && flag == *short) || (!long.is_empty() && flag == *long)
                })
                .map(|(short, long, hint)| {
                    let name = [*short, *long]
                        .into_iter()
                        .filter(|n| !n.is_empty())
                        .collect::<Vec<_>>()
                        .join("/");
                    format!("{name} (an iperf3 flag) is not supported (yet): {hint}")
                })
        })
}

/// `--format m`: iperf3's `--format` is the rate unit, pinperf's the output format; said
/// before clap, whose answer would list the output formats.
pub fn format_unit<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    let argv: Vec<&str> = argv
        .iter()
        .map(AsRef::as_ref)
        .take_while(|a| *a != "--")
        .collect();
    let value = argv.iter().enumerate().find_map(|(i, a)| match *a {
        "--format" => argv.get(i + 1).copied(),
        _ => a.strip_prefix("--format="),
    })?;
    let unit = matches!(
        value,
        "k" | "m" | "g" | "t" | "K" | "M" | "G" | "T" | "a" | "A"
    );
    unit.then(|| {
        format!(
            "--format {value}: pinperf's --format is the output format (text, json, csv, ...); \
             iperf3's --format, the rate unit, is -f {value} here"
        )
    })
}

/// Flags that pinperf takes with another meaning than iperf3's, given as an iperf3 user
/// would: said with the difference, rather than run as something else.
pub fn iperf3_meaning(args: &Args) -> Option<String> {
    if args.server || args.command.is_some() {
        return None;
    }
    let timeout = args.target.connect_timeout.as_secs_f64();
    if timeout > 600.0 {
        return Some(format!(
            "--connect-timeout {timeout}: pinperf counts seconds ({:.0} minutes here); iperf3 \
             counts milliseconds: for {} s give --connect-timeout {} (`pinperf iperf3` takes \
             iperf3's milliseconds)",
            timeout / 60.0,
            timeout / 1000.0,
            timeout / 1000.0
        ));
    }
    let two: Vec<&str> = args.affinity.split(',').collect();
    let one_stream = args.test.streams == 1 && !args.test.bidir;
    if one_stream && two.len() == 2 && two.iter().all(|c| c.trim().parse::<u32>().is_ok()) {
        return Some(format!(
            "-A {0}: pinperf reads a CPU list for this end's streams (one stream: only {1} \
             would be used); iperf3's \"this end on {1}, the server on {2}\" is -A {1}/{2} here",
            args.affinity,
            two[0].trim(),
            two[1].trim()
        ));
    }
    let longest = crate::wire::params::Limits::PROTOCOL.max_duration.as_secs();
    args.test.duration.is_zero().then(|| {
        format!(
            "-t 0: iperf3's \"no time limit\" is -t {longest} here (the longest test), or \
             `pinperf iperf3 -t 0`"
        )
    })
}

/// `-Z msg` / `--zerocopy sendfile`: the method given apart from `-Z`, which takes it only
/// attached (`-Z=msg`, so that `-Z` alone can come before anything); clap read the word as
/// a subcommand ("the subcommand 'msg' cannot be used with: --client").
pub fn detached_method<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    use clap::ValueEnum;
    let args: Vec<&str> = argv
        .iter()
        .map(AsRef::as_ref)
        .take_while(|a| *a != "--")
        .collect();
    args.windows(2).find_map(|w| {
        let method = crate::choices::ZeroCopy::from_str(w[1], true).ok()?;
        let name = method.to_possible_value()?.get_name().to_string();
        matches!(w[0], "-Z" | "--zerocopy").then(|| {
            format!(
                "{} {}: the method attaches with '=': {}={name} (-Z alone is sendfile)",
                w[0], w[1], w[0]
            )
        })
    })
}

/// `-b -5M`, `-t -2s`: a value opening with '-' and a digit, given apart from the flag that
/// takes it, is attached to it (`-b=-5M`) for that flag's rule to say what is wrong with
/// it; clap read it as flags ("unexpected argument '-5' found"). Only a flag whose value is
/// required takes it (`-Z` and `--timestamps` take theirs only attached, and a flag may
/// follow them), and never one that is a flag itself (`-1`, `-4`, `-6`). The flags are the
/// subcommand's when the first argument names one (`lab --rtt -5ms`); arguments from `--`
/// on are left as they are.
pub fn attach_signed_values(argv: Vec<String>) -> Vec<String> {
    use clap::CommandFactory;
    let mut root = Args::command();
    root.build();
    let cmd = argv
        .get(1)
        .and_then(|a| root.find_subcommand(a))
        .unwrap_or(&root);
    let flag = |word: &str| {
        let (short, long) = match word.strip_prefix("--") {
            Some(long) => (None, Some(long)),
            None => {
                let mut chars = word.strip_prefix('-')?.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => (Some(c), None),
                    _ => return None,
                }
            }
        };
        cmd.get_arguments().find(|a| {
            (short.is_some() && a.get_short() == short) || (long.is_some() && a.get_long() == long)
        })
    };
    let wants_value = |word: &str| {
        flag(word).is_some_and(|a| {
            a.get_action().takes_values()
                && !a.is_require_equals_set()
                && a.get_num_args().is_none_or(|n| n.min_values() > 0)
        })
    };
    let signed = |v: &str| {
        v.strip_prefix('-')
            .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
            && flag(v).is_none()
    };
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    let mut rest = argv.into_iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(rest);
            break;
        }
        match out.last_mut() {
            Some(last) if signed(&arg) && wants_value(last) && !last.contains('=') => {
                last.push('=');
                last.push_str(&arg);
            }
            _ => out.push(arg),
        }
    }
    out
}

/// A flag of the other mode given on the command line: a test's parameters (and
/// `--engine`, `--peer`, `--auth`) to a server, which takes each test's from its client; a
/// "Server" flag to a client or `--loopback` (whose in-process server takes none). iperf3
/// refuses client options on a server too; run without them, they were silently ignored
/// (`pinperf -s -R`, `pinperf --loopback --max-rate 1M` at 22 Gbit/s).
pub fn wrong_mode(m: &clap::ArgMatches) -> Option<String> {
    use clap::{Args as _, CommandFactory, parser::ValueSource};
    if m.subcommand().is_some() {
        return None;
    }
    let given =
        |a: &&clap::Arg| m.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine);
    let cmd = Args::command();
    let client = m.value_source("client").is_some() || m.get_flag("loopback");
    if m.get_flag("server") {
        let test = TestArgs::augment_args(clap::Command::new("test"));
        // -i and --rcv-timeout are iperf3's on a server too; --auth has its own message
        // (config.rs).
        let mut client_only: Vec<clap::Id> = test
            .get_arguments()
            .map(|a| a.get_id().clone())
            .filter(|id| id != "interval" && id != "rcv_timeout")
            .collect();
        client_only.extend(["engine", "peer", "connect_timeout"].map(clap::Id::from));
        if let Some(arg) = cmd
            .get_arguments()
            .filter(|a| client_only.contains(a.get_id()))
            .find(given)
        {
            return Some(format!(
                "{}: a client option; a server (-s) takes each test's parameters from its client",
                flag_name(arg)
            ));
        }
        // The report's flags; the server's log takes the text prefixes and a file, as
        // iperf3 -s does (serverlog.rs), and flushes every line anyway. iperf3 -s's own
        // -J, -V and -f are taken and said to be ignored (config::server_log), so a unit
        // file moved over from iperf3 still starts. `--format iperf3-json` is a server's
        // per-test documents (config::server_config).
        let log = [
            "format",
            "logfile",
            "timestamps",
            "title",
            "forceflush",
            "json",
            "verbose",
            "unit",
        ]
        .map(clap::Id::from);
        let arg = cmd
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some("Output") && !log.contains(a.get_id()))
            .find(given)?;
        return Some(format!(
            "{}: a client's report option; a server (-s) logs each test (text, or \
             --log-format json) to stderr or --logfile, and its client reports it",
            flag_name(arg)
        ));
    }
    if !client {
        // No mode given: clap's or config's own message says to choose one.
        return None;
    }
    server_option(m)
}

/// `-s/--server`: how an argument is named on the command line.
fn flag_name(a: &clap::Arg) -> String {
    let short = a.get_short().map(|c| format!("-{c}"));
    let long = a.get_long().map(|l| format!("--{l}"));
    [short, long]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("/")
}

/// A "Server" flag given to a client (or to `pinperf lab`'s client options), which
/// would be taken and ignored.
pub fn server_option(m: &clap::ArgMatches) -> Option<String> {
    use clap::{CommandFactory, parser::ValueSource};
    let given =
        |a: &&clap::Arg| m.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine);
    let cmd = Args::command();
    let arg = cmd
        .get_arguments()
        .filter(|a| a.get_help_heading() == Some("Server"))
        .find(given)?;
    Some(format!(
        "{}: a server option (pinperf -s); a client, and --loopback's in-process server, \
         take none",
        flag_name(arg)
    ))
}

/// Default TCP port of the control connection (not iperf's 5201, so both can run).
pub const DEFAULT_PORT: u16 = 5301;

impl TargetArgs {
    /// `-p`, or [`DEFAULT_PORT`].
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

/// pinperf: a pinned thread-per-stream TCP throughput tester.
///
/// Run `pinperf -s` on one host and `pinperf -c HOST` on the other, or `pinperf --loopback`
/// for a real test against an in-process server on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(
    name = "pinperf",
    version,
    about,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    // As iperf3 and most Unix tools: an option given twice takes its last value, so a
    // wrapper script can append to a user's flags (repeatable lists still add up).
    args_override_self = true,
    disable_version_flag = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print the version (as iperf3's -v; -V is iperf3's --verbose).
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    pub version: (),

    // ---- mode ----
    /// Run as a server.
    #[arg(short = 's', long, help_heading = "Mode")]
    pub server: bool,

    #[command(flatten)]
    pub target: TargetArgs,

    // ---- test ----
    #[command(flatten)]
    pub test: TestArgs,

    /// CPU pinning: auto (spread streams over allowed cores), none, or a CPU list for the
    /// local streams, optionally "/" and one for the server's: 0,1 or 0-3/4-7.
    #[arg(
        short = 'A',
        long,
        allow_negative_numbers = true,
        value_name = "PLAN",
        default_value = "auto",
        help_heading = "Test"
    )]
    pub affinity: String,

    /// Output format.
    #[arg(long, value_enum, default_value = "text", help_heading = "Output")]
    pub format: Format,

    /// Same as --format json: one JSON document at the end.
    #[arg(short = 'J', long, conflicts_with_all = ["format", "json_lines", "csv"], help_heading = "Output")]
    pub json: bool,

    /// Same as --format json-lines: one JSON event per line, live.
    #[arg(long, conflicts_with_all = ["format", "csv"], help_heading = "Output")]
    pub json_lines: bool,

    /// Same as --format csv: one row per stream per interval, sum rows marked.
    #[arg(long, conflicts_with = "format", help_heading = "Output")]
    pub csv: bool,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Print each core's busy/softirq share per interval (the end of the test always
    /// reports CPU).
    #[arg(long, help_heading = "Output")]
    pub cpu: bool,

    /// Sender engine: threads (one pinned thread per stream) or single (one thread, poll()).
    #[arg(long, value_enum, default_value = "threads", help_heading = "Test")]
    pub engine: Engine,

    // ---- server ----
    /// Serve one test, then exit.
    #[arg(short = '1', long = "one-off", help_heading = "Server")]
    pub one_off: bool,

    /// With -1: exit (status 0) when no test has started for this long, as iperf3 -s -1
    /// --idle-timeout does; a serving server has no state to reset and goes on.
    #[arg(long, value_name = "SECS", value_parser = units::parse_duration, help_heading = "Server")]
    pub idle_timeout: Option<Duration>,

    /// Largest number of streams a client may ask for.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 128,
        allow_negative_numbers = true,
        help_heading = "Server"
    )]
    pub max_streams: u32,

    /// Largest window a client may ask for.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = units::parse_size,
          allow_negative_numbers = true, help_heading = "Server")]
    pub max_window: u64,

    /// Longest test a client may ask for.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = units::parse_duration,
          allow_negative_numbers = true, help_heading = "Server")]
    pub max_duration: Duration,

    /// Highest -b a client may ask for per stream (then every test must name one).
    #[arg(long, value_name = "RATE", value_parser = units::parse_rate_bps,
          allow_negative_numbers = true, help_heading = "Server")]
    pub max_rate: Option<u64>,

    /// Refuse UDP tests.
    #[arg(long, help_heading = "Server")]
    pub no_udp: bool,

    /// Grant clients' --realtime: their UDP tests' receiving threads here run at
    /// real-time priority (SCHED_FIFO 1). Needs root or CAP_SYS_NICE.
    #[arg(long, help_heading = "Server")]
    pub allow_realtime: bool,

    /// A port of its own for data connections (default: none, they come to -p; 0: an
    /// ephemeral port per test).
    #[arg(
        long,
        value_name = "PORT",
        allow_negative_numbers = true,
        help_heading = "Server"
    )]
    pub data_port: Option<u16>,

    /// Require authentication: a file of USER:SECRET lines (# comments), readable by no
    /// one but the server's user.
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub auth_keys: Option<std::path::PathBuf>,

    /// Serve only these networks (IPv4 and IPv6): 192.0.2.0/24,2001:db8::/32; others are
    /// closed at once and logged.
    #[arg(long, value_name = "CIDR[,CIDR...]", help_heading = "Server")]
    pub allow: Vec<String>,

    /// Most tests one source (an IPv4 address, an IPv6 /64) may start per minute.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Server"
    )]
    pub max_tests_per_minute: Option<u32>,

    /// Server log on stderr: text lines, or json (one object per line, for journald and
    /// fail2ban).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"], help_heading = "Server")]
    pub log_format: String,

    /// The highest total rate of a test's streams (sent and received), averaged over SECS
    /// (default 5; 0: the whole test so far), as iperf3's: a test asking for more (-b times
    /// -P) is refused, one that moves more is ended.
    #[arg(long, value_name = "RATE[/SECS]", value_parser = crate::wire::params::TotalRate::parse,
          help_heading = "Server")]
    pub server_bitrate_limit: Option<crate::wire::params::TotalRate>,

    /// Run in the background (a daemon) once listening: the command returns, stdio go to
    /// /dev/null (log with --logfile).
    #[arg(short = 'D', long, help_heading = "Server")]
    pub daemon: bool,

    /// Write the server's process ID to FILE, removed when it exits.
    #[arg(short = 'I', long, value_name = "FILE", help_heading = "Server")]
    pub pidfile: Option<PathBuf>,

    /// TCP_USER_TIMEOUT on this end's control and data connections, in milliseconds, as
    /// iperf3's: how long sent data may go unacknowledged before the connection fails (0:
    /// the system's).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=test_args::LONGEST_MS),
          help_heading = "Connection")]
    pub snd_timeout: Option<u64>,

    /// TCP keepalive on this end's control connections, as iperf3's: probes after IDLE
    /// seconds of silence, INTV apart, CNT of them (each may be left out: the system's).
    #[arg(long, value_name = "IDLE/INTV/CNT", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = crate::choices::Keepalive::parse,
          help_heading = "Connection")]
    pub cntl_ka: Option<crate::choices::Keepalive>,

    // ---- authentication (client) ----
    /// Authenticate as USER (the server has --auth-keys); the secret comes from
    /// $PINPERF_SECRET or --auth-secret-file.
    #[arg(long, value_name = "USER", help_heading = "Authentication")]
    pub auth: Option<String>,

    /// File holding the secret for --auth (its first line).
    #[arg(
        long,
        value_name = "FILE",
        requires = "auth",
        help_heading = "Authentication"
    )]
    pub auth_secret_file: Option<std::path::PathBuf>,

    // ---- iperf3's authentication ----
    /// An iperf3 server's user (its RSA scheme; the password from $IPERF3_PASSWORD).
    #[arg(
        long,
        value_name = "USER",
        requires = "rsa_public_key_path",
        help_heading = "Authentication"
    )]
    pub username: Option<String>,
    /// The iperf3 server's RSA public key (PEM), which the credentials are sent under.
    #[arg(
        long,
        value_name = "FILE",
        requires = "username",
        help_heading = "Authentication"
    )]
    pub rsa_public_key_path: Option<std::path::PathBuf>,
    /// Server: iperf3 clients authenticate under this RSA private key (PEM, unencrypted).
    #[arg(
        long,
        value_name = "FILE",
        requires = "authorized_users_path",
        help_heading = "Authentication"
    )]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// Server: iperf3's users file, `user,sha256` lines (the hash of `{user}password`).
    #[arg(
        long,
        value_name = "FILE",
        requires = "rsa_private_key_path",
        help_heading = "Authentication"
    )]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// Server: how far an iperf3 client's clock may be from this one's, in seconds
    /// [default: 10].
    #[arg(long, value_name = "SECS", help_heading = "Authentication")]
    pub time_skew_threshold: Option<u64>,
    /// iperf3's RSA credentials in PKCS#1 v1.5 padding, as iperf3 before 3.17 (OAEP
    /// otherwise); both ends must agree.
    #[arg(long, help_heading = "Authentication")]
    pub use_pkcs1_padding: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zerocopy_method_given_apart_is_refused_with_the_attached_form() {
        assert_eq!(
            detached_method(&["-c", "h", "-Z", "msg"]).as_deref(),
            Some("-Z msg: the method attaches with '=': -Z=msg (-Z alone is sendfile)")
        );
        assert!(
            detached_method(&["--zerocopy", "sendfile"])
                .is_some_and(|m| m.contains("--zerocopy=sendfile"))
        );
        assert_eq!(detached_method(&["-Z=msg", "-c", "h"]), None);
        assert_eq!(detached_method(&["-Z", "-c", "h"]), None);
        assert_eq!(detached_method(&["lab", "--", "-Z", "msg"]), None);
    }

    #[test]
    fn a_signed_value_apart_from_its_flag_is_refused_by_the_flags_rule() {
        let parse = |argv: &[&str]| {
            let argv = attach_signed_values(argv.iter().map(|a| a.to_string()).collect());
            Args::try_parse_from(argv).unwrap_err().to_string()
        };
        for (argv, says) in [
            (
                &["pinperf", "-c", "h", "-b", "-5M"][..],
                "'-5M' is not a rate",
            ),
            (
                &["pinperf", "-c", "h", "--time", "-2s"],
                "'-2s' is not a duration",
            ),
            (
                &["pinperf", "-c", "h", "-w", "-.5M"],
                "'-.5M' is not a size",
            ),
        ] {
            let e = parse(argv);
            assert!(
                e.contains(says) && !e.contains("unexpected"),
                "{argv:?}: {e}"
            );
        }
        let kept = |argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            attach_signed_values(argv.clone()) == argv
        };
        // A flag after a flag without a value, or one whose value is optional and only
        // attached, and anything past `--`, stay apart (`-Z -4` and
        // `--timestamps -1` were joined).
        assert!(kept(&["pinperf", "-s", "-1"]));
        assert!(kept(&["pinperf", "lab", "--", "-b", "-5M"]));
        assert!(kept(&["pinperf", "-c", "h", "-b=-5M", "-1"]));
        assert!(kept(&["pinperf", "-c", "h", "-Z", "-4"]));
        assert!(kept(&["pinperf", "-c", "h", "--zerocopy", "-6"]));
        assert!(kept(&["pinperf", "-s", "--timestamps", "-1"]));
        assert!(kept(&["pinperf", "-c", "h", "-P", "-1"]));
        // A subcommand's own flags.
        let joined = attach_signed_values(
            ["pinperf", "lab", "--rtt", "-5ms"]
                .iter()
                .map(|a| a.to_string())
                .collect(),
        );
        assert_eq!(joined, ["pinperf", "lab", "--rtt=-5ms"]);
    }

    #[test]
    fn a_negative_value_is_refused_by_its_flags_rule() {
        // (--fq-rate, --connect-timeout and -f took -1 for -1/--one-off)
        for (flag, says) in [
            ("-t", "not a duration"),
            ("-P", "-1"),
            ("-w", "-1"),
            ("--fq-rate", "not a rate"),
            ("--connect-timeout", "not a duration"),
            ("-f", "invalid value '-1'"),
        ] {
            let e = Args::try_parse_from(["pinperf", "-c", "h", flag, "-1"]).unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains(says) && !e.contains("a value is required"),
                "{flag} -1: {e}"
            );
        }
        // Strings whose own rule judges them; a title may start with '-' (as iperf3's).
        for (flag, value) in [("-C", "-1"), ("-A", "-1"), ("-T", "-x")] {
            let parsed = Args::try_parse_from(["pinperf", "-c", "h", flag, value]);
            assert!(parsed.is_ok(), "{flag} {value}: {:?}", parsed.err());
        }
        for flag in [
            "--max-streams",
            "--max-window",
            "--max-duration",
            "--max-rate",
            "--data-port",
            "--max-tests-per-minute",
        ] {
            let e = Args::try_parse_from(["pinperf", "-s", flag, "-1"]).unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains("'-1'") && !e.contains("a value is required"),
                "{flag} -1: {e}"
            );
        }
    }

    #[test]
    fn iperf3_flags_we_lack_get_a_hint_and_ours_pass() {
        let hint = |argv: &[&str]| not_yet(argv);
        assert!(
            hint(&["-c", "h", "--sctp"])
                .unwrap()
                .starts_with("--sctp (an iperf3 flag) is not supported (yet): ")
        );
        assert!(hint(&["-d"]).unwrap().starts_with("-d/--debug"));
        // Implemented now: left to clap.
        for flag in [
            "-F",
            "--cport",
            "--bind-dev",
            "-L",
            "--mptcp",
            "--extra-data",
            "-Z",
            "--zerocopy",
            "--skip-rx-copy",
            "-V",
            "-f",
            "-T",
            "--logfile",
            "--forceflush",
            "--timestamps=%T",
            "-R",
            "--bidir",
            "-u",
            "--fq-rate=1G",
            "-n",
            "--bytes",
            "-k",
            "--blockcount",
        ] {
            assert_eq!(hint(&[flag]), None, "{flag}");
        }
        assert_eq!(hint(&["-b", "10M"]), None);
        // Ours, and anything after `--` (the lab's client options), are left to clap.
        assert_eq!(
            hint(&["-c", "h", "-P", "4", "-O", "2", "-C", "bbr", "-J"]),
            None
        );
        assert_eq!(hint(&["lab", "--", "-R"]), None);
        assert!(
            Args::try_parse_from(["pinperf", "-v"]).is_err(),
            "-v prints the version"
        );
        // Flags clap would answer with an unrelated "similar" one.
        assert!(hint(&["--dscp", "10"]).unwrap().contains("-S 40"));
        // iperf3's long spellings of pinperf's own flags mean the same.
        let p = Args::try_parse_from([
            "pinperf",
            "-c",
            "h",
            "--version4",
            "--length",
            "8k",
            "--bandwidth",
            "1G",
            "--linux-congestion",
            "bbr",
        ])
        .unwrap();
        assert!(p.target.ipv4);
        assert_eq!(p.test.len, Some(8192));
        assert_eq!(p.test.transport.congestion.as_deref(), Some("bbr"));
    }

    /// Given as iperf3 means them, pinperf's flags of another meaning are refused, saying
    /// the difference; pinperf's own meaning passes.
    #[test]
    fn iperf3_meanings_are_named_not_run_as_something_else() {
        let meaning = |argv: &[&str]| {
            let all = std::iter::once("pinperf").chain(argv.iter().copied());
            iperf3_meaning(&Args::try_parse_from(all).unwrap())
        };
        let ms = meaning(&["-c", "h", "--connect-timeout", "3000"]).unwrap();
        assert!(
            ms.contains("50 minutes") && ms.contains("--connect-timeout 3 "),
            "{ms}"
        );
        assert_eq!(meaning(&["-c", "h", "--connect-timeout", "30"]), None);
        let a = meaning(&["-c", "h", "-A", "0,1"]).unwrap();
        assert!(a.contains("-A 0/1 here"), "{a}");
        assert_eq!(meaning(&["-c", "h", "-P", "2", "-A", "0,1"]), None);
        assert_eq!(meaning(&["-c", "h", "-A", "0-1"]), None);
        assert!(
            meaning(&["-c", "h", "-t", "0"])
                .unwrap()
                .contains("-t 86400")
        );
        assert_eq!(meaning(&["-s", "-A", "0,1"]), None);
        let f = format_unit(&["-c", "h", "--format", "m"]).unwrap();
        assert!(f.contains("-f m here"), "{f}");
        assert_eq!(format_unit(&["-c", "h", "--format=json"]), None);
        assert_eq!(format_unit(&["lab", "--", "--format", "m"]), None);
    }
}
