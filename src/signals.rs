//! Stop signals in the client modes (`-c`, `--loopback`, `compare`; `lab` takes them on its
//! own `lab-signals` thread and records them here too). SIGINT, SIGTERM and SIGHUP are
//! blocked in the main thread before any other thread starts, so every thread inherits the
//! mask and only the `signals` thread takes them. The first is recorded, process-wide;
//! `client::watch` sees it within one [`crate::timeouts::POLL`] and stops the test through the
//! ordinary failure path, so what was measured is printed, and then the process ends by
//! that signal (`sys::die_by`), so a shell loop around it stops too. A second signal ends
//! it at once, so a stuck run can still be stopped, unless it follows the first within
//! [`crate::timeouts::SIGNAL_REPEAT`] (`timeout` sends two). The server (`-s`) takes them the same way:
//! its running test stops and its client is told why, the log says it, then the process
//! ends by the signal ([`crate::config::ServerConfig::signals`]). Signals the process was
//! started ignoring (`nohup`, a background job)
//! stay ignored.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::timeouts;

/// The first stop signal taken, 0 until one is.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Files made when the run started and written when it ends (`--json-file`, `--plot`,
/// `--html`): a run that exits at once removes them rather than leave them empty.
static UNWRITTEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// `path` was made empty, to be written when the run ends.
pub(crate) fn unwritten(path: &Path) {
    UNWRITTEN.lock().push(path.to_path_buf());
}

/// `path` was written (or removed): exiting at once leaves it.
pub(crate) fn written(path: &Path) {
    UNWRITTEN.lock().retain(|p| p != path);
}

/// Blocks the stop signals in the calling thread (call it before any other thread
/// starts) and starts the `signals` thread that takes them.
pub(crate) fn take_over() -> Result<()> {
    crate::os::sys::block_stop_signals()
        .map_err(|e| Error::io("block SIGINT/SIGTERM/SIGHUP", e))?;
    crate::data::stream::spawn_named("signals".into(), || -> Result<()> {
        let sig = crate::os::sys::wait_stop_signal();
        record(sig);
        let sig = another(Instant::now(), None).unwrap_or(sig);
        stderrln!(
            "pinperf: a second stop signal ({}): exiting at once",
            crate::error::signal_name(sig)
        );
        for path in UNWRITTEN.lock().drain(..) {
            let _ = std::fs::remove_file(path);
        }
        crate::os::sys::die_by(sig);
    })?;
    Ok(())
}

/// Waits (at most `within`; `None`: for ever) for a stop signal that is not the first one
/// (taken at `first`) again: one within [`timeouts::SIGNAL_REPEAT`] of it is passed over.
pub(crate) fn another(first: Instant, within: Option<Duration>) -> Option<i32> {
    let deadline = within.map(|w| Instant::now() + w);
    loop {
        let sig = match deadline {
            None => crate::os::sys::wait_stop_signal(),
            Some(d) => {
                crate::os::sys::wait_stop_signal_for(d.saturating_duration_since(Instant::now()))?
            }
        };
        if first.elapsed() >= timeouts::SIGNAL_REPEAT {
            return Some(sig);
        }
    }
}

/// Records `sig` as the run's stop signal, unless one was recorded before.
pub(crate) fn record(sig: i32) {
    let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
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

/// The stop signal taken, for a server that takes them (`ours`:
/// [`crate::config::ServerConfig::signals`]; an in-process server leaves them to its client).
pub(crate) fn for_server(ours: bool) -> Option<i32> {
    ours.then(received).flatten()
}

/// A server's running test (started at `t0`) when a stop signal came for this server
/// (`ours`: [`crate::config::ServerConfig::signals`]): its error, which the client hears
/// as the server's word.
pub(crate) fn server_stopped(ours: bool, t0: Instant) -> Option<Error> {
    let sig = for_server(ours)?;
    Some(Error::Test(format!(
        "the server was stopped by {} ({:.2} s into the test)",
        crate::error::signal_name(sig),
        t0.elapsed().as_secs_f64()
    )))
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
