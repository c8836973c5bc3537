//! The HSDir's streams through the core with a real client circuit and the
//! controller's part played here (weft-dir's check and store, as
//! `controller/hs_dir.rs` runs them): an upload over a circuit from a
//! relay is handed to the controller once its body is complete, its status
//! comes back as C Tor answers (200, or 400 for garbage, a bad signature,
//! an old revision, an oversized body), the store's change reaches the
//! worker's copy and a fetch answers the exact text (404 for an unknown
//! key); over a one-hop circuit both are refused with C's 503s. A refused
//! upload changes nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use weft_dir::hs_cache::http::PostAnswer;
use weft_dir::hs_cache::testing::SyntheticDescriptor;
use weft_dir::hs_cache::{check_descriptor, HsDirCache, HS_DESC_MAX_LEN};
use weft_proto::circuit::flow::DATA_MAX;

use super::streams::{circuit, read, send};
use super::*;

fn hsdir_net() -> Net {
    let mut net = Net::new(1, 64);
    let link = LinkKeys::generate(net.relay, SystemTime::now()).unwrap();
    let ctx = SharedContext::build(net.relay, &link, vec![], &SchedParams::default())
        .unwrap()
        .with_dir_cache(true);
    net.cores[0].set_context(ctx.circuits);
    net
}

/// Open connection `conn` from a client (no relay identity).
fn open_client_conn(net: &mut Net, conn: usize) {
    net.cores[0].handle_event(CoreEvent::ConnOpened {
        idx: conn,
        id: 500 + conn as u64,
        peer_addr: ([127, 0, 0, 1], 7000).into(),
        we_initiated: false,
        peer_rsa: None,
        canonical: false,
        link_version: 5,
        proves_reachable: false,
    });
}

/// The controller's part: check and store each upload the core handed
/// over, answer its stream, send the change to the core.
fn play_controller(net: &mut Net, cache: &mut HsDirCache) -> Vec<PostAnswer> {
    let mut statuses = Vec::new();
    let now = SystemTime::now();
    let unix = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
    for m in std::mem::take(&mut net.controller) {
        let ControllerMsg::HsDescPost {
            stream, tag, body, ..
        } = m
        else {
            continue;
        };
        let result =
            check_descriptor(&body, HS_DESC_MAX_LEN, now).and_then(|d| cache.store(d, unix));
        let answer = match result {
            Ok(update) => {
                net.cores[0].handle_msg(CoreMsg::HsDirUpdate(Arc::new(update)));
                PostAnswer::Stored
            }
            Err(_) => PostAnswer::Refused,
        };
        statuses.push(answer);
        net.cores[0].handle_msg(CoreMsg::HsDescPosted {
            stream,
            tag,
            answer,
        });
    }
    statuses
}

/// Serve the directory streams until none has work (bounded).
fn serve(net: &mut Net) {
    for _ in 0..10_000 {
        net.collect(0);
        if !net.cores[0].streams.has_dir_work() {
            return;
        }
        let now = net.cores[0].now_ns;
        net.cores[0].begin_round(now);
    }
    panic!("the directory streams were not served");
}

/// Send `request` on a new directory stream `sid` of (conn, circ), play
/// the controller, and return the answer's bytes.
fn exchange(
    net: &mut Net,
    cache: &mut HsDirCache,
    conn: usize,
    c: &mut OriginCircuit,
    sid: u16,
    request: &[u8],
) -> String {
    send(net, conn, 1, c, relay_cmd::BEGIN_DIR, sid, &[]);
    for chunk in request.chunks(DATA_MAX) {
        send(net, conn, 1, c, relay_cmd::DATA, sid, chunk);
    }
    net.collect(0);
    play_controller(net, cache);
    let mut bytes = Vec::new();
    for _ in 0..50 {
        serve(net);
        let (msgs, destroyed) = read(net, conn, 1, c);
        assert!(!destroyed);
        let mut ended = false;
        for (cmd, s, d, _) in msgs {
            if s != sid {
                continue;
            }
            match cmd {
                relay_cmd::DATA => bytes.extend_from_slice(&d),
                relay_cmd::END => ended = true,
                _ => {}
            }
        }
        if ended {
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    panic!("stream {sid} did not end");
}

fn post(desc: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        desc.len()
    )
    .into_bytes();
    r.extend_from_slice(desc);
    r
}

fn get(key: &[u8; 32]) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(key);
    format!("GET /tor/hs/3/{b64} HTTP/1.0\r\n\r\n").into_bytes()
}

