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
const MAX_PENDING_HELLOS: usize = 64;

/// A data connection waiting for its stream hello.
struct Pending {
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
    let (n, echo) = (usize::from(params.streams), params.echo());
    let directions = params.direction().reversed();
    if let Arrivals::Listener(listener) = arrivals {
        listener
            .set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the data listener".into())?;
    }
    let all = n * directions.len();
    let expected = if echo { 2 * all } else { all };
    let mut g = Gathering {
        peer: ctl.peer,
        cookie,
        echo,
        quiet,
        n,
        directions,
        expected,
        // A long path makes each connection slower to arrive: the control connection's RTT.
        wait: timeouts::StreamsArrive::new(expected, net::rtt(&ctl.socket())),
        socks: (0..all).map(|_| (None, None)).collect(),
        pending: Vec::new(),
        silent: 0,
        arrived: 0,
    };
    while g.arrived < expected {
        let Some(fds) = g.poll(arrivals, ctl_fd)? else {
            continue;
        };
        if fds[1].revents != 0 {
            g.control(ctl)?;
        }
        g.hellos(&fds[2..])?;
        match arrivals {
            Arrivals::Listener(l) if fds[0].revents != 0 => g.accept(l)?,
            Arrivals::Listener(_) => {}
            Arrivals::ControlPort(rx) => {
                for arrival in rx.try_iter() {
                    let (sock, from) = arrival.map_err(accept_failed)?;
                    g.admit(sock, from);
                }
            }
        }
    }
    Ok(g.done())
}

/// A test's data and echo connections as they arrive.
struct Gathering<'a> {
    peer: SocketAddr,
    cookie: u64,
    echo: bool,
    quiet: bool,
    /// Streams per direction, and the directions (true where this end sends).
    n: usize,
    directions: &'a [bool],
    expected: usize,
    wait: timeouts::StreamsArrive,
    /// Each stream's data and echo connection, once its hello came.
    socks: Vec<(Option<TcpStream>, Option<TcpStream>)>,
    pending: Vec<Pending>,
    /// Connections closed without a complete hello (gone, evicted, or still silent at the end).
    silent: usize,
    arrived: usize,
}

