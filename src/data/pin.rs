//! CPU pinning: the `-A` plan syntax, the per-stream plan (which core each `stream-N`
//! thread runs on), and applying it to the calling thread. Called from the main thread to
//! plan (it reads the process's allowed cores, before any thread is pinned) and from each
//! stream thread to pin itself.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What the user asked for with `-A`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Affinity {
    /// Spread streams round-robin over the cores this process may use.
    Auto,
    /// Leave placement to the scheduler.
    None,
    /// Stream i runs on `list[i % list.len()]`.
    List(Vec<usize>),
}

/// The core of each stream (`None`: not pinned). Index = stream id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinPlan(pub Vec<Option<usize>>);

/// Parses `auto`, `none`, `0,2-3` or `LOCAL/REMOTE` (each side one of the former).
pub fn parse_plan(text: &str) -> Result<(Affinity, Option<Affinity>), String> {
    let bad = || {
        format!(
            "-A {text}: expected auto, none, or a CPU list like 0,2-3 (optionally LOCAL/REMOTE)"
        )
    };
    let one = |part: &str| -> Result<Affinity, String> {
        match part.trim() {
            "auto" => Ok(Affinity::Auto),
            "none" => Ok(Affinity::None),
            list => parse_cpu_list(list).map(Affinity::List).map_err(|_| bad()),
        }
    };
    match text.split_once('/') {
        Some((local, remote)) => Ok((one(local)?, Some(one(remote)?))),
        None => Ok((one(text)?, None)),
    }
}

/// Parses a Linux CPU list (`0,2-3,8`), as in `Cpus_allowed_list`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: usize = lo
            .trim()
            .parse()
            .map_err(|_| format!("'{part}' is not a CPU number or range"))?;
        let hi: usize = hi
            .trim()
            .parse()
            .map_err(|_| format!("'{part}' is not a CPU number or range"))?;
        if lo > hi || hi >= 4096 {
            return Err(format!("'{part}' is not a valid CPU range"));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// Formats CPUs as a compact list (`0-3,8`), the inverse of [`parse_cpu_list`].
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The cores the calling thread may run on (call before pinning anything).
pub fn allowed_cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_default()
}

/// Builds the per-stream plan: stream i on the i-th allowed core (round-robin). On one host
/// both ends use the same plan, so stream i's sender and receiver share a core; that
/// measured fastest on loopback (bench-scripts/placement.sh).
pub fn plan(affinity: &Affinity, streams: usize, allowed: &[usize]) -> Result<PinPlan, String> {
    let cpus = match affinity {
        Affinity::None => vec![None; streams],
        Affinity::Auto if allowed.is_empty() => vec![None; streams],
        Affinity::Auto => (0..streams)
            .map(|i| Some(allowed[i % allowed.len()]))
            .collect(),
        Affinity::List(list) if list.is_empty() => {
            return Err("an empty CPU list (name at least one CPU)".into());
        }
        Affinity::List(list) => {
            if let Some(cpu) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(format!(
                    "CPU {cpu} is not available to this process (allowed: {})",
                    format_cpu_list(allowed)
                ));
            }
            (0..streams).map(|i| Some(list[i % list.len()])).collect()
        }
    };
    Ok(PinPlan(cpus))
}

/// One CPU this process may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu {
    pub id: usize,
    /// Its NUMA node (`None`: the kernel names none).
    pub node: Option<usize>,
    /// Its physical core: (package, core id); SMT siblings have the same.
    pub core: (usize, usize),
}

/// A network interface backed by a device (a NIC), not a virtual one (loopback, veth, TUN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    /// The device's NUMA node (`None`: one node, or the kernel names none).
    pub node: Option<usize>,
    /// The CPUs its interrupts (MSI vectors) may run on.
    pub irq_cpus: Vec<usize>,
}

/// What placement looks at: the allowed CPUs and, when the test's interface is a NIC, it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub cpus: Vec<Cpu>,
    /// The interface the test's connections use, by name, and its device if it has one.
    pub interface: Option<(String, Option<Nic>)>,
}

/// What decides where one host's senders and receivers go.
#[derive(Debug, Clone, Copy, Default)]
pub struct Regime {
    pub streams: usize,
    pub bidir: bool,
    pub udp: bool,
    /// The senders' congestion control is bbr.
    pub bbr: bool,
    /// `-M`.
    pub mss: Option<u32>,
    /// `-l`: bytes per write.
    pub block: u64,
}

/// Blocks up to this size make one TCP stream split under any congestion control.
pub const SPLIT_BLOCK: u64 = 8 << 10;
/// Under bbr, blocks up to this size make one TCP stream split.
pub const SPLIT_BLOCK_BBR: u64 = 32 << 10;

