//! The control port listening again with a test's window and MSS, for the streams that
//! connect to it (see [`Relisten`]).

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::net::UnixStream;

use crossbeam_channel::Sender;

use crate::error::{Error, IoContext, Result};
use crate::os::net;
use crate::timeouts;
use crate::wire::TestParams;

/// A request to the acceptor: listen with these set on the sockets it accepts, and say how
/// it went.
pub(crate) type Ask = (Listening, Sender<std::result::Result<(), String>>);

/// What the control port's listener sets on the sockets it accepts, of what must be set
/// before the handshake: the window (none: the kernel's autotuning) and `-M`'s MSS (none:
/// the path's), which a connection's SYN-ACK announces. The window takes a new listener;
/// the MSS is set on the live one (for its next SYN-ACK) and cleared when the test ends.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Listening {
    pub(crate) window: Option<u64>,
    pub(crate) mss: Option<u32>,
}

impl Listening {
    /// What a test's streams need of the listener they connect to.
    pub(crate) fn of(test: &TestParams) -> Listening {
        Listening {
            window: test.window_bytes,
            mss: test.mss(),
        }
    }
}

/// A test's streams connect to the control port (an iperf3 client's always, a pinperf
/// client's TCP streams without `--data-port`), and the window scale a connection's
/// receiver announces in its SYN-ACK comes from the listener's buffer: a `-w` set after
/// accept() cannot lower it, and one below an MSS then stalled the stream
/// (`iperf3 -c -w 8k` over loopback: 2 Mbit/s, against 195 to 1150 from an iperf3 server in
/// the same minutes). As an iperf3 server does, the acceptor listens again with the test's
/// window before its streams connect (and sets `-M`'s MSS, likewise announced in the
/// SYN-ACK, on it until the test ends: iperf3 clients take their datagram size and
/// `tcp_mss_default` from the control connection's MSS). The listener keeps the window
/// until a test wants another (a locked buffer cannot be unlocked, and listening again as
/// a test ends would refuse a shell loop's next client): each such test asks for its own
/// once admitted, when any other client is refused as busy anyway; one that connects in
/// the moment between the two listeners is refused or reset, as by an iperf3 server.
pub(crate) struct Relisten {
    pub(crate) asks: Sender<Ask>,
    /// Wakes the acceptor from its poll.
    pub(crate) wake: UnixStream,
}

impl Relisten {
    /// Has the control port accept sockets with `wanted` from now on.
    pub(crate) fn ensure(&self, wanted: Listening) -> Result<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let gone = || {
            let wait = timeouts::RELISTEN.as_secs_f64();
            format!("the acceptor did not answer within {wait:.0} s")
        };
        self.asks
            .send((wanted, tx))
            .map_err(|_| Error::Test(gone()))?;
        let _ = (&self.wake).write(&[1]);
        rx.recv_timeout(timeouts::RELISTEN)
            .unwrap_or_else(|_| Err(gone()))
            .map_err(|e| Error::Test(format!("listen again on the control port: {e}")))
    }
}

/// Closes `listener` (which sets the window `current` on the sockets it accepts) and
/// listens again on its address with `window` set before `listen()` (accepted sockets
/// inherit it); returns the listener, the window it sets and how the change went. Both sockets it may need are made before the old closes (out of
/// descriptors, another thread could take the one the close frees); when the wanted one
/// cannot listen, the other listens without a window. When neither can (another process
/// took the port in that moment), the server cannot go on.
pub(crate) fn relisten(
    listener: TcpListener,
    v6_only: bool,
    current: Option<u64>,
    window: Option<u64>,
) -> Result<(TcpListener, Option<u64>, Result<()>)> {
    let addr = listener
        .local_addr()
        .op(|| "read the control port's address".into())?;
    let socket = |window| net::listener_socket(addr, v6_only, window, false).map(|(s, _)| s);
    let (sock, fallback) = match socket(window).and_then(|w| Ok((w, socket(None)?))) {
        Ok(pair) => pair,
        Err(e) => return Ok((listener, current, Err(e))),
    };
    drop(listener);
    let listen = |sock| -> Result<TcpListener> {
        let l = net::bind_listen(sock, addr)?;
        l.set_nonblocking(true)
            .op(|| "set O_NONBLOCK on the control port".into())?;
        Ok(l)
    };
    Ok(match listen(sock) {
        Ok(l) => (l, window, Ok(())),
        Err(e) => {
            let l = listen(fallback).map_err(|again| {
                Error::Test(format!(
                    "listen again on the control port {addr} (for an iperf3 test's -w): \
                     {e}; and without a window: {again}"
                ))
            })?;
            (l, None, Err(e))
        }
    })
}
