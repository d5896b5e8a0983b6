//! pinperf's client against an iperf3 server (`--peer iperf3`, or detected): iperf3's
//! control protocol on the control connection, pinperf's pinned `stream-N` threads and
//! `reporter` on this end. An iperf3 server sends nothing during the test, so the live
//! rows are this end's counts (its senders' or receivers'); the iperf3 end's byte counts
//! and CPU arrive with its results at the end, and the summary's totals are reconciled
//! against them. The header says so.
//!
//! The end of the test: when the client sends, its senders write for `-O` + `-t`, shut
//! down their sending side, and `TEST_END` goes out once the server's kernel has
//! acknowledged every byte (plus a short grace for the iperf3 process to read them): an
//! iperf3 server counts what it has read when it takes `TEST_END` and closes its streams
//! then. The totals' span ends with the acknowledgement, or, when the server was still
//! reading then, with its own span (see `finish`). When the server sends (`-R`), this
//! end's receivers read to the EOF
//! the server's close gives, so both count the same bytes.
//!
//! UDP (`-u`): the streams connect by iperf3's handshake ([`super::udp::connect`]) and
//! carry its datagram header with 64-bit sequences. This end's senders stop at the run
//! time and `TEST_END` follows a round trip and 20 ms later ([`deadlines::udp_test_end`]), so the
//! server has read every datagram that arrived; this end's receivers listen a settle time
//! past `TEST_END`. An iperf3 server reports its datagram counts and jitter once, with its
//! results: in a direction this end sends, the live rows have this end's bytes and no
//! datagram columns, and the last row carries the server's counts for the whole test, so
//! the totals are the server's (lost: sent less received, the tail included). In a
//! direction the server sends, this end's receivers count loss and jitter live, against
//! the server's own count of what it sent.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::deadlines;
use super::{
    Ctl, DISPLAY_RESULTS, EXCHANGE_RESULTS, IPERF_DONE, Params, Results, StreamResult, state_name,
    stream_id,
};
use crate::choices::Format;
use crate::config::ClientConfig;
use crate::data::ends::{Ends, Socks, Threads};
use crate::data::pin::PinPlan;
use crate::data::stream::Failure;
use crate::data::stream::UdpSnapshot;
use crate::data::stream::{Batch, StreamSocks, parked, spawn_named};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::CpuMark;
use crate::os::net::{self, TcpInfo};
use crate::report::interval::ClosedInterval;
use crate::report::interval::IntervalCutter;
use crate::report::model::{Header, Summary};
use crate::report::{self, RemoteEvent};
use crate::timeouts;
use crate::wire::measure::UdpSlice;
use crate::wire::params::Direction;
use crate::wire::{ReceiverDone, SOFTWARE};

/// What the remote end is said to be in the header: plain about which figures are whose,
/// and what it never tells (its window, its threads and their pinning).
pub const REMOTE_WORDS: &str = "iperf3 server, which reports no window, threads or pinning; \
     live rows are this end's counts, the iperf3 end's bytes and CPU arrive with its results \
     at the end";

/// The same for a UDP test this end sends in: where the server's datagram counts go.
pub const REMOTE_WORDS_UDP: &str = "iperf3 server, which reports no window, threads or \
     pinning; live rows are this end's counts, the iperf3 end's bytes, CPU, loss and jitter \
     arrive with its results at the end: the last row's lost/total and jitter are the whole \
     test's";

/// How long an iperf3 server may take for one step of the exchange.
const STEP: Duration = timeouts::HANDSHAKE;

/// Runs the test of `cfg` against the iperf3 server on `stream` (connected, nothing sent
/// yet, or `sent` bytes of the cookie already: pinperf's preamble when detection found
/// a silent server).
pub(crate) fn run(
    cfg: ClientConfig,
    out: &mut Option<Box<dyn report::Formatter>>,
    stream: TcpStream,
    local_plan: PinPlan,
    sent: &[u8],
) -> Result<Summary> {
    refuse_unsupported(&cfg)?;
    let mut cfg = cfg;
    let local = stream.local_addr().op(|| "read local address".into())?;
    let (mut ctl, cookie, params) = negotiate(&mut cfg, stream, sent)?;
    let rtt = net::rtt(&ctl.sock);
    let (socks, dups, local_window) = connect_streams(&cfg, &mut ctl, &cookie, &params, rtt)?;
    for w in local_window.shortfalls("local") {
        stderrln!("pinperf: {w}");
    }
    expect(&mut ctl, super::TEST_START)?;
    let header = header_of(&cfg, &ctl, local, &socks, local_window, &local_plan);
    let ending = Ending::of(&cfg.test, rtt);
    let (remote_tx, remote_rx) = crossbeam_channel::unbounded();
    let (ends, feeds, mirrors, stopped) =
        start_threads(&cfg, socks, &local_plan, &ending, &remote_tx)?;
    let out = out.take().expect("the formatter is handed to one reporter");
    let output = report::Output::default();
    let output2 = output.clone();
    let reporter = spawn_named("reporter".into(), move || {
        report::run_reporter(header, feeds, remote_rx, out, output2)
    })?;

    let mut ran = Ran::default();
    let mut result = drive(&mut ctl, &ends, &dups, &cfg, &output, &ending, &mut ran);
    if let (Err(e), Some(t0)) = (&mut result, ran.started) {
        // Whatever ended a running test (a signal, a stream, the server), the rows so far
        // keep their totals, marked cut short; the error follows them.
        stopped.store(true, Ordering::SeqCst);
        say_stopped(e, t0, &mut ran, &remote_tx, &cfg);
    }
    let cpu_mark = result.as_ref().ok().map(|(mark, _, _, _)| mark);
    if result.is_err() {
        ends.abort();
        // Closing the streams ends threads blocked on the server.
        for d in &dups {
            let _ = d.shutdown(std::net::Shutdown::Both);
        }
    }
    let (thread_cpu, send_path, stream_error) = ends.join(cfg.test.zerocopy);
    let local_cpu = cpu_mark.map(|m| m.report(thread_cpu, send_path));
    let mut counted: Vec<Mirrored> = mirrors.into_iter().filter_map(|m| m.join().ok()).collect();
    let outcome = match (result, stream_error) {
        (Err(e), _) | (Ok(_), Some(e)) => Err(e),
        (Ok((_, t0, acked, told)), None) => {
            // The congestion control the streams ran with, as an iperf3 end says it.
            let congestion = dups.first().and_then(net::congestion);
            let cpu = local_cpu.as_ref();
            finish(&mut ctl, &cfg, cpu, &counted, (t0, acked, told), congestion)
        }
    };
    if let Some(cpu) = local_cpu {
        let _ = remote_tx.send(RemoteEvent::LocalCpu(cpu));
    }
    let outcome = conclude(&cfg, outcome, &mut counted, &remote_tx);
    drop(remote_tx);
    let totals = reporter
        .join()
        .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())));
    outcome?;
    if let Some(e) = output.error() {
        return Err(e);
    }
    let totals = totals?;
    if !cfg.test.udp {
        reconcile(&totals, &cfg);
    }
    totals
        .summaries
        .into_iter()
        .next()
        .ok_or_else(|| Error::Test("the report's summary is missing".into()))
}

