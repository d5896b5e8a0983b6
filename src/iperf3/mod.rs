//! iperf3's control protocol, as iperf3 3.x speaks it (facts read from esnet/iperf's
//! `iperf_api.h`, `iperf_api.c`, `iperf_client_api.c`, `iperf_server_api.c`; the code is
//! ours): the client opens the control connection with a 37-byte cookie (36 characters of
//! `a-z2-7` and a NUL); the server drives the test with one signed state byte at a time
//! (`PARAM_EXCHANGE`, `CREATE_STREAMS`, `TEST_START`, `TEST_RUNNING`, then the client's
//! `TEST_END`, the server's `EXCHANGE_RESULTS` and `DISPLAY_RESULTS`, the client's
//! `IPERF_DONE`); parameters and results travel as JSON behind a 4-byte big-endian
//! length; every TCP stream connects to the control port and opens with the same cookie.
//! A refusal is `ACCESS_DENIED` (busy), or `SERVER_ERROR` followed by iperf3's error code
//! and an errno, both 4-byte big-endian.
//!
//! UDP streams connect by iperf3's handshake on the control port's number ([`udp`]) and
//! carry iperf3's datagram header ([`crate::data::udp::wire::Format::Iperf3`]); the results
//! then carry each stream's datagram counts and jitter.
//!
//! Everything read from the peer is bounded ([`MAX_JSON`]) and checked; nothing it sends
//! can panic this end. [`client`] runs pinperf's pinned engine against an iperf3 server,
//! [`server`] serves an iperf3 client from `pinperf -s`.
//!
//! iperf3 has no protocol version: a client sends `client_version`, which no server
//! reads, and a server ignores parameter keys it does not know (a newer client's option
//! is then silently not honoured). It refuses only with `ACCESS_DENIED` (busy) or
//! `SERVER_ERROR` and an error code. So "the wrong version" between iperf3 and pinperf
//! is a peer that does not speak this protocol at all (a pinperf client's preamble
//! leaves an iperf3 server waiting for the rest of a cookie), or a parameter one side
//! cannot honour: pinperf's server refuses those by name with iperf3's codes
//! ([`Params::to_test`]) rather than run a different test, and pinperf's client says in
//! words what an iperf3 server's code means ([`error_words`]).

pub mod auth;
pub mod client;
pub(crate) mod deadlines;
pub mod json;
pub mod json_stream;
pub mod personality;
pub mod server;
pub(crate) mod server_doc;
pub(crate) mod session;
pub(crate) mod text;
pub mod udp;
pub mod wording;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::data::stream::UdpSnapshot;
use crate::error::{Error, Result};
use crate::wire::params::{Limits, TestParams};

/// iperf3's smallest datagram: its header, with a 64-bit sequence.
pub const MIN_DATAGRAM: u64 = 16;
/// iperf3's smallest TCP block: any, as its tests have no echo connections.
pub const MIN_BLOCK: u64 = 1;

/// `limits` for a test with an iperf3 peer: its datagrams carry iperf3's shorter header
/// and its TCP blocks none, so they may be as small as iperf3's.
pub fn limits(limits: Limits) -> Limits {
    Limits {
        min_datagram: MIN_DATAGRAM,
        min_block: MIN_BLOCK,
        ..limits
    }
}

/// The cookie's size on the wire: 36 characters and a NUL.
pub const COOKIE_SIZE: usize = 37;
/// The characters of a cookie.
const COOKIE_CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// State bytes (iperf_api.h).
pub const TEST_START: i8 = 1;
pub const TEST_RUNNING: i8 = 2;
pub const TEST_END: i8 = 4;
pub const PARAM_EXCHANGE: i8 = 9;
pub const CREATE_STREAMS: i8 = 10;
pub const SERVER_TERMINATE: i8 = 11;
pub const CLIENT_TERMINATE: i8 = 12;
pub const EXCHANGE_RESULTS: i8 = 13;
pub const DISPLAY_RESULTS: i8 = 14;
pub const IPERF_DONE: i8 = 16;
pub const ACCESS_DENIED: i8 = -1;
pub const SERVER_ERROR: i8 = -2;

/// iperf3's error codes (`i_errno`) this end sends or names.
pub const IEDURATION: i32 = 5;
pub const IENUMSTREAMS: i32 = 6;
pub const IEBLOCKSIZE: i32 = 7;
pub const IEUDPBLOCKSIZE: i32 = 20;
pub const IEBUFSIZE: i32 = 8;
pub const IEMSS: i32 = 10;
pub const IESETNODELAY: i32 = 122;
pub const IESETMSS: i32 = 123;
pub const IEUNIMP: i32 = 13;
pub const IEBURST: i32 = 15;
pub const IEENDCONDITIONS: i32 = 16;
pub const IEINITSTREAM: i32 = 201;
pub const IESTREAMLISTEN: i32 = 202;
pub const IESTREAMACCEPT: i32 = 204;
pub const IETOTALRATE: i32 = 27;
pub const IEMAXSERVERTESTDURATIONEXCEEDED: i32 = 37;
pub const IESERVERTESTDURATIONEXPIRED: i32 = 160;
pub const IEPROTOCOL: i32 = 131;
pub const IESETTOS: i32 = 125;
pub const IESETCONGESTION: i32 = 134;
pub const IEAUTHTEST: i32 = 142;
pub const IESETBUF2: i32 = 141;

/// Largest parameter or result document accepted from a peer (iperf3 itself caps
/// parameters at 8 KiB; results grow with streams and server output).
pub const MAX_JSON: usize = 1 << 20;

