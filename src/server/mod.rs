//! The server: an acceptor (the calling thread) that checks each connection's address
//! (`--allow`; `--max-tests-per-minute` when a test is admitted) and hands it to its own `control` thread for the
//! handshake (see [`self::admission`]: at most [`acceptor::MAX_HANDSHAKES`] at once, each under a
//! deadline the acceptor enforces by cutting the connection). Only an admitted test takes
//! the slot; one that finds a test running is told "busy" with the time left. The control
//! thread then runs the test: data listener with the window set before `listen()`, pinned
//! `stream-N` receivers, a `reporter` streaming receiver rows live, and the end: every
//! stream read to EOF, then the totals. Every phase has a timeout; a client that vanishes
//! ends its test and the server goes on. Events go to [`self::serverlog`].
//!
//! Without `-B` the server listens on `[::]` dual-stack (IPv4 clients arrive as
//! `::ffff:a.b.c.d` and are named by their IPv4 address), or on one family with `-4`/`-6`;
//! each test's data listener sits on the address its control connection reached. Out of
//! file descriptors, the acceptor refuses clients with that reason (a spare descriptor is
//! kept for it), logs once per burst, and pauses between attempts instead of spinning.
//!
//! The files follow a connection: `acceptor` (the listener loop), `control` (what a
//! connection opens with, and the dispatch: a connection in iperf3's protocol goes to
//! `iperf3::session`), `handshake`, `test_run` (the test's phases),
//! `streams` (gathering its connections); `shared` holds the slot and what the threads
//! share, `relisten` the control port listening again for a test's streams.

/// Server log lines go to stderr (text, or JSON `message` events with `--log-format
/// json`; see [`serverlog`]), except for the in-process `--loopback` server.
macro_rules! log {
    ($quiet:expr, $($arg:tt)*) => {
        if !$quiet {
            serverlog::message(format!($($arg)*));
        }
    };
}

mod acceptor;
pub mod admission;
pub mod allow;
pub mod auth;
pub(crate) mod bounds;
mod control;
mod handshake;
mod pidfile;
pub(crate) mod relisten;
pub(crate) mod serverlog;
pub(crate) mod shared;
mod streams;
mod test_run;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;

use self::acceptor::{fd_limit, open_spare};
use crate::config::ServerConfig;
use crate::data::stream::spawn_named;
use crate::error::{Error, IoContext, Result};
use crate::os::net::{self, Family};
use crate::wire::SOFTWARE;

/// A bound, listening server.
pub struct Server {
    listener: TcpListener,
    cfg: ServerConfig,
    /// A descriptor kept free to accept, and refuse with the reason, a client that comes
    /// while the process is out of descriptors (else it would wait in the backlog).
    spare: Option<std::fs::File>,
    /// Said when the server starts listening: `--data-port`'s port is held on some
    /// addresses of this host only.
    note: Option<String>,
    /// The acceptor's wake-up pair (read end, write end; see [`relisten::Relisten`]): made here, so
    /// that a server that says it listens has every descriptor it keeps.
    wake: (UnixStream, UnixStream),
}

