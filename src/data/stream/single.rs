//! The `single` engine: one thread drives every stream over non-blocking sockets with
//! `poll()`, writing one block to each writable socket in turn — the way thrulay's client
//! worked. It exists so users can measure what thread-per-stream buys (`--engine`,
//! `pinperf compare --engines threads,single`). Records, batches, block headers and echoes
//! are the same as the threaded sender's, so the two are compared on equal terms.
//!
//! So is the send buffer: a socket `poll()` found writable is *filling*, and gets a block
//! every turn until the kernel takes less than a block, the way a blocking `write()` fills
//! it. `poll()` says writable only while at most 2/3 of the buffer is queued, so writing
//! only then would keep a third of every buffer empty: a smaller queue, and a lower block
//! RTT, than the user's `-w` asked for.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::echo::{self, EchoCollector};
use super::sender::SendOutcome;
use super::{Batcher, FLUSH_EVERY_NS, StreamCtx, TcpSample, TestClock, is_timeout};
use crate::data::page_buf::PageBuf;
use crate::error::{Error, IoContext, Result};
use crate::os::cpu;
use crate::os::sys;

/// Per-stream state of the multiplexer.
struct Lane {
    sock: TcpStream,
    /// Resets `sock` if the lane does not end with the receiver's close.
    reset: crate::os::net::ResetOnDrop,
    echo: Option<TcpStream>,
    batcher: Batcher,
    echoes: EchoCollector,
    block: PageBuf,
    offset: usize,
    /// Written a block per turn, whether or not `poll()` says writable, until the kernel
    /// takes less than a block: see [`run`].
    filling: bool,
    seq: u64,
    stamp_ns: u64,
    last_flush_ns: u64,
    bytes: u64,
    writes: u64,
}

impl Lane {
    /// Stream `ctx.id`'s lane over `sock`, both connections non-blocking.
    fn new(ctx: &mut StreamCtx, sock: TcpStream) -> Result<Lane> {
        sock.set_nonblocking(true)
            .op(|| format!("stream-{}: set O_NONBLOCK", ctx.id))?;
        let echo = ctx.echo.take();
        let mut echoes = EchoCollector::new();
        if let Some(e) = &echo {
            e.set_nonblocking(true)
                .op(|| format!("stream-{}: set O_NONBLOCK on the echo connection", ctx.id))?;
            let _ = echoes.stamp_arrivals(e);
        }
        Ok(Lane {
            reset: crate::os::net::ResetOnDrop::new(&sock),
            sock,
            echo,
            batcher: Batcher::new(ctx.id, ctx.batches.clone(), ctx.free.clone()),
            echoes,
            block: PageBuf::filled(ctx.block_bytes, 0x5a),
            offset: 0,
            filling: false,
            seq: 0,
            stamp_ns: 0,
            last_flush_ns: 0,
            bytes: 0,
            writes: 0,
        })
    }

    /// Stream `id`'s error: `write`'s, or this end's own error held by its other
    /// connection (`echo::cause_of`).
    fn cause(&self, id: usize, write: Error) -> Error {
        echo::cause_of(
            id as u16,
            write,
            (&self.sock, "write"),
            self.echo.as_ref(),
            None,
        )
    }

    /// The RTTs of the echoes waiting on the echo connection.
    fn take_echoes(&mut self, id: usize, clock: &TestClock) -> Result<()> {
        let Some(echo_sock) = &self.echo else {
            return Ok(());
        };
        let t_ns = clock.ns(Instant::now());
        let batcher = &mut self.batcher;
        self.echoes
            .drain(
                echo_sock,
                || clock.ns(Instant::now()),
                |rtt_ns| batcher.push_rtt(t_ns, rtt_ns),
            )
            .map_err(|e| {
                let lost = echo::lost(id as u16, e);
                echo::cause_of(
                    id as u16,
                    lost,
                    (&self.sock, "write"),
                    Some(echo_sock),
                    None,
                )
            })
    }

