//! The state machine of a keyed circuit half: the half on the connection
//! toward the client, which answered the CREATE2 (or CREATE_FAST) and holds
//! this hop's tor1 keys. It removes our onion layer from cells going away
//! from the client, handles those addressed to us (EXTEND2, TRUNCATE, DROP,
//! BEGIN on a non-exit...), and adds our layer to cells going toward the
//! client. The other half of the circuit (toward the next hop) only relabels
//! circuit IDs and lives in weft-relay. [tor-spec §5, §6; protocol-notes §5, §6]

use weft_crypto::ntor::NtorSecretKey;
use weft_crypto::relay_crypto::Tor1RelayCrypto;

use crate::cell::{cmd, destroy_reason, BODY_LEN};
use crate::relay::{self, end_reason, relay_cmd, Extend2};

/// Most RELAY_EARLY cells a circuit may carry forward. [tor-spec §5.6]
pub const MAX_RELAY_EARLY: u8 = 8;

/// Why a CREATE cell was refused; the circuit gets DESTROY(PROTOCOL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    /// CREATE2 body malformed.
    #[error("malformed CREATE2: {0}")]
    Malformed(#[from] relay::RelayMsgError),
    /// A handshake type we do not answer (TAP, FAST in CREATE2, unknown).
    #[error("unsupported handshake type {0}")]
    UnsupportedType(u16),
    /// The handshake failed (wrong key, bad MAC, wrong length...).
    #[error("handshake failed: {0}")]
    Handshake(String),
}

/// Our identities and onion keys, as the handshakes need them.
pub struct HandshakeKeys {
    /// SHA-1 of our RSA identity (ntor NODEID).
    pub rsa_fp: [u8; 20],
    /// Our Ed25519 identity (ntor-v3 ID).
    pub ed_id: [u8; 32],
    /// Onion keys we accept: current, then previous.
    pub ntor: Vec<NtorSecretKey>,
}

/// Which handshake created a circuit (for logs and counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeKind {
    /// CREATE2 HTYPE 2.
    Ntor,
    /// CREATE2 HTYPE 3.
    NtorV3,
    /// CREATE_FAST.
    Fast,
}

/// Answer a CREATE2 body: returns the CREATED2 body and the new keyed half.
/// [tor-spec §5.1; protocol-notes §4]
pub fn answer_create2(
    keys: &HandshakeKeys,
    body: &[u8],
) -> Result<(Vec<u8>, KeyedHalf, HandshakeKind), CreateError> {
    let c = relay::parse_create2(body)?;
    let seed: [u8; 32] = weft_crypto::random_array();
    let key_refs: Vec<&NtorSecretKey> = keys.ntor.iter().collect();
    match c.htype {
        2 => {
            let (reply, km) =
                weft_crypto::ntor::server_handshake(&key_refs, &keys.rsa_fp, c.hdata, seed)
                    .map_err(|e| CreateError::Handshake(e.to_string()))?;
            Ok((
                relay::created2_body(&reply),
                KeyedHalf::new(&km),
                HandshakeKind::Ntor,
            ))
        }
        3 => {
            // We do not implement congestion control or CGO at a middle, so
            // the reply is an empty extension list (the single byte 0),
            // whatever the client asked for. [protocol-notes §4.3]
            let r = weft_crypto::ntor_v3::server_handshake(
                &key_refs,
                &keys.ed_id,
                c.hdata,
                b"circuit extend",
                seed,
                |_client_msg| vec![0u8],
            )
            .map_err(|e| CreateError::Handshake(e.to_string()))?;
            Ok((
                relay::created2_body(&r.reply),
                KeyedHalf::new(&r.key_material),
                HandshakeKind::NtorV3,
            ))
        }
        t => Err(CreateError::UnsupportedType(t)),
    }
}

/// Answer a CREATE_FAST body (X, 20 bytes): returns the CREATED_FAST body
/// (Y | KH) and the keyed half. [tor-spec §5.1.5]
pub fn answer_create_fast(body: &[u8]) -> Result<(Vec<u8>, KeyedHalf), CreateError> {
    let x = body
        .get(..20)
        .ok_or(CreateError::Handshake("CREATE_FAST too short".into()))?;
    let y: [u8; 20] = weft_crypto::random_array();
    let mut seed = [0u8; 40];
    seed[..20].copy_from_slice(x);
    seed[20..].copy_from_slice(&y);
    let mut out = [0u8; 20 + 72];
    weft_crypto::kdf::kdf_tor(&seed, &mut out);
    let mut km = [0u8; 72];
    km.copy_from_slice(&out[20..]);
    let mut reply = Vec::with_capacity(40);
    reply.extend_from_slice(&y);
    reply.extend_from_slice(&out[..20]);
    Ok((reply, KeyedHalf::new(&km)))
}

/// What the next hop of a keyed half looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// The circuit ends here.
    None,
    /// An EXTEND2 is in progress.
    Pending,
    /// Linked to a relabel half toward the next relay.
    Linked,
}

/// What to do with a cell moving away from the client, after
/// [`KeyedHalf::on_forward`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardAction {
    /// Not ours: pass it to the next hop with this command (RELAY_EARLY
    /// stays RELAY_EARLY).
    Pass {
        /// RELAY or RELAY_EARLY.
        command: u8,
    },
    /// EXTEND2 for us: open or find the link and send CREATE2.
    Extend(Box<Extend2>),
    /// TRUNCATE for us: destroy the next hop with `reason`; the body now
    /// holds the encrypted TRUNCATED reply to send back.
    Truncate {
        /// Reason to put in the DESTROY toward the next hop.
        reason: u8,
    },
    /// The body now holds an encrypted reply (END, RESOLVED...) to send back.
    Reply,
    /// Nothing to do.
    Drop,
    /// Close the circuit: DESTROY both ways with `reason`.
    Close {
        /// DESTROY reason.
        reason: u8,
        /// For the log.
        why: String,
    },
}

