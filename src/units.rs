//! Units on the command line and in output. Sizes are binary (`64k` = 65536 bytes),
//! rates are decimal bits (`10G` = 10^10 bit/s), durations are seconds unless suffixed.
//! Parsing is checked: an overflow is an error, never a wrap.

use std::time::Duration;

/// Parses a byte size: a number with an optional binary suffix (`k`, `m`, `g`, `t`,
/// either case, optionally followed by `iB` or `B`); a fraction when it comes to whole
/// bytes (`1.5M`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, suffix) = split_number(text);
    if digits.is_empty() {
        return Err(format!(
            "'{text}' is not a size (examples: 8192, 64k, 256M, 1G)"
        ));
    }
    // A fraction as iperf3 takes it (-w 1.5M), when it comes to whole bytes.
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let not_a_number = || format!("'{text}' is not a size: '{digits}' is not a number");
    let whole: u64 = match whole {
        "" => 0,
        w => w.parse().map_err(|_| not_a_number())?,
    };
    if fraction.contains('.') || (fraction.is_empty() && digits.ends_with('.')) {
        return Err(not_a_number());
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "'{text}' has an unknown size suffix '{suffix}' (use k, M, G or T)"
            ));
        }
    };
    let too_large = || format!("'{text}' is too large");
    let mut bytes = whole.checked_mul(1u64 << shift).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        // fraction / 10^digits of the unit, exactly: numerator over denominator.
        let denominator = 10u128
            .checked_pow(fraction.len() as u32)
            .filter(|_| fraction.len() <= 18)
            .ok_or_else(not_a_number)?;
        let numerator = fraction.parse::<u128>().map_err(|_| not_a_number())? << shift;
        if numerator % denominator != 0 {
            return Err(format!(
                "'{text}' is not a whole number of bytes ({} and a fraction)",
                u128::from(bytes) + numerator / denominator
            ));
        }
        let part = u64::try_from(numerator / denominator).map_err(|_| too_large())?;
        bytes = bytes.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(bytes)
}

/// Formats a byte count as the shortest exact binary form (`65536` → `64k`), the inverse of
/// [`parse_size`].
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "k")] {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Parses a rate in bits per second with decimal suffixes (`k`, `M`, `G`, `T`); a fraction
/// is allowed (`2.5G`).
pub fn parse_rate_bps(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, suffix) = split_number(text);
    let value: f64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a rate (examples: 100M, 1G, 2.5G)"))?;
    let scale = match suffix
        .to_ascii_lowercase()
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
    {
        "" => 1e0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => {
            return Err(format!(
                "'{text}' has an unknown rate suffix '{suffix}' (use k, M, G or T)"
            ));
        }
    };
    let bps = value * scale;
    if bps < 1.0 {
        return Err(format!("'{text}' is less than 1 bit/s"));
    }
    if !bps.is_finite() || bps > u64::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bps.round() as u64)
}

/// `-b`: a rate as [`parse_rate_bps`] reads it, or `0` (as fast as possible).
pub fn parse_rate_or_zero(text: &str) -> Result<u64, String> {
    match text.trim() {
        "0" => Ok(0),
        _ => parse_rate_bps(text),
    }
}

/// A rate in bits per second, short: `100M`, `2.5G`, `800k`.
pub fn format_rate(bps: u64) -> String {
    let (scale, suffix) = match bps {
        b if b >= 1_000_000_000 => (1e9, "G"),
        b if b >= 1_000_000 => (1e6, "M"),
        b if b >= 1_000 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let v = bps as f64 / scale;
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

/// Parses a duration: seconds as a number (`3`, `0.5`), or with a suffix `s`, `ms`, `m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, suffix) = split_number(text);
    let value: f64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (examples: 10, 0.5, 250ms, 2m)"))?;
    let secs = match suffix {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        _ => {
            return Err(format!(
                "'{text}' has an unknown time suffix '{suffix}' (use ms, s or m)"
            ));
        }
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Megabits per second (decimal) for `bytes` moved in `secs`; 0 for an empty span.
pub fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    (&text[..end], &text[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_binary() {
        let table: &[(&str, Result<u64, &str>)] = &[
            ("8192", Ok(8192)),
            ("64k", Ok(65536)),
            ("64K", Ok(65536)),
            ("64KiB", Ok(65536)),
            ("256M", Ok(256 << 20)),
            ("1g", Ok(1 << 30)),
            ("2T", Ok(2 << 40)),
            ("", Err("'' is not a size (examples: 8192, 64k, 256M, 1G)")),
            (
                "k",
                Err("'k' is not a size (examples: 8192, 64k, 256M, 1G)"),
            ),
            ("1.5M", Ok(3 << 19)),
            ("0.5k", Ok(512)),
            (".25G", Ok(1 << 28)),
            (
                "1.3k",
                Err("'1.3k' is not a whole number of bytes (1331 and a fraction)"),
            ),
            (
                "1.5",
                Err("'1.5' is not a whole number of bytes (1 and a fraction)"),
            ),
            (
                "1.2.3M",
                Err("'1.2.3M' is not a size: '1.2.3' is not a number"),
            ),
            ("1.M", Err("'1.M' is not a size: '1.' is not a number")),
            (".", Err("'.' is not a size: '.' is not a number")),
            (
                "10x",
                Err("'10x' has an unknown size suffix 'x' (use k, M, G or T)"),
            ),
            ("99999999999T", Err("'99999999999T' is too large")),
        ];
        for (input, expected) in table {
            let got = parse_size(input);
            assert_eq!(got, expected.map_err(str::to_string), "input {input:?}");
        }
    }

    #[test]
    fn sizes_round_trip() {
        for bytes in [
            1,
            1000,
            1024,
            8192,
            65536,
            131072,
            1 << 20,
            3 << 20,
            1 << 30,
            5 << 40,
            1536,
        ] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes), "{bytes}");
        }
        assert_eq!(format_size(65536), "64k");
        assert_eq!(format_size(1536), "1536");
    }

    #[test]
    fn rates_parse_as_decimal_bits() {
        assert_eq!(parse_rate_bps("10G"), Ok(10_000_000_000));
        assert_eq!(parse_rate_bps("200M"), Ok(200_000_000));
        assert_eq!(parse_rate_bps("2.5g"), Ok(2_500_000_000));
        assert_eq!(parse_rate_bps("1Gbit/s"), Ok(1_000_000_000));
        assert!(parse_rate_bps("fast").is_err());
        // lab --rate 0 said "out of range" and not which.
        assert_eq!(parse_rate_bps("0"), Err("'0' is less than 1 bit/s".into()));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn mbps_is_decimal_megabits() {
        assert_eq!(mbps(125_000_000, 1.0), 1000.0);
        assert_eq!(mbps(1, 0.0), 0.0);
    }
}
