//! End-to-end tests over loopback: the real binary as client and server. Each runs in
//! about one to two seconds. No speed thresholds here: speed lives in bench-scripts/.

mod util;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use pinperf::wire::{self, ControlMsg};
use util::{Row, Server, Spawned, byte_totals, free_port, is_interval_row, pinperf, rows, threads};

const LIMIT: Duration = Duration::from_secs(20);
/// Longest wait for a line a process is about to print (generous: the machine may be busy;
/// a wait returns as soon as the line is there).
const EVENT: Duration = Duration::from_secs(10);

fn interval_rows(all: &[Row]) -> Vec<&Row> {
    all.iter()
        .filter(|r| !r.summary && r.label != "sum")
        .collect()
}

/// Checks the shape every successful report must have: per interval one row per stream,
/// contiguous from 0, the stream totals, one `#(**)`, and byte totals that reconcile.
fn check_report(text: &str, streams: usize, intervals: usize, duration: f64) {
    let all = rows(text);
    let per_stream = interval_rows(&all);
    assert_eq!(
        per_stream.len(),
        streams * intervals,
        "rows per stream per interval\n{text}"
    );
    let mut by_interval: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
    for r in &per_stream {
        by_interval
            .entry((r.begin * 1000.0).round() as u64)
            .or_default()
            .push(r);
    }
    assert_eq!(by_interval.len(), intervals, "distinct intervals\n{text}");
    let mut expect_begin = 0.0;
    for group in by_interval.values() {
        let mut ids: Vec<&str> = group.iter().map(|r| r.label.as_str()).collect();
        ids.sort();
        let want: Vec<String> = (0..streams).map(|i| i.to_string()).collect();
        assert_eq!(
            ids,
            want.iter().map(String::as_str).collect::<Vec<_>>(),
            "one row per stream\n{text}"
        );
        let (begin, end) = (group[0].begin, group[0].end);
        assert!(
            (begin - expect_begin).abs() < 1e-9,
            "gap before {begin}: expected {expect_begin}\n{text}"
        );
        assert!(
            group.iter().all(|r| r.begin == begin && r.end == end),
            "same span\n{text}"
        );
        assert!(end > begin);
        expect_begin = end;
    }
    assert!(
        expect_begin >= duration - 1e-9,
        "rows end at {expect_begin}, test lasted {duration}\n{text}"
    );
    let totals: Vec<&Row> = all
        .iter()
        .filter(|r| r.summary && r.label != "**")
        .collect();
    assert_eq!(totals.len(), streams, "#( N) lines\n{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("**")).count(),
        1,
        "exactly one ** line\n{text}"
    );
    let (sent, received) = byte_totals(text).unwrap_or_else(|| panic!("no # bytes line\n{text}"));
    assert!(sent > 0);
    assert_eq!(sent, received, "sender and receiver totals\n{text}");
    assert!(text.contains(": equal"));
}

#[test]
fn loopback_one_stream() {
    let run = pinperf(&["--loopback", "-t", "1", "-i", "0.5"], LIMIT);
    run.assert_ok();
    check_report(&run.stdout(), 1, 2, 1.0);
    // When it started, and on which hosts (both this one): in the text and the document.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    let text = run.stdout();
    let line = text
        .lines()
        .find(|l| l.starts_with("# started "))
        .expect("a started line");
    assert!(
        line.ends_with(&format!("; hosts {host} -> {host}")),
        "{line}"
    );
    let doc = pinperf(&["--loopback", "-t", "0.3", "-J"], LIMIT);
    doc.assert_ok();
    let doc: serde_json::Value = serde_json::from_str(&doc.stdout()).unwrap();
    let header = &doc["start"];
    assert_eq!(header["local_host"], host, "{header}");
    assert_eq!(header["remote_host"], host, "{header}");
    let at = header["started_at"].as_str().expect("started_at");
    assert!(
        at.len() == 24 && at.starts_with("20") && at.as_bytes()[10] == b'T',
        "{at}"
    );
}

/// `--fq-rate`: the paced socket keeps about 100 ms of the rate unsent, so the test ends
/// on time (`-t 3 --fq-rate 1M` on loopback ran 36 s: the autotuned 4 MiB queued at `-t`
/// drained at the rate). A rate whose kernel bursts would come more than 5 s apart is
/// refused before any data, naming the lowest rate the path takes (`--fq-rate 1k` ended
/// after 12 s with "the path is down").
#[test]
fn kernel_pacing_ends_on_time_and_a_rate_too_slow_for_its_bursts_is_refused() {
    let run = pinperf(&["--loopback", "-t", "1", "--fq-rate", "2M"], LIMIT);
    run.assert_ok();
    let text = run.stdout();
    assert!(
        run.elapsed < Duration::from_secs(5),
        "{:?}\n{text}",
        run.elapsed
    );
    let (sent, received) = byte_totals(&text).expect("bytes line");
    assert_eq!(sent, received, "{text}");
    // The kernel sends a connection's first ten segments unpaced (64 KiB each on
    // loopback), then 250 kB/s: about 1.4 s of it at most.
    assert!(received < 10 * 65_536 + 350_000, "{received} bytes\n{text}");

    let low = pinperf(&["--loopback", "-t", "1", "--fq-rate", "50k"], LIMIT);
    assert_eq!(low.output.status.code(), Some(1), "{}", low.stderr());
    assert!(low.elapsed < Duration::from_secs(3), "{:?}", low.elapsed);
    let err = low.stderr();
    assert!(
        err.contains("--fq-rate 50k: the kernel would send this connection's data in bursts")
            && err.contains("or more on this path, or -b"),
        "{err}"
    );
}

#[test]
fn loopback_four_streams_contiguous_and_reconciled() {
    let run = pinperf(
        &[
            "--loopback",
            "-P",
            "4",
            "-t",
            "1.5",
            "-i",
            "0.5",
            "-l",
            "64k",
        ],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    check_report(&text, 4, 3, 1.5);
    assert!(text.contains("# block size = 65536B"), "{}", run.explain());
    // The (sum) row of an interval is the sum of its stream rows.
    let all = rows(&text);
    for sum in all.iter().filter(|r| r.label == "sum") {
        let parts: f64 = interval_rows(&all)
            .iter()
            .filter(|r| r.begin == sum.begin)
            .map(|r| r.mbps)
            .sum();
        assert!(
            (parts - sum.mbps).abs() < 0.01 * sum.mbps.max(1.0),
            "sum row {sum:?} vs {parts}"
        );
    }
}

fn pin_plan(text: &str, side: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("# pin plan:"))
        .expect("pin plan line");
    let part = line
        .split(';')
        .find_map(|p| {
            p.trim()
                .trim_start_matches("# pin plan:")
                .trim()
                .strip_prefix(side)
        })
        .expect("side");
    part.split_whitespace()
        .map(|s| s.rsplit(":cpu").next().unwrap().to_string())
        .collect()
}

