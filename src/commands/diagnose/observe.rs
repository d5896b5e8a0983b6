//! What one run of `pinperf diagnose` measured, distilled from its header and summary
//! into the planner's [`Figures`]: rate, retransmits, RTTs, the usable window and the
//! sysctl that capped a grant, the busiest stream thread on each end, its core, and how
//! busy that core was with other work.

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
    let one_host = h.same_host || h.same_process;
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
        sender_thread: thread_load((send_cpu, send_pin), (recv_cpu, recv_pin), one_host),
        receiver_thread: thread_load((recv_cpu, recv_pin), (send_cpu, send_pin), one_host),
        jain: (s.streams.len() > 1)
            .then_some(s.fairness.totals.jain)
            .flatten(),
        receiver_drops: (s.findings.iter().flatten())
            .any(|f| matches!(f.kind, Kind::KernelDrops(_))),
        loss_limited: (s.findings.iter().flatten()).find_map(|f| match &f.kind {
            Kind::LossLimited(l) => Some(l.clone()),
            _ => None,
        }),
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

/// One end's CPU report and pin plan.
type End<'a> = (Option<&'a CpuReport>, &'a PinPlan);

/// The busiest stream thread of `end`, and its core's load: busy, softirq, and the busy
/// share no stream thread of this test took (of `end`'s, and `peer`'s too when both ends
/// share the host's cores: `one_host`).
fn thread_load(end: End, peer: End, one_host: bool) -> Option<ThreadLoad> {
    let (report, pins) = (end.0?, end.1);
    let (name, percent, core) = busiest(report, pins)?;
    let load = core.and_then(|c| report.cores.iter().find(|l| l.cpu == c));
    let ours = |c: usize| {
        let peer_share = (peer.0.filter(|_| one_host)).map_or(0.0, |p| on_core(p, peer.1, c));
        on_core(report, pins, c) + peer_share
    };
    let idlest = (report.cores.iter()).min_by(|a, b| a.busy_percent.total_cmp(&b.busy_percent));
    Some(ThreadLoad {
        name,
        percent,
        core,
        core_softirq_percent: load.map(|l| l.softirq_percent),
        core_busy_percent: load.map(|l| l.busy_percent),
        core_other_percent: load.map(|l| (l.busy_percent - ours(l.cpu)).max(0.0)),
        idlest_core: idlest.map(|l| l.cpu),
    })
}

/// The stream thread with the most CPU: its name, percent of a core, and core (from the
/// pin plan).
fn busiest(report: &CpuReport, pins: &PinPlan) -> Option<(String, f64, Option<usize>)> {
    let threads = ThreadCpu::of(report);
    let (i, t) = threads
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_percent.total_cmp(&b.1.total_percent))?;
    Some((t.name.clone(), t.total_percent, core_of(report, pins, i)))
}

/// The core thread `i` of `report` was pinned to.
fn core_of(report: &CpuReport, pins: &PinPlan, i: usize) -> Option<usize> {
    let stream = (report.streams.get(i))
        .and_then(|s| s.stream())
        .map_or(i, usize::from);
    pins.0.get(stream).copied().flatten()
}

/// The CPU (percent of a core) of `report`'s stream threads pinned to `core`.
fn on_core(report: &CpuReport, pins: &PinPlan, core: usize) -> f64 {
    (ThreadCpu::of(report).iter().enumerate())
        .filter(|(i, _)| core_of(report, pins, *i) == Some(core))
        .map(|(_, t)| t.total_percent)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::cpu::{CoreLoad, CpuTime, ThreadTime};

    /// Over 1 s: `stream-0` at `percent` of a core, and these cores' busy shares.
    fn report(percent: u64, cores: &[f64]) -> CpuReport {
        CpuReport {
            seconds: 1.0,
            process: CpuTime::default(),
            host_total: 0.0,
            host_user: 0.0,
            host_system: 0.0,
            streams: vec![ThreadTime {
                name: "stream-0".into(),
                user_us: 0,
                sys_us: percent * 10_000,
            }],
            cores: (cores.iter().enumerate())
                .map(|(cpu, &busy)| CoreLoad {
                    cpu,
                    busy_percent: busy,
                    softirq_percent: 3.0,
                    idle_percent: 100.0 - busy,
                })
                .collect(),
            send_path: None,
        }
    }

    #[test]
    fn other_work_is_the_core_s_busy_share_less_this_test_s_threads_on_it() {
        // One host: sender on core 0 (45 %), receiver on core 1 (42 %), core 1 100 % busy.
        let (send, recv) = (report(45, &[46.0, 100.0]), report(42, &[46.0, 100.0]));
        let (send_pin, recv_pin) = (PinPlan(vec![Some(0)]), PinPlan(vec![Some(1)]));
        let t = thread_load((Some(&recv), &recv_pin), (Some(&send), &send_pin), true);
        let t = t.expect("a thread");
        assert_eq!((t.core, t.idlest_core), (Some(1), Some(0)));
        assert_eq!(t.core_other_percent, Some(58.0));
        assert!(t.contended());
        // Both on core 0: their two shares are this test's, not other work.
        let both = PinPlan(vec![Some(0)]);
        let (send, recv) = (report(48, &[99.0, 100.0]), report(45, &[99.0, 100.0]));
        let t = thread_load((Some(&recv), &both), (Some(&send), &both), true);
        assert_eq!(t.and_then(|t| t.core_other_percent), Some(6.0));
        // Two hosts: the peer's threads are on another host's core 0.
        let t = thread_load((Some(&recv), &both), (Some(&send), &both), false);
        assert_eq!(t.and_then(|t| t.core_other_percent), Some(54.0));
    }
}
