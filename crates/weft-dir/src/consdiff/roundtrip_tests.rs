//! Round trips on consensus-shaped documents (the committed C Tor
//! consensuses and generated ones with hundreds of router entries), diffs
//! C Tor made for the same inputs (`tests/data/consdiff/`), seeded random
//! edits, and the refusals of the public entry points.

use super::*;
use base64::Engine as _;

/// splitmix64: a small deterministic generator, so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn id(&mut self) -> [u8; 20] {
        let mut id = [0u8; 20];
        for b in &mut id {
            *b = self.next() as u8;
        }
        id
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

/// One router entry of a plain consensus for `id`; `v` varies its
/// changing lines.
fn entry(id: &[u8; 20], v: u64) -> String {
    format!(
        "r relay{} {} {} 2000-01-01 00:{:02}:33 10.{}.{}.{} 9001 0\n\
         s Fast Running{} Valid\n\
         v Tor 0.4.{}.{}\n\
         pr Cons=1-2 Desc=1-2 DirCache=2 Link=1-5\n\
         w Bandwidth={}\n\
         p accept 80,443\n",
        id[0],
        b64(id),
        b64(&id[..19]),
        v % 60,
        id[1],
        id[2],
        id[3],
        if v.is_multiple_of(3) { " Stable" } else { "" },
        7 + v % 3,
        v % 10,
        20 + v % 997,
    )
}

/// A consensus listing `entries` (identity, variant), sorted by identity
/// (byte order is base64 order), with `sigs` signatures.
fn consensus(hour: u32, entries: &[([u8; 20], u64)], sigs: usize) -> String {
    let mut e = entries.to_vec();
    e.sort_by_key(|(id, _)| *id);
    let mut s = format!(
        "network-status-version 3\nvote-status consensus\nconsensus-method 35\n\
         valid-after 2000-01-01 {hour:02}:00:00\nfresh-until 2000-01-01 {hour:02}:30:00\n\
         known-flags Exit Fast Guard Running Stable Valid\nparams cc_alg=2\n"
    );
    for (id, v) in &e {
        s.push_str(&entry(id, *v));
    }
    s.push_str("directory-footer\nbandwidth-weights Wbd=0 Wbe=0\n");
    for k in 0..sigs {
        s.push_str(&format!(
            "directory-signature sha256 {:040X} {:040X}\n-----BEGIN SIGNATURE-----\n\
             {}\n{}\n-----END SIGNATURE-----\n",
            k + hour as usize,
            k * 7 + 1,
            b64(&[hour as u8 + k as u8; 48]),
            b64(&[0x5a; 30])
        ));
    }
    s
}

/// Random edits to a router list: some dropped, some added, some changed.
fn edit(rng: &mut Rng, entries: &[([u8; 20], u64)]) -> Vec<([u8; 20], u64)> {
    let mut out = Vec::new();
    for &(id, v) in entries {
        if rng.chance(5) {
            continue;
        }
        out.push((id, if rng.chance(20) { rng.next() } else { v }));
    }
    for _ in 0..rng.below(entries.len() / 10 + 2) {
        out.push((rng.id(), rng.next()));
    }
    out
}

fn round_trip(base: &str, target: &str) -> String {
    let diff = generate(base, target).unwrap();
    assert!(looks_like_a_consensus_diff(diff.as_bytes()));
    assert_eq!(apply(base, &diff).unwrap(), target);
    let (d1, d2) = diff_digests(&diff).unwrap();
    assert_eq!(d1, digest_as_signed(base.as_bytes()));
    assert_eq!(d2, digest(target.as_bytes()));
    diff
}

const NS: &str = include_str!("../../tests/data/cached-consensus");
const MD: &str = include_str!("../../tests/data/cached-microdesc-consensus");

#[test]
fn real_consensuses_round_trip() {
    // Drop test005r, change test003a's flags, move the clock on.
    let mut t = String::new();
    let mut skip = false;
    for l in NS.split_inclusive('\n') {
        if l.starts_with("r ") {
            skip = l.starts_with("r test005r ");
        }
        if skip {
            continue;
        }
        t.push_str(&l.replace("00:02:20", "00:02:40"));
    }
    let diff = round_trip(NS, &t);
    assert!(diff.len() < NS.len());
    // Either flavor into the other: both are sorted router lists.
    round_trip(NS, MD);
    round_trip(MD, NS);
    // A document into itself: the signatures go and come back.
    let same = round_trip(NS, NS);
    assert!(same.contains(",$d\n"));
}

