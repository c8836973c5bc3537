//! The state machine of a keyed circuit half: the half on the connection
//! toward the client, which answered the CREATE2 (or CREATE_FAST,
//! [`handshake`]) and holds this hop's keys (tor1, or CGO with relay cell
//! format V1: [`layer`]). It removes our onion layer
//! from cells going away from the client, decides what the relay commands
//! addressed to us do, and adds our layer to cells going toward the client.
//! The other half of a circuit (toward the next hop) only relabels circuit
//! IDs and lives in weft-relay. [tor-spec §5, §6; protocol-notes §5, §6]
//!
//! Where a relay command addressed to this hop goes ([`KeyedHalf::on_forward`]):
//!
//! | relay command | here | becomes |
//! |---|---|---|
//! | EXTEND2 (RELAY_EARLY) | checked, parsed | [`ForwardAction::Extend`] → weft-relay `worker/core/extend.rs` |
//! | EXTEND (v1) | refused | close (PROTOCOL) |
//! | TRUNCATE | TRUNCATED built | [`ForwardAction::Truncate`] |
//! | BEGIN, BEGIN_DIR, RESOLVE | answered as a non-exit ([`edge`]) | [`ForwardAction::Reply`] |
//! | BEGIN_DIR at a directory cache | the stream room serves it | [`ForwardAction::Stream`] |
//! | BEGIN, RESOLVE, DATA, END, stream SENDME, XOFF, XON at an exit | DATA counted in the circuit's deliver window ([`flow`]) | [`ForwardAction::Stream`] → weft-relay `worker/core/streams/mod.rs`, `worker/core/streams/flow.rs` |
//! | circuit SENDME at an exit | — | [`ForwardAction::CircuitSendme`] → `worker/core/streams/flow.rs`, which checks it with [`KeyedHalf::circuit_sendme_received`] (digest, then the fixed window or Vegas, [`congestion`]) |
//! | ESTABLISH_INTRO, INTRODUCE1, ESTABLISH_RENDEZVOUS, RENDEZVOUS1 | checked ([`crate::onion`]), [`Purpose`] changed | `IntroEstablished`, `Introduce`, `EstablishRendezvous`, `Rendezvous1` → weft-relay `worker/core/onion.rs` |
//! | PADDING_NEGOTIATE | — | [`ForwardAction::PaddingNegotiate`] → weft-relay `worker/core/circpad.rs` ([`crate::circpad`]) |
//! | DROP, anything else | — | [`ForwardAction::Drop`] (C Tor drops unknown commands) |
//!
//! A new relay command gets a row here and, if it needs more than this
//! circuit's own state (another circuit, a socket, the controller), a
//! [`ForwardAction`] that the worker's dispatch hands to the room that
//! owns that concern.

pub mod conflux;
pub mod congestion;
pub mod edge;
pub mod exit;
pub mod extensions;
pub mod flow;
mod handshake;
mod layer;

use weft_crypto::cgo::CgoRelayCrypto;
use weft_crypto::ntor::NONCE_LEN;
use weft_crypto::relay_crypto::Tor1RelayCrypto;

use self::layer::HopLayer;

pub use self::handshake::{
    answer_create2, answer_create2_with, answer_create_fast, CreateError, HandshakeKeys,
    HandshakeKind,
};
use crate::cell::{cmd, destroy_reason, BODY_LEN};
use crate::onion::{self, hs_cmd, Intro2Bucket, COOKIE_LEN};
use crate::relay::{self, end_reason, relay_cmd, Extend2, RelayHeader};

/// Most RELAY_EARLY cells a circuit may carry forward. [tor-spec §5.6]
pub const MAX_RELAY_EARLY: u8 = 8;

/// What the next hop of a keyed half looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// The circuit ends here.
    None,
    /// An EXTEND2 is in progress.
    Pending,
    /// Linked to a relabel half toward the next relay.
    Linked,
}

