//! The directory cache's streams through the core with a real client
//! circuit: BEGIN_DIR → CONNECTED, a request in DATA, the answer in DATA
//! cells under the stream and circuit windows (a big answer waits for
//! the client's SENDMEs), END DONE; bad requests (huge heads, POST,
//! absurd URLs) answered as C Tor answers them, nothing else disturbed;
//! BEGIN_DIR refused with NOTDIRECTORY when the relay is not a cache.

use std::sync::Arc;

use weft_dir::cache::{compress, CacheInputs, ConsensusDoc, DirDocuments, Method};
use weft_proto::circuit::flow::sendme_v1_body;
use weft_proto::relay::end_reason;

use super::streams::{circuit, read, send};
use super::*;

/// A one-worker network whose relay is a directory cache (not an exit)
/// holding a microdesc consensus of `consensus_len` bytes and our own
/// descriptor.
fn cache_net(consensus_len: usize) -> Net {
    let mut net = Net::new(1, 64);
    let link = LinkKeys::generate(net.relay, SystemTime::now()).unwrap();
    let ctx = SharedContext::build(net.relay, &link, vec![], &SchedParams::default())
        .unwrap()
        .with_dir_cache(true);
    net.cores[0].set_context(ctx.circuits);
    net.cores[0].set_dir_documents(Arc::new(documents(consensus_len)));
    net
}

fn documents(len: usize) -> DirDocuments {
    let mut text = String::from("network-status-version 3 microdesc\n");
    let mut i = 0u64;
    while text.len() < len {
        // Incompressible enough that the deflate form is big too.
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&format!("r {i:016x}\n"));
    }
    text.truncate(len);
    let mut docs = CacheInputs {
        own: Some((
            include_str!("../../../../../weft-dir/tests/data/ctor-descriptor-test002a.txt").into(),
            include_str!("../../../../../weft-dir/tests/data/ctor-extrainfo-test002a.txt").into(),
        )),
        ..CacheInputs::default()
    }
    .build();
    let now = SystemTime::now();
    docs.consensus[1] = Some(ConsensusDoc {
        valid_after: now - Duration::from_secs(60),
        fresh_until: now + Duration::from_secs(3600),
        valid_until: now + Duration::from_secs(7200),
        signers: vec![],
        sha3_as_signed: [0; 32],
        bodies: vec![
            (Method::Identity, Arc::from(text.as_bytes())),
            (
                Method::Deflate,
                Arc::from(compress(Method::Deflate, text.as_bytes(), true).unwrap()),
            ),
        ],
    });
    docs
}

fn get(url: &str) -> Vec<u8> {
    format!("GET {url} HTTP/1.0\r\nAccept-Encoding: identity\r\n\r\n").into_bytes()
}

/// Serve every directory stream that may send, round after round, as
/// the core does between the driver's polls.
fn serve(net: &mut Net) {
    for _ in 0..100_000 {
        net.collect(0);
        if !net.cores[0].streams.has_dir_work() {
            return;
        }
        let now = net.cores[0].now_ns;
        net.cores[0].begin_round(now);
    }
    panic!("the directory streams were not served");
}

/// The answer the client read on stream `sid` so far: (bytes, ended with
/// END reason).
fn answer(msgs: &[(u8, u16, Vec<u8>, [u8; 20])], sid: u16) -> (Vec<u8>, Option<u8>) {
    let mut bytes = Vec::new();
    let mut end = None;
    for (c, s, d, _) in msgs {
        if *s != sid {
            continue;
        }
        match *c {
            relay_cmd::DATA => bytes.extend_from_slice(d),
            relay_cmd::END => end = d.first().copied(),
            _ => {}
        }
    }
    (bytes, end)
}

