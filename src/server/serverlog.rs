//! The server's log on stderr (or appended to `--logfile`'s file): human lines
//! (`pinperf: …`, the default) or, with `--log-format json`, one JSON object per line for
//! journald and fail2ban. Every line has `time` (Unix seconds) and `event`: `listening`,
//! `refused` (with `why`, a fixed word a filter can match: `allow`, `rate`, `busy`,
//! `auth`, `params`, `version`, `handshake`, `fds`, `stranger`, `cookie`, `exceeded`;
//! repeats from one source are summed up, see [`Repeats`]), `test_start` (peer, user,
//! parameters), `test_end` (peer, user, totals), `error`, and `message` for anything else.
//! Text lines start with `--timestamps`'s time and `-T`'s title, as iperf3 -s's do. Any
//! thread may log; each line is written whole, and a log nobody reads any more (a closed
//! pipe, a full disk) loses lines, never a test. The output is the process's (one `-s`
//! server per process; in-process servers are quiet).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::config::LogOutput;
use crate::error::{Error, Result};

static JSON: AtomicBool = AtomicBool::new(false);

/// The log's writer and its text lines' prefixes once [`set_output`] chose them; stderr
/// until then.
static OUT: Mutex<Option<Sink>> = Mutex::new(None);

struct Sink {
    out: Box<dyn Write + Send>,
    timestamps: Option<String>,
    title: Option<String>,
}

thread_local! {
    /// The authenticated user of the test this `control` thread runs, for its events.
    static USER: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Names the user of the test on this thread (none without `--auth-keys`).
pub fn set_user(user: Option<&str>) {
    USER.with(|u| *u.borrow_mut() = user.map(str::to_string));
}

/// Chooses the log's format and writer for the rest of the process; `--logfile`'s file is
/// opened to append now, so a wrong path stops the server before it listens.
pub fn set_output(log: &LogOutput) -> Result<()> {
    JSON.store(log.json, Ordering::Relaxed);
    let out: Box<dyn Write + Send> = match &log.file {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Error::io(format!("--logfile {}: open", path.display()), e))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    *OUT.lock() = Some(Sink {
        out,
        timestamps: log.timestamps.clone(),
        title: log.title.clone(),
    });
    Ok(())
}

/// Writes one line, prefixes included, in one write; a write that fails loses the line
/// (see the module's note), and the next starts a line of its own.
fn write_line(line: &str) {
    match OUT.lock().as_mut() {
        Some(sink) => {
            let prefix = crate::report::prefix::line_prefix(
                sink.timestamps.as_deref(),
                sink.title.as_deref(),
            )
            .unwrap_or_default();
            let _ = sink.out.write_all(format!("{prefix}{line}\n").as_bytes());
        }
        None => stderrln!("{line}"),
    }
}

fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| (d.as_micros() as f64) / 1e6)
}

/// Writes one event: `text` as it is, or the JSON object `fields` with `time` and `event`.
/// In text, `text` may be `None`: the event has no line of its own there.
fn emit(event: &str, fields: Value, text: impl FnOnce() -> Option<String>) {
    if is_json() {
        let mut obj = serde_json::Map::new();
        obj.insert("time".into(), json!(now()));
        obj.insert("event".into(), json!(event));
        if let Value::Object(rest) = fields {
            obj.extend(rest);
        }
        write_line(&Value::Object(obj).to_string());
    } else if let Some(line) = text() {
        // Peer-supplied words reach text lines inside messages (a refused congestion
        // control name, a user name): their control characters are escaped here, once for
        // every line, so a peer can neither forge a line nor drive a terminal. JSON lines
        // are serde's, whose escapes are JSON's.
        write_line(&crate::wire::printable(&line, usize::MAX));
    }
}

/// A free-form line (`pinperf: …`): in JSON, `{"event":"message","text":…}`.
pub fn message(text: String) {
    emit("message", json!({ "text": text }), || Some(text.clone()));
}

pub fn listening(addr: SocketAddr, software: &str, auth: bool, allow: &[String]) {
    emit(
        "listening",
        json!({ "address": addr.to_string(), "software": software, "auth": auth, "allow": allow }),
        || Some(format!("pinperf: server listening on {addr} ({software})")),
    );
}

/// Refusal lines one source may write at once, and how many more a second after: a
/// flood of garbage connections from one address is summed up, not written out.
const REPEAT_BURST: f64 = 20.0;
const REPEAT_PER_SEC: f64 = 5.0;

/// Sources whose refusals are counted at most (more are forgotten, oldest first).
const REPEAT_SOURCES: usize = 4096;

/// Refusal lines per source and `why`, as a token bucket: a line is written while the
/// bucket has a token; the ones left out are counted and said ("… N more") on the next
/// line that is written for the same source and reason.
static REPEATS: Mutex<Option<Repeats>> = Mutex::new(None);

#[derive(Default)]
struct Repeats {
    /// Per source (as `--max-tests-per-minute` counts them) and `why`: tokens, when they
    /// were counted, and the lines left out since the last written.
    by: std::collections::HashMap<(u128, String), (f64, std::time::Instant, u64)>,
}

