//! UIV+ (a relay's ENC_UIV, a client's DEC_UIV, the key update, [`super`]) on x86-64 with
//! AES-NI, VAES, PCLMULQDQ and VPCLMULQDQ (AVX-512): POLYVAL four blocks
//! per instruction, eight blocks per reduction; the PRF's counter mode
//! through [`crate::aes_ctr`]'s VAES keystream. Same results as the
//! portable code (unit tests compare them, and the test vectors run
//! through whichever the processor takes).
//!
//! POLYVAL's product `dot(a, b) = a·b·x⁻¹²⁸` (RFC 8452) is a carry-less
//! 256-bit product and one Montgomery reduction; the reduction is linear,
//! so eight blocks' products (each by its power of the key) are summed
//! first and reduced once, `R = X₁·H⁸ ⊕ X₂·H⁷ ⊕ … ⊕ X₈·H¹`, the powers
//! being `dot`-powers made when the key is set. The 32 blocks of a cell's
//! tweak are four such chunks, reduced side by side and joined as
//! `R₀·H²⁴ ⊕ R₁·H¹⁶ ⊕ R₂·H⁸ ⊕ R₃`: no chunk waits for the one before.

use core::arch::x86_64::*;
use zeroize::Zeroize;

use super::{BODY_LEN, TAG_LEN, UIV_KEYS_LEN};
use crate::aes_ctr::vaes;

/// True if this processor runs this backend (the standard library caches
/// CPUID).
pub(super) fn available() -> bool {
    vaes::available()
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("pclmulqdq")
        && std::is_x86_feature_detected!("vpclmulqdq")
}

/// UIV+'s keys in the forms this backend uses.
#[derive(Clone)]
pub(super) struct FastUiv {
    /// The ET's AES-128 round keys (KB).
    kb: [[u8; 16]; 11],
    /// KB's decryption round keys (the equivalent inverse cipher's), for
    /// a client's layer; `None` for a relay's, which only encrypts.
    kb_dec: Option<[[u8; 16]; 11]>,
    /// The ET's POLYVAL key KU as its powers H⁸, H⁷, …, H¹ (H¹ = KU).
    ku: [[u8; 16]; 8],
    /// H¹⁶ and H²⁴, which join the tweak's four chunks.
    ku_far: [[u8; 16]; 2],
    /// The PRF's AES-128 round keys (K).
    k: [[u8; 16]; 11],
    /// The PRF's POLYVAL key B.
    b: [u8; 16],
    /// KB ‖ KU ‖ K ‖ B as they came (what the test vectors show).
    #[cfg(test)]
    pub(super) raw: [u8; UIV_KEYS_LEN],
}

impl Drop for FastUiv {
    fn drop(&mut self) {
        self.kb.zeroize();
        if let Some(d) = self.kb_dec.as_mut() {
            d.zeroize();
        }
        self.ku.zeroize();
        self.ku_far.zeroize();
        self.k.zeroize();
        self.b.zeroize();
    }
}

impl FastUiv {
    /// The keys KB ‖ KU ‖ K ‖ B; `decrypts`: a client's layer (DEC_UIV).
    /// Panics if the processor lacks what [`available`] checks.
    pub(super) fn new(raw: &[u8; UIV_KEYS_LEN], decrypts: bool) -> Self {
        assert!(
            available(),
            "FastUiv needs AES-NI, VAES, AVX-512 and VPCLMULQDQ"
        );
        let part = |i: usize| -> [u8; 16] { raw[16 * i..16 * i + 16].try_into().expect("16") };
        // SAFETY: the processor has AES-NI, SSE2 and PCLMULQDQ (asserted).
        let (kb, (ku, ku_far), k) = unsafe {
            (
                vaes::expand_key(&part(0)),
                powers(&part(1)),
                vaes::expand_key(&part(2)),
            )
        };
        // SAFETY: AES-NI (asserted).
        let kb_dec = decrypts.then(|| unsafe { inverse_keys(&kb) });
        FastUiv {
            kb,
            kb_dec,
            ku,
            ku_far,
            k,
            b: part(3),
            #[cfg(test)]
            raw: *raw,
        }
    }

