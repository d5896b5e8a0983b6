//! UDP streams (`-u`): one pinned thread per stream on each end, like TCP's, over a
//! connected `UdpSocket`.
//!
//! - [`send`] paces datagrams at the stream's rate ([`crate::data::pace`]), batches them with
//!   `sendmmsg` and, where the kernel has it, UDP GSO; each datagram carries its stream
//!   id, a 64-bit sequence and its send time ([`wire`]). Sent bytes go to the reporter as
//!   block records, so sender intervals work as for TCP.
//! - [`receive`] batches with `recvmmsg` and UDP GRO, accounts every datagram
//!   ([`counters`]: received, lost, out of order, duplicates, RFC 3550 jitter, the
//!   socket's receive-queue drops) and sends a cumulative [`UdpSnapshot`] with each record,
//!   so the reporter cuts exact per-interval counts.
//!
//! Nothing here waits for a last datagram or an acknowledgement: the sender stops at its
//! run time, the receiver at its own deadline, and the final counts travel on the control
//! connection (the owner's job). Threads: the `stream-N` threads only.

pub mod counters;
pub mod receiver;
pub mod sender;
pub mod wire;

use std::net::UdpSocket;
use std::os::fd::AsFd;

use crate::error::Result;
use crate::os::netinfo::WindowGrant;

pub use receiver::{UdpRecvOutcome, receive};
pub use sender::{UdpSend, UdpSendOutcome, send};

/// The largest datagram is the parameter table's ([`crate::wire::params`]).
pub const MAX_DATAGRAM: usize = crate::wire::params::MAX_DATAGRAM as usize;

/// What [`configure_with`] set on a UDP socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpSetup {
    /// `-w` (both buffers) as requested and granted, as for TCP.
    pub window: WindowGrant,
    /// Receive offloads: GRO on, and the per-socket drop count (`SO_RXQ_OVFL`) reported.
    /// With GRO the kernel counts a dropped buffer once however many datagrams it held
    /// (up to 64): `rxq_drops` then counts drop events, and the sequences tell the
    /// datagrams.
    pub gro: bool,
    pub rxq_ovfl: bool,
    /// This kernel has UDP GSO (the sender still falls back if a send refuses it).
    pub gso: bool,
}

/// Sets `-w` on a UDP socket (as `net::apply_window` does for TCP, `force` for
/// `--force-window`), turns the receive-queue drop count on and GRO unless `gro` is false
/// (exact per-datagram drop counts at the cost of one buffer per datagram), and says what
/// the kernel offers. Call on both ends before the test.
pub fn configure_with(
    sock: &UdpSocket,
    window: Option<u64>,
    force: bool,
    gro: bool,
) -> Result<UdpSetup> {
    let window = crate::os::net::apply_window(&socket2::SockRef::from(sock), window, force)?;
    Ok(UdpSetup {
        window,
        gro: gro && crate::os::sys::set_udp_gro(sock.as_fd()).is_ok(),
        rxq_ovfl: crate::os::sys::set_rxq_ovfl(sock.as_fd()).is_ok(),
        gso: crate::os::sys::udp_gso_supported(sock.as_fd()),
    })
}

#[cfg(test)]
mod tests;
