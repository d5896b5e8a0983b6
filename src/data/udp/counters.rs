//! A UDP receiver's accounting, per datagram: sequences (received, out of order,
//! duplicates, and from the highest sequence the datagrams lost) over a bounded window,
//! and RFC 3550 interarrival jitter. Memory is fixed: [`WINDOW`] sequences behind the
//! highest are remembered one bit each; an arrival older than that cannot be told from a
//! duplicate and is counted as a late arrival (received, out of order, and in
//! `too_late`). Used by one receiving stream thread; no I/O, no clock.

use serde::{Deserialize, Serialize};

use super::wire::Format;
use crate::data::stream::UdpSnapshot;

/// Sequences remembered behind the highest one.
pub const WINDOW: u64 = 1 << 16;

/// What a sequence number was, on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next one, or beyond it (`skipped` sequences not yet seen in between).
    New { skipped: u64 },
    /// Below the highest, not seen before: it fills a gap.
    OutOfOrder,
    /// Seen before.
    Duplicate,
    /// Older than the window: counted as a late arrival.
    TooLate,
}

/// The bitmap of the last [`WINDOW`] sequences.
#[derive(Debug, Clone)]
pub struct SeqWindow {
    bits: Vec<u64>,
    /// One past the highest sequence seen (0: none yet).
    highest_plus_one: u64,
}

impl Default for SeqWindow {
    fn default() -> Self {
        SeqWindow {
            bits: vec![0; (WINDOW / 64) as usize],
            highest_plus_one: 0,
        }
    }
}

impl SeqWindow {
    pub fn highest_plus_one(&self) -> u64 {
        self.highest_plus_one
    }

    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn is_set(&self, seq: u64) -> bool {
        let (w, b) = Self::slot(seq);
        self.bits.get(w).is_some_and(|v| v & b != 0)
    }

    fn set(&mut self, seq: u64, on: bool) {
        let (w, b) = Self::slot(seq);
        if let Some(v) = self.bits.get_mut(w) {
            if on {
                *v |= b;
            } else {
                *v &= !b;
            }
        }
    }

    /// Takes one arrival.
    pub fn accept(&mut self, seq: u64) -> Arrival {
        let h = self.highest_plus_one;
        if seq >= h {
            let skipped = seq - h;
            if skipped >= WINDOW {
                self.bits.iter_mut().for_each(|v| *v = 0);
            } else {
                // Sequences h..seq enter the window unseen; their slots held old ones.
                for s in h..seq {
                    self.set(s, false);
                }
            }
            self.set(seq, true);
            self.highest_plus_one = seq.saturating_add(1);
            return Arrival::New { skipped };
        }
        if h - seq > WINDOW {
            return Arrival::TooLate;
        }
        if self.is_set(seq) {
            return Arrival::Duplicate;
        }
        self.set(seq, true);
        Arrival::OutOfOrder
    }
}

/// RFC 3550 §6.4.1 interarrival jitter: J += (|D| − J) / 16, where D is the change in
/// transit time (arrival − send) between consecutive datagrams. Datagrams sent in one
/// batch share a send stamp and datagrams taken in one receive call share an arrival
/// stamp: between two such, D is 0 by construction, not by measurement, and would pull J
/// towards 0 (review: `-b 500M` reported 0.000 ms). Only a datagram with a new send stamp
/// and a new arrival stamp is a sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jitter {
    last_transit_ns: Option<i128>,
    last_stamps: Option<(u64, u64)>,
    jitter_ns: f64,
}

impl Jitter {
    pub fn arrive(&mut self, send_ns: u64, recv_ns: u64) {
        if let Some((send, recv)) = self.last_stamps
            && (send == send_ns || recv == recv_ns)
        {
            return;
        }
        self.last_stamps = Some((send_ns, recv_ns));
        let transit = i128::from(recv_ns) - i128::from(send_ns);
        if let Some(last) = self.last_transit_ns {
            let d = (transit - last).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit_ns = Some(transit);
    }

    pub fn us(&self) -> f64 {
        self.jitter_ns / 1000.0
    }
}

/// A UDP receiver's counts (cumulative). `lost()` = sequences the highest one says were
/// sent, less those received.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpCounters {
    pub packets: u64,
    pub bytes: u64,
    pub highest_seq_plus_one: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Arrivals older than the window (counted in `packets` and `out_of_order` too).
    pub too_late: u64,
    pub jitter_us: f64,
    /// The socket's receive-queue drops (`SO_RXQ_OVFL`), as of the last datagram.
    pub rxq_drops: u64,
    /// Datagrams that were not this stream's (too short, no magic, another stream id, or
    /// truncated): not counted anywhere else.
    pub malformed: u64,
}

