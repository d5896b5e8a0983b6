//! Text output in thrulay's shape: `#` header lines, `( N)` rows per stream per interval
//! (begin, end, Mb/s, RTT min/avg/max in ms, then appended columns: retransmits and cwnd),
//! `(sum)` rows when there are several streams, `#( N)` totals and exactly one `#(**)`
//! line (with fairness appended: Jain's index, min and max share in %, starved
//! stream-intervals, headed by a `# … fairness:` line without `**`), so `fgrep '**'` in a
//! shell loop yields one line per run. RTT is the
//! block RTT (header echoes) unless `--no-echo`, then the kernel's srtt. Flushes after every
//! interval.

use std::io::{self, Write};

use crate::choices::{Engine, RateUnit, ZeroCopy};
use crate::os::cpu::{CoreLoad, CpuReport, SendPath};
use crate::os::netinfo::{Buffer, Grant, WindowGrant};
use crate::report::Formatter;
use crate::report::model::{
    CpuSummary, Direction, Header, IntervalReport, KernelSummary, LeftOut, RttSummary, StreamRow,
    SumRow, Summary, ThreadCpu, UdpFigures,
};
use crate::report::peer::Peer;
use crate::units::format_rate;
use crate::units::format_size;

/// What the text format's flags change: the rate unit of the rows (`-f`) and the
/// verbose lines (`-V`). (`-T` and `--timestamps` prefix lines: `prefix::Prefixed`.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextOptions {
    pub unit: RateUnit,
    /// `-V`: each stream's `TCP_INFO` and block-RTT details under its rows.
    pub verbose: bool,
}

/// Writes the text format to `out`.
pub struct TextFormatter<W: Write> {
    out: W,
    streams: u16,
    echo: bool,
    opts: TextOptions,
    /// `--bidir`: every row and total names its direction (`TX`: client to server).
    bidir: bool,
    direction: Direction,
    /// `--get-server-output`: printed after the last totals.
    server_output: Option<String>,
    /// What the far end reports: one that reports late never sends its counts in a test
    /// cut short (the rows and totals are then this end's counts alone).
    peer: Peer,
    /// `-u`: no RTT line (its figures may be unknown, as against a late peer cut short).
    udp: bool,
    /// A `# failed at` line was written live: the cause is said once.
    said_failure: bool,
    /// The header is out: a failure before it (a refused connection) is stderr's alone.
    started: bool,
    /// `--cpu` with `--bidir`: the interval's core line, held until its RX rows are out.
    held_cpu: Option<String>,
}

/// Why there is no block RTT: `--no-echo`, or a peer that echoes nothing.
fn no_echo_why(peer: Peer) -> &'static str {
    peer.results_only.map_or("--no-echo", |w| w.no_echo)
}

impl<W: Write> TextFormatter<W> {
    fn write_held_cpu(&mut self) -> io::Result<()> {
        match self.held_cpu.take() {
            Some(line) => writeln!(self.out, "{line}"),
            None => Ok(()),
        }
    }

    /// The default options (the tests' formatter; a run passes its flags).
    #[cfg(test)]
    pub fn new(out: W) -> Self {
        Self::with_options(out, TextOptions::default())
    }

    pub fn with_options(out: W, opts: TextOptions) -> Self {
        TextFormatter {
            out,
            streams: 0,
            echo: true,
            opts,
            bidir: false,
            direction: Direction::Forward,
            server_output: None,
            peer: Peer::default(),
            udp: false,
            said_failure: false,
            started: false,
            held_cpu: None,
        }
    }

    /// What an end's stream threads did: ` (senders)`, ` (receivers)`, or nothing with
    /// `--bidir` (each thread's name says it).
    fn role(&self, remote: bool) -> &'static str {
        match (self.direction, remote) {
            (Direction::Bidir, _) => "",
            (Direction::Forward, false) | (Direction::Reverse, true) => " (senders)",
            _ => " (receivers)",
        }
    }
}

/// The columns every row shares.
struct Cols {
    start: f64,
    end: f64,
    bits_per_second: f64,
    rtt: Option<RttSummary>,
    retransmits: Option<u64>,
    snd_cwnd: Option<u64>,
    /// `-u`: the datagram columns instead of RTT, retransmits and cwnd.
    udp: Option<UdpFigures>,
}

/// The column heading under the header (UDP rows have their own columns).
fn heading(bidir: bool, udp: bool, unit: RateUnit) -> String {
    let pad = if bidir { "   " } else { "" };
    let rate = unit.label();
    match udp {
        false => format!(
            "#(ID){pad}  begin, s   end, s{rate:>12}  RTT, ms: min      avg      max   retr  cwnd, KiB"
        ),
        true => format!(
            "#(ID){pad}  begin, s   end, s{rate:>12}  jitter, ms      lost/    total   lost%    ooo"
        ),
    }
}

/// The header's first lines: who tested whom, which way, and when.
fn title_lines(o: &mut impl Write, h: &Header) -> io::Result<()> {
    let (arrow, who) = match h.direction {
        Direction::Forward => ("->", ""),
        Direction::Reverse => ("<-", "; reverse (-R): the server sends"),
        Direction::Bidir => (
            "<->",
            "; both ways at once (--bidir): rows TX = client to server, RX = server to client",
        ),
    };
    writeln!(
        o,
        "# {}: {} {arrow} {} ({}), {} {} stream{}{who}",
        h.software,
        h.local,
        h.remote,
        h.remote_software,
        h.streams,
        if h.udp { "UDP" } else { "TCP" },
        if h.streams == 1 { "" } else { "s" }
    )?;
    if let Some(at) = &h.started_at {
        let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "?".into());
        let hosts = format!("{} {arrow} {}", name(&h.local_host), name(&h.remote_host));
        writeln!(o, "# started {at}; hosts {hosts}")?;
    }
    Ok(())
}

