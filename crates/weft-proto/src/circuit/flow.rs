//! Flow control at the last hop of a circuit, as C Tor 0.4.9 does it: the
//! circuit's package and deliver windows (1000 cells, SENDME per 100) —
//! or, once the client negotiated congestion control, the congestion
//! window of [`super::congestion`] and a SENDME per `sendme_inc` cells —
//! with authenticated SENDMEs (proposal 289, version 1: the SENDME echoes
//! the running digest of the cell that completed the increment); a
//! stream's windows (500 cells, SENDME per 50, unauthenticated), or
//! XON/XOFF under congestion control. A peer that sends past a window or
//! a SENDME nobody asked for breaks the protocol: its circuit closes.
//! [tor-spec §7.3–7.4; proposal 289; C sendme.c, relay.c
//! connection_edge_package_raw_inbuf(), handle_relay_msg();
//! congestion_control_common.c circuit_sent_cell_for_sendme()]

use std::collections::VecDeque;

use super::congestion::{CcParams, SendmeOutcome, Vegas};
use crate::relay::RELAY_DATA_MAX;

/// A circuit's windows start here (and may never exceed it).
pub const CIRCWINDOW_START: i32 = 1000;
/// Cells per circuit-level SENDME.
pub const CIRCWINDOW_INCREMENT: i32 = 100;
/// A stream's windows start here (and may never exceed it).
pub const STREAMWINDOW_START: i32 = 500;
/// Cells per stream-level SENDME.
pub const STREAMWINDOW_INCREMENT: i32 = 50;
/// The SENDME v1 tag of a tor1 hop: its running digest. (A CGO hop's
/// tag is [`CGO_TAG_LEN`] bytes; tags are kept in slots of this size,
/// zero-padded, as C keeps them.)
pub const TAG_LEN: usize = 20;
/// The SENDME v1 tag of a CGO hop. [C or.h SENDME_TAG_LEN_CGO]
pub const CGO_TAG_LEN: usize = 16;
/// At most this many SENDMEs can be outstanding with fixed windows.
const MAX_TAGS: usize = (CIRCWINDOW_START / CIRCWINDOW_INCREMENT) as usize;
/// Payload of DATA cells: the most a stream packages into one cell (relay
/// cell format V0; a V1 circuit's is [`DATA_MAX_V1`]).
pub const DATA_MAX: usize = RELAY_DATA_MAX;
/// Payload of a DATA cell in relay cell format V1 (a CGO hop), and what a
/// conflux set packages whatever its legs' formats (C's
/// `RELAY_PAYLOAD_SIZE_MIN`).
pub const DATA_MAX_V1: usize = crate::cell::BODY_LEN - crate::relay_v1::DATA_AT_WITH_STREAM;

