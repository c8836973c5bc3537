//! The relay's server descriptor and extra-info document: text generation in
//! C Tor's item order and both signatures (protocol-notes §10.1, §10.2;
//! dir-spec §2.1.1, §2.1.2; C Tor `router_dump_router_to_string()` and
//! `extrainfo_dump_to_string()` in src/feature/relay/router.c).
//!
//! Sans-IO: keys and parameters in, signed text out. Every value that is
//! written into a document is checked first, so a bad configuration value
//! (a newline in `contact`, say) gives a [`DescError`] instead of a document
//! that authorities would reject or misparse.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use weft_crypto::certs::{self, unix_secs, CertError};
use weft_crypto::keys::RelayKeys;

/// Prefix hashed before the text covered by `router-sig-ed25519`
/// (C Tor `ED_DESC_SIGNATURE_PREFIX`, used for descriptors and extra-infos).
pub const ED_DESC_SIGNATURE_PREFIX: &[u8] = b"Tor router descriptor signature v1";
/// Authorities refuse larger descriptors (C Tor `MAX_DESCRIPTOR_UPLOAD_SIZE`).
pub const MAX_DESCRIPTOR_SIZE: usize = 20_000;
/// Authorities refuse larger extra-info documents (`MAX_EXTRAINFO_UPLOAD_SIZE`).
pub const MAX_EXTRA_INFO_SIZE: usize = 50_000;
/// The bandwidth values are C `int`s in C Tor's parser.
const MAX_BANDWIDTH: u64 = i32::MAX as u64;
/// Default onion key lifetime (consensus `onion-key-rotation-days` default).
pub const DEFAULT_ONION_KEY_LIFETIME: Duration = Duration::from_secs(28 * 86400);
/// The `proto` line of a middle-only weft (protocol-notes §12).
pub const DEFAULT_PROTO: &str = "Cons=1-2 Desc=1-2 Link=4-5 LinkAuth=3 Microdesc=1-2 Relay=2";
/// C Tor's default `BandwidthRate` and `BandwidthBurst` (1 GByte/s).
pub const DEFAULT_BANDWIDTH: u64 = 1 << 30;

/// Errors while building a descriptor or extra-info document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DescError {
    /// The nickname is not 1–19 ASCII letters and digits.
    #[error("invalid nickname {0:?}: must be 1-19 ASCII letters or digits")]
    InvalidNickname(String),
    /// A parameter cannot be written into a descriptor.
    #[error("invalid descriptor field {field}: {why}")]
    InvalidField {
        /// Which parameter.
        field: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The Ed25519 signing certificate has expired by the publication time
    /// (authorities would reject the descriptor).
    #[error("signing key certificate expired before the publication time")]
    SigningCertExpired,
    /// The document is larger than authorities accept.
    #[error("document is {size} bytes, authorities accept at most {limit}")]
    TooLarge {
        /// Size of what we built.
        size: usize,
        /// The authorities' limit.
        limit: usize,
    },
    /// Making a certificate or signature failed.
    #[error("signing: {0}")]
    Cert(#[from] CertError),
    /// OpenSSL failed (key encoding).
    #[error("openssl: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
}

/// What goes into a server descriptor besides the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorParams {
    /// Nickname, 1–19 ASCII letters and digits.
    pub nickname: String,
    /// The advertised IPv4 address.
    pub address: Ipv4Addr,
    /// The advertised ORPort (non-zero).
    pub or_port: u16,
    /// `contact` line, if any (no newlines).
    pub contact: Option<String>,
    /// `platform` line, e.g. "weft 0.1.0 on Linux". Must not start with
    /// "Tor " (authorities would check it as a Tor version).
    pub platform: String,
    /// `proto` line entries, e.g. [`DEFAULT_PROTO`].
    pub proto: String,
    /// Seconds the relay has been running.
    pub uptime: u64,
    /// `BandwidthRate`, bytes/s (at least 1; capped at `i32::MAX`).
    pub bandwidth_avg: u64,
    /// `BandwidthBurst`, bytes/s (capped at `i32::MAX`).
    pub bandwidth_burst: u64,
    /// Observed bandwidth, bytes/s (capped at `i32::MAX`). 0 means a
    /// consensus weight of 0 (protocol-notes §10.4).
    pub bandwidth_observed: u64,
    /// Publication time (written with one-second precision, UTC).
    pub published: SystemTime,
    /// Lifetime of the current onion keys (`onion-key-rotation-days`); the
    /// ntor crosscert expires at `published + onion_key_lifetime`.
    pub onion_key_lifetime: Duration,
    /// Exit policy lines, each `accept …` or `reject …`; at least one.
    pub exit_policy_lines: Vec<String>,
    /// `ipv6-policy` summary (`accept 80,443`), with IPv6Exit and some
    /// IPv6 port accepted; no line otherwise.
    pub ipv6_policy: Option<String>,
    /// `family` entries (`$FINGERPRINT`s, or nicknames), from MyFamily;
    /// no line when empty.
    pub family: Vec<String>,
    /// `overload-general 1 <time>`: the start of the hour of the last
    /// general overload (out of memory, CREATE cells dropped), written
    /// while it is under 72 h old. [C rephist.c
    /// rep_hist_get_overload_general_line()]
    pub overload_general: Option<SystemTime>,
    /// `tunnelled-dir-server`: we answer BEGIN_DIR (a directory cache;
    /// what earns the V2Dir flag). [C router.c
    /// router_should_advertise_begindir()]
    pub tunnelled_dir_server: bool,
    /// `hibernating 1`: accounting or a shutdown has us refuse new
    /// circuits (authorities then do not list us Running). [C router.c]
    pub hibernating: bool,
    /// `hidden-service-dir`: we store and serve v3 onion-service
    /// descriptors (authorities vote HSDir by their own rules only for
    /// relays that say so). C writes it in every descriptor; weft writes
    /// it when it is a directory cache (the HSDir answers over
    /// BEGIN_DIR). [C router.c router_dump_router_to_string()]
    pub hidden_service_dir: bool,
    /// `family-cert` objects (encoded Ed25519 certificates of type
    /// FAMILY_V_IDENTITY, one per family key; see
    /// `weft_crypto::family_keys`).
    pub family_certs: Vec<Vec<u8>>,
    /// The IPv6 ORPort (`or-address [IPv6]:port`), if any.
    pub or_address_v6: Option<std::net::SocketAddrV6>,
}

