//! Counter Galois Onion (CGO): the relay cell crypto of proposal 359,
//! subprotocol Relay=6, as tor 0.4.9 does it (`relay_crypto_cgo.c`), for a
//! relay's keyed circuit half ([`CgoRelayCrypto`]) and for the client end
//! of one hop ([`CgoClientLayer`], used by tests and the load generator).
//!
//! The construction is UIV+ over a 509-byte cell body `X_L (16) ‖ X_R
//! (493)`, with AES-128 and POLYVAL (RFC 8452):
//! - ET, a tweakable block cipher on `X_L` (LRW2): `mask = POLYVAL(KU, H ‖
//!   CMD ‖ X_R ‖ 00 00)`, `Y_L = AES(KB, X_L ⊕ mask) ⊕ mask`, the tweak
//!   being the previous cell's tag `H` (T'), the channel command byte `CMD`
//!   and the plaintext `X_R`;
//! - a PRF on `Y_L`: `iv = POLYVAL(B, Y_L)` with the low six bits of its
//!   last byte cleared, AES-128-CTR with key `K` from `iv` (its 31 blocks
//!   XORed into `X_R`), from `iv + 31` the 80 bytes of a key update.
//!
//! A relay only ever encrypts (ENC_UIV) in both directions; a client only
//! decrypts. A cell is for us when its first 16 bytes after our layer equal
//! our nonce; then, and for every cell we originate, all four keys and the
//! nonce are replaced from the PRF (forward secrecy per message). Every
//! cell's output tag is the next cell's tweak in its direction, so the
//! cells of a direction must pass through this layer in wire order.
//!
//! Checked against tor's and arti's test vectors (`testdata/`). The hot
//! path works in place and never allocates.

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::{Aes128Dec, Aes128Enc};
use polyval::universal_hash::UniversalHash;
use polyval::Polyval;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// Length of a relay cell body (CELL_PAYLOAD_LEN).
pub const BODY_LEN: usize = 509;
/// Length of a CGO tag: the first bytes of a body, and a SENDME's tag.
pub const TAG_LEN: usize = 16;
/// `X_R`: the body after the tag.
const RIGHT_LEN: usize = BODY_LEN - TAG_LEN;
/// One direction's key material: KB, KU, K, B (16 bytes each), the nonce.
pub const DIR_KEY_LEN: usize = 80;
/// A hop's key material from the circuit handshake: forward (toward the
/// exit) then backward. [tor's `relay_crypto_key_material_len` for CGO]
pub const KEY_MATERIAL_LEN: usize = 2 * DIR_KEY_LEN;
/// The four keys of UIV+ (J = KB ‖ KU, S = K ‖ B).
const UIV_KEYS_LEN: usize = 64;
/// Blocks of the PRF's stream before the key update's part (t = 1).
const T1_OFFSET: u128 = 31;
/// Blocks of keystream that cover `X_R`.
const RIGHT_BLOCKS: usize = RIGHT_LEN.div_ceil(16);

type Block = GenericArray<u8, aes::cipher::consts::U16>;

/// The keys of UIV+ in use: the ET's AES key (KB) and POLYVAL key (KU), the
/// PRF's AES key (K) and POLYVAL key (B).
#[derive(Clone)]
struct UivKeys {
    /// KB ‖ KU ‖ K ‖ B as they came (what the test vectors show).
    #[cfg(test)]
    raw: Zeroizing<[u8; UIV_KEYS_LEN]>,
    kb: Aes128Enc,
    /// AES decryption with KB: a client's only (relays never decrypt).
    kb_dec: Option<Aes128Dec>,
    ku: Polyval,
    k: Aes128Enc,
    b: Polyval,
}

impl UivKeys {
    fn new(raw: &[u8; UIV_KEYS_LEN], decrypts: bool) -> Self {
        let kb = Block::from_slice(&raw[0..16]);
        UivKeys {
            #[cfg(test)]
            raw: Zeroizing::new(*raw),
            kb: Aes128Enc::new(kb),
            kb_dec: decrypts.then(|| Aes128Dec::new(kb)),
            ku: Polyval::new(Block::from_slice(&raw[16..32])),
            k: Aes128Enc::new(Block::from_slice(&raw[32..48])),
            b: Polyval::new(Block::from_slice(&raw[48..64])),
        }
    }

