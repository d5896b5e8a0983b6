//! Socket setup: resolving, connecting and listening with the window set **before**
//! `connect()`/`listen()` (the window scale is fixed at the SYN), reading back what the
//! kernel granted, and the path facts (MTU, MSS, `TCP_INFO`). Raw FFI lives in `sys`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::error::{Error, IoContext, Result};
use crate::os::netinfo::{PathInfo, WindowGrant};
use crate::timeouts;
use crate::wire::params::TestParams;

pub use crate::os::sys::TcpInfo;

/// Which address family to use (`-4`, `-6`, or whatever the name resolves to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Any,
    V4,
    V6,
}

/// What a test sets on its data sockets: built from its parameters by [`SocketOpts::of`]
/// alone, for both ends and either peer protocol, so a new socket option is a field here
/// and a line in [`SocketOpts::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOpts {
    /// `-w`: both buffers.
    pub window: Option<u64>,
    /// `--force-window`.
    pub force_window: bool,
    /// `-C`: congestion control algorithm (TCP only).
    pub congestion: Option<String>,
    /// `-S`: the IP TOS byte (IPv6: the traffic class).
    pub tos: Option<u8>,
    /// `-M`: `TCP_MAXSEG` (TCP only).
    pub mss: Option<u32>,
    /// `-N`: `TCP_NODELAY` (TCP only).
    pub no_delay: bool,
    /// `--snd-timeout`: `TCP_USER_TIMEOUT`, this end's own choice ([`HostSockets`]).
    pub user_timeout: Option<Duration>,
    /// `--dont-fragment`: DF on IPv4 UDP datagrams.
    pub dont_fragment: bool,
}

impl SocketOpts {
    /// The data sockets' options of `test`.
    pub fn of(test: &TestParams) -> SocketOpts {
        SocketOpts {
            window: test.window_bytes,
            force_window: test.force_window,
            congestion: test.transport.congestion.clone().filter(|_| !test.udp),
            tos: test.tos,
            mss: test.mss(),
            no_delay: test.no_delay(),
            user_timeout: None,
            dont_fragment: test.dont_fragment && test.udp,
        }
    }

    /// What an echo connection carries of them: the TOS, so the echoes cross the path in
    /// the data's class (a window or a congestion control would change nothing there).
    pub fn echo(&self) -> SocketOpts {
        SocketOpts {
            tos: self.tos,
            user_timeout: self.user_timeout,
            ..SocketOpts::default()
        }
    }

    /// Sets everything but the window (which [`apply_window`] sets before the handshake):
    /// on a socket before `connect()`, on a listener (accepted sockets inherit it) or on
    /// an accepted socket. The error opens with the flag (`-C bbr: …`, `-S 0x10: …`).
    pub fn apply(&self, sock: &Socket) -> Result<()> {
        if let Some(name) = &self.congestion {
            set_congestion(socket2::SockRef::from(sock), name)?;
        }
        if let Some(tos) = self.tos {
            set_tos(sock, tos)?;
        }
        if self.mss.is_some() {
            set_mss(sock, self.mss)?;
        }
        if self.no_delay {
            sock.set_tcp_nodelay(true)
                .map_err(|e| Error::Usage(format!("-N: set TCP_NODELAY: {e}")))?;
        }
        if self.user_timeout.is_some() {
            set_user_timeout(sock, self.user_timeout)?;
        }
        // IPv4 only, as iperf3's: an IPv6 datagram is never fragmented on the way.
        if self.dont_fragment && sock.domain().is_ok_and(|d| d == Domain::IPV4) {
            crate::os::sys::set_dont_fragment(sock.as_fd())
                .map_err(|e| Error::Usage(format!("--dont-fragment: set IP_MTU_DISCOVER: {e}")))?;
        }
        Ok(())
    }
}

/// What this end sets on its own TCP connections whatever the test, as iperf3's
/// `--snd-timeout` and `--cntl-ka` do: each end chooses its own, nothing goes to the peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostSockets {
    /// `--snd-timeout`: `TCP_USER_TIMEOUT` on control and data connections (how long
    /// sent data may stay unacknowledged before the connection fails).
    pub user_timeout: Option<Duration>,
    /// `--cntl-ka`: TCP keepalive on control connections.
    pub keepalive: Option<Keepalive>,
}

pub use crate::choices::Keepalive;

