//! The kernel's own TCP drop and memory counters (TcpExt in `/proc/net/netstat`), read for
//! the calling thread's network namespace before and after a test. They tell drops in the
//! hosts' kernels (no memory for a receive queue, TCP memory pressure) from drops on the
//! path: the seed's "16 streams x 512 MB" case is the first kind.
//!
//! The same for UDP ([`UdpDrops`], from `/proc/net/snmp`): a receiver dropping datagrams
//! in its own socket buffer shows in `RcvbufErrors`.
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
    /// Pages all TCP sockets of the host held (sockstat `mem`, host-wide) when the test
    /// started, and the most seen during it.
    #[serde(default)]
    pub tcp_pages_start: Option<u64>,
    #[serde(default)]
    pub tcp_pages_peak: Option<u64>,
    /// The namespace's UDP counters over the test (`/proc/net/snmp`).
    #[serde(default)]
    pub udp: Option<UdpDrops>,
}

/// Counters at the start of a test, and the host's TCP memory seen since.
#[derive(Debug, Clone, Copy)]
pub struct KernelMark {
    start: Option<TcpDrops>,
    udp_start: Option<UdpDrops>,
    pages_start: Option<u64>,
    pages_peak: Option<u64>,
}

impl KernelMark {
    pub fn now() -> KernelMark {
        let pages = tcp_pages();
        KernelMark {
            start: read(),
            udp_start: read_udp(),
            pages_start: pages,
            pages_peak: pages,
        }
    }

    /// The most TCP memory (pages) the host held since the mark.
    pub fn peak(&self) -> Option<u64> {
        self.pages_peak
    }

    /// Notes the host's TCP memory now (call every interval or so).
    pub fn sample(&mut self) {
        if let Some(p) = tcp_pages() {
            self.pages_peak = Some(self.pages_peak.map_or(p, |q| q.max(p)));
        }
    }

    /// The change since the mark; `None` when the counters cannot be read.
    pub fn report(&mut self) -> Option<KernelReport> {
        self.sample();
        let drops = read()?.minus(self.start?);
        Some(KernelReport {
            netns: netns_id(),
            drops,
            tcp_mem_pages: tcp_mem(),
            tcp_pages_start: self.pages_start,
            tcp_pages_peak: self.pages_peak,
            udp: self
                .udp_start
                .and_then(|start| Some(read_udp()?.minus(start))),
        })
    }
}

/// Pages held by every TCP socket of the host (the `mem` field of sockstat's TCP line).
pub fn tcp_pages() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/sockstat").ok()?;
    parse_sockstat_pages(&text)
}

