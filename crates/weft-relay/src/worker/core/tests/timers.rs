//! The core's protocol timers, driven by the clock the tests pass in: a
//! handshake past its deadline, a connection without circuits past its
//! idle time (client and relay), keepalive PADDING after five minutes
//! without a write, connection padding (proposal 251) on an idle
//! client's connection and its PADDING_NEGOTIATE, and when the core asks
//! to be woken (never while it has no connection).

use super::*;
use crate::worker::core::timers::{HANDSHAKE_TIMEOUT_NS, KEEPALIVE_NS};

const S: u64 = 1_000_000_000;

/// Worker 0's core at `now_ns`: a round begins, its effects collected.
fn at(net: &mut Net, now_ns: u64) {
    net.cores[0].begin_round(now_ns);
    net.collect(0);
}

fn open_client(net: &mut Net, idx: usize) {
    open_peer(net, idx, None, false);
}

fn open_peer(net: &mut Net, idx: usize, peer_rsa: Option<[u8; 20]>, canonical: bool) {
    net.cores[0].handle_event(CoreEvent::ConnOpened {
        idx,
        id: 500 + idx as u64,
        peer_addr: ([127, 0, 0, 1], 7000).into(),
        we_initiated: false,
        peer_rsa,
        canonical,
        link_version: 5,
        proves_reachable: false,
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

/// As C's `channelpadding_get_channel_idle_timeout`: a client's and a
/// non-canonical relay's connection without circuits closes after 180 s
/// plus up to 90 s, a canonical relay's after 45 to 75 minutes (the
/// consensus's default `nf_conntimeout_relays`, 3600 s, ±25%), each drawn
/// once per connection; one with a circuit never.
#[test]
fn connections_without_circuits_close_after_their_drawn_idle_time() {
    let mut client_times = std::collections::BTreeSet::new();
    let mut relay_times = std::collections::BTreeSet::new();
    for seed in 0..4u64 {
        let mut net = Net::new(1, 64);
        net.cores[0].reseed(seed);
        at(&mut net, S);
        open_client(&mut net, 1);
        open_peer(&mut net, 2, Some([0xAB; 20]), true);
        open_peer(&mut net, 4, Some([0xAB; 20]), false);
        let _c = streams::circuit(&mut net, 3, 1); // a relay with a circuit
        let mut closed_at = std::collections::BTreeMap::new();
        for t in (1..=80 * 60).step_by(5) {
            at(&mut net, S + t * S);
            for (idx, _) in std::mem::take(&mut net.closed[0]) {
                closed_at.entry(idx).or_insert(t);
                net.cores[0].handle_event(CoreEvent::ConnClosed { idx });
            }
        }
        for idx in [1, 4] {
            let t = closed_at[&idx];
            assert!((180..=275).contains(&t), "conn {idx} closed at {t} s");
            client_times.insert(t);
        }
        let t = closed_at[&2];
        assert!(
            (45 * 60..=75 * 60 + 5).contains(&t),
            "relay closed at {t} s"
        );
        relay_times.insert(t);
        assert!(!closed_at.contains_key(&3), "a connection with a circuit");
    }
    assert!(client_times.len() > 1, "drawn, not fixed: {client_times:?}");
    assert!(relay_times.len() > 1, "drawn, not fixed: {relay_times:?}");
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

/// A configured `KeepalivePeriod` (here one minute) applies instead.
#[test]
fn keepalive_period_is_the_configured_one() {
    let mut net = Net::new(1, 64);
    let link =
        weft_crypto::keys::LinkKeys::generate(net.relay, std::time::SystemTime::now()).unwrap();
    let sched = crate::context::SchedParams {
        keepalive: std::time::Duration::from_secs(60),
        ..Default::default()
    };
    let ctx = crate::context::SharedContext::build(net.relay, &link, vec![], &sched).unwrap();
    net.cores[0].set_context(ctx.circuits);
    at(&mut net, S);
    let _c = streams::circuit(&mut net, 3, 1);
    let _ = net.written(0, 3);
    at(&mut net, 60 * S);
    assert!(net.written(0, 3).is_empty());
    at(&mut net, 62 * S);
    let got: Vec<u8> = net.written(0, 3).into_iter().map(|o| o.command).collect();
    assert_eq!(got, vec![cmd::PADDING]);
}

#[test]
fn the_core_asks_to_be_woken_for_its_next_timer_and_an_idle_one_never() {
    let mut net = Net::new(1, 64);
    at(&mut net, 5 * S);
    assert_eq!(net.cores[0].poll_timeout(), u64::MAX, "no connection");
    open_client(&mut net, 1);
    assert_eq!(net.cores[0].poll_timeout(), 6 * S);
    at(&mut net, 5 * S + 10);
    assert_eq!(net.cores[0].poll_timeout(), 6 * S, "once a second");
    net.cores[0].handle_event(CoreEvent::ConnClosed { idx: 1 });
    net.collect(0);
    assert_eq!(net.cores[0].poll_timeout(), u64::MAX, "closed");
    net.cores[0].handle_event(CoreEvent::ConnStarted { idx: 2 });
    assert_eq!(net.cores[0].poll_timeout(), 6 * S, "a handshake's deadline");
}

/// Two workers with a two-hop circuit from connection 1 of worker 0 (a
/// client's if `client`, else a relay's) that carried a RELAY_EARLY cell
/// after it had its next hop, every connection's output taken. (The
/// extend itself came before the next hop existed; C counts neither.)
fn used_two_hop(client: bool) -> Net {
    let mut net = Net::new(2, 64);
    net.inbound_clients = client;
    let (mut origin, _next, circ, _relabel) = two_hop(&mut net, 0, 1);
    net.cell(
        0,
        1,
        circ,
        cmd::RELAY_EARLY,
        &mut client_data(&mut origin, 0),
    );
    net.settle();
    let _ = net.written(1, 2);
    let _ = net.written(0, 1);
    net
}

/// Proposal 251 on a client's connection that carries a two-hop circuit
/// and then stays idle: PADDING at gaps C draws (1.5 to 9.5 s with the
/// consensus defaults), sent at the drawn time within the second (the
/// core asks to be woken for it); after the client's PADDING_NEGOTIATE
/// STOP, none.
#[test]
fn an_idle_clients_connection_gets_padding_at_cs_gaps_until_it_says_stop() {
    let mut net = used_two_hop(true);
    let step = 50_000_000; // 50 ms
    let pads = |net: &mut Net, from: u64, to: u64| -> Vec<u64> {
        let mut at_ns = Vec::new();
        let mut t = from;
        while t <= to {
            at(net, t);
            assert!(net.cores[0].poll_timeout() <= t + S);
            for o in net.written(0, 1) {
                assert_eq!(o.command, cmd::PADDING);
                at_ns.push(t);
            }
            t += step;
        }
        at_ns
    };
    let sent = pads(&mut net, S, 61 * S);
    assert!(sent.len() >= 6, "{} PADDING cells in a minute", sent.len());
    let mut last = 0;
    for t in &sent {
        let gap = t - last;
        assert!(
            (1_500_000_000..=9_500_000_000 + step).contains(&gap),
            "gap {gap} ns"
        );
        last = *t;
    }
    assert_eq!(net.cores[0].counters.padding.sent, sent.len() as u64);
    // The client says STOP (ConnectionPadding 0, ReducedConnectionPadding).
    let mut stop = [0u8; BODY_LEN];
    stop[..6].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    net.cell(0, 1, 0, cmd::PADDING_NEGOTIATE, &mut stop);
    assert_eq!(net.cores[0].counters.padding.negotiate, [0, 1, 0]);
    assert!(
        pads(&mut net, 62 * S, 122 * S).is_empty(),
        "padding after STOP"
    );
}

/// A relay's connection (an authenticated peer) is not padded with the
/// consensus defaults (`nf_pad_relays=0`), though it carries circuits.
#[test]
fn a_relays_connection_gets_no_padding() {
    let mut net = used_two_hop(false);
    for s in 1..=30 {
        at(&mut net, s * S);
        assert!(net.written(0, 1).is_empty(), "padding at {s} s");
    }
    assert_eq!(net.cores[0].counters.padding.sent, 0);
}

/// `padding-counts` (C's `rep_hist_padding_count_*`): every cell read and
/// written is counted, PADDING ones too, by whether padding is on for
/// its connection; a client's STOP moves the later ones to "off". The
/// cell path counts per connection; the once-a-second housekeeping moves
/// the counts into the worker's counters.
#[test]
fn padding_counts_follow_the_connections_padding_state() {
    let mut net = used_two_hop(true);
    at(&mut net, S);
    let before = net.cores[0].counters.padding;
    // The handshake's cells of the client's connection (worker 0's
    // only): 4 written, NETINFO read, on link protocol 5 (padding on
    // from NETINFO).
    assert_eq!(before.cells_written[0], 3);
    assert!(before.cells_read[1] >= 2, "{:?}", before.cells_read);
    let mut cell = [0u8; BODY_LEN];
    net.cell(0, 1, 0, cmd::PADDING, &mut cell);
    let mut stop = [0u8; BODY_LEN];
    stop[..6].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    net.cell(0, 1, 0, cmd::PADDING_NEGOTIATE, &mut stop);
    net.cell(0, 1, 0, cmd::PADDING, &mut cell);
    at(&mut net, 2 * S);
    let p = net.cores[0].counters.padding;
    assert_eq!(p.pad_read, [1, 1]);
    // Read on: the first PADDING and the STOP; off: the second PADDING.
    assert_eq!(p.cells_read[1] - before.cells_read[1], 2);
    assert_eq!(p.cells_read[0] - before.cells_read[0], 1);
    // Keepalive PADDING five minutes later, written with padding off.
    at(&mut net, KEEPALIVE_NS + 2 * S);
    let out = net.written(0, 1);
    assert_eq!(out.len(), 1);
    at(&mut net, KEEPALIVE_NS + 3 * S);
    let p2 = net.cores[0].counters.padding;
    assert_eq!(p2.pad_written, [1, 0]);
    assert_eq!(p2.cells_written[0] - p.cells_written[0], 1);
    let counts = p2.cell_counts(7);
    assert_eq!(counts.read_pad, 2);
    assert_eq!(counts.enabled_read_pad, 1);
    assert_eq!(counts.written, p2.cells_written[0] + p2.cells_written[1]);
    assert_eq!(counts.read_drop, 7);
    // A connection that closes gives its last counts first.
    let mut cell = [0u8; BODY_LEN];
    net.cell(0, 1, 0, cmd::PADDING, &mut cell);
    net.cores[0].handle_event(CoreEvent::ConnClosed { idx: 1 });
    assert_eq!(
        net.cores[0].counters.padding.cells_read[0] - p2.cells_read[0],
        1
    );
}

/// The core's once-a-second tick says so (`Effect::Tick`), once per
/// second however many rounds run, and its next one is what the core asks
/// to be woken for: the driver's report rides on it, so an idle worker
/// wakes once a second, not once for the tick and again for the report
/// (issue 53).
#[test]
fn the_once_a_second_tick_is_one_effect_a_second_and_its_own_wake_up() {
    let mut net = Net::new(1, 64);
    open_client(&mut net, 3);
    let mut ticks = Vec::new();
    for ms in [1000u64, 1001, 1300, 1999, 2000, 2500, 2999, 3000, 3001] {
        let now = ms * S / 1000;
        net.cores[0].begin_round(now);
        while let Some(e) = net.cores[0].poll_effect() {
            if matches!(e, Effect::Tick) {
                ticks.push(ms);
            }
        }
    }
    assert_eq!(ticks, vec![1000, 2000, 3000]);
    assert!(net.cores[0].poll_timeout() <= 4 * S);
}
