//! Relay metrics: what the workers report every second, aggregated by the
//! controller and rendered for the MetricsPort in the Prometheus text
//! format (version 0.0.4): weft's own `weft_*` families here, C Tor's
//! `tor_*` families in [`super::tor_metrics`]; who may scrape is
//! [`super::metrics_http`]'s business. docs/metrics.md lists every family.
//!
//! Delays are log₂ histograms with fixed buckets (1 µs · 2^k), so a worker
//! can count them without allocating and send them by value.

use std::fmt::Write as _;

use crate::histogram::DelayHistogram;
use crate::messages::{OnionCounters, WorkerReport};

/// Totals of one worker since start.
#[derive(Debug, Default, Clone)]
pub struct WorkerTotals {
    /// Sum of the deltas, gauges as last reported.
    pub report: WorkerReport,
    /// CPU seconds of its thread.
    pub cpu_s: f64,
}

/// What the controller knows for the metrics page.
#[derive(Debug, Default, Clone)]
pub struct MetricsSnapshot {
    /// Per worker.
    pub workers: Vec<WorkerTotals>,
    /// CPU seconds of the main (controller) thread.
    pub main_cpu_s: f64,
    /// Connections known to the controller (open).
    pub connections: usize,
    /// Observed bandwidth (bytes/s) as published.
    pub observed_bandwidth: u64,
    /// Extends linked on the same worker / across workers.
    pub extends: (u64, u64),
    /// Onion-service roles: the workers' counters summed, the controller's
    /// table sizes (introduction circuits, waiting rendezvous circuits) and
    /// lookups that found nothing (unknown service, unknown cookie).
    pub onion: OnionSnapshot,
    /// Resource limits: memory, DoS, connections.
    pub limits: LimitsSnapshot,
    /// Exit streams: the workers' counters summed.
    pub exit: crate::messages::ExitCounters,
    /// Seconds since start.
    pub uptime_s: u64,
    /// Consensus diffs of the directory cache (set by the caller: the
    /// cache's state is not the controller's).
    pub dir_diffs: super::dir_cache::DiffMetrics,
    /// The HSDir's store.
    pub hs_dir: super::hs_dir::HsDirMetrics,
}

/// The resource-limit figures of the metrics page.
#[derive(Debug, Default, Clone)]
pub struct LimitsSnapshot {
    /// The workers' counters, summed (queued bytes: the controller's sum).
    pub counters: crate::messages::LimitReport,
    /// The controller's DoS counters.
    pub dos: crate::dos::DosStats,
    /// MaxMemInQueues in force.
    pub max_mem: u64,
    /// Connections counted against ConnLimit / the descriptors.
    pub open_conns: u64,
    /// Most connections allowed.
    pub max_conns: u64,
    /// Times the OOM handler closed circuits.
    pub oom_rounds: u64,
}

/// The onion-service figures of the metrics page.
#[derive(Debug, Default, Clone)]
pub struct OnionSnapshot {
    /// The workers' counters, summed.
    pub counters: OnionCounters,
    /// Introduction circuits registered now.
    pub intro_circuits: usize,
    /// Rendezvous circuits waiting for their service now.
    pub rend_waiting: usize,
    /// INTRODUCE1 for an auth key nobody registered.
    pub unknown_service: u64,
    /// RENDEZVOUS1 for a cookie nobody waits on.
    pub unknown_cookie: u64,
}

impl WorkerTotals {
    /// Add a report (deltas summed, gauges replaced).
    pub fn add(&mut self, r: &WorkerReport, cpu_ns: u64) {
        let t = &mut self.report;
        t.read_bytes += r.read_bytes;
        t.written_bytes += r.written_bytes;
        t.cells_relayed += r.cells_relayed;
        t.cells_cross_worker += r.cells_cross_worker;
        t.circuits_created += r.circuits_created;
        t.cgo_circuits_created += r.cgo_circuits_created;
        t.wakeups_sent += r.wakeups_sent;
        t.rounds += r.rounds;
        t.busy_ns += r.busy_ns;
        t.allocations += r.allocations;
        t.migrations += r.migrations;
        t.delay.add(&r.delay);
        t.queue_wait.add(&r.queue_wait);
        t.outq.add(&r.outq);
        t.onion.add(&r.onion);
        let (open, sets, legs) = (r.exit.open, r.exit.cfx.sets_open, r.exit.cfx.legs_open);
        t.exit.add(&r.exit);
        // Gauges: this worker's latest.
        t.exit.open = open;
        (t.exit.cfx.sets_open, t.exit.cfx.legs_open) = (sets, legs);
        t.limits.add(&r.limits);
        t.relay.add(&r.relay);
        t.connections = r.connections;
        t.circuits = r.circuits;
        t.queued_cells = r.queued_cells;
        t.pool_slots = r.pool_slots;
        self.cpu_s = cpu_ns as f64 / 1e9;
    }
}

pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `scale` converts bucket units to the metric's unit (1e-6: µs → s),
/// `sum_scale` the recorded sum (1e-9: ns → s).
fn histogram(
    out: &mut String,
    name: &str,
    worker: usize,
    h: &DelayHistogram,
    scale: f64,
    sum_scale: f64,
) {
    let mut cum = 0;
    for (k, c) in h.counts.iter().enumerate() {
        cum += c;
        let _ = writeln!(
            out,
            "{name}_bucket{{worker=\"{worker}\",le=\"{}\"}} {cum}",
            (1u64 << (k + 1)) as f64 * scale
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{worker=\"{worker}\",le=\"+Inf\"}} {cum}"
    );
    let _ = writeln!(
        out,
        "{name}_sum{{worker=\"{worker}\"}} {}",
        h.sum_ns as f64 * sum_scale
    );
    let _ = writeln!(out, "{name}_count{{worker=\"{worker}\"}} {cum}");
}

/// Render the Prometheus text exposition: C Tor's families first, then
/// weft's.
pub fn render(m: &MetricsSnapshot, t: &super::tor_metrics::TorSnapshot) -> String {
    let mut o = String::with_capacity(16384);
    super::tor_metrics::render(&mut o, m, t);
    let per_worker =
        |o: &mut String, name: &str, kind: &str, help: &str, f: &dyn Fn(&WorkerTotals) -> f64| {
            family(o, name, kind, help);
            for (i, w) in m.workers.iter().enumerate() {
                let _ = writeln!(o, "{name}{{worker=\"{i}\"}} {}", f(w));
            }
        };
    per_worker(
        &mut o,
        "weft_worker_read_bytes_total",
        "counter",
        "TLS plaintext bytes read by the worker's connections.",
        &|w| w.report.read_bytes as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_written_bytes_total",
        "counter",
        "TLS plaintext bytes written by the worker's connections.",
        &|w| w.report.written_bytes as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_relayed_cells_total",
        "counter",
        "Relay cells the worker handed from one circuit half to the other.",
        &|w| w.report.cells_relayed as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_cross_worker_cells_total",
        "counter",
        "Of those, cells handed to a half on another worker.",
        &|w| w.report.cells_cross_worker as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_circuits_created_total",
        "counter",
        "CREATE/CREATE2 cells answered.",
        &|w| w.report.circuits_created as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_cgo_circuits_created_total",
        "counter",
        "Of those, hops whose client asked for CGO relay crypto (Relay=6, relay cell format V1).",
        &|w| w.report.cgo_circuits_created as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_cpu_seconds_total",
        "counter",
        "CPU time (user+system) of the worker thread.",
        &|w| w.cpu_s,
    );
    per_worker(
        &mut o,
        "weft_worker_busy_seconds_total",
        "counter",
        "Time the worker spent working (not waiting for events).",
        &|w| w.report.busy_ns as f64 / 1e9,
    );
    per_worker(
        &mut o,
        "weft_worker_rounds_total",
        "counter",
        "Event-loop rounds.",
        &|w| w.report.rounds as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_wakeups_sent_total",
        "counter",
        "Wake-ups sent to other workers (at most one per published batch).",
        &|w| w.report.wakeups_sent as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_migrations_total",
        "counter",
        "Connections this worker handed to another worker (load balancing).",
        &|w| w.report.migrations as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_allocations_total",
        "counter",
        "Heap allocations made on the worker thread (counted by the weft binary's allocator).",
        &|w| w.report.allocations as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_connections",
        "gauge",
        "Open connections owned by the worker.",
        &|w| w.report.connections as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_circuit_halves",
        "gauge",
        "Circuit halves owned by the worker.",
        &|w| w.report.circuits as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_queued_cells",
        "gauge",
        "Cells waiting in the worker's circuit queues.",
        &|w| w.report.queued_cells as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_pool_cells",
        "gauge",
        "Cell slots allocated in the worker's pool.",
        &|w| w.report.pool_slots as f64,
    );
    family(&mut o, "weft_node_delay_seconds", "histogram", "Time a relayed cell spent inside the relay, from the read of its TLS record to the hand-over of its write to TLS.");
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_node_delay_seconds",
            i,
            &w.report.delay,
            1e-6,
            1e-9,
        );
    }
    family(
        &mut o,
        "weft_circuit_queue_wait_seconds",
        "histogram",
        "Part of the node delay a cell spent in its circuit's queue on the writing worker.",
    );
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_circuit_queue_wait_seconds",
            i,
            &w.report.queue_wait,
            1e-6,
            1e-9,
        );
    }
    family(
        &mut o,
        "weft_kernel_send_queue_bytes",
        "histogram",
        "Bytes in a connection's kernel send queue (SIOCOUTQ) when the scheduler looked: every connection and run with KIST, one write in 64 without.",
    );
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_kernel_send_queue_bytes",
            i,
            &w.report.outq,
            1.0,
            1.0,
        );
    }
    family(
        &mut o,
        "weft_main_thread_cpu_seconds_total",
        "counter",
        "CPU time of the main (controller) thread.",
    );
    let _ = writeln!(o, "weft_main_thread_cpu_seconds_total {}", m.main_cpu_s);
    family(
        &mut o,
        "weft_connections",
        "gauge",
        "Open OR connections known to the controller.",
    );
    let _ = writeln!(o, "weft_connections {}", m.connections);
    family(
        &mut o,
        "weft_observed_bandwidth_bytes",
        "gauge",
        "Observed bandwidth (largest 10 s average of min(read, written)).",
    );
    let _ = writeln!(o, "weft_observed_bandwidth_bytes {}", m.observed_bandwidth);
    family(
        &mut o,
        "weft_extends_total",
        "counter",
        "EXTEND2 requests linked, by where the two halves ended up.",
    );
    let _ = writeln!(
        o,
        "weft_extends_total{{placement=\"same_worker\"}} {}",
        m.extends.0
    );
    let _ = writeln!(
        o,
        "weft_extends_total{{placement=\"cross_worker\"}} {}",
        m.extends.1
    );
    render_onion(&mut o, &m.onion);
    render_limits(&mut o, &m.limits);
    super::exit_metrics::render_exit(&mut o, &m.exit);
    super::dir_cache::render_diffs(&mut o, &m.dir_diffs);
    super::hs_dir::render(&mut o, &m.hs_dir, &m.exit.dir);
    family(
        &mut o,
        "weft_uptime_seconds",
        "gauge",
        "Seconds since start.",
    );
    let _ = writeln!(o, "weft_uptime_seconds {}", m.uptime_s);
    render_padding(&mut o, m);
    o
}

