//! The directory cache on disk, in DataDirectory, under C Tor's file
//! names: `cached-certs`, `cached-consensus`,
//! `cached-microdesc-consensus`, `cached-microdescs`,
//! `cached-descriptors`. Written whole (a temporary file renamed over the
//! old one) after each snapshot; read at start and checked again as if
//! fetched (certificates, consensus signatures and freshness, each
//! document's digest against the consensus), so a restarted cache serves
//! at once and a damaged file only costs a fetch.

use std::path::Path;
use std::time::SystemTime;

use super::{split_certs, split_descriptors, split_microdescs, CacheInputs, DirDocuments, Method};
use crate::consensus::{verify_consensus, AuthorityCerts, ConsensusFlavor};

const CERTS: &str = "cached-certs";
const NS: &str = "cached-consensus";
const MD: &str = "cached-microdesc-consensus";
const MDS: &str = "cached-microdescs";
const DESCS: &str = "cached-descriptors";

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(name))
}

/// Write the snapshot's documents to `dir`.
pub fn save(dir: &Path, docs: &DirDocuments) -> std::io::Result<()> {
    let certs: String = docs.certs.iter().map(|c| &*c.text).collect();
    write(dir, CERTS, certs.as_bytes())?;
    for (flavor, name) in [
        (ConsensusFlavor::Plain, NS),
        (ConsensusFlavor::Microdesc, MD),
    ] {
        if let Some(c) = docs.consensus(flavor) {
            write(dir, name, c.text())?;
        }
    }
    let mut mds: Vec<_> = docs.microdescs.iter().collect();
    mds.sort_by_key(|(d, _)| **d);
    let mds: String = mds.into_iter().map(|(_, t)| &**t).collect();
    write(dir, MDS, mds.as_bytes())?;
    let mut descs: Vec<_> = docs.descs.iter().collect();
    descs.sort_by_key(|(d, _)| **d);
    let descs: String = descs.into_iter().map(|(_, d)| &*d.text).collect();
    write(dir, DESCS, descs.as_bytes())
}

/// Read what `dir` holds, keeping only what verifies at `now` against the
/// `trusted` authorities (None: no usable consensus).
pub fn load(dir: &Path, trusted: &[[u8; 20]], now: SystemTime) -> Option<CacheInputs> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let certs_text = read(CERTS)?;
    let certs = AuthorityCerts::parse(&certs_text, trusted, now).ok()?;
    let mut inputs = CacheInputs {
        certs: split_certs(&certs_text, trusted, now),
        ..CacheInputs::default()
    };
    for (flavor, name) in [
        (ConsensusFlavor::Microdesc, MD),
        (ConsensusFlavor::Plain, NS),
    ] {
        let Some(text) = read(name) else { continue };
        match verify_consensus(&text, flavor, &certs, trusted, now) {
            Ok(s) => inputs.consensus.push((s, text)),
            Err(e) => tracing::info!("{name} on disk not used: {e}"),
        }
    }
    if inputs.consensus.is_empty() {
        return None;
    }
    if let Some(t) = read(MDS) {
        for (d, md) in split_microdescs(&t) {
            inputs.microdescs.insert(d, md.into());
        }
    }
    if let Some(t) = read(DESCS) {
        for (d, doc) in split_descriptors(&t) {
            inputs.descs.insert(d, doc);
        }
    }
    Some(inputs)
}

/// The compression methods a snapshot serves (for logs).
pub fn methods() -> String {
    Method::ALL
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ")
}
