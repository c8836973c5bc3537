//! `weft --keygen`, as `tor --keygen` (C's `load_ed_keys` with
//! `CMD_KEYGEN`, `loadkey.c`): with the master identity key at hand (on
//! the machine that keeps it offline), make a new signing key and its
//! certificate for the relay to run on; make the master key first where
//! there is no trace of one. The master key is read from
//! `ed25519_master_id_secret_key`, or from
//! `ed25519_master_id_secret_key_encrypted` with its passphrase
//! ([`crate::pwbox`], C's format); a new one is written encrypted when the
//! passphrase is not empty (C: "Not encrypting the secret key" otherwise).
//! With `new_passphrase` (`--newpass`) the master key is written again
//! under a new passphrase and no signing key is made, as C.

use std::path::Path;
use std::time::{Duration, SystemTime};

use tor_llcrypto::pk::ed25519;

use crate::c_key_files;
use crate::ed_identity::{ed_public_file, new_ed_key, parse_ed_public_file, read_ed_secret};
use crate::keys::{
    corrupt, ed_pub, ensure_private_dir, new_signing_key, read_optional, write_private_file,
    KeyError,
};

/// The tagged-file kind and tag of an encrypted master key (C's
/// ENC_KEY_HEADER, ENC_KEY_TAG).
const BOXED_KIND: &str = "Boxed Ed25519 key";
const BOXED_TAG: &str = "master";

/// Where passphrases come from: C's `do_getpass` (a terminal prompt,
/// `--passphrase-fd`, or none with `--no-passphrase`).
pub trait Passphrases {
    /// The passphrase of an existing encrypted key (`prompt` says which).
    fn existing(&mut self, prompt: &str) -> Result<Vec<u8>, String>;
    /// A new passphrase (asked twice on a terminal); empty: no encryption.
    fn fresh(&mut self, prompt: &str) -> Result<Vec<u8>, String>;
}

/// What `--keygen` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeygenReport {
    /// The master key was made now.
    pub created_master: bool,
    /// The master key is (now) stored encrypted.
    pub encrypted: bool,
    /// The new signing certificate's expiry, if one was made.
    pub signing_expiry: Option<SystemTime>,
    /// The Ed25519 identity.
    pub ed_id: [u8; 32],
}

/// Run `--keygen` on `data_dir/keys`.
pub fn keygen(
    data_dir: &Path,
    pass: &mut dyn Passphrases,
    new_passphrase: bool,
    signing_lifetime: Duration,
    now: SystemTime,
) -> Result<KeygenReport, KeyError> {
    ensure_private_dir(data_dir)?;
    let key_dir = data_dir.join("keys");
    ensure_private_dir(&key_dir)?;
    let plain = key_dir.join("ed25519_master_id_secret_key");
    let boxed = key_dir.join("ed25519_master_id_secret_key_encrypted");
    let public = key_dir.join("ed25519_master_id_public_key");
    let failed = |path: &Path, why: String| corrupt(path, why);

    let mut encrypted = false;
    let mut created_master = false;
    let master = if let Some(d) = read_optional(&plain)? {
        read_ed_secret(&plain, &d, c_key_files::MASTER_TAG)?
    } else if let Some(d) = read_optional(&boxed)? {
        encrypted = true;
        let inner = c_key_files::untagged(&d, BOXED_KIND, BOXED_TAG)
            .ok_or_else(|| corrupt(&boxed, "not a boxed Ed25519 master key"))?;
        let pw = pass
            .existing("Enter passphrase for master key:")
            .map_err(|e| failed(&boxed, e))?;
        let secret = crate::pwbox::open(inner, &pw).map_err(|e| match e {
            crate::pwbox::PwboxError::BadPassphrase => {
                corrupt(&boxed, "wrong passphrase (or the file is damaged)")
            }
            crate::pwbox::PwboxError::Corrupted => corrupt(&boxed, "corrupted"),
        })?;
        let bytes: [u8; 64] = secret
            .try_into()
            .map_err(|_| corrupt(&boxed, "corrupted (not a 64-byte key)"))?;
        ed25519::ExpandedKeypair::from_secret_key_bytes(bytes)
            .ok_or_else(|| corrupt(&boxed, "not an Ed25519 secret key"))?
    } else {
        for name in [
            "ed25519_master_id_public_key",
            "ed25519_signing_cert",
            "ed25519_signing_secret_key",
        ] {
            if key_dir.join(name).exists() {
                return Err(corrupt(
                    &plain,
                    format!("missing, but {name} exists: run --keygen where the master identity key is (weft will not make a new identity for this relay)"),
                ));
            }
        }
        created_master = true;
        new_ed_key()
    };
    let id = ed_pub(&master);
    if let Some(d) = read_optional(&public)? {
        if parse_ed_public_file(&public, &d)? != id {
            return Err(corrupt(&public, "does not match the master secret key"));
        }
    }
    if created_master || new_passphrase {
        let pw = pass
            .fresh("Enter new passphrase:")
            .map_err(|e| failed(&boxed, e))?;
        let secret = master.to_secret_key_bytes();
        if pw.is_empty() {
            write_private_file(
                &plain,
                &c_key_files::ed_secret(&secret, c_key_files::MASTER_TAG),
            )?;
            if boxed.exists() {
                std::fs::remove_file(&boxed).map_err(|e| failed(&boxed, e.to_string()))?;
            }
            encrypted = false;
        } else {
            let sealed = crate::pwbox::seal(&secret, &pw);
            write_private_file(&boxed, &c_key_files::tagged(BOXED_KIND, BOXED_TAG, &sealed))?;
            if plain.exists() {
                std::fs::remove_file(&plain).map_err(|e| failed(&plain, e.to_string()))?;
            }
            encrypted = true;
        }
    }
    write_private_file(&public, &ed_public_file(&id))?;
    let signing_expiry = if new_passphrase {
        None
    } else {
        let (_, _, exp) = new_signing_key(
            &master,
            &key_dir.join("ed25519_signing_secret_key"),
            &key_dir.join("ed25519_signing_cert"),
            now,
            signing_lifetime,
        )?;
        Some(exp)
    };
    Ok(KeygenReport {
        created_master,
        encrypted,
        signing_expiry,
        ed_id: id,
    })
}

