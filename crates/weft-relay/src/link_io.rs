//! One OR link over a non-blocking socket: TLS ([`TlsLink`]), the v3 link
//! handshake (driving the sans-IO [`Handshake`] of weft-proto), then cell
//! framing on fixed buffers. Readiness-driven and edge-trigger safe: every
//! method returns instead of blocking, and reports `WouldBlock` only after the
//! socket did. Used by the relay's workers and by weft-bench's load
//! generator and sinks.
//!
//! The read buffer holds TLS plaintext; complete cells are handed to the
//! caller *in place* (mutable, so onion-layer crypto needs no copy); the
//! write buffer collects whole cells and is handed to TLS in large writes.
//! Both start small and grow on demand (the read buffer to
//! [`WAKE_READ_BUF`] at the first read, and to its full size only for a
//! large variable-length cell; the write buffer as a `Vec`, to what the
//! largest write round needed), and a link that moved no byte for a while
//! gives both back, with OpenSSL's ([`LinkConn::release_idle_buffers`]).
//! A busy link keeps what it has: no allocation per cell or per read.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use weft_proto::cell::{self, BODY_LEN, CELL_LEN};
use weft_proto::link::{Handshake, LinkIdentity, Opened};

use crate::tls::{TlsIo, TlsLink};

/// Read buffer size (TLS plaintext). A TLS record is at most 16 KiB.
pub const READ_BUF: usize = 64 * 1024;
/// Largest variable-length cell we accept after the handshake (VPADDING and
/// late handshake cells are dropped, but must be framed).
const MAX_VAR_CELL: usize = 7 + 65535;
/// A busy connection's read buffer.
const FULL_READ_BUF: usize = READ_BUF + MAX_VAR_CELL;
/// The read buffer a connection gets at its first read and again after it
/// gave its buffers up while idle ([`LinkConn::release_idle_buffers`]):
/// two TLS records, under the allocator's mmap threshold, so that a new
/// connection or one that wakes for a few cells now and then costs a small
/// heap block, not a mapping. A busy link whose buffered cells leave less
/// than four cells of room grows to [`FULL_READ_BUF`] (compacting at 16 KiB
/// of room instead cost 8-18% in end-to-end pairs at 0.15 CPU).
const WAKE_READ_BUF: usize = 32 * 1024;
/// The read buffer of a light link's next wake
/// ([`LinkConn::release_light_buffers`]): a page, for the keepalive or the
/// cell it wakes for; one fill that fills it grows it to
/// [`WAKE_READ_BUF`].
const LIGHT_READ_BUF: usize = 4 * 1024;
/// Largest TLS record plaintext (OpenSSL's buffers, [`TLS_RECORD_BUFFERS`]).
const MAX_RECORD: usize = 16 * 1024;
/// The write buffer's first allocation (on the first cell queued after the
/// handshake or an idle spell): eight cells; it grows as a `Vec` when a
/// round queues more, and keeps that size while the link is busy.
const WAKE_WRITE_BUF: usize = 8 * CELL_LEN;
/// Most bytes the driver stages in a write buffer before it flushes
/// (`worker/io.rs`: a KIST run writes its batch in chunks of this size),
/// so a busy link's buffer stays small (issue 37). 127 cells: staging
/// stops at the first cell that reaches it, so the buffer holds at most
/// 128 cells, the capacity its doubling from [`WAKE_WRITE_BUF`] reaches
/// (one cell more would double it to 256 cells, a mapping of its own past
/// malloc's 128 KiB threshold).
pub const STAGE_CHUNK: usize = 127 * CELL_LEN;
/// What OpenSSL's two record buffers take (read and write, 16 KiB of
/// plaintext each plus record overhead), counted when they are freed.
const TLS_RECORD_BUFFERS: usize = 2 * (MAX_RECORD + 1024);

/// What happened to the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoState {
    /// Bytes moved; there may be more.
    Progress,
    /// The socket said `EAGAIN`: wait for readiness.
    WouldBlock,
    /// The peer closed the connection.
    Closed,
}

/// The caller's answer for each cell in [`LinkConn::process_cells`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellFlow {
    /// Keep going.
    Continue,
    /// Stop before the next cell (backpressure); this cell was consumed.
    Pause,
}

