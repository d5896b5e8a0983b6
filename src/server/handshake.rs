//! A pinperf client's control handshake, message by message under its deadline, to an
//! admitted test or a refusal.

use std::net::SocketAddr;
use std::time::Instant;

use super::admission::{Handshake, Refusal, Step, Ticket};
use crate::config::ServerConfig;
use crate::data::pin::PinPlan;
use crate::error::Error;
use crate::wire::{self, Control, TestParams};

/// A test that passed the handshake: what the rest of the test runs on.
pub(super) struct Admitted {
    pub(super) params: TestParams,
    pub(super) plan: PinPlan,
    /// The address the client reached; the data listener sits on it.
    pub(super) local: SocketAddr,
    /// The secret the test's data and echo connections open with.
    pub(super) cookie: u64,
}

/// How a handshake ended without a test.
pub(super) enum Turned {
    /// Refused with a reason the client hears.
    Refused(Refusal),
    /// Not the protocol, gone, or out of time.
    Broken(Error),
}

/// The handshake of one connection, by [`Handshake`], each message read within what is
/// left before `deadline` (so a trickling peer cannot stretch a read; the acceptor cuts
/// one stuck elsewhere [`crate::timeouts::HANDSHAKE_CUT_AFTER`] past it). Returns the admitted
/// test and its user.
pub(super) fn handshake(
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
        // A server that asks iperf3's clients for credentials and has none of pinperf's
        // own lets no pinperf client test unasked (said after its hello is read, so the
        // refusal is not lost to a reset).
        if cfg.iperf3_gate.is_some() && cfg.auth.is_none() {
            let reason = "this server takes iperf3's RSA authentication only: --peer iperf3 \
                          --username USER --rsa-public-key-path FILE";
            return Err(Turned::Refused(crate::server::admission::Refusal::plain(
                "auth",
                reason.into(),
                None,
            )));
        }
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
