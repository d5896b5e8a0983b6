//! The step planner of `pinperf diagnose`: a pure function of the runs so far (their
//! settings and the figures each measured) to the next run to make, or none. Each step
//! tests one suspicion the best run so far raised — loss under a loss-based congestion
//! control, a window the data in flight fills, a standing queue in the socket buffers, a
//! stream thread at the top of its core — by changing one setting of that run. No
//! sockets here: the tests below are tables of synthetic runs.

use serde::{Deserialize, Serialize};

use crate::report::finding::LossLimited;
use crate::units::format_size;

/// Most runs one diagnosis makes, baseline included.
pub const MAX_RUNS: usize = 6;

/// Retransmitted share of the segments sent (percent) that makes loss a suspect.
pub const LOSS_PERCENT: f64 = 0.01;
/// Data in flight (rate x min RTT) as a share of the usable window that makes the window
/// a suspect.
pub const WINDOW_FULL: f64 = 0.6;
/// Block RTT over kernel min RTT that makes a standing queue a suspect, with at least
/// [`QUEUE_MIN_EXTRA_US`] between them.
pub const QUEUE_RATIO: f64 = 4.0;
pub const QUEUE_MIN_EXTRA_US: f64 = 2000.0;
/// A stream thread's CPU (percent of one core) that makes its end's CPU a suspect.
pub const BUSY_THREAD_PERCENT: f64 = 90.0;
/// Most streams a probe asks for.
pub const MAX_STREAMS: u16 = 8;
/// A stream thread's core busy this much (percent), of which other work (not this test's
/// stream threads) took [`OTHER_WORK_PERCENT`], makes that core's contention a suspect.
pub const CONTENDED_CORE_PERCENT: f64 = 90.0;
pub const OTHER_WORK_PERCENT: f64 = 25.0;
/// Blocks below this (`-l`) make a busy stream thread's own block handling a suspect.
pub const SMALL_BLOCK_BYTES: u64 = 64 << 10;
/// The block a busy thread's probe asks for: TCP's default.
pub const PROBE_BLOCK_BYTES: u64 = crate::wire::params::DEFAULT_BLOCK;

/// What one run was asked for: the flags it differs by from the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `-P`.
    pub streams: u16,
    /// `-w` (absent: kernel autotuning).
    pub window_bytes: Option<u64>,
    /// `-C` (absent: the system's).
    pub congestion: Option<String>,
    /// `--force-window`: `-w` past `net.core.*mem_max` (root).
    #[serde(default)]
    pub force_window: bool,
    /// `-R`: the server sends.
    #[serde(default)]
    pub reverse: bool,
    /// `-l` (absent: TCP's default, 128k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_bytes: Option<u64>,
    /// `-A LOCAL/REMOTE`: each end's cores (absent: that end's automatic placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_cpus: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cpus: Option<Vec<usize>>,
}

impl Settings {
    /// The defaults: one stream, autotuned window, the system's congestion control.
    pub fn baseline() -> Settings {
        Settings {
            streams: 1,
            ..Settings::default()
        }
    }

    /// The flags as a user would type them (`-P 2 -w 16M -C bbr`), or `defaults`.
    pub fn flags(&self) -> String {
        let mut out = Vec::new();
        if self.streams != 1 {
            out.push(format!("-P {}", self.streams));
        }
        if let Some(w) = self.window_bytes {
            out.push(format!("-w {}", format_size(w)));
        }
        if let Some(l) = self.block_bytes {
            out.push(format!("-l {}", format_size(l)));
        }
        if let Some(c) = &self.congestion {
            out.push(format!("-C {c}"));
        }
        if self.force_window {
            out.push("--force-window".into());
        }
        if self.reverse {
            out.push("-R".into());
        }
        if let Some(a) = self.pins() {
            out.push(format!("-A {a}"));
        }
        match out.is_empty() {
            true => "defaults".into(),
            false => out.join(" "),
        }
    }

    /// `-A`'s value (`auto/0`), when either end is placed by hand.
    pub fn pins(&self) -> Option<String> {
        let list = |l: &Option<Vec<usize>>| match l {
            None => "auto".to_string(),
            Some(cpus) => (cpus.iter().map(usize::to_string))
                .collect::<Vec<_>>()
                .join(","),
        };
        (self.local_cpus.is_some() || self.remote_cpus.is_some())
            .then(|| format!("{}/{}", list(&self.local_cpus), list(&self.remote_cpus)))
    }
}