impl UdpCounters {
    /// Datagrams lost (never below zero); the report reads them from snapshots.
    #[cfg(test)]
    pub fn lost(&self) -> u64 {
        self.highest_seq_plus_one.saturating_sub(self.packets)
    }

    /// The counts as a snapshot stamped `t_ns`.
    pub fn snapshot(&self, t_ns: u64) -> UdpSnapshot {
        UdpSnapshot {
            t_ns,
            packets: self.packets,
            bytes: self.bytes,
            highest_seq_plus_one: self.highest_seq_plus_one,
            out_of_order: self.out_of_order,
            duplicates: self.duplicates,
            jitter_us: self.jitter_us,
            rxq_drops: self.rxq_drops,
        }
    }
}

/// Everything one receiving stream keeps.
#[derive(Debug, Clone, Default)]
pub struct Accounting {
    stream: u16,
    wire: Format,
    window: SeqWindow,
    jitter: Jitter,
    pub counters: UdpCounters,
}

impl Accounting {
    pub fn new(stream: u16) -> Accounting {
        Accounting {
            stream,
            ..Accounting::default()
        }
    }

    /// The same, for datagrams of `wire`'s format.
    pub fn reading(self, wire: Format) -> Accounting {
        Accounting { wire, ..self }
    }

    /// Takes one datagram's payload, arrived at `recv_ns`; returns its bytes when it was
    /// counted as received (0 for a duplicate or a foreign datagram).
    pub fn datagram(&mut self, payload: &[u8], recv_ns: u64) -> u64 {
        let c = &mut self.counters;
        let next = self.window.highest_plus_one();
        let Some(h) = self.wire.read(payload, self.stream, next) else {
            c.malformed += 1;
            return 0;
        };
        match self.window.accept(h.seq) {
            Arrival::Duplicate => {
                c.duplicates += 1;
                return 0;
            }
            Arrival::New { .. } => {}
            Arrival::OutOfOrder => c.out_of_order += 1,
            Arrival::TooLate => {
                c.out_of_order += 1;
                c.too_late += 1;
            }
        }
        self.jitter.arrive(h.send_ns, recv_ns);
        let len = payload.len() as u64;
        c.packets += 1;
        c.bytes += len;
        c.highest_seq_plus_one = self.window.highest_plus_one();
        c.jitter_us = self.jitter.us();
        len
    }

    /// Notes the socket's cumulative receive-queue drop count.
    pub fn rxq_drops(&mut self, count: u32) {
        self.counters.rxq_drops = self.counters.rxq_drops.max(u64::from(count));
    }

