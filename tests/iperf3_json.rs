//! `--format iperf3-json` against the real iperf3 (Debian's 3.12 in CI): for one run shape
//! at a time, `iperf3 -c … -J` against an `iperf3 -s` and pinperf with the same options,
//! side by side, then every key path iperf3's document has under `start`, `intervals` and
//! `end` (array elements collapsed: `intervals[].streams[].bytes`) must be in pinperf's
//! with the same JSON type, and pinperf may write no key iperf3 does not (beyond the keys
//! newer iperf3 versions write, and its own `"pinperf"`). Each test skips, saying so, when
//! no `iperf3` is on PATH.
//!
//! pinperf runs as `--loopback` (its own server in the process): that is the path with
//! every direction and UDP, so each shape iperf3 has is compared with the real thing. One
//! more test runs pinperf's client against the iperf3 server, the other way its report
//! gets made.

mod util;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use util::iperf3::{Iperf3Server, LIMIT, iperf3, iperf3_client};
use util::pinperf;

/// Members iperf3 writes as C doubles. cJSON prints a whole double without a decimal
/// point (`"start": 0`, `"lost_percent": 0`), so in iperf3's own document these are
/// sometimes integers; pinperf writes them as floats every time, which every reader of
/// iperf3's documents takes. (From `iperf_api.c`: the `%f` members of its JSON.)
const DOUBLES: &[&str] = &[
    "start",
    "end",
    "seconds",
    "bits_per_second",
    "jitter_ms",
    "lost_percent",
    "host_total",
    "host_user",
    "host_system",
    "remote_total",
    "remote_user",
    "remote_system",
    "interval",
];

/// Keys an iperf3 document may have that pinperf does not write, and why: each is tied to
/// a measurement or setting of newer iperf3 versions that pinperf's report does not have.
/// (Debian's 3.12 writes none of them.)
const NOT_WRITTEN: &[(&str, &str)] = &[
    // iperf3 >= 3.20 reads tcpi_reordering; pinperf's TCP_INFO sample does not keep it.
    (
        ".intervals[].streams[].reorder",
        "tcpi_reordering, not sampled",
    ),
    (
        ".end.streams[].sender.reorder",
        "tcpi_reordering, not sampled",
    ),
    // iperf3 >= 3.21's UDP GSO/GRO switches; pinperf uses them where the kernel has them
    // and its report does not say.
    (".start.test_start.gso", "iperf3's own GSO switch"),
    (".start.test_start.gro", "iperf3's own GRO switch"),
];

/// Keys pinperf writes that iperf3 3.12 does not, all of them in newer iperf3 documents:
/// `fq_rate` and `test_start.{bidir,fqrate,interval}` since 3.13, `timemillisecs` since
/// 3.20.
const NEWER_IPERF3: &[&str] = &[
    ".start.fq_rate",
    ".start.test_start.bidir",
    ".start.test_start.fqrate",
    ".start.test_start.interval",
    ".start.timestamp.timemillisecs",
];

/// A JSON value's type, integers apart from floats.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

/// Every key path under the document's `start`, `intervals` and `end` and the types seen
/// at it (`.intervals[].sum.bytes`).
fn key_types(doc: &Value) -> BTreeMap<String, BTreeSet<&'static str>> {
    fn walk(v: &Value, path: String, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
        out.entry(path.clone()).or_default().insert(kind(v));
        match v {
            Value::Object(m) => m
                .iter()
                .for_each(|(k, x)| walk(x, format!("{path}.{k}"), out)),
            Value::Array(a) => a.iter().for_each(|x| walk(x, format!("{path}[]"), out)),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for top in ["start", "intervals", "end"] {
        if let Some(v) = doc.get(top) {
            walk(v, format!(".{top}"), &mut out);
        }
    }
    out
}

/// What is wrong with pinperf's document against iperf3's, one line each (empty: as
/// iperf3's).
fn differences(iperf3: &Value, ours: &Value) -> Vec<String> {
    let (want, have) = (key_types(iperf3), key_types(ours));
    let mut wrong = Vec::new();
    for (path, theirs) in &want {
        if NOT_WRITTEN.iter().any(|(p, _)| p == path) {
            continue;
        }
        let Some(mine) = have.get(path) else {
            wrong.push(format!("{path}: missing (iperf3: {theirs:?})"));
            continue;
        };
        let leaf = path.rsplit('.').next().unwrap_or("");
        let number = theirs.iter().all(|k| *k == "integer" || *k == "float");
        let ok = match DOUBLES.contains(&leaf) && number {
            true => mine.iter().all(|k| *k == "float"),
            false => mine == theirs,
        };
        if !ok {
            wrong.push(format!("{path}: pinperf {mine:?}, iperf3 {theirs:?}"));
        }
    }
    for path in have.keys() {
        if !want.contains_key(path) && !NEWER_IPERF3.contains(&path.as_str()) {
            wrong.push(format!("{path}: pinperf writes it, iperf3 does not"));
        }
    }
    wrong
}

fn parse(what: &str, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} wrote no JSON ({e}):\n{text}"))
}

