//! The directory cache's documents (sans-IO): what a relay with
//! `DirCache 1` serves over BEGIN_DIR, as C Tor's caches do [dir-spec §4,
//! §6; C feature/dircache/]. This module owns the immutable snapshot
//! ([`DirDocuments`]) and how it is built from fetched texts
//! ([`CacheInputs`]); [`serve`] answers HTTP requests from a snapshot;
//! [`fetch`] gets the texts from an authority's DirPort.
//!
//! A snapshot is built off the relay's hot path (the controller's blocking
//! pool), then shared read-only by every worker (`Arc`), replaced whole
//! when a new consensus arrives: no lock anywhere. The consensus is kept
//! in every compressed form C Tor serves (deflate, gzip, x-zstd,
//! x-tor-lzma), made once per consensus; other documents are compressed
//! per request (they are small), as C Tor does. [`diffs`] are the
//! consensus diffs a snapshot serves; [`diff_store`] makes, checks and
//! keeps them in DataDirectory (`DirCache=2`).

pub mod diff_store;
#[cfg(test)]
mod diff_tests;
pub mod diffs;
pub mod fetch;
pub mod serve;
pub mod store;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::consensus::{AuthorityCerts, ConsensusFlavor, ConsensusSummary};
use crate::descriptor::signed_digest;

/// A compression method of the directory protocol (C's
/// `compress_method_t`, by its HTTP name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `identity`.
    Identity,
    /// `deflate` (zlib format; also asked for by a `.z` URL).
    Deflate,
    /// `gzip`.
    Gzip,
    /// `x-zstd`.
    Zstd,
    /// `x-tor-lzma` (xz).
    Lzma,
}

impl Method {
    /// Every method, in a fixed order (bit `i` of a method set is
    /// `ALL[i]`).
    pub const ALL: [Method; 5] = [
        Method::Identity,
        Method::Deflate,
        Method::Gzip,
        Method::Zstd,
        Method::Lzma,
    ];

    /// The `Content-Encoding` name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Identity => "identity",
            Method::Deflate => "deflate",
            Method::Gzip => "gzip",
            Method::Zstd => "x-zstd",
            Method::Lzma => "x-tor-lzma",
        }
    }

    /// The method called `name` (C's `compression_method_get_by_name`).
    pub fn by_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// This method's bit in a set.
    pub fn bit(self) -> u8 {
        1 << Method::ALL.iter().position(|m| *m == self).unwrap_or(0)
    }
}

/// Compress `data` with `method` (C Tor's levels: high for what is made
/// once, the default for per-request bodies).
pub fn compress(method: Method, data: &[u8], once: bool) -> std::io::Result<Vec<u8>> {
    use flate2::Compression;
    let level = if once {
        Compression::best()
    } else {
        Compression::default()
    };
    match method {
        Method::Identity => Ok(data.to_vec()),
        Method::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(data)?;
            e.finish()
        }
        Method::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(data)?;
            e.finish()
        }
        // Told the input's size, zstd sizes its window and tables to it;
        // streamed without it (as C Tor's `tor_compress` does), level 9
        // set up and zeroed megabytes of tables for every document, each
        // a fresh mapping to fault in (weft's malloc hands blocks over
        // 128 KiB straight back to the kernel): most of an idle directory
        // cache's CPU (issue 53). The frame is the same format.
        Method::Zstd => zstd::bulk::compress(data, if once { 9 } else { 3 }),
        Method::Lzma => {
            // C Tor's "x-tor-lzma" is the legacy .lzma ("alone") format,
            // not .xz (`lzma_alone_encoder` with preset 6, or 4 per request).
            // The dictionary is no larger than the input needs (the
            // preset's 8 MiB sized the match finder's tables, zeroed for
            // every document, as zstd's above); the stream's header says
            // the size, and any decoder takes it.
            let mut opts = xz2::stream::LzmaOptions::new_preset(if once { 6 } else { 4 })
                .map_err(std::io::Error::other)?;
            opts.dict_size(lzma_dict_size(data.len(), if once { 6 } else { 4 }));
            let stream =
                xz2::stream::Stream::new_lzma_encoder(&opts).map_err(std::io::Error::other)?;
            let mut e = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
            e.write_all(data)?;
            e.finish()
        }
    }
}

