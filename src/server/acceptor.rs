//! The acceptor: the server's calling thread, which takes each connection to the control
//! port, checks its address, and hands it to a `control` thread for its handshake; it
//! also listens again when a test asks ([`super::relisten`]), and keeps going out of
//! file descriptors.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::admission::Handshakes;
use super::allow::{self, Rate};
use super::control::session;
use super::relisten::{Ask, Listening, Relisten, relisten};
use super::serverlog;
use super::shared::{Handover, IDLE, MAX_REFUSERS, Shared, Slot, log_refused};
use super::{Server, canonical};
use crate::data::stream::spawn_named;
use crate::error::{Error, IoContext, Result};
use crate::os::net::{self, Family};
use crate::timeouts;
use crate::wire::{self, ControlMsg};

/// How long the acceptor pauses when `accept()` fails (out of file descriptors, above all)
/// and it has no spare descriptor left to refuse the client with: a tenth of
/// [`timeouts::BUSY_ANSWER`], the longest a refusal holds a descriptor, so a freed one is
/// noticed soon while the failing `accept()` costs no measurable CPU.
pub(super) const ACCEPT_RETRY: Duration =
    Duration::from_millis(timeouts::BUSY_ANSWER.as_millis() as u64 / 10);

impl Server {
    /// Serves tests until killed (or one test with `-1`, whose result it returns).
    ///
    /// The acceptor (this thread) checks `--allow` on each new connection's address
    /// (`--max-tests-per-minute` counts tests, not connections: an iperf3 test's streams
    /// connect here too, so it is checked when a test is admitted), registers it in [`Handshakes`] (at most
    /// [`MAX_HANDSHAKES`]; when full, the oldest is cut) and hands it to a `control`
    /// thread for its handshake. Between accepts it cuts the handshakes past their
    /// deadline. Only an admitted test touches the slot.
    pub fn run(self) -> Result<()> {
        let cfg = Arc::new(self.cfg);
        let (asks_tx, asks) = crossbeam_channel::unbounded();
        let (wake_rx, wake) = self.wake;
        let shared = Arc::new(Shared {
            slot: Slot::default(),
            refusers: Arc::new(AtomicUsize::new(0)),
            waiters: AtomicUsize::new(0),
            pending: Handshakes::new(MAX_HANDSHAKES),
            rate: Mutex::new(Rate::default()),
            penalties: Mutex::new(allow::Penalties::default()),
            threads: AtomicUsize::new(0),
            by_cookie: Mutex::new(None),
            streams: Mutex::new(None),
            relisten: Relisten {
                asks: asks_tx,
                wake,
            },
        });
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<()>>(1);
        let done_tx = cfg.one_off.then_some(done_tx);
        let mut listener = self.listener;
        listener
            .set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the control port".into())?;
        let mut spare = self.spare;
        // While out of descriptors: how many clients were refused for it.
        let mut fd_burst: Option<u64> = None;
        let mut signalled: Option<Instant> = None;
        // What the control port's listener sets on the sockets it accepts (see
        // [`Relisten`]), and since when a request to change it waits.
        let mut listening = Listening::default();
        let mut asked_at: Option<Instant> = None;
        loop {
            // Before a one-off test's result: a signal that stopped it ends the process
            // by the signal, with the log's last line.
            if let Some(sig) = crate::signals::for_server(cfg.signals) {
                // The running test sees it too, stops and tells its client; the process
                // ends once its session has logged and freed the slot (or after a grace:
                // a test in its last phase does not look). No new test is admitted.
                let since = *signalled.get_or_insert_with(Instant::now);
                if shared.slot.state.load(Ordering::Acquire) == IDLE
                    || since.elapsed() > timeouts::SIGNAL_GRACE
                {
                    log!(
                        cfg.quiet,
                        "pinperf: server stopped by {}",
                        crate::error::signal_name(sig)
                    );
                    crate::os::sys::die_by(sig);
                }
            }
            if let Ok(result) = done_rx.try_recv() {
                return result;
            }
            for cut in shared.pending.cut_expired(Instant::now()) {
                log_refused(&cfg, cut.peer, None, "handshake", &cut.reason);
            }
            if spare.is_none() {
                spare = open_spare();
            }
            let mut fds = [
                crate::os::sys::pollfd(listener.as_raw_fd(), libc::POLLIN),
                crate::os::sys::pollfd(wake_rx.as_raw_fd(), libc::POLLIN),
            ];
            match crate::os::sys::poll(&mut fds, timeouts::POLL.as_millis() as i32) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("poll the control port", e)),
            }
            // Connections waiting are accepted before the listener closes (its close would
            // reset them), for a POLL at most: a backlog that never empties does not hold a
            // test's streams off.
            if fds[1].revents == 0 {
                asked_at = None;
            } else if fds[0].revents == 0
                || asked_at.get_or_insert_with(Instant::now).elapsed() > timeouts::POLL
            {
                asked_at = None;
                let _ = (&wake_rx).read(&mut [0u8; 64]);
                let asks: Vec<Ask> = asks.try_iter().collect();
                if let Some(&(wanted, _)) = asks.last() {
                    let mut outcome = match wanted.window == listening.window {
                        true => Ok(()),
                        false => {
                            let v6_only = cfg.family == Family::V6;
                            let outcome;
                            (listener, listening.window, outcome) =
                                relisten(listener, v6_only, listening.window, wanted.window)?;
                            listening.mss = None;
                            outcome.map_err(|e| e.to_string())
                        }
                    };
                    if wanted.mss != listening.mss {
                        match net::set_mss(&socket2::SockRef::from(&listener), wanted.mss) {
                            Ok(()) => listening.mss = wanted.mss,
                            Err(e) => outcome = outcome.and(Err(e.to_string())),
                        }
                    }
                    for (_, reply) in asks {
                        let _ = reply.send(outcome.clone());
                    }
                }
                continue;
            }
            if fds[0].revents == 0 {
                continue;
            }
            let accepted = match listener.accept() {
                Ok(pair) => Some(pair),
                Err(e) if crate::data::stream::is_timeout(&e) => None,
                Err(e) if out_of_fds(&e) => {
                    shared.out_of_fds(e.raw_os_error().unwrap_or(libc::EMFILE));
                    // The spare's descriptor lets the limit be read, then the next client in
                    // to hear why it is refused.
                    let freed = spare.take().map(drop).is_some();
                    if fd_burst.is_none() {
                        fd_burst = Some(0);
                        log!(
                            cfg.quiet,
                            "pinperf: out of file descriptors (accept on the control port: {e}); \
                             refusing clients until some are free; raise the limit with \
                             `ulimit -n` (now {})",
                            fd_limit()
                        );
                    }
                    if freed {
                        listener.accept().ok()
                    } else {
                        // A refusal holds the spare: wait for any descriptor to close.
                        std::thread::sleep(ACCEPT_RETRY);
                        None
                    }
                }
                Err(e) => {
                    log!(cfg.quiet, "pinperf: accept on the control port: {e}");
                    std::thread::sleep(ACCEPT_RETRY);
                    None
                }
            };
            let Some((stream, peer)) = accepted else {
                continue;
            };
            let peer = canonical(peer);
            if !allow::allowed(&cfg.allow, peer.ip()) {
                // Closed at once: no byte is read or written for an address not allowed.
                drop(stream);
                log_refused(&cfg, peer, None, "allow", "address not in --allow");
                continue;
            }
            let now = Instant::now();
            let closed = {
                let mut penalties = shared.penalties.lock();
                match penalties.locked(peer.ip(), now) {
                    true => None,
                    false => Some(penalties.closed_while_locked(peer.ip(), now)),
                }
            };
            match closed {
                // Locked out: closed unanswered, counted, said once the lockout is over.
                None => continue,
                Some(Some(n)) => log!(
                    cfg.quiet,
                    "pinperf: {n} connection(s) from {} closed unanswered while it was locked out",
                    peer.ip()
                ),
                Some(None) => {}
            }
            if let Some(refused) = fd_burst {
                if spare.is_none() {
                    spare = open_spare();
                }
                if spare.is_none() {
                    fd_burst = Some(refused + 1);
                    let reason = format!(
                        "server out of file descriptors (its `ulimit -n` is {}); try again later",
                        fd_limit()
                    );
                    // Counted, not logged one by one: the burst's two lines sum them up.
                    refuse_with(stream, reason, &shared.refusers);
                    continue;
                }
                fd_burst = None;
                log!(
                    cfg.quiet,
                    "pinperf: file descriptors are free again ({refused} client(s) refused meanwhile)"
                );
            }
            if shared.threads.load(Ordering::Acquire) >= MAX_CONTROL_THREADS {
                // Cut handshakes whose threads have not yet ended: a hard bound on threads.
                drop(stream);
                log_refused(
                    &cfg,
                    peer,
                    None,
                    "handshake",
                    "too many connections at once",
                );
                continue;
            }
            let rtt = net::rtt(&stream);
            let Some((id, cut)) = shared.pending.add(&stream, peer, timeouts::admission(rtt))
            else {
                // No descriptor for the handshake's own handle: closed unanswered.
                shared.out_of_fds(libc::EMFILE);
                continue;
            };
            if let Some(cut) = cut {
                log_refused(&cfg, cut.peer, None, "handshake", &cut.reason);
            }
            let (cfg2, shared2, done2) = (Arc::clone(&cfg), Arc::clone(&shared), done_tx.clone());
            shared.threads.fetch_add(1, Ordering::AcqRel);
            let control = spawn_named("control".into(), move || {
                let deadline = shared2.pending.deadline(id).unwrap_or_else(Instant::now);
                let (cfg, shared) = (&*cfg2, &*shared2);
                let ho = Handover {
                    cfg,
                    shared,
                    peer,
                    id,
                    deadline,
                };
                let result = session(stream, &ho);
                shared2.threads.fetch_sub(1, Ordering::AcqRel);
                match (done2, result) {
                    // `-1`: the admitted test's result is the server's.
                    (Some(done), Some(result)) => {
                        let _ = done.send(result);
                        Ok(())
                    }
                    (_, result) => result.unwrap_or(Ok(())),
                }
            });
            if let Err(e) = control {
                shared.threads.fetch_sub(1, Ordering::AcqRel);
                shared.pending.remove(id);
                log!(cfg.quiet, "pinperf: {e}");
            }
        }
    }
}

