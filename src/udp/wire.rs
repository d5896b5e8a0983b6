//! The datagram's header: what each UDP datagram carries before its filler. Big-endian:
//!
//! ```text
//! 0      4        6       8                16               24
//! | magic | stream | flags | sequence (u64) | send time (u64) | filler ...
//! ```
//!
//! The send time is nanoseconds since the sender's test start (its own clock: jitter uses
//! only differences, so the two ends' origins need not agree). No I/O here.

/// `ppu1`: a pinperf UDP datagram, version 1.
pub const MAGIC: u32 = 0x7070_7531;
/// Bytes of the header; the smallest datagram.
pub const HEADER_BYTES: usize = 24;

/// What a datagram says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub stream: u16,
    pub seq: u64,
    pub send_ns: u64,
}

impl Header {
    /// Writes the header at the start of `buf`; false (nothing written) when it is shorter.
    pub fn write(&self, buf: &mut [u8]) -> bool {
        let Some(h) = buf.get_mut(..HEADER_BYTES) else {
            return false;
        };
        h[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        h[4..6].copy_from_slice(&self.stream.to_be_bytes());
        h[6..8].copy_from_slice(&[0, 0]);
        h[8..16].copy_from_slice(&self.seq.to_be_bytes());
        h[16..24].copy_from_slice(&self.send_ns.to_be_bytes());
        true
    }

    /// Reads a header; `None` for anything shorter than one or without the magic.
    pub fn read(buf: &[u8]) -> Option<Header> {
        let h = buf.get(..HEADER_BYTES)?;
        if u32::from_be_bytes(field(h, 0)?) != MAGIC {
            return None;
        }
        Some(Header {
            stream: u16::from_be_bytes(field(h, 4)?),
            seq: u64::from_be_bytes(field(h, 8)?),
            send_ns: u64::from_be_bytes(field(h, 16)?),
        })
    }
}

/// The `N` bytes at `at`, when `h` has them.
fn field<const N: usize>(h: &[u8], at: usize) -> Option<[u8; N]> {
    h.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_garbage_is_refused() {
        let h = Header {
            stream: 7,
            seq: u64::MAX - 1,
            send_ns: 123_456_789,
        };
        let mut buf = [0x5au8; 64];
        assert!(h.write(&mut buf));
        assert_eq!(Header::read(&buf), Some(h));
        assert_eq!(&buf[..4], b"ppu1");
        assert_eq!(buf[HEADER_BYTES], 0x5a, "the filler is left alone");
        assert!(!h.write(&mut [0u8; HEADER_BYTES - 1]));
        assert_eq!(Header::read(&buf[..HEADER_BYTES - 1]), None);
        assert_eq!(Header::read(&[0u8; 64]), None, "no magic");
        assert_eq!(Header::read(&[]), None);
    }
}
