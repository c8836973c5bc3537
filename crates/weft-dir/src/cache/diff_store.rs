//! The consensus diff store, as C Tor's `consdiffmgr.c` keeps it: recent
//! consensuses of both flavours and the diffs from each of them to the
//! latest, in DataDirectory's `diff-cache` folder (0700, files 0600), so
//! a restarted cache serves the same diffs without making them again.
//!
//! [`update`] is called on the blocking pool (never on a worker or the
//! controller's event loop) with the consensuses a new snapshot serves.
//! For each flavour it stores the consensus (deflated, as C retains old
//! consensuses), forgets the consensuses too old or too many to keep, and
//! for each kept one loads the diff to the latest from disk or makes it
//! (`consdiff::generate`). A diff is offered only once applying it to its
//! base (`consdiff::apply`, which checks both digests) gives exactly the
//! latest consensus; one loaded from disk is checked again, and each
//! compressed form must decompress to the checked text. The stored bases
//! are our own copies of consensuses that verified when fetched; a
//! damaged one changes its digest, so no client names it.
//!
//! Limits ([`Limits`]): consensuses whose valid-after is older than 72
//! hours are dropped (C's clients ask for a diff only from a consensus
//! newer than `try-diff-for-consensus-newer-than`, 72 hours by default;
//! C's caches keep up to 8192 hours within 128 files per flavour), at most
//! 72 older consensuses per flavour, 96 MiB of diffs in memory (every
//! compressed form counted, half per flavour; the oldest bases lose their
//! diff first) and 768 MiB on disk (the oldest bases and their diffs are
//! deleted first). A base without a diff is deleted: it could never be
//! served from.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::diffs::{DiffDoc, DiffSet, FlavorDiffs, DIFF_METHODS};
use super::{compress, flavor_index, Method};
use crate::consdiff;
use crate::consensus::ConsensusFlavor;

/// The folder under DataDirectory (C's name).
pub const DIR_NAME: &str = "diff-cache";

/// How much the store keeps (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Consensuses whose valid-after is older than this are dropped.
    pub max_age: Duration,
    /// Older consensuses kept per flavour (each gets a diff).
    pub max_bases: usize,
    /// Bytes of diffs held in memory, both flavours, every method.
    pub max_memory: usize,
    /// Bytes of files in the folder.
    pub max_disk: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_age: Duration::from_secs(72 * 3600),
            max_bases: 72,
            max_memory: 96 << 20,
            max_disk: 768 << 20,
        }
    }
}

/// A consensus the new snapshot serves: the target of the diffs.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Its flavour.
    pub flavor: ConsensusFlavor,
    /// Its text.
    pub text: &'a str,
    /// Its `valid-after`.
    pub valid_after: SystemTime,
}

/// What an [`update`] did (for logs and metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Diffs made now.
    pub made: usize,
    /// Diffs loaded from disk (and checked).
    pub loaded: usize,
    /// Bases no diff could be made from (C's `CDM_DIFF_ERROR`).
    pub failed: usize,
    /// Bytes of files in the folder afterwards.
    pub disk_bytes: u64,
}

fn flavor_name(f: ConsensusFlavor) -> &'static str {
    match f {
        ConsensusFlavor::Plain => "ns",
        ConsensusFlavor::Microdesc => "microdesc",
    }
}

fn ext(m: Method) -> &'static str {
    match m {
        Method::Identity => "txt",
        Method::Deflate => "z",
        Method::Gzip => "gz",
        Method::Zstd => "zst",
        Method::Lzma => "lzma",
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn base_name(flav: &str, va: u64) -> String {
    format!("consensus-{flav}-{va}")
}

fn diff_name(flav: &str, from: u64, to: u64, m: Method) -> String {
    format!("diff-{flav}-{from}-{to}.{}", ext(m))
}

/// Creates `dir` (0700) or tightens an existing one to 0700.
fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        b.mode(0o700);
        b.create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    b.create(dir)
}

