//! The directory cache's request parsing and answers, against C Tor's
//! rules (dircache.c), and the document splitting.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::serve::{
    self, parse_request, respond, Body, Parsed, Peer, Request, Resource, MAX_HEADERS,
};
use super::*;

const DESC: &str = include_str!("../../tests/data/ctor-descriptor-test002a.txt");
const EXTRA: &str = include_str!("../../tests/data/ctor-extrainfo-test002a.txt");

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn md(n: u8) -> String {
    format!("onion-key\nntor-onion-key AAAA{n}\nid ed25519 x{n}\n")
}

fn docs() -> DirDocuments {
    let text = "network-status-version 3 microdesc\nvalid-after x\ndirectory-signature \
                sha256 AAAA BBBB\n-----BEGIN SIGNATURE-----\n";
    let bodies = Method::ALL
        .iter()
        .map(|&m| {
            (
                m,
                Arc::<[u8]>::from(compress(m, text.as_bytes(), true).unwrap()),
            )
        })
        .collect();
    let c = ConsensusDoc {
        valid_after: now() - Duration::from_secs(600),
        fresh_until: now() + Duration::from_secs(3000),
        valid_until: now() + Duration::from_secs(10_000),
        signers: vec![[0xAA; 20], [0xBB; 20], [0xCC; 20]],
        sha3_as_signed: sha3_as_signed(text),
        bodies,
    };
    let mut d = DirDocuments::default();
    d.consensus[1] = Some(c);
    let all = format!("{}{}{}", md(1), md(2), md(3));
    for (digest, t) in split_microdescs(&all) {
        d.microdescs.insert(digest, t.into());
    }
    d.certs.push(CertDoc {
        id_fp: [0xAA; 20],
        sk_fp: [0x11; 20],
        published: now() - Duration::from_secs(86400),
        text: "dir-key-certificate-version 3\nfingerprint AA\n".into(),
    });
    d
}

fn get(url: &str, extra: &str) -> Request {
    let raw = format!("GET {url} HTTP/1.0\r\nHost: x\r\n{extra}\r\n");
    match parse_request(raw.as_bytes()) {
        Parsed::Request(r) => r,
        other => panic!("{other:?}"),
    }
}

fn answer(url: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let r = respond(Some(&docs()), &get(url, extra), Peer { addr: None }, now());
    (
        r.status,
        String::from_utf8(r.head.clone()).unwrap(),
        r.body.bytes().to_vec(),
    )
}