impl Repeats {
    /// Whether to write a line for `key` now, and how many were left out before it.
    fn admit(
        &mut self,
        (ip, why): (std::net::IpAddr, String),
        now: std::time::Instant,
    ) -> Option<u64> {
        let key = (super::allow::Rate::source(ip), why);
        if self.by.len() >= REPEAT_SOURCES && !self.by.contains_key(&key) {
            // A full bucket is a forgotten one: sources quiet for a while go first.
            let idle = std::time::Duration::from_secs_f64(REPEAT_BURST / REPEAT_PER_SEC);
            self.by.retain(|_, (_, at, skipped)| {
                *skipped > 0 || now.saturating_duration_since(*at) < idle
            });
            if self.by.len() >= REPEAT_SOURCES
                && let Some(oldest) = self
                    .by
                    .iter()
                    .min_by_key(|(_, (_, at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                self.by.remove(&oldest);
            }
        }
        let (tokens, at, skipped) = self.by.entry(key).or_insert((REPEAT_BURST, now, 0));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * REPEAT_PER_SEC;
        *tokens = (*tokens + refill).min(REPEAT_BURST);
        *at = now;
        if *tokens < 1.0 {
            *skipped += 1;
            return None;
        }
        *tokens -= 1.0;
        Some(std::mem::take(skipped))
    }
}

/// A connection or a test the server turned away; `why` is one fixed word.
pub fn refused(peer: SocketAddr, user: Option<&str>, why: &str, reason: &str) {
    let key = (peer.ip(), why.to_string());
    let Some(skipped) = REPEATS
        .lock()
        .get_or_insert_with(Repeats::default)
        .admit(key, std::time::Instant::now())
    else {
        return;
    };
    let reason = match skipped {
        0 => reason.to_string(),
        n => format!("{reason} (… {n} more like it from this address since the last line)"),
    };
    let reason = reason.as_str();
    emit(
        "refused",
        json!({ "peer": peer.to_string(), "user": user, "why": why, "reason": reason, "more": skipped }),
        || {
            Some(match (why, user) {
                // A test refused for what it asked: the words these lines always had.
                ("params" | "version", _) => {
                    format!("pinperf: test from {peer} failed: refused the client's test: {reason}")
                }
                (_, Some(u)) => format!("pinperf: refused client {peer} (user {u}): {reason}"),
                (_, None) => format!("pinperf: refused client {peer}: {reason}"),
            })
        },
    );
}

pub fn test_start(peer: SocketAddr, user: Option<&str>, params: &crate::wire::params::TestParams) {
    let params = serde_json::to_value(params).unwrap_or(Value::Null);
    emit(
        "test_start",
        json!({ "peer": peer.to_string(), "user": user, "params": params }),
        || user.map(|u| format!("pinperf: test from {peer}: user {u}")),
    );
}

/// A test's end with its totals; `text` is the human line. The user is the one
/// [`set_user`] named on this thread.
pub fn test_end(
    peer: SocketAddr,
    received_bytes: u64,
    sent_bytes: u64,
    seconds: f64,
    text: impl FnOnce() -> String,
) {
    let user = USER.with(|u| u.borrow().clone());
    emit(
        "test_end",
        json!({
            "peer": peer.to_string(),
            "user": user,
            "received_bytes": received_bytes,
            "sent_bytes": sent_bytes,
            "seconds": seconds,
            "bits_per_second": if seconds > 0.0 { received_bytes as f64 * 8.0 / seconds } else { 0.0 },
        }),
        || Some(text()),
    );
}

pub fn error(peer: Option<SocketAddr>, user: Option<&str>, what: &str) {
    failed(peer, user, "test", what);
}

/// A test failed: its text line names it (`test` as "test", "iperf3 test") as its start and
/// end do.
pub fn failed(peer: Option<SocketAddr>, user: Option<&str>, test: &str, what: &str) {
    emit(
        "error",
        json!({ "peer": peer.map(|p| p.to_string()), "user": user, "error": what }),
        || {
            Some(match peer {
                Some(p) => format!("pinperf: {test} from {p} failed: {what}"),
                None => format!("pinperf: {what}"),
            })
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twenty lines at once, then five a second; what is left out is said on the next.
    #[test]
    fn repeated_refusals_from_one_source_are_summed_up() {
        let t0 = std::time::Instant::now();
        let key = || ("192.0.2.1".parse().unwrap(), "handshake".to_string());
        let mut r = Repeats::default();
        let written = (0..100).filter(|_| r.admit(key(), t0).is_some()).count();
        assert_eq!(written, 20);
        let other = ("192.0.2.2".parse().unwrap(), "handshake".to_string());
        assert_eq!(r.admit(other, t0), Some(0), "another source");
        assert_eq!(
            r.admit(key(), t0 + std::time::Duration::from_millis(200)),
            Some(80)
        );
    }
}
