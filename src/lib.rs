//! pinperf: a TCP throughput tester with one pinned OS thread per stream on both ends,
//! receiver-truth interval rows, and thrulay-shaped text output.
//!
//! Threads: `stream-N` (one per stream, each side), `reporter` (one per side), `control`
//! (the server's handshake with one connection, then its test), `server` (the in-process server of `--loopback`),
//! `signals` (client modes: takes SIGINT/SIGTERM/SIGHUP, see [`signals`]).
//! `unsafe` is denied here and allowed only in `sys`. Linux only: the socket options,
//! namespaces and signal handling it measures with have no portable equivalent.

#[cfg(not(target_os = "linux"))]
compile_error!(
    "pinperf runs on Linux only (TCP_INFO, SO_*BUFFORCE, namespaces, signalfd-style signal masks)"
);

/// `eprintln!` that loses the line instead of panicking when stderr is gone (a closed pipe:
/// `pinperf … 2>&1 | head -1`, a log reader that left): a warning never ends a test or a
/// server. Each line goes out in one `write` of the locked stderr.
macro_rules! stderrln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

pub(crate) mod choices;
pub(crate) mod cli;
pub(crate) mod client;
pub mod commands;
pub(crate) mod config;
pub mod data;
pub mod error;
pub(crate) mod iperf3;
pub(crate) mod os;
pub mod report;
pub mod server;
pub(crate) mod signals;
pub(crate) mod timeouts;
pub(crate) mod units;
pub mod wire;

use clap::{CommandFactory, FromArgMatches};

pub use error::{Error, Result};

/// The stop signal (SIGINT, SIGTERM, SIGHUP) this run took, if any.
pub fn stop_signal() -> Option<i32> {
    signals::received()
}

/// Ends the process by the stop signal that interrupted a run, after it printed what it
/// measured (see `sys::die_by`: a shell loop around pinperf stops too).
pub fn die_by_signal(sig: i32) -> ! {
    os::sys::die_by(sig)
}

/// Parses the process's arguments and runs the chosen mode. Usage errors from clap exit 2
/// (clap prints them); validation errors come back as [`Error::Usage`].
pub fn run_from_env() -> Result<()> {
    let mut argv: Vec<String> = std::env::args().collect();
    // Run as `iperf3`, or as `pinperf iperf3 ARGS`: iperf3's command line.
    let named = argv
        .first()
        .is_some_and(|a| iperf3::personality::is_iperf3_name(a));
    let personality = named || argv.get(1).is_some_and(|a| a == "iperf3");
    if personality {
        let rest = &argv[if named { 1 } else { 2 }..];
        if let Some(text) = iperf3::personality::version(rest) {
            use std::io::Write as _;
            return std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|_| Error::OutputClosed);
        }
        argv = iperf3::personality::native_argv(rest).map_err(Error::Usage)?;
    }
    let argv = cli::attach_signed_values(argv);
    let test_run = argv.get(1).is_some_and(|a| a.starts_with('-'))
        && !argv.iter().any(|a| a == "-s" || a == "--server");
    let detached = || test_run.then(|| cli::detached_method(&argv[1..])).flatten();
    let unit = || cli::format_unit(&argv[1..]);
    if let Some(msg) = cli::not_yet(&argv[1..]).or_else(unit).or_else(detached) {
        return Err(Error::Usage(msg));
    }
    let matches = cli::Args::command().get_matches_from(argv);
    if let Some(msg) = cli::wrong_mode(&matches) {
        return Err(Error::Usage(msg));
    }
    let args = cli::Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Said to an iperf3 user of pinperf's own flags; the personality has converted them.
    if let Some(msg) = cli::iperf3_meaning(&args).filter(|_| !personality) {
        return Err(Error::Usage(msg));
    }
    run(&args)
}

/// Runs parsed arguments.
pub(crate) fn run(args: &cli::Args) -> Result<()> {
    if let Some(cli::Command::Compare(c)) = &args.command {
        signals::take_over()?;
        return commands::compare::run(c);
    }
    if let Some(cli::Command::Diagnose(d)) = &args.command {
        signals::take_over()?;
        return commands::diagnose::run(d);
    }
    match &args.command {
        Some(cli::Command::Plot(a)) => return commands::render::run_plot(a),
        Some(cli::Command::Report(a)) => return commands::render::run_report(a),
        Some(cli::Command::Completions(a)) => return commands::render::run_completions(a),
        Some(cli::Command::Man) => return commands::render::run_man(),
        _ => {}
    }
    if let Some(cli::Command::Lab(l)) = &args.command {
        return commands::lab::run(l);
    }
    match config::from_args(args)? {
        config::Mode::Server(cfg) => server::serve(*cfg),
        config::Mode::Client(cfg) => {
            signals::take_over()?;
            commands::render::run_client(*cfg, &args.output)
        }
    }
}