/// The cookie and the parameters, up to `CREATE_STREAMS`. UDP without -l gets datagrams
/// that fit the path's MTU, as the control connection sees it (as against a pinperf
/// server).
fn negotiate(
    cfg: &mut ClientConfig,
    stream: TcpStream,
    sent: &[u8],
) -> Result<(Ctl, [u8; super::COOKIE_SIZE], Params)> {
    let peer = stream.peer_addr().op(|| "read server address".into())?;
    if cfg.test.udp && cfg.test.len.is_none() {
        let mtu = net::path_info(&stream).mtu;
        cfg.test.len = Some(crate::wire::params::datagram_for_mtu(mtu, peer.is_ipv6()));
    }
    let mut ctl = Ctl { sock: stream, peer };
    // The cookie: random, after whatever was already sent (detection sends pinperf's
    // 8-byte preamble first; iperf3 compares cookies as C strings, any 36 bytes do).
    let mut cookie = super::new_cookie()?;
    cookie[..sent.len()].copy_from_slice(sent);
    ctl.write(&cookie[sent.len()..], "the cookie")?;
    expect_cookie_answer(&mut ctl, !sent.is_empty())?;
    let mut params = Params::from_test(&cfg.test);
    params.set_source(&cfg.target.source);
    if let Some(who) = &cfg.iperf3_auth {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        params.authtoken = Some(who.token(now).map_err(Error::Usage)?);
    }
    ctl.send_json(&params, "the test parameters")?;
    expect(&mut ctl, super::CREATE_STREAMS)?;
    Ok((ctl, cookie, params))
}

/// The data connections (TCP, with duplicates for watching) or sockets (UDP, by
/// iperf3's handshake), and the first one's window grant.
fn connect_streams(
    cfg: &ClientConfig,
    ctl: &mut Ctl,
    cookie: &[u8],
    params: &Params,
    rtt: Duration,
) -> Result<(Socks, Vec<TcpStream>, crate::os::netinfo::WindowGrant)> {
    let test = &cfg.test;
    if !test.udp {
        let (socks, dups, window) = tcp_streams(cfg, ctl.peer, cookie)?;
        return Ok((Socks::TcpEndedByClose(socks), dups, window));
    }
    let allowed = timeouts::streams_arrive(test.threads(), rtt);
    let peer = ctl.peer;
    let spoke = &mut || spoke_first(ctl, test.window_bytes.is_some());
    let (socks, window) = super::udp::connect(peer, &cfg.target.source, test, allowed, spoke)?;
    Ok((Socks::UdpAs(socks, params.wire()), Vec::new(), window))
}

/// The report's header: what this end set up, and the words for what an iperf3 server
/// does not report.
fn header_of(
    cfg: &ClientConfig,
    ctl: &Ctl,
    local: std::net::SocketAddr,
    socks: &Socks,
    local_window: crate::os::netinfo::WindowGrant,
    local_plan: &PinPlan,
) -> Header {
    let test = &cfg.test;
    let peer = ctl.peer;
    Header {
        software: SOFTWARE.into(),
        local: local.to_string(),
        remote: peer.to_string(),
        remote_software: match test.udp && test.direction() != Direction::Reverse {
            true => REMOTE_WORDS_UDP.into(),
            false => REMOTE_WORDS.into(),
        },
        local_window,
        path: match socks {
            Socks::TcpEndedByClose(s) => net::path_info(&s[0].data),
            _ => net::path_info(&ctl.sock),
        },
        local_pin: local_plan.clone(),
        echo: false,
        congestion: match socks {
            Socks::TcpEndedByClose(s) => net::congestion(&s[0].data).unwrap_or_else(|| "?".into()),
            _ => "- (UDP)".into(),
        },
        same_host: peer.ip().is_loopback(),
        same_process: false,
        cpu_intervals: cfg.cpu_intervals,
        engine: cfg.engine,
        tos_carried: socks.tos().filter(|_| cfg.test.tos.is_some()),
        started_at: crate::os::sys::local_time(report::STARTED_AT).ok(),
        local_host: crate::os::sys::hostname(),
        peer: super::wording::server(),
        ..Header::of_test(test)
    }
}

/// What [`start_threads`] started: the stream threads, the reporter's feeds, the mirrors
/// and the flag that stops them making intervals past a stopped test's last record.
type Started = (
    Ends,
    Vec<report::Feed>,
    Vec<std::thread::JoinHandle<Mirrored>>,
    Arc<AtomicBool>,
);

/// Threads per direction, each direction's batches relayed through a `mirror` thread
/// that cuts them a second time as the remote half of each row.
fn start_threads(
    cfg: &ClientConfig,
    mut socks: Socks,
    local_plan: &PinPlan,
    ending: &Ending,
    remote_tx: &Sender<RemoteEvent>,
) -> Result<Started> {
    let test = &cfg.test;
    let n = test.streams as usize;
    let mut ends = Ends::default();
    let mut feeds = Vec::new();
    let mut mirrors = Vec::new();
    let stopped = Arc::new(AtomicBool::new(false));
    for (k, &reverse) in test.direction().reversed().iter().enumerate() {
        let plan = PinPlan(local_plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, (batches, free)) = Threads::spawn(
            !reverse,
            cfg.engine,
            socks.take(n),
            &plan,
            test,
            ending.listen,
        )?;
        ends.0.push(threads);
        let (relay_tx, relay_rx) = crossbeam_channel::bounded(64);
        let cutter = IntervalCutter::for_test(n, test);
        let tx = remote_tx.clone();
        // A UDP direction this end sends: its last row waits for the server's counts.
        // With -n/-k the end is not known before it comes: every row is held.
        let hold = (test.udp && !reverse).then_some(match test.budget() {
            Some(_) => Duration::ZERO,
            None => test.run_time(),
        });
        let stop = Arc::clone(&stopped);
        mirrors.push(spawn_named("mirror".into(), move || {
            mirror(batches, relay_tx, cutter, reverse, tx, hold, &stop)
        })?);
        feeds.push(report::Feed {
            reverse,
            batches: relay_rx,
            free,
            cutter: IntervalCutter::for_test(n, test),
        });
    }
    Ok((ends, feeds, mirrors, stopped))
}

