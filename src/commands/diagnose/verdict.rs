//! The verdict of `pinperf diagnose`: a pure function of its runs. The limit is the one a
//! probe lifted most (confirmed by that run: its rate beside the rate of the run it
//! varied); when no probe lifted the rate but a smaller window kept it with far less
//! queue, a standing queue at the path's rate (confirmed by that run: both block RTTs);
//! else the limit the best run's figures show, said to be unconfirmed, or the path's
//! rate. With the settings that lift it: the flags of the best run and the sysctls they
//! need.

use serde::{Deserialize, Serialize};

use super::plan::{Figures, OTHER_WORK_PERCENT, Probe, Run, ThreadLoad, best};
use crate::report::finding::{Advice, Setting, human_bytes, human_rate};
use crate::units::format_size;

/// A probe's rate over its parent's that counts as lifting the limit.
pub const LIFT: f64 = 1.15;
/// Jain's index below which several streams did not share the path evenly.
pub const UNFAIR_JAIN: f64 = 0.8;

/// What limits the path and the hosts, in the field's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Nothing tried lifted the rate: the wire or the path.
    PathRate,
    /// The window (a `-w` or a `net.core.*mem_max` cap) short of the bandwidth-delay product.
    Window,
    /// Packet loss holding a loss-based congestion control down.
    Loss,
    /// A standing queue in the socket buffers (bufferbloat at the sender).
    StandingQueue,
    SenderCpu,
    ReceiverCpu,
    /// The receiving kernel dropped segments.
    ReceiverDrops,
    /// Several streams did not share the path evenly.
    Unfairness,
    /// No run measured anything.
    NotMeasured,
}

/// The verdict: the limit, its words (with the figures), whether a run confirmed it and
/// how (`lift`), the settings advised, and what else the runs showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub limit: Limit,
    pub words: String,
    /// A run changed the setting and lifted the rate (or, for a queue, kept it).
    pub confirmed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lift: Option<Lift>,
    /// The best run's rate beside the baseline's.
    pub baseline_bps: Option<f64>,
    pub best_bps: Option<f64>,
    pub advice: Advice,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The confirming run beside the run it varied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lift {
    /// Runs, by index into the runs.
    pub run: usize,
    pub against: usize,
    /// The flags that changed (`-C bbr`).
    pub flags: String,
    pub before_bps: f64,
    pub after_bps: f64,
    /// A smaller window's run: the mean block RTT of each, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_block_rtt_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_block_rtt_us: Option<f64>,
}

impl Lift {
    /// Run `i` beside run `a`, which it varied.
    fn of(runs: &[Run], (i, a): (usize, usize), before: &Figures, after: &Figures) -> Lift {
        let queue = runs[i].probe == Probe::SmallerWindow;
        Lift {
            run: i,
            against: a,
            flags: changed_flags(runs, i, a),
            before_bps: before.bits_per_second,
            after_bps: after.bits_per_second,
            before_block_rtt_us: before.block_rtt_avg_us.filter(|_| queue),
            after_block_rtt_us: after.block_rtt_avg_us.filter(|_| queue),
        }
    }

    /// "`-C bbr`: 515 vs 172 Mb/s", and for a smaller window ", block RTT 127 ms vs 1.8 s".
    pub fn words(&self) -> String {
        let mut w = format!(
            "{}: {} vs {}",
            self.flags,
            human_rate(self.after_bps),
            human_rate(self.before_bps)
        );
        if let (Some(a), Some(b)) = (self.after_block_rtt_us, self.before_block_rtt_us) {
            w.push_str(&format!(", block RTT {} vs {}", rtt(Some(a)), rtt(Some(b))));
        }
        w
    }
}

