//! The ntor-v3 circuit handshake (CREATE2 HTYPE 3), server side for the
//! relay and client side for tests and the load generator: Curve25519 with
//! SHA3-256 / SHAKE-256 / AES-256-CTR, carrying an encrypted, authenticated
//! message each way (the extension lists of prop 332 §A.2).
//! [proposals/332-ntor-v3-with-extra-data.md; protocol-notes §4.3]
//!
//! Sans-IO: the caller supplies the ephemeral secret (`ephemeral_seed`,
//! 32 random bytes in production) so the proposal's test vectors can be
//! reproduced exactly. Failures are [`HandshakeError`]s.

use aes::Aes256;
use cipher::{KeyIvInit, StreamCipher};
use digest::{Digest, ExtendableOutput, Update, XofReader};
use sha3::{Sha3_256, Shake256};
use subtle::{Choice, ConstantTimeEq};
use x25519_dalek::{PublicKey, SharedSecret, StaticSecret};
use zeroize::Zeroizing;

use crate::ntor::{choice, lookup_key, HandshakeError, NtorSecretKey, KEY_MATERIAL_LEN};

/// The verification string C Tor uses for CREATE2 / EXTEND2.
/// [protocol-notes §4.3]
pub const CIRCUIT_EXTEND_VERIFICATION: &[u8] = b"circuit extend";

/// Shortest client handshake: ID(32) | B(32) | X(32) | MSG(0) | MAC(32).
pub const NTOR_V3_CLIENT_MIN_LEN: usize = 128;
/// Shortest server handshake: Y(32) | AUTH(32) | MSG(0).
pub const NTOR_V3_REPLY_MIN_LEN: usize = 64;

/// PROTOID for circuit extension. [prop 332 §A.2]
const PROTOID: &[u8] = b"ntor3-curve25519-sha3_256-1";
// Tweaks, t_foo = PROTOID | ":foo". [prop 332 §A.1]
const T_MSGKDF: &[u8] = b"ntor3-curve25519-sha3_256-1:kdf_phase1";
const T_MSGMAC: &[u8] = b"ntor3-curve25519-sha3_256-1:msg_mac";
const T_KEY_SEED: &[u8] = b"ntor3-curve25519-sha3_256-1:key_seed";
const T_VERIFY: &[u8] = b"ntor3-curve25519-sha3_256-1:verify";
const T_FINAL: &[u8] = b"ntor3-curve25519-sha3_256-1:kdf_final";
const T_AUTH: &[u8] = b"ntor3-curve25519-sha3_256-1:auth_final";
/// The literal "Server" at the end of auth_input. [prop 332, server operation]
const SERVER: &[u8] = b"Server";

/// A scalar for the unknown-KEYID path (see [`crate::ntor`]); nothing
/// computed with it is ever sent.
const JUNK_SECRET: [u8; 32] = [0xa5; 32];

/// AES-256-CTR with a zero IV: ENC(k, m). [prop 332 §A.1]
type Aes256Ctr = ctr::Ctr128BE<Aes256>;

/// ENC(k, m) / DEC(k, m): AES-256-CTR, zero IV, in place. [prop 332 §A.1]
fn aes256_ctr(key: &[u8; 32], data: &mut [u8]) {
    let mut c = Aes256Ctr::new(key.into(), &[0u8; 16].into());
    c.apply_keystream(data);
}

/// Feed ENCAP(s) = htonll(len(s)) | s to a hash. [prop 332, Notation]
fn encap<U: Update>(h: &mut U, s: &[u8]) {
    h.update(&(s.len() as u64).to_be_bytes());
    h.update(s);
}

/// Start H(·, t) = SHA3_256(ENCAP(t) | ·). [prop 332 §A.1]
fn h_start(t: &[u8]) -> Sha3_256 {
    let mut h = Sha3_256::new();
    encap(&mut h, t);
    h
}

/// Finish a SHA3-256 into an array.
fn h_finish(h: Sha3_256) -> [u8; 32] {
    h.finalize().into()
}

/// The output of the phase-1 KDF and the start of the message MAC.
struct Phase1 {
    /// ENC_K1.
    enc_k1: Zeroizing<[u8; 32]>,
    /// MAC_msgmac(MAC_K1, ID | B | X | ...), with everything but the
    /// encrypted message already absorbed.
    mac: Sha3_256,
}

