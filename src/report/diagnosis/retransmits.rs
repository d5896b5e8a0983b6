//! Retransmits: many of them against the segments sent, or most of them in a few streams.

use super::Evidence;
use crate::report::finding::{ConcentratedRetransmits, Finding, LossLimited, ManyRetransmits};

/// Retransmitted segments at least this share of the segments sent…
const RETRANSMIT_SHARE: f64 = 0.01;
/// …and at least this many, get a line.
const RETRANSMIT_MIN: u64 = 10;

/// Many retransmits: segments lost on the path or in a queue that overflowed.
pub(super) fn retransmit_share(e: &Evidence) -> Option<Finding> {
    let retransmits: u64 = e.streams.iter().filter_map(|s| s.retransmits).sum();
    let sent_bytes: u64 = e.streams.iter().map(|s| s.sent_bytes).sum();
    let mss_bytes = e.header.path.mss.filter(|&m| m > 0)?;
    let segments = sent_bytes as f64 / f64::from(mss_bytes);
    if retransmits < RETRANSMIT_MIN || segments < 1.0 {
        return None;
    }
    let share = retransmits as f64 / segments;
    if share < RETRANSMIT_SHARE {
        return None;
    }
    Some(Finding::new(ManyRetransmits {
        retransmits,
        share_percent: share * 100.0,
        segments,
        mss_bytes,
        sent_bytes,
        bbr: e.header.congestion == "bbr",
    }))
}

pub(super) fn concentrated_retransmits(e: &Evidence) -> Option<Finding> {
    let mut retr: Vec<(u16, u64)> = e
        .streams
        .iter()
        .map(|s| (s.stream, s.retransmits.unwrap_or(0)))
        .collect();
    let total: u64 = retr.iter().map(|r| r.1).sum();
    if retr.len() < 2 || total < 10 {
        return None;
    }
    retr.sort_by_key(|r| std::cmp::Reverse(r.1));
    let k = (retr.len() / 4).max(1);
    let top: u64 = retr[..k].iter().map(|r| r.1).sum();
    let share = top as f64 / total as f64;
    if share < 0.75 {
        return None;
    }
    let mut streams: Vec<u16> = retr[..k].iter().map(|r| r.0).collect();
    streams.sort_unstable();
    Some(Finding::new(ConcentratedRetransmits {
        share_percent: share * 100.0,
        retransmits: total,
        streams,
        of_streams: retr.len(),
    }))
}

/// A path this long (its least kernel min_rtt) makes each loss cost a loss-based
/// congestion control many round trips of growth.
const LONG_PATH_US: f64 = 2_000.0;
/// Kernel srtt within this factor of the path's RTT: no queue on the path, so the losses
/// are the path's own, not a bottleneck queue's overflow.
const NO_QUEUE_FACTOR: f64 = 1.5;
/// Streams below this share of what their window allows are held down by something else.
const HELD_DOWN: f64 = 0.5;

/// Loss-limited TCP: retransmits on a long path with no queue on it, a loss-based
/// congestion control, and each stream far below what its window allows.
pub(super) fn loss_limited(e: &Evidence) -> Option<Finding> {
    let h = e.header;
    let congestion = h.congestion.clone();
    if h.udp || congestion.is_empty() || congestion == "bbr" || e.streams.is_empty() {
        return None;
    }
    let retransmits: u64 = e.streams.iter().filter_map(|s| s.retransmits).sum();
    let sent_bytes: u64 = e.streams.iter().map(|s| s.sent_bytes).sum();
    let mss_bytes = h.path.mss.filter(|&m| m > 0)?;
    let segments = sent_bytes as f64 / f64::from(mss_bytes);
    let path_us = f64::from(
        e.streams
            .iter()
            .filter_map(|s| s.min_rtt)
            .filter(|&v| v > 0)
            .min()?,
    );
    let srtt_us = mean(
        e.streams
            .iter()
            .filter_map(|s| s.kernel_rtt.map(|r| r.avg_us)),
    )?;
    if retransmits < 3 || path_us < LONG_PATH_US || srtt_us > NO_QUEUE_FACTOR * path_us {
        return None;
    }
    let p = retransmits as f64 / segments.max(1.0);
    let rtt_s = path_us / 1e6;
    let per_stream_bps = e.rate_bps / e.streams.len() as f64;
    // The usable part of a Linux send buffer: half of what SO_SNDBUF reports.
    let window_bytes = e
        .streams
        .iter()
        .filter_map(|s| s.sndbuf)
        .max()
        .unwrap_or(h.local_window.sndbuf)
        / 2;
    let window_bps = window_bytes as f64 * 8.0 / rtt_s;
    if window_bytes == 0 || per_stream_bps >= HELD_DOWN * window_bps {
        return None;
    }
    Some(Finding::new(LossLimited {
        retransmits,
        segments,
        loss_percent: p * 100.0,
        mss_bytes,
        path_rtt_ms: path_us / 1e3,
        srtt_ms: srtt_us / 1e3,
        mathis_bps: f64::from(mss_bytes) * 8.0 / rtt_s * 1.22 / p.sqrt(),
        per_stream_bps,
        window_bytes,
        window_bps,
        congestion,
    }))
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}