/// The LZMA dictionary for `len` bytes of input at `preset`: the preset's
/// (8 MiB at 6, 4 MiB at 4), but no more than the input rounded up to a
/// power of two, and at least liblzma's minimum (4 KiB).
fn lzma_dict_size(len: usize, preset: u32) -> u32 {
    let preset_dict: u32 = if preset >= 6 { 8 << 20 } else { 4 << 20 };
    let needed = u32::try_from(len.max(1).next_power_of_two()).unwrap_or(u32::MAX);
    needed.clamp(4096, preset_dict)
}

/// One consensus flavour as served: its text and every compressed form.
#[derive(Debug, Clone)]
pub struct ConsensusDoc {
    /// `valid-after`, `fresh-until`, `valid-until`.
    pub valid_after: SystemTime,
    /// See `valid_after`.
    pub fresh_until: SystemTime,
    /// See `valid_after`.
    pub valid_until: SystemTime,
    /// v3 identities whose signatures verified.
    pub signers: Vec<[u8; 20]>,
    /// SHA3-256 of the signed part (what `X-Or-Diff-From-Consensus`
    /// names).
    pub sha3_as_signed: [u8; 32],
    /// The document in each method, `Method::ALL` order.
    pub bodies: Vec<(Method, Arc<[u8]>)>,
}

impl ConsensusDoc {
    /// The body in `method`, if made.
    pub fn body(&self, method: Method) -> Option<&Arc<[u8]>> {
        self.bodies
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, b)| b)
    }

    /// The uncompressed text.
    pub fn text(&self) -> &[u8] {
        self.body(Method::Identity).map(|b| &b[..]).unwrap_or(&[])
    }
}

/// An authority key certificate as served.
#[derive(Debug, Clone)]
pub struct CertDoc {
    /// v3 identity.
    pub id_fp: [u8; 20],
    /// Signing-key fingerprint.
    pub sk_fp: [u8; 20],
    /// `dir-key-published`.
    pub published: SystemTime,
    /// The certificate's text.
    pub text: Arc<str>,
}

/// A server descriptor as served.
#[derive(Debug, Clone)]
pub struct DescDoc {
    /// RSA identity of the relay.
    pub fp: [u8; 20],
    /// `published`.
    pub published: SystemTime,
    /// The descriptor's text (through its signature).
    pub text: Arc<str>,
}

/// Everything the cache serves: one immutable snapshot.
#[derive(Debug, Clone, Default)]
pub struct DirDocuments {
    /// The `ns` (index 0) and `microdesc` (index 1) consensuses.
    pub consensus: [Option<ConsensusDoc>; 2],
    /// Microdescriptors by SHA-256 digest.
    pub microdescs: HashMap<[u8; 32], Arc<str>>,
    /// Server descriptors by SHA-1 digest.
    pub descs: HashMap<[u8; 20], DescDoc>,
    /// Digest of the newest descriptor of each relay.
    pub desc_by_fp: HashMap<[u8; 20], [u8; 20]>,
    /// Extra-info documents by SHA-1 digest (only ours).
    pub extras: HashMap<[u8; 20], DescDoc>,
    /// Extra-info digest of each relay (only ours).
    pub extra_by_fp: HashMap<[u8; 20], [u8; 20]>,
    /// Authority certificates.
    pub certs: Vec<CertDoc>,
    /// Our own descriptor (`/tor/server/authority`).
    pub own: Option<DescDoc>,
    /// Every newest descriptor, by relay identity, concatenated once per
    /// snapshot: `/tor/server/all` is shared, not copied per request.
    pub all_descs: Arc<[u8]>,
    /// Consensus diffs to this snapshot's consensuses (none until
    /// [`diff_store`] has made them).
    pub diffs: diffs::DiffSet,
}

