//! Tests of the keyed half's answers to the relay commands addressed to it,
//! with a real client circuit ([`OriginCircuit`]) at the other end.

use ed25519_dalek::{Signer, SigningKey};

use super::*;
use crate::onion::{ack_status, mac_sha3_256, ESTABLISH_INTRO_SIG_PREFIX};
use crate::origin::{HopTarget, OriginCircuit};

/// Where a client finds the relay with `keys`.
fn target(keys: &HandshakeKeys) -> HopTarget {
    HopTarget {
        rsa_id: keys.rsa_fp,
        ed_id: Some(keys.ed_id),
        ntor_key: keys.ntor[0].public.to_bytes(),
        addr: ([127, 0, 0, 1], 9001).into(),
    }
}

/// A one-hop circuit from a client to a keyed half.
fn circuit() -> (OriginCircuit, KeyedHalf) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keys, _) = crate::fuzzing::test_identity(dir.path());
    let t = target(&keys);
    let mut client = OriginCircuit::new();
    let create2 = client.create2(&t).unwrap();
    let (created2, half, _) = answer_create2(&keys, &create2, None).unwrap();
    client.on_created2(&created2).unwrap();
    (client, half)
}

/// Send one relay message to the half; returns what it did and, for a
/// reply, the (command, data) the client reads.
fn send(
    client: &mut OriginCircuit,
    half: &mut KeyedHalf,
    command: u8,
    stream: u16,
    data: &[u8],
    ctx: &ForwardCtx,
) -> (ForwardAction, Option<(u8, Vec<u8>)>) {
    let mut body = [0u8; BODY_LEN];
    client.send(0, command, stream, data, &mut body);
    let a = half.on_forward(cmd::RELAY_EARLY, &mut body, ctx);
    let reply = match a {
        ForwardAction::Reply | ForwardAction::IntroEstablished { .. } => {
            let (_, h) = client.on_backward(&mut body).unwrap();
            Some((h.command, relay::data(&body, &h).to_vec()))
        }
        _ => None,
    };
    (a, reply)
}

fn establish_intro(sk: &SigningKey, nonce: &[u8; 20], tamper: bool) -> Vec<u8> {
    let mut cell = vec![2, 0, 32];
    cell.extend_from_slice(sk.verifying_key().as_bytes());
    // A DoS extension: rate 10/s, burst 20.
    cell.extend_from_slice(&[1, 1, 19, 2, 1]);
    cell.extend_from_slice(&10u64.to_be_bytes());
    cell.push(2);
    cell.extend_from_slice(&20u64.to_be_bytes());
    let mac = mac_sha3_256(nonce, &cell);
    cell.extend_from_slice(&mac);
    let mut signed = ESTABLISH_INTRO_SIG_PREFIX.to_vec();
    signed.extend_from_slice(&cell);
    let mut sig = sk.sign(&signed).to_bytes();
    if tamper {
        sig[5] ^= 1;
    }
    cell.extend_from_slice(&64u16.to_be_bytes());
    cell.extend_from_slice(&sig);
    cell
}

#[test]
fn a_path_bias_probe_is_answered_with_its_address() {
    let (mut client, mut half) = circuit();
    let (a, reply) = send(
        &mut client,
        &mut half,
        relay_cmd::BEGIN,
        7,
        b"0.1.2.3:25\0",
        &ForwardCtx::default(),
    );
    assert_eq!(a, ForwardAction::Reply);
    let (c, d) = reply.unwrap();
    assert_eq!(c, relay_cmd::END);
    assert_eq!(d, [end_reason::EXITPOLICY, 0, 1, 2, 3, 0, 0, 0x07, 0x08]);
    let (_, reply) = send(
        &mut client,
        &mut half,
        relay_cmd::RESOLVE,
        8,
        b"example.com\0",
        &ForwardCtx::default(),
    );
    assert_eq!(reply.unwrap().1[0], 0xF1);
}