/// The verdict of `runs`.
pub fn decide(runs: &[Run]) -> Verdict {
    let Some((_, best_f)) = best(runs) else {
        let why = runs.iter().find_map(|r| r.error.clone());
        return verdict(
            Limit::NotMeasured,
            format!(
                "no run measured anything: {}",
                why.unwrap_or_else(|| "no run fit the budget".into())
            ),
            None,
        );
    };
    let queue = relieved_queue(runs);
    let mut v = match (confirmed(runs), queue) {
        (Some((lift, probe)), _) => from_lift(runs, lift, probe),
        (None, Some(qa)) => at_rate_with_queue(runs, qa),
        (None, None) => unconfirmed(runs, best_f),
    };
    v.baseline_bps = runs
        .first()
        .and_then(|r| r.figures.as_ref())
        .map(|f| f.bits_per_second);
    v.best_bps = Some(best_f.bits_per_second);
    let adopt = adopted(runs, queue);
    // An unconfirmed window verdict advises the sysctls of the run its cap was seen in.
    let capped = (v.limit == Limit::Window && v.lift.is_none())
        .then(|| {
            runs.iter().position(|r| {
                r.figures
                    .as_ref()
                    .is_some_and(|f| !f.window_caps.is_empty())
            })
        })
        .flatten();
    advise(runs, adopt, capped.unwrap_or(adopt), &mut v.advice);
    v.notes = notes(runs, v.lift.as_ref().map(|l| l.run));
    if let Some((q, a)) = queue.filter(|&(q, _)| v.lift.as_ref().is_none_or(|l| l.run != q)) {
        let (before, after) = (runs[a].figures.as_ref(), runs[q].figures.as_ref());
        if let (Some(bf), Some(af)) = (before, after) {
            let flags = changed_flags(runs, q, a);
            let streams = runs[a].settings.streams;
            let words = queue_words(bf, af, streams, &flags);
            v.notes.insert(0, format!("also: {words}"));
        }
    }
    v
}

/// The run whose flags are advised: the fastest of the runs that lifted the rate over the
/// run they varied (or the smaller window that kept its rate with less queue); with none,
/// a smaller window's that kept the rate with less queue; else the baseline.
fn adopted(runs: &[Run], queue: Option<(usize, usize)>) -> usize {
    let lifted = pairs(runs)
        .filter(|(_, _, bf, af)| af.bits_per_second >= LIFT * bf.bits_per_second)
        .max_by(|x, y| x.3.bits_per_second.total_cmp(&y.3.bits_per_second))
        .map(|(i, ..)| i);
    match (lifted, queue) {
        (Some(l), Some((q, a))) if a == l => q,
        (Some(l), _) => l,
        (None, q) => q.map_or(0, |(q, _)| q),
    }
}

/// A smaller window's run that kept the rate with far less queue, and the run it varied.
fn relieved_queue(runs: &[Run]) -> Option<(usize, usize)> {
    pairs(runs)
        .find(|(i, _, bf, af)| runs[*i].probe == Probe::SmallerWindow && queue_relieved(bf, af))
        .map(|(i, a, ..)| (i, a))
}

fn verdict(limit: Limit, words: String, lift: Option<Lift>) -> Verdict {
    Verdict {
        limit,
        words,
        confirmed: lift.is_some(),
        lift,
        baseline_bps: None,
        best_bps: None,
        advice: Advice::none(),
        notes: Vec::new(),
    }
}

/// Each probe run with its parent's figures and its own.
fn pairs(runs: &[Run]) -> impl Iterator<Item = (usize, usize, &Figures, &Figures)> {
    runs.iter().enumerate().filter_map(|(i, r)| {
        let a = r.against?;
        Some((i, a, runs.get(a)?.figures.as_ref()?, r.figures.as_ref()?))
    })
}

/// A standing queue's probe kept the rate and at least halved the queue (block RTT above
/// the kernel's min RTT).
fn queue_relieved(before: &Figures, after: &Figures) -> bool {
    let halved = match (before.queue_us(), after.queue_us()) {
        (Some(b), Some(a)) => a * 2.0 <= b,
        _ => false,
    };
    halved && after.bits_per_second >= 0.9 * before.bits_per_second
}

/// The probe that lifted the rate most.
fn confirmed(runs: &[Run]) -> Option<(Lift, Probe)> {
    let (i, a, bf, af) = pairs(runs)
        .filter(|(_, _, bf, af)| af.bits_per_second >= LIFT * bf.bits_per_second)
        .max_by(|x, y| {
            (x.3.bits_per_second / x.2.bits_per_second)
                .total_cmp(&(y.3.bits_per_second / y.2.bits_per_second))
        })?;
    Some((Lift::of(runs, (i, a), bf, af), runs[i].probe))
}

