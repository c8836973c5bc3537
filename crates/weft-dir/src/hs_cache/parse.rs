//! The outer (plaintext) layer of a v3 onion-service descriptor, parsed and
//! checked as an HSDir checks an upload (sans-IO: bytes and `now` in, the
//! facts the store indexes by out): C Tor's `hs_desc_decode_plaintext` and
//! `desc_decode_plaintext_v3` (rend-spec-v3 §2.4, "Hidden service
//! descriptors: outer wrapper").
//!
//! * the whole text is under the size limit (`HSV3MaxDescriptorSize`,
//!   C's `encoded_len >= max` refuses);
//! * C's token rules (`hs_desc_v3_token_table`): `hs-descriptor` first,
//!   `signature` last, each of the six items exactly once, with their
//!   argument counts and objects; unknown items are ignored;
//! * `hs-descriptor 3`; `descriptor-lifetime` in minutes, at most 12 hours
//!   (C sets no lower bound);
//! * `descriptor-signing-key-cert`: an `ED25519 CERT` of type 08 that
//!   carries its signing key (the blinded key), signed by it and not
//!   expired at `now` (tor-cert does the decoding and checks);
//! * `revision-counter` a u64; `superencrypted` a `MESSAGE` longer than a
//!   salt and a MAC (C's `encrypted_data_length_is_valid`);
//! * `signature`: 86 base64 characters, an Ed25519 signature by the
//!   certified descriptor-signing key over "Tor onion service descriptor
//!   sig v3" followed by the text up to and including the newline before
//!   `signature`.
//!
//! The HSDir cannot decrypt the inner layers (it does not know the
//! service's identity), so nothing else is checked, as in C.
//!
//! Arti's tor-netdoc parses this layer (`StoredHsDescMeta`, feature
//! `hs-dir`), but 0.47 keeps the blinded key and revision counter private
//! and demands a lifetime of at least 30 minutes where C accepts any; the
//! tokenizer here is small and follows C's rules.

use std::time::SystemTime;

use base64::engine::{general_purpose::GeneralPurposeConfig, DecodePaddingMode, GeneralPurpose};
use base64::Engine as _;
use tor_cert::{CertType, CertifiedKey, Ed25519Cert};
use tor_checkable::{SelfSigned, Timebound};
use tor_llcrypto::pk::ed25519;

/// C's `HS_DESC_MAX_LEN`: the default of the consensus parameter
/// `HSV3MaxDescriptorSize`.
pub const HS_DESC_MAX_LEN: usize = 50_000;
/// C's `HS_DESC_MAX_LIFETIME`: 12 hours.
pub const MAX_LIFETIME_SECS: u32 = 12 * 3600;
/// rend-spec-v3 §2.4: the signature's personalization prefix.
const SIG_PREFIX: &[u8] = b"Tor onion service descriptor sig v3";
/// C's `ED25519_SIG_BASE64_LEN`.
const SIG_BASE64_LEN: usize = 86;
/// C's `HS_DESC_ENCRYPTED_SALT_LEN` + `DIGEST256_LEN`: a superencrypted
/// blob must be longer.
const MIN_ENCRYPTED_LEN: usize = 16 + 32;

/// Base64 as C's `base64_decode` reads it: padding optional.
const B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Why an upload was refused. Every one is answered `400 Invalid HS
/// descriptor. Rejected.`, as C answers them all; the cause goes to the
/// log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// At least the size limit (`HSV3MaxDescriptorSize`).
    #[error("descriptor too big")]
    TooLarge,
    /// Not a descriptor by C's token rules, or a field does not parse.
    #[error("descriptor malformed: {0}")]
    Malformed(&'static str),
    /// Lifetime over 12 hours.
    #[error("descriptor lifetime over 12 hours")]
    BadLifetime,
    /// The descriptor-signing-key certificate is missing its key, of the
    /// wrong type, badly signed or expired.
    #[error("descriptor signing-key certificate invalid: {0}")]
    BadCert(&'static str),
    /// The descriptor's signature does not verify.
    #[error("descriptor signature invalid")]
    BadSignature,
    /// The cache holds a descriptor for this blinded key with a revision
    /// counter at least as high.
    #[error("revision counter not above the cached descriptor's")]
    OldRevision,
}

impl Refused {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::TooLarge => "too_large",
            Refused::Malformed(_) => "malformed",
            Refused::BadLifetime => "bad_lifetime",
            Refused::BadCert(_) => "bad_cert",
            Refused::BadSignature => "bad_signature",
            Refused::OldRevision => "old_revision",
        }
    }
}