#[test]
fn same_document_diff_is_the_signatures() {
    let doc = "network-status-version 3\nr a AAAA x\nb\n\
               directory-signature k d\nsig1\nsig2\n";
    let diff = generate(doc, doc).unwrap();
    let want = format!(
        "network-status-diff-version 1\nhash {} {}\n4,$d\n3a\n\
         directory-signature k d\nsig1\nsig2\n.\n",
        hex_upper(&digest_as_signed(doc.as_bytes())),
        hex_upper(&digest(doc.as_bytes())),
    );
    assert_eq!(diff, want);
    assert_eq!(apply(doc, &diff).unwrap(), doc);
}

#[test]
fn generated_consensuses_round_trip() {
    let mut rng = Rng(7);
    let base_entries: Vec<_> = (0..400).map(|_| (rng.id(), rng.next())).collect();
    let base = consensus(1, &base_entries, 9);
    assert_eq!(base.matches("\nr ").count(), 400);
    let target = consensus(2, &edit(&mut rng, &base_entries), 9);
    let diff = round_trip(&base, &target);
    assert!(
        diff.len() * 2 < target.len(),
        "diff is {} bytes",
        diff.len()
    );

    // Everything gone, and everything new.
    round_trip(&base, &consensus(3, &[], 0));
    round_trip(&consensus(3, &[], 0), &base);
    let others: Vec<_> = (0..300).map(|_| (rng.id(), rng.next())).collect();
    round_trip(&base, &consensus(3, &others, 1));
}

#[test]
fn seeded_random_edits_round_trip() {
    for seed in 0..60 {
        let mut rng = Rng(seed);
        let n = rng.below(120);
        let entries: Vec<_> = (0..n).map(|_| (rng.id(), rng.next())).collect();
        let base = consensus(1, &entries, rng.below(4));
        let mut target = consensus(2, &edit(&mut rng, &entries), rng.below(4));
        // Some line-level noise too, kept free of lone "." lines and of
        // "r " lines (so the router order stays valid).
        let mut lines: Vec<String> = target.lines().map(String::from).collect();
        for _ in 0..rng.below(6) {
            let i = rng.below(lines.len() + 1);
            match rng.below(3) {
                0 if i < lines.len() && !lines[i].starts_with("r ") => {
                    lines.remove(i);
                }
                1 => lines.insert(i, format!("x{}", rng.below(5))),
                _ => lines.insert(i, String::new()),
            }
        }
        target = lines.iter().map(|l| format!("{l}\n")).collect();
        round_trip(&base, &target);
    }
}

#[test]
fn reordered_routers_are_refused() {
    let mut rng = Rng(11);
    let entries: Vec<_> = (0..20).map(|_| (rng.id(), 0)).collect();
    let good = consensus(1, &entries, 1);
    // Swap two router entries' identity lines.
    let mut lines: Vec<&str> = good.lines().collect();
    let rs: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("r "))
        .collect();
    lines.swap(rs[3], rs[4]);
    let bad: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(
        generate(&bad, &good),
        Err(ConsDiffError::Unsorted(Which::Base))
    );
    assert_eq!(
        generate(&good, &bad),
        Err(ConsDiffError::Unsorted(Which::Target))
    );
    // A repeated entry is out of order too.
    let dup = good.replacen(lines[rs[3]], lines[rs[4]], 1);
    assert!(generate(&good, &dup).is_err());
}