/// A running test stopped by `e`: a failed stream is said live, then the server's word on
/// it (`drive` waited for one): which came first cannot be told from one end (as against
/// a pinperf server). Anything else cuts the rows short.
fn say_stopped(
    e: &mut Error,
    t0: Instant,
    ran: &mut Ran,
    remote_tx: &Sender<RemoteEvent>,
    cfg: &ClientConfig,
) {
    match ran.failed.take() {
        Some((at, error)) => {
            let _ = remote_tx.send(RemoteEvent::StreamFailed { at, error });
            if let Some(theirs) = ran.theirs.take() {
                *e = Error::Test(format!("{e}; {theirs}"));
            }
        }
        None => {
            let signal = matches!(e, Error::Interrupted { .. });
            let _ = remote_tx.send(RemoteEvent::CutShort {
                at: t0.elapsed().as_secs_f64(),
                say: (signal && cfg.format == Format::Text).then(|| e.to_string()),
            });
        }
    }
}

/// The rows held for the server's datagram counts, with them or (a failed test) without
/// any; the UDP totals reconciled; the test's end told to the reporter.
fn conclude(
    cfg: &ClientConfig,
    outcome: Result<(ReceiverDone, Results)>,
    counted: &mut [Mirrored],
    remote_tx: &Sender<RemoteEvent>,
) -> Result<ReceiverDone> {
    let n = cfg.test.streams as usize;
    let theirs = outcome.as_ref().ok().map(|(_, r)| r);
    for (k, m) in counted.iter_mut().enumerate() {
        for row in m.held_rows(k, n, theirs, cfg.test.block_bytes()) {
            let _ = remote_tx.send(RemoteEvent::Row(row));
        }
    }
    let outcome = outcome.map(|(done, theirs)| {
        reconcile_udp(cfg, counted, &theirs);
        done
    });
    match &outcome {
        Ok(done) => {
            let _ = remote_tx.send(RemoteEvent::Done(Box::new(done.clone())));
        }
        Err(e) => {
            let _ = remote_tx.send(RemoteEvent::Failed(e.to_string()));
        }
    }
    outcome
}

/// Each TCP stream's connection (window and congestion control set before `connect()`),
/// opened with the cookie; duplicates of them for watching; the first one's window grant.
fn tcp_streams(
    cfg: &ClientConfig,
    peer: std::net::SocketAddr,
    cookie: &[u8],
) -> Result<(
    Vec<StreamSocks>,
    Vec<TcpStream>,
    crate::os::netinfo::WindowGrant,
)> {
    let test = &cfg.test;
    let n = usize::from(test.streams.max(1));
    let opts = net::SocketOpts {
        user_timeout: cfg.sockets.user_timeout,
        ..net::SocketOpts::of(test)
    };
    let mut socks = Vec::with_capacity(test.threads());
    let mut dups = Vec::new();
    let mut local_window = None;
    for k in 0..test.threads() {
        let from = cfg.target.source.stream(k);
        let (mut data, grant) = net::connect(&[peer], &from, &opts, cfg.target.connect_timeout)
            .map_err(|e| Error::Test(format!("stream-{}: {e}", k % n)))?;
        std::io::Write::write_all(&mut data, cookie)
            .op(|| format!("stream-{}: send the cookie to {peer}", k % n))?;
        local_window.get_or_insert(grant);
        dups.push(data.try_clone().op(|| "duplicate a data socket".into())?);
        socks.push(StreamSocks { data, echo: None });
    }
    Ok((socks, dups, local_window.unwrap_or_default()))
}

/// When a test against an iperf3 server ends. TCP: once the run time is over and the
/// server's kernel holds every byte (see [`drive`]). UDP: `TEST_END` a round trip and 20 ms after
/// this end's senders stopped (none when only the server sends), and receivers listen a
/// settle time past it, for the datagrams still on their way.
struct Ending {
    /// Past the run time, before `TEST_END` (UDP senders' last datagrams).
    udp_wait: Duration,
    /// Past the run time, how long UDP receivers listen.
    listen: Duration,
}

impl Ending {
    fn of(test: &crate::wire::params::TestParams, rtt: Duration) -> Ending {
        let settle = timeouts::udp_settle(rtt);
        let sends = test.direction() != Direction::Reverse;
        let udp_wait = match test.udp && sends {
            true => deadlines::udp_test_end(rtt),
            false => Duration::ZERO,
        };
        Ending {
            udp_wait,
            listen: udp_wait + settle,
        }
    }
}

/// What this end cannot do against an iperf3 server, refused before any byte is sent.
pub(crate) fn refuse_unsupported(cfg: &ClientConfig) -> Result<()> {
    let t = &cfg.test;
    let no = |flag: &str, why: &str| {
        Err(Error::Usage(format!(
            "{flag}: not available against an iperf3 server ({why}); drop it or test against \
             a pinperf server"
        )))
    };
    if t.udp && !t.omit().is_zero() {
        return no(
            "-O with -u",
            "iperf3 counts datagrams across the omitted seconds and bytes after them: the \
             two ends' counts would not reconcile",
        );
    }
    if t.skip_rx_copy && t.direction() == Direction::Forward {
        return no(
            "--skip-rx-copy",
            "the iperf3 server is the receiver and reads as iperf3 does; with -R or --bidir \
             it applies to this end's receivers",
        );
    }
    if t.omit().subsec_nanos() != 0 {
        // iperf3 servers read it as an integer: they would count the rest of the second
        // that this end leaves out, and the totals would set more bytes against less time.
        let whole = t.omit().as_secs();
        return Err(Error::Usage(format!(
            "-O {}: an iperf3 server takes -O in whole seconds (it would read {whole}): \
             give -O {whole} or {}",
            t.omit().as_secs_f64(),
            whole + 1
        )));
    }
    if t.pin
        .as_ref()
        .is_some_and(|p| *p != crate::data::pin::Affinity::None)
    {
        return no(
            "-A LOCAL/REMOTE",
            "an iperf3 server takes no remote pin plan",
        );
    }
    if cfg.auth.is_some() {
        return no(
            "--auth",
            "iperf3's authentication is RSA-based, not pinperf's",
        );
    }
    if t.force_window {
        return no("--force-window", "the server sets its own window");
    }
    if t.realtime {
        return no(
            "--realtime",
            "iperf3 has no real-time priority for its receivers",
        );
    }
    if t.fq_rate_bps.is_some() && t.direction() != Direction::Forward {
        return no(
            "--fq-rate with -R or --bidir",
            "iperf3 sets it on its listening socket, and whether its senders keep it is not \
             checked here",
        );
    }
    Ok(())
}

