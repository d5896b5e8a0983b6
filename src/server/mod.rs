//! The server: an acceptor (the calling thread) that checks each connection's address
//! (`--allow`; `--max-tests-per-minute` when a test is admitted) and hands it to its own `control` thread for the
//! handshake (see [`self::admission`]: at most [`MAX_HANDSHAKES`] at once, each under a
//! deadline the acceptor enforces by cutting the connection). Only an admitted test takes
//! the slot; one that finds a test running is told "busy" with the time left. The control
//! thread then runs the test: data listener with the window set before `listen()`, pinned
//! `stream-N` receivers, a `reporter` streaming receiver rows live, and the end: every
//! stream read to EOF, then the totals. Every phase has a timeout; a client that vanishes
//! ends its test and the server goes on. Events go to [`self::serverlog`].
//!
//! Without `-B` the server listens on `[::]` dual-stack (IPv4 clients arrive as
//! `::ffff:a.b.c.d` and are named by their IPv4 address), or on one family with `-4`/`-6`;
//! each test's data listener sits on the address its control connection reached. Out of
//! file descriptors, the acceptor refuses clients with that reason (a spare descriptor is
//! kept for it), logs once per burst, and pauses between attempts instead of spinning.

/// Server log lines go to stderr (text, or JSON `message` events with `--log-format
/// json`; see [`serverlog`]), except for the in-process `--loopback` server.
macro_rules! log {
    ($quiet:expr, $($arg:tt)*) => {
        if !$quiet {
            serverlog::message(format!($($arg)*));
        }
    };
}

pub mod admission;
pub mod allow;
pub mod auth;
pub(crate) mod bounds;
pub(crate) mod relisten;
pub(crate) mod serverlog;
pub(crate) mod shared;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::admission::{Handshake, Handshakes, Refusal, Step, Ticket};
use self::bounds::{Arrived, Bounds};
use crate::config::ServerConfig;
use crate::data::ends::{Ends, Socks, Threads};
use crate::data::pin::PinPlan;
use crate::data::stream::{Batch, StreamSocks, spawn_named};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::CpuMark;
use crate::os::net::{self, Family};
use crate::report::interval::IntervalCutter;
use crate::timeouts;
use crate::wire::{
    self, Accept, Control, ControlMsg, DataHello, ReceiverDone, SOFTWARE, TestParams,
};
use allow::Rate;
use crossbeam_channel::{Receiver, Sender};
use relisten::{Ask, Listening, Relisten, listen_after, listen_for, relisten};
use shared::*;

/// How long the acceptor pauses when `accept()` fails (out of file descriptors, above all)
/// and it has no spare descriptor left to refuse the client with: a tenth of
/// [`timeouts::BUSY_ANSWER`], the longest a refusal holds a descriptor, so a freed one is
/// noticed soon while the failing `accept()` costs no measurable CPU.
const ACCEPT_RETRY: Duration = Duration::from_millis(timeouts::BUSY_ANSWER.as_millis() as u64 / 10);

/// Most connections to a test's data port waiting at once for their stream hello: beyond
/// it the oldest is closed, so a flood of idle connections cannot exhaust descriptors.
const MAX_PENDING_HELLOS: usize = 64;

/// A bound, listening server.
pub struct Server {
    listener: TcpListener,
    cfg: ServerConfig,
    /// A descriptor kept free to accept, and refuse with the reason, a client that comes
    /// while the process is out of descriptors (else it would wait in the backlog).
    spare: Option<std::fs::File>,
    /// Said when the server starts listening: `--data-port`'s port is held on some
    /// addresses of this host only.
    note: Option<String>,
    /// The acceptor's wake-up pair (read end, write end; see [`Relisten`]): made here, so
    /// that a server that says it listens has every descriptor it keeps.
    wake: (UnixStream, UnixStream),
}