/// Every [`Refused::label`], in a fixed order (for metrics).
pub const REFUSED_LABELS: [&str; 6] = [
    "too_large",
    "malformed",
    "bad_lifetime",
    "bad_cert",
    "bad_signature",
    "old_revision",
];

/// A descriptor whose outer layer passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedDescriptor {
    /// The blinded public key (the certificate's signing key): the
    /// cache's index.
    pub blinded_key: [u8; 32],
    /// `revision-counter`.
    pub revision: u64,
    /// `descriptor-lifetime`, in seconds.
    pub lifetime_secs: u32,
    /// The text as served (up to a NUL, as C's `strlen` reads the body).
    pub text: Vec<u8>,
}

/// One item of the document: keyword, arguments, optional object.
struct Item<'a> {
    keyword: &'a str,
    args: Vec<&'a str>,
    /// (object type, decoded body).
    object: Option<(&'a str, Vec<u8>)>,
}

/// Check an uploaded descriptor's outer layer at `now`, with `max_len` the
/// size limit in force (`HSV3MaxDescriptorSize`).
pub fn check_descriptor(
    body: &[u8],
    max_len: usize,
    now: SystemTime,
) -> Result<CheckedDescriptor, Refused> {
    // C reads the body as a C string.
    let text = match body.iter().position(|&b| b == 0) {
        Some(n) => &body[..n],
        None => body,
    };
    if text.len() >= max_len {
        return Err(Refused::TooLarge);
    }
    let s = std::str::from_utf8(text).map_err(|_| Refused::Malformed("not UTF-8"))?;
    let items = tokenize(s)?;
    check_rules(&items)?;
    let one = |kw: &str| {
        items
            .iter()
            .find(|i| i.keyword == kw)
            .ok_or(Refused::Malformed("missing item"))
    };

    let version = one("hs-descriptor")?.args[0];
    if version.parse::<u32>().ok() != Some(3) {
        return Err(Refused::Malformed("unsupported hs-descriptor version"));
    }
    let lifetime_min: u32 = one("descriptor-lifetime")?.args[0]
        .parse()
        .map_err(|_| Refused::Malformed("descriptor-lifetime"))?;
    let lifetime_secs = lifetime_min
        .checked_mul(60)
        .filter(|s| *s <= MAX_LIFETIME_SECS)
        .ok_or(Refused::BadLifetime)?;

    let (blinded_key, signing_key) = check_cert(one("descriptor-signing-key-cert")?, now)?;

    let revision: u64 = one("revision-counter")?.args[0]
        .parse()
        .map_err(|_| Refused::Malformed("revision-counter"))?;

    match &one("superencrypted")?.object {
        Some(("MESSAGE", blob)) if blob.len() > MIN_ENCRYPTED_LEN => {}
        Some(("MESSAGE", _)) => return Err(Refused::Malformed("superencrypted too short")),
        _ => return Err(Refused::Malformed("superencrypted object type")),
    }

    let sig_b64 = one("signature")?.args[0];
    if sig_b64.len() != SIG_BASE64_LEN {
        return Err(Refused::BadSignature);
    }
    let sig: [u8; 64] = B64
        .decode(sig_b64)
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or(Refused::BadSignature)?;
    // C's desc_sig_is_valid: everything before the first "\nsignature ",
    // its newline included.
    let end = find(text, b"\nsignature ").ok_or(Refused::Malformed("signature line"))? + 1;
    let mut signed = Vec::with_capacity(SIG_PREFIX.len() + end);
    signed.extend_from_slice(SIG_PREFIX);
    signed.extend_from_slice(&text[..end]);
    let key = ed25519::PublicKey::from_bytes(&signing_key).map_err(|_| Refused::BadSignature)?;
    key.verify(&signed, &ed25519::Signature::from(sig))
        .map_err(|_| Refused::BadSignature)?;

    Ok(CheckedDescriptor {
        blinded_key,
        revision,
        lifetime_secs,
        text: text.to_vec(),
    })
}