/// A cell handed to the caller: fixed cells have a 509-byte body that may be
/// changed in place.
pub enum CellIn<'a> {
    /// A fixed-size cell.
    Fixed {
        /// Circuit ID.
        circ_id: u32,
        /// Command.
        command: u8,
        /// Body, mutable for in-place crypto.
        body: &'a mut [u8; BODY_LEN],
    },
    /// A variable-length cell (after the handshake only VPADDING is
    /// expected; others are dropped by callers).
    Var {
        /// Circuit ID.
        circ_id: u32,
        /// Command.
        command: u8,
        /// Body.
        body: &'a [u8],
    },
}

enum Phase {
    Tls,
    Link(Box<Handshake>),
    Open,
}

/// How to set up the link handshake once TLS is up.
enum Role {
    Responder,
    Initiator {
        rsa: Option<[u8; 20]>,
        ed: Option<[u8; 32]>,
    },
}

/// One link: TLS, handshake, buffers.
pub struct LinkConn {
    tls: TlsLink,
    phase: Phase,
    role: Role,
    identity: Arc<LinkIdentity>,
    peer_ip: IpAddr,
    our_addrs: Vec<IpAddr>,
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// OpenSSL's buffers were given back and TLS has not been used since:
    /// nothing to give back again.
    tls_released: bool,
    /// The buffers were last given back by a light link: the next read
    /// buffer is [`LIGHT_READ_BUF`].
    light_wake: bool,
    /// The last fill filled the read buffer to its end (a small buffer
    /// that fills grows at the next fill).
    filled_up: bool,
    /// TLS ciphertext is not visible; these count plaintext bytes.
    pub read_total: u64,
    /// Plaintext bytes handed to TLS.
    pub written_total: u64,
}

impl std::fmt::Debug for LinkConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkConn")
            .field("peer_ip", &self.peer_ip)
            .field("open", &matches!(self.phase, Phase::Open))
            .field("pending_out", &self.pending_out())
            .finish()
    }
}

impl LinkConn {
    fn new(
        tls: TlsLink,
        role: Role,
        identity: Arc<LinkIdentity>,
        peer_ip: IpAddr,
        our_addrs: Vec<IpAddr>,
    ) -> Self {
        LinkConn {
            tls,
            phase: Phase::Tls,
            role,
            identity,
            peer_ip,
            our_addrs,
            // Both buffers come with the first byte read or written.
            rbuf: Box::default(),
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            tls_released: false,
            light_wake: false,
            filled_up: false,
            read_total: 0,
            written_total: 0,
        }
    }

    /// A connection a peer opened to us.
    pub fn inbound(
        tls: TlsLink,
        identity: Arc<LinkIdentity>,
        peer_ip: IpAddr,
        our_addrs: Vec<IpAddr>,
    ) -> Self {
        Self::new(tls, Role::Responder, identity, peer_ip, our_addrs)
    }

    /// A connection we opened to a relay expected to prove these identities.
    pub fn outbound(
        tls: TlsLink,
        identity: Arc<LinkIdentity>,
        peer_ip: IpAddr,
        our_addrs: Vec<IpAddr>,
        rsa: Option<[u8; 20]>,
        ed: Option<[u8; 32]>,
    ) -> Self {
        Self::new(
            tls,
            Role::Initiator { rsa, ed },
            identity,
            peer_ip,
            our_addrs,
        )
    }

    /// The TLS link (socket registration, TCP_INFO, exporter).
    pub fn tls(&self) -> &TlsLink {
        &self.tls
    }

    /// The TLS link, mutably.
    pub fn tls_mut(&mut self) -> &mut TlsLink {
        &mut self.tls
    }