/// The 37-byte cookie of a new test: 36 random characters of iperf3's alphabet and a NUL.
pub fn new_cookie() -> Result<[u8; COOKIE_SIZE]> {
    let random: [u8; COOKIE_SIZE - 1] = crate::server::auth::random_bytes()?;
    let mut cookie = [0u8; COOKIE_SIZE];
    for (c, r) in cookie.iter_mut().zip(random) {
        *c = COOKIE_CHARS[usize::from(r) % COOKIE_CHARS.len()];
    }
    Ok(cookie)
}

/// Whether `bytes` (a prefix of what a client sent first) can be the start of a cookie.
pub fn looks_like_cookie(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().all(|(i, b)| match i {
        36 => *b == 0,
        _ => COOKIE_CHARS.contains(b),
    })
}

/// iperf3's words for the error codes a server sends with `SERVER_ERROR` (the ones a
/// server can send; others are named by number).
pub fn error_words(code: i32) -> String {
    let words = match code {
        5 => "test duration too long",
        6 => "number of parallel streams too large",
        7 => "block size too large",
        20 => "block size invalid",
        8 => "socket buffer size too large",
        13 => "not yet implemented",
        27 => "total required bandwidth is larger than the server's limit",
        37 => "client's requested duration exceeds the server's maximum permitted limit",
        160 => "server test duration expired",
        102 => "the server could not listen for connections",
        114 => "the server could not receive the parameters",
        131 => "protocol does not exist",
        134 => "the server could not set TCP_CONGESTION",
        141 => {
            "socket buffer size not set correctly (its kernel granted less than -w asks: \
             net.core.rmem_max/wmem_max there are lower; a smaller -w)"
        }
        142 => {
            "test authorization failed (its RSA authentication: --username USER \
             --rsa-public-key-path FILE with the password in $IPERF3_PASSWORD; \
             --use-pkcs1-padding for a server before iperf3 3.17)"
        }
        201 => "the server could not set up its streams",
        202 => "the server could not start a stream listener",
        204 => "the server could not accept a stream connection",
        _ => return format!("iperf3 error {code}"),
    };
    format!("{words} (iperf3 error {code})")
}

/// The control connection to an iperf3 peer: state bytes and length-prefixed JSON, each
/// read within a deadline.
pub(crate) struct Ctl {
    pub sock: TcpStream,
    pub peer: SocketAddr,
}

impl Ctl {
    fn read_exact(&mut self, buf: &mut [u8], timeout: Duration, what: &str) -> Result<()> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| Error::io("set control timeout", e))?;
        self.sock.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::Test(format!(
                "{} closed the control connection (while this end waited for {what})",
                self.peer
            )),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Test(format!(
                "{} sent nothing in {:.0} s (this end waited for {what})",
                self.peer,
                timeout.as_secs_f64()
            )),
            _ => Error::io(format!("read {what} from {}", self.peer), e),
        })
    }

    pub fn write(&mut self, bytes: &[u8], what: &str) -> Result<()> {
        self.sock
            .set_write_timeout(Some(crate::timeouts::CONTROL_WRITE))
            .map_err(|e| Error::io("set control write timeout", e))?;
        self.sock
            .write_all(bytes)
            .map_err(|e| Error::io(format!("send {what} to {}", self.peer), e))
    }

    pub fn send_state(&mut self, state: i8) -> Result<()> {
        self.write(
            &state.to_be_bytes(),
            &format!("state {}", state_name(state)),
        )
    }

    pub fn read_state(&mut self, timeout: Duration) -> Result<i8> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b, timeout, "a state byte")?;
        Ok(b[0] as i8)
    }

    /// `SERVER_ERROR`'s numbers, as words: iperf3's error code, then an errno, which an
    /// iperf3 server leaves out when it refuses authentication (it sends the code and
    /// closes): a close or a pause after the code is no errno.
    pub fn read_server_error(&mut self, timeout: Duration) -> Result<String> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b, timeout, "the server's error code")?;
        let code = i32::from_be_bytes(b);
        let errno = match self.read_exact(&mut b, timeout.min(deadlines::ERRNO_WAIT), "an errno") {
            Ok(()) => i32::from_be_bytes(b),
            Err(_) => 0,
        };
        let mut words = error_words(code);
        // A refusal by a check of iperf3's own (a limit, a granted buffer smaller than
        // asked) comes with whatever errno an earlier call left: "socket buffer size not
        // set correctly ...: Bad file descriptor" pointed the wrong way.
        const CHECKS: [i32; 10] = [
            IEDURATION,
            IENUMSTREAMS,
            IEBLOCKSIZE,
            IEBUFSIZE,
            IEUNIMP,
            IEUDPBLOCKSIZE,
            IETOTALRATE,
            IEPROTOCOL,
            IESETBUF2,
            IEAUTHTEST,
        ];
        if errno != 0 && !CHECKS.contains(&code) {
            words += &format!(": {}", std::io::Error::from_raw_os_error(errno));
        }
        Ok(words)
    }

    /// Sends `SERVER_ERROR`, `code` and `errno`.
    pub fn send_server_error(&mut self, code: i32, errno: i32) -> Result<()> {
        let mut b = vec![SERVER_ERROR as u8];
        b.extend(code.to_be_bytes());
        b.extend(errno.to_be_bytes());
        self.write(&b, "SERVER_ERROR")
    }

    pub fn send_json<T: Serialize>(&mut self, doc: &T, what: &str) -> Result<()> {
        let body =
            serde_json::to_vec(doc).map_err(|e| Error::Test(format!("encode {what}: {e}")))?;
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend(body);
        self.write(&frame, what)
    }

    pub fn read_json<T: serde::de::DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
    ) -> Result<T> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len, timeout, what)?;
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > MAX_JSON {
            return Err(Error::Protocol {
                peer: self.peer,
                what: format!("{what} of {len} bytes (allowed 1 to {MAX_JSON})"),
            });
        }
        let mut body = vec![0u8; len];
        self.read_exact(&mut body, timeout, what)?;
        serde_json::from_slice(&body).map_err(|e| Error::Protocol {
            peer: self.peer,
            what: format!("{what}: not readable ({e})"),
        })
    }
}

