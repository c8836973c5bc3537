//! One OR connection as the worker's driver owns it: the link (socket, TLS,
//! handshake, buffers, [`LinkConn`]) and its event-loop state (readiness
//! flags, closing), and its life: accept, connect, the link
//! handshake, closing. Its circuits are the core's ([`super::core`]),
//! under the same slot index.

use std::net::SocketAddr;
use std::time::SystemTime;

use mio::net::TcpStream;
use mio::{Interest, Token};
use tracing::{debug, info};
use weft_proto::cell::destroy_reason;
use weft_proto::link::PeerKind;

use super::core::core_event::CoreEvent;
use super::Worker;
use crate::link_io::LinkConn;
use crate::messages::{ConnId, ControllerMsg};
use crate::tls::TlsLink;

/// Bytes a link may move in two seconds and still count as light
/// ([`Conn::is_light`]): sixteen cells, a few keepalives or pings.
pub(crate) const LIGHT_LINK_BYTES: u64 = 16 * 514;

/// Where a connection is in its life.
pub(crate) enum ConnState {
    /// Outbound TCP connect in progress.
    Connecting,
    /// TLS and link handshake in progress.
    Handshaking,
    /// Open: cells flow.
    Open {
        /// Who the peer is.
        peer: PeerKind,
    },
}

/// One connection owned by a worker's driver.
pub(crate) struct Conn {
    /// Controller-assigned identifier.
    pub(crate) id: ConnId,
    /// TLS + link handshake + buffers.
    pub(crate) link: LinkConn,
    /// Lifecycle.
    pub(crate) state: ConnState,
    /// TCP peer.
    pub(crate) peer_addr: SocketAddr,
    /// We opened the TCP connection.
    pub(crate) we_initiated: bool,
    /// The socket said readable and we have not yet read until EAGAIN.
    pub(crate) readable: bool,
    /// The socket may take more bytes (no EAGAIN since the last writable
    /// event).
    pub(crate) writable: bool,
    /// On the worker's writing list ([`super::io`]).
    pub(crate) writing: bool,
    /// Close at the end of this round, with this reason.
    pub(crate) closing: Option<String>,
    /// Bytes read and written since the last report (load balancing).
    pub(crate) bytes_recent: u64,
    /// `bytes_recent` of the second before.
    pub(crate) bytes_last_second: u64,
}

impl Conn {
    /// A connection that starts with the given link.
    pub(crate) fn new(
        id: ConnId,
        link: LinkConn,
        state: ConnState,
        peer_addr: SocketAddr,
        we_initiated: bool,
    ) -> Self {
        Conn {
            id,
            link,
            state,
            peer_addr,
            we_initiated,
            readable: true,
            writable: true,
            writing: false,
            closing: None,
            bytes_recent: 0,
            bytes_last_second: 0,
        }
    }

    /// A link that moved at most [`LIGHT_LINK_BYTES`] in this second and
    /// the one before: it gives its buffers back as soon as they empty,
    /// as C Tor's links do (`SSL_MODE_RELEASE_BUFFERS`, empty `buf_t`
    /// chunks freed). A busy link keeps them, so relaying allocates
    /// nothing.
    pub(crate) fn is_light(&self) -> bool {
        self.bytes_recent + self.bytes_last_second <= LIGHT_LINK_BYTES
    }

    /// True once the link handshake is done.
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.state, ConnState::Open { .. })
    }

    /// The peer, once open.
    pub(crate) fn peer(&self) -> Option<&PeerKind> {
        match &self.state {
            ConnState::Open { peer } => Some(peer),
            _ => None,
        }
    }
}

impl Worker {
    /// Register `c`'s socket and give it a slot; None if the socket cannot
    /// be registered.
    pub(crate) fn add_conn(&mut self, c: Conn) -> Option<usize> {
        let entry = self.conns.vacant_entry();
        let idx = entry.key();
        let id = c.id;
        let conn = entry.insert(c);
        if let Err(e) = self.poll.registry().register(
            conn.link.tls_mut().tcp_mut(),
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            info!("connection {id}: cannot register socket: {e}");
            self.conns.remove(idx);
            return None;
        }
        self.by_id.insert(id, idx);
        if !conn.is_open() {
            self.core.handle_event(CoreEvent::ConnStarted { idx });
        }
        Some(idx)
    }