    /// ET's mask for tweak (`h`, `cmd`, `x_r`): POLYVAL(KU) over `h`, then
    /// `cmd ‖ x_r` zero-padded (512 bytes in all).
    #[inline]
    fn et_mask(&self, h: &[u8; TAG_LEN], cmd: u8, x_r: &[u8]) -> [u8; 16] {
        let mut p = self.ku.clone();
        let mut first = [Block::default(); 2];
        first[0].copy_from_slice(h);
        first[1][0] = cmd;
        first[1][1..].copy_from_slice(&x_r[..15]);
        p.update(&first);
        p.update_padded(&x_r[15..]);
        p.finalize().into()
    }

    /// The PRF's first counter block for input `t`: POLYVAL(B, t) with the
    /// low six bits of byte 15 cleared (a 64-block window the stream never
    /// leaves), as a big-endian counter.
    #[inline]
    fn prf_counter(&self, t: &[u8; TAG_LEN]) -> u128 {
        let mut p = self.b.clone();
        p.update(&[*Block::from_slice(t)]);
        let mut iv: [u8; 16] = p.finalize().into();
        iv[15] &= 0xc0;
        u128::from_be_bytes(iv)
    }

    /// XOR `data` (at most [`RIGHT_BLOCKS`] blocks) with AES-CTR(K) from
    /// counter block `ctr`.
    #[inline]
    fn xor_ctr(&self, ctr: u128, data: &mut [u8]) {
        let mut ks = [Block::default(); RIGHT_BLOCKS];
        let n = data.len().div_ceil(16);
        for (i, b) in ks[..n].iter_mut().enumerate() {
            b.copy_from_slice(&ctr.wrapping_add(i as u128).to_be_bytes());
        }
        self.k.encrypt_blocks(&mut ks[..n]);
        for (d, k) in data.chunks_mut(16).zip(&ks[..n]) {
            for (x, y) in d.iter_mut().zip(k) {
                *x ^= *y;
            }
        }
        ks.zeroize();
    }

    /// ENC_UIV: the relay's operation on a body, in place.
    #[inline]
    fn encrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        let (x_l, x_r) = body.split_at_mut(TAG_LEN);
        let mask = self.et_mask(h, cmd, x_r);
        let mut y = *Block::from_slice(x_l);
        xor16(&mut y, &mask);
        self.kb.encrypt_block(&mut y);
        xor16(&mut y, &mask);
        x_l.copy_from_slice(&y);
        let ctr = self.prf_counter(y.as_ref());
        self.xor_ctr(ctr, x_r);
    }

    /// DEC_UIV: the client's operation on a body, in place.
    fn decrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        let dec = self
            .kb_dec
            .as_ref()
            .expect("a client's layer keeps the AES decryption key");
        let (y_l, y_r) = body.split_at_mut(TAG_LEN);
        let ctr = self.prf_counter(&y_l[..].try_into().expect("16 bytes"));
        self.xor_ctr(ctr, y_r);
        let mask = self.et_mask(h, cmd, y_r);
        let mut x = *Block::from_slice(y_l);
        xor16(&mut x, &mask);
        dec.decrypt_block(&mut x);
        xor16(&mut x, &mask);
        y_l.copy_from_slice(&x);
    }

    /// UPDATE_UIV: 80 bytes of the PRF's t = 1 stream on `n` are the next
    /// keys and nonce.
    fn update(&mut self, n: &[u8; TAG_LEN]) -> [u8; TAG_LEN] {
        let mut out = Zeroizing::new([0u8; DIR_KEY_LEN]);
        self.xor_ctr(self.prf_counter(n) + T1_OFFSET, &mut out[..]);
        let mut keys = Zeroizing::new([0u8; UIV_KEYS_LEN]);
        keys.copy_from_slice(&out[..UIV_KEYS_LEN]);
        *self = UivKeys::new(&keys, self.kb_dec.is_some());
        out[UIV_KEYS_LEN..].try_into().expect("16 bytes")
    }
}

#[inline]
fn xor16(a: &mut Block, b: &[u8; 16]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x ^= *y;
    }
}