/// The flags run `i` changed from run `a`.
fn changed_flags(runs: &[Run], i: usize, a: usize) -> String {
    let (s, p) = (&runs[i].settings, &runs[a].settings);
    let mut out = Vec::new();
    if s.streams != p.streams {
        out.push(format!("-P {}", s.streams));
    }
    if s.window_bytes != p.window_bytes {
        out.push(
            s.window_bytes
                .map_or("-w auto".into(), |w| format!("-w {}", format_size(w))),
        );
    }
    if s.block_bytes != p.block_bytes {
        let l = s.block_bytes.unwrap_or(crate::wire::params::DEFAULT_BLOCK);
        out.push(format!("-l {}", format_size(l)));
    }
    if s.congestion != p.congestion {
        out.push(format!(
            "-C {}",
            s.congestion.as_deref().unwrap_or("default")
        ));
    }
    if s.reverse != p.reverse {
        out.push(if s.reverse { "-R" } else { "no -R" }.into());
    }
    if s.pins() != p.pins() {
        out.push(format!("-A {}", s.pins().unwrap_or_else(|| "auto".into())));
    }
    out.join(" ")
}

/// The verdict a confirming run gives.
fn from_lift(runs: &[Run], lift: Lift, probe: Probe) -> Verdict {
    let before = runs[lift.against].figures.clone().unwrap_or_default();
    let after = runs[lift.run].figures.clone().unwrap_or_default();
    let (limit, words) = match probe {
        Probe::ModelBasedCc => (Limit::Loss, loss_words(&before, Some(&after))),
        Probe::LargerWindow => {
            let forced = runs[lift.run].settings.force_window;
            (Limit::Window, window_words(&before, &after, forced))
        }
        Probe::SmallerWindow => {
            let streams = runs[lift.against].settings.streams;
            let words = queue_words(&before, &after, streams, &lift.flags);
            (Limit::StandingQueue, words)
        }
        Probe::Placement => placement_words(&runs[lift.run].settings, &before, &after),
        Probe::LargerBlocks => {
            let (limit, head) = cpu_head(&before);
            let words = format!(
                "{head}; with {} it reached {}: each block's system call and wake-up were \
                 its work",
                lift.flags,
                human_rate(after.bits_per_second)
            );
            (limit, words)
        }
        Probe::Reverse => reverse_words(&before, &after, &lift.flags),
        Probe::MoreStreams | Probe::Baseline => cpu_words(&before, true),
    };
    verdict(limit, words, Some(lift))
}

fn loss_words(f: &Figures, bbr: Option<&Figures>) -> String {
    let mut held = format!(
        "loss: {} retransmits ({:.3} % of segments) held {} to {}",
        f.retransmits,
        f.retransmit_percent(),
        f.congestion,
        human_rate(f.bits_per_second)
    );
    if let Some(l) = &f.loss_limited {
        held.push_str(&format!(
            " ({} per stream; the Mathis bound at {:.3} % loss, {:.1} ms and MSS {} B is {})",
            human_rate(l.per_stream_bps),
            l.loss_percent,
            l.path_rtt_ms,
            l.mss_bytes,
            human_rate(l.mathis_bps)
        ));
    }
    match bbr {
        Some(b) => format!(
            "{held}; {}, model-based, reached {} on the same path",
            b.congestion,
            human_rate(b.bits_per_second)
        ),
        None => format!("{held}; a loss-based congestion control cannot fill a lossy path"),
    }
}

fn window_words(before: &Figures, after: &Figures, forced: bool) -> String {
    let flight = before.in_flight_bytes().unwrap_or(0.0);
    let mut w = format!(
        "window: {} in flight (rate x {} min RTT) filled the usable window of {}; a larger \
         one reached {}",
        human_bytes(flight),
        rtt(before.min_rtt_us),
        human_bytes(before.usable_window_bytes.unwrap_or(0) as f64),
        human_rate(after.bits_per_second)
    );
    if let Some(cap) = after.window_caps.first() {
        w.push_str(&cap_words(cap));
        if forced {
            w.push_str(" (that run went past it with --force-window, as raising it would)");
        }
    }
    w
}

fn cap_words(cap: &super::plan::WindowCap) -> String {
    format!(
        "; {}={} caps the {}'s grant",
        cap.sysctl, cap.value_bytes, cap.end
    )
}

/// No probe lifted the rate, but a smaller window kept it with far less queue: the path
/// is at its rate, and the queue is the window's doing.
fn at_rate_with_queue(runs: &[Run], (q, a): (usize, usize)) -> Verdict {
    let (bf, af) = match (&runs[a].figures, &runs[q].figures) {
        (Some(bf), Some(af)) => (bf, af),
        _ => return verdict(Limit::NotMeasured, "no figures".into(), None),
    };
    let lift = Lift::of(runs, (q, a), bf, af);
    let words = format!(
        "{}; the path is at its rate",
        queue_words(bf, af, runs[a].settings.streams, &lift.flags)
    );
    verdict(Limit::StandingQueue, words, Some(lift))
}

