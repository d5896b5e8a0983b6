//! The server's address allow-list (`--allow CIDR[,CIDR…]`, IPv4 and IPv6) and its
//! per-source test rate (`--max-tests-per-minute`). The acceptor checks the allow-list on
//! the connection's address before any handshake work; the rate is checked and counted
//! when a test is admitted (tests, not connections: an iperf3 test's streams connect to
//! the control port too). Plain data, no sockets.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// One `ADDR/LEN` network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// `127.0.0.0/8`, `::1/128`, or an address alone (a host).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (a, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| {
            format!("{text:?} is not an address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32)")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("{text}: prefix length must be 0 to {max}"))?,
        };
        // An IPv4-mapped network is the IPv4 one: a client's mapped address is matched
        // as IPv4, so kept as IPv6 it would match nothing.
        let (addr, len) = match addr {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() && len >= 96 => (
                IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED)),
                len - 96,
            ),
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
                return Err(format!(
                    "{text}: an IPv4-mapped network needs a prefix of 96 or more \
                     (::ffff:0:0/96 is every IPv4 address)"
                ));
            }
            other => (other, len),
        };
        let cidr = Cidr { addr, len };
        // Host bits past the prefix are a typo for one of two lists, not a guess to make.
        let network = cidr.network();
        if network != addr {
            return Err(format!(
                "{text}: host bits are set past the /{len}: {network}/{len} for the network, \
                 or {addr} alone for the host"
            ));
        }
        Ok(cidr)
    }

    /// The address with the bits past the prefix cleared.
    fn network(&self) -> IpAddr {
        let keep = |bits: u32| match u32::from(self.len) {
            0 => 0,
            l => u128::MAX << (bits - l),
        };
        match self.addr {
            IpAddr::V4(v4) => {
                let mask = keep(32) as u32;
                IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() & mask))
            }
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & keep(128))),
        }
    }

    /// True when `ip` is inside this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(
                u128::from(net.to_bits()),
                u128::from(ip.to_bits()),
                32,
                self.len,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(net.to_bits(), ip.to_bits(), 128, self.len)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, bits: u32, len: u8) -> bool {
    let shift = bits - u32::from(len);
    shift >= bits || (a >> shift) == (b >> shift)
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// `--allow` lists, comma-separated, the flag possibly repeated.
pub fn parse_list(values: &[String]) -> Result<Vec<Cidr>, String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|item| Cidr::parse(item.trim()).map_err(|why| format!("--allow {why}")))
        .collect()
}

/// True when `ip` may connect: an empty list allows every address.
pub fn allowed(list: &[Cidr], ip: IpAddr) -> bool {
    list.is_empty() || list.iter().any(|c| c.contains(ip))
}

/// The window `--max-tests-per-minute` counts in.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Tests started per source in the last minute. A source is an IPv4 address or an IPv6
/// /64 (one host commonly holds a whole /64).
#[derive(Debug, Default)]
pub struct Rate {
    started: HashMap<u128, VecDeque<Instant>>,
}

impl Rate {
    pub(crate) fn source(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v4) => u128::from(v4.to_bits()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => u128::from(v4.to_bits()),
                None => v6.to_bits() & !((1u128 << 64) - 1),
            },
        }
    }

    /// `Err(wait)` when `ip` already started `max` tests within the last minute: the time
    /// until the oldest of them leaves the window.
    pub fn check(&mut self, ip: IpAddr, max: u32, now: Instant) -> Result<(), Duration> {
        self.prune(now);
        match self.started.get(&Self::source(ip)) {
            Some(q) if q.len() >= max as usize => Err(q.front().map_or(RATE_WINDOW, |&t| {
                (t + RATE_WINDOW).saturating_duration_since(now)
            })),
            _ => Ok(()),
        }
    }

    /// Checks, and when allowed counts a test from `ip` started at `now`.
    pub fn take(&mut self, ip: IpAddr, max: u32, now: Instant) -> Result<(), Duration> {
        self.check(ip, max, now)?;
        self.started
            .entry(Self::source(ip))
            .or_default()
            .push_back(now);
        Ok(())
    }

    fn prune(&mut self, now: Instant) {
        self.started.retain(|_, q| {
            while q
                .front()
                .is_some_and(|&t| now.saturating_duration_since(t) >= RATE_WINDOW)
            {
                q.pop_front();
            }
            !q.is_empty()
        });
    }
}

/// Failures a source may have within [`PENALTY_WINDOW`] before it is locked out.
pub const FREE_FAILURES: u32 = 3;

