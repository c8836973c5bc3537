//! Entry points for the cargo-fuzz targets in `fuzz/` (one per parser that
//! untrusted bytes reach). They live here, compiled on stable, so that the
//! committed seed corpora are replayed by ordinary unit tests in CI and the
//! fuzz targets stay one-liners. Each function must never panic, whatever
//! the input.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::SystemTime;

use crate::cell::{self, cmd, BODY_LEN};
use crate::circuit::{self, ForwardAction, HandshakeKeys};
use crate::link::{Handshake, LinkIdentity};

/// The cell framer over any byte stream, both circuit-ID widths.
pub fn cell_frames(data: &[u8]) {
    for width in [2usize, 4] {
        let mut rest = data;
        for _ in 0..10_000 {
            match cell::next_frame(rest, width) {
                Ok(Some((f, n))) => {
                    assert!(n > 0 && n <= rest.len());
                    assert_eq!(f.raw.len(), n);
                    rest = &rest[n..];
                }
                _ => break,
            }
        }
    }
}

/// Every relay-message and handshake-body parser on the same bytes.
pub fn relay_msgs(data: &[u8]) {
    let _ = crate::relay::parse_extend2(data);
    let _ = crate::relay::parse_create2(data);
    let _ = crate::link::parse_netinfo(data);
    let _ = crate::link::parse_certs(data);
    let _ = crate::link::pick_version(data);
    let mut body = [0u8; BODY_LEN];
    let n = data.len().min(BODY_LEN);
    body[..n].copy_from_slice(&data[..n]);
    if let Ok(h) = crate::relay::parse_header(&body) {
        let _ = crate::relay::data(&body, &h);
    }
    // The same bytes as a V1 message: what it reads, it builds again.
    if let Ok(h) = crate::relay_v1::parse_header(&body) {
        let d = crate::relay_v1::data(&body, &h).to_vec();
        assert_eq!(d.len(), usize::from(h.length));
        let mut again = [0u8; BODY_LEN];
        let sid = if crate::relay_v1::has_stream_id(h.command) {
            h.stream_id
        } else {
            0
        };
        if sid != 0 || !crate::relay_v1::has_stream_id(h.command) {
            crate::relay_v1::build(&mut again, h.command, sid, &d, |p| p.fill(0))
                .expect("a message read is one that can be built");
            let h2 = crate::relay_v1::parse_header(&again).expect("reads back");
            assert_eq!(h2, h);
            assert_eq!(crate::relay_v1::data(&again, &h2), &d[..]);
        }
        // And read into the V0 layout the rooms read: the same message.
        let mut v0 = body;
        crate::relay_v1::to_v0_layout(&mut v0).expect("a V1 message that parsed");
        let h0 = crate::relay::parse_header(&v0).expect("V1's lengths fit V0");
        assert_eq!((h0.command, h0.length), (h.command, h.length));
        assert_eq!(h0.stream_id, sid);
        assert_eq!(crate::relay::data(&v0, &h0), &d[..]);
    }
    if let Ok(e) = crate::relay::parse_extend2(data) {
        // What we parse, we can encode and parse again to the same value.
        let again = crate::relay::parse_extend2(&crate::relay::encode_extend2(&e));
        assert_eq!(again.as_ref(), Ok(&e));
    }
}

fn drive(h: &mut Handshake, data: &[u8]) {
    let mut rest = data;
    let mut out = Vec::new();
    let mut exporter = |_: &[u8]| Some([7u8; 32]);
    for _ in 0..64 {
        let Ok(Some((f, n))) = cell::next_frame(rest, h.circ_id_len()) else {
            break;
        };
        rest = &rest[n..];
        out.clear();
        match h.handle(f, SystemTime::now(), &mut exporter, &mut out) {
            Ok(Some(_)) | Err(_) => break,
            Ok(None) => {}
        }
    }
}

/// The responder side of the link handshake fed an arbitrary cell stream
/// (what any host on the Internet can send to the ORPort).
pub fn link_responder(identity: &Arc<LinkIdentity>, data: &[u8]) {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut h = Handshake::new_responder(identity.clone(), ip, vec![ip]);
    drive(&mut h, data);
}

/// The initiator side (what a relay we extend to can send back). The first
/// 20 bytes pick the RSA identity we expect.
pub fn link_initiator(identity: &Arc<LinkIdentity>, peer_tls_cert: &[u8], data: &[u8]) {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut want = [0u8; 20];
    let n = data.len().min(20);
    want[..n].copy_from_slice(&data[..n]);
    let (mut h, _versions) = Handshake::new_initiator(
        identity.clone(),
        ip,
        vec![ip],
        Some(want),
        None,
        peer_tls_cert.to_vec(),
    );
    drive(&mut h, &data[n..]);
}