/// A state byte's name, for messages.
pub fn state_name(state: i8) -> String {
    match state {
        TEST_START => "TEST_START".into(),
        TEST_RUNNING => "TEST_RUNNING".into(),
        TEST_END => "TEST_END".into(),
        PARAM_EXCHANGE => "PARAM_EXCHANGE".into(),
        CREATE_STREAMS => "CREATE_STREAMS".into(),
        SERVER_TERMINATE => "SERVER_TERMINATE".into(),
        CLIENT_TERMINATE => "CLIENT_TERMINATE".into(),
        EXCHANGE_RESULTS => "EXCHANGE_RESULTS".into(),
        DISPLAY_RESULTS => "DISPLAY_RESULTS".into(),
        IPERF_DONE => "IPERF_DONE".into(),
        ACCESS_DENIED => "ACCESS_DENIED".into(),
        SERVER_ERROR => "SERVER_ERROR".into(),
        other => format!("unknown state {other}"),
    }
}

/// The parameter document a client sends (the keys iperf3 3.x writes; unknown ones are
/// kept in `other` so the server can refuse what it does not support by name).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "is_false")]
    pub tcp: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub udp: bool,
    #[serde(default)]
    pub omit: f64,
    #[serde(default)]
    pub time: f64,
    #[serde(default)]
    pub num: f64,
    #[serde(default)]
    pub blockcount: f64,
    #[serde(default = "one")]
    pub parallel: f64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub reverse: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub bidirectional: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqrate: Option<f64>,
    /// `-b RATE/BURST`'s burst (iperf3 writes it only when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// `-S`: iperf3 writes the key only for a TOS other than 0.
    #[serde(rename = "TOS", default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<f64>,
    /// `-M`: iperf3 writes the key only when it is set.
    #[serde(rename = "MSS", default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<f64>,
    /// `-N`: likewise (`true`; its presence is what iperf3 reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodelay: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// UDP datagrams carry 64-bit sequences (iperf3 reads the key's presence, not its
    /// value; 32-bit ones without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_counters_64bit: Option<Value>,
    /// `--dont-fragment`: DF on IPv4 UDP datagrams, both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dont_fragment: Option<Value>,
    /// `--get-server-output`: the server's results carry its report (likewise presence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get_server_output: Option<Value>,
    /// The client's credentials, RSA-sealed and base64 ([`auth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<String>,
    /// Every other key the peer sent.
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> f64 {
    1.0
}

/// Keys iperf3 clients send that change nothing this end does (or that it honours as
/// iperf3 would: `pacing_timer` is a sender detail). The UDP offload hints (`gso*`, `gro*`,
/// which iperf3 3.21 and later always send, `--gsro` or not) leave the datagrams on the wire
/// as they are: this server batches its UDP sends and receives as it always does.
const HARMLESS: &[&str] = &[
    "gso",
    "gso_dg_size",
    "gso_bf_size",
    "gro",
    "gro_bf_size",
    "pacing_timer",
    "repeating_payload",
    "zerocopy",
    "congestion_used",
    "title",
    "extra_data",
    "server_affinity",
    "skip_rx_copy",
    // The client's data connections' own: its flow label, and MPTCP, which this server's
    // TCP listener takes as plain TCP (an MPTCP client falls back to it).
    "flowlabel",
    "mptcp",
];

/// Why an iperf3 test cannot run here: iperf3's error code for the client and words for
/// the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsupported {
    pub code: i32,
    pub reason: String,
}

impl Params {
    /// The iperf3 parameters of a pinperf test (client side).
    pub fn from_test(test: &TestParams) -> Params {
        Params {
            tcp: !test.udp,
            udp: test.udp,
            omit: test.omit().as_secs_f64(),
            // iperf3 sends -n/-k with no time: the count alone ends the test.
            time: match test.budget() {
                Some(_) => 0.0,
                None => test.duration().as_secs_f64(),
            },
            num: test.bytes.unwrap_or(0) as f64,
            blockcount: test.blocks.unwrap_or(0) as f64,
            parallel: f64::from(test.streams),
            reverse: test.reverse,
            bidirectional: test.bidir,
            window: test.window_bytes.map(|w| w as f64),
            len: Some(test.block_bytes() as f64),
            bandwidth: test.rate().map(|r| r as f64),
            fqrate: test.fq_rate_bps.map(|r| r as f64),
            burst: test.burst.map(f64::from),
            congestion: test.transport.congestion.clone(),
            tos: test.tos.map(f64::from),
            mss: test.transport.mss.map(f64::from),
            nodelay: test.transport.no_delay.then(|| Value::from(true)),
            client_version: Some(format!("pinperf {}", env!("CARGO_PKG_VERSION"))),
            // 64-bit sequences: a long fast test never wraps.
            udp_counters_64bit: test.udp.then(|| Value::from(1)),
            dont_fragment: (test.udp && test.dont_fragment).then(|| Value::from(1)),
            get_server_output: test.get_server_output.then(|| Value::from(1)),
            authtoken: None,
            other: serde_json::Map::new(),
        }
    }

    /// What the client's data connections are, as iperf3's client says it: MPTCP (an
    /// iperf3 server then listens for them with MPTCP) and the flow label.
    pub fn set_source(&mut self, from: &crate::os::net::Source) {
        if from.mptcp {
            self.other.insert("mptcp".into(), Value::Bool(true));
        }
        if let Some(label) = from.flowlabel {
            self.other.insert("flowlabel".into(), Value::from(label));
        }
    }