fn status(answer: &str) -> &str {
    answer.lines().next().unwrap_or("")
}

#[test]
fn uploads_are_stored_and_fetched_and_bad_ones_refused_as_c() {
    let mut net = hsdir_net();
    let mut cache = HsDirCache::default();
    let mut c = circuit(&mut net, 1, 1);
    let now = SystemTime::now();
    let mut s = SyntheticDescriptor::new(1, now);
    s.revision = 10;
    let good = s.encode();

    let a = exchange(&mut net, &mut cache, 1, &mut c, 3, &post(good.as_bytes()));
    assert_eq!(
        status(&a),
        "HTTP/1.0 200 HS descriptor stored successfully."
    );
    let a = exchange(&mut net, &mut cache, 1, &mut c, 5, &get(&s.blinded_key()));
    assert!(a.starts_with("HTTP/1.0 200 OK\r\n"), "{a}");
    assert!(a.contains("Pragma: no-cache\r\n") && !a.contains("Content-Encoding"));
    assert!(a.ends_with(&format!("\r\n\r\n{good}")), "the exact text");
    let other = SyntheticDescriptor::new(2, now).blinded_key();
    let a = exchange(&mut net, &mut cache, 1, &mut c, 7, &get(&other));
    assert_eq!(status(&a), "HTTP/1.0 404 Not found");

    // Bad uploads: each 400, nothing changes.
    let rejected = "HTTP/1.0 400 Invalid HS descriptor. Rejected.";
    let mut older = s.clone();
    older.revision = 9;
    let mut forged = good.clone().into_bytes();
    let at = forged.len() - 10;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let oversize = {
        let mut big = s.clone();
        big.revision = 11;
        big.blob_len = HS_DESC_MAX_LEN;
        big.encode()
    };
    let bad: [(&str, Vec<u8>); 5] = [
        ("garbage", post(b"hello, HSDir\n")),
        ("bad signature", post(&forged)),
        ("same revision", post(good.as_bytes())),
        ("old revision", post(older.encode().as_bytes())),
        ("oversize", post(oversize.as_bytes())),
    ];
    let mut sid = 9;
    for (what, req) in bad {
        let a = exchange(&mut net, &mut cache, 1, &mut c, sid, &req);
        assert_eq!(status(&a), rejected, "{what}");
        sid += 2;
    }
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get(&s.blinded_key()).unwrap().revision, 10);
    let a = exchange(&mut net, &mut cache, 1, &mut c, sid, &get(&s.blinded_key()));
    assert!(a.ends_with(&good), "the store is unchanged");
    // Not a v3 publish URL: 400 without asking the controller.
    sid += 2;
    let url = b"POST /tor/hs/2/publish HTTP/1.0\r\nContent-Length: 1\r\n\r\nx";
    let a = exchange(&mut net, &mut cache, 1, &mut c, sid, url);
    assert_eq!(status(&a), rejected);

    let (counters, _, _) = net.cores[0].streams.report();
    assert_eq!(counters.dir.hs_fetches, [2, 1, 0]);
    // The oversized body was announced too big: refused by the worker.
    assert_eq!(counters.dir.hs_posts_refused, [0, 1, 1]);
}

#[test]
fn a_one_hop_circuit_is_refused_with_503() {
    let mut net = hsdir_net();
    let mut cache = HsDirCache::default();
    open_client_conn(&mut net, 2);
    let mut c = circuit(&mut net, 2, 1);
    let s = SyntheticDescriptor::new(1, SystemTime::now());
    let a = exchange(
        &mut net,
        &mut cache,
        2,
        &mut c,
        3,
        &post(s.encode().as_bytes()),
    );
    assert_eq!(
        status(&a),
        "HTTP/1.0 503 Rejecting single hop HS descriptor post"
    );
    let a = exchange(&mut net, &mut cache, 2, &mut c, 5, &get(&s.blinded_key()));
    assert_eq!(
        status(&a),
        "HTTP/1.0 503 Rejecting single hop HS v3 descriptor request"
    );
    assert!(cache.is_empty());
    let (counters, _, _) = net.cores[0].streams.report();
    assert_eq!(counters.dir.hs_fetches, [0, 0, 1]);
    assert_eq!(counters.dir.hs_posts_refused, [1, 0, 0]);
}
