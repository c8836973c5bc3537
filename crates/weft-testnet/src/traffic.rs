//! Test traffic: a loopback TCP [`Sink`] that exits connect to, a SOCKS5
//! client for a tor client's SocksPort (including "attach this stream to that
//! circuit" via the control port), and [`transfer`], which moves N bytes of
//! deterministic pseudo-random data up, down or both ways and checks them by
//! SHA-256. Every loop is bounded in bytes and in time.
//!
//! Sink protocol (client → sink, then both directions at once):
//! ```text
//! request:  "WEFTSNK1" | upload u64 BE | download u64 BE | seed u64 BE
//! client → sink: `upload` bytes of pattern(seed)
//! sink → client: `download` bytes of pattern(seed ^ DOWN_TWEAK),
//!                then SHA-256 of the bytes it received (32 bytes)
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::control::{parse_stream_event, ControlClient};

const MAGIC: &[u8; 8] = b"WEFTSNK1";
const DOWN_TWEAK: u64 = 0x5eed_d0d0_5eed_d0d0;
const CHUNK: usize = 64 * 1024;
/// Idle bound on one sink connection.
const SINK_IDLE: Duration = Duration::from_secs(120);
/// Largest transfer the sink accepts per direction (a sanity bound).
pub const MAX_TRANSFER: u64 = 1 << 34;

/// Deterministic pseudo-random bytes (SplitMix64), the same on both ends.
#[derive(Debug, Clone)]
pub struct Pattern {
    state: u64,
    pending: [u8; 8],
    used: usize,
}

impl Pattern {
    /// The stream for `seed`.
    pub fn new(seed: u64) -> Self {
        Pattern {
            state: seed,
            pending: [0; 8],
            used: 8,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fill `buf` with the next bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() && self.used < 8 {
            buf[i] = self.pending[self.used];
            self.used += 1;
            i += 1;
        }
        let mut words = buf[i..].chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = words.into_remainder();
        if !rest.is_empty() {
            self.pending = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&self.pending[..n]);
            self.used = n;
        }
    }
}

/// SHA-256 of the first `len` bytes of pattern(`seed`).
pub fn pattern_digest(seed: u64, len: u64) -> [u8; 32] {
    let mut p = Pattern::new(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        p.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

/// A TCP server on 127.0.0.1 speaking the sink protocol, one thread per
/// connection. Stopped on drop.
#[derive(Debug)]
pub struct Sink {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Listen on an ephemeral port of 127.0.0.1.
    pub fn start() -> Result<Sink> {
        Sink::start_on(0)
    }

    /// Listen on `127.0.0.1:<port>` (0: ephemeral).
    pub fn start_on(port: u16) -> Result<Sink> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .with_context(|| format!("binding sink on 127.0.0.1:{port}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s, sv, er) = (stop.clone(), served.clone(), errors.clone());
        let thread = std::thread::Builder::new()
            .name("weft-testnet-sink".into())
            .spawn(move || accept_loop(listener, s, sv, er))?;
        Ok(Sink {
            addr,
            stop,
            served,
            errors,
            thread: Some(thread),
        })
    }

    /// Where the sink listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections completed without error.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Errors seen by connection handlers (most recent last).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, peer)) => {
                let (sv, er) = (served.clone(), errors.clone());
                let _ = std::thread::Builder::new()
                    .name("weft-testnet-sink-conn".into())
                    .spawn(move || match serve(conn) {
                        Ok(()) => {
                            sv.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            if let Ok(mut v) = er.lock() {
                                if v.len() < 100 {
                                    v.push(format!("{peer}: {e:#}"));
                                }
                            }
                        }
                    });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn serve(conn: TcpStream) -> Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(SINK_IDLE))?;
    conn.set_write_timeout(Some(SINK_IDLE))?;
    let mut r = conn.try_clone()?;
    let mut hdr = [0u8; 32];
    r.read_exact(&mut hdr).context("reading request")?;
    if &hdr[..8] != MAGIC {
        bail!("bad magic {:02x?}", &hdr[..8]);
    }
    let word = |i: usize| u64::from_be_bytes(hdr[i..i + 8].try_into().unwrap_or([0; 8]));
    let (up, down, seed) = (word(8), word(16), word(24));
    if up > MAX_TRANSFER || down > MAX_TRANSFER {
        bail!("transfer too large: up {up}, down {down}");
    }
    let mut w = conn.try_clone()?;
    let writer = std::thread::spawn(move || -> Result<TcpStream> {
        send_pattern(&mut w, seed ^ DOWN_TWEAK, down, None)?;
        Ok(w)
    });
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = up;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        let got = r.read(&mut buf[..n]).context("reading upload")?;
        if got == 0 {
            bail!("client closed after {} of {up} upload bytes", up - left);
        }
        h.update(&buf[..got]);
        left -= got as u64;
    }
    let mut w = writer
        .join()
        .map_err(|_| anyhow!("sink writer panicked"))??;
    let digest: [u8; 32] = h.finalize().into();
    w.write_all(&digest).context("sending upload digest")?;
    w.flush()?;
    // Wait for the client to close, so our data is not cut off by a reset.
    let _ = w.shutdown(Shutdown::Write);
    let mut sink = [0u8; 64];
    let _ = r.read(&mut sink);
    Ok(())
}

/// Write `len` bytes of pattern(`seed`); a deadline error if `deadline` passes.
fn send_pattern(w: &mut TcpStream, seed: u64, len: u64, deadline: Option<Instant>) -> Result<()> {
    let mut p = Pattern::new(seed);
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            bail!(
                "deadline passed after sending {} of {len} bytes",
                len - left
            );
        }
        let n = left.min(CHUNK as u64) as usize;
        p.fill(&mut buf[..n]);
        w.write_all(&buf[..n])
            .with_context(|| format!("sending, {} of {len} bytes done", len - left))?;
        left -= n as u64;
    }
    w.flush()?;
    Ok(())
}

