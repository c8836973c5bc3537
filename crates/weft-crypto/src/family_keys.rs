//! Relay family keys (tor 0.4.9's "happy families"): the secret family key
//! files C Tor writes with `--keygen-family` (`NAME.secret_family_key`:
//! the 32-byte header `== ed25519v1-secret: fmly-id ==` and the 64-byte
//! expanded Ed25519 secret key), the family ID (`FamilyId`: the public
//! key in unpadded base64), and the `family-cert` a relay puts in its
//! descriptor: an Ed25519 certificate of type FAMILY_V_IDENTITY (0x0C)
//! certifying the relay's Ed25519 identity, signed by the family key,
//! which carries its public key in the signed-with-ed25519-key extension.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use tor_cert::{CertType, CertifiedKey, Ed25519Cert};
use tor_llcrypto::pk::ed25519;

/// The file header, NUL-padded to 32 bytes.
const HEADER_TAG: &[u8] = b"== ed25519v1-secret: fmly-id ==";
/// File name suffix of secret family keys.
pub const SECRET_SUFFIX: &str = ".secret_family_key";

/// A family key.
pub struct FamilyKey {
    /// The expanded secret key.
    pub key: ed25519::ExpandedKeypair,
    /// Where it was read from.
    pub path: PathBuf,
}

impl FamilyKey {
    /// The 32-byte public key (the family ID).
    pub fn public(&self) -> [u8; 32] {
        *self.key.public().as_bytes()
    }
}

/// The `FamilyId` text of a public family key.
pub fn family_id(public: &[u8; 32]) -> String {
    STANDARD_NO_PAD.encode(public)
}

/// Parse a `FamilyId` value (unpadded base64 of 32 bytes).
pub fn parse_family_id(s: &str) -> Option<[u8; 32]> {
    let v = STANDARD_NO_PAD
        .decode(s.trim().trim_end_matches('='))
        .ok()?;
    v.try_into().ok()
}

/// Parse a secret family key file's bytes.
pub fn parse_secret(bytes: &[u8]) -> Result<ed25519::ExpandedKeypair, String> {
    if bytes.len() != 96 {
        return Err(format!("{} bytes, not 96", bytes.len()));
    }
    let (head, key) = bytes.split_at(32);
    if &head[..HEADER_TAG.len()] != HEADER_TAG || head[HEADER_TAG.len()..].iter().any(|b| *b != 0) {
        return Err("not an ed25519v1-secret fmly-id key".into());
    }
    let mut k = [0u8; 64];
    k.copy_from_slice(key);
    ed25519::ExpandedKeypair::from_secret_key_bytes(k).ok_or_else(|| "bad secret key".into())
}

/// The file bytes of a secret family key.
pub fn secret_file_bytes(key: &ed25519::ExpandedKeypair) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    out[..HEADER_TAG.len()].copy_from_slice(HEADER_TAG);
    out.extend_from_slice(&key.to_secret_key_bytes());
    out
}

/// A new family key.
pub fn generate() -> ed25519::ExpandedKeypair {
    let seed: [u8; 32] = crate::random_array();
    ed25519::ExpandedKeypair::from(&ed25519::Keypair::from_bytes(&seed))
}

/// `--keygen-family NAME`: write `NAME.secret_family_key` (0600) and
/// `NAME.public_family_id` in `dir`; returns the family ID. Refuses to
/// overwrite an existing key.
pub fn keygen(dir: &Path, name: &str) -> Result<String, String> {
    let secret = dir.join(format!("{name}{SECRET_SUFFIX}"));
    if secret.exists() {
        return Err(format!("{} already exists", secret.display()));
    }
    let key = generate();
    let id = family_id(key.public().as_bytes());
    crate::keys::write_private_file(&secret, &secret_file_bytes(&key))
        .map_err(|e| format!("{}: {e}", secret.display()))?;
    crate::keys::write_private_file(
        &dir.join(format!("{name}.public_family_id")),
        format!("{id}\n").as_bytes(),
    )
    .map_err(|e| format!("{name}.public_family_id: {e}"))?;
    Ok(id)
}