impl HostSockets {
    /// On a control connection (or a listener whose connections inherit it): both.
    pub fn apply_control(&self, sock: socket2::SockRef<'_>) -> Result<()> {
        if self.user_timeout.is_some() {
            set_user_timeout(&sock, self.user_timeout)?;
        }
        if let Some(k) = self.keepalive {
            let mut params = socket2::TcpKeepalive::new();
            if let Some(idle) = k.idle {
                params = params.with_time(idle);
            }
            if let Some(interval) = k.interval {
                params = params.with_interval(interval);
            }
            if let Some(count) = k.count {
                params = params.with_retries(count);
            }
            sock.set_tcp_keepalive(&params)
                .map_err(|e| Error::Usage(format!("--cntl-ka: set TCP keepalive: {e}")))?;
        }
        Ok(())
    }
}

/// `TCP_USER_TIMEOUT` (`--snd-timeout`).
fn set_user_timeout(sock: &Socket, timeout: Option<Duration>) -> Result<()> {
    sock.set_tcp_user_timeout(timeout)
        .map_err(|e| Error::Usage(format!("--snd-timeout: set TCP_USER_TIMEOUT: {e}")))
}

/// Where a client's connections come from and what they are: `-B`'s address and
/// `--bind-dev`'s interface for every one; `--cport`'s port, MPTCP (`--mptcp`) and the IPv6
/// flow label (`--flowlabel`) for data connections only ([`Source::stream`]), as iperf3's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Source {
    pub ip: Option<IpAddr>,
    /// `--bind-dev`: `SO_BINDTODEVICE`.
    pub device: Option<String>,
    /// `--cport`: data connection `k` comes from this port + `k`.
    pub port: Option<u16>,
    /// `--mptcp`: data connections are MPTCP (`IPPROTO_MPTCP`).
    pub mptcp: bool,
    /// `--flowlabel`: data connections carry this IPv6 flow label.
    pub flowlabel: Option<u32>,
}

impl Source {
    /// The control connection's (and echo connections'): the address and interface alone.
    pub fn control(&self) -> Source {
        Source {
            ip: self.ip,
            device: self.device.clone(),
            ..Source::default()
        }
    }

    /// Data connection `k`'s (directions in order, as iperf3 numbers `--cport`'s ports).
    pub fn stream(&self, k: usize) -> Source {
        Source {
            port: self
                .port
                .map(|p| p.saturating_add(u16::try_from(k).unwrap_or(u16::MAX))),
            ..self.clone()
        }
    }

    /// A TCP socket for `to`, bound as asked, before its window and `connect()`.
    fn tcp_socket(&self, to: &SocketAddr) -> Result<Socket> {
        let protocol = match self.mptcp {
            true => Protocol::MPTCP,
            false => Protocol::TCP,
        };
        let sock =
            Socket::new(Domain::for_address(*to), Type::STREAM, Some(protocol)).map_err(|e| {
                match self.mptcp {
                    true => Error::io(
                        "--mptcp: create an MPTCP socket (is net.mptcp.enabled 1, and the kernel \
                     built with MPTCP?)",
                        e,
                    ),
                    false => Error::io("create TCP socket", e),
                }
            })?;
        self.bind(&sock, to)?;
        Ok(sock)
    }

    /// Binds `sock` (bound for `to`) to the interface, the address and the port asked.
    pub fn bind(&self, sock: &Socket, to: &SocketAddr) -> Result<()> {
        if let Some(dev) = &self.device {
            sock.bind_device(Some(dev.as_bytes()))
                .op(|| format!("--bind-dev {dev}: set SO_BINDTODEVICE"))?;
        }
        if self.ip.is_some() || self.port.is_some() {
            let ip = self.ip.unwrap_or(unspecified(match to {
                SocketAddr::V4(_) => Family::V4,
                SocketAddr::V6(_) => Family::V6,
            }));
            let port = self.port.unwrap_or(0);
            if port != 0 {
                // The last test's connections from this port may still be in TIME_WAIT.
                sock.set_reuse_address(true)
                    .op(|| "set SO_REUSEADDR (--cport)".into())?;
            }
            sock.bind(&SockAddr::from(SocketAddr::new(ip, port)))
                .op(|| match self.port {
                    Some(p) => format!("bind to {ip} port {p} (--cport)"),
                    None => format!("bind to {ip} (-B)"),
                })?;
        }
        Ok(())
    }

