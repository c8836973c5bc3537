//! C Tor's passphrase box (`crypto_pwbox.c`, `crypto_s2k.c`), in which
//! `tor --keygen` keeps an encrypted master identity key
//! (`ed25519_master_id_secret_key_encrypted`, tagged "Boxed Ed25519 key:
//! master"):
//!
//! ```text
//! "TORB" "OX00"             magic (trunnel pwbox_encoded)
//! 1 byte H, H bytes         the key-derivation specifier: a type byte, then
//!                           type 0 (RFC 2440): 8-byte salt, count byte;
//!                           type 1 (PBKDF2): 16-byte salt, log2(iterations);
//!                           type 2 (scrypt): 16-byte salt, log2(N),
//!                           log2(r) << 4 | log2(p)
//! 16 bytes                  IV
//! 128·k bytes               AES-128-CTR of: 4-byte big-endian length,
//!                           the data, zeros
//! 32 bytes                  HMAC-SHA256 of everything before it
//! ```
//!
//! The passphrase gives 48 bytes: the AES key (16) and the HMAC key (32).
//! A tor built with libscrypt writes scrypt (N = 2^15, r = 8, p = 2); one
//! without it, as Debian's, RFC 2440; weft reads all three and writes RFC
//! 2440, which every tor reads.

use cipher::{KeyIvInit, StreamCipher};
use subtle::ConstantTimeEq;

const MAGIC: &[u8; 8] = b"TORBOX00";
const S2K_RFC2440: u8 = 0;
const S2K_PBKDF2: u8 = 1;
const S2K_SCRYPT: u8 = 2;
const AES_KEY_LEN: usize = 16;
const MAC_LEN: usize = 32;

/// Why a box did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PwboxError {
    /// Not a well-formed box (C's UNPWBOX_CORRUPTED).
    Corrupted,
    /// The passphrase is wrong (C's UNPWBOX_BAD_SECRET).
    BadPassphrase,
}

/// C's `secret_to_key_derivekey` for a specifier `spec` (type byte first):
/// 48 bytes, the AES key and the HMAC key. RFC 2440 (iterated, salted
/// SHA-1, then HKDF-SHA256 with info "EXPAND"), PBKDF2-HMAC-SHA1, scrypt.
fn derive(spec: &[u8], passphrase: &[u8]) -> Result<[u8; AES_KEY_LEN + MAC_LEN], PwboxError> {
    let mut keys = [0u8; AES_KEY_LEN + MAC_LEN];
    let (&kind, p) = spec.split_first().ok_or(PwboxError::Corrupted)?;
    match (kind, p.len()) {
        (S2K_RFC2440, 9) => {
            use sha1::Digest;
            let (salt, c) = (&p[..8], p[8]);
            let mut count = (16usize + usize::from(c & 15)) << ((c >> 4) + 6);
            if count > 1 << 26 {
                return Err(PwboxError::Corrupted);
            }
            let mut unit = salt.to_vec();
            unit.extend_from_slice(passphrase);
            let mut h = sha1::Sha1::new();
            while count > 0 {
                let n = count.min(unit.len());
                h.update(&unit[..n]);
                count -= n;
            }
            let digest = h.finalize();
            hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), &digest)
                .expand(b"EXPAND", &mut keys)
                .map_err(|_| PwboxError::Corrupted)?;
        }
        (S2K_PBKDF2, 17) => {
            let log_iters = p[16];
            if log_iters > 24 {
                return Err(PwboxError::Corrupted);
            }
            openssl::pkcs5::pbkdf2_hmac(
                passphrase,
                &p[..16],
                1 << log_iters,
                openssl::hash::MessageDigest::sha1(),
                &mut keys,
            )
            .map_err(|_| PwboxError::Corrupted)?;
        }
        (S2K_SCRYPT, 18) => {
            let (salt, log_n, rp) = (&p[..16], p[16], p[17]);
            // C accepts log2(N) up to 63; anything beyond what a key file
            // ever holds would only make us spin (C makes 15).
            let (log_r, log_p) = (rp >> 4, rp & 15);
            if log_n > 22 || log_r > 4 || log_p > 4 {
                return Err(PwboxError::Corrupted);
            }
            let (n, r, pp) = (1u64 << log_n, 1u64 << log_r, 1u64 << log_p);
            let maxmem = 128 * r * n * 2 + (1 << 20);
            openssl::pkcs5::scrypt(passphrase, salt, n, r, pp, maxmem, &mut keys)
                .map_err(|_| PwboxError::Corrupted)?;
        }
        _ => return Err(PwboxError::Corrupted),
    }
    Ok(keys)
}

