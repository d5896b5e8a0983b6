//! Every deadline of a test, in one place, each with its reason. Once `-t` has passed,
//! a client waits as long as data keeps moving and gives up only after [`STALL`] without
//! progress, saying which end stopped answering; a server ends every test by its run time
//! plus [`drain`], so no client holds it longer than what it asked for can explain.

use std::time::{Duration, Instant};

/// Each step of the control handshake (preamble, hello, parameters, accept, start): a peer on the far side of a slow path answers in
/// well under a second; ten leave room for DNS, SYN retries and a loaded host.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// A new control connection's whole handshake, preamble to valid parameters: a real
/// client needs a few round trips (four with authentication) and microseconds of work.
/// Two seconds, plus those round trips at the connection's RTT as the kernel measured it
/// at accept (each counted at most [`LONGEST_RTT`], so a peer that delays its ACKs
/// buys little). Until its handshake is complete a connection holds no test slot; past
/// this it is cut.
pub const ADMISSION_BASE: Duration = Duration::from_secs(2);

/// The longest round trip the deadlines here leave room for: [`admission`] counts no
/// round trip as longer, the lab emulates none longer, and a client's default
/// `--connect-timeout` (5 s) is above it. A geostationary satellite hop is 0.6 s.
pub const LONGEST_RTT: Duration = Duration::from_secs(4);

/// The deadline of a new connection's handshake (see [`ADMISSION_BASE`]).
pub fn admission(rtt: Duration) -> Duration {
    ADMISSION_BASE + rtt.min(LONGEST_RTT) * 4
}

/// How long past a handshake's deadline the acceptor cuts it. The handshake's own reads
/// time out at the deadline and say what the peer did ("sent nothing on the control
/// connection in time"); the cut is for one stuck elsewhere (cut at the
/// deadline, identical silent peers were logged with either wording).
pub const HANDSHAKE_CUT_AFTER: Duration = Duration::from_millis(500);

/// Writing one control message: the peer's kernel takes small frames at once unless the
/// peer is frozen or gone.
pub const CONTROL_WRITE: Duration = Duration::from_secs(10);

/// No progress at all for this long means the other end stopped answering: no byte
/// acknowledged by a draining sender, no byte read by a receiver past `-t`, no message on
/// the control connection beyond the expected interval. Far above any RTT on Earth and
/// any TCP retransmission back-off that still ends in delivery within a test.
pub const STALL: Duration = Duration::from_secs(10);

/// How long past its run time a server lets a test's streams drain before it cuts the
/// test: what they may still hold queued (`queued` bytes, their sockets' buffers on both
/// ends) at the rate they ran (`rate_bps`, at least [`DRAIN_RATE_FLOOR`], so a stream that
/// trickles buys no more), plus [`DRAIN_BASE`] and four round trips for the last bytes'
/// way and the goodbye. A 1 GiB window at 100 Mbit/s is given its 86 s; a trickle after
/// `-t 1` on default buffers about 1.4 s.
pub fn drain(queued: u64, rate_bps: u64, rtt: Duration) -> Duration {
    let secs = queued as f64 * 8.0 / rate_bps.max(DRAIN_RATE_FLOOR) as f64;
    DRAIN_BASE + rtt.min(LONGEST_RTT) * 4 + Duration::from_secs_f64(secs.min(86_400.0))
}

/// The part of [`drain`] that is not queued data: a loaded host's scheduling delays.
pub const DRAIN_BASE: Duration = Duration::from_secs(1);

/// The slowest rate [`drain`] counts a test's queue to drain at: 10 Mbit/s.
pub const DRAIN_RATE_FLOOR: u64 = 10_000_000;

/// Past [`drain`], a test whose data connections still move at least this fast (bytes
/// read and acknowledged), and have delivered no more than their buffers could hold, is
/// given another [`DRAIN_STEP`]: a path slower than [`DRAIN_RATE_FLOOR`] drains its honest
/// queue; a trickle below 100 kbit/s, or a client that kept sending, is cut.
pub const DRAIN_MOVING: u64 = 100_000;
pub const DRAIN_STEP: Duration = Duration::from_secs(1);

