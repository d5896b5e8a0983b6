//! The server: an acceptor (the calling thread) that hands one connection at a time to a
//! `control` thread and answers everyone else with a clear "busy" refusal; the control
//! thread runs one test: handshake, limits, data listener with the window set before
//! `listen()`, pinned `stream-N` receivers, a `reporter` streaming receiver rows live, and
//! the end: every stream read to EOF, then the totals. Every phase has a timeout; a client
//! that vanishes ends its test and the server goes on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::ServerConfig;
use crate::cpu::CpuMark;
use crate::error::{Error, IoContext, Result};
use crate::net;
use crate::pin;
use crate::protocol::{
    self, Accept, Control, ControlMsg, DataHello, PROTOCOL_VERSION, ReceiverDone, ReceiverRow,
    SOFTWARE,
};
use crate::report::interval::IntervalCutter;
use crate::stream::{Batch, StreamSet, StreamSocks, receiver, spawn_named};
use crate::timeouts;
use crate::units::format_size;
use crossbeam_channel::{Receiver, Sender};

/// Server log lines go to stderr, except for the in-process `--loopback` server.
macro_rules! log {
    ($quiet:expr, $($arg:tt)*) => {
        if !$quiet {
            eprintln!($($arg)*);
        }
    };
}

/// Most concurrent "busy" answers (and, separately, clients waiting for a finishing test);
/// connections beyond it are closed without one.
const MAX_REFUSERS: usize = 16;

/// A bound, listening server.
pub struct Server {
    listener: TcpListener,
    cfg: ServerConfig,
}

impl Server {
    /// Binds the control port.
    pub fn bind(cfg: ServerConfig) -> Result<Server> {
        let ip = cfg.bind.unwrap_or_else(|| net::unspecified(cfg.family));
        let addr = SocketAddr::new(ip, cfg.port);
        let (listener, _) = net::listen(addr, None, false).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
                Error::io(
                    format!("listen on {addr} (another server on that port? choose one with -p)"),
                    source,
                )
            }
            other => other,
        })?;
        Ok(Server { listener, cfg })
    }

    /// Starts a quiet server on 127.0.0.1 (ephemeral port) on a `server` thread of this
    /// process, for `--loopback` (one test) and `compare --loopback` (many). The thread is
    /// not joined: its failures reach the client over the control connection.
    pub fn spawn_local(one_off: bool, affinity: crate::pin::Affinity) -> Result<SocketAddr> {
        let server = Server::bind(ServerConfig::in_process(
            std::net::Ipv4Addr::LOCALHOST.into(),
            one_off,
            affinity,
        ))?;
        let addr = server.local_addr()?;
        spawn_named("server".into(), move || server.run())?;
        Ok(addr)
    }

    /// The address the control port is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .op(|| "read listening address".into())
    }

    /// Serves tests until killed (or one test with `-1`, whose result it returns).
    pub fn run(self) -> Result<()> {
        let slot = Arc::new(Slot::default());
        let refusers = Arc::new(AtomicUsize::new(0));
        let waiters = Arc::new(AtomicUsize::new(0));
        let cfg = Arc::new(self.cfg);
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) => {
                    log!(cfg.quiet, "pinperf: accept on the control port: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let taken = match slot.try_take() {
                Ok(()) => true,
                // The last test is only saying goodbye: a shell loop's next run waits for it
                // (as many waiters at once as busy answers; beyond that, a busy answer).
                Err(FINISHING) if waiters.fetch_add(1, Ordering::AcqRel) < MAX_REFUSERS => false,
                Err(FINISHING) => {
                    waiters.fetch_sub(1, Ordering::AcqRel);
                    refuse_busy(stream, peer, &refusers, cfg.quiet);
                    continue;
                }
                Err(_) => {
                    refuse_busy(stream, peer, &refusers, cfg.quiet);
                    continue;
                }
            };
            let (cfg2, slot2, refusers2) =
                (Arc::clone(&cfg), Arc::clone(&slot), Arc::clone(&refusers));
            let waiters2 = Arc::clone(&waiters);
            let control = spawn_named("control".into(), move || {
                if !taken {
                    let got = slot2.wait_take(timeouts::FINISHING);
                    waiters2.fetch_sub(1, Ordering::AcqRel);
                    if !got {
                        refuse_busy(stream, peer, &refusers2, cfg2.quiet);
                        return Ok(());
                    }
                }
                let result = session(stream, peer, &cfg2, &slot2);
                slot2.release();
                result
            });
            match control {
                Ok(handle) if cfg.one_off && taken => return join_session(handle, peer),
                Ok(_) => {}
                Err(e) => {
                    if taken {
                        slot.release();
                    } else {
                        waiters.fetch_sub(1, Ordering::AcqRel);
                    }
                    log!(cfg.quiet, "pinperf: {e}");
                }
            }
        }
    }
}

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const FINISHING: u8 = 2;

