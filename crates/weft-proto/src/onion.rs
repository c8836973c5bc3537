//! The onion-service cells a relay handles as introduction point and
//! rendezvous point (v3 only): their formats, the checks on them, and the
//! INTRODUCE2 rate limit of proposal 305. Sans-IO; the circuit state they
//! change is the keyed half's [`crate::circuit::Purpose`], and where the two
//! circuits of an introduction or a rendezvous meet is weft-relay's affair.
//!
//! Every parser takes an untrusted slice, checks lengths once and returns a
//! typed error; none can panic. [rend-spec-v3 §3.1–§3.3, §4; C
//! hs_intropoint.c, rendmid.c, hs_dos.c; trunnel hs/cell_*.trunnel]

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use sha3::{Digest, Sha3_256};
use subtle::ConstantTimeEq;

/// Onion-service relay commands. [tor-spec §6.1]
#[allow(missing_docs)]
pub mod hs_cmd {
    pub const ESTABLISH_INTRO: u8 = 32;
    pub const ESTABLISH_RENDEZVOUS: u8 = 33;
    pub const INTRODUCE1: u8 = 34;
    pub const INTRODUCE2: u8 = 35;
    pub const RENDEZVOUS1: u8 = 36;
    pub const RENDEZVOUS2: u8 = 37;
    pub const INTRO_ESTABLISHED: u8 = 38;
    pub const RENDEZVOUS_ESTABLISHED: u8 = 39;
    pub const INTRODUCE_ACK: u8 = 40;
}

/// INTRODUCE_ACK status codes. [rend-spec-v3 §3.2.2]
#[allow(missing_docs)]
pub mod ack_status {
    pub const SUCCESS: u16 = 0;
    pub const UNKNOWN_ID: u16 = 1;
    pub const BAD_FORMAT: u16 = 2;
    pub const CANT_RELAY: u16 = 3;
}

/// Length of a rendezvous cookie.
pub const COOKIE_LEN: usize = 20;
/// Longest INTRODUCE1 an introduction point relays: what fits in a v1
/// (CGO-format) relay cell without a stream ID, so that the client cannot
/// learn which cell format the service's circuit uses. [C hs_intropoint.c
/// handle_introduce1()]
pub const MAX_INTRODUCE1_LEN: usize = 509 - 19;
/// What the service signs ESTABLISH_INTRO with (before the cell).
pub const ESTABLISH_INTRO_SIG_PREFIX: &[u8] = b"Tor establish-intro cell v1";
/// AUTH_KEY_TYPE of an Ed25519 authentication key.
pub const AUTH_KEY_ED25519: u8 = 2;
/// Extension type of the DoS parameters. [prop 305]
const EXT_DOS: u8 = 1;
/// DoS parameter types.
const DOS_RATE: u8 = 1;
const DOS_BURST: u8 = 2;
/// Largest DoS rate/burst accepted (`HS_CONFIG_V3_DOS_DEFENSE_*_MAX`).
const DOS_MAX: u64 = i32::MAX as u64;

/// Why an onion-service cell was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OnionError {
    /// Too short for its fields.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A field has a value the cell may not have.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// The signature does not verify under the cell's auth key.
    #[error("ESTABLISH_INTRO signature not as expected")]
    BadSignature,
    /// The MAC does not match the circuit's handshake.
    #[error("ESTABLISH_INTRO handshake_auth not as expected")]
    BadMac,
}

/// A little reader over an untrusted slice.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], OnionError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(OnionError::Truncated(self.what))?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(OnionError::Truncated(self.what))?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, OnionError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, OnionError> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    /// An extension list: N, then N × {type, len, body}.
    fn extensions(&mut self) -> Result<Vec<(u8, &'a [u8])>, OnionError> {
        let n = self.u8()?;
        let mut v = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let t = self.u8()?;
            let len = self.u8()?;
            v.push((t, self.take(usize::from(len))?));
        }
        Ok(v)
    }
}

/// What the DoS extension of an ESTABLISH_INTRO asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DosRequest {
    /// Rate-limit INTRODUCE2 to `rate`/s with bursts of `burst`.
    Limit {
        /// Cells per second.
        rate: u32,
        /// Bucket size.
        burst: u32,
    },
    /// No limit on this circuit (zero or unusable values).
    Off,
}

