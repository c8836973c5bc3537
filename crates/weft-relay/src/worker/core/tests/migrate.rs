//! Moving connections between workers with cells in flight both ways:
//! one move, a connection moved away and back, both connections of one
//! circuit moving, connections moved while an extend is pending, and the
//! refusal to move a connection whose halves still wait for a marker (what
//! `weft-bench soak` exercises with `TestingMigrateEvery`).

use super::*;
use crate::messages::ControllerMsg;

/// Every cell written toward the next relay (`fwd`) and toward the client
/// (`back`) arrived once and in order: 0..sent_fwd and 0..sent_back.
fn assert_in_order(
    (fwd, back): (Vec<Out>, Vec<Out>),
    relabel: u32,
    next: &mut NextRelay,
    client: &mut OriginCircuit,
    (sent_fwd, sent_back): (u32, u32),
) {
    let got: Vec<u32> = fwd
        .into_iter()
        .map(|o| {
            assert_eq!(o.circ_id, relabel);
            let mut b = o.body;
            let (c, d) = next.read(&mut b).expect("recognized by the next relay");
            assert_eq!(c, relay_cmd::DATA);
            u32::from_be_bytes(d[..4].try_into().unwrap())
        })
        .collect();
    let want: Vec<u32> = (0..sent_fwd).collect();
    assert_eq!(got, want, "forward: once each, in order");
    let got: Vec<u32> = back
        .into_iter()
        .map(|o| {
            let mut b = o.body;
            let (_, h) = client
                .on_backward(&mut b)
                .expect("client decrypts in order");
            u32::from_be_bytes(relay::data(&b, &h)[..4].try_into().unwrap())
        })
        .collect();
    let want: Vec<u32> = (0..sent_back).collect();
    assert_eq!(got, want, "backward: once each, in order");
}

/// One move with cells in flight both ways (steps 1 and 2 of the
/// protocol, then the markers).
#[test]
fn migration_markers_keep_every_cell_once_and_in_order() {
    let mut net = Net::new(3, 16);
    let (mut client, mut next, circ, relabel) = two_hop(&mut net, 0, 1);
    let (mut sent_fwd, mut sent_back) = (0u32, 0u32);
    let mut push =
        |net: &mut Net, client: &mut OriginCircuit, next: &mut NextRelay, w_next: usize| {
            for _ in 0..6 {
                let mut b = client_data(client, sent_fwd);
                sent_fwd += 1;
                net.cell(0, 1, circ, cmd::RELAY, &mut b);
                let mut d = next.data(&sent_back.to_be_bytes());
                sent_back += 1;
                net.cell(w_next, 2, relabel, cmd::RELAY, &mut d);
            }
        };
    let mut fwd = Vec::new();
    let mut back = Vec::new();
    push(&mut net, &mut client, &mut next, 1);
    for c in &mut net.cores {
        c.end_round(|_, _| {});
    }
    // Move the next relay's connection from worker 1 to worker 2 with cells
    // in flight both ways (step 1 and 2 of the protocol).
    assert!(net.cores[1].can_detach(2));
    let moved = net.cores[1].detach(2).expect("detached");
    net.collect(1);
    net.cores[2].attach(2, moved, 1);
    net.collect(2);
    // More cells while the markers travel.
    let mut keep_going = |net: &mut Net, client: &mut OriginCircuit, next: &mut NextRelay| {
        push(net, client, next, 2);
        net.step();
    };
    for _ in 0..4 {
        keep_going(&mut net, &mut client, &mut next);
        fwd.extend(net.written(2, 2));
        back.extend(net.written(0, 1));
    }
    net.settle();
    fwd.extend(net.written(2, 2));
    back.extend(net.written(0, 1));
    assert!(net.written(1, 2).is_empty() || net.cores[1].conn(2).is_none());
    let sent = (sent_fwd, sent_back);
    assert_in_order((fwd, back), relabel, &mut next, &mut client, sent);
    assert_eq!(net.cores[1].counters.migrations, 1);
    assert!(pool_empty(&net));
    // The circuit is counted once, where its keyed half is (worker 0).
    let circuits: Vec<usize> = net.cores.iter().map(|c| c.halves.circuits()).collect();
    assert_eq!(circuits, [1, 0, 0]);
}

