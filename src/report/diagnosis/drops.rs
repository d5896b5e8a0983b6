//! Drops inside the hosts: segments the receiving kernel discarded, TCP memory pressure
//! and limits, UDP datagrams dropped on full socket buffers.

use crate::report::finding::{Finding, KernelDrops, TcpMemory, UdpKernelDrops, UdpReceiverDrops};
use crate::report::model::{Header, KernelSummary, UdpFigures};

/// Drops and memory limits inside the hosts' kernels: segments the receiver threw away
/// after the path had delivered them, TCP memory pressure, and the host's TCP memory near
/// net.ipv4.tcp_mem (also when the pressure began before the test: other sockets, such as
/// an earlier test's, held the memory). One finding, only when something shows.
pub fn kernel_drops(k: &KernelSummary, retransmits: u64, streams: usize) -> Option<Finding> {
    let receiver = k.receiver.unwrap_or(k.sender).drops;
    let ends = [Some(k.sender), k.receiver];
    let ends = ends.iter().flatten();
    let memory_pressures: u64 = ends.clone().map(|e| e.drops.memory_pressures).sum();
    let peak = ends.clone().filter_map(|e| e.tcp_pages_peak).max();
    let start = ends.clone().filter_map(|e| e.tcp_pages_start).max();
    let limits = ends.clone().find_map(|e| e.tcp_mem_pages);
    let discarded_segments = receiver.receiver_drops();
    let near_limit = matches!((peak, limits), (Some(p), Some(m)) if p >= m[1]);
    if discarded_segments == 0 && memory_pressures == 0 && !near_limit {
        return None;
    }
    let tcp_memory = peak.zip(limits).map(|(peak_pages, m)| TcpMemory {
        peak_pages,
        tcp_mem_pages: m,
        held_at_start_pages: start.filter(|&s| s >= m[0]),
    });
    Some(Finding::new(KernelDrops {
        discarded_segments,
        rcvq_drops: receiver.rcvq_drops,
        ofo_drops: receiver.ofo_drops,
        pruned_segments: receiver.rcv_pruned + receiver.ofo_pruned,
        memory_pressures,
        tcp_memory,
        retransmits,
        streams,
    }))
}

/// A UDP receiver whose own socket buffer overflowed (`SO_RXQ_OVFL`): the datagrams
/// reached its host and were dropped there because its thread did not read them in time,
/// not on the path. The remedies: `--realtime` where the receivers did not have it (a
/// pinperf peer), a larger buffer (`-w`), or a lower rate. `reverse`: the data went from
/// the server to the client (`-R`, or `--bidir`'s second direction), whose buffer it names.
pub fn udp_receiver_drops(u: &UdpFigures, header: &Header, reverse: bool) -> Option<Finding> {
    if u.rxq_drops == 0 {
        return None;
    }
    // A server's buffer is as large as its --max-window lets a client ask for.
    let buffer_bytes = match reverse {
        true => header.local_window.rcvbuf,
        false => header.remote_window.rcvbuf,
    };
    Some(Finding::new(UdpReceiverDrops {
        overflows: u.rxq_drops,
        lost_packets: u.lost_packets,
        buffer_bytes,
        server_capped: !reverse,
        realtime: (!header.peer.reports_late()).then_some(header.realtime),
    }))
}

/// The receiving end's kernel counted UDP datagrams it dropped for full socket buffers
/// (`RcvbufErrors` of `/proc/net/snmp`, for its whole namespace: other programs' sockets
/// count too).
pub fn udp_kernel_drops(k: &KernelSummary) -> Option<Finding> {
    let udp = k.receiver.unwrap_or(k.sender).udp?;
    (udp.rcvbuf_errors > 0).then(|| {
        Finding::new(UdpKernelDrops {
            rcvbuf_errors: udp.rcvbuf_errors,
            in_errors: udp.in_errors,
        })
    })
}
