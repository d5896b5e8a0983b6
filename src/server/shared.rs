//! What the acceptor and the `control` threads share: the test slot (idle, starting,
//! running, finishing) and its guard, the admission counters, and the refusals a client
//! hears when the slot or its rate is taken.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::admission::{Handshakes, Refusal};
use super::allow::{self, Rate};
use super::relisten::{Listening, Relisten};
use super::serverlog;
use super::streams::Arrival;
use crate::config::ServerConfig;
use crate::error::{Error, Result};
use crate::timeouts;

/// Most concurrent "busy" answers (and, separately, clients waiting for a test that is
/// starting or finishing);
/// connections beyond it are closed without one.
pub(crate) const MAX_REFUSERS: usize = 16;

impl Shared {
    /// The acceptor is out of descriptors (`errno`): a test whose streams connect to the
    /// control port fails, naming the cause, rather than waiting for streams it dropped.
    pub(crate) fn out_of_fds(&self, errno: i32) {
        if let Some(test) = self.streams.lock().as_ref() {
            let _ = test.send(Err(std::io::Error::from_raw_os_error(errno)));
        }
    }
}

/// What the acceptor and the `control` threads share.
pub(crate) struct Shared {
    pub(crate) slot: Slot,
    /// Refusals being written (see [`MAX_REFUSERS`]).
    pub(crate) refusers: Arc<AtomicUsize>,
    /// Admitted tests waiting for one that is starting or finishing.
    pub(crate) waiters: AtomicUsize,
    pub(crate) pending: Handshakes,
    pub(crate) rate: Mutex<Rate>,
    /// Failures per source, and their lockouts.
    pub(crate) penalties: Mutex<allow::Penalties>,
    /// Live `control` threads (see [`super::acceptor::MAX_CONTROL_THREADS`]).
    pub(crate) threads: AtomicUsize,
    /// The running test whose stream connections open with its cookie.
    pub(crate) by_cookie: Mutex<Option<CookieStreams>>,
    /// Where the running pinperf test takes the data and echo connections that reach the
    /// control port while its streams connect (none at other times).
    pub(crate) streams: Mutex<Option<Sender<Arrival>>>,
    pub(crate) relisten: Relisten,
}

pub(crate) fn log_refused(
    cfg: &ServerConfig,
    peer: SocketAddr,
    user: Option<&str>,
    why: &str,
    reason: &str,
) {
    if !cfg.quiet {
        serverlog::refused(peer, user, why, reason);
    }
}

fn rate_refusal(peer: SocketAddr, max: u32, wait: Duration) -> String {
    format!(
        "too many tests from {}: at most {max} per minute (this server's --max-tests-per-minute); \
         try again in {} s",
        peer.ip(),
        wait.as_secs() + 1
    )
}

pub(crate) const IDLE: u8 = 0;

const RUNNING: u8 = 1;

pub(crate) const FINISHING: u8 = 2;

/// Taken, its streams not yet running: a client that went away while they connected
/// frees it within milliseconds, so a client arriving then waits for the outcome.
const STARTING: u8 = 3;

/// Frees the slot when dropped.
pub(crate) struct SlotGuard<'a>(&'a Slot);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Whether the server is free: idle, starting a test (its streams connect), running it,
/// or finishing it (results sent); while taken, when the test is due to end.
#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) state: AtomicU8,
    pub(crate) ends: Mutex<Option<Instant>>,
}

impl Slot {
    /// Takes the slot if idle for a test of `run_time`; otherwise returns the current state.
    pub(crate) fn try_take(&self, run_time: Duration) -> std::result::Result<(), u8> {
        self.state
            .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| *self.ends.lock() = Some(Instant::now() + run_time))
    }

    /// Waits while the current test is starting or finishing, then takes the slot.
    pub(crate) fn wait_take(
        &self,
        run_time: Duration,
        max: Duration,
    ) -> std::result::Result<(), u8> {
        let deadline = Instant::now() + max;
        loop {
            match self.try_take(run_time) {
                Err(STARTING | FINISHING) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => return other,
            }
        }
    }

    /// How long the running test still has, by its parameters.
    pub(crate) fn left(&self) -> Duration {
        self.ends.lock().map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }
}

