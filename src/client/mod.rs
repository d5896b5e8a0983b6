//! The client: plans pinning, reaches the server (or starts one in-process with
//! `--loopback`), negotiates the test, connects the data streams with the window set before
//! `connect()`, runs one pinned `stream-N` sender per stream and a `reporter` thread, and
//! forwards the receiver's live rows from the control connection to that reporter.
//! Sender and receiver byte totals must match exactly, or the test fails.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Instant;

use crate::choices::{Format, Peer};
use crate::config::ClientConfig;
use crate::data::ends::{Ends, Socks, Threads};
use crate::data::pin::PinPlan;
use crate::data::pin::{self, Affinity};
use crate::data::stream::{StreamSocks, spawn_named};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::CpuMark;
use crate::os::net;
use crate::report::interval::IntervalCutter;
use crate::report::model::{Header, Summary};
use crate::report::{self, RemoteEvent};
use crate::server::Server;
use crate::timeouts;
use crate::wire::params::TestParams;
use crate::wire::{self, Accept, Control, ControlMsg, DataHello, PROTOCOL_VERSION, SOFTWARE};

/// Runs one test, printing through `out`; returns the summary. A failure is also handed
/// to `out` (by the reporter once it runs, by this function before that).
pub fn run_with(cfg: ClientConfig, out: Box<dyn report::Formatter>) -> Result<Summary> {
    let mut out = Some(out);
    // A stop signal already taken (between `compare` runs, while the lab was set up):
    // nothing starts; the machine formats still say why.
    let result = match crate::signals::received() {
        Some(sig) => Err(crate::signals::interrupted(sig, "before the test started")),
        None => run_test(cfg, &mut out),
    };
    if let (Err(e), Some(out)) = (&result, out.as_mut()) {
        let _ = out.failed(&e.to_string());
    }
    result
}

