//! The consensus diffs a snapshot serves (`DirCache=2`, dir-spec §4.4,
//! proposal 140), as C Tor's `consdiffmgr.c` offers them: for each flavour,
//! the diffs from each older consensus the cache kept to the consensus the
//! snapshot serves, keyed by the base's SHA3-256 digest as signed (what a
//! client names in `X-Or-Diff-From-Consensus` or in a `diff/` URL), each
//! kept in the methods C Tor precompresses diffs with (identity, gzip,
//! x-tor-lzma, x-zstd: not deflate, as C's `compress_diffs_with`).
//!
//! This module owns those in-memory documents, the choice of the diff to
//! send (C's `find_best_diff`), the parsing of the digests a client names,
//! and the count of diffs served. Making, verifying and storing the diffs
//! is [`super::diff_store`]'s, on the blocking pool; a snapshot only ever
//! holds diffs that were checked to turn their base into its consensus.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::{flavor_index, Method};
use crate::consensus::ConsensusFlavor;

/// The methods C Tor keeps diffs in (`compress_diffs_with`), in the order
/// they are made.
pub const DIFF_METHODS: [Method; 4] = [Method::Identity, Method::Gzip, Method::Lzma, Method::Zstd];

/// One diff, from one base to the snapshot's consensus of its flavour.
#[derive(Debug, Clone)]
pub struct DiffDoc {
    /// The base's `valid-after`.
    pub from_valid_after: SystemTime,
    /// The diff in each of [`DIFF_METHODS`] (identity first).
    pub bodies: Vec<(Method, Arc<[u8]>)>,
}

impl DiffDoc {
    /// The diff in `method`, if kept.
    pub fn body(&self, method: Method) -> Option<&Arc<[u8]>> {
        self.bodies
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, b)| b)
    }

    /// Bytes held, every method counted.
    pub fn size(&self) -> usize {
        self.bodies.iter().map(|(_, b)| b.len()).sum()
    }
}

/// The diffs to one flavour's consensus.
#[derive(Debug, Clone, Default)]
pub struct FlavorDiffs {
    /// The target's SHA3-256 digest as signed: the diffs are served only
    /// while the snapshot's consensus of this flavour is this one.
    pub target_as_signed: [u8; 32],
    /// The target's SHA3-256 digest (the `hash` line's second digest).
    pub target: [u8; 32],
    /// Diffs by the base's SHA3-256 digest as signed. The keys are our
    /// own (at most `diff_store::Limits::max_bases`); lookups use the
    /// client's digests, so the map keeps std's keyed hasher.
    pub by_base: HashMap<[u8; 32], DiffDoc>,
}

impl FlavorDiffs {
    /// Bytes held, every diff in every method.
    pub fn size(&self) -> usize {
        self.by_base.values().map(DiffDoc::size).sum()
    }
}

/// Every diff a snapshot serves, both flavours.
#[derive(Debug, Clone, Default)]
pub struct DiffSet {
    /// `ns` (index 0) and `microdesc` (index 1).
    pub flavors: [FlavorDiffs; 2],
}

impl DiffSet {
    /// The diffs of `flavor`.
    pub fn flavor(&self, flavor: ConsensusFlavor) -> &FlavorDiffs {
        &self.flavors[flavor_index(flavor)]
    }

    /// Bytes held (both flavours, every method).
    pub fn size(&self) -> usize {
        self.flavors.iter().map(FlavorDiffs::size).sum()
    }

    /// Diffs held (both flavours).
    pub fn count(&self) -> usize {
        self.flavors.iter().map(|f| f.by_base.len()).sum()
    }

    /// C's `find_best_diff`: the first digest (in the client's order) we
    /// have a diff from wins; for it, the first method of C's
    /// precompressed preference (`prefs`) the client accepts (`accept`,
    /// bits of [`Method::bit`]). `target_as_signed` is the snapshot's
    /// consensus: diffs to another one are never offered. C's fallback to
    /// deflate finds nothing, as C keeps no deflated diff.
    pub fn find_best(
        &self,
        flavor: ConsensusFlavor,
        target_as_signed: &[u8; 32],
        digests: &[[u8; 32]],
        accept: u8,
        prefs: &[Method],
    ) -> Option<(Method, Arc<[u8]>)> {
        let f = self.flavor(flavor);
        if &f.target_as_signed != target_as_signed {
            return None;
        }
        digests.iter().find_map(|d| {
            let diff = f.by_base.get(d)?;
            prefs
                .iter()
                .filter(|m| accept & m.bit() != 0)
                .find_map(|&m| diff.body(m).map(|b| (m, b.clone())))
        })
    }
}

/// One hex SHA3-256 digest, as C's `parse_one_diff_hash` reads it:
/// exactly 64 hex digits, either case.
pub fn parse_one_diff_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    hex::decode(hex).ok().and_then(|b| b.try_into().ok())
}

/// The digests of an `X-Or-Diff-From-Consensus` value, as C's
/// `parse_or_diff_from_header`: split at single spaces, each piece
/// trimmed of white space, blank pieces skipped, pieces that are not a
/// digest ignored (so a comma-separated list names nothing, as in C).
pub fn parse_diff_from_value(value: &str) -> Vec<[u8; 32]> {
    value
        .split(' ')
        .map(|p| p.trim_matches(|c: char| c.is_ascii_whitespace()))
        .filter(|p| !p.is_empty())
        .filter_map(parse_one_diff_hash)
        .collect()
}
