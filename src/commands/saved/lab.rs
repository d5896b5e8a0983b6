//! The lab's figures as a document carries them (`-J`'s `lab` member) and as its text
//! run prints them: what `pinperf report` and `--html` read back from a saved lab run.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// Something at the client's and at the server's end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ends<T> {
    pub client: T,
    pub server: T,
}

/// The emulated path, as `lab_path` and `lab.path`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabPath {
    pub rtt_ms: f64,
    pub rate_bps: u64,
    pub queue_bytes: u64,
    pub bdp_bytes: u64,
    /// Random-loss probability of each packet, 0 to 1.
    pub loss: f64,
    pub mtu: u32,
    pub namespaces: Ends<String>,
    pub addresses: Ends<Ipv4Addr>,
    /// The CPU each relay thread is pinned to; null when unpinned.
    pub relay_cpus: RelayCpus,
    /// `--blackout-from`: seconds after the path came up from which it drops every packet
    /// (only UDP ones with `blackout_udp_only`); null without one.
    pub blackout_from_s: Option<f64>,
    pub blackout_udp_only: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RelayCpus {
    pub forward: Option<usize>,
    #[serde(rename = "return")]
    pub back: Option<usize>,
}

impl LabPath {
    /// The lab's first line.
    pub(crate) fn text(&self) -> String {
        let blackout = match self.blackout_from_s {
            Some(s) => format!(
                "; blackout: drops every {}packet from {s:.3} s after the path came up",
                if self.blackout_udp_only { "UDP " } else { "" }
            ),
            None => String::new(),
        };
        format!(
            "# lab: {} (netns {}) -> {} (netns {}): RTT {:.3} ms, bottleneck {}, drop-tail \
             queue {} ({:.2} BDP; BDP {}), random loss {}, MTU {}; relay threads \
             (SCHED_FIFO): forward {}, return {}{blackout}",
            self.addresses.client,
            self.namespaces.client,
            self.addresses.server,
            self.namespaces.server,
            self.rtt_ms,
            rate_text(self.rate_bps),
            size_text(self.queue_bytes),
            self.queue_bytes as f64 / self.bdp_bytes.max(1) as f64,
            size_text(self.bdp_bytes),
            if self.loss > 0.0 {
                format!("{:.4} %", self.loss * 100.0)
            } else {
                "none".into()
            },
            self.mtu,
            cpu_text(self.relay_cpus.forward),
            cpu_text(self.relay_cpus.back),
        )
    }
}

/// Which way a relay moves packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client -> server.
    Forward,
    /// Server -> client.
    Return,
}

/// What one relay direction did, as `lab_relay` and `lab.forward` / `lab.return`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabRelay {
    pub direction: Direction,
    /// Packets and bytes the path delivered.
    pub packets: u64,
    pub bytes: u64,
    /// Packets the full drop-tail queue dropped, and the random-loss setting dropped.
    pub queue_drops: u64,
    pub loss_drops: u64,
    /// Packets `--blackout-from` dropped (0 without one).
    pub blackout_drops: u64,
    pub peak_queue_bytes: u64,
    /// Deliveries more than `late_after_ns` after their due time, and the worst lateness.
    pub late_deliveries: u64,
    pub worst_late_ns: u64,
    pub late_after_ns: u64,
    /// Writes the destination TUN device refused.
    pub write_errors: u64,
    /// The relay thread's CPU time, its wall time, and the one over the other.
    pub cpu_us: u64,
    pub wall_s: f64,
    pub cpu_percent: f64,
}

impl LabRelay {
    /// The relay's line.
    pub(crate) fn text(&self) -> String {
        let dir = match self.direction {
            Direction::Forward => "forward (client -> server)",
            Direction::Return => "return (server -> client)",
        };
        format!(
            "# lab relay {dir}: {} packets, {} bytes; queue drops {}, random-loss drops {}; peak \
             queue {}; late deliveries {} (worst {:.3} ms); write errors {}; relay CPU {:.1} %{}",
            self.packets,
            self.bytes,
            self.queue_drops,
            self.loss_drops,
            size_text(self.peak_queue_bytes),
            self.late_deliveries,
            self.worst_late_ns as f64 / 1e6,
            self.write_errors,
            self.cpu_percent,
            if self.blackout_drops > 0 {
                format!("; blackout drops {}", self.blackout_drops)
            } else {
                String::new()
            },
        )
    }
}

/// What the lab says last, as `lab_end` (and in `lab` with `-J`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LabEnd {
    /// Packets each TUN device's kernel queue dropped before its relay read them (outside
    /// the emulated path); null when unknown.
    pub tun_drops: Ends<Option<u64>>,
    pub warnings: Vec<String>,
    /// The namespaces teardown deleted.
    pub removed: Vec<String>,
}

/// The TUN devices' drops line.
pub(crate) fn tun_text(drops: &Ends<Option<u64>>) -> String {
    let count = |d: Option<u64>| d.map_or("?".into(), |d| d.to_string());
    format!(
        "# lab: TUN device drops (kernel queue, outside the emulated path): client {}, \
         server {}",
        count(drops.client),
        count(drops.server)
    )
}

/// A lab run's `-J` `lab` member read back (`pinperf report`): the lines its text run
/// printed around the client's report. Each part is read on its own: one an older lab
/// wrote without a later field is left out, not the others with it.
#[derive(Debug, Clone)]
pub struct SavedLab {
    path: Option<LabPath>,
    forward: Option<LabRelay>,
    back: Option<LabRelay>,
    end: LabEnd,
    /// The document lists the namespaces teardown removed.
    removed_known: bool,
}

impl SavedLab {
    pub fn read(lab: &serde_json::Value) -> SavedLab {
        fn part<T: serde::de::DeserializeOwned>(v: Option<&serde_json::Value>) -> Option<T> {
            serde_json::from_value(v?.clone()).ok()
        }
        SavedLab {
            path: part(lab.get("path")),
            forward: part(lab.get("forward")),
            back: part(lab.get("return")),
            end: part(Some(lab)).unwrap_or_default(),
            removed_known: lab.get("removed").is_some_and(serde_json::Value::is_array),
        }
    }

    /// The path's line, printed before the client's report.
    pub fn before(&self) -> Vec<String> {
        self.path.iter().map(LabPath::text).collect()
    }

    /// The relays', the TUN devices', the warnings' and the teardown's lines, after it
    /// (the document keeps warnings and notes in one list: each comes back as `# lab: `
    /// and its words, without the run's `warning:` or `note:`).
    pub fn after(&self) -> Vec<String> {
        let mut lines: Vec<String> = [&self.forward, &self.back]
            .into_iter()
            .flatten()
            .map(LabRelay::text)
            .collect();
        lines.push(tun_text(&self.end.tun_drops));
        lines.extend(self.end.warnings.iter().map(|w| format!("# lab: {w}")));
        let removed: Vec<String> = self
            .end
            .removed
            .iter()
            .map(|n| format!("netns {n}"))
            .collect();
        if self.removed_known {
            lines.push(match removed.is_empty() {
                true => "# lab: removed nothing (no namespace had been created)".into(),
                false => format!("# lab: removed {}", removed.join(", ")),
            });
        }
        lines
    }
}

pub(crate) fn rate_text(bps: u64) -> String {
    if bps >= 1_000_000_000 {
        format!("{} Gbit/s", bps as f64 / 1e9)
    } else {
        format!("{} Mbit/s", bps as f64 / 1e6)
    }
}

fn size_text(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn cpu_text(cpu: Option<usize>) -> String {
    cpu.map_or("unpinned".into(), |c| format!("cpu{c}"))
}
