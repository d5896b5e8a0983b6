//! What one run of `pinperf diagnose` measured, distilled from its header and summary
//! into the planner's [`Figures`]: rate, retransmits, RTTs, the usable window and the
//! sysctl that capped a grant, the busiest stream thread on each end and its core.

use crate::data::pin::PinPlan;
use crate::os::cpu::CpuReport;
use crate::os::netinfo::WindowGrant;
use crate::report::finding::Kind;
use crate::report::model::{Header, Summary, ThreadCpu};

use super::plan::{Figures, ThreadLoad, WindowCap};

/// The figures of a run: `autotune_max_bytes` is the ceiling of an autotuned receive
/// buffer (`tcp_rmem`'s third value) when the run set no `-w`.
pub fn figures(h: &Header, s: &Summary, autotune_max_bytes: Option<u64>) -> Figures {
    let reverse = s.reverse;
    let (send_grant, recv_grant) = match reverse {
        false => (&h.local_window, &h.remote_window),
        true => (&h.remote_window, &h.local_window),
    };
    let cpu = s.cpu.as_ref();
    let (local, remote) = (cpu.map(|c| &c.local), cpu.and_then(|c| c.remote.as_ref()));
    let (send_cpu, recv_cpu, send_pin, recv_pin) = match reverse {
        false => (local, remote, &h.local_pin, &h.remote_pin),
        true => (remote, local, &h.remote_pin, &h.local_pin),
    };
    Figures {
        bits_per_second: s.sum_received.bits_per_second,
        retransmits: s.sum.retransmits.unwrap_or(0),
        sent_bytes: s.sum_sent.bytes,
        mss: h.path.mss,
        congestion: h.congestion.clone(),
        min_rtt_us: s.sum.min_rtt.map(f64::from),
        block_rtt_avg_us: s.sum.block_rtt.map(|b| b.avg_us),
        usable_window_bytes: usable_window(send_grant, recv_grant, autotune_max_bytes),
        window_caps: window_caps(send_grant, recv_grant),
        sender_thread: send_cpu.and_then(|c| busiest(c, send_pin)),
        receiver_thread: recv_cpu.and_then(|c| busiest(c, recv_pin)),
        jain: (s.streams.len() > 1)
            .then_some(s.fairness.totals.jain)
            .flatten(),
        receiver_drops: (s.findings.iter().flatten())
            .any(|f| matches!(f.kind, Kind::KernelDrops(_))),
        diagnosis: s.diagnosis.clone(),
    }
}

/// Half the smaller buffer (Linux doubles what `-w` asks, the half is for its overhead);
/// with autotuning, half its ceiling.
fn usable_window(send: &WindowGrant, recv: &WindowGrant, autotune: Option<u64>) -> Option<u64> {
    match send.requested.or(recv.requested) {
        Some(_) => Some(send.sndbuf.min(recv.rcvbuf) / 2),
        None => autotune.map(|a| a / 2),
    }
}

/// Each end whose request is above its `net.core.*mem_max`: the sysctl that capped the
/// grant (or would have, had `--force-window` not gone past it), the sender's first.
fn window_caps(send: &WindowGrant, recv: &WindowGrant) -> Vec<WindowCap> {
    let over = |g: &WindowGrant, max: Option<u64>| g.requested.zip(max).filter(|(r, m)| r > m);
    let cap = |end: &str, sysctl: &str, (_, max): (u64, u64)| WindowCap {
        sysctl: sysctl.into(),
        value_bytes: max,
        end: end.into(),
    };
    let sender = over(send, send.wmem_max).map(|o| cap("sender", "net.core.wmem_max", o));
    let receiver = over(recv, recv.rmem_max).map(|o| cap("receiver", "net.core.rmem_max", o));
    sender.into_iter().chain(receiver).collect()
}

/// The stream thread with the most CPU, its core (from the pin plan) and that core's
/// softirq share.
fn busiest(report: &CpuReport, pins: &PinPlan) -> Option<ThreadLoad> {
    let threads = ThreadCpu::of(report);
    let (i, t) = threads
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_percent.total_cmp(&b.1.total_percent))?;
    let stream = report
        .streams
        .get(i)
        .and_then(|s| s.stream())
        .map_or(i, usize::from);
    let core = pins.0.get(stream).copied().flatten();
    let softirq = core.and_then(|c| report.cores.iter().find(|l| l.cpu == c));
    Some(ThreadLoad {
        name: t.name.clone(),
        percent: t.total_percent,
        core,
        core_softirq_percent: softirq.map(|l| l.softirq_percent),
    })
}
