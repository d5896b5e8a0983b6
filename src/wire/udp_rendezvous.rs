//! How a UDP test's sockets find each other. The server binds one UDP socket per stream
//! and direction and names their ports in its `Accept`; the client connects one socket to
//! each and sends the stream's [`DataHello`] on it (the test's cookie, the stream, its
//! direction) until the server echoes it back; the server connects its socket to where the
//! hello came from. Hellos and their echoes may be lost (a lossy path): the client resends
//! the unanswered ones, the server answers every copy, and says it has them all only
//! when the client, holding every echo, sends `UdpReady` on the control connection. Then
//! each pair of sockets is connected and the stream threads take them.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::os::netinfo::WindowGrant;
use crate::timeouts;
use crate::wire::params::TestParams;
use crate::wire::{Control, ControlMsg, DataHello};

/// How often the client resends a hello that has no answer yet.
const RESEND: Duration = Duration::from_millis(100);

/// Without `-w`, a UDP receive buffer holds this long at the stream's rate (as fast as
/// possible: as much as the host allows), so a receiving thread that the scheduler holds
/// off for a few milliseconds loses nothing in its own socket; the kernel caps it at
/// `net.core.rmem_max`, and the header reports what it granted.
const UDP_RECEIVE_HOLDS: Duration = Duration::from_millis(50);

/// `-w`, or the receive buffer [`UDP_RECEIVE_HOLDS`] asks for, at most `cap` (a server's
/// `--max-window`, which binds the buffer it picks as it binds a client's `-w`).
pub(crate) fn configure(sock: &UdpSocket, test: &TestParams, cap: u64) -> Result<WindowGrant> {
    let gro = !test.no_gsro;
    let mut grant =
        crate::data::udp::configure_with(sock, test.window_bytes, test.force_window, gro)?.window;
    crate::os::net::SocketOpts::of(test).apply(&socket2::SockRef::from(sock))?;
    if test.window_bytes.is_none() {
        let want = match test.rate() {
            Some(bps) => (bps as f64 / 8.0 * UDP_RECEIVE_HOLDS.as_secs_f64()) as u64,
            None => u64::MAX,
        }
        .clamp(256 << 10, 256 << 20)
        .min(cap);
        let sock = socket2::SockRef::from(sock);
        // Best effort: a host whose rmem_max is lower grants that.
        let _ = sock.set_recv_buffer_size(usize::try_from(want).unwrap_or(usize::MAX));
        grant.rcvbuf = sock.recv_buffer_size().map_or(grant.rcvbuf, |b| b as u64);
    }
    Ok(grant)
}

/// The hello that belongs to socket `i` of a test: direction `i / n`, stream `i % n`.
fn hello_of(test: &TestParams, cookie: u64, i: usize) -> DataHello {
    let n = usize::from(test.streams);
    DataHello {
        cookie,
        stream: (i % n) as u16,
        echo: false,
        reverse: test.direction().reversed()[i / n],
    }
}

/// A UDP test's server sockets, one per stream and direction, in order.
pub(crate) struct Bound {
    /// Each stream's socket: bound on a port of its own from the start, or (on the control
    /// port's number) made when its hello reaches `listener`.
    socks: Vec<Option<UdpSocket>>,
    /// The control port's number, where every stream's hello arrives (none: ports of
    /// their own).
    listener: Option<(UdpSocket, SocketAddr)>,
    /// What the `Accept` names: each stream's server port.
    pub ports: Vec<u16>,
    /// The first socket's window grant.
    pub window: WindowGrant,
}

