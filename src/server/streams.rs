//! Gathering a test's data and echo connections: each opens with the test's cookie, a
//! stream id and its kind; hellos are read from all at once, under a deadline.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::acceptor::{fd_limit, out_of_fds};
use super::canonical;
use super::serverlog;
use crate::data::stream::StreamSocks;
use crate::error::{Error, IoContext, Result};
use crate::os::net;
use crate::timeouts;
use crate::wire::{Control, DataHello, TestParams};

/// Most connections to a test's data port waiting at once for their stream hello: beyond
/// it the oldest is closed, so a flood of idle connections cannot exhaust descriptors.
pub(super) const MAX_PENDING_HELLOS: usize = 64;

/// A data connection waiting for its stream hello.
pub(super) struct Pending {
    sock: TcpStream,
    from: SocketAddr,
    hello: [u8; DataHello::LEN],
    got: usize,
}

/// Accepts the test's `n` data connections (and `n` echo connections with `echo`), each
/// opening with the test's cookie, a stream id and its kind; anything else is closed.
/// Hellos are read as they arrive, from all connections at once, so idle or slow ones
/// cannot hold up the real ones; all must arrive within [`timeouts::streams_arrive`]. The
/// control connection (`ctl_fd`, owned by `ctl`) is watched meanwhile: a client that
/// closes it or reports an error ends the test at once.
pub(super) fn accept_streams(
    arrivals: Arrivals,
    ctl: &Control,
    ctl_fd: RawFd,
    cookie: u64,
    params: &TestParams,
    quiet: bool,
) -> Result<Vec<StreamSocks>> {
    let peer = ctl.peer;
    let (n, echo) = (usize::from(params.streams), params.echo());
    let directions = params.direction().reversed();
    // Where a hello's stream belongs: its direction's block of `n`, then its id.
    let place = |h: &DataHello| {
        let k = directions.iter().position(|&r| r == h.reverse)?;
        (usize::from(h.stream) < n).then(|| k * n + usize::from(h.stream))
    };
    let n = n * directions.len();
    if let Arrivals::Listener(listener) = arrivals {
        listener
            .set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the data listener".into())?;
    }
    let expected = if echo { 2 * n } else { n };
    // A long path makes each connection slower to arrive: the control connection's RTT.
    let rtt = net::rtt(&ctl.socket());
    let mut wait = timeouts::StreamsArrive::new(expected, rtt);
    let mut socks: Vec<(Option<TcpStream>, Option<TcpStream>)> =
        (0..n).map(|_| (None, None)).collect();
    let mut pending: Vec<Pending> = Vec::new();
    // Connections closed without a complete hello (gone, evicted, or still silent at the end).
    let mut silent = 0usize;
    let mut arrived = 0;
    while arrived < expected {
        let now = Instant::now();
        let deadline = wait.deadline();
        if now >= deadline {
            return Err(Error::Test(format!(
                "only {arrived} of {expected} data and echo connections from {peer} arrived \
                 ({:.1} s after the last, or {:.1} s in all)",
                wait.step.as_secs_f64(),
                wait.allowed.as_secs_f64()
            )));
        }
        let (listen_fd, most) = match arrivals {
            Arrivals::Listener(l) => (l.as_raw_fd(), i32::MAX as u128),
            // Looked at every 2 ms: the acceptor's hand-over is no descriptor to poll.
            Arrivals::ControlPort(_) => (-1, 2),
        };
        let wait_ms = deadline
            .saturating_duration_since(now)
            .as_millis()
            .clamp(1, most) as i32;
        let mut fds = vec![
            crate::os::sys::pollfd(listen_fd, libc::POLLIN),
            crate::os::sys::pollfd(ctl_fd, libc::POLLIN),
        ];
        fds.extend(
            pending
                .iter()
                .map(|p| crate::os::sys::pollfd(p.sock.as_raw_fd(), libc::POLLIN)),
        );
        match crate::os::sys::poll(&mut fds, wait_ms) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("poll the data connections", e)),
        }
        if fds[1].revents != 0 {
            let gave_up = |e: Error| {
                Error::Test(format!(
                    "the client gave up while connecting its streams ({arrived} of {expected} \
                     connections arrived): {e}"
                ))
            };
            match ctl.poll(Duration::ZERO) {
                Ok(None) => {}
                Ok(Some(other)) => {
                    return Err(gave_up(other.unexpected(peer, "nothing before start")));
                }
                Err(e) => return Err(gave_up(e)),
            }
        }
        // Hellos. Backwards: a removal (swap_remove) moves only an entry already seen.
        for i in (0..pending.len()).rev() {
            if fds[2 + i].revents == 0 {
                continue;
            }
            let p = &mut pending[i];
            let complete = match p.sock.read(&mut p.hello[p.got..]) {
                Ok(0) => None,
                Ok(k) => {
                    p.got += k;
                    Some(p.got == DataHello::LEN)
                }
                Err(e) if crate::data::stream::is_timeout(&e) => Some(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Some(false),
                Err(_) => None,
            };
            match complete {
                Some(false) => {}
                // Closed or failed before its hello was whole.
                None => {
                    silent += 1;
                    pending.swap_remove(i);
                }
                Some(true) => {
                    let Pending {
                        sock, from, hello, ..
                    } = pending.swap_remove(i);
                    let slot = DataHello::from_bytes(hello)
                        .filter(|h| h.cookie == cookie && (echo || !h.echo))
                        .and_then(|h| {
                            let pair = socks.get_mut(place(&h)?)?;
                            Some(if h.echo { &mut pair.1 } else { &mut pair.0 })
                        });
                    match slot {
                        Some(slot @ None) => {
                            sock.set_nonblocking(false).op(|| {
                                format!("clear O_NONBLOCK on the data connection from {from}")
                            })?;
                            *slot = Some(sock);
                            arrived += 1;
                            wait.arrived();
                        }
                        _ if !quiet => serverlog::refused(
                            from,
                            None,
                            "cookie",
                            "a data connection with a wrong test cookie or stream id",
                        ),
                        _ => {}
                    }
                }
            }
        }
        match arrivals {
            Arrivals::Listener(l) if fds[0].revents != 0 => {
                accept_pending(l, peer, &mut pending, &mut silent, quiet)?;
            }
            Arrivals::Listener(_) => {}
            Arrivals::ControlPort(rx) => {
                for arrival in rx.try_iter() {
                    let (sock, from) = arrival.map_err(accept_failed)?;
                    admit_pending(sock, from, peer, &mut pending, &mut silent, quiet);
                }
            }
        }
    }
    silent += pending.len();
    if silent > 0 {
        log!(
            quiet,
            "pinperf: test from {peer}: closed {silent} data connection(s) that sent no stream hello"
        );
    }
    Ok(socks
        .into_iter()
        .filter_map(|(data, echo)| data.map(|data| StreamSocks { data, echo }))
        .collect())
}

