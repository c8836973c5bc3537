//! Filling the directory cache from an authority's DirPort, as a C Tor
//! cache fills its own (`directory_fetches_dir_info_early`): the
//! authority certificates, both consensus flavours (each verified against
//! the configured authorities before it is served), the microdescriptors
//! the microdesc consensus lists and the server descriptors the `ns`
//! consensus lists that the last snapshot lacks, each checked against its
//! listed digest. Extra-info documents of others are not fetched (C Tor's
//! caches do not either, without `DownloadExtraInfo`).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;

use super::{split_certs, split_descriptors, split_microdescs, CacheInputs, DirDocuments};
use crate::consensus::{
    fetch_authority_certs_text, fetch_consensus_text, verify_consensus, AuthorityCerts,
    ConsensusFlavor, FetchOptions, MAX_CONSENSUS_SIZE,
};
use crate::dirport::get_document;
use crate::DirError;

/// Digests per microdescriptor request (C's `DL_PER_REQUEST` for
/// microdescs is 92... weft stays a little below any URL limit).
const MDS_PER_REQUEST: usize = 90;
/// Digests per server-descriptor request (C: 96 by digest).
const DESCS_PER_REQUEST: usize = 96;
/// Cap on one batch's answer.
const MAX_BATCH: usize = 4 * 1024 * 1024;

/// Fetch what a new snapshot needs from `dirport`; documents `prev`
/// already holds are reused. `own` is our descriptor and extra-info.
pub async fn fetch_inputs(
    dirport: SocketAddr,
    trusted: &[[u8; 20]],
    prev: Option<&DirDocuments>,
    own: Option<(String, String)>,
    now: SystemTime,
    timeout: Duration,
) -> Result<CacheInputs, DirError> {
    let certs_text = fetch_authority_certs_text(dirport, timeout).await?;
    let certs = AuthorityCerts::parse(&certs_text, trusted, now)?;
    let mut inputs = CacheInputs {
        certs: split_certs(&certs_text, trusted, now),
        own,
        ..CacheInputs::default()
    };
    for flavor in [ConsensusFlavor::Microdesc, ConsensusFlavor::Plain] {
        let opts = FetchOptions {
            flavor,
            compressed: true,
            max_size: MAX_CONSENSUS_SIZE,
            timeout,
        };
        let text = fetch_consensus_text(dirport, &opts).await?;
        let summary = verify_consensus(&text, flavor, &certs, trusted, now)?;
        inputs.consensus.push((summary, text));
    }
    // Microdescriptors and server descriptors the consensuses list.
    let mds: Vec<[u8; 32]> = inputs
        .consensus
        .iter()
        .flat_map(|(s, _)| s.relays.iter().filter_map(|r| r.md_digest))
        .collect();
    let missing = reuse(&mds, prev.map(|p| &p.microdescs), &mut inputs.microdescs);
    for batch in missing.chunks(MDS_PER_REQUEST) {
        let ids: Vec<String> = batch
            .iter()
            .map(|d| base64::engine::general_purpose::STANDARD_NO_PAD.encode(d))
            .collect();
        let path = format!("/tor/micro/d/{}", ids.join("-"));
        let got = fetch_batch(dirport, &path, timeout, batch, |t| {
            split_microdescs(t)
                .into_iter()
                .map(|(d, md)| (d, Arc::<str>::from(md)))
                .collect()
        })
        .await;
        inputs.microdescs.extend(got);
    }
    let descs: Vec<[u8; 20]> = inputs
        .consensus
        .iter()
        .flat_map(|(s, _)| s.relays.iter().filter_map(|r| r.descriptor_digest))
        .collect();
    let missing = reuse(&descs, prev.map(|p| &p.descs), &mut inputs.descs);
    for batch in missing.chunks(DESCS_PER_REQUEST) {
        let ids: Vec<String> = batch.iter().map(hex::encode_upper).collect();
        let path = format!("/tor/server/d/{}", ids.join("+"));
        let got = fetch_batch(dirport, &path, timeout, batch, split_descriptors).await;
        inputs.descs.extend(got);
    }
    Ok(inputs)
}

/// Copy into `into` what `prev` holds of `listed`; return the rest.
fn reuse<K: Hash + Eq + Copy, V: Clone>(
    listed: &[K],
    prev: Option<&HashMap<K, V>>,
    into: &mut HashMap<K, V>,
) -> Vec<K> {
    let mut missing = Vec::new();
    for d in listed {
        match prev.and_then(|p| p.get(d)) {
            Some(v) => {
                into.insert(*d, v.clone());
            }
            None => missing.push(*d),
        }
    }
    missing
}

/// GET `path` (one batch of digests) and keep the documents whose digest
/// (computed by `split`) was asked for; a failed batch is logged and
/// skipped (the next fill asks again).
async fn fetch_batch<K: Hash + Eq + Copy, V>(
    dirport: SocketAddr,
    path: &str,
    timeout: Duration,
    asked: &[K],
    split: impl Fn(&str) -> Vec<(K, V)>,
) -> Vec<(K, V)> {
    let want: HashSet<K> = asked.iter().copied().collect();
    match get_document(dirport, path, MAX_BATCH, timeout).await {
        Ok(text) => split(&text)
            .into_iter()
            .filter(|(d, _)| want.contains(d))
            .collect(),
        Err(e) => {
            tracing::debug!("directory batch {}…: {e}", &path[..path.len().min(24)]);
            Vec::new()
        }
    }
}
