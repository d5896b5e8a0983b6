//! The control protocol: an 8-byte preamble each way (`pinperf\n`), then frames of a
//! big-endian u32 length and a JSON [`ControlMsg`]. Frames above [`MAX_FRAME`] and
//! anything that does not parse are protocol errors naming the peer, never panics.
//! Data connections open with an 11-byte [`DataHello`] (test cookie, stream id, kind): each
//! stream has a data connection and, with block RTT on, an echo connection on which the
//! receiver returns block headers, so the data connection carries data one way only.
//!
//! Sequence: Hello → Welcome|Refuse; with authentication, AuthRequest → Challenge,
//! AuthProof (see [`crate::server::auth`]); Params → Accept|Refuse; data connections (with `-u`:
//! UDP hellos, then UdpReady); Start; Row… (the server's receiver intervals, live) and,
//! when the server sends (`-R`, `--bidir`), SenderInterval… (its sender intervals); Done
//! (the server's totals); Bye. Either side may send
//! Error{reason} at any time to abort.

pub mod measure;
pub(crate) mod params;
pub(crate) mod udp_rendezvous;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::data::pin::PinPlan;
use crate::error::{Error, Result};
use crate::os::cpu::CpuReport;
use crate::os::netinfo::{PathInfo, WindowGrant};
use crate::timeouts;
use crate::wire::measure::{ClosedInterval, UdpSlice};
pub use crate::wire::params::TestParams;

/// Bumped on any incompatible change; a mismatch is refused with both versions named.
/// 4: the parameters carry `-S` (a version-3 server would ignore it and send unmarked).
/// 5: and `-M`, `-N` (a version-4 server would ignore them: a Nagled `-R` under `-N`).
pub const PROTOCOL_VERSION: u32 = 5;
/// First bytes each side sends on the control connection.
pub const PREAMBLE: &[u8; 8] = b"pinperf\n";
/// Largest control frame accepted.
pub const MAX_FRAME: usize = 1 << 20;
/// The software string sent in Hello/Welcome.
pub const SOFTWARE: &str = concat!("pinperf ", env!("CARGO_PKG_VERSION"));

/// The server's yes: where to connect the streams and what it set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accept {
    pub data_port: u16,
    /// `-u`: the server's UDP socket for each stream and direction, in order.
    #[serde(default)]
    pub udp_ports: Vec<u16>,
    pub cookie: u64,
    pub window: WindowGrant,
    pub pin_plan: PinPlan,
    /// The server's [`crate::os::sys::host_mark`] for this cookie (absent from older servers):
    /// equal to the client's when both ends run on one host, in any namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<u64>,
    /// The server's host name (absent from older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_name: Option<String>,
    /// `--realtime` granted: the server's UDP receivers run at real-time priority (absent
    /// from older servers, which ignore the request, and where the server does not receive).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub realtime: bool,
}

/// One receiver interval: bytes each stream read in `[begin_us, end_us)` since the
/// server's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiverRow {
    pub index: u32,
    pub begin_us: u64,
    pub end_us: u64,
    pub bytes: Vec<u64>,
    /// `-u`: each stream's datagrams over the interval (empty for TCP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub udp: Vec<UdpSlice>,
}

/// The server's totals, sent once every stream there has ended: what its receivers read
/// (the direction the client sends) and what its senders wrote (`-R`, `--bidir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiverDone {
    pub bytes: Vec<u64>,
    /// Bytes each server sender wrote (empty when the server did not send).
    #[serde(default)]
    pub sent: Vec<u64>,
    /// From the server's start to the last stream's EOF.
    pub elapsed_us: u64,
    pub path: PathInfo,
    /// The server's CPU over the test.
    pub cpu: Option<CpuReport>,
    /// The server's kernel TCP drop counters over the test (absent from older servers).
    #[serde(default)]
    pub kernel: Option<crate::os::kstat::KernelReport>,
    /// `--get-server-output`: the server's own lines about the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output: Option<String>,
    /// Each server sender's retransmits after `-O`, in `sent`'s order, where they come
    /// only with the totals (an iperf3 server's results; a pinperf server's rows carry
    /// them, and this stays empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retransmits: Vec<Option<u64>>,
}

