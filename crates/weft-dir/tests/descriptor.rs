//! Server descriptor and extra-info tests: what we emit parses and verifies
//! with both of Arti's router-descriptor parsers, both signatures and both
//! crosscerts check out when verified independently with OpenSSL and
//! tor-llcrypto, the item order is C Tor's, and our digest and signature
//! conventions reproduce C Tor's on documents C Tor made.

use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tor_checkable::{SelfSigned, TimeBound};
use tor_llcrypto::pk::ed25519;
use tor_netdoc::doc::routerdesc::{RelayPlatform, RouterDesc, RouterDescUnverified};
use weft_crypto::certs::rsa_verify_raw;
use weft_crypto::keys::RelayKeys;
use weft_dir::descriptor::*;

const ROT: Duration = Duration::from_secs(28 * 86400);

fn make_keys() -> (tempfile::TempDir, RelayKeys) {
    let t = tempfile::tempdir().unwrap();
    let k = RelayKeys::load_or_create(t.path(), "weftTest", ROT, SystemTime::now()).unwrap();
    (t, k)
}

/// `now` truncated to whole seconds (documents have one-second precision).
/// `desc` as Arti's parser reads it, its signatures checked (its
/// validity period is not: some tests build old descriptors).
fn arti_parsed(desc: &str) -> RouterDesc {
    RouterDesc::parse(desc)
        .expect("parse")
        .check_signature()
        .expect("signatures")
        .dangerously_assume_timely()
}

fn now_secs() -> SystemTime {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    UNIX_EPOCH + Duration::from_secs(s)
}

fn params(now: SystemTime) -> DescriptorParams {
    let mut p = DescriptorParams::new("weftTest", Ipv4Addr::new(127, 0, 0, 1), 9001, now);
    p.contact = Some("weft operators <weft AT example dot org>".into());
    p.uptime = 4242;
    p.bandwidth_avg = 5_000_000;
    p.bandwidth_burst = 10_000_000;
    p.bandwidth_observed = 123_456;
    p
}

/// The PEM object following the line `keyword_line`, decoded.
fn object_after(doc: &str, keyword_line: &str) -> Vec<u8> {
    let mut lines = doc.lines();
    lines
        .by_ref()
        .find(|l| *l == keyword_line)
        .unwrap_or_else(|| panic!("no {keyword_line}"));
    let begin = lines.next().unwrap();
    assert!(begin.starts_with("-----BEGIN "), "{begin}");
    let mut b64 = String::new();
    for l in lines {
        if l.starts_with("-----END ") {
            break;
        }
        assert!(l.len() <= 64, "PEM line longer than 64 columns");
        b64.push_str(l);
    }
    STANDARD.decode(b64).unwrap()
}

/// Keywords of the lines outside PEM objects, in order.
fn keywords(doc: &str) -> Vec<&str> {
    let mut kws = Vec::new();
    let mut in_obj = false;
    for l in doc.lines() {
        if l.starts_with("-----BEGIN ") {
            in_obj = true;
        } else if l.starts_with("-----END ") {
            in_obj = false;
        } else if !in_obj {
            kws.push(l.split(' ').next().unwrap_or(""));
        }
    }
    kws
}

/// The argument of the first line starting with `kw `.
fn arg_of<'a>(doc: &'a str, kw: &str) -> &'a str {
    doc.lines()
        .find_map(|l| l.strip_prefix(kw).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {kw}"))
}

/// Verify the two document signatures the way C Tor's parser does, with
/// independent code: Ed25519 over SHA-256(prefix | text through
/// "router-sig-ed25519 "), raw PKCS#1 over SHA-1(text through
/// "router-signature\n").
fn verify_doc_signatures(doc: &str, signing_pub: &[u8; 32], rsa_id_der: &[u8]) {
    let kw = "\nrouter-sig-ed25519 ";
    let pos = doc.find(kw).unwrap() + kw.len();
    let mut h = Sha256::new();
    h.update(b"Tor router descriptor signature v1");
    h.update(&doc.as_bytes()[..pos]);
    let sig_b64 = doc[pos..].lines().next().unwrap();
    assert!(
        !sig_b64.contains('='),
        "Ed25519 signature must be unpadded base64"
    );
    let sig: [u8; 64] = STANDARD_NO_PAD.decode(sig_b64).unwrap().try_into().unwrap();
    let pk = ed25519::PublicKey::from_bytes(signing_pub).unwrap();
    pk.verify(&h.finalize(), &ed25519::Signature::from_bytes(&sig))
        .expect("Ed25519 document signature");

    let kw = "\nrouter-signature\n";
    let end = doc.find(kw).unwrap() + kw.len();
    let digest = Sha1::digest(&doc.as_bytes()[..end]);
    let rsa = openssl::rsa::Rsa::public_key_from_der_pkcs1(rsa_id_der).unwrap();
    let sig = object_after(doc, "router-signature");
    assert_eq!(
        rsa_verify_raw(&rsa, &sig).unwrap(),
        digest.to_vec(),
        "RSA document signature"
    );
    assert!(doc.ends_with("-----END SIGNATURE-----\n"));
}

