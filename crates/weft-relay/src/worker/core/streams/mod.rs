//! The exit's stream room (part of the sans-IO circuit core): the streams
//! of circuits that end here, what their relay cells do, and their flow
//! control. A stream lives on the worker that owns its circuit's keyed
//! half; its TCP socket is the driver's ([`crate::worker::stream_io`]), registered
//! in the same worker's poll, so no stream byte crosses workers or touches
//! the main thread.
//!
//! The core keeps each stream's state, windows and the bytes waiting for
//! its destination; it asks the driver to connect and close sockets
//! ([`StreamIo`]) and is told what the sockets did (connected, failed,
//! bytes read, EOF, bytes written). Admission is weft-proto's
//! `circuit::exit` (C Tor 0.4.9's rules); flow control (windows, SENDMEs,
//! XON/XOFF under congestion control) is [`crate::worker::core::streams::flow`].
//! [C connection_edge.c connection_exit_begin_conn(),
//! connection_exit_connect(), connection_edge_end(); dns.c]
//!
//! Connects have no timer of their own, as in C Tor: the kernel's applies,
//! and a client that gives up first sends END, which closes the pending
//! socket. Not built yet (issue 12): stream buffers counted in
//! MaxMemInQueues, and moving a connection whose circuits have streams
//! (it stays on its worker).

pub(crate) mod dir;
pub(crate) mod ending;
pub(crate) mod flow;
pub(crate) mod hsdir;
pub(crate) mod pump;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use slab::Slab;
use tracing::debug;
use weft_proto::cell::{destroy_reason, BODY_LEN};
use weft_proto::circuit::edge::DEFAULT_DNS_TTL;
use weft_proto::circuit::exit::{self, Admission, ExitContext};
use weft_proto::circuit::flow::{StreamFlow, DATA_MAX};
use weft_proto::relay::{self, end_reason, relay_cmd, RelayHeader};

use crate::context::ExitSettings;
use crate::messages::ExitCounters;
use crate::resolver::{DnsAnswer, DnsQuery, FamilyAnswer};
use crate::worker::core::half::HalfRole;
use crate::worker::core::{Circuits, Effect};

/// C Tor stops reading a stream's socket while its circuit has this many
/// cells queued toward the client (`CELL_QUEUE_HIGHWATER_SIZE`).
pub(crate) const QUEUE_HIGHWATER: usize = 256;
/// C Tor sends stream SENDMEs only while the bytes waiting for the
/// destination are below this (`connection_outbuf_too_full`: 10 cells).
pub(super) const OUTBUF_FULL: usize = 10 * DATA_MAX;

/// Most lookups one worker waits for at once: a client flooding BEGINs
/// or RESOLVEs to names a slow server answers cannot grow the table
/// without bound; over it, lookups fail at once (RESOLVEFAILED, or a
/// transient RESOLVED error).
pub(crate) const MAX_PENDING_LOOKUPS: usize = 4096;

/// What the driver must do with a stream's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamIo {
    /// Open a TCP connection for stream `key` to `addr`.
    Connect {
        /// The stream.
        key: usize,
        /// Where.
        addr: SocketAddr,
    },
    /// Close stream `key`'s socket now (the stream is gone).
    Close {
        /// The stream.
        key: usize,
    },
}

/// Where a stream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// A BEGIN's host name is being looked up.
    Resolving {
        /// The BEGIN's port.
        port: u16,
        /// The BEGIN's flags.
        flags: u32,
    },
    /// A RESOLVE is being looked up (no socket; answered with RESOLVED).
    ResolveOnly,
    /// Waiting for the TCP connect.
    Connecting,
    /// Connected: bytes flow both ways.
    Open,
    /// The client sent END: the bytes still waiting go to the
    /// destination, then the socket closes.
    Flushing,
    /// A BEGIN_DIR stream waiting for its request's head (then `Open`
    /// while the answer goes out; [`crate::worker::core::streams::dir`]).
    DirRequest,
}

