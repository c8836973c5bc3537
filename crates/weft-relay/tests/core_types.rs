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
    "CoreEvent",
    "Effect",
    "MovedCircuits",
    "CoreReport",
    "Filled",
    "Pumped",
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

/// The core's surface as the driver sees it, in quinn-proto's families:
/// inputs (the cells, the rings' messages, every other event — the
/// round's clock among them), outputs (`poll_*`, the cells for a
/// connection, an exit stream's bytes, the rings at the round's end, the
/// report, a connection's circuit count for the balancer's choice, a
/// connection's read budget) and the first step of a move. Twelve in all. A new entry point
/// fails this test until it is added here on purpose; the driver reads
/// no field of the core at all.
const DRIVER_ENTRY_POINTS: &[&str] = &[
    // inputs
    "on_cell",
    "on_ring_msg",
    "handle_event",
    // outputs
    "poll_effect",
    "poll_timeout",
    "fill",
    "pump_stream",
    "end_round",
    "report",
    // how many circuits a connection carries: the balancer is offered only
    // connections light enough to move (`worker/report.rs`)
    "circuits_on",
    // how much the driver may read from a connection this round: a share
    // that grows with its busy circuits (`worker/core/read_share.rs`)
    "read_budget",
    // whether reading a connection now could only add to what waits: every
    // circuit it carries has cells waiting to cross (`read_share.rs`)
    "read_paused",
    // a move's first step: the core gives up a connection's circuits
    "detach",
];

/// The calls and field reads on the core in one driver file: receivers
/// `self.core` or a binding named `core`, found in the syntax tree (so a
/// call split over lines counts too).
#[derive(Default)]
struct CoreUses {
    calls: BTreeSet<String>,
    fields: BTreeSet<String>,
}

fn is_core(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::Field(f) => {
            matches!(&f.member, syn::Member::Named(n) if n == "core")
                && matches!(&*f.base, syn::Expr::Path(p) if p.path.is_ident("self"))
        }
        syn::Expr::Path(p) => p.path.is_ident("core"),
        syn::Expr::Paren(p) => is_core(&p.expr),
        syn::Expr::Reference(r) => is_core(&r.expr),
        _ => false,
    }
}

impl<'a> Visit<'a> for CoreUses {
    fn visit_expr_method_call(&mut self, m: &'a syn::ExprMethodCall) {
        if is_core(&m.receiver) {
            self.calls.insert(m.method.to_string());
        } else {
            self.visit_expr(&m.receiver);
        }
        for a in &m.args {
            self.visit_expr(a);
        }
    }

    fn visit_expr_field(&mut self, f: &'a syn::ExprField) {
        if is_core(&f.base) {
            if let syn::Member::Named(n) = &f.member {
                self.fields.insert(n.to_string());
            }
        }
        syn::visit::visit_expr_field(self, f);
    }
}

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
        let file = syn::parse_file(&text).unwrap();
        let mut uses = CoreUses::default();
        uses.visit_file(&file);
        for n in uses.fields {
            bad.push(format!("{f}: reads core.{n}"));
        }
        used.extend(uses.calls);
    }
    for n in &used {
        if !DRIVER_ENTRY_POINTS.contains(&n.as_str()) {
            bad.push(format!("calls core.{n}(), not a listed entry point"));
        }
    }
    println!(
        "the driver calls {} core entry points: {used:?}",
        used.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The finder itself: a call split over lines and a field read are seen.
#[test]
fn the_entry_point_finder_sees_split_calls_and_field_reads() {
    let src = "fn f(&mut self) { let a = self\n .core\n .pending\n .iter(); self.core\n.fill(1); core.report(); let x = other.core.nope(); }";
    let file = syn::parse_file(&format!("impl W {{ {src} }}")).unwrap();
    let mut uses = CoreUses::default();
    uses.visit_file(&file);
    assert_eq!(uses.fields, BTreeSet::from(["pending".to_string()]));
    assert_eq!(
        uses.calls,
        BTreeSet::from(["fill".to_string(), "report".to_string()])
    );
}

/// The core's state and its rooms keep their fields to themselves: the
/// struct `Circuits` and each room's struct have no field visible outside
/// the core (`pub`, `pub(crate)`), and the rooms' fields none outside
/// their room (private, or `pub(in ..)` no wider than the core).
#[test]
fn the_core_and_its_rooms_expose_no_field() {
    const ROOMS: &[&str] = &["Circuits", "Streams", "ConfluxRoom", "Guards", "HalfTable"];
    let mut files = Vec::new();
    rs_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker/core"),
        &mut files,
    );
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for f in files {
        let file = syn::parse_file(&std::fs::read_to_string(&f).unwrap()).unwrap();
        for item in file.items {
            let syn::Item::Struct(st) = item else {
                continue;
            };
            let name = st.ident.to_string();
            if !ROOMS.contains(&name.as_str()) {
                continue;
            }
            seen.insert(name.clone());
            for field in st.fields.iter() {
                let wide = match &field.vis {
                    syn::Visibility::Inherited => false,
                    syn::Visibility::Public(_) => true,
                    syn::Visibility::Restricted(r) => {
                        let path: Vec<String> = r
                            .path
                            .segments
                            .iter()
                            .map(|s| s.ident.to_string())
                            .collect();
                        // pub(crate), or pub(super) on a struct of the
                        // core's top module (that is the worker, driver
                        // included).
                        path == ["crate"] || (path == ["super"] && f.ends_with("core/mod.rs"))
                    }
                };
                if wide {
                    let fname = field.ident.as_ref().map_or("?".into(), |i| i.to_string());
                    bad.push(format!("{name}.{fname} is visible outside the core"));
                }
            }
        }
    }
    assert_eq!(seen.len(), ROOMS.len(), "found every room: {seen:?}");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// A relay message's header is parsed once, by the keyed half that
/// decrypted it (weft-proto's `ForwardAction` carries it, a `RelayMsg`
/// takes it to a conflux set's home): no file of the core parses one.
/// (The in-memory conflux test counts the parses of a message that
/// crosses workers and waits in the reorder queue: one each.)
#[test]
fn the_core_parses_no_relay_header() {
    struct Calls(Vec<String>);
    impl<'a> Visit<'a> for Calls {
        fn visit_path(&mut self, p: &'a syn::Path) {
            if let Some(last) = p.segments.last() {
                if last.ident == "parse_header" {
                    self.0.push(last.ident.to_string());
                }
            }
            syn::visit::visit_path(self, p);
        }
    }
    let mut files = Vec::new();
    rs_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker"),
        &mut files,
    );
    let mut bad = Vec::new();
    for f in files {
        let file = syn::parse_file(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let mut calls = Calls(Vec::new());
        calls.visit_file(&file);
        if !calls.0.is_empty() {
            bad.push(f.display().to_string());
        }
    }
    assert!(bad.is_empty(), "parse a relay header again: {bad:?}");
}
