//! Key derivation functions that turn a handshake's shared secret into
//! circuit key material: KDF-TOR (iterated SHA-1, used by CREATE_FAST) and
//! KDF-RFC5869 (HKDF-SHA256 with the ntor tweaks, used by the ntor
//! handshake). ntor-v3 derives its keys with SHAKE-256 inside
//! [`crate::ntor_v3`]. [tor-spec §5.2]
//!
//! Both functions fill a caller-provided buffer, so the caller decides how
//! much key material it needs (e.g. 92 bytes = KH | Df | Db | Kf | Kb for
//! CREATE_FAST, 72 bytes = Df | Db | Kf | Kb for ntor).

use digest::Digest;
use hkdf::Hkdf;
use sha1::Sha1;
use sha2::Sha256;
use zeroize::Zeroize;

/// Most bytes [`kdf_tor`] can produce: the counter is one byte, so 256
/// SHA-1 outputs.
pub const KDF_TOR_MAX_LEN: usize = 256 * 20;

/// Most bytes [`kdf_rfc5869_ntor`] can produce (RFC 5869 §2.3: 255 × HashLen).
pub const KDF_RFC5869_MAX_LEN: usize = 255 * 32;

/// ntor `t_key`: the HKDF salt. [tor-spec §5.1.4]
pub const NTOR_T_KEY: &[u8] = b"ntor-curve25519-sha256-1:key_extract";

/// ntor `m_expand`: the HKDF info. [tor-spec §5.1.4]
pub const NTOR_M_EXPAND: &[u8] = b"ntor-curve25519-sha256-1:key_expand";

/// KDF-TOR: fill `out` with `SHA1(K0 | [00]) | SHA1(K0 | [01]) | ...`
/// where `K0 = seed`. [tor-spec §5.2.1]
///
/// For CREATE_FAST, `seed = X | Y` and the output is KH(20) | Df(20) |
/// Db(20) | Kf(16) | Kb(16).
///
/// # Panics
///
/// If `out` is longer than [`KDF_TOR_MAX_LEN`] bytes. That length is the
/// caller's choice, never derived from received bytes.
pub fn kdf_tor(seed: &[u8], out: &mut [u8]) {
    assert!(
        out.len() <= KDF_TOR_MAX_LEN,
        "kdf_tor: {} bytes requested, at most {KDF_TOR_MAX_LEN}",
        out.len()
    );
    let mut block = [0u8; 20];
    // tor-spec §5.2.1: K = H(K0 | [00]) | H(K0 | [01]) | H(K0 | [02]) | ...
    for (counter, chunk) in (0..=u8::MAX).zip(out.chunks_mut(20)) {
        let mut h = Sha1::new();
        h.update(seed);
        h.update([counter]);
        h.finalize_into((&mut block).into());
        // The last chunk may be shorter than 20 bytes: excess is discarded.
        let n = chunk.len();
        chunk.copy_from_slice(&block[..n]);
    }
    block.zeroize();
}

