//! UDP (`-u`) on loopback: datagrams paced at `-b`, counted by sequence, totals settled on
//! the sender's own count, every direction, and the server's limits.

mod util;

use std::time::Duration;

use serde_json::Value;
use util::{Server, pinperf};

const LIMIT: Duration = Duration::from_secs(20);

fn doc(run: &util::Run) -> Value {
    run.assert_ok();
    serde_json::from_str(&run.stdout())
        .unwrap_or_else(|e| panic!("not JSON ({e}){}", run.explain()))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Two streams at 50 Mbit/s each: every interval carries its datagrams under iperf3's
/// names, the totals add up (sent = received + lost, bytes = datagrams × size), and the
/// rate is the asked one.
#[test]
fn udp_streams_are_paced_and_every_datagram_is_accounted_for() {
    let run = pinperf(
        &[
            "--loopback",
            "-u",
            "-b",
            "50M",
            "-l",
            "1400",
            "-P",
            "2",
            "-t",
            "1",
            "-i",
            "0.5",
            "-J",
        ],
        LIMIT,
    );
    let d = doc(&run);
    let why = run.explain();
    assert_eq!(d["start"]["udp"], true, "{why}");
    assert_eq!(num(&d["start"], "block_bytes"), 1400, "{why}");
    for iv in d["intervals"].as_array().unwrap() {
        for s in iv["streams"].as_array().unwrap() {
            for key in ["packets", "lost_packets", "out_of_order", "duplicates"] {
                num(s, key);
            }
            assert!(s["jitter_ms"].as_f64().is_some() && s["lost_percent"].as_f64().is_some());
        }
    }
    let end = &d["end"];
    let (sent, lost) = (
        num(&end["sum"], "packets"),
        num(&end["sum"], "lost_packets"),
    );
    let received_bytes = num(&end["sum_received"], "bytes");
    assert_eq!(num(&end["sum_sent"], "bytes"), sent * 1400, "{why}");
    assert_eq!(received_bytes, (sent - lost) * 1400, "{why}");
    assert!(
        lost * 100 <= sent,
        "{lost} of {sent} lost at 100 Mbit/s on loopback{why}"
    );
    let mbps = end["sum_received"]["bits_per_second"].as_f64().unwrap() / 1e6;
    assert!(
        (90.0..=110.0).contains(&mbps),
        "{mbps} Mbit/s for -b 50M -P 2{why}"
    );
    // Per stream, the same identity.
    for s in end["streams"].as_array().unwrap() {
        assert_eq!(
            num(s, "bytes"),
            (num(s, "packets") - num(s, "lost_packets")) * 1400,
            "{s}"
        );
    }
}

/// The other directions: the server's UDP senders (-R) and both at once (--bidir), each
/// with its own datagram totals.
#[test]
fn udp_runs_reverse_and_both_ways() {
    let d = doc(&pinperf(
        &["--loopback", "-u", "-b", "20M", "-R", "-t", "0.5", "-J"],
        LIMIT,
    ));
    assert_eq!(d["end"]["reverse"], true);
    assert!(num(&d["end"]["sum"], "packets") > 0);
    let d = doc(&pinperf(
        &[
            "--loopback",
            "-u",
            "-b",
            "20M",
            "--bidir",
            "-t",
            "0.5",
            "-J",
        ],
        LIMIT,
    ));
    for key in ["end", "end_reverse"] {
        let sum = &d[key]["sum"];
        assert!(num(sum, "packets") > 0, "{key}: {sum}");
        assert_eq!(
            num(&d[key]["sum_received"], "bytes"),
            (num(sum, "packets") - num(sum, "lost_packets")) * num(&d["start"], "block_bytes"),
            "{key}"
        );
    }
}

/// Text: its own columns, and the end line that reconciles the two ends' counts.
#[test]
fn udp_text_has_datagram_columns_and_a_reconciling_end_line() {
    let run = pinperf(&["--loopback", "-u", "-b", "10M", "-t", "0.5"], LIMIT);
    run.assert_ok();
    let text = run.stdout();
    assert!(
        text.contains("2 UDP stream") || text.contains("1 UDP stream"),
        "{text}"
    );
    assert!(
        text.contains("Mb/s  jitter, ms      lost/    total   lost%    ooo"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("# datagrams: sender sent "))
        .unwrap_or_else(|| panic!("no datagrams line{}", run.explain()));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let (sent, got, lost) = (nums[0], nums[1], nums[2]);
    assert_eq!(sent, got + lost, "{line}");
}

/// A server may refuse UDP and cap -b: the client says which limit, exit 1.
#[test]
fn a_server_refuses_udp_and_rates_over_its_limit() {
    let server = Server::start(&["--no-udp", "--max-rate", "100M"]);
    let port = server.port_arg();
    for (args, words) in [
        (
            &["-u", "-b", "10M"][..],
            "-u: UDP tests are not allowed (this server's --no-udp)",
        ),
        (
            &["-b", "1G"][..],
            "-b 1G: more than 100M per stream (this server's --max-rate)",
        ),
        (&[][..], "-b: this server limits each stream to 100M"),
    ] {
        let mut argv = vec!["-c", "127.0.0.1", "-p", &port, "-t", "0.5"];
        argv.extend_from_slice(args);
        let run = pinperf(&argv, LIMIT);
        assert_eq!(run.code(), Some(1), "{}", run.explain());
        assert!(run.stderr().contains(words), "{args:?}: {}", run.explain());
    }
    // Within the limit it runs, paced.
    let run = pinperf(
        &["-c", "127.0.0.1", "-p", &port, "-t", "0.5", "-b", "50M"],
        LIMIT,
    );
    run.assert_ok();
}

/// `--max-window` binds the receive buffer a server picks for UDP without `-w` as it binds
/// a client's `-w` (the server asked for 256k and more whatever its limit).
#[test]
fn a_servers_max_window_caps_the_udp_buffer_it_picks() {
    let server = Server::start(&["--max-window", "64k"]);
    let port = server.port_arg();
    let run = pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "-b",
            "10M",
            "-t",
            "0.3",
            "-J",
        ],
        LIMIT,
    );
    let v = doc(&run);
    let got = num(&v["start"]["remote_window"], "rcvbuf");
    // Linux doubles the request and reports the double.
    assert!(
        got > 0 && got <= 2 * (64 << 10),
        "granted {got}{}",
        run.explain()
    );
}

