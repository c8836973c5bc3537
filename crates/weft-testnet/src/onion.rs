//! Onion services in a test network: the addresses of the services the
//! `hs0` node runs, a watch on their descriptor uploads (control-port
//! `HS_DESC` events), and the circuits a stock tor built for onion-service
//! purposes (control-port `CIRC` events with `PURPOSE=HS_*`).
//!
//! A network gets onion services with [`crate::TestnetConfig::onion_services`];
//! its clients reach them through their SocksPort when
//! [`crate::TestnetConfig::clients_choose_circuits`] is set (see
//! [`crate::traffic::socks5_connect_host`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

use crate::control::ControlClient;
use crate::network::{Role, Testnet};

impl Testnet {
    /// The onion addresses (`<56 chars>.onion`) of the network's services,
    /// in service order; read from `hs0/hs<i>/hostname`, which tor writes
    /// at start.
    pub fn onion_addresses(&self) -> Result<Vec<String>> {
        let hs = self
            .by_role(Role::OnionService)
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("this network runs no onion services"))?;
        (0..self.config().onion_services)
            .map(|i| {
                let p = hs.dir.join(format!("hs{i}")).join("hostname");
                let s = std::fs::read_to_string(&p)
                    .with_context(|| format!("reading {}", p.display()))?;
                let a = s.trim().to_string();
                if !a.ends_with(".onion") || a.len() != 62 {
                    bail!("{}: not a v3 onion address: {a:?}", p.display());
                }
                Ok(a)
            })
            .collect()
    }

    /// Start watching the onion-service node's descriptor uploads. Call it
    /// right after [`Testnet::start`], before the first consensus (no
    /// upload can happen earlier).
    pub fn watch_onion_uploads(&self) -> Result<UploadWatch> {
        let mut ctl = self.control("hs0")?;
        ctl.set_events(&["HS_DESC"])?;
        Ok(UploadWatch {
            ctl,
            uploaded: HashMap::new(),
            failed: Vec::new(),
        })
    }
}

/// The first onion-service time period that starts after `now` (Unix
/// seconds), in a network whose authorities vote every `voting_interval`
/// seconds. C tor on a `TestingTorNetwork` makes a time period one shared
/// random protocol run (24 voting intervals) and starts it half a run (12
/// intervals) into the run (`get_time_period_length`,
/// `hs_get_time_period_num` in hs_common.c): every 8 minutes here, at
/// Unix time ≡ 240 (mod 480).
pub fn hs_time_period_start_after(now: u64, voting_interval: u64) -> u64 {
    let length = 24 * voting_interval;
    let offset = 12 * voting_interval;
    match now.checked_sub(offset) {
        Some(since) => (since / length + 1) * length + offset,
        None => offset,
    }
}

impl Testnet {
    /// Wait, if need be, so that the next `busy` does not meet an
    /// onion-service time period's start: if one starts within `busy` from
    /// now, sleep until `settle` after it. Returns the time slept.
    ///
    /// At that start every stock client drops its cached descriptors when
    /// the first consensus of the new period reaches it (C's
    /// `cached_client_descriptor_has_expired`) and fetches the new
    /// period's, whose introduction points differ. A connection whose
    /// introduction circuit was already open to an old point then fails at
    /// once with a general SOCKS failure ("Unable to find introduction
    /// point", `consider_sending_introduce1`, a permanent error in C): a
    /// stock client's race, whatever the relays. With 20 s votes that
    /// start comes every 8 minutes, so a test that needs every connection
    /// to succeed keeps its rounds clear of it.
    pub fn wait_clear_of_hs_time_period_start(&self, busy: Duration, settle: Duration) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let start = Duration::from_secs(hs_time_period_start_after(
            now.as_secs(),
            crate::torrc::VOTING_INTERVAL_SECS,
        ));
        if start > now + busy {
            return Duration::ZERO;
        }
        let wait = start + settle - now;
        std::thread::sleep(wait);
        wait
    }
}

/// Descriptor uploads seen on the onion-service node.
#[derive(Debug)]
pub struct UploadWatch {
    ctl: ControlClient,
    /// Onion address (without `.onion`) → HSDirs that accepted it.
    uploaded: HashMap<String, HashSet<String>>,
    /// `HS_DESC FAILED` lines.
    failed: Vec<String>,
}

impl UploadWatch {
    /// Wait until every address in `onions` has been accepted by at least
    /// `min_hsdirs` HSDirs; an error after `timeout` naming the ones
    /// missing, with the failures seen.
    pub fn wait_uploaded(
        &mut self,
        onions: &[String],
        min_hsdirs: usize,
        timeout: Duration,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        loop {
            let missing: Vec<&String> = onions
                .iter()
                .filter(|o| {
                    let key = o.trim_end_matches(".onion");
                    self.uploaded.get(key).map_or(0, HashSet::len) < min_hsdirs
                })
                .collect();
            if missing.is_empty() {
                return Ok(t0.elapsed());
            }
            let now = Instant::now();
            if now >= deadline {
                let tail = &self.failed[self.failed.len().saturating_sub(8)..];
                bail!(
                    "onion descriptors not on {min_hsdirs} HSDirs after {timeout:?}: {missing:?}; failures: {tail:?}"
                );
            }
            if let Some(ev) = self.ctl.next_event(deadline - now)? {
                self.note(&ev);
            }
        }
    }

