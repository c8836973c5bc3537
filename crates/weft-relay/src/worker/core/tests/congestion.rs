//! Congestion control at the exit through the core, with a client circuit
//! that asks for it in its ntor-v3 handshake: the negotiation, the
//! congestion window bounding what streams read, SENDMEs every
//! `sendme_inc` cells (v1 tags, timed), XON/XOFF instead of stream windows,
//! and a client breaking the rules losing only its own circuit.

use weft_proto::circuit::congestion::CcParams;
use weft_proto::circuit::flow::{sendme_v1_body, XON_BODY};

use super::streams::{exit_net, id, open_stream, read, send};
use super::*;
use crate::worker::core::streams::StreamIo;

/// A one-hop circuit from a relay (conn `conn`) whose client asked for
/// congestion control; returns it with the server's extension list.
fn cc_circuit(net: &mut Net, conn: usize, circ: u32) -> (OriginCircuit, Vec<u8>) {
    let circ = id(circ);
    if net.cores[0].conn(conn).is_none() {
        net.open(0, conn, false);
    }
    let mut c = OriginCircuit::new();
    let create2 = c
        .create2_ntor_v3(&target(net.relay, 9001), &[1, 1, 0])
        .unwrap();
    net.cell(0, conn, circ, cmd::CREATE2, &mut pad(&create2));
    let out = net.written(0, conn);
    let created = out.iter().find(|o| o.circ_id == circ).expect("CREATED2");
    let hlen = usize::from(u16::from_be_bytes([created.body[0], created.body[1]]));
    c.on_created2(&created.body[..2 + hlen]).unwrap();
    let msg = c.server_message(0).unwrap().to_vec();
    (c, msg)
}

#[test]
fn a_client_that_asks_gets_congestion_control_and_cwnd_bounds_the_streams() {
    let mut net = exit_net();
    let (mut c, msg) = cc_circuit(&mut net, 1, 5);
    assert_eq!(msg, [1, 2, 1, 31], "CC_FIELD_RESPONSE with sendme_inc 31");
    assert_eq!(net.cores[0].report().exit.cc.circs_created, 1);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    // No stream window: cwnd (124 cells) is the limit.
    assert_eq!(net.cores[0].stream_read_budget(key), 124 * 498);
    net.cores[0].stream_data_read(key, &vec![3u8; 124 * 498]);
    assert_eq!(net.cores[0].stream_read_budget(key), 0);
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert_eq!(msgs.len(), 124);
    // The client acknowledges cells 31, 62, 93, 124 with their digests
    // (as C's client does) 20 ms later; the window opens, and grows in
    // slow start.
    let now = net.cores[0].now_ns;
    net.cores[0].set_now(now + 20_000_000);
    for i in [30, 61, 92, 123] {
        send(
            &mut net,
            1,
            5,
            &mut c,
            relay_cmd::SENDME,
            0,
            &sendme_v1_body(&msgs[i].3),
        );
    }
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert!(net.cores[0].stream_read_budget(key) > 124 * 498);
    // A SENDME nobody asked for (no digest left): the circuit closes.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::SENDME,
        0,
        &sendme_v1_body(&msgs[0].3),
    );
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed);
}

#[test]
fn the_exit_acknowledges_every_sendme_inc_cells_and_sends_no_stream_sendmes() {
    let mut net = exit_net();
    let (mut c, _) = cc_circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let mut tags = Vec::new();
    for _ in 0..62 {
        tags.push(send(
            &mut net,
            1,
            5,
            &mut c,
            relay_cmd::DATA,
            9,
            &[0x55; 498],
        ));
    }
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    let sendmes: Vec<_> = msgs.iter().filter(|m| m.0 == relay_cmd::SENDME).collect();
    assert_eq!(sendmes.len(), 2);
    assert_eq!(sendmes[0].2, sendme_v1_body(&tags[30]));
    assert_eq!(sendmes[1].2, sendme_v1_body(&tags[61]));
    net.cores[0].take_stream_output(key).unwrap();
    net.cores[0].stream_wrote(key);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert!(msgs.is_empty(), "no stream SENDME under congestion control");
    // A stream SENDME from the client breaks the protocol.
    send(&mut net, 1, 5, &mut c, relay_cmd::SENDME, 9, &[]);
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed);
}

#[test]
fn xoff_and_xon_both_ways() {
    let mut net = exit_net();
    let (mut c, _) = cc_circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    // The client's XOFF stops reading; its XON resumes it.
    send(&mut net, 1, 5, &mut c, relay_cmd::XOFF, 9, &[0]);
    assert_eq!(net.cores[0].stream_read_budget(key), 0);
    send(&mut net, 1, 5, &mut c, relay_cmd::XON, 9, &XON_BODY);
    assert!(net.cores[0].stream_read_budget(key) > 0);
    let cc = net.cores[0].report().exit.cc;
    assert_eq!((cc.xoff_received, cc.xon_received), (1, 1));
    // The destination does not read: past cc_xoff_exit bytes waiting,
    // and after the grace period, XOFF goes to the client.
    let limit = CcParams::default().xoff_exit_bytes;
    let cells = limit / 498 + 10;
    let mut now = net.cores[0].now_ns;
    for _ in 0..cells {
        now += 1_000_000;
        net.cores[0].set_now(now);
        send(&mut net, 1, 5, &mut c, relay_cmd::DATA, 9, &[1; 498]);
    }
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    let xoffs: Vec<_> = msgs.iter().filter(|m| m.0 == relay_cmd::XOFF).collect();
    assert_eq!(xoffs.len(), 1);
    assert_eq!((xoffs[0].1, xoffs[0].2.clone()), (9, vec![0]));
    // The destination takes everything: XON (rate 0, "no limit").
    net.cores[0].take_stream_output(key).unwrap();
    net.cores[0].stream_wrote(key);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        (msgs[0].0, msgs[0].2.clone()),
        (relay_cmd::XON, XON_BODY.to_vec())
    );
}

