//! Fuzzing the control decoder and the server's handshake: a seeded generator
//! makes well-formed frames of every message (with random field values, parameters out of
//! every range, unknown fields and types), then mutates them (bit flips, cut, inserted and
//! removed bytes, a rewritten length), plus raw noise and length prefixes up to and past
//! the frame limit. Every frame goes through the decoder; every decoded message through a
//! fresh handshake (with and without keys, at each state). Nothing may panic; every error
//! must name the peer; no frame may cost more memory than the frame limit allows (a
//! counting allocator measures it). A second part sends mutated handshakes to a real
//! server over loopback and checks that it still serves a real client.
//!
//! One test in this binary, so the allocator counts only its own work.

// The counting allocator below is the only `unsafe` outside `sys`: a test's, forwarding
// to the system allocator unchanged.
#![allow(unsafe_code)]

mod util;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pinperf::server::admission::{Handshake, Step};
use pinperf::server::auth::{self, Keys};
use pinperf::wire::{self, ControlMsg, MAX_FRAME, PROTOCOL_VERSION, TestParams};
use serde_json::{Value, json};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's layout; the
// counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded as the caller gave it.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// splitmix64: a seeded generator, so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn some_bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max) as usize;
        self.bytes(n)
    }
    /// Hex of 32 bytes (a nonce or MAC's size) half the time, else of any length below 64.
    fn hex_maybe_32(&mut self) -> String {
        let n = if self.chance(2) {
            32
        } else {
            self.below(64) as usize
        };
        auth::to_hex(&self.bytes(n))
    }
    fn text(&mut self, max: usize) -> String {
        let n = self.below(max as u64 + 1) as usize;
        (0..n)
            .map(|_| match self.below(6) {
                0 => char::from_u32(self.below(0x11_0000) as u32).unwrap_or('x'),
                1 => ['"', '\\', ':', '\n', '\0', '{'][self.below(6) as usize],
                _ => (b'a' + self.below(26) as u8) as char,
            })
            .collect()
    }
    /// A JSON value of any kind, or a number at an edge.
    fn value(&mut self) -> Value {
        match self.below(10) {
            0 => Value::Null,
            1 => json!(self.chance(2)),
            2 => json!(-(self.below(1 << 40) as i64)),
            3 => json!(u64::MAX - self.below(3)),
            4 => json!(self.below(300)),
            5 => json!(self.next() as f64 / 7.0),
            6 => json!(self.text(20)),
            7 => json!([self.below(9), self.text(3)]),
            8 => json!({ "list": [self.below(64)] }),
            _ => json!(auth::to_hex(&self.some_bytes(40))),
        }
    }
}

/// A well-formed message body of a random kind, its fields random.
fn message(rng: &mut Rng, defaults: &Value) -> Value {
    match rng.below(9) {
        0 => {
            json!({ "type": "hello", "version": if rng.chance(2) { PROTOCOL_VERSION } else { rng.below(5) as u32 }, "software": rng.text(40) })
        }
        1 => {
            json!({ "type": "auth_request", "user": if rng.chance(2) { "alice".to_string() } else { rng.text(80) }, "nonce": rng.hex_maybe_32() })
        }
        2 => {
            json!({ "type": "auth_proof", "mac": rng.hex_maybe_32() })
        }
        3 | 4 => {
            let mut p = defaults.clone();
            let keys: Vec<String> = p.as_object().unwrap().keys().cloned().collect();
            for _ in 0..rng.below(4) {
                let k = &keys[rng.below(keys.len() as u64) as usize];
                p[k] = rng.value();
            }
            if rng.chance(8) {
                p[rng.text(8)] = rng.value();
            }
            p["type"] = json!("params");
            p
        }
        5 => {
            let kind =
                ["start", "bye", "welcome", "accept", "done", "challenge"][rng.below(6) as usize];
            json!({ "type": kind })
        }
        6 => json!({ "type": "error", "reason": rng.text(50) }),
        7 => {
            json!({ "type": "row", "index": rng.value(), "begin_us": 0, "end_us": 1, "bytes": [rng.value()] })
        }
        _ => json!({ "type": rng.text(12), "x": rng.value() }),
    }
}

/// A frame: length prefix and body, maybe mutated.
fn frame(rng: &mut Rng, defaults: &Value) -> Vec<u8> {
    if rng.chance(20) {
        // Noise, or a length prefix at or past the limit with a short body.
        return match rng.below(3) {
            0 => rng.some_bytes(64),
            1 => {
                let len = (MAX_FRAME as u64 - 2 + rng.below(4)) as u32;
                let mut f = len.to_be_bytes().to_vec();
                f.extend(rng.some_bytes(32));
                f
            }
            _ => {
                let mut f = (rng.next() as u32).to_be_bytes().to_vec();
                f.extend(rng.bytes(8));
                f
            }
        };
    }
    let body = serde_json::to_vec(&message(rng, defaults)).unwrap();
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend(body);
    // Half the frames stay well-formed (to reach the handshake), half get 1 to 3 mutations.
    let mutations = if rng.chance(2) { 0 } else { 1 + rng.below(3) };
    for _ in 0..mutations {
        if f.is_empty() {
            break;
        }
        let at = rng.below(f.len() as u64) as usize;
        match rng.below(5) {
            0 => f[at] ^= 1 << rng.below(8),
            1 => f.truncate(at),
            2 => f.insert(at, rng.next() as u8),
            3 => {
                f.remove(at);
            }
            _ => {
                // A length that disagrees with the body.
                let len = (f.len().saturating_sub(4) as u32)
                    .wrapping_add(rng.below(9) as u32)
                    .wrapping_sub(4);
                if f.len() >= 4 {
                    f[..4].copy_from_slice(&len.to_be_bytes());
                }
            }
        }
    }
    f
}

