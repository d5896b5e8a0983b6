//! CPU accounting over exactly a test's span: the process's user/sys time (`getrusage`),
//! each stream thread's own (`RUSAGE_THREAD`, read by the thread itself), and every core's
//! busy / softirq / idle time from `/proc/stat` (a receiver's network stack runs in softirq,
//! which process times miss). Called at the test's start and end by each side's control
//! flow, and by each stream thread for itself.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::choices::ZeroCopy;
use crate::os::sys::Who;

/// User and system CPU time, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTime {
    pub user_us: u64,
    pub sys_us: u64,
}

impl CpuTime {
    pub fn total_us(&self) -> u64 {
        self.user_us + self.sys_us
    }

    fn minus(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
        }
    }
}

fn rusage(who: Who) -> CpuTime {
    let (user_us, sys_us) = crate::os::sys::cpu_time_us(who);
    CpuTime { user_us, sys_us }
}

/// This process's CPU time so far.
pub fn process() -> CpuTime {
    rusage(Who::Process)
}

/// The calling thread's CPU time so far.
pub fn thread() -> CpuTime {
    rusage(Who::Thread)
}

/// One core's `/proc/stat` counters (clock ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTicks {
    pub cpu: usize,
    pub busy: u64,
    pub softirq: u64,
    pub idle: u64,
}

/// Reads every core's counters; empty where `/proc/stat` is unreadable.
pub fn cores() -> Vec<CoreTicks> {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    parse_proc_stat(&text)
}

/// Parses the `cpuN` lines of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Vec<CoreTicks> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cpu")?;
            let (id, fields) = rest.split_once(' ')?;
            let cpu: usize = id.parse().ok()?;
            let v: Vec<u64> = fields
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal [guest guest_nice]
            if v.len() < 8 {
                return None;
            }
            let idle = v[3] + v[4];
            let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
            Some(CoreTicks {
                cpu,
                busy,
                softirq: v[6],
                idle,
            })
        })
        .collect()
}

/// One core over a span, in percent of the span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CoreLoad {
    pub cpu: usize,
    pub busy_percent: f64,
    pub softirq_percent: f64,
    pub idle_percent: f64,
}

/// Per-core load between two readings.
pub fn core_loads(start: &[CoreTicks], end: &[CoreTicks]) -> Vec<CoreLoad> {
    end.iter()
        .filter_map(|e| {
            let s = start.iter().find(|s| s.cpu == e.cpu)?;
            let busy = e.busy.saturating_sub(s.busy) as f64;
            let idle = e.idle.saturating_sub(s.idle) as f64;
            let softirq = e.softirq.saturating_sub(s.softirq) as f64;
            let total = busy + idle;
            (total > 0.0).then(|| CoreLoad {
                cpu: e.cpu,
                busy_percent: 100.0 * busy / total,
                softirq_percent: 100.0 * softirq / total,
                idle_percent: 100.0 * idle / total,
            })
        })
        .collect()
}

/// One thread's own CPU over a span, under the name users see in `ps -L` and `top -H`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// `stream-N`, or `stream-mux` for the one thread of `--engine single`.
    #[serde(default)]
    pub name: String,
    pub user_us: u64,
    pub sys_us: u64,
}

impl ThreadTime {
    pub fn total_us(&self) -> u64 {
        self.user_us + self.sys_us
    }

    /// The stream this thread ran alone (`stream-N`), if it ran one.
    pub fn stream(&self) -> Option<u16> {
        self.name.strip_prefix("stream-")?.parse().ok()
    }
}

/// The name of the one thread that runs every stream with `--engine single`.
pub const MUX_THREAD: &str = "stream-mux";

/// A side's CPU over the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuReport {
    pub seconds: f64,
    /// The process's user and system time over the span.
    pub process: CpuTime,
    /// Percent of one core: (user + sys) / span, as iperf3's `host_total`.
    pub host_total: f64,
    pub host_user: f64,
    pub host_system: f64,
    /// The threads that ran the streams, each once with its own CPU: `stream-N` by stream
    /// id, or the one `stream-mux` thread of `--engine single` (see [`CpuReport::on_one_thread`]).
    pub streams: Vec<ThreadTime>,
    pub cores: Vec<CoreLoad>,
    /// `-Z`: how this end's senders handed blocks to the kernel (absent without `-Z`, or
    /// when this end did not send). Boxed: the control messages carrying a report stay small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_path: Option<Box<SendPath>>,
}

/// What `-Z` did on one end: the copy it avoided is what its CPU figures show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendPath {
    pub method: ZeroCopy,
    /// `sendfile` calls, or `MSG_ZEROCOPY` sends, that took bytes.
    pub sends: u64,
    /// `MSG_ZEROCOPY`: sends the kernel copied after all, as their completions said
    /// (loopback copies every one; a NIC with scatter-gather none). Absent for `sendfile`,
    /// of which the kernel says nothing (its pages go by reference, loopback included).
    pub copied: Option<u64>,
}

impl SendPath {
    /// `-Z`'s counts from an end's senders (`None` without `-Z`).
    pub fn of(method: Option<ZeroCopy>, sends: u64, copied: u64) -> Option<SendPath> {
        method.map(|method| SendPath {
            method,
            sends,
            copied: (method == ZeroCopy::Msg).then_some(copied),
        })
    }
}

impl CpuReport {
    /// Busy cores over the span (sum of per-core busy fractions).
    pub fn busy_cores(&self) -> f64 {
        self.cores.iter().map(|c| c.busy_percent / 100.0).sum()
    }

