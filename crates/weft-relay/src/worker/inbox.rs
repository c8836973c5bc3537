//! A worker's inbox: the messages the controller and other workers send it
//! ([`WorkerMsg`]) and what the driver does with each, most of it by
//! handing it to the circuit core. Drained before the rings in every
//! round, so a DESTROY overtakes the cells queued before it. Also the
//! driver's side of a migration: the socket leaves with its circuits
//! ([`Worker::migrate_out`], [`Worker::adopt`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::migrate::{log_departure, MovedConn};
use super::Worker;
use crate::context::SharedContext;
use crate::messages::{ConnId, ControllerMsg, HalfRef};

/// How long a move asked for a busy connection is retried before the
/// worker refuses it (the controller then picks another connection).
const MOVE_RETRY: Duration = Duration::from_secs(1);

/// What became of an attempt to move a connection away.
enum MoveOutcome {
    /// It left.
    Moved,
    /// Not now: it waits for ring room, a handshake or an earlier move.
    Busy,
    /// Not at all: gone, closing, still in its handshake, or no such worker.
    Never,
}

/// Messages into a worker's inbox.
#[derive(Debug)]
pub(crate) enum WorkerMsg {
    /// Take over an accepted TCP connection.
    Accept {
        /// Its identifier.
        conn_id: ConnId,
        /// The socket.
        stream: std::net::TcpStream,
        /// Peer address.
        peer: SocketAddr,
    },
    /// Open a connection to a relay and authenticate.
    Connect {
        /// Its identifier.
        conn_id: ConnId,
        /// Where.
        addr: SocketAddr,
        /// Expected RSA identity.
        rsa_id: [u8; 20],
        /// Expected Ed25519 identity, if known.
        ed_id: Option<[u8; 32]>,
    },
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
    /// Move connection `conn_id` to worker `to` (controller's balancing, or
    /// TestingMigrateEvery).
    Migrate {
        /// The connection.
        conn_id: ConnId,
        /// Destination worker.
        to: usize,
    },
    /// Take over a connection another worker moved here.
    Adopt(Box<MovedConn>),
    /// This worker's share of BandwidthRate / BandwidthBurst (bytes/s,
    /// bytes; each direction).
    BandwidthShare {
        /// Rate.
        rate: u64,
        /// Burst.
        burst: u64,
    },
    /// New immutable context (keys rotated, parameters changed).
    NewContext(Arc<SharedContext>),
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
    /// Hibernation (the accounting's hard limit): close every relay
    /// connection. [C hibernate.c hibernate_go_dormant()]
    CloseAll,
    /// Send the last counters and stop.
    Shutdown,
}

impl Worker {
    /// Handle everything in the inbox.
    pub(crate) fn drain_inbox(&mut self) {
        while let Ok(m) = self.inbox.try_recv() {
            self.on_inbox(m);
            self.apply_effects();
        }
    }

    fn on_inbox(&mut self, m: WorkerMsg) {
        match m {
            WorkerMsg::Accept {
                conn_id,
                stream,
                peer,
            } => self.accept(conn_id, stream, peer),
            WorkerMsg::Connect {
                conn_id,
                addr,
                rsa_id,
                ed_id,
            } => self.connect(conn_id, addr, rsa_id, ed_id),
            WorkerMsg::CreateOutbound {
                conn_id,
                prev,
                create2,
            } => {
                let idx = self.by_id.get(&conn_id).copied();
                self.core.create_outbound(idx, prev, &create2);
            }
            WorkerMsg::ExtendFailed { half, reason, why } => {
                self.core.extend_failed(half, reason, &why)
            }
            WorkerMsg::Destroy { half, reason } => {
                self.core.destroy_half(half, reason);
                self.core.flush_destroys();
            }
            WorkerMsg::Migrate { conn_id, to } => self.migrate_out(conn_id, to),
            WorkerMsg::DosMark { ip, secs } => self.core.dos_mark(ip, secs),
            WorkerMsg::OomQuery { round } => {
                let circuits = self.core.oom_candidates();
                let _ = self.controller.send(ControllerMsg::OomCandidates {
                    worker: self.id,
                    round,
                    circuits,
                });
            }
            WorkerMsg::OomKill { min_age_ns } => {
                self.core.oom_kill(min_age_ns);
                self.report_queue_growth();
            }
            WorkerMsg::Introduce2 { to, from, payload } => self.core.introduce2(to, from, &payload),
            WorkerMsg::IntroduceAck { to, status } => self.core.introduce_ack(to, status),
            WorkerMsg::RendezvousEstablished { half, ok } => {
                self.core.rendezvous_established(half, ok)
            }
            WorkerMsg::Splice {
                half,
                peer,
                rendezvous2,
            } => self.core.splice(half, peer, rendezvous2.as_deref()),
            WorkerMsg::ConfluxJoin { leg, link } => self.core.conflux_join(leg, &link),
            WorkerMsg::Adopt(m) => self.adopt(*m),
            WorkerMsg::BandwidthShare { rate, burst } => {
                self.read_bucket.set(rate, burst);
                self.write_bucket.set(rate, burst);
            }
            WorkerMsg::SelfTest {
                conn_id,
                first,
                rest,
                cells,
            } => {
                if let Some(&idx) = self.by_id.get(&conn_id) {
                    self.core.start_selftest(idx, &first, rest, cells);
                }
            }
            WorkerMsg::NewContext(c) => {
                self.core.set_context(c.clone());
                self.ctx = c;
            }
            WorkerMsg::Resolved(a) => self.core.stream_resolved(a),
            WorkerMsg::DirDocuments(d) => self.core.set_dir_documents(d),
            WorkerMsg::CloseAll => {
                let all: Vec<usize> = self.conns.iter().map(|(idx, _)| idx).collect();
                for idx in all {
                    self.close_later(idx, "hibernating: the accounting limit is reached".into());
                }
            }
            WorkerMsg::Shutdown => {
                self.report();
                let _ = self
                    .controller
                    .send(ControllerMsg::WorkerStopped { worker: self.id });
                self.stopping = true;
            }
        }
    }

