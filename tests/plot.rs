//! End-to-end tests of the pictures: `pinperf plot` of a saved test and of a
//! saved comparison, `--plot` as PNG, the HTML report in a real browser (headless
//! Chromium, where installed), and `pinperf report` replaying the text a run printed.
//! The real binary over loopback; the SVG is read back element by element.

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use util::{arg, pinperf, saved, scratch};

const LIMIT: Duration = Duration::from_secs(30);

/// One `<polyline>` of plotters' SVG: its stroke colour, width and points.
#[derive(Debug)]
struct Line {
    stroke: String,
    width: String,
    points: Vec<(f64, f64)>,
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn polylines(svg: &str) -> Vec<Line> {
    svg.split("<polyline")
        .skip(1)
        .filter_map(|rest| {
            let tag = &rest[..rest.find("/>")?];
            let points = attr(tag, "points")?
                .split_whitespace()
                .filter_map(|p| {
                    let (x, y) = p.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            Some(Line {
                stroke: attr(tag, "stroke")?.to_string(),
                width: attr(tag, "stroke-width")?.to_string(),
                points,
            })
        })
        .collect()
}

fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|rest| {
            let body = &rest[rest.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

/// Runs a test with `args` (and `-t 1 -i 0.25 -J`), saves its document and plots it: the
/// saved document (at least four intervals per direction) and the SVG's text.
fn plotted(name: &str, args: &[&str]) -> (pinperf::report::format::json::Document, String) {
    let dir = scratch(name);
    let json = dir.join("r.json");
    let mut argv = args.to_vec();
    argv.extend(["-t", "1", "-i", "0.25", "-J"]);
    let run = pinperf(&argv, LIMIT);
    run.assert_ok();
    std::fs::write(&json, run.output.stdout.as_slice()).unwrap();
    let doc = saved(&json);
    assert!(
        doc.intervals.iter().filter(|iv| !iv.reverse).count() >= 4,
        "{}",
        run.explain()
    );
    let svg = dir.join("r.svg");
    pinperf(&["plot", arg(&json), "-o", arg(&svg)], LIMIT).assert_ok();
    (doc, std::fs::read_to_string(&svg).unwrap())
}

/// Show item 1: a saved 8-stream test plots as eight stream lines over every interval in
/// the top panel, each its own colour and legend entry, and the sum (black, on its own axis).
#[test]
fn a_saved_test_plots_a_line_per_stream_and_the_sum() {
    let (doc, svg) = plotted("plot_test", &["--loopback", "-P", "8"]);
    let intervals = doc.intervals.len();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    let labels = texts(&svg);
    for s in 0..8 {
        assert!(labels.contains(&format!("stream {s}")), "{labels:?}");
    }
    assert!(
        labels.contains(&"sum (right axis)".to_string()),
        "{labels:?}"
    );
    // The top panel (above y = 470): one thin line per stream over every interval.
    let lines = polylines(&svg);
    let mut streams: Vec<&str> = lines
        .iter()
        .filter(|l| l.width == "1" && l.points.len() == intervals)
        .filter(|l| l.points.iter().all(|p| p.1 < 470.0))
        .map(|l| l.stroke.as_str())
        .collect();
    streams.sort_unstable();
    streams.dedup();
    assert_eq!(streams.len(), 8, "eight coloured stream lines: {streams:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.stroke == "#000000" && l.width == "3" && l.points.len() == intervals),
        "the sum's line"
    );
}

/// A UDP test's middle panel is its loss and jitter per interval (a UDP test has no
/// block RTT): two lines over every interval, each named in the legend.
#[test]
fn a_saved_udp_test_plots_loss_and_jitter() {
    let (doc, svg) = plotted("plot_udp", &["--loopback", "-u", "-b", "200M"]);
    let intervals = doc.intervals.len();
    let labels = texts(&svg);
    for label in [
        "UDP: datagrams lost per interval and jitter (RFC 3550)",
        "lost % (left axis)",
        "jitter ms (right axis)",
    ] {
        assert!(labels.iter().any(|l| l == label), "{label}: {labels:?}");
    }
    assert!(!labels.iter().any(|l| l.starts_with("RTT")), "{labels:?}");
    // The middle panel (y 470 to 720): the two lines, a point per interval.
    let middle = polylines(&svg)
        .into_iter()
        .filter(|l| l.points.len() == intervals)
        .filter(|l| l.points.iter().all(|p| p.1 > 470.0 && p.1 < 720.0))
        .count();
    assert_eq!(middle, 2, "loss and jitter lines");
}

/// `--bidir` plots both directions, each its own picture: client to server above, server
/// to client below, each with its streams' lines over its own intervals (only
/// the client-to-server half was drawn).
#[test]
fn a_bidir_test_plots_both_directions() {
    let (doc, svg) = plotted("plot_bidir", &["--loopback", "--bidir", "-P", "2"]);
    let per_way = doc.intervals.iter().filter(|iv| iv.reverse).count();
    assert_eq!(doc.intervals.len(), 2 * per_way);
    let labels = texts(&svg);
    for way in ["client to server (--bidir)", "server to client (--bidir)"] {
        assert!(labels.iter().any(|l| l.ends_with(way)), "{way}: {labels:?}");
    }
    // Each picture is 940 high: two stream lines in the top panel of each.
    let lines = polylines(&svg);
    for (top, bottom) in [(0.0, 470.0), (940.0, 1410.0)] {
        let streams = lines
            .iter()
            .filter(|l| l.width == "1" && l.points.len() == per_way)
            .filter(|l| l.points.iter().all(|p| p.1 > top && p.1 < bottom))
            .count();
        assert_eq!(streams, 2, "stream lines between y {top} and {bottom}");
    }
}

/// A comparison of 5 block sizes x 2 engines (saved as `compare -J` writes it) plots
/// throughput and efficiency against block size: two curves (one per engine) of five
/// points in each panel, the sizes on the x axis.
#[test]
fn a_saved_comparison_plots_a_curve_per_engine_against_block_size() {
    let dir = scratch("plot_compare");
    let mut rows = Vec::new();
    for (i, block) in ["8192", "16384", "32768", "65536", "131072"]
        .iter()
        .enumerate()
    {
        for (engine, gbps) in [("threads", 20.0), ("single", 10.0)] {
            let g = gbps + i as f64;
            rows.push(format!(
                r#"{{"block_bytes":{block},"streams":1,"window_bytes":null,"pin":"auto","engine":"{engine}","bits_per_second":{},"local_cpu_percent":100.0,"remote_cpu_percent":null,"gbps_per_busy_core":{},"cpu_seconds_per_gb":0.3,"retransmits":0,"jain":1.0,"block_rtt_avg_us":1000.0,"error":null}}"#,
                g * 1e9,
                g / 2.0
            ));
        }
    }
    let json = dir.join("c.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"target":"127.0.0.1:5301","seconds":2.0,"rows":[{}]}}"#,
            rows.join(",")
        ),
    )
    .unwrap();
    let out = dir.join("c.svg");
    pinperf(&["plot", arg(&json), "-o", arg(&out)], LIMIT).assert_ok();
    let svg = std::fs::read_to_string(&out).unwrap();
    let labels = texts(&svg);
    for label in [
        "engine threads",
        "engine single",
        "8k",
        "16k",
        "32k",
        "64k",
        "128k",
    ] {
        assert!(labels.iter().any(|t| t == label), "{label}: {labels:?}");
    }
    let curves = polylines(&svg)
        .into_iter()
        .filter(|l| l.width == "2" && l.points.len() == 5)
        .count();
    assert_eq!(curves, 4, "two engines x two panels");

    // And the same document re-renders as compare's table.
    let table = pinperf(&["report", arg(&json)], LIMIT);
    table.assert_ok();
    assert_eq!(
        table
            .stdout()
            .lines()
            .filter(|l| l.contains("single"))
            .count(),
        5,
        "{}",
        table.explain()
    );
}

/// `--plot OUT.png` on a run writes a PNG of the test (rasterised in-process).
#[test]
fn plot_on_a_run_writes_a_png() {
    let dir = scratch("plot_png");
    let png = dir.join("run.png");
    let run = pinperf(
        &["--loopback", "-t", "0.5", "-i", "0.1", "--plot", arg(&png)],
        LIMIT,
    );
    run.assert_ok();
    let (w, h, colours) = decode(&png);
    assert!(w >= 800 && h >= 800, "{w}x{h}");
    assert!(colours > 500, "coloured pixels: {colours}");
}

/// A wrong file gets a clear error naming it, never a panic; a picture type we cannot
/// write is refused before anything runs.
#[test]
fn malformed_input_is_named_not_a_panic() {
    let dir = scratch("plot_malformed");
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        "{\"start\": {\"streams\": \"eight\"}, \"intervals\": [}",
    )
    .unwrap();
    // Bytes that are not text are no document either (they exited 1, "read ...").
    let binary = dir.join("binary.json");
    std::fs::write(&binary, [0xff_u8, 0xfe, 0x00, 0x7b]).unwrap();
    for args in [
        vec!["plot", arg(&bad), "-o", "x.svg"],
        vec!["report", arg(&bad)],
        vec!["report", arg(&binary)],
    ] {
        let bad = std::path::Path::new(args[1]);
        let run = pinperf(&args, LIMIT);
        assert_eq!(run.code(), Some(2), "{}", run.explain());
        let err = run.stderr();
        assert!(
            err.starts_with(&format!(
                "pinperf: {}: not a pinperf -J document",
                bad.display()
            )),
            "{}",
            run.explain()
        );
        assert!(!err.contains("panicked"), "{}", run.explain());
    }
    let missing = pinperf(&["report", "/nonexistent/r.json"], LIMIT);
    assert_eq!(missing.code(), Some(1), "{}", missing.explain());
    assert!(
        missing
            .stderr()
            .contains("read /nonexistent/r.json: No such file"),
        "{}",
        missing.explain()
    );
    let run = pinperf(&["plot", arg(&bad), "-o", "x.gif"], LIMIT);
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("-o x.gif: a plot is written as .svg or .png")
    );
    let run = pinperf(&["--loopback", "--plot", "x.jpg"], LIMIT);
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("--plot x.jpg: a plot is written as .svg or .png"),
        "{}",
        run.explain()
    );
    let run = pinperf(&["--loopback", "--plot", "/nonexistent/p.svg"], LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(run.stderr().contains("--plot /nonexistent/p.svg: create"));
    assert!(run.stdout().is_empty(), "nothing ran: {}", run.explain());
}

/// A test that failed before it started: its saved document replays as CSV exactly as the
/// live `--csv` printed it (the header, then the error row); text and plots have nothing to
/// show and say why.
#[test]
fn a_test_refused_before_it_started_replays_as_its_live_csv() {
    let port = util::free_port().to_string();
    let client = |format: &str| pinperf(&["-c", "127.0.0.1", "-p", &port, format], LIMIT);
    let (live, json) = (client("--csv"), client("-J"));
    assert_eq!(
        (live.code(), json.code()),
        (Some(1), Some(1)),
        "{}",
        live.explain()
    );
    assert!(live.stdout().contains("\nerror,"), "{}", live.explain());
    let dir = scratch("report_failed");
    let saved = dir.join("f.json");
    std::fs::write(&saved, json.stdout()).unwrap();
    let csv = pinperf(&["report", arg(&saved), "--format", "csv"], LIMIT);
    csv.assert_ok();
    assert_eq!(csv.stdout(), live.stdout());
    for args in [
        vec!["report", arg(&saved)],
        vec!["plot", arg(&saved), "-o", "f.svg"],
    ] {
        let run = pinperf(&args, LIMIT);
        assert_eq!(run.code(), Some(2), "{}", run.explain());
        assert!(
            run.stderr()
                .contains("the test failed before it started, nothing to")
                && run.stderr().contains("Connection refused"),
            "{}",
            run.explain()
        );
    }
}

/// A comparison whose every configuration failed: `plot` names why and writes nothing
/// (it drew empty axes), and the HTML report says so where the plot would be.
#[test]
fn a_comparison_where_nothing_ran_is_named_not_plotted_empty() {
    let port = util::free_port().to_string();
    let args = [
        "compare",
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--streams",
        "1,2",
        "-t",
        "1",
        "-J",
    ];
    let run = pinperf(&args, LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    let dir = scratch("plot_nothing_ran");
    let saved = dir.join("c.json");
    std::fs::write(&saved, run.stdout()).unwrap();
    let svg = dir.join("c.svg");
    let plot = pinperf(&["plot", arg(&saved), "-o", arg(&svg)], LIMIT);
    assert_eq!(plot.code(), Some(2), "{}", plot.explain());
    assert!(
        plot.stderr()
            .contains("no configuration of the comparison measured anything, nothing to plot")
            && plot.stderr().contains("Connection refused"),
        "{}",
        plot.explain()
    );
    assert!(!svg.exists(), "an empty picture was written");
    let html = dir.join("c.html");
    pinperf(&["report", arg(&saved), "--html", arg(&html)], LIMIT).assert_ok();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("No configuration measured anything, nothing to plot: connect to 127.0.0.1:"),
        "{page}"
    );
}

/// A test whose server died before the first row: `--plot` writes nothing and says so,
/// `--html` says so where the plot would be, and `plot` of its document names the failure
/// (all three drew empty axes, and `plot` exited 0).
#[test]
fn a_test_that_failed_before_its_first_row_is_not_plotted_empty() {
    let mut server = util::Server::start(&[]);
    let dir = scratch("plot_no_rows");
    let live = dir.join("live.svg");
    let page = dir.join("live.html");
    let port = server.port_arg();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "10",
        "-i",
        "10",
        "-J",
        "--plot",
        arg(&live),
        "--html",
        arg(&page),
    ];
    let mut client = util::Spawned::start(&args);
    // Killed once data moves (the server took the test, and the client has since used
    // 0.2 s of CPU, which its handshake does not), well before the first row at 10 s (the
    // run ends with the server). The client's placement probe runs before it connects.
    server.wait_for_log("test from", Duration::from_secs(8));
    let pid = client.id();
    let before = util::cpu_ticks(pid);
    util::wait_until(
        "the client's streams under way",
        Duration::from_secs(8),
        || (util::cpu_ticks(pid) >= before + 20).then_some(()),
        || format!("the client used {} CPU ticks", util::cpu_ticks(pid)),
    );
    server.child.kill().expect("kill the server");
    let run = client.finish(LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("not written: no interval was reported, nothing to plot"),
        "{}",
        run.explain()
    );
    assert!(!live.exists(), "--plot wrote empty axes");
    // The HTML report has the failure and no empty axes.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("No interval was reported, nothing to plot.") && !html.contains("<svg"),
        "{html}"
    );
    let saved = dir.join("t.json");
    std::fs::write(&saved, run.stdout()).unwrap();
    let plot = pinperf(&["plot", arg(&saved), "-o", arg(&dir.join("t.svg"))], LIMIT);
    assert_eq!(plot.code(), Some(2), "{}", plot.explain());
    assert!(
        plot.stderr()
            .contains("no interval was reported, nothing to plot: ")
            && plot.stderr().contains("closed the control connection"),
        "{}",
        plot.explain()
    );
}

