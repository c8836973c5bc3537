//! CGO against tor 0.4.9.11's test vectors (`src/test/cgo_vectors.inc`)
//! and arti's (tor-proto 0.47 `testdata/cgo_*.rs`, a superset made by the
//! same reference generator), read from `testdata/`; and round trips
//! between a client's layers and relays', which cover the one path no
//! fixed vector does: a forward cell recognized at its relay.

use super::*;
use std::io::Read;

/// A test vector's fields in order: booleans, small integers and hex
/// strings (the tables' C or Rust punctuation and comments skipped).
#[derive(Debug, Clone)]
enum Tok {
    Bool(bool),
    Int(u64),
    Hex(Vec<u8>),
}

impl Tok {
    fn flag(&self) -> bool {
        match self {
            Tok::Bool(b) => *b,
            t => panic!("not a boolean: {t:?}"),
        }
    }
    fn int(&self) -> u64 {
        match self {
            Tok::Int(n) => *n,
            t => panic!("not an integer: {t:?}"),
        }
    }
    fn hex(&self) -> &[u8] {
        match self {
            Tok::Hex(h) => h,
            t => panic!("not a hex string: {t:?}"),
        }
    }
    fn arr<const N: usize>(&self) -> [u8; N] {
        self.hex().try_into().expect("length")
    }
}

fn gunzip(name: &str) -> String {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .expect("gzip");
    s
}

/// The vectors of table `name` in `text`, `fields` tokens each.
fn table(text: &str, name: &str, fields: usize) -> Vec<Vec<Tok>> {
    let at = text
        .find(&format!("{name}[] ="))
        .or_else(|| text.find(&format!("{name}:")))
        .or_else(|| text.find(&format!("{name} :")))
        .unwrap_or_else(|| panic!("no table {name}"));
    // The table's body: from its `= {` / `= &[` to the line that ends
    // it with `};` / `];`.
    let body = &text[at..];
    let body = &body[body.find('=').expect("=") + 1..];
    let mut toks = Vec::new();
    for line in body.lines() {
        let trimmed = line.trim_end();
        let last = trimmed.ends_with("};") || trimmed.ends_with("];");
        let line = if last {
            &trimmed[..trimmed.len() - 2]
        } else {
            line
        };
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while !rest.is_empty() {
            let c = rest.chars().next().unwrap();
            if c == '"' {
                let close = rest[1..].find('"').expect("closing quote") + 1;
                toks.push(Tok::Hex(hex::decode(&rest[1..close]).expect("hex")));
                rest = &rest[close + 1..];
            } else if c.is_ascii_alphanumeric() {
                let len = rest
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(rest.len());
                let word = &rest[..len];
                match word {
                    "True" | "true" => toks.push(Tok::Bool(true)),
                    "False" | "false" => toks.push(Tok::Bool(false)),
                    w if w.chars().all(|c| c.is_ascii_digit()) => {
                        toks.push(Tok::Int(w.parse().unwrap()))
                    }
                    w => panic!("unexpected word {w:?} in {name}"),
                }
                rest = &rest[len..];
            } else {
                rest = &rest[c.len_utf8()..];
            }
        }
        if last {
            break;
        }
    }
    assert_eq!(toks.len() % fields, 0, "{name}: {} tokens", toks.len());
    toks.chunks(fields).map(<[Tok]>::to_vec).collect()
}

/// Each table from tor's file and arti's.
fn sources(arti_file: &str, name_c: &str, name_arti: &str, fields: usize) -> Vec<Vec<Tok>> {
    let c = table(&gunzip("tor-cgo_vectors.inc.gz"), name_c, fields);
    let a = table(&gunzip(arti_file), name_arti, fields);
    assert!(
        !c.is_empty() && a.len() >= c.len(),
        "{name_c}: {} / {}",
        c.len(),
        a.len()
    );
    c.into_iter().chain(a).collect()
}

fn keys(k: &Tok) -> UivKeys {
    UivKeys::new(&k.arr::<64>(), true)
}