/// What a circuit that ends here is used for: C Tor's OR-circuit purposes.
/// [C circuitlist.h CIRCUIT_PURPOSE_OR, _INTRO_POINT, _REND_*]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purpose {
    /// An ordinary circuit.
    Plain,
    /// A service's introduction circuit: INTRODUCE1s for its auth key come
    /// out here as INTRODUCE2, within its limit. (Boxed: most circuits are
    /// not introduction points, and a keyed half should stay small.)
    IntroPoint(Box<IntroPoint>),
    /// ESTABLISH_RENDEZVOUS is being registered (weft's controller checks
    /// the cookie is new).
    RendPending {
        /// The cookie.
        cookie: [u8; COOKIE_LEN],
    },
    /// A client's rendezvous circuit waiting for the service.
    RendWaiting {
        /// The cookie.
        cookie: [u8; COOKIE_LEN],
    },
    /// A service's RENDEZVOUS1 is being matched with the waiting circuit.
    Joining,
    /// Joined with the other circuit of a rendezvous: cells not for us pass
    /// to it.
    Spliced,
}

impl Purpose {
    /// A rendezvous-point circuit, from its ESTABLISH_RENDEZVOUS (or the
    /// service's RENDEZVOUS1) on (C's `circuit_carries_hs_traffic_stats`).
    pub fn is_rendezvous(&self) -> bool {
        matches!(
            self,
            Purpose::RendPending { .. }
                | Purpose::RendWaiting { .. }
                | Purpose::Joining
                | Purpose::Spliced
        )
    }
}

/// An introduction point's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntroPoint {
    /// The service's auth key.
    pub auth_key: [u8; 32],
    /// The INTRODUCE2 rate limit.
    pub bucket: Intro2Bucket,
}

/// What a keyed half needs to know about its circuit's surroundings (the
/// same for every circuit of a worker until the consensus or the second
/// changes).
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardCtx {
    /// The consensus parameter AllowNonearlyExtend.
    pub allow_nonearly_extend: bool,
    /// INTRODUCE2 limits for new introduction points (consensus
    /// `HiddenServiceEnableIntroDoS*`): (enabled, rate/s, burst).
    pub intro_dos: (bool, u32, u32),
    /// Drop ESTABLISH_RENDEZVOUS from one-hop clients
    /// (DoSRefuseSingleHopClientRendezvous).
    pub refuse_single_hop_rend: bool,
    /// Seconds on the caller's clock (the INTRODUCE2 bucket).
    pub now_s: u64,
    /// We relay exit streams (ExitRelay with a policy that accepts
    /// something): stream commands go to the stream room instead of the
    /// non-exit answers of [`edge`].
    pub exit: bool,
    /// We are a directory cache: BEGIN_DIR opens a stream in the stream
    /// room (else END NOTDIRECTORY), and stream commands go there too.
    pub dir_cache: bool,
}