/// The queue `before` stood in (block RTT over the kernel's min RTT, in time and bytes),
/// the bandwidth-delay product per stream, and what the smaller window (`flags`) reached.
fn queue_words(before: &Figures, after: &Figures, streams: u16, flags: &str) -> String {
    let per_stream = f64::from(streams.max(1));
    let queue_ms = before.queue_us().unwrap_or(0.0) / 1e3;
    let queue_bytes = before.queue_bytes().unwrap_or(0.0) / per_stream;
    let bdp = before.in_flight_bytes().unwrap_or(0.0) / per_stream;
    format!(
        "standing queue (bufferbloat in the socket buffers): block RTT {} over a {} path \
         (kernel min RTT), a queue of {queue_ms:.0} ms, {} per stream, at {}; the \
         bandwidth-delay product is {} per stream, and {flags} reached {} with block RTT {}",
        rtt(before.block_rtt_avg_us),
        rtt(before.min_rtt_us),
        human_bytes(queue_bytes),
        human_rate(before.bits_per_second),
        human_bytes(bdp),
        human_rate(after.bits_per_second),
        rtt(after.block_rtt_avg_us)
    )
}

/// An RTT in words: `60.1 ms`, `23 us`, `-` when unknown.
pub fn rtt(us: Option<f64>) -> String {
    match us {
        None => "-".into(),
        Some(v) if v < 1000.0 => format!("{v:.0} us"),
        Some(v) => format!("{:.1} ms", v / 1e3),
    }
}

/// The busier end's stream thread, its limit and words (`lifted`: more streams helped).
fn cpu_words(f: &Figures, lifted: bool) -> (Limit, String) {
    let (limit, head) = cpu_head(f);
    let how = match lifted {
        true => "more streams spread the work",
        false => "more streams did not lift the rate (or were not tried)",
    };
    (limit, format!("{head}; {how}"))
}

/// "receiver CPU: stream-0 at 99 % of a core on core 1, … at 941 Mb/s": the busier end.
fn cpu_head(f: &Figures) -> (Limit, String) {
    let load = |t: &Option<ThreadLoad>| t.as_ref().map_or(0.0, |t| t.percent);
    let (limit, end, t) = if load(&f.sender_thread) >= load(&f.receiver_thread) {
        (Limit::SenderCpu, "sender", &f.sender_thread)
    } else {
        (Limit::ReceiverCpu, "receiver", &f.receiver_thread)
    };
    let who = t.as_ref().map_or("a stream thread".into(), thread_words);
    let rate = human_rate(f.bits_per_second);
    (limit, format!("{end} CPU: {who} at {rate}"))
}

/// The sending end's side: the run with the other end sending lifted the rate.
fn reverse_words(before: &Figures, after: &Figures, flags: &str) -> (Limit, String) {
    let who = (before.sender_thread.as_ref()).map_or("a stream thread".into(), thread_words);
    let words = format!(
        "sender side: its {who} at {}; with the other end sending ({flags}) the path took {}",
        human_rate(before.bits_per_second),
        human_rate(after.bits_per_second)
    );
    (Limit::SenderCpu, words)
}

/// "stream-0 at 46 % of a core on core 1, softirq 2 % of that core, other work 54 %".
fn thread_words(t: &ThreadLoad) -> String {
    let core = t.core.map_or(String::new(), |c| format!(" on core {c}"));
    let softirq = t.core_softirq_percent.map_or(String::new(), |s| {
        format!(", softirq {s:.0} % of that core")
    });
    let other = (t.core_other_percent)
        .filter(|&o| o >= OTHER_WORK_PERCENT)
        .map_or(String::new(), |o| {
            format!(", other work (not this test's stream threads) {o:.0} %")
        });
    format!(
        "{} at {:.0} % of a core{core}{softirq}{other}",
        t.name, t.percent
    )
}

