//! Retransmits: many against the segments sent, most of them in a few streams, or loss
//! that holds a loss-based congestion control far below its window.

use serde::{Deserialize, Serialize};

use super::{Advice, Setting, human_bytes, human_rate, list, plural};

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

/// TCP held down by loss: a loss-based congestion control backing off at each loss on a
/// long path with no queue on it, far below what the window allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossLimited {
    pub retransmits: u64,
    /// Sent bytes over the MSS.
    pub segments: f64,
    /// Retransmitted segments over those sent: the loss rate's estimate.
    pub loss_percent: f64,
    pub mss_bytes: u32,
    /// The path's RTT (the least kernel min_rtt) and the kernel's smoothed RTT.
    pub path_rtt_ms: f64,
    pub srtt_ms: f64,
    /// Reno's ceiling per stream at this loss, RTT and MSS (Mathis et al.: MSS/RTT ×
    /// 1.22/√p).
    pub mathis_bps: f64,
    /// What each stream reached on average.
    pub per_stream_bps: f64,
    /// The window each stream had, and the rate it would allow over the path's RTT.
    pub window_bytes: u64,
    pub window_bps: f64,
    pub congestion: String,
}

impl LossLimited {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the path loses packets and {cc} backs off at each loss: {} segments \
             retransmitted of about {:.0} sent ({:.3}%) over a {:.1} ms path with no queue on \
             it (srtt {:.1} ms). At this loss, RTT and MSS {} B Reno's ceiling (Mathis) is {} \
             per stream; {cc} reached {} per stream, {:.0}% of what the window ({}) allows \
             ({}). A congestion control that does not take random loss for congestion may fill \
             the path: try -C bbr; more streams (-P) share the loss.",
            self.retransmits,
            self.segments,
            self.loss_percent,
            self.path_rtt_ms,
            self.srtt_ms,
            self.mss_bytes,
            human_rate(self.mathis_bps),
            human_rate(self.per_stream_bps),
            100.0 * self.per_stream_bps / self.window_bps.max(1.0),
            human_bytes(self.window_bytes as f64),
            human_rate(self.window_bps),
            cc = self.congestion,
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::flags([Setting::set("-C", "bbr".into()), Setting::raise("-P")])
    }
}
