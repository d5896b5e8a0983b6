//! `pinperf -s` serving an iperf3 client. The server's acceptor hands every connection to
//! a `control` thread; one that opens with a cookie (see [`crate::iperf3::looks_like_cookie`])
//! comes here: a cookie of the running iperf3 test is one of its stream connections (handed
//! to it in accept order, which is the client's creation order and so iperf3's stream
//! ids), any other is a new test: `PARAM_EXCHANGE`, its parameters checked by the server's
//! limits ([`TestParams::validate`]; a refusal is `SERVER_ERROR` with iperf3's code for the
//! flag), then the slot (busy: `ACCESS_DENIED`), then [`run_test`].
//!
//! The test runs on pinperf's pinned `stream-N` threads. At `TEST_END` the server asks for
//! the client's results first, so its receivers read until each stream has every byte the
//! client says it wrote (then their sockets are shut for reading, which ends them), and
//! the counts it returns agree with the client's to the byte. With `-O`, both leave out
//! the bytes of the omitted seconds (each on its own clock, as two iperf3 ends do), and
//! the time counts from their end.
//!
//! UDP (`-u`): the streams connect to a listener on the control port's number
//! ([`super::udp::Listener`]) and carry iperf3's datagram header. Receivers listen a
//! settle time past the test's end ([`timeouts::udp_settle`]), so every datagram the
//! client sent before its `TEST_END` is counted; the results say per stream the bytes and
//! datagrams received, the loss by sequence and the RFC 3550 jitter, which the iperf3
//! client prints as its receiver's line.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use super::{Ctl, Params, Results, StreamResult, server_doc, stream_id};
use crate::data::ends::{Ends, Socks, Threads};
use crate::data::pin::{self, PinPlan};
use crate::data::stream::{StreamSocks, UdpSnapshot, parked, spawn_named};
use crate::data::udp::wire::Format;
use crate::error::{Error, Result};
use crate::os::cpu::CpuMark;
use crate::report::interval::IntervalCutter;
use crate::server::bounds::Bounds;
use crate::server::shared::Slot;
use crate::timeouts;
use crate::wire::measure::{ClosedInterval, TcpSample};
use crate::wire::params::TestParams;

/// An iperf3 test that may run here: pinperf's parameters, the pin plan, the header its
/// UDP datagrams carry and whether the client wants the server's report.
pub(crate) struct Admitted {
    pub test: TestParams,
    pub plan: PinPlan,
    pub wire: Format,
    /// The user its RSA credentials spoke for, on a server that asks for them.
    pub user: Option<String>,
}

/// `--format iperf3-json` on a server: the test's cookie (its document names it) and,
/// once the test is over, its document.
pub(crate) struct Document {
    pub cookie: Vec<u8>,
    pub value: Option<String>,
}

/// A test's parameters, or the refusal the client gets (iperf3's code) and the log's words.
pub(crate) fn read_params(
    ctl: &mut Ctl,
    cfg: &crate::config::ServerConfig,
    deadline: Instant,
) -> Result<std::result::Result<Admitted, super::Unsupported>> {
    let (limits, affinity) = (&cfg.limits, &cfg.affinity);
    ctl.send_state(super::PARAM_EXCHANGE)?;
    let left = deadline.saturating_duration_since(Instant::now());
    let params: Params = ctl.read_json(left, "the test parameters")?;
    let user = match authorized(&params, cfg.iperf3_gate.as_deref()) {
        Ok(user) => user,
        Err(u) => return Ok(Err(u)),
    };
    let mut test = match params.to_test() {
        Ok(t) => t,
        Err(u) => return Ok(Err(u)),
    };
    test.fit_budget(limits);
    if let Err(reason) = test.validate(&super::limits(*limits)) {
        return Ok(Err(super::Unsupported {
            code: super::code_for(&reason),
            reason,
        }));
    }
    let wire = params.wire();
    Ok(pin::plan(affinity, test.threads(), &pin::allowed_cpus())
        .map(|plan| Admitted {
            test,
            plan,
            wire,
            user,
        })
        .map_err(|reason| super::Unsupported {
            code: super::IEUNIMP,
            reason: format!("-A: {reason}"),
        }))
}

