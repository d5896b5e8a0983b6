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
use crate::wire::params::{Direction, TestParams};
use crate::wire::{self, Accept, Control, ControlMsg, DataHello, PROTOCOL_VERSION, SOFTWARE};

mod probe;

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
    let allowed = pin::allowed_cpus();
    let local_plan = pin::plan(&cfg.affinity, cfg.test.threads(), &allowed)
        .map_err(|e| Error::Usage(format!("-A: {e}")))?;
    // What an iperf3 server cannot do is refused before anything is resolved or sent.
    if cfg.peer == Peer::Iperf3 {
        crate::iperf3::client::refuse_unsupported(&cfg)?;
    }
    // --realtime's receivers in this process: the in-process server's (--loopback, the
    // lab), or this end's with -R or --bidir.
    let receives_here = cfg.same_process || cfg.test.direction() != Direction::Forward;
    if cfg.test.realtime_receivers() && receives_here {
        crate::data::stream::check_realtime("--realtime")?;
    }
    // Before the control connection: a server's handshake deadline would not wait for it.
    let probed = match probe::wanted(&cfg, &allowed) {
        true => probe::run(&cfg, allowed[0], allowed[1]),
        false => None,
    };
    if let Some(sig) = crate::signals::received() {
        return Err(crate::signals::interrupted(sig, "before the test started"));
    }
    let (stream, local) = connect_control(&cfg)?;
    let (local_plan, placement) = placed(&cfg, local, local_plan, &allowed);
    let ctl = match meet(&cfg, stream)? {
        Met::Pinperf(ctl) => ctl,
        Met::Iperf3(stream, sent) => {
            return crate::iperf3::client::run(cfg, out, stream, local_plan, sent);
        }
    };
    let mut cfg = cfg;
    let (local_plan, placement) = match split(&mut cfg, ctl.peer, &allowed, probed) {
        Some((plan, why)) => (plan, Some(why)),
        None => (local_plan, placement),
    };
    // UDP without -l: datagrams that fit the path's MTU, as the control connection sees it.
    if cfg.test.udp && cfg.test.len.is_none() {
        let mtu = net::path_info(&ctl.socket()).mtu;
        let ipv6 = ctl.peer.is_ipv6();
        cfg.test.len = Some(crate::wire::params::datagram_for_mtu(mtu, ipv6));
    }
    let (remote_software, accept) = negotiate(&ctl, &cfg.test, cfg.auth.as_ref())?;
    let session = Session {
        ctl,
        local,
        remote_software,
        accept,
    };
    let (mut socks, local_window) = open_data(&cfg, &session)?;
    let mut header = session.header(&cfg, &socks, local_window, &local_plan, &allowed);
    // The plan chosen for this test says more than the same-host default.
    header.placement_note = placement.or(header.placement_note);
    let (ends, feeds) = spawn_ends(&cfg, &session.ctl, &mut socks, &local_plan)?;
    let (remote_tx, remote_rx) = crossbeam_channel::unbounded();
    let out = out.take().expect("the formatter is handed to one reporter");
    let output = report::Output::default();
    let output2 = output.clone();
    let reporter = spawn_named("reporter".into(), move || {
        report::run_reporter(header, feeds, remote_rx, out, output2)
    })?;
    let measured = measure(&session.ctl, &ends, &remote_tx, &output, &cfg);
    finish(
        &session.ctl,
        ends,
        remote_tx,
        reporter,
        &output,
        &cfg,
        measured,
    )
}

/// `-A auto` toward another host: the plan made for this host's layout around the NIC the
/// control connection leaves by ([`pin::place`]), and the header's words for it; the
/// round-robin plan, said so, when that interface is virtual.
fn placed(
    cfg: &ClientConfig,
    local: SocketAddr,
    round_robin: PinPlan,
    allowed: &[usize],
) -> (PinPlan, Option<String>) {
    if cfg.affinity != Affinity::Auto || cfg.target.loopback || local.ip().is_loopback() {
        return (round_robin, None);
    }
    let interface = crate::os::topology::interface_of(local.ip());
    let host =
        crate::os::topology::read_host(std::path::Path::new("/"), allowed, interface.as_deref());
    match pin::place(cfg.test.threads(), &host) {
        Some(p) => {
            if let Some(w) = &p.warning {
                eprintln!("pinperf: warning: {w}");
            }
            (p.plan, Some(p.why))
        }
        None => {
            let name = interface.unwrap_or_else(|| format!("the interface of {}", local.ip()));
            let note = format!(
                "{name} has no NIC to follow (a virtual interface): streams \
                 round-robin over the allowed cores"
            );
            (round_robin, Some(note))
        }
    }
}

