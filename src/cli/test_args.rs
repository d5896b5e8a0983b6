//! The test's flags: clap reads them into [`TestArgs`], and [`TestArgs::to_params`] is the
//! one conversion to the [`TestParams`] that both ends check and the client sends.

use std::time::Duration;

use crate::choices::ZeroCopy;
use crate::data::pin::Affinity;
use crate::units;
use crate::wire::params::{Limits, MAX_MSS, MIN_MSS, TestParams, Transport};

/// iperf3's millisecond timeouts go up to the protocol's longest test.
pub(crate) const LONGEST_MS: u64 = Limits::PROTOCOL.max_duration.as_secs() * 1000;

/// The test's flags; [`TestArgs::to_params`] makes the [`TestParams`] the client checks and
/// sends.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[command(next_help_heading = "Test")]
pub struct TestArgs {
    /// Number of parallel TCP streams, each on its own pinned thread (1-256).
    #[arg(short = 'P', allow_negative_numbers = true, long = "parallel", value_name = "N", default_value_t = 1,
          value_parser = parse_streams)]
    pub streams: u16,

    /// Block size of each write()/read(): 8192, 64k, 1M [default: 128k]. With -u: the
    /// datagram size [default: what fits the path MTU].
    #[arg(short = 'l', allow_negative_numbers = true, long = "len", visible_alias = "length", value_name = "SIZE",
          value_parser = units::parse_size)]
    pub len: Option<u64>,

    /// Socket buffer (window) to request on both ends: SO_SNDBUF and SO_RCVBUF, e.g. 4M.
    /// Default: kernel autotuning.
    #[arg(short = 'w', allow_negative_numbers = true, long = "window", value_name = "SIZE", value_parser = units::parse_size)]
    pub window_bytes: Option<u64>,

    /// Use SO_SNDBUFFORCE/SO_RCVBUFFORCE to exceed net.core.{w,r}mem_max (needs CAP_NET_ADMIN).
    #[arg(long, requires = "window_bytes")]
    pub force_window: bool,

    /// Test duration in seconds (after the omitted seconds of -O).
    #[arg(short = 't', allow_negative_numbers = true, long = "time", value_name = "SECS", default_value = "10",
          value_parser = units::parse_duration)]
    pub duration: Duration,

    /// Reporting interval in seconds [default: 1, or -t when shorter]; 0 (or one longer
    /// than -t): one row over the whole test, as iperf3's -i 0 reports only the totals.
    #[arg(short = 'i', allow_negative_numbers = true, long = "interval", value_name = "SECS",
          value_parser = units::parse_duration)]
    pub interval: Option<Duration>,

    /// Run SECS before -t and leave them out of the totals (slow start, as iperf3's -O);
    /// their rows are shown, marked omitted.
    #[arg(short = 'O', allow_negative_numbers = true, long = "omit", value_name = "SECS", default_value = "0",
          value_parser = units::parse_duration)]
    pub omit: Duration,

    /// Reverse: the server sends and the client receives (the download direction).
    #[arg(short = 'R', long)]
    pub reverse: bool,

    /// Both directions at once, each on its own connections and pinned threads.
    #[arg(long, conflicts_with = "reverse")]
    pub bidir: bool,

    /// UDP instead of TCP: paced datagrams at -b per stream; loss, jitter and order.
    #[arg(short = 'u', long)]
    pub udp: bool,

    /// Target rate per stream in bits/s (100M, 2.5G); 0 = as fast as possible. TCP: each
    /// stream thread paces its writes. UDP [default: 1M, as iperf3].
    /// `/BURST` (iperf3's burst mode): BURST blocks (UDP: datagrams) back to back, then a
    /// wait that keeps the rate on average; 1 to 1000.
    #[arg(short = 'b', allow_negative_numbers = true, long = "bitrate", visible_alias = "bandwidth", value_name = "RATE[/BURST]",
          value_parser = parse_bitrate)]
    pub rate_bps: Option<(u64, Option<u32>)>,

    /// End the test once the senders have sent SIZE bytes in all (each direction its own
    /// SIZE), e.g. 10M; -t is then the longest it may run (give one of -t, -n, -k).
    #[arg(short = 'n', long = "bytes", value_name = "SIZE", conflicts_with_all = ["duration", "blocks"],
          value_parser = units::parse_size)]
    pub bytes: Option<u64>,

    /// The same as -n in blocks: writes of -l (UDP: datagrams), e.g. 1000 or 10k.
    #[arg(short = 'k', long = "blockcount", value_name = "COUNT", conflicts_with = "duration",
          value_parser = units::parse_size)]
    pub blocks: Option<u64>,

    /// UDP without the kernel's segmentation and receive offloads (GSO, GRO): one datagram
    /// per message each way, as most tools send (a like-for-like comparison, or a NIC
    /// whose offloads misbehave).
    #[arg(long, requires = "udp")]
    pub no_gsro: bool,

    /// UDP: run the receiving threads (the server's; this end's with -R; both with --bidir)
    /// at real-time priority (SCHED_FIFO 1), so no ordinary task holds a receiver's core
    /// while its socket queue overflows. Needs root or CAP_SYS_NICE where they run, and a
    /// server started with --allow-realtime where it receives.
    #[arg(long)]
    pub realtime: bool,

    /// End the test when this end's receivers have read nothing for this long, in
    /// milliseconds, as iperf3's --rcv-timeout; a server applies its own to every test.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..=LONGEST_MS))]
    pub rcv_timeout: Option<u64>,

    /// TCP client: send this file's bytes (the test ends at its end unless -n or -k says
    /// otherwise), or, receiving (-R), write what arrives to it; as iperf3's -F.
    #[arg(short = 'F', long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,

    /// UDP over IPv4: set Don't Fragment on both ends' datagrams, so one larger than the
    /// path MTU fails to send instead of travelling in fragments.
    #[arg(long, requires = "udp")]
    pub dont_fragment: bool,

    /// Ask the server for its own view of the test (its log lines and what its stream
    /// threads counted per interval), printed after the client's report (iperf3's flag).
    #[arg(long)]
    pub get_server_output: bool,

    /// Kernel pacing per stream (SO_MAX_PACING_RATE) in bits/s, e.g. 1G; 0 = none (as
    /// iperf3's). TCP: a rate whose kernel bursts would come more than half the 10 s stall
    /// limit apart is refused. UDP: paced by it only under the fq qdisc (-b paces anyway).
    #[arg(long = "fq-rate", value_name = "RATE", allow_negative_numbers = true, value_parser = units::parse_rate_or_zero)]
    pub fq_rate_bps: Option<u64>,

    /// IP type of service on every data socket, both ends (iperf3's -S): the DSCP and
    /// ECN byte, 0-255, as 0x10, 16 or 020 (octal, as iperf3 reads it). IPv6 sockets carry
    /// it as the traffic class.
    #[arg(short = 'S', allow_negative_numbers = true, long = "tos", value_name = "TOS", value_parser = parse_tos)]
    pub tos: Option<u8>,

    #[command(flatten)]
    pub transport: TransportArgs,

    /// Send without copying blocks into the kernel. -Z (or =sendfile): sendfile() from a
    /// memfd, as iperf3's -Z; the socket takes page references. =msg: MSG_ZEROCOPY, pages
    /// pinned until the kernel reports the send complete. Loopback copies MSG_ZEROCOPY
    /// pages after all (the report counts it), and a receiver copies either way.
    #[arg(short = 'Z', long, value_name = "METHOD", num_args = 0..=1, require_equals = true,
          default_missing_value = "sendfile", help_heading = "Test")]
    pub zerocopy: Option<ZeroCopy>,

    /// Receive with MSG_TRUNC (as iperf3 3.17+'s --skip-rx-copy): the kernel consumes and
    /// counts the bytes without copying them out; only echoed block headers are copied.
    #[arg(long, help_heading = "Test")]
    pub skip_rx_copy: bool,
}

