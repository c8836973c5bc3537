//! C Tor's MetricsPort families (`tor_relay_*`, `tor_bug_reached_count`)
//! under tor 0.4.9's names, types and label names, fed by weft's own
//! counters, so that an operator's queries, dashboards and alerts written
//! for tor keep working. [C feature/relay/relay_metrics.c]
//!
//! A row (a label combination) is written only where weft counts that
//! thing; rows C writes that weft does not count are listed, with the
//! reason, in docs/metrics.md. Every family C Tor exposes for a relay is
//! present, with at least one row, so that the label names match.

use std::fmt::Write as _;
use std::net::SocketAddr;

use super::metrics::{family, MetricsSnapshot};

/// The flags C Tor reports from the consensus, in its order.
const FLAGS: [&str; 9] = [
    "Fast",
    "Exit",
    "Authority",
    "Stable",
    "HSDir",
    "Running",
    "V2Dir",
    "Sybil",
    "Guard",
];

/// Onion handshake types by C Tor's number (`handshake_type_to_str`).
const HANDSHAKES: [&str; 4] = ["tap", "fast", "ntor", "ntor_v3"];

/// Address families by index, as C Tor labels them.
const FAMILIES: [&str; 2] = ["ipv4", "ipv6"];

/// Index of an address's family.
pub(super) fn family_of(a: &SocketAddr) -> usize {
    usize::from(a.is_ipv6())
}

/// Connection counts only the controller sees (C's `rep_hist_note_conn_*`).
#[derive(Debug, Default, Clone)]
pub struct ConnStats {
    /// OR connections made, [received, initiated][family].
    pub or_created: [[u64; 2]; 2],
    /// OR connections refused at accept (DoS, ConnLimit), by family.
    pub or_rejected: [u64; 2],
    /// OR listeners opened since start (a reopening after hibernation
    /// counts again), by family.
    pub or_listeners_opened: [u64; 2],
    /// MetricsPort listeners open, by family.
    pub metrics_listeners: [u64; 2],
    /// MetricsPort connections accepted, by family.
    pub metrics_created: [u64; 2],
    /// MetricsPort connections being served now.
    pub metrics_open: u64,
}

/// What the controller adds to the workers' counters for these families.
#[derive(Debug, Default, Clone)]
pub struct TorSnapshot {
    /// Connection counts.
    pub conns: ConnStats,
    /// OR listeners open now, by family.
    pub or_listeners_open: [u64; 2],
    /// OR connections open now, [received, initiated][family].
    pub or_open: [[u64; 2]; 2],
    /// Our flags in the latest consensus (empty: not listed).
    pub flags: Vec<String>,
    /// Every ORPort found reachable (or assumed so): a descriptor can go
    /// out (`directory/self_tests.rs`).
    pub orports_reachable: bool,
}

/// One row: `name{labels} value`.
fn row(o: &mut String, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
    let _ = write!(o, "{name}");
    if !labels.is_empty() {
        let _ = write!(o, "{{");
        for (i, (k, val)) in labels.iter().enumerate() {
            let _ = write!(o, "{}{k}=\"{val}\"", if i > 0 { "," } else { "" });
        }
        let _ = write!(o, "}}");
    }
    let _ = writeln!(o, " {v}");
}

