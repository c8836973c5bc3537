//! Entry points for the cargo-fuzz targets in `fuzz/` that reach this
//! crate's parsers of network input (HTTP responses from directory servers,
//! consensus documents, authority certificates; the exit policy of the
//! torrc; consensus diffs; onion-service descriptor uploads and fetches).
//! Compiled on stable so the
//! committed corpora are replayed by unit tests. None may panic.

use std::time::SystemTime;

use crate::consensus::{verify_consensus, AuthorityCerts, ConsensusFlavor};

/// The bounded HTTP/1.0 response parser.
pub fn http_response(data: &[u8]) {
    if let Ok(r) = crate::http::parse_response(data) {
        let _ = r.header("Content-Encoding");
    }
}

/// The directory cache's request parser and answers (what a BEGIN_DIR
/// client sends), and the splitting of fetched documents.
pub fn dir_request(data: &[u8]) {
    use crate::cache::serve::{parse_request, respond, Parsed, Peer};
    use crate::cache::{split_descriptors, split_microdescs, CacheInputs};
    use std::sync::OnceLock;
    static DOCS: OnceLock<crate::cache::DirDocuments> = OnceLock::new();
    let docs = DOCS.get_or_init(|| {
        let mut d = CacheInputs::default().build();
        let md = "onion-key\nntor-onion-key x\n";
        for (digest, t) in split_microdescs(md) {
            d.microdescs.insert(digest, t.into());
        }
        d
    });
    if let Parsed::Request(r) = parse_request(data) {
        let _ = respond(Some(docs), &r, Peer { addr: None }, SystemTime::now());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = split_microdescs(text);
        let _ = split_descriptors(text);
        let _ = crate::cache::split_certs(text, &[[0x11; 20]], SystemTime::now());
    }
}

/// Consensus and authority-certificate parsing and verification on
/// arbitrary text (the first byte picks the flavor).
pub fn directory_documents(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let now = SystemTime::now();
    let trusted = [[0x11u8; 20], [0x22; 20]];
    let certs = AuthorityCerts::parse(text, &trusted, now).unwrap_or_default();
    let flavor = if first & 1 == 0 {
        ConsensusFlavor::Microdesc
    } else {
        ConsensusFlavor::Plain
    };
    let _ = verify_consensus(text, flavor, &certs, &trusted, now);
    let _ = crate::consensus::parse_microdescs(text);
}

/// The exit policy parser and builder on arbitrary torrc text (each line
/// an `ExitPolicy` value; the first byte picks the other options), then
/// matching, the descriptor lines and both summaries.
pub fn exit_policy(data: &[u8]) {
    use crate::exit_policy::{summary, ExitPolicy, ExitPolicyOptions, OwnAddresses};
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let o = ExitPolicyOptions {
        exit_relay: Some(first & 1 == 1),
        exit_policy: text.lines().map(str::to_string).collect(),
        reject_private: first & 2 == 0,
        reject_local_interfaces: first & 4 != 0,
        reduced: first & 8 != 0,
        ipv6_exit: first & 16 != 0,
    };
    let own = OwnAddresses {
        advertised: vec![std::net::IpAddr::from([198, 51, 100, 7])],
        ..Default::default()
    };
    if let Ok((p, _)) = ExitPolicy::from_options(&o, &own) {
        let _ = p.allows(std::net::IpAddr::from([1, 2, 3, 4]), u16::from(first) * 257);
        let _ = p.descriptor_lines();
        let _ = p.ipv6_policy_line();
        let _ = summary::summarize(p.rules(), false);
    }
}

/// Consensus diffs: the first two bytes (little-endian) say where the base
/// ends; what follows is both a diff to apply to it and a target to diff
/// it against. A diff that is made must turn the base into the target.
pub fn consdiff(data: &[u8]) {
    use crate::consdiff::{apply, generate};
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (Ok(base), Ok(other)) = (
        std::str::from_utf8(&rest[..split]),
        std::str::from_utf8(&rest[split..]),
    ) else {
        return;
    };
    let _ = apply(base, other);
    if let Ok(diff) = generate(base, other) {
        // C Tor's diff is a C string: a NUL in the target cuts it short.
        if !other.contains('\0') {
            assert_eq!(apply(base, &diff).as_deref(), Ok(other));
        }
    }
}

/// The HSDir's parsers: an upload's outer layer (checked at a fixed time,
/// when the committed C Tor descriptor's certificate was valid), stored
/// and cleaned; the same bytes as an HTTP request (routing, the body's
/// framing) and as a blinded key.
pub fn hs_descriptor(data: &[u8]) {
    use crate::hs_cache::http::{classify, post_body};
    use crate::hs_cache::{check_descriptor, HsDirCache, HsDirIndex, HS_DESC_MAX_LEN};
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_674_486_000);
    let unix = 1_674_486_000;
    if let Ok(d) = check_descriptor(data, HS_DESC_MAX_LEN, now) {
        let key = d.blinded_key;
        let mut cache = HsDirCache::default();
        let mut index = HsDirIndex::default();
        if let Ok(u) = cache.store(d.clone(), unix) {
            index.apply(&u);
        }
        let _ = cache.store(d, unix);
        let _ = index.get(&key, unix);
        let _ = cache.handle_oom(unix + 3600, 1, 120);
        let _ = cache.clean(unix + 86_400, None);
    }
    if let crate::cache::serve::Parsed::Request(r) = crate::cache::serve::parse_request(data) {
        let _ = classify(&r);
        let _ = post_body(data, HS_DESC_MAX_LEN);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::hs_cache::parse::parse_blinded_key(s);
    }
}
