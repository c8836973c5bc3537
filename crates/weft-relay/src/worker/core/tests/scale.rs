//! Scale (issue 37): with 10,000 idle circuit halves on 200 connections
//! per worker, a round and a relayed cell visit no table whole, and the
//! once-a-second timers and the report visit the connections (as C Tor's
//! housekeeping does), never the halves. Counted by
//! [`crate::worker::core::walks`], not timed.

use super::*;
use crate::worker::core::walks;

const SECOND_NS: u64 = 1_000_000_000;
const IDLE_CONNS: usize = 200;
const CIRCUITS_PER_CONN: usize = 50;

/// Worker `w` gets [`IDLE_CONNS`] client connections (slots from 10),
/// each with [`CIRCUITS_PER_CONN`] one-hop circuits (CREATE_FAST) that
/// then stay idle.
fn idle_circuits(net: &mut Net, w: usize) {
    for idx in 10..10 + IDLE_CONNS {
        net.open(w, idx, false);
        for i in 0..CIRCUITS_PER_CONN {
            let mut body = [0u8; BODY_LEN];
            body[..20].fill(i as u8 + 1);
            let circ = 0x8000_0000 | (i as u32 + 1);
            net.cell(w, idx, circ, cmd::CREATE_FAST, &mut body);
        }
        let answers = net.written(w, idx);
        assert_eq!(answers.len(), CIRCUITS_PER_CONN);
        assert!(answers.iter().all(|o| o.command == cmd::CREATED_FAST));
    }
}

fn round_begins(net: &mut Net, now_ns: u64) {
    for w in 0..net.cores.len() {
        net.cores[w].handle_event(CoreEvent::RoundBegins { now_ns });
        net.collect(w);
    }
}

#[test]
fn rounds_and_cells_walk_no_table_beside_10000_idle_halves() {
    let mut net = Net::new(2, 64);
    let (mut client, mut next, circ, relabel) = two_hop(&mut net, 0, 1);
    idle_circuits(&mut net, 0);
    idle_circuits(&mut net, 1);
    for c in &net.cores {
        assert!(c.halves.len() > IDLE_CONNS * CIRCUITS_PER_CONN);
    }
    let conn_slots: u64 = net.cores.iter().map(|c| c.conns.len() as u64).sum();

    // The once-a-second timers: every connection, no half.
    let t0 = 5 * SECOND_NS;
    walks::take();
    round_begins(&mut net, t0);
    let tick = walks::take();
    assert!(tick <= conn_slots, "the timers visited {tick} entries");

    // Rounds within the second, a cell each way through the busy circuit
    // (across the two workers): nothing walked.
    for round in 1..=300u32 {
        round_begins(&mut net, t0 + u64::from(round) * 1_000_000);
        let mut b = client_data(&mut client, round);
        assert_eq!(
            net.cell(0, 1, circ, cmd::RELAY, &mut b),
            CellVerdict::Continue
        );
        let mut d = next.data(&round.to_be_bytes());
        net.cell(1, 2, relabel, cmd::RELAY, &mut d);
        net.step();
        net.step();
        assert_eq!(net.written(1, 2).len(), 1);
        assert_eq!(net.written(0, 1).len(), 1);
        let walked = walks::take();
        assert_eq!(walked, 0, "round {round} visited {walked} table entries");
    }

    // The once-a-second report: the connections' queues, no half.
    walks::take();
    for c in &mut net.cores {
        let r = c.report();
        assert!(r.halves > (IDLE_CONNS * CIRCUITS_PER_CONN) as u64);
    }
    let report = walks::take();
    assert!(report <= conn_slots, "the report visited {report} entries");
}

/// An exit with 2,000 idle streams on 200 circuits: the busy stream's
/// bytes both ways (its DATA, the SENDMEs it earns, the round's memory
/// report) and the close of one idle circuit with its streams visit no
/// table whole.
#[test]
fn an_exit_with_2000_idle_streams_walks_none_of_them() {
    use super::streams::{circuit, exit_net, open_stream, read, send};
    let mut net = exit_net();
    let mut now = SECOND_NS;
    for conn in 10..30 {
        for circ in 1..=10u32 {
            // A round each: the handshake budget is per round.
            now += 1_000_000;
            round_begins(&mut net, now);
            let mut c = circuit(&mut net, conn, circ);
            for sid in 1..=10u16 {
                open_stream(&mut net, conn, circ, &mut c, sid);
            }
        }
    }
    round_begins(&mut net, now + 1_000_000);
    let mut c = circuit(&mut net, 1, 5);
    let key = open_stream(&mut net, 1, 5, &mut c, 9);
    let t0 = now + SECOND_NS;
    round_begins(&mut net, t0);
    walks::take();
    let reply = [7u8; 498];
    for round in 1..=300u32 {
        round_begins(&mut net, t0 + u64::from(round) * 1_000_000);
        send(
            &mut net,
            1,
            5,
            &mut c,
            relay_cmd::DATA,
            9,
            &round.to_be_bytes(),
        );
        assert_eq!(net.cores[0].take_stream_output(key).unwrap().len(), 4);
        net.cores[0].stream_wrote(key);
        net.cores[0].stream_data_read(key, &reply);
        let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
        assert!(!destroyed);
        assert!(msgs.iter().any(|m| m.0 == relay_cmd::DATA));
        net.cores[0].end_round(|_, _| {});
        net.collect(0);
        let walked = walks::take();
        assert_eq!(walked, 0, "round {round} visited {walked} table entries");
    }
    // One idle circuit closes: its ten streams go, no other is visited.
    let open = net.cores[0].report().exit.open;
    walks::take();
    net.cell(
        0,
        10,
        super::streams::id(3),
        cmd::DESTROY,
        &mut [0u8; BODY_LEN],
    );
    assert_eq!(walks::take(), 0, "closing a circuit walked a table");
    assert_eq!(net.cores[0].report().exit.open, open - 10);
}
