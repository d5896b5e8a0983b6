//! How iperf3's UDP streams find each other (facts read from esnet/iperf's `iperf_udp.c`;
//! the code is ours). The server's UDP "listener" is a socket bound to the control port's
//! number. For each stream, in order, the client connects a socket to that port and sends
//! one 4-byte datagram, [`CONNECT_MSG`]; the server takes it on the listener, connects
//! the listener to where it came from (that socket is now the stream's), binds a fresh
//! listener on the same port, and answers [`CONNECT_REPLY`] from the stream's socket. The
//! client waits for the answer before its next stream: the next datagram must find the
//! fresh listener. iperf3 writes both numbers in its host's byte order; this end reads
//! either order and answers in the order it was asked.
//!
//! The sockets then carry iperf3's datagram header ([`crate::data::udp::wire::Format::Iperf3`])
//! on pinperf's pinned UDP stream threads. Runs on the test's `control` thread (server) or
//! the client's main thread; every wait is bounded by a deadline.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::os::netinfo::WindowGrant;
use crate::wire::params::TestParams;

/// The client's datagram: "6789" as a number in iperf3's `iperf.h`.
pub const CONNECT_MSG: u32 = 0x3637_3839;
/// The server's answer: "9876".
pub const CONNECT_REPLY: u32 = 0x3938_3736;
/// The answer of iperf3 servers before 3.x's numbers changed (clients still take it).
pub const LEGACY_REPLY: u32 = 987_654_321;

/// `bytes` as one of `wanted`, in either byte order: the order it came in (true: big-endian).
fn magic(bytes: &[u8], wanted: &[u32]) -> Option<bool> {
    let b: [u8; 4] = bytes.try_into().ok()?;
    if wanted.contains(&u32::from_be_bytes(b)) {
        return Some(true);
    }
    wanted.contains(&u32::from_le_bytes(b)).then_some(false)
}

/// The client's side: one socket per stream (directions in order), each bound on `bind`
/// (or the wildcard of the server's family), connected to the server's control port with
/// `-w` (or a receive buffer sized for the rate, as pinperf's own UDP streams), its
/// [`CONNECT_MSG`] answered before the next is sent. Returns the sockets and the first
/// one's window grant.
pub(crate) fn connect(
    server: SocketAddr,
    from: &crate::os::net::Source,
    test: &TestParams,
    allowed: Duration,
    server_spoke: &mut dyn FnMut() -> Result<()>,
) -> Result<(Vec<UdpSocket>, WindowGrant)> {
    let deadline = Instant::now() + allowed;
    let n = usize::from(test.streams.max(1));
    let mut socks = Vec::with_capacity(test.threads());
    let mut grant = None;
    for k in 0..test.threads() {
        let name = format!("stream-{}", k % n);
        let sock = from
            .stream(k)
            .udp_socket(server)
            .map_err(|e| Error::Test(format!("{name}: {e}")))?;
        grant.get_or_insert(crate::wire::udp_rendezvous::configure(
            &sock,
            test,
            crate::wire::params::MAX_WINDOW,
        )?);
        sock.send(&CONNECT_MSG.to_ne_bytes())
            .op(|| format!("{name}: send iperf3's UDP connect datagram to {server}"))?;
        await_reply(&sock, server, &name, deadline, server_spoke)?;
        socks.push(sock);
    }
    Ok((socks, grant.unwrap_or_default()))
}

