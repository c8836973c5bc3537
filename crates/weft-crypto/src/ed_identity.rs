//! The relay's Ed25519 master identity in `DataDirectory/keys/`: its
//! secret key (weft's format), its public key as C Tor writes it
//! (`ed25519_master_id_public_key`), and the rule that a new identity is
//! made only where there is no trace of one: a relay whose master secret
//! key is kept offline (C Tor's `OfflineMasterKey`) runs on the signing
//! key and certificate it has and is never given a new identity.

use std::path::Path;

use tor_llcrypto::pk::ed25519;

use crate::c_key_files;
use crate::keys::{
    corrupt, ed_pub, parse_tagged_secret, read_optional, write_private_file, KeyError, ED_TAG,
};

/// A new Ed25519 key (from a random seed, as C's `ed25519_keypair_generate`).
pub(crate) fn new_ed_key() -> ed25519::ExpandedKeypair {
    let seed: [u8; 32] = crate::random_array();
    ed25519::ExpandedKeypair::from(&ed25519::Keypair::from_bytes(&seed))
}

/// An Ed25519 secret key file at `path` with contents `data`: C's format
/// (the expanded key), or weft's older text format (a seed), which is
/// rewritten in C's at once so tor can read it.
pub(crate) fn read_ed_secret(
    path: &Path,
    data: &[u8],
    tag: &str,
) -> Result<ed25519::ExpandedKeypair, KeyError> {
    if let Some(x) = c_key_files::parse_ed_secret(data, tag) {
        return ed25519::ExpandedKeypair::from_secret_key_bytes(x)
            .ok_or_else(|| corrupt(path, "not an Ed25519 secret key"));
    }
    let (seed, _) = parse_tagged_secret(path, data, ED_TAG, false)?;
    let kp = ed25519::ExpandedKeypair::from(&ed25519::Keypair::from_bytes(&seed));
    write_private_file(
        path,
        &c_key_files::ed_secret(&kp.to_secret_key_bytes(), tag),
    )?;
    tracing::info!("{}: rewritten in C Tor's format", path.display());
    Ok(kp)
}

/// The 32-byte header of C Tor's `ed25519_master_id_public_key` file
/// (`crypto_write_tagged_contents_to_file`: "== ed25519v1-public: type0 =="
/// padded with NULs), followed by the 32-byte key.
const ED_PUBLIC_HEADER: &[u8] = b"== ed25519v1-public: type0 ==";

pub(crate) fn ed_public_file(key: &[u8; 32]) -> Vec<u8> {
    let mut v = ED_PUBLIC_HEADER.to_vec();
    v.resize(32, 0);
    v.extend_from_slice(key);
    v
}

pub(crate) fn parse_ed_public_file(path: &Path, data: &[u8]) -> Result<[u8; 32], KeyError> {
    if data.len() != 64 || !data.starts_with(ED_PUBLIC_HEADER) || data[29..32] != [0; 3] {
        return Err(corrupt(
            path,
            "not an ed25519v1-public type0 key file (64 bytes)",
        ));
    }
    let mut k = [0u8; 32];
    k.copy_from_slice(&data[32..]);
    Ok(k)
}

/// The master identity (secret key if present, and public key) from
/// `key_dir`. A new one is made only where there is no trace of an Ed25519
/// identity at all: with the secret key missing but its public key, a
/// signing key or a signing certificate present, the identity is kept
/// offline (or the secret was lost), and a new one would replace the
/// relay's identity for good (the authorities pin it to the RSA identity).
pub(crate) fn load_or_create_ed(
    key_dir: &Path,
) -> Result<(Option<ed25519::ExpandedKeypair>, [u8; 32]), KeyError> {
    let path = key_dir.join("ed25519_master_id_secret_key");
    let pub_path = key_dir.join("ed25519_master_id_public_key");
    let public = match read_optional(&pub_path)? {
        Some(d) => Some(parse_ed_public_file(&pub_path, &d)?),
        None => None,
    };
    if let Some(d) = read_optional(&path)? {
        let kp = read_ed_secret(&path, &d, c_key_files::MASTER_TAG)?;
        let id = ed_pub(&kp);
        match public {
            Some(p) if p != id => {
                return Err(corrupt(
                    &pub_path,
                    "does not match ed25519_master_id_secret_key",
                ))
            }
            Some(_) => {}
            None => write_private_file(&pub_path, &ed_public_file(&id))?,
        }
        return Ok((Some(kp), id));
    }
    if let Some(id) = public {
        tracing::info!(
            "{} is not here: running with the master identity key offline (its public key from ed25519_master_id_public_key)",
            path.display()
        );
        return Ok((None, id));
    }
    for name in ["ed25519_signing_cert", "ed25519_signing_secret_key"] {
        if key_dir.join(name).exists() {
            return Err(corrupt(
                &path,
                format!(
                    "missing, but {name} exists: this relay has an Ed25519 identity whose secret key is not here (kept offline, or lost). \
                     weft will not make a new one, which would replace the relay's identity; put the secret key back, or put \
                     ed25519_master_id_public_key beside a valid signing key and certificate to run with the master key offline"
                ),
            ));
        }
    }
    let kp = new_ed_key();
    let id = ed_pub(&kp);
    write_private_file(
        &path,
        &c_key_files::ed_secret(&kp.to_secret_key_bytes(), c_key_files::MASTER_TAG),
    )?;
    write_private_file(&pub_path, &ed_public_file(&id))?;
    tracing::debug!(
        "created new Ed25519 master identity key in {}",
        path.display()
    );
    Ok((Some(kp), id))
}

