//! The driver's counters and its once-a-second housekeeping: the report to
//! the controller (its counters and the core's, as deltas).

use std::time::{Duration, Instant};

use super::core::CoreCounters;
use super::{thread_cpu_ns, Worker};
use crate::histogram::DelayHistogram;
use crate::messages::{ConnId, ControllerMsg, WorkerReport};

/// The report's own timer: later than the core's once-a-second tick,
/// which brings the report first whenever the core has a connection.
pub(crate) const HOUSEKEEPING_FALLBACK: Duration = Duration::from_millis(1100);

/// Bytes given back by idle links after which the worker trims the heap
/// (about fifteen links' buffers): trimming walks every arena's free
/// lists, so it waits until there is something worth giving back.
const TRIM_AFTER: usize = 1024 * 1024;
/// After a trim, the worker waits this many times as long as it took
/// before the next, and at least [`TRIM_INTERVAL`]: trimming walks every
/// arena's free chunks (one `madvise` each, and a TLB shootdown on the
/// other workers' cores), and a page it gave back costs a fault when a
/// waking link touches it again. Trimming once a second per worker cost
/// weft-2 ~25% more CPU per GiB of bulk traffic with 4,000 links waking
/// for cells now and then (docs/perf.md, "Link memory").
const TRIM_PAUSE: u32 = 1000;
/// The shortest time between two trims of one worker.
const TRIM_INTERVAL: Duration = Duration::from_secs(10);
/// Connections with more circuit halves than this are not offered to the
/// balancer: a move sends a few ordered messages per half (to each peer's
/// worker), and a relay link with 12,500 circuits (a sink of the scale
/// bench at 100,000) put ~30,000 of them in one ring's waiting line — 17 MiB
/// of RSS while the bulk load ran (issue 37), and a pause for every one of
/// its circuits. A busy relay has many lighter connections to move.
pub(crate) const MAX_MOVE_HALVES: usize = 1024;
/// The four busiest connections of the last second that the balancer may
/// move (bytes read and written; none with more than [`MAX_MOVE_HALVES`]
/// circuit halves), busiest first; unused places are `(0, 0)`.
#[derive(Default)]
struct MoveCandidates {
    top: [(ConnId, u64); 4],
}

impl MoveCandidates {
    /// Consider connection `id`, which moved `bytes` and holds `halves`.
    fn offer(&mut self, id: ConnId, bytes: u64, halves: usize) {
        if halves > MAX_MOVE_HALVES {
            return;
        }
        if let Some(i) = self.top.iter().position(|t| bytes > t.1) {
            self.top[i..].rotate_right(1);
            self.top[i] = (id, bytes);
        }
    }
}

/// Circuits built or closed after which a worker trims the heap once a
/// second passes without one built: a burst of circuit creation leaves
/// its handshakes', queues' and grown tables' freed blocks in the
/// worker's malloc arena (a trim after building 1,000 circuits on two
/// workers gave back 5.8 MiB, more than the circuits hold).
const TRIM_AFTER_CIRCUITS: u64 = 256;

/// Decides when a worker gives its heap's free pages back: after idle
/// links released [`TRIM_AFTER`] bytes, or after a burst of circuits built
/// or closed has ended; never sooner than the pause after the last trim.
pub(crate) struct TrimPacer {
    /// Bytes idle links gave back since the last trim.
    released: usize,
    /// Circuit halves created or closed since the last trim.
    circuits: u64,
    /// Halves held at the last pass.
    halves: u64,
    /// Not before then: each trim is followed by a pause 1000 times as
    /// long as it took (at least 10 s), so trimming itself costs a worker
    /// at most 0.1% of its time however large the heap.
    next: Instant,
}

impl TrimPacer {
    pub(crate) fn new(now: Instant) -> Self {
        TrimPacer {
            released: 0,
            circuits: 0,
            halves: 0,
            next: now,
        }
    }

    /// Idle links gave back `bytes` of buffers.
    pub(crate) fn released(&mut self, bytes: usize) {
        self.released += bytes;
    }

    /// The once-a-second pass: `created` circuits were created here since
    /// the last pass (CREATE2 answered) and `halves` are held now (the
    /// outbound halves of circuits extended from another worker only show
    /// there). True if the heap should be trimmed now.
    pub(crate) fn due(&mut self, now: Instant, created: u64, halves: u64) -> bool {
        let grown = halves.saturating_sub(self.halves);
        let shrunk = self.halves.saturating_sub(halves);
        self.halves = halves;
        self.circuits += created.max(grown) + shrunk;
        let building = created > 0 || grown > 0;
        let burst_over = self.circuits >= TRIM_AFTER_CIRCUITS && !building;
        (self.released >= TRIM_AFTER || burst_over) && now >= self.next
    }