/// `-A auto` against a pinperf server on this host (its loopback address), one stream in
/// one direction: over UDP its sender on the first allowed core and its receiver unpinned;
/// over TCP, where `probed` found splitting faster, or without a probe where it
/// measured faster ([`pin::split_one_stream`]), this end's stream on the first allowed
/// core, the server's on the second (sent as the remote plan); where the probe found
/// sharing faster, this end's on the first and the server's where its own plan puts it.
fn split(
    cfg: &mut ClientConfig,
    peer: SocketAddr,
    allowed: &[usize],
    probed: Option<probe::Probed>,
) -> Option<(PinPlan, String)> {
    let test = &cfg.test;
    let regime = pin::Regime {
        streams: usize::from(test.streams),
        bidir: test.bidir,
        udp: test.udp,
        bbr: match &test.transport.congestion {
            Some(cc) => cc == "bbr",
            None => net::default_congestion().is_some_and(|cc| cc == "bbr"),
        },
        mss: test.mss(),
        block: test.block_bytes(),
    };
    let asked = cfg.affinity == Affinity::Auto && test.pin.is_none();
    let (&mine, &theirs) = (allowed.first()?, allowed.get(1)?);
    if !asked || !peer.ip().is_loopback() {
        return None;
    }
    if pin::unpinned_udp_receiver(&regime) {
        let why = format!(
            "same host, one UDP stream: its sender on cpu{mine}, its receiver left to the \
             scheduler, which lost less than pinning it (bench-scripts/placement.sh)"
        );
        // -R: the server's own plan pins its sender (its first core, this end's first on
        // one host); a plan sent from here could name a core outside its set.
        let (local, remote) = match cfg.test.reverse {
            false => (Some(mine), Some(Affinity::None)),
            true => (None, None),
        };
        cfg.test.pin = remote;
        return Some((PinPlan(vec![local]), why));
    }
    if let Some(p) = probed {
        // Paired: the server's own plan puts its stream on its first core, as without a
        // probe.
        if p.split_wins() {
            cfg.test.pin = Some(Affinity::List(vec![theirs]));
        }
        return Some((PinPlan(vec![Some(mine)]), p.why(mine, theirs)));
    }
    let what = pin::split_one_stream(&regime)?;
    let why = format!(
        "same host, {what}: its sender and receiver on two cores (this end cpu{mine}, \
         the server cpu{theirs}), measured faster than sharing one (bench-scripts/placement.sh)"
    );
    cfg.test.pin = Some(Affinity::List(vec![theirs]));
    Some((PinPlan(vec![Some(mine)]), why))
}

/// The control connection to the server (one started in this process with `--loopback`),
/// and this end's address on it.
fn connect_control(cfg: &ClientConfig) -> Result<(std::net::TcpStream, SocketAddr)> {
    let addrs = if cfg.target.loopback {
        vec![start_loopback_server()?]
    } else {
        let host = cfg.target.host.as_deref().unwrap_or("localhost");
        net::resolve(host, cfg.target.port, cfg.target.family)?
    };
    let (stream, _) = net::connect(
        &addrs,
        &cfg.target.source.control(),
        &net::SocketOpts::default(),
        cfg.target.connect_timeout,
    )?;
    stream
        .set_nodelay(true)
        .op(|| "set TCP_NODELAY on the control connection".into())?;
    cfg.sockets.apply_control(socket2::SockRef::from(&stream))?;
    let local = stream.local_addr().op(|| "read local address".into())?;
    Ok((stream, local))
}

/// Who answered the control connection.
enum Met {
    Pinperf(Control),
    /// An iperf3 server, with what was sent to it already (the start of its cookie).
    Iperf3(std::net::TcpStream, &'static [u8]),
}

/// pinperf's preamble first, and the server's answer: a pinperf server answers it at once;
/// an iperf3 server answers nothing until it has its 37-byte cookie (of which the
/// preamble is then the start).
fn meet(cfg: &ClientConfig, mut stream: std::net::TcpStream) -> Result<Met> {
    let peer = stream.peer_addr().op(|| "read server address".into())?;
    if cfg.peer == Peer::Iperf3 {
        return Ok(Met::Iperf3(stream, &[]));
    }
    stream
        .write_all(wire::PREAMBLE)
        .op(|| format!("write to {peer}"))?;
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
        return Ok(Met::Iperf3(stream, wire::PREAMBLE));
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
    Ok(Met::Pinperf(Control::new(stream, peer)?))
}

/// A pinperf server that accepted the test.
struct Session {
    ctl: Control,
    local: SocketAddr,
    remote_software: String,
    accept: Accept,
}

impl Session {
    /// Both ends on this host, whatever their addresses and namespaces: its cores are
    /// counted once.
    fn same_host(&self) -> bool {
        self.ctl.peer.ip().is_loopback()
            || self
                .accept
                .host
                .is_some_and(|m| Some(m) == crate::os::sys::host_mark(self.accept.cookie))
    }

