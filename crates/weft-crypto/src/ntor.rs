//! The ntor circuit handshake (CREATE2 HTYPE 2), server side for the relay
//! and client side for tests and the load generator, plus
//! [`HandshakeError`], the failure type shared with [`crate::ntor_v3`].
//! [tor-spec §5.1.4; protocol-notes §4.2]
//!
//! Sans-IO: the caller supplies the ephemeral secret (`ephemeral_seed`,
//! 32 random bytes in production) so the official test vectors can be
//! reproduced exactly.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};
use x25519_dalek::{PublicKey, SharedSecret, StaticSecret};
use zeroize::Zeroizing;

use crate::kdf::kdf_rfc5869_ntor;

/// Length of the client's CREATE2 HDATA: NODEID(20) | KEYID(32) | X(32).
pub const NTOR_CLIENT_LEN: usize = 84;
/// Length of the server's CREATED2 HDATA: Y(32) | AUTH(32).
pub const NTOR_REPLY_LEN: usize = 64;
/// Length of the tor1 key material a handshake yields: Df(20) | Db(20) |
/// Kf(16) | Kb(16). [tor-spec §5.2.2]
pub const KEY_MATERIAL_LEN: usize = 72;
/// Bytes of the circuit nonce KH that follow the key material in the KDF
/// output; C Tor keeps it as the circuit's `rend_circ_nonce` (an
/// introduction point checks ESTABLISH_INTRO's MAC with it).
/// [tor-spec §5.2.2; C onion_crypto.c onion_skin_server_handshake()]
pub const NONCE_LEN: usize = 20;

/// Why a circuit handshake (ntor or ntor-v3) failed. Every variant means
/// "close the circuit"; the distinction is for logs and counters only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The handshake message has the wrong length.
    #[error("handshake message has the wrong length ({0} bytes)")]
    BadLength(usize),
    /// NODEID (ntor) or ID (ntor-v3) is not our identity.
    #[error("handshake is addressed to another relay identity")]
    BadNodeId,
    /// KEYID is none of the onion keys we still accept.
    #[error("handshake uses an onion key we do not have")]
    UnknownKey,
    /// A Diffie-Hellman output was all-zero (the peer sent a low-order point).
    #[error("degenerate (all-zero) Diffie-Hellman output")]
    ZeroDh,
    /// ntor-v3: the MAC on the client's encrypted message did not verify
    /// (or the verification strings differ).
    #[error("client handshake MAC did not verify")]
    BadMac,
    /// Client side: the server's AUTH value did not verify.
    #[error("server handshake AUTH did not verify")]
    BadAuth,
}

/// One ntor onion key pair (b, B) of ours.
pub struct NtorSecretKey {
    /// The secret scalar b.
    pub secret: StaticSecret,
    /// The public key B (KEYID).
    pub public: PublicKey,
}

impl NtorSecretKey {
    /// Build the pair from its secret half.
    pub fn from_secret(secret: StaticSecret) -> Self {
        let public = PublicKey::from(&secret);
        NtorSecretKey { secret, public }
    }
}

/// PROTOID. [tor-spec §5.1.4]
const PROTOID: &[u8] = b"ntor-curve25519-sha256-1";
/// t_mac = PROTOID | ":mac". [tor-spec §5.1.4]
const T_MAC: &[u8] = b"ntor-curve25519-sha256-1:mac";
/// t_verify = PROTOID | ":verify". [tor-spec §5.1.4]
const T_VERIFY: &[u8] = b"ntor-curve25519-sha256-1:verify";
/// The literal "Server" at the end of auth_input. [tor-spec §5.1.4]
const SERVER: &[u8] = b"Server";

/// HMAC-SHA256 keys are zero-padded to the SHA-256 block size (RFC 2104
/// §2), so keying with the padded tweak is the same as keying with the
/// tweak, and needs no fallible call. Checked at compile time to fit.
const fn hmac_key(t: &[u8]) -> [u8; 64] {
    assert!(t.len() <= 64);
    let mut k = [0u8; 64];
    let mut i = 0;
    while i < t.len() {
        k[i] = t[i];
        i += 1;
    }
    k
}
const K_MAC: [u8; 64] = hmac_key(T_MAC);
const K_VERIFY: [u8; 64] = hmac_key(T_VERIFY);

