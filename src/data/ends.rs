//! One end's stream threads for a test, per direction: its senders for a direction it
//! sends, its receivers for one it receives, over TCP or UDP. The client and the server
//! drive them the same way (start together, watch for the first failure, stop together,
//! join), whichever end sends: `-R` and `--bidir` swap or double the roles, `-u` changes
//! the thread bodies, not the code around them.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::choices::Engine;
use crate::choices::ZeroCopy;
use crate::data::budget::Spend;
use crate::data::pin::PinPlan;
use crate::data::stream::{
    Batch, Copying, Drain, Failure, Shared, StreamSet, StreamSocks, receiver, sender, single,
};
use crate::data::udp;
use crate::error::{Error, Result};
use crate::os::cpu::{CpuTime, SendPath};
use crate::wire::params::TestParams;

/// Data sockets on this end: a direction's, or (before [`Socks::take`]) every direction's
/// in order.
pub(crate) enum Socks {
    Tcp(Vec<StreamSocks>),
    /// TCP connections to a peer that ends a test by closing them, read or not: a reset
    /// ends them as EOF does ([`Drain::ToEofOrReset`]).
    TcpEndedByClose(Vec<StreamSocks>),
    Udp(Vec<UdpSocket>),
    /// UDP sockets whose datagrams carry another header than pinperf's (a peer's own).
    UdpAs(Vec<UdpSocket>, udp::wire::Format),
}

impl Socks {
    /// The first `n` sockets (the next direction's), leaving the rest.
    pub(crate) fn take(&mut self, n: usize) -> Socks {
        match self {
            Socks::Tcp(v) => Socks::Tcp(v.drain(..n.min(v.len())).collect()),
            Socks::TcpEndedByClose(v) => {
                Socks::TcpEndedByClose(v.drain(..n.min(v.len())).collect())
            }
            Socks::Udp(v) => Socks::Udp(v.drain(..n.min(v.len())).collect()),
            Socks::UdpAs(v, wire) => Socks::UdpAs(v.drain(..n.min(v.len())).collect(), *wire),
        }
    }

    /// Duplicates of every data socket (for the server's bounds, which read their buffers
    /// while the threads own them); one that cannot be duplicated (out of descriptors) is
    /// left out.
    pub(crate) fn duplicates(&self) -> Vec<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        let dup = |fd: std::os::fd::BorrowedFd| fd.try_clone_to_owned().ok();
        match self {
            Socks::Tcp(v) | Socks::TcpEndedByClose(v) => {
                v.iter().filter_map(|s| dup(s.data.as_fd())).collect()
            }
            Socks::Udp(v) | Socks::UdpAs(v, _) => v.iter().filter_map(|s| dup(s.as_fd())).collect(),
        }
    }

    /// `--fq-rate` on a sending direction's sockets: TCP's connections (whose burst rule
    /// [`crate::os::net::set_fq_rate`] checks) or UDP's sockets.
    fn pace_by_kernel(&self, fq: u64) -> Result<()> {
        match self {
            Socks::Tcp(v) | Socks::TcpEndedByClose(v) => v
                .iter()
                .try_for_each(|s| crate::os::net::set_fq_rate(&s.data, fq).map(drop)),
            Socks::Udp(v) | Socks::UdpAs(v, _) => v
                .iter()
                .try_for_each(|s| crate::os::net::set_udp_pacing(s, fq)),
        }
    }

    /// The `SO_RCVLOWAT` mark this end's receivers raise on a fast stream, where they may
    /// ([`receiver::low_water_mark`]): never with a peer that ends by closing (iperf3),
    /// which sends no FIN after its last bytes, so they would wait out the read's timeout.
    pub(crate) fn low_water_mark(&self, test: &TestParams) -> Option<u64> {
        match self {
            Socks::Tcp(v) => v
                .first()
                .and_then(|s| receiver::low_water_mark(&s.data, test)),
            _ => None,
        }
    }

    /// The TOS byte the first data socket carries, as the kernel keeps it (`-S`).
    pub(crate) fn tos(&self) -> Option<u8> {
        match self {
            Socks::Tcp(v) | Socks::TcpEndedByClose(v) => {
                v.first().and_then(|s| crate::os::net::tos(&s.data))
            }
            Socks::Udp(v) | Socks::UdpAs(v, _) => v.first().and_then(crate::os::net::tos),
        }
    }
}

/// One direction's stream threads on this end.
pub(crate) enum Threads {
    Send(StreamSet<sender::SendOutcome>),
    Receive(StreamSet<receiver::RecvOutcome>),
    UdpSend(StreamSet<udp::UdpSendOutcome>),
    UdpReceive(StreamSet<udp::UdpRecvOutcome>),
}

/// What a direction's threads hand their reporter: batches, and the free list back.
pub(crate) type Batches = (Receiver<Batch>, Sender<Batch>);

