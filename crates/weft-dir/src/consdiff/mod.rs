//! Consensus diffs (dir-spec "consensus diffs", proposal 140, the
//! `DirCache=2` protocol): making a diff from one consensus to a newer one
//! and applying a diff received from a directory cache.
//!
//! This module owns the diff format and nothing else: no I/O, no storage,
//! no choice of which consensuses to diff. The output is byte-for-byte
//! what C Tor's `consensus_diff_generate` (`consdiff.c`) produces for the
//! same two documents, and [`apply`] accepts and refuses exactly the diffs
//! C Tor's `consensus_diff_apply` does:
//!
//! * [`generate`] finds the shortest edit between the two documents one
//!   router entry at a time (entries are sorted by identity, so only the
//!   lines between two common `r ` lines are compared), refuses documents
//!   whose entries are out of order, and emits an ed script in reverse
//!   order under a `network-status-diff-version 1` / `hash <base> <target>`
//!   header;
//! * [`apply`] checks the header, checks the base's digest, runs the ed
//!   script (only `a`, `c` and `d`, commands strictly descending) and
//!   checks the result's digest.
//!
//! The `hash` line names the base by the SHA3-256 of its signed part
//! ([`digest_as_signed`], what a client sends in
//! `X-Or-Diff-From-Consensus`) and the target by the SHA3-256 of the whole
//! document ([`digest`]).
//!
//! Work is bounded as in C Tor: applying is linear in the sizes of the base
//! and the diff; generating is quadratic only within a run of lines between
//! two common router entries, and such a run may not exceed 10 000 lines.

mod apply;
mod gen;
#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod tests;

use sha3::{Digest as _, Sha3_256};

pub use apply::diff_digests;

/// The first line of every consensus diff.
pub const DIFF_VERSION_LINE: &str = "network-status-diff-version 1";

/// A line longer than this (without its newline) makes the whole document
/// invalid (C Tor's `CONSENSUS_LINE_MAX_LEN`).
pub const MAX_LINE_LEN: usize = 1 << 20;

/// Which of the two documents given to [`generate`] an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The older consensus, the one the diff starts from.
    Base,
    /// The newer consensus, the one the diff produces.
    Target,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Which::Base => "base",
            Which::Target => "target",
        })
    }
}

/// Why a diff could not be made or applied. Each variant is one of the
/// reasons C Tor's `consdiff.c` gives for the same refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsDiffError {
    /// A document (consensus or diff) does not end with a newline.
    #[error("document does not end with a newline")]
    NoFinalNewline,
    /// A document has a line longer than [`MAX_LINE_LEN`].
    #[error("document has a line longer than {MAX_LINE_LEN} bytes")]
    LineTooLong,
    /// A consensus's router entries are not in strictly increasing order of
    /// identity.
    #[error("the {0} consensus doesn't have its router entries sorted properly")]
    Unsorted(Which),
    /// A line that the diff would have to add is a lone ".".
    #[error("one of the lines to be added is \".\"")]
    DotLine,
    /// More than 10 000 lines lie between two router entries common to both
    /// consensuses.
    #[error("too few common router ids")]
    TooFewCommonIds,
    /// The ed script made does not turn the base into the target (never
    /// expected, except for a base whose signature section is a single
    /// line, which C Tor refuses too).
    #[error("the generated ed diff does not produce the target consensus")]
    SelfCheck,
    /// The diff has fewer than two lines.
    #[error("the consensus diff is too short")]
    TooShort,
    /// The diff's first line is not [`DIFF_VERSION_LINE`].
    #[error("the consensus diff format is not known")]
    UnknownFormat,
    /// The diff's second line is not `hash <hex> <hex>`.
    #[error("the consensus diff does not include the necessary digests")]
    NoDigests,
    /// A digest in the `hash` line is not 64 characters long.
    #[error("the consensus diff includes base16-encoded digests of incorrect size")]
    DigestLength,
    /// A digest in the `hash` line is not hexadecimal.
    #[error("the consensus diff includes malformed digests")]
    MalformedDigest,
    /// The base consensus is not the one the diff was made from.
    #[error("the base consensus digest {found} is not the {expected} the diff names")]
    BaseDigestMismatch {
        /// The digest named in the diff (upper-case hex).
        expected: String,
        /// The base's digest as signed (upper-case hex).
        found: String,
    },
    /// Applying the diff did not produce the consensus it names.
    #[error("the resulting consensus digest {found} is not the {expected} the diff names")]
    ResultDigestMismatch {
        /// The digest named in the diff (upper-case hex).
        expected: String,
        /// The result's digest (upper-case hex).
        found: String,
    },
    /// An ed command line is 128 bytes or longer.
    #[error("an ed command was far too long")]
    CommandTooLong,
    /// An ed command does not start with a line number.
    #[error("an ed command was missing a line number")]
    MissingLineNumber,
    /// An ed command's range has no valid end after the comma.
    #[error("an ed command was missing a range end line number")]
    MissingRangeEnd,
    /// An ed command's range does not end after it starts.
    #[error("an invalid range was found in an ed command")]
    InvalidRange,
    /// An ed command touches lines at or after an earlier command's.
    #[error("the ed commands are not properly sorted in reverse order")]
    NotReverseOrder,
    /// An ed command line has a range and no command letter.
    #[error("a line with no ed command was found")]
    NoCommand,
    /// An ed command line has more than one character after its range.
    #[error("an ed command longer than one char was found")]
    CommandNotOneChar,
    /// An ed command other than `a`, `c` or `d`.
    #[error("an unrecognised ed command was found")]
    UnknownCommand,
    /// `$` ends the range of a command other than `d`.
    #[error("$ used with a command other than delete")]
    DollarNotDelete,
    /// An `a` command with a range.
    #[error("an add command after a range")]
    RangeWithAppend,
    /// The lines an `a` or `c` command inserts are not ended by ".".
    #[error("lines to be inserted don't end with a \".\"")]
    UnterminatedInsert,
    /// An `a` or `c` command inserts no lines.
    #[error("an ed command tries to insert zero lines")]
    EmptyInsert,
}

