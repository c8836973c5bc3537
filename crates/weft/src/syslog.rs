//! `Log <severity> syslog`: each log line as one datagram to the system
//! logger's socket (/dev/log, journald's or rsyslog's), RFC 3164 style:
//! `<PRI>weft[PID]: message`, facility daemon, the severity from the
//! line's tor severity (err, warn, notice, info, debug).

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

/// The system logger's socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// LOG_DAEMON.
const FACILITY_DAEMON: u8 = 3;

/// The syslog priority of a tor severity (index in
/// [`crate::log_domains::SEVERITIES`]: err, warn, notice, info, debug).
pub fn priority(severity_index: usize) -> u8 {
    FACILITY_DAEMON * 8 + 3 + severity_index.min(4) as u8
}

/// One message as the system logger takes it.
pub fn message(pri: u8, pid: u32, text: &[u8]) -> Vec<u8> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let mut m = format!("<{pri}>weft[{pid}]: ").into_bytes();
    m.extend_from_slice(text);
    m
}

/// A connected syslog socket; makes one writer per log line.
#[derive(Clone)]
pub struct Syslog {
    sock: Arc<UnixDatagram>,
    pid: u32,
}

impl Syslog {
    /// Connect to the system logger.
    pub fn connect() -> io::Result<Syslog> {
        let sock = UnixDatagram::unbound()?;
        sock.connect(SYSLOG_SOCKET)?;
        Ok(Syslog {
            sock: Arc::new(sock),
            pid: std::process::id(),
        })
    }
}

impl Syslog {
    /// Send one line; a logger that is gone or full loses the line, never
    /// the relay.
    pub fn send(&self, pri: u8, text: &str) {
        let _ = self.sock.send(&message(pri, self.pid, text.as_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_the_system_logger_takes_them() {
        assert_eq!(priority(1), 28);
        assert_eq!(priority(2), 29);
        assert_eq!(priority(4), 31);
        assert_eq!(
            message(29, 42, b"heartbeat: x\n"),
            b"<29>weft[42]: heartbeat: x".to_vec()
        );
        // Through a socket standing in for /dev/log.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let server = UnixDatagram::bind(&path).unwrap();
        let client = UnixDatagram::unbound().unwrap();
        client.connect(&path).unwrap();
        let s = Syslog {
            sock: Arc::new(client),
            pid: 7,
        };
        s.send(priority(0), "stopped");
        let mut buf = [0u8; 128];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"<27>weft[7]: stopped");
    }
}
