//! The relay's long-term and medium-term keys and their files in
//! `DataDirectory/keys/`: the RSA-1024 identity, the Ed25519 master identity,
//! the Ed25519 signing key and its type-4 certificate, the ntor onion key and
//! the legacy TAP onion key (current and previous, rotated together), plus
//! the short-lived TLS link material ([`LinkKeys`]): the RSA-2048 link key,
//! its X.509 certificate, the self-signed identity certificate and the
//! type-5/type-6/type-7 certificates sent in CERTS cells.
//!
//! Files are created on first start and reused afterwards; every file is
//! written 0600 inside a 0700 directory. A file that exists but cannot be read
//! or parsed stops start-up with an error naming it: it is never replaced.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tor_cert::{CertType, CertifiedKey};
use tor_llcrypto::pk::ed25519;

use crate::c_key_files;
use crate::certs::{self, unix_secs, CertError};
use crate::ed_identity::{
    load_or_create_ed, new_ed_key, offline_without_signing_key, read_ed_secret,
};

/// Lifetime of the Ed25519 signing key certificate (C Tor `SigningKeyLifetime`).
pub const SIGNING_KEY_LIFETIME: Duration = Duration::from_secs(30 * 86400);
/// Renew the signing key when less than this remains (C Tor `TestingSigningKeySlop`).
pub const SIGNING_KEY_SLOP: Duration = Duration::from_secs(86400);
/// Lifetime of the type-5 and type-6 certificates (`TestingLinkCertLifetime`,
/// `TestingAuthKeyLifetime`).
pub const LINK_CERT_LIFETIME: Duration = Duration::from_secs(2 * 86400);
/// How often the TLS context (link key and certificates) is regenerated
/// (C Tor `MAX_SSL_KEY_LIFETIME_INTERNAL`).
pub const TLS_CONTEXT_LIFETIME: Duration = Duration::from_secs(2 * 3600);
/// Lifetime of the RSA→Ed25519 cross-certificate (six months, as C Tor).
pub const CROSSCERT_LIFETIME: Duration = Duration::from_secs(180 * 86400);

/// Errors while loading or creating keys.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A file or directory could not be read, written or created.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A key file exists but does not hold a valid key.
    #[error("{path}: corrupt key file: {why} (refusing to replace it; move it away to create a new key)")]
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// Why it was rejected.
        why: String,
    },
    /// A certificate could not be made.
    #[error("certificate: {0}")]
    Cert(#[from] CertError),
    /// OpenSSL failed.
    #[error("openssl: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_owned(),
        source,
    }
}

pub(crate) fn corrupt(path: &Path, why: impl Into<String>) -> KeyError {
    KeyError::Corrupt {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// Create `dir` (and parents) with mode 0700, or tighten an existing one to 0700.
pub fn ensure_private_dir(dir: &Path) -> Result<(), KeyError> {
    if dir.exists() {
        let meta = fs::metadata(dir).map_err(io_err(dir))?;
        if !meta.is_dir() {
            return Err(corrupt(dir, "not a directory"));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))?;
        }
        Ok(())
    } else {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(dir))
    }
}

/// Write `data` to `path` with mode 0600, atomically (temporary file + rename).
pub fn write_private_file(path: &Path, data: &[u8]) -> Result<(), KeyError> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(data).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