/// Connection padding (proposal 251), every worker's together.
fn render_padding(o: &mut String, m: &MetricsSnapshot) {
    let mut p = crate::worker_report::PaddingCounters::default();
    for w in &m.workers {
        p.sum(&w.report.relay.padding);
    }
    let name = "weft_connection_padding_gap_seconds";
    family(
        o,
        name,
        "histogram",
        "PADDING cells sent on idle connections (proposal 251), by the time since the connection's last cell.",
    );
    let mut cum = 0;
    for (i, c) in p.gaps.iter().enumerate() {
        cum += c;
        let le = crate::worker_report::PADDING_GAP_BOUNDS_MS
            .get(i)
            .map_or("+Inf".to_string(), |b| format!("{}", *b as f64 / 1000.0));
        let _ = writeln!(o, "{name}_bucket{{le=\"{le}\"}} {cum}");
    }
    let _ = writeln!(o, "{name}_sum {}", p.gap_ms_sum as f64 / 1000.0);
    let _ = writeln!(o, "{name}_count {}", p.sent);
    let name = "weft_connection_padding_negotiate_total";
    family(
        o,
        name,
        "counter",
        "PADDING_NEGOTIATE cells received, by what they asked (ignored: old link, malformed, unknown version).",
    );
    for (what, v) in ["start", "stop", "ignored"].iter().zip(p.negotiate) {
        let _ = writeln!(o, "{name}{{command=\"{what}\"}} {v}");
    }
    render_circuit_padding(o, &p);
}

/// Circuit padding machines (proposal 254), every worker's together.
fn render_circuit_padding(o: &mut String, p: &crate::worker_report::PaddingCounters) {
    let name = "weft_circuit_padding_machines_total";
    family(
        o,
        name,
        "counter",
        "Circuit padding machines a client started on a circuit through this relay, by machine.",
    );
    for (m, v) in weft_proto::circpad::RELAY_MACHINES
        .iter()
        .zip(p.circ_started)
    {
        let _ = writeln!(o, "{name}{{machine=\"{}\"}} {v}", m.name);
    }
    let name = "weft_circuit_padding_negotiate_total";
    family(
        o,
        name,
        "counter",
        "PADDING_NEGOTIATE relay cells received, by outcome.",
    );
    let outcomes = [
        "started",
        "stopped",
        "stop_ignored",
        "unknown_machine",
        "machine_busy",
        "malformed",
    ];
    for (what, v) in outcomes.iter().zip(p.circ_negotiate) {
        let _ = writeln!(o, "{name}{{outcome=\"{what}\"}} {v}");
    }
    let name = "weft_circuit_padding_negotiated_sent_total";
    family(o, name, "counter", "PADDING_NEGOTIATED relay cells sent.");
    let _ = writeln!(o, "{name} {}", p.circ_negotiated_sent);
    let name = "weft_circuit_padding_cells_sent_total";
    family(
        o,
        name,
        "counter",
        "RELAY_DROP padding cells sent toward clients by circuit padding machines.",
    );
    let _ = writeln!(o, "{name} {}", p.circ_drops_sent);
}

