//! What one end measured, as plain data: a `TCP_INFO` sample, RTT statistics, and a
//! closed interval of one side's streams. The reporters build them, and they travel on the
//! control connection when the server sends (`-R`, `--bidir`): no sockets, no clocks here.

use serde::{Deserialize, Serialize};

/// The kernel's view of a sending socket at one moment (from `TCP_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TcpSample {
    pub t_ns: u64,
    /// Smoothed RTT and its variation.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// Lowest RTT the connection has seen: the path without queues.
    pub min_rtt_us: u32,
    pub total_retrans: u32,
    pub cwnd_bytes: u64,
    pub delivery_rate_bps: u64,
    pub pacing_rate_bps: u64,
    /// Bytes written but not yet sent (waiting in the socket buffer).
    pub notsent_bytes: u32,
    /// The send buffer's current size (`SO_SNDBUF`; grows under autotuning).
    pub sndbuf_bytes: u64,
}

/// RTT statistics over an interval, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    pub min_us: u32,
    pub avg_us: f64,
    pub max_us: u32,
    /// Median, where the samples are kept (block RTT); `None` for kernel srtt.
    pub median_us: Option<u32>,
    pub samples: u32,
}

impl RttStats {
    /// Statistics of `samples` (sorted in place for the median); `None` when empty.
    pub fn of(samples: &mut [u32]) -> Option<RttStats> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            ((u64::from(samples[n / 2 - 1]) + u64::from(samples[n / 2])) / 2) as u32
        };
        Some(RttStats {
            min_us: samples[0],
            avg_us: samples.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64,
            max_us: samples[n - 1],
            median_us: Some(median),
            samples: n as u32,
        })
    }
}

/// One stream's share of a closed interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSlice {
    pub bytes: u64,
    /// Kernel smoothed RTT over the interval's `TCP_INFO` samples.
    pub srtt: Option<RttStats>,
    /// Block RTT (header echoes) over the interval.
    pub block_rtt: Option<RttStats>,
    /// Retransmits during the interval (from `tcpi_total_retrans`), when sampled.
    pub retransmits: Option<u64>,
    /// The interval's last `TCP_INFO` sample (cwnd, min RTT, rates, unsent bytes).
    pub last: Option<TcpSample>,
    /// A UDP receiver's datagram accounting over the interval; `None` for TCP.
    #[serde(default)]
    pub udp: Option<UdpSlice>,
}

/// A closed interval: `[begin_ns, end_ns)` since the start, one slice per stream. It
/// travels on the control connection when the server sends (`-R`, `--bidir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedInterval {
    pub index: u32,
    /// Inside `-O`'s omitted seconds: shown, left out of the totals.
    pub omitted: bool,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub streams: Vec<StreamSlice>,
}

/// A UDP receiver's cumulative counts at one moment: everything it received up to and
/// including its record stamped `t_ns` (one snapshot per record, so an interval's packets
/// match its bytes exactly). Intervals are differences of consecutive snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpSnapshot {
    pub t_ns: u64,
    /// Datagrams received (each sequence once: duplicates are not counted here).
    pub packets: u64,
    /// Payload bytes of those datagrams.
    pub bytes: u64,
    /// One past the highest sequence seen: the datagrams the sender must have sent so far.
    pub highest_seq_plus_one: u64,
    /// Datagrams that arrived after a higher sequence (they filled a gap).
    pub out_of_order: u64,
    /// Datagrams whose sequence had already arrived.
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter, µs.
    pub jitter_us: f64,
    /// Datagrams the kernel dropped on this socket's full receive queue (`SO_RXQ_OVFL`).
    pub rxq_drops: u64,
}

/// A UDP stream's datagrams over one interval, from the receiver's snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpSlice {
    /// Datagrams received (duplicates not counted).
    pub packets: u64,
    /// Sequences the interval's highest sequence says were sent in it, less those
    /// received in it. Late arrivals that fill an earlier interval's gap lower this one's
    /// count (never below zero): the test's total comes from the last snapshot, not from
    /// adding these up.
    pub lost: u64,
    /// `lost` over the sequences expected in the interval, 0 to 100.
    pub lost_percent: f64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// RFC 3550 jitter at the interval's end, ms.
    pub jitter_ms: f64,
    /// Datagrams the receiver's kernel dropped on its full socket buffer in the interval.
    pub rxq_drops: u64,
}

impl UdpSlice {
    /// The slice between two cumulative snapshots (`before`: the previous interval's last,
    /// or zeroes at the start).
    pub fn between(before: &UdpSnapshot, after: &UdpSnapshot) -> UdpSlice {
        let packets = after.packets.saturating_sub(before.packets);
        let expected = after
            .highest_seq_plus_one
            .saturating_sub(before.highest_seq_plus_one);
        let lost = expected.saturating_sub(packets);
        UdpSlice {
            packets,
            lost,
            lost_percent: if expected > 0 {
                lost as f64 * 100.0 / expected as f64
            } else {
                0.0
            },
            out_of_order: after.out_of_order.saturating_sub(before.out_of_order),
            duplicates: after.duplicates.saturating_sub(before.duplicates),
            jitter_ms: after.jitter_us / 1000.0,
            rxq_drops: after.rxq_drops.saturating_sub(before.rxq_drops),
        }
    }
}
