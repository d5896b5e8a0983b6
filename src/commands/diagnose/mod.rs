//! `pinperf diagnose HOST`: what limits this path and these hosts, and the setting that
//! lifts it. A short matrix chosen run by run ([`plan::next`]: each run tests one suspicion
//! the best run so far raised) within a wall-clock budget, then a verdict ([`verdict`])
//! confirmed by the run that changed the setting. Each run is an ordinary client test
//! (`client::run_with`), against `-c HOST` or with `--loopback` an in-process server, as
//! `compare`'s runs are. Progress goes out a line per step (stdout in text, stderr with
//! `-J`); the verdict last (text for people, `-J` a [`DiagnoseDoc`]).

pub mod observe;
pub mod plan;
pub mod text;
pub mod verdict;

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::cli::{DiagnoseArgs, TargetArgs};
use crate::commands::compare::Endpoint;
use crate::config::{ClientConfig, Target};
use crate::data::pin::Affinity;
use crate::error::{Error, Result};
use crate::report::Formatter;
use crate::report::model::{Header, IntervalReport, Summary};
use crate::wire::params::{TestParams, Transport};
use plan::{Host, Run, Settings, Step};
use verdict::{Limit, Verdict};

/// Shortest and longest run the budget chooses (`-t` overrides it).
const MIN_RUN: Duration = Duration::from_secs(1);
const MAX_RUN: Duration = Duration::from_secs(5);
/// What a run costs beyond its `-t` (connect, handshake, end of test), until one has run.
const FIRST_OVERHEAD: Duration = Duration::from_millis(500);

/// The document `-J` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiagnoseDoc {
    pub target: String,
    pub budget_s: f64,
    /// `-t` of each run.
    pub run_seconds: f64,
    /// Wall-clock time of all runs.
    pub elapsed_s: f64,
    pub runs: Vec<Run>,
    pub verdict: Verdict,
    /// Why the diagnosis stopped early (a stop signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What every run shares: where, how long, and what this host offers.
#[derive(Clone)]
pub(crate) struct Session {
    pub server: Endpoint,
    pub target: Target,
    pub budget: Duration,
    pub run_time: Duration,
    pub host: Host,
    /// Autotuning's largest buffer here (`tcp_rmem`, `tcp_wmem`).
    pub autotune_max_bytes: Option<u64>,
    /// The baseline's settings (the defaults, or the `-C` given).
    pub start: Settings,
}

pub(crate) fn run(a: &DiagnoseArgs) -> Result<()> {
    let targs = target_args(a)?;
    let session = Session::new(a, &targs, Endpoint::of(&targs, "diagnose")?)?;
    session.run_and_print(a.json, Box::new(io::stdout()))
}

/// A diagnosis over the lab's path: `diagnose`'s own options but the server, which the lab
/// starts (and names with [`Session::serve_at`]).
pub(crate) fn lab_session(a: &DiagnoseArgs, server: std::net::Ipv4Addr) -> Result<Session> {
    let t = &a.target;
    if a.host.is_some() || t.client.is_some() || t.loopback || t.port.is_some() {
        return Err(Error::Usage(
            "diagnose after `--`: the lab supplies the server; leave HOST, -c, --loopback and \
             -p out"
                .into(),
        ));
    }
    let mut targs = t.clone();
    targs.client = Some(server.to_string());
    targs.peer = crate::choices::Peer::Pinperf;
    Session::new(a, &targs, Endpoint::at(server.to_string(), 0, true))
}

impl Session {
    fn new(a: &DiagnoseArgs, targs: &TargetArgs, server: Endpoint) -> Result<Session> {
        let session = Session {
            server,
            target: Target::from_args(targs)?,
            budget: a.budget,
            run_time: run_time(a)?,
            host: Host {
                bbr: crate::os::net::check_congestion("bbr").is_ok(),
                root: crate::os::sys::is_root(),
            },
            autotune_max_bytes: autotune_ceiling(),
            start: Settings {
                congestion: a.congestion.clone(),
                window_bytes: a.window,
                force_window: a.force_window,
                block_bytes: a.block,
                ..Settings::baseline()
            },
        };
        // The baseline's flags, checked as a single test's are (-C exists here).
        config(&session.target, &session.start, session.run_time)?;
        Ok(session)
    }