impl DirDocuments {
    /// The consensus of `flavor`, if held.
    pub fn consensus(&self, flavor: ConsensusFlavor) -> Option<&ConsensusDoc> {
        self.consensus[flavor_index(flavor)].as_ref()
    }

    /// Bytes held (for logs and metrics).
    pub fn size(&self) -> usize {
        let c: usize = self
            .consensus
            .iter()
            .flatten()
            .flat_map(|c| c.bodies.iter().map(|(_, b)| b.len()))
            .sum();
        let m: usize = self.microdescs.values().map(|t| t.len()).sum();
        let d: usize = self.descs.values().map(|d| d.text.len()).sum();
        let k: usize = self.certs.iter().map(|c| c.text.len()).sum();
        c + m + d + k
    }
}

fn flavor_index(f: ConsensusFlavor) -> usize {
    match f {
        ConsensusFlavor::Plain => 0,
        ConsensusFlavor::Microdesc => 1,
    }
}

/// Texts fetched for one snapshot, already verified where that applies.
#[derive(Debug, Default)]
pub struct CacheInputs {
    /// Verified consensuses: (summary, text).
    pub consensus: Vec<(ConsensusSummary, String)>,
    /// Certificates (each checked).
    pub certs: Vec<CertDoc>,
    /// Microdescriptors by digest (each one's digest checked).
    pub microdescs: HashMap<[u8; 32], Arc<str>>,
    /// Server descriptors by digest (each listed in the ns consensus).
    pub descs: HashMap<[u8; 20], DescDoc>,
    /// Our own descriptor and extra-info, if published.
    pub own: Option<(String, String)>,
}

impl CacheInputs {
    /// The snapshot: consensuses compressed in every method, microdescs
    /// and descriptors kept only if the consensuses list them.
    pub fn build(self) -> DirDocuments {
        let mut docs = DirDocuments::default();
        let mut listed_md: Vec<[u8; 32]> = Vec::new();
        let mut listed_desc: HashMap<[u8; 20], [u8; 20]> = HashMap::new();
        for (summary, text) in &self.consensus {
            for r in &summary.relays {
                if let Some(d) = r.md_digest {
                    listed_md.push(d);
                }
                if let Some(d) = r.descriptor_digest {
                    listed_desc.insert(d, r.rsa_identity);
                }
            }
            let bodies = Method::ALL
                .iter()
                .filter_map(|&m| {
                    let b = compress(m, text.as_bytes(), true).ok()?;
                    Some((m, Arc::<[u8]>::from(b)))
                })
                .collect();
            docs.consensus[flavor_index(summary.flavor)] = Some(ConsensusDoc {
                valid_after: summary.valid_after,
                fresh_until: summary.fresh_until,
                valid_until: summary.valid_until,
                signers: summary.signed_by.clone(),
                sha3_as_signed: sha3_as_signed(text),
                bodies,
            });
        }
        let mut mds = self.microdescs;
        if docs.consensus(ConsensusFlavor::Microdesc).is_some() {
            listed_md.sort_unstable();
            mds.retain(|d, _| listed_md.binary_search(d).is_ok());
        }
        docs.microdescs = mds;
        let have_ns = docs.consensus(ConsensusFlavor::Plain).is_some();
        for (digest, d) in self.descs {
            if have_ns && !listed_desc.contains_key(&digest) {
                continue;
            }
            docs.desc_by_fp.insert(d.fp, digest);
            docs.descs.insert(digest, d);
        }
        docs.certs = self.certs;
        if let Some((desc, extra)) = self.own {
            if let Some(d) = desc_doc(&desc) {
                docs.own = Some(d.clone());
                if let Some(digest) = signed_digest(&desc) {
                    docs.desc_by_fp.entry(d.fp).or_insert(digest);
                    docs.descs.entry(digest).or_insert(d.clone());
                }
                if let Some(x) = extra_digest(&extra) {
                    docs.extra_by_fp.insert(d.fp, x);
                    docs.extras.insert(
                        x,
                        DescDoc {
                            fp: d.fp,
                            published: d.published,
                            text: Arc::from(extra.as_str()),
                        },
                    );
                }
            }
        }
        let mut newest: Vec<&DescDoc> = docs
            .desc_by_fp
            .values()
            .filter_map(|d| docs.descs.get(d))
            .collect();
        newest.sort_by_key(|d| d.fp);
        docs.all_descs = Arc::from(
            newest
                .iter()
                .map(|d| &*d.text)
                .collect::<String>()
                .as_bytes(),
        );
        docs
    }
}