fn inflate(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn request_heads_parse_as_c_reads_them() {
    assert_eq!(parse_request(b"GET /tor/ HTTP/1.0\r\n"), Parsed::Incomplete);
    let big = vec![b'a'; MAX_HEADERS + 1];
    assert_eq!(parse_request(&big), Parsed::TooLarge);
    let r = get(
        "/tor/micro/d/x.z",
        "Accept-Encoding: x-zstd, x-tor-lzma, bogus\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
    );
    assert_eq!(r.url, "/tor/micro/d/x");
    for m in [
        Method::Identity,
        Method::Deflate,
        Method::Zstd,
        Method::Lzma,
    ] {
        assert_ne!(r.accept & m.bit(), 0, "{m:?}");
    }
    assert_eq!(r.accept & Method::Gzip.bit(), 0);
    assert!(r.if_modified_since.is_some());
    let Parsed::Request(r) = parse_request(b"GET http://1.2.3.4:80/tor/keys/all HTTP/1.1\r\n\r\n")
    else {
        panic!()
    };
    assert_eq!(r.url, "/tor/keys/all");
    let Parsed::Request(r) = parse_request(b"garbage\r\n\r\n") else {
        panic!()
    };
    let a = respond(None, &r, Peer { addr: None }, now());
    assert_eq!(a.status, 400);
}

#[test]
fn consensus_is_served_in_the_best_method_the_client_accepts() {
    let (s, head, body) = answer("/tor/status-vote/current/consensus-microdesc.z", "");
    assert_eq!(s, 200);
    assert!(head.contains("Content-Encoding: deflate\r\n"), "{head}");
    assert!(head.contains("Expires: "), "{head}");
    assert!(head.contains("Vary: X-Or-Diff-From-Consensus"));
    assert!(inflate(&body).starts_with(b"network-status-version 3 microdesc"));
    let (_, head, body) = answer(
        "/tor/status-vote/current/consensus-microdesc",
        "Accept-Encoding: deflate, identity, x-zstd, x-tor-lzma\r\n",
    );
    assert!(head.contains("Content-Encoding: x-tor-lzma\r\n"), "{head}");
    let mut out = Vec::new();
    // The legacy .lzma format C Tor's lzma_alone_decoder reads.
    let alone = xz2::stream::Stream::new_lzma_decoder(u64::MAX).unwrap();
    xz2::read::XzDecoder::new_stream(&body[..], alone)
        .read_to_end(&mut out)
        .unwrap();
    assert!(out.starts_with(b"network-status-version 3"));
    let (_, head, body) = answer(
        "/tor/status-vote/current/consensus-microdesc",
        "Accept-Encoding: x-zstd\r\n",
    );
    assert!(head.contains("x-zstd"));
    assert!(zstd::decode_all(&body[..])
        .unwrap()
        .starts_with(b"network-status"));
    // Identity when nothing else is accepted.
    let (_, head, body) = answer("/tor/status-vote/current/consensus-microdesc", "");
    assert!(head.contains("Content-Encoding: identity"));
    assert!(body.starts_with(b"network-status-version"));
    // The ns flavour is not held: 404.
    assert_eq!(answer("/tor/status-vote/current/consensus", "").0, 404);
}

#[test]
fn consensus_checks_signers_diffs_and_liveness() {
    let base = "/tor/status-vote/current/consensus-microdesc";
    assert_eq!(answer(&format!("{base}/AAAA+BBBB+DDDD"), "").0, 200);
    let (s, head, _) = answer(&format!("{base}/AAAA+DDDD+EEEE"), "");
    assert_eq!(s, 404);
    assert!(head.contains("not signed by sufficient number"), "{head}");
    // A diff from the consensus we hold: 304.
    let digest = hex::encode(docs().consensus[1].as_ref().unwrap().sha3_as_signed);
    let (s, _, _) = answer(base, &format!("X-Or-Diff-From-Consensus: {digest}\r\n"));
    assert_eq!(s, 304);
    // A diff we cannot make: the full consensus.
    let (s, _, _) = answer(
        base,
        &format!("X-Or-Diff-From-Consensus: {}\r\n", "00".repeat(32)),
    );
    assert_eq!(s, 200);
    // A diff demanded in the URL: 404.
    let (s, head, _) = answer(&format!("{base}/diff/{}", "00".repeat(32)), "");
    assert_eq!(s, 404);
    assert!(head.contains("No such diff available"));
    // If-Modified-Since after valid-after: 304.
    let t = httpdate::fmt_http_date(now());
    assert_eq!(answer(base, &format!("If-Modified-Since: {t}\r\n")).0, 304);
    // Too old.
    let mut d = docs();
    d.consensus[1].as_mut().unwrap().valid_until = now() - Duration::from_secs(90_000);
    let r = respond(Some(&d), &get(base, ""), Peer { addr: None }, now());
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.head).contains("Consensus is too old"));
    // Nothing held yet.
    let r = respond(None, &get(base, ""), Peer { addr: None }, now());
    assert_eq!(r.status, 404);
}

#[test]
fn microdescs_by_digest_unknown_and_malformed_skipped() {
    let d = docs();
    let mut ids: Vec<String> = d
        .microdescs
        .keys()
        .map(|k| base64::Engine::encode(&base64::engine::general_purpose::STANDARD_NO_PAD, k))
        .collect();
    ids.push("not-base64!!".into());
    ids.push(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        [7u8; 32],
    ));
    ids.push(ids[0].clone());
    let (s, head, body) = answer(&format!("/tor/micro/d/{}.z", ids.join("-")), "");
    assert_eq!(s, 200);
    assert!(head.contains("Content-Encoding: deflate"));
    let text = String::from_utf8(inflate(&body)).unwrap();
    assert_eq!(split_microdescs(&text).len(), 3, "each once: {text}");
    assert_eq!(answer("/tor/micro/d/AAAA", "").0, 404);
    // Huge lists are bounded by the head limit, not by us.
    let many = vec!["A".repeat(43); 1100].join("-");
    assert_eq!(answer(&format!("/tor/micro/d/{many}"), "").0, 404);
}