/// Every control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    Hello {
        version: u32,
        software: String,
    },
    Welcome {
        version: u32,
        software: String,
    },
    Refuse {
        reason: String,
    },
    Params(TestParams),
    Accept(Accept),
    /// `-u`: the client holds the server's answer to every stream's hello.
    UdpReady,
    Start,
    Row(ReceiverRow),
    SenderInterval(ClosedInterval),
    Done(Box<ReceiverDone>),
    Error {
        reason: String,
    },
    Bye,
    /// Client → server, after Welcome (with `--auth`): who, and the client's nonce (hex).
    AuthRequest {
        user: String,
        nonce: String,
    },
    /// Server → client: the server's fresh nonce (hex).
    Challenge {
        nonce: String,
    },
    /// Client → server: HMAC-SHA256 over both nonces and the Params that follow (hex);
    /// see [`crate::server::auth`].
    AuthProof {
        mac: String,
    },
}

impl ControlMsg {
    /// Short name for "expected X, got Y" errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ControlMsg::Hello { .. } => "hello",
            ControlMsg::Welcome { .. } => "welcome",
            ControlMsg::Refuse { .. } => "refuse",
            ControlMsg::Params(_) => "params",
            ControlMsg::Accept(_) => "accept",
            ControlMsg::UdpReady => "udp_ready",
            ControlMsg::Start => "start",
            ControlMsg::Row(_) => "row",
            ControlMsg::SenderInterval(_) => "sender interval",
            ControlMsg::Done(_) => "done",
            ControlMsg::Error { .. } => "error",
            ControlMsg::Bye => "bye",
            ControlMsg::AuthRequest { .. } => "auth_request",
            ControlMsg::Challenge { .. } => "challenge",
            ControlMsg::AuthProof { .. } => "auth_proof",
        }
    }

    /// The error for this message from `peer` where `expected` should have come.
    pub(crate) fn unexpected(&self, peer: SocketAddr, expected: &str) -> Error {
        Error::Protocol {
            peer,
            what: format!("expected {expected}, got {}", self.kind()),
        }
    }
}

/// Encodes one frame (length + JSON).
pub fn encode(msg: &ControlMsg) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("control messages always serialize");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// The body of the Params frame for `test`, byte for byte as [`encode`] sends it (what
/// the authentication MAC covers).
pub fn params_body(test: &TestParams) -> Vec<u8> {
    let frame = encode(&ControlMsg::Params(test.clone()));
    frame[4..].to_vec()
}

/// Reads one frame. `peer` names the other side in errors.
pub fn read_frame(reader: &mut impl Read, peer: SocketAddr) -> Result<ControlMsg> {
    read_frame_raw(reader, peer).map(|(msg, _)| msg)
}

/// Reads one frame and returns it with its body as received.
pub fn read_frame_raw(reader: &mut impl Read, peer: SocketAddr) -> Result<(ControlMsg, Vec<u8>)> {
    let mut len = [0u8; 4];
    reader
        .read_exact(&mut len)
        .map_err(|e| read_error(e, peer))?;
    let len = frame_len(&len, peer)?;
    let mut body = vec![0u8; len];
    reader
        .read_exact(&mut body)
        .map_err(|e| read_error(e, peer))?;
    let msg = serde_json::from_slice(&body).map_err(|e| Error::Protocol {
        peer,
        what: format!("unreadable control message ({e})"),
    })?;
    Ok((msg, body))
}

/// The peer said nothing within a step's deadline.
pub(crate) fn no_answer(peer: SocketAddr) -> Error {
    Error::Test(format!(
        "{peer} sent nothing on the control connection in time"
    ))
}

fn read_error(e: io::Error, peer: SocketAddr) -> Error {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            Error::Test(format!("{peer} closed the control connection"))
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => no_answer(peer),
        _ => Error::io(format!("read control message from {peer}"), e),
    }
}

/// Sends our preamble and checks the peer's.
pub(crate) fn exchange_preamble(
    stream: &mut TcpStream,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<()> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("set control timeout", e))?;
    stream
        .write_all(PREAMBLE)
        .map_err(|e| Error::io(format!("write to {peer}"), e))?;
    check_preamble(stream, peer)
}

