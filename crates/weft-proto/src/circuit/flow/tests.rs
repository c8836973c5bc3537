//! Tests of the circuit and stream windows, SENDME tags and XON/XOFF.
use super::*;

fn tag(i: u8) -> [u8; TAG_LEN] {
    [i; TAG_LEN]
}

/// Send `n` DATA cells the way the exit does, keeping tags where asked;
/// returns the tags kept.
fn send(f: &mut CircuitFlow, n: usize, next: &mut u8) -> Vec<[u8; TAG_LEN]> {
    let mut kept = Vec::new();
    for _ in 0..n {
        assert!(f.can_package());
        *next = next.wrapping_add(1);
        let t = f.next_data_needs_tag().then(|| tag(*next));
        if let Some(t) = t {
            kept.push(t);
        }
        f.data_sent(t, 0);
    }
    kept
}

#[test]
fn the_hundredth_cell_of_each_increment_is_remembered() {
    // C: no tag at the window's start; the tag of the cell that takes
    // the window from 901 to 900 is the first one expected back.
    let mut f = CircuitFlow::default();
    let mut i = 0;
    let kept = send(&mut f, 1000, &mut i);
    assert_eq!(kept.len(), 10);
    assert_eq!(kept[0], tag(100));
    assert_eq!(kept[9], tag(1000u32 as u8));
    assert!(!f.can_package());
    for t in &kept {
        f.sendme_received(&sendme_v1_body(t), 1, 0, false)
            .map(|_| ())
            .unwrap();
    }
    assert_eq!(f.package_window(), 1000);
}

#[test]
fn a_wrong_or_missing_or_v0_sendme_is_refused() {
    let mut f = CircuitFlow::default();
    let mut i = 0;
    // Nothing sent: no SENDME may come.
    assert_eq!(
        f.sendme_received(&sendme_v1_body(&tag(1)), 0, 0, false)
            .map(|_| ()),
        Err(FlowError::UnexpectedSendme("circuit"))
    );
    let kept = send(&mut f, 200, &mut i);
    assert_eq!(
        f.sendme_received(&sendme_v1_body(&tag(0xEE)), 0, 0, false)
            .map(|_| ()),
        Err(FlowError::TagMismatch)
    );
    // v0 only where the consensus accepts it.
    assert_eq!(
        f.sendme_received(&[], 1, 0, false).map(|_| ()),
        Err(FlowError::BadSendme(0))
    );
    assert_eq!(f.package_window(), 800);
    // Both tags were used up by the refused SENDMEs (as C pops them).
    assert_eq!(
        f.sendme_received(&sendme_v1_body(&kept[0]), 0, 0, false)
            .map(|_| ()),
        Err(FlowError::NoDigest)
    );
    assert_eq!(
        f.sendme_received(&[2, 0, 0], 0, 0, false).map(|_| ()),
        Err(FlowError::BadSendme(2))
    );
    assert_eq!(
        f.sendme_received(&[1, 0, 19, 0, 0], 0, 0, false)
            .map(|_| ()),
        Err(FlowError::BadSendme(1))
    );
    let kept = send(&mut f, 100, &mut i);
    assert_eq!(kept.len(), 1);
    f.sendme_received(&[], 0, 0, false).map(|_| ()).unwrap();
    assert_eq!(f.package_window(), 800);
}

#[test]
fn sendme_v1_body_round_trips() {
    let b = sendme_v1_body(&tag(7));
    assert_eq!(&b[..3], &[1, 0, 20]);
    assert_eq!(parse_sendme(&b), Ok(Some((tag(7), 20))));
    // Trailing bytes are allowed, as trunnel allows them.
    let mut long = b.to_vec();
    long.extend_from_slice(&[0; 10]);
    assert_eq!(parse_sendme(&long), Ok(Some((tag(7), 20))));
    // A CGO tag: 16 bytes, kept zero-padded.
    let c = sendme_v1_cgo_body(&[7; 16]);
    assert_eq!(&c[..3], &[1, 0, 16]);
    assert_eq!(parse_sendme(&c), Ok(Some((cgo_tag_slot(&[7; 16]), 16))));
    // Any other length is refused.
    assert_eq!(
        parse_sendme(&[1, 0, 17, 0, 0]),
        Err(FlowError::BadSendme(1))
    );
}

