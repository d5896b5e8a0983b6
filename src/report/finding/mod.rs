//! What the diagnosis found, as data: each [`Finding`] has a [`Kind`] holding the figures
//! it rests on (units in the names: `_bytes`, `_bps`, `_ms`, `_s`, `_percent`), the
//! settings it advises ([`Advice`]), and its words, the line text prints, rendered from
//! those figures alone. Plain data of the report model (`Summary::findings`); the checks
//! that find them are in `report::diagnosis`. One file per family of kinds.

use serde::{Deserialize, Serialize};

mod drops;
mod queue;
mod retransmits;
mod senders;
mod shares;
mod stalls;

pub use drops::{KernelDrops, TcpMemory, UdpKernelDrops, UdpReceiverDrops};
pub use queue::{Bdp, BlockWait, BlockWrite, PacedBelowPath, QueueBeyondBuffers};
pub use queue::{StandingQueue, WindowAboveBdp, WindowNotTheCause, WriteTimeNotQueue};
pub use retransmits::{ConcentratedRetransmits, LossLimited, ManyRetransmits};
pub use senders::{LongDrain, UdpSenderShort};
pub use shares::UnfairShares;
pub use stalls::{MoreStalledStreams, Stalls, Starvation, StreamStall, TestStall};

/// One finding: what was found, with the figures it rests on, the settings it advises,
/// and the line text prints for it. Built only by [`Finding::new`], which renders
/// `advice` and `words` from the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    #[serde(flatten)]
    pub kind: Kind,
    #[serde(default)]
    pub advice: Advice,
    /// The line as text prints it (after its `# `).
    pub words: String,
}

impl Finding {
    pub fn new(kind: impl Into<Kind>) -> Finding {
        let kind = kind.into();
        Finding {
            advice: kind.advice(),
            words: kind.words(),
            kind,
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

/// What a finding says, with its figures: `{"kind": "standing_queue", "figures": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "figures", rename_all = "snake_case")]
pub enum Kind {
    /// No stream read anything for whole intervals.
    TestStall(TestStall),
    /// One stream read nothing for whole intervals while others moved data.
    StreamStall(StreamStall),
    /// The stalled streams beyond those named one by one.
    MoreStalledStreams(MoreStalledStreams),
    /// Block RTT above the path's, all of it a block's own write time or header pacing.
    WriteTimeNotQueue(WriteTimeNotQueue),
    /// A sender `-b` held below the path's rate: its wait is not in its socket buffers.
    PacedBelowPath(PacedBelowPath),
    /// A wait longer than the fixed socket buffers could hold: the queue is elsewhere.
    QueueBeyondBuffers(QueueBeyondBuffers),
    /// Blocks queued in the socket buffers.
    StandingQueue(StandingQueue),
    /// A standing queue with the window already at or below the path's need.
    WindowNotTheCause(WindowNotTheCause),
    /// A standing queue and a send buffer far above the bandwidth-delay product.
    WindowAboveBdp(WindowAboveBdp),
    /// Retransmits at least 1 % of the segments sent.
    ManyRetransmits(ManyRetransmits),
    /// Most retransmits in a quarter of the streams or fewer.
    ConcentratedRetransmits(ConcentratedRetransmits),
    /// Loss holds a loss-based congestion control far below its window.
    LossLimited(LossLimited),
    /// Streams that read nothing in intervals in which others did.
    Starvation(Starvation),
    /// Segments discarded by the receiving kernel, TCP memory pressure or limits.
    KernelDrops(KernelDrops),
    /// A UDP receiver's own socket buffer overflowed.
    UdpReceiverDrops(UdpReceiverDrops),
    /// UDP senders wrote less than `-b` asked.
    UdpSenderShort(UdpSenderShort),
    /// The receiving host's kernel dropped UDP datagrams for full buffers.
    UdpKernelDrops(UdpKernelDrops),
    /// The test ran well past `-t`, draining the senders' socket buffers.
    LongDrain(LongDrain),
    /// Streams did not share the path evenly.
    UnfairShares(UnfairShares),
}

/// Each kind's figures as a [`Kind`], and its words and advice.
macro_rules! kinds {
    ($($kind:ident),* $(,)?) => {
        $(impl From<$kind> for Kind {
            fn from(figures: $kind) -> Kind {
                Kind::$kind(figures)
            }
        })*

        impl Kind {
            /// The line text prints for it.
            pub fn words(&self) -> String {
                match self {
                    $(Kind::$kind(f) => f.words(),)*
                }
            }

            /// The settings it advises (empty when it advises none).
            pub fn advice(&self) -> Advice {
                match self {
                    $(Kind::$kind(f) => f.advice(),)*
                }
            }
        }
    };
}

kinds!(
    TestStall,
    StreamStall,
    MoreStalledStreams,
    WriteTimeNotQueue,
    PacedBelowPath,
    QueueBeyondBuffers,
    StandingQueue,
    WindowNotTheCause,
    WindowAboveBdp,
    ManyRetransmits,
    ConcentratedRetransmits,
    LossLimited,
    Starvation,
    KernelDrops,
    UdpReceiverDrops,
    UdpSenderShort,
    UdpKernelDrops,
    LongDrain,
    UnfairShares,
);

/// The settings a finding advises: command-line flags and sysctls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    #[serde(default)]
    pub flags: Vec<Setting>,
    #[serde(default)]
    pub sysctls: Vec<Setting>,
}

impl Advice {
    /// No settings advised.
    pub fn none() -> Advice {
        Advice::default()
    }

    /// Flags only.
    pub fn flags(flags: impl IntoIterator<Item = Setting>) -> Advice {
        Advice {
            flags: flags.into_iter().collect(),
            sysctls: Vec::new(),
        }
    }
}

/// One setting to change: a flag (`-w`) or a sysctl (`net.ipv4.tcp_mem`), either to a
/// value (`{"name": "-w", "change": "set", "value": "4M"}`) or in a direction the words
/// name without a value (`{"name": "-l", "change": "lower"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub name: String,
    pub change: Change,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl Setting {
    pub fn set(name: &str, value: String) -> Setting {
        Setting {
            name: name.to_string(),
            change: Change::Set,
            value: Some(value),
        }
    }

    pub fn lower(name: &str) -> Setting {
        Setting {
            name: name.to_string(),
            change: Change::Lower,
            value: None,
        }
    }

    pub fn raise(name: &str) -> Setting {
        Setting {
            name: name.to_string(),
            change: Change::Raise,
            value: None,
        }
    }
}

/// How a [`Setting`] is to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// To the setting's `value`.
    Set,
    /// Smaller than now.
    Lower,
    /// Larger than now.
    Raise,
}

/// Binary size in the largest whole unit with one decimal: 3.1 MiB.
pub fn human_bytes(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// A rate in words that never rounds a real rate to nothing: `27896 Mb/s`, `2.50 Mb/s`,
/// `250 kb/s`, `12 b/s`.
pub fn human_rate(bps: f64) -> String {
    if bps >= 10e6 {
        format!("{:.0} Mb/s", bps / 1e6)
    } else if bps >= 1e6 {
        format!("{:.2} Mb/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.0} kb/s", bps / 1e3)
    } else {
        format!("{bps:.0} b/s")
    }
}

/// Stream numbers as a list: `1, 3`.
fn list(ids: &[u16]) -> String {
    ids.iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// "" for one, "s" for more.
fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