/// CSV: the datagram columns on stream and sum rows, named as in JSON, empty for TCP.
#[test]
fn udp_csv_rows_carry_the_datagram_columns() {
    let run = pinperf(
        &["--loopback", "-u", "-b", "10M", "-t", "0.5", "--csv"],
        LIMIT,
    );
    run.assert_ok();
    let text = run.stdout();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let total = rows
        .iter()
        .find(|r| r[0] == "total_sum")
        .unwrap_or_else(|| panic!("no total_sum row{}", run.explain()));
    let sent: u64 = total[col("packets")].parse().unwrap();
    let lost: u64 = total[col("lost_packets")].parse().unwrap();
    assert!(sent > 0 && lost <= sent, "{total:?}");
    assert!(total[col("jitter_ms")].parse::<f64>().is_ok(), "{total:?}");
    assert_eq!(total[col("direction")], "client_to_server");
    // Every stream row of an interval has its counts.
    assert!(
        rows.iter()
            .filter(|r| r[0] == "stream")
            .all(|r| r[col("packets")].parse::<u64>().is_ok()),
        "{text}"
    );
}

/// A UDP client paused (SIGSTOP) for 1.1 s from its first row (0.5 s) of `-t 2`: the rows of the pause are
/// printed, holding nothing, the diagnosis says nothing moved (not that the sender's
/// host could not keep up), and it exits 0, under the stall limit. It printed the rows
/// up to the pause and blamed the sender's CPU.
#[test]
fn a_paused_udp_client_keeps_the_rows_of_its_pause() {
    let server = Server::start(&[]);
    let port = server.port_arg();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-u",
        "-b",
        "20M",
        "-t",
        "2",
        "-i",
        "0.5",
    ];
    let mut args = args.to_vec();
    args.push("--json-lines");
    let mut client = util::Spawned::start(&args);
    client.wait_for_line(
        "the first interval",
        |l| l.starts_with("{\"event\":\"interval\""),
        Duration::from_secs(5),
    );
    util::kill_with(client.id(), "-STOP");
    std::thread::sleep(Duration::from_millis(1100));
    util::kill_with(client.id(), "-CONT");
    let run = client.finish(LIMIT);
    run.assert_ok();
    let events: Vec<Value> = run
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let rows: Vec<u64> = events
        .iter()
        .filter(|e| e["event"] == "interval")
        .map(|e| num(&e["data"]["sum"], "bytes"))
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}{}", run.explain());
    assert!(rows[0] > 0 && rows[2] == 0, "{rows:?}{}", run.explain());
    let end = events.iter().find(|e| e["event"] == "end").expect("end");
    let said = end["data"]["diagnosis"].to_string();
    assert!(said.contains("no data moved from 1.0 s to "), "{said}");
    assert!(!said.contains("could not keep up"), "{said}");
}