#[test]
fn a_big_consensus_flows_under_the_windows_and_ends_done() {
    let len = 700_000;
    let mut net = cache_net(len);
    let mut c = circuit(&mut net, 1, 1);
    send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, 5, &[]);
    let (msgs, _) = read(&mut net, 1, 1, &mut c);
    assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::CONNECTED, 5));
    assert!(msgs[0].2.is_empty(), "CONNECTED for BEGIN_DIR has no body");
    // The request in two DATA cells (the head completes in the second).
    let req = get("/tor/status-vote/current/consensus-microdesc");
    send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 5, &req[..20]);
    serve(&mut net);
    assert!(read(&mut net, 1, 1, &mut c).0.is_empty(), "no answer yet");
    send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 5, &req[20..]);
    let mut got = Vec::new();
    let mut end = None;
    let mut cells = 0usize;
    let (mut stream_sendmes, mut circ_sendmes) = (0usize, 0usize);
    for _ in 0..100 {
        serve(&mut net);
        let (msgs, destroyed) = read(&mut net, 1, 1, &mut c);
        assert!(!destroyed);
        if msgs.is_empty() {
            break;
        }
        let (b, e) = answer(&msgs, 5);
        got.extend_from_slice(&b);
        end = end.or(e);
        let data: Vec<_> = msgs.iter().filter(|m| m.0 == relay_cmd::DATA).collect();
        // What is in flight never exceeds the windows: the SENDMEs sent so
        // far opened them by 50 (stream) and 100 (circuit) cells each.
        let in_flight = cells + data.len();
        assert!(
            in_flight - 50 * stream_sendmes <= 500,
            "stream window overrun"
        );
        assert!(
            in_flight - 100 * circ_sendmes <= 1000,
            "circuit window overrun"
        );
        for m in data {
            cells += 1;
            // The client's SENDMEs: a stream one per 50 cells, a circuit
            // one (v1, tagged) per 100.
            if cells.is_multiple_of(50) {
                send(&mut net, 1, 1, &mut c, relay_cmd::SENDME, 5, &[]);
                stream_sendmes += 1;
            }
            if cells.is_multiple_of(100) {
                send(
                    &mut net,
                    1,
                    1,
                    &mut c,
                    relay_cmd::SENDME,
                    0,
                    &sendme_v1_body(&m.3),
                );
                circ_sendmes += 1;
            }
        }
    }
    assert_eq!(end, Some(end_reason::DONE), "END DONE after the answer");
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    assert!(head.contains("Content-Encoding: identity"));
    assert_eq!(got.len() - head_end, len, "the whole consensus");
    assert!(got[head_end..].starts_with(b"network-status-version 3"));
    assert_eq!(net.cores[0].report().exit.open, 0, "the stream is gone");
    assert!(pool_empty(&net));
    // The directory statistics heard of it: answered OK with its size,
    // then sent whole (C's geoip_start_dirreq, then the download's end).
    let dirreq: Vec<_> = net
        .controller
        .iter()
        .filter_map(|m| match m {
            ControllerMsg::DirRequest {
                id, response, size, ..
            } => Some((*id, Some((*response, *size)))),
            ControllerMsg::DirRequestDone { id } => Some((*id, None)),
            _ => None,
        })
        .collect();
    assert_eq!(dirreq.len(), 2, "{dirreq:?}");
    assert_eq!(
        dirreq[0].1,
        Some((crate::stats::dirreq::NsResponse::Ok, got.len() as u64))
    );
    assert_eq!((dirreq[1].0, dirreq[1].1), (dirreq[0].0, None));
    // The request's bytes were counted for dirreq-read-history.
    assert_eq!(
        net.cores[0].report().exit.dir.request_bytes,
        req.len() as u64
    );
}

#[test]
fn without_sendmes_the_answer_waits() {
    let mut net = cache_net(400_000);
    let mut c = circuit(&mut net, 1, 1);
    send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, 5, &[]);
    let req = get("/tor/status-vote/current/consensus-microdesc");
    send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 5, &req);
    let mut data = 0;
    for _ in 0..10 {
        serve(&mut net);
        let (msgs, _) = read(&mut net, 1, 1, &mut c);
        data += msgs.iter().filter(|m| m.0 == relay_cmd::DATA).count();
    }
    assert!(
        data > 0 && data <= 500,
        "{data} cells: at most a stream window (500) without SENDMEs"
    );
    // Nothing more comes until the client's SENDME, which brings more.
    serve(&mut net);
    assert!(read(&mut net, 1, 1, &mut c).0.is_empty());
    send(&mut net, 1, 1, &mut c, relay_cmd::SENDME, 5, &[]);
    serve(&mut net);
    let (msgs, _) = read(&mut net, 1, 1, &mut c);
    assert!(
        msgs.iter().any(|m| m.0 == relay_cmd::DATA),
        "a SENDME resumes the answer"
    );
}