/// AES-128-CTR with a big-endian 128-bit counter starting at `iv` (C's
/// `crypto_cipher_new_with_iv`).
fn aes_ctr(key: &[u8], iv: &[u8], data: &mut [u8]) {
    let key: [u8; AES_KEY_LEN] = key.try_into().unwrap_or_default();
    let iv: [u8; 16] = iv.try_into().unwrap_or_default();
    ctr::Ctr128BE::<aes::Aes128>::new(&key.into(), &iv.into()).apply_keystream(data);
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// Box `data` under `passphrase` with fresh salt and IV, as the stock tor
/// of Debian's package does (built without libscrypt, C's
/// `secret_to_key_make_specifier` then picks RFC 2440 with 64 KiB
/// hashed), so that tor can open what weft writes.
pub fn seal(data: &[u8], passphrase: &[u8]) -> Vec<u8> {
    let salt: [u8; 8] = crate::random_array();
    let mut spec = vec![S2K_RFC2440];
    spec.extend_from_slice(&salt);
    spec.push(96);
    seal_with(data, passphrase, &spec, crate::random_array())
}

/// [`seal`] with the key-derivation specifier (type byte first) and the
/// IV given.
pub fn seal_with(data: &[u8], passphrase: &[u8], spec: &[u8], iv: [u8; 16]) -> Vec<u8> {
    let keys = derive(spec, passphrase).unwrap_or([0; AES_KEY_LEN + MAC_LEN]);
    let padded = (data.len() + 4).div_ceil(128) * 128;
    let mut body = vec![0u8; padded];
    body[..4].copy_from_slice(&(data.len() as u32).to_be_bytes());
    body[4..4 + data.len()].copy_from_slice(data);
    aes_ctr(&keys[..AES_KEY_LEN], &iv, &mut body);
    let mut out = MAGIC.to_vec();
    out.push(spec.len() as u8);
    out.extend_from_slice(spec);
    out.extend_from_slice(&iv);
    out.extend_from_slice(&body);
    let mac = hmac(&keys[AES_KEY_LEN..], &out);
    out.extend_from_slice(&mac);
    out
}

/// Open a box made by C Tor or by [`seal`].
pub fn open(boxed: &[u8], passphrase: &[u8]) -> Result<Vec<u8>, PwboxError> {
    let rest = boxed.strip_prefix(MAGIC).ok_or(PwboxError::Corrupted)?;
    let (&h, rest) = rest.split_first().ok_or(PwboxError::Corrupted)?;
    let h = usize::from(h);
    if rest.len() < h + 16 + MAC_LEN {
        return Err(PwboxError::Corrupted);
    }
    let (spec, rest) = rest.split_at(h);
    let (iv, rest) = rest.split_at(16);
    let (body, mac) = rest.split_at(rest.len() - MAC_LEN);
    if body.len() < 4 {
        return Err(PwboxError::Corrupted);
    }
    let keys = derive(spec, passphrase)?;
    let want = hmac(&keys[AES_KEY_LEN..], &boxed[..boxed.len() - MAC_LEN]);
    if !bool::from(want.ct_eq(mac)) {
        return Err(PwboxError::BadPassphrase);
    }
    let mut plain = body.to_vec();
    aes_ctr(&keys[..AES_KEY_LEN], iv, &mut plain);
    let len = u32::from_be_bytes([plain[0], plain[1], plain[2], plain[3]]) as usize;
    if len > plain.len() - 4 {
        return Err(PwboxError::Corrupted);
    }
    Ok(plain[4..4 + len].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrypt_spec(log_n: u8) -> Vec<u8> {
        let mut spec = vec![S2K_SCRYPT];
        spec.extend_from_slice(&[1; 16]);
        spec.extend_from_slice(&[log_n, 0x31]);
        spec
    }

    #[test]
    fn a_box_opens_with_its_passphrase_only() {
        let secret = [7u8; 64];
        for spec in [
            scrypt_spec(10),
            vec![S2K_RFC2440, 1, 2, 3, 4, 5, 6, 7, 8, 96],
            [vec![S2K_PBKDF2], vec![9; 16], vec![10]].concat(),
        ] {
            let b = seal_with(&secret, b"correct horse", &spec, [2; 16]);
            // magic, header, specifier, IV, 128 bytes, MAC.
            assert_eq!(b.len(), 8 + 1 + spec.len() + 16 + 128 + 32);
            assert_eq!(&b[..8], b"TORBOX00");
            assert_eq!(usize::from(b[8]), spec.len());
            assert_eq!(open(&b, b"correct horse").unwrap(), secret);
            assert_eq!(open(&b, b"wrong"), Err(PwboxError::BadPassphrase));
            let mut bad = b.clone();
            bad[40] ^= 1;
            assert_eq!(open(&bad, b"correct horse"), Err(PwboxError::BadPassphrase));
        }
        let b = seal(&secret, b"pw");
        assert_eq!(b[9], S2K_RFC2440);
        assert_eq!(open(&b, b"pw").unwrap(), secret);
        assert_eq!(open(&b[..50], b"x"), Err(PwboxError::Corrupted));
        assert_eq!(open(b"TORBOX00", b"x"), Err(PwboxError::Corrupted));
        // An absurd work factor is refused, not computed.
        let huge = seal_with(&secret, b"pw", &scrypt_spec(10), [2; 16]);
        let mut huge = huge;
        huge[9 + 17] = 40;
        assert_eq!(open(&huge, b"pw"), Err(PwboxError::Corrupted));
    }

    /// A box `tor --keygen` (0.4.9.11, Debian, no libscrypt) wrote for a
    /// master key, with the passphrase "pw\n" (`--passphrase-fd` keeps
    /// the newline); it holds the 64-byte expanded secret key.
    #[test]
    fn a_box_from_stock_tor_opens() {
        let b = hex::decode(TOR_BOX).unwrap();
        let key: [u8; 64] = open(&b, b"pw\n").unwrap().try_into().unwrap();
        let kp = tor_llcrypto::pk::ed25519::ExpandedKeypair::from_secret_key_bytes(key).unwrap();
        assert_eq!(hex::encode(kp.public().to_bytes()), TOR_PUBLIC);
        assert_eq!(open(&b, b"pw"), Err(PwboxError::BadPassphrase));
    }

    /// The box, from `ed25519_master_id_secret_key_encrypted` after its
    /// 32-byte header.
    const TOR_BOX: &str = "544f52424f5830300a005f2fef01fdd3d24b60eb1213d0935d5f5f0fecfb3fd4682b761b22e9631f29832d83d7e23fc59f4e5e316bef57b62e15931154be77d286777ffa67aaea10d7d15a6547802c84ba5bd1969bff88f4562d6a70a283e328e8879f8e4a10861143dc5a54c72978d50c28a65591f47d33c49c5e39eb8ad6dc09957988769c7a5e4cfc2e84c88e86a90c8ff1e3e531c5c43209d0aa60d5009622b246a2ee8a5a38d19b5505bd2f4d2edb326f9b580a80b904a2c538900ef70158d1a5";
    /// Its `ed25519_master_id_public_key`, after the header.
    const TOR_PUBLIC: &str = "17990194c679535fbd3e2899410e84fe6e8cbf34bbe5ca0b651b23a16ba1fbd4";
}