/// Who a stream belongs to: the circuit that ends here, or the conflux
/// set homed here whose legs carry it. Ordered by owner first, so one
/// owner's streams are one range of [`Streams::by_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum StreamOwner {
    /// The keyed half at `slot`, on connection `conn`.
    Circuit {
        /// The half's slot.
        slot: u32,
        /// Its connection (the driver's index).
        conn: usize,
    },
    /// The set at this index of the conflux room.
    Set(usize),
}

impl StreamOwner {
    /// The circuit whose keyed half is at `slot` on connection `conn`.
    pub(crate) fn circuit(conn: usize, slot: u32) -> StreamOwner {
        StreamOwner::Circuit { slot, conn }
    }

    /// This owner's streams in [`Streams::by_id`].
    pub(super) fn ids(self) -> std::ops::RangeInclusive<(StreamOwner, u16)> {
        (self, 0)..=(self, u16::MAX)
    }
}

/// One exit stream.
pub(super) struct ExitStream {
    /// Its circuit or conflux set.
    pub(super) owner: StreamOwner,
    pub(super) stream_id: u16,
    /// Unique per worker: a late DNS answer for a stream that is gone
    /// (its key reused) is recognised.
    tag: u64,
    pub(super) state: State,
    pub(super) flow: StreamFlow,
    /// Where it connects (for CONNECTED).
    addr: IpAddr,
    /// The TTL CONNECTED reports.
    ttl: u32,
    /// Bytes from the client waiting for the destination.
    pub(super) to_dest: VecDeque<u8>,
    /// Since when `to_dest` has not been empty (ns; 0: empty): the age of
    /// its oldest byte, for the memory limit.
    pub(super) waiting_since_ns: u64,
    /// A BEGIN_DIR stream: its request and answer (no socket).
    pub(super) dir: Option<Box<crate::worker::core::streams::dir::DirStream>>,
    /// Listed in [`Streams::throttled`] (its XON's rate held it back).
    pub(super) rate_listed: bool,
}

/// Every exit stream of a worker.
#[derive(Default)]
pub(crate) struct Streams {
    streams: Slab<ExitStream>,
    /// (owner, stream ID) → key.
    /// Ordered, so a circuit's streams are one range (a circuit SENDME
    /// wakes only its own streams).
    by_id: BTreeMap<(StreamOwner, u16), usize>,
    /// Socket work for the driver, in order (it leaves as
    /// [`Effect::Stream`]).
    io: VecDeque<StreamIo>,
    /// Streams with bytes (or a close) for their destination (they leave
    /// as [`Effect::PumpStream`]).
    want_write: Vec<usize>,
    /// Streams whose reading may go on (a window opened, connected).
    may_read: Vec<usize>,
    /// Streams held back by their client's XON rate: (when a cell's worth
    /// has refilled, ns; key) ([`Streams::rate_round`]).
    throttled: Vec<(u64, usize)>,
    /// Directory streams to serve now, and those to serve next round
    /// ([`Circuits::serve_dir_ready`]).
    dir_ready: Vec<usize>,
    dir_again: Vec<usize>,
    /// The socket reads' buffer ([`Circuits::pump_stream`]).
    read_buf: Vec<u8>,
    /// The next stream's tag.
    next_tag: u64,
    /// Lookups asked and not answered yet.
    pending_lookups: usize,
    /// Streams opened, and refused or failed, since the start.
    opened: u64,
    refused: u64,
    /// What the MetricsPort shows (bytes are the driver's).
    counters: ExitCounters,
    /// Each exit circuit's stream-creation bucket (`DoSStreamCreation*`):
    /// owner → (tokens, second of the last refill).
    limiter: HashMap<StreamOwner, (u32, u64)>,
    /// Streams that had END from the client and still write what they
    /// hold (out of `by_id`, still their owner's).
    flushing: Vec<usize>,
    /// Bytes in every stream's `to_dest`, kept as they come and go, so
    /// the round's memory report walks no stream (issue 37).
    to_dest_bytes: u64,
    /// The directory streams (few, unlike exit streams): their unsent
    /// answers are summed for the same report.
    dir_keys: Vec<usize>,
    /// The directory cache's documents (shared, immutable; None before
    /// the first snapshot: requests get 404).
    dir_docs: Option<std::sync::Arc<weft_dir::cache::DirDocuments>>,
    /// The HSDir's descriptors (this worker's copy; [`hsdir`]).
    hs_index: weft_dir::hs_cache::HsDirIndex,
}

