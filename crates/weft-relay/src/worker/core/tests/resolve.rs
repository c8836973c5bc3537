//! RESOLVE at an exit, checked as C Tor checks it before any lookup
//! (`dns_resolve_impl`: invalid names, reverse-lookup names, PTR
//! lookups of public addresses) and a RESOLVE
//! on a live stream ID dropped (`connection_edge_process_relay_cell`).

use super::streams::{circuit, exit_net, read, send};
use super::*;

#[test]
fn resolve_checks_reverse_lookup_names_as_c_tor() {
    // C's dns_resolve_impl() with tor_addr_parse_PTR_name(): a malformed
    // in-addr.arpa name and a reverse lookup of an internal address get
    // a RESOLVED error with no lookup; a public one is a PTR lookup whose
    // answer goes back as a hostname (send_resolved_hostname_cell); a
    // name that merely ends in .arpa is an ordinary lookup.
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    for (i, name) in [
        &b"04.3.2.1.in-addr.arpa\0"[..],
        b"1.0.0.127.in-addr.arpa\0",
        b"1.ip6.arpa\0",
    ]
    .into_iter()
    .enumerate()
    {
        send(
            &mut net,
            1,
            5,
            &mut c,
            relay_cmd::RESOLVE,
            10 + i as u16,
            name,
        );
        let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
        assert!(!destroyed);
        assert_eq!(
            (msgs[0].0, msgs[0].2[0]),
            (relay_cmd::RESOLVED, 0xF1),
            "{i}"
        );
    }
    assert!(
        net.lookups.is_empty(),
        "no lookup for a refused reverse name"
    );
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        20,
        b"Example.ARPA\0",
    );
    assert_eq!(net.lookups.len(), 1);
    assert_eq!(net.lookups[0].host, "example.arpa");
    assert_eq!(net.lookups[0].reverse, None);
    // A public address's reverse name: a PTR lookup, IPv4 only.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        21,
        b"4.3.2.1.IN-ADDR.arpa\0",
    );
    assert_eq!(net.lookups.len(), 2);
    let q = net.lookups.pop().unwrap();
    assert_eq!(q.host, "4.3.2.1.in-addr.arpa");
    assert_eq!(q.reverse, Some([1, 2, 3, 4].into()));
    assert!(!q.want_v6);
    net.cores[0].stream_resolved(crate::resolver::DnsAnswer {
        hostname: Some(("ptr.example".into(), 3456)),
        ..crate::resolver::DnsAnswer::failed(q.key, q.tag, false)
    });
    net.collect(0);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::RESOLVED, 21));
    let mut want = vec![0, 11];
    want.extend_from_slice(b"ptr.example");
    want.extend_from_slice(&3456u32.to_be_bytes());
    assert_eq!(msgs[0].2[..want.len()], want[..]);
    // A failed reverse lookup: the RESOLVED error.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        22,
        b"5.3.2.1.in-addr.arpa\0",
    );
    let q = net.lookups.pop().unwrap();
    net.cores[0].stream_resolved(crate::resolver::DnsAnswer::failed(q.key, q.tag, false));
    net.collect(0);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(
        (msgs[0].0, msgs[0].1, msgs[0].2[0]),
        (relay_cmd::RESOLVED, 22, 0xF1)
    );
}

#[test]
fn resolve_refuses_bad_names_and_live_stream_ids_as_c_tor() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 5);
    // A name with characters C's address_is_invalid_destination() refuses:
    // a RESOLVED error, no lookup.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        4,
        b"bad name;example\0",
    );
    assert!(net.lookups.is_empty(), "no lookup for an invalid name");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(!destroyed);
    assert_eq!((msgs[0].0, msgs[0].2[0]), (relay_cmd::RESOLVED, 0xF1));
    // A RESOLVE on a stream ID that is live (a lookup pending) is dropped:
    // no second lookup, no answer, the circuit stays.
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        6,
        b"a.example\0",
    );
    assert_eq!(net.lookups.len(), 1);
    send(
        &mut net,
        1,
        5,
        &mut c,
        relay_cmd::RESOLVE,
        6,
        b"b.example\0",
    );
    assert_eq!(net.lookups.len(), 1, "the second RESOLVE was dropped");
    let (msgs, destroyed) = read(&mut net, 1, 5, &mut c);
    assert!(msgs.is_empty() && !destroyed);
    // The first lookup's answer still reaches its stream.
    let q = net.lookups.pop().unwrap();
    net.cores[0].stream_resolved(crate::resolver::DnsAnswer {
        key: q.key,
        tag: q.tag,
        v4: Ok(("198.51.100.8".parse().unwrap(), 3400)),
        v6: Err(false),
        hostname: None,
        cached: false,
    });
    net.collect(0);
    let (msgs, _) = read(&mut net, 1, 5, &mut c);
    assert_eq!(msgs[0].0, relay_cmd::RESOLVED);
    assert_eq!(msgs[0].1, 6);
    assert_eq!(msgs[0].2[..6], [4, 4, 198, 51, 100, 8]);
}
