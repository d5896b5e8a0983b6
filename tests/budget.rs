//! `-n`/`-k` (the test ends once the senders have sent a byte or block count) and
//! `-b RATE/BURST`, natively and with iperf3 at either end: each run ends at its budget,
//! well before `-t`'s default, with whole blocks sent and both ends' bytes reconciled
//! (pinperf's client fails the run when they are not).

mod util;

use std::time::Duration;

use serde_json::Value;
use util::iperf3::{Iperf3Server, LIMIT, iperf3, iperf3_client};
use util::{Server, pinperf};

const MIB: u64 = 1 << 20;

/// `pinperf -c` against `server` with `args` and `-J`: its document.
fn json_run(server: &Server, args: &[&str]) -> Value {
    let port = server.port_arg();
    let mut all = vec!["-c", "127.0.0.1", "-p", &port, "-J"];
    all.extend_from_slice(args);
    let run = pinperf(&all, LIMIT);
    run.assert_ok();
    serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}: {}", run.explain()))
}

fn end(doc: &Value, sum: &str, key: &str) -> f64 {
    doc["end"][sum][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no end.{sum}.{key} in {}", doc["end"]))
}

/// The last interval's end, seconds.
fn last_end(doc: &Value) -> f64 {
    let rows = doc["intervals"].as_array().expect("intervals");
    rows.last().expect("a row")["sum"]["end"].as_f64().unwrap()
}

/// `-n 10M`: ten 1M blocks in all, then the end: the totals span the run (not -t's 10 s),
/// as the last row does.
#[test]
fn bytes_end_the_test_at_the_budget() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-n", "10M", "-l", "1M", "-P", "2"]);
    assert_eq!(end(&doc, "sum_sent", "bytes") as u64, 10 * MIB);
    assert_eq!(end(&doc, "sum_received", "bytes") as u64, 10 * MIB);
    let secs = end(&doc, "sum", "seconds");
    assert!(secs < 5.0, "{secs} s for 10M on loopback");
    assert!(
        (secs - last_end(&doc)).abs() < 1e-3,
        "{secs} vs {}",
        last_end(&doc)
    );
}

/// A budget that ends inside a block sends that block whole: at most one block over,
/// for all the streams together.
#[test]
fn a_budget_is_spent_in_whole_blocks() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-n", "1000k", "-l", "64k", "-P", "3", "-R"]);
    let sent = end(&doc, "sum_sent", "bytes") as u64;
    assert_eq!(sent, 1024 * 1000_u64.div_ceil(64) * 64, "16 blocks of 64k");
    assert_eq!(end(&doc, "sum_received", "bytes") as u64, sent);
}

/// `-k`: blocks, with `--bidir` each direction its own.
#[test]
fn blocks_end_each_direction_at_its_count() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-k", "40", "-l", "128k", "--bidir"]);
    let want = 40 * (128 << 10);
    for part in ["end", "end_reverse"] {
        for sum in ["sum_sent", "sum_received"] {
            let bytes = doc[part][sum]["bytes"].as_u64();
            assert_eq!(bytes, Some(want), "{part}.{sum}");
        }
    }
    assert!(end(&doc, "sum", "seconds") < 5.0);
}

/// UDP: whole datagrams, and the receiver stops once they all arrived.
#[test]
fn udp_ends_at_its_datagram_count() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-u", "-b", "100M", "-l", "1400", "-k", "1000"]);
    assert_eq!(end(&doc, "sum", "packets") as u64, 1000);
    assert_eq!(end(&doc, "sum_sent", "bytes") as u64, 1_400_000);
    assert!(end(&doc, "sum", "seconds") < 2.0);
}

/// A count that takes longer than the receiver's idle second to arrive is read to its
/// end: the receiver's stop moves on with every datagram.
#[test]
fn a_slow_udp_count_is_read_to_its_last_datagram() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-u", "-b", "10M", "-l", "1000", "-n", "1500k"]);
    let sent = end(&doc, "sum_sent", "bytes") as u64;
    assert_eq!(sent, 1_536_000, "1536 datagrams of 1000 bytes");
    assert_eq!(
        end(&doc, "sum_received", "bytes") as u64,
        sent,
        "{}",
        doc["end"]
    );
    assert!(end(&doc, "sum", "seconds") > 1.1, "{}", doc["end"]);
}