#[test]
fn stream_threads_are_named_and_pinned_on_both_ends() {
    let server = Server::start(&[]);
    let port = server.port_arg();
    let mut client = Spawned::start(&[
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-P",
        "4",
        "-t",
        "1.5",
        "-i",
        "0.5",
    ]);
    // The first interval row means every stream thread on both ends has pinned itself and
    // moved data; none has ended yet (that takes the full 1.5 s).
    client.wait_for_line("the first interval row", is_interval_row, EVENT);
    let stream_threads = |pid| -> Vec<(String, String)> {
        let mut t: Vec<_> = threads(pid)
            .into_iter()
            .filter(|(n, _)| n.starts_with("stream-"))
            .collect();
        t.sort();
        t
    };
    let on_client = stream_threads(client.id());
    let on_server = stream_threads(server.child.id());
    let run = client.finish(LIMIT);
    run.assert_ok();
    let text = run.stdout();
    let names: Vec<&str> = on_client.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["stream-0", "stream-1", "stream-2", "stream-3"],
        "client threads"
    );
    let names: Vec<&str> = on_server.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["stream-0", "stream-1", "stream-2", "stream-3"],
        "server threads"
    );
    let local = pin_plan(&text, "local");
    let remote = pin_plan(&text, "remote");
    for (i, (_, allowed)) in on_client.iter().enumerate() {
        assert_eq!(
            allowed, &local[i],
            "client stream-{i} allowed CPUs vs plan\n{text}"
        );
    }
    for (i, (_, allowed)) in on_server.iter().enumerate() {
        assert_eq!(
            allowed, &remote[i],
            "server stream-{i} allowed CPUs vs plan\n{text}"
        );
    }
}

/// One TCP stream on one host with 1500-byte frames' segments or small blocks (up to 8 KiB,
/// or 32 KiB under bbr) in a test too short to probe: its sender and receiver on two cores
/// (split measured faster there); one UDP stream: its receiver unpinned; two streams: each
/// pair on one core.
#[test]
fn one_stream_of_small_segments_splits_across_cores() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return util::skipped(
            "one_stream_of_small_segments_splits_across_cores",
            "one core",
        );
    }
    let server = Server::start(&[]);
    let port = server.port_arg();
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &port, "-t", "0.2", "-M", "1448"],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    let (local, remote) = (pin_plan(&text, "local"), pin_plan(&text, "remote"));
    assert_eq!(local.len(), 1, "{text}");
    assert_ne!(local, remote, "split\n{text}");
    assert!(
        text.contains("# placement: same host, one stream"),
        "{text}"
    );
    let run = pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "0.2",
            "-M",
            "1448",
            "-P",
            "2",
        ],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    assert_eq!(
        pin_plan(&text, "local"),
        pin_plan(&text, "remote"),
        "paired\n{text}"
    );
    // One UDP stream pins its sender and leaves its receiver to the scheduler, either
    // way round; two stay paired.
    let udp = |streams: &str, more: &[&str]| {
        let mut args = vec![
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "-b",
            "10M",
            "-t",
            "0.2",
            "-P",
            streams,
        ];
        args.extend_from_slice(more);
        let run = pinperf(&args, LIMIT);
        run.assert_ok();
        run.stdout()
    };
    let text = udp("1", &[]);
    assert!(
        text.contains("# pin plan: local stream-0:cpu") && text.contains("; remote none"),
        "{text}"
    );
    assert!(
        text.contains("# placement: same host, one UDP stream: its sender on cpu"),
        "{text}"
    );
    let text = udp("1", &["-R"]);
    assert!(
        text.contains("# pin plan: local none") && text.contains("; remote stream-0:cpu"),
        "{text}"
    );
    let text = udp("2", &[]);
    assert_eq!(
        pin_plan(&text, "local"),
        pin_plan(&text, "remote"),
        "paired\n{text}"
    );
    // Under cubic, small blocks split and the default 128 KiB ones stay paired; under bbr,
    // blocks up to 32 KiB split.
    let under = |cc: &str, block: &str| {
        let run = pinperf(
            &[
                "-c",
                "127.0.0.1",
                "-p",
                &port,
                "-C",
                cc,
                "-l",
                block,
                "-t",
                "0.2",
            ],
            LIMIT,
        );
        run.assert_ok();
        run.stdout()
    };
    let text = under("cubic", "8k");
    assert!(
        text.contains("# placement: same host, one stream of blocks up to 8 KiB"),
        "{text}"
    );
    let text = under("cubic", "128k");
    assert_eq!(
        pin_plan(&text, "local"),
        pin_plan(&text, "remote"),
        "paired\n{text}"
    );
    if !util::has_bbr() {
        util::skipped("bbr placement", "this kernel offers no bbr");
        return;
    }
    let text = under("bbr", "32k");
    assert!(
        text.contains("# placement: same host, one stream under bbr of blocks up to 32 KiB"),
        "{text}"
    );
    let text = under("bbr", "128k");
    assert_eq!(
        pin_plan(&text, "local"),
        pin_plan(&text, "remote"),
        "paired\n{text}"
    );
}

/// One TCP stream of 2 s or more on one host runs both placements first and takes the
/// faster; the header gives both figures, and the pin plans are the one it names.
#[test]
fn a_long_one_stream_test_on_one_host_probes_its_placement() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return util::skipped(
            "a_long_one_stream_test_on_one_host_probes_its_placement",
            "one core",
        );
    }
    let run = pinperf(&["--loopback", "-t", "2", "-i", "2"], LIMIT);
    run.assert_ok();
    let text = run.stdout();
    let note = text
        .lines()
        .find(|l| l.starts_with("# placement: same host, one stream: its sender and receiver "))
        .unwrap_or_else(|| panic!("no probed placement line\n{text}"));
    assert!(note.contains(", 300 ms of each before the test;"), "{note}");
    let (local, remote) = (pin_plan(&text, "local"), pin_plan(&text, "remote"));
    match note.contains("on two cores") {
        true => assert_ne!(local, remote, "split\n{text}"),
        false => assert_eq!(local, remote, "paired\n{text}"),
    }
}

