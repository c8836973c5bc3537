//! The exit's resolver against name servers of the test's own, on
//! loopback addresses (port 53: the only port resolv.conf can name; the
//! tests run as root, as the suite does):
//!
//! * it randomizes the case of the names it asks about
//!   (`ServerDNSRandomizeCase`, the 0x20 hack, on by default as in C
//!   Tor's evdns) and drops an answer whose question does not repeat that
//!   case, as a forged one — the server records the names as they arrive
//!   on the wire;
//! * it catches a server that answers every name (a provider's "search
//!   page", `ServerDNSDetectHijacking`): names that cannot exist are
//!   answered, so that address becomes "not found", and when the test
//!   addresses get it too, DNS is useless and the exit withdraws.

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_relay::resolver::{channel, DnsAnswer, DnsQuery, DnsStatus, ResolverSetup};

/// The servers' addresses (loopback addresses no other test uses).
const ADDR: &str = "127.53.0.2:53";
const HIJACKER: &str = "127.53.0.3:53";
/// What the hijacker answers for every name.
const JUNK: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 80);

/// Serve A queries: the question as it came (or lower-cased, for names
/// under `lower.`), one A record 192.0.2.7. Records every name it saw,
/// as it was on the wire.
fn serve(seen: Arc<Mutex<Vec<String>>>) {
    serve_on(ADDR, seen, Ipv4Addr::new(192, 0, 2, 7));
}

fn serve_on(addr: &str, seen: Arc<Mutex<Vec<String>>>, answer: Ipv4Addr) {
    let sock = UdpSocket::bind(addr).expect("bind a loopback port 53 (the suite runs as root)");
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let q = &buf[..n];
            let Some((name, end)) = question(q) else {
                continue;
            };
            seen.lock().unwrap().push(name.clone());
            let mut r = Vec::new();
            r.extend_from_slice(&q[..2]);
            r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            let mut qs = q[12..end].to_vec();
            if name.to_ascii_lowercase().starts_with("lower.") {
                qs.make_ascii_lowercase();
            }
            r.extend_from_slice(&qs);
            r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            r.extend_from_slice(&answer.octets());
            if q.get(end - 4..end - 2) != Some(&[0, 1]) {
                // Not an A query: NOERROR, no answer.
                r.truncate(end - 12 + 12);
                r[7] = 0;
            }
            let _ = sock.send_to(&r, from);
        }
    });
}

/// The query's name as sent, and where its question section ends.
fn question(q: &[u8]) -> Option<(String, usize)> {
    let (labels, end) = weft_testnet::dns::question(q)?;
    Some((labels.join("."), end))
}

fn resolve(randomize_case: bool, host: &str, dir: &std::path::Path) -> DnsAnswer {
    let conf = dir.join(format!("resolv-{randomize_case}.conf"));
    std::fs::write(
        &conf,
        "nameserver 127.53.0.2\noptions timeout:2 attempts:1\n",
    )
    .unwrap();
    let (resolver, rx) = start(ResolverSetup {
        randomize_case,
        detect_hijacking: false,
        ..ResolverSetup::with_conf(Some(conf))
    });
    assert!(resolver.query(query(host)));
    rx.recv_timeout(Duration::from_secs(30)).expect("an answer")
}

/// A resolver thread with `setup` whose answers come to the receiver.
fn start(setup: ResolverSetup) -> (weft_relay::resolver::Resolver, mpsc::Receiver<DnsAnswer>) {
    let (resolver, requests) = channel();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let (_, usable) = requests
        .spawn(
            setup,
            move |_, a| {
                let _ = tx.lock().unwrap().send(a);
            },
            |_| {},
        )
        .unwrap();
    assert!(usable);
    (resolver, rx)
}

fn query(host: &str) -> DnsQuery {
    DnsQuery {
        worker: 0,
        key: 1,
        tag: 1,
        host: host.into(),
        want_v6: false,
        reverse: None,
    }
}

#[test]
fn names_go_out_in_random_case_and_an_answer_that_loses_it_is_dropped() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    serve(seen.clone());
    let dir = tempfile::tempdir().unwrap();
    let name = "randomized.case.of.a.long.name.weft.test";

    // Off: the name as asked (lower case), and the answer is taken.
    let a = resolve(false, "plain.case.of.a.long.name.weft.test", dir.path());
    assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::new(192, 0, 2, 7)));
    let plain: Vec<String> = seen.lock().unwrap().drain(..).collect();
    assert!(!plain.is_empty());
    assert!(plain
        .iter()
        .all(|n| n == "plain.case.of.a.long.name.weft.test."
            || n == "plain.case.of.a.long.name.weft.test"));

    // On (the default): mixed case on the wire (30 letters: all lower by
    // chance once in a billion), and the answer, which repeats it, taken.
    let a = resolve(true, name, dir.path());
    assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::new(192, 0, 2, 7)));
    let wire: Vec<String> = seen.lock().unwrap().drain(..).collect();
    assert!(!wire.is_empty());
    for n in &wire {
        assert!(n.eq_ignore_ascii_case(name.trim_end_matches('.')), "{n}");
        assert_ne!(n.as_str(), n.to_ascii_lowercase(), "randomized: {n}");
    }
    println!("on the wire: {wire:?}");

    // A server (or a forger) that answers in lower case: dropped, the
    // lookup fails.
    let a = resolve(true, "lower.answers.lose.the.case.weft.test", dir.path());
    assert!(
        a.v4.is_err(),
        "a case-mismatched answer is not taken: {a:?}"
    );
}

