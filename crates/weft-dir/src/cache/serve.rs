//! Answering a directory request from a [`DirDocuments`] snapshot
//! (sans-IO): the HTTP/1.0 request a BEGIN_DIR stream carries in, the
//! response (head and body) out, as C Tor 0.4.9's `dircache.c` answers
//! it: the same URLs, status codes and reasons, compression choice,
//! `Expires`/`Pragma` lines, the consensus's liveness and signer checks,
//! and consensus diffs (the snapshot's [`super::diffs::DiffSet`]) for a
//! client that names its consensus in `X-Or-Diff-From-Consensus` or in a
//! `diff/` URL: an unknown base gets the full consensus (the URL form gets
//! 404), as in C Tor.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;

use super::diffs::{parse_diff_from_value, parse_one_diff_hash};
use super::{compress, ConsensusDoc, DirDocuments, Method};
use crate::consensus::ConsensusFlavor;

/// Most bytes of request head C Tor reads (`MAX_HEADERS_SIZE`); a longer
/// one closes the stream.
pub const MAX_HEADERS: usize = 50_000;
/// C's `REASONABLY_LIVE_TIME`: a consensus is served until a day past its
/// valid-until (and from a day before its valid-after).
const REASONABLY_LIVE: Duration = Duration::from_secs(24 * 3600);
/// C's `MICRODESC_CACHE_LIFETIME` and `ROUTERDESC_BY_DIGEST_CACHE_LIFETIME`.
const DIGEST_LIFETIME: u64 = 48 * 3600;
/// C's `FULL_DIR_CACHE_LIFETIME`.
const FULL_DIR_LIFETIME: u64 = 60;
/// Answers made per request above this are sent uncompressed (see
/// `Responder::owned`): a few milliseconds of deflate at most (a
/// microdescriptor batch, 92 of them, is about 40 KB).
pub const MAX_COMPRESS_PER_REQUEST: usize = 128 * 1024;
/// Certificates' lifetime in C's `handle_get_keys`.
const KEYS_LIFETIME: u64 = 3600;

/// C's order of preference for documents kept compressed.
const PREF_PRECOMPRESSED: [Method; 5] = [
    Method::Lzma,
    Method::Zstd,
    Method::Deflate,
    Method::Gzip,
    Method::Identity,
];
/// C's order of preference for documents compressed per request.
const PREF_STREAMING: [Method; 4] = [
    Method::Zstd,
    Method::Deflate,
    Method::Gzip,
    Method::Identity,
];

/// What a request asked for (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A consensus (either flavour).
    Consensus,
    /// Microdescriptors.
    Microdesc,
    /// Server descriptors.
    Descriptor,
    /// Extra-info documents.
    ExtraInfo,
    /// Authority certificates.
    Keys,
    /// Anything else (404, 400, robots.txt, POST…).
    Other,
}

impl Resource {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Resource::Consensus => "consensus",
            Resource::Microdesc => "microdesc",
            Resource::Descriptor => "server_descriptor",
            Resource::ExtraInfo => "extra_info",
            Resource::Keys => "keys",
            Resource::Other => "other",
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method (`GET`, `POST`, …).
    pub method: String,
    /// The URL path, `.z` removed.
    pub url: String,
    /// Methods the client accepts (bits of [`Method::bit`]; identity
    /// always).
    pub accept: u8,
    /// `If-Modified-Since`, if well-formed.
    pub if_modified_since: Option<SystemTime>,
    /// `X-Or-Diff-From-Consensus` digests (the first such header line,
    /// read as C's `parse_or_diff_from_header` reads it).
    pub diff_from: Vec<[u8; 32]>,
}

/// What the bytes received so far amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet.
    Incomplete,
    /// The head is longer than [`MAX_HEADERS`]: close the stream.
    TooLarge,
    /// A complete head.
    Request(Request),
}

