//! The exit's stream room, driven through the core with a real client
//! circuit: BEGIN admission and END bodies, the driver's connect and
//! socket events played by hand, DATA both ways, and flow control — SENDME
//! v1 tags sent and checked, windows a peer may not overrun (only its own
//! circuit closes).

use std::net::{IpAddr, SocketAddr};

use weft_dir::exit_policy::{ExitPolicy, ExitPolicyOptions, OwnAddresses};
use weft_proto::circuit::flow::sendme_v1_body;

use super::*;
use crate::context::{CircuitContext, ExitSettings};
use crate::worker::core::streams::StreamIo;

/// One worker whose relay is an exit with `accept *:*` and the defaults
/// (ExitPolicyRejectPrivate 1: private addresses refused), in a network
/// with a relay at 198.51.100.1:9001. Tests connect to 198.51.100.x
/// (documentation addresses: no socket is ever made here).
pub(super) fn exit_net() -> Net {
    exit_net_with(1)
}

/// An exit network of `n` workers (every core has the exit context; a
/// conflux set's out-of-order queue is capped at 100 cells).
pub(super) fn exit_net_with(n: usize) -> Net {
    exit_net_cfx(n, true)
}

/// [`exit_net_with`] with the consensus's `cfx_enabled` set to `cfx_enabled`.
pub(super) fn exit_net_cfx(n: usize, cfx_enabled: bool) -> Net {
    let opts = ExitPolicyOptions {
        exit_relay: Some(true),
        exit_policy: vec!["accept *:*".into()],
        ..ExitPolicyOptions::default()
    };
    let (policy, _) = ExitPolicy::from_options(&opts, &OwnAddresses::default()).unwrap();
    let settings = ExitSettings {
        policy,
        ipv6_exit: false,
        reentry: [SocketAddr::from(([198, 51, 100, 1], 9001))].into(),
        allow_reentry: false,
        known_relays: Some([[0xAB; 20]].into()),
        refuse_unknown_exits: true,
    };
    static EXIT_CTX: [std::sync::OnceLock<Arc<CircuitContext>>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    let mut net = Net::new(n, 64);
    let ctx = EXIT_CTX[usize::from(cfx_enabled)]
        .get_or_init(|| {
            let link = LinkKeys::generate(net.relay, SystemTime::now()).unwrap();
            let sched = SchedParams {
                halflife_s: 30.0,
                cfx: weft_proto::circuit::conflux::CfxParams {
                    enabled: cfx_enabled,
                    max_legs: 8,
                    max_ooo_bytes: 100 * weft_proto::circuit::conflux::OOO_CELL_COST,
                },
                ..SchedParams::default()
            };
            let ctx = SharedContext::build(net.relay, &link, vec![], &sched).unwrap();
            ctx.with_exit(Some(Arc::new(settings)), None).circuits
        })
        .clone();
    for core in &mut net.cores {
        core.set_context(ctx.clone());
    }
    net
}

/// The peer opened the connection: its circuit IDs have the top bit set.
/// Tests name circuits by their low bits.
pub(super) fn id(circ: u32) -> u32 {
    circ | 0x8000_0000
}

/// A one-hop circuit from a relay (conn `conn`) to worker 0.
pub(super) fn circuit(net: &mut Net, conn: usize, circ: u32) -> OriginCircuit {
    let circ = id(circ);
    if net.cores[0].conn(conn).is_none() {
        net.open(0, conn, false);
    }
    let mut c = OriginCircuit::new();
    let create2 = c.create2(&target(net.relay, 9001)).unwrap();
    net.cell(0, conn, circ, cmd::CREATE2, &mut pad(&create2));
    let out = net.written(0, conn);
    let created = out.iter().find(|o| o.circ_id == circ).expect("CREATED2");
    let hlen = usize::from(u16::from_be_bytes([created.body[0], created.body[1]]));
    c.on_created2(&created.body[..2 + hlen]).unwrap();
    c
}

/// Send a relay message on (conn, circ); returns the cell's SENDME tag.
pub(super) fn send(
    net: &mut Net,
    conn: usize,
    circ: u32,
    c: &mut OriginCircuit,
    command: u8,
    stream: u16,
    data: &[u8],
) -> [u8; 20] {
    let mut b = [0u8; BODY_LEN];
    let tag = c.send(0, command, stream, data, &mut b);
    net.cell(0, conn, id(circ), cmd::RELAY, &mut b);
    tag
}

/// Send a BEGIN for `target` (host:port) on stream `stream` of (conn, circ).
pub(super) fn send_begin(
    net: &mut Net,
    conn: usize,
    circ: u32,
    c: &mut OriginCircuit,
    stream: u16,
    target: &str,
) -> [u8; 20] {
    send(net, conn, circ, c, relay_cmd::BEGIN, stream, &begin(target))
}

/// What the client reads on (conn, circ): relay messages (command,
/// stream, data, the digest after it) and whether a DESTROY came.
#[allow(clippy::type_complexity)]
pub(super) fn read(
    net: &mut Net,
    conn: usize,
    circ: u32,
    c: &mut OriginCircuit,
) -> (Vec<(u8, u16, Vec<u8>, [u8; 20])>, bool) {
    let mut msgs = Vec::new();
    let mut destroyed = false;
    for o in net
        .written(0, conn)
        .into_iter()
        .filter(|o| o.circ_id == id(circ))
    {
        if o.command == cmd::DESTROY {
            destroyed = true;
            continue;
        }
        let mut b = o.body;
        if let Ok((_, h)) = c.on_backward(&mut b) {
            let tag = c.last_backward_digest(0).unwrap();
            msgs.push((h.command, h.stream_id, relay::data(&b, &h).to_vec(), tag));
        }
    }
    (msgs, destroyed)
}

pub(super) fn begin(target: &str) -> Vec<u8> {
    let mut b = target.as_bytes().to_vec();
    b.push(0);
    b
}

/// BEGIN to 198.51.100.7:5000 on stream `sid`, connected by the "driver";
/// returns the stream's key after CONNECTED was read.
pub(super) fn open_stream(
    net: &mut Net,
    conn: usize,
    circ: u32,
    c: &mut OriginCircuit,
    sid: u16,
) -> usize {
    send(
        net,
        conn,
        circ,
        c,
        relay_cmd::BEGIN,
        sid,
        &begin("198.51.100.7:5000"),
    );
    let Some(StreamIo::Connect { key, addr }) = net.poll_stream_io(0) else {
        panic!("no connect asked for");
    };
    assert_eq!(addr, SocketAddr::from(([198, 51, 100, 7], 5000)));
    net.cores[0].stream_connected(key);
    let (msgs, _) = read(net, conn, circ, c);
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::CONNECTED, sid));
    // Address and the TTL of an IP literal (C Tor's DEFAULT_DNS_TTL).
    assert_eq!(msgs[0].2, [198, 51, 100, 7, 0, 0, 0x07, 0x08]);
    key
}