impl DescriptorParams {
    /// Parameters with weft's defaults: [`default_platform`],
    /// [`DEFAULT_PROTO`], uptime 0, 1 GByte/s rate and burst, observed 0,
    /// 28-day onion keys, `reject *:*`, no contact.
    pub fn new(nickname: &str, address: Ipv4Addr, or_port: u16, published: SystemTime) -> Self {
        DescriptorParams {
            nickname: nickname.to_owned(),
            address,
            or_port,
            contact: None,
            platform: default_platform(),
            proto: DEFAULT_PROTO.to_owned(),
            uptime: 0,
            bandwidth_avg: DEFAULT_BANDWIDTH,
            bandwidth_burst: DEFAULT_BANDWIDTH,
            bandwidth_observed: 0,
            published,
            onion_key_lifetime: DEFAULT_ONION_KEY_LIFETIME,
            exit_policy_lines: vec!["reject *:*".to_owned()],
            ipv6_policy: None,
            family: Vec::new(),
            overload_general: None,
            tunnelled_dir_server: false,
            hibernating: false,
            hidden_service_dir: false,
            or_address_v6: None,
            family_certs: Vec::new(),
        }
    }
}

/// `weft <version> on <OS>`, e.g. "weft 0.1.0 on Linux".
pub fn default_platform() -> String {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        "freebsd" => "FreeBSD",
        "openbsd" => "OpenBSD",
        "netbsd" => "NetBSD",
        "windows" => "Windows",
        other => other,
    };
    format!("weft {} on {os}", env!("CARGO_PKG_VERSION"))
}

/// The digests of an extra-info document that the descriptor's
/// `extra-info-digest` line carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraInfoDigests {
    /// SHA-1 of the signed part (`extra-info` … `router-signature\n`),
    /// upper-case hex.
    pub sha1_hex_upper: String,
    /// SHA-256 of the whole document, base64 without padding.
    pub sha256_b64: String,
}

/// True for a valid relay nickname (1–19 ASCII alphanumerics).
pub fn is_valid_nickname(n: &str) -> bool {
    (1..=19).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A value that goes on one line: printable ASCII and spaces only.
fn check_line(field: &'static str, v: &str) -> Result<(), DescError> {
    if v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        Ok(())
    } else {
        Err(DescError::InvalidField {
            field,
            why: "must be printable ASCII on one line",
        })
    }
}

