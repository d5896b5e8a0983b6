//! pinperf: a TCP throughput tester with one pinned OS thread per stream on both ends,
//! receiver-truth interval rows, and thrulay-shaped text output.
//!
//! Threads: `stream-N` (one per stream, each side), `reporter` (one per side), `control`
//! (the server's test session), `server` (the in-process server of `--loopback`),
//! `signals` (client modes: takes SIGINT/SIGTERM/SIGHUP, see [`signals`]).
//! `unsafe` is denied here and allowed only in `sys`.

pub(crate) mod choices;
pub(crate) mod cli;
pub(crate) mod client;
pub mod compare;
pub(crate) mod config;
pub(crate) mod cpu;
pub mod error;
pub(crate) mod kstat;
#[cfg(target_os = "linux")]
pub(crate) mod lab;
pub(crate) mod net;
pub(crate) mod netinfo;
pub(crate) mod params;
pub(crate) mod pin;
pub mod protocol;
pub mod report;
pub(crate) mod server;
pub mod stream;
pub(crate) mod sys;
pub(crate) mod timeouts;
pub(crate) mod units;

use clap::Parser;

pub use error::{Error, Result};

/// The stop signal (SIGINT, SIGTERM, SIGHUP) this run took, if any.
pub fn stop_signal() -> Option<i32> {
    signals::received()
}

/// Ends the process by the stop signal that interrupted a run, after it printed what it
/// measured (see `sys::die_by`: a shell loop around pinperf stops too).
pub fn die_by_signal(sig: i32) -> ! {
    sys::die_by(sig)
}

/// Parses the process's arguments and runs the chosen mode. Usage errors from clap exit 2
/// (clap prints them); validation errors come back as [`Error::Usage`].
pub fn run_from_env() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(msg) = cli::not_yet(&argv[1..]) {
        return Err(Error::Usage(msg));
    }
    run(&cli::Args::parse_from(argv))
}

/// Runs parsed arguments.
pub(crate) fn run(args: &cli::Args) -> Result<()> {
    if let Some(cli::Command::Compare(c)) = &args.command {
        signals::take_over()?;
        return compare::run(c);
    }
    if let Some(cli::Command::Lab(l)) = &args.command {
        #[cfg(target_os = "linux")]
        return lab::run(l);
        #[cfg(not(target_os = "linux"))]
        return Err(Error::Usage(format!(
            "pinperf lab needs Linux (network namespaces, TUN); got {l:?}"
        )));
    }
    match config::from_args(args)? {
        config::Mode::Server(cfg) => server::serve(cfg),
        config::Mode::Client(cfg) => {
            signals::take_over()?;
            client::run(cfg)
        }
    }
}

/// Stop signals in the client modes (`-c`, `--loopback`, `compare`; `lab` takes them on its
/// own `lab-signals` thread and records them here too). SIGINT, SIGTERM and SIGHUP are
/// blocked in the main thread before any other thread starts, so every thread inherits the
/// mask and only the `signals` thread takes them. The first is recorded, process-wide;
/// `client::watch` sees it within one poll (100 ms) and stops the test through the
/// ordinary failure path, so what was measured is printed and the run exits 128 + the
/// signal. A second signal exits at once with 128 + its number: a stuck run can still be
/// stopped. The server (`-s`) keeps the default: a signal ends it.
pub(crate) mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::time::{Duration, Instant};

    use crate::error::{Error, Result};

    /// The first stop signal taken, 0 until one is.
    static RECEIVED: AtomicI32 = AtomicI32::new(0);

    /// Blocks the stop signals in the calling thread (call it before any other thread
    /// starts) and starts the `signals` thread that takes them.
    #[cfg(target_os = "linux")]
    pub(crate) fn take_over() -> Result<()> {
        crate::sys::block_stop_signals()
            .map_err(|e| Error::io("block SIGINT/SIGTERM/SIGHUP", e))?;
        crate::stream::spawn_named("signals".into(), || -> Result<()> {
            loop {
                let sig = crate::sys::wait_stop_signal();
                if !record(sig) {
                    eprintln!(
                        "pinperf: a second stop signal ({}): exiting at once",
                        crate::error::signal_name(sig)
                    );
                    crate::sys::die_by(sig);
                }
            }
        })?;
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn take_over() -> Result<()> {
        Ok(())
    }

    /// Records `sig` as the run's stop signal; false when one was recorded before.
    pub(crate) fn record(sig: i32) -> bool {
        RECEIVED
            .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The stop signal taken so far, if any.
    pub(crate) fn received() -> Option<i32> {
        match RECEIVED.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// The error of a run stopped by the recorded signal `when` ("before the test started").
    pub(crate) fn interrupted(signal: i32, when: impl Into<String>) -> Error {
        Error::Interrupted {
            signal,
            when: when.into(),
        }
    }

    /// Sleeps `pause` unless a stop signal comes first (checked every 20 ms); returns it.
    pub(crate) fn sleep(pause: Duration) -> Option<i32> {
        let until = Instant::now() + pause;
        loop {
            if let Some(sig) = received() {
                return Some(sig);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }
}