#[test]
fn c_tor_made_the_same_diffs() {
    // Each case: base, target, and the diff C Tor 0.4.8's
    // consensus_diff_generate made of them (see the README there).
    let cases: [(&str, &str, &str); 3] = [
        (
            include_str!("../../tests/data/consdiff/ns-base"),
            include_str!("../../tests/data/consdiff/ns-target"),
            include_str!("../../tests/data/consdiff/ns-diff"),
        ),
        (
            include_str!("../../tests/data/consdiff/gen-base"),
            include_str!("../../tests/data/consdiff/gen-target"),
            include_str!("../../tests/data/consdiff/gen-diff"),
        ),
        (
            include_str!("../../tests/data/consdiff/soup-base"),
            include_str!("../../tests/data/consdiff/soup-target"),
            include_str!("../../tests/data/consdiff/soup-diff"),
        ),
    ];
    for (base, target, c_diff) in cases {
        assert_eq!(generate(base, target).unwrap(), c_diff);
        assert_eq!(apply(base, c_diff).unwrap(), target);
    }
}

#[test]
fn public_entry_points_refuse() {
    use ConsDiffError::*;
    let doc = "network-status-version 3\nr a AAAA x\nb\n";
    assert_eq!(generate("a", doc), Err(NoFinalNewline));
    assert_eq!(generate(doc, "a\nb"), Err(NoFinalNewline));
    assert_eq!(apply(doc, "x"), Err(NoFinalNewline));
    let long = format!("{}\n", "x".repeat(MAX_LINE_LEN + 1));
    assert_eq!(generate(&long, doc), Err(LineTooLong));
    let just = format!("{}\n", "x".repeat(MAX_LINE_LEN));
    assert!(generate(&just, doc).is_ok());

    // A single-line signature section makes a "N,$d" that C's own check
    // refuses (an empty range); so do we.
    let one_sig = "network-status-version 3\nr a AAAA x\ndirectory-signature k d\n";
    assert_eq!(generate(one_sig, doc), Err(SelfCheck));

    let target = "network-status-version 3\nr a AAAA x\nc\n";
    let diff = generate(doc, target).unwrap();
    // Another base.
    assert!(matches!(
        apply(target, &diff),
        Err(BaseDigestMismatch { .. })
    ));
    // A tampered diff.
    let tampered = diff.replace("\nc\n", "\nd\n");
    assert!(matches!(
        apply(doc, &tampered),
        Err(ResultDigestMismatch { .. })
    ));
    assert_eq!(apply(doc, ""), Err(TooShort));
    assert_eq!(diff_digests("x\n"), Err(TooShort));
    assert!(!looks_like_a_consensus_diff(doc.as_bytes()));
}

#[test]
fn nul_bytes_end_the_output_as_in_c() {
    let base = "a\n";
    let target = "a\nb\0c\nd\n";
    let diff = generate(base, target).unwrap();
    // C's result is a C string: cut at the NUL, no final newline.
    assert!(diff.ends_with("\nb"));
    assert_eq!(apply(base, &diff), Err(ConsDiffError::NoFinalNewline));
    // In an ed command, a NUL ends the command.
    let cmd = "2a\0 trailing junk";
    let want = "a\nz\n";
    let diff = format!(
        "{DIFF_VERSION_LINE}\nhash {} {}\n{cmd}\nz\n.\n",
        hex_upper(&digest_as_signed(base.as_bytes())),
        hex_upper(&digest(want.as_bytes()))
    );
    // "2a" after a one-line base is past its end; "1a" is not.
    assert_eq!(apply(base, &diff), Err(ConsDiffError::NotReverseOrder));
    let diff = diff.replace("2a\0", "1a\0");
    assert_eq!(apply(base, &diff).unwrap(), want);
}

#[test]
fn apply_is_linear_on_hostile_diffs() {
    // Many small commands over a big base, and one huge insert: each line
    // of base and diff is looked at a bounded number of times.
    let base: String = (0..200_000).map(|i| format!("l{i}\n")).collect();
    let mut script = String::new();
    for k in (1..=100_000).rev() {
        script.push_str(&format!("{}c\nn{k}\n.\n", 2 * k));
    }
    script.push_str("0a\n");
    script.push_str(&"ins\n".repeat(200_000));
    script.push_str(".\n");
    let base_lines = split_lines(&base).unwrap();
    let diff_lines = split_lines(&script).unwrap();
    let out = apply::apply_ed_diff(&base_lines, &diff_lines, 0).unwrap();
    assert_eq!(out.len(), 400_000);
    assert_eq!(out[200_001], "n1");
}
