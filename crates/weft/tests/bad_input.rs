//! Acceptance 5 of the first issue: malformed and hostile input closes
//! exactly the offending circuit or connection, with a clear log line, while
//! other circuits keep working and the process lives.

mod common;

use cipher::{KeyIvInit, StreamCipher};
use common::{LinkClient, WeftProcess};
use sha1::{Digest, Sha1};

type Aes128Ctr = ctr::Ctr128BE<aes::Aes128>;

const RELAY: u8 = 3;
const DESTROY: u8 = 4;
const CREATE_FAST: u8 = 5;
const CREATED_FAST: u8 = 6;
const RELAY_EARLY: u8 = 9;
const CREATE2: u8 = 10;

/// The client end of a one-hop circuit made with CREATE_FAST.
struct Hop {
    circ: u32,
    fwd: Aes128Ctr,
    back: Aes128Ctr,
    df: Sha1,
    db: Sha1,
}

impl Hop {
    fn create_fast(c: &mut LinkClient, circ: u32) -> Hop {
        let x: [u8; 20] = weft_crypto::random_array();
        c.send_fixed(circ, CREATE_FAST, &x);
        let (rc, cmd, body) = c.read_fixed().expect("CREATED_FAST");
        assert_eq!((rc, cmd), (circ, CREATED_FAST));
        let mut seed = x.to_vec();
        seed.extend_from_slice(&body[..20]);
        let mut km = [0u8; 92];
        weft_crypto::kdf::kdf_tor(&seed, &mut km);
        assert_eq!(&km[..20], &body[20..40], "KH mismatch");
        let k = &km[20..];
        let mut df = Sha1::new();
        df.update(&k[0..20]);
        let mut db = Sha1::new();
        db.update(&k[20..40]);
        Hop {
            circ,
            fwd: Aes128Ctr::new(k[40..56].into(), &[0u8; 16].into()),
            back: Aes128Ctr::new(k[56..72].into(), &[0u8; 16].into()),
            df,
            db,
        }
    }

    /// Send a relay message addressed to this hop.
    fn send(&mut self, c: &mut LinkClient, cell_cmd: u8, relay_cmd: u8, stream: u16, data: &[u8]) {
        let mut b = [0u8; 509];
        b[0] = relay_cmd;
        b[3..5].copy_from_slice(&stream.to_be_bytes());
        b[9..11].copy_from_slice(&(data.len() as u16).to_be_bytes());
        b[11..11 + data.len()].copy_from_slice(data);
        self.df.update(b);
        let d = self.df.clone().finalize();
        b[5..9].copy_from_slice(&d[..4]);
        self.fwd.apply_keystream(&mut b);
        c.send_fixed(self.circ, cell_cmd, &b);
    }

    /// Read one relay cell for this circuit; returns (relay command, data).
    fn recv(&mut self, c: &mut LinkClient) -> Option<(u8, Vec<u8>)> {
        let (circ, cmd, mut body) = c.read_fixed()?;
        assert_eq!(circ, self.circ, "cell for another circuit (cmd {cmd})");
        if cmd != RELAY {
            return Some((255, vec![cmd, body[0]]));
        }
        self.back.apply_keystream(&mut body);
        assert_eq!(&body[1..3], &[0, 0], "not recognized");
        let mut check = body.clone();
        check[5..9].fill(0);
        self.db.update(&check);
        let d = self.db.clone().finalize();
        assert_eq!(&body[5..9], &d[..4], "bad digest");
        let len = usize::from(u16::from_be_bytes([body[9], body[10]]));
        Some((body[0], body[11..11 + len].to_vec()))
    }

    /// A round trip through the keyed half: BEGIN is answered with END. The
    /// test connects as a client (no certificates), so weft answers as C
    /// Tor does a client that uses it as a one-hop proxy: TORPROTOCOL.
    fn round_trip(&mut self, c: &mut LinkClient, stream: u16) {
        self.send(c, RELAY, 1, stream, b"127.0.0.1:80\0");
        let (cmd, data) = self.recv(c).expect("reply to BEGIN");
        assert_eq!(cmd, 3, "expected END");
        assert_eq!(data, vec![13], "expected reason TORPROTOCOL");
    }
}

