//! Plain data about sockets that the wire and the reports carry: what the kernel granted
//! for a window ([`WindowGrant`]) and the path's MTU/MSS ([`PathInfo`]). Filled in by `net`;
//! read by `protocol` and `report`, neither of which needs the socket layer.

use serde::{Deserialize, Serialize};

use crate::units::format_size;

/// What one end asked for and what its kernel granted (as `getsockopt` reads it back:
/// Linux stores twice the request, capped at `net.core.{w,r}mem_max` unless forced).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowGrant {
    pub requested: Option<u64>,
    pub sndbuf: u64,
    pub rcvbuf: u64,
    /// `SO_*BUFFORCE` was used and accepted.
    pub forced: bool,
    /// Why forcing was not possible, when it was asked for.
    pub force_note: Option<String>,
    /// `net.core.wmem_max` / `rmem_max` on this host, when readable.
    pub wmem_max: Option<u64>,
    pub rmem_max: Option<u64>,
}

/// One of an end's two buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    Send,
    Receive,
}

impl Buffer {
    /// The socket option that sets it.
    pub fn option(self) -> &'static str {
        match self {
            Buffer::Send => "SO_SNDBUF",
            Buffer::Receive => "SO_RCVBUF",
        }
    }

    /// The sysctl that caps it (unless forced).
    pub fn sysctl(self) -> &'static str {
        match self {
            Buffer::Send => "net.core.wmem_max",
            Buffer::Receive => "net.core.rmem_max",
        }
    }
}

/// Half of `INT_MAX`: Linux caps every request here so that twice it fits an `int`, even
/// when forced. 2 x this (2147483646 B) is the largest buffer a socket can have.
pub const LARGEST_REQUEST: u64 = (i32::MAX / 2) as u64;

/// Why a buffer came out at the size the kernel granted. Linux stores
/// `max(2 x min(request, cap, INT_MAX / 2), minimum)`, where the cap is
/// `net.core.{w,r}mem_max` unless `SO_*BUFFORCE` was used, and the minimum is the
/// kernel's smallest buffer (4608 B to send, 2304 B to receive on x86-64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Twice the request: what Linux does with a request it accepts.
    Doubled,
    /// More than twice the request: the kernel's minimum buffer.
    Minimum,
    /// Twice the sysctl's value (`None`: unreadable here), short of twice the request.
    Capped {
        sysctl: &'static str,
        cap: Option<u64>,
    },
    /// The largest buffer Linux allows (twice `INT_MAX / 2`), short of twice the request.
    Largest,
    /// Short of twice the request for no reason known here.
    Short,
}

impl WindowGrant {
    /// What the kernel granted for `buffer`.
    pub fn granted(&self, buffer: Buffer) -> u64 {
        match buffer {
            Buffer::Send => self.sndbuf,
            Buffer::Receive => self.rcvbuf,
        }
    }

    /// Why `buffer` came out at its size; `None` without a request (autotuning).
    pub fn grant(&self, buffer: Buffer) -> Option<Grant> {
        let req = self.requested?;
        let granted = self.granted(buffer);
        let doubled = req.saturating_mul(2);
        let cap = match buffer {
            Buffer::Send => self.wmem_max,
            Buffer::Receive => self.rmem_max,
        };
        Some(if granted == doubled {
            Grant::Doubled
        } else if granted > doubled {
            Grant::Minimum
        } else if req > LARGEST_REQUEST && granted == 2 * LARGEST_REQUEST {
            Grant::Largest
        } else if self.forced {
            Grant::Short
        } else {
            match cap {
                Some(c) if granted != c.saturating_mul(2) => Grant::Short,
                cap => Grant::Capped {
                    sysctl: buffer.sysctl(),
                    cap,
                },
            }
        })
    }

    /// What was granted for `buffer` and why, in a few words for the header ("twice the
    /// request", "the kernel's minimum, above twice the request", …); `None` without a
    /// request.
    pub fn grant_words(&self, buffer: Buffer) -> Option<String> {
        let forced = if self.forced { "forced, " } else { "" };
        Some(match self.grant(buffer)? {
            Grant::Doubled => format!("{forced}twice the request"),
            Grant::Minimum => format!("{forced}the kernel's minimum, above twice the request"),
            Grant::Capped { sysctl, cap } => match cap {
                Some(cap) => format!("capped at twice {sysctl} = {cap}"),
                None => format!("capped by {sysctl}"),
            },
            Grant::Largest => format!(
                "{forced}the largest Linux allows (twice INT_MAX/2), short of twice the request"
            ),
            Grant::Short => format!("{forced}short of twice the request"),
        })
    }

