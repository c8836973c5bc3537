//! The v3 link handshake (VERSIONS, CERTS, AUTH_CHALLENGE, AUTHENTICATE,
//! NETINFO) for link protocols 4 and 5, as responder and as initiator,
//! sans-IO. [tor-spec §4; protocol-notes §2]
//!
//! The I/O layer feeds every framed cell received before the channel is open
//! to [`Handshake::handle`], writes the cells it returns, and switches to
//! circuit handling once it reports [`Opened`]. TLS facts (the peer's
//! certificate, RFC 5705 keying material) come in through arguments.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha1::Digest as _;
use sha2::Sha256;
use tor_cert::{CertType, CertifiedKey, Ed25519Cert};
use tor_checkable::{ExternallySigned, SelfSigned, Timebound};
use tor_llcrypto::pk::ed25519;

use crate::cell::{cmd, encode_fixed, encode_var, Frame};

mod cells;

use self::cells::{certs_body, parse_auth_challenge, push_addr};
pub use self::cells::{parse_certs, parse_netinfo, pick_version, versions_cell, Netinfo};

/// Link protocol versions weft speaks.
pub const SUPPORTED_LINK_VERSIONS: [u16; 2] = [4, 5];
/// The only AUTHENTICATE method 0.4.9 uses: Ed25519-SHA256-RFC5705.
pub const AUTH_METHOD_ED25519: u16 = 3;
/// RFC 5705 exporter label for AUTH0003. [tor-spec §4.4.2]
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER FOR TOR TLS CLIENT BINDING AUTH0003";
/// Length of the AUTH0003 authenticator.
const AUTH_LEN: usize = 8 + 32 * 8 + 24 + 64;
/// Length of the part of the authenticator the responder recomputes.
const AUTH_CHECKED_LEN: usize = 8 + 32 * 8;

/// Our side's link-authentication material: an immutable snapshot, replaced
/// when the TLS context rotates (a connection keeps the one it started with).
pub struct LinkIdentity {
    /// DER (PKCS#1) of our RSA identity public key.
    pub rsa_id_der: Vec<u8>,
    /// Our Ed25519 master identity.
    pub ed_id: [u8; 32],
    /// CERTS type 2: self-signed RSA identity X.509.
    pub cert_rsa_id: Vec<u8>,
    /// CERTS type 4: identity → signing.
    pub cert_signing: Vec<u8>,
    /// CERTS type 5: signing → SHA-256 of our TLS certificate.
    pub cert_tls_link: Vec<u8>,
    /// CERTS type 6: signing → link authentication key.
    pub cert_auth: Vec<u8>,
    /// CERTS type 7: RSA → Ed25519 cross-certificate.
    pub cert_crosscert: Vec<u8>,
    /// The link authentication key (signs AUTHENTICATE).
    pub auth_key: ed25519::Keypair,
    /// DER of our TLS certificate on connections that use this snapshot.
    pub tls_cert_der: Vec<u8>,
}

impl LinkIdentity {
    /// The snapshot for one link-key generation of `keys`.
    pub fn from_keys(
        keys: &weft_crypto::keys::RelayKeys,
        link: &weft_crypto::keys::LinkKeys,
    ) -> Self {
        LinkIdentity {
            rsa_id_der: keys.rsa_id_der.clone(),
            ed_id: keys.ed_id,
            cert_rsa_id: link.id_cert_der.clone(),
            cert_signing: link.cert_signing.clone(),
            cert_tls_link: link.cert_tls_link.clone(),
            cert_auth: link.cert_auth.clone(),
            cert_crosscert: link.cert_crosscert.clone(),
            auth_key: ed25519::Keypair::from_bytes(link.auth_key.as_bytes()),
            tls_cert_der: link.tls_cert_der.clone(),
        }
    }
}

