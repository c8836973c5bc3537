//! Consensus diffs served (`DirCache=2`): the header and URL parsing of
//! C's `dircache.c`, the choice of diff (`find_best_diff`), the store's
//! checks, restart and limits (`consdiffmgr.c`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::diff_store::{self, decompress, Limits, Target};
use super::diffs::{parse_diff_from_value, DiffSet};
use super::serve::{parse_request, respond, Parsed, Peer, Request, Response};
use super::*;
use crate::consdiff;

const BASE: &str = include_str!("../../tests/data/consdiff/ns-base");
const TARGET: &str = include_str!("../../tests/data/consdiff/ns-target");

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A third consensus, older than [`BASE`]: another valid-after and one
/// bandwidth changed.
fn older() -> String {
    BASE.replace(
        "valid-after 2000-01-01 00:02:20",
        "valid-after 2000-01-01 00:02:00",
    )
    .replacen("w Bandwidth=", "w Bandwidth=1", 1)
}

fn hours_ago(h: u64) -> SystemTime {
    now() - Duration::from_secs(h * 3600)
}

/// A snapshot serving `text` as its `ns` consensus, with `diffs`.
fn docs_with(text: &str, diffs: DiffSet) -> DirDocuments {
    let bodies = Method::ALL
        .iter()
        .map(|&m| {
            (
                m,
                Arc::<[u8]>::from(compress(m, text.as_bytes(), true).unwrap()),
            )
        })
        .collect();
    let mut d = DirDocuments::default();
    d.consensus[0] = Some(ConsensusDoc {
        valid_after: now() - Duration::from_secs(60),
        fresh_until: now() + Duration::from_secs(600),
        valid_until: now() + Duration::from_secs(3600),
        signers: vec![],
        sha3_as_signed: sha3_as_signed(text),
        bodies,
    });
    d.diffs = diffs;
    d
}

/// Stores `older()` (3 h old), BASE (2 h old) and then TARGET (1 h old)
/// in `dir`, and returns the diffs to TARGET.
fn store_three(dir: &std::path::Path, limits: &Limits) -> (DiffSet, diff_store::Report) {
    let old = older();
    for (text, h) in [(old.as_str(), 3), (BASE, 2)] {
        let t = Target {
            flavor: ConsensusFlavor::Plain,
            text,
            valid_after: hours_ago(h),
        };
        diff_store::update(dir, &[t], limits, now()).unwrap();
    }
    let t = Target {
        flavor: ConsensusFlavor::Plain,
        text: TARGET,
        valid_after: hours_ago(1),
    };
    diff_store::update(dir, &[t], limits, now()).unwrap()
}

fn request(url: &str, extra: &str) -> Request {
    let raw = format!("GET {url} HTTP/1.0\r\n{extra}\r\n");
    match parse_request(raw.as_bytes()) {
        Parsed::Request(r) => r,
        p => panic!("{p:?}"),
    }
}

fn ask(docs: &DirDocuments, url: &str, extra: &str) -> (Response, String, Vec<u8>) {
    let r = respond(Some(docs), &request(url, extra), Peer { addr: None }, now());
    let head = String::from_utf8(r.head.clone()).unwrap();
    let enc = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Encoding: "))
        .and_then(Method::by_name)
        .unwrap_or(Method::Identity);
    let body = decompress(enc, r.body.bytes()).unwrap();
    (r, head, body)
}

const URL: &str = "/tor/status-vote/current/consensus";

fn hexd(text: &str) -> String {
    hex::encode(consdiff::digest_as_signed(text.as_bytes()))
}

#[test]
fn header_is_parsed_as_c_does() {
    let (a, b) = ("ab".repeat(32), "CD".repeat(32));
    let want = vec![[0xab; 32], [0xcd; 32]];
    assert_eq!(parse_diff_from_value(&format!("{a} {b}")), want);
    assert_eq!(parse_diff_from_value(&format!("  {a}   {b} ")), want);
    // Split at spaces only: a comma list names nothing.
    assert!(parse_diff_from_value(&format!("{a},{b}")).is_empty());
    assert_eq!(
        parse_diff_from_value(&format!("{a}, {b}")),
        vec![[0xcd; 32]]
    );
    // Exactly 64 hex digits.
    assert!(parse_diff_from_value(&"ab".repeat(31)).is_empty());
    assert!(parse_diff_from_value(&format!("{a}00")).is_empty());
    assert!(parse_diff_from_value(&"zz".repeat(32)).is_empty());
    // The header: any case, the first line only, "name: " with its space.
    let r = request(
        URL,
        &format!("x-or-diff-from-consensus: {a}\r\nX-Or-Diff-From-Consensus: {b}\r\n"),
    );
    assert_eq!(r.diff_from, vec![[0xab; 32]]);
    assert!(request(URL, &format!("X-Or-Diff-From-Consensus:{a}\r\n"))
        .diff_from
        .is_empty());
}