/// secret_input_phase1 = Bx | ID | X | B | PROTOID | ENCAP(VER);
/// phase1_keys = KDF_msgkdf(secret_input_phase1);
/// (ENC_K1, MAC_K1) = PARTITION(phase1_keys, 32, 32);
/// then start msg_mac = MAC_msgmac(MAC_K1, ID | B | X | encrypted_msg).
/// [prop 332, client phase 1 / server operation; §A.1]
fn phase1(
    bx: &SharedSecret,
    id: &[u8; 32],
    x_pub: &[u8; 32],
    b_pub: &[u8; 32],
    ver: &[u8],
) -> Phase1 {
    // KDF(s, t) = SHAKE_256(ENCAP(t) | s)
    let mut kdf = Shake256::default();
    encap(&mut kdf, T_MSGKDF);
    kdf.update(bx.as_bytes());
    kdf.update(id);
    kdf.update(x_pub);
    kdf.update(b_pub);
    kdf.update(PROTOID);
    encap(&mut kdf, ver);
    let mut r = kdf.finalize_xof();
    let mut enc_k1 = Zeroizing::new([0u8; 32]);
    let mut mac_k1 = Zeroizing::new([0u8; 32]);
    r.read(&mut enc_k1[..]);
    r.read(&mut mac_k1[..]);
    // MAC(k, msg, t) = SHA3_256(ENCAP(t) | ENCAP(k) | msg)
    let mut mac = h_start(T_MSGMAC);
    encap(&mut mac, &mac_k1[..]);
    Digest::update(&mut mac, id);
    Digest::update(&mut mac, b_pub);
    Digest::update(&mut mac, x_pub);
    Phase1 { enc_k1, mac }
}

/// The values the final phase derives from secret_input.
struct Final {
    /// verify = H_verify(secret_input)
    verify: Zeroizing<[u8; 32]>,
    /// ENC_KEY, the first 32 bytes of KDF_final(ntor_key_seed).
    enc_key: Zeroizing<[u8; 32]>,
    /// The rest of KDF_final(ntor_key_seed): the circuit's KEYSTREAM.
    keystream: <Shake256 as ExtendableOutput>::Reader,
}

/// secret_input = Xy | Xb | ID | B | X | Y | PROTOID | ENCAP(VER);
/// ntor_key_seed = H_key_seed(secret_input); verify = H_verify(secret_input);
/// RAW_KEYSTREAM = KDF_final(ntor_key_seed);
/// (ENC_KEY, KEYSTREAM) = PARTITION(RAW_KEYSTREAM, 32, ...).
/// [prop 332, server operation / client phase 2]
fn final_phase(
    xy: &SharedSecret,
    xb: &SharedSecret,
    id: &[u8; 32],
    b_pub: &[u8; 32],
    x_pub: &[u8; 32],
    y_pub: &[u8; 32],
    ver: &[u8],
) -> Final {
    // Both hashes absorb the same secret_input; stream it into both rather
    // than build it in memory.
    let mut seed_h = h_start(T_KEY_SEED);
    let mut verify_h = h_start(T_VERIFY);
    let parts: [&[u8]; 7] = [
        xy.as_bytes(),
        xb.as_bytes(),
        id,
        b_pub,
        x_pub,
        y_pub,
        PROTOID,
    ];
    for part in parts {
        Digest::update(&mut seed_h, part);
        Digest::update(&mut verify_h, part);
    }
    encap(&mut seed_h, ver);
    encap(&mut verify_h, ver);
    let key_seed = Zeroizing::new(h_finish(seed_h));
    let verify = Zeroizing::new(h_finish(verify_h));

    let mut kdf = Shake256::default();
    encap(&mut kdf, T_FINAL);
    kdf.update(&key_seed[..]);
    let mut keystream = kdf.finalize_xof();
    let mut enc_key = Zeroizing::new([0u8; 32]);
    keystream.read(&mut enc_key[..]);
    Final {
        verify,
        enc_key,
        keystream,
    }
}

/// auth_input = verify | ID | B | Y | X | MAC | ENCAP(encrypted_msg) |
/// PROTOID | "Server"; AUTH = H_auth(auth_input). [prop 332, server operation]
fn auth(
    verify: &[u8; 32],
    id: &[u8; 32],
    b_pub: &[u8; 32],
    y_pub: &[u8; 32],
    x_pub: &[u8; 32],
    msg_mac: &[u8; 32],
    encrypted_msg: &[u8],
) -> [u8; 32] {
    let mut h = h_start(T_AUTH);
    for part in [verify, id, b_pub, y_pub, x_pub, msg_mac] {
        Digest::update(&mut h, part);
    }
    encap(&mut h, encrypted_msg);
    Digest::update(&mut h, PROTOID);
    Digest::update(&mut h, SERVER);
    h_finish(h)
}