#[test]
fn descriptors_by_digest_fingerprint_and_authority() {
    let inputs = CacheInputs {
        own: Some((DESC.to_owned(), EXTRA.to_owned())),
        ..CacheInputs::default()
    };
    let d = inputs.build();
    let own = d.own.clone().expect("own descriptor");
    let digest = signed_digest(DESC).unwrap();
    let a = |url: &str| {
        let r = respond(Some(&d), &get(url, ""), Peer { addr: None }, own.published);
        (r.status, r.body.bytes().to_vec(), r.resource)
    };
    let (s, body, res) = a("/tor/server/authority");
    assert_eq!((s, res), (200, Resource::Descriptor));
    assert_eq!(body, DESC.as_bytes());
    assert_eq!(
        a(&format!("/tor/server/d/{}", hex::encode(digest))).1,
        DESC.as_bytes()
    );
    assert_eq!(
        a(&format!("/tor/server/fp/{}", hex::encode(own.fp))).1,
        DESC.as_bytes()
    );
    assert_eq!(a("/tor/server/all").1, DESC.as_bytes());
    assert_eq!(&d.all_descs[..], DESC.as_bytes());
    assert_eq!(a("/tor/extra/authority").1, EXTRA.as_bytes());
    assert_eq!(a(&format!("/tor/server/d/{}", "00".repeat(20))).0, 404);
    assert_eq!(a("/tor/server/bogus").0, 404);
    // Fingerprint lookups skip descriptors older than 5 days (C's
    // ROUTER_MAX_AGE_TO_PUBLISH).
    let later = own.published + Duration::from_secs(6 * 86400);
    let r = respond(
        Some(&d),
        &get(&format!("/tor/server/fp/{}", hex::encode(own.fp)), ""),
        Peer { addr: None },
        later,
    );
    assert_eq!(r.status, 404);
}

#[test]
fn keys_by_fingerprint_signing_key_and_pair() {
    let aa = "AA".repeat(20);
    let sk = "11".repeat(20);
    for url in [
        "/tor/keys/all".to_owned(),
        format!("/tor/keys/fp/{aa}+{}", "BB".repeat(20)),
        format!("/tor/keys/sk/{sk}"),
        format!("/tor/keys/fp-sk/{aa}-{sk}"),
    ] {
        let (s, head, body) = answer(&url, "");
        assert_eq!(s, 200, "{url}");
        assert!(head.contains("Content-Length: "), "{head}");
        assert!(body.starts_with(b"dir-key-certificate-version 3"));
    }
    assert_eq!(answer("/tor/keys/authority", "").0, 404);
    assert_eq!(
        answer(&format!("/tor/keys/fp/{}", "BB".repeat(20)), "").0,
        404
    );
    assert_eq!(answer("/tor/keys/whatever", "").0, 400);
    let t = httpdate::fmt_http_date(now());
    assert_eq!(
        answer("/tor/keys/all", &format!("If-Modified-Since: {t}\r\n")).0,
        304
    );
}

#[test]
fn other_urls_and_methods() {
    assert_eq!(answer("/tor/", "").0, 404);
    assert_eq!(answer("/tor/hs/3/abc", "").0, 404);
    assert_eq!(answer("/tor/robots.txt", "").0, 200);
    let Parsed::Request(r) = parse_request(b"POST /tor/ HTTP/1.0\r\n\r\nbody") else {
        panic!()
    };
    let a = respond(Some(&docs()), &r, Peer { addr: None }, now());
    assert_eq!(a.status, 400);
    assert!(matches!(a.body, Body::Empty));
    // A public peer address is reported; a private one is not.
    let r = respond(
        Some(&docs()),
        &get("/tor/robots.txt", ""),
        Peer {
            addr: Some("8.8.8.8".parse().unwrap()),
        },
        now(),
    );
    assert!(String::from_utf8_lossy(&r.head).contains("X-Your-Address-Is: 8.8.8.8\r\n"));
    let r = respond(
        Some(&docs()),
        &get("/tor/robots.txt", ""),
        Peer {
            addr: Some("10.0.0.1".parse().unwrap()),
        },
        now(),
    );
    assert!(!String::from_utf8_lossy(&r.head).contains("X-Your-Address-Is"));
}