#[test]
fn a_server_that_answers_every_name_is_caught_and_the_exit_withdraws() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    serve_on(HIJACKER, seen.clone(), JUNK);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(
        &conf,
        "nameserver 127.53.0.3\noptions timeout:2 attempts:1\n",
    )
    .unwrap();
    let (resolver, requests) = channel();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let (useless_tx, useless_rx) = mpsc::channel();
    let (_, usable) = requests
        .spawn(
            ResolverSetup {
                test_addresses: vec![
                    "one.weft.test".into(),
                    "two.weft.test".into(),
                    "three.weft.test".into(),
                ],
                first_check: Some(Duration::from_millis(200)),
                ..ResolverSetup::with_conf(Some(conf.clone()))
            },
            move |_, a| {
                let _ = tx.lock().unwrap().send(a);
            },
            move |s: DnsStatus| {
                let _ = useless_tx.send(s);
            },
        )
        .unwrap();
    assert!(usable);
    // Before the checks, the junk is taken at its word.
    assert!(resolver.query(query("early.weft.test")));
    let a = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(a.v4.map(|(ip, _)| ip), Ok(JUNK));
    // The checks' bogus names and then the test addresses: DNS is useless.
    let s = useless_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the test addresses redirected: DNS useless");
    assert!(s.broken && !s.usable(), "{s:?}");
    let names: Vec<String> = seen.lock().unwrap().clone();
    let bogus = names
        .iter()
        .filter(|n| {
            let n = n.to_ascii_lowercase();
            n.ends_with(".invalid") || n.ends_with(".com") || n.ends_with(".org")
        })
        .count();
    assert!(bogus >= 12, "the bogus names went out: {names:?}");
    // From now on the junk address is "not found".
    assert!(resolver.query(query("late.weft.test")));
    let a = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(a.v4.is_err(), "a hijacked answer is not found: {a:?}");
    assert!(useless_rx.try_recv().is_err(), "said once");
    // A reload with the same file: nothing changes (C's "No change").
    resolver.reload(Some(conf.clone()), true);
    assert!(useless_rx.recv_timeout(Duration::from_secs(1)).is_err());
    // The operator edits resolv.conf and reloads: what was learned of the
    // old name servers is forgotten and the exit comes back (C's
    // dns_servers_relaunch_checks()); the checks run again at once, and
    // these servers still hijack, so it is withdrawn again.
    std::fs::write(
        &conf,
        "nameserver 127.53.0.3
options timeout:2 attempts:1 ndots:1
",
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&conf)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    resolver.reload(Some(conf.clone()), true);
    let s = useless_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(s.usable(), "back after the changed file: {s:?}");
    let s = useless_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(s.broken, "caught again by the relaunched checks: {s:?}");
}

/// The consensus's `exit_dns_timeout` and `exit_dns_num_attempts` decide
/// how long a lookup waits on a name server that never answers (as C sets
/// them on its resolver, over resolv.conf's `options`): at start C's
/// defaults or the setup's, then whatever a consensus brings.
#[test]
fn a_silent_name_server_fails_a_lookup_in_the_consensus_time() {
    use std::time::Instant;
    use weft_relay::resolver::DnsParams;
    // Takes queries and never answers.
    let silent = UdpSocket::bind("127.53.0.4:53").expect("bind a loopback port 53");
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(
        &conf,
        "nameserver 127.53.0.4\noptions timeout:30 attempts:5\n",
    )
    .unwrap();
    let (resolver, rx) = start(ResolverSetup {
        detect_hijacking: false,
        params: DnsParams {
            timeout: Duration::from_millis(400),
            attempts: 2,
        },
        ..ResolverSetup::with_conf(Some(conf))
    });
    let timed = |host: &str| {
        let t = Instant::now();
        assert!(resolver.query(query(host)));
        let a: DnsAnswer = rx.recv_timeout(Duration::from_secs(60)).expect("an answer");
        assert!(a.v4.is_err(), "{a:?}");
        let e = t.elapsed();
        eprintln!("{host}: failed after {e:?}");
        e
    };
    // 400 ms, two tries (libevent's `attempts:2`, C's default): not
    // resolv.conf's 30 s × 5.
    let e = timed("silent-one.example");
    assert!(
        e >= Duration::from_millis(700) && e < Duration::from_secs(5),
        "{e:?}"
    );
    // A consensus says 2 s and one try.
    resolver.set_params(DnsParams {
        timeout: Duration::from_millis(2000),
        attempts: 1,
    });
    let e = timed("silent-two.example");
    assert!(
        e >= Duration::from_millis(1900) && e < Duration::from_secs(6),
        "{e:?}"
    );
    drop(silent);
}