/// tor-spec §5.1.4's H(x, t) = HMAC-SHA256(key t, message x), with x given
/// in pieces and t pre-padded by [`hmac_key`].
pub(crate) fn hmac_sha256(padded_key: &[u8; 64], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as hmac::digest::KeyInit>::new(padded_key.into());
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Len of secret_input = EXP(X,y) | EXP(X,b) | ID | B | X | Y | PROTOID.
const SECRET_INPUT_LEN: usize = 32 + 32 + 20 + 32 + 32 + 32 + PROTOID.len();

/// A scalar for the unknown-KEYID path: we still do the same DH and hash
/// work with it so the failure takes about as long as a success. Nothing
/// computed with it is ever sent.
const JUNK_SECRET: [u8; 32] = [0x5a; 32];

/// Convert a bool computed without secret-dependent branches into a
/// [`Choice`].
pub(crate) fn choice(b: bool) -> Choice {
    Choice::from(u8::from(b))
}

/// Pick the key whose public half equals `keyid`, scanning every key and
/// selecting in constant time; returns the index of the first match and
/// whether one was found.
pub(crate) fn lookup_key(keys: &[&NtorSecretKey], keyid: &[u8; 32]) -> (usize, Choice) {
    let mut found = Choice::from(0);
    let mut idx: u64 = 0;
    for (i, k) in (0u64..).zip(keys.iter()) {
        let m = k.public.as_bytes().ct_eq(keyid);
        idx.conditional_assign(&i, m & !found);
        found |= m;
    }
    // idx < keys.len(), which is a usize.
    (usize::try_from(idx).unwrap_or(0), found)
}

/// The key-derivation half of tor-spec §5.1.4 shared by both sides: from
/// the two DH outputs and the public values, compute the tor1 key material
/// and AUTH.
fn derive(
    xy: &SharedSecret,
    xb: &SharedSecret,
    id: &[u8; 20],
    b_pub: &[u8; 32],
    x_pub: &[u8; 32],
    y_pub: &[u8; 32],
) -> ([u8; KEY_MATERIAL_LEN], [u8; NONCE_LEN], [u8; 32]) {
    // secret_input = EXP(X,y) | EXP(X,b) | ID | B | X | Y | PROTOID
    let mut secret_input = Zeroizing::new([0u8; SECRET_INPUT_LEN]);
    let parts: [&[u8]; 7] = [
        xy.as_bytes(),
        xb.as_bytes(),
        id,
        b_pub,
        x_pub,
        y_pub,
        PROTOID,
    ];
    let mut pos = 0;
    for p in parts {
        secret_input[pos..pos + p.len()].copy_from_slice(p);
        pos += p.len();
    }
    // verify = H(secret_input, t_verify)
    let verify = Zeroizing::new(hmac_sha256(&K_VERIFY, &[&secret_input[..]]));
    // auth_input = verify | ID | B | Y | X | PROTOID | "Server"; AUTH = H(auth_input, t_mac)
    let auth = hmac_sha256(
        &K_MAC,
        &[&verify[..], id, b_pub, y_pub, x_pub, PROTOID, SERVER],
    );
    // KEY_SEED = H(secret_input, t_key), expanded with m_expand
    // [tor-spec §5.1.4 last paragraph, §5.2.2]; the KDF does both steps.
    // The first 72 bytes are Df | Db | Kf | Kb, the next 20 KH.
    let mut out = Zeroizing::new([0u8; KEY_MATERIAL_LEN + NONCE_LEN]);
    kdf_rfc5869_ntor(&secret_input[..], &mut out[..]);
    let mut km = [0u8; KEY_MATERIAL_LEN];
    km.copy_from_slice(&out[..KEY_MATERIAL_LEN]);
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&out[KEY_MATERIAL_LEN..]);
    (km, nonce, auth)
}

/// Answer an ntor CREATE2 handshake. [tor-spec §5.1.4]
///
/// `keys`: every onion key we still accept (current first, then previous);
/// the client's KEYID picks one. `my_rsa_id`: our RSA identity fingerprint
/// (NODEID). `client`: the 84-byte HDATA. `ephemeral_seed`: 32 random
/// bytes, used directly as the ephemeral secret y.
///
/// Returns the CREATED2 HDATA (Y | AUTH) and the 72 bytes of tor1 key
/// material Df | Db | Kf | Kb.
///
/// After the length check all the work is done whatever the outcome
/// (with a junk key if KEYID is unknown), and the checks are combined in
/// constant time before the one branch that reports the failure.
pub fn server_handshake(
    keys: &[&NtorSecretKey],
    my_rsa_id: &[u8; 20],
    client: &[u8],
    ephemeral_seed: [u8; 32],
) -> Result<([u8; NTOR_REPLY_LEN], [u8; KEY_MATERIAL_LEN]), HandshakeError> {
    server_handshake_with_nonce(keys, my_rsa_id, client, ephemeral_seed).map(|(r, km, _)| (r, km))
}