/// What to do with a cell moving away from the client, after
/// [`KeyedHalf::on_forward`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardAction {
    /// Not ours: pass it to the peer half with this command (RELAY_EARLY
    /// stays RELAY_EARLY toward a next relay).
    Pass {
        /// RELAY or RELAY_EARLY.
        command: u8,
    },
    /// EXTEND2 for us: open or find the link and send CREATE2.
    Extend(Box<Extend2>),
    /// TRUNCATE for us: destroy the next hop with `reason`; the body now
    /// holds the encrypted TRUNCATED reply to send back.
    Truncate {
        /// Reason to put in the DESTROY toward the next hop.
        reason: u8,
    },
    /// The body now holds an encrypted reply (END, RESOLVED,
    /// INTRODUCE_ACK...) to send back.
    Reply,
    /// A verified ESTABLISH_INTRO: the body holds the encrypted
    /// INTRO_ESTABLISHED; INTRODUCE1s for `auth_key` now come here.
    IntroEstablished {
        /// The service's auth key.
        auth_key: [u8; 32],
    },
    /// An INTRODUCE1 to relay as INTRODUCE2 on the introduction circuit of
    /// `auth_key` (the cell's relay data, still in the body); the answer is
    /// an INTRODUCE_ACK.
    Introduce {
        /// The auth key it names.
        auth_key: [u8; 32],
        /// The message's header (parsed once, here).
        header: RelayHeader,
    },
    /// ESTABLISH_RENDEZVOUS: register `cookie`, then answer
    /// RENDEZVOUS_ESTABLISHED (or close if the cookie is in use).
    EstablishRendezvous {
        /// The cookie.
        cookie: [u8; COOKIE_LEN],
    },
    /// RENDEZVOUS1: join with the circuit waiting on `cookie`, which gets
    /// RENDEZVOUS2 with the rest of the cell's data (still in the body).
    Rendezvous1 {
        /// The cookie.
        cookie: [u8; COOKIE_LEN],
        /// The message's header (parsed once, here).
        header: RelayHeader,
    },
    /// A stream command for the exit's stream room (BEGIN, RESOLVE, DATA,
    /// END, stream-level SENDME); the decrypted message is still in the
    /// body.
    Stream {
        /// The message's header (command, stream, length), parsed once
        /// here and carried on: nobody reads it from the body again.
        header: RelayHeader,
        /// A DATA cell completed an increment of the circuit's deliver
        /// window: send a circuit-level SENDME now
        /// ([`KeyedHalf::originate_circuit_sendme`]).
        circuit_sendme: bool,
    },
    /// A circuit-level SENDME at an exit: the caller checks it with
    /// [`KeyedHalf::circuit_sendme_received`] (its clock and queue), then
    /// streams that waited for the window may read again.
    CircuitSendme {
        /// The message's header (parsed once, here).
        header: RelayHeader,
    },
    /// A conflux command at an exit (LINK, LINKED, LINKED_ACK, SWITCH; the
    /// decrypted message is still in the body): the worker's conflux room
    /// checks it against the circuit's leg state.
    Conflux {
        /// The message's header (parsed once, here).
        header: RelayHeader,
    },
    /// An ESTABLISH_RENDEZVOUS from a one-hop client, dropped without an
    /// answer (DoSRefuseSingleHopClientRendezvous; counted).
    RefusedSingleHopRendezvous,
    /// PADDING_NEGOTIATE for this hop: the body (decrypted) carries it
    /// after the relay header; weft-relay `worker/core/circpad.rs` runs the
    /// machine ([`crate::circpad`]).
    PaddingNegotiate,
    /// Nothing to do.
    Drop,
    /// Close the circuit: DESTROY both ways with `reason`.
    Close {
        /// DESTROY reason.
        reason: u8,
        /// For the log.
        why: String,
    },
}

impl ForwardAction {
    fn close(why: impl Into<String>) -> Self {
        ForwardAction::Close {
            reason: destroy_reason::PROTOCOL,
            why: why.into(),
        }
    }
}

/// A keyed circuit half (see the module docs).
pub struct KeyedHalf {
    crypto: HopLayer,
    relay_early_seen: u8,
    /// The circuit nonce KH from the CREATE handshake (C Tor's
    /// `rend_circ_nonce`): an introduction point checks ESTABLISH_INTRO's
    /// MAC with it.
    nonce: [u8; NONCE_LEN],
    /// The state of the next hop.
    pub next: NextHop,
    /// What the circuit is used for, when it ends here.
    pub purpose: Purpose,
    /// An INTRODUCE1 came on this circuit: no other may (C Tor's
    /// `already_received_introduce1`).
    pub introduced: bool,
    /// The previous hop did not authenticate as a relay (a client using us
    /// as its first hop): it may not open streams or introduce.
    pub prev_is_client: bool,
    /// The circuit's windows, once it carries exit streams (boxed: few
    /// circuits end at an exit's streams).
    flow: Option<Box<flow::CircuitFlow>>,
}

impl KeyedHalf {
    /// A half keyed with 72 bytes of tor1 key material and its circuit
    /// nonce.
    pub fn new(key_material: &[u8; 72], nonce: [u8; NONCE_LEN]) -> Self {
        Self::with_layer(
            HopLayer::Tor1(Tor1RelayCrypto::from_key_material(key_material)),
            nonce,
        )
    }

