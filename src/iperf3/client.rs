//! pinperf's client against an iperf3 server (`--peer iperf3`, or detected): iperf3's
//! control protocol on the control connection, pinperf's pinned `stream-N` threads and
//! `reporter` on this end. An iperf3 server sends nothing during the test, so the live
//! rows are this end's counts (its senders' or receivers'); the iperf3 end's byte counts
//! and CPU arrive with its results at the end, and the summary's totals are reconciled
//! against them. The header says so.
//!
//! The end of the test: when the client sends, its senders write for `-O` + `-t`, shut
//! down their sending side, and `TEST_END` goes out once the server's kernel has
//! acknowledged every byte and the FIN (plus a short grace for the iperf3 process to read
//! them): an iperf3 server counts what it has read when it takes `TEST_END` and closes
//! its streams then. When the server sends (`-R`), this end's receivers read to the EOF
//! the server's close gives, so both count the same bytes.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::{
    Ctl, DISPLAY_RESULTS, EXCHANGE_RESULTS, IPERF_DONE, Params, Results, StreamResult, state_name,
    stream_id,
};
use crate::config::ClientConfig;
use crate::cpu::CpuMark;
use crate::ends::{Ends, Socks, Threads};
use crate::error::{Error, IoContext, Result};
use crate::net;
use crate::params::Direction;
use crate::pin::PinPlan;
use crate::protocol::{ReceiverDone, SOFTWARE};
use crate::report::interval::IntervalCutter;
use crate::report::model::{Header, Summary};
use crate::report::{self, RemoteEvent};
use crate::stream::{Batch, StreamSocks, spawn_named};
use crate::timeouts;