/// A state from (keys, nonce, T').
fn dir(k: &Tok, n: &Tok, t: &Tok, decrypts: bool) -> CgoDir {
    let mut m = [0u8; DIR_KEY_LEN];
    m[..64].copy_from_slice(k.hex());
    m[64..].copy_from_slice(n.hex());
    let mut d = CgoDir::new(&m, decrypts);
    d.tprime = t.arr();
    d
}

fn assert_dir(d: &CgoDir, k: &Tok, n: &Tok, t: &Tok, what: &str) {
    assert_eq!(d.keys.raw(), k.hex(), "{what}: keys");
    assert_eq!(&d.nonce[..], n.hex(), "{what}: nonce");
    assert_eq!(&d.tprime[..], t.hex(), "{what}: T'");
}

fn body(tag: &[u8], msg: &[u8]) -> [u8; BODY_LEN] {
    let mut b = [0u8; BODY_LEN];
    b[..TAG_LEN].copy_from_slice(tag);
    b[TAG_LEN..].copy_from_slice(msg);
    b
}

#[test]
fn polyval_is_rfc_8452s() {
    let h: [u8; 16] = hex::decode("25629347589242761d31f826ba4b757b")
        .unwrap()
        .try_into()
        .unwrap();
    let mut p = Polyval::new(Block::from_slice(&h));
    p.update_padded(
        &hex::decode("4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362").unwrap(),
    );
    let out: [u8; 16] = p.finalize().into();
    assert_eq!(hex::encode(out), "f7a3b47b846119fae5b7866cf5e5b77e");
}

#[test]
fn et_vectors() {
    let v = sources("arti-cgo_et.rs.gz", "ET_TESTVECS", "ET_TEST_VECTORS", 5);
    for (i, t) in v.iter().enumerate() {
        // The ET's keys (KB, KU) are the first 32 of UIV+'s four.
        let mut raw = [0u8; 64];
        raw[..32].copy_from_slice(t[1].hex());
        let k = UivKeys::new(&raw, true);
        let tweak = t[2].hex();
        let (h, cmd, x_r) = (&tweak[..16], tweak[16], &tweak[17..]);
        let mask = k.et_mask(h.try_into().unwrap(), cmd, x_r);
        let mut b = *Block::from_slice(t[3].hex());
        xor16(&mut b, &mask);
        if t[0].flag() {
            k.kb.encrypt_block(&mut b);
        } else {
            k.kb_dec.as_ref().unwrap().decrypt_block(&mut b);
        }
        xor16(&mut b, &mask);
        assert_eq!(&b[..], t[4].hex(), "ET vector {i}");
    }
    assert!(v.len() >= 24);
}

#[test]
fn prf_vectors() {
    let v = sources("arti-cgo_prf.rs.gz", "PRF_TESTVECS", "PRF_TEST_VECTORS", 4);
    for (i, t) in v.iter().enumerate() {
        // The PRF's keys (K, B) are the last 32 of UIV+'s four.
        let mut raw = [0u8; 64];
        raw[32..].copy_from_slice(t[0].hex());
        let k = UivKeys::new(&raw, false);
        let ctr = k.prf_counter(&t[2].arr());
        let expect = t[3].hex();
        let mut out = vec![0u8; expect.len()];
        match t[1].int() {
            0 => k.xor_ctr(ctr, &mut out),
            1 => k.xor_ctr(ctr + T1_OFFSET, &mut out),
            n => panic!("t = {n}"),
        }
        assert_eq!(out, expect, "PRF vector {i}");
    }
    assert!(v.len() >= 30);
}

