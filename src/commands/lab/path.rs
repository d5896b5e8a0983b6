//! One direction of the emulated path, as arithmetic on nanosecond timestamps: a drop-tail
//! queue in front of a link that serialises at `rate`, then a fixed one-way delay. No
//! clock and no I/O here, so the model is tested exactly; the relay feeds it arrival times.

/// What happens to a packet offered to the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered at this time (ns, same clock as the arrival).
    Deliver(u64),
    /// Dropped: the queue in front of the link was full.
    QueueFull,
    /// Dropped by the random-loss setting.
    Lost,
}

/// `--blackout-from`: from a moment on, the path drops every packet (or every UDP one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blackout {
    /// Since the path came up.
    pub from_ns: u64,
    pub udp_only: bool,
}

/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

impl Blackout {
    /// True when `packet` (an IP packet, as read from the TUN device), arriving
    /// `since_up_ns` after the path came up, is dropped.
    pub fn drops(&self, since_up_ns: u64, packet: &[u8]) -> bool {
        if since_up_ns < self.from_ns {
            return false;
        }
        if !self.udp_only {
            return true;
        }
        // IPv4: protocol at byte 9; IPv6: next header at byte 6 (no extension headers
        // on this path).
        let proto = match packet.first().map(|b| b >> 4) {
            Some(4) => packet.get(9),
            Some(6) => packet.get(6),
            _ => None,
        };
        proto == Some(&IPPROTO_UDP)
    }
}

/// Counters for one direction, reported at the end of a lab run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    pub packets: u64,
    pub bytes: u64,
    pub queue_drops: u64,
    pub loss_drops: u64,
    /// Largest backlog seen in front of the link, bytes (including the arriving packet).
    pub peak_queue_bytes: u64,
}

/// One direction: rate, delay, queue limit, optional random loss.
#[derive(Debug)]
pub struct Path {
    rate_bps: u64,
    delay_ns: u64,
    queue_limit: u64,
    /// Loss probability scaled to u64::MAX; 0 = none.
    loss_threshold: u64,
    rng: u64,
    /// When the link finishes serialising everything accepted so far.
    link_free_at: u64,
    pub stats: PathStats,
}

impl Path {
    /// `loss` is a probability in [0, 1]; `seed` makes the loss pattern repeatable.
    pub fn new(rate_bps: u64, delay_ns: u64, queue_limit: u64, loss: f64, seed: u64) -> Path {
        Path {
            rate_bps: rate_bps.max(1),
            delay_ns,
            queue_limit,
            loss_threshold: (loss.clamp(0.0, 1.0) * u64::MAX as f64) as u64,
            rng: seed | 1,
            link_free_at: 0,
            stats: PathStats::default(),
        }
    }

    /// Nanoseconds the link needs for `len` bytes.
    pub fn serialisation_ns(&self, len: usize) -> u64 {
        (len as u128 * 8 * 1_000_000_000 / self.rate_bps as u128) as u64
    }

    /// Bytes waiting in front of the link at `now_ns`.
    pub fn backlog(&self, now_ns: u64) -> u64 {
        let pending_ns = self.link_free_at.saturating_sub(now_ns);
        (pending_ns as u128 * self.rate_bps as u128 / 8 / 1_000_000_000) as u64
    }

    /// Offers a packet of `len` bytes arriving at `now_ns`.
    pub fn offer(&mut self, now_ns: u64, len: usize) -> Verdict {
        if self.loss_threshold > 0 && self.next_random() < self.loss_threshold {
            self.stats.loss_drops += 1;
            return Verdict::Lost;
        }
        let queued = self.backlog(now_ns) + len as u64;
        if queued > self.queue_limit {
            self.stats.queue_drops += 1;
            return Verdict::QueueFull;
        }
        self.stats.peak_queue_bytes = self.stats.peak_queue_bytes.max(queued);
        let start = self.link_free_at.max(now_ns);
        self.link_free_at = start + self.serialisation_ns(len);
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        Verdict::Deliver(self.link_free_at + self.delay_ns)
    }

