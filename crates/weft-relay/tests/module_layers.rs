//! The shape of weft-relay's modules, checked from the source: no import
//! cycle among its top-level modules, and each module uses only modules of
//! its own or a lower layer (leaf modules, then `messages`, then `worker`,
//! then `controller`, as lib.rs says). Inside `worker/`, the circuit core's
//! files use no socket, poll, clock or thread. A `crate::x` path anywhere
//! in a file (a `use`, a type, a doc link) counts as a use of `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layer of each top-level module (higher may use lower, not the reverse).
fn layer(m: &str) -> Option<u8> {
    Some(match m {
        "accounting" | "bucket" | "bwhist" | "context" | "control" | "dns_honesty" | "dos"
        | "ewma" | "histogram" | "kist" | "link_io" | "oom" | "outbound" | "pool"
        | "privileges" | "resolv_conf" | "resolver" | "ring" | "sched_slice" | "selftest"
        | "service_notify" | "stats" | "tls" | "worker_report" => 0,
        "messages" => 1,
        "worker" => 2,
        "controller" => 3,
        _ => return None,
    })
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every .rs file under `dir`, with the top-level module it belongs to.
fn files(dir: &Path, top: Option<&str>, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            files(&p, Some(top.unwrap_or(&name)), out);
        } else if p.extension().is_some_and(|e| e == "rs") && name != "lib" {
            out.push((top.unwrap_or(&name).to_string(), p));
        }
    }
}

/// The top-level modules a file names as `crate::<module>`.
fn uses(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        // `weft_relay::` paths from other crates do not count; neither do
        // paths of another crate that end in "crate::".
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + 7..];
        let m: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !m.is_empty() {
            set.insert(m);
        }
        // `crate::{a, b}` groups.
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(0);
            for part in group[..end].split(',') {
                let m: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !m.is_empty() {
                    set.insert(m);
                }
            }
        }
    }
    set
}

#[test]
fn no_cycles_and_only_downward_uses() {
    let mut all = Vec::new();
    files(&src(), None, &mut all);
    assert!(all.len() > 20, "found the sources");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut bad = Vec::new();
    for (top, path) in &all {
        let Some(l) = layer(top) else {
            bad.push(format!(
                "{}: module {top} has no layer in this test",
                path.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        // The worker's in-memory tests play whole networks: its cores with
        // the controller's own (sans-IO) tables. They are above every
        // layer, and no code depends on them.
        let in_worker_tests = path
            .strip_prefix(src())
            .is_ok_and(|p| p.starts_with("worker/core/tests"));
        for u in uses(&text) {
            if u == *top || in_worker_tests {
                continue;
            }
            match layer(&u) {
                Some(lu) if lu <= l => {
                    graph.entry(top.clone()).or_default().insert(u);
                }
                Some(lu) => bad.push(format!(
                    "{}: {top} (layer {l}) uses crate::{u} (layer {lu})",
                    path.display()
                )),
                None => bad.push(format!("{}: unknown module crate::{u}", path.display())),
            }
        }
    }
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
    // No cycle, even among modules of one layer (depth-first search).
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let i = path.iter().position(|p| p == m).unwrap_or(0);
                let mut cycle = path[i..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for n in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in graph.keys() {
        if let Some(c) = visit(m, &graph, &mut state, &mut Vec::new()) {
            panic!("import cycle: {}", c.join(" -> "));
        }
    }
}

/// The circuit core's files (everything under worker/core/ but its
/// in-memory tests) do no I/O; the driver's files (worker/*.rs) are the
/// only others in worker/.
#[test]
fn the_circuit_core_is_sans_io() {
    let driver = [
        "mod.rs",
        "conn.rs",
        "inbox.rs",
        "io.rs",
        "report.rs",
        "stream_io.rs",
    ];
    let forbidden = [
        "mio::",
        "std::net::TcpStream",
        "Instant::now",
        "SystemTime::now",
        "std::thread",
        "tokio",
        ".poll(",
        "crate::tls",
        "libc::",
    ];
    let dir = src().join("worker");
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name == "core" || driver.contains(&name.as_str()),
            "worker/{name}: neither the driver's nor the core's; this check does not know it"
        );
    }
    let mut files = Vec::new();
    core_files(&dir.join("core"), &mut files);
    assert!(files.len() > 15, "found the core's files");
    let mut bad = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(&p).unwrap();
        for f in forbidden {
            if text.contains(f) {
                bad.push(format!("{} uses {f}", p.display()));
            }
        }
    }
    assert!(bad.is_empty(), "the circuit core does I/O: {bad:?}");
}

/// Every .rs file under `dir`, its in-memory tests' folder left out.
fn core_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                core_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
