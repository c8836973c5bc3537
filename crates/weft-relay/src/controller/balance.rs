//! Where work goes: the worker for a new connection (least loaded by
//! measured busy time), moving a connection when one worker stays busier
//! than another (or every N seconds under `TestingMigrateEvery`), and the
//! split of BandwidthRate between workers by recent demand. Controller
//! state only; workers are told by message.

use tracing::{debug, info, warn};

use super::Controller;
use crate::messages::ConnId;
use crate::worker::WorkerMsg;

/// Seconds a move may take before the controller stops waiting for its
/// end and allows the next one. A move ends within a few rounds; one that
/// does not (a circuit's extend still pending, say) ends when that circuit
/// is linked or closed.
pub(super) const MIGRATION_TIMEOUT_S: u64 = 10;

/// Seconds a connection whose worker refused to move it (busy: waiting
/// for ring room, a handshake, an earlier move) is not picked again, so
/// the balancer tries the next candidate instead of the same one.
pub(super) const REFUSED_COOLDOWN_S: u64 = 10;

/// One move at a time: a half keeps one marker to wait for, so two moves
/// that overlap on a circuit could reorder its cells. The next move starts
/// when the workers say the last is over (`MigrationDone`) or after
/// [`MIGRATION_TIMEOUT_S`].
#[derive(Debug, Default)]
pub(super) struct MoveGate {
    /// The move in flight: connection, second it was asked for.
    in_flight: Option<(ConnId, u64)>,
    /// Recently refused moves: connection, second it was asked for (a few;
    /// the oldest is forgotten first).
    refused: Vec<(ConnId, u64)>,
}

impl MoveGate {
    /// True if a move may start at second `secs` (a move that timed out
    /// is forgotten, with a warning).
    pub(super) fn open(&mut self, secs: u64) -> bool {
        let Some((id, since)) = self.in_flight else {
            return true;
        };
        if secs.saturating_sub(since) < MIGRATION_TIMEOUT_S {
            return false;
        }
        warn!("the move of connection {id} is not over after {MIGRATION_TIMEOUT_S} s; moving others again");
        self.in_flight = None;
        true
    }

    /// A move of `id` was asked for at second `secs`.
    pub(super) fn started(&mut self, id: ConnId, secs: u64) {
        self.in_flight = Some((id, secs));
    }

    /// The workers say the move of `id` is over, done or refused (true if
    /// it was the one in flight).
    pub(super) fn over(&mut self, id: ConnId, moved: bool) -> bool {
        let Some((f, since)) = self.in_flight.filter(|(f, _)| *f == id) else {
            return false;
        };
        self.in_flight = None;
        if !moved {
            if self.refused.len() >= 8 {
                self.refused.remove(0);
            }
            self.refused.push((f, since));
        }
        true
    }

    /// True if the worker refused to move `id` less than
    /// [`REFUSED_COOLDOWN_S`] before second `secs`.
    pub(super) fn refused_recently(&self, id: ConnId, secs: u64) -> bool {
        self.refused
            .iter()
            .any(|&(r, at)| r == id && secs.saturating_sub(at) < REFUSED_COOLDOWN_S)
    }
}

impl Controller {
    /// The worker for a new connection: the least loaded by measured load
    /// (EWMA of busy time), then by connections; ties round robin.
    /// `TestingPlaceOnWorker` overrides it (tests of the balancer).
    pub(super) fn pick_worker(&mut self) -> usize {
        let n = self.workers.len();
        if let Some(w) = self.cfg.testing_place_on_worker.filter(|w| *w < n) {
            return w;
        }
        let start = self.next_worker;
        self.next_worker = (self.next_worker + 1) % n;
        let score = |w: usize| self.load[w] + 0.01 * self.worker_load[w].connections as f64;
        (0..n)
            .map(|i| (start + i) % n)
            .min_by(|&a, &b| score(a).total_cmp(&score(b)))
            .unwrap_or(0)
    }