/// `-S 0x28` marks every data and echo connection on both ends, both ways (-R: the
/// server's listener carries it to what it accepts), and leaves the control connection
/// alone; the header says so.
#[test]
fn tos_marks_the_data_connections_on_both_ends() {
    let server = Server::start(&[]);
    let port = server.port_arg();
    // 0x2b asks for ECN bits too, which Linux keeps for itself on TCP: the sockets carry
    // 0x28, and the header says so (it used to claim 0x2b on both ends).
    for (way, asked) in [(None, "0x28"), (Some("-R"), "0x2b")] {
        let mut args = vec![
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-S",
            asked,
            "-t",
            "1.5",
            "-i",
            "0.5",
        ];
        args.extend(way);
        let mut client = Spawned::start(&args);
        client.wait_for_line("the first interval row", is_interval_row, EVENT);
        let (Some(on_client), Some(on_server)) = (
            util::tcp_tos_of(client.id()),
            util::tcp_tos_of(server.child.id()),
        ) else {
            util::skipped("tos_marks_the_data_connections_on_both_ends", "no ss here");
            return;
        };
        let run = client.finish(LIMIT);
        run.assert_ok();
        // Control (unmarked), data and echo (marked) on each end.
        for (end, tos) in [("client", &on_client), ("server", &on_server)] {
            let mut tos = tos.clone();
            tos.sort();
            assert_eq!(
                tos,
                ["0", "0x28", "0x28"],
                "{end} {way:?}\n{}",
                run.explain()
            );
        }
        let said = match asked {
            "0x28" => "; TOS = 0x28 (DSCP 10, -S) on both ends".to_string(),
            _ => format!(
                "; TOS = 0x28 (DSCP 10, -S {asked}: the kernel keeps a TCP socket's two ECN \
                 bits for itself) on both ends"
            ),
        };
        assert!(run.stdout().contains(&said), "{said}{}", run.explain());
    }
}

/// `-M 1000 -N -R`: the server, which sends, does so in segments of at most 1000 bytes
/// (its data listener carries TCP_MAXSEG, and the client's SYN asks for it too); the
/// header gives the MSS the kernel uses and the server's log the -M and -N asked (both
/// set on every data socket: `net`'s unit test).
#[test]
fn the_mss_caps_the_segments_both_ends_send() {
    let test = "the_mss_caps_the_segments_both_ends_send";
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-M",
        "1000",
        "-N",
        "-R",
        "-t",
        "1.5",
        "-i",
        "0.5",
    ];
    let mut client = Spawned::start(&args);
    client.wait_for_line("the first interval row", is_interval_row, EVENT);
    let pid = server.child.id();
    let (Some(on_server), Some(announced)) = (
        util::tcp_sockets_of(pid, "mss"),
        util::tcp_sockets_of(pid, "advmss"),
    ) else {
        util::skipped(test, "no ss here");
        return;
    };
    let run = client.finish(LIMIT);
    run.assert_ok();
    let capped = |m: &str| m.parse::<u32>().is_ok_and(|m| (500..=1000).contains(&m));
    // Control (the path's MSS), data and echo (capped): what the server sends, and what it
    // announced in its SYN-ACKs (its data listener had TCP_MAXSEG; the client's SYN alone
    // caps only the former).
    for (what, values) in [("mss", &on_server), ("advmss", &announced)] {
        assert_eq!(
            values.iter().filter(|m| capped(m)).count(),
            2,
            "{what}: {values:?}\n{}",
            run.explain()
        );
    }
    let text = run.stdout();
    let header = text.lines().find(|l| l.starts_with("# MTU: "));
    let mss = header.and_then(|l| l.split("MSS: ").nth(1)?.split('B').next());
    assert!(mss.is_some_and(capped), "{}", run.explain());
    for said in ["B (-M 1000)", "; TCP_NODELAY (-N)"] {
        assert!(text.contains(said), "{said}{}", run.explain());
    }
    server.wait_for_log(", -M 1000 -N, ", LIMIT);
}

#[test]
fn oversized_window_warns_with_the_sysctl_line() {
    let read = |name: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // The warning checked is the send side's, so only wmem_max decides whether a request
    // can exceed the cap; -w allows up to 1 GiB.
    let wmem = read("wmem_max");
    let request = (wmem * 2).min(1 << 30);
    if request <= wmem {
        // Raising a host-wide sysctl is not the test's to do.
        util::skipped(
            "oversized_window_warns_with_the_sysctl_line",
            &format!(
                "net.core.wmem_max is {wmem}, at least the largest -w (1 GiB), so no request \
                 can exceed it"
            ),
        );
        return;
    }
    let req = request.to_string();
    let run = pinperf(&["--loopback", "-w", &req, "-t", "0.3", "-i", "0.3"], LIMIT);
    run.assert_ok();
    let err = run.stderr();
    assert!(
        err.contains(&format!("net.core.wmem_max = {wmem} caps it"))
            && err.contains(&format!("sysctl -w net.core.wmem_max={request}")),
        "warning naming wmem_max and the fix{}",
        run.explain()
    );
    assert!(err.contains("local SO_SNDBUF granted"), "{}", run.explain());
}

#[test]
fn a_request_over_a_server_limit_is_refused_with_the_limit_named() {
    let server = Server::start(&["--max-streams", "2"]);
    let port = server.port_arg();
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &port, "-P", "3", "-t", "1"],
        LIMIT,
    );
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr().contains(
            "refused the test: -P 3: streams must be 1 to 2 (this server's --max-streams)"
        ),
        "{}",
        run.explain()
    );
    // Said once, on stderr: refused before any header, stdout has nothing to stand beside.
    assert_eq!(run.stdout(), "", "{}", run.explain());
    // And it still serves a request within its limits.
    pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-P",
            "2",
            "-t",
            "0.3",
            "-i",
            "0.3",
        ],
        LIMIT,
    )
    .assert_ok();
}

#[test]
fn no_server_is_a_clear_error_within_seconds() {
    let port = free_port().to_string();
    let run = pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "1"], LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(run.elapsed < Duration::from_secs(5), "{}", run.explain());
    assert!(
        run.stderr().starts_with(&format!(
            "pinperf: connect to 127.0.0.1:{port} (is `pinperf -s` or `iperf3 -s` running there"
        )),
        "{}",
        run.explain()
    );
    // Machine formats carry the failure on stdout as well.
    let unstarted = |format: &[&str]| {
        let mut args = vec!["-c", "127.0.0.1", "-p", &port, "-t", "1", "-T", "lab 7"];
        args.extend_from_slice(format);
        pinperf(&args, LIMIT)
    };
    let run = unstarted(&["-J"]);
    assert_eq!(run.code(), Some(1));
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|m| m.starts_with("connect to 127.0.0.1:")),
        "{doc}"
    );
    // The document's keys, empty (`error` alone, so `d["end"]` raised).
    for key in ["start", "end"] {
        assert!(doc.get(key).is_some_and(|v| v.is_null()), "{key}: {doc}");
    }
    assert_eq!(doc["intervals"], serde_json::json!([]), "{doc}");
    // And -T's title, as a document that started keeps it.
    assert_eq!(doc["title"], "lab 7", "{doc}");
    let run = unstarted(&["--format", "iperf3-json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert_eq!(doc["title"], "lab 7", "{doc}");
}

/// A short test that must succeed: the server has logged the end of everything before it,
/// so it is idle, or finishing (and a new client then waits rather than being refused).
fn short_test(port: &str) -> util::Run {
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", port, "-t", "0.3", "-i", "0.3"],
        LIMIT,
    );
    run.assert_ok();
    check_report(&run.stdout(), 1, 1, 0.3);
    run
}

