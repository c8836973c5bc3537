//! What a worker reports to the controller once a second
//! ([`WorkerReport`]): its counters as deltas since the last report, its
//! gauges as they are now, grouped by room (onion-service roles, exit
//! streams and DNS, the directory cache, conflux, congestion control,
//! resource limits, and the counters only C Tor's MetricsPort families
//! use). Plain `Copy` data, so a report is sent by value and allocates
//! nothing.

use crate::histogram::DelayHistogram;

/// A worker's onion-service counters (cumulative in the core, deltas in a
/// report).
#[derive(Debug, Default, Clone, Copy)]
pub struct OnionCounters {
    /// Circuits that became introduction points.
    pub intro_established: u64,
    /// INTRODUCE2 cells sent to services.
    pub introduce2_sent: u64,
    /// INTRODUCE1 answered with a failure (unknown service, rate limit).
    pub introduce_nacked: u64,
    /// Of those, refused by the service circuit's rate limit.
    pub introduce_limited: u64,
    /// Rendezvous cookies registered (RENDEZVOUS_ESTABLISHED sent).
    pub rend_established: u64,
    /// Rendezvous joined (RENDEZVOUS2 sent).
    pub rend_joined: u64,
    /// ESTABLISH_RENDEZVOUS with a cookie already registered (circuit
    /// closed).
    pub rend_duplicate_cookie: u64,
    /// Relay cells received on rendezvous-point circuits (C's
    /// `rep_hist_seen_new_rp_cell`, for `hidserv-rend-v3-relayed-cells`).
    pub rend_cells: u64,
}

impl OnionCounters {
    /// `self - earlier`.
    pub fn since(&self, e: &OnionCounters) -> OnionCounters {
        OnionCounters {
            intro_established: self.intro_established - e.intro_established,
            introduce2_sent: self.introduce2_sent - e.introduce2_sent,
            introduce_nacked: self.introduce_nacked - e.introduce_nacked,
            introduce_limited: self.introduce_limited - e.introduce_limited,
            rend_established: self.rend_established - e.rend_established,
            rend_joined: self.rend_joined - e.rend_joined,
            rend_duplicate_cookie: self.rend_duplicate_cookie - e.rend_duplicate_cookie,
            rend_cells: self.rend_cells - e.rend_cells,
        }
    }

    /// Add `o`.
    pub fn add(&mut self, o: &OnionCounters) {
        self.intro_established += o.intro_established;
        self.introduce2_sent += o.introduce2_sent;
        self.introduce_nacked += o.introduce_nacked;
        self.introduce_limited += o.introduce_limited;
        self.rend_established += o.rend_established;
        self.rend_joined += o.rend_joined;
        self.rend_duplicate_cookie += o.rend_duplicate_cookie;
        self.rend_cells += o.rend_cells;
    }
}

/// A worker's exit-stream counters (cumulative in the core, deltas in a
/// report), after C Tor's `tor_relay_streams_total` and
/// `tor_relay_exit_dns_*` metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct ExitCounters {
    /// BEGINs admitted (counted after the policy check, as C Tor does).
    pub begin: u64,
    /// RESOLVEs received.
    pub resolve: u64,
    /// Lookups asked of the resolver.
    pub dns_queries: u64,
    /// Of those, answered from the resolver's cache.
    pub dns_cache_hits: u64,
    /// Lookup answers: an address found.
    pub dns_success: u64,
    /// Lookup answers: the name does not exist (or has no address).
    pub dns_notexist: u64,
    /// Lookup answers: any other failure (time-out, server failure).
    pub dns_failed: u64,
    /// ENDs we sent, by END reason (index = reason, 0..16).
    pub end_reasons: [u64; 16],
    /// Bytes read from destinations (toward clients).
    pub bytes_from_dest: u64,
    /// Bytes written to destinations.
    pub bytes_to_dest: u64,
    /// Streams open now (a gauge: the latest report's).
    pub open: u64,
    /// BEGINs and RESOLVEs over the stream-creation limit
    /// (`DoSStreamCreation*`).
    pub dos_rejected: u64,
    /// Congestion control and XON/XOFF.
    pub cc: CcCounters,
    /// Conflux sets.
    pub cfx: ConfluxCounters,
    /// Directory requests (BEGIN_DIR).
    pub dir: DirCounters,
}

