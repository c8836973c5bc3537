//! The bandwidth self-test, as C Tor's relays do it (selftest.c
//! `router_perform_bandwidth_test`): once the consensus lists us, build a
//! few circuits through two other relays that end at ourselves, and send
//! DROP cells over them. The cells leave through one of our connections and
//! come back in through another, so our bandwidth history sees real traffic
//! in both directions and the descriptor reports a nonzero observed
//! bandwidth; a relay that reports zero gets no Fast flag and no consensus
//! weight, and clients never pick it. [protocol-notes §10.4]
//!
//! The circuit's origin end lives in a worker as a circuit half of its own
//! kind ([`SelfTestCircuit`], driven by the sans-IO
//! [`weft_proto::origin::OriginCircuit`]); the far end is an ordinary keyed
//! half on our inbound connection from the second relay, which drops the
//! cells. This module also holds the controller's choice of relays.

use weft_dir::consensus::{ConsensusSummary, MicrodescKeys, RelayEntry};
use weft_proto::cell::BODY_LEN;
use weft_proto::origin::{HopTarget, OriginCircuit, OriginError};
use weft_proto::relay::{self, relay_cmd};

/// Parallel testing circuits (C Tor `NUM_PARALLEL_TESTING_CIRCS`).
pub const CIRCUITS: usize = 4;
/// DROP cells in all (C Tor: `CIRCWINDOW_START`, 1000, when BandwidthRate
/// allows).
pub const TOTAL_CELLS: u32 = 1000;
/// Close a testing circuit this long after it was launched (ns).
pub const LIFETIME_NS: u64 = 60_000_000_000;

/// What the worker should do after a step of a testing circuit.
#[derive(Debug, PartialEq, Eq)]
pub enum TestStep {
    /// Send this relay cell (RELAY_EARLY) to extend the circuit.
    Extend(Box<[u8; BODY_LEN]>),
    /// The circuit reaches us: send the DROP cells now.
    Built,
    /// Nothing to do.
    Wait,
}

/// The origin end of one testing circuit.
pub struct SelfTestCircuit {
    origin: OriginCircuit,
    rest: Vec<HopTarget>,
    /// DROP cells to send once built.
    pub cells: u32,
    /// When it was launched (worker clock, ns).
    pub started_ns: u64,
    /// Built and its cells queued.
    pub done: bool,
}

impl SelfTestCircuit {
    /// A circuit to `first`, then through `rest` (ending at ourselves).
    /// Returns it and the CREATE2 body for `first`.
    pub fn new(
        first: &HopTarget,
        rest: Vec<HopTarget>,
        cells: u32,
        now_ns: u64,
    ) -> Result<(Self, Vec<u8>), OriginError> {
        let mut origin = OriginCircuit::new();
        let create2 = origin.create2(first)?;
        Ok((
            SelfTestCircuit {
                origin,
                rest,
                cells,
                started_ns: now_ns,
                done: false,
            },
            create2,
        ))
    }

    fn next_step(&mut self) -> Result<TestStep, OriginError> {
        if self.rest.is_empty() {
            return Ok(TestStep::Built);
        }
        let next = self.rest.remove(0);
        let mut cell = Box::new([0u8; BODY_LEN]);
        self.origin.extend2(&next, &mut cell)?;
        Ok(TestStep::Extend(cell))
    }

    /// The first hop answered CREATED2 (body HLEN | HDATA).
    pub fn on_created2(&mut self, body: &[u8]) -> Result<TestStep, OriginError> {
        self.origin.on_created2(body)?;
        self.next_step()
    }

    /// A relay cell came back from the first hop.
    pub fn on_relay(&mut self, body: &mut [u8; BODY_LEN]) -> Result<TestStep, OriginError> {
        let (_, h) = self.origin.on_backward(body)?;
        match h.command {
            relay_cmd::EXTENDED2 => {
                let data = relay::data(body, &h).to_vec();
                self.origin.on_extended2(&data)?;
                self.next_step()
            }
            relay_cmd::DROP => Ok(TestStep::Wait),
            _ => Err(OriginError::Malformed(
                "unexpected relay command on a testing circuit",
            )),
        }
    }

    /// Fill `body` with the next DROP cell for the last hop (ourselves).
    pub fn drop_cell(&mut self, body: &mut [u8; BODY_LEN]) {
        let last = self.origin.len().saturating_sub(1);
        self.origin.send(last, relay_cmd::DROP, 0, &[], body);
    }
}

