//! An admitted pinperf test: data listener, streams, reporters streaming intervals, the
//! end, and the totals.

use std::net::TcpListener;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::bounds::{Arrived, Bounds};
use super::data_port_taken;
use super::handshake::Admitted;
use super::serverlog;
use super::shared::Slot;
use super::streams::{Arrival, Arrivals, accept_streams};
use crate::config::ServerConfig;
use crate::data::ends::{Ends, Socks, Threads};
use crate::data::pin::PinPlan;
use crate::data::stream::{Batch, parked, spawn_named};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::CpuMark;
use crate::os::net;
use crate::os::netinfo::{PathInfo, WindowGrant};
use crate::report::interval::IntervalCutter;
use crate::timeouts;
use crate::wire::{Accept, Control, ControlMsg, ReceiverDone, udp_rendezvous};

/// Refuses the client's test; the error, logged by the server, says so in its words.
fn refuse(ctl: &Control, slot: &Slot, reason: String) -> Error {
    slot.finishing();
    let _ = ctl.send(&ControlMsg::Refuse {
        reason: reason.clone(),
    });
    Error::Test(format!("refused the client's test: {reason}"))
}

/// The admitted test: data listener, streams, reporter, the end and the totals.
pub(super) fn run_test(
    ctl: &Arc<Control>,
    ctl_fd: RawFd,
    test: Admitted,
    cfg: &ServerConfig,
    slot: &Slot,
    on_control_port: Option<&Receiver<Arrival>>,
) -> Result<()> {
    let mut run = TestRun {
        // The control connection's RTT: how long the streams may take to arrive, and how
        // long a UDP receiver listens past the senders' end.
        rtt: net::rtt(&ctl.socket()),
        ctl,
        ctl_fd,
        cfg,
        slot,
        test,
        told: None,
    };
    let data = run.data(on_control_port)?;
    let (socks, path) = run.streams(data)?;
    let mut running = run.spawn(socks)?;
    let mut clock = run.start(&mut running)?;
    let failure = run.watch(&running, &mut clock);
    let done = run.join(running, failure, path, clock)?;
    run.finish(done)
}

/// An admitted test as it runs, each method a phase: where its data arrives, its streams,
/// their threads, the watch while they run, and the end.
struct TestRun<'a> {
    ctl: &'a Arc<Control>,
    /// Watched while the data connections arrive; valid while `ctl` owns the socket.
    ctl_fd: RawFd,
    cfg: &'a ServerConfig,
    slot: &'a Slot,
    test: Admitted,
    rtt: Duration,
    /// `--get-server-output`: this server's own lines about the test, for the client.
    told: Option<Vec<String>>,
}

/// The test's threads once spawned: each direction's, their reporters (spawned once `Start`
/// went out), and the bytes each reporter counted (with whether this end sends them).
struct Running {
    ends: Ends,
    unstarted: Vec<Reporter>,
    reporters: Vec<std::thread::JoinHandle<Result<ReceiverTotals>>>,
    arrived: Vec<(bool, Arrived)>,
    sockets: Vec<std::os::fd::OwnedFd>,
}

/// What the test measures from its start: its clock, the CPU and kernel counters and the
/// server's bounds.
struct Clock {
    t0: Instant,
    cpu: CpuMark,
    kernel: crate::os::kstat::KernelMark,
    bounds: Bounds,
}

