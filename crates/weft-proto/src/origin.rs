//! The client end of a circuit (an *origin circuit*), sans-IO: the ntor
//! handshake with the first hop (CREATE2) and with every further hop
//! (EXTEND2 in RELAY_EARLY → EXTENDED2), the layered crypto (tor1, or CGO
//! with relay cell format V1 for a hop whose ntor-v3 request asked for it,
//! as Arti asks every hop and C its exit), and relay messages to and from
//! any hop (always handed over in the V0 layout). weft-bench's load generator and the tests
//! use it; it never touches a socket or a clock.
//! [tor-spec §5.1, §5.3, §5.5; protocol-notes §4.2, §6.1]

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

use weft_crypto::cgo::CgoClientLayer;
use weft_crypto::ntor::{self, NtorClientState, KEY_MATERIAL_LEN};
use weft_crypto::relay_crypto::Tor1ClientLayer;
use zeroize::Zeroizing;

use crate::cell::{cmd, BODY_LEN};
use crate::circuit::flow;
use crate::relay::{self, relay_cmd, Extend2, RelayHeader};
use crate::relay_v1;

/// One hop's layer at the client.
// tor1 stays inline, as it was before CGO: every relayed cell of a tor1
// circuit reads it, and a box would add a pointer chase to each.
#[allow(clippy::large_enum_variant)]
enum ClientHop {
    Tor1(Tor1ClientLayer),
    /// CGO, with the tag of the last cell this hop sent us.
    Cgo(Box<CgoClientLayer>, [u8; relay_v1::TAG_LEN]),
}

impl ClientHop {
    /// The layer of a hop before the target on a forward cell.
    fn forward(&mut self, command: u8, body: &mut [u8; BODY_LEN]) {
        match self {
            ClientHop::Tor1(l) => l.encrypt_forward(body),
            ClientHop::Cgo(l, _) => l.forward(command, body),
        }
    }
}

/// A relay to build a hop to: what a client knows from the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopTarget {
    /// RSA identity fingerprint.
    pub rsa_id: [u8; 20],
    /// Ed25519 identity, if known (sent in EXTEND2).
    pub ed_id: Option<[u8; 32]>,
    /// Current ntor onion key.
    pub ntor_key: [u8; 32],
    /// The ORPort to reach it at: the first hop's connection goes there, and
    /// an EXTEND2 to it names only this address (an IPv6 one makes an
    /// IPv6-only extend, as C's IPv6 reachability self-test sends).
    pub addr: SocketAddr,
}

impl HopTarget {
    /// The IPv4 and IPv6 link specifiers an EXTEND2 to this relay carries:
    /// only the family of [`HopTarget::addr`].
    pub fn link_addrs(&self) -> (Option<SocketAddrV4>, Option<SocketAddrV6>) {
        match self.addr {
            SocketAddr::V4(a) => (Some(a), None),
            SocketAddr::V6(a) => (None, Some(a)),
        }
    }
}

/// Why an origin-circuit step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// A reply arrived with no handshake in progress.
    #[error("no handshake in progress")]
    NotPending,
    /// A handshake is already in progress.
    #[error("a handshake is already in progress")]
    AlreadyPending,
    /// The circuit has no hop yet.
    #[error("circuit has no hops")]
    NoHops,
    /// The reply did not parse.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// The ntor handshake failed.
    #[error("ntor handshake failed: {0}")]
    Handshake(String),
    /// A backward cell was recognized by no hop.
    #[error("backward cell not recognized by any hop")]
    Unrecognized,
    /// A recognized cell had a bad header.
    #[error("bad relay header: {0}")]
    Header(#[from] relay::RelayMsgError),
}

/// The client side of one circuit: one layer per built hop.
pub struct OriginCircuit {
    hops: Vec<ClientHop>,
    keys: Vec<Zeroizing<[u8; KEY_MATERIAL_LEN]>>,
    nonces: Vec<[u8; ntor::NONCE_LEN]>,
    pending: Option<Pending>,
    /// The ntor-v3 server message of each hop (empty for ntor).
    server_messages: Vec<Vec<u8>>,
}