/// A broken flow-control rule: the circuit closes (TORPROTOCOL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// DATA beyond the deliver window.
    #[error("DATA cell beyond the {0} deliver window")]
    DeliverWindow(&'static str),
    /// A SENDME that would open a window past its maximum.
    #[error("unexpected {0} SENDME (window would exceed its maximum)")]
    UnexpectedSendme(&'static str),
    /// A circuit-level SENDME we had no cell digest for.
    #[error("circuit SENDME without a cell digest to match")]
    NoDigest,
    /// A SENDME v1 whose tag does not match the cell it acknowledges.
    #[error("SENDME v1 digest does not match")]
    TagMismatch,
    /// A SENDME we cannot parse, or of a version we do not accept.
    #[error("unparseable or unsupported SENDME (version {0})")]
    BadSendme(u8),
}

/// A SENDME's data, parsed: version 0 (empty) or 1 (the tag, 20 bytes
/// for tor1 or 16 for CGO, returned zero-padded with its length).
/// [proposal 289; trunnel sendme_cell; C sendme.c tag_len_ok()]
pub fn parse_sendme(data: &[u8]) -> Result<Option<([u8; TAG_LEN], usize)>, FlowError> {
    match data {
        [] | [0, ..] => Ok(None),
        [1, hi, lo, rest @ ..] => {
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            if (len != TAG_LEN && len != CGO_TAG_LEN) || rest.len() < len {
                return Err(FlowError::BadSendme(1));
            }
            let mut tag = [0u8; TAG_LEN];
            tag[..len].copy_from_slice(&rest[..len]);
            Ok(Some((tag, len)))
        }
        [v, ..] => Err(FlowError::BadSendme(*v)),
    }
}

/// A SENDME v1 body for a tor1 hop: version 1, length 20, the tag.
pub fn sendme_v1_body(tag: &[u8; TAG_LEN]) -> [u8; 3 + TAG_LEN] {
    let mut b = [0u8; 3 + TAG_LEN];
    b[0] = 1;
    b[1..3].copy_from_slice(&(TAG_LEN as u16).to_be_bytes());
    b[3..].copy_from_slice(tag);
    b
}

/// A SENDME v1 body for a CGO hop: version 1, length 16, the tag.
pub fn sendme_v1_cgo_body(tag: &[u8; CGO_TAG_LEN]) -> [u8; 3 + CGO_TAG_LEN] {
    let mut b = [0u8; 3 + CGO_TAG_LEN];
    b[0] = 1;
    b[1..3].copy_from_slice(&(CGO_TAG_LEN as u16).to_be_bytes());
    b[3..].copy_from_slice(tag);
    b
}

/// A CGO tag in a tor1-sized slot, zero-padded (as C stores it).
pub fn cgo_tag_slot(tag: &[u8; CGO_TAG_LEN]) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    t[..CGO_TAG_LEN].copy_from_slice(tag);
    t
}

/// A circuit's windows at its last hop, with the digests (and send times)
/// of the cells whose SENDMEs we wait for. Fixed windows, or TOR_VEGAS
/// when the client negotiated congestion control ([`super::congestion`]).
#[derive(Debug, Clone)]
pub struct CircuitFlow {
    package: i32,
    deliver: i32,
    /// Cells per SENDME we send: 100, or the negotiated `sendme_inc`.
    deliver_inc: i32,
    /// Tags of sent cells a SENDME must echo, with when they were sent
    /// (µs), oldest first. Grows to the most SENDMEs outstanding at once
    /// (10 with fixed windows; cwnd / sendme_inc with congestion control)
    /// and keeps its room.
    tags: VecDeque<([u8; TAG_LEN], u64)>,
    /// The length of this hop's SENDME tags: [`TAG_LEN`] (tor1) or
    /// [`CGO_TAG_LEN`].
    tag_len: u8,
    /// Congestion control, when negotiated.
    cc: Option<Vegas>,
}

impl Default for CircuitFlow {
    fn default() -> Self {
        CircuitFlow {
            package: CIRCWINDOW_START,
            deliver: CIRCWINDOW_START,
            deliver_inc: CIRCWINDOW_INCREMENT,
            tags: VecDeque::with_capacity(MAX_TAGS),
            tag_len: TAG_LEN as u8,
            cc: None,
        }
    }
}

impl CircuitFlow {
    /// A circuit whose client negotiated congestion control.
    pub fn with_congestion_control(p: CcParams) -> Self {
        CircuitFlow {
            deliver_inc: i32::from(p.sendme_inc.max(1)),
            cc: Some(Vegas::new(p)),
            ..CircuitFlow::default()
        }
    }

    /// The same, for a CGO hop: its SENDMEs carry 16-byte tags.
    pub fn with_cgo_tags(mut self) -> Self {
        self.tag_len = CGO_TAG_LEN as u8;
        self
    }

    /// The congestion-control state, if negotiated.
    pub fn congestion(&self) -> Option<&Vegas> {
        self.cc.as_ref()
    }

    /// May we send a DATA cell now?
    pub fn can_package(&self) -> bool {
        self.package_window() > 0
    }

    /// Cells we may still package before a SENDME.
    pub fn package_window(&self) -> i32 {
        match &self.cc {
            Some(v) => i32::try_from(v.package_window()).unwrap_or(i32::MAX),
            None => self.package,
        }
    }

