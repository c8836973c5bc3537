//! The core's protocol timers, driven by the clock the tests pass in: a
//! handshake past its deadline, a connection without circuits past its
//! idle time (client and relay), keepalive PADDING after five minutes
//! without a write, and when the core asks to be woken.

use super::*;
use crate::worker::core::timers::{
    HANDSHAKE_TIMEOUT_NS, IDLE_CLIENT_NS, IDLE_RELAY_NS, KEEPALIVE_NS,
};

const S: u64 = 1_000_000_000;

/// Worker 0's core at `now_ns`: a round begins, its effects collected.
fn at(net: &mut Net, now_ns: u64) {
    net.cores[0].begin_round(now_ns);
    net.collect(0);
}

fn open_client(net: &mut Net, idx: usize) {
    net.cores[0].handle_event(CoreEvent::ConnOpened {
        idx,
        id: 500 + idx as u64,
        peer_addr: ([127, 0, 0, 1], 7000).into(),
        we_initiated: false,
        peer_rsa: None,
    });
}

#[test]
fn a_handshake_past_its_deadline_closes_only_its_connection() {
    let mut net = Net::new(1, 64);
    at(&mut net, S);
    net.cores[0].handle_event(CoreEvent::ConnStarted { idx: 3 });
    net.cores[0].handle_event(CoreEvent::ConnStarted { idx: 4 });
    at(&mut net, 2 * S);
    // Connection 4 finishes its handshake in time.
    open_client(&mut net, 4);
    at(&mut net, S + HANDSHAKE_TIMEOUT_NS - S);
    assert!(net.closed[0].is_empty(), "not yet");
    at(&mut net, S + HANDSHAKE_TIMEOUT_NS);
    assert_eq!(
        net.closed[0],
        vec![(3, "link handshake timed out".to_string())]
    );
    // A closed connection's deadline is gone with it.
    net.cores[0].handle_event(CoreEvent::ConnStarted { idx: 5 });
    net.cores[0].handle_event(CoreEvent::ConnClosed { idx: 5 });
    at(&mut net, 10 * HANDSHAKE_TIMEOUT_NS);
    assert!(net.closed[0].iter().all(|(i, _)| *i != 5));
}

#[test]
fn connections_without_circuits_close_after_their_idle_time() {
    let mut net = Net::new(1, 64);
    at(&mut net, S);
    open_client(&mut net, 1);
    net.open(0, 2, false); // a relay
    let _c = streams::circuit(&mut net, 3, 1); // a relay with a circuit
    at(&mut net, S + IDLE_CLIENT_NS - S);
    assert!(net.closed[0].is_empty());
    at(&mut net, S + IDLE_CLIENT_NS);
    assert_eq!(net.closed[0].len(), 1);
    assert_eq!(net.closed[0][0].0, 1, "the client's connection");
    assert!(net.closed[0][0].1.starts_with("idle for 180s"));
    net.cores[0].handle_event(CoreEvent::ConnClosed { idx: 1 });
    at(&mut net, S + IDLE_RELAY_NS);
    let closed: Vec<usize> = net.closed[0].iter().map(|c| c.0).collect();
    assert_eq!(closed, vec![1, 2], "the relay's after 45 minutes; never 3");
}

#[test]
fn keepalive_padding_goes_out_after_five_minutes_without_a_write() {
    let mut net = Net::new(1, 64);
    at(&mut net, S);
    let _c = streams::circuit(&mut net, 3, 1);
    let cells = |net: &mut Net| -> Vec<u8> {
        net.written(0, 3)
            .into_iter()
            .map(|o| o.command)
            .collect::<Vec<_>>()
    };
    let _ = cells(&mut net);
    at(&mut net, S + KEEPALIVE_NS - S);
    assert!(cells(&mut net).is_empty());
    at(&mut net, 2 * S + KEEPALIVE_NS);
    assert_eq!(cells(&mut net), vec![cmd::PADDING]);
    // Written at that time: the next one is five minutes later.
    at(&mut net, 3 * S + KEEPALIVE_NS);
    assert!(cells(&mut net).is_empty());
}

#[test]
fn the_core_asks_to_be_woken_for_its_next_timer() {
    let mut net = Net::new(1, 64);
    at(&mut net, 5 * S);
    assert_eq!(net.cores[0].poll_timeout(), 6 * S);
    at(&mut net, 5 * S + 10);
    assert_eq!(net.cores[0].poll_timeout(), 6 * S, "once a second");
}
