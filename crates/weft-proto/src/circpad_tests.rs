//! Tests of the relay-side circuit padding machines and the negotiation
//! cells ([`super`]).

use rand::SeedableRng;

use super::*;

const MS: u64 = 1_000_000;

fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

fn start(machine: u8, ctr: u32) -> [u8; 8] {
    let c = ctr.to_be_bytes();
    [0, COMMAND_START, machine, 0, c[0], c[1], c[2], c[3]]
}

fn stop(machine: u8, ctr: u32) -> [u8; 8] {
    let c = ctr.to_be_bytes();
    [0, COMMAND_STOP, machine, 0, c[0], c[1], c[2], c[3]]
}

#[test]
fn parses_and_rejects_as_trunnel() {
    let ok = parse_negotiate(&start(1, 7)).unwrap();
    assert_eq!(
        ok,
        Negotiate {
            command: COMMAND_START,
            machine_type: 1,
            echo_request: false,
            machine_ctr: 7
        }
    );
    // The rest of the cell (C parses the whole payload) is ignored.
    let mut long = [0xAAu8; 498];
    long[..8].copy_from_slice(&stop(0, 0));
    assert_eq!(parse_negotiate(&long).unwrap().command, COMMAND_STOP);
    assert_eq!(parse_negotiate(&[0, 2, 0]), Err(NegotiateError::Short(3)));
    assert_eq!(parse_negotiate(&[]), Err(NegotiateError::Short(0)));
    let mut b = start(0, 1);
    b[0] = 1;
    assert_eq!(parse_negotiate(&b), Err(NegotiateError::Version(1)));
    let mut b = start(0, 1);
    b[1] = 3;
    assert_eq!(parse_negotiate(&b), Err(NegotiateError::Command(3)));
    let mut b = start(0, 1);
    b[1] = 0;
    assert_eq!(parse_negotiate(&b), Err(NegotiateError::Command(0)));
    let mut b = start(0, 1);
    b[3] = 2;
    assert_eq!(parse_negotiate(&b), Err(NegotiateError::Echo(2)));
    b[3] = 1;
    assert!(parse_negotiate(&b).unwrap().echo_request);
    assert_eq!(
        negotiated_body(COMMAND_STOP, RESPONSE_ERR, 1, 0x01020304),
        [0, 1, 2, 1, 1, 2, 3, 4]
    );
}

#[test]
fn a_malformed_negotiate_changes_nothing_and_is_not_answered() {
    let mut p = CircPadding::default();
    let mut out = Vec::new();
    assert!(p
        .negotiate(
            &[0, 9, 0, 0, 0, 0, 0, 1],
            &CircPadParams::default(),
            &mut out
        )
        .is_err());
    assert!(p
        .negotiate(&[0, 2], &CircPadParams::default(), &mut out)
        .is_err());
    assert!(out.is_empty());
    assert_eq!(p.machine(), None);
    assert_eq!(p.counter(), 0);
}

/// The intro machine: 7 to 9 DROPs (C's uniform 7..10, truncated), each
/// 1 to 10 ms after the last cell sent, then STOP to the client.
#[test]
fn intro_machine_pads_then_negotiates_its_end() {
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let mut r = rng(seed);
        let mut p = CircPadding::default();
        let mut out = Vec::new();
        assert_eq!(
            p.negotiate(&start(0, 1), &CircPadParams::default(), &mut out),
            Ok(NegotiateOutcome::Started(0))
        );
        assert_eq!(
            out,
            vec![PadAction::Negotiated(negotiated_body(
                COMMAND_START,
                RESPONSE_OK,
                0,
                1
            ))]
        );
        assert_eq!(p.machine(), Some((0, State::Start)));
        assert_eq!(p.due_ns(), None);
        out.clear();
        // The PADDING_NEGOTIATED went out: padding starts.
        let mut now = 1000 * MS;
        p.nonpadding_sent(now, &mut r, &mut out);
        assert!(out.is_empty());
        assert_eq!(p.machine(), Some((0, State::Obfuscate)));
        let mut drops = 0;
        // A relayed cell (INTRODUCE_ACK) halfway reschedules.
        let mut relayed = false;
        while let Some(due) = p.due_ns() {
            assert!(due >= now + MS && due < now + 10 * MS, "{due} {now}");
            if drops == 3 && !relayed {
                relayed = true;
                now += MS / 2;
                p.nonpadding_sent(now, &mut r, &mut out);
                assert!(out.is_empty());
                // The old time is stale.
                let mut stale = Vec::new();
                p.fire(due, now, &mut r, &mut stale);
                assert!(stale.is_empty() || p.due_ns() == Some(due));
                continue;
            }
            now = due;
            p.fire(due, now, &mut r, &mut out);
            assert_eq!(out.remove(0), PadAction::Drop);
            drops += 1;
            assert!(drops <= 10);
        }
        assert!((7..=9).contains(&drops), "{drops}");
        lengths.insert(drops);
        assert_eq!(
            out,
            vec![PadAction::Negotiated(negotiated_body(
                COMMAND_STOP,
                RESPONSE_OK,
                0,
                1
            ))]
        );
        assert_eq!(p.machine(), None);
        // The client's STOP afterwards is for an old machine: no answer.
        out.clear();
        assert_eq!(
            p.negotiate(&stop(0, 1), &CircPadParams::default(), &mut out),
            Ok(NegotiateOutcome::StopOld(0))
        );
        assert!(out.is_empty());
    }
    assert_eq!(lengths.len(), 3, "{lengths:?}");
}

