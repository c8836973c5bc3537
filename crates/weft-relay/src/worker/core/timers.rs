//! The core's protocol timers (part of the sans-IO circuit core): a link
//! handshake's deadline, a connection without circuits closed after its
//! idle time, a keepalive PADDING cell on a connection nothing was written
//! to, and connection padding on idle client connections (proposal 251,
//! [`weft_proto::padding`]: decided once a second, sent at the drawn time
//! within it; PADDING_NEGOTIATE from the peer). They run from
//! [`Circuits::begin_round`]; the driver learns when to wake from
//! [`Circuits::poll_timeout`] and what to close from
//! [`crate::worker::core::Effect::CloseConn`].
//! [C connection_or.c, main.c run_connection_housekeeping(), channelpadding.c]

use std::cmp::Reverse;
use std::collections::HashMap;

use tracing::{debug, info};
use weft_proto::cell::cmd;
use weft_proto::padding::{NegotiateRefused, PadDecision};

use crate::worker::core::{Circuits, Effect};

const SECOND_NS: u64 = 1_000_000_000;
/// A connection's TCP connect, TLS and link handshake must end within
/// this long.
pub(crate) const HANDSHAKE_TIMEOUT_NS: u64 = 60 * SECOND_NS;
/// Client and non-canonical channels without circuits are closed after
/// this long plus up to half as much again, drawn per connection (C Tor's
/// `CONNTIMEOUT_CLIENTS_BASE`: 3 to 4.5 min). [protocol-notes §2.7]
pub(crate) const IDLE_CLIENT_BASE_S: u32 = 180;
/// C's default `KeepalivePeriod` (the context's `keepalive_ns` is the
/// configured one).
#[cfg(test)]
pub(crate) const KEEPALIVE_NS: u64 = 5 * 60 * SECOND_NS;

/// Connections still in their handshake, by the driver's slot: the
/// deadline (ns on the workers' clock).
#[derive(Default)]
pub(crate) struct Handshakes {
    deadlines: HashMap<usize, u64>,
}

impl Handshakes {
    pub(crate) fn start(&mut self, idx: usize, now_ns: u64) {
        self.deadlines.insert(idx, now_ns + HANDSHAKE_TIMEOUT_NS);
    }

    pub(crate) fn end(&mut self, idx: usize) {
        self.deadlines.remove(&idx);
    }
}

/// When an open connection last had circuits, last had cells staged and
/// last had a cell read (ns on the workers' clock), and how long it may
/// stay without circuits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnTimes {
    pub(super) last_had_circuits_ns: u64,
    pub(super) last_write_ns: u64,
    pub(super) last_read_ns: u64,
    pub(super) idle_timeout_ns: u64,
    /// Cells read and written since the last [`Circuits::fold_cell_counts`]
    /// (beside the times the cell path already writes).
    pub(super) cells_read: u64,
    pub(super) cells_written: u64,
}

impl ConnTimes {
    pub(crate) fn new(now_ns: u64, idle_timeout_ns: u64) -> ConnTimes {
        ConnTimes {
            last_had_circuits_ns: now_ns,
            last_write_ns: now_ns,
            last_read_ns: now_ns,
            idle_timeout_ns,
            cells_read: 0,
            cells_written: 0,
        }
    }

    /// The last cell read or written (C's `timestamp_xfer`).
    pub(super) fn last_xfer_ns(&self) -> u64 {
        self.last_write_ns.max(self.last_read_ns)
    }
}

impl Circuits {
    /// Move connection `c`'s cells read and written since the last call
    /// into the worker's `padding-counts` counters, by its padding state
    /// now: once a second for each connection (the housekeeping walk),
    /// before its padding state changes and when it leaves the worker, so
    /// the cell path only bumps a count beside its timestamp.
    pub(crate) fn fold_cell_counts(
        counters: &mut crate::worker_report::PaddingCounters,
        c: &mut super::ConnCircuits,
    ) {
        let on = usize::from(c.padding.enabled());
        counters.cells_read[on] += std::mem::take(&mut c.times.cells_read);
        counters.cells_written[on] += std::mem::take(&mut c.times.cells_written);
    }

    /// How long a connection that just opened may stay without circuits,
    /// drawn once for it as C Tor's `channelpadding_get_channel_idle_timeout`
    /// does: a client's or a non-canonical one 180 s plus up to 90 s, a
    /// canonical relay's 75% of the consensus's `nf_conntimeout_relays`
    /// (3600 s) plus up to half of it (45 to 75 min). (C halves it with
    /// `ReducedConnectionPadding`, a client's option.)
    pub(crate) fn idle_timeout_ns(&mut self, client: bool, canonical: bool) -> u64 {
        use rand::Rng;
        let s = if !canonical || client {
            IDLE_CLIENT_BASE_S + self.rng.random_range(0..IDLE_CLIENT_BASE_S / 2)
        } else {
            let t = self.ctx.conn_timeout_relays_s.max(2);
            3 * t / 4 + self.rng.random_range(0..t / 2)
        };
        u64::from(s) * SECOND_NS
    }