/// Why a run was made: the suspicion it tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// The first run: what the defaults reach.
    Baseline,
    /// Loss under a loss-based congestion control: `-C bbr`.
    ModelBasedCc,
    /// The data in flight fills the window: a larger `-w`.
    LargerWindow,
    /// A standing queue in the socket buffers: a smaller `-w`.
    SmallerWindow,
    /// A stream thread at the top of its core: more streams.
    MoreStreams,
    /// A stream thread's core busy with other work: that end's threads on its idlest core.
    Placement,
    /// A busy stream thread with small blocks: larger blocks (`-l`).
    LargerBlocks,
    /// The sender's side suspected (its thread busy, its core shared): the other end
    /// sends (`-R` toggled).
    Reverse,
}

/// A stream thread's load, and its core.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadLoad {
    pub name: String,
    pub percent: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Softirq share of that core (the receive path's kernel work), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_softirq_percent: Option<f64>,
    /// That core's busy share (all of its work), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_busy_percent: Option<f64>,
    /// The busy share of that core no stream thread of this test took (other processes,
    /// other threads, interrupts), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_other_percent: Option<f64>,
    /// The least busy core of that end's host over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idlest_core: Option<usize>,
}

impl ThreadLoad {
    /// Its core was busy ([`CONTENDED_CORE_PERCENT`]) while the thread itself was not at
    /// the top of it and other work took [`OTHER_WORK_PERCENT`] or more; another core was
    /// less busy.
    pub fn contended(&self) -> bool {
        let busy = self.core_busy_percent.unwrap_or(0.0) >= CONTENDED_CORE_PERCENT;
        let other = self.core_other_percent.unwrap_or(0.0) >= OTHER_WORK_PERCENT;
        let elsewhere = self.idlest_core.is_some() && self.idlest_core != self.core;
        busy && other && elsewhere && self.percent < BUSY_THREAD_PERCENT
    }
}

/// A window grant short of what was asked: the sysctl that capped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowCap {
    /// `net.core.wmem_max` or `net.core.rmem_max`.
    pub sysctl: String,
    pub value_bytes: u64,
    /// Which end's grant fell short: `sender` or `receiver`.
    pub end: String,
}

/// What one run measured, distilled for the planner and the verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Received rate of the whole test.
    pub bits_per_second: f64,
    pub retransmits: u64,
    pub sent_bytes: u64,
    /// MSS of the data connections, when known.
    pub mss: Option<u32>,
    /// The congestion control the senders used.
    pub congestion: String,
    /// Kernel min RTT (TCP_INFO), microseconds.
    pub min_rtt_us: Option<f64>,
    /// Mean block RTT (header echoes), microseconds.
    pub block_rtt_avg_us: Option<f64>,
    /// The window the data in flight can use: half the smaller of the sender's send and
    /// the receiver's receive buffer (Linux doubles what is asked), or with autotuning half
    /// its ceiling (`tcp_rmem`'s third value).
    pub usable_window_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_caps: Vec<WindowCap>,
    /// The busiest stream thread on the sending and on the receiving end.
    pub sender_thread: Option<ThreadLoad>,
    pub receiver_thread: Option<ThreadLoad>,
    /// Jain's index over the streams (several streams only).
    pub jain: Option<f64>,
    /// The receiving kernel dropped segments (the one-run diagnosis found it).
    #[serde(default)]
    pub receiver_drops: bool,
    /// The one-run diagnosis's loss-limited finding: retransmit rate, the Mathis bound for
    /// the measured RTT and MSS, the congestion control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_limited: Option<LossLimited>,
    /// The one-run diagnosis, as text prints it.
    #[serde(default)]
    pub diagnosis: Vec<String>,
}

impl Figures {
    /// Retransmitted segments as a share of those sent, percent.
    pub fn retransmit_percent(&self) -> f64 {
        let mss = f64::from(self.mss.unwrap_or(1448).max(1));
        let segments = (self.sent_bytes as f64 / mss).max(1.0);
        self.retransmits as f64 / segments * 100.0
    }

