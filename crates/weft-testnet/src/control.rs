//! A minimal, synchronous tor control-port client (control-spec.txt): cookie
//! authentication, `GETINFO`, `SETCONF`, `SETEVENTS`, `EXTENDCIRCUIT`,
//! `ATTACHSTREAM`, `CLOSECIRCUIT`, and bounded waits for `CIRC` / `STREAM`
//! events. Asynchronous events that arrive while a command's reply is awaited
//! are queued, never lost.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::keys::normalize_fingerprint;

/// Bound on a command's reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one reply line (a garbage-spewing peer must not eat memory).
const MAX_LINE: usize = 1 << 20;
/// Bound on a data block (`250+`), e.g. a full consensus.
const MAX_DATA: usize = 64 << 20;
/// Events kept while nobody asks for them; the oldest are dropped beyond this.
const MAX_QUEUED_EVENTS: usize = 10_000;

/// One reply (or asynchronous event) from tor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code of the final line (250 = OK, 5xx = error, 650 = event).
    pub code: u16,
    /// Each reply line without its code and separator; a data block (`+`) is
    /// appended to its line after a `\n`.
    pub lines: Vec<String>,
}

impl Reply {
    /// Whether the code is 2xx.
    pub fn is_ok(&self) -> bool {
        (200..300).contains(&self.code)
    }

    fn into_result(self, what: &str) -> Result<Reply> {
        if self.is_ok() {
            Ok(self)
        } else {
            bail!(
                "{what}: tor replied {} {}",
                self.code,
                self.lines.join(" | ")
            )
        }
    }
}

/// What one node's consensus says about one relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsensusEntry {
    /// The node has no consensus yet.
    NoConsensus,
    /// The consensus does not list the relay.
    NotListed,
    /// Listed, with these flags (`s` line).
    Listed {
        /// Flags, e.g. `["Fast", "Running", "Valid"]`.
        flags: Vec<String>,
        /// The `w Bandwidth=` value, if given.
        bandwidth: Option<u64>,
    },
}

/// A CIRC event (`CIRC <id> <status> [path] [key=value ...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircEvent {
    /// Circuit id.
    pub id: u64,
    /// LAUNCHED, EXTENDED, BUILT, FAILED, CLOSED, ...
    pub status: String,
    /// The whole event line.
    pub line: String,
}

/// A STREAM event (`STREAM <id> <status> <circ> <target> [key=value ...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// Stream id.
    pub id: u64,
    /// NEW, SENTCONNECT, SUCCEEDED, FAILED, CLOSED, DETACHED, ...
    pub status: String,
    /// Circuit id (0 if unattached).
    pub circ: u64,
    /// Target `host:port`.
    pub target: String,
    /// `SOURCE_ADDR=` if present.
    pub source_addr: Option<String>,
    /// The whole event line.
    pub line: String,
}

fn keyword<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|t| t.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Parse a CIRC event line (without the `650 ` code).
pub fn parse_circ_event(line: &str) -> Option<CircEvent> {
    let mut t = line.split(' ');
    if t.next()? != "CIRC" {
        return None;
    }
    let id = t.next()?.parse().ok()?;
    let status = t.next()?.to_string();
    Some(CircEvent {
        id,
        status,
        line: line.to_string(),
    })
}

/// Parse a STREAM event line (without the `650 ` code).
pub fn parse_stream_event(line: &str) -> Option<StreamEvent> {
    let mut t = line.split(' ');
    if t.next()? != "STREAM" {
        return None;
    }
    let id = t.next()?.parse().ok()?;
    let status = t.next()?.to_string();
    let circ = t.next()?.parse().ok()?;
    let target = t.next()?.to_string();
    Some(StreamEvent {
        id,
        status,
        circ,
        target,
        source_addr: keyword(line, "SOURCE_ADDR").map(str::to_string),
        line: line.to_string(),
    })
}

/// Quote a value for SETCONF / other commands (control-spec QuotedString).
fn quote(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            _ => s.push(c),
        }
    }
    s.push('"');
    s
}

/// An authenticated control connection to one tor process.
#[derive(Debug)]
pub struct ControlClient {
    stream: TcpStream,
    addr: SocketAddr,
    /// Bytes read but not yet split into lines.
    buf: Vec<u8>,
    /// Asynchronous events (first line of each, without `650 `), oldest first.
    events: VecDeque<String>,
    /// Whether `SETEVENTS CIRC STREAM` was sent on this connection.
    circ_stream_events: bool,
}

