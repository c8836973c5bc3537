//! The core's resource limits, driven directly: the handshake budget per
//! round and the onionskin queue, CREATE refusal for addresses the DoS
//! table marked, the memory limit's closing of circuits by the age of
//! their oldest queued cell (cells waiting to cross to another worker
//! included), and the circuit queue limit on a crossing queue.

use super::*;
use crate::worker::core::limits::{HANDSHAKES_PER_ROUND, MAX_ONION_QUEUE_DELAY_NS};

/// A client connection `idx` on worker `w` from `ip`.
fn client_conn(net: &mut Net, w: usize, idx: usize, ip: [u8; 4]) {
    let addr: SocketAddr = (ip, 40000 + idx as u16).into();
    net.cores[w].add_conn(
        idx,
        100 * w as u64 + idx as u64,
        addr,
        false,
        None,
        crate::worker::core::ConnLink::opened(5, 180 * 1_000_000_000),
    );
}

/// A CREATE2 for circuit `circ` on connection `conn` of worker 0.
fn create2(net: &mut Net, conn: usize, circ: u32) {
    let mut client = OriginCircuit::new();
    let c = client.create2(&target(net.relay, 9001)).unwrap();
    assert_eq!(
        net.cell(0, conn, circ, cmd::CREATE2, &mut pad(&c)),
        CellVerdict::Continue
    );
}

fn commands(out: &[Out]) -> (usize, usize) {
    let created = out.iter().filter(|o| o.command == cmd::CREATED2).count();
    let destroyed = out
        .iter()
        .filter(|o| o.command == cmd::DESTROY && o.body[0] == destroy_reason::RESOURCELIMIT)
        .count();
    (created, destroyed)
}

#[test]
fn create2_beyond_the_round_budget_waits_and_is_refused_when_too_late() {
    let mut net = Net::new(1, 64);
    client_conn(&mut net, 0, 1, [10, 0, 0, 1]);
    net.cores[0].set_now(1_000_000_000);
    net.cores[0].run_pending_creates();
    let n = HANDSHAKES_PER_ROUND + 8;
    for i in 0..n {
        create2(&mut net, 1, 0x8000_0100 + i);
    }
    let (created, destroyed) = commands(&net.written(0, 1));
    assert_eq!((created, destroyed), (HANDSHAKES_PER_ROUND as usize, 0));
    assert_eq!(
        net.cores[0].limit_counters.onionskins_processed[2],
        u64::from(HANDSHAKES_PER_ROUND)
    );
    // The next round answers the ones that waited, oldest first.
    net.cores[0].run_pending_creates();
    let out = net.written(0, 1);
    assert_eq!(commands(&out), (8, 0));
    assert_eq!(out[0].circ_id, 0x8000_0100 + HANDSHAKES_PER_ROUND);
    assert_eq!(net.cores[0].circuit_count(1), n as usize);

    // A flood: what waits longer than MaxOnionQueueDelay is refused, the
    // circuits already built are untouched.
    net.cores[0].run_pending_creates();
    for i in 0..n {
        create2(&mut net, 1, 0x8000_0200 + i);
    }
    let _ = net.written(0, 1);
    net.cores[0].set_now(1_000_000_000 + MAX_ONION_QUEUE_DELAY_NS + 1);
    net.cores[0].run_pending_creates();
    assert_eq!(commands(&net.written(0, 1)), (0, 8));
    assert_eq!(net.cores[0].limit_counters.onionskins_dropped[2], 8);
    assert_eq!(
        net.cores[0].circuit_count(1),
        2 * HANDSHAKES_PER_ROUND as usize + 8
    );
}

/// A connection with a CREATE2 in the handshake queue stays until it is
/// answered: the queue is the worker's, and a move would lose it (the
/// client would wait for a CREATED2 that never comes).
#[test]
fn a_connection_with_a_waiting_create2_does_not_move() {
    let mut net = Net::new(2, 64);
    client_conn(&mut net, 0, 1, [10, 0, 0, 1]);
    for i in 0..=HANDSHAKES_PER_ROUND {
        create2(&mut net, 1, 0x8000_0100 + i);
    }
    let _ = net.written(0, 1);
    assert!(!net.cores[0].can_detach(1), "a CREATE2 waits");
    assert!(net.cores[0].detach(1).is_none());
    net.cores[0].run_pending_creates();
    let (created, _) = commands(&net.written(0, 1));
    assert_eq!(created, 1, "the waiting CREATE2 is answered here");
    assert!(net.cores[0].can_detach(1), "free to move once answered");
}

#[test]
fn a_destroy_for_a_waiting_create2_forgets_it() {
    let mut net = Net::new(1, 64);
    client_conn(&mut net, 0, 1, [10, 0, 0, 1]);
    for i in 0..=HANDSHAKES_PER_ROUND {
        create2(&mut net, 1, 0x8000_0100 + i);
    }
    let waiting = 0x8000_0100 + HANDSHAKES_PER_ROUND;
    net.cell(
        0,
        1,
        waiting,
        cmd::DESTROY,
        &mut pad(&[destroy_reason::REQUESTED]),
    );
    let _ = net.written(0, 1);
    net.cores[0].run_pending_creates();
    assert!(
        net.written(0, 1).is_empty(),
        "no CREATED2 for a destroyed circuit"
    );
    assert_eq!(net.cores[0].circuit_count(1), HANDSHAKES_PER_ROUND as usize);
}

