//! Tests of the conflux set: cell formats, ordering across legs, the
//! exit's leg choice, and the checks that close a set.

use super::*;

const LIMITS: SetLimits = SetLimits {
    max_legs: 8,
    max_ooo_bytes: 64 * OOO_CELL_COST,
    max_switch_gap: 4000,
};

fn link(ux: u8) -> Link {
    Link {
        nonce: [7; 32],
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: ux,
    }
}

/// A message whose first eight bytes are `n`.
fn body(n: u64) -> crate::relay::RelayMsg {
    let mut b = [0u8; BODY_LEN];
    b[11..19].copy_from_slice(&n.to_be_bytes());
    b[0] = crate::relay::relay_cmd::DATA;
    b[4] = 1;
    b[10] = 8;
    let h = crate::relay::parse_header(&b).unwrap();
    crate::relay::RelayMsg::parsed(&h, &b)
}

fn ready(rtt_us: u64) -> LegState {
    LegState {
        cwnd: 10,
        rtt_us,
        ..Default::default()
    }
}

#[test]
fn link_cells_are_trunnels_format() {
    let l = Link {
        nonce: [0xab; 32],
        last_seqno_sent: 0x0102030405060708,
        last_seqno_recv: 9,
        desired_ux: ux::HIGH_THROUGHPUT,
    };
    let b = l.encode();
    assert_eq!(b[0], 1, "version");
    assert_eq!(&b[33..41], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[41..49], &9u64.to_be_bytes());
    assert_eq!(b[49], 3);
    assert_eq!(Link::parse(&b), Some(l));
    // Trailing bytes are ignored (trunnel's payload is "the rest").
    let mut long = b.to_vec();
    long.extend_from_slice(&[0; 10]);
    assert_eq!(Link::parse(&long), Some(l));
    let mut v2 = b;
    v2[0] = 2;
    assert_eq!(Link::parse(&v2), None, "unknown version");
    let mut bad_ux = b;
    bad_ux[49] = 5;
    assert_eq!(Link::parse(&bad_ux), None, "UX outside the enum");
    assert_eq!(Link::parse(&b[..49]), None, "short");
    assert_eq!(Link::parse(&[]), None);
    assert_eq!(parse_switch(&switch_body(0xdeadbeef)), 0xdeadbeef);
    assert_eq!(
        parse_switch(&[1, 2]),
        0,
        "short SWITCH counts as 0, as in C"
    );
}

#[test]
fn the_commands_c_multiplexes() {
    for c in [1, 2, 3, 4, 11, 12, 43, 44] {
        assert!(is_multiplexed(c), "{c}");
    }
    for c in [
        5, 6, 7, 8, 9, 10, 13, 14, 15, LINK, LINKED, LINKED_ACK, SWITCH,
    ] {
        assert!(!is_multiplexed(c), "{c}");
    }
}

