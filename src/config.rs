//! Turns parsed [`Args`] into a validated [`Mode`]: one `validate_*` per rule, each error
//! naming the flag, the value and the allowed range. Nothing downstream re-checks these.

use std::net::IpAddr;
use std::time::Duration;

use crate::choices::Engine;
use crate::choices::Format;
use crate::cli::Args;
use crate::error::{Error, Result};
use crate::net::Family;
use crate::pin::Affinity;
use crate::units::format_size;

/// Most streams a client may run (`-P`).
pub const MAX_STREAMS: u32 = 256;
/// Smallest and largest block (`-l`).
pub const MIN_BLOCK: u64 = 64;
pub const MAX_BLOCK: u64 = 64 << 20;
/// Shortest reporting interval (`-i`).
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// What this invocation does.
#[derive(Debug)]
pub enum Mode {
    Server(ServerConfig),
    Client(ClientConfig),
}

/// The test a client asks for; sent to the server (as `TestParams`) and used locally.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host; `None` with `loopback`.
    pub host: Option<String>,
    pub port: u16,
    pub bind: Option<IpAddr>,
    pub family: Family,
    pub connect_timeout: Duration,
    pub streams: u16,
    pub block_bytes: u64,
    pub window_bytes: Option<u64>,
    pub force_window: bool,
    pub duration: Duration,
    pub interval: Duration,
    pub affinity: Affinity,
    pub remote_affinity: Option<Affinity>,
    pub loopback: bool,
    /// Block-header echoes for block RTT (off with `--no-echo`).
    pub echo: bool,
    pub format: Format,
    /// `-C`: congestion control algorithm for the data connections.
    pub congestion: Option<String>,
    /// `--cpu`: a per-core CPU line per interval.
    pub cpu_intervals: bool,
    /// `--engine`.
    pub engine: Engine,
    /// The server runs in this process (set by `compare --loopback`): CPU counted once.
    pub same_process: bool,
}

/// Server limits a client cannot exceed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_streams: u32,
    pub max_window_bytes: u64,
    pub max_duration: Duration,
}

/// How the server listens and what it allows.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub bind: Option<IpAddr>,
    pub port: u16,
    pub family: Family,
    pub one_off: bool,
    pub limits: Limits,
    pub data_port: Option<u16>,
    pub affinity: Affinity,
    /// No log lines on stderr (the in-process `--loopback` server).
    pub quiet: bool,
}