/// How often an end looks at its control connection, its streams and the stop signals
/// while it waits: how soon it reacts to a failure, a peer's word or a Ctrl-C.
pub const POLL: Duration = Duration::from_millis(100);

/// How long the server waits for the client's goodbye after sending the totals, before
/// it takes the next client (a shell loop's next run may already be waiting).
pub const GOODBYE: Duration = Duration::from_secs(2);

/// How long a client that arrives while the previous test is saying goodbye, or while a
/// test's streams connect, waits for the slot instead of being told "busy".
pub const FINISHING: Duration = Duration::from_secs(3);

/// The longest a test's data and echo connections may take to arrive: the client opens
/// them one after another, each a round trip (SYN, SYN-ACK) and its hello, so a long path
/// (the lab's 4 s RTT, a satellite hop) adds two round trips per connection to
/// [`HANDSHAKE`]. `rtt` is the control connection's, as the kernel measured it.
pub fn streams_arrive(connections: usize, rtt: Duration) -> Duration {
    HANDSHAKE + rtt.saturating_mul(2 * u32::try_from(connections).unwrap_or(u32::MAX))
}

/// How long a server holding the test slot waits for the next of a test's connections:
/// [`STREAMS_BASE`] and two round trips after the last one arrived (or the test was
/// admitted), never past [`streams_arrive`] from the start. A peer that connects nothing
/// frees the slot in 3 s (it held it 10 s); a slow one that keeps connecting is not cut.
#[derive(Debug, Clone, Copy)]
pub struct StreamsArrive {
    last: Instant,
    /// The wait after each arrival, for messages too.
    pub step: Duration,
    end: Instant,
    /// The whole allowance, for messages.
    pub allowed: Duration,
}

impl StreamsArrive {
    pub fn new(connections: usize, rtt: Duration) -> StreamsArrive {
        let now = Instant::now();
        let allowed = streams_arrive(connections, rtt);
        StreamsArrive {
            last: now,
            step: STREAMS_BASE + rtt.saturating_mul(2),
            end: now + allowed,
            allowed,
        }
    }

    /// One more connection arrived.
    pub fn arrived(&mut self) {
        self.last = Instant::now();
    }

    pub fn deadline(&self) -> Instant {
        (self.last + self.step).min(self.end)
    }
}

/// The part of [`StreamsArrive`]'s step that is not round trips: a lost SYN is sent again
/// after 1 s and once more 2 s later.
pub const STREAMS_BASE: Duration = Duration::from_secs(3);

/// How long a UDP receiver listens past the senders' end: the last datagrams' way there
/// (twice the path's RTT, for the two ends' start offsets), at least 250 ms. Tail losses
/// are then counted as lost; nothing waits for them.
pub fn udp_settle(rtt: Duration) -> Duration {
    (rtt * 2).max(Duration::from_millis(250))
}

/// How long the server waits for a client's first bytes before it sends its preamble
/// first (pinperf clients before iperf3 support waited for it; iperf3 clients and current
/// pinperf clients speak at once).
pub const SNIFF: Duration = Duration::from_millis(300);

/// How long `--peer auto` (and `--peer pinperf`, to name the mistake) waits for a
/// server's preamble before taking the server for an iperf3 server: a pinperf server
/// answers within a round trip of ours, well inside [`SNIFF`] past it; 1 s, or four round
/// trips of the control connection when longer.
pub fn peer_silence(rtt: Duration) -> Duration {
    (rtt * 4).max(Duration::from_secs(1))
}

/// How long a stop signal lets the lab's client test stop and print before the lab tears
/// down and exits anyway, and a server's test stop, tell its client and log before the
/// server exits anyway. Stopping takes a [`POLL`], a stream wake-up and the
/// report, well under a second; a test still in its handshake is not waited for.
pub const SIGNAL_GRACE: Duration = Duration::from_secs(5);

/// A second stop signal within this of the first is the same stop, not "exit at once":
/// GNU `timeout` signals the process and then its process group, so two SIGTERMs come
/// microseconds apart; a person pressing Ctrl-C again at a stuck run takes longer.
pub const SIGNAL_REPEAT: Duration = Duration::from_secs(1);

/// How long a "busy" answer may take to write and its connection to drain: a refused
/// client must not hold a thread of the server.
pub const BUSY_ANSWER: Duration = Duration::from_secs(1);

