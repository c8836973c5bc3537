//! Synthetic v3 descriptors for tests, benches and fuzz seeds: a real
//! outer layer (type-08 certificate signed by a blinded key, descriptor
//! signature) around random bytes standing for the encrypted layers.
//! Not a service's descriptor (nothing inside decrypts); an HSDir checks
//! only this layer.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use tor_cert::{CertType, CertifiedKey};
use tor_llcrypto::pk::ed25519;

/// What to make.
#[derive(Debug, Clone)]
pub struct SyntheticDescriptor {
    /// Seed of the blinded key (the cache's index).
    pub blinded_seed: [u8; 32],
    /// Seed of the descriptor-signing key.
    pub signing_seed: [u8; 32],
    /// `revision-counter`.
    pub revision: u64,
    /// `descriptor-lifetime` in minutes.
    pub lifetime_min: u32,
    /// Bytes of the superencrypted blob.
    pub blob_len: usize,
    /// When the certificate expires.
    pub cert_expiry: SystemTime,
}

impl SyntheticDescriptor {
    /// A descriptor for blinded key number `n`, valid for a day from
    /// `now`, revision 1, three hours, a 10 KB blob (a service's with a
    /// few introduction points is 10–20 KB).
    pub fn new(n: u32, now: SystemTime) -> Self {
        let mut blinded_seed = [0x42; 32];
        blinded_seed[..4].copy_from_slice(&n.to_be_bytes());
        let mut signing_seed = [0x24; 32];
        signing_seed[..4].copy_from_slice(&n.to_be_bytes());
        SyntheticDescriptor {
            blinded_seed,
            signing_seed,
            revision: 1,
            lifetime_min: 180,
            blob_len: 10_000,
            cert_expiry: now + Duration::from_secs(24 * 3600),
        }
    }

    /// The blinded public key.
    pub fn blinded_key(&self) -> [u8; 32] {
        ed25519::Keypair::from_bytes(&self.blinded_seed)
            .verifying_key()
            .to_bytes()
    }

    /// The descriptor's text, signed.
    pub fn encode(&self) -> String {
        let blinded = ed25519::Keypair::from_bytes(&self.blinded_seed);
        let signing = ed25519::Keypair::from_bytes(&self.signing_seed);
        let cert = weft_crypto::certs::ed_cert(
            CertType::HS_BLINDED_ID_V_SIGNING,
            CertifiedKey::Ed25519(signing.verifying_key().into()),
            self.cert_expiry,
            &blinded,
            true,
        )
        .unwrap_or_default();
        let blob: Vec<u8> = (0..self.blob_len)
            .map(|i| (i as u32).wrapping_mul(2654435761).to_be_bytes()[0])
            .collect();
        let mut t = String::new();
        t.push_str("hs-descriptor 3\n");
        t.push_str(&format!("descriptor-lifetime {}\n", self.lifetime_min));
        t.push_str("descriptor-signing-key-cert\n");
        t.push_str(&armor("ED25519 CERT", &cert));
        t.push_str(&format!("revision-counter {}\n", self.revision));
        t.push_str("superencrypted\n");
        t.push_str(&armor("MESSAGE", &blob));
        let mut signed = b"Tor onion service descriptor sig v3".to_vec();
        signed.extend_from_slice(t.as_bytes());
        let sig = signing.sign(&signed);
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(sig.to_bytes());
        t.push_str(&format!("signature {b64}\n"));
        t
    }
}

/// A PEM-like object, 64 base64 characters a line.
fn armor(ty: &str, bytes: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut s = format!("-----BEGIN {ty}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(chunk));
        s.push('\n');
    }
    s.push_str(&format!("-----END {ty}-----\n"));
    s
}