    /// The deliver window (for tests and logs).
    pub fn deliver_window(&self) -> i32 {
        self.deliver
    }

    /// True if the DATA cell about to be sent is the last of an increment:
    /// its digest must be kept for the SENDME that acknowledges it.
    pub fn next_data_needs_tag(&self) -> bool {
        match &self.cc {
            Some(v) => v.next_cell_needs_tag(),
            None => {
                self.package != CIRCWINDOW_START && (self.package - 1) % CIRCWINDOW_INCREMENT == 0
            }
        }
    }

    /// A DATA cell was sent at `now_us`; `tag` is its digest if
    /// [`next_data_needs_tag`](Self::next_data_needs_tag) said so.
    pub fn data_sent(&mut self, tag: Option<[u8; TAG_LEN]>, now_us: u64) {
        if let Some(t) = tag {
            self.tags.push_back((t, now_us));
        }
        match &mut self.cc {
            Some(v) => v.cell_sent(),
            None => self.package -= 1,
        }
    }

    /// A circuit-level SENDME arrived with `data` at `now_us`: check it
    /// against the oldest kept digest, then open the package window (or
    /// let Vegas move the congestion window; `blocked`: the circuit's
    /// cells wait for its connection). `accept_min` is the consensus's
    /// `sendme_accept_min_version` (default 0; 1 on the live network).
    pub fn sendme_received(
        &mut self,
        data: &[u8],
        accept_min: u8,
        now_us: u64,
        blocked: bool,
    ) -> Result<Option<SendmeOutcome>, FlowError> {
        if self.cc.is_none() && self.package + CIRCWINDOW_INCREMENT > CIRCWINDOW_START {
            return Err(FlowError::UnexpectedSendme("circuit"));
        }
        let tag = parse_sendme(data)?;
        if accept_min > 1 {
            return Err(FlowError::BadSendme(accept_min));
        }
        let Some((expected, sent_us)) = self.tags.pop_front() else {
            return Err(FlowError::NoDigest);
        };
        match tag {
            None if accept_min > 0 => return Err(FlowError::BadSendme(0)),
            None => {}
            // C: a tag of the other kind's length, or another tag, is
            // refused (sendme.c cell_v1_is_valid()).
            Some((t, len)) if len != usize::from(self.tag_len) || t != expected => {
                return Err(FlowError::TagMismatch)
            }
            Some(_) => {}
        }
        match &mut self.cc {
            Some(v) => Ok(Some(v.sendme_received(sent_us, now_us, blocked))),
            None => {
                self.package += CIRCWINDOW_INCREMENT;
                Ok(None)
            }
        }
    }

    /// A DATA cell arrived. Ok(true) if a circuit-level SENDME is due now
    /// (its tag is the digest of this cell); the window is already
    /// credited for it.
    pub fn data_received(&mut self) -> Result<bool, FlowError> {
        self.deliver -= 1;
        if self.deliver < 0 {
            return Err(FlowError::DeliverWindow("circuit"));
        }
        if self.deliver <= CIRCWINDOW_START - self.deliver_inc {
            self.deliver += self.deliver_inc;
            return Ok(true);
        }
        Ok(false)
    }
}

/// XOFF is sent once the bytes waiting for the destination stayed over
/// the limit this long (C's `XOFF_GRACE_PERIOD_USEC`).
pub const XOFF_GRACE_US: u64 = 5000;

/// A stream's flow control: windows (500 cells, SENDME per 50) on a
/// circuit without congestion control; XON/XOFF on one with it (no stream
/// windows, no stream SENDMEs). [proposal 324 §4; C
/// congestion_control_flow.c]
#[derive(Debug, Clone, Copy)]
pub struct StreamFlow {
    package: i32,
    deliver: i32,
    /// The circuit negotiated congestion control: XON/XOFF.
    xon_xoff: bool,
    /// We sent XOFF and no XON since.
    xoff_sent: bool,
    /// The client sent XOFF and no XON since: do not read the socket.
    xoff_received: bool,
    /// When the waiting bytes went over the XOFF limit (µs; 0: they are
    /// not over it).
    grace_start_us: u64,
    /// The read rate the client's last XON advised (bytes/s; 0: none).
    rate: XonRate,
}