/// The signing key certified by an `identity-ed25519` type-4 certificate,
/// after checking that it is signed by `master`.
fn certified_signing_key(doc: &str, master: Option<&[u8; 32]>) -> ([u8; 32], [u8; 32]) {
    let cert = object_after(doc, "identity-ed25519");
    let c = tor_cert::Ed25519Cert::decode(&cert)
        .unwrap()
        .should_have_signing_key()
        .unwrap()
        .check_signature()
        .unwrap()
        .dangerously_assume_timely();
    assert_eq!(c.cert_type(), tor_cert::CertType::IDENTITY_V_SIGNING);
    let signer: [u8; 32] = c.signing_key().unwrap().as_bytes().try_into().unwrap();
    if let Some(m) = master {
        assert_eq!(&signer, m);
    }
    let subject: [u8; 32] = c
        .subject_key()
        .as_ed25519()
        .unwrap()
        .as_bytes()
        .try_into()
        .unwrap();
    (subject, signer)
}

#[test]
fn arti_legacy_parser_accepts_and_verifies() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let p = params(now);
    let (desc, _ei) = build_descriptor_pair(&k, &p).unwrap();
    let rd: RouterDesc = RouterDesc::parse(&desc)
        .expect("parse")
        .check_signature()
        .expect("signatures and crosscerts")
        .if_valid_at(&now)
        .expect("timely");
    assert_eq!(rd.router.nickname.as_str(), "weftTest");
    assert_eq!(rd.router.address, Ipv4Addr::new(127, 0, 0, 1));
    assert_eq!(rd.router.orport, 9001);
    assert_eq!(rd.router.dirport, 0);
    assert_eq!(rd.rsa_identity().as_bytes(), &k.fingerprint[..]);
    assert_eq!(rd.ed_identity().as_bytes(), &k.ed_id[..]);
    assert_eq!(rd.ntor_onion_key().to_bytes(), k.onion.ntor.public);
    assert_eq!(rd.protocols().to_string(), DEFAULT_PROTO);
    assert_eq!(rd.published(), now);
    assert_eq!(rd.uptime, Some(4242));
    assert_eq!(rd.platform, Some(RelayPlatform::Other(default_platform())));
    assert!(default_platform().starts_with("weft "));
}

#[test]
fn arti_parse2_parser_accepts_and_verifies() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let p = params(now);
    let (desc, ei) = build_descriptor_pair(&k, &p).unwrap();
    let input = tor_netdoc::parse2::ParseInput::new(&desc, "weft descriptor");
    let unverified: RouterDescUnverified =
        tor_netdoc::parse2::parse_netdoc(&input).expect("parse2");
    let rd = unverified
        .verify()
        .expect("verify")
        .if_valid_at(&now)
        .expect("timely");
    assert_eq!(
        (
            rd.bandwidth.average,
            rd.bandwidth.burst,
            rd.bandwidth.observed
        ),
        (5_000_000, 10_000_000, 123_456)
    );
    assert_eq!(rd.contact.as_ref().map(|c| c.to_string()), p.contact);
    let eid = rd.extra_info_digest.expect("extra-info-digest");
    let digests = extra_info_digests(&ei).unwrap();
    assert_eq!(hex::encode_upper(eid.sha1.0), digests.sha1_hex_upper);
    assert_eq!(
        STANDARD_NO_PAD.encode(eid.sha2.unwrap().0),
        digests.sha256_b64
    );
    assert!(rd.tunnelled_dir_server.is_none() && rd.hidden_service_dir.is_none());
}

