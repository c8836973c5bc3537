//! Certificates the relay emits: Ed25519 certificates (cert-spec §2.1, types
//! 4, 5, 6 and 0x0A), the RSA→Ed25519 cross-certificate (type 7, cert-spec
//! §2.3), the TAP onion-key cross-certificate, and the X.509 certificates of
//! the TLS layer (link certificate and the self-signed RSA identity
//! certificate, CERTS type 2). Also the raw PKCS#1 v1.5 signature (no
//! DigestInfo) that Tor uses for RSA signatures.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openssl::asn1::{Asn1Integer, Asn1Time};
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::{Padding, Rsa};
use openssl::x509::{X509Name, X509};
use sha2::{Digest, Sha256};
use tor_cert::{CertType, CertifiedKey, Ed25519Cert};
use tor_llcrypto::pk::ed25519;

/// Errors while producing a certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// OpenSSL refused an operation.
    #[error("openssl: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
    /// The Ed25519 certificate encoder refused.
    #[error("ed25519 certificate encoding: {0}")]
    Encode(String),
    /// The ntor key could not be converted to an Ed25519 key.
    #[error("ntor key conversion failed")]
    NtorConversion,
}

/// Seconds since the epoch, saturating at 0 for times before it.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Encode and sign an Ed25519 certificate of `cert_type` certifying `key`,
/// expiring at `expiry` (rounded up to the hour). When `include_signer` is
/// set, the signed-with-ed25519-key extension (type 4) carries the signer's
/// public key, which C Tor requires on type-4 certificates.
pub fn ed_cert<S>(
    cert_type: CertType,
    key: CertifiedKey,
    expiry: SystemTime,
    signer: &S,
    include_signer: bool,
) -> Result<Vec<u8>, CertError>
where
    S: ed25519::Ed25519PublicKey + ed25519::Ed25519SigningKey,
{
    let mut b = Ed25519Cert::builder();
    b.cert_type(cert_type).cert_key(key).expiration(expiry);
    if include_signer {
        b.signing_key(signer.public_key().into());
    }
    let enc = b
        .encode_and_sign(signer)
        .map_err(|e| CertError::Encode(e.to_string()))?;
    Ok(tor_cert::EncodedCert::encoded(&enc).to_vec())
}

/// Raw PKCS#1 v1.5 type-1 signature over `data` (no hashing, no DigestInfo),
/// as C Tor's `crypto_pk_private_sign()` makes it.
pub fn rsa_sign_raw(key: &Rsa<Private>, data: &[u8]) -> Result<Vec<u8>, CertError> {
    let mut out = vec![0u8; key.size() as usize];
    let n = key.private_encrypt(data, &mut out, Padding::PKCS1)?;
    out.truncate(n);
    Ok(out)
}

/// Verify a raw PKCS#1 v1.5 signature made by [`rsa_sign_raw`]; returns the
/// signed data.
pub fn rsa_verify_raw<T: openssl::pkey::HasPublic>(
    key: &Rsa<T>,
    sig: &[u8],
) -> Result<Vec<u8>, CertError> {
    let mut out = vec![0u8; key.size() as usize];
    let n = key.public_decrypt(sig, &mut out, Padding::PKCS1)?;
    out.truncate(n);
    Ok(out)
}

/// The prefix hashed into the RSA→Ed25519 cross-certificate (cert-spec §2.3).
const RSA_ED_CROSSCERT_PREFIX: &[u8] = b"Tor TLS RSA/Ed25519 cross-certificate";

/// Build the RSA→Ed25519 cross-certificate (CERTS type 7): ED_KEY(32) |
/// EXPIRATION(4, hours since epoch) | SIGLEN(1) | SIGNATURE, the signature
/// being a raw PKCS#1 signature by the RSA identity over
/// SHA256(prefix | the first 36 bytes). [cert-spec §2.3]
pub fn rsa_ed_crosscert(
    rsa_id: &Rsa<Private>,
    ed_master: &[u8; 32],
    expiry: SystemTime,
) -> Result<Vec<u8>, CertError> {
    let hours = unix_secs(expiry).div_ceil(3600);
    let hours = u32::try_from(hours).unwrap_or(u32::MAX);
    let mut body = Vec::with_capacity(36 + 1 + 128);
    body.extend_from_slice(ed_master);
    body.extend_from_slice(&hours.to_be_bytes());
    let mut h = Sha256::new();
    h.update(RSA_ED_CROSSCERT_PREFIX);
    h.update(&body);
    let sig = rsa_sign_raw(rsa_id, &h.finalize())?;
    body.push(sig.len() as u8);
    body.extend_from_slice(&sig);
    Ok(body)
}

