//! The core's circuit padding ([`crate::worker::core::circpad`]): a
//! client negotiates C's relay machines with this hop as its middle and
//! reads the PADDING_NEGOTIATED, RELAY_DROP and STOP cells they send.

use super::*;
use weft_proto::circpad::{
    negotiated_body, COMMAND_START, COMMAND_STOP, PADDING_NEGOTIATE, PADDING_NEGOTIATED,
    RESPONSE_ERR, RESPONSE_OK,
};

const MS: u64 = 1_000_000;

fn negotiate(client: &mut OriginCircuit, command: u8, machine: u8, ctr: u32) -> [u8; BODY_LEN] {
    let c = ctr.to_be_bytes();
    let mut b = [0u8; BODY_LEN];
    let data = [0, command, machine, 0, c[0], c[1], c[2], c[3]];
    client.send(0, PADDING_NEGOTIATE, 0, &data, &mut b);
    b
}

/// What the client reads from worker 0's connection 1: (hop, command,
/// data).
fn read(net: &mut Net, client: &mut OriginCircuit) -> Vec<(usize, u8, Vec<u8>)> {
    read_on(net, 0, client)
}

/// [`read`] from worker `w`'s connection 1.
fn read_on(net: &mut Net, w: usize, client: &mut OriginCircuit) -> Vec<(usize, u8, Vec<u8>)> {
    net.written(w, 1)
        .into_iter()
        .map(|o| {
            let mut b = o.body;
            let (hop, h) = client.on_backward(&mut b).expect("a cell for the client");
            (hop, h.command, relay::data(&b, &h).to_vec())
        })
        .collect()
}

/// Run worker 0's rounds every `step` ns from `from` until `until`,
/// collecting what the client reads.
fn run(
    net: &mut Net,
    client: &mut OriginCircuit,
    from: u64,
    until: u64,
    step: u64,
) -> Vec<(usize, u8, Vec<u8>)> {
    run_on(net, 0, client, from, until, step)
}

/// [`run`] on worker `w`.
fn run_on(
    net: &mut Net,
    w: usize,
    client: &mut OriginCircuit,
    from: u64,
    until: u64,
    step: u64,
) -> Vec<(usize, u8, Vec<u8>)> {
    let mut got = Vec::new();
    let mut t = from;
    while t <= until {
        net.cores[w].begin_round(t);
        net.collect(w);
        got.extend(read_on(net, w, client));
        t += step;
    }
    got
}

#[test]
fn the_intro_machine_pads_toward_the_client_and_stops_itself() {
    let mut net = Net::new(2, 64);
    let (mut client, mut next, circ, relabel) = two_hop(&mut net, 0, 1);
    let t0 = 10_000 * MS;
    net.cores[0].begin_round(t0);
    let mut b = negotiate(&mut client, COMMAND_START, 0, 1);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    let got = read(&mut net, &mut client);
    assert_eq!(
        got,
        vec![(
            0,
            PADDING_NEGOTIATED,
            negotiated_body(COMMAND_START, RESPONSE_OK, 0, 1).to_vec()
        )]
    );
    // Padding is due 1 to 10 ms later.
    let due = net.cores[0].poll_timeout();
    assert!(due >= t0 + MS && due < t0 + 10 * MS, "{due}");
    // A cell from the far end (INTRODUCE_ACK, say) passes and reschedules.
    let mut d = next.data(b"ack");
    net.cell(1, 2, relabel, cmd::RELAY, &mut d);
    net.settle();
    let got = read(&mut net, &mut client);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1), (1, relay_cmd::DATA));
    let got = run(&mut net, &mut client, t0, t0 + 200 * MS, MS / 4);
    let drops = got.iter().filter(|c| c.1 == relay_cmd::DROP).count();
    assert!((7..=9).contains(&drops), "{got:?}");
    assert!(got.iter().all(|c| c.0 == 0));
    assert_eq!(
        got.last().unwrap(),
        &(
            0,
            PADDING_NEGOTIATED,
            negotiated_body(COMMAND_STOP, RESPONSE_OK, 0, 1).to_vec()
        )
    );
    assert_eq!(got.len(), drops + 1);
    let c = net.cores[0].counters.padding;
    assert_eq!(c.circ_started, [1, 0]);
    assert_eq!(c.circ_drops_sent, drops as u64);
    assert_eq!(c.circ_negotiated_sent, 2);
    // The client's STOP for the ended machine is not answered.
    let mut b = negotiate(&mut client, COMMAND_STOP, 0, 1);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert!(read(&mut net, &mut client).is_empty());
    assert_eq!(net.cores[0].poll_timeout(), net.cores[0].next_tick_ns);
}

