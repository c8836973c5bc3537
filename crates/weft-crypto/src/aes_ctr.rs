//! AES-128 in counter mode with a big-endian 128-bit counter: the onion
//! layer's stream cipher ([`crate::relay_crypto`]). [tor-spec §0.3]
//!
//! On x86-64 processors with VAES and AVX-512 the keystream is made four
//! blocks per instruction, 32 blocks (one relay cell) in flight; everywhere
//! else RustCrypto's `ctr` over `aes` (AES-NI where present) does it. Both
//! give the same keystream (unit tests against NIST SP 800-38A and against
//! each other over runs of cell-sized and odd-sized calls). The hot path
//! allocates nothing: a relay cell's 509 bytes take one call.

use aes::Aes128;
use cipher::{KeyIvInit, StreamCipher};

/// RustCrypto's AES-128-CTR, big-endian counter.
type SoftCtr = ctr::Ctr128BE<Aes128>;

/// AES-128-CTR (big-endian 128-bit counter) whose keystream runs on across
/// calls.
#[derive(Clone)]
pub struct Aes128Ctr(Backend);

// A circuit half holds one per direction. The portable backend (the `aes`
// crate's, with its fixsliced fallback inline) is several times the size
// of the VAES one, so it is boxed: a circuit on a VAES processor does not
// pay for it, and elsewhere it costs one pointer per cell. (The VAES
// one stays inline: it is the hot path's.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Backend {
    #[cfg(target_arch = "x86_64")]
    Vaes(vaes::VaesCtr),
    Soft(Box<SoftCtr>),
}

impl Aes128Ctr {
    /// Key `key`, first counter block `iv` (tor: all zeros).
    pub fn new(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        #[cfg(target_arch = "x86_64")]
        if vaes::available() {
            return Aes128Ctr(Backend::Vaes(vaes::VaesCtr::new(key, iv)));
        }
        Self::new_soft(key, iv)
    }

    /// The portable backend, whatever the processor has (tests, and
    /// processors without VAES).
    pub fn new_soft(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        Aes128Ctr(Backend::Soft(Box::new(SoftCtr::new(key.into(), iv.into()))))
    }

    /// True if this cipher makes its keystream with VAES.
    pub fn is_vaes(&self) -> bool {
        match &self.0 {
            #[cfg(target_arch = "x86_64")]
            Backend::Vaes(_) => true,
            Backend::Soft(_) => false,
        }
    }