/// The relays a testing circuit may go through: listed Running and Valid,
/// not us, with an IPv4 ORPort and a microdescriptor.
pub fn usable_relays<'a>(c: &'a ConsensusSummary, me: &[u8; 20]) -> Vec<&'a RelayEntry> {
    c.relays
        .iter()
        .filter(|r| {
            &r.rsa_identity != me
                && r.has_flag("Running")
                && r.has_flag("Valid")
                && r.or_port != 0
                && r.md_digest.is_some()
        })
        .collect()
}

/// Pick two relays for the testing circuits from the consensus: among
/// [`usable_relays`], Fast when possible; a random pair. Returns their
/// entries.
pub fn pick_relays<'a>(
    c: &'a ConsensusSummary,
    me: &[u8; 20],
) -> Option<(&'a RelayEntry, &'a RelayEntry)> {
    let usable = usable_relays(c, me);
    let fast: Vec<&RelayEntry> = usable
        .iter()
        .copied()
        .filter(|r| r.has_flag("Fast"))
        .collect();
    let pool = if fast.len() >= 2 { fast } else { usable };
    if pool.len() < 2 {
        return None;
    }
    let a = rand::random_range(0..pool.len());
    let mut b = rand::random_range(0..pool.len() - 1);
    if b >= a {
        b += 1;
    }
    Some((pool[a], pool[b]))
}

/// The hop description of a consensus entry with its microdescriptor keys.
pub fn hop(r: &RelayEntry, keys: &MicrodescKeys) -> HopTarget {
    HopTarget {
        rsa_id: r.rsa_identity,
        ed_id: Some(keys.ed_id),
        ntor_key: keys.ntor_key,
        addr: std::net::SocketAddrV4::new(r.address, r.or_port).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::cell::cmd;
    use weft_proto::circuit::{self, ForwardAction};

    /// A testing circuit through two keyed halves back to a third: the
    /// EXTEND2 steps come out in order, and the DROP cells are recognized
    /// (and dropped) only by the last hop.
    #[test]
    fn builds_through_two_relays_and_drops_at_the_end() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let keys: Vec<_> = dirs
            .iter()
            .map(|d| weft_proto::fuzzing::test_identity(d.path()).1)
            .collect();
        let hops: Vec<HopTarget> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| HopTarget {
                rsa_id: k.rsa_fp,
                ed_id: Some(k.ed_id),
                ntor_key: k.ntor[0].public.to_bytes(),
                addr: ([127, 0, 0, 1], 9000 + i as u16).into(),
            })
            .collect();
        let (mut t, create2) = SelfTestCircuit::new(&hops[0], hops[1..].to_vec(), 5, 0).unwrap();
        let (created, mut a, _) = circuit::answer_create2(&keys[0], &create2, None).unwrap();
        let TestStep::Extend(mut cell) = t.on_created2(&created).unwrap() else {
            panic!()
        };
        let ForwardAction::Extend(req) =
            a.on_forward(cmd::RELAY_EARLY, &mut cell, &Default::default())
        else {
            panic!()
        };
        assert_eq!(req.rsa_id, hops[1].rsa_id);
        let (c2, mut b, _) = circuit::answer_create2(&keys[1], &req.create2, None).unwrap();
        let mut back = [0u8; BODY_LEN];
        a.extended(&mut back, &c2);
        let TestStep::Extend(mut cell) = t.on_relay(&mut back).unwrap() else {
            panic!()
        };
        assert_eq!(
            a.on_forward(cmd::RELAY_EARLY, &mut cell, &Default::default()),
            ForwardAction::Pass {
                command: cmd::RELAY_EARLY
            }
        );
        let ForwardAction::Extend(req) =
            b.on_forward(cmd::RELAY_EARLY, &mut cell, &Default::default())
        else {
            panic!()
        };
        assert_eq!(
            req.rsa_id, hops[2].rsa_id,
            "the last hop is the relay itself"
        );
        let (c3, mut me, _) = circuit::answer_create2(&keys[2], &req.create2, None).unwrap();
        let mut back = [0u8; BODY_LEN];
        b.extended(&mut back, &c3);
        a.on_backward(&mut back);
        assert_eq!(t.on_relay(&mut back).unwrap(), TestStep::Built);
        for _ in 0..5 {
            let mut d = [0u8; BODY_LEN];
            t.drop_cell(&mut d);
            assert_eq!(
                a.on_forward(cmd::RELAY, &mut d, &Default::default()),
                ForwardAction::Pass {
                    command: cmd::RELAY
                }
            );
            assert_eq!(
                b.on_forward(cmd::RELAY, &mut d, &Default::default()),
                ForwardAction::Pass {
                    command: cmd::RELAY
                }
            );
            assert_eq!(
                me.on_forward(cmd::RELAY, &mut d, &Default::default()),
                ForwardAction::Drop
            );
        }
    }
}