    /// Once a second: update the load EWMAs; when one worker has been
    /// busier than another by more than 20% of a core for 3 seconds, move
    /// one of its connections there (the one whose traffic is closest to
    /// half the difference). With `TestingMigrateEvery`, also move some
    /// connection every that many seconds, whatever the load.
    pub(super) fn balance(&mut self, secs: u64) {
        let n = self.workers.len();
        if n < 2 {
            return;
        }
        for w in 0..n {
            let busy = self.worker_load[w].busy_ns as f64 / 1e9;
            self.load[w] = 0.5 * self.load[w] + 0.5 * busy;
        }
        if !self.moves.open(secs) {
            return;
        }
        if let Some(every) = self.cfg.testing_migrate_every.filter(|e| *e > 0) {
            if secs.is_multiple_of(every) && !self.conns.is_empty() {
                let ids: Vec<ConnId> = self.conns.keys().copied().collect();
                let id = ids[rand::random_range(0..ids.len())];
                if let Some(f) = self.conns.get(&id) {
                    let to = (f.worker + 1) % n;
                    debug!(
                        "TestingMigrateEvery: moving connection {id} from worker {} to {to}",
                        f.worker
                    );
                    self.workers[f.worker].send(WorkerMsg::Migrate { conn_id: id, to });
                    self.moves.started(id, secs);
                }
            }
            return;
        }
        let (hi, lo) = (0..n).fold((0, 0), |(hi, lo), w| {
            (
                if self.load[w] > self.load[hi] { w } else { hi },
                if self.load[w] < self.load[lo] { w } else { lo },
            )
        });
        let gap = self.load[hi] - self.load[lo];
        if gap > 0.2 && self.load[hi] > 0.3 {
            self.imbalance_secs += 1;
        } else {
            self.imbalance_secs = 0;
        }
        if self.imbalance_secs < 3 {
            return;
        }
        self.imbalance_secs = 0;
        let r = &self.worker_load[hi];
        let bytes = (r.read_bytes + r.written_bytes).max(1) as f64;
        let want = bytes * (gap / 2.0) / self.load[hi].max(1e-9);
        let pick = r
            .top_conns
            .iter()
            .filter(|(id, b)| {
                *id != 0
                    && (*b as f64) < 0.9 * bytes
                    && self.conns.contains_key(id)
                    && !self.moves.refused_recently(*id, secs)
            })
            .min_by(|a, b| {
                (a.1 as f64 - want)
                    .abs()
                    .total_cmp(&(b.1 as f64 - want).abs())
            });
        if let Some(&(conn_id, b)) = pick {
            info!(
                "balancing: worker {hi} at {:.0}% vs worker {lo} at {:.0}%; moving connection {conn_id} ({} KiB/s)",
                self.load[hi] * 100.0,
                self.load[lo] * 100.0,
                b / 1024
            );
            self.workers[hi].send(WorkerMsg::Migrate { conn_id, to: lo });
            self.moves.started(conn_id, secs);
            // Pretend the move happened so the next decision waits for data.
            self.load[hi] -= gap / 2.0;
            self.load[lo] += gap / 2.0;
        }
    }

    /// How much busier worker `w` is than the idlest worker (load EWMA,
    /// fraction of a core).
    pub(super) fn load_gap(&self, w: usize) -> f64 {
        let min = self.load.iter().copied().fold(f64::INFINITY, f64::min);
        self.load.get(w).map_or(f64::INFINITY, |l| l - min)
    }

    /// Split BandwidthRate/Burst between workers by recent demand
    /// ([`bandwidth_shares`]); a worker hears of its share only when it
    /// moves by more than 10%.
    pub(super) fn rebalance_bandwidth(&mut self) {
        let demand: Vec<u64> = self
            .worker_load
            .iter()
            .map(|r| r.read_bytes + r.written_bytes)
            .collect();
        let new = bandwidth_shares(
            self.cfg.bandwidth_rate,
            self.cfg.bandwidth_burst,
            &demand,
            &self.shares,
        );
        for (w, share) in new.into_iter().enumerate() {
            if let Some((rate, burst)) = share {
                if let Some(s) = self.shares.get_mut(w) {
                    *s = rate;
                }
                self.workers[w].send(WorkerMsg::BandwidthShare { rate, burst });
            }
        }
    }
}