fn run_test(cfg: ClientConfig, out: &mut Option<Box<dyn report::Formatter>>) -> Result<Summary> {
    let n = cfg.test.streams as usize;
    let threads = cfg.test.threads();
    let allowed = pin::allowed_cpus();
    let local_plan = pin::plan(&cfg.affinity, threads, &allowed)
        .map_err(|e| Error::Usage(format!("-A: {e}")))?;

    // What an iperf3 server cannot do is refused before anything is resolved or sent.
    if cfg.peer == Peer::Iperf3 {
        crate::iperf3::client::refuse_unsupported(&cfg)?;
    }
    let addrs = if cfg.target.loopback {
        vec![start_loopback_server()?]
    } else {
        let host = cfg.target.host.as_deref().unwrap_or("localhost");
        net::resolve(host, cfg.target.port, cfg.target.family)?
    };

    let (mut stream, _) = net::connect(
        &addrs,
        cfg.target.bind,
        &net::SocketOpts::default(),
        cfg.target.connect_timeout,
    )?;
    stream
        .set_nodelay(true)
        .op(|| "set TCP_NODELAY on the control connection".into())?;
    let peer = stream.peer_addr().op(|| "read server address".into())?;
    let local = stream.local_addr().op(|| "read local address".into())?;
    // pinperf's preamble first; an iperf3 server answers nothing until it has its
    // 37-byte cookie (of which the preamble is then the start).
    match cfg.peer {
        Peer::Iperf3 => return crate::iperf3::client::run(cfg, out, stream, local_plan, &[]),
        Peer::Pinperf | Peer::Auto => {
            stream
                .write_all(wire::PREAMBLE)
                .op(|| format!("write to {peer}"))?;
        }
    }
    // A pinperf server answers the preamble at once; silence is an iperf3 server's (it
    // waits for the rest of a cookie).
    if !answers(&stream, detect_wait(&stream))? {
        let wait = detect_wait(&stream).as_secs_f64();
        if cfg.peer == Peer::Pinperf {
            return Err(Error::Protocol {
                peer,
                what: format!(
                    "it said nothing for {wait:.1} s after pinperf's preamble: not a pinperf \
                     server (an iperf3 server waits like this for its cookie); if it runs \
                     iperf3, use --peer iperf3 (or --peer auto, which switches)"
                ),
            });
        }
        stderrln!(
            "pinperf: {peer} said nothing for {wait:.1} s after pinperf's preamble, as an iperf3 \
             server does (it waits for a cookie): speaking iperf3 (--peer iperf3 skips this \
             wait; --peer pinperf expects a pinperf server)"
        );
        return crate::iperf3::client::run(cfg, out, stream, local_plan, wire::PREAMBLE);
    }
    await_answer(&stream)?;
    // A busy iperf3 server answers any connection with ACCESS_DENIED and closes it unread
    // (a reset follows its byte): that is its answer, whichever --peer was asked for.
    let mut first = [0u8; 1];
    if let Ok(1) = stream.peek(&mut first)
        && first[0] == crate::iperf3::ACCESS_DENIED as u8
    {
        return Err(crate::iperf3::client::busy(peer));
    }
    let _ = stream.set_read_timeout(Some(timeouts::HANDSHAKE));
    wire::check_preamble(&mut stream, peer)?;
    let ctl = Control::new(stream, peer)?;
    // UDP without -l: datagrams that fit the path's MTU, as the control connection sees it.
    let mut cfg = cfg;
    if cfg.test.udp && cfg.test.len.is_none() {
        let mtu = net::path_info(&ctl.socket()).mtu;
        cfg.test.len = Some(crate::wire::params::datagram_for_mtu(mtu, peer.is_ipv6()));
    }
    let (remote_software, accept) = negotiate(&ctl, &cfg.test, cfg.auth.as_ref())?;
    // Both ends on this host, whatever their addresses and namespaces: its cores are counted
    // once. With auto plans stream i's sender and receiver share core i, which
    // bench-scripts/placement.sh measured fastest here; say so in the header.
    let same_host = peer.ip().is_loopback()
        || accept
            .host
            .is_some_and(|m| Some(m) == crate::os::sys::host_mark(accept.cookie));
    let placement_note = (same_host
        && cfg.affinity == Affinity::Auto
        && cfg.test.pin.is_none()
        && allowed.len() > 1)
        .then(|| {
            format!(
                "same host, {} cores: each stream's sender and receiver share a core, streams \
                 spread over cores (measured fastest on loopback: bench-scripts/placement.sh)",
                allowed.len()
            )
        });

    let (mut socks, local_window) = match cfg.test.udp {
        false => connect_streams(&cfg, peer, &accept).map(|(s, w)| (Socks::Tcp(s), w)),
        true => crate::wire::udp_rendezvous::connect(
            &ctl,
            cfg.target.bind,
            &accept.udp_ports,
            accept.cookie,
            &cfg.test,
        )
        .map(|(s, w)| (Socks::Udp(s), w)),
    }
    // The handshake went through: a data connection refused or reset now is the server's
    // doing (out of descriptors, it closed its listener), and its word is the cause.
    .map_err(|e| ctl.with_their_word(e, true, |_| false))?;
    warn_windows(&local_window, &accept, n);

    let congestion = match &socks {
        Socks::Tcp(s) | Socks::TcpEndedByClose(s) => {
            net::congestion(&s[0].data).unwrap_or_else(|| "?".into())
        }
        Socks::Udp(_) | Socks::UdpAs(..) => "- (UDP)".into(),
    };
    let header = Header {
        software: SOFTWARE.into(),
        local: local.to_string(),
        remote: peer.to_string(),
        remote_software,
        local_window,
        remote_window: accept.window.clone(),
        path: match &socks {
            Socks::Tcp(s) | Socks::TcpEndedByClose(s) => net::path_info(&s[0].data),
            Socks::Udp(_) | Socks::UdpAs(..) => net::path_info(&ctl.socket()),
        },
        local_pin: local_plan.clone(),
        remote_pin: accept.pin_plan.clone(),
        placement_note,
        congestion,
        same_host,
        same_process: cfg.target.loopback || cfg.same_process,
        cpu_intervals: cfg.cpu_intervals,
        engine: cfg.engine,
        tos_carried: socks.tos().filter(|_| cfg.test.tos.is_some()),
        started_at: crate::os::sys::local_time(report::STARTED_AT).ok(),
        local_host: crate::os::sys::hostname(),
        remote_host: accept.host_name.as_deref().map(|h| wire::printable(h, 255)),
        ..Header::of_test(&cfg.test)
    };

    // Threads, per direction: pinned senders (the client sends) or receivers (the server
    // does), and one reporter for all.
    let mut ends = Ends::default();
    let mut feeds = Vec::new();
    let rtt = net::rtt(&ctl.socket());
    for (k, &reverse) in cfg.test.direction().reversed().iter().enumerate() {
        let plan = PinPlan(local_plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, (batches, free)) = Threads::spawn(
            !reverse,
            cfg.engine,
            socks.take(n),
            &plan,
            &cfg.test,
            timeouts::udp_settle(rtt),
        )
        .inspect_err(|e| ctl.abort(&e.to_string()))?;
        ends.0.push(threads);
        feeds.push(report::Feed {
            reverse,
            batches,
            free,
            cutter: IntervalCutter::for_test(n, &cfg.test),
        });
    }
    let (remote_tx, remote_rx) = crossbeam_channel::unbounded();
    let out = out.take().expect("the formatter is handed to one reporter");
    let output = report::Output::default();
    let output2 = output.clone();
    let reporter = spawn_named("reporter".into(), move || {
        report::run_reporter(header, feeds, remote_rx, out, output2)
    })?;

    // Start when the server says so, then relay its rows until its totals arrive.
    let mut marks = None; // CPU and kernel counters from the start, once it started
    let mut failure = match recv_step(&ctl) {
        Ok(ControlMsg::Start) => None,
        Ok(other) => Some(other.unexpected(peer, "start")),
        Err(e) => Some(e),
    };
    if failure.is_none() {
        let mut kernel = crate::os::kstat::KernelMark::now();
        let cpu = CpuMark::now();
        let t0 = Instant::now();
        ends.start(t0);
        failure = watch(&ctl, &ends, &remote_tx, &output, &cfg, t0, &mut kernel);
        marks = Some((cpu, kernel));
        if failure.is_some() {
            // Whatever ended it (a stream, the server, a signal), the rows measured so
            // far keep their totals, marked cut short; the error follows them.
            let at = t0.elapsed().as_secs_f64();
            let _ = remote_tx.send(RemoteEvent::CutShort { at, say: None });
        }
    }
    // The server hears why before its streams see the resets (which it would otherwise
    // take for the cause).
    let told = failure.is_some();
    if let Some(e) = &failure {
        ctl.abort(&e.to_string());
        ends.abort();
    }
    let (thread_cpu, send_path, stream_error) = ends.join(cfg.test.zerocopy);
    if let Some((mark, mut kernel)) = marks {
        let _ = remote_tx.send(RemoteEvent::LocalCpu(mark.report(thread_cpu, send_path)));
        if let Some(k) = kernel.report() {
            let _ = remote_tx.send(RemoteEvent::LocalKernel(k));
        }
    }
    let failure = failure.or(stream_error);
    if let Some(e) = &failure {
        let _ = remote_tx.send(RemoteEvent::Failed(e.to_string()));
    }
    drop(remote_tx);
    let totals = reporter
        .join()
        .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())));
    if let Some(e) = failure {
        if !told {
            ctl.abort(&e.to_string());
        }
        return Err(output.error().unwrap_or(e));
    }
    let _ = ctl.send(&ControlMsg::Bye);
    // The test ran; its report may not have been written (`-J` writes once, at the end).
    if let Some(e) = output.error() {
        return Err(e);
    }
    let totals = totals?;
    let sent: u64 = totals.sent.iter().sum();
    let received: u64 = totals.received.as_deref().unwrap_or_default().iter().sum();
    // UDP loses what it loses (the report counts it); TCP's bytes must match.
    if sent != received && !cfg.test.udp {
        return Err(Error::Test(format!(
            "sender wrote {sent} bytes but the receiver read {received}: the totals do not reconcile"
        )));
    }
    // The first direction's (the client's with `--bidir`).
    totals
        .summaries
        .into_iter()
        .next()
        .ok_or_else(|| Error::Test("the report's summary is missing".into()))
}