    /// Bytes in flight at this rate over the path's min RTT.
    pub fn in_flight_bytes(&self) -> Option<f64> {
        Some(self.bits_per_second / 8.0 * self.min_rtt_us? / 1e6)
    }

    /// Block RTT above the kernel's min RTT: the queue a block waited in, microseconds.
    pub fn queue_us(&self) -> Option<f64> {
        Some(self.block_rtt_avg_us? - self.min_rtt_us?)
    }

    /// Block RTT far above the path's: [`QUEUE_RATIO`] times the min RTT, and
    /// [`QUEUE_MIN_EXTRA_US`] above it.
    pub fn queued(&self) -> bool {
        match (self.block_rtt_avg_us, self.min_rtt_us) {
            (Some(block), Some(min)) => {
                block >= QUEUE_RATIO * min && block - min >= QUEUE_MIN_EXTRA_US
            }
            _ => false,
        }
    }

    /// The standing queue in bytes: the queue's time at the measured rate.
    pub fn queue_bytes(&self) -> Option<f64> {
        Some(self.queue_us()?.max(0.0) / 1e6 * self.bits_per_second / 8.0)
    }

    /// Retransmits of [`LOSS_PERCENT`] of the segments or more, or the one-run diagnosis
    /// found the rate held down by loss (below the Mathis bound's reach of the window).
    pub fn lossy(&self) -> bool {
        let share = self.retransmits > 0 && self.retransmit_percent() >= LOSS_PERCENT;
        share || self.loss_limited.is_some()
    }

    /// A sending or receiving stream thread at [`BUSY_THREAD_PERCENT`] of its core.
    pub fn busy_thread(&self) -> bool {
        [&self.sender_thread, &self.receiver_thread]
            .into_iter()
            .flatten()
            .any(|t| t.percent >= BUSY_THREAD_PERCENT)
    }

    /// Loss-based congestion control (everything but BBR).
    pub fn loss_based(&self) -> bool {
        !self.congestion.starts_with("bbr")
    }
}

/// One step: what it tested, with which settings, against which earlier run, and what it
/// measured (or why it measured nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub probe: Probe,
    pub settings: Settings,
    /// The run (index) whose settings this one varied; the baseline varies none.
    pub against: Option<usize>,
    pub seconds: f64,
    pub figures: Option<Figures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the host running the diagnosis offers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host {
    /// `-C bbr` can be set here.
    pub bbr: bool,
    /// Root here: a larger window may go past `net.core.*mem_max` (`--force-window`), so
    /// its run shows what raising the sysctl would do.
    pub root: bool,
}

/// The next run to make: its probe, settings and the run it varies.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub probe: Probe,
    pub settings: Settings,
    pub against: Option<usize>,
}

/// The run with the highest rate (the first of equals), if any measured one.
pub fn best(runs: &[Run]) -> Option<(usize, &Figures)> {
    let mut out: Option<(usize, &Figures)> = None;
    for (i, r) in runs.iter().enumerate() {
        if let Some(f) = &r.figures
            && out.is_none_or(|(_, b)| f.bits_per_second > b.bits_per_second)
        {
            out = Some((i, f));
        }
    }
    out
}

/// The next run, or `None` when the runs so far settle it (or the baseline failed, or
/// `runs_left` is 0). The first is the baseline, with the settings of `start`.
pub fn next(runs: &[Run], start: &Settings, host: Host, runs_left: usize) -> Option<Step> {
    if runs_left == 0 || runs.len() >= MAX_RUNS {
        return None;
    }
    if runs.is_empty() {
        return Some(Step {
            probe: Probe::Baseline,
            settings: start.clone(),
            against: None,
        });
    }
    let (i, f) = best(runs)?;
    let base = &runs[i].settings;
    let tried = |p: Probe| runs.iter().any(|r| r.probe == p);
    let suspects = [
        (Probe::ModelBasedCc, model_based_cc(f, base, host)),
        (Probe::LargerWindow, larger_window(f, base, host)),
        (Probe::SmallerWindow, smaller_window(f, base)),
        (Probe::Placement, placement(f, base)),
        (Probe::LargerBlocks, larger_blocks(f, base)),
        (Probe::MoreStreams, more_streams(f, base)),
        (Probe::Reverse, reverse(f, base)),
    ];
    // A probe is made once, and never repeats the settings of a run already made.
    let made = |s: &Settings| runs.iter().any(|r| &r.settings == s);
    let (probe, settings) = suspects
        .into_iter()
        .find_map(|(p, s)| s.filter(|s| !tried(p) && !made(s)).map(|s| (p, s)))?;
    Some(Step {
        probe,
        settings,
        against: Some(i),
    })
}

