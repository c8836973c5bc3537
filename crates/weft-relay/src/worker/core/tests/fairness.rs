//! Fairness by circuit across two workers (issue 51), in memory: one link
//! to another relay carries eight busy circuits, eight client links carry
//! one each, half of the clients on the other worker, so half of the
//! circuits cross workers through a small ring. Senders keep a window of
//! cells in flight on every circuit both ways (a cell leaves the window
//! when the relay writes it out), as Tor's flow control does. The two
//! drivers are played as the worker's loop plays them — a round's clock,
//! each source read up to its share ([`Circuits::read_budget`]), the rings
//! exchanged as reading goes on, every queued cell written at the round's
//! end, a worker whose full ring the other drained woken for a turn (as
//! `drain_rings` wakes it) — and their steps alternate, as two workers on
//! two cores. A second case puts seven clients on the relay link's worker
//! and one on the other: a lone crossing circuit (whose link pauses while
//! its cells wait, so only the wake-up refills its ring) among local ones.
//!
//! Every circuit must get within 2× of its fair share of cells over the
//! measured rounds, in both directions, and every cell must arrive once
//! and in order.

use super::*;
use crate::worker::core::ReadFrom;
use weft_proto::cell::CELL_LEN;

/// Cells a sender keeps in flight per circuit and direction.
const WINDOW: u64 = 400;
/// Cells read per step before the worker exchanges its rings.
const CHUNK: usize = 24;
/// Rounds before and while the shares are counted.
const WARMUP: u32 = 40;
const MEASURED: u32 = 160;

/// One busy circuit: the client's link (keyed half) and the shared relay
/// link (relabel half).
struct Circ {
    client: OriginCircuit,
    next: NextRelay,
    /// Worker and connection slot of the client's link, its circuit ID.
    at: (usize, usize),
    circ: u32,
    /// The relabel half's circuit ID on the relay link.
    relabel: u32,
    up_sent: u32,
    up_got: u32,
    down_sent: u32,
    down_got: u32,
    up_measured: u64,
    down_measured: u64,
}

/// The relay link: worker 0, slot 1.
const RELAY: (usize, usize) = (0, 1);

/// A circuit from a client link `at` (opened here) through the relay
/// link.
fn circuit(net: &mut Net, at: (usize, usize)) -> Circ {
    let (a, conn) = at;
    net.open(a, conn, false);
    let mut client = OriginCircuit::new();
    let create2 = client.create2(&target(net.relay, 9001)).unwrap();
    let circ = 0x8000_0001;
    net.cell(a, conn, circ, cmd::CREATE2, &mut pad(&create2));
    let out = net.written(a, conn);
    let hlen = usize::from(u16::from_be_bytes([out[0].body[0], out[0].body[1]]));
    client.on_created2(&out[0].body[..2 + hlen]).unwrap();
    let mut next = NextRelay::new(&net._dir.path().join("next"));
    let mut ext = [0u8; BODY_LEN];
    client.extend2(&target(next.keys, 9002), &mut ext).unwrap();
    net.cell(a, conn, circ, cmd::RELAY_EARLY, &mut ext);
    let Some(ControllerMsg::Extend { from, req, .. }) = net.controller.pop() else {
        panic!("no extend request");
    };
    let (b, relay_conn) = RELAY;
    net.cores[b].create_outbound(Some(relay_conn), from, &req.create2);
    net.collect(b);
    net.settle();
    let out = net.written(b, relay_conn);
    let relabel = out[0].circ_id;
    let mut created = next.answer(&out[0].body);
    net.cell(b, relay_conn, relabel, cmd::CREATED2, &mut created);
    net.settle();
    let out = net.written(a, conn);
    let mut body = out[0].body;
    let (_, h) = client.on_backward(&mut body).unwrap();
    client.on_extended2(relay::data(&body, &h)).unwrap();
    Circ {
        client,
        next,
        at,
        circ,
        relabel,
        up_sent: 0,
        up_got: 0,
        down_sent: 0,
        down_got: 0,
        up_measured: 0,
        down_measured: 0,
    }
}

