//! One end's stream threads for a test, per direction: its senders for a direction it
//! sends, its receivers for one it receives. The client and the server drive them the same
//! way (start together, watch for the first failure, stop together, join), whichever end
//! sends: `-R` and `--bidir` swap or double the roles, not the code.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::choices::Engine;
use crate::cpu::CpuTime;
use crate::error::{Error, Result};
use crate::pin::PinPlan;
use crate::stream::{Batch, Failure, StreamSet, StreamSocks, receiver, sender, single};

/// One direction's stream threads on this end.
pub(crate) enum Threads {
    Send(StreamSet<sender::SendOutcome>),
    Receive(StreamSet<receiver::RecvOutcome>),
}

/// What a direction's threads hand their reporter: batches, and the free list back.
pub(crate) type Batches = (Receiver<Batch>, Sender<Batch>);

impl Threads {
    /// Spawns this end's threads of one direction, pinned per `plan`, waiting for
    /// [`Ends::start`]: senders (`sends`) or receivers, one per socket.
    pub(crate) fn spawn(
        sends: bool,
        engine: Engine,
        socks: Vec<StreamSocks>,
        plan: &PinPlan,
        block_bytes: usize,
        run_time: Duration,
    ) -> Result<(Threads, Batches)> {
        Ok(match (sends, engine) {
            (true, Engine::Threads) => {
                let (set, rx, free) = StreamSet::spawn(socks, plan, block_bytes, move |ctx, s| {
                    sender::run(ctx, s, run_time)
                })?;
                (Threads::Send(set), (rx, free))
            }
            (true, Engine::Single) => {
                let (set, rx, free) =
                    StreamSet::spawn_single(socks, plan, block_bytes, move |ctxs, socks| {
                        single::run(ctxs, socks, run_time)
                    })?;
                (Threads::Send(set), (rx, free))
            }
            (false, _) => {
                let (set, rx, free) = StreamSet::spawn(socks, plan, block_bytes, move |ctx, s| {
                    receiver::run(ctx, s, run_time)
                })?;
                (Threads::Receive(set), (rx, free))
            }
        })
    }
}

/// Every direction's threads on this end.
#[derive(Default)]
pub(crate) struct Ends(pub Vec<Threads>);

impl Ends {
    pub(crate) fn start(&self, t0: Instant) {
        for t in &self.0 {
            match t {
                Threads::Send(s) => s.start(t0),
                Threads::Receive(s) => s.start(t0),
            }
        }
    }

    /// The first stream failure of any direction (the earliest when both failed).
    pub(crate) fn failure(&self) -> Option<Failure> {
        self.0
            .iter()
            .filter_map(|t| match t {
                Threads::Send(s) => s.failure(),
                Threads::Receive(s) => s.failure(),
            })
            .min_by_key(|f| f.at)
    }

    /// True when every thread of every direction has ended.
    pub(crate) fn finished(&self) -> bool {
        self.0.iter().all(|t| match t {
            Threads::Send(s) => s.finished(),
            Threads::Receive(s) => s.finished(),
        })
    }

    pub(crate) fn abort(&self) {
        for t in &self.0 {
            match t {
                Threads::Send(s) => s.abort(),
                Threads::Receive(s) => s.abort(),
            }
        }
    }

    /// Joins every direction: each thread's CPU (directions in order, streams in order),
    /// named `stream-N` (with `--bidir` also `send` or `recv`), and the first error that is
    /// a cause (see [`StreamSet::join`]).
    pub(crate) fn join(self) -> (Vec<(String, CpuTime)>, Option<Error>) {
        let both = self.0.len() > 1;
        let name = |id: u16, role: &str| match both {
            true => format!("stream-{id} {role}"),
            false => format!("stream-{id}"),
        };
        let mut cpu = Vec::new();
        let mut first: Option<Error> = None;
        for t in self.0 {
            let (times, err) = match t {
                Threads::Send(s) => {
                    let (o, e) = s.join();
                    (
                        o.iter()
                            .map(|o| (name(o.id, "send"), o.cpu))
                            .collect::<Vec<_>>(),
                        e,
                    )
                }
                Threads::Receive(s) => {
                    let (o, e) = s.join();
                    (o.iter().map(|o| (name(o.id, "recv"), o.cpu)).collect(), e)
                }
            };
            cpu.extend(times);
            if let Some(e) = err
                && first.as_ref().is_none_or(|f| {
                    matches!(f, Error::Aborted(_)) && !matches!(e, Error::Aborted(_))
                })
            {
                first = Some(e);
            }
        }
        (cpu, first)
    }
}
