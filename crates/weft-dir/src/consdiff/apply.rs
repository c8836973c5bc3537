//! Applying a consensus diff: reading its header and running its ed script
//! against the base, accepting and refusing exactly what C Tor's
//! `consdiff_apply_diff` and `apply_ed_diff` accept and refuse. The work is
//! linear in the sizes of the base and the diff.

use super::{
    c_string, digest, hex_upper, join_lines, split_lines, ConsDiffError, DIFF_VERSION_LINE,
};

/// An ed command line this long or longer is refused (C Tor copies it into
/// a 128-byte buffer).
const MAX_COMMAND_LEN: usize = 127;

/// Reads a line number (0 to `i32::MAX`, decimal digits only, leading
/// zeros allowed) at the start of `s`; returns it and the rest of `s`.
fn get_linenum(s: &[u8]) -> Option<(i64, &[u8])> {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut n: i64 = 0;
    for &c in &s[..digits] {
        n = n * 10 + i64::from(c - b'0');
        if n > i64::from(i32::MAX) {
            return None;
        }
    }
    Some((n, &s[digits..]))
}

/// One parsed ed command.
struct Command {
    start: i64,
    end: i64,
    action: u8,
}

/// Parses an ed command line, given the number of base lines not yet
/// passed (`j`) and in the base (`base_len`), with C Tor's checks in C
/// Tor's order (so the same error is reported for the same line).
fn parse_command(line: &str, j: i64, base_len: i64) -> Result<Command, ConsDiffError> {
    if line.len() > MAX_COMMAND_LEN {
        return Err(ConsDiffError::CommandTooLong);
    }
    // C Tor reads the command as a C string: it ends at a NUL.
    let line = line.as_bytes();
    let line = &line[..line.iter().position(|&c| c == 0).unwrap_or(line.len())];

    let (start, mut rest) = get_linenum(line).ok_or(ConsDiffError::MissingLineNumber)?;
    let mut had_range = false;
    let mut end_was_eof = false;
    let end;
    if let [b',', after @ ..] = rest {
        had_range = true;
        if let [b'$', after @ ..] = after {
            end_was_eof = true;
            end = base_len;
            rest = after;
        } else {
            let (e, after) = get_linenum(after).ok_or(ConsDiffError::MissingRangeEnd)?;
            end = e;
            rest = after;
        }
        if end <= start {
            return Err(ConsDiffError::InvalidRange);
        }
    } else {
        end = start;
    }
    if end > j {
        return Err(ConsDiffError::NotReverseOrder);
    }
    let action = match rest {
        [] => return Err(ConsDiffError::NoCommand),
        [a] => *a,
        _ => return Err(ConsDiffError::CommandNotOneChar),
    };
    if !matches!(action, b'a' | b'c' | b'd') {
        return Err(ConsDiffError::UnknownCommand);
    }
    if end_was_eof && action != b'd' {
        return Err(ConsDiffError::DollarNotDelete);
    }
    if had_range && action == b'a' {
        return Err(ConsDiffError::RangeWithAppend);
    }
    Ok(Command { start, end, action })
}

/// Runs the ed script in `diff` from line `first` on `cons1` (C Tor's
/// `apply_ed_diff`). Commands must come in strictly descending order of
/// the lines they touch; the result borrows every line from the inputs.
pub(super) fn apply_ed_diff<'a>(
    cons1: &[&'a str],
    diff: &[&'a str],
    first: usize,
) -> Result<Vec<&'a str>, ConsDiffError> {
    let base_len = cons1.len() as i64;
    // The base lines before `j` are not yet passed; after a change or a
    // delete at line 0, `j` is -1 and every later command is refused.
    let mut j = base_len;
    // Built from the end backwards, reversed at the end.
    let mut out: Vec<&'a str> = Vec::new();
    let mut i = first;
    while i < diff.len() {
        let cmd = parse_command(diff[i], j, base_len)?;
        while j > cmd.end {
            out.push(cons1[(j - 1) as usize]);
            j -= 1;
        }
        if cmd.action != b'a' {
            j = cmd.start - 1;
        }
        if cmd.action != b'd' {
            let cmd_line = i;
            i += 1;
            while i < diff.len() && diff[i] != "." {
                i += 1;
                if i == diff.len() {
                    return Err(ConsDiffError::UnterminatedInsert);
                }
            }
            if i - 1 == cmd_line {
                return Err(ConsDiffError::EmptyInsert);
            }
            out.extend(diff[cmd_line + 1..i].iter().rev());
        }
        i += 1;
    }
    while j > 0 {
        out.push(cons1[(j - 1) as usize]);
        j -= 1;
    }
    out.reverse();
    Ok(out)
}

/// The base and target digests a diff's header names (C Tor's
/// `consdiff_get_digests`), from the diff's lines.
pub(super) fn get_digests(diff: &[&str]) -> Result<([u8; 32], [u8; 32]), ConsDiffError> {
    let [format, hash_line, ..] = diff else {
        return Err(ConsDiffError::TooShort);
    };
    if *format != DIFF_VERSION_LINE {
        return Err(ConsDiffError::UnknownFormat);
    }
    // C Tor copies the line into a C string: it ends at a NUL.
    let hash_line = hash_line.split('\0').next().unwrap_or_default();
    let words: Vec<&str> = hash_line.splitn(4, ' ').collect();
    let [kw, h1, h2] = words[..] else {
        return Err(ConsDiffError::NoDigests);
    };
    if kw != "hash" {
        return Err(ConsDiffError::NoDigests);
    }
    if h1.len() != 64 || h2.len() != 64 {
        return Err(ConsDiffError::DigestLength);
    }
    let mut d1 = [0u8; 32];
    let mut d2 = [0u8; 32];
    hex::decode_to_slice(h1, &mut d1).map_err(|_| ConsDiffError::MalformedDigest)?;
    hex::decode_to_slice(h2, &mut d2).map_err(|_| ConsDiffError::MalformedDigest)?;
    Ok((d1, d2))
}

/// The base and target digests named in a diff's header: the SHA3-256 of
/// the base's signed part and of the whole target (C Tor's
/// `consdiff_get_digests`). The diff must be whole lines.
pub fn diff_digests(diff: &str) -> Result<([u8; 32], [u8; 32]), ConsDiffError> {
    get_digests(&split_lines(diff)?)
}

/// Applies a diff given as lines to a base given as lines whose digest as
/// signed is `digest1` (C Tor's `consdiff_apply_diff`).
pub(super) fn apply_diff(
    cons1: &[&str],
    diff: &[&str],
    digest1: &[u8; 32],
) -> Result<String, ConsDiffError> {
    let (want1, want2) = get_digests(diff)?;
    if want1 != *digest1 {
        return Err(ConsDiffError::BaseDigestMismatch {
            expected: hex_upper(&want1),
            found: hex_upper(digest1),
        });
    }
    let cons2 = apply_ed_diff(cons1, diff, 2)?;
    let text = c_string(join_lines(&cons2));
    let got2 = digest(text.as_bytes());
    if got2 != want2 {
        return Err(ConsDiffError::ResultDigestMismatch {
            expected: hex_upper(&want2),
            found: hex_upper(&got2),
        });
    }
    Ok(text)
}
