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

use super::conn::Conn;
use super::core::core_event::CoreEvent;
use super::core::core_msg::CoreMsg;
use super::core::migrate::{log_departure, MovedCircuits};
use super::Worker;
use crate::context::SharedContext;
use crate::messages::{ConnId, ControllerMsg};

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

/// Messages into a worker's inbox: the ones only the driver can act on (a
/// socket to take over, a connection to open or move, its bandwidth share,
/// closing and stopping), and the circuit core's ([`CoreMsg`]), which the
/// driver hands on untouched.
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
    /// New immutable context (keys rotated, parameters changed): the
    /// driver's TLS contexts and the core's keys.
    NewContext(Arc<SharedContext>),
    /// For the circuit core.
    Core(CoreMsg),
    /// Hibernation (the accounting's hard limit): close every relay
    /// connection. [C hibernate.c hibernate_go_dormant()]
    CloseAll,
    /// Send the last counters and stop.
    Shutdown,
}

impl From<CoreMsg> for WorkerMsg {
    fn from(m: CoreMsg) -> WorkerMsg {
        WorkerMsg::Core(m)
    }
}

/// A connection on its way to another worker: the driver's connection
/// (socket, TLS, buffers) and the core's circuits, which travel together.
pub(crate) struct MovedConn {
    /// The connection (socket, TLS, buffers).
    pub(crate) conn: Conn,
    /// Its circuits.
    pub(crate) circuits: MovedCircuits,
    /// The worker it comes from.
    pub(crate) from: u16,
}

impl std::fmt::Debug for MovedConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MovedConn")
            .field("circuits", &self.circuits)
            .field("from", &self.from)
            .finish()
    }
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
            WorkerMsg::Migrate { conn_id, to } => self.migrate_out(conn_id, to),
            WorkerMsg::Core(m) => self.core.handle_event(CoreEvent::Msg(m)),
            WorkerMsg::Adopt(m) => self.adopt(*m),
            WorkerMsg::BandwidthShare { rate, burst } => {
                self.read_bucket.set(rate, burst);
                self.write_bucket.set(rate, burst);
            }
            WorkerMsg::NewContext(c) => {
                self.core
                    .handle_event(CoreEvent::Msg(CoreMsg::NewContext(c.circuits.clone())));
                self.ctx = c;
            }
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
    /// [`super::core::migrate`]): if it is open, not closing and free to move,
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
        self.writing.retain(|&p| p != idx);
        c.readable = true;
        c.writable = true;
        c.writing = false;
        log_departure(conn_id, self.id, to, circuits.circuit_count());
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
            self.core
                .handle_event(CoreEvent::AdoptionFailed { circuits });
            let _ = self.controller.send(ControllerMsg::MigrationDone {
                conn_id,
                moved: false,
            });
            return;
        };
        self.core.handle_event(CoreEvent::ConnAdopted {
            idx,
            circuits,
            from,
        });
        self.to_read.push(idx);
        let _ = self.controller.send(ControllerMsg::ConnMoved {
            conn_id,
            worker: self.id,
        });
    }
}