/// The data connections' flags: part of every test, and shared by `compare`.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct TransportArgs {
    /// Congestion control for the data connections (cubic, bbr, reno; see
    /// /proc/sys/net/ipv4/tcp_available_congestion_control). Default: the system's.
    #[arg(
        short = 'C',
        long,
        value_name = "ALGO",
        allow_negative_numbers = true,
        help_heading = "Test",
        visible_alias = "linux-congestion"
    )]
    pub congestion: Option<String>,

    /// Do not echo block headers: no block RTT, kernel RTT only.
    #[arg(long, help_heading = "Test")]
    pub no_echo: bool,

    /// TCP maximum segment size (TCP_MAXSEG, iperf3's -M), 88 to 9216 bytes: set on the
    /// data connections before their handshake, it caps the segments both ways (the MTU
    /// less 40 on IPv4; timestamps take 12 more). The header's MSS is what the kernel uses.
    #[arg(
        short = 'M',
        long = "set-mss",
        value_name = "BYTES",
        allow_negative_numbers = true,
        help_heading = "Test",
        value_parser = parse_mss
    )]
    pub mss: Option<u32>,

    /// TCP_NODELAY on the data connections, both ends (iperf3's -N): each write leaves at
    /// once instead of waiting to fill a segment (Nagle). Blocks below the MSS (-l 1k) are
    /// then sent one segment each.
    #[arg(short = 'N', long, help_heading = "Test")]
    pub no_delay: bool,

    /// Receivers keep SO_RCVLOWAT at one byte. By default, when both ends are on one host
    /// and the MSS is at most 4096, a stream's receiver waits for a read's worth (128 KiB or
    /// the block) while the stream runs above 5.2 Gbit/s; the kernel then ACKs each arrival
    /// at once, which frees the sender sooner (measured faster over loopback at -M 1448).
    #[arg(long, help_heading = "Test")]
    pub no_rcvlowat: bool,
}