/// CREATE2 answering and the keyed half's handling of arbitrary forward
/// cells. Input: a CREATE2 body (first 509 bytes), then a sequence of
/// (command byte, 509-byte body) cells for a CREATE_FAST circuit.
pub fn circuit_half(keys: &HandshakeKeys, data: &[u8]) {
    let mut create = [0u8; BODY_LEN];
    let n = data.len().min(BODY_LEN);
    create[..n].copy_from_slice(&data[..n]);
    let _ = circuit::answer_create2(keys, &create, None);
    let Ok((_, mut half)) = circuit::answer_create_fast(&[1u8; 20], &mut rand::rng()) else {
        return;
    };
    for chunk in data[n..].chunks(1 + BODY_LEN).take(64) {
        let command = if chunk[0] & 1 == 0 {
            cmd::RELAY
        } else {
            cmd::RELAY_EARLY
        };
        let mut body = [0u8; BODY_LEN];
        body[..chunk.len() - 1].copy_from_slice(&chunk[1..]);
        half.prev_is_client = chunk[0] & 8 != 0;
        let ctx = circuit::ForwardCtx {
            allow_nonearly_extend: chunk[0] & 2 != 0,
            exit: chunk[0] & 16 != 0,
            ..Default::default()
        };
        match half.on_forward(command, &mut body, &ctx) {
            ForwardAction::Close { .. } => break,
            ForwardAction::Extend(_) if chunk[0] & 4 != 0 => {
                let mut reply = [0u8; BODY_LEN];
                half.extended(&mut reply, &body[..64]);
            }
            _ => {}
        }
        let mut back = body;
        half.on_backward(&mut back);
    }
}

/// Keys for the fuzz targets and corpus tests: a relay identity created in
/// `dir`, its link snapshot, its handshake keys and its TLS certificate.
pub fn test_identity(dir: &std::path::Path) -> (Arc<LinkIdentity>, HandshakeKeys, Vec<u8>) {
    let now = SystemTime::now();
    let keys = weft_crypto::keys::RelayKeys::load_or_create(
        dir,
        "fuzz",
        std::time::Duration::from_secs(28 * 86400),
        now,
    )
    .expect("test keys");
    let link = weft_crypto::keys::LinkKeys::generate(&keys, now).expect("test link keys");
    let hs = HandshakeKeys {
        rsa_fp: keys.fingerprint,
        ed_id: keys.ed_id,
        ntor: keys.ntor_keys(),
    };
    (
        Arc::new(LinkIdentity::from_keys(&keys, &link)),
        hs,
        link.tls_cert_der.clone(),
    )
}

/// The onion-service and edge parsers on the same bytes: ESTABLISH_INTRO
/// (parsed, then checked against a fixed circuit nonce), INTRODUCE1, a
/// non-exit's answer to BEGIN and an exit's admission of it, and the
/// flow-control bodies an exit parses (SENDME, XON, the ntor-v3
/// extension list that asks for congestion control or CGO).
pub fn onion_cells(data: &[u8]) {
    let _ = crate::circuit::flow::parse_sendme(data);
    let _ = crate::circuit::flow::parse_xon(data);
    for cgo_supported in [false, true] {
        use crate::circuit::extensions::read_client_extensions;
        if let Ok(e) = read_client_extensions(data, cgo_supported) {
            assert!(!e.cc || data.len() >= 3);
            assert!(!e.cgo || (cgo_supported && data.len() >= 5));
            let _ = e.grant(cgo_supported);
        }
    }
    if let Ok(c) = crate::onion::parse_establish_intro(data) {
        let _ = crate::onion::verify_establish_intro(data, &c, &[9u8; 20]);
    }
    let _ = crate::onion::parse_introduce1(data);
    for client in [false, true] {
        let end = crate::circuit::edge::end_for_begin(data, client);
        assert!(!end.is_empty() && end.len() <= 21);
    }
    use crate::circuit::exit::{admit_begin, Admission, ExitContext};
    let allows = |a: std::net::IpAddr, p: u16| p % 2 == 1 && !a.is_loopback();
    for ipv6_exit in [false, true] {
        let ctx = ExitContext {
            prev_is_client: false,
            prev_is_known_relay: true,
            refuse_unknown_exits: true,
            ipv6_exit,
            hibernating: false,
            allow_non_rfc953: ipv6_exit,
            allows: &allows,
        };
        match admit_begin(data, &ctx) {
            Admission::End(e) => assert!(!e.is_empty() && e.len() <= 21),
            Admission::Connect { addr, .. } => assert!(allows(addr.ip(), addr.port())),
            Admission::Resolve { port, .. } => assert!(port > 0),
        }
    }
}