    /// XOR `data` with the next `data.len()` bytes of keystream.
    #[inline]
    pub fn apply_keystream(&mut self, data: &mut [u8]) {
        match &mut self.0 {
            #[cfg(target_arch = "x86_64")]
            Backend::Vaes(c) => c.apply_keystream(data),
            Backend::Soft(c) => c.apply_keystream(data),
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod vaes {
    use core::arch::x86_64::*;
    use zeroize::Zeroize;

    /// Blocks made per batch: a relay cell's 509 bytes need at most 32.
    const BATCH: usize = 32;

    /// True if this processor runs the VAES path (checked once; the
    /// standard library caches CPUID).
    pub(crate) fn available() -> bool {
        std::is_x86_feature_detected!("aes")
            && std::is_x86_feature_detected!("sse2")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("vaes")
    }

    /// The VAES backend's state.
    #[derive(Clone)]
    pub(super) struct VaesCtr {
        /// The 11 round keys.
        round_keys: [[u8; 16]; 11],
        /// The next counter block not yet turned into keystream.
        counter: u128,
        /// Keystream of the block last made, of which `used` bytes are spent.
        tail: [u8; 16],
        /// Bytes of `tail` already used (16: none left).
        used: usize,
    }

    impl Drop for VaesCtr {
        fn drop(&mut self) {
            self.round_keys.zeroize();
            self.tail.zeroize();
        }
    }

    impl VaesCtr {
        pub(super) fn new(key: &[u8; 16], iv: &[u8; 16]) -> Self {
            assert!(available(), "VaesCtr needs AES-NI, AVX-512F/BW and VAES");
            // SAFETY: the processor has AES-NI and SSE2 (checked above).
            let round_keys = unsafe { expand_key(key) };
            VaesCtr {
                round_keys,
                counter: u128::from_be_bytes(*iv),
                tail: [0; 16],
                used: 16,
            }
        }

        pub(super) fn apply_keystream(&mut self, data: &mut [u8]) {
            let mut done = 0;
            // Keystream left over from the last call's partial block.
            while self.used < 16 && done < data.len() {
                data[done] ^= self.tail[self.used];
                self.used += 1;
                done += 1;
            }
            while done < data.len() {
                let rest = &mut data[done..];
                let blocks = rest.len().div_ceil(16).min(BATCH);
                let n = rest.len().min(blocks * 16);
                let lo = self.counter as u64;
                if lo.checked_add(BATCH as u64).is_some() {
                    // SAFETY: `new` checked the processor's features; `n`
                    // bytes of `rest` are written, `n` ≤ rest.len().
                    let tail =
                        unsafe { xor_keystream(&self.round_keys, self.counter, &mut rest[..n]) };
                    if !n.is_multiple_of(16) {
                        self.tail = tail;
                        self.used = n % 16;
                    }
                } else {
                    // The low 64 counter bits carry within this batch: make
                    // the counter blocks one by one (never with tor's zero IV
                    // before 2^64 blocks).
                    let mut ks = [0u8; BATCH * 16];
                    // SAFETY: as above; `ks` holds BATCH blocks, `blocks` ≤ BATCH.
                    unsafe { keystream(&self.round_keys, self.counter, blocks, &mut ks) };
                    for (d, k) in rest[..n].iter_mut().zip(&ks[..n]) {
                        *d ^= *k;
                    }
                    if !n.is_multiple_of(16) {
                        let last = (blocks - 1) * 16;
                        self.tail.copy_from_slice(&ks[last..last + 16]);
                        self.used = n - last;
                    }
                }
                self.counter = self.counter.wrapping_add(blocks as u128);
                done += n;
            }
        }
    }

    /// The 11 round keys, each in all four 128-bit lanes.
    #[target_feature(enable = "avx512f,vaes")]
    fn broadcast_keys(round_keys: &[[u8; 16]; 11]) -> [__m512i; 11] {
        let mut rk = [_mm512_setzero_si512(); 11];
        for (slot, key) in rk.iter_mut().zip(round_keys) {
            // SAFETY: 16 readable bytes; unaligned load.
            *slot = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(key.as_ptr().cast()) });
        }
        rk
    }

    /// XOR `data` (at most [`BATCH`] blocks) with the keystream of counter
    /// blocks `counter`, `counter + 1`, …, whose low 64 bits must not carry
    /// within the batch. The counters are made, encrypted and applied in
    /// registers, 64 bytes at a time (the last group with a byte mask).
    /// Returns the keystream of the last block (for a partial one).
    #[target_feature(enable = "avx512f,avx512bw,vaes")]
    pub(crate) unsafe fn xor_keystream(
        round_keys: &[[u8; 16]; 11],
        counter: u128,
        data: &mut [u8],
    ) -> [u8; 16] {
        let rk = broadcast_keys(round_keys);
        let (lo, hi) = (counter as u64 as i64, (counter >> 64) as u64 as i64);
        // Lane j holds the counter + j as a little-endian 128-bit number;
        // reversing each lane's bytes makes the big-endian block.
        let mut ctr = _mm512_set_epi64(
            hi,
            lo.wrapping_add(3),
            hi,
            lo.wrapping_add(2),
            hi,
            lo.wrapping_add(1),
            hi,
            lo,
        );
        let four = _mm512_set_epi64(0, 4, 0, 4, 0, 4, 0, 4);
        let reverse = _mm512_broadcast_i32x4(_mm_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ));
        let groups = data.len().div_ceil(64);
        let mut x = [_mm512_setzero_si512(); BATCH / 4];
        for v in x.iter_mut().take(groups) {
            *v = _mm512_xor_si512(_mm512_shuffle_epi8(ctr, reverse), rk[0]);
            ctr = _mm512_add_epi64(ctr, four);
        }
        for k in &rk[1..10] {
            for v in x.iter_mut().take(groups) {
                *v = _mm512_aesenc_epi128(*v, *k);
            }
        }
        let mut last = [0u8; 64];
        for (g, v) in x.iter().enumerate().take(groups) {
            let ks = _mm512_aesenclast_epi128(*v, rk[10]);
            let at = 64 * g;
            let len = (data.len() - at).min(64);
            // SAFETY: bytes at..at+len of `data` exist; the mask covers
            // exactly `len` bytes, so nothing past them is read or written.
            unsafe {
                let p = data.as_mut_ptr().add(at);
                if len == 64 {
                    let d = _mm512_loadu_si512(p.cast());
                    _mm512_storeu_si512(p.cast(), _mm512_xor_si512(d, ks));
                } else {
                    let m: __mmask64 = (1u64 << len) - 1;
                    let d = _mm512_maskz_loadu_epi8(m, p.cast());
                    _mm512_mask_storeu_epi8(p.cast(), m, _mm512_xor_si512(d, ks));
                }
            }
            if g + 1 == groups {
                // SAFETY: 64 writable bytes.
                unsafe { _mm512_storeu_si512(last.as_mut_ptr().cast(), ks) };
            }
        }
        let b = (data.len().div_ceil(16) - 1) % 4;
        let mut tail = [0u8; 16];
        tail.copy_from_slice(&last[16 * b..16 * b + 16]);
        tail
    }