    /// Wait until every address in `onions` has been accepted by the HSDir
    /// whose fingerprint is `hsdir_fp` (hex, as events name it
    /// `$FP~nick`); an error after `timeout` naming the ones missing.
    pub fn wait_uploaded_to(
        &mut self,
        onions: &[String],
        hsdir_fp: &str,
        timeout: Duration,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        loop {
            let missing: Vec<&String> = onions
                .iter()
                .filter(|o| {
                    let key = o.trim_end_matches(".onion");
                    !self
                        .uploaded
                        .get(key)
                        .is_some_and(|h| h.iter().any(|d| d.contains(hsdir_fp)))
                })
                .collect();
            if missing.is_empty() {
                return Ok(t0.elapsed());
            }
            let now = Instant::now();
            if now >= deadline {
                let tail = &self.failed[self.failed.len().saturating_sub(8)..];
                bail!(
                    "onion descriptors not uploaded to {hsdir_fp} after {timeout:?}: {missing:?}; failures: {tail:?}"
                );
            }
            if let Some(ev) = self.ctl.next_event(deadline - now)? {
                self.note(&ev);
            }
        }
    }

    /// Upload failures seen so far (`HS_DESC FAILED ...` lines).
    pub fn failures(&self) -> &[String] {
        &self.failed
    }

    fn note(&mut self, ev: &str) {
        // HS_DESC UPLOADED <addr> <auth> <hsdir> ... [control-spec §4.1.25]
        let f: Vec<&str> = ev.split_whitespace().collect();
        match f.as_slice() {
            ["HS_DESC", "UPLOADED", addr, _auth, hsdir, ..] => {
                self.uploaded
                    .entry(addr.to_string())
                    .or_default()
                    .insert(hsdir.to_string());
            }
            ["HS_DESC", "FAILED", ..] => self.failed.push(ev.to_string()),
            _ => {}
        }
    }
}

/// Circuits one stock tor reported for onion-service purposes, and how many
/// of them passed through a given relay.
#[derive(Debug, Default, Clone)]
pub struct HsCircuitCount {
    /// BUILT circuits by purpose (`HS_CLIENT_HSDIR`, `HS_SERVICE_REND`, ...).
    pub built: HashMap<String, u64>,
    /// Of those, circuits whose path contains the relay, by purpose.
    pub through: HashMap<String, u64>,
}

impl HsCircuitCount {
    /// Add the BUILT onion-service circuits among CIRC event lines
    /// (`CIRC <id> BUILT <path> ... PURPOSE=HS_...`); `relay_fp` is the
    /// relay (40 hex) whose share is counted.
    pub fn add_events(&mut self, events: &[String], relay_fp: &str) {
        for line in events {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ["CIRC", _id, "BUILT", path, rest @ ..] = f.as_slice() else {
                continue;
            };
            let Some(purpose) = rest.iter().find_map(|kv| kv.strip_prefix("PURPOSE=")) else {
                continue;
            };
            if !purpose.starts_with("HS_") {
                continue;
            }
            *self.built.entry(purpose.to_string()).or_default() += 1;
            if path.to_ascii_uppercase().contains(relay_fp) {
                *self.through.entry(purpose.to_string()).or_default() += 1;
            }
        }
    }

    /// Circuits through the relay, all purposes together.
    pub fn through_total(&self) -> u64 {
        self.through.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_periods_start_every_24_votes_half_a_run_in() {
        // 2026-11-29 08:44:00 UTC: a start (minutes since the epoch ≡ 4
        // mod 8), as a stock client's logs showed.
        let start = 1_795_941_840;
        assert_eq!(start % 480, 240);
        assert_eq!(hs_time_period_start_after(start - 1, 20), start);
        assert_eq!(hs_time_period_start_after(start, 20), start + 480);
        assert_eq!(hs_time_period_start_after(start - 479, 20), start);
        assert_eq!(hs_time_period_start_after(start - 480, 20), start);
        // One-hour votes: daily periods starting at 12:00 UTC.
        assert_eq!(hs_time_period_start_after(0, 3600), 12 * 3600);
        assert_eq!(hs_time_period_start_after(12 * 3600, 3600), 36 * 3600);
    }

    #[test]
    fn counts_hs_circuits_through_a_relay() {
        let fp = "A".repeat(40);
        let ev = [
            format!("CIRC 5 BUILT $B~b,${fp}~weft,$C~c BUILD_FLAGS=IS_INTERNAL PURPOSE=HS_CLIENT_HSDIR TIME_CREATED=x"),
            "CIRC 6 BUILT $B~b,$C~c PURPOSE=HS_SERVICE_REND".to_string(),
            format!("CIRC 7 BUILT $B~b,${fp}~weft PURPOSE=GENERAL"),
            format!("CIRC 8 EXTENDED $B~b,${fp}~weft PURPOSE=HS_CLIENT_REND"),
        ];
        let mut c = HsCircuitCount::default();
        c.add_events(&ev, &fp);
        assert_eq!(c.built.get("HS_CLIENT_HSDIR"), Some(&1));
        assert_eq!(c.built.get("HS_SERVICE_REND"), Some(&1));
        assert_eq!(c.through_total(), 1);
    }
}