    /// True once the link handshake completed.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open)
    }

    /// Drive TLS and the link handshake as far as the socket allows.
    /// `Ok(Some(opened))` once the channel is open (cells that followed the
    /// handshake stay buffered for [`Self::process_cells`]); `Ok(None)` while
    /// waiting; `Err` closes the connection.
    pub fn advance_handshake(&mut self, now: SystemTime) -> Result<Option<Opened>, String> {
        if matches!(self.phase, Phase::Tls) {
            if !self.tls.handshake().map_err(|e| e.to_string())? {
                return Ok(None);
            }
            let hs = match self.role {
                Role::Responder => Handshake::new_responder(
                    self.identity.clone(),
                    self.peer_ip,
                    self.our_addrs.clone(),
                ),
                Role::Initiator { rsa, ed } => {
                    let cert = self
                        .tls
                        .peer_cert_der()
                        .ok_or("peer sent no TLS certificate")?;
                    let (h, versions) = Handshake::new_initiator(
                        self.identity.clone(),
                        self.peer_ip,
                        self.our_addrs.clone(),
                        rsa,
                        ed,
                        cert,
                    );
                    self.wbuf.extend_from_slice(&versions);
                    h
                }
            };
            self.phase = Phase::Link(Box::new(hs));
        }
        let mut out: Vec<Vec<u8>> = Vec::new();
        loop {
            self.flush().map_err(|e| format!("write: {e}"))?;
            let Phase::Link(hs) = &mut self.phase else {
                return Ok(None);
            };
            // Every complete cell first.
            loop {
                let frame = cell::next_frame(&self.rbuf[self.rstart..self.rend], hs.circ_id_len())
                    .map_err(|e| e.to_string())?;
                let Some((f, n)) = frame else { break };
                let ssl = self.tls.ssl();
                let mut exporter = |c: &[u8]| crate::tls::export_auth_material(ssl, c);
                let r = hs
                    .handle(f, now, &mut exporter, &mut out)
                    .map_err(|e| e.to_string())?;
                self.rstart += n;
                for c in out.drain(..) {
                    self.wbuf.extend_from_slice(&c);
                }
                if let Some(opened) = r {
                    self.phase = Phase::Open;
                    self.flush().map_err(|e| format!("write: {e}"))?;
                    return Ok(Some(opened));
                }
            }
            if self.rend - self.rstart > 256 * 1024 - 1
                || self.rbuf.len() >= FULL_READ_BUF
                    && self.rend == self.rbuf.len()
                    && self.rstart == 0
            {
                return Err("handshake cell too large".into());
            }
            match self.fill().map_err(|e| format!("read: {e}"))? {
                IoState::Progress => continue,
                IoState::WouldBlock => {
                    self.flush().map_err(|e| format!("write: {e}"))?;
                    return Ok(None);
                }
                IoState::Closed => {
                    return Err("peer closed the connection during the handshake".into())
                }
            }
        }
    }

    /// Read once from TLS into the free part of the read buffer.
    pub fn fill(&mut self) -> std::io::Result<IoState> {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rstart > 0 && self.rbuf.len() - self.rend < CELL_LEN * 4 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        if self.rbuf.len() < FULL_READ_BUF
            && (self.rbuf.len() - self.rend < CELL_LEN * 4
                || self.filled_up && self.rbuf.len() < WAKE_READ_BUF)
        {
            self.grow_read_buffer();
        }
        if self.rend >= self.rbuf.len() {
            return Ok(IoState::Progress);
        }
        let end = (self.rend + READ_BUF).min(self.rbuf.len());
        self.tls_released = false;
        match self.tls.read(&mut self.rbuf[self.rend..end])? {
            TlsIo::Done(n) => {
                self.rend += n;
                self.filled_up = self.rend == self.rbuf.len();
                self.read_total += n as u64;
                Ok(IoState::Progress)
            }
            TlsIo::WouldBlock => Ok(IoState::WouldBlock),
            TlsIo::Closed => Ok(IoState::Closed),
        }
    }

    /// Give back the buffers of an open connection that moved no byte for
    /// a while (the driver asks once a second; issue 37): the read buffer
    /// if it holds no byte, the write buffer if it is empty, and
    /// OpenSSL's. Each comes back on the connection's next read or write
    /// (one allocation when an idle connection wakes; a busy one keeps
    /// its buffers). C Tor frees an empty buffer's chunks and runs
    /// OpenSSL with `SSL_MODE_RELEASE_BUFFERS`. Returns the bytes
    /// released (OpenSSL's counted as [`TLS_RECORD_BUFFERS`]); 0 when the
    /// link holds nothing it could give back.
    pub fn release_idle_buffers(&mut self) -> usize {
        if !matches!(self.phase, Phase::Open) {
            return 0;
        }
        // A read buffer given back now was a busy one's: wake with the
        // usual size. One already given back keeps how it was given
        // back (a light link silent for a second stays light).
        if !self.rbuf.is_empty() {
            self.light_wake = false;
        }
        self.release_buffers()
    }

    /// The same for a light link (one that moves a few cells now and
    /// then), as soon as its buffers are empty; its next read buffer is a
    /// page ([`LIGHT_READ_BUF`]), grown when a read fills it.
    pub fn release_light_buffers(&mut self) -> usize {
        if !matches!(self.phase, Phase::Open) {
            return 0;
        }
        self.light_wake = true;
        self.release_buffers()
    }

    fn release_buffers(&mut self) -> usize {
        let mut freed = 0;
        if self.rstart == self.rend && !self.rbuf.is_empty() {
            freed += self.rbuf.len();
            self.rbuf = Box::default();
            self.rstart = 0;
            self.rend = 0;
        }
        if self.wpos == self.wbuf.len() && self.wbuf.capacity() > 0 {
            freed += self.wbuf.capacity();
            self.wbuf = Vec::new();
            self.wpos = 0;
        }
        if !self.tls_released && self.tls.release_buffers() {
            self.tls_released = true;
            freed += TLS_RECORD_BUFFERS;
        }
        freed
    }

    /// A read buffer at the first read or after an idle spell (small: a
    /// page after a light link's release), the wake size when a page
    /// filled, or the full one when the wake size filled up with one
    /// large cell; what it held (from `rstart`, which is then 0) is kept.
    #[cold]
    fn grow_read_buffer(&mut self) {
        let len = if self.rbuf.is_empty() && self.light_wake {
            LIGHT_READ_BUF
        } else if self.rbuf.len() < WAKE_READ_BUF {
            WAKE_READ_BUF
        } else {
            FULL_READ_BUF
        };
        let mut b = vec![0u8; len].into_boxed_slice();
        let held = self.rend - self.rstart;
        b[..held].copy_from_slice(&self.rbuf[self.rstart..self.rend]);
        self.rbuf = b;
        self.rstart = 0;
        self.rend = held;
    }

    /// Bytes read but not yet handed out as cells.
    pub fn buffered_in(&self) -> usize {
        self.rend - self.rstart
    }

    /// Hand every complete buffered cell (link protocol ≥ 4 framing) to `f`,
    /// until the buffer holds no complete cell or `f` pauses.
    pub fn process_cells(
        &mut self,
        mut f: impl FnMut(CellIn<'_>) -> CellFlow,
    ) -> Result<(), String> {
        loop {
            let avail = &mut self.rbuf[self.rstart..self.rend];
            if avail.len() < 5 {
                return Ok(());
            }
            let circ_id = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]);
            let command = avail[4];
            let flow = if cell::is_var_cmd(command) {
                if avail.len() < 7 {
                    return Ok(());
                }
                let len = usize::from(u16::from_be_bytes([avail[5], avail[6]]));
                if avail.len() < 7 + len {
                    return Ok(());
                }
                self.rstart += 7 + len;
                f(CellIn::Var {
                    circ_id,
                    command,
                    body: &avail[7..7 + len],
                })
            } else {
                if avail.len() < CELL_LEN {
                    return Ok(());
                }
                self.rstart += CELL_LEN;
                let body: &mut [u8; BODY_LEN] = (&mut avail[5..CELL_LEN])
                    .try_into()
                    .map_err(|_| "cell slicing".to_string())?;
                f(CellIn::Fixed {
                    circ_id,
                    command,
                    body,
                })
            };
            if flow == CellFlow::Pause {
                return Ok(());
            }
        }
    }

    /// Make room for `n` more bytes without growing the buffer if written
    /// bytes can be dropped from its front instead.
    #[inline]
    fn room(&mut self, n: usize) {
        if self.wbuf.capacity() == 0 {
            // New, or released while idle
            // ([`LinkConn::release_idle_buffers`]).
            self.wbuf.reserve(WAKE_WRITE_BUF);
        }
        if self.wpos > 0 && self.wbuf.len() + n > self.wbuf.capacity() {
            self.wbuf.drain(..self.wpos);
            self.wpos = 0;
        }
    }

    /// Append a fixed-size cell (link ≥ 4) to the write buffer.
    pub fn queue_cell(&mut self, circ_id: u32, command: u8, body: &[u8; BODY_LEN]) {
        self.room(CELL_LEN);
        self.wbuf.extend_from_slice(&circ_id.to_be_bytes());
        self.wbuf.push(command);
        self.wbuf.extend_from_slice(body);
    }

    /// Append a fixed-size cell whose body is `data` padded with zeros.
    pub fn queue_small(&mut self, circ_id: u32, command: u8, data: &[u8]) {
        self.room(CELL_LEN);
        let n = data.len().min(BODY_LEN);
        self.wbuf.extend_from_slice(&circ_id.to_be_bytes());
        self.wbuf.push(command);
        self.wbuf.extend_from_slice(&data[..n]);
        self.wbuf.resize(self.wbuf.len() + BODY_LEN - n, 0);
    }

    /// Bytes waiting to be written.
    pub fn pending_out(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Write as much of the write buffer as TLS and the socket take.
    /// `Ok(true)` when it is empty.
    pub fn flush(&mut self) -> std::io::Result<bool> {
        while self.wpos < self.wbuf.len() {
            self.tls_released = false;
            match self.tls.write(&self.wbuf[self.wpos..])? {
                TlsIo::Done(n) => {
                    self.wpos += n;
                    self.written_total += n as u64;
                }
                TlsIo::WouldBlock => break,
                TlsIo::Closed => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "TLS closed",
                    ))
                }
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            Ok(true)
        } else {
            // The unwritten rest stays where it is (OpenSSL's retry rule
            // allows the buffer to move, but moving it costs a copy); room
            // is made when the next cell would not fit.
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use weft_crypto::keys::{LinkKeys, RelayKeys};

    use super::*;

    fn identity(
        dir: &std::path::Path,
        nick: &str,
    ) -> (
        Arc<LinkIdentity>,
        openssl::ssl::SslAcceptor,
        openssl::ssl::SslConnector,
    ) {
        let now = SystemTime::now();
        let keys =
            RelayKeys::load_or_create(&dir.join(nick), nick, Duration::from_secs(86400), now)
                .unwrap();
        let link = LinkKeys::generate(&keys, now).unwrap();
        let (a, c) = crate::tls::contexts(&link).unwrap();
        (Arc::new(LinkIdentity::from_keys(&keys, &link)), a, c)
    }

    /// Two open links over loopback (`a` opened the connection to `b`).
    fn open_pair() -> (LinkConn, LinkConn) {
        let dir = tempfile::tempdir().unwrap();
        let (ida, _, conn_a) = identity(dir.path(), "linka");
        let (idb, acc_b, _) = identity(dir.path(), "linkb");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ta = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (tb, _) = listener.accept().unwrap();
        ta.set_nonblocking(true).unwrap();
        tb.set_nonblocking(true).unwrap();
        let lo: IpAddr = [127, 0, 0, 1].into();
        let tls_a = TlsLink::connect(&conn_a, mio::net::TcpStream::from_std(ta)).unwrap();
        let tls_b = TlsLink::accept(&acc_b, mio::net::TcpStream::from_std(tb)).unwrap();
        let mut a = LinkConn::outbound(tls_a, ida, lo, vec![lo], None, None);
        let mut b = LinkConn::inbound(tls_b, idb, lo, vec![lo]);
        let (mut oa, mut ob) = (false, false);
        for _ in 0..2000 {
            let now = SystemTime::now();
            oa |= a.advance_handshake(now).unwrap().is_some();
            ob |= b.advance_handshake(now).unwrap().is_some();
            if oa && ob {
                return (a, b);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the link handshake did not finish in 2 s");
    }

    /// Send `n` cells from `a`; read them at `b` (bounded); their circuit IDs.
    fn carry(a: &mut LinkConn, b: &mut LinkConn, n: u32) -> Vec<u32> {
        for i in 0..n {
            a.queue_cell(i + 1, weft_proto::cell::cmd::RELAY, &[i as u8; BODY_LEN]);
        }
        let mut got = Vec::new();
        for _ in 0..4000 {
            a.flush().unwrap();
            let _ = b.fill().unwrap();
            b.process_cells(|c| {
                if let CellIn::Fixed { circ_id, .. } = c {
                    got.push(circ_id);
                }
                CellFlow::Continue
            })
            .unwrap();
            if got.len() >= n as usize && b.buffered_in() == 0 && a.pending_out() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        got
    }

    /// Send 300 cells (150 KiB) from `a` and let `b` read them without
    /// handing any out (a reader that waits for ring room) until 200 are
    /// held: its read buffer must have grown to full size, keeping every
    /// byte; then read them all.
    fn hold_a_burst_then_read_it(a: &mut LinkConn, b: &mut LinkConn) {
        for i in 0..300 {
            a.queue_cell(i + 1, weft_proto::cell::cmd::RELAY, &[1; BODY_LEN]);
        }
        for _ in 0..4000 {
            a.flush().unwrap();
            let _ = b.fill().unwrap();
            if b.buffered_in() >= 200 * CELL_LEN {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(b.rbuf.len(), FULL_READ_BUF);
        let got = carry(a, b, 0);
        assert_eq!(got, (1..=300).collect::<Vec<u32>>());
    }

    /// A light link gives its buffers back as soon as they empty and
    /// wakes with a page: a cell fits; a burst grows it to the wake size
    /// at once and on to the full size, so a light link that turns busy
    /// reads as a busy one.
    #[test]
    fn a_light_link_wakes_with_a_page_and_grows_when_it_fills() {
        let (mut a, mut b) = open_pair();
        assert_eq!(carry(&mut a, &mut b, 2), [1, 2]);
        assert!(b.release_light_buffers() >= WAKE_READ_BUF);
        assert_eq!(b.rbuf.len(), 0);
        assert_eq!(carry(&mut a, &mut b, 1), [1]);
        assert_eq!(b.rbuf.len(), LIGHT_READ_BUF);
        b.release_light_buffers();
        // Silent for a second: the idle pass finds its buffers given
        // back already, and it still wakes with a page.
        assert_eq!(b.release_idle_buffers(), 0);
        assert_eq!(carry(&mut a, &mut b, 1), [1]);
        assert_eq!(b.rbuf.len(), LIGHT_READ_BUF);
        b.release_light_buffers();
        // 300 cells held: the page fills, then the wake size, then it is
        // full size, keeping every byte.
        hold_a_burst_then_read_it(&mut a, &mut b);
        // An idle release after that wakes with the usual size.
        b.release_idle_buffers();
        assert_eq!(carry(&mut a, &mut b, 1), [1]);
        assert_eq!(b.rbuf.len(), WAKE_READ_BUF);
    }

    /// An idle link gives its buffers back and reads on: a few cells in
    /// the small buffer it gets back, then a burst that makes it grow.
    #[test]
    fn an_idle_link_gives_back_its_buffers_and_reads_on() {
        let (mut a, mut b) = open_pair();
        assert_eq!(carry(&mut a, &mut b, 3), [1, 2, 3]);
        let freed = b.release_idle_buffers();
        assert!(freed >= WAKE_READ_BUF + TLS_RECORD_BUFFERS, "freed {freed}");
        assert_eq!(b.rbuf.len(), 0);
        assert_eq!(b.wbuf.capacity(), 0);
        assert_eq!(b.release_idle_buffers(), 0, "nothing left to give back");
        assert!(a.release_idle_buffers() > 0);
        assert_eq!(carry(&mut a, &mut b, 3), [1, 2, 3]);
        assert_eq!(b.rbuf.len(), WAKE_READ_BUF);
        // 300 cells (150 KiB) read before any is handed out (a reader
        // that waits for ring room): the small buffer fills and grows,
        // keeping what it held.
        hold_a_burst_then_read_it(&mut a, &mut b);
        // The read buffer stays while it holds part of a cell.
        b.rend = b.rstart + 1;
        b.release_idle_buffers();
        assert_eq!(b.rbuf.len(), FULL_READ_BUF);
    }

    /// A new link holds small buffers after its handshake, and a busy one
    /// reads a record at a time without growing its read buffer: the
    /// full-size buffer is only for a large variable-length cell.
    #[test]
    fn buffers_start_small_and_a_busy_link_keeps_them_small() {
        let (mut a, mut b) = open_pair();
        for l in [&a, &b] {
            assert!(
                l.rbuf.len() <= WAKE_READ_BUF,
                "read buffer {}",
                l.rbuf.len()
            );
            assert!(
                l.wbuf.capacity() <= 4 * 1024,
                "write buffer {}",
                l.wbuf.capacity()
            );
        }
        // 2,000 cells (1 MiB) in bursts of 100, read as they come.
        let mut got = Vec::new();
        for burst in 0..20 {
            got.extend(
                carry(&mut a, &mut b, 100)
                    .into_iter()
                    .map(|c| c + burst * 100),
            );
        }
        assert_eq!(got.len(), 2000);
        assert_eq!(
            b.rbuf.len(),
            WAKE_READ_BUF,
            "no growth for fixed cells read in turn"
        );
        // The writer's buffer grew to what a burst needed, not more.
        assert!(
            a.wbuf.capacity() <= 128 * CELL_LEN,
            "write buffer {}",
            a.wbuf.capacity()
        );
    }

    /// A staged chunk ([`STAGE_CHUNK`]) and the one cell that reaches it
    /// fit the capacity the write buffer doubles to: 128 cells.
    #[test]
    fn a_staged_chunk_fits_the_doubled_write_buffer() {
        let (mut a, _b) = open_pair();
        a.wbuf = Vec::new();
        a.wpos = 0;
        let body = [0u8; BODY_LEN];
        while a.pending_out() < STAGE_CHUNK {
            a.queue_cell(1, 3, &body);
        }
        assert_eq!(a.pending_out(), STAGE_CHUNK);
        a.queue_cell(1, 3, &body);
        assert_eq!(a.wbuf.capacity(), 128 * CELL_LEN);
    }
}
