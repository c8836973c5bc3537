//! The HSDir cache against a descriptor C Tor made (Arti's test vector
//! `hsdesc1.txt`, from a C Tor onion service in January 2023) and
//! synthetic ones: every refusal of C's `hs_desc_decode_plaintext` and
//! `cache_store_v3_as_dir`, expiry, the OOM order, the readers' copies,
//! the HTTP side, and 5,000 descriptors measured.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::http::{classify, post_body, HsRequest, PostBody};
use super::testing::SyntheticDescriptor;
use super::*;
use crate::cache::serve::{parse_request, Parsed};

const C_TOR_DESC: &str = include_str!("../../tests/data/hsdesc-arti-1.txt");
/// The blinded key of `C_TOR_DESC` (Arti's test).
const C_TOR_BLINDED: [u8; 32] = [
    0x43, 0xcc, 0x0d, 0x62, 0xfc, 0x62, 0x52, 0xf5, 0x78, 0x70, 0x5c, 0xa6, 0x45, 0xa4, 0x61, 0x09,
    0xe2, 0x65, 0x29, 0x03, 0x43, 0xb1, 0x13, 0x7e, 0x90, 0x18, 0x97, 0x44, 0xb2, 0x0b, 0x3f, 0x2d,
];

fn c_tor_time() -> SystemTime {
    // 2023-01-23T15:00:00Z, when its certificate was valid.
    UNIX_EPOCH + Duration::from_secs(1_674_486_000)
}

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[test]
fn c_tor_descriptor_accepted() {
    let d = check_descriptor(C_TOR_DESC.as_bytes(), HS_DESC_MAX_LEN, c_tor_time()).unwrap();
    assert_eq!(d.blinded_key, C_TOR_BLINDED);
    assert_eq!(d.revision, 19_655_750);
    assert_eq!(d.lifetime_secs, 180 * 60);
    assert_eq!(d.text, C_TOR_DESC.as_bytes());
}

#[test]
fn c_tor_descriptor_refused_when_tampered_or_expired() {
    let t = c_tor_time();
    // One byte of the signed part changed.
    let bad = C_TOR_DESC.replacen("revision-counter 19655750", "revision-counter 19655751", 1);
    assert_eq!(
        check_descriptor(bad.as_bytes(), HS_DESC_MAX_LEN, t),
        Err(Refused::BadSignature)
    );
    // A year later its certificate has expired.
    let later = t + Duration::from_secs(365 * 24 * 3600);
    assert_eq!(
        check_descriptor(C_TOR_DESC.as_bytes(), HS_DESC_MAX_LEN, later),
        Err(Refused::BadCert("expired"))
    );
    // The size limit: C refuses at `len >= max`.
    let len = C_TOR_DESC.len();
    assert_eq!(
        check_descriptor(C_TOR_DESC.as_bytes(), len, t),
        Err(Refused::TooLarge)
    );
    assert!(check_descriptor(C_TOR_DESC.as_bytes(), len + 1, t).is_ok());
}

#[test]
fn synthetic_descriptor_round_trip() {
    let s = SyntheticDescriptor::new(7, now());
    let d = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, now()).unwrap();
    assert_eq!(d.blinded_key, s.blinded_key());
    assert_eq!(d.revision, 1);
}

#[test]
fn refusals_by_cause() {
    let t = now();
    let check = |text: &str| check_descriptor(text.as_bytes(), HS_DESC_MAX_LEN, t);
    let good = SyntheticDescriptor::new(1, t).encode();
    assert!(check(&good).is_ok());
    // Garbage.
    assert!(matches!(check("hello\n"), Err(Refused::Malformed(_))));
    assert!(matches!(check(""), Err(Refused::Malformed(_))));
    assert!(matches!(
        check_descriptor(&[0xff, 0xfe, 0x00], HS_DESC_MAX_LEN, t),
        Err(Refused::Malformed(_))
    ));
    // Version 2.
    let v2 = good.replacen("hs-descriptor 3", "hs-descriptor 2", 1);
    assert!(matches!(check(&v2), Err(Refused::Malformed(_))));
    // An item twice, or missing, or out of place.
    let twice = good.replacen(
        "revision-counter 1\n",
        "revision-counter 1\nrevision-counter 1\n",
        1,
    );
    assert!(matches!(check(&twice), Err(Refused::Malformed(_))));
    let missing = good.replacen("revision-counter 1\n", "", 1);
    assert!(matches!(check(&missing), Err(Refused::Malformed(_))));
    let first = format!("unknown-item x\n{good}");
    assert!(matches!(check(&first), Err(Refused::Malformed(_))));
    let last = format!("{good}unknown-item x\n");
    assert!(matches!(check(&last), Err(Refused::Malformed(_))));
    // Lifetime over 12 hours (re-signed, so only the lifetime is wrong).
    let mut s = SyntheticDescriptor::new(1, t);
    s.lifetime_min = 721;
    assert_eq!(check(&s.encode()), Err(Refused::BadLifetime));
    s.lifetime_min = 720;
    assert!(check(&s.encode()).is_ok());
    // C has no lower bound.
    s.lifetime_min = 0;
    assert!(check(&s.encode()).is_ok());
    // A superencrypted blob no longer than salt and MAC.
    s.lifetime_min = 180;
    s.blob_len = 48;
    assert!(matches!(check(&s.encode()), Err(Refused::Malformed(_))));
    s.blob_len = 49;
    assert!(check(&s.encode()).is_ok());
    // An expired certificate.
    s.cert_expiry = t - Duration::from_secs(7200);
    assert_eq!(check(&s.encode()), Err(Refused::BadCert("expired")));
    // A signature by another key.
    let mut other = SyntheticDescriptor::new(1, t);
    other.signing_seed = [9; 32];
    let other_sig = other.encode();
    let sig_line = other_sig.lines().last().unwrap();
    let forged = good.replacen(good.lines().last().unwrap(), sig_line, 1);
    assert_eq!(check(&forged), Err(Refused::BadSignature));
    // A signature of the wrong length.
    let good_sig = good.lines().last().unwrap();
    let short = good.replacen(good_sig, &good_sig[..good_sig.len() - 4], 1);
    assert_eq!(check(&short), Err(Refused::BadSignature));
}