/// The directory cache's streams and answers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DirCounters {
    /// BEGIN_DIR streams opened.
    pub streams: u64,
    /// Requests answered 200, by `weft_dir::cache::serve::Resource`
    /// (`RESOURCES` order).
    pub served: [u64; 6],
    /// Requests answered otherwise (404, 304, 400…), same order.
    pub refused: [u64; 6],
    /// Request heads over the size limit (stream closed).
    pub too_large: u64,
    /// Response bytes (head and body) packaged into DATA cells.
    pub bytes: u64,
    /// Request bytes received (the DATA of BEGIN_DIR streams).
    pub request_bytes: u64,
    /// Consensus diffs answered, by flavour (ns, microdesc).
    pub consensus_diffs: [u64; 2],
    /// Onion-service descriptor fetches: found, not found, refused over a
    /// one-hop circuit.
    pub hs_fetches: [u64; 3],
    /// Descriptor uploads refused by the worker: over a one-hop circuit,
    /// announced over the size limit, not a v3 `/publish` URL.
    pub hs_posts_refused: [u64; 3],
}

impl DirCounters {
    fn zip(&self, o: &DirCounters, f: impl Fn(u64, u64) -> u64) -> DirCounters {
        let mut served = [0; 6];
        let mut refused = [0; 6];
        for i in 0..6 {
            served[i] = f(self.served[i], o.served[i]);
            refused[i] = f(self.refused[i], o.refused[i]);
        }
        DirCounters {
            streams: f(self.streams, o.streams),
            served,
            refused,
            too_large: f(self.too_large, o.too_large),
            bytes: f(self.bytes, o.bytes),
            request_bytes: f(self.request_bytes, o.request_bytes),
            consensus_diffs: [
                f(self.consensus_diffs[0], o.consensus_diffs[0]),
                f(self.consensus_diffs[1], o.consensus_diffs[1]),
            ],
            hs_fetches: std::array::from_fn(|i| f(self.hs_fetches[i], o.hs_fetches[i])),
            hs_posts_refused: std::array::from_fn(|i| {
                f(self.hs_posts_refused[i], o.hs_posts_refused[i])
            }),
        }
    }
}

/// Upper bounds of the out-of-order depth histogram's buckets (cells in
/// a set's queue when a message joins it); the last bucket is open.
pub const OOO_DEPTH_BOUNDS: [u64; 8] = [1, 4, 16, 64, 256, 1024, 4096, u64::MAX];

/// Conflux at the exit (after C Tor's `tor_relay_conflux_*` counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConfluxCounters {
    /// Sets made (first LINK of a nonce).
    pub sets_created: u64,
    /// Legs linked (LINKED sent).
    pub legs_linked: u64,
    /// Of those, legs on another worker than their set's home.
    pub legs_remote: u64,
    /// LINKs refused (set full, not an exit circuit, bad cell).
    pub links_refused: u64,
    /// Sets closed, by cause: every leg gone.
    pub sets_closed_legs: u64,
    /// Sets closed for a protocol violation (replay, absurd SWITCH).
    pub sets_closed_protocol: u64,
    /// Sets closed because their out-of-order queue hit its cap.
    pub sets_closed_ooo: u64,
    /// SWITCH cells sent.
    pub switches_sent: u64,
    /// SWITCH cells received.
    pub switches_received: u64,
    /// Messages that waited in an out-of-order queue.
    pub reordered: u64,
    /// Out-of-order depth (cells) when a message joined a queue, in the
    /// buckets of [`OOO_DEPTH_BOUNDS`].
    pub ooo_depth: [u64; 8],
    /// Sets alive now (a gauge).
    pub sets_open: u64,
    /// Legs alive now in those sets (a gauge).
    pub legs_open: u64,
}

impl ConfluxCounters {
    fn zip(&self, o: &ConfluxCounters, f: impl Fn(u64, u64) -> u64) -> ConfluxCounters {
        let mut ooo_depth = [0; 8];
        for (i, d) in ooo_depth.iter_mut().enumerate() {
            *d = f(self.ooo_depth[i], o.ooo_depth[i]);
        }
        ConfluxCounters {
            sets_created: f(self.sets_created, o.sets_created),
            legs_linked: f(self.legs_linked, o.legs_linked),
            legs_remote: f(self.legs_remote, o.legs_remote),
            links_refused: f(self.links_refused, o.links_refused),
            sets_closed_legs: f(self.sets_closed_legs, o.sets_closed_legs),
            sets_closed_protocol: f(self.sets_closed_protocol, o.sets_closed_protocol),
            sets_closed_ooo: f(self.sets_closed_ooo, o.sets_closed_ooo),
            switches_sent: f(self.switches_sent, o.switches_sent),
            switches_received: f(self.switches_received, o.switches_received),
            reordered: f(self.reordered, o.reordered),
            ooo_depth,
            sets_open: self.sets_open,
            legs_open: self.legs_open,
        }
    }
}

