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
mod tests {
    use super::*;

    fn tag(i: u8) -> [u8; TAG_LEN] {
        [i; TAG_LEN]
    }

    /// Send `n` DATA cells the way the exit does, keeping tags where asked;
    /// returns the tags kept.
    fn send(f: &mut CircuitFlow, n: usize, next: &mut u8) -> Vec<[u8; TAG_LEN]> {
        let mut kept = Vec::new();
        for _ in 0..n {
            assert!(f.can_package());
            *next = next.wrapping_add(1);
            let t = f.next_data_needs_tag().then(|| tag(*next));
            if let Some(t) = t {
                kept.push(t);
            }
            f.data_sent(t, 0);
        }
        kept
    }

    #[test]
    fn the_hundredth_cell_of_each_increment_is_remembered() {
        // C: no tag at the window's start; the tag of the cell that takes
        // the window from 901 to 900 is the first one expected back.
        let mut f = CircuitFlow::default();
        let mut i = 0;
        let kept = send(&mut f, 1000, &mut i);
        assert_eq!(kept.len(), 10);
        assert_eq!(kept[0], tag(100));
        assert_eq!(kept[9], tag(1000u32 as u8));
        assert!(!f.can_package());
        for t in &kept {
            f.sendme_received(&sendme_v1_body(t), 1, 0, false)
                .map(|_| ())
                .unwrap();
        }
        assert_eq!(f.package_window(), 1000);
    }

