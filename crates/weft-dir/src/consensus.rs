//! Learning the network consensus (protocol-notes §10.5; dir-spec §3.4.1,
//! §4, §5): fetching the consensus and the authority certificates from a
//! DirPort, verifying that more than half of the configured authorities
//! signed it, and reducing it to a [`ConsensusSummary`] — validity times,
//! network parameters with C Tor's defaults ([`NetParams`]) and the relay
//! list ([`RelayEntry`]) so that the relay can find itself and its flags.
//!
//! Parsing and signature checking are done by Arti's `tor-netdoc`
//! (`MdConsensus` / `PlainConsensus`, `AuthCert`), sans-IO in
//! [`verify_consensus`]; the `fetch_*` functions add the bounded HTTP.
//!
//! Trust model: the caller supplies the v3 identities (`v3ident=` of the
//! `DirAuthority` lines) it believes in. Only certificates for those
//! identities, self-signed correctly and valid at `now`, are used, and a
//! consensus is accepted only when valid signatures from more than half of
//! *those* authorities are present.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use tor_checkable::{ExternallySigned as _, SelfSigned as _, TimeBound as _};
use tor_netdoc::doc::authcert::AuthCert;
use tor_netdoc::doc::netstatus::{MdConsensus, PlainConsensus, RelayWeight};

use crate::DirError;

pub use crate::dirport::{
    fetch_authority_certs_text, fetch_consensus_text, fetch_microdescs, fetch_verified_consensus,
};

/// Default cap on a (decompressed) consensus. The public network's
/// consensuses are about 3 MB; a test network's a few KB.
pub const MAX_CONSENSUS_SIZE: usize = 16 * 1024 * 1024;
/// Cap on the `/tor/keys/all` answer (a certificate is about 4 KB).
pub const MAX_CERTS_SIZE: usize = 1024 * 1024;
/// How long after `valid-until` a consensus is still usable (C Tor
/// `REASONABLY_LIVE_TIME`).
pub const REASONABLY_LIVE_TIME: Duration = Duration::from_secs(24 * 3600);
/// How far in the future `valid-after` may be before we call our clock (or
/// the document) wrong and refuse it.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(24 * 3600);

/// Which consensus flavor to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsensusFlavor {
    /// `consensus-microdesc`, what 0.4.9 clients and relays use.
    Microdesc,
    /// The full (`ns`) consensus; its entries carry descriptor digests.
    Plain,
}

impl ConsensusFlavor {
    /// The DirPort path of the current consensus of this flavor.
    pub fn path(self) -> &'static str {
        match self {
            ConsensusFlavor::Microdesc => "/tor/status-vote/current/consensus-microdesc",
            ConsensusFlavor::Plain => "/tor/status-vote/current/consensus",
        }
    }
}

/// How to fetch a consensus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// Which flavor.
    pub flavor: ConsensusFlavor,
    /// Ask for the zlib-compressed (`.z`) form.
    pub compressed: bool,
    /// Cap on the response and on the decompressed document.
    pub max_size: usize,
    /// Deadline for each HTTP exchange.
    pub timeout: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            flavor: ConsensusFlavor::Microdesc,
            compressed: true,
            max_size: MAX_CONSENSUS_SIZE,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Consensus parameters (the `params` line), with typed getters that apply
/// C Tor's default and clamping for the ones a relay uses
/// (`networkstatus_get_param(ns, name, default, min, max)`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetParams {
    values: BTreeMap<String, i32>,
}

impl NetParams {
    /// Parameters from `(name, value)` pairs.
    pub fn from_pairs<I: IntoIterator<Item = (String, i32)>>(pairs: I) -> Self {
        NetParams {
            values: pairs.into_iter().collect(),
        }
    }

