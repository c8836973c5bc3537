//! Conflux at the exit through the cores, with legs on two workers (the
//! set's home on one, a leg on the other, wired by real rings): linking,
//! the order of a stream's bytes both ways across legs, and the attacks
//! of issue 13 — a gap never filled, an absurd SWITCH, a second LINK, two
//! clients claiming one nonce, a ninth leg, a leg that outruns its home's
//! worker — each closing only the offending set or circuit, with the
//! out-of-order queue and the ordered line to the home under their caps.

use weft_proto::circuit::conflux::{self, ux, Link, OOO_CELL_COST};

use super::streams::{begin, exit_net_cfx, exit_net_with, id};
use super::*;
use crate::worker::core::streams::StreamIo;

/// The out-of-order cap of `exit_net_with`'s context.
const CAP: usize = 100 * OOO_CELL_COST;

/// A client circuit (ntor-v3 with congestion control) to worker `w`
/// over its connection `conn`.
struct Leg {
    w: usize,
    conn: usize,
    circ: u32,
    c: OriginCircuit,
}

/// What a client read on a leg: messages and the DESTROY reason, if any.
struct Reads {
    msgs: Vec<(u8, u16, Vec<u8>)>,
    destroyed: Option<u8>,
}

impl Leg {
    fn new(net: &mut Net, w: usize, conn: usize, circ: u32) -> Leg {
        Self::new_with(net, w, conn, circ, false)
    }

    /// A leg whose client asks for congestion control and, if `cgo`, CGO
    /// (as a C client asks the exit of each conflux leg).
    fn new_with(net: &mut Net, w: usize, conn: usize, circ: u32, cgo: bool) -> Leg {
        if net.cores[w].conn(conn).is_none() {
            net.open(w, conn, false);
        }
        let mut c = OriginCircuit::new();
        let msg: &[u8] = if cgo {
            &[2, 1, 0, 3, 2, 2, 6]
        } else {
            &[1, 1, 0]
        };
        let create2 = c.create2_ntor_v3(&target(net.relay, 9001), msg).unwrap();
        net.cell(w, conn, id(circ), cmd::CREATE2, &mut pad(&create2));
        let out = net.written(w, conn);
        let created = out
            .iter()
            .find(|o| o.circ_id == id(circ))
            .expect("CREATED2");
        let hlen = usize::from(u16::from_be_bytes([created.body[0], created.body[1]]));
        c.on_created2(&created.body[..2 + hlen]).unwrap();
        Leg { w, conn, circ, c }
    }

    fn send(&mut self, net: &mut Net, command: u8, stream: u16, data: &[u8]) {
        let mut b = [0u8; BODY_LEN];
        self.c.send(0, command, stream, data, &mut b);
        net.cell(self.w, self.conn, id(self.circ), cmd::RELAY, &mut b);
    }

    fn read(&mut self, net: &mut Net) -> Reads {
        let mut r = Reads {
            msgs: Vec::new(),
            destroyed: None,
        };
        for o in net.written(self.w, self.conn) {
            if o.circ_id != id(self.circ) {
                continue;
            }
            if o.command == cmd::DESTROY {
                r.destroyed = Some(o.body[0]);
                continue;
            }
            let mut b = o.body;
            if let Ok((_, h)) = self.c.on_backward(&mut b) {
                r.msgs
                    .push((h.command, h.stream_id, relay::data(&b, &h).to_vec()));
            }
        }
        r
    }

    /// Send LINK for `nonce`; the set answers LINKED (checked).
    fn link(&mut self, net: &mut Net, nonce: [u8; 32], desired_ux: u8) -> Link {
        let l = Link {
            nonce,
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux,
        };
        self.send(net, conflux::LINK, 0, &l.encode());
        net.settle();
        let r = self.read(net);
        assert_eq!(r.destroyed, None, "the leg closed at LINK");
        let linked = r
            .msgs
            .iter()
            .find(|m| m.0 == conflux::LINKED)
            .expect("LINKED");
        Link::parse(&linked.2).expect("a well-formed LINKED")
    }

    /// LINKED_ACK `rtt_ms` after LINKED (the worker's clock moves on).
    fn ack(&mut self, net: &mut Net, rtt_ms: u64) {
        let now = net.cores[self.w].now_ns;
        net.cores[self.w].set_now(now + rtt_ms * 1_000_000);
        self.send(net, conflux::LINKED_ACK, 0, &[]);
        net.settle();
    }
}

