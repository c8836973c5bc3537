//! The bounded waits of a running network: clients bootstrapped, and
//! relays listed with given flags in every observer's consensus (nudging
//! nodes whose fetch schedule lags), with errors that say what is missing
//! for whom and quote the relevant logs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::control::{ConsensusEntry, ControlClient};
use crate::keys;
use crate::logs;
use crate::network::{section, NodeInfo, Role, Testnet, TAIL_LINES};

/// What tor authorities log (at info) when handling descriptor uploads
/// (dircache.c, process_descs.c).
const DESCRIPTOR_NEEDLES: &[&str] = &[
    "New descriptor post",
    "Rejected router descriptor",
    "Rejecting descriptor",
    "Dropping descriptor",
    "Did not add descriptor",
    "Not replacing descriptor",
    "Somebody attempted to publish",
    "Received bad key",
    "router descriptor",
];

/// Poll interval of the waits.
const POLL: Duration = Duration::from_millis(500);

impl Testnet {
    /// Wait until every client reports `PROGRESS=100` in
    /// `status/bootstrap-phase`; returns the time waited.
    pub fn wait_for_bootstrap(&mut self, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let clients: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| matches!(n.role, Role::Client | Role::OnionService))
            .cloned()
            .collect();
        let mut conns: HashMap<String, ControlClient> = HashMap::new();
        loop {
            self.check_alive()?;
            self.nudge_consensus_fetches(&mut conns);
            let mut pending = Vec::new();
            for c in &clients {
                let phase = open_control(&mut conns, c).and_then(|cc| cc.bootstrap_phase());
                match phase {
                    Ok((100, _)) => {}
                    Ok((_, v)) => pending.push((c, v)),
                    Err(e) => {
                        conns.remove(&c.name);
                        pending.push((c, format!("control port error: {e:#}")));
                    }
                }
            }
            if pending.is_empty() {
                return Ok(t0.elapsed());
            }
            if Instant::now() >= deadline {
                let mut msg = format!("clients not bootstrapped after {timeout:?}:");
                for (c, v) in &pending {
                    let _ = write!(msg, "\n  {}: {v}", c.name);
                }
                for (c, _) in &pending {
                    let _ = write!(
                        msg,
                        "\n{}",
                        section(
                            &format!("{} notice.log", c.name),
                            &logs::tail(&c.notice_log(), TAIL_LINES)
                        )
                    );
                }
                bail!(msg);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Wait until the consensus of every authority, exit and client lists
    /// each relay in `fingerprints` with every flag in `flags` (e.g.
    /// `["Running", "Valid", "Fast"]`); returns the time waited. On timeout
    /// the error names what is missing for whom ("client0: weft not in
    /// consensus; exit1: weft lacks Fast") and quotes the observers' logs, the
    /// missing relays' logs and what the authorities logged about them.
    pub fn wait_until_listed<S: AsRef<str>>(
        &mut self,
        fingerprints: &[S],
        flags: &[&str],
        timeout: Duration,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let fps = fingerprints
            .iter()
            .map(|f| keys::normalize_fingerprint(f.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let observers: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.role,
                    Role::Authority | Role::Exit | Role::Client | Role::OnionService
                )
            })
            .cloned()
            .collect();
        let mut conns: HashMap<String, ControlClient> = HashMap::new();
        loop {
            self.check_alive()?;
            self.nudge_consensus_fetches(&mut conns);
            let mut missing: Vec<(String, String, String)> = Vec::new(); // (observer, relay, problem)
            for o in &observers {
                for fp in &fps {
                    let relay = self.name_of(fp);
                    let entry = open_control(&mut conns, o).and_then(|c| c.consensus_entry(fp));
                    // (problem, whether to skip this observer's other relays)
                    let (problem, skip_rest) = match entry {
                        Ok(ConsensusEntry::Listed { flags: have, .. }) => {
                            let lacks: Vec<&str> = flags
                                .iter()
                                .copied()
                                .filter(|f| !have.iter().any(|h| h == f))
                                .collect();
                            if lacks.is_empty() {
                                continue;
                            }
                            let p = format!(
                                "{relay} lacks {} (has {})",
                                lacks.join(" "),
                                have.join(" ")
                            );
                            (p, false)
                        }
                        Ok(ConsensusEntry::NotListed) => {
                            (format!("{relay} not in consensus"), false)
                        }
                        Ok(ConsensusEntry::NoConsensus) => ("no consensus yet".to_string(), true),
                        Err(e) => {
                            conns.remove(&o.name);
                            (format!("control port error: {e:#}"), true)
                        }
                    };
                    // An observer-wide problem is about no relay in particular.
                    let about = if skip_rest { String::new() } else { relay };
                    missing.push((o.name.clone(), about, problem));
                    if skip_rest {
                        break;
                    }
                }
            }
            if missing.is_empty() {
                return Ok(t0.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(anyhow!(self.listing_report(&missing, &fps, flags, timeout)));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Make stock nodes that still have no consensus fetch it now that an
    /// authority has one. Before the first consensus exists every fetch gets
    /// a 404, and tor backs off with decorrelated jitter (dlstatus.c: next
    /// delay random in [1, 3 x previous]), so a node can be 10-20 s late.
    /// `SIGNAL RELOAD` (HUP) resets those schedules and fetches at once
    /// (main.c: do_hup -> router_reset_descriptor_download_failures,
    /// update_networkstatus_downloads). At most once per node every 5 s.
    fn nudge_consensus_fetches(&mut self, conns: &mut HashMap<String, ControlClient>) {
        const NUDGE_EVERY: Duration = Duration::from_secs(5);
        let has_consensus =
            |conns: &mut HashMap<String, ControlClient>, n: &NodeInfo| -> Option<bool> {
                let c = open_control(conns, n).ok()?;
                match c.getinfo("consensus/valid-after") {
                    Ok(v) => Some(!v.trim().is_empty()),
                    Err(_) => {
                        conns.remove(&n.name);
                        None
                    }
                }
            };
        let stock: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| n.role != Role::Weft && n.control_port.is_some())
            .cloned()
            .collect();
        let authority_has = stock
            .iter()
            .filter(|n| n.role == Role::Authority)
            .any(|a| has_consensus(conns, a) == Some(true));
        if !authority_has {
            return;
        }
        for n in stock.iter().filter(|n| n.role != Role::Authority) {
            if self
                .nudged
                .get(&n.name)
                .is_some_and(|t| t.elapsed() < NUDGE_EVERY)
            {
                continue;
            }
            if has_consensus(conns, n) == Some(false) {
                if let Ok(c) = open_control(conns, n) {
                    let _ = c.command("SIGNAL RELOAD");
                }
                self.nudged.insert(n.name.clone(), Instant::now());
            }
        }
    }

    fn listing_report(
        &self,
        missing: &[(String, String, String)],
        fps: &[String],
        flags: &[&str],
        timeout: Duration,
    ) -> String {
        let summary: Vec<String> = missing
            .iter()
            .map(|(o, _, p)| format!("{o}: {p}"))
            .collect();
        let mut msg = format!(
            "relays not listed with [{}] after {timeout:?} ({}): {}",
            flags.join(" "),
            self.tor_version,
            summary.join("; ")
        );
        let mut observers: Vec<&str> = missing.iter().map(|(o, _, _)| o.as_str()).collect();
        observers.dedup();
        for o in observers {
            if let Ok(n) = self.node(o) {
                let _ = write!(
                    msg,
                    "\n{}",
                    section(
                        &format!("{o} notice.log"),
                        &logs::tail(&n.notice_log(), TAIL_LINES)
                    )
                );
            }
        }
        for fp in fps {
            let relay = self.name_of(fp);
            if !missing.iter().any(|(_, r, _)| *r == relay) {
                continue;
            }
            if let Some(n) = self
                .nodes
                .iter()
                .find(|n| n.fingerprint.as_deref() == Some(fp.as_str()))
            {
                let _ = write!(
                    msg,
                    "\n{}",
                    section(
                        &format!("{relay} notice.log"),
                        &logs::tail(&n.notice_log(), TAIL_LINES)
                    )
                );
            }
            for a in self.by_role(Role::Authority) {
                // tor names relays as `$FP~nick` or `'nick'`.
                let (tilde, quoted) = (format!("~{relay}"), format!("'{relay}'"));
                let mentions =
                    logs::grep_tail_any(&a.info_log(), &[fp, &tilde, &quoted], usize::MAX);
                // Prefer what the authority decided (descriptor handling,
                // reachability tests) over circuits through the relay.
                let decisions: Vec<String> = mentions
                    .iter()
                    .filter(|l| {
                        ["dirserv", "rep_hist", "descriptor", "reachab"]
                            .iter()
                            .any(|k| l.contains(k))
                    })
                    .cloned()
                    .collect();
                let chosen = if decisions.is_empty() {
                    mentions
                } else {
                    decisions
                };
                let mut hits = chosen[chosen.len().saturating_sub(6)..].to_vec();
                let title = if hits.is_empty() {
                    // Nothing names the relay: show what the authority said
                    // about descriptor uploads in general.
                    hits = logs::grep_tail_any(&a.info_log(), DESCRIPTOR_NEEDLES, 8);
                    format!(
                        "{} info.log: nothing names {relay}; latest descriptor handling",
                        a.name
                    )
                } else {
                    format!("{} info.log about {relay}", a.name)
                };
                let _ = write!(msg, "\n{}", section(&title, &hits.join("\n")));
            }
        }
        msg
    }

    /// The node name for a fingerprint, or the fingerprint itself.
    fn name_of(&self, fp: &str) -> String {
        self.nodes
            .iter()
            .find(|n| n.fingerprint.as_deref() == Some(fp))
            .map(|n| n.name.clone())
            .unwrap_or_else(|| fp.to_string())
    }
}

fn open_control<'a>(
    conns: &'a mut HashMap<String, ControlClient>,
    n: &NodeInfo,
) -> Result<&'a mut ControlClient> {
    if !conns.contains_key(&n.name) {
        let addr = n
            .control_addr()
            .ok_or_else(|| anyhow!("{} has no control port", n.name))?;
        let c = ControlClient::connect(addr, &n.dir, Duration::from_secs(5))?;
        conns.insert(n.name.clone(), c);
    }
    conns
        .get_mut(&n.name)
        .ok_or_else(|| anyhow!("control connection vanished"))
}
