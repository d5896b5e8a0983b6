//! Typed errors. Every failure below the CLI says what failed and where; `main` prints one
//! line and maps the kind to an exit code (2 for usage, 128 + the signal for a run stopped
//! by SIGINT/SIGTERM/SIGHUP, 1 for everything else).

use std::io;
use std::net::SocketAddr;

/// Everything that can stop a pinperf run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line is wrong; the message names the flag, the value and the fix.
    #[error("{0}")]
    Usage(String),
    /// A system call failed: `op` says which and on what, e.g. "connect to 10.0.0.2:5301".
    #[error("{op}: {source}")]
    Io { op: String, source: io::Error },
    /// The server said no, with its reason (busy, a limit, a version mismatch).
    #[error("server {peer} refused the test: {reason}")]
    Refused { peer: SocketAddr, reason: String },
    /// The peer sent something that is not the pinperf protocol, or broke its rules.
    #[error("protocol error with {peer}: {what}")]
    Protocol { peer: SocketAddr, what: String },
    /// The test ran but failed (a stream died, the peer vanished, a deadline passed).
    #[error("{0}")]
    Test(String),
    /// The server cut a running test for what its client did, not what it asked: past its
    /// end and drain, or over `--max-rate`. Logged among refusals.
    #[error("{0}")]
    Exceeded(String),
    /// A client took the test slot and connected no streams (or left while they
    /// connected): counted against its source by a server.
    #[error("{0}")]
    Abandoned(String),
    /// This part (a stream) stopped because the test was called off: never a cause.
    #[error("{0}: stopped because the test was aborted")]
    Aborted(String),
    /// Nobody reads the output any more (a closed pipe, `| head`): stop quietly.
    #[error("the output was closed")]
    OutputClosed,
    /// A stop signal (SIGINT, SIGTERM, SIGHUP) ended the run; `when` says at what point,
    /// e.g. "2.5 s into the test". What was measured before it has been printed.
    #[error("interrupted by {} {when}", signal_name(*signal))]
    Interrupted { signal: i32, when: String },
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// An I/O error that says the other end closed or reset the connection.
pub fn closed_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
    )
}

impl Error {
    /// A test's failure while its streams connected, as [`Error::Abandoned`] (an error of
    /// this end's own, a socket call, stays what it is).
    pub fn abandoned(self) -> Error {
        match self {
            Error::Test(msg) => Error::Abandoned(msg),
            e => e,
        }
    }

    /// Process exit code: 2 for usage, 128 + the signal when one stopped the run (130 for
    /// SIGINT, as a shell reports a process it killed), 1 for a failed test.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::OutputClosed => 0,
            Error::Interrupted { signal, .. } => u8::try_from(128 + signal).unwrap_or(1),
            _ => 1,
        }
    }

    /// The other end closed or reset the connection this failed on: a consequence of
    /// something there (it gave up, failed, or was stopped), not a cause here.
    pub fn peer_closed(&self) -> bool {
        matches!(self, Error::Io { source, .. } if closed_by_peer(source))
    }

    /// Builds an [`Error::Io`] naming the operation.
    pub fn io(op: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            op: op.into(),
            source,
        }
    }
}

/// `SIGINT`, `SIGTERM`, `SIGHUP`, or `signal N` for any other.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// Attaches an operation name to an `io::Result`.
pub trait IoContext<T> {
    /// Maps the error into [`Error::Io`] with `op` computed lazily.
    fn op(self, op: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn op(self, op: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::io(op(), source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_exits_128_plus_its_number_and_says_which() {
        for (signal, code, text) in [
            (
                libc::SIGINT,
                130,
                "interrupted by SIGINT 2.5 s into the test",
            ),
            (
                libc::SIGTERM,
                143,
                "interrupted by SIGTERM 2.5 s into the test",
            ),
            (
                libc::SIGHUP,
                129,
                "interrupted by SIGHUP 2.5 s into the test",
            ),
        ] {
            let e = Error::Interrupted {
                signal,
                when: "2.5 s into the test".into(),
            };
            assert_eq!(e.exit_code(), code);
            assert_eq!(e.to_string(), text);
        }
        assert_eq!(signal_name(10), "signal 10");
    }
}