/// The end a placement probe moved (`settings`: its run's), its thread on the core it
/// shared with other work, and the rate it reached on another core.
fn placement_words(
    settings: &super::plan::Settings,
    before: &Figures,
    after: &Figures,
) -> (Limit, String) {
    let remote_moved = settings.remote_cpus.is_some();
    let (limit, end, t, moved) = match remote_moved != settings.reverse {
        true => (
            Limit::ReceiverCpu,
            "receiver",
            &before.receiver_thread,
            &after.receiver_thread,
        ),
        false => (
            Limit::SenderCpu,
            "sender",
            &before.sender_thread,
            &after.sender_thread,
        ),
    };
    let who = t.as_ref().map_or("a stream thread".into(), thread_words);
    let core = |t: &Option<ThreadLoad>| {
        t.as_ref()
            .and_then(|t| t.core)
            .map_or("another core".into(), |c| format!("core {c}"))
    };
    let words = format!(
        "{end} CPU: {who}, at {}: its core was busy with other work; on {} (-A {}) it \
         reached {}",
        human_rate(before.bits_per_second),
        core(moved),
        settings.pins().unwrap_or_default(),
        human_rate(after.bits_per_second)
    );
    (limit, words)
}

/// With no probe lifting the rate: what the best run (and the probes that failed) show.
fn unconfirmed(runs: &[Run], f: &Figures) -> Verdict {
    // A cap that bound a grant: --force-window went past it.
    let capped = (runs.iter().filter(|r| !r.settings.force_window))
        .find_map(|r| r.figures.as_ref()?.window_caps.first().cloned());
    let busy = f.busy_thread();
    let (limit, words) = if let Some(cap) = capped {
        let w = format!(
            "window, unconfirmed: the grant is capped{}",
            cap_words(&cap)
        );
        (Limit::Window, w)
    } else if f.receiver_drops {
        (
            Limit::ReceiverDrops,
            "receiver drops: the receiving kernel dropped segments".into(),
        )
    } else if busy {
        cpu_words(f, false)
    } else if f.lossy() && f.loss_based() {
        (
            Limit::Loss,
            format!(
                "{}; unconfirmed (no model-based run lifted it)",
                loss_words(f, None)
            ),
        )
    } else if runs.iter().filter_map(|r| r.figures.as_ref()).any(unfair) {
        (
            Limit::Unfairness,
            "unfairness: several streams did not share the path evenly".into(),
        )
    } else {
        let cc = match f.retransmits {
            0 => String::new(),
            n => format!(
                " ({n} retransmits, {:.3} %, under {})",
                f.retransmit_percent(),
                f.congestion
            ),
        };
        let w = format!(
            "the path's rate: {}{cc}; no window filled, no busy thread, and nothing tried \
             lifted it",
            human_rate(f.bits_per_second)
        );
        (Limit::PathRate, w)
    };
    verdict(limit, words, None)
}

fn unfair(f: &Figures) -> bool {
    f.jain.is_some_and(|j| j < UNFAIR_JAIN)
}

/// Run `adopt`'s flags beyond the baseline's, the sysctls they need, and the window
/// sysctls that capped run `capped`'s window.
fn advise(runs: &[Run], adopt: usize, capped: usize, advice: &mut Advice) {
    let (s, b) = (&runs[adopt].settings, &runs[0].settings);
    if s.streams != b.streams {
        advice.flags.push(Setting::set("-P", s.streams.to_string()));
    }
    if let Some(w) = s.window_bytes.filter(|_| s.window_bytes != b.window_bytes) {
        advice.flags.push(Setting::set("-w", format_size(w)));
    }
    if let Some(c) = s
        .congestion
        .as_ref()
        .filter(|_| s.congestion != b.congestion)
    {
        advice.flags.push(Setting::set("-C", c.clone()));
        let sysctl = "net.ipv4.tcp_congestion_control";
        advice.sysctls.push(Setting::set(sysctl, c.clone()));
    }
    if let Some(l) = s.block_bytes.filter(|_| s.block_bytes != b.block_bytes) {
        advice.flags.push(Setting::set("-l", format_size(l)));
    }
    // -R is not advised: which end sends is what the test is for, not a setting; its
    // run is the evidence of the verdict.
    if let Some(a) = s.pins().filter(|_| s.pins() != b.pins()) {
        advice.flags.push(Setting::set("-A", a));
    }
    // Each sysctl that capped run `capped`'s window, raised to that window.
    let r = &runs[capped];
    if let (Some(f), Some(w)) = (&r.figures, r.settings.window_bytes) {
        for cap in &f.window_caps {
            advice
                .sysctls
                .push(Setting::set(&cap.sysctl, w.to_string()));
        }
    }
}

