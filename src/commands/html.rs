//! The one-file HTML report: the header, the plots (inline SVG), the totals, fairness, CPU
//! and diagnosis, and the full text report, in one self-contained page that fetches
//! nothing (no scripts, fonts or images from anywhere) — the thing to attach to a ticket.
//! Built from the report model and the text formatter's own lines; computes nothing.

use std::fmt::Write as _;

use crate::commands::compare::{self, CompareDoc};
use crate::commands::diagnose::DiagnoseDoc;
use crate::commands::plot;
use crate::commands::saved::{self, SavedTest};
use crate::error::Result;
use crate::report::format::text::{TextFormatter, TextOptions};
use crate::report::model::Summary;

/// `&`, `<`, `>` and quotes as entities.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}\
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}\
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;\
text-align:right}th{background:#eee}td.l,th.l{text-align:left}\
.error{background:#fdd;border:1px solid #c00;padding:.5em}.plot svg{max-width:100%;height:auto}";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n<h1 id=\"title\">{t}</h1>\n{body}</body>\n</html>\n",
        t = escape(title)
    )
}

/// The text report of a saved test, as the run printed it, in lines.
fn text_lines(test: &SavedTest, opts: TextOptions) -> Vec<String> {
    let mut buf = Vec::new();
    {
        let mut f = TextFormatter::with_options(&mut buf, opts);
        // Writing into memory cannot fail.
        let _ = saved::replay(&test.doc, &mut f);
    }
    // A lab's lines go around the client's report, as `pinperf report` prints them.
    let lab = test.lab.as_ref();
    let before = lab.map(|l| l.before()).unwrap_or_default();
    let after = lab.map(|l| l.after()).unwrap_or_default();
    before
        .into_iter()
        .chain(String::from_utf8_lossy(&buf).lines().map(str::to_string))
        .chain(after)
        .collect()
}

fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    out.push_str("<table>\n<tr>");
    for (i, h) in head.iter().enumerate() {
        let class = if i == 0 { " class=\"l\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(h));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i == 0 { " class=\"l\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A side's bytes, or `unknown` for a side whose count never came.
fn known(side: &crate::report::model::SideTotal, bytes: u64) -> String {
    match side.unknown {
        true => "unknown".into(),
        false => bytes.to_string(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Each of `lines` escaped, one to a line (inside a `<pre>`).
fn push_lines<'l>(body: &mut String, lines: impl IntoIterator<Item = &'l String>) {
    for l in lines {
        let _ = writeln!(body, "{}", escape(l));
    }
}

/// A test's page: what ran, the plots, the totals and the text report as printed.
pub(crate) fn test_page(test: &SavedTest, title: &str, opts: TextOptions) -> Result<String> {
    let doc = &test.doc;
    let lines = text_lines(test, opts);
    let mut body = String::new();
    intro(&mut body, test);
    // The text report's header: after a lab's lines, up to the first row's heading.
    let header = lines
        .iter()
        .skip_while(|l| l.starts_with("# lab"))
        .take_while(|l| !l.contains("#(ID)"));
    body.push_str("<h2>Test</h2>\n<pre id=\"header\">");
    push_lines(&mut body, header);
    body.push_str("</pre>\n<h2>Plots</h2>\n<div class=\"plot\" id=\"plot\">\n");
    match doc.intervals.is_empty() {
        true => body.push_str("<p>No interval was reported, nothing to plot.</p>"),
        false => body.push_str(&plot::test_svg(doc, test.lab_rate_bps, title)?),
    }
    body.push_str("\n</div>\n");
    match &doc.end {
        None => body.push_str("<h2>Totals</h2>\n<p>No totals: the test ended before them.</p>\n"),
        Some(s) => {
            body.push_str("<h2>Totals</h2>\n");
            totals_table(&mut body, s);
            body.push_str("<h2>Streams</h2>\n");
            streams_table(&mut body, s);
            body.push_str("<h2>CPU</h2>\n<pre id=\"cpu\">");
            push_lines(&mut body, lines.iter().filter(|l| l.starts_with("# CPU")));
            body.push_str("</pre>\n");
            diagnosis(&mut body, s);
        }
    }
    body.push_str("<h2>Text report</h2>\n<details><summary>as printed</summary><pre id=\"text\">");
    push_lines(&mut body, &lines);
    body.push_str("</pre></details>\n");
    Ok(page(title, &body))
}

/// What ran, between which ends; the error of a test that failed; a lab's path.
fn intro(body: &mut String, test: &SavedTest) {
    let h = &test.doc.start;
    let _ = writeln!(
        body,
        "<p>{} streams, {}, {} s, congestion control {}; {} &rarr; {} ({})</p>",
        h.streams,
        escape(&h.payload()),
        h.duration_s,
        escape(&h.congestion),
        escape(&h.local),
        escape(&h.remote),
        escape(&h.remote_software)
    );
    if let Some(e) = &test.doc.error {
        let _ = writeln!(
            body,
            "<p class=\"error\" id=\"error\">The test failed: {}</p>",
            escape(e)
        );
    }
    if let Some(lab) = &test.lab {
        body.push_str("<h2>Emulated path (pinperf lab)</h2>\n<pre id=\"lab\">");
        push_lines(body, lab.before().iter().chain(&lab.after()));
        body.push_str("</pre>\n");
    }
}

/// Microseconds as milliseconds, 3 decimals, or `-`.
fn ms(us: Option<f64>) -> String {
    opt(us.map(|v| v / 1e3), 3)
}

/// The whole test's totals in one row (a declarative list of columns).
fn totals_table(body: &mut String, s: &Summary) {
    let f = &s.fairness;
    table(
        body,
        &[
            "span, s",
            "Mb/s (receiver)",
            "bytes sent",
            "bytes received",
            "retransmits",
            "Jain",
            "min share %",
            "max share %",
            "starved intervals",
            "block RTT avg, ms",
            "kernel srtt avg, ms",
            "path min_rtt, ms",
        ],
        &[vec![
            format!("{:.3} - {:.3}", s.sum.start, s.sum.end),
            // The rows' rate (as the text's total line) when the received
            // side is unknown.
            format!(
                "{:.3}",
                match s.sum_received.unknown {
                    true => s.sum.bits_per_second,
                    false => s.sum_received.bits_per_second,
                } / 1e6
            ),
            known(&s.sum_sent, s.sent_whole_run()),
            known(&s.sum_received, s.received_whole_run()),
            s.sum.retransmits.map_or("-".into(), |v| v.to_string()),
            opt(f.totals.jain, 3),
            opt(f.totals.min_share.map(|v| v * 100.0), 1),
            opt(f.totals.max_share.map(|v| v * 100.0), 1),
            format!("{} of {}", f.starved_intervals, f.stream_intervals),
            ms(s.sum.block_rtt.map(|r| r.avg_us)),
            ms(s.sum.kernel_rtt.map(|r| r.avg_us)),
            ms(s.sum.min_rtt.map(f64::from)),
        ]],
    );
}

/// One row per stream: its rate, its share of the bytes, retransmits and RTTs.
fn streams_table(body: &mut String, s: &Summary) {
    let total = s.sum.bytes.max(1) as f64;
    let rows: Vec<Vec<String>> = s
        .streams
        .iter()
        .map(|r| {
            vec![
                format!("stream {}", r.stream),
                format!("{:.3}", r.bits_per_second / 1e6),
                format!("{:.1}", r.bytes as f64 / total * 100.0),
                r.bytes.to_string(),
                r.retransmits.map_or("-".into(), |v| v.to_string()),
                ms(r.block_rtt.map(|b| b.avg_us)),
                ms(r.kernel_rtt.map(|b| b.avg_us)),
            ]
        })
        .collect();
    table(
        body,
        &[
            "stream",
            "Mb/s",
            "share %",
            "bytes",
            "retransmits",
            "block RTT avg, ms",
            "kernel srtt avg, ms",
        ],
        &rows,
    );
}

/// The diagnosis, one item per finding, or a line saying there was none.
fn diagnosis(body: &mut String, s: &Summary) {
    body.push_str("<h2>Diagnosis</h2>\n<ul id=\"diagnosis\">\n");
    if s.diagnosis.is_empty() {
        body.push_str("<li>Nothing to report: no queue, stall, starvation or drops.</li>\n");
    }
    for d in &s.diagnosis {
        let _ = writeln!(body, "<li>{}</li>", escape(d));
    }
    body.push_str("</ul>\n");
}

/// A diagnosis's page: the verdict, its runs as bars (Mb/s, the confirming run and the
/// one it changed marked), and the text as `diagnose` printed it.
pub(crate) fn diagnose_page(doc: &DiagnoseDoc, title: &str) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<p>{} runs of {} s against {}, in {:.1} s of a {:.0} s budget</p>",
        doc.runs.len(),
        doc.run_seconds,
        escape(&doc.target),
        doc.elapsed_s,
        doc.budget_s
    );
    let _ = writeln!(
        body,
        "<h2>Verdict</h2>\n<p id=\"verdict\"><b>{}</b></p>",
        escape(&doc.verdict.words)
    );
    body.push_str("<h2>Runs</h2>\n<div class=\"plot\" id=\"plot\">\n");
    body.push_str(&diagnose_bars(doc));
    body.push_str("\n</div>\n<h2>Text</h2>\n<pre id=\"text\">");
    body.push_str(&escape(&crate::commands::diagnose::text::verdict(doc)));
    body.push_str("</pre>\n");
    page(title, &body)
}

/// One bar per run, its height the run's Mb/s, its block RTT under it (a standing queue
/// shows there); the confirming run's bar is dark, the run it changed mid-grey, the rest
/// light, a failed run's empty.
fn diagnose_bars(doc: &DiagnoseDoc) -> String {
    let (bar, gap, height, top) = (90.0, 20.0, 200.0, 30.0);
    let rate = |r: &crate::commands::diagnose::plan::Run| {
        r.figures.as_ref().map_or(0.0, |f| f.bits_per_second / 1e6)
    };
    let most = doc.runs.iter().map(rate).fold(1e-9, f64::max);
    let lift = doc.verdict.lift.as_ref().map(|l| (l.run, l.against));
    let width = doc.runs.len() as f64 * (bar + gap) + gap;
    let block_rtt = |r: &crate::commands::diagnose::plan::Run| {
        let us = r.figures.as_ref().and_then(|f| f.block_rtt_avg_us);
        us.map_or(String::new(), |us| {
            format!(
                "block RTT {}",
                crate::commands::diagnose::verdict::rtt(Some(us))
            )
        })
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"11\">",
        height + top + 54.0
    );
    for (i, r) in doc.runs.iter().enumerate() {
        let h = rate(r) / most * height;
        let x = gap + i as f64 * (bar + gap);
        let fill = match lift {
            Some((run, _)) if run == i => "#2a5d9f",
            Some((_, against)) if against == i => "#999",
            _ => "#bcd",
        };
        let y = top + height - h;
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{y:.1}\" width=\"{bar}\" height=\"{h:.1}\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.0} Mb/s</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x + bar / 2.0,
            y - 4.0,
            rate(r),
            x + bar / 2.0,
            top + height + 14.0,
            i + 1,
            x + bar / 2.0,
            top + height + 28.0,
            escape(&r.settings.flags()),
            x + bar / 2.0,
            top + height + 42.0,
            block_rtt(r)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A comparison's page: the plots and the table.
pub(crate) fn compare_page(doc: &CompareDoc, title: &str) -> Result<String> {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<p>{} configurations, {} s each, against {}</p>",
        doc.rows.len(),
        doc.seconds,
        escape(&doc.target)
    );
    body.push_str("<h2>Plots</h2>\n<div class=\"plot\" id=\"plot\">\n");
    match doc.nothing_measured() {
        Some(why) => {
            let _ = write!(
                body,
                "<p>No configuration measured anything, nothing to plot: {}</p>",
                escape(&why)
            );
        }
        None => body.push_str(&plot::compare_svg(doc, title)?),
    }
    body.push_str("\n</div>\n<h2>Results</h2>\n<pre id=\"text\">");
    body.push_str(&escape(&compare::text_table(doc)));
    body.push_str("</pre>\n");
    Ok(page(title, &body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::diagnose::plan::sample::{figures, lossy, run, with};
    use crate::commands::diagnose::plan::{Probe, Settings};

    #[test]
    fn a_diagnosis_page_draws_a_bar_per_run_and_marks_the_confirming_one() {
        let bbr = with(Settings::baseline(), |s| s.congestion = Some("bbr".into()));
        let mut lifted = figures(515.0);
        lifted.congestion = "bbr".into();
        let runs = vec![
            run(
                Probe::Baseline,
                Settings::baseline(),
                None,
                lossy(figures(172.0)),
            ),
            run(Probe::ModelBasedCc, bbr, Some(0), lifted),
        ];
        let doc = DiagnoseDoc {
            target: "198.18.0.1:5301 <lab>".into(),
            budget_s: 40.0,
            run_seconds: 5.0,
            elapsed_s: 11.4,
            verdict: crate::commands::diagnose::verdict::decide(&runs),
            runs,
            error: None,
        };
        let page = diagnose_page(&doc, "t");
        assert_eq!(page.matches("<rect ").count(), 2, "{page}");
        // The bbr run (the confirming one) is dark, the baseline it changed grey.
        assert!(page.contains("fill=\"#2a5d9f\""), "{page}");
        assert!(page.contains("fill=\"#999\""), "{page}");
        assert!(page.contains("515 Mb/s</text>"), "{page}");
        // figures(): 62 ms block RTT under each bar.
        assert_eq!(
            page.matches(">block RTT 62.0 ms</text>").count(),
            2,
            "{page}"
        );
        assert!(page.contains("id=\"verdict\"><b>loss: "), "{page}");
        assert!(page.contains("&lt;lab&gt;"), "escaped: {page}");
    }
}