/// END reasons by number, as C Tor names them in its logs
/// (`stream_end_reason_to_string`), lower-cased.
pub(super) const END_REASON_NAMES: [&str; 16] = [
    "",
    "misc",
    "resolvefailed",
    "connectrefused",
    "exitpolicy",
    "destroy",
    "done",
    "timeout",
    "noroute",
    "hibernating",
    "internal",
    "resourcelimit",
    "connreset",
    "torprotocol",
    "notdirectory",
    "",
];

/// weft's onion-service gauge (C Tor's action counters are in
/// [`super::tor_metrics`]).
fn render_onion(o: &mut String, n: &OnionSnapshot) {
    family(
        o,
        "weft_onion_circuits",
        "gauge",
        "Circuits at this relay in an onion-service role now.",
    );
    let _ = writeln!(
        o,
        "weft_onion_circuits{{role=\"intro_point\"}} {}",
        n.intro_circuits
    );
    let _ = writeln!(
        o,
        "weft_onion_circuits{{role=\"rend_waiting\"}} {}",
        n.rend_waiting
    );
}

/// weft's resource-limit families (C Tor's OOM, onionskin and DoS
/// counters are in [`super::tor_metrics`]).
fn render_limits(o: &mut String, l: &LimitsSnapshot) {
    let c = &l.counters;
    let gauges: [(&str, &str, u64); 4] = [
        (
            "weft_relay_queued_bytes",
            "Bytes held in cell queues (all workers).",
            c.queued_bytes,
        ),
        (
            "weft_relay_max_mem_in_queues_bytes",
            "MaxMemInQueues in force.",
            l.max_mem,
        ),
        (
            "weft_relay_connections_counted",
            "Connections counted against ConnLimit and the file-descriptor limit.",
            l.open_conns,
        ),
        (
            "weft_relay_connections_max",
            "Most connections allowed (file descriptors minus a reserve).",
            l.max_conns,
        ),
    ];
    for (name, help, v) in gauges {
        family(o, name, "gauge", help);
        let _ = writeln!(o, "{name} {v}");
    }
    family(
        o,
        "weft_relay_load_oom_circuits_total",
        "counter",
        "Circuits closed by the out-of-memory handler.",
    );
    let _ = writeln!(o, "weft_relay_load_oom_circuits_total {}", c.oom_circuits);
    family(
        o,
        "weft_relay_load_oom_rounds_total",
        "counter",
        "Times the out-of-memory handler ran and closed circuits.",
    );
    let _ = writeln!(o, "weft_relay_load_oom_rounds_total {}", l.oom_rounds);
}

impl super::Controller {
    /// What the MetricsPort shows, from the controller's state.
    pub(super) fn metrics_snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            workers: self.worker_totals.clone(),
            main_cpu_s: crate::worker::thread_cpu_ns() as f64 / 1e9,
            connections: self.conns.len(),
            observed_bandwidth: self.bw.observed(),
            extends: (self.extends_same_worker, self.extends_cross_worker),
            onion: {
                let mut counters = crate::messages::OnionCounters::default();
                for w in &self.worker_totals {
                    counters.add(&w.report.onion);
                }
                let (intro_circuits, rend_waiting) = self.onion.sizes();
                OnionSnapshot {
                    counters,
                    intro_circuits,
                    rend_waiting,
                    unknown_service: self.onion.unknown_service,
                    unknown_cookie: self.onion.unknown_cookie,
                }
            },
            exit: {
                let mut e = crate::messages::ExitCounters::default();
                for w in &self.worker_totals {
                    e.add(&w.report.exit);
                }
                e
            },
            limits: {
                let mut counters = crate::messages::LimitReport::default();
                for w in &self.worker_totals {
                    counters.add(&w.report.limits);
                }
                counters.queued_bytes = self.limits.queued_total();
                LimitsSnapshot {
                    counters,
                    dos: self.limits.clients.stats,
                    max_mem: self.limits.max_mem,
                    open_conns: self.limits.open_conns,
                    max_conns: self.limits.max_conns,
                    oom_rounds: self.limits.oom_rounds,
                }
            },
            uptime_s: self.started.elapsed().as_secs(),
            dir_diffs: Default::default(),
            hs_dir: self.hs_dir.metrics(),
        }
    }
}