/// On a server with `--rsa-private-key-path`, the user the parameters' `authtoken` speaks
/// for; a missing or refused token is iperf3's "test authorization failed".
fn authorized(
    params: &Params,
    gate: Option<&super::auth::Gate>,
) -> std::result::Result<Option<String>, super::Unsupported> {
    let Some(gate) = gate else { return Ok(None) };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let refused = |reason: String| super::Unsupported {
        code: super::IEAUTHTEST,
        reason,
    };
    match params.authtoken.as_deref() {
        None => Err(refused(
            "no credentials: this server requires iperf3's RSA authentication".into(),
        )),
        Some(token) => gate
            .check(token, now)
            .map(Some)
            .map_err(|r| refused(r.to_string())),
    }
}

/// Runs an admitted iperf3 test on `ctl`: its TCP stream connections arrive on `streams`
/// (numbered in accept order), its UDP streams at a listener on the control port's number.
/// Returns the bytes received and sent, for the log, and `--get-server-output`'s lines.
pub(crate) fn run_test(
    ctl: &mut Ctl,
    admitted: Admitted,
    streams: &Receiver<(u64, TcpStream)>,
    opening_line: &str,
    cfg: &crate::config::ServerConfig,
    slot: &Slot,
    doc: Option<&mut Document>,
) -> Result<(u64, u64)> {
    let Admitted {
        test, plan, wire, ..
    } = admitted;
    // This server's own --rcv-timeout, for its receivers.
    let test = &TestParams {
        rcv_timeout: cfg.rcv_timeout,
        ..test
    };
    let rtt = crate::os::net::rtt(&ctl.sock);
    let (socks, dups) = connect(ctl, test, streams, wire, cfg, rtt)?;
    let sockets = socks.duplicates();
    let opening = doc
        .as_ref()
        .map(|d| server_doc::Opening::of(&sockets, ctl.peer, &d.cookie, test.udp));
    let reversed = test.direction().reversed();
    let cut = opening.is_some();
    let mut ends = Ends::default();
    let counters = match spawn(&mut ends, socks, &plan, test, rtt, cut) {
        Ok(counters) => counters,
        Err(e) => {
            ends.abort();
            return Err(init_failed(ctl, e));
        }
    };
    ctl.send_state(super::TEST_START)?;
    let cpu = CpuMark::now();
    let t0 = Instant::now();
    let mut bounds = Bounds::new(t0, test, rtt, cfg.limits.max_rate_bps, sockets)
        .with_total_rate(cfg.limits.total_rate);
    ends.start(t0);
    slot.running();
    ctl.send_state(super::TEST_RUNNING)?;

    // `--get-server-output`: this server's lines about the test, for the client (a server
    // writing documents sends its document instead).
    let told = (test.get_server_output && !cut).then(|| vec![opening_line.to_string()]);
    let mut watched = Watched {
        ends: &ends,
        counters: &counters,
        reversed,
        bounds: &mut bounds,
        opening,
        rendered: None,
    };
    let result = watch(ctl, &mut watched, test, cfg, t0)
        .and_then(|()| finish(ctl, test, &mut watched, &dups, &cpu, t0, told, slot));
    if let Some(doc) = doc {
        doc.value = watched.document(test, &result);
    }
    if result.is_err() {
        // The test is over for its client (it terminated, closed, or was told why): the
        // next client waits out the streams' end for the slot instead of hearing "busy, about
        // 7 s left" (a pinperf client right after a killed iperf3 -u client).
        slot.finishing();
        ends.abort();
    }
    // The client closes its streams after DISPLAY_RESULTS; shut them here too, so that no
    // thread waits on a client that went away.
    for d in &dups {
        let _ = d.shutdown(std::net::Shutdown::Both);
    }
    // A stream that failed during the test was caught by `watch` (SERVER_ERROR to the
    // client). Once `finish` has the counts both ends agreed on, what the streams meet
    // while they end is not a failure of the test: an iperf3 client closes its sockets
    // with data still unread (`-R`), which resets a sender draining to EOF.
    let _ = ends.join(test.zerocopy);
    result
}