    /// xorshift64: good enough for Bernoulli loss, no crate for five lines.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn an_idle_path_delivers_after_serialisation_plus_delay() {
        // 1 Gbit/s: 9000 bytes take 72 us; 30 ms one way.
        let mut p = Path::new(1_000_000_000, 30 * MS, 1 << 20, 0.0, 1);
        assert_eq!(
            p.offer(5 * MS, 9000),
            Verdict::Deliver(5 * MS + 72_000 + 30 * MS)
        );
        // Long after, the link is idle again: same cost.
        assert_eq!(
            p.offer(100 * MS, 9000),
            Verdict::Deliver(100 * MS + 72_000 + 30 * MS)
        );
    }

    #[test]
    fn back_to_back_packets_leave_at_the_link_rate() {
        let mut p = Path::new(1_000_000_000, 0, 1 << 20, 0.0, 1);
        let times: Vec<u64> = (0..4)
            .map(|_| match p.offer(0, 1250) {
                Verdict::Deliver(t) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            times,
            [10_000, 20_000, 30_000, 40_000],
            "1250 B = 10 us at 1 Gbit/s"
        );
        assert_eq!(p.backlog(0), 5000);
        assert_eq!(p.backlog(25_000), 1875);
        assert_eq!(p.stats.peak_queue_bytes, 5000);
    }

    #[test]
    fn the_queue_drops_its_tail_when_full_and_accepts_again_once_drained() {
        // Room for exactly 3 packets of 1000 bytes.
        let mut p = Path::new(8_000_000, 0, 3000, 0.0, 1); // 1000 B = 1 ms
        for _ in 0..3 {
            assert!(matches!(p.offer(0, 1000), Verdict::Deliver(_)));
        }
        assert_eq!(p.offer(0, 1000), Verdict::QueueFull);
        assert_eq!(p.offer(0, 1), Verdict::QueueFull);
        // One packet's time later there is room for one more.
        assert_eq!(p.offer(MS, 1000), Verdict::Deliver(4 * MS));
        assert_eq!(p.stats.queue_drops, 2);
        assert_eq!(p.stats.packets, 4);
        assert_eq!(p.stats.bytes, 4000);
    }

    #[test]
    fn a_blackout_drops_everything_or_only_udp_from_its_moment_on() {
        let mut udp4 = [0u8; 28];
        udp4[0] = 0x45;
        udp4[9] = 17;
        let mut tcp4 = udp4;
        tcp4[9] = 6;
        let mut udp6 = [0u8; 48];
        udp6[0] = 0x60;
        udp6[6] = 17;
        let all = Blackout {
            from_ns: 2_000 * MS,
            udp_only: false,
        };
        assert!(!all.drops(2_000 * MS - 1, &udp4));
        assert!(all.drops(2_000 * MS, &tcp4));
        assert!(all.drops(9_000 * MS, &[]), "even what is not IP");
        let udp = Blackout {
            udp_only: true,
            ..all
        };
        assert!(udp.drops(2_000 * MS, &udp4) && udp.drops(2_000 * MS, &udp6));
        assert!(
            !udp.drops(2_000 * MS, &tcp4),
            "the control connection lives"
        );
        assert!(!udp.drops(1_000 * MS, &udp4));
        assert!(!udp.drops(3_000 * MS, &[0x45]), "a runt is not UDP");
    }

    #[test]
    fn random_loss_drops_about_the_asked_share() {
        let mut p = Path::new(u64::MAX, 0, u64::MAX, 0.01, 42);
        for i in 0..100_000 {
            p.offer(i, 100);
        }
        let lost = p.stats.loss_drops;
        assert!((800..1200).contains(&lost), "1 % of 100000 lost {lost}");
        assert_eq!(p.stats.packets + lost, 100_000);
        let mut none = Path::new(u64::MAX, 0, u64::MAX, 0.0, 42);
        for i in 0..10_000 {
            none.offer(i, 100);
        }
        assert_eq!(none.stats.loss_drops, 0);
    }
}