/// `-u --fq-rate`, which iperf3 paces UDP with, is taken for UDP too, both directions, and
/// the datagram counts of both ends come back (its kernel pacing needs the fq qdisc; `-b`
/// paces anyway).
#[test]
fn udp_takes_the_kernel_pacing_rate_as_iperf3_does() {
    for way in [&[][..], &["-R"][..]] {
        let mut args = vec![
            "--loopback",
            "-u",
            "-b",
            "20M",
            "--fq-rate",
            "50M",
            "-t",
            "0.5",
        ];
        args.extend_from_slice(way);
        let run = pinperf(&args, LIMIT);
        run.assert_ok();
        assert!(
            run.stdout()
                .lines()
                .any(|l| l.starts_with("# datagrams: sender sent ")),
            "{way:?}{}",
            run.explain()
        );
    }
}

/// Each `stream-N` thread of `pid` with its scheduling policy (0 SCHED_OTHER, 1
/// SCHED_FIFO) and real-time priority.
fn stream_policies(pid: u32) -> Vec<(String, u32, u32)> {
    util::sched_policies(pid)
        .into_iter()
        .filter(|(name, _, _)| name.starts_with("stream-"))
        .collect()
}

/// `--realtime` against a server that grants it: while the test runs, the server's
/// receiving threads are SCHED_FIFO 1 and the client's sending ones ordinary; with `-R`
/// the roles swap. The header says whose, and JSON has it.
#[test]
fn realtime_runs_the_udp_receivers_at_fifo_priority_on_either_end() {
    if let Err(why) = util::may_fifo() {
        util::skipped(
            "realtime_runs_the_udp_receivers_at_fifo_priority_on_either_end",
            &why,
        );
        return;
    }
    let server = Server::start(&["--allow-realtime"]);
    let port = server.port_arg();
    for reverse in [false, true] {
        let mut args = vec![
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "-b",
            "20M",
            "-P",
            "2",
            "--realtime",
            "-t",
            "1",
            "-i",
            "0.25",
        ];
        if reverse {
            args.push("-R");
        }
        let mut client = util::Spawned::start(&args);
        client.wait_for_line("the first interval row", util::is_interval_row, LIMIT);
        let on_client = stream_policies(client.id());
        let on_server = stream_policies(server.child.id());
        let run = client.finish(LIMIT);
        run.assert_ok();
        let fifo = vec![
            ("stream-0".to_string(), 1, 1),
            ("stream-1".to_string(), 1, 1),
        ];
        let other = vec![
            ("stream-0".to_string(), 0, 0),
            ("stream-1".to_string(), 0, 0),
        ];
        let (receivers, senders) = match reverse {
            false => (&on_server, &on_client),
            true => (&on_client, &on_server),
        };
        assert_eq!(receivers, &fifo, "receivers, -R {reverse}{}", run.explain());
        assert_eq!(senders, &other, "senders, -R {reverse}{}", run.explain());
        let whose = if reverse {
            "this end's"
        } else {
            "the server's"
        };
        assert!(
            run.stdout().contains(&format!(
                "# priority: {whose} UDP receiving threads at SCHED_FIFO 1 (--realtime)"
            )),
            "{}",
            run.explain()
        );
    }
    let json = pinperf(
        &[
            "--loopback",
            "-u",
            "-b",
            "10M",
            "--realtime",
            "-t",
            "0.3",
            "-J",
        ],
        LIMIT,
    );
    assert_eq!(doc(&json)["start"]["realtime"], true, "{}", json.explain());
}

/// A cgroup (v1, real-time group scheduling) with no real-time budget: a thread in it is
/// refused SCHED_FIFO even as root. Removed on drop, once its tasks have left.
struct NoRtGroup(std::path::PathBuf);