/// SHA3-256 of a whole document (C Tor's `consensus_compute_digest`): what
/// the `hash` line names the target by.
pub fn digest(doc: &[u8]) -> [u8; 32] {
    Sha3_256::digest(doc).into()
}

/// SHA3-256 of a consensus's signed part (C Tor's
/// `router_get_networkstatus_v3_sha3_as_signed`): from the first
/// `network-status-version` through the first space after the next
/// `\ndirectory-signature`. If the first `network-status-version` does not
/// start a line, or either end is missing, the whole document is hashed.
/// This is what the `hash` line names the base by.
pub fn digest_as_signed(doc: &[u8]) -> [u8; 32] {
    let (start, end) = signed_range(doc).unwrap_or((0, doc.len()));
    digest(&doc[start..end])
}

/// The bounds of the signed part, as C Tor's `router_get_hash_impl_helper`
/// finds them (start inclusive, end exclusive).
fn signed_range(doc: &[u8]) -> Option<(usize, usize)> {
    const START: &[u8] = b"network-status-version";
    const END: &[u8] = b"\ndirectory-signature";
    let start = find(doc, START)?;
    if start != 0 && doc[start - 1] != b'\n' {
        return None;
    }
    let after_start = start + START.len();
    let end = after_start + find(&doc[after_start..], END)?;
    let after_end = end + END.len();
    let space = after_end + doc[after_end..].iter().position(|&b| b == b' ')?;
    Some((start, space + 1))
}

/// The first position of `needle` (not empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether `doc` starts like a consensus diff (C Tor's
/// `looks_like_a_consensus_diff`).
pub fn looks_like_a_consensus_diff(doc: &[u8]) -> bool {
    doc.starts_with(DIFF_VERSION_LINE.as_bytes())
}

/// Makes the diff from `base` to `target` (C Tor's
/// `consensus_diff_generate`): the same text, byte for byte.
///
/// Both documents must be whole lines, each ending with a newline. The
/// diff is refused when either consensus lists its router entries out of
/// order or twice, when it would have to add a line that is just ".", or
/// when more than 10 000 lines lie between two common router entries.
///
/// If the target contains a NUL byte, the diff is cut at the first NUL in
/// it, as C Tor's callers see it (its result is a C string).
pub fn generate(base: &str, target: &str) -> Result<String, ConsDiffError> {
    let d1 = digest_as_signed(base.as_bytes());
    let d2 = digest(target.as_bytes());
    let lines1 = split_lines(base)?;
    let lines2 = split_lines(target)?;
    let diff = gen::gen_diff(&lines1, &lines2, &d1, &d2)?;
    Ok(c_string(join_lines(&diff)))
}

/// Applies `diff` to `base` and returns the new consensus (C Tor's
/// `consensus_diff_apply`).
///
/// The base must be the document the diff names by its digest as signed;
/// the result must match the diff's target digest. Both texts must be
/// whole lines, each ending with a newline.
///
/// If the result contains a NUL byte, it is cut at the first NUL and the
/// target digest is checked over what remains, as in C Tor (whose result
/// is a C string).
pub fn apply(base: &str, diff: &str) -> Result<String, ConsDiffError> {
    let d1 = digest_as_signed(base.as_bytes());
    let lines1 = split_lines(base)?;
    let diff_lines = split_lines(diff)?;
    apply::apply_diff(&lines1, &diff_lines, &d1)
}

/// Splits a document into its lines without their newlines (C Tor's
/// `consensus_split_lines`). Every line, the last included, must end with
/// a newline; an empty document has no lines.
fn split_lines(doc: &str) -> Result<Vec<&str>, ConsDiffError> {
    let mut lines = Vec::new();
    let mut rest = doc;
    while !rest.is_empty() {
        let eol = rest.find('\n').ok_or(ConsDiffError::NoFinalNewline)?;
        if eol > MAX_LINE_LEN {
            return Err(ConsDiffError::LineTooLong);
        }
        lines.push(&rest[..eol]);
        rest = &rest[eol + 1..];
    }
    Ok(lines)
}

/// Joins lines, each followed by a newline (C Tor's
/// `consensus_join_lines`).
fn join_lines<S: AsRef<str>>(lines: &[S]) -> String {
    let len = lines.iter().map(|l| l.as_ref().len() + 1).sum();
    let mut out = String::with_capacity(len);
    for l in lines {
        out.push_str(l.as_ref());
        out.push('\n');
    }
    out
}

/// `s` up to its first NUL: what C code sees of a string it built.
fn c_string(mut s: String) -> String {
    if let Some(nul) = s.find('\0') {
        s.truncate(nul);
    }
    s
}

/// Upper-case hex, as C Tor's `base16_encode`.
fn hex_upper(d: &[u8; 32]) -> String {
    hex::encode_upper(d)
}