    /// A UDP socket connected to `to`, from `self`'s interface, address and port.
    pub fn udp_socket(&self, to: SocketAddr) -> Result<std::net::UdpSocket> {
        let sock = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))
            .op(|| "create UDP socket".into())?;
        self.bind(&sock, &to)?;
        sock.connect(&SockAddr::from(to))
            .op(|| format!("connect a UDP socket to {to}"))?;
        Ok(sock.into())
    }

    /// The address to connect to: `to`, with the flow label leased on `sock` for it.
    fn labelled(&self, sock: &Socket, to: SocketAddr) -> Result<SocketAddr> {
        let Some(label) = self.flowlabel else {
            return Ok(to);
        };
        let SocketAddr::V6(v6) = to else {
            return Err(Error::Usage(format!(
                "--flowlabel {label}: unable to set IPv6 flow label: {to} is an IPv4 address \
                 (give -6 or an IPv6 address)"
            )));
        };
        let flowinfo = crate::os::sys::lease_flow_label(sock.as_fd(), *v6.ip(), label)
            .op(|| format!("--flowlabel {label}: unable to set IPv6 flow label"))?;
        Ok(SocketAddr::V6(std::net::SocketAddrV6::new(
            *v6.ip(),
            v6.port(),
            flowinfo,
            v6.scope_id(),
        )))
    }
}

/// Sets `-M`'s MSS on a socket (a listener: for the SYN-ACKs it sends next); `None` clears
/// it, for the path's.
pub fn set_mss(sock: &Socket, mss: Option<u32>) -> Result<()> {
    sock.set_tcp_mss(mss.unwrap_or(0)).map_err(|e| {
        let flag = mss.map_or("-M".to_string(), |m| format!("-M {m}"));
        Error::Usage(format!("{flag}: set TCP_MAXSEG: {e}"))
    })
}

/// Sets the TOS byte. An IPv6 socket gets it as its traffic class and, for the IPv4
/// peers a dual-stack socket may have, as its IPv4 TOS too.
fn set_tos(sock: &Socket, tos: u8) -> Result<()> {
    let v6 = sock.domain().is_ok_and(|d| d == Domain::IPV6);
    let set = match v6 {
        true => sock
            .set_tclass_v6(u32::from(tos))
            .and_then(|()| sock.set_tos_v4(u32::from(tos))),
        false => sock.set_tos_v4(u32::from(tos)),
    };
    set.map_err(|e| {
        Error::Usage(format!(
            "-S {tos:#04x}: set {}: {e}",
            match v6 {
                true => "IPV6_TCLASS and IP_TOS",
                false => "IP_TOS",
            }
        ))
    })
}

/// The TOS byte a socket sends with (IPv6: its traffic class), as the kernel keeps it:
/// Linux keeps a TCP socket's two ECN bits for itself, whatever `-S` asked.
pub fn tos(sock: &impl AsFd) -> Option<u8> {
    let sock = socket2::SockRef::from(sock);
    let v = match sock.domain().ok()? == Domain::IPV6 {
        true => sock.tclass_v6().ok()?,
        false => sock.tos_v4().ok()?,
    };
    u8::try_from(v).ok()
}

/// Sets the congestion control algorithm, with an error that lists what the kernel offers.
pub fn set_congestion(sock: socket2::SockRef<'_>, name: &str) -> Result<()> {
    sock.set_tcp_congestion(name.as_bytes()).map_err(|e| {
        let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) => format!("this kernel has no '{name}' (available: {available})"),
            Some(libc::EPERM) => format!(
                "'{name}' is not in net.ipv4.tcp_allowed_congestion_control and this process is not privileged"
            ),
            _ => e.to_string(),
        };
        Error::Usage(format!("-C {name}: {why}"))
    })
}

/// Checks that `name` can be set here (a throwaway socket), so a typo is a usage error
/// before any connection is made.
pub fn check_congestion(name: &str) -> Result<()> {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .op(|| "create TCP socket".into())?;
    set_congestion(socket2::SockRef::from(&sock), name)
}

/// The congestion control algorithm a socket uses.
pub fn congestion(stream: &TcpStream) -> Option<String> {
    socket2::SockRef::from(stream)
        .tcp_congestion()
        .ok()
        .map(|v| {
            String::from_utf8_lossy(&v)
                .trim_end_matches('\0')
                .to_string()
        })
}

/// The congestion control new TCP sockets get (`net.ipv4.tcp_congestion_control`).
pub fn default_congestion() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// Reads a `net.*` sysctl holding one integer.
pub fn read_sysctl(name: &str) -> Option<u64> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Resolves `host:port`, keeping the addresses of the wanted family.
pub fn resolve(host: &str, port: u16, family: Family) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolve {host}"), e))?
        .filter(|a| match family {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        })
        .collect();
    if addrs.is_empty() {
        let family = match family {
            Family::V4 => "IPv4 address (-4, or an IPv4 -B)",
            _ => "IPv6 address (-6, or an IPv6 -B)",
        };
        return Err(Error::Test(format!("resolve {host}: no {family}")));
    }
    Ok(addrs)
}