/// `iperf3 -c 127.0.0.1 -J args` against a fresh `iperf3 -s`.
fn iperf3_document(args: &[&str]) -> Value {
    let server = Iperf3Server::start(&[]);
    let mut all = vec!["-J"];
    all.extend_from_slice(args);
    let (code, out, err, _) = iperf3_client(server.port, &all);
    assert_eq!(code, Some(0), "iperf3 -c {all:?} failed:\n{out}{err}");
    let doc = parse("iperf3 -c", &out);
    assert!(doc.get("error").is_none(), "iperf3 -c failed: {doc}");
    doc
}

/// pinperf with `args` and `--format iperf3-json`: exit 0, its document.
fn pinperf_document(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "iperf3-json"]);
    let run = pinperf(&all, LIMIT);
    run.assert_ok();
    let doc = parse("pinperf", &run.stdout());
    assert!(doc.get("error").is_none(), "{}", run.explain());
    doc
}

/// Runs `args` through iperf3 and through pinperf (`--loopback`, or `pinperf_args` when
/// given) at the same time (the shapes are compared, not the rates), and asserts that
/// pinperf's document has iperf3's keys and types. Returns pinperf's document.
fn same_shape(test: &str, args: &[&str], pinperf_args: Option<Vec<String>>) -> Option<Value> {
    iperf3(test)?;
    let theirs_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let theirs = std::thread::spawn(move || {
        let args: Vec<&str> = theirs_args.iter().map(String::as_str).collect();
        iperf3_document(&args)
    });
    let mut ours_args: Vec<String> = pinperf_args.unwrap_or_else(|| vec!["--loopback".to_string()]);
    ours_args.extend(args.iter().map(|a| a.to_string()));
    let ours = pinperf_document(&ours_args.iter().map(String::as_str).collect::<Vec<_>>());
    let theirs = theirs.join().expect("the iperf3 run");
    let wrong = differences(&theirs, &ours);
    assert!(
        wrong.is_empty(),
        "pinperf's document differs from iperf3's ({} paths):\n{}\n--- iperf3 ---\n{theirs:#}\n--- pinperf ---\n{ours:#}",
        wrong.len(),
        wrong.join("\n")
    );
    // The iperf3 members carry pinperf's own figures, which are under "pinperf" too:
    // the totals (the client's direction's with --bidir), and one interval per index.
    let own = &ours["pinperf"];
    for side in ["sum_sent", "sum_received"] {
        assert_eq!(
            ours["end"][side]["bytes"], own["end"][side]["bytes"],
            "{side}"
        );
    }
    let indices: BTreeSet<String> = own["intervals"]
        .as_array()
        .map(|iv| iv.iter().map(|i| i["index"].to_string()).collect())
        .unwrap_or_default();
    assert_eq!(
        ours["intervals"].as_array().map(Vec::len),
        Some(indices.len())
    );
    Some(ours)
}