fn check_params(p: &DescriptorParams) -> Result<(), DescError> {
    if !is_valid_nickname(&p.nickname) {
        return Err(DescError::InvalidNickname(p.nickname.clone()));
    }
    let bad = |field, why| Err(DescError::InvalidField { field, why });
    if p.or_port == 0 {
        return bad("or_port", "must not be 0");
    }
    check_line("platform", &p.platform)?;
    if p.platform.is_empty() {
        return bad("platform", "must not be empty");
    }
    if p.platform.starts_with("Tor ") {
        return bad("platform", "must not pretend to be Tor");
    }
    check_line("proto", &p.proto)?;
    if p.proto.trim().is_empty() || !p.proto.contains('=') {
        return bad("proto", "must list Name=versions entries");
    }
    for f in &p.family {
        if f.is_empty() || !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'$') {
            return Err(DescError::InvalidField {
                field: "family",
                why: "entries are $fingerprints or nicknames",
            });
        }
    }
    if let Some(c) = &p.contact {
        check_line("contact", c)?;
    }
    if p.bandwidth_avg == 0 {
        return bad("bandwidth_avg", "must be at least 1");
    }
    if p.exit_policy_lines.is_empty() {
        return bad("exit_policy_lines", "needs at least one line");
    }
    if let Some(s) = &p.ipv6_policy {
        check_line("ipv6_policy", s)?;
        if !(s.starts_with("accept ") || s.starts_with("reject ")) {
            return bad("ipv6_policy", "must start with accept/reject");
        }
    }
    for l in &p.exit_policy_lines {
        check_line("exit_policy_lines", l)?;
        if !(l.starts_with("accept ") || l.starts_with("reject ")) {
            return bad(
                "exit_policy_lines",
                "each line must start with accept/reject",
            );
        }
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn format_time(t: SystemTime) -> Result<String, DescError> {
    let secs = i64::try_from(unix_secs(t)).map_err(|_| DescError::InvalidField {
        field: "published",
        why: "out of range",
    })?;
    let dt =
        time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| DescError::InvalidField {
            field: "published",
            why: "out of range",
        })?;
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    dt.format(&fmt).map_err(|_| DescError::InvalidField {
        field: "published",
        why: "cannot be formatted",
    })
}

/// A PEM block: standard base64 (padded) wrapped at 64 columns.
fn pem(out: &mut String, label: &str, data: &[u8]) {
    let b64 = STANDARD.encode(data);
    let _ = writeln!(out, "-----BEGIN {label}-----");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so any byte boundary is a char boundary.
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    let _ = writeln!(out, "-----END {label}-----");
}

/// Append `router-sig-ed25519 <sig>\nrouter-signature\n<PEM>` to `doc`,
/// which must hold the text from its first keyword up to here.
fn sign_document(keys: &RelayKeys, doc: &mut String) -> Result<(), DescError> {
    doc.push_str("router-sig-ed25519 ");
    let mut h = Sha256::new();
    h.update(ED_DESC_SIGNATURE_PREFIX);
    h.update(doc.as_bytes());
    let sig = keys.signing.sign(&h.finalize());
    doc.push_str(&STANDARD_NO_PAD.encode(sig.to_bytes()));
    doc.push('\n');
    doc.push_str("router-signature\n");
    let digest = Sha1::digest(doc.as_bytes());
    let rsa_sig = certs::rsa_sign_raw(&keys.rsa_id, &digest)?;
    pem(doc, "SIGNATURE", &rsa_sig);
    Ok(())
}

fn identity_ed25519(out: &mut String, keys: &RelayKeys) {
    out.push_str("identity-ed25519\n");
    pem(out, "ED25519 CERT", &keys.signing_cert);
}

/// Fingerprint in groups of four hex digits: `ABCD 1234 …`.
fn spaced_fingerprint(fp: &[u8; 20]) -> String {
    let hex = hex::encode_upper(fp);
    let groups: Vec<&str> = (0..10).filter_map(|i| hex.get(i * 4..i * 4 + 4)).collect();
    groups.join(" ")
}

