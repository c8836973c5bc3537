//! The exit streams' flow control (part of the sans-IO circuit core): how
//! far a stream's socket may be read (its window or XON/XOFF, its
//! circuit's package or congestion window, its circuit's queue), the DATA
//! cells that reading makes, the bytes waiting for the destination, and
//! the SENDMEs, XOFFs and XONs that follow from them. The rules are
//! weft-proto's `circuit::flow` and `circuit::congestion`; this file
//! applies them to a worker's streams.
//! [C relay.c connection_edge_package_raw_inbuf(), handle_relay_msg();
//! sendme.c; congestion_control_flow.c]

use tracing::debug;
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::flow::{DATA_MAX, DATA_MAX_V1, XOFF_BODY, XON_BODY};
use weft_proto::relay::relay_cmd;

use crate::worker::core::half::HalfRole;
use crate::worker::core::streams::{State, StreamOwner, Streams, OUTBUF_FULL, QUEUE_HIGHWATER};
use crate::worker::core::Circuits;

/// A circuit counts as blocked on its connection (a congestion signal
/// for Vegas) while this many of its cells wait there: C's default
/// `orconn_high` (32 KiB) in cells.
pub(crate) const BLOCKED_QUEUE: usize = 32 * 1024 / 514;

/// Most bytes one stream may hold for its destination. Without congestion
/// control the stream window bounds them (500 cells); with it, a client
/// keeps sending until our XOFF reaches it — up to its congestion window
/// (at most `cc_ss_max` cells in slow start) — so the cap leaves room for
/// that; a client that sends past it ignores XOFF and loses its circuit.
fn max_to_dest(xoff_limit: usize, ss_cwnd_max: u64) -> usize {
    xoff_limit + 2 * usize::try_from(ss_cwnd_max).unwrap_or(usize::MAX / 4) * DATA_MAX
}

impl Circuits {
    /// The round's clock in µs (what Vegas and XOFF's grace period use).
    fn now_us(&self) -> u64 {
        self.now_ns / 1000
    }

    /// DATA for stream `key` of the half at `slot`: its bytes wait for the
    /// destination; XOFF when they pile up (congestion control).
    pub(in crate::worker::core) fn stream_data(
        &mut self,
        owner: StreamOwner,
        key: usize,
        data: &[u8],
    ) {
        let (now_ns, now_us) = (self.now_ns, self.now_us());
        let limit = self.ctx.cc.xoff_exit_bytes;
        let cap = max_to_dest(limit, self.ctx.cc.ss_cwnd_max);
        let s = &mut self.streams.streams[key];
        if let Err(e) = s.flow.data_received() {
            self.close_owner(owner, destroy_reason::PROTOCOL, &e.to_string());
            return;
        }
        if s.state == State::Flushing {
            return;
        }
        let xoff = s.flow.decide_xoff(s.to_dest.len(), limit, now_us);
        if s.to_dest.is_empty() {
            s.waiting_since_ns = now_ns.max(1);
        }
        s.to_dest.extend(data);
        self.streams.to_dest_bytes += data.len() as u64;
        let over = s.to_dest.len() > cap;
        let sid = s.stream_id;
        self.streams.want_write.push(key);
        if over {
            self.close_owner(
                owner,
                destroy_reason::RESOURCELIMIT,
                "a stream's client kept sending after XOFF",
            );
            return;
        }
        if xoff {
            self.streams.counters.cc.xoff_sent += 1;
            self.send_on(owner, relay_cmd::XOFF, sid, &XOFF_BODY);
        }
    }

    /// A stream-level SENDME: the stream's window opens (an error without
    /// stream windows, or past the window, closes the circuit).
    pub(in crate::worker::core) fn stream_sendme(&mut self, owner: StreamOwner, key: usize) {
        if let Err(e) = self.streams.streams[key].flow.sendme_received() {
            self.close_owner(owner, destroy_reason::PROTOCOL, &e.to_string());
            return;
        }
        self.streams.may_read.push(key);
    }

    /// The client sent XOFF for stream `key`: stop reading its socket
    /// (ignored, as C ignores it, without congestion control or twice).
    pub(in crate::worker::core) fn stream_xoff(&mut self, key: usize) {
        if self.streams.streams[key].flow.xoff_received() {
            self.streams.counters.cc.xoff_received += 1;
        }
    }

    /// The client sent XON for stream `key`: read again, at most at its
    /// advisory rate (as C, `StreamFlow::xon_received`).
    pub(in crate::worker::core) fn stream_xon(&mut self, key: usize, data: &[u8]) {
        let now_us = self.now_us();
        let s = &mut self.streams.streams[key];
        if s.flow.uses_xon_xoff() && weft_proto::circuit::flow::parse_xon(data).is_some() {
            self.streams.counters.cc.xon_received += 1;
        }
        if s.flow.xon_received(data, now_us) && s.state == State::Open {
            self.streams.may_read.push(key);
        }
    }