/// What the remote end is said to be in the header: plain about which figures are whose.
pub const REMOTE_WORDS: &str = "iperf3 server; live rows are this end's counts, the iperf3 \
     end's bytes and CPU arrive with its results at the end";

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
    let peer = stream.peer_addr().op(|| "read server address".into())?;
    let local = stream.local_addr().op(|| "read local address".into())?;
    let mut ctl = Ctl { sock: stream, peer };
    // The cookie: random, after whatever was already sent (detection sends pinperf's
    // 8-byte preamble first; iperf3 compares cookies as C strings, any 36 bytes do).
    let mut cookie = super::new_cookie()?;
    cookie[..sent.len()].copy_from_slice(sent);
    ctl.write(&cookie[sent.len()..], "the cookie")?;
    expect(&mut ctl, super::PARAM_EXCHANGE)?;
    ctl.send_json(&Params::from_test(&cfg.test), "the test parameters")?;
    expect(&mut ctl, super::CREATE_STREAMS)?;

    let test = &cfg.test;
    let n = test.streams as usize;
    let opts = net::SocketOpts {
        window: test.window_bytes,
        force_window: test.force_window,
        congestion: test.transport.congestion.clone(),
    };
    let mut socks = Vec::with_capacity(test.threads());
    let mut dups = Vec::new();
    let mut local_window = None;
    for k in 0..test.threads() {
        let (mut data, grant) =
            net::connect(&[peer], cfg.target.bind, &opts, cfg.target.connect_timeout)
                .map_err(|e| Error::Test(format!("stream-{}: {e}", k % n)))?;
        std::io::Write::write_all(&mut data, &cookie)
            .op(|| format!("stream-{}: send the cookie to {peer}", k % n))?;
        local_window.get_or_insert(grant);
        dups.push(data.try_clone().op(|| "duplicate a data socket".into())?);
        socks.push(StreamSocks { data, echo: None });
    }
    let local_window = local_window.unwrap_or_default();
    for w in local_window.shortfalls("local") {
        eprintln!("pinperf: {w}");
    }
    expect(&mut ctl, super::TEST_START)?;

    let header = Header {
        software: SOFTWARE.into(),
        local: local.to_string(),
        remote: peer.to_string(),
        remote_software: REMOTE_WORDS.into(),
        streams: test.streams,
        block_bytes: test.block_bytes(),
        local_window,
        remote_window: Default::default(),
        path: net::path_info(&socks[0].data),
        local_pin: local_plan.clone(),
        remote_pin: PinPlan(Vec::new()),
        placement_note: None,
        duration_s: test.duration().as_secs_f64(),
        omit_s: test.omit().as_secs_f64(),
        interval_s: test.interval().as_secs_f64(),
        echo: false,
        congestion: net::congestion(&socks[0].data).unwrap_or_else(|| "?".into()),
        same_host: peer.ip().is_loopback(),
        same_process: false,
        cpu_intervals: cfg.cpu_intervals,
        engine: cfg.engine,
        direction: test.direction(),
        udp: false,
        rate_bps: test.rate(),
        fq_rate_bps: test.fq_rate_bps,
    };

    // Threads per direction, each direction's batches relayed through a `mirror` thread
    // that cuts them a second time as the remote half of each row.
    let (remote_tx, remote_rx) = crossbeam_channel::unbounded();
    let mut socks = Socks::Tcp(socks);
    let mut ends = Ends::default();
    let mut feeds = Vec::new();
    let mut mirrors = Vec::new();
    for (k, &reverse) in test.direction().reversed().iter().enumerate() {
        let plan = PinPlan(local_plan.0[k * n..(k + 1) * n].to_vec());
        let (threads, (batches, free)) = Threads::spawn(
            !reverse,
            cfg.engine,
            socks.take(n),
            &plan,
            test,
            Duration::ZERO,
        )?;
        ends.0.push(threads);
        let (relay_tx, relay_rx) = crossbeam_channel::bounded(64);
        let cutter = IntervalCutter::for_test(n, test);
        let tx = remote_tx.clone();
        mirrors.push(spawn_named("mirror".into(), move || {
            mirror(batches, relay_tx, cutter, reverse, tx)
        })?);
        feeds.push(report::Feed {
            reverse,
            batches: relay_rx,
            free,
            cutter: IntervalCutter::for_test(n, test),
        });
    }
    let out = out.take().expect("the formatter is handed to one reporter");
    let output = report::Output::default();
    let output2 = output.clone();
    let reporter = spawn_named("reporter".into(), move || {
        report::run_reporter(header, feeds, remote_rx, out, output2)
    })?;

    let result = drive(&mut ctl, &ends, &dups, &cfg, &output);
    let cpu_mark = result.as_ref().ok().map(|(mark, _)| mark);
    if result.is_err() {
        ends.abort();
        // Closing the streams ends threads blocked on the server.
        for d in &dups {
            let _ = d.shutdown(std::net::Shutdown::Both);
        }
    }
    let (thread_cpu, send_path, stream_error) = ends.join(cfg.test.zerocopy);
    let local_cpu = cpu_mark.map(|m| m.report(thread_cpu, send_path));
    let mut local_bytes = Vec::new();
    for m in mirrors {
        if let Ok(Ok(bytes)) = m.join() {
            local_bytes.extend(bytes);
        }
    }
    let outcome = match (result, stream_error) {
        (Err(e), _) | (Ok(_), Some(e)) => Err(e),
        (Ok((_, t0)), None) => finish(&mut ctl, &cfg, local_cpu.as_ref(), &local_bytes, t0),
    };
    if let Some(cpu) = local_cpu {
        let _ = remote_tx.send(RemoteEvent::LocalCpu(cpu));
    }
    match &outcome {
        Ok(done) => {
            let _ = remote_tx.send(RemoteEvent::Done(done.clone()));
        }
        Err(e) => {
            let _ = remote_tx.send(RemoteEvent::Failed(e.to_string()));
        }
    }
    drop(remote_tx);
    let totals = reporter
        .join()
        .unwrap_or_else(|_| Err(Error::Test("reporter thread panicked".into())));
    outcome?;
    if let Some(e) = output.error() {
        return Err(e);
    }
    let totals = totals?;
    reconcile(&totals, &cfg);
    totals
        .summaries
        .into_iter()
        .next()
        .ok_or_else(|| Error::Test("the report's summary is missing".into()))
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
    if t.udp {
        return no("-u", "iperf3 reads its own datagram header, not pinperf's");
    }
    if t.pin
        .as_ref()
        .is_some_and(|p| *p != crate::pin::Affinity::None)
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
    if t.get_server_output {
        return no(
            "--get-server-output",
            "this client does not ask an iperf3 server for its text yet",
        );
    }
    if (t.rate_bps.is_some() || t.fq_rate_bps.is_some()) && t.direction() != Direction::Forward {
        return no(
            "-b/--fq-rate with -R or --bidir",
            "the iperf3 server's senders would pace, and this client does not ask them to",
        );
    }
    Ok(())
}