impl Slot {
    /// The test's streams run (unless it is already finishing): a client arriving now is
    /// told "busy".
    pub(crate) fn running(&self) {
        let _ = self
            .state
            .compare_exchange(STARTING, RUNNING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The results are out: a client arriving now waits for the slot.
    pub(crate) fn finishing(&self) {
        self.state.store(FINISHING, Ordering::Release);
    }

    pub(crate) fn release(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

/// The reason a client hears when a test holds the slot (`state`): that its streams are
/// still connecting, its time left, or (past its planned end: draining, its results, or a
/// slow client) that it is ending.
fn busy_reason(state: u8, left: Duration) -> String {
    if state == STARTING {
        return "server busy: a test is starting (its streams have not all connected); try \
                again in a few seconds"
            .into();
    }
    match left.is_zero() {
        false => format!(
            "server busy: a test is running, about {:.0} s left; try again then",
            left.as_secs_f64().ceil()
        ),
        true => "server busy: a test is ending; try again in a few seconds".into(),
    }
}

/// The running test whose stream connections reach the control port opening with its
/// cookie, not a stream hello, and where they go, numbered in accept order.
pub(crate) struct CookieStreams {
    pub(crate) cookie: Vec<u8>,
    /// The test's client: stream connections from elsewhere are refused.
    pub(crate) client: SocketAddr,
    pub(crate) streams: Sender<(u64, TcpStream)>,
}

/// A connection the acceptor handed to a `control` thread, with what its session needs of
/// the server: the configuration, the shared state, and its handshake's entry and deadline.
pub(crate) struct Handover<'a> {
    pub(crate) cfg: &'a ServerConfig,
    pub(crate) shared: &'a Shared,
    pub(crate) peer: SocketAddr,
    /// Its handshake's entry in [`Shared::pending`].
    pub(crate) id: u64,
    pub(crate) deadline: Instant,
}

impl Handover<'_> {
    /// Ends the handshake: false when the acceptor cut it first (and logged why).
    pub(crate) fn claim(&self) -> bool {
        self.shared.pending.remove(self.id)
    }

    /// Logs that this connection was refused, `why` as the log's key.
    pub(crate) fn refused(&self, user: Option<&str>, why: &str, reason: &str) {
        log_refused(self.cfg, self.peer, user, why, reason);
    }

    /// The slot for an admitted test, whichever protocol its client speaks: free, or soon free
    /// (the last test is saying goodbye, or its streams are still connecting and it may fail:
    /// a shell loop's next run waits for the outcome, as many at once as busy answers; not at
    /// a `-1` server, whose one test is taken), else "busy" with the time left; then `--max-tests-per-minute`,
    /// counted here, atomically (several handshakes from one source may have passed the
    /// acceptor's check at once). The guard frees the slot however the session ends, a panic
    /// included: a server that says "busy" forever after one bad client is a server nobody
    /// can leave running.
    pub(crate) fn take_slot(
        &self,
        run_time: Duration,
    ) -> std::result::Result<SlotGuard<'_>, Refusal> {
        let (shared, cfg, peer) = (self.shared, self.cfg, self.peer);
        let refusal = |why, reason: String| Refusal::plain(why, reason, None);
        if let Some(sig) = crate::signals::for_server(cfg.signals) {
            return Err(refusal(
                "stopping",
                format!(
                    "the server is stopping ({}); try again when it is back",
                    crate::error::signal_name(sig)
                ),
            ));
        }
        // A source over its rate never takes the slot, not even for a moment (a client then
        // would be told "busy" for the refused test's -t).
        if let Some(max) = cfg.max_tests_per_minute
            && let Err(wait) = shared.rate.lock().check(peer.ip(), max, Instant::now())
        {
            return Err(refusal("rate", rate_refusal(peer, max, wait)));
        }
        let taken = match shared.slot.try_take(run_time) {
            Err(s @ (STARTING | FINISHING)) if !cfg.one_off => {
                let got = match shared.waiters.fetch_add(1, Ordering::AcqRel) < MAX_REFUSERS {
                    true => shared.slot.wait_take(run_time, timeouts::FINISHING),
                    false => Err(s),
                };
                shared.waiters.fetch_sub(1, Ordering::AcqRel);
                got
            }
            other => other,
        };
        if let Err(state) = taken {
            return Err(refusal("busy", busy_reason(state, shared.slot.left())));
        }
        let guard = SlotGuard(&shared.slot);
        if let Some(max) = cfg.max_tests_per_minute
            && let Err(wait) = shared.rate.lock().take(peer.ip(), max, Instant::now())
        {
            return Err(refusal("rate", rate_refusal(peer, max, wait)));
        }
        Ok(guard)
    }

    pub(crate) fn slot(&self) -> &Slot {
        &self.shared.slot
    }

    /// Counts a failure against the connection's source: the lockout it now begins, if any.
    pub(crate) fn penalize(&self) -> Option<(Duration, u32)> {
        self.shared
            .penalties
            .lock()
            .failed(self.peer.ip(), Instant::now())
    }

    /// The test's result as the log and the client hear it: one whose client took the
    /// slot and connected no streams (or left while they connected) counts against its
    /// source on a public server, and the error then says the lockout it began. Anything
    /// else (a refusal of this server's, its own failure) does not.
    pub(crate) fn judged<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| {
            let Error::Abandoned(why) = e else {
                return e;
            };
            match self.cfg.public().then(|| self.penalize()).flatten() {
                Some(lockout) => {
                    Error::Abandoned(format!("{why}; {}", allow::lockout_words(lockout)))
                }
                None => Error::Abandoned(why),
            }
        })
    }

    /// A test's streams connect to the control port: listened on with its window and MSS
    /// (see [`Relisten`]); the window is set on each stream again should that fail.
    pub(crate) fn listen_for(&self, listening: Listening) {
        if let Err(e) = self.shared.relisten.ensure(listening) {
            log!(self.cfg.quiet, "pinperf: {e}");
        }
    }

    /// -M's MSS on the control port was for the test's streams only: the next client's
    /// control connection gets the path's (the window stays, see [`Relisten`]).
    pub(crate) fn listen_after(&self, listening: Listening) {
        if listening.mss.is_some() {
            self.listen_for(Listening {
                mss: None,
                ..listening
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_server_says_a_test_past_its_end_is_ending_not_0_s_left() {
        assert!(busy_reason(RUNNING, Duration::from_millis(2300)).contains("about 3 s left"));
        let past = busy_reason(RUNNING, Duration::ZERO);
        assert!(
            past.contains("a test is ending") && !past.contains("0 s left"),
            "{past}"
        );
        // A setup that outlasted a waiter's patience: not "running, about N s left".
        let starting = busy_reason(STARTING, Duration::from_secs(9));
        assert!(starting.contains("a test is starting"), "{starting}");
    }
}