#[test]
fn hostile_input_closes_only_what_is_at_fault() {
    let mut weft = WeftProcess::start(2, "");
    let addr = weft.addr();

    // A healthy circuit on its own connection that must survive everything.
    let mut good = LinkClient::connect(addr);
    let mut good_hop = Hop::create_fast(&mut good, 0x8000_0001);
    good_hop.round_trip(&mut good, 1);

    // 1. Bad VERSIONS cells: odd length, and no common version.
    for versions in [
        vec![0u8, 0, 7, 0, 3, 0, 4, 0],
        vec![0u8, 0, 7, 0, 4, 0, 1, 0, 2],
    ] {
        let mut c = LinkClient::connect_tls(addr);
        c.send(&versions);
        assert!(
            c.closed_by_peer(),
            "bad VERSIONS did not close the connection"
        );
    }
    assert!(common::wait_for_log(&weft, "bad VERSIONS cell"));

    // 2. A cell before the handshake completes (CREATE2 before VERSIONS).
    let mut c = LinkClient::connect_tls(addr);
    let mut cell = vec![0u8, 0, 10];
    cell.resize(512, 0);
    c.send(&cell);
    assert!(c.closed_by_peer());
    assert!(common::wait_for_log(
        &weft,
        "unexpected CREATE2 cell during link handshake"
    ));

    // 3. On one open connection: RELAY on an unknown circuit (dropped),
    //    an unknown command (dropped), a wrong CREATE2 (that circuit
    //    refused), too many RELAY_EARLY (that circuit closed), an oversized
    //    relay length (that circuit closed) — the connection's other circuit
    //    keeps working after each.
    let mut c = LinkClient::connect(addr);
    let mut hop = Hop::create_fast(&mut c, 0x8000_0010);
    c.send_fixed(0x8000_0999, RELAY, &[1u8; 509]);
    c.send_fixed(0x8000_0010, 99, &[0u8; 509]);
    hop.round_trip(&mut c, 2);

    let mut create2 = vec![0u8, 2, 0, 84];
    create2.extend_from_slice(&[7u8; 84]);
    c.send_fixed(0x8000_0020, CREATE2, &create2);
    let (circ, cmd, body) = c.read_fixed().unwrap();
    assert_eq!(
        (circ, cmd, body[0]),
        (0x8000_0020, DESTROY, 1),
        "wrong CREATE2 not refused"
    );
    hop.round_trip(&mut c, 3);
    assert!(common::wait_for_log(
        &weft,
        "refusing CREATE2 on circuit 0x80000020"
    ));

    // Circuit ID with the wrong top bit.
    c.send_fixed(0x0000_0030, CREATE_FAST, &[1u8; 20]);
    let (circ, cmd, body) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd, body[0]), (0x30, DESTROY, 1));

    let mut early = Hop::create_fast(&mut c, 0x8000_0040);
    for i in 0..8 {
        early.send(&mut c, RELAY_EARLY, 10, 0, &[i]); // DROP cells
    }
    early.send(&mut c, RELAY_EARLY, 10, 0, &[9]);
    let (circ, cmd, body) = c.read_fixed().unwrap();
    assert_eq!(
        (circ, cmd, body[0]),
        (0x8000_0040, DESTROY, 1),
        "9th RELAY_EARLY not refused"
    );
    assert!(common::wait_for_log(&weft, "more than 8 RELAY_EARLY cells"));
    hop.round_trip(&mut c, 4);

    let mut big = Hop::create_fast(&mut c, 0x8000_0050);
    {
        // A recognized relay cell whose length field exceeds the cell.
        let mut b = [0u8; 509];
        b[0] = 2;
        b[9..11].copy_from_slice(&600u16.to_be_bytes());
        big.df.update(b);
        let d = big.df.clone().finalize();
        b[5..9].copy_from_slice(&d[..4]);
        big.fwd.apply_keystream(&mut b);
        c.send_fixed(0x8000_0050, RELAY, &b);
    }
    let (circ, cmd, _) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd), (0x8000_0050, DESTROY));
    hop.round_trip(&mut c, 5);

    // 4. A truncated cell and then EOF: that connection goes, nothing else.
    let mut t = LinkClient::connect(addr);
    t.send(&[0x80, 0, 0, 1, 5, 1, 2, 3]);
    drop(t);

    good_hop.round_trip(&mut good, 6);
    hop.round_trip(&mut c, 7);
    assert!(weft.alive(), "weft died");
    let log = weft.log_text();
    assert!(!log.contains("panicked"), "panic in log:\n{log}");
}

