//! The circuit core holds no socket, TLS, poll, thread, channel or clock
//! type,
//! checked on the types themselves: every struct and enum of weft's crates
//! is parsed (with `syn`), and the types reachable from the core's state
//! (`Circuits`), its inputs (`CoreMsg`) and its outputs (`Effect`) are
//! walked field by field, through generics, `Box`, `Arc`, `Vec` and the
//! like, into every type of weft's own that they name. A type of the
//! forbidden list anywhere on the way fails the test with the path that
//! reached it. (A type name defined twice in weft is walked in both
//! definitions: the check errs on the strict side.)

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Types the core may not hold: sockets, TLS, mio, threads and channels
/// to them, the monotonic clock. (A `SystemTime` is a date, as in a
/// consensus's valid-after; the core may hold dates. Reading a clock is
/// checked by `module_layers.rs`, which finds no `now()` in the core.)
const FORBIDDEN: &[&str] = &[
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "RawFd",
    "OwnedFd",
    "SslStream",
    "Ssl",
    "SslAcceptor",
    "SslConnector",
    "SslContext",
    "Poll",
    "Registry",
    "Token",
    "Waker",
    "Instant",
    "JoinHandle",
    "Thread",
    "Mutex",
    "RwLock",
    "Sender",
    "SyncSender",
    "Receiver",
    "UnboundedSender",
    "UnboundedReceiver",
    // The driver's own connection types.
    "Conn",
    "LinkConn",
    "Worker",
];

/// Paths whose first segment names a crate the core may not use at all.
const FORBIDDEN_CRATES: &[&str] = &["mio", "openssl", "tokio"];

