//! Admission: the server's control handshake as a state machine without I/O, and the
//! registry of handshakes in progress.
//!
//! [`Handshake`] takes each decoded control message (with its body as received) and says
//! what to do: reply, wait for more, refuse with a reason, or admit the test. It runs on the
//! connection's `control` thread before the test slot is touched, so a peer that is slow,
//! silent, hostile or unauthenticated never holds the slot; the fuzz test drives it
//! directly. Order: Hello → Welcome; with `--auth-keys`, AuthRequest → Challenge, AuthProof;
//! Params → admitted (parameters valid, pin plan made) or refused.
//!
//! [`Handshakes`] holds every handshake in progress (at most a cap, each with a deadline); the
//! acceptor cuts the expired ones and, when full, the oldest, by shutting their sockets,
//! which ends their threads' blocking reads at once.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::data::pin::{self, Affinity, PinPlan};
use crate::server::auth::{self, FAILED, Keys, NONCE_LEN};
use crate::timeouts;
use crate::wire::params::{Limits, TestParams};
use crate::wire::{ControlMsg, PROTOCOL_VERSION, SOFTWARE};

/// What the server does with one message of the handshake.
// One per handshake message, moved once: its size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Step {
    /// Send this and read on.
    Reply(ControlMsg),
    /// Read on.
    Wait,
    /// The handshake is complete: the test may take the slot.
    Admit(Box<Ticket>),
    /// Send the client `Refuse` with this reason; log it.
    Refuse(Refusal),
    /// Not the protocol: close (the error names what came instead).
    Broken(String),
}

/// A refused handshake: what the client hears, what the log says and the reason's word.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// `auth`, `params`, `version` (see the server log's `why`).
    pub why: &'static str,
    /// Sent to the client. For authentication, always [`FAILED`].
    pub to_client: String,
    /// For the server's log: which part failed.
    pub to_log: String,
    /// The user the client named, if any.
    pub user: Option<String>,
}

impl Refusal {
    /// A refusal whose reason is both what the client hears and what the log says.
    pub fn plain(why: &'static str, reason: String, user: Option<String>) -> Refusal {
        Refusal {
            why,
            to_client: reason.clone(),
            to_log: reason,
            user,
        }
    }
}

/// An admitted test's parameters, pin plan and authenticated user.
#[derive(Debug)]
pub struct Ticket {
    pub(crate) params: TestParams,
    pub(crate) plan: PinPlan,
    pub user: Option<String>,
}

impl Ticket {
    /// Streams the test will run.
    pub fn streams(&self) -> u16 {
        self.params.streams
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Hello,
    AuthRequest,
    AuthProof,
    Params,
    Done,
}

/// One connection's handshake (see the module doc).
pub struct Handshake {
    state: State,
    keys: Option<Keys>,
    limits: Limits,
    affinity: Affinity,
    server_nonce: [u8; NONCE_LEN],
    client_nonce: [u8; NONCE_LEN],
    user: Option<String>,
    proof: Vec<u8>,
}

impl Handshake {
    pub(crate) fn new(
        keys: Option<Keys>,
        limits: Limits,
        affinity: Affinity,
    ) -> crate::Result<Self> {
        Ok(Handshake {
            state: State::Hello,
            server_nonce: if keys.is_some() {
                auth::random_bytes()?
            } else {
                [0; NONCE_LEN]
            },
            keys,
            limits,
            affinity,
            client_nonce: [0; NONCE_LEN],
            user: None,
            proof: Vec::new(),
        })
    }

    /// A handshake under the protocol's own limits and automatic pinning, with or
    /// without keys (for tests and fuzzing).
    pub fn with_protocol_limits(keys: Option<Keys>) -> crate::Result<Self> {
        Handshake::new(keys, Limits::PROTOCOL, Affinity::Auto)
    }