#[test]
fn a_served_diff_applies_to_give_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let (set, report) = store_three(dir.path(), &Limits::default());
    assert_eq!((report.made, report.failed), (2, 0));
    let docs = docs_with(TARGET, set);
    let mut served = 0;
    for accept in ["", "Accept-Encoding: x-tor-lzma, x-zstd, gzip, deflate\r\n"] {
        let (r, head, body) = ask(
            &docs,
            URL,
            &format!("X-Or-Diff-From-Consensus: {}\r\n{accept}", hexd(BASE)),
        );
        assert_eq!(r.status, 200, "{head}");
        assert_eq!(r.diff, Some(ConsensusFlavor::Plain), "counted as a diff");
        served += 1;
        assert!(consdiff::looks_like_a_consensus_diff(&body));
        let text = std::str::from_utf8(&body).unwrap();
        assert_eq!(consdiff::apply(BASE, text).unwrap(), TARGET);
        assert!(
            head.contains("Vary: X-Or-Diff-From-Consensus\r\n"),
            "{head}"
        );
        assert!(head.contains("Expires: "), "{head}");
        let want = if accept.is_empty() {
            "identity"
        } else {
            "x-tor-lzma"
        };
        assert!(
            head.contains(&format!("Content-Encoding: {want}\r\n")),
            "{head}"
        );
    }
    // From the older base too; in the URL form as well.
    let (r, _, body) = ask(&docs, &format!("{URL}/diff/{}", hexd(&older())), "");
    assert_eq!(r.status, 200);
    assert_eq!(r.diff, Some(ConsensusFlavor::Plain));
    served += 1;
    assert_eq!(
        consdiff::apply(&older(), std::str::from_utf8(&body).unwrap()).unwrap(),
        TARGET
    );
    assert_eq!(served, 3);
}

#[test]
fn the_first_known_digest_and_the_best_method_win() {
    let dir = tempfile::tempdir().unwrap();
    let (set, _) = store_three(dir.path(), &Limits::default());
    let docs = docs_with(TARGET, set);
    let unknown = "00".repeat(32);
    let hdr = format!(
        "X-Or-Diff-From-Consensus: {unknown} {} {}\r\nAccept-Encoding: gzip\r\n",
        hexd(&older()),
        hexd(BASE)
    );
    let (r, head, body) = ask(&docs, URL, &hdr);
    assert_eq!(r.status, 200);
    assert!(head.contains("Content-Encoding: gzip\r\n"), "{head}");
    assert_eq!(
        consdiff::apply(&older(), std::str::from_utf8(&body).unwrap()).unwrap(),
        TARGET
    );
    // No deflated diff is kept (C's compress_diffs_with): a client that
    // accepts deflate only gets the diff as it is.
    let (_, head, _) = ask(
        &docs,
        &format!("{URL}.z"),
        &format!("X-Or-Diff-From-Consensus: {}\r\n", hexd(BASE)),
    );
    assert!(head.contains("Content-Encoding: identity\r\n"), "{head}");
}

#[test]
fn unknown_base_gets_the_full_consensus() {
    let dir = tempfile::tempdir().unwrap();
    let (set, _) = store_three(dir.path(), &Limits::default());
    let docs = docs_with(TARGET, set);
    let unknown = format!("X-Or-Diff-From-Consensus: {}\r\n", "11".repeat(32));
    let (r, _, body) = ask(&docs, URL, &unknown);
    assert_eq!(r.status, 200);
    assert_eq!(body, TARGET.as_bytes());
    assert_eq!(r.diff, None, "the full consensus is not a diff");
    // The other flavour has no diffs.
    let (r, _, _) = ask(
        &docs,
        &format!("{URL}-microdesc"),
        &format!("X-Or-Diff-From-Consensus: {}\r\n", hexd(BASE)),
    );
    assert_eq!(r.status, 404);
    // Demanded in the URL: 404, as C.
    let (r, head, _) = ask(&docs, &format!("{URL}/diff/{}", "11".repeat(32)), "");
    assert_eq!(r.status, 404);
    assert!(head.contains("No such diff available"));
    let (r, head, _) = ask(&docs, &format!("{URL}/diff/1234"), "");
    assert_eq!(r.status, 404);
    assert!(head.contains("Couldn't parse request"));
    // Naming the consensus we serve: 304, even with a diff from another.
    let both = format!(
        "X-Or-Diff-From-Consensus: {} {}\r\n",
        hexd(BASE),
        hexd(TARGET)
    );
    assert_eq!(ask(&docs, URL, &both).0.status, 304);
    // Diffs to another consensus than the snapshot's are never offered.
    let other = docs_with(BASE, docs.diffs.clone());
    let (r, _, body) = ask(
        &other,
        URL,
        &format!("X-Or-Diff-From-Consensus: {}\r\n", hexd(&older())),
    );
    assert_eq!(r.status, 200);
    assert_eq!(body, BASE.as_bytes());
}