/// One host, one UDP stream in one direction: its receiver is left to the scheduler, its
/// sender pinned. Measured on loopback with `-w 8M`, interleaved rounds of 2 s, median loss
/// % with the receiver unpinned against pinned to the other core (2026-12-07): 1472 B at
/// 20, 25, 30 and 45 Gbit/s 0.000 / 0.162, 0.067 / 0.325, 0.115 / 0.778, 0.747 / 1.603;
/// 8 KiB 0.034 / 0.037, 0.072 / 0.267, 0.168 / 0.587, 0.633 / 1.854; again by
/// `placement.sh` (bench-results/placement-udp-*-w8M-20261207) at 30 and 45 Gbit/s, 1472 B
/// 0.000 / 0.115 and 0.105 / 0.274, 8 KiB 0.000 / 0.000 and 0.119 / 0.092 (the one
/// comparison of 12 it lost). The losses come in bursts, the receiver stopped for
/// milliseconds; unpinned, it can be moved. Both ends on one core lost most (41 % at 45
/// Gbit/s, 2026-12-06). Two UDP streams stay paired, which lost least (0.09 against 0.19 %
/// split at 2 x 14 Gbit/s of 8 KiB).
pub fn unpinned_udp_receiver(r: &Regime) -> bool {
    r.udp && r.streams == 1 && !r.bidir
}

/// One host, one TCP stream in one direction, a test too short to probe
/// (`client::probe`): whether its sender and receiver go on two cores (split) rather than
/// one (paired), and the header's words for why. Measured on loopback, interleaved rounds
/// (bench-results/placement-*): split was faster with 1500-byte frames' segments (`-M
/// 1448`: bbr 18.8 vs 14.5, cubic 54.0 vs 51.4), paired under cubic at loopback's own
/// segments (61.6 vs 59.7) and with two streams always (cubic 125 vs 69). Small blocks go
/// the other way: up to [`SPLIT_BLOCK`] under either (cubic split 17.8 vs paired 15.8, and
/// 20.0 vs 18.2; bbr 13.4 vs 11.8), and up to [`SPLIT_BLOCK_BBR`] under bbr (16 KiB 16.4 vs
/// 14.0, 32 KiB 17.8 vs 13.9, 9 of 9 rounds), where from 64 KiB paired leads (16.3 vs 14.5;
/// 128 KiB 16.4 vs 15.2, and 15.0 vs 13.4 over 11 rounds). Under cubic 16 to 64 KiB pair
/// (32 KiB 36.1 vs 27.9).
pub fn split_one_stream(r: &Regime) -> Option<String> {
    if r.streams != 1 || r.bidir || r.udp {
        return None;
    }
    let why = if r.mss.is_some_and(|m| m <= 1460) {
        "one stream with 1500-byte frames' segments".into()
    } else if r.block <= SPLIT_BLOCK {
        format!("one stream of blocks up to {} KiB", SPLIT_BLOCK >> 10)
    } else if r.bbr && r.block <= SPLIT_BLOCK_BBR {
        format!(
            "one stream under bbr of blocks up to {} KiB",
            SPLIT_BLOCK_BBR >> 10
        )
    } else {
        return None;
    };
    Some(why)
}

/// A plan made for the host's layout, with the reason the header gives for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub plan: PinPlan,
    /// `stream-0:cpu4 stream-1:cpu5 (node 0 with eth0; eth0's IRQs on cpu0-3; ...)`.
    pub why: String,
    /// Every allowed core is off the NIC's node.
    pub warning: Option<String>,
}

/// `-A auto` where the test leaves by a NIC: stream threads on the NIC's NUMA node, one per
/// physical core before any SMT sibling, and off the cores its interrupts run on while
/// others are left. `None` without a NIC (loopback, veth, TUN): the round-robin plan stands.
pub fn place(streams: usize, host: &Host) -> Option<Placed> {
    let (name, Some(nic)) = host.interface.as_ref()? else {
        return None;
    };
    let near: Vec<&Cpu> = host
        .cpus
        .iter()
        .filter(|c| nic.node.is_none() || c.node == nic.node)
        .collect();
    let (pool, warning) = match (near.is_empty(), nic.node) {
        (true, Some(node)) => (
            host.cpus.iter().collect::<Vec<_>>(),
            Some(format!(
                "every core this process may use is off {name}'s NUMA node {node}: its traffic \
                 crosses between nodes (run pinperf on node {node}'s cores, e.g. numactl -N {node})"
            )),
        ),
        _ => (near, None),
    };
    // A core's place among its SMT siblings in the pool: 0 for the first.
    let sibling = |c: &Cpu| {
        pool.iter()
            .filter(|o| o.core == c.core && o.id < c.id)
            .count()
    };
    let mut order = pool.clone();
    order.sort_by_key(|c| (nic.irq_cpus.contains(&c.id), sibling(c), c.id));
    if order.is_empty() || streams == 0 {
        return None;
    }
    let plan = PinPlan(
        (0..streams)
            .map(|i| Some(order[i % order.len()].id))
            .collect(),
    );
    let node = nic
        .node
        .map_or(String::new(), |n| format!("node {n} with {name}; "));
    let irq_list = format_cpu_list(&nic.irq_cpus);
    let irqs = match (
        nic.irq_cpus.is_empty(),
        pool.iter().all(|c| nic.irq_cpus.contains(&c.id)),
    ) {
        (true, _) => format!("{name}'s IRQs not found; one stream per physical core"),
        (false, true) => {
            format!("{name}'s IRQs on cpu{irq_list}, every core here; one stream per physical core")
        }
        (false, false) => format!(
            "{name}'s IRQs on cpu{irq_list}; one stream per physical core, off the IRQ cores"
        ),
    };
    Some(Placed {
        why: format!("{plan} ({node}{irqs})"),
        plan,
        warning,
    })
}

