//! `-Z`: a sending stream's blocks go out with `MSG_ZEROCOPY`. The kernel then references
//! the block's pages instead of copying them, until it reports the send complete on the
//! socket's error queue; a page may not change before that. So the stream writes from a
//! ring of block buffers, each reused only after every send from it completed, and reaps
//! the completions itself on its own thread (no other thread touches the socket).
//!
//! Reaping is lazy: only when the next block's buffer is still in flight (the kernel merges
//! consecutive completions into one notification meanwhile), and at the end, when every
//! send must have completed. A ring of twice the socket buffer lets a stream run without
//! waiting for completions; a smaller one only makes it wait.
//!
//! On loopback (and on devices without scatter-gather) the kernel copies the pages after
//! all when it hands them to the receiving socket, and says so per completion: [`ZcRing`]
//! counts those, so a run can report how many of its sends were really zero-copy.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::data::page_buf::PageBuf;
use crate::os::sys;

/// Bytes of blocks the ring holds at least (more when the socket buffer is larger).
const MIN_RING_BYTES: usize = 8 << 20;

/// Block buffers for `MSG_ZEROCOPY` sends, and the completions reaped so far.
pub struct ZcRing {
    slots: Vec<PageBuf>,
    /// Per slot: the number of the last send made from it (`None`: never used).
    last_send: Vec<Option<u64>>,
    /// Sends made so far (the next send's number; the kernel numbers them from 0 in u32).
    pub sends: u64,
    /// Every send numbered below this has completed.
    done: u64,
    /// Completed ranges above `done` that arrived out of order.
    early: VecDeque<(u64, u64)>,
    /// Sends whose completion said the kernel copied them after all.
    pub copied: u64,
    /// Completion notifications read (each covers one or more sends).
    pub notifications: u64,
}

impl ZcRing {
    /// A ring of `block`-byte buffers filled with `fill`, sized for `sndbuf_bytes`.
    pub fn new(block: usize, sndbuf_bytes: usize, fill: u8) -> Self {
        let ring_bytes = (2 * sndbuf_bytes).max(MIN_RING_BYTES);
        let n = (ring_bytes / block.max(1)).clamp(2, 4096);
        ZcRing {
            slots: (0..n).map(|_| PageBuf::filled(block, fill)).collect(),
            last_send: vec![None; n],
            sends: 0,
            done: 0,
            early: VecDeque::new(),
            copied: 0,
            notifications: 0,
        }
    }

    /// Sends still in flight.
    pub fn outstanding(&self) -> u64 {
        self.sends - self.done
    }

    /// The buffer of block `seq` once every earlier send from it has completed: reaps
    /// completions and, while it is still in flight, waits for more (up to `wake` at a
    /// time, `Ok(None)` then, so the caller can check its clock and abort flag).
    pub fn slot(
        &mut self,
        sock: &impl AsFd,
        seq: u64,
        wake: Duration,
    ) -> io::Result<Option<&mut [u8]>> {
        let i = (seq % self.slots.len() as u64) as usize;
        if !self.free(i) {
            self.reap(sock)?;
            if !self.free(i) {
                sys::wait_error_queue(sock.as_fd(), wake)?;
                self.reap(sock)?;
                if !self.free(i) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(&mut self.slots[i]))
    }

    fn free(&self, i: usize) -> bool {
        self.last_send[i].is_none_or(|s| s < self.done)
    }

    /// Sends `slot_piece` (a range of block `seq`'s buffer) with `MSG_ZEROCOPY`; counts the
    /// send against that buffer when the kernel took bytes.
    pub fn send(
        &mut self,
        sock: &impl AsFd,
        seq: u64,
        from: usize,
        to: usize,
    ) -> io::Result<usize> {
        let i = (seq % self.slots.len() as u64) as usize;
        let n = sys::send_zerocopy(sock.as_fd(), &self.slots[i][from..to])?;
        if n > 0 {
            self.last_send[i] = Some(self.sends);
            self.sends += 1;
        }
        Ok(n)
    }

    /// Reads every queued completion (never blocks).
    pub fn reap(&mut self, sock: &impl AsFd) -> io::Result<()> {
        while let Some(d) = sys::reap_zerocopy(sock.as_fd())? {
            self.notifications += 1;
            self.complete(d);
        }
        Ok(())
    }

    /// Takes one notification: sends `lo..=hi` (u32, wrapping) are done.
    fn complete(&mut self, d: sys::ZcDone) {
        // Place the kernel's 32-bit numbers next to our 64-bit count of completed sends.
        let lo = self.done + u64::from(d.lo.wrapping_sub(self.done as u32));
        let hi = lo + u64::from(d.hi.wrapping_sub(d.lo));
        if d.copied {
            self.copied += hi - lo + 1;
        }
        if lo <= self.done {
            self.done = self.done.max(hi + 1);
            // Ranges that arrived early may now join on.
            while let Some(pos) = self.early.iter().position(|&(l, _)| l <= self.done) {
                let (_, h) = self.early.remove(pos).unwrap_or((0, 0));
                self.done = self.done.max(h + 1);
            }
        } else {
            self.early.push_back((lo, hi));
        }
    }

    /// At the end (every byte acknowledged): reaps until every send has completed, up to
    /// `limit`. An error names how many never did.
    pub fn finish(&mut self, sock: &impl AsFd, limit: Duration) -> io::Result<()> {
        let until = Instant::now() + limit;
        loop {
            self.reap(sock)?;
            if self.outstanding() == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= until {
                return Err(io::Error::other(format!(
                    "{} of {} zerocopy sends never completed",
                    self.outstanding(),
                    self.sends
                )));
            }
            sys::wait_error_queue(sock.as_fd(), (until - now).min(Duration::from_millis(50)))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(lo: u32, hi: u32) -> sys::ZcDone {
        sys::ZcDone {
            lo,
            hi,
            copied: false,
        }
    }

    #[test]
    fn completions_in_order_out_of_order_and_across_the_u32_wrap() {
        let mut r = ZcRing::new(4096, 0, 0);
        r.sends = 10;
        r.complete(done(0, 3));
        assert_eq!(r.done, 4);
        r.complete(done(6, 9));
        assert_eq!(r.done, 4, "6..=9 waits for 4..=5");
        r.complete(done(4, 5));
        assert_eq!((r.done, r.outstanding()), (10, 0));
        // Near the wrap: our count is 2^32 - 2, the kernel's numbers wrap to 0.
        r.done = (1 << 32) - 2;
        r.sends = (1 << 32) + 3;
        r.complete(done(u32::MAX - 1, 2));
        assert_eq!(r.done, (1 << 32) + 3);
    }

    #[test]
    fn a_buffer_is_reused_only_after_its_sends_completed() {
        let mut r = ZcRing::new(4 << 20, 0, 0);
        assert_eq!(r.slots.len(), 2);
        r.last_send[0] = Some(0);
        r.sends = 1;
        assert!(!r.free(0));
        assert!(r.free(1));
        r.complete(done(0, 0));
        assert!(r.free(0));
    }
}
