//! The senders against what was asked of them: UDP senders short of `-b`, and a test that
//! ran well past `-t` draining what its senders had queued.

use super::KEPT_RATE;
use crate::report::finding::{Finding, LongDrain, UdpSenderShort};
use crate::report::model::Header;

/// UDP senders that wrote less than `-b` asked: the sending end could not keep up (its
/// CPU, its socket, or datagrams too small for the rate), so the test did not offer the
/// path the load it was asked to. `sent_bps` is per stream, over the test's span.
pub fn udp_sender_short(sent_bps: f64, header: &Header) -> Option<Finding> {
    let asked_bps = header.rate_bps?;
    let asked = asked_bps as f64;
    (sent_bps < KEPT_RATE * asked).then(|| {
        Finding::new(UdpSenderShort {
            sent_bps,
            asked_bps,
            sent_percent: sent_bps * 100.0 / asked,
            block_bytes: header.block_bytes,
        })
    })
}

/// The receivers kept reading this long past `-t` (and at least this share of it) before
/// a line says why.
const DRAIN_MIN_S: f64 = 1.0;
const DRAIN_SHARE: f64 = 0.1;

/// A test that ended well after `-t`: the senders stopped writing on time, and the rest was
/// data queued in their socket buffers. `queued_bytes` is what the senders held unsent at
/// their last write (`tcpi_notsent_bytes`), the bulk of what the receivers read afterwards.
/// `omit_s` and `duration_s` are `-O` and `-t` as given: the planned end is their sum.
/// `senders_rows`: the rows are the senders' counts (a client sending to a peer that
/// reports late), which end on time, so only the totals cover the drain.
pub fn long_drain(
    omit_s: f64,
    duration_s: f64,
    end_s: f64,
    queued_bytes: u64,
    senders_rows: bool,
) -> Option<Finding> {
    let late_s = end_s - omit_s - duration_s;
    if late_s < DRAIN_MIN_S.max(DRAIN_SHARE * duration_s) {
        return None;
    }
    Some(Finding::new(LongDrain {
        late_s,
        duration_s,
        omit_s,
        unsent_bytes: queued_bytes,
        rows_are_writes: senders_rows,
    }))
}
