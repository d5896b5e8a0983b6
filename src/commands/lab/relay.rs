//! The relay: one pinned thread per direction reads IP packets from one TUN device, passes
//! each through the [`Path`] model (drop-tail queue, link rate, one-way delay) and writes
//! it to the other TUN device when it is due. Packets in flight wait in a FIFO: due times
//! only grow, because the link serialises in order and the delay is fixed.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::path::{Blackout, Path, PathStats, Verdict};
use crate::os::cpu;
use crate::os::sys;

/// A delivery later than this after its due time counts as late: the relay, not the
/// emulated path, set its timing.
pub const LATE_NS: u64 = 1_000_000;
/// Longest sleep, so a stop request is seen promptly.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// Packets read in one go before delivering what is due again.
const READ_BURST: usize = 256;

/// What one direction did, for the end-of-run lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayStats {
    pub path: PathStats,
    /// Deliveries more than [`LATE_NS`] after their due time, and the worst lateness.
    pub late: u64,
    pub worst_late_ns: u64,
    /// Writes the destination TUN refused (interface down, no buffer).
    pub write_errors: u64,
    /// Packets dropped by `--blackout-from` (before the path model saw them).
    pub blackout_drops: u64,
    /// CPU time of the relay thread, µs, and its wall time.
    pub cpu_us: u64,
    pub wall: Duration,
}

/// Moves packets from `from` to `to` through `path` until `stop` is set, dropping what
/// `blackout` says (its time counted from `up`, when the lab's path came up). Runs on the
/// calling thread (pin it first).
pub fn run(
    from: &File,
    to: &File,
    mut path: Path,
    mtu: usize,
    (blackout, up): (Option<Blackout>, Instant),
    stop: &Arc<AtomicBool>,
) -> RelayStats {
    sys::set_timer_slack(1_000);
    let clock = Instant::now();
    let cpu0 = cpu::thread();
    let mut relay = Relay {
        clock,
        cap: mtu + 64,
        queue: VecDeque::new(),
        free: Vec::new(),
        stats: RelayStats::default(),
    };
    while !stop.load(Ordering::Relaxed) {
        relay.deliver_due(to);
        if relay.read_burst(from, &mut path, (blackout, up), stop) > 0 {
            continue;
        }
        relay.wait(from);
    }
    let mut stats = relay.stats;
    stats.path = path.stats;
    stats.cpu_us = cpu::thread_since(cpu0).total_us();
    stats.wall = clock.elapsed();
    stats
}

/// One direction's packets in flight, the buffers it reuses, and what it counted.
struct Relay {
    /// Due times are nanoseconds since this.
    clock: Instant,
    /// A read buffer's size: the MTU and some room.
    cap: usize,
    /// Packets waiting for their due time, in the order they are due.
    queue: VecDeque<(u64, Vec<u8>)>,
    free: Vec<Vec<u8>>,
    stats: RelayStats,
}

impl Relay {
    fn ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Writes every packet that is due to `to`, counting the late ones.
    fn deliver_due(&mut self, mut to: &File) {
        let now = self.ns();
        while let Some(&(due, _)) = self.queue.front() {
            if due > now {
                break;
            }
            let (_, pkt) = self.queue.pop_front().expect("front exists");
            let late = now - due;
            if late > LATE_NS {
                self.stats.late += 1;
            }
            self.stats.worst_late_ns = self.stats.worst_late_ns.max(late);
            if to.write(&pkt).is_err() {
                self.stats.write_errors += 1;
            }
            self.free.push(pkt);
        }
    }

    /// Reads up to [`READ_BURST`] packets from `from` and offers each to `path` (after
    /// the blackout); how many it read. A device that went away sets `stop`.
    fn read_burst(
        &mut self,
        mut from: &File,
        path: &mut Path,
        (blackout, up): (Option<Blackout>, Instant),
        stop: &AtomicBool,
    ) -> usize {
        let mut got = 0;
        while got < READ_BURST {
            let mut buf = self.free.pop().unwrap_or_default();
            buf.resize(self.cap, 0);
            match from.read(&mut buf) {
                Ok(n) => {
                    got += 1;
                    buf.truncate(n);
                    if blackout.is_some_and(|b| b.drops(up.elapsed().as_nanos() as u64, &buf)) {
                        self.stats.blackout_drops += 1;
                        self.free.push(buf);
                        continue;
                    }
                    match path.offer(self.ns(), n) {
                        Verdict::Deliver(due) => self.queue.push_back((due, buf)),
                        Verdict::QueueFull | Verdict::Lost => self.free.push(buf),
                    }
                }
                Err(e) => {
                    self.free.push(buf);
                    if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted {
                        // The device went away (teardown); nothing more to relay.
                        stop.store(true, Ordering::Relaxed);
                    }
                    break;
                }
            }
        }
        got
    }

    /// Nothing was read: sleeps until the next packet is due or `from` is readable (at
    /// most [`MAX_WAIT`]), and gives back spare buffers.
    fn wait(&mut self, from: &File) {
        let wait = (self.queue.front())
            .map_or(MAX_WAIT, |&(due, _)| {
                Duration::from_nanos(due.saturating_sub(self.ns()))
            })
            .min(MAX_WAIT);
        if !wait.is_zero() {
            // A poll failure only costs a spin; the stop flag still ends the loop.
            let _ = sys::wait_readable(from.as_fd(), wait);
        }
        // Keep only the buffers the pipe can use, so a burst does not pin memory forever.
        self.free.truncate(4 * READ_BURST);
    }
}
