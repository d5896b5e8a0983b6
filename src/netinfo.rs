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

impl WindowGrant {
    /// Warnings for each buffer the kernel granted short of the request, naming the sysctl
    /// that capped it and the command that lifts the cap. `who` is "local" or "remote".
    pub fn shortfalls(&self, who: &str) -> Vec<String> {
        let Some(req) = self.requested else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (opt, granted, sysctl, cap) in [
            ("SO_SNDBUF", self.sndbuf, "net.core.wmem_max", self.wmem_max),
            ("SO_RCVBUF", self.rcvbuf, "net.core.rmem_max", self.rmem_max),
        ] {
            if granted >= req.saturating_mul(2) {
                continue;
            }
            let cap_text = match cap {
                Some(v) => format!("{sysctl} = {v} caps it"),
                None => format!("{sysctl} (unreadable here) caps it"),
            };
            out.push(format!(
                "warning: -w {}: {who} {opt} granted {}, short of {} (Linux doubles the request); \
                 {cap_text}. Allow it with: sysctl -w {sysctl}={req} (or --force-window as root)",
                format_size(req),
                granted,
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