    /// A trim that took `took` ended at `now`.
    pub(crate) fn trimmed(&mut self, now: Instant, took: Duration) {
        self.released = 0;
        self.circuits = 0;
        self.next = now + (took * TRIM_PAUSE).max(TRIM_INTERVAL);
    }
}

/// The driver's counters, touched only by the worker's thread.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) allocations: u64,
    pub(crate) outq: DelayHistogram,
    pub(crate) outq_tick: u32,
    pub(crate) read: u64,
    pub(crate) written: u64,
    /// Of `read` and `written`, over IPv6 (relay connections and exit
    /// streams; the extra-info's `ipv6-*-history`).
    pub(crate) read_v6: u64,
    pub(crate) written_v6: u64,
    /// Bytes read from and written to exit streams' sockets.
    pub(crate) stream_read: u64,
    pub(crate) stream_written: u64,
    pub(crate) wakeups: u64,
    pub(crate) rounds: u64,
    pub(crate) busy_ns: u64,
    /// The core's counters as of this snapshot.
    pub(crate) core: CoreCounters,
    /// The core's resource-limit counters as of this snapshot.
    pub(crate) limits: super::core::limits::LimitCounters,
    /// The stream room's counters as of this snapshot.
    pub(crate) exit: crate::messages::ExitCounters,
    /// The counters behind C Tor's families, as of this snapshot.
    pub(crate) relay: crate::messages::RelayCounters,
}

impl Worker {
    /// Send the controller the counters since the last report.
    pub(crate) fn report(&mut self) {
        self.counters.allocations = self.cfg.alloc_probe.map_or(0, |f| f());
        let from_core = self.core.report();
        self.counters.core = from_core.counters;
        self.counters.limits = from_core.limits;
        self.counters.exit = from_core.exit;
        self.counters.exit.bytes_from_dest = self.counters.stream_read;
        self.counters.exit.bytes_to_dest = self.counters.stream_written;
        self.counters.relay = crate::messages::RelayCounters {
            circuits_open: from_core.circuits_open,
            destroy_cells: from_core.counters.destroy_cells,
            drop_cells: from_core.counters.drop_cells,
            protocol_closes: from_core.counters.protocol_closes,
            exit_conns_created: self.streams.created,
            exit_conns_open: self.streams.open,
            tcp_exhaustion: self.streams.tcp_exhaustion,
            rate_limit_reached: [
                self.read_bucket.times_emptied(),
                self.write_bucket.times_emptied(),
            ],
            padding: from_core.counters.padding,
        };
        let now = self.counters;
        let last = self.reported;
        self.reported = now;
        let report = WorkerReport {
            allocations: now.allocations - last.allocations,
            delay: now.core.delay.since(&last.core.delay),
            queue_wait: now.core.queue_wait.since(&last.core.queue_wait),
            outq: now.outq.since(&last.outq),
            read_bytes: now.read - last.read,
            written_bytes: now.written - last.written,
            read_v6_bytes: now.read_v6 - last.read_v6,
            written_v6_bytes: now.written_v6 - last.written_v6,
            cells_relayed: now.core.cells - last.core.cells,
            cells_cross_worker: now.core.cross - last.core.cross,
            connections: self.conns.len() as u64,
            circuits: from_core.halves,
            circuits_created: now.core.created - last.core.created,
            cgo_circuits_created: now.core.cgo_created - last.core.cgo_created,
            queued_cells: from_core.queued_cells,
            pool_slots: from_core.pool_slots,
            wakeups_sent: now.wakeups - last.wakeups,
            rounds: now.rounds - last.rounds,
            busy_ns: now.busy_ns - last.busy_ns,
            migrations: now.core.migrations - last.core.migrations,
            top_conns: self.tally_conns(now.core.created - last.core.created, from_core.halves),
            onion: now.core.onion.since(&last.core.onion),
            exit: now.exit.since(&last.exit),
            relay: now.relay.since(&last.relay),
            limits: {
                let (n, l) = (&now.limits, &last.limits);
                crate::messages::LimitReport {
                    queued_bytes: from_core.queued_bytes,
                    oom_circuits: n.oom_circuits - l.oom_circuits,
                    oom_bytes: n.oom_bytes - l.oom_bytes,
                    dos_cc_rejected: n.dos_cc_rejected - l.dos_cc_rejected,
                    single_hop_refused: n.single_hop_refused - l.single_hop_refused,
                    onionskins_dropped: std::array::from_fn(|i| {
                        n.onionskins_dropped[i] - l.onionskins_dropped[i]
                    }),
                    onionskins_processed: std::array::from_fn(|i| {
                        n.onionskins_processed[i] - l.onionskins_processed[i]
                    }),
                }
            },
        };
        let _ = self.reports.send(ControllerMsg::WorkerStats {
            worker: self.id,
            report,
            cpu_ns: thread_cpu_ns(),
        });
    }

