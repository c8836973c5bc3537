//! `Log <severity> syslog`: each log line as one datagram to the system
//! logger's socket (/dev/log, journald's or rsyslog's), RFC 3164 style:
//! `<PRI>weft[PID]: message`, facility daemon, the severity from the
//! line's level (tor's err, warn, notice, info, debug).

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;

/// The system logger's socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// LOG_DAEMON.
const FACILITY_DAEMON: u8 = 3;

/// The syslog priority of a tracing level (tor's severities mapped as
/// weft maps them: notice is tracing's INFO).
pub fn priority(level: &tracing::Level) -> u8 {
    let severity = match *level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 5,
        tracing::Level::DEBUG => 6,
        tracing::Level::TRACE => 7,
    };
    FACILITY_DAEMON * 8 + severity
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

/// Writes one formatted line as one datagram.
pub struct SyslogLine {
    sock: Arc<UnixDatagram>,
    pri: u8,
    pid: u32,
}

impl io::Write for SyslogLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A logger that is gone or full loses the line, never the relay.
        let _ = self.sock.send(&message(self.pri, self.pid, buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = SyslogLine;
    fn make_writer(&'a self) -> SyslogLine {
        self.line(5)
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SyslogLine {
        self.line(priority(meta.level()))
    }
}

impl Syslog {
    fn line(&self, pri: u8) -> SyslogLine {
        SyslogLine {
            sock: self.sock.clone(),
            pri,
            pid: self.pid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_as_the_system_logger_takes_them() {
        assert_eq!(priority(&tracing::Level::WARN), 28);
        assert_eq!(priority(&tracing::Level::INFO), 29);
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
        let meta_level = tracing::Level::ERROR;
        let mut w = s.line(priority(&meta_level));
        w.write_all(b"ERROR stopped\n").unwrap();
        let mut buf = [0u8; 128];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"<27>weft[7]: ERROR stopped");
    }
}