#[test]
fn an_introduction_point_is_established_once() {
    let (mut client, mut half) = circuit();
    let nonce = *client.nonce(0).unwrap();
    let sk = SigningKey::from_bytes(&[3u8; 32]);
    let ctx = ForwardCtx {
        intro_dos: (false, 25, 200),
        now_s: 100,
        ..Default::default()
    };
    let cell = establish_intro(&sk, &nonce, false);
    let (a, reply) = send(
        &mut client,
        &mut half,
        hs_cmd::ESTABLISH_INTRO,
        0,
        &cell,
        &ctx,
    );
    assert_eq!(
        a,
        ForwardAction::IntroEstablished {
            auth_key: sk.verifying_key().to_bytes()
        }
    );
    assert_eq!(reply, Some((hs_cmd::INTRO_ESTABLISHED, vec![0])));
    let Purpose::IntroPoint(ip) = half.purpose.clone() else {
        panic!("not an introduction point");
    };
    let mut bucket = ip.bucket;
    // The service's DoS extension (10/s, burst 20) applies.
    assert_eq!((0..30).filter(|_| bucket.can_send(100)).count(), 19);
    // Again on the same circuit: refused (it is no ordinary circuit now).
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::ESTABLISH_INTRO,
        0,
        &cell,
        &ctx,
    );
    assert!(matches!(
        a,
        ForwardAction::Close {
            reason: destroy_reason::PROTOCOL,
            ..
        }
    ));
}

#[test]
fn a_forged_or_replayed_establish_intro_is_refused() {
    let sk = SigningKey::from_bytes(&[3u8; 32]);
    let (mut client, mut half) = circuit();
    let nonce = *client.nonce(0).unwrap();
    let forged = establish_intro(&sk, &nonce, true);
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::ESTABLISH_INTRO,
        0,
        &forged,
        &ForwardCtx::default(),
    );
    assert!(matches!(a, ForwardAction::Close { ref why, .. } if why.contains("signature")));
    // A cell made for another circuit (another nonce): the MAC fails.
    let (mut client2, mut half2) = circuit();
    let other = establish_intro(&sk, &nonce, false);
    let (a, _) = send(
        &mut client2,
        &mut half2,
        hs_cmd::ESTABLISH_INTRO,
        0,
        &other,
        &ForwardCtx::default(),
    );
    assert!(matches!(a, ForwardAction::Close { ref why, .. } if why.contains("handshake_auth")));
}

#[test]
fn one_introduce1_per_circuit_and_never_from_a_one_hop_client() {
    let mut intro1 = vec![0u8; 20];
    intro1.extend_from_slice(&[2, 0, 32]);
    intro1.extend_from_slice(&[9u8; 32]);
    intro1.push(0);
    intro1.extend_from_slice(&[1u8; 100]);
    let (mut client, mut half) = circuit();
    let ctx = ForwardCtx::default();
    let (a, _) = send(&mut client, &mut half, hs_cmd::INTRODUCE1, 0, &intro1, &ctx);
    assert!(
        matches!(a, ForwardAction::Introduce { auth_key, .. } if auth_key == [9u8; 32]),
        "{a:?}"
    );
    let (a, _) = send(&mut client, &mut half, hs_cmd::INTRODUCE1, 0, &intro1, &ctx);
    assert!(
        matches!(a, ForwardAction::Close { .. }),
        "a second INTRODUCE1"
    );
    // A malformed one gets a NACK, the circuit stays.
    let (mut client, mut half) = circuit();
    let (a, reply) = send(
        &mut client,
        &mut half,
        hs_cmd::INTRODUCE1,
        0,
        &intro1[..40],
        &ctx,
    );
    assert_eq!(a, ForwardAction::Reply);
    assert_eq!(
        reply,
        Some((
            hs_cmd::INTRODUCE_ACK,
            vec![0, ack_status::BAD_FORMAT as u8, 0]
        ))
    );
    // Shorter than a legacy key ID: closed.
    let (mut client, mut half) = circuit();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::INTRODUCE1,
        0,
        &intro1[..10],
        &ctx,
    );
    assert!(matches!(a, ForwardAction::Close { .. }));
    // From a client's first hop: closed.
    let (mut client, mut half) = circuit();
    half.prev_is_client = true;
    let one_hop = ForwardCtx::default();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::INTRODUCE1,
        0,
        &intro1,
        &one_hop,
    );
    assert!(matches!(a, ForwardAction::Close { .. }));
}