#[test]
fn the_rend_machine_sends_one_drop_and_answers_the_stop() {
    let mut net = Net::new(1, 64);
    let (mut client, _next, circ, _) = two_hop(&mut net, 0, 0);
    let t0 = 10_000 * MS;
    net.cores[0].begin_round(t0);
    let mut b = negotiate(&mut client, COMMAND_START, 1, 1);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    let mut got = read(&mut net, &mut client);
    got.extend(run(&mut net, &mut client, t0, t0 + 5 * MS, MS / 4));
    assert_eq!(
        got,
        vec![
            (
                0,
                PADDING_NEGOTIATED,
                negotiated_body(COMMAND_START, RESPONSE_OK, 1, 1).to_vec()
            ),
            (0, relay_cmd::DROP, vec![]),
        ]
    );
    let mut b = negotiate(&mut client, COMMAND_STOP, 1, 1);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert_eq!(
        read(&mut net, &mut client),
        vec![(
            0,
            PADDING_NEGOTIATED,
            negotiated_body(COMMAND_STOP, RESPONSE_OK, 1, 1).to_vec()
        )]
    );
    assert_eq!(net.cores[0].counters.padding.circ_started, [0, 1]);
}

#[test]
fn a_bad_negotiate_is_dropped_or_refused_and_the_circuit_lives() {
    let mut net = Net::new(2, 64);
    let (mut client, mut next, circ, relabel) = two_hop(&mut net, 0, 1);
    // Malformed (version 1; too short): dropped, nothing answered.
    let mut b = [0u8; BODY_LEN];
    client.send(0, PADDING_NEGOTIATE, 0, &[1, 2, 0, 0, 0, 0, 0, 1], &mut b);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    let mut b = [0u8; BODY_LEN];
    client.send(0, PADDING_NEGOTIATE, 0, &[0, 7], &mut b);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert!(read(&mut net, &mut client).is_empty());
    // An unknown machine: ERR.
    let mut b = negotiate(&mut client, COMMAND_START, 9, 3);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert_eq!(
        read(&mut net, &mut client),
        vec![(
            0,
            PADDING_NEGOTIATED,
            negotiated_body(COMMAND_START, RESPONSE_ERR, 9, 3).to_vec()
        )]
    );
    let c = net.cores[0].counters.padding;
    assert_eq!(c.circ_negotiate, [0, 0, 0, 1, 0, 2]);
    assert_eq!(c.circ_started, [0, 0]);
    // The circuit still carries cells both ways.
    let mut b = client_data(&mut client, 7);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    let mut d = next.data(b"x");
    net.cell(1, 2, relabel, cmd::RELAY, &mut d);
    net.settle();
    assert_eq!(net.written(1, 2).len(), 1);
    assert_eq!(read(&mut net, &mut client).len(), 1);
    assert_eq!(net.cores[0].counters.protocol_closes, 0);
}

#[test]
fn a_machine_moves_with_its_connection() {
    let mut net = Net::new(3, 16);
    let (mut client, _next, circ, _) = two_hop(&mut net, 0, 1);
    let t0 = 10_000 * MS;
    for c in net.cores.iter_mut() {
        c.begin_round(t0);
    }
    let mut b = negotiate(&mut client, COMMAND_START, 0, 1);
    net.cell(0, 1, circ, cmd::RELAY, &mut b);
    assert_eq!(read(&mut net, &mut client).len(), 1, "PADDING_NEGOTIATED");
    // One DROP on worker 0, then the client's connection moves to 2.
    let mut got = Vec::new();
    let mut t = t0;
    while !got
        .iter()
        .any(|c: &(usize, u8, Vec<u8>)| c.1 == relay_cmd::DROP)
    {
        t += MS / 4;
        net.cores[0].begin_round(t);
        net.collect(0);
        got.extend(read(&mut net, &mut client));
    }
    let moved = net.cores[0].detach(1).expect("detached");
    net.collect(0);
    net.cores[2].attach(1, moved, 0);
    net.collect(2);
    net.settle();
    got.extend(run_on(&mut net, 2, &mut client, t, t + 200 * MS, MS / 4));
    let drops = got.iter().filter(|c| c.1 == relay_cmd::DROP).count();
    assert!((7..=9).contains(&drops), "{got:?}");
    assert_eq!(
        got.last().unwrap(),
        &(
            0,
            PADDING_NEGOTIATED,
            negotiated_body(COMMAND_STOP, RESPONSE_OK, 0, 1).to_vec()
        )
    );
    assert!(net.cores[2].counters.padding.circ_drops_sent > 0);
}