    /// ENC_UIV on `body` with tweak (`h`, `cmd`), in place.
    #[inline]
    pub(super) fn encrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        // SAFETY: `new` asserted every feature these functions enable.
        unsafe { encrypt(self, h, cmd, body) }
    }

    /// DEC_UIV on `body` with tweak (`h`, `cmd`), in place. Panics on a
    /// relay's keys (made without `decrypts`).
    #[inline]
    pub(super) fn decrypt(&self, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
        let dk = self.kb_dec.as_ref().expect("a client's keys");
        // SAFETY: `new` asserted every feature these functions enable.
        unsafe { decrypt(self, dk, h, cmd, body) }
    }

    /// UPDATE_UIV on nonce input `n`: the keys are replaced in place;
    /// returns the new nonce.
    pub(super) fn update(&mut self, n: &[u8; TAG_LEN]) -> [u8; TAG_LEN] {
        let mut out = [0u8; 80];
        // SAFETY: as in `encrypt`; 80 bytes are five counter blocks, well
        // inside the PRF's 64-block window (no carry out of the low bits).
        unsafe {
            let ctr = prf_counter(&self.b, _mm_loadu_si128(n.as_ptr().cast())) + 31;
            vaes::xor_keystream(&self.k, ctr, &mut out);
        }
        let mut raw = [0u8; UIV_KEYS_LEN];
        raw.copy_from_slice(&out[..UIV_KEYS_LEN]);
        *self = FastUiv::new(&raw, self.kb_dec.is_some());
        raw.zeroize();
        let nonce: [u8; 16] = out[UIV_KEYS_LEN..].try_into().expect("16");
        out.zeroize();
        nonce
    }
}

/// Load 16 bytes.
#[inline]
#[target_feature(enable = "sse2")]
fn load(b: &[u8; 16]) -> __m128i {
    // SAFETY: 16 readable bytes; unaligned load.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// POLYVAL's Montgomery reduction of the 256-bit carry-less product
/// `hi ‖ lo`: `(hi ‖ lo)·x⁻¹²⁸ mod x¹²⁸ + x¹²⁷ + x¹²⁶ + x¹²¹ + 1`, two
/// folds by the polynomial's constant (its high qword 0xc2 << 56, low 1).
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
    let poly = _mm_set_epi64x(0xc200_0000_0000_0000u64 as i64, 1);
    let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    _mm_xor_si128(lo, hi)
}

/// POLYVAL's product `dot(a, b)`.
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
fn dot(a: __m128i, b: __m128i) -> __m128i {
    let lo = _mm_clmulepi64_si128::<0x00>(a, b);
    let hi = _mm_clmulepi64_si128::<0x11>(a, b);
    let mid = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x10>(a, b),
        _mm_clmulepi64_si128::<0x01>(a, b),
    );
    reduce(
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// The `dot`-powers H⁸ … H¹ of key `h`, and H¹⁶, H²⁴.
#[target_feature(enable = "pclmulqdq,sse2")]
fn powers(h: &[u8; 16]) -> ([[u8; 16]; 8], [[u8; 16]; 2]) {
    let h1 = load(h);
    let h2 = dot(h1, h1);
    let h3 = dot(h2, h1);
    let h4 = dot(h2, h2);
    let h8 = dot(h4, h4);
    let h16 = dot(h8, h8);
    let p = [h8, dot(h4, h3), dot(h4, h2), dot(h4, h1), h4, h3, h2, h1];
    let store = |v: __m128i| {
        let mut o = [0u8; 16];
        // SAFETY: 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), v) };
        o
    };
    (p.map(store), [store(h16), store(dot(h16, h8))])
}

/// The XOR of a register's four 128-bit lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn fold(v: __m512i) -> __m128i {
    let x = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
    _mm_xor_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x))
}

