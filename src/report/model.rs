//! The report model: plain data every formatter prints and never recomputes. Built by the
//! client's reporter from the receiver's rows (the truth for Mb/s) joined with the
//! sender's own intervals (kernel RTT, retransmits, cwnd, bytes written).

use serde::Serialize;

use crate::net::{PathInfo, WindowGrant};
use crate::pin::PinPlan;

/// Everything known before the first byte moves.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub software: String,
    pub local: String,
    pub remote: String,
    pub remote_software: String,
    pub streams: u16,
    pub block_bytes: u64,
    pub local_window: WindowGrant,
    pub remote_window: WindowGrant,
    pub path: PathInfo,
    pub local_pin: PinPlan,
    pub remote_pin: PinPlan,
    /// Why this placement (e.g. the loopback rule), when there is something to say.
    pub placement_note: Option<String>,
    pub duration_s: f64,
    pub interval_s: f64,
}

/// Kernel RTT over a row, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RttMs {
    pub min: f64,
    pub avg: f64,
    pub max: f64,
}

/// The figures of one row, for one stream or for the sum.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowStats {
    pub begin_s: f64,
    pub end_s: f64,
    /// Bytes the receiver read.
    pub bytes: u64,
    /// What the receiver saw: `bytes` over the row's span.
    pub bits_per_second: f64,
    /// Bytes the sender's `write()` calls returned in the sender's matching interval.
    pub sent_bytes: u64,
    pub rtt_ms: Option<RttMs>,
    pub retransmits: Option<u64>,
    pub snd_cwnd: Option<u64>,
}

/// One stream's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamRow {
    pub stream: u16,
    #[serde(flatten)]
    pub stats: RowStats,
}

/// One interval: a row per stream and their sum.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalReport {
    pub index: u32,
    pub streams: Vec<StreamRow>,
    pub sum: RowStats,
}

/// The end of the test: per-stream totals, the total, and the reconciliation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub streams: Vec<StreamRow>,
    pub sum: RowStats,
    pub sent_bytes: u64,
    pub received_bytes: u64,
}

impl Summary {
    /// Sender and receiver agree to the byte.
    pub fn reconciled(&self) -> bool {
        self.sent_bytes == self.received_bytes
    }
}