impl TestRun<'_> {
    /// Where the data arrives, made and told to the client in `Accept`. TCP: the control
    /// port's streams or a data listener's; UDP: a socket per stream, on the control
    /// port's number without --data-port.
    fn data<'r>(&mut self, on_control_port: Option<&'r Receiver<Arrival>>) -> Result<Data<'r>> {
        let (params, local, cfg) = (&self.test.params, self.test.local, self.cfg);
        let refuse = |e: Error| refuse(self.ctl, self.slot, e.to_string());
        let (data, window) = if params.udp {
            // A socket option the host refuses (-S, -w) is a refusal naming the flag, as TCP's.
            let one_port = cfg.data_port.is_none().then_some(local.port());
            let cap = cfg.limits.max_window_bytes;
            let bound = udp_rendezvous::bind(local.ip(), one_port, params, cap).map_err(refuse)?;
            let window = bound.window.clone();
            (Data::Udp(bound), window)
        } else if let Some(rx) = on_control_port {
            // The grant as a listener with the window would make it, and -C/-S/-M/-N tried on
            // it: refused now, not on a stream.
            let (window, force) = (params.window_bytes, params.force_window);
            let (probe, window) = net::listener_socket(local, local.is_ipv6(), window, force)?;
            net::SocketOpts::of(params).apply(&probe).map_err(refuse)?;
            (Data::ControlPort(rx), window)
        } else {
            let mut data_addr = local;
            data_addr.set_port(cfg.data_port.unwrap_or(0));
            let (window, force) = (params.window_bytes, params.force_window);
            let (listener, window) = net::listen(data_addr, data_addr.is_ipv6(), window, force)
                .map_err(|e| match cfg.data_port {
                    Some(port) if port != 0 => data_port_taken(port, e),
                    _ => e,
                })?;
            // Set on the listener before Accept (accepted sockets inherit them), so an unknown
            // congestion control is a clean refusal, not a broken test.
            let opts = net::SocketOpts {
                user_timeout: cfg.sockets.user_timeout,
                ..net::SocketOpts::of(params)
            };
            opts.apply(&socket2::SockRef::from(&listener))
                .map_err(refuse)?;
            (Data::Tcp(listener), window)
        };
        self.accept(&data, window)?;
        Ok(data)
    }

    /// Logs the test's start and tells the client where its data goes.
    fn accept(&mut self, data: &Data, window: WindowGrant) -> Result<()> {
        let (data_port, udp_ports) = match data {
            Data::Tcp(l) => (
                l.local_addr().op(|| "read data port".into())?.port(),
                vec![],
            ),
            Data::ControlPort(_) => (self.test.local.port(), Vec::new()),
            Data::Udp(bound) => (0, bound.ports.clone()),
        };
        let params = &self.test.params;
        let started = format!(
            "pinperf: test from {}: {}",
            self.ctl.peer,
            params.described()
        );
        log!(self.cfg.quiet, "{started}");
        self.told = params.get_server_output.then(|| vec![started]);
        let cookie = self.test.cookie;
        self.ctl.send(&ControlMsg::Accept(Accept {
            data_port,
            udp_ports,
            cookie,
            window,
            pin_plan: self.test.plan.clone(),
            host: crate::os::sys::host_mark(cookie),
            host_name: crate::os::sys::hostname(),
            realtime: params.realtime_at_server(),
        }))
    }

    /// The test's data (and echo) connections or UDP sockets, once all arrived, and the
    /// path they take.
    fn streams(&self, data: Data) -> Result<(Socks, PathInfo)> {
        let (ctl, params, cookie) = (self.ctl, &self.test.params, self.test.cookie);
        let gather = |from| {
            accept_streams(from, ctl, self.ctl_fd, cookie, params, self.cfg.quiet)
                .map_err(Error::abandoned)
        };
        let socks = match data {
            Data::Tcp(listener) => gather(Arrivals::Listener(&listener))?,
            Data::ControlPort(rx) => {
                let socks = gather(Arrivals::ControlPort(rx))?;
                // What a data listener's sockets would have inherited.
                let opts = net::SocketOpts::of(params);
                for s in &socks {
                    let data = socket2::SockRef::from(&s.data);
                    net::apply_window(&data, params.window_bytes, params.force_window)?;
                    opts.apply(&data)?;
                    if let Some(echo) = &s.echo {
                        opts.echo().apply(&socket2::SockRef::from(echo))?;
                    }
                }
                socks
            }
            Data::Udp(bound) => {
                let limits = (self.rtt, self.cfg.limits.max_window_bytes);
                let fd = self.ctl_fd;
                let socks = udp_rendezvous::await_hellos(bound, ctl, fd, (cookie, params), limits)
                    .map_err(Error::abandoned)?;
                return Ok((Socks::Udp(socks), net::path_info(&ctl.socket())));
            }
        };
        let path = net::path_info(&socks[0].data);
        Ok((Socks::Tcp(socks), path))
    }

    /// Each direction: this end's threads (receivers where the client sends, senders where
    /// it receives) and a reporter streaming their intervals to the client.
    fn spawn(&self, mut socks: Socks) -> Result<Running> {
        let (params, n) = (&self.test.params, usize::from(self.test.params.streams));
        let sockets = socks.duplicates();
        let mut running = Running {
            ends: Ends::default(),
            unstarted: Vec::new(),
            reporters: Vec::new(),
            arrived: Vec::new(),
            sockets,
        };
        let first_byte = crate::os::net::min_rtt(&self.ctl.socket());
        // This server's own --rcv-timeout, for its receivers.
        let params = &crate::wire::params::TestParams {
            rcv_timeout: self.cfg.rcv_timeout,
            ..params.clone()
        };
        for (k, &reverse) in params.direction().reversed().iter().enumerate() {
            let these = socks.take(n);
            let plan = PinPlan(self.test.plan.0[k * n..(k + 1) * n].to_vec());
            let engine = crate::choices::Engine::Threads;
            let settle = timeouts::udp_settle(self.rtt);
            let (threads, (rx, free)) =
                Threads::spawn(reverse, engine, these, &plan, params, settle)?;
            running.ends.0.push(threads);
            // Receivers here: the client's first byte leaves when it hears Start, sent as
            // this end's clock starts, and arrives a round trip later.
            let delay = if reverse { Duration::ZERO } else { first_byte };
            let cutter = IntervalCutter::for_test(n, params).arriving_after(delay);
            let arrived = Arrived::new(n);
            running.arrived.push((reverse, arrived.clone()));
            running.unstarted.push(Reporter {
                rx,
                free,
                cutter,
                sends: reverse,
                udp: params.udp,
                tell: params.get_server_output,
                arrived,
            });
        }
        Ok(running)
    }

    /// Starts the streams' clocks and tells the client to start.
    fn start(&self, running: &mut Running) -> Result<Clock> {
        let cpu = CpuMark::now();
        let kernel = crate::os::kstat::KernelMark::now();
        let t0 = Instant::now();
        let (params, max_rate) = (&self.test.params, self.cfg.limits.max_rate_bps);
        let sockets = std::mem::take(&mut running.sockets);
        let bounds = Bounds::new(t0, params, self.rtt, max_rate, sockets)
            .with_total_rate(self.cfg.limits.total_rate);
        running.ends.start(t0);
        self.slot.running();
        // Reporters run once Start is out: one already running when every stream failed
        // before the start would end at once and send its rows ahead of Start.
        let started = self.ctl.send(&ControlMsg::Start).and_then(|()| {
            for r in std::mem::take(&mut running.unstarted) {
                let ctl = Arc::clone(self.ctl);
                let reporter = spawn_named("reporter".into(), move || run_reporter(r, ctl))?;
                running.reporters.push(reporter);
            }
            Ok(())
        });
        if let Err(e) = started {
            // Nothing of the test outlives it: a stream whose reporter never ran finds its
            // channel closed, the rest stop at their next wake-up.
            running.unstarted.clear();
            running.ends.abort();
            let _ = std::mem::take(&mut running.ends).join(self.test.params.zerocopy);
            for r in running.reporters.drain(..) {
                let _ = r.join();
            }
            return Err(e);
        }
        Ok(Clock {
            t0,
            cpu,
            kernel,
            bounds,
        })
    }

    /// Watches the control connection and the streams until every stream has ended: the
    /// failure that ended the test early, if one did.
    fn watch(&self, running: &Running, clock: &mut Clock) -> Option<Error> {
        let (ctl, t0) = (self.ctl, clock.t0);
        loop {
            clock.kernel.sample();
            // A failure is looked for once more after the streams ended: reset by a client
            // that failed, they all end at once.
            let ended = running.reporters.iter().all(|r| r.is_finished());
            if let Some(f) = running.ends.failure() {
                let ours = Error::Test(format!(
                    "{} ({:.2} s into the test, on the server)",
                    f.error,
                    f.at.saturating_duration_since(t0).as_secs_f64()
                ));
                // A reset here may be the client's failure seen from here: its word leads.
                return Some(ctl.with_their_word(ours, f.peer_closed, |_| false));
            }
            if ended {
                return None;
            }
            // Looked at once the streams are known not to have ended: a test that ended
            // during the last poll is never cut.
            if let Some(cut) = self.cut(running, &mut clock.bounds) {
                return Some(cut);
            }
            if let Some(stopped) = crate::signals::server_stopped(self.cfg.signals, t0) {
                return Some(stopped);
            }
            match ctl.poll(timeouts::POLL) {
                Ok(None | Some(ControlMsg::Bye)) => {}
                Ok(Some(other)) => {
                    return Some(other.unexpected(ctl.peer, "nothing during the test"));
                }
                Err(e) => return Some(e),
            }
        }
    }

    /// Why a public server cuts the test now ([`Bounds::check`]), if it does.
    fn cut(&self, running: &Running, bounds: &mut Bounds) -> Option<Error> {
        let arrived = &running.arrived;
        let received: Vec<u64> = arrived
            .iter()
            .filter(|(sends, _)| !sends)
            .flat_map(|(_, a)| a.bytes())
            .collect();
        let moved = arrived.iter().flat_map(|(_, a)| a.bytes()).sum();
        bounds
            .check(Instant::now(), &received, moved)
            .filter(|_| self.cfg.public())
    }

    /// Joins the threads: the totals for `Done`, or the error that ended the test.
    fn join(
        &mut self,
        running: Running,
        failure: Option<Error>,
        path: PathInfo,
        mut clock: Clock,
    ) -> Result<ReceiverDone> {
        let params = &self.test.params;
        if failure.is_some() {
            // Over for its client (stopped, gone, or broke the protocol): the next client
            // waits out the streams' end for the slot instead of hearing "busy, about 7 s
            // left" (a client right after a killed -u -b 100M one).
            self.slot.finishing();
            running.ends.abort();
        }
        let (thread_cpu, send_path, stream_error) = running.ends.join(params.zerocopy);
        let mut done = ReceiverDone {
            bytes: Vec::new(),
            sent: Vec::new(),
            elapsed_us: 0,
            path,
            cpu: Some(clock.cpu.report(thread_cpu, send_path)),
            kernel: None,
            server_output: None,
            retransmits: Vec::new(),
        };
        let mut reporter_error = None;
        let directions = params.direction().reversed();
        for (reporter, &reverse) in running.reporters.into_iter().zip(directions) {
            let joined = reporter.join();
            match joined.unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into()))) {
                Ok(totals) => {
                    if let Some(lines) = self.told.as_mut() {
                        lines.extend(totals.lines);
                    }
                    match reverse {
                        true => done.sent = totals.bytes,
                        false => {
                            done.bytes = totals.bytes;
                            done.elapsed_us = totals.last_ns / 1000;
                        }
                    }
                }
                Err(e) => {
                    reporter_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure.or(stream_error).or(reporter_error) {
            return Err(e);
        }
        done.kernel = clock.kernel.report();
        Ok(done)
    }

    /// The totals to the client and the log, then the client's goodbye.
    fn finish(self, mut done: ReceiverDone) -> Result<()> {
        let (params, peer, ctl) = (&self.test.params, self.ctl.peer, self.ctl);
        let received: u64 = done.bytes.iter().sum();
        let sent: u64 = done.sent.iter().sum();
        // The test's span, as the client's totals take it: to the later of the planned end
        // and the last byte (a sparse UDP test's last datagram may come at 0.7 ms); a
        // budget's (-n, -k) ends with its last byte.
        let planned = match params.budget() {
            Some(_) => 0.0,
            None => params.run_time().as_secs_f64(),
        };
        let secs = (done.elapsed_us as f64 / 1e6).max(planned);
        let mut what = Vec::new();
        if params.direction() != crate::wire::params::Direction::Reverse {
            let omit = match params.omit().is_zero() {
                true => String::new(),
                false => format!(", -O's {} s included", params.omit().as_secs_f64()),
            };
            what.push(format!(
                "received {received} bytes in {secs:.3} s ({:.3} Mb/s{omit})",
                crate::units::mbps(received, secs)
            ));
        }
        if params.direction() != crate::wire::params::Direction::Forward {
            what.push(format!("sent {sent} bytes"));
        }
        let ended = format!("pinperf: test from {peer}: done, {}", what.join(", "));
        done.server_output = self.told.map(|mut lines| {
            lines.push(ended.clone());
            lines.join("\n")
        });
        // Finishing before the client can see the totals: its next test (a shell loop's next
        // run) may connect the moment they arrive, and must wait rather than be refused.
        self.slot.finishing();
        ctl.send(&ControlMsg::Done(Box::new(done)))?;
        if !self.cfg.quiet {
            serverlog::test_end(peer, received, sent, secs, || ended);
        }
        // The client says Bye once it has everything; don't hold the server long for it.
        let _ = ctl.poll(timeouts::GOODBYE);
        Ok(())
    }
}