/// The `onion-key-crosscert` of a server descriptor: a raw PKCS#1 signature
/// by the TAP onion key over SHA1(RSA identity DER) | Ed25519 master key.
/// [dir-spec §2.1.1; C routerkeys.c make_tap_onion_key_crosscert()]
pub fn tap_onion_crosscert(
    tap: &Rsa<Private>,
    rsa_id_digest: &[u8; 20],
    ed_master: &[u8; 32],
) -> Result<Vec<u8>, CertError> {
    let mut data = [0u8; 52];
    data[..20].copy_from_slice(rsa_id_digest);
    data[20..].copy_from_slice(ed_master);
    rsa_sign_raw(tap, &data)
}

/// The `ntor-onion-key-crosscert`: a type-0x0A Ed25519 certificate of the Ed
/// master identity, signed by the Ed25519 key derived from the ntor secret.
/// Returns the certificate and the sign bit of the derived public key.
pub fn ntor_onion_crosscert(
    ntor_secret: &[u8; 32],
    ed_master: &[u8; 32],
    expiry: SystemTime,
) -> Result<(Vec<u8>, u8), CertError> {
    let secret = tor_llcrypto::pk::curve25519::StaticSecret::from(*ntor_secret);
    let (kp, signbit) = tor_llcrypto::pk::keymanip::convert_curve25519_to_ed25519_private(&secret)
        .ok_or(CertError::NtorConversion)?;
    let mut b = Ed25519Cert::builder();
    b.cert_type(CertType::NTOR_CC_IDENTITY)
        .cert_key(CertifiedKey::Ed25519(ed25519::Ed25519Identity::new(
            *ed_master,
        )))
        .expiration(expiry);
    let enc = b
        .encode_and_sign(&kp)
        .map_err(|e| CertError::Encode(e.to_string()))?;
    Ok((tor_cert::EncodedCert::encoded(&enc).to_vec(), signbit))
}

/// A random host name in C Tor's style (`www.<random>.net`).
fn random_hostname(suffix: &str) -> String {
    let bytes: [u8; 8] = crate::random_array();
    let mut s = String::from("www.");
    for b in bytes {
        s.push((b'a' + (b % 26)) as char);
    }
    s.push_str(suffix);
    s
}

fn name(cn: &str) -> Result<X509Name, CertError> {
    let mut n = X509Name::builder()?;
    n.append_entry_by_text("CN", cn)?;
    Ok(n.build())
}