/// The drain rate a client's XON advises, as C applies it to the exit's
/// edge connection (`circuit_process_stream_xon`: `kbps_ewma` × 1000
/// bytes a second, burst as much; 0 or more than `INT32_MAX`: no limit):
/// a token bucket the stream's socket reads take from.
#[derive(Debug, Clone, Copy, Default)]
struct XonRate {
    /// Bytes a second and the bucket's size (0: no limit).
    rate: u64,
    /// Bytes that may be read now.
    tokens: u64,
    /// When `tokens` was last filled (µs).
    filled_us: u64,
}

impl XonRate {
    fn refill(&mut self, now_us: u64) {
        let elapsed = now_us.saturating_sub(self.filled_us);
        let add = elapsed.saturating_mul(self.rate) / 1_000_000;
        if add > 0 {
            self.tokens = (self.tokens + add).min(self.rate);
            self.filled_us = now_us;
        }
    }
}

impl Default for StreamFlow {
    fn default() -> Self {
        StreamFlow {
            package: STREAMWINDOW_START,
            deliver: STREAMWINDOW_START,
            xon_xoff: false,
            xoff_sent: false,
            xoff_received: false,
            grace_start_us: 0,
            rate: XonRate::default(),
        }
    }
}

impl StreamFlow {
    /// A stream on a circuit with congestion control.
    pub fn with_xon_xoff() -> Self {
        StreamFlow {
            xon_xoff: true,
            ..StreamFlow::default()
        }
    }

    /// True on a circuit with congestion control.
    pub fn uses_xon_xoff(&self) -> bool {
        self.xon_xoff
    }

    /// May the stream send a DATA cell now?
    pub fn can_package(&self) -> bool {
        if self.xon_xoff {
            !self.xoff_received
        } else {
            self.package > 0
        }
    }

    /// Cells the stream may still package (no limit of its own under
    /// XON/XOFF: the circuit's congestion window decides).
    pub fn package_window(&self) -> i32 {
        match (self.xon_xoff, self.xoff_received) {
            (true, false) => i32::MAX,
            (true, true) => 0,
            (false, _) => self.package,
        }
    }

    /// A DATA cell of this stream was sent.
    pub fn data_sent(&mut self) {
        if !self.xon_xoff {
            self.package -= 1;
        }
    }

    /// A stream-level SENDME arrived.
    pub fn sendme_received(&mut self) -> Result<(), FlowError> {
        if self.xon_xoff {
            // C: "Congestion control got stream sendme".
            return Err(FlowError::UnexpectedSendme("stream (congestion control)"));
        }
        if self.package + STREAMWINDOW_INCREMENT > STREAMWINDOW_START {
            return Err(FlowError::UnexpectedSendme("stream"));
        }
        self.package += STREAMWINDOW_INCREMENT;
        Ok(())
    }

    /// A DATA cell of this stream arrived.
    pub fn data_received(&mut self) -> Result<(), FlowError> {
        if self.xon_xoff {
            return Ok(());
        }
        self.deliver -= 1;
        if self.deliver < 0 {
            return Err(FlowError::DeliverWindow("stream"));
        }
        Ok(())
    }

    /// How many stream-level SENDMEs to send now that the destination has
    /// taken the data (C Tor waits while the socket's buffer is too full);
    /// the window is credited for them.
    pub fn sendmes_due(&mut self) -> u32 {
        if self.xon_xoff {
            return 0;
        }
        let mut n = 0;
        while self.deliver <= STREAMWINDOW_START - STREAMWINDOW_INCREMENT {
            self.deliver += STREAMWINDOW_INCREMENT;
            n += 1;
        }
        n
    }

