//! Making a consensus diff: the line matching (Hirschberg's linear-space
//! longest common subsequence, run between common router entries) and the
//! ed script written from it, as C Tor's `gen_ed_diff` and
//! `consdiff_gen_diff` make them.

use std::borrow::Cow;

use super::{apply::apply_ed_diff, hex_upper, ConsDiffError, Which, DIFF_VERSION_LINE};

/// The most lines the quadratic matching may be given at once, on either
/// side (C Tor's `MAX_LINE_COUNT`).
pub(super) const MAX_LINE_COUNT: usize = 10_000;

/// The line that starts the signatures, which are dropped from the base
/// before matching (they are not signed, so their encoding may vary).
const SIGNATURES_START: &str = "directory-signature ";

/// A run of lines of one document: `len` lines from index `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slice {
    pub(super) off: usize,
    pub(super) len: usize,
}

impl Slice {
    /// Lines `start..end` (`start <= end`).
    pub(super) fn new(start: usize, end: usize) -> Slice {
        Slice {
            off: start,
            len: end.saturating_sub(start),
        }
    }

    fn end(self) -> usize {
        self.off + self.len
    }
}

/// For each prefix length `j` of `s2` (0 to `s2.len`), the length of the
/// longest common subsequence of `s1` and that prefix. With `forward`
/// false both runs are read from their ends instead, so entry `j` is about
/// the last `j` lines.
pub(super) fn lcs_lengths(
    l1: &[&str],
    s1: Slice,
    l2: &[&str],
    s2: Slice,
    forward: bool,
) -> Vec<u32> {
    let mut row = vec![0u32; s2.len + 1];
    let mut prev = vec![0u32; s2.len + 1];
    let a = &l1[s1.off..s1.end()];
    let b = &l2[s2.off..s2.end()];
    for i in 0..a.len() {
        let line1 = if forward { a[i] } else { a[a.len() - 1 - i] };
        prev.copy_from_slice(&row);
        for j in 0..b.len() {
            let line2 = if forward { b[j] } else { b[b.len() - 1 - j] };
            row[j + 1] = if line1 == line2 {
                prev[j] + 1
            } else {
                row[j].max(prev[j + 1])
            };
        }
    }
    row
}

/// Drops the lines both runs start with, then those both end with.
pub(super) fn trim_slices(l1: &[&str], s1: &mut Slice, l2: &[&str], s2: &mut Slice) {
    while s1.len > 0 && s2.len > 0 && l1[s1.off] == l2[s2.off] {
        s1.off += 1;
        s1.len -= 1;
        s2.off += 1;
        s2.len -= 1;
    }
    while s1.len > 0 && s2.len > 0 && l1[s1.end() - 1] == l2[s2.end() - 1] {
        s1.len -= 1;
        s2.len -= 1;
    }
}

/// The index of the first line of run `s` of `l` equal to `line`.
pub(super) fn slice_string_pos(l: &[&str], s: Slice, line: &str) -> Option<usize> {
    (s.off..s.end()).find(|&i| l[i] == line)
}

/// The base case of the matching, `s1` having at most one line: that line
/// is kept if `s2` has it (its first copy there is kept too), and every
/// other line of both runs is marked changed.
pub(super) fn set_changed(
    changed1: &mut [bool],
    changed2: &mut [bool],
    l1: &[&str],
    s1: Slice,
    l2: &[&str],
    s2: Slice,
) {
    let mut keep = None;
    if s1.len == 1 {
        keep = slice_string_pos(l2, s2, l1[s1.off]);
        if keep.is_none() {
            changed1[s1.off] = true;
        }
    }
    for (i, c) in changed2.iter_mut().enumerate().take(s2.end()).skip(s2.off) {
        if Some(i) != keep {
            *c = true;
        }
    }
}

/// The split point of `s2` for the halves `top` and `bot` of the first run
/// that keeps the common subsequence longest (the first such column).
fn optimal_column_to_split(l1: &[&str], top: Slice, bot: Slice, l2: &[&str], s2: Slice) -> usize {
    let lens_top = lcs_lengths(l1, top, l2, s2, true);
    let lens_bot = lcs_lengths(l1, bot, l2, s2, false);
    let mut column = 0;
    let mut best = None;
    for i in 0..=s2.len {
        let sum = lens_top[i] + lens_bot[s2.len - i];
        if best.is_none_or(|b| sum > b) {
            column = i;
            best = Some(sum);
        }
    }
    column
}