/// `-P`: a count; one too large even for the wire gets the rule's words, not "out of
/// range for u16" (the range itself is `validate`'s).
fn parse_streams(text: &str) -> Result<u16, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("streams must be 1 to {}", Limits::PROTOCOL.max_streams))
}

/// `-b RATE[/BURST]`: a rate (0: as fast as possible) and the burst, a count of blocks
/// (its range is `validate`'s).
fn parse_bitrate(text: &str) -> Result<(u64, Option<u32>), String> {
    let Some((rate, burst)) = text.split_once('/') else {
        return units::parse_rate_or_zero(text).map(|r| (r, None));
    };
    let burst = burst
        .trim()
        .parse()
        .map_err(|_| format!("'{burst}': a burst is a count of blocks, 1 to 1000"))?;
    Ok((units::parse_rate_or_zero(rate)?, Some(burst)))
}

/// `-M`: a number of bytes (the range is `validate`'s, which says it for `-M 0` too).
fn parse_mss(text: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("the MSS is a number of bytes, {MIN_MSS} to {MAX_MSS}"))
}

/// `-S`: a byte in C's notation, as iperf3 reads it (`strtol` base 0): `0x10`, `020`
/// (octal), `16`.
fn parse_tos(text: &str) -> Result<u8, String> {
    let t = text.trim();
    c_number(t)
        .and_then(|v| u8::try_from(v).ok())
        .ok_or_else(|| format!("'{t}': the TOS byte is 0 to 255 (0x00 to 0xff)"))
}