    /// The streams all ran on one thread, `name`: it is listed once, with what it was
    /// measured to use (the single engine reports its time on its first stream and nothing
    /// on the others, so nothing is divided or invented).
    pub fn on_one_thread(mut self, name: &str) -> CpuReport {
        let (user_us, sys_us) = self
            .streams
            .iter()
            .fold((0, 0), |(u, s), t| (u + t.user_us, s + t.sys_us));
        self.streams = vec![ThreadTime {
            name: name.to_string(),
            user_us,
            sys_us,
        }];
        self
    }
}

/// A reading at the start of a span.
#[derive(Debug, Clone)]
pub struct CpuMark {
    at: Instant,
    process: CpuTime,
    cores: Vec<CoreTicks>,
}

impl CpuMark {
    pub fn now() -> CpuMark {
        CpuMark {
            at: Instant::now(),
            process: process(),
            cores: cores(),
        }
    }

    /// The report from this mark to now, with the stream threads' own times, named.
    pub fn report(&self, streams: Vec<(String, CpuTime)>, sent: Option<SendPath>) -> CpuReport {
        let seconds = self
            .at
            .elapsed()
            .max(Duration::from_micros(1))
            .as_secs_f64();
        let process = process().minus(self.process);
        let pct = |us: u64| us as f64 / 1e6 / seconds * 100.0;
        CpuReport {
            seconds,
            host_total: pct(process.total_us()),
            host_user: pct(process.user_us),
            host_system: pct(process.sys_us),
            process,
            streams: streams
                .into_iter()
                .map(|(name, t)| ThreadTime {
                    name,
                    user_us: t.user_us,
                    sys_us: t.sys_us,
                })
                .collect(),
            cores: core_loads(&self.cores, &cores()),
            send_path: sent.map(Box::new),
        }
    }
}

/// A thread's CPU from a start reading to now.
pub fn thread_since(start: CpuTime) -> CpuTime {
    thread().minus(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_parse_and_loads_are_percentages() {
        let a = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 50 800 0 0 50 0 0 0\ncpu1 10 0 10 970 10 0 0 0\nintr 1 2\n";
        let b = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 200 0 100 900 0 0 100 0 0 0\ncpu1 10 0 10 1070 10 0 0 0\n";
        let (s, e) = (parse_proc_stat(a), parse_proc_stat(b));
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            CoreTicks {
                cpu: 0,
                busy: 200,
                softirq: 50,
                idle: 800
            }
        );
        let loads = core_loads(&s, &e);
        // cpu0: busy 200 of 300 ticks, softirq 50; cpu1: idle throughout.
        assert!((loads[0].busy_percent - 66.666).abs() < 0.01);
        assert!((loads[0].softirq_percent - 16.666).abs() < 0.01);
        assert_eq!(loads[1].busy_percent, 0.0);
    }

    /// The calling thread's time on a CPU as the scheduler counts it, from a second source:
    /// `/proc/thread-self/schedstat` (ns), else `/proc/thread-self/stat` (utime + stime in
    /// USER_HZ ticks, 100 per second on Linux).
    fn scheduler_cpu() -> Duration {
        if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            return Duration::from_nanos(ns);
        }
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self");
        // The fields after the `)` closing the name: state first, utime 12th, stime 13th.
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .expect("stat")
            .1
            .split_whitespace()
            .collect();
        let ticks = |i: usize| f[i].parse::<u64>().expect("utime/stime");
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }

    #[test]
    fn a_busy_thread_is_charged_its_cpu() {
        let mark = CpuMark::now();
        let wall = Instant::now();
        let start = thread();
        let sched_start = scheduler_cpu();
        // Spin until the scheduler has given this thread 200 ms of CPU, however long that
        // takes on a busy machine (a bound on wall time only turns a hang into a message).
        let want = Duration::from_millis(200);
        let mut x = 0u64;
        let got = loop {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            let got = scheduler_cpu() - sched_start;
            if got >= want {
                break got;
            }
            assert!(
                wall.elapsed() < Duration::from_secs(60),
                "in 60 s the scheduler ran this thread only {got:?}"
            );
        };
        std::hint::black_box(x);
        let own = thread_since(start);
        let sched_end = scheduler_cpu() - sched_start;
        // getrusage(RUSAGE_THREAD) against the scheduler's own count over the same span:
        // equal but for the order of the readings (the scheduler's, taken either side of
        // ours, bracket it) and tick rounding in the /proc/thread-self/stat fallback.
        let charged = Duration::from_micros(own.total_us());
        let slack = Duration::from_millis(20);
        assert!(
            charged + slack >= got && charged <= sched_end + slack,
            "the scheduler ran this thread {got:?}..{sched_end:?}; getrusage charged {own:?}"
        );
        let spun = wall.elapsed();
        let r = mark.report(vec![("stream-0".into(), own)], None);
        // The process's time includes this thread's over a longer span (and whatever other
        // tests in this process ran meanwhile).
        assert!(
            r.process.total_us() + 1_000 >= own.total_us(),
            "process {:?} < thread {own:?}",
            r.process
        );
        assert!(r.seconds >= spun.as_secs_f64(), "span {r:?} < {spun:?}");
        let pct = |us: u64| us as f64 / 1e4 / r.seconds;
        assert!(
            (r.host_total - pct(r.process.total_us())).abs() < 1e-6
                && (r.host_user - pct(r.process.user_us)).abs() < 1e-6,
            "{r:?}"
        );
        assert!(!r.cores.is_empty());
    }
}