/// The `mem` field of the `TCP:` line.
pub fn parse_sockstat_pages(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mem" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// When the host's TCP memory reached net.ipv4.tcp_mem's pressure threshold or hard limit
/// (`peak_pages`, pages), a sentence saying what that does (for the error of a test whose
/// connections crawled or stopped).
pub fn memory_note(peak_pages: u64) -> Option<String> {
    let m = tcp_mem()?;
    let what = if peak_pages >= m[2] {
        "reached its hard limit: every TCP socket, the control connection's too, then waits \
         for memory"
    } else if peak_pages >= m[1] {
        "went into memory pressure: Linux then shrinks every receive window to a few segments \
         until TCP uses less than the first value again, and the streams' own send buffers \
         keep it above"
    } else {
        return None;
    };
    Some(format!(
        "this host's TCP memory {what} (peak {peak_pages} pages; net.ipv4.tcp_mem = {} {} {}); \
         ask for smaller windows (-w) or fewer streams",
        m[0], m[1], m[2]
    ))
}

/// Share of the hard limit that the windows may fill before a test is warned about.
const WINDOW_MEMORY_SHARE: f64 = 0.5;

/// Before a test: `streams` socket buffers of `buf_bytes` each, once full, can take this
/// share of TCP's hard memory limit (one end's buffers; on one host both ends add up).
pub fn window_memory_warning(streams: usize, buf_bytes: u64) -> Option<String> {
    let limit = tcp_mem()?[2] * crate::os::sys::page_size();
    window_memory_check(streams, buf_bytes, limit)
}

fn window_memory_check(streams: usize, buf_bytes: u64, limit_bytes: u64) -> Option<String> {
    let total = streams as u64 * buf_bytes;
    (total as f64 >= WINDOW_MEMORY_SHARE * limit_bytes as f64).then(|| {
        format!(
            "{streams} streams x {} MiB socket buffers = {} MiB, against a TCP memory hard limit \
             of {} MiB on this host (net.ipv4.tcp_mem): once the buffers fill, TCP runs out of \
             memory and every socket stalls, this test's control connection included. A window \
             near the bandwidth-delay product per stream is enough",
            buf_bytes >> 20,
            total >> 20,
            limit_bytes >> 20
        )
    })
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

/// The kernel's UDP counters (the `Udp:` lines of `/proc/net/snmp`), namespace-wide, as
/// read or as a difference over a test: what tells "the receiver dropped N datagrams in
/// its own socket buffer" from losses on the path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpDrops {
    /// Datagrams delivered to sockets (InDatagrams).
    pub in_datagrams: u64,
    /// Datagrams dropped because a socket's receive buffer was full (RcvbufErrors).
    pub rcvbuf_errors: u64,
    /// Datagrams that could not be delivered, buffer drops and checksum errors included
    /// (InErrors).
    pub in_errors: u64,
    /// Sends refused for lack of send buffer (SndbufErrors).
    pub sndbuf_errors: u64,
}

impl UdpDrops {
    fn minus(self, e: UdpDrops) -> UdpDrops {
        UdpDrops {
            in_datagrams: self.in_datagrams.saturating_sub(e.in_datagrams),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(e.rcvbuf_errors),
            in_errors: self.in_errors.saturating_sub(e.in_errors),
            sndbuf_errors: self.sndbuf_errors.saturating_sub(e.sndbuf_errors),
        }
    }
}

/// Reads the calling thread's namespace's UDP counters.
pub fn read_udp() -> Option<UdpDrops> {
    parse_snmp_udp(&std::fs::read_to_string("/proc/thread-self/net/snmp").ok()?)
}

/// Parses `/proc/net/snmp`: a `Udp:` line of names, then one of values.
pub fn parse_snmp_udp(text: &str) -> Option<UdpDrops> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?.split_whitespace().skip(1);
    let values = lines.next()?.split_whitespace().skip(1);
    let mut d = UdpDrops::default();
    let mut seen = false;
    for (name, value) in names.zip(values) {
        let Ok(v) = value.parse::<u64>() else {
            continue;
        };
        let slot = match name {
            "InDatagrams" => &mut d.in_datagrams,
            "RcvbufErrors" => &mut d.rcvbuf_errors,
            "InErrors" => &mut d.in_errors,
            "SndbufErrors" => &mut d.sndbuf_errors,
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

/// net.ipv4.tcp_mem in pages. It is host-wide but only the initial network namespace
/// shows it, so the first reading is kept: read it once before entering a namespace.
pub fn tcp_mem() -> Option<[u64; 3]> {
    static CACHE: std::sync::OnceLock<Option<[u64; 3]>> = std::sync::OnceLock::new();
    *CACHE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem").ok()?;
        let v: Vec<u64> = text
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        (v.len() == 3).then(|| [v[0], v[1], v[2]])
    })
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
    fn windows_that_can_fill_half_of_tcp_memory_are_warned_about() {
        let gib = 1u64 << 30;
        let w = window_memory_check(4, 512 << 20, 2 * gib + gib / 4).unwrap();
        assert!(
            w.contains("4 streams x 512 MiB") && w.contains("2048 MiB"),
            "{w}"
        );
        assert!(window_memory_check(16, 1 << 20, 2 * gib).is_none());
        assert!(
            window_memory_check(2, gib / 2, 2 * gib).is_some(),
            "exactly half"
        );
    }

    #[test]
    fn memory_notes_name_pressure_and_the_hard_limit() {
        let m = tcp_mem().unwrap();
        assert_eq!(memory_note(m[1] - 1), None);
        let p = memory_note(m[1]).unwrap();
        assert!(
            p.contains("memory pressure") && p.contains("receive window"),
            "{p}"
        );
        let x = memory_note(m[2]).unwrap();
        assert!(
            x.contains("hard limit") && x.contains("control connection"),
            "{x}"
        );
    }

    #[test]
    fn sockstat_tcp_memory() {
        let text =
            "sockets: used 8\nTCP: inuse 1 orphan 8 tw 0 alloc 9 mem 136\nUDP: inuse 0 mem 7\n";
        assert_eq!(parse_sockstat_pages(text), Some(136));
        assert_eq!(parse_sockstat_pages("UDP: inuse 0 mem 7\n"), None);
    }

    #[test]
    fn parses_the_udp_pair_of_lines_and_not_udplite() {
        let text = "Ip: Forwarding\nIp: 1\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 61 2 9 63 7 1\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    UdpLite: 5 5 5 5 5\n";
        let d = parse_snmp_udp(text).unwrap();
        assert_eq!(
            d,
            UdpDrops {
                in_datagrams: 61,
                rcvbuf_errors: 7,
                in_errors: 9,
                sndbuf_errors: 1,
            }
        );
        assert!(parse_snmp_udp("Ip: A\nIp: 1\n").is_none());
        assert_eq!(
            UdpDrops::default().minus(d),
            UdpDrops::default(),
            "never negative"
        );
    }

    #[test]
    fn a_full_udp_socket_buffer_shows_in_rcvbuf_errors() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx).set_recv_buffer_size(1).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut mark = KernelMark::now();
        let payload = [0u8; 8000];
        for _ in 0..50 {
            tx.send_to(&payload, rx.local_addr().unwrap()).unwrap();
        }
        // Other tests of this process may drop datagrams too: at least ours show.
        let d = mark.report().and_then(|k| k.udp).unwrap();
        assert!(d.rcvbuf_errors >= 40, "{d:?}");
        assert!(d.in_errors >= d.rcvbuf_errors, "{d:?}");
    }

    #[test]
    fn this_machine_has_the_counters() {
        assert!(tcp_pages().is_some());
        assert!(read().is_some(), "/proc/thread-self/net/netstat has TcpExt");
        assert!(netns_id().is_some());
        assert!(tcp_mem().is_some_and(|m| m[0] <= m[1] && m[1] <= m[2]));
    }
}