/// Build an X.509 certificate for `subject` signed by `issuer`, with random
/// CNs and serial, a notBefore rounded down to a day boundary in the past and
/// the given lifetime, like C Tor's `tor_tls_create_certificate()`.
pub fn x509_cert(
    subject: &PKey<Private>,
    issuer: &PKey<Private>,
    self_signed: bool,
    lifetime: Duration,
    now: SystemTime,
) -> Result<X509, CertError> {
    let issuer_cn = random_hostname(".net");
    let subject_cn = if self_signed {
        issuer_cn.clone()
    } else {
        random_hostname(".com")
    };
    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial_bytes: [u8; 8] = crate::random_array();
    let serial = BigNum::from_slice(&serial_bytes)?;
    let serial = Asn1Integer::from_bn(&serial)?;
    b.set_serial_number(&serial)?;
    let now_s = unix_secs(now);
    // Start two days back, on a day boundary, so that clock skew does not
    // make a fresh certificate "not yet valid".
    let start = (now_s / 86400).saturating_sub(2) * 86400;
    let end = now_s + lifetime.as_secs();
    let not_before = Asn1Time::from_unix(start as i64)?;
    let not_after = Asn1Time::from_unix(end as i64)?;
    b.set_not_before(&not_before)?;
    b.set_not_after(&not_after)?;
    let subject_name = name(&subject_cn)?;
    let issuer_name = name(&issuer_cn)?;
    b.set_subject_name(&subject_name)?;
    b.set_issuer_name(&issuer_name)?;
    b.set_pubkey(subject)?;
    b.sign(issuer, MessageDigest::sha256())?;
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tor_cert::rsa::RsaCrosscert;

    #[test]
    fn type4_cert_parses_with_signing_key_extension() {
        let master = ed25519::Keypair::from_bytes(&[7u8; 32]);
        let signing = ed25519::Keypair::from_bytes(&[9u8; 32]);
        let signing_pk: ed25519::PublicKey = (&signing).into();
        let expiry = SystemTime::now() + Duration::from_secs(86400);
        let cert = ed_cert(
            CertType::IDENTITY_V_SIGNING,
            CertifiedKey::Ed25519(signing_pk.into()),
            expiry,
            &master,
            true,
        )
        .unwrap();
        let parsed = Ed25519Cert::decode(&cert).unwrap();
        let master_pk: ed25519::PublicKey = (&master).into();
        let checked = parsed.should_have_signing_key().unwrap();
        use tor_checkable::{SelfSigned, Timebound};
        let c = checked.check_signature().unwrap().if_valid_now().unwrap();
        assert_eq!(c.signing_key().unwrap(), &master_pk.into());
        assert_eq!(
            c.subject_key().as_ed25519().unwrap(),
            &ed25519::Ed25519Identity::from(signing_pk)
        );
    }

    #[test]
    fn rsa_ed_crosscert_verifies_with_tor_cert() {
        let rsa = Rsa::generate(1024).unwrap();
        let ed = [3u8; 32];
        let cc = rsa_ed_crosscert(
            &rsa,
            &ed,
            SystemTime::now() + Duration::from_secs(3600 * 24),
        )
        .unwrap();
        let pk =
            tor_llcrypto::pk::rsa::PublicKey::from_der(&rsa.public_key_to_der_pkcs1().unwrap())
                .unwrap();
        let unchecked = RsaCrosscert::decode(&cc).unwrap();
        use tor_checkable::{ExternallySigned, Timebound};
        let checked = unchecked
            .check_signature(&pk)
            .unwrap()
            .if_valid_now()
            .unwrap();
        assert!(checked.subject_key_matches(&ed25519::Ed25519Identity::new(ed)));
    }

    #[test]
    fn raw_rsa_signature_round_trips() {
        let rsa = Rsa::generate(1024).unwrap();
        let sig = tap_onion_crosscert(&rsa, &[1u8; 20], &[2u8; 32]).unwrap();
        let data = rsa_verify_raw(&rsa, &sig).unwrap();
        assert_eq!(&data[..20], &[1u8; 20]);
        assert_eq!(&data[20..], &[2u8; 32]);
    }

    #[test]
    fn ntor_crosscert_verifies_under_converted_public_key() {
        let secret = [0x42u8; 32];
        let master = [5u8; 32];
        let (cert, signbit) = ntor_onion_crosscert(
            &secret,
            &master,
            SystemTime::now() + Duration::from_secs(3600),
        )
        .unwrap();
        let pubk = tor_llcrypto::pk::curve25519::PublicKey::from(
            &tor_llcrypto::pk::curve25519::StaticSecret::from(secret),
        );
        let edpk = tor_llcrypto::pk::keymanip::convert_curve25519_to_ed25519_public(&pubk, signbit)
            .unwrap();
        let parsed = Ed25519Cert::decode(&cert).unwrap();
        let unchecked = parsed.should_be_signed_with(&edpk.into()).unwrap();
        use tor_checkable::{SelfSigned, Timebound};
        let c = unchecked.check_signature().unwrap().if_valid_now().unwrap();
        assert_eq!(c.cert_type(), CertType::NTOR_CC_IDENTITY);
        assert_eq!(c.subject_key().as_ed25519().unwrap().as_bytes(), &master);
    }

    #[test]
    fn x509_link_cert_is_signed_by_identity() {
        let id = PKey::from_rsa(Rsa::generate(1024).unwrap()).unwrap();
        let link = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let c = x509_cert(
            &link,
            &id,
            false,
            Duration::from_secs(86400 * 30),
            SystemTime::now(),
        )
        .unwrap();
        assert!(c.verify(&id).unwrap());
        let selfc = x509_cert(
            &id,
            &id,
            true,
            Duration::from_secs(86400 * 365),
            SystemTime::now(),
        )
        .unwrap();
        assert!(selfc.verify(&id).unwrap());
    }
}