    /// The header the test's UDP datagrams carry.
    pub fn wire(&self) -> crate::data::udp::wire::Format {
        crate::data::udp::wire::Format::Iperf3 {
            seq64: self.udp_counters_64bit.is_some(),
        }
    }

    /// The pinperf test an iperf3 client asks for (server side), or why it cannot run:
    /// anything this server does not do is refused by name rather than run differently.
    pub fn to_test(&self) -> std::result::Result<TestParams, Unsupported> {
        self.refuse_unknown()?;
        self.refuse_unsupported()?;
        self.check_counts()?;
        let mut test = TestParams::defaults();
        test.udp = self.udp;
        test.streams = self.parallel as u16;
        test.len = size(self.len, "-l", IEBLOCKSIZE)?;
        test.window_bytes = size(self.window, "-w", IEBUFSIZE)?;
        test.bytes = count(self.num, "-n")?;
        test.blocks = count(self.blockcount, "-k")?;
        test.burst = match self.burst {
            Some(b) if finite(b, f64::from(u32::MAX)) && b >= 1.0 => Some(b as u32),
            Some(b) => {
                return Err(Unsupported {
                    code: IEBURST,
                    reason: format!("-b RATE/{}: not a burst", shown(b)),
                });
            }
            None => None,
        };
        // -n/-k come without a time (iperf3's 0: none): the protocol's longest, which
        // the server cuts to its own.
        test.duration = match (test.budget(), self.time) {
            (Some(_), t) if t <= 0.0 => Limits::PROTOCOL.max_duration,
            _ => Duration::from_secs_f64(self.time),
        };
        test.omit = Duration::from_secs_f64(self.omit);
        test.interval = None;
        test.reverse = self.reverse && !self.bidirectional;
        test.bidir = self.bidirectional;
        test.rate_bps = self.rate()?;
        test.get_server_output = self.get_server_output.is_some();
        // iperf3 reads the number: 0 is no.
        test.dont_fragment = self.udp
            && self
                .dont_fragment
                .as_ref()
                .is_some_and(|v| v.as_f64() != Some(0.0));
        test.tos = self.tos_byte()?;
        test.fq_rate_bps = match self.fqrate {
            Some(f) if finite(f, u64::MAX as f64) && f > 0.0 => Some(f as u64),
            _ => None,
        };
        test.transport.congestion = self.congestion.clone();
        // Both are TCP's: with -u an iperf3 server leaves them alone, and so does this one.
        test.transport.no_delay = self.nodelay.is_some() && !self.udp;
        test.transport.mss = self.segment()?;
        // iperf3 has no echo connections: kernel RTT only.
        test.transport.no_echo = true;
        Ok(test)
    }

    /// A parameter this server does not know or does not take, refused by its flag.
    fn refuse_unknown(&self) -> std::result::Result<(), Unsupported> {
        let Some(key) = self.other.keys().find(|k| !HARMLESS.contains(&k.as_str())) else {
            return Ok(());
        };
        let name = match key.as_str() {
            "sctp" => "--sctp".to_string(),
            other => format!("iperf3 parameter '{}'", crate::wire::printable(other, 64)),
        };
        Err(match key.as_str() {
            "sctp" => Unsupported {
                code: IEPROTOCOL,
                reason: "--sctp: this pinperf server runs TCP tests for iperf3 clients".into(),
            },
            _ => unimp(name),
        })
    }