/// Loss under a loss-based congestion control (retransmits, or the one-run diagnosis's
/// loss-limited finding), and BBR here: the run again with `-C bbr`.
fn model_based_cc(f: &Figures, base: &Settings, host: Host) -> Option<Settings> {
    (f.lossy() && f.loss_based() && host.bbr).then(|| Settings {
        congestion: Some("bbr".into()),
        ..base.clone()
    })
}

/// Each stream's data in flight fills its usable window: a window four times that (a power
/// of two, 1 MiB to 1 GiB), when that is larger than the one in use.
fn larger_window(f: &Figures, base: &Settings, host: Host) -> Option<Settings> {
    let usable = f.usable_window_bytes? as f64;
    let flight = f.in_flight_bytes()? / f64::from(base.streams.max(1));
    if usable <= 0.0 || flight < WINDOW_FULL * usable {
        return None;
    }
    let want = ((4.0 * flight) as u64)
        .clamp(1 << 20, 1 << 30)
        .next_power_of_two();
    (want as f64 > usable).then(|| Settings {
        window_bytes: Some(want),
        force_window: host.root,
        ..base.clone()
    })
}

/// Block RTT far above the path's: a window near the bandwidth-delay product (each
/// stream's data in flight rounded up to a power of two, at least 256 KiB; Linux doubles
/// the request, which is the headroom), when that is smaller than the one in use.
fn smaller_window(f: &Figures, base: &Settings) -> Option<Settings> {
    if !f.queued() {
        return None;
    }
    let per_stream = f.in_flight_bytes()? / f64::from(base.streams.max(1));
    let want = (per_stream as u64).max(256 << 10).next_power_of_two();
    let now = f.usable_window_bytes.unwrap_or(u64::MAX);
    (want < now).then(|| Settings {
        window_bytes: Some(want),
        ..base.clone()
    })
}

/// A sending or receiving stream thread near 100 % of its core: twice the streams.
fn more_streams(f: &Figures, base: &Settings) -> Option<Settings> {
    (f.busy_thread() && base.streams < MAX_STREAMS).then(|| Settings {
        streams: (base.streams * 2).min(MAX_STREAMS),
        ..base.clone()
    })
}

/// A stream thread's core busy with other work: that end's streams on its idlest core (the
/// sender is this end unless `-R`), the other end placed as before. The busier with
/// other work of the two ends, when both are.
fn placement(f: &Figures, base: &Settings) -> Option<Settings> {
    let ends = [(&f.sender_thread, false), (&f.receiver_thread, true)];
    let other = |t: &ThreadLoad| t.core_other_percent.unwrap_or(0.0);
    let (t, receiver) = (ends.into_iter())
        .filter_map(|(t, r)| Some((t.as_ref().filter(|t| t.contended())?, r)))
        .max_by(|a, b| other(a.0).total_cmp(&other(b.0)))?;
    let cores = Some(vec![t.idlest_core?]);
    let mut s = base.clone();
    match receiver != base.reverse {
        true => s.remote_cpus = cores,
        false => s.local_cpus = cores,
    }
    Some(s)
}

/// A stream thread near 100 % of its core with blocks below [`SMALL_BLOCK_BYTES`]: each
/// block's system call and wake-up are its work; [`PROBE_BLOCK_BYTES`] blocks.
fn larger_blocks(f: &Figures, base: &Settings) -> Option<Settings> {
    let small = base.block_bytes.is_some_and(|l| l < SMALL_BLOCK_BYTES);
    (small && f.busy_thread()).then(|| Settings {
        block_bytes: Some(PROBE_BLOCK_BYTES),
        ..base.clone()
    })
}