/// Sets the window on `sock` (both buffers), honouring `force`, and reads back the grant.
pub fn apply_window(sock: &Socket, requested: Option<u64>, force: bool) -> Result<WindowGrant> {
    let mut grant = WindowGrant {
        requested,
        wmem_max: read_sysctl("net.core.wmem_max"),
        rmem_max: read_sysctl("net.core.rmem_max"),
        ..WindowGrant::default()
    };
    if let Some(bytes) = requested {
        let mut forced = false;
        if force {
            let snd = crate::os::sys::set_buffer_force(sock.as_fd(), true, bytes);
            let rcv = crate::os::sys::set_buffer_force(sock.as_fd(), false, bytes);
            match snd.and(rcv) {
                Ok(()) => forced = true,
                Err(e) => {
                    grant.force_note = Some(format!(
                        "--force-window: SO_SNDBUFFORCE/SO_RCVBUFFORCE refused ({e}); they need \
                         CAP_NET_ADMIN (run as root); used SO_SNDBUF/SO_RCVBUF instead"
                    ))
                }
            }
        }
        if !forced {
            let size = usize::try_from(bytes).unwrap_or(usize::MAX);
            sock.set_send_buffer_size(size)
                .op(|| "set SO_SNDBUF".into())?;
            sock.set_recv_buffer_size(size)
                .op(|| "set SO_RCVBUF".into())?;
        }
        grant.forced = forced;
    }
    grant.sndbuf = sock.send_buffer_size().op(|| "read SO_SNDBUF".into())? as u64;
    grant.rcvbuf = sock.recv_buffer_size().op(|| "read SO_RCVBUF".into())? as u64;
    Ok(grant)
}

fn new_tcp_socket(addr: &SocketAddr) -> Result<Socket> {
    Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .op(|| "create TCP socket".into())
}

/// Connects to the first address that answers, from `from`, with the window set before
/// `connect()`.
pub fn connect(
    addrs: &[SocketAddr],
    from: &Source,
    opts: &SocketOpts,
    timeout: Duration,
) -> Result<(TcpStream, WindowGrant)> {
    let mut last = None;
    for addr in addrs {
        let sock = from.tcp_socket(addr)?;
        let grant = apply_window(&sock, opts.window, opts.force_window)?;
        opts.apply(&sock)?;
        let to = from.labelled(&sock, *addr)?;
        match sock.connect_timeout(&SockAddr::from(to), timeout) {
            Ok(()) => {
                // TCP_NODELAY only with -N (`apply`): data streams keep Nagle/autocorking
                // like every peer's default; the control connection sets it itself.
                return Ok((sock.into(), grant));
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, e) = last.expect("resolve returns at least one address");
    let hint = match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            " (is `pinperf -s` or `iperf3 -s` running there, on that port?)"
        }
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            " (no answer: host down, unreachable or filtered; see --connect-timeout)"
        }
        _ => "",
    };
    let e = if e.kind() == std::io::ErrorKind::WouldBlock {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        )
    } else {
        e
    };
    Err(Error::io(format!("connect to {addr}{hint}"), e))
}

