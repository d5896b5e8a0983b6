//! The text of `pinperf diagnose`: its heading, a progress line per step, and the verdict
//! with the runs side by side. Formats the document's figures; computes nothing new.

use super::plan::{Probe, Run, Step};
use super::{DiagnoseDoc, Session};
use crate::report::finding::{Change, Setting, human_rate};

pub(super) fn heading(s: &Session, most: usize) -> String {
    format!(
        "# pinperf diagnose: {}, budget {:.0} s, {:.1} s per run, at most {most} runs",
        s.server.label(),
        s.budget.as_secs_f64(),
        s.run_time.as_secs_f64()
    )
}

/// Why a probe runs, in a few words.
fn why(p: Probe) -> &'static str {
    match p {
        Probe::Baseline => "baseline",
        Probe::ModelBasedCc => "retransmits under a loss-based cc",
        Probe::LargerWindow => "data in flight fills the window",
        Probe::SmallerWindow => "block RTT far above the path's",
        Probe::MoreStreams => "a stream thread near 100 % of its core",
        Probe::Placement => "a stream thread's core busy with other work",
        Probe::LargerBlocks => "a busy stream thread with small blocks",
        Probe::Reverse => "the sender's side suspected: the other end sends",
    }
}

/// `step 2/6: -C bbr (retransmits under a loss-based cc) ...`, printed before the run.
pub(super) fn step_start(n: usize, most: usize, step: &Step) -> String {
    format!(
        "step {n}/{most}: {} ({}) ...",
        step.settings.flags(),
        why(step.probe)
    )
}

/// What the run measured, on the same line: `515 Mb/s, 12 retr, ...` or its failure.
pub(super) fn step_end(r: &Run) -> String {
    let Some(f) = &r.figures else {
        return format!("FAILED: {}", r.error.as_deref().unwrap_or("no figures"));
    };
    let ms = super::verdict::rtt;
    let thread = |t: &Option<super::plan::ThreadLoad>| {
        t.as_ref()
            .map_or("-".into(), |t| format!("{} {:.0} %", t.name, t.percent))
    };
    format!(
        "{}, {} retr ({:.3} %), {}, min RTT {}, block RTT {}, sender {}, receiver {}",
        human_rate(f.bits_per_second),
        f.retransmits,
        f.retransmit_percent(),
        f.congestion,
        ms(f.min_rtt_us),
        ms(f.block_rtt_avg_us),
        thread(&f.sender_thread),
        thread(&f.receiver_thread)
    )
}

fn setting(s: &Setting) -> String {
    match (s.change, &s.value) {
        (Change::Set, Some(v)) if s.name.starts_with('-') => {
            format!("{} {v}", s.name).trim_end().to_string()
        }
        (Change::Set, Some(v)) => format!("{}={v}", s.name),
        (Change::Raise, _) => format!("a larger {}", s.name),
        _ => format!("a smaller {}", s.name),
    }
}

/// The verdict, its evidence (the runs side by side) and the advice.
pub(crate) fn verdict(doc: &DiagnoseDoc) -> String {
    let v = &doc.verdict;
    let mut out = format!("verdict: {}\n", v.words);
    let confirmed = match &v.lift {
        Some(l) => format!("confirmed by run {}: {}", l.run + 1, l.words()),
        None => "not confirmed by a run".into(),
    };
    out.push_str(&format!("  {confirmed}\n"));
    let flags: Vec<String> = v.advice.flags.iter().map(setting).collect();
    let sysctls: Vec<String> = v.advice.sysctls.iter().map(setting).collect();
    if !flags.is_empty() {
        out.push_str(&format!("  advice: {}\n", flags.join(" ")));
    }
    if !sysctls.is_empty() {
        out.push_str(&format!("  sysctl: {}\n", sysctls.join(" ")));
    }
    // The best run, when it is not the baseline.
    let best = (doc.runs.iter().skip(1))
        .find(|r| r.figures.as_ref().map(|f| f.bits_per_second) == v.best_bps);
    if let (Some(r), Some(before), Some(after)) = (best, v.baseline_bps, v.best_bps) {
        out.push_str(&format!(
            "  best run: {}: {} vs {} at the baseline\n",
            r.settings.flags(),
            human_rate(after),
            human_rate(before)
        ));
    }
    for n in &v.notes {
        out.push_str(&format!("  {n}\n"));
    }
    out.push_str(
        "  run  flags                           probe               Mb/s    retr   min RTT  block RTT\n",
    );
    for (i, r) in doc.runs.iter().enumerate() {
        out.push_str(&run_row(i, r));
    }
    let n = doc.runs.len();
    out.push_str(&format!(
        "# {n} run{} in {:.1} s of a {:.0} s budget\n",
        if n == 1 { "" } else { "s" },
        doc.elapsed_s,
        doc.budget_s
    ));
    if let Some(e) = &doc.error {
        out.push_str(&format!("# stopped: {e}\n"));
    }
    out
}

fn run_row(i: usize, r: &Run) -> String {
    let probe = serde_json::to_value(r.probe)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let Some(f) = &r.figures else {
        let e = r.error.as_deref().unwrap_or("");
        return format!(
            "  {:>3}  {:<31} {probe:<15}  FAILED: {e}\n",
            i + 1,
            r.settings.flags()
        );
    };
    let ms = super::verdict::rtt;
    format!(
        "  {:>3}  {:<31} {probe:<15} {:>8.1} {:>7} {:>9} {:>10}\n",
        i + 1,
        r.settings.flags(),
        f.bits_per_second / 1e6,
        f.retransmits,
        ms(f.min_rtt_us),
        ms(f.block_rtt_avg_us)
    )
}
