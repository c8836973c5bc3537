//! The ControlPort's I/O on the main thread: the listeners (TCP, loopback
//! by default, and unix sockets), the cookie file (32 random bytes, 0600
//! or 0640, written anew at each start as C Tor does), one task per
//! connection that reads commands and writes what the controller sends
//! it, and the controller's table of sessions: it answers each command
//! with [`crate::control::Session`], sends BW events every second, log
//! events from the log feed and SIGNAL events. A controller that does not
//! read its events is disconnected, not buffered without end.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{info, warn};
use weft_crypto::control_auth::{HashedPassword, COOKIE_LEN};

use crate::context::{ControlListener, ControlSettings};
use crate::control::{
    bw_event, log_event, signal_event, AuthSettings, ControlInfo, InfoError, LogLine, Session,
    Severity, Signal, MAX_COMMAND_LEN,
};

/// Log lines queued for the controller thread before new ones are
/// dropped.
const LOG_QUEUE: usize = 1024;

/// The sending end of the log feed, for the logging layer (any thread).
#[derive(Debug, Clone)]
pub struct LogSender {
    tx: mpsc::Sender<LogLine>,
    wanted: Arc<AtomicU8>,
}

impl LogSender {
    /// Whether a controller wants lines of this severity (cheap: one
    /// atomic load).
    pub fn wants(&self, sev: Severity) -> bool {
        (sev as u8) >= self.wanted.load(Ordering::Relaxed)
    }

    /// Queue a line; dropped when the queue is full.
    pub fn send(&self, severity: Severity, message: String) {
        let _ = self.tx.try_send(LogLine { severity, message });
    }
}

/// The receiving end of the log feed, for [`crate::controller::run_relay_with`].
#[derive(Debug)]
pub struct LogFeed {
    lines: mpsc::Receiver<LogLine>,
    wanted: Arc<AtomicU8>,
}

impl LogFeed {
    /// The next log line.
    pub async fn recv(&mut self) -> Option<LogLine> {
        self.lines.recv().await
    }

    /// What the ControlPort updates with the severities it wants.
    pub fn wanted(&self) -> Arc<AtomicU8> {
        self.wanted.clone()
    }
}

/// A log feed from the logging layer to the ControlPort: nothing is
/// wanted until a controller subscribes.
pub fn log_feed() -> (LogSender, LogFeed) {
    let (tx, lines) = mpsc::channel(LOG_QUEUE);
    let wanted = Arc::new(AtomicU8::new(u8::MAX));
    (
        LogSender {
            tx,
            wanted: wanted.clone(),
        },
        LogFeed { lines, wanted },
    )
}

/// Messages and events queued for one controller before it is dropped.
const OUT_QUEUE: usize = 1024;
/// Bytes queued for one controller before it is dropped (one reply of any
/// size is always queued: `GETINFO ns/all` on a large network is a few MB).
const OUT_QUEUE_BYTES: usize = 16 << 20;