#[test]
fn a_client_that_ignores_xoff_loses_its_circuit_only() {
    let mut net = exit_net();
    let (mut c, _) = cc_circuit(&mut net, 1, 5);
    let (mut other, _) = cc_circuit(&mut net, 1, 7);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let other_key = open_stream(&mut net, 1, 7, &mut other, 2);
    let p = CcParams::default();
    let cap = p.xoff_exit_bytes + 2 * p.ss_cwnd_max as usize * 498;
    let mut destroyed = false;
    for _ in 0..cap / 498 + 2 {
        send(&mut net, 1, 5, &mut c, relay_cmd::DATA, 9, &[1; 498]);
        if net.cores[0].stream_output_len(key).is_none() {
            destroyed = true;
            break;
        }
    }
    assert!(destroyed, "the stream's circuit closed at the cap");
    let (_, d) = read(&mut net, 1, 5, &mut c);
    assert!(d);
    net.cores[0].stream_data_read(other_key, b"fine");
    let (msgs, d) = read(&mut net, 1, 7, &mut other);
    assert!(!d);
    assert_eq!(msgs[0].2, b"fine");
    assert!(net
        .poll_stream_io(0)
        .is_some_and(|io| io == StreamIo::Close { key }));
}

#[test]
fn without_the_consensus_a_request_gets_an_empty_answer() {
    let mut net = exit_net();
    let exit = net.cores[0].ctx.exit.clone();
    let link = LinkKeys::generate(net.relay, SystemTime::now()).unwrap();
    let mut sched = SchedParams::default();
    sched.cc.enabled = false;
    let ctx = SharedContext::build(net.relay, &link, vec![], &sched).unwrap();
    net.cores[0].set_context(ctx.with_exit(exit, None).circuits);
    let (mut c, msg) = cc_circuit(&mut net, 1, 5);
    assert_eq!(msg, [0], "no extension: the fixed windows");
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    // The stream window (500) and the circuit window (1000) apply.
    assert_eq!(net.cores[0].stream_read_budget(key), 256 * 498);
}

#[test]
fn stream_bytes_count_in_the_memory_limit() {
    let mut net = exit_net();
    let (mut c, _) = cc_circuit(&mut net, 1, 5);
    let (mut other, _) = cc_circuit(&mut net, 1, 7);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let _other_key = open_stream(&mut net, 1, 7, &mut other, 2);
    let before = net.cores[0].queued_bytes();
    let t0 = 1_000_000_000;
    net.cores[0].set_now(t0);
    for _ in 0..10 {
        send(&mut net, 1, 5, &mut c, relay_cmd::DATA, 9, &[1; 498]);
    }
    assert_eq!(net.cores[0].queued_bytes(), before + 4980);
    // The bytes have waited 2 s: they are the oldest candidate.
    net.cores[0].set_now(t0 + 2_000_000_000);
    let cands = net.cores[0].oom_candidates();
    assert!(cands.contains(&(2_000_000_000, 4980)), "{cands:?}");
    let (circuits, bytes) = net.cores[0].oom_kill(1_000_000_000);
    assert_eq!((circuits, bytes), (1, 4980));
    assert!(net.cores[0].stream_output_len(key).is_none());
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed);
    let (_, destroyed) = read(&mut net, 1, 7, &mut other);
    assert!(!destroyed, "the circuit without waiting bytes stays");
}

#[test]
fn an_xons_rate_paces_the_streams_reading_as_c_does() {
    let mut net = exit_net();
    let (mut c, _) = cc_circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    // XON with kbps_ewma 10: 10,000 bytes a second, a second's worth at once.
    send(&mut net, 1, 5, &mut c, relay_cmd::XOFF, 9, &[0]);
    send(&mut net, 1, 5, &mut c, relay_cmd::XON, 9, &[0, 0, 0, 0, 10]);
    assert_eq!(net.cores[0].stream_read_budget(key), 10_000);
    net.cores[0].stream_data_read(key, &[7u8; 10_000]);
    let _ = read(&mut net, 1, 5, &mut c);
    assert_eq!(
        net.cores[0].stream_read_budget(key),
        0,
        "the bucket is empty"
    );
    // The core wakes when a cell's worth has refilled (49.8 ms), and the
    // stream reads again.
    let now = net.cores[0].now_ns;
    let due = net.cores[0].streams.next_rate_due().expect("listed");
    assert_eq!(due, now + 49_800_000);
    assert!(
        net.cores[0].poll_timeout() <= due,
        "the core's timer covers it"
    );
    while net.cores[0].poll_effect().is_some() {}
    net.cores[0].begin_round(due);
    let mut pumped = false;
    while let Some(e) = net.cores[0].poll_effect() {
        pumped |= matches!(e, Effect::PumpStream(k) if k == key);
    }
    assert!(pumped, "listed to read again");
    assert_eq!(net.cores[0].stream_read_budget(key), 498);
    // An XON with rate 0 lifts the limit.
    send(&mut net, 1, 5, &mut c, relay_cmd::XON, 9, &XON_BODY);
    assert!(net.cores[0].stream_read_budget(key) > 10_000);
}