/// Read a file if it exists: `Ok(None)` when it does not.
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, KeyError> {
    match fs::read(path) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(KeyError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// Parse our one-line secret-key format: `<tag> [<created unix secs>] <64 hex>`.
pub(crate) fn parse_tagged_secret(
    path: &Path,
    data: &[u8],
    tag: &str,
    with_time: bool,
) -> Result<([u8; 32], Option<u64>), KeyError> {
    let text = std::str::from_utf8(data).map_err(|_| corrupt(path, "not UTF-8"))?;
    let mut words = text.split_whitespace();
    if words.next() != Some(tag) {
        return Err(corrupt(path, format!("expected a '{tag}' key")));
    }
    let created = if with_time {
        let w = words.next().ok_or_else(|| corrupt(path, "missing time"))?;
        Some(w.parse::<u64>().map_err(|_| corrupt(path, "bad time"))?)
    } else {
        None
    };
    let hexkey = words.next().ok_or_else(|| corrupt(path, "missing key"))?;
    if words.next().is_some() {
        return Err(corrupt(path, "trailing data"));
    }
    let mut key = [0u8; 32];
    hex::decode_to_slice(hexkey, &mut key).map_err(|_| corrupt(path, "bad hex key"))?;
    Ok((key, created))
}

#[cfg(test)]
pub(crate) fn format_tagged_secret(tag: &str, created: Option<u64>, key: &[u8; 32]) -> Vec<u8> {
    match created {
        Some(t) => format!("{tag} {t} {}\n", hex::encode(key)).into_bytes(),
        None => format!("{tag} {}\n", hex::encode(key)).into_bytes(),
    }
}

pub(crate) const ED_TAG: &str = "weft-ed25519-secret-v1";
pub(crate) const NTOR_TAG: &str = "weft-curve25519-secret-v1";

/// One ntor onion key (Curve25519).
#[derive(Clone)]
pub struct NtorKey {
    /// The secret scalar bytes.
    pub secret: [u8; 32],
    /// The public key (KEYID in handshakes).
    pub public: [u8; 32],
    /// When the key was made.
    pub created: SystemTime,
}

impl NtorKey {
    fn from_secret(secret: [u8; 32], created: SystemTime) -> Self {
        let s = x25519_dalek::StaticSecret::from(secret);
        let public = x25519_dalek::PublicKey::from(&s).to_bytes();
        NtorKey {
            secret,
            public,
            created,
        }
    }

    /// The key in the form the handshake code takes.
    pub fn handshake_key(&self) -> crate::ntor::NtorSecretKey {
        let secret = x25519_dalek::StaticSecret::from(self.secret);
        let public = x25519_dalek::PublicKey::from(&secret);
        crate::ntor::NtorSecretKey { secret, public }
    }
}

/// One onion-key generation: the ntor key and the TAP key published with it.
#[derive(Clone)]
pub struct OnionKeys {
    /// The ntor (Curve25519) key, used for CREATE2 handshakes.
    pub ntor: NtorKey,
    /// The legacy RSA-1024 TAP key: never used for handshakes, only published
    /// (0.4.9 authorities still require it) and used to sign its crosscert.
    pub tap: Rsa<Private>,
}

/// The relay's identity, signing and onion keys.
pub struct RelayKeys {
    /// Where the key files live.
    pub key_dir: PathBuf,
    /// RSA-1024 identity key (never rotates).
    pub rsa_id: Rsa<Private>,
    /// DER (PKCS#1 RSAPublicKey) encoding of the identity's public key.
    pub rsa_id_der: Vec<u8>,
    /// SHA-1 of `rsa_id_der`: the relay's fingerprint.
    pub fingerprint: [u8; 20],
    /// Ed25519 master identity keypair; `None` when its secret key is kept
    /// offline (C Tor's `OfflineMasterKey`): the relay then runs on the
    /// signing key and certificate it finds, and cannot renew them.
    pub ed_master: Option<ed25519::ExpandedKeypair>,
    /// Ed25519 master identity public key.
    pub ed_id: [u8; 32],
    /// Ed25519 medium-term signing keypair.
    pub signing: ed25519::ExpandedKeypair,
    /// Its public key.
    pub signing_pub: [u8; 32],
    /// Type-4 certificate (master → signing, with the signed-with extension).
    pub signing_cert: Vec<u8>,
    /// When `signing_cert` expires.
    pub signing_cert_expiry: SystemTime,
    /// How long a new signing certificate lasts (`SigningKeyLifetime`).
    pub signing_lifetime: Duration,
    /// RSA→Ed25519 cross-certificate (CERTS type 7).
    pub rsa_ed_crosscert: Vec<u8>,
    /// Current onion keys.
    pub onion: OnionKeys,
    /// Previous onion keys, still accepted during the grace period.
    pub onion_old: Option<OnionKeys>,
}

pub(crate) fn ed_pub(kp: &ed25519::ExpandedKeypair) -> [u8; 32] {
    kp.public().to_bytes()
}

/// Hours since the epoch encoded in a Tor Ed25519 certificate (bytes 2..6).
pub(crate) fn ed_cert_expiry(cert: &[u8]) -> Option<SystemTime> {
    let h = u32::from_be_bytes(cert.get(2..6)?.try_into().ok()?);
    Some(UNIX_EPOCH + Duration::from_secs(u64::from(h) * 3600))
}

impl RelayKeys {
    /// Load the keys from `data_dir/keys`, creating whatever does not exist
    /// yet, renewing the signing certificate and rotating onion keys when due.
    /// Also writes `fingerprint` and `fingerprint-ed25519` into `data_dir`.
    pub fn load_or_create(
        data_dir: &Path,
        nickname: &str,
        onion_rotation: Duration,
        now: SystemTime,
    ) -> Result<RelayKeys, KeyError> {
        Self::load_or_create_with(
            data_dir,
            nickname,
            onion_rotation,
            SIGNING_KEY_LIFETIME,
            now,
        )
    }

    /// [`RelayKeys::load_or_create`] with signing certificates that last
    /// `signing_lifetime` (`SigningKeyLifetime`).
    pub fn load_or_create_with(
        data_dir: &Path,
        nickname: &str,
        onion_rotation: Duration,
        signing_lifetime: Duration,
        now: SystemTime,
    ) -> Result<RelayKeys, KeyError> {
        ensure_private_dir(data_dir)?;
        let key_dir = data_dir.join("keys");
        ensure_private_dir(&key_dir)?;

        // RSA identity, PEM PKCS#1 (the format C Tor uses for secret_id_key).
        let id_path = key_dir.join("secret_id_key");
        let rsa_id = match read_optional(&id_path)? {
            Some(pem) => {
                let k = Rsa::private_key_from_pem(&pem)
                    .map_err(|e| corrupt(&id_path, format!("not an RSA private key: {e}")))?;
                if k.size() != 128 || k.e().to_dec_str()?.to_string() != "65537" {
                    return Err(corrupt(&id_path, "identity must be RSA-1024 with e=65537"));
                }
                if !k.check_key().unwrap_or(false) {
                    return Err(corrupt(&id_path, "RSA key fails consistency check"));
                }
                k
            }
            None => {
                let k = Rsa::generate(1024)?;
                write_private_file(&id_path, &k.private_key_to_pem()?)?;
                tracing::info!("created new RSA identity key in {}", id_path.display());
                k
            }
        };
        let rsa_id_der = rsa_id.public_key_to_der_pkcs1()?;
        let fingerprint: [u8; 20] = Sha1::digest(&rsa_id_der).into();

        let (ed_master, ed_id) = load_or_create_ed(&key_dir)?;

        // Signing key + type-4 cert, renewed when it is about to expire.
        let sk_path = key_dir.join("ed25519_signing_secret_key");
        let sc_path = key_dir.join("ed25519_signing_cert");
        let existing = match (read_optional(&sk_path)?, read_optional(&sc_path)?) {
            (Some(sk), Some(cert)) => {
                let kp = read_ed_secret(&sk_path, &sk, c_key_files::SIGNING_TAG)?;
                let cert = match c_key_files::parse_ed_cert(&cert) {
                    Some(c) => c.to_vec(),
                    None => {
                        // weft's older file: the bare certificate.
                        write_private_file(&sc_path, &c_key_files::ed_cert(&cert))?;
                        cert
                    }
                };
                let expiry =
                    ed_cert_expiry(&cert).ok_or_else(|| corrupt(&sc_path, "truncated cert"))?;
                check_signing_cert(&sc_path, &cert, &ed_id, &ed_pub(&kp))?;
                Some((kp, cert, expiry))
            }
            _ => None,
        };
        let (signing, signing_cert, signing_cert_expiry) = match (existing, &ed_master) {
            (Some((kp, cert, expiry)), _) if expiry > now + SIGNING_KEY_SLOP => (kp, cert, expiry),
            (_, Some(master)) => {
                new_signing_key(master, &sk_path, &sc_path, now, signing_lifetime)?
            }
            (Some((kp, cert, expiry)), None) if expiry > now => {
                tracing::warn!(
                    "the Ed25519 signing certificate expires in {}s and the master secret key is offline: make a new signing key and certificate with it (weft --keygen or tor --keygen where the master key is)",
                    expiry.duration_since(now).unwrap_or_default().as_secs()
                );
                (kp, cert, expiry)
            }
            (_, None) => return Err(offline_without_signing_key(&key_dir)),
        };
        let signing_pub = ed_pub(&signing);

        let rsa_ed_crosscert = certs::rsa_ed_crosscert(&rsa_id, &ed_id, now + CROSSCERT_LIFETIME)?;

        let onion = match load_onion(&key_dir, "")? {
            Some(k) => k,
            None => {
                let k = new_onion_keys(now)?;
                save_onion(&key_dir, "", &k)?;
                k
            }
        };
        let onion_old = load_onion(&key_dir, ".old")?;

        let mut keys = RelayKeys {
            key_dir,
            rsa_id,
            rsa_id_der,
            fingerprint,
            ed_master,
            ed_id,
            signing,
            signing_pub,
            signing_cert,
            signing_cert_expiry,
            signing_lifetime,
            rsa_ed_crosscert,
            onion,
            onion_old,
        };
        keys.rotate_onion_keys_if_due(
            now,
            onion_rotation,
            onion_rotation.min(Duration::from_secs(7 * 86400)),
        )?;
        keys.write_fingerprint_files(data_dir, nickname)?;
        Ok(keys)
    }

    /// Rotate the onion keys when the current ones are older than `rotation`,
    /// and forget the previous ones once `grace` has passed since the
    /// rotation. Returns true when the published keys changed.
    pub fn rotate_onion_keys_if_due(
        &mut self,
        now: SystemTime,
        rotation: Duration,
        grace: Duration,
    ) -> Result<bool, KeyError> {
        let mut changed = false;
        if now
            .duration_since(self.onion.ntor.created)
            .unwrap_or_default()
            >= rotation
        {
            let fresh = new_onion_keys(now)?;
            let old = std::mem::replace(&mut self.onion, fresh);
            save_onion(&self.key_dir, ".old", &old)?;
            save_onion(&self.key_dir, "", &self.onion)?;
            self.onion_old = Some(old);
            tracing::info!("rotated onion keys");
            changed = true;
        }
        if self.onion_old.is_some()
            && now
                .duration_since(self.onion.ntor.created)
                .unwrap_or_default()
                >= grace
        {
            self.onion_old = None;
            for suffix in [".old"] {
                for name in ["secret_onion_key_ntor", "secret_onion_key"] {
                    let p = self.key_dir.join(format!("{name}{suffix}"));
                    let _ = fs::remove_file(p);
                }
            }
        }
        Ok(changed)
    }

    /// Renew the signing key and its certificate if less than a day remains.
    /// Returns true if it was renewed.
    pub fn renew_signing_key_if_due(&mut self, now: SystemTime) -> Result<bool, KeyError> {
        if self.signing_cert_expiry > now + SIGNING_KEY_SLOP {
            return Ok(false);
        }
        let Some(master) = &self.ed_master else {
            if self.signing_cert_expiry <= now {
                return Err(offline_without_signing_key(&self.key_dir));
            }
            tracing::warn!(
                "the Ed25519 signing certificate expires in {}s and the master secret key is offline: make a new signing key and certificate with it (weft --keygen or tor --keygen where the master key is)",
                self.signing_cert_expiry.duration_since(now).unwrap_or_default().as_secs()
            );
            return Ok(false);
        };
        let (kp, cert, exp) = new_signing_key(
            master,
            &self.key_dir.join("ed25519_signing_secret_key"),
            &self.key_dir.join("ed25519_signing_cert"),
            now,
            self.signing_lifetime,
        )?;
        self.signing_pub = ed_pub(&kp);
        self.signing = kp;
        self.signing_cert = cert;
        self.signing_cert_expiry = exp;
        Ok(true)
    }

    /// The ntor keys handshakes may use: current first, then previous.
    pub fn ntor_keys(&self) -> Vec<crate::ntor::NtorSecretKey> {
        let mut v = vec![self.onion.ntor.handshake_key()];
        if let Some(o) = &self.onion_old {
            v.push(o.ntor.handshake_key());
        }
        v
    }

    /// Upper-case hex fingerprint.
    pub fn fingerprint_hex(&self) -> String {
        hex::encode_upper(self.fingerprint)
    }

    /// Base64 (unpadded) Ed25519 identity.
    pub fn ed_id_base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.ed_id)
    }

    fn write_fingerprint_files(&self, data_dir: &Path, nickname: &str) -> Result<(), KeyError> {
        let fp = format!("{nickname} {}\n", self.fingerprint_hex());
        write_private_file(&data_dir.join("fingerprint"), fp.as_bytes())?;
        let ed = format!("{nickname} {}\n", self.ed_id_base64());
        write_private_file(&data_dir.join("fingerprint-ed25519"), ed.as_bytes())
    }
}