/// The wildcard address of a family, for a server without `-B`: IPv4's for `-4`, IPv6's
/// otherwise (without `-6` the server listens on it dual-stack; see [`listen`]).
pub fn unspecified(family: Family) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        _ => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Listens on `addr` with the window set on the listening socket (accepted sockets inherit
/// it, and with it the window scale they offer in the SYN-ACK). An IPv6 socket takes IPv4
/// connections too (as `::ffff:a.b.c.d`) unless `v6_only` (`IPV6_V6ONLY`).
pub fn listen(
    addr: SocketAddr,
    v6_only: bool,
    window: Option<u64>,
    force: bool,
) -> Result<(TcpListener, WindowGrant)> {
    let (sock, grant) = listener_socket(addr, v6_only, window, force)?;
    Ok((bind_listen(sock, addr)?, grant))
}

/// [`listen`]'s socket, with its options and window, before it is bound.
pub fn listener_socket(
    addr: SocketAddr,
    v6_only: bool,
    window: Option<u64>,
    force: bool,
) -> Result<(Socket, WindowGrant)> {
    let sock = new_tcp_socket(&addr)?;
    sock.set_reuse_address(true)
        .op(|| "set SO_REUSEADDR".into())?;
    if addr.is_ipv6() {
        sock.set_only_v6(v6_only)
            .op(|| format!("set IPV6_V6ONLY to {v6_only}"))?;
    }
    let grant = apply_window(&sock, window, force)?;
    Ok((sock, grant))
}

/// Binds `sock` (from [`listener_socket`]) to `addr` and listens.
pub fn bind_listen(sock: Socket, addr: SocketAddr) -> Result<TcpListener> {
    sock.bind(&SockAddr::from(addr))
        .op(|| format!("bind {addr}"))?;
    sock.listen(1024).op(|| format!("listen on {addr}"))?;
    Ok(sock.into())
}

/// MTU and MSS of a connected socket.
pub fn path_info(stream: &TcpStream) -> PathInfo {
    let ipv6 = stream.peer_addr().map(|a| a.is_ipv6()).unwrap_or(false);
    let mss = socket2::SockRef::from(stream).tcp_mss().ok();
    PathInfo {
        mtu: crate::os::sys::path_mtu(stream.as_fd(), ipv6).ok(),
        mss,
    }
}

/// `TCP_INFO` of a connected socket; `None` where the kernel does not provide it.
/// The connection's smoothed RTT as the kernel measured it (zero when unknown): how long
/// a long path adds to the deadlines of what follows on it.
pub fn rtt(stream: &TcpStream) -> Duration {
    tcp_info(stream).map_or(Duration::ZERO, |i| {
        Duration::from_micros(u64::from(i.rtt_us))
    })
}

/// The connection's smallest round trip so far (the path's delay without its queues and
/// delayed ACKs; the handshake gives the first sample), or zero when unknown.
pub fn min_rtt(stream: &TcpStream) -> Duration {
    tcp_info(stream).map_or(Duration::ZERO, |i| {
        Duration::from_micros(u64::from(i.min_rtt_us))
    })
}

pub fn tcp_info(stream: &TcpStream) -> Option<TcpInfo> {
    crate::os::sys::tcp_info(stream.as_fd())
        .ok()
        .map(|(info, _)| info)
}

/// `--fq-rate` with `-u`: the socket's `SO_MAX_PACING_RATE`, as iperf3 sets it. The kernel
/// paces UDP by it only under the fq qdisc; the sender's own `-b` pacing runs either way.
pub fn set_udp_pacing(sock: &std::net::UdpSocket, rate_bps: u64) -> Result<()> {
    crate::os::sys::set_max_pacing_rate(sock.as_fd(), rate_bps / 8)
        .op(|| format!("set SO_MAX_PACING_RATE to {rate_bps} bit/s (--fq-rate)"))
}

/// `--fq-rate`: caps the kernel's pacing of a TCP connection at `rate_bps` bits/s
/// (`SO_MAX_PACING_RATE`, which counts bytes/s; TCP paces itself on kernels since 4.13,
/// the fq qdisc is not needed). Returns what the kernel holds, bits/s. Call on a sending
/// end's data connections, connected.
///
/// The socket then keeps at most [`timeouts::PACED_QUEUE`] of the rate unsent, so the test
/// ends on time; and a rate so low that the kernel's bursts would come more than
/// [`timeouts::PACED_BURST_MAX`] apart is refused, naming the lowest rate this path takes.
pub fn set_fq_rate(stream: &TcpStream, rate_bps: u64) -> Result<u64> {
    let fd = stream.as_fd();
    if let Some(info) = tcp_info(stream) {
        let min_rtt = Duration::from_micros(u64::from(info.min_rtt_us));
        // The segment size grows toward the path MTU's (less IP and TCP headers with
        // timestamps) once the peer's window allows: loopback starts at 32 KiB, then 64.
        // The peer's own MSS may hold it lower: at most twice what it is now.
        let ipv6 = matches!(stream.peer_addr(), Ok(SocketAddr::V6(a)) if a.ip().to_ipv4_mapped().is_none());
        let headers = if ipv6 { 72 } else { 52 };
        let mss = info.snd_mss.max(
            info.pmtu
                .saturating_sub(headers)
                .min(info.snd_mss.saturating_mul(2)),
        );
        let gap = timeouts::paced_burst_gap(rate_bps, mss, min_rtt);
        if gap > timeouts::PACED_BURST_MAX {
            let lowest = (1u64..)
                .map(|k| k * 1000)
                .find(|&r| timeouts::paced_burst_gap(r, mss, min_rtt) <= timeouts::PACED_BURST_MAX)
                .unwrap_or(u64::MAX);
            return Err(Error::Test(format!(
                "--fq-rate {}: the kernel would send this connection's data in bursts of {} B \
                 (segments of {} B) {:.2} s apart, more than the {} s allowed (half the {} s \
                 after which a receiver that hears nothing takes the path as down); use \
                 --fq-rate {} or more on this path, or -b (pinperf paces its writes)",
                crate::units::format_rate(rate_bps),
                timeouts::paced_burst(rate_bps, mss, min_rtt),
                mss,
                gap.as_secs_f64(),
                timeouts::PACED_BURST_MAX.as_secs(),
                timeouts::STALL.as_secs(),
                crate::units::format_rate(lowest),
            )));
        }
    }
    crate::os::sys::set_max_pacing_rate(fd, rate_bps / 8)
        .op(|| format!("set SO_MAX_PACING_RATE to {rate_bps} bit/s (--fq-rate)"))?;
    let queue = rate_bps as f64 / 8.0 * timeouts::PACED_QUEUE.as_secs_f64();
    crate::os::sys::set_notsent_lowat(fd, queue.max(1.0) as u32)
        .op(|| "set TCP_NOTSENT_LOWAT (--fq-rate)".into())?;
    let held = crate::os::sys::max_pacing_rate(fd).op(|| "read SO_MAX_PACING_RATE".into())?;
    Ok(held.saturating_mul(8))
}

/// Resets its connection when dropped, unless disarmed: a stream that ends abnormally
/// (abort, error, a peer that stopped reading) must not leave an orphaned socket holding up
/// to a whole window of unsent data in the host's TCP memory, where it would starve the
/// next test (measured: four orphans of 512 MiB windows held TCP in memory pressure and cut
/// the next runs to 2 % of the path). Holds a duplicate descriptor of the same socket.
pub struct ResetOnDrop(Option<TcpStream>);

impl ResetOnDrop {
    pub fn new(stream: &TcpStream) -> ResetOnDrop {
        ResetOnDrop(stream.try_clone().ok())
    }

    /// The connection ended cleanly: close it normally.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            // SO_LINGER 0: the last close() sends RST and frees the queues at once.
            let _ = socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--dont-fragment` sets DF (path MTU discovery "do") on an IPv4 UDP socket, and on
    /// nothing else.
    #[test]
    fn dont_fragment_sets_df_on_ipv4_udp_only() {
        let df = |sock: &std::net::UdpSocket| {
            crate::os::sys::getsockopt_raw::<libc::c_int>(
                sock.as_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
            )
            .unwrap()
            .0
        };
        let mut test = TestParams::defaults();
        test.udp = true;
        test.dont_fragment = true;
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_ne!(df(&sock), libc::IP_PMTUDISC_DO, "not before");
        SocketOpts::of(&test)
            .apply(&socket2::SockRef::from(&sock))
            .unwrap();
        assert_eq!(df(&sock), libc::IP_PMTUDISC_DO);
        test.udp = false;
        assert!(!SocketOpts::of(&test).dont_fragment, "TCP leaves it alone");
    }

    /// `--cport`: data connection k from port + k; the control connection keeps the
    /// address and interface alone.
    #[test]
    fn a_source_numbers_its_data_ports() {
        let from = Source {
            ip: Some("127.0.0.1".parse().unwrap()),
            device: Some("lo".into()),
            port: Some(40000),
            mptcp: true,
            flowlabel: Some(7),
        };
        assert_eq!(from.stream(3).port, Some(40003));
        assert!(from.stream(3).mptcp);
        let ctl = from.control();
        assert_eq!((ctl.port, ctl.mptcp, ctl.flowlabel), (None, false, None));
        assert_eq!(ctl.device.as_deref(), Some("lo"));
    }

    #[test]
    fn window_is_set_before_listen_and_read_back() {
        let (listener, grant) = listen(
            "127.0.0.1:0".parse().unwrap(),
            false,
            Some(256 << 10),
            false,
        )
        .unwrap();
        // Linux doubles the request; 256k is below any sane wmem_max/rmem_max.
        assert_eq!(grant.sndbuf, 512 << 10);
        assert_eq!(grant.rcvbuf, 512 << 10);
        assert!(grant.shortfalls("local").is_empty());
        // An accepted socket inherits the listener's buffer.
        let addr = listener.local_addr().unwrap();
        let (_c, _) = connect(
            &[addr],
            &Source::default(),
            &SocketOpts::default(),
            Duration::from_secs(2),
        )
        .unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert_eq!(
            socket2::SockRef::from(&accepted)
                .recv_buffer_size()
                .unwrap(),
            512 << 10
        );
    }

    #[test]
    fn a_capped_window_names_the_sysctl_and_the_fix() {
        let grant = WindowGrant {
            requested: Some(256 << 20),
            sndbuf: 8 << 20,
            rcvbuf: 512 << 20,
            wmem_max: Some(4 << 20),
            rmem_max: Some(1 << 30),
            ..WindowGrant::default()
        };
        let warnings = grant.shortfalls("remote");
        assert_eq!(warnings.len(), 1);
        assert_eq!(
            warnings[0],
            "warning: -w 256M: remote SO_SNDBUF granted 8388608, short of 536870912 (Linux doubles \
             the request); net.core.wmem_max = 4194304 caps it. Allow it with: sysctl -w \
             net.core.wmem_max=268435456 (or --force-window as root)"
        );
    }

    #[test]
    fn congestion_control_is_set_and_unknown_names_are_explained() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let opts = SocketOpts {
            congestion: Some("reno".into()),
            ..SocketOpts::default()
        };
        let (c, _) = connect(
            &[l.local_addr().unwrap()],
            &Source::default(),
            &opts,
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(congestion(&c).as_deref(), Some("reno"));
        let err = set_congestion(socket2::SockRef::from(&c), "nosuchcc")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("-C nosuchcc: this kernel has no 'nosuchcc' (available: "),
            "{err}"
        );
    }

    /// `-S` reaches every data socket: the client's before connect(), the server's
    /// listener and so what it accepts (IPv4, and IPv6 as the traffic class), UDP's; `-M`
    /// and `-N` both ends of TCP's; and the options of a test are its parameters', with
    /// -C, -M and -N left out of UDP.
    #[test]
    fn socket_options_are_set_on_both_ends_of_tcp_and_on_udp() {
        let mut test = TestParams::defaults();
        test.tos = Some(0x28);
        test.transport.congestion = Some("reno".into());
        test.transport.mss = Some(1000);
        test.transport.no_delay = true;
        let opts = SocketOpts::of(&test);
        assert_eq!(
            (opts.tos, opts.congestion.as_deref()),
            (Some(0x28), Some("reno"))
        );
        assert_eq!(
            opts.echo(),
            SocketOpts {
                tos: Some(0x28),
                ..SocketOpts::default()
            }
        );
        for ip in ["127.0.0.1", "::1"] {
            let Ok((listener, _)) =
                listen(SocketAddr::new(ip.parse().unwrap(), 0), true, None, false)
            else {
                eprintln!("SKIPPED: tos on {ip}: no such address here");
                continue;
            };
            opts.apply(&socket2::SockRef::from(&listener)).unwrap();
            let (client, _) = connect(
                &[listener.local_addr().unwrap()],
                &Source::default(),
                &opts,
                Duration::from_secs(2),
            )
            .unwrap();
            let (accepted, _) = listener.accept().unwrap();
            assert_eq!(
                (tos(&client), tos(&accepted)),
                (Some(0x28), Some(0x28)),
                "{ip}"
            );
            assert_eq!(congestion(&accepted).as_deref(), Some("reno"), "{ip}");
            for end in [&client, &accepted] {
                let mss = socket2::SockRef::from(end).tcp_mss().unwrap();
                assert!((900..=1000).contains(&mss), "{ip}: MSS {mss}");
                assert!(end.nodelay().unwrap(), "{ip}: TCP_NODELAY");
            }
        }
        test.udp = true;
        let opts = SocketOpts::of(&test);
        assert_eq!(
            (opts.congestion.as_deref(), opts.mss, opts.no_delay),
            (None, None, false),
            "-C, -M and -N are TCP's"
        );
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        opts.apply(&socket2::SockRef::from(&udp)).unwrap();
        assert_eq!(tos(&udp), Some(0x28));
    }

    #[test]
    fn refused_connect_names_the_address_and_the_fix() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let err = connect(
            &[addr],
            &Source::default(),
            &SocketOpts::default(),
            Duration::from_secs(2),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "connect to {addr} (is `pinperf -s` or `iperf3 -s` running"
            )),
            "{text}"
        );
    }

    #[test]
    fn fq_rate_is_set_in_bytes_and_read_back_in_bits() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(set_fq_rate(&c, 2_000_000_000).unwrap(), 2_000_000_000);
        assert_eq!(
            tcp_info(&c).unwrap().max_pacing_rate,
            250_000_000,
            "TCP_INFO shows the cap in bytes/s"
        );
        // Above 34 Gbit/s a u32 of bytes/s would overflow: the u64 form keeps it.
        assert_eq!(set_fq_rate(&c, 100_000_000_000).unwrap(), 100_000_000_000);
    }

    /// Paced, a socket keeps 100 ms of the rate unsent; a rate whose bursts (one 64 KiB
    /// segment on loopback) would leave more than 5 s apart is refused, the socket
    /// untouched.
    #[test]
    fn a_paced_socket_keeps_a_tenth_of_a_second_unsent_or_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(set_fq_rate(&c, 8_000_000).unwrap(), 8_000_000);
        let (lowat, _) = crate::os::sys::getsockopt_raw::<i32>(
            c.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
        )
        .unwrap();
        assert_eq!(lowat, 100_000, "100 ms of 1 MB/s");

        let d = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let err = set_fq_rate(&d, 50_000).unwrap_err().to_string();
        assert!(err.starts_with("--fq-rate 50k: "), "{err}");
        assert!(err.contains("use --fq-rate 105k or more"), "{err}");
        assert_eq!(tcp_info(&d).unwrap().max_pacing_rate, u64::MAX, "not paced");
    }

    #[test]
    fn reset_on_drop_sets_linger_zero_unless_disarmed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        drop(ResetOnDrop::new(&a));
        assert_eq!(
            socket2::SockRef::from(&a).linger().unwrap(),
            Some(std::time::Duration::ZERO),
            "an armed guard leaves the socket to reset on close"
        );
        let mut guard = ResetOnDrop::new(&b);
        guard.disarm();
        drop(guard);
        assert_eq!(socket2::SockRef::from(&b).linger().unwrap(), None);
    }

    /// `--cntl-ka`'s IDLE/INTV/CNT as iperf3 reads them: each optional, 0 the system's,
    /// IDLE above CNT × INTV.
    #[test]
    fn keepalive_reads_as_iperf3s() {
        let s = |v: u64| Some(Duration::from_secs(v));
        for (text, want) in [
            ("", Ok((None, None, None))),
            ("30", Ok((s(30), None, None))),
            ("30/5/3", Ok((s(30), s(5), Some(3)))),
            ("/5/", Ok((None, s(5), None))),
            ("0/0/4", Ok((None, None, Some(4)))),
            ("15/5/3", Err("'15/5/3': IDLE must be more than CNT × INTV")),
            ("a/1", Err("'a/1': IDLE must be whole seconds")),
            ("9/-1", Err("'9/-1': INTV must be whole seconds")),
        ] {
            let got = Keepalive::parse(text).map(|k| (k.idle, k.interval, k.count));
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{text}"),
                (Err(e), Err(w)) => assert!(e.starts_with(w), "{text}: {e}"),
                (g, w) => panic!("{text}: {g:?}, want {w:?}"),
            }
        }
    }

    /// `--snd-timeout` and `--cntl-ka` on a real connection, read back: set on a listener
    /// (as the server sets them), its accepted connection has them; set on a connected
    /// socket (as the client does), so has it.
    #[test]
    fn host_socket_options_are_set_and_inherited() {
        let host = HostSockets {
            user_timeout: Some(Duration::from_millis(5000)),
            keepalive: Keepalive::parse("30/5/3").ok(),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        host.apply_control(socket2::SockRef::from(&listener))
            .unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        host.apply_control(socket2::SockRef::from(&client)).unwrap();
        for (name, sock) in [("accepted", &accepted), ("client", &client)] {
            let s = socket2::SockRef::from(sock);
            assert_eq!(
                s.tcp_user_timeout().unwrap(),
                Some(Duration::from_secs(5)),
                "{name}"
            );
            assert!(s.keepalive().unwrap(), "{name}");
            assert_eq!(
                s.tcp_keepalive_time().unwrap(),
                Duration::from_secs(30),
                "{name}"
            );
            assert_eq!(
                s.tcp_keepalive_interval().unwrap(),
                Duration::from_secs(5),
                "{name}"
            );
            assert_eq!(s.tcp_keepalive_retries().unwrap(), 3, "{name}");
        }
        // Without them, nothing is set (the system's defaults stay).
        let plain = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        HostSockets::default()
            .apply_control(socket2::SockRef::from(&plain))
            .unwrap();
        let p = socket2::SockRef::from(&plain);
        assert_eq!(p.tcp_user_timeout().unwrap(), None);
        assert!(!p.keepalive().unwrap());
        // A data socket's options carry the user timeout alone.
        let data = SocketOpts {
            user_timeout: host.user_timeout,
            ..SocketOpts::default()
        };
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        data.apply(&sock).unwrap();
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(5))
        );
        assert!(!sock.keepalive().unwrap());
    }
}