#[test]
fn a_client_killed_mid_test_leaves_the_server_serving() {
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let mut victim = Spawned::start(&[
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-P",
        "2",
        "-t",
        "10",
        "-i",
        "0.2",
    ]);
    victim.wait_for_line(
        "the first interval row (the test is running)",
        is_interval_row,
        EVENT,
    );
    victim.kill();
    // The server notices the dead client and says so when the test has ended.
    let line = server.wait_for_log(" failed: ", EVENT);
    assert!(line.contains("pinperf: test from 127.0.0.1:"), "{line}");
    short_test(&port);
    assert!(server.is_running(), "{}", server.explain());
}

#[test]
fn a_server_that_vanishes_mid_test_fails_the_client_quickly() {
    server_vanishes(&[]);
}

// UDP and both directions at once: each way a test runs has its own threads and waits, and
// each must notice the vanished server.
#[test]
fn a_server_that_vanishes_mid_udp_test_fails_the_client_quickly() {
    server_vanishes(&["-u", "-b", "100M"]);
}

#[test]
fn a_server_that_vanishes_mid_bidir_test_fails_the_client_quickly() {
    server_vanishes(&["--bidir"]);
}

// The server sends: its reports stop with it, while this end's rows go on to the end.
#[test]
fn a_server_that_vanishes_mid_reverse_udp_test_fails_the_client_quickly() {
    server_vanishes(&["-u", "-b", "100M", "-R"]);
}

fn server_vanishes(way: &[&str]) {
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    // A client that did not notice would still be running its -t 60 when `finish` kills
    // it at LIMIT: the exit code tells the two apart, whatever the machine's load (a
    // threshold on the time it took to notice failed on a busy CI host).
    let mut args = vec![
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-P",
        "2",
        "-t",
        "60",
        "-i",
        "0.2",
    ];
    args.extend_from_slice(way);
    let mut client = Spawned::start(&args);
    client.wait_for_line(
        "the first interval row (the test is running)",
        is_interval_row,
        EVENT,
    );
    server.child.kill().unwrap();
    let run = client.finish(LIMIT);
    assert_eq!(
        run.code(),
        Some(1),
        "{way:?}: the client did not end on its own{}",
        run.explain()
    );
    let stderr = run.stderr();
    assert!(
        stderr.starts_with("pinperf: test aborted ")
            && stderr.contains("closed the control connection"),
        "{way:?}{}",
        run.explain()
    );
    // The rows so far keep their totals, said to be cut short: each direction's.
    let stdout = run.stdout();
    let totals = stdout
        .lines()
        .filter(|l| l.starts_with("#(") && l.contains("**)"))
        .count();
    assert_eq!(
        totals,
        1 + usize::from(way.contains(&"--bidir")),
        "{way:?}{}",
        run.explain()
    );
    // Each direction's bytes line says so. TCP this end sent: the receiver's rows rarely
    // hold what was still in flight when the server died (they do when it died just as a
    // row ended: then the two agree over the part that ran). A direction the server sent
    // may end before its first report (the sender's count unknown); UDP's counts may agree.
    let udp = way.contains(&"-u");
    for (i, line) in stdout
        .lines()
        .filter(|l| l.starts_with("# bytes:"))
        .enumerate()
    {
        let server_sent = way.contains(&"-R") || i == 1;
        let ok = match (udp, server_sent) {
            (false, false) => {
                line.ends_with(": not reconciled: the test was cut short")
                    || line.ends_with(": equal, over the part that ran: the test was cut short")
            }
            (true, false) => line.ends_with(": the test was cut short"),
            (_, true) => {
                line.ends_with(": the test was cut short")
                    || line.contains("the sender's count is unknown")
            }
        };
        assert!(ok, "{way:?}: direction {i}: {line}{}", run.explain());
    }
    // And why, beside the numbers (stdout, or --logfile), not only on stderr.
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.starts_with("# failed: test aborted ")
            && last.ends_with("closed the control connection"),
        "{way:?}: last line {last:?}{}",
        run.explain()
    );
    if udp {
        // Rows past the sender's last report are printed, and the totals end before
        // them: the datagrams the totals count are those of the rows they span.
        let total = |l: &str| -> Option<(f64, u64)> {
            let f: Vec<&str> = l[l.find(')')? + 1..].split_whitespace().collect();
            Some((f.get(1)?.parse().ok()?, f.get(5)?.parse().ok()?))
        };
        let (end, counted) = stdout
            .lines()
            .find(|l| l.starts_with("#(**)"))
            .and_then(total)
            .unwrap_or_else(|| panic!("{way:?}: a #(**) line{}", run.explain()));
        let spanned: u64 = stdout
            .lines()
            .filter(|l| l.starts_with("(sum)"))
            .filter_map(total)
            .filter(|&(row_end, _)| row_end <= end + 1e-9)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(counted, spanned, "{way:?}: up to {end} s{}", run.explain());
        // The rows past the totals' end say so.
        for line in stdout.lines().filter(|l| l.starts_with("(sum)")) {
            let past = total(line).is_some_and(|(row_end, _)| row_end > end + 1e-9);
            assert_eq!(
                past,
                line.ends_with("(after the sender's last report: not in the totals)"),
                "{way:?}: {line}{}",
                run.explain()
            );
        }
    }
}

