//! The far end as the report knows it: a pinperf end reports its counts live with every
//! row ([`Peer::default`]); an end that reports them only with its results is described
//! by the caller that talks to it, with the words the text report uses for what it lacks.

/// What the far end reports. Not in saved documents: the caller that reads one sets it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peer {
    /// Set for an end whose counts come only with its results (live rows are this end's
    /// own), which echoes no blocks and omits `-O`'s seconds on its own clock.
    pub results_only: Option<&'static PeerWords>,
}

/// The text report's words for an end that reports only with its results.
#[derive(Debug, PartialEq, Eq)]
pub struct PeerWords {
    /// Why there is no block RTT.
    pub no_echo: &'static str,
    /// Who set `-S`'s TOS byte, after the header's TOS figures.
    pub tos: &'static str,
    /// The verdict when the byte counts part with `-O`: the peer omits on its own clock.
    pub omit_apart: &'static str,
    /// The verdict when they part without `-O`: what the peer had not read at the end.
    pub unread: &'static str,
    /// After this end's bytes in a test cut short: the peer's count never came.
    pub count_later: &'static str,
    /// After the omitted line's bytes: the peer left out its own seconds.
    pub omit_theirs: &'static str,
}

impl Peer {
    /// The peer's counts come only with its results: the live rows are this end's.
    pub fn reports_late(&self) -> bool {
        self.results_only.is_some()
    }
}