/// The header's window line: what each end's buffers were and why.
fn window_line(o: &mut impl Write, h: &Header) -> io::Result<()> {
    let ((local_window, _), (remote_window, _)) = windows(h);
    // A peer that reports no buffer sizes: say so rather than print 0B.
    let remote_window = match remote_window {
        0 => "not reported by the peer".to_string(),
        b => format!("{b}B"),
    };
    match h.local_window.requested {
        Some(req) => writeln!(
            o,
            "# local window = {}B; remote window = {} (requested -w {} = {}B; {})",
            local_window,
            remote_window,
            format_size(req),
            req,
            grant_words(h)
        ),
        None => writeln!(
            o,
            "# local window = {}B; remote window = {} (no -w: {})",
            local_window,
            remote_window,
            match h.udp {
                true =>
                    "UDP receive buffers sized to hold 50 ms at -b, up to net.core.rmem_max and a server's --max-window",
                false => "kernel autotuning, sizes at start",
            }
        ),
    }
}

/// What each write carries, at what rate, and the path it takes.
fn payload_lines(o: &mut impl Write, h: &Header) -> io::Result<()> {
    let mut rate = match (h.rate_bps, h.udp) {
        (Some(r), _) => format!("; -b {} per stream", format_rate(r)),
        (None, true) => "; -b 0: as fast as the sockets take them".into(),
        (None, false) => String::new(),
    };
    if let Some(fq) = h.fq_rate_bps {
        rate += &format!(
            "; --fq-rate {} per stream (the kernel paces)",
            format_rate(fq)
        );
    }
    match h.udp {
        true => writeln!(o, "# datagram size = {}B{rate}", h.block_bytes)?,
        false => writeln!(
            o,
            "# block size = {}B; congestion control = {}{rate}{}",
            h.block_bytes,
            h.congestion,
            if h.no_delay { "; TCP_NODELAY (-N)" } else { "" }
        )?,
    }
    writeln!(
        o,
        "# MTU: {}; MSS: {}{}{}",
        opt_bytes(h.path.mtu),
        opt_bytes(h.path.mss),
        h.mss_asked.map_or(String::new(), |m| format!(" (-M {m})")),
        tos_words(h)
    )?;
    low_water_line(o, h)
}

/// The receivers' `SO_RCVLOWAT`, where they raise it.
fn low_water_line(o: &mut impl Write, h: &Header) -> io::Result<()> {
    use crate::data::stream::receiver;
    let Some(mark) = h.rcvlowat_bytes else {
        return Ok(());
    };
    writeln!(
        o,
        "# receivers: SO_RCVLOWAT {mark}B while a stream runs above {:.1} Gbit/s (one host, MSS at most {}B; --no-rcvlowat: off)",
        receiver::low_water_rate_bps(h.block_bytes as usize) as f64 / 1e9,
        receiver::LOW_WATER_MAX_MSS
    )
}

/// Where the threads run: the pin plans, the engine, why this placement.
fn placement_lines(o: &mut impl Write, h: &Header) -> io::Result<()> {
    let (local, remote) = match h.direction {
        // The client sends first; the server receives first.
        Direction::Bidir => (
            h.local_pin.bidir_text(h.streams.into(), true),
            h.remote_pin.bidir_text(h.streams.into(), false),
        ),
        _ => (h.local_pin.to_string(), h.remote_pin.to_string()),
    };
    writeln!(o, "# pin plan: local {local}; remote {remote}")?;
    if h.engine == Engine::Single {
        writeln!(
            o,
            "# engine: single (one sender thread for all streams, poll(); pinned to the first stream's core)"
        )?;
    }
    if let Some(note) = &h.placement_note {
        writeln!(o, "# placement: {note}")?;
    }
    if h.realtime {
        let whose = match h.direction {
            Direction::Forward => "the server's",
            Direction::Reverse => "this end's",
            Direction::Bidir => "both ends'",
        };
        writeln!(
            o,
            "# priority: {whose} UDP receiving threads at SCHED_FIFO {} (--realtime)",
            crate::data::stream::REALTIME_PRIORITY
        )?;
    }
    Ok(())
}

/// How long the test runs, how often it reports, and what its RTT figures are.
fn timing_lines(o: &mut impl Write, h: &Header) -> io::Result<()> {
    use crate::wire::params::Budget;
    let duration = match h.budget {
        Some(Budget::Bytes(n)) => format!(
            "until {n} bytes are sent each way (at most {}s)",
            h.duration_s
        ),
        Some(Budget::Blocks(k)) => format!(
            "until {k} blocks are sent each way (at most {}s)",
            h.duration_s
        ),
        None => format!("{}s", h.duration_s),
    };
    writeln!(
        o,
        "# test duration = {duration}; reporting interval = {}s{}",
        h.interval_s,
        if h.omit_s > 0.0 {
            format!("; first {}s omitted from the totals (-O)", h.omit_s)
        } else {
            String::new()
        }
    )?;
    if h.udp {
        writeln!(
            o,
            "# lost/total: datagrams by sequence (an interval's total is what its highest \
             sequence says was sent; the end line's is the sender's own count, or the \
             rows' when the test is cut short)"
        )?;
    } else if h.echo {
        writeln!(
            o,
            "# RTT = block RTT: each block's header echoed by the receiver (every queue it met)"
        )?;
    } else {
        writeln!(o, "# RTT = kernel srtt (TCP_INFO; {})", no_echo_why(h.peer))?;
    }
    Ok(())
}

/// `-S`'s part of the header: the TOS byte the data carries, read back from this end's
/// socket, and who else was asked for it.
fn tos_words(h: &Header) -> String {
    let Some(asked) = h.tos else {
        return String::new();
    };
    let carried = h.tos_carried.unwrap_or(asked);
    let why = match carried == asked {
        true => "-S".to_string(),
        false if carried == asked & !0x03 && !h.udp => {
            format!("-S {asked:#04x}: the kernel keeps a TCP socket's two ECN bits for itself")
        }
        false => format!("-S {asked:#04x}, read back from the socket"),
    };
    // A peer that reports late is asked for it; whether it sets it is its own affair.
    let whose = h.peer.results_only.map_or("on both ends", |w| w.tos);
    format!(
        "; TOS = {carried:#04x} (DSCP {}, {why}) {whose}",
        carried >> 2
    )
}

