//! The senders against what was asked of them: UDP senders short of `-b`, a drain past
//! `-t`.

use serde::{Deserialize, Serialize};

use super::{Advice, Setting, human_bytes};

/// UDP senders wrote less than `-b` asked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpSenderShort {
    /// Per stream, over the test's span.
    pub sent_bps: f64,
    pub asked_bps: u64,
    pub sent_percent: f64,
    pub block_bytes: u64,
}

impl UdpSenderShort {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the senders wrote {:.1} Mb/s per stream, {:.0}% of the -b {} asked: \
             the sending host could not keep up (CPU, or -l {} too small for the rate); the \
             loss figures are for the load actually offered.",
            self.sent_bps / 1e6,
            self.sent_percent,
            crate::units::format_rate(self.asked_bps),
            self.block_bytes
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::flags([Setting::raise("-l")])
    }
}

/// The test ran well past `-t`, draining the senders' socket buffers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LongDrain {
    /// Seconds past the planned end (`-O` + `-t`).
    pub late_s: f64,
    pub duration_s: f64,
    pub omit_s: f64,
    /// What the senders held unsent at their last write.
    pub unsent_bytes: u64,
    /// The rows are this end's writes (against a peer that reports late): they end on time.
    pub rows_are_writes: bool,
}

impl LongDrain {
    pub fn words(&self) -> String {
        let omit = if self.omit_s > 0.0 {
            format!(" -O {}", self.omit_s)
        } else {
            String::new()
        };
        let covers = match self.rows_are_writes {
            true => {
                "the totals cover that drain (the rows are this end's writes, which ended on time)"
            }
            false => "the last row covers that drain",
        };
        format!(
            "diagnosis: the test ran {:.1} s past -t {}{omit}: the senders stopped writing on \
             time with {} still unsent in their socket buffers, which the receivers read \
             afterwards; {covers}. A window near the bandwidth-delay product ends on time.",
            self.late_s,
            self.duration_s,
            human_bytes(self.unsent_bytes as f64)
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}