#[test]
fn the_circuit_count_follows_a_moved_keyed_half() {
    let mut net = Net::new(3, 16);
    let (_client, _next, _circ, _relabel) = two_hop(&mut net, 0, 1);
    let count =
        |net: &Net| -> Vec<usize> { net.cores.iter().map(|c| c.halves.circuits()).collect() };
    assert_eq!(count(&net), [1, 0, 0], "one circuit, ending on worker 0");
    // Move the client's connection (the keyed half) to worker 2.
    let moved = net.cores[0].detach(1).expect("detached");
    net.collect(0);
    net.cores[2].attach(1, moved, 0);
    net.collect(2);
    net.settle();
    assert_eq!(
        count(&net),
        [0, 0, 1],
        "the forwarder left behind is not a circuit"
    );
}

/// A two-hop circuit (client on worker 0 connection 1, next relay on worker
/// 1 connection 2) and `moves`: (connection, from, to) applied one after
/// the other with cells in flight; every cell must arrive once, in order.
fn moves_keep_order(moves: &[(usize, usize, usize)], steps_between: usize) {
    moves_keep_order_from(1, None, moves, steps_between)
}

/// [`moves_keep_order`] with the next relay's connection on worker `b`,
/// and `during_extend`: (connection, to) moved while the circuit's extend
/// was pending (the keyed half had no peer yet; the relabel half's
/// `Linked` was on its way).
fn moves_keep_order_from(
    b: usize,
    during_extend: Option<(usize, usize)>,
    moves: &[(usize, usize, usize)],
    steps_between: usize,
) {
    moves_keep_order_on(Net::new(3, 16), b, during_extend, moves, steps_between)
}

/// Move connection `conn` from the worker `at` says to `to` at once
/// (detach, then attach with the old worker's messages collected); its
/// connection ID.
fn move_conn(net: &mut Net, at: &mut [usize; 3], conn: usize, to: usize) -> u64 {
    let from = at[conn];
    assert!(
        net.cores[from].can_detach(conn),
        "can detach {conn} from {from}"
    );
    let moved = net.cores[from].detach(conn).expect("detached");
    let id = moved.id;
    net.collect(from);
    net.cores[to].attach(conn, moved, from as u16);
    net.collect(to);
    at[conn] = to;
    id
}

/// Take the new worker's report that the move of connection `id` is over
/// out of the controller's messages (true if it was there).
pub(super) fn migration_done(net: &mut Net, id: u64) -> bool {
    let before = net.controller.len();
    net.controller.retain(
        |m| !matches!(m, ControllerMsg::MigrationDone { conn_id, moved: true } if *conn_id == id),
    );
    net.controller.len() < before
}

