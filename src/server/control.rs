//! A connection on its `control` thread: what its first bytes say it is ([`opener`]),
//! then a pinperf client's handshake and test, a stream of the running test, or a
//! connection in iperf3's protocol, handed to [`crate::iperf3::session`].

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::allow;
use super::auth;
use super::canonical;
use super::handshake::{Turned, handshake};
use super::relisten::{Listening, listen_after, listen_for};
use super::serverlog;
use super::shared::{Handover, log_refused, penalize, take_slot, took_the_slot_for_nothing};
use super::test_run::run_test;
use crate::error::{Error, IoContext, Result};
use crate::timeouts;
use crate::wire::{self, Control, ControlMsg};

/// One connection, on its `control` thread: the handshake under its deadline, then (once
/// admitted and the slot taken) the test. `None` when no test was admitted; otherwise the
/// test's result.
pub(super) fn session(mut stream: TcpStream, ho: &Handover) -> Option<Result<()>> {
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
pub(super) enum Opener {
    /// pinperf's preamble (or silence, or anything else: the handshake names it).
    Pinperf,
    /// An iperf3 cookie: an iperf3 client, or a stream of the running iperf3 test.
    Iperf3,
    /// A byte with [`wire::STREAM_MARK`]: a data or echo connection of the running
    /// pinperf test.
    Stream,
}

/// What the client's first bytes, within [`timeouts::SNIFF`], say it is.
pub(super) fn opener(stream: &TcpStream, deadline: Instant) -> Opener {
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