#[test]
fn unknown_items_are_ignored_and_nul_ends_the_text() {
    let t = now();
    let good = SyntheticDescriptor::new(3, t).encode();
    // An unknown item in the middle is signed like the rest: re-sign by
    // building with it is not possible here, so check the token rules
    // alone accept it (the signature then fails, not the parse).
    let extra = good.replacen("revision-counter", "x-extension a b\nrevision-counter", 1);
    assert_eq!(
        check_descriptor(extra.as_bytes(), HS_DESC_MAX_LEN, t),
        Err(Refused::BadSignature)
    );
    let mut with_nul = good.clone().into_bytes();
    with_nul.extend_from_slice(b"\0garbage after the C string");
    let d = check_descriptor(&with_nul, HS_DESC_MAX_LEN, t).unwrap();
    assert_eq!(d.text, good.as_bytes());
}

#[test]
fn revision_only_moves_forward() {
    let t = now();
    let mut cache = HsDirCache::default();
    let mut s = SyntheticDescriptor::new(1, t);
    s.revision = 5;
    let d5 = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap();
    assert!(cache.store(d5.clone(), secs(t)).is_ok());
    let bytes = cache.bytes();
    // Equal: refused (C: `>=`), lower: refused; nothing changes.
    assert_eq!(
        cache.store(d5.clone(), secs(t)).unwrap_err(),
        Refused::OldRevision
    );
    s.revision = 4;
    let d4 = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap();
    assert_eq!(cache.store(d4, secs(t)).unwrap_err(), Refused::OldRevision);
    assert_eq!(cache.bytes(), bytes);
    assert_eq!(cache.get(&d5.blinded_key).unwrap().revision, 5);
    // Higher: replaces, the bytes counted once.
    s.revision = 6;
    s.blob_len = 20_000;
    let d6 = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap();
    let len6 = d6.text.len() as u64;
    assert!(cache.store(d6, secs(t)).is_ok());
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.bytes(), len6 + ENTRY_OVERHEAD);
}