#[test]
fn splitting_documents() {
    let two = format!("{DESC}{DESC}");
    let v = split_descriptors(&two);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].0, signed_digest(DESC).unwrap());
    let joined = format!("junk\n{}{}", md(1), md(2));
    let mds = split_microdescs(&joined);
    assert_eq!(mds.len(), 2);
    assert_eq!(mds[0].1, md(1));
    let d: [u8; 32] = Sha256::digest(md(2).as_bytes()).into();
    assert_eq!(mds[1].0, d);
    for m in Method::ALL {
        assert!(!compress(m, b"abc", false).unwrap().is_empty());
    }
}

#[test]
fn big_per_request_answers_go_uncompressed() {
    let mut d = docs();
    let mut n = 0u32;
    while d.microdescs.values().map(|m| m.len()).sum::<usize>() <= serve::MAX_COMPRESS_PER_REQUEST {
        n += 1;
        let t = format!("onion-key\nntor-onion-key {n:0>2000}\n");
        let (digest, md) = split_microdescs(&t)[0];
        d.microdescs.insert(digest, md.into());
    }
    let ids: Vec<String> = d
        .microdescs
        .keys()
        .map(|k| base64::Engine::encode(&base64::engine::general_purpose::STANDARD_NO_PAD, k))
        .collect();
    let r = respond(
        Some(&d),
        &get(
            &format!("/tor/micro/d/{}.z", ids.join("-")),
            "Accept-Encoding: x-zstd\r\n",
        ),
        Peer { addr: None },
        now(),
    );
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.head).contains("Content-Encoding: identity"));
    assert!(r.body.bytes().len() > serve::MAX_COMPRESS_PER_REQUEST);
    // A big /tor/server/all is the snapshot's shared copy, not a new one.
    d.all_descs = Arc::from(vec![b'r'; serve::MAX_COMPRESS_PER_REQUEST + 1]);
    let r = respond(
        Some(&d),
        &get("/tor/server/all", ""),
        Peer { addr: None },
        now(),
    );
    assert!(matches!(&r.body, Body::Shared(b) if Arc::ptr_eq(b, &d.all_descs)));
}

#[test]
fn every_method_round_trips_with_tables_sized_to_the_input() {
    use crate::cache::diff_store::decompress;
    // A small document (a test network's consensus) and a larger one (the
    // cap on the dictionary is checked on the sizes alone below).
    let small: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("r relay{} {}\n", i % 97, i).into_bytes())
        .take(40_000)
        .collect();
    let big: Vec<u8> = (0..60_000u32)
        .flat_map(|i| format!("m {}\n", i.wrapping_mul(2_654_435_761)).into_bytes())
        .take(300_000)
        .collect();
    for data in [&small, &big] {
        for m in Method::ALL {
            for once in [true, false] {
                let z = compress(m, data, once).unwrap();
                assert_eq!(&decompress(m, &z).unwrap(), data, "{m:?} once={once}");
                if m == Method::Lzma {
                    // The .lzma header: properties byte, then the
                    // dictionary size, little-endian.
                    let dict = u32::from_le_bytes(z[1..5].try_into().unwrap());
                    let preset = if once { 6 } else { 4 };
                    assert_eq!(dict, super::lzma_dict_size(data.len(), preset));
                }
            }
        }
    }
    assert_eq!(super::lzma_dict_size(40_000, 6), 65_536);
    assert_eq!(super::lzma_dict_size(10, 6), 4096);
    assert_eq!(super::lzma_dict_size(9 << 20, 6), 8 << 20);
    assert_eq!(super::lzma_dict_size(9 << 20, 4), 4 << 20);
}