#[test]
fn a_cgo_hop_takes_only_sixteen_byte_tags() {
    let p = CcParams::default();
    for (cgo, body, ok) in [
        (true, sendme_v1_cgo_body(&[5; 16]).to_vec(), true),
        (
            true,
            sendme_v1_body(&cgo_tag_slot(&[5; 16])).to_vec(),
            false,
        ),
        (false, sendme_v1_cgo_body(&[5; 16]).to_vec(), false),
    ] {
        let mut f = CircuitFlow::with_congestion_control(p);
        if cgo {
            f = f.with_cgo_tags();
        }
        while !f.next_data_needs_tag() {
            f.data_sent(None, 0);
        }
        f.data_sent(Some(cgo_tag_slot(&[5; 16])), 0);
        let r = f.sendme_received(&body, 1, 10, false);
        assert_eq!(r.is_ok(), ok, "cgo {cgo}, body {body:?}: {r:?}");
    }
}

#[test]
fn the_deliver_window_asks_for_a_sendme_every_hundred_cells() {
    let mut f = CircuitFlow::default();
    let due: Vec<usize> = (1..=1000)
        .filter(|_| f.data_received().unwrap())
        .collect::<Vec<_>>();
    // Credited at once, so the window never runs out for a peer that
    // keeps to it.
    assert_eq!(due.len(), 10);
    assert_eq!(f.deliver_window(), 1000);
}

#[test]
fn data_past_the_window_breaks_the_protocol() {
    // A client that ignores our SENDMEs: we send none (as if the
    // deliver window were never credited).
    let mut f = StreamFlow::default();
    for _ in 0..500 {
        f.data_received().unwrap();
    }
    assert_eq!(f.data_received(), Err(FlowError::DeliverWindow("stream")));
    let mut c = CircuitFlow {
        deliver: 0,
        ..CircuitFlow::default()
    };
    assert_eq!(c.data_received(), Err(FlowError::DeliverWindow("circuit")));
}

#[test]
fn stream_windows_follow_c_tor() {
    let mut f = StreamFlow::default();
    assert_eq!(
        f.sendme_received(),
        Err(FlowError::UnexpectedSendme("stream"))
    );
    for _ in 0..500 {
        assert!(f.can_package());
        f.data_sent();
    }
    assert!(!f.can_package());
    f.sendme_received().unwrap();
    assert_eq!(f.package_window(), 50);
    for _ in 0..49 {
        f.data_received().unwrap();
    }
    assert_eq!(f.sendmes_due(), 0);
    f.data_received().unwrap();
    assert_eq!(f.sendmes_due(), 1);
    for _ in 0..120 {
        f.data_received().unwrap();
    }
    assert_eq!(f.sendmes_due(), 2);
}

#[test]
fn with_congestion_control_sendmes_come_every_sendme_inc_cells() {
    let p = CcParams::default();
    let mut f = CircuitFlow::with_congestion_control(p);
    // The deliver side: a SENDME per 31 cells.
    let due = (0..310).filter(|_| f.data_received().unwrap()).count();
    assert_eq!(due, 10);
    // The package side: cwnd 124, a tag on cells 31, 62, 93 and 124
    // (inflight 30, 61, ...), each timed.
    let mut i = 0;
    let kept = send(&mut f, 124, &mut i);
    assert_eq!(kept.len(), 4);
    assert!(!f.can_package());
    for (n, t) in kept.iter().enumerate() {
        let out = f
            .sendme_received(&sendme_v1_body(t), 1, 10_000 + n as u64, false)
            .unwrap();
        assert!(out.is_some());
    }
    // Slow start with no queue: the window grew.
    assert!(f.package_window() > 124, "{}", f.package_window());
    // The digests are still checked.
    let kept = send(&mut f, 31, &mut i);
    assert_eq!(kept.len(), 1);
    assert_eq!(
        f.sendme_received(&sendme_v1_body(&tag(0xEE)), 1, 20_000, false)
            .map(|_| ()),
        Err(FlowError::TagMismatch)
    );
    assert_eq!(
        f.sendme_received(&sendme_v1_body(&tag(0xEE)), 1, 20_000, false)
            .map(|_| ()),
        Err(FlowError::NoDigest)
    );
}

