//! `--format iperf3-text`: the client's report in iperf3 3.x's text, line for line, so a
//! script that reads iperf3's text (`grep receiver`, `awk '/sender/'`) reads pinperf's.
//! The format strings, the unit formatting (`unit_snprintf`: four places, K/M/G/T in
//! 1000s for bits and 1024s for bytes, `-f`'s letters, adaptive by default) and the order
//! of the lines are iperf3's (esnet/iperf's `iperf_locale.c`, `units.c`, `iperf_api.c`):
//! `Connecting to host`, one `connected to` line per stream, the column header, a row per
//! stream per interval and a `[SUM]` row with several streams (a separator between the
//! interval blocks), `(omitted)` rows for `-O`, then the end block (separator, header,
//! each stream's sender and receiver lines, the `[SUM]` lines, `-V`'s `CPU Utilization`)
//! and `iperf Done.`.
//!
//! The figures are the report model's, mapped as `--format iperf3-json` maps them (see
//! `json.rs`), so text and JSON agree: a sending host's interval rows carry what its
//! senders wrote, a receiving host's what it read; the
//! end block keeps iperf3's sides (`sender` the bytes written, `receiver` the bytes read);
//! times restart after `-O`'s omitted seconds as iperf3's clock does; a cut-short test's
//! rows past the sender's last report are not printed; a side whose count never came is
//! left out (no line), not made up. What differs from iperf3, because pinperf's report
//! does not have what iperf3 prints:
//! - `[ ID]`: pinperf's stream number, as `socket` in iperf3-json (`--bidir`'s
//!   server-to-client streams follow the client's), not a file descriptor.
//! - `connected to` lines: the control connection's addresses and ports for every stream
//!   (the data connections' own local ports are not in the report); `Connecting to host`
//!   names the server's address, not the name given to `-c`.
//! - `Cwnd` and `Retr`: `0.00 Bytes` and 0 where the sender's `TCP_INFO` is not known, as
//!   iperf3 prints its zeros; the end block's header always has `Retr` for TCP (iperf3's
//!   when the sender reads retransmits, as Linux does).
//! - `-V`: only `Test Complete. Summary Results:`, `CPU Utilization` and the congestion
//!   control lines (`snd_tcp_congestion`, `rcv_tcp_congestion`, where known: the other
//!   end's only on one host); iperf3's other verbose lines (version, cookie, MSS, `Starting
//!   Test`) are not printed.
//! - A failure: `iperf3: error - ...` after what was measured (iperf3 writes its error to
//!   stderr; pinperf writes its one-line error there too).

use std::io::{self, Write};
use std::net::SocketAddr;

use super::json::Role;
use crate::choices::RateUnit;
use crate::report::Formatter;
use crate::report::model::{
    Direction, Header, IntervalReport, SideTotal, StreamRow, SumRow, Summary, UdpFigures,
};

/// iperf3's line between interval blocks and before the end block.
const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -\n";

/// iperf3's `unit_snprintf`: `value` (bytes, or bytes per second) in the unit of `-f`'s
/// `letter` (lower case: bits, K/M/G/T in 1000s; upper case: bytes, in 1024s; `a`/`A`
/// or anything else: the largest unit that keeps the number under one step), in four
/// places, without the plural `s` iperf3's format strings add: `1.16 GByte`, `9.40 Gbit`.
pub fn unit_snprintf(value: f64, letter: char) -> String {
    const BYTE_LABELS: [&str; 5] = ["Byte", "KByte", "MByte", "GByte", "TByte"];
    const BIT_LABELS: [&str; 5] = ["bit", "Kbit", "Mbit", "Gbit", "Tbit"];
    let value = if value.is_finite() { value } else { 0.0 };
    let bytes = letter.is_ascii_uppercase();
    let (n, step) = match bytes {
        true => (value, 1024.0),
        false => (value * 8.0, 1000.0),
    };
    let power = match letter.to_ascii_uppercase() {
        'B' => 0,
        'K' => 1,
        'M' => 2,
        'G' => 3,
        'T' => 4,
        _ => {
            let (mut scaled, mut power) = (n, 0);
            while scaled >= step && power < 4 {
                scaled /= step;
                power += 1;
            }
            power
        }
    };
    // iperf3 multiplies by 1/step per power, computed step by step.
    let factor = (0..power).fold(1.0, |f, _| f / step);
    let n = n * factor;
    let label = match bytes {
        true => BYTE_LABELS[power],
        false => BIT_LABELS[power],
    };
    if n < 9.995 {
        format!("{n:4.2} {label}")
    } else if n < 99.95 {
        format!("{n:4.1} {label}")
    } else {
        format!("{n:4.0} {label}")
    }
}