/// The sender's side suspected (its stream thread near 100 % of its core, or its core
/// busy with other work): the other end sends, so the run shows what that host reaches.
fn reverse(f: &Figures, base: &Settings) -> Option<Settings> {
    let t = f.sender_thread.as_ref()?;
    (t.percent >= BUSY_THREAD_PERCENT || t.contended()).then(|| Settings {
        reverse: !base.reverse,
        ..base.clone()
    })
}

/// Synthetic runs for the planner's and the verdict's tests.
#[cfg(test)]
pub(crate) mod sample {
    use super::*;

    /// A clean 1 Gbit/s run over a 60 ms path with autotuning's 3 MiB usable window.
    pub fn figures(mbps: f64) -> Figures {
        Figures {
            bits_per_second: mbps * 1e6,
            retransmits: 0,
            sent_bytes: (mbps * 1e6 / 8.0 * 5.0) as u64,
            mss: Some(1448),
            congestion: "cubic".into(),
            min_rtt_us: Some(60_000.0),
            block_rtt_avg_us: Some(62_000.0),
            usable_window_bytes: Some(3 << 20),
            ..Figures::default()
        }
    }

    pub fn run(probe: Probe, settings: Settings, against: Option<usize>, f: Figures) -> Run {
        Run {
            probe,
            settings,
            against,
            seconds: 5.0,
            figures: Some(f),
            error: None,
        }
    }

    /// 0.1 % of the segments retransmitted.
    pub fn lossy(mut f: Figures) -> Figures {
        f.retransmits = (f.sent_bytes / 1448 / 1000).max(1);
        f
    }

    pub fn busy(mut f: Figures, percent: f64) -> Figures {
        f.sender_thread = Some(ThreadLoad {
            name: "stream-0".into(),
            percent,
            core: Some(1),
            core_softirq_percent: None,
            core_busy_percent: Some(percent),
            core_other_percent: Some(0.0),
            idlest_core: Some(0),
        });
        f
    }

    /// The same figures over loopback: 20 us min RTT, 30 us block RTT.
    pub fn on_loopback(mut f: Figures) -> Figures {
        f.min_rtt_us = Some(20.0);
        f.block_rtt_avg_us = Some(30.0);
        f
    }

    /// The receiver's thread on core 1 at `percent`, the core 100 % busy, other work
    /// taking the rest; core 0 the idlest.
    pub fn contended(mut f: Figures, percent: f64) -> Figures {
        f.receiver_thread = Some(ThreadLoad {
            name: "stream-0".into(),
            percent,
            core: Some(1),
            core_softirq_percent: Some(2.0),
            core_busy_percent: Some(100.0),
            core_other_percent: Some(100.0 - percent),
            idlest_core: Some(0),
        });
        f
    }

    /// Few retransmits (below [`LOSS_PERCENT`]), but the one-run diagnosis found the rate
    /// held down by loss: 0.005 % loss over 60 ms at MSS 1448.
    pub fn loss_limited(mut f: Figures) -> Figures {
        f.retransmits = 1;
        f.sent_bytes = 1448 * 20_000;
        f.loss_limited = Some(LossLimited {
            retransmits: 1,
            segments: 20_000.0,
            loss_percent: 0.005,
            mss_bytes: 1448,
            path_rtt_ms: 60.0,
            srtt_ms: 61.0,
            mathis_bps: 33.5e6,
            per_stream_bps: f.bits_per_second,
            window_bytes: 3 << 20,
            window_bps: 419e6,
            congestion: "cubic".into(),
        });
        f
    }

