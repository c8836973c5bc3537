//! Tests of the onion-service cells, with a cell C Tor made.

use ed25519_dalek::{Signer, SigningKey};

use super::*;

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    hex::decode(s).unwrap()
}

/// An ESTABLISH_INTRO that C Tor sent in a chutney network, and the nonce
/// of its circuit (the MAC key). From Arti's tor-cell test vectors
/// (`tests/testvec_relaymsg.rs`, `establish_intro_canned`).
fn canned() -> (Vec<u8>, [u8; 20]) {
    let cell = unhex(
        "02 0020 75BC879BF697A9B12E1E10596FEF041127FECD11FDD80706AEAE35812EA74328
         00
         A3DF998D6749A9323035AD23DAA7F8607E4F87473A975E50A42DEC9C0E565C48
         0040
         5A7F5E53D55B307B5F7866AE14508DDA3412E2B3E4805176C25413CEDF204F7F
         53EAECADC0844472AA7BEC3BDCBA0A65F1FCDEF397B399F534F46E535B0E6301",
    );
    let key: [u8; 20] = unhex("250CCAF964B17B621A58CD82DF5DAFD060BA5F28")
        .try_into()
        .unwrap();
    (cell, key)
}

#[test]
fn mac_is_sha3_of_length_key_and_message() {
    // Computed with Python's hashlib.sha3_256 (an independent SHA3) over
    // the inputs of C Tor's test_crypto_mac_sha3.
    let mac = mac_sha3_256(
        b"i'm from the past talking to the future.",
        b"i am in a library somewhere using my computer",
    );
    assert_eq!(
        hex::encode(mac),
        "753fba6d87d49497238a512a3772dd291e55f7d1cd332c9fb5c967c7a10a13ca"
    );
}

#[test]
fn a_c_tor_establish_intro_verifies() {
    let (cell, nonce) = canned();
    let c = parse_establish_intro(&cell).unwrap();
    assert_eq!(c.auth_key[..4], [0x75, 0xBC, 0x87, 0x9B]);
    assert_eq!(c.dos, None);
    verify_establish_intro(&cell, &c, &nonce).unwrap();
    // Another circuit's nonce: the MAC fails.
    let mut other = nonce;
    other[0] ^= 1;
    assert_eq!(
        verify_establish_intro(&cell, &c, &other),
        Err(OnionError::BadMac)
    );
    // Any changed byte of the signed part: the signature fails.
    for i in [3usize, 36, 40, 70] {
        let mut bad = cell.clone();
        bad[i] ^= 0x40;
        if let Ok(p) = parse_establish_intro(&bad) {
            assert!(
                verify_establish_intro(&bad, &p, &nonce).is_err(),
                "byte {i}"
            );
        }
    }
    // Trailing bytes after the signature are ignored, as trunnel does.
    let mut longer = cell.clone();
    longer.extend_from_slice(&[0; 7]);
    let p = parse_establish_intro(&longer).unwrap();
    verify_establish_intro(&longer, &p, &nonce).unwrap();
}