/// Whether the server is free: idle, running a test, or finishing one (results sent).
#[derive(Default)]
struct Slot(AtomicU8);

impl Slot {
    /// Takes the slot if idle; otherwise returns the current state.
    fn try_take(&self) -> std::result::Result<(), u8> {
        self.0
            .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }

    /// Waits while the current test is finishing, then takes the slot.
    fn wait_take(&self, max: Duration) -> bool {
        let deadline = Instant::now() + max;
        loop {
            match self.try_take() {
                Ok(()) => return true,
                Err(FINISHING) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => return false,
            }
        }
    }

    fn finishing(&self) {
        self.0.store(FINISHING, Ordering::Release);
    }

    fn release(&self) {
        self.0.store(IDLE, Ordering::Release);
    }
}

/// Runs a server per the configuration (the `-s` mode).
pub fn serve(cfg: ServerConfig) -> Result<()> {
    let server = Server::bind(cfg)?;
    eprintln!(
        "pinperf: server listening on {} ({SOFTWARE})",
        server.local_addr()?
    );
    server.run()
}

fn join_session(handle: JoinHandle<Result<()>>, peer: SocketAddr) -> Result<()> {
    handle.join().unwrap_or_else(|_| {
        Err(Error::Test(format!(
            "test from {peer}: control thread panicked"
        )))
    })
}