#[test]
fn a_failed_json_test_keeps_its_intervals_and_says_why() {
    use pinperf::report::format::json::Document;
    use pinperf::wire::ReceiverRow;
    let mut server = Server::start(&[]);
    // -J prints nothing until the end, so the moment to wait for is on the control
    // connection, seen through a tap: the server's interval rows on their way to the client.
    let tap = util::ControlTap::start(server.port);
    let mut client = Spawned::start(&[
        "-c",
        "127.0.0.1",
        "-p",
        &tap.port_arg(),
        "-t",
        "10",
        "-i",
        "0.2",
        "-J",
    ]);
    // A busy loopback can carry nothing for a while (a lost segment waits out the initial
    // 1 s retransmission timeout), so wait for a row that has data in it.
    tap.wait_for(
        "an interval row with data",
        |m| matches!(m, ControlMsg::Row(r) if r.bytes.iter().sum::<u64>() > 0),
        EVENT,
    );
    server.child.kill().unwrap();
    let run = client.finish(LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    let doc: Document =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert!(
        doc.error
            .as_deref()
            .is_some_and(|m| m.contains("closed the control connection")),
        "{}",
        run.explain()
    );
    assert_eq!(doc.start.streams, 1);
    // The client read every row up to the closed connection, so the intervals measured
    // before the failure are kept: each row the server sent, with its bytes, and no other.
    let rows: Vec<ReceiverRow> = tap
        .messages()
        .into_iter()
        .filter_map(|m| match m {
            ControlMsg::Row(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(doc.intervals.len(), rows.len(), "{}", run.explain());
    for row in &rows {
        let kept = doc.intervals.iter().find(|iv| iv.index == row.index);
        assert!(
            kept.is_some_and(|iv| iv
                .streams
                .iter()
                .map(|s| s.bytes)
                .eq(row.bytes.iter().copied())),
            "the server's row {row:?} is kept as sent: {kept:?}{}",
            run.explain()
        );
    }
    // The totals are those rows' sum, marked cut short.
    let end = doc
        .end
        .as_ref()
        .unwrap_or_else(|| panic!("totals so far{}", run.explain()));
    assert!(end.cut_short, "{}", run.explain());
    let rows_bytes: u64 = rows.iter().flat_map(|r| &r.bytes).sum();
    assert_eq!(end.sum_received.bytes, rows_bytes, "{}", run.explain());
}

#[test]
fn a_second_client_during_a_test_is_told_the_server_is_busy() {
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let mut first = Spawned::start(&["-c", "127.0.0.1", "-p", &port, "-t", "1.5", "-i", "0.25"]);
    first.wait_for_line(
        "the first interval row (the test is running)",
        is_interval_row,
        EVENT,
    );
    let second = pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "1"], LIMIT);
    assert_eq!(second.code(), Some(1), "{}", second.explain());
    assert!(
        second.stderr().contains("server busy"),
        "{}",
        second.explain()
    );
    // Quick: the server refused while the first test still ran, not after it. Its log
    // orders the two (a loaded host may take longer than the test's last second just to
    // start the second client, so the first one's still running is no measure).
    server.wait_for_log(" done, received ", EVENT);
    let log = server.log();
    let (refused, done) = (log.find("refused client "), log.find(" done, received "));
    assert!(
        refused.is_some() && refused < done,
        "the refusal came after the test{}\n{log}",
        second.explain()
    );
    let first = first.finish(LIMIT);
    first.assert_ok();
    check_report(&first.stdout(), 1, 6, 1.5);
}

/// A client against an echo service is told that is what it met, not "expected welcome,
/// got hello".
#[test]
fn a_client_that_meets_an_echo_service_says_so() {
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = echo.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        if let Ok((s, _)) = echo.accept() {
            let _ = std::io::copy(&mut &s, &mut &s);
        }
    });
    let run = pinperf(&["-c", "127.0.0.1", "-p", &port, "-t", "1"], LIMIT);
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("not a pinperf server: it sent this client's hello back"),
        "{}",
        run.explain()
    );
}

#[test]
fn garbage_and_wrong_versions_on_the_control_port_are_refused_and_survived() {
    let mut server = Server::start(&[]);
    let addr = format!("127.0.0.1:{}", server.port);
    // An HTTP request.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    server.wait_for_log(r#"not a pinperf peer (it opened with "GET / HT")"#, EVENT);
    // Binary garbage, in hex (Rust's escapes, "\u{1a}��V��").
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&[0x1a, 0xc3, 0x56, 0x00, 0xff, 0x12, 0x7d, 0x20])
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_end(&mut sink);
    server.wait_for_log(
        "not a pinperf peer (it opened with bytes 1ac35600ff127d20)",
        EVENT,
    );
    // A future client: preamble, then a Hello with another protocol version.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(wire::PREAMBLE).unwrap();
    s.write_all(&wire::encode(&ControlMsg::Hello {
        version: 99,
        software: "pinperf 9".into(),
    }))
    .unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let peer = s.peer_addr().unwrap();
    match wire::read_frame(&mut s, peer).unwrap() {
        ControlMsg::Refuse { reason } => {
            assert_eq!(
                reason,
                format!(
                    "pinperf 9 speaks protocol 99; this server ({}) speaks {}",
                    wire::SOFTWARE,
                    wire::PROTOCOL_VERSION
                )
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    server.wait_for_log(
        "refused the client's test: pinperf 9 speaks protocol 99",
        EVENT,
    );
    // A frame claiming 4 GiB.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(wire::PREAMBLE).unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
    drop(s);
    server.wait_for_log("control frame of 4294967295 bytes", EVENT);
    assert!(server.is_running(), "{}", server.explain());
    short_test(&server.port_arg());
}

#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    let run = pinperf(&["--loopback", "-P", "0"], LIMIT);
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert_eq!(run.stderr(), "pinperf: -P 0: streams must be 1 to 256\n");
    let run = pinperf(&["--loopback", "-l", "lots"], LIMIT);
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert!(run.stderr().contains("'--len <SIZE>'"), "{}", run.explain());
    let run = pinperf(&[], LIMIT);
    assert_eq!(run.code(), Some(2));
    let run = pinperf(&["--loopback", "-C", "nosuchcc", "-t", "1"], LIMIT);
    assert_eq!(run.code(), Some(2), "{}", run.explain());
    assert!(
        run.stderr()
            .starts_with("pinperf: -C nosuchcc: this kernel has no 'nosuchcc'"),
        "{}",
        run.explain()
    );
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn json_document_adds_up_and_reconciles() {
    use pinperf::report::format::json::Document;
    let run = pinperf(
        &["--loopback", "-P", "4", "-t", "1.5", "-i", "0.5", "-J"],
        LIMIT,
    );
    run.assert_ok();
    let doc: Document =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert_eq!(doc.start.streams, 4);
    assert_eq!(doc.intervals.len(), 3, "{}", run.explain());
    let end = doc.end.expect("end");
    let mut interval_total = 0u64;
    let mut expect_start = 0.0;
    for iv in &doc.intervals {
        assert_eq!(iv.streams.len(), 4);
        let bytes: u64 = iv.streams.iter().map(|s| s.bytes).sum();
        let sent: u64 = iv.streams.iter().map(|s| s.sent_bytes).sum();
        assert_eq!(
            bytes, iv.sum.bytes,
            "interval {} stream bytes vs sum",
            iv.index
        );
        assert_eq!(sent, iv.sum.sent_bytes);
        assert!(iv.sum.sum, "sum objects say so");
        assert!(close(iv.sum.start, expect_start), "contiguous");
        expect_start = iv.sum.end;
        let f = iv.sum.fairness;
        assert!(
            f.jain.is_some_and(|j| j > 0.25 - 1e-9 && j <= 1.0 + 1e-9),
            "{f:?}"
        );
        interval_total += bytes;
    }
    // Block RTT with echo on: a sender collects echoes between its writes, so a stream
    // thread that got no CPU for a whole 0.5 s interval on a loaded machine has none there
    // (its bytes came from its buffer); over the test every stream has its samples.
    for s in 0..4 {
        assert!(
            doc.intervals
                .iter()
                .any(|iv| iv.streams[s].block_rtt.is_some_and(|r| r.samples > 0)),
            "stream {s}: block RTT in some interval with echo on{}",
            run.explain()
        );
    }
    assert_eq!(
        interval_total, end.sum_received.bytes,
        "intervals add up to the total"
    );
    assert_eq!(
        end.sum_sent.bytes, end.sum_received.bytes,
        "sender and receiver reconcile"
    );
    let per_stream: u64 = end.streams.iter().map(|s| s.bytes).sum();
    assert_eq!(per_stream, end.sum_received.bytes);
    assert_eq!(end.fairness.stream_intervals, 12);
    assert!(
        end.streams
            .iter()
            .all(|s| s.min_rtt.is_some() && s.snd_cwnd.is_some())
    );
    let kernel = end.kernel.expect("kernel TCP counters");
    assert!(
        kernel.shared_namespace && kernel.receiver.is_none(),
        "both ends of --loopback read one namespace's counters: {kernel:?}"
    );
}

#[test]
fn json_lines_stream_events_and_no_echo_drops_block_rtt() {
    use pinperf::report::format::json::Event;
    let run = pinperf(
        &[
            "--loopback",
            "-t",
            "1",
            "-i",
            "0.5",
            "--json-lines",
            "--no-echo",
        ],
        LIMIT,
    );
    run.assert_ok();
    let events: Vec<Event> = run
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events.len(), 4, "start, 2 intervals, end{}", run.explain());
    assert!(matches!(&events[0], Event::Start(h) if !h.echo));
    let Event::End(end) = &events[3] else {
        panic!("end expected{}", run.explain())
    };
    assert!(end.reconciled(), "{}", run.explain());
    // The kernel's srtt is read with each batch a stream thread hands over (TCP_INFO, every
    // 20 ms of its own progress). On a busy machine a thread may get no turn in a whole
    // interval, and that interval then has no sample at all, so: every interval that has a
    // sample (its `snd_cwnd` comes from the same one) has the kernel RTT, and the intervals'
    // samples add up to the whole test's.
    let mut samples = 0;
    for ev in &events[1..3] {
        let Event::Interval(iv) = ev else {
            panic!("interval expected{}", run.explain())
        };
        let s = &iv.streams[0];
        assert!(
            s.block_rtt.is_none(),
            "no block RTT with --no-echo{}",
            run.explain()
        );
        assert_eq!(
            s.kernel_rtt.is_some(),
            s.snd_cwnd.is_some(),
            "kernel RTT wherever TCP_INFO was sampled{}",
            run.explain()
        );
        if s.kernel_rtt.is_none() {
            eprintln!(
                "note: interval {} had no TCP_INFO sample (its stream thread got no turn)",
                iv.index
            );
        }
        samples += s.kernel_rtt.map_or(0, |k| k.samples);
    }
    let total = end.streams[0].kernel_rtt;
    assert!(
        total.is_some_and(|k| k.samples == samples && samples > 0)
            && end.streams[0].block_rtt.is_none(),
        "the test's kernel RTT is the intervals' ({samples} samples): {total:?}{}",
        run.explain()
    );
}

#[test]
fn csv_stream_rows_sum_to_the_sum_rows() {
    let run = pinperf(
        &["--loopback", "-P", "3", "-t", "1", "-i", "0.25", "--csv"],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(header.join(","), pinperf::report::format::csv::COLUMNS);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (kind, interval, bytes, sent) = (
        col("kind"),
        col("interval"),
        col("bytes"),
        col("sent_bytes"),
    );
    let mut streams: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut totals, mut total_sum) = ((0u64, 0u64), None);
    let mut cpu_kinds = std::collections::BTreeSet::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), header.len(), "{line}");
        if f[kind].starts_with("cpu_") {
            cpu_kinds.insert(f[kind].to_string());
            continue;
        }
        let (b, s): (u64, u64) = (f[bytes].parse().unwrap(), f[sent].parse().unwrap());
        match f[kind] {
            "stream" => {
                let e = streams.entry(f[interval].to_string()).or_default();
                e.0 += b;
                e.1 += s;
            }
            "sum" => assert!(sums.insert(f[interval].to_string(), (b, s)).is_none()),
            "total" => {
                totals.0 += b;
                totals.1 += s;
            }
            "total_sum" => total_sum = Some((b, s)),
            other => panic!("unknown kind {other}"),
        }
    }
    assert_eq!(sums.len(), 4, "{text}");
    assert_eq!(streams, sums, "stream rows reproduce the sum rows");
    let total_sum = total_sum.expect("total_sum row");
    assert_eq!(totals, total_sum);
    let over_intervals = sums.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    assert_eq!(over_intervals, total_sum);
    assert_eq!(total_sum.0, total_sum.1, "received = sent");
    let want: std::collections::BTreeSet<String> =
        ["cpu_core", "cpu_efficiency", "cpu_process", "cpu_thread"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    assert_eq!(cpu_kinds, want);
}