/// A parsed ESTABLISH_INTRO (v3, Ed25519 auth key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EstablishIntro {
    /// The service's authentication key for this introduction point.
    pub auth_key: [u8; 32],
    /// The DoS extension, when present and well-formed (the last one wins).
    pub dos: Option<DosRequest>,
    mac: [u8; 32],
    sig: [u8; 64],
    /// Bytes covered by the MAC (the cell up to it).
    mac_end: usize,
    /// Bytes covered by the signature (the cell up to SIG_LEN).
    sig_end: usize,
}

/// Parse an ESTABLISH_INTRO body. Only AUTH_KEY_TYPE 2 (Ed25519) is
/// accepted: the legacy types 0 and 1 were v2 onion services, gone from
/// C Tor 0.4.9. Unknown extensions are skipped; a malformed DoS extension
/// is ignored (the consensus defaults stay), as C Tor does.
pub fn parse_establish_intro(b: &[u8]) -> Result<EstablishIntro, OnionError> {
    let mut r = Reader {
        b,
        pos: 0,
        what: "ESTABLISH_INTRO",
    };
    match r.u8()? {
        AUTH_KEY_ED25519 => {}
        0 | 1 => return Err(OnionError::Invalid("legacy (v2) ESTABLISH_INTRO")),
        _ => return Err(OnionError::Invalid("AUTH_KEY_TYPE")),
    }
    let key_len = usize::from(r.u16()?);
    let key = r.take(key_len)?;
    let auth_key: [u8; 32] = key
        .try_into()
        .map_err(|_| OnionError::Invalid("auth key length"))?;
    let mut dos = None;
    for (t, body) in r.extensions()? {
        if t == EXT_DOS {
            if let Some(d) = parse_dos(body) {
                dos = Some(d);
            }
        }
    }
    let mac_end = r.pos;
    let mac: [u8; 32] = r
        .take(32)?
        .try_into()
        .map_err(|_| OnionError::Truncated("ESTABLISH_INTRO"))?;
    let sig_end = r.pos;
    let sig_len = usize::from(r.u16()?);
    let sig = r.take(sig_len)?;
    let sig: [u8; 64] = sig
        .try_into()
        .map_err(|_| OnionError::Invalid("signature length"))?;
    Ok(EstablishIntro {
        auth_key,
        dos,
        mac,
        sig,
        mac_end,
        sig_end,
    })
}

/// The DoS extension's parameters; None if it is malformed or names an
/// unknown parameter (then nothing changes).
fn parse_dos(b: &[u8]) -> Option<DosRequest> {
    let mut r = Reader {
        b,
        pos: 0,
        what: "DoS extension",
    };
    let n = r.u8().ok()?;
    let (mut rate, mut burst) = (0u64, 0u64);
    for _ in 0..n {
        let t = r.u8().ok()?;
        let v = r.take(8).ok()?;
        let v = u64::from_be_bytes(v.try_into().ok()?);
        match t {
            DOS_RATE => rate = v,
            DOS_BURST => burst = v,
            _ => return None,
        }
    }
    if rate == 0 || burst == 0 || rate > DOS_MAX || burst > DOS_MAX || burst < rate {
        return Some(DosRequest::Off);
    }
    Some(DosRequest::Limit {
        rate: rate as u32,
        burst: burst as u32,
    })
}

/// Tor's `crypto_mac_sha3_256`: SHA3-256(len(key) as u64 | key | msg).
pub fn mac_sha3_256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut d = Sha3_256::new();
    d.update((key.len() as u64).to_be_bytes());
    d.update(key);
    d.update(msg);
    d.finalize().into()
}