/// Hostile onion-service cells: each is answered as C Tor answers it and
/// closes at most its own circuit.
#[test]
fn hostile_onion_service_cells_close_only_their_circuit() {
    let mut weft = WeftProcess::start(2, "");
    let mut c = LinkClient::connect(weft.addr());
    let mut keep = Hop::create_fast(&mut c, 0x8000_0001);
    keep.round_trip(&mut c, 1);

    // A forged ESTABLISH_INTRO (MAC and signature of zeros): closed.
    let mut forged = Hop::create_fast(&mut c, 0x8000_0002);
    let mut est = vec![2u8, 0, 32];
    est.extend_from_slice(&[0x11; 32]);
    est.push(0);
    est.extend_from_slice(&[0; 32]);
    est.extend_from_slice(&[0, 64]);
    est.extend_from_slice(&[0; 64]);
    forged.send(&mut c, RELAY_EARLY, 32, 0, &est);
    let (circ, cmd, body) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd, body[0]), (0x8000_0002, DESTROY, 1));
    assert!(common::wait_for_log(&weft, "refusing ESTABLISH_INTRO"));
    keep.round_trip(&mut c, 2);

    // INTRODUCE1 from a client's first hop: closed, never relayed.
    let mut intro = Hop::create_fast(&mut c, 0x8000_0003);
    let mut i1 = vec![0u8; 20];
    i1.extend_from_slice(&[2, 0, 32]);
    i1.extend_from_slice(&[0x11; 32]);
    i1.extend_from_slice(&[0, 1, 2, 3]);
    intro.send(&mut c, RELAY_EARLY, 34, 0, &i1);
    let (circ, cmd, _) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd), (0x8000_0003, DESTROY));
    keep.round_trip(&mut c, 3);

    // A cookie of the wrong length: closed. A good one: established; the
    // same cookie on another circuit: that one closed.
    let mut bad = Hop::create_fast(&mut c, 0x8000_0004);
    bad.send(&mut c, RELAY_EARLY, 33, 0, &[5u8; 19]);
    assert_eq!(c.read_fixed().unwrap().1, DESTROY);
    let mut rend = Hop::create_fast(&mut c, 0x8000_0005);
    rend.send(&mut c, RELAY_EARLY, 33, 0, &[5u8; 20]);
    assert_eq!(
        rend.recv(&mut c),
        Some((39, vec![])),
        "RENDEZVOUS_ESTABLISHED"
    );
    let mut dup = Hop::create_fast(&mut c, 0x8000_0006);
    dup.send(&mut c, RELAY_EARLY, 33, 0, &[5u8; 20]);
    let (circ, cmd, _) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd), (0x8000_0006, DESTROY));
    assert!(common::wait_for_log(&weft, "duplicate rendezvous cookie"));

    // RENDEZVOUS1 for a cookie nobody waits on: closed.
    let mut r1 = Hop::create_fast(&mut c, 0x8000_0007);
    let mut body = vec![6u8; 20];
    body.extend_from_slice(&[1; 64]);
    r1.send(&mut c, RELAY_EARLY, 36, 0, &body);
    let (circ, cmd, reason) = c.read_fixed().unwrap();
    assert_eq!((circ, cmd, reason[0]), (0x8000_0007, DESTROY, 1));

    // RENDEZVOUS1 for the waiting cookie: the two circuits join, and the
    // client's side gets RENDEZVOUS2.
    let mut svc = Hop::create_fast(&mut c, 0x8000_0008);
    let mut body = vec![5u8; 20];
    body.extend_from_slice(&[0xAB; 64]);
    svc.send(&mut c, RELAY_EARLY, 36, 0, &body);
    assert_eq!(rend.recv(&mut c), Some((37, vec![0xAB; 64])), "RENDEZVOUS2");

    keep.round_trip(&mut c, 4);
    assert!(weft.alive(), "weft died");
    let log = weft.log_text();
    assert!(!log.contains("panicked"), "panic in log:\n{log}");
}