    /// One non-blocking write of the rest of the current block.
    fn write(&mut self, id: usize, clock: &TestClock) -> Result<()> {
        if self.offset == 0 {
            echo::stamp(&mut self.block, self.seq, self.stamp_ns);
        }
        let want = self.block.len() - self.offset;
        match self.sock.write(&self.block[self.offset..]) {
            Ok(n) => {
                if self.offset == 0 {
                    self.seq += 1;
                }
                self.filling = n == want;
                let t_ns = clock.ns(Instant::now());
                self.stamp_ns = t_ns;
                self.bytes += n as u64;
                self.writes += 1;
                self.offset = (self.offset + n) % self.block.len();
                if self.batcher.push(t_ns, n as u32) {
                    self.flush(t_ns, false)?;
                }
                Ok(())
            }
            Err(e) if is_timeout(&e) => {
                self.filling = false;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(self.cause(id, Error::io(format!("stream-{id}: write"), e))),
        }
    }

    fn flush(&mut self, t_ns: u64, last: bool) -> Result<()> {
        self.batcher
            .flush(t_ns, TcpSample::read(&self.sock, t_ns), last)?;
        self.last_flush_ns = t_ns;
        Ok(())
    }
}

/// Runs all sending streams on the calling thread (pinned to the first stream's core).
pub fn run(
    mut ctxs: Vec<StreamCtx>,
    socks: Vec<TcpStream>,
    duration: Duration,
    drain: super::Drain,
) -> Result<Vec<SendOutcome>> {
    let mut lanes = Vec::with_capacity(socks.len());
    for (ctx, sock) in ctxs.iter_mut().zip(socks) {
        lanes.push(Lane::new(ctx, sock)?);
    }
    let Some(first) = ctxs.first() else {
        return Ok(Vec::new());
    };
    first.pin()?;
    let clock = first.wait_start()?;
    let cpu_start = cpu::thread();
    send_until(first, &clock, &mut lanes, duration.as_nanos() as u64)?;
    let t_ns = clock.ns(Instant::now());
    let thread_cpu = cpu::thread_since(cpu_start);
    let mut outcomes = Vec::with_capacity(lanes.len());
    for (id, lane) in lanes.iter_mut().enumerate() {
        lane.flush(t_ns, true)?;
        lane.sock
            .shutdown(Shutdown::Write)
            .op(|| format!("stream-{id}: shutdown(SHUT_WR)"))?;
        outcomes.push(SendOutcome {
            id: id as u16,
            bytes: lane.bytes,
            writes: lane.writes,
            cpu: cpu::CpuTime::default(),
            zerocopy_sends: 0,
            zerocopy_copied: 0,
        });
    }
    // One thread did all the work: its time, as measured, goes on the first stream and
    // nothing on the others (dividing it would invent per-stream figures); the report lists
    // the one `stream-mux` thread (`CpuReport::on_one_thread`).
    if let Some(first) = outcomes.first_mut() {
        first.cpu = thread_cpu;
    }
    drain_all(first, &mut lanes, drain)?;
    Ok(outcomes)
}

/// The `poll()` loop: each turn, echoes read and a block written to each writable or
/// filling lane, until `end_ns`.
fn send_until(first: &StreamCtx, clock: &TestClock, lanes: &mut [Lane], end_ns: u64) -> Result<()> {
    // Data sockets for writing, then echo sockets for reading (-1: none; poll skips it).
    let n = lanes.len();
    let mut fds: Vec<libc::pollfd> = lanes
        .iter()
        .map(|l| crate::os::sys::pollfd(l.sock.as_raw_fd(), libc::POLLOUT))
        .chain(lanes.iter().map(|l| {
            crate::os::sys::pollfd(l.echo.as_ref().map_or(-1, |e| e.as_raw_fd()), libc::POLLIN)
        }))
        .collect();
    loop {
        if clock.ns(Instant::now()) >= end_ns {
            return Ok(());
        }
        if first.aborted() {
            return Err(Error::Aborted("stream-mux".into()));
        }
        // A filling lane is written this turn whatever poll() says: poll only looks.
        let wait_ms = if lanes.iter().any(|l| l.filling) {
            0
        } else {
            50
        };
        match sys::poll(&mut fds, wait_ms) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("stream-mux: poll", e)),
        }
        let (data_fds, echo_fds) = fds.split_at(n);
        if let Some(e) = hung_up(lanes, data_fds) {
            return Err(e);
        }
        for (id, ((lane, fd), efd)) in lanes.iter_mut().zip(data_fds).zip(echo_fds).enumerate() {
            if efd.revents & libc::POLLIN != 0 {
                lane.take_echoes(id, clock)?;
            }
            if lane.filling || fd.revents & libc::POLLOUT != 0 {
                lane.write(id, clock)?;
            }
        }
        // Starved lanes still advance their watermark, so intervals close on time.
        let t_ns = clock.ns(Instant::now());
        for lane in lanes.iter_mut() {
            if t_ns.saturating_sub(lane.last_flush_ns) >= FLUSH_EVERY_NS {
                lane.flush(t_ns, false)?;
            }
        }
    }
}