/// Marks the lines of run `s1` of `l1` that the shortest edit deletes
/// (`changed1`) and those of run `s2` of `l2` it adds (`changed2`).
/// Recursion halves `s1` each time, so its depth is logarithmic.
pub(super) fn calc_changes(
    l1: &[&str],
    mut s1: Slice,
    l2: &[&str],
    mut s2: Slice,
    changed1: &mut [bool],
    changed2: &mut [bool],
) {
    trim_slices(l1, &mut s1, l2, &mut s2);
    if s1.len <= 1 {
        set_changed(changed1, changed2, l1, s1, l2, s2);
    } else if s2.len <= 1 {
        set_changed(changed2, changed1, l2, s2, l1, s1);
    } else {
        let mid = s1.len / 2;
        let top = Slice::new(s1.off, s1.off + mid);
        let bot = Slice::new(s1.off + mid, s1.end());
        let mid2 = optimal_column_to_split(l1, top, bot, l2, s2);
        let left = Slice::new(s2.off, s2.off + mid2);
        let right = Slice::new(s2.off + mid2, s2.end());
        calc_changes(l1, top, l2, left, changed1, changed2);
        calc_changes(l1, bot, l2, right, changed1, changed2);
    }
}

/// The value of a base64 character, or `None` (also for `=`, space and
/// everything else).
fn base64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// The identity of a router line (assumed to start with "r "): the run of
/// base64 characters after the first space following the nickname. `None`
/// if there is no such space or the run is empty.
pub(super) fn get_id_hash(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    if b.len() < 2 {
        return None;
    }
    let start = 2 + b[2..].iter().position(|&c| c == b' ')? + 1;
    let len = b[start..]
        .iter()
        .take_while(|&&c| base64_value(c).is_some())
        .count();
    if len == 0 {
        return None;
    }
    Some(&line[start..start + len])
}

/// Whether `line` is a router entry: "r ", a nickname, a space and an
/// identity.
pub(super) fn is_valid_router_entry(line: &str) -> bool {
    line.starts_with("r ") && get_id_hash(line).is_some()
}

/// The index of the first router line after `cur` (which may be -1), or
/// the number of lines if there is none.
pub(super) fn next_router(cons: &[&str], cur: isize) -> isize {
    let from = usize::try_from(cur + 1).unwrap_or(0);
    match cons
        .iter()
        .skip(from)
        .position(|l| is_valid_router_entry(l))
    {
        Some(p) => (from + p) as isize,
        None => cons.len() as isize,
    }
}

/// Compares two identities by base64 value (not by ASCII). Each ends at its
/// end or its first non-base64 character; a proper prefix is lower; `None`
/// (no router seen yet) is lower than everything.
pub(super) fn base64cmp(h1: Option<&str>, h2: Option<&str>) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (a, b) = match (h1, h2) {
        (None, None) => return Equal,
        (None, Some(_)) => return Less,
        (Some(_), None) => return Greater,
        (Some(a), Some(b)) => (a.as_bytes(), b.as_bytes()),
    };
    let mut k = 0;
    loop {
        let av = a.get(k).copied().and_then(base64_value);
        let bv = b.get(k).copied().and_then(base64_value);
        match (av, bv) {
            (None, None) => return Equal,
            (None, Some(_)) => return Less,
            (Some(_), None) => return Greater,
            (Some(x), Some(y)) if x != y => return x.cmp(&y),
            _ => {}
        }
        k += 1;
        match (k == a.len(), k == b.len()) {
            (true, true) => return Equal,
            (true, false) => return Less,
            (false, true) => return Greater,
            (false, false) => {}
        }
    }
}

/// The identities of the previous and the current router line of one
/// document, to check that they increase.
#[derive(Default)]
struct RouterIds<'a> {
    last: Option<&'a str>,
    hash: Option<&'a str>,
}

/// Moves `*idx` to the next router line of `cons` (or to its end) and
/// checks that its identity is above the previous one.
fn find_next_router_line<'a>(
    cons: &[&'a str],
    which: Which,
    idx: &mut isize,
    ids: &mut RouterIds<'a>,
) -> Result<(), ConsDiffError> {
    *idx = next_router(cons, *idx);
    if let Some(line) = usize::try_from(*idx).ok().and_then(|i| cons.get(i)) {
        ids.last = ids.hash;
        ids.hash = get_id_hash(line);
        if ids.hash.is_none() || base64cmp(ids.hash, ids.last).is_le() {
            return Err(ConsDiffError::Unsorted(which));
        }
    }
    Ok(())
}

/// The base's lines before its signatures (the first line starting with
/// `directory-signature `), and the command deleting the signatures if
/// there are any.
fn strip_signatures<'a, 'b>(cons: &'b [&'a str]) -> (&'b [&'a str], Option<String>) {
    match cons.iter().position(|l| l.starts_with(SIGNATURES_START)) {
        Some(i) => (&cons[..i], Some(format!("{},$d", i + 1))),
        None => (cons, None),
    }
}

