//! What an operator's signals do on the main thread: SIGHUP and SIGNAL
//! RELOAD apply a re-read torrc — what C Tor applies at run time
//! (bandwidth, exit policy, nickname, contact, scheduler and DoS options)
//! takes effect without dropping a circuit; options that need a restart
//! are named in the log and keep their old values; a torrc that does not
//! parse is refused with its error and the old configuration stays.
//! HEARTBEAT logs the heartbeat now; DUMP logs it with each worker's
//! counters. SHUTDOWN (and SIGINT) begins C Tor's shutdown wait; HALT
//! stops at once; systemd hears of each ([`crate::service_notify`]).

use std::time::Duration;

use tracing::{info, warn};

use super::control_info::ControlView;
use super::control_port::{ControlIn, ControlPorts};
use super::directory::DirState;
use super::{sched_params, worker, Controller};
use crate::context::RelayConfig;
use crate::control::Signal;
use crate::messages::ControllerMsg;
use crate::worker::WorkerMsg;

/// Re-reads the torrc for a reload (installed by the binary).
pub type Reloader = Box<dyn FnMut() -> Result<RelayConfig, String>>;

impl Controller {
    /// A command from a controller; true when it asked weft to stop.
    pub(super) fn on_control(
        &mut self,
        cp: Option<&mut ControlPorts>,
        m: ControlIn,
        dir: &mut DirState,
        reloader: &mut Option<Reloader>,
    ) -> bool {
        let Some(cp) = cp else { return false };
        let view = ControlView { c: self, dir };
        let Some(s) = cp.on_input(m, &view) else {
            return false;
        };
        info!("signal {} from a controller", s.name());
        match s {
            Signal::Halt => return true,
            Signal::Shutdown => {
                if self.begin_shutdown(dir) {
                    return true;
                }
            }
            Signal::Reload => self.reload_now(reloader, dir),
            Signal::Heartbeat => self.log_heartbeat(),
            Signal::Dump => self.log_dump(),
            Signal::Newnym | Signal::Active | Signal::Dormant => {}
        }
        cp.signal_done(s);
        false
    }

    /// Tell systemd (if it asked) that weft serves.
    pub(super) fn notify_ready(&self) {
        self.notify.notify(
            crate::service_notify::ServiceState::Ready,
            &format!("relaying on {}", self.cfg.or_listen),
        );
    }

    /// SIGHUP / SIGNAL RELOAD: re-read the torrc and apply it, telling
    /// systemd while it happens.
    pub(super) fn reload_now(&mut self, reloader: &mut Option<Reloader>, dir: &mut DirState) {
        self.notify.notify(
            crate::service_notify::ServiceState::Reloading,
            "reloading the torrc",
        );
        self.reload(reload_torrc(reloader), dir);
        self.notify_ready();
    }

    /// SIGINT or SIGNAL SHUTDOWN, as C Tor's relay: stop accepting
    /// connections and new circuits (workers answer CREATE with DESTROY
    /// HIBERNATING), keep relaying open circuits for ShutdownWaitLength,
    /// then exit. True when weft should exit now (a wait of zero, or the
    /// second interrupt). [C hibernate.c hibernate_begin()]
    pub(super) fn begin_shutdown(&mut self, dir: &DirState) -> bool {
        let wait = self.cfg.shutdown_wait;
        if self.exiting_at.is_some() {
            info!("SIGINT received a second time; exiting now.");
            return true;
        }
        if wait.is_zero() {
            info!("interrupt: shutting down");
            return true;
        }
        // C closes every listener but the control ones; the workers refuse
        // new circuits once their new context arrives.
        self.or_listeners.clear();
        self.exiting_at = Some(tokio::time::Instant::now() + wait);
        self.rebuild_context(dir);
        info!(
            "Interrupt: we have stopped accepting new connections, and will shut down in {} seconds. Interrupt again to exit now.",
            wait.as_secs()
        );
        self.notify.notify(
            crate::service_notify::ServiceState::Stopping {
                extend_usec: (wait.as_secs() + 30) * 1_000_000,
            },
            &format!("shutting down in {} seconds", wait.as_secs()),
        );
        false
    }