/// How long an end whose stream read the peer's close or reset waits for the peer's word
/// on why: the peer speaks once it noticed ([`POLL`]) and stopped its own streams. An end
/// that failed on its own speaks at once, so two ends never wait on each other for long.
pub const PEER_WORD: Duration = Duration::from_millis(500);

/// How long a server's `control` thread waits for its acceptor to listen again on the
/// control port with an iperf3 test's window: the acceptor looks within a [`POLL`] of
/// being asked, even behind a backlog, so this is many of them on a loaded host.
pub const RELISTEN: Duration = Duration::from_secs(2);

/// The longest silence on the control connection a client accepts while the test runs:
/// rows come once per interval; one interval late plus [`STALL`] means the server stopped
/// answering.
pub fn row_wait(interval: Duration) -> Duration {
    interval + STALL
}

/// `--fq-rate`: how much unsent data a paced sender may keep in its socket
/// (`TCP_NOTSENT_LOWAT`), as time at the rate. What is still queued when `-t` ends drains
/// in about this long plus one burst ([`paced_burst_gap`]); without it the autotuned 4 MiB
/// at `--fq-rate 100k` took 5.5 minutes to drain after a 2 s test.
pub const PACED_QUEUE: Duration = Duration::from_millis(100);

/// `--fq-rate`: the longest a paced connection's bursts may come apart: half of
/// [`STALL`], after which a receiver that hears nothing takes the path as down.
pub const PACED_BURST_MAX: Duration = Duration::from_secs(STALL.as_secs() / 2);

/// The most the kernel puts in one packet it sends (`sk_gso_max_size` less
/// `MAX_TCP_HEADER`): 64 KiB less 320 bytes, unless BIG TCP raised the device's limit.
const GSO_MAX: u64 = 65_536 - 321;

/// `--fq-rate`: the bytes the kernel sends of a paced connection at once: one packet of
/// whole segments, as Linux (5.18+, `tcp_tso_autosize` and `tcp_xmit_size_goal`) sizes it:
/// 1/1024 s of the rate plus 64 KiB halved for every 512 µs of the connection's min RTT,
/// at most [`GSO_MAX`], in at least two segments, and at least one segment per packet.
/// Loopback's 64 KiB segments go one per packet: 0.5 s apart at 1 Mbit/s, 9 minutes at
/// 1 kbit/s. A small congestion window makes the packets smaller, so the gaps shorter.
pub fn paced_burst(rate_bps: u64, mss: u32, min_rtt: Duration) -> u64 {
    let mss = u64::from(mss.max(1));
    let shift = min_rtt.as_micros() >> 9;
    let lan = if shift < 32 { 65_536u64 >> shift } else { 0 };
    let autosize = (((rate_bps / 8) >> 10) + lan).min(65_536);
    let goal = ((autosize / mss).max(2) * mss).min(GSO_MAX);
    (goal / mss).max(1) * mss
}

/// `--fq-rate`: how far apart a paced connection's bursts ([`paced_burst`]) leave.
pub fn paced_burst_gap(rate_bps: u64, mss: u32, min_rtt: Duration) -> Duration {
    let bits = paced_burst(rate_bps, mss, min_rtt) * 8;
    Duration::from_secs_f64(bits as f64 / rate_bps.max(1) as f64)
}

/// Watches a counter that grows while the other end makes progress (bytes acknowledged,
/// bytes read); stalled when it has not grown for `limit`.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    limit: Duration,
    value: u64,
    since: Instant,
}

impl Progress {
    pub fn new(limit: Duration, value: u64, now: Instant) -> Progress {
        Progress {
            limit,
            value,
            since: now,
        }
    }

    /// Records the counter's value at `now`; true when it has not moved for `limit`.
    pub fn stalled(&mut self, value: u64, now: Instant) -> bool {
        if value != self.value {
            self.value = value;
            self.since = now;
        }
        now.saturating_duration_since(self.since) >= self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_resets_the_stall_clock() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let mut p = Progress::new(Duration::from_secs(1), 0, t0);
        assert!(!p.stalled(0, s(999)));
        assert!(!p.stalled(5, s(1500)), "moved: not stalled");
        assert!(!p.stalled(5, s(2400)));
        assert!(p.stalled(5, s(2500)), "a second without progress");
    }