/// The bytes each connection's peer sent that the relay has not read yet
/// (its kernel buffer): (circuit index, cell).
type Inbound = std::collections::HashMap<(usize, usize), VecDeque<(usize, [u8; BODY_LEN])>>;

struct Sim {
    net: Net,
    circs: Vec<Circ>,
    inbound: Inbound,
    /// Connection slots of each worker, in reading order.
    conns: [Vec<usize>; 2],
    /// Messages each worker may still take from the other's ring this
    /// round.
    ring_left: [u64; 2],
    /// Woken by the other worker (room on the ring it found full).
    woken: [bool; 2],
    measuring: bool,
}

impl Sim {
    /// Senders fill their windows (the relay link's sender goes round its
    /// circuits a few cells at a time, as a relay's would).
    fn send(&mut self) {
        for i in 0..self.circs.len() {
            let c = &mut self.circs[i];
            while u64::from(c.up_sent - c.up_got) < WINDOW {
                let b = client_data(&mut c.client, c.up_sent);
                c.up_sent += 1;
                self.inbound.entry(c.at).or_default().push_back((i, b));
            }
        }
        loop {
            let mut any = false;
            for i in 0..self.circs.len() {
                let c = &mut self.circs[i];
                for _ in 0..4 {
                    if u64::from(c.down_sent - c.down_got) >= WINDOW {
                        break;
                    }
                    let d = c.next.data(&c.down_sent.to_be_bytes());
                    c.down_sent += 1;
                    self.inbound.entry(RELAY).or_default().push_back((i, d));
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Worker `w`'s rings: hand over what its share of the round leaves.
    fn drain(&mut self, w: usize) {
        let src = 1 - w;
        let Some(mut c) = self.net.ins[w][src].take() else {
            return;
        };
        let core = &mut self.net.cores[w];
        let left = &mut self.ring_left[w];
        while *left > 0 && c.pop_with(|m| core.on_ring_msg(m, src as u16)).is_some() {
            *left -= 1;
        }
        // Room on a ring whose producer found it full wakes the producer
        // (the driver's `drain_rings`): it takes a turn even with nothing
        // to read.
        if c.release() {
            self.woken[src] = true;
        }
        self.net.ins[w][src] = Some(c);
        self.net.cores[w].handle_event(CoreEvent::RingsDrained);
        self.net.collect(w);
    }

    /// Worker `w` reads up to `n` cells of connection `conn`'s inbound
    /// bytes, then exchanges its rings. Returns the cells read.
    fn read(&mut self, w: usize, conn: usize, n: usize) -> usize {
        let mut read = 0;
        while read < n {
            let Some((i, mut body)) = self
                .inbound
                .get_mut(&(w, conn))
                .and_then(VecDeque::pop_front)
            else {
                break;
            };
            let c = &self.circs[i];
            let circ_id = if (w, conn) == RELAY {
                c.relabel
            } else {
                c.circ
            };
            assert_eq!(
                self.net.cell(w, conn, circ_id, cmd::RELAY, &mut body),
                CellVerdict::Continue
            );
            read += 1;
        }
        self.drain(w);
        self.net.cores[w].end_round(|_, _| {});
        read
    }

    /// Worker `w` writes every queued cell; the far ends take them.
    fn write(&mut self, w: usize) {
        for conn in self.conns[w].clone() {
            for o in self.net.written(w, conn) {
                if (w, conn) == RELAY {
                    let i = self
                        .circs
                        .iter()
                        .position(|c| c.relabel == o.circ_id)
                        .expect("a circuit of the relay link");
                    let c = &mut self.circs[i];
                    let mut b = o.body;
                    let (_, data) = c.next.read(&mut b).expect("the client's cell");
                    assert_eq!(data, c.up_got.to_be_bytes(), "up, in order");
                    c.up_got += 1;
                    c.up_measured += u64::from(self.measuring);
                } else {
                    let i = self
                        .circs
                        .iter()
                        .position(|c| c.at == (w, conn))
                        .expect("a client's circuit");
                    let c = &mut self.circs[i];
                    let mut b = o.body;
                    let (hop, h) = c.client.on_backward(&mut b).expect("the relay's cell");
                    assert_eq!(hop, 1);
                    assert_eq!(
                        relay::data(&b, &h),
                        c.down_got.to_be_bytes(),
                        "down, in order"
                    );
                    c.down_got += 1;
                    c.down_measured += u64::from(self.measuring);
                }
            }
        }
    }

    /// One round of both workers, their steps alternating.
    fn round(&mut self, now_ns: u64) {
        self.send();
        for w in 0..2 {
            self.net.cores[w].handle_event(CoreEvent::RoundBegins { now_ns });
            self.net.collect(w);
            let bytes = self.net.cores[w].read_budget(ReadFrom::Ring(1 - w));
            self.ring_left[w] = (bytes / CELL_LEN as u64).max(1);
            self.drain(w);
        }
        // What each worker may still read from each of its connections.
        let mut left: [Vec<(usize, usize)>; 2] = Default::default();
        for (w, l) in left.iter_mut().enumerate() {
            for &conn in &self.conns[w] {
                // A paused connection reads nothing this round, as the
                // driver's `read_conn`.
                let core = &mut self.net.cores[w];
                let bytes = if core.read_paused(conn) {
                    0
                } else {
                    core.read_budget(ReadFrom::Conn(conn))
                };
                l.push((conn, (bytes / CELL_LEN as u64) as usize));
            }
        }
        loop {
            let mut moved = false;
            for (w, l) in left.iter_mut().enumerate() {
                let Some(&mut (conn, ref mut n)) = l.iter_mut().find(|(_, n)| *n > 0) else {
                    // Nothing left to read: a wake-up is a turn that
                    // drains the rings and serves the lanes.
                    if std::mem::take(&mut self.woken[w]) {
                        self.drain(w);
                        self.net.cores[w].end_round(|_, _| {});
                        moved = true;
                    }
                    continue;
                };
                let read = self.read(w, conn, CHUNK.min(*n));
                *n = if read < CHUNK.min(*n) { 0 } else { *n - read };
                moved = true;
            }
            if !moved {
                break;
            }
        }
        for w in 0..2 {
            self.write(w);
            self.net.cores[w].end_round(|_, _| {});
        }
    }
}

#[test]
fn every_circuit_gets_its_share_across_two_workers_in_both_directions() {
    shares_with_local_clients(4);
}

#[test]
fn a_lone_crossing_circuit_gets_its_share() {
    shares_with_local_clients(7);
}

/// Eight client circuits through the relay link, the first `local` of
/// them on the relay link's worker (the rest cross).
fn shares_with_local_clients(local: usize) {
    let mut net = Net::new(2, 32);
    net.open(RELAY.0, RELAY.1, true);
    // The first `local` clients on worker 0 (their circuits stay there),
    // the rest on worker 1 (theirs cross).
    let mut circs = Vec::new();
    for k in 0..8 {
        let at = if k < local { (0, 10 + k) } else { (1, 10 + k) };
        circs.push(circuit(&mut net, at));
    }
    let conns = [
        std::iter::once(RELAY.1)
            .chain(circs.iter().filter(|c| c.at.0 == 0).map(|c| c.at.1))
            .collect(),
        circs
            .iter()
            .filter(|c| c.at.0 == 1)
            .map(|c| c.at.1)
            .collect(),
    ];
    let mut sim = Sim {
        net,
        circs,
        inbound: Default::default(),
        conns,
        ring_left: [0; 2],
        woken: [false; 2],
        measuring: false,
    };
    for r in 0..WARMUP + MEASURED {
        sim.measuring = r >= WARMUP;
        sim.round(1_000_000_000 + u64::from(r) * 2_000_000);
    }
    let up: Vec<u64> = sim.circs.iter().map(|c| c.up_measured).collect();
    let down: Vec<u64> = sim.circs.iter().map(|c| c.down_measured).collect();
    eprintln!("cells per circuit over {MEASURED} rounds: up {up:?}, down {down:?}");
    // A circuit's fair share: the cells of every circuit and direction
    // over their number (all of them are busy, with the same window).
    let all: Vec<u64> = up.iter().chain(&down).copied().collect();
    let mean = all.iter().sum::<u64>() as f64 / all.len() as f64;
    assert!(mean > 0.0, "nothing moved");
    for (dir, cells) in [("up", &up), ("down", &down)] {
        for (i, &n) in cells.iter().enumerate() {
            let share = n as f64 / mean;
            assert!(
                (0.5..=2.0).contains(&share),
                "{dir}: circuit {i} got {share:.2} of its fair share (up {up:?}, down {down:?})"
            );
        }
    }
    let (u, d) = (up.iter().sum::<u64>(), down.iter().sum::<u64>());
    assert!(
        (0.5..=2.0).contains(&(u as f64 / d as f64)),
        "directions {u}:{d}"
    );
}

/// The hold's quiet-circuit rule ([`Circuits::read_paused`]): the relay
/// link carries three circuits, all crossing to worker 1, and their ring
/// is full with two of them waiting. With the third as busy as they are,
/// what the link reads could only wait, so it is held; with the third
/// quiet (EWMA on), the link reads on, so the quiet circuit's cells get
/// ahead of the busy ones' in the crossing queues' EWMA order instead of
/// waiting behind theirs in the kernel. With EWMA off nothing tells a
/// quiet circuit, so no link is held.
#[test]
fn a_link_at_a_full_ring_is_held_unless_a_quiet_circuit_rides_on_it() {
    fn held(third_busy: bool, ewma: bool) -> bool {
        let mut net = Net::new(2, 8);
        if !ewma {
            net.cores[0].lanes.set_halflife(0.0);
        }
        net.open(RELAY.0, RELAY.1, true);
        let mut circs: Vec<Circ> = (0..3).map(|k| circuit(&mut net, (1, 10 + k))).collect();
        let down = |net: &mut Net, c: &mut Circ| {
            let mut d = c.next.data(&c.down_sent.to_be_bytes());
            c.down_sent += 1;
            net.cell(RELAY.0, RELAY.1, c.relabel, cmd::RELAY, &mut d);
        };
        // History: every circuit has crossed; the busy ones a hundred
        // times as much (each cell taken by worker 1 before the next).
        for (i, c) in circs.iter_mut().enumerate() {
            let n = if i < 2 || third_busy { 100 } else { 1 };
            for _ in 0..n {
                down(&mut net, c);
                net.settle();
            }
        }
        assert!(!net.cores[0].read_paused(RELAY.1), "the ring has room");
        // Now worker 1 is slow: the first two fill the ring and wait.
        for _ in 0..8 {
            down(&mut net, &mut circs[0]);
            down(&mut net, &mut circs[1]);
        }
        let waiting = |net: &Net, c: &Circ| {
            let slot = net.cores[0].conn(RELAY.1).unwrap().circuits[&c.relabel];
            net.cores[0].crossing_len(slot)
        };
        assert!(waiting(&net, &circs[0]) > 0 && waiting(&net, &circs[1]) > 0);
        assert_eq!(waiting(&net, &circs[2]), 0);
        let held = net.cores[0].read_paused(RELAY.1);
        // Either way, every cell arrives once worker 1 reads its ring.
        net.settle();
        assert!(!net.cores[0].read_paused(RELAY.1));
        held
    }
    assert!(
        held(true, true),
        "three busy circuits: held at the full ring"
    );
    assert!(!held(false, true), "a quiet circuit among them: reads on");
    assert!(!held(true, false), "EWMA off: never held");
}