/// C's `%.2g`: two significant digits, trailing zeros dropped, the exponent form outside
/// 1e-4..1e2 (`0`, `0.5`, `12`, `1e+02`).
fn percent_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".into();
    }
    let trim = |s: String| match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    };
    let e = format!("{x:.1e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..2).contains(&exp) {
        let precision = (1 - exp) as usize;
        trim(format!("{x:.precision$}"))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa.to_string()), exp.abs())
    }
}

/// An address's host (a v4-mapped v6 address as v4, as iperf3 prints it) and port.
fn host_port(addr: &str) -> (String, u16) {
    match addr.parse::<SocketAddr>() {
        Ok(a) => (a.ip().to_canonical().to_string(), a.port()),
        Err(_) => (addr.to_string(), 0),
    }
}

/// The figures of one line, whatever its kind: a span, its bytes and rate.
struct Span {
    start: f64,
    end: f64,
    bytes: u64,
    bits_per_second: f64,
}

impl Role {
    /// `--bidir`'s `[TX-C]`/`[RX-C]` after the ID.
    fn tag(&self) -> &'static str {
        match (self.bidir, self.sender) {
            (false, _) => "",
            (true, true) => "[TX-C]",
            (true, false) => "[RX-C]",
        }
    }

    /// `--bidir`'s blank in a UDP sender's row, under the receiver's `Jitter` column.
    fn blank(&self) -> &'static str {
        if self.bidir { "          " } else { "" }
    }

    fn id(&self, stream: u16) -> String {
        format!("[{:>3}]", self.first_socket + u64::from(stream))
    }

    /// ` 0.00-1.00   sec  1.16 GBytes  9.40 Gbits/sec`: what every row starts with after
    /// its ID and role.
    fn span(&self, s: &Span, letter: char) -> String {
        let clock = |t: f64| match t.is_finite() {
            true => (t - self.clock_from).max(0.0),
            false => 0.0,
        };
        format!(
            " {:6.2}-{:<6.2} sec  {}s  {}s/sec",
            clock(s.start),
            clock(s.end),
            unit_snprintf(s.bytes as f64, 'A'),
            unit_snprintf(s.bits_per_second / 8.0, letter)
        )
    }

    /// What an interval row (`sum`: its `[SUM]` row) ends with, by role: TCP sender
    /// `Retr  Cwnd`, TCP receiver nothing, UDP sender datagrams sent, UDP receiver jitter
    /// and loss.
    /// An interval row's span as iperf3 prints it: a sending host's bytes are what its
    /// senders wrote (`sent`), a receiving host's what it read (as `json.rs` writes them).
    fn row(&self, read: Span, sent: u64) -> Span {
        match self.sender {
            true => Span {
                bytes: sent,
                bits_per_second: sent as f64 * 8.0 / (read.end - read.start).max(1e-9),
                ..read
            },
            false => read,
        }
    }

    /// A UDP sending row's datagrams: its senders' bytes over the datagram.
    fn row_udp(&self, udp: Option<UdpFigures>, sent: u64) -> Option<UdpFigures> {
        match self.sender && self.udp {
            true => Some(UdpFigures {
                packets: sent / self.datagram,
                ..udp.unwrap_or_default()
            }),
            false => udp,
        }
    }

    fn interval_tail(
        &self,
        tcp: (Option<u64>, Option<u64>),
        udp: Option<UdpFigures>,
        sum: bool,
    ) -> String {
        let (retransmits, cwnd) = tcp;
        let u = udp.unwrap_or_default();
        match (self.udp, self.sender, sum) {
            (false, true, false) => format!(
                "  {:>3}   {}s       ",
                retransmits.unwrap_or(0),
                unit_snprintf(cwnd.unwrap_or(0) as f64, 'A')
            ),
            (false, true, true) => format!("  {:>3}             ", retransmits.unwrap_or(0)),
            (false, false, _) => "                  ".into(),
            (true, true, _) => format!(" {} {}  ", self.blank(), u.packets),
            (true, false, _) => loss(&u),
        }
    }
}