/// Congestion-control events at the exit (C Tor's
/// `tor_relay_congestion_control_total` rows).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CcCounters {
    /// Circuits whose client negotiated congestion control.
    pub circs_created: u64,
    /// Circuits that left slow start.
    pub exited_slow_start: u64,
    /// Sum of their congestion windows (cells) when they left it.
    pub ss_exit_cwnd_sum: u64,
    /// Minimum-RTT resets (cwnd stuck at its minimum).
    pub rtt_reset: u64,
    /// SENDMEs whose RTT could not be measured (clock stall or jump).
    pub clock_stalls: u64,
    /// XOFF / XON we sent, and received.
    pub xoff_sent: u64,
    /// See `xoff_sent`.
    pub xon_sent: u64,
    /// See `xoff_sent`.
    pub xoff_received: u64,
    /// See `xoff_sent`.
    pub xon_received: u64,
}

impl CcCounters {
    fn zip(&self, o: &CcCounters, f: impl Fn(u64, u64) -> u64) -> CcCounters {
        CcCounters {
            circs_created: f(self.circs_created, o.circs_created),
            exited_slow_start: f(self.exited_slow_start, o.exited_slow_start),
            ss_exit_cwnd_sum: f(self.ss_exit_cwnd_sum, o.ss_exit_cwnd_sum),
            rtt_reset: f(self.rtt_reset, o.rtt_reset),
            clock_stalls: f(self.clock_stalls, o.clock_stalls),
            xoff_sent: f(self.xoff_sent, o.xoff_sent),
            xon_sent: f(self.xon_sent, o.xon_sent),
            xoff_received: f(self.xoff_received, o.xoff_received),
            xon_received: f(self.xon_received, o.xon_received),
        }
    }
}

impl ExitCounters {
    /// `self - earlier` (the gauge is kept).
    pub fn since(&self, e: &ExitCounters) -> ExitCounters {
        let mut end_reasons = [0; 16];
        for (i, r) in end_reasons.iter_mut().enumerate() {
            *r = self.end_reasons[i] - e.end_reasons[i];
        }
        ExitCounters {
            begin: self.begin - e.begin,
            resolve: self.resolve - e.resolve,
            dns_queries: self.dns_queries - e.dns_queries,
            dns_cache_hits: self.dns_cache_hits - e.dns_cache_hits,
            dns_success: self.dns_success - e.dns_success,
            dns_notexist: self.dns_notexist - e.dns_notexist,
            dns_failed: self.dns_failed - e.dns_failed,
            end_reasons,
            bytes_from_dest: self.bytes_from_dest - e.bytes_from_dest,
            bytes_to_dest: self.bytes_to_dest - e.bytes_to_dest,
            open: self.open,
            dos_rejected: self.dos_rejected - e.dos_rejected,
            cc: self.cc.zip(&e.cc, |a, b| a - b),
            cfx: self.cfx.zip(&e.cfx, |a, b| a - b),
            dir: self.dir.zip(&e.dir, |a, b| a - b),
        }
    }

    /// Add `o` (gauges summed too: one worker's `o` at a time).
    pub fn add(&mut self, o: &ExitCounters) {
        self.begin += o.begin;
        self.resolve += o.resolve;
        self.dns_queries += o.dns_queries;
        self.dns_cache_hits += o.dns_cache_hits;
        self.dns_success += o.dns_success;
        self.dns_notexist += o.dns_notexist;
        self.dns_failed += o.dns_failed;
        for (r, x) in self.end_reasons.iter_mut().zip(o.end_reasons) {
            *r += x;
        }
        self.bytes_from_dest += o.bytes_from_dest;
        self.bytes_to_dest += o.bytes_to_dest;
        self.open += o.open;
        self.dos_rejected += o.dos_rejected;
        self.cc = self.cc.zip(&o.cc, |a, b| a + b);
        let (sets, legs) = (
            self.cfx.sets_open + o.cfx.sets_open,
            self.cfx.legs_open + o.cfx.legs_open,
        );
        self.cfx = self.cfx.zip(&o.cfx, |a, b| a + b);
        self.dir = self.dir.zip(&o.dir, |a, b| a + b);
        (self.cfx.sets_open, self.cfx.legs_open) = (sets, legs);
    }
}

