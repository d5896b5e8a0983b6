//! The deadlines of speaking iperf3's protocol, each with its reason; pinperf's own are
//! in [`crate::timeouts`].

use std::time::Duration;

/// How often an iperf3 server looks at its client's control connection while the test's
/// streams connect: a client that went away frees the server within it.
pub const STREAMS_LOOK: Duration = Duration::from_millis(2);

/// How long an iperf3 peer's errno may take after its error code: it writes both at once.
pub const ERRNO_WAIT: Duration = Duration::from_millis(500);

/// How long after its UDP senders stop a client sends an iperf3 server `TEST_END`: the
/// last datagrams' way there (one RTT, more than their one-way delay) and 20 ms for the
/// server to read them. An iperf3 server's receive time runs to `TEST_END`, so this wait is
/// in the rate it logs ([`crate::timeouts::udp_settle`]'s 250 ms cut it by 11 % over `-t 2`).
pub fn udp_test_end(rtt: Duration) -> Duration {
    rtt + Duration::from_millis(20)
}

/// How long after an iperf3 server's kernel has acknowledged every byte a client sends
/// it `TEST_END`: time for the server process to read them (it counts what it has read
/// when it takes `TEST_END`; a few MiB take it milliseconds) and four round trips on a
/// long path; 20 ms at least. Its receive time runs to `TEST_END`, so this is in the rate
/// it logs (50 ms and the FIN's delayed ACK put 4 % in it over `-t 2`).
pub fn iperf3_read(rtt: Duration) -> Duration {
    (rtt * 4).max(Duration::from_millis(20))
}

/// How long an iperf3 server may take to answer its cookie: it sends `PARAM_EXCHANGE` (or
/// `ACCESS_DENIED`, busy) as soon as it has read it; 2 s, or four round trips when longer.
/// Silence past it is not an iperf3 server's (an iperf 2 server reads and says nothing).
pub fn cookie_answer(rtt: Duration) -> Duration {
    (rtt * 4).max(Duration::from_secs(2))
}

/// Against an iperf3 server, how long the client listens for the server's word after a
/// local stream failed, and how long, after the server closed the control connection, it
/// waits for a stream to fail with it (iperf3 closes when a data connection dies); and how
/// long a server stopped by a signal lets an iperf3 client read `SERVER_TERMINATE` before
/// its streams close.
pub const CAUSE: Duration = Duration::from_millis(200);
