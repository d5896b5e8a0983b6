//! Drops inside the hosts: segments the receiving kernel discarded, TCP memory pressure
//! and limits, UDP datagrams dropped on full socket buffers.

use serde::{Deserialize, Serialize};

use super::{Advice, Setting};

/// Segments discarded by the receiving kernel, TCP memory pressure, or the host's TCP
/// memory at net.ipv4.tcp_mem's pressure mark.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KernelDrops {
    /// Segments the receiving kernel discarded after the path delivered them.
    pub discarded_segments: u64,
    pub rcvq_drops: u64,
    pub ofo_drops: u64,
    /// Segments pruned from the receive and out-of-order queues.
    pub pruned_segments: u64,
    pub memory_pressures: u64,
    /// The host's TCP memory against its limits, when both were read.
    pub tcp_memory: Option<TcpMemory>,
    pub retransmits: u64,
    pub streams: usize,
}

/// The host's TCP memory in pages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpMemory {
    pub peak_pages: u64,
    /// net.ipv4.tcp_mem: pressure below, pressure at, hard limit.
    pub tcp_mem_pages: [u64; 3],
    /// What other sockets held when the test started, when above the first mark.
    pub held_at_start_pages: Option<u64>,
}

impl KernelDrops {
    pub fn words(&self) -> String {
        let mut parts = Vec::new();
        if self.discarded_segments > 0 {
            parts.push(format!(
                "the receiving kernel discarded {} segments the path had delivered \
                 (TCPRcvQDrop {}, TCPOFODrop {}, pruned {})",
                self.discarded_segments, self.rcvq_drops, self.ofo_drops, self.pruned_segments
            ));
        }
        if self.memory_pressures > 0 {
            parts.push(format!(
                "TCP entered memory pressure {} times",
                self.memory_pressures
            ));
        }
        if let Some(t) = self.tcp_memory {
            let (p, m) = (t.peak_pages, t.tcp_mem_pages);
            let mut text = format!(
                "the host's TCP memory peaked at {p} pages (net.ipv4.tcp_mem = {} {} {}: from \
                 {} on, Linux shrinks every receive window to a few segments until TCP uses \
                 less than {}; at {} every socket waits for memory)",
                m[0], m[1], m[2], m[1], m[0], m[2]
            );
            if let Some(s) = t.held_at_start_pages {
                text.push_str(&format!(
                    "; other sockets already held {s} pages when the test started"
                ));
            }
            parts.push(text);
        }
        let retr = if self.retransmits > 0 {
            format!(", against {} retransmits", self.retransmits)
        } else {
            String::new()
        };
        format!(
            "diagnosis: {}{retr}: the {} streams' socket buffers together ask for more memory \
             than the kernel lets TCP use; ask for smaller windows (-w) or raise \
             net.ipv4.tcp_mem.",
            parts.join(", and "),
            self.streams
        )
    }

    pub fn advice(&self) -> Advice {
        Advice {
            flags: vec![Setting::lower("-w")],
            sysctls: vec![Setting::raise("net.ipv4.tcp_mem")],
        }
    }
}

/// A UDP receiver's own socket buffer overflowed (`SO_RXQ_OVFL`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpReceiverDrops {
    pub overflows: u64,
    pub lost_packets: u64,
    /// The receiving end's buffer.
    pub buffer_bytes: u64,
    /// The receiver is the server, whose buffer its --max-window caps.
    pub server_capped: bool,
    /// What `--realtime` can do here: the receivers ran at real-time priority already
    /// (`Some(true)`), could have (`Some(false)`), or cannot (`None`: an iperf3 peer).
    #[serde(default)]
    pub realtime: Option<bool>,
}

impl UdpReceiverDrops {
    pub fn words(&self) -> String {
        let cap = match self.server_capped {
            true => ", up to the server's --max-window",
            false => "",
        };
        let grant = match self.server_capped {
            true => ", and a server started with --allow-realtime",
            false => "",
        };
        // A receiver that waits for its core (another task on it) drops as one too slow does.
        let (why, realtime) = match self.realtime {
            Some(false) => (
                "its thread did not read them in time (busy, or kept off its core by other \
                 tasks)",
                format!("--realtime (receivers at SCHED_FIFO: root{grant}), "),
            ),
            Some(true) => (
                "its thread did not keep up even at real-time priority",
                String::new(),
            ),
            None => ("its thread did not keep up", String::new()),
        };
        format!(
            "diagnosis: the receiver's own socket buffer overflowed {} time(s) (SO_RXQ_OVFL; \
             with GRO one drop may hold up to 64 datagrams): {} of the {} datagrams lost were \
             dropped on the receiving host, not on the path; {why}: {realtime}a larger -w (its \
             buffer is {}{cap}) or a lower -b.",
            self.overflows,
            if self.overflows >= self.lost_packets {
                "all"
            } else {
                "some"
            },
            self.lost_packets,
            crate::units::format_size(self.buffer_bytes)
        )
    }

    pub fn advice(&self) -> Advice {
        let realtime =
            (self.realtime == Some(false)).then(|| Setting::set("--realtime", String::new()));
        Advice::flags(
            realtime
                .into_iter()
                .chain([Setting::raise("-w"), Setting::lower("-b")]),
        )
    }
}

/// The receiving host's kernel dropped UDP datagrams for full socket buffers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpKernelDrops {
    pub rcvbuf_errors: u64,
    pub in_errors: u64,
}

impl UdpKernelDrops {
    pub fn words(&self) -> String {
        format!(
            "diagnosis: the receiving host's kernel dropped {} UDP datagrams for full socket \
             buffers during the test (RcvbufErrors, {} in errors in all; namespace-wide).",
            self.rcvbuf_errors, self.in_errors
        )
    }

    pub fn advice(&self) -> Advice {
        Advice::none()
    }
}
