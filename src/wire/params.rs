//! The test parameters: one table ([`TestParams`]) that the client builds from its flags,
//! sends to the server, and both ends check with the same [`TestParams::validate`]: the
//! client against the protocol's bounds ([`Limits::PROTOCOL`]), the server against its own
//! limits. One rule, one message, naming the flag (and the server option when a server
//! limit is what refused it). Adding a parameter: a field here, its rule in `validate`,
//! its flag in `cli::TestArgs`, and its use.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::choices::ZeroCopy;
use crate::data::pin::Affinity;
use crate::units::{self, format_size};

/// Smallest and largest block (`-l`).
pub const MIN_BLOCK: u64 = 64;
pub const MAX_BLOCK: u64 = 64 << 20;
/// Smallest and largest window (`-w`): the kernel stores twice the request in an int.
pub const MIN_WINDOW: u64 = 1 << 10;
pub const MAX_WINDOW: u64 = 1 << 30;
/// Shortest reporting interval (`-i`) and test (`-t`).
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Most interval rows one test may make (bounds what each end keeps per interval).
pub const MAX_INTERVALS: u64 = 100_000;
/// TCP's block when `-l` is not given.
pub const DEFAULT_BLOCK: u64 = 128 << 10;
/// UDP: the smallest datagram (it carries the stream id, sequence and send time) and the
/// largest a UDP socket takes (65535 − IPv4 and UDP headers).
pub const MIN_DATAGRAM: u64 = 32;
pub const MAX_DATAGRAM: u64 = 65_507;
/// UDP's datagram when `-l` is not given and the path MTU is unknown: a 1500-byte
/// Ethernet MTU less the IPv4 and UDP headers.
pub const DEFAULT_DATAGRAM: u64 = 1472;
/// The UDP datagram that fits a path MTU (`None`: unknown), less the IP and UDP headers,
/// within [`MIN_DATAGRAM`]..=[`MAX_DATAGRAM`]; [`DEFAULT_DATAGRAM`] when the MTU is unknown.
pub fn datagram_for_mtu(mtu: Option<u32>, ipv6: bool) -> u64 {
    let headers = if ipv6 { 40 + 8 } else { 20 + 8 };
    mtu.map_or(DEFAULT_DATAGRAM, |m| {
        u64::from(m)
            .saturating_sub(headers)
            .clamp(MIN_DATAGRAM, MAX_DATAGRAM)
    })
}

/// UDP's rate per stream when `-b` is not given (iperf3's default).
pub const DEFAULT_UDP_RATE: u64 = 1_000_000;

/// What the client asks for, as sent to the server: both ends check it with the same
/// [`TestParams::validate`]. The flags that make it are `cli::TestArgs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    /// `-P`: parallel streams, each on its own pinned thread.
    pub streams: u16,
    /// `-l`: the block (TCP) or datagram (UDP); `None`: the protocol's default.
    #[serde(rename = "block_bytes")]
    pub len: Option<u64>,
    /// `-w`: SO_SNDBUF and SO_RCVBUF on both ends; `None`: kernel autotuning.
    pub window_bytes: Option<u64>,
    /// `--force-window`: SO_SNDBUFFORCE/SO_RCVBUFFORCE past the sysctl caps.
    pub force_window: bool,
    /// `-t`: the measured part of the test.
    #[serde(rename = "duration_us", with = "micros")]
    pub duration: Duration,
    /// `-i`; `None`: 1 s, or `-t` when shorter.
    #[serde(rename = "interval_us", with = "micros_opt")]
    pub interval: Option<Duration>,
    /// `-O`: sent before `-t` and left out of the totals.
    #[serde(rename = "omit_us", with = "micros", default)]
    pub omit: Duration,
    /// `-R`: the server sends.
    #[serde(default)]
    pub reverse: bool,
    /// `--bidir`: both ends send, each on its own connections.
    #[serde(default)]
    pub bidir: bool,
    /// `-u`: UDP.
    #[serde(default)]
    pub udp: bool,
    /// `-b` per stream in bits/s; `Some(0)`: as fast as possible; `None`: the default.
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// `--no-gsro`: UDP without GSO and GRO.
    #[serde(default)]
    pub no_gsro: bool,
    /// `--realtime`: UDP receiving threads, on whichever end receives, run at real-time
    /// priority (SCHED_FIFO), so no ordinary task holds their core while the queue fills.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub realtime: bool,
    /// `--dont-fragment`: UDP over IPv4 with DF set, on both ends' sockets.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dont_fragment: bool,
    /// `--get-server-output`: the server's own view comes back with its results.
    #[serde(default)]
    pub get_server_output: bool,
    /// `--fq-rate`: SO_MAX_PACING_RATE per TCP stream in bits/s.
    #[serde(default)]
    pub fq_rate_bps: Option<u64>,
    /// `-S`: the IP TOS (IPv6: traffic class) byte on every data socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    #[serde(flatten)]
    pub transport: Transport,
    /// The client's `-A LOCAL/REMOTE` remote plan; `None`: the server's own `-A`.
    pub pin: Option<Affinity>,
    /// `-Z`: how the sender avoids copying blocks into the kernel.
    #[serde(default, with = "zerocopy_wire")]
    pub zerocopy: Option<ZeroCopy>,
    /// `--skip-rx-copy`: the receiver reads with MSG_TRUNC.
    #[serde(default)]
    pub skip_rx_copy: bool,
    /// `-n`: the test ends once each sending direction has sent this many bytes, all its
    /// streams together; `-t` is then the longest it may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `-k`: the same in blocks (TCP writes of `-l`; UDP datagrams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    /// `-b RATE/BURST`: blocks (datagrams) sent back to back, then a wait that keeps the
    /// rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// `-F`: this end's streams send this file's bytes, or write what they read to it.
    /// This end's alone: never sent to the peer.
    #[serde(skip)]
    pub file: Option<std::path::PathBuf>,
    /// `--rcv-timeout`: this end's receivers end the test when none has read anything for
    /// this long. This end's alone: never sent to the peer.
    #[serde(skip)]
    pub rcv_timeout: Option<Duration>,
}