/// Where the core's types start.
const ROOTS: &[&str] = &[
    "Circuits",
    "CoreMsg",
    "Effect",
    "MovedCircuits",
    "CoreReport",
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            // Tests' own helper types are not the core's.
            if p.file_name().is_some_and(|n| n != "tests") {
                rs_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every named type a field type mentions (each path segment's ident, and
/// inside generic arguments), with the crate it is written under.
#[derive(Default)]
struct Names(BTreeSet<String>, BTreeSet<String>);

impl<'a> Visit<'a> for Names {
    fn visit_path(&mut self, p: &'a syn::Path) {
        if let Some(first) = p.segments.first() {
            self.1.insert(first.ident.to_string());
        }
        if let Some(last) = p.segments.last() {
            self.0.insert(last.ident.to_string());
        }
        syn::visit::visit_path(self, p);
    }
}

/// Type name → the field types of each definition of that name.
fn definitions() -> BTreeMap<String, Vec<syn::Type>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in ["weft-relay", "weft-proto", "weft-crypto", "weft-dir"] {
        rs_files(&root.join(c).join("src"), &mut files);
    }
    let mut defs: BTreeMap<String, Vec<syn::Type>> = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut items = Vec::new();
        collect_items(&file.items, &mut items);
        for item in items {
            let (name, fields): (String, Vec<syn::Type>) = match item {
                syn::Item::Struct(s) => (
                    s.ident.to_string(),
                    s.fields.iter().map(|f| f.ty.clone()).collect(),
                ),
                syn::Item::Enum(e) => (
                    e.ident.to_string(),
                    e.variants
                        .iter()
                        .flat_map(|v| v.fields.iter().map(|f| f.ty.clone()))
                        .collect(),
                ),
                syn::Item::Type(t) => (t.ident.to_string(), vec![(*t.ty).clone()]),
                _ => continue,
            };
            defs.entry(name).or_default().extend(fields);
        }
    }
    defs
}

/// Items of a file and of its inline modules, except `#[cfg(test)]` ones.
fn collect_items(items: &[syn::Item], out: &mut Vec<syn::Item>) {
    for item in items {
        if let syn::Item::Mod(m) = item {
            let test = m.attrs.iter().any(|a| {
                a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
            });
            if let (false, Some((_, inner))) = (test, &m.content) {
                collect_items(inner, out);
            }
        } else {
            out.push(item.clone());
        }
    }
}

#[test]
fn the_circuit_core_holds_no_socket_tls_poll_thread_or_clock_type() {
    let defs = definitions();
    for r in ROOTS {
        assert!(defs.contains_key(*r), "root type {r} not found");
    }
    // Breadth-first from the roots, remembering how each type was reached.
    let mut via: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: VecDeque<String> = ROOTS.iter().map(|r| r.to_string()).collect();
    for r in ROOTS {
        via.insert(r.to_string(), String::new());
    }
    let mut bad = Vec::new();
    while let Some(t) = queue.pop_front() {
        let Some(fields) = defs.get(&t) else {
            continue; // std or another crate's: its name was checked
        };
        for ty in fields {
            let mut n = Names::default();
            n.visit_type(ty);
            for c in &n.1 {
                if FORBIDDEN_CRATES.contains(&c.as_str()) {
                    bad.push(format!("{} → {c}::…", path(&via, &t)));
                }
            }
            for name in n.0 {
                if FORBIDDEN.contains(&name.as_str()) {
                    bad.push(format!("{} → {name}", path(&via, &t)));
                } else if !via.contains_key(&name) {
                    via.insert(name.clone(), t.clone());
                    queue.push_back(name);
                }
            }
        }
    }
    let reached = via.keys().filter(|k| defs.contains_key(*k)).count();
    println!("walked {reached} of weft's types reachable from the core");
    assert!(reached > 50, "the walk reached only {reached} types");
    assert!(
        bad.is_empty(),
        "the core reaches forbidden types:\n{}",
        bad.join("\n")
    );
}

/// How type `t` was reached from a root: `Circuits → ctx … → t`.
fn path(via: &BTreeMap<String, String>, t: &str) -> String {
    let mut chain = vec![t.to_string()];
    let mut cur = t;
    while let Some(p) = via.get(cur).filter(|p| !p.is_empty()) {
        chain.push(p.clone());
        cur = p;
    }
    chain.reverse();
    chain.join(" → ")
}

/// The core's surface as the driver sees it: the methods the driver's
/// files call on it. Issue 34 wants about ten; this list is what is left
/// to narrow (the exit streams' socket events, the migration's three
/// steps, the write loop's queries). A new entry point fails this test
/// until it is added here on purpose; the driver reads no field of the
/// core at all.
const DRIVER_ENTRY_POINTS: &[&str] = &[
    // connections
    "add_conn",
    "remove_conn",
    "is_stalled",
    "circuit_count",
    "queue_urgent",
    // inputs
    "begin_round",
    "on_cell",
    "on_ring_msg",
    "rings_drained",
    "handle_msg",
    // outputs
    "take_pending",
    "fill",
    "settle_pending",
    "keep_pending",
    "poll_effect",
    "take_resumed",
    "publish",
    "report",
    "queued_bytes",
    // migration
    "detach",
    "attach",
    "abandon",
    // exit streams' sockets
    "poll_stream_io",
    "take_stream_readers",
    "take_stream_writers",
    "stream_connected",
    "stream_failed",
    "stream_data_read",
    "stream_eof",
    "stream_output",
    "stream_wrote",
    "stream_read_budget",
    "stream_counts",
    "is_dir_stream",
    "serve_dir",
];

#[test]
fn the_driver_calls_only_the_cores_entry_points_and_reads_no_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker");
    let mut used = BTreeSet::new();
    let mut bad = Vec::new();
    for f in [
        "mod.rs",
        "io.rs",
        "conn.rs",
        "inbox.rs",
        "report.rs",
        "stream_io.rs",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        for (i, _) in text.match_indices("core.") {
            // `self.core.x` or a `core` binding's `core.x`; not `a.core.x`
            // (another struct's field named core) or `score.x`.
            let before = &text[..i];
            let owner_ok = before.ends_with("self.")
                || !before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.');
            if !owner_ok {
                continue;
            }
            let rest = &text[i + 5..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            if rest[name.len()..].starts_with('(') {
                used.insert(name);
            } else {
                bad.push(format!("{f}: reads core.{name}"));
            }
        }
    }
    for n in &used {
        if !DRIVER_ENTRY_POINTS.contains(&n.as_str()) {
            bad.push(format!("calls core.{n}(), not a listed entry point"));
        }
    }
    println!("the driver calls {} core entry points", used.len());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
