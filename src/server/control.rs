//! A connection on its `control` thread: what its first bytes say it is ([`opener`]),
//! then a pinperf client's handshake and test, a stream of the running test, or a
//! connection in iperf3's protocol, handed to [`crate::iperf3::session`].

use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::allow;
use super::auth;
use super::canonical;
use super::handshake::{Admitted, Turned, handshake};
use super::relisten::Listening;
use super::serverlog;
use super::shared::Handover;
use super::test_run::run_test;
use crate::error::{Error, IoContext, Result};
use crate::timeouts;
use crate::wire::{self, Control, ControlMsg};

/// One connection, on its `control` thread: the handshake under its deadline, then (once
/// admitted and the slot taken) the test. `None` when no test was admitted; otherwise the
/// test's result.
pub(super) fn session(stream: TcpStream, ho: &Handover) -> Option<Result<()>> {
    let _ = stream.set_nodelay(true);
    match opener(&stream, ho.deadline) {
        Opener::Iperf3 => crate::iperf3::session::serve(stream, ho),
        Opener::Stream => {
            hand_stream(stream, ho);
            None
        }
        Opener::Pinperf => {
            let (ctl, ctl_fd, local) = open_control(stream, ho)?;
            let (test, user) = admit(&ctl, local, ho)?;
            run(ctl, ctl_fd, test, user.as_deref(), ho)
        }
    }
}

/// A data or echo connection to the control port goes to the test whose streams connect.
fn hand_stream(stream: TcpStream, ho: &Handover) {
    if !ho.claim() {
        return;
    }
    match ho.shared.streams.lock().as_ref() {
        Some(test) => {
            let _ = test.send(Ok((stream, ho.peer)));
        }
        None => {
            let why = "a data connection while no test's streams connect";
            ho.refused(None, "stream", why);
        }
    }
}

/// A handshake that failed (not refused): logged here, unless the acceptor cut it and
/// logged that.
fn failed(ho: &Handover, e: &Error) {
    if ho.claim() {
        ho.refused(None, "handshake", &e.to_string());
    }
}

/// The control connection once preambles are exchanged, its descriptor (watched while the
/// data connections arrive; valid while the connection owns the socket), and the address
/// the client reached: the data listener sits on it (an IPv4 client of the dual-stack
/// listener: on that IPv4 address), so the data connections take its path.
fn open_control(mut stream: TcpStream, ho: &Handover) -> Option<(Arc<Control>, RawFd, SocketAddr)> {
    let left = ho.deadline.saturating_duration_since(Instant::now());
    let opened = wire::exchange_preamble(&mut stream, ho.peer, left.max(Duration::from_millis(1)))
        .and_then(|()| stream.local_addr().op(|| "read control address".into()));
    let local = opened.inspect_err(|e| failed(ho, e)).ok()?;
    let ctl_fd = stream.as_raw_fd();
    let ctl = Control::new(stream, ho.peer)
        .inspect_err(|e| failed(ho, e))
        .ok()?;
    Some((Arc::new(ctl), ctl_fd, canonical(local)))
}

/// The handshake: the admitted test and its user, or `None` (refused, or broken).
fn admit(ctl: &Control, local: SocketAddr, ho: &Handover) -> Option<(Admitted, Option<String>)> {
    let cfg = ho.cfg;
    match handshake(ctl, local, cfg, ho.deadline) {
        Ok(pair) => ho.claim().then_some(pair),
        Err(Turned::Refused(mut r)) => {
            if ho.claim() {
                // Credentials that failed, on a server with keys: not a client that gave
                // none, nor one that gave some to a server without keys.
                if r.why == "auth"
                    && r.to_client == auth::FAILED
                    && cfg.auth.is_some()
                    && cfg.public()
                    && let Some(lockout) = ho.penalize()
                {
                    let words = allow::lockout_words(lockout);
                    r.to_client = format!("{}; {words}", r.to_client);
                    r.to_log = format!("{}; {words}", r.to_log);
                }
                let _ = ctl.send(&ControlMsg::Refuse {
                    reason: r.to_client,
                });
                ho.refused(r.user.as_deref(), r.why, &r.to_log);
            }
            None
        }
        Err(Turned::Broken(e)) => {
            failed(ho, &e);
            None
        }
    }
}

/// The admitted test, once it has the slot (`None` if it does not), and its end in the
/// log.
fn run(
    ctl: Arc<Control>,
    ctl_fd: RawFd,
    test: Admitted,
    user: Option<&str>,
    ho: &Handover,
) -> Option<Result<()>> {
    let (cfg, peer, shared) = (ho.cfg, ho.peer, ho.shared);
    let _release = match ho.take_slot(test.params.run_time()) {
        Ok(guard) => guard,
        Err(r) => {
            let _ = ctl.send(&ControlMsg::Refuse {
                reason: r.to_client,
            });
            ho.refused(user, r.why, &r.to_log);
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
        ho.listen_for(listening);
        (rx, listening)
    });
    let arrivals = one_port.as_ref().map(|(rx, _)| rx);
    let result = run_test(&ctl, ctl_fd, test, cfg, &shared.slot, arrivals);
    if let Some((_, listening)) = one_port {
        *shared.streams.lock() = None;
        ho.listen_after(listening);
    }
    shared.slot.finishing();
    let result = ho.judged(result);
    if let Err(e) = &result {
        ctl.abort(&e.to_string());
        match e {
            Error::Exceeded(why) => ho.refused(user, "exceeded", why),
            e if !cfg.quiet => serverlog::error(Some(peer), user, &e.to_string()),
            _ => {}
        }
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