/// Which way [`transfer`] moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client → sink only.
    Up,
    /// Sink → client only.
    Down,
    /// Both at once.
    Both,
}

/// The result of a verified transfer.
#[derive(Debug, Clone)]
pub struct TransferReport {
    /// Bytes sent client → sink (verified by the sink's digest).
    pub up_bytes: u64,
    /// Bytes received sink → client (verified locally).
    pub down_bytes: u64,
    /// Time from sending the request to the sink's digest.
    pub elapsed: Duration,
    /// Time from sending the request to the first downloaded byte (None if
    /// nothing was downloaded).
    pub first_byte: Option<Duration>,
}

impl TransferReport {
    /// (up + down) bytes per second over the whole transfer.
    pub fn bytes_per_sec(&self) -> f64 {
        (self.up_bytes + self.down_bytes) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for TransferReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "up {} B, down {} B in {:.2?} ({:.2} MiB/s total",
            self.up_bytes,
            self.down_bytes,
            self.elapsed,
            self.bytes_per_sec() / (1024.0 * 1024.0)
        )?;
        if let Some(fb) = self.first_byte {
            write!(f, ", first byte after {fb:.2?}")?;
        }
        write!(f, ")")
    }
}

/// Move `bytes` bytes over `stream` (connected to a [`Sink`], directly or
/// through tor) in `dir` and verify them by SHA-256; all within `timeout`.
pub fn transfer(
    stream: TcpStream,
    dir: Direction,
    bytes: u64,
    timeout: Duration,
) -> Result<TransferReport> {
    let (up, down) = match dir {
        Direction::Up => (bytes, 0),
        Direction::Down => (0, bytes),
        Direction::Both => (bytes, bytes),
    };
    transfer_sized(stream, up, down, timeout)
}