/// The ed script turning `cons1` into `cons2` (C Tor's `gen_ed_diff`),
/// commands in descending order of line number. Added lines borrow from
/// `cons2`.
pub(super) fn gen_ed_diff<'a>(
    cons1: &[&str],
    cons2: &[&'a str],
) -> Result<Vec<Cow<'a, str>>, ConsDiffError> {
    let (cons1, remove_trailer) = strip_signatures(cons1);
    let mut result: Vec<Cow<'a, str>> = Vec::new();
    if let Some(cmd) = remove_trailer {
        result.push(Cow::Owned(cmd));
    }

    let len1 = cons1.len() as isize;
    let len2 = cons2.len() as isize;
    let mut changed1 = vec![false; cons1.len()];
    let mut changed2 = vec![false; cons2.len()];
    let (mut i1, mut i2): (isize, isize) = (-1, -1);
    let (mut start1, mut start2): (isize, isize) = (0, 0);
    let mut ids1 = RouterIds::default();
    let mut ids2 = RouterIds::default();

    // Walk both documents one router entry at a time, stopping on each
    // identity they share, and match only the lines between two stops.
    // Each pass moves at least one index forward, so this ends.
    while i1 < len1 || i2 < len2 {
        if i1 < len1 {
            find_next_router_line(cons1, Which::Base, &mut i1, &mut ids1)?;
        }
        if i2 < len2 {
            find_next_router_line(cons2, Which::Target, &mut i2, &mut ids2)?;
        }
        if i1 < len1 || i2 < len2 {
            let mut cmp = base64cmp(ids1.hash, ids2.hash);
            while cmp.is_ne() {
                if i1 < len1 && cmp.is_lt() {
                    find_next_router_line(cons1, Which::Base, &mut i1, &mut ids1)?;
                    if i1 == len1 {
                        i2 = len2;
                        break;
                    }
                } else if i2 < len2 && cmp.is_gt() {
                    find_next_router_line(cons2, Which::Target, &mut i2, &mut ids2)?;
                    if i2 == len2 {
                        i1 = len1;
                        break;
                    }
                } else {
                    i1 = len1;
                    i2 = len2;
                    break;
                }
                cmp = base64cmp(ids1.hash, ids2.hash);
            }
        }
        // The indices only grow from 0, so these are not negative.
        let (e1, e2) = (i1.max(0) as usize, i2.max(0) as usize);
        let (b1, b2) = (start1.max(0) as usize, start2.max(0) as usize);
        if e1 - b1 > MAX_LINE_COUNT || e2 - b2 > MAX_LINE_COUNT {
            return Err(ConsDiffError::TooFewCommonIds);
        }
        calc_changes(
            cons1,
            Slice::new(b1, e1),
            cons2,
            Slice::new(b2, e2),
            &mut changed1,
            &mut changed2,
        );
        start1 = i1;
        start2 = i2;
    }

    // One command per run of changes, from the end backwards.
    let is1 = |i: isize| i >= 0 && changed1[i as usize];
    let is2 = |i: isize| i >= 0 && changed2[i as usize];
    let (mut i1, mut i2) = (len1 - 1, len2 - 1);
    while i1 >= 0 || i2 >= 0 {
        if !is1(i1) && !is2(i2) {
            if i1 >= 0 {
                i1 -= 1;
            }
            if i2 >= 0 {
                i2 -= 1;
            }
            continue;
        }
        let (end1, end2) = (i1, i2);
        while is1(i1) {
            i1 -= 1;
        }
        while is2(i2) {
            i2 -= 1;
        }
        let (start1, start2) = (i1 + 1, i2 + 1);
        let added = end2 - i2;
        let deleted = end1 - i1;
        let cmd = match (added, deleted) {
            (0, 1) => format!("{}d", start1 + 1),
            (0, _) => format!("{},{}d", start1 + 1, start1 + deleted),
            (_, 0) => format!("{start1}a"),
            (_, 1) => format!("{}c", start1 + 1),
            (_, _) => format!("{},{}c", start1 + 1, start1 + deleted),
        };
        result.push(Cow::Owned(cmd));
        if added > 0 {
            for &line in &cons2[start2 as usize..=end2 as usize] {
                if line == "." {
                    return Err(ConsDiffError::DotLine);
                }
                result.push(Cow::Borrowed(line));
            }
            result.push(Cow::Borrowed("."));
        }
    }
    Ok(result)
}

/// The whole diff as lines (C Tor's `consdiff_gen_diff`): the ed script,
/// checked to turn `cons1` into `cons2`, under the version line and the
/// `hash` line naming `digest1` (the base's, as signed) and `digest2` (the
/// target's).
pub(super) fn gen_diff<'a>(
    cons1: &[&str],
    cons2: &[&'a str],
    digest1: &[u8; 32],
    digest2: &[u8; 32],
) -> Result<Vec<Cow<'a, str>>, ConsDiffError> {
    let ed = gen_ed_diff(cons1, cons2)?;
    {
        let ed_lines: Vec<&str> = ed.iter().map(|l| l.as_ref()).collect();
        let produced = apply_ed_diff(cons1, &ed_lines, 0).map_err(|_| ConsDiffError::SelfCheck)?;
        if produced != cons2 {
            return Err(ConsDiffError::SelfCheck);
        }
    }
    let mut out = Vec::with_capacity(ed.len() + 2);
    out.push(Cow::Borrowed(DIFF_VERSION_LINE));
    out.push(Cow::Owned(format!(
        "hash {} {}",
        hex_upper(digest1),
        hex_upper(digest2)
    )));
    out.extend(ed);
    Ok(out)
}