/// ntor-v3 subprotocol requests against the running relay, from weft's own
/// client: what C's `relay_process_subproto_ext` refuses (a capability
/// other than Relay=6; CGO without congestion control) gets DESTROY with
/// a log line and nothing else closes; a request for CGO gets a circuit
/// whose cells are CGO with relay cell format V1 (a cell changed on the
/// way is not recognized and closes that circuit only).
#[test]
fn subprotocol_requests_are_refused_as_c_refuses_them_and_cgo_runs() {
    use base64::Engine;
    use weft_proto::origin::OriginCircuit;
    use weft_proto::relay::{self, relay_cmd};
    let mut weft = WeftProcess::start(2, "");
    let mut hop = weft.hop_target().unwrap();
    // ntor-v3 names the relay by its Ed25519 identity.
    let ed = std::fs::read_to_string(weft.dir.path().join("data/fingerprint-ed25519")).unwrap();
    let ed = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(ed.split_whitespace().nth(1).unwrap().trim_end_matches('='))
        .unwrap();
    hop.ed_id = Some(ed.try_into().unwrap());
    let mut c = LinkClient::connect(weft.addr());
    let mut keep = Hop::create_fast(&mut c, 0x8000_0001);
    keep.round_trip(&mut c, 1);
    let pad = |b: &[u8]| {
        let mut p = [0u8; 509];
        p[..b.len()].copy_from_slice(b);
        p
    };
    for (i, msg) in [
        &[2u8, 1, 0, 3, 2, 2, 5][..], // Relay=5 itself
        &[2, 1, 0, 3, 2, 11, 2],      // FlowCtrl=2
        &[1, 3, 2, 2, 6],             // CGO without congestion control
        &[2, 1, 0, 3, 3, 2, 6, 0],    // an odd-length request
    ]
    .into_iter()
    .enumerate()
    {
        let circ = 0x8000_0100 + i as u32;
        let mut o = OriginCircuit::new();
        let create2 = o.create2_ntor_v3(&hop, msg).unwrap();
        c.send_fixed(circ, CREATE2, &pad(&create2));
        let (rc, cmd, body) = c.read_fixed().unwrap();
        assert_eq!(
            (rc, cmd, body[0]),
            (circ, DESTROY, 1),
            "{msg:?} not refused"
        );
        keep.round_trip(&mut c, 2 + i as u16);
    }
    assert!(common::wait_for_log(&weft, "ntor-v3 extensions"));

    // CGO, as a C client asks its exit.
    let circ = 0x8000_0200;
    let mut o = OriginCircuit::new();
    let create2 = o.create2_ntor_v3(&hop, &[2, 1, 0, 3, 2, 2, 6]).unwrap();
    c.send_fixed(circ, CREATE2, &pad(&create2));
    let (rc, cmd, body) = c.read_fixed().unwrap();
    assert_eq!((rc, cmd), (circ, 11), "CREATED2");
    let hlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
    o.on_created2(&body[..2 + hlen]).unwrap();
    assert!(o.is_cgo(0));
    // BEGIN at a relay that is no exit: END, in V1, read through CGO.
    for stream in 1..=3u16 {
        let mut b = [0u8; 509];
        o.send(0, relay_cmd::BEGIN, stream, b"example.com:80\0", &mut b);
        c.send_fixed(circ, RELAY, &b);
        let (rc, cmd, body) = c.read_fixed().unwrap();
        assert_eq!((rc, cmd), (circ, RELAY));
        let mut b: [u8; 509] = body[..509].try_into().unwrap();
        let (_, h) = o.on_backward(&mut b).unwrap();
        assert_eq!((h.command, h.stream_id), (relay_cmd::END, stream));
        assert_eq!(relay::data(&b, &h).len(), 1);
    }
    // A changed byte: no layer recognizes it, and the circuit stops here.
    let mut b = [0u8; 509];
    o.send(0, relay_cmd::DROP, 0, &[], &mut b);
    b[200] ^= 0x40;
    c.send_fixed(circ, RELAY, &b);
    let (rc, cmd, _) = c.read_fixed().unwrap();
    assert_eq!((rc, cmd), (circ, DESTROY));
    keep.round_trip(&mut c, 9);
    assert!(weft.alive(), "weft died");
    let log = weft.log_text();
    assert!(!log.contains("panicked"), "panic in log:\n{log}");
}