/// The server's answer to the cookie, `PARAM_EXCHANGE`, or its refusal. Silence, a close or
/// another byte is no iperf3 server's: the error says so (and, after `--peer auto`'s
/// preamble, that it is no pinperf server either), not "closed the control connection".
fn expect_cookie_answer(ctl: &mut Ctl, after_preamble: bool) -> Result<()> {
    let peer = ctl.peer;
    // `silent`: it said nothing, as an iperf 2 server does (named as the likely one).
    let not_iperf3 = |how: String, silent: bool| {
        let either = if after_preamble {
            "neither a pinperf server (it did not answer pinperf's preamble) nor"
        } else {
            "not"
        };
        let iperf2 = match silent {
            true => {
                " (an iperf 2 server, iperf -s, reads both and says nothing; its client is iperf)"
            }
            false => "",
        };
        Error::Protocol {
            peer,
            what: format!(
                "{how}: {either} an iperf3 server, which answers its cookie at once{iperf2}"
            ),
        }
    };
    let wait = deadlines::cookie_answer(net::rtt(&ctl.sock));
    let mut b = [0u8; 1];
    let _ = ctl.sock.set_read_timeout(Some(wait));
    let got = match std::io::Read::read(&mut ctl.sock, &mut b) {
        Ok(0) => {
            return Err(not_iperf3(
                "it closed the connection after the cookie".into(),
                true,
            ));
        }
        Ok(_) => b[0] as i8,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(not_iperf3(
                format!(
                    "it said nothing for {:.1} s after iperf3's cookie",
                    wait.as_secs_f64()
                ),
                true,
            ));
        }
        Err(e) => {
            return Err(Error::io(
                format!("read the answer to the cookie from {peer}"),
                e,
            ));
        }
    };
    match got {
        super::PARAM_EXCHANGE => Ok(()),
        s @ (super::ACCESS_DENIED | super::SERVER_ERROR | super::SERVER_TERMINATE) => {
            refusal(ctl, s, super::PARAM_EXCHANGE)
        }
        other => Err(not_iperf3(
            format!(
                "its first byte after the cookie was {}, not {}",
                state_name(other),
                state_name(super::PARAM_EXCHANGE)
            ),
            false,
        )),
    }
}

/// Reads the next state byte; anything but `want` is the server's refusal, error or a
/// protocol error, in words.
fn expect(ctl: &mut Ctl, want: i8) -> Result<()> {
    match ctl.read_state(STEP)? {
        s if s == want => Ok(()),
        other => refusal(ctl, other, want),
    }
}

/// An iperf3 server's answer while it runs a test: `ACCESS_DENIED`, whatever the client
/// sent (it reads nothing), then it closes.
pub(crate) fn busy(peer: std::net::SocketAddr) -> Error {
    Error::Refused {
        peer,
        reason: "the iperf3 server is busy running a test (ACCESS_DENIED); try again later".into(),
    }
}

/// A state byte `got` that is not the `want`ed one: the server's refusal, error or
/// termination in words, else a protocol error.
fn refusal(ctl: &mut Ctl, got: i8, want: i8) -> Result<()> {
    let peer = ctl.peer;
    match got {
        super::ACCESS_DENIED => Err(busy(peer)),
        super::SERVER_ERROR => Err(Error::Refused {
            peer,
            reason: format!("the iperf3 server said: {}", ctl.read_server_error(STEP)?),
        }),
        super::SERVER_TERMINATE => Err(Error::Test(format!(
            "the iperf3 server {peer} terminated the test"
        ))),
        other => Err(Error::Protocol {
            peer,
            what: format!("expected {}, got {}", state_name(want), state_name(other)),
        }),
    }
}

/// While the UDP streams connect: whatever the server sent on the control connection other
/// than `TEST_START` (which it sends once the last stream is in) is its refusal, error or
/// close, read and told in words (`window`: `-w` was given, the commonest cause).
fn spoke_first(ctl: &mut Ctl, window: bool) -> Result<()> {
    let fd = std::os::fd::AsFd::as_fd(&ctl.sock);
    if !crate::os::sys::wait_readable(fd, Duration::ZERO).unwrap_or(false) {
        return Ok(());
    }
    let _ = ctl.sock.set_read_timeout(Some(Duration::from_millis(1)));
    let mut first = [0u8; 1];
    let gone = match ctl.sock.peek(&mut first) {
        Ok(1) if first[0] as i8 == super::TEST_START => return Ok(()),
        Ok(1) => return expect(ctl, super::TEST_START),
        Ok(_) => true,
        // A reset: a server that exited with the client's bytes unread.
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    if !gone {
        return Ok(());
    }
    // iperf3 (3.12, Debian 12's) closes without a word when a UDP stream's setup fails.
    let cause = match window {
        true => {
            "; an iperf3 server does so when it cannot set the buffers -w asks for (its \
             net.core.wmem_max or rmem_max is lower): try a smaller -w"
        }
        false => "",
    };
    Err(Error::Test(format!(
        "the iperf3 server {} closed the control connection while the UDP streams connected \
         (its log says why){cause}",
        ctl.peer
    )))
}

/// What `drive` leaves for a test it ends early: when the streams started; the stream that
/// failed (seconds into the test, its error) when one did, and what the server said with it.
#[derive(Default)]
struct Ran {
    started: Option<Instant>,
    failed: Option<(f64, String)>,
    theirs: Option<String>,
}

impl Ran {
    /// A stream's failure as the test's error (the server's word is added once the failure
    /// has been said live, see `run`).
    fn stream_failed(&mut self, f: Failure) -> Error {
        let t0 = self.started.unwrap_or(f.at);
        let at = f.at.saturating_duration_since(t0).as_secs_f64();
        let e = Error::Test(format!("{} ({at:.2} s into the test)", f.error));
        self.failed = Some((at, f.error));
        e
    }
}

/// What the iperf3 server said during the test, in words.
struct Word {
    /// It closed the control connection (rather than sending its error or a state).
    closed: bool,
    text: String,
}

/// The iperf3 server's word, if it says one within `wait`.
fn their_word(ctl: &mut Ctl, wait: Duration) -> Result<Option<Word>> {
    let mut fds = [crate::os::sys::pollfd(
        std::os::fd::AsRawFd::as_raw_fd(&ctl.sock),
        libc::POLLIN,
    )];
    let wait = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    if !crate::os::sys::poll(&mut fds, wait).is_ok_and(|n| n > 0) {
        return Ok(None);
    }
    let _ = ctl.sock.set_read_timeout(Some(Duration::from_millis(1)));
    let peer = ctl.peer;
    let text = match ctl.sock.peek(&mut [0u8; 1]) {
        Ok(0) => {
            return Ok(Some(Word {
                closed: true,
                text: format!(
                    "the iperf3 server {peer} closed the control connection during the test"
                ),
            }));
        }
        Ok(_) => match ctl.read_state(STEP)? {
            super::SERVER_ERROR => format!(
                "the iperf3 server {peer} failed: {}",
                ctl.read_server_error(STEP)?
            ),
            other => format!(
                "the iperf3 server {peer} sent {} during the test",
                state_name(other)
            ),
        },
        // poll() said readable: only a spurious wake or a signal is no word.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
            return Ok(None);
        }
        // The connection failed (`ss -K` on this end, a reset): that is the cause, not the
        // streams the server then closes; said once (the reads after it see a close).
        Err(e) => {
            return Ok(Some(Word {
                closed: false,
                text: format!("read the control connection to the iperf3 server {peer}: {e}"),
            }));
        }
    };
    Ok(Some(Word {
        closed: false,
        text,
    }))
}

