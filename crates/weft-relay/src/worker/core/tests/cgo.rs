//! CGO hops (relay cell format V1) through the core: the cross-worker
//! hand-off keeps each direction's cells in the order they are encrypted.

use super::*;

/// A two-hop circuit across workers 0 and 1 with weft's hop running CGO (relay cell format V1), many
/// cells each way behind a small ring: CGO chains every cell's tag to the
/// one before it in its direction, so one cell encrypted out of the
/// order it is sent in, or lost, and the client reads nothing more.
#[test]
fn a_cgo_circuit_across_two_workers_keeps_its_tag_chains_both_ways() {
    let mut net = Net::new(2, 8);
    let (mut client, mut next, circ, relabel) = two_hop_keyed(&mut net, 0, 1, true, |_| (0, 1));
    assert!(client.is_cgo(0) && !client.is_cgo(1));
    assert_eq!(net.cores[0].counters.cgo_created, 1);
    const N: u32 = 300;
    for i in 0..N {
        let mut b = client_data(&mut client, i);
        net.cell(0, 1, circ, cmd::RELAY, &mut b);
        let mut d = next.data(&i.to_be_bytes());
        net.cell(1, 2, relabel, cmd::RELAY, &mut d);
        if i % 7 == 0 {
            net.settle();
        }
    }
    net.settle();
    let fwd = net.written(1, 2);
    assert_eq!(fwd.len(), N as usize);
    for (i, o) in fwd.into_iter().enumerate() {
        let mut b = o.body;
        assert_eq!(
            next.read(&mut b),
            Some((relay_cmd::DATA, (i as u32).to_be_bytes().to_vec()))
        );
    }
    let back = net.written(0, 1);
    assert_eq!(back.len(), N as usize);
    for (i, o) in back.into_iter().enumerate() {
        let mut b = o.body;
        let (hop, h) = client.on_backward(&mut b).unwrap();
        assert_eq!((hop, h.command), (1, relay_cmd::DATA));
        assert_eq!(relay::data(&b, &h), (i as u32).to_be_bytes());
    }
    assert!(pool_empty(&net));
}