    /// Parse the arguments of a `params` line (`k=v k=v …`) the lenient way
    /// C Tor reads them: malformed entries are skipped.
    pub fn parse_line(args: &str) -> Self {
        let values = args
            .split_ascii_whitespace()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                if k.is_empty() {
                    return None;
                }
                Some((k.to_owned(), v.parse::<i32>().ok()?))
            })
            .collect();
        NetParams { values }
    }

    /// The raw value, if present.
    pub fn get(&self, name: &str) -> Option<i32> {
        self.values.get(name).copied()
    }

    /// All parameters, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32)> + '_ {
        self.values.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// C Tor's `networkstatus_get_param()`: the value or `default`, raised
    /// to `min` / capped at `max`.
    pub fn get_clamped(&self, name: &str, default: i32, min: i32, max: i32) -> i32 {
        let v = self.get(name).unwrap_or(default);
        v.clamp(min, max.max(min))
    }

    fn get_bool(&self, name: &str, default: bool) -> bool {
        self.get_clamped(name, i32::from(default), 0, 1) != 0
    }

    /// `circwindow`: initial circuit window (default 1000, 100..=1000).
    pub fn circwindow(&self) -> i32 {
        self.get_clamped("circwindow", 1000, 100, 1000)
    }
    /// `exit_dns_timeout`: how long an exit waits for a name server's
    /// answer before it counts as timed out (ms; default 1000, 1..=120000).
    pub fn exit_dns_timeout(&self) -> Duration {
        Duration::from_millis(self.get_clamped("exit_dns_timeout", 1000, 1, 120_000) as u64)
    }
    /// `exit_dns_num_attempts`: libevent's `attempts:` for the exit's
    /// resolver, the tries before a lookup that times out fails
    /// (default 2, 0..=255).
    pub fn exit_dns_num_attempts(&self) -> usize {
        self.get_clamped("exit_dns_num_attempts", 2, 0, 255) as usize
    }
    /// `onion-key-rotation-days` (default 28, 1..=90).
    pub fn onion_key_rotation_days(&self) -> i32 {
        self.get_clamped("onion-key-rotation-days", 28, 1, 90)
    }
    /// The onion key lifetime as a duration.
    pub fn onion_key_rotation(&self) -> Duration {
        days(self.onion_key_rotation_days())
    }
    /// `onion-key-grace-period-days` (default 7, 1..=rotation days).
    pub fn onion_key_grace_period_days(&self) -> i32 {
        self.get_clamped(
            "onion-key-grace-period-days",
            7,
            1,
            self.onion_key_rotation_days(),
        )
    }
    /// The onion key grace period as a duration.
    pub fn onion_key_grace_period(&self) -> Duration {
        days(self.onion_key_grace_period_days())
    }
    /// `AllowNonearlyExtend` (default 0): accept EXTEND2 in RELAY cells.
    pub fn allow_nonearly_extend(&self) -> bool {
        self.get_bool("AllowNonearlyExtend", false)
    }
    /// `refuseunknownexits` (default 1): an exit refuses BEGIN on circuits
    /// whose previous hop is not a relay listed in the consensus.
    pub fn refuse_unknown_exits(&self) -> bool {
        self.get_bool("refuseunknownexits", true)
    }
    /// INTRODUCE2 limits for introduction points (`HiddenServiceEnableIntroDoS
    /// Defense` default 0, `…RatePerSec` 25, `…BurstPerSec` 200): (enabled,
    /// rate, burst). [C hs_dos.c]
    pub fn intro_dos(&self) -> (bool, u32, u32) {
        (
            self.get_bool("HiddenServiceEnableIntroDoSDefense", false),
            self.get_clamped("HiddenServiceEnableIntroDoSRatePerSec", 25, 0, i32::MAX) as u32,
            self.get_clamped("HiddenServiceEnableIntroDoSBurstPerSec", 200, 0, i32::MAX) as u32,
        )
    }
    /// `publish-dummy-tap-key` (default 1).
    pub fn publish_dummy_tap_key(&self) -> bool {
        self.get_bool("publish-dummy-tap-key", true)
    }
    /// `cc_alg` (default 2 = Vegas, 0..=3; values other than 0 and 2 are
    /// treated as 2, as C Tor does).
    pub fn cc_alg(&self) -> i32 {
        match self.get_clamped("cc_alg", 2, 0, 3) {
            0 => 0,
            _ => 2,
        }
    }
    /// `cc_sendme_inc` (default 31, 1..=254).
    pub fn cc_sendme_inc(&self) -> i32 {
        self.get_clamped("cc_sendme_inc", 31, 1, 254)
    }
    /// `cc_cwnd_init` (default 124, 31..=10000).
    pub fn cc_cwnd_init(&self) -> i32 {
        self.get_clamped("cc_cwnd_init", 124, 31, 10000)
    }
    /// `sendme_emit_min_version` (default 1, 0..=255).
    pub fn sendme_emit_min_version(&self) -> i32 {
        self.get_clamped("sendme_emit_min_version", 1, 0, 255)
    }
    /// `sendme_accept_min_version` (default 0, 0..=255).
    pub fn sendme_accept_min_version(&self) -> i32 {
        self.get_clamped("sendme_accept_min_version", 0, 0, 255)
    }
    /// `nf_ito_low` in ms (default 1500, 0..=60000).
    pub fn nf_ito_low(&self) -> i32 {
        self.get_clamped("nf_ito_low", 1500, 0, 60000)
    }
    /// `nf_ito_high` in ms (default 9500, nf_ito_low..=60000).
    pub fn nf_ito_high(&self) -> i32 {
        self.get_clamped("nf_ito_high", 9500, self.nf_ito_low(), 60000)
    }
    /// `nf_pad_relays` (default 0): pad relay-to-relay channels too.
    pub fn nf_pad_relays(&self) -> bool {
        self.get_bool("nf_pad_relays", false)
    }
}

