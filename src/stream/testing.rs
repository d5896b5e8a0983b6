//! Test helpers: a stream thread's context with a reporter that cuts its batches into
//! intervals, as a side's real reporter does, so stream bodies are tested on real sockets
//! without the client and the server.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{BatchChannels, StreamCtx};
use crate::report::interval::{ClosedInterval, IntervalCutter};

/// One side's context for stream `id` (blocks of `block_bytes`, `-b rate_bps`), its reporter thread (cutting `-t run` into
/// intervals of `interval`), and the start channel.
pub(crate) fn side(
    id: u16,
    block_bytes: usize,
    rate_bps: Option<u64>,
    run: Duration,
    interval: Duration,
) -> (
    StreamCtx,
    std::thread::JoinHandle<Vec<ClosedInterval>>,
    crossbeam_channel::Sender<Instant>,
) {
    let ch = BatchChannels::new(1);
    let (start_tx, start_rx) = crossbeam_channel::bounded(1);
    let ctx = StreamCtx {
        id,
        cpu: None,
        block_bytes,
        rate_bps,
        echo: None,
        batches: ch.tx.clone(),
        free: ch.free_rx.clone(),
        start: start_rx,
        abort: Arc::new(AtomicBool::new(false)),
    };
    let (rx, free_tx) = (ch.rx, ch.free_tx);
    let reporter = std::thread::spawn(move || {
        let mut cutter = IntervalCutter::new(usize::from(id) + 1, run, interval, Duration::ZERO);
        let mut out = Vec::new();
        for mut b in rx.iter() {
            cutter.add(&b);
            let done = b.done;
            b.stream = id;
            let _ = free_tx.try_send(b);
            out.extend(std::iter::from_fn(|| cutter.pop_ready()));
            if done {
                break;
            }
        }
        cutter.finish();
        out.extend(std::iter::from_fn(|| cutter.pop_ready()));
        out
    });
    (ctx, reporter, start_tx)
}

/// Held by a test that measures a rate, so two such tests never share the cores and
/// measure each other.
pub(crate) fn one_at_a_time() -> parking_lot::MutexGuard<'static, ()> {
    static TURN: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    TURN.lock()
}
