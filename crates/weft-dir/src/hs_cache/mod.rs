//! The HSDir's v3 onion-service descriptor cache (`HSDir=2`), sans-IO, as
//! C Tor's `hs_cache.c` keeps it "as dir": descriptors indexed by blinded
//! key, a new one stored only if its revision counter is above the cached
//! one's, each dropped once its `descriptor-lifetime` has passed since it
//! was stored (`cache_clean_v3_as_dir`), and the oldest dropped first when
//! memory is short (`hs_cache_handle_oom`). Time comes in as Unix seconds.
//!
//! * [`parse`] checks an upload's outer layer (certificate, signature,
//!   lifetime, size);
//! * [`HsDirCache`] is the store: one owner (weft's controller), which
//!   hands out each change as an [`HsDirUpdate`];
//! * [`HsDirIndex`] is a reader's copy, built from those updates (each
//!   worker has one, and answers fetches from it without asking anyone);
//!   the descriptor text is shared (`Arc`), not copied;
//! * [`http`] reads the `/tor/hs/3/` requests and writes C's answers.

pub mod http;
pub mod parse;
#[doc(hidden)]
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

pub use parse::{check_descriptor, CheckedDescriptor, Refused, HS_DESC_MAX_LEN};

/// C's `HS_CACHE_MAX_AGE` + `HS_CACHE_MAX_SKEW` (`hs_cache_max_entry_lifetime`):
/// where the OOM handler's cutoff starts.
pub const MAX_ENTRY_AGE_SECS: u64 = 2 * 24 * 3600 + 24 * 3600;
/// The OOM handler's cutoff step: an hour, or two minutes on a testing
/// network (C's `hs_cache_handle_oom`).
pub const OOM_STEP_SECS: u64 = 3600;
/// [`OOM_STEP_SECS`] under `TestingTorNetwork`.
pub const OOM_STEP_SECS_TESTING: u64 = 120;
/// Bytes counted for one entry beyond its text: the store's entry and map
/// slot, and one index entry and slot for each of up to 16 readers (the
/// workers' copies share the text). Measured in `tests.rs`
/// (`five_thousand_descriptors_measured`).
pub const ENTRY_OVERHEAD: u64 = 128 + 16 * 64;

/// One stored descriptor.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The text, as uploaded and as served.
    pub text: Arc<[u8]>,
    /// Its revision counter.
    pub revision: u64,
    /// When it was stored (Unix seconds).
    pub stored_at: u64,
    /// Its lifetime (seconds).
    pub lifetime_secs: u32,
}

impl Entry {
    /// The first second it is expired at: C drops an entry once
    /// `stored_at <= now - lifetime`.
    pub fn expires_at(&self) -> u64 {
        self.stored_at + u64::from(self.lifetime_secs)
    }