/// A number in C's notation, as iperf3 reads its `-S`, `--dscp` and `-A` (`strtol` base
/// 0): `0x10` (hex), `020` (octal), `16`.
pub(crate) fn c_number(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

impl TestArgs {
    /// The parameters these flags ask for; `pin` is the `-A LOCAL/REMOTE` remote plan.
    pub fn to_params(&self, pin: Option<Affinity>) -> TestParams {
        let TestArgs {
            streams,
            len,
            window_bytes,
            force_window,
            duration,
            interval,
            omit,
            reverse,
            bidir,
            udp,
            rate_bps,
            no_gsro,
            realtime,
            rcv_timeout,
            file,
            dont_fragment,
            get_server_output,
            fq_rate_bps,
            tos,
            transport,
            zerocopy,
            skip_rx_copy,
            bytes,
            blocks,
        } = self.clone();
        // -n/-k end the test; -t, which they exclude, becomes the longest it may run (at
        // most the rows a test may make at -i).
        let duration = match bytes.or(blocks) {
            Some(_) => {
                let step = interval
                    .filter(|i| !i.is_zero())
                    .unwrap_or(Duration::from_secs(1));
                let rows = u32::try_from(crate::wire::params::MAX_INTERVALS).unwrap_or(u32::MAX);
                Limits::PROTOCOL.max_duration.min(step.saturating_mul(rows))
            }
            None => duration,
        };
        TestParams {
            streams,
            len,
            window_bytes,
            force_window,
            duration,
            interval,
            omit,
            reverse,
            bidir,
            udp,
            rate_bps: rate_bps.map(|(r, _)| r),
            no_gsro,
            realtime,
            dont_fragment,
            get_server_output,
            fq_rate_bps,
            tos,
            transport: transport.to_transport(),
            pin,
            zerocopy,
            skip_rx_copy,
            bytes,
            blocks,
            burst: rate_bps.and_then(|(_, b)| b),
            file,
            rcv_timeout: rcv_timeout.map(std::time::Duration::from_millis),
        }
    }
}

impl TransportArgs {
    pub fn to_transport(&self) -> Transport {
        let TransportArgs {
            congestion,
            no_echo,
            mss,
            no_delay,
            no_rcvlowat,
        } = self.clone();
        Transport {
            congestion,
            no_echo,
            mss,
            no_delay,
            no_rcvlowat,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        test: TestArgs,
    }

    fn parse(argv: &[&str]) -> Result<TestParams, clap::error::ErrorKind> {
        <Only as clap::Parser>::try_parse_from(
            std::iter::once("pinperf").chain(argv.iter().copied()),
        )
        .map(|o| o.test.to_params(None))
        .map_err(|e| e.kind())
    }

    /// No flags make the same parameters as the code's default, and each flag lands in
    /// its own field.
    #[test]
    fn no_flags_make_the_default_parameters() {
        assert_eq!(parse(&[]), Ok(TestParams::defaults()));
        let p = parse(&["-P", "3", "-l", "8k", "-t", "2", "-C", "bbr", "-N", "-R"]).unwrap();
        assert_eq!(
            (p.streams, p.len, p.duration),
            (3, Some(8192), Duration::from_secs(2))
        );
        assert_eq!(p.transport.congestion.as_deref(), Some("bbr"));
        assert!(p.transport.no_delay && p.reverse && !p.bidir);
        assert_eq!(
            parse(&["-P", "70000"]),
            Err(clap::error::ErrorKind::ValueValidation)
        );
    }

    #[test]
    fn tos_reads_hex_octal_and_decimal() {
        for (text, want) in [
            ("0x10", Ok(16)),
            ("0XfF", Ok(255)),
            ("020", Ok(16)),
            ("16", Ok(16)),
            ("0", Ok(0)),
        ] {
            assert_eq!(parse_tos(text), want, "{text}");
        }
        for text in ["256", "0x100", "-1", "08", "ef", ""] {
            assert_eq!(
                parse_tos(text),
                Err(format!("'{text}': the TOS byte is 0 to 255 (0x00 to 0xff)"))
            );
        }
    }

    #[test]
    fn mss_must_be_a_number() {
        assert!(parse_mss("-1").unwrap_err().contains("88 to 9216"));
    }

    /// A bare `-Z` is its default method.
    #[test]
    fn zerocopy_methods_parse() {
        let z = |argv: &[&str]| parse(argv).map(|p| p.zerocopy);
        assert_eq!(z(&[]), Ok(None));
        assert_eq!(z(&["-Z"]), Ok(Some(ZeroCopy::DEFAULT)));
        assert_eq!(z(&["--zerocopy"]), Ok(Some(ZeroCopy::DEFAULT)));
        assert_eq!(z(&["-Z=msg"]), Ok(Some(ZeroCopy::Msg)));
        assert_eq!(z(&["--zerocopy=sendfile"]), Ok(Some(ZeroCopy::Sendfile)));
        assert_eq!(
            z(&["--zerocopy=splice"]),
            Err(clap::error::ErrorKind::InvalidValue)
        );
    }
}
