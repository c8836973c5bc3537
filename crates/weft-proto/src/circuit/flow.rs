//! Fixed-window flow control at the last hop of a circuit, as C Tor 0.4.9
//! does it without congestion control: the circuit's package and deliver
//! windows (1000 cells, SENDME per 100) with authenticated SENDMEs
//! (proposal 289, version 1: the SENDME echoes the running digest of the
//! cell that completed the increment), and a stream's windows (500 cells,
//! SENDME per 50, unauthenticated). A peer that sends past a window or a
//! SENDME nobody asked for breaks the protocol: its circuit closes.
//! [tor-spec §7.3–7.4; proposal 289; C sendme.c, relay.c
//! connection_edge_package_raw_inbuf(), handle_relay_msg();
//! congestion_control_common.c circuit_sent_cell_for_sendme()]

use crate::relay::RELAY_DATA_MAX;

/// A circuit's windows start here (and may never exceed it).
pub const CIRCWINDOW_START: i32 = 1000;
/// Cells per circuit-level SENDME.
pub const CIRCWINDOW_INCREMENT: i32 = 100;
/// A stream's windows start here (and may never exceed it).
pub const STREAMWINDOW_START: i32 = 500;
/// Cells per stream-level SENDME.
pub const STREAMWINDOW_INCREMENT: i32 = 50;
/// The SENDME v1 tag: a tor1 running digest.
pub const TAG_LEN: usize = 20;
/// At most this many SENDMEs can be outstanding (window / increment).
const MAX_TAGS: usize = (CIRCWINDOW_START / CIRCWINDOW_INCREMENT) as usize;
/// Payload of DATA cells: the most a stream packages into one cell.
pub const DATA_MAX: usize = RELAY_DATA_MAX;

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

/// A SENDME's data, parsed: version 0 (empty) or 1 (the tag).
/// [proposal 289; trunnel sendme_cell]
pub fn parse_sendme(data: &[u8]) -> Result<Option<[u8; TAG_LEN]>, FlowError> {
    match data {
        [] | [0, ..] => Ok(None),
        [1, hi, lo, rest @ ..] => {
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            if len != TAG_LEN || rest.len() < len {
                return Err(FlowError::BadSendme(1));
            }
            let mut tag = [0u8; TAG_LEN];
            tag.copy_from_slice(&rest[..TAG_LEN]);
            Ok(Some(tag))
        }
        [v, ..] => Err(FlowError::BadSendme(*v)),
    }
}

/// A SENDME v1 body: version 1, length 20, the tag.
pub fn sendme_v1_body(tag: &[u8; TAG_LEN]) -> [u8; 3 + TAG_LEN] {
    let mut b = [0u8; 3 + TAG_LEN];
    b[0] = 1;
    b[1..3].copy_from_slice(&(TAG_LEN as u16).to_be_bytes());
    b[3..].copy_from_slice(tag);
    b
}

/// A circuit's windows at its last hop, with the digests of the cells
/// whose SENDMEs we wait for.
#[derive(Debug, Clone)]
pub struct CircuitFlow {
    package: i32,
    deliver: i32,
    /// Tags of sent cells a SENDME must echo, oldest first (a ring).
    tags: [[u8; TAG_LEN]; MAX_TAGS],
    first_tag: usize,
    n_tags: usize,
}

impl Default for CircuitFlow {
    fn default() -> Self {
        CircuitFlow {
            package: CIRCWINDOW_START,
            deliver: CIRCWINDOW_START,
            tags: [[0; TAG_LEN]; MAX_TAGS],
            first_tag: 0,
            n_tags: 0,
        }
    }
}

impl CircuitFlow {
    /// May we send a DATA cell now?
    pub fn can_package(&self) -> bool {
        self.package > 0
    }

    /// Cells we may still package before a SENDME.
    pub fn package_window(&self) -> i32 {
        self.package
    }

    /// The deliver window (for tests and logs).
    pub fn deliver_window(&self) -> i32 {
        self.deliver
    }

    /// True if the DATA cell about to be sent is the last of an increment:
    /// its digest must be kept for the SENDME that acknowledges it.
    pub fn next_data_needs_tag(&self) -> bool {
        self.package != CIRCWINDOW_START && (self.package - 1) % CIRCWINDOW_INCREMENT == 0
    }

    /// A DATA cell was sent; `tag` is its digest if
    /// [`next_data_needs_tag`](Self::next_data_needs_tag) said so.
    pub fn data_sent(&mut self, tag: Option<[u8; TAG_LEN]>) {
        if let Some(t) = tag {
            if self.n_tags < MAX_TAGS {
                self.tags[(self.first_tag + self.n_tags) % MAX_TAGS] = t;
                self.n_tags += 1;
            }
        }
        self.package -= 1;
    }

