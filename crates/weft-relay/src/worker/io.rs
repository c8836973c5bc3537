//! The driver's byte paths: reading connections (within the read budget and
//! the worker's read bucket) and handing each cell to the circuit core in
//! place; writing — once per KIST run, ask the kernel how much each
//! connection's socket can take ([`crate::kist`]), let the core fill that
//! much ([`super::core::Circuits::fill`]), hand it to TLS.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::core::dispatch::CellVerdict;
use super::core::sched::CellSink;
use super::core::ReadFrom;
use super::Worker;
use crate::kist;
use crate::link_io::{IoState, LinkConn, STAGE_CHUNK};

/// Bytes of cells staged for one connection per round (no KIST).
const WRITE_BATCH: usize = 64 * 1024;
/// Most bytes written to one connection per KIST run.
const MAX_KIST_BATCH: usize = 1 << 20;

impl Worker {
    /// Read every connection on the to-read list.
    pub(crate) fn read_all(&mut self) {
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        std::mem::swap(&mut list, &mut self.to_read);
        let crossing = self.peers.len() > 1;
        for &idx in &list {
            let before = self.counters.read;
            self.read_conn(idx);
            if crossing && self.counters.read != before {
                self.exchange_rings();
            }
        }
        list.clear();
        self.scratch = list;
        self.apply_effects();
    }

    /// After the lanes were served at the round's end: a paused connection
    /// one of whose circuits has nothing waiting now reads again at once
    /// (its peer may send nothing more to wake us, its window being in
    /// our hands), the others stay paused.
    pub(super) fn unpause_reads(&mut self) {
        let mut i = 0;
        while i < self.paused.len() {
            let idx = self.paused[i];
            if self.core.read_paused(idx) {
                i += 1;
            } else {
                self.paused.swap_remove(i);
                self.to_read.push(idx);
            }
        }
    }

    /// Read and handle cells of connection `idx` until EAGAIN or the
    /// round's budget; re-lists it if it still has bytes to read.
    fn read_conn(&mut self, idx: usize) {
        // Its share of the round: more for a link with more busy circuits.
        let mut budget = self
            .core
            .read_budget(ReadFrom::Conn(idx))
            .min(self.read_bucket.available());
        loop {
            // Cells already buffered first.
            if let Err(why) = self.process_conn_cells(idx) {
                return self.close_later(idx, why);
            }
            let Some(c) = self.conns.get_mut(idx) else {
                return;
            };
            if c.closing.is_some() || !c.readable {
                return;
            }
            // Every circuit it carries has cells waiting to cross (what it
            // read may have made it so): its bytes wait in the kernel
            // until one of them has none.
            if self.core.read_paused(idx) {
                self.paused.push(idx);
                return;
            }
            let Some(c) = self.conns.get_mut(idx) else {
                return;
            };
            if budget == 0 {
                // Out of read tokens: wait for the refill; else the round's
                // fair share is used up: again next round.
                if self.read_bucket.available() == 0 {
                    self.starved.push(idx);
                } else {
                    self.to_read.push(idx);
                }
                return;
            }
            let before = c.link.read_total;
            match c.link.fill() {
                Ok(IoState::Progress) => {
                    let n = c.link.read_total - before;
                    self.counters.read += n;
                    if c.peer_addr.is_ipv6() {
                        self.counters.read_v6 += n;
                    }
                    c.bytes_recent += n;
                    self.read_bucket.consume(n);
                    budget = budget.saturating_sub(n.max(1));
                }
                Ok(IoState::WouldBlock) => {
                    c.readable = false;
                    if c.is_light() && !c.writing {
                        self.trim.released(c.link.release_light_buffers());
                    }
                    return;
                }
                Ok(IoState::Closed) => {
                    return self.close_later(idx, "peer closed the connection".into())
                }
                Err(e) => return self.close_later(idx, format!("read: {e}")),
            }
        }
    }

