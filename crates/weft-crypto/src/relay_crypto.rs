//! tor1 relay-cell crypto: the per-hop AES-128-CTR layers and SHA-1
//! running digests of a circuit, for a relay's keyed circuit half
//! ([`Tor1RelayCrypto`]) and for the client end of one hop
//! ([`Tor1ClientLayer`], used by tests and the load generator).
//! [tor-spec §5.2, §5.5, §6.1; protocol-notes §5.1]
//!
//! Everything works in place on a 509-byte relay cell body and never
//! allocates. Body layout (relay cell format v0): command(1) |
//! recognized(2) | stream_id(2) | digest(4) | length(2) | data | padding.

use digest::Digest;
use sha1::Sha1;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::ntor::KEY_MATERIAL_LEN;

/// Length of a relay cell body (CELL_PAYLOAD_LEN). [tor-spec §3, §6.1]
pub const BODY_LEN: usize = 509;
/// Length of a tor1 SENDME tag: the full SHA-1 running digest. [tor-spec §7.3.1]
pub const SENDME_TAG_LEN: usize = 20;

/// The 'recognized' field. [tor-spec §6.1]
const RECOGNIZED: std::ops::Range<usize> = 1..3;
/// The 'digest' field. [tor-spec §6.1]
const DIGEST: std::ops::Range<usize> = 5..9;

/// AES-128 in counter mode, big-endian 128-bit counter, zero IV.
/// [tor-spec §0.3: "128-bit AES in counter mode, with an IV of all 0 bytes"]
use crate::aes_ctr::Aes128Ctr;

/// One direction of one hop: a stream cipher whose keystream runs on
/// across cells, and a running digest of every cell body that starts or
/// ends at this hop in this direction.
#[derive(Clone)]
struct Direction {
    /// AES-128-CTR keyed with Kf or Kb.
    cipher: Aes128Ctr,
    /// SHA-1 seeded with Df or Db.
    digest: Sha1,
    /// The full running digest after the last cell we originated or
    /// recognized (its SENDME tag); zero before the first.
    last: [u8; SENDME_TAG_LEN],
}

impl Direction {
    /// A direction keyed with `key` (Kf/Kb) and digest seed `seed` (Df/Db).
    /// [tor-spec §5.2.1: "Df is used to seed the integrity-checking hash
    /// ... Kf is used to encrypt ..."]
    fn new(key: &[u8; 16], seed: &[u8; 20]) -> Self {
        let mut digest = Sha1::new();
        digest.update(seed);
        Direction {
            cipher: Aes128Ctr::new(key, &[0u8; 16]),
            digest,
            last: [0; SENDME_TAG_LEN],
        }
    }

    /// Add or remove this layer: XOR with the next 509 bytes of keystream.
    /// [tor-spec §5.5.2.2, §5.5.3.1]
    fn crypt(&mut self, body: &mut [u8; BODY_LEN]) {
        self.cipher.apply_keystream(body);
    }

    /// Make `body` a cell that originates at this end for the other end:
    /// 'recognized' = 0, 'digest' = first 4 bytes of the running digest
    /// over the body with a zero digest field, then encrypt.
    /// Returns the full running digest (the cell's SENDME tag). [tor-spec §6.1]
    fn originate(&mut self, body: &mut [u8; BODY_LEN]) -> [u8; SENDME_TAG_LEN] {
        body[RECOGNIZED].fill(0);
        body[DIGEST].fill(0);
        self.digest.update(&body[..]);
        let d: [u8; SENDME_TAG_LEN] = self.digest.clone().finalize().into();
        body[DIGEST].copy_from_slice(&d[..DIGEST.len()]);
        self.last = d;
        self.crypt(body);
        d
    }

    /// Remove this layer, then decide whether the cell is addressed to this
    /// end: 'recognized' is zero and 'digest' matches the running digest
    /// over the body with a zero digest field. Only on a match does the
    /// running digest advance. [tor-spec §6.1; §5.5.2.2, §5.5.4]
    fn decrypt_recognize(&mut self, body: &mut [u8; BODY_LEN]) -> bool {
        self.crypt(body);
        // Cheap test first: a cell for a farther hop has a nonzero
        // 'recognized' field except with probability 2^-16.
        if body[RECOGNIZED] != [0, 0] {
            return false;
        }
        // Hash the body with its digest field zeroed, in place (one update
        // call, no copy of the body), then put the field back: a cell that
        // turns out not to be ours is passed on unchanged.
        let mut got = [0u8; 4];
        got.copy_from_slice(&body[DIGEST]);
        body[DIGEST].fill(0);
        let mut trial = self.digest.clone();
        trial.update(&body[..]);
        body[DIGEST].copy_from_slice(&got);
        let d: [u8; SENDME_TAG_LEN] = trial.clone().finalize().into();
        if bool::from(d[..DIGEST.len()].ct_eq(&got[..])) {
            // Ours: keep the advanced state. [tor-spec §6.1]
            self.digest = trial;
            self.last = d;
            true
        } else {
            // Not ours: the running digest stays as it was ("the running
            // digest at that node should not be updated"). [tor-spec §6.1]
            false
        }
    }
}