fn days(d: i32) -> Duration {
    Duration::from_secs(u64::try_from(d).unwrap_or(0) * 86400)
}

/// One relay listed in the consensus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayEntry {
    /// Nickname (not unique, informative only).
    pub nickname: String,
    /// RSA identity fingerprint (SHA-1 of the identity key).
    pub rsa_identity: [u8; 20],
    /// IPv4 address of the ORPort.
    pub address: Ipv4Addr,
    /// ORPort.
    pub or_port: u16,
    /// Further ORPort addresses (`a` lines, IPv6).
    pub other_addresses: Vec<SocketAddr>,
    /// Flags the authorities gave it, by name, sorted. Consensuses list only
    /// Running and Valid relays, so those two are always present.
    pub flags: Vec<&'static str>,
    /// Consensus weight (the `w Bandwidth=` value, in KB/s).
    pub bandwidth: u32,
    /// Whether `bandwidth` was measured by bandwidth authorities.
    pub bandwidth_measured: bool,
    /// The `pr` line.
    pub protocols: String,
    /// SHA-1 digest of the server descriptor the authorities used (plain
    /// flavor only; compare with [`crate::descriptor::signed_digest`]).
    pub descriptor_digest: Option<[u8; 20]>,
    /// SHA-256 digest of its microdescriptor (microdesc flavor only).
    pub md_digest: Option<[u8; 32]>,
}

impl RelayEntry {
    /// Whether the relay has the flag called `name` (e.g. "Fast").
    pub fn has_flag(&self, name: &str) -> bool {
        self.flags.contains(&name)
    }
}

/// What a relay needs from a verified consensus.
#[derive(Debug, Clone)]
pub struct ConsensusSummary {
    /// The flavor it came from.
    pub flavor: ConsensusFlavor,
    /// `valid-after`.
    pub valid_after: SystemTime,
    /// `fresh-until`: fetch a new one some time after this.
    pub fresh_until: SystemTime,
    /// `valid-until`.
    pub valid_until: SystemTime,
    /// The `params` line.
    pub params: NetParams,
    /// `required-relay-protocols`.
    pub required_relay_protocols: String,
    /// `recommended-relay-protocols`.
    pub recommended_relay_protocols: String,
    /// The trusted authorities (v3 identities) that have a
    /// `directory-signature` on the document for which we had a certificate.
    /// Verification succeeded for more than half of the configured ones.
    pub signed_by: Vec<[u8; 20]>,
    /// All relays, sorted by RSA identity.
    pub relays: Vec<RelayEntry>,
}

impl ConsensusSummary {
    /// The entry for the relay with RSA identity `fp`, if listed.
    pub fn find_relay(&self, fp: &[u8; 20]) -> Option<&RelayEntry> {
        self.relays
            .binary_search_by(|r| r.rsa_identity.cmp(fp))
            .ok()
            .and_then(|i| self.relays.get(i))
    }

    /// Whether the consensus is within its official validity interval.
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.valid_after <= now && now <= self.valid_until
    }
}

/// Authority key certificates that passed their self-signature check, were
/// valid at the given time and belong to a trusted authority.
#[derive(Debug, Clone, Default)]
pub struct AuthorityCerts {
    certs: Vec<AuthCert>,
}