/// Hello and parameters: the server's software and its answer, checked against the test.
fn negotiate(
    ctl: &Control,
    test: &TestParams,
    auth: Option<&crate::server::auth::ClientAuth>,
) -> Result<(String, Accept)> {
    let peer = ctl.peer;
    ctl.send(&ControlMsg::Hello {
        version: PROTOCOL_VERSION,
        software: SOFTWARE.into(),
    })?;
    let remote_software = match recv_step(ctl)? {
        ControlMsg::Welcome { software, .. } => software,
        ControlMsg::Refuse { reason } => {
            let reason = crate::wire::printable(&reason, usize::MAX);
            return Err(Error::Refused { peer, reason });
        }
        // Our own hello back: an echo service on that port ("expected welcome,
        // got hello").
        ControlMsg::Hello { .. } => {
            return Err(Error::Protocol {
                peer,
                what: "not a pinperf server: it sent this client's hello back (an echo \
                       service on that port? check -p)"
                    .into(),
            });
        }
        other => return Err(other.unexpected(peer, "welcome")),
    };
    crate::server::auth::client_step(ctl, auth, test, recv_step)?;
    ctl.send(&ControlMsg::Params(test.clone()))?;
    let accept = match recv_step(ctl)? {
        ControlMsg::Accept(a) => a,
        ControlMsg::Refuse { reason } => {
            let reason = crate::wire::printable(&reason, usize::MAX);
            return Err(Error::Refused { peer, reason });
        }
        other => return Err(other.unexpected(peer, "accept")),
    };
    let data = match test.udp {
        true => accept.udp_ports.len() == test.threads(),
        false => accept.data_port != 0,
    };
    if accept.pin_plan.0.len() != test.threads() || !data {
        return Err(Error::Protocol {
            peer,
            what: "the server's answer does not match the test asked for".into(),
        });
    }
    Ok((remote_software, accept))
}