/// From `TEST_START` to `TEST_END`: starts the threads at `TEST_RUNNING`, watches the
/// control connection, the streams and stop signals, and sends `TEST_END` once the run
/// time is over and (when this end sends) the server's kernel holds every byte.
fn drive(
    ctl: &mut Ctl,
    ends: &Ends,
    dups: &[TcpStream],
    cfg: &ClientConfig,
    output: &report::Output,
    ending: &Ending,
    ran: &mut Ran,
) -> Result<(CpuMark, Instant, Option<Instant>, Instant)> {
    expect(ctl, super::TEST_RUNNING)?;
    let cpu = CpuMark::now();
    let t0 = Instant::now();
    ends.start(t0);
    ran.started = Some(t0);
    let run_time = cfg.test.run_time();
    let sends: Vec<bool> = cfg
        .test
        .direction()
        .reversed()
        .iter()
        .flat_map(|&r| std::iter::repeat_n(!r, cfg.test.streams as usize))
        .collect();
    let mut tail = Tail::default();
    // The bytes the server's kernel has acknowledged; the stall clock starts at the run
    // time's end.
    let mut progress = timeouts::Progress::new(timeouts::STALL, 0, t0 + run_time);
    // -n/-k: when every direction's budget was spent as this end sees it.
    let mut spent: Option<Instant> = None;
    loop {
        if let Some(f) = ends.failure() {
            return Err(stream_failed(ctl, f, ran));
        }
        if output.closed() {
            return Err(Error::OutputClosed);
        }
        if let Some(sig) = crate::signals::received() {
            let _ = ctl.send_state(super::CLIENT_TERMINATE);
            return Err(crate::signals::interrupted(
                sig,
                format!("{:.1} s into the test", t0.elapsed().as_secs_f64()),
            ));
        }
        // The server says nothing during a test: a byte now is its error or its end.
        // Past the run time, looked at every millisecond (poll's timer, finer than a
        // socket timeout's): when the data was acknowledged ends the server's receiving
        // (see `finish`).
        let look = match spent.is_none() && t0.elapsed() + Duration::from_millis(20) < run_time {
            true => Duration::from_millis(20),
            false => Duration::from_millis(1),
        };
        if let Some(word) = their_word(ctl, look)? {
            return Err(server_spoke(ends, word, ran));
        }
        if spent.is_none() && budgets_spent(ends) {
            spent = Some(Instant::now());
            progress = timeouts::Progress::new(timeouts::STALL, 0, Instant::now());
        }
        let over = t0.elapsed() >= run_time || spent.is_some();
        let done = match cfg.test.udp {
            // Datagrams are not acknowledged: a round trip lets the last ones arrive.
            true => {
                t0.elapsed() >= run_time + ending.udp_wait
                    || spent.is_some_and(|at| at.elapsed() >= ending.udp_wait)
            }
            false => over && delivered(dups, &sends, &mut tail, &mut progress),
        };
        if done {
            break;
        }
    }
    ctl.send_state(super::TEST_END)?;
    Ok((cpu, t0, tail.received(), Instant::now()))
}

/// `-n`/`-k`: whether every direction's budget is spent here, as iperf3's client tells
/// the end: its senders have sent it, or its receivers have read it (an iperf3 server
/// sends on until `TEST_END`). With `--bidir` iperf3 ends at the first direction's; this
/// end waits for both, so its own senders have stopped at theirs.
fn budgets_spent(ends: &Ends) -> bool {
    let spent = ends.budgets_spent();
    !spent.is_empty() && spent.iter().all(|&s| s)
}

/// A stream failed: the server's word, if it says one soon, follows the stream (3.12
/// closes when a data connection dies). A stream the server closed or reset can be the
/// knock-on of the control connection failing first (destroyed here, and the server then
/// closed its streams): then its word other than a close is the cause.
fn stream_failed(ctl: &mut Ctl, f: Failure, ran: &mut Ran) -> Error {
    match their_word(ctl, deadlines::CAUSE).ok().flatten() {
        Some(word) if f.peer_closed && !word.closed => return Error::Test(word.text),
        Some(word) => ran.theirs = Some(word.text),
        None => {}
    }
    ran.stream_failed(f)
}

/// The server spoke during the test. iperf3 ends a test whose data connection died by
/// closing: a stream that fails with it is named first. Its error or a state (a signal)
/// is its own cause.
fn server_spoke(ends: &Ends, word: Word, ran: &mut Ran) -> Error {
    if word.closed {
        let deadline = Instant::now() + deadlines::CAUSE;
        while ends.failure().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(f) = ends.failure() {
            ran.theirs = Some(word.text);
            return ran.stream_failed(f);
        }
    }
    Error::Test(word.text)
}

/// Past the run time, whether the server's kernel has every byte the sending streams
/// wrote, and a grace has passed for the server process to read them
/// (`deadlines::iperf3_read`); or nothing was acknowledged for the stall limit. A stream's
/// data is in when it is in FIN_WAIT1 with nothing unsent and every byte sent
/// acknowledged (`bytes_acked` counts the SYN too, `bytes_sent` the retransmissions
/// too), or FIN_WAIT2 or later. Not the FIN's acknowledgement, which waits for the
/// receiver's delayed ACK (40 ms and more), all of it in the server's time; nor the last
/// data's, for the same reason (`Tail`). A slow server still reading is waited for.
fn delivered(
    dups: &[TcpStream],
    sends: &[bool],
    tail: &mut Tail,
    progress: &mut timeouts::Progress,
) -> bool {
    let infos: Vec<_> = dups
        .iter()
        .zip(sends)
        .filter(|(_, s)| **s)
        .map(|(d, _)| net::tcp_info(d))
        .collect();
    if let Some(at) = tail.look(&infos, Instant::now()) {
        let rtt = dups.iter().map(net::rtt).max().unwrap_or_default();
        if at.elapsed() >= deadlines::iperf3_read(rtt) {
            return true;
        }
    }
    let acked: u64 = infos.iter().flatten().map(|i| i.bytes_acked).sum();
    progress.stalled(acked, Instant::now())
}