impl Streams {
    /// The room's counters, `open` filled in; streams opened, and
    /// refused or failed, since the start.
    pub(crate) fn report(&self) -> (ExitCounters, u64, u64) {
        let mut c = self.counters;
        c.open = self.streams.len() as u64;
        (c, self.opened, self.refused)
    }

    /// A circuit with congestion control was created (the MetricsPort's
    /// count is the stream room's).
    pub(crate) fn note_cc_circuit(&mut self) {
        self.counters.cc.circs_created += 1;
    }

    /// True if directory streams wait to be served this round.
    pub(crate) fn has_dir_ready(&self) -> bool {
        !self.dir_ready.is_empty()
    }

    /// True if `owner` has a stream (one the client has not ended).
    pub(crate) fn owns_any(&self, owner: StreamOwner) -> bool {
        self.by_id.range(owner.ids()).next().is_some()
    }

    /// True if directory streams wait to be served.
    pub(crate) fn has_dir_work(&self) -> bool {
        !self.dir_ready.is_empty() || !self.dir_again.is_empty()
    }

    /// A round begins: the directory streams left over from the last one
    /// are served again.
    pub(crate) fn dir_round(&mut self) {
        self.dir_ready.append(&mut self.dir_again);
    }

    /// The next output for the driver, after the core's own effects:
    /// socket work first, then the streams to pump. A directory stream
    /// that may send is kept for [`Circuits::serve_dir_ready`].
    pub(super) fn next_effect(&mut self) -> Option<Effect> {
        if let Some(io) = self.io.pop_front() {
            return Some(Effect::Stream(io));
        }
        if let Some(key) = self.want_write.pop() {
            return Some(Effect::PumpStream(key));
        }
        while let Some(key) = self.may_read.pop() {
            if self.streams.get(key).is_some_and(|s| s.dir.is_some()) {
                self.dir_ready.push(key);
            } else {
                return Some(Effect::PumpStream(key));
            }
        }
        None
    }

    /// True if a circuit on connection `conn` has streams (it cannot move
    /// between workers yet).
    ///
    /// `slots` are the connection's circuits: their streams are ranges
    /// of the index, so no stream is walked but the flushing ones.
    pub(crate) fn on_conn(&self, conn: usize, mut slots: impl Iterator<Item = u32>) -> bool {
        if self.streams.is_empty() {
            return false;
        }
        slots.any(|slot| {
            let owner = StreamOwner::circuit(conn, slot);
            self.by_id.range(owner.ids()).next().is_some()
        }) || self
            .flushing
            .iter()
            .any(|&k| matches!(self.streams.get(k).map(|s| s.owner), Some(StreamOwner::Circuit { conn: c, .. }) if c == conn))
    }
}

