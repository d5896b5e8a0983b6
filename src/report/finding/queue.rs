//! Block RTT against the path's RTT and a block's own write time: not a queue, a wait
//! elsewhere, or a standing queue in the socket buffers with what the window has to do
//! with it.

use serde::{Deserialize, Serialize};

use super::{Advice, Setting, human_bytes, human_rate};
use crate::units::format_size;

/// How long blocks waited, against the path's RTT and a block's own write time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BlockWait {
    /// The streams' mean block RTT.
    pub block_rtt_ms: f64,
    /// The kernel's smallest min_rtt of the streams.
    pub path_rtt_ms: f64,
    pub write: BlockWrite,
}

/// The part of every block RTT sample that is the sender's own writing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum BlockWrite {
    /// `-b` paces out each block's header after its first piece.
    Pacing {
        rate_bps: u64,
        header_bytes: usize,
        header_ms: f64,
    },
    /// A whole block written at the measured rate per stream.
    Writing {
        block_bytes: u64,
        per_stream_bps: f64,
        write_ms: f64,
    },
}

impl BlockWait {
    /// "diagnosis: blocks waited 1.94 ms on average against a path RTT of 0.004 ms …".
    fn waited(&self) -> String {
        format!(
            "diagnosis: blocks waited {:.2} ms on average against a path RTT of {:.3} ms \
             (kernel min_rtt)",
            self.block_rtt_ms, self.path_rtt_ms
        )
    }

    /// " beyond each block's own write time (…)" when `named`, else "".
    fn beyond_write(&self, named: bool) -> String {
        match (named, self.write) {
            (false, _) => String::new(),
            (true, BlockWrite::Pacing { .. }) => format!(
                " beyond the pacing of each block's header ({})",
                self.write.describe()
            ),
            (true, BlockWrite::Writing { .. }) => {
                format!(
                    " beyond each block's own write time ({})",
                    self.write.describe()
                )
            }
        }
    }
}

impl BlockWrite {
    /// "-l 128k takes 6.55 ms to write at 160 Mb/s per stream", or the pacing's.
    fn describe(&self) -> String {
        match *self {
            BlockWrite::Pacing {
                rate_bps,
                header_bytes,
                header_ms,
            } => format!(
                "-b {} paces out each block's {header_bytes}-byte header in {header_ms:.2} ms",
                human_rate(rate_bps as f64)
            ),
            BlockWrite::Writing {
                block_bytes,
                per_stream_bps,
                write_ms,
            } => format!(
                "-l {} takes {write_ms:.2} ms to write at {} per stream",
                format_size(block_bytes),
                human_rate(per_stream_bps)
            ),
        }
    }
}

/// Block RTT above the path's, all of it a block's own write time or its header's pacing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WriteTimeNotQueue {
    #[serde(flatten)]
    pub wait: BlockWait,
}

impl WriteTimeNotQueue {
    pub fn words(&self) -> String {
        let (waited, block) = (self.wait.waited(), self.wait.write.describe());
        match self.wait.write {
            BlockWrite::Pacing { .. } => format!(
                "{waited}: that is the pacing of each block's header ({block}), not a queue."
            ),
            BlockWrite::Writing { .. } => format!(
                "{waited}: that is each block's own write time ({block}; the sender reads \
                 echoes between writes), not a queue. A smaller -l gives a finer block RTT."
            ),
        }
    }

    pub fn advice(&self) -> Advice {
        match self.wait.write {
            BlockWrite::Pacing { .. } => Advice::none(),
            BlockWrite::Writing { .. } => Advice::flags([Setting::lower("-l")]),
        }
    }
}

/// A sender `-b` held below the path's rate: the wait is not in its socket buffers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PacedBelowPath {
    #[serde(flatten)]
    pub wait: BlockWait,
    pub rate_bps: u64,
    /// The wait beyond the path's RTT and the header's pacing.
    pub beyond_ms: f64,
}