/// Reads the peer's preamble (ours was sent) and checks it.
pub(crate) fn check_preamble(stream: &mut TcpStream, peer: SocketAddr) -> Result<()> {
    let mut got = [0u8; 8];
    stream
        .read_exact(&mut got)
        .map_err(|e| read_error(e, peer))?;
    if &got != PREAMBLE {
        return Err(Error::Protocol {
            peer,
            what: format!("not a pinperf peer (it opened with {})", shown(&got)),
        });
    }
    Ok(())
}

/// Bytes a peer opened with, as a log can show them: quoted text when it is printable
/// ASCII (an HTTP request), else hex.
fn shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) => format!("{text:?}"),
        // Not auth's hex: auth sits above protocol (tests/layers.rs).
        _ => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("bytes {hex}")
        }
    }
}

/// The control connection: one reader (the owning thread) and a writer that several
/// threads may share (the server's reporter sends rows while its control thread waits).
pub(crate) struct Control {
    reader: Mutex<Inbox>,
    writer: Mutex<TcpStream>,
    pub peer: SocketAddr,
}

/// The reading side: the socket and the part of a frame read so far. Reads never go past
/// the frame at hand, so what follows it stays in the socket, where a caller that polls
/// the socket sees it; and no wait lasts longer than its caller asked, even when a peer
/// sends half a frame.
struct Inbox {
    sock: TcpStream,
    partial: Vec<u8>,
    /// When the frame at hand began to arrive.
    since: Option<Instant>,
}

/// One read's outcome.
enum Got {
    Frame(Box<ControlMsg>, Vec<u8>),
    /// Part of a frame.
    Part,
    /// Nothing within the wait.
    Nothing,
}

impl Inbox {
    /// One read of at most the rest of the frame at hand, waiting up to `wait`.
    fn step(&mut self, wait: Duration, peer: SocketAddr) -> Result<Got> {
        let have = self.partial.len();
        let want = match have {
            n if n < 4 => 4 - n,
            n => 4 + frame_len(&self.partial, peer)? - n,
        };
        self.sock
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .map_err(|e| Error::io("set control timeout", e))?;
        self.partial.resize(have + want, 0);
        let read = self.sock.read(&mut self.partial[have..]);
        self.partial.truncate(have + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => return Err(Error::Test(format!("{peer} closed the control connection"))),
            Ok(_) => {}
            Err(e) if is_wait(&e) => return Ok(Got::Nothing),
            Err(e) => return Err(read_error(e, peer)),
        }
        self.since.get_or_insert_with(Instant::now);
        if self.partial.len() < 4 || self.partial.len() < 4 + frame_len(&self.partial, peer)? {
            return Ok(Got::Part);
        }
        let body = self.partial.split_off(4);
        self.partial.clear();
        self.since = None;
        let msg = serde_json::from_slice(&body).map_err(|e| Error::Protocol {
            peer,
            what: format!("unreadable control message ({e})"),
        })?;
        Ok(Got::Frame(Box::new(msg), body))
    }
}

fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A frame's length from its first four bytes, within [`MAX_FRAME`].
fn frame_len(head: &[u8], peer: SocketAddr) -> Result<usize> {
    let len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(Error::Protocol {
            peer,
            what: format!(
                "control frame of {len} bytes (allowed 1 to {MAX_FRAME}): not a pinperf peer?"
            ),
        });
    }
    Ok(len)
}

impl Control {
    /// Wraps a connected control socket whose preamble has been exchanged.
    pub(crate) fn new(stream: TcpStream, peer: SocketAddr) -> Result<Self> {
        let writer = stream
            .try_clone()
            .map_err(|e| Error::io("clone control socket", e))?;
        writer
            .set_write_timeout(Some(timeouts::CONTROL_WRITE))
            .map_err(|e| Error::io("set control write timeout", e))?;
        Ok(Control {
            reader: Mutex::new(Inbox {
                sock: stream,
                partial: Vec::new(),
                since: None,
            }),
            writer: Mutex::new(writer),
            peer,
        })
    }

    /// Sends one message (whole frame under the writer lock).
    pub(crate) fn send(&self, msg: &ControlMsg) -> Result<()> {
        let frame = encode(msg);
        self.writer
            .lock()
            .write_all(&frame)
            .map_err(|e| Error::io(format!("send {} to {}", msg.kind(), self.peer), e))
    }