    /// Counts a datagram cut short by its buffer (not this stream's as far as we know).
    pub fn truncated(&mut self) {
        self.counters.malformed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::udp::wire::Header;

    fn dgram(stream: u16, seq: u64, send_ns: u64) -> Vec<u8> {
        let mut b = vec![0u8; 100];
        Header {
            stream,
            seq,
            send_ns,
        }
        .write(&mut b);
        b
    }

    fn run(seqs: &[u64]) -> UdpCounters {
        let mut a = Accounting::new(3);
        for &s in seqs {
            a.datagram(&dgram(3, s, 0), 0);
        }
        a.counters
    }

    #[test]
    fn in_order_arrivals_lose_nothing() {
        let c = run(&[0, 1, 2, 3]);
        assert_eq!(
            (c.packets, c.bytes, c.lost(), c.out_of_order, c.duplicates),
            (4, 400, 0, 0, 0)
        );
    }

    #[test]
    fn a_gap_is_lost_until_its_datagrams_arrive_late() {
        let c = run(&[0, 1, 4, 5]);
        assert_eq!(
            (c.highest_seq_plus_one, c.lost(), c.out_of_order),
            (6, 2, 0)
        );
        let c = run(&[0, 1, 4, 5, 3, 2]);
        assert_eq!((c.packets, c.lost(), c.out_of_order), (6, 0, 2));
    }

    #[test]
    fn duplicates_are_counted_once_and_not_as_received() {
        let c = run(&[0, 1, 1, 2, 0, 2]);
        assert_eq!((c.packets, c.duplicates, c.lost(), c.bytes), (3, 3, 0, 300));
        // A duplicate of a datagram that arrived out of order is still a duplicate.
        let c = run(&[0, 2, 1, 1]);
        assert_eq!((c.packets, c.duplicates, c.out_of_order), (3, 1, 1));
    }

    #[test]
    fn a_lost_tail_counts_only_once_a_later_sequence_shows_it() {
        // The receiver cannot know about datagrams after the highest it saw: the sender's
        // count (on the control connection) tells the rest.
        let c = run(&[0, 1, 2]);
        assert_eq!(c.lost(), 0);
    }

    #[test]
    fn the_window_wraps_without_forgetting_recent_sequences() {
        let mut w = SeqWindow::default();
        // Walk well past several window lengths, skipping every 1000th.
        for s in 0..(3 * WINDOW + 123) {
            if s % 1000 != 7 {
                assert_eq!(
                    w.accept(s),
                    Arrival::New {
                        skipped: u64::from(s % 1000 == 8)
                    }
                );
            }
        }
        let h = w.highest_plus_one();
        // A recent one seen before: duplicate; a recent skipped one: out of order.
        assert_eq!(w.accept(h - 2), Arrival::Duplicate);
        let skipped = (h - WINDOW / 2) / 1000 * 1000 + 7;
        assert_eq!(w.accept(skipped), Arrival::OutOfOrder);
        assert_eq!(w.accept(skipped), Arrival::Duplicate);
        // Older than the window: no memory of it.
        assert_eq!(w.accept(h - WINDOW - 1), Arrival::TooLate);
        assert_eq!(
            w.accept(h - WINDOW),
            Arrival::Duplicate,
            "the window's oldest"
        );
    }

    #[test]
    fn a_jump_beyond_the_window_clears_it() {
        let mut w = SeqWindow::default();
        for s in 0..10 {
            w.accept(s);
        }
        assert_eq!(
            w.accept(10 + 2 * WINDOW),
            Arrival::New {
                skipped: 2 * WINDOW
            }
        );
        // Sequence 10 + WINDOW shares a slot with 10: it must read as unseen.
        assert_eq!(w.accept(10 + WINDOW + 5), Arrival::OutOfOrder);
        assert_eq!(w.accept(9), Arrival::TooLate);
        // A garbage sequence at the very top does not overflow.
        assert_eq!(
            w.accept(u64::MAX),
            Arrival::New {
                skipped: u64::MAX - (11 + 2 * WINDOW)
            }
        );
        assert_eq!(w.highest_plus_one(), u64::MAX);
    }

    #[test]
    fn foreign_and_short_datagrams_are_malformed_not_received() {
        let mut a = Accounting::new(1);
        assert_eq!(a.datagram(&dgram(2, 0, 0), 0), 0);
        assert_eq!(a.datagram(&[1, 2, 3], 0), 0);
        assert_eq!(a.datagram(&dgram(1, 0, 0), 0), 100);
        assert_eq!((a.counters.malformed, a.counters.packets), (2, 1));
    }

    #[test]
    fn iperf3_datagrams_are_counted_by_their_own_sequence() {
        let wire = Format::Iperf3 { seq64: false };
        let mut a = Accounting::new(1).reading(wire);
        let d = |seq: u32| {
            let mut b = vec![0u8; 100];
            b[8..12].copy_from_slice(&seq.to_be_bytes());
            b
        };
        for seq in [1, 2, 4, 3, 3] {
            a.datagram(&d(seq), 0);
        }
        // iperf3 numbers from 1 and names no stream; 0 is not one of its sequences.
        assert_eq!(a.datagram(&d(0), 0), 0);
        let c = a.counters;
        assert_eq!(
            (
                c.packets,
                c.highest_seq_plus_one,
                c.lost(),
                c.out_of_order,
                c.duplicates
            ),
            (4, 4, 0, 1, 1)
        );
        assert_eq!(c.malformed, 1);
        // A pinperf datagram is not an iperf3 stream's, nor the other way round.
        let mut p = Accounting::new(1);
        assert_eq!(p.datagram(&d(1), 0), 0);
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        let mut j = Jitter::default();
        j.arrive(0, 1_000_000);
        assert_eq!(j.us(), 0.0, "one datagram has no jitter");
        // Transit 1 ms, then 2.6 ms: D = 1.6 ms, J = 1.6 / 16 = 0.1 ms.
        j.arrive(10_000_000, 12_600_000);
        assert!((j.us() - 100.0).abs() < 1e-9, "{}", j.us());
        // Constant transit pulls J down by 1/16 of itself.
        j.arrive(20_000_000, 22_600_000);
        assert!((j.us() - 93.75).abs() < 1e-9, "{}", j.us());
        // The rest of a batch (the same send or arrival stamp) is not a sample.
        j.arrive(20_000_000, 23_600_000);
        j.arrive(21_000_000, 22_600_000);
        assert!((j.us() - 93.75).abs() < 1e-9, "{}", j.us());
        // Garbage send times never overflow.
        j.arrive(u64::MAX, 0);
        assert!(j.us().is_finite());
    }
}
