//! `pinperf lab` end to end: real namespaces, TUN devices and relay threads. Root only;
//! elsewhere each test says it skipped. The tests share the two cores, so they run one at
//! a time (a lab's throughput is what one of them checks).

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use util::{bin, pinperf};

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn root() -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().nth(1).map(String::from))
        })
        .flatten();
    let ok = uid.as_deref() == Some("0")
        && std::path::Path::new("/dev/net/tun").exists()
        && Command::new("ip")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "SKIPPED: pinperf lab tests need root, /dev/net/tun and iproute2 (CI runs them as root)"
        );
        return false;
    }
    if let Err(why) = can_make_a_lab() {
        eprintln!("SKIPPED: root, but this sandbox cannot make a lab: {why}");
        return false;
    }
    true
}

/// Root is not always enough (a container without CAP_SYS_ADMIN or TUN access): try a
/// namespace with a TUN device in it, and remove it again. Once per test process.
fn can_make_a_lab() -> Result<(), String> {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_lab).clone()
}

fn probe_lab() -> Result<(), String> {
    let ns = format!("pinperf-probe-{}", std::process::id());
    let ip = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    ip(&["netns", "add", &ns])?;
    let tun = ip(&["-n", &ns, "tuntap", "add", "dev", "probe0", "mode", "tun"]);
    ip(&["netns", "delete", &ns])?;
    tun
}

/// Every lab namespace present (any pid), or none when `ip` is missing.
fn lab_namespaces() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("pinperf-lab-"))
        .map(String::from)
        .collect()
}

/// Namespaces of the lab run by `pid` still present.
fn leftovers(pid: u32) -> Vec<String> {
    let prefix = format!("pinperf-lab-{pid}-");
    lab_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// Nothing of the lab run by `pid` is left: no namespace, no device here.
fn assert_torn_down(pid: u32) {
    assert!(
        leftovers(pid).is_empty(),
        "left behind: {:?}",
        leftovers(pid)
    );
    assert!(no_device_in_this_namespace());
}

fn no_device_in_this_namespace() -> bool {
    !Command::new("ip")
        .args(["link", "show", "dev", "plab0"])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn lab_pid(stderr: &str) -> u32 {
    // "# lab: 198.18.0.2 (netns pinperf-lab-<pid>-client) -> ..."
    let at = stderr
        .find("pinperf-lab-")
        .expect("lab header names its namespaces");
    stderr[at + 12..]
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_20ms_200mbit_path_has_its_rtt_and_rate_and_leaves_nothing_behind() {
    if !root() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock();
    let run = pinperf(
        &[
            "lab", "--rtt", "20ms", "--rate", "200M", "--", "-t", "2", "-w", "1M", "-C", "cubic",
            "-J",
        ],
        Duration::from_secs(20),
    );
    run.assert_ok();
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout()).expect("-J stays one document");
    let stream = &doc["end"]["streams"][0];
    let min_rtt_ms = stream["min_rtt"].as_f64().unwrap() / 1e3;
    assert!(
        (18.0..=22.0).contains(&min_rtt_ms),
        "kernel min_rtt {min_rtt_ms} ms, path 20 ms\n{}",
        run.explain()
    );
    let mbps = doc["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap()
        / 1e6;
    assert!(
        (160.0..=210.0).contains(&mbps),
        "one stream got {mbps:.1} Mb/s of a 200 Mbit/s bottleneck\n{}",
        run.explain()
    );
    let kernel = &doc["end"]["kernel"];
    assert_eq!(
        kernel["shared_namespace"], false,
        "two namespaces: {kernel}"
    );
    assert_ne!(
        kernel["sender"]["netns"], kernel["receiver"]["netns"],
        "{kernel}"
    );
    let err = run.stderr();
    assert!(err.contains("# lab relay forward"), "relay line: {err}");
    assert!(err.contains("queue drops"), "drop count: {err}");
    let pid = lab_pid(&err);
    assert_torn_down(pid);
}

#[test]
fn ctrl_c_mid_test_tears_the_lab_down() {
    if !root() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock();
    let mut child = Command::new(bin())
        .args(["lab", "--rtt", "10ms", "--rate", "100M", "--", "-t", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    // The first row means the test is running over the lab.
    let start = Instant::now();
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 && start.elapsed() < Duration::from_secs(10) {
        if line.starts_with("# lab:") {
            header = line.clone();
        }
        if line.starts_with("( 0)") {
            break;
        }
        line.clear();
    }
    let pid = lab_pid(&header);
    assert_eq!(leftovers(pid).len(), 2, "the lab runs in two namespaces");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "128 + SIGINT; stderr: {err}");
    assert!(err.contains("removed netns"), "{err}");
    assert_torn_down(pid);
}

#[test]
fn a_failing_client_still_tears_the_lab_down() {
    if !root() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock();
    // No host here has a CPU 999: the server refuses the plan after the lab is set up.
    let run = pinperf(
        &["lab", "--rtt", "2ms", "--", "-t", "1", "-A", "0/999"],
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), Some(1), "{}", run.explain());
    assert!(run.stderr().contains("refused"), "{}", run.explain());
    // The lab header (stdout, text format) names the namespaces it made.
    assert_torn_down(lab_pid(&run.stdout()));
}

#[test]
fn lab_usage_errors_name_the_flag_and_create_nothing() {
    // Usage is checked before the root check, so this runs everywhere.
    let _one = ONE_LAB_AT_A_TIME.lock();
    let before = lab_namespaces();
    for (args, needle) in [
        (&["lab", "--queue", "1k"][..], "--queue"),
        (&["lab", "--rate", "10k"][..], "--rate"),
        (&["lab", "--loss", "200%"][..], "--loss"),
        (&["lab", "--", "-c", "192.0.2.1"][..], "leave -s, -c"),
        (
            &["lab", "--", "-P", "zero"][..],
            "client options after `--`",
        ),
        (&["lab", "--", "-C", "nosuchcc"][..], "nosuchcc"),
    ] {
        let run = pinperf(args, Duration::from_secs(5));
        assert_eq!(run.code(), Some(2), "{args:?}: {}", run.explain());
        assert!(run.stderr().contains(needle), "{args:?}: {}", run.explain());
    }
    let after = lab_namespaces();
    assert_eq!(before, after, "usage errors must not create namespaces");
}

#[test]
fn without_root_the_lab_says_so() {
    // Run as nobody via setpriv (util-linux) when we are root; as ourselves otherwise.
    let is_root = root();
    let have_setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if is_root && !have_setpriv {
        eprintln!("SKIPPED: no setpriv to drop root");
        return;
    }
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            bin(),
        ]);
        c
    } else {
        Command::new(bin())
    };
    let out = cmd.args(["lab", "--", "-t", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("run it as root"), "{err}");
}
