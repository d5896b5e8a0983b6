//! The module graph has no cycles and every edge points down the fixed order of
//! [`LAYERS`]: lists every `crate::` edge between the modules of `src/` (test modules and
//! `tests.rs` files excluded: they may reach across layers) and fails naming the cycle or
//! the upward edge. Run `cargo test --test layers -- --nocapture` to print the edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Directories of `src/` whose modules are layers of their own, each counted apart:
/// `src/os/net.rs` is `os_net` (the parser's spelling of `os::net`), `src/data/stream/`
/// `data_stream`; the directory's own `mod.rs` is the directory's name (`server`).
const GROUPS: &[&str] = &[
    "os", "data", "server", "commands", "wire", "report", "client", "cli", "iperf3",
];

/// The submodules of `group` (its files and directories but `mod.rs`).
fn submodules(group: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(group);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read a group's directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .map(|n| n.trim_end_matches(".rs").to_string())
        .filter(|n| n != "mod")
        .collect();
    names.sort();
    names
}

/// Module a source file belongs to: `src/report/text.rs` -> `report`, `src/os/sys.rs` ->
/// `os_sys`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts = rel
        .components()
        .map(|c| c.as_os_str().to_str().unwrap_or(""));
    let first = parts.next()?.trim_end_matches(".rs");
    if GROUPS.contains(&first) {
        let second = parts.next()?.trim_end_matches(".rs");
        return Some(match second {
            "mod" => first.to_string(),
            _ => format!("{first}_{second}"),
        });
    }
    (!matches!(first, "lib" | "main")).then(|| first.to_string())
}

/// `os::net` as `os_net`, and `os::{net, sys}` as `os_net, os_sys`, for [`targets`]; a
/// group's own items (`server::Server`) stay the group's.
fn flatten_groups(code: &str) -> String {
    let mut code = code.to_string();
    for group in GROUPS {
        let subs = submodules(group);
        let braces = format!("{group}::{{");
        while let Some(i) = code.find(&braces) {
            let start = i + braces.len();
            let end = start + code[start..].find('}').expect("a closed brace group");
            let items: Vec<String> = code[start..end]
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(
                    |item| match subs.iter().any(|s| item.split("::").next() == Some(s)) {
                        true => format!("{group}_{item}"),
                        false => group.to_string(),
                    },
                )
                .collect();
            code.replace_range(i..=end, &items.join(", "));
        }
        for sub in &subs {
            code = code.replace(&format!("{group}::{sub}"), &format!("{group}_{sub}"));
        }
    }
    code
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` module (private, or
/// `pub(crate)` when a sibling's tests share its helpers).
fn code(text: &str) -> String {
    let body = match [
        "#[cfg(test)]\nmod tests",
        "#[cfg(test)]\npub(crate) mod tests",
    ]
    .iter()
    .find_map(|m| text.find(m))
    {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level modules named after `crate::` in `code`, including `use crate::{a, b::c}`.
fn targets(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // A brace group: the first word of each comma-separated item at depth 1.
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                item.push(c);
            }
            items.push(item);
            for item in items {
                let word: String = item
                    .trim_start_matches([',', ' ', '\n'])
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !word.is_empty() && word != "self" {
                    out.insert(word);
                }
            }
        } else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                out.insert(word);
            }
        }
    }
    out
}

fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        let node = graph.entry(from.clone()).or_default();
        for to in targets(&flatten_groups(&code(&text))) {
            if to != from {
                node.insert(to);
            }
        }
    }
    graph
}

/// A cycle through `graph`, if any, as the list of modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[at..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_parser_sees_plain_paths_and_brace_groups() {
    let t = targets("use crate::{a::X, b};\nlet x = crate::c::f();\nuse crate::d::{e, f};");
    assert_eq!(
        t.into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "d"].map(String::from)
    );
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&g),
        Some(["a", "b", "a"].map(String::from).to_vec())
    );
    g.insert("b".to_string(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
    let grouped =
        flatten_groups("use crate::{os::{net, sys::X}, units};\nlet _ = crate::os::cpu::f();");
    assert_eq!(
        targets(&grouped).into_iter().collect::<Vec<_>>(),
        ["os_cpu", "os_net", "os_sys", "units"].map(String::from)
    );
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = edges();
    for (from, to) in &graph {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!("{from} -> {}", to.join(", "));
    }
    assert!(graph.len() > 10, "too few modules found: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("module cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_leaves_stay_leaves() {
    // Leaf layers: plain data and FFI import nothing above them.
    let graph = edges();
    for leaf in [
        "units", "choices", "os_sys", "error", "data_pin", "timeouts",
    ] {
        let deps = graph.get(leaf).cloned().unwrap_or_default();
        assert!(deps.is_empty(), "{leaf} imports {deps:?}");
    }
    // What the wire and the reports carry is plain data: neither needs the socket layer.
    for module in ["wire", "wire_measure", "wire_params", "report"] {
        let deps = graph.get(module).cloned().unwrap_or_default();
        for below in ["os_net", "os_sys"] {
            assert!(!deps.contains(below), "{module} imports {below}: {deps:?}");
        }
    }
    // The parameter table and the flags sit just above them: no sockets, no threads.
    for (module, allowed) in [
        ("os_netinfo", &["units"][..]),
        ("wire_params", &["units", "data_pin", "choices"][..]),
        ("cli", &["units", "choices", "wire_params"][..]),
    ] {
        let deps = graph.get(module).cloned().unwrap_or_default();
        let extra: Vec<_> = deps
            .iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{module} imports {extra:?} beyond {allowed:?}"
        );
    }
}

/// The layers, lowest first; a module may use its own layer and those below. A module is
/// in the first layer whose entry names it or its group (`report_format` is in `report`).
/// What a test *is* (its parameters, pin plan, pacing, the samples that cross the wire)
/// sits below the sockets and threads that carry it out; the messages that carry it sit
/// above the stream threads, since they name the threads' pin plans and UDP sockets.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["error", "units", "timeouts", "choices"]),
    (
        "types",
        &["wire_params", "wire_measure", "data_pin", "data_pace"],
    ),
    ("os", &["os"]),
    ("data", &["data"]),
    ("wire", &["wire", "signals"]),
    ("report", &["report"]),
    ("cli", &["cli"]),
    ("peers", &["client", "server", "iperf3", "config"]),
    ("commands", &["commands"]),
];

/// The layer of `module`: its own entry, else its group's (`os_net` -> `os`).
fn layer_of(module: &str) -> Option<usize> {
    let group = module.split('_').next().unwrap_or(module);
    let find = |name: &str| LAYERS.iter().position(|(_, m)| m.contains(&name));
    find(module).or_else(|| find(group))
}

/// Edges from a lower layer to a higher one, as `from -> to (layer -> layer)`.
fn upward(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in graph {
        let Some(low) = layer_of(from) else { continue };
        for to in tos {
            if let Some(high) = layer_of(to).filter(|high| *high > low) {
                out.push(format!(
                    "{from} -> {to} ({} -> {})",
                    LAYERS[low].0, LAYERS[high].0
                ));
            }
        }
    }
    out
}

#[test]
fn every_edge_points_down_the_layers() {
    let graph = edges();
    let unplaced: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of LAYERS: {unplaced:?}"
    );
    let up = upward(&graph);
    assert!(up.is_empty(), "edges up the layers:\n{}", up.join("\n"));
    // The check itself: an edge from the socket layer up to the reporter is caught.
    let mut bad = graph.clone();
    bad.entry("os_net".into())
        .or_default()
        .insert("report".into());
    assert_eq!(upward(&bad), ["os_net -> report (os -> report)"]);
}