impl ControlClient {
    /// Connect to `addr` (retrying until `timeout`, as tor may still be
    /// starting) and authenticate with the cookie in
    /// `<data_dir>/control_auth_cookie`.
    pub fn connect(addr: SocketAddr, data_dir: &Path, timeout: Duration) -> Result<ControlClient> {
        let deadline = Instant::now() + timeout;
        let cookie_path = data_dir.join("control_auth_cookie");
        let stream = loop {
            let attempt = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                .map_err(anyhow::Error::from)
                .and_then(|s| {
                    // tor writes the cookie before opening the port, but be safe.
                    let cookie = std::fs::read(&cookie_path)
                        .with_context(|| format!("reading {}", cookie_path.display()))?;
                    Ok((s, cookie))
                });
            match attempt {
                Ok(v) => break v,
                Err(e) if Instant::now() >= deadline => {
                    return Err(
                        e.context(format!("control port {addr} not usable within {timeout:?}"))
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let (stream, cookie) = stream;
        stream.set_nodelay(true)?;
        let mut c = ControlClient {
            stream,
            addr,
            buf: Vec::new(),
            events: VecDeque::new(),
            circ_stream_events: false,
        };
        c.command(&format!("AUTHENTICATE {}", hex::encode(cookie)))?
            .into_result(&format!("AUTHENTICATE on {addr}"))?;
        Ok(c)
    }

    /// The control port's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Send one command line and return tor's reply (whatever its code).
    pub fn command(&mut self, line: &str) -> Result<Reply> {
        if line.contains(['\r', '\n']) {
            bail!("control command must be one line: {line:?}");
        }
        self.stream
            .write_all(format!("{line}\r\n").as_bytes())
            .with_context(|| format!("writing to control port {}", self.addr))?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let r = self.read_reply(deadline)?;
            if r.code == 650 {
                self.queue_event(r);
                continue;
            }
            return Ok(r);
        }
    }

    /// A command with a data block (`+KEYWORD args`, then `data`'s lines,
    /// dot-escaped, then `.`), e.g. `HSPOST`; tor's reply.
    pub fn command_with_data(&mut self, line: &str, data: &str) -> Result<Reply> {
        if line.contains(['\r', '\n']) {
            bail!("control command must be one line: {line:?}");
        }
        let mut msg = format!("+{line}\r\n");
        for l in data.lines() {
            if l.starts_with('.') {
                msg.push('.');
            }
            msg.push_str(l);
            msg.push_str("\r\n");
        }
        msg.push_str(".\r\n");
        self.stream
            .write_all(msg.as_bytes())
            .with_context(|| format!("writing to control port {}", self.addr))?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let r = self.read_reply(deadline)?;
            if r.code == 650 {
                self.queue_event(r);
                continue;
            }
            return Ok(r);
        }
    }

    /// `GETINFO key`: the value (multi-line values joined with `\n`).
    pub fn getinfo(&mut self, key: &str) -> Result<String> {
        let r = self
            .command(&format!("GETINFO {key}"))?
            .into_result(&format!("GETINFO {key}"))?;
        let first = r
            .lines
            .first()
            .ok_or_else(|| anyhow!("GETINFO {key}: empty reply"))?;
        let prefix = format!("{key}=");
        let v = first
            .strip_prefix(&prefix)
            .ok_or_else(|| anyhow!("GETINFO {key}: unexpected reply line {first:?}"))?;
        Ok(v.strip_prefix('\n').unwrap_or(v).to_string())
    }

    /// `SETCONF key="value"`.
    pub fn set_conf(&mut self, key: &str, value: &str) -> Result<()> {
        self.command(&format!("SETCONF {key}={}", quote(value)))?
            .into_result(&format!("SETCONF {key}"))?;
        Ok(())
    }

    /// `SETEVENTS e1 e2 ...` (replaces the set of events on this connection).
    pub fn set_events(&mut self, events: &[&str]) -> Result<()> {
        self.command(&format!("SETEVENTS {}", events.join(" ")))?
            .into_result("SETEVENTS")?;
        self.circ_stream_events = events.contains(&"CIRC") && events.contains(&"STREAM");
        Ok(())
    }

    fn ensure_circ_stream_events(&mut self) -> Result<()> {
        if !self.circ_stream_events {
            self.set_events(&["CIRC", "STREAM"])?;
        }
        Ok(())
    }

    /// `EXTENDCIRCUIT 0 $fp1,$fp2,...`: start building a new circuit through
    /// exactly these relays; returns its id. Subscribes this connection to
    /// CIRC and STREAM events first (so the BUILT event cannot be missed).
    pub fn extend_circuit<S: AsRef<str>>(&mut self, path: &[S]) -> Result<u64> {
        if path.is_empty() {
            bail!("EXTENDCIRCUIT needs at least one relay");
        }
        self.ensure_circ_stream_events()?;
        let hops = path
            .iter()
            .map(|fp| normalize_fingerprint(fp.as_ref()).map(|f| format!("${f}")))
            .collect::<Result<Vec<_>>>()?
            .join(",");
        let r = self
            .command(&format!("EXTENDCIRCUIT 0 {hops}"))?
            .into_result(&format!("EXTENDCIRCUIT 0 {hops}"))?;
        let line = r.lines.first().cloned().unwrap_or_default();
        line.strip_prefix("EXTENDED ")
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| anyhow!("EXTENDCIRCUIT: unexpected reply {line:?}"))
    }

    /// Wait until CIRC `circ` is BUILT; an error if it FAILED / CLOSED or on
    /// timeout. Needs CIRC events (see [`ControlClient::extend_circuit`]).
    pub fn wait_circuit_built(&mut self, circ: u64, timeout: Duration) -> Result<()> {
        self.ensure_circ_stream_events()?;
        let mut seen = Vec::new();
        let found = self.wait_event(timeout, |line| match parse_circ_event(line) {
            Some(ev) if ev.id == circ => {
                seen.push(ev.line.clone());
                matches!(ev.status.as_str(), "BUILT" | "FAILED" | "CLOSED")
            }
            _ => false,
        })?;
        match found {
            Some(line) if parse_circ_event(&line).is_some_and(|e| e.status == "BUILT") => Ok(()),
            Some(line) => bail!("circuit {circ} did not build: {line}"),
            None => bail!("circuit {circ} not BUILT within {timeout:?}; its events: {seen:?}"),
        }
    }

    /// [`extend_circuit`](Self::extend_circuit) then
    /// [`wait_circuit_built`](Self::wait_circuit_built).
    pub fn build_circuit<S: AsRef<str>>(&mut self, path: &[S], timeout: Duration) -> Result<u64> {
        // A client that has bootstrapped may still be fetching the
        // microdescriptor of a relay that a fresh consensus just listed
        // (tor answers `552 No descriptor for ...`); that is the client
        // catching up, not a failed circuit, so wait for it (bounded).
        let deadline = Instant::now() + timeout;
        let id = loop {
            match self.extend_circuit(path) {
                Ok(id) => break id,
                Err(e)
                    if format!("{e:#}").contains("552 No descriptor")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        };
        self.wait_circuit_built(id, timeout)?;
        Ok(id)
    }

    /// `ATTACHSTREAM stream circ`.
    pub fn attach_stream(&mut self, stream: u64, circ: u64) -> Result<()> {
        self.command(&format!("ATTACHSTREAM {stream} {circ}"))?
            .into_result(&format!("ATTACHSTREAM {stream} {circ}"))?;
        Ok(())
    }

    /// `CLOSECIRCUIT circ`.
    pub fn close_circuit(&mut self, circ: u64) -> Result<()> {
        self.command(&format!("CLOSECIRCUIT {circ}"))?
            .into_result(&format!("CLOSECIRCUIT {circ}"))?;
        Ok(())
    }

    /// Wait for `STREAM <id> NEW` whose `SOURCE_ADDR` is `source` (the local
    /// address of our SOCKS connection); returns the stream id.
    pub fn wait_stream_new(&mut self, source: SocketAddr, timeout: Duration) -> Result<u64> {
        self.ensure_circ_stream_events()?;
        let want = source.to_string();
        let found = self.wait_event(timeout, |line| {
            parse_stream_event(line).is_some_and(|e| {
                e.status == "NEW" && e.source_addr.as_deref() == Some(want.as_str())
            })
        })?;
        match found.as_deref().and_then(parse_stream_event) {
            Some(e) => Ok(e.id),
            None => bail!("no STREAM NEW from {source} within {timeout:?}"),
        }
    }

    /// The bootstrap progress (0-100) and the whole
    /// `status/bootstrap-phase` value.
    pub fn bootstrap_phase(&mut self) -> Result<(u8, String)> {
        let v = self.getinfo("status/bootstrap-phase")?;
        let p = keyword(&v, "PROGRESS")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("no PROGRESS in {v:?}"))?;
        Ok((p, v))
    }

    /// What this node's current consensus says about relay `fingerprint`
    /// (`GETINFO ns/id/<fp>`).
    pub fn consensus_entry(&mut self, fingerprint: &str) -> Result<ConsensusEntry> {
        let fp = normalize_fingerprint(fingerprint)?;
        let key = format!("ns/id/{fp}");
        let r = self.command(&format!("GETINFO {key}"))?;
        if r.code == 552 {
            return Ok(ConsensusEntry::NotListed);
        }
        let r = r.into_result(&format!("GETINFO {key}"))?;
        let first = r.lines.first().map(String::as_str).unwrap_or("");
        let v = first
            .strip_prefix(&format!("{key}="))
            .unwrap_or(first)
            .trim();
        if v.is_empty() {
            return Ok(ConsensusEntry::NoConsensus);
        }
        let mut flags = Vec::new();
        let mut bandwidth = None;
        for l in v.lines() {
            if let Some(f) = l.strip_prefix("s ") {
                flags = f.split_whitespace().map(str::to_string).collect();
            } else if let Some(w) = l.strip_prefix("w ") {
                bandwidth = keyword(w, "Bandwidth").and_then(|b| b.parse().ok());
            }
        }
        Ok(ConsensusEntry::Listed { flags, bandwidth })
    }

    /// The next queued or arriving asynchronous event (its first line, without
    /// `650 `), or None after `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<String>> {
        self.wait_event(timeout, |_| true)
    }