#[test]
fn tcp_has_iperf3_s_keys_and_types() {
    let Some(doc) = same_shape(
        "tcp_has_iperf3_s_keys_and_types",
        &["-P", "2", "-t", "1", "-i", "0.5"],
        None,
    ) else {
        return;
    };
    assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["intervals"][0]["streams"][0]["sender"], true);
}

#[test]
fn reverse_has_iperf3_s_keys_and_types() {
    let Some(doc) = same_shape(
        "reverse_has_iperf3_s_keys_and_types",
        &["-P", "2", "-t", "1", "-i", "0.5", "-R"],
        None,
    ) else {
        return;
    };
    assert_eq!(doc["start"]["test_start"]["reverse"], 1);
    assert_eq!(doc["end"]["sum_received"]["sender"], false);
}

#[test]
fn bidir_has_iperf3_s_keys_and_types() {
    let Some(doc) = same_shape(
        "bidir_has_iperf3_s_keys_and_types",
        &["-P", "2", "-t", "1", "-i", "0.5", "--bidir"],
        None,
    ) else {
        return;
    };
    assert!(
        doc["end"]["sum_sent_bidir_reverse"]["bytes"].is_u64(),
        "{doc}"
    );
    assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(4));
}

#[test]
fn udp_has_iperf3_s_keys_and_types() {
    let Some(doc) = same_shape(
        "udp_has_iperf3_s_keys_and_types",
        &["-u", "-b", "100M", "-P", "2", "-t", "1", "-i", "0.5"],
        None,
    ) else {
        return;
    };
    assert_eq!(doc["start"]["test_start"]["protocol"], "UDP");
    assert_eq!(doc["start"]["test_start"]["target_bitrate"], 100_000_000);
    assert!(doc["end"]["sum"]["lost_packets"].is_u64(), "{doc}");
}

#[test]
fn udp_reverse_has_iperf3_s_keys_and_types() {
    same_shape(
        "udp_reverse_has_iperf3_s_keys_and_types",
        &["-u", "-b", "100M", "-P", "2", "-t", "1", "-i", "0.5", "-R"],
        None,
    );
}

/// pinperf's client against `iperf3 -s` makes its report from the iperf3 end's results:
/// the same shape comes out.
#[test]
fn client_against_an_iperf3_server_has_iperf3_s_keys_and_types() {
    let test = "client_against_an_iperf3_server_has_iperf3_s_keys_and_types";
    if iperf3(test).is_none() {
        return;
    }
    let server = Iperf3Server::start(&[]);
    let port = server.port.to_string();
    let target = ["-c", "127.0.0.1", "-p", &port, "--peer", "iperf3"];
    let doc = same_shape(
        test,
        &["-P", "2", "-t", "1", "-i", "0.5"],
        Some(target.iter().map(|a| a.to_string()).collect()),
    );
    // What the iperf3 server received is what pinperf's document says it received.
    let received = server.document()["end"]["sum_received"]["bytes"].clone();
    assert_eq!(
        doc.map(|d| d["end"]["sum_received"]["bytes"].clone()),
        Some(received)
    );
}