#[test]
fn a_begin_the_policy_refuses_gets_end_exitpolicy_with_the_address() {
    // 10.1.2.3: a private address, refused by default.
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    send_begin(&mut net, 1, 5, &mut c, 3, "10.1.2.3:80");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::END, 3));
    assert_eq!(msgs[0].2, [4, 10, 1, 2, 3, 0, 0, 0x07, 0x08]);
    assert!(net.poll_stream_io(0).is_none(), "no socket for it");
    // A name is looked up (not refused, not connected yet).
    send_begin(&mut net, 1, 5, &mut c, 4, "example.com:443");
    assert_eq!(net.lookups.len(), 1);
    assert_eq!(net.lookups[0].host, "example.com");
    assert!(net.poll_stream_io(0).is_none());
}

#[test]
fn a_relay_the_consensus_does_not_list_gets_no_streams() {
    let mut net = exit_net();
    net.open(0, 3, false);
    net.cores[0].conn_mut(3).unwrap().peer_rsa = Some([0xCD; 20]);
    let mut c = circuit(&mut net, 3, 5);
    send_begin(&mut net, 3, 5, &mut c, 1, "198.51.100.7:80");
    let (msgs, _) = read(&mut net, 3, 5, &mut c);
    assert_eq!(
        (msgs[0].0, msgs[0].2.clone()),
        (relay_cmd::END, vec![1]),
        "MISC"
    );
    assert!(net.poll_stream_io(0).is_none());
}