#[test]
fn bad_requests_get_c_tors_answers_and_nothing_else_is_disturbed() {
    let mut net = cache_net(10_000);
    let mut c = circuit(&mut net, 1, 1);
    let mut other = circuit(&mut net, 2, 2);
    let cases: [(&[u8], &str); 5] = [
        (
            b"POST /tor/ HTTP/1.0\r\n\r\n",
            "HTTP/1.0 400 Nonauthoritative directory",
        ),
        (b"garbage\r\n\r\n", "HTTP/1.0 400 Bad request"),
        (&get("/tor/server/d/ZZZZ+0000"), "HTTP/1.0 404 Not found"),
        (&get("/tor/keys/whatever"), "HTTP/1.0 400 Bad request"),
        (&get("/etc/passwd"), "HTTP/1.0 404 Not found"),
    ];
    for (i, (req, want)) in cases.iter().enumerate() {
        let sid = 10 + i as u16;
        send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, sid, &[]);
        for chunk in req.chunks(400) {
            send(&mut net, 1, 1, &mut c, relay_cmd::DATA, sid, chunk);
        }
        serve(&mut net);
        serve(&mut net);
        let (msgs, destroyed) = read(&mut net, 1, 1, &mut c);
        assert!(!destroyed);
        let (bytes, end) = answer(&msgs, sid);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.starts_with(want),
            "{}: {text}",
            String::from_utf8_lossy(req)
        );
        assert_eq!(end, Some(end_reason::DONE));
    }
    // A head that never ends: closed at C's 50,000 bytes, END MISC.
    send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, 30, &[]);
    let junk = vec![b'a'; 498];
    let mut sent = 0;
    while sent <= 51_000 {
        send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 30, &junk);
        sent += junk.len();
        // The client's stream SENDMEs are not needed: 50 KB < the window.
    }
    serve(&mut net);
    let (msgs, destroyed) = read(&mut net, 1, 1, &mut c);
    assert!(!destroyed, "only the stream closes");
    assert_eq!(answer(&msgs, 30), (Vec::new(), Some(end_reason::MISC)));
    // An answer made for one request counts in MaxMemInQueues until sent
    // (the core serves it when the driver next polls it).
    send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, 31, &[]);
    net.hold_effects = true;
    send(
        &mut net,
        1,
        1,
        &mut c,
        relay_cmd::DATA,
        31,
        &get("/tor/server/all"),
    );
    assert!(net.cores[0].stream_buffered_bytes() > 1000);
    assert_eq!(net.cores[0].stream_oom_candidates(u64::MAX).count(), 1);
    net.hold_effects = false;
    serve(&mut net);
    assert_eq!(net.cores[0].stream_buffered_bytes(), 0);
    let _ = read(&mut net, 1, 1, &mut c);
    // The other circuit and the first one still serve.
    for (conn, circ, client) in [(2, 2, &mut other), (1, 1, &mut c)] {
        send(&mut net, conn, circ, client, relay_cmd::BEGIN_DIR, 40, &[]);
        let req = get("/tor/server/authority");
        send(&mut net, conn, circ, client, relay_cmd::DATA, 40, &req);
        serve(&mut net);
        let (msgs, _) = read(&mut net, conn, circ, client);
        let (bytes, end) = answer(&msgs, 40);
        assert!(bytes.starts_with(b"HTTP/1.0 200 OK"));
        assert!(String::from_utf8_lossy(&bytes).contains("\nrouter "));
        assert_eq!(end, Some(end_reason::DONE));
    }
}

#[test]
fn a_relay_that_is_not_a_cache_answers_notdirectory() {
    let mut net = Net::new(1, 64);
    let mut c = circuit(&mut net, 1, 1);
    send(&mut net, 1, 1, &mut c, relay_cmd::BEGIN_DIR, 5, &[]);
    let (msgs, destroyed) = read(&mut net, 1, 1, &mut c);
    assert!(!destroyed);
    assert_eq!(
        (msgs[0].0, msgs[0].2.clone()),
        (relay_cmd::END, vec![end_reason::NOTDIRECTORY])
    );
    assert_eq!(net.cores[0].report().exit.open, 0);
}