/// utime + stime of a process (or a zombie's, which keeps them), in clock ticks, and its state.
fn proc_ticks(pid: u32) -> (u64, char) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the ")" that closes the command name: state is the first, utime the 12th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first().and_then(|s| s.chars().next()).unwrap_or('?');
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks, state)
}

fn clk_tck() -> f64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK")
}

#[test]
fn cpu_figures_agree_with_proc_stat_sampled_from_outside() {
    use pinperf::report::format::json::Document;
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let tck = clk_tck();
    let server_pid = server.child.id();
    let (server_before, _) = proc_ticks(server_pid);
    let mut client =
        Spawned::start(&["-c", "127.0.0.1", "-p", &port, "-P", "2", "-t", "1.5", "-J"]);
    // Read the client's CPU as a zombie: exited, not yet reaped, its times final.
    let pid = client.id();
    let client_ticks = util::wait_until(
        "the client to exit (a zombie, not yet reaped)",
        LIMIT,
        || match proc_ticks(pid) {
            (ticks, 'Z') => Some(ticks),
            _ => None,
        },
        || format!("state {:?}", proc_ticks(pid)),
    );
    let run = client.finish(LIMIT);
    run.assert_ok();
    // The server logs this after it has measured its CPU and sent the totals.
    server.wait_for_log("done, received", EVENT);
    let (server_after, _) = proc_ticks(server_pid);

    let doc: Document =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    let cpu = doc.end.unwrap().cpu.expect("cpu report");
    let remote = cpu.remote.expect("remote cpu");
    // Compared as CPU-seconds, which a busy machine does not inflate (it only stretches
    // the wall time both figures share). /proc covers more than pinperf's span: the
    // client's whole life, the server's from before the client connected to after the
    // totals, so it may exceed pinperf's by start-up and teardown (at most 5 % of the span,
    // 75 ms here), and fall short only by its rounding down to ticks (two: user and sys).
    let check = |side: &str, pinperf_us: u64, ticks: u64, seconds: f64| {
        let pinperf_s = pinperf_us as f64 / 1e6;
        let proc_s = ticks as f64 / tck;
        eprintln!(
            "{side}: pinperf {pinperf_s:.3} CPU-s, /proc {proc_s:.3} CPU-s over {seconds:.3} s"
        );
        assert!(
            proc_s + 2.0 / tck >= pinperf_s && proc_s - pinperf_s <= 0.05 * seconds,
            "{side}: pinperf says {pinperf_s:.3} CPU-seconds in {seconds:.3} s, /proc says \
             {proc_s:.3}{}",
            run.explain()
        );
    };
    check(
        "client",
        cpu.local.process.total_us(),
        client_ticks,
        cpu.local.seconds,
    );
    check(
        "server",
        remote.process.total_us(),
        server_after - server_before,
        remote.seconds,
    );
    // And the percentages are those CPU-seconds over the span.
    for r in [&cpu.local, &remote] {
        let pct = r.process.total_us() as f64 / 1e4 / r.seconds;
        assert!((r.host_total - pct).abs() < 1e-6, "{r:?}");
    }
    assert_eq!(remote.streams.len(), 2, "per-thread CPU for each stream");
    assert!(!cpu.local.cores.is_empty() && cpu.gbps_per_busy_core.is_some());
}

