//! The messages the circuit core takes from outside its worker: from the
//! controller (an extend's connection found, onion-service meetings,
//! conflux homes, DoS marks, memory pressure, new keys or documents, the
//! resolver's answers, the HSDir's store changes and upload statuses) and from other workers' cores (a peer half gone).
//! They are plain data — no socket, no connection object — so the core can
//! emit them too ([`crate::worker::core::Effect::Worker`]). The driver hands each
//! to [`Circuits::handle_msg`] untouched; the messages only a driver can
//! act on (a socket to take over, a connection to move) stay in
//! [`crate::worker::inbox::WorkerMsg`].

use std::sync::Arc;

use crate::context::CircuitContext;
use crate::messages::{ConnId, ControllerMsg, HalfRef};
use crate::worker::core::Circuits;

/// A message for a worker's circuit core.
#[derive(Debug)]
pub(crate) enum CoreMsg {
    /// Create a relabel half on connection `conn_id` toward the next relay,
    /// send CREATE2 with `create2` (HTYPE | HLEN | HDATA), and link it with
    /// the keyed half `prev`.
    CreateOutbound {
        /// The connection (owned by this worker).
        conn_id: ConnId,
        /// The keyed half that asked.
        prev: HalfRef,
        /// CREATE2 body.
        create2: Vec<u8>,
    },
    /// The extend of keyed half `half` failed: close its circuit.
    ExtendFailed {
        /// The keyed half.
        half: HalfRef,
        /// DESTROY reason.
        reason: u8,
        /// For the log.
        why: String,
    },
    /// The peer of `half` is gone: tear `half` down and send DESTROY with
    /// `reason` on its connection.
    Destroy {
        /// The half on this worker.
        half: HalfRef,
        /// DESTROY reason.
        reason: u8,
    },
    /// Launch a bandwidth self-test circuit on connection `conn_id` to
    /// `first`, extending through `rest` (the last hop is ourselves), and
    /// send `cells` DROP cells over it.
    SelfTest {
        /// The connection to the first hop (owned by this worker).
        conn_id: ConnId,
        /// The first hop.
        first: weft_proto::origin::HopTarget,
        /// The other hops.
        rest: Vec<weft_proto::origin::HopTarget>,
        /// DROP cells to send.
        cells: u32,
    },
    /// New immutable context (keys rotated, parameters changed).
    NewContext(Arc<CircuitContext>),
    /// The directory cache's new documents.
    DirDocuments(Arc<weft_dir::cache::DirDocuments>),
    /// Onion service: relay `payload` as INTRODUCE2 on introduction half
    /// `to`, answer client half `from` with INTRODUCE_ACK.
    Introduce2 {
        /// The service's introduction half.
        to: HalfRef,
        /// The client's half.
        from: HalfRef,
        /// The INTRODUCE1 data.
        payload: Vec<u8>,
    },
    /// Onion service: send INTRODUCE_ACK with `status` on client half `to`.
    IntroduceAck {
        /// The client's half.
        to: HalfRef,
        /// The status.
        status: u16,
    },
    /// Onion service: the controller registered (`ok`) or refused (the
    /// cookie is in use) the rendezvous cookie of half `half`.
    RendezvousEstablished {
        /// The client's rendezvous half.
        half: HalfRef,
        /// Registered.
        ok: bool,
    },
    /// Onion service: join half `half` with `peer`, the other circuit of a
    /// rendezvous; with `rendezvous2`, first send it RENDEZVOUS2 with that
    /// data (the client's side).
    Splice {
        /// The half on this worker.
        half: HalfRef,
        /// The other circuit's half.
        peer: HalfRef,
        /// RENDEZVOUS2 data, for the client's half.
        rendezvous2: Option<Vec<u8>>,
    },
    /// Conflux: this worker is the home of `link`'s nonce: add leg `leg`
    /// to its set (made if new).
    ConfluxJoin {
        /// The leg (on any worker).
        leg: HalfRef,
        /// Its LINK.
        link: weft_proto::circuit::conflux::Link,
    },
    /// DoS: refuse CREATE cells from client address `ip` for `secs`
    /// seconds.
    DosMark {
        /// The address.
        ip: std::net::IpAddr,
        /// How long.
        secs: u64,
    },
    /// Memory: report the circuits by the age of their oldest queued cell
    /// (OOM round `round`).
    OomQuery {
        /// The round.
        round: u64,
    },
    /// Memory: close the circuits whose oldest queued cell is at least this
    /// old (ns).
    OomKill {
        /// The cutoff age.
        min_age_ns: u64,
    },
    /// The resolver's answer for one of our exit streams.
    Resolved(crate::resolver::DnsAnswer),
    /// The HSDir's store changed (every worker gets each change).
    HsDirUpdate(Arc<weft_dir::hs_cache::HsDirUpdate>),
    /// The status of the descriptor upload of directory stream `stream`
    /// (`ControllerMsg::HsDescPost`).
    HsDescPosted {
        /// The stream's key.
        stream: usize,
        /// Its tag (a reused key is told apart).
        tag: u64,
        /// The answer (200, 400, 503).
        answer: weft_dir::hs_cache::http::PostAnswer,
    },
}

impl Circuits {
    /// One message from the controller or another worker's core. What it
    /// causes comes out of [`Circuits::poll_effect`] and the connections'
    /// output as after any other input.
    pub(super) fn handle_msg(&mut self, m: CoreMsg) {
        match m {
            CoreMsg::CreateOutbound {
                conn_id,
                prev,
                create2,
            } => {
                let idx = self.conn_index(conn_id);
                self.create_outbound(idx, prev, &create2);
            }
            CoreMsg::ExtendFailed { half, reason, why } => self.extend_failed(half, reason, &why),
            CoreMsg::Destroy { half, reason } => self.destroy_half(half, reason),
            CoreMsg::SelfTest {
                conn_id,
                first,
                rest,
                cells,
            } => {
                if let Some(idx) = self.conn_index(conn_id) {
                    self.start_selftest(idx, &first, rest, cells);
                }
            }
            CoreMsg::NewContext(c) => self.set_context(c),
            CoreMsg::DirDocuments(d) => self.set_dir_documents(d),
            CoreMsg::Introduce2 { to, from, payload } => self.introduce2(to, from, &payload),
            CoreMsg::IntroduceAck { to, status } => self.introduce_ack(to, status),
            CoreMsg::RendezvousEstablished { half, ok } => self.rendezvous_established(half, ok),
            CoreMsg::Splice {
                half,
                peer,
                rendezvous2,
            } => self.splice(half, peer, rendezvous2.as_deref()),
            CoreMsg::ConfluxJoin { leg, link } => self.conflux_join(leg, &link),
            CoreMsg::DosMark { ip, secs } => self.dos_mark(ip, secs),
            CoreMsg::OomQuery { round } => {
                let circuits = self.oom_candidates();
                self.tell_controller(ControllerMsg::OomCandidates {
                    worker: self.me,
                    round,
                    circuits,
                });
            }
            CoreMsg::OomKill { min_age_ns } => {
                self.oom_kill(min_age_ns);
                // The controller hears at once what the kill freed.
                self.report_queue_change();
            }
            CoreMsg::Resolved(a) => self.stream_resolved(a),
            CoreMsg::HsDirUpdate(u) => self.apply_hs_dir_update(&u),
            CoreMsg::HsDescPosted {
                stream,
                tag,
                answer,
            } => self.hs_desc_posted(stream, tag, answer),
        }
        self.flush_destroys();
    }
}