#[test]
fn establish_intro_formats() {
    // Arti's encoding of an ESTABLISH_INTRO with a DoS extension (rate 1,
    // burst 2), an unknown extension after it.
    let cell = unhex(
        "02 0020 3333333333333333333333333333333333333333333333333333333333333333
         02 01 13 02 01 0000000000000001 02 0000000000000002 02 01 00
         0101010101010101010101010101010101010101010101010101010101010101
         0040 1515151515151515151515151515151515151515151515151515151515151515
              1515151515151515151515151515151515151515151515151515151515151515",
    );
    let c = parse_establish_intro(&cell).unwrap();
    assert_eq!(c.dos, Some(DosRequest::Limit { rate: 1, burst: 2 }));
    for n in 0..cell.len() {
        assert!(
            parse_establish_intro(&cell[..n]).is_err(),
            "truncated at {n}"
        );
    }
    assert_eq!(
        parse_establish_intro(&[0, 0, 0]),
        Err(OnionError::Invalid("legacy (v2) ESTABLISH_INTRO"))
    );
    assert_eq!(
        parse_establish_intro(&[3]),
        Err(OnionError::Invalid("AUTH_KEY_TYPE"))
    );
    let mut short_key = cell.clone();
    short_key[2] = 0x1f;
    assert!(parse_establish_intro(&short_key).is_err());
    // DoS parameters C Tor refuses turn the limit off.
    assert_eq!(
        parse_dos(&unhex("02 01 0000000000000005 02 0000000000000004")),
        Some(DosRequest::Off)
    );
    assert_eq!(
        parse_dos(&unhex("01 01 0000000000000000")),
        Some(DosRequest::Off)
    );
    assert_eq!(
        parse_dos(&unhex("02 01 0000000080000000 02 0000000080000000")),
        Some(DosRequest::Off)
    );
    assert_eq!(
        parse_dos(&unhex("01 07 0000000000000001")),
        None,
        "unknown parameter"
    );
    assert_eq!(
        parse_dos(&unhex("02 01 0000000000000001")),
        None,
        "truncated"
    );
}

#[test]
fn a_signed_establish_intro_round_trips() {
    let sk = SigningKey::from_bytes(&[9u8; 32]);
    let nonce = [4u8; 20];
    let mut cell = vec![2, 0, 32];
    cell.extend_from_slice(sk.verifying_key().as_bytes());
    cell.push(0);
    let mac = mac_sha3_256(&nonce, &cell);
    cell.extend_from_slice(&mac);
    let mut to_sign = ESTABLISH_INTRO_SIG_PREFIX.to_vec();
    to_sign.extend_from_slice(&cell);
    let sig = sk.sign(&to_sign);
    cell.extend_from_slice(&64u16.to_be_bytes());
    cell.extend_from_slice(&sig.to_bytes());
    let c = parse_establish_intro(&cell).unwrap();
    verify_establish_intro(&cell, &c, &nonce).unwrap();
}

#[test]
fn introduce1_is_checked_as_c_tor_does() {
    let mut cell = vec![0u8; 20];
    cell.extend_from_slice(&[2, 0, 32]);
    cell.extend_from_slice(&[7u8; 32]);
    cell.push(0);
    cell.extend_from_slice(&[0xAA; 200]);
    assert_eq!(parse_introduce1(&cell), Ok([7u8; 32]));
    let mut legacy = cell.clone();
    legacy[0] = 1;
    assert!(parse_introduce1(&legacy).is_err());
    let mut rsa = cell.clone();
    rsa[20] = 1;
    assert!(parse_introduce1(&rsa).is_err());
    assert!(
        parse_introduce1(&cell[..56]).is_err(),
        "no encrypted section"
    );
    let mut long = cell.clone();
    long.resize(MAX_INTRODUCE1_LEN + 1, 0);
    assert_eq!(
        parse_introduce1(&long),
        Err(OnionError::Invalid("over-long INTRODUCE1"))
    );
    for n in 0..56 {
        assert!(parse_introduce1(&cell[..n]).is_err());
    }
    assert_eq!(introduce_ack_body(ack_status::UNKNOWN_ID), [0, 1, 0]);
}

#[test]
fn intro2_bucket_as_c_tor_counts() {
    // Burst 3: C Tor takes a token, then allows if one is left.
    let mut b = Intro2Bucket::new(true, 1, 3, 100);
    assert!(b.can_send(100));
    assert!(b.can_send(100));
    assert!(!b.can_send(100));
    assert!(!b.can_send(100));
    assert!(b.can_send(102), "refilled by 2 after 2 s");
    let mut off = Intro2Bucket::new(false, 1, 1, 0);
    assert!((0..100).all(|_| off.can_send(0)));
    off.apply(DosRequest::Limit { rate: 5, burst: 5 }, 0);
    assert_eq!((0..10).filter(|_| off.can_send(0)).count(), 4);
    off.apply(DosRequest::Off, 0);
    assert!(off.can_send(0));
}