#[test]
fn signatures_and_crosscerts_verify_independently() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let p = params(now);
    let (desc, ei) = build_descriptor_pair(&k, &p).unwrap();

    // identity-ed25519 certifies our signing key and is signed by the master key.
    let (subject, _) = certified_signing_key(&desc, Some(&k.ed_id));
    assert_eq!(subject, k.signing_pub);
    assert_eq!(object_after(&desc, "identity-ed25519"), k.signing_cert);
    assert_eq!(
        arg_of(&desc, "master-key-ed25519"),
        STANDARD_NO_PAD.encode(k.ed_id)
    );

    verify_doc_signatures(&desc, &k.signing_pub, &k.rsa_id_der);
    verify_doc_signatures(&ei, &k.signing_pub, &k.rsa_id_der);

    // signing-key is the RSA identity; fingerprint line matches it.
    assert_eq!(object_after(&desc, "signing-key"), k.rsa_id_der);
    let fp = arg_of(&desc, "fingerprint");
    assert_eq!(fp.len(), 49);
    assert_eq!(fp.replace(' ', ""), hex::encode_upper(k.fingerprint));

    // onion-key-crosscert: TAP key's raw signature over SHA1(id) | ed master.
    let tap_der = object_after(&desc, "onion-key");
    assert_eq!(tap_der, k.onion.tap.public_key_to_der_pkcs1().unwrap());
    let tap = openssl::rsa::Rsa::public_key_from_der_pkcs1(&tap_der).unwrap();
    assert_eq!(tap.size(), 128);
    let signed = rsa_verify_raw(&tap, &object_after(&desc, "onion-key-crosscert")).unwrap();
    assert_eq!(&signed[..20], &k.fingerprint);
    assert_eq!(&signed[20..], &k.ed_id);

    // ntor-onion-key-crosscert: type 0x0A over the master key, signed by
    // the key derived from the ntor key with the advertised sign bit,
    // expiring published + onion key lifetime.
    let bit: u8 = arg_of(&desc, "ntor-onion-key-crosscert").parse().unwrap();
    let ntor_line = format!("ntor-onion-key-crosscert {bit}");
    let cc = object_after(&desc, &ntor_line);
    let ntor_pub = tor_llcrypto::pk::curve25519::PublicKey::from(k.onion.ntor.public);
    let edpk =
        tor_llcrypto::pk::keymanip::convert_curve25519_to_ed25519_public(&ntor_pub, bit).unwrap();
    let c = tor_cert::Ed25519Cert::decode(&cc)
        .unwrap()
        .should_be_signed_with(&ed25519::Ed25519Identity::from(edpk))
        .unwrap()
        .check_signature()
        .unwrap();
    let exp = p.published + p.onion_key_lifetime;
    c.check_valid_at(&(exp - Duration::from_secs(1)))
        .expect("valid until published + lifetime");
    assert!(c
        .check_valid_at(&(exp + Duration::from_secs(3601)))
        .is_err());
    let c = c.dangerously_assume_timely();
    assert_eq!(c.cert_type(), tor_cert::CertType::NTOR_CC_IDENTITY);
    assert_eq!(c.subject_key().as_ed25519().unwrap().as_bytes(), &k.ed_id);
    assert_eq!(
        arg_of(&desc, "ntor-onion-key"),
        STANDARD_NO_PAD.encode(k.onion.ntor.public)
    );
}