/// Like [`transfer`] with separate byte counts for each direction.
pub fn transfer_sized(
    stream: TcpStream,
    up: u64,
    down: u64,
    timeout: Duration,
) -> Result<TransferReport> {
    if up > MAX_TRANSFER || down > MAX_TRANSFER {
        bail!("transfer larger than {MAX_TRANSFER} bytes per direction");
    }
    let t0 = Instant::now();
    let deadline = t0 + timeout;
    let io_timeout = timeout
        .min(Duration::from_secs(60))
        .max(Duration::from_millis(10));
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(io_timeout))?;
    stream.set_write_timeout(Some(io_timeout))?;
    let seed: u64 = rand::random();
    let mut hdr = Vec::with_capacity(32);
    hdr.extend_from_slice(MAGIC);
    hdr.extend_from_slice(&up.to_be_bytes());
    hdr.extend_from_slice(&down.to_be_bytes());
    hdr.extend_from_slice(&seed.to_be_bytes());
    let mut w = stream.try_clone()?;
    w.write_all(&hdr).context("sending transfer request")?;
    let writer = std::thread::spawn(move || send_pattern(&mut w, seed, up, Some(deadline)));

    let mut r = stream;
    let mut expect = Pattern::new(seed ^ DOWN_TWEAK);
    let mut got_hash = Sha256::new();
    let mut want_hash = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut exp = vec![0u8; CHUNK];
    let mut first_mismatch: Option<u64> = None;
    let mut first_byte = None;
    let mut done = 0u64;
    let result = (|| -> Result<()> {
        while done < down {
            if Instant::now() >= deadline {
                bail!("timeout after {timeout:?}: received {done} of {down} bytes");
            }
            let n = (down - done).min(CHUNK as u64) as usize;
            let got = r
                .read(&mut buf[..n])
                .with_context(|| format!("receiving, {done} of {down} bytes done"))?;
            if got == 0 {
                bail!("connection closed after {done} of {down} bytes");
            }
            first_byte.get_or_insert_with(|| t0.elapsed());
            expect.fill(&mut exp[..got]);
            if first_mismatch.is_none() {
                if let Some(i) = buf[..got].iter().zip(&exp[..got]).position(|(a, b)| a != b) {
                    first_mismatch = Some(done + i as u64);
                }
            }
            got_hash.update(&buf[..got]);
            want_hash.update(&exp[..got]);
            done += got as u64;
        }
        Ok(())
    })();
    let sent = writer
        .join()
        .map_err(|_| anyhow!("transfer writer panicked"))?;
    result?;
    sent.context("upload failed")?;
    if got_hash.finalize() != want_hash.finalize() {
        bail!(
            "download corrupted: SHA-256 mismatch over {down} bytes, first differing byte at offset {}",
            first_mismatch.map_or("?".to_string(), |o| o.to_string())
        );
    }
    let mut digest = [0u8; 32];
    r.read_exact(&mut digest)
        .context("reading the sink's digest of the upload")?;
    if digest != pattern_digest(seed, up) {
        bail!("upload corrupted: the sink's SHA-256 over {up} bytes differs from what was sent");
    }
    let elapsed = t0.elapsed();
    let _ = r.shutdown(Shutdown::Both);
    Ok(TransferReport {
        up_bytes: up,
        down_bytes: down,
        elapsed,
        first_byte,
    })
}

/// SOCKS5 reply code meanings (RFC 1928 §6).
fn socks_reply_meaning(rep: u8) -> &'static str {
    match rep {
        1 => "general SOCKS server failure",
        2 => "connection not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unknown reply code",
    }
}

/// Open a TCP connection to a SOCKS5 server (tor's SocksPort), negotiate "no
/// authentication" and send CONNECT to `target` — without waiting for the
/// CONNECT reply (see [`socks5_finish`]). The returned stream's local address
/// is the `SOURCE_ADDR` tor reports in its STREAM NEW event.
pub fn socks5_begin(socks: SocketAddr, target: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&socks, timeout)
        .with_context(|| format!("connecting to SOCKS port {socks}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(&[5, 1, 0])?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m)
        .context("reading SOCKS5 method reply")?;
    if m != [5, 0] {
        bail!("SOCKS server {socks} refused 'no authentication': {m:02x?}");
    }
    // The address goes as a domain name (ATYP 3) holding the IP literal:
    // tor treats it as the same address, but ATYP 1/4 makes it log "[warn]
    // Your application ... is giving Tor only an IP address" (proto_socks.c),
    // noise in logs that tests scan for warnings.
    let host = target.ip().to_string();
    let mut req = vec![5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req)?;
    Ok(s)
}

/// Read the SOCKS5 CONNECT reply (within `timeout`); an error naming the
/// reply code unless it is "succeeded".
pub fn socks5_finish(s: &mut TcpStream, timeout: Duration) -> Result<()> {
    s.set_read_timeout(Some(timeout))?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head)
        .context("reading SOCKS5 CONNECT reply")?;
    if head[0] != 5 {
        bail!("not a SOCKS5 reply: {head:02x?}");
    }
    if head[1] != 0 {
        bail!(
            "SOCKS5 CONNECT failed: reply {} ({})",
            head[1],
            socks_reply_meaning(head[1])
        );
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            usize::from(l[0]) + 2
        }
        t => bail!("bad SOCKS5 address type {t}"),
    };
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip)?;
    Ok(())
}