#[test]
fn uiv_vectors() {
    let v = sources("arti-cgo_uiv.rs.gz", "UIV_TESTVECS", "UIV_TEST_VECTORS", 7);
    for (i, t) in v.iter().enumerate() {
        let k = keys(&t[1]);
        let tweak = t[2].hex();
        let h: [u8; 16] = tweak[..16].try_into().unwrap();
        let mut b = body(t[3].hex(), t[4].hex());
        if t[0].flag() {
            k.encrypt(&h, tweak[16], &mut b);
        } else {
            k.decrypt(&h, tweak[16], &mut b);
        }
        assert_eq!(&b[..16], t[5].hex(), "UIV vector {i}: left");
        assert_eq!(&b[16..], t[6].hex(), "UIV vector {i}: right");
    }
}

#[test]
fn uiv_update_vectors() {
    let v = sources(
        "arti-cgo_uiv.rs.gz",
        "UIV_UPDATE_TESTVECS",
        "UIV_UPDATE_TEST_VECTORS",
        4,
    );
    for (i, t) in v.iter().enumerate() {
        let mut k = keys(&t[0]);
        let n = k.update(&t[1].arr());
        assert_eq!(&k.raw[..], t[2].hex(), "update vector {i}: keys");
        assert_eq!(&n[..], t[3].hex(), "update vector {i}: nonce");
    }
}

#[test]
fn relay_forward_and_backward_vectors() {
    let v = sources(
        "arti-cgo_relay.rs.gz",
        "CGO_RELAY_TESTVECS",
        "CGO_RELAY_TEST_VECTORS",
        12,
    );
    for (i, t) in v.iter().enumerate() {
        let mut d = dir(&t[1], &t[2], &t[3], false);
        let cmd = t[4].hex()[0];
        let mut b = body(t[5].hex(), t[6].hex());
        let mine = d.relay_pass(cmd, &mut b);
        // No vector is a cell for the relay (it would roll its keys).
        assert!(!mine, "relay vector {i} is recognized");
        assert_dir(&d, &t[7], &t[8], &t[9], &format!("relay vector {i}"));
        assert_eq!(&b[..16], t[10].hex(), "relay vector {i}: tag");
        assert_eq!(&b[16..], t[11].hex(), "relay vector {i}: message");
    }
}

#[test]
fn relay_originate_vectors() {
    let v = sources(
        "arti-cgo_relay.rs.gz",
        "CGO_RELAY_ORIGINATE_TESTVECS",
        "CGO_RELAY_ORIGINATE_TEST_VECTORS",
        10,
    );
    for (i, t) in v.iter().enumerate() {
        let mut r = CgoRelayCrypto {
            fwd: dir(&t[0], &t[1], &t[2], false),
            back: dir(&t[0], &t[1], &t[2], false),
            last_tag: [0; TAG_LEN],
        };
        let cmd = t[3].hex()[0];
        let mut b = body(&[0; 16], t[4].hex());
        let tag = r.originate_backward(cmd, &mut b);
        assert_dir(
            &r.back,
            &t[5],
            &t[6],
            &t[7],
            &format!("originate vector {i}"),
        );
        assert_eq!(&b[..16], t[8].hex(), "originate vector {i}: tag");
        assert_eq!(&b[16..], t[9].hex(), "originate vector {i}: message");
        assert_eq!(tag, r.last_tag());
        assert_eq!(&tag[..], t[8].hex());
    }
}

#[test]
fn client_originate_vectors() {
    let v = sources(
        "arti-cgo_client.rs.gz",
        "CGO_CLIENT_ORIGINATE_TESTVECS",
        "CGO_CLIENT_ORIGINATE_TEST_VECTORS",
        23,
    );
    for (i, t) in v.iter().enumerate() {
        let mut hops: Vec<CgoClientLayer> = (0..3)
            .map(|h| {
                let d = dir(&t[3 * h], &t[3 * h + 1], &t[3 * h + 2], true);
                CgoClientLayer {
                    fwd: d.clone(),
                    back: d,
                }
            })
            .collect();
        let target = t[9].int() as usize - 1;
        let cmd = t[10].hex()[0];
        let mut b = body(&[0; 16], t[11].hex());
        hops[target].originate(cmd, &mut b);
        for h in (0..target).rev() {
            hops[h].forward(cmd, &mut b);
        }
        for (h, hop) in hops.iter().enumerate() {
            let o = 12 + 3 * h;
            assert_dir(
                &hop.fwd,
                &t[o],
                &t[o + 1],
                &t[o + 2],
                &format!("client vector {i}, hop {h}"),
            );
        }
        assert_eq!(&b[..16], t[21].hex(), "client vector {i}: tag");
        assert_eq!(&b[16..], t[22].hex(), "client vector {i}: message");
    }
}