impl PacedBelowPath {
    pub fn words(&self) -> String {
        format!(
            "{}: -b {} paced the sender below what the path takes, so the {:.2} ms beyond the \
             path's RTT and the header's pacing are not a queue in its socket buffers and a \
             smaller -w would not shorten them: they are the receiver waking to read and \
             echo, or acknowledgements delayed between paced pieces.",
            self.wait.waited(),
            human_rate(self.rate_bps as f64),
            self.beyond_ms
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// A wait that would be a queue larger than the fixed socket buffers: it is elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueBeyondBuffers {
    #[serde(flatten)]
    pub wait: BlockWait,
    pub queue_ms: f64,
    /// The write time is a tenth of the wait or more, so the words name it.
    pub write_named: bool,
    pub queue_bytes: f64,
    /// The sender's and the receiver's buffers together.
    pub buffers_bytes: u64,
}

impl QueueBeyondBuffers {
    pub fn words(&self) -> String {
        format!(
            "{}: {:.2} ms{} would be a queue of {} per stream, more than the socket buffers \
             hold ({} sent + received): the blocks waited elsewhere (a receiver slow to read, \
             a thread not scheduled), not in a too-large window.",
            self.wait.waited(),
            self.queue_ms,
            self.wait.beyond_write(self.write_named),
            human_bytes(self.queue_bytes),
            human_bytes(self.buffers_bytes as f64)
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// Blocks queued in the socket buffers; the finding after it says what to do.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StandingQueue {
    #[serde(flatten)]
    pub wait: BlockWait,
    /// Per stream.
    pub queue_bytes: f64,
    /// The write time is a tenth of the wait or more, so the words name it.
    pub write_named: bool,
}

impl StandingQueue {
    pub fn words(&self) -> String {
        format!(
            "{}: a standing queue of about {} per stream in the socket buffers{}.",
            self.wait.waited(),
            human_bytes(self.queue_bytes),
            self.wait.beyond_write(self.write_named)
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// The bandwidth-delay product per stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bdp {
    pub per_stream_bps: f64,
    pub path_rtt_ms: f64,
    pub bdp_bytes: f64,
}

impl Bdp {
    /// "(500 Mb/s x 60.000 ms = 3.6 MiB per stream)".
    fn product(&self) -> String {
        format!(
            "({} x {:.3} ms = {} per stream)",
            human_rate(self.per_stream_bps),
            self.path_rtt_ms,
            human_bytes(self.bdp_bytes)
        )
    }
}

/// A standing queue with the window (`-w`) already at or below what the path needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowNotTheCause {
    /// `-w` as asked.
    pub window_bytes: u64,
    pub sndbuf_bytes: u64,
    #[serde(flatten)]
    pub bdp: Bdp,
    pub write: BlockWrite,
}

impl WindowNotTheCause {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the window (-w {}, {} granted) is already at or below what the path \
             needs {}, so a smaller one would cost rate: the queue is not the window's. Look \
             at the block size ({}) and at the receiver keeping up (its CPU).",
            format_size(self.window_bytes),
            human_bytes(self.sndbuf_bytes as f64),
            self.bdp.product(),
            self.write.describe()
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// A standing queue and a send buffer far above the bandwidth-delay product.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowAboveBdp {
    pub sndbuf_bytes: u64,
    /// No `-w`: the kernel sized the buffer.
    pub autotuned: bool,
    #[serde(flatten)]
    pub bdp: Bdp,
    /// The window to ask for: the BDP rounded up to a power of two, 64 KiB at least.
    pub window_bytes: u64,
}

impl WindowAboveBdp {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the send buffer ({} {}) is far above the bandwidth-delay product {}; \
             -w {} should keep the rate without the queue.",
            human_bytes(self.sndbuf_bytes as f64),
            if self.autotuned {
                "autotuned"
            } else {
                "granted"
            },
            self.bdp.product(),
            format_size(self.window_bytes)
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::flags([Setting::set("-w", format_size(self.window_bytes))])
    }
}
