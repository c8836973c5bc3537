//! The test vectors of C Tor's `src/test/test_consdiff.c`, one test per C
//! test, then round trips on consensus-shaped documents (see
//! `roundtrip_tests.rs`).

use super::apply::{apply_diff, apply_ed_diff};
use super::gen::*;
use super::*;
use std::cmp::Ordering;

fn lines(s: &str) -> Vec<&str> {
    split_lines(s).unwrap()
}

fn gen_ed(c1: &[&str], c2: &[&str]) -> Result<Vec<String>, ConsDiffError> {
    gen_ed_diff(c1, c2).map(|v| v.into_iter().map(|c| c.into_owned()).collect())
}

#[test]
fn smartlist_slice() {
    // C's smartlist_slice(list, start, end), end -1 meaning the list's end.
    let l = ["1", "2", "3", "4", "5"];
    let s = Slice::new(2, 5);
    assert_eq!((l[s.off], l[s.off + s.len - 1]), ("3", "5"));
    let s = Slice::new(2, l.len());
    assert_eq!((l[s.off], l[s.off + s.len - 1]), ("3", "5"));
}

#[test]
fn smartlist_slice_string_pos() {
    let l = lines("a\nd\nc\na\nb\n");
    let s = Slice::new(2, 5);
    assert_eq!(slice_string_pos(&l, s, "a"), Some(3));
    assert_eq!(slice_string_pos(&l, s, "d"), None);
}

#[test]
fn lcs_lengths_vectors() {
    let l1 = lines("a\nb\nc\nd\ne\n");
    let l2 = lines("a\nc\nd\ni\ne\n");
    let (s1, s2) = (Slice::new(0, 5), Slice::new(0, 5));
    assert_eq!(lcs_lengths(&l1, s1, &l2, s2, true), [0, 1, 2, 3, 3, 4]);
    assert_eq!(lcs_lengths(&l1, s1, &l2, s2, false), [0, 1, 1, 2, 3, 4]);
}

#[test]
fn trim_slices_vectors() {
    let l1 = lines("a\nb\nb\nb\nd\n");
    let l2 = lines("a\nc\nc\nc\nd\n");
    let l3 = lines("a\nb\nb\nb\na\n");
    let l4 = lines("c\nb\nb\nb\nc\n");
    let (mut s1, mut s2) = (Slice::new(0, 5), Slice::new(0, 5));
    trim_slices(&l1, &mut s1, &l2, &mut s2);
    assert_eq!((s1.len, s2.len), (3, 3));
    let (mut s3, mut s4) = (Slice::new(0, 5), Slice::new(0, 5));
    trim_slices(&l3, &mut s3, &l4, &mut s4);
    assert_eq!((s3.len, s4.len), (5, 5));
}

#[test]
fn set_changed_vectors() {
    let l1 = lines("a\nb\na\na\n");
    let l2 = lines("a\na\na\na\n");
    let mut c1 = [false; 4];
    let mut c2 = [false; 4];

    // An empty first run: all of the second is changed.
    let s2 = Slice::new(1, 3);
    set_changed(&mut c1, &mut c2, &l1, Slice::new(0, 0), &l2, s2);
    assert_eq!(c1, [false; 4]);
    assert_eq!(c2, [false, true, true, false]);
    c2 = [false; 4];

    // Its one line is in the second run: the first copy is kept.
    set_changed(&mut c1, &mut c2, &l1, Slice::new(0, 1), &l2, s2);
    assert_eq!(c1, [false; 4]);
    assert_eq!(c2, [false, false, true, false]);
    c2 = [false; 4];

    // Its one line is not: everything is changed.
    set_changed(&mut c1, &mut c2, &l1, Slice::new(1, 2), &l2, s2);
    assert_eq!(c1, [false, true, false, false]);
    assert_eq!(c2, [false, true, true, false]);
}