/// Most handshakes in progress at once (OpenSSH's `MaxStartups`): a new connection beyond
/// it cuts the oldest, so idle or slow peers cannot keep a real client out for long, and
/// the threads and descriptors they cost stay bounded.
pub(super) const MAX_HANDSHAKES: usize = 64;

/// Most `control` threads at once: the handshakes, those cut but not yet ended, and the
/// running test's. Beyond it a new connection is closed unanswered.
pub(super) const MAX_CONTROL_THREADS: usize = 2 * MAX_HANDSHAKES;

/// Answers a connection the server cannot serve: preamble + Refuse with `reason`, then
/// close after draining what the client sent (so the refusal is not lost to a reset).
/// The caller logs it.
pub(super) fn refuse_with(mut stream: TcpStream, reason: String, refusers: &Arc<AtomicUsize>) {
    if refusers.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSERS {
        refusers.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let counter = Arc::clone(refusers);
    let spawned = std::thread::Builder::new()
        .name("refuse".into())
        .spawn(move || {
            // Answer and drain within BUSY_ANSWER in all, even from a client that trickles.
            let deadline = Instant::now() + timeouts::BUSY_ANSWER;
            let _ = stream.set_write_timeout(Some(timeouts::BUSY_ANSWER));
            let mut msg = wire::PREAMBLE.to_vec();
            msg.extend(wire::encode(&ControlMsg::Refuse { reason }));
            if stream.write_all(&msg).is_ok() {
                let _ = stream.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 512];
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                        break;
                    }
                    if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
                        break;
                    }
                }
            }
            counter.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        // The closure, and the decrement in it, never ran; the connection closes as it drops.
        refusers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// True when an `accept()` failed for want of file descriptors (per process or system).
pub(super) fn out_of_fds(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The spare descriptor kept for refusing clients while out of descriptors.
pub(super) fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// This process's soft limit on open files (`ulimit -n`) from `/proc/self/limits`, or,
/// when that cannot be opened (out of descriptors), the value last read.
pub(super) fn fd_limit() -> String {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let read = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<u64>().ok()
        });
    match read.or_else(|| Some(LAST.load(Ordering::Relaxed)).filter(|&n| n > 0)) {
        Some(n) => {
            LAST.store(n, Ordering::Relaxed);
            n.to_string()
        }
        None => "unknown".into(),
    }
}