/// What else the runs showed: lifts besides the verdict's, and uneven shares.
fn notes(runs: &[Run], verdict_run: Option<usize>) -> Vec<String> {
    let mut out: Vec<String> = pairs(runs)
        .filter(|(i, ..)| Some(*i) != verdict_run && runs[*i].probe != Probe::SmallerWindow)
        .filter(|(_, _, bf, af)| af.bits_per_second >= LIFT * bf.bits_per_second)
        .map(|(i, a, bf, af)| format!("also lifted: {}", Lift::of(runs, (i, a), bf, af).words()))
        .collect();
    for (i, r) in runs.iter().enumerate() {
        if let Some(j) = r
            .figures
            .as_ref()
            .and_then(|f| f.jain)
            .filter(|&j| j < UNFAIR_JAIN)
        {
            out.push(format!(
                "run {}: uneven shares over {} streams (Jain {j:.2})",
                i + 1,
                r.settings.streams
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::diagnose::plan::sample::*;
    use crate::commands::diagnose::plan::{Settings, WindowCap};

    fn bbr() -> Settings {
        with(Settings::baseline(), |s| s.congestion = Some("bbr".into()))
    }

    fn window(w: u64) -> Settings {
        with(Settings::baseline(), |s| s.window_bytes = Some(w))
    }

    fn as_bbr(mut f: Figures) -> Figures {
        f.congestion = "bbr".into();
        f
    }

    fn queued(mut f: Figures, block_ms: f64) -> Figures {
        f.block_rtt_avg_us = Some(block_ms * 1e3);
        f
    }

    fn capped(mut f: Figures) -> Figures {
        f.window_caps = vec![WindowCap {
            sysctl: "net.core.rmem_max".into(),
            value_bytes: 212_992,
            end: "receiver".into(),
        }];
        f
    }

    fn base(f: Figures) -> Run {
        run(Probe::Baseline, Settings::baseline(), None, f)
    }

    /// (runs, expected limit, confirmed, advised flags)
    fn cases() -> Vec<(Vec<Run>, Limit, bool, Vec<&'static str>)> {
        let lossy_base = base(lossy(figures(172.0)));
        let bbr_run = run(Probe::ModelBasedCc, bbr(), Some(0), as_bbr(figures(515.0)));
        let bbr_window = with(bbr(), |s| s.window_bytes = Some(16 << 20));
        let then_window = |mbps: f64| {
            let r = run(
                Probe::LargerWindow,
                bbr_window.clone(),
                Some(1),
                as_bbr(figures(mbps)),
            );
            vec![lossy_base.clone(), bbr_run.clone(), r]
        };
        vec![
            // A window 9 % faster is no lift: only -C bbr is advised.
            (then_window(560.0), Limit::Loss, true, vec!["-C bbr"]),
            (
                then_window(900.0),
                Limit::Loss,
                true,
                vec!["-w 16M", "-C bbr"],
            ),
            (
                {
                    // The larger window stood a queue; a smaller one kept its rate.
                    let mut runs = then_window(900.0);
                    if let Some(f) = runs[2].figures.as_mut() {
                        f.block_rtt_avg_us = Some(370_000.0);
                    }
                    let smaller = with(bbr(), |s| s.window_bytes = Some(8 << 20));
                    let f = queued(as_bbr(figures(910.0)), 120.0);
                    runs.push(run(Probe::SmallerWindow, smaller, Some(2), f));
                    runs
                },
                Limit::Loss,
                true,
                vec!["-w 8M", "-C bbr"],
            ),
            (
                vec![
                    lossy_base.clone(),
                    run(Probe::ModelBasedCc, bbr(), Some(0), as_bbr(figures(515.0))),
                ],
                Limit::Loss,
                true,
                vec!["-C bbr"],
            ),
            (
                vec![
                    lossy_base.clone(),
                    run(
                        Probe::ModelBasedCc,
                        bbr(),
                        Some(0),
                        lossy(as_bbr(figures(160.0))),
                    ),
                ],
                Limit::Loss,
                false,
                vec![],
            ),
            (
                vec![
                    base(figures(400.0)),
                    run(
                        Probe::LargerWindow,
                        window(16 << 20),
                        Some(0),
                        figures(900.0),
                    ),
                ],
                Limit::Window,
                true,
                vec!["-w 16M"],
            ),
            (
                vec![
                    base(figures(400.0)),
                    run(
                        Probe::LargerWindow,
                        window(16 << 20),
                        Some(0),
                        capped(figures(30.0)),
                    ),
                ],
                Limit::Window,
                false,
                vec![],
            ),
            (
                vec![
                    base(queued(figures(100.0), 600.0)),
                    run(
                        Probe::SmallerWindow,
                        window(2 << 20),
                        Some(0),
                        figures(98.0),
                    ),
                ],
                // At the path's rate with less queue: confirmed by keeping the rate.
                Limit::StandingQueue,
                true,
                vec!["-w 2M"],
            ),
            (
                vec![
                    base(queued(figures(100.0), 600.0)),
                    run(
                        Probe::SmallerWindow,
                        window(2 << 20),
                        Some(0),
                        figures(180.0),
                    ),
                ],
                Limit::StandingQueue,
                true,
                vec!["-w 2M"],
            ),
            (
                vec![
                    base(busy(figures(100.0), 99.0)),
                    run(
                        Probe::MoreStreams,
                        with(Settings::baseline(), |s| s.streams = 2),
                        Some(0),
                        figures(190.0),
                    ),
                ],
                Limit::SenderCpu,
                true,
                vec!["-P 2"],
            ),
            (
                vec![base(busy(figures(100.0), 99.0))],
                Limit::SenderCpu,
                false,
                vec![],
            ),
            (vec![base(figures(941.0))], Limit::PathRate, false, vec![]),
            // Past the sysctl with --force-window: the cap bound no grant.
            (
                vec![run(
                    Probe::Baseline,
                    with(window(8 << 20), |s| s.force_window = true),
                    None,
                    capped(figures(927.0)),
                )],
                Limit::PathRate,
                false,
                vec![],
            ),
            // Retransmits under a model-based cc that nothing lifted: not loss's doing.
            (
                vec![base(lossy(as_bbr(figures(341.0))))],
                Limit::PathRate,
                false,
                vec![],
            ),
        ]
    }

    #[test]
    fn each_case_names_its_limit_and_advises_the_best_run_s_flags() {
        for (i, (runs, limit, confirmed, flags)) in cases().into_iter().enumerate() {
            let v = decide(&runs);
            assert_eq!(
                (v.limit, v.confirmed),
                (limit, confirmed),
                "case {i}: {}",
                v.words
            );
            let got: Vec<String> = v
                .advice
                .flags
                .iter()
                .map(|s| format!("{} {}", s.name, s.value.as_deref().unwrap_or("")))
                .collect();
            assert_eq!(got, flags, "case {i}");
        }
    }

    #[test]
    fn the_loss_verdict_says_what_each_congestion_control_reached() {
        let runs = &cases()[0].0;
        let v = decide(runs);
        assert!(v.words.contains("held cubic to 172 Mb/s"), "{}", v.words);
        assert!(
            v.words.contains("bbr, model-based, reached 515 Mb/s"),
            "{}",
            v.words
        );
        let lift = v.lift.map(|l| l.words());
        assert_eq!(lift.as_deref(), Some("-C bbr: 515 Mb/s vs 172 Mb/s"));
        let sysctl = &v.advice.sysctls[0];
        assert_eq!(sysctl.name, "net.ipv4.tcp_congestion_control");
    }

    #[test]
    fn a_queue_the_smaller_window_removed_is_said_with_its_size_and_both_block_rtts() {
        // 256 MiB windows at 952 Mb/s over 60 ms: 1.8 s of queue; -w 8M kept the rate.
        let mut deep = queued(figures(952.0), 1812.0);
        deep.usable_window_bytes = Some(256 << 20);
        let runs = vec![
            run(Probe::Baseline, window(256 << 20), None, deep),
            run(
                Probe::SmallerWindow,
                window(8 << 20),
                Some(0),
                queued(figures(927.0), 127.0),
            ),
        ];
        let v = decide(&runs);
        assert_eq!((v.limit, v.confirmed), (Limit::StandingQueue, true));
        for want in [
            "block RTT 1812.0 ms over a 60.0 ms path",
            "a queue of 1752 ms, 198.8 MiB per stream",
            "bandwidth-delay product is 6.8 MiB",
            "-w 8M reached 927 Mb/s with block RTT 127.0 ms",
            "the path is at its rate",
        ] {
            assert!(v.words.contains(want), "{want:?} in {}", v.words);
        }
        let lift = v.lift.map(|l| l.words());
        assert_eq!(
            lift.as_deref(),
            Some("-w 8M: 927 Mb/s vs 952 Mb/s, block RTT 127.0 ms vs 1812.0 ms")
        );
    }

    #[test]
    fn a_receiver_on_a_contended_core_is_named_with_its_core_and_the_other_work() {
        let moved = with(Settings::baseline(), |s| s.remote_cpus = Some(vec![0]));
        let mut after = on_loopback(figures(21_487.0));
        after.receiver_thread = contended(figures(1.0), 45.0).receiver_thread;
        if let Some(t) = after.receiver_thread.as_mut() {
            t.core = Some(0);
        }
        let runs = vec![
            base(contended(on_loopback(figures(6_869.0)), 46.0)),
            run(Probe::Placement, moved, Some(0), after),
        ];
        let v = decide(&runs);
        assert_eq!(
            (v.limit, v.confirmed),
            (Limit::ReceiverCpu, true),
            "{}",
            v.words
        );
        for want in [
            "receiver CPU: stream-0 at 46 % of a core on core 1, softirq 2 % of that core, \
             other work (not this test's stream threads) 54 %",
            "at 6869 Mb/s: its core was busy with other work; on core 0 (-A auto/0) it reached 21487 Mb/s",
        ] {
            assert!(v.words.contains(want), "{want:?} in {}", v.words);
        }
        let flags: Vec<_> = v.advice.flags.iter().map(|s| s.value.clone()).collect();
        assert_eq!(flags, vec![Some("auto/0".to_string())]);
    }

    #[test]
    fn the_loss_limited_finding_is_loss_with_its_mathis_bound() {
        let v = decide(&[base(loss_limited(figures(40.0)))]);
        assert_eq!((v.limit, v.confirmed), (Limit::Loss, false), "{}", v.words);
        let want = "(40 Mb/s per stream; the Mathis bound at 0.005 % loss, 60.0 ms and MSS \
                    1448 B is 34 Mb/s)";
        assert!(v.words.contains(want), "{}", v.words);
    }

    #[test]
    fn blocks_and_direction_probes_name_the_busy_end_and_advise_no_direction() {
        let small = with(Settings::baseline(), |s| s.block_bytes = Some(8 << 10));
        let blocks = vec![
            run(
                Probe::Baseline,
                small.clone(),
                None,
                busy(figures(300.0), 99.0),
            ),
            run(
                Probe::LargerBlocks,
                with(small, |s| s.block_bytes = Some(128 << 10)),
                Some(0),
                figures(900.0),
            ),
        ];
        let v = decide(&blocks);
        assert_eq!(
            (v.limit, v.confirmed),
            (Limit::SenderCpu, true),
            "{}",
            v.words
        );
        assert!(
            v.words.contains("with -l 128k it reached 900 Mb/s"),
            "{}",
            v.words
        );
        let flags: Vec<_> = v.advice.flags.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(flags, ["-l"]);
        let reversed = vec![
            base(busy(figures(300.0), 99.0)),
            run(
                Probe::Reverse,
                with(Settings::baseline(), |s| s.reverse = true),
                Some(0),
                figures(900.0),
            ),
        ];
        let v = decide(&reversed);
        assert_eq!(
            (v.limit, v.confirmed),
            (Limit::SenderCpu, true),
            "{}",
            v.words
        );
        assert!(
            v.words.contains("sender side: its stream-0 at 99 %"),
            "{}",
            v.words
        );
        assert_eq!(v.lift.map(|l| l.flags).as_deref(), Some("-R"));
        assert!(v.advice.flags.is_empty(), "{:?}", v.advice.flags);
    }

    #[test]
    fn a_capped_grant_names_the_sysctl_and_the_value_to_raise_it_to() {
        let v = decide(&cases()[6].0);
        assert!(v.words.contains("net.core.rmem_max=212992"), "{}", v.words);
        let s = v
            .advice
            .sysctls
            .first()
            .map(|s| (s.name.as_str(), s.value.as_deref()));
        assert_eq!(s, Some(("net.core.rmem_max", Some("16777216"))));
    }

    #[test]
    fn nothing_measured_is_said_with_the_first_error() {
        let mut r = base(figures(1.0));
        r.figures = None;
        r.error = Some("connect 10.0.0.1:5301: refused".into());
        let v = decide(&[r]);
        assert_eq!(v.limit, Limit::NotMeasured);
        assert!(v.words.contains("refused"), "{}", v.words);
        assert_eq!(decide(&[]).limit, Limit::NotMeasured);
    }
}