    /// Known parameters whose tests this server does not run.
    fn refuse_unsupported(&self) -> std::result::Result<(), Unsupported> {
        if self.udp && self.omit > 0.0 {
            return Err(unimp(
                "-O with -u (iperf3 counts datagrams across the omitted seconds and bytes \
                 after them: the two ends' counts would not reconcile)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The stream count and the durations, in range.
    fn check_counts(&self) -> std::result::Result<(), Unsupported> {
        if !finite(self.parallel, 65_535.0) || self.parallel < 1.0 {
            return Err(Unsupported {
                code: IENUMSTREAMS,
                reason: match self.parallel >= 1.0 {
                    true => format!("-P {}: streams must be 1 to 65535", shown(self.parallel)),
                    false => format!("-P {}: streams must be at least 1", shown(self.parallel)),
                },
            });
        }
        if !finite(self.time, 86_400.0 * 365.0) || !finite(self.omit, 86_400.0) {
            return Err(Unsupported {
                code: IEDURATION,
                reason: format!(
                    "-t {} / -O {}: not a duration",
                    shown(self.time),
                    shown(self.omit)
                ),
            });
        }
        Ok(())
    }

    /// `-b`: the rate, or as fast as it goes for UDP without one.
    fn rate(&self) -> std::result::Result<Option<u64>, Unsupported> {
        Ok(match self.bandwidth {
            Some(b) if finite(b, u64::MAX as f64) && b > 0.0 => Some(b as u64),
            Some(b) if !finite(b, u64::MAX as f64) => {
                return Err(Unsupported {
                    code: IETOTALRATE,
                    reason: format!("-b {}: out of range", shown(b)),
                });
            }
            // An iperf3 server without a rate sends UDP as fast as it can (its client
            // always names one; pinperf's UDP default would be a different test).
            _ if self.udp => Some(0),
            _ => None,
        })
    }

    /// `-S`: the TOS byte, 0 to 255.
    fn tos_byte(&self) -> std::result::Result<Option<u8>, Unsupported> {
        match self.tos {
            Some(t) if finite(t, 255.0) && t.fract() == 0.0 => Ok((t > 0.0).then_some(t as u8)),
            Some(t) => Err(Unsupported {
                code: IESETTOS,
                reason: format!("-S {}: the TOS byte is 0 to 255", shown(t)),
            }),
            None => Ok(None),
        }
    }

    /// `-M`, TCP's only. The range is `TestParams::validate`'s (IEMSS or IESETMSS by
    /// `code_for`).
    fn segment(&self) -> std::result::Result<Option<u32>, Unsupported> {
        match self.mss {
            _ if self.udp => Ok(None),
            Some(m) if finite(m, f64::from(u32::MAX)) && m.fract() == 0.0 => {
                Ok((m > 0.0).then_some(m as u32))
            }
            Some(m) => Err(Unsupported {
                code: IEMSS,
                reason: format!("-M {}: not a segment size", shown(m)),
            }),
            None => Ok(None),
        }
    }
}

/// `-n`/`-k`: a count, or none for iperf3's 0.
fn count(v: f64, flag: &str) -> std::result::Result<Option<u64>, Unsupported> {
    match v {
        0.0 => Ok(None),
        v if finite(v, u64::MAX as f64) && v.fract() == 0.0 => Ok(Some(v as u64)),
        v => Err(Unsupported {
            code: IEENDCONDITIONS,
            reason: format!("{flag} {}: not a count", shown(v)),
        }),
    }
}

/// A refusal of what this server does not do.
fn unimp(what: String) -> Unsupported {
    Unsupported {
        code: IEUNIMP,
        reason: format!("{what}: not supported by this pinperf server"),
    }
}

/// `v` is a number from 0 to `max`.
fn finite(v: f64, max: f64) -> bool {
    v.is_finite() && v >= 0.0 && v <= max
}

/// A number as the log shows it: `1e300`, not its 301 digits.
fn shown(v: f64) -> String {
    match v.abs() < 1e15 {
        true => format!("{v}"),
        false => format!("{v:e}"),
    }
}

/// A size parameter (`-l`, `-w`): none when absent or 0, refused with `code` out of range.
fn size(v: Option<f64>, flag: &str, code: i32) -> std::result::Result<Option<u64>, Unsupported> {
    match v {
        Some(v) if !finite(v, u32::MAX as f64) => Err(Unsupported {
            code,
            reason: format!("{flag} {}: out of range", shown(v)),
        }),
        Some(v) if v > 0.0 => Ok(Some(v as u64)),
        _ => Ok(None),
    }
}

/// iperf3's error code for a refusal by [`TestParams::validate`], by the flag its message
/// opens with.
pub fn code_for(reason: &str) -> i32 {
    let flag = reason.split([' ', ':']).next().unwrap_or("");
    // A server's own limits have iperf3's codes for its server's options.
    if reason.contains("--max-duration") {
        return IEMAXSERVERTESTDURATIONEXCEEDED;
    }
    if reason.contains("--server-bitrate-limit") {
        return IETOTALRATE;
    }
    match flag {
        "-P" => IENUMSTREAMS,
        "-t" | "-O" | "-t/-i" => IEDURATION,
        "-w" => IEBUFSIZE,
        // iperf3's clients say "too large" for IEBLOCKSIZE (a TCP block can only be that:
        // an iperf3 peer's may be one byte), "invalid (minimum, maximum)" for
        // IEUDPBLOCKSIZE.
        "-l" if reason.contains("UDP datagram") => IEUDPBLOCKSIZE,
        "-l" => IEBLOCKSIZE,
        "-b" if reason.contains("burst") => IEBURST,
        "-b" => IETOTALRATE,
        "-u" => IEPROTOCOL,
        "-C" => IESETCONGESTION,
        "-S" => IESETTOS,
        // iperf3 says "too large" for IEMSS; its server answers one the kernel will not
        // take with IESETMSS, "unable to set TCP/SCTP MSS".
        "-M" if reason.contains("no less") || reason.contains("set TCP_MAXSEG") => IESETMSS,
        "-M" => IEMSS,
        "-N" => IESETNODELAY,
        "-n" | "-k" => IEENDCONDITIONS,
        _ => IEUNIMP,
    }
}

/// One stream's entry in a results document. iperf3 writes -1 through an unsigned
/// 64-bit path on some versions (18446744073709551615): counts are read leniently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    #[serde(deserialize_with = "lenient")]
    pub id: i64,
    #[serde(deserialize_with = "lenient_bytes")]
    pub bytes: u64,
    #[serde(deserialize_with = "lenient")]
    pub retransmits: i64,
    #[serde(default)]
    pub jitter: f64,
    #[serde(deserialize_with = "lenient")]
    pub errors: i64,
    #[serde(deserialize_with = "lenient")]
    pub packets: i64,
    /// Datagrams and losses within `-O`'s seconds: 0 here (-O with -u is refused). iperf3
    /// 3.21 reads a receiver's results without them as "every datagram omitted" (a sender
    /// line of 0/0), so this end always sends them.
    #[serde(default, deserialize_with = "lenient")]
    pub omitted_errors: i64,
    #[serde(default, deserialize_with = "lenient")]
    pub omitted_packets: i64,
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
}

impl StreamResult {
    /// A stream's entry as this end fills it: its bytes over `0..end_time` seconds, no
    /// retransmit count (-1, as iperf3 writes where it has none), and for UDP its datagram
    /// counts (see [`udp_counts`]: `sends`, `last` and the datagram size).
    pub(crate) fn ours(
        id: i64,
        bytes: u64,
        end_time: f64,
        udp: Option<(bool, Option<&UdpSnapshot>, u64)>,
    ) -> StreamResult {
        let mut r = StreamResult {
            id,
            bytes,
            retransmits: -1,
            jitter: 0.0,
            errors: 0,
            packets: 0,
            omitted_errors: 0,
            omitted_packets: 0,
            start_time: 0.0,
            end_time,
        };
        if let Some((sends, last, datagram)) = udp {
            udp_counts(&mut r, sends, last, datagram);
        }
        r
    }
}

/// Any JSON number as an i64: unsigned values wrap (iperf3's -1), floats truncate.
fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
    let v = serde_json::Number::deserialize(d)?;
    Ok(v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
        .unwrap_or(0))
}

/// A byte count: a non-negative number (anything else is an error, not a guess).
fn lenient_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    let v = serde_json::Number::deserialize(d)?;
    v.as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        })
        .ok_or_else(|| serde::de::Error::custom(format!("{v} is not a byte count")))
}