    /// One step of the AES-128 key schedule: `k` is the previous round
    /// key, `t` its `aeskeygenassist` with this round's constant.
    #[target_feature(enable = "aes,sse2")]
    fn schedule_step(k: __m128i, t: __m128i) -> __m128i {
        let t = _mm_shuffle_epi32::<0xff>(t);
        let mut k = k;
        k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        _mm_xor_si128(k, t)
    }

    /// The 11 AES-128 round keys of `key` (FIPS 197 §5.2, with AES-NI).
    #[target_feature(enable = "aes,sse2")]
    pub(crate) unsafe fn expand_key(key: &[u8; 16]) -> [[u8; 16]; 11] {
        let mut rk = [[0u8; 16]; 11];
        // SAFETY: `key` is 16 readable bytes; unaligned load.
        let mut k = unsafe { _mm_loadu_si128(key.as_ptr().cast()) };
        macro_rules! round {
            ($i:expr, $rcon:expr) => {
                // SAFETY: `rk[$i]` is 16 writable bytes; unaligned store.
                unsafe { _mm_storeu_si128(rk[$i].as_mut_ptr().cast(), k) };
                k = schedule_step(k, _mm_aeskeygenassist_si128::<$rcon>(k));
            };
        }
        round!(0, 0x01);
        round!(1, 0x02);
        round!(2, 0x04);
        round!(3, 0x08);
        round!(4, 0x10);
        round!(5, 0x20);
        round!(6, 0x40);
        round!(7, 0x80);
        round!(8, 0x1b);
        round!(9, 0x36);
        // SAFETY: as above.
        unsafe { _mm_storeu_si128(rk[10].as_mut_ptr().cast(), k) };
        rk
    }

