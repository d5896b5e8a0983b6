//! What pinperf's per-block bookkeeping costs against the `write()` it accounts for:
//! one block-clock stamp (`BlockClock`: the TSC where it is the kernel's clock source, else
//! `Instant::now()`), and a record pushed into a batch (flushed to a channel, with an
//! anchoring clock reading, as the stream threads do), measured over many iterations,
//! beside the cost of an 8 KiB blocking write on loopback. Run by
//! `bench-scripts/timing-cost.sh`; prints one CSV line.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use pinperf::data::stream::{BatchChannels, Batcher, BlockClock, TestClock};

fn main() {
    let block: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8192);
    let iters: u64 = 2_000_000;

    // Bookkeeping alone: clock reading + record + batch flushes into a drained channel.
    let channels = BatchChannels::new(1);
    let rx = channels.rx.clone();
    let free_tx = channels.free_tx.clone();
    let recycler = std::thread::spawn(move || {
        for b in rx {
            let _ = free_tx.try_send(b);
        }
    });
    let mut batcher = Batcher::new(0, channels.tx.clone(), channels.free_rx.clone());
    drop(channels);
    let clock = TestClock { t0: Instant::now() };
    // As the stream threads stamp: the block clock per block, an anchor per flush.
    let mut stamps = BlockClock::new(clock);
    let start = Instant::now();
    for _ in 0..iters {
        let t_ns = stamps.now_ns();
        if batcher.push(t_ns, block as u32) {
            batcher
                .flush(stamps.anchor(), None, false)
                .expect("reporter alive");
        }
    }
    let book_ns = start.elapsed().as_nanos() as f64 / iters as f64;
    drop(batcher);
    recycler.join().expect("recycler");

    // The write it accounts for: blocking writes of `block` bytes to a reader on loopback.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 128 << 10];
        while s.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    });
    let mut w = TcpStream::connect(addr).expect("connect");
    let data = vec![0x5au8; block];
    let writes = 300_000u64;
    let start = Instant::now();
    for _ in 0..writes {
        w.write_all(&data).expect("write");
    }
    let write_ns = start.elapsed().as_nanos() as f64 / writes as f64;
    drop(w);
    reader.join().expect("reader");

    println!(
        "block,bookkeeping_ns_per_block,write_ns_per_block,bookkeeping_percent\n{block},{book_ns:.1},{write_ns:.1},{:.3}",
        100.0 * book_ns / write_ns
    );
}