/// How the server's kernel acknowledged the end of a TCP test's data, seen from this end:
/// when that tells when it had received the last byte.
#[derive(Default)]
struct Tail {
    /// The first look at which every sending stream had at most one segment
    /// unacknowledged.
    nearly: Option<Instant>,
    /// The first look at which every byte was acknowledged.
    acked: Option<Instant>,
    /// At the `acked` look: when the last segment any stream sent arrived, half the path's
    /// round trip (`min_rtt`) after it was sent (`last_data_sent`, in whole ms).
    last_arrived: Option<Instant>,
}

impl Tail {
    /// One look at the sending streams: notes the first at which at most one segment per
    /// stream was unacknowledged, and the first at which none was; returns that one once
    /// it came.
    fn look(&mut self, infos: &[Option<TcpInfo>], now: Instant) -> Option<Instant> {
        // `slack`: bytes that may still be unacknowledged.
        let acked_but = |slack: fn(&TcpInfo) -> u64| {
            infos.iter().all(|i| {
                i.as_ref().is_some_and(|i| {
                    let unique = i.bytes_sent.saturating_sub(i.bytes_retrans);
                    (i.state >= 5 && i.state != 10)
                        || (i.state == 4
                            && i.notsent_bytes == 0
                            && i.bytes_acked + slack(i) > unique)
                })
            })
        };
        if acked_but(|i| u64::from(i.snd_mss)) {
            self.nearly.get_or_insert(now);
        }
        if self.acked.is_none() && acked_but(|_| 0) {
            self.acked = Some(now);
            // The last segment sent (a paced one, or a retransmission) and half the path's
            // round trip for it to arrive.
            self.last_arrived = infos
                .iter()
                .flatten()
                .map(|i| {
                    let ago = Duration::from_millis(u64::from(i.last_data_sent_ms));
                    let way = Duration::from_micros(u64::from(i.min_rtt_us) / 2);
                    now.checked_sub(ago).map(|sent| sent + way)
                })
                .max()
                .flatten();
        }
        self.acked
    }

    /// When the server's kernel had every byte. A receiver acknowledges every second
    /// segment at once but a last odd one only when its delayed-ACK timer fires (40 ms and
    /// more), so the last one's acknowledgement comes late. It arrived with the rest (when
    /// at most one segment was left unacknowledged), or, sent after them (paced, or
    /// retransmitted when lost), half a round trip after it was sent; never later than
    /// all was acknowledged. `last_data_sent` counts in jiffies: up to 4 ms late at HZ=250,
    /// never early.
    fn received(&self) -> Option<Instant> {
        match (self.nearly, self.acked) {
            (Some(rest), Some(acked)) => Some(
                self.last_arrived
                    .map_or(acked, |last| last.max(rest))
                    .min(acked),
            ),
            (_, acked) => acked,
        }
    }
}

/// After `TEST_END` (every local thread joined): the results exchange, `DISPLAY_RESULTS`
/// and `IPERF_DONE`; returns the server's counts as the reporter's remote totals, and its
/// results as sent. `acked`: when the server's kernel had every byte this end sent
/// (TCP; `Tail::received`); `told`: when this end sent `TEST_END`.
fn finish(
    ctl: &mut Ctl,
    cfg: &ClientConfig,
    cpu: Option<&crate::os::cpu::CpuReport>,
    counted: &[Mirrored],
    (t0, acked, told): (Instant, Option<Instant>, Instant),
    congestion: Option<String>,
) -> Result<(ReceiverDone, Results)> {
    expect(ctl, EXCHANGE_RESULTS)?;
    let ours = our_results(cfg, cpu, counted, t0, congestion);
    ctl.send_json(&ours, "this end's results")?;
    let theirs: Results = ctl.read_json(STEP, "the server's results")?;
    expect(ctl, DISPLAY_RESULTS)?;
    let _ = ctl.send_state(IPERF_DONE);
    let mut done = ReceiverDone {
        bytes: Vec::new(),
        sent: Vec::new(),
        elapsed_us: 0,
        path: net::path_info(&ctl.sock),
        cpu: None,
        kernel: None,
        // Only when asked: an iperf3 server keeps a past client's --get-server-output
        // for every test after it (3.12 does), and sends its report unasked.
        server_output: cfg
            .test
            .get_server_output
            .then(|| server_output(&theirs))
            .flatten(),
        retransmits: Vec::new(),
    };
    let (seconds, unread) = take_their_counts(&mut done, &theirs, counted, cfg, ctl.peer)?;
    // No longer than this end has run since TEST_RUNNING (past -O's seconds, as the
    // server's): a drain can take many times the run time.
    let omit = cfg.test.omit().as_secs_f64();
    let seconds = if seconds.is_finite() && seconds > 0.0 {
        seconds.min((t0.elapsed().as_secs_f64() - omit).max(0.0))
    } else {
        cfg.test.run_time().as_secs_f64()
    };
    let told = told.saturating_duration_since(t0) + deadlines::iperf3_read(net::rtt(&ctl.sock));
    let span = receiving_span(cfg, seconds, t0, acked, told, unread);
    done.elapsed_us = (span * 1e6) as u64;
    done.cpu = Some(super::cpu_report(&theirs, seconds));
    Ok((done, theirs))
}

/// This end's results: what each local stream did (sent bytes for senders, received for
/// receivers; UDP's datagram counts), ids in the order the streams were created, counted
/// as an iperf3 end counts them: from the end of -O's omitted seconds.
fn our_results(
    cfg: &ClientConfig,
    cpu: Option<&crate::os::cpu::CpuReport>,
    counted: &[Mirrored],
    t0: Instant,
    congestion: Option<String>,
) -> Results {
    let n = cfg.test.streams as usize;
    let reversed = cfg.test.direction().reversed();
    let omit = cfg.test.omit().as_secs_f64();
    let elapsed = t0
        .elapsed()
        .as_secs_f64()
        .min(cfg.test.run_time().as_secs_f64())
        .max(omit)
        - omit;
    let streams = (0..cfg.test.threads())
        .map(|k| {
            let mine = counted.get(k / n);
            let bytes = mine.map_or(0, |m| m.counted(k % n));
            let udp = cfg.test.udp.then(|| {
                let last = mine.and_then(|m| m.udp.get(k % n)).and_then(Option::as_ref);
                let sends = !reversed.get(k / n).copied().unwrap_or(false);
                (sends, last, cfg.test.block_bytes())
            });
            StreamResult::ours(stream_id(k), bytes, elapsed, udp)
        })
        .collect();
    Results {
        cpu_util_total: cpu.map_or(0.0, |c| c.host_total),
        cpu_util_user: cpu.map_or(0.0, |c| c.host_user),
        cpu_util_system: cpu.map_or(0.0, |c| c.host_system),
        sender_has_retransmits: 0,
        congestion_used: congestion,
        streams,
        server_output_text: None,
        server_output_json: None,
    }
}