impl AuthorityCerts {
    /// Parse the concatenated certificates of `/tor/keys/all` (or
    /// `/tor/keys/fp/…`), keeping only the good ones for `trusted` v3
    /// identities. Unparseable or bad certificates are skipped (logged).
    pub fn parse(text: &str, trusted: &[[u8; 20]], now: SystemTime) -> Result<Self, DirError> {
        let iter = AuthCert::parse_multiple(text).map_err(|e| DirError::Parse {
            what: "authority certificates",
            why: e.to_string(),
        })?;
        let mut certs = Vec::new();
        for c in iter {
            let cert = match c
                .map_err(|e| e.to_string())
                .and_then(|u| u.check_signature().map_err(|e| e.to_string()))
                .and_then(|t| t.if_valid_at(&now).map_err(|e| e.to_string()))
            {
                Ok(cert) => cert,
                Err(why) => {
                    tracing::debug!("skipping authority certificate: {why}");
                    continue;
                }
            };
            let id = cert.id_fingerprint().as_bytes();
            if trusted.iter().any(|t| t[..] == *id) {
                certs.push(cert);
            } else {
                tracing::debug!(
                    "skipping certificate of untrusted authority {}",
                    hex::encode_upper(id)
                );
            }
        }
        Ok(AuthorityCerts { certs })
    }

    /// The first kept certificate's v3 identity, signing-key fingerprint
    /// and publication time.
    pub fn first_ids(&self) -> Option<([u8; 20], [u8; 20], SystemTime)> {
        let c = self.certs.first()?;
        let ids = c.key_ids();
        Some((
            id20(ids.id_fingerprint.as_bytes())?,
            id20(ids.sk_fingerprint.as_bytes())?,
            c.published(),
        ))
    }

    /// How many certificates were kept.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// True when no certificate was kept.
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// v3 identities of the kept certificates.
    pub fn identities(&self) -> Vec<[u8; 20]> {
        self.certs
            .iter()
            .filter_map(|c| id20(c.id_fingerprint().as_bytes()))
            .collect()
    }
}

fn id20(b: &[u8]) -> Option<[u8; 20]> {
    b.try_into().ok()
}

fn dedup_trusted(trusted: &[[u8; 20]]) -> Vec<[u8; 20]> {
    let mut t = trusted.to_vec();
    t.sort_unstable();
    t.dedup();
    t
}

/// Check the validity interval against `now` with C Tor's tolerances.
fn check_timely(
    valid_after: SystemTime,
    valid_until: SystemTime,
    now: SystemTime,
) -> Result<(), DirError> {
    if valid_until
        .checked_add(REASONABLY_LIVE_TIME)
        .is_some_and(|limit| now > limit)
    {
        return Err(DirError::NotTimely(format!(
            "expired: valid-until is {}s before now",
            now.duration_since(valid_until)
                .unwrap_or_default()
                .as_secs()
        )));
    }
    if now
        .checked_add(MAX_CLOCK_SKEW)
        .is_some_and(|limit| valid_after > limit)
    {
        return Err(DirError::NotTimely(format!(
            "valid-after is {}s in the future",
            valid_after
                .duration_since(now)
                .unwrap_or_default()
                .as_secs()
        )));
    }
    Ok(())
}

fn weight(w: &RelayWeight) -> (u32, bool) {
    match w {
        RelayWeight::Measured(b) => (*b, true),
        RelayWeight::Unmeasured(b) => (*b, false),
        // RelayWeight is non-exhaustive; treat anything new as unmeasured 0.
        #[allow(unreachable_patterns)]
        _ => (0, false),
    }
}