/// Each direction's pinned threads (into `ends`) and their counts, with intervals cut
/// when the server writes the test's document.
fn spawn(
    ends: &mut Ends,
    mut socks: Socks,
    plan: &PinPlan,
    test: &TestParams,
    rtt: Duration,
    cut: bool,
) -> Result<Vec<Arc<Mutex<Counts>>>> {
    let n = test.streams as usize;
    let mut counters = Vec::new();
    // A UDP count sent from here goes on until the client's TEST_END closes it, as
    // iperf3's server sends: the client ends once the count has arrived, and a lost
    // datagram must not leave it waiting for bytes that never come.
    let mut uncounted = test.clone();
    if test.budget().is_some() {
        (uncounted.bytes, uncounted.blocks) = (Some(u64::MAX), None);
    }
    for (k, &reverse) in test.direction().reversed().iter().enumerate() {
        let plan = PinPlan(plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, batches) = Threads::spawn(
            reverse,
            crate::choices::Engine::Threads,
            socks.take(n),
            &plan,
            if reverse && test.udp {
                &uncounted
            } else {
                test
            },
            timeouts::udp_settle(rtt),
        )?;
        ends.0.push(threads);
        let cutter = cut.then(|| IntervalCutter::for_test(n, test));
        counters.push(Counts::spawn(batches, n, test.omit(), cutter)?);
    }
    Ok(counters)
}

/// The test's streams, TCP (with a duplicate of each socket, to shut it) or UDP, once
/// all arrived.
fn connect(
    ctl: &mut Ctl,
    test: &TestParams,
    streams: &Receiver<(u64, TcpStream)>,
    wire: Format,
    cfg: &crate::config::ServerConfig,
    rtt: Duration,
) -> Result<(Socks, Vec<TcpStream>)> {
    let deadline = || Instant::now() + timeouts::streams_arrive(test.threads(), rtt);
    Ok(match test.udp {
        false => {
            ctl.send_state(super::CREATE_STREAMS)?;
            let wait = timeouts::StreamsArrive::new(test.threads(), rtt);
            let (socks, dups) = tcp_streams(ctl, test, streams, wait).map_err(Error::abandoned)?;
            (Socks::TcpEndedByClose(socks), dups)
        }
        true => {
            let socks = udp_streams(ctl, test, cfg.limits.max_window_bytes, deadline)
                .map_err(Error::abandoned)?;
            (Socks::UdpAs(socks, wire), Vec::new())
        }
    })
}

/// One direction's running counts, from its batches.
struct Counts {
    bytes: Vec<u64>,
    /// Of `bytes`, those stamped inside `-O`'s omitted seconds: iperf3 leaves them out of
    /// its results, on both ends.
    omitted: Vec<u64>,
    done: Vec<bool>,
    /// Each stream's last record's time (ns from the test's start): a receiver's end.
    last_ns: Vec<u64>,
    /// `-u` receivers: each stream's last datagram counts.
    udp: Vec<Option<UdpSnapshot>>,
    /// TCP senders: each stream's retransmits, from its kernel samples.
    retransmits: Vec<Retransmits>,
    /// A server writing documents: the direction's intervals, and those closed so far.
    cuts: Option<(IntervalCutter, Vec<ClosedInterval>)>,
}

/// A sending stream's retransmits as iperf3 counts them: after `-O`'s omitted seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Retransmits {
    /// The kernel's count at the last sample inside `-O`.
    omitted: u32,
    last: Option<u32>,
}

impl Retransmits {
    fn sample(&mut self, s: &TcpSample, omit_ns: u64) {
        if s.t_ns < omit_ns {
            self.omitted = s.total_retrans;
        }
        self.last = Some(s.total_retrans);
    }

    /// None when the stream never sampled its socket (UDP, a receiver).
    fn counted(&self) -> Option<u64> {
        self.last
            .map(|last| u64::from(last.saturating_sub(self.omitted)))
    }
}