#[test]
fn item_order_and_encodings_match_c_tor() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let p = params(now);
    let (desc, ei) = build_descriptor_pair(&k, &p).unwrap();
    let kws = keywords(&desc);
    assert_eq!(
        kws,
        [
            "router",
            "identity-ed25519",
            "master-key-ed25519",
            "platform",
            "proto",
            "published",
            "fingerprint",
            "uptime",
            "bandwidth",
            "extra-info-digest",
            "onion-key",
            "signing-key",
            "onion-key-crosscert",
            "ntor-onion-key-crosscert",
            "contact",
            "ntor-onion-key",
            "reject",
            "router-sig-ed25519",
            "router-signature",
        ]
    );
    assert!(desc.starts_with("router weftTest 127.0.0.1 9001 0 0\nidentity-ed25519\n"));
    assert!(desc.contains("\nreject *:*\nrouter-sig-ed25519 "));
    assert!(desc.contains("\nbandwidth 5000000 10000000 123456\n"));
    assert!(desc.contains("\nuptime 4242\n"));
    let published = arg_of(&desc, "published");
    assert_eq!(published.len(), 19, "{published}");
    assert_eq!(published, format_time(now).unwrap());
    // One-line keys: unpadded base64.
    for kw in ["master-key-ed25519", "ntor-onion-key", "router-sig-ed25519"] {
        assert!(!arg_of(&desc, kw).contains('='), "{kw}");
    }
    // extra-info: extra-info, identity-ed25519, published, sigs.
    let ei_kws = keywords(&ei);
    assert_eq!(
        ei_kws,
        [
            "extra-info",
            "identity-ed25519",
            "published",
            "router-sig-ed25519",
            "router-signature"
        ]
    );
    assert!(ei.starts_with(&format!(
        "extra-info weftTest {}\nidentity-ed25519\n",
        hex::encode_upper(k.fingerprint)
    )));
    assert_eq!(arg_of(&ei, "published"), published);
    // The descriptor's extra-info-digest refers to exactly this extra-info.
    let d = extra_info_digests(&ei).unwrap();
    assert_eq!(
        arg_of(&desc, "extra-info-digest"),
        format!("{} {}", d.sha1_hex_upper, d.sha256_b64)
    );
    // And without extra-info, there is no such line.
    let alone = build_server_descriptor(&k, &p, None).unwrap();
    assert!(!alone.contains("extra-info-digest"));
    assert_eq!(
        signed_digest(&alone).unwrap(),
        <[u8; 20]>::from(Sha1::digest(
            &alone.as_bytes()[..alone.find("router-signature\n").unwrap() + 17]
        ))
    );
}

/// Our digest and signature conventions reproduce C Tor's own documents
/// (made by C Tor 0.4.9.6 in chutney).
#[test]
fn c_tor_documents_agree_with_our_conventions() {
    let desc = include_str!("data/ctor-descriptor-test002a.txt");
    let ei = include_str!("data/ctor-extrainfo-test002a.txt");
    // extra-info-digest = SHA1(signed part) hex, SHA256(whole doc) base64.
    let d = extra_info_digests(ei).unwrap();
    assert_eq!(
        arg_of(desc, "extra-info-digest"),
        format!("{} {}", d.sha1_hex_upper, d.sha256_b64)
    );
    // Same signature rules for both documents.
    let (signing, _master) = certified_signing_key(desc, None);
    let rsa_der = object_after(desc, "signing-key");
    verify_doc_signatures(desc, &signing, &rsa_der);
    verify_doc_signatures(ei, &signing, &rsa_der);
    // The plain consensus lists the descriptor by our signed_digest().
    let cons = include_str!("data/cached-consensus");
    let digest_b64 = STANDARD_NO_PAD.encode(signed_digest(desc).unwrap());
    let r_line = cons.lines().find(|l| l.starts_with("r test002a ")).unwrap();
    assert_eq!(
        r_line.split(' ').nth(3),
        Some(digest_b64.as_str()),
        "{r_line}"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let good = params(now);
    let check = |f: &dyn Fn(&mut DescriptorParams)| {
        let mut p = good.clone();
        f(&mut p);
        build_server_descriptor(&k, &p, None).expect_err("accepted a bad parameter")
    };
    assert!(matches!(
        check(&|p| p.nickname = "".into()),
        DescError::InvalidNickname(_)
    ));
    assert!(matches!(
        check(&|p| p.nickname = "a".repeat(20)),
        DescError::InvalidNickname(_)
    ));
    assert!(matches!(
        check(&|p| p.nickname = "we-ft".into()),
        DescError::InvalidNickname(_)
    ));
    assert!(matches!(
        check(&|p| p.platform = "Tor 0.4.9.11 on Linux".into()),
        DescError::InvalidField {
            field: "platform",
            ..
        }
    ));
    assert!(matches!(
        check(&|p| p.platform = "weft\nreject *:*".into()),
        DescError::InvalidField {
            field: "platform",
            ..
        }
    ));
    assert!(matches!(
        check(&|p| p.contact = Some("a\nb".into())),
        DescError::InvalidField {
            field: "contact",
            ..
        }
    ));
    assert!(matches!(
        check(&|p| p.proto = "".into()),
        DescError::InvalidField { field: "proto", .. }
    ));
    assert!(matches!(
        check(&|p| p.exit_policy_lines.clear()),
        DescError::InvalidField { .. }
    ));
    assert!(matches!(
        check(&|p| p.exit_policy_lines = vec!["allow *:*".into()]),
        DescError::InvalidField { .. }
    ));
    assert!(matches!(
        check(&|p| p.bandwidth_avg = 0),
        DescError::InvalidField { .. }
    ));
    assert!(matches!(
        check(&|p| p.or_port = 0),
        DescError::InvalidField { .. }
    ));
    assert!(matches!(
        check(&|p| p.published = k.signing_cert_expiry + Duration::from_secs(1)),
        DescError::SigningCertExpired
    ));
    assert!(matches!(
        check(&|p| p.exit_policy_lines = vec!["reject 10.0.0.0/8:1-65535".into(); 1000]),
        DescError::TooLarge { .. }
    ));
    // Huge bandwidths are capped at INT32_MAX, which C Tor can parse.
    let mut p = good.clone();
    p.bandwidth_avg = u64::MAX;
    let d = build_server_descriptor(&k, &p, None).unwrap();
    assert!(d.contains("\nbandwidth 2147483647 10000000 123456\n"));
    assert!(build_extra_info(&k, "bad nick", now).is_err());
}

/// `overload-general 1 <start of the hour>` after the exit policy, just
/// before the signature, while under 72 h old (C Tor router.c, rephist.c);
/// the signed document still verifies in Arti's parser.
#[test]
fn overload_general_line_placed_as_c_tor_and_expires() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let hour = UNIX_EPOCH
        + Duration::from_secs(now.duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600 * 3600);
    let mut p = params(now);
    p.overload_general = Some(hour);
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    let kws = keywords(&desc);
    let i = kws
        .iter()
        .position(|k| *k == "overload-general")
        .expect("line");
    assert_eq!(kws[i - 1], "reject");
    assert_eq!(kws[i + 1], "router-sig-ed25519");
    let line = desc
        .lines()
        .find(|l| l.starts_with("overload-general"))
        .unwrap();
    assert_eq!(
        line,
        format!("overload-general 1 {}", format_time(hour).unwrap())
    );
    arti_parsed(&desc);
    p.overload_general = Some(now - Duration::from_secs(73 * 3600));
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(!desc.contains("overload-general"));
}

