//! The ControlPort's authentication crypto (control-spec §3.5, §3.24):
//! SAFECOOKIE's two HMAC-SHA256 hashes and `HashedControlPassword`, the
//! RFC 2440 iterated-and-salted S2K that `tor --hash-password` prints
//! ("16:" + hex of an 8-byte salt, one count byte and the SHA-1 digest).
//! Sans-IO; the cookie file itself is the relay's business.

use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Length of the control authentication cookie.
pub const COOKIE_LEN: usize = 32;

/// HMAC key of the hash the relay sends (control-spec §3.24).
const SERVER_TO_CONTROLLER: &[u8] = b"Tor safe cookie authentication server-to-controller hash";
/// HMAC key of the hash the controller must send back.
const CONTROLLER_TO_SERVER: &[u8] = b"Tor safe cookie authentication controller-to-server hash";

/// The count byte `tor --hash-password` uses: 65,536 bytes hashed.
const S2K_COUNT_BYTE: u8 = 0x60;

/// SAFECOOKIE: `(server hash, client hash)` over cookie | client nonce |
/// server nonce.
pub fn safecookie_hashes(
    cookie: &[u8; COOKIE_LEN],
    client_nonce: &[u8],
    server_nonce: &[u8; 32],
) -> ([u8; 32], [u8; 32]) {
    let mac = |key: &[u8]| -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(cookie);
        m.update(client_nonce);
        m.update(server_nonce);
        m.finalize().into_bytes().into()
    };
    (mac(SERVER_TO_CONTROLLER), mac(CONTROLLER_TO_SERVER))
}

/// RFC 2440 iterated and salted S2K with SHA-1: `specifier` is the 8-byte
/// salt followed by the count byte.
pub fn s2k_rfc2440(secret: &[u8], specifier: &[u8; 9]) -> [u8; 20] {
    let c = specifier[8] as u64;
    let mut count = (16 + (c & 15)) << ((c >> 4) + 6);
    let mut block = Vec::with_capacity(8 + secret.len());
    block.extend_from_slice(&specifier[..8]);
    block.extend_from_slice(secret);
    let mut h = Sha1::new();
    while count > 0 {
        let n = (block.len() as u64).min(count) as usize;
        h.update(&block[..n]);
        count -= n as u64;
    }
    h.finalize().into()
}

/// `HashedControlPassword` text for `secret` with `salt`, as
/// `tor --hash-password` prints it.
pub fn hash_password(secret: &[u8], salt: [u8; 8]) -> String {
    let mut spec = [0u8; 9];
    spec[..8].copy_from_slice(&salt);
    spec[8] = S2K_COUNT_BYTE;
    let key = s2k_rfc2440(secret, &spec);
    format!("16:{}{}", hex::encode_upper(spec), hex::encode_upper(key))
}

/// A decoded `HashedControlPassword` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedPassword {
    specifier: [u8; 9],
    key: [u8; 20],
}

impl HashedPassword {
    /// Parse "16:<58 hex digits>" (the "16:" is optional, as C Tor takes
    /// it). `None` when malformed.
    pub fn parse(text: &str) -> Option<HashedPassword> {
        let h = text.strip_prefix("16:").unwrap_or(text);
        let mut raw = [0u8; 29];
        hex::decode_to_slice(h, &mut raw).ok()?;
        let mut specifier = [0u8; 9];
        specifier.copy_from_slice(&raw[..9]);
        let mut key = [0u8; 20];
        key.copy_from_slice(&raw[9..]);
        Some(HashedPassword { specifier, key })
    }

    /// Whether `secret` hashes to this value (constant-time compare).
    pub fn matches(&self, secret: &[u8]) -> bool {
        s2k_rfc2440(secret, &self.specifier).ct_eq(&self.key).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made by stock tor 0.4.9.11: `tor --hash-password "weft control"`.
    const TOR_HASH: &str = "16:A69662735A265BAC602C01B03AE915B2705F1C8715ACD45E700AF749B5";

    #[test]
    fn stock_tor_hashed_password() {
        let h = HashedPassword::parse(TOR_HASH).unwrap();
        assert!(h.matches(b"weft control"));
        assert!(!h.matches(b"weft contro1"));
        assert!(!h.matches(b""));
        let salt: [u8; 8] = hex::decode("A69662735A265BAC").unwrap().try_into().unwrap();
        assert_eq!(hash_password(b"weft control", salt), TOR_HASH);
        for bad in [
            "",
            "16:",
            "16:zz",
            &TOR_HASH[..40],
            "16:A69662735A265BAC602C01B03AE915B2705F1C8715ACD45E700AF749B500",
        ] {
            assert!(HashedPassword::parse(bad).is_none(), "{bad}");
        }
    }

    /// A SAFECOOKIE exchange between stem 1.8.2 and stock tor 0.4.9.11,
    /// captured on loopback: the cookie file, the client nonce, tor's
    /// server nonce and hash, and the client hash stem sent (which tor
    /// accepted with 250 OK).
    #[test]
    fn stock_tor_safecookie_exchange() {
        let cookie: [u8; 32] =
            hex::decode("96a75a431e0ac348f4df8fc208e95315e5d328cf30efe4d866b6545abe7fc07a")
                .unwrap()
                .try_into()
                .unwrap();
        let client_nonce =
            hex::decode("0b53f0c4254c39ca4df4e7ac3f52650d3624d89820b9b73b9db44a3f12aa4c6a")
                .unwrap();
        let server_nonce: [u8; 32] =
            hex::decode("FE9C48CEF193D39521CB9AB51144C419C71853F0A27A6DBDF91017DD15DF0326")
                .unwrap()
                .try_into()
                .unwrap();
        let (server, client) = safecookie_hashes(&cookie, &client_nonce, &server_nonce);
        assert_eq!(
            hex::encode_upper(server),
            "201F69ADB8F64571193733E86FD697CABA3D175756461FCA4E1349BED83AAF7C"
        );
        assert_eq!(
            hex::encode(client),
            "f8325f99787a5d4eef49da06e70c1c5b34405dc542d27ccccf9afaeac378a02e"
        );
    }
}