    /// A half keyed for CGO (relay cell format V1) with 160 bytes of key
    /// material and its circuit nonce. Its flow keeps 16-byte SENDME tags.
    pub fn new_cgo(
        key_material: &[u8; weft_crypto::cgo::KEY_MATERIAL_LEN],
        nonce: [u8; NONCE_LEN],
    ) -> Self {
        let mut half = Self::with_layer(
            HopLayer::Cgo(Box::new(CgoRelayCrypto::from_key_material(key_material))),
            nonce,
        );
        half.flow = Some(Box::new(flow::CircuitFlow::default().with_cgo_tags()));
        half
    }

    fn with_layer(crypto: HopLayer, nonce: [u8; NONCE_LEN]) -> Self {
        KeyedHalf {
            crypto,
            relay_early_seen: 0,
            nonce,
            next: NextHop::None,
            purpose: Purpose::Plain,
            introduced: false,
            prev_is_client: false,
            flow: None,
        }
    }

    /// True if the circuit ends here as an ordinary circuit: what C Tor
    /// requires before it becomes an introduction or rendezvous point.
    fn is_plain_edge(&self) -> bool {
        self.next == NextHop::None && self.purpose == Purpose::Plain
    }

    /// A RELAY or RELAY_EARLY cell arrived from the client side.
    pub fn on_forward(
        &mut self,
        command: u8,
        body: &mut [u8; BODY_LEN],
        ctx: &ForwardCtx,
    ) -> ForwardAction {
        if command == cmd::RELAY_EARLY {
            self.relay_early_seen = self.relay_early_seen.saturating_add(1);
            if self.relay_early_seen > MAX_RELAY_EARLY {
                return ForwardAction::close(format!(
                    "more than {MAX_RELAY_EARLY} RELAY_EARLY cells"
                ));
            }
        }
        let recognized = match self.crypto.forward(command, body) {
            Ok(r) => r,
            Err(e) => return ForwardAction::close(format!("V1 relay message: {e}")),
        };
        if !recognized {
            return match (self.next, &self.purpose) {
                (NextHop::Linked, _) => ForwardAction::Pass { command },
                // At a rendezvous point: to the other circuit, as RELAY.
                (_, Purpose::Spliced) => ForwardAction::Pass {
                    command: cmd::RELAY,
                },
                _ => ForwardAction::close("unrecognized relay cell, but the circuit stops here"),
            };
        }
        let h = match relay::parse_header(body) {
            Ok(h) => h,
            Err(e) => return ForwardAction::close(e.to_string()),
        };
        match h.command {
            relay_cmd::EXTEND2 => self.extend2(command, body, &h, ctx),
            relay_cmd::EXTEND => ForwardAction::close("EXTEND (v1) is not supported"),
            relay_cmd::TRUNCATE => {
                let Some(&reason) = relay::data(body, &h).first() else {
                    return ForwardAction::close("TRUNCATE without a reason");
                };
                self.next = NextHop::None;
                self.originate(body, relay_cmd::TRUNCATED, 0, &[destroy_reason::REQUESTED]);
                ForwardAction::Truncate { reason }
            }
            relay_cmd::DROP => ForwardAction::Drop,
            crate::circpad::PADDING_NEGOTIATE => ForwardAction::PaddingNegotiate,
            relay_cmd::BEGIN | relay_cmd::RESOLVE if ctx.exit && self.is_plain_edge() => {
                self.exit_stream_cell(h)
            }
            relay_cmd::DATA
            | relay_cmd::END
            | relay_cmd::SENDME
            | relay_cmd::XOFF
            | relay_cmd::XON
                if (ctx.exit || ctx.dir_cache) && self.is_plain_edge() =>
            {
                self.exit_stream_cell(h)
            }
            relay_cmd::BEGIN_DIR if ctx.dir_cache && self.is_plain_edge() && h.stream_id != 0 => {
                self.exit_stream_cell(h)
            }
            relay_cmd::BEGIN => {
                let end = edge::end_for_begin(relay::data(body, &h), self.prev_is_client);
                self.originate(body, relay_cmd::END, h.stream_id, &end);
                ForwardAction::Reply
            }
            relay_cmd::BEGIN_DIR => {
                self.originate(
                    body,
                    relay_cmd::END,
                    h.stream_id,
                    &[end_reason::NOTDIRECTORY],
                );
                ForwardAction::Reply
            }
            relay_cmd::RESOLVE => {
                self.originate(
                    body,
                    relay_cmd::RESOLVED,
                    h.stream_id,
                    &edge::resolved_error(),
                );
                ForwardAction::Reply
            }
            hs_cmd::ESTABLISH_INTRO => self.establish_intro(body, &h, ctx),
            hs_cmd::INTRODUCE1 => self.introduce1(body, &h),
            hs_cmd::ESTABLISH_RENDEZVOUS if self.prev_is_client && ctx.refuse_single_hop_rend => {
                // Silently: the client has to time out before moving on.
                // [C rendmid.c rend_mid_establish_rendezvous()]
                ForwardAction::RefusedSingleHopRendezvous
            }
            hs_cmd::ESTABLISH_RENDEZVOUS => self.establish_rendezvous(body, &h),
            hs_cmd::RENDEZVOUS1 => self.rendezvous1(body, &h),
            conflux::LINK | conflux::LINKED | conflux::LINKED_ACK | conflux::SWITCH
                if ctx.exit && self.is_plain_edge() =>
            {
                ForwardAction::Conflux { header: h }
            }
            // Anything else addressed to us is dropped, as C Tor does
            // (forward compatibility; the onion-service cells meant for an
            // origin included).
            _ => ForwardAction::Drop,
        }
    }