/// Writes `bytes` to `dir/name` (0600) through a temporary file renamed
/// over it.
fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(&tmp)?;
    f.write_all(bytes)?;
    // No fsync: these files are a cache, and each is checked when loaded
    // (`load_diff`, a base's decompression), so one a crash cut short is
    // made again. C Tor's consensus cache does not sync either; an fsync
    // per file was most of an idle directory cache's wake-ups (issue 53).
    std::fs::rename(&tmp, dir.join(name))
}

/// The inverse of [`compress`].
pub fn decompress(method: Method, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match method {
        Method::Identity => out.extend_from_slice(data),
        Method::Deflate => {
            flate2::read::ZlibDecoder::new(data).read_to_end(&mut out)?;
        }
        Method::Gzip => {
            flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
        }
        Method::Zstd => out = zstd::decode_all(data)?,
        Method::Lzma => {
            let s =
                xz2::stream::Stream::new_lzma_decoder(u64::MAX).map_err(std::io::Error::other)?;
            xz2::read::XzDecoder::new_stream(data, s).read_to_end(&mut out)?;
        }
    }
    Ok(out)
}

/// The stored bases of `flav`: (valid-after, file name), from the names.
fn list_bases(dir: &Path, flav: &str) -> std::io::Result<Vec<(u64, String)>> {
    let prefix = format!("consensus-{flav}-");
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(va) = name.strip_prefix(&prefix).and_then(|r| r.parse().ok()) {
            v.push((va, name));
        }
    }
    Ok(v)
}

/// The diff from `base` to `target`, if it applies to give exactly the
/// target.
fn verified(base: &str, diff: &str, target: &str) -> bool {
    consdiff::apply(base, diff).is_ok_and(|t| t == target)
}

/// The diff stored on disk, if every form is there and checks out.
fn load_diff(dir: &Path, names: &[String], base: &str, target: &str) -> Option<Vec<Vec<u8>>> {
    let forms: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).ok())
        .collect::<Option<_>>()?;
    let text = std::str::from_utf8(forms.first()?).ok()?;
    if !verified(base, text, target) {
        return None;
    }
    for (m, b) in DIFF_METHODS.iter().zip(&forms).skip(1) {
        if decompress(*m, b).ok()? != text.as_bytes() {
            return None;
        }
    }
    Some(forms)
}

/// Makes, checks and writes the diff; None if C would refuse to make it
/// (or it does not check out, which C's own self-check also refuses).
fn make_diff(dir: &Path, names: &[String], base: &str, target: &str) -> Option<Vec<Vec<u8>>> {
    let diff = match consdiff::generate(base, target) {
        Ok(d) => d,
        Err(e) => {
            tracing::info!("no consensus diff from a stored consensus: {e}");
            return None;
        }
    };
    if !verified(base, &diff, target) {
        tracing::warn!("a consensus diff made does not give its target; not offered");
        return None;
    }
    let mut forms = Vec::with_capacity(DIFF_METHODS.len());
    for (m, name) in DIFF_METHODS.iter().zip(names) {
        let b = compress(*m, diff.as_bytes(), true).ok()?;
        if let Err(e) = write_file(dir, name, &b) {
            tracing::warn!("cannot write {}: {e}", dir.join(name).display());
        }
        forms.push(b);
    }
    Some(forms)
}

/// One kept diff (for the disk bound).
struct Kept {
    flavor: usize,
    from_va: u64,
    key: [u8; 32],
    files: Vec<String>,
}

