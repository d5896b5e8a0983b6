//! The deadlines of speaking iperf3's protocol, each with its reason; pinperf's own are
//! in [`crate::timeouts`].

use std::time::Duration;

/// How often an iperf3 server looks at its client's control connection while the test's
/// streams connect: a client that went away frees the server within it.
pub const STREAMS_LOOK: Duration = Duration::from_millis(2);

/// How long an iperf3 peer's errno may take after its error code: it writes both at once.
pub const ERRNO_WAIT: Duration = Duration::from_millis(500);
