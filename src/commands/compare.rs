//! `pinperf compare`: runs a matrix of configurations (block sizes × stream counts ×
//! windows × pinning × engines) against one server, each for `-t` seconds after a settle
//! pause, and prints one row per configuration: Mb/s, CPU on both ends, Gbit/s per busy
//! core, retransmits, fairness. Each run is an ordinary client test (`client::run_with`);
//! with `--loopback` one in-process server serves them all.

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::choices::Format;
use crate::choices::{Engine, Peer, ZeroCopy};
use crate::cli::{CompareArgs, TargetArgs};
use crate::config::{ClientConfig, Target};
use crate::error::{Error, Result};
use crate::wire::params::TestParams;

use crate::data::pin::Affinity;
use crate::report::Formatter;
use crate::report::model::{Header, IntervalReport, Summary};
use crate::server::Server;
use crate::units::{format_size, parse_size};

/// Most configurations one comparison may run.
pub(crate) const MAX_RUNS: usize = 1000;

/// Parses a list of sizes: `8k,64k,256k` or a doubling range `8k..1m`.
pub(crate) fn parse_size_list(flag: &str, text: &str) -> Result<Vec<u64>> {
    parse_list(flag, text, parse_size)
}

/// Parses a list of counts: `1,2,4` or a doubling range `1..16`.
pub(crate) fn parse_count_list(flag: &str, text: &str) -> Result<Vec<u64>> {
    parse_list(flag, text, |s| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("'{s}' is not a whole number"))
    })
}

fn parse_list(
    flag: &str,
    text: &str,
    one: impl Fn(&str) -> std::result::Result<u64, String>,
) -> Result<Vec<u64>> {
    let bad = |why: String| Error::Usage(format!("{flag} {text}: {why}"));
    if let Some((lo, hi)) = text.split_once("..") {
        let (lo, hi) = (one(lo).map_err(bad)?, one(hi).map_err(bad)?);
        if lo == 0 || lo > hi {
            return Err(bad(
                "a range needs 0 < start <= end (it doubles from start)".into(),
            ));
        }
        let mut out = vec![lo];
        let mut v = lo;
        while v <= hi / 2 {
            v *= 2;
            out.push(v);
        }
        return Ok(out);
    }
    text.split(',')
        .map(|s| one(s.trim()).map_err(bad))
        .collect()
}

fn parse_words<T>(
    flag: &str,
    text: &str,
    one: impl Fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Vec<T>> {
    text.split(',')
        .map(|w| {
            one(w.trim()).ok_or_else(|| {
                Error::Usage(format!("{flag} {text}: '{w}' is not one of {allowed}"))
            })
        })
        .collect()
}

/// One configuration of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub block_bytes: u64,
    pub streams: u16,
    pub window_bytes: Option<u64>,
    /// `auto` or `none` (both ends).
    pub pin: String,
    pub engine: Engine,
    /// `-u`.
    #[serde(default)]
    pub udp: bool,
    /// `-b` per stream, bits/s (absent: as fast as possible).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// How the bytes cross into and out of the kernel: `default` (copied both ways),
    /// `zerocopy` (`-Z`, its default method), `sendfile` (`-Z=sendfile`), `msg-zerocopy`
    /// (`-Z=msg`) or `skip-rx` (`--skip-rx-copy`).
    #[serde(default = "default_copy")]
    pub copy: String,
}

/// `--copy`'s values, and the `-Z` method of each (`skip-rx` is the receiver's).
const COPIES: [(&str, Option<ZeroCopy>); 5] = [
    ("default", None),
    ("zerocopy", Some(ZeroCopy::DEFAULT)),
    ("sendfile", Some(ZeroCopy::Sendfile)),
    ("msg-zerocopy", Some(ZeroCopy::Msg)),
    ("skip-rx", None),
];

fn default_copy() -> String {
    "default".into()
}