    /// The four connections that moved the most bytes since the last call
    /// (and reset the counts), of those light enough to move to another
    /// worker (at most [`MAX_MOVE_HALVES`] circuits: the balancer picks
    /// from these). A connection that moved none gives back
    /// its buffers ([`crate::link_io::LinkConn::release_idle_buffers`]),
    /// and once that adds up to [`TRIM_AFTER`] the heap's free pages go
    /// back to the kernel ([`super::WorkerConfig::heap_trim`]).
    fn tally_conns(&mut self, created: u64, halves: u64) -> [(ConnId, u64); 4] {
        let mut top = MoveCandidates::default();
        let Worker {
            conns, core, trim, ..
        } = self;
        for (idx, c) in conns.iter_mut() {
            let b = std::mem::take(&mut c.bytes_recent);
            c.bytes_last_second = b;
            if b == 0 {
                trim.released(c.link.release_idle_buffers());
            }
            top.offer(c.id, b, core.circuits_on(idx));
        }
        let now = Instant::now();
        if self.trim.due(now, created, halves) {
            if let Some(trim) = self.cfg.heap_trim {
                trim();
                let took = now.elapsed();
                self.trim.trimmed(now, took);
                tracing::debug!("heap trimmed in {took:?}");
            }
        }
        top.top
    }

    /// Once a second: the report. (The protocol's timers are the core's,
    /// [`super::core::timers`].) It runs in the round of the core's own
    /// once-a-second tick ([`super::core::Effect::Tick`]), so the two share
    /// a wake-up; its own timer, a little later than the tick, only
    /// serves while the core has no connection to tick for.
    pub(crate) fn housekeeping(&mut self) {
        self.next_housekeeping = Instant::now() + HOUSEKEEPING_FALLBACK;
        self.idle_reported = self.is_idle();
        self.report();
        self.apply_effects();
        self.reap();
        self.apply_effects();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_balancer_is_offered_the_busiest_links_but_none_too_big_to_move() {
        let mut c = MoveCandidates::default();
        c.offer(1, 500, 10);
        // The busiest link of all, but a sink of 12,500 circuits: left.
        c.offer(2, 9_000, 12_500);
        c.offer(3, 700, MAX_MOVE_HALVES);
        c.offer(4, 0, 1);
        c.offer(5, 600, MAX_MOVE_HALVES + 1);
        c.offer(6, 100, 2);
        c.offer(7, 800, 3);
        assert_eq!(c.top, [(7, 800), (3, 700), (1, 500), (6, 100)]);
        // Idle links are never candidates.
        let mut idle = MoveCandidates::default();
        idle.offer(8, 0, 1);
        assert_eq!(idle.top, [(0, 0); 4]);
    }

    #[test]
    fn a_burst_of_circuits_is_trimmed_after_once_it_is_over() {
        let t0 = Instant::now();
        let mut p = TrimPacer::new(t0);
        // Building: 300 circuits in one second, 200 the next.
        assert!(!p.due(t0, 300, 300));
        assert!(!p.due(t0, 200, 500));
        // The burst is over: trim.
        assert!(p.due(t0, 0, 500));
        p.trimmed(t0, Duration::from_millis(1));
        // A second burst within the pause waits for it.
        assert!(!p.due(t0, 0, 100));
        assert!(!p.due(t0 + Duration::from_secs(5), 0, 100));
        assert!(p.due(t0 + TRIM_INTERVAL, 0, 100));
    }

    #[test]
    fn a_trickle_of_circuits_trims_nothing_until_it_adds_up() {
        let t0 = Instant::now();
        let mut p = TrimPacer::new(t0);
        // Outbound halves only (extended from another worker): 10 a
        // second, each second building, so no burst has ended.
        for s in 1..=30u64 {
            assert!(!p.due(t0, 0, s * 10), "second {s}");
        }
        // It stops: 300 halves of churn, trimmed.
        assert!(p.due(t0, 0, 300));
        p.trimmed(t0, Duration::ZERO);
        // A few circuits closing later do not add up to a trim.
        assert!(!p.due(t0 + TRIM_INTERVAL, 0, 290));
    }

    #[test]
    fn released_link_buffers_trim_as_before() {
        let t0 = Instant::now();
        let mut p = TrimPacer::new(t0);
        p.released(TRIM_AFTER / 2);
        assert!(!p.due(t0, 0, 0));
        p.released(TRIM_AFTER / 2);
        assert!(p.due(t0, 0, 0));
        // Took 20 ms: the pause is 20 s.
        p.trimmed(t0, Duration::from_millis(20));
        p.released(TRIM_AFTER);
        assert!(!p.due(t0 + TRIM_INTERVAL, 0, 0));
        assert!(p.due(t0 + Duration::from_secs(20), 0, 0));
    }
}