/// A UDP receiver's `  0.023 ms  0/77 (0%)  `.
fn loss(u: &UdpFigures) -> String {
    let jitter = if u.jitter_ms.is_finite() {
        u.jitter_ms
    } else {
        0.0
    };
    format!(
        "  {jitter:5.3} ms  {}/{} ({}%)  ",
        u.lost_packets,
        u.packets,
        percent_g(u.lost_percent)
    )
}

/// A UDP sender's end line: no loss seen, the datagrams it sent.
fn sent_udp(packets: u64) -> String {
    format!("  {:5.3} ms  0/{packets} (0%)  ", 0.0)
}

/// Writes iperf3's client text to `out`.
pub struct Iperf3TextFormatter<W: Write> {
    out: W,
    /// `-f`'s letter.
    letter: char,
    verbose: bool,
    header: Option<Header>,
    /// The interval being gathered: `--bidir`'s two directions print as one block.
    held: Vec<IntervalReport>,
    /// Interval blocks printed (the column header is over the first).
    blocks: u32,
    /// Directions whose totals are printed.
    ended: usize,
    server_output: Option<String>,
}

impl<W: Write> Iperf3TextFormatter<W> {
    pub fn new(out: W, unit: RateUnit, verbose: bool) -> Self {
        Iperf3TextFormatter {
            out,
            letter: unit.letter(),
            verbose,
            header: None,
            held: Vec::new(),
            blocks: 0,
            ended: 0,
            server_output: None,
        }
    }