fn opt_bytes(v: Option<u32>) -> String {
    v.map_or("?".to_string(), |v| format!("{v}B"))
}

fn row(label: &str, c: &Cols, unit: RateUnit) -> String {
    if let Some(u) = &c.udp {
        return format!(
            "{label} {:>8.3} {:>8.3} {:>11.3} {:>11.3} {:>9}/{:>9} {:>7.3} {:>6}",
            c.start,
            c.end,
            unit.scale(c.bits_per_second),
            u.jitter_ms,
            u.lost_packets,
            u.packets,
            u.lost_percent,
            u.out_of_order
        );
    }
    let ms = |v: f64| format!("{:.3}", v / 1e3);
    let (min, avg, max) = match c.rtt {
        Some(r) => (ms(r.min_us), ms(r.avg_us), ms(r.max_us)),
        None => ("-".into(), "-".into(), "-".into()),
    };
    let retr = c.retransmits.map_or("-".to_string(), |v| v.to_string());
    let cwnd = c
        .snd_cwnd
        .map_or("-".to_string(), |v| (v / 1024).to_string());
    format!(
        "{label} {:>8.3} {:>8.3} {:>11.3} {:>8} {:>8} {:>8} {:>6} {:>9}",
        c.start,
        c.end,
        unit.scale(c.bits_per_second),
        min,
        avg,
        max,
        retr,
        cwnd
    )
}

/// A row's label: `( 0)`, `(sum)`, `(**)`; with `--bidir` one token that names the
/// direction too (`(TX0)`, `(RXsum)`, `#(TX**)`), so columns stay where scripts expect
/// them and `fgrep '**'` gives one line per direction.
fn label(bidir: bool, reverse: bool, inner: &str) -> String {
    match bidir {
        false if inner.len() == 1 => format!("({inner:>2})"),
        false => format!("({inner})"),
        true => format!(
            "{:<7}",
            format!("({}{inner})", if reverse { "RX" } else { "TX" })
        ),
    }
}

