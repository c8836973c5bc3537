//! Answering a circuit's creation: CREATE2 (ntor, ntor-v3) and CREATE_FAST,
//! giving the CREATED* reply and the new [`KeyedHalf`].
//! [tor-spec §5.1; protocol-notes §4]

use weft_crypto::ntor::{NtorSecretKey, NONCE_LEN};

use super::congestion::{self, CcParams};
use super::extensions;
use super::KeyedHalf;
use crate::relay;

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

/// Answer a CREATE2 body: returns the CREATED2 body and the new keyed half
/// (with the circuit nonce KH that follows the key material). `cc`: the
/// consensus's congestion-control parameters; an ntor-v3 client that asks
/// for congestion control gets it when they enable it (the reply carries
/// our `sendme_inc`, the half runs Vegas).
/// [tor-spec §5.1; protocol-notes §4; proposal 324 §2.1]
pub fn answer_create2(
    keys: &HandshakeKeys,
    body: &[u8],
    cc: Option<&CcParams>,
) -> Result<(Vec<u8>, KeyedHalf, HandshakeKind), CreateError> {
    answer_create2_with(keys, body, cc, &mut rand::rng())
}

/// [`answer_create2`] with the server's ephemeral key drawn from `rng`
/// (the circuit core's, seedable in tests).
pub fn answer_create2_with(
    keys: &HandshakeKeys,
    body: &[u8],
    cc: Option<&CcParams>,
    rng: &mut dyn rand::CryptoRng,
) -> Result<(Vec<u8>, KeyedHalf, HandshakeKind), CreateError> {
    let c = relay::parse_create2(body)?;
    let mut seed = [0u8; 32];
    rng.fill_bytes(&mut seed);
    let key_refs: Vec<&NtorSecretKey> = keys.ntor.iter().collect();
    match c.htype {
        2 => {
            let (reply, km, nonce) = weft_crypto::ntor::server_handshake_with_nonce(
                &key_refs,
                &keys.rsa_fp,
                c.hdata,
                seed,
            )
            .map_err(|e| CreateError::Handshake(e.to_string()))?;
            Ok((
                relay::created2_body(&reply),
                KeyedHalf::new(&km, nonce),
                HandshakeKind::Ntor,
            ))
        }
        3 => {
            // The client's message is an extension list: congestion
            // control and CGO (Relay=6, which needs congestion control)
            // are what we grant; a request for any other capability, or a
            // malformed list, fails the handshake as in C's
            // negotiate_v3_ntor_server_circ_params(). Nothing about CGO is
            // echoed: the client committed to it when it asked.
            // [protocol-notes §4.3; extensions]
            let mut accepted = None;
            let mut cgo = false;
            let mut refused = None;
            let r = weft_crypto::ntor_v3::server_handshake(
                &key_refs,
                &keys.ed_id,
                c.hdata,
                b"circuit extend",
                seed,
                |client_msg| {
                    let enabled = cc.is_some_and(|p| p.enabled);
                    match extensions::read_client_extensions(client_msg, true)
                        .and_then(|e| e.grant(enabled))
                    {
                        Ok(g) => {
                            accepted = cc.filter(|_| g.cc).copied();
                            cgo = g.cgo;
                        }
                        Err(why) => refused = Some(why),
                    }
                    congestion::server_reply(accepted.map(|p| p.sendme_inc))
                },
            )
            .map_err(|e| CreateError::Handshake(e.to_string()))?;
            if let Some(why) = refused {
                return Err(CreateError::Handshake(format!("ntor-v3 extensions: {why}")));
            }
            let mut half = if cgo {
                let (km, nonce) = r.cgo_keys();
                KeyedHalf::new_cgo(&km, nonce)
            } else {
                KeyedHalf::new(&r.key_material, r.nonce)
            };
            if let Some(p) = accepted {
                half.enable_congestion_control(p);
            }
            Ok((relay::created2_body(&r.reply), half, HandshakeKind::NtorV3))
        }
        t => Err(CreateError::UnsupportedType(t)),
    }
}

/// Answer a CREATE_FAST body (X, 20 bytes): returns the CREATED_FAST body
/// (Y | KH) and the keyed half, whose circuit nonce is KH.
/// [tor-spec §5.1.5; C onion_crypto.c]
pub fn answer_create_fast(
    body: &[u8],
    rng: &mut dyn rand::CryptoRng,
) -> Result<(Vec<u8>, KeyedHalf), CreateError> {
    let x = body
        .get(..20)
        .ok_or(CreateError::Handshake("CREATE_FAST too short".into()))?;
    let mut y = [0u8; 20];
    rng.fill_bytes(&mut y);
    let mut seed = [0u8; 40];
    seed[..20].copy_from_slice(x);
    seed[20..].copy_from_slice(&y);
    let mut out = [0u8; 20 + 72];
    weft_crypto::kdf::kdf_tor(&seed, &mut out);
    let mut km = [0u8; 72];
    km.copy_from_slice(&out[20..]);
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&out[..20]);
    let mut reply = Vec::with_capacity(40);
    reply.extend_from_slice(&y);
    reply.extend_from_slice(&out[..20]);
    Ok((reply, KeyedHalf::new(&km, nonce)))
}
