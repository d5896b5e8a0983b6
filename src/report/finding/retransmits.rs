//! Retransmits: many against the segments sent, or most of them in a few streams.

use serde::{Deserialize, Serialize};

use super::{Advice, Setting, human_bytes, list, plural};

/// Retransmits at least [`RETRANSMIT_SHARE`] of the segments sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ManyRetransmits {
    pub retransmits: u64,
    pub share_percent: f64,
    /// Sent bytes over the MSS.
    pub segments: f64,
    pub mss_bytes: u32,
    pub sent_bytes: u64,
    /// The congestion control is bbr, which retransmits while it probes.
    pub bbr: bool,
}

impl ManyRetransmits {
    pub fn words(&self) -> String {
        let bbr = if self.bbr {
            "; bbr also retransmits by design while it probes for bandwidth (compare with -C cubic)"
        } else {
            ""
        };
        format!(
            "diagnosis: {} segments retransmitted, {:.1}% of the about {:.0} sent (MSS {} B, \
             {} of {}): segments were lost, on the path, or in a bottleneck queue that \
             overflows when the windows exceed what it holds (try a smaller -w){bbr}.",
            self.retransmits,
            self.share_percent,
            self.segments,
            self.mss_bytes,
            human_bytes(self.retransmits as f64 * f64::from(self.mss_bytes)),
            human_bytes(self.sent_bytes as f64)
        )
    }

    pub fn advice(&self) -> Advice {
        let cubic = self.bbr.then(|| Setting::set("-C", "cubic".into()));
        Advice::flags([Setting::lower("-w")].into_iter().chain(cubic))
    }
}

/// Most retransmits in a quarter of the streams or fewer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcentratedRetransmits {
    pub share_percent: f64,
    pub retransmits: u64,
    /// The streams that had them.
    pub streams: Vec<u16>,
    /// Of this many streams.
    pub of_streams: usize,
}

impl ConcentratedRetransmits {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: {:.0}% of the {} retransmits were in stream{} {} of {}: look at what \
             they do not share with the others (path, queue, core).",
            self.share_percent,
            self.retransmits,
            plural(self.streams.len()),
            list(&self.streams),
            self.of_streams
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}