/// A handshake waiting for its CREATED2.
enum Pending {
    Ntor(NtorClientState),
    NtorV3 {
        state: Box<weft_crypto::ntor_v3::NtorV3ClientState>,
        /// The client message asked for CGO: the hop runs it.
        cgo: bool,
    },
}

impl Default for OriginCircuit {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for OriginCircuit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginCircuit")
            .field("hops", &self.hops.len())
            .field("pending", &self.pending.is_some())
            .finish()
    }
}

/// An ntor-v3 CREATE2 body (HTYPE 3 | HLEN | HDATA) for `t`.
fn ntor_v3_create2(
    t: &HopTarget,
    client_message: &[u8],
) -> Result<(Pending, Vec<u8>), OriginError> {
    let ed = t
        .ed_id
        .ok_or(OriginError::Malformed("ntor-v3 needs an Ed25519 ID"))?;
    let b = x25519_dalek::PublicKey::from(t.ntor_key);
    let (st, onion) = weft_crypto::ntor_v3::client_start(
        &ed,
        &b,
        client_message,
        b"circuit extend",
        weft_crypto::random_array(),
    );
    let mut body = Vec::with_capacity(4 + onion.len());
    body.extend_from_slice(&3u16.to_be_bytes());
    body.extend_from_slice(&(onion.len() as u16).to_be_bytes());
    body.extend_from_slice(&onion);
    let cgo = crate::circuit::extensions::read_client_extensions(client_message, true)
        .is_ok_and(|e| e.cgo);
    Ok((
        Pending::NtorV3 {
            state: Box::new(st),
            cgo,
        },
        body,
    ))
}

fn ntor_create2(target: &HopTarget) -> (NtorClientState, Vec<u8>) {
    let b = x25519_dalek::PublicKey::from(target.ntor_key);
    let (st, onion) = ntor::client_start(&target.rsa_id, &b, weft_crypto::random_array());
    let mut body = Vec::with_capacity(4 + onion.len());
    body.extend_from_slice(&2u16.to_be_bytes());
    body.extend_from_slice(&(onion.len() as u16).to_be_bytes());
    body.extend_from_slice(&onion);
    (st, body)
}

impl OriginCircuit {
    /// A circuit with no hops.
    pub fn new() -> Self {
        OriginCircuit {
            hops: Vec::new(),
            keys: Vec::new(),
            nonces: Vec::new(),
            pending: None,
            server_messages: Vec::new(),
        }
    }

    /// Number of built hops.
    pub fn len(&self) -> usize {
        self.hops.len()
    }

    /// True before the first hop is built.
    pub fn is_empty(&self) -> bool {
        self.hops.is_empty()
    }

    /// The 72 bytes of tor1 key material of hop `i` (Df|Db|Kf|Kb), for tools
    /// that need to seek in a hop's keystream (None for a CGO hop).
    pub fn key_material(&self, i: usize) -> Option<&[u8; KEY_MATERIAL_LEN]> {
        match self.hops.get(i)? {
            ClientHop::Tor1(_) => self.keys.get(i).map(|k| &**k),
            ClientHop::Cgo(..) => None,
        }
    }

    /// True if hop `i` runs CGO (relay cell format V1).
    pub fn is_cgo(&self, i: usize) -> bool {
        matches!(self.hops.get(i), Some(ClientHop::Cgo(..)))
    }

    /// The data of a circuit-level SENDME v1 to hop `i` acknowledging the
    /// last cell it sent us (a 20-byte digest, or a CGO hop's 16-byte tag).
    pub fn circuit_sendme_data(&self, i: usize) -> Vec<u8> {
        match self.hops.get(i) {
            Some(ClientHop::Tor1(l)) => flow::sendme_v1_body(&l.last_backward_digest()).to_vec(),
            Some(ClientHop::Cgo(_, t)) => flow::sendme_v1_cgo_body(t).to_vec(),
            None => Vec::new(),
        }
    }