/// A UDP socket on `addr` that later ones may bind too: a connected one takes its peer's
/// datagrams from the unconnected one on the same port (the kernel prefers the socket
/// that matches more of the datagram's addresses), which is how one port serves every
/// stream (iperf3's listener trick).
pub(crate) fn reusable(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// The server's sockets of a test on `ip`, each with `-w` or a buffer of at most `cap`:
/// all on `one_port` (the control port's number), or one on an ephemeral port per stream
/// and direction.
pub(crate) fn bind(
    ip: IpAddr,
    one_port: Option<u16>,
    test: &TestParams,
    cap: u64,
) -> Result<Bound> {
    if let Some(port) = one_port {
        let at = SocketAddr::new(ip, port);
        let sock = reusable(at).op(|| format!("bind a UDP socket on {at}"))?;
        // The grant, and -S/-w tried: refused now, not on a stream.
        let window = configure(&sock, test, cap)?;
        return Ok(Bound {
            socks: (0..test.threads()).map(|_| None).collect(),
            listener: Some((sock, at)),
            ports: vec![port; test.threads()],
            window,
        });
    }
    let mut socks = Vec::new();
    let mut ports = Vec::new();
    let mut grant = None;
    for _ in 0..test.threads() {
        let sock =
            UdpSocket::bind(SocketAddr::new(ip, 0)).op(|| format!("bind a UDP socket on {ip}"))?;
        grant.get_or_insert(configure(&sock, test, cap)?);
        ports.push(sock.local_addr().op(|| "read UDP port".into())?.port());
        socks.push(Some(sock));
    }
    Ok(Bound {
        socks,
        listener: None,
        ports,
        window: grant.unwrap_or_default(),
    })
}

/// The next datagram queued on `sock` (non-blocking): none when nothing is, or on an ICMP
/// error from an earlier answer (the client's socket gone; its hellos, if it comes back,
/// are answered again).
fn receive(sock: &UdpSocket, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    loop {
        match sock.recv_from(buf) {
            Ok(got) => return Some(got),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
}

/// The server's side: waits until every stream has a socket connected to where its hello
/// came from (the client's address; each copy answered) and the client has said
/// `UdpReady`, within [`timeouts::streams_arrive`] of the control connection's `rtt`. The
/// control connection (`ctl_fd`) is watched meanwhile: a client that gives up ends the
/// wait at once. Sockets made for hellos on the listener get a buffer of at most `cap`.
pub(crate) fn await_hellos(
    bound: Bound,
    ctl: &Control,
    ctl_fd: RawFd,
    (cookie, test): (u64, &TestParams),
    (rtt, cap): (Duration, u64),
) -> Result<Vec<UdpSocket>> {
    let Bound {
        socks, listener, ..
    } = bound;
    for s in socks
        .iter()
        .flatten()
        .chain(listener.iter().map(|(l, _)| l))
    {
        s.set_nonblocking(true)
            .op(|| "set O_NONBLOCK on a UDP socket".into())?;
    }
    let mut meeting = Meeting {
        hellos: (0..socks.len())
            .map(|i| hello_of(test, cookie, i).to_bytes())
            .collect(),
        arrived: vec![false; socks.len()],
        socks,
        listener,
        peer: ctl.peer,
        test,
        cap,
        buf: [0u8; 64],
    };
    let allowed = timeouts::streams_arrive(meeting.socks.len(), rtt);
    let deadline = Instant::now() + allowed;
    let mut ready = false;
    while !(ready && meeting.arrived.iter().all(|a| *a)) {
        let now = Instant::now();
        if now >= deadline {
            return Err(meeting.missing(allowed));
        }
        let wait_ms = deadline
            .saturating_duration_since(now)
            .min(timeouts::POLL)
            .as_millis()
            .max(1) as i32;
        let mut fds = meeting.pollfds(ctl_fd);
        match crate::os::sys::poll(&mut fds, wait_ms) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("poll the UDP sockets", e)),
        }
        if fds[0].revents != 0 {
            match ctl.poll(Duration::ZERO)? {
                None => {}
                Some(ControlMsg::UdpReady) => ready = true,
                Some(other) => return Err(other.unexpected(ctl.peer, "udp_ready")),
            }
        }
        if fds[1].revents != 0 {
            meeting.answer_listener()?;
        }
        meeting.answer_streams(&fds[2..])?;
    }
    let socks: Vec<UdpSocket> = meeting.socks.into_iter().flatten().collect();
    for s in &socks {
        s.set_nonblocking(false)
            .op(|| "clear O_NONBLOCK on a UDP socket".into())?;
    }
    Ok(socks)
}

/// The server's sockets while the client's hellos arrive.
struct Meeting<'a> {
    /// Each stream's socket (none: its hello has not reached the listener yet).
    socks: Vec<Option<UdpSocket>>,
    listener: Option<(UdpSocket, SocketAddr)>,
    /// Each stream's hello, as it must arrive.
    hellos: Vec<[u8; DataHello::LEN]>,
    arrived: Vec<bool>,
    /// The client's address: hellos from elsewhere are ignored.
    peer: SocketAddr,
    test: &'a TestParams,
    /// The most buffer a socket made for a hello gets.
    cap: u64,
    buf: [u8; 64],
}