/// Each stream's data connection (window and congestion control set before `connect()`)
/// and, with block RTT, its echo connection; each opens with the test's cookie, its stream
/// id and its direction. Returns them, directions in order, with the first data
/// connection's window grant.
fn connect_streams(
    cfg: &ClientConfig,
    peer: SocketAddr,
    accept: &Accept,
) -> Result<(Vec<StreamSocks>, crate::os::netinfo::WindowGrant)> {
    let n = usize::from(cfg.test.streams);
    // Data connections, window set before connect().
    let data_addr = SocketAddr::new(peer.ip(), accept.data_port);
    let opts = net::SocketOpts::of(&cfg.test);
    let mut local_window = None;
    let mut socks = Vec::with_capacity(cfg.test.threads());
    for &reverse in cfg.test.direction().reversed() {
        let hello = |stream: usize, echo: bool| {
            DataHello {
                cookie: accept.cookie,
                stream: stream as u16,
                echo,
                reverse,
            }
            .to_bytes()
        };
        for id in 0..n {
            let (mut data, grant) = net::connect(
                &[data_addr],
                cfg.target.bind,
                &opts,
                cfg.target.connect_timeout,
            )
            .map_err(|e| Error::Test(format!("stream-{id}: {e}")))?;
            data.write_all(&hello(id, false))
                .op(|| format!("stream-{id}: send data hello to {data_addr}"))?;
            local_window.get_or_insert(grant);
            let echo = if cfg.test.echo() {
                let (mut echo, _) = net::connect(
                    &[data_addr],
                    cfg.target.bind,
                    &opts.echo(),
                    cfg.target.connect_timeout,
                )
                .map_err(|e| Error::Test(format!("stream-{id} echo connection: {e}")))?;
                echo.write_all(&hello(id, true))
                    .op(|| format!("stream-{id}: send echo hello to {data_addr}"))?;
                Some(echo)
            } else {
                None
            };
            socks.push(StreamSocks { data, echo });
        }
    }
    Ok((socks, local_window.unwrap_or_default()))
}