impl Server {
    /// Binds the control port: on `-B`, or on the wildcard address of `-4`/`-6`, or
    /// without either on `[::]` dual-stack, falling back to `0.0.0.0` where this host has
    /// no IPv6.
    pub fn bind(cfg: ServerConfig) -> Result<Server> {
        // Read the limit while a descriptor is free for it: out of them, it is remembered.
        fd_limit();
        let v6_only = cfg.family == Family::V6;
        let listen = |ip: IpAddr| {
            let addr = SocketAddr::new(ip, cfg.port);
            net::listen(addr, v6_only, None, false).map_err(|e| match e {
                Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
                    Error::io(
                        format!(
                            "listen on {addr} (another server on that port? choose one with -p)"
                        ),
                        source,
                    )
                }
                Error::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::AddrNotAvailable =>
                {
                    Error::io(
                        format!("listen on {addr} (-B {ip}: not an address of this host?)"),
                        source,
                    )
                }
                other => other,
            })
        };
        let (listener, _) = match cfg.bind {
            Some(ip) => listen(ip)?,
            None => match listen(net::unspecified(cfg.family)) {
                Err(e) if cfg.family == Family::Any && no_ipv6(&e) => {
                    listen(Ipv4Addr::UNSPECIFIED.into())?
                }
                other => other?,
            },
        };
        // Every TCP test listens on --data-port: one taken by another program is said now,
        // not by every test's client ("bind 127.0.0.1:6110: Address already in use").
        let mut note = None;
        if let Some(port) = cfg.data_port.filter(|&p| p != 0) {
            let ip = listener
                .local_addr()
                .op(|| "read listening address".into())?
                .ip();
            let probe = |ip| net::listen(SocketAddr::new(ip, port), v6_only, None, false);
            match probe(ip) {
                Ok(_) => {}
                // On the wildcard, a port held on one address of the host is in use too;
                // tests reach this server at the others, loopback among them.
                Err(_)
                    if ip.is_unspecified() && loopbacks(ip, v6_only).all(|l| probe(l).is_ok()) =>
                {
                    let free: Vec<String> = loopbacks(ip, v6_only).map(|l| l.to_string()).collect();
                    note = Some(format!(
                        "pinperf: --data-port {port} is in use on some of this host's addresses \
                         (not {}): a test reaching this server at one of them is refused; \
                         choose another port to serve them too",
                        free.join(", ")
                    ));
                }
                Err(e) => return Err(data_port_taken(port, e)),
            }
        }
        let wake = UnixStream::pair()
            .and_then(|(r, w)| {
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                Ok((r, w))
            })
            .op(|| "create the acceptor's wake-up socket pair".into())?;
        Ok(Server {
            listener,
            cfg,
            spare: open_spare(),
            note,
            wake,
        })
    }

    /// Starts a quiet server on 127.0.0.1 (ephemeral port) on a `server` thread of this
    /// process, for `--loopback` (one test) and `compare --loopback` (many). The thread is
    /// not joined: its failures reach the client over the control connection.
    pub fn spawn_local(one_off: bool, affinity: crate::data::pin::Affinity) -> Result<SocketAddr> {
        let server = Server::bind(ServerConfig::in_process(
            std::net::Ipv4Addr::LOCALHOST.into(),
            one_off,
            affinity,
        ))?;
        let addr = server.local_addr()?;
        spawn_named("server".into(), move || server.run())?;
        Ok(addr)
    }

    /// The address the control port is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .op(|| "read listening address".into())
    }

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
pub(crate) const MAX_HANDSHAKES: usize = 64;

/// Most `control` threads at once: the handshakes, those cut but not yet ended, and the
/// running test's. Beyond it a new connection is closed unanswered.
pub(crate) const MAX_CONTROL_THREADS: usize = 2 * MAX_HANDSHAKES;

/// Runs a server per the configuration (the `-s` mode).
pub fn serve(cfg: ServerConfig) -> Result<()> {
    if cfg.signals {
        crate::signals::take_over()?;
    }
    serverlog::set_output(&cfg.log)?;
    let ignored = cfg.log.ignored.clone();
    let (auth, allow) = (
        cfg.auth.is_some(),
        cfg.allow.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
    );
    let mut server = Server::bind(cfg)?;
    serverlog::listening(server.local_addr()?, SOFTWARE, auth, &allow);
    if let Some(note) = server.note.take() {
        serverlog::message(note);
    }
    for flag in ignored {
        serverlog::message(format!(
            "pinperf: {flag} ignored: iperf3 -s takes it for its report; a pinperf server logs \
             each test in its log (text, or --log-format json) and its client reports it"
        ));
    }
    server.run()
}

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