    /// Move connection `conn_id` to worker `to` (step 1 of the migration,
    /// [`super::migrate`]): if it is open, not closing and free to move,
    /// its socket and circuits leave together. A connection that is busy
    /// for the moment (its read cell waits for ring room, a CREATE2 waits
    /// for its handshake, a circuit is inside an earlier move) is tried
    /// again every round for up to [`MOVE_RETRY`]: under load a heavy
    /// connection is often waiting for ring room, and only briefly.
    pub(crate) fn migrate_out(&mut self, conn_id: ConnId, to: usize) {
        match self.try_migrate_out(conn_id, to) {
            MoveOutcome::Moved => {}
            MoveOutcome::Busy if self.move_asked.is_none() => {
                self.move_asked = Some((conn_id, to, self.round_start + MOVE_RETRY));
            }
            MoveOutcome::Busy | MoveOutcome::Never => self.refuse_move(conn_id),
        }
    }

    /// Try again a move that found its connection busy (once a round,
    /// after the rings made room); refuse it once [`MOVE_RETRY`] is over.
    pub(crate) fn retry_move(&mut self) {
        let Some((conn_id, to, until)) = self.move_asked else {
            return;
        };
        match self.try_migrate_out(conn_id, to) {
            MoveOutcome::Busy if self.round_start < until => {}
            MoveOutcome::Moved => self.move_asked = None,
            MoveOutcome::Busy | MoveOutcome::Never => {
                self.move_asked = None;
                debug!("connection {conn_id} does not move now (inside a move, or busy)");
                self.refuse_move(conn_id);
            }
        }
    }

    fn refuse_move(&mut self, conn_id: ConnId) {
        let _ = self.controller.send(ControllerMsg::MigrationDone {
            conn_id,
            moved: false,
        });
    }

    fn try_migrate_out(&mut self, conn_id: ConnId, to: usize) -> MoveOutcome {
        if to == self.id || to >= self.peers.len() {
            return MoveOutcome::Never;
        }
        let Some(&idx) = self.by_id.get(&conn_id) else {
            return MoveOutcome::Never;
        };
        if !self
            .conns
            .get(idx)
            .is_some_and(|c| c.is_open() && c.closing.is_none())
        {
            return MoveOutcome::Never;
        }
        let Some(circuits) = self.core.detach(idx) else {
            return MoveOutcome::Busy;
        };
        let mut c = self.conns.remove(idx);
        let _ = self.poll.registry().deregister(c.link.tls_mut().tcp_mut());
        self.by_id.remove(&conn_id);
        self.to_read.retain(|&p| p != idx);
        self.starved.retain(|&p| p != idx);
        c.readable = true;
        c.writable = true;
        log_departure(conn_id, self.id, to, circuits.halves.len());
        self.peers[to].send(WorkerMsg::Adopt(Box::new(MovedConn {
            conn: c,
            circuits,
            from: self.id as u16,
        })));
        MoveOutcome::Moved
    }

    /// Take over a connection another worker moved here (step 2).
    pub(crate) fn adopt(&mut self, m: MovedConn) {
        let MovedConn {
            conn,
            circuits,
            from,
        } = m;
        let conn_id = conn.id;
        let Some(idx) = self.add_conn(conn) else {
            debug!("connection {conn_id}: adoption failed; its circuits close");
            self.core.abandon(circuits);
            let _ = self.controller.send(ControllerMsg::MigrationDone {
                conn_id,
                moved: false,
            });
            return;
        };
        self.core.attach(idx, circuits, from);
        self.to_read.push(idx);
        let _ = self.controller.send(ControllerMsg::ConnMoved {
            conn_id,
            worker: self.id,
        });
    }
}
