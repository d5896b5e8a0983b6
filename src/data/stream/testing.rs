//! Test helpers: a stream thread's context with a reporter that collects its batches, so
//! stream bodies are tested on real sockets without the client and the server.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use super::{Batch, BatchChannels, StreamCtx};

/// One side's context for stream `id` (blocks of `block_bytes`, `-b rate_bps`), a reporter
/// thread that collects its batches until the stream is done (cut them with
/// `report::interval::cut`), and the start channel.
pub(crate) fn side(
    id: u16,
    block_bytes: usize,
    rate_bps: Option<u64>,
) -> (
    StreamCtx,
    std::thread::JoinHandle<Vec<Batch>>,
    crossbeam_channel::Sender<Instant>,
) {
    let ch = BatchChannels::new(1);
    let (start_tx, start_rx) = crossbeam_channel::bounded(1);
    let ctx = StreamCtx {
        id,
        cpu: None,
        block_bytes,
        rate_bps,
        burst: None,
        budget: None,
        file: None,
        idle: None,
        realtime: false,
        echo: None,
        echo_gap_ns: super::echo::ECHO_EVERY_NS,
        batches: ch.tx.clone(),
        free: ch.free_rx.clone(),
        start: start_rx,
        abort: Arc::new(AtomicBool::new(false)),
    };
    let rx = ch.rx;
    let reporter = std::thread::spawn(move || {
        let mut got = Vec::new();
        for b in rx.iter() {
            let done = b.done;
            got.push(b);
            if done {
                break;
            }
        }
        got
    });
    (ctx, reporter, start_tx)
}

/// Held by a test that measures a rate, so two such tests never share the cores and
/// measure each other.
pub(crate) fn one_at_a_time() -> parking_lot::MutexGuard<'static, ()> {
    static TURN: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    TURN.lock()
}