#[test]
fn calc_changes_vectors() {
    let l1 = lines("a\na\na\na\n");
    let mut c1 = [false; 4];
    let mut c2 = [false; 4];
    let all = Slice::new(0, 4);

    let l2 = lines("a\na\na\na\n");
    calc_changes(&l1, all, &l2, all, &mut c1, &mut c2);
    assert_eq!((c1, c2), ([false; 4], [false; 4]));

    let l2 = lines("a\nb\na\nb\n");
    calc_changes(&l1, all, &l2, all, &mut c1, &mut c2);
    assert_eq!(c1, [false, true, true, false]);
    assert_eq!(c2, [false, true, false, true]);
    // As in C, where the test then clears bits of the wrong array.
    c1[1] = false;
    c1[2] = false;
    c1[1] = false;
    c1[3] = false;

    let l2 = lines("b\nb\nb\nb\n");
    calc_changes(&l1, all, &l2, all, &mut c1, &mut c2);
    assert_eq!((c1, c2), ([true; 4], [true; 4]));
}

#[test]
fn get_id_hash_vectors() {
    assert_eq!(get_id_hash("r name"), None);
    assert_eq!(get_id_hash("r name _hash_isnt_base64 etc"), None);
    let line3 = "r name hash+valid+base64 etc";
    let h = get_id_hash(line3).unwrap();
    assert_eq!(h, "hash+valid+base64");
    assert_eq!(h.as_ptr(), line3[7..].as_ptr());
    assert_eq!(h.len(), line3.len() - 11);
}

#[test]
fn is_valid_router_entry_vectors() {
    assert!(!is_valid_router_entry("foo"));
    assert!(!is_valid_router_entry("r name"));
    assert!(!is_valid_router_entry("r name _hash_isnt_base64 etc"));
    assert!(is_valid_router_entry("r name hash+valid+base64 etc"));
}

#[test]
fn next_router_vectors() {
    let r = "r name hash+longer+than+27+chars+and+valid+base64 etc";
    let l = ["foo", r, "foo", "foo", r, "foo"];
    assert_eq!(next_router(&l, 0), 1);
    assert_eq!(next_router(&l, 2), 4);
    assert_eq!(next_router(&l, 1), 4);
    assert_eq!(next_router(&l, 4), 6);
    assert_eq!(next_router(&l, 5), 6);
    assert_eq!(next_router(&l, -1), 1);
}

#[test]
fn base64cmp_vectors() {
    use Ordering::*;
    let c = |a: Option<&str>, b: Option<&str>| base64cmp(a, b);
    assert_eq!(c(None, None), Equal);
    assert_eq!(c(None, Some("foo")), Less);
    assert_eq!(c(Some("bar"), None), Greater);

    assert_eq!(c(Some(""), Some("")), Equal);
    assert_eq!(c(Some("_"), Some("&")), Equal);

    assert_eq!(c(Some("abcABC/+"), Some("abcABC/+")), Equal);
    assert_eq!(c(Some("abcABC/+ "), Some("abcABC/+ ")), Equal);
    assert_eq!(c(Some("abcABC/+ "), Some("abcABC/+a")), Less);

    // Where strcmp would disagree.
    assert!("/foo" < "Afoo");
    assert_eq!(c(Some("/foo"), Some("Afoo")), Greater);
    assert!("Afoo" > "0foo");
    assert_eq!(c(Some("Afoo"), Some("0foo")), Less);
    // Where it would agree.
    assert_eq!(c(Some("afoo"), Some("Afoo")), Greater);

    assert_eq!(c(Some("afoo"), Some("afooo")), Less);
    assert_eq!(c(Some("afooo"), Some("afoo")), Greater);
}