impl Gathering<'_> {
    /// Waits for the next arrival, hello or word on the control connection until the
    /// deadline: the polled descriptors (the listener's, the control connection's, then
    /// each pending one's), or `None` when interrupted.
    fn poll(&self, arrivals: Arrivals, ctl_fd: RawFd) -> Result<Option<Vec<libc::pollfd>>> {
        let now = Instant::now();
        let deadline = self.wait.deadline();
        if now >= deadline {
            return Err(Error::Test(format!(
                "only {} of {} data and echo connections from {} arrived \
                 ({:.1} s after the last, or {:.1} s in all)",
                self.arrived,
                self.expected,
                self.peer,
                self.wait.step.as_secs_f64(),
                self.wait.allowed.as_secs_f64()
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
        let pending = self.pending.iter().map(|p| p.sock.as_raw_fd());
        fds.extend(pending.map(|fd| crate::os::sys::pollfd(fd, libc::POLLIN)));
        match crate::os::sys::poll(&mut fds, wait_ms) {
            Ok(_) => Ok(Some(fds)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(Error::io("poll the data connections", e)),
        }
    }

    /// The control connection spoke while the streams connect: the client gave up.
    fn control(&self, ctl: &Control) -> Result<()> {
        let gave_up = |e: Error| {
            Error::Test(format!(
                "the client gave up while connecting its streams ({} of {} connections \
                 arrived): {e}",
                self.arrived, self.expected
            ))
        };
        match ctl.poll(Duration::ZERO) {
            Ok(None) => Ok(()),
            Ok(Some(other)) => Err(gave_up(other.unexpected(self.peer, "nothing before start"))),
            Err(e) => Err(gave_up(e)),
        }
    }

    /// Reads the pending connections' hellos (`fds`, one each, say which can be read);
    /// a whole one takes its stream's place. Backwards: a removal (swap_remove) moves
    /// only an entry already seen.
    fn hellos(&mut self, fds: &[libc::pollfd]) -> Result<()> {
        for i in (0..self.pending.len()).rev() {
            if fds[i].revents == 0 {
                continue;
            }
            let p = &mut self.pending[i];
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
                    self.silent += 1;
                    self.pending.swap_remove(i);
                }
                Some(true) => {
                    let p = self.pending.swap_remove(i);
                    self.place(p)?;
                }
            }
        }
        Ok(())
    }

    /// A connection whose hello is whole: its stream's data or echo connection, or closed
    /// (a wrong cookie, stream id or kind, or a place already taken).
    fn place(&mut self, p: Pending) -> Result<()> {
        let Pending {
            sock, from, hello, ..
        } = p;
        let (n, echo, directions) = (self.n, self.echo, self.directions);
        // Where a hello's stream belongs: its direction's block of `n`, then its id.
        let place = |h: &DataHello| {
            let k = directions.iter().position(|&r| r == h.reverse)?;
            (usize::from(h.stream) < n).then(|| k * n + usize::from(h.stream))
        };
        let slot = DataHello::from_bytes(hello)
            .filter(|h| h.cookie == self.cookie && (echo || !h.echo))
            .and_then(|h| {
                let pair = self.socks.get_mut(place(&h)?)?;
                Some(if h.echo { &mut pair.1 } else { &mut pair.0 })
            });
        match slot {
            Some(slot @ None) => {
                sock.set_nonblocking(false)
                    .op(|| format!("clear O_NONBLOCK on the data connection from {from}"))?;
                *slot = Some(sock);
                self.arrived += 1;
                self.wait.arrived();
            }
            _ if !self.quiet => serverlog::refused(
                from,
                None,
                "cookie",
                "a data connection with a wrong test cookie or stream id",
            ),
            _ => {}
        }
        Ok(())
    }

    /// Accepts what the data listener has queued (a bounded batch) into `pending`, each socket
    /// non-blocking until its hello is read. Connections from elsewhere than the client are
    /// closed; beyond [`MAX_PENDING_HELLOS`] the oldest waiting one is.
    fn accept(&mut self, listener: &TcpListener) -> Result<()> {
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
            self.admit(sock, canonical(from));
        }
        Ok(())
    }

    /// Takes a data connection from `from` to wait for its hello (non-blocking until it is
    /// read), unless it comes from elsewhere than the test's client; beyond
    /// [`MAX_PENDING_HELLOS`] the oldest waiting one is closed.
    fn admit(&mut self, sock: TcpStream, from: SocketAddr) {
        let peer = self.peer;
        if from.ip() != peer.ip() {
            // A refusal like any other, so a log rule on "refused client" sees it.
            if !self.quiet {
                let reason = format!("a data connection, but the test belongs to {peer}");
                serverlog::refused(from, None, "stranger", &reason);
            }
            return;
        }
        if sock.set_nonblocking(true).is_err() {
            return;
        }
        if self.pending.len() >= MAX_PENDING_HELLOS {
            self.pending.remove(0);
            self.silent += 1;
        }
        self.pending.push(Pending {
            sock,
            from,
            hello: [0; DataHello::LEN],
            got: 0,
        });
    }

    /// Every connection arrived: the streams' sockets, the silent ones counted in the log.
    fn done(self) -> Vec<StreamSocks> {
        let silent = self.silent + self.pending.len();
        if silent > 0 {
            log!(
                self.quiet,
                "pinperf: test from {}: closed {silent} data connection(s) that sent no stream hello",
                self.peer
            );
        }
        self.socks
            .into_iter()
            .filter_map(|(data, echo)| data.map(|data| StreamSocks { data, echo }))
            .collect()
    }
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
fn accept_failed(e: std::io::Error) -> Error {
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