/// The keys in `dir` for each of `ids`, as C Tor loads them (every
/// `*.secret_family_key` is read; a listed ID without its key is an
/// error naming it, a key not listed is left out).
pub fn load(dir: &Path, ids: &[[u8; 32]]) -> Result<Vec<FamilyKey>, String> {
    let mut found = Vec::new();
    if !ids.is_empty() {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("family key directory {}: {e}", dir.display()))?;
        for e in entries.flatten() {
            let path = e.path();
            if !path.to_string_lossy().ends_with(SECRET_SUFFIX) {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let key = parse_secret(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            found.push(FamilyKey { key, path });
        }
    }
    let mut out = Vec::new();
    for id in ids {
        match found.iter().position(|k| k.public() == *id) {
            Some(i) => out.push(found.swap_remove(i)),
            None => {
                return Err(format!(
                    "No key was found for listed FamilyID {} in {}",
                    family_id(id),
                    dir.display()
                ))
            }
        }
    }
    Ok(out)
}

/// The `family-cert` of the relay whose Ed25519 identity is `relay_id`,
/// signed by `family`, expiring at `expiry`.
pub fn family_cert(
    family: &ed25519::ExpandedKeypair,
    relay_id: &[u8; 32],
    expiry: SystemTime,
) -> Result<Vec<u8>, String> {
    let enc = Ed25519Cert::builder()
        .cert_type(CertType::FAMILY_V_IDENTITY)
        .cert_key(CertifiedKey::Ed25519(ed25519::Ed25519Identity::new(
            *relay_id,
        )))
        .expiration(expiry)
        .signing_key(ed25519::Ed25519Identity::new(*family.public().as_bytes()))
        .encode_and_sign(family)
        .map_err(|e| e.to_string())?;
    Ok(tor_cert::EncodedCert::encoded(&enc).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key written by stock tor 0.4.9.11's `tor --keygen-family TestFam`,
    /// which printed `FamilyId un7SEeF2xOHIM04cNncZX8jXOj68lFN7GomktpYl+Vw`.
    const STOCK_KEY: &[u8] = include_bytes!("../tests/data/stock_tor.secret_family_key");
    const STOCK_ID: &str = "un7SEeF2xOHIM04cNncZX8jXOj68lFN7GomktpYl+Vw";

    #[test]
    fn stock_tors_key_file_and_family_id() {
        let k = parse_secret(STOCK_KEY).unwrap();
        assert_eq!(family_id(k.public().as_bytes()), STOCK_ID);
        assert_eq!(parse_family_id(STOCK_ID), Some(*k.public().as_bytes()));
        // Written back, it reads as the same key (the scalar is stored
        // reduced; tor keeps it as clamped — the same key either way).
        let again = parse_secret(&secret_file_bytes(&k)).unwrap();
        assert_eq!(again.public(), k.public());
        assert_eq!(secret_file_bytes(&k)[..32], STOCK_KEY[..32]);
        assert!(parse_family_id("notbase64!!").is_none());
        assert!(parse_family_id("AAAA").is_none());
        assert!(parse_secret(&STOCK_KEY[..95]).is_err());
        let mut bad = STOCK_KEY.to_vec();
        bad[3] = b'X';
        assert!(parse_secret(&bad).is_err());
    }

    #[test]
    fn keygen_load_and_certify() {
        let dir = tempfile::tempdir().unwrap();
        let id = keygen(dir.path(), "Fam").unwrap();
        assert!(keygen(dir.path(), "Fam").is_err(), "overwrote a key");
        std::fs::write(dir.path().join("Stock.secret_family_key"), STOCK_KEY).unwrap();
        let ids = [
            parse_family_id(&id).unwrap(),
            parse_family_id(STOCK_ID).unwrap(),
        ];
        let keys = load(dir.path(), &ids).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].public(), ids[1]);
        let missing = [[7u8; 32]];
        assert!(load(dir.path(), &missing)
            .err()
            .unwrap()
            .contains("No key was found for listed FamilyID"));
        // The certificate: type 0x0C, our identity certified, the family
        // key as signer, and a valid signature (Arti's checks).
        let relay = [9u8; 32];
        let relay = *ed25519::Keypair::from_bytes(&relay)
            .verifying_key()
            .as_bytes();
        let exp = SystemTime::now() + std::time::Duration::from_secs(86400);
        let cert = family_cert(&keys[1].key, &relay, exp).unwrap();
        use tor_checkable::{SelfSigned, Timebound};
        let c = Ed25519Cert::decode(&cert)
            .unwrap()
            .should_have_signing_key()
            .unwrap()
            .check_signature()
            .unwrap()
            .if_valid_now()
            .unwrap();
        assert_eq!(c.cert_type(), CertType::FAMILY_V_IDENTITY);
        assert_eq!(c.signing_key().unwrap().as_bytes(), &ids[1]);
        assert_eq!(c.subject_key().as_ed25519().unwrap().as_bytes(), &relay);
    }
}
