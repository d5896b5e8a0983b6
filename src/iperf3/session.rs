//! A connection to `pinperf -s` that opened with an iperf3 cookie, as the server's
//! `control` thread hands it over ([`serve`]): a stream of the running iperf3 test, or a
//! new iperf3 test, admitted ([`server::read_params`]), given the slot and run
//! ([`server::run_test`]).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};

use crossbeam_channel::Sender;
use std::time::{Duration, Instant};

use super::server::{self, Admitted};
use super::{COOKIE_SIZE, Ctl};
use crate::error::{Error, Result};
use crate::server::relisten::Listening;
use crate::server::serverlog;
use crate::server::shared::{CookieStreams, Handover};

/// Serves a connection that opened with what looks like an iperf3 cookie (see
/// [`super::looks_like_cookie`]). `None` when no test was admitted; otherwise the test's
/// result.
pub(crate) fn serve(stream: TcpStream, ho: &Handover) -> Option<Result<()>> {
    let mut ctl = Ctl {
        sock: stream,
        peer: ho.peer,
    };
    let cookie = read_cookie(&mut ctl, ho)?;
    if let Some(test) = running(&cookie, ho) {
        hand_stream(ctl.sock, test, ho);
        return None;
    }
    let admitted = admit(&mut ctl, ho, &cookie)?;
    run(ctl, admitted, cookie, ho)
}

/// The whole cookie, read until the admission deadline (the acceptor's cut comes after
/// it): a cookie that stops short is named here.
fn read_cookie(ctl: &mut Ctl, ho: &Handover) -> Option<[u8; COOKIE_SIZE]> {
    let mut cookie = [0u8; COOKIE_SIZE];
    let left = ho.deadline.saturating_duration_since(Instant::now());
    let _ = ctl
        .sock
        .set_read_timeout(Some(left.max(Duration::from_millis(1))));
    let Err(e) = ctl.sock.read_exact(&mut cookie) else {
        return Some(cookie);
    };
    if ho.claim() {
        // Its first bytes looked like a cookie; the rest never came ("iperf3
        // cookie: Resource temporarily unavailable (os error 11)").
        let why = match crate::data::stream::is_timeout(&e) {
            true => format!(
                "it sent the start of an iperf3 cookie, then nothing for {:.1} s",
                left.as_secs_f64()
            ),
            false => format!("iperf3 cookie: {e}"),
        };
        ho.refused(None, "handshake", &why);
    }
    None
}

/// The running test's client and where its streams go, when `cookie` is its own (the
/// lock is not held while logging: a blocked log must not stall the test's end).
fn running(cookie: &[u8], ho: &Handover) -> Option<(SocketAddr, Sender<(u64, TcpStream)>)> {
    ho.shared
        .by_cookie
        .lock()
        .as_ref()
        .filter(|test| test.cookie == cookie)
        .map(|test| (test.client, test.streams.clone()))
}

/// Hands a stream connection to the running test, unless it comes from elsewhere than
/// the test's client: anyone on the path can read the cookie.
fn hand_stream(
    sock: TcpStream,
    (client, streams): (SocketAddr, Sender<(u64, TcpStream)>),
    ho: &Handover,
) {
    if !ho.claim() {
        return;
    }
    match ho.peer.ip() == client.ip() {
        true => {
            let _ = sock.set_read_timeout(None);
            let _ = streams.send((ho.id, sock));
        }
        false => {
            let reason = format!("an iperf3 stream connection, but the test belongs to {client}");
            ho.refused(None, "stranger", &reason);
        }
    }
}