/// UIV+'s keys in whichever form the processor runs fastest: on x86-64
/// with VAES and VPCLMULQDQ ([`fast`], a client's with AES decryption
/// keys too), else the portable one (boxed: several times the size). The
/// fast one stays inline: it is the hot path's.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Uiv {
    #[cfg(target_arch = "x86_64")]
    Fast(fast::FastUiv),
    Soft(Box<UivKeys>),
}

impl Uiv {
    fn new(raw: &[u8; UIV_KEYS_LEN], decrypts: bool) -> Self {
        #[cfg(target_arch = "x86_64")]
        if fast::available() {
            return Uiv::Fast(fast::FastUiv::new(raw, decrypts));
        }
        Uiv::Soft(Box::new(UivKeys::new(raw, decrypts)))
    }

    #[inline]
    fn encrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Uiv::Fast(f) => f.encrypt(h, cmd, body),
            Uiv::Soft(s) => s.encrypt(h, cmd, body),
        }
    }

    /// DEC_UIV: a client's layer only (made with `decrypts`).
    fn decrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        match self {
            Uiv::Soft(s) => s.decrypt(h, cmd, body),
            #[cfg(target_arch = "x86_64")]
            Uiv::Fast(f) => f.decrypt(h, cmd, body),
        }
    }

    fn update(&mut self, n: &[u8; TAG_LEN]) -> [u8; TAG_LEN] {
        match self {
            #[cfg(target_arch = "x86_64")]
            Uiv::Fast(f) => f.update(n),
            Uiv::Soft(s) => s.update(n),
        }
    }

    /// KB ‖ KU ‖ K ‖ B as they came.
    #[cfg(test)]
    fn raw(&self) -> &[u8] {
        match self {
            #[cfg(target_arch = "x86_64")]
            Uiv::Fast(f) => &f.raw,
            Uiv::Soft(s) => &s.raw[..],
        }
    }
}

/// One direction of one hop: the keys, the nonce a cell for its end
/// carries, and T' (the last cell's tag, the next one's tweak).
#[derive(Clone)]
struct CgoDir {
    keys: Uiv,
    nonce: Zeroizing<[u8; TAG_LEN]>,
    tprime: [u8; TAG_LEN],
}

impl CgoDir {
    /// From one direction's key material (keys, then nonce); T' starts at
    /// zero.
    fn new(material: &[u8], decrypts: bool) -> Self {
        let keys: &[u8; UIV_KEYS_LEN] = material[..UIV_KEYS_LEN].try_into().expect("64 bytes");
        CgoDir {
            keys: Uiv::new(keys, decrypts),
            nonce: Zeroizing::new(material[UIV_KEYS_LEN..DIR_KEY_LEN].try_into().expect("16")),
            tprime: [0; TAG_LEN],
        }
    }

    /// A relay's layer on a cell passing through (ENC_UIV); T' becomes its
    /// tag. True if it is for us (its tag is now our nonce).
    #[inline]
    fn relay_pass(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) -> bool {
        self.keys.encrypt(&self.tprime, cmd, body);
        self.tprime.copy_from_slice(&body[..TAG_LEN]);
        bool::from(self.tprime.ct_eq(&*self.nonce))
    }

    /// The keys and nonce after a cell for us or from us; `input` is what
    /// the PRF runs on.
    fn roll(&mut self, input: &[u8; TAG_LEN]) {
        *self.nonce = self.keys.update(input);
    }
}

/// A relay's CGO state for one hop: the forward direction (cells from the
/// client's side) and the backward one (cells toward the client, relayed
/// and originated alike, in the order they are sent).
#[derive(Clone)]
pub struct CgoRelayCrypto {
    fwd: CgoDir,
    back: CgoDir,
    /// The tag of the last cell for us or from us: what a SENDME carries.
    last_tag: [u8; TAG_LEN],
}

impl CgoRelayCrypto {
    /// From the handshake's key material (forward, then backward).
    pub fn from_key_material(km: &[u8; KEY_MATERIAL_LEN]) -> Self {
        CgoRelayCrypto {
            fwd: CgoDir::new(&km[..DIR_KEY_LEN], false),
            back: CgoDir::new(&km[DIR_KEY_LEN..], false),
            last_tag: [0; TAG_LEN],
        }
    }