impl Circuits {
    /// A stream command for `owner`'s streams (its keyed half passed it
    /// on, or its set delivered it in order); its decrypted message is in
    /// `body`. Never inlined (see `circuit_sendme`).
    #[inline(never)]
    pub(crate) fn stream_cell(
        &mut self,
        owner: StreamOwner,
        h: RelayHeader,
        circuit_sendme: bool,
        body: &mut [u8; BODY_LEN],
    ) {
        let (command, stream_id) = (h.command, h.stream_id);
        if let (true, StreamOwner::Circuit { slot, conn }) = (circuit_sendme, owner) {
            // The tag is the digest of the DATA cell just decrypted: build
            // the SENDME before anything else passes this half.
            let mut reply = [0u8; BODY_LEN];
            if let Some(k) = self.keyed(slot) {
                k.originate_circuit_sendme(&mut reply);
                self.reply(conn, slot, self.now_ns, &reply);
            }
        }
        let key = self.streams.by_id.get(&(owner, stream_id)).copied();
        match (command, key) {
            (relay_cmd::BEGIN, None) => self.begin(owner, stream_id, relay::data(body, &h)),
            (relay_cmd::BEGIN | relay_cmd::BEGIN_DIR, Some(_)) => {
                debug!("worker {}: BEGIN for a known stream dropped", self.me);
            }
            (relay_cmd::RESOLVE, _) => self.resolve(owner, stream_id, relay::data(body, &h)),
            (relay_cmd::BEGIN_DIR, None) => self.begin_dir(owner, stream_id),
            (relay_cmd::DATA, Some(key)) if self.streams.streams[key].dir.is_some() => {
                self.dir_data(owner, key, relay::data(body, &h))
            }
            (relay_cmd::DATA, Some(key)) => self.stream_data(owner, key, relay::data(body, &h)),
            (relay_cmd::END, Some(key)) => {
                let s = &mut self.streams.streams[key];
                self.streams.by_id.remove(&(owner, stream_id));
                if s.state == State::Open && !s.to_dest.is_empty() {
                    s.state = State::Flushing;
                    self.streams.flushing.push(key);
                    self.streams.want_write.push(key);
                } else {
                    self.free_stream(key);
                }
            }
            (relay_cmd::SENDME, Some(key)) => self.stream_sendme(owner, key),
            (relay_cmd::XOFF, Some(key)) => self.stream_xoff(key),
            (relay_cmd::XON, Some(key)) => self.stream_xon(key, relay::data(body, &h)),
            // DATA, END, SENDME, XON or XOFF for a stream we do not have
            // (closed already, or never opened): dropped, as C Tor does.
            _ => debug!(
                "worker {}: {} for unknown stream {stream_id} dropped",
                self.me,
                relay_cmd_name(command)
            ),
        }
    }

    /// The keyed half at `slot`, if it is one.
    pub(super) fn keyed(&mut self, slot: u32) -> Option<&mut weft_proto::circuit::KeyedHalf> {
        match &mut self.halves.by_slot(slot)?.role {
            HalfRole::Keyed(k) => Some(k),
            _ => None,
        }
    }

    /// Send a relay message we originate for `owner`'s stream: on its
    /// keyed half, or on the leg its set picks.
    pub(super) fn send_on(&mut self, owner: StreamOwner, command: u8, stream_id: u16, data: &[u8]) {
        let (conn, slot) = match owner {
            StreamOwner::Set(idx) => return self.set_send(idx, command, stream_id, data),
            StreamOwner::Circuit { slot, conn } => (conn, slot),
        };
        let mut body = [0u8; BODY_LEN];
        let Some(k) = self.keyed(slot) else { return };
        k.originate(&mut body, command, stream_id, data);
        self.reply(conn, slot, self.now_ns, &body);
    }

    /// Close `owner` (the circuit, or the whole set) for a fault of its
    /// streams.
    pub(super) fn close_owner(&mut self, owner: StreamOwner, reason: u8, why: &str) {
        match owner {
            StreamOwner::Circuit { slot, conn } => self.close_circuit(conn, slot, reason, why),
            StreamOwner::Set(idx) => self.conflux_close_set(idx, reason, why),
        }
    }