/// Build and sign the server descriptor (item order of protocol-notes
/// §10.1, as C Tor writes it). `extra_info` adds the `extra-info-digest`
/// line of the extra-info document uploaded along with it.
pub fn build_server_descriptor(
    keys: &RelayKeys,
    p: &DescriptorParams,
    extra_info: Option<&ExtraInfoDigests>,
) -> Result<String, DescError> {
    check_params(p)?;
    if let Some(d) = extra_info {
        let hex_ok =
            d.sha1_hex_upper.len() == 40 && d.sha1_hex_upper.bytes().all(|b| b.is_ascii_hexdigit());
        let b64_ok = STANDARD_NO_PAD
            .decode(&d.sha256_b64)
            .is_ok_and(|v| v.len() == 32);
        if !hex_ok || !b64_ok {
            return Err(DescError::InvalidField {
                field: "extra_info",
                why: "digests must be 40 hex digits and 32 bytes of unpadded base64",
            });
        }
    }
    if keys.signing_cert_expiry <= p.published {
        return Err(DescError::SigningCertExpired);
    }
    let published = format_time(p.published)?;
    let bw = |v: u64| v.min(MAX_BANDWIDTH);

    let mut d = String::with_capacity(4096);
    let _ = writeln!(d, "router {} {} {} 0 0", p.nickname, p.address, p.or_port);
    identity_ed25519(&mut d, keys);
    let _ = writeln!(
        d,
        "master-key-ed25519 {}",
        STANDARD_NO_PAD.encode(keys.ed_id)
    );
    if let Some(a) = p.or_address_v6 {
        let _ = writeln!(d, "or-address [{}]:{}", a.ip(), a.port());
    }
    let _ = writeln!(d, "platform {}", p.platform);
    let _ = writeln!(d, "proto {}", p.proto);
    let _ = writeln!(d, "published {published}");
    let _ = writeln!(d, "fingerprint {}", spaced_fingerprint(&keys.fingerprint));
    let _ = writeln!(d, "uptime {}", p.uptime);
    let _ = writeln!(
        d,
        "bandwidth {} {} {}",
        bw(p.bandwidth_avg),
        bw(p.bandwidth_burst),
        bw(p.bandwidth_observed)
    );
    if let Some(x) = extra_info {
        let _ = writeln!(d, "extra-info-digest {} {}", x.sha1_hex_upper, x.sha256_b64);
    }
    d.push_str("onion-key\n");
    pem(
        &mut d,
        "RSA PUBLIC KEY",
        &keys.onion.tap.public_key_to_der_pkcs1()?,
    );
    d.push_str("signing-key\n");
    pem(&mut d, "RSA PUBLIC KEY", &keys.rsa_id_der);
    let tap_cc = certs::tap_onion_crosscert(&keys.onion.tap, &keys.fingerprint, &keys.ed_id)?;
    d.push_str("onion-key-crosscert\n");
    pem(&mut d, "CROSSCERT", &tap_cc);
    let ntor_cc_expiry =
        p.published
            .checked_add(p.onion_key_lifetime)
            .ok_or(DescError::InvalidField {
                field: "onion_key_lifetime",
                why: "out of range",
            })?;
    let (ntor_cc, sign_bit) =
        certs::ntor_onion_crosscert(&keys.onion.ntor.secret, &keys.ed_id, ntor_cc_expiry)?;
    let _ = writeln!(d, "ntor-onion-key-crosscert {sign_bit}");
    pem(&mut d, "ED25519 CERT", &ntor_cc);
    if let Some(c) = &p.contact {
        let _ = writeln!(d, "contact {c}");
    }
    if !p.family.is_empty() {
        let _ = writeln!(d, "family {}", p.family.join(" "));
    }
    for c in &p.family_certs {
        d.push_str("family-cert\n");
        pem(&mut d, "FAMILY CERT", c);
    }
    if p.hibernating {
        d.push_str("hibernating 1\n");
    }
    if p.hidden_service_dir {
        d.push_str("hidden-service-dir\n");
    }
    let _ = writeln!(
        d,
        "ntor-onion-key {}",
        STANDARD_NO_PAD.encode(keys.onion.ntor.public)
    );
    for l in &p.exit_policy_lines {
        let _ = writeln!(d, "{l}");
    }
    // After the exit policy, as C's router_dump_router_to_string().
    if let Some(s) = &p.ipv6_policy {
        let _ = writeln!(d, "ipv6-policy {s}");
    }
    if p.tunnelled_dir_server {
        d.push_str("tunnelled-dir-server\n");
    }
    if let Some(t) = p.overload_general {
        let age = p.published.duration_since(t).unwrap_or_default();
        if age < Duration::from_secs(72 * 3600) {
            let _ = writeln!(d, "overload-general 1 {}", format_time(t)?);
        }
    }
    sign_document(keys, &mut d)?;
    if d.len() > MAX_DESCRIPTOR_SIZE {
        return Err(DescError::TooLarge {
            size: d.len(),
            limit: MAX_DESCRIPTOR_SIZE,
        });
    }
    Ok(d)
}

