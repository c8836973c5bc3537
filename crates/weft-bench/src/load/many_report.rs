//! What a scale load thread ([`super::many`]) publishes while it runs
//! (live counters) and reports when it stops (node delay per direction,
//! the cells each bulk circuit delivered).

use std::sync::atomic::AtomicU64;

use hdrhistogram::Histogram;

/// Live counters a scale load thread publishes.
#[derive(Debug, Default)]
pub struct ManyCounters {
    /// Generator connections whose link handshake completed.
    pub gens_open: AtomicU64,
    /// Generator connections that failed or were closed.
    pub gens_dead: AtomicU64,
    /// Circuits built (EXTENDED2 received).
    pub built: AtomicU64,
    /// Circuits that failed (while building or later).
    pub failed: AtomicU64,
    /// Idle cells sent by generators.
    pub pings_sent: AtomicU64,
    /// Idle cells that reached a sink.
    pub pings_received: AtomicU64,
    /// Bulk cells received by sinks.
    pub up_cells: AtomicU64,
    /// Bulk cells received by generators.
    pub down_cells: AtomicU64,
    /// Marked bulk cells that arrived damaged or out of order.
    pub corrupt: AtomicU64,
    /// The thread's CPU time, ns.
    pub cpu_ns: AtomicU64,
    /// 1 while the thread has circuits to build within the build share
    /// ([`super::many::ManyRun::set_build_share`]) or builds in flight, else 0.
    pub building: AtomicU64,
}

/// Cells one bulk circuit delivered in the measured phase.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct BulkShare {
    /// Its generator connection (the thread's index).
    pub gen: u32,
    /// Its sink (the thread's index).
    pub sink: u16,
    /// The generator connection's source address and the sink's port
    /// (to find them in the target's log).
    pub gen_source: std::net::Ipv4Addr,
    /// The sink's port.
    pub sink_port: u16,
    /// Cells that reached the sink.
    pub up: u64,
    /// Cells that reached the generator.
    pub down: u64,
}

/// What a scale load thread reports when it stops.
#[derive(Debug)]
pub struct ManyReport {
    /// Node delay of marked bulk cells in the measured phase, upstream
    /// (generator → sink), ns.
    pub delay_up: Histogram<u64>,
    /// The same downstream (sink → generator).
    pub delay_down: Histogram<u64>,
    /// What each bulk circuit delivered in the measured phase, for the
    /// fairness figures.
    pub per_circuit: Vec<BulkShare>,
    /// First errors.
    pub errors: Vec<String>,
}