    /// The server listens on `port` of the host named at [`lab_session`].
    pub(crate) fn serve_at(&mut self, port: u16) {
        self.server = Endpoint::at(self.server.host().to_string(), port, true);
    }

    /// Diagnoses, prints the verdict (text or JSON) to `out` after the progress lines (to
    /// `out` too in text, to stderr with JSON), and ends in the run's error when nothing
    /// was measured or a signal stopped it.
    pub(crate) fn run_and_print(&self, json: bool, mut out: Box<dyn Write + Send>) -> Result<()> {
        let (doc, stopped) = match json {
            true => self.diagnose(&mut io::stderr())?,
            false => self.diagnose(&mut out)?,
        };
        let printed = match json {
            true => serde_json::to_writer_pretty(&mut out, &doc)
                .map_err(io::Error::from)
                .and_then(|_| writeln!(out)),
            false => out.write_all(text::verdict(&doc).as_bytes()),
        };
        printed.and_then(|_| out.flush()).map_err(io_err)?;
        match (stopped, doc.verdict.limit) {
            (Some(e), _) => Err(e),
            (None, Limit::NotMeasured) => Err(Error::Test(doc.verdict.words)),
            _ => Ok(()),
        }
    }
}

/// `HOST` or `-c HOST`, not both.
fn target_args(a: &DiagnoseArgs) -> Result<TargetArgs> {
    let mut t = a.target.clone();
    match (&a.host, &t.client) {
        (Some(h), None) => t.client = Some(h.clone()),
        (Some(h), Some(c)) => {
            return Err(Error::Usage(format!(
                "diagnose {h} -c {c}: give the server once (HOST or -c HOST)"
            )));
        }
        (None, None) if !t.loopback => {
            return Err(Error::Usage(
                "diagnose: name the server (pinperf diagnose HOST) or use --loopback".into(),
            ));
        }
        _ => {}
    }
    Ok(t)
}

/// `-t`, or the budget's fifth less a run's overhead, 1 to 5 s; refused when the budget
/// does not hold one run.
fn run_time(a: &DiagnoseArgs) -> Result<Duration> {
    let t = a.duration.unwrap_or_else(|| {
        (a.budget / 5)
            .saturating_sub(FIRST_OVERHEAD)
            .clamp(MIN_RUN, MAX_RUN)
    });
    let least = t + FIRST_OVERHEAD;
    if t.is_zero() || a.budget < least {
        return Err(Error::Usage(format!(
            "--budget {:.1}s: too short for one run of {:.1} s; give --budget {:.1}s or more \
             (or a shorter -t)",
            a.budget.as_secs_f64(),
            t.as_secs_f64(),
            least.as_secs_f64()
        )));
    }
    Ok(t)
}

/// The smaller of `net.ipv4.tcp_rmem`'s and `tcp_wmem`'s third values: the largest
/// buffers autotuning grows to (the receiver's window, the sender's unacknowledged data).
fn autotune_ceiling() -> Option<u64> {
    let third = |name: &str| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok()?;
        text.split_whitespace().nth(2)?.parse().ok()
    };
    Some(third("tcp_rmem")?.min(third("tcp_wmem")?))
}

fn io_err(e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::BrokenPipe => Error::OutputClosed,
        _ => Error::io("write the diagnosis", e),
    }
}

