//! The enumerated choices the command line offers and the reports echo (clap derives on
//! them): a leaf module, so `cli` needs neither `report` nor `stream`.

/// Output formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    JsonLines,
    Csv,
    /// One document in iperf3 3.x's `-J` shape and types, pinperf's own under "pinperf".
    #[value(name = "iperf3-json")]
    Iperf3Json,
    /// iperf3 3.x's text report (its lines, columns and units), for scripts that read it.
    #[value(name = "iperf3-text")]
    Iperf3Text,
    /// iperf3's --json-stream: a line per event (start, each interval, end), as it runs.
    #[value(name = "iperf3-json-stream")]
    Iperf3JsonStream,
    /// iperf3's --json-stream --json-stream-full-output: the event lines, then the whole
    /// iperf3-json document.
    #[value(name = "iperf3-json-stream-full")]
    Iperf3JsonStreamFull,
}

/// What the client's server speaks (`--peer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// pinperf, or iperf3 when the server stays silent after pinperf's preamble (an iperf3
    /// server waits for its cookie; it is then sent).
    #[default]
    Auto,
    /// A pinperf server.
    Pinperf,
    /// An iperf3 server (3.x): its control protocol, pinperf's pinned threads here.
    Iperf3,
}

/// `compare`'s output formats: one table, so no live event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableFormat {
    Text,
    Json,
    Csv,
}

impl From<TableFormat> for Format {
    fn from(f: TableFormat) -> Format {
        match f {
            TableFormat::Text => Format::Text,
            TableFormat::Json => Format::Json,
            TableFormat::Csv => Format::Csv,
        }
    }
}

/// How the sender drives its streams.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// One pinned thread per stream, blocking writes (the default).
    Threads,
    /// One thread for all streams, non-blocking writes and poll() (thrulay's client).
    Single,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Threads => "threads",
            Engine::Single => "single",
        })
    }
}

/// How `-Z` sends a block without copying it into the kernel (`--zerocopy=METHOD`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ZeroCopy {
    /// sendfile(2) from a memfd: the socket takes page references (iperf3's -Z). -Z's
    /// default: it cost the least CPU per GB in bench-scripts/zerocopy-compare.sh.
    Sendfile,
    /// send(MSG_ZEROCOPY): the kernel pins the block's pages until it reports the send
    /// complete; the stream thread reaps those completions.
    Msg,
}

impl ZeroCopy {
    /// What `-Z` alone means.
    pub const DEFAULT: ZeroCopy = ZeroCopy::Sendfile;
}

impl std::fmt::Display for ZeroCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ZeroCopy::Sendfile => "sendfile",
            ZeroCopy::Msg => "msg",
        })
    }
}

/// The text rows' rate unit (`-f`, as iperf3's): lower case bits per second, decimal
/// (`k` = 1000 bit/s); upper case bytes per second, binary (`K` = 1024 B/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RateUnit {
    /// Kbit/s.
    #[value(name = "k")]
    KiloBits,
    /// Mbit/s (the default).
    #[default]
    #[value(name = "m")]
    MegaBits,
    /// Gbit/s.
    #[value(name = "g")]
    GigaBits,
    /// Tbit/s.
    #[value(name = "t")]
    TeraBits,
    /// KiB/s.
    #[value(name = "K")]
    KiloBytes,
    /// MiB/s.
    #[value(name = "M")]
    MegaBytes,
    /// GiB/s.
    #[value(name = "G")]
    GigaBytes,
    /// TiB/s.
    #[value(name = "T")]
    TeraBytes,
    /// iperf3's adaptive bits (`a`, its default): `--format iperf3-text` picks Kbit/s to
    /// Tbit/s per figure; pinperf's own text shows Mb/s.
    #[value(name = "a")]
    AdaptiveBits,
    /// iperf3's adaptive bytes (`A`): in `--format iperf3-text` KByte/s to TByte/s per
    /// figure; pinperf's own text shows MiB/s.
    #[value(name = "A")]
    AdaptiveBytes,
}

impl RateUnit {
    /// iperf3's `-f` letter for this unit.
    pub fn letter(self) -> char {
        match self {
            RateUnit::KiloBits => 'k',
            RateUnit::MegaBits => 'm',
            RateUnit::GigaBits => 'g',
            RateUnit::TeraBits => 't',
            RateUnit::KiloBytes => 'K',
            RateUnit::MegaBytes => 'M',
            RateUnit::GigaBytes => 'G',
            RateUnit::TeraBytes => 'T',
            RateUnit::AdaptiveBits => 'a',
            RateUnit::AdaptiveBytes => 'A',
        }
    }