/// SOCKS5 CONNECT through `socks` to `target`, letting tor pick the circuit
/// (only for clients without `__LeaveStreamsUnattached`).
pub fn socks5_connect(
    socks: SocketAddr,
    target: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream> {
    let mut s = socks5_begin(socks, target, timeout)?;
    socks5_finish(&mut s, timeout)?;
    Ok(s)
}

/// SOCKS5 CONNECT through `socks` to `host:port` (a hostname, e.g. an
/// onion address), letting tor pick the circuit. `isolation` goes as the
/// SOCKS5 username (password "x"): tor isolates streams by SOCKS
/// credentials (`IsolateSOCKSAuth`, on by default), so each distinct value
/// gets circuits of its own.
pub fn socks5_connect_host(
    socks: SocketAddr,
    host: &str,
    port: u16,
    isolation: &str,
    timeout: Duration,
) -> Result<TcpStream> {
    if host.is_empty() || host.len() > 255 || isolation.is_empty() || isolation.len() > 255 {
        bail!("SOCKS5 host and username must be 1-255 bytes");
    }
    let mut s = TcpStream::connect_timeout(&socks, timeout)
        .with_context(|| format!("connecting to SOCKS port {socks}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // Offer username/password only (RFC 1928 method 2, RFC 1929).
    s.write_all(&[5, 1, 2])?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m)
        .context("reading SOCKS5 method reply")?;
    if m != [5, 2] {
        bail!("SOCKS server {socks} refused username/password: {m:02x?}");
    }
    let mut auth = vec![1, isolation.len() as u8];
    auth.extend_from_slice(isolation.as_bytes());
    auth.extend_from_slice(&[1, b'x']);
    s.write_all(&auth)?;
    let mut a = [0u8; 2];
    s.read_exact(&mut a)
        .context("reading SOCKS5 authentication reply")?;
    if a[1] != 0 {
        bail!("SOCKS server {socks} refused the credentials: {a:02x?}");
    }
    let mut req = vec![5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req)?;
    socks5_finish(&mut s, timeout).with_context(|| format!("SOCKS5 CONNECT to {host}:{port}"))?;
    Ok(s)
}

/// Connect to `target` through the tor client at `socks` on circuit `circ`:
/// start the SOCKS request, find its STREAM NEW event on `ctrl`, ATTACHSTREAM
/// it to `circ`, then wait for the SOCKS reply. Errors quote the stream's
/// events (e.g. `REASON=EXITPOLICY`).
pub fn connect_via_circuit(
    ctrl: &mut ControlClient,
    socks: SocketAddr,
    target: SocketAddr,
    circ: u64,
    timeout: Duration,
) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    let remaining = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut s = socks5_begin(socks, target, remaining())?;
    let source = s.local_addr()?;
    let sid = ctrl.wait_stream_new(source, remaining())?;
    ctrl.attach_stream(sid, circ)?;
    match socks5_finish(&mut s, remaining()) {
        Ok(()) => Ok(s),
        Err(e) => {
            let events: Vec<String> = ctrl
                .take_events()
                .into_iter()
                .filter(|l| parse_stream_event(l).is_some_and(|ev| ev.id == sid))
                .collect();
            Err(e.context(format!(
                "stream {sid} on circuit {circ} to {target}; its events: {events:?}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_chunking_independent() {
        let mut a = Pattern::new(42);
        let mut whole = vec![0u8; 1000];
        a.fill(&mut whole);
        let mut b = Pattern::new(42);
        let mut parts = Vec::new();
        for n in [1usize, 7, 8, 3, 100, 881] {
            let mut buf = vec![0u8; n];
            b.fill(&mut buf);
            parts.extend_from_slice(&buf);
        }
        assert_eq!(whole, parts);
        assert_ne!(whole[..8], whole[8..16]);
    }

    #[test]
    fn direct_transfer_both_ways() {
        let sink = Sink::start().unwrap();
        for (up, down) in [(0, 0), (1, 0), (0, 1), (300_000, 1_000_003)] {
            let s = TcpStream::connect(sink.addr()).unwrap();
            let r = transfer_sized(s, up, down, Duration::from_secs(30)).unwrap();
            assert_eq!((r.up_bytes, r.down_bytes), (up, down));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while sink.served() < 4 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.served(), 4, "errors: {:?}", sink.errors());
    }
}