/// Per-worker counters reported to the controller every second.
#[derive(Debug, Default, Clone, Copy)]
pub struct WorkerReport {
    /// Heap allocations on the worker thread (when the binary counts them).
    pub allocations: u64,
    /// Node-based delay of the cells written (read → hand-over to TLS).
    pub delay: DelayHistogram,
    /// Of that, time spent in the circuit queue of the writing worker.
    pub queue_wait: DelayHistogram,
    /// Kernel send-queue sizes seen by the scheduler (bytes).
    pub outq: DelayHistogram,
    /// Bytes read from sockets (TLS plaintext).
    pub read_bytes: u64,
    /// Bytes written to sockets (TLS plaintext).
    pub written_bytes: u64,
    /// Bytes read over IPv6: relay connections (as `read_bytes`) and exit
    /// streams.
    pub read_v6_bytes: u64,
    /// Bytes written over IPv6, as `read_v6_bytes`.
    pub written_v6_bytes: u64,
    /// Relay cells forwarded between halves.
    pub cells_relayed: u64,
    /// Of those, handed to a half on another worker.
    pub cells_cross_worker: u64,
    /// Open connections.
    pub connections: u64,
    /// Circuit halves.
    pub circuits: u64,
    /// Circuits created (CREATE2 answered).
    pub circuits_created: u64,
    /// Of those, hops running CGO (relay cell format V1).
    pub cgo_circuits_created: u64,
    /// Cells waiting in circuit queues.
    pub queued_cells: u64,
    /// Cells in the pool (queued or free).
    pub pool_slots: u64,
    /// Wake-ups sent to other workers.
    pub wakeups_sent: u64,
    /// Event-loop rounds.
    pub rounds: u64,
    /// Time spent doing work (not blocked in poll), ns.
    pub busy_ns: u64,
    /// Connections moved away from this worker.
    pub migrations: u64,
    /// The busiest connections of the last second: (id, bytes read +
    /// written), busiest first; id 0 = none.
    pub top_conns: [(u64, u64); 4],
    /// Introduction and rendezvous points.
    pub onion: OnionCounters,
    /// Exit streams.
    pub exit: ExitCounters,
    /// Resource limits: OOM, DoS, the handshake queue.
    pub limits: LimitReport,
    /// What C Tor's MetricsPort families count that the fields above do
    /// not.
    pub relay: RelayCounters,
}

/// A worker's counters behind C Tor's `tor_relay_*` families that weft's
/// own fields do not carry (deltas in a report, except the gauges).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RelayCounters {
    /// Circuits ending here now (gauge; `tor_relay_circuits_total`).
    pub circuits_open: u64,
    /// DESTROY cells received (`tor_relay_destroy_cell_total`).
    pub destroy_cells: u64,
    /// Relay DROP cells received at their hop (`tor_relay_drop_cell_total`).
    pub drop_cells: u64,
    /// Circuits closed for a protocol violation
    /// (`tor_relay_circ_proto_violation_total`).
    pub protocol_closes: u64,
    /// Exit connections opened, by family (IPv4, IPv6).
    pub exit_conns_created: [u64; 2],
    /// Exit connections open now, by family (gauge).
    pub exit_conns_open: [u64; 2],
    /// Connects refused for want of a local port (EADDRNOTAVAIL).
    pub tcp_exhaustion: u64,
    /// Times the read / write token bucket ran empty.
    pub rate_limit_reached: [u64; 2],
    /// Connection padding (proposal 251).
    pub padding: PaddingCounters,
}

/// Upper bounds (ms) of the gap histogram of [`PaddingCounters`]: the
/// time from a connection's last cell to the PADDING cell sent on it (C's
/// range is 1.5 to 9.5 s); the last bucket is everything above.
pub const PADDING_GAP_BOUNDS_MS: [u64; 11] = [
    1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9500, 10_500,
];