#[test]
fn a_stream_may_not_connect_back_into_the_network() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    send_begin(&mut net, 1, 5, &mut c, 3, "198.51.100.1:9001");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert_eq!(
        (msgs[0].0, msgs[0].2.clone()),
        (relay_cmd::END, vec![3]),
        "CONNECTREFUSED"
    );
    assert!(!matches!(
        net.poll_stream_io(0),
        Some(StreamIo::Connect { .. })
    ));
    // The stream ID is free again: the same ID to another port connects.
    send_begin(&mut net, 1, 5, &mut c, 3, "198.51.100.1:9002");
    assert!(matches!(
        net.poll_stream_io(0),
        Some(StreamIo::Connect { .. })
    ));
}

#[test]
fn a_lookup_answer_is_checked_against_the_policy_again() {
    // A name that resolves to a private address is refused by the default
    // ExitPolicyRejectPrivate rules, with the address in the END.
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    send_begin(&mut net, 1, 5, &mut c, 4, "internal.example:80");
    let q = net.lookups.pop().unwrap();
    net.cores[0].stream_resolved(crate::resolver::DnsAnswer {
        key: q.key,
        tag: q.tag,
        v4: Ok(("10.9.9.9".parse().unwrap(), 287)),
        v6: Err(false),
        hostname: None,
        cached: false,
    });
    net.collect(0);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    // The resolver's (fuzzy) TTL as it came: C's `address_ttl`.
    assert_eq!(msgs[0].0, relay_cmd::END);
    assert_eq!(msgs[0].2, [4, 10, 9, 9, 9, 0, 0, 0x01, 0x1F]);
    assert!(
        !matches!(net.poll_stream_io(0), Some(StreamIo::Connect { .. })),
        "never connected"
    );
    // An allowed answer connects; a stale answer (wrong tag) is ignored.
    send_begin(&mut net, 1, 5, &mut c, 6, "ok.example:80");
    let q = net.lookups.pop().unwrap();
    let answer = |tag| crate::resolver::DnsAnswer {
        key: q.key,
        tag,
        v4: Ok(("198.51.100.9".parse().unwrap(), 3456)),
        v6: Err(false),
        hostname: None,
        cached: false,
    };
    net.cores[0].stream_resolved(answer(q.tag + 1));
    assert!(net.poll_stream_io(0).is_none());
    net.cores[0].stream_resolved(answer(q.tag));
    let Some(StreamIo::Connect { key, addr }) = net.poll_stream_io(0) else {
        panic!("no connect");
    };
    assert_eq!(addr.ip(), IpAddr::from([198, 51, 100, 9]));
    net.cores[0].stream_connected(key);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(
        msgs[0].2,
        [198, 51, 100, 9, 0, 0, 0x0D, 0x80],
        "the resolver's (fuzzy) TTL, sent as it came"
    );
}