/// Where one controller's replies and events go: the queue to its socket
/// task, bounded in messages and in bytes (the task subtracts what it
/// wrote), so a controller that asks and does not read is closed.
#[derive(Debug, Clone)]
pub struct ControlOutQueue {
    tx: mpsc::Sender<ControlOut>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl ControlOutQueue {
    /// Queue `text`; false when the queue is full (in messages or bytes).
    fn push(&self, text: String) -> bool {
        let len = text.len();
        let before = self.queued.load(Ordering::Relaxed);
        if before > 0 && before.saturating_add(len) > OUT_QUEUE_BYTES {
            return false;
        }
        // Counted before it can be written (and subtracted by the writer).
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.try_send(ControlOut::Text(text)).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn close(&self) {
        let _ = self.tx.try_send(ControlOut::Close);
    }
}
/// BW events kept for `bw-event-cache` (C Tor's `N_BW_EVENTS_TO_CACHE`).
const BW_CACHE: usize = 300;

/// From a connection task to the controller.
#[derive(Debug)]
pub enum ControlIn {
    /// A controller connected.
    Opened {
        /// Connection id.
        id: u64,
        /// Where its replies and events go.
        out: ControlOutQueue,
    },
    /// One command (multi-line commands whole).
    Command {
        /// Connection id.
        id: u64,
        /// Its text.
        text: String,
    },
    /// The connection closed.
    Closed {
        /// Connection id.
        id: u64,
    },
}

/// From the controller to a connection task.
#[derive(Debug)]
pub enum ControlOut {
    /// Write this.
    Text(String),
    /// Close after what was written.
    Close,
}

/// The ControlPort: listeners, sessions, events.
pub struct ControlPorts {
    auth: AuthSettings,
    sessions: HashMap<u64, (Session, ControlOutQueue)>,
    /// Commands and connection events from the tasks.
    pub rx: mpsc::UnboundedReceiver<ControlIn>,
    /// The least severe log level a controller wants (255: none), read
    /// by the log feed.
    log_wanted: Arc<AtomicU8>,
    last_totals: (u64, u64),
    bw_cache: VecDeque<(u64, u64)>,
    listening: Vec<String>,
}

/// The next command from a controller, or never without a ControlPort.
pub(super) async fn next_control(c: &mut Option<ControlPorts>) -> ControlIn {
    match c {
        Some(c) => match c.rx.recv().await {
            Some(m) => m,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The next log line for the ControlPort, or never without a feed.
pub(super) async fn next_log(f: &mut Option<LogFeed>) -> LogLine {
    match f {
        Some(f) => match f.recv().await {
            Some(l) => l,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Write the cookie file: 32 random bytes, 0600 (0640 when group
/// readable), replaced atomically.
fn write_cookie(path: &Path, group_readable: bool) -> anyhow::Result<[u8; COOKIE_LEN]> {
    let cookie: [u8; COOKIE_LEN] = weft_crypto::random_array();
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if group_readable { 0o640 } else { 0o600 })
            .open(&tmp)?;
        f.write_all(&cookie)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(cookie)
}

impl ControlPorts {
    /// Bind the listeners and write the cookie; `None` when there is no
    /// ControlPort.
    pub async fn open(
        settings: &ControlSettings,
        data_dir: &Path,
        log_wanted: Arc<AtomicU8>,
    ) -> anyhow::Result<Option<ControlPorts>> {
        if settings.listeners.is_empty() {
            return Ok(None);
        }
        let mut auth = AuthSettings::default();
        if settings.cookie_auth {
            let path = settings
                .cookie_file
                .clone()
                .unwrap_or_else(|| data_dir.join("control_auth_cookie"));
            let cookie = write_cookie(&path, settings.cookie_group_readable).map_err(|e| {
                anyhow::anyhow!("cannot write control cookie {}: {e}", path.display())
            })?;
            auth.cookie = Some(cookie);
            auth.cookie_path = std::path::absolute(&path)
                .unwrap_or(path)
                .display()
                .to_string();
        }
        for p in &settings.hashed_passwords {
            auth.passwords.push(
                HashedPassword::parse(p)
                    .ok_or_else(|| anyhow::anyhow!("bad HashedControlPassword"))?,
            );
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut listening = Vec::new();
        let next_id = Arc::new(std::sync::atomic::AtomicU64::new(1));
        for l in &settings.listeners {
            match l {
                ControlListener::Tcp(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| anyhow::anyhow!("cannot listen on ControlPort {addr}: {e}"))?;
                    let local = listener.local_addr()?;
                    info!("ControlPort listening on {local}");
                    listening.push(format!("\"{local}\""));
                    let listener = std::rc::Rc::new(listener);
                    spawn_accept_loop(
                        move || {
                            let l = listener.clone();
                            async move { l.accept().await.map(|(s, _)| s) }
                        },
                        tx.clone(),
                        next_id.clone(),
                    );
                }
                ControlListener::Unix(path) => {
                    if std::fs::symlink_metadata(path)
                        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                    {
                        let _ = std::fs::remove_file(path);
                    }
                    let listener = tokio::net::UnixListener::bind(path).map_err(|e| {
                        anyhow::anyhow!("cannot listen on ControlPort unix:{}: {e}", path.display())
                    })?;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
                    info!("ControlPort listening on unix:{}", path.display());
                    listening.push(format!("\"unix:{}\"", path.display()));
                    let listener = std::rc::Rc::new(listener);
                    spawn_accept_loop(
                        move || {
                            let l = listener.clone();
                            async move { l.accept().await.map(|(s, _)| s) }
                        },
                        tx.clone(),
                        next_id.clone(),
                    );
                }
            }
        }
        Ok(Some(ControlPorts {
            auth,
            sessions: HashMap::new(),
            rx,
            log_wanted,
            last_totals: (0, 0),
            bw_cache: VecDeque::with_capacity(BW_CACHE),
            listening,
        }))
    }

    /// Handle what a connection task sent; a signal to act on comes back.
    pub fn on_input(&mut self, m: ControlIn, info: &dyn ControlInfo) -> Option<Signal> {
        match m {
            ControlIn::Opened { id, out } => {
                self.sessions.insert(id, (Session::new(), out));
                None
            }
            ControlIn::Closed { id } => {
                self.sessions.remove(&id);
                self.update_log_wanted();
                None
            }
            ControlIn::Command { id, text } => {
                let view = PortInfo {
                    inner: info,
                    listening: &self.listening,
                    bw_cache: &self.bw_cache,
                };
                let (session, out) = self.sessions.get_mut(&id)?;
                let was_open = session.authenticated();
                let o = session.on_command(&text, &self.auth, &view);
                if !was_open && session.authenticated() {
                    info!("controller {id} authenticated on the ControlPort");
                }
                let sent = out.push(o.reply);
                if !sent {
                    warn!("controller {id} does not read its replies: closing its connection");
                }
                if o.close || !sent {
                    out.close();
                    self.sessions.remove(&id);
                }
                self.update_log_wanted();
                o.signal
            }
        }
    }

    /// Once a second: the BW event (bytes since the last one).
    pub fn tick(&mut self, read_total: u64, written_total: u64) {
        let r = read_total.saturating_sub(self.last_totals.0);
        let w = written_total.saturating_sub(self.last_totals.1);
        self.last_totals = (read_total, written_total);
        if self.bw_cache.len() == BW_CACHE {
            self.bw_cache.pop_front();
        }
        self.bw_cache.push_back((r, w));
        self.broadcast("BW", &bw_event(r, w));
    }

    /// A log line for the controllers that asked for its severity.
    pub fn log(&mut self, l: &LogLine) {
        self.broadcast(l.severity.event_name(), &log_event(l.severity, &l.message));
    }

    /// A signal was acted on.
    pub fn signal_done(&mut self, s: Signal) {
        self.broadcast("SIGNAL", &signal_event(s));
    }

    /// Start the BW events' count from these totals (at open).
    pub fn set_totals(&mut self, read_total: u64, written_total: u64) {
        self.last_totals = (read_total, written_total);
    }

    fn broadcast(&mut self, event: &str, text: &str) {
        let mut dropped = Vec::new();
        for (id, (s, out)) in &self.sessions {
            if s.authenticated() && s.events.has(event) && !out.push(text.to_string()) {
                dropped.push(*id);
            }
        }
        if dropped.is_empty() {
            return;
        }
        for id in dropped {
            warn!("controller {id} does not read its events: closing its connection");
            if let Some((_, out)) = self.sessions.remove(&id) {
                out.close();
            }
        }
        self.update_log_wanted();
    }

    fn update_log_wanted(&self) {
        let mut min = u8::MAX;
        for (s, _) in self.sessions.values() {
            if !s.authenticated() {
                continue;
            }
            for sev in [Severity::Notice, Severity::Warn, Severity::Err] {
                if s.events.has(sev.event_name()) {
                    min = min.min(sev as u8);
                }
            }
        }
        self.log_wanted.store(min, Ordering::Relaxed);
    }
}

/// The keys only the ControlPort itself knows, over the controller's.
struct PortInfo<'a> {
    inner: &'a dyn ControlInfo,
    listening: &'a [String],
    bw_cache: &'a VecDeque<(u64, u64)>,
}

impl ControlInfo for PortInfo<'_> {
    fn getinfo(&self, key: &str) -> Result<String, InfoError> {
        match key {
            "net/listeners/control" => Ok(self.listening.join(" ")),
            "bw-event-cache" => Ok(self
                .bw_cache
                .iter()
                .map(|(r, w)| format!("{r},{w}"))
                .collect::<Vec<_>>()
                .join(" ")),
            _ => self.inner.getinfo(key),
        }
    }
    fn getconf(&self, key: &str) -> Option<(String, Vec<String>)> {
        self.inner.getconf(key)
    }
}

/// Accept control connections for ever, one `serve` task each (`accept`
/// is a TCP or a unix listener's accept).
fn spawn_accept_loop<S, F, Fut>(
    accept: F,
    tx: mpsc::UnboundedSender<ControlIn>,
    next_id: Arc<std::sync::atomic::AtomicU64>,
) where
    S: AsyncRead + AsyncWrite + 'static,
    F: Fn() -> Fut + 'static,
    Fut: std::future::Future<Output = std::io::Result<S>>,
{
    tokio::task::spawn_local(async move {
        loop {
            match accept().await {
                Ok(s) => {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    tokio::task::spawn_local(serve(s, id, tx.clone()));
                }
                Err(e) => {
                    warn!("ControlPort accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
}

/// One control connection: read commands (a line, or a `+` command up to
/// its "." line; at most [`MAX_COMMAND_LEN`] bytes), write replies.
async fn serve<S: AsyncRead + AsyncWrite>(
    stream: S,
    id: u64,
    tx: mpsc::UnboundedSender<ControlIn>,
) {
    let (out_tx, mut out_rx) = mpsc::channel(OUT_QUEUE);
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let out = ControlOutQueue {
        tx: out_tx,
        queued: queued.clone(),
    };
    if tx.send(ControlIn::Opened { id, out }).is_err() {
        return;
    }
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::new(r);
    let mut line: Vec<u8> = Vec::new();
    let mut command = String::new();
    loop {
        // Read at most one byte past the limit, so a line without end is
        // refused instead of buffered.
        let room = (MAX_COMMAND_LEN + 1).saturating_sub(line.len() + command.len()) as u64;
        let mut limited = (&mut r).take(room);
        tokio::select! {
            got = limited.read_until(b'\n', &mut line) => {
                match got {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.len() + command.len() > MAX_COMMAND_LEN {
                    let _ = w.write_all(b"500 Line too long.\r\n").await;
                    break;
                }
                if !line.ends_with(b"\n") {
                    continue;
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                line.clear();
                let first = command.is_empty();
                let trimmed = text.trim_end_matches(['\r', '\n']);
                if first && !trimmed.starts_with('+') {
                    if tx.send(ControlIn::Command { id, text: trimmed.to_string() }).is_err() {
                        break;
                    }
                    continue;
                }
                if !first && trimmed == "." {
                    let whole = std::mem::take(&mut command);
                    if tx.send(ControlIn::Command { id, text: whole }).is_err() {
                        break;
                    }
                    continue;
                }
                command.push_str(trimmed);
                command.push('\n');
            }
            m = out_rx.recv() => match m {
                Some(ControlOut::Text(t)) => {
                    if w.write_all(t.as_bytes()).await.is_err() {
                        break;
                    }
                    queued.fetch_sub(t.len(), Ordering::Relaxed);
                }
                Some(ControlOut::Close) | None => break,
            }
        }
    }
    let _ = w.shutdown().await;
    let _ = tx.send(ControlIn::Closed { id });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue to a controller is bounded in bytes as well as messages:
    /// one reply of any size goes in; more than 16 MiB queued does not.
    #[test]
    fn out_queue_is_bounded_in_bytes() {
        let (tx, mut rx) = mpsc::channel(OUT_QUEUE);
        let q = ControlOutQueue {
            tx,
            queued: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        };
        let big = "x".repeat(20 << 20);
        assert!(q.push(big.clone()), "one large reply is always queued");
        assert!(!q.push("250 OK\r\n".into()), "over the byte bound");
        // The socket task wrote it: room again.
        let Some(ControlOut::Text(t)) = rx.try_recv().ok() else {
            panic!("nothing queued")
        };
        q.queued.fetch_sub(t.len(), Ordering::Relaxed);
        assert!(q.push("250 OK\r\n".into()));
        for _ in 1..OUT_QUEUE {
            assert!(q.push("650 BW 0 0\r\n".into()));
        }
        assert!(!q.push("650 BW 0 0\r\n".into()), "over the message bound");
    }
}