/// Parse a request head from the bytes received so far (C's
/// `fetch_from_buf_http` and `parse_http_url`). A head with no usable
/// request line still parses (its URL is empty: 400).
pub fn parse_request(buf: &[u8]) -> Parsed {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEADERS {
            Parsed::TooLarge
        } else {
            Parsed::Incomplete
        };
    };
    if end > MAX_HEADERS {
        return Parsed::TooLarge;
    }
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("").to_owned();
    let mut url = match (parts.next(), parts.next()) {
        (Some(u), Some(v)) if v.starts_with("HTTP/") => u.to_owned(),
        _ => String::new(),
    };
    // An absolute URL's path ("http://host/tor/...").
    if let Some(rest) = url.strip_prefix("http://") {
        url = rest
            .find('/')
            .map(|i| rest[i..].to_owned())
            .unwrap_or_default();
    }
    let mut accept = Method::Identity.bit();
    if let Some(u) = url.strip_suffix(".z") {
        url = u.to_owned();
        accept |= Method::Deflate.bit();
    }
    let mut if_modified_since = None;
    let mut diff_from = None;
    for line in lines {
        // C's `http_get_header`: the first line that starts with the
        // name, a colon and a space (any case); the value is the rest.
        if diff_from.is_none() {
            if let Some(value) = line
                .get(..DIFF_HEADER.len())
                .filter(|n| n.eq_ignore_ascii_case(DIFF_HEADER))
                .and_then(|_| line.get(DIFF_HEADER.len()..))
            {
                diff_from = Some(parse_diff_from_value(value));
                continue;
            }
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "accept-encoding" => {
                for m in value.split(',').filter_map(|m| Method::by_name(m.trim())) {
                    accept |= m.bit();
                }
            }
            "if-modified-since" => if_modified_since = httpdate::parse_http_date(value).ok(),
            _ => {}
        }
    }
    Parsed::Request(Request {
        method,
        url,
        accept,
        if_modified_since,
        diff_from: diff_from.unwrap_or_default(),
    })
}

/// C's `X_OR_DIFF_FROM_CONSENSUS_HEADER`.
const DIFF_HEADER: &str = "X-Or-Diff-From-Consensus: ";

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A response body.
#[derive(Debug, Clone)]
pub enum Body {
    /// None (a short response).
    Empty,
    /// Shared with the snapshot (a consensus).
    Shared(Arc<[u8]>),
    /// Made for this request.
    Owned(Vec<u8>),
}

impl Body {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::Empty => &[],
            Body::Shared(b) => b,
            Body::Owned(b) => b,
        }
    }
}

/// A complete response: head then body, and then the stream ends.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// What was asked for.
    pub resource: Resource,
    /// Status line and headers, with the blank line.
    pub head: Vec<u8>,
    /// The body.
    pub body: Body,
    /// A consensus diff of this flavour was answered (the worker counts
    /// it in its own counters).
    pub diff: Option<ConsensusFlavor>,
}

/// What the response needs to know about the connection.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The client connection's address (`X-Your-Address-Is` when it is
    /// public, as C Tor).
    pub addr: Option<IpAddr>,
}

/// Answer `req` from `docs` (None: a cache with nothing yet) at `now`.
pub fn respond(
    docs: Option<&DirDocuments>,
    req: &Request,
    peer: Peer,
    now: SystemTime,
) -> Response {
    let empty = DirDocuments::default();
    let docs = docs.unwrap_or(&empty);
    let r = Responder { peer, now, req };
    if req.method != "GET" {
        if req.method == "POST" {
            return r.short(
                Resource::Other,
                400,
                "Nonauthoritative directory does not accept posted server descriptors",
            );
        }
        return r.short(Resource::Other, 400, "Bad request");
    }
    let url = req.url.as_str();
    if url.is_empty() {
        return r.short(Resource::Other, 400, "Bad request");
    }
    if url.starts_with("/tor/status-vote/current/consensus") {
        return r.consensus(docs);
    }
    if let Some(rest) = url.strip_prefix("/tor/micro/d/") {
        return r.microdescs(docs, rest);
    }
    if let Some(rest) = url.strip_prefix("/tor/server/") {
        return r.descriptors(docs, rest, false);
    }
    if let Some(rest) = url.strip_prefix("/tor/extra/") {
        return r.descriptors(docs, rest, true);
    }
    if url.starts_with("/tor/keys/") {
        return r.keys(docs, url);
    }
    if url == "/tor/robots.txt" {
        let body = b"User-agent: *\r\nDisallow: /\r\n".to_vec();
        return r.full(
            Resource::Other,
            Method::Identity,
            Some(body.len()),
            None,
            7 * 24 * 3600,
            Body::Owned(body),
        );
    }
    r.short(Resource::Other, 404, "Not found")
}

struct Responder<'a> {
    peer: Peer,
    now: SystemTime,
    req: &'a Request,
}