fn check_signing_cert(
    path: &Path,
    cert: &[u8],
    master: &[u8; 32],
    signing: &[u8; 32],
) -> Result<(), KeyError> {
    use tor_checkable::SelfSigned;
    let parsed = tor_cert::Ed25519Cert::decode(cert).map_err(|e| corrupt(path, e.to_string()))?;
    let master_id = ed25519::Ed25519Identity::new(*master);
    let c = parsed
        .should_be_signed_with(&master_id)
        .map_err(|e| corrupt(path, e.to_string()))?
        .check_signature()
        .map_err(|e| corrupt(path, format!("bad signature: {e}")))?;
    use tor_checkable::Timebound;
    let c = c.dangerously_assume_timely();
    if c.subject_key().as_ed25519().map(|k| k.as_bytes()) != Some(signing) {
        return Err(corrupt(path, "certifies a different signing key"));
    }
    Ok(())
}

pub(crate) fn new_signing_key(
    master: &ed25519::ExpandedKeypair,
    sk_path: &Path,
    sc_path: &Path,
    now: SystemTime,
    lifetime: Duration,
) -> Result<(ed25519::ExpandedKeypair, Vec<u8>, SystemTime), KeyError> {
    let kp = new_ed_key();
    let expiry = now + lifetime;
    let pk: ed25519::PublicKey = *kp.public();
    let cert = certs::ed_cert(
        CertType::IDENTITY_V_SIGNING,
        CertifiedKey::Ed25519(pk.into()),
        expiry,
        master,
        true,
    )?;
    let expiry = ed_cert_expiry(&cert).unwrap_or(expiry);
    write_private_file(
        sk_path,
        &c_key_files::ed_secret(&kp.to_secret_key_bytes(), c_key_files::SIGNING_TAG),
    )?;
    write_private_file(sc_path, &c_key_files::ed_cert(&cert))?;
    tracing::info!(
        "created new Ed25519 signing key, valid until {}s",
        unix_secs(expiry)
    );
    Ok((kp, cert, expiry))
}