/// The descriptor-signing-key certificate (C's `cert_is_valid` with
/// `CERT_TYPE_SIGNING_HS_DESC`): returns (blinded key, signing key).
fn check_cert(item: &Item<'_>, now: SystemTime) -> Result<([u8; 32], [u8; 32]), Refused> {
    let der = match &item.object {
        Some(("ED25519 CERT", b)) => b,
        _ => return Err(Refused::BadCert("object is not an ED25519 CERT")),
    };
    let unchecked = Ed25519Cert::decode(der).map_err(|_| Refused::BadCert("unparseable"))?;
    if unchecked.peek_cert_type() != CertType::HS_BLINDED_ID_V_SIGNING {
        return Err(Refused::BadCert("type is not 08"));
    }
    let cert = unchecked
        .should_have_signing_key()
        .map_err(|_| Refused::BadCert("signing key not included"))?
        .check_signature()
        .map_err(|_| Refused::BadCert("bad signature"))?
        .if_valid_at(&now)
        .map_err(|_| Refused::BadCert("expired"))?;
    let blinded = cert
        .signing_key()
        .ok_or(Refused::BadCert("signing key not included"))?;
    let signing = match cert.subject_key() {
        CertifiedKey::Ed25519(k) => *k,
        _ => return Err(Refused::BadCert("certifies a non-Ed25519 key")),
    };
    let mut b = [0u8; 32];
    b.copy_from_slice(blinded.as_bytes());
    let mut s = [0u8; 32];
    s.copy_from_slice(signing.as_bytes());
    Ok((b, s))
}

/// C's `hs_desc_v3_token_table`: (keyword, argument count, object
/// required).
const RULES: [(&str, usize, bool); 6] = [
    ("hs-descriptor", 1, false),
    ("descriptor-lifetime", 1, false),
    ("descriptor-signing-key-cert", 0, true),
    ("revision-counter", 1, false),
    ("superencrypted", 0, true),
    ("signature", 1, false),
];

fn check_rules(items: &[Item<'_>]) -> Result<(), Refused> {
    for (kw, nargs, needs_obj) in RULES {
        let mut found = items.iter().filter(|i| i.keyword == kw);
        let item = found.next().ok_or(Refused::Malformed("missing item"))?;
        if found.next().is_some() {
            return Err(Refused::Malformed("repeated item"));
        }
        if item.args.len() != nargs {
            return Err(Refused::Malformed("wrong argument count"));
        }
        if item.object.is_some() != needs_obj {
            return Err(Refused::Malformed("object present or missing"));
        }
    }
    // T1_START and T1_END.
    if items.first().map(|i| i.keyword) != Some("hs-descriptor") {
        return Err(Refused::Malformed("does not start with hs-descriptor"));
    }
    if items.last().map(|i| i.keyword) != Some("signature") {
        return Err(Refused::Malformed("does not end with signature"));
    }
    Ok(())
}

/// Split the document into items (C's `tokenize_string` for this table:
/// a keyword line with space-separated arguments, optionally followed by
/// a `-----BEGIN X-----` … `-----END X-----` object in base64).
fn tokenize(s: &str) -> Result<Vec<Item<'_>>, Refused> {
    let mut items = Vec::new();
    let mut lines = s.split('\n').peekable();
    while let Some(line) = lines.next() {
        let line = line.trim_start_matches([' ', '\t', '\r']);
        if line.is_empty() {
            continue;
        }
        if line.starts_with("-----") {
            return Err(Refused::Malformed("object without an item"));
        }
        let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
        let keyword = words.next().unwrap_or("");
        if !keyword
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(Refused::Malformed("bad keyword"));
        }
        let args: Vec<&str> = words.collect();
        let object = match lines.peek() {
            Some(next) if next.starts_with("-----BEGIN ") => {
                let ty = next
                    .strip_prefix("-----BEGIN ")
                    .and_then(|t| t.trim_end_matches('\r').strip_suffix("-----"))
                    .ok_or(Refused::Malformed("object header"))?;
                lines.next();
                let end = format!("-----END {ty}-----");
                let mut b64 = String::new();
                loop {
                    let l = lines
                        .next()
                        .ok_or(Refused::Malformed("unterminated object"))?;
                    let l = l.trim_end_matches('\r');
                    if l == end {
                        break;
                    }
                    if l.starts_with("-----") {
                        return Err(Refused::Malformed("object footer"));
                    }
                    b64.push_str(l.trim());
                }
                let body = B64
                    .decode(b64.trim_end_matches('='))
                    .map_err(|_| Refused::Malformed("object base64"))?;
                Some((ty, body))
            }
            _ => None,
        };
        items.push(Item {
            keyword,
            args,
            object,
        });
    }
    Ok(items)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A blinded key as a GET names it (C's `ed25519_public_from_base64`: 43
/// base64 characters, or 44 with the padding).
pub fn parse_blinded_key(b64: &str) -> Option<[u8; 32]> {
    if !(b64.len() == 43 || b64.len() == 44 && b64.ends_with('=')) {
        return None;
    }
    B64.decode(b64).ok()?.try_into().ok()
}
