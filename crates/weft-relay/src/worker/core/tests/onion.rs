//! The onion-service roles across workers: introduction (ESTABLISH_INTRO,
//! INTRODUCE1 → INTRODUCE2 → INTRODUCE_ACK) and rendezvous
//! (ESTABLISH_RENDEZVOUS, RENDEZVOUS1 → RENDEZVOUS2, spliced circuits), the
//! controller played by [`Net::onion_controller`].

use ed25519_dalek::{Signer, SigningKey};
use weft_proto::onion::{ack_status, hs_cmd, mac_sha3_256, ESTABLISH_INTRO_SIG_PREFIX};

use super::*;

/// A one-hop circuit from a client to worker `w` on its connection `conn`.
fn one_hop(net: &mut Net, w: usize, conn: usize, circ: u32) -> OriginCircuit {
    if net.cores[w].conn(conn).is_none() {
        net.open(w, conn, false);
    }
    let mut c = OriginCircuit::new();
    let create2 = c.create2(&target(net.relay, 9001)).unwrap();
    net.cell(w, conn, circ, cmd::CREATE2, &mut pad(&create2));
    let out = net.written(w, conn);
    let created = out.iter().find(|o| o.circ_id == circ).expect("CREATED2");
    let hlen = usize::from(u16::from_be_bytes([created.body[0], created.body[1]]));
    c.on_created2(&created.body[..2 + hlen]).unwrap();
    c
}

/// Send a relay message from `client` to weft on (w, conn, circ).
fn send(
    net: &mut Net,
    w: usize,
    conn: usize,
    circ: u32,
    client: &mut OriginCircuit,
    command: u8,
    data: &[u8],
) {
    let mut b = [0u8; BODY_LEN];
    client.send(0, command, 0, data, &mut b);
    net.cell(w, conn, circ, cmd::RELAY_EARLY, &mut b);
}

/// The service's one-hop circuit (connection 2 of worker 1, circuit
/// 0x8000_0002) sends `command`; the network settles.
fn from_service(net: &mut Net, service: &mut OriginCircuit, command: u8, body: &[u8]) {
    send(net, 1, 2, 0x8000_0002, service, command, body);
    net.settle();
}

/// The relay messages (command, data) `client` reads on (w, conn, circ),
/// and whether a DESTROY came.
fn read(
    net: &mut Net,
    w: usize,
    conn: usize,
    circ: u32,
    client: &mut OriginCircuit,
) -> (Vec<(u8, Vec<u8>)>, bool) {
    let mut msgs = Vec::new();
    let mut destroyed = false;
    for o in net
        .written(w, conn)
        .into_iter()
        .filter(|o| o.circ_id == circ)
    {
        if o.command == cmd::DESTROY {
            destroyed = true;
            continue;
        }
        let mut b = o.body;
        if let Ok((_, h)) = client.on_backward(&mut b) {
            msgs.push((h.command, relay::data(&b, &h).to_vec()));
        }
    }
    (msgs, destroyed)
}

fn establish_intro(sk: &SigningKey, nonce: &[u8; 20], burst: Option<u64>) -> Vec<u8> {
    let mut cell = vec![2, 0, 32];
    cell.extend_from_slice(sk.verifying_key().as_bytes());
    match burst {
        Some(b) => {
            cell.extend_from_slice(&[1, 1, 19, 2, 1]);
            cell.extend_from_slice(&1u64.to_be_bytes());
            cell.push(2);
            cell.extend_from_slice(&b.to_be_bytes());
        }
        None => cell.push(0),
    }
    let mac = mac_sha3_256(nonce, &cell);
    cell.extend_from_slice(&mac);
    let mut signed = ESTABLISH_INTRO_SIG_PREFIX.to_vec();
    signed.extend_from_slice(&cell);
    let sig = sk.sign(&signed);
    cell.extend_from_slice(&64u16.to_be_bytes());
    cell.extend_from_slice(&sig.to_bytes());
    cell
}

fn introduce1(key: &[u8; 32], marker: u8) -> Vec<u8> {
    let mut c = vec![0u8; 20];
    c.extend_from_slice(&[2, 0, 32]);
    c.extend_from_slice(key);
    c.push(0);
    c.extend_from_slice(&[marker; 150]);
    c
}

/// A service's introduction point on worker 1 (connection 2, circuit
/// 0x8000_0002) for the key made from `seed`, with the DoS extension's
/// `burst`: the service's circuit (INTRO_ESTABLISHED waits in it) and the
/// key.
fn intro_point(net: &mut Net, seed: u8, burst: Option<u64>) -> (OriginCircuit, [u8; 32]) {
    let mut service = one_hop(net, 1, 2, 0x8000_0002);
    let sk = SigningKey::from_bytes(&[seed; 32]);
    let cell = establish_intro(&sk, service.nonce(0).unwrap(), burst);
    from_service(net, &mut service, hs_cmd::ESTABLISH_INTRO, &cell);
    (service, sk.verifying_key().to_bytes())
}