    /// Waits up to `timeout` for the next message, with its body as received. An `Error`
    /// message from the peer becomes [`Error::Test`] carrying its reason.
    pub(crate) fn recv_raw(&self, timeout: Duration) -> Result<(ControlMsg, Vec<u8>)> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.reader.lock();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(no_answer(self.peer));
            }
            if let Got::Frame(msg, body) = inbox.step(left, self.peer)? {
                return self.checked(*msg).map(|msg| (msg, body));
            }
        }
    }

    /// A failure seen here: when the peer closed or reset the connection it failed on
    /// (`peer_closed`), that is a consequence of something there (out of descriptors, a
    /// socket destroyed there, a peer that gave up), and the peer's word, if it says one
    /// within [`timeouts::PEER_WORD`] (past other messages in front of it, each handed to
    /// `other`, which says whether to keep waiting), leads ours (a client stopped for 13 s
    /// found its echo connection closed by a server that had given up on it; a server's
    /// stream read a reset after the client's own socket was destroyed). A failure of
    /// this end's own is the cause: it is returned at once, for the caller to say (an end
    /// that waited here for a peer waiting for it cost both half a second).
    pub(crate) fn with_their_word(
        &self,
        ours: Error,
        peer_closed: bool,
        mut other: impl FnMut(ControlMsg) -> bool,
    ) -> Error {
        if !peer_closed {
            return ours;
        }
        let deadline = Instant::now() + timeouts::PEER_WORD;
        loop {
            match self.poll(deadline.saturating_duration_since(Instant::now())) {
                // Its close, its error, or the control connection's own failure (destroyed
                // here, and the server then closed the streams) leads; not this end's
                // reading of a frame it cannot parse.
                Err(theirs @ (Error::Test(_) | Error::Io { .. })) => {
                    return Error::Test(format!("{theirs}; here: {ours}"));
                }
                Ok(Some(msg)) => {
                    if !other(msg) {
                        return ours;
                    }
                }
                _ => return ours,
            }
            if Instant::now() >= deadline {
                return ours;
            }
        }
    }

    /// Like [`Control::recv_raw`], but a timeout is `Ok(None)` (for polling loops). Half a
    /// frame stays buffered for the next call; one that has not been completed within
    /// [`timeouts::CONTROL_WRITE`] is an error.
    pub(crate) fn poll(&self, timeout: Duration) -> Result<Option<ControlMsg>> {
        let mut inbox = self.reader.lock();
        let deadline = Instant::now() + timeout;
        let mut wait = timeout;
        loop {
            match inbox.step(wait, self.peer)? {
                Got::Frame(msg, _) => return self.checked(*msg).map(Some),
                // The rest of a frame in flight comes at once, or on a later call (a
                // trickle never holds a call past its wait).
                Got::Part if Instant::now() < deadline => wait = Duration::ZERO,
                Got::Part | Got::Nothing => break,
            }
        }
        match inbox.since {
            Some(t) if t.elapsed() > timeouts::CONTROL_WRITE => Err(Error::Protocol {
                peer: self.peer,
                what: format!(
                    "sent part of a control message and nothing more for {:.0} s",
                    t.elapsed().as_secs_f64()
                ),
            }),
            _ => Ok(None),
        }
    }

    /// The peer's `Error` message is the test's error, carrying its reason (escaped: the
    /// peer's words reach a terminal and a log).
    fn checked(&self, msg: ControlMsg) -> Result<ControlMsg> {
        match msg {
            ControlMsg::Error { reason } => Err(Error::Test(format!(
                "{} reported: {}",
                self.peer,
                printable(&reason, usize::MAX)
            ))),
            msg => Ok(msg),
        }
    }

    /// The control socket, for socket-level reads by its owner (the kernel's RTT).
    pub(crate) fn socket(&self) -> parking_lot::MutexGuard<'_, TcpStream> {
        self.writer.lock()
    }

    /// Sends an Error message, ignoring failure (the connection may already be gone).
    pub(crate) fn abort(&self, reason: &str) {
        let _ = self.send(&ControlMsg::Error {
            reason: reason.to_string(),
        });
    }
}

/// First bytes of every data or echo connection: which test, which stream, which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataHello {
    pub cookie: u64,
    pub stream: u16,
    /// False: the data connection; true: the stream's echo connection.
    pub echo: bool,
    /// The stream of the direction the server sends (`-R`, `--bidir`).
    pub reverse: bool,
}