/// Build and sign the extra-info document (protocol-notes §10.2): only the
/// required items, no statistics. Returns the document and the digests for
/// the descriptor's `extra-info-digest` line.
pub fn build_extra_info(
    keys: &RelayKeys,
    nickname: &str,
    published: SystemTime,
) -> Result<(String, ExtraInfoDigests), DescError> {
    build_extra_info_with_stats(keys, nickname, published, &[])
}

/// [`build_extra_info`] with statistics: `stats` are C's chunks, each one
/// or more whole lines (`keyword …\n`), written after `published` in
/// order. As C's `extrainfo_dump_to_string()`, a document over the
/// authorities' limit loses chunks from the end until it fits. A chunk
/// that is not printable ASCII lines is refused.
pub fn build_extra_info_with_stats(
    keys: &RelayKeys,
    nickname: &str,
    published: SystemTime,
    stats: &[String],
) -> Result<(String, ExtraInfoDigests), DescError> {
    if !is_valid_nickname(nickname) {
        return Err(DescError::InvalidNickname(nickname.to_owned()));
    }
    for c in stats {
        if !c.ends_with('\n') || c.starts_with('\n') || c.contains("\n\n") {
            return Err(DescError::InvalidField {
                field: "extra_info_stats",
                why: "each chunk must be whole lines",
            });
        }
        for l in c.lines() {
            check_line("extra_info_stats", l)?;
        }
    }
    let mut stats = stats;
    let d = loop {
        let mut d = String::with_capacity(1024);
        let _ = writeln!(
            d,
            "extra-info {nickname} {}",
            hex::encode_upper(keys.fingerprint)
        );
        identity_ed25519(&mut d, keys);
        let _ = writeln!(d, "published {}", format_time(published)?);
        for c in stats {
            d.push_str(c);
        }
        sign_document(keys, &mut d)?;
        if d.len() <= MAX_EXTRA_INFO_SIZE {
            break d;
        }
        match stats.split_last() {
            Some((_, rest)) => stats = rest,
            None => {
                return Err(DescError::TooLarge {
                    size: d.len(),
                    limit: MAX_EXTRA_INFO_SIZE,
                })
            }
        }
    };
    let digests = extra_info_digests(&d).ok_or(DescError::InvalidField {
        field: "extra_info",
        why: "internal error: no router-signature in what we built",
    })?;
    Ok((d, digests))
}

/// SHA-1 of a descriptor's or extra-info's signed part: from the start of
/// `doc` through the first `\nrouter-signature\n`. `None` when the keyword
/// is missing. For a server descriptor this is its digest as listed in a
/// plain consensus `r` line.
pub fn signed_digest(doc: &str) -> Option<[u8; 20]> {
    const KW: &str = "\nrouter-signature\n";
    let end = doc.find(KW)? + KW.len();
    Some(Sha1::digest(&doc.as_bytes()[..end]).into())
}

/// The `extra-info-digest` values of an extra-info document (the whole of
/// `doc`, from `extra-info` through the end of its signature).
pub fn extra_info_digests(doc: &str) -> Option<ExtraInfoDigests> {
    Some(ExtraInfoDigests {
        sha1_hex_upper: hex::encode_upper(signed_digest(doc)?),
        sha256_b64: STANDARD_NO_PAD.encode(Sha256::digest(doc.as_bytes())),
    })
}

/// Build the extra-info document and the descriptor that references it, in
/// one call: returns `(descriptor, extra_info)`, ready for
/// [`crate::upload::upload_body`].
pub fn build_descriptor_pair(
    keys: &RelayKeys,
    p: &DescriptorParams,
) -> Result<(String, String), DescError> {
    check_params(p)?;
    let (ei, digests) = build_extra_info(keys, &p.nickname, p.published)?;
    let desc = build_server_descriptor(keys, p, Some(&digests))?;
    Ok((desc, ei))
}