#[test]
fn rendezvous_cells_change_the_purpose() {
    let ctx = ForwardCtx::default();
    let (mut client, mut half) = circuit();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::ESTABLISH_RENDEZVOUS,
        0,
        &[5u8; 19],
        &ctx,
    );
    assert!(
        matches!(a, ForwardAction::Close { .. }),
        "cookie of 19 bytes"
    );
    let (mut client, mut half) = circuit();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::ESTABLISH_RENDEZVOUS,
        0,
        &[5u8; 20],
        &ctx,
    );
    assert_eq!(a, ForwardAction::EstablishRendezvous { cookie: [5u8; 20] });
    // While it waits, a cell not for us has nowhere to go: closed.
    let mut junk = [0x42u8; BODY_LEN];
    assert!(matches!(
        half.on_forward(cmd::RELAY, &mut junk, &ctx),
        ForwardAction::Close { .. }
    ));
    // Spliced: such cells pass to the other circuit, as RELAY.
    half.purpose = Purpose::Spliced;
    let mut junk = [0x42u8; BODY_LEN];
    assert_eq!(
        half.on_forward(cmd::RELAY_EARLY, &mut junk, &ctx),
        ForwardAction::Pass {
            command: cmd::RELAY
        }
    );

    let (mut client, mut half) = circuit();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::RENDEZVOUS1,
        0,
        &[6u8; 10],
        &ctx,
    );
    assert!(matches!(a, ForwardAction::Close { .. }));
    let (mut client, mut half) = circuit();
    let (a, _) = send(
        &mut client,
        &mut half,
        hs_cmd::RENDEZVOUS1,
        0,
        &[6u8; 84],
        &ctx,
    );
    assert!(
        matches!(a, ForwardAction::Rendezvous1 { cookie, .. } if cookie == [6u8; 20]),
        "{a:?}"
    );
    assert_eq!(half.purpose, Purpose::Joining);
}

/// ntor-v3 with a client message: congestion control is accepted when
/// asked for and enabled, with our sendme_inc; other answers are empty.
#[test]
fn ntor_v3_negotiates_congestion_control() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keys, _) = crate::fuzzing::test_identity(dir.path());
    let t = target(&keys);
    let on = congestion::CcParams::default();
    let off = congestion::CcParams {
        enabled: false,
        ..on
    };
    for (msg, cc, want, negotiated) in [
        (&[1u8, 1, 0][..], Some(&on), &[1u8, 2, 1, 31][..], true),
        (&[1, 1, 0], Some(&off), &[0], false),
        (&[1, 1, 0], None, &[0], false),
        (&[0], Some(&on), &[0], false),
        // An unknown extension, then CC: CC only.
        (&[2, 99, 1, 7, 1, 0], Some(&on), &[1, 2, 1, 31], true),
    ] {
        let mut client = OriginCircuit::new();
        let create2 = client.create2_ntor_v3(&t, msg).unwrap();
        let (created2, half, kind) = answer_create2(&keys, &create2, cc).unwrap();
        assert_eq!(kind, HandshakeKind::NtorV3);
        client.on_created2(&created2).unwrap();
        assert_eq!(client.server_message(0).unwrap(), want, "{msg:?}");
        assert_eq!(half.congestion().is_some(), negotiated);
        assert_eq!(client.nonce(0), Some(&half.nonce));
    }
    // A malformed extension list fails the handshake; so does a
    // subprotocol request for what we do not grant (Relay=5, FlowCtrl=2),
    // and CGO without congestion control (asked or enabled), as C refuses
    // them: the client has switched to what it asked for, so answering
    // without it would leave it a circuit that cannot work.
    for (msg, cc) in [
        (&[2u8, 1, 0][..], &on),
        (&[2, 1, 0, 3, 2, 2, 5], &on),
        (&[2, 1, 0, 3, 2, 11, 2], &on),
        (&[1, 3, 2, 2, 6], &on),
        (&[2, 1, 0, 3, 2, 2, 6], &off),
    ] {
        let mut client = OriginCircuit::new();
        let create2 = client.create2_ntor_v3(&t, msg).unwrap();
        assert!(
            answer_create2(&keys, &create2, Some(cc)).is_err(),
            "{msg:?}"
        );
    }
}