/// Each worker's new (rate, burst) share of BandwidthRate/Burst, or None
/// where its share (`old`, 0 if never sent) stays: a quarter split evenly,
/// the rest in proportion to the bytes each moved in the last second
/// (`demand`), sent when it moves by more than 10%. Nothing changes while
/// the whole relay moved no more than a worker's smallest possible share
/// (a quarter of the rate split evenly): no worker can be held back by its
/// share then, and an idle relay's trickle (a keepalive here, a padding
/// cell there) swung the shares by far more than 10% and woke every
/// worker with a message most seconds (issue 53).
pub(super) fn bandwidth_shares(
    rate: u64,
    burst: u64,
    demand: &[u64],
    old: &[u64],
) -> Vec<Option<(u64, u64)>> {
    let n = demand.len();
    let total: u64 = demand.iter().sum();
    let floor = (rate as f64 * 0.25 / n.max(1) as f64) as u64;
    if n < 2 || total == 0 || total <= floor {
        return vec![None; n];
    }
    demand
        .iter()
        .enumerate()
        .map(|(w, d)| {
            let frac = 0.25 / n as f64 + 0.75 * *d as f64 / total as f64;
            let r = ((rate as f64 * frac) as u64).max(1);
            let b = ((burst as f64 * frac) as u64).max(1);
            let was = old.get(w).copied().unwrap_or(0);
            (was == 0 || r.abs_diff(was) * 10 > was).then_some((r, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_follows_demand_but_not_an_idle_trickle() {
        const MB: u64 = 1 << 20;
        // Two workers, 8 MiB/s: a trickle of 900 B on one worker (a
        // keepalive, padding) far below a quarter's even split (1 MiB)
        // changes nothing.
        assert_eq!(
            bandwidth_shares(8 * MB, 16 * MB, &[900, 0], &[4 * MB, 4 * MB]),
            vec![None, None]
        );
        assert_eq!(
            bandwidth_shares(8 * MB, 16 * MB, &[MB, 0], &[4 * MB, 4 * MB]),
            vec![None, None]
        );
        // Real demand, all on worker 0: it gets 7/8 (1/8 + 3/4), worker 1
        // the even quarter's 1/8.
        assert_eq!(
            bandwidth_shares(8 * MB, 16 * MB, &[3 * MB, 0], &[4 * MB, 4 * MB]),
            vec![Some((7 * MB, 14 * MB)), Some((MB, 2 * MB))]
        );
        // Within 10% of what a worker has: not sent again.
        assert_eq!(
            bandwidth_shares(8 * MB, 16 * MB, &[3 * MB, 0], &[7 * MB, MB]),
            vec![None, None]
        );
        // One worker: its share is the whole rate, always.
        assert_eq!(
            bandwidth_shares(8 * MB, 16 * MB, &[3 * MB], &[0]),
            vec![None]
        );
    }

    #[test]
    fn one_move_at_a_time_until_it_is_over_or_times_out() {
        let mut g = MoveGate::default();
        assert!(g.open(0));
        g.started(7, 0);
        assert!(!g.open(1), "a move is in flight");
        assert!(
            !g.over(8, true),
            "another connection's report does not open it"
        );
        assert!(!g.open(MIGRATION_TIMEOUT_S - 1));
        assert!(g.over(7, true));
        assert!(g.open(2), "open once the move is over");
        g.started(9, 3);
        assert!(!g.open(3 + MIGRATION_TIMEOUT_S - 1));
        assert!(g.open(3 + MIGRATION_TIMEOUT_S), "open after the timeout");
        assert!(!g.over(9, false), "a late report changes nothing");
        assert!(!g.refused_recently(9, 3 + MIGRATION_TIMEOUT_S));
    }

    #[test]
    fn a_refused_connection_is_not_picked_again_for_a_while() {
        let mut g = MoveGate::default();
        g.started(7, 20);
        assert!(g.over(7, false));
        assert!(g.open(21));
        assert!(g.refused_recently(7, 21));
        assert!(!g.refused_recently(8, 21));
        assert!(!g.refused_recently(7, 20 + REFUSED_COOLDOWN_S));
        g.started(8, 22);
        assert!(g.over(8, true));
        assert!(
            !g.refused_recently(8, 23),
            "a move that happened is no refusal"
        );
        for id in 100..110 {
            g.started(id, 30);
            g.over(id, false);
        }
        assert!(!g.refused_recently(7, 31), "only the last few are kept");
        assert!(g.refused_recently(109, 31));
    }
}
