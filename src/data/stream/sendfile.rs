//! `-Z` by `sendfile(2)` (`--zerocopy=sendfile`, `-Z`'s default): a sending stream's blocks
//! live in a `memfd`, and `sendfile` queues them on the socket by page reference, with no
//! copy into the kernel (iperf3's `-Z` does the same from a file). Same stream thread, same
//! records: a record per `sendfile`, of the bytes it took.
//!
//! Block RTT stamps each block's 16-byte header, and a page the kernel references is sent
//! as it is when its turn comes: a header rewritten while its page is still referenced
//! changes data in flight. So block `seq` is stamped into region `seq % regions` of a ring,
//! and a region is rewritten only after `regions - 1` more blocks went into the socket.
//! The ring spans at least twice what can still reference its pages ([`ring_bytes`]):
//!
//! - the sender's queue: bytes written and not yet acknowledged, at most its send buffer
//!   (`SO_SNDBUF`, which autotuning grows up to `net.ipv4.tcp_wmem`'s maximum). Past the
//!   acknowledgement the receiver holds its own copy (a NIC clone that outlives the ack
//!   carries bytes the receiver has already taken and drops by sequence);
//! - on one host (loopback, veth), the receiving socket's queue, which holds the same
//!   pages until its reader takes them: at most its receive buffer (`net.ipv4.tcp_rmem`'s
//!   maximum under autotuning; with `-w`, twice `net.core.rmem_max` at most, or the grant
//!   `--force-window` gave this end too).
//!
//! A bound that held nowhere would still never give a wrong block RTT: every receiver
//! checks that a block's header carries that block's sequence number
//! ([`super::echo::HeaderEcho`]) and fails the test when one does not.
//!
//! The file is sparse: only the page holding each region's header is ever written; the
//! rest reads as the kernel's zero page. A ring costs a page per region (blocks of 4 KiB
//! and more) however many bytes it spans, and the bodies are zeros (the copying path's are
//! 0x5a; no receiver reads them). On loopback the receiver then copies out of one
//! cache-hot page, which flatters its CPU a little beside iperf3's file pages; over a NIC
//! the bodies go by DMA and nothing differs.

use std::fs::File;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;

use super::echo;
use crate::os::sys;

/// Bytes a ring spans at least.
const MIN_RING_BYTES: u64 = 8 << 20;
/// Bytes a ring spans at most (twice the largest window TCP can announce, 1 GiB, twice).
const MAX_RING_BYTES: u64 = 4 << 30;
/// Memory a stream's ring may touch: its header pages (every page, for blocks under a
/// page). A tuned host's 512 MiB ring of 4 KiB blocks would touch all of it, per stream.
const MAX_TOUCHED_BYTES: u64 = 256 << 20;
const PAGE: u64 = 4096;

/// A sending stream's blocks in a `memfd`, sent with `sendfile`.
pub struct SendfileRing {
    file: File,
    map: sys::SharedMap,
    block: usize,
    regions: u64,
    /// `sendfile` calls that took bytes.
    pub calls: u64,
}

impl SendfileRing {
    /// The ring for a stream of `block`-byte blocks on `sock` (sized by its send buffer and
    /// this host's limits, see [`ring_bytes`]). An error names the step that failed.
    pub fn for_socket(sock: &TcpStream, block: usize) -> io::Result<SendfileRing> {
        let sndbuf = socket2::SockRef::from(sock).send_buffer_size().unwrap_or(0) as u64;
        let bytes = ring_bytes(block as u64, sndbuf, &HostLimits::read());
        SendfileRing::with_regions(block, regions_for(block as u64, bytes)?)
    }