/// [`moves_keep_order_from`] on `net` (its number of workers and ring
/// size). A stalled connection is not read, as in the driver.
fn moves_keep_order_on(
    mut net: Net,
    b: usize,
    during_extend: Option<(usize, usize)>,
    moves: &[(usize, usize, usize)],
    steps_between: usize,
) {
    let mut at = [0usize, 0, b];
    let mut last = None;
    let (mut client, mut next, circ, relabel) = two_hop_with(&mut net, 0, b, |net| {
        if let Some((conn, to)) = during_extend {
            last = Some(move_conn(net, &mut at, conn, to));
        }
        (at[1], at[2])
    });
    let (mut sent_fwd, mut sent_back) = (0u32, 0u32);
    let (mut fwd, mut back) = (Vec::new(), Vec::new());
    let mut push =
        |net: &mut Net, at: &[usize; 3], client: &mut OriginCircuit, next: &mut NextRelay| {
            for _ in 0..4 {
                let mut b = client_data(client, sent_fwd);
                sent_fwd += 1;
                net.cell(at[1], 1, circ, cmd::RELAY, &mut b);
                let mut d = next.data(&sent_back.to_be_bytes());
                sent_back += 1;
                net.cell(at[2], 2, relabel, cmd::RELAY, &mut d);
            }
        };
    let drain = |net: &mut Net, at: &[usize; 3], fwd: &mut Vec<Out>, back: &mut Vec<Out>| {
        for w in 0..net.cores.len() {
            if net.cores[w].conn(2).is_some() || w == at[2] {
                fwd.extend(net.written(w, 2));
            }
            if net.cores[w].conn(1).is_some() || w == at[1] {
                back.extend(net.written(w, 1));
            }
        }
    };
    for &(conn, from, to) in moves {
        push(&mut net, &at, &mut client, &mut next);
        for c in &mut net.cores {
            c.end_round(|_, _| {});
        }
        assert_eq!(
            at[conn], from,
            "test plan: connection {conn} is on {}",
            at[conn]
        );
        drain(&mut net, &at, &mut fwd, &mut back);
        // As the controller: the next move waits until the new worker says
        // the last one is over; a stalled connection waits too (the
        // worker would refuse it).
        for _ in 0..MAX_STEPS {
            if let Some(id) = last {
                if migration_done(&mut net, id) {
                    last = None;
                }
            }
            if last.is_none() && net.cores[from].can_detach(conn) {
                break;
            }
            net.step();
            drain(&mut net, &at, &mut fwd, &mut back);
        }
        assert!(last.is_none(), "the last move is over");
        last = Some(move_conn(&mut net, &mut at, conn, to));
        for _ in 0..steps_between {
            push(&mut net, &at, &mut client, &mut next);
            net.step();
            drain(&mut net, &at, &mut fwd, &mut back);
        }
    }
    push(&mut net, &at, &mut client, &mut next);
    net.settle();
    drain(&mut net, &at, &mut fwd, &mut back);
    let sent = (sent_fwd, sent_back);
    assert_in_order((fwd, back), relabel, &mut next, &mut client, sent);
}

#[test]
fn a_connection_moved_away_and_back_keeps_every_cell_in_order() {
    moves_keep_order(&[(2, 1, 2), (2, 2, 1)], 4);
    moves_keep_order(&[(2, 1, 2), (2, 2, 1), (2, 1, 2)], 4);
}

/// A half keeps one marker to wait for: a connection whose halves still
/// wait for one (its own move, or its peer's) may not move again until it
/// passed.
#[test]
fn a_connection_inside_a_move_may_not_move_again() {
    let mut net = Net::new(3, 16);
    let (mut client, mut next, circ, relabel) = two_hop(&mut net, 0, 1);
    for i in 0..4u32 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
        let mut d = next.data(&i.to_be_bytes());
        net.cell(1, 2, relabel, cmd::RELAY, &mut d);
    }
    let moved = net.cores[1].detach(2).expect("detached");
    net.collect(1);
    net.cores[2].attach(2, moved, 1);
    net.collect(2);
    // A cell from the client side reaches the moved half before the old
    // worker's marker: the half holds it and may not move.
    let mut b = client_data(&mut client, 4);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    for c in &mut net.cores {
        c.end_round(|_, _| {});
    }
    let held = |net: &mut Net| {
        let slot = net.cores[2].conn(2).unwrap().circuits[&relabel];
        let h = net.cores[2].halves.by_slot(slot).unwrap();
        h.move_state.holding() || !h.held.is_empty()
    };
    assert!(
        held(&mut net),
        "the moved half waits for the old worker's marker"
    );
    assert!(!net.cores[2].can_detach(2), "moved again inside a move");
    net.settle();
    assert!(!held(&mut net));
    assert!(
        net.cores[2].can_detach(2),
        "free to move once the markers passed"
    );
}

/// The second move starts after the first one's markers passed (a few
/// rounds).
#[test]
fn both_connections_of_a_circuit_moving_keep_every_cell_in_order() {
    moves_keep_order(&[(2, 1, 2), (1, 0, 1)], 4);
    moves_keep_order(&[(1, 0, 2), (2, 1, 0)], 4);
}