    /// The circuit nonce KH of hop `i` (an onion service signs its
    /// ESTABLISH_INTRO for the introduction point with it).
    pub fn nonce(&self, i: usize) -> Option<&[u8; ntor::NONCE_LEN]> {
        self.nonces.get(i)
    }

    /// The running digest of the last cell hop `i` sent us (the tag a
    /// SENDME v1 for that cell echoes; a CGO hop's tag zero-padded).
    pub fn last_backward_digest(&self, i: usize) -> Option<[u8; 20]> {
        self.hops.get(i).map(|h| match h {
            ClientHop::Tor1(l) => l.last_backward_digest(),
            ClientHop::Cgo(_, t) => flow::cgo_tag_slot(t),
        })
    }

    /// Start the first hop: the CREATE2 body (ntor) to send.
    pub fn create2(&mut self, first: &HopTarget) -> Result<Vec<u8>, OriginError> {
        if self.pending.is_some() {
            return Err(OriginError::AlreadyPending);
        }
        let (st, body) = ntor_create2(first);
        self.pending = Some(Pending::Ntor(st));
        Ok(body)
    }

    /// Start the first hop with ntor-v3, sending `client_message` (an
    /// extension list, e.g. `[1, 1, 0]` to ask for congestion control):
    /// the CREATE2 body. The relay's answer is [`Self::server_message`].
    pub fn create2_ntor_v3(
        &mut self,
        first: &HopTarget,
        client_message: &[u8],
    ) -> Result<Vec<u8>, OriginError> {
        if self.pending.is_some() {
            return Err(OriginError::AlreadyPending);
        }
        let (st, body) = ntor_v3_create2(first, client_message)?;
        self.pending = Some(st);
        Ok(body)
    }

    /// Extend to `next` with ntor-v3, sending `client_message` (e.g.
    /// `[1, 1, 0]`: congestion control); like [`Self::extend2`]. The new
    /// hop's answer is [`Self::server_message`].
    pub fn extend2_ntor_v3(
        &mut self,
        next: &HopTarget,
        client_message: &[u8],
        body: &mut [u8; BODY_LEN],
    ) -> Result<Vec<u8>, OriginError> {
        self.check_extend()?;
        let (st, create2) = ntor_v3_create2(next, client_message)?;
        Ok(self.send_extend2(next, st, create2, body))
    }

    /// A hop exists to extend from and no handshake is pending.
    fn check_extend(&self) -> Result<(), OriginError> {
        if self.hops.is_empty() {
            return Err(OriginError::NoHops);
        }
        if self.pending.is_some() {
            return Err(OriginError::AlreadyPending);
        }
        Ok(())
    }

    /// Send EXTEND2 naming `next` with `create2` to the last hop (into
    /// `body`); `st` waits for the answer. Returns the CREATE2 body.
    fn send_extend2(
        &mut self,
        next: &HopTarget,
        st: Pending,
        create2: Vec<u8>,
        body: &mut [u8; BODY_LEN],
    ) -> Vec<u8> {
        let (ipv4, ipv6) = next.link_addrs();
        let e = Extend2 {
            ipv4,
            ipv6,
            rsa_id: next.rsa_id,
            ed_id: next.ed_id,
            create2,
        };
        let data = relay::encode_extend2(&e);
        let last = self.hops.len() - 1;
        self.send(last, relay_cmd::EXTEND2, 0, &data, body);
        self.pending = Some(st);
        e.create2
    }

    /// The ntor-v3 server message of hop `i` (empty for an ntor hop).
    pub fn server_message(&self, i: usize) -> Option<&[u8]> {
        self.server_messages.get(i).map(|m| &m[..])
    }