/// `-b RATE/BURST`: bursts back to back, the rate kept on average (TCP and UDP).
#[test]
fn bursts_keep_the_rate_on_average() {
    let server = Server::start(&[]);
    for args in [
        &["-u", "-b", "40M/20", "-l", "1400", "-t", "1"][..],
        &["-b", "200M/4", "-l", "64k", "-t", "1"],
    ] {
        let doc = json_run(&server, args);
        let bps = end(&doc, "sum_sent", "bits_per_second");
        let want = if args[0] == "-u" { 40e6 } else { 200e6 };
        assert!(
            bps <= want * 1.05 && bps >= want * 0.8,
            "{args:?}: {bps} bit/s"
        );
    }
}

/// Refusals in words: two end conditions, an empty budget, a burst past iperf3's.
#[test]
fn end_conditions_are_checked_by_flag() {
    for (args, words) in [
        (&["-n", "1M", "-t", "3"][..], "cannot be used with"),
        (&["-k", "0"], "-k 0: send at least 1 block"),
        (&["-b", "10M/1001"], "a burst must be 1 to 1000 blocks"),
        (&["-n", "1M", "-O", "1"], "-O 1 with -n/-k"),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "-p", "1"];
        all.extend_from_slice(args);
        let run = pinperf(&all, LIMIT);
        assert_eq!(run.code(), Some(2), "{}", run.explain());
        assert!(run.stderr().contains(words), "{}", run.explain());
    }
}

/// The iperf3 personality's `-n 5M` against the real iperf3 server, both ways: it ends
/// at the budget with the server's count of it.
#[test]
fn the_personality_sends_a_byte_count_to_iperf3() {
    let Some(_) = iperf3("the_personality_sends_a_byte_count_to_iperf3") else {
        return;
    };
    for reverse in [false, true] {
        let server = Iperf3Server::start(&[]);
        let port = server.port.to_string();
        let mut args = vec!["iperf3", "-c", "127.0.0.1", "-p", &port, "-n", "5M", "-J"];
        if reverse {
            args.push("-R");
        }
        let run = pinperf(&args, LIMIT);
        run.assert_ok();
        let doc: Value = serde_json::from_str(&run.stdout()).expect("json");
        let theirs = server.document();
        let side = if reverse { "sum_sent" } else { "sum_received" };
        let moved = theirs["end"][side]["bytes"].as_u64().unwrap();
        assert!(
            moved >= 5 * MIB,
            "-R {reverse}: the server's {side} {moved}"
        );
        assert!(
            end(&doc, "sum_received", "bytes") as u64 >= 5 * MIB,
            "-R {reverse}"
        );
        assert!(end(&doc, "sum_received", "seconds") < 5.0, "-R {reverse}");
    }
}

/// The real iperf3 client's `-n 5M` (and `-R`) against `pinperf -s`.
#[test]
fn iperf3_clients_byte_counts_are_honoured() {
    if iperf3("iperf3_clients_byte_counts_are_honoured").is_none() {
        return;
    }
    let server = Server::start(&[]);
    for extra in [&[][..], &["-R"]] {
        let mut args = vec!["-n", "5M", "-J"];
        args.extend_from_slice(extra);
        let (code, out, err, took) = iperf3_client(server.port, &args);
        assert_eq!(code, Some(0), "{extra:?}: {err}\n{out}\n{}", server.log());
        let doc: Value = serde_json::from_str(&out).expect("json");
        let sent = doc["end"]["sum_sent"]["bytes"].as_u64().unwrap();
        let got = doc["end"]["sum_received"]["bytes"].as_u64().unwrap();
        assert!(sent >= 5 * MIB, "{extra:?}: {sent}");
        assert_eq!(got, sent, "{extra:?}");
        assert!(took < Duration::from_secs(5), "{extra:?}: {took:?}");
    }
}
