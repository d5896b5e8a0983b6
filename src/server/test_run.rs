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
use crate::data::stream::{Batch, spawn_named};
use crate::error::{Error, IoContext, Result};
use crate::os::cpu::CpuMark;
use crate::os::net;
use crate::report::interval::IntervalCutter;
use crate::timeouts;
use crate::wire::{Accept, Control, ControlMsg, ReceiverDone};

/// Refuses the client's test; the error, logged by the server, says so in its words.
pub(super) fn refuse(ctl: &Control, slot: &Slot, reason: String) -> Error {
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
    let peer = ctl.peer;
    let Admitted {
        params,
        plan,
        local,
        cookie,
    } = test;
    let n = params.streams as usize;
    // TCP: the control port's streams or a data listener's; UDP: a socket per stream, on
    // the control port's number without --data-port.
    let (data, window) = if params.udp {
        // A socket option the host refuses (-S, -w) is a refusal naming the flag, as TCP's.
        let one_port = cfg.data_port.is_none().then_some(local.port());
        let bound = crate::wire::udp_rendezvous::bind(
            local.ip(),
            one_port,
            &params,
            cfg.limits.max_window_bytes,
        )
        .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        let window = bound.window.clone();
        (Data::Udp(bound), window)
    } else if let Some(rx) = on_control_port {
        // The grant as a listener with the window would make it, and -C/-S/-M/-N tried on
        // it: refused now, not on a stream.
        let (probe, window) = net::listener_socket(
            local,
            local.is_ipv6(),
            params.window_bytes,
            params.force_window,
        )?;
        net::SocketOpts::of(&params)
            .apply(&probe)
            .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        (Data::ControlPort(rx), window)
    } else {
        let mut data_addr = local;
        data_addr.set_port(cfg.data_port.unwrap_or(0));
        let (listener, window) = net::listen(
            data_addr,
            data_addr.is_ipv6(),
            params.window_bytes,
            params.force_window,
        )
        .map_err(|e| match cfg.data_port {
            Some(port) if port != 0 => data_port_taken(port, e),
            _ => e,
        })?;
        // Set on the listener before Accept (accepted sockets inherit them), so an unknown
        // congestion control is a clean refusal, not a broken test.
        net::SocketOpts::of(&params)
            .apply(&socket2::SockRef::from(&listener))
            .map_err(|e| refuse(ctl, slot, e.to_string()))?;
        (Data::Tcp(listener), window)
    };
    let (data_port, udp_ports) = match &data {
        Data::Tcp(l) => (
            l.local_addr().op(|| "read data port".into())?.port(),
            Vec::new(),
        ),
        Data::ControlPort(_) => (local.port(), Vec::new()),
        Data::Udp(bound) => (0, bound.ports.clone()),
    };
    let started = format!("pinperf: test from {peer}: {}", params.described());
    log!(cfg.quiet, "{started}");
    // `--get-server-output`: this server's own lines about the test, for the client.
    let mut told = params.get_server_output.then(|| vec![started]);
    ctl.send(&ControlMsg::Accept(Accept {
        data_port,
        udp_ports,
        cookie,
        window,
        pin_plan: plan.clone(),
        host: crate::os::sys::host_mark(cookie),
        host_name: crate::os::sys::hostname(),
    }))?;
    // The control connection's RTT: how long the streams may take to arrive, and how
    // long a UDP receiver listens past the senders' end.
    let rtt = net::rtt(&ctl.socket());
    let (mut socks, path) = match data {
        Data::Tcp(listener) => {
            let from = Arrivals::Listener(&listener);
            let socks = accept_streams(from, ctl, ctl_fd, cookie, &params, cfg.quiet)
                .map_err(Error::abandoned)?;
            let path = net::path_info(&socks[0].data);
            (Socks::Tcp(socks), path)
        }
        Data::ControlPort(rx) => {
            let from = Arrivals::ControlPort(rx);
            let socks = accept_streams(from, ctl, ctl_fd, cookie, &params, cfg.quiet)
                .map_err(Error::abandoned)?;
            // What a data listener's sockets would have inherited.
            let opts = net::SocketOpts::of(&params);
            for s in &socks {
                let data = socket2::SockRef::from(&s.data);
                net::apply_window(&data, params.window_bytes, params.force_window)?;
                opts.apply(&data)?;
                if let Some(echo) = &s.echo {
                    opts.echo().apply(&socket2::SockRef::from(echo))?;
                }
            }
            let path = net::path_info(&socks[0].data);
            (Socks::Tcp(socks), path)
        }
        Data::Udp(bound) => {
            let cap = cfg.limits.max_window_bytes;
            let socks = crate::wire::udp_rendezvous::await_hellos(
                bound,
                ctl,
                ctl_fd,
                (cookie, &params),
                (rtt, cap),
            )
            .map_err(Error::abandoned)?;
            (Socks::Udp(socks), net::path_info(&ctl.socket()))
        }
    };

    // Each direction: this end's threads (receivers where the client sends, senders where
    // it receives) and a reporter streaming their intervals to the client.
    let mut ends = Ends::default();
    let mut reporters = Vec::new();
    let mut arrived = Vec::new();
    let first_byte = crate::os::net::min_rtt(&ctl.socket());
    let sockets = socks.duplicates();
    for (k, &reverse) in params.direction().reversed().iter().enumerate() {
        let these = socks.take(n);
        let plan = PinPlan(plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, (rx, free)) = Threads::spawn(
            reverse,
            crate::choices::Engine::Threads,
            these,
            &plan,
            &params,
            timeouts::udp_settle(rtt),
        )?;
        ends.0.push(threads);
        // Receivers here: the client's first byte leaves when it hears Start, sent as
        // this end's clock starts, and arrives a round trip later.
        let delay = if reverse { Duration::ZERO } else { first_byte };
        let cutter = IntervalCutter::for_test(n, &params).arriving_after(delay);
        let ctl2 = Arc::clone(ctl);
        let udp = params.udp;
        let tell = params.get_server_output;
        let counted = Arrived::new(n);
        arrived.push((reverse, counted.clone()));
        reporters.push(spawn_named("reporter".into(), move || {
            run_reporter(rx, free, cutter, (reverse, udp, tell), ctl2, counted)
        })?);
    }

    let cpu_mark = CpuMark::now();
    let mut kernel_mark = crate::os::kstat::KernelMark::now();
    let t0 = Instant::now();
    let mut bounds = Bounds::new(t0, &params, rtt, cfg.limits.max_rate_bps, sockets);
    ends.start(t0);
    slot.running();
    ctl.send(&ControlMsg::Start)?;

    // Watch the control connection and the streams until every stream has ended.
    let mut failure: Option<Error> = None;
    loop {
        kernel_mark.sample();
        // A failure is looked for once more after the streams ended: reset by a client
        // that failed, they all end at once.
        let ended = reporters.iter().all(|r| r.is_finished());
        if let Some(f) = ends.failure() {
            let ours = Error::Test(format!(
                "{} ({:.2} s into the test, on the server)",
                f.error,
                f.at.saturating_duration_since(t0).as_secs_f64()
            ));
            // A reset here may be the client's failure seen from here: its word leads.
            failure = Some(ctl.with_their_word(ours, f.peer_closed, |_| false));
            break;
        }
        if ended {
            break;
        }
        // Looked at once the streams are known not to have ended: a test that ended
        // during the last poll is never cut.
        let received: Vec<u64> = arrived
            .iter()
            .filter(|(sends, _)| !sends)
            .flat_map(|(_, a)| a.bytes())
            .collect();
        let moved = arrived.iter().flat_map(|(_, a)| a.bytes()).sum();
        if let Some(cut) = bounds
            .check(Instant::now(), &received, moved)
            .filter(|_| cfg.public())
        {
            failure = Some(cut);
            break;
        }
        if let Some(stopped) = crate::signals::server_stopped(cfg.signals, t0) {
            failure = Some(stopped);
            break;
        }
        match ctl.poll(timeouts::POLL) {
            Ok(None) => {}
            Ok(Some(ControlMsg::Bye)) => {}
            Ok(Some(other)) => {
                failure = Some(other.unexpected(peer, "nothing during the test"));
                break;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_some() {
        // Over for its client (stopped, gone, or broke the protocol): the next client
        // waits out the streams' end for the slot instead of hearing "busy, about 7 s
        // left" (a client right after a killed -u -b 100M one).
        slot.finishing();
        ends.abort();
    }
    let (thread_cpu, send_path, stream_error) = ends.join(params.zerocopy);
    let cpu = cpu_mark.report(thread_cpu, send_path);
    let mut done = ReceiverDone {
        bytes: Vec::new(),
        sent: Vec::new(),
        elapsed_us: 0,
        path,
        cpu: Some(cpu),
        kernel: None,
        server_output: None,
        retransmits: Vec::new(),
    };
    let mut reporter_error = None;
    for (reporter, &reverse) in reporters.into_iter().zip(params.direction().reversed()) {
        match reporter
            .join()
            .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())))
        {
            Ok(totals) => {
                if let Some(lines) = told.as_mut() {
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
    done.kernel = kernel_mark.report();
    let received: u64 = done.bytes.iter().sum();
    let sent: u64 = done.sent.iter().sum();
    // The test's span, as the client's totals take it: to the later of the planned end
    // and the last byte (a sparse UDP test's last datagram may come at 0.7 ms).
    let secs = (done.elapsed_us as f64 / 1e6).max(params.run_time().as_secs_f64());
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
    done.server_output = told.map(|mut lines| {
        lines.push(ended.clone());
        lines.join("\n")
    });
    // Finishing before the client can see the totals: its next test (a shell loop's next
    // run) may connect the moment they arrive, and must wait rather than be refused.
    slot.finishing();
    ctl.send(&ControlMsg::Done(Box::new(done)))?;
    if !cfg.quiet {
        serverlog::test_end(peer, received, sent, secs, || ended);
    }
    // The client says Bye once it has everything; don't hold the server long for it.
    let _ = ctl.poll(timeouts::GOODBYE);
    Ok(())
}

/// Where a test's data arrives: a TCP listener, or a UDP socket per stream (and its port).
pub(super) enum Data<'a> {
    /// The test's own data listener (`--data-port`, or 0: an ephemeral port).
    Tcp(TcpListener),
    /// The control port's: the acceptor passes the streams on.
    ControlPort(&'a Receiver<Arrival>),
    Udp(crate::wire::udp_rendezvous::Bound),
}

/// What a server reporter found once every stream of its direction ended.
#[derive(Debug, Clone)]
pub(super) struct ReceiverTotals {
    bytes: Vec<u64>,
    last_ns: u64,
    /// `--get-server-output`: a line per stream per interval, as this end counted it.
    lines: Vec<String>,
}

/// A server `reporter` thread: cuts one direction's records into intervals and sends each
/// the moment every stream has passed its end: a receiver's as a `Row` (the client's
/// report joins it with its senders' intervals), a sender's as a `SenderInterval` (`-R`,
/// `--bidir`: joined there with the client's receiver rows).
pub(super) fn run_reporter(
    rx: Receiver<Batch>,
    free: Sender<Batch>,
    mut cutter: IntervalCutter,
    (sends, udp, tell): (bool, bool, bool),
    control: Arc<Control>,
    arrived: Arrived,
) -> Result<ReceiverTotals> {
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
    for batch in rx {
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