#[test]
fn expiry_by_lifetime() {
    let t = now();
    let mut cache = HsDirCache::default();
    let mut index = HsDirIndex::default();
    let mut short = SyntheticDescriptor::new(1, t);
    short.lifetime_min = 60;
    let long = SyntheticDescriptor::new(2, t);
    for s in [&short, &long] {
        let d = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap();
        index.apply(&cache.store(d, secs(t)).unwrap());
    }
    let t0 = secs(t);
    assert!(index.get(&short.blinded_key(), t0 + 3599).is_some());
    assert!(index.get(&short.blinded_key(), t0 + 3600).is_none());
    assert_eq!(cache.clean(t0 + 3599, None).0, 0);
    let (freed, update) = cache.clean(t0 + 3600, None);
    assert!(freed > 0);
    index.apply(&update.unwrap());
    assert_eq!((cache.len(), index.len()), (1, 1));
    assert!(index.get(&long.blinded_key(), t0 + 3600).is_some());
    let (_, update) = cache.clean(t0 + 3 * 3600, None);
    index.apply(&update.unwrap());
    assert!(cache.is_empty() && index.is_empty());
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn oom_frees_oldest_first() {
    let t = now();
    let t0 = secs(t);
    let mut cache = HsDirCache::default();
    // Stored 5, 4, 3, 2, 1 hours ago (lifetimes of 12 h keep them).
    for h in 1..=5u32 {
        let mut s = SyntheticDescriptor::new(h, t);
        s.lifetime_min = 720;
        let d = check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap();
        cache.store(d, t0 - u64::from(h) * 3600).unwrap();
    }
    let one = cache.bytes() / 5;
    let (freed, keys) = cache.handle_oom(t0, one + 1, OOM_STEP_SECS);
    // The two oldest go (an hour's step at a time).
    assert_eq!(freed, 2 * one);
    let mut gone: Vec<[u8; 32]> = keys;
    gone.sort();
    let mut want = vec![
        SyntheticDescriptor::new(5, t).blinded_key(),
        SyntheticDescriptor::new(4, t).blinded_key(),
    ];
    want.sort();
    assert_eq!(gone, want);
    // Asking for more than there is empties the cache and stops.
    let (freed, _) = cache.handle_oom(t0, u64::MAX, OOM_STEP_SECS);
    assert_eq!(freed, 3 * one);
    assert!(cache.is_empty());
}

fn request(raw: &str) -> crate::cache::serve::Request {
    match parse_request(raw.as_bytes()) {
        Parsed::Request(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn http_routes_as_c() {
    let key = "Q8wNYvxiUvV4cFymRaRhCeJlKQNDsRN+kBiXRLILPy0";
    assert_eq!(
        classify(&request(&format!("GET /tor/hs/3/{key} HTTP/1.0\r\n\r\n"))),
        Some(HsRequest::Fetch(key.to_owned()))
    );
    assert_eq!(parse::parse_blinded_key(key), Some(C_TOR_BLINDED));
    assert_eq!(
        parse::parse_blinded_key(&format!("{key}=")),
        Some(C_TOR_BLINDED)
    );
    assert_eq!(parse::parse_blinded_key("short"), None);
    let post = |url: &str| classify(&request(&format!("POST {url} HTTP/1.0\r\n\r\n")));
    assert_eq!(post("/tor/hs/3/publish"), Some(HsRequest::Publish(Some(3))));
    assert_eq!(
        post("/tor/hs/3/publishx"),
        Some(HsRequest::Publish(Some(3)))
    );
    assert_eq!(post("/tor/hs/2/publish"), Some(HsRequest::Publish(Some(2))));
    assert_eq!(post("/tor/hs/3/fetch"), Some(HsRequest::Publish(None)));
    assert_eq!(post("/tor/hs/x/publish"), Some(HsRequest::Publish(None)));
    assert_eq!(post("/tor/"), None);
    assert_eq!(
        classify(&request("GET /tor/server/all HTTP/1.0\r\n\r\n")),
        None
    );
}

#[test]
fn post_body_framing() {
    let head = "POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(post_body(head.as_bytes(), 100), PostBody::Incomplete);
    let full = format!("{head}abcdefg");
    assert_eq!(
        post_body(full.as_bytes(), 100),
        PostBody::Complete(b"abcde")
    );
    assert_eq!(post_body(full.as_bytes(), 4), PostBody::TooLarge);
    let no_len = "POST /tor/hs/3/publish HTTP/1.0\r\n\r\nxyz";
    assert_eq!(
        post_body(no_len.as_bytes(), 100),
        PostBody::Complete(b"xyz")
    );
}

/// Issue 35, acceptance 5: 5,000 stored descriptors measured, within the
/// documented bound (the texts plus [`ENTRY_OVERHEAD`] each, and the
/// store's and one reader's maps).
#[test]
fn five_thousand_descriptors_measured() {
    const N: u32 = 5_000;
    let t = now();
    let mut cache = HsDirCache::default();
    let mut index = HsDirIndex::default();
    let mut text_bytes = 0u64;
    // Signing 5,000 (two signatures each) is slow in a debug build: make
    // 50 and store each under 100 blinded keys (the cache only indexes).
    let mut base = Vec::new();
    for n in 0..50 {
        let s = SyntheticDescriptor::new(n, t);
        base.push(check_descriptor(s.encode().as_bytes(), HS_DESC_MAX_LEN, t).unwrap());
    }
    for n in 0..N {
        let mut d = base[(n % 50) as usize].clone();
        d.blinded_key[..4].copy_from_slice(&n.to_be_bytes());
        text_bytes += d.text.len() as u64;
        index.apply(&cache.store(d, secs(t)).unwrap());
    }
    assert_eq!(cache.len(), N as usize);
    assert_eq!(index.len(), N as usize);
    // What the maps really take: capacity × (key + value) for each.
    let store_map =
        cache.entries.capacity() as u64 * (32 + std::mem::size_of::<Entry>() as u64 + 1);
    let index_map = index.entries.capacity() as u64
        * (32 + std::mem::size_of::<(std::sync::Arc<[u8]>, u64)>() as u64 + 1);
    let measured = text_bytes + store_map + index_map;
    eprintln!(
        "5000 descriptors: texts {} KB, store map {} KB, one reader's map {} KB; counted {} KB",
        text_bytes / 1000,
        store_map / 1000,
        index_map / 1000,
        cache.bytes() / 1000
    );
    // The count covers the store and sixteen readers' maps.
    assert!(cache.bytes() >= text_bytes + store_map + index_map);
    assert!(cache.bytes() <= measured + u64::from(N) * ENTRY_OVERHEAD);
    // And the documented bound: 5,000 descriptors of C's maximum size
    // would count under 256 MB.
    assert!(u64::from(N) * (HS_DESC_MAX_LEN as u64 + ENTRY_OVERHEAD) < 256 << 20);
}