    #[test]
    fn streams_on_a_long_path_get_two_round_trips_each() {
        assert_eq!(streams_arrive(4, Duration::ZERO), HANDSHAKE);
        assert_eq!(
            streams_arrive(2, Duration::from_secs(4)),
            HANDSHAKE + Duration::from_secs(16)
        );
    }

    /// The slot is held 3 s (and two round trips) past the last arrival, never past the
    /// whole allowance: silence frees it soon, a slow steady client is not cut.
    #[test]
    fn streams_get_three_seconds_after_the_last_one_within_the_whole() {
        let rtt = Duration::from_millis(100);
        let mut w = StreamsArrive::new(100, rtt);
        let step = STREAMS_BASE + rtt * 2;
        assert_eq!(w.deadline(), w.last + step);
        w.last += Duration::from_secs(20);
        assert_eq!(w.deadline(), w.last + step, "a later arrival moves it");
        w.last += Duration::from_secs(60);
        assert_eq!(w.deadline(), w.end, "never past the whole allowance");
        assert_eq!(w.allowed, HANDSHAKE + rtt * 200);
    }

    #[test]
    fn a_handshake_gets_two_seconds_and_four_capped_round_trips() {
        assert_eq!(admission(Duration::ZERO), Duration::from_secs(2));
        assert_eq!(
            admission(Duration::from_millis(60)),
            Duration::from_millis(2240)
        );
        assert_eq!(admission(Duration::from_secs(30)), Duration::from_secs(18));
    }

    /// The kernel's burst: one 64 KiB segment on loopback, 64 KiB of 1448 B segments on
    /// a LAN, two of them across a WAN; never more than one packet's 64 KiB.
    #[test]
    fn paced_bursts_are_the_kernels_size_at_the_rate() {
        let us = Duration::from_micros;
        let gap = |rate, mss, rtt| paced_burst_gap(rate, mss, rtt).as_secs_f64();
        assert_eq!(paced_burst(150_000, 65_483, us(10)), 65_483);
        // Measured on loopback (6.18, cubic and bbr): 65483 B every 3.49 s at 150k.
        assert!((gap(150_000, 65_483, us(10)) - 3.492).abs() < 1e-3);
        assert_eq!(paced_burst(1_000_000, 1448, us(100)), 45 * 1448);
        assert_eq!(
            paced_burst(1_000_000, 1448, Duration::from_millis(60)),
            2 * 1448
        );
        // 64 KiB halved for each 512 µs of min RTT: 32 KiB (22 segments) at 0.6 ms.
        assert_eq!(paced_burst(1_000_000, 1448, us(600)), 22 * 1448);
        // 1 Gbit/s: a millisecond of the rate would be 122 KiB; one packet holds 64 KiB.
        assert_eq!(paced_burst(1_000_000_000, 1448, us(10)), 45 * 1448);
        assert!((gap(1_000_000_000, 1448, us(10)) - 0.000521).abs() < 1e-5);
        assert!(paced_burst_gap(1000, 65_483, us(10)) > PACED_BURST_MAX);
        assert_eq!(PACED_BURST_MAX * 2, STALL);
    }

    /// The queue at the test's rate, never slower than the floor, and the fixed part.
    #[test]
    fn a_drain_is_the_queue_at_the_tests_rate() {
        let rtt = Duration::from_millis(10);
        let base = DRAIN_BASE + rtt * 4;
        assert_eq!(drain(0, 0, rtt), base);
        // 1 GiB at 100 Mbit/s: 85.9 s.
        let d = drain(1 << 30, 100_000_000, rtt) - base;
        assert!((d.as_secs_f64() - 85.899).abs() < 0.01, "{d:?}");
        // A trickle (9 bytes in 1 s) is counted at 10 Mbit/s: 1.25 MB take 1 s.
        assert_eq!(drain(1_250_000, 72, rtt), base + Duration::from_secs(1));
    }

    #[test]
    fn rows_may_be_one_interval_late_plus_the_stall_limit() {
        assert_eq!(row_wait(Duration::from_secs(60)), Duration::from_secs(70));
    }
}