/// Two linked legs (worker 0: home; worker 1) with RTTs 10 and 20 ms.
fn two_legs(net: &mut Net, nonce: [u8; 32]) -> (Leg, Leg) {
    two_legs_with(net, nonce, false)
}

/// [`two_legs`], with CGO on both if `cgo`.
fn two_legs_with(net: &mut Net, nonce: [u8; 32], cgo: bool) -> (Leg, Leg) {
    let mut a = Leg::new_with(net, 0, 1, 5, cgo);
    let mut b = Leg::new_with(net, 1, 2, 6, cgo);
    assert_eq!((a.c.is_cgo(0), b.c.is_cgo(0)), (cgo, cgo));
    let la = a.link(net, nonce, ux::HIGH_THROUGHPUT);
    let lb = b.link(net, nonce, ux::HIGH_THROUGHPUT);
    assert_eq!((la.last_seqno_sent, lb.last_seqno_recv), (0, 0));
    assert_eq!(la.desired_ux, conflux::EXIT_UX);
    a.ack(net, 10);
    b.ack(net, 20);
    (a, b)
}

/// BEGIN on `leg` for stream 9; the connect succeeds; returns the
/// stream's key on the home (worker 0).
fn open(net: &mut Net, leg: &mut Leg) -> usize {
    leg.send(net, relay_cmd::BEGIN, 9, &begin("198.51.100.7:5000"));
    net.settle();
    let Some(StreamIo::Connect { key, .. }) = net.poll_stream_io(0) else {
        panic!("no connect asked for on the home");
    };
    net.cores[0].stream_connected(key);
    net.settle();
    key
}

/// A client's receiving side as C runs it: per-leg sequence numbers,
/// SWITCH moving them; returns the multiplexed messages in order.
fn reassemble(legs: &mut [&mut Leg], net: &mut Net, seqs: &mut [u64]) -> Vec<(u8, Vec<u8>)> {
    let mut all = Vec::new();
    for (i, leg) in legs.iter_mut().enumerate() {
        let r = leg.read(net);
        assert_eq!(r.destroyed, None);
        for (command, _, data) in r.msgs {
            if command == conflux::SWITCH {
                seqs[i] += u64::from(conflux::parse_switch(&data));
            } else if conflux::is_multiplexed(command) {
                seqs[i] += 1;
                all.push((seqs[i], command, data));
            }
        }
    }
    all.sort_by_key(|m| m.0);
    for w in all.windows(2) {
        assert!(w[0].0 < w[1].0, "two messages with one sequence number");
    }
    all.into_iter().map(|(_, c, d)| (c, d)).collect()
}

#[test]
fn a_set_across_two_workers_keeps_the_streams_order_both_ways() {
    set_across_two_workers(false);
}

/// The same with both legs running CGO and relay cell format V1.
#[test]
fn a_set_of_cgo_legs_across_two_workers_keeps_the_streams_order_both_ways() {
    set_across_two_workers(true);
}