    /// `bits_per_second` in this unit.
    pub fn scale(self, bits_per_second: f64) -> f64 {
        let bytes = bits_per_second / 8.0;
        match self {
            RateUnit::KiloBits => bits_per_second / 1e3,
            RateUnit::MegaBits | RateUnit::AdaptiveBits => bits_per_second / 1e6,
            RateUnit::GigaBits => bits_per_second / 1e9,
            RateUnit::TeraBits => bits_per_second / 1e12,
            RateUnit::KiloBytes => bytes / 1024.0,
            RateUnit::MegaBytes | RateUnit::AdaptiveBytes => bytes / (1024.0 * 1024.0),
            RateUnit::GigaBytes => bytes / (1024.0 * 1024.0 * 1024.0),
            RateUnit::TeraBytes => bytes / (1024.0 * 1024.0 * 1024.0 * 1024.0),
        }
    }

    /// The column heading: `Mb/s`, `GiB/s`, ... (bytes are binary, and say so).
    pub fn label(self) -> &'static str {
        match self {
            RateUnit::KiloBits => "Kb/s",
            RateUnit::MegaBits | RateUnit::AdaptiveBits => "Mb/s",
            RateUnit::GigaBits => "Gb/s",
            RateUnit::TeraBits => "Tb/s",
            RateUnit::KiloBytes => "KiB/s",
            RateUnit::MegaBytes | RateUnit::AdaptiveBytes => "MiB/s",
            RateUnit::GigaBytes => "GiB/s",
            RateUnit::TeraBytes => "TiB/s",
        }
    }
}

/// `--cntl-ka[=IDLE/INTV/CNT]`: keepalive probes after IDLE seconds of silence, INTV
/// seconds apart, CNT of them; each left out is the system's (`net.ipv4.tcp_keepalive_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keepalive {
    pub idle: Option<std::time::Duration>,
    pub interval: Option<std::time::Duration>,
    pub count: Option<u32>,
}

impl Keepalive {
    /// iperf3's `IDLE/INTV/CNT` (whole seconds; each may be empty, and 0 is the system's),
    /// refused as iperf3 refuses it when IDLE is not above CNT × INTV.
    pub fn parse(text: &str) -> Result<Keepalive, String> {
        let mut fields = text.splitn(3, '/').map(str::trim);
        let mut next = |what: &str| -> Result<Option<u32>, String> {
            match fields.next().filter(|f| !f.is_empty()) {
                None => Ok(None),
                Some(f) => f
                    .parse::<u32>()
                    .map(|v| (v > 0).then_some(v))
                    .map_err(|_| format!("'{text}': {what} must be whole seconds (IDLE/INTV/CNT)")),
            }
        };
        let secs = |v: Option<u32>| v.map(|s| std::time::Duration::from_secs(u64::from(s)));
        let (idle, interval, count) = (next("IDLE")?, next("INTV")?, next("CNT")?);
        if let Some(idle) = idle
            && u64::from(idle) <= u64::from(count.unwrap_or(0)) * u64::from(interval.unwrap_or(0))
        {
            return Err(format!(
                "'{text}': IDLE must be more than CNT × INTV (probes would overlap)"
            ));
        }
        Ok(Keepalive {
            idle: secs(idle),
            interval: secs(interval),
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iperf3's `-f`: lower case decimal bits, upper case binary bytes.
    #[test]
    fn rate_units_scale_bits_per_second() {
        let bps = 8.0 * 1024.0 * 1024.0 * 1024.0; // 1 GiB/s
        for (unit, value, label) in [
            (RateUnit::KiloBits, 8_589_934.592, "Kb/s"),
            (RateUnit::MegaBits, 8_589.934592, "Mb/s"),
            (RateUnit::GigaBits, 8.589934592, "Gb/s"),
            (RateUnit::KiloBytes, 1_048_576.0, "KiB/s"),
            (RateUnit::MegaBytes, 1024.0, "MiB/s"),
            (RateUnit::GigaBytes, 1.0, "GiB/s"),
            (RateUnit::TeraBits, 0.008589934592, "Tb/s"),
            (RateUnit::TeraBytes, 1.0 / 1024.0, "TiB/s"),
        ] {
            assert!((unit.scale(bps) - value).abs() < 1e-6, "{unit:?}");
            assert_eq!(unit.label(), label);
        }
        assert_eq!(RateUnit::default(), RateUnit::MegaBits);
        // iperf3's adaptive letters: pinperf's own text shows them in Mb/s and MiB/s.
        assert_eq!(RateUnit::AdaptiveBits.label(), "Mb/s");
        assert_eq!(RateUnit::AdaptiveBytes.scale(bps), 1024.0);
        let letters: String = [
            RateUnit::KiloBits,
            RateUnit::MegaBits,
            RateUnit::GigaBits,
            RateUnit::KiloBytes,
            RateUnit::MegaBytes,
            RateUnit::GigaBytes,
            RateUnit::AdaptiveBits,
            RateUnit::AdaptiveBytes,
        ]
        .map(RateUnit::letter)
        .iter()
        .collect();
        assert_eq!(letters, "kmgKMGaA");
    }
}