impl DataHello {
    pub const LEN: usize = 11;

    pub(crate) fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.cookie.to_le_bytes());
        b[8..10].copy_from_slice(&self.stream.to_le_bytes());
        b[10] = u8::from(self.echo) | u8::from(self.reverse) << 1;
        b
    }

    /// `None` for a kind byte other than 0 to 3 (bit 0: echo, bit 1: reverse).
    pub(crate) fn from_bytes(b: [u8; Self::LEN]) -> Option<Self> {
        Some(DataHello {
            cookie: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            stream: u16::from_le_bytes(b[8..10].try_into().expect("2 bytes")),
            echo: match b[10] {
                0..=3 => b[10] & 1 == 1,
                _ => return None,
            },
            reverse: b[10] & 2 == 2,
        })
    }
}

/// A fresh test cookie: the per-test secret the data and echo connections open with, 64
/// bits from the operating system's random source (unguessable, unlike a counter or a
/// clock), told only to the client that passed the handshake.
pub(crate) fn new_cookie() -> Result<u64> {
    getrandom::u64()
        .map(|c| c | STREAM_MARK)
        .map_err(|e| Error::Test(format!("read the system's random source: {e}")))
}

/// `text` from a peer as it may be printed or logged: control characters (newlines and
/// escapes included) written as `\u{..}`, at most `max` characters, so nothing a peer says
/// can forge a line of a log or drive a terminal.
pub fn printable(text: &str, max: usize) -> String {
    escaped(text.chars().take(max), |_| false)
}

/// Like [`printable`] for a message that may span lines of its own (an error carrying a
/// tool's output): newlines and tabs stay, every other control character is escaped.
pub fn printable_lines(text: &str) -> String {
    escaped(text.chars(), |c| c == '\n' || c == '\t')
}

fn escaped(chars: impl Iterator<Item = char>, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::new();
    for c in chars {
        match c.is_control() && !keep(c) {
            true => out.extend(c.escape_unicode()),
            false => out.push(c),
        }
    }
    out
}

/// Set in every cookie's first byte on the wire (its least significant): a connection to
/// the control port that opens with a byte at or above 0x80 is a [`DataHello`], neither
/// pinperf's preamble nor an iperf3 cookie (both ASCII), so one port serves them all.
pub(crate) const STREAM_MARK: u64 = 0x80;