    #[test]
    fn a_wrong_or_missing_or_v0_sendme_is_refused() {
        let mut f = CircuitFlow::default();
        let mut i = 0;
        // Nothing sent: no SENDME may come.
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(1)), 0, 0, false)
                .map(|_| ()),
            Err(FlowError::UnexpectedSendme("circuit"))
        );
        let kept = send(&mut f, 200, &mut i);
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(0xEE)), 0, 0, false)
                .map(|_| ()),
            Err(FlowError::TagMismatch)
        );
        // v0 only where the consensus accepts it.
        assert_eq!(
            f.sendme_received(&[], 1, 0, false).map(|_| ()),
            Err(FlowError::BadSendme(0))
        );
        assert_eq!(f.package_window(), 800);
        // Both tags were used up by the refused SENDMEs (as C pops them).
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&kept[0]), 0, 0, false)
                .map(|_| ()),
            Err(FlowError::NoDigest)
        );
        assert_eq!(
            f.sendme_received(&[2, 0, 0], 0, 0, false).map(|_| ()),
            Err(FlowError::BadSendme(2))
        );
        assert_eq!(
            f.sendme_received(&[1, 0, 19, 0, 0], 0, 0, false)
                .map(|_| ()),
            Err(FlowError::BadSendme(1))
        );
        let kept = send(&mut f, 100, &mut i);
        assert_eq!(kept.len(), 1);
        f.sendme_received(&[], 0, 0, false).map(|_| ()).unwrap();
        assert_eq!(f.package_window(), 800);
    }

    #[test]
    fn sendme_v1_body_round_trips() {
        let b = sendme_v1_body(&tag(7));
        assert_eq!(&b[..3], &[1, 0, 20]);
        assert_eq!(parse_sendme(&b), Ok(Some((tag(7), 20))));
        // Trailing bytes are allowed, as trunnel allows them.
        let mut long = b.to_vec();
        long.extend_from_slice(&[0; 10]);
        assert_eq!(parse_sendme(&long), Ok(Some((tag(7), 20))));
        // A CGO tag: 16 bytes, kept zero-padded.
        let c = sendme_v1_cgo_body(&[7; 16]);
        assert_eq!(&c[..3], &[1, 0, 16]);
        assert_eq!(parse_sendme(&c), Ok(Some((cgo_tag_slot(&[7; 16]), 16))));
        // Any other length is refused.
        assert_eq!(
            parse_sendme(&[1, 0, 17, 0, 0]),
            Err(FlowError::BadSendme(1))
        );
    }

    #[test]
    fn a_cgo_hop_takes_only_sixteen_byte_tags() {
        let p = CcParams::default();
        for (cgo, body, ok) in [
            (true, sendme_v1_cgo_body(&[5; 16]).to_vec(), true),
            (
                true,
                sendme_v1_body(&cgo_tag_slot(&[5; 16])).to_vec(),
                false,
            ),
            (false, sendme_v1_cgo_body(&[5; 16]).to_vec(), false),
        ] {
            let mut f = CircuitFlow::with_congestion_control(p);
            if cgo {
                f = f.with_cgo_tags();
            }
            while !f.next_data_needs_tag() {
                f.data_sent(None, 0);
            }
            f.data_sent(Some(cgo_tag_slot(&[5; 16])), 0);
            let r = f.sendme_received(&body, 1, 10, false);
            assert_eq!(r.is_ok(), ok, "cgo {cgo}, body {body:?}: {r:?}");
        }
    }

    #[test]
    fn the_deliver_window_asks_for_a_sendme_every_hundred_cells() {
        let mut f = CircuitFlow::default();
        let due: Vec<usize> = (1..=1000)
            .filter(|_| f.data_received().unwrap())
            .collect::<Vec<_>>();
        // Credited at once, so the window never runs out for a peer that
        // keeps to it.
        assert_eq!(due.len(), 10);
        assert_eq!(f.deliver_window(), 1000);
    }

    #[test]
    fn data_past_the_window_breaks_the_protocol() {
        // A client that ignores our SENDMEs: we send none (as if the
        // deliver window were never credited).
        let mut f = StreamFlow::default();
        for _ in 0..500 {
            f.data_received().unwrap();
        }
        assert_eq!(f.data_received(), Err(FlowError::DeliverWindow("stream")));
        let mut c = CircuitFlow {
            deliver: 0,
            ..CircuitFlow::default()
        };
        assert_eq!(c.data_received(), Err(FlowError::DeliverWindow("circuit")));
    }

    #[test]
    fn stream_windows_follow_c_tor() {
        let mut f = StreamFlow::default();
        assert_eq!(
            f.sendme_received(),
            Err(FlowError::UnexpectedSendme("stream"))
        );
        for _ in 0..500 {
            assert!(f.can_package());
            f.data_sent();
        }
        assert!(!f.can_package());
        f.sendme_received().unwrap();
        assert_eq!(f.package_window(), 50);
        for _ in 0..49 {
            f.data_received().unwrap();
        }
        assert_eq!(f.sendmes_due(), 0);
        f.data_received().unwrap();
        assert_eq!(f.sendmes_due(), 1);
        for _ in 0..120 {
            f.data_received().unwrap();
        }
        assert_eq!(f.sendmes_due(), 2);
    }

    #[test]
    fn with_congestion_control_sendmes_come_every_sendme_inc_cells() {
        let p = CcParams::default();
        let mut f = CircuitFlow::with_congestion_control(p);
        // The deliver side: a SENDME per 31 cells.
        let due = (0..310).filter(|_| f.data_received().unwrap()).count();
        assert_eq!(due, 10);
        // The package side: cwnd 124, a tag on cells 31, 62, 93 and 124
        // (inflight 30, 61, ...), each timed.
        let mut i = 0;
        let kept = send(&mut f, 124, &mut i);
        assert_eq!(kept.len(), 4);
        assert!(!f.can_package());
        for (n, t) in kept.iter().enumerate() {
            let out = f
                .sendme_received(&sendme_v1_body(t), 1, 10_000 + n as u64, false)
                .unwrap();
            assert!(out.is_some());
        }
        // Slow start with no queue: the window grew.
        assert!(f.package_window() > 124, "{}", f.package_window());
        // The digests are still checked.
        let kept = send(&mut f, 31, &mut i);
        assert_eq!(kept.len(), 1);
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(0xEE)), 1, 20_000, false)
                .map(|_| ()),
            Err(FlowError::TagMismatch)
        );
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(0xEE)), 1, 20_000, false)
                .map(|_| ()),
            Err(FlowError::NoDigest)
        );
    }

    #[test]
    fn xon_xoff_replaces_the_stream_windows() {
        let mut f = StreamFlow::with_xon_xoff();
        for _ in 0..2000 {
            f.data_received().unwrap();
            f.data_sent();
        }
        assert_eq!(f.sendmes_due(), 0);
        assert!(f.can_package());
        assert!(f.sendme_received().is_err());
        // XOFF only after the grace period over the limit.
        assert!(!f.decide_xoff(1000, 500, 100));
        assert!(!f.decide_xoff(1000, 500, 100 + XOFF_GRACE_US));
        assert!(f.decide_xoff(1000, 500, 101 + XOFF_GRACE_US));
        assert!(!f.decide_xoff(1000, 500, 200 + XOFF_GRACE_US), "once");
        assert!(!f.decide_xon(10));
        assert!(f.decide_xon(0));
        assert!(!f.decide_xon(0));
        // Back under the limit: the grace period starts again.
        assert!(!f.decide_xoff(10, 500, 1));
        assert!(!f.decide_xoff(1000, 500, 1_000_000));
        // The client's XOFF stops reading until its XON.
        assert!(f.xoff_received());
        assert!(!f.xoff_received());
        assert!(!f.can_package());
        assert!(!f.xon_received(&[1, 0, 0, 0, 0], 0), "bad version ignored");
        assert!(!f.xon_received(&[0, 0], 0), "short ignored");
        assert!(f.xon_received(&XON_BODY, 0));
        assert!(f.can_package());
        assert_eq!(f.read_allowance(0), usize::MAX, "rate 0: no limit");
        // Without congestion control XON/XOFF are ignored.
        let mut w = StreamFlow::default();
        assert!(!w.xoff_received());
        assert!(!w.decide_xoff(1 << 20, 500, 1 << 30));
        assert!(w.can_package());
    }

    #[test]
    fn an_xons_rate_limits_reading_as_c_applies_it() {
        let mut f = StreamFlow::with_xon_xoff();
        assert_eq!(f.read_allowance(0), usize::MAX);
        assert_eq!(f.rate_refill_at(498), None);
        // 100 kbps_ewma: 100,000 bytes a second, a bucket as large, full.
        let t0 = 5_000_000;
        f.xon_received(&[0, 0, 0, 0, 100], t0);
        assert_eq!(f.read_allowance(t0), 100_000);
        f.bytes_read(100_000);
        assert_eq!(f.read_allowance(t0), 0);
        // A cell's worth in 4.98 ms; 10 ms give 1,000 bytes.
        assert_eq!(f.rate_refill_at(498), Some(t0 + 4_980));
        assert_eq!(f.read_allowance(t0 + 10_000), 1_000);
        // Never more than a second's worth.
        assert_eq!(f.read_allowance(t0 + 60_000_000), 100_000);
        // A lower rate keeps at most its own bucket; a rate of 0 or over
        // INT32_MAX bytes lifts the limit.
        f.xon_received(&[0, 0, 0, 0, 10], t0 + 60_000_000);
        assert_eq!(f.read_allowance(t0 + 60_000_000), 10_000);
        f.xon_received(&[0, 0, 0x30, 0, 0], t0 + 61_000_000);
        assert_eq!(
            f.read_allowance(t0 + 61_000_000),
            usize::MAX,
            "3 GB/s > INT32_MAX bytes"
        );
        f.xon_received(&[0, 0, 0, 0, 10], t0);
        f.xon_received(&XON_BODY, t0);
        assert_eq!(f.read_allowance(t0), usize::MAX);
        // Without congestion control an XON is ignored, rate and all.
        let mut w = StreamFlow::default();
        assert!(!w.xon_received(&[0, 0, 0, 0, 1], 0));
        assert_eq!(w.read_allowance(0), usize::MAX);
    }
}