/// The results document each end sends at `EXCHANGE_RESULTS` (the client first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    #[serde(deserialize_with = "lenient")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
    /// `--get-server-output`: the server's report, as text (a server writing text) or as
    /// its JSON document (one run with `-J`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<Value>,
}

impl Results {
    /// The entry for stream `id`, if the peer sent one.
    pub fn stream(&self, id: i64) -> Option<&StreamResult> {
        self.streams.iter().find(|s| s.id == id)
    }
}

/// A UDP stream's entry as iperf3 fills it: a sender's `packets` are the datagrams it sent
/// (`bytes` over the datagram size: all are that size); a receiver's are the highest
/// sequence it saw, with `errors` the sequences below it that never came and `jitter` in
/// seconds. `last` is a receiver's last datagram counts (none: nothing arrived).
pub(crate) fn udp_counts(
    r: &mut StreamResult,
    sends: bool,
    last: Option<&UdpSnapshot>,
    datagram: u64,
) {
    match (sends, last) {
        (true, _) => r.packets = (r.bytes / datagram.max(1)) as i64,
        (false, Some(u)) => {
            r.packets = u.highest_seq_plus_one as i64;
            r.errors = u.highest_seq_plus_one.saturating_sub(u.packets) as i64;
            r.jitter = u.jitter_us / 1e6;
        }
        (false, None) => {}
    }
}

/// One stream's line of `--get-server-output`'s text.
pub(crate) fn stream_line(r: &StreamResult, sends: bool, udp: bool) -> String {
    let what = match (sends, udp) {
        (true, false) => format!("sent {} bytes", r.bytes),
        (false, false) => format!("received {} bytes", r.bytes),
        (true, true) => format!("sent {} bytes in {} datagrams", r.bytes, r.packets),
        (false, true) => format!(
            "received {} bytes; highest sequence {}, {} lost, jitter {:.3} ms",
            r.bytes,
            r.packets,
            r.errors,
            r.jitter * 1e3
        ),
    };
    format!(
        "pinperf:   stream {} (iperf3 id {}): {what}",
        stream_index(r.id),
        r.id
    )
}

/// The stream index of an iperf3 stream id (the inverse of [`stream_id`]).
fn stream_index(id: i64) -> i64 {
    match id {
        1 => 0,
        i => i - 2,
    }
}

/// iperf3's stream ids, in the order the client creates its streams (senders first with
/// `--bidir`): 1, then 3, 4, 5… (iperf3 numbers the second stream 3 and keeps it so for
/// compatibility between its versions).
pub fn stream_id(index: usize) -> i64 {
    match index {
        0 => 1,
        i => i as i64 + 2,
    }
}