impl TestParams {
    /// Every flag at its default: the start of a test built in code (`compare`, tests).
    pub fn defaults() -> TestParams {
        TestParams {
            streams: 1,
            len: None,
            window_bytes: None,
            force_window: false,
            duration: Duration::from_secs(10),
            interval: None,
            omit: Duration::ZERO,
            reverse: false,
            bidir: false,
            udp: false,
            rate_bps: None,
            no_gsro: false,
            realtime: false,
            dont_fragment: false,
            file: None,
            rcv_timeout: None,
            get_server_output: false,
            fq_rate_bps: None,
            tos: None,
            transport: Transport::default(),
            pin: None,
            zerocopy: None,
            skip_rx_copy: false,
            bytes: None,
            blocks: None,
            burst: None,
        }
    }
}

/// What ends a test besides its time: `-n`'s bytes or `-k`'s blocks per sending direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    Bytes(u64),
    Blocks(u64),
}

/// Which ends send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends (the default).
    Forward,
    /// The server sends (`-R`).
    Reverse,
    /// Both, each on its own connections (`--bidir`).
    Bidir,
}

impl Direction {
    /// Each direction of the test in order, as whether the server sends it: the client's
    /// (`false`) first.
    pub fn reversed(self) -> &'static [bool] {
        match self {
            Direction::Forward => &[false],
            Direction::Reverse => &[true],
            Direction::Bidir => &[false, true],
        }
    }
}

/// How the data connections behave: part of every test, and shared by `compare`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    /// `-C`: the data connections' congestion control; `None`: the system's.
    pub congestion: Option<String>,
    /// `--no-echo`: no block-header echoes, kernel RTT only.
    pub no_echo: bool,
    /// `-M`: TCP_MAXSEG on the data connections before their handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// `-N`: TCP_NODELAY on the data connections, both ends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_delay: bool,
    /// `--no-rcvlowat`: receivers leave `SO_RCVLOWAT` at one byte whatever the rate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_rcvlowat: bool,
}

/// `-b RATE/BURST`'s largest burst (iperf3's).
pub const MAX_BURST: u32 = 1000;

/// `-M`'s bounds: Linux's smallest MSS (`TCP_MIN_MSS`) and iperf3's largest (`MAX_MSS`).
pub const MIN_MSS: u32 = 88;
pub const MAX_MSS: u32 = 9216;

/// `-Z` on the wire as earlier versions read it: `false` without, `true` for
/// `MSG_ZEROCOPY` (all `-Z` was), and the method's name otherwise (a server that knows
/// only `true`/`false` refuses it rather than send another way).
mod zerocopy_wire {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ZeroCopy;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Flag(bool),
        Method(ZeroCopy),
    }

    pub fn serialize<S: Serializer>(z: &Option<ZeroCopy>, s: S) -> Result<S::Ok, S::Error> {
        match z {
            None => Wire::Flag(false),
            Some(ZeroCopy::Msg) => Wire::Flag(true),
            Some(m) => Wire::Method(*m),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ZeroCopy>, D::Error> {
        Ok(match Wire::deserialize(d)? {
            Wire::Flag(false) => None,
            Wire::Flag(true) => Some(ZeroCopy::Msg),
            Wire::Method(m) => Some(m),
        })
    }
}

/// Durations travel as whole microseconds.
mod micros {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}

/// An optional duration as microseconds, or null.
mod micros_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::micros::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|v| v.map(Duration::from_micros))
    }
}

/// Bounds a test must stay within: the protocol's own, or a server's (narrower) limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_streams: u32,
    pub max_window_bytes: u64,
    pub max_duration: Duration,
    /// Highest `-b` per stream; `None`: any, including as fast as possible.
    pub max_rate_bps: Option<u64>,
    /// UDP tests allowed.
    pub udp: bool,
    /// These are a server's limits: refusals name its options.
    pub server: bool,
    /// The smallest UDP datagram: [`MIN_DATAGRAM`] for pinperf's header, less for a peer
    /// whose header is shorter.
    pub min_datagram: u64,
    /// The smallest TCP block: [`MIN_BLOCK`] for pinperf's block header (echoes), less
    /// for a peer that echoes none.
    pub min_block: u64,
    /// `--server-bitrate-limit`: the highest rate of a test's streams together.
    pub total_rate: Option<TotalRate>,
    /// `--realtime` granted (a server's `--allow-realtime`).
    pub realtime: bool,
}

/// A server's limit on a test's total rate, iperf3's `--server-bitrate-limit RATE[/SECS]`:
/// refused at the handshake when its streams' `-b` (or `--fq-rate`) add up to more, and
/// cut when the bytes its streams move (sent and received) average more over `over`
/// (`None`: the whole test so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TotalRate {
    pub bps: u64,
    pub over: Option<Duration>,
}

impl TotalRate {
    /// iperf3's averaging window when no `/SECS` is given.
    pub const DEFAULT_OVER: Duration = Duration::from_secs(5);

    /// `RATE[/SECS]` as iperf3 takes it: SECS 0.1 to 60, or 0 for the whole test so far;
    /// without it, [`Self::DEFAULT_OVER`].
    pub fn parse(text: &str) -> Result<TotalRate, String> {
        let (rate, over) = match text.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (text, None),
        };
        let bps = units::parse_rate_bps(rate)?;
        let over = match over.map(|s| s.trim().parse::<f64>()) {
            None => Some(Self::DEFAULT_OVER),
            Some(Ok(0.0)) => None,
            Some(Ok(s)) if (0.1..=60.0).contains(&s) => Some(Duration::from_secs_f64(s)),
            Some(_) => {
                return Err(format!(
                    "'{text}': the averaging time after / must be 0.1 to 60 seconds (0: the \
                     whole test)"
                ));
            }
        };
        Ok(TotalRate { bps, over })
    }
}