/// What a server handshake yields: the CREATED2 HDATA (Y | AUTH), the tor1
/// key material and the circuit nonce KH.
pub type ServerKeys = (
    [u8; NTOR_REPLY_LEN],
    [u8; KEY_MATERIAL_LEN],
    [u8; NONCE_LEN],
);

/// [`server_handshake`], also returning the circuit nonce KH
/// ([`NONCE_LEN`] bytes after the key material).
pub fn server_handshake_with_nonce(
    keys: &[&NtorSecretKey],
    my_rsa_id: &[u8; 20],
    client: &[u8],
    ephemeral_seed: [u8; 32],
) -> Result<ServerKeys, HandshakeError> {
    let bad_len = HandshakeError::BadLength(client.len());
    if client.len() != NTOR_CLIENT_LEN {
        return Err(bad_len);
    }
    // NODEID(20) | KEYID(32) | CLIENT_KP X(32) [tor-spec §5.1.4]
    let (node_id, rest) = client.split_first_chunk::<20>().ok_or(bad_len)?;
    let (keyid, rest) = rest.split_first_chunk::<32>().ok_or(bad_len)?;
    let x_bytes: &[u8; 32] = rest.try_into().map_err(|_| bad_len)?;

    let id_ok = node_id.ct_eq(my_rsa_id);
    let (idx, found) = lookup_key(keys, keyid);
    let junk = StaticSecret::from(JUNK_SECRET);
    let b = match keys.get(idx) {
        Some(k) if bool::from(found) => &k.secret,
        _ => &junk,
    };

    // y,Y = KEYGEN(); the caller's random bytes are y.
    let y = StaticSecret::from(ephemeral_seed);
    let y_pub = PublicKey::from(&y);
    let x_pub = PublicKey::from(*x_bytes);
    let xy = y.diffie_hellman(&x_pub); // EXP(X,y)
    let xb = b.diffie_hellman(&x_pub); // EXP(X,b)

    // "Both parties check that none of the EXP() operations produced the
    // point at infinity." [tor-spec §5.1.4]
    let dh_ok = choice(xy.was_contributory()) & choice(xb.was_contributory());

    // B in the transcript is the KEYID the client named (equal to our key
    // on success).
    let (km, nonce, auth) = derive(&xy, &xb, node_id, keyid, x_bytes, y_pub.as_bytes());

    let ok = id_ok & found & dh_ok;
    if !bool::from(ok) {
        return Err(if !bool::from(id_ok) {
            HandshakeError::BadNodeId
        } else if !bool::from(found) {
            HandshakeError::UnknownKey
        } else {
            HandshakeError::ZeroDh
        });
    }

    // SERVER_KP Y | AUTH [tor-spec §5.1.4]
    let mut reply = [0u8; NTOR_REPLY_LEN];
    reply[..32].copy_from_slice(y_pub.as_bytes());
    reply[32..].copy_from_slice(&auth);
    Ok((reply, km, nonce))
}

/// What a client remembers between sending CREATE2 and reading CREATED2.
pub struct NtorClientState {
    /// The relay's RSA identity fingerprint (ID).
    relay_id: [u8; 20],
    /// The relay's ntor onion key (B).
    relay_b: PublicKey,
    /// Our ephemeral secret x.
    x: StaticSecret,
    /// Our ephemeral public key X.
    x_pub: PublicKey,
}