    /// Take over an accepted TCP connection.
    pub(crate) fn accept(
        &mut self,
        conn_id: ConnId,
        stream: std::net::TcpStream,
        peer: SocketAddr,
    ) {
        let r = (|| -> std::io::Result<LinkConn> {
            stream.set_nonblocking(true)?;
            let tcp = TcpStream::from_std(stream);
            let _ = tcp.set_nodelay(true);
            let tls = TlsLink::accept(&self.ctx.acceptor, tcp)?;
            Ok(LinkConn::inbound(
                tls,
                self.ctx.link.clone(),
                peer.ip(),
                self.ctx.our_addrs.clone(),
            ))
        })();
        match r {
            Ok(link) => {
                let c = Conn::new(conn_id, link, ConnState::Handshaking, peer, false);
                match self.add_conn(c) {
                    Some(idx) => self.advance_handshake(idx),
                    None => {
                        let _ = self.controller.send(ControllerMsg::ConnClosed { conn_id });
                    }
                }
            }
            Err(e) => {
                info!("connection {conn_id} from {peer}: {e}");
                let _ = self.controller.send(ControllerMsg::ConnClosed { conn_id });
            }
        }
    }

    /// Open a connection to a relay and authenticate.
    pub(crate) fn connect(
        &mut self,
        conn_id: ConnId,
        addr: SocketAddr,
        rsa: [u8; 20],
        ed: Option<[u8; 32]>,
    ) {
        let r = (|| -> std::io::Result<LinkConn> {
            let from = self
                .ctx
                .outbound
                .source_for(crate::outbound::Purpose::Or, &addr);
            let tcp = crate::outbound::connect(addr, from)?;
            let _ = tcp.set_nodelay(true);
            let tls = TlsLink::connect(&self.ctx.connector, tcp)?;
            Ok(LinkConn::outbound(
                tls,
                self.ctx.link.clone(),
                addr.ip(),
                self.ctx.our_addrs.clone(),
                Some(rsa),
                ed,
            ))
        })();
        match r {
            Ok(link) => {
                let mut c = Conn::new(conn_id, link, ConnState::Connecting, addr, true);
                c.readable = false;
                c.writable = false;
                if self.add_conn(c).is_none() {
                    self.conn_failed(
                        conn_id,
                        addr,
                        destroy_reason::CONNECTFAILED,
                        "cannot register the socket".into(),
                    );
                }
            }
            Err(e) => self.conn_failed(
                conn_id,
                addr,
                destroy_reason::CONNECTFAILED,
                format!("cannot connect: {e}"),
            ),
        }
    }

    fn conn_failed(&self, conn_id: ConnId, addr: SocketAddr, reason: u8, why: String) {
        info!("connection {conn_id} to {addr}: {why}");
        let _ = self.controller.send(ControllerMsg::ConnFailed {
            conn_id,
            reason,
            why,
        });
    }