/// Who the peer turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerKind {
    /// An unauthenticated peer (a client, or a relay acting as one).
    Client,
    /// An authenticated relay.
    Relay {
        /// SHA-1 of its RSA identity key.
        rsa_fp: [u8; 20],
        /// Its Ed25519 identity.
        ed_id: [u8; 32],
    },
}

/// The result of a completed handshake.
#[derive(Debug, Clone)]
pub struct Opened {
    /// Negotiated link protocol.
    pub link_version: u16,
    /// Who the peer is.
    pub peer: PeerKind,
    /// The addresses the peer says it has (NETINFO my_addrs).
    pub peer_addrs: Vec<IpAddr>,
    /// Our address as the peer sees it (NETINFO other_addr).
    pub our_addr_seen: Option<IpAddr>,
    /// One of the peer's addresses equals the TCP peer address.
    pub canonical: bool,
    /// The peer's NETINFO timestamp (0 for clients).
    pub peer_time: u32,
}

/// Why a handshake failed; every variant closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A cell arrived that is not allowed at this point.
    #[error("unexpected {cell} cell during link handshake ({state})")]
    Unexpected {
        /// Cell name.
        cell: &'static str,
        /// Handshake state.
        state: &'static str,
    },
    /// VERSIONS was malformed or had no version in common.
    #[error("bad VERSIONS cell: {0}")]
    Versions(&'static str),
    /// CERTS was malformed or did not verify.
    #[error("bad CERTS cell: {0}")]
    Certs(String),
    /// AUTH_CHALLENGE was malformed or offered no method we support.
    #[error("bad AUTH_CHALLENGE cell: {0}")]
    AuthChallenge(&'static str),
    /// AUTHENTICATE was malformed or did not verify.
    #[error("bad AUTHENTICATE cell: {0}")]
    Authenticate(&'static str),
    /// NETINFO was malformed.
    #[error("bad NETINFO cell: {0}")]
    Netinfo(&'static str),
    /// The peer proved an identity other than the one we wanted.
    #[error("peer identity {got} is not the expected {want}")]
    WrongIdentity {
        /// What we expected (hex).
        want: String,
        /// What it proved (hex).
        got: String,
    },
    /// The TLS layer could not give us what we needed.
    #[error("TLS: {0}")]
    Tls(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitVersions,
    /// Responder: waiting for the initiator's CERTS/AUTHENTICATE/NETINFO.
    AwaitInitiator,
    /// Initiator: waiting for the responder's CERTS, AUTH_CHALLENGE, NETINFO.
    AwaitResponder,
    Open,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::AwaitVersions => "awaiting VERSIONS",
            State::AwaitInitiator => "awaiting initiator authentication",
            State::AwaitResponder => "awaiting responder certificates",
            State::Open => "open",
        }
    }
}

/// Identities proved by a peer's CERTS cell.
#[derive(Debug, Clone)]
struct PeerCerts {
    rsa_der: Vec<u8>,
    rsa_fp: [u8; 20],
    ed_id: [u8; 32],
    /// Type-6 link authentication key (responder side only).
    auth_key: Option<ed25519::PublicKey>,
}

/// One link handshake, as responder or initiator.
pub struct Handshake {
    initiator: bool,
    expected_rsa: Option<[u8; 20]>,
    expected_ed: Option<[u8; 32]>,
    state: State,
    link_version: u16,
    ours: Arc<LinkIdentity>,
    /// Responder: SLOG (what we sent); initiator: CLOG (what we sent).
    sent_log: Sha256,
    /// Responder: CLOG (what the initiator sent); initiator: SLOG.
    recv_log: Sha256,
    recv_log_done: bool,
    peer_certs: Option<PeerCerts>,
    got_challenge: bool,
    authenticated: bool,
    peer_tls_cert_der: Option<Vec<u8>>,
    peer_addr: IpAddr,
    our_addrs: Vec<IpAddr>,
}

fn sha256(d: &[u8]) -> [u8; 32] {
    Sha256::digest(d).into()
}

fn sha1(d: &[u8]) -> [u8; 20] {
    sha1::Sha1::digest(d).into()
}

impl Handshake {
    /// A handshake where the peer connected to us.
    pub fn new_responder(
        ours: Arc<LinkIdentity>,
        peer_addr: IpAddr,
        our_addrs: Vec<IpAddr>,
    ) -> Self {
        Handshake {
            initiator: false,
            expected_rsa: None,
            expected_ed: None,
            state: State::AwaitVersions,
            link_version: 0,
            ours,
            sent_log: Sha256::new(),
            recv_log: Sha256::new(),
            recv_log_done: false,
            peer_certs: None,
            got_challenge: false,
            authenticated: false,
            peer_tls_cert_der: None,
            peer_addr,
            our_addrs,
        }
    }

    /// A handshake where we connected to a relay expected to have these
    /// identities. Returns the handshake and the VERSIONS cell to send first.
    pub fn new_initiator(
        ours: Arc<LinkIdentity>,
        peer_addr: IpAddr,
        our_addrs: Vec<IpAddr>,
        expected_rsa: Option<[u8; 20]>,
        expected_ed: Option<[u8; 32]>,
        peer_tls_cert_der: Vec<u8>,
    ) -> (Self, Vec<u8>) {
        let mut h = Handshake {
            initiator: true,
            expected_rsa,
            expected_ed,
            state: State::AwaitVersions,
            link_version: 0,
            ours,
            sent_log: Sha256::new(),
            recv_log: Sha256::new(),
            recv_log_done: false,
            peer_certs: None,
            got_challenge: false,
            authenticated: false,
            peer_tls_cert_der: Some(peer_tls_cert_der),
            peer_addr,
            our_addrs,
        };
        let v = versions_cell();
        h.sent_log.update(&v);
        (h, v)
    }

    /// Width of circuit IDs for framing the next cell.
    pub fn circ_id_len(&self) -> usize {
        if self.link_version >= 4 {
            4
        } else {
            2
        }
    }

    /// Handle one framed cell. Cells to send are appended to `out`. `exporter`
    /// returns 32 bytes of RFC 5705 keying material for [`EXPORTER_LABEL`]
    /// with the given context. Returns `Some(Opened)` when the channel opens.
    pub fn handle(
        &mut self,
        frame: Frame<'_>,
        now: SystemTime,
        exporter: &mut dyn FnMut(&[u8]) -> Option<[u8; 32]>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<Option<Opened>, LinkError> {
        let unexpected = |s: State| LinkError::Unexpected {
            cell: crate::cell::cmd_name(frame.command),
            state: s.name(),
        };
        // [tor-spec §4.1; C channeltls.c command_allowed_before_handshake()]
        match (self.state, frame.command) {
            (State::Open, _) => Err(unexpected(self.state)),
            (State::AwaitVersions, cmd::VERSIONS) => {
                self.log_received(frame.raw);
                self.link_version = pick_version(frame.body)?;
                if self.initiator {
                    self.state = State::AwaitResponder;
                } else {
                    self.send_responder_flight(now, out);
                    self.state = State::AwaitInitiator;
                }
                Ok(None)
            }
            (_, cmd::VPADDING) | (_, cmd::AUTHORIZE) => {
                self.log_received(frame.raw);
                Ok(None)
            }
            (State::AwaitVersions, _) => Err(unexpected(self.state)),
            (_, cmd::VERSIONS) => Err(unexpected(self.state)),
            (_, cmd::CERTS) => {
                if self.peer_certs.is_some() {
                    return Err(LinkError::Certs("second CERTS cell".into()));
                }
                if frame.circ_id != 0 {
                    return Err(LinkError::Certs("nonzero circuit id".into()));
                }
                self.log_received(frame.raw);
                let certs = self.verify_certs(frame.body, now)?;
                if self.initiator {
                    if let Some(want) = self.expected_rsa {
                        if want != certs.rsa_fp {
                            return Err(LinkError::WrongIdentity {
                                want: hex::encode_upper(want),
                                got: hex::encode_upper(certs.rsa_fp),
                            });
                        }
                    }
                    if let Some(want) = self.expected_ed {
                        if want != certs.ed_id {
                            return Err(LinkError::WrongIdentity {
                                want: hex::encode(want),
                                got: hex::encode(certs.ed_id),
                            });
                        }
                    }
                }
                self.peer_certs = Some(certs);
                Ok(None)
            }
            (State::AwaitResponder, cmd::AUTH_CHALLENGE) => {
                if self.got_challenge || self.peer_certs.is_none() {
                    return Err(LinkError::AuthChallenge("duplicate or before CERTS"));
                }
                self.log_received(frame.raw);
                self.recv_log_done = true;
                parse_auth_challenge(frame.body)?;
                self.got_challenge = true;
                self.send_initiator_auth(now, exporter, out)?;
                Ok(None)
            }
            (State::AwaitInitiator, cmd::AUTHENTICATE) => {
                if self.authenticated {
                    return Err(LinkError::Authenticate("second AUTHENTICATE"));
                }
                self.recv_log_done = true;
                self.verify_authenticate(frame.body, exporter)?;
                self.authenticated = true;
                Ok(None)
            }
            (_, cmd::NETINFO) => {
                let ni = parse_netinfo(frame.body)?;
                if self.initiator {
                    let Some(certs) = &self.peer_certs else {
                        return Err(LinkError::Netinfo("NETINFO before CERTS"));
                    };
                    if !self.got_challenge {
                        // The responder did not ask us to authenticate: we
                        // still tell it our addresses.
                        out.push(self.netinfo_cell(now, false));
                    }
                    let peer = PeerKind::Relay {
                        rsa_fp: certs.rsa_fp,
                        ed_id: certs.ed_id,
                    };
                    Ok(Some(self.open(peer, ni)))
                } else {
                    if self.peer_certs.is_some() && !self.authenticated {
                        return Err(LinkError::Netinfo("CERTS without AUTHENTICATE"));
                    }
                    let peer = match (&self.peer_certs, self.authenticated) {
                        (Some(c), true) => PeerKind::Relay {
                            rsa_fp: c.rsa_fp,
                            ed_id: c.ed_id,
                        },
                        _ => PeerKind::Client,
                    };
                    Ok(Some(self.open(peer, ni)))
                }
            }
            _ => Err(unexpected(self.state)),
        }
    }

    fn open(&mut self, peer: PeerKind, ni: Netinfo) -> Opened {
        self.state = State::Open;
        let canonical = ni.my_addrs.contains(&self.peer_addr);
        Opened {
            link_version: self.link_version,
            peer,
            peer_addrs: ni.my_addrs,
            our_addr_seen: ni.other_addr,
            canonical,
            peer_time: ni.time,
        }
    }

    fn log_received(&mut self, raw: &[u8]) {
        if !self.recv_log_done {
            self.recv_log.update(raw);
        }
    }

    fn push_logged(&mut self, cell: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        self.sent_log.update(&cell);
        out.push(cell);
    }

    /// VERSIONS, CERTS (2, 4, 5, 7), AUTH_CHALLENGE, NETINFO in one flight.
    /// [tor-spec §4; protocol-notes §2.3]
    fn send_responder_flight(&mut self, now: SystemTime, out: &mut Vec<Vec<u8>>) {
        self.push_logged(versions_cell(), out);
        let o = self.ours.clone();
        let certs = certs_body(&[
            (2, &o.cert_rsa_id),
            (4, &o.cert_signing),
            (5, &o.cert_tls_link),
            (7, &o.cert_crosscert),
        ]);
        self.push_logged(encode_var(0, 4, cmd::CERTS, &certs), out);
        let mut chal = Vec::with_capacity(36);
        let challenge: [u8; 32] = rand::random();
        chal.extend_from_slice(&challenge);
        chal.extend_from_slice(&1u16.to_be_bytes());
        chal.extend_from_slice(&AUTH_METHOD_ED25519.to_be_bytes());
        self.push_logged(encode_var(0, 4, cmd::AUTH_CHALLENGE, &chal), out);
        out.push(self.netinfo_cell(now, true));
    }

    fn netinfo_cell(&self, now: SystemTime, relay: bool) -> Vec<u8> {
        let t = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&t.to_be_bytes());
        push_addr(&mut b, self.peer_addr);
        if relay {
            b.push(self.our_addrs.len().min(8) as u8);
            for a in self.our_addrs.iter().take(8) {
                push_addr(&mut b, *a);
            }
        } else {
            b.push(0);
        }
        encode_fixed(0, 4, cmd::NETINFO, &b)
    }

    /// Initiator: CERTS (2, 4, 6, 7), AUTHENTICATE, NETINFO, in that order.
    fn send_initiator_auth(
        &mut self,
        now: SystemTime,
        exporter: &mut dyn FnMut(&[u8]) -> Option<[u8; 32]>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), LinkError> {
        let o = self.ours.clone();
        let certs = certs_body(&[
            (2, &o.cert_rsa_id),
            (4, &o.cert_signing),
            (6, &o.cert_auth),
            (7, &o.cert_crosscert),
        ]);
        self.push_logged(encode_var(0, 4, cmd::CERTS, &certs), out);
        let peer = self
            .peer_certs
            .as_ref()
            .ok_or(LinkError::AuthChallenge("no CERTS"))?;
        let scert = sha256(
            self.peer_tls_cert_der
                .as_deref()
                .ok_or(LinkError::Tls("no peer certificate"))?,
        );
        let cid = sha256(&o.rsa_id_der);
        let tlssecrets = exporter(&cid).ok_or(LinkError::Tls("exporter failed"))?;
        let slog: [u8; 32] = self.recv_log.clone().finalize().into();
        let clog: [u8; 32] = self.sent_log.clone().finalize().into();
        let mut a = Vec::with_capacity(AUTH_LEN);
        a.extend_from_slice(b"AUTH0003");
        a.extend_from_slice(&cid);
        a.extend_from_slice(&sha256(&peer.rsa_der));
        a.extend_from_slice(&o.ed_id);
        a.extend_from_slice(&peer.ed_id);
        a.extend_from_slice(&slog);
        a.extend_from_slice(&clog);
        a.extend_from_slice(&scert);
        a.extend_from_slice(&tlssecrets);
        let rand: [u8; 24] = rand::random();
        a.extend_from_slice(&rand);
        let sig = o.auth_key.sign(&a);
        a.extend_from_slice(&sig.to_bytes());
        let mut body = Vec::with_capacity(4 + AUTH_LEN);
        body.extend_from_slice(&AUTH_METHOD_ED25519.to_be_bytes());
        body.extend_from_slice(&(AUTH_LEN as u16).to_be_bytes());
        body.extend_from_slice(&a);
        out.push(encode_var(0, 4, cmd::AUTHENTICATE, &body));
        out.push(self.netinfo_cell(now, true));
        self.authenticated = true;
        Ok(())
    }

    /// Responder: check AUTHENTICATE. [tor-spec §4.4.2; C channeltls.c
    /// channel_tls_process_authenticate_cell()]
    fn verify_authenticate(
        &mut self,
        body: &[u8],
        exporter: &mut dyn FnMut(&[u8]) -> Option<[u8; 32]>,
    ) -> Result<(), LinkError> {
        let peer = self
            .peer_certs
            .as_ref()
            .ok_or(LinkError::Authenticate("before CERTS"))?;
        let auth_key = peer
            .auth_key
            .ok_or(LinkError::Authenticate("no type-6 certificate"))?;
        if body.len() < 4 {
            return Err(LinkError::Authenticate("truncated"));
        }
        let method = u16::from_be_bytes([body[0], body[1]]);
        let len = usize::from(u16::from_be_bytes([body[2], body[3]]));
        if method != AUTH_METHOD_ED25519 {
            return Err(LinkError::Authenticate("unsupported method"));
        }
        if len != AUTH_LEN || body.len() < 4 + len {
            return Err(LinkError::Authenticate("wrong length"));
        }
        let a = &body[4..4 + len];
        let cid = sha256(&peer.rsa_der);
        let tlssecrets = exporter(&cid).ok_or(LinkError::Tls("exporter failed"))?;
        let slog: [u8; 32] = self.sent_log.clone().finalize().into();
        let clog: [u8; 32] = self.recv_log.clone().finalize().into();
        let mut expect = Vec::with_capacity(AUTH_CHECKED_LEN);
        expect.extend_from_slice(b"AUTH0003");
        expect.extend_from_slice(&cid);
        expect.extend_from_slice(&sha256(&self.ours.rsa_id_der));
        expect.extend_from_slice(&peer.ed_id);
        expect.extend_from_slice(&self.ours.ed_id);
        expect.extend_from_slice(&slog);
        expect.extend_from_slice(&clog);
        expect.extend_from_slice(&sha256(&self.ours.tls_cert_der));
        expect.extend_from_slice(&tlssecrets);
        if a[..AUTH_CHECKED_LEN] != expect[..] {
            return Err(LinkError::Authenticate("authenticator fields do not match"));
        }
        let sig_bytes: [u8; 64] = a[AUTH_LEN - 64..]
            .try_into()
            .map_err(|_| LinkError::Authenticate("bad signature length"))?;
        let sig = ed25519::Signature::from_bytes(&sig_bytes);
        auth_key
            .verify(&a[..AUTH_LEN - 64], &sig)
            .map_err(|_| LinkError::Authenticate("bad signature"))
    }

    /// Verify a CERTS cell. [tor-spec §4.2; C torcert.c or_handshake_certs_check_both()]
    fn verify_certs(&self, body: &[u8], now: SystemTime) -> Result<PeerCerts, LinkError> {
        let certs = parse_certs(body)?;
        let get = |t: u8| certs.iter().find(|(ty, _)| *ty == t).map(|(_, b)| *b);
        let bad = |s: &str| LinkError::Certs(s.to_string());
        let (Some(c2), Some(c4), Some(c7)) = (get(2), get(4), get(7)) else {
            return Err(bad(
                "missing type 2, 4 or 7 certificate (RSA-only peers are not supported)",
            ));
        };
        // Type 2: self-signed RSA-1024 identity, with C Tor's slop on dates.
        let x = openssl::x509::X509::from_der(c2).map_err(|_| bad("type 2 not X.509"))?;
        let pkey = x.public_key().map_err(|_| bad("type 2 key"))?;
        let rsa = pkey.rsa().map_err(|_| bad("type 2 key is not RSA"))?;
        if rsa.size() != 128 {
            return Err(bad("RSA identity is not 1024 bits"));
        }
        if !x.verify(&pkey).unwrap_or(false) {
            return Err(bad("type 2 not self-signed"));
        }
        let slop_past = now + Duration::from_secs(2 * 86400);
        let slop_future = now
            .checked_sub(Duration::from_secs(30 * 86400))
            .unwrap_or(UNIX_EPOCH);
        let asn = |t: SystemTime| {
            openssl::asn1::Asn1Time::from_unix(
                t.duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs() as i64)
                    .unwrap_or(0),
            )
        };
        let (Ok(a_past), Ok(a_future)) = (asn(slop_past), asn(slop_future)) else {
            return Err(bad("time"));
        };
        if x.not_before() > a_past || x.not_after() < a_future {
            return Err(bad("type 2 certificate expired or not yet valid"));
        }
        let rsa_der = rsa
            .public_key_to_der_pkcs1()
            .map_err(|_| bad("type 2 key"))?;
        let rsa_fp = sha1(&rsa_der);
        // Type 7: RSA identity vouches for the Ed25519 identity.
        let llrsa = tor_llcrypto::pk::rsa::PublicKey::from_der(&rsa_der)
            .ok_or_else(|| bad("type 2 key"))?;
        let cc = tor_cert::rsa::RsaCrosscert::decode(c7)
            .map_err(|e| LinkError::Certs(format!("type 7: {e}")))?
            .check_signature(&llrsa)
            .map_err(|_| bad("type 7 signature"))?
            .if_valid_at(&now)
            .map_err(|_| bad("type 7 expired"))?;
        // Type 4: master → signing, must carry the master key and match type 7.
        let c4 = Ed25519Cert::decode(c4)
            .map_err(|e| LinkError::Certs(format!("type 4: {e}")))?
            .should_have_signing_key()
            .map_err(|_| bad("type 4 lacks signed-with-key extension"))?
            .check_signature()
            .map_err(|_| bad("type 4 signature"))?
            .if_valid_at(&now)
            .map_err(|_| bad("type 4 expired"))?;
        if c4.cert_type() != CertType::IDENTITY_V_SIGNING {
            return Err(bad("type 4 has wrong certificate type"));
        }
        let master = *c4.signing_key().ok_or_else(|| bad("type 4 signer"))?;
        if !cc.subject_key_matches(&master) {
            return Err(bad("type 7 does not match the Ed25519 identity"));
        }
        let signing = match c4.subject_key() {
            CertifiedKey::Ed25519(k) => *k,
            _ => return Err(bad("type 4 certifies a non-Ed25519 key")),
        };
        let check_by_signing = |b: &[u8], want: CertType| {
            let c = Ed25519Cert::decode(b)
                .map_err(|e| LinkError::Certs(format!("type {}: {e}", u8::from(want))))?
                .should_be_signed_with(&signing)
                .map_err(|_| bad("certificate signed by wrong key"))?
                .check_signature()
                .map_err(|_| bad("certificate signature"))?
                .if_valid_at(&now)
                .map_err(|_| bad("certificate expired"))?;
            if c.cert_type() != want {
                return Err(bad("certificate has wrong type"));
            }
            Ok(c)
        };
        let mut auth_key = None;
        if self.initiator {
            let c5 = get(5).ok_or_else(|| bad("missing type 5 certificate"))?;
            let c5 = check_by_signing(c5, CertType::SIGNING_V_TLS_CERT)?;
            let peer_tls = self
                .peer_tls_cert_der
                .as_deref()
                .ok_or(LinkError::Tls("no peer certificate"))?;
            match c5.subject_key() {
                CertifiedKey::X509Sha256Digest(d) if *d == sha256(peer_tls) => {}
                _ => return Err(bad("type 5 does not match the TLS certificate")),
            }
        } else {
            let c6 = get(6).ok_or_else(|| bad("missing type 6 certificate"))?;
            let c6 = check_by_signing(c6, CertType::SIGNING_V_LINK_AUTH)?;
            match c6.subject_key() {
                CertifiedKey::Ed25519(k) => {
                    auth_key = Some(
                        ed25519::PublicKey::from_bytes(
                            k.as_bytes().try_into().map_err(|_| bad("key"))?,
                        )
                        .map_err(|_| bad("type 6 key invalid"))?,
                    );
                }
                _ => return Err(bad("type 6 certifies a non-Ed25519 key")),
            }
        }
        let mut ed_id = [0u8; 32];
        ed_id.copy_from_slice(master.as_bytes());
        Ok(PeerCerts {
            rsa_der,
            rsa_fp,
            ed_id,
            auth_key,
        })
    }
}

#[cfg(test)]
mod tests;