/// MyFamily's entries give one `family` line (Arti's parser reads it
/// back); bad entries are refused.
#[test]
fn family_line() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let mut p = params(now);
    p.family = vec![
        "$AAAABBBBCCCCDDDDEEEEFFFF0000111122223333".into(),
        "friend".into(),
    ];
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(
        desc.contains("\nfamily $AAAABBBBCCCCDDDDEEEEFFFF0000111122223333 friend\n"),
        "{desc}"
    );
    let rd = arti_parsed(&desc);
    assert_eq!(rd.family().members().count(), 2);
    p.family = vec!["bad entry\nrouter".into()];
    assert!(build_descriptor_pair(&k, &p).is_err());
    let (plain, _) = build_descriptor_pair(&k, &params(now)).unwrap();
    assert!(!plain.contains("\nfamily "));
}

/// Hibernating (accounting or a shutdown wait): the `hibernating 1` line,
/// which Arti's parser accepts (it does not keep its value); none
/// otherwise.
#[test]
fn hibernating_line() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let mut p = params(now);
    p.hibernating = true;
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(desc.contains("\nhibernating 1\n"), "{desc}");
    arti_parsed(&desc);
    let (plain, _) = build_descriptor_pair(&k, &params(now)).unwrap();
    assert!(!plain.contains("hibernating"));
}

/// An IPv6 ORPort: one `or-address` line, which Arti's parser reads back.
#[test]
fn or_address_line() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let mut p = params(now);
    p.or_address_v6 = Some("[2001:db8::5]:9002".parse().unwrap());
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(desc.contains("\nor-address [2001:db8::5]:9002\n"), "{desc}");
    let rd = arti_parsed(&desc);
    assert!(rd.or_ports().any(|a| a
        == "[2001:db8::5]:9002"
            .parse::<std::net::SocketAddr>()
            .unwrap()));
}