    /// Encrypt counter blocks `counter`, `counter + 1`, … (`blocks` of
    /// them, at most [`BATCH`], rounded up to whole groups of four) into
    /// `out`.
    #[target_feature(enable = "avx512f,vaes")]
    unsafe fn keystream(
        round_keys: &[[u8; 16]; 11],
        counter: u128,
        blocks: usize,
        out: &mut [u8; BATCH * 16],
    ) {
        let groups = blocks.div_ceil(4);
        for (j, b) in out.chunks_exact_mut(16).take(groups * 4).enumerate() {
            b.copy_from_slice(&counter.wrapping_add(j as u128).to_be_bytes());
        }
        let rk = broadcast_keys(round_keys);
        let mut x = [_mm512_setzero_si512(); BATCH / 4];
        for (g, v) in x.iter_mut().enumerate().take(groups) {
            // SAFETY: group g is bytes 64g..64g+64 of `out` (g < BATCH/4).
            *v = _mm512_xor_si512(
                unsafe { _mm512_loadu_si512(out.as_ptr().add(64 * g).cast()) },
                rk[0],
            );
        }
        for k in &rk[1..10] {
            for v in x.iter_mut().take(groups) {
                *v = _mm512_aesenc_epi128(*v, *k);
            }
        }
        for (g, v) in x.iter().enumerate().take(groups) {
            let c = _mm512_aesenclast_epi128(*v, rk[10]);
            // SAFETY: as for the load.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(64 * g).cast(), c) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    /// NIST SP 800-38A F.5.1 (CTR-AES128.Encrypt), whose counter wraps
    /// its low bytes (…fdff, …fe00, …fe01): both backends.
    #[test]
    fn nist_sp800_38a_ctr_aes128() {
        let key: [u8; 16] = unhex("2b7e151628aed2a6abf7158809cf4f3c")
            .try_into()
            .unwrap();
        let iv: [u8; 16] = unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
            .try_into()
            .unwrap();
        let plain = unhex(
            "6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51
             30c81c46a35ce411e5fbc1191a0a52ef f69f2445df4f9b17ad2b417be66c3710",
        );
        let want = unhex(
            "874d6191b620e3261bef6864990db6ce 9806f66b7970fdff8617187bb9fffdff
             5ae4df3edbd5d35e5b4f09020db03eab 1e031dda2fbe03d1792170a0f3009cee",
        );
        for mut c in [Aes128Ctr::new(&key, &iv), Aes128Ctr::new_soft(&key, &iv)] {
            let mut d = plain.clone();
            c.apply_keystream(&mut d);
            assert_eq!(d, want, "vaes: {}", c.is_vaes());
            // In pieces that split blocks: the same keystream.
            let mut c2 = match c.is_vaes() {
                true => Aes128Ctr::new(&key, &iv),
                false => Aes128Ctr::new_soft(&key, &iv),
            };
            let mut d = plain.clone();
            let (a, b) = d.split_at_mut(7);
            c2.apply_keystream(a);
            c2.apply_keystream(b);
            assert_eq!(d, want);
        }
    }

    /// The machine's backend against the portable one: relay cells (509
    /// bytes, so every call starts mid-block), odd lengths, long runs, and
    /// a counter that carries across 64 bits.
    #[test]
    fn backends_agree() {
        let fast = Aes128Ctr::new(&[7; 16], &[0; 16]);
        eprintln!("this machine's AES-CTR backend: vaes = {}", fast.is_vaes());
        for iv in [[0u8; 16], {
            let mut v = [0u8; 16];
            v[8..].fill(0xff);
            v[15] = 0xf0;
            v
        }] {
            let mut a = Aes128Ctr::new(&[7; 16], &iv);
            let mut b = Aes128Ctr::new_soft(&[7; 16], &iv);
            let lens = (0..600).map(|i| match i % 5 {
                0 | 1 => 509,
                2 => i % 97,
                3 => 1 + i % 16,
                _ => 509 * 3 + i,
            });
            for (i, len) in lens.enumerate() {
                let mut x: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                let mut y = x.clone();
                a.apply_keystream(&mut x);
                b.apply_keystream(&mut y);
                assert!(x == y, "call {i}, {len} bytes");
            }
        }
    }
}