/// One row of the comparison: the point and what it measured, or why it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRow {
    #[serde(flatten)]
    pub point: Point,
    pub bits_per_second: Option<f64>,
    pub local_cpu_percent: Option<f64>,
    pub remote_cpu_percent: Option<f64>,
    pub gbps_per_busy_core: Option<f64>,
    pub cpu_seconds_per_gb: Option<f64>,
    pub retransmits: Option<u64>,
    pub jain: Option<f64>,
    pub block_rtt_avg_us: Option<f64>,
    /// UDP points: datagrams lost and jitter (iperf3's names).
    #[serde(default)]
    pub lost_percent: Option<f64>,
    #[serde(default)]
    pub jitter_ms: Option<f64>,
    pub error: Option<String>,
    /// A combination the engine cannot run (`--engines single` with `--rates`, UDP or
    /// `--copy`): not run, and why; the other rows ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The JSON document of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareDoc {
    pub target: String,
    pub seconds: f64,
    /// Configurations in the matrix (absent in older documents: the rows').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configurations: Option<usize>,
    pub rows: Vec<CompareRow>,
    /// Why the comparison stopped before its last configuration (a stop signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CompareDoc {
    fn planned(&self) -> usize {
        self.configurations.unwrap_or(self.rows.len())
    }

    /// When no configuration measured anything, why: the first one's error (or the
    /// comparison's, when it stopped before any row).
    pub(crate) fn nothing_measured(&self) -> Option<String> {
        if self.rows.iter().any(|r| r.bits_per_second.is_some()) {
            return None;
        }
        let first = self.rows.iter().find_map(|r| r.error.clone());
        Some(
            first
                .or_else(|| self.error.clone())
                .unwrap_or_else(|| "no configuration ran".into()),
        )
    }

    /// The text line that ends a comparison that stopped early (an older document does
    /// not say how many were planned).
    fn stopped_line(&self) -> Option<String> {
        let e = self.error.as_ref()?;
        Some(match self.configurations {
            Some(n) => format!("# {e}: {} of {n} configurations ran", self.rows.len()),
            None => format!("# {e}: {} configurations ran before it", self.rows.len()),
        })
    }

    /// The CSV row that ends a comparison that stopped early: only its `error` cell.
    fn stopped_row(&self) -> Option<String> {
        let error = self.error.clone()?;
        Some(
            CsvRow {
                error,
                ..CsvRow::default()
            }
            .line(),
        )
    }
}

/// Builds the matrix from the axis flags, validating every value as a single test would.
pub(crate) fn points(a: &CompareArgs) -> Result<Vec<Point>> {
    let out = Axes::parse(a)?.matrix();
    if out.len() > MAX_RUNS {
        return Err(Error::Usage(format!(
            "{} configurations; at most {MAX_RUNS}",
            out.len()
        )));
    }
    Ok(out)
}

/// The matrix's axes, each parsed from its flag.
struct Axes {
    /// None: each protocol's own -l.
    blocks: Option<Vec<u64>>,
    streams: Vec<u64>,
    windows: Vec<Option<u64>>,
    pins: Vec<String>,
    engines: Vec<Engine>,
    /// `-u` or not.
    protocols: Vec<bool>,
    rates: Vec<Option<u64>>,
    copies: Vec<String>,
}

impl Axes {
    /// Every axis from its flag, in this order, so the first bad flag is the one named.
    fn parse(a: &CompareArgs) -> Result<Axes> {
        Ok(Axes {
            blocks: (a.blocks.as_deref())
                .map(|b| parse_size_list("--blocks", b))
                .transpose()?,
            streams: parse_count_list("--streams", &a.streams)?,
            windows: parse_windows(&a.windows)?,
            pins: parse_words(
                "--pins",
                &a.pins,
                |w| ["auto", "none"].contains(&w).then(|| w.to_string()),
                "auto, none",
            )?,
            engines: parse_words(
                "--engines",
                &a.engines,
                |w| match w {
                    "threads" => Some(Engine::Threads),
                    "single" => Some(Engine::Single),
                    _ => None,
                },
                "threads, single",
            )?,
            protocols: parse_words(
                "--protocols",
                &a.protocols,
                |w| match w {
                    "tcp" => Some(false),
                    "udp" => Some(true),
                    _ => None,
                },
                "tcp, udp",
            )?,
            rates: parse_rates(a.rates.as_deref())?,
            copies: parse_copies(&a.copy)?,
        })
    }

    /// Every combination, protocols outermost and copy methods innermost.
    fn matrix(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for &udp in &self.protocols {
            // Without --blocks, each protocol's own -l default.
            let default = TestParams {
                udp,
                ..TestParams::defaults()
            }
            .block_bytes();
            let blocks = self.blocks.clone().unwrap_or_else(|| vec![default]);
            for &rate_bps in &self.rates {
                for &block in &blocks {
                    for &n in &self.streams {
                        self.settings(&mut out, (udp, rate_bps, block, n));
                    }
                }
            }
        }
        out
    }