/// Connection padding counters (deltas in a report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PaddingCounters {
    /// PADDING cells sent on idle connections.
    pub sent: u64,
    /// Those cells by gap after the connection's last cell: bucket `i`
    /// counts gaps up to [`PADDING_GAP_BOUNDS_MS`]`[i]` (and above the
    /// bound before it); the last, the rest.
    pub gaps: [u64; 12],
    /// The sum of those gaps, ms.
    pub gap_ms_sum: u64,
    /// PADDING_NEGOTIATE cells received: START, STOP, ignored (old link,
    /// malformed, unknown version).
    pub negotiate: [u64; 3],
    /// Circuit padding machines started, by machine (C's relay machine
    /// numbers: 0 `relay_ip_circ`, 1 `relay_rp_circ`).
    pub circ_started: [u64; 2],
    /// PADDING_NEGOTIATE cells by outcome: started, stopped, STOP
    /// ignored (old or unknown machine), unknown machine refused, START
    /// while a machine runs, malformed.
    pub circ_negotiate: [u64; 6],
    /// PADDING_NEGOTIATED cells sent.
    pub circ_negotiated_sent: u64,
    /// RELAY_DROP padding cells sent by circuit padding machines.
    pub circ_drops_sent: u64,
    /// For `padding-counts` ([`crate::stats::padding`]), each by whether
    /// padding is on for the connection (`[off, on]`): fixed-size cells
    /// read,
    pub cells_read: [u64; 2],
    /// cells written (fixed-size and, at the handshake, variable-length),
    pub cells_written: [u64; 2],
    /// PADDING cells read,
    pub pad_read: [u64; 2],
    /// PADDING cells written (connection padding and keepalives).
    pub pad_written: [u64; 2],
    /// Connection padding times scheduled now (gauge; C's padding timers
    /// pending).
    pub timers_pending: u64,
}

impl PaddingCounters {
    /// Count one PADDING cell sent `gap_ms` after the connection's last
    /// cell.
    pub fn record_gap(&mut self, gap_ms: u64) {
        self.sent += 1;
        self.gap_ms_sum += gap_ms;
        let i = PADDING_GAP_BOUNDS_MS
            .iter()
            .position(|&b| gap_ms <= b)
            .unwrap_or(PADDING_GAP_BOUNDS_MS.len());
        self.gaps[i] += 1;
    }

    fn since(&self, e: &PaddingCounters) -> PaddingCounters {
        let mut d = *self;
        d.sent -= e.sent;
        d.gap_ms_sum -= e.gap_ms_sum;
        for (a, b) in d.gaps.iter_mut().zip(e.gaps) {
            *a -= b;
        }
        for (a, b) in d.negotiate.iter_mut().zip(e.negotiate) {
            *a -= b;
        }
        for (a, b) in d.circ_started.iter_mut().zip(e.circ_started) {
            *a -= b;
        }
        for (a, b) in d.circ_negotiate.iter_mut().zip(e.circ_negotiate) {
            *a -= b;
        }
        d.circ_negotiated_sent -= e.circ_negotiated_sent;
        d.circ_drops_sent -= e.circ_drops_sent;
        for (a, b) in [
            (&mut d.cells_read, e.cells_read),
            (&mut d.cells_written, e.cells_written),
            (&mut d.pad_read, e.pad_read),
            (&mut d.pad_written, e.pad_written),
        ] {
            a[0] -= b[0];
            a[1] -= b[1];
        }
        d
    }

    /// Add `o`'s counts.
    pub fn sum(&mut self, o: &PaddingCounters) {
        self.sent += o.sent;
        self.gap_ms_sum += o.gap_ms_sum;
        for (a, b) in self.gaps.iter_mut().zip(o.gaps) {
            *a += b;
        }
        for (a, b) in self.negotiate.iter_mut().zip(o.negotiate) {
            *a += b;
        }
        for (a, b) in self.circ_started.iter_mut().zip(o.circ_started) {
            *a += b;
        }
        for (a, b) in self.circ_negotiate.iter_mut().zip(o.circ_negotiate) {
            *a += b;
        }
        self.circ_negotiated_sent += o.circ_negotiated_sent;
        self.circ_drops_sent += o.circ_drops_sent;
        for (a, b) in [
            (&mut self.cells_read, o.cells_read),
            (&mut self.cells_written, o.cells_written),
            (&mut self.pad_read, o.pad_read),
            (&mut self.pad_written, o.pad_written),
        ] {
            a[0] += b[0];
            a[1] += b[1];
        }
        self.timers_pending += o.timers_pending;
    }