/// What a successful server handshake produces.
pub struct NtorV3ServerResult {
    /// The CREATED2 HDATA: Y(32) | AUTH(32) | encrypted server message.
    pub reply: Vec<u8>,
    /// The first 72 bytes of KEYSTREAM: Df | Db | Kf | Kb for tor1.
    pub key_material: [u8; KEY_MATERIAL_LEN],
    /// The next 20 bytes: the circuit nonce KH (`rend_circ_nonce` in C Tor).
    pub nonce: [u8; crate::ntor::NONCE_LEN],
    /// The decrypted, authenticated client message (an extension list).
    pub client_message: Vec<u8>,
    /// KEYSTREAM as far as any relay crypto reads it: `key_material` and
    /// `nonce` are its start (tor1); CGO takes more ([`Self::cgo_keys`]).
    keystream: zeroize::Zeroizing<[u8; KEYSTREAM_LEN]>,
}

/// KEYSTREAM bytes that CGO takes: 160 bytes of key material (forward,
/// then backward), then the circuit nonce KH. [tor 0.4.9 onion_crypto.c,
/// `relay_crypto_key_material_len`]
pub const KEYSTREAM_LEN: usize = crate::cgo::KEY_MATERIAL_LEN + crate::ntor::NONCE_LEN;

/// CGO's key material and the circuit nonce KH that follows it.
pub type CgoKeys = (
    zeroize::Zeroizing<[u8; crate::cgo::KEY_MATERIAL_LEN]>,
    [u8; crate::ntor::NONCE_LEN],
);

/// CGO's split of a KEYSTREAM (the XOF's output does not depend on how
/// much of it is read, so tor1's 92 bytes are its first 92).
pub fn cgo_keys(keystream: &[u8; KEYSTREAM_LEN]) -> CgoKeys {
    let mut km = zeroize::Zeroizing::new([0u8; crate::cgo::KEY_MATERIAL_LEN]);
    km.copy_from_slice(&keystream[..crate::cgo::KEY_MATERIAL_LEN]);
    let mut nonce = [0u8; crate::ntor::NONCE_LEN];
    nonce.copy_from_slice(&keystream[crate::cgo::KEY_MATERIAL_LEN..]);
    (km, nonce)
}

impl NtorV3ServerResult {
    /// The key material and circuit nonce if the hop runs CGO.
    pub fn cgo_keys(&self) -> CgoKeys {
        cgo_keys(&self.keystream)
    }
}