#[test]
fn a_marked_address_gets_resourcelimit_and_other_clients_are_served() {
    let mut net = Net::new(1, 64);
    client_conn(&mut net, 0, 1, [10, 0, 0, 1]);
    client_conn(&mut net, 0, 3, [10, 0, 0, 2]);
    net.cores[0].run_pending_creates();
    net.cores[0].dos_mark("10.0.0.1".parse().unwrap(), 60);
    create2(&mut net, 1, 0x8000_0001);
    create2(&mut net, 3, 0x8000_0001);
    assert_eq!(commands(&net.written(0, 1)), (0, 1));
    assert_eq!(commands(&net.written(0, 3)), (1, 0));
    assert_eq!(net.cores[0].limit_counters.dos_cc_rejected, 1);
    // The mark expires.
    net.cores[0].set_now(61_000_000_000);
    create2(&mut net, 1, 0x8000_0002);
    assert_eq!(commands(&net.written(0, 1)), (1, 0));
}

#[test]
fn the_memory_limit_closes_circuits_whose_oldest_cell_is_old_enough() {
    let mut net = Net::new(2, 64);
    let (mut client, _next, _circ, relabel) = two_hop(&mut net, 0, 1);
    net.cores[0].set_now(1_000_000_000);
    net.cores[1].set_now(1_000_000_000);
    for i in 0..10u32 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, 0x8000_0001, cmd::RELAY, &mut b);
    }
    net.settle();
    // The cells wait on worker 1 toward the next relay (nobody wrote them).
    net.cores[1].set_now(3_000_000_000);
    let c = net.cores[1].oom_candidates();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0, 2_000_000_000, "age of the oldest queued cell");
    assert_eq!(c[0].1, 10 * crate::oom::CELL_COST);
    assert_eq!(net.cores[1].queued_bytes(), 10 * crate::oom::CELL_COST);
    // A cutoff older than its cells spares it.
    assert_eq!(net.cores[1].oom_kill(2_000_000_001), (0, 0));
    assert_eq!(net.cores[1].oom_kill(2_000_000_000).0, 1);
    net.collect(1);
    net.settle();
    // Both sides hear RESOURCELIMIT... toward the next relay, the DESTROY
    // replaces the queued cells; toward the client, DESTROY too.
    let out = net.written(1, 2);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].circ_id, out[0].command, out[0].body[0]),
        (relabel, cmd::DESTROY, destroy_reason::RESOURCELIMIT)
    );
    let out = net.written(0, 1);
    assert!(out.iter().any(|o| o.command == cmd::DESTROY));
    assert!(pool_empty(&net), "every queued cell freed");
    assert_eq!(net.cores[1].limit_counters.oom_circuits, 1);
}

/// Cells waiting to cross to another worker (a full ring) are queued
/// cells like any other: counted in the memory limit, listed among its
/// victims by the age of the oldest, freed when it closes the circuit.
#[test]
fn the_memory_limit_counts_and_closes_circuits_with_cells_waiting_to_cross() {
    // A ring of 4 messages that worker 1 does not read yet.
    let mut net = Net::new(2, 4);
    let (mut client, _next, circ, _relabel) = two_hop(&mut net, 0, 1);
    net.cores[0].set_now(1_000_000_000);
    for i in 0..10u32 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
    }
    let keyed = net.cores[0].conn(1).unwrap().circuits[&circ];
    let waiting = net.cores[0].crossing_len(keyed);
    assert_eq!(waiting, 6, "4 on the ring, the rest in the crossing queue");
    net.cores[0].set_now(3_000_000_000);
    assert_eq!(
        net.cores[0].queued_bytes(),
        waiting as u64 * crate::oom::CELL_COST
    );
    let c = net.cores[0].oom_candidates();
    assert_eq!(c, [(2_000_000_000, waiting as u64 * crate::oom::CELL_COST)]);
    assert_eq!(net.cores[0].oom_kill(2_000_000_000).0, 1);
    assert_eq!(net.cores[0].crossing_len(keyed), 0);
    net.collect(0);
    net.settle();
    let out = net.written(0, 1);
    assert!(out
        .iter()
        .any(|o| o.command == cmd::DESTROY && o.body[0] == destroy_reason::RESOURCELIMIT));
    // Toward the next relay, the DESTROY replaces the cells that had
    // crossed (as C's circuit_clear_cell_queue).
    let out = net.written(1, 2);
    assert_eq!(
        out.iter().map(|o| o.command).collect::<Vec<_>>(),
        [cmd::DESTROY]
    );
    assert!(pool_empty(&net), "every waiting cell freed");
    assert_eq!(net.cores[0].limit_counters.oom_circuits, 1);
}

/// A circuit whose crossing queue reaches the circuit queue limit (C's
/// `circ_max_cell_queue_size`) is closed with RESOURCELIMIT, at both
/// ends, and its waiting cells are freed.
#[test]
fn a_crossing_queue_at_the_circuit_limit_closes_its_circuit() {
    let mut net = Net::new(2, 4);
    let (mut client, _next, circ, _relabel) = two_hop(&mut net, 0, 1);
    let keyed = net.cores[0].conn(1).unwrap().circuits[&circ];
    let max = DEFAULT_MAX_CIRCUIT_QUEUE;
    for i in 0..(max + 4) as u32 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
    }
    assert_eq!(net.cores[0].crossing_len(keyed), max, "at the limit");
    let mut b = client_data(&mut client, 0);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    net.collect(0);
    let out = net.written(0, 1);
    assert!(
        out.iter().any(|o| o.circ_id == circ
            && o.command == cmd::DESTROY
            && o.body[0] == destroy_reason::RESOURCELIMIT),
        "the client hears RESOURCELIMIT"
    );
    net.settle();
    let out = net.written(1, 2);
    assert_eq!(
        out.iter().map(|o| o.command).collect::<Vec<_>>(),
        [cmd::DESTROY]
    );
    assert!(pool_empty(&net), "its waiting cells freed");
}
