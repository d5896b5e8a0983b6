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
    let ns = || clock.elapsed().as_nanos() as u64;
    let cap = mtu + 64;
    let mut queue: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut free: Vec<Vec<u8>> = Vec::new();
    let mut stats = RelayStats::default();
    let mut from_ref = from;
    let mut to_ref = to;
    while !stop.load(Ordering::Relaxed) {
        let now = ns();
        while let Some(&(due, _)) = queue.front() {
            if due > now {
                break;
            }
            let (_, pkt) = queue.pop_front().expect("front exists");
            let late = now - due;
            if late > LATE_NS {
                stats.late += 1;
            }
            stats.worst_late_ns = stats.worst_late_ns.max(late);
            if to_ref.write(&pkt).is_err() {
                stats.write_errors += 1;
            }
            free.push(pkt);
        }
        let mut got = 0;
        while got < READ_BURST {
            let mut buf = free.pop().unwrap_or_default();
            buf.resize(cap, 0);
            match from_ref.read(&mut buf) {
                Ok(n) => {
                    got += 1;
                    buf.truncate(n);
                    if blackout.is_some_and(|b| b.drops(up.elapsed().as_nanos() as u64, &buf)) {
                        stats.blackout_drops += 1;
                        free.push(buf);
                        continue;
                    }
                    match path.offer(ns(), n) {
                        Verdict::Deliver(due) => queue.push_back((due, buf)),
                        Verdict::QueueFull | Verdict::Lost => free.push(buf),
                    }
                }
                Err(e) => {
                    free.push(buf);
                    if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted {
                        // The device went away (teardown); nothing more to relay.
                        stop.store(true, Ordering::Relaxed);
                    }
                    break;
                }
            }
        }
        if got > 0 {
            continue;
        }
        let wait = queue
            .front()
            .map_or(MAX_WAIT, |&(due, _)| {
                Duration::from_nanos(due.saturating_sub(ns()))
            })
            .min(MAX_WAIT);
        if !wait.is_zero() {
            // A poll failure only costs a spin; the stop flag still ends the loop.
            let _ = sys::wait_readable(from.as_fd(), wait);
        }
        // Keep only the buffers the pipe can use, so a burst does not pin memory forever.
        free.truncate(4 * READ_BURST);
    }
    stats.path = path.stats;
    stats.cpu_us = cpu::thread_since(cpu0).total_us();
    stats.wall = clock.elapsed();
    stats
}