/// How long a source's failures are remembered.
pub const PENALTY_WINDOW: Duration = Duration::from_secs(60);

/// The first lockout; each further failure within the window doubles it, up to
/// [`LOCKOUT_MAX`]. A person who mistyped a secret three times waits a second.
pub const LOCKOUT_FIRST: Duration = Duration::from_secs(1);
pub const LOCKOUT_MAX: Duration = Duration::from_secs(60);

/// Sources remembered at most; past it the oldest are forgotten (a flood of spoofed
/// sources costs memory only up to it).
const MAX_SOURCES: usize = 4096;

/// Failures per source (as [`Rate`] counts sources): a wrong secret, a handshake that
/// took the test slot and ran no test. Past [`FREE_FAILURES`] within [`PENALTY_WINDOW`]
/// the source is locked out, its new connections closed unanswered until the lockout ends.
#[derive(Debug, Default)]
pub struct Penalties {
    by_source: HashMap<u128, Penalty>,
}

#[derive(Debug, Clone, Default)]
struct Penalty {
    /// Its failures within the last [`PENALTY_WINDOW`], oldest first.
    failures: VecDeque<Instant>,
    until: Option<Instant>,
    /// Connections closed during the current lockout.
    closed: u64,
}

impl Penalty {
    fn locked(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    fn last(&self) -> Option<Instant> {
        self.failures.back().copied()
    }
}

impl Penalties {
    /// A failure of `ip` at `now`: the lockout it now serves, if this failure began one,
    /// and the failures within the window before it.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Option<(Duration, u32)> {
        let source = Rate::source(ip);
        if self.by_source.len() >= MAX_SOURCES && !self.by_source.contains_key(&source) {
            self.evict(now);
        }
        let p = self.by_source.entry(source).or_default();
        while p
            .failures
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= PENALTY_WINDOW)
        {
            p.failures.pop_front();
        }
        p.failures.push_back(now);
        let before = u32::try_from(p.failures.len() - 1).unwrap_or(u32::MAX);
        let past = before.checked_sub(FREE_FAILURES)?;
        let lockout = LOCKOUT_FIRST
            .saturating_mul(1u32 << past.min(16))
            .min(LOCKOUT_MAX);
        p.until = Some(now + lockout);
        p.closed = 0;
        Some((lockout, before))
    }

    /// Room for a new source: those neither locked out nor failed within the window go
    /// first, then the one whose last failure is oldest (never a source locked out now,
    /// unless every one is).
    fn evict(&mut self, now: Instant) {
        self.by_source.retain(|_, p| {
            p.locked(now)
                || p.last()
                    .is_some_and(|t| now.saturating_duration_since(t) < PENALTY_WINDOW)
        });
        while self.by_source.len() >= MAX_SOURCES {
            let oldest = self
                .by_source
                .iter()
                .min_by_key(|(_, p)| (p.locked(now), p.last()))
                .map(|(&k, _)| k);
            match oldest {
                Some(k) => self.by_source.remove(&k),
                None => break,
            };
        }
    }

    /// Whether `ip` is locked out at `now` (its connection is then counted as closed).
    pub fn locked(&mut self, ip: IpAddr, now: Instant) -> bool {
        match self.by_source.get_mut(&Rate::source(ip)) {
            Some(p) if p.locked(now) => {
                p.closed += 1;
                true
            }
            _ => false,
        }
    }

    /// Connections of `ip` closed during its lockout, once it is over (taken: said once).
    pub fn closed_while_locked(&mut self, ip: IpAddr, now: Instant) -> Option<u64> {
        let p = self.by_source.get_mut(&Rate::source(ip))?;
        match p.locked(now) || p.closed == 0 {
            true => None,
            false => Some(std::mem::take(&mut p.closed)),
        }
    }
}