    /// Drive connection `idx`'s TCP connect, TLS and link handshake; once
    /// open, its circuits start in the core.
    pub(crate) fn advance_handshake(&mut self, idx: usize) {
        let Some(c) = self.conns.get_mut(idx) else {
            return;
        };
        if c.closing.is_some() || c.is_open() {
            return;
        }
        if matches!(c.state, ConnState::Connecting) {
            if !c.writable {
                return;
            }
            let tcp = c.link.tls().tcp();
            let failed = match tcp.take_error() {
                Ok(None) => match tcp.peer_addr() {
                    Ok(_) => None,
                    Err(e) if e.kind() == std::io::ErrorKind::NotConnected => return,
                    Err(e) => Some(e),
                },
                Ok(Some(e)) | Err(e) => Some(e),
            };
            if let Some(e) = failed {
                return self.close_later(idx, format!("connect failed: {e}"));
            }
            c.state = ConnState::Handshaking;
        }
        match c.link.advance_handshake(SystemTime::now()) {
            Ok(None) => {}
            Ok(Some(opened)) => {
                debug!(
                    "connection {} with {} open: link {}, peer {:?}, canonical {}",
                    c.id, c.peer_addr, opened.link_version, opened.peer, opened.canonical
                );
                let peer_rsa = match &opened.peer {
                    PeerKind::Relay { rsa_fp, .. } => Some(*rsa_fp),
                    _ => None,
                };
                c.state = ConnState::Open {
                    peer: opened.peer.clone(),
                };
                c.readable = true;
                let (id, addr, out) = (c.id, c.peer_addr, c.we_initiated);
                // C's check in onionskin_answer(): an inbound connection
                // whose peer names our address of that family.
                let proves_reachable = !out
                    && opened.our_addr_seen.is_some_and(|a| {
                        a.is_ipv6() == addr.is_ipv6() && self.ctx.our_addrs.contains(&a)
                    });
                self.core.handle_event(CoreEvent::ConnOpened {
                    idx,
                    id,
                    peer_addr: addr,
                    we_initiated: out,
                    peer_rsa,
                    canonical: opened.canonical,
                    link_version: opened.link_version,
                    proves_reachable,
                });
                let _ = self.controller.send(ControllerMsg::ConnOpened {
                    conn_id: id,
                    worker: self.id,
                    peer: opened.peer,
                    canonical: opened.canonical,
                    outbound: out,
                    addr,
                    our_addr_seen: opened.our_addr_seen,
                });
                // Cells that followed the handshake are already buffered.
                self.to_read.push(idx);
            }
            Err(why) => self.close_later(idx, format!("link handshake failed: {why}")),
        }
    }

    /// Mark connection `idx` for closing at the end of the round.
    pub(crate) fn close_later(&mut self, idx: usize, why: String) {
        if let Some(c) = self.conns.get_mut(idx) {
            if c.closing.is_none() {
                c.closing = Some(why);
                self.to_close.push(idx);
            }
        }
    }

    /// Close connections marked closing: the core drops their circuits
    /// (DESTROY to every peer half), the controller hears of it, the slot
    /// is freed.
    pub(crate) fn reap(&mut self) {
        while let Some(idx) = self.to_close.pop() {
            if self.conns.get(idx).is_some_and(|c| c.closing.is_some()) {
                self.close_conn(idx);
            }
        }
    }

    fn close_conn(&mut self, idx: usize) {
        let mut c = self.conns.remove(idx);
        let why = c.closing.take().unwrap_or_default();
        let _ = self.poll.registry().deregister(c.link.tls_mut().tcp_mut());
        // Best effort: what is already staged (e.g. DESTROY cells).
        let _ = c.link.flush();
        self.by_id.remove(&c.id);
        self.core.handle_event(CoreEvent::ConnClosed { idx });
        self.to_read.retain(|&p| p != idx);
        self.writing.retain(|&p| p != idx);
        self.starved.retain(|&p| p != idx);
        let open = c.is_open();
        if !open && c.we_initiated {
            let reason = if why.contains("identity") {
                destroy_reason::OR_IDENTITY
            } else {
                destroy_reason::CONNECTFAILED
            };
            self.conn_failed(c.id, c.peer_addr, reason, why);
            return;
        }
        if why.contains("peer closed") {
            debug!("connection {} with {} closed: {why}", c.id, c.peer_addr);
        } else {
            info!(
                "connection {} with {} ({:?}) closed: {why}",
                c.id,
                c.peer_addr,
                c.peer()
            );
        }
        // Also for inbound connections that never opened: the controller
        // counts every accepted connection (ConnLimit, DoS).
        let _ = self
            .controller
            .send(ControllerMsg::ConnClosed { conn_id: c.id });
    }
}
