//! The kernel's own TCP drop and memory counters (TcpExt in `/proc/net/netstat`), read for
//! the calling thread's network namespace before and after a test. They tell drops in the
//! hosts' kernels (no memory for a receive queue, TCP memory pressure) from drops on the
//! path: the seed's "16 streams x 512 MB" case is the first kind.
//!
//! The counters are namespace-wide: other traffic in the namespace counts too.

use serde::{Deserialize, Serialize};

/// Counter deltas over a test (or absolute values, as read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpDrops {
    /// Times TCP entered memory pressure (TCP memory above net.ipv4.tcp_mem[1]):
    /// TCPMemoryPressures.
    pub memory_pressures: u64,
    /// Segments dropped because the receive queue had no room (TCPRcvQDrop).
    pub rcvq_drops: u64,
    /// Out-of-order segments dropped for lack of memory (TCPOFODrop).
    pub ofo_drops: u64,
    /// Receive-queue prunes started (PruneCalled), segments they discarded from the receive
    /// queue (RcvPruned) and from the out-of-order queue (OfoPruned).
    pub prune_called: u64,
    pub rcv_pruned: u64,
    pub ofo_pruned: u64,
    /// Segments dropped because the socket backlog was full (TCPBacklogDrop).
    pub backlog_drops: u64,
}

impl TcpDrops {
    /// Segments a receiving kernel threw away after the path had delivered them.
    pub fn receiver_drops(&self) -> u64 {
        self.rcvq_drops + self.ofo_drops + self.rcv_pruned + self.ofo_pruned + self.backlog_drops
    }

    /// True when anything happened.
    pub fn any(&self) -> bool {
        self.memory_pressures + self.prune_called + self.receiver_drops() > 0
    }

    fn minus(self, e: TcpDrops) -> TcpDrops {
        TcpDrops {
            memory_pressures: self.memory_pressures.saturating_sub(e.memory_pressures),
            rcvq_drops: self.rcvq_drops.saturating_sub(e.rcvq_drops),
            ofo_drops: self.ofo_drops.saturating_sub(e.ofo_drops),
            prune_called: self.prune_called.saturating_sub(e.prune_called),
            rcv_pruned: self.rcv_pruned.saturating_sub(e.rcv_pruned),
            ofo_pruned: self.ofo_pruned.saturating_sub(e.ofo_pruned),
            backlog_drops: self.backlog_drops.saturating_sub(e.backlog_drops),
        }
    }
}

/// One end's counters over a test, with the namespace they belong to (so two ends in one
/// namespace are not counted twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelReport {
    /// Inode of the network namespace; equal on both ends = the same counters.
    pub netns: Option<u64>,
    pub drops: TcpDrops,
    /// net.ipv4.tcp_mem (pages: pressure below, pressure at, hard limit).
    pub tcp_mem_pages: Option<[u64; 3]>,
}

/// Counters at the start of a test.
#[derive(Debug, Clone, Copy)]
pub struct KernelMark {
    start: Option<TcpDrops>,
}

impl KernelMark {
    pub fn now() -> KernelMark {
        KernelMark { start: read() }
    }

    /// The change since the mark; `None` when the counters cannot be read.
    pub fn report(&self) -> Option<KernelReport> {
        let drops = read()?.minus(self.start?);
        Some(KernelReport {
            netns: netns_id(),
            drops,
            tcp_mem_pages: tcp_mem(),
        })
    }
}

/// Reads the calling thread's namespace's counters.
pub fn read() -> Option<TcpDrops> {
    parse_netstat(&std::fs::read_to_string("/proc/thread-self/net/netstat").ok()?)
}

/// Parses `/proc/net/netstat`: a `TcpExt:` line of names, then one of values.
pub fn parse_netstat(text: &str) -> Option<TcpDrops> {
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let names = lines.next()?.split_whitespace().skip(1);
    let values = lines.next()?.split_whitespace().skip(1);
    let mut d = TcpDrops::default();
    let mut seen = false;
    for (name, value) in names.zip(values) {
        let Ok(v) = value.parse::<u64>() else {
            continue;
        };
        let slot = match name {
            "TCPMemoryPressures" => &mut d.memory_pressures,
            "TCPRcvQDrop" => &mut d.rcvq_drops,
            "TCPOFODrop" => &mut d.ofo_drops,
            "PruneCalled" => &mut d.prune_called,
            "RcvPruned" => &mut d.rcv_pruned,
            "OfoPruned" => &mut d.ofo_pruned,
            "TCPBacklogDrop" => &mut d.backlog_drops,
            _ => continue,
        };
        *slot = v;
        seen = true;
    }
    seen.then_some(d)
}

/// Inode of the calling thread's network namespace.
pub fn netns_id() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .ok()
        .map(|m| m.ino())
}

/// net.ipv4.tcp_mem in pages.
pub fn tcp_mem() -> Option<[u64; 3]> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem").ok()?;
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_tcpext_pair_of_lines() {
        let text = "TcpExt: SyncookiesSent PruneCalled RcvPruned OfoPruned TCPMemoryPressures \
                    TCPBacklogDrop TCPRcvQDrop TCPOFODrop\n\
                    TcpExt: 0 7 3 2 5 1 11 13\n\
                    IpExt: InNoRoutes\nIpExt: 0\n";
        let d = parse_netstat(text).unwrap();
        assert_eq!(
            d,
            TcpDrops {
                memory_pressures: 5,
                rcvq_drops: 11,
                ofo_drops: 13,
                prune_called: 7,
                rcv_pruned: 3,
                ofo_pruned: 2,
                backlog_drops: 1,
            }
        );
        assert_eq!(d.receiver_drops(), 11 + 13 + 3 + 2 + 1);
        assert!(parse_netstat("IpExt: A\nIpExt: 1\n").is_none());
    }

    #[test]
    fn deltas_never_go_negative() {
        let a = TcpDrops {
            rcvq_drops: 10,
            ..Default::default()
        };
        let b = TcpDrops {
            rcvq_drops: 4,
            memory_pressures: 2,
            ..Default::default()
        };
        let d = b.minus(a);
        assert_eq!(d.rcvq_drops, 0);
        assert_eq!(d.memory_pressures, 2);
        assert!(d.any());
        assert!(!TcpDrops::default().any());
    }

    #[test]
    fn this_machine_has_the_counters() {
        assert!(read().is_some(), "/proc/thread-self/net/netstat has TcpExt");
        assert!(netns_id().is_some());
        assert!(tcp_mem().is_some_and(|m| m[0] <= m[1] && m[1] <= m[2]));
    }
}