/// Build the summary from a verified consensus of either flavor.
macro_rules! summarize {
    ($c:expr, $flavor:expr, $signed_by:expr, $digest:expr, $md:expr) => {{
        let c = $c;
        let lt = c.lifetime();
        let mut relays: Vec<RelayEntry> = c
            .relays()
            .iter()
            .filter_map(|rs| {
                let rsa_identity = id20(rs.rsa_identity().as_bytes())?;
                let (bandwidth, bandwidth_measured) = weight(rs.weight());
                let mut flags: Vec<&'static str> =
                    rs.flags().iter().map(<&'static str>::from).collect();
                flags.sort_unstable();
                Some(RelayEntry {
                    nickname: rs.nickname().to_owned(),
                    rsa_identity,
                    address: rs.r.ip,
                    or_port: rs.r.or_port,
                    other_addresses: rs.addrs().skip(1).collect(),
                    flags,
                    bandwidth,
                    bandwidth_measured,
                    protocols: rs.protovers().to_string(),
                    descriptor_digest: $digest(rs),
                    md_digest: $md(rs),
                })
            })
            .collect();
        relays.sort_by(|a, b| a.rsa_identity.cmp(&b.rsa_identity));
        relays.dedup_by(|a, b| a.rsa_identity == b.rsa_identity);
        let status = c.relay_protocol_status();
        ConsensusSummary {
            flavor: $flavor,
            valid_after: lt.valid_after(),
            fresh_until: lt.fresh_until(),
            valid_until: lt.valid_until(),
            params: NetParams::from_pairs(c.params().iter().map(|(k, v)| (k.clone(), *v))),
            required_relay_protocols: status.required_protocols().to_string(),
            recommended_relay_protocols: status.recommended_protocols().to_string(),
            signed_by: $signed_by,
            relays,
        }
    }};
}

/// Parse `text` as a consensus of `flavor`, verify it and summarise it.
///
/// Verification: the consensus must carry valid signatures, made with the
/// keys certified in `certs`, from more than half of `trusted_v3idents`
/// (after removing duplicates). It must also be reasonably live at `now`
/// (not more than [`REASONABLY_LIVE_TIME`] past `valid-until`, not more
/// than [`MAX_CLOCK_SKEW`] before `valid-after`).
pub fn verify_consensus(
    text: &str,
    flavor: ConsensusFlavor,
    certs: &AuthorityCerts,
    trusted_v3idents: &[[u8; 20]],
    now: SystemTime,
) -> Result<ConsensusSummary, DirError> {
    let trusted = dedup_trusted(trusted_v3idents);
    if trusted.is_empty() {
        return Err(DirError::Signatures(
            "no trusted authorities configured".into(),
        ));
    }
    // Only certificates of trusted authorities may count (tor-netdoc's
    // check counts every certificate it is given as a real authority).
    let usable: Vec<AuthCert> = certs
        .certs
        .iter()
        .filter(|c| {
            trusted
                .iter()
                .any(|t| t[..] == *c.id_fingerprint().as_bytes())
        })
        .cloned()
        .collect();
    let parse_err = |e: tor_netdoc::Error| DirError::Parse {
        what: "consensus",
        why: e.to_string(),
    };
    let sig_err = |e: tor_netdoc::Error| DirError::Signatures(e.to_string());
    let signed_by = |sigs: &tor_netdoc::doc::netstatus::SignatureGroup| -> Vec<[u8; 20]> {
        let mut v: Vec<[u8; 20]> = sigs
            .signatures
            .iter()
            .filter_map(|s| id20(s.key_ids.id_fingerprint.as_bytes()))
            .filter(|id| {
                trusted.contains(id) && usable.iter().any(|c| c.id_fingerprint().as_bytes() == id)
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    match flavor {
        ConsensusFlavor::Microdesc => {
            let (_, _, unchecked) = MdConsensus::parse(text).map_err(parse_err)?;
            let unvalidated = unchecked.dangerously_assume_timely();
            let lt = unvalidated.peek_lifetime();
            check_timely(lt.valid_after(), lt.valid_until(), now)?;
            let signers = signed_by(&unvalidated.siggroup);
            let c = unvalidated
                .set_n_authorities(trusted.len())
                .check_signature(&usable)
                .map_err(sig_err)?;
            Ok(summarize!(
                c,
                flavor,
                signers,
                |_| None,
                |rs: &tor_netdoc::doc::netstatus::MdRouterStatus| Some(*rs.md_digest())
            ))
        }
        ConsensusFlavor::Plain => {
            let (_, _, unchecked) = PlainConsensus::parse(text).map_err(parse_err)?;
            let unvalidated = unchecked.dangerously_assume_timely();
            let lt = unvalidated.peek_lifetime();
            check_timely(lt.valid_after(), lt.valid_until(), now)?;
            let signers = signed_by(&unvalidated.siggroup);
            let c = unvalidated
                .set_n_authorities(trusted.len())
                .check_signature(&usable)
                .map_err(sig_err)?;
            Ok(summarize!(
                c,
                flavor,
                signers,
                |rs: &tor_netdoc::doc::netstatus::PlainRouterStatus| { Some(*rs.rd_digest()) },
                |_| None
            ))
        }
    }
}

/// What a client needs from a relay's microdescriptor to build a circuit
/// through it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrodescKeys {
    /// The microdescriptor's SHA-256 digest (as listed in the consensus).
    pub digest: [u8; 32],
    /// ntor onion key.
    pub ntor_key: [u8; 32],
    /// Ed25519 identity.
    pub ed_id: [u8; 32],
}

/// Parse concatenated microdescriptors (a `/tor/micro/d/...` answer);
/// malformed ones are skipped.
pub fn parse_microdescs(text: &str) -> Vec<MicrodescKeys> {
    use tor_netdoc::doc::microdesc::MicrodescReader;
    use tor_netdoc::AllowAnnotations;
    let Ok(reader) = MicrodescReader::new(text, &AllowAnnotations::AnnotationsNotAllowed) else {
        return Vec::new();
    };
    reader
        .take(MAX_MICRODESCS)
        .filter_map(Result::ok)
        .map(|a| {
            let md = a.into_microdesc();
            MicrodescKeys {
                digest: md.sha256,
                ntor_key: md.ntor_key().to_bytes(),
                ed_id: md.ed25519_id().as_bytes().try_into().unwrap_or([0; 32]),
            }
        })
        .collect()
}

/// Most microdescriptors fetched or parsed at once.
pub const MAX_MICRODESCS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_defaults_and_clamping() {
        let p = NetParams::default();
        assert_eq!(p.circwindow(), 1000);
        assert_eq!(p.onion_key_rotation_days(), 28);
        assert_eq!(p.onion_key_rotation(), Duration::from_secs(28 * 86400));
        assert_eq!(p.onion_key_grace_period_days(), 7);
        assert!(!p.allow_nonearly_extend());
        assert!(p.refuse_unknown_exits());
        assert!(p.publish_dummy_tap_key());
        assert_eq!(p.cc_alg(), 2);
        assert_eq!(p.cc_sendme_inc(), 31);
        assert_eq!(p.cc_cwnd_init(), 124);
        assert_eq!(p.sendme_emit_min_version(), 1);
        assert_eq!(p.sendme_accept_min_version(), 0);
        assert_eq!((p.nf_ito_low(), p.nf_ito_high()), (1500, 9500));
        assert!(!p.nf_pad_relays());

        let p = NetParams::parse_line(
            "circwindow=50 onion-key-rotation-days=200 onion-key-grace-period-days=3 \
             AllowNonearlyExtend=1 refuseunknownexits=0 cc_alg=1 cc_sendme_inc=999 \
             bogus =3 x= y=abc z=99999999999 nf_ito_low=10000 nf_ito_high=5",
        );
        assert_eq!(p.circwindow(), 100);
        assert_eq!(p.onion_key_rotation_days(), 90);
        assert_eq!(p.onion_key_grace_period_days(), 3);
        assert!(p.allow_nonearly_extend());
        assert!(!p.refuse_unknown_exits());
        assert_eq!(p.cc_alg(), 2, "unsupported algorithms fall back to Vegas");
        assert_eq!(p.cc_sendme_inc(), 254);
        assert_eq!(p.get("y"), None);
        assert_eq!(p.get("z"), None);
        assert_eq!(p.nf_ito_high(), 10000, "high is at least low");
        let p = NetParams::parse_line("onion-key-rotation-days=2 onion-key-grace-period-days=9");
        assert_eq!(p.onion_key_grace_period_days(), 2);
        let p = NetParams::parse_line("onion-key-rotation-days=-5");
        assert_eq!(p.onion_key_rotation_days(), 1);
        assert_eq!(p.onion_key_grace_period_days(), 1);
    }

    /// Microdesc=3: a microdescriptor whose `onion-key` has no TAP key
    /// (what 0.4.9 authorities make from a descriptor without one) gives
    /// its ntor key and Ed25519 identity; the cache splits it at its
    /// `onion-key` line like any other.
    #[test]
    fn microdescriptors_without_a_tap_key() {
        use base64::Engine as _;
        let b64 = |b: [u8; 32]| base64::engine::general_purpose::STANDARD_NO_PAD.encode(b);
        let md = |n: u8| {
            format!(
                "onion-key\nntor-onion-key {}\nid ed25519 {}\n",
                b64([n; 32]),
                b64([n + 1; 32])
            )
        };
        let text = format!("{}{}", md(1), md(7));
        let keys = parse_microdescs(&text);
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[1].ntor_key, keys[1].ed_id), ([7; 32], [8; 32]));
        let split = crate::cache::split_microdescs(&text);
        assert_eq!(split.len(), 2);
        assert_eq!(split[0].0, keys[0].digest);
        assert_eq!(split[1].1, md(7));
    }
}