#[test]
fn xon_xoff_replaces_the_stream_windows() {
    let mut f = StreamFlow::with_xon_xoff();
    for _ in 0..2000 {
        f.data_received().unwrap();
        f.data_sent();
    }
    assert_eq!(f.sendmes_due(), 0);
    assert!(f.can_package());
    assert!(f.sendme_received().is_err());
    // XOFF only after the grace period over the limit.
    assert!(!f.decide_xoff(1000, 500, 100));
    assert!(!f.decide_xoff(1000, 500, 100 + XOFF_GRACE_US));
    assert!(f.decide_xoff(1000, 500, 101 + XOFF_GRACE_US));
    assert!(!f.decide_xoff(1000, 500, 200 + XOFF_GRACE_US), "once");
    assert!(!f.decide_xon(10));
    assert!(f.decide_xon(0));
    assert!(!f.decide_xon(0));
    // Back under the limit: the grace period starts again.
    assert!(!f.decide_xoff(10, 500, 1));
    assert!(!f.decide_xoff(1000, 500, 1_000_000));
    // The client's XOFF stops reading until its XON.
    assert!(f.xoff_received());
    assert!(!f.xoff_received());
    assert!(!f.can_package());
    assert!(!f.xon_received(&[1, 0, 0, 0, 0], 0), "bad version ignored");
    assert!(!f.xon_received(&[0, 0], 0), "short ignored");
    assert!(f.xon_received(&XON_BODY, 0));
    assert!(f.can_package());
    assert_eq!(f.read_allowance(0), usize::MAX, "rate 0: no limit");
    // Without congestion control XON/XOFF are ignored.
    let mut w = StreamFlow::default();
    assert!(!w.xoff_received());
    assert!(!w.decide_xoff(1 << 20, 500, 1 << 30));
    assert!(w.can_package());
}

#[test]
fn an_xons_rate_limits_reading_as_c_applies_it() {
    let mut f = StreamFlow::with_xon_xoff();
    assert_eq!(f.read_allowance(0), usize::MAX);
    assert_eq!(f.rate_refill_at(498), None);
    // 100 kbps_ewma: 100,000 bytes a second, a bucket as large, full.
    let t0 = 5_000_000;
    f.xon_received(&[0, 0, 0, 0, 100], t0);
    assert_eq!(f.read_allowance(t0), 100_000);
    f.bytes_read(100_000);
    assert_eq!(f.read_allowance(t0), 0);
    // A cell's worth in 4.98 ms; 10 ms give 1,000 bytes.
    assert_eq!(f.rate_refill_at(498), Some(t0 + 4_980));
    assert_eq!(f.read_allowance(t0 + 10_000), 1_000);
    // Never more than a second's worth.
    assert_eq!(f.read_allowance(t0 + 60_000_000), 100_000);
    // A lower rate keeps at most its own bucket; a rate of 0 or over
    // INT32_MAX bytes lifts the limit.
    f.xon_received(&[0, 0, 0, 0, 10], t0 + 60_000_000);
    assert_eq!(f.read_allowance(t0 + 60_000_000), 10_000);
    f.xon_received(&[0, 0, 0x30, 0, 0], t0 + 61_000_000);
    assert_eq!(
        f.read_allowance(t0 + 61_000_000),
        usize::MAX,
        "3 GB/s > INT32_MAX bytes"
    );
    f.xon_received(&[0, 0, 0, 0, 10], t0);
    f.xon_received(&XON_BODY, t0);
    assert_eq!(f.read_allowance(t0), usize::MAX);
    // Without congestion control an XON is ignored, rate and all.
    let mut w = StreamFlow::default();
    assert!(!w.xon_received(&[0, 0, 0, 0, 1], 0));
    assert_eq!(w.read_allowance(0), usize::MAX);
}