    /// A circuit-level SENDME on the half at `slot` (its decrypted message
    /// in `body`): checked against the kept digest, then the window (or
    /// Vegas) opens and the circuit's streams may read again. A bad one
    /// closes the circuit. Never inlined: a middle relay's per-cell
    /// dispatch stays as small as it was before exits.
    #[inline(never)]
    pub(crate) fn circuit_sendme(
        &mut self,
        conn: usize,
        slot: u32,
        header: &weft_proto::relay::RelayHeader,
        body: &[u8; BODY_LEN],
    ) {
        let now_us = self.now_us();
        let accept_min = self.ctx.sendme_accept_min;
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        let blocked = h.queue.len() >= BLOCKED_QUEUE;
        let HalfRole::Keyed(k) = &mut h.role else {
            return;
        };
        match k.circuit_sendme_received(header, body, accept_min, now_us, blocked) {
            Ok(outcome) => {
                if let Some(o) = outcome {
                    let c = &mut self.streams.counters.cc;
                    c.exited_slow_start += u64::from(o.exited_slow_start);
                    c.ss_exit_cwnd_sum += o.ss_exit_cwnd;
                    c.rtt_reset += u64::from(o.rtt_reset);
                    c.clock_stalls += u64::from(o.clock_stalled);
                }
                self.circuit_window_opened(StreamOwner::circuit(conn, slot));
                self.leg_window_moved(slot);
            }
            Err(e) => self.close_circuit(conn, slot, destroy_reason::PROTOCOL, &e.to_string()),
        }
    }

    /// The window of `owner` (a circuit's keyed half, or a set's legs)
    /// opened: its open streams (all in `by_id`: only END takes a stream
    /// out) may read again. A range of the ordered table, not a scan of
    /// the worker's streams.
    pub(crate) fn circuit_window_opened(&mut self, owner: StreamOwner) {
        for (_, &key) in self.streams.by_id.range(owner.ids()) {
            if self
                .streams
                .streams
                .get(key)
                .is_some_and(|s| s.state == State::Open)
            {
                self.streams.may_read.push(key);
            }
        }
    }

    /// How many bytes stream `key` may read from its socket now: what its
    /// window (or XON/XOFF), its circuit's window (or congestion window)
    /// and its circuit's queue allow.
    pub(in crate::worker::core) fn stream_read_budget(&mut self, key: usize) -> usize {
        let now_us = self.now_us();
        let Some(s) = self.streams.streams.get_mut(key) else {
            return 0;
        };
        if s.state != State::Open || !s.flow.can_package() {
            return 0;
        }
        let allowance = s.flow.read_allowance(now_us);
        if allowance == 0 {
            // Its XON's rate: again once a cell's worth has refilled.
            if !s.rate_listed {
                s.rate_listed = true;
                let due_us = s.flow.rate_refill_at(DATA_MAX).unwrap_or(now_us);
                self.streams
                    .throttled
                    .push((due_us.saturating_mul(1000), key));
            }
            return 0;
        }
        self.window_budget(key).min(allowance)
    }

    /// Bytes stream `key` may read as its windows and its circuit's queue
    /// allow.
    fn window_budget(&mut self, key: usize) -> usize {
        let Some(s) = self.streams.streams.get(key) else {
            return 0;
        };
        let (owner, stream_window) = (s.owner, s.flow.package_window());
        let slot = match owner {
            StreamOwner::Set(idx) => {
                let cells = stream_window
                    .min(self.set_window(idx))
                    .min(QUEUE_HIGHWATER as i32);
                return usize::try_from(cells).unwrap_or(0) * DATA_MAX_V1;
            }
            StreamOwner::Circuit { slot, .. } => slot,
        };
        let Some(h) = self.halves.by_slot(slot) else {
            return 0;
        };
        let queued = h.queue.len();
        let HalfRole::Keyed(k) = &h.role else {
            return 0;
        };
        let cells = stream_window
            .min(k.package_window())
            .min(QUEUE_HIGHWATER as i32 - queued as i32);
        usize::try_from(cells).unwrap_or(0) * k.data_max()
    }

    /// Bytes stream `key` read from its socket (within its read budget):
    /// DATA cells toward the client.
    pub(in crate::worker::core) fn stream_data_read(&mut self, key: usize, mut data: &[u8]) {
        let now_us = self.now_us();
        if let Some(s) = self.streams.streams.get_mut(key) {
            s.flow.bytes_read(data.len());
        }
        while !data.is_empty() {
            let Some(s) = self.streams.streams.get_mut(key) else {
                return;
            };
            let (owner, sid) = (s.owner, s.stream_id);
            s.flow.data_sent();
            let (conn, slot) = match owner {
                StreamOwner::Set(idx) => {
                    // A set's legs may differ in format: the size every
                    // format carries (C's RELAY_PAYLOAD_SIZE_MIN).
                    let n = data.len().min(DATA_MAX_V1);
                    self.set_send(idx, relay_cmd::DATA, sid, &data[..n]);
                    data = &data[n..];
                    continue;
                }
                StreamOwner::Circuit { slot, conn } => (conn, slot),
            };
            let mut body = [0u8; BODY_LEN];
            let Some(k) = self.keyed(slot) else { return };
            let n = data.len().min(k.data_max());
            k.originate_data(&mut body, sid, &data[..n], now_us);
            let now = self.now_ns;
            self.enqueue(conn, slot, cmd::RELAY, now, now, &body);
            data = &data[n..];
        }
    }