/// A client's INTRODUCE1 `intro` on worker 0's connection 1, circuit `circ`.
fn send_introduce1(net: &mut Net, circ: u32, client: &mut OriginCircuit, intro: &[u8]) {
    send(net, 0, 1, circ, client, hs_cmd::INTRODUCE1, intro);
}

#[test]
fn an_introduction_crosses_workers_and_is_acked() {
    let mut net = Net::new(2, 64);
    // The service's introduction circuit on worker 1.
    let (mut service, key) = intro_point(&mut net, 7, None);
    let (msgs, _) = read(&mut net, 1, 2, 0x8000_0002, &mut service);
    assert_eq!(msgs, vec![(hs_cmd::INTRO_ESTABLISHED, vec![0])]);
    assert!(net.onion.intro_circuit(&key).is_some());
    // A client on worker 0 introduces itself.
    let mut client = one_hop(&mut net, 0, 1, 0x8000_0001);
    let intro = introduce1(&key, 0xAB);
    send_introduce1(&mut net, 0x8000_0001, &mut client, &intro);
    net.settle();
    let (msgs, _) = read(&mut net, 1, 2, 0x8000_0002, &mut service);
    assert_eq!(
        msgs,
        vec![(hs_cmd::INTRODUCE2, intro.clone())],
        "the same bytes"
    );
    let (msgs, _) = read(&mut net, 0, 1, 0x8000_0001, &mut client);
    assert_eq!(msgs, vec![(hs_cmd::INTRODUCE_ACK, vec![0, 0, 0])]);
    // A second INTRODUCE1 on that circuit: closed, and nothing relayed.
    send_introduce1(&mut net, 0x8000_0001, &mut client, &intro);
    net.settle();
    assert!(read(&mut net, 0, 1, 0x8000_0001, &mut client).1, "DESTROY");
    assert!(read(&mut net, 1, 2, 0x8000_0002, &mut service).0.is_empty());
    // An unknown service: UNKNOWN_ID.
    let mut other = one_hop(&mut net, 0, 1, 0x8000_0003);
    send_introduce1(
        &mut net,
        0x8000_0003,
        &mut other,
        &introduce1(&[1u8; 32], 1),
    );
    net.settle();
    let (msgs, _) = read(&mut net, 0, 1, 0x8000_0003, &mut other);
    assert_eq!(
        msgs,
        vec![(
            hs_cmd::INTRODUCE_ACK,
            vec![0, ack_status::UNKNOWN_ID as u8, 0]
        )]
    );
    assert_eq!(net.cores[1].counters.onion.introduce2_sent, 1);
    // The service's circuit closes: the controller forgets the key.
    net.cell(1, 2, 0x8000_0002, cmd::DESTROY, &mut pad(&[0]));
    net.settle();
    assert!(net.onion.intro_circuit(&key).is_none());
}

#[test]
fn the_intro_dos_extension_limits_introduce2() {
    let mut net = Net::new(2, 64);
    // Burst 2: C Tor lets one through, then says UNKNOWN_ID.
    let (mut service, key) = intro_point(&mut net, 8, Some(2));
    read(&mut net, 1, 2, 0x8000_0002, &mut service);
    let mut statuses = Vec::new();
    for i in 0..3u32 {
        let circ = 0x8000_0010 + i;
        let mut c = one_hop(&mut net, 0, 1, circ);
        send_introduce1(&mut net, circ, &mut c, &introduce1(&key, i as u8));
        net.settle();
        let (msgs, _) = read(&mut net, 0, 1, circ, &mut c);
        statuses.push(msgs[0].1[1]);
    }
    assert_eq!(statuses, [0, 1, 1]);
    assert_eq!(read(&mut net, 1, 2, 0x8000_0002, &mut service).0.len(), 1);
    assert_eq!(net.cores[1].counters.onion.introduce_limited, 2);
}