/// One connection, on its `control` thread: the handshake under its deadline, then (once
/// admitted and the slot taken) the test. `None` when no test was admitted; otherwise the
/// test's result.
fn session(mut stream: TcpStream, ho: &Handover) -> Option<Result<()>> {
    let (peer, id, cfg, shared, deadline) = (ho.peer, ho.id, ho.cfg, ho.shared, ho.deadline);
    // A handshake that was cut was logged by the acceptor; any other failure is logged here.
    let failed = |why: &str, e: &Error| {
        if shared.pending.remove(id) {
            log_refused(cfg, peer, None, why, &e.to_string());
        }
    };
    let _ = stream.set_nodelay(true);
    match opener(&stream, deadline) {
        Opener::Iperf3 => return crate::iperf3::session::serve(stream, ho),
        Opener::Stream => {
            if shared.pending.remove(id) {
                match shared.streams.lock().as_ref() {
                    Some(test) => {
                        let _ = test.send(Ok((stream, peer)));
                    }
                    None => log_refused(
                        cfg,
                        peer,
                        None,
                        "stream",
                        "a data connection while no test's streams connect",
                    ),
                }
            }
            return None;
        }
        Opener::Pinperf => {}
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if let Err(e) = wire::exchange_preamble(&mut stream, peer, left.max(Duration::from_millis(1))) {
        failed("handshake", &e);
        return None;
    }
    // The data listener sits on the address the client reached (an IPv4 client of the
    // dual-stack listener: on that IPv4 address), so the data connections take its path.
    let local = match stream.local_addr().op(|| "read control address".into()) {
        Ok(a) => canonical(a),
        Err(e) => {
            failed("handshake", &e);
            return None;
        }
    };
    // Watched while the data connections arrive; valid while `ctl` owns the socket.
    let ctl_fd = stream.as_raw_fd();
    let ctl = match Control::new(stream, peer) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            failed("handshake", &e);
            return None;
        }
    };
    let (test, user) = match handshake(&ctl, local, cfg, deadline) {
        Ok(pair) => pair,
        Err(Turned::Refused(mut r)) => {
            if shared.pending.remove(id) {
                // Credentials that failed, on a server with keys: not a client that gave
                // none, nor one that gave some to a server without keys.
                if r.why == "auth"
                    && r.to_client == auth::FAILED
                    && cfg.auth.is_some()
                    && cfg.public()
                    && let Some(lockout) = penalize(shared, peer)
                {
                    let words = allow::lockout_words(lockout);
                    r.to_client = format!("{}; {words}", r.to_client);
                    r.to_log = format!("{}; {words}", r.to_log);
                }
                let _ = ctl.send(&ControlMsg::Refuse {
                    reason: r.to_client,
                });
                log_refused(cfg, peer, r.user.as_deref(), r.why, &r.to_log);
            }
            return None;
        }
        Err(Turned::Broken(e)) => {
            failed("handshake", &e);
            return None;
        }
    };
    if !shared.pending.remove(id) {
        return None;
    }
    let user = user.as_deref();
    let _release = match take_slot(shared, cfg, peer, test.params.run_time()) {
        Ok(guard) => guard,
        Err(r) => {
            let _ = ctl.send(&ControlMsg::Refuse {
                reason: r.to_client,
            });
            log_refused(cfg, peer, user, r.why, &r.to_log);
            return None;
        }
    };
    if !cfg.quiet {
        serverlog::set_user(user);
        serverlog::test_start(peer, user, &test.params);
    }
    // Without --data-port, the TCP streams connect to the control port, as iperf3's do.
    let one_port = (cfg.data_port.is_none() && !test.params.udp).then(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        *shared.streams.lock() = Some(tx);
        let listening = Listening::of(&test.params);
        listen_for(shared, listening, cfg.quiet);
        (rx, listening)
    });
    let arrivals = one_port.as_ref().map(|(rx, _)| rx);
    let result = run_test(&ctl, ctl_fd, test, cfg, &shared.slot, arrivals);
    if let Some((_, listening)) = one_port {
        *shared.streams.lock() = None;
        listen_after(shared, listening, cfg.quiet);
    }
    shared.slot.finishing();
    let result = result.map_err(|e| took_the_slot_for_nothing(cfg, shared, peer, e));
    match &result {
        Err(e @ Error::Exceeded(why)) => {
            ctl.abort(&e.to_string());
            log_refused(cfg, peer, user, "exceeded", why);
        }
        Err(e) => {
            ctl.abort(&e.to_string());
            if !cfg.quiet {
                serverlog::error(Some(peer), user, &e.to_string());
            }
        }
        Ok(()) => {}
    }
    drop(ctl);
    Some(result)
}

/// What a connection to the control port opened with.
enum Opener {
    /// pinperf's preamble (or silence, or anything else: the handshake names it).
    Pinperf,
    /// An iperf3 cookie: an iperf3 client, or a stream of the running iperf3 test.
    Iperf3,
    /// A byte with [`wire::STREAM_MARK`]: a data or echo connection of the running
    /// pinperf test.
    Stream,
}

/// What the client's first bytes, within [`timeouts::SNIFF`], say it is.
fn opener(stream: &TcpStream, deadline: Instant) -> Opener {
    let until = (Instant::now() + timeouts::SNIFF).min(deadline);
    let mut first = [0u8; 8];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Opener::Pinperf;
        }
        match stream.peek(&mut first) {
            Ok(0) => return Opener::Pinperf,
            Ok(_) if wire::opens_a_stream(first[0]) => return Opener::Stream,
            Ok(n) if n == first.len() || !wire::PREAMBLE.starts_with(&first[..n]) => {
                let iperf3 = first[..n] != wire::PREAMBLE[..n]
                    && crate::iperf3::looks_like_cookie(&first[..n]);
                return if iperf3 {
                    Opener::Iperf3
                } else {
                    Opener::Pinperf
                };
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => return Opener::Pinperf,
        }
    }
}

/// Refuses the client's test; the error, logged by the server, says so in its words.
fn refuse(ctl: &Control, slot: &Slot, reason: String) -> Error {
    slot.finishing();
    let _ = ctl.send(&ControlMsg::Refuse {
        reason: reason.clone(),
    });
    Error::Test(format!("refused the client's test: {reason}"))
}

/// A test that passed the handshake: what the rest of the test runs on.
struct Admitted {
    params: TestParams,
    plan: PinPlan,
    /// The address the client reached; the data listener sits on it.
    local: SocketAddr,
    /// The secret the test's data and echo connections open with.
    cookie: u64,
}

/// How a handshake ended without a test.
enum Turned {
    /// Refused with a reason the client hears.
    Refused(Refusal),
    /// Not the protocol, gone, or out of time.
    Broken(Error),
}