/// Runs `$body` with `$s` bound to the set inside any [`Threads`] variant.
macro_rules! each {
    ($t:expr, $s:ident => $body:expr) => {
        match $t {
            Threads::Send($s) => $body,
            Threads::Receive($s) => $body,
            Threads::UdpSend($s) => $body,
            Threads::UdpReceive($s) => $body,
        }
    };
}

impl Threads {
    /// Spawns this end's threads of one direction, pinned per `plan`, waiting for
    /// [`Ends::start`]: senders (`sends`) or receivers, one per socket. Senders pace at
    /// `-b` and have the kernel pace at `--fq-rate`; UDP receivers listen until
    /// `settle` past the run time.
    pub(crate) fn spawn(
        sends: bool,
        engine: Engine,
        socks: Socks,
        plan: &PinPlan,
        test: &TestParams,
        settle: Duration,
    ) -> Result<(Threads, Batches)> {
        let run_time = test.run_time();
        let block = test.block_bytes() as usize;
        let rate = test.rate();
        let shared = shared(test, block, !sends);
        let copy = Copying {
            zerocopy: test.zerocopy,
            skip_rx_copy: test.skip_rx_copy,
            low_water: socks.low_water_mark(test).is_some(),
        };
        if let (true, Some(fq)) = (sends, test.fq_rate_bps) {
            socks.pace_by_kernel(fq)?;
        }
        if sends && engine == Engine::Single && !test.udp {
            single_takes(test)?;
        }
        // TCP's sockets, or UDP's with the header their datagrams carry.
        let socks = match socks {
            Socks::Tcp(s) => Ok((s, Drain::ToEof)),
            Socks::TcpEndedByClose(s) => Ok((s, Drain::ToEofOrReset)),
            Socks::Udp(s) => Err((s, udp::wire::Format::Pinperf)),
            Socks::UdpAs(s, wire) => Err((s, wire)),
        };
        Ok(match (socks, sends, engine) {
            (Ok((socks, drain)), true, engine) => {
                let (set, rx, free) = match engine {
                    Engine::Threads => {
                        StreamSet::spawn_with(socks, plan, block, shared, move |ctx, s| {
                            sender::run(ctx, s, run_time, copy, drain)
                        })?
                    }
                    Engine::Single => {
                        StreamSet::spawn_single(socks, plan, block, move |ctxs, socks| {
                            single::run(ctxs, socks, run_time, drain)
                        })?
                    }
                };
                (Threads::Send(set), (rx, free))
            }
            (Ok((socks, _)), false, _) => {
                let (set, rx, free) =
                    StreamSet::spawn_with(socks, plan, block, shared, move |ctx, s| {
                        receiver::run(ctx, s, run_time, copy)
                    })?;
                (Threads::Receive(set), (rx, free))
            }
            (Err((socks, wire)), true, _) => {
                let job = udp::UdpSend {
                    rate_bps: rate,
                    burst: test.burst,
                    datagram: block,
                    run_time,
                    gso: !test.no_gsro,
                    wire,
                };
                let (set, rx, free) =
                    StreamSet::spawn_with(udp_socks(socks), plan, block, shared, move |ctx, s| {
                        udp::send(ctx, s, job)
                    })?;
                (Threads::UdpSend(set), (rx, free))
            }
            (Err((socks, wire)), false, _) => {
                let until = run_time + settle;
                let (set, rx, free) =
                    StreamSet::spawn_with(udp_socks(socks), plan, block, shared, move |ctx, s| {
                        udp::receive(ctx, s, until, wire)
                    })?;
                (Threads::UdpReceive(set), (rx, free))
            }
        })
    }
}

/// What a direction's streams share: `-b` and its burst, (`-n`/`-k`) one budget, which
/// its receivers count what arrived against, and (`--realtime`) UDP receivers' priority.
fn shared(test: &TestParams, block: usize, receives: bool) -> Shared {
    Shared {
        realtime: test.realtime_receivers() && receives,
        rate_bps: test.rate(),
        burst: test.burst,
        budget: test
            .budget()
            .map(|b| std::sync::Arc::new(Spend::new(b, block as u64))),
        file: test.file.as_deref().map(std::sync::Arc::from),
        idle: test
            .rcv_timeout
            .map(|limit| std::sync::Arc::new(crate::data::stream::Idle::new(limit))),
    }
}

/// What the single engine's senders cannot do: `-Z` (it sends with copies), and `-n`,
/// `-k` and bursts (it sends by time alone).
fn single_takes(test: &TestParams) -> Result<()> {
    let no = |what: &str| Err(Error::Test(format!("{what}; use --engine threads")));
    if test.zerocopy.is_some() {
        return no("-Z: the single engine sends with copies");
    }
    if test.budget().is_some() || test.burst.is_some() {
        return no("-n/-k/-b RATE/BURST: the single engine sends by time alone");
    }
    Ok(())
}