    /// The interval column header: by the client's role, as iperf3 prints it over its
    /// first interval.
    fn interval_heading(h: &Header) -> &'static str {
        match (h.udp, h.direction) {
            (false, Direction::Forward) => {
                "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd\n"
            }
            (false, Direction::Bidir) => {
                "[ ID][Role] Interval           Transfer     Bitrate         Retr  Cwnd\n"
            }
            (false, Direction::Reverse) => "[ ID] Interval           Transfer     Bitrate\n",
            (true, Direction::Forward) => {
                "[ ID] Interval           Transfer     Bitrate         Total Datagrams\n"
            }
            (true, Direction::Reverse) => {
                "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n"
            }
            (true, Direction::Bidir) => {
                "[ ID][Role] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n"
            }
        }
    }

    /// The end block's column header.
    fn end_heading(h: &Header) -> &'static str {
        match (h.udp, h.direction == Direction::Bidir) {
            (false, false) => "[ ID] Interval           Transfer     Bitrate         Retr\n",
            (false, true) => "[ ID][Role] Interval           Transfer     Bitrate         Retr\n",
            (true, false) => {
                "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n"
            }
            (true, true) => {
                "[ ID][Role] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n"
            }
        }
    }

    /// Prints the held interval: each direction's rows and sum, the client's first.
    fn flush_held(&mut self) -> io::Result<()> {
        let Some(h) = self.header.clone() else {
            self.held.clear();
            return Ok(());
        };
        if self.held.is_empty() {
            return Ok(());
        }
        let mut held = std::mem::take(&mut self.held);
        held.sort_by_key(|iv| iv.reverse);
        match self.blocks {
            0 => self.out.write_all(Self::interval_heading(&h).as_bytes())?,
            _ if h.streams > 1 => self.out.write_all(SEPARATOR.as_bytes())?,
            _ => {}
        }
        self.blocks += 1;
        for iv in &held {
            self.interval_rows(&h, iv)?;
        }
        self.out.flush()
    }

    fn interval_rows(&mut self, h: &Header, iv: &IntervalReport) -> io::Result<()> {
        let role = Role::of(h, iv.reverse);
        let role = if iv.omitted { role.omitted() } else { role };
        let omitted = if iv.omitted { "(omitted)" } else { "" };
        let tag = role.tag();
        for r in &iv.streams {
            let span = role.span(&role.row(stream_span(r), r.sent_bytes), self.letter);
            let udp = role.row_udp(r.udp, r.sent_bytes);
            let tail = role.interval_tail((r.retransmits, r.snd_cwnd), udp, false);
            writeln!(self.out, "{}{tag}{span}{tail}{omitted}", role.id(r.stream))?;
        }
        if h.streams > 1 {
            let s = &iv.sum;
            let span = role.span(&role.row(sum_span(s), s.sent_bytes), self.letter);
            let udp = role.row_udp(s.udp, s.sent_bytes);
            let tail = role.interval_tail((s.retransmits, None), udp, true);
            writeln!(self.out, "[SUM]{tag}{span}{tail}{omitted}")?;
        }
        Ok(())
    }

    /// One direction's end lines: each stream's sender and receiver, then the sums.
    fn end_lines(&mut self, h: &Header, s: &Summary) -> io::Result<()> {
        let role = Role::of(h, s.reverse);
        let tag = role.tag();
        let (sent_known, received_known) = (!s.sum_sent.unknown, !s.sum_received.unknown);
        for r in &s.streams {
            let id = role.id(r.stream);
            let sent = Span {
                bytes: r.sent_bytes,
                bits_per_second: r.sent.map_or(0.0, |t| t.bits_per_second),
                ..stream_span(r)
            };
            let sent = role.span(&sent, self.letter);
            let received = role.span(&stream_span(r), self.letter);
            if role.udp {
                let u = r.udp.unwrap_or_default();
                if sent_known {
                    writeln!(self.out, "{id}{tag}{sent}{}sender", sent_udp(u.packets))?;
                    self.out_of_order(&role, r)?;
                }
                if received_known && r.udp.is_some() {
                    writeln!(self.out, "{id}{tag}{received}{}receiver", loss(&u))?;
                }
                continue;
            }
            if sent_known {
                let retr = r.retransmits.unwrap_or(0);
                writeln!(self.out, "{id}{tag}{sent}  {retr:>3}            sender")?;
            }
            if received_known {
                writeln!(self.out, "{id}{tag}{received}                  receiver")?;
            }
        }
        if h.streams > 1 {
            self.end_sums(&role, s)?;
        }
        Ok(())
    }

    /// `[SUM]`'s sender and receiver lines.
    fn end_sums(&mut self, role: &Role, s: &Summary) -> io::Result<()> {
        let tag = role.tag();
        let sent = role.span(&side_span(&s.sum_sent), self.letter);
        let received = role.span(&side_span(&s.sum_received), self.letter);
        let (sent_tail, received_tail) = match (role.udp, s.sum.udp) {
            (true, Some(u)) => (sent_udp(u.packets), loss(&u)),
            (true, None) => (sent_udp(0), loss(&UdpFigures::default())),
            (false, _) => (
                format!("  {:>3}             ", s.sum_sent.retransmits.unwrap_or(0)),
                "                  ".to_string(),
            ),
        };
        if !s.sum_sent.unknown {
            writeln!(self.out, "[SUM]{tag}{sent}{sent_tail}sender")?;
        }
        if !s.sum_received.unknown {
            writeln!(self.out, "[SUM]{tag}{received}{received_tail}receiver")?;
        }
        Ok(())
    }

    /// A UDP stream's datagrams received out of order, as iperf3 prints them (under
    /// `[SUM]`, with one decimal).
    fn out_of_order(&mut self, role: &Role, r: &StreamRow) -> io::Result<()> {
        let n = r.udp.map_or(0, |u| u.out_of_order);
        if n == 0 {
            return Ok(());
        }
        let clock = |t: f64| (t - role.clock_from).max(0.0);
        writeln!(
            self.out,
            "[SUM]{} {:4.1}-{:4.1} sec  {n} datagrams received out-of-order",
            role.tag(),
            clock(r.start),
            clock(r.end)
        )
    }

    /// `-V`'s lines after the client's sending direction: CPU (twice with `--bidir`, as
    /// iperf3 prints it) and each direction's congestion control.
    fn verbose_lines(&mut self, h: &Header, s: &Summary) -> io::Result<()> {
        if !self.verbose {
            return Ok(());
        }
        if !s.reverse {
            let c = s.cpu_utilization_percent;
            let get = |v: Option<f64>| v.filter(|x| x.is_finite()).unwrap_or(0.0);
            let local = [
                get(c.map(|c| c.host_total)),
                get(c.map(|c| c.host_user)),
                get(c.map(|c| c.host_system)),
            ];
            let remote = [
                get(c.and_then(|c| c.remote_total)),
                get(c.and_then(|c| c.remote_user)),
                get(c.and_then(|c| c.remote_system)),
            ];
            let roles: &[(&str, &str)] = match h.direction {
                Direction::Bidir => &[("sender", "receiver"), ("receiver", "sender")],
                _ => &[("sender", "receiver")],
            };
            for (mine, theirs) in roles {
                writeln!(
                    self.out,
                    "CPU Utilization: local/{mine} {:.1}% ({:.1}%u/{:.1}%s), remote/{theirs} {:.1}% ({:.1}%u/{:.1}%s)",
                    local[0], local[1], local[2], remote[0], remote[1], remote[2]
                )?;
            }
        }
        if !h.udp {
            let (snd, rcv) = congestion(h, s.reverse);
            if let Some(c) = snd {
                writeln!(self.out, "snd_tcp_congestion {c}")?;
            }
            if let Some(c) = rcv {
                writeln!(self.out, "rcv_tcp_congestion {c}")?;
            }
        }
        Ok(())
    }

    /// One direction's totals; `done`: the end of the report (`iperf Done.` follows the
    /// last direction's).
    fn totals(&mut self, s: &Summary, done: bool) -> io::Result<()> {
        self.flush_held()?;
        let Some(h) = self.header.clone() else {
            return Ok(());
        };
        if self.ended == 0 {
            self.out.write_all(SEPARATOR.as_bytes())?;
            if self.verbose {
                self.out.write_all(b"Test Complete. Summary Results:\n")?;
            }
            self.out.write_all(Self::end_heading(&h).as_bytes())?;
        }
        self.ended += 1;
        self.end_lines(&h, s)?;
        self.verbose_lines(&h, s)?;
        if let Some(text) = self.server_output.take() {
            write!(self.out, "\nServer output:\n{text}\n")?;
        }
        if done && self.ended >= h.direction.reversed().len() {
            self.out.write_all(b"\niperf Done.\n")?;
        }
        self.out.flush()
    }
}