/// CPU from iperf3's results as this end's report: percentages of one core over the test.
pub(crate) fn cpu_report(r: &Results, seconds: f64) -> crate::os::cpu::CpuReport {
    let us = |pct: f64| (pct.max(0.0) / 100.0 * seconds * 1e6) as u64;
    crate::os::cpu::CpuReport {
        seconds,
        process: crate::os::cpu::CpuTime {
            user_us: us(r.cpu_util_user),
            sys_us: us(r.cpu_util_system),
        },
        host_total: r.cpu_util_total,
        host_user: r.cpu_util_user,
        host_system: r.cpu_util_system,
        streams: Vec::new(),
        cores: Vec::new(),
        send_path: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test with an iperf3 peer takes iperf3's datagrams, down to its 16 bytes, and its
    /// TCP blocks, down to one byte.
    #[test]
    fn an_iperf3_peers_blocks_and_datagrams_may_be_as_small_as_iperf3s() {
        let mut p = TestParams::defaults();
        (p.streams, p.udp, p.window_bytes) = (1, true, None);
        for (len, ok) in [(15, false), (16, true), (31, true), (32, true)] {
            p.len = Some(len);
            assert_eq!(
                p.validate(&limits(Limits::PROTOCOL)).is_ok(),
                ok,
                "-l {len}"
            );
        }
        // And a TCP block of any size (iperf3 takes -l 1).
        p.udp = false;
        p.len = Some(1);
        assert_eq!(p.validate(&limits(Limits::PROTOCOL)), Ok(()));
        assert!(p.validate(&Limits::PROTOCOL).is_err());
        p.udp = true;
        p.len = Some(15);
        assert_eq!(
            p.validate(&limits(Limits::PROTOCOL)).err().as_deref(),
            Some("-l 15: a UDP datagram must be 16 to 65507 bytes")
        );
    }

    #[test]
    fn a_cookie_is_36_characters_of_the_alphabet_and_a_nul() {
        let c = new_cookie().unwrap();
        assert!(looks_like_cookie(&c));
        assert_eq!(c[36], 0);
        assert!(!looks_like_cookie(b"pinperf\n"));
        assert!(looks_like_cookie(b"pinperf"));
    }

    #[test]
    fn stream_ids_skip_two_as_iperf3_does() {
        let ids: Vec<_> = (0..4).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
    }

    #[test]
    fn an_iperf3_client_s_parameters_become_a_test() {
        let doc = r#"{"tcp":true,"omit":0,"time":3,"num":0,"blockcount":0,"parallel":4,
            "reverse":true,"len":131072,"pacing_timer":1000,"TOS":40,"client_version":"3.12"}"#;
        let p: Params = serde_json::from_str(doc).unwrap();
        let t = p.to_test().unwrap();
        assert_eq!((t.streams, t.reverse, t.len), (4, true, Some(131072)));
        assert_eq!(t.tos, Some(40));
        // And back: -S goes to an iperf3 server as its own key, only when set.
        assert_eq!(
            serde_json::to_value(Params::from_test(&t)).unwrap()["TOS"],
            40.0
        );
        assert!(
            serde_json::to_value(Params::from_test(&TestParams::defaults()))
                .unwrap()
                .get("TOS")
                .is_none()
        );
        assert_eq!(t.duration, Duration::from_secs(3));
        assert!(t.transport.no_echo);
        assert_eq!(
            p.wire(),
            crate::data::udp::wire::Format::Iperf3 { seq64: false }
        );
    }

    #[test]
    fn an_iperf3_udp_test_keeps_its_rate_sizes_and_counter_width() {
        let doc = r#"{"udp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":2,
            "len":1460,"bandwidth":100000000,"udp_counters_64bit":1,"client_version":"3.12"}"#;
        let p: Params = serde_json::from_str(doc).unwrap();
        let t = p.to_test().unwrap();
        assert!(t.udp);
        assert_eq!(
            (t.streams, t.len, t.rate()),
            (2, Some(1460), Some(100_000_000))
        );
        assert_eq!(
            p.wire(),
            crate::data::udp::wire::Format::Iperf3 { seq64: true }
        );
        // A newer iperf3's offload hints, sent with every UDP test (`--gsro` or not).
        let hints = doc.replace(
            r#""len":1460,"#,
            r#""len":1460,"gso":0,"gso_dg_size":0,"gso_bf_size":65507,"gro":0,"gro_bf_size":65507,"#,
        );
        let p: Params = serde_json::from_str(&hints).unwrap();
        assert_eq!(p.to_test().unwrap().len, Some(1460));
        // No rate: as fast as it can, as an iperf3 server sends.
        let p: Params =
            serde_json::from_str(&doc.replace(r#""bandwidth":100000000,"#, "")).unwrap();
        assert_eq!(p.to_test().unwrap().rate(), None);
        // What this end asks an iperf3 server for, back again.
        let mut ours = TestParams::defaults();
        ours.udp = true;
        ours.len = Some(1460);
        let sent = serde_json::to_value(Params::from_test(&ours)).unwrap();
        assert_eq!(sent["udp"], true);
        assert!(sent.get("tcp").is_none());
        assert_eq!(sent["udp_counters_64bit"], 1);
        assert_eq!(sent["bandwidth"], 1_000_000.0);
    }

    /// `-M` and `-N` both ways: an iperf3 client's `MSS` and `nodelay` become the test's,
    /// and pinperf's are sent under iperf3's keys (absent without them, as iperf3 writes).
    #[test]
    fn the_mss_and_nodelay_cross_under_iperf3s_keys() {
        let theirs = |json: &str| serde_json::from_str::<Params>(json).unwrap().to_test();
        let test =
            theirs(r#"{"tcp":true,"time":1,"parallel":1,"MSS":1000,"nodelay":true}"#).unwrap();
        assert_eq!(test.transport.mss, Some(1000));
        assert!(test.transport.no_delay);
        // Presence is what iperf3 reads; with -u both are left alone, as iperf3 -s does.
        let any = theirs(r#"{"tcp":true,"time":1,"parallel":1,"nodelay":1}"#).unwrap();
        assert!(any.transport.no_delay);
        let udp =
            theirs(r#"{"udp":true,"time":1,"parallel":1,"MSS":1000,"nodelay":true}"#).unwrap();
        assert_eq!((udp.transport.mss, udp.transport.no_delay), (None, false));
        assert!(udp.validate(&limits(Limits::PROTOCOL)).is_ok());
        assert!(
            test.validate(&crate::wire::params::Limits::PROTOCOL)
                .is_ok()
        );
        let sent = serde_json::to_value(Params::from_test(&test)).unwrap();
        assert_eq!(
            (&sent["MSS"], &sent["nodelay"]),
            (&1000.0.into(), &true.into())
        );
        let plain = serde_json::to_value(Params::from_test(&TestParams::defaults())).unwrap();
        assert!(
            plain.get("MSS").is_none() && plain.get("nodelay").is_none(),
            "{plain}"
        );
    }

    #[test]
    fn unsupported_options_are_refused_by_name() {
        let cases = [
            (
                r#"{"tcp":true,"time":1,"parallel":1,"MSS":1000.5}"#,
                IEMSS,
                "-M 1000.5: not a segment size",
            ),
            (
                r#"{"sctp":true,"time":1,"parallel":1}"#,
                IEPROTOCOL,
                "--sctp",
            ),
            (
                r#"{"udp":true,"time":1,"omit":1,"parallel":1}"#,
                IEUNIMP,
                "-O with -u",
            ),
            (
                r#"{"tcp":true,"time":1,"burst":0.5,"parallel":1}"#,
                IEBURST,
                "-b RATE/0.5: not a burst",
            ),
            (
                r#"{"tcp":true,"time":1,"parallel":0}"#,
                IENUMSTREAMS,
                "-P 0",
            ),
            (
                r#"{"tcp":true,"time":1,"parallel":65536}"#,
                IENUMSTREAMS,
                "-P 65536: streams must be 1 to 65535",
            ),
            (
                r#"{"tcp":true,"time":1e300,"parallel":1}"#,
                IEDURATION,
                "-t 1e300 / -O 0: not a duration",
            ),
            (
                r#"{"tcp":true,"time":1,"parallel":1,"TOS":256}"#,
                IESETTOS,
                "-S 256: the TOS byte is 0 to 255",
            ),
        ];
        for (doc, code, words) in cases {
            let p: Params = serde_json::from_str(doc).unwrap();
            let e = p.to_test().unwrap_err();
            assert_eq!(e.code, code, "{doc}");
            assert!(e.reason.contains(words), "{doc}: {}", e.reason);
        }
    }

    #[test]
    fn results_read_iperf3_s_unsigned_minus_one() {
        let doc = r#"{"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1,
            "sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":123,
            "retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,
            "start_time":0,"end_time":2.0}]}"#;
        let r: Results = serde_json::from_str(doc).unwrap();
        assert_eq!(
            (r.sender_has_retransmits, r.streams[0].retransmits),
            (-1, -1)
        );
        assert_eq!(r.stream(1).map(|s| s.bytes), Some(123));
        let bad = doc.replace("\"bytes\":123", "\"bytes\":-5");
        assert!(serde_json::from_str::<Results>(&bad).is_err());
        // What this end sends carries the omitted pair: iperf3 3.21 takes a receiver's
        // results without it as every datagram omitted.
        let ours = serde_json::to_value(StreamResult::ours(1, 1000, 1.0, None)).unwrap();
        assert_eq!(
            (&ours["omitted_packets"], &ours["omitted_errors"]),
            (&0.into(), &0.into())
        );
    }

    /// The errno follows the code when it came (a close or a pause is none), and only
    /// when the code is a call that failed: a check's refusal carries a stale one.
    #[test]
    fn a_server_error_reads_with_or_without_its_errno() {
        let cases = [
            (IESTREAMACCEPT, true, "the server could not accept", true),
            (IEAUTHTEST, true, "test authorization failed", false),
            (IEAUTHTEST, false, "test authorization failed", false),
        ];
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for (code, with_errno, ..) in cases {
                let (mut s, _) = listener.accept().unwrap();
                let mut b = code.to_be_bytes().to_vec();
                if with_errno {
                    b.extend(111i32.to_be_bytes());
                }
                s.write_all(&b).unwrap();
                // Dropped: closed after the code, as iperf3 does on an auth failure.
            }
        });
        for (code, _, says, errno) in cases {
            let sock = TcpStream::connect(addr).unwrap();
            let mut ctl = Ctl { sock, peer: addr };
            let words = ctl.read_server_error(Duration::from_secs(5)).unwrap();
            assert!(words.starts_with(says), "{code}: {words}");
            assert_eq!(words.contains("os error 111"), errno, "{code}: {words}");
        }
        server.join().unwrap();
    }

    #[test]
    fn validation_messages_map_to_iperf3_codes() {
        assert_eq!(code_for("-P 9: streams must be 1 to 4"), IENUMSTREAMS);
        assert_eq!(code_for("-t 99: duration must be"), IEDURATION);
        assert_eq!(code_for("-w 8M: window must be"), IEBUFSIZE);
        assert_eq!(
            code_for("-l 128M: block size must be 64 to 67108864 bytes (64 to 64M)"),
            IEBLOCKSIZE
        );
        assert_eq!(
            code_for("-l 16: a UDP datagram must be 32 to 65507 bytes"),
            IEUDPBLOCKSIZE
        );
        assert_eq!(code_for("-b: this server limits"), IETOTALRATE);
        assert_eq!(code_for("-S 0x10: set IP_TOS: Permission denied"), IESETTOS);
        let mss = |n, why| format!("-M {n}: the MSS must be 88 to 9216 bytes ({why})");
        assert_eq!(code_for(&mss(20, "the kernel takes no less")), IESETMSS);
        assert_eq!(code_for(&mss(9999, "iperf3's largest")), IEMSS);
        assert_eq!(code_for("something else"), IEUNIMP);
        // A server's own limits: iperf3's codes for --server-max-duration and
        // --server-bitrate-limit.
        let longer = "-t 30: duration must be 0.1 to 10 seconds (this server's --max-duration)";
        assert_eq!(code_for(longer), IEMAXSERVERTESTDURATIONEXCEEDED);
        let omit = "-O 5: the omitted seconds plus -t 9 exceed 10 seconds (this server's \
                    --max-duration)";
        assert_eq!(code_for(omit), IEMAXSERVERTESTDURATIONEXCEEDED);
        let total = "--fq-rate 2G: 1 stream(s) at it, 2G in all, more than 1G (this server's \
                     --server-bitrate-limit)";
        assert_eq!(code_for(total), IETOTALRATE);
    }

    /// iperf3's `num`, `blockcount` (with `time` 0) and `burst`, both ways.
    #[test]
    fn byte_and_block_counts_travel_as_iperf3s_keys() {
        let theirs = |doc: &str| serde_json::from_str::<Params>(doc).unwrap().to_test();
        let t =
            theirs(r#"{"tcp":true,"time":0,"num":5242880,"blockcount":0,"parallel":1}"#).unwrap();
        assert_eq!((t.bytes, t.blocks), (Some(5 << 20), None));
        assert_eq!(t.duration, Limits::PROTOCOL.max_duration);
        let t = theirs(
            r#"{"udp":true,"time":0,"blockcount":9,"bandwidth":1e6,"burst":10,"parallel":1}"#,
        )
        .unwrap();
        assert_eq!((t.blocks, t.burst), (Some(9), Some(10)));
        let mut ours = TestParams::defaults();
        (ours.bytes, ours.burst, ours.rate_bps) = (Some(1 << 20), Some(4), Some(1_000_000));
        let v = serde_json::to_value(Params::from_test(&ours)).unwrap();
        assert_eq!(
            (v["time"].as_f64(), v["num"].as_f64()),
            (Some(0.0), Some(1048576.0))
        );
        assert_eq!(v["burst"].as_f64(), Some(4.0));
        assert_eq!(code_for("-n and -k: only one"), IEENDCONDITIONS);
    }
}