/// The expiry of the signing certificate in `data_dir/keys` (for
/// `--key-expiration sign`).
pub fn signing_cert_expiry(data_dir: &Path) -> Result<SystemTime, KeyError> {
    let path = data_dir.join("keys").join("ed25519_signing_cert");
    let data = read_optional(&path)?.ok_or_else(|| corrupt(&path, "missing"))?;
    let cert = c_key_files::parse_ed_cert(&data).unwrap_or(&data);
    crate::keys::ed_cert_expiry(cert).ok_or_else(|| corrupt(&path, "truncated certificate"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Given(Vec<u8>);
    impl Passphrases for Given {
        fn existing(&mut self, _: &str) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
        fn fresh(&mut self, _: &str) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
    }

    const DAY: Duration = Duration::from_secs(86400);

    #[test]
    fn keygen_makes_an_encrypted_master_and_signs_with_it_again() {
        let t = tempfile::tempdir().unwrap();
        let dd = t.path().join("d");
        let now = SystemTime::now();
        let r = keygen(&dd, &mut Given(b"pw\n".to_vec()), false, 7 * DAY, now).unwrap();
        assert!(r.created_master && r.encrypted);
        let keys = dd.join("keys");
        assert!(keys.join("ed25519_master_id_secret_key_encrypted").exists());
        assert!(!keys.join("ed25519_master_id_secret_key").exists());
        let exp = signing_cert_expiry(&dd).unwrap();
        assert!(exp > now + 6 * DAY && exp <= now + 7 * DAY + Duration::from_secs(3600));
        // Again, with the passphrase: same identity, a new signing key.
        let r2 = keygen(&dd, &mut Given(b"pw\n".to_vec()), false, 30 * DAY, now).unwrap();
        assert!(!r2.created_master && r2.encrypted);
        assert_eq!(r2.ed_id, r.ed_id);
        assert!(signing_cert_expiry(&dd).unwrap() > now + 29 * DAY);
        // A wrong passphrase opens nothing.
        let e = keygen(&dd, &mut Given(b"pw".to_vec()), false, DAY, now).unwrap_err();
        assert!(e.to_string().contains("wrong passphrase"), "{e}");
        // --newpass with an empty passphrase: stored in the clear.
        let r3 = keygen(&dd, &mut Given(b"pw\n".to_vec()), true, DAY, now);
        assert!(r3.is_ok());
        let r4 = keygen(&dd, &mut Given(Vec::new()), true, DAY, now);
        // The box needs the old passphrase to open: asked as "existing".
        assert!(r4.is_err());
    }

    #[test]
    fn keygen_never_makes_a_second_identity() {
        let t = tempfile::tempdir().unwrap();
        let dd = t.path().join("d");
        let now = SystemTime::now();
        let r = keygen(&dd, &mut Given(Vec::new()), false, DAY, now).unwrap();
        assert!(r.created_master && !r.encrypted);
        std::fs::remove_file(dd.join("keys/ed25519_master_id_secret_key")).unwrap();
        let e = keygen(&dd, &mut Given(Vec::new()), false, DAY, now).unwrap_err();
        assert!(
            e.to_string().contains("will not make a new identity"),
            "{e}"
        );
    }
}