#[test]
fn cpu_flag_prints_per_core_lines_and_the_end_block_lists_threads() {
    let run = pinperf(
        &["--loopback", "-P", "2", "-t", "1", "-i", "0.5", "--cpu"],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    let per_interval: Vec<&str> = text.lines().filter(|l| l.starts_with("# cpu ")).collect();
    assert_eq!(per_interval.len(), 2, "{text}");
    // Each comes after its interval's rows, the (sum) row included (it split them), and
    // with --bidir after both directions' (RXsum).
    let after_sums = |text: &str, sum: &str| {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with("# cpu "))
        {
            assert!(
                lines[i - 1].starts_with(sum),
                "{l:?} after {:?}\n{text}",
                lines[i - 1]
            );
        }
    };
    after_sums(&text, "(sum)");
    let bidir = pinperf(
        &[
            "--loopback",
            "--bidir",
            "-P",
            "2",
            "-t",
            "1",
            "-i",
            "0.5",
            "--cpu",
        ],
        LIMIT,
    );
    bidir.assert_ok();
    let bidir = bidir.stdout();
    assert_eq!(
        bidir.lines().filter(|l| l.starts_with("# cpu ")).count(),
        2,
        "{bidir}"
    );
    after_sums(&bidir, "(RXsum)");
    let cores: Vec<String> = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    // Each line: `# cpu B-E local: cpuN busy X% (softirq Y%), …`, distinct cores in order,
    // softirq within busy within 100 %.
    let listed = |line: &str| -> Vec<String> {
        let list = line
            .split_once(" local: ")
            .unwrap_or_else(|| panic!("no core list in {line:?}\n{text}"))
            .1;
        list.split(", ")
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let f: Vec<&str> = entry.split_whitespace().collect();
                let num = |s: &str| -> f64 {
                    s.trim_matches(|c| "()%".contains(c))
                        .parse()
                        .unwrap_or_else(|_| panic!("{entry:?} in {line:?}"))
                };
                assert!(
                    f.len() == 5 && f[1] == "busy" && f[3] == "(softirq",
                    "{entry:?} in {line:?}"
                );
                let (busy, softirq) = (num(f[2]), num(f[4]));
                assert!(
                    (0.0..=100.0).contains(&busy) && (0.0..=busy + 0.1).contains(&softirq),
                    "{entry:?}"
                );
                f[0].to_string()
            })
            .collect()
    };
    // The first line spans the test's start to its first interval (at least 0.5 s: ticks
    // on every core), so it lists every core. A later line is read when the reporter gets
    // to its interval; on a busy machine it may get to two at once, and a core whose
    // counters did not move between the two readings is left out rather than shown as 0/0.
    assert_eq!(listed(per_interval[0]), cores, "{text}");
    for line in &per_interval[1..] {
        let got = listed(line);
        let mut known = cores.iter();
        assert!(
            got.iter().all(|c| known.any(|k| k == c)),
            "cores {got:?}: each of {cores:?} at most once, in order\n{text}"
        );
        if got.len() < cores.len() {
            eprintln!(
                "note: {line:?} lists {} of {} cores",
                got.len(),
                cores.len()
            );
        }
    }
    assert!(
        text.contains("# CPU local threads (senders): stream-0 ") && text.contains(", stream-1 "),
        "{text}"
    );
    assert!(
        text.contains("# CPU remote threads (receivers): stream-0 "),
        "{text}"
    );
    assert!(text.contains("# CPU efficiency: "), "{text}");
}

#[test]
fn compare_runs_one_row_per_configuration_in_text_and_json() {
    use pinperf::commands::compare::CompareDoc;
    let args = [
        "compare",
        "--loopback",
        "--blocks",
        "8k,64k,256k",
        "--engines",
        "threads,single",
        "-t",
        "0.2",
        "--settle",
        "0",
    ];
    let run = pinperf(&args, LIMIT);
    run.assert_ok();
    let text = run.stdout();
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 6, "{}", run.explain());
    for (row, (block, engine)) in rows.iter().zip([
        ("8k", "threads"),
        ("8k", "single"),
        ("64k", "threads"),
        ("64k", "single"),
        ("256k", "threads"),
        ("256k", "single"),
    ]) {
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((f[0], f[4]), (block, engine), "{row}");
        assert!(f[5].parse::<f64>().unwrap() > 0.0, "{row}");
    }
    let mut json_args = args.to_vec();
    json_args.push("-J");
    let run = pinperf(&json_args, LIMIT);
    run.assert_ok();
    let doc: CompareDoc =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert_eq!(doc.rows.len(), 6);
    for r in &doc.rows {
        assert!(
            r.error.is_none() && r.bits_per_second.is_some_and(|b| b > 0.0),
            "error {:?}, {:?} bit/s{}",
            r.error,
            r.bits_per_second,
            run.explain()
        );
    }
    assert!(
        doc.rows
            .iter()
            .all(|r| r.local_cpu_percent.is_some() && r.gbps_per_busy_core.is_some())
    );
}

/// `diagnose --loopback --budget 6s -J`: a baseline and the probes it led to, each with its
/// progress line on stderr, a verdict that names a limit, all within the budget.
#[test]
fn diagnose_ends_in_a_verdict_within_its_budget() {
    use pinperf::commands::diagnose::DiagnoseDoc;
    use pinperf::commands::diagnose::plan::Probe;
    use pinperf::commands::diagnose::verdict::Limit;
    let run = pinperf(&["diagnose", "--loopback", "--budget", "6s", "-J"], LIMIT);
    run.assert_ok();
    let doc: DiagnoseDoc =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    let first = doc.runs.first().map(|r| (r.probe, r.figures.is_some()));
    assert_eq!(first, Some((Probe::Baseline, true)), "{}", run.explain());
    assert!((1.0..=2.0).contains(&doc.run_seconds), "{}", run.explain());
    assert!(
        doc.elapsed_s <= doc.budget_s,
        "budget not kept{}",
        run.explain()
    );
    assert_ne!(doc.verdict.limit, Limit::NotMeasured, "{}", run.explain());
    assert!(!doc.verdict.words.is_empty(), "{}", run.explain());
    let steps = run
        .stderr()
        .lines()
        .filter(|l| l.starts_with("step "))
        .count();
    assert_eq!(
        steps,
        doc.runs.len(),
        "a progress line per run{}",
        run.explain()
    );
}