impl Server {
    /// Binds the control port: on `-B`, or on the wildcard address of `-4`/`-6`, or
    /// without either on `[::]` dual-stack, falling back to `0.0.0.0` where this host has
    /// no IPv6.
    pub fn bind(cfg: ServerConfig) -> Result<Server> {
        // Read the limit while a descriptor is free for it: out of them, it is remembered.
        fd_limit();
        let v6_only = cfg.family == Family::V6;
        let listen = |ip: IpAddr| {
            let addr = SocketAddr::new(ip, cfg.port);
            net::listen(addr, v6_only, None, false).map_err(|e| match e {
                Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
                    Error::io(
                        format!(
                            "listen on {addr} (another server on that port? choose one with -p)"
                        ),
                        source,
                    )
                }
                Error::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::AddrNotAvailable =>
                {
                    Error::io(
                        format!("listen on {addr} (-B {ip}: not an address of this host?)"),
                        source,
                    )
                }
                other => other,
            })
        };
        let (listener, _) = match cfg.bind {
            Some(ip) => listen(ip)?,
            None => match listen(net::unspecified(cfg.family)) {
                Err(e) if cfg.family == Family::Any && no_ipv6(&e) => {
                    listen(Ipv4Addr::UNSPECIFIED.into())?
                }
                other => other?,
            },
        };
        // Accepted connections inherit --snd-timeout and --cntl-ka from the listener.
        cfg.sockets
            .apply_control(socket2::SockRef::from(&listener))?;
        // Every TCP test listens on --data-port: one taken by another program is said now,
        // not by every test's client ("bind 127.0.0.1:6110: Address already in use").
        let mut note = None;
        if let Some(port) = cfg.data_port.filter(|&p| p != 0) {
            let ip = listener
                .local_addr()
                .op(|| "read listening address".into())?
                .ip();
            let probe = |ip| net::listen(SocketAddr::new(ip, port), v6_only, None, false);
            match probe(ip) {
                Ok(_) => {}
                // On the wildcard, a port held on one address of the host is in use too;
                // tests reach this server at the others, loopback among them.
                Err(_)
                    if ip.is_unspecified() && loopbacks(ip, v6_only).all(|l| probe(l).is_ok()) =>
                {
                    let free: Vec<String> = loopbacks(ip, v6_only).map(|l| l.to_string()).collect();
                    note = Some(format!(
                        "pinperf: --data-port {port} is in use on some of this host's addresses \
                         (not {}): a test reaching this server at one of them is refused; \
                         choose another port to serve them too",
                        free.join(", ")
                    ));
                }
                Err(e) => return Err(data_port_taken(port, e)),
            }
        }
        let wake = UnixStream::pair()
            .and_then(|(r, w)| {
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                Ok((r, w))
            })
            .op(|| "create the acceptor's wake-up socket pair".into())?;
        Ok(Server {
            listener,
            cfg,
            spare: open_spare(),
            note,
            wake,
        })
    }

    /// Starts a quiet server on 127.0.0.1 (ephemeral port) on a `server` thread of this
    /// process, for `--loopback` (one test) and `compare --loopback` (many). The thread is
    /// not joined: its failures reach the client over the control connection.
    pub fn spawn_local(one_off: bool, affinity: crate::data::pin::Affinity) -> Result<SocketAddr> {
        let server = Server::bind(ServerConfig::in_process(
            std::net::Ipv4Addr::LOCALHOST.into(),
            one_off,
            affinity,
        ))?;
        let addr = server.local_addr()?;
        spawn_named("server".into(), move || server.run())?;
        Ok(addr)
    }

    /// The address the control port is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .op(|| "read listening address".into())
    }
}

/// Runs a server per the configuration (the `-s` mode).
pub fn serve(cfg: ServerConfig) -> Result<()> {
    serverlog::set_output(&cfg.log)?;
    let ignored = cfg.log.ignored.clone();
    let (auth, allow) = (
        cfg.auth.is_some(),
        cfg.allow.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
    );
    let (daemon, pidfile, signals) = (cfg.daemon, cfg.pidfile.clone(), cfg.signals);
    let mut server = Server::bind(cfg)?;
    // `-D` once the port is held (a port in use is said on the terminal), and before any
    // thread starts: a fork keeps only the calling thread.
    if daemon {
        crate::os::sys::daemonize().map_err(|e| Error::io("-D/--daemon: detach", e))?;
    }
    let _pidfile = pidfile
        .as_deref()
        .map(pidfile::Pidfile::create)
        .transpose()?;
    if signals {
        crate::signals::take_over()?;
    }
    serverlog::listening(server.local_addr()?, SOFTWARE, auth, &allow);
    if let Some(note) = server.note.take() {
        serverlog::message(note);
    }
    for flag in ignored {
        serverlog::message(format!(
            "pinperf: {flag} ignored: iperf3 -s takes it for its report; a pinperf server logs \
             each test in its log (text, or --log-format json) and its client reports it"
        ));
    }
    server.run()
}

/// The loopback addresses a server listening on the wildcard `ip` serves: IPv4's, IPv6's,
/// or (dual-stack) both.
fn loopbacks(ip: IpAddr, v6_only: bool) -> impl Iterator<Item = IpAddr> {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    match (ip.is_ipv6(), v6_only) {
        (false, _) => vec![v4],
        (true, true) => vec![v6],
        (true, false) => vec![v4, v6],
    }
    .into_iter()
}

/// `--data-port`'s listener could not be made: its port in use is named with the fix.
fn data_port_taken(port: u16, e: Error) -> Error {
    match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
            Error::Usage(format!(
                "--data-port {port}: the port is in use (another server there?); choose \
                 another, or leave --data-port out for a port of the kernel's choosing"
            ))
        }
        other => other,
    }
}

/// An address as the client knows it: an IPv4 client of a dual-stack listener arrives as
/// `::ffff:a.b.c.d` and is `a.b.c.d` here (logs, and the data connections' check).
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip().to_canonical() {
        ip @ IpAddr::V4(_) if addr.is_ipv6() => SocketAddr::new(ip, addr.port()),
        _ => addr,
    }
}

/// True when binding the IPv6 wildcard failed because this host has no IPv6.
fn no_ipv6(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if matches!(
        source.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EADDRNOTAVAIL)
    ))
}