    /// The server's challenge nonce (tests compute the MAC a client would).
    pub fn server_nonce(&self) -> [u8; NONCE_LEN] {
        self.server_nonce
    }

    fn auth_failed(&self, to_log: impl Into<String>) -> Step {
        Step::Refuse(self.refusal(to_log))
    }

    /// An authentication refusal, in the same words whatever failed.
    fn refusal(&self, to_log: impl Into<String>) -> Refusal {
        Refusal {
            why: "auth",
            to_client: FAILED.into(),
            to_log: to_log.into(),
            user: self.user.clone(),
        }
    }

    /// The next message from the client, with its frame body exactly as received.
    pub fn input(&mut self, msg: ControlMsg, body: &[u8]) -> Step {
        match self.state {
            State::Hello => self.hello(msg),
            State::AuthRequest => self.auth_request(msg),
            State::AuthProof => self.auth_proof(msg),
            State::Params => self.params(msg, body),
            State::Done => expected("nothing more", &msg),
        }
    }

    /// The first message: Hello in this server's protocol version.
    fn hello(&mut self, msg: ControlMsg) -> Step {
        match msg {
            ControlMsg::Hello { version, .. } if version == PROTOCOL_VERSION => {
                self.state = if self.keys.is_some() {
                    State::AuthRequest
                } else {
                    State::Params
                };
                Step::Reply(ControlMsg::Welcome {
                    version: PROTOCOL_VERSION,
                    software: SOFTWARE.into(),
                })
            }
            ControlMsg::Hello { version, software } => {
                self.state = State::Done;
                let reason = format!(
                    "{} speaks protocol {version}; this server ({SOFTWARE}) speaks {PROTOCOL_VERSION}",
                    crate::wire::printable(&software, 64)
                );
                Step::Refuse(Refusal::plain("version", reason, None))
            }
            other => expected("hello", &other),
        }
    }

    /// With keys: the client's user and nonce, answered with the server's challenge.
    fn auth_request(&mut self, msg: ControlMsg) -> Step {
        let ControlMsg::AuthRequest { user, nonce } = msg else {
            self.state = State::Done;
            return Step::Refuse(Refusal {
                to_client: auth::REQUIRED.into(),
                ..self.refusal(format!("no credentials (the client sent {})", msg.kind()))
            });
        };
        if auth::check_user(&user).is_err() {
            self.state = State::Done;
            return self.auth_failed("unusable user name");
        }
        self.user = Some(user);
        let Some(nonce) = auth::from_hex::<NONCE_LEN>(&nonce) else {
            self.state = State::Done;
            return self.auth_failed("malformed client nonce");
        };
        self.client_nonce = nonce;
        self.state = State::AuthProof;
        Step::Reply(ControlMsg::Challenge {
            nonce: auth::to_hex(&self.server_nonce),
        })
    }

    /// With keys: the client's proof, checked against the Params message that follows.
    fn auth_proof(&mut self, msg: ControlMsg) -> Step {
        let ControlMsg::AuthProof { mac } = msg else {
            self.state = State::Done;
            return self.auth_failed(format!("no proof (the client sent {})", msg.kind()));
        };
        match auth::from_hex::<{ auth::MAC_LEN }>(&mac) {
            Some(m) => {
                self.proof = m.to_vec();
                self.state = State::Params;
                Step::Wait
            }
            None => {
                self.state = State::Done;
                self.auth_failed("malformed proof")
            }
        }
    }