/// What a C 0.4.9 client sends its exit when it wants CGO: congestion
/// control, then the subprotocol request for Relay=6.
const CC_AND_CGO: [u8; 7] = [2, 1, 0, 3, 2, 2, 6];

/// A one-hop CGO circuit (congestion control on, as CGO needs).
fn cgo_circuit() -> (OriginCircuit, KeyedHalf) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keys, _) = crate::fuzzing::test_identity(dir.path());
    let t = target(&keys);
    let mut client = OriginCircuit::new();
    let create2 = client.create2_ntor_v3(&t, &CC_AND_CGO).unwrap();
    let cc = congestion::CcParams::default();
    let (created2, half, _) = answer_create2(&keys, &create2, Some(&cc)).unwrap();
    client.on_created2(&created2).unwrap();
    // CREATED2 says nothing of CGO: only congestion control.
    assert_eq!(client.server_message(0).unwrap(), &[1, 2, 1, 31]);
    assert!(client.is_cgo(0) && half.is_cgo());
    // The circuit nonce comes after CGO's 160 bytes of keys.
    assert_eq!(client.nonce(0), Some(&half.nonce));
    (client, half)
}

#[test]
fn a_cgo_hop_answers_in_relay_cell_format_v1() {
    let (mut client, mut half) = cgo_circuit();
    let ctx = ForwardCtx::default();
    // Stream commands and answers (END for a BEGIN at a non-exit) both
    // ways, several times: the tags chain and the keys roll each time.
    for i in 0..5u16 {
        let mut body = [0u8; BODY_LEN];
        client.send(0, relay_cmd::BEGIN, i + 1, b"example.com:80\0", &mut body);
        assert_eq!(
            half.on_forward(cmd::RELAY, &mut body, &ctx),
            ForwardAction::Reply
        );
        let (_, h) = client.on_backward(&mut body).unwrap();
        assert_eq!(
            (h.command, h.stream_id, h.length),
            (relay_cmd::END, i + 1, 1)
        );
    }
    // A cell that is not for us (a changed byte) is not recognized and,
    // with no next hop, closes the circuit.
    let mut body = [0u8; BODY_LEN];
    client.send(0, relay_cmd::DROP, 0, &[], &mut body);
    body[100] ^= 1;
    assert!(matches!(
        half.on_forward(cmd::RELAY, &mut body, &ctx),
        ForwardAction::Close { .. }
    ));
}

#[test]
fn a_cgo_hops_cells_bind_the_channel_command() {
    // EXTEND2 goes as RELAY_EARLY: the same cell read as RELAY is not ours.
    let (mut client, mut half) = cgo_circuit();
    let mut body = [0u8; BODY_LEN];
    client.send(0, relay_cmd::EXTEND2, 0, &[0; 40], &mut body);
    let ctx = ForwardCtx::default();
    assert!(matches!(
        half.on_forward(cmd::RELAY, &mut body, &ctx),
        ForwardAction::Close { .. }
    ));
}