    /// Take all queued events (first lines, without `650 `), oldest first.
    pub fn take_events(&mut self) -> Vec<String> {
        self.events.drain(..).collect()
    }

    /// Wait until an event satisfies `pred` (queued ones first); removes and
    /// returns it, leaving other events queued. None on timeout.
    fn wait_event(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&str) -> bool,
    ) -> Result<Option<String>> {
        let deadline = Instant::now() + timeout;
        let mut checked = 0;
        loop {
            while checked < self.events.len() {
                if pred(&self.events[checked]) {
                    return Ok(self.events.remove(checked));
                }
                checked += 1;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            match self.read_reply(deadline) {
                Ok(r) if r.code == 650 => {
                    let before = self.events.len();
                    self.queue_event(r);
                    // Dropping the oldest shifted the unchecked tail left.
                    checked -= (before + 1 - self.events.len()).min(checked);
                }
                Ok(r) => bail!(
                    "unexpected reply {} {:?} while waiting for events",
                    r.code,
                    r.lines
                ),
                Err(e) if is_timeout(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    fn queue_event(&mut self, r: Reply) {
        if let Some(first) = r.lines.into_iter().next() {
            if self.events.len() >= MAX_QUEUED_EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(first);
        }
    }

    /// Read one complete reply (possibly multi-line) before `deadline`.
    fn read_reply(&mut self, deadline: Instant) -> Result<Reply> {
        let mut lines = Vec::new();
        loop {
            let line = self.read_line(deadline)?;
            if line.len() < 4 {
                bail!("malformed control reply line {line:?}");
            }
            let code: u16 = line[..3]
                .parse()
                .with_context(|| format!("bad status code in {line:?}"))?;
            let sep = line.as_bytes()[3];
            let mut content = line[4..].to_string();
            if sep == b'+' {
                let mut total = 0usize;
                loop {
                    let d = self.read_line(deadline)?;
                    if d == "." {
                        break;
                    }
                    total += d.len() + 1;
                    if total > MAX_DATA {
                        bail!("control data block larger than {MAX_DATA} bytes");
                    }
                    content.push('\n');
                    content.push_str(
                        d.strip_prefix('.')
                            .filter(|_| d.starts_with(".."))
                            .unwrap_or(&d),
                    );
                }
            }
            lines.push(content);
            match sep {
                b' ' => return Ok(Reply { code, lines }),
                b'-' | b'+' => continue,
                _ => bail!("bad separator in control reply line {line:?}"),
            }
        }
    }

    /// Read one CRLF-terminated line (without the CRLF) before `deadline`.
    fn read_line(&mut self, deadline: Instant) -> Result<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.buf.len() > MAX_LINE {
                bail!("control reply line longer than {MAX_LINE} bytes");
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(anyhow!(TimedOut));
            }
            let wait = (deadline - now).max(Duration::from_millis(1));
            self.stream.set_read_timeout(Some(wait))?;
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => bail!("control port {} closed the connection", self.addr),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(anyhow!(TimedOut))
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(anyhow!(e).context(format!("reading control port {}", self.addr)))
                }
            }
        }
    }
}

/// Marker error for "the deadline passed while reading".
#[derive(Debug)]
struct TimedOut;

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("timed out waiting for the control port")
    }
}

impl std::error::Error for TimedOut {}

fn is_timeout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<TimedOut>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        let c = parse_circ_event("CIRC 7 BUILT $AAAA~a,$BBBB~b PURPOSE=GENERAL").unwrap();
        assert_eq!((c.id, c.status.as_str()), (7, "BUILT"));
        let s = parse_stream_event(
            "STREAM 12 NEW 0 127.0.0.1:5000 SOURCE_ADDR=127.0.0.1:41234 PURPOSE=USER",
        )
        .unwrap();
        assert_eq!((s.id, s.status.as_str(), s.circ), (12, "NEW", 0));
        assert_eq!(s.source_addr.as_deref(), Some("127.0.0.1:41234"));
        assert!(parse_circ_event("STREAM 1 NEW 0 x").is_none());
    }

    #[test]
    fn quotes_values() {
        assert_eq!(quote(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    }
}