/// What a source that just began a lockout is told, after the reason it failed:
/// `(lockout, failures)` from [`Penalties::failed`].
pub fn lockout_words((lockout, failures): (Duration, u32)) -> String {
    format!(
        "{failures} failures from this address within {} s before this one: its \
         connections are refused for {} s",
        PENALTY_WINDOW.as_secs(),
        lockout.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidrs_match_their_networks_only() {
        let list = parse_list(&["127.0.0.0/8, 2001:db8::/32".into(), "192.0.2.7".into()]).unwrap();
        for (addr, expected) in [
            ("127.0.0.1", true),
            ("127.255.0.9", true),
            ("128.0.0.1", false),
            ("::ffff:127.0.0.1", true),
            ("2001:db8:1::5", true),
            ("2001:db9::5", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("::1", false),
        ] {
            assert_eq!(allowed(&list, ip(addr)), expected, "{addr}");
        }
        assert!(allowed(&[], ip("203.0.113.1")), "no list: everyone");
        let all = parse_list(&["0.0.0.0/0,::/0".into()]).unwrap();
        assert!(allowed(&all, ip("203.0.113.1")) && allowed(&all, ip("2001:db8::1")));
        assert_eq!(
            Cidr::parse("127.0.0.2/32").unwrap().to_string(),
            "127.0.0.2/32"
        );
        // An IPv4-mapped network is its IPv4 network, and matches a client either way.
        let mapped = parse_list(&["::ffff:127.0.0.2/128".into()]).unwrap();
        assert_eq!(mapped[0].to_string(), "127.0.0.2/32");
        assert!(allowed(&mapped, ip("127.0.0.2")) && allowed(&mapped, ip("::ffff:127.0.0.2")));
        assert!(!allowed(&mapped, ip("127.0.0.3")));
    }

    #[test]
    fn bad_cidrs_name_the_flag_and_the_rule() {
        for (text, err) in [
            (
                "10.0.0.0/33",
                "--allow 10.0.0.0/33: prefix length must be 0 to 32",
            ),
            ("::/129", "--allow ::/129: prefix length must be 0 to 128"),
            (
                "127.0.0.2/8",
                "--allow 127.0.0.2/8: host bits are set past the /8: 127.0.0.0/8 for the \
                 network, or 127.0.0.2 alone for the host",
            ),
            (
                "::ffff:10.0.0.0/64",
                "--allow ::ffff:10.0.0.0/64: an IPv4-mapped network needs a prefix of 96 or \
                 more (::ffff:0:0/96 is every IPv4 address)",
            ),
            (
                "10.0.0/8",
                "--allow \"10.0.0/8\" is not an address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32)",
            ),
            (
                "",
                "--allow \"\" is not an address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32)",
            ),
        ] {
            assert_eq!(parse_list(&[text.into()]).unwrap_err(), err, "{text}");
        }
    }

    #[test]
    fn the_rate_counts_per_source_per_minute() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Rate::default();
        assert_eq!(r.take(ip("192.0.2.1"), 2, at(0)), Ok(()));
        assert_eq!(r.take(ip("192.0.2.1"), 2, at(10)), Ok(()));
        assert_eq!(
            r.take(ip("192.0.2.1"), 2, at(20)),
            Err(Duration::from_secs(40))
        );
        assert_eq!(r.take(ip("192.0.2.2"), 2, at(20)), Ok(()), "another source");
        assert_eq!(
            r.take(ip("192.0.2.1"), 2, at(60)),
            Ok(()),
            "the first left the window"
        );
        // One IPv6 /64 is one source.
        assert_eq!(r.take(ip("2001:db8::1"), 1, at(0)), Ok(()));
        assert!(r.take(ip("2001:db8::2"), 1, at(1)).is_err());
        assert_eq!(r.take(ip("2001:db8:0:1::1"), 1, at(1)), Ok(()));
    }

    /// Three failures are free; the fourth locks the source out for a second, each
    /// further one doubles it; other sources and an old failure's window are untouched.
    #[test]
    fn failures_past_the_free_ones_lock_a_source_out_for_longer_each_time() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut p = Penalties::default();
        let a = ip("192.0.2.1");
        for _ in 0..FREE_FAILURES {
            assert_eq!(p.failed(a, t0), None);
        }
        assert_eq!(p.failed(a, t0), Some((Duration::from_secs(1), 3)));
        assert!(p.locked(a, t0) && p.locked(a, t0));
        assert!(!p.locked(ip("192.0.2.2"), t0), "another source");
        assert_eq!(p.closed_while_locked(a, t0), None, "still locked");
        assert!(!p.locked(a, s(1)));
        assert_eq!(p.closed_while_locked(a, s(1)), Some(2));
        assert_eq!(p.closed_while_locked(a, s(1)), None, "said once");
        assert_eq!(p.failed(a, s(1)), Some((Duration::from_secs(2), 4)));
        assert_eq!(p.failed(a, s(2)), Some((Duration::from_secs(4), 5)));
        assert_eq!(p.failed(a, s(200)), None, "a minute later, free again");
        // Failures 50 s apart never pile up: the window slides.
        let b = ip("192.0.2.3");
        for k in 0..8 {
            assert_eq!(p.failed(b, s(1000 + 50 * k)), None, "failure {k}");
        }
    }
}