/// The server's per-stream counts into `done`: bytes it received, or sent with their
/// retransmits. Returns the server's longest stream time and whether a sending stream's
/// bytes were not all read when it took TEST_END (its count short of this end's; with -O
/// the two part at different moments).
fn take_their_counts(
    done: &mut ReceiverDone,
    theirs: &Results,
    counted: &[Mirrored],
    cfg: &ClientConfig,
    peer: std::net::SocketAddr,
) -> Result<(f64, bool)> {
    let n = cfg.test.streams as usize;
    let omit = cfg.test.omit().as_secs_f64();
    let mut seconds: f64 = 0.0;
    let mut unread = false;
    for (k, &reverse) in cfg.test.direction().reversed().iter().enumerate() {
        for i in 0..n {
            let id = stream_id(k * n + i);
            let s = theirs.stream(id).ok_or_else(|| Error::Protocol {
                peer,
                what: format!("the server's results have no stream {id}"),
            })?;
            seconds = seconds.max(s.end_time - s.start_time);
            // The server counts from after -O on its clock; the reporter's counts are of
            // the whole run, split at -O by this end's rows: this end's omitted bytes stand
            // in for the server's (they differ by what crossed the boundary).
            let whole = s.bytes + counted.get(k).map_or(0, |m| m.omitted[i]);
            if reverse {
                done.sent.push(whole);
                // A Linux iperf3 sender counts them (-1 where it has none).
                let known = theirs.sender_has_retransmits == 1 && s.retransmits >= 0;
                done.retransmits
                    .push(known.then_some(s.retransmits.unsigned_abs()));
            } else {
                let sent = counted.get(k).map_or(0, |m| m.counted(i));
                unread |= omit == 0.0 && s.bytes < sent;
                done.bytes.push(whole);
            }
        }
    }
    Ok((seconds, unread))
}

/// The seconds the server received over. Its own receive time runs to TEST_END, which
/// this end sends a grace after the last byte was acknowledged (TCP) or a round trip after
/// its senders stopped (UDP); the receiving ended earlier: when the server's kernel had
/// the last byte (`acked`), or (UDP) at the run time. Unless the server was still reading
/// when it took TEST_END (bytes left unread, or TEST_END taken past `told`, a grace after
/// it was sent): a slow reader's rate is its bytes over its own span.
fn receiving_span(
    cfg: &ClientConfig,
    seconds: f64,
    t0: Instant,
    acked: Option<Instant>,
    told: Duration,
    unread: bool,
) -> f64 {
    let omit = cfg.test.omit().as_secs_f64();
    let late = seconds + omit > told.as_secs_f64();
    match (cfg.test.udp, acked) {
        (true, _) => (seconds + omit).min(cfg.test.run_time().as_secs_f64()),
        (false, Some(at)) if !late && !unread => {
            (seconds + omit).min(at.saturating_duration_since(t0).as_secs_f64())
        }
        (false, _) => seconds + omit,
    }
}

/// `--get-server-output`: the iperf3 server's report as it sent it (its text, or its JSON
/// document when it runs with `-J`).
fn server_output(theirs: &Results) -> Option<String> {
    match (&theirs.server_output_text, &theirs.server_output_json) {
        (Some(text), _) => Some(text.trim_end().to_string()),
        (None, Some(doc)) => serde_json::to_string_pretty(doc).ok(),
        (None, None) => None,
    }
}

/// What a `mirror` thread counted of one direction: each stream's bytes, a UDP
/// receiver's last datagram counts, and the rows it held back.
struct Mirrored {
    totals: Vec<u64>,
    /// Of `totals`, each stream's bytes in `-O`'s omitted seconds (an iperf3 end leaves
    /// them out of its results).
    omitted: Vec<u64>,
    udp: Vec<Option<UdpSnapshot>>,
    held: Vec<ClosedInterval>,
}

impl Mirrored {
    /// Stream `i`'s bytes after `-O`'s omitted seconds: what an iperf3 end counts.
    fn counted(&self, i: usize) -> u64 {
        let total = self.totals.get(i).copied().unwrap_or(0);
        total - self.omitted.get(i).copied().unwrap_or(0).min(total)
    }

    /// The rows held back for direction `k` (a UDP direction this end sends) as the
    /// server's rows: all but the last as cut, the last with the server's datagram counts
    /// for the whole test (`theirs`; none when the test failed): datagrams received (its
    /// bytes over the datagram size), lost (this end's datagrams less those), and its
    /// jitter.
    fn held_rows(
        &mut self,
        k: usize,
        n: usize,
        theirs: Option<&Results>,
        datagram: u64,
    ) -> Vec<crate::wire::ReceiverRow> {
        let held = std::mem::take(&mut self.held);
        let last = held.len().saturating_sub(1);
        held.iter()
            .enumerate()
            .map(|(j, iv)| {
                let mut row = report::receiver_row(iv, false);
                if let (true, Some(theirs)) = (j == last, theirs) {
                    row.udp = (0..n)
                        .map(|i| {
                            let sent = self.totals.get(i).copied().unwrap_or(0) / datagram.max(1);
                            let s = theirs.stream(stream_id(k * n + i));
                            let got = s.map_or(0, |s| s.bytes / datagram.max(1));
                            let lost = sent.saturating_sub(got);
                            UdpSlice {
                                packets: got,
                                lost,
                                lost_percent: crate::report::model::percent(lost, sent),
                                jitter_ms: s.map_or(0.0, |s| s.jitter * 1e3),
                                ..UdpSlice::default()
                            }
                        })
                        .collect();
                }
                row
            })
            .collect()
    }
}

/// A `mirror` thread: passes one direction's batches on to the reporter and cuts them a
/// second time into the rows the remote end would send, this end's counts standing in
/// for them: receiver rows for a direction this end sends, sender intervals for one it
/// receives. With `hold` (a UDP direction this end sends), the intervals that end at or
/// after the run time are held back for the server's datagram counts
/// ([`Mirrored::held_rows`]).
fn mirror(
    batches: Receiver<Batch>,
    relay: Sender<Batch>,
    mut cutter: IntervalCutter,
    reverse: bool,
    remote: Sender<RemoteEvent>,
    hold: Option<Duration>,
    stopped: &AtomicBool,
) -> Mirrored {
    let streams = cutter.totals().len();
    let mut out = Mirrored {
        totals: Vec::new(),
        omitted: vec![0; streams],
        udp: vec![None; streams],
        held: Vec::new(),
    };
    let hold_ns = hold.map(|h| h.as_nanos() as u64);
    let emit = |cutter: &mut IntervalCutter, out: &mut Mirrored| {
        let held = &mut out.held;
        while let Some(iv) = cutter.pop_ready() {
            if iv.omitted {
                for (sum, slice) in out.omitted.iter_mut().zip(&iv.streams) {
                    *sum += slice.bytes;
                }
            }
            if hold_ns.is_some_and(|h| iv.end_ns >= h) {
                held.push(iv);
                continue;
            }
            let _ = remote.send(match reverse {
                false => RemoteEvent::Row(report::receiver_row(&iv, false)),
                true => RemoteEvent::SenderInterval(iv),
            });
        }
    };
    for batch in parked(&batches) {
        cutter.add(&batch);
        if stopped.load(Ordering::SeqCst) {
            cutter.stop();
        }
        emit(&mut cutter, &mut out);
        if let (Some(last), Some(u)) =
            (batch.udp.last(), out.udp.get_mut(usize::from(batch.stream)))
        {
            *u = Some(*last);
        }
        if relay.send(batch).is_err() {
            break;
        }
    }
    if stopped.load(Ordering::SeqCst) {
        cutter.stop();
    }
    cutter.finish();
    emit(&mut cutter, &mut out);
    out.totals = cutter.totals().to_vec();
    out
}