/// The rendezvous machine: one DROP within 1 ms of PADDING_NEGOTIATED,
/// then END, the machine kept until the client stops it.
#[test]
fn rend_machine_sends_one_drop_and_waits_in_end() {
    for seed in 0..50 {
        let mut r = rng(seed);
        let mut p = CircPadding::default();
        let mut out = Vec::new();
        p.negotiate(&start(1, 1), &CircPadParams::default(), &mut out)
            .unwrap();
        out.clear();
        let now = 5 * MS;
        p.nonpadding_sent(now, &mut r, &mut out);
        if out.is_empty() {
            let due = p.due_ns().expect("scheduled");
            assert!(due >= now && due < now + MS);
            // A relayed cell does not move it (the event is ignored).
            p.nonpadding_sent(now + 1, &mut r, &mut out);
            assert_eq!(p.due_ns(), Some(due));
            p.fire(due, due, &mut r, &mut out);
        }
        assert_eq!(out, vec![PadAction::Drop]);
        assert_eq!(p.machine(), Some((1, State::End)));
        assert_eq!(p.due_ns(), None);
        out.clear();
        p.nonpadding_sent(now + MS, &mut r, &mut out);
        assert!(out.is_empty());
        assert_eq!(
            p.negotiate(&stop(1, 1), &CircPadParams::default(), &mut out),
            Ok(NegotiateOutcome::Stopped(1))
        );
        assert_eq!(
            out,
            vec![PadAction::Negotiated(negotiated_body(
                COMMAND_STOP,
                RESPONSE_OK,
                1,
                1
            ))]
        );
        assert_eq!(p.machine(), None);
    }
}

#[test]
fn negotiation_answers_as_c() {
    let mut p = CircPadding::default();
    let mut out = Vec::new();
    // Unknown machine: ERR, echoing the client's counter.
    assert_eq!(
        p.negotiate(&start(2, 9), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::Unknown(2))
    );
    assert_eq!(
        out,
        vec![PadAction::Negotiated(negotiated_body(
            COMMAND_START,
            RESPONSE_ERR,
            2,
            9
        ))]
    );
    out.clear();
    // STOP of a machine never started, counter ahead of ours: silence.
    assert_eq!(
        p.negotiate(&stop(0, 5), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::StopUnknown(0))
    );
    assert!(out.is_empty());
    // START; a second START while it runs is answered OK, changes nothing.
    p.negotiate(&start(0, 1), &CircPadParams::default(), &mut out)
        .unwrap();
    out.clear();
    assert_eq!(
        p.negotiate(&start(1, 2), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::SlotBusy(1))
    );
    assert_eq!(
        out,
        vec![PadAction::Negotiated(negotiated_body(
            COMMAND_START,
            RESPONSE_OK,
            1,
            2
        ))]
    );
    assert_eq!(p.machine(), Some((0, State::Start)));
    out.clear();
    // STOP with another machine's counter does not stop it.
    assert_eq!(
        p.negotiate(&stop(0, 7), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::StopUnknown(0))
    );
    assert_eq!(p.machine(), Some((0, State::Start)));
    // STOP of the other machine type does not either.
    assert_eq!(
        p.negotiate(&stop(1, 0), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::StopOld(1))
    );
    assert!(out.is_empty());
    // Counter 0 matches any machine of that type.
    assert_eq!(
        p.negotiate(&stop(0, 0), &CircPadParams::default(), &mut out),
        Ok(NegotiateOutcome::Stopped(0))
    );
    assert_eq!(p.machine(), None);
    // The next machine gets counter 2.
    out.clear();
    p.negotiate(&start(1, 2), &CircPadParams::default(), &mut out)
        .unwrap();
    assert_eq!(p.counter(), 2);
}

#[test]
fn a_stale_timer_sends_nothing() {
    let mut r = rng(1);
    let mut p = CircPadding::default();
    let mut out = Vec::new();
    p.negotiate(&start(0, 1), &CircPadParams::default(), &mut out)
        .unwrap();
    out.clear();
    p.nonpadding_sent(0, &mut r, &mut out);
    let due = p.due_ns().unwrap();
    p.fire(due + 1, due + 1, &mut r, &mut out);
    assert!(out.is_empty());
    assert_eq!(p.due_ns(), Some(due));
    // No machine: every event is a no-op.
    let mut q = CircPadding::default();
    q.nonpadding_sent(0, &mut r, &mut out);
    q.nonpadding_received(0, &mut r, &mut out);
    q.fire(0, 0, &mut r, &mut out);
    assert!(out.is_empty());
}

#[test]
fn consensus_disabled_padding_schedules_nothing() {
    let mut r = rng(3);
    let mut p = CircPadding::default();
    let mut out = Vec::new();
    let off = CircPadParams {
        disabled: true,
        ..Default::default()
    };
    assert_eq!(
        p.negotiate(&start(1, 1), &off, &mut out),
        Ok(NegotiateOutcome::Started(1))
    );
    out.clear();
    p.nonpadding_sent(0, &mut r, &mut out);
    assert!(out.is_empty());
    assert_eq!(p.machine(), Some((1, State::Obfuscate)));
    assert_eq!(p.due_ns(), None);
    let get = |name: &str, d: i32, min: i32, max: i32| match name {
        "circpad_padding_disabled" => 1,
        "circpad_max_circ_queued_cells" => 99_999.clamp(min, max),
        _ => d,
    };
    assert_eq!(
        CircPadParams::from_consensus(&get),
        CircPadParams {
            disabled: true,
            max_queued_cells: 50_000
        }
    );
}
