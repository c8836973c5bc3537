//! C Tor's key file formats (`crypto_write_tagged_contents_to_file`): a
//! 32-byte header `== TYPE: TAG ==` padded with NULs, then the key. weft
//! writes its keys in these formats, so a DataDirectory moves from tor to
//! weft and back with the relay's identity, and reads them and its own
//! older text format (`weft-ed25519-secret-v1 …`), which it rewrites in
//! C's on first use.
//!
//! | file | type | tag | contents |
//! |---|---|---|---|
//! | `ed25519_master_id_secret_key` | `ed25519v1-secret` | `type0` | the 64-byte expanded secret key |
//! | `ed25519_signing_secret_key` | `ed25519v1-secret` | `type4` | the 64-byte expanded secret key |
//! | `ed25519_master_id_public_key` | `ed25519v1-public` | `type0` | 32 bytes |
//! | `ed25519_signing_cert` | `ed25519v1-cert` | `type4` | the certificate |
//! | `secret_onion_key_ntor` | `c25519v1` | `onion` | secret (32) then public (32) |

/// The file bytes: header for `kind` and `tag`, then `data`.
pub fn tagged(kind: &str, tag: &str, data: &[u8]) -> Vec<u8> {
    let mut v = format!("== {kind}: {tag} ==").into_bytes();
    v.resize(32, 0);
    v.extend_from_slice(data);
    v
}

/// The contents of a file with header `kind` and `tag`, or None if the
/// header is not that one (or is not NUL-padded).
pub fn untagged<'a>(bytes: &'a [u8], kind: &str, tag: &str) -> Option<&'a [u8]> {
    let head = format!("== {kind}: {tag} ==");
    if bytes.len() < 32 || !bytes.starts_with(head.as_bytes()) {
        return None;
    }
    if bytes[head.len()..32].iter().any(|b| *b != 0) {
        return None;
    }
    Some(&bytes[32..])
}

/// The tag of the master identity's secret key file.
pub const MASTER_TAG: &str = "type0";
/// The tag of the signing key's secret key file (its certificate type).
pub const SIGNING_TAG: &str = "type4";

/// An Ed25519 secret key file's bytes (`tag`: [`MASTER_TAG`] or
/// [`SIGNING_TAG`]).
pub fn ed_secret(expanded: &[u8; 64], tag: &str) -> Vec<u8> {
    tagged("ed25519v1-secret", tag, expanded)
}

/// The expanded secret key of an Ed25519 secret key file in C's format.
pub fn parse_ed_secret(bytes: &[u8], tag: &str) -> Option<[u8; 64]> {
    untagged(bytes, "ed25519v1-secret", tag)?.try_into().ok()
}

/// A signing certificate file's bytes.
pub fn ed_cert(cert: &[u8]) -> Vec<u8> {
    tagged("ed25519v1-cert", "type4", cert)
}

/// The certificate of a signing certificate file in C's format.
pub fn parse_ed_cert(bytes: &[u8]) -> Option<&[u8]> {
    untagged(bytes, "ed25519v1-cert", "type4")
}

/// An ntor onion key file's bytes.
pub fn ntor_secret(secret: &[u8; 32], public: &[u8; 32]) -> Vec<u8> {
    let mut kp = [0u8; 64];
    kp[..32].copy_from_slice(secret);
    kp[32..].copy_from_slice(public);
    tagged("c25519v1", "onion", &kp)
}

/// The secret and public key of an ntor onion key file in C's format.
pub fn parse_ntor_secret(bytes: &[u8]) -> Option<([u8; 32], [u8; 32])> {
    let kp: &[u8; 64] = untagged(bytes, "c25519v1", "onion")?.try_into().ok()?;
    Some((kp[..32].try_into().ok()?, kp[32..].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_as_c_writes_them() {
        let f = ed_secret(&[7; 64], MASTER_TAG);
        assert_eq!(f.len(), 96);
        assert_eq!(&f[..32], b"== ed25519v1-secret: type0 ==\0\0\0");
        assert_eq!(parse_ed_secret(&f, MASTER_TAG), Some([7; 64]));
        let sk = ed_secret(&[8; 64], SIGNING_TAG);
        assert_eq!(&sk[..32], b"== ed25519v1-secret: type4 ==\0\0\0");
        assert_eq!(parse_ed_secret(&sk, MASTER_TAG), None);
        let c = ed_cert(b"cert");
        assert_eq!(&c[..32], b"== ed25519v1-cert: type4 ==\0\0\0\0\0");
        assert_eq!(parse_ed_cert(&c), Some(&b"cert"[..]));
        let n = ntor_secret(&[1; 32], &[2; 32]);
        assert_eq!(&n[..32], b"== c25519v1: onion ==\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(parse_ntor_secret(&n), Some(([1; 32], [2; 32])));
        // Another type, a short file, a header not padded with NULs.
        assert_eq!(parse_ed_secret(&c, SIGNING_TAG), None);
        assert_eq!(parse_ed_secret(b"== ed25519v1-secret", MASTER_TAG), None);
        let mut bad = f.clone();
        bad[31] = b'x';
        assert_eq!(parse_ed_secret(&bad, MASTER_TAG), None);
        assert_eq!(parse_ed_secret(&f[..95], MASTER_TAG), None);
    }
}