/// Split 72 bytes of key material into Df(20) | Db(20) | Kf(16) | Kb(16)
/// and build the forward and backward directions. [tor-spec §5.2.2]
fn directions(km: &[u8; KEY_MATERIAL_LEN]) -> (Direction, Direction) {
    let mut df = Zeroizing::new([0u8; 20]);
    let mut db = Zeroizing::new([0u8; 20]);
    let mut kf = Zeroizing::new([0u8; 16]);
    let mut kb = Zeroizing::new([0u8; 16]);
    df.copy_from_slice(&km[0..20]);
    db.copy_from_slice(&km[20..40]);
    kf.copy_from_slice(&km[40..56]);
    kb.copy_from_slice(&km[56..72]);
    (Direction::new(&kf, &df), Direction::new(&kb, &db))
}

/// A relay's tor1 state for one circuit: forward (away from the client)
/// AES-128-CTR(Kf) + SHA-1 digest seeded with Df, backward (toward the
/// client) AES-128-CTR(Kb) + SHA-1 digest seeded with Db.
/// [tor-spec §5.2, §5.5; protocol-notes §5.1]
pub struct Tor1RelayCrypto {
    /// Away from the client: we remove a layer.
    fwd: Direction,
    /// Toward the client: we add a layer.
    back: Direction,
}

impl std::fmt::Debug for Tor1RelayCrypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tor1RelayCrypto").finish_non_exhaustive()
    }
}

impl Tor1RelayCrypto {
    /// Key a circuit half with a handshake's Df | Db | Kf | Kb.
    pub fn from_key_material(km: &[u8; KEY_MATERIAL_LEN]) -> Self {
        let (fwd, back) = directions(km);
        Tor1RelayCrypto { fwd, back }
    }

    /// Cell moving away from the client: remove our layer; return true if
    /// it is recognized as ours (recognized == 0 and the digest matches; on
    /// a match the forward digest advances, otherwise it is unchanged and
    /// the body, now without our layer, goes to the next hop).
    /// [tor-spec §5.5.2.2, §6.1]
    pub fn decrypt_forward(&mut self, body: &mut [u8; BODY_LEN]) -> bool {
        self.fwd.decrypt_recognize(body)
    }

    /// Cell from further along the circuit moving toward the client: add
    /// our layer (AES only). [tor-spec §5.5.3.1]
    pub fn encrypt_backward(&mut self, body: &mut [u8; BODY_LEN]) {
        self.back.crypt(body);
    }

    /// Cell we originate toward the client: set recognized = 0 and the
    /// digest field from the backward running digest, then encrypt.
    /// Returns the full 20-byte running digest after this cell (its SENDME
    /// tag). [tor-spec §6.1, §5.5.3.1]
    pub fn originate_backward(&mut self, body: &mut [u8; BODY_LEN]) -> [u8; SENDME_TAG_LEN] {
        self.back.originate(body)
    }

    /// The full 20-byte forward running digest after the last recognized
    /// cell (the SENDME v1 tag the client expects back). All zero before
    /// the first.
    pub fn last_forward_digest(&self) -> [u8; SENDME_TAG_LEN] {
        self.fwd.last
    }
}

/// The client's tor1 state for one hop of a circuit (the mirror image of
/// [`Tor1RelayCrypto`]). A client with an N-hop circuit holds N of these.
/// [tor-spec §5.5.2.1, §5.5.4]
#[derive(Clone)]
pub struct Tor1ClientLayer {
    /// Away from the client: we add a layer.
    fwd: Direction,
    /// Toward the client: we remove a layer.
    back: Direction,
}

impl std::fmt::Debug for Tor1ClientLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tor1ClientLayer").finish_non_exhaustive()
    }
}

impl Tor1ClientLayer {
    /// Key the layer with a handshake's Df | Db | Kf | Kb.
    pub fn from_key_material(km: &[u8; KEY_MATERIAL_LEN]) -> Self {
        let (fwd, back) = directions(km);
        Tor1ClientLayer { fwd, back }
    }