/// Whether `first`, a connection's first byte, opens a [`DataHello`] ([`STREAM_MARK`]).
pub(crate) fn opens_a_stream(first: u8) -> bool {
    u64::from(first) & STREAM_MARK != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's words lose their control characters (a forged line, a terminal escape);
    /// a message of lines keeps its newlines and tabs only.
    #[test]
    fn a_peers_words_are_escaped_for_logs_and_terminals() {
        let words = "x\npinperf: refused\u{1b}]0;title\u{7}\tend";
        assert_eq!(
            printable(words, 100),
            "x\\u{a}pinperf: refused\\u{1b}]0;title\\u{7}\\u{9}end"
        );
        assert_eq!(printable(words, 3), "x\\u{a}p");
        assert_eq!(
            printable_lines(words),
            "x\npinperf: refused\\u{1b}]0;title\\u{7}\tend"
        );
    }

    fn peer() -> SocketAddr {
        "192.0.2.1:5301".parse().unwrap()
    }

    /// A connected pair on loopback: our `Control` and the peer's raw socket.
    fn pair() -> (Control, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let them = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (us, addr) = l.accept().unwrap();
        (Control::new(us, addr).unwrap(), them)
    }

    /// Half a frame never holds a polling loop longer than its wait (a peer that sent
    /// part of a message held it for 10 s); the rest completes it on a later poll.
    #[test]
    fn half_a_frame_does_not_block_a_poll() {
        let (ctl, mut them) = pair();
        let frame = encode(&ControlMsg::Start);
        them.write_all(&frame[..2]).unwrap();
        let t = Instant::now();
        assert!(ctl.poll(Duration::from_millis(20)).unwrap().is_none());
        them.write_all(&frame[2..5]).unwrap();
        assert!(ctl.poll(Duration::from_millis(20)).unwrap().is_none());
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "waited {:?}",
            t.elapsed()
        );
        // The rest, and the start of the next frame, which stays in the socket.
        them.write_all(&frame[5..]).unwrap();
        them.write_all(&frame[..3]).unwrap();
        let got = ctl.poll(Duration::from_secs(5)).unwrap();
        assert_eq!(got, Some(ControlMsg::Start));
        them.write_all(&frame[3..]).unwrap();
        assert_eq!(
            ctl.recv_raw(Duration::from_secs(5)).unwrap().0,
            ControlMsg::Start
        );
        // A peer's Error is the test's error; a bad length is named.
        them.write_all(&encode(&ControlMsg::Error {
            reason: "no".into(),
        }))
        .unwrap();
        let e = ctl.poll(Duration::from_secs(5)).unwrap_err().to_string();
        assert!(e.ends_with("reported: no"), "{e}");
        them.write_all(&[0xff; 4]).unwrap();
        let e = ctl.poll(Duration::from_secs(5)).unwrap_err().to_string();
        assert!(e.contains("control frame of 4294967295 bytes"), "{e}");
    }

    #[test]
    fn a_closed_connection_is_named_mid_frame_too() {
        let (ctl, mut them) = pair();
        them.write_all(&encode(&ControlMsg::Start)[..3]).unwrap();
        drop(them);
        let e = loop {
            match ctl.poll(Duration::from_millis(50)) {
                Ok(None) => continue,
                Ok(Some(m)) => panic!("no message was whole: {m:?}"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("closed the control connection"), "{e}");
    }

    /// A stream the peer reset, with the control connection failed too (destroyed here,
    /// and the peer then reset its streams): the control's failure leads, this
    /// end's stream follows. The stream alone, when the control has nothing to say.
    #[test]
    fn a_failed_control_connection_leads_a_streams_reset() {
        let (ctl, them) = pair();
        let ours = || Error::Test("stream-0: read: Connection reset by peer".into());
        let e = ctl.with_their_word(ours(), true, |_| true);
        assert_eq!(e.to_string(), ours().to_string());
        socket2::SockRef::from(&them)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(them);
        let e = ctl.with_their_word(ours(), true, |_| true).to_string();
        assert!(
            e.starts_with("read control message from ")
                && e.contains("Connection reset by peer")
                && e.ends_with("; here: stream-0: read: Connection reset by peer"),
            "{e}"
        );
    }

    #[test]
    fn frames_round_trip() {
        let msgs = [
            ControlMsg::Hello {
                version: 1,
                software: SOFTWARE.into(),
            },
            ControlMsg::Row(ReceiverRow {
                index: 2,
                begin_us: 1,
                end_us: 2,
                bytes: vec![3, 4],
                udp: Vec::new(),
            }),
            ControlMsg::Start,
        ];
        for msg in msgs {
            let frame = encode(&msg);
            assert_eq!(read_frame(&mut &frame[..], peer()).unwrap(), msg);
        }
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let cases: &[(&[u8], &str)] = &[
            (b"GET / HTTP/1.1\r\n", "control frame of 1195725856 bytes"),
            (&[0, 0, 0, 0], "control frame of 0 bytes"),
            (
                &[0, 0, 0, 3, b'{', b'x', b'}'],
                "unreadable control message",
            ),
            (&[0, 0, 0, 2, b'{', b'}'], "unreadable control message"),
        ];
        for (bytes, expected) in cases {
            let err = read_frame(&mut &bytes[..], peer()).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
        let err = read_frame(&mut &[0u8, 0][..], peer()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "192.0.2.1:5301 closed the control connection"
        );
    }

    #[test]
    fn data_hello_round_trips() {
        for (echo, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
            let h = DataHello {
                cookie: 0xdead_beef_1234,
                stream: 255,
                echo,
                reverse,
            };
            assert_eq!(DataHello::from_bytes(h.to_bytes()), Some(h));
        }
        let mut bad = DataHello {
            cookie: 1,
            stream: 0,
            echo: false,
            reverse: false,
        }
        .to_bytes();
        bad[10] = 7;
        assert_eq!(DataHello::from_bytes(bad), None);
        assert_ne!(new_cookie().unwrap(), new_cookie().unwrap());
    }
}