/// Validates the arguments and decides the mode.
pub fn from_args(args: &Args) -> Result<Mode> {
    let modes = [args.server, args.client.is_some(), args.loopback];
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
    let family = match (args.ipv4, args.ipv6) {
        (true, _) => Family::V4,
        (_, true) => Family::V6,
        _ => Family::Any,
    };
    let (local_plan, remote_plan) = crate::pin::parse_plan(&args.affinity).map_err(usage)?;
    if args.server {
        if remote_plan.is_some() {
            return Err(usage("-A: a server takes one CPU list, not LOCAL/REMOTE"));
        }
        validate_server_limits(args)?;
        return Ok(Mode::Server(ServerConfig {
            bind: args.bind,
            port: args.port,
            family,
            one_off: args.one_off,
            limits: Limits {
                max_streams: args.max_streams,
                max_window_bytes: args.max_window,
                max_duration: args.max_duration,
            },
            data_port: args.data_port,
            affinity: local_plan,
            quiet: false,
        }));
    }
    let streams = validate_streams(args.parallel)?;
    validate_block(args.block)?;
    validate_window(args.window)?;
    validate_times(args.duration, args.interval)?;
    if let Some(name) = &args.congestion {
        crate::net::check_congestion(name)?;
    }
    if args.loopback && args.client.is_none() && args.bind.is_some() {
        return Err(usage("-B: --loopback always uses 127.0.0.1; drop -B"));
    }
    if args.loopback && args.ipv6 {
        return Err(usage(
            "-6: --loopback runs on 127.0.0.1; use -c ::1 against a server for IPv6",
        ));
    }
    Ok(Mode::Client(ClientConfig {
        host: args.client.clone(),
        port: args.port,
        bind: args.bind,
        family,
        connect_timeout: args.connect_timeout,
        streams,
        block_bytes: args.block,
        window_bytes: args.window,
        force_window: args.force_window,
        duration: args.duration,
        interval: args.interval,
        affinity: local_plan,
        remote_affinity: remote_plan,
        loopback: args.loopback,
        echo: !args.no_echo,
        format: output_format(args),
        congestion: args.congestion.clone(),
        cpu_intervals: args.cpu,
        engine: args.engine,
        same_process: false,
    }))
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

pub(crate) fn validate_streams(parallel: u32) -> Result<u16> {
    if !(1..=MAX_STREAMS).contains(&parallel) {
        return Err(usage(format!(
            "-P {parallel}: streams must be 1 to {MAX_STREAMS}"
        )));
    }
    Ok(parallel as u16)
}

pub(crate) fn validate_block(block: u64) -> Result<()> {
    if !(MIN_BLOCK..=MAX_BLOCK).contains(&block) {
        return Err(usage(format!(
            "-l {}: block size must be {} to {} bytes ({} to {})",
            format_size(block),
            MIN_BLOCK,
            MAX_BLOCK,
            format_size(MIN_BLOCK),
            format_size(MAX_BLOCK)
        )));
    }
    Ok(())
}

pub(crate) fn validate_window(window: Option<u64>) -> Result<()> {
    // The kernel takes an int and doubles it: anything above 1 GiB cannot be granted.
    const MAX: u64 = 1 << 30;
    match window {
        Some(w) if !(1024..=MAX).contains(&w) => Err(usage(format!(
            "-w {}: window must be 1k to 1G (the kernel stores twice the request in an int)",
            format_size(w)
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn validate_times(duration: Duration, interval: Duration) -> Result<()> {
    if duration < MIN_INTERVAL || duration > Duration::from_secs(86_400) {
        return Err(usage(format!(
            "-t {}: duration must be 0.1 to 86400 seconds",
            duration.as_secs_f64()
        )));
    }
    if interval < MIN_INTERVAL {
        return Err(usage(format!(
            "-i {}: interval must be at least {} seconds",
            interval.as_secs_f64(),
            MIN_INTERVAL.as_secs_f64()
        )));
    }
    if interval > duration {
        return Err(usage(format!(
            "-i {}: interval must not exceed the duration (-t {})",
            interval.as_secs_f64(),
            duration.as_secs_f64()
        )));
    }
    // Bound the number of rows a test can make (and what the server keeps per interval).
    if duration.as_secs_f64() / interval.as_secs_f64() > 100_000.0 {
        return Err(usage("-t/-i: more than 100000 intervals; use a longer -i"));
    }
    Ok(())
}

fn validate_server_limits(args: &Args) -> Result<()> {
    if !(1..=MAX_STREAMS).contains(&args.max_streams) {
        return Err(usage(format!(
            "--max-streams {}: must be 1 to {MAX_STREAMS}",
            args.max_streams
        )));
    }
    if args.max_duration < MIN_INTERVAL {
        return Err(usage("--max-duration: must be at least 0.1 seconds"));
    }
    Ok(())
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
                &["--loopback", "-P", "257"],
                "-P 257: streams must be 1 to 256",
            ),
            (
                &["--loopback", "-l", "8"],
                "-l 8: block size must be 64 to 67108864 bytes (64 to 64M)",
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
                &["--loopback", "-t", "2", "-i", "3"],
                "-i 3: interval must not exceed the duration (-t 2)",
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
                &["--loopback", "-A", "fast"],
                "-A fast: expected auto, none, or a CPU list like 0,2-3 (optionally LOCAL/REMOTE)",
            ),
        ];
        for (argv, expected) in table {
            assert_eq!(usage_text(argv), *expected, "argv {argv:?}");
        }
    }

    #[test]
    fn accepts_a_typical_client() {
        let Mode::Client(c) =
            parse(&["-c", "h", "-P", "4", "-l", "64k", "-w", "4M", "-t", "3"]).unwrap()
        else {
            panic!("client expected");
        };
        assert_eq!(
            (c.streams, c.block_bytes, c.window_bytes),
            (4, 65536, Some(4 << 20))
        );
        assert_eq!(c.duration, Duration::from_secs(3));
        assert_eq!(c.affinity, Affinity::Auto);
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