#[test]
fn restart_keeps_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = store_three(dir.path(), &Limits::default());
    let t = Target {
        flavor: ConsensusFlavor::Plain,
        text: TARGET,
        valid_after: hours_ago(1),
    };
    let (again, report) = diff_store::update(dir.path(), &[t], &Limits::default(), now()).unwrap();
    assert_eq!((report.loaded, report.made), (2, 0));
    let key = consdiff::digest_as_signed(BASE.as_bytes());
    let (a, b) = (
        &first.flavors[0].by_base[&key],
        &again.flavors[0].by_base[&key],
    );
    assert_eq!(a.bodies.len(), 4);
    for ((m1, b1), (m2, b2)) in a.bodies.iter().zip(&b.bodies) {
        assert_eq!((m1, &b1[..]), (m2, &b2[..]));
    }
    // A damaged form is not served: the diff is made again.
    let victim = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".gz"))
        .unwrap();
    std::fs::write(&victim, b"garbage").unwrap();
    let (_, report) = diff_store::update(dir.path(), &[t], &Limits::default(), now()).unwrap();
    assert_eq!((report.loaded, report.made), (1, 1));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        for e in std::fs::read_dir(dir.path()).unwrap() {
            assert_eq!(mode(&e.unwrap().path()), 0o600);
        }
    }
}