    /// Hand every complete buffered cell of connection `idx` to the core
    /// (stamped with the round's read time, `read_stamp_ns`: no clock read
    /// per cell). An error closes the connection.
    fn process_conn_cells(&mut self, idx: usize) -> Result<(), String> {
        let stamp = self.read_stamp_ns;
        let Worker { conns, core, .. } = self;
        let Some(conn) = conns.get_mut(idx) else {
            return Ok(());
        };
        let mut fatal = None;
        let read = conn.link.process_cells(|cell| {
            let v = core.on_cell(idx, cell, stamp);
            let flow = v.flow();
            if let CellVerdict::Close(why) = v {
                fatal = Some(why);
            }
            flow
        });
        read?;
        match fatal {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// The KIST run at `now` took place ([`kist::next_run_after`]).
    fn advance_cadence(&mut self, now: Instant) {
        self.next_sched_run =
            kist::next_run_after(self.next_sched_run, self.ctx.kist_interval, now);
    }

    /// Connection `idx` has cells to write (`Effect::Write`): onto the
    /// writing list, once.
    pub(crate) fn add_writing(&mut self, idx: usize) {
        if let Some(c) = self.conns.get_mut(idx) {
            if !c.writing {
                c.writing = true;
                self.writing.push(idx);
            }
        }
    }

    /// Write pending connections: every round without KIST, else on the
    /// fixed KIST cadence.
    pub(crate) fn write_all(&mut self) {
        // The connections the core has new cells for join the list.
        self.apply_effects();
        if !self.writing.is_empty() {
            let mut list = std::mem::take(&mut self.writing);
            self.write_pending(&mut list);
            // The ones not done stay (no allocation: the list keeps its
            // capacity).
            self.writing = list;
        }
    }

    fn write_pending(&mut self, list: &mut Vec<usize>) {
        // One clock read per scheduling run (delays, EWMA weight, KIST).
        let now = Instant::now();
        // KIST: the scheduler runs every KISTSchedRunInterval, so that the
        // cells of a run compete by priority; without KIST, every round.
        if !self.ctx.kist_interval.is_zero() {
            if now < self.next_sched_run {
                return;
            }
            self.advance_cadence(now);
        }
        let now_ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        list.retain(|&idx| !self.write_conn(idx, now_ns));
    }

    /// Write up to one batch of cells for connection `idx` (what KIST and
    /// the write bucket allow), staged and flushed a chunk at a time.
    /// Returns true when it has nothing left to write (it leaves the
    /// writing list).
    fn write_conn(&mut self, idx: usize, now_ns: u64) -> bool {
        let Worker {
            conns,
            core,
            counters,
            to_close,
            ctx,
            write_bucket,
            trim,
            ..
        } = self;
        let Some(c) = conns.get_mut(idx) else {
            // Gone here (closed): nothing to write.
            return true;
        };
        if !c.is_open() || !c.writable || c.closing.is_some() {
            return false;
        }
        // BandwidthRate: at most the write tokens (circuit cells; the few
        // control cells always go).
        let allowed = write_bucket.available() as usize;
        // KIST: write only what the kernel can send now. [crate::kist]
        let fd = c.link.tls().tcp().as_raw_fd();
        let budget = if ctx.kist_interval.is_zero() {
            // Without KIST, still sample the kernel queue now and then (for
            // the comparison on the MetricsPort).
            counters.outq_tick = counters.outq_tick.wrapping_add(1);
            if counters.outq_tick % 64 == 0 {
                if let Some(st) = crate::kist::socket_state(fd) {
                    counters.outq.record_units(u64::from(st.outq));
                }
            }
            WRITE_BATCH
        } else {
            match crate::kist::socket_state(fd) {
                Some(st) => {
                    counters.outq.record_units(u64::from(st.outq));
                    (crate::kist::limit(&st, ctx.kist_factor) as usize).min(MAX_KIST_BATCH)
                }
                None => WRITE_BATCH,
            }
        };
        // Stage and flush in chunks of at most STAGE_CHUNK, until the
        // run's budget is written, the socket is full or nothing is left:
        // the write buffer of a busy link stays one chunk, not a batch.
        let mut left = budget;
        let mut allowed = allowed;
        loop {
            let chunk = left.min(STAGE_CHUNK);
            let filled = core.fill(idx, &mut c.link, chunk, allowed, now_ns);
            write_bucket.consume(filled.staged as u64);
            allowed = allowed.saturating_sub(filled.staged);
            let before = c.link.written_total;
            let flushed = match c.link.flush() {
                Ok(all) => all,
                Err(e) => {
                    c.closing = Some(format!("write: {e}"));
                    to_close.push(idx);
                    return true;
                }
            };
            let n = c.link.written_total - before;
            if n > 0 {
                counters.written += n;
                if c.peer_addr.is_ipv6() {
                    counters.written_v6 += n;
                }
                c.bytes_recent += n;
            }
            if !flushed {
                c.writable = false;
                return false;
            }
            if !filled.more {
                break;
            }
            left = left.saturating_sub(n as usize);
            if left == 0 || filled.staged == 0 {
                // The run's share is written (or the bucket is empty):
                // the rest waits for the next run.
                return false;
            }
        }
        c.writing = false;
        if c.is_light() && c.link.buffered_in() == 0 {
            trim.released(c.link.release_light_buffers());
        }
        true
    }
}

/// The core stages a connection's cells straight into its TLS link's
/// output buffer (the driver's type; the core sees only [`CellSink`]).
impl CellSink for LinkConn {
    #[inline]
    fn staged(&self) -> usize {
        self.pending_out()
    }

    #[inline]
    fn put(&mut self, circ_id: u32, command: u8, body: &[u8; weft_proto::cell::BODY_LEN]) {
        self.queue_cell(circ_id, command, body);
    }
}