/// The new test's parameters, read and checked by the server's limits, or `None` (the
/// client refused with iperf3's code, the refusal logged).
fn admit(ctl: &mut Ctl, ho: &Handover, cookie: &[u8]) -> Option<Admitted> {
    let cfg = ho.cfg;
    let refused = |ctl: &mut Ctl, why: &str, code: i32, reason: &str| {
        let _ = ctl.send_server_error(code, 0);
        if cfg.iperf3_documents {
            super::server_doc::print(&super::server_doc::render_early(ho.peer, cookie, reason));
        }
        ho.refused(None, why, &format!("iperf3 client: {reason}"));
    };
    // Refused before its parameters are read: nothing an unauthenticated client sends
    // reaches the log.
    if cfg.auth.is_some() && cfg.iperf3_gate.is_none() {
        if ho.claim() {
            let reason = "this server requires pinperf's authentication (--auth-keys)";
            refused(ctl, "auth", super::IEAUTHTEST, reason);
        }
        return None;
    }
    let read = server::read_params(ctl, cfg, ho.deadline);
    // A handshake the acceptor cut was logged there.
    if !ho.claim() {
        return None;
    }
    match read {
        Ok(Ok(admitted)) => Some(admitted),
        Ok(Err(u)) if u.code == super::IEAUTHTEST => {
            // Credentials that failed count against their source, as pinperf's do.
            let lockout = cfg.public().then(|| ho.penalize()).flatten();
            let reason = match lockout {
                Some(l) => format!("{}; {}", u.reason, crate::server::allow::lockout_words(l)),
                None => u.reason,
            };
            refused(ctl, "auth", u.code, &reason);
            None
        }
        Ok(Err(u)) => {
            refused(ctl, "params", u.code, &u.reason);
            None
        }
        Err(e) => {
            ho.refused(None, "handshake", &e.to_string());
            None
        }
    }
}

/// Runs the admitted test once it has the slot, its cookie registered for its streams,
/// and logs how it ended.
fn run(
    mut ctl: Ctl,
    admitted: Admitted,
    cookie: [u8; COOKIE_SIZE],
    ho: &Handover,
) -> Option<Result<()>> {
    let (cfg, peer) = (ho.cfg, ho.peer);
    // Busy and the rate limit are iperf3's ACCESS_DENIED: its client says the server is
    // busy, "try again later" (iperf3 has no code for a rate limit; as SERVER_ERROR it
    // read "an option you are trying to set is not implemented yet").
    let _release = match ho.take_slot(admitted.test.run_time()) {
        Ok(guard) => guard,
        Err(r) => {
            let _ = ctl.send_state(super::ACCESS_DENIED);
            ho.refused(None, r.why, &r.to_log);
            return None;
        }
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    *ho.shared.by_cookie.lock() = Some(CookieStreams {
        cookie: cookie.to_vec(),
        client: peer,
        streams: tx,
    });
    let opening = server::opening_line(peer, &admitted.test);
    if !cfg.quiet {
        serverlog::test_start(peer, admitted.user.as_deref(), &admitted.test);
        serverlog::message(opening.clone());
    }
    let listening = Listening::of(&admitted.test);
    if !admitted.test.udp {
        ho.listen_for(listening);
    }
    let t0 = Instant::now();
    let user = admitted.user.clone();
    let mut doc = cfg.iperf3_documents.then(|| server::Document {
        cookie: cookie.to_vec(),
        value: None,
    });
    let slot = ho.slot();
    let result = server::run_test(&mut ctl, admitted, &rx, &opening, cfg, slot, doc.as_mut());
    match (doc.and_then(|d| d.value), &result) {
        (Some(value), _) => super::server_doc::print(&value),
        // It failed before its streams were connected: no rows, the error.
        (None, Err(e)) if cfg.iperf3_documents => super::server_doc::print(
            &super::server_doc::render_early(peer, &cookie, &e.to_string()),
        ),
        _ => {}
    }
    let result = ho.judged(result);
    *ho.shared.by_cookie.lock() = None;
    ho.listen_after(listening);
    ho.slot().finishing();
    Some(logged(result, t0, user.as_deref(), ho))
}

/// The test's end in the server's log.
fn logged(
    result: Result<(u64, u64)>,
    t0: Instant,
    user: Option<&str>,
    ho: &Handover,
) -> Result<()> {
    let (quiet, peer) = (ho.cfg.quiet, ho.peer);
    match result {
        Ok((received, sent)) => {
            if !quiet {
                let secs = t0.elapsed().as_secs_f64();
                serverlog::test_end(peer, received, sent, secs, || {
                    server::done_line(peer, received, sent)
                });
            }
            Ok(())
        }
        Err(Error::Exceeded(why)) => {
            ho.refused(user, "exceeded", &why);
            Err(Error::Exceeded(why))
        }
        Err(e) => {
            if !quiet {
                serverlog::failed(Some(peer), user, "iperf3 test", &e.to_string());
            }
            Err(e)
        }
    }
}