    /// The test's parameters: the proof verified over their body (with keys), then the
    /// server's limits and a pin plan; the test is admitted or refused.
    fn params(&mut self, msg: ControlMsg, body: &[u8]) -> Step {
        let params = match msg {
            ControlMsg::Params(params) => params,
            ControlMsg::AuthRequest { .. } => {
                self.state = State::Done;
                let reason = "this server does not use authentication (it has no --auth-keys); \
                              run the client without --auth"
                    .to_string();
                return Step::Refuse(Refusal::plain("auth", reason, None));
            }
            other => return expected("params", &other),
        };
        self.state = State::Done;
        if let Some(refused) = self.unproven(body) {
            return refused;
        }
        let mut params = params;
        params.fit_budget(&self.limits);
        if let Err(reason) = params.validate(&self.limits) {
            return Step::Refuse(Refusal::plain("params", reason, self.user.clone()));
        }
        let n = params.threads();
        let affinity = params.pin.as_ref().unwrap_or(&self.affinity);
        match pin::plan(affinity, n, &pin::allowed_cpus()) {
            Ok(plan) => Step::Admit(Box::new(Ticket {
                params,
                plan,
                user: self.user.clone(),
            })),
            Err(reason) => {
                let reason = format!("remote -A: {reason}");
                Step::Refuse(Refusal::plain("params", reason, self.user.clone()))
            }
        }
    }