impl Session {
    /// Runs the steps the planner asks for while they fit the budget, printing a progress
    /// line per step, and decides. A stop signal ends the steps; its error comes back
    /// beside the document of the runs finished.
    pub(crate) fn diagnose(
        &self,
        progress: &mut dyn Write,
    ) -> Result<(DiagnoseDoc, Option<Error>)> {
        let started = Instant::now();
        let mut runs: Vec<Run> = Vec::new();
        let mut overhead = FIRST_OVERHEAD;
        let most = self.fitting(self.budget, overhead).min(plan::MAX_RUNS);
        let mut stopped = None;
        writeln!(progress, "{}", text::heading(self, most)).map_err(io_err)?;
        while let Some(step) = plan::next(
            &runs,
            &self.start,
            self.host,
            self.fitting(self.budget.saturating_sub(started.elapsed()), overhead),
        ) {
            write!(
                progress,
                "{}",
                text::step_start(runs.len() + 1, most, &step)
            )
            .map_err(io_err)?;
            progress.flush().map_err(io_err)?;
            let t0 = Instant::now();
            let result = self.one(&step);
            overhead = overhead.max(t0.elapsed().saturating_sub(self.run_time));
            let run = match result {
                Err(e @ Error::Interrupted { .. }) => {
                    writeln!(progress, " stopped").map_err(io_err)?;
                    stopped = Some(e);
                    break;
                }
                r => self.record(step, r),
            };
            writeln!(progress, " {}", text::step_end(&run)).map_err(io_err)?;
            runs.push(run);
        }
        let mut verdict = verdict::decide(&runs);
        if let (Some(e), true) = (&stopped, runs.is_empty()) {
            verdict.words = format!("no run finished: {e}");
        }
        let doc = DiagnoseDoc {
            target: self.server.label(),
            budget_s: self.budget.as_secs_f64(),
            run_seconds: self.run_time.as_secs_f64(),
            elapsed_s: started.elapsed().as_secs_f64(),
            verdict,
            runs,
            error: stopped.as_ref().map(Error::to_string),
        };
        Ok((doc, stopped))
    }

    /// Runs that fit in `left` at `-t` plus `overhead` each.
    fn fitting(&self, left: Duration, overhead: Duration) -> usize {
        (left.as_secs_f64() / (self.run_time + overhead).as_secs_f64()) as usize
    }

    /// One step's test: its header (captured) and summary.
    fn one(&self, step: &Step) -> Result<(Header, Summary)> {
        let mut cfg = config(&self.target, &step.settings, self.run_time)?;
        self.server.aim(&mut cfg);
        let header = Arc::new(Mutex::new(None));
        let summary = crate::client::run_with(cfg, Box::new(Capture(header.clone())))?;
        let header = header
            .lock()
            .take()
            .ok_or_else(|| Error::Test("the run ended without a header".into()))?;
        Ok((header, summary))
    }

    fn record(&self, step: Step, result: Result<(Header, Summary)>) -> Run {
        let (figures, error) = match result {
            Ok((h, s)) => (
                Some(observe::figures(&h, &s, self.autotune_max_bytes)),
                None,
            ),
            Err(e) => (None, Some(e.to_string())),
        };
        Run {
            probe: step.probe,
            settings: step.settings,
            against: step.against,
            seconds: self.run_time.as_secs_f64(),
            figures,
            error,
        }
    }
}

/// The client configuration of one step: the defaults but for its settings.
fn config(target: &Target, s: &Settings, t: Duration) -> Result<ClientConfig> {
    let pins = |cpus: &Option<Vec<usize>>| cpus.clone().map(Affinity::List);
    let params = TestParams {
        streams: s.streams,
        window_bytes: s.window_bytes,
        force_window: s.force_window,
        reverse: s.reverse,
        len: s.block_bytes,
        pin: pins(&s.remote_cpus),
        duration: t,
        interval: Some(t),
        transport: Transport {
            congestion: s.congestion.clone(),
            ..Transport::default()
        },
        ..TestParams::defaults()
    };
    let mut cfg = ClientConfig::new(
        target.clone(),
        params,
        pins(&s.local_cpus).unwrap_or(Affinity::Auto),
    )?;
    // Its steps compare settings, so placement stays what the rules make it.
    cfg.placement_probe = false;
    Ok(cfg)
}

/// Keeps a run's header (the grants and pin plans the figures need) and prints nothing.
struct Capture(Arc<Mutex<Option<Header>>>);

impl Formatter for Capture {
    fn header(&mut self, h: &Header) -> io::Result<()> {
        *self.0.lock() = Some(h.clone());
        Ok(())
    }
    fn interval(&mut self, _: &IntervalReport) -> io::Result<()> {
        Ok(())
    }
    fn summary(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
}