    /// The bytes counted for it in MaxMemInQueues.
    pub fn cost(&self) -> u64 {
        self.text.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A change of the cache, for the readers' copies.
#[derive(Debug, Clone)]
pub enum HsDirUpdate {
    /// A descriptor stored (it replaces any under the same key).
    Stored {
        /// The blinded key.
        key: [u8; 32],
        /// Its text.
        text: Arc<[u8]>,
        /// When it expires (Unix seconds).
        expires_at: u64,
    },
    /// Descriptors removed (expired, or freed for memory).
    Removed(Vec<[u8; 32]>),
}

/// The store (see the module docs). Keys are chosen by uploaders, so the
/// map keeps std's randomly keyed hasher.
#[derive(Debug, Default)]
pub struct HsDirCache {
    entries: HashMap<[u8; 32], Entry>,
    bytes: u64,
}

impl HsDirCache {
    /// Store a checked descriptor at `now`: refused if the cache holds one
    /// for its key with a revision counter at least as high (C's
    /// `cache_store_v3_as_dir`). On success, the update for the readers.
    pub fn store(&mut self, d: CheckedDescriptor, now: u64) -> Result<HsDirUpdate, Refused> {
        if let Some(old) = self.entries.get(&d.blinded_key) {
            if old.revision >= d.revision {
                return Err(Refused::OldRevision);
            }
        }
        let entry = Entry {
            text: d.text.into(),
            revision: d.revision,
            stored_at: now,
            lifetime_secs: d.lifetime_secs,
        };
        let update = HsDirUpdate::Stored {
            key: d.blinded_key,
            text: entry.text.clone(),
            expires_at: entry.expires_at(),
        };
        self.bytes += entry.cost();
        if let Some(old) = self.entries.insert(d.blinded_key, entry) {
            self.bytes = self.bytes.saturating_sub(old.cost());
        }
        Ok(update)
    }

    /// The descriptor stored under `key`.
    pub fn get(&self, key: &[u8; 32]) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Descriptors held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes counted (texts plus [`ENTRY_OVERHEAD`] each).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// C's `cache_clean_v3_as_dir(now, cutoff)`: remove every entry stored
    /// at or before `cutoff`, or (with `None`) every entry whose lifetime
    /// has passed. Returns the bytes freed and the update.
    pub fn clean(&mut self, now: u64, cutoff: Option<u64>) -> (u64, Option<HsDirUpdate>) {
        let mut removed = Vec::new();
        let mut freed = 0;
        self.entries.retain(|key, e| {
            let cut = cutoff.unwrap_or_else(|| now.saturating_sub(u64::from(e.lifetime_secs)));
            if e.stored_at > cut {
                return true;
            }
            freed += e.cost();
            removed.push(*key);
            false
        });
        self.bytes = self.bytes.saturating_sub(freed);
        let update = (!removed.is_empty()).then_some(HsDirUpdate::Removed(removed));
        (freed, update)
    }

    /// C's `hs_cache_handle_oom`: free at least `min_remove` bytes, oldest
    /// first: everything stored more than K seconds ago, K starting at
    /// [`MAX_ENTRY_AGE_SECS`] and shrinking by `step` until enough is freed
    /// or the cache is empty. Returns the bytes freed and the update.
    pub fn handle_oom(&mut self, now: u64, min_remove: u64, step: u64) -> (u64, Vec<[u8; 32]>) {
        let mut freed = 0;
        let mut keys = Vec::new();
        let mut k = MAX_ENTRY_AGE_SECS as i64;
        let step = step.max(1) as i64;
        while freed < min_remove && k >= 0 && !self.entries.is_empty() {
            let cutoff = now.saturating_sub(k as u64);
            let (f, u) = self.clean(now, Some(cutoff));
            freed += f;
            if let Some(HsDirUpdate::Removed(mut r)) = u {
                keys.append(&mut r);
            }
            k -= step;
        }
        (freed, keys)
    }
}

/// A reader's copy of the cache (a worker's): the texts shared with the
/// store, each with its expiry so that an expired descriptor is not served
/// between two cleanings.
#[derive(Debug, Default)]
pub struct HsDirIndex {
    entries: HashMap<[u8; 32], (Arc<[u8]>, u64)>,
}

impl HsDirIndex {
    /// Apply one change of the store.
    pub fn apply(&mut self, u: &HsDirUpdate) {
        match u {
            HsDirUpdate::Stored {
                key,
                text,
                expires_at,
            } => {
                self.entries.insert(*key, (text.clone(), *expires_at));
            }
            HsDirUpdate::Removed(keys) => {
                for k in keys {
                    self.entries.remove(k);
                }
            }
        }
    }

    /// The descriptor for `key` if it has not expired at `now`.
    pub fn get(&self, key: &[u8; 32], now: u64) -> Option<&Arc<[u8]>> {
        self.entries
            .get(key)
            .filter(|(_, exp)| now < *exp)
            .map(|(t, _)| t)
    }

    /// Descriptors held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