    /// The cell counts of `padding-counts` in these counters, with `drops_read`
    /// circuit-padding DROP cells received.
    pub fn cell_counts(&self, drops_read: u64) -> crate::stats::padding::PaddingCellCounts {
        crate::stats::padding::PaddingCellCounts {
            read: self.cells_read[0] + self.cells_read[1],
            written: self.cells_written[0] + self.cells_written[1],
            read_pad: self.pad_read[0] + self.pad_read[1],
            written_pad: self.pad_written[0] + self.pad_written[1],
            enabled_read: self.cells_read[1],
            enabled_written: self.cells_written[1],
            enabled_read_pad: self.pad_read[1],
            enabled_written_pad: self.pad_written[1],
            read_drop: drops_read,
            written_drop: self.circ_drops_sent,
        }
    }
}

impl RelayCounters {
    /// `self - earlier` (the gauges are kept).
    pub fn since(&self, e: &RelayCounters) -> RelayCounters {
        let sub2 = |a: [u64; 2], b: [u64; 2]| [a[0] - b[0], a[1] - b[1]];
        RelayCounters {
            circuits_open: self.circuits_open,
            destroy_cells: self.destroy_cells - e.destroy_cells,
            drop_cells: self.drop_cells - e.drop_cells,
            protocol_closes: self.protocol_closes - e.protocol_closes,
            exit_conns_created: sub2(self.exit_conns_created, e.exit_conns_created),
            exit_conns_open: self.exit_conns_open,
            tcp_exhaustion: self.tcp_exhaustion - e.tcp_exhaustion,
            rate_limit_reached: sub2(self.rate_limit_reached, e.rate_limit_reached),
            padding: self.padding.since(&e.padding),
        }
    }

    /// Add the deltas of `o`; take its gauges (one worker's totals).
    pub fn add(&mut self, o: &RelayCounters) {
        self.sum(o);
        self.circuits_open = o.circuits_open;
        self.exit_conns_open = o.exit_conns_open;
        self.padding.timers_pending = o.padding.timers_pending;
    }

    /// Add everything of `o`, gauges too (workers' totals into the
    /// relay's).
    pub fn sum(&mut self, o: &RelayCounters) {
        self.circuits_open += o.circuits_open;
        self.destroy_cells += o.destroy_cells;
        self.drop_cells += o.drop_cells;
        self.protocol_closes += o.protocol_closes;
        self.tcp_exhaustion += o.tcp_exhaustion;
        self.padding.sum(&o.padding);
        for i in 0..2 {
            self.exit_conns_created[i] += o.exit_conns_created[i];
            self.exit_conns_open[i] += o.exit_conns_open[i];
            self.rate_limit_reached[i] += o.rate_limit_reached[i];
        }
    }
}

/// A worker's resource-limit counters (deltas in a report) and its queued
/// bytes (gauge).
#[derive(Debug, Default, Clone, Copy)]
pub struct LimitReport {
    /// Bytes its queues hold now.
    pub queued_bytes: u64,
    /// Circuits it closed for the memory limit.
    pub oom_circuits: u64,
    /// Bytes those circuits held.
    pub oom_bytes: u64,
    /// CREATE cells refused by the DoS mitigation.
    pub dos_cc_rejected: u64,
    /// ESTABLISH_RENDEZVOUS from one-hop clients dropped.
    pub single_hop_refused: u64,
    /// CREATE2 cells refused by the handshake queue (full or too slow),
    /// by handshake type as C Tor numbers them (0 TAP, 1 fast, 2 ntor,
    /// 3 ntor v3).
    pub onionskins_dropped: [u64; 4],
    /// CREATE2 handshakes answered, by handshake type.
    pub onionskins_processed: [u64; 4],
}

impl LimitReport {
    /// Add the counters of `o` (the gauge is taken from `o`).
    pub fn add(&mut self, o: &LimitReport) {
        self.queued_bytes = o.queued_bytes;
        self.oom_circuits += o.oom_circuits;
        self.oom_bytes += o.oom_bytes;
        self.dos_cc_rejected += o.dos_cc_rejected;
        self.single_hop_refused += o.single_hop_refused;
        for i in 0..4 {
            self.onionskins_dropped[i] += o.onionskins_dropped[i];
            self.onionskins_processed[i] += o.onionskins_processed[i];
        }
    }
}