/// KDF-RFC5869 as used by ntor: HKDF-SHA256 with salt = `t_key`,
/// IKM = `secret` (ntor's `secret_input`), info = `m_expand`, written to
/// `out`. [tor-spec §5.2.2]
///
/// (HKDF-Extract with salt `t_key` is exactly ntor's
/// `KEY_SEED = H(secret_input, t_key)`, so this one call covers both steps
/// of tor-spec §5.1.4's key derivation.)
///
/// # Panics
///
/// If `out` is longer than [`KDF_RFC5869_MAX_LEN`] bytes. That length is
/// the caller's choice, never derived from received bytes.
pub fn kdf_rfc5869_ntor(secret: &[u8], out: &mut [u8]) {
    // tor-spec §5.2.2: "HKDF-SHA256 with info == m_expand, salt == t_key,
    // and IKM == secret_input".
    let hk = Hkdf::<Sha256>::new(Some(NTOR_T_KEY), secret);
    if hk.expand(NTOR_M_EXPAND, out).is_err() {
        panic!(
            "kdf_rfc5869_ntor: {} bytes requested, at most {KDF_RFC5869_MAX_LEN}",
            out.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tor(seed: &[u8], n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        kdf_tor(seed, &mut v);
        v
    }

    fn ntor(seed: &[u8], n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        kdf_rfc5869_ntor(seed, &mut v);
        v
    }

    /// KDF-TOR vectors from C Tor's src/test/test_crypto.c (also in Arti
    /// tor-proto src/crypto/ll/kdf.rs `testvec_tap_kdf`).
    #[test]
    fn testvec_kdf_tor() {
        let expect = hex::decode(concat!(
            "5ba93c9db0cff93f52b521d7420e43f6eda2784fbf8b4530d8",
            "d246dd74ac53a13471bba17941dff7c4ea21bb365bbeeaf5f2",
            "c654883e56d11e43c44e9842926af7ca0a8cca12604f945414",
            "f07b01e13da42c6cf1de3abfdea9b95f34687cbbe92b9a7383"
        ))
        .unwrap();
        assert_eq!(tor(b"", 100), expect);

        let expect = hex::decode(concat!(
            "776c6214fc647aaa5f683c737ee66ec44f03d0372e1cce6922",
            "7950f236ddf1e329a7ce7c227903303f525a8c6662426e8034",
            "870642a6dabbd41b5d97ec9bf2312ea729992f48f8ea2d0ba8",
            "3f45dfda1a80bdc8b80de01b23e3e0ffae099b3e4ccf28dc28"
        ))
        .unwrap();
        assert_eq!(tor(b"Tor", 100), expect);

        let expect = hex::decode(concat!(
            "a340b5d126086c3ab29c2af4179196dbf95e1c72431419d331",
            "4844bf8f6afb6098db952b95581fb6c33625709d6f4400b8e7",
            "ace18a70579fad83c0982ef73f89395bcc39493ad53a685854",
            "daf2ba9b78733b805d9a6824c907ee1dba5ac27a1e466d4d10"
        ))
        .unwrap();
        assert_eq!(
            tor(
                b"AN ALARMING ITEM TO FIND ON A MONTHLY AUTO-DEBIT NOTICE",
                100
            ),
            expect
        );
    }

    /// Recompute KDF-TOR straight from the spec text, for lengths that are
    /// not multiples of 20, and check prefixes agree.
    #[test]
    fn kdf_tor_clearbox() {
        let seed = b"an example key seed for CREATE_FAST";
        let mut expect = Vec::new();
        for i in 0u8..6 {
            let mut h = Sha1::new();
            h.update(seed);
            h.update([i]);
            expect.extend_from_slice(&h.finalize());
        }
        for n in [0, 1, 19, 20, 21, 92, 119, 120] {
            assert_eq!(tor(seed, n), expect[..n]);
        }
        // The full 256-block output is allowed.
        assert_eq!(tor(seed, KDF_TOR_MAX_LEN)[..120], expect[..]);
    }

    #[test]
    #[should_panic]
    fn kdf_tor_too_long() {
        let _ = tor(b"x", KDF_TOR_MAX_LEN + 1);
    }

    /// KDF-RFC5869 vectors from C Tor's src/test/test_crypto.c, generated
    /// with ntor_ref.py (also in Arti tor-proto src/crypto/ll/kdf.rs
    /// `testvec_ntor1_kdf`).
    #[test]
    fn testvec_kdf_rfc5869_ntor() {
        let expect = hex::decode(concat!(
            "5521492a85139a8d9107a2d5c0d9c91610d0f95989975ebee6",
            "c02a4f8d622a6cfdf9b7c7edd3832e2760ded1eac309b76f8d",
            "66c4a3c4d6225429b3a016e3c3d45911152fc87bc2de9630c3",
            "961be9fdb9f93197ea8e5977180801926d3321fa21513e59ac"
        ))
        .unwrap();
        assert_eq!(ntor(b"Tor", 100), expect);

        let expect = hex::decode(concat!(
            "a2aa9b50da7e481d30463adb8f233ff06e9571a0ca6ab6df0f",
            "b206fa34e5bc78d063fc291501beec53b36e5a0e434561200c",
            "5f8bd13e0f88b3459600b4dc21d69363e2895321c06184879d",
            "94b18f078411be70b767c7fc40679a9440a0c95ea83a23efbf"
        ))
        .unwrap();
        assert_eq!(
            ntor(
                b"AN ALARMING ITEM TO FIND ON YOUR CREDIT-RATING STATEMENT",
                100
            ),
            expect
        );
    }

    /// tor-spec §5.2.2 spelled out: K_1 = H(m_expand | INT8(1), KEY_SEED),
    /// K_(i+1) = H(K_i | m_expand | INT8(i+1), KEY_SEED), with
    /// KEY_SEED = H(secret_input, t_key) and H(x, t) = HMAC-SHA256(key t, x).
    #[test]
    fn kdf_rfc5869_ntor_clearbox() {
        use hmac::{Hmac, Mac};
        fn h(x: &[&[u8]], key: &[u8]) -> Vec<u8> {
            let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
            for p in x {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        let secret = b"yet another secret_input";
        let key_seed = h(&[secret], NTOR_T_KEY);
        let mut expect = Vec::new();
        let mut k: Vec<u8> = Vec::new();
        for i in 1u8..=4 {
            k = h(&[&k, NTOR_M_EXPAND, &[i]], &key_seed);
            expect.extend_from_slice(&k);
        }
        assert_eq!(ntor(secret, 72), expect[..72]);
        assert_eq!(ntor(secret, 128), expect);
    }

    #[test]
    #[should_panic]
    fn kdf_rfc5869_too_long() {
        let _ = ntor(b"x", KDF_RFC5869_MAX_LEN + 1);
    }
}
