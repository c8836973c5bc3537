//! weft's own MetricsPort families for the exit: END reasons, bytes to and
//! from destinations, open streams, DNS cache hits, conflux sets and the
//! directory cache's answers. C Tor's stream, DNS and congestion-control
//! families are in [`super::tor_metrics`].

use std::fmt::Write as _;

use super::metrics::{family, END_REASON_NAMES};

/// weft's exit families (ENDs by reason, bytes to and from destinations,
/// open streams, DNS cache hits, conflux, directory answers).
pub(super) fn render_exit(o: &mut String, e: &crate::messages::ExitCounters) {
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
    for (i, r) in crate::worker::core::streams::dir::RESOURCES
        .iter()
        .enumerate()
    {
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