/// Where a test's data arrives: a TCP listener, or a UDP socket per stream (and its port).
enum Data<'a> {
    /// The test's own data listener (`--data-port`, or 0: an ephemeral port).
    Tcp(TcpListener),
    /// The control port's: the acceptor passes the streams on.
    ControlPort(&'a Receiver<Arrival>),
    Udp(udp_rendezvous::Bound),
}

/// What a server reporter found once every stream of its direction ended.
#[derive(Debug, Clone)]
struct ReceiverTotals {
    bytes: Vec<u64>,
    last_ns: u64,
    /// `--get-server-output`: a line per stream per interval, as this end counted it.
    lines: Vec<String>,
}

/// One direction's reporter, made with its streams and run once the test started.
struct Reporter {
    rx: Receiver<Batch>,
    free: Sender<Batch>,
    cutter: IntervalCutter,
    /// This end sends the direction's data (its intervals go as `SenderInterval`s).
    sends: bool,
    udp: bool,
    /// `--get-server-output`: keep a line per stream per interval.
    tell: bool,
    arrived: Arrived,
}

/// A server `reporter` thread: cuts one direction's records into intervals and sends each
/// the moment every stream has passed its end: a receiver's as a `Row` (the client's
/// report joins it with its senders' intervals), a sender's as a `SenderInterval` (`-R`,
/// `--bidir`: joined there with the client's receiver rows).
fn run_reporter(reporter: Reporter, control: Arc<Control>) -> Result<ReceiverTotals> {
    let Reporter {
        rx,
        free,
        mut cutter,
        sends,
        udp,
        tell,
        arrived,
    } = reporter;
    let mut lines = Vec::new();
    let mut send_ready = |cutter: &mut IntervalCutter| -> Result<()> {
        while let Some(iv) = cutter.pop_ready() {
            if tell {
                let (b, e) = (iv.begin_ns as f64 / 1e9, iv.end_ns as f64 / 1e9);
                for (id, s) in iv.streams.iter().enumerate() {
                    lines.push(format!(
                        "stream-{id} {b:.3}-{e:.3} s: {} {} bytes, {:.3} Mb/s",
                        if sends { "sent" } else { "received" },
                        s.bytes,
                        crate::units::mbps(s.bytes, (e - b).max(1e-9))
                    ));
                }
            }
            control.send(&match sends {
                true => ControlMsg::SenderInterval(iv),
                false => ControlMsg::Row(crate::report::receiver_row(&iv, udp)),
            })?;
        }
        Ok(())
    };
    for batch in parked(&rx) {
        cutter.add(&batch);
        let stream = usize::from(batch.stream);
        if let Some(&total) = cutter.totals().get(stream) {
            arrived.set(stream, total);
        }
        let _ = free.try_send(batch);
        send_ready(&mut cutter)?;
    }
    // Every stream thread is gone: whatever is left closes now.
    cutter.finish();
    send_ready(&mut cutter)?;
    Ok(ReceiverTotals {
        bytes: cutter.totals().to_vec(),
        last_ns: cutter.last_record_ns(),
        lines,
    })
}
