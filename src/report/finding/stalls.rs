//! Stalls and starvation as figures: the longest stretch with nothing read and how many
//! there were, for the whole test or one stream.

use serde::{Deserialize, Serialize};

use super::{Advice, list, plural};

/// A log's stalls as figures: the longest, and how many there were in all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stalls {
    pub longest_from_s: f64,
    pub longest_to_s: f64,
    pub longest_intervals: u32,
    pub stretches: u32,
    /// Intervals in all the stretches.
    pub intervals: u32,
}

impl Stalls {
    /// "from 1.5 s to 3.0 s (3 intervals)", or with several stalls "in 3 stretches of 5
    /// intervals in all, the longest from … (3 intervals)".
    fn describe(&self) -> String {
        let longest = format!(
            "from {} s to {} s ({} interval{})",
            secs(self.longest_from_s),
            secs(self.longest_to_s),
            self.longest_intervals,
            plural(self.longest_intervals as usize)
        );
        if self.stretches == 1 {
            longest
        } else {
            format!(
                "in {} stretches of {} intervals in all, the longest {longest}",
                self.stretches, self.intervals
            )
        }
    }
}

/// Seconds into the test as a person writes them: `1.5`, `1.25`, `3.0`.
fn secs(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0');
    if text.ends_with('.') {
        format!("{text}0")
    } else {
        text.to_string()
    }
}

/// No stream read anything for whole intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestStall {
    #[serde(flatten)]
    pub stalls: Stalls,
}

impl TestStall {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: no data moved {}: a sender or receiver was stopped (paused, or not \
             scheduled) or the path stalled.",
            self.stalls.describe()
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// One stream read nothing for whole intervals while others moved data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamStall {
    pub stream: u16,
    #[serde(flatten)]
    pub stalls: Stalls,
}

impl StreamStall {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: stream {} read nothing {} while others moved data: its connection \
             waited out a retransmission timeout, or the other streams held the shared queue.",
            self.stream,
            self.stalls.describe()
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// The stalled streams beyond the ones named one by one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoreStalledStreams {
    pub streams: Vec<u16>,
}

impl MoreStalledStreams {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: streams {} also read nothing for whole intervals while others moved \
             data.",
            list(&self.streams)
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}

/// Streams that read nothing in intervals in which others did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Starvation {
    pub streams: Vec<u16>,
    /// Stream-intervals in which one of them read nothing while others read.
    pub starved_intervals: u32,
    pub stream_intervals: u32,
}

impl Starvation {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: stream{} {} read nothing in {} of {} stream-intervals (starved) while \
             others ran.",
            plural(self.streams.len()),
            list(&self.streams),
            self.starved_intervals,
            self.stream_intervals
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}
