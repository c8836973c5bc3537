//! Tests of the relay's key files: persistence, privacy, corruption,
//! rotation and renewal, the link certificates' chain.

use super::*;

const ROT: Duration = Duration::from_secs(28 * 86400);

#[test]
fn keys_persist_and_files_are_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dd = tmp.path().join("data");
    let now = SystemTime::now();
    let k1 = RelayKeys::load_or_create(&dd, "weft", ROT, now).unwrap();
    let k2 = RelayKeys::load_or_create(&dd, "weft", ROT, now).unwrap();
    assert_eq!(k1.fingerprint, k2.fingerprint);
    assert_eq!(k1.ed_id, k2.ed_id);
    assert_eq!(k1.onion.ntor.public, k2.onion.ntor.public);
    assert_eq!(k1.signing_pub, k2.signing_pub);
    assert_eq!(k1.rsa_id.size(), 128);
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dd), 0o700);
    assert_eq!(mode(&dd.join("keys")), 0o700);
    for e in fs::read_dir(dd.join("keys")).unwrap() {
        assert_eq!(mode(&e.unwrap().path()), 0o600);
    }
    let fp = fs::read_to_string(dd.join("fingerprint")).unwrap();
    assert_eq!(fp, format!("weft {}\n", k1.fingerprint_hex()));
}

#[test]
fn corrupt_key_file_is_an_error_and_not_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let dd = tmp.path().join("data");
    RelayKeys::load_or_create(&dd, "weft", ROT, SystemTime::now()).unwrap();
    for name in [
        "secret_id_key",
        "ed25519_master_id_secret_key",
        "secret_onion_key_ntor",
        "secret_onion_key",
    ] {
        let p = dd.join("keys").join(name);
        let orig = fs::read(&p).unwrap();
        fs::write(&p, b"garbage").unwrap();
        let e = RelayKeys::load_or_create(&dd, "weft", ROT, SystemTime::now())
            .err()
            .expect("corrupt key accepted");
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"garbage");
        fs::write(&p, orig).unwrap();
    }
}

#[test]
fn onion_keys_rotate_and_old_key_expires() {
    let tmp = tempfile::tempdir().unwrap();
    let dd = tmp.path().join("data");
    let t0 = SystemTime::now();
    let mut k = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
    let first = k.onion.ntor.public;
    let grace = Duration::from_secs(7 * 86400);
    assert!(!k.rotate_onion_keys_if_due(t0, ROT, grace).unwrap());
    let t1 = t0 + ROT;
    assert!(k.rotate_onion_keys_if_due(t1, ROT, grace).unwrap());
    assert_ne!(k.onion.ntor.public, first);
    assert_eq!(k.onion_old.as_ref().unwrap().ntor.public, first);
    assert_eq!(k.ntor_keys().len(), 2);
    // Reload keeps both generations.
    let k2 = RelayKeys::load_or_create(&dd, "weft", ROT, t1).unwrap();
    assert_eq!(k2.onion_old.as_ref().unwrap().ntor.public, first);
    k.rotate_onion_keys_if_due(t1 + grace, ROT, grace).unwrap();
    assert!(k.onion_old.is_none());
}

#[test]
fn signing_key_renews_near_expiry() {
    let tmp = tempfile::tempdir().unwrap();
    let dd = tmp.path().join("data");
    let t0 = SystemTime::now();
    let mut k = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
    let s0 = k.signing_pub;
    assert!(!k.renew_signing_key_if_due(t0).unwrap());
    assert!(k
        .renew_signing_key_if_due(t0 + SIGNING_KEY_LIFETIME - Duration::from_secs(3600))
        .unwrap());
    assert_ne!(s0, k.signing_pub);
}

#[test]
fn link_keys_certs_chain_to_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let k = RelayKeys::load_or_create(tmp.path(), "weft", ROT, SystemTime::now()).unwrap();
    let l = LinkKeys::generate(&k, SystemTime::now()).unwrap();
    use tor_checkable::{SelfSigned, Timebound};
    let signing = ed25519::Ed25519Identity::new(k.signing_pub);
    let c5 = tor_cert::Ed25519Cert::decode(&l.cert_tls_link)
        .unwrap()
        .should_be_signed_with(&signing)
        .unwrap()
        .check_signature()
        .unwrap()
        .if_valid_now()
        .unwrap();
    assert_eq!(c5.cert_type(), CertType::SIGNING_V_TLS_CERT);
    match c5.subject_key() {
        CertifiedKey::X509Sha256Digest(d) => assert_eq!(d, &l.tls_cert_digest),
        other => panic!("unexpected {other:?}"),
    }
    let c6 = tor_cert::Ed25519Cert::decode(&l.cert_auth)
        .unwrap()
        .should_be_signed_with(&signing)
        .unwrap()
        .check_signature()
        .unwrap()
        .if_valid_now()
        .unwrap();
    assert_eq!(c6.cert_type(), CertType::SIGNING_V_LINK_AUTH);
    let id_cert = openssl::x509::X509::from_der(&l.id_cert_der).unwrap();
    let idk = PKey::from_rsa(k.rsa_id.clone()).unwrap();
    assert!(id_cert.verify(&idk).unwrap());
}