/// A keyed circuit half (see the module docs).
pub struct KeyedHalf {
    crypto: Tor1RelayCrypto,
    relay_early_seen: u8,
    /// The state of the next hop.
    pub next: NextHop,
}

impl KeyedHalf {
    /// A half keyed with 72 bytes of tor1 key material.
    pub fn new(key_material: &[u8; 72]) -> Self {
        KeyedHalf {
            crypto: Tor1RelayCrypto::from_key_material(key_material),
            relay_early_seen: 0,
            next: NextHop::None,
        }
    }

    /// A RELAY or RELAY_EARLY cell arrived from the client side.
    /// `allow_nonearly_extend` is the consensus parameter AllowNonearlyExtend.
    pub fn on_forward(
        &mut self,
        command: u8,
        body: &mut [u8; BODY_LEN],
        allow_nonearly_extend: bool,
    ) -> ForwardAction {
        if command == cmd::RELAY_EARLY {
            self.relay_early_seen = self.relay_early_seen.saturating_add(1);
            if self.relay_early_seen > MAX_RELAY_EARLY {
                return ForwardAction::Close {
                    reason: destroy_reason::PROTOCOL,
                    why: format!("more than {MAX_RELAY_EARLY} RELAY_EARLY cells"),
                };
            }
        }
        if !self.crypto.decrypt_forward(body) {
            return match self.next {
                NextHop::Linked => ForwardAction::Pass { command },
                _ => ForwardAction::Close {
                    reason: destroy_reason::PROTOCOL,
                    why: "unrecognized relay cell, but the circuit stops here".into(),
                },
            };
        }
        let h = match relay::parse_header(body) {
            Ok(h) => h,
            Err(e) => {
                return ForwardAction::Close {
                    reason: destroy_reason::PROTOCOL,
                    why: e.to_string(),
                }
            }
        };
        match h.command {
            relay_cmd::EXTEND2 => {
                if command != cmd::RELAY_EARLY && !allow_nonearly_extend {
                    // [protocol-notes §3: dropped, not closed]
                    return ForwardAction::Drop;
                }
                if h.stream_id != 0 {
                    return ForwardAction::Drop;
                }
                if self.next != NextHop::None {
                    return ForwardAction::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: "EXTEND2 on a circuit that already has a next hop".into(),
                    };
                }
                match relay::parse_extend2(relay::data(body, &h)) {
                    Ok(e) => match relay::parse_create2(&e.create2) {
                        Ok(c) if c.htype == 0 || c.htype == 1 => ForwardAction::Close {
                            reason: destroy_reason::PROTOCOL,
                            why: format!("EXTEND2 with handshake type {}", c.htype),
                        },
                        _ => {
                            self.next = NextHop::Pending;
                            ForwardAction::Extend(Box::new(e))
                        }
                    },
                    Err(e) => ForwardAction::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: e.to_string(),
                    },
                }
            }
            relay_cmd::EXTEND => ForwardAction::Close {
                reason: destroy_reason::PROTOCOL,
                why: "EXTEND (v1) is not supported".into(),
            },
            relay_cmd::TRUNCATE => {
                let d = relay::data(body, &h);
                let Some(&reason) = d.first() else {
                    return ForwardAction::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: "TRUNCATE without a reason".into(),
                    };
                };
                self.next = NextHop::None;
                self.originate(body, relay_cmd::TRUNCATED, 0, &[destroy_reason::REQUESTED]);
                ForwardAction::Truncate { reason }
            }
            relay_cmd::DROP => ForwardAction::Drop,
            relay_cmd::BEGIN => {
                // A middle relay: our exit policy rejects everything.
                self.originate(body, relay_cmd::END, h.stream_id, &[end_reason::EXITPOLICY]);
                ForwardAction::Reply
            }
            relay_cmd::BEGIN_DIR => {
                self.originate(
                    body,
                    relay_cmd::END,
                    h.stream_id,
                    &[end_reason::NOTDIRECTORY],
                );
                ForwardAction::Reply
            }
            relay_cmd::RESOLVE => {
                // Answer type 0xF1: permanent error. [tor-spec §6.4]
                self.originate(
                    body,
                    relay_cmd::RESOLVED,
                    h.stream_id,
                    &[0xF1, 0, 0, 0, 0, 0],
                );
                ForwardAction::Reply
            }
            // Anything else addressed to a middle relay is dropped, as C Tor
            // does (forward compatibility).
            _ => ForwardAction::Drop,
        }
    }

    /// A cell from the next hop moving toward the client: add our layer.
    pub fn on_backward(&mut self, body: &mut [u8; BODY_LEN]) {
        self.crypto.encrypt_backward(body);
    }

    /// Build a relay message we originate toward the client in `body`,
    /// encrypted and ready to send as RELAY.
    pub fn originate(
        &mut self,
        body: &mut [u8; BODY_LEN],
        command: u8,
        stream_id: u16,
        data: &[u8],
    ) {
        relay::build(body, command, stream_id, data);
        self.crypto.originate_backward(body);
    }

    /// The next hop answered our CREATE2: fill `body` with EXTENDED2.
    pub fn extended(&mut self, body: &mut [u8; BODY_LEN], created2: &[u8]) {
        self.next = NextHop::Linked;
        let n = created2.len().min(relay::RELAY_DATA_MAX);
        self.originate(body, relay_cmd::EXTENDED2, 0, &created2[..n]);
    }
}