impl Meeting<'_> {
    /// The control connection, the listener and each stream's socket (-1: none yet).
    fn pollfds(&self, ctl_fd: RawFd) -> Vec<libc::pollfd> {
        let listen_fd = self.listener.as_ref().map_or(-1, |(l, _)| l.as_raw_fd());
        [ctl_fd, listen_fd]
            .into_iter()
            .chain(
                self.socks
                    .iter()
                    .map(|s| s.as_ref().map_or(-1, |s| s.as_raw_fd())),
            )
            .map(|fd| crate::os::sys::pollfd(fd, libc::POLLIN))
            .collect()
    }

    /// Hellos on the control port's number: a stream's first makes its socket, connected
    /// to where it came from; every copy is answered.
    fn answer_listener(&mut self) -> Result<()> {
        let Some((l, at)) = &self.listener else {
            return Ok(());
        };
        while let Some((len, from)) = receive(l, &mut self.buf) {
            let Some(i) = self.hellos.iter().position(|h| h[..] == self.buf[..len]) else {
                continue;
            };
            if from.ip() != self.peer.ip() {
                continue;
            }
            if self.socks[i].is_none() {
                let sock = reusable(*at).op(|| format!("bind a UDP socket on {at}"))?;
                sock.connect(from)
                    .op(|| format!("connect a UDP socket to {from}"))?;
                configure(&sock, self.test, self.cap)?;
                sock.set_nonblocking(true)
                    .op(|| "set O_NONBLOCK on a UDP socket".into())?;
                self.socks[i] = Some(sock);
                self.arrived[i] = true;
            }
            if let Some(s) = &self.socks[i] {
                let _ = s.send(&self.hellos[i]);
            }
        }
        Ok(())
    }

    /// Hellos on the streams' own sockets (`fds`, in stream order): the first connects
    /// the socket to where it came from; every copy is answered.
    fn answer_streams(&mut self, fds: &[libc::pollfd]) -> Result<()> {
        for (i, sock) in self.socks.iter().enumerate() {
            let Some(sock) = sock.as_ref().filter(|_| fds[i].revents != 0) else {
                continue;
            };
            while let Some((len, from)) = receive(sock, &mut self.buf) {
                if self.buf[..len] != self.hellos[i] || from.ip() != self.peer.ip() {
                    continue;
                }
                if !self.arrived[i] {
                    sock.connect(from)
                        .op(|| format!("connect a UDP socket to {from}"))?;
                    self.arrived[i] = true;
                }
                let _ = sock.send(&self.hellos[i]);
            }
        }
        Ok(())
    }

    /// The error when not every hello arrived within `allowed`.
    fn missing(&self, allowed: Duration) -> Error {
        let got = self.arrived.iter().filter(|a| **a).count();
        Error::Test(format!(
            "only {got} of {} UDP streams' hellos from {} arrived within {:.1} s (a path \
             that drops everything from the start?)",
            self.socks.len(),
            self.peer,
            allowed.as_secs_f64()
        ))
    }
}

/// The client's side: one socket per port, connected to the server's, with `-w`; each
/// stream's hello resent until the server answers it, then `UdpReady`. Returns the
/// sockets in order and the first one's window grant.
pub(crate) fn connect(
    ctl: &Control,
    from: &crate::os::net::Source,
    ports: &[u16],
    cookie: u64,
    test: &TestParams,
) -> Result<(Vec<UdpSocket>, WindowGrant)> {
    let peer = ctl.peer;
    if ports.len() != test.threads() {
        return Err(Error::Protocol {
            peer,
            what: format!(
                "the server named {} UDP ports for {} streams",
                ports.len(),
                test.threads()
            ),
        });
    }
    let mut socks = Vec::new();
    let mut grant = None;
    for (k, &port) in ports.iter().enumerate() {
        let sock = from
            .stream(k)
            .udp_socket(SocketAddr::new(peer.ip(), port))?;
        grant.get_or_insert(configure(&sock, test, crate::wire::params::MAX_WINDOW)?);
        sock.set_nonblocking(true)
            .op(|| "set O_NONBLOCK on a UDP socket".into())?;
        socks.push(sock);
    }
    let rtt = crate::os::net::rtt(&ctl.socket());
    let allowed = timeouts::streams_arrive(socks.len(), rtt);
    let deadline = Instant::now() + allowed;
    let mut answered = vec![false; socks.len()];
    while !answered.iter().all(|a| *a) {
        if let Some(sig) = crate::signals::received() {
            return Err(crate::signals::interrupted(
                sig,
                "while connecting the streams",
            ));
        }
        if Instant::now() >= deadline {
            let got = answered.iter().filter(|a| **a).count();
            return Err(Error::Test(format!(
                "the server answered only {got} of {} UDP streams' hellos within {:.1} s \
                 (UDP blocked or dropped on the way?)",
                socks.len(),
                allowed.as_secs_f64()
            )));
        }
        for (i, sock) in socks.iter().enumerate() {
            if !answered[i] {
                // Refused (nothing at that port yet, an ICMP error): resent next round.
                let _ = sock.send(&hello_of(test, cookie, i).to_bytes());
            }
        }
        let round = Instant::now() + RESEND.max(rtt.min(Duration::from_secs(1)));
        while Instant::now() < round && !answered.iter().all(|a| *a) {
            for (i, sock) in socks.iter().enumerate() {
                let mut buf = [0u8; 64];
                while let Ok(len) = sock.recv(&mut buf) {
                    answered[i] |= buf[..len] == hello_of(test, cookie, i).to_bytes();
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    ctl.send(&ControlMsg::UdpReady)?;
    for s in &socks {
        s.set_nonblocking(false)
            .op(|| "clear O_NONBLOCK on a UDP socket".into())?;
    }
    Ok((socks, grant.unwrap_or_default()))
}