/// SHA3-256 of a consensus's signed part, by C's rule
/// (`router_get_networkstatus_v3_sha3_as_signed`, the one consensus diffs
/// name their base by): see [`crate::consdiff::digest_as_signed`].
pub fn sha3_as_signed(text: &str) -> [u8; 32] {
    crate::consdiff::digest_as_signed(text.as_bytes())
}

/// The positions where lines starting with `kw` begin.
fn starts(text: &str, kw: &str) -> Vec<usize> {
    let mut v = Vec::new();
    if text.starts_with(kw) {
        v.push(0);
    }
    let pat = format!("\n{kw}");
    let mut from = 0;
    while let Some(i) = text[from..].find(&pat) {
        v.push(from + i + 1);
        from += i + 1;
    }
    v
}

/// Split text at lines starting with `kw` (what comes before the first
/// one is dropped).
fn split_at_keyword<'a>(text: &'a str, kw: &str) -> Vec<&'a str> {
    let s = starts(text, kw);
    s.iter()
        .enumerate()
        .map(|(i, &a)| &text[a..s.get(i + 1).copied().unwrap_or(text.len())])
        .collect()
}

/// Split concatenated microdescriptors into (SHA-256 digest, text).
pub fn split_microdescs(text: &str) -> Vec<([u8; 32], &str)> {
    split_at_keyword(text, "onion-key")
        .into_iter()
        .map(|md| (Sha256::digest(md.as_bytes()).into(), md))
        .collect()
}

/// A server descriptor's identity and publication time, from its
/// `fingerprint` and `published` lines.
pub fn desc_doc(text: &str) -> Option<DescDoc> {
    let mut fp = None;
    let mut published = None;
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fingerprint ") {
            let h: String = f.split_ascii_whitespace().collect();
            fp = hex::decode(h).ok().and_then(|b| b.try_into().ok());
        } else if let Some(p) = line.strip_prefix("published ") {
            published = parse_doc_time(p);
        }
    }
    Some(DescDoc {
        fp: fp?,
        published: published?,
        text: Arc::from(text),
    })
}

/// Split concatenated server descriptors into (SHA-1 digest, document).
pub fn split_descriptors(text: &str) -> Vec<([u8; 20], DescDoc)> {
    split_at_keyword(text, "router ")
        .into_iter()
        .filter_map(|d| Some((signed_digest(d)?, desc_doc(d)?)))
        .collect()
}

/// The SHA-1 digest of an extra-info document.
fn extra_digest(text: &str) -> Option<[u8; 20]> {
    use sha1::{Digest as _, Sha1};
    const KW: &str = "\nrouter-signature\n";
    let end = text.find(KW)? + KW.len();
    Some(Sha1::digest(&text.as_bytes()[..end]).into())
}

/// Split `/tor/keys/all` into certificates, keeping those that verify,
/// are valid at `now` and belong to a `trusted` authority.
pub fn split_certs(text: &str, trusted: &[[u8; 20]], now: SystemTime) -> Vec<CertDoc> {
    split_at_keyword(text, "dir-key-certificate-version")
        .into_iter()
        .filter_map(|t| {
            let certs = AuthorityCerts::parse(t, trusted, now).ok()?;
            let (id_fp, sk_fp, published) = certs.first_ids()?;
            Some(CertDoc {
                id_fp,
                sk_fp,
                published,
                text: Arc::from(t),
            })
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` (UTC).
fn parse_doc_time(s: &str) -> Option<SystemTime> {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let t = time::PrimitiveDateTime::parse(s.trim(), &fmt).ok()?;
    Some(t.assume_utc().into())
}