/// Start an ntor handshake with a relay whose RSA fingerprint is
/// `relay_rsa_id` and whose ntor onion key is `relay_ntor_key`.
/// `ephemeral_seed` (32 random bytes) is used directly as x.
/// Returns the state to keep and the 84-byte CREATE2 HDATA. [tor-spec §5.1.4]
pub fn client_start(
    relay_rsa_id: &[u8; 20],
    relay_ntor_key: &PublicKey,
    ephemeral_seed: [u8; 32],
) -> (NtorClientState, [u8; NTOR_CLIENT_LEN]) {
    // x,X = KEYGEN()
    let x = StaticSecret::from(ephemeral_seed);
    let x_pub = PublicKey::from(&x);
    // NODEID | KEYID(B) | CLIENT_KP X
    let mut msg = [0u8; NTOR_CLIENT_LEN];
    msg[..20].copy_from_slice(relay_rsa_id);
    msg[20..52].copy_from_slice(relay_ntor_key.as_bytes());
    msg[52..].copy_from_slice(x_pub.as_bytes());
    let state = NtorClientState {
        relay_id: *relay_rsa_id,
        relay_b: *relay_ntor_key,
        x,
        x_pub,
    };
    (state, msg)
}

/// Finish an ntor handshake with the server's 64-byte CREATED2 HDATA;
/// returns the 72 bytes of tor1 key material. [tor-spec §5.1.4]
pub fn client_finish(
    state: &NtorClientState,
    reply: &[u8],
) -> Result<[u8; KEY_MATERIAL_LEN], HandshakeError> {
    client_finish_with_nonce(state, reply).map(|(km, _)| km)
}