/// Show item 3: `pinperf report` of the document saved by a text run prints exactly the
/// text that run printed (its -T included); a closed stdout is quiet.
#[test]
fn report_replays_the_text_the_run_printed() {
    let dir = scratch("report_text");
    let json = dir.join("r.json");
    let run = pinperf(
        &[
            "--loopback",
            "-P",
            "2",
            "-t",
            "1",
            "-i",
            "0.5",
            "-T",
            "t1",
            "--json-file",
            arg(&json),
        ],
        LIMIT,
    );
    run.assert_ok();
    let printed = run.stdout();
    assert!(printed.contains("t1:  #(**)"), "{}", run.explain());
    let again = pinperf(&["report", arg(&json)], LIMIT);
    again.assert_ok();
    assert_eq!(again.stdout(), printed);
    // A picture's name is plot's: no text written into x.svg (it was, exit 0).
    let svg = dir.join("x.svg");
    let wrong = pinperf(&["report", arg(&json), "-o", arg(&svg)], LIMIT);
    assert_eq!(wrong.code(), Some(2), "{}", wrong.explain());
    assert!(
        wrong.stderr().contains("a .svg picture is `pinperf plot "),
        "{}",
        wrong.explain()
    );
    assert!(!svg.exists(), "{}", wrong.explain());
    // CSV of the same document has a row per stream per interval and one total.
    let csv = pinperf(&["report", arg(&json), "--format", "csv"], LIMIT);
    csv.assert_ok();
    let out = csv.stdout();
    let stream_rows = out.lines().filter(|l| l.starts_with("stream,")).count();
    assert_eq!(stream_rows, 2 * saved(&json).intervals.len(), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("total_sum,")).count(),
        1
    );
    // A run's own flags are taken ("unexpected argument"): --csv is
    // the same CSV, -J the same JSON, --html FILE the HTML report.
    let flag = pinperf(&["report", arg(&json), "--csv"], LIMIT);
    assert_eq!(flag.stdout(), out, "{}", flag.explain());
    let as_json = |flags: &[&str]| {
        let run = pinperf(&[&["report", arg(&json)], flags].concat(), LIMIT);
        run.assert_ok();
        run.stdout()
    };
    assert_eq!(as_json(&["-J"]), as_json(&["--format", "json"]));
    let html = dir.join("r.html");
    pinperf(&["report", arg(&json), "--html", arg(&html)], LIMIT).assert_ok();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>"),
        "{}",
        &page[..page.len().min(200)]
    );

    // `| head -1`: quiet, exit 0.
    let mut child = Command::new(util::bin())
        .args(["report", arg(&json)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// Width, height and the number of clearly coloured pixels (not white, grey or black:
/// the plot's lines) of a PNG.
fn decode(path: &Path) -> (u32, u32, usize) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let colours = buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| {
            let (r, g, b) = (i32::from(p[0]), i32::from(p[1]), i32::from(p[2]));
            (r - g).abs().max((g - b).abs()).max((r - b).abs()) > 60
        })
        .count();
    (info.width, info.height, colours)
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Show item 2: the HTML report of a run, opened by headless Chromium, shows the title
/// (in the DOM, from the page itself) and the plot (the screenshot has the plot's
/// coloured lines); the page fetches nothing. The screenshot is kept in the test's
/// directory (printed).
#[test]
fn the_html_report_renders_in_chromium_with_its_plot_and_title() {
    let dir = scratch("html_report");
    let page = dir.join("report.html");
    let run = pinperf(
        &[
            "--loopback",
            "-P",
            "2",
            "-t",
            "0.5",
            "-i",
            "0.1",
            "-T",
            "ticket 4711",
            "--html",
            arg(&page),
        ],
        LIMIT,
    );
    run.assert_ok();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<title>ticket 4711</title>"));
    let own = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for fetch in ["http://", "https://", "src=", "@import", "url("] {
        assert!(!own.contains(fetch), "the page would fetch: {fetch}");
    }
    let Some(browser) = chromium() else {
        util::skipped(
            "the_html_report_renders_in_chromium_with_its_plot_and_title",
            "no chromium (apt-get install chromium)",
        );
        return;
    };
    let url = format!("file://{}", page.display());
    // No sandbox: the test may run as root, where Chromium refuses one.
    let headless = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ];
    let dom = Command::new(browser)
        .args(headless)
        .args(["--dump-dom", &url])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("<h1 id=\"title\">ticket 4711</h1>"),
        "the title as rendered: {dom:.400}"
    );
    assert!(dom.contains("<svg"), "the plot in the DOM");
    let shot = dir.join("report.png");
    let status = Command::new(browser)
        .args(headless)
        .arg("--window-size=1280,1400")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run chromium");
    assert!(status.success());
    let (w, h, colours) = decode(&shot);
    assert_eq!((w, h), (1280, 1400));
    // The plot's stream lines, sum and RTT curves: thousands of coloured pixels; a blank
    // or text-only page has none.
    assert!(
        colours > 1000,
        "coloured pixels in the screenshot: {colours}"
    );
    eprintln!("screenshot: {}", shot.display());
}