impl Responder<'_> {
    fn date(&self) -> String {
        httpdate::fmt_http_date(self.now)
    }

    /// C's `write_short_http_response`.
    fn short(&self, resource: Resource, status: u16, reason: &str) -> Response {
        let head = format!(
            "HTTP/1.0 {status} {reason}\r\nDate: {}\r\n\r\n",
            self.date()
        );
        Response {
            status,
            resource,
            head: head.into_bytes(),
            body: Body::Empty,
            diff: None,
        }
    }

    /// C's `write_http_response_header_impl` (lifetime 0: `Pragma:
    /// no-cache`).
    fn full(
        &self,
        resource: Resource,
        method: Method,
        length: Option<usize>,
        extra: Option<&str>,
        lifetime: u64,
        body: Body,
    ) -> Response {
        let mut h = format!(
            "HTTP/1.0 200 OK\r\nDate: {}\r\nContent-Type: text/plain\r\n",
            self.date()
        );
        if let Some(a) = self.peer.addr.filter(|a| is_public(*a)) {
            h.push_str(&format!("X-Your-Address-Is: {a}\r\n"));
        }
        h.push_str(&format!("Content-Encoding: {}\r\n", method.name()));
        if let Some(n) = length {
            h.push_str(&format!("Content-Length: {n}\r\n"));
        }
        if lifetime > 0 {
            let exp = self.now + Duration::from_secs(lifetime);
            h.push_str(&format!("Expires: {}\r\n", httpdate::fmt_http_date(exp)));
        } else {
            h.push_str("Pragma: no-cache\r\n");
        }
        if let Some(x) = extra {
            h.push_str(x);
        }
        h.push_str("\r\n");
        Response {
            status: 200,
            resource,
            head: h.into_bytes(),
            body,
            diff: None,
        }
    }

    /// The client's best method for a per-request body.
    fn streaming_method(&self) -> Method {
        PREF_STREAMING
            .into_iter()
            .find(|m| self.req.accept & m.bit() != 0)
            .unwrap_or(Method::Identity)
    }

    /// A body made for this request, compressed in the client's best
    /// method — but sent as it is when it is big: a worker compresses
    /// nothing that would hold up its circuits for long, and every client
    /// accepts identity (C's `parse_accept_encoding_header` always adds
    /// it). Only `/tor/server/all`-sized answers are affected.
    fn owned(&self, resource: Resource, text: &[u8], lifetime: u64) -> Response {
        let method = if text.len() > MAX_COMPRESS_PER_REQUEST {
            Method::Identity
        } else {
            self.streaming_method()
        };
        match compress(method, text, false) {
            Ok(b) => self.full(resource, method, None, None, lifetime, Body::Owned(b)),
            Err(_) => self.short(resource, 500, "Internal error"),
        }
    }

    /// `handle_get_current_consensus`.
    fn consensus(&self, docs: &DirDocuments) -> Response {
        let res = Resource::Consensus;
        let url = self.req.url.as_str();
        let (flavor, after) = match url.strip_prefix("/tor/status-vote/current/consensus-") {
            Some(rest) => {
                let (f, after) = match rest.split_once('/') {
                    Some((f, a)) => (f, Some(a)),
                    None => (rest, None),
                };
                let flavor = if f == "microdesc" {
                    ConsensusFlavor::Microdesc
                } else {
                    ConsensusFlavor::Plain
                };
                (flavor, after)
            }
            None => (
                ConsensusFlavor::Plain,
                url.strip_prefix("/tor/status-vote/current/consensus/"),
            ),
        };
        if url != "/tor/status-vote/current/consensus"
            && !url.starts_with("/tor/status-vote/current/consensus/")
            && !url.starts_with("/tor/status-vote/current/consensus-")
        {
            return self.short(res, 404, "Not found");
        }
        // C's `parse_consensus_request`: a diff demanded in the URL
        // (`diff/<hex>[/<fps>]`) or accepted through the header.
        let (digests, diff_only, want_fps) = match after.and_then(|a| a.strip_prefix("diff/")) {
            Some(rest) => {
                let (hash, fps) = match rest.split_once('/') {
                    Some((h, f)) => (h, Some(f)),
                    None => (rest, None),
                };
                let Some(d) = parse_one_diff_hash(hash) else {
                    return self.short(res, 404, "Couldn't parse request");
                };
                (vec![d], true, fps)
            }
            None => (self.req.diff_from.clone(), false, after),
        };
        let latest = docs.consensus(flavor);
        if latest.is_some_and(|c| digests.contains(&c.sha3_as_signed)) {
            return self.short(res, 304, "Not modified");
        }
        let diff = latest.and_then(|c| {
            docs.diffs.find_best(
                flavor,
                &c.sha3_as_signed,
                &digests,
                self.req.accept,
                &PREF_PRECOMPRESSED,
            )
        });
        if diff_only && diff.is_none() {
            return self.short(res, 404, "No such diff available");
        }
        let Some(c) = latest else {
            return self.short(res, 404, "Not found");
        };
        // A diff carries its target's times and signers (C's diff labels).
        if c.valid_after > self.now + REASONABLY_LIVE {
            return self.short(res, 404, "Consensus is too new");
        }
        if c.valid_until + REASONABLY_LIVE < self.now {
            return self.short(res, 404, "Consensus is too old");
        }
        if let Some(fps) = want_fps.filter(|f| !f.is_empty()) {
            if !client_likes_consensus(c, fps) {
                return self.short(
                    res,
                    404,
                    "Consensus not signed by sufficient number of requested authorities",
                );
            }
        }
        if self
            .req
            .if_modified_since
            .is_some_and(|t| c.valid_after < t)
        {
            return self.short(res, 304, "Not modified");
        }
        let is_diff = diff.is_some();
        let (method, body) = match diff {
            Some(d) => d,
            None => {
                let method = PREF_PRECOMPRESSED
                    .into_iter()
                    .find(|m| self.req.accept & m.bit() != 0 && c.body(*m).is_some())
                    .unwrap_or(Method::Identity);
                let Some(body) = c.body(method).cloned() else {
                    return self.short(res, 404, "Not found");
                };
                (method, body)
            }
        };
        let lifetime = c
            .fresh_until
            .duration_since(self.now)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut r = self.full(
            res,
            method,
            None,
            Some("Vary: X-Or-Diff-From-Consensus\r\n"),
            lifetime,
            Body::Shared(body),
        );
        r.diff = is_diff.then_some(flavor);
        r
    }

    /// `handle_get_microdesc`.
    fn microdescs(&self, docs: &DirDocuments, list: &str) -> Response {
        let mut digests: Vec<[u8; 32]> = list.split('-').filter_map(base64_digest).collect();
        digests.sort_unstable();
        digests.dedup();
        let mut text = Vec::new();
        for d in &digests {
            if let Some(md) = docs.microdescs.get(d) {
                text.extend_from_slice(md.as_bytes());
            }
        }
        if text.is_empty() {
            return self.short(Resource::Microdesc, 404, "Not found");
        }
        self.owned(Resource::Microdesc, &text, DIGEST_LIFETIME)
    }

    /// `handle_get_descriptor` for `/tor/server/…` and `/tor/extra/…`.
    fn descriptors(&self, docs: &DirDocuments, what: &str, extra: bool) -> Response {
        let res = if extra {
            Resource::ExtraInfo
        } else {
            Resource::Descriptor
        };
        let (by_digest, by_fp) = if extra {
            (&docs.extras, &docs.extra_by_fp)
        } else {
            (&docs.descs, &docs.desc_by_fp)
        };
        let mut texts: Vec<&str> = Vec::new();
        let mut lifetime = 0;
        let publish_cutoff = self
            .now
            .checked_sub(Duration::from_secs(5 * 24 * 3600))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        if what == "all" && !extra && docs.all_descs.len() > MAX_COMPRESS_PER_REQUEST {
            // Big: the snapshot's own copy, shared, uncompressed.
            let all = docs.all_descs.clone();
            return self.full(
                res,
                Method::Identity,
                None,
                None,
                FULL_DIR_LIFETIME,
                Body::Shared(all),
            );
        }
        if what == "all" {
            let mut all: Vec<_> = by_fp.values().filter_map(|d| by_digest.get(d)).collect();
            all.sort_by_key(|d| d.fp);
            texts.extend(all.iter().map(|d| &*d.text));
            lifetime = FULL_DIR_LIFETIME;
        } else if what == "authority" {
            let own = if extra {
                docs.own
                    .as_ref()
                    .and_then(|o| docs.extra_by_fp.get(&o.fp))
                    .and_then(|d| docs.extras.get(d))
            } else {
                docs.own.as_ref()
            };
            texts.extend(own.map(|d| &*d.text));
        } else if let Some(list) = what.strip_prefix("d/") {
            for d in hex_list::<20>(list) {
                texts.extend(by_digest.get(&d).map(|d| &*d.text));
            }
        } else if let Some(list) = what.strip_prefix("fp/") {
            for fp in hex_list::<20>(list) {
                texts.extend(
                    by_fp
                        .get(&fp)
                        .and_then(|d| by_digest.get(d))
                        .filter(|d| d.published >= publish_cutoff)
                        .map(|d| &*d.text),
                );
            }
        } else {
            return self.short(res, 404, "Not found");
        }
        if texts.is_empty() {
            return self.short(res, 404, "Not found");
        }
        if texts.len() == 1 && lifetime == 0 {
            lifetime = DIGEST_LIFETIME;
        }
        self.owned(res, texts.concat().as_bytes(), lifetime)
    }

    /// `handle_get_keys`.
    fn keys(&self, docs: &DirDocuments, url: &str) -> Response {
        let res = Resource::Keys;
        let mut certs: Vec<&super::CertDoc> = Vec::new();
        let newest_by_id = |id: &[u8; 20]| {
            docs.certs
                .iter()
                .filter(|c| &c.id_fp == id)
                .max_by_key(|c| c.published)
        };
        if url == "/tor/keys/all" {
            certs.extend(docs.certs.iter());
        } else if url == "/tor/keys/authority" {
            // Not an authority: no certificate of our own.
        } else if let Some(list) = url.strip_prefix("/tor/keys/fp/") {
            certs.extend(hex_list::<20>(list).iter().filter_map(newest_by_id));
        } else if let Some(list) = url.strip_prefix("/tor/keys/sk/") {
            for sk in hex_list::<20>(list) {
                certs.extend(docs.certs.iter().filter(|c| c.sk_fp == sk));
            }
        } else if let Some(list) = url.strip_prefix("/tor/keys/fp-sk/") {
            for pair in list.split('+') {
                let Some((a, b)) = pair.split_once('-') else {
                    continue;
                };
                let (Some(id), Some(sk)) = (hex20(a), hex20(b)) else {
                    continue;
                };
                certs.extend(docs.certs.iter().filter(|c| c.id_fp == id && c.sk_fp == sk));
            }
        } else {
            return self.short(res, 400, "Bad request");
        }
        if certs.is_empty() {
            return self.short(res, 404, "Not found");
        }
        if let Some(t) = self.req.if_modified_since {
            certs.retain(|c| c.published >= t);
            if certs.is_empty() {
                return self.short(res, 304, "Not modified");
            }
        }
        let text: String = certs.iter().map(|c| &*c.text).collect();
        let method = self.streaming_method();
        if method == Method::Identity {
            let n = text.len();
            return self.full(
                res,
                method,
                Some(n),
                None,
                KEYS_LIFETIME,
                Body::Owned(text.into_bytes()),
            );
        }
        self.owned(res, text.as_bytes(), KEYS_LIFETIME)
    }
}