/// Key material for a circuit of `n` hops, from a seed.
fn material(seed: u8) -> [u8; KEY_MATERIAL_LEN] {
    let mut km = [0u8; KEY_MATERIAL_LEN];
    for (i, b) in km.iter_mut().enumerate() {
        *b = (i as u8)
            .wrapping_mul(31)
            .wrapping_add(seed.wrapping_mul(101))
            ^ 0x5a;
    }
    km
}

#[test]
fn cells_for_each_hop_of_a_three_hop_circuit_are_recognized_there_and_only_there() {
    let mut client: Vec<CgoClientLayer> = (0..3)
        .map(|h| CgoClientLayer::from_key_material(&material(h)))
        .collect();
    let mut relays: Vec<CgoRelayCrypto> = (0..3)
        .map(|h| CgoRelayCrypto::from_key_material(&material(h)))
        .collect();
    // Forward: messages for hops 2, 0, 1, 2, 2, 1 (RELAY_EARLY first).
    for (n, &target) in [2usize, 0, 1, 2, 2, 1].iter().enumerate() {
        let cmd = if n == 0 { 9 } else { 3 };
        let mut b = [0u8; BODY_LEN];
        b[16..].fill(n as u8 + 1);
        let msg = b;
        let sent_tag = client[target].originate(cmd, &mut b);
        for h in (0..target).rev() {
            client[h].forward(cmd, &mut b);
        }
        for (h, r) in relays.iter_mut().enumerate().take(target + 1) {
            let wire: [u8; 16] = b[..16].try_into().unwrap();
            let mine = r.forward(cmd, &mut b);
            assert_eq!(mine, h == target, "cell {n} at hop {h}");
            if mine {
                assert_eq!(&b[16..], &msg[16..], "cell {n}: the message");
                assert_eq!(r.last_tag(), wire, "the tag it came with");
                assert_eq!(r.last_tag(), sent_tag, "the client's tag");
            }
        }
    }
    // Backward: hop 1 and 2 originate, the ones nearer the client relay.
    for (n, &from) in [2usize, 1, 2, 0, 1].iter().enumerate() {
        let mut b = [0u8; BODY_LEN];
        b[16..].fill(0x80 + n as u8);
        let msg = b;
        let tag = relays[from].originate_backward(3, &mut b);
        for h in (0..from).rev() {
            relays[h].backward(3, &mut b);
        }
        for (h, c) in client.iter_mut().enumerate() {
            match c.backward(3, &mut b) {
                Some(t) => {
                    assert_eq!(h, from, "cell {n} recognized at hop {h}");
                    assert_eq!(t, tag, "cell {n}: the relay's tag");
                    assert_eq!(&b[16..], &msg[16..]);
                    break;
                }
                None => assert!(h < from, "cell {n} not recognized at its hop"),
            }
        }
    }
}

#[test]
fn a_changed_byte_leaves_a_cell_unrecognized_and_the_circuit_unusable() {
    let mut client = CgoClientLayer::from_key_material(&material(7));
    let mut relay = CgoRelayCrypto::from_key_material(&material(7));
    let mut b = [0u8; BODY_LEN];
    client.originate(3, &mut b);
    b[200] ^= 1;
    assert!(!relay.forward(3, &mut b), "tampered");
    // The chain is broken: the next good cell is not recognized either.
    let mut b = [0u8; BODY_LEN];
    client.originate(3, &mut b);
    assert!(!relay.forward(3, &mut b));
    // The command byte is part of the tweak.
    let mut client = CgoClientLayer::from_key_material(&material(8));
    let mut relay = CgoRelayCrypto::from_key_material(&material(8));
    let mut b = [0u8; BODY_LEN];
    client.originate(9, &mut b);
    assert!(!relay.forward(3, &mut b), "RELAY_EARLY read as RELAY");
}