#[test]
fn bytes_flow_both_ways_in_data_cells() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::DATA,
        9,
        b"GET / HTTP/1.0\r\n\r\n",
    );
    let out: Vec<u8> = net.cores[0].take_stream_output(key).unwrap();
    assert_eq!(out, b"GET / HTTP/1.0\r\n\r\n");
    let reply: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
    net.cores[0].stream_data_read(key, &reply);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    let got: Vec<u8> = msgs
        .iter()
        .filter(|m| m.0 == relay_cmd::DATA && m.1 == 9)
        .flat_map(|m| m.2.clone())
        .collect();
    assert_eq!(got, reply);
    assert_eq!(msgs.len(), 3, "498 + 498 + 204 bytes");
    // The destination closes: END DONE, the socket is closed.
    net.cores[0].stream_eof(key);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(
        (msgs[0].0, msgs[0].1, msgs[0].2.clone()),
        (relay_cmd::END, 9, vec![6])
    );
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key }));
}

#[test]
fn the_exit_sends_sendme_v1_with_the_digest_of_the_hundredth_cell() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let mut tags = Vec::new();
    for _ in 0..100 {
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
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    let sendmes: Vec<_> = msgs.iter().filter(|m| m.0 == relay_cmd::SENDME).collect();
    assert_eq!(sendmes.len(), 1, "one circuit SENDME per 100 cells");
    assert_eq!(sendmes[0].1, 0);
    assert_eq!(sendmes[0].2, sendme_v1_body(&tags[99]));
    // Stream SENDMEs once the destination took the bytes.
    net.cores[0].take_stream_output(key).unwrap();
    net.cores[0].stream_wrote(key);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    let stream_sendmes = msgs
        .iter()
        .filter(|m| m.0 == relay_cmd::SENDME && m.1 == 9)
        .count();
    assert_eq!(stream_sendmes, 2, "500 - 100 ≤ 450: two stream SENDMEs");
}

#[test]
fn the_exit_checks_the_clients_sendme_tags() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let mut other = circuit(&mut net, 1, 7);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let other_key = open_stream(&mut net, 1, 7, &mut other, 2);
    // 100 DATA cells toward the client; it keeps the 100th's digest.
    net.cores[0].stream_data_read(key, &vec![7u8; 100 * 498]);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(msgs.len(), 100);
    let good = msgs[99].3;
    let budget = net.cores[0].stream_read_budget(key);
    // A forged tag: this circuit closes, the other goes on.
    let mut forged = good;
    forged[0] ^= 1;
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::SENDME,
        0,
        &sendme_v1_body(&forged),
    );
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed, "a forged SENDME v1 closes its circuit");
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key }));
    net.cores[0].stream_data_read(other_key, b"still here");
    let (msgs, destroyed) = read(&mut net, 1, 7, &mut other);
    assert!(!destroyed);
    assert_eq!(msgs[0].2, b"still here");
    assert!(budget > 0);

    // The right tag opens the window again.
    let mut c = circuit(&mut net, 1, 11);
    let key = open_stream(&mut net, 1, 11, &mut c, 1);
    net.cores[0].stream_data_read(key, &vec![7u8; 100 * 498]);
    let (msgs, _) = read(&mut net, 1, 11, &mut c);
    let circuit_budget_before = net.cores[0].stream_read_budget(key);
    send(
        &mut net,
        1,
        11,
        &mut c,
        relay_cmd::SENDME,
        0,
        &sendme_v1_body(&msgs[99].3),
    );
    let (_, destroyed) = read(&mut net, 1, 11, &mut c);
    assert!(!destroyed);
    // The stream's own window (400 left) is the limit now, as before.
    assert_eq!(net.cores[0].stream_read_budget(key), circuit_budget_before);
}

#[test]
fn data_past_the_stream_window_closes_only_that_circuit() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let mut other = circuit(&mut net, 1, 7);
    open_stream(&mut net, 1, 5, &mut c, 9);
    let other_key = open_stream(&mut net, 1, 7, &mut other, 2);
    // The destination takes nothing (no stream_wrote): no stream SENDME,
    // so 500 cells is all the client may send.
    for _ in 0..500 {
        send(&mut net, 1, 5, &mut c, relay_cmd::DATA, 9, &[1; 498]);
    }
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    send(&mut net, 1, 5, &mut c, relay_cmd::DATA, 9, &[1; 498]);
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed, "the 501st cell breaks the window");
    net.cores[0].stream_data_read(other_key, b"unaffected");
    let (msgs, destroyed) = read(&mut net, 1, 7, &mut other);
    assert!(!destroyed);
    assert_eq!(msgs[0].2, b"unaffected");
}