#[test]
fn gen_ed_diff_vectors() {
    let unsorted = |w| Err(ConsDiffError::Unsorted(w));
    let ra = "r name aaaaaaaaaaaaaaaaaaaaaaaaaaa etc";
    let rb = "r name bbbbbbbbbbbbbbbbbbbbbbbbbbb etc";
    let rc = "r name ccccccccccccccccccccccccccc etc";

    // Identities out of order.
    let mut cons1 = vec![rb, "foo", ra, "bar"];
    let cons2 = vec![ra, "foo", rc, "bar"];
    assert_eq!(gen_ed(&cons1, &cons2), unsorted(Which::Base));
    assert_eq!(gen_ed(&cons2, &cons1), unsorted(Which::Target));

    // The same, the reversal right after a match (C's smartlist_del moves
    // the last element into the hole, then the new line is appended).
    cons1.swap_remove(0);
    cons1.push(ra);
    assert_eq!(cons1, ["bar", "foo", ra, ra]);
    assert_eq!(gen_ed(&cons1, &cons2), unsorted(Which::Base));
    assert_eq!(gen_ed(&cons2, &cons1), unsorted(Which::Target));

    // A repeated identity.
    let cons1 = vec![rb, "foo", rb, "bar"];
    assert_eq!(gen_ed(&cons1, &cons2), unsorted(Which::Base));

    // A line to add that is just ".".
    let cons1 = vec!["foo1", "foo2"];
    let cons2 = vec!["foo1", ".", "foo2"];
    assert_eq!(gen_ed(&cons1, &cons2), Err(ConsDiffError::DotLine));

    // Too many lines for the quadratic matching.
    let mut cons1 = vec!["a"; MAX_LINE_COUNT];
    cons1.extend(vec!["b"; MAX_LINE_COUNT]);
    assert_eq!(gen_ed(&cons1, &[]), Err(ConsDiffError::TooFewCommonIds));

    // "." lines that are not added do no harm.
    let cons1 = vec!["foo1", ".", ".", "foo2"];
    let cons2 = vec!["foo1", ".", "foo2"];
    assert!(gen_ed(&cons1, &cons2).is_ok());

    // Empty diffs.
    assert_eq!(gen_ed(&[], &[]).unwrap(), Vec::<String>::new());
    let cons1 = vec!["foo", "bar"];
    assert_eq!(gen_ed(&cons1, &cons1).unwrap(), Vec::<String>::new());

    // Everything deleted, added, changed.
    assert_eq!(gen_ed(&cons1, &[]).unwrap(), ["1,2d"]);
    assert_eq!(gen_ed(&[], &cons1).unwrap(), ["0a", "foo", "bar", "."]);
    let cons2 = vec!["foo2", "bar2"];
    assert_eq!(
        gen_ed(&cons1, &cons2).unwrap(),
        ["1,2c", "foo2", "bar2", "."]
    );

    // a, c and d together, in reverse order.
    let cons1 = lines("A\nB\nC\nD\nE\n");
    let cons2 = lines("A\nC\nO\nE\nU\n");
    assert_eq!(
        gen_ed(&cons1, &cons2).unwrap(),
        ["5a", "U", ".", "4c", "O", ".", "2d"]
    );

    let cons1 = lines("B\n");
    let cons2 = lines("A\nB\n");
    assert_eq!(gen_ed(&cons1, &cons2).unwrap(), ["0a", "A", "."]);
}

#[test]
fn apply_ed_diff_vectors() {
    use ConsDiffError::*;
    let cons1 = lines("A\nB\nC\nD\nE\n");
    let ap = |diff: &[&str]| {
        apply_ed_diff(&cons1, diff, 0).map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
    };

    assert_eq!(ap(&["a"]), Err(MissingLineNumber));
    assert_eq!(ap(&["1"]), Err(NoCommand));
    assert_eq!(ap(&["1,"]), Err(MissingRangeEnd));
    assert_eq!(ap(&["1,1"]), Err(InvalidRange));
    assert_eq!(ap(&["3,2"]), Err(InvalidRange));
    assert_eq!(ap(&["1,2a"]), Err(RangeWithAppend));
    assert_eq!(ap(&["1,$c"]), Err(DollarNotDelete));
    assert_eq!(ap(&["1d", "3d"]), Err(NotReverseOrder));
    assert_eq!(ap(&["1foo"]), Err(CommandNotOneChar));
    assert_eq!(ap(&["1e"]), Err(UnknownCommand));
    assert_eq!(ap(&["0a"]), Err(EmptyInsert));
    assert_eq!(ap(&["0a", "."]), Err(EmptyInsert));
    assert_eq!(ap(&["0a", "hello"]), Err(UnterminatedInsert));
    assert_eq!(ap(&["0, 4d"]), Err(MissingRangeEnd));
    assert_eq!(ap(&["+0,4d"]), Err(MissingLineNumber));
    assert_eq!(ap(&["0,4d,5d"]), Err(CommandNotOneChar));
    assert_eq!(ap(&["0,4 d"]), Err(CommandNotOneChar));
    assert_eq!(ap(&["0,4 5d"]), Err(CommandNotOneChar));

    let d = lines("3a\nU\nO\n.\n0a\nV\n.\n");
    assert_eq!(ap(&d).unwrap(), ["V", "A", "B", "C", "U", "O", "D", "E"]);
    let d = lines("4d\n1,2d\n");
    assert_eq!(ap(&d).unwrap(), ["C", "E"]);
    let d = lines("4c\nT\nX\n.\n1,2c\nM\n.\n");
    assert_eq!(ap(&d).unwrap(), ["M", "C", "T", "X", "E"]);
    let d = lines("4c\nT\nX\n.\n2d\n0a\nM\n.\n");
    assert_eq!(ap(&d).unwrap(), ["M", "A", "C", "T", "X", "E"]);
}