    /// Warnings for each buffer the kernel granted short of the request, naming what
    /// capped it and, when something can lift the cap, how. `who` is "local" or "remote".
    pub fn shortfalls(&self, who: &str) -> Vec<String> {
        let Some(req) = self.requested else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for buffer in [Buffer::Send, Buffer::Receive] {
            let why = match self.grant(buffer) {
                None | Some(Grant::Doubled | Grant::Minimum) => continue,
                Some(Grant::Capped { sysctl, cap }) => {
                    let cap_text = match cap {
                        Some(v) => format!("{sysctl} = {v} caps it"),
                        None => format!("{sysctl} (unreadable here) caps it"),
                    };
                    format!(
                        "{cap_text}. Allow it with: sysctl -w {sysctl}={req} (or --force-window \
                         as root)"
                    )
                }
                Some(Grant::Largest) => format!(
                    "Linux caps every buffer at twice INT_MAX/2 = {} so that it fits an int; no \
                     sysctl or --force-window raises that",
                    2 * LARGEST_REQUEST
                ),
                Some(Grant::Short) => format!(
                    "neither {} nor the kernel's limits explain it",
                    match (buffer, self.forced) {
                        (_, true) => "the forced request".to_string(),
                        (Buffer::Send, false) => format!("net.core.wmem_max ({:?})", self.wmem_max),
                        (Buffer::Receive, false) =>
                            format!("net.core.rmem_max ({:?})", self.rmem_max),
                    }
                ),
            };
            out.push(format!(
                "warning: -w {}: {who} {} granted {}, short of {} (Linux doubles the request); \
                 {why}",
                format_size(req),
                buffer.option(),
                self.granted(buffer),
                req.saturating_mul(2),
            ));
        }
        out
    }
}

/// Path facts of a connected socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathInfo {
    pub mtu: Option<u32>,
    pub mss: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(req: u64, sndbuf: u64, rcvbuf: u64, forced: bool) -> WindowGrant {
        WindowGrant {
            requested: Some(req),
            sndbuf,
            rcvbuf,
            forced,
            force_note: None,
            wmem_max: Some(4 << 20),
            rmem_max: Some(4 << 20),
        }
    }

    /// `-w 1k` was granted 4608 and 2304 B, the kernel's minimum, while the
    /// header said "Linux grants twice the request"; `-w 8M` under a 4M cap got 8M, the
    /// request, not twice it.
    #[test]
    fn what_was_granted_and_why() {
        let g = grant(64 << 10, 128 << 10, 128 << 10, false);
        assert_eq!(g.grant(Buffer::Send), Some(Grant::Doubled));
        assert_eq!(
            g.grant_words(Buffer::Receive).as_deref(),
            Some("twice the request")
        );

        let g = grant(1 << 10, 4608, 2304, false);
        assert_eq!(g.grant(Buffer::Send), Some(Grant::Minimum));
        assert_eq!(g.grant(Buffer::Receive), Some(Grant::Minimum));
        assert_eq!(
            g.grant_words(Buffer::Send).as_deref(),
            Some("the kernel's minimum, above twice the request")
        );
        assert!(g.shortfalls("local").is_empty());

        let g = grant(8 << 20, 8 << 20, 8 << 20, false);
        assert_eq!(
            g.grant(Buffer::Send),
            Some(Grant::Capped {
                sysctl: "net.core.wmem_max",
                cap: Some(4 << 20)
            })
        );
        assert_eq!(
            g.grant_words(Buffer::Receive).as_deref(),
            Some("capped at twice net.core.rmem_max = 4194304")
        );
        assert_eq!(WindowGrant::default().grant_words(Buffer::Send), None);
    }

    /// `-w 1G --force-window` was granted 2147483646 B and the warning named
    /// net.core.wmem_max and "--force-window as root": INT_MAX capped it.
    #[test]
    fn the_int_max_cap_is_named_not_the_sysctl() {
        for forced in [true, false] {
            let largest = 2 * LARGEST_REQUEST;
            let mut g = grant(1 << 30, largest, largest, forced);
            g.wmem_max = Some(1 << 31);
            g.rmem_max = Some(1 << 31);
            assert_eq!(g.grant(Buffer::Send), Some(Grant::Largest));
            let w = g.shortfalls("local");
            assert_eq!(w.len(), 2, "{w:?}");
            assert_eq!(
                w[0],
                "warning: -w 1G: local SO_SNDBUF granted 2147483646, short of 2147483648 (Linux \
                 doubles the request); Linux caps every buffer at twice INT_MAX/2 = 2147483646 \
                 so that it fits an int; no sysctl or --force-window raises that"
            );
            assert!(
                !w[1].contains("mem_max") && !w[1].contains("as root"),
                "{w:?}"
            );
        }
        // Forced, short for another reason: no advice to force.
        let g = grant(64 << 20, 64 << 20, 128 << 20, true);
        let w = g.shortfalls("remote");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].ends_with("neither the forced request nor the kernel's limits explain it"),
            "{w:?}"
        );
    }
}
