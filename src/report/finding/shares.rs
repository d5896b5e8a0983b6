//! Streams that did not share the path evenly.

use serde::{Deserialize, Serialize};

use super::Advice;

/// Streams did not share the path evenly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UnfairShares {
    pub jain: f64,
    pub min_share_percent: f64,
    pub max_share_percent: f64,
    /// Each stream's share were they equal.
    pub equal_share_percent: f64,
}

impl UnfairShares {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the streams did not share the path evenly: Jain {:.3}, shares from \
             {:.1}% to {:.1}% (equal would be {:.1}% each).",
            self.jain, self.min_share_percent, self.max_share_percent, self.equal_share_percent
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}