/// The congestion control of a direction's sender and receiver, where known (the other
/// end's only on one host, as iperf3-json says it).
fn congestion(h: &Header, reverse: bool) -> (Option<String>, Option<String>) {
    let local = Some(h.congestion.clone()).filter(|c| !c.is_empty() && c != "?");
    let remote = local.clone().filter(|_| h.same_host);
    match reverse {
        true => (remote, local),
        false => (local, remote),
    }
}

fn stream_span(r: &StreamRow) -> Span {
    Span {
        start: r.start,
        end: r.end,
        bytes: r.bytes,
        bits_per_second: r.bits_per_second,
    }
}

fn sum_span(s: &SumRow) -> Span {
    Span {
        start: s.start,
        end: s.end,
        bytes: s.bytes,
        bits_per_second: s.bits_per_second,
    }
}

fn side_span(t: &SideTotal) -> Span {
    Span {
        start: t.start,
        end: t.end,
        bytes: t.bytes,
        bits_per_second: t.bits_per_second,
    }
}

impl<W: Write + Send> Formatter for Iperf3TextFormatter<W> {
    fn header(&mut self, header: &Header) -> io::Result<()> {
        let (local, local_port) = host_port(&header.local);
        let (remote, remote_port) = host_port(&header.remote);
        writeln!(self.out, "Connecting to host {remote}, port {remote_port}")?;
        if header.direction == Direction::Reverse {
            writeln!(self.out, "Reverse mode, remote host {remote} is sending")?;
        }
        for &reverse in header.direction.reversed() {
            let role = Role::of(header, reverse);
            for i in 0..header.streams {
                writeln!(
                    self.out,
                    "{} local {local} port {local_port} connected to {remote} port {remote_port}",
                    role.id(i)
                )?;
            }
        }
        self.header = Some(header.clone());
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalReport) -> io::Result<()> {
        if iv.uncounted {
            return Ok(());
        }
        if self.held.first().is_some_and(|h| h.index != iv.index) {
            self.flush_held()?;
        }
        self.held.push(iv.clone());
        let directions = self
            .header
            .as_ref()
            .map_or(1, |h| h.direction.reversed().len());
        if self.held.len() >= directions {
            self.flush_held()?;
        }
        Ok(())
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.totals(summary, true)
    }