/// The comparison itself can fail: a key missing, a float written as an integer, an
/// integer as a float, a key iperf3 does not have.
#[test]
fn the_comparison_finds_a_missing_key_and_a_wrong_type() {
    let iperf3 = serde_json::json!({
        "start": {"test_start": {"duration": 1}},
        "intervals": [{"sum": {"start": 0, "bytes": 10, "omitted": false}},
                      {"sum": {"start": 0.5, "bytes": 12, "omitted": false}}],
        "end": {"sum_sent": {"seconds": 1, "retransmits": 0}}
    });
    let good = serde_json::json!({
        "start": {"test_start": {"duration": 1}},
        "intervals": [{"sum": {"start": 0.0, "bytes": 10, "omitted": false}}],
        "end": {"sum_sent": {"seconds": 1.0, "retransmits": 0}},
        "pinperf": {"anything": 1}
    });
    assert_eq!(differences(&iperf3, &good), Vec::<String>::new());
    let broken = |pointer: &str, with: Option<Value>| {
        let mut doc = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let map = doc.pointer_mut(parent).unwrap().as_object_mut().unwrap();
        match with {
            Some(v) => map.insert(key.to_string(), v),
            None => map.remove(key),
        };
        differences(&iperf3, &doc)
    };
    assert_eq!(
        broken("/end/sum_sent/retransmits", None),
        [".end.sum_sent.retransmits: missing (iperf3: {\"integer\"})"]
    );
    assert_eq!(
        broken("/intervals/0/sum/bytes", Some(serde_json::json!(10.0))),
        [".intervals[].sum.bytes: pinperf {\"float\"}, iperf3 {\"integer\"}"]
    );
    assert_eq!(
        broken("/end/sum_sent/seconds", Some(serde_json::json!(1))),
        [".end.sum_sent.seconds: pinperf {\"integer\"}, iperf3 {\"integer\"}"]
    );
    assert_eq!(
        broken("/intervals/0/sum/omitted", Some(serde_json::json!(0))),
        [".intervals[].sum.omitted: pinperf {\"integer\"}, iperf3 {\"bool\"}"]
    );
    assert_eq!(
        broken("/end/sum_sent/jitter", Some(serde_json::json!(0.0))),
        [".end.sum_sent.jitter: pinperf writes it, iperf3 does not"]
    );
}

/// `iperf3 -c args` against `iperf3 -s -1 -J` and against `pinperf -s -1 --format
/// iperf3-json` at the same time: the two servers' documents.
fn server_documents(args: &[&str]) -> (Value, Value) {
    let theirs = Iperf3Server::start(&[]);
    let mut ours = util::Server::start(&["-1", "--format", "iperf3-json"]);
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let port = theirs.port;
    let iperf3_run = std::thread::spawn(move || {
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        iperf3_client(port, &args)
    });
    let (code, out, err, _) = iperf3_client(ours.port, args);
    assert_eq!(
        code,
        Some(0),
        "iperf3 -c {args:?} against pinperf:\n{out}{err}{}",
        ours.explain()
    );
    let (code, out, err, _) = iperf3_run.join().expect("the iperf3 run");
    assert_eq!(
        code,
        Some(0),
        "iperf3 -c {args:?} against iperf3:\n{out}{err}"
    );
    let status = ours.child.wait().expect("pinperf -s -1 ends");
    assert!(status.success(), "{}", ours.explain());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut ours.child.stdout.take().expect("stdout"), &mut text)
        .expect("pinperf -s's stdout");
    (theirs.document(), parse("pinperf -s", &text))
}