/// The error of the first connection `poll()` found failed, if any. It is named before
/// any error this turn's writes would find, which came later (a receiver that lost one
/// connection closes the others, and a write to one of those meets its reset ahead of
/// the cause). Several found failed by one `poll()` have no order: the lowest is named.
fn hung_up(lanes: &[Lane], data_fds: &[libc::pollfd]) -> Option<Error> {
    let failed = |fd: &libc::pollfd| fd.revents & (libc::POLLERR | libc::POLLHUP) != 0;
    let id = data_fds.iter().position(failed)?;
    let lane = &lanes[id];
    // The socket's own error (SO_ERROR), as the threads engine's write returns it; a
    // hang-up without one is the receiver closing the connection.
    let e = match lane.sock.take_error() {
        Ok(Some(e)) => e,
        Ok(None) | Err(_) => std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "the receiver closed the connection",
        ),
    };
    Some(lane.cause(id, Error::io(format!("stream-{id}: write"), e)))
}

/// Reads every socket until the receiver closes it (see [`super::drain_to_eof`]).
fn drain_all(ctx: &StreamCtx, lanes: &mut [Lane], drain: super::Drain) -> Result<()> {
    for (id, lane) in lanes.iter_mut().enumerate() {
        let _ = lane.sock.set_nonblocking(false);
        let _ = lane.sock.set_read_timeout(Some(super::WAKE));
        super::drain_to_eof(id as u16, &mut lane.sock, &ctx.abort, drain)?;
        lane.reset.disarm();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    use crate::data::stream::testing::{one_at_a_time, side};
    use crate::data::stream::{Batch, Copying, sender};

    const BLOCK: usize = 16 << 10;

    /// Stream 0 over loopback for 1 s to a receiver that reads nothing until the end, by
    /// either engine: the bytes still unsent at the end, and the send buffer's size.
    fn unread_run(single: bool) -> (u32, u64) {
        // A receive window that closes at once: the sender's buffer holds nearly all it wrote.
        let listener =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        listener.set_recv_buffer_size(4096).unwrap();
        listener
            .bind(
                &"127.0.0.1:0"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
            )
            .unwrap();
        listener.listen(1).unwrap();
        let listener: TcpListener = listener.into();
        let tx = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut rx, _) = listener.accept().unwrap();
        socket2::SockRef::from(&tx)
            .set_send_buffer_size(256 << 10)
            .unwrap();
        let run_time = Duration::from_secs(1);
        let (ctx, rep, start) = side(0, BLOCK, None);
        let sender = std::thread::spawn(move || {
            if single {
                super::run(
                    vec![ctx],
                    vec![tx],
                    run_time,
                    crate::data::stream::Drain::ToEof,
                )
                .map(|_| ())
            } else {
                sender::run(
                    ctx,
                    tx,
                    run_time,
                    Copying::default(),
                    crate::data::stream::Drain::ToEof,
                )
                .map(|_| ())
            }
        });
        start.send(Instant::now()).unwrap();
        std::thread::sleep(run_time + Duration::from_millis(200));
        let mut sink = vec![0u8; 1 << 16];
        while rx.read(&mut sink).unwrap() > 0 {}
        drop(rx);
        sender.join().unwrap().unwrap();
        let batches: Vec<Batch> = rep.join().unwrap();
        let last = batches
            .iter()
            .flat_map(|b| &b.samples)
            .next_back()
            .expect("a TCP_INFO sample");
        (last.notsent_bytes, last.sndbuf_bytes)
    }

    /// `poll()` says writable only while at most 2/3 of the send buffer is queued; the
    /// engine still fills the buffer as a blocking `write()` does, so the same `-w` queues
    /// as much in both engines (and block RTT, which includes that queue, agrees).
    #[test]
    fn a_writable_socket_is_filled_as_a_blocking_write_fills_it() {
        let _turn = one_at_a_time();
        let (threads, sndbuf) = unread_run(false);
        let (single, _) = unread_run(true);
        eprintln!(
            "unsent at the end with SO_SNDBUF {sndbuf}: threads {threads} B, single {single} B"
        );
        assert!(u64::from(threads) > sndbuf / 2, "threads left {threads} B");
        assert!(
            single as usize + 2 * BLOCK >= threads as usize,
            "single left {single} B unsent, threads {threads} B"
        );
    }
}