fn set_across_two_workers(cgo: bool) {
    let mut net = exit_net_with(2);
    let (mut a, mut b) = two_legs_with(&mut net, [1; 32], cgo);
    let home = net.cores[0].conflux.report();
    assert_eq!(
        (home.sets_open, home.legs_open, home.legs_remote),
        (1, 2, 1)
    );
    let key = open(&mut net, &mut a);
    let mut seqs = [0u64; 2];
    let first = reassemble(&mut [&mut a, &mut b], &mut net, &mut seqs);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, relay_cmd::CONNECTED);

    // Upstream: A1 A2 on leg a (sequence 2, 3), SWITCH to b, B1 B2 (4, 5);
    // b's cells reach the home first (over the ring) and wait.
    let parsed = weft_proto::relay::headers_parsed();
    b.send(&mut net, conflux::SWITCH, 0, &conflux::switch_body(3));
    b.send(&mut net, relay_cmd::DATA, 9, b"B1");
    b.send(&mut net, relay_cmd::DATA, 9, b"B2");
    net.settle();
    assert_eq!(net.cores[0].stream_output_len(key), Some(0));
    assert_eq!(net.cores[0].conflux.ooo_bytes(), 2 * OOO_CELL_COST as u64);
    a.send(&mut net, relay_cmd::DATA, 9, b"A1");
    a.send(&mut net, relay_cmd::DATA, 9, b"A2");
    net.settle();
    let got: Vec<u8> = net.cores[0].take_stream_output(key).unwrap();
    assert_eq!(got, b"A1A2B1B2");
    // Five messages, each parsed once: by its leg's keyed half. The home,
    // its out-of-order queue and the stream room take the typed message.
    assert_eq!(weft_proto::relay::headers_parsed() - parsed, 5);
    assert_eq!(net.cores[0].conflux.ooo_bytes(), 0);
    assert_eq!(net.cores[0].report().exit.cfx.reordered, 2);

    // Downstream: 200 cells; leg a (10 ms) takes its window (124 cells),
    // then b on worker 1, after a SWITCH; the client puts them in order.
    // A set packages 488 bytes a cell, what a leg of either relay cell
    // format carries.
    assert_eq!(net.cores[0].stream_read_budget(key), 248 * 488);
    let data: Vec<u8> = (0..200 * 488).map(|i| (i % 251) as u8).collect();
    net.cores[0].stream_data_read(key, &data);
    net.settle();
    let msgs = reassemble(&mut [&mut a, &mut b], &mut net, &mut seqs);
    assert_eq!(msgs.len(), 200);
    let joined: Vec<u8> = msgs.iter().flat_map(|m| m.1.clone()).collect();
    assert_eq!(joined, data, "every byte, in order");
    assert!(net.cores[0].report().exit.cfx.switches_sent >= 1);
}

/// An ordinary exit circuit with an open stream, on worker 0 (conn 3):
/// it must not notice what happens to a set.
fn bystander(net: &mut Net) -> (Leg, usize) {
    let mut c = Leg::new(net, 0, 3, 7);
    c.send(net, relay_cmd::BEGIN, 4, &begin("198.51.100.7:5001"));
    let Some(StreamIo::Connect { key, .. }) = net.poll_stream_io(0) else {
        panic!("no connect");
    };
    net.cores[0].stream_connected(key);
    c.read(net);
    (c, key)
}

fn bystander_unharmed(net: &mut Net, c: &mut Leg, key: usize) {
    let before = net.cores[0].stream_output_len(key).unwrap();
    c.send(net, relay_cmd::DATA, 4, b"still here");
    net.settle();
    assert_eq!(c.read(net).destroyed, None);
    assert_eq!(net.cores[0].stream_output_len(key).unwrap(), before + 10);
}

#[test]
fn a_gap_never_filled_closes_only_its_set_and_the_queue_stays_under_its_cap() {
    let mut net = exit_net_with(2);
    let (mut by, by_key) = bystander(&mut net);
    let (mut a, mut b) = two_legs(&mut net, [2; 32]);
    b.send(&mut net, conflux::SWITCH, 0, &conflux::switch_body(10));
    let mut peak = 0;
    let mut sent = 0;
    let reason = loop {
        b.send(&mut net, relay_cmd::DATA, 9, &[0xAA; 498]);
        net.settle();
        sent += 1;
        peak = peak.max(net.cores[0].conflux.ooo_bytes());
        if let Some(r) = b.read(&mut net).destroyed {
            break r;
        }
        assert!(sent <= 200, "the set never closed");
    };
    assert_eq!(reason, destroy_reason::RESOURCELIMIT);
    assert!(
        peak as usize <= CAP,
        "queue peaked at {peak} bytes over the cap {CAP}"
    );
    assert_eq!(peak as usize, CAP, "it filled to the cap first");
    assert_eq!(
        a.read(&mut net).destroyed,
        Some(destroy_reason::RESOURCELIMIT)
    );
    assert_eq!(net.cores[0].conflux.ooo_bytes(), 0, "its memory is freed");
    assert_eq!(net.cores[0].report().exit.cfx.sets_closed_ooo, 1);
    assert_eq!(net.cores[0].conflux.report().sets_open, 0);
    bystander_unharmed(&mut net, &mut by, by_key);
}