/// The header's windows: the sender's send buffer and the receiver's receive buffer, as
/// (local, remote) and the buffer each is.
fn windows(h: &Header) -> ((u64, Buffer), (u64, Buffer)) {
    match h.direction {
        Direction::Reverse => (
            (h.local_window.rcvbuf, Buffer::Receive),
            (h.remote_window.sndbuf, Buffer::Send),
        ),
        _ => (
            (h.local_window.sndbuf, Buffer::Send),
            (h.remote_window.rcvbuf, Buffer::Receive),
        ),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{:.1}", v * 100.0))
}

/// What the header's two windows were granted and why: "Linux grants twice the request"
/// only when that is what happened to both.
fn grant_words(h: &Header) -> String {
    let ((_, lb), (remote_size, rb)) = windows(h);
    let local = h.local_window.grant_words(lb);
    // A peer that reports no sizes was still asked for -w: not "autotuned".
    let remote = match (remote_size, h.local_window.requested) {
        (0, Some(_)) => Some("asked for, its size not reported".to_string()),
        (0, None) => Some("not reported".to_string()),
        _ => h.remote_window.grant_words(rb),
    };
    let doubled = |g: &WindowGrant, b| g.grant(b) == Some(Grant::Doubled) && !g.forced;
    if doubled(&h.local_window, lb) && doubled(&h.remote_window, rb) {
        return "Linux grants twice the request".into();
    }
    let name = |b| match b {
        Buffer::Send => "SO_SNDBUF",
        Buffer::Receive => "SO_RCVBUF",
    };
    match (local, remote) {
        (Some(l), Some(r)) if l == r => format!("both {l}"),
        (l, r) => format!(
            "local {} {}; remote {} {}",
            name(lb),
            l.as_deref().unwrap_or("autotuned"),
            name(rb),
            r.as_deref().unwrap_or("autotuned")
        ),
    }
}

/// The `#(**)` line's fairness columns: Jain's index, smallest and largest stream share,
/// starved stream-intervals.
fn fairness_cols(jain: &str, min: &str, max: &str, starved: &str) -> String {
    format!(" {jain:>6} {min:>6} {max:>6} {starved:>7}")
}

fn core_list(cores: &[CoreLoad]) -> String {
    cores
        .iter()
        .map(|c| {
            format!(
                "cpu{} busy {:.1}% (softirq {:.1}%)",
                c.cpu, c.busy_percent, c.softirq_percent
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn process_line(r: &CpuReport) -> String {
    format!(
        "{:.1}% of a core (user {:.1}%, sys {:.1}%)",
        r.host_total, r.host_user, r.host_system
    )
}

fn thread_list(r: &CpuReport) -> String {
    ThreadCpu::of(r)
        .iter()
        .map(|t| {
            format!(
                "{} {:.1}% (user {:.1}, sys {:.1})",
                t.name, t.total_percent, t.user_percent, t.sys_percent
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `-Z` did, in words: the copies the kernel made after all, and where.
fn send_path(p: &SendPath, same_host: bool) -> String {
    match (p.method, p.copied) {
        (ZeroCopy::Msg, Some(copied)) => format!(
            "-Z msg: the kernel copied {copied} of {} MSG_ZEROCOPY sends after all{}",
            p.sends,
            match (copied, same_host) {
                (0, _) => " (none: the device took the pages)",
                (_, true) => " (one host: delivery to the receiving socket copies)",
                (_, false) => " (a device without scatter-gather copies)",
            }
        ),
        _ => format!(
            "-Z {}: {} sendfile() calls; the socket took the pages by reference, no copy{}",
            p.method,
            p.sends,
            match same_host {
                true => " (one host: the receiver still copies them out)",
                false => "",
            }
        ),
    }
}

impl<W: Write + Send> TextFormatter<W> {
    /// `# kernel:` with each end's TCP drop counters, only when one of them moved.
    fn kernel_line(&mut self, k: &KernelSummary) -> io::Result<()> {
        let ends: Vec<(&str, &crate::os::kstat::KernelReport)> = match &k.receiver {
            Some(r) => vec![("sender", &k.sender), ("receiver", r)],
            None => vec![("both ends (one namespace)", &k.sender)],
        };
        if !ends.iter().any(|(_, r)| r.drops.any()) {
            return Ok(());
        }
        let text: Vec<String> = ends
            .iter()
            .map(|(who, r)| {
                let d = &r.drops;
                format!(
                    "{who}: memory pressure {}, receive-queue drops {}, out-of-order drops {}, \
                     prunes {} ({} + {} segments), backlog drops {}",
                    d.memory_pressures,
                    d.rcvq_drops,
                    d.ofo_drops,
                    d.prune_called,
                    d.rcv_pruned,
                    d.ofo_pruned,
                    d.backlog_drops
                )
            })
            .collect();
        writeln!(
            self.out,
            "# kernel TCP counters over the test: {}",
            text.join("; ")
        )
    }

    /// The end-of-test `# CPU` block: both processes, each stream thread, each core, and
    /// what a gigabit cost.
    fn cpu_block(&mut self, c: &CpuSummary) -> io::Result<()> {
        let (local_role, remote_role) = (self.role(false), self.role(true));
        let o = &mut self.out;
        match (&c.remote, c.same_process) {
            (_, true) => writeln!(
                o,
                "# CPU process (client and server in one process): {} over {:.2} s",
                process_line(&c.local),
                c.local.seconds
            )?,
            (Some(r), false) => writeln!(
                o,
                "# CPU local: {}; remote: {} over {:.2} s",
                process_line(&c.local),
                process_line(r),
                c.local.seconds
            )?,
            (None, false) => writeln!(
                o,
                "# CPU local: {} over {:.2} s",
                process_line(&c.local),
                c.local.seconds
            )?,
        }
        // Threads stopped by a failure or a signal report no time of their own.
        if !c.local.streams.is_empty() {
            writeln!(
                o,
                "# CPU local threads{}: {}",
                local_role,
                thread_list(&c.local)
            )?;
        }
        // A peer may report no threads (its header line says so).
        if let Some(r) = c.remote.as_ref().filter(|r| !r.streams.is_empty()) {
            writeln!(o, "# CPU remote threads{}: {}", remote_role, thread_list(r))?;
        }
        for (who, r) in [("local", Some(&c.local)), ("remote", c.remote.as_ref())] {
            if let Some(p) = r.and_then(|r| r.send_path.as_deref()) {
                writeln!(o, "# CPU {who} send path: {}", send_path(p, c.same_host))?;
            }
        }
        let host = if c.same_host {
            "this host (both ends)"
        } else {
            "local"
        };
        writeln!(o, "# CPU {host} cores: {}", core_list(&c.local.cores))?;
        // Nor, then, any cores.
        if let Some(r) = c
            .remote
            .as_ref()
            .filter(|r| !c.same_host && !r.cores.is_empty())
        {
            writeln!(o, "# CPU remote cores: {}", core_list(&r.cores))?;
        }
        writeln!(
            o,
            "# CPU efficiency: {} Gbit/s per busy core ({:.2} busy cores); {} CPU-seconds per GB",
            c.gbps_per_busy_core
                .map_or("-".into(), |v| format!("{v:.2}")),
            c.busy_cores,
            c.cpu_seconds_per_gb
                .map_or("-".into(), |v| format!("{v:.3}"))
        )
    }

    fn stream_cols(&self, s: &StreamRow) -> Cols {
        Cols {
            start: s.start,
            end: s.end,
            bits_per_second: s.bits_per_second,
            rtt: self.rtt(s.block_rtt, s.kernel_rtt),
            retransmits: s.retransmits,
            snd_cwnd: s.snd_cwnd,
            udp: s.udp,
        }
    }

    fn sum_cols(&self, s: &SumRow) -> Cols {
        Cols {
            start: s.start,
            end: s.end,
            bits_per_second: s.bits_per_second,
            rtt: self.rtt(s.block_rtt, s.kernel_rtt),
            retransmits: s.retransmits,
            snd_cwnd: s.snd_cwnd,
            udp: s.udp,
        }
    }

    /// `-V`: the stream row's details the columns leave out (`#` first, so row parsers
    /// skip it): what the sender wrote, `TCP_INFO` at the span's end, block RTT's median.
    fn verbose_line(&mut self, s: &StreamRow, reverse: bool) -> io::Result<()> {
        let ms = |us: f64| format!("{:.3} ms", us / 1e3);
        let mut parts = vec![format!("sent {}B", s.sent_bytes)];
        if let Some(k) = s.kernel_rtt {
            parts.push(format!("srtt {}", ms(k.avg_us)));
        }
        if let Some(v) = s.rttvar {
            parts.push(format!("rttvar {}", ms(f64::from(v))));
        }
        if let Some(v) = s.min_rtt {
            parts.push(format!("min_rtt {}", ms(f64::from(v))));
        }
        if let Some(v) = s.delivery_rate {
            parts.push(format!("delivery {:.3} Mb/s", v as f64 / 1e6));
        }
        if let Some(v) = s.pacing_rate {
            parts.push(format!("pacing {:.3} Mb/s", v as f64 / 1e6));
        }
        if let Some(v) = s.notsent_bytes {
            parts.push(format!("notsent {v}B"));
        }
        if let Some(v) = s.sndbuf {
            parts.push(format!("sndbuf {v}B"));
        }
        if let Some(b) = s.block_rtt {
            let median = b
                .median_us
                .map_or(String::new(), |m| format!("median {}, ", ms(m)));
            parts.push(format!("block RTT {median}{} samples", b.samples));
        }
        let id = label(self.bidir, reverse, &s.stream.to_string());
        writeln!(self.out, "#   {} {}", id.trim_end(), parts.join(", "))
    }

    fn rtt(&self, block: Option<RttSummary>, kernel: Option<RttSummary>) -> Option<RttSummary> {
        if self.echo { block } else { kernel }
    }
}

impl<W: Write + Send> Formatter for TextFormatter<W> {
    fn header(&mut self, h: &Header) -> io::Result<()> {
        self.started = true;
        self.streams = h.streams;
        self.echo = h.echo;
        self.bidir = h.direction == Direction::Bidir;
        self.peer = h.peer;
        self.udp = h.udp;
        self.direction = h.direction;
        let o = &mut self.out;
        title_lines(o, h)?;
        window_line(o, h)?;
        payload_lines(o, h)?;
        placement_lines(o, h)?;
        timing_lines(o, h)?;
        writeln!(o, "{}", heading(self.bidir, h.udp, self.opts.unit))?;
        o.flush()
    }

    fn stream_failed(&mut self, at: f64, error: &str) -> io::Result<()> {
        self.said_failure = true;
        writeln!(self.out, "# failed at {at:.2} s: {error}")?;
        self.out.flush()
    }

    /// Why the test failed, after what it measured, unless a live line said it: stdout
    /// (and `--logfile`) keep the cause beside the numbers, not only stderr. A test that
    /// failed before its header printed nothing for it to stand beside.
    fn failed(&mut self, error: &str) -> io::Result<()> {
        if self.started && !self.said_failure {
            // The error may carry a peer's words: no control character reaches the report.
            let error = crate::wire::printable_lines(error);
            writeln!(self.out, "# failed: {error}")?;
        }
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalReport) -> io::Result<()> {
        let mark = match iv.left_out() {
            Some(LeftOut::Omitted) => "  (omitted)",
            Some(LeftOut::Uncounted) => "  (after the sender's last report: not in the totals)",
            None => "",
        };
        let (bidir, reverse) = (self.bidir, iv.reverse);
        for s in &iv.streams {
            let line = row(
                &label(bidir, reverse, &s.stream.to_string()),
                &self.stream_cols(s),
                self.opts.unit,
            );
            writeln!(self.out, "{line}{mark}")?;
            if self.opts.verbose {
                self.verbose_line(s, reverse)?;
            }
        }
        if self.streams > 1 {
            let cols = self.sum_cols(&iv.sum);
            writeln!(
                self.out,
                "{}{mark}",
                row(&label(bidir, reverse, "sum"), &cols, self.opts.unit)
            )?;
        }
        // After the interval's rows (both directions' with --bidir): a script reading
        // streams then `(sum)` is not split.
        if let Some(cores) = &iv.cores {
            self.held_cpu = Some(format!(
                "# cpu {:.3}-{:.3} local: {}",
                iv.sum.start,
                iv.sum.end,
                core_list(cores)
            ));
        }
        if !bidir || reverse {
            self.write_held_cpu()?;
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        // An interval whose RX half never came still says its cores.
        self.write_held_cpu()?;
        self.total_rows(s)?;
        self.rtt_line(s)?;
        if let Some(cpu) = &s.cpu {
            self.cpu_block(cpu)?;
        }
        if let Some(k) = &s.kernel {
            self.kernel_line(k)?;
        }
        for line in &s.diagnosis {
            writeln!(self.out, "# {line}")?;
        }
        self.count_lines(s)?;
        self.omitted_line(s)?;
        // After the last direction's totals, as iperf3 prints the server's output.
        if (!self.bidir || s.reverse)
            && let Some(text) = self.server_output.take()
        {
            writeln!(self.out, "# server output (--get-server-output):")?;
            // The server's words, each line escaped: none drives the terminal.
            for line in text.lines() {
                let line = crate::wire::printable(line, usize::MAX);
                writeln!(self.out, "#   {line}")?;
            }
        }
        self.out.flush()
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        self.server_output = Some(text.to_string());
        Ok(())
    }
}

/// The sections of a summary, in the order they print.
impl<W: Write + Send> TextFormatter<W> {
    /// Each stream's `#( N)` total, then the `#(**)` line with its fairness columns.
    fn total_rows(&mut self, s: &Summary) -> io::Result<()> {
        let (bidir, reverse) = (self.bidir, s.reverse);
        for st in &s.streams {
            let line = row(
                &label(bidir, reverse, &st.stream.to_string()),
                &self.stream_cols(st),
                self.opts.unit,
            );
            writeln!(self.out, "#{line}")?;
            if self.opts.verbose {
                self.verbose_line(st, reverse)?;
            }
        }
        let (f, cols) = (&s.fairness, self.sum_cols(&s.sum));
        // The heading of the appended columns, over them (no `**`: `fgrep '**'` stays one
        // line).
        let total = row(&label(bidir, reverse, "**"), &cols, self.opts.unit);
        let heading = "fairness:";
        writeln!(
            self.out,
            "#{heading:>w$}{}",
            fairness_cols("Jain", "min%", "max%", "starved"),
            w = total.len()
        )?;
        writeln!(
            self.out,
            "#{total}{}",
            fairness_cols(
                &f.totals.jain.map_or("-".to_string(), |j| format!("{j:.3}")),
                &pct(f.totals.min_share),
                &pct(f.totals.max_share),
                &f.starved_intervals.to_string()
            )
        )?;
        writeln!(
            self.out,
            "# fairness: Jain {} (1 = equal shares), stream shares {}% to {}%, {} of {} stream-intervals starved",
            f.totals.jain.map_or("-".to_string(), |j| format!("{j:.3}")),
            pct(f.totals.min_share),
            pct(f.totals.max_share),
            f.starved_intervals,
            f.stream_intervals
        )
    }

    /// UDP has no RTT of its own to report (no acknowledgements, no echoes).
    fn rtt_line(&mut self, s: &Summary) -> io::Result<()> {
        if self.udp {
            return Ok(());
        }
        let ms = |v: f64| format!("{:.3} ms", v / 1e3);
        writeln!(
            self.out,
            "# rtt: path (kernel min_rtt) {}; kernel srtt avg {}; block RTT avg {}",
            s.sum.min_rtt.map_or("-".into(), |v| ms(f64::from(v))),
            s.sum.kernel_rtt.map_or("-".into(), |r| ms(r.avg_us)),
            s.sum.block_rtt.map_or_else(
                || match self.echo {
                    true => "- (no echo came back while the senders wrote)".into(),
                    false => format!("- ({})", no_echo_why(self.peer)),
                },
                |r| ms(r.avg_us)
            )
        )
    }

    /// The bytes line's verdict on the two ends' counts.
    fn verdict(&self, s: &Summary) -> &'static str {
        // A test cut short says so whether or not its counts happen to agree (a UDP test
        // stopped between datagrams does): the totals cover only the part that ran.
        match (s.reconciled(), s.cut_short, s.udp(), self.peer.results_only) {
            (true, true, _, _) => "equal, over the part that ran: the test was cut short",
            (true, false, _, _) => "equal",
            (false, true, _, _) => "not reconciled: the test was cut short",
            (false, false, Some(_), _) => "the difference is the datagrams lost",
            // -O against a late peer, which leaves its omitted seconds out on its own
            // clock: the two ends' whole-run counts part by what crossed the boundary.
            (false, false, None, Some(w)) if s.omitted.seconds > 0.0 => w.omit_apart,
            // A late peer's receiver counts what it read by the test's end; the rest was
            // unread when it closed (a reader slower than the path, `-l 1`).
            (false, false, None, Some(w)) if !s.reverse => w.unread,
            (false, false, None, _) => "MISMATCH",
        }
    }

    /// The datagram and byte counts of both ends, and whether they agree.
    fn count_lines(&mut self, s: &Summary) -> io::Result<()> {
        let (verdict, late, o) = (self.verdict(s), self.peer.results_only, &s.omitted);
        // Cut short against a late peer: its counts never came, only this end's.
        let ours_only = late.filter(|_| s.cut_short);
        if let (Some(u), false) = (s.udp(), ours_only.is_some() && !s.reverse) {
            writeln!(
                self.out,
                "# datagrams{}: sender sent {}, receiver got {}, lost {} ({:.3}%); {} out of order, \
                 {} duplicates, jitter {:.3} ms",
                match s.cut_short {
                    true => " (by the receiver's sequence numbers: the test was cut short)",
                    false => "",
                },
                u.packets,
                u.packets - u.lost_packets,
                u.lost_packets,
                u.lost_percent,
                u.out_of_order,
                u.duplicates,
                u.jitter_ms
            )?;
        }
        match (s.sender_silent, ours_only) {
            (_, Some(w)) => writeln!(
                self.out,
                "# bytes: this end {} {}; {}",
                if s.reverse { "read" } else { "wrote" },
                if s.reverse {
                    s.received_whole_run()
                } else {
                    s.sent_whole_run()
                },
                w.count_later
            )?,
            (true, None) => writeln!(
                self.out,
                "# bytes: the sender's count is unknown (it reported no interval that counts before the \
                 test was cut short), receiver read {}",
                s.received_whole_run()
            )?,
            // Each end left its own -O seconds out on its own clock: the counts after -O
            // are what the two ends have (a whole run made of this end's omitted bytes and
            // the server's count after them read more received than sent).
            (false, None) if late.is_some() && o.seconds > 0.0 => writeln!(
                self.out,
                "# bytes after -O, each end by its own clock: sender wrote {}, receiver read {}: \
                 {verdict}",
                s.sum_sent.bytes, s.sum_received.bytes
            )?,
            (false, None) => writeln!(
                self.out,
                "# bytes: sender wrote {}, receiver read {}{}: {verdict}",
                s.sent_whole_run(),
                s.received_whole_run(),
                match o.seconds > 0.0 {
                    true => " over the whole run, -O's seconds included",
                    false => "",
                }
            )?,
        }
        Ok(())
    }

    /// What `-O` left out of the totals.
    fn omitted_line(&mut self, s: &Summary) -> io::Result<()> {
        let o = &s.omitted;
        if let (true, Some(w)) = (o.seconds > 0.0, self.peer.results_only) {
            writeln!(
                self.out,
                "# omitted (-O {}): the first {} s, {} bytes by this end's clock, are not in the \
                 totals {}",
                o.seconds,
                o.seconds,
                if s.reverse {
                    o.received_bytes
                } else {
                    o.sent_bytes
                },
                w.omit_theirs
            )?;
        } else if o.seconds > 0.0 && o.sent_bytes == o.received_bytes {
            writeln!(
                self.out,
                "# omitted (-O {}): the first {} s, {} bytes (sender and receiver cut at the same \
                 byte), are not in the totals",
                o.seconds, o.seconds, o.received_bytes
            )?;
        } else if o.seconds > 0.0 {
            writeln!(
                self.out,
                "# omitted (-O {}): the first {} s, sender {} and receiver {} bytes, are not in the totals",
                o.seconds, o.seconds, o.sent_bytes, o.received_bytes
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::sample;

    /// `-f` changes the rate column and its heading; `-V` adds a `#` detail line under each
    /// stream row (the sample's stream 0: sent bytes, TCP_INFO, block RTT median).
    #[test]
    fn rate_unit_and_verbose_lines() {
        let opts = TextOptions {
            unit: RateUnit::GigaBits,
            verbose: true,
        };
        let mut out = Vec::new();
        {
            let mut f = TextFormatter::with_options(&mut out, opts);
            let mut h = sample::header();
            h.streams = 3;
            f.header(&h).unwrap();
            f.interval(&sample::interval()).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("end, s        Gb/s  RTT, ms"), "{text}");
        let rate = sample::interval().streams[0].bits_per_second / 1e9;
        assert!(
            text.contains(&format!("( 0)    1.002    1.250 {rate:>11.3}")),
            "{text}"
        );
        assert!(
            text.contains(
                "#   ( 0) sent 3458727936B, srtt 0.081 ms, rttvar 0.020 ms, min_rtt 0.030 ms, \
                 delivery 27571.789 Mb/s, pacing 55000.000 Mb/s, notsent 2544B, sndbuf 4194304B, \
                 block RTT median 2.449 ms, 197 samples\n"
            ),
            "{text}"
        );
        // Stream 2 has no TCP_INFO and read nothing: only what the sender wrote.
        assert!(text.contains("#   ( 2) sent 2B\n"), "{text}");
    }

    /// The `(sum)` and `(**)` rows print the model's cwnd sum and the rtt line its min RTT;
    /// text adds nothing up itself.
    #[test]
    fn sum_rows_print_the_models_cwnd_and_min_rtt() {
        let mut iv = sample::interval();
        iv.sum.snd_cwnd = Some(10 << 20);
        let mut s = sample::summary();
        s.sum.snd_cwnd = Some(3 << 20);
        s.sum.min_rtt = Some(12_345);
        let mut out = Vec::new();
        let mut f = TextFormatter::new(&mut out);
        f.streams = 3;
        f.interval(&iv).unwrap();
        f.summary(&s).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = |start: &str| text.lines().find(|l| l.starts_with(start)).unwrap();
        assert!(line("(sum)").ends_with(" 10240"), "{text}");
        assert!(line("#(**)").contains(" 3072 "), "{text}");
        assert!(
            line("# rtt:").starts_with("# rtt: path (kernel min_rtt) 12.345 ms;"),
            "{text}"
        );
    }

    /// `-Z`'s line in the CPU block: how many MSG_ZEROCOPY sends the kernel copied after
    /// all (the honest loopback statement), or how many sendfile() calls went by reference.
    #[test]
    fn the_cpu_block_says_what_zerocopy_did_on_each_end() {
        let text = |local: Option<SendPath>, remote: Option<SendPath>, same_host: bool| {
            let mut s = sample::summary();
            let cpu = s.cpu.as_mut().unwrap();
            cpu.same_host = same_host;
            cpu.local.send_path = local.map(Box::new);
            cpu.remote.as_mut().unwrap().send_path = remote.map(Box::new);
            let mut out = Vec::new();
            TextFormatter::new(&mut out).summary(&s).unwrap();
            String::from_utf8(out)
                .unwrap()
                .lines()
                .filter(|l| l.contains("send path"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert!(text(None, None, true).is_empty());
        assert_eq!(
            text(SendPath::of(Some(ZeroCopy::Msg), 120, 120), None, true),
            [
                "# CPU local send path: -Z msg: the kernel copied 120 of 120 MSG_ZEROCOPY sends \
              after all (one host: delivery to the receiving socket copies)"
            ]
        );
        assert_eq!(
            text(None, SendPath::of(Some(ZeroCopy::Sendfile), 7, 0), false),
            [
                "# CPU remote send path: -Z sendfile: 7 sendfile() calls; the socket took the \
              pages by reference, no copy"
            ]
        );
        let both = text(
            SendPath::of(Some(ZeroCopy::Msg), 5, 0),
            SendPath::of(Some(ZeroCopy::Sendfile), 3, 0),
            true,
        );
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(both[0].ends_with(
            "copied 0 of 5 MSG_ZEROCOPY sends after all (none: the device took the pages)"
        ));
        assert!(both[1].ends_with("no copy (one host: the receiver still copies them out)"));
    }

    /// Without block RTT, the text says why: `--no-echo`, or a peer that echoes none. With
    /// -O the bytes line says it spans the whole run, beside a `# omitted` line that leaves
    /// those seconds out of the totals.
    #[test]
    fn missing_block_rtt_and_whole_run_bytes_say_why() {
        let text = |peer: &str, omit: f64| {
            let mut h = sample::header();
            (h.echo, h.remote_software) = (false, peer.into());
            h.peer = crate::iperf3::wording::of_remote_software(peer);
            let mut s = sample::summary();
            s.sum.block_rtt = None;
            s.omitted.seconds = omit;
            let mut out = Vec::new();
            let mut f = TextFormatter::new(&mut out);
            f.header(&h).unwrap();
            f.summary(&s).unwrap();
            String::from_utf8(out).unwrap()
        };
        let ours = text("pinperf 0.1.0", 0.0);
        assert!(ours.contains("block RTT avg - (--no-echo)"), "{ours}");
        let theirs = text("iperf3 3.12", 0.0);
        assert!(!theirs.contains("--no-echo"), "{theirs}");
        assert!(
            theirs.contains("- (an iperf3 peer echoes no blocks)"),
            "{theirs}"
        );
        assert!(!ours.contains("whole run"), "{ours}");
        let omitted = text("pinperf 0.1.0", 1.0);
        assert!(
            omitted.contains(" over the whole run, -O's seconds included: "),
            "{omitted}"
        );
        assert!(
            omitted.contains("the first 1 s, 0 bytes (sender and receiver cut at the same byte)"),
            "{omitted}"
        );
        // An iperf3 server cuts on its own clock: no claim of one byte for both ends.
        let theirs = text("iperf3 3.12", 1.0);
        assert!(
            theirs.contains("the first 1 s, 0 bytes by this end's clock")
                && !theirs.contains("same byte"),
            "{theirs}"
        );
        // Nor a whole run made of this end's omitted bytes and the server's count after them.
        assert!(
            theirs.contains("# bytes after -O, each end by its own clock: sender wrote ")
                && !theirs.contains("whole run"),
            "{theirs}"
        );
    }

    /// `-S`: the header says the TOS the socket carries, not only what was asked
    /// (`-S 0x2b` claimed 0x2b on both ends while TCP carried 0x28), and an iperf3 server
    /// was only asked.
    #[test]
    fn the_header_says_the_tos_the_data_carries_and_who_was_asked() {
        let words = |asked: Option<u8>, carried: Option<u8>, udp: bool, peer: &str| {
            let mut h = sample::header();
            (h.tos, h.tos_carried, h.udp, h.remote_software) = (asked, carried, udp, peer.into());
            h.peer = crate::iperf3::wording::of_remote_software(peer);
            tos_words(&h)
        };
        assert_eq!(words(None, None, false, "pinperf 0.1.0"), "");
        assert_eq!(
            words(Some(0x28), Some(0x28), false, "pinperf 0.1.0"),
            "; TOS = 0x28 (DSCP 10, -S) on both ends"
        );
        assert_eq!(
            words(Some(0x2b), Some(0x28), false, "pinperf 0.1.0"),
            "; TOS = 0x28 (DSCP 10, -S 0x2b: the kernel keeps a TCP socket's two ECN bits \
             for itself) on both ends"
        );
        assert_eq!(
            words(Some(0x2b), Some(0x2b), true, "pinperf 0.1.0"),
            "; TOS = 0x2b (DSCP 10, -S) on both ends"
        );
        assert_eq!(
            words(
                Some(0x28),
                Some(0x28),
                false,
                crate::iperf3::client::REMOTE_WORDS
            ),
            "; TOS = 0x28 (DSCP 10, -S) here, asked of the iperf3 server"
        );
    }

    /// The bytes line says a test was cut short whether or not its counts agree.
    #[test]
    fn the_bytes_line_says_a_cut_short_test_was_cut_short() {
        let line = |cut_short: bool| {
            let mut s = sample::summary();
            s.sum_sent.bytes = s.sum_received.bytes;
            assert!(s.reconciled(), "the counts agree");
            s.cut_short = cut_short;
            let mut out = Vec::new();
            TextFormatter::new(&mut out).summary(&s).unwrap();
            String::from_utf8(out)
                .unwrap()
                .lines()
                .find(|l| l.starts_with("# bytes:"))
                .map(String::from)
                .unwrap()
        };
        assert!(line(false).ends_with(": equal"), "{}", line(false));
        assert!(
            line(true).ends_with(": equal, over the part that ran: the test was cut short"),
            "{}",
            line(true)
        );
    }

    /// The `#(**)` line's appended columns have a heading over them, and `fgrep '**'`
    /// still finds one line.
    #[test]
    fn the_fairness_columns_have_a_heading() {
        let mut out = Vec::new();
        let mut f = TextFormatter::new(&mut out);
        f.streams = 3;
        f.summary(&sample::summary()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.contains("**")).count(),
            1,
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.iter().position(|l| l.starts_with("#(**)")).unwrap();
        let heading = lines[total - 1];
        assert!(
            heading.starts_with("# ")
                && heading.ends_with("fairness:   Jain   min%   max% starved"),
            "{text}"
        );
        // Each heading ends where its column ends.
        let ends = |line: &str| -> Vec<usize> {
            line.char_indices()
                .filter(|&(i, c)| c != ' ' && line[i + 1..].starts_with(' ') || i + 1 == line.len())
                .map(|(i, _)| i)
                .collect()
        };
        let (h, t) = (ends(heading), ends(lines[total]));
        assert_eq!(
            h[h.len() - 4..],
            t[t.len() - 4..],
            "{heading}\n{}",
            lines[total]
        );
        assert!(
            lines[total].ends_with("  0.665    0.0   51.8       4"),
            "{text}"
        );
    }

    fn header_line(requested: u64, local: (u64, u64), remote: (u64, u64)) -> String {
        let mut h = sample::header();
        for (w, (sndbuf, rcvbuf)) in [(&mut h.local_window, local), (&mut h.remote_window, remote)]
        {
            *w = WindowGrant {
                requested: Some(requested),
                sndbuf,
                rcvbuf,
                wmem_max: Some(4 << 20),
                rmem_max: Some(4 << 20),
                ..WindowGrant::default()
            };
        }
        let mut out = Vec::new();
        TextFormatter::new(&mut out).header(&h).unwrap();
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .find(|l| l.starts_with("# local window"))
            .unwrap()
            .to_string()
    }

    /// "Linux grants twice the request" was printed at `-w 1k` (granted the
    /// kernel's minimum, 4608 and 2304 B) and when a cap halved the grant.
    #[test]
    fn the_header_says_what_was_granted_and_why() {
        assert!(
            header_line(64 << 10, (128 << 10, 128 << 10), (128 << 10, 128 << 10))
                .ends_with("(requested -w 64k = 65536B; Linux grants twice the request)")
        );
        let line = header_line(1 << 10, (4608, 2304), (4608, 2304));
        assert!(
            line.ends_with(
                "(requested -w 1k = 1024B; both the kernel's minimum, above twice the request)"
            ),
            "{line}"
        );
        // An iperf3 server reports no sizes (0): asked for -w, not "autotuned".
        let line = header_line(4 << 20, (8 << 20, 8 << 20), (0, 0));
        assert!(
            line.ends_with(
                "local SO_SNDBUF twice the request; remote SO_RCVBUF asked for, its size not \
                 reported)"
            ),
            "{line}"
        );
        let line = header_line(8 << 20, (8 << 20, 8 << 20), (16 << 20, 16 << 20));
        assert!(
            line.ends_with(
                "(requested -w 8M = 8388608B; local SO_SNDBUF capped at twice net.core.wmem_max = \
                 4194304; remote SO_RCVBUF twice the request)"
            ),
            "{line}"
        );
    }
}