    /// With keys and a user: the refusal when the proof does not match the Params `body`.
    fn unproven(&self, body: &[u8]) -> Option<Step> {
        let (Some(keys), Some(user)) = (&self.keys, &self.user) else {
            return None;
        };
        let (secret, known) = keys.secret(user);
        let ok = auth::verify(
            secret,
            user,
            &self.server_nonce,
            &self.client_nonce,
            body,
            &self.proof,
        );
        (!(ok && known)).then(|| {
            self.auth_failed(if known {
                "wrong secret, or the exchange was replayed or altered"
            } else {
                "unknown user"
            })
        })
    }
}

/// The step for a message out of order: not the protocol.
fn expected(what: &str, got: &ControlMsg) -> Step {
    Step::Broken(format!("expected {what}, got {}", got.kind()))
}

/// One handshake in progress.
struct Entry {
    id: u64,
    peer: SocketAddr,
    deadline: Instant,
    /// A duplicate of the connection, to cut it.
    sock: TcpStream,
}

/// The handshakes in progress; see the module doc.
pub(crate) struct Handshakes {
    entries: Mutex<Vec<Entry>>,
    next_id: std::sync::atomic::AtomicU64,
    cap: usize,
}

/// A handshake that was cut, for the log.
pub(crate) struct Cut {
    pub peer: SocketAddr,
    pub reason: String,
}

impl Handshakes {
    pub(crate) fn new(cap: usize) -> Handshakes {
        Handshakes {
            entries: Mutex::new(Vec::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
            cap,
        }
    }

    /// Registers a new handshake; when the registry is full, the oldest one is cut and
    /// returned. `None` when the connection cannot be duplicated (it should be closed).
    pub(crate) fn add(
        &self,
        stream: &TcpStream,
        peer: SocketAddr,
        allowed: Duration,
    ) -> Option<(u64, Option<Cut>)> {
        let sock = stream.try_clone().ok()?;
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut entries = self.entries.lock();
        let cut = (entries.len() >= self.cap).then(|| {
            let oldest = entries.remove(0);
            let _ = oldest.sock.shutdown(std::net::Shutdown::Both);
            Cut {
                peer: oldest.peer,
                reason: format!(
                    "handshake cut: {} handshakes in progress (the server's limit), this the oldest",
                    self.cap
                ),
            }
        });
        entries.push(Entry {
            id,
            peer,
            deadline: Instant::now() + allowed,
            sock,
        });
        Some((id, cut))
    }

    /// Cuts every handshake [`timeouts::HANDSHAKE_CUT_AFTER`] past its deadline.
    pub(crate) fn cut_expired(&self, now: Instant) -> Vec<Cut> {
        let mut cut = Vec::new();
        self.entries.lock().retain(|e| {
            if now < e.deadline + timeouts::HANDSHAKE_CUT_AFTER {
                return true;
            }
            let _ = e.sock.shutdown(std::net::Shutdown::Both);
            cut.push(Cut {
                peer: e.peer,
                reason: "handshake cut: not complete by its deadline".into(),
            });
            false
        });
        cut
    }

    /// Ends a handshake's registration; false when it had been cut meanwhile.
    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut entries = self.entries.lock();
        match entries.iter().position(|e| e.id == id) {
            Some(i) => {
                entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The deadline of handshake `id`.
    pub(crate) fn deadline(&self, id: u64) -> Option<Instant> {
        self.entries
            .lock()
            .iter()
            .find(|e| e.id == id)
            .map(|e| e.deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::params_body;

    fn hello() -> ControlMsg {
        ControlMsg::Hello {
            version: PROTOCOL_VERSION,
            software: "t".into(),
        }
    }

    fn params() -> TestParams {
        TestParams {
            streams: 2,
            ..TestParams::defaults()
        }
    }

    #[test]
    fn without_keys_hello_then_params_admits() {
        let mut h = Handshake::with_protocol_limits(None).unwrap();
        assert!(matches!(
            h.input(hello(), b""),
            Step::Reply(ControlMsg::Welcome { .. })
        ));
        let p = params();
        match h.input(ControlMsg::Params(p.clone()), &params_body(&p)) {
            Step::Admit(t) => assert_eq!((t.streams(), t.user), (2, None)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_keys_only_the_right_mac_over_these_params_admits() {
        let keys = Keys::parse("alice:s3cret\n").unwrap();
        let p = params();
        let run = |secret: &[u8], user: &str, sent: &TestParams, skip_auth: bool| {
            let mut h = Handshake::with_protocol_limits(Some(keys.clone())).unwrap();
            assert!(matches!(h.input(hello(), b""), Step::Reply(_)));
            if !skip_auth {
                let c = [7u8; NONCE_LEN];
                let req = ControlMsg::AuthRequest {
                    user: user.into(),
                    nonce: auth::to_hex(&c),
                };
                assert!(matches!(
                    h.input(req, b""),
                    Step::Reply(ControlMsg::Challenge { .. })
                ));
                // The MAC is made over `p`; `sent` may differ (a changed parameter).
                let mac = auth::mac(secret, user, &h.server_nonce(), &c, &params_body(&p));
                let proof = ControlMsg::AuthProof {
                    mac: auth::to_hex(&mac),
                };
                assert!(matches!(h.input(proof, b""), Step::Wait));
            }
            h.input(ControlMsg::Params(sent.clone()), &params_body(sent))
        };
        assert!(
            matches!(run(b"s3cret", "alice", &p, false), Step::Admit(t) if t.user.as_deref() == Some("alice"))
        );
        let mut changed = p.clone();
        changed.streams = 3;
        for (step, log) in [
            (
                run(b"wrong", "alice", &p, false),
                "wrong secret, or the exchange was replayed or altered",
            ),
            (run(b"s3cret", "mallory", &p, false), "unknown user"),
            (
                run(b"s3cret", "alice", &changed, false),
                "wrong secret, or the exchange was replayed or altered",
            ),
        ] {
            match step {
                Step::Refuse(r) => {
                    assert_eq!(
                        (r.why, r.to_client.as_str(), r.to_log.as_str()),
                        ("auth", FAILED, log)
                    )
                }
                other => panic!("{other:?}"),
            }
        }
        // No credentials at all: the client hears the fix, not the words for a guess.
        match run(b"s3cret", "alice", &p, true) {
            Step::Refuse(r) => assert_eq!(
                (r.why, r.to_client.as_str(), r.to_log.as_str()),
                (
                    "auth",
                    auth::REQUIRED,
                    "no credentials (the client sent params)"
                )
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_handshake_has_its_own_challenge() {
        let keys = Keys::parse("a:b").unwrap();
        let a = Handshake::with_protocol_limits(Some(keys.clone())).unwrap();
        let b = Handshake::with_protocol_limits(Some(keys)).unwrap();
        assert_ne!(a.server_nonce(), b.server_nonce());
    }
}