#[test]
fn a_rendezvous_splices_two_circuits_on_different_workers() {
    let mut net = Net::new(2, 64);
    let cookie = [0x5Au8; 20];
    let mut client = one_hop(&mut net, 0, 1, 0x8000_0001);
    send(
        &mut net,
        0,
        1,
        0x8000_0001,
        &mut client,
        hs_cmd::ESTABLISH_RENDEZVOUS,
        &cookie,
    );
    net.settle();
    let (msgs, _) = read(&mut net, 0, 1, 0x8000_0001, &mut client);
    assert_eq!(msgs, vec![(hs_cmd::RENDEZVOUS_ESTABLISHED, vec![])]);
    // A waiting circuit's connection may not move: the controller holds it.
    assert!(!net.cores[0].can_detach(1));
    // Another client with the same cookie is refused.
    let mut dup = one_hop(&mut net, 0, 1, 0x8000_0005);
    send(
        &mut net,
        0,
        1,
        0x8000_0005,
        &mut dup,
        hs_cmd::ESTABLISH_RENDEZVOUS,
        &cookie,
    );
    net.settle();
    assert!(read(&mut net, 0, 1, 0x8000_0005, &mut dup).1, "closed");
    // The service, on worker 1.
    let mut service = one_hop(&mut net, 1, 2, 0x8000_0002);
    let mut r1 = cookie.to_vec();
    r1.extend_from_slice(&[0xCD; 64]);
    from_service(&mut net, &mut service, hs_cmd::RENDEZVOUS1, &r1);
    let (msgs, _) = read(&mut net, 0, 1, 0x8000_0001, &mut client);
    assert_eq!(msgs, vec![(hs_cmd::RENDEZVOUS2, vec![0xCD; 64])]);
    assert_eq!(net.onion.sizes().1, 0);
    // End-to-end cells (a layer weft does not have) cross both ways.
    for i in 0..10u8 {
        let mut b = [i; BODY_LEN];
        b[1] = 0xEE; // "recognized" is not zero for any hop of ours
        let plain = b;
        client.encrypt_beyond(&mut b);
        net.cell(0, 1, 0x8000_0001, cmd::RELAY, &mut b);
        net.settle();
        let out = net.written(1, 2);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].command, cmd::RELAY);
        let mut got = out[0].body;
        assert!(
            service.on_backward(&mut got).is_err(),
            "not for the service's hop"
        );
        assert_eq!(got, plain, "client → service");
        let mut back = [i ^ 0x55; BODY_LEN];
        back[1] = 0xEE;
        let plain = back;
        service.encrypt_beyond(&mut back);
        net.cell(1, 2, 0x8000_0002, cmd::RELAY, &mut back);
        net.settle();
        let out = net.written(0, 1);
        let mut got = out[0].body;
        assert!(client.on_backward(&mut got).is_err());
        assert_eq!(got, plain, "service → client");
    }
    // Every relay cell of a rendezvous circuit counts for the hidserv
    // statistics: the two ESTABLISH_RENDEZVOUS (the duplicate's too) and
    // ten on the client's side, RENDEZVOUS1 and ten on the service's.
    assert_eq!(net.cores[0].counters.onion.rend_cells, 12);
    assert_eq!(net.cores[1].counters.onion.rend_cells, 11);
    // Spliced circuits migrate like any other.
    assert!(net.cores[0].can_detach(1));
    // One side closes: so does the other.
    net.cell(1, 2, 0x8000_0002, cmd::DESTROY, &mut pad(&[0]));
    net.settle();
    let out = net.written(0, 1);
    assert!(out
        .iter()
        .any(|o| o.circ_id == 0x8000_0001 && o.command == cmd::DESTROY));
}

#[test]
fn a_rendezvous1_for_an_unknown_cookie_closes_its_circuit() {
    let mut net = Net::new(2, 64);
    let mut service = one_hop(&mut net, 1, 2, 0x8000_0002);
    let mut r1 = vec![9u8; 20];
    r1.extend_from_slice(&[1; 64]);
    from_service(&mut net, &mut service, hs_cmd::RENDEZVOUS1, &r1);
    let out = net.written(1, 2);
    assert_eq!(
        (out.len(), out[0].command, out[0].body[0]),
        (1, cmd::DESTROY, destroy_reason::PROTOCOL)
    );
    assert_eq!(net.cores[1].circuit_count(2), 0);
    assert!(pool_empty(&net));
}

#[test]
fn an_introduction_point_moves_and_introductions_follow_it() {
    let mut net = Net::new(3, 64);
    let (mut service, key) = intro_point(&mut net, 6, None);
    read(&mut net, 1, 2, 0x8000_0002, &mut service);
    let old = net.onion.intro_circuit(&key).unwrap();
    // An INTRODUCE1 is on its way to the old reference while the service's
    // connection moves from worker 1 to worker 2.
    let mut client = one_hop(&mut net, 0, 1, 0x8000_0001);
    let intro = introduce1(&key, 0x42);
    send_introduce1(&mut net, 0x8000_0001, &mut client, &intro);
    net.onion_controller();
    let moved = net.cores[1].detach(2).unwrap();
    net.collect(1);
    net.cores[2].attach(2, moved, 1);
    net.collect(2);
    net.settle();
    assert_ne!(
        net.onion.intro_circuit(&key).unwrap(),
        old,
        "the controller has the new reference"
    );
    let (msgs, _) = read(&mut net, 2, 2, 0x8000_0002, &mut service);
    assert_eq!(msgs, vec![(hs_cmd::INTRODUCE2, intro)]);
    let (msgs, _) = read(&mut net, 0, 1, 0x8000_0001, &mut client);
    assert_eq!(msgs[0].1, vec![0, 0, 0]);
}