/// The handshake of one connection, by [`Handshake`], each message read within what is
/// left before `deadline` (so a trickling peer cannot stretch a read; the acceptor cuts
/// one stuck elsewhere [`timeouts::HANDSHAKE_CUT_AFTER`] past it). Returns the admitted
/// test and its user.
fn handshake(
    ctl: &Control,
    local: SocketAddr,
    cfg: &ServerConfig,
    deadline: Instant,
) -> std::result::Result<(Admitted, Option<String>), Turned> {
    let peer = ctl.peer;
    let mut machine = Handshake::new(cfg.auth.clone(), cfg.limits, cfg.affinity.clone())
        .map_err(Turned::Broken)?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Turned::Broken(wire::no_answer(peer)));
        }
        let (msg, body) = ctl.recv_raw(left).map_err(Turned::Broken)?;
        match machine.input(msg, &body) {
            Step::Reply(msg) => ctl.send(&msg).map_err(Turned::Broken)?,
            Step::Wait => {}
            Step::Refuse(r) => return Err(Turned::Refused(r)),
            Step::Broken(what) => return Err(Turned::Broken(Error::Protocol { peer, what })),
            Step::Admit(ticket) => {
                let Ticket { params, plan, user } = *ticket;
                let cookie = wire::new_cookie().map_err(Turned::Broken)?;
                return Ok((
                    Admitted {
                        params,
                        plan,
                        local,
                        cookie,
                    },
                    user,
                ));
            }
        }
    }
}

