//! A writer that starts every line with the prefixes of `--timestamps` and `-T`: the
//! text reports' and the server log's.

use std::io::{self, Write};

/// The start of a line now: `--timestamps`' local time, then `-T`'s `"TITLE:  "`.
pub(crate) fn line_prefix(timestamps: Option<&str>, title: Option<&str>) -> io::Result<String> {
    let mut prefix = match timestamps {
        Some(fmt) => crate::os::sys::local_time(fmt)?,
        None => String::new(),
    };
    if let Some(title) = title {
        prefix += &format!("{title}:  ");
    }
    Ok(prefix)
}

/// A writer that starts every line with a prefix: `--timestamps[=FORMAT]` (the local
/// time by strftime's FORMAT, default `"%c "`) and then `-T`'s `"TITLE:  "`, in iperf3's
/// order.
pub(crate) struct Prefixed<W: Write> {
    out: W,
    timestamps: Option<String>,
    title: Option<String>,
    at_line_start: bool,
}

impl<W: Write> Prefixed<W> {
    pub(crate) fn new(out: W, timestamps: Option<String>, title: Option<String>) -> Self {
        Prefixed {
            out,
            timestamps,
            title,
            at_line_start: true,
        }
    }

    fn prefix(&mut self) -> io::Result<()> {
        let prefix = line_prefix(self.timestamps.as_deref(), self.title.as_deref())?;
        self.out.write_all(prefix.as_bytes())
    }
}

impl<W: Write> Write for Prefixed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.at_line_start {
            self.prefix()?;
            self.at_line_start = false;
        }
        // Up to and including the first newline; the next call prefixes the next line.
        let n = buf
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| i + 1);
        self.out.write_all(&buf[..n])?;
        self.at_line_start = buf[n - 1] == b'\n';
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-T` and `--timestamps` start every line, however the writes split the lines,
    /// and nothing else.
    #[test]
    fn prefixed_starts_every_line_once() {
        let mut out = Vec::new();
        {
            let mut p = Prefixed::new(&mut out, None, Some("t1".into()));
            p.write_all(b"a\nb").unwrap();
            p.write_all(b"c\n").unwrap();
            p.write_all(b"\nd\n").unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "t1:  a\nt1:  bc\nt1:  \nt1:  d\n"
        );
        let mut out = Vec::new();
        Prefixed::new(&mut out, Some("[x] ".into()), Some("t".into()))
            .write_all(b"row\n")
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "[x] t:  row\n");
    }
}
