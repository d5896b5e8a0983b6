//! How the report describes an iperf3 server: it reports its counts only with its
//! results, and the text report says so in these words.

use crate::report::peer::{Peer, PeerWords};

/// The text report's words for an iperf3 server.
static SERVER_WORDS: PeerWords = PeerWords {
    no_echo: "an iperf3 peer echoes no blocks",
    tos: "here, asked of the iperf3 server",
    omit_apart: "apart by what crossed -O's boundary: the iperf3 server omits on its own clock",
    unread: "apart by what the iperf3 server had not read when it took TEST_END",
    count_later: "the iperf3 server's count comes with its results, which a test cut short \
                  does not get",
    omit_theirs: "(nor, by its own clock, in the iperf3 server's)",
};

/// An iperf3 server, for the header of a test against one.
pub fn server() -> Peer {
    Peer {
        results_only: Some(&SERVER_WORDS),
    }
}

/// The peer a saved document's header names: its `remote_software` starts with `iperf3`
/// for a test against an iperf3 server (`client::REMOTE_WORDS`).
pub fn of_remote_software(remote_software: &str) -> Peer {
    match remote_software.starts_with("iperf3") {
        true => server(),
        false => Peer::default(),
    }
}