/// Reads the next state byte; anything but `want` is the server's refusal, error or a
/// protocol error, in words.
fn expect(ctl: &mut Ctl, want: i8) -> Result<()> {
    let peer = ctl.peer;
    match ctl.read_state(STEP)? {
        s if s == want => Ok(()),
        super::ACCESS_DENIED => Err(Error::Refused {
            peer,
            reason: "the iperf3 server is busy running a test (ACCESS_DENIED); try again later"
                .into(),
        }),
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

/// From `TEST_START` to `TEST_END`: starts the threads at `TEST_RUNNING`, watches the
/// control connection, the streams and stop signals, and sends `TEST_END` once the run
/// time is over and (when this end sends) the server's kernel holds every byte.
fn drive(
    ctl: &mut Ctl,
    ends: &Ends,
    dups: &[TcpStream],
    cfg: &ClientConfig,
    output: &report::Output,
) -> Result<(CpuMark, Instant)> {
    expect(ctl, super::TEST_RUNNING)?;
    let cpu = CpuMark::now();
    let t0 = Instant::now();
    ends.start(t0);
    let run_time = cfg.test.run_time();
    let sends: Vec<bool> = cfg
        .test
        .direction()
        .reversed()
        .iter()
        .flat_map(|&r| std::iter::repeat_n(!r, cfg.test.streams as usize))
        .collect();
    let mut drained_at: Option<Instant> = None;
    loop {
        if let Some(f) = ends.failure() {
            return Err(Error::Test(format!(
                "{} ({:.2} s into the test)",
                f.error,
                f.at.saturating_duration_since(t0).as_secs_f64()
            )));
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
        let mut b = [0u8; 1];
        let _ = ctl.sock.set_read_timeout(Some(Duration::from_millis(20)));
        match ctl.sock.peek(&mut b) {
            Ok(0) => {
                return Err(Error::Test(format!(
                    "the iperf3 server {} closed the control connection during the test",
                    ctl.peer
                )));
            }
            Ok(_) => {
                let (s, peer) = (ctl.read_state(STEP)?, ctl.peer);
                return Err(match s {
                    super::SERVER_ERROR => Error::Test(format!(
                        "the iperf3 server {peer} failed: {}",
                        ctl.read_server_error(STEP)?
                    )),
                    other => Error::Test(format!(
                        "the iperf3 server {peer} sent {} during the test",
                        state_name(other)
                    )),
                });
            }
            Err(_) => {}
        }
        if t0.elapsed() < run_time {
            continue;
        }
        // Every sending stream's data and FIN acknowledged (FIN_WAIT2 or later), or
        // the stall limit: then a grace for the server process to read what its kernel
        // holds.
        let acked = dups
            .iter()
            .zip(&sends)
            .all(|(d, &s)| !s || net::tcp_info(d).is_some_and(|i| i.state >= 5 && i.state != 10));
        let late = t0.elapsed() > run_time + timeouts::STALL;
        if acked || late {
            let rtt = dups.iter().map(net::rtt).max().unwrap_or_default();
            let grace = (rtt * 4).max(Duration::from_millis(50));
            let at = *drained_at.get_or_insert_with(Instant::now);
            if at.elapsed() >= grace || late {
                break;
            }
        }
    }
    ctl.send_state(super::TEST_END)?;
    Ok((cpu, t0))
}

/// After `TEST_END` (every local thread joined): the results exchange, `DISPLAY_RESULTS`
/// and `IPERF_DONE`; returns the server's counts as the reporter's remote totals.
fn finish(
    ctl: &mut Ctl,
    cfg: &ClientConfig,
    cpu: Option<&crate::cpu::CpuReport>,
    local: &[u64],
    t0: Instant,
) -> Result<ReceiverDone> {
    expect(ctl, EXCHANGE_RESULTS)?;
    // Our results: what each local stream did (sent bytes for senders, received for
    // receivers), ids in the order the streams were created.
    let n = cfg.test.streams as usize;
    let elapsed = t0
        .elapsed()
        .as_secs_f64()
        .min(cfg.test.run_time().as_secs_f64());
    let streams = (0..cfg.test.threads())
        .map(|k| StreamResult {
            id: stream_id(k),
            bytes: local.get(k).copied().unwrap_or(0),
            retransmits: -1,
            jitter: 0.0,
            errors: 0,
            packets: 0,
            start_time: 0.0,
            end_time: elapsed,
        })
        .collect();
    let ours = Results {
        cpu_util_total: cpu.map_or(0.0, |c| c.host_total),
        cpu_util_user: cpu.map_or(0.0, |c| c.host_user),
        cpu_util_system: cpu.map_or(0.0, |c| c.host_system),
        sender_has_retransmits: 0,
        congestion_used: cfg.test.transport.congestion.clone(),
        streams,
    };
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
        server_output: None,
    };
    let mut seconds: f64 = 0.0;
    for (k, &reverse) in cfg.test.direction().reversed().iter().enumerate() {
        for i in 0..n {
            let id = stream_id(k * n + i);
            let s = theirs.stream(id).ok_or_else(|| Error::Protocol {
                peer: ctl.peer,
                what: format!("the server's results have no stream {id}"),
            })?;
            seconds = seconds.max(s.end_time - s.start_time);
            match reverse {
                true => done.sent.push(s.bytes),
                false => done.bytes.push(s.bytes),
            }
        }
    }
    let seconds = if seconds.is_finite() && seconds > 0.0 {
        seconds.min(cfg.test.run_time().as_secs_f64() * 2.0)
    } else {
        cfg.test.run_time().as_secs_f64()
    };
    // The iperf3 server's receive time covers the measured seconds only (after -O).
    done.elapsed_us = ((seconds + cfg.test.omit().as_secs_f64()) * 1e6) as u64;
    done.cpu = Some(super::cpu_report(&theirs, seconds));
    Ok(done)
}

/// A `mirror` thread: passes one direction's batches on to the reporter and cuts them a
/// second time into the rows the remote end would send, this end's counts standing in
/// for them: receiver rows for a direction this end sends, sender intervals for one it
/// receives. Returns the direction's totals.
fn mirror(
    batches: Receiver<Batch>,
    relay: Sender<Batch>,
    mut cutter: IntervalCutter,
    reverse: bool,
    remote: Sender<RemoteEvent>,
) -> Result<Vec<u64>> {
    let emit = |cutter: &mut IntervalCutter| {
        while let Some(iv) = cutter.pop_ready() {
            let _ = remote.send(match reverse {
                false => RemoteEvent::Row(report::receiver_row(&iv, false)),
                true => RemoteEvent::SenderInterval(iv),
            });
        }
    };
    for batch in batches {
        cutter.add(&batch);
        emit(&mut cutter);
        if relay.send(batch).is_err() {
            break;
        }
    }
    cutter.finish();
    emit(&mut cutter);
    Ok(cutter.totals().to_vec())
}

/// The two ends' counts: a server that read less than this end wrote counted what it had
/// read when it took `TEST_END` (said on stderr, with the difference); with `-R` they must
/// match.
fn reconcile(totals: &report::ClientTotals, cfg: &ClientConfig) {
    let sent: u64 = totals.sent.iter().sum();
    let received: u64 = totals.received.as_deref().unwrap_or_default().iter().sum();
    if sent != received && cfg.test.omit().is_zero() {
        eprintln!(
            "pinperf: the sender counted {sent} bytes, the receiver {received} ({} apart): \
             an iperf3 server counts what it has read when it takes TEST_END and what it \
             writes before it closes",
            sent.abs_diff(received)
        );
    }
}