#[test]
fn limits_bound_what_is_kept() {
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // One base per flavour: the newest.
    let dir = tempfile::tempdir().unwrap();
    let one = Limits {
        max_bases: 1,
        ..Limits::default()
    };
    let (set, _) = store_three(dir.path(), &one);
    assert_eq!(set.count(), 1);
    assert!(set.flavors[0]
        .by_base
        .contains_key(&consdiff::digest_as_signed(BASE.as_bytes())));
    // Two consensuses and four diff forms remain on disk.
    assert_eq!(names(dir.path()).len(), 6, "{:?}", names(dir.path()));
    // Age: a base older than max_age is dropped.
    let dir = tempfile::tempdir().unwrap();
    let young = Limits {
        max_age: Duration::from_secs(2 * 3600 + 1800),
        ..Limits::default()
    };
    let (set, _) = store_three(dir.path(), &young);
    assert_eq!(set.count(), 1);
    // Memory: no diff fits, none is kept, and the bases go.
    let dir = tempfile::tempdir().unwrap();
    let none = Limits {
        max_memory: 0,
        ..Limits::default()
    };
    let (set, _) = store_three(dir.path(), &none);
    assert_eq!(set.count(), 0);
    assert_eq!(
        names(dir.path()),
        vec!["consensus-ns-1799996400".to_owned()]
    );
    // Disk: the oldest base and its diffs go first.
    let dir = tempfile::tempdir().unwrap();
    let (_, full) = store_three(dir.path(), &Limits::default());
    let oldest_files: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().contains("1799989200"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let dir = tempfile::tempdir().unwrap();
    let small = Limits {
        max_disk: full.disk_bytes - 1,
        ..Limits::default()
    };
    let (set, report) = store_three(dir.path(), &small);
    assert_eq!(set.count(), 1);
    assert_eq!(report.disk_bytes, full.disk_bytes - oldest_files);
    assert!(report.disk_bytes <= small.max_disk);
}

/// A microdesc consensus of `n` relays at hour `h` (relay `i` present
/// and its line variant from `state`), sorted by identity as real ones.
fn simulated(h: u32, state: &[(u32, u32)]) -> String {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD_NO_PAD.encode(b);
    let mut s = format!(
        "network-status-version 3 microdesc\nvote-status consensus\nconsensus-method 34\n\
         valid-after 2030-01-{:02} {:02}:00:00\nfresh-until x\nvalid-until x\n\
         known-flags Exit Fast Guard Running Stable V2Dir Valid\n",
        1 + h / 24,
        h % 24
    );
    let mut entries: Vec<(Vec<u8>, String)> = state
        .iter()
        .map(|&(i, v)| {
            let id = Sha256::digest(i.to_be_bytes())[..20].to_vec();
            let md = Sha256::digest([i.to_be_bytes(), v.to_be_bytes()].concat());
            let e = format!(
                "r relay{i} {} 2030-01-01 00:00:00 10.{}.{}.{} 9001 0\nm {}\n\
                 s Fast Running{} V2Dir Valid\nv Tor 0.4.8.{}\npr Cons=1-2 Desc=1-2 \
                 DirCache=2 Link=1-5 Microdesc=1-2 Relay=1-4\nw Bandwidth={}\n",
                b64(&id),
                i >> 16 & 255,
                i >> 8 & 255,
                i & 255,
                b64(&md),
                if v % 3 == 0 { " Stable" } else { "" },
                v % 13,
                1000 + v % 90_000
            );
            (id, e)
        })
        .collect();
    entries.sort();
    for (_, e) in entries {
        s.push_str(&e);
    }
    s.push_str("directory-footer\nbandwidth-weights Wbd=0\n");
    for k in 0..9 {
        s.push_str(&format!(
            "directory-signature sha256 {k:040X} {h:040X}\n-----BEGIN SIGNATURE-----\n{}\n\
             -----END SIGNATURE-----\n",
            b64(&[k as u8 ^ h as u8; 256])
        ));
    }
    s
}

/// 72 hours of simulated consensuses of 7,000 relays (each hour about 5%
/// of the lines change, 1% of relays leave and as many join): the memory
/// and disk the diffs to the last one take, against the limits. Run with
/// `cargo test -p weft-dir --release -- --ignored seventy_two --nocapture`.
#[test]
#[ignore = "measurement: about a minute"]
fn seventy_two_hours_of_diffs_measured() {
    let mut rng = 0x9e37_79b9_u32;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        rng
    };
    let mut state: Vec<(u32, u32)> = (0..7000).map(|i| (i, 0)).collect();
    let mut fresh = 7000;
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits::default();
    let t0 = std::time::Instant::now();
    let mut last = (DiffSet::default(), diff_store::Report::default(), 0);
    for h in 0..=72u32 {
        let text = simulated(h, &state);
        let va = now() - Duration::from_secs(u64::from(72 - h) * 3600);
        // Only the last consensus gets its diffs made (the others are
        // stored as bases): the 72 diffs a cache holds after 72 hours.
        let t = Target {
            flavor: ConsensusFlavor::Microdesc,
            text: &text,
            valid_after: va,
        };
        if h < 72 {
            // Stored as the store keeps a base (an update would also make
            // every diff to it, which a cache did an hour at a time).
            let z = compress(Method::Deflate, text.as_bytes(), false).unwrap();
            let secs = va.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
            std::fs::write(dir.path().join(format!("consensus-microdesc-{secs}")), z).unwrap();
        } else {
            let (set, report) = diff_store::update(dir.path(), &[t], &limits, now()).unwrap();
            last = (set, report, text.len());
        }
        for e in state.iter_mut() {
            if next() % 20 == 0 {
                e.1 = next();
            }
        }
        for _ in 0..70 {
            let i = next() as usize % state.len();
            state.swap_remove(i);
            state.push((fresh, 0));
            fresh += 1;
        }
    }
    let (set, report, len) = last;
    let f = set.flavor(ConsensusFlavor::Microdesc);
    let mut sizes: Vec<(SystemTime, usize, usize)> = f
        .by_base
        .values()
        .map(|d| {
            let id = d.body(Method::Identity).unwrap().len();
            (d.from_valid_after, id, d.size())
        })
        .collect();
    sizes.sort();
    eprintln!(
        "consensus {len} bytes; {} diffs kept ({} made, {} failed); memory {} KiB \
         (limit {} KiB), disk {} KiB (limit {} KiB); {:?}",
        f.by_base.len(),
        report.made,
        report.failed,
        set.size() / 1024,
        limits.max_memory / 1024,
        report.disk_bytes / 1024,
        limits.max_disk / 1024,
        t0.elapsed()
    );
    if let (Some(o), Some(n)) = (sizes.first(), sizes.last()) {
        eprintln!(
            "oldest base: diff {} bytes, all forms {}; newest: {} bytes, all forms {}",
            o.1, o.2, n.1, n.2
        );
    }
    assert!(set.size() <= limits.max_memory);
    assert!(report.disk_bytes <= limits.max_disk);
}
