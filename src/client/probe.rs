//! `-A auto`, one TCP stream to a server on this host: whether the stream's sender and
//! receiver run faster sharing one core (paired) or on two (split) depends on the block and
//! segment size, the congestion control and the host itself, and the answer differs from
//! one host to the next. So a test long enough to afford it measures both first: a short
//! run each way against an in-process server, with the test's own settings, output unseen.

use std::io;
use std::time::Duration;

use crate::config::ClientConfig;
use crate::data::pin::Affinity;
use crate::report::Formatter;
use crate::report::model::{Header, IntervalReport, Summary};

/// How long each placement runs.
pub const PROBE: Duration = Duration::from_millis(300);
/// Tests shorter than this keep the measured rule ([`crate::data::pin::split_one_stream`]):
/// two probes would add a third or more to them.
pub const PROBED_FROM: Duration = Duration::from_secs(2);

/// How much faster split must run to be chosen: paired is the rule everywhere else, and
/// the two 300 ms runs differ by a few percent from noise alone.
pub const SPLIT_MARGIN: f64 = 1.03;

/// What the two runs measured, receiver's bits per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probed {
    pub paired: f64,
    pub split: f64,
}

impl Probed {
    /// Split only where it measured more than [`SPLIT_MARGIN`] faster.
    pub fn split_wins(&self) -> bool {
        self.split > self.paired * SPLIT_MARGIN
    }

    /// The header's placement words for the winner, `mine` and `theirs` the two cores.
    pub fn why(&self, mine: usize, theirs: usize) -> String {
        let gbps = |bps: f64| bps / 1e9;
        let (won, than, w, l) = match self.split_wins() {
            true => (
                format!(
                    "its sender and receiver on two cores (this end cpu{mine}, the server \
                     cpu{theirs})"
                ),
                "faster than sharing one",
                self.split,
                self.paired,
            ),
            false => (
                format!("its sender and receiver sharing cpu{mine}"),
                match self.paired >= self.split {
                    true => "faster than two cores",
                    false => "within 3 % of two cores",
                },
                self.paired,
                self.split,
            ),
        };
        format!(
            "same host, one stream: {won}, probed {than} ({:.1} against {:.1} Gbit/s, {} ms \
             of each before the test; -A {mine}/{mine} or {mine}/{theirs} skips the probe)",
            gbps(w),
            gbps(l),
            PROBE.as_millis()
        )
    }
}