/// A UDP test's datagrams as both ends counted them, where they part: the server's bytes
/// are whole datagrams (one size), a receiver's count below its highest sequence is its
/// loss, and what the sender sent past the receiver's highest never arrived (iperf3 does
/// not count that as lost; pinperf's totals do). Said on stderr, per stream.
fn reconcile_udp(cfg: &ClientConfig, counted: &[Mirrored], theirs: &Results) {
    if !cfg.test.udp {
        return;
    }
    let n = usize::from(cfg.test.streams);
    let datagram = cfg.test.block_bytes().max(1);
    for (k, &reverse) in cfg.test.direction().reversed().iter().enumerate() {
        let Some(mine) = counted.get(k) else {
            continue;
        };
        for i in 0..n {
            let Some(s) = theirs.stream(stream_id(k * n + i)) else {
                continue;
            };
            let ours = mine.totals.get(i).copied().unwrap_or(0);
            if s.bytes % datagram != 0 {
                stderrln!(
                    "pinperf: stream {i}: the iperf3 server counted {} bytes, not whole \
                     {datagram}-byte datagrams",
                    s.bytes
                );
            }
            match reverse {
                // This end sent: the server's highest sequence against what left here.
                false => {
                    let sent = ours / datagram;
                    let highest = u64::try_from(s.packets).unwrap_or(0);
                    if highest < sent {
                        stderrln!(
                            "pinperf: stream {i}: the iperf3 server's highest sequence was \
                             {highest} of {sent} sent: the last {} never arrived (iperf3 \
                             counts {} lost below it; the totals count all {})",
                            sent - highest,
                            s.errors,
                            sent.saturating_sub(s.bytes / datagram)
                        );
                    }
                }
                // The server sent: its datagram count against its bytes.
                true => {
                    let sent = u64::try_from(s.packets).unwrap_or(0);
                    if sent != s.bytes / datagram {
                        stderrln!(
                            "pinperf: stream {i}: the iperf3 server counted {sent} datagrams \
                             sent but {} bytes ({} datagrams)",
                            s.bytes,
                            s.bytes / datagram
                        );
                    }
                }
            }
        }
    }
}

/// The two ends' counts: a server that read less than this end wrote counted what it had
/// read when it took `TEST_END` (said on stderr, with the difference); with `-R` they must
/// match.
fn reconcile(totals: &report::ClientTotals, cfg: &ClientConfig) {
    let sent: u64 = totals.sent.iter().sum();
    let received: u64 = totals.received.as_deref().unwrap_or_default().iter().sum();
    if sent != received && cfg.test.omit().is_zero() {
        stderrln!(
            "pinperf: the sender counted {sent} bytes, the receiver {received} ({} apart): \
             an iperf3 server counts what it has read when it takes TEST_END and what it \
             writes before it closes",
            sent.abs_diff(received)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's kernel had the last byte when at most one segment was left
    /// unacknowledged (the last one's ACK waits for the receiver's delayed-ACK timer), not
    /// when that ACK came; unless it was sent after the rest had arrived, or the
    /// nearly-acked moment was never seen.
    #[test]
    fn the_last_byte_arrived_before_its_delayed_ack() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let tail = |nearly: Option<u64>, acked: Option<u64>, last_arrived: Option<u64>| Tail {
            nearly: nearly.map(at),
            acked: acked.map(at),
            last_arrived: last_arrived.map(at),
        };
        // The last segment's ACK delayed 40 ms: it arrived with the rest, at the first look.
        assert_eq!(tail(Some(4), Some(44), Some(3)).received(), Some(at(4)));
        // Sent after the rest (paced, or retransmitted): half a round trip after it was
        // sent, never after all was acknowledged.
        assert_eq!(tail(Some(4), Some(210), Some(9)).received(), Some(at(9)));
        assert_eq!(
            tail(Some(4), Some(210), Some(300)).received(),
            Some(at(210))
        );
        // Its time unknown: when all was acknowledged.
        assert_eq!(tail(Some(4), Some(210), None).received(), Some(at(210)));
        // Every byte acknowledged at the first look.
        assert_eq!(tail(None, Some(3), Some(1)).received(), Some(at(3)));
        // Never all acknowledged (a stalled server): no time.
        assert_eq!(tail(Some(4), None, None).received(), None);
    }

    /// The looks: one segment (`snd_mss`) left unacknowledged is "nearly", none is all;
    /// a stream not yet shut down (ESTABLISHED) or with bytes unsent is neither, and every
    /// stream counts. `bytes_acked` counts the SYN.
    #[test]
    fn a_look_tells_nearly_from_all_acknowledged() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // FIN_WAIT1, 10 segments of 1000 bytes sent, `unacked` of them not acknowledged.
        let stream = |unacked: u64| {
            Some(TcpInfo {
                state: 4,
                snd_mss: 1000,
                bytes_sent: 10_000,
                bytes_acked: 10_001 - unacked * 1000,
                last_data_sent_ms: 5,
                ..TcpInfo::default()
            })
        };
        let mut tail = Tail::default();
        let established = Some(TcpInfo {
            state: 1,
            ..stream(0).unwrap()
        });
        assert_eq!(tail.look(&[established, stream(0)], at(10)), None);
        assert_eq!(tail.look(&[stream(2), stream(0)], at(11)), None);
        assert_eq!(tail.nearly, None);
        assert_eq!(tail.look(&[stream(1), stream(0)], at(12)), None);
        assert_eq!(tail.nearly, Some(at(12)));
        assert_eq!(tail.look(&[stream(0), stream(0)], at(52)), Some(at(52)));
        // The first of each is kept; the last data left 5 ms before the look that saw all.
        assert_eq!(tail.look(&[stream(0), stream(0)], at(60)), Some(at(52)));
        assert_eq!(tail.nearly, Some(at(12)));
        assert_eq!(tail.last_arrived, Some(at(47)));
        assert_eq!(tail.received(), Some(at(47)));
    }
}
