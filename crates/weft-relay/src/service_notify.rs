//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): when the
//! service manager set `NOTIFY_SOCKET`, weft tells it `READY=1` once every
//! listener is bound and the workers run, `RELOADING=1` and `READY=1`
//! around a reload, `STOPPING=1` when it shuts down, and a `STATUS=` line
//! with each; with `WatchdogSec=` (`WATCHDOG_USEC`, for this process by
//! `WATCHDOG_PID`), `WATCHDOG=1` from the controller's loop every half of
//! it, as C Tor's main loop pings (a controller that stops turning gets
//! the relay restarted). Without `NOTIFY_SOCKET` every call is a no-op. A
//! manager that is gone loses the message, never the relay.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// A connection to the service manager's notification socket, or nothing.
#[derive(Default)]
pub struct ServiceNotify {
    sock: Option<UnixDatagram>,
    /// How often to send `WATCHDOG=1` (None: no watchdog).
    watchdog: Option<std::time::Duration>,
}

/// The watchdog's ping interval from `WATCHDOG_USEC` and `WATCHDOG_PID`
/// (sd_watchdog_enabled(3)): half the timeout, if the timeout is set and
/// positive and the PID, when given, is `me`.
pub fn watchdog_interval(
    usec: Option<&str>,
    pid: Option<&str>,
    me: u32,
) -> Option<std::time::Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(p) = pid {
        if p.trim().parse::<u32>().ok()? != me {
            return None;
        }
    }
    Some(std::time::Duration::from_micros(usec / 2))
}

/// What weft tells the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceState {
    /// Listeners bound, workers running.
    Ready,
    /// Re-reading the configuration.
    Reloading,
    /// Shutting down, within this many µs more than systemd's stop
    /// timeout allows (0: the default timeout suffices).
    Stopping {
        /// `EXTEND_TIMEOUT_USEC` (0: not sent).
        extend_usec: u64,
    },
}

/// The datagram for `state` (sans-IO). `monotonic_usec` is
/// CLOCK_MONOTONIC in µs, which systemd wants with `RELOADING=1`.
pub fn message(state: ServiceState, status: &str, monotonic_usec: u64) -> String {
    let status: String = status.chars().filter(|c| *c != '\n').collect();
    match state {
        ServiceState::Ready => format!("READY=1\nSTATUS={status}\n"),
        ServiceState::Reloading => {
            format!("RELOADING=1\nMONOTONIC_USEC={monotonic_usec}\nSTATUS={status}\n")
        }
        ServiceState::Stopping { extend_usec: 0 } => format!("STOPPING=1\nSTATUS={status}\n"),
        ServiceState::Stopping { extend_usec } => {
            format!("STOPPING=1\nEXTEND_TIMEOUT_USEC={extend_usec}\nSTATUS={status}\n")
        }
    }
}

/// The socket address `NOTIFY_SOCKET` names: a path, or `@name` in the
/// abstract namespace.
pub fn socket_addr(var: &str) -> std::io::Result<SocketAddr> {
    match var.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(var),
    }
}

impl ServiceNotify {
    /// Connect to `$NOTIFY_SOCKET` if set (before privileges are dropped).
    pub fn from_env() -> ServiceNotify {
        let Some(var) = std::env::var_os("NOTIFY_SOCKET") else {
            return ServiceNotify::default();
        };
        let var = var.to_string_lossy().into_owned();
        let env = |k| std::env::var(k).ok();
        let watchdog = watchdog_interval(
            env("WATCHDOG_USEC").as_deref(),
            env("WATCHDOG_PID").as_deref(),
            std::process::id(),
        );
        let sock = socket_addr(&var)
            .and_then(|a| {
                let s = UnixDatagram::unbound()?;
                s.connect_addr(&a)?;
                Ok(s)
            })
            .map_err(|e| tracing::warn!("NOTIFY_SOCKET {var}: {e}; no readiness notification"))
            .ok();
        ServiceNotify { sock, watchdog }
    }

    /// How often the service manager wants `WATCHDOG=1`, if it does.
    pub fn watchdog_interval(&self) -> Option<std::time::Duration> {
        self.watchdog.filter(|_| self.sock.is_some())
    }

    /// Tell the manager we are alive (sd_notify `WATCHDOG=1`).
    pub fn watchdog_ping(&self) {
        if let Some(s) = &self.sock {
            let _ = s.send(b"WATCHDOG=1\n");
        }
    }

    /// Tell the manager `state`.
    pub fn notify(&self, state: ServiceState, status: &str) {
        if let Some(s) = &self.sock {
            let _ = s.send(message(state, status, monotonic_usec()).as_bytes());
        }
    }
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the valid pointer given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_as_systemd_reads_them() {
        assert_eq!(
            message(ServiceState::Ready, "relaying\non 9001", 0),
            "READY=1\nSTATUS=relayingon 9001\n"
        );
        assert_eq!(
            message(ServiceState::Reloading, "reloading", 42),
            "RELOADING=1\nMONOTONIC_USEC=42\nSTATUS=reloading\n"
        );
        assert_eq!(
            message(ServiceState::Stopping { extend_usec: 0 }, "bye", 0),
            "STOPPING=1\nSTATUS=bye\n"
        );
        assert_eq!(
            message(
                ServiceState::Stopping {
                    extend_usec: 60_000_000
                },
                "in 30 s",
                0
            ),
            "STOPPING=1\nEXTEND_TIMEOUT_USEC=60000000\nSTATUS=in 30 s\n"
        );
        assert!(monotonic_usec() > 0);
    }

    #[test]
    fn a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = ServiceNotify {
            watchdog: None,
            sock: Some({
                let s = UnixDatagram::unbound().unwrap();
                s.connect_addr(&socket_addr(path.to_str().unwrap()).unwrap())
                    .unwrap();
                s
            }),
        };
        n.notify(ServiceState::Ready, "up");
        let mut buf = [0u8; 256];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=up\n");
        n.watchdog_ping();
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1\n");
        let name = format!("weft-test-{}", std::process::id());
        let abs = UnixDatagram::bind_addr(&socket_addr(&format!("@{name}")).unwrap()).unwrap();
        let c = UnixDatagram::unbound().unwrap();
        c.connect_addr(&socket_addr(&format!("@{name}")).unwrap())
            .unwrap();
        c.send(b"x").unwrap();
        assert_eq!(abs.recv(&mut buf).unwrap(), 1);
        ServiceNotify::default().notify(
            ServiceState::Stopping { extend_usec: 0 },
            "no manager: nothing",
        );
    }

    #[test]
    fn the_watchdog_as_sd_watchdog_enabled_reads_it() {
        use std::time::Duration;
        let half = Some(Duration::from_secs(90));
        assert_eq!(watchdog_interval(Some("180000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("180000000"), Some("7"), 7), half);
        assert_eq!(
            watchdog_interval(Some("180000000"), Some("8"), 7),
            None,
            "another process's"
        );
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
        assert_eq!(ServiceNotify::default().watchdog_interval(), None);
    }
}