    /// What C Tor's admission needs to know, for `owner`'s streams; `f`
    /// gets it.
    fn with_exit_ctx<T>(
        &self,
        owner: StreamOwner,
        settings: &ExitSettings,
        f: impl FnOnce(&ExitContext<'_>) -> T,
    ) -> T {
        // A conflux set's streams: every leg's LINK was checked to come
        // from a relay (not a one-hop client) on this exit.
        let (c, set) = match owner {
            StreamOwner::Circuit { conn, .. } => (self.conn(conn), false),
            StreamOwner::Set(_) => (None, true),
        };
        let prev_is_client = !set && c.is_none_or(|c| c.client);
        // As C's connection_or_digest_is_known_relay: listed in our
        // consensus (before the first consensus, any relay).
        let prev_is_known_relay = match (c.and_then(|c| c.peer_rsa), &settings.known_relays) {
            (Some(id), Some(known)) => known.contains(&id),
            (Some(_), None) => true,
            (None, _) => set,
        };
        let allows = |ip: IpAddr, port: u16| settings.policy.allows(ip, port);
        f(&ExitContext {
            prev_is_client,
            prev_is_known_relay,
            refuse_unknown_exits: settings.refuse_unknown_exits,
            ipv6_exit: settings.ipv6_exit,
            hibernating: self.ctx.hibernating,
            allow_non_rfc953: false,
            allows: &allows,
        })
    }

    /// A new stream in the table.
    pub(super) fn new_stream(&mut self, owner: StreamOwner, stream_id: u16, state: State) -> usize {
        // XON/XOFF on a circuit with congestion control (a set always has
        // it), else windows.
        let flow = match owner {
            StreamOwner::Set(_) => StreamFlow::with_xon_xoff(),
            StreamOwner::Circuit { slot, .. } => match self.keyed(slot) {
                Some(k) if k.congestion().is_some() => StreamFlow::with_xon_xoff(),
                _ => StreamFlow::default(),
            },
        };
        self.streams.next_tag += 1;
        let tag = self.streams.next_tag;
        self.streams.streams.insert(ExitStream {
            owner,
            stream_id,
            tag,
            state,
            flow,
            addr: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            ttl: 0,
            to_dest: VecDeque::new(),
            waiting_since_ns: 0,
            dir: None,
            rate_listed: false,
        })
    }

    /// Ask the resolver about `host` for stream `key` (or fail the lookup
    /// at once when too many wait).
    /// `reverse`: a PTR lookup of that address (`host` its reverse name).
    fn look_up(&mut self, key: usize, host: String, want_v6: bool, reverse: Option<IpAddr>) {
        let tag = self.streams.streams[key].tag;
        self.streams.pending_lookups += 1;
        if self.streams.pending_lookups > MAX_PENDING_LOOKUPS {
            debug!("worker {}: too many lookups waiting; failing one", self.me);
            return self.stream_resolved(DnsAnswer::failed(key, tag, true));
        }
        self.streams.counters.dns_queries += 1;
        self.effects.push_back(Effect::Resolve(DnsQuery {
            worker: self.me,
            key,
            tag,
            host,
            want_v6,
            reverse,
        }));
    }

    /// C Tor's stream-creation limit (`dos_stream_new_begin_or_resolve_cell`):
    /// a token bucket per circuit, refilled per second. Returns what to do
    /// with a stream over the limit: None (go on), Some(2) refuse it,
    /// Some(3) close the circuit.
    fn stream_dos(&mut self, owner: StreamOwner) -> Option<u32> {
        let d = self.ctx.dos;
        if !d.stream_enabled {
            return None;
        }
        let now = self.now_ns / 1_000_000_000;
        let (tokens, last) = self
            .streams
            .limiter
            .entry(owner)
            .or_insert((d.stream_burst, now));
        let refill = now
            .saturating_sub(*last)
            .saturating_mul(u64::from(d.stream_rate));
        *tokens = (u64::from(*tokens) + refill).min(u64::from(d.stream_burst)) as u32;
        *last = now;
        if *tokens > 0 {
            *tokens -= 1;
            return None;
        }
        self.streams.counters.dos_rejected += 1;
        (d.stream_defense >= 2).then_some(d.stream_defense)
    }

    /// Defense 3 of the stream-creation limit: the circuit closes.
    fn close_for_stream_dos(&mut self, owner: StreamOwner) {
        self.close_owner(
            owner,
            destroy_reason::RESOURCELIMIT,
            "streams over DoSStreamCreationRate",
        );
    }

    /// BEGIN: admit it as C Tor does, then connect (a literal address the
    /// policy allows), look the name up, or answer END.
    fn begin(&mut self, owner: StreamOwner, stream_id: u16, data: &[u8]) {
        let Some(settings) = self.ctx.exit.clone() else {
            return;
        };
        let admission = self.with_exit_ctx(owner, &settings, |e| exit::admit_begin(data, e));
        // C Tor applies the limit after its own refusals (parse, one-hop,
        // unknown relay, address family) and before the lookup and the
        // policy check.
        let limited = match &admission {
            Admission::Connect { .. } | Admission::Resolve { .. } => true,
            Admission::End(e) => matches!(
                e.first(),
                Some(&end_reason::EXITPOLICY | &end_reason::RESOLVEFAILED)
            ),
        };
        if limited {
            match self.stream_dos(owner) {
                Some(3) => return self.close_for_stream_dos(owner),
                // Not RESOURCELIMIT: a client would give up on us (C Tor).
                Some(_) => {
                    self.streams.refused += 1;
                    self.count_end(&[end_reason::MISC]);
                    return self.send_on(owner, relay_cmd::END, stream_id, &[end_reason::MISC]);
                }
                None => {}
            }
        }
        match admission {
            Admission::End(end) => {
                self.streams.refused += 1;
                self.count_end(&end);
                self.send_on(owner, relay_cmd::END, stream_id, &end);
            }
            Admission::Resolve { host, port, flags } => {
                let key = self.new_stream(owner, stream_id, State::Resolving { port, flags });
                self.streams.by_id.insert((owner, stream_id), key);
                self.look_up(key, host, settings.ipv6_exit, None);
            }
            Admission::Connect { addr, ttl } => {
                let key = self.new_stream(owner, stream_id, State::Connecting);
                self.streams.by_id.insert((owner, stream_id), key);
                self.connect(key, addr, ttl);
            }
        }
    }

    /// Connect stream `key` to `addr` (already checked against the
    /// policy); CONNECTED will report `ttl`.
    fn connect(&mut self, key: usize, addr: SocketAddr, ttl: u32) {
        let reentry = self
            .ctx
            .exit
            .as_ref()
            .is_some_and(|e| !e.allow_reentry && e.reentry.contains(&addr));
        if reentry {
            debug!(
                "worker {}: a stream tried to connect back to relay address {addr}; refused",
                self.me
            );
            self.streams.refused += 1;
            return self.end_stream(key, &[end_reason::CONNECTREFUSED]);
        }
        self.streams.counters.begin += 1;
        let s = &mut self.streams.streams[key];
        s.state = State::Connecting;
        s.addr = addr.ip();
        s.ttl = ttl;
        self.streams.io.push_back(StreamIo::Connect { key, addr });
    }

    /// RESOLVE: an IP literal is answered with itself, a name after its
    /// lookup. [C dns.c dns_resolve(), send_resolved_cell()]
    fn resolve(&mut self, owner: StreamOwner, stream_id: u16, data: &[u8]) {
        if self.streams.by_id.contains_key(&(owner, stream_id)) {
            // C's connection_edge_process_relay_cell(): "resolve request
            // for known stream; dropping."
            debug!(
                "worker {}: RESOLVE on live stream {stream_id}; dropped",
                self.me
            );
            return;
        }
        self.streams.counters.resolve += 1;
        match self.stream_dos(owner) {
            Some(3) => return self.close_for_stream_dos(owner),
            Some(_) => {
                return self.send_on(owner, relay_cmd::RESOLVED, stream_id, &resolved_error(true))
            }
            None => {}
        }
        let name = data.split(|&b| b == 0).next().unwrap_or(&[]);
        let Ok(name) = std::str::from_utf8(name) else {
            return self.send_on(
                owner,
                relay_cmd::RESOLVED,
                stream_id,
                &resolved_error(false),
            );
        };
        let name = name.to_ascii_lowercase();
        let v6_ok = self.ctx.exit.as_ref().is_some_and(|e| e.ipv6_exit);
        let body = match weft_proto::circuit::edge::parse_ip(&name) {
            Some(IpAddr::V4(a)) => resolved_body(Ok((a, DEFAULT_DNS_TTL)), Err(false), false),
            Some(IpAddr::V6(a)) => resolved_body(Err(false), Ok((a, DEFAULT_DNS_TTL)), true),
            // C's dns_resolve_impl(): an invalid name, a malformed
            // reverse-lookup name or one asking about an internal address is
            // an error before any lookup; a public reverse lookup is a PTR
            // query.
            None => match exit::resolve_refusal(&name, weft_dir::exit_policy::is_internal) {
                Err(why) => {
                    debug!("worker {}: RESOLVE for {why}; refused", self.me);
                    resolved_error(false)
                }
                Ok(reverse) => {
                    // Known by its ID while it waits, as C's
                    // resolving_streams are: a second RESOLVE, BEGIN or END
                    // finds it.
                    let key = self.new_stream(owner, stream_id, State::ResolveOnly);
                    self.streams.by_id.insert((owner, stream_id), key);
                    return self.look_up(key, name, v6_ok && reverse.is_none(), reverse);
                }
            },
        };
        self.send_on(owner, relay_cmd::RESOLVED, stream_id, &body);
    }

    /// The resolver answered for stream `key`: connect to the address the
    /// client accepts and the policy allows (checked again on the
    /// resolved address: a name that resolves to a private address is
    /// refused), or answer RESOLVED for a RESOLVE.
    /// [C dns.c set_exitconn_info_from_resolve(); connection_edge.c
    /// connection_exit_connect()]
    pub(crate) fn stream_resolved(&mut self, a: DnsAnswer) {
        self.streams.pending_lookups = self.streams.pending_lookups.saturating_sub(1);
        let c = &mut self.streams.counters;
        c.dns_cache_hits += u64::from(a.cached);
        match (a.v4, a.v6) {
            _ if a.hostname.is_some() => c.dns_success += 1,
            (Ok(_), _) | (_, Ok(_)) => c.dns_success += 1,
            (Err(true), _) | (_, Err(true)) => c.dns_failed += 1,
            _ => c.dns_notexist += 1,
        }
        let Some(s) = self.streams.streams.get(a.key) else {
            return;
        };
        if s.tag != a.tag {
            return;
        }
        let (owner, sid, state) = (s.owner, s.stream_id, s.state);
        let Some(settings) = self.ctx.exit.clone() else {
            return self.end_stream(a.key, &[end_reason::RESOLVEFAILED]);
        };
        match state {
            State::ResolveOnly => {
                let body = match &a.hostname {
                    Some((name, ttl)) => resolved_hostname(name, *ttl),
                    None => resolved_body(a.v4, a.v6, settings.ipv6_exit),
                };
                self.send_on(owner, relay_cmd::RESOLVED, sid, &body);
                self.free_stream(a.key);
            }
            State::Resolving { port, flags } => {
                let chosen = self.with_exit_ctx(owner, &settings, |e| {
                    // The resolver's TTL is already C's fuzzy one: sent as is.
                    exit::choose_address(a.v4, a.v6, port, flags, e).map(|(ip, ttl)| {
                        exit::check_destination(ip, port, ttl, e).map(|addr| (addr, ttl))
                    })
                });
                match chosen {
                    Ok(Ok((addr, ttl))) => self.connect(a.key, addr, ttl),
                    Ok(Err(end)) => {
                        self.streams.refused += 1;
                        self.end_stream(a.key, &end);
                    }
                    Err(_) => {
                        self.streams.refused += 1;
                        self.end_stream(a.key, &[end_reason::RESOLVEFAILED]);
                    }
                }
            }
            _ => {}
        }
    }

    /// Stream `key`'s socket connected: CONNECTED, then bytes flow.
    pub(super) fn stream_connected(&mut self, key: usize) {
        let Some(s) = self.streams.streams.get_mut(key) else {
            return;
        };
        if s.state != State::Connecting {
            return;
        }
        s.state = State::Open;
        self.streams.opened += 1;
        let (owner, sid) = (s.owner, s.stream_id);
        let body = exit::connected_body(s.addr, s.ttl);
        if !s.to_dest.is_empty() {
            // Optimistic data that came before the connection.
            self.streams.want_write.push(key);
        }
        self.streams.may_read.push(key);
        self.send_on(owner, relay_cmd::CONNECTED, sid, &body);
    }

    /// Stream `key`'s socket failed (to connect, or later) with `err`:
    /// END with C Tor's reason for it; the stream is gone.
    pub(super) fn stream_failed(&mut self, key: usize, err: &std::io::Error) {
        let Some(s) = self.streams.streams.get(key) else {
            return;
        };
        if s.state == State::Connecting {
            self.streams.refused += 1;
        }
        debug!(
            "worker {}: stream {} to {}: {err}",
            self.me, s.stream_id, s.addr
        );
        let reason = end_reason_for(err);
        self.end_stream(key, &[reason]);
    }
}

/// A RESOLVED body: an entry per family found (IPv6 only with
/// IPv6Exit), each with the TTL it came with (the resolver's fuzzy one,
/// or C Tor's DEFAULT_DNS_TTL for an IP literal); or C Tor's error entry.
fn resolved_body(v4: FamilyAnswer<Ipv4Addr>, v6: FamilyAnswer<Ipv6Addr>, v6_ok: bool) -> Vec<u8> {
    let mut b = Vec::new();
    if let Ok((a, ttl)) = v4 {
        b.extend_from_slice(&[4, 4]);
        b.extend_from_slice(&a.octets());
        b.extend_from_slice(&ttl.to_be_bytes());
    }
    if let (Ok((a, ttl)), true) = (v6, v6_ok) {
        b.extend_from_slice(&[6, 16]);
        b.extend_from_slice(&a.octets());
        b.extend_from_slice(&ttl.to_be_bytes());
    }
    if b.is_empty() {
        let transient = matches!(v4, Err(true)) || matches!(v6, Err(true));
        return resolved_error(transient);
    }
    b
}

/// A reverse lookup's answer: type 0 (hostname), its length, the name,
/// the TTL. [C dns.c send_resolved_hostname_cell()]
fn resolved_hostname(name: &str, ttl: u32) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(255)];
    let mut b = vec![0, name.len() as u8];
    b.extend_from_slice(name);
    b.extend_from_slice(&ttl.to_be_bytes());
    b
}

/// C Tor's error answer: type 0xF0 (transient) or 0xF1, its message, a
/// TTL.
fn resolved_error(transient: bool) -> Vec<u8> {
    let mut b = weft_proto::circuit::edge::resolved_error();
    if transient {
        b[0] = 0xF0;
    }
    b
}

/// C Tor's END reason for a socket error (`errno_to_stream_end_reason`).
pub(crate) fn end_reason_for(err: &std::io::Error) -> u8 {
    use std::io::ErrorKind as K;
    match err.kind() {
        K::ConnectionRefused => end_reason::CONNECTREFUSED,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => end_reason::CONNRESET,
        K::TimedOut => end_reason::TIMEOUT,
        K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => end_reason::NOROUTE,
        _ => end_reason::MISC,
    }
}

fn relay_cmd_name(c: u8) -> &'static str {
    match c {
        relay_cmd::DATA => "DATA",
        relay_cmd::END => "END",
        relay_cmd::SENDME => "SENDME",
        _ => "relay command",
    }
}