    /// The report's header: both ends, their windows, pin plans and path.
    fn header(
        &self,
        cfg: &ClientConfig,
        socks: &Socks,
        local_window: crate::os::netinfo::WindowGrant,
        local_plan: &PinPlan,
        allowed: &[usize],
    ) -> Header {
        let same_host = self.same_host();
        // With auto plans stream i's sender and receiver share core i, which
        // bench-scripts/placement.sh measured fastest here; say so in the header.
        let placement_note = (same_host
            && cfg.affinity == Affinity::Auto
            && cfg.test.pin.is_none()
            && allowed.len() > 1)
            .then(|| {
                format!(
                    "same host, {} cores: each stream's sender and receiver share a core, \
                     streams spread over cores (measured fastest on loopback: \
                     bench-scripts/placement.sh)",
                    allowed.len()
                )
            });
        let (congestion, path, rcvlowat_bytes) = match socks {
            Socks::Tcp(s) | Socks::TcpEndedByClose(s) => (
                net::congestion(&s[0].data).unwrap_or_else(|| "?".into()),
                net::path_info(&s[0].data),
                socks.low_water_mark(&cfg.test),
            ),
            Socks::Udp(_) | Socks::UdpAs(..) => {
                ("- (UDP)".into(), net::path_info(&self.ctl.socket()), None)
            }
        };
        let accept = &self.accept;
        Header {
            software: SOFTWARE.into(),
            local: self.local.to_string(),
            remote: self.ctl.peer.to_string(),
            remote_software: self.remote_software.clone(),
            local_window,
            remote_window: accept.window.clone(),
            path,
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
            rcvlowat_bytes,
            ..Header::of_test(&cfg.test)
        }
    }
}

/// The data sockets the server's answer asks for, and this end's window grant.
fn open_data(
    cfg: &ClientConfig,
    session: &Session,
) -> Result<(Socks, crate::os::netinfo::WindowGrant)> {
    let (ctl, accept) = (&session.ctl, &session.accept);
    let (socks, local_window) = match cfg.test.udp {
        false => connect_streams(cfg, ctl.peer, accept).map(|(s, w)| (Socks::Tcp(s), w)),
        true => crate::wire::udp_rendezvous::connect(
            ctl,
            &cfg.target.source,
            &accept.udp_ports,
            accept.cookie,
            &cfg.test,
        )
        .map(|(s, w)| (Socks::Udp(s), w)),
    }
    // The handshake went through: a data connection refused or reset now is the server's
    // doing (out of descriptors, it closed its listener), and its word is the cause.
    .map_err(|e| ctl.with_their_word(e, true, |_| false))?;
    if !cfg.quiet {
        warn_windows(&local_window, accept, usize::from(cfg.test.streams));
    }
    Ok((socks, local_window))
}

/// Threads, per direction: pinned senders (the client sends) or receivers (the server
/// does), each with the feed the reporter reads.
fn spawn_ends(
    cfg: &ClientConfig,
    ctl: &Control,
    socks: &mut Socks,
    local_plan: &PinPlan,
) -> Result<(Ends, Vec<report::Feed>)> {
    let n = usize::from(cfg.test.streams);
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
    Ok((ends, feeds))
}

/// Starts when the server says so and relays its rows until its totals arrive; this end's
/// CPU and kernel counters go to the reporter after the threads are joined. Returns what
/// ended the test early, if anything.
fn measure(
    ctl: &Control,
    ends: &Ends,
    remote_tx: &crossbeam_channel::Sender<RemoteEvent>,
    output: &report::Output,
    cfg: &ClientConfig,
) -> Measured {
    match recv_step(ctl) {
        Ok(ControlMsg::Start) => {}
        Ok(other) => return Measured::failed(other.unexpected(ctl.peer, "start")),
        Err(e) => return Measured::failed(e),
    }
    let mut kernel = crate::os::kstat::KernelMark::now();
    let cpu = CpuMark::now();
    let t0 = Instant::now();
    ends.start(t0);
    let failure = watch(ctl, ends, remote_tx, output, cfg, t0, &mut kernel);
    if failure.is_some() {
        // Whatever ended it (a stream, the server, a signal), the rows measured so far
        // keep their totals, marked cut short; the error follows them.
        let at = t0.elapsed().as_secs_f64();
        let _ = remote_tx.send(RemoteEvent::CutShort { at, say: None });
    }
    Measured {
        failure,
        marks: Some((cpu, kernel)),
    }
}

/// What [`measure`] ended with: the failure, and the counters from the start once it
/// started.
struct Measured {
    failure: Option<Error>,
    marks: Option<(CpuMark, crate::os::kstat::KernelMark)>,
}

impl Measured {
    fn failed(e: Error) -> Measured {
        Measured {
            failure: Some(e),
            marks: None,
        }
    }
}

/// Joins the threads and the reporter, tells the server how it ended, and checks that
/// the bytes reconcile.
fn finish(
    ctl: &Control,
    ends: Ends,
    remote_tx: crossbeam_channel::Sender<RemoteEvent>,
    reporter: std::thread::JoinHandle<Result<report::ClientTotals>>,
    output: &report::Output,
    cfg: &ClientConfig,
    measured: Measured,
) -> Result<Summary> {
    // The server hears why before its streams see the resets (which it would otherwise
    // take for the cause).
    let told = measured.failure.is_some();
    if let Some(e) = &measured.failure {
        ctl.abort(&e.to_string());
        ends.abort();
    }
    let (thread_cpu, send_path, stream_error) = ends.join(cfg.test.zerocopy);
    if let Some((mark, mut kernel)) = measured.marks {
        let _ = remote_tx.send(RemoteEvent::LocalCpu(mark.report(thread_cpu, send_path)));
        if let Some(k) = kernel.report() {
            let _ = remote_tx.send(RemoteEvent::LocalKernel(k));
        }
    }
    let failure = measured.failure.or(stream_error);
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
    reconcile(totals?, cfg.test.udp)
}

/// TCP's bytes must match (UDP loses what it loses, and the report counts it); the first
/// direction's summary (the client's with `--bidir`).
fn reconcile(totals: report::ClientTotals, udp: bool) -> Result<Summary> {
    let sent: u64 = totals.sent.iter().sum();
    let received: u64 = totals.received.as_deref().unwrap_or_default().iter().sum();
    if sent != received && !udp {
        return Err(Error::Test(format!(
            "sender wrote {sent} bytes but the receiver read {received}: the totals do not reconcile"
        )));
    }
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
    // An older server ignores --realtime: its receivers would run as any other thread.
    if test.realtime_at_server() && !accept.realtime {
        let reason = format!(
            "--realtime: the server ({remote_software}) did not grant it: it predates \
             --realtime and ignores the request; upgrade the server or drop --realtime"
        );
        return Err(Error::Refused { peer, reason });
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
    let opts = net::SocketOpts {
        user_timeout: cfg.sockets.user_timeout,
        ..net::SocketOpts::of(&cfg.test)
    };
    let mut local_window = None;
    let mut socks = Vec::with_capacity(cfg.test.threads());
    for (k, &reverse) in cfg.test.direction().reversed().iter().enumerate() {
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
                &cfg.target.source.stream(k * n + id),
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
                    &cfg.target.source.control(),
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
    let mut watch = Watch {
        ctl,
        remote_tx,
        t0,
        run_time: cfg.test.run_time(),
        row_wait: timeouts::row_wait(cfg.test.interval()),
        last_msg: Instant::now(),
        local_done: None,
    };
    loop {
        if let Some(f) = streams.failure() {
            return Some(watch.stream_failed(streams, f));
        }
        if output.closed() {
            return Some(Error::OutputClosed);
        }
        if let Some(sig) = crate::signals::received() {
            return Some(watch.signalled(sig, cfg.format));
        }
        if watch.local_done.is_none() && streams.finished() {
            watch.local_done = Some(Instant::now());
        }
        match watch.next(kernel) {
            None => {}
            Some(Ok(ControlMsg::Done(done))) => {
                let _ = remote_tx.send(RemoteEvent::Done(done));
                return None;
            }
            Some(Ok(msg)) => {
                if let Err(e) = watch.relay(msg, kernel) {
                    return Some(e);
                }
            }
            Some(Err(e)) => return Some(watch.aborted(e, kernel)),
        }
    }
}

/// [`watch`]'s state: when the server last spoke and when this end's threads finished.
struct Watch<'a> {
    ctl: &'a Control,
    remote_tx: &'a crossbeam_channel::Sender<RemoteEvent>,
    t0: Instant,
    run_time: std::time::Duration,
    row_wait: std::time::Duration,
    last_msg: Instant,
    local_done: Option<Instant>,
}

impl Watch<'_> {
    /// A local stream failed: the server's word on it (rows in front of it go on to the
    /// reporter), or this end's own error when that is the cause.
    fn stream_failed(&self, streams: &Ends, f: crate::data::stream::Failure) -> Error {
        let t0 = self.t0;
        let at =
            |f: &crate::data::stream::Failure| f.at.saturating_duration_since(t0).as_secs_f64();
        let ours = |f: &crate::data::stream::Failure| {
            Error::Test(format!("{} ({:.2} s into the test)", f.error, at(f)))
        };
        let word = self.ctl.with_their_word(ours(&f), f.peer_closed, |msg| {
            let event = match msg {
                ControlMsg::Row(row) => RemoteEvent::Row(row),
                ControlMsg::SenderInterval(iv) => RemoteEvent::SenderInterval(iv),
                _ => return false,
            };
            let _ = self.remote_tx.send(event);
            true
        });
        // A reset read here may be the knock-on of this end's own failure, recorded while
        // the server's word was awaited (a connection destroyed here fails its thread a
        // moment after another stream's write met the reset): this end's error is the cause.
        let (f, error) = match streams.failure() {
            Some(own) if f.peer_closed && !own.peer_closed => {
                let e = ours(&own);
                (own, e)
            }
            _ => (f, word),
        };
        let _ = self.remote_tx.send(RemoteEvent::StreamFailed {
            at: at(&f),
            error: f.error.clone(),
        });
        error
    }

    /// A stop signal: every format keeps the totals so far (`-J`: `end` beside `error`).
    fn signalled(&self, sig: i32, format: Format) -> Error {
        let at = self.t0.elapsed().as_secs_f64();
        let e = crate::signals::interrupted(sig, format!("{at:.1} s into the test"));
        let _ = self.remote_tx.send(RemoteEvent::CutShort {
            at,
            say: (format == Format::Text).then(|| e.to_string()),
        });
        e
    }

    /// The server's next message within a poll, `None` while it may still be quiet, or
    /// an error once it has been silent too long.
    fn next(&mut self, kernel: &mut crate::os::kstat::KernelMark) -> Option<Result<ControlMsg>> {
        match self.ctl.poll(timeouts::POLL) {
            Ok(None) => {
                kernel.sample();
                // Rows come every interval while the senders send; once they are done
                // (drained), the totals follow at once.
                let quiet_since = self
                    .local_done
                    .map_or(self.last_msg, |d| d.max(self.last_msg));
                let late = match self.local_done {
                    Some(_) => quiet_since.elapsed() > timeouts::STALL,
                    None => {
                        self.t0.elapsed() < self.run_time && self.last_msg.elapsed() > self.row_wait
                    }
                };
                late.then(|| {
                    Err(Error::Test(format!(
                        "the server {} stopped answering: no message on the control connection \
                         for {:.0} s",
                        self.ctl.peer,
                        quiet_since.elapsed().as_secs_f64()
                    )))
                })
            }
            Ok(Some(m)) => {
                self.last_msg = Instant::now();
                Some(Ok(m))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// A row of the server's on to the reporter; anything else but its totals is wrong.
    fn relay(&self, msg: ControlMsg, kernel: &mut crate::os::kstat::KernelMark) -> Result<()> {
        let event = match msg {
            ControlMsg::Row(row) => RemoteEvent::Row(row),
            ControlMsg::SenderInterval(iv) => RemoteEvent::SenderInterval(iv),
            other => return Err(other.unexpected(self.ctl.peer, "a row or the totals")),
        };
        kernel.sample();
        let _ = self.remote_tx.send(event);
        Ok(())
    }

    /// The control connection failed; host TCP memory in pressure or exhausted explains a
    /// crawling test.
    fn aborted(&self, e: Error, kernel: &mut crate::os::kstat::KernelMark) -> Error {
        kernel.sample();
        let why = kernel
            .peak()
            .and_then(crate::os::kstat::memory_note)
            .map(|n| format!("; {n}"))
            .unwrap_or_default();
        Error::Test(format!(
            "test aborted {:.1} s after its start: {e}{why}",
            self.t0.elapsed().as_secs_f64()
        ))
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