/// The admitted test: data listener, streams, reporter, the end and the totals.
fn run_test(
    ctl: &Arc<Control>,
    ctl_fd: RawFd,
    test: Admitted,
    cfg: &ServerConfig,
    slot: &Slot,
    on_control_port: Option<&Receiver<Arrival>>,
) -> Result<()> {
    let peer = ctl.peer;
    let Admitted {
        params,
        plan,
        local,
        cookie,
    } = test;
    let n = params.streams as usize;
    // TCP: the control port's streams or a data listener's; UDP: a socket per stream, on
    // the control port's number without --data-port.
    let (data, window) = if params.udp {
        // A socket option the host refuses (-S, -w) is a refusal naming the flag, as TCP's.
        let one_port = cfg.data_port.is_none().then_some(local.port());
        let bound = crate::wire::udp_rendezvous::bind(
            local.ip(),
            one_port,
            &params,
            cfg.limits.max_window_bytes,
        )
        .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        let window = bound.window.clone();
        (Data::Udp(bound), window)
    } else if let Some(rx) = on_control_port {
        // The grant as a listener with the window would make it, and -C/-S/-M/-N tried on
        // it: refused now, not on a stream.
        let (probe, window) = net::listener_socket(
            local,
            local.is_ipv6(),
            params.window_bytes,
            params.force_window,
        )?;
        net::SocketOpts::of(&params)
            .apply(&probe)
            .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        (Data::ControlPort(rx), window)
    } else {
        let mut data_addr = local;
        data_addr.set_port(cfg.data_port.unwrap_or(0));
        let (listener, window) = net::listen(
            data_addr,
            data_addr.is_ipv6(),
            params.window_bytes,
            params.force_window,
        )
        .map_err(|e| match cfg.data_port {
            Some(port) if port != 0 => data_port_taken(port, e),
            _ => e,
        })?;
        // Set on the listener before Accept (accepted sockets inherit them), so an unknown
        // congestion control is a clean refusal, not a broken test.
        net::SocketOpts::of(&params)
            .apply(&socket2::SockRef::from(&listener))
            .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        (Data::Tcp(listener), window)
    };
    let (data_port, udp_ports) = match &data {
        Data::Tcp(l) => (
            l.local_addr().op(|| "read data port".into())?.port(),
            Vec::new(),
        ),
        Data::ControlPort(_) => (local.port(), Vec::new()),
        Data::Udp(bound) => (0, bound.ports.clone()),
    };
    let started = format!("pinperf: test from {peer}: {}", params.described());
    log!(cfg.quiet, "{started}");
    // `--get-server-output`: this server's own lines about the test, for the client.
    let mut told = params.get_server_output.then(|| vec![started]);
    ctl.send(&ControlMsg::Accept(Accept {
        data_port,
        udp_ports,
        cookie,
        window,
        pin_plan: plan.clone(),
        host: crate::os::sys::host_mark(cookie),
        host_name: crate::os::sys::hostname(),
    }))?;
    // The control connection's RTT: how long the streams may take to arrive, and how
    // long a UDP receiver listens past the senders' end.
    let rtt = net::rtt(&ctl.socket());
    let (mut socks, path) = match data {
        Data::Tcp(listener) => {
            let from = Arrivals::Listener(&listener);
            let socks = accept_streams(from, ctl, ctl_fd, cookie, &params, cfg.quiet)
                .map_err(Error::abandoned)?;
            let path = net::path_info(&socks[0].data);
            (Socks::Tcp(socks), path)
        }
        Data::ControlPort(rx) => {
            let from = Arrivals::ControlPort(rx);
            let socks = accept_streams(from, ctl, ctl_fd, cookie, &params, cfg.quiet)
                .map_err(Error::abandoned)?;
            // What a data listener's sockets would have inherited.
            let opts = net::SocketOpts::of(&params);
            for s in &socks {
                let data = socket2::SockRef::from(&s.data);
                net::apply_window(&data, params.window_bytes, params.force_window)?;
                opts.apply(&data)?;
                if let Some(echo) = &s.echo {
                    opts.echo().apply(&socket2::SockRef::from(echo))?;
                }
            }
            let path = net::path_info(&socks[0].data);
            (Socks::Tcp(socks), path)
        }
        Data::Udp(bound) => {
            let cap = cfg.limits.max_window_bytes;
            let socks = crate::wire::udp_rendezvous::await_hellos(
                bound,
                ctl,
                ctl_fd,
                (cookie, &params),
                (rtt, cap),
            )
            .map_err(Error::abandoned)?;
            (Socks::Udp(socks), net::path_info(&ctl.socket()))
        }
    };

    // Each direction: this end's threads (receivers where the client sends, senders where
    // it receives) and a reporter streaming their intervals to the client.
    let mut ends = Ends::default();
    let mut reporters = Vec::new();
    let mut arrived = Vec::new();
    let first_byte = crate::os::net::min_rtt(&ctl.socket());
    let sockets = socks.duplicates();
    for (k, &reverse) in params.direction().reversed().iter().enumerate() {
        let these = socks.take(n);
        let plan = PinPlan(plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, (rx, free)) = Threads::spawn(
            reverse,
            crate::choices::Engine::Threads,
            these,
            &plan,
            &params,
            timeouts::udp_settle(rtt),
        )?;
        ends.0.push(threads);
        // Receivers here: the client's first byte leaves when it hears Start, sent as
        // this end's clock starts, and arrives a round trip later.
        let delay = if reverse { Duration::ZERO } else { first_byte };
        let cutter = IntervalCutter::for_test(n, &params).arriving_after(delay);
        let ctl2 = Arc::clone(ctl);
        let udp = params.udp;
        let tell = params.get_server_output;
        let counted = Arrived::new(n);
        arrived.push((reverse, counted.clone()));
        reporters.push(spawn_named("reporter".into(), move || {
            run_reporter(rx, free, cutter, (reverse, udp, tell), ctl2, counted)
        })?);
    }

    let cpu_mark = CpuMark::now();
    let mut kernel_mark = crate::os::kstat::KernelMark::now();
    let t0 = Instant::now();
    let mut bounds = Bounds::new(t0, &params, rtt, cfg.limits.max_rate_bps, sockets);
    ends.start(t0);
    slot.running();
    ctl.send(&ControlMsg::Start)?;

    // Watch the control connection and the streams until every stream has ended.
    let mut failure: Option<Error> = None;
    loop {
        kernel_mark.sample();
        // A failure is looked for once more after the streams ended: reset by a client
        // that failed, they all end at once.
        let ended = reporters.iter().all(|r| r.is_finished());
        if let Some(f) = ends.failure() {
            let ours = Error::Test(format!(
                "{} ({:.2} s into the test, on the server)",
                f.error,
                f.at.saturating_duration_since(t0).as_secs_f64()
            ));
            // A reset here may be the client's failure seen from here: its word leads.
            failure = Some(ctl.with_their_word(ours, f.peer_closed, |_| false));
            break;
        }
        if ended {
            break;
        }
        // Looked at once the streams are known not to have ended: a test that ended
        // during the last poll is never cut.
        let received: Vec<u64> = arrived
            .iter()
            .filter(|(sends, _)| !sends)
            .flat_map(|(_, a)| a.bytes())
            .collect();
        let moved = arrived.iter().flat_map(|(_, a)| a.bytes()).sum();
        if let Some(cut) = bounds
            .check(Instant::now(), &received, moved)
            .filter(|_| cfg.public())
        {
            failure = Some(cut);
            break;
        }
        if let Some(stopped) = crate::signals::server_stopped(cfg.signals, t0) {
            failure = Some(stopped);
            break;
        }
        match ctl.poll(timeouts::POLL) {
            Ok(None) => {}
            Ok(Some(ControlMsg::Bye)) => {}
            Ok(Some(other)) => {
                failure = Some(other.unexpected(peer, "nothing during the test"));
                break;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_some() {
        // Over for its client (stopped, gone, or broke the protocol): the next client
        // waits out the streams' end for the slot instead of hearing "busy, about 7 s
        // left" (a client right after a killed -u -b 100M one).
        slot.finishing();
        ends.abort();
    }
    let (thread_cpu, send_path, stream_error) = ends.join(params.zerocopy);
    let cpu = cpu_mark.report(thread_cpu, send_path);
    let mut done = ReceiverDone {
        bytes: Vec::new(),
        sent: Vec::new(),
        elapsed_us: 0,
        path,
        cpu: Some(cpu),
        kernel: None,
        server_output: None,
        retransmits: Vec::new(),
    };
    let mut reporter_error = None;
    for (reporter, &reverse) in reporters.into_iter().zip(params.direction().reversed()) {
        match reporter
            .join()
            .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())))
        {
            Ok(totals) => {
                if let Some(lines) = told.as_mut() {
                    lines.extend(totals.lines);
                }
                match reverse {
                    true => done.sent = totals.bytes,
                    false => {
                        done.bytes = totals.bytes;
                        done.elapsed_us = totals.last_ns / 1000;
                    }
                }
            }
            Err(e) => {
                reporter_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure.or(stream_error).or(reporter_error) {
        return Err(e);
    }
    done.kernel = kernel_mark.report();
    let received: u64 = done.bytes.iter().sum();
    let sent: u64 = done.sent.iter().sum();
    // The test's span, as the client's totals take it: to the later of the planned end
    // and the last byte (a sparse UDP test's last datagram may come at 0.7 ms).
    let secs = (done.elapsed_us as f64 / 1e6).max(params.run_time().as_secs_f64());
    let mut what = Vec::new();
    if params.direction() != crate::wire::params::Direction::Reverse {
        let omit = match params.omit().is_zero() {
            true => String::new(),
            false => format!(", -O's {} s included", params.omit().as_secs_f64()),
        };
        what.push(format!(
            "received {received} bytes in {secs:.3} s ({:.3} Mb/s{omit})",
            crate::units::mbps(received, secs)
        ));
    }
    if params.direction() != crate::wire::params::Direction::Forward {
        what.push(format!("sent {sent} bytes"));
    }
    let ended = format!("pinperf: test from {peer}: done, {}", what.join(", "));
    done.server_output = told.map(|mut lines| {
        lines.push(ended.clone());
        lines.join("\n")
    });
    // Finishing before the client can see the totals: its next test (a shell loop's next
    // run) may connect the moment they arrive, and must wait rather than be refused.
    slot.finishing();
    ctl.send(&ControlMsg::Done(Box::new(done)))?;
    if !cfg.quiet {
        serverlog::test_end(peer, received, sent, secs, || ended);
    }
    // The client says Bye once it has everything; don't hold the server long for it.
    let _ = ctl.poll(timeouts::GOODBYE);
    Ok(())
}

/// Where a test's data arrives: a TCP listener, or a UDP socket per stream (and its port).
enum Data<'a> {
    /// The test's own data listener (`--data-port`, or 0: an ephemeral port).
    Tcp(TcpListener),
    /// The control port's: the acceptor passes the streams on.
    ControlPort(&'a Receiver<Arrival>),
    Udp(crate::wire::udp_rendezvous::Bound),
}

/// What a server reporter found once every stream of its direction ended.
#[derive(Debug, Clone)]
struct ReceiverTotals {
    bytes: Vec<u64>,
    last_ns: u64,
    /// `--get-server-output`: a line per stream per interval, as this end counted it.
    lines: Vec<String>,
}

/// A server `reporter` thread: cuts one direction's records into intervals and sends each
/// the moment every stream has passed its end: a receiver's as a `Row` (the client's
/// report joins it with its senders' intervals), a sender's as a `SenderInterval` (`-R`,
/// `--bidir`: joined there with the client's receiver rows).
fn run_reporter(
    rx: Receiver<Batch>,
    free: Sender<Batch>,
    mut cutter: IntervalCutter,
    (sends, udp, tell): (bool, bool, bool),
    control: Arc<Control>,
    arrived: Arrived,
) -> Result<ReceiverTotals> {
    let mut lines = Vec::new();
    let mut send_ready = |cutter: &mut IntervalCutter| -> Result<()> {
        while let Some(iv) = cutter.pop_ready() {
            if tell {
                let (b, e) = (iv.begin_ns as f64 / 1e9, iv.end_ns as f64 / 1e9);
                for (id, s) in iv.streams.iter().enumerate() {
                    lines.push(format!(
                        "stream-{id} {b:.3}-{e:.3} s: {} {} bytes, {:.3} Mb/s",
                        if sends { "sent" } else { "received" },
                        s.bytes,
                        crate::units::mbps(s.bytes, (e - b).max(1e-9))
                    ));
                }
            }
            control.send(&match sends {
                true => ControlMsg::SenderInterval(iv),
                false => ControlMsg::Row(crate::report::receiver_row(&iv, udp)),
            })?;
        }
        Ok(())
    };
    for batch in rx {
        cutter.add(&batch);
        let stream = usize::from(batch.stream);
        if let Some(&total) = cutter.totals().get(stream) {
            arrived.set(stream, total);
        }
        let _ = free.try_send(batch);
        send_ready(&mut cutter)?;
    }
    // Every stream thread is gone: whatever is left closes now.
    cutter.finish();
    send_ready(&mut cutter)?;
    Ok(ReceiverTotals {
        bytes: cutter.totals().to_vec(),
        last_ns: cutter.last_record_ns(),
        lines,
    })
}

/// A data connection waiting for its stream hello.
struct Pending {
    sock: TcpStream,
    from: SocketAddr,
    hello: [u8; DataHello::LEN],
    got: usize,
}

/// Accepts the test's `n` data connections (and `n` echo connections with `echo`), each
/// opening with the test's cookie, a stream id and its kind; anything else is closed.
/// Hellos are read as they arrive, from all connections at once, so idle or slow ones
/// cannot hold up the real ones; all must arrive within [`timeouts::streams_arrive`]. The
/// control connection (`ctl_fd`, owned by `ctl`) is watched meanwhile: a client that
/// closes it or reports an error ends the test at once.
fn accept_streams(
    arrivals: Arrivals,
    ctl: &Control,
    ctl_fd: RawFd,
    cookie: u64,
    params: &TestParams,
    quiet: bool,
) -> Result<Vec<StreamSocks>> {
    let peer = ctl.peer;
    let (n, echo) = (usize::from(params.streams), params.echo());
    let directions = params.direction().reversed();
    // Where a hello's stream belongs: its direction's block of `n`, then its id.
    let place = |h: &DataHello| {
        let k = directions.iter().position(|&r| r == h.reverse)?;
        (usize::from(h.stream) < n).then(|| k * n + usize::from(h.stream))
    };
    let n = n * directions.len();
    if let Arrivals::Listener(listener) = arrivals {
        listener
            .set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the data listener".into())?;
    }
    let expected = if echo { 2 * n } else { n };
    // A long path makes each connection slower to arrive: the control connection's RTT.
    let rtt = net::rtt(&ctl.socket());
    let mut wait = timeouts::StreamsArrive::new(expected, rtt);
    let mut socks: Vec<(Option<TcpStream>, Option<TcpStream>)> =
        (0..n).map(|_| (None, None)).collect();
    let mut pending: Vec<Pending> = Vec::new();
    // Connections closed without a complete hello (gone, evicted, or still silent at the end).
    let mut silent = 0usize;
    let mut arrived = 0;
    while arrived < expected {
        let now = Instant::now();
        let deadline = wait.deadline();
        if now >= deadline {
            return Err(Error::Test(format!(
                "only {arrived} of {expected} data and echo connections from {peer} arrived \
                 ({:.1} s after the last, or {:.1} s in all)",
                wait.step.as_secs_f64(),
                wait.allowed.as_secs_f64()
            )));
        }
        let (listen_fd, most) = match arrivals {
            Arrivals::Listener(l) => (l.as_raw_fd(), i32::MAX as u128),
            // Looked at every 2 ms: the acceptor's hand-over is no descriptor to poll.
            Arrivals::ControlPort(_) => (-1, 2),
        };
        let wait_ms = deadline
            .saturating_duration_since(now)
            .as_millis()
            .clamp(1, most) as i32;
        let mut fds = vec![
            crate::os::sys::pollfd(listen_fd, libc::POLLIN),
            crate::os::sys::pollfd(ctl_fd, libc::POLLIN),
        ];
        fds.extend(
            pending
                .iter()
                .map(|p| crate::os::sys::pollfd(p.sock.as_raw_fd(), libc::POLLIN)),
        );
        match crate::os::sys::poll(&mut fds, wait_ms) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("poll the data connections", e)),
        }
        if fds[1].revents != 0 {
            let gave_up = |e: Error| {
                Error::Test(format!(
                    "the client gave up while connecting its streams ({arrived} of {expected} \
                     connections arrived): {e}"
                ))
            };
            match ctl.poll(Duration::ZERO) {
                Ok(None) => {}
                Ok(Some(other)) => {
                    return Err(gave_up(other.unexpected(peer, "nothing before start")));
                }
                Err(e) => return Err(gave_up(e)),
            }
        }
        // Hellos. Backwards: a removal (swap_remove) moves only an entry already seen.
        for i in (0..pending.len()).rev() {
            if fds[2 + i].revents == 0 {
                continue;
            }
            let p = &mut pending[i];
            let complete = match p.sock.read(&mut p.hello[p.got..]) {
                Ok(0) => None,
                Ok(k) => {
                    p.got += k;
                    Some(p.got == DataHello::LEN)
                }
                Err(e) if crate::data::stream::is_timeout(&e) => Some(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Some(false),
                Err(_) => None,
            };
            match complete {
                Some(false) => {}
                // Closed or failed before its hello was whole.
                None => {
                    silent += 1;
                    pending.swap_remove(i);
                }
                Some(true) => {
                    let Pending {
                        sock, from, hello, ..
                    } = pending.swap_remove(i);
                    let slot = DataHello::from_bytes(hello)
                        .filter(|h| h.cookie == cookie && (echo || !h.echo))
                        .and_then(|h| {
                            let pair = socks.get_mut(place(&h)?)?;
                            Some(if h.echo { &mut pair.1 } else { &mut pair.0 })
                        });
                    match slot {
                        Some(slot @ None) => {
                            sock.set_nonblocking(false).op(|| {
                                format!("clear O_NONBLOCK on the data connection from {from}")
                            })?;
                            *slot = Some(sock);
                            arrived += 1;
                            wait.arrived();
                        }
                        _ if !quiet => serverlog::refused(
                            from,
                            None,
                            "cookie",
                            "a data connection with a wrong test cookie or stream id",
                        ),
                        _ => {}
                    }
                }
            }
        }
        match arrivals {
            Arrivals::Listener(l) if fds[0].revents != 0 => {
                accept_pending(l, peer, &mut pending, &mut silent, quiet)?;
            }
            Arrivals::Listener(_) => {}
            Arrivals::ControlPort(rx) => {
                for arrival in rx.try_iter() {
                    let (sock, from) = arrival.map_err(accept_failed)?;
                    admit_pending(sock, from, peer, &mut pending, &mut silent, quiet);
                }
            }
        }
    }
    silent += pending.len();
    if silent > 0 {
        log!(
            quiet,
            "pinperf: test from {peer}: closed {silent} data connection(s) that sent no stream hello"
        );
    }
    Ok(socks
        .into_iter()
        .filter_map(|(data, echo)| data.map(|data| StreamSocks { data, echo }))
        .collect())
}

/// Accepts what the data listener has queued (a bounded batch) into `pending`, each socket
/// non-blocking until its hello is read. Connections from elsewhere than the client are
/// closed; beyond [`MAX_PENDING_HELLOS`] the oldest waiting one is.
fn accept_pending(
    listener: &TcpListener,
    peer: SocketAddr,
    pending: &mut Vec<Pending>,
    silent: &mut usize,
    quiet: bool,
) -> Result<()> {
    for _ in 0..MAX_PENDING_HELLOS {
        let (sock, from) = match listener.accept() {
            Ok(pair) => pair,
            Err(e) if crate::data::stream::is_timeout(&e) => return Ok(()),
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::ConnectionAborted =>
            {
                continue;
            }
            Err(e) => return Err(accept_failed(e)),
        };
        admit_pending(sock, canonical(from), peer, pending, silent, quiet);
    }
    Ok(())
}

/// Takes a data connection from `from` to wait for its hello (non-blocking until it is
/// read), unless it comes from elsewhere than the test's client `peer`; beyond
/// [`MAX_PENDING_HELLOS`] the oldest waiting one is closed.
fn admit_pending(
    sock: TcpStream,
    from: SocketAddr,
    peer: SocketAddr,
    pending: &mut Vec<Pending>,
    silent: &mut usize,
    quiet: bool,
) {
    if from.ip() != peer.ip() {
        // A refusal like any other, so a log rule on "refused client" sees it.
        if !quiet {
            let reason = format!("a data connection, but the test belongs to {peer}");
            serverlog::refused(from, None, "stranger", &reason);
        }
        return;
    }
    if sock.set_nonblocking(true).is_err() {
        return;
    }
    if pending.len() >= MAX_PENDING_HELLOS {
        pending.remove(0);
        *silent += 1;
    }
    pending.push(Pending {
        sock,
        from,
        hello: [0; DataHello::LEN],
        got: 0,
    });
}

/// A data connection the acceptor passes on (or its failure to accept one).
type Arrival = std::io::Result<(TcpStream, SocketAddr)>;

/// Where a test's data connections come from.
#[derive(Clone, Copy)]
enum Arrivals<'a> {
    /// Its own data listener.
    Listener(&'a TcpListener),
    /// The control port's acceptor, which hands them over.
    ControlPort(&'a Receiver<Arrival>),
}

/// The error of a test whose data connection could not be accepted.
fn accept_failed(e: std::io::Error) -> Error {
    match out_of_fds(&e) {
        true => Error::io(
            format!(
                "accept data connection: the server is out of file descriptors (raise \
                 `ulimit -n`, now {})",
                fd_limit()
            ),
            e,
        ),
        false => Error::io("accept data connection", e),
    }
}

/// The loopback addresses a server listening on the wildcard `ip` serves: IPv4's, IPv6's,
/// or (dual-stack) both.
fn loopbacks(ip: IpAddr, v6_only: bool) -> impl Iterator<Item = IpAddr> {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    match (ip.is_ipv6(), v6_only) {
        (false, _) => vec![v4],
        (true, true) => vec![v6],
        (true, false) => vec![v4, v6],
    }
    .into_iter()
}

/// `--data-port`'s listener could not be made: its port in use is named with the fix.
fn data_port_taken(port: u16, e: Error) -> Error {
    match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
            Error::Usage(format!(
                "--data-port {port}: the port is in use (another server there?); choose \
                 another, or leave --data-port out for a port of the kernel's choosing"
            ))
        }
        other => other,
    }
}

/// An address as the client knows it: an IPv4 client of a dual-stack listener arrives as
/// `::ffff:a.b.c.d` and is `a.b.c.d` here (logs, and the data connections' check).
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

/// True when binding the IPv6 wildcard failed because this host has no IPv6.
fn no_ipv6(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if matches!(
        source.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EADDRNOTAVAIL)
    ))
}

/// True when an `accept()` failed for want of file descriptors (per process or system).
fn out_of_fds(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The spare descriptor kept for refusing clients while out of descriptors.
fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// This process's soft limit on open files (`ulimit -n`) from `/proc/self/limits`, or,
/// when that cannot be opened (out of descriptors), the value last read.
fn fd_limit() -> String {
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
