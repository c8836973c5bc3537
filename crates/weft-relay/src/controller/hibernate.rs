//! Hibernation on the main thread: the accounting ([`crate::accounting`])
//! fed each second with the bytes the workers reported, and what its
//! transitions do, as C Tor's hibernate.c: the soft limit closes the ORPort
//! and has the workers refuse new circuits and streams (a relay context
//! marked hibernating); the hard limit also closes every relay connection;
//! waking reopens the ORPort. Each change republishes the descriptor
//! (`hibernating 1`, no bandwidth), so the authorities stop listing us
//! Running. The shutdown wait (SIGINT) uses the same context flag.

use tracing::{info, warn};

use super::directory::DirState;
use super::{unix_secs, Controller};
use crate::accounting::{Accounting, Hibernation};
use crate::context::RelayConfig;
use crate::worker::WorkerMsg;

/// Bind the ORPorts: IPv4, and IPv6 (IPV6_V6ONLY, so `[::]` and
/// `0.0.0.0` can share a port). Closed while hibernating, bound again on
/// waking.
pub(super) fn bind_or_ports(cfg: &RelayConfig) -> anyhow::Result<Vec<tokio::net::TcpListener>> {
    let mut addrs = vec![cfg.or_listen];
    addrs.extend(cfg.ipv6_or_port.map(|(listen, _)| listen));
    let mut out = Vec::new();
    for a in addrs {
        let bind = || -> std::io::Result<tokio::net::TcpListener> {
            use socket2::{Domain, Socket, Type};
            let s = Socket::new(Domain::for_address(a), Type::STREAM, None)?;
            if a.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.set_reuse_address(true)?;
            s.bind(&a.into())?;
            s.listen(libc::SOMAXCONN)?;
            s.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(s.into())
        };
        out.push(bind().map_err(|e| anyhow::anyhow!("cannot listen on ORPort {a}: {e}"))?);
        info!("ORPort listening on {a}");
    }
    Ok(out)
}

/// The accounting for `cfg`, continuing what the state file recorded.
pub(super) fn start_accounting(
    cfg: &RelayConfig,
    fingerprint: [u8; 20],
    state_path: &std::path::Path,
) -> Option<Accounting> {
    let a = cfg.accounting?;
    let saved = std::fs::read_to_string(state_path).unwrap_or_default();
    let acct = Accounting::new(a, cfg.bandwidth_rate, fingerprint, &saved, unix_secs());
    info!(
        "Configured hibernation: AccountingMax {} bytes ({:?}). This interval began at {} UTC; the scheduled wake-up time is {} UTC; the next interval begins at {} UTC.",
        a.max,
        a.rule,
        crate::accounting::iso_time(acct.interval_start),
        crate::accounting::iso_time(acct.wakeup),
        crate::accounting::iso_time(acct.interval_end),
    );
    Some(acct)
}

impl Controller {
    /// New circuits and streams are refused: shutting down or hibernating.
    pub(super) fn hibernating(&self) -> bool {
        self.exiting_at.is_some()
            || self
                .accounting
                .as_ref()
                .is_some_and(|a| a.state() != Hibernation::Awake)
    }

    /// Once a second, after the bandwidth history closed the second: count
    /// its bytes and act on a change of state.
    pub(super) fn account(&mut self, dir: &mut DirState) {
        let (dr, dw) = self.bw.last_second();
        let Some(a) = self.accounting.as_mut() else {
            return;
        };
        let Some((state, why)) = a.tick(unix_secs(), dr, dw, 1) else {
            return;
        };
        for line in why {
            info!("{line}");
        }
        match state {
            Hibernation::Soft | Hibernation::Hard => {
                self.or_listeners.clear();
                if state == Hibernation::Hard {
                    for wk in &self.workers {
                        wk.send(WorkerMsg::CloseAll);
                    }
                }
            }
            Hibernation::Awake => {
                if self.or_listeners.is_empty() && self.exiting_at.is_none() {
                    match bind_or_ports(&self.cfg) {
                        Ok(l) => {
                            self.or_listeners = l;
                            self.note_or_listeners();
                        }
                        Err(e) => warn!("cannot listen on the ORPort again: {e}"),
                    }
                }
            }
        }
        self.rebuild_context(dir);
        dir.set_hibernating(self.hibernating());
    }

    /// A reload: new accounting options apply to the running interval
    /// (turning accounting on or off needs a restart: `reload` keeps the
    /// old setting then).
    pub(super) fn reload_accounting(&mut self, new: &RelayConfig) {
        if let (Some(a), Some(c)) = (self.accounting.as_mut(), new.accounting) {
            a.set_config(c, new.bandwidth_rate, unix_secs());
        }
    }

    /// The heartbeat's accounting line. [C status.c log_accounting()]
    pub(super) fn log_accounting(&self) {
        let Some(a) = &self.accounting else { return };
        let left = a.interval_end.saturating_sub(unix_secs());
        info!(
            target: "heartbeat",
            "Heartbeat: Accounting enabled. Sent: {} B, Received: {} B, Used: {} B / {} B, Rule: {:?}. The current accounting interval ends on {} UTC, in {}h{:02}m; hibernation: {}.",
            a.written,
            a.read,
            a.bytes(),
            a.config().max,
            a.config().rule,
            crate::accounting::iso_time(a.interval_end),
            left / 3600,
            left % 3600 / 60,
            a.state().name(),
        );
    }

    /// Save the bandwidth history and the accounting (0600).
    pub(super) fn save_state(&self, path: &std::path::Path) {
        let mut text = self.bw.to_state();
        text.push_str(&self.stats.to_state());
        if let Some(a) = &self.accounting {
            text.push_str(&a.to_state());
        }
        if let Err(e) = weft_crypto::keys::write_private_file(path, text.as_bytes()) {
            warn!(
                "cannot save the bandwidth history and accounting to {}: {e}",
                path.display()
            );
        }
    }
}

/// Accept on any ORPort, or never while none is open (closed while
/// hibernating).
pub(super) async fn accept_any(
    ls: &[tokio::net::TcpListener],
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    if ls.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for l in ls {
            if let std::task::Poll::Ready(r) = l.poll_accept(cx) {
                return std::task::Poll::Ready(r);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
