//! The datagram's header: what each UDP datagram carries before its filler. Big-endian:
//!
//! ```text
//! 0      4        6       8                16               24
//! | magic | stream | flags | sequence (u64) | send time (u64) | filler ...
//! ```
//!
//! The send time is nanoseconds since the sender's test start (its own clock: jitter uses
//! only differences, so the two ends' origins need not agree). No I/O here.
//!
//! [`Format::Iperf3`] is iperf3's datagram header instead (facts from esnet/iperf's
//! `iperf_udp.c`), for streams to and from iperf3 peers; the same sender and receiver
//! threads write and read it:
//!
//! ```text
//! 0           4            8
//! | sec (u32) | usec (u32) | sequence (u32, or u64 with udp_counters_64bit) | filler ...
//! ```
//!
//! Big-endian; the sequence starts at 1; there is no stream id (each stream has its own
//! connected socket pair). A 32-bit sequence is widened by taking the value nearest the
//! highest one seen so far, so a long test's wrap is not a jump of four billion.

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

/// Which header a stream's datagrams carry: pinperf's own, or iperf3's (a test with an
/// iperf3 peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Pinperf,
    /// iperf3's: 32-bit sequences, or 64-bit ones when the test's parameters carry
    /// `udp_counters_64bit`.
    Iperf3 { seq64: bool },
}

impl Format {
    /// Bytes of this format's header.
    pub fn header_bytes(self) -> usize {
        match self {
            Format::Pinperf => HEADER_BYTES,
            Format::Iperf3 { seq64: false } => 12,
            Format::Iperf3 { seq64: true } => 16,
        }
    }

    /// Writes `h` at the start of `buf` in this format (iperf3's: its send time as
    /// seconds and microseconds, its sequence counted from 1, no stream id); false
    /// (nothing written) when `buf` is shorter than the header.
    pub fn write(self, h: &Header, buf: &mut [u8]) -> bool {
        match self {
            Format::Pinperf => h.write(buf),
            Format::Iperf3 { seq64 } => {
                let Some(b) = buf.get_mut(..self.header_bytes()) else {
                    return false;
                };
                let sec = (h.send_ns / 1_000_000_000) as u32;
                let usec = (h.send_ns % 1_000_000_000 / 1000) as u32;
                b[0..4].copy_from_slice(&sec.to_be_bytes());
                b[4..8].copy_from_slice(&usec.to_be_bytes());
                let seq = h.seq.wrapping_add(1);
                match seq64 {
                    true => b[8..16].copy_from_slice(&seq.to_be_bytes()),
                    false => b[8..12].copy_from_slice(&(seq as u32).to_be_bytes()),
                }
                true
            }
        }
    }

    /// Reads a datagram of `stream` in this format; `None` for one too short, without
    /// pinperf's magic, of another stream, or (iperf3's) numbered 0. `next` is one past
    /// the highest sequence seen so far (0 for none): a 32-bit sequence is taken as the
    /// value nearest it.
    pub fn read(self, buf: &[u8], stream: u16, next: u64) -> Option<Header> {
        match self {
            Format::Pinperf => Header::read(buf).filter(|h| h.stream == stream),
            Format::Iperf3 { seq64 } => {
                let h = buf.get(..self.header_bytes())?;
                let sec = u64::from(u32::from_be_bytes(field(h, 0)?));
                let usec = u64::from(u32::from_be_bytes(field(h, 4)?));
                let seq = match seq64 {
                    true => u64::from_be_bytes(field(h, 8)?),
                    false => widen(u32::from_be_bytes(field(h, 8)?), next),
                };
                Some(Header {
                    stream,
                    seq: seq.checked_sub(1)?,
                    send_ns: sec * 1_000_000_000 + usec.min(999_999) * 1000,
                })
            }
        }
    }
}

/// The 64-bit value whose low 32 bits are `low` nearest to `near` (iperf3 numbering:
/// `near` is one past the highest pinperf sequence, so the highest iperf3 sequence).
fn widen(low: u32, near: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    let base = near & !(SPAN - 1);
    let candidates = [base.checked_sub(SPAN), Some(base), base.checked_add(SPAN)];
    candidates
        .into_iter()
        .flatten()
        .map(|b| b | u64::from(low))
        .min_by_key(|v| v.abs_diff(near))
        .unwrap_or(u64::from(low))
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

    #[test]
    fn iperf3_s_header_is_seconds_microseconds_and_a_sequence_from_one() {
        let h = Header {
            stream: 3,
            seq: 0,
            send_ns: 5_000_123_456,
        };
        let mut buf = [0x5au8; 32];
        let f = Format::Iperf3 { seq64: false };
        assert!(f.write(&h, &mut buf));
        assert_eq!(buf[..12], [0, 0, 0, 5, 0, 0, 0, 123, 0, 0, 0, 1]);
        assert_eq!(buf[12], 0x5a, "the filler is left alone");
        let back = f.read(&buf, 3, 0).unwrap();
        assert_eq!((back.seq, back.send_ns), (0, 5_000_123_000));
        let f64 = Format::Iperf3 { seq64: true };
        let h = Header { seq: 1 << 40, ..h };
        assert!(f64.write(&h, &mut buf));
        assert_eq!(buf[8..16], ((1u64 << 40) + 1).to_be_bytes());
        assert_eq!(f64.read(&buf, 3, 0).map(|h| h.seq), Some(1 << 40));
        // Too short, and iperf3's sequence 0 (which it never sends): not a datagram.
        assert_eq!(f64.read(&buf[..15], 3, 0), None);
        assert_eq!(f.read(&[0u8; 12], 3, 0), None);
        assert!(!f.write(&h, &mut [0u8; 11]));
        // Garbage microseconds cannot overflow the send time.
        assert!(f.read(&[255u8; 12], 3, 0).is_some());
    }

    #[test]
    fn a_32_bit_sequence_is_widened_near_the_highest_seen() {
        assert_eq!(widen(5, 0), 5);
        assert_eq!(widen(u32::MAX, 1 << 32), u64::from(u32::MAX));
        assert_eq!(widen(2, (1 << 32) - 3), (1 << 32) + 2, "past the wrap");
        assert_eq!(
            widen(u32::MAX - 1, (1 << 32) + 5),
            (1 << 32) - 2,
            "late, before it"
        );
        assert_eq!(widen(7, u64::MAX), u64::MAX - u64::from(u32::MAX) + 7);
    }
}