impl NoRtGroup {
    fn make() -> Result<NoRtGroup, String> {
        let root = std::path::Path::new("/sys/fs/cgroup/cpu");
        if !root.join("cpu.rt_runtime_us").exists() {
            return Err("no cgroup v1 cpu controller with real-time group scheduling".into());
        }
        let dir = root.join(format!("pinperf-test-nort-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let group = NoRtGroup(dir);
        let budget = std::fs::read_to_string(group.0.join("cpu.rt_runtime_us"))
            .map_err(|e| format!("read cpu.rt_runtime_us: {e}"))?;
        match budget.trim() {
            "0" => Ok(group),
            other => Err(format!("a new cgroup's rt_runtime_us is {other}, not 0")),
        }
    }

    /// Moves process `pid`, every thread of it (and so the threads they spawn), into the
    /// group.
    fn take(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for NoRtGroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            match std::fs::remove_dir(&self.0) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!("left behind: cgroup {} (still has tasks)", self.0.display());
    }
}

/// A server whose receiving threads are all refused SCHED_FIFO after it granted
/// `--realtime` (moved into a cgroup without a real-time budget): its stream threads fail
/// before the test's start, and the client hears why, from the server, after `Start`
/// (not "expected start, got row"). The server serves the next test.
#[test]
fn receivers_refused_before_the_start_are_reported_by_the_server_in_order() {
    const TEST: &str = "receivers_refused_before_the_start_are_reported_by_the_server_in_order";
    if let Err(why) = util::may_fifo() {
        util::skipped(TEST, &why);
        return;
    }
    let group = match NoRtGroup::make() {
        Ok(g) => g,
        Err(why) => {
            util::skipped(
                TEST,
                &format!("{why}: needs root and cgroup v1 with real-time group scheduling"),
            );
            return;
        }
    };
    let mut server = Server::start(&["--allow-realtime"]);
    group.take(server.child.id());
    let port = server.port_arg();
    let base = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-u",
        "-b",
        "10M",
        "-t",
        "0.3",
    ];
    // Rows ahead of Start came in about one run of four: a dozen runs all must be in order.
    for _ in 0..12 {
        let refused = pinperf(&[&base[..], &["--realtime"]].concat(), LIMIT);
        assert_eq!(refused.code(), Some(1), "{}", refused.explain());
        let err = refused.stderr();
        assert!(
            err.contains(" reported: stream-0: --realtime: SCHED_FIFO refused"),
            "{}{}",
            refused.explain(),
            server.explain()
        );
    }
    pinperf(&base, LIMIT).assert_ok();
    drop(server);
    drop(group);
}

/// `--realtime` is refused by name where it cannot be had: over TCP, by a server that does
/// not grant it, and (as root) for a user who may not have SCHED_FIFO, before any test.
#[test]
fn realtime_is_refused_by_name_where_it_cannot_be_had() {
    let tcp = pinperf(&["--loopback", "--realtime", "-t", "0.2"], LIMIT);
    assert_eq!(tcp.code(), Some(2), "{}", tcp.explain());
    assert!(
        tcp.stderr().contains("--realtime applies to UDP (-u) only"),
        "{}",
        tcp.explain()
    );
    let server = Server::start(&[]);
    let port = server.port_arg();
    let run = pinperf(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "--realtime",
            "-t",
            "0.2",
        ],
        LIMIT,
    );
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(
        run.stderr()
            .contains("this server does not run receivers at real-time priority (start it with --allow-realtime)"),
        "{}",
        run.explain()
    );
    if !util::is_root() {
        util::skipped(
            "realtime_is_refused_by_name_where_it_cannot_be_had (as nobody)",
            "needs root to run as another user; CI runs it as root",
        );
        return;
    }
    let nobody = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            util::bin(),
        ])
        .args(["--loopback", "-u", "--realtime", "-t", "0.2"])
        .output();
    match nobody {
        Ok(out) if out.status.success() => util::skipped(
            "realtime_is_refused_by_name_where_it_cannot_be_had (as nobody)",
            "user nobody may have SCHED_FIFO here (RLIMIT_RTPRIO above 0)",
        ),
        Ok(out) if out.status.code() == Some(2) => {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("--realtime: SCHED_FIFO refused")
                    && err.contains("run as root or with CAP_SYS_NICE"),
                "{err}"
            );
            assert!(out.stdout.is_empty(), "nothing runs: {out:?}");
        }
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("Permission denied") => {
            util::skipped(
                "realtime_is_refused_by_name_where_it_cannot_be_had (as nobody)",
                "user nobody cannot reach the test binary here",
            );
        }
        Ok(out) => panic!("as nobody: {out:?}"),
        Err(e) => util::skipped(
            "realtime_is_refused_by_name_where_it_cannot_be_had (as nobody)",
            &format!("setpriv: {e}"),
        ),
    }
}