#[test]
fn the_set_answers_linked_with_its_own_counters_and_refuses_a_full_set() {
    let mut s = ConfluxSet::new(SetLimits {
        max_legs: 2,
        ..LIMITS
    });
    let a = s.add_leg(1u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
    assert_eq!((a.last_seqno_sent, a.last_seqno_recv), (0, 0));
    assert_eq!(a.desired_ux, EXIT_UX);
    assert_eq!(a.nonce, [7; 32]);
    assert_eq!(s.algorithm(), Algorithm::LowRtt);
    s.received(1, 0, &body(1)).unwrap();
    let b = s.add_leg(2, &link(ux::MIN_LATENCY)).unwrap();
    assert_eq!(b.last_seqno_recv, 1, "what was delivered");
    assert_eq!(s.algorithm(), Algorithm::MinRtt);
    assert!(s.add_leg(3, &link(0)).is_none(), "cfx_max_legs_set");
    assert!(s.add_leg(2, &link(0)).is_none(), "a leg joins once");
}

/// A client's sending side as C runs it: per-leg counters, SWITCH with
/// the difference when it changes legs.
struct ClientModel {
    sent: [u64; 2],
    curr: usize,
}

impl ClientModel {
    /// The messages for cell `n` sent on `leg`: maybe a SWITCH, then it.
    fn send(&mut self, leg: usize, n: u64) -> Vec<(u8, Option<u32>, u64)> {
        let mut out = Vec::new();
        if leg != self.curr {
            let rel = self.sent[self.curr] - self.sent[leg];
            self.sent[leg] = self.sent[self.curr];
            out.push((leg as u8, Some(rel as u32), 0));
            self.curr = leg;
        }
        self.sent[leg] += 1;
        out.push((leg as u8, None, n));
        out
    }
}

#[test]
fn cells_over_two_legs_are_delivered_in_order_whatever_the_interleaving() {
    // Deterministic pseudo-random: which leg sends, and which leg's next
    // message reaches the exit first (each leg stays FIFO).
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20 {
        let mut s = ConfluxSet::new(SetLimits {
            max_ooo_bytes: 10_000 * OOO_CELL_COST,
            ..LIMITS
        });
        s.add_leg(0u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
        s.add_leg(1u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
        let mut client = ClientModel {
            sent: [0, 0],
            curr: 0,
        };
        let mut wires: [std::collections::VecDeque<(u8, Option<u32>, u64)>; 2] = Default::default();
        let mut leg = 0;
        for n in 1..=500u64 {
            if rnd() % 7 == 0 {
                leg = 1 - leg;
            }
            for m in client.send(leg, n) {
                wires[leg].push_back(m);
            }
        }
        let mut delivered = Vec::new();
        while !wires[0].is_empty() || !wires[1].is_empty() {
            let w = if wires[0].is_empty() {
                1
            } else if wires[1].is_empty() {
                0
            } else {
                (rnd() % 2) as usize
            };
            let (leg, switch, n) = wires[w].pop_front().unwrap();
            if let Some(rel) = switch {
                s.switch_received(leg, rel).unwrap();
                continue;
            }
            if s.received(leg, 0, &body(n)).unwrap() == Arrival::Deliver {
                delivered.push(n);
            }
            while let Some(q) = s.pop_ready() {
                delivered.push(u64::from_be_bytes(q.msg.data()[..8].try_into().unwrap()));
            }
        }
        assert_eq!(delivered, (1..=500).collect::<Vec<_>>(), "round {round}");
        assert_eq!(s.ooo_bytes(), 0);
    }
}

#[test]
fn a_replayed_sequence_number_closes_the_set() {
    let mut s = ConfluxSet::new(LIMITS);
    s.add_leg(0u8, &link(0)).unwrap();
    s.add_leg(1u8, &link(0)).unwrap();
    assert_eq!(s.received(0, 0, &body(1)), Ok(Arrival::Deliver));
    // Leg 1 never switched: its first cell claims sequence 1 again.
    assert_eq!(s.received(1, 0, &body(1)), Err(SetError::Replayed));
    assert_eq!(s.received(9, 0, &body(1)), Err(SetError::UnknownLeg));
}

#[test]
fn a_gap_never_filled_fills_the_capped_queue_and_closes_the_set() {
    let mut s = ConfluxSet::new(LIMITS);
    s.add_leg(0u8, &link(0)).unwrap();
    s.add_leg(1u8, &link(0)).unwrap();
    s.switch_received(1, 5).unwrap();
    let mut queued = 0;
    let err = loop {
        match s.received(1, 0, &body(0)) {
            Ok(Arrival::Queued) => queued += 1,
            Ok(Arrival::Deliver) => panic!("the gap is never filled"),
            Err(e) => break e,
        }
        assert!(queued <= 64);
    };
    assert_eq!(err, SetError::QueueFull);
    assert_eq!(queued, 64);
    assert!(s.ooo_bytes() <= LIMITS.max_ooo_bytes);
    assert_eq!(s.ooo_peak_bytes, 64 * OOO_CELL_COST);
}

#[test]
fn an_absurd_switch_closes_the_set() {
    let mut s = ConfluxSet::new(LIMITS);
    s.add_leg(0u8, &link(0)).unwrap();
    s.switch_received(0, 4000).unwrap();
    assert_eq!(
        s.switch_received(0, 1),
        Err(SetError::AbsurdSwitch(1)),
        "past max_switch_gap ahead of what was delivered"
    );
    let mut t = ConfluxSet::new(LIMITS);
    t.add_leg(0u8, &link(0)).unwrap();
    assert_eq!(
        t.switch_received(0, u32::MAX),
        Err(SetError::AbsurdSwitch(u32::MAX))
    );
}

#[test]
fn low_rtt_fills_the_fast_leg_then_switches_with_the_right_number() {
    let mut s = ConfluxSet::new(LIMITS);
    s.add_leg(0u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
    s.add_leg(1u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
    assert_eq!(s.plan_send(relay_cmd::DATA), None, "no RTT yet: no DATA");
    assert_eq!(
        s.plan_send(relay_cmd::CONNECTED).map(|p| p.leg),
        Some(0),
        "other commands go on the first leg"
    );
    s.note_sent(0, relay_cmd::CONNECTED);
    s.update_leg(0, ready(30_000));
    s.update_leg(1, ready(10_000));
    assert!(s.can_send_data());
    assert_eq!(s.send_window(), 20);
    // Fast leg 1 first: a SWITCH telling the client leg 1 is at 1.
    let p = s.plan_send(relay_cmd::DATA).unwrap();
    assert_eq!(
        p,
        SendPlan {
            leg: 1,
            switch: Some(1)
        }
    );
    s.note_sent(1, relay_cmd::DATA);
    for _ in 0..9 {
        assert_eq!(s.plan_send(relay_cmd::DATA).unwrap().switch, None);
        s.note_sent(1, relay_cmd::DATA);
    }
    // Leg 1's window is full: leg 0, which is 10 behind.
    let p = s.plan_send(relay_cmd::DATA).unwrap();
    assert_eq!(
        p,
        SendPlan {
            leg: 0,
            switch: Some(10)
        }
    );
    s.note_sent(0, relay_cmd::DATA);
    for _ in 0..9 {
        s.plan_send(relay_cmd::DATA).unwrap();
        s.note_sent(0, relay_cmd::DATA);
    }
    assert!(!s.can_send_data());
    assert_eq!(s.plan_send(relay_cmd::DATA), None);
    assert_eq!(
        s.plan_send(relay_cmd::END).map(|p| p.leg),
        Some(0),
        "END keeps order"
    );
    // Leg 1 acknowledged 10 cells (it counted all 10 it sent).
    s.update_leg(
        1,
        LegState {
            inflight: 0,
            sent_total: 10,
            ..ready(10_000)
        },
    );
    assert_eq!(
        s.plan_send(relay_cmd::DATA).unwrap(),
        SendPlan {
            leg: 1,
            switch: Some(10)
        }
    );
    assert_eq!(s.switches_sent, 3);
}

#[test]
fn min_rtt_uses_one_leg_only() {
    let mut s = ConfluxSet::new(LIMITS);
    s.add_leg(0u8, &link(ux::MIN_LATENCY)).unwrap();
    s.add_leg(1u8, &link(ux::MIN_LATENCY)).unwrap();
    s.update_leg(0, ready(10_000));
    s.update_leg(1, ready(20_000));
    for _ in 0..10 {
        assert_eq!(s.plan_send(relay_cmd::DATA).unwrap().leg, 0);
        s.note_sent(0, relay_cmd::DATA);
    }
    assert_eq!(s.plan_send(relay_cmd::DATA), None, "never the slower leg");
    assert_eq!(s.send_window(), 0);
}

#[test]
fn losing_a_leg_tears_the_set_down_as_c_does() {
    let mut s = ConfluxSet::new(LIMITS);
    for l in 0..3u8 {
        s.add_leg(l, &link(ux::HIGH_THROUGHPUT)).unwrap();
        s.update_leg(l, ready(10_000 + u64::from(l)));
    }
    // Leg 2 was never used: it goes quietly.
    assert!(!s.remove_leg(2, 31));
    // Leg 0 is current (it sent).
    s.plan_send(relay_cmd::DATA).unwrap();
    s.note_sent(0, relay_cmd::DATA);
    assert!(s.remove_leg(0, 31), "the current leg");
    let mut t = ConfluxSet::new(LIMITS);
    t.add_leg(0u8, &link(0)).unwrap();
    t.add_leg(1u8, &link(0)).unwrap();
    t.received(1, 0, &body(1)).unwrap();
    assert!(t.remove_leg(1, 31), "it held the highest received number");
    assert!(t.remove_leg(0, 31), "the last leg");
}

#[test]
fn sequence_numbers_from_a_link_at_the_top_of_the_range_do_not_overflow() {
    let mut s = ConfluxSet::new(LIMITS);
    let top = Link {
        last_seqno_sent: u64::MAX,
        last_seqno_recv: u64::MAX,
        ..link(ux::HIGH_THROUGHPUT)
    };
    s.add_leg(0u8, &top).unwrap();
    s.add_leg(1u8, &link(ux::HIGH_THROUGHPUT)).unwrap();
    // Its cells are far ahead of anything delivered: queued, then the cap.
    assert_eq!(s.received(0, 0, &body(1)), Ok(Arrival::Queued));
    assert_eq!(s.received(0, 0, &body(2)), Ok(Arrival::Queued));
    assert!(s.switch_received(0, u32::MAX).is_err());
    s.update_leg(0, ready(10));
    s.update_leg(1, ready(20));
    for _ in 0..3 {
        let p = s.plan_send(relay_cmd::DATA).unwrap();
        s.note_sent(p.leg, relay_cmd::DATA);
    }
}

#[test]
fn cfx_enabled_comes_from_the_consensus() {
    let off = |name: &str, default: i32, _min: i32, _max: i32| {
        if name == "cfx_enabled" {
            0
        } else {
            default
        }
    };
    assert!(!CfxParams::from_consensus(off, 1 << 20).enabled);
    let defaults = |_: &str, default: i32, _min: i32, _max: i32| default;
    assert!(CfxParams::from_consensus(defaults, 1 << 20).enabled);
    assert!(CfxParams::default().enabled);
}
