//! The acceptor: the server's calling thread, which takes each connection to the control
//! port, checks its address, and hands it to a `control` thread for its handshake; it
//! also listens again when a test asks ([`super::relisten`]), and keeps going out of
//! file descriptors.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::admission::Handshakes;
use super::allow::{self, Rate};
use super::control::session;
use super::relisten::{Ask, Listening, Relisten, relisten};
use super::serverlog;
use super::shared::{Handover, IDLE, MAX_REFUSERS, Shared, Slot, log_refused};
use super::{Server, canonical};
use crate::config::ServerConfig;
use crate::data::stream::spawn_named;
use crate::error::{Error, IoContext, Result};
use crate::os::net::{self, Family};
use crate::timeouts;
use crate::wire::{self, ControlMsg};

/// How long the acceptor pauses when `accept()` fails (out of file descriptors, above all)
/// and it has no spare descriptor left to refuse the client with: a tenth of
/// [`timeouts::BUSY_ANSWER`], the longest a refusal holds a descriptor, so a freed one is
/// noticed soon while the failing `accept()` costs no measurable CPU.
const ACCEPT_RETRY: Duration = Duration::from_millis(timeouts::BUSY_ANSWER.as_millis() as u64 / 10);

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
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<()>>(1);
        let (mut acceptor, mut listener) = Acceptor::new(self, done_tx)?;
        loop {
            acceptor.stop_if_signalled();
            if let Ok(result) = done_rx.try_recv() {
                return result;
            }
            if acceptor.idle_too_long() {
                return Ok(());
            }
            for cut in acceptor.shared.pending.cut_expired(Instant::now()) {
                log_refused(&acceptor.cfg, cut.peer, None, "handshake", &cut.reason);
            }
            if acceptor.spare.is_none() {
                acceptor.spare = open_spare();
            }
            let Some((incoming, asked)) = acceptor.poll(&listener)? else {
                continue;
            };
            if acceptor.asking(incoming, asked) {
                listener = acceptor.answer(listener)?;
                continue;
            }
            if !incoming {
                continue;
            }
            if let Some((stream, peer)) = acceptor.accept(&listener) {
                acceptor.admit(stream, canonical(peer));
            }
        }
    }
}

/// The acceptor's state between polls, but its listener (a new one listens again).
struct Acceptor {
    cfg: Arc<ServerConfig>,
    shared: Arc<Shared>,
    /// The read end of [`Relisten`]'s wake-up pair, and its requests.
    wake: UnixStream,
    asks: Receiver<Ask>,
    /// Where a `-1` server's admitted test sends its result.
    done: Option<Sender<Result<()>>>,
    spare: Option<std::fs::File>,
    /// While out of descriptors: how many clients were refused for it.
    fd_burst: Option<u64>,
    signalled: Option<Instant>,
    /// Since when no test has held the slot (for `--idle-timeout`).
    idle_since: Instant,
    /// What the control port's listener sets on the sockets it accepts (see
    /// [`Relisten`]), and since when a request to change it waits.
    listening: Listening,
    asked_at: Option<Instant>,
}

impl Acceptor {
    fn new(server: Server, done: Sender<Result<()>>) -> Result<(Acceptor, TcpListener)> {
        let (asks_tx, asks) = crossbeam_channel::unbounded();
        let (wake_rx, wake) = server.wake;
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
        server
            .listener
            .set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the control port".into())?;
        let acceptor = Acceptor {
            done: server.cfg.one_off.then_some(done),
            cfg: Arc::new(server.cfg),
            shared,
            wake: wake_rx,
            asks,
            spare: server.spare,
            fd_burst: None,
            signalled: None,
            idle_since: Instant::now(),
            listening: Listening::default(),
            asked_at: None,
        };
        if acceptor.cfg.idle_timeout.is_some() && acceptor.done.is_none() {
            log!(
                acceptor.cfg.quiet,
                "pinperf: --idle-timeout ignored without -1: a serving pinperf server has no \
                 state to reset (iperf3 restarts its own); it serves on"
            );
        }
        Ok((acceptor, server.listener))
    }