    /// The CREATED2 body for our CREATE2 (HLEN | HDATA): the hop is built.
    pub fn on_created2(&mut self, body: &[u8]) -> Result<(), OriginError> {
        let hlen = body
            .get(..2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
            .ok_or(OriginError::Malformed("CREATED2"))?;
        let hdata = body
            .get(2..2 + hlen)
            .ok_or(OriginError::Malformed("CREATED2"))?;
        self.finish(hdata)
    }

    fn finish(&mut self, hdata: &[u8]) -> Result<(), OriginError> {
        let st = self.pending.take().ok_or(OriginError::NotPending)?;
        let fail = |e: weft_crypto::ntor::HandshakeError| OriginError::Handshake(e.to_string());
        let (km, nonce, msg, cgo) = match st {
            Pending::Ntor(st) => {
                let (km, nonce) = ntor::client_finish_with_nonce(&st, hdata).map_err(fail)?;
                (km, nonce, Vec::new(), None)
            }
            Pending::NtorV3 { state, cgo: false } => {
                let (msg, km, nonce) =
                    weft_crypto::ntor_v3::client_finish_with_nonce(&state, hdata).map_err(fail)?;
                (km, nonce, msg, None)
            }
            Pending::NtorV3 { state, cgo: true } => {
                let (msg, ks) =
                    weft_crypto::ntor_v3::client_finish_keystream(&state, hdata).map_err(fail)?;
                let (cgo_km, nonce) = weft_crypto::ntor_v3::cgo_keys(&ks);
                let mut km = [0u8; KEY_MATERIAL_LEN];
                km.copy_from_slice(&ks[..KEY_MATERIAL_LEN]);
                (km, nonce, msg, Some(cgo_km))
            }
        };
        self.server_messages.push(msg);
        self.nonces.push(nonce);
        self.hops.push(match cgo {
            None => ClientHop::Tor1(Tor1ClientLayer::from_key_material(&km)),
            Some(k) => ClientHop::Cgo(
                Box::new(CgoClientLayer::from_key_material(&k)),
                [0; relay_v1::TAG_LEN],
            ),
        });
        self.keys.push(Zeroizing::new(km));
        Ok(())
    }

    /// Extend to `next`: fills `body` with the encrypted EXTEND2 for the last
    /// hop, to be sent as RELAY_EARLY. Returns the CREATE2 body (HTYPE | HLEN
    /// | HDATA) the last hop will pass on.
    pub fn extend2(
        &mut self,
        next: &HopTarget,
        body: &mut [u8; BODY_LEN],
    ) -> Result<Vec<u8>, OriginError> {
        self.check_extend()?;
        let (st, create2) = ntor_create2(next);
        Ok(self.send_extend2(next, Pending::Ntor(st), create2, body))
    }

    /// The data of an EXTENDED2 message (HLEN | HDATA): the new hop is built.
    pub fn on_extended2(&mut self, data: &[u8]) -> Result<(), OriginError> {
        self.on_created2(data)
    }

    /// Fill `body` with a relay message to hop `hop` (0 = first), in that
    /// hop's format, encrypted with every layer up to it. Returns the
    /// SENDME tag of the cell. The cell goes as RELAY, or RELAY_EARLY if
    /// it is an EXTEND2 (a CGO layer binds the channel command).
    pub fn send(
        &mut self,
        hop: usize,
        command: u8,
        stream_id: u16,
        data: &[u8],
        body: &mut [u8; BODY_LEN],
    ) -> [u8; 20] {
        let channel = if command == relay_cmd::EXTEND2 {
            cmd::RELAY_EARLY
        } else {
            cmd::RELAY
        };
        let hop = hop.min(self.hops.len().saturating_sub(1));
        if self.is_cgo(hop) {
            let data = &data[..data.len().min(relay_v1::data_max(command))];
            let _ = relay_v1::build(body, command, stream_id, data, weft_crypto::random_bytes);
            return self.send_layers(hop, channel, body);
        }
        relay::build(body, command, stream_id, data);
        self.send_layers(hop, channel, body)
    }

    /// Like [`Self::send`] for a relay message already in `body` in the
    /// hop's format (its header as the caller wrote it, e.g. a wrong
    /// length for a test), to go as RELAY.
    pub fn send_prepared(&mut self, hop: usize, body: &mut [u8; BODY_LEN]) -> [u8; 20] {
        self.send_layers(hop, cmd::RELAY, body)
    }

    /// Like [`Self::send_prepared`] for a cell to go with channel command
    /// `channel` (RELAY or RELAY_EARLY).
    pub fn send_layers(&mut self, hop: usize, channel: u8, body: &mut [u8; BODY_LEN]) -> [u8; 20] {
        let hop = hop.min(self.hops.len().saturating_sub(1));
        let Some(layer) = self.hops.get_mut(hop) else {
            return [0; 20];
        };
        let tag = match layer {
            ClientHop::Tor1(l) => l.originate_forward(body),
            ClientHop::Cgo(l, _) => flow::cgo_tag_slot(&l.originate(channel, body)),
        };
        for l in self.hops[..hop].iter_mut().rev() {
            l.forward(channel, body);
        }
        tag
    }

    /// Add every hop's forward layer to `body`, a cell for a hop beyond the
    /// last one this circuit knows (an onion service's end-to-end layer):
    /// no hop of ours recognizes it. Returns nothing to remember.
    pub fn encrypt_beyond(&mut self, body: &mut [u8; BODY_LEN]) {
        for l in self.hops.iter_mut().rev() {
            l.forward(cmd::RELAY, body);
        }
    }

    /// Add the forward layers of the first `hops` hops to `body`, a cell
    /// for the hop after them whose layer the caller adds itself or skips
    /// (a benchmark's load, whose next hop reads it bare).
    pub fn forward_layers(&mut self, hops: usize, channel: u8, body: &mut [u8; BODY_LEN]) {
        let n = hops.min(self.hops.len());
        for l in self.hops[..n].iter_mut().rev() {
            l.forward(channel, body);
        }
    }

    /// Take a RELAY cell from a CGO first hop for a hop beyond it: peel
    /// the first hop's layer if `read`, else only keep its tag chain
    /// (cheap: what a benchmark's load does with the cells it does not
    /// read). Nothing for a tor1 first hop.
    pub fn first_hop_backward(&mut self, body: &mut [u8; BODY_LEN], read: bool) {
        if let Some(ClientHop::Cgo(l, _)) = self.hops.first_mut() {
            if read {
                let _ = l.backward(cmd::RELAY, body);
            } else {
                l.skip_backward(body);
            }
        }
    }

    /// A RELAY cell arrived from the first hop: remove layers until one hop
    /// recognizes it; returns that hop's index and the header (the data is
    /// `relay::data(body, &header)`).
    pub fn on_backward(
        &mut self,
        body: &mut [u8; BODY_LEN],
    ) -> Result<(usize, RelayHeader), OriginError> {
        for (i, l) in self.hops.iter_mut().enumerate() {
            match l {
                ClientHop::Tor1(l) => {
                    if l.decrypt_backward(body) {
                        return Ok((i, relay::parse_header(body)?));
                    }
                }
                ClientHop::Cgo(l, last) => {
                    if let Some(t) = l.backward(cmd::RELAY, body) {
                        *last = t;
                        relay_v1::to_v0_layout(body)?;
                        return Ok((i, relay::parse_header(body)?));
                    }
                }
            }
        }
        Err(OriginError::Unrecognized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::cmd;
    use crate::circuit::{self, ForwardAction, HandshakeKeys};

    fn relay(dir: &std::path::Path, port: u16) -> (HandshakeKeys, HopTarget) {
        let (_, hk, _) = crate::fuzzing::test_identity(dir);
        let t = HopTarget {
            rsa_id: hk.rsa_fp,
            ed_id: Some(hk.ed_id),
            ntor_key: hk.ntor[0].public.to_bytes(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        (hk, t)
    }

    /// A one-hop circuit to `t` (keys `k`) and the keyed half at `t`.
    fn one_hop(k: &HandshakeKeys, t: &HopTarget) -> (OriginCircuit, circuit::KeyedHalf) {
        let mut c = OriginCircuit::new();
        let create = c.create2(t).unwrap();
        let (created, h, _) = circuit::answer_create2(k, &create, None).unwrap();
        c.on_created2(&created).unwrap();
        (c, h)
    }

    /// An EXTEND2 to a relay known by its IPv6 ORPort names only that
    /// address (an IPv6-only extend, as C's IPv6 reachability self-test
    /// sends).
    #[test]
    fn an_ipv6_hop_is_extended_to_by_ipv6_only() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (k1, t1) = relay(d1.path(), 1);
        let (_, mut t2) = relay(d2.path(), 2);
        t2.addr = "[2001:db8::7]:9001".parse().unwrap();
        let (mut c, mut h1) = one_hop(&k1, &t1);
        let mut body = [0u8; BODY_LEN];
        c.extend2(&t2, &mut body).unwrap();
        let ForwardAction::Extend(req) =
            h1.on_forward(cmd::RELAY_EARLY, &mut body, &Default::default())
        else {
            panic!("not an extend");
        };
        assert_eq!(req.ipv4, None);
        assert_eq!(req.ipv6, Some("[2001:db8::7]:9001".parse().unwrap()));
    }

    /// A two-hop circuit against two keyed halves: CREATE2, EXTEND2 through
    /// the first (which passes the CREATE2 on), EXTENDED2 back, then data to
    /// the second hop and back.
    #[test]
    fn builds_two_hops_against_keyed_halves() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (k1, t1) = relay(d1.path(), 1);
        let (k2, t2) = relay(d2.path(), 2);
        let (mut c, mut h1) = one_hop(&k1, &t1);
        assert_eq!(c.len(), 1);

        let mut body = [0u8; BODY_LEN];
        c.extend2(&t2, &mut body).unwrap();
        let ForwardAction::Extend(req) =
            h1.on_forward(cmd::RELAY_EARLY, &mut body, &Default::default())
        else {
            panic!("not an extend");
        };
        assert_eq!((req.rsa_id, req.ed_id), (t2.rsa_id, t2.ed_id));
        assert_eq!((req.ipv4, req.ipv6), t2.link_addrs());
        assert!(req.ipv6.is_none());
        let (created2, mut h2, _) = circuit::answer_create2(&k2, &req.create2, None).unwrap();
        let mut back = [0u8; BODY_LEN];
        h1.extended(&mut back, &created2);
        let (hop, h) = c.on_backward(&mut back).unwrap();
        assert_eq!((hop, h.command), (0, relay_cmd::EXTENDED2));
        c.on_extended2(relay::data(&back, &h)).unwrap();
        assert_eq!(c.len(), 2);

        // Data to hop 2: hop 1 does not recognize it and passes it on.
        let mut body = [0u8; BODY_LEN];
        c.send(1, relay_cmd::DROP, 0, b"hello", &mut body);
        assert_eq!(
            h1.on_forward(cmd::RELAY, &mut body, &Default::default()),
            ForwardAction::Pass {
                command: cmd::RELAY
            }
        );
        assert_eq!(
            h2.on_forward(cmd::RELAY, &mut body, &Default::default()),
            ForwardAction::Drop
        );

        // Hop 2 answers a BEGIN (middle relays refuse) through hop 1.
        let mut body = [0u8; BODY_LEN];
        c.send(1, relay_cmd::BEGIN, 7, b"127.0.0.1:80\0", &mut body);
        assert_eq!(
            h1.on_forward(cmd::RELAY, &mut body, &Default::default()),
            ForwardAction::Pass {
                command: cmd::RELAY
            }
        );
        assert_eq!(
            h2.on_forward(cmd::RELAY, &mut body, &Default::default()),
            ForwardAction::Reply
        );
        h1.on_backward(&mut body);
        let (hop, h) = c.on_backward(&mut body).unwrap();
        assert_eq!((hop, h.command, h.stream_id), (1, relay_cmd::END, 7));

        // A forged backward cell is recognized by nobody.
        let mut junk = [0x5au8; BODY_LEN];
        assert_eq!(c.on_backward(&mut junk), Err(OriginError::Unrecognized));
        let mut late = vec![0u8, 64];
        late.resize(66, 0);
        assert_eq!(c.on_created2(&late), Err(OriginError::NotPending));
    }
}