/// Pins the calling thread to `cpu`.
pub fn pin_current(cpu: usize) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(format!(
            "could not pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ))
    }
}

impl PinPlan {
    /// `--bidir`'s plan (one thread per stream and direction, this end's first direction
    /// first), grouped as the CPU lines name the threads: `send stream-0:cpu0 ..., recv
    /// stream-0:cpu1 ...`. `sends_first`: this end sends in the first direction (the client).
    pub fn bidir_text(&self, streams: usize, sends_first: bool) -> String {
        if self.0.len() != 2 * streams || self.0.iter().all(Option::is_none) {
            return self.to_string();
        }
        let (first, second) = self.0.split_at(streams);
        let (send, recv) = if sends_first {
            (first, second)
        } else {
            (second, first)
        };
        format!(
            "send {}, recv {}",
            PinPlan(send.to_vec()),
            PinPlan(recv.to_vec())
        )
    }
}

impl fmt::Display for PinPlan {
    /// `stream-0:cpu0 stream-1:cpu1`, `none` when nothing is pinned, or (no plan at all:
    /// a peer that says nothing of its threads, as an iperf3 server) `not reported`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "not reported by the peer");
        }
        if self.0.iter().all(Option::is_none) {
            return write!(f, "none (scheduler places threads)");
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .enumerate()
            .map(|(i, cpu)| match cpu {
                Some(c) => format!("stream-{i}:cpu{c}"),
                None => format!("stream-{i}:any"),
            })
            .collect();
        write!(f, "{}", parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_syntax() {
        assert_eq!(parse_plan("auto"), Ok((Affinity::Auto, None)));
        assert_eq!(parse_plan("none"), Ok((Affinity::None, None)));
        assert_eq!(
            parse_plan("0,2-3"),
            Ok((Affinity::List(vec![0, 2, 3]), None))
        );
        assert_eq!(
            parse_plan("0/1"),
            Ok((Affinity::List(vec![0]), Some(Affinity::List(vec![1]))))
        );
        assert!(parse_plan("3-1").is_err());
        assert!(parse_plan("x").is_err());
    }

    #[test]
    fn a_plan_says_what_is_pinned_and_when_nothing_was_said() {
        let plan = PinPlan(vec![Some(0), None]);
        assert_eq!(plan.to_string(), "stream-0:cpu0 stream-1:any");
        let none = PinPlan(vec![None, None]);
        assert_eq!(none.to_string(), "none (scheduler places threads)");
        assert_eq!(PinPlan(vec![]).to_string(), "not reported by the peer");
    }

    #[test]
    fn a_bidir_plan_names_each_threads_direction_as_the_cpu_lines_do() {
        let plan = PinPlan(vec![Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(
            plan.bidir_text(2, true),
            "send stream-0:cpu0 stream-1:cpu1, recv stream-0:cpu2 stream-1:cpu3"
        );
        assert_eq!(
            plan.bidir_text(2, false),
            "send stream-0:cpu2 stream-1:cpu3, recv stream-0:cpu0 stream-1:cpu1"
        );
        // Not one thread per stream and direction (a peer's plan of another shape): as is.
        assert_eq!(plan.bidir_text(4, true), plan.to_string());
        let none = PinPlan(vec![None; 4]);
        assert_eq!(none.bidir_text(2, true), "none (scheduler places threads)");
    }

    #[test]
    fn cpu_lists_round_trip() {
        for list in ["0", "0-3", "0,2-3,8", "1,3,5"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(list).unwrap()), list);
        }
    }

    #[test]
    fn auto_spreads_lists_wrap_unknown_cpus_are_refused() {
        let allowed = [0, 1];
        assert_eq!(
            plan(&Affinity::Auto, 4, &allowed).unwrap().0,
            vec![Some(0), Some(1), Some(0), Some(1)]
        );
        assert_eq!(
            plan(&Affinity::None, 2, &allowed).unwrap().0,
            vec![None, None]
        );
        assert_eq!(
            plan(&Affinity::List(vec![1]), 2, &allowed).unwrap().0,
            vec![Some(1), Some(1)]
        );
        assert_eq!(
            plan(&Affinity::List(vec![5]), 1, &allowed),
            Err("CPU 5 is not available to this process (allowed: 0-1)".to_string())
        );
    }

    fn host(cpus: &[(usize, usize, usize)], nic: Option<(Option<usize>, Vec<usize>)>) -> Host {
        Host {
            cpus: cpus
                .iter()
                .map(|&(id, node, core)| Cpu {
                    id,
                    node: Some(node),
                    core: (0, core),
                })
                .collect(),
            interface: Some((
                "eth0".into(),
                nic.map(|(node, irq_cpus)| Nic {
                    name: "eth0".into(),
                    node,
                    irq_cpus,
                }),
            )),
        }
    }

    /// Two nodes, SMT pairs (cpu n and n+4 share a core), the NIC on node 1 with its IRQs
    /// on cpu2: streams go to node 1, first cores off the IRQs, then their siblings.
    #[test]
    fn auto_follows_the_nic_to_its_node_off_its_irq_cores() {
        let cpus = [
            (0, 0, 0),
            (1, 0, 1),
            (2, 1, 2),
            (3, 1, 3),
            (4, 0, 0),
            (5, 0, 1),
            (6, 1, 2),
            (7, 1, 3),
        ];
        let placed = place(4, &host(&cpus, Some((Some(1), vec![2])))).unwrap();
        // cpu3 (a core of its own, no IRQs), cpu6 (the other physical core, beside the IRQ
        // core), cpu7 (cpu3's sibling), then cpu2 (the IRQ core) last.
        assert_eq!(placed.plan.0, vec![Some(3), Some(6), Some(7), Some(2)]);
        assert_eq!(
            placed.why,
            "stream-0:cpu3 stream-1:cpu6 stream-2:cpu7 stream-3:cpu2 (node 1 with eth0; \
             eth0's IRQs on cpu2; one stream per physical core, off the IRQ cores)"
        );
        assert_eq!(placed.warning, None);
    }

    #[test]
    fn cores_all_on_the_far_node_are_used_with_a_warning() {
        let placed = place(2, &host(&[(0, 0, 0), (1, 0, 1)], Some((Some(1), vec![])))).unwrap();
        assert_eq!(placed.plan.0, vec![Some(0), Some(1)]);
        assert!(placed.warning.unwrap().contains("off eth0's NUMA node 1"));
    }

    #[test]
    fn a_virtual_interface_leaves_the_round_robin_plan() {
        assert_eq!(place(2, &host(&[(0, 0, 0)], None)), None);
        let no_node = place(1, &host(&[(0, 0, 0), (1, 0, 1)], Some((None, vec![0])))).unwrap();
        assert_eq!(no_node.plan.0, vec![Some(1)], "off the IRQ core, any node");
    }

    #[test]
    fn one_stream_splits_where_that_measured_faster() {
        let one = Regime {
            streams: 1,
            block: 128 << 10,
            ..Regime::default()
        };
        let with = |f: fn(&mut Regime)| {
            let mut r = one;
            f(&mut r);
            split_one_stream(&r)
        };
        assert_eq!(
            with(|r| r.mss = Some(1448)),
            Some("one stream with 1500-byte frames' segments".to_string())
        );
        assert_eq!(with(|r| r.udp = true), None, "UDP: unpinned_udp_receiver");
        assert_eq!(
            with(|r| r.block = 8 << 10),
            Some("one stream of blocks up to 8 KiB".to_string())
        );
        assert_eq!(with(|r| r.block = 16 << 10), None, "cubic pairs 16 KiB");
        assert_eq!(
            with(|r| {
                r.bbr = true;
                r.block = 32 << 10;
            }),
            Some("one stream under bbr of blocks up to 32 KiB".to_string())
        );
        assert_eq!(
            with(|r| {
                r.bbr = true;
                r.block = 64 << 10;
            }),
            None,
            "bbr pairs 64 KiB"
        );
        assert_eq!(split_one_stream(&one), None, "cubic, loopback's MSS");
        assert_eq!(with(|r| r.mss = Some(9000)), None, "jumbo segments");
    }

    #[test]
    fn one_udp_stream_leaves_its_receiver_to_the_scheduler() {
        let one = Regime {
            streams: 1,
            udp: true,
            ..Regime::default()
        };
        assert!(unpinned_udp_receiver(&one));
        assert!(!unpinned_udp_receiver(&Regime { streams: 2, ..one }));
        assert!(!unpinned_udp_receiver(&Regime { bidir: true, ..one }));
        assert!(!unpinned_udp_receiver(&Regime { udp: false, ..one }));
    }
}