/// The unreduced product of each 128-bit lane of `a` by the same lane of
/// `b`, summed over the lanes: (low, high) halves of 256 bits.
#[inline]
#[target_feature(enable = "avx512f,avx2,vpclmulqdq,sse2")]
fn mul_sum(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> (__m128i, __m128i) {
    let lo = _mm512_xor_si512(
        _mm512_clmulepi64_epi128::<0x00>(a, b),
        _mm512_clmulepi64_epi128::<0x00>(c, d),
    );
    let hi = _mm512_xor_si512(
        _mm512_clmulepi64_epi128::<0x11>(a, b),
        _mm512_clmulepi64_epi128::<0x11>(c, d),
    );
    let mid = _mm512_xor_si512(
        _mm512_xor_si512(
            _mm512_clmulepi64_epi128::<0x01>(a, b),
            _mm512_clmulepi64_epi128::<0x10>(a, b),
        ),
        _mm512_xor_si512(
            _mm512_clmulepi64_epi128::<0x01>(c, d),
            _mm512_clmulepi64_epi128::<0x10>(c, d),
        ),
    );
    let (lo, hi, mid) = (fold(lo), fold(hi), fold(mid));
    (
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// One chunk of eight blocks (`a`, then `b`) by H⁸ … H¹, reduced.
#[inline]
#[target_feature(enable = "avx512f,avx2,vpclmulqdq,pclmulqdq,sse2")]
fn chunk(a: __m512i, b: __m512i, p_hi: __m512i, p_lo: __m512i) -> __m128i {
    let (lo, hi) = mul_sum(a, p_hi, b, p_lo);
    reduce(lo, hi)
}

/// The unreduced 256-bit product of two blocks.
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
fn mul(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
    let lo = _mm_clmulepi64_si128::<0x00>(a, b);
    let hi = _mm_clmulepi64_si128::<0x11>(a, b);
    let mid = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x10>(a, b),
        _mm_clmulepi64_si128::<0x01>(a, b),
    );
    (
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// ET's mask: POLYVAL(KU) over `h ‖ cmd ‖ X_R ‖ 00 00` (32 blocks), `X_R`
/// read where it sits in `body` (from byte 16).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,vpclmulqdq,pclmulqdq,sse2")]
fn et_mask(k: &FastUiv, h: &[u8; TAG_LEN], cmd: u8, body: &[u8; BODY_LEN]) -> __m128i {
    // The tweak's first 64 bytes: h, cmd, X_R's first 47 bytes.
    let mut head = [0u8; 64];
    head[..16].copy_from_slice(h);
    head[16] = cmd;
    head[17..].copy_from_slice(&body[16..63]);
    // Tweak byte 64 + i is body byte 63 + i: the other seven registers
    // come straight from the body, the last one 62 bytes and two zeros.
    let p = body.as_ptr();
    // SAFETY: `head` is 64 readable bytes; registers 1–6 read body bytes
    // 63..447 and the last one, under a 62-byte mask, 447..509: all inside
    // the 509-byte body (masked-off bytes are not read).
    let t: [__m512i; 8] = unsafe {
        [
            _mm512_loadu_si512(head.as_ptr().cast()),
            _mm512_loadu_si512(p.add(63).cast()),
            _mm512_loadu_si512(p.add(127).cast()),
            _mm512_loadu_si512(p.add(191).cast()),
            _mm512_loadu_si512(p.add(255).cast()),
            _mm512_loadu_si512(p.add(319).cast()),
            _mm512_loadu_si512(p.add(383).cast()),
            _mm512_maskz_loadu_epi8((1u64 << 62) - 1, p.add(447).cast()),
        ]
    };
    // SAFETY: `k.ku` is 128 readable bytes.
    let (p_hi, p_lo) = unsafe {
        (
            _mm512_loadu_si512(k.ku.as_ptr().cast()),
            _mm512_loadu_si512(k.ku.as_ptr().add(4).cast()),
        )
    };
    let (r0, r1, r2, r3) = (
        chunk(t[0], t[1], p_hi, p_lo),
        chunk(t[2], t[3], p_hi, p_lo),
        chunk(t[4], t[5], p_hi, p_lo),
        chunk(t[6], t[7], p_hi, p_lo),
    );
    let h8 = load(&k.ku[0]);
    let (a_lo, a_hi) = mul(r0, load(&k.ku_far[1]));
    let (b_lo, b_hi) = mul(r1, load(&k.ku_far[0]));
    let (c_lo, c_hi) = mul(r2, h8);
    let lo = _mm_xor_si128(_mm_xor_si128(a_lo, b_lo), c_lo);
    let hi = _mm_xor_si128(_mm_xor_si128(a_hi, b_hi), c_hi);
    _mm_xor_si128(reduce(lo, hi), r3)
}

/// One AES-128 block encryption with round keys `rk`.
#[inline]
#[target_feature(enable = "aes,sse2")]
fn aes_block(rk: &[[u8; 16]; 11], b: __m128i) -> __m128i {
    let mut s = _mm_xor_si128(b, load(&rk[0]));
    for k in &rk[1..10] {
        s = _mm_aesenc_si128(s, load(k));
    }
    _mm_aesenclast_si128(s, load(&rk[10]))
}

/// AES-128 decryption round keys from encryption ones (the equivalent
/// inverse cipher: reversed, InvMixColumns on the middle nine).
#[target_feature(enable = "aes,sse2")]
fn inverse_keys(rk: &[[u8; 16]; 11]) -> [[u8; 16]; 11] {
    let mut dk = [[0u8; 16]; 11];
    dk[0] = rk[10];
    dk[10] = rk[0];
    for i in 1..10 {
        let k = _mm_aesimc_si128(load(&rk[10 - i]));
        // SAFETY: 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(dk[i].as_mut_ptr().cast(), k) };
    }
    dk
}

/// One AES-128 block decryption with decryption round keys `dk`.
#[inline]
#[target_feature(enable = "aes,sse2")]
fn aes_block_dec(dk: &[[u8; 16]; 11], b: __m128i) -> __m128i {
    let mut s = _mm_xor_si128(b, load(&dk[0]));
    for k in &dk[1..10] {
        s = _mm_aesdec_si128(s, load(k));
    }
    _mm_aesdeclast_si128(s, load(&dk[10]))
}

/// The PRF's first counter block for input `t`: POLYVAL(B, t) with the low
/// six bits of its last byte cleared, as a big-endian number.
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
fn prf_counter(b: &[u8; 16], t: __m128i) -> u128 {
    let mut iv = [0u8; 16];
    // SAFETY: 16 writable bytes; unaligned store.
    unsafe { _mm_storeu_si128(iv.as_mut_ptr().cast(), dot(t, load(b))) };
    iv[15] &= 0xc0;
    u128::from_be_bytes(iv)
}

/// ENC_UIV: `Y_L = ET(X_L)` with the mask over (`h`, `cmd`, `X_R`), then
/// `X_R ⊕= PRF(Y_L)`.
#[target_feature(enable = "aes,sse2,avx2,avx512f,avx512bw,vaes,pclmulqdq,vpclmulqdq")]
fn encrypt(k: &FastUiv, h: &[u8; TAG_LEN], cmd: u8, body: &mut [u8; BODY_LEN]) {
    let mask = et_mask(k, h, cmd, body);
    let (x_l, x_r) = body.split_at_mut(TAG_LEN);
    let x_l: &mut [u8; 16] = x_l.try_into().expect("16");
    let y = _mm_xor_si128(aes_block(&k.kb, _mm_xor_si128(load(x_l), mask)), mask);
    // SAFETY: 16 writable bytes; unaligned store.
    unsafe { _mm_storeu_si128(x_l.as_mut_ptr().cast(), y) };
    let ctr = prf_counter(&k.b, y);
    // SAFETY: 493 bytes are 31 counter blocks, within the keystream's batch
    // and the PRF's 64-block window (the counter's low 64 bits never carry).
    unsafe { vaes::xor_keystream(&k.k, ctr, x_r) };
}

/// DEC_UIV: `X_R = Y_R ⊕ PRF(Y_L)`, then `X_L = ET⁻¹(Y_L)` with the mask
/// over (`h`, `cmd`, `X_R`).
#[target_feature(enable = "aes,sse2,avx2,avx512f,avx512bw,vaes,pclmulqdq,vpclmulqdq")]
fn decrypt(
    k: &FastUiv,
    dk: &[[u8; 16]; 11],
    h: &[u8; TAG_LEN],
    cmd: u8,
    body: &mut [u8; BODY_LEN],
) {
    let y_l: [u8; 16] = body[..TAG_LEN].try_into().expect("16");
    let y = load(&y_l);
    let ctr = prf_counter(&k.b, y);
    // SAFETY: as in `encrypt`.
    unsafe { vaes::xor_keystream(&k.k, ctr, &mut body[TAG_LEN..]) };
    let mask = et_mask(k, h, cmd, body);
    let x = _mm_xor_si128(aes_block_dec(dk, _mm_xor_si128(y, mask)), mask);
    // SAFETY: 16 writable bytes; unaligned store.
    unsafe { _mm_storeu_si128(body.as_mut_ptr().cast(), x) };
}