/// The consensus of C's `test_consdiff_gen_diff` (the base of its second
/// half) and `test_consdiff_apply_diff`.
const CONS_CE: &str = "network-status-version foo\n\
    r name ccccccccccccccccc etc\nfoo\n\
    r name eeeeeeeeeeeeeeeee etc\nbar\n\
    directory-signature foo bar\nbar\n";

#[test]
fn gen_diff_vectors() {
    let cons1_str = "network-status-version foo\n\
        r name bbbbbbbbbbbbbbbbb etc\nfoo\n\
        r name aaaaaaaaaaaaaaaaa etc\nbar\n\
        directory-signature foo bar\nbar\n";
    let cons2_str = "network-status-version foo\n\
        r name aaaaaaaaaaaaaaaaa etc\nfoo\n\
        r name ccccccccccccccccc etc\nbar\n\
        directory-signature foo bar\nbar\n";
    let d1 = digest_as_signed(cons1_str.as_bytes());
    let d2 = digest(cons2_str.as_bytes());
    let (c1, c2) = (lines(cons1_str), lines(cons2_str));
    assert_eq!(
        gen::gen_diff(&c1, &c2, &d1, &d2),
        Err(ConsDiffError::Unsorted(Which::Base))
    );

    let d1 = digest_as_signed(CONS_CE.as_bytes());
    let c1 = lines(CONS_CE);
    let diff = gen::gen_diff(&c1, &c2, &d1, &d2).unwrap();
    let want = [
        "network-status-diff-version 1",
        "hash 95D70F5A3CC65F920AA8B44C4563D7781A082674329661884E19E94B79D539C2 \
         7AFECEFA4599BA33D603653E3D2368F648DF4AC4723929B0F7CF39281596B0C1",
        "6,$d",
        "3,4c",
        "bar",
        "directory-signature foo bar",
        ".",
        "1a",
        "r name aaaaaaaaaaaaaaaaa etc",
        "foo",
        ".",
    ];
    assert_eq!(diff, want);
    // The public entry point hashes the same way.
    assert_eq!(generate(CONS_CE, cons2_str).unwrap(), join_lines(&want));
}