/// Accepts what the data listener has queued (a bounded batch) into `pending`, each socket
/// non-blocking until its hello is read. Connections from elsewhere than the client are
/// closed; beyond [`MAX_PENDING_HELLOS`] the oldest waiting one is.
pub(super) fn accept_pending(
    listener: &TcpListener,
    peer: SocketAddr,
    pending: &mut Vec<Pending>,
    silent: &mut usize,
    quiet: bool,
) -> Result<()> {
    for _ in 0..MAX_PENDING_HELLOS {
        let (sock, from) = match listener.accept() {
            Ok(pair) => pair,
            Err(e) if crate::data::stream::is_timeout(&e) => return Ok(()),
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::ConnectionAborted =>
            {
                continue;
            }
            Err(e) => return Err(accept_failed(e)),
        };
        admit_pending(sock, canonical(from), peer, pending, silent, quiet);
    }
    Ok(())
}

/// Takes a data connection from `from` to wait for its hello (non-blocking until it is
/// read), unless it comes from elsewhere than the test's client `peer`; beyond
/// [`MAX_PENDING_HELLOS`] the oldest waiting one is closed.
pub(super) fn admit_pending(
    sock: TcpStream,
    from: SocketAddr,
    peer: SocketAddr,
    pending: &mut Vec<Pending>,
    silent: &mut usize,
    quiet: bool,
) {
    if from.ip() != peer.ip() {
        // A refusal like any other, so a log rule on "refused client" sees it.
        if !quiet {
            let reason = format!("a data connection, but the test belongs to {peer}");
            serverlog::refused(from, None, "stranger", &reason);
        }
        return;
    }
    if sock.set_nonblocking(true).is_err() {
        return;
    }
    if pending.len() >= MAX_PENDING_HELLOS {
        pending.remove(0);
        *silent += 1;
    }
    pending.push(Pending {
        sock,
        from,
        hello: [0; DataHello::LEN],
        got: 0,
    });
}

/// A data connection the acceptor passes on (or its failure to accept one).
pub(super) type Arrival = std::io::Result<(TcpStream, SocketAddr)>;

/// Where a test's data connections come from.
#[derive(Clone, Copy)]
pub(super) enum Arrivals<'a> {
    /// Its own data listener.
    Listener(&'a TcpListener),
    /// The control port's acceptor, which hands them over.
    ControlPort(&'a Receiver<Arrival>),
}

/// The error of a test whose data connection could not be accepted.
pub(super) fn accept_failed(e: std::io::Error) -> Error {
    match out_of_fds(&e) {
        true => Error::io(
            format!(
                "accept data connection: the server is out of file descriptors (raise \
                 `ulimit -n`, now {})",
                fd_limit()
            ),
            e,
        ),
        false => Error::io("accept data connection", e),
    }
}