    pub fn with(settings: Settings, f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = settings;
        f(&mut s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::sample::*;
    use super::*;

    const BBR: Host = Host {
        bbr: true,
        root: false,
    };

    /// A case: what the baseline showed, the host, the probe and settings expected.
    type Case = (Figures, Host, Option<(Probe, Settings)>);

    fn baseline(f: Figures) -> Vec<Run> {
        vec![run(Probe::Baseline, Settings::baseline(), None, f)]
    }

    #[test]
    fn each_suspicion_leads_to_its_probe() {
        let bbr = with(Settings::baseline(), |s| s.congestion = Some("bbr".into()));
        let mut queued = figures(100.0);
        queued.block_rtt_avg_us = Some(600_000.0);
        // (what the baseline showed, host, expected probe and settings)
        let table: Vec<Case> = vec![
            (lossy(figures(172.0)), BBR, Some((Probe::ModelBasedCc, bbr))),
            (lossy(figures(172.0)), Host::default(), None),
            (
                figures(400.0), // 3 MB in flight of a 3 MiB window
                BBR,
                Some((
                    Probe::LargerWindow,
                    with(Settings::baseline(), |s| s.window_bytes = Some(16 << 20)),
                )),
            ),
            (
                queued, // 750 kB in flight: the next power of two
                BBR,
                Some((
                    Probe::SmallerWindow,
                    with(Settings::baseline(), |s| s.window_bytes = Some(1 << 20)),
                )),
            ),
            (
                busy(figures(100.0), 99.0),
                BBR,
                Some((
                    Probe::MoreStreams,
                    with(Settings::baseline(), |s| s.streams = 2),
                )),
            ),
            (busy(figures(100.0), 50.0), BBR, None),
            (
                contended(on_loopback(figures(6870.0)), 46.0),
                BBR,
                Some((
                    Probe::Placement,
                    with(Settings::baseline(), |s| s.remote_cpus = Some(vec![0])),
                )),
            ),
            // At the top of its core itself: not contention but its own work.
            (
                contended(on_loopback(figures(6870.0)), 95.0),
                BBR,
                Some(more_streams_2()),
            ),
            (figures(100.0), BBR, None),
        ];
        for (i, (f, host, want)) in table.into_iter().enumerate() {
            let got =
                next(&baseline(f), &Settings::baseline(), host, 5).map(|s| (s.probe, s.settings));
            assert_eq!(got, want, "case {i}");
        }
    }

    fn more_streams_2() -> (Probe, Settings) {
        (
            Probe::MoreStreams,
            with(Settings::baseline(), |s| s.streams = 2),
        )
    }

    #[test]
    fn a_contended_core_moves_the_end_it_holds_to_the_idlest_core() {
        // Under -R the receiver is this end.
        let reversed = with(Settings::baseline(), |s| s.reverse = true);
        let runs = vec![run(
            Probe::Baseline,
            reversed.clone(),
            None,
            contended(on_loopback(figures(6870.0)), 46.0),
        )];
        let step = next(&runs, &reversed, BBR, 5).map(|s| s.settings);
        let want = with(reversed, |s| s.local_cpus = Some(vec![0]));
        assert_eq!(step.as_ref(), Some(&want));
        assert_eq!(want.flags(), "-R -A 0/auto");
        // The idlest core is the one it is on: nowhere better to go.
        let mut f = contended(on_loopback(figures(6870.0)), 46.0);
        if let Some(t) = f.receiver_thread.as_mut() {
            t.idlest_core = Some(1);
        }
        assert_eq!(next(&baseline(f), &Settings::baseline(), BBR, 5), None);
    }

    #[test]
    fn each_added_suspicion_leads_to_its_probe() {
        let small = with(Settings::baseline(), |s| s.block_bytes = Some(8 << 10));
        let most = with(Settings::baseline(), |s| s.streams = MAX_STREAMS);
        let lossy_few = loss_limited(figures(40.0));
        assert!(lossy_few.retransmit_percent() < LOSS_PERCENT);
        // (baseline settings, what it showed, expected probe and settings)
        let table = vec![
            (
                Settings::baseline(),
                lossy_few,
                Some((
                    Probe::ModelBasedCc,
                    with(Settings::baseline(), |s| s.congestion = Some("bbr".into())),
                )),
            ),
            (
                small.clone(),
                busy(figures(100.0), 99.0),
                Some((
                    Probe::LargerBlocks,
                    with(small.clone(), |s| s.block_bytes = Some(128 << 10)),
                )),
            ),
            // A busy sender that more streams cannot relieve: the other end sends.
            (
                most.clone(),
                busy(figures(100.0), 99.0),
                Some((Probe::Reverse, with(most.clone(), |s| s.reverse = true))),
            ),
            // A busy receiver is not the sender's side.
            (most.clone(), swap_ends(busy(figures(100.0), 99.0)), None),
        ];
        for (i, (start, f, want)) in table.into_iter().enumerate() {
            let runs = vec![run(Probe::Baseline, start.clone(), None, f)];
            let got = next(&runs, &start, BBR, 5).map(|s| (s.probe, s.settings));
            assert_eq!(got, want, "case {i}");
        }
    }

    fn swap_ends(mut f: Figures) -> Figures {
        std::mem::swap(&mut f.sender_thread, &mut f.receiver_thread);
        f
    }

    #[test]
    fn as_root_a_larger_window_goes_past_the_sysctl_cap() {
        let root = Host {
            bbr: true,
            root: true,
        };
        let step = next(&baseline(figures(400.0)), &Settings::baseline(), root, 5);
        let want = with(Settings::baseline(), |s| {
            s.window_bytes = Some(16 << 20);
            s.force_window = true;
        });
        assert_eq!(step.map(|s| s.settings), Some(want));
    }

    #[test]
    fn the_first_run_is_the_baseline_and_the_budget_ends_the_steps() {
        let first = next(&[], &Settings::baseline(), BBR, 5).map(|s| (s.probe, s.settings));
        assert_eq!(first, Some((Probe::Baseline, Settings::baseline())));
        assert_eq!(next(&[], &Settings::baseline(), BBR, 0), None);
        assert_eq!(
            next(
                &baseline(lossy(figures(172.0))),
                &Settings::baseline(),
                BBR,
                0
            ),
            None
        );
    }

    #[test]
    fn a_probe_varies_the_best_run_and_is_not_repeated() {
        // Baseline lossy; bbr lifted it and now fills the window: -w on top of -C bbr.
        let bbr = with(Settings::baseline(), |s| s.congestion = Some("bbr".into()));
        let mut lifted = figures(515.0);
        lifted.congestion = "bbr".into();
        let mut runs = baseline(lossy(figures(172.0)));
        runs.push(run(Probe::ModelBasedCc, bbr.clone(), Some(0), lifted));
        let step = next(&runs, &Settings::baseline(), BBR, 5);
        let want = with(bbr, |s| s.window_bytes = Some(16 << 20));
        assert_eq!(step.as_ref().map(|s| &s.settings), Some(&want));
        assert_eq!(step.and_then(|s| s.against), Some(1));
        // bbr did not lift it: the baseline stays best and bbr is not tried again.
        let mut flat = runs.clone();
        flat[1].figures = Some(lossy(figures(150.0)));
        assert_eq!(next(&flat, &Settings::baseline(), BBR, 5), None);
    }

    #[test]
    fn a_probe_never_repeats_a_run_already_made() {
        // -w 8M at the path's rate; -w 32M a little faster, with the queue it made: a
        // smaller window from there would be the baseline again.
        let w8 = with(Settings::baseline(), |s| s.window_bytes = Some(8 << 20));
        let w32 = with(Settings::baseline(), |s| s.window_bytes = Some(32 << 20));
        let mut at_rate = figures(921.0);
        at_rate.usable_window_bytes = Some(8 << 20);
        let mut queued = figures(932.0);
        queued.block_rtt_avg_us = Some(518_800.0);
        queued.usable_window_bytes = Some(32 << 20);
        let runs = vec![
            run(Probe::Baseline, w8.clone(), None, at_rate),
            run(Probe::LargerWindow, w32, Some(0), queued),
        ];
        assert_eq!(next(&runs, &w8, BBR, 5), None);
    }

    #[test]
    fn a_failed_baseline_ends_the_steps() {
        let mut runs = baseline(figures(1.0));
        runs[0].figures = None;
        runs[0].error = Some("connection refused".into());
        assert_eq!(next(&runs, &Settings::baseline(), BBR, 5), None);
    }

    #[test]
    fn flags_read_as_typed() {
        assert_eq!(Settings::baseline().flags(), "defaults");
        let s = Settings {
            streams: 2,
            window_bytes: Some(16 << 20),
            congestion: Some("bbr".into()),
            force_window: true,
            remote_cpus: Some(vec![0, 2]),
            ..Settings::default()
        };
        assert_eq!(s.flags(), "-P 2 -w 16M -C bbr --force-window -A auto/0,2");
        let s = with(Settings::baseline(), |s| {
            s.block_bytes = Some(8 << 10);
            s.reverse = true;
        });
        assert_eq!(s.flags(), "-l 8k -R");
    }
}