/// The error for a relay whose master secret key is offline and whose
/// signing key is missing or expired: it cannot make a new one.
pub(crate) fn offline_without_signing_key(key_dir: &Path) -> KeyError {
    corrupt(
        &key_dir.join("ed25519_signing_cert"),
        "missing or expired, and ed25519_master_id_secret_key is offline: make a new signing key and certificate with the master key (weft --keygen or tor --keygen where it is)",
    )
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, SystemTime};

    use crate::keys::RelayKeys;

    const ROT: Duration = Duration::from_secs(28 * 86400);

    #[test]
    fn a_missing_master_secret_is_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dd = tmp.path().join("data");
        let t0 = SystemTime::now();
        let k1 = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
        let keys = dd.join("keys");
        let public = fs::read(keys.join("ed25519_master_id_public_key")).unwrap();
        assert_eq!(public.len(), 64);
        assert_eq!(&public[..32], b"== ed25519v1-public: type0 ==\0\0\0");
        assert_eq!(public[32..], k1.ed_id);
        let secret = keys.join("ed25519_master_id_secret_key");
        fs::remove_file(&secret).unwrap();

        // Kept offline: the same identity, on the signing key found.
        let mut k2 = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
        assert!(k2.ed_master.is_none());
        assert_eq!((k2.ed_id, k2.signing_pub), (k1.ed_id, k1.signing_pub));
        assert!(!secret.exists(), "no new master key");
        // It cannot renew: a warning while the certificate lasts, then an error.
        let near = k2.signing_cert_expiry - Duration::from_secs(3600);
        assert!(!k2.renew_signing_key_if_due(near).unwrap());
        let after = k2.signing_cert_expiry + Duration::from_secs(1);
        assert!(k2.renew_signing_key_if_due(after).is_err());
        assert!(RelayKeys::load_or_create(&dd, "weft", ROT, after).is_err());
        assert!(!secret.exists());

        // Without the public key file either: refused, nothing created.
        fs::remove_file(keys.join("ed25519_master_id_public_key")).unwrap();
        let e = RelayKeys::load_or_create(&dd, "weft", ROT, t0)
            .err()
            .expect("a new identity was made");
        assert!(e.to_string().contains("will not make a new one"), "{e}");
        assert!(!secret.exists());
        assert!(!keys.join("ed25519_master_id_public_key").exists());
    }

    #[test]
    fn a_master_public_key_that_does_not_match_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dd = tmp.path().join("data");
        RelayKeys::load_or_create(&dd, "weft", ROT, SystemTime::now()).unwrap();
        let p = dd.join("keys").join("ed25519_master_id_public_key");
        let mut d = fs::read(&p).unwrap();
        d[40] ^= 1;
        fs::write(&p, &d).unwrap();
        let e = RelayKeys::load_or_create(&dd, "weft", ROT, SystemTime::now())
            .err()
            .expect("mismatch accepted");
        assert!(e.to_string().contains("does not match"), "{e}");
        fs::write(&p, b"short").unwrap();
        assert!(RelayKeys::load_or_create(&dd, "weft", ROT, SystemTime::now()).is_err());
    }

    #[test]
    fn wefts_older_key_files_are_read_and_rewritten_in_cs_format() {
        use crate::c_key_files;
        use crate::keys::{format_tagged_secret, ED_TAG, NTOR_TAG};
        use tor_llcrypto::pk::ed25519;
        let tmp = tempfile::tempdir().unwrap();
        let dd = tmp.path().join("data");
        let t0 = SystemTime::now();
        let k = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
        let keys = dd.join("keys");
        // The files as weft wrote them before: a seed in text for the
        // master key, the ntor key in text with its time; no signing key.
        let seed = [9u8; 32];
        // A day ago (an older key would be rotated at this load).
        let made = t0.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 86_400;
        for f in [
            "ed25519_master_id_public_key",
            "ed25519_signing_secret_key",
            "ed25519_signing_cert",
        ] {
            fs::remove_file(keys.join(f)).unwrap();
        }
        fs::write(
            keys.join("ed25519_master_id_secret_key"),
            format_tagged_secret(ED_TAG, None, &seed),
        )
        .unwrap();
        fs::write(
            keys.join("secret_onion_key_ntor"),
            format_tagged_secret(NTOR_TAG, Some(made), &k.onion.ntor.secret),
        )
        .unwrap();
        let k2 = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
        let want: ed25519::PublicKey = (&ed25519::Keypair::from_bytes(&seed)).into();
        assert_eq!(k2.ed_id, want.to_bytes(), "the same identity");
        assert_eq!(k2.onion.ntor.public, k.onion.ntor.public);
        let made_at = std::time::UNIX_EPOCH + Duration::from_secs(made);
        assert_eq!(k2.onion.ntor.created, made_at, "its time kept");
        // Now in C's formats, the time in the file's mtime.
        let master = fs::read(keys.join("ed25519_master_id_secret_key")).unwrap();
        assert!(c_key_files::parse_ed_secret(&master, c_key_files::MASTER_TAG).is_some());
        let ntor = fs::read(keys.join("secret_onion_key_ntor")).unwrap();
        assert!(c_key_files::parse_ntor_secret(&ntor).is_some());
        let k3 = RelayKeys::load_or_create(&dd, "weft", ROT, t0).unwrap();
        assert_eq!((k3.ed_id, k3.onion.ntor.created), (k2.ed_id, made_at));
        assert_eq!(k3.signing_pub, k2.signing_pub);
    }
}