/// Reads until the server's answer (other datagrams, such as a reversed test's first data,
/// are passed over), a refusal, or the deadline. Between polls, `server_spoke` fails with
/// what the server said on the control connection instead (an iperf3 server that cannot
/// set the buffer `-w` asks for answers there, not on UDP).
fn await_reply(
    sock: &UdpSocket,
    server: SocketAddr,
    name: &str,
    deadline: Instant,
    server_spoke: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let mut buf = [0u8; 64];
    loop {
        if let Some(sig) = crate::signals::received() {
            return Err(crate::signals::interrupted(
                sig,
                "while connecting the streams",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Test(format!(
                "{name}: the iperf3 server {server} did not answer its UDP connect datagram \
                 (UDP to port {} blocked or dropped on the way?)",
                server.port()
            )));
        }
        sock.set_read_timeout(Some(left.min(crate::timeouts::POLL)))
            .op(|| format!("{name}: set SO_RCVTIMEO"))?;
        match sock.recv(&mut buf) {
            Ok(4) if magic(&buf[..4], &[CONNECT_REPLY, LEGACY_REPLY]).is_some() => return Ok(()),
            Ok(_) => {}
            Err(e) if crate::data::stream::is_timeout(&e) || e.kind() == ErrorKind::Interrupted => {
                server_spoke()?
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                return Err(Error::Test(format!(
                    "{name}: nothing listens for UDP at {server} (the iperf3 server's \
                     kernel refused the connect datagram)"
                )));
            }
            Err(e) => return Err(Error::io(format!("{name}: receive from {server}"), e)),
        }
    }
}

/// The server's listener for a test's UDP streams, bound before the client is told to
/// create them (`local`: the address the client's control connection reached).
pub(crate) struct Listener {
    sock: UdpSocket,
    local: SocketAddr,
}

impl Listener {
    pub(crate) fn bind(local: SocketAddr) -> std::io::Result<Listener> {
        Ok(Listener {
            sock: crate::wire::udp_rendezvous::reusable(local)?,
            local,
        })
    }

    /// Takes `count` streams from `peer` (datagrams from elsewhere are passed over), each
    /// answered as iperf3 answers (its buffer at most `cap` without `-w`), until `deadline`;
    /// `ctl` is watched meanwhile, so a
    /// client that gives up ends the wait at once.
    pub(crate) fn accept(
        mut self,
        count: usize,
        peer: IpAddr,
        test: &TestParams,
        cap: u64,
        ctl: RawFd,
        deadline: Instant,
    ) -> Result<Vec<UdpSocket>> {
        let mut socks = Vec::with_capacity(count);
        let mut buf = [0u8; 64];
        while socks.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Test(format!(
                    "{} of {count} iperf3 UDP streams connected in time",
                    socks.len()
                )));
            }
            let watch = |fd: RawFd| crate::os::sys::pollfd(fd, libc::POLLIN);
            let mut fds = [watch(ctl), watch(self.sock.as_raw_fd())];
            let wait = left.min(crate::timeouts::POLL).as_millis().max(1) as i32;
            match crate::os::sys::poll(&mut fds, wait) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("poll the iperf3 UDP listener", e)),
            }
            if fds[0].revents != 0 {
                // The client sends nothing on the control connection while its streams
                // connect: a byte or its close ends the wait.
                return Err(Error::Test(format!(
                    "the iperf3 client {peer} spoke or closed the control connection while \
                     {} of {count} UDP streams had connected",
                    socks.len()
                )));
            }
            if fds[1].revents == 0 {
                continue;
            }
            self.sock
                .set_nonblocking(true)
                .op(|| "set O_NONBLOCK on the iperf3 UDP listener".into())?;
            let (len, from) = match self.sock.recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if crate::data::stream::is_timeout(&e) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("receive on the iperf3 UDP listener", e)),
            };
            if from.ip().to_canonical() != peer.to_canonical() {
                continue;
            }
            // iperf3 servers take any first datagram as the stream's; the answer goes in
            // the byte order the client used (its host's), native when it is not the magic.
            let big_endian = magic(&buf[..len], &[CONNECT_MSG, 123_456_789])
                .unwrap_or(cfg!(target_endian = "big"));
            let sock = self.sock;
            sock.set_nonblocking(false)
                .op(|| "clear O_NONBLOCK on a UDP socket".into())?;
            sock.connect(from)
                .op(|| format!("connect a UDP socket to {from}"))?;
            crate::wire::udp_rendezvous::configure(&sock, test, cap)?;
            // The fresh listener first: the client's next stream may follow the answer at once.
            self.sock = crate::wire::udp_rendezvous::reusable(self.local)
                .op(|| format!("bind a UDP listener on {} again", self.local))?;
            let reply = match big_endian {
                true => CONNECT_REPLY.to_be_bytes(),
                false => CONNECT_REPLY.to_le_bytes(),
            };
            sock.send(&reply)
                .op(|| format!("answer the UDP stream from {from}"))?;
            socks.push(sock);
        }
        Ok(socks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_magic_numbers_are_read_in_either_byte_order() {
        assert_eq!(
            magic(&CONNECT_MSG.to_be_bytes(), &[CONNECT_MSG]),
            Some(true)
        );
        assert_eq!(
            magic(&CONNECT_MSG.to_le_bytes(), &[CONNECT_MSG]),
            Some(false)
        );
        // "9876" on a little-endian host, as iperf3 3.x writes it there.
        assert_eq!(magic(b"6789", &[CONNECT_REPLY]), Some(false));
        assert_eq!(magic(&LEGACY_REPLY.to_be_bytes(), &[CONNECT_REPLY]), None);
        assert_eq!(magic(b"678", &[CONNECT_REPLY]), None);
    }

    #[test]
    fn streams_connect_one_after_another_through_fresh_listeners() {
        let mut test = TestParams::defaults();
        test.udp = true;
        test.streams = 3;
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = probe.local_addr().unwrap();
        drop(probe);
        let l = Listener::bind(local).unwrap();
        let (_ctl_a, ctl_b) = std::os::unix::net::UnixStream::pair().unwrap();
        let t = test.clone();
        let server = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            l.accept(
                3,
                local.ip(),
                &t,
                crate::wire::params::MAX_WINDOW,
                ctl_b.as_raw_fd(),
                deadline,
            )
            .map(|s| (s, ctl_b))
        });
        let (client, _) = connect(
            local,
            &crate::os::net::Source::default(),
            &test,
            Duration::from_secs(5),
            &mut || Ok(()),
        )
        .unwrap();
        let (server, _ctl) = server.join().unwrap().unwrap();
        assert_eq!((client.len(), server.len()), (3, 3));
        for (c, s) in client.iter().zip(&server) {
            assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
            c.send(b"data").unwrap();
            let mut buf = [0u8; 8];
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            assert_eq!(
                s.recv(&mut buf).unwrap(),
                4,
                "each stream on its own socket"
            );
        }
    }
}