/// [`client_finish`], also returning the circuit nonce KH.
pub fn client_finish_with_nonce(
    state: &NtorClientState,
    reply: &[u8],
) -> Result<([u8; KEY_MATERIAL_LEN], [u8; NONCE_LEN]), HandshakeError> {
    let bad_len = HandshakeError::BadLength(reply.len());
    if reply.len() != NTOR_REPLY_LEN {
        return Err(bad_len);
    }
    // SERVER_KP Y(32) | AUTH(32)
    let (y_bytes, auth) = reply.split_first_chunk::<32>().ok_or(bad_len)?;
    let y_pub = PublicKey::from(*y_bytes);
    let yx = state.x.diffie_hellman(&y_pub); // EXP(Y,x)
    let bx = state.x.diffie_hellman(&state.relay_b); // EXP(B,x)
    let (km, nonce, expected) = derive(
        &yx,
        &bx,
        &state.relay_id,
        state.relay_b.as_bytes(),
        state.x_pub.as_bytes(),
        y_bytes,
    );
    // "The client verifies that AUTH == H(auth_input, t_mac)", and that no
    // EXP() produced the point at infinity. [tor-spec §5.1.4]
    let auth_ok = expected.as_slice().ct_eq(auth);
    let dh_ok = choice(yx.was_contributory()) & choice(bx.was_contributory());
    if !bool::from(dh_ok) {
        return Err(HandshakeError::ZeroDh);
    }
    if !bool::from(auth_ok) {
        return Err(HandshakeError::BadAuth);
    }
    Ok((km, nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<const N: usize>(s: &str) -> [u8; N] {
        hex::decode(s).unwrap().try_into().unwrap()
    }

    /// The ntor test vector generated with C Tor's src/test/ntor_ref.py, as
    /// carried by Arti tor-proto src/crypto/handshake/ntor.rs `testvec`.
    #[test]
    fn testvec() {
        let b_sk: [u8; 32] = h("4820544f4c4420594f5520444f474954204b454550532048415050454e494e47");
        let b_pk: [u8; 32] = h("ccbc8541904d18af08753eae967874749e6149f873de937f57f8fd903a21c471");
        let x_sk: [u8; 32] = h("706f6461792069207075742e2e2e2e2e2e2e2e4a454c4c59206f6e2074686973");
        let x_pk: [u8; 32] = h("e65dfdbef8b2635837fe2cebc086a8096eae3213e6830dc407516083d412b078");
        let y_sk: [u8; 32] = h("70686520737175697272656c2e2e2e2e2e2e2e2e686173206869732067616d65");
        let y_pk: [u8; 32] = h("390480a14362761d6aec1fea840f6e9e928fb2adb7b25c670be1045e35133a37");
        let id: [u8; 20] = h("69546f6c64596f7541626f75745374616972732e");
        let client_hs: [u8; 84] = h(concat!(
            "69546f6c64596f7541626f75745374616972732e",
            "ccbc8541904d18af08753eae967874749e6149f873de937f57f8fd903a21c471",
            "e65dfdbef8b2635837fe2cebc086a8096eae3213e6830dc407516083d412b078"
        ));
        let server_hs: [u8; 64] = h(concat!(
            "390480a14362761d6aec1fea840f6e9e928fb2adb7b25c670be1045e35133a37",
            "1cbdf68b89923e1f85e8e18ee6e805ea333fe4849c790ffd2670bd80fec95cc8"
        ));
        let keys: [u8; 72] = h(concat!(
            "0c62dee7f48893370d0ef896758d35729867beef1a5121df80e00f79ed349af3",
            "9b51cae125719182f19d932a667dae1afbf2e336e6910e7822223e763afad0a1",
            "3342157969dc6b79"
        ));

        let relay = NtorSecretKey::from_secret(StaticSecret::from(b_sk));
        assert_eq!(relay.public.as_bytes(), &b_pk);

        let (state, cmsg) = client_start(&id, &relay.public, x_sk);
        assert_eq!(&cmsg[52..], &x_pk);
        assert_eq!(cmsg, client_hs);

        let (reply, s_km) = server_handshake(&[&relay], &id, &cmsg, y_sk).unwrap();
        assert_eq!(&reply[..32], &y_pk);
        assert_eq!(reply, server_hs);
        assert_eq!(s_km, keys);

        let c_km = client_finish(&state, &reply).unwrap();
        assert_eq!(c_km, keys);
    }

    #[test]
    fn hmac_padding_is_plain_hmac() {
        for t in [T_MAC, T_VERIFY] {
            let mut m = Hmac::<Sha256>::new_from_slice(t).unwrap();
            m.update(b"some message");
            let plain: [u8; 32] = m.finalize().into_bytes().into();
            assert_eq!(hmac_sha256(&hmac_key(t), &[b"some ", b"message"]), plain);
        }
    }

    fn key(byte: u8) -> NtorSecretKey {
        NtorSecretKey::from_secret(StaticSecret::from([byte; 32]))
    }

    #[test]
    fn roundtrip_with_previous_key() {
        let id = [7u8; 20];
        let current = key(1);
        let previous = key(2);
        let keys = [&current, &previous];
        for k in keys {
            let (st, cmsg) = client_start(&id, &k.public, crate::random_array());
            let (reply, s_km) = server_handshake(&keys, &id, &cmsg, crate::random_array()).unwrap();
            assert_eq!(client_finish(&st, &reply).unwrap(), s_km);
        }
    }

    #[test]
    fn failures() {
        let id = [7u8; 20];
        let k = key(1);
        let other = key(3);
        let keys = [&k];
        let seed = [9u8; 32];

        let (_, cmsg) = client_start(&id, &k.public, [4u8; 32]);
        for bad in [&cmsg[..83], &[0u8; 85][..], &[][..]] {
            assert!(matches!(
                server_handshake(&keys, &id, bad, seed),
                Err(HandshakeError::BadLength(_))
            ));
        }
        assert_eq!(
            server_handshake(&keys, &[8u8; 20], &cmsg, seed).err(),
            Some(HandshakeError::BadNodeId)
        );
        let (_, cmsg_other) = client_start(&id, &other.public, [4u8; 32]);
        assert_eq!(
            server_handshake(&keys, &id, &cmsg_other, seed).err(),
            Some(HandshakeError::UnknownKey)
        );
        assert_eq!(
            server_handshake(&[], &id, &cmsg, seed).err(),
            Some(HandshakeError::UnknownKey)
        );

        // Low-order points for X: zero and the order-8 point (0xe0eb...).
        let mut low = cmsg;
        low[52..].fill(0);
        assert_eq!(
            server_handshake(&keys, &id, &low, seed).err(),
            Some(HandshakeError::ZeroDh)
        );
        let order8: [u8; 32] =
            h("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800");
        low[52..].copy_from_slice(&order8);
        assert_eq!(
            server_handshake(&keys, &id, &low, seed).err(),
            Some(HandshakeError::ZeroDh)
        );

        // Client side: tampered AUTH, wrong length, low-order Y.
        let (st, cmsg) = client_start(&id, &k.public, [4u8; 32]);
        let (mut reply, _) = server_handshake(&keys, &id, &cmsg, seed).unwrap();
        assert!(client_finish(&st, &reply).is_ok());
        assert_eq!(
            client_finish(&st, &reply[..63]).err(),
            Some(HandshakeError::BadLength(63))
        );
        reply[60] ^= 1;
        assert_eq!(
            client_finish(&st, &reply).err(),
            Some(HandshakeError::BadAuth)
        );
        reply[..32].fill(0);
        assert_eq!(
            client_finish(&st, &reply).err(),
            Some(HandshakeError::ZeroDh)
        );
    }
}