    /// The combinations of one protocol, rate, block size and stream count: each
    /// window, pinning, engine and copy method.
    fn settings(
        &self,
        out: &mut Vec<Point>,
        (udp, rate_bps, block, n): (bool, Option<u64>, u64, u64),
    ) {
        for &window in &self.windows {
            for pin in &self.pins {
                for &engine in &self.engines {
                    for copy in &self.copies {
                        out.push(Point {
                            block_bytes: block,
                            streams: u16::try_from(n).unwrap_or(u16::MAX),
                            window_bytes: window,
                            pin: pin.clone(),
                            engine,
                            udp,
                            rate_bps,
                            copy: copy.clone(),
                        });
                    }
                }
            }
        }
    }
}

/// `--windows`: `auto` (kernel autotuning) or sizes.
fn parse_windows(text: &str) -> Result<Vec<Option<u64>>> {
    text.split(',')
        .map(|w| match w.trim() {
            "auto" => Ok(None),
            w => parse_size(w)
                .map(Some)
                .map_err(|e| Error::Usage(format!("--windows {text}: {e}"))),
        })
        .collect()
}

/// `--rates`: `-b` per stream; 0 (or no flag) is as fast as possible.
fn parse_rates(text: Option<&str>) -> Result<Vec<Option<u64>>> {
    let Some(text) = text else {
        return Ok(vec![None]);
    };
    text.split(',')
        .map(|r| match crate::units::parse_rate_or_zero(r) {
            Ok(0) => Ok(None),
            Ok(bps) => Ok(Some(bps)),
            Err(e) => Err(Error::Usage(format!("--rates {text}: {e}"))),
        })
        .collect()
}

