//! weft-crypto owns every key and cryptographic construction of the relay:
//! keys on disk and their rotation ([`keys`]), the certificates the relay
//! emits ([`certs`]), the circuit handshakes ntor, ntor-v3 and CREATE_FAST
//! ([`ntor`], [`ntor_v3`], [`kdf`]) and tor1 relay-cell crypto
//! ([`relay_crypto`], its AES-CTR in [`aes_ctr`]) and CGO relay-cell crypto
//! ([`cgo`]), and the ControlPort's authentication hashes
//! ([`control_auth`]). Everything here is sans-IO except [`keys`], which
//! reads and writes the key files in the DataDirectory.
#![warn(missing_docs)]

pub mod aes_ctr;
pub mod c_key_files;
pub mod certs;
pub mod cgo;
pub mod control_auth;
pub mod ed_identity;
pub mod family_keys;
pub mod kdf;
pub mod keygen;
pub mod keys;
pub mod ntor;
pub mod ntor_v3;
pub mod pwbox;
pub mod relay_crypto;

/// Fill `buf` with bytes from the operating system's CSPRNG.
pub fn random_bytes(buf: &mut [u8]) {
    use rand::RngCore;
    // ThreadRng is a CSPRNG seeded from the OS and reseeded periodically.
    rand::rng().fill_bytes(buf);
}

/// Return `N` random bytes from the operating system's CSPRNG.
pub fn random_array<const N: usize>() -> [u8; N] {
    let mut a = [0u8; N];
    random_bytes(&mut a);
    a
}