impl Counts {
    /// A direction's counts, kept by a `reporter` thread from its `n` streams' batches.
    fn spawn(
        batches: crate::data::ends::Batches,
        n: usize,
        omit: Duration,
        cutter: Option<IntervalCutter>,
    ) -> Result<Arc<Mutex<Counts>>> {
        let count = Arc::new(Mutex::new(Counts {
            bytes: vec![0; n],
            omitted: vec![0; n],
            done: vec![false; n],
            last_ns: vec![0; n],
            udp: vec![None; n],
            retransmits: vec![Retransmits::default(); n],
            cuts: cutter.map(|c| (c, Vec::new())),
        }));
        let c2 = Arc::clone(&count);
        let omit_ns = omit.as_nanos() as u64;
        let (rx, free) = batches;
        spawn_named("reporter".into(), move || {
            for batch in parked(&rx) {
                let mut c = c2.lock();
                let i = usize::from(batch.stream);
                // One pass over the batch: all its bytes, and those inside -O.
                let (all, early) = batch.records.iter().fold((0, 0), |(all, early), r| {
                    let b = u64::from(r.bytes);
                    (all + b, early + if r.t_ns < omit_ns { b } else { 0 })
                });
                let Counts {
                    bytes,
                    omitted,
                    last_ns,
                    ..
                } = &mut *c;
                if let (Some(b), Some(o)) = (bytes.get_mut(i), omitted.get_mut(i)) {
                    *b += all;
                    *o += early;
                }
                if let (Some(l), Some(r)) = (last_ns.get_mut(i), batch.records.last()) {
                    *l = (*l).max(r.t_ns);
                }
                if batch.done
                    && let Some(d) = c.done.get_mut(i)
                {
                    *d = true;
                }
                if let (Some(last), Some(u)) = (batch.udp.last(), c.udp.get_mut(i)) {
                    *u = Some(*last);
                }
                if let Some(r) = c.retransmits.get_mut(i) {
                    batch.samples.iter().for_each(|s| r.sample(s, omit_ns));
                }
                if let Some((cutter, closed)) = c.cuts.as_mut() {
                    cutter.add(&batch);
                    closed.extend(std::iter::from_fn(|| cutter.pop_ready()));
                }
                drop(c);
                let _ = free.try_send(batch);
            }
        })?;
        Ok(count)
    }

    /// Each stream's bytes past `-O`'s omitted seconds: what iperf3's results count.
    fn counted(&self) -> Vec<u64> {
        self.bytes
            .iter()
            .zip(&self.omitted)
            .map(|(b, o)| b - o)
            .collect()
    }
}

/// What the watcher looks at while a test runs and drains: its threads, their counts and
/// the server's bounds on them.
struct Watched<'a> {
    ends: &'a Ends,
    counters: &'a [Arc<Mutex<Counts>>],
    /// Each direction's: true where this end sends.
    reversed: &'a [bool],
    bounds: &'a mut Bounds,
    /// A server writing documents: what it knew at the start, and the document once the
    /// results are exchanged.
    opening: Option<server_doc::Opening>,
    rendered: Option<String>,
}

impl Watched<'_> {
    /// The test's document: rendered with both ends' results, or (it failed) its rows so
    /// far and the error.
    fn document(&mut self, test: &TestParams, result: &Result<(u64, u64)>) -> Option<String> {
        let opening = self.opening.as_ref()?;
        match (self.rendered.take(), result) {
            (Some(doc), Ok(_)) => Some(doc),
            (_, r) => {
                let error = r.as_ref().err().map(|e| e.to_string());
                let cuts = cut_so_far(self.counters);
                let figures = server_doc::Figures {
                    cuts: &cuts,
                    ours: None,
                    theirs: None,
                };
                Some(server_doc::render(
                    test,
                    opening,
                    &figures,
                    error.as_deref(),
                ))
            }
        }
    }

    /// Why the server cuts the test now ([`Bounds::check`]), if it does: `SERVER_ERROR`
    /// with iperf3's code for it is sent to the client.
    fn exceeded(&mut self, ctl: &mut Ctl) -> Option<Error> {
        let (mut received, mut moved) = (Vec::new(), 0);
        for (c, &sends) in self.counters.iter().zip(self.reversed) {
            let c = c.lock();
            moved += c.bytes.iter().sum::<u64>();
            if !sends {
                received.extend_from_slice(&c.bytes);
            }
        }
        let cut = self.bounds.check(Instant::now(), &received, moved)?;
        let text = cut.to_string();
        let code = match text.contains("--max-rate") || text.contains("--server-bitrate-limit") {
            true => super::IETOTALRATE,
            false => super::IESERVERTESTDURATIONEXPIRED,
        };
        let _ = ctl.send_server_error(code, 0);
        Some(cut)
    }
}

/// Whether the peer closed `sock` (or it failed), waiting up to `wait` for it: nothing is
/// read from it.
fn closed(sock: &TcpStream, wait: Duration) -> bool {
    let mut fds = [crate::os::sys::pollfd(sock.as_raw_fd(), libc::POLLRDHUP)];
    let gone = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    crate::os::sys::poll(&mut fds, ms).is_ok() && fds[0].revents & gone != 0
}