/// The relay commands a keyed half recognizes, reached through real
/// encryption: each chunk of the input is (relay command, flags, data...),
/// sent as the client would (so the half recognizes it) on one circuit.
/// Flags: bits 0–1 stream ID, 2 AllowNonearlyExtend, 3 one-hop client,
/// 4 INTRODUCE2 limit on, 5 RELAY_EARLY, 6 refuse one-hop rendezvous,
/// 7 exit. The first byte's top bit: the circuit negotiated congestion
/// control. Each stream cell at the exit also sends a DATA cell back, so
/// SENDMEs meet kept digests and Vegas runs.
pub fn recognized_cells(data: &[u8]) {
    let km = [7u8; 72];
    let mut half = circuit::KeyedHalf::new(&km, [9u8; 20]);
    if data.first().is_some_and(|b| b & 0x80 != 0) {
        half.enable_congestion_control(circuit::congestion::CcParams::default());
    }
    let mut client = weft_crypto::relay_crypto::Tor1ClientLayer::from_key_material(&km);
    for chunk in data.chunks(2 + crate::relay::RELAY_DATA_MAX).take(32) {
        let [command, flags, payload @ ..] = chunk else {
            break;
        };
        let mut body = [0u8; BODY_LEN];
        crate::relay::build(&mut body, *command, u16::from(flags & 3), payload);
        client.originate_forward(&mut body);
        half.prev_is_client = flags & 8 != 0;
        let ctx = circuit::ForwardCtx {
            allow_nonearly_extend: flags & 4 != 0,
            intro_dos: (flags & 16 != 0, 1, 2),
            refuse_single_hop_rend: flags & 64 != 0,
            now_s: u64::from(*flags),
            exit: flags & 128 != 0,
            dir_cache: flags & 3 == 3,
        };
        let cell = if flags & 32 != 0 {
            cmd::RELAY_EARLY
        } else {
            cmd::RELAY
        };
        match half.on_forward(cell, &mut body, &ctx) {
            ForwardAction::Close { .. } => break,
            ForwardAction::CircuitSendme { header } => {
                let now_us = u64::from(*flags) * 1000;
                if half
                    .circuit_sendme_received(&header, &body, flags & 1, now_us, flags & 2 != 0)
                    .is_err()
                {
                    break;
                }
            }
            ForwardAction::Stream { .. } if half.can_package() => {
                let mut out = [0u8; BODY_LEN];
                half.originate_data(&mut out, 1, payload, u64::from(*command) * 1000);
            }
            _ => {}
        }
    }
}

/// A conflux set driven by arbitrary bytes as a client (or an attacker)
/// could: LINKs (parsed from the input), multiplexed messages and SWITCHes
/// on any leg, leg states, sends, leg closes. The set must never panic,
/// never hold more than its cap, and deliver in strictly increasing
/// sequence order.
pub fn conflux_set(data: &[u8]) {
    use crate::circuit::conflux::{ConfluxSet, LegState, Link, SetLimits, OOO_CELL_COST};
    use crate::relay::relay_cmd;
    let limits = SetLimits {
        max_legs: 4,
        max_ooo_bytes: 64 * OOO_CELL_COST,
        max_switch_gap: 4000,
    };
    let mut set: ConfluxSet<u8> = ConfluxSet::new(limits);
    let _ = Link::parse(data);
    let body = {
        let mut b = [0u8; BODY_LEN];
        b[0] = crate::relay::relay_cmd::DATA;
        b[4] = 1;
        let h = crate::relay::parse_header(&b).expect("a valid header");
        crate::relay::RelayMsg::parsed(&h, &b)
    };
    let mut delivered = 0u64;
    let mut ops = data.chunks(6);
    for _ in 0..10_000 {
        let Some(op) = ops.next() else { break };
        let arg = |i: usize| op.get(i).copied().unwrap_or(0);
        let leg = arg(1) % 6;
        match arg(0) % 8 {
            0 => {
                let mut b = [0u8; 50];
                b[0] = 1;
                b[49] = arg(2) % 5;
                // Sequence numbers anywhere in the u64 range (the client's).
                let seq = u64::from(arg(3)).rotate_right(u32::from(arg(4)) % 64);
                b[33..41].copy_from_slice(&seq.to_be_bytes());
                b[41..49].copy_from_slice(&seq.rotate_left(7).to_be_bytes());
                if let Some(l) = Link::parse(&b) {
                    let _ = set.add_leg(leg, &l);
                }
            }
            1 | 2 => match set.received(leg, 0, &body) {
                Ok(crate::circuit::conflux::Arrival::Deliver) => {
                    delivered += 1;
                    while set.pop_ready().is_some() {
                        delivered += 1;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            },
            3 => {
                let rel = u32::from_be_bytes([arg(2), arg(3), arg(4), arg(5)]) >> (arg(2) % 32);
                if set.switch_received(leg, rel).is_err() {
                    return;
                }
                while set.pop_ready().is_some() {
                    delivered += 1;
                }
            }
            4 => set.update_leg(
                leg,
                LegState {
                    cwnd: u64::from(arg(2)),
                    inflight: u64::from(arg(3)),
                    sent_total: u64::from(arg(4)),
                    rtt_us: u64::from(arg(5)),
                    blocked: arg(2) & 1 == 1,
                },
            ),
            5 | 6 => {
                let command = if arg(2) & 1 == 0 {
                    relay_cmd::DATA
                } else {
                    relay_cmd::END
                };
                if let Some(p) = set.plan_send(command) {
                    set.note_sent(p.leg, command);
                }
                let _ = set.send_window();
            }
            _ => {
                if set.remove_leg(leg, 31) {
                    return;
                }
            }
        }
        assert!(set.ooo_bytes() <= limits.max_ooo_bytes, "over the cap");
        assert!(delivered < u64::MAX);
    }
}