/// Render C Tor's families.
pub(super) fn render(o: &mut String, m: &MetricsSnapshot, t: &TorSnapshot) {
    // Every worker's totals: counters and gauges alike are summed.
    let mut relay = crate::messages::RelayCounters::default();
    let (mut read, mut written) = (0, 0);
    for w in &m.workers {
        relay.sum(&w.report.relay);
        read += w.report.read_bytes;
        written += w.report.written_bytes;
    }
    render_connections(o, t, &relay);
    render_load(o, m, &relay);

    let name = "tor_relay_traffic_bytes";
    family(o, name, "counter", "Traffic related counters");
    let e = &m.exit;
    row(o, name, &[("direction", "read")], read + e.bytes_from_dest);
    row(
        o,
        name,
        &[("direction", "written")],
        written + e.bytes_to_dest,
    );

    let name = "tor_relay_circuits_total";
    family(o, name, "gauge", "Total number of circuits");
    row(o, name, &[("state", "opened")], relay.circuits_open);

    let name = "tor_relay_flag";
    family(o, name, "gauge", "Relay flags from consensus");
    for f in FLAGS {
        row(
            o,
            name,
            &[("type", f)],
            u8::from(t.flags.iter().any(|x| x == f)),
        );
    }

    // Not in C's MetricsPort: its ControlPort's
    // `status/reachability-succeeded/or`.
    let name = "weft_relay_orport_reachable";
    family(
        o,
        name,
        "gauge",
        "Our ORPorts found reachable by self-test (or assumed so)",
    );
    row(o, name, &[], u8::from(t.orports_reachable));

    for (name, help, v) in [
        (
            "tor_relay_destroy_cell_total",
            "Total number of DESTROY cell we received",
            relay.destroy_cells,
        ),
        (
            "tor_relay_drop_cell_total",
            "Total number of DROP cell we received",
            relay.drop_cells,
        ),
        (
            "tor_relay_circ_proto_violation_total",
            "Total number of circuit protocol violation",
            relay.protocol_closes,
        ),
    ] {
        family(o, name, "counter", help);
        row(o, name, &[], v);
    }
    render_dos(o, m);
    render_onion(o, m);
    render_exit(o, m);
    // weft has no non-fatal BUG() checks: an invariant that fails is a
    // panic, which stops the process (docs/metrics.md).
    family(
        o,
        "tor_bug_reached_count",
        "counter",
        "Total number of BUG() and similar assertion reached",
    );
    row(o, "tor_bug_reached_count", &[], 0);
}

/// `tor_relay_connections` and `tor_relay_connections_total`.
fn render_connections(o: &mut String, t: &TorSnapshot, relay: &crate::messages::RelayCounters) {
    let c = &t.conns;
    let [received, initiated] = c.or_created;
    // (type, direction, state, count by family)
    let created: [(&str, &str, &str, [u64; 2]); 7] = [
        ("OR listener", "initiated", "created", c.or_listeners_opened),
        ("OR", "received", "created", received),
        ("OR", "initiated", "created", initiated),
        ("OR", "received", "rejected", c.or_rejected),
        ("Exit", "initiated", "created", relay.exit_conns_created),
        (
            "Metrics listener",
            "initiated",
            "created",
            c.metrics_listeners,
        ),
        ("Metrics", "received", "created", c.metrics_created),
    ];
    let [or_received, or_initiated] = t.or_open;
    let opened: [(&str, &str, &str, [u64; 2]); 6] = [
        ("OR listener", "initiated", "opened", t.or_listeners_open),
        ("OR", "received", "opened", or_received),
        ("OR", "initiated", "opened", or_initiated),
        ("Exit", "initiated", "opened", relay.exit_conns_open),
        (
            "Metrics listener",
            "initiated",
            "opened",
            c.metrics_listeners,
        ),
        // The scrape being answered is one (its family is not kept).
        ("Metrics", "received", "opened", [c.metrics_open, 0]),
    ];
    for (name, kind, help, rows) in [
        (
            "tor_relay_connections_total",
            "counter",
            "Total number of created/rejected connections",
            &created[..],
        ),
        (
            "tor_relay_connections",
            "gauge",
            "Total number of opened connections",
            &opened[..],
        ),
    ] {
        family(o, name, kind, help);
        for (f, fam) in FAMILIES.iter().enumerate() {
            for (ty, dir, state, n) in rows {
                let labels = [
                    ("type", *ty),
                    ("direction", *dir),
                    ("state", *state),
                    ("family", *fam),
                ];
                row(o, name, &labels, n[f]);
            }
        }
    }
}

/// The `tor_relay_load_*` families (what C's overload lines are made of).
fn render_load(o: &mut String, m: &MetricsSnapshot, relay: &crate::messages::RelayCounters) {
    let l = &m.limits;
    let name = "tor_relay_load_onionskins_total";
    family(o, name, "counter", "Total number of onionskins handled");
    for (i, ty) in HANDSHAKES.iter().enumerate() {
        row(
            o,
            name,
            &[("type", ty), ("action", "processed")],
            l.counters.onionskins_processed[i],
        );
        row(
            o,
            name,
            &[("type", ty), ("action", "dropped")],
            l.counters.onionskins_dropped[i],
        );
    }
    let name = "tor_relay_load_oom_bytes_total";
    family(
        o,
        name,
        "counter",
        "Total number of bytes the OOM has freed by subsystem",
    );
    // Only cell queues are in weft's MaxMemInQueues today (no DNS cache
    // cleaning, no geoip, no HSDir cache): those rows are 0 by fact.
    row(o, name, &[("subsys", "cell")], l.counters.oom_bytes);
    for s in ["dns", "geoip", "hsdir"] {
        row(o, name, &[("subsys", s)], 0);
    }
    let name = "tor_relay_load_socket_total";
    family(o, name, "gauge", "Total number of sockets");
    row(o, name, &[("state", "opened")], l.open_conns);
    row(o, name, &[], l.max_conns);
    let name = "tor_relay_load_tcp_exhaustion_total";
    family(
        o,
        name,
        "counter",
        "Total number of times we ran out of TCP ports",
    );
    row(o, name, &[], relay.tcp_exhaustion);
    let name = "tor_relay_load_global_rate_limit_reached_total";
    family(
        o,
        name,
        "counter",
        "Total number of global connection bucket limit reached",
    );
    row(o, name, &[("side", "read")], relay.rate_limit_reached[0]);
    row(o, name, &[("side", "write")], relay.rate_limit_reached[1]);
}