#[test]
fn a_circuit_that_closes_closes_its_streams_and_a_one_hop_client_gets_none() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    net.cell(0, 1, id(5), cmd::DESTROY, &mut pad(&[0]));
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key }));
    // A client connection (not a relay): no exit streams for one-hop use.
    net.cores[0].add_conn(
        2,
        77,
        ([127, 0, 0, 1], 9100).into(),
        false,
        None,
        crate::worker::core::ConnLink::opened(5, 180 * 1_000_000_000),
    );
    let mut c = circuit(&mut net, 2, 5);
    send_begin(&mut net, 2, 5, &mut c, 1, "198.51.100.7:80");
    let (msgs, _) = read(&mut net, 2, 5, &mut c);
    assert_eq!(msgs[0].0, relay_cmd::END);
    assert_eq!(msgs[0].2, [13], "TORPROTOCOL");
    assert!(net.poll_stream_io(0).is_none());
}

#[test]
fn bad_stream_input_closes_only_its_stream_or_circuit() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    let mut other = circuit(&mut net, 1, 7);
    let other_key = open_stream(&mut net, 1, 7, &mut other, 2);
    // Malformed BEGINs: no NUL, no port, a port of 0: END TORPROTOCOL for
    // that stream only (C Tor's answer), no socket.
    for (sid, bad) in [
        (1u16, &b"198.51.100.7:80"[..]),
        (2, b"nohost\0"),
        (3, b"198.51.100.7:0\0"),
    ] {
        send(&mut net, 1, 5, &mut c, relay_cmd::BEGIN, sid, bad);
        let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
        assert!(!destroyed, "{bad:?}");
        assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::END, sid), "{bad:?}");
    }
    assert!(net.poll_stream_io(0).is_none());
    // A RESOLVE of nothing: a RESOLVED error, nothing else.
    send(&mut net, 1, 5, &mut c, relay_cmd::RESOLVE, 4, b"\0");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert_eq!(msgs[0].0, relay_cmd::RESOLVED);
    // DATA, END and SENDME for streams we do not have, and DATA after an
    // END: dropped.
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    send(&mut net, 1, 5, &mut c, relay_cmd::END, 9, &[6]);
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key }));
    for (cmd_, sid) in [
        (relay_cmd::DATA, 9u16),
        (relay_cmd::DATA, 300),
        (relay_cmd::END, 301),
        (relay_cmd::SENDME, 302),
    ] {
        send(&mut net, 1, 5, &mut c, cmd_, sid, b"x");
    }
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert!(
        msgs.is_empty(),
        "{:?}",
        msgs.iter().map(|m| m.0).collect::<Vec<_>>()
    );
    // A length past the cell: the circuit closes, the other one goes on.
    let mut b = [0u8; BODY_LEN];
    relay::build(&mut b, relay_cmd::DATA, 9, b"x");
    b[9..11].copy_from_slice(&600u16.to_be_bytes());
    c.send_prepared(0, &mut b);
    net.cell(0, 1, id(5), cmd::RELAY, &mut b);
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed);
    net.cores[0].stream_data_read(other_key, b"on");
    let (msgs, destroyed) = read(&mut net, 1, 7, &mut other);
    assert!(!destroyed);
    assert_eq!(msgs[0].2, b"on");
}