    /// Stop the workers, collect their last counters, save the state.
    pub(super) async fn stop(
        &mut self,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<ControllerMsg>,
        state_path: &std::path::Path,
    ) {
        self.notify.notify(
            crate::service_notify::ServiceState::Stopping { extend_usec: 0 },
            "stopping",
        );
        for w in &self.workers {
            w.send(WorkerMsg::Shutdown);
        }
        // Collect the workers' last counters (bounded: a stuck worker must not
        // keep the process alive).
        let mut running = self.workers.len();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while running > 0 {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ControllerMsg::WorkerStopped { .. })) => running -= 1,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        // Their last reports went out before they said they stopped.
        self.take_reports();
        self.save_state(state_path);
        let cgo: u64 = self
            .worker_totals
            .iter()
            .map(|t| t.report.cgo_circuits_created)
            .sum();
        info!(
        "stopped after {}s: relayed {} cells, read {} B, written {} B, extends {} same-worker / {} cross-worker, {} CGO circuits",
        self.started.elapsed().as_secs(),
        self.bw.total_cells,
        self.bw.total_read,
        self.bw.total_written,
        self.extends_same_worker,
        self.extends_cross_worker,
        cgo
    );
    }

    /// The heartbeat: uptime, connections, traffic, CPU; the DoS and
    /// memory lines.
    pub(super) fn log_heartbeat(&self) {
        let circuits: u64 = self.worker_load.iter().map(|w| w.circuits).sum();
        let conns = self.conns.len();
        let main_cpu = worker::thread_cpu_ns();
        let worker_cpu: u64 = self.worker_cpu_ns.iter().sum();
        info!(
            target: "heartbeat",
            "heartbeat: uptime {}s, {conns} connections, {} circuit halves, read {} B, written {} B, observed {} B/s, extends {} same-worker / {} cross-worker, main thread CPU {:.2}s, worker CPU {:.2}s",
            self.started.elapsed().as_secs(),
            circuits,
            self.bw.total_read,
            self.bw.total_written,
            self.bw.observed(),
            self.extends_same_worker,
            self.extends_cross_worker,
            main_cpu as f64 / 1e9,
            worker_cpu as f64 / 1e9,
        );
        let mut l = crate::messages::LimitReport::default();
        for w in &self.worker_totals {
            l.add(&w.report.limits);
        }
        let d = &self.limits.clients.stats;
        info!(
            target: "heartbeat",
            "DoS mitigation since startup: {} circuits rejected, {} marked addresses, {} same address concurrent connections rejected, {} connections rejected, {} single hop clients refused; {} addresses tracked",
            l.dos_cc_rejected,
            d.cc_marked_addrs,
            d.conn_rejected,
            d.conn_connect_rejected,
            l.single_hop_refused,
            self.limits.clients.len()
        );
        info!(
            target: "heartbeat",
            "memory: cell queues hold {} KiB of MaxMemInQueues {} MiB; out-of-memory handler closed {} circuits ({} KiB); CREATE2 handshakes {} processed, {} dropped",
            self.limits.queued_total() / 1024,
            self.limits.max_mem >> 20,
            l.oom_circuits,
            l.oom_bytes / 1024,
            l.onionskins_processed.iter().sum::<u64>(),
            l.onionskins_dropped.iter().sum::<u64>()
        );
        self.log_accounting();
    }

    /// DUMP / SIGUSR1: the heartbeat and each worker's counters.
    pub(super) fn log_dump(&self) {
        self.log_heartbeat();
        for (i, w) in self.worker_totals.iter().enumerate() {
            info!(
                "worker {i}: read {} B, written {} B, {} cells relayed, {} circuit halves, CPU {:.2}s",
                w.report.read_bytes,
                w.report.written_bytes,
                w.report.cells_relayed,
                self.worker_load.get(i).map(|l| l.circuits).unwrap_or(0),
                self.worker_cpu_ns.get(i).copied().unwrap_or(0) as f64 / 1e9
            );
        }
    }

    /// Apply a re-read configuration (or refuse it and keep the old).
    pub(super) fn reload(&mut self, new: Result<RelayConfig, String>, dir: &mut DirState) {
        let mut new = match new {
            Ok(n) => n,
            Err(e) => {
                warn!("reload refused: {e}; the old configuration stays");
                return;
            }
        };
        let old = &self.cfg;
        // Options that need a restart: named in the log, and the running
        // value kept (one list, so the two cannot drift apart).
        let mut restart = Vec::new();
        macro_rules! needs_restart {
            ($name:expr, $($field:ident),+) => {
                if $(old.$field != new.$field)||+ {
                    restart.push($name);
                    $(new.$field = old.$field.clone();)+
                }
            };
        }
        needs_restart!("ORPort", or_listen, ipv6_or_port);
        // A new Address applies through the address check below (C's
        // next `check_descriptor_ipaddress_changed`); a new port needs a
        // restart (it is the ORPort's).
        if old.advertised.port() != new.advertised.port() {
            restart.push("Address");
        }
        new.advertised = old.advertised;
        needs_restart!("DataDirectory", data_dir);
        needs_restart!("User", user);
        needs_restart!("FamilyId, FamilyKeyDirectory", family_ids, family_key_dir);
        needs_restart!("DirAuthority", authorities);
        needs_restart!("ConnectionThreads", connection_threads);
        needs_restart!("WorkerSchedSlice", worker_sched_slice);
        needs_restart!(
            "MetricsPort, MetricsPortPolicy",
            metrics_port,
            metrics_policy
        );
        needs_restart!("ControlPort and its authentication", control);
        needs_restart!("TestingTorNetwork", testing_tor_network);
        needs_restart!("DirCache", dir_cache);
        needs_restart!("MaxMemInQueues", max_mem_in_queues);
        needs_restart!("ConnLimit", conn_limit);
        needs_restart!("TokenBucketRefillInterval", token_bucket_refill);
        needs_restart!("ServerDNSDetectHijacking", dns_detect_hijacking);
        needs_restart!("ServerDNSTestAddresses", dns_test_addresses);
        needs_restart!(
            "Testing options",
            testing_cross_worker,
            testing_migrate_every,
            testing_place_on_worker
        );
        if old.exit_policy.is_reject_star() != new.exit_policy.is_reject_star() {
            // Turning the exit on or off starts or stops the resolver.
            restart.push("exit relay on/off (ExitRelay, ExitPolicy)");
            new.exit_policy = old.exit_policy.clone();
        }
        if old.accounting.is_some() != new.accounting.is_some() {
            restart.push("accounting on/off (AccountingMax)");
            new.accounting = old.accounting;
        }
        new.alloc_probe = old.alloc_probe;
        new.heap_trim = old.heap_trim;
        // What applies now, for the log.
        let mut applied = Vec::new();
        for (name, same) in [
            ("Nickname", old.nickname == new.nickname),
            ("ContactInfo", old.contact == new.contact),
            ("MyFamily", old.family == new.family),
            (
                "BandwidthRate/Burst",
                old.bandwidth_rate == new.bandwidth_rate
                    && old.bandwidth_burst == new.bandwidth_burst,
            ),
            (
                "MaxAdvertisedBandwidth",
                old.max_advertised_bandwidth == new.max_advertised_bandwidth,
            ),
            ("ExitPolicy", old.exit_policy == new.exit_policy),
            (
                "ExtendAllowPrivateAddresses",
                old.extend_allow_private == new.extend_allow_private,
            ),
            (
                "CircuitPriorityHalflife",
                old.circuit_priority_halflife == new.circuit_priority_halflife,
            ),
            (
                "KIST options",
                old.kist_run_interval_ms == new.kist_run_interval_ms
                    && old.kist_sock_buf_factor == new.kist_sock_buf_factor,
            ),
            ("CircuitPadding", old.circuit_padding == new.circuit_padding),
            ("DoS options", old.dos == new.dos),
            (
                "HeartbeatPeriod",
                old.heartbeat_period == new.heartbeat_period,
            ),
            ("OutboundBindAddress", old.outbound == new.outbound),
            (
                "ServerDNSResolvConfFile/RandomizeCase",
                old.dns_resolv_conf == new.dns_resolv_conf
                    && old.dns_randomize_case == new.dns_randomize_case,
            ),
            ("ShutdownWaitLength", old.shutdown_wait == new.shutdown_wait),
            (
                "SigningKeyLifetime",
                old.signing_key_lifetime == new.signing_key_lifetime,
            ),
            ("Accounting options", old.accounting == new.accounting),
        ] {
            if !same {
                applied.push(name);
            }
        }
        let bw_changed =
            old.bandwidth_rate != new.bandwidth_rate || old.bandwidth_burst != new.bandwidth_burst;
        self.reload_accounting(&new);
        // The next signing certificate lasts the new lifetime (as C).
        self.keys.signing_lifetime = new.signing_key_lifetime;
        self.cfg = new;
        // C's dns_reset(): the name servers read again if their file
        // changed (ServerDNSResolvConfFile and ServerDNSRandomizeCase
        // apply now); the thread says what came of it.
        if let Some(r) = &self.resolver {
            r.reload(
                self.cfg.dns_resolv_conf.clone(),
                self.cfg.dns_randomize_case,
            );
        }
        if bw_changed {
            let n = self.workers.len().max(1) as u64;
            let (rate, burst) = (
                (self.cfg.bandwidth_rate / n).max(1),
                (self.cfg.bandwidth_burst / n).max(1),
            );
            for (i, w) in self.workers.iter().enumerate() {
                w.send(WorkerMsg::BandwidthShare { rate, burst });
                if let Some(s) = self.shares.get_mut(i) {
                    *s = rate;
                }
            }
        }
        self.limits.dos = sched_params(&self.cfg, &dir.params).dos;
        dir.reconfigure(&self.cfg);
        self.rebuild_context(dir);
        self.check_address(dir);
        info!(
            "reloaded the torrc: applied {}{}",
            if applied.is_empty() {
                "no change".to_string()
            } else {
                applied.join(", ")
            },
            if restart.is_empty() {
                String::new()
            } else {
                format!(
                    "; these changed but need a restart (old values kept): {}",
                    restart.join(", ")
                )
            }
        );
    }
}

/// Re-read the torrc with the binary's reloader.
pub(super) fn reload_torrc(r: &mut Option<Reloader>) -> Result<RelayConfig, String> {
    match r {
        Some(f) => f(),
        None => Err("this weft was started without a torrc to re-read".into()),
    }
}