/// `tor_relay_dos_total`.
fn render_dos(o: &mut String, m: &MetricsSnapshot) {
    let (c, d) = (&m.limits.counters, &m.limits.dos);
    let name = "tor_relay_dos_total";
    family(
        o,
        name,
        "counter",
        "Denial of Service defenses related counters",
    );
    for (ty, v) in [
        ("circuit_rejected", c.dos_cc_rejected),
        ("marked_address", d.cc_marked_addrs),
        ("conn_rejected", d.conn_connect_rejected),
        ("concurrent_conn_rejected", d.conn_rejected),
        ("single_hop_refused", c.single_hop_refused),
        ("stream_rejected", m.exit.dos_rejected),
    ] {
        row(o, name, &[("type", ty)], v);
    }
}

/// The onion-service action families.
fn render_onion(o: &mut String, m: &MetricsSnapshot) {
    let n = &m.onion;
    let c = &n.counters;
    let single_hop = m.limits.counters.single_hop_refused;
    type Family<'a> = (&'a str, &'a str, &'a [(&'a str, u64)]);
    let rows: [Family; 4] = [
        (
            "tor_relay_est_intro_total",
            "Total number of EST_INTRO cells we received",
            &[("success", c.intro_established)],
        ),
        (
            "tor_relay_intro1_total",
            "Total number of INTRO1 cells we received",
            &[
                ("success", c.introduce2_sent),
                ("unknown_service", n.unknown_service),
                ("rate_limited", c.introduce_limited),
            ],
        ),
        (
            "tor_relay_est_rend_total",
            "Total number of EST_REND cells we received",
            &[
                ("success", c.rend_established),
                ("single_hop", single_hop),
                ("duplicate_cookie", c.rend_duplicate_cookie),
            ],
        ),
        (
            "tor_relay_rend1_total",
            "Total number of REND1 cells we received",
            &[
                ("success", c.rend_joined),
                ("unknown_cookie", n.unknown_cookie),
            ],
        ),
    ];
    for (name, help, values) in rows {
        family(o, name, "counter", help);
        for (action, v) in values {
            row(o, name, &[("action", action)], v);
        }
    }
}

/// Streams, DNS and congestion control (the exit's families).
fn render_exit(o: &mut String, m: &MetricsSnapshot) {
    let e = &m.exit;
    let name = "tor_relay_streams_total";
    family(o, name, "counter", "Total number of streams");
    row(o, name, &[("type", "BEGIN")], e.begin);
    row(o, name, &[("type", "BEGIN_DIR")], e.dir.streams);
    row(o, name, &[("type", "RESOLVE")], e.resolve);

    let name = "tor_relay_exit_dns_query_total";
    family(
        o,
        name,
        "counter",
        "Total number of DNS queries done by this relay",
    );
    row(o, name, &[], e.dns_queries);
    let name = "tor_relay_exit_dns_error_total";
    family(
        o,
        name,
        "counter",
        "Total number of DNS errors encountered by this relay",
    );
    // weft's resolver tells three outcomes apart; C's evdns codes map onto
    // them as: an address (success), NXDOMAIN or no address (notexist),
    // anything else (serverfailed).
    row(o, name, &[("reason", "success")], e.dns_success);
    row(o, name, &[("reason", "notexist")], e.dns_notexist);
    row(o, name, &[("reason", "serverfailed")], e.dns_failed);

    let c = &e.cc;
    let name = "tor_relay_congestion_control_total";
    family(o, name, "counter", "Congestion control related counters");
    for (state, action, v) in [
        ("starvation", "rtt_reset", c.rtt_reset),
        ("clock_stalls", "rtt_skipped", c.clock_stalls),
        ("flow_control", "xoff_num_sent", c.xoff_sent),
        ("flow_control", "xon_num_sent", c.xon_sent),
        ("cc_circuits", "circs_created", c.circs_created),
        ("cc_circuits", "circs_exited_ss", c.exited_slow_start),
    ] {
        row(o, name, &[("state", state), ("action", action)], v);
    }
    let name = "tor_relay_congestion_control";
    family(o, name, "gauge", "Congestion control related gauges");
    // The mean over every circuit since start (C: a running average).
    let ss_cwnd = c
        .ss_exit_cwnd_sum
        .checked_div(c.exited_slow_start)
        .unwrap_or(0);
    row(
        o,
        name,
        &[("state", "slow_start_exit"), ("action", "cwnd")],
        ss_cwnd,
    );
    // weft's own XON/XOFF receive counts: C has no row for them.
    let name = "weft_flow_control_received_total";
    family(
        o,
        name,
        "counter",
        "XOFF and XON cells received from clients.",
    );
    row(o, name, &[("cell", "xoff")], c.xoff_received);
    row(o, name, &[("cell", "xon")], c.xon_received);
}

impl super::Controller {
    /// Count the ORPort listeners just opened.
    pub(super) fn note_or_listeners(&mut self) {
        for l in &self.or_listeners {
            if let Ok(a) = l.local_addr() {
                self.conn_stats.or_listeners_opened[family_of(&a)] += 1;
            }
        }
    }

    /// The controller's part of C Tor's families.
    pub(super) fn tor_snapshot(&self, dir: &super::directory::DirState) -> TorSnapshot {
        let mut or_listeners_open = [0; 2];
        for l in &self.or_listeners {
            if let Ok(a) = l.local_addr() {
                or_listeners_open[family_of(&a)] += 1;
            }
        }
        let mut or_open = [[0; 2]; 2];
        for f in self.conns.values() {
            or_open[usize::from(f.outbound)][family_of(&f.addr)] += 1;
        }
        TorSnapshot {
            conns: self.conn_stats.clone(),
            or_listeners_open,
            or_open,
            flags: dir.our_flags(),
            orports_reachable: dir.orports_seem_reachable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metrics::WorkerTotals;
    use crate::messages::{RelayCounters, WorkerReport};

    #[test]
    fn workers_sum_into_tor_rows() {
        let worker = |circuits, destroys, exit_v6| {
            let mut t = WorkerTotals::default();
            let mut r = WorkerReport {
                read_bytes: 1000,
                relay: RelayCounters {
                    circuits_open: circuits,
                    destroy_cells: destroys,
                    exit_conns_created: [1, exit_v6],
                    ..RelayCounters::default()
                },
                ..WorkerReport::default()
            };
            r.limits.onionskins_processed = [0, 0, 2, 5];
            t.add(&r, 0);
            // A second report: counters add up, gauges are replaced.
            t.add(&r, 0);
            t
        };
        let mut m = MetricsSnapshot {
            workers: vec![worker(3, 1, 0), worker(4, 2, 1)],
            ..MetricsSnapshot::default()
        };
        for w in &m.workers {
            m.limits.counters.add(&w.report.limits);
        }
        let t = TorSnapshot {
            flags: vec!["Fast".into(), "Running".into()],
            ..TorSnapshot::default()
        };
        let mut o = String::new();
        render(&mut o, &m, &t);
        let has = |line: &str| o.lines().any(|l| l == line);
        assert!(has("tor_relay_circuits_total{state=\"opened\"} 7"), "{o}");
        assert!(has("tor_relay_destroy_cell_total 6"));
        assert!(has("weft_relay_orport_reachable 0"), "{o}");
        assert!(has("tor_relay_traffic_bytes{direction=\"read\"} 4000"));
        assert!(has(
            "tor_relay_load_onionskins_total{type=\"ntor_v3\",action=\"processed\"} 20"
        ));
        assert!(has("tor_relay_connections_total{type=\"Exit\",direction=\"initiated\",state=\"created\",family=\"ipv6\"} 2"));
        assert!(has("tor_relay_flag{type=\"Running\"} 1"));
        assert!(has("tor_relay_flag{type=\"Guard\"} 0"));
        assert!(has("tor_relay_load_socket_total 0"));
        assert!(o.contains("# TYPE tor_relay_circuits_total gauge"));
    }
}