/// Tells the client that this end could not set its streams up (iperf3's "unable to
/// initialize stream", with the errno, which its client prints as words), and passes `e` on.
/// Without it, the client saw only its control connection close.
fn init_failed(ctl: &mut Ctl, e: Error) -> Error {
    let errno = match &e {
        Error::Io { source, .. } => source.raw_os_error().unwrap_or(0),
        _ => 0,
    };
    let _ = ctl.send_server_error(super::IEINITSTREAM, errno);
    e
}

/// The test's TCP streams, in the client's order, with `-w` and `-C` set; `SERVER_ERROR`
/// to the client when they do not all come or cannot be set up.
fn tcp_streams(
    ctl: &mut Ctl,
    test: &TestParams,
    streams: &Receiver<(u64, TcpStream)>,
    mut wait: timeouts::StreamsArrive,
) -> Result<(Vec<StreamSocks>, Vec<TcpStream>)> {
    let mut arrived = Vec::with_capacity(test.threads());
    while arrived.len() < test.threads() {
        let left = wait.deadline().saturating_duration_since(Instant::now());
        match streams.recv_timeout(left.min(super::deadlines::STREAMS_LOOK)) {
            Ok(s) => {
                arrived.push(s);
                wait.arrived();
            }
            // An iperf3 client that failed after its parameters (its own -w refused, say)
            // or was killed closes the control connection: the slot is free at once, not at
            // the deadline (nor a poll later: a client killed while its streams connected
            // held it 100 ms, and an iperf3 client right after it was refused as busy).
            Err(_) if closed(&ctl.sock, Duration::ZERO) => {
                return Err(Error::Test(format!(
                    "the iperf3 client closed its control connection while {} of {} stream \
                     connections had arrived",
                    arrived.len(),
                    test.threads()
                )));
            }
            // Only a timeout waits on: the channel cannot disconnect while the test is
            // registered, and if it did this would spin until the deadline.
            Err(crossbeam_channel::RecvTimeoutError::Timeout) if !left.is_zero() => {}
            Err(_) => {
                let _ = ctl.send_server_error(super::IESTREAMACCEPT, 0);
                return Err(Error::Test(format!(
                    "{} of {} iperf3 stream connections arrived in time",
                    arrived.len(),
                    test.threads()
                )));
            }
        }
    }
    arrived.sort_by_key(|(order, _)| *order);
    let mut socks = Vec::with_capacity(arrived.len());
    let mut dups = Vec::with_capacity(arrived.len());
    for (_, s) in arrived {
        let r = socket2::SockRef::from(&s);
        if let Some(w) = test.window_bytes {
            // The listener the streams connected to had it (`server::Relisten`), and
            // its SYN-ACKs the window scale for it; set again should that have failed.
            let _ = r.set_recv_buffer_size(w as usize);
            let _ = r.set_send_buffer_size(w as usize);
        }
        if let Err(e) = crate::os::net::SocketOpts::of(test).apply(&r) {
            let _ = ctl.send_server_error(super::code_for(&e.to_string()), 0);
            return Err(e);
        }
        match s.try_clone() {
            Ok(dup) => dups.push(dup),
            Err(e) => return Err(init_failed(ctl, Error::io("duplicate a data socket", e))),
        }
        socks.push(StreamSocks {
            data: s,
            echo: None,
        });
    }
    Ok((socks, dups))
}

/// The test's UDP streams: the listener on the control port's number is bound before the
/// client is told to create them (as an iperf3 server's is), then each stream's connect
/// datagram is answered in turn, its buffer at most `cap` (`--max-window`) without `-w`.
/// `SERVER_ERROR` to the client on failure.
fn udp_streams(
    ctl: &mut Ctl,
    test: &TestParams,
    cap: u64,
    deadline: impl Fn() -> Instant,
) -> Result<Vec<std::net::UdpSocket>> {
    use std::os::fd::AsRawFd;
    let local = ctl
        .sock
        .local_addr()
        .map_err(|e| Error::io("read the control connection's address", e))?;
    let local = std::net::SocketAddr::new(local.ip().to_canonical(), local.port());
    let listener = match super::udp::Listener::bind(local) {
        Ok(l) => l,
        Err(e) => {
            let _ = ctl.send_server_error(super::IESTREAMLISTEN, e.raw_os_error().unwrap_or(0));
            return Err(Error::io(
                format!("bind the iperf3 UDP listener on {local}"),
                e,
            ));
        }
    };
    ctl.send_state(super::CREATE_STREAMS)?;
    let fd = ctl.sock.as_raw_fd();
    listener
        .accept(test.threads(), ctl.peer.ip(), test, cap, fd, deadline())
        .inspect_err(|e| {
            // An option the host refused (-S: set IP_TOS) has iperf3's own code.
            let code = match super::code_for(&e.to_string()) {
                super::IEUNIMP => super::IESTREAMACCEPT,
                named => named,
            };
            let _ = ctl.send_server_error(code, 0);
        })
}