/// A combination the single engine cannot run (it does not pace) is a skipped row with its
/// reason, and the rest of the matrix runs, exit 0 (the whole comparison was
/// refused); a matrix with nothing runnable is refused, exit 2.
#[test]
fn compare_skips_what_the_engine_cannot_run_and_runs_the_rest() {
    use pinperf::commands::compare::CompareDoc;
    let args = [
        "compare",
        "--loopback",
        "--engines",
        "threads,single",
        "--rates",
        "0,1G",
        "-t",
        "0.2",
        "--settle",
        "0",
        "-J",
    ];
    let run = pinperf(&args, LIMIT);
    run.assert_ok();
    let doc: CompareDoc =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    assert_eq!(doc.rows.len(), 4, "{}", run.explain());
    for r in &doc.rows {
        let single_paced = r.point.engine.to_string() == "single" && r.point.rate_bps.is_some();
        assert_eq!(r.skipped.is_some(), single_paced, "{r:?}");
        assert_eq!(r.bits_per_second.is_some(), !single_paced, "{r:?}");
        assert!(r.error.is_none(), "{r:?}");
    }
    let skipped = doc.rows.iter().find_map(|r| r.skipped.as_deref()).unwrap();
    assert!(skipped.starts_with("--engine single: its one thread neither paces (-b)"));
    let none = pinperf(
        &[
            "compare",
            "--loopback",
            "--engines",
            "single",
            "--rates",
            "1G",
        ],
        LIMIT,
    );
    assert_eq!(none.code(), Some(2), "{}", none.explain());
    assert!(
        none.stderr()
            .contains("--engine single: its one thread neither paces")
    );
}

#[test]
fn the_seed_shell_loop_prints_one_total_line_per_size() {
    let server = Server::start(&[]);
    let port = server.port_arg();
    let sizes = [
        "8192", "16384", "32768", "65536", "131072", "262144", "524288", "1048576",
    ];
    let script = format!(
        "for l in {}; do {} -c 127.0.0.1 -p {port} -l $l -t 0.2 -i 0.2 | fgrep '**' || exit 1; done",
        sizes.join(" "),
        util::bin()
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    assert!(lines.iter().all(|l| l.starts_with("#(**)")), "{stdout}");
}

/// `-Z` (both methods) and `--skip-rx-copy` through the control protocol, each way: every
/// byte the sender wrote is counted by the receiver, block RTT still comes back, the
/// sending end's CPU report says what `-Z` did, and `compare --copy` runs one row per mode
/// with its CPU-seconds per GB.
#[test]
fn zerocopy_and_skip_rx_copy_count_every_byte_both_ways() {
    use pinperf::commands::compare::CompareDoc;
    use pinperf::report::format::json::Document;
    for (extra, method) in [
        (&["-Z"][..], Some("sendfile")),
        (&["--zerocopy=msg"], Some("msg")),
        (&["--skip-rx-copy"], None),
        (&["-Z", "--skip-rx-copy", "-R"], Some("sendfile")),
    ] {
        let mut args = vec!["--loopback", "-P", "2", "-l", "64k", "-t", "1", "-J"];
        args.extend_from_slice(extra);
        let run = pinperf(&args, LIMIT);
        run.assert_ok();
        let doc: Document =
            serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
        let end = doc.end.expect("end");
        assert!(end.sum_received.bytes > 0, "{extra:?}");
        assert_eq!(
            end.sum_sent.bytes,
            end.sum_received.bytes,
            "{extra:?}: sender and receiver reconcile{}",
            run.explain()
        );
        assert!(
            doc.intervals
                .iter()
                .any(|iv| iv.sum.block_rtt.is_some_and(|r| r.samples > 0)),
            "{extra:?}: block RTT with the copy modes{}",
            run.explain()
        );
        let cpu = end.cpu.expect("cpu");
        let sender = match extra.contains(&"-R") {
            true => cpu.remote.expect("the server's cpu"),
            false => cpu.local,
        };
        let path = sender.send_path;
        let named = path.as_ref().map(|p| p.method.to_string());
        assert_eq!(named.as_deref(), method, "{extra:?}{}", run.explain());
        if let Some(p) = path {
            assert!(p.sends > 0, "{extra:?}: {p:?}");
            match method {
                Some("msg") => assert!(p.copied.is_some_and(|c| c <= p.sends), "{p:?}"),
                _ => assert_eq!(p.copied, None, "sendfile: the kernel reports no copies"),
            }
        }
    }
    let run = pinperf(
        &[
            "compare",
            "--loopback",
            "--blocks",
            "64k",
            "--copy",
            "default,zerocopy,sendfile,msg-zerocopy,skip-rx",
            "-t",
            "0.3",
            "--settle",
            "0",
            "-J",
        ],
        LIMIT,
    );
    run.assert_ok();
    let doc: CompareDoc =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}{}", run.explain()));
    let modes: Vec<&str> = doc.rows.iter().map(|r| r.point.copy.as_str()).collect();
    assert_eq!(
        modes,
        ["default", "zerocopy", "sendfile", "msg-zerocopy", "skip-rx"]
    );
    assert!(
        doc.rows
            .iter()
            .all(|r| r.error.is_none() && r.cpu_seconds_per_gb.is_some_and(|c| c > 0.0)),
        "{}",
        run.explain()
    );
}

/// With 1500-byte frames' segments the header says the receivers raise SO_RCVLOWAT on a
/// fast stream, whichever end receives; at loopback's own MSS, or with `--no-rcvlowat`
/// (which the server logs), it says nothing. The bytes reconcile either way.
#[test]
fn the_header_says_when_receivers_raise_their_low_water_mark() {
    let mut server = Server::start(&[]);
    let port = server.port_arg();
    let said = |extra: &[&str]| {
        let mut args = vec!["-c", "127.0.0.1", "-p", &port, "-t", "0.3"];
        args.extend_from_slice(extra);
        let run = pinperf(&args, LIMIT);
        run.assert_ok();
        let text = run.stdout();
        assert!(
            text.contains("receiver read") && text.contains(": equal"),
            "{text}"
        );
        text.contains(
            "# receivers: SO_RCVLOWAT 131072B while a stream runs above 5.2 Gbit/s (one host, MSS at most 4096B",
        )
    };
    assert!(said(&["-M", "1448"]), "-M 1448");
    assert!(said(&["-M", "1448", "-R"]), "-M 1448 -R");
    assert!(!said(&[]), "loopback's MSS");
    assert!(!said(&["-M", "1448", "--no-rcvlowat"]), "--no-rcvlowat");
    server.wait_for_log(", -M 1448 --no-rcvlowat, ", LIMIT);
}