    fn cut_short(&mut self, summary: &Summary, error: &str) -> io::Result<()> {
        self.totals(summary, false)?;
        self.failed(error)
    }

    fn failed(&mut self, error: &str) -> io::Result<()> {
        self.flush_held()?;
        if self.header.is_some() {
            // The error may carry a peer's words: no control character reaches the report.
            let error = crate::wire::printable_lines(error);
            writeln!(self.out, "iperf3: error - {error}")?;
        }
        self.out.flush()
    }

    fn server_output(&mut self, text: &str) -> io::Result<()> {
        self.server_output = Some(text.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{SentTotal, sample};

    /// The sample test cut to `streams` streams, `edit`ed, through the formatter.
    fn rendered(
        streams: u16,
        edit: impl FnOnce(&mut Header, &mut IntervalReport, &mut Summary),
    ) -> String {
        let mut h = sample::header();
        h.streams = streams;
        let mut iv = sample::interval();
        iv.streams.truncate(usize::from(streams));
        let mut s = sample::summary();
        s.streams.truncate(usize::from(streams));
        for r in &mut s.streams {
            r.sent = Some(SentTotal {
                bits_per_second: r.sent_bytes as f64 * 8.0 / r.seconds,
                max_snd_cwnd: r.snd_cwnd,
            });
        }
        edit(&mut h, &mut iv, &mut s);
        let mut out = Vec::new();
        let mut f = Iperf3TextFormatter::new(&mut out, RateUnit::AdaptiveBits, false);
        f.header(&h).unwrap();
        f.interval(&iv).unwrap();
        let mut next = iv.clone();
        next.index += 1;
        f.interval(&next).unwrap();
        f.summary(&s).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn lines(s: &str) -> Vec<&str> {
        s.lines().collect()
    }

    /// `-u`: datagram figures on the sample's rows and totals.
    fn udp(h: &mut Header, iv: &mut IntervalReport, s: &mut Summary) {
        h.udp = true;
        let figures = |packets: u64, lost: u64| UdpFigures {
            packets,
            lost_packets: lost,
            lost_percent: crate::report::model::percent(lost, packets),
            jitter_ms: 0.0234,
            ..UdpFigures::default()
        };
        for r in iv.streams.iter_mut().chain(s.streams.iter_mut()) {
            r.udp = Some(figures(850, 3));
        }
        s.streams[1].udp.as_mut().unwrap().out_of_order = 2;
        iv.sum.udp = Some(figures(1700, 6));
        s.sum.udp = Some(figures(1700, 6));
    }

    const ROW0: &str = "[  0]   1.00-1.25   sec  3.22 GBytes   111 Gbits/sec";
    const ROW1: &str = "[  1]   1.00-1.25   sec  3.46 GBytes   120 Gbits/sec";
    /// A sending host's sum row: its senders' bytes over the span (the sample's receiver
    /// figures under it are not the sum's).
    const SUM: &str = "[SUM]   1.00-1.25   sec  6.68 GBytes   231 Gbits/sec";
    const END0: &str = "[  0]   0.00-1.00   sec  3.22 GBytes  27.6 Gbits/sec";
    const END1: &str = "[  1]   0.00-1.00   sec  3.46 GBytes  29.7 Gbits/sec";
    const END_SUM: &str = "[SUM]   0.00-1.00   sec  6.68 GBytes  57.3 Gbits/sec";
    const CONNECTED0: &str = "[  0] local 127.0.0.1 port 40000 connected to 127.0.0.1 port 5201";

    #[test]
    fn one_tcp_stream_is_iperf3_s_client_text() {
        let out = rendered(1, |_, _, _| {});
        let row = format!("{ROW0}    3   1023 KBytes       ");
        let expected = [
            "Connecting to host 127.0.0.1, port 5201",
            CONNECTED0,
            "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd",
            &row,
            &row,
            SEPARATOR.trim_end(),
            "[ ID] Interval           Transfer     Bitrate         Retr",
            &format!("{END0}    3            sender"),
            &format!("{END0}                  receiver"),
            "",
            "iperf Done.",
        ];
        assert_eq!(lines(&out), expected, "{out}");
    }

    /// `-P 2`: a `[SUM]` row per interval, a separator between the blocks, `[SUM]` totals.
    #[test]
    fn parallel_streams_add_sum_rows_and_separators() {
        let out = rendered(2, |_, _, _| {});
        let block = [
            format!("{ROW0}    3   1023 KBytes       "),
            format!("{ROW1}    3   1.00 MBytes       "),
            format!("{SUM}    6             "),
        ];
        let mut expected: Vec<String> = vec![
            "Connecting to host 127.0.0.1, port 5201".into(),
            CONNECTED0.into(),
            CONNECTED0.replace("[  0]", "[  1]"),
            "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd".into(),
        ];
        expected.extend(block.iter().cloned());
        expected.push(SEPARATOR.trim_end().into());
        expected.extend(block.iter().cloned());
        expected.extend([
            SEPARATOR.trim_end().into(),
            "[ ID] Interval           Transfer     Bitrate         Retr".into(),
            format!("{END0}    3            sender"),
            format!("{END0}                  receiver"),
            format!("{END1}    3            sender"),
            format!("{END1}                  receiver"),
            format!("{END_SUM}    6             sender"),
            format!("{END_SUM}                  receiver"),
            String::new(),
            "iperf Done.".into(),
        ]);
        assert_eq!(lines(&out), expected, "{out}");
    }

    /// `-R`: iperf3's reverse line, the receiver's columns in the intervals, and the
    /// server's retransmits on the sender's total.
    #[test]
    fn reverse_says_the_server_sends_and_drops_sender_columns() {
        let out = rendered(1, |h, iv, s| {
            h.direction = Direction::Reverse;
            iv.reverse = true;
            s.reverse = true;
        });
        let l = lines(&out);
        assert_eq!(l[1], "Reverse mode, remote host 127.0.0.1 is sending");
        assert_eq!(l[3], "[ ID] Interval           Transfer     Bitrate");
        assert_eq!(l[4], format!("{ROW0}                  "));
        assert_eq!(l[8], format!("{END0}    3            sender"));
        assert_eq!(l[9], format!("{END0}                  receiver"));
    }

    /// `-u`: datagrams sent in the intervals; the totals' jitter, loss and out-of-order.
    #[test]
    fn udp_has_iperf3_s_datagram_columns() {
        let out = rendered(2, udp);
        let l = lines(&out);
        let expected = [
            "[ ID] Interval           Transfer     Bitrate         Total Datagrams",
            // Datagrams sent: the senders' bytes over the datagram (128k in the sample).
            &format!("{ROW0}  26388  "),
            &format!("{ROW1}  28342  "),
            &format!("{SUM}  54730  "),
        ];
        assert_eq!(l[3..7], expected, "{out}");
        let end = [
            "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams",
            &format!("{END0}  0.000 ms  0/850 (0%)  sender"),
            &format!("{END0}  0.023 ms  3/850 (0.35%)  receiver"),
            &format!("{END1}  0.000 ms  0/850 (0%)  sender"),
            "[SUM]  0.0- 1.0 sec  2 datagrams received out-of-order",
            &format!("{END1}  0.023 ms  3/850 (0.35%)  receiver"),
            &format!("{END_SUM}  0.000 ms  0/1700 (0%)  sender"),
            &format!("{END_SUM}  0.023 ms  6/1700 (0.35%)  receiver"),
        ];
        assert_eq!(l[12..20], end, "{out}");
    }

    /// `--bidir`: one block per interval, the client's streams first, tagged by role.
    #[test]
    fn bidir_interleaves_both_directions_with_roles() {
        let mut h = sample::header();
        h.direction = Direction::Bidir;
        let mut iv = sample::interval();
        iv.streams.truncate(1);
        let mut back = iv.clone();
        back.reverse = true;
        let mut out = Vec::new();
        let mut f = Iperf3TextFormatter::new(&mut out, RateUnit::GigaBits, false);
        f.header(&h).unwrap();
        f.interval(&iv).unwrap();
        f.interval(&back).unwrap();
        drop(f);
        let out = String::from_utf8(out).unwrap();
        let l = lines(&out);
        assert_eq!(
            l[3],
            "[ ID][Role] Interval           Transfer     Bitrate         Retr  Cwnd"
        );
        assert_eq!(
            l[4],
            "[  0][TX-C]   1.00-1.25   sec  3.22 GBytes   111 Gbits/sec    3   1023 KBytes       "
        );
        assert_eq!(
            l[5],
            "[  1][RX-C]   1.00-1.25   sec  3.22 GBytes   111 Gbits/sec                  "
        );
    }

    /// `-O`: omitted rows on the test's clock, marked; the counted ones from 0 again.
    #[test]
    fn omitted_rows_are_marked_and_the_clock_restarts() {
        let mut h = sample::header();
        h.omit_s = 1.0;
        let mut omitted = sample::interval();
        omitted.streams.truncate(1);
        omitted.omitted = true;
        let mut counted = omitted.clone();
        counted.omitted = false;
        counted.index += 1;
        (omitted.streams[0].start, omitted.streams[0].end) = (0.0, 1.0);
        (counted.streams[0].start, counted.streams[0].end) = (1.0, 2.0);
        let mut out = Vec::new();
        let mut f = Iperf3TextFormatter::new(&mut out, RateUnit::AdaptiveBits, false);
        f.header(&h).unwrap();
        f.interval(&omitted).unwrap();
        f.interval(&counted).unwrap();
        drop(f);
        let out = String::from_utf8(out).unwrap();
        let l = lines(&out);
        assert!(l[3].starts_with("[  0]   0.00-1.00   sec"), "{out}");
        assert!(l[3].ends_with("       (omitted)"), "{out}");
        assert!(l[4].starts_with("[  0]   0.00-1.00   sec"), "{out}");
        assert!(l[4].ends_with("KBytes       "), "{out}");
    }

    /// iperf3's `unit_snprintf`: four places, bits in 1000s, bytes in 1024s, `-f`'s unit.
    #[test]
    fn units_are_iperf3_s() {
        for (value, letter, text) in [
            (1.25e9, 'A', "1.16 GByte"),
            (9.4e9 / 8.0, 'a', "9.40 Gbit"),
            (0.0, 'A', "0.00 Byte"),
            (0.0, 'a', "0.00 bit"),
            (1023.0, 'A', "1023 Byte"),
            (1024.0, 'A', "1.00 KByte"),
            (12_500_000.0, 'a', " 100 Mbit"),
            (12_487_500.0, 'a', "99.9 Mbit"),
            (1_047_728.0, 'A', "1023 KByte"),
            (1.25e9, 'm', "10000 Mbit"),
            (1.25e9, 'g', "10.0 Gbit"),
            (1.25e9, 'K', "1220703 KByte"),
            (2e15, 'a', "16000 Tbit"),
            (2e16, 'A', "18190 TByte"),
        ] {
            assert_eq!(unit_snprintf(value, letter), text, "{value} {letter}");
        }
        for (x, g) in [
            (0.0, "0"),
            (0.35294, "0.35"),
            (5.0, "5"),
            (12.34, "12"),
            (99.96, "1e+02"),
            (100.0, "1e+02"),
            (0.00012, "0.00012"),
            (0.0000123, "1.2e-05"),
        ] {
            assert_eq!(percent_g(x), g, "{x}");
        }
    }
}