/// The servers' documents have the same keys and types; pinperf's names the client's
/// connection and cookie as iperf3's does, and its `end` holds both ends' figures.
fn same_server_shape(test: &str, args: &[&str]) -> Option<Value> {
    iperf3(test)?;
    let (theirs, ours) = server_documents(args);
    let wrong = differences(&theirs, &ours);
    assert!(
        wrong.is_empty(),
        "pinperf -s's document differs from iperf3 -s's ({} paths):\n{}\n--- iperf3 ---\n{theirs:#}\n--- pinperf ---\n{ours:#}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(ours["start"]["accepted_connection"]["host"], "127.0.0.1");
    assert_eq!(
        ours["start"]["cookie"].as_str().map(str::len),
        Some(36),
        "{ours:#}"
    );
    Some(ours)
}

#[test]
fn a_server_document_has_iperf3_s_keys_and_both_ends_bytes() {
    let Some(doc) = same_server_shape(
        "a_server_document_has_iperf3_s_keys_and_both_ends_bytes",
        &["-P", "2", "-t", "1", "-i", "0.5"],
    ) else {
        return;
    };
    // This server received: its rows say so (one a second: an iperf3 client does not
    // send its -i, and a server reports on its own), and what it read is at least what
    // the client said it wrote (the client's count is taken at its TEST_END).
    assert_eq!(doc["intervals"][0]["streams"][1]["sender"], false);
    assert_eq!(doc["intervals"].as_array().map(Vec::len), Some(1));
    let (sent, received) = (
        doc["end"]["sum_sent"]["bytes"].as_u64().unwrap(),
        doc["end"]["sum_received"]["bytes"].as_u64().unwrap(),
    );
    assert!(sent > 0 && received >= sent, "{doc:#}");
    let rows: u64 = (doc["intervals"].as_array().unwrap().iter())
        .map(|iv| iv["sum"]["bytes"].as_u64().unwrap())
        .sum();
    assert!(
        rows <= received && rows * 10 >= received * 9,
        "rows {rows}, end {received}"
    );
}

#[test]
fn a_reverse_server_document_has_its_senders_tcp_info() {
    let Some(doc) = same_server_shape(
        "a_reverse_server_document_has_its_senders_tcp_info",
        &["-t", "1", "-i", "0.5", "-R"],
    ) else {
        return;
    };
    let row = &doc["intervals"][0]["streams"][0];
    assert_eq!(row["sender"], true);
    assert!(row["snd_cwnd"].as_u64() > Some(0), "{row}");
    assert!(doc["end"]["streams"][0]["sender"]["max_snd_cwnd"].as_u64() > Some(0));
    assert!(
        doc["end"]["sum_received"]["bytes"].as_u64() > Some(0),
        "the client's count"
    );
}

#[test]
fn a_udp_server_document_has_iperf3_s_keys_and_its_loss() {
    for extra in [&[][..], &["-R"][..]] {
        let mut args = vec!["-u", "-b", "50M", "-t", "1", "-i", "0.5"];
        args.extend_from_slice(extra);
        let Some(doc) = same_server_shape(
            "a_udp_server_document_has_iperf3_s_keys_and_its_loss",
            &args,
        ) else {
            return;
        };
        // The receiver's datagram count (this end's, or the client's under -R) is in `sum`.
        let sum = &doc["end"]["sum"];
        assert!(sum["packets"].as_u64() > Some(100), "{args:?}: {doc:#}");
        assert!(sum["lost_packets"].is_u64(), "{args:?}: {sum}");
    }
}

#[test]
fn a_failed_test_s_server_document_says_why() {
    let test = "a_failed_test_s_server_document_says_why";
    if iperf3(test).is_none() {
        return;
    }
    let mut ours = util::Server::start(&["-1", "--format", "iperf3-json"]);
    let mut client = std::process::Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &ours.port_arg(), "-t", "5"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 -c");
    // Killed once its test runs (the log's opening line), a little into the first interval.
    ours.wait_for_log("iperf3 test from", std::time::Duration::from_secs(10));
    std::thread::sleep(std::time::Duration::from_millis(300));
    client.kill().expect("SIGKILL the iperf3 client");
    let _ = client.wait();
    let _ = ours.child.wait();
    let text = ours.stdout_at_exit();
    let doc = parse("pinperf -s", &text);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("closed the control connection"), "{doc:#}");
    assert_eq!(doc["start"]["test_start"]["duration"], 5);
    assert!(
        doc["intervals"].as_array().is_some_and(|iv| !iv.is_empty()),
        "{doc:#}"
    );
}

/// A test refused at its parameters still gets its document: the connection, the cookie,
/// no rows and the error, as iperf3's server writes it.
#[test]
fn a_refused_test_s_server_document_says_why() {
    let test = "a_refused_test_s_server_document_says_why";
    if iperf3(test).is_none() {
        return;
    }
    let mut ours = util::Server::start(&["-1", "--format", "iperf3-json", "--max-streams", "2"]);
    let (code, _, _, _) = iperf3_client(ours.port, &["-P", "4", "-t", "1"]);
    assert_ne!(code, Some(0), "a refused test fails its client");
    // The document is written before the refusal is logged.
    ours.wait_for_log("refused", std::time::Duration::from_secs(10));
    let text = ours.stdout_at_exit();
    let doc = parse("pinperf -s", &text);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("error - ") && error.contains("-P 4"),
        "{doc:#}"
    );
    assert!(
        doc["start"]["cookie"]
            .as_str()
            .is_some_and(|c| c.len() == 36),
        "{doc:#}"
    );
    assert_eq!(doc["intervals"], serde_json::json!([]), "{doc:#}");
}