/// Give worker 0 a context whose stream-creation limit is on: burst 2,
/// one stream per second, `defense` (2 refuse, 3 close the circuit).
fn limit_streams(net: &mut Net, defense: u32) {
    let link = LinkKeys::generate(net.relay, SystemTime::now()).unwrap();
    let mut sched = SchedParams {
        halflife_s: 30.0,
        ..SchedParams::default()
    };
    sched.dos.stream_enabled = true;
    sched.dos.stream_rate = 1;
    sched.dos.stream_burst = 2;
    sched.dos.stream_defense = defense;
    let exit = net.cores[0].ctx.exit.clone();
    let ctx = SharedContext::build(net.relay, &link, vec![], &sched)
        .unwrap()
        .with_exit(exit, None);
    net.cores[0].set_context(ctx.circuits);
}

#[test]
fn streams_over_the_creation_limit_are_refused_or_close_their_circuit() {
    let mut net = exit_net();
    limit_streams(&mut net, 2);
    let mut c = circuit(&mut net, 1, 5);
    let mut connects = 0;
    for sid in 1..=3 {
        send_begin(&mut net, 1, 5, &mut c, sid, "198.51.100.7:80");
        while let Some(io) = net.poll_stream_io(0) {
            connects += usize::from(matches!(io, StreamIo::Connect { .. }));
        }
    }
    assert_eq!(connects, 2, "the burst");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    let ends: Vec<_> = msgs.iter().filter(|m| m.0 == relay_cmd::END).collect();
    assert_eq!(
        (ends.len(), ends[0].1, ends[0].2.clone()),
        (1, 3, vec![1]),
        "END MISC"
    );
    // A RESOLVE over the limit: a transient error.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        4,
        b"198.51.100.7\0",
    );
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!((msgs[0].0, msgs[0].2[0]), (relay_cmd::RESOLVED, 0xF0));
    // A second later the bucket has a token again.
    net.cores[0].set_now(1_000_000_000);
    send_begin(&mut net, 1, 5, &mut c, 5, "198.51.100.7:80");
    assert!(matches!(
        net.poll_stream_io(0),
        Some(StreamIo::Connect { .. })
    ));

    // Defense 3: the circuit closes, another circuit does not.
    let mut net = exit_net();
    limit_streams(&mut net, 3);
    let mut c = circuit(&mut net, 1, 5);
    let mut other = circuit(&mut net, 1, 7);
    for sid in 1..=3 {
        send_begin(&mut net, 1, 5, &mut c, sid, "198.51.100.7:80");
    }
    let (_, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(destroyed, "RESOURCELIMIT");
    send_begin(&mut net, 1, 7, &mut other, 1, "198.51.100.7:80");
    let (_, destroyed) = read(&mut net, 1, 7, &mut other);
    assert!(!destroyed);
}

#[test]
fn lookups_waiting_at_once_are_bounded() {
    use crate::worker::core::streams::MAX_PENDING_LOOKUPS;
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    for sid in 1..=MAX_PENDING_LOOKUPS as u16 + 1 {
        send(
            &mut net,
            1,
            5,
            &mut c,
            relay_cmd::RESOLVE,
            sid,
            b"slow.example\0",
        );
        if sid % 512 == 0 {
            let _ = read(&mut net, 1, 5, &mut c);
        }
    }
    assert_eq!(
        net.lookups.len(),
        MAX_PENDING_LOOKUPS,
        "one over the bound was not asked"
    );
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    let last = msgs.last().unwrap();
    assert_eq!(
        (last.0, last.2[0]),
        (relay_cmd::RESOLVED, 0xF0),
        "a transient error at once"
    );
    // Answers free room again.
    let q = net.lookups.pop().unwrap();
    net.cores[0].stream_resolved(crate::resolver::DnsAnswer {
        key: q.key,
        tag: q.tag,
        v4: Err(false),
        v6: Err(false),
        hostname: None,
        cached: false,
    });
    net.collect(0);
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        9000,
        b"again.example\0",
    );
    assert_eq!(net.lookups.len(), MAX_PENDING_LOOKUPS);
}