    /// A ring of `regions` regions (at least 2) of `block` bytes.
    pub fn with_regions(block: usize, regions: u64) -> io::Result<SendfileRing> {
        let regions = regions.max(2);
        let len = (block as u64)
            .checked_mul(regions)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| io::Error::other("the ring does not fit this host's address space"))?;
        let file =
            File::from(sys::memfd(c"pinperf-sendfile").map_err(|e| step("memfd_create", e))?);
        file.set_len(len as u64).map_err(|e| step("ftruncate", e))?;
        let map = sys::SharedMap::new(file.as_fd(), len).map_err(|e| step("mmap", e))?;
        Ok(SendfileRing {
            file,
            map,
            block,
            regions,
            calls: 0,
        })
    }

    #[cfg(test)]
    /// Regions in the ring.
    pub fn regions(&self) -> u64 {
        self.regions
    }

    fn start(&self, seq: u64) -> usize {
        (seq % self.regions) as usize * self.block
    }

    /// Stamps block `seq`'s header (time `stamp_ns`) into its region.
    #[inline]
    pub fn stamp(&mut self, seq: u64, stamp_ns: u64) {
        let at = self.start(seq);
        let end = (at + echo::HEADER_LEN).min(at + self.block);
        echo::stamp(&mut self.map.bytes_mut()[at..end], seq, stamp_ns);
    }

    /// Sends bytes `from..to` of block `seq` (stamped already) with one `sendfile`; how
    /// many the kernel took. Errors other than a timeout say they came from `sendfile`.
    pub fn send(
        &mut self,
        sock: &impl AsFd,
        seq: u64,
        from: usize,
        to: usize,
    ) -> io::Result<usize> {
        let at = (self.start(seq) + from) as u64;
        match sys::sendfile(sock.as_fd(), self.file.as_fd(), at, to - from) {
            Ok(n) => {
                if n > 0 {
                    self.calls += 1;
                }
                Ok(n)
            }
            Err(e) if super::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => Err(step("sendfile", e)),
        }
    }
}

/// An error of one step of `-Z sendfile`, with the way around it.
fn step(what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("-Z sendfile: {what}: {e} (--zerocopy=msg sends with MSG_ZEROCOPY instead)"),
    )
}

/// This host's socket buffer limits, bytes (absent when unreadable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// `net.ipv4.tcp_wmem`'s and `tcp_rmem`'s maximum (autotuning's ceiling).
    pub tcp_wmem_max: Option<u64>,
    pub tcp_rmem_max: Option<u64>,
    /// `net.core.rmem_max` (the ceiling of a receive buffer set with `-w`, before doubling).
    pub rmem_max: Option<u64>,
}

impl HostLimits {
    pub fn read() -> HostLimits {
        let third = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
                .ok()?
                .split_whitespace()
                .nth(2)?
                .parse()
                .ok()
        };
        HostLimits {
            tcp_wmem_max: third("tcp_wmem"),
            tcp_rmem_max: third("tcp_rmem"),
            rmem_max: crate::os::net::read_sysctl("net.core.rmem_max"),
        }
    }
}

/// The regions of a ring of `block`-byte blocks spanning `bytes`, within the memory a
/// stream may touch ([`MAX_TOUCHED_BYTES`]).
fn regions_for(block: u64, bytes: u64) -> io::Result<u64> {
    let regions = bytes.div_ceil(block.max(1));
    let touched = regions.saturating_mul(block.min(PAGE));
    if touched > MAX_TOUCHED_BYTES {
        return Err(io::Error::other(format!(
            "its ring of {regions} blocks (spanning {} MiB, what the kernel may still \
             reference, twice) would touch {} MiB of memory, over {} MiB a stream: use a \
             larger -l",
            bytes >> 20,
            touched >> 20,
            MAX_TOUCHED_BYTES >> 20
        )));
    }
    Ok(regions)
}