    /// A stream command at an exit: the circuit's deliver window here, the
    /// rest in the stream room (a circuit-level SENDME is checked by
    /// [`Self::circuit_sendme_received`], which needs the caller's clock
    /// and queue).
    fn exit_stream_cell(&mut self, header: RelayHeader) -> ForwardAction {
        if header.stream_id == 0 {
            if header.command != relay_cmd::SENDME {
                // C: "Relay command with zero stream_id. Dropping."
                return ForwardAction::Drop;
            }
            return ForwardAction::CircuitSendme { header };
        }
        let mut circuit_sendme = false;
        if header.command == relay_cmd::DATA {
            match self.flow().data_received() {
                Ok(due) => circuit_sendme = due,
                Err(e) => return ForwardAction::close(e.to_string()),
            }
        }
        ForwardAction::Stream {
            header,
            circuit_sendme,
        }
    }

    /// The circuit's windows (made on first use).
    pub fn flow(&mut self) -> &mut flow::CircuitFlow {
        self.flow.get_or_insert_with(Default::default)
    }

    /// The client negotiated congestion control in its handshake: the
    /// circuit runs Vegas instead of the fixed package window.
    pub fn enable_congestion_control(&mut self, p: congestion::CcParams) {
        let f = flow::CircuitFlow::with_congestion_control(p);
        self.flow = Some(Box::new(if self.crypto.is_cgo() {
            f.with_cgo_tags()
        } else {
            f
        }));
    }

    /// True if the hop runs CGO (relay cell format V1).
    pub fn is_cgo(&self) -> bool {
        self.crypto.is_cgo()
    }

    /// The most data one DATA cell we originate carries (498 bytes in
    /// format V0, 488 in V1).
    pub fn data_max(&self) -> usize {
        self.crypto.data_max()
    }

    /// The circuit's congestion control, if negotiated.
    pub fn congestion(&self) -> Option<&congestion::Vegas> {
        self.flow.as_ref().and_then(|f| f.congestion())
    }

    /// The circuit-level SENDME in `body` ([`ForwardAction::CircuitSendme`],
    /// with its `header`) arrived at `now_us`: check its digest and open
    /// the window (Vegas: move cwnd; `blocked`: the circuit's cells wait
    /// for its connection). An error closes the circuit (TORPROTOCOL).
    pub fn circuit_sendme_received(
        &mut self,
        header: &RelayHeader,
        body: &[u8; BODY_LEN],
        accept_min: u8,
        now_us: u64,
        blocked: bool,
    ) -> Result<Option<congestion::SendmeOutcome>, flow::FlowError> {
        let data = relay::data(body, header);
        self.flow()
            .sendme_received(data, accept_min, now_us, blocked)
    }