#[test]
fn apply_diff_vectors() {
    use ConsDiffError::*;
    // C's test names the base by its whole digest here.
    let d1 = digest(CONS_CE.as_bytes());
    let c1 = lines(CONS_CE);
    let ap = |diff: &[&str]| apply_diff(&c1, diff, &d1);
    const V: &str = "network-status-diff-version 1";
    const SHA3_CONS1: &str = "06646D6CF563A41869D3B02E73254372AE3140046C5E7D83C9F71E54976AF9B4";
    const SHA3_CONS2: &str = "90A418881B2FCAB3D9E60EE02E4D666D56CFA38F8A3B7AA3E0ADBA530DDA9353";
    let bogus = "3".repeat(64);
    let sha256_cons2 = "635D34593020C08E5ECD865F9986E29D50028EFA62843766A8197AD228A7F6AA";

    assert_eq!(ap(&[]), Err(TooShort));
    assert_eq!(ap(&["foo-bar", "header-line"]), Err(UnknownFormat));
    assert_eq!(ap(&[V, "word a b", "x"]), Err(NoDigests));
    assert_eq!(ap(&[V, "hash a b c"]), Err(NoDigests));
    assert_eq!(ap(&[V, "hash aaa bbb"]), Err(DigestLength));
    let bad = format!("hash {} {}", "?".repeat(64), "-".repeat(64));
    assert_eq!(ap(&[V, &bad]), Err(MalformedDigest));

    let h = format!("hash {SHA3_CONS1} {sha256_cons2}");
    assert_eq!(ap(&[V, &h, "foobar"]), Err(MissingLineNumber));

    let h = format!("hash {bogus} {sha256_cons2}");
    assert!(matches!(ap(&[V, &h]), Err(BaseDigestMismatch { .. })));

    let h = format!("hash {SHA3_CONS1} {bogus}");
    assert!(matches!(ap(&[V, &h]), Err(ResultDigestMismatch { .. })));

    let want = "network-status-version foo\n\
        r name ccccccccccccccccc etc\nsample\n\
        r name eeeeeeeeeeeeeeeee etc\nbar\n\
        directory-signature foo bar\nbar\n";
    let h = format!("hash {SHA3_CONS1} {SHA3_CONS2}");
    assert_eq!(ap(&[V, &h, "3c", "sample", "."]).unwrap(), want);
    // Lower-case hex is fine too.
    let h = h.to_lowercase();
    assert_eq!(ap(&[V, &h, "3c", "sample", "."]).unwrap(), want);
}

/// Corners of `apply_ed_diff` beyond C's own tests, with the results C
/// Tor's code gives (run on the same inputs).
#[test]
fn apply_ed_diff_corners_as_in_c() {
    use ConsDiffError::*;
    let cons1 = lines("A\nB\nC\n");
    let ap = |diff: &str| {
        apply_ed_diff(&cons1, &lines(diff), 0)
            .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
    };
    // Line 0: "d" deletes nothing, "c" inserts at the top, and either one
    // ends the script (nothing may follow).
    assert_eq!(ap("0d\n").unwrap(), ["A", "B", "C"]);
    assert_eq!(ap("2d\n0d\n").unwrap(), ["A", "C"]);
    assert_eq!(ap("0d\n1d\n"), Err(NotReverseOrder));
    assert_eq!(ap("0c\nX\n.\n").unwrap(), ["X", "A", "B", "C"]);
    assert_eq!(ap("0,2d\n").unwrap(), ["C"]);
    assert_eq!(ap("0,2c\nX\n.\n").unwrap(), ["X", "C"]);
    // "$" is the base's last line, and the range must still grow.
    assert_eq!(ap("3,$d\n"), Err(InvalidRange));
    assert_eq!(ap("2,$d\n").unwrap(), ["A"]);
    assert_eq!(ap("0,$d\n").unwrap(), Vec::<String>::new());
    // Appending after the last line, not past it.
    assert_eq!(ap("3a\nZ\n.\n").unwrap(), ["A", "B", "C", "Z"]);
    assert_eq!(ap("4a\nZ\n.\n"), Err(NotReverseOrder));
    // Numbers: leading zeros are fine, above i32::MAX is no number.
    assert_eq!(ap("00002d\n").unwrap(), ["A", "C"]);
    assert_eq!(ap("2147483647d\n"), Err(NotReverseOrder));
    assert_eq!(ap("2147483648d\n"), Err(MissingLineNumber));
    // A "." ends the insert at once, so nothing can insert a ".".
    assert_eq!(ap("1c\n.\n.\n"), Err(EmptyInsert));
    // The command line limit.
    let long = format!("{}1d\n", "0".repeat(125));
    assert_eq!(ap(&long).unwrap(), ["B", "C"]);
    let long = format!("{}1d\n", "0".repeat(126));
    assert_eq!(ap(&long), Err(CommandTooLong));
}