fn valid_hello() -> ControlMsg {
    ControlMsg::Hello {
        version: PROTOCOL_VERSION,
        software: "fuzz".into(),
    }
}

#[test]
fn fuzzed_frames_through_the_decoder_and_the_handshake() {
    let peer: SocketAddr = "192.0.2.1:5301".parse().unwrap();
    let defaults = serde_json::to_value(ControlMsg::Params(TestParams::defaults())).unwrap();
    let keys = Keys::parse("alice:s3cret\n").unwrap();
    let mut rng = Rng(0x5eed_0012);
    const CASES: usize = 120_000;
    let (mut decoded, mut refused, mut broken, mut admitted, mut waited) = (0, 0, 0, 0, 0);
    let mut worst_extra = 0usize;
    let t0 = Instant::now();
    let mut frames = 0usize;
    for case in 0..CASES {
        let bytes = frame(&mut rng, &defaults);
        frames += 1;
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let result = wire::read_frame_raw(&mut &bytes[..], peer);
        worst_extra = worst_extra.max(PEAK.load(Ordering::Relaxed) - base);
        let (msg, body) = match result {
            Ok(pair) => pair,
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("192.0.2.1:5301"),
                    "case {case}: an error that does not name the peer: {text}"
                );
                continue;
            }
        };
        decoded += 1;
        // The decoded message at a random state of a fresh handshake, with or without keys.
        let with_keys = case % 2 == 0;
        let mut h = Handshake::with_protocol_limits(with_keys.then(|| keys.clone())).unwrap();
        let depth = rng.below(3);
        if depth >= 1 {
            assert!(matches!(h.input(valid_hello(), b""), Step::Reply(_)));
        }
        if depth >= 2 && with_keys {
            let req = ControlMsg::AuthRequest {
                user: "alice".into(),
                nonce: auth::to_hex(&[1; 32]),
            };
            assert!(matches!(h.input(req, b""), Step::Reply(_)));
        }
        match h.input(msg, &body) {
            Step::Reply(_) | Step::Wait => waited += 1,
            Step::Admit(t) => {
                assert!(!with_keys || depth < 2, "admitted without a proof");
                assert!(t.streams() >= 1);
                admitted += 1;
            }
            Step::Refuse(r) => {
                assert!(!r.to_client.is_empty() && !r.to_log.is_empty(), "{r:?}");
                if r.why == "auth" && with_keys {
                    // The same words for any failure, or (nothing was tried) the fix.
                    assert!(
                        r.to_client == "authentication failed"
                            || r.to_client.starts_with(
                                "this server requires authentication: give --auth USER"
                            ),
                        "{r:?}"
                    );
                }
                refused += 1;
            }
            Step::Broken(what) => {
                assert!(what.starts_with("expected "), "{what}");
                broken += 1;
            }
        }
    }
    let elapsed = t0.elapsed();
    println!(
        "fuzz: {frames} frames in {:.2} s: {decoded} decoded ({admitted} admitted, {refused} \
         refused, {broken} out of order, {waited} answered or awaited), {} rejected by the \
         decoder; largest extra memory for one frame {worst_extra} bytes (limit {MAX_FRAME})",
        elapsed.as_secs_f64(),
        frames - decoded
    );
    assert!(frames >= 100_000, "{frames} frames");
    // Mutation hit every outcome (a generator that only made garbage would not).
    assert!(admitted > 0 && refused > 0 && broken > 0 && decoded < CASES);
    // One frame's buffer, at most the limit, plus what parsing it builds.
    assert!(
        worst_extra <= 2 * MAX_FRAME,
        "a frame cost {worst_extra} bytes"
    );

    // Over loopback: mutated handshakes to a real server, each followed by the close of
    // the client's side; then a real client is served (from another address: the
    // handshakes that took the slot and ran nothing locked their own out).
    let port = util::free_port().to_string();
    let mut server = util::spawn(&["-s", "-p", &port, "-B", "127.0.0.1"]);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t1 = Instant::now();
    const CONNECTIONS: usize = 300;
    for _ in 0..CONNECTIONS {
        let mut s = TcpStream::connect(addr).unwrap();
        let mut out = wire::PREAMBLE.to_vec();
        if rng.chance(2) {
            out.extend(wire::encode(&valid_hello()));
        }
        for _ in 0..1 + rng.below(3) {
            out.extend(frame(&mut rng, &defaults));
        }
        let _ = s.write_all(&out);
        let _ = s.shutdown(Shutdown::Write);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The server answers or closes; either way within the read's 5 s.
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    println!(
        "fuzz: {CONNECTIONS} mutated handshakes to a real server in {:.2} s",
        t1.elapsed().as_secs_f64()
    );
    let run = util::pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-B",
            "127.0.0.2",
            "-p",
            &port,
            "-t",
            "0.3",
            "-i",
            "0.3",
        ],
        Duration::from_secs(20),
    );
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    run.assert_ok();
    assert!(!log.contains("panicked"), "{log}");
}