/// Answer an ntor-v3 CREATE2 handshake. [prop 332, "Server operation"]
///
/// `keys`: every onion key we still accept (current first, then previous);
/// the client's KEYID picks one. `my_ed_id`: our Ed25519 identity (ID).
/// `client`: the CREATE2 HDATA. `verification`: `b"circuit extend"` for
/// CREATE2 ([`CIRCUIT_EXTEND_VERIFICATION`]). `ephemeral_seed`: 32 random
/// bytes, used directly as y. `reply_for` gets the decrypted client message
/// (only once it has been authenticated) and returns the server message to
/// encrypt; for circuit extension that must be a valid extension list, at
/// least the single byte 0x00.
///
/// Up to the MAC check all the work is done whatever the outcome (with a
/// junk key if KEYID is unknown), and the checks are combined in constant
/// time before the one branch that reports the failure.
pub fn server_handshake(
    keys: &[&NtorSecretKey],
    my_ed_id: &[u8; 32],
    client: &[u8],
    verification: &[u8],
    ephemeral_seed: [u8; 32],
    reply_for: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<NtorV3ServerResult, HandshakeError> {
    // tor1's key material, then KH; or CGO's, then KH. [C onion_crypto.c]
    let mut keystream = zeroize::Zeroizing::new([0u8; KEYSTREAM_LEN]);
    let (reply, client_message) = server_handshake_xof(
        keys,
        my_ed_id,
        client,
        verification,
        ephemeral_seed,
        reply_for,
        &mut keystream[..],
    )?;
    let mut key_material = [0u8; KEY_MATERIAL_LEN];
    key_material.copy_from_slice(&keystream[..KEY_MATERIAL_LEN]);
    let mut nonce = [0u8; crate::ntor::NONCE_LEN];
    nonce.copy_from_slice(&keystream[KEY_MATERIAL_LEN..KEY_MATERIAL_LEN + crate::ntor::NONCE_LEN]);
    Ok(NtorV3ServerResult {
        reply,
        key_material,
        nonce,
        client_message,
        keystream,
    })
}

/// [`server_handshake`], writing as much KEYSTREAM as `keystream` holds
/// (CGO will want more than tor1's 72 bytes).
fn server_handshake_xof(
    keys: &[&NtorSecretKey],
    my_ed_id: &[u8; 32],
    client: &[u8],
    verification: &[u8],
    ephemeral_seed: [u8; 32],
    reply_for: impl FnOnce(&[u8]) -> Vec<u8>,
    keystream: &mut [u8],
) -> Result<(Vec<u8>, Vec<u8>), HandshakeError> {
    let bad_len = HandshakeError::BadLength(client.len());
    // NODEID ID(32) | KEYID B(32) | CLIENT_PK X(32) | MSG | MAC(32)
    // [prop 332, client phase 1]
    let (id, rest) = client.split_first_chunk::<32>().ok_or(bad_len)?;
    let (keyid, rest) = rest.split_first_chunk::<32>().ok_or(bad_len)?;
    let (x_bytes, rest) = rest.split_first_chunk::<32>().ok_or(bad_len)?;
    let (msg, msg_mac) = rest.split_last_chunk::<32>().ok_or(bad_len)?;

    // "The relay checks whether NODEID is as expected, and looks up the
    // (b,B) keypair corresponding to KEYID." [prop 332, server operation]
    let id_ok = id[..].ct_eq(&my_ed_id[..]);
    let (idx, found) = lookup_key(keys, keyid);
    let junk = StaticSecret::from(JUNK_SECRET);
    let b = match keys.get(idx) {
        Some(k) if bool::from(found) => &k.secret,
        _ => &junk,
    };

    let x_pub = PublicKey::from(*x_bytes);
    let xb = b.diffie_hellman(&x_pub); // Xb = EXP(X,b)

    // B is the KEYID the client named (equal to our key on success).
    let p1 = phase1(&xb, id, x_bytes, keyid, verification);
    // expected_mac = MAC_msgmac(MAC_K1, ID | B | X | MSG)
    let mut mac = p1.mac;
    Digest::update(&mut mac, msg);
    let expected_mac = h_finish(mac);
    let mac_ok = expected_mac[..].ct_eq(&msg_mac[..]);
    // Security notes: validate EXP outputs are not degenerate. An all-zero
    // Xb would let anyone compute the phase-1 keys.
    let xb_ok = choice(xb.was_contributory());

    let ok: Choice = id_ok & found & xb_ok & mac_ok;
    if !bool::from(ok) {
        return Err(if !bool::from(id_ok) {
            HandshakeError::BadNodeId
        } else if !bool::from(found) {
            HandshakeError::UnknownKey
        } else if !bool::from(xb_ok) {
            HandshakeError::ZeroDh
        } else {
            HandshakeError::BadMac
        });
    }

    // CM = DEC(MSG, ENC_K1)
    let mut client_message = msg.to_vec();
    aes256_ctr(&p1.enc_k1, &mut client_message);

    // The relay composes SM from CM.
    let sm = reply_for(&client_message);

    // y,Y = KEYGEN(); Xy = EXP(X,y)
    let y = StaticSecret::from(ephemeral_seed);
    let y_pub = PublicKey::from(&y);
    let xy = y.diffie_hellman(&x_pub);
    if !xy.was_contributory() {
        return Err(HandshakeError::ZeroDh);
    }

    let mut fin = final_phase(&xy, &xb, id, keyid, x_bytes, y_pub.as_bytes(), verification);
    // encrypted_msg = ENC(ENC_KEY, SM)
    let mut encrypted = sm;
    aes256_ctr(&fin.enc_key, &mut encrypted);
    let auth = auth(
        &fin.verify,
        id,
        keyid,
        y_pub.as_bytes(),
        x_bytes,
        msg_mac,
        &encrypted,
    );
    // "The relay uses KEYSTREAM to generate the shared secrets" [prop 332]
    fin.keystream.read(keystream);

    // Y | AUTH | MSG
    let mut reply = Vec::with_capacity(64 + encrypted.len());
    reply.extend_from_slice(y_pub.as_bytes());
    reply.extend_from_slice(&auth);
    reply.extend_from_slice(&encrypted);
    Ok((reply, client_message))
}

/// What a client remembers between sending CREATE2 and reading CREATED2.
pub struct NtorV3ClientState {
    /// The relay's Ed25519 identity (ID).
    relay_id: [u8; 32],
    /// The relay's ntor onion key (B).
    relay_b: [u8; 32],
    /// Our ephemeral secret x.
    x: StaticSecret,
    /// Our ephemeral public key X.
    x_pub: [u8; 32],
    /// Bx = EXP(B,x).
    bx: SharedSecret,
    /// The MAC we sent.
    msg_mac: [u8; 32],
    /// The verification string (must match the relay's).
    verification: Vec<u8>,
}

/// Start an ntor-v3 handshake with a relay whose Ed25519 identity is
/// `relay_ed_id` and whose ntor onion key is `relay_ntor_key`, sending
/// `client_message` (an extension list for circuit extension) under
/// `verification` (`b"circuit extend"` for CREATE2). `ephemeral_seed`
/// (32 random bytes) is used directly as x. Returns the state to keep and
/// the CREATE2 HDATA. [prop 332, "Client operation, phase 1"]
pub fn client_start(
    relay_ed_id: &[u8; 32],
    relay_ntor_key: &PublicKey,
    client_message: &[u8],
    verification: &[u8],
    ephemeral_seed: [u8; 32],
) -> (NtorV3ClientState, Vec<u8>) {
    // x,X = KEYGEN(); Bx = EXP(B,x)
    let x = StaticSecret::from(ephemeral_seed);
    let x_pub = PublicKey::from(&x).to_bytes();
    let b_pub = relay_ntor_key.to_bytes();
    let bx = x.diffie_hellman(relay_ntor_key);
    let p1 = phase1(&bx, relay_ed_id, &x_pub, &b_pub, verification);
    // encrypted_msg = ENC(ENC_K1, CM)
    let mut encrypted = client_message.to_vec();
    aes256_ctr(&p1.enc_k1, &mut encrypted);
    // msg_mac = MAC_msgmac(MAC_K1, ID | B | X | encrypted_msg)
    let mut mac = p1.mac;
    Digest::update(&mut mac, &encrypted);
    let msg_mac = h_finish(mac);

    // NODEID | KEYID | CLIENT_PK | MSG | MAC
    let mut out = Vec::with_capacity(NTOR_V3_CLIENT_MIN_LEN + encrypted.len());
    out.extend_from_slice(relay_ed_id);
    out.extend_from_slice(&b_pub);
    out.extend_from_slice(&x_pub);
    out.extend_from_slice(&encrypted);
    out.extend_from_slice(&msg_mac);
    let state = NtorV3ClientState {
        relay_id: *relay_ed_id,
        relay_b: b_pub,
        x,
        x_pub,
        bx,
        msg_mac,
        verification: verification.to_vec(),
    };
    (state, out)
}

/// Finish an ntor-v3 handshake with the server's CREATED2 HDATA; returns
/// the decrypted server message and the 72 bytes of tor1 key material.
/// [prop 332, "Client operation, phase 2"]
pub fn client_finish(
    state: &NtorV3ClientState,
    reply: &[u8],
) -> Result<(Vec<u8>, [u8; KEY_MATERIAL_LEN]), HandshakeError> {
    let mut km = [0u8; KEY_MATERIAL_LEN];
    let sm = client_finish_xof(state, reply, &mut km)?;
    Ok((sm, km))
}

/// What [`client_finish_with_nonce`] gives: the server message, the tor1
/// key material and the circuit nonce KH.
pub type ClientFinished = (
    Vec<u8>,
    [u8; KEY_MATERIAL_LEN],
    [u8; crate::ntor::NONCE_LEN],
);

/// [`client_finish`], also returning the circuit nonce KH (the 20 bytes of
/// KEYSTREAM after the key material, as C Tor keeps them).
pub fn client_finish_with_nonce(
    state: &NtorV3ClientState,
    reply: &[u8],
) -> Result<ClientFinished, HandshakeError> {
    let mut ks = [0u8; KEY_MATERIAL_LEN + crate::ntor::NONCE_LEN];
    let sm = client_finish_xof(state, reply, &mut ks)?;
    let mut km = [0u8; KEY_MATERIAL_LEN];
    km.copy_from_slice(&ks[..KEY_MATERIAL_LEN]);
    let mut nonce = [0u8; crate::ntor::NONCE_LEN];
    nonce.copy_from_slice(&ks[KEY_MATERIAL_LEN..]);
    Ok((sm, km, nonce))
}

/// [`client_finish`], returning KEYSTREAM as far as CGO reads it (split
/// by [`cgo_keys`], or tor1's 72 bytes and KH at its start).
pub fn client_finish_keystream(
    state: &NtorV3ClientState,
    reply: &[u8],
) -> Result<(Vec<u8>, zeroize::Zeroizing<[u8; KEYSTREAM_LEN]>), HandshakeError> {
    let mut ks = zeroize::Zeroizing::new([0u8; KEYSTREAM_LEN]);
    let sm = client_finish_xof(state, reply, &mut ks[..])?;
    Ok((sm, ks))
}

/// [`client_finish`], writing as much KEYSTREAM as `keystream` holds.
fn client_finish_xof(
    state: &NtorV3ClientState,
    reply: &[u8],
    keystream: &mut [u8],
) -> Result<Vec<u8>, HandshakeError> {
    let bad_len = HandshakeError::BadLength(reply.len());
    // Y(32) | AUTH(32) | MSG
    let (y_bytes, rest) = reply.split_first_chunk::<32>().ok_or(bad_len)?;
    let (auth_got, msg) = rest.split_first_chunk::<32>().ok_or(bad_len)?;
    let y_pub = PublicKey::from(*y_bytes);
    // Yx = EXP(Y, x)
    let yx = state.x.diffie_hellman(&y_pub);
    let mut fin = final_phase(
        &yx,
        &state.bx,
        &state.relay_id,
        &state.relay_b,
        &state.x_pub,
        y_bytes,
        &state.verification,
    );
    let expected = auth(
        &fin.verify,
        &state.relay_id,
        &state.relay_b,
        y_bytes,
        &state.x_pub,
        &state.msg_mac,
        msg,
    );
    // "If AUTH_expected is equal to AUTH, then the handshake has succeeded."
    let auth_ok = expected[..].ct_eq(&auth_got[..]);
    let dh_ok = choice(yx.was_contributory()) & choice(state.bx.was_contributory());
    if !bool::from(dh_ok) {
        return Err(HandshakeError::ZeroDh);
    }
    if !bool::from(auth_ok) {
        return Err(HandshakeError::BadAuth);
    }
    // SM = DEC(ENC_KEY, MSG)
    let mut sm = msg.to_vec();
    aes256_ctr(&fin.enc_key, &mut sm);
    fin.keystream.read(keystream);
    Ok(sm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<const N: usize>(s: &str) -> [u8; N] {
        hex::decode(s).unwrap().try_into().unwrap()
    }

    /// Test vector from prop 332 §X.2 ("generated by a Python reference
    /// implementation"; the same values are in Arti tor-proto
    /// src/crypto/handshake/ntor_v3.rs `test_ntor3_testvec`).
    #[test]
    fn testvec_prop332() {
        let b: [u8; 32] = h("4051daa5921cfa2a1c27b08451324919538e79e788a81b38cbed097a5dff454a");
        let b_pub: [u8; 32] = h("f8307a2bc1870b00b828bb74dbb8fd88e632a6375ab3bcd1ae706aaa8b6cdd1d");
        let id: [u8; 32] = h("9fad2af287ef942632833d21f946c6260c33fae6172b60006e86e4a6911753a2");
        let x: [u8; 32] = h("b825a3719147bcbe5fb1d0b0fcb9c09e51948048e2e3283d2ab7b45b5ef38b49");
        let x_pub: [u8; 32] = h("252fe9ae91264c91d4ecb8501f79d0387e34ad8ca0f7c995184f7d11d5da4f46");
        let cm = hex::decode("68656c6c6f20776f726c64").unwrap();
        let ver = hex::decode("78797a7a79").unwrap();
        let y: [u8; 32] = h("4865a5b7689dafd978f529291c7171bc159be076b92186405d13220b80e2a053");
        let y_pub: [u8; 32] = h("4bf4814326fdab45ad5184f5518bd7fae25dc59374062698201a50a22954246d");
        let sm = hex::decode("486f6c61204d756e646f").unwrap();
        let client_hs = hex::decode(concat!(
            "9fad2af287ef942632833d21f946c6260c33fae6172b60006e86e4a6911753a2",
            "f8307a2bc1870b00b828bb74dbb8fd88e632a6375ab3bcd1ae706aaa8b6cdd1d",
            "252fe9ae91264c91d4ecb8501f79d0387e34ad8ca0f7c995184f7d11d5da4f46",
            "3bebd9151fd3b47c180abc",
            "9e044d53565f04d82bbb3bebed3d06cea65db8be9c72b68cd461942088502f67"
        ))
        .unwrap();
        let server_hs = hex::decode(concat!(
            "4bf4814326fdab45ad5184f5518bd7fae25dc59374062698201a50a22954246d",
            "2fc5f8773ca824542bc6cf6f57c7c29bbf4e5476461ab130c5b18ab0a9127665",
            "1202c3e1e87c0d32054c"
        ))
        .unwrap();
        let keystream = hex::decode(concat!(
            "9c19b631fd94ed86a817e01f6c80b0743a43f5faebd39cfaa8b00fa8bcc65c3b",
            "feaa403d91acbd68a821bf6ee8504602b094a254392a07737d5662768c7a9fb1",
            "b2814bb34780eaee6e867c773e28c212ead563e98a1cd5d5b4576f5ee61c59bd",
            "e025ff2851bb19b721421694f263818e3531e43a9e4e3e2c661e2ad547d8984c",
            "aa28ebecd3e4525452299be26b9185a20a90ce1eac20a91f2832d731b54502b0",
            "9749b5a2a2949292f8cfcbeffb790c7790ed935a9d251e7e336148ea83b063a5",
            "618fcff674a44581585fd22077ca0e52c59a24347a38d1a1ceebddbf238541f2",
            "26b8f88d0fb9c07a1bcd2ea764bbbb5dacdaf5312a14c0b9e4f06309b0333b4a"
        ))
        .unwrap();

        let relay = NtorSecretKey::from_secret(StaticSecret::from(b));
        assert_eq!(relay.public.as_bytes(), &b_pub);

        let (state, cmsg) = client_start(&id, &relay.public, &cm, &ver, x);
        assert_eq!(state.x_pub, x_pub);
        assert_eq!(cmsg, client_hs);

        // Public API: reply and the first 72 bytes of KEYSTREAM.
        let mut seen = None;
        let r = server_handshake(&[&relay], &id, &cmsg, &ver, y, |m| {
            seen = Some(m.to_vec());
            sm.clone()
        })
        .unwrap();
        assert_eq!(seen.as_deref(), Some(&cm[..]));
        assert_eq!(r.client_message, cm);
        assert_eq!(&r.reply[..32], &y_pub);
        assert_eq!(r.reply, server_hs);
        assert_eq!(r.key_material[..], keystream[..72]);

        let (got_sm, c_km) = client_finish(&state, &r.reply).unwrap();
        assert_eq!(got_sm, sm);
        assert_eq!(c_km[..], keystream[..72]);

        // All 256 published bytes of KEYSTREAM, both sides.
        let mut s_ks = [0u8; 256];
        let (reply, _) =
            server_handshake_xof(&[&relay], &id, &cmsg, &ver, y, |_| sm.clone(), &mut s_ks)
                .unwrap();
        assert_eq!(reply, server_hs);
        assert_eq!(s_ks[..], keystream[..]);
        let mut c_ks = [0u8; 256];
        client_finish_xof(&state, &reply, &mut c_ks).unwrap();
        assert_eq!(c_ks[..], keystream[..]);
    }

    fn key(byte: u8) -> NtorSecretKey {
        NtorSecretKey::from_secret(StaticSecret::from([byte; 32]))
    }

    #[test]
    fn roundtrip_circuit_extend() {
        let id = [0x11u8; 32];
        let current = key(1);
        let previous = key(2);
        let keys = [&current, &previous];
        for k in keys {
            // A CC request extension (type 1, len 0) in a 1-extension list.
            let (st, cmsg) = client_start(
                &id,
                &k.public,
                &[1, 1, 0],
                CIRCUIT_EXTEND_VERIFICATION,
                crate::random_array(),
            );
            let r = server_handshake(
                &keys,
                &id,
                &cmsg,
                CIRCUIT_EXTEND_VERIFICATION,
                crate::random_array(),
                |_| vec![0],
            )
            .unwrap();
            assert_eq!(r.client_message, [1, 1, 0]);
            assert_eq!(r.reply.len(), 65);
            let (sm, km) = client_finish(&st, &r.reply).unwrap();
            assert_eq!(sm, [0]);
            assert_eq!(km, r.key_material);
            // The longer KEYSTREAM of a CGO hop: the same on both sides,
            // tor1's key material and KH its first 92 bytes.
            let (_, ks) = client_finish_keystream(&st, &r.reply).unwrap();
            assert_eq!(ks[..72], r.key_material);
            assert_eq!(ks[72..92], r.nonce);
            let (ckm, cn) = cgo_keys(&ks);
            let (skm, sn) = r.cgo_keys();
            assert_eq!((&ckm[..], cn), (&skm[..], sn));
            assert_eq!(&ckm[..], &ks[..160]);
            assert_eq!(cn, ks[160..180]);
        }
    }

    #[test]
    fn failures() {
        let id = [0x11u8; 32];
        let k = key(1);
        let other = key(3);
        let keys = [&k];
        let ver = CIRCUIT_EXTEND_VERIFICATION;
        let seed = [9u8; 32];
        let reply = |_: &[u8]| vec![0u8];

        let (_, cmsg) = client_start(&id, &k.public, &[0], ver, [4u8; 32]);
        assert!(server_handshake(&keys, &id, &cmsg, ver, seed, reply).is_ok());
        // Empty client message is fine (128 bytes); 127 is not.
        let (_, empty) = client_start(&id, &k.public, &[], ver, [4u8; 32]);
        assert_eq!(empty.len(), NTOR_V3_CLIENT_MIN_LEN);
        assert!(server_handshake(&keys, &id, &empty, ver, seed, reply).is_ok());
        assert_eq!(
            server_handshake(&keys, &id, &empty[..127], ver, seed, reply).err(),
            Some(HandshakeError::BadLength(127))
        );
        assert_eq!(
            server_handshake(&keys, &[0x12; 32], &cmsg, ver, seed, reply).err(),
            Some(HandshakeError::BadNodeId)
        );
        let (_, cmsg_other) = client_start(&id, &other.public, &[0], ver, [4u8; 32]);
        assert_eq!(
            server_handshake(&keys, &id, &cmsg_other, ver, seed, reply).err(),
            Some(HandshakeError::UnknownKey)
        );
        // Tampered message, tampered MAC, different verification string.
        for i in [96, cmsg.len() - 1] {
            let mut bad = cmsg.clone();
            bad[i] ^= 0x80;
            assert_eq!(
                server_handshake(&keys, &id, &bad, ver, seed, reply).err(),
                Some(HandshakeError::BadMac)
            );
        }
        assert_eq!(
            server_handshake(&keys, &id, &cmsg, b"circuit extenD", seed, reply).err(),
            Some(HandshakeError::BadMac)
        );
        // Low-order X: the phase-1 keys would be public; refused before the
        // MAC is even considered.
        let mut low = cmsg.clone();
        low[64..96].fill(0);
        assert_eq!(
            server_handshake(&keys, &id, &low, ver, seed, reply).err(),
            Some(HandshakeError::ZeroDh)
        );
        // reply_for is not called for a message that fails to authenticate.
        let mut bad = cmsg.clone();
        bad[100] ^= 1;
        let r = server_handshake(&keys, &id, &bad, ver, seed, |_| -> Vec<u8> {
            panic!("reply_for called on an unauthenticated message")
        });
        assert!(r.is_err());

        // Client side.
        let (st, cmsg) = client_start(&id, &k.public, &[0], ver, [4u8; 32]);
        let r = server_handshake(&keys, &id, &cmsg, ver, seed, reply).unwrap();
        assert_eq!(
            client_finish(&st, &r.reply[..63]).err(),
            Some(HandshakeError::BadLength(63))
        );
        for i in [40, 64] {
            let mut bad = r.reply.clone();
            bad[i] ^= 1;
            assert_eq!(
                client_finish(&st, &bad).err(),
                Some(HandshakeError::BadAuth)
            );
        }
        let mut bad = r.reply.clone();
        bad[..32].fill(0);
        assert_eq!(client_finish(&st, &bad).err(), Some(HandshakeError::ZeroDh));
        // The relay answered under another verification string.
        let r2 = server_handshake(&keys, &id, &cmsg, ver, seed, reply).unwrap();
        let (st_other_ver, _) = client_start(&id, &k.public, &[0], b"other", [4u8; 32]);
        assert_eq!(
            client_finish(&st_other_ver, &r2.reply).err(),
            Some(HandshakeError::BadAuth)
        );
    }
}
