//! `-n`/`-k` at run time: one [`Spend`] per sending direction, shared by that direction's
//! stream threads on the end that sends it and by its receivers on the end that receives
//! it.
//!
//! Senders reserve whole blocks (TCP writes of `-l`, UDP datagrams) with one atomic
//! operation per block (per batch for UDP); a block leaves only when the budget had
//! something left as it was reserved. Like iperf3, which sends whole blocks, the total may
//! pass the budget, here by less than one block for the whole direction (not per stream):
//! `-n 10M -l 128k` sends exactly 10M, `-n 1000 -l 128k` one block. Receivers count what
//! arrived, so an end that only receives can tell that the budget has come (iperf3's
//! client ends a `-R` test so).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::wire::params::Budget;

/// One direction's budget: what is left to send, and what has arrived.
#[derive(Debug)]
pub struct Spend {
    budget: Budget,
    block_bytes: u64,
    /// Bytes (`-n`) or blocks (`-k`) not yet reserved by a sender.
    left: AtomicU64,
    /// Bytes the receivers have read.
    arrived: AtomicU64,
    /// Senders that found the budget spent (each then ends its stream).
    stopped: AtomicUsize,
}

impl Spend {
    /// The budget of a direction whose blocks are `block_bytes` long.
    pub fn new(budget: Budget, block_bytes: u64) -> Spend {
        let left = match budget {
            Budget::Bytes(n) | Budget::Blocks(n) => n,
        };
        Spend {
            budget,
            block_bytes: block_bytes.max(1),
            left: AtomicU64::new(left),
            arrived: AtomicU64::new(0),
            stopped: AtomicUsize::new(0),
        }
    }

    /// Reserves up to `want` blocks for sending: how many may leave (0: it is spent). A
    /// byte budget hands out the blocks that begin within it.
    #[inline]
    pub fn take(&self, want: u64) -> u64 {
        let unit = match self.budget {
            Budget::Bytes(_) => self.block_bytes,
            Budget::Blocks(_) => 1,
        };
        let mut granted = 0;
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                granted = left.div_ceil(unit).min(want);
                (granted > 0).then(|| left.saturating_sub(granted * unit))
            });
        granted
    }

    /// Spends what is left at once: every sender stops at its next block (an end told by
    /// the peer, for a budget kept open until then).
    pub fn close(&self) {
        self.left.store(0, Ordering::Relaxed);
    }

    /// A sender found the budget spent: it writes no more.
    pub fn sender_stopped(&self) {
        self.stopped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many senders have found it spent.
    pub fn senders_stopped(&self) -> usize {
        self.stopped.load(Ordering::Relaxed)
    }

    /// A receiver read `bytes`.
    #[inline]
    pub fn arrived(&self, bytes: u64) {
        self.arrived.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether the receivers have read the whole budget.
    pub fn all_arrived(&self) -> bool {
        let want = match self.budget {
            Budget::Bytes(n) => n,
            Budget::Blocks(k) => k.saturating_mul(self.block_bytes),
        };
        self.arrived.load(Ordering::Relaxed) >= want
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn whole_blocks_are_handed_out_until_the_budget_is_spent() {
        let s = Spend::new(Budget::Bytes(10 << 20), 128 << 10);
        let blocks: u64 = std::iter::from_fn(|| Some(s.take(1)).filter(|&n| n > 0)).sum();
        assert_eq!(blocks, 80, "10M in 128k blocks");
        assert_eq!(s.take(1), 0);
        // A budget that ends inside a block: that block still leaves, whole.
        let s = Spend::new(Budget::Bytes(1000), 128 << 10);
        assert_eq!((s.take(1), s.take(1)), (1, 0));
        // Blocks, several at a time (UDP batches).
        let s = Spend::new(Budget::Blocks(10), 1472);
        assert_eq!((s.take(4), s.take(4), s.take(4), s.take(4)), (4, 4, 2, 0));
    }

    /// Streams sharing one budget together take exactly its blocks.
    #[test]
    fn streams_share_one_budget() {
        let s = Arc::new(Spend::new(Budget::Blocks(100_000), 64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    std::iter::from_fn(|| Some(s.take(1)).filter(|&n| n > 0)).sum::<u64>()
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 100_000);
    }

    #[test]
    fn the_budget_has_arrived_once_its_bytes_have() {
        let s = Spend::new(Budget::Blocks(3), 100);
        s.arrived(299);
        assert!(!s.all_arrived());
        s.arrived(1);
        assert!(s.all_arrived());
    }
}