/// C's `client_likes_consensus`: more than half of the requested
/// authorities (hex prefixes, `+`-separated) signed it.
fn client_likes_consensus(c: &ConsensusDoc, want: &str) -> bool {
    let wanted: Vec<Vec<u8>> = want
        .split('+')
        .filter_map(|h| {
            let h = &h[..h.len() - h.len() % 2];
            hex::decode(h).ok().filter(|b| b.len() <= 20)
        })
        .collect();
    let need = wanted.len() / 2 + 1;
    let have = wanted
        .iter()
        .filter(|w| c.signers.iter().any(|s| s.starts_with(w)))
        .count();
    have >= need
}

/// A `+`-separated list of hex digests (bad entries skipped, sorted,
/// unique), C's `dir_split_resource_into_fingerprints(DSR_HEX)`.
fn hex_list<const N: usize>(list: &str) -> Vec<[u8; N]> {
    let mut v: Vec<[u8; N]> = list
        .split('+')
        .filter_map(|h| hex::decode(h).ok().and_then(|b| b.try_into().ok()))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn hex20(h: &str) -> Option<[u8; 20]> {
    hex::decode(h).ok().and_then(|b| b.try_into().ok())
}

/// One unpadded base64 SHA-256 digest.
fn base64_digest(s: &str) -> Option<[u8; 32]> {
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()
        .and_then(|b| b.try_into().ok())
}

/// Not loopback, private, link-local or unspecified (C's
/// `is_local_to_resolve_addr` / `tor_addr_is_internal` in spirit).
fn is_public(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => {
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.octets()[0] == 100 && (a.octets()[1] & 0xC0) == 64)
        }
        IpAddr::V6(a) => {
            !(a.is_loopback()
                || a.is_unspecified()
                || (a.segments()[0] & 0xfe00) == 0xfc00
                || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}