impl Limits {
    /// What any pinperf accepts.
    pub const PROTOCOL: Limits = Limits {
        max_streams: 256,
        max_window_bytes: MAX_WINDOW,
        max_duration: Duration::from_secs(86_400),
        max_rate_bps: None,
        udp: true,
        server: false,
        min_datagram: MIN_DATAGRAM,
        min_block: MIN_BLOCK,
        total_rate: None,
        realtime: true,
    };

    /// `" (this server's --max-streams)"` for a server's limit, nothing for the protocol's.
    fn source(&self, option: &str) -> String {
        if self.server {
            format!(" (this server's {option})")
        } else {
            String::new()
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl TestParams {
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// `-l`, or the protocol's default: 128k for TCP, [`DEFAULT_DATAGRAM`] for UDP (whose
    /// sender fits it to the path MTU when it can read one).
    pub fn block_bytes(&self) -> u64 {
        match (self.len, self.udp) {
            (Some(len), _) => len,
            (None, false) => DEFAULT_BLOCK,
            (None, true) => DEFAULT_DATAGRAM,
        }
    }

    /// `-b` per stream in bits/s: `None` for as fast as possible (`-b 0`, or TCP without it).
    pub fn rate(&self) -> Option<u64> {
        match (self.rate_bps, self.udp) {
            (Some(0), _) => None,
            (Some(r), _) => Some(r),
            (None, true) => Some(DEFAULT_UDP_RATE),
            (None, false) => None,
        }
    }

    /// `-n` or `-k`: what ends each sending direction early, if anything does.
    pub fn budget(&self) -> Option<Budget> {
        match (self.bytes, self.blocks) {
            (Some(n), _) => Some(Budget::Bytes(n)),
            (None, Some(k)) => Some(Budget::Blocks(k)),
            (None, None) => None,
        }
    }

    /// A budgeted test (`-n`, `-k`) runs until its budget is spent, but never past the
    /// longest test `limits` allow: its `-t` (the longest it may run) is cut to fit.
    pub fn fit_budget(&mut self, limits: &Limits) {
        let max = limits.max_duration.min(Limits::PROTOCOL.max_duration);
        if self.budget().is_some() && self.run_time() > max {
            self.duration = max.saturating_sub(self.omit).max(MIN_INTERVAL);
        }
    }

    /// Which ends send.
    pub fn direction(&self) -> Direction {
        match (self.reverse, self.bidir) {
            (_, true) => Direction::Bidir,
            (true, false) => Direction::Reverse,
            (false, false) => Direction::Forward,
        }
    }

    /// Stream threads on each end: one per stream and direction.
    pub fn threads(&self) -> usize {
        usize::from(self.streams) * if self.bidir { 2 } else { 1 }
    }

    /// `-i`, or 1 s (the duration when shorter) by default; `-i 0`, or one longer than
    /// the test, is the whole test (iperf3 takes both: no interval reports).
    pub fn interval(&self) -> Duration {
        match self.interval {
            Some(i) if i.is_zero() || i > self.duration => self.duration,
            Some(i) => i,
            None => self.duration.min(Duration::from_secs(1)),
        }
    }

    pub fn omit(&self) -> Duration {
        self.omit
    }

    /// The test in a server log line's words: `2 TCP stream(s) each way (bidirectional),
    /// block 128k, window auto, 2 s after -O 1 s`; UDP's datagram and `-b`.
    pub fn described(&self) -> String {
        let rate = match (self.udp, self.rate()) {
            (true, Some(r)) => format!(", -b {} per stream", units::format_rate(r)),
            (true, None) => ", -b 0: as fast as it can".into(),
            (false, _) => String::new(),
        };
        let omit = match self.omit.is_zero() {
            true => String::new(),
            false => format!(" after -O {} s", self.omit.as_secs_f64()),
        };
        let t = &self.transport;
        let flags: Vec<String> = [
            t.mss.map(|m| format!("-M {m}")),
            t.no_delay.then(|| "-N".into()),
            t.no_rcvlowat.then(|| "--no-rcvlowat".into()),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mss = match flags.is_empty() {
            true => String::new(),
            false => format!(", {}", flags.join(" ")),
        };
        let rate = match self.burst {
            Some(b) if self.udp => format!("{rate} in bursts of {b}"),
            _ => rate,
        };
        let budget = match self.budget() {
            Some(Budget::Bytes(n)) => format!(", up to {} bytes each way", n),
            Some(Budget::Blocks(k)) => format!(", up to {k} blocks each way"),
            None => String::new(),
        };
        format!(
            "{} {} stream(s){}, {} {}, window {}{mss}{rate}, {} s{omit}{budget}",
            self.streams,
            if self.udp { "UDP" } else { "TCP" },
            match self.direction() {
                Direction::Forward => "",
                Direction::Reverse => " (reverse: this server sends)",
                Direction::Bidir => " each way (bidirectional)",
            },
            if self.udp { "datagram" } else { "block" },
            format_size(self.block_bytes()),
            self.window_bytes.map_or("auto".into(), format_size),
            self.duration().as_secs_f64()
        )
    }

    /// Block-header echoes (block RTT): TCP's, unless `--no-echo`.
    pub fn echo(&self) -> bool {
        !self.transport.no_echo && !self.udp
    }

    /// `--realtime`'s receivers: UDP's only ([`TestParams::validate`] refuses it over TCP).
    pub fn realtime_receivers(&self) -> bool {
        self.realtime && self.udp
    }

    /// `--realtime` receivers on the server, which it must grant (`--allow-realtime`): in
    /// every direction but `-R`'s.
    pub fn realtime_at_server(&self) -> bool {
        self.realtime_receivers() && self.direction() != Direction::Reverse
    }

    /// `-M`'s MSS on the data connections: TCP's only.
    pub fn mss(&self) -> Option<u32> {
        self.transport.mss.filter(|_| !self.udp)
    }

    /// Receivers may raise `SO_RCVLOWAT` on fast streams: TCP's, unless `--no-rcvlowat`
    /// (the receivers add their own conditions: `receiver::low_water_allowed`).
    pub fn low_water(&self) -> bool {
        !self.udp && !self.transport.no_rcvlowat
    }

    /// `-N`'s TCP_NODELAY on the data connections: TCP's only.
    pub fn no_delay(&self) -> bool {
        self.transport.no_delay && !self.udp
    }

    /// How long the senders send: the omitted part, then the measured part.
    pub fn run_time(&self) -> Duration {
        self.omit() + self.duration()
    }

    /// Checks every parameter against `limits`, one rule at a time in this order; the error
    /// names the flag, the value and what is allowed.
    pub fn validate(&self, limits: &Limits) -> Result<(), String> {
        self.check_streams(limits)?;
        self.check_block(limits)?;
        self.check_window(limits)?;
        self.check_budget()?;
        self.check_times(limits)?;
        self.check_remote_pin()?;
        self.check_congestion()?;
        self.check_rates(limits)?;
        self.check_mss()?;
        self.check_tcp_only()?;
        self.check_realtime(limits)
    }

    /// `-n` and `-k`: one of them, at least one byte or block; a burst of 1 to
    /// [`MAX_BURST`] blocks, with a rate to keep.
    fn check_budget(&self) -> Result<(), String> {
        if self.bytes.is_some() && self.blocks.is_some() {
            return Err(
                "-n and -k: only one test end condition (-t, -n, -k) may be given; drop one".into(),
            );
        }
        match self.budget() {
            Some(Budget::Bytes(0)) => return Err("-n 0: send at least 1 byte".into()),
            Some(Budget::Blocks(0)) => return Err("-k 0: send at least 1 block".into()),
            _ => {}
        }
        if self.budget().is_some() && !self.omit.is_zero() {
            return Err(format!(
                "-O {} with -n/-k: the omitted seconds' bytes would count against the budget; \
                 drop -O",
                secs(self.omit)
            ));
        }
        match self.burst {
            Some(b) if !(1..=MAX_BURST).contains(&b) => Err(format!(
                "-b RATE/{b}: a burst must be 1 to {MAX_BURST} blocks"
            )),
            Some(b) if self.rate().is_none() => Err(format!(
                "-b 0/{b}: a burst needs a rate to keep; give -b RATE/{b}"
            )),
            _ => Ok(()),
        }
    }

    /// `-P`, and `--bidir`'s streams each way counted together.
    fn check_streams(&self, limits: &Limits) -> Result<(), String> {
        let max_streams = limits.max_streams.min(Limits::PROTOCOL.max_streams);
        if !(1..=max_streams).contains(&u32::from(self.streams)) {
            return Err(format!(
                "-P {}: streams must be 1 to {max_streams}{}",
                self.streams,
                limits.source("--max-streams")
            ));
        }
        if self.threads() > max_streams as usize {
            return Err(format!(
                "-P {} --bidir: {} streams in all, more than {max_streams}{}",
                self.streams,
                self.threads(),
                limits.source("--max-streams")
            ));
        }
        Ok(())
    }

    /// `-l`: a datagram's bounds under `-u`, a TCP block's otherwise.
    fn check_block(&self, limits: &Limits) -> Result<(), String> {
        let block = self.block_bytes();
        let min_datagram = limits.min_datagram;
        if self.udp && !(min_datagram..=MAX_DATAGRAM).contains(&block) {
            return Err(format!(
                "-l {}: a UDP datagram must be {min_datagram} to {MAX_DATAGRAM} bytes",
                format_size(block)
            ));
        }
        let min_block = limits.min_block;
        if !self.udp && !(min_block..=MAX_BLOCK).contains(&block) {
            return Err(format!(
                "-l {}: block size must be {min_block} to {MAX_BLOCK} bytes ({} to {})",
                format_size(block),
                format_size(min_block),
                format_size(MAX_BLOCK)
            ));
        }
        Ok(())
    }

    /// `-w`, within the kernel's int and a server's `--max-window`.
    fn check_window(&self, limits: &Limits) -> Result<(), String> {
        let Some(w) = self.window_bytes else {
            return Ok(());
        };
        let max = limits.max_window_bytes.min(MAX_WINDOW);
        if (MIN_WINDOW..=max).contains(&w) {
            return Ok(());
        }
        let why = if limits.server && max < MAX_WINDOW {
            limits.source("--max-window")
        } else {
            " (the kernel stores twice the request in an int)".into()
        };
        Err(format!(
            "-w {}: window must be {} to {}{why}",
            format_size(w),
            format_size(MIN_WINDOW),
            format_size(max)
        ))
    }

    /// `-t`, `-O` and `-i`, and the number of interval rows they make.
    fn check_times(&self, limits: &Limits) -> Result<(), String> {
        let (duration, interval, omit) = (self.duration(), self.interval(), self.omit());
        let max_duration = limits.max_duration.min(Limits::PROTOCOL.max_duration);
        if duration < MIN_INTERVAL || duration > max_duration {
            return Err(format!(
                "-t {}: duration must be {} to {} seconds{}",
                secs(duration),
                secs(MIN_INTERVAL),
                secs(max_duration),
                limits.source("--max-duration")
            ));
        }
        if omit + duration > max_duration {
            return Err(format!(
                "-O {}: the omitted seconds plus -t {} exceed {} seconds{}",
                secs(omit),
                secs(duration),
                secs(max_duration),
                limits.source("--max-duration")
            ));
        }
        if interval < MIN_INTERVAL {
            return Err(format!(
                "-i {}: interval must be at least {} seconds",
                secs(interval),
                secs(MIN_INTERVAL)
            ));
        }
        let rows = ((omit + duration).as_micros() / interval.as_micros().max(1)) as u64;
        if rows > MAX_INTERVALS {
            return Err(format!(
                "-t/-i: {rows} intervals, more than {MAX_INTERVALS}; use a longer -i"
            ));
        }
        Ok(())
    }

    /// `-A LOCAL/REMOTE`: the server's CPU list is not empty and not huge.
    fn check_remote_pin(&self) -> Result<(), String> {
        match &self.pin {
            Some(Affinity::List(list)) if list.is_empty() || list.len() > 4096 => Err(format!(
                "-A .../{}: the server's CPU list must name 1 to 4096 CPUs",
                list.len()
            )),
            _ => Ok(()),
        }
    }

    /// `-C`: something the kernel could name (it says whether it has it).
    fn check_congestion(&self) -> Result<(), String> {
        match &self.transport.congestion {
            Some(name)
                if name.is_empty()
                    || name.len() > 15
                    || !name.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Err(format!(
                    "-C '{name}': not a congestion control name (see \
                     /proc/sys/net/ipv4/tcp_available_congestion_control)"
                ))
            }
            _ => Ok(()),
        }
    }

    /// `-u` where UDP is allowed, `-b` within `--max-rate`, and `--fq-rate`'s least (TCP's
    /// and UDP's: iperf3 paces both with it).
    fn check_rates(&self, limits: &Limits) -> Result<(), String> {
        if self.udp && !limits.udp {
            return Err(format!(
                "-u: UDP tests are not allowed{}",
                limits.source("--no-udp")
            ));
        }
        if let (Some(rate), Some(max)) = (self.rate(), limits.max_rate_bps)
            && rate > max
        {
            return Err(format!(
                "-b {}: more than {} per stream{}",
                units::format_rate(rate),
                units::format_rate(max),
                limits.source("--max-rate")
            ));
        }
        if let Some(fq) = self.fq_rate_bps.filter(|&r| r < 8) {
            // SO_MAX_PACING_RATE is in bytes per second: 1 to 7 bit/s would be 0, no pacing.
            return Err(format!(
                "--fq-rate {fq}: at least 8 bit/s (the kernel paces in bytes per second)"
            ));
        }
        self.check_total_rate(limits)?;
        if let (None, Some(max)) = (self.rate(), limits.max_rate_bps) {
            return Err(format!(
                "-b: this server limits each stream to {}{}; ask for a rate with -b",
                units::format_rate(max),
                limits.source("--max-rate")
            ));
        }
        Ok(())
    }

    /// `--server-bitrate-limit`: the streams' `-b` (and `--fq-rate`) together within it,
    /// counted as iperf3's server counts them (streams times rate, twice for `--bidir`).
    fn check_total_rate(&self, limits: &Limits) -> Result<(), String> {
        let Some(limit) = limits.total_rate else {
            return Ok(());
        };
        let streams = self.threads() as u64;
        let asked = [("-b", self.rate()), ("--fq-rate", self.fq_rate_bps)];
        match asked.into_iter().find_map(|(f, r)| {
            r.filter(|r| r.saturating_mul(streams) > limit.bps)
                .map(|r| (f, r))
        }) {
            Some((flag, rate)) => Err(format!(
                "{flag} {}: {streams} stream(s) at it, {} in all, more than {}{}",
                units::format_rate(rate),
                units::format_rate(rate.saturating_mul(streams)),
                units::format_rate(limit.bps),
                limits.source("--server-bitrate-limit")
            )),
            None => Ok(()),
        }
    }

    /// `-M`, within what the kernel takes and the largest jumbo segment.
    fn check_mss(&self) -> Result<(), String> {
        let Some(mss) = self
            .transport
            .mss
            .filter(|m| !(MIN_MSS..=MAX_MSS).contains(m))
        else {
            return Ok(());
        };
        let why = match mss < MIN_MSS {
            true => "the kernel takes no less",
            false => "iperf3's largest",
        };
        Err(format!(
            "-M {mss}: the MSS must be {MIN_MSS} to {MAX_MSS} bytes ({why})"
        ))
    }

    /// TCP's own flags with `-u`.
    fn check_tcp_only(&self) -> Result<(), String> {
        let tcp_only: Vec<&str> = [
            (self.transport.congestion.is_some(), "-C"),
            (self.transport.mss.is_some(), "-M"),
            (self.transport.no_delay, "-N"),
            (self.transport.no_rcvlowat, "--no-rcvlowat"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        if let Some((last, rest)) = tcp_only.split_last().filter(|_| self.udp) {
            return Err(match rest.is_empty() {
                true => format!("-u: {last} applies to TCP only"),
                false => format!("-u: {} and {last} apply to TCP only", rest.join(", ")),
            });
        }
        if self.udp && (self.zerocopy.is_some() || self.skip_rx_copy) {
            return Err("-u: -Z and --skip-rx-copy apply to TCP only".into());
        }
        Ok(())
    }

    /// `--realtime`: UDP's alone (a TCP receiver that waits for its core slows its sender
    /// and loses nothing), and, where the server receives, only if it grants it.
    fn check_realtime(&self, limits: &Limits) -> Result<(), String> {
        if self.realtime && !self.udp {
            return Err(
                "--realtime applies to UDP (-u) only: a TCP receiver that waits for \
                        its core loses nothing"
                    .into(),
            );
        }
        if self.realtime_at_server() && !limits.realtime {
            return Err(
                "--realtime: this server does not run receivers at real-time priority \
                        (start it with --allow-realtime); or drop --realtime"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_fills_the_path_mtu_less_its_headers() {
        assert_eq!(datagram_for_mtu(Some(1500), false), 1472);
        assert_eq!(datagram_for_mtu(Some(1500), true), 1452);
        // Loopback (65535 as IP_MTU reports it) and beyond: the largest datagram.
        assert_eq!(datagram_for_mtu(Some(65_535), false), MAX_DATAGRAM);
        assert_eq!(datagram_for_mtu(Some(40), true), MIN_DATAGRAM);
        assert_eq!(datagram_for_mtu(None, true), DEFAULT_DATAGRAM);
    }

    fn params() -> TestParams {
        let mut p = TestParams::defaults();
        p.streams = 4;
        p.window_bytes = Some(4 << 20);
        p.duration = Duration::from_secs(3);
        p
    }

    /// One description of a test for both servers' logs (pinperf's and the iperf3 one's
    /// were written twice, and neither said -O).
    #[test]
    fn a_test_is_described_with_its_omitted_seconds() {
        let mut p = params();
        assert_eq!(p.described(), "4 TCP stream(s), block 128k, window 4M, 3 s");
        p.omit = Duration::from_secs(1);
        p.udp = true;
        p.rate_bps = Some(100_000_000);
        p.len = Some(1472);
        p.window_bytes = None;
        assert_eq!(
            p.described(),
            "4 UDP stream(s), datagram 1472, window auto, -b 100M per stream, 3 s after -O 1 s"
        );
    }

    const SERVER: Limits = Limits {
        max_streams: 2,
        max_window_bytes: 1 << 20,
        max_duration: Duration::from_secs(10),
        max_rate_bps: Some(2_500_000_000),
        udp: false,
        server: true,
        min_datagram: MIN_DATAGRAM,
        min_block: MIN_BLOCK,
        total_rate: None,
        realtime: false,
    };

    /// `--realtime` needs the server's grant only where the server receives; over TCP it
    /// is refused whoever receives.
    #[test]
    fn realtime_needs_the_servers_grant_only_where_it_receives() {
        let udp = TestParams {
            udp: true,
            realtime: true,
            ..TestParams::defaults()
        };
        let no_grant = Limits {
            realtime: false,
            ..Limits::PROTOCOL
        };
        let refused = "--realtime: this server does not run receivers at real-time priority \
                       (start it with --allow-realtime); or drop --realtime";
        assert_eq!(udp.validate(&no_grant), Err(refused.to_string()));
        let bidir = TestParams {
            bidir: true,
            ..udp.clone()
        };
        assert_eq!(bidir.validate(&no_grant), Err(refused.to_string()));
        let reverse = TestParams {
            reverse: true,
            ..udp.clone()
        };
        assert_eq!(reverse.validate(&no_grant), Ok(()));
        assert_eq!(udp.validate(&Limits::PROTOCOL), Ok(()));
        let tcp = TestParams {
            udp: false,
            reverse: true,
            ..udp
        };
        assert!(
            tcp.validate(&Limits::PROTOCOL)
                .unwrap_err()
                .starts_with("--realtime applies to UDP")
        );
    }

    /// One table: each change to the parameters, and what the protocol and a server with
    /// small limits say about it.
    #[test]
    fn one_rule_one_message_for_client_and_server() {
        type Change = fn(&mut TestParams);
        let table: &[(Change, Option<&str>, Option<&str>)] = &[
            (
                |_| {},
                None,
                Some("-P 4: streams must be 1 to 2 (this server's --max-streams)"),
            ),
            (
                |p| p.streams = 0,
                Some("-P 0: streams must be 1 to 256"),
                Some("-P 0: streams must be 1 to 2 (this server's --max-streams)"),
            ),
            (
                |p| p.streams = 300,
                Some("-P 300: streams must be 1 to 256"),
                Some("-P 300: streams must be 1 to 2 (this server's --max-streams)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.fq_rate_bps = Some(7)
                },
                Some("--fq-rate 7: at least 8 bit/s (the kernel paces in bytes per second)"),
                Some("--fq-rate 7: at least 8 bit/s (the kernel paces in bytes per second)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.len = Some(8)
                },
                Some("-l 8: block size must be 64 to 67108864 bytes (64 to 64M)"),
                Some("-l 8: block size must be 64 to 67108864 bytes (64 to 64M)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = Some(2 << 30)
                },
                Some(
                    "-w 2G: window must be 1k to 1G (the kernel stores twice the request in an int)",
                ),
                Some("-w 2G: window must be 1k to 1M (this server's --max-window)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = Some(0)
                },
                Some(
                    "-w 0: window must be 1k to 1G (the kernel stores twice the request in an int)",
                ),
                Some("-w 0: window must be 1k to 1M (this server's --max-window)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.duration = Duration::from_secs(20)
                },
                None,
                Some("-t 20: duration must be 0.1 to 10 seconds (this server's --max-duration)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.omit = Duration::from_secs(8)
                },
                None,
                Some(
                    "-O 8: the omitted seconds plus -t 3 exceed 10 seconds (this server's --max-duration)",
                ),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.interval = Some(Duration::from_millis(50))
                },
                Some("-i 0.05: interval must be at least 0.1 seconds"),
                Some("-i 0.05: interval must be at least 0.1 seconds"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.duration = Duration::from_secs(86_400);
                    p.interval = Some(Duration::from_millis(100))
                },
                Some("-t/-i: 864000 intervals, more than 100000; use a longer -i"),
                Some("-t 86400: duration must be 0.1 to 10 seconds (this server's --max-duration)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.transport.congestion = Some(String::new())
                },
                Some(
                    "-C '': not a congestion control name (see /proc/sys/net/ipv4/tcp_available_congestion_control)",
                ),
                Some(
                    "-C '': not a congestion control name (see /proc/sys/net/ipv4/tcp_available_congestion_control)",
                ),
            ),
            (
                |p| {
                    p.streams = 2;
                    p.window_bytes = Some(1 << 20);
                    p.omit = Duration::from_secs(2);
                    p.rate_bps = Some(2_500_000_000)
                },
                None,
                None,
            ),
            (
                |p| {
                    p.streams = 1;
                    p.udp = true;
                    p.len = Some(128 << 10)
                },
                Some("-l 128k: a UDP datagram must be 32 to 65507 bytes"),
                Some("-l 128k: a UDP datagram must be 32 to 65507 bytes"),
            ),
            (
                // Below pinperf's header.
                |p| {
                    p.streams = 1;
                    p.udp = true;
                    p.len = Some(16)
                },
                Some("-l 16: a UDP datagram must be 32 to 65507 bytes"),
                Some("-l 16: a UDP datagram must be 32 to 65507 bytes"),
            ),
            (
                // A datagram below TCP's smallest block is a datagram all the same.
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.udp = true;
                    p.len = Some(32)
                },
                None,
                Some("-u: UDP tests are not allowed (this server's --no-udp)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.udp = true;
                    p.len = Some(1400);
                    p.window_bytes = None;
                    p.zerocopy = Some(ZeroCopy::Msg)
                },
                Some("-u: -Z and --skip-rx-copy apply to TCP only"),
                Some("-u: UDP tests are not allowed (this server's --no-udp)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.zerocopy = Some(ZeroCopy::Sendfile);
                    p.skip_rx_copy = true
                },
                None,
                Some(
                    "-b: this server limits each stream to 2.5G (this server's --max-rate); \
                     ask for a rate with -b",
                ),
            ),
            (
                |p| {
                    p.streams = 2;
                    p.bidir = true;
                    p.window_bytes = None;
                    p.duration = Duration::from_secs(3)
                },
                None,
                Some("-P 2 --bidir: 4 streams in all, more than 2 (this server's --max-streams)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.udp = true;
                    p.window_bytes = None
                },
                None,
                Some("-u: UDP tests are not allowed (this server's --no-udp)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.rate_bps = Some(1_000_000_000);
                    p.realtime = true
                },
                Some(
                    "--realtime applies to UDP (-u) only: a TCP receiver that waits for its \
                     core loses nothing",
                ),
                Some(
                    "--realtime applies to UDP (-u) only: a TCP receiver that waits for its \
                     core loses nothing",
                ),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None;
                    p.rate_bps = Some(3_000_000_000)
                },
                None,
                Some("-b 3G: more than 2.5G per stream (this server's --max-rate)"),
            ),
            (
                |p| {
                    p.streams = 1;
                    p.window_bytes = None
                },
                None,
                Some(
                    "-b: this server limits each stream to 2.5G (this server's --max-rate); ask for a rate with -b",
                ),
            ),
        ];
        for (i, (change, protocol, server)) in table.iter().enumerate() {
            let mut p = params();
            change(&mut p);
            assert_eq!(
                p.validate(&Limits::PROTOCOL).err().as_deref(),
                *protocol,
                "row {i} (protocol)"
            );
            assert_eq!(
                p.validate(&SERVER).err().as_deref(),
                *server,
                "row {i} (server)"
            );
        }
    }

    /// `-S` reads a byte as iperf3 does (C's notation) and names the range otherwise.
    /// `-M`: Linux's smallest MSS to iperf3's largest, and TCP only.
    #[test]
    fn the_mss_is_checked_by_its_flag() {
        let limits = Limits::PROTOCOL;
        let with = |mss: u32, udp: bool| {
            let mut p = TestParams::defaults();
            p.transport.mss = Some(mss);
            p.udp = udp;
            p.validate(&limits)
        };
        assert_eq!(with(MIN_MSS, false), Ok(()));
        assert_eq!(with(MAX_MSS, false), Ok(()));
        for (bad, why) in [
            (0, "the kernel takes no less"),
            (MIN_MSS - 1, "the kernel takes no less"),
            (MAX_MSS + 1, "iperf3's largest"),
        ] {
            assert_eq!(
                with(bad, false),
                Err(format!(
                    "-M {bad}: the MSS must be 88 to 9216 bytes ({why})"
                ))
            );
        }
        assert_eq!(with(1400, true), Err("-u: -M applies to TCP only".into()));
        let mut p = TestParams::defaults();
        (p.udp, p.transport.no_delay) = (true, true);
        p.transport.congestion = Some("bbr".into());
        assert_eq!(
            p.validate(&limits),
            Err("-u: -C and -N apply to TCP only".into())
        );
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let p = TestParams::defaults();
        assert_eq!(
            (p.streams, p.block_bytes(), p.window_bytes),
            (1, 128 << 10, None)
        );
        let times = (p.duration(), p.interval(), p.omit());
        assert_eq!(
            times,
            (
                Duration::from_secs(10),
                Duration::from_secs(1),
                Duration::ZERO
            )
        );
        assert!(p.echo());
        assert_eq!(p.validate(&Limits::PROTOCOL), Ok(()));
        // iperf3's -i 0, and an -i past -t (iperf3 takes both): one row, the whole test.
        let mut p = TestParams::defaults();
        p.duration = Duration::from_secs(3);
        for (given, interval) in [(0, 3000), (5000, 3000), (3000, 3000), (500, 500)] {
            p.interval = Some(Duration::from_millis(given));
            assert_eq!(
                p.interval(),
                Duration::from_millis(interval),
                "-i {given} ms"
            );
            assert_eq!(p.validate(&Limits::PROTOCOL), Ok(()), "-i {given} ms");
        }
    }

    /// `-Z` on the wire: the parameters read as earlier versions wrote them (`true` was
    /// MSG_ZEROCOPY).
    #[test]
    fn zerocopy_methods_travel_as_earlier_versions_read_them() {
        for (method, wire) in [
            (None, serde_json::json!(false)),
            (Some(ZeroCopy::Msg), serde_json::json!(true)),
            (Some(ZeroCopy::Sendfile), serde_json::json!("sendfile")),
        ] {
            let mut p = params();
            p.zerocopy = method;
            let v = serde_json::to_value(&p).unwrap();
            assert_eq!(v["zerocopy"], wire, "{method:?}");
            let back: TestParams = serde_json::from_value(v).unwrap();
            assert_eq!(back.zerocopy, method);
        }
        let mut v = serde_json::to_value(params()).unwrap();
        v["zerocopy"] = serde_json::json!("msg");
        let p: TestParams = serde_json::from_value(v).unwrap();
        assert_eq!(p.zerocopy, Some(ZeroCopy::Msg));
    }

    /// `-n`/`-k`: one of them, not empty, without -O; bursts of 1 to 1000 with a rate. A
    /// server cuts a budget's longest run to its own longest test, and older peers'
    /// parameters, which have none of these, still parse.
    #[test]
    fn a_budget_is_one_end_condition_within_the_limits() {
        let with = |change: fn(&mut TestParams)| {
            let mut p = TestParams::defaults();
            change(&mut p);
            p.validate(&Limits::PROTOCOL).err()
        };
        type Change = fn(&mut TestParams);
        let table: &[(Change, Option<&str>)] = &[
            (|p| p.bytes = Some(1 << 20), None),
            (|p| p.blocks = Some(7), None),
            (
                |p| (p.bytes, p.blocks) = (Some(1), Some(1)),
                Some("-n and -k: only one test end condition (-t, -n, -k) may be given; drop one"),
            ),
            (|p| p.bytes = Some(0), Some("-n 0: send at least 1 byte")),
            (
                |p| (p.blocks, p.omit) = (Some(9), Duration::from_secs(2)),
                Some(
                    "-O 2 with -n/-k: the omitted seconds' bytes would count against the \
                     budget; drop -O",
                ),
            ),
            (
                |p| (p.rate_bps, p.burst) = (Some(1_000_000), Some(1000)),
                None,
            ),
            (
                |p| (p.rate_bps, p.burst) = (Some(1_000_000), Some(1001)),
                Some("-b RATE/1001: a burst must be 1 to 1000 blocks"),
            ),
            (
                |p| p.burst = Some(10),
                Some("-b 0/10: a burst needs a rate to keep; give -b RATE/10"),
            ),
        ];
        for (i, (change, want)) in table.iter().enumerate() {
            assert_eq!(with(*change).as_deref(), *want, "row {i}");
        }
        let mut p = TestParams::defaults();
        (p.bytes, p.duration) = (Some(1), Limits::PROTOCOL.max_duration);
        p.fit_budget(&SERVER);
        assert_eq!(p.duration, SERVER.max_duration);
        let mut v = serde_json::to_value(params()).unwrap();
        assert!(v.get("bytes").is_none() && v.get("burst").is_none());
        v.as_object_mut().unwrap().remove("omit_us");
        let old: TestParams = serde_json::from_value(v).unwrap();
        assert_eq!((old.budget(), old.burst), (None, None));
    }

    /// `--no-rcvlowat` goes on the wire only when given, so an older server still takes
    /// the test; parameters without it allow the mark; `-u` refuses it.
    #[test]
    fn no_rcvlowat_crosses_only_when_given() {
        let v = serde_json::to_value(params()).unwrap();
        assert!(v.get("no_rcvlowat").is_none(), "{v}");
        assert!(serde_json::from_value::<TestParams>(v).unwrap().low_water());
        let mut p = params();
        p.transport.no_rcvlowat = true;
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v.get("no_rcvlowat"), Some(&serde_json::Value::Bool(true)));
        assert!(!serde_json::from_value::<TestParams>(v).unwrap().low_water());
        p.udp = true;
        assert_eq!(
            p.check_tcp_only().unwrap_err(),
            "-u: --no-rcvlowat applies to TCP only"
        );
    }

    #[test]
    fn old_clients_without_omit_still_parse() {
        let mut v = serde_json::to_value(params()).unwrap();
        v.as_object_mut().unwrap().remove("omit_us");
        let p: TestParams = serde_json::from_value(v).unwrap();
        assert_eq!(p.omit(), Duration::ZERO);
        assert_eq!(p.run_time(), Duration::from_secs(3));
    }

    /// `--server-bitrate-limit RATE[/SECS]` as iperf3 reads it, and its refusal: the
    /// streams' `-b` (or `--fq-rate`) times their count, `--bidir` counting twice.
    #[test]
    fn a_total_rate_limit_reads_and_refuses_as_iperf3s() {
        let secs = |s: f64| Some(Duration::from_secs_f64(s));
        for (text, want) in [
            ("1G", Ok((1_000_000_000, secs(5.0)))),
            ("100M/2", Ok((100_000_000, secs(2.0)))),
            ("10k/0.5", Ok((10_000, secs(0.5)))),
            ("10M/0", Ok((10_000_000, None))),
            (
                "10M/61",
                Err("'10M/61': the averaging time after / must be 0.1 to 60"),
            ),
            ("10M/x", Err("'10M/x': the averaging time")),
            ("fast", Err("'fast' is not a rate")),
        ] {
            let got = TotalRate::parse(text).map(|t| (t.bps, t.over));
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{text}"),
                (Err(e), Err(w)) => assert!(e.starts_with(w), "{text}: {e}"),
                (g, w) => panic!("{text}: {g:?}, want {w:?}"),
            }
        }
        let limits = Limits {
            server: true,
            total_rate: TotalRate::parse("100M").ok(),
            ..Limits::PROTOCOL
        };
        let check = |change: fn(&mut TestParams)| {
            let mut p = TestParams::defaults();
            change(&mut p);
            p.check_total_rate(&limits)
        };
        assert_eq!(check(|_| {}), Ok(()), "TCP without -b asks for no rate");
        assert_eq!(
            check(|p| (p.streams, p.rate_bps) = (2, Some(50_000_000))),
            Ok(())
        );
        assert_eq!(
            check(|p| (p.streams, p.rate_bps, p.bidir) = (2, Some(50_000_000), true)),
            Err(
                "-b 50M: 4 stream(s) at it, 200M in all, more than 100M (this server's \
                 --server-bitrate-limit)"
                    .into()
            )
        );
        assert!(
            check(|p| p.fq_rate_bps = Some(200_000_000))
                .unwrap_err()
                .starts_with("--fq-rate 200M: 1 stream(s)")
        );
    }
}