/// Watches the running test from the main thread until the receiver's totals arrive:
/// relays the server's rows to the reporter, and stops at the first failure with its root
/// cause: a local stream that failed (said live), the server's error, a server that
/// stopped answering (see [`timeouts`]), output that nobody reads any more, or a stop
/// signal (SIGINT/SIGTERM/SIGHUP, see [`crate::signals`]). On a signal the server is told
/// first, so it names the signal rather than the resets that follow; the
/// reporter is also handed the receiver's totals over the rows it sent so far, so every
/// format ends with the totals of what was measured (text: `#( N)` and `#(**)` lines).
fn watch(
    ctl: &Control,
    streams: &Ends,
    remote_tx: &crossbeam_channel::Sender<RemoteEvent>,
    output: &report::Output,
    cfg: &ClientConfig,
    t0: Instant,
    kernel: &mut crate::os::kstat::KernelMark,
) -> Option<Error> {
    let peer = ctl.peer;
    let silent = |since: Instant| {
        Error::Test(format!(
            "the server {peer} stopped answering: no message on the control connection for {:.0} s",
            since.elapsed().as_secs_f64()
        ))
    };
    let run_time = cfg.test.run_time();
    let row_wait = timeouts::row_wait(cfg.test.interval());
    let mut last_msg = Instant::now();
    let mut local_done: Option<Instant> = None;
    loop {
        if let Some(f) = streams.failure() {
            let at =
                |f: &crate::data::stream::Failure| f.at.saturating_duration_since(t0).as_secs_f64();
            let ours = |f: &crate::data::stream::Failure| {
                Error::Test(format!("{} ({:.2} s into the test)", f.error, at(f)))
            };
            // Rows in front of the server's word go on to the reporter.
            let word = ctl.with_their_word(ours(&f), f.peer_closed, |msg| {
                let event = match msg {
                    ControlMsg::Row(row) => RemoteEvent::Row(row),
                    ControlMsg::SenderInterval(iv) => RemoteEvent::SenderInterval(iv),
                    _ => return false,
                };
                let _ = remote_tx.send(event);
                true
            });
            // A reset read here may be the knock-on of this end's own failure, recorded
            // while the server's word was awaited: a connection destroyed here fails its
            // thread a moment after another stream's write met the server's reset (CI: the
            // echo connection destroyed, "write: Connection reset by peer" named). This
            // end's own error is the cause.
            let (f, error) = match streams.failure() {
                Some(own) if f.peer_closed && !own.peer_closed => {
                    let e = ours(&own);
                    (own, e)
                }
                _ => (f, word),
            };
            let _ = remote_tx.send(RemoteEvent::StreamFailed {
                at: at(&f),
                error: f.error.clone(),
            });
            return Some(error);
        }
        if output.closed() {
            return Some(Error::OutputClosed);
        }
        if let Some(sig) = crate::signals::received() {
            let at = t0.elapsed().as_secs_f64();
            let e = crate::signals::interrupted(sig, format!("{at:.1} s into the test"));
            // Every format keeps the totals so far (`-J`: `end` beside `error`).
            let _ = remote_tx.send(RemoteEvent::CutShort {
                at,
                say: (cfg.format == Format::Text).then(|| e.to_string()),
            });
            return Some(e);
        }
        if local_done.is_none() && streams.finished() {
            local_done = Some(Instant::now());
        }
        let msg = match ctl.poll(timeouts::POLL) {
            Ok(None) => {
                kernel.sample();
                // Rows come every interval while the senders send; once they are done
                // (drained), the totals follow at once.
                let quiet_since = local_done.map_or(last_msg, |d| d.max(last_msg));
                let late = match local_done {
                    Some(_) => quiet_since.elapsed() > timeouts::STALL,
                    None => t0.elapsed() < run_time && last_msg.elapsed() > row_wait,
                };
                if !late {
                    continue;
                }
                Err(silent(quiet_since))
            }
            Ok(Some(m)) => {
                last_msg = Instant::now();
                Ok(m)
            }
            Err(e) => Err(e),
        };
        match msg {
            Ok(ControlMsg::Row(row)) => {
                kernel.sample();
                let _ = remote_tx.send(RemoteEvent::Row(row));
            }
            Ok(ControlMsg::SenderInterval(iv)) => {
                kernel.sample();
                let _ = remote_tx.send(RemoteEvent::SenderInterval(iv));
            }
            Ok(ControlMsg::Done(done)) => {
                let _ = remote_tx.send(RemoteEvent::Done(done));
                return None;
            }
            Ok(other) => return Some(other.unexpected(peer, "a row or the totals")),
            Err(e) => {
                // Host TCP memory in pressure or exhausted explains a crawling test.
                kernel.sample();
                let why = kernel
                    .peak()
                    .and_then(crate::os::kstat::memory_note)
                    .map(|n| format!("; {n}"))
                    .unwrap_or_default();
                return Some(Error::Test(format!(
                    "test aborted {:.1} s after its start: {e}{why}",
                    t0.elapsed().as_secs_f64()
                )));
            }
        }
    }
}