    /// May a stream of this circuit send a DATA cell now?
    pub fn can_package(&self) -> bool {
        self.flow.as_ref().is_none_or(|f| f.can_package())
    }

    /// Cells the circuit may still package.
    pub fn package_window(&self) -> i32 {
        self.flow
            .as_ref()
            .map_or(flow::CIRCWINDOW_START, |f| f.package_window())
    }

    /// Build an encrypted DATA cell toward the client in `body` at
    /// `now_us`, counted in the circuit's package window (its digest and
    /// time kept if a SENDME will acknowledge it). The caller checked
    /// [`Self::can_package`].
    pub fn originate_data(
        &mut self,
        body: &mut [u8; BODY_LEN],
        stream_id: u16,
        data: &[u8],
        now_us: u64,
    ) {
        let needs_tag = self.flow().next_data_needs_tag();
        let tag = self
            .crypto
            .originate(body, relay_cmd::DATA, stream_id, data);
        self.flow().data_sent(needs_tag.then_some(tag), now_us);
    }

    /// Build a circuit-level SENDME v1 toward the client in `body`,
    /// acknowledging the DATA cell just received (its digest, or its CGO
    /// tag, is the SENDME's tag).
    pub fn originate_circuit_sendme(&mut self, body: &mut [u8; BODY_LEN]) {
        let mut sendme = [0u8; 3 + flow::TAG_LEN];
        let n = self.crypto.circuit_sendme_body(&mut sendme);
        self.originate(body, relay_cmd::SENDME, 0, &sendme[..n]);
    }

    fn extend2(
        &mut self,
        command: u8,
        body: &[u8; BODY_LEN],
        h: &relay::RelayHeader,
        ctx: &ForwardCtx,
    ) -> ForwardAction {
        if command != cmd::RELAY_EARLY && !ctx.allow_nonearly_extend {
            // [protocol-notes §3: dropped, not closed]
            return ForwardAction::Drop;
        }
        if h.stream_id != 0 {
            return ForwardAction::Drop;
        }
        if self.next != NextHop::None || self.purpose != Purpose::Plain {
            return ForwardAction::close("EXTEND2 on a circuit that already has a next hop");
        }
        match relay::parse_extend2(relay::data(body, h)) {
            Ok(e) => match relay::parse_create2(&e.create2) {
                Ok(c) if c.htype == 0 || c.htype == 1 => {
                    ForwardAction::close(format!("EXTEND2 with handshake type {}", c.htype))
                }
                _ => {
                    self.next = NextHop::Pending;
                    ForwardAction::Extend(Box::new(e))
                }
            },
            Err(e) => ForwardAction::close(e.to_string()),
        }
    }

    /// ESTABLISH_INTRO: become a service's introduction point.
    /// [C hs_intropoint.c hs_intro_received_establish_intro()]
    fn establish_intro(
        &mut self,
        body: &mut [u8; BODY_LEN],
        h: &relay::RelayHeader,
        ctx: &ForwardCtx,
    ) -> ForwardAction {
        if !self.is_plain_edge() {
            return ForwardAction::close(
                "ESTABLISH_INTRO on a circuit that is not an ordinary edge",
            );
        }
        let data = relay::data(body, h);
        let parsed = onion::parse_establish_intro(data)
            .and_then(|c| onion::verify_establish_intro(data, &c, &self.nonce).map(|()| c));
        let c = match parsed {
            Ok(c) => c,
            Err(e) => return ForwardAction::close(format!("refusing ESTABLISH_INTRO: {e}")),
        };
        let (enabled, rate, burst) = ctx.intro_dos;
        let mut bucket = Intro2Bucket::new(enabled, rate, burst, ctx.now_s);
        if let Some(d) = c.dos {
            bucket.apply(d, ctx.now_s);
        }
        self.purpose = Purpose::IntroPoint(Box::new(IntroPoint {
            auth_key: c.auth_key,
            bucket,
        }));
        self.originate(
            body,
            hs_cmd::INTRO_ESTABLISHED,
            0,
            &onion::INTRO_ESTABLISHED_BODY,
        );
        ForwardAction::IntroEstablished {
            auth_key: c.auth_key,
        }
    }

