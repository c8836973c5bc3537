//! A lane's ordered line after a burst: a connection's move sends ordered
//! messages per circuit, which queue behind a full ring; once the line is
//! placed, its room goes back at the next once-a-second report (issue 37:
//! a sink link's 12,500 circuits once held 17 MiB there while the bulk
//! load ran). And the circuit count the balancer reads to leave such a
//! link in place.

use super::*;

#[test]
fn a_waiting_line_that_grew_in_a_burst_gives_its_room_back_once_placed() {
    // A ring of 4 slots, full of cells the other worker has not read yet.
    let mut net = Net::new(2, 4);
    let (mut client, _next, circ, relabel) = two_hop(&mut net, 0, 1);
    for i in 0..8u32 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
    }
    let target = net.cores[1]
        .halves
        .reference(net.cores[1].conn(2).unwrap().circuits[&relabel])
        .unwrap();
    for _ in 0..120 {
        net.cores[0].send_ordered(target, RingMsg::SourceDone { to: target });
    }
    assert!(net.cores[0].lanes.lanes[1].ordered.len() > 100);
    assert!(net.cores[0].lanes.lanes[1].ordered.capacity() > 64);
    net.settle();
    assert!(net.cores[0].lanes.lanes[1].ordered.is_empty());
    // Kept while the line may regrow: no allocation where it empties.
    assert!(net.cores[0].lanes.lanes[1].ordered.capacity() > 64);
    // Given back at the once-a-second report.
    let _ = net.cores[0].report();
    assert!(
        net.cores[0].lanes.lanes[1].ordered.capacity() <= 64,
        "kept {} entries' room",
        net.cores[0].lanes.lanes[1].ordered.capacity()
    );
}

#[test]
fn the_balancer_reads_how_many_circuits_a_connection_carries() {
    let mut net = Net::new(2, 64);
    let (_client, _next, _circ, _relabel) = two_hop(&mut net, 0, 1);
    assert_eq!(net.cores[0].circuits_on(1), 1);
    assert_eq!(net.cores[1].circuits_on(2), 1);
    assert_eq!(net.cores[0].circuits_on(99), 0);
    const { assert!(crate::worker::report::MAX_MOVE_HALVES >= 256) };
}

#[test]
fn a_connection_stops_reading_only_while_what_it_reads_could_only_wait_to_cross() {
    // A ring of 4 slots the other worker does not read yet.
    let mut net = Net::new(2, 4);
    let (mut client, _next, circ, _relabel) = two_hop(&mut net, 0, 1);
    assert!(!net.cores[0].read_paused(1), "nothing waits");
    for i in 0..2 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
    }
    assert!(!net.cores[0].read_paused(1), "half the ring is free");
    for i in 2..4 {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
    }
    // Every cell went straight onto the ring, which is now full: the one
    // circuit of the link crosses, so what it read would only wait.
    assert_eq!(net.cores[0].lanes.cells, 0, "all on the ring");
    assert!(net.cores[0].read_paused(1), "held: the ring is full");
    let mut b = client_data(&mut client, 4);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert!(net.cores[0].read_paused(1), "its one circuit waits");
    assert!(!net.cores[0].read_paused(2), "another connection reads on");
    // A second circuit on the link, with nothing waiting: the link reads
    // on, or that circuit's cells would wait behind the first's.
    let mut other = OriginCircuit::new();
    let create2 = other.create2(&target(net.relay, 9001)).unwrap();
    net.cell(0, 1, 0x8000_0003, cmd::CREATE2, &mut pad(&create2));
    assert!(!net.cores[0].read_paused(1), "a circuit with room to send");
    // Every cell crosses once the other worker reads its ring.
    net.settle();
    assert!(!net.cores[0].read_paused(1));
}