/// Stores the snapshot's consensuses (`targets`) in `dir` and returns the
/// diffs to them, made or loaded and checked, within `limits` at `now`.
pub fn update(
    dir: &Path,
    targets: &[Target<'_>],
    limits: &Limits,
    now: SystemTime,
) -> std::io::Result<(DiffSet, Report)> {
    ensure_dir(dir)?;
    let mut set = DiffSet::default();
    let mut report = Report::default();
    let mut keep_files: HashSet<String> = HashSet::new();
    let mut kept: Vec<Kept> = Vec::new();
    let mut flavors_done: Vec<&str> = Vec::new();
    for t in targets {
        let flav = flavor_name(t.flavor);
        flavors_done.push(flav);
        let fd = update_flavor(dir, t, limits, now, &mut report, &mut kept)?;
        set.flavors[flavor_index(t.flavor)] = fd;
    }
    for k in &kept {
        keep_files.extend(k.files.iter().cloned());
    }
    for t in targets {
        keep_files.insert(base_name(flavor_name(t.flavor), unix(t.valid_after)));
    }
    // Everything else of the flavours updated goes: old bases, bases
    // with no diff, diffs to an older target, temporary files.
    let mut sizes: HashMap<String, u64> = HashMap::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = flavors_done.iter().any(|f| {
            name.starts_with(&format!("consensus-{f}-")) || name.starts_with(&format!("diff-{f}-"))
        });
        if (ours && !keep_files.contains(&name)) || name.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        sizes.insert(name, e.metadata().map_or(0, |m| m.len()));
    }
    let mut total: u64 = sizes.values().sum();
    // The disk bound: the oldest bases and their diffs go first.
    kept.sort_by_key(|k| k.from_va);
    for k in &kept {
        if total <= limits.max_disk {
            break;
        }
        for f in &k.files {
            if std::fs::remove_file(dir.join(f)).is_ok() {
                total = total.saturating_sub(sizes.get(f).copied().unwrap_or(0));
            }
        }
        set.flavors[k.flavor].by_base.remove(&k.key);
    }
    report.disk_bytes = total;
    Ok((set, report))
}

fn update_flavor(
    dir: &Path,
    t: &Target<'_>,
    limits: &Limits,
    now: SystemTime,
    report: &mut Report,
    kept: &mut Vec<Kept>,
) -> std::io::Result<FlavorDiffs> {
    let flav = flavor_name(t.flavor);
    let to_va = unix(t.valid_after);
    let target_name = base_name(flav, to_va);
    if !dir.join(&target_name).exists() {
        write_file(
            dir,
            &target_name,
            &compress(Method::Deflate, t.text.as_bytes(), false)?,
        )?;
    }
    let mut fd = FlavorDiffs {
        target_as_signed: consdiff::digest_as_signed(t.text.as_bytes()),
        target: consdiff::digest(t.text.as_bytes()),
        by_base: HashMap::new(),
    };
    let cutoff = unix(now).saturating_sub(limits.max_age.as_secs());
    let mut bases: Vec<(u64, String)> = list_bases(dir, flav)?
        .into_iter()
        .filter(|(va, _)| *va < to_va && *va >= cutoff)
        .collect();
    bases.sort_by_key(|b| std::cmp::Reverse(b.0));
    bases.truncate(limits.max_bases);
    let budget = limits.max_memory / 2;
    let mut held = 0usize;
    for (from_va, name) in bases {
        let Some(base) = std::fs::read(dir.join(&name))
            .ok()
            .and_then(|z| decompress(Method::Deflate, &z).ok())
            .and_then(|b| String::from_utf8(b).ok())
        else {
            tracing::info!("stored consensus {name} unreadable: dropped");
            continue;
        };
        let key = consdiff::digest_as_signed(base.as_bytes());
        if key == fd.target_as_signed || fd.by_base.contains_key(&key) {
            continue;
        }
        let names: Vec<String> = DIFF_METHODS
            .iter()
            .map(|m| diff_name(flav, from_va, to_va, *m))
            .collect();
        let forms = match load_diff(dir, &names, &base, t.text) {
            Some(f) => {
                report.loaded += 1;
                f
            }
            None => match make_diff(dir, &names, &base, t.text) {
                Some(f) => {
                    report.made += 1;
                    f
                }
                None => {
                    report.failed += 1;
                    continue;
                }
            },
        };
        let size: usize = forms.iter().map(Vec::len).sum();
        if held + size > budget {
            // Older bases have bigger diffs: none of them fits either.
            break;
        }
        held += size;
        let doc = DiffDoc {
            from_valid_after: SystemTime::UNIX_EPOCH + Duration::from_secs(from_va),
            bodies: DIFF_METHODS
                .iter()
                .zip(forms)
                .map(|(m, b)| (*m, Arc::<[u8]>::from(b)))
                .collect(),
        };
        fd.by_base.insert(key, doc);
        let mut files = names;
        files.push(name);
        kept.push(Kept {
            flavor: flavor_index(t.flavor),
            from_va,
            key,
            files,
        });
    }
    Ok(fd)
}