/// FamilyId: a `family-cert` per family key, which Arti's parser verifies
/// (type, signer, our identity certified) and turns into the family ID.
#[test]
fn family_cert_lines() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let mut p = params(now);
    let fam = weft_crypto::family_keys::generate();
    let cert =
        weft_crypto::family_keys::family_cert(&fam, &k.ed_id, k.signing_cert_expiry).unwrap();
    p.family_certs = vec![cert];
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(
        desc.contains("\nfamily-cert\n-----BEGIN FAMILY CERT-----\n"),
        "{desc}"
    );
    let rd = arti_parsed(&desc);
    let ids: Vec<String> = rd
        .family_ids()
        .as_ref()
        .iter()
        .map(|i: &tor_netdoc::types::family::RelayFamilyId| i.to_string())
        .collect();
    assert_eq!(
        ids,
        vec![format!(
            "ed25519:{}",
            weft_crypto::family_keys::family_id(fam.public().as_bytes())
        )]
    );
    // A certificate for another relay's identity is refused.
    p.family_certs =
        vec![weft_crypto::family_keys::family_cert(&fam, &[7; 32], k.signing_cert_expiry).unwrap()];
    let (bad, _) = build_descriptor_pair(&k, &p).unwrap();
    let refused = match RouterDesc::parse(&bad) {
        Err(_) => true,
        Ok(d) => d.check_signature().is_err(),
    };
    assert!(refused, "a family-cert for another identity was accepted");
}

/// An IPv6 exit (IPv6Exit with IPv6 ports accepted): the `ipv6-policy`
/// summary line after the exit policy, as C Tor places it, which Arti's
/// parser reads back; none otherwise.
#[test]
fn ipv6_policy_line() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let mut p = params(now);
    p.exit_policy_lines = vec!["accept *:80".into(), "reject *:*".into()];
    p.ipv6_policy = Some("accept 80,443".into());
    let (desc, _) = build_descriptor_pair(&k, &p).unwrap();
    assert!(
        desc.contains("\naccept *:80\nreject *:*\nipv6-policy accept 80,443\n"),
        "{desc}"
    );
    let rd = arti_parsed(&desc);
    assert!(rd.ipv6_policy.allows_port(443));
    assert!(!rd.ipv6_policy.allows_port(22));
    let (plain, _) = build_descriptor_pair(&k, &params(now)).unwrap();
    assert!(!plain.contains("ipv6-policy"));
    p.ipv6_policy = Some("accept 80\nreject 1-65535".into());
    assert!(build_descriptor_pair(&k, &p).is_err(), "one line only");
}

/// Statistics in the extra-info: C's chunks after `published`, before the
/// signatures, the digests over the whole; a document over the
/// authorities' limit loses chunks from the end (as C's
/// `extrainfo_dump_to_string()`); a chunk that is not whole printable
/// lines is refused.
#[test]
fn extra_info_statistics_chunks() {
    let (_t, k) = make_keys();
    let now = now_secs();
    let history = "write-history 2026-11-29 00:00:00 (86400 s) 20480\n\
                   read-history 2026-11-29 00:00:00 (86400 s) 10240\n"
        .to_string();
    let overload = "overload-fd-exhausted 1 2026-11-29 00:00:00\n".to_string();
    let (ei, digests) =
        build_extra_info_with_stats(&k, "weftTest", now, &[history.clone(), overload.clone()])
            .unwrap();
    let kws = keywords(&ei);
    let at = |kw: &str| kws.iter().position(|k| *k == kw).unwrap();
    assert!(at("published") < at("write-history"));
    assert!(at("read-history") < at("overload-fd-exhausted"));
    assert!(at("overload-fd-exhausted") < at("router-sig-ed25519"));
    assert_eq!(extra_info_digests(&ei), Some(digests));
    // Too large: the last chunk goes first, then the one before.
    let huge = format!("{}\n", "x".repeat(MAX_EXTRA_INFO_SIZE));
    let (ei, _) =
        build_extra_info_with_stats(&k, "weftTest", now, &[history.clone(), huge]).unwrap();
    assert!(ei.contains(&history) && ei.len() < MAX_EXTRA_INFO_SIZE);
    for bad in ["no newline", "two\n\nblank\n", "tab\there\n"] {
        assert!(
            build_extra_info_with_stats(&k, "weftTest", now, &[bad.to_string()]).is_err(),
            "{bad:?}"
        );
    }
}