    /// Add this hop's layer to a cell addressed to a farther hop (one step
    /// of "For I=N...1: Encrypt with Kf_I"). [tor-spec §5.5.2.1]
    pub fn encrypt_forward(&mut self, body: &mut [u8; BODY_LEN]) {
        self.fwd.crypt(body);
    }

    /// Make `body` a cell addressed to this hop: set recognized = 0 and the
    /// digest field from the forward running digest, then encrypt. Returns
    /// the full running digest (the SENDME tag the hop will echo). The
    /// caller then applies [`Self::encrypt_forward`] of every nearer hop,
    /// farthest first. [tor-spec §6.1, §5.5.2.1]
    pub fn originate_forward(&mut self, body: &mut [u8; BODY_LEN]) -> [u8; SENDME_TAG_LEN] {
        self.fwd.originate(body)
    }

    /// Remove this hop's layer from a cell moving toward the client; true
    /// if the cell was sent by this hop (then the backward digest
    /// advances). Otherwise pass the body to the next farther layer.
    /// [tor-spec §5.5.4]
    pub fn decrypt_backward(&mut self, body: &mut [u8; BODY_LEN]) -> bool {
        self.back.decrypt_recognize(body)
    }

    /// The full backward running digest after the last cell this hop sent
    /// us. All zero before the first.
    pub fn last_backward_digest(&self) -> [u8; SENDME_TAG_LEN] {
        self.back.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use digest::{ExtendableOutput, Update, XofReader};

    fn km(byte: u8) -> [u8; KEY_MATERIAL_LEN] {
        let mut k = [0u8; KEY_MATERIAL_LEN];
        crate::kdf::kdf_tor(&[byte; 40], &mut k);
        k
    }

    /// A plaintext relay DATA cell with `data` (v0 layout).
    fn cell(data: &[u8]) -> [u8; BODY_LEN] {
        let mut b = [0u8; BODY_LEN];
        b[0] = 2; // RELAY_DATA
        b[3..5].copy_from_slice(&7u16.to_be_bytes());
        b[9..11].copy_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
        b[11..11 + data.len()].copy_from_slice(data);
        b
    }

    struct Onion {
        client: Vec<Tor1ClientLayer>,
        relays: Vec<Tor1RelayCrypto>,
    }

    impl Onion {
        fn new(keys: &[[u8; KEY_MATERIAL_LEN]]) -> Self {
            Onion {
                client: keys
                    .iter()
                    .map(Tor1ClientLayer::from_key_material)
                    .collect(),
                relays: keys
                    .iter()
                    .map(Tor1RelayCrypto::from_key_material)
                    .collect(),
            }
        }

        /// Client wraps a cell for hop `hop` (0-based).
        fn client_send(&mut self, hop: usize, body: &mut [u8; BODY_LEN]) -> [u8; 20] {
            let tag = self.client[hop].originate_forward(body);
            for layer in self.client[..hop].iter_mut().rev() {
                layer.encrypt_forward(body);
            }
            tag
        }

        /// The cell travels the relays; returns the hop that recognized it.
        fn relays_receive(&mut self, body: &mut [u8; BODY_LEN]) -> Option<usize> {
            (0..self.relays.len()).find(|&i| self.relays[i].decrypt_forward(body))
        }

        /// Hop `hop` originates a cell; nearer hops add their layers.
        fn relay_send(&mut self, hop: usize, body: &mut [u8; BODY_LEN]) -> [u8; 20] {
            let tag = self.relays[hop].originate_backward(body);
            for r in self.relays[..hop].iter_mut().rev() {
                r.encrypt_backward(body);
            }
            tag
        }

        /// The client peels layers; returns the hop that sent it.
        fn client_receive(&mut self, body: &mut [u8; BODY_LEN]) -> Option<usize> {
            (0..self.client.len()).find(|&i| self.client[i].decrypt_backward(body))
        }
    }

    #[test]
    fn three_hop_onion() {
        let mut o = Onion::new(&[km(1), km(2), km(3)]);
        for round in 0..20u8 {
            // Forward: a cell for hop 3 passes hops 1 and 2 unrecognized.
            let plain = cell(&[round; 100]);
            let mut body = plain;
            let tag = o.client_send(2, &mut body);
            assert!(!o.relays[0].decrypt_forward(&mut body));
            assert!(!o.relays[1].decrypt_forward(&mut body));
            assert!(o.relays[2].decrypt_forward(&mut body));
            assert_eq!(body[..5], plain[..5]);
            assert_eq!(body[9..], plain[9..]);
            assert_eq!(body[5..9], tag[..4]);
            assert_eq!(o.relays[2].last_forward_digest(), tag);

            // Forward: a cell for hop 1 and one for hop 2 interleaved.
            for hop in [0, 1] {
                let mut body = cell(b"for a nearer hop");
                let tag = o.client_send(hop, &mut body);
                assert_eq!(o.relays_receive(&mut body), Some(hop));
                assert_eq!(o.relays[hop].last_forward_digest(), tag);
            }

            // Backward: hop 2 originates; the client recognizes it at layer 2.
            let plain = cell(&[round ^ 0xff; 300]);
            let mut body = plain;
            let tag = o.relay_send(1, &mut body);
            assert!(!o.client[0].decrypt_backward(&mut body));
            assert!(o.client[1].decrypt_backward(&mut body));
            assert_eq!(body[9..], plain[9..]);
            assert_eq!(o.client[1].last_backward_digest(), tag);

            // Backward from hops 3 and 1.
            for hop in [2, 0] {
                let mut body = cell(b"toward the client");
                let tag = o.relay_send(hop, &mut body);
                assert_eq!(o.client_receive(&mut body), Some(hop));
                assert_eq!(o.client[hop].last_backward_digest(), tag);
            }
        }
    }

    /// A cell whose 'recognized' decrypts to zero but whose digest is wrong
    /// is not ours: it comes out with only our AES layer removed (digest
    /// field intact), and the running digest does not advance, so the next
    /// genuine cell is still recognized.
    #[test]
    fn false_recognized_keeps_digest() {
        let k = km(9);
        let mut client = Tor1ClientLayer::from_key_material(&k);
        let mut relay = Tor1RelayCrypto::from_key_material(&k);
        let mut body = cell(b"first");
        let tag1 = client.originate_forward(&mut body);
        assert!(relay.decrypt_forward(&mut body));
        assert_eq!(relay.last_forward_digest(), tag1);

        // A client state that never counted the corrupted cell in its digest.
        let mut in_sync = client.clone();

        // Corrupt a data byte in transit: recognized stays 0, digest fails.
        let plain = cell(b"second");
        let mut body = plain;
        let tag2 = client.originate_forward(&mut body);
        body[20] ^= 1;
        assert!(!relay.decrypt_forward(&mut body));
        assert_eq!(body[..5], plain[..5]);
        assert_eq!(body[5..9], tag2[..4]);
        assert_eq!(body[9..20], plain[9..20]);
        assert_eq!(body[20], plain[20] ^ 1);
        assert_eq!(body[21..], plain[21..]);
        assert_eq!(relay.last_forward_digest(), tag1);

        // The keystream moved on by one cell, the digest did not.
        in_sync.encrypt_forward(&mut [0u8; BODY_LEN]);
        let mut body = cell(b"third");
        let tag3 = in_sync.originate_forward(&mut body);
        assert!(relay.decrypt_forward(&mut body));
        assert_eq!(relay.last_forward_digest(), tag3);
    }

    /// originate_backward's tag is the digest the client computes.
    #[test]
    fn sendme_tags_match() {
        let k = km(4);
        let mut client = Tor1ClientLayer::from_key_material(&k);
        let mut relay = Tor1RelayCrypto::from_key_material(&k);
        assert_eq!(relay.last_forward_digest(), [0; 20]);
        for i in 0..5u8 {
            let mut b = cell(&[i; 498]);
            let t = relay.originate_backward(&mut b);
            assert!(client.decrypt_backward(&mut b));
            assert_eq!(client.last_backward_digest(), t);
            let mut b = cell(&[i; 1]);
            let t = client.originate_forward(&mut b);
            assert!(relay.decrypt_forward(&mut b));
            assert_eq!(relay.last_forward_digest(), t);
        }
    }

    /// Three-hop tor1 vectors generated by C Tor (a modified
    /// src/test/test_relaycrypt.c), as carried by Arti tor-proto
    /// testdata/cell_crypt.rs and used by src/crypto/cell/tor1.rs `testvec`:
    /// 51 DATA cells for hop 3, bodies from SHAKE-256(SEED); the listed
    /// cells are the bytes the client puts on the wire. We also run every
    /// cell through three relays and check that only hop 3 recognizes it.
    #[test]
    fn testvec_c_tor_relaycrypt() {
        // Each key is 72 bytes of tor1 key material followed by 20 more
        // (KH) that tor1 does not use.
        const K1: &[u8; 92] = b"    'My public key is in this signed x509 object', said Tom assertively.      (N-PREG-VIRYL)";
        const K2: &[u8; 92] = b"'Let's chart the pedal phlanges in the tomb', said Tom cryptographically.  (PELCG-GBR-TENCU)";
        const K3: &[u8; 92] = b"     'Segmentation fault bugs don't _just happen_', said Tom seethingly.        (P-GUVAT-YL)";
        const SEED: &[u8; 108] = b"'You mean to tell me that there's a version of Sha-3 with no limit on the output length?', said Tom shakily.";

        let keys: Vec<[u8; 72]> = [K1, K2, K3]
            .iter()
            .map(|k| k[..72].try_into().unwrap())
            .collect();
        let mut o = Onion::new(&keys);

        let mut xof = sha3::Shake256::default();
        xof.update(SEED);
        let mut stream = xof.finalize_xof();

        let mut expected = VECTORS.iter().peekable();
        for cellno in 0..51 {
            let mut body = [0u8; BODY_LEN];
            body[0] = 2; // RELAY_DATA
            body[4] = 1; // stream 1
            body[9] = 1; // length 498 = 0x01f2
            body[10] = 0xf2;
            stream.read(&mut body[11..]);
            let plain = body;

            o.client_send(2, &mut body);
            if let Some((n, hex_body)) = expected.peek() {
                if *n == cellno {
                    assert_eq!(hex::encode(body), *hex_body, "cell {cellno}");
                    expected.next();
                }
            }
            assert_eq!(o.relays_receive(&mut body), Some(2), "cell {cellno}");
            assert_eq!(body[9..], plain[9..]);
        }
        assert!(expected.next().is_none());
    }

    /// (cell number, expected wire body) from Arti tor-proto
    /// testdata/cell_crypt.rs.
    const VECTORS: &[(usize, &str)] = &[
        (
            0,
            concat!(
                "caec8c2606b65a1d42eebb1dd3fdc9973eeb3b3a3e90c1703101f1cf016f6fcc",
                "b4c1bd45da9a0da1920de6c31883173df4e7005a36b8136bd7d0f0fb80d68f13",
                "b8731ec43581430578af7c7e6b46efc7c7751397b8b5d4ba0cd99b0e5e530144",
                "335471667d42035dca6317b625867aec19c8ac06f2b5ffa36a1866e9148337a3",
                "ca64ca4b28b5e975c467b1b74f99688a3adbdbff0032f1fa05d2cac619ecccf1",
                "6d3fe14e6ceef3c2bfcf14a29a805f100d905fbc0ed25da7f95117f5df09ea2e",
                "5884a0cc1b9910b8584280d37c5e32cb8f447b400ed8cdf7e358f61f9df29a05",
                "2fe8996ce13b5537b1dd489b70e2280df9d18860c8772db82776bbb0864299d9",
                "52d331b6a98e54b8763fdd1b15b90795ce997cf001b1c58014a3032d04658b95",
                "15660bb88defdbc974ca87a319a2fb43792d466cbe4e2aaf5b952ff70d1d757f",
                "d83e7cbed0a3fa8fe34b169b57a4209448419d972ccad7f8616e557459e05467",
                "f19c8e6e1990e997c9d763a004c433942e7d9872212fc47a2bef025fc2d261aa",
                "776832886f5487734fbf673a32a782594e15357d0ee631095e9bced1a6a98c79",
                "ab5d1f614c14b7620585c033a82d1a5f713e1b31db05d3bc1b08c2ede7e3030c",
                "31025b7eda21c3a003604967809943b01b6ac35863a4680ff6a85e20c6932f4c",
                "84a8bbfaa8b5114d82991334dfade675cfb818dc7ca294b8d42c7a4cf7",
            ),
        ),
        (
            1,
            concat!(
                "5670825c1c8c446bf1adca2492a355893ddab95a7bc5d51a71e3e889a42cb40e",
                "bfe1e20406a96232467b5752d1a56e5cf114e62ce44ca137bcb3a038c92f6670",
                "1a9598d2aa16e5a0f38e67f9904c69b5b8c82ee4109ff907e9e8c87c184e45fc",
                "ac365e8187add57763b924a22ef24ac9e21ffb4ff5ac74b176d344fe01b90607",
                "73b57be6d0ff01d60eb4ddcd94005e165e7c5b7012669c57a00c5cd7dcf7f631",
                "506cd12a6905c289d1a3b767b75e14fb92f7522005e434e21dc5e4a3d843a7ee",
                "593c26f1c5cb60330f1828811247aa6870d5c0deaea152bbeafdcd837a9c8d81",
                "d1bed4dfaee0b0128071a82bb0e99de92681ba52f5532edfcdcd373f0f3606e8",
                "05a309e918532d3918efeedac4f1083a991f6aa6ed395ab6b455cd8e8cc1973b",
                "c6722976c9bd3c891d73cb45e4232947fd6bba4b107022caba22a49f2cda8f8b",
                "7194dd6e042365e4234d09cb0107fa0d0177824cbe7542713a27c98f2c155651",
                "75c10539617ac1d3fc712beff876a0dcaa43af1a69daaf7499bd3b23f85d4820",
                "2b07c42785117ec1b53f3a8610c214c85e811ee428e3f9be8c1ccba933958362",
                "133c3ffb46253ed67e1fce797f1855135f82683d9cdf76e8085685aa2e01fc6a",
                "5311b442b6ca58e8ca4bdda13126f7b5a0b8a0174ff9c7cad253b9a1b50b28ec",
                "cda387ee9f6541e6eac9d2ecb0b1d0ed07f1df645689a6684e9912941d",
            ),
        ),
        (
            2,
            concat!(
                "c1ccce7ac4c3abefa3265d1157459976a9dc74c860a6a3949e4b8e75bf21ef15",
                "e5e9544faef13b0ccfca345d292fc35e15d5434a0373ef0b861fc7ad19343528",
                "02e1b6b08495a592a7f631d30d7b6c307b19a519a3502016cb0f3048cbf2f37b",
                "cc4e3566bcbf067338da37fe6210c14f2340131a4b0352438f5fb66da65f88e5",
                "4669384e9d2308ab360d70391c3b7ccad0de2dc14138bd10b37439b23262093f",
                "86815d5d8e86120d317251d682b8cfad59e49c10431a5f34ab3018d0c50a4d79",
                "4d285a55795e8b2586fa6676d1a5b0c97201d41c7c18184e25919d97bb7ad364",
                "8b132c0fbb25e3ba1279588c4e2b15a273ffd727ccd127659207072a51e39643",
                "6fe25a59ee632eaa4934cb98efcdfa21fa60412619d4171c39e4921b2c3b238a",
                "520c19582635ffc8a759c44ff2152f0a80209ca19b5e7be82458c2b198d58004",
                "df2afcaebd9150de38c50f04c093f2409041541b44cae10c98af312a335f9ea1",
                "4b6ff18dd75e3b00308a82c139918771e3e74bd76b78840b02470a33da6d03dc",
                "8f11cf1d02f9b9290813e06930993a8c963584e9ed4f61b80a14e90a0ea4a01b",
                "d003e2f08f37f8426596afc3a80e1e0f3bbafa650307f404493b2ddd185b94e7",
                "0f16a909150ca4ed10ab88483d6c546aff0f809f6313d6b0785ecf04d3c2fc3c",
                "0b033082bfb39aaf19cf0184aa92ddf3832c6daa3516d9bcab7f46c174",
            ),
        ),
        (
            10,
            concat!(
                "e0f12d1929b30912332fcf4368ca0416f08528464961fbb834efc90c5db1a34d",
                "9a03c4f018dc1eda65b1a5d7e211812096533d915c5a9d686442204a79b028c0",
                "9ed1b4b015fdbf5a18b18011128c72836b918a116726fdb7a4b8c7a2bc5225b0",
                "ba48a3e27b5f87d20d643ccc796d699d536459f129605cc33809cee76df3d706",
                "255f71ef9b9f4b5d0506560212a8a43d6fd8250bbb3361086e937da0b6de8792",
                "88c9da57333b3dc6f51fb6bfde17a6373e6f2dc64a7b86e8fc94545f1dd15195",
                "69c0e4fa4862be38cffe1d01365339b82c0a53418abc0f5170a8656134b6301e",
                "feb264ef6305ab4e909e13105a00796fb1654033c30cf9a45b796c787d12e142",
                "297355e7ae7bcb21e694059ad67927fddaac30a4d8c292a5bb4a2c88c648b194",
                "38e6a1b7c19e8ccfbc32210587d90a059c843897648cb76e47dcbe62d2198c24",
                "801ed324d01ec7755ad566ebe223f8bbefc60c6e677a42860928adb1cc1d293a",
                "36bd2e382683a5fae0fa684dd35bf57c63b650128ccf6a445a2bc4291afe54f8",
                "3e9c7d9ffa48d7d219ca2f1ba7a8d6a3fd23f3f9df49a6a77b80306ef803e98a",
                "fa4a811a8b1de1f744e85aafb0b6a8ed59ffecc1cba9af7e567cac47030de70d",
                "df4e722a70dcd526fc02ad5ad1e067bff736f6654b8ccb9f48bb4936c49773c0",
                "55dd93f1090f8403dea0b162bb23f457ea337e2da93b10ba21e531cf0d",
            ),
        ),
        (
            20,
            concat!(
                "a331b5a9a5da43fdf2584c7a79da182a0ca11c14d22510bb65e29a79e89e4fb6",
                "6b10d7e103ac5efe0c9198283fbc0ba7f0e99f23d606e56cc65bee72c4cfe3f4",
                "259040f1f8e52b8eef3a73ef0027d01c05eb34919d93883e4bb02056621609ea",
                "7e1745fde1b555d5d183206ffce03914b5f32239f0354ab39894d1941ec9e302",
                "77bae47e29a29d24b33b335185e7c7a6eb7cd908a84c0d5f0b96075b65b197b2",
                "36c35b781a29df393e173591f1219834b5e962957ea3181fe1cf75f1c5a5ad18",
                "2e7194bea341cd3a569de7dc4d45fed828d02efde280b23c476b74117f440ed6",
                "7f896318d91c5ebceb4619e95b28bb926b1b77d065f7b6c4d3825b0ae7d4a624",
                "244a827d3d9ae6114d472f44be40235b36d3a960f514b1d348f94aa97cf7a9cc",
                "b6f4162a4e980939b70f5800376776f65384a353b9aa7bab56b73c3b5ab07395",
                "70c1217970eaeadacad92882fcf6ff295c5a0d87265068d8e58d81278ef22def",
                "2a7f0bd25d246331306f826cb32717f804b8f0b17c1ffad5c379b321d4049c61",
                "ffdb5e9cfa5af4e62890a67d1c2105431a8bddbea53b822f61f45ce035e0c6fb",
                "581466eb8163e70a336ed937e352d0e8ee971bd608d75ba566581c18f043bd01",
                "ccd5e3d84822c3528c6d6bdc636563a948975a1f5cfb62b510573e9d70a3aac8",
                "cbdbf8b631b6cd3166eeaf4fe455acf9f271fd825adfc98cef4e6c81da",
            ),
        ),
        (
            30,
            concat!(
                "19fab0542523e2e02c43e0a947cccd2aef311a8d39983e830554e9d26dcab271",
                "7e5a5039136835ee530181dda38c116fe230845bc31065f9bf7935cf1dab6664",
                "e7f51c484247523664ed7dae4a78af52584440c2bc95e7392f7358fc7c7a16a1",
                "b8a245d8dcbf699fb597c47002f59eed78bbe41539c5c26060627a88706bb935",
                "91caab3e57bdadf05557de719397f5ad513077cd3512b74497183caea9311c3c",
                "a82cde3cb89e20fca31e4dc9e56023cf2c5148fb6b47bc30ba8329941100ea48",
                "63aa211f227e23055d7343fe6dc5c0df22fddf705a34bb3dbcdc2e3f5aaf4ad5",
                "d90b02b5821f40fd22a4bd595a5c72d65b0eb4044eb27985baf62b547968bdab",
                "9f9d3bac81a73e8bdf3e97dabb58f15e167b9517a50d36eb2ae2313068868abb",
                "09dfad4494ed84e27f4dc73580c1a029c97a9760f860429a20162b4c135da5fa",
                "57143800b26cfa2c359eeb7f0046ee4c95eae208a7b785a7db0e2f8fa1c4a92a",
                "91085ad871779760ceb83c5330e004d632fce15bcc0bb8e04c08c6bfcfd1c1ad",
                "ef18b78825c937d1d94fdb7fc2d4d765a50c218cb62504b59107a36207c03b6c",
                "8ec622fad2ca733995070707170d7a0b209107328b9dc96bb886edbd60c2188b",
                "ee058d3a8fe850cf07190baa6a7b30028bc8fabbe35bd749f1eca1a4d5aabb52",
                "98fb66cec85dd68844a7bbb15fadc0d28619be2177dc8b1dd87e5278a5",
            ),
        ),
        (
            40,
            concat!(
                "cb4c257d1cfdee78f73e59f23d3e8b76a3ac909fcadfbac3542601a3dde47c3b",
                "a875dd68f1bb33443ed28b5ab8a1af4eb9a3e2bbf21a980635a2f0a5a9aafc20",
                "86fb1a752f12b8bbefc94ee8e0c7a7f0a57933fe7a01e2b4991b161ed1f73dac",
                "9d61ca6d9b371e888a32d9b7c044799283bb1c914611602a6ecd39387352d10c",
                "ce73aea5d89a2a473865dfeb3b5c4a7591ee0703d3d190a9c012ab408278f33c",
                "206428e1aa9b9f5744370f6f87c737ee5d99fe02a57b7549cd2bb35a679fef9d",
                "b58a016ac1f5be075777c08cc8cd78a36dde014a6c35645dbf4a7baa20e489d8",
                "af4fc0ccd905d976a60d1c1b19560615fc364f339b9f19231f5a86ffc714c5e2",
                "16f3dbe4a5a692b90cba3751533a2ebd9b241f61b24028e47af5e6089443da02",
                "612f9f3c4f566253eb9b4b84ce804e5edd93729f1acf2af490b323e7b87def77",
                "be802c94a2a74931d2372113cc4a994136bfc669c264281813da88296a7f4c4d",
                "f814723ebfc616ac6dd29d59867e5f7f3744738a3ce425f8e1ae8be69b670afc",
                "51282c07b003c57c497488f72c0485fca336fe96debe4746d3bfd7ccbc5129bd",
                "e74a90c36e63ef9040599db4b54fe5e65bd29e42f97aa157942cf766540c94fe",
                "e6ae3e01cf5da9401e9b1c650c3deea4e420a2092ab32c9b599e50df7b930e6b",
                "47540afe0562dd1255ef934a6e6b428281e4c860d8bd70e28da9a6a68f",
            ),
        ),
        (
            50,
            concat!(
                "e728044dc5c658c7059f6cb9619a4d9f0004f4bb41085eb5a88823b1dca83199",
                "ec632acc02f6923ab0bc3d99f41c095cd78cd83b0bd0e175eebdf5eb820ac4ed",
                "63bcdffe2f9b83633f983d0df822ab4aefbb19b3fec2e2c477b110a099504622",
                "8540f8d4d1320c9a51a8842bd476fb3586aa1909736b52f54929bff1142fcca8",
                "168a42434d1ab7fdfda13e1dd2850c7d08b98418bc6355c82d31b9b72b7bc769",
                "d1f34d9763f5bc2f9bcdcb12bbff9921ad74eaa04d63d17a5957761bbce5fd1f",
                "35fac010dbf5f311afd536977ec80b8125b3966c1dc1536b1c0c7906bf3f6355",
                "9448ee25b9bd2f9c86539a4e75ce1a36bfb43176a30acecfc35152a2d5b31534",
                "57a4900045d88420f6df04f6489c31d3f5cdd69c01508cd88caa62dda2600ee2",
                "393c1b35ef4bf72c8bc608c0d5230f136656d1e021ebd3d56fab1a57675d0ed0",
                "745fa96b95a00a13ddee5064a8df1b9b35d7cca33feb4469657485768f8b177a",
                "92e518818acf74012baf004bf0e84922186116d8bb907700ba898c5991b2db35",
                "53cbf63900b54169d96ae6d13a042b1528d59e5143b40471cb5e32242ed168af",
                "5c12b757139dc61f9d90e39160db07bf51a97cd926946fd8f8ddb138ed9f7627",
                "eaf416f3bc648b16e530433f9bac31683fc12b2b907168d8d12ab27af3e175dd",
                "c89327329c47fcb0586032f2a09ce8b2d25d1ed5e5fbf1d26753586618",
            ),
        ),
    ];
}

#[cfg(test)]
mod speed {
    /// Not a test: `cargo test --release -p weft-crypto speed -- --ignored --nocapture`
    /// compares AES-128-CTR implementations on 509-byte cells.
    #[test]
    #[ignore]
    fn aes_ctr_implementations() {
        use crate::aes_ctr::Aes128Ctr;
        let n = 2_000_000u32;
        let mut body = [7u8; 509];
        let time = |mut c: Aes128Ctr, body: &mut [u8; 509]| {
            let t = std::time::Instant::now();
            for _ in 0..n {
                c.apply_keystream(body);
            }
            t.elapsed()
        };
        let fast = Aes128Ctr::new(&[1u8; 16], &[0u8; 16]);
        eprintln!("weft's backend: vaes = {}", fast.is_vaes());
        let rc = time(Aes128Ctr::new_soft(&[1u8; 16], &[0u8; 16]), &mut body);
        let vc = time(fast, &mut body);
        let mut ctx = openssl::cipher_ctx::CipherCtx::new().unwrap();
        ctx.encrypt_init(
            Some(openssl::cipher::Cipher::aes_128_ctr()),
            Some(&[1u8; 16]),
            Some(&[0u8; 16]),
        )
        .unwrap();
        let t = std::time::Instant::now();
        for _ in 0..n {
            ctx.cipher_update_inplace(&mut body, 509).unwrap();
        }
        let os = t.elapsed();
        let line = |d: std::time::Duration| {
            format!(
                "{:.1} ns/cell ({:.2} GB/s)",
                d.as_nanos() as f64 / f64::from(n),
                509.0 * f64::from(n) / d.as_secs_f64() / 1e9
            )
        };
        eprintln!(
            "RustCrypto aes+ctr: {}; weft's: {}; OpenSSL EVP: {}",
            line(rc),
            line(vc),
            line(os)
        );
        std::hint::black_box(body);
    }
}
