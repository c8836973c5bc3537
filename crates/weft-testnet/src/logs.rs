//! Reading node logs for error messages: the last lines of a file, and the
//! last lines mentioning a given string — bounded in bytes read.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// [`tail`] reads at most this many bytes from the end of a log.
const MAX_TAIL_BYTES: u64 = 256 * 1024;
/// [`grep_tail_any`] searches at most this many bytes from the end of a log
/// (tor's info.log grows by about 150 KB a minute in a test network).
const MAX_GREP_BYTES: u64 = 16 << 20;

fn read_end(path: &Path, max: u64) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        // Drop the partial first line.
        if let Some(i) = text.find('\n') {
            text.drain(..=i);
        }
    }
    Some(text)
}

/// The last `n` lines of `path` (a note if it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    match read_end(path, MAX_TAIL_BYTES) {
        Some(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        None => format!("({} not readable)", path.display()),
    }
}

/// The last `n` lines of `path` containing `needle` (case-insensitive).
pub fn grep_tail(path: &Path, needle: &str, n: usize) -> Vec<String> {
    grep_tail_any(path, &[needle], n)
}

/// The last `n` lines of `path` containing any of `needles`
/// (case-insensitive).
pub fn grep_tail_any(path: &Path, needles: &[&str], n: usize) -> Vec<String> {
    let needles: Vec<String> = needles.iter().map(|s| s.to_ascii_lowercase()).collect();
    let Some(text) = read_end(path, MAX_GREP_BYTES) else {
        return Vec::new();
    };
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            needles.iter().any(|nd| l.contains(nd))
        })
        .collect();
    hits[hits.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}