fn udp_socks(socks: Vec<UdpSocket>) -> Vec<StreamSocks<UdpSocket>> {
    socks
        .into_iter()
        .map(|data| StreamSocks { data, echo: None })
        .collect()
}

/// Every direction's threads on this end.
#[derive(Default)]
pub(crate) struct Ends(pub Vec<Threads>);

impl Ends {
    pub(crate) fn start(&self, t0: Instant) {
        for t in &self.0 {
            each!(t, s => s.start(t0));
        }
    }

    /// The first stream failure of any direction: the earliest of this end's own, else the
    /// earliest of the peer closing or resetting a connection.
    pub(crate) fn failure(&self) -> Option<Failure> {
        self.0
            .iter()
            .filter_map(|t| each!(t, s => s.failure()))
            .min_by_key(|f| (f.peer_closed, f.at))
    }

    /// True when every thread of every direction has ended.
    pub(crate) fn finished(&self) -> bool {
        self.0.iter().all(|t| each!(t, s => s.finished()))
    }

    /// `-n`/`-k`: for each direction, whether its budget is spent as this end sees it:
    /// its senders here have all stopped writing, or its receivers here have read all of
    /// it or ended (a UDP receiver ends an idle time after its last datagram: what is
    /// missing was lost) (empty without a budget).
    pub(crate) fn budgets_spent(&self) -> Vec<bool> {
        self.0
            .iter()
            .filter_map(|t| match t {
                Threads::Send(s) => s.budget_sent(),
                Threads::UdpSend(s) => s.budget_sent(),
                Threads::Receive(s) => s.budget().map(Spend::all_arrived),
                Threads::UdpReceive(s) => s.budget().map(|b| b.all_arrived() || s.finished()),
            })
            .collect()
    }

    /// `-n`/`-k`: this end's senders stop at their next block, whatever their budget has
    /// left ([`Spend::close`]).
    pub(crate) fn close_budgets(&self) {
        for t in &self.0 {
            match t {
                Threads::Send(s) => s.budget().iter().for_each(|b| b.close()),
                Threads::UdpSend(s) => s.budget().iter().for_each(|b| b.close()),
                Threads::Receive(_) | Threads::UdpReceive(_) => {}
            }
        }
    }

    pub(crate) fn abort(&self) {
        for t in &self.0 {
            each!(t, s => s.abort());
        }
    }

    /// Joins every direction: each thread's CPU (directions in order, streams in order),
    /// named `stream-N` (with `--bidir` also `send` or `recv`), what `-Z` (`zerocopy`) did
    /// in this end's senders, and the first error that is a cause (see [`StreamSet::join`]).
    pub(crate) fn join(
        self,
        zerocopy: Option<ZeroCopy>,
    ) -> (Vec<(String, CpuTime)>, Option<SendPath>, Option<Error>) {
        let both = self.0.len() > 1;
        let name = |id: &str, sends: bool| match (both, sends) {
            (false, _) => id.to_string(),
            (true, true) => format!("{id} send"),
            (true, false) => format!("{id} recv"),
        };
        let mut cpu = Vec::new();
        let mut first: Option<Error> = None;
        let (mut sent, mut sends, mut copied) = (false, 0, 0);
        for t in self.0 {
            let (times, failed, err, sends_here): (Vec<(u16, CpuTime)>, _, _, bool) = match t {
                Threads::Send(s) => {
                    let (o, f, e) = s.join();
                    sent = true;
                    sends += o.iter().map(|o| o.zerocopy_sends).sum::<u64>();
                    copied += o.iter().map(|o| o.zerocopy_copied).sum::<u64>();
                    (o.iter().map(|o| (o.id, o.cpu)).collect(), f, e, true)
                }
                Threads::Receive(s) => {
                    let (o, f, e) = s.join();
                    (o.iter().map(|o| (o.id, o.cpu)).collect(), f, e, false)
                }
                Threads::UdpSend(s) => {
                    let (o, f, e) = s.join();
                    (o.iter().map(|o| (o.id, o.cpu)).collect(), f, e, true)
                }
                Threads::UdpReceive(s) => {
                    let (o, f, e) = s.join();
                    (o.iter().map(|o| (o.id, o.cpu)).collect(), f, e, false)
                }
            };
            let times = times.into_iter().map(|(id, t)| (format!("stream-{id}"), t));
            // A thread that failed is named by its thread's name (`stream-N`, `stream-mux`).
            cpu.extend(times.chain(failed).map(|(n, t)| (name(&n, sends_here), t)));
            if let Some(e) = err
                && first.as_ref().is_none_or(|f| {
                    matches!(f, Error::Aborted(_)) && !matches!(e, Error::Aborted(_))
                })
            {
                first = Some(e);
            }
        }
        let path = SendPath::of(zerocopy.filter(|_| sent), sends, copied);
        (cpu, path, first)
    }
}