    /// Before a one-off test's result: a signal that stopped it ends the process by the
    /// signal, with the log's last line. The running test sees it too, stops and tells its
    /// client; the process ends once its session has logged and freed the slot (or after
    /// a grace: a test in its last phase does not look). No new test is admitted.
    fn stop_if_signalled(&mut self) {
        let Some(sig) = crate::signals::for_server(self.cfg.signals) else {
            return;
        };
        let since = *self.signalled.get_or_insert_with(Instant::now);
        if self.shared.slot.state.load(Ordering::Acquire) == IDLE
            || since.elapsed() > timeouts::SIGNAL_GRACE
        {
            let name = crate::error::signal_name(sig);
            log!(self.cfg.quiet, "pinperf: server stopped by {name}");
            crate::os::sys::die_by(sig);
        }
    }

    /// A `-1` server with `--idle-timeout` that no test has reached for that long: it
    /// says so and ends (status 0), as iperf3's does.
    fn idle_too_long(&mut self) -> bool {
        let Some(limit) = self.cfg.idle_timeout.filter(|_| self.done.is_some()) else {
            return false;
        };
        if self.shared.slot.state.load(Ordering::Acquire) != IDLE {
            self.idle_since = Instant::now();
            return false;
        }
        let idle = self.idle_since.elapsed() > limit;
        if idle {
            log!(
                self.cfg.quiet,
                "pinperf: no test for {} s (--idle-timeout): server stopped",
                limit.as_secs_f64()
            );
        }
        idle
    }

    /// Waits a [`timeouts::POLL`] at most: whether a connection and a request to listen
    /// again wait, or `None` when the poll was interrupted.
    fn poll(&self, listener: &TcpListener) -> Result<Option<(bool, bool)>> {
        let mut fds = [
            crate::os::sys::pollfd(listener.as_raw_fd(), libc::POLLIN),
            crate::os::sys::pollfd(self.wake.as_raw_fd(), libc::POLLIN),
        ];
        match crate::os::sys::poll(&mut fds, timeouts::POLL.as_millis() as i32) {
            Ok(_) => Ok(Some((fds[0].revents != 0, fds[1].revents != 0))),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(Error::io("poll the control port", e)),
        }
    }

    /// Whether requests to listen again wait and it is their turn. Connections waiting
    /// are accepted before the listener closes (its close would reset them), for a POLL at
    /// most: a backlog that never empties does not hold a test's streams off.
    fn asking(&mut self, incoming: bool, asked: bool) -> bool {
        let turn = asked
            && (!incoming
                || self.asked_at.get_or_insert_with(Instant::now).elapsed() > timeouts::POLL);
        if !asked || turn {
            self.asked_at = None;
        }
        turn
    }

    /// Answers the requests to listen again: the listener then sets what the last asked
    /// for on the sockets it accepts (a new listener for a new window, the MSS on the live
    /// one).
    fn answer(&mut self, mut listener: TcpListener) -> Result<TcpListener> {
        let _ = (&self.wake).read(&mut [0u8; 64]);
        let asks: Vec<Ask> = self.asks.try_iter().collect();
        let Some(&(wanted, _)) = asks.last() else {
            return Ok(listener);
        };
        let mut outcome = Ok(());
        if wanted.window != self.listening.window {
            let v6_only = self.cfg.family == Family::V6;
            let changed;
            (listener, self.listening.window, changed) =
                relisten(listener, v6_only, self.listening.window, wanted.window)?;
            // The listener's connections inherit --snd-timeout and --cntl-ka.
            self.cfg
                .sockets
                .apply_control(socket2::SockRef::from(&listener))?;
            self.listening.mss = None;
            outcome = changed.map_err(|e| e.to_string());
        }
        if wanted.mss != self.listening.mss {
            match net::set_mss(&socket2::SockRef::from(&listener), wanted.mss) {
                Ok(()) => self.listening.mss = wanted.mss,
                Err(e) => outcome = outcome.and(Err(e.to_string())),
            }
        }
        for (_, reply) in asks {
            let _ = reply.send(outcome.clone());
        }
        Ok(listener)
    }