/// A connection that moves while one of its circuits waits for its extend:
/// the new relabel half was made for the old reference. It must learn the
/// new one as after any move, so that later moves of either connection
/// keep every cell in order (the soak's lost stamps).
#[test]
fn a_connection_moved_during_an_extend_keeps_every_cell_in_order() {
    // The client's connection moves; the relabel half on a third worker,
    // on the keyed half's new worker, and on its old worker.
    moves_keep_order_from(1, Some((1, 2)), &[], 4);
    moves_keep_order_from(1, Some((1, 1)), &[], 4);
    moves_keep_order_from(0, Some((1, 1)), &[], 4);
    // Then more moves, as the soak does.
    moves_keep_order_from(1, Some((1, 1)), &[(2, 1, 0)], 4);
    moves_keep_order_from(1, Some((1, 2)), &[(2, 1, 0), (1, 2, 1), (2, 0, 2)], 4);
    moves_keep_order_from(1, Some((1, 1)), &[(2, 1, 2), (1, 1, 0)], 4);
    moves_keep_order_from(0, Some((1, 1)), &[(2, 0, 1), (1, 1, 2), (2, 1, 0)], 4);
}

/// The next relay's connection moves before the keyed half read the
/// relabel half's `Linked`: the move's `PeerMoved` can overtake it (it
/// comes from another worker, or from the keyed half's own).
#[test]
fn a_relabel_half_moved_before_its_link_arrived_keeps_every_cell_in_order() {
    moves_keep_order_from(1, Some((2, 0)), &[], 4);
    moves_keep_order_from(1, Some((2, 2)), &[], 4);
    moves_keep_order_from(1, Some((2, 0)), &[(1, 0, 2), (2, 0, 1)], 4);
}

/// A half on the worker its peer left sends through the forwarder until it
/// switches, then straight to the new reference on the same ring: what the
/// forwarder could not pass on (the ring was full) goes first. Tiny rings
/// keep them full.
#[test]
fn a_peer_on_the_old_worker_keeps_order_behind_a_full_ring() {
    for cap in [1, 2, 3, 5] {
        moves_keep_order_on(Net::new(2, cap), 0, None, &[(2, 0, 1)], 6);
        moves_keep_order_on(Net::new(2, cap), 0, None, &[(2, 0, 1), (1, 0, 1)], 6);
        moves_keep_order_on(Net::new(2, cap), 1, None, &[(2, 1, 0), (2, 0, 1)], 6);
        moves_keep_order_on(Net::new(3, cap), 1, Some((1, 1)), &[(2, 1, 0)], 6);
    }
}

/// Two moves that would overlap on one circuit (the second connection
/// leaving while the first move's markers are still on a one-slot ring)
/// reordered cells when the second started as soon as its own halves were
/// free: the next move now waits for the new worker's report that the
/// last one is over, which comes only when both ends of every circuit are
/// done with its markers.
#[test]
fn moves_of_both_connections_of_a_circuit_do_not_overlap() {
    moves_keep_order_on(Net::new(2, 1), 0, None, &[(2, 0, 1), (1, 0, 1)], 1);
    moves_keep_order_on(Net::new(2, 1), 1, None, &[(2, 1, 0), (1, 0, 1)], 1);
    moves_keep_order_on(
        Net::new(2, 16),
        0,
        None,
        &[(1, 0, 1), (2, 0, 1), (1, 1, 0)],
        1,
    );
}

/// Every sequence of one to three moves of the circuit's two connections
/// on two workers, with rings of 1 to 16 slots and 0 to 4 rounds between
/// a move and the next request, keeps every cell once and in order (the
/// search that found the overlap above; 504 runs).
#[test]
fn every_sequence_of_up_to_three_moves_keeps_order() {
    for len in 1..=3u32 {
        for pick in 0..(1u32 << len) {
            for b in 0..2usize {
                let mut at = [0usize, 0, b];
                let plan: Vec<(usize, usize, usize)> = (0..len)
                    .map(|i| {
                        let conn = 1 + ((pick >> i) & 1) as usize;
                        let from = at[conn];
                        at[conn] = 1 - from;
                        (conn, from, 1 - from)
                    })
                    .collect();
                for cap in [1, 2, 3, 4, 8, 16] {
                    for steps in [0, 1, 4] {
                        moves_keep_order_on(Net::new(2, cap), b, None, &plan, steps);
                    }
                }
            }
        }
    }
}