fn new_onion_keys(now: SystemTime) -> Result<OnionKeys, KeyError> {
    let secret: [u8; 32] = crate::random_array();
    Ok(OnionKeys {
        ntor: NtorKey::from_secret(secret, now),
        tap: Rsa::generate(1024)?,
    })
}

fn save_onion(dir: &Path, suffix: &str, k: &OnionKeys) -> Result<(), KeyError> {
    save_ntor(&dir.join(format!("secret_onion_key_ntor{suffix}")), &k.ntor)?;
    write_private_file(
        &dir.join(format!("secret_onion_key{suffix}")),
        &k.tap.private_key_to_pem()?,
    )
}

/// An ntor key in C's file format; the file's modification time says when
/// the key was made (C keeps that in its state file; weft reads it here).
fn save_ntor(path: &Path, k: &NtorKey) -> Result<(), KeyError> {
    write_private_file(path, &c_key_files::ntor_secret(&k.secret, &k.public))?;
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(k.created))
        .map_err(io_err(path))
}

/// An ntor key file: C's format (made when the file was last written), or
/// weft's older text format (with its time), rewritten in C's.
fn read_ntor(path: &Path, data: &[u8]) -> Result<NtorKey, KeyError> {
    if let Some((secret, public)) = c_key_files::parse_ntor_secret(data) {
        let made = fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(io_err(path))?;
        let k = NtorKey::from_secret(secret, made);
        if k.public != public {
            return Err(corrupt(
                path,
                "its public key does not match its secret key",
            ));
        }
        return Ok(k);
    }
    let (secret, created) = parse_tagged_secret(path, data, NTOR_TAG, true)?;
    let k = NtorKey::from_secret(
        secret,
        UNIX_EPOCH + Duration::from_secs(created.unwrap_or(0)),
    );
    save_ntor(path, &k)?;
    Ok(k)
}