    /// INTRODUCE1 from a client: one per circuit, never from a one-hop
    /// client. [C hs_intropoint.c hs_intro_received_introduce1()]
    fn introduce1(&mut self, body: &mut [u8; BODY_LEN], h: &relay::RelayHeader) -> ForwardAction {
        if h.length < 20 {
            return ForwardAction::close("invalid INTRODUCE1 length");
        }
        if !self.is_plain_edge() || self.introduced || self.prev_is_client {
            return ForwardAction::close("INTRODUCE1 on a circuit that may not introduce");
        }
        self.introduced = true;
        match onion::parse_introduce1(relay::data(body, h)) {
            Ok(auth_key) => ForwardAction::Introduce {
                auth_key,
                header: *h,
            },
            Err(_) => {
                let ack = onion::introduce_ack_body(onion::ack_status::BAD_FORMAT);
                self.originate(body, hs_cmd::INTRODUCE_ACK, 0, &ack);
                ForwardAction::Reply
            }
        }
    }

    /// ESTABLISH_RENDEZVOUS from a client. [C rendmid.c
    /// rend_mid_establish_rendezvous()]
    fn establish_rendezvous(
        &mut self,
        body: &[u8; BODY_LEN],
        h: &relay::RelayHeader,
    ) -> ForwardAction {
        if !self.is_plain_edge() {
            return ForwardAction::close(
                "ESTABLISH_RENDEZVOUS on a circuit that is not an ordinary edge",
            );
        }
        let Ok(cookie) = <[u8; COOKIE_LEN]>::try_from(relay::data(body, h)) else {
            return ForwardAction::close("invalid length on ESTABLISH_RENDEZVOUS");
        };
        self.purpose = Purpose::RendPending { cookie };
        ForwardAction::EstablishRendezvous { cookie }
    }

    /// RENDEZVOUS1 from a service. [C rendmid.c rend_mid_rendezvous()]
    fn rendezvous1(&mut self, body: &[u8; BODY_LEN], h: &relay::RelayHeader) -> ForwardAction {
        if !self.is_plain_edge() {
            return ForwardAction::close("RENDEZVOUS1 on a circuit that is not an ordinary edge");
        }
        let Some(cookie) = relay::data(body, h)
            .get(..COOKIE_LEN)
            .and_then(|c| <[u8; COOKIE_LEN]>::try_from(c).ok())
        else {
            return ForwardAction::close("RENDEZVOUS1 with a bad length");
        };
        self.purpose = Purpose::Joining;
        ForwardAction::Rendezvous1 { cookie, header: *h }
    }

    /// A cell from the next hop (or the other circuit of a rendezvous)
    /// moving toward the client: add our layer.
    pub fn on_backward(&mut self, body: &mut [u8; BODY_LEN]) {
        self.crypto.backward(body);
    }

    /// Build a relay message we originate toward the client in `body`,
    /// encrypted and ready to send as RELAY.
    pub fn originate(
        &mut self,
        body: &mut [u8; BODY_LEN],
        command: u8,
        stream_id: u16,
        data: &[u8],
    ) {
        self.crypto.originate(body, command, stream_id, data);
    }

    /// The next hop answered our CREATE2: fill `body` with EXTENDED2.
    pub fn extended(&mut self, body: &mut [u8; BODY_LEN], created2: &[u8]) {
        self.next = NextHop::Linked;
        let n = created2.len().min(relay::RELAY_DATA_MAX);
        self.originate(body, relay_cmd::EXTENDED2, 0, &created2[..n]);
    }
}

#[cfg(test)]
mod tests;