    /// A circuit-level SENDME arrived with `data`: check it against the
    /// oldest kept digest and open the package window. `accept_min` is the
    /// consensus's `sendme_accept_min_version` (default 0; 1 on the live
    /// network).
    pub fn sendme_received(&mut self, data: &[u8], accept_min: u8) -> Result<(), FlowError> {
        if self.package + CIRCWINDOW_INCREMENT > CIRCWINDOW_START {
            return Err(FlowError::UnexpectedSendme("circuit"));
        }
        let tag = parse_sendme(data)?;
        if accept_min > 1 {
            return Err(FlowError::BadSendme(accept_min));
        }
        if self.n_tags == 0 {
            return Err(FlowError::NoDigest);
        }
        let expected = self.tags[self.first_tag];
        self.first_tag = (self.first_tag + 1) % MAX_TAGS;
        self.n_tags -= 1;
        match tag {
            None if accept_min > 0 => return Err(FlowError::BadSendme(0)),
            None => {}
            Some(t) if t != expected => return Err(FlowError::TagMismatch),
            Some(_) => {}
        }
        self.package += CIRCWINDOW_INCREMENT;
        Ok(())
    }

    /// A DATA cell arrived. Ok(true) if a circuit-level SENDME is due now
    /// (its tag is the digest of this cell); the window is already
    /// credited for it.
    pub fn data_received(&mut self) -> Result<bool, FlowError> {
        self.deliver -= 1;
        if self.deliver < 0 {
            return Err(FlowError::DeliverWindow("circuit"));
        }
        if self.deliver <= CIRCWINDOW_START - CIRCWINDOW_INCREMENT {
            self.deliver += CIRCWINDOW_INCREMENT;
            return Ok(true);
        }
        Ok(false)
    }
}

/// A stream's windows.
#[derive(Debug, Clone, Copy)]
pub struct StreamFlow {
    package: i32,
    deliver: i32,
}

impl Default for StreamFlow {
    fn default() -> Self {
        StreamFlow {
            package: STREAMWINDOW_START,
            deliver: STREAMWINDOW_START,
        }
    }
}

impl StreamFlow {
    /// May the stream send a DATA cell now?
    pub fn can_package(&self) -> bool {
        self.package > 0
    }

    /// Cells the stream may still package.
    pub fn package_window(&self) -> i32 {
        self.package
    }

    /// A DATA cell of this stream was sent.
    pub fn data_sent(&mut self) {
        self.package -= 1;
    }

    /// A stream-level SENDME arrived.
    pub fn sendme_received(&mut self) -> Result<(), FlowError> {
        if self.package + STREAMWINDOW_INCREMENT > STREAMWINDOW_START {
            return Err(FlowError::UnexpectedSendme("stream"));
        }
        self.package += STREAMWINDOW_INCREMENT;
        Ok(())
    }

    /// A DATA cell of this stream arrived.
    pub fn data_received(&mut self) -> Result<(), FlowError> {
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
        let mut n = 0;
        while self.deliver <= STREAMWINDOW_START - STREAMWINDOW_INCREMENT {
            self.deliver += STREAMWINDOW_INCREMENT;
            n += 1;
        }
        n
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
            f.data_sent(t);
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
            f.sendme_received(&sendme_v1_body(t), 1).unwrap();
        }
        assert_eq!(f.package_window(), 1000);
    }

    #[test]
    fn a_wrong_or_missing_or_v0_sendme_is_refused() {
        let mut f = CircuitFlow::default();
        let mut i = 0;
        // Nothing sent: no SENDME may come.
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(1)), 0),
            Err(FlowError::UnexpectedSendme("circuit"))
        );
        let kept = send(&mut f, 200, &mut i);
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&tag(0xEE)), 0),
            Err(FlowError::TagMismatch)
        );
        // v0 only where the consensus accepts it.
        assert_eq!(f.sendme_received(&[], 1), Err(FlowError::BadSendme(0)));
        assert_eq!(f.package_window(), 800);
        // Both tags were used up by the refused SENDMEs (as C pops them).
        assert_eq!(
            f.sendme_received(&sendme_v1_body(&kept[0]), 0),
            Err(FlowError::NoDigest)
        );
        assert_eq!(
            f.sendme_received(&[2, 0, 0], 0),
            Err(FlowError::BadSendme(2))
        );
        assert_eq!(
            f.sendme_received(&[1, 0, 19, 0, 0], 0),
            Err(FlowError::BadSendme(1))
        );
        let kept = send(&mut f, 100, &mut i);
        assert_eq!(kept.len(), 1);
        f.sendme_received(&[], 0).unwrap();
        assert_eq!(f.package_window(), 800);
    }

    #[test]
    fn sendme_v1_body_round_trips() {
        let b = sendme_v1_body(&tag(7));
        assert_eq!(&b[..3], &[1, 0, 20]);
        assert_eq!(parse_sendme(&b), Ok(Some(tag(7))));
        // Trailing bytes are allowed, as trunnel allows them.
        let mut long = b.to_vec();
        long.extend_from_slice(&[0; 10]);
        assert_eq!(parse_sendme(&long), Ok(Some(tag(7))));
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
}
