//! Retransmits: many of them against the segments sent, or most of them in a few streams.

use super::Evidence;
use crate::report::finding::{ConcentratedRetransmits, Finding, ManyRetransmits};

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