    /// Our layer on a cell from the client's side, `cmd` being its channel
    /// command (RELAY or RELAY_EARLY). True if the cell is for us: its relay
    /// message starts at byte 16 (relay cell format V1), and the tag it
    /// came with is the one our SENDME will name. Otherwise the body goes
    /// on to the next hop as it now is.
    #[inline]
    pub fn forward(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) -> bool {
        let t_in: [u8; TAG_LEN] = body[..TAG_LEN].try_into().expect("16 bytes");
        if !self.fwd.relay_pass(cmd, body) {
            return false;
        }
        let old_nonce = *self.fwd.nonce;
        self.fwd.roll(&old_nonce);
        self.last_tag = t_in;
        true
    }

    /// Our layer on a cell from the next hop, toward the client.
    #[inline]
    pub fn backward(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) {
        self.back.relay_pass(cmd, body);
    }

    /// A cell we send toward the client: `body[16..]` holds its V1 relay
    /// message; the tag is overwritten. Returns the cell's tag (the one the
    /// client's SENDME for it will carry).
    pub fn originate_backward(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) -> [u8; TAG_LEN] {
        body[..TAG_LEN].copy_from_slice(&*self.back.nonce);
        self.back.relay_pass(cmd, body);
        let tag = self.back.tprime;
        self.back.roll(&tag);
        self.last_tag = tag;
        tag
    }

    /// The tag of the last cell for us or from us.
    pub fn last_tag(&self) -> [u8; TAG_LEN] {
        self.last_tag
    }
}

/// A client's CGO state for one hop: forward cells get its layer removed
/// in advance (DEC_UIV), backward ones peeled.
#[derive(Clone)]
pub struct CgoClientLayer {
    fwd: CgoDir,
    back: CgoDir,
}

impl CgoClientLayer {
    /// From the handshake's key material (forward, then backward).
    pub fn from_key_material(km: &[u8; KEY_MATERIAL_LEN]) -> Self {
        CgoClientLayer {
            fwd: CgoDir::new(&km[..DIR_KEY_LEN], true),
            back: CgoDir::new(&km[DIR_KEY_LEN..], true),
        }
    }

    /// This hop's layer on a cell for a hop beyond it.
    pub fn forward(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) {
        let t: [u8; TAG_LEN] = body[..TAG_LEN].try_into().expect("16 bytes");
        self.fwd.keys.decrypt(&self.fwd.tprime, cmd, body);
        self.fwd.tprime = t;
    }

    /// A cell for this hop (`body[16..]` its V1 message; the tag is
    /// overwritten): this hop's layer, then the hops before it with
    /// [`CgoClientLayer::forward`], nearest last. Returns the tag the
    /// relay's SENDME for it will carry.
    pub fn originate(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) -> [u8; TAG_LEN] {
        body[..TAG_LEN].copy_from_slice(&*self.fwd.nonce);
        self.forward(cmd, body);
        let n = *self.fwd.nonce;
        self.fwd.roll(&n);
        body[..TAG_LEN].try_into().expect("16 bytes")
    }

    /// Take a cell from the relay side into the chain without reading it:
    /// a client's backward T' is the tag as received, so a reader that
    /// needs only some cells (a benchmark's load) skips the rest.
    pub fn skip_backward(&mut self, body: &[u8; BODY_LEN]) {
        self.back.tprime.copy_from_slice(&body[..TAG_LEN]);
    }

    /// Peel this hop's layer off a cell from the relay side. `Some(tag)` if
    /// the cell came from this hop (its message at `body[16..]`).
    pub fn backward(&mut self, cmd: u8, body: &mut [u8; BODY_LEN]) -> Option<[u8; TAG_LEN]> {
        let t: [u8; TAG_LEN] = body[..TAG_LEN].try_into().expect("16 bytes");
        self.back.keys.decrypt(&self.back.tprime, cmd, body);
        self.back.tprime = t;
        if bool::from(body[..TAG_LEN].ct_eq(&*self.back.nonce)) {
            self.back.roll(&t);
            Some(t)
        } else {
            None
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod fast;
#[cfg(test)]
mod tests;