#[test]
fn an_absurd_switch_closes_only_its_set() {
    let mut net = exit_net_with(2);
    let (mut by, by_key) = bystander(&mut net);
    let (mut a, mut b) = two_legs(&mut net, [3; 32]);
    b.send(
        &mut net,
        conflux::SWITCH,
        0,
        &conflux::switch_body(u32::MAX),
    );
    net.settle();
    assert_eq!(b.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    assert_eq!(a.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    assert_eq!(net.cores[0].report().exit.cfx.sets_closed_protocol, 1);
    bystander_unharmed(&mut net, &mut by, by_key);
}

#[test]
fn a_second_link_closes_that_circuit_and_a_live_nonce_takes_a_new_leg() {
    let mut net = exit_net_with(2);
    let (mut by, by_key) = bystander(&mut net);
    let (mut a, mut b) = two_legs(&mut net, [4; 32]);
    let l = Link {
        nonce: [4; 32],
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: ux::HIGH_THROUGHPUT,
    };
    b.send(&mut net, conflux::LINK, 0, &l.encode());
    net.settle();
    assert_eq!(b.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    // Leg b carried nothing: the set goes on with a (as C keeps it).
    assert_eq!(a.read(&mut net).destroyed, None);
    assert_eq!(net.cores[0].conflux.report().legs_open, 1);
    // The nonce of a live set takes a new leg (how a client adds one).
    let mut c = Leg::new(&mut net, 1, 4, 8);
    c.link(&mut net, [4; 32], ux::HIGH_THROUGHPUT);
    assert_eq!(net.cores[0].conflux.report().legs_open, 2);
    bystander_unharmed(&mut net, &mut by, by_key);
}

#[test]
fn two_clients_claiming_one_nonce_lose_that_set_only() {
    let mut net = exit_net_with(2);
    let (mut by, by_key) = bystander(&mut net);
    let nonce = [5; 32];
    let mut x = Leg::new(&mut net, 0, 1, 5);
    let mut y = Leg::new(&mut net, 1, 2, 6);
    x.link(&mut net, nonce, ux::HIGH_THROUGHPUT);
    y.link(&mut net, nonce, ux::HIGH_THROUGHPUT);
    x.ack(&mut net, 10);
    y.ack(&mut net, 10);
    let _ = open(&mut net, &mut x);
    // The other "client" knows nothing of x's numbers: its BEGIN claims
    // sequence 1 again.
    y.send(&mut net, relay_cmd::BEGIN, 9, &begin("198.51.100.7:5000"));
    net.settle();
    assert_eq!(y.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    assert_eq!(x.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    assert_eq!(
        net.cores[0].report().exit.open,
        1,
        "the set's stream is gone, the bystander's stays"
    );
    bystander_unharmed(&mut net, &mut by, by_key);
}

#[test]
fn the_consensus_kill_switch_refuses_every_conflux_cell() {
    // cfx_enabled=0: LINK on a congestion-controlled exit circuit (which
    // would link otherwise) closes it, as C's conflux_process_link() does;
    // so do the other conflux commands. Ordinary streams still work.
    let mut net = exit_net_cfx(1, false);
    let link = Link {
        nonce: [7; 32],
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: ux::NO_OPINION,
    };
    for (i, (command, body)) in [
        (conflux::LINK, link.encode().to_vec()),
        (conflux::SWITCH, vec![0, 0, 0, 1]),
        (conflux::LINKED_ACK, vec![]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut leg = Leg::new(&mut net, 0, 1 + i, 20 + i as u32);
        leg.send(&mut net, command, 0, &body);
        assert_eq!(
            leg.read(&mut net).destroyed,
            Some(destroy_reason::PROTOCOL),
            "{command}"
        );
    }
    let mut s = Leg::new(&mut net, 0, 9, 30);
    s.send(&mut net, relay_cmd::BEGIN, 3, &begin("198.51.100.7:5000"));
    assert!(net.poll_stream_io(0).is_some(), "streams still open");
    // With the default (cfx_enabled=1) the same LINK links.
    let mut net = exit_net_with(1);
    let mut leg = Leg::new(&mut net, 0, 1, 20);
    leg.send(&mut net, conflux::LINK, 0, &link.encode());
    assert_eq!(leg.read(&mut net).destroyed, None);
}

#[test]
fn links_the_exit_refuses() {
    let mut net = exit_net_with(1);
    let l = |nonce| Link {
        nonce,
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: ux::NO_OPINION,
    };
    // Without congestion control (an ntor circuit).
    net.open(0, 1, false);
    let mut c = OriginCircuit::new();
    let create2 = c.create2(&target(net.relay, 9001)).unwrap();
    net.cell(0, 1, id(9), cmd::CREATE2, &mut pad(&create2));
    let out = net.written(0, 1);
    let created = out.iter().find(|o| o.circ_id == id(9)).unwrap();
    let hlen = usize::from(u16::from_be_bytes([created.body[0], created.body[1]]));
    c.on_created2(&created.body[..2 + hlen]).unwrap();
    let mut plain = Leg {
        w: 0,
        conn: 1,
        circ: 9,
        c,
    };
    plain.send(&mut net, conflux::LINK, 0, &l([6; 32]).encode());
    assert_eq!(
        plain.read(&mut net).destroyed,
        Some(destroy_reason::PROTOCOL)
    );
    // With a stream already open.
    let mut s = Leg::new(&mut net, 0, 2, 10);
    s.send(&mut net, relay_cmd::BEGIN, 3, &begin("198.51.100.7:5000"));
    let _ = net.poll_stream_io(0);
    s.send(&mut net, conflux::LINK, 0, &l([6; 32]).encode());
    assert_eq!(s.read(&mut net).destroyed, Some(destroy_reason::PROTOCOL));
    // Malformed, and LINKED / SWITCH / LINKED_ACK on an unlinked circuit.
    for (command, body) in [
        (conflux::LINK, vec![2u8; 50]),
        (conflux::LINKED, l([6; 32]).encode().to_vec()),
        (conflux::SWITCH, vec![0, 0, 0, 1]),
        (conflux::LINKED_ACK, vec![]),
    ] {
        let mut m = Leg::new(&mut net, 0, 3, 11 + u32::from(command));
        m.send(&mut net, command, 0, &body);
        assert_eq!(
            m.read(&mut net).destroyed,
            Some(destroy_reason::PROTOCOL),
            "{command}"
        );
    }
    // A set takes 8 legs (cfx_max_legs_set); the ninth is refused.
    for i in 0..9u32 {
        let mut m = Leg::new(&mut net, 0, 4, 40 + i);
        m.send(&mut net, conflux::LINK, 0, &l([7; 32]).encode());
        net.settle();
        let r = m.read(&mut net);
        if i < 8 {
            assert!(r.msgs.iter().any(|m| m.0 == conflux::LINKED), "leg {i}");
        } else {
            assert_eq!(r.destroyed, Some(destroy_reason::PROTOCOL), "the ninth leg");
        }
    }
    assert_eq!(net.cores[0].conflux.report().legs_open, 8);
}

/// A leg whose set's home (on the other worker) does not drain its ring:
/// the leg's messages wait in the lane's ordered line, counted per leg;
/// at the circuit queue limit that leg closes (RESOURCELIMIT), the line
/// stops growing, and the other circuits of its worker are unharmed.
#[test]
fn a_leg_whose_home_falls_behind_is_closed_at_the_circuit_queue_limit() {
    let mut net = exit_net_with(2);
    let (_a, mut b) = two_legs(&mut net, [3; 32]);
    let mut other = Leg::new(&mut net, 1, 4, 8);
    let max = DEFAULT_MAX_CIRCUIT_QUEUE;
    // Worker 0 (the home) reads nothing from here on: the ring (64)
    // fills, then the ordered line.
    let mut closed = None;
    for i in 0..max + 100 {
        b.send(&mut net, relay_cmd::DATA, 9, &[0x55; 498]);
        if let Some(r) = b.read(&mut net).destroyed {
            closed = Some((i, r));
            break;
        }
    }
    let (sent, reason) = closed.expect("the leg never closed");
    assert_eq!(reason, destroy_reason::RESOURCELIMIT);
    assert!(sent >= max, "closed after {sent} cells, before the limit");
    let line = net.cores[1].lanes.ordered_len();
    assert!(line <= max + 1, "{line} messages in the ordered line");
    // More cells on the closed leg add nothing.
    b.send(&mut net, relay_cmd::DATA, 9, &[0x55; 498]);
    assert_eq!(net.cores[1].lanes.ordered_len(), line);
    // The home drains what waited; the other circuit still works.
    net.settle();
    assert_eq!(net.cores[1].lanes.ordered_len(), 0);
    other.send(&mut net, relay_cmd::BEGIN, 4, &begin("198.51.100.7:5001"));
    assert!(matches!(
        net.poll_stream_io(1),
        Some(StreamIo::Connect { .. })
    ));
    assert_eq!(other.read(&mut net).destroyed, None);
}