/// Whether `cfg` is a test the probe serves: `-A auto` with no remote plan, one TCP stream
/// one way at full speed (no `-b`, no `--fq-rate`), at least [`PROBED_FROM`] by the clock
/// (not `-n`/`-k`, not `-F`), to a server named `localhost` or a loopback address, not an
/// iperf3 one by `--peer`, with two cores to choose from.
pub fn wanted(cfg: &ClientConfig, allowed: &[usize]) -> bool {
    let t = &cfg.test;
    let on_this_host = cfg.target.loopback
        || cfg.target.host.as_deref().is_some_and(|h| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
    cfg.placement_probe
        && cfg.affinity == Affinity::Auto
        && t.pin.is_none()
        && t.rate_bps.is_none()
        && t.fq_rate_bps.is_none()
        && cfg.peer != crate::choices::Peer::Iperf3
        && t.streams == 1
        && !t.bidir
        && !t.udp
        && t.bytes.is_none()
        && t.blocks.is_none()
        && t.file.is_none()
        && t.duration >= PROBED_FROM
        && allowed.len() >= 2
        && on_this_host
}

/// Runs the test's settings for [`PROBE`] paired on `mine`, then split to `theirs`, each
/// against its own in-process server. `None` when either run fails (the rule decides).
pub fn run(cfg: &ClientConfig, mine: usize, theirs: usize) -> Option<Probed> {
    let paired = once(cfg, mine, mine)?;
    let split = once(cfg, mine, theirs)?;
    Some(Probed { paired, split })
}

fn once(cfg: &ClientConfig, mine: usize, theirs: usize) -> Option<f64> {
    let mut sub = cfg.clone();
    sub.target.loopback = true;
    sub.target.host = None;
    sub.target.source = Default::default();
    sub.target.peer = crate::choices::Peer::Pinperf;
    sub.peer = crate::choices::Peer::Pinperf;
    sub.same_process = true;
    sub.auth = None;
    sub.iperf3_auth = None;
    sub.quiet = true;
    sub.placement_probe = false;
    sub.cpu_intervals = false;
    sub.affinity = Affinity::List(vec![mine]);
    let t = &mut sub.test;
    t.pin = Some(Affinity::List(vec![theirs]));
    t.duration = PROBE;
    t.interval = Some(PROBE);
    t.omit = Duration::ZERO;
    t.get_server_output = false;
    t.rcv_timeout = None;
    let summary = super::run_with(sub, Box::new(Unseen)).ok()?;
    Some(summary.sum.bits_per_second)
}

/// A probe's report: nothing printed.
struct Unseen;

impl Formatter for Unseen {
    fn header(&mut self, _: &Header) -> io::Result<()> {
        Ok(())
    }
    fn interval(&mut self, _: &IntervalReport) -> io::Result<()> {
        Ok(())
    }
    fn summary(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Target;
    use crate::wire::params::TestParams;

    fn config(host: Option<&str>, test: TestParams) -> ClientConfig {
        let target = Target {
            host: host.map(str::to_string),
            port: 5201,
            source: Default::default(),
            family: crate::os::net::Family::Any,
            connect_timeout: Duration::from_secs(5),
            loopback: host.is_none(),
            peer: crate::choices::Peer::Auto,
        };
        ClientConfig::new(target, test, Affinity::Auto).unwrap()
    }

    fn long() -> TestParams {
        TestParams {
            duration: PROBED_FROM,
            ..TestParams::defaults()
        }
    }

    #[test]
    fn only_a_long_one_stream_tcp_test_on_this_host_is_probed() {
        let two = [0, 1];
        assert!(wanted(&config(None, long()), &two));
        assert!(wanted(&config(Some("127.0.0.1"), long()), &two));
        assert!(wanted(&config(Some("::1"), long()), &two));
        assert!(!wanted(&config(None, long()), &[0]), "one core");
        assert!(
            !wanted(&config(Some("198.18.0.2"), long()), &two),
            "another host"
        );
        let short = TestParams {
            duration: PROBED_FROM / 2,
            ..TestParams::defaults()
        };
        assert!(!wanted(&config(None, short), &two));
        let streams = TestParams {
            streams: 2,
            ..long()
        };
        assert!(!wanted(&config(None, streams), &two));
        let udp = TestParams {
            udp: true,
            ..long()
        };
        assert!(!wanted(&config(None, udp), &two));
        let bytes = TestParams {
            bytes: Some(1 << 30),
            ..long()
        };
        assert!(
            !wanted(&config(None, bytes), &two),
            "-n: its length is unknown"
        );
        let pinned = TestParams {
            pin: Some(Affinity::List(vec![1])),
            ..long()
        };
        assert!(!wanted(&config(None, pinned), &two), "a remote plan");
        let mut listed = config(None, long());
        listed.affinity = Affinity::List(vec![0]);
        assert!(!wanted(&listed, &two), "a local plan");
        let paced = TestParams {
            rate_bps: Some(1_000_000_000),
            ..long()
        };
        assert!(!wanted(&config(None, paced), &two), "-b");
        let mut off = config(None, long());
        off.placement_probe = false;
        assert!(!wanted(&off, &two), "a caller that keeps its placement");
    }

    /// Both placements really run (against in-process servers) and measure what moved.
    #[test]
    fn the_probe_runs_both_placements() {
        let allowed = crate::data::pin::allowed_cpus();
        if allowed.len() < 2 {
            eprintln!("skipped: the_probe_runs_both_placements needs two cores");
            return;
        }
        let p = run(&config(None, long()), allowed[0], allowed[1]).expect("both probes ran");
        assert!(p.paired > 1e8 && p.split > 1e8, "{p:?}");
    }

    #[test]
    fn the_faster_placement_wins_and_a_tie_stays_paired() {
        let p = Probed {
            paired: 20.7e9,
            split: 12.9e9,
        };
        assert!(!p.split_wins());
        let why = p.why(0, 1);
        assert!(
            why.contains("sharing cpu0, probed faster than two cores (20.7 against 12.9"),
            "{why}"
        );
        let s = Probed {
            paired: 15.5e9,
            split: 19.5e9,
        };
        assert!(s.split_wins());
        let why = s.why(0, 1);
        assert!(
            why.contains(
                "this end cpu0, the server cpu1), probed faster than sharing one (19.5 against 15.5"
            ),
            "{why}"
        );
        assert!(
            !Probed {
                paired: 1e9,
                split: 1e9
            }
            .split_wins()
        );
        let close = Probed {
            paired: 20.0e9,
            split: 20.4e9,
        };
        assert!(!close.split_wins(), "within the margin");
        let why = close.why(0, 1);
        assert!(
            why.contains("probed within 3 % of two cores (20.0 against 20.4"),
            "{why}"
        );
    }
}