    /// When the driver must next call [`Circuits::begin_round`] for the
    /// core's own sake (ns on the workers' clock): now if it has work that
    /// waits for no input (directory answers left over from the last
    /// round), else its next timer; `u64::MAX` if it has none (no
    /// connection, no handshake, no self-test circuit).
    pub(crate) fn poll_timeout(&self) -> u64 {
        if self.streams.has_dir_work() {
            return self.now_ns;
        }
        // The once-a-second timers have nothing to do without a
        // connection or a self-test circuit: an idle core has no timer.
        let tick = if self.conn_ids.is_empty()
            && self.handshakes.deadlines.is_empty()
            && self.selftests.is_empty()
        {
            u64::MAX
        } else {
            self.next_tick_ns
        };
        let pad = self.pad_due.peek().map(|&Reverse((t, _))| t);
        let tick = pad.map_or(tick, |t| t.min(tick));
        let tick = self.streams.next_rate_due().map_or(tick, |t| t.min(tick));
        self.circpad.next_due().map_or(tick, |t| t.min(tick))
    }

    /// The once-a-second timers of the connections, as C Tor's
    /// `run_connection_housekeeping`: a handshake past its deadline
    /// closes; a connection without circuits for its idle time closes;
    /// else one nothing was written to for `KeepalivePeriod` gets PADDING.
    pub(crate) fn run_conn_timers(&mut self) {
        let now = self.now_ns;
        let mut late: Vec<usize> = Vec::new();
        self.handshakes.deadlines.retain(|&idx, &mut deadline| {
            if now >= deadline {
                late.push(idx);
                false
            } else {
                true
            }
        });
        for idx in late {
            self.effects.push_back(Effect::CloseConn {
                idx,
                why: "link handshake timed out".into(),
            });
        }
        let mut keepalive = Vec::new();
        let Circuits {
            conns,
            effects,
            rng,
            ctx,
            pad_due,
            counters,
            ..
        } = self;
        // Every connection once a second, as C Tor's
        // run_connection_housekeeping (never every circuit).
        crate::worker::core::walks::visit(conns.len());
        for (idx, c) in conns.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            Self::fold_cell_counts(&mut counters.padding, c);
            if !c.circuits.is_empty() {
                c.times.last_had_circuits_ns = now;
            } else {
                let limit = c.times.idle_timeout_ns;
                let idle = now.saturating_sub(c.times.last_had_circuits_ns);
                if idle >= limit {
                    effects.push_back(Effect::CloseConn {
                        idx,
                        why: format!("idle for {}s without circuits", idle / SECOND_NS),
                    });
                    continue;
                }
            }
            if now.saturating_sub(c.times.last_write_ns) >= ctx.keepalive_ns {
                keepalive.push(idx);
                continue;
            }
            // C's CHANNEL_IS_CLIENT: the peer did not authenticate as a
            // relay. (C also pads an authenticated relay the consensus
            // does not list; the core knows the listed relays only as an
            // exit.)
            let queued = !c.sched.urgent.is_empty() || !c.sched.mux.is_empty();
            let last = c.times.last_xfer_ns();
            if let PadDecision::At(t) =
                c.padding
                    .decide(now, last, queued, c.client, &ctx.padding, rng)
            {
                pad_due.push(Reverse((t, idx)));
            }
        }
        // C's pending padding timers: the heap holds one entry per
        // scheduled time (and the stale ones of this second, as C's timers
        // still pending after a connection's activity).
        self.counters.padding.timers_pending = self.pad_due.len() as u64;
        for idx in keepalive {
            if let Some(c) = self.conn_mut(idx) {
                c.times.last_write_ns = now;
                let on = usize::from(c.padding.enabled());
                self.counters.padding.pad_written[on] += 1;
            }
            self.queue_urgent(idx, 0, cmd::PADDING, &[]);
        }
    }

    /// Send the connection padding that is due: a PADDING cell on each
    /// connection whose drawn time came and that stayed idle since.
    /// [C channelpadding_send_padding_cell_for_callback()]
    pub(crate) fn send_due_padding(&mut self) {
        let now = self.now_ns;
        while let Some(&Reverse((due, idx))) = self.pad_due.peek() {
            if due > now {
                break;
            }
            self.pad_due.pop();
            let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
                continue;
            };
            if c.padding.scheduled() != Some(due) {
                continue; // not this connection's any more
            }
            let queued = !c.sched.urgent.is_empty() || !c.sched.mux.is_empty();
            let last = c.times.last_xfer_ns();
            if c.padding.fire(last, queued) {
                let gap_ms = now.saturating_sub(last) / 1_000_000;
                self.counters.padding.record_gap(gap_ms);
                self.counters.padding.pad_written[usize::from(c.padding.enabled())] += 1;
                self.queue_urgent(idx, 0, cmd::PADDING, &[]);
            }
        }
    }

    /// A PADDING_NEGOTIATE cell on connection `conn`.
    /// [C channel_tls_process_padding_negotiate_cell()]
    pub(crate) fn padding_negotiate(&mut self, conn: usize, body: &[u8]) {
        let me = self.me;
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else {
            return;
        };
        Self::fold_cell_counts(&mut self.counters.padding, c);
        match c.padding.negotiate(c.link_version, body, &self.ctx.padding) {
            Ok(on) => {
                self.counters.padding.negotiate[usize::from(!on)] += 1;
                info!(
                    "worker {me}: connection {} negotiated padding {}",
                    c.id,
                    if on { "on" } else { "off" }
                );
            }
            Err(why) => {
                self.counters.padding.negotiate[2] += 1;
                let what = match why {
                    NegotiateRefused::OldLink => "on a link below version 5",
                    NegotiateRefused::Malformed => "malformed",
                    NegotiateRefused::UnknownVersion => "with an unknown version",
                };
                debug!(
                    "worker {me}: connection {}: PADDING_NEGOTIATE {what}; ignored",
                    c.id
                );
            }
        }
    }
}