/// Answers a connection that arrives during a test: preamble + Refuse, then close after
/// draining what the client sent (so the refusal is not lost to a reset).
fn refuse_busy(mut stream: TcpStream, peer: SocketAddr, refusers: &Arc<AtomicUsize>, quiet: bool) {
    if refusers.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSERS {
        refusers.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let counter = Arc::clone(refusers);
    let spawned = std::thread::Builder::new()
        .name("refuse".into())
        .spawn(move || {
            let _ = stream.set_write_timeout(Some(timeouts::BUSY_ANSWER));
            let _ = stream.set_read_timeout(Some(timeouts::BUSY_ANSWER / 2));
            let mut msg = protocol::PREAMBLE.to_vec();
            msg.extend(protocol::encode(&ControlMsg::Refuse {
                reason: "server busy: another test is running; try again when it ends".into(),
            }));
            if stream.write_all(&msg).is_ok() {
                let _ = stream.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 512];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            }
            log!(quiet, "pinperf: refused {peer}: busy");
            counter.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        // The closure, and the decrement in it, never ran; the connection closes as it drops.
        refusers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One test, on the `control` thread.
fn session(mut stream: TcpStream, peer: SocketAddr, cfg: &ServerConfig, slot: &Slot) -> Result<()> {
    let _ = stream.set_nodelay(true);
    if let Err(e) = protocol::exchange_preamble(&mut stream, peer, timeouts::HANDSHAKE) {
        log!(
            cfg.quiet,
            "pinperf: control connection from {peer} dropped: {e}"
        );
        // Finishing before the connection closes: whoever the peer sends next waits for us.
        slot.finishing();
        return Err(e);
    }
    let local_ip = stream
        .local_addr()
        .op(|| "read control address".into())?
        .ip();
    let ctl = Arc::new(Control::new(stream, peer)?);
    let result = run_test(&ctl, local_ip, cfg, slot);
    slot.finishing();
    if let Err(e) = &result {
        ctl.abort(&e.to_string());
        log!(cfg.quiet, "pinperf: test from {peer} failed: {e}");
    }
    drop(ctl);
    result
}

fn refuse(ctl: &Control, slot: &Slot, reason: String) -> Error {
    slot.finishing();
    let _ = ctl.send(&ControlMsg::Refuse {
        reason: reason.clone(),
    });
    Error::Refused {
        peer: ctl.peer,
        reason,
    }
}

fn run_test(
    ctl: &Arc<Control>,
    local_ip: std::net::IpAddr,
    cfg: &ServerConfig,
    slot: &Slot,
) -> Result<()> {
    let peer = ctl.peer;
    match ctl.recv(timeouts::HANDSHAKE)? {
        ControlMsg::Hello { version, .. } if version == PROTOCOL_VERSION => {
            ctl.send(&ControlMsg::Welcome {
                version: PROTOCOL_VERSION,
                software: SOFTWARE.into(),
            })?
        }
        ControlMsg::Hello { version, software } => {
            return Err(refuse(
                ctl,
                slot,
                format!(
                    "{software} speaks protocol {version}; this server ({SOFTWARE}) speaks {PROTOCOL_VERSION}"
                ),
            ));
        }
        other => return Err(unexpected(peer, "hello", &other)),
    }
    let params = match ctl.recv(timeouts::HANDSHAKE)? {
        ControlMsg::Params(p) => p,
        other => return Err(unexpected(peer, "params", &other)),
    };
    params
        .validate(&cfg.limits)
        .map_err(|reason| refuse(ctl, slot, reason))?;
    let n = params.streams as usize;
    let allowed = pin::allowed_cpus();
    let plan = match &params.pin {
        Some(affinity) => pin::plan(affinity, n, &allowed),
        None => pin::plan(&cfg.affinity, n, &allowed),
    }
    .map_err(|reason| refuse(ctl, slot, format!("remote -A: {reason}")))?;

    let data_addr = SocketAddr::new(local_ip, cfg.data_port.unwrap_or(0));
    let (data_listener, window) = net::listen(data_addr, params.window_bytes, params.force_window)?;
    if let Some(name) = &params.transport.congestion {
        // Checked before Accept so an unknown name is a clean refusal, not a broken test.
        net::set_congestion(socket2::SockRef::from(&data_listener), name)
            .map_err(|e| refuse(ctl, slot, format!("congestion control: {e}")))?;
    }
    let data_port = data_listener
        .local_addr()
        .op(|| "read data port".into())?
        .port();
    let cookie = protocol::new_cookie();
    log!(
        cfg.quiet,
        "pinperf: test from {peer}: {n} stream(s), block {}, window {}, {} s",
        format_size(params.block_bytes),
        params.window_bytes.map_or("auto".into(), format_size),
        params.duration().as_secs_f64()
    );
    ctl.send(&ControlMsg::Accept(Accept {
        data_port,
        cookie,
        window,
        pin_plan: plan.clone(),
    }))?;
    let socks = accept_streams(&data_listener, peer, cookie, n, params.echo(), cfg.quiet)?;
    drop(data_listener);
    let path = net::path_info(&socks[0].data);

    let run_time = params.run_time();
    let (streams, rx, free_tx) = StreamSet::spawn(
        socks,
        &plan,
        params.block_bytes as usize,
        move |ctx, sock| receiver::run(ctx, sock, run_time),
    )?;
    let cutter = IntervalCutter::for_test(n, &params);
    let ctl2 = Arc::clone(ctl);
    let reporter = spawn_named("reporter".into(), move || {
        run_receiver_reporter(rx, free_tx, cutter, ctl2)
    })?;

    let cpu_mark = CpuMark::now();
    let mut kernel_mark = crate::kstat::KernelMark::now();
    streams.start(Instant::now());
    ctl.send(&ControlMsg::Start)?;

    // Watch the control connection and the streams until every stream has ended.
    let t0 = Instant::now();
    let mut failure: Option<Error> = None;
    while !reporter.is_finished() {
        kernel_mark.sample();
        if let Some(f) = streams.failure() {
            failure = Some(Error::Test(format!(
                "{} ({:.2} s into the test, on the server)",
                f.error,
                f.at.saturating_duration_since(t0).as_secs_f64()
            )));
            break;
        }
        match ctl.poll(Duration::from_millis(100)) {
            Ok(None) => {}
            Ok(Some(ControlMsg::Bye)) => {}
            Ok(Some(other)) => {
                failure = Some(unexpected(peer, "nothing during the test", &other));
                break;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_some() {
        streams.abort();
    }
    let (outcomes, stream_error) = streams.join();
    let cpu = cpu_mark.report(outcomes.iter().map(|o| o.cpu).collect());
    let totals = reporter
        .join()
        .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())));
    if let Some(e) = failure.or(stream_error) {
        return Err(e);
    }
    let totals = totals?;
    let received: u64 = totals.bytes.iter().sum();
    let secs = totals.last_ns as f64 / 1e9;
    // Finishing before the client can see the totals: its next test (a shell loop's next
    // run) may connect the moment they arrive, and must wait rather than be refused.
    slot.finishing();
    ctl.send(&ControlMsg::Done(ReceiverDone {
        bytes: totals.bytes,
        elapsed_us: totals.last_ns / 1000,
        path,
        cpu: Some(cpu),
        kernel: kernel_mark.report(),
    }))?;
    log!(
        cfg.quiet,
        "pinperf: test from {peer}: done, received {received} bytes in {secs:.3} s ({:.3} Mb/s)",
        crate::units::mbps(received, secs)
    );
    // The client says Bye once it has everything; don't hold the server long for it.
    let _ = ctl.poll(timeouts::GOODBYE);
    Ok(())
}

/// What the server's reporter found once every stream ended.
#[derive(Debug, Clone)]
struct ReceiverTotals {
    bytes: Vec<u64>,
    last_ns: u64,
}

/// The server's `reporter` thread: cuts receiver records into intervals and sends each as
/// a `Row` the moment every stream has passed its end.
fn run_receiver_reporter(
    rx: Receiver<Batch>,
    free: Sender<Batch>,
    mut cutter: IntervalCutter,
    control: Arc<Control>,
) -> Result<ReceiverTotals> {
    let send_ready = |cutter: &mut IntervalCutter| -> Result<()> {
        while let Some(iv) = cutter.pop_ready() {
            control.send(&ControlMsg::Row(ReceiverRow {
                index: iv.index,
                begin_us: iv.begin_ns / 1000,
                end_us: iv.end_ns / 1000,
                bytes: iv.streams.iter().map(|s| s.bytes).collect(),
            }))?;
        }
        Ok(())
    };
    for batch in rx {
        cutter.add(&batch);
        let _ = free.try_send(batch);
        send_ready(&mut cutter)?;
    }
    // Every stream thread is gone: whatever is left closes now.
    cutter.finish();
    send_ready(&mut cutter)?;
    Ok(ReceiverTotals {
        bytes: cutter.totals().to_vec(),
        last_ns: cutter.last_record_ns(),
    })
}

fn unexpected(peer: SocketAddr, expected: &str, got: &ControlMsg) -> Error {
    Error::Protocol {
        peer,
        what: format!("expected {expected}, got {}", got.kind()),
    }
}

/// Accepts the test's `n` data connections (and `n` echo connections with `echo`), each
/// opening with the test's cookie, a stream id and its kind; anything else is closed. All must arrive within [`timeouts::HANDSHAKE`].
fn accept_streams(
    listener: &TcpListener,
    peer: SocketAddr,
    cookie: u64,
    n: usize,
    echo: bool,
    quiet: bool,
) -> Result<Vec<StreamSocks>> {
    socket2::SockRef::from(listener)
        .set_read_timeout(Some(Duration::from_millis(200)))
        .op(|| "set accept timeout".into())?;
    let deadline = Instant::now() + timeouts::HANDSHAKE;
    let mut socks: Vec<(Option<TcpStream>, Option<TcpStream>)> =
        (0..n).map(|_| (None, None)).collect();
    let mut arrived = 0;
    let expected = if echo { 2 * n } else { n };
    while arrived < expected {
        if Instant::now() >= deadline {
            return Err(Error::Test(format!(
                "only {arrived} of {expected} data and echo connections from {peer} arrived within {} s",
                timeouts::HANDSHAKE.as_secs()
            )));
        }
        let (mut sock, from) = match listener.accept() {
            Ok(pair) => pair,
            Err(e)
                if crate::stream::is_timeout(&e) || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                continue;
            }
            Err(e) => return Err(Error::io("accept data connection", e)),
        };
        if from.ip() != peer.ip() {
            log!(
                quiet,
                "pinperf: data connection from {from} ignored: the test belongs to {peer}"
            );
            continue;
        }
        let _ = sock.set_read_timeout(Some(timeouts::HANDSHAKE));
        let mut hello = [0u8; DataHello::LEN];
        if sock.read_exact(&mut hello).is_err() {
            continue;
        }
        let slot = DataHello::from_bytes(hello)
            .filter(|h| h.cookie == cookie && (echo || !h.echo))
            .and_then(|h| {
                let pair = socks.get_mut(h.stream as usize)?;
                Some(if h.echo { &mut pair.1 } else { &mut pair.0 })
            });
        match slot {
            Some(slot @ None) => {
                *slot = Some(sock);
                arrived += 1;
            }
            _ => log!(
                quiet,
                "pinperf: data connection from {from} ignored: wrong test cookie or stream id"
            ),
        }
    }
    Ok(socks
        .into_iter()
        .filter_map(|(data, echo)| data.map(|data| StreamSocks { data, echo }))
        .collect())
}