/// The current ntor public key of the relay whose DataDirectory is
/// `data_dir`, read without creating or changing anything (for tools such
/// as weft-bench that talk to a running weft).
pub fn read_ntor_public(data_dir: &Path) -> Result<[u8; 32], KeyError> {
    let p = data_dir.join("keys").join("secret_onion_key_ntor");
    let data = fs::read(&p).map_err(io_err(&p))?;
    if let Some((_, public)) = c_key_files::parse_ntor_secret(&data) {
        return Ok(public);
    }
    let (secret, _) = parse_tagged_secret(&p, &data, NTOR_TAG, true)?;
    Ok(NtorKey::from_secret(secret, UNIX_EPOCH).public)
}

fn load_onion(dir: &Path, suffix: &str) -> Result<Option<OnionKeys>, KeyError> {
    let np = dir.join(format!("secret_onion_key_ntor{suffix}"));
    let tp = dir.join(format!("secret_onion_key{suffix}"));
    match (read_optional(&np)?, read_optional(&tp)?) {
        (Some(n), Some(t)) => {
            let ntor = read_ntor(&np, &n)?;
            let tap = Rsa::private_key_from_pem(&t)
                .map_err(|e| corrupt(&tp, format!("not an RSA private key: {e}")))?;
            if tap.size() != 128 {
                return Err(corrupt(&tp, "TAP onion key must be RSA-1024"));
            }
            Ok(Some(OnionKeys { ntor, tap }))
        }
        (None, None) => Ok(None),
        (Some(_), None) => Err(corrupt(&tp, "missing while its ntor key exists")),
        (None, Some(_)) => Err(corrupt(&np, "missing while its TAP key exists")),
    }
}