#[test]
fn a_cgo_exit_carries_488_bytes_a_cell_and_16_byte_sendme_tags() {
    let (mut client, mut half) = cgo_circuit();
    assert_eq!(half.data_max(), 488);
    let ctx = ForwardCtx {
        exit: true,
        ..ForwardCtx::default()
    };
    // DATA toward the client, cut to 488 bytes: read back intact.
    let mut body = [0u8; BODY_LEN];
    half.originate_data(&mut body, 3, &[0x5a; 498], 0);
    let (_, h) = client.on_backward(&mut body).unwrap();
    assert_eq!((h.command, h.stream_id), (relay_cmd::DATA, 3));
    assert_eq!(relay::data(&body, &h), &[0x5a; 488][..]);
    // DATA from the client until a circuit SENDME is due (sendme_inc 31):
    // its tag is the CGO tag the due cell came with.
    let mut due = None;
    for i in 0..40 {
        let mut b = [0u8; BODY_LEN];
        let tag = client.send(0, relay_cmd::DATA, 3, &[i as u8; 100], &mut b);
        match half.on_forward(cmd::RELAY, &mut b, &ctx) {
            ForwardAction::Stream {
                header,
                circuit_sendme,
            } => {
                assert_eq!(relay::data(&b, &header), &[i as u8; 100][..]);
                if circuit_sendme {
                    due = Some(tag);
                    break;
                }
            }
            a => panic!("{a:?}"),
        }
    }
    let tag = due.expect("a SENDME was due");
    assert_eq!(tag[16..], [0; 4]);
    let mut reply = [0u8; BODY_LEN];
    half.originate_circuit_sendme(&mut reply);
    let (_, h) = client.on_backward(&mut reply).unwrap();
    assert_eq!(h.command, relay_cmd::SENDME);
    assert_eq!(
        relay::data(&reply, &h),
        &flow::sendme_v1_cgo_body(&tag[..16].try_into().unwrap())[..]
    );
    // The client's SENDME for our DATA names our 16-byte tag, and the
    // half takes it; a 20-byte one is refused.
    let mut sent = 0;
    while !half.flow().next_data_needs_tag() {
        half.flow().data_sent(None, 0);
        sent += 1;
        assert!(sent < 1000);
    }
    let mut body = [0u8; BODY_LEN];
    half.originate_data(&mut body, 3, b"x", 0);
    client.on_backward(&mut body).unwrap();
    let mut good = [0u8; BODY_LEN];
    let data = client.circuit_sendme_data(0);
    assert_eq!(data.len(), 19);
    client.send(0, relay_cmd::SENDME, 0, &data, &mut good);
    let ForwardAction::CircuitSendme { header } = half.on_forward(cmd::RELAY, &mut good, &ctx)
    else {
        panic!("not a circuit SENDME");
    };
    assert!(half
        .circuit_sendme_received(&header, &good, 1, 10, false)
        .is_ok());
}

/// The onion-service roles on a CGO hop (Arti asks every hop for CGO):
/// ESTABLISH_INTRO's MAC with the circuit nonce that follows CGO's keys,
/// INTRO_ESTABLISHED read back through CGO; a rendezvous cookie.
#[test]
fn a_cgo_hop_becomes_an_introduction_or_rendezvous_point() {
    let ctx = ForwardCtx {
        intro_dos: (false, 25, 200),
        now_s: 100,
        ..Default::default()
    };
    let (mut client, mut half) = cgo_circuit();
    let sk = SigningKey::from_bytes(&[4u8; 32]);
    let cell = establish_intro(&sk, client.nonce(0).unwrap(), false);
    let mut body = [0u8; BODY_LEN];
    client.send(0, hs_cmd::ESTABLISH_INTRO, 0, &cell, &mut body);
    assert_eq!(
        half.on_forward(cmd::RELAY, &mut body, &ctx),
        ForwardAction::IntroEstablished {
            auth_key: sk.verifying_key().to_bytes()
        }
    );
    let (_, h) = client.on_backward(&mut body).unwrap();
    assert_eq!(h.command, hs_cmd::INTRO_ESTABLISHED);
    assert_eq!(relay::data(&body, &h), &[0]);

    let (mut client, mut half) = cgo_circuit();
    let mut body = [0u8; BODY_LEN];
    client.send(0, hs_cmd::ESTABLISH_RENDEZVOUS, 0, &[9; 20], &mut body);
    assert_eq!(
        half.on_forward(cmd::RELAY, &mut body, &ctx),
        ForwardAction::EstablishRendezvous { cookie: [9; 20] }
    );
}