    /// The next connection, if `accept()` gives one. Out of descriptors, the spare's lets
    /// the limit be read, then the next client in to hear why it is refused.
    fn accept(&mut self, listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
        let e = match listener.accept() {
            Ok(pair) => return Some(pair),
            Err(e) if crate::data::stream::is_timeout(&e) => return None,
            Err(e) => e,
        };
        if !out_of_fds(&e) {
            log!(self.cfg.quiet, "pinperf: accept on the control port: {e}");
            std::thread::sleep(ACCEPT_RETRY);
            return None;
        }
        self.shared
            .out_of_fds(e.raw_os_error().unwrap_or(libc::EMFILE));
        let freed = self.spare.take().map(drop).is_some();
        if self.fd_burst.is_none() {
            self.fd_burst = Some(0);
            log!(
                self.cfg.quiet,
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

    /// Takes a new connection from `peer` to a `control` thread for its handshake, unless
    /// its address is not allowed or locked out, descriptors are short, or too many
    /// threads run.
    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        if !allow::allowed(&self.cfg.allow, peer.ip()) {
            // Closed at once: no byte is read or written for an address not allowed.
            drop(stream);
            return log_refused(&self.cfg, peer, None, "allow", "address not in --allow");
        }
        if self.locked_out(peer) {
            return;
        }
        let Some(stream) = self.fds_free(stream) else {
            return;
        };
        let shared = &self.shared;
        if shared.threads.load(Ordering::Acquire) >= MAX_CONTROL_THREADS {
            // Cut handshakes whose threads have not yet ended: a hard bound on threads.
            drop(stream);
            let why = "too many connections at once";
            return log_refused(&self.cfg, peer, None, "handshake", why);
        }
        let rtt = net::rtt(&stream);
        let Some((id, cut)) = shared.pending.add(&stream, peer, timeouts::admission(rtt)) else {
            // No descriptor for the handshake's own handle: closed unanswered.
            return shared.out_of_fds(libc::EMFILE);
        };
        if let Some(cut) = cut {
            log_refused(&self.cfg, cut.peer, None, "handshake", &cut.reason);
        }
        self.hand_over(stream, peer, id);
    }

    /// Whether `peer` is locked out: its connection is closed unanswered, counted, and
    /// said once the lockout is over.
    fn locked_out(&self, peer: SocketAddr) -> bool {
        let now = Instant::now();
        let mut penalties = self.shared.penalties.lock();
        if penalties.locked(peer.ip(), now) {
            return true;
        }
        let closed = penalties.closed_while_locked(peer.ip(), now);
        drop(penalties);
        if let Some(n) = closed {
            log!(
                self.cfg.quiet,
                "pinperf: {n} connection(s) from {} closed unanswered while it was locked out",
                peer.ip()
            );
        }
        false
    }

    /// The connection back, unless descriptors are still short since `accept()` ran out:
    /// then it is refused with the reason (counted, not logged one by one: the burst's
    /// two lines sum them up).
    fn fds_free(&mut self, stream: TcpStream) -> Option<TcpStream> {
        let Some(refused) = self.fd_burst else {
            return Some(stream);
        };
        if self.spare.is_none() {
            self.spare = open_spare();
        }
        if self.spare.is_none() {
            self.fd_burst = Some(refused + 1);
            let reason = format!(
                "server out of file descriptors (its `ulimit -n` is {}); try again later",
                fd_limit()
            );
            refuse_with(stream, reason, &self.shared.refusers);
            return None;
        }
        self.fd_burst = None;
        log!(
            self.cfg.quiet,
            "pinperf: file descriptors are free again ({refused} client(s) refused meanwhile)"
        );
        Some(stream)
    }

    /// Runs the connection's session on its own `control` thread.
    fn hand_over(&self, stream: TcpStream, peer: SocketAddr, id: u64) {
        let (cfg, shared, done) = (
            Arc::clone(&self.cfg),
            Arc::clone(&self.shared),
            self.done.clone(),
        );
        self.shared.threads.fetch_add(1, Ordering::AcqRel);
        let control = spawn_named("control".into(), move || {
            let deadline = shared.pending.deadline(id).unwrap_or_else(Instant::now);
            let ho = Handover {
                cfg: &cfg,
                shared: &shared,
                peer,
                id,
                deadline,
            };
            let result = session(stream, &ho);
            shared.threads.fetch_sub(1, Ordering::AcqRel);
            match (done, result) {
                // `-1`: the admitted test's result is the server's.
                (Some(done), Some(result)) => {
                    let _ = done.send(result);
                    Ok(())
                }
                (_, result) => result.unwrap_or(Ok(())),
            }
        });
        if let Err(e) = control {
            self.shared.threads.fetch_sub(1, Ordering::AcqRel);
            self.shared.pending.remove(id);
            log!(self.cfg.quiet, "pinperf: {e}");
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
fn refuse_with(mut stream: TcpStream, reason: String, refusers: &Arc<AtomicUsize>) {
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