/// One handshake step's answer, within [`timeouts::HANDSHAKE`], in short polls so that a
/// stop signal ends the wait at once instead of after it.
fn recv_step(ctl: &Control) -> Result<ControlMsg> {
    let deadline = Instant::now() + timeouts::HANDSHAKE;
    loop {
        if let Some(sig) = crate::signals::received() {
            return Err(crate::signals::interrupted(sig, "during the handshake"));
        }
        if let Some(msg) = ctl.poll(timeouts::POLL)? {
            return Ok(msg);
        }
        if Instant::now() >= deadline {
            return Err(wire::no_answer(ctl.peer));
        }
    }
}

/// Waits, in short polls, until the server has said something (its preamble), or a stop
/// signal comes, or the handshake's time is up (the preamble read then says so).
fn await_answer(stream: &std::net::TcpStream) -> Result<()> {
    let deadline = Instant::now() + timeouts::HANDSHAKE;
    let _ = stream.set_read_timeout(Some(timeouts::POLL));
    while Instant::now() < deadline {
        if let Some(sig) = crate::signals::received() {
            return Err(crate::signals::interrupted(sig, "while connecting"));
        }
        match stream.peek(&mut [0u8; 1]) {
            Err(e) if crate::data::stream::is_timeout(&e) => {}
            _ => break,
        }
    }
    Ok(())
}

/// [`timeouts::peer_silence`] for this control connection.
fn detect_wait(stream: &std::net::TcpStream) -> std::time::Duration {
    timeouts::peer_silence(net::rtt(stream))
}

/// Whether the server says something within `wait` (short polls: a stop signal ends it).
fn answers(stream: &std::net::TcpStream, wait: std::time::Duration) -> Result<bool> {
    let deadline = Instant::now() + wait;
    let _ = stream.set_read_timeout(Some(timeouts::POLL.min(wait)));
    while Instant::now() < deadline {
        if let Some(sig) = crate::signals::received() {
            return Err(crate::signals::interrupted(sig, "while connecting"));
        }
        match stream.peek(&mut [0u8; 1]) {
            Err(e) if crate::data::stream::is_timeout(&e) => {}
            _ => return Ok(true),
        }
    }
    Ok(false)
}

fn warn_windows(local: &crate::os::netinfo::WindowGrant, accept: &Accept, streams: usize) {
    for w in local
        .shortfalls("local")
        .into_iter()
        .chain(accept.window.shortfalls("remote"))
    {
        stderrln!("pinperf: {w}");
    }
    let most = local.sndbuf.max(accept.window.rcvbuf);
    if let Some(w) = crate::os::kstat::window_memory_warning(streams, most) {
        stderrln!("pinperf: warning: {w}");
    }
    if let Some(note) = &local.force_note {
        stderrln!("pinperf: warning: local {note}");
    }
    if let Some(note) = &accept.window.force_note {
        stderrln!("pinperf: warning: remote {note}");
    }
}

/// Starts a one-test server on 127.0.0.1 (ephemeral port) in this process.
/// Its own plan is `auto`; the client's `-A` reaches it as the test's remote plan (`none`
/// included), as it reaches any server.
fn start_loopback_server() -> Result<SocketAddr> {
    Server::spawn_local(true, Affinity::Auto)
}