/// The TLS link material, regenerated every [`TLS_CONTEXT_LIFETIME`]: the
/// RSA-2048 link key and its X.509 certificate (signed by the identity), the
/// self-signed identity certificate (CERTS type 2), the type-5 certificate
/// binding the link certificate to the signing key, and the link
/// authentication key with its type-6 certificate (used when we initiate).
pub struct LinkKeys {
    /// TLS private key.
    pub tls_key: PKey<Private>,
    /// DER of the TLS certificate.
    pub tls_cert_der: Vec<u8>,
    /// SHA-256 of `tls_cert_der` (SCERT in AUTHENTICATE).
    pub tls_cert_digest: [u8; 32],
    /// DER of the self-signed RSA identity certificate (CERTS type 2).
    pub id_cert_der: Vec<u8>,
    /// Type-5 certificate: signing key → SHA-256 of the TLS certificate.
    pub cert_tls_link: Vec<u8>,
    /// Link authentication keypair (signs AUTHENTICATE).
    pub auth_key: ed25519::Keypair,
    /// Type-6 certificate: signing key → link authentication key.
    pub cert_auth: Vec<u8>,
    /// Type-4 certificate (copy of the relay's signing certificate).
    pub cert_signing: Vec<u8>,
    /// Type-7 RSA→Ed25519 cross-certificate.
    pub cert_crosscert: Vec<u8>,
    /// When this material was made.
    pub created: SystemTime,
}

impl LinkKeys {
    /// Make fresh link material for `keys`.
    pub fn generate(keys: &RelayKeys, now: SystemTime) -> Result<LinkKeys, KeyError> {
        let id_pkey = PKey::from_rsa(keys.rsa_id.clone())?;
        let tls_key = PKey::from_rsa(Rsa::generate(2048)?)?;
        // Link cert lifetime: random 5..365 days like C Tor.
        let days = 5 + u64::from(crate::random_array::<1>()[0]) % 360;
        let tls_cert = certs::x509_cert(
            &tls_key,
            &id_pkey,
            false,
            Duration::from_secs(days * 86400),
            now,
        )?;
        let tls_cert_der = tls_cert.to_der()?;
        let tls_cert_digest: [u8; 32] = Sha256::digest(&tls_cert_der).into();
        let id_cert = certs::x509_cert(
            &id_pkey,
            &id_pkey,
            true,
            Duration::from_secs(365 * 86400),
            now,
        )?;
        let cert_tls_link = certs::ed_cert(
            CertType::SIGNING_V_TLS_CERT,
            CertifiedKey::X509Sha256Digest(tls_cert_digest),
            now + LINK_CERT_LIFETIME,
            &keys.signing,
            false,
        )?;
        let auth_seed: [u8; 32] = crate::random_array();
        let auth_key = ed25519::Keypair::from_bytes(&auth_seed);
        let auth_pub: ed25519::PublicKey = (&auth_key).into();
        let cert_auth = certs::ed_cert(
            CertType::SIGNING_V_LINK_AUTH,
            CertifiedKey::Ed25519(auth_pub.into()),
            now + LINK_CERT_LIFETIME,
            &keys.signing,
            false,
        )?;
        Ok(LinkKeys {
            tls_key,
            tls_cert_der,
            tls_cert_digest,
            id_cert_der: id_cert.to_der()?,
            cert_tls_link,
            auth_key,
            cert_auth,
            cert_signing: keys.signing_cert.clone(),
            cert_crosscert: keys.rsa_ed_crosscert.clone(),
            created: now,
        })
    }
}

#[cfg(test)]
mod tests;
