//! Streams that did not share the path evenly over the whole test.

use crate::report::finding::{Finding, UnfairShares};
use crate::report::model::Fairness;

/// Jain's index below this over the whole test is worth a line.
const UNFAIR_JAIN: f64 = 0.9;

/// Streams that did not share the path evenly over the whole test.
pub fn unfair_shares(f: &Fairness) -> Option<Finding> {
    let (jain, lo, hi) = (f.jain?, f.min_share?, f.max_share?);
    if f.streams < 2 || jain >= UNFAIR_JAIN {
        return None;
    }
    Some(Finding::new(UnfairShares {
        jain,
        min_share_percent: lo * 100.0,
        max_share_percent: hi * 100.0,
        equal_share_percent: 100.0 / f64::from(f.streams),
    }))
}