    /// The bytes stream `key` holds for its destination, taken as the
    /// driver's socket would (the tests).
    #[cfg(test)]
    pub(in crate::worker::core) fn take_stream_output(&mut self, key: usize) -> Option<Vec<u8>> {
        let s = self.streams.streams.get_mut(key)?;
        self.streams.to_dest_bytes -= s.to_dest.len() as u64;
        Some(s.to_dest.drain(..).collect())
    }

    /// How many bytes stream `key` holds for its destination (the tests).
    #[cfg(test)]
    pub(in crate::worker::core) fn stream_output_len(&self, key: usize) -> Option<usize> {
        self.streams.streams.get(key).map(|s| s.to_dest.len())
    }

    /// The driver wrote to stream `key`'s socket: a stream that the client
    /// ended closes once everything went out; an open one sends the
    /// stream SENDMEs the destination's pace allows, or XON once the
    /// bytes after an XOFF are gone.
    pub(in crate::worker::core) fn stream_wrote(&mut self, key: usize) {
        let Some(s) = self.streams.streams.get_mut(key) else {
            return;
        };
        if s.state == State::Flushing {
            if s.to_dest.is_empty() {
                self.free_stream(key);
            }
            return;
        }
        if s.to_dest.is_empty() {
            s.waiting_since_ns = 0;
        }
        let (owner, sid) = (s.owner, s.stream_id);
        if s.flow.decide_xon(s.to_dest.len()) {
            debug!("worker {}: XON for stream {sid}", self.me);
            self.streams.counters.cc.xon_sent += 1;
            return self.send_on(owner, relay_cmd::XON, sid, &XON_BODY);
        }
        if s.to_dest.len() >= OUTBUF_FULL {
            return;
        }
        for _ in 0..s.flow.sendmes_due() {
            self.send_on(owner, relay_cmd::SENDME, sid, &[]);
        }
    }

    /// Bytes this worker's streams hold for their destinations, and the
    /// directory answers made for one request still unsent
    /// (MaxMemInQueues counts them with the cell queues).
    /// Kept up to date as bytes come and go, so no stream is walked.
    pub(crate) fn stream_buffered_bytes(&self) -> u64 {
        let st = &self.streams;
        let dir: u64 = st
            .dir_keys
            .iter()
            .filter_map(|&k| st.streams.get(k)?.dir.as_ref().map(|d| d.held_bytes()))
            .sum();
        #[cfg(test)]
        assert_eq!(
            st.to_dest_bytes + dir,
            st.streams
                .iter()
                .map(|(_, s)| s.to_dest.len() as u64 + s.dir.as_ref().map_or(0, |d| d.held_bytes()))
                .sum::<u64>(),
            "the kept byte count drifted from the streams'"
        );
        st.to_dest_bytes + dir
    }

    /// Every stream with bytes waiting for its destination, for the memory
    /// limit: (its owner, age of the oldest waiting byte at `now_ns`,
    /// bytes). As C Tor's OOM handler counts an exit connection's buffers
    /// with its circuit.
    pub(crate) fn stream_oom_candidates(
        &self,
        now_ns: u64,
    ) -> impl Iterator<Item = (StreamOwner, u64, u64)> + '_ {
        crate::worker::core::walks::visit(self.streams.streams.len());
        self.streams
            .streams
            .iter()
            .filter(|(_, s)| {
                s.waiting_since_ns != 0
                    && (!s.to_dest.is_empty() || s.dir.as_ref().is_some_and(|d| d.held_bytes() > 0))
            })
            .map(move |(_, s)| {
                (
                    s.owner,
                    now_ns.saturating_sub(s.waiting_since_ns),
                    s.to_dest.len() as u64 + s.dir.as_ref().map_or(0, |d| d.held_bytes()),
                )
            })
    }
}

impl Streams {
    /// The streams held back by their XON's rate whose bucket has a cell's
    /// worth by `now_ns` may read again.
    pub(crate) fn rate_round(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.throttled.len() {
            let (due, key) = self.throttled[i];
            if due > now_ns {
                i += 1;
                continue;
            }
            self.throttled.swap_remove(i);
            if let Some(s) = self.streams.get_mut(key) {
                s.rate_listed = false;
                self.may_read.push(key);
            }
        }
    }

    /// When the first stream held back by its XON's rate may read again.
    pub(crate) fn next_rate_due(&self) -> Option<u64> {
        self.throttled.iter().map(|&(due, _)| due).min()
    }
}