/// `--copy`: names from [`COPIES`].
fn parse_copies(text: &str) -> Result<Vec<String>> {
    parse_words(
        "--copy",
        text,
        |w| {
            COPIES
                .iter()
                .any(|(name, _)| *name == w)
                .then(|| w.to_string())
        },
        &COPIES
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The client configuration of one point: the axes, and the flags shared by every run.
fn config_for(a: &CompareArgs, target: &Target, p: &Point) -> Result<ClientConfig> {
    let pin = if p.pin == "none" {
        Affinity::None
    } else {
        Affinity::Auto
    };
    let params = TestParams {
        streams: p.streams,
        len: Some(p.block_bytes),
        window_bytes: p.window_bytes,
        duration: a.duration,
        interval: Some(a.duration),
        omit: a.omit,
        transport: a.transport.to_transport(),
        // As the client's -A: auto leaves the server its own plan (and works against an
        // iperf3 server, which takes none); none asks both ends to leave placement alone.
        pin: (pin == Affinity::None).then_some(Affinity::None),
        udp: p.udp,
        // UDP at "as fast as possible" is asked for as -b 0, not left to UDP's default.
        rate_bps: Some(p.rate_bps.unwrap_or(0)),
        zerocopy: COPIES
            .iter()
            .find(|(name, _)| *name == p.copy)
            .and_then(|(_, z)| *z),
        skip_rx_copy: p.copy == "skip-rx",
        ..TestParams::defaults()
    };
    // The rule is the single test's; the flag named is compare's axis.
    let mut cfg = ClientConfig::new(target.clone(), params, pin).map_err(|e| {
        let msg = e.to_string();
        let axis = [
            ("-l ", "--blocks "),
            ("-P ", "--streams "),
            ("-w ", "--windows "),
            ("-b ", "--rates "),
            ("-u", "--protocols udp"),
            ("-u: -Z", "--copy with --protocols udp: -Z"),
        ]
        .into_iter()
        .find_map(|(flag, axis)| msg.strip_prefix(flag).map(|rest| format!("{axis}{rest}")));
        Error::Usage(axis.unwrap_or(msg))
    })?;
    // The engine's own rules (`check_engine`) are the run's to apply: a combination the
    // single engine cannot run is a skipped row, not a refused comparison.
    cfg.engine = p.engine;
    Ok(cfg)
}

/// Discards a run's own report (compare prints its table instead), noting only whether
/// the server turned out to be an iperf3 one: the runs after it need not wait to find out.
struct Quiet(Arc<AtomicBool>);

impl Formatter for Quiet {
    fn header(&mut self, h: &Header) -> io::Result<()> {
        if h.peer == crate::iperf3::wording::server() {
            self.0.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
    fn interval(&mut self, _: &IntervalReport) -> io::Result<()> {
        Ok(())
    }
    fn summary(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
}

/// A row with no figures yet: a run fills them, a skipped one says why instead.
fn empty_row(point: Point) -> CompareRow {
    CompareRow {
        point,
        bits_per_second: None,
        local_cpu_percent: None,
        remote_cpu_percent: None,
        gbps_per_busy_core: None,
        cpu_seconds_per_gb: None,
        retransmits: None,
        jain: None,
        block_rtt_avg_us: None,
        lost_percent: None,
        jitter_ms: None,
        error: None,
        skipped: None,
    }
}

fn row(point: Point, result: Result<Summary>) -> CompareRow {
    let mut r = empty_row(point);
    match result {
        Ok(s) => {
            r.bits_per_second = Some(s.sum_received.bits_per_second);
            r.local_cpu_percent = s.cpu_utilization_percent.map(|c| c.host_total);
            r.remote_cpu_percent = s.cpu_utilization_percent.and_then(|c| c.remote_total);
            r.gbps_per_busy_core = s.cpu.as_ref().and_then(|c| c.gbps_per_busy_core);
            r.cpu_seconds_per_gb = s.cpu.as_ref().and_then(|c| c.cpu_seconds_per_gb);
            r.retransmits = s.sum.retransmits;
            r.jain = s.fairness.totals.jain;
            r.block_rtt_avg_us = s.sum.block_rtt.map(|b| b.avg_us);
            r.lost_percent = s.sum.udp.map(|u| u.lost_percent);
            r.jitter_ms = s.sum.udp.map(|u| u.jitter_ms);
        }
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn text_row(r: &CompareRow) -> String {
    let p = &r.point;
    let line = format!(
        "{:>8} {:>7} {:>7} {:>5} {:>7} {:>11} {:>7} {:>7} {:>9} {:>6} {:>6} {:>7} {:>5} {:>7} {:>8} {:>8}",
        format_size(p.block_bytes),
        p.streams,
        p.window_bytes.map_or("auto".into(), format_size),
        p.pin,
        p.engine.to_string(),
        opt(r.bits_per_second.map(|b| b / 1e6), 3),
        opt(r.local_cpu_percent, 1),
        opt(r.remote_cpu_percent, 1),
        opt(r.gbps_per_busy_core, 2),
        r.retransmits.map_or("-".into(), |v| v.to_string()),
        opt(r.jain, 3),
        opt(r.lost_percent, 3),
        if p.udp { "udp" } else { "tcp" },
        p.rate_bps.map_or("max".into(), crate::units::format_rate),
        opt(r.cpu_seconds_per_gb, 3),
        p.copy,
    );
    match (&r.error, &r.skipped) {
        (Some(e), _) => format!("{line}  FAILED: {e}"),
        (None, Some(why)) => format!("{line}  SKIPPED: {why}"),
        (None, None) => line,
    }
}

crate::report::format::csv::csv_record! {
    /// One row of `compare --csv`: the columns, declared once.
    struct CsvRow {
        block_bytes,
        streams,
        window_bytes,
        pin,
        engine,
        bits_per_second,
        local_cpu_percent,
        remote_cpu_percent,
        gbps_per_busy_core,
        cpu_seconds_per_gb,
        retransmits,
        jain,
        block_rtt_avg_us,
        lost_percent,
        jitter_ms,
        protocol,
        rate_bps,
        copy,
        error,
    }
}

const CSV_HEADER: &str = CsvRow::HEADER;

fn csv_row(r: &CompareRow) -> String {
    let o = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_default();
    let p = &r.point;
    CsvRow {
        protocol: if p.udp { "udp" } else { "tcp" }.into(),
        rate_bps: p.rate_bps.map(|r| r.to_string()).unwrap_or_default(),
        block_bytes: p.block_bytes.to_string(),
        streams: p.streams.to_string(),
        window_bytes: p.window_bytes.map(|w| w.to_string()).unwrap_or_default(),
        pin: p.pin.clone(),
        engine: p.engine.to_string(),
        bits_per_second: o(r.bits_per_second),
        local_cpu_percent: o(r.local_cpu_percent),
        remote_cpu_percent: o(r.remote_cpu_percent),
        gbps_per_busy_core: o(r.gbps_per_busy_core),
        cpu_seconds_per_gb: o(r.cpu_seconds_per_gb),
        retransmits: r.retransmits.map(|v| v.to_string()).unwrap_or_default(),
        jain: o(r.jain),
        block_rtt_avg_us: o(r.block_rtt_avg_us),
        lost_percent: o(r.lost_percent),
        jitter_ms: o(r.jitter_ms),
        copy: p.copy.clone(),
        error: match (&r.error, &r.skipped) {
            (Some(e), _) => e.clone(),
            (None, Some(why)) => format!("skipped: {why}"),
            (None, None) => String::new(),
        },
    }
    .line()
}

/// The text table of a saved comparison (`pinperf report`): the run's heading without its
/// settle time (not saved), then its rows.
pub(crate) fn text_table(doc: &CompareDoc) -> String {
    let mut out = format!(
        "# pinperf compare: {} configurations x {} s against {}\n{TEXT_HEADING}\n",
        doc.planned(),
        doc.seconds,
        doc.target
    );
    for r in &doc.rows {
        out.push_str(&text_row(r));
        out.push('\n');
    }
    if let Some(line) = doc.stopped_line() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The CSV of a saved comparison, as `compare --csv` prints it.
pub(crate) fn csv_table(doc: &CompareDoc) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in &doc.rows {
        out.push_str(&csv_row(r));
        out.push('\n');
    }
    if let Some(row) = doc.stopped_row() {
        out.push_str(&row);
        out.push('\n');
    }
    out
}

const TEXT_HEADING: &str = "#  block streams  window   pin  engine        Mb/s  cpu l%  cpu r%  Gb/s/core   retr   jain   lost% proto    rate  cpu s/GB     copy";

/// Runs the comparison; prints text and CSV rows as they complete, JSON at the end. A stop
/// signal (SIGINT/SIGTERM/SIGHUP) stops the run under way and ends the comparison with the
/// rows finished so far: JSON prints its document with them and an `error` field, text a
/// `#` line with the reason; the error (stderr, exit 128 + the signal) follows.
pub(crate) fn run(a: &CompareArgs) -> Result<()> {
    let matrix = points(a)?;
    let (configs, skips) = configs(a, &matrix)?;
    let format = match (a.json, a.csv) {
        (true, _) => Format::Json,
        (_, true) => Format::Csv,
        _ => a.format.into(),
    };
    let server = Endpoint::of(&a.target, "compare")?;
    let mut out = Printer {
        out: io::stdout().lock(),
        format,
    };
    out.heading(a, matrix.len(), &server.label())?;
    let mut sweep = Sweep {
        settle: a.settle,
        server,
        runs: matrix.len(),
        ran: 0,
        iperf3: Arc::new(AtomicBool::new(false)),
        rows: Vec::with_capacity(matrix.len()),
    };
    let mut interrupted = None;
    for (i, ((point, cfg), skip)) in matrix.into_iter().zip(configs).zip(skips).enumerate() {
        if let ControlFlow::Break(e) = sweep.next(i, point, cfg, skip, &mut out)? {
            interrupted = Some(e);
            break;
        }
    }
    let failed = sweep.rows.iter().filter(|r| r.error.is_some()).count();
    let doc = CompareDoc {
        target: sweep.server.label(),
        seconds: a.duration.as_secs_f64(),
        configurations: Some(sweep.runs),
        rows: sweep.rows,
        error: interrupted.as_ref().map(Error::to_string),
    };
    out.end(&doc)?;
    if let Some(e) = interrupted {
        return Err(e);
    }
    if failed > 0 {
        return Err(Error::Test(format!(
            "{failed} configuration(s) failed; see their rows"
        )));
    }
    Ok(())
}

/// Every point's client configuration, through the one constructor so each is checked
/// as a single test would be before the first one runs; and why the engine cannot run a
/// point (a skipped row), refusing only a matrix with nothing runnable.
fn configs(a: &CompareArgs, matrix: &[Point]) -> Result<(Vec<ClientConfig>, Vec<Option<String>>)> {
    let target = Target::from_args(&a.target)?;
    let configs = matrix
        .iter()
        .map(|p| config_for(a, &target, p))
        .collect::<Result<Vec<_>>>()?;
    let skips: Vec<Option<String>> = configs
        .iter()
        .map(|c| c.check_engine().err().map(|e| e.to_string()))
        .collect();
    if let (true, Some(Some(why))) = (skips.iter().all(Option::is_some), skips.first()) {
        return Err(Error::Usage(why.clone()));
    }
    Ok((configs, skips))
}

/// The server every run tests against: `-c HOST` (and its `-p`), or with `--loopback` one
/// started in this process. Shared by the commands that run many tests (`diagnose`).
#[derive(Clone)]
pub(crate) struct Endpoint {
    host: String,
    port: u16,
    same_process: bool,
}

impl Endpoint {
    /// `command` names the subcommand in the usage error.
    pub(crate) fn of(target: &TargetArgs, command: &str) -> Result<Endpoint> {
        let (host, port, same_process) = match (&target.client, target.loopback) {
            (Some(_), true) | (None, false) => {
                return Err(Error::Usage(format!(
                    "{command}: give exactly one of -c HOST and --loopback"
                )));
            }
            (Some(h), false) => (h.clone(), target.port(), false),
            (None, true) => (
                "127.0.0.1".to_string(),
                Server::spawn_local(false, Affinity::Auto)?.port(),
                true,
            ),
        };
        Ok(Endpoint {
            host,
            port,
            same_process,
        })
    }

    /// A server already listening at `host:port` (the lab's, in its namespace).
    pub(crate) fn at(host: String, port: u16, same_process: bool) -> Endpoint {
        Endpoint {
            host,
            port,
            same_process,
        }
    }

    /// Points a run's configuration at this server.
    pub(crate) fn aim(&self, cfg: &mut ClientConfig) {
        cfg.target.host = Some(self.host.clone());
        cfg.target.port = self.port;
        cfg.target.loopback = false;
        cfg.same_process = self.same_process;
    }

    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// `host:port`, and whether the server is this process's.
    pub(crate) fn label(&self) -> String {
        format!(
            "{}:{}{}",
            self.host,
            self.port,
            if self.same_process {
                " (in-process server)"
            } else {
                ""
            }
        )
    }
}

/// A write to stdout failed: nobody reads any more (`| head`) stops quietly, as a single
/// test does; anything else is an error.
fn io_err(e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::BrokenPipe => Error::OutputClosed,
        _ => Error::io("write the comparison", e),
    }
}

/// The comparison on stdout: text and CSV print a heading and each row as it is done,
/// JSON the whole document at the end.
struct Printer<'o> {
    out: io::StdoutLock<'o>,
    format: Format,
}

impl Printer<'_> {
    fn heading(&mut self, a: &CompareArgs, runs: usize, target: &str) -> Result<()> {
        let out = &mut self.out;
        match self.format {
            Format::Text => {
                writeln!(
                    out,
                    "# pinperf compare: {runs} configurations x {} s against {target}, settle {} s",
                    a.duration.as_secs_f64(),
                    a.settle.as_secs_f64()
                )
                .map_err(io_err)?;
                writeln!(out, "{TEXT_HEADING}").map_err(io_err)?;
            }
            Format::Csv => writeln!(out, "{CSV_HEADER}").map_err(io_err)?,
            _ => {}
        }
        out.flush().map_err(io_err)
    }

    fn row(&mut self, r: &CompareRow) -> Result<()> {
        let out = &mut self.out;
        match self.format {
            Format::Text => writeln!(out, "{}", text_row(r)).map_err(io_err)?,
            Format::Csv => writeln!(out, "{}", csv_row(r)).map_err(io_err)?,
            _ => {}
        }
        out.flush().map_err(io_err)
    }

    /// JSON's document; text and CSV printed their rows, and a comparison stopped early
    /// says so last in each.
    fn end(&mut self, doc: &CompareDoc) -> Result<()> {
        let out = &mut self.out;
        match self.format {
            Format::Json => {
                serde_json::to_writer_pretty(&mut *out, doc).map_err(|e| io_err(e.into()))?;
                writeln!(out).map_err(io_err)?;
            }
            Format::Text => {
                if let Some(line) = doc.stopped_line() {
                    writeln!(out, "{line}").map_err(io_err)?;
                }
            }
            _ => {
                if let Some(row) = doc.stopped_row() {
                    writeln!(out, "{row}").map_err(io_err)?;
                }
            }
        }
        out.flush().map_err(io_err)
    }
}

/// The runs in order, and what carries from one to the next.
struct Sweep {
    settle: std::time::Duration,
    server: Endpoint,
    /// Configurations in the matrix, and how many have run (a skipped one has not).
    runs: usize,
    ran: usize,
    /// `--peer auto` found an iperf3 server: the rest speak iperf3 at once.
    iperf3: Arc<AtomicBool>,
    rows: Vec<CompareRow>,
}

impl Sweep {
    /// Configuration `i`: skipped (its row says why), or run after the settle pause and
    /// printed. A stop signal breaks off with its error: the run it stopped is no row.
    fn next(
        &mut self,
        i: usize,
        point: Point,
        mut cfg: ClientConfig,
        skip: Option<String>,
        out: &mut Printer<'_>,
    ) -> Result<ControlFlow<Error>> {
        let runs = self.runs;
        if let Some(why) = skip {
            let r = CompareRow {
                skipped: Some(why),
                ..empty_row(point)
            };
            out.row(&r)?;
            self.rows.push(r);
            return Ok(ControlFlow::Continue(()));
        }
        let settled = if self.ran > 0 {
            crate::signals::sleep(self.settle)
        } else {
            crate::signals::received()
        };
        if let Some(sig) = settled {
            let when = format!("before run {} of {runs}", i + 1);
            return Ok(ControlFlow::Break(crate::signals::interrupted(sig, when)));
        }
        self.server.aim(&mut cfg);
        if self.iperf3.load(Ordering::Relaxed) && cfg.peer == Peer::Auto {
            cfg.peer = Peer::Iperf3;
        }
        let result = crate::client::run_with(cfg, Box::new(Quiet(self.iperf3.clone())));
        self.ran += 1;
        if let Err(Error::Interrupted { signal, when }) = &result {
            let when = format!("{when}, in run {} of {runs}", i + 1);
            return Ok(ControlFlow::Break(crate::signals::interrupted(
                *signal, when,
            )));
        }
        let r = row(point, result);
        out.row(&r)?;
        self.rows.push(r);
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_axis_multiplies_the_matrix_and_names_bad_words() {
        use clap::Parser;
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            a: CompareArgs,
        }
        let args = |copy: &str| {
            Only::parse_from([
                "compare",
                "--loopback",
                "--blocks",
                "64k,1m",
                "--copy",
                copy,
            ])
            .a
        };
        let pts = points(&args("default,zerocopy,skip-rx")).unwrap();
        assert_eq!(pts.len(), 6);
        assert_eq!(
            pts.iter().map(|p| p.copy.as_str()).collect::<Vec<_>>(),
            [
                "default", "zerocopy", "skip-rx", "default", "zerocopy", "skip-rx"
            ]
        );
        let target = Target::from_args(&args("zerocopy").target).unwrap();
        let cfg = config_for(&args("zerocopy"), &target, &pts[1]).unwrap();
        assert_eq!(cfg.test.zerocopy, Some(ZeroCopy::DEFAULT));
        assert!(!cfg.test.skip_rx_copy);
        let cfg = config_for(&args("skip-rx"), &target, &pts[2]).unwrap();
        assert!(cfg.test.skip_rx_copy && cfg.test.zerocopy.is_none());
        let pts = points(&args("sendfile,msg-zerocopy")).unwrap();
        let methods: Vec<_> = pts
            .iter()
            .map(|p| config_for(&args("x"), &target, p).unwrap().test.zerocopy)
            .collect();
        assert_eq!(
            methods,
            [Some(ZeroCopy::Sendfile), Some(ZeroCopy::Msg)].repeat(2)
        );
        assert_eq!(
            points(&args("default,splice")).unwrap_err().to_string(),
            "--copy default,splice: 'splice' is not one of default, zerocopy, sendfile, \
             msg-zerocopy, skip-rx"
        );
    }

    /// Without --blocks each protocol runs at its own -l default (TCP's 128k is no UDP
    /// datagram size).
    #[test]
    fn without_blocks_each_protocol_has_its_own_default() {
        use clap::Parser;
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            a: CompareArgs,
        }
        let a = Only::parse_from(["compare", "--loopback", "--protocols", "tcp,udp"]).a;
        let pts = points(&a).unwrap();
        let blocks: Vec<_> = pts.iter().map(|p| (p.udp, p.block_bytes)).collect();
        assert_eq!(
            blocks,
            [
                (false, 128 << 10),
                (true, crate::wire::params::DEFAULT_DATAGRAM)
            ]
        );
        let target = Target::from_args(&a.target).unwrap();
        assert!(pts.iter().all(|p| config_for(&a, &target, p).is_ok()));
    }

    /// What `--engine single` cannot do is refused for compare's rows as for a single test,
    /// before anything connects.
    #[test]
    fn the_single_engine_s_rules_hold_for_every_row() {
        use clap::Parser;
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            a: CompareArgs,
        }
        let a = Only::parse_from([
            "compare",
            "--loopback",
            "--engines",
            "single",
            "--copy",
            "zerocopy",
        ])
        .a;
        let target = Target::from_args(&a.target).unwrap();
        let p = &points(&a).unwrap()[0];
        let err = config_for(&a, &target, p)
            .unwrap()
            .check_engine()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("-Z: the single engine sends with copies"),
            "{err}"
        );
    }

    #[test]
    fn lists_and_doubling_ranges() {
        assert_eq!(
            parse_size_list("--blocks", "8k,64k,256k").unwrap(),
            vec![8192, 65536, 262144]
        );
        assert_eq!(
            parse_size_list("--blocks", "8k..1m").unwrap(),
            vec![8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576]
        );
        assert_eq!(
            parse_count_list("--streams", "1..16").unwrap(),
            vec![1, 2, 4, 8, 16]
        );
        assert_eq!(parse_count_list("--streams", "1,3").unwrap(), vec![1, 3]);
        assert_eq!(
            parse_count_list("--streams", "4..2")
                .unwrap_err()
                .to_string(),
            "--streams 4..2: a range needs 0 < start <= end (it doubles from start)"
        );
        assert!(parse_size_list("--blocks", "8x").is_err());
        assert_eq!(parse_count_list("--streams", "3..3").unwrap(), vec![3]);
        assert_eq!(parse_count_list("--streams", "5..12").unwrap(), vec![5, 10]);
        assert_eq!(
            parse_count_list("--streams", &format!("{}..{}", u64::MAX, u64::MAX))
                .unwrap()
                .len(),
            1
        );
    }

    /// Both CSV row kinds (measured, failed) have one cell per column; an error with a
    /// comma, quotes and a line break stays one cell, as written.
    #[test]
    fn csv_rows_have_one_cell_per_column() {
        use crate::report::format::csv::parse;
        let point = Point {
            block_bytes: 65536,
            streams: 4,
            window_bytes: None,
            pin: "auto".into(),
            engine: Engine::Threads,
            udp: true,
            rate_bps: Some(500_000_000),
            copy: "default".into(),
        };
        let error = "connect 10.0.0.1:5201: \"refused\", twice\nthen gave up";
        let measured = CompareRow {
            point: point.clone(),
            bits_per_second: Some(9.41e9),
            local_cpu_percent: Some(35.123456),
            remote_cpu_percent: None,
            gbps_per_busy_core: None,
            cpu_seconds_per_gb: None,
            retransmits: Some(12),
            jain: Some(0.99),
            block_rtt_avg_us: None,
            lost_percent: Some(0.25),
            jitter_ms: Some(0.012),
            error: None,
            skipped: None,
        };
        let failed = row(point, Err(Error::Test(error.into())));
        let text = format!(
            "{CSV_HEADER}\n{}\n{}\n",
            csv_row(&measured),
            csv_row(&failed)
        );
        let records = parse(&text);
        assert_eq!(records.len(), 3, "{text}");
        assert_eq!(records[0], CsvRow::NAMES);
        let col = |name: &str| CsvRow::NAMES.iter().position(|c| *c == name).unwrap();
        for (r, cells) in records[1..].iter().zip([
            [
                ("protocol", "udp"),
                ("rate_bps", "500000000"),
                ("block_bytes", "65536"),
                ("window_bytes", ""),
                ("bits_per_second", "9410000000.0000"),
                ("local_cpu_percent", "35.1235"),
                ("retransmits", "12"),
                ("lost_percent", "0.2500"),
                ("copy", "default"),
                ("error", ""),
            ],
            [
                ("protocol", "udp"),
                ("rate_bps", "500000000"),
                ("block_bytes", "65536"),
                ("window_bytes", ""),
                ("bits_per_second", ""),
                ("local_cpu_percent", ""),
                ("retransmits", ""),
                ("lost_percent", ""),
                ("copy", "default"),
                ("error", error),
            ],
        ]) {
            assert_eq!(r.len(), CsvRow::NAMES.len(), "{r:?}");
            for (c, v) in cells {
                assert_eq!(r[col(c)], v, "{c}: {r:?}");
            }
        }
    }
}
