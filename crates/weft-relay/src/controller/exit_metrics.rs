//! The exit's MetricsPort families: streams, DNS, END reasons, bytes, and
//! congestion control, in C Tor's metric naming with weft's prefix where
//! C has one (`tor_relay_streams_total` → `weft_relay_streams_total`).

use std::fmt::Write as _;

use super::metrics::{family, END_REASON_NAMES};

/// The exit families: C Tor's `tor_relay_streams_total` and
/// `tor_relay_exit_dns_*` with weft's prefix, and weft's own (ENDs by
/// reason, bytes to and from destinations, open streams).
pub(super) fn render_exit(o: &mut String, e: &crate::messages::ExitCounters) {
    family(
        o,
        "weft_relay_streams_total",
        "counter",
        "Total number of streams.",
    );
    for (t, v) in [
        ("begin", e.begin),
        ("begin_dir", e.dir.streams),
        ("resolve", e.resolve),
    ] {
        let _ = writeln!(o, "weft_relay_streams_total{{type=\"{t}\"}} {v}");
    }
    family(
        o,
        "weft_relay_exit_dns_query_total",
        "counter",
        "Total number of DNS queries done by this relay.",
    );
    let _ = writeln!(o, "weft_relay_exit_dns_query_total {}", e.dns_queries);
    family(
        o,
        "weft_relay_exit_dns_error_total",
        "counter",
        "Total number of DNS answers by outcome.",
    );
    for (r, v) in [
        ("success", e.dns_success),
        ("notexist", e.dns_notexist),
        ("unknown", e.dns_failed),
    ] {
        let _ = writeln!(o, "weft_relay_exit_dns_error_total{{reason=\"{r}\"}} {v}");
    }
    family(
        o,
        "weft_exit_stream_ends_total",
        "counter",
        "END cells this exit sent, by reason.",
    );
    for (i, v) in e.end_reasons.iter().enumerate() {
        if *v > 0 && !END_REASON_NAMES[i].is_empty() {
            let _ = writeln!(
                o,
                "weft_exit_stream_ends_total{{reason=\"{}\"}} {v}",
                END_REASON_NAMES[i]
            );
        }
    }
    family(
        o,
        "weft_exit_stream_bytes_total",
        "counter",
        "Bytes exit streams moved to and from their destinations.",
    );
    let _ = writeln!(
        o,
        "weft_exit_stream_bytes_total{{direction=\"from_destination\"}} {}",
        e.bytes_from_dest
    );
    let _ = writeln!(
        o,
        "weft_exit_stream_bytes_total{{direction=\"to_destination\"}} {}",
        e.bytes_to_dest
    );
    family(o, "weft_exit_streams", "gauge", "Exit streams open now.");
    let _ = writeln!(o, "weft_exit_streams {}", e.open);
    family(
        o,
        "weft_exit_dns_cache_hits_total",
        "counter",
        "Lookups answered from the exit resolver's cache (no query sent).",
    );
    let _ = writeln!(o, "weft_exit_dns_cache_hits_total {}", e.dns_cache_hits);
    let c = &e.cc;
    family(
        o,
        "weft_relay_congestion_control_total",
        "counter",
        "Congestion control at the exit (proposal 324), as C Tor's family.",
    );
    for (state, action, v) in [
        ("cc_circuits", "circs_created", c.circs_created),
        ("cc_circuits", "circs_exited_ss", c.exited_slow_start),
        ("starvation", "rtt_reset", c.rtt_reset),
        ("clock_stalls", "rtt_skipped", c.clock_stalls),
        ("flow_control", "xoff_num_sent", c.xoff_sent),
        ("flow_control", "xon_num_sent", c.xon_sent),
        ("flow_control", "xoff_num_received", c.xoff_received),
        ("flow_control", "xon_num_received", c.xon_received),
    ] {
        let _ = writeln!(
            o,
            "weft_relay_congestion_control_total{{state=\"{state}\",action=\"{action}\"}} {v}"
        );
    }
    render_conflux(o, &e.cfx);
    render_dir(o, &e.dir);
}

/// The directory cache's answers (weft's names; C Tor counts these only
/// in its dirreq statistics).
fn render_dir(o: &mut String, d: &crate::messages::DirCounters) {
    family(
        o,
        "weft_dir_requests_total",
        "counter",
        "Directory requests over BEGIN_DIR, by resource and result.",
    );
    for (i, r) in crate::worker::dir_streams::RESOURCES.iter().enumerate() {
        for (result, v) in [("served", d.served[i]), ("refused", d.refused[i])] {
            let _ = writeln!(
                o,
                "weft_dir_requests_total{{resource=\"{}\",result=\"{result}\"}} {v}",
                r.label()
            );
        }
    }
    let _ = writeln!(
        o,
        "weft_dir_requests_total{{resource=\"any\",result=\"head_too_large\"}} {}",
        d.too_large
    );
    family(
        o,
        "weft_dir_bytes_total",
        "counter",
        "Directory answer bytes (head and body) sent over BEGIN_DIR streams.",
    );
    let _ = writeln!(o, "weft_dir_bytes_total {}", d.bytes);
}

/// Conflux at the exit (C Tor exports no conflux family; weft's names).
fn render_conflux(o: &mut String, c: &crate::messages::ConfluxCounters) {
    family(
        o,
        "weft_conflux_total",
        "counter",
        "Conflux sets and legs at the exit (proposal 329).",
    );
    for (event, v) in [
        ("set_created", c.sets_created),
        ("leg_linked", c.legs_linked),
        ("leg_linked_other_worker", c.legs_remote),
        ("link_refused", c.links_refused),
        ("set_closed_legs", c.sets_closed_legs),
        ("set_closed_protocol", c.sets_closed_protocol),
        ("set_closed_ooo_full", c.sets_closed_ooo),
        ("switch_sent", c.switches_sent),
        ("switch_received", c.switches_received),
        ("reordered", c.reordered),
    ] {
        let _ = writeln!(o, "weft_conflux_total{{event=\"{event}\"}} {v}");
    }
    family(
        o,
        "weft_conflux_sets",
        "gauge",
        "Conflux sets whose home is here.",
    );
    let _ = writeln!(o, "weft_conflux_sets {}", c.sets_open);
    family(o, "weft_conflux_legs", "gauge", "Legs of those sets.");
    let _ = writeln!(o, "weft_conflux_legs {}", c.legs_open);
    family(
        o,
        "weft_conflux_ooo_depth_cells",
        "histogram",
        "Cells in a set's out-of-order queue when a message joined it.",
    );
    let mut cum = 0;
    for (i, &b) in crate::messages::OOO_DEPTH_BOUNDS.iter().enumerate() {
        cum += c.ooo_depth[i];
        let le = if b == u64::MAX {
            "+Inf".to_string()
        } else {
            b.to_string()
        };
        let _ = writeln!(
            o,
            "weft_conflux_ooo_depth_cells_bucket{{le=\"{le}\"}} {cum}"
        );
    }
    let _ = writeln!(o, "weft_conflux_ooo_depth_cells_count {cum}");
}