/// Bytes the ring spans: twice what may still reference its pages (the sender's queue and,
/// on one host, the receiver's; see the module's notes), two blocks more for the block
/// being written, within [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`]. Unreadable limits count as
/// the kernel's defaults (4 MiB and 6 MiB).
pub fn ring_bytes(block: u64, sndbuf: u64, host: &HostLimits) -> u64 {
    let send_queue = sndbuf.max(host.tcp_wmem_max.unwrap_or(4 << 20));
    let receive_queue = host
        .tcp_rmem_max
        .unwrap_or(6 << 20)
        .max(2 * host.rmem_max.unwrap_or(0))
        .max(sndbuf);
    (2 * (send_queue + receive_queue) + 2 * block).clamp(MIN_RING_BYTES, MAX_RING_BYTES)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;

    use super::*;

    /// Small blocks touch a page each (every page, under 4 KiB): a tuned host's ring is
    /// refused with what to do, not left to take the memory.
    #[test]
    fn a_ring_that_would_touch_too_much_memory_is_refused() {
        assert_eq!(regions_for(64 << 10, 72 << 20).unwrap(), 1152);
        assert_eq!(regions_for(4 << 10, 72 << 20).unwrap(), 18432);
        let e = regions_for(4 << 10, 512 << 20).unwrap_err().to_string();
        assert!(
            e.contains("would touch 512 MiB") && e.ends_with("use a larger -l"),
            "{e}"
        );
        assert!(
            regions_for(64 << 10, 512 << 20).is_ok(),
            "32 MiB of header pages"
        );
    }
    use crate::choices::ZeroCopy;
    use crate::data::stream::Copying;
    use crate::data::stream::echo::HeaderEcho;
    use crate::data::stream::sender::tests::copy_run;

    #[test]
    fn the_ring_spans_twice_both_queues() {
        let host = HostLimits {
            tcp_wmem_max: Some(4 << 20),
            tcp_rmem_max: Some(32 << 20),
            rmem_max: Some(4 << 20),
        };
        let k = 1u64 << 10;
        // Autotuning: the sysctls' ceilings.
        assert_eq!(ring_bytes(64 * k, 16 * k, &host), 2 * (36 << 20) + 128 * k);
        // -w 64M (with --force-window: a grant above every sysctl) on both ends.
        assert_eq!(
            ring_bytes(64 * k, 128 << 20, &host),
            2 * (256 << 20) + 128 * k
        );
        // A large rmem_max with -w counts twice (the kernel doubles the request).
        let wide = HostLimits {
            rmem_max: Some(64 << 20),
            ..host
        };
        assert_eq!(
            ring_bytes(k, 0, &wide),
            2 * ((4 << 20) + (128 << 20)) + 2 * k
        );
        // Unreadable limits: the kernel's defaults; and the floor and the ceiling.
        assert_eq!(
            ring_bytes(64 * k, 0, &HostLimits::default()),
            2 * (10 << 20) + 128 * k
        );
        assert_eq!(
            ring_bytes(
                64,
                0,
                &HostLimits {
                    tcp_wmem_max: Some(0),
                    tcp_rmem_max: Some(0),
                    rmem_max: None
                }
            ),
            MIN_RING_BYTES
        );
        assert_eq!(ring_bytes(64 << 20, 1 << 40, &host), MAX_RING_BYTES);
    }

    /// `-Z` (sendfile): every byte the kernel took arrives (the counts reconcile to the
    /// byte), each write is one `sendfile`, and block RTT works: the headers stamped in the
    /// ring arrive as their blocks' (the receiver checks each one's sequence, and fails the
    /// run on one that is not) and come back.
    #[test]
    fn sendfile_sends_reconcile_to_the_byte_and_echo_their_headers() {
        let copy = Copying {
            zerocopy: Some(ZeroCopy::Sendfile),
            ..Copying::default()
        };
        for block in [64 << 10, 1 << 20] {
            let (sent, got, rtts) = copy_run(copy, block);
            eprintln!(
                "-Z sendfile -l {block}: {} bytes in {} sendfile calls, {rtts} block RTTs",
                sent.bytes, sent.zerocopy_sends
            );
            assert!(sent.bytes > 0);
            assert_eq!(sent.bytes, got.bytes, "-l {block}");
            assert_eq!(sent.zerocopy_sends, sent.writes, "-l {block}");
            assert_eq!(sent.zerocopy_copied, 0);
            assert!(rtts > 0, "-l {block}: no echoed header came back");
        }
    }

    /// Why the ring: a region rewritten while the receiver has not read it changes what the
    /// receiver gets (loopback hands it the very pages), and the receiver's header check
    /// sees it. Two regions, three one-page blocks (well inside the first window and send
    /// buffer), nothing read until all were sent.
    #[test]
    fn a_region_rewritten_in_flight_changes_the_data_and_the_receiver_sees_it() {
        let block = 4096;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut rx, _) = listener.accept().unwrap();
        let mut ring = SendfileRing::with_regions(block, 2).unwrap();
        assert_eq!(ring.regions(), 2);
        for seq in 0..3 {
            ring.stamp(seq, 1000 + seq);
            let mut from = 0;
            while from < block {
                from += ring.send(&tx, seq, from, block).unwrap();
            }
        }
        drop(tx);
        let mut data = Vec::new();
        rx.read_to_end(&mut data).unwrap();
        assert_eq!(data.len(), 3 * block);
        let seq_at =
            |b: usize| u64::from_le_bytes(data[b * block..b * block + 8].try_into().unwrap());
        assert_eq!(seq_at(0), 2, "block 0's page was sent by reference");
        assert_eq!((seq_at(1), seq_at(2)), (1, 2));
        let mut check = HeaderEcho::new(block);
        check.feed(&data[..block]);
        assert_eq!(check.mismatch(), Some((0, 2)));
    }
}