/// Check an ESTABLISH_INTRO (`body` is the cell it was parsed from): the
/// signature by its auth key over the prefix and the cell, and the MAC
/// keyed with the circuit's nonce KH from its CREATE handshake.
pub fn verify_establish_intro(
    body: &[u8],
    c: &EstablishIntro,
    circuit_nonce: &[u8; 20],
) -> Result<(), OnionError> {
    let signed = body
        .get(..c.sig_end)
        .ok_or(OnionError::Truncated("ESTABLISH_INTRO"))?;
    let maced = body
        .get(..c.mac_end)
        .ok_or(OnionError::Truncated("ESTABLISH_INTRO"))?;
    let key = VerifyingKey::from_bytes(&c.auth_key).map_err(|_| OnionError::BadSignature)?;
    let mut msg = Vec::with_capacity(ESTABLISH_INTRO_SIG_PREFIX.len() + signed.len());
    msg.extend_from_slice(ESTABLISH_INTRO_SIG_PREFIX);
    msg.extend_from_slice(signed);
    key.verify(&msg, &Signature::from_bytes(&c.sig))
        .map_err(|_| OnionError::BadSignature)?;
    let mac = mac_sha3_256(circuit_nonce, maced);
    if !bool::from(mac.ct_eq(&c.mac)) {
        return Err(OnionError::BadMac);
    }
    Ok(())
}

/// The INTRO_ESTABLISHED body: an empty extension list.
pub const INTRO_ESTABLISHED_BODY: [u8; 1] = [0];

/// An INTRODUCE_ACK body: the status and an empty extension list.
pub fn introduce_ack_body(status: u16) -> [u8; 3] {
    let s = status.to_be_bytes();
    [s[0], s[1], 0]
}

/// The auth key an INTRODUCE1 names, if the cell is one an introduction
/// point relays; `Err` is answered with INTRODUCE_ACK BAD_FORMAT.
/// [C hs_intropoint.c handle_introduce1(), validate_introduce1_parsed_cell()]
pub fn parse_introduce1(b: &[u8]) -> Result<[u8; 32], OnionError> {
    if b.len() > MAX_INTRODUCE1_LEN {
        return Err(OnionError::Invalid("over-long INTRODUCE1"));
    }
    let mut r = Reader {
        b,
        pos: 0,
        what: "INTRODUCE1",
    };
    let legacy = r.take(20)?;
    let key_type = r.u8()?;
    if key_type > AUTH_KEY_ED25519 {
        return Err(OnionError::Invalid("AUTH_KEY_TYPE"));
    }
    let key_len = usize::from(r.u16()?);
    let key = r.take(key_len)?;
    r.extensions()?;
    let encrypted = &b[r.pos..];
    if legacy.iter().any(|&x| x != 0) {
        return Err(OnionError::Invalid("legacy (v2) INTRODUCE1"));
    }
    if key_type != AUTH_KEY_ED25519 {
        return Err(OnionError::Invalid("auth key type"));
    }
    let key: [u8; 32] = key
        .try_into()
        .map_err(|_| OnionError::Invalid("auth key length"))?;
    if encrypted.is_empty() {
        return Err(OnionError::Invalid("empty encrypted section"));
    }
    Ok(key)
}

/// The INTRODUCE2 rate limit of one introduction circuit: C Tor's
/// `token_bucket_ctr` refilled by whole seconds. [C hs_dos.c]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intro2Bucket {
    enabled: bool,
    rate: u32,
    burst: u32,
    tokens: u32,
    last_s: u64,
}

impl Intro2Bucket {
    /// A full bucket of `burst` tokens refilled at `rate` per second, or no
    /// limit when `enabled` is false (the consensus default).
    pub fn new(enabled: bool, rate: u32, burst: u32, now_s: u64) -> Self {
        Intro2Bucket {
            enabled,
            rate,
            burst,
            tokens: burst,
            last_s: now_s,
        }
    }

    /// Apply the circuit's own DoS extension.
    pub fn apply(&mut self, req: DosRequest, now_s: u64) {
        *self = match req {
            DosRequest::Limit { rate, burst } => Intro2Bucket::new(true, rate, burst, now_s),
            DosRequest::Off => Intro2Bucket {
                enabled: false,
                ..*self
            },
        };
    }

    /// May one more INTRODUCE2 go out now? (Takes a token when limited.)
    pub fn can_send(&mut self, now_s: u64) -> bool {
        if !self.enabled {
            return true;
        }
        let elapsed = now_s.saturating_sub(self.last_s);
        if elapsed > 0 {
            let add = elapsed.saturating_mul(u64::from(self.rate));
            self.tokens = (u64::from(self.tokens) + add).min(u64::from(self.burst)) as u32;
            self.last_s = now_s;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
        }
        self.tokens > 0
    }
}

#[cfg(test)]
mod tests;