    /// `buffered` bytes wait for the destination after a DATA cell arrived
    /// at `now_us`: true if XOFF must be sent now (over `limit` for longer
    /// than the grace period). C's `flow_control_decide_xoff`.
    pub fn decide_xoff(&mut self, buffered: usize, limit: usize, now_us: u64) -> bool {
        if !self.xon_xoff {
            return false;
        }
        if buffered <= limit {
            self.grace_start_us = 0;
            return false;
        }
        if self.xoff_sent {
            return false;
        }
        if self.grace_start_us == 0 {
            self.grace_start_us = now_us.max(1);
            return false;
        }
        if now_us > self.grace_start_us + XOFF_GRACE_US {
            self.grace_start_us = 0;
            self.xoff_sent = true;
            return true;
        }
        false
    }

    /// The destination took bytes and `buffered` still wait: true if XON
    /// must be sent now (after our XOFF, once everything went out). C's
    /// `flow_control_decide_xon`, without the advisory rate (our XONs
    /// carry rate 0, "unlimited", as C's do before it measured one).
    pub fn decide_xon(&mut self, buffered: usize) -> bool {
        if self.xon_xoff && self.xoff_sent && buffered == 0 {
            self.xoff_sent = false;
            return true;
        }
        false
    }

    /// The client sent XOFF: true if reading stops now (C ignores an XOFF
    /// on a circuit without congestion control, or a second one).
    pub fn xoff_received(&mut self) -> bool {
        if !self.xon_xoff || self.xoff_received {
            return false;
        }
        self.xoff_received = true;
        true
    }

    /// The client sent XON with `body` at `now_us`: true if reading may
    /// resume. Its advisory rate limits the stream's reading from now on
    /// (C's `token_bucket_rw_adjust` on the edge: the bucket keeps what it
    /// holds up to the new size). A malformed XON, or one without
    /// congestion control, is ignored.
    pub fn xon_received(&mut self, body: &[u8], now_us: u64) -> bool {
        if !self.xon_xoff {
            return false;
        }
        let Some(kbps) = parse_xon(body) else {
            return false;
        };
        let rate = u64::from(kbps) * 1000;
        if rate == 0 || rate > i32::MAX as u64 {
            self.rate = XonRate::default();
        } else {
            let held = if self.rate.rate == 0 {
                rate
            } else {
                self.rate.refill(now_us);
                self.rate.tokens.min(rate)
            };
            self.rate = XonRate {
                rate,
                tokens: held,
                filled_us: now_us,
            };
        }
        std::mem::take(&mut self.xoff_received)
    }

    /// Bytes the stream may read from its socket at `now_us` under the
    /// XON's rate (`usize::MAX` without one).
    pub fn read_allowance(&mut self, now_us: u64) -> usize {
        if self.rate.rate == 0 {
            return usize::MAX;
        }
        self.rate.refill(now_us);
        usize::try_from(self.rate.tokens).unwrap_or(usize::MAX)
    }

    /// `n` bytes were read from the stream's socket.
    pub fn bytes_read(&mut self, n: usize) {
        if self.rate.rate != 0 {
            self.rate.tokens = self.rate.tokens.saturating_sub(n as u64);
        }
    }

    /// When a stream held back by the XON's rate has a cell's worth
    /// (`want` bytes) to read again (µs; `None` without a rate).
    pub fn rate_refill_at(&self, want: usize) -> Option<u64> {
        if self.rate.rate == 0 {
            return None;
        }
        let want = (want as u64).min(self.rate.rate);
        let missing = want.saturating_sub(self.rate.tokens);
        Some(self.rate.filled_us + (missing * 1_000_000).div_ceil(self.rate.rate))
    }
}

/// The XOFF body: version 0.
pub const XOFF_BODY: [u8; 1] = [0];
/// Our XON body: version 0, rate 0 kB/s (no advisory rate).
pub const XON_BODY: [u8; 5] = [0, 0, 0, 0, 0];

/// An XON body: version 0 and the advisory drain rate (kB/s).
/// [trunnel flow_control_cells.trunnel]
pub fn parse_xon(body: &[u8]) -> Option<u32> {
    match body {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