/// Until the client's `TEST_END`: a stream failure is `SERVER_ERROR`, a stop signal
/// `SERVER_TERMINATE`; the client closing or terminating ends the test. Past the run time
/// a client may wait for its data to drain (pinperf's does): given up only when nothing
/// moved on the TCP streams for `timeouts::STALL`, and cut at the server's bounds.
fn watch(
    ctl: &mut Ctl,
    watched: &mut Watched,
    test: &TestParams,
    cfg: &crate::config::ServerConfig,
    t0: Instant,
) -> Result<()> {
    // Bytes read and bytes acknowledged on the streams, looked at past the run time (a
    // client paused during it is not given up early); the stall clock starts at its end.
    let mut progress = timeouts::Progress::new(timeouts::STALL, 0, t0 + test.run_time());
    let ends = watched.ends;
    loop {
        // A stop signal: iperf3's own server says SERVER_TERMINATE ("the server has
        // terminated", its client prints).
        if let Some(stopped) = crate::signals::server_stopped(cfg.signals, t0) {
            let _ = ctl.send_state(super::SERVER_TERMINATE);
            // Its client reads the control connection before it writes again, then
            // closes: the streams stop after that, or its write meets the broken pipe
            // first and it says only that.
            closed(&ctl.sock, super::deadlines::CAUSE);
            return Err(stopped);
        }
        if let Some(f) = ends.failure() {
            // A reset read here may be the client's own failure, whose IPERF_DONE follows
            // at once: then that is the cause.
            if f.peer_closed
                && let Ok(state) = ctl.read_state(timeouts::PEER_WORD)
                && let Some(ended) = client_ended(ctl.peer, state, t0)
            {
                return Err(ended);
            }
            let _ = ctl.send_server_error(206, 0);
            return Err(Error::Test(format!(
                "{} ({:.2} s into the test, on the server)",
                f.error,
                f.at.saturating_duration_since(t0).as_secs_f64()
            )));
        }
        let moved = watched.bounds.progress();
        if t0.elapsed() > test.run_time() && progress.stalled(moved, Instant::now()) {
            return Err(Error::Test(format!(
                "the iperf3 client {} sent no TEST_END, and nothing moved on its streams, for \
                 {} s past the test's end",
                ctl.peer,
                timeouts::STALL.as_secs()
            )));
        }
        match ctl.read_state(timeouts::POLL) {
            Ok(super::TEST_END) => return Ok(()),
            Ok(state) if let Some(ended) = client_ended(ctl.peer, state, t0) => return Err(ended),
            Ok(super::TEST_START) | Ok(super::TEST_RUNNING) => {}
            Ok(other) => {
                return Err(Error::Protocol {
                    peer: ctl.peer,
                    what: format!("expected TEST_END, got {}", super::state_name(other)),
                });
            }
            // Nothing from the client this poll (its TEST_END would have been read first):
            // the server's bounds.
            Err(Error::Test(e)) if e.contains("sent nothing") => {
                if let Some(cut) = watched.exceeded(ctl) {
                    return Err(cut);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The iperf3 client's `state` when it ended the test itself: it terminated it (a signal),
/// or it failed (a stream's write, say) and sent IPERF_DONE as it exited, its own error,
/// which it prints, the cause.
fn client_ended(peer: SocketAddr, state: i8, t0: Instant) -> Option<Error> {
    let how = match state {
        super::CLIENT_TERMINATE => "terminated the test".to_string(),
        super::IPERF_DONE => format!(
            "ended the test {:.2} s in, before its TEST_END (IPERF_DONE: an error of its own, \
             which it names)",
            t0.elapsed().as_secs_f64()
        ),
        _ => return None,
    };
    Some(Error::Test(format!("the iperf3 client {peer} {how}")))
}

/// `TEST_END` taken: the senders' last bytes, the client's results, the receivers' last
/// bytes (until each has what the client wrote, or no progress for a while), then this
/// end's results and `DISPLAY_RESULTS`.
#[allow(clippy::too_many_arguments)]
fn finish(
    ctl: &mut Ctl,
    test: &TestParams,
    watched: &mut Watched,
    dups: &[TcpStream],
    cpu: &CpuMark,
    t0: Instant,
    told: Option<Vec<String>>,
    slot: &Slot,
) -> Result<(u64, u64)> {
    // The receivers' time, as iperf3's: to the client's end of the test, from the end of
    // -O's omitted seconds (iperf3 restarts its clock there).
    let elapsed = (t0.elapsed().saturating_sub(test.omit())).as_secs_f64();
    // This end's senders stop on their own clock, about now (a count: at TEST_END).
    watched.ends.close_budgets();
    for (c, &reverse) in watched.counters.iter().zip(watched.reversed) {
        if reverse {
            wait_done(c, timeouts::FINISHING);
        }
    }
    ctl.send_state(super::EXCHANGE_RESULTS)?;
    let theirs: Results = ctl.read_json(timeouts::HANDSHAKE, "the client's results")?;
    drain(ctl, test, watched, dups, &theirs)?;
    let (mut ours, received, sent) =
        results(ctl.peer, test, watched.counters, dups, cpu, elapsed, told);
    if let Some(opening) = &watched.opening {
        let cuts = cut_so_far(watched.counters);
        let figures = server_doc::Figures {
            cuts: &cuts,
            ours: Some(&ours),
            theirs: Some(&theirs),
        };
        let doc = server_doc::render(test, opening, &figures, None);
        if test.get_server_output {
            ours.server_output_json = serde_json::from_str(&doc).ok();
        }
        watched.rendered = Some(doc);
    }
    slot.finishing();
    ctl.send_json(&ours, "the server's results")?;
    ctl.send_state(super::DISPLAY_RESULTS)?;
    // IPERF_DONE, or the client closing: either ends it.
    let _ = ctl.read_state(timeouts::GOODBYE);
    Ok((received, sent))
}

/// Waits up to `limit` for every stream of a direction to end.
fn wait_done(counts: &Mutex<Counts>, limit: Duration) {
    let until = Instant::now() + limit;
    while !counts.lock().done.iter().all(|d| *d) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Each direction's intervals: those closed, and the rest closed now (the streams ended,
/// or the test failed and what they counted so far is all there is).
fn cut_so_far(counters: &[Arc<Mutex<Counts>>]) -> Vec<Vec<ClosedInterval>> {
    counters
        .iter()
        .map(|c| match c.lock().cuts.as_mut() {
            Some((cutter, closed)) => {
                cutter.finish();
                closed.extend(std::iter::from_fn(|| cutter.pop_ready()));
                closed.clone()
            }
            None => Vec::new(),
        })
        .collect()
}

/// Receivers: until each stream has what the client wrote (`theirs`), or has ended, or
/// (the project's rule for a peer that stopped) nothing arrived for `timeouts::STALL`: a
/// receiver thread a loaded host holds off for half a second is not a finished one. Both
/// counts leave -O's omitted bytes out.
fn drain(
    ctl: &mut Ctl,
    test: &TestParams,
    watched: &mut Watched,
    dups: &[TcpStream],
    theirs: &Results,
) -> Result<()> {
    let n = test.streams as usize;
    let counters = watched.counters;
    for (k, &reverse) in test.direction().reversed().iter().enumerate() {
        if reverse {
            continue;
        }
        if test.udp {
            // UDP receivers listen a settle time past the end on their own; what never
            // came is lost.
            wait_done(&counters[k], timeouts::FINISHING);
            continue;
        }
        let want: Vec<u64> = (0..n)
            .map(|i| theirs.stream(stream_id(k * n + i)).map_or(0, |s| s.bytes))
            .collect();
        let mut last = (counters[k].lock().bytes.iter().sum::<u64>(), Instant::now());
        loop {
            let (have, ended) = {
                let c = counters[k].lock();
                (c.counted(), c.done.iter().all(|d| *d))
            };
            if ended || have.iter().zip(&want).all(|(h, w)| h >= w) {
                break;
            }
            if let Some(cut) = watched.exceeded(ctl) {
                return Err(cut);
            }
            let sum: u64 = have.iter().sum();
            if sum != last.0 {
                last = (sum, Instant::now());
            } else if last.1.elapsed() > timeouts::STALL {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for d in &dups[k * n..(k + 1) * n] {
            let _ = d.shutdown(std::net::Shutdown::Read);
        }
        wait_done(&counters[k], timeouts::FINISHING);
    }
    Ok(())
}

/// This end's results for the client, and the bytes received and sent; each receiver's
/// time is `elapsed` or, drained past it, to its last byte.
fn results(
    peer: SocketAddr,
    test: &TestParams,
    counters: &[Arc<Mutex<Counts>>],
    dups: &[TcpStream],
    cpu: &CpuMark,
    elapsed: f64,
    mut told: Option<Vec<String>>,
) -> (Results, u64, u64) {
    let (n, omit_ns) = (test.streams as usize, test.omit().as_nanos() as u64);
    let report = cpu.report(Vec::new(), None);
    let mut streams = Vec::new();
    let (mut received, mut sent) = (0, 0);
    // Whether this end's senders counted retransmits (iperf3 then shows them).
    let mut sender_has_retransmits = 0;
    for (k, &reverse) in test.direction().reversed().iter().enumerate() {
        let c = counters[k].lock();
        for (i, bytes) in c.counted().into_iter().enumerate() {
            match reverse {
                true => sent += bytes,
                false => received += bytes,
            }
            let udp = test
                .udp
                .then(|| (reverse, c.udp[i].as_ref(), test.block_bytes()));
            // A receiver's time runs to its last byte when it drained past TEST_END (a
            // paced sender's queue, --fq-rate): iperf3 divides by it.
            let end = match reverse {
                true => elapsed,
                false => elapsed.max(c.last_ns[i].saturating_sub(omit_ns) as f64 / 1e9),
            };
            let mut r = StreamResult::ours(stream_id(k * n + i), bytes, end, udp);
            if let (true, Some(retransmits)) = (reverse, c.retransmits[i].counted()) {
                r.retransmits = i64::try_from(retransmits).unwrap_or(i64::MAX);
                sender_has_retransmits = 1;
            }
            if let Some(lines) = told.as_mut() {
                lines.push(super::stream_line(&r, reverse, test.udp));
            }
            streams.push(r);
        }
    }
    let ours = Results {
        cpu_util_total: report.host_total,
        cpu_util_user: report.host_user,
        cpu_util_system: report.host_system,
        sender_has_retransmits,
        // What the streams ran with (the kernel's default unless -C), as iperf3's says.
        congestion_used: dups.first().and_then(crate::os::net::congestion),
        streams,
        server_output_text: told.map(|mut lines| {
            lines.push(done_line(peer, received, sent));
            lines.join("\n") + "\n"
        }),
        server_output_json: None,
    };
    (ours, received, sent)
}

/// The log's line when an iperf3 test starts (and the first of `--get-server-output`'s).
pub(crate) fn opening_line(peer: std::net::SocketAddr, test: &TestParams) -> String {
    format!("pinperf: iperf3 test from {peer}: {}", test.described())
}

/// The log's line when an iperf3 test is done (and the last of `--get-server-output`'s).
pub(crate) fn done_line(peer: std::net::SocketAddr, received: u64, sent: u64) -> String {
    format!("pinperf: iperf3 test from {peer}: done, received {received} bytes, sent {sent} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmits_count_after_the_omitted_seconds() {
        let at = |t_ns, total_retrans| TcpSample {
            t_ns,
            total_retrans,
            ..TcpSample::default()
        };
        let mut r = Retransmits::default();
        assert_eq!(r.counted(), None, "a stream that never sampled has none");
        for s in [at(100, 2), at(900, 3), at(1_000, 5), at(2_000, 9)] {
            r.sample(&s, 1_000);
        }
        assert_eq!(r.counted(), Some(6), "9 less the 3 inside -O");
        let mut whole = Retransmits::default();
        whole.sample(&at(2_000, 9), 0);
        assert_eq!(whole.counted(), Some(9));
    }
}