/// Per-cell cost of a relay's CGO layer beside its tor1 layer, on this
/// machine (a measurement, not a check: `cargo test --release -p
/// weft-crypto --lib cgo_per_cell_cost -- --ignored --nocapture`).
#[test]
#[ignore]
fn cgo_per_cell_cost() {
    use crate::relay_crypto::Tor1RelayCrypto;
    use std::time::Instant;
    const N: u32 = 400_000;
    let mut b = [0x42u8; BODY_LEN];
    let mut cgo = CgoRelayCrypto::from_key_material(&material(1));
    let mut tor1 = Tor1RelayCrypto::from_key_material(&[7u8; crate::ntor::KEY_MATERIAL_LEN]);
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..N {
            std::hint::black_box(cgo.forward(3, &mut b));
        }
        let c = t.elapsed().as_nanos() as f64 / f64::from(N);
        let t = Instant::now();
        for _ in 0..N {
            std::hint::black_box(tor1.decrypt_forward(&mut b));
        }
        let o = t.elapsed().as_nanos() as f64 / f64::from(N);
        // A cell we originate (each rolls the keys, as every cell at an
        // exit does).
        let t = Instant::now();
        for _ in 0..N / 4 {
            std::hint::black_box(cgo.originate_backward(3, &mut b));
        }
        let g = t.elapsed().as_nanos() as f64 / f64::from(N / 4);
        let t = Instant::now();
        for _ in 0..N / 4 {
            std::hint::black_box(tor1.originate_backward(&mut b));
        }
        let h = t.elapsed().as_nanos() as f64 / f64::from(N / 4);
        eprintln!(
            "round {round}: passing CGO {c:.0} ns/cell, tor1 {o:.0} (CGO ÷ tor1 {:.2}); \
             originating CGO {g:.0}, tor1 {h:.0}",
            c / o
        );
    }
}

/// The x86-64 backend gives what the portable code gives, for ENC_UIV on
/// cells of every command and for key updates (the vectors above run
/// through it too, where the processor has it).
#[test]
#[cfg(target_arch = "x86_64")]
fn the_fast_backend_agrees_with_the_portable_one() {
    if !fast::available() {
        eprintln!("this processor lacks VAES / VPCLMULQDQ: nothing to compare");
        return;
    }
    let mut seed = 1u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    for round in 0..64 {
        let mut raw = [0u8; UIV_KEYS_LEN];
        raw.iter_mut().for_each(|b| *b = next());
        let mut f = fast::FastUiv::new(&raw, true);
        let mut s = UivKeys::new(&raw, true);
        for cell in 0..8 {
            let mut h = [0u8; TAG_LEN];
            h.iter_mut().for_each(|b| *b = next());
            let cmd = next();
            let mut a = [0u8; BODY_LEN];
            a.iter_mut().for_each(|b| *b = next());
            let mut b = a;
            let plain = a;
            f.encrypt(&h, cmd, &mut a);
            s.encrypt(&h, cmd, &mut b);
            assert_eq!(a, b, "round {round}, cell {cell}");
            // DEC_UIV (a client's layer) alike, and the inverse.
            f.decrypt(&h, cmd, &mut a);
            s.decrypt(&h, cmd, &mut b);
            assert_eq!(a, b, "round {round}, cell {cell}: DEC_UIV");
            assert_eq!(a, plain, "round {round}, cell {cell}: DEC_UIV(ENC_UIV)");
        }
        let mut n = [0u8; TAG_LEN];
        n.iter_mut().for_each(|b| *b = next());
        assert_eq!(f.update(&n), s.update(&n), "round {round}: nonce");
        assert_eq!(f.raw, *s.raw, "round {round}: keys");
    }
}
