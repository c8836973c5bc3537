//! Connection padding against netflow records (proposal 251), as C Tor's
//! `channelpadding.c` does it on a relay: each open connection's padding
//! state (on by link protocol 5, switched by the peer's
//! PADDING_NEGOTIATE), what the connection was used for (as C's
//! `circuit_update_channel_usage`), the random idle time after which a
//! PADDING cell goes out, and the once-a-second decision
//! (`channelpadding_decide_to_pad_channel`). Sans-IO: the clock and the
//! RNG come in as arguments; the relay's circuit core runs it once a
//! second and queues the cell.
//! [C channelpadding.c, channeltls.c channel_tls_process_padding_negotiate_cell(),
//! relay.c circuit_update_channel_usage(); proposal 251]

use rand::Rng;

const MS: u64 = 1_000_000;
/// The housekeeping runs once a second; padding due before the next run
/// (plus C's 100 ms slack) is scheduled for its exact time.
const SCHEDULE_WITHIN_MS: i64 = 1000 + 100;
/// C's `DFLT_NETFLOW_INACTIVE_KEEPALIVE_MAX`: a deadline further away
/// than any consensus value means the clock jumped: pad now.
const KEEPALIVE_MAX_MS: i64 = 60_000;
/// The first link protocol that pads (C's
/// `MIN_LINK_PROTO_FOR_CHANNEL_PADDING`).
pub const MIN_LINK_PROTO: u16 = 5;

/// PADDING_NEGOTIATE commands. [padding-spec §2.2]
const COMMAND_STOP: u8 = 1;
const COMMAND_START: u8 = 2;

/// The consensus's padding parameters, clamped as C clamps them
/// (`channelpadding_new_consensus_params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaddingParams {
    /// `nf_ito_low` (ms, default 1500, 0–60000).
    pub ito_low_ms: u32,
    /// `nf_ito_high` (ms, default 9500, `nf_ito_low`–60000).
    pub ito_high_ms: u32,
    /// `nf_pad_before_usage` (default 1): pad connections that carry
    /// circuits before they carry user data.
    pub pad_before_usage: bool,
    /// `nf_pad_relays` (default 0): pad relay-to-relay connections too.
    pub pad_relays: bool,
    /// Circuit padding's parameters ([`crate::circpad`]).
    pub circ: crate::circpad::CircPadParams,
}

impl Default for PaddingParams {
    fn default() -> Self {
        PaddingParams {
            ito_low_ms: 1500,
            ito_high_ms: 9500,
            pad_before_usage: true,
            pad_relays: false,
            circ: Default::default(),
        }
    }
}

impl PaddingParams {
    /// From the consensus: `get(name, default, min, max)` is its clamped
    /// parameter.
    pub fn from_consensus(get: impl Fn(&str, i32, i32, i32) -> i32) -> PaddingParams {
        let low = get("nf_ito_low", 1500, 0, 60_000);
        let high = get("nf_ito_high", 9500, low, 60_000);
        PaddingParams {
            ito_low_ms: low.max(0) as u32,
            ito_high_ms: high.max(low).max(0) as u32,
            pad_before_usage: get("nf_pad_before_usage", 1, 0, 1) == 1,
            pad_relays: get("nf_pad_relays", 0, 0, 1) == 1,
            circ: crate::circpad::CircPadParams::from_consensus(&get),
        }
    }
}

/// What a connection was used for (C's `channel_usage_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChannelUsage {
    /// No multi-hop circuit yet: never padded.
    NoCircuits,
    /// A multi-hop circuit was built over it (a RELAY_EARLY cell passed).
    FullCircuits,
    /// User data passed (a RELAY cell).
    UserTraffic,
}

/// A PADDING_NEGOTIATE cell the connection ignored (C logs it at
/// protocol-warning level and goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegotiateRefused {
    /// Link protocol below 5.
    OldLink,
    /// Too short, or an unknown command.
    Malformed,
    /// Version other than 0.
    UnknownVersion,
}

/// What the once-a-second look at a connection decided (C's
/// `channelpadding_decision_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadDecision {
    /// Padding is off for this connection, or it is not one to pad.
    WontPad,
    /// Not within a second of its padding time yet (or it has cells
    /// queued): look again next second.
    Later,
    /// Padding is scheduled already.
    AlreadyScheduled,
    /// Send PADDING at this time (ns on the workers' clock) unless the
    /// connection is active before then ([`ConnPadding::fire`]).
    At(u64),
}

/// One connection's padding state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPadding {
    /// Padding on: link protocol ≥ 5, unless the peer sent STOP.
    enabled: bool,
    /// Negotiated idle range (ms; 0: the consensus's).
    low_ms: u32,
    high_ms: u32,
    usage: ChannelUsage,
    /// C's `next_padding_time`: (the last activity it was drawn from, the
    /// deadline). Activity since makes it void (C zeroes it).
    next: Option<(u64, u64)>,
    /// A padding time within the second is scheduled (C's
    /// `pending_padding_callback`).
    scheduled: Option<u64>,
}

impl ConnPadding {
    /// A connection that opened with link protocol `link_version`.
    pub fn new(link_version: u16) -> ConnPadding {
        ConnPadding {
            enabled: link_version >= MIN_LINK_PROTO,
            low_ms: 0,
            high_ms: 0,
            usage: ChannelUsage::NoCircuits,
            next: None,
            scheduled: None,
        }
    }

    /// Padding is on (link protocol ≥ 5 and no STOP since).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// What the connection was used for so far.
    pub fn usage(&self) -> ChannelUsage {
        self.usage
    }

    /// A PADDING_NEGOTIATE cell's body (version, command, ito_low_ms,
    /// ito_high_ms) on a connection with link protocol `link_version`:
    /// START turns padding on with the peer's range (never below the
    /// consensus's low), STOP turns it off.
    /// [C channelpadding_update_padding_for_channel()]
    pub fn negotiate(
        &mut self,
        link_version: u16,
        body: &[u8],
        params: &PaddingParams,
    ) -> Result<bool, NegotiateRefused> {
        if link_version < MIN_LINK_PROTO {
            return Err(NegotiateRefused::OldLink);
        }
        let [version, command, l0, l1, h0, h1, ..] = *body else {
            return Err(NegotiateRefused::Malformed);
        };
        if command != COMMAND_START && command != COMMAND_STOP {
            return Err(NegotiateRefused::Malformed);
        }
        if version != 0 {
            return Err(NegotiateRefused::UnknownVersion);
        }
        self.enabled = command == COMMAND_START;
        self.low_ms = params
            .ito_low_ms
            .max(u32::from(u16::from_be_bytes([l0, l1])));
        self.high_ms = self.low_ms.max(u32::from(u16::from_be_bytes([h0, h1])));
        Ok(self.enabled)
    }

    /// A RELAY (`early` false) or RELAY_EARLY cell passed on a multi-hop
    /// circuit of this connection. [C circuit_update_channel_usage()]
    pub fn note_usage(&mut self, early: bool) {
        if early {
            self.usage = self.usage.max(ChannelUsage::FullCircuits);
        } else {
            self.usage = ChannelUsage::UserTraffic;
        }
    }

    /// A random idle time before padding, in ms (0: padding off in the
    /// consensus): `low + max(X1, X2)` with X uniform in `[0, high - low)`,
    /// which evens out the two ends' timers.
    /// [C channelpadding_get_netflow_inactive_timeout_ms()]
    pub fn timeout_ms(&self, params: &PaddingParams, rng: &mut impl Rng) -> u32 {
        let (mut low, mut high) = (params.ito_low_ms, params.ito_high_ms);
        if low == 0 && high == 0 {
            return 0;
        }
        if self.low_ms != 0 && self.high_ms != 0 {
            low = low.max(self.low_ms);
            high = high.max(self.high_ms);
        }
        if low >= high {
            return low;
        }
        let x1 = rng.random_range(0..high - low);
        let x2 = rng.random_range(0..high - low);
        low + x1.max(x2)
    }

    /// The once-a-second look (C's `channelpadding_decide_to_pad_channel`):
    /// `last_xfer_ns` is the connection's last cell read or written,
    /// `queued` whether it has cells waiting to be written, `client`
    /// whether the peer is a client (or a relay the consensus does not
    /// list).
    pub fn decide(
        &mut self,
        now_ns: u64,
        last_xfer_ns: u64,
        queued: bool,
        client: bool,
        params: &PaddingParams,
        rng: &mut impl Rng,
    ) -> PadDecision {
        match self.usage {
            ChannelUsage::NoCircuits => return PadDecision::WontPad,
            ChannelUsage::FullCircuits if !params.pad_before_usage => return PadDecision::WontPad,
            _ => {}
        }
        if self.scheduled.is_some() {
            return PadDecision::AlreadyScheduled;
        }
        if !self.enabled {
            return PadDecision::WontPad;
        }
        if queued {
            return PadDecision::Later;
        }
        if !client && !params.pad_relays {
            return PadDecision::WontPad;
        }
        let deadline = match self.next {
            Some((from, at)) if from == last_xfer_ns => at,
            _ => {
                let t = self.timeout_ms(params, rng);
                if t == 0 {
                    return PadDecision::WontPad;
                }
                let at = last_xfer_ns + u64::from(t) * MS;
                self.next = Some((last_xfer_ns, at));
                at
            }
        };
        let ms_till = (deadline as i64 - now_ns as i64) / MS as i64;
        if !(0..=KEEPALIVE_MAX_MS).contains(&ms_till) {
            // A clock jump, or housekeeping ran late: pad now.
            self.scheduled = Some(now_ns);
            return PadDecision::At(now_ns);
        }
        if ms_till < SCHEDULE_WITHIN_MS {
            self.scheduled = Some(deadline);
            return PadDecision::At(deadline);
        }
        PadDecision::Later
    }

    /// The time scheduled for padding came: true if the PADDING cell goes
    /// out (nothing was read or written since the deadline was drawn and
    /// nothing waits to be written). Either way the deadline is spent.
    /// [C channelpadding_send_padding_cell_for_callback()]
    pub fn fire(&mut self, last_xfer_ns: u64, queued: bool) -> bool {
        self.scheduled = None;
        let idle = matches!(self.next, Some((from, _)) if from == last_xfer_ns);
        self.next = None;
        idle && !queued
    }

    /// The state to carry to another worker: negotiation and usage kept,
    /// nothing scheduled (the new worker decides within a second).
    pub fn moved(&self) -> ConnPadding {
        ConnPadding {
            scheduled: None,
            next: None,
            ..*self
        }
    }

    /// The padding time scheduled, if any.
    pub fn scheduled(&self) -> Option<u64> {
        self.scheduled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const S: u64 = 1_000_000_000;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    fn used(link: u16) -> ConnPadding {
        let mut p = ConnPadding::new(link);
        p.note_usage(true);
        p
    }

    #[test]
    fn timeouts_fall_in_cs_range_and_lean_high_as_max_of_two_draws() {
        let params = PaddingParams::default();
        let p = ConnPadding::new(5);
        let mut r = rng();
        let draws: Vec<u32> = (0..20_000).map(|_| p.timeout_ms(&params, &mut r)).collect();
        assert!(draws.iter().all(|&t| (1500..9500).contains(&t)));
        let mean = draws.iter().map(|&t| f64::from(t)).sum::<f64>() / draws.len() as f64;
        // low + E[max(X1, X2)] = 1500 + 2/3 · 8000 ≈ 6833 (C's table:
        // Exp[max(X,X)] for R = 8000 is 5332.8).
        assert!((mean - 6833.0).abs() < 80.0, "mean {mean}");
    }

    #[test]
    fn consensus_parameters_are_clamped_as_c_clamps_them() {
        let p = PaddingParams::from_consensus(|name, d, min, max| {
            let v = match name {
                "nf_ito_low" => 5000,
                "nf_ito_high" => 1000,
                _ => d,
            };
            v.clamp(min, max)
        });
        assert_eq!((p.ito_low_ms, p.ito_high_ms), (5000, 5000));
        let off = PaddingParams {
            ito_low_ms: 0,
            ito_high_ms: 0,
            ..PaddingParams::default()
        };
        assert_eq!(ConnPadding::new(5).timeout_ms(&off, &mut rng()), 0);
        let fixed = PaddingParams {
            ito_low_ms: 3000,
            ito_high_ms: 3000,
            ..PaddingParams::default()
        };
        assert_eq!(ConnPadding::new(5).timeout_ms(&fixed, &mut rng()), 3000);
    }

    #[test]
    fn negotiation_follows_channelpadding_update_padding_for_channel() {
        let params = PaddingParams::default();
        let mut p = ConnPadding::new(5);
        assert!(p.enabled());
        // STOP (reduced padding or ConnectionPadding 0 at the client).
        assert_eq!(p.negotiate(5, &[0, 1, 0, 0, 0, 0], &params), Ok(false));
        assert!(!p.enabled());
        // START with a range below the consensus low: raised to it.
        let body = [0, 2, 0x03, 0xe8, 0x27, 0x10]; // 1000, 10000 ms
        assert_eq!(p.negotiate(5, &body, &params), Ok(true));
        assert_eq!((p.low_ms, p.high_ms), (1500, 10_000));
        let mut r = rng();
        for _ in 0..1000 {
            assert!((1500..10_000).contains(&p.timeout_ms(&params, &mut r)));
        }
        assert_eq!(
            p.negotiate(5, &[1, 1, 0, 0, 0, 0], &params),
            Err(NegotiateRefused::UnknownVersion)
        );
        assert_eq!(
            p.negotiate(5, &[0, 9, 0, 0, 0, 0], &params),
            Err(NegotiateRefused::Malformed)
        );
        assert_eq!(
            p.negotiate(5, &[0, 1], &params),
            Err(NegotiateRefused::Malformed)
        );
        assert_eq!(
            p.negotiate(4, &[0, 1, 0, 0, 0, 0], &params),
            Err(NegotiateRefused::OldLink)
        );
        assert!(p.enabled(), "refused cells change nothing");
        assert!(!ConnPadding::new(4).enabled(), "link 4 does not pad");
    }

    #[test]
    fn only_used_client_connections_are_padded_unless_relays_are_too() {
        let params = PaddingParams::default();
        let mut r = rng();
        let mut fresh = ConnPadding::new(5);
        assert_eq!(
            fresh.decide(0, 0, false, true, &params, &mut r),
            PadDecision::WontPad
        );
        let mut relay = used(5);
        assert_eq!(
            relay.decide(0, 0, false, false, &params, &mut r),
            PadDecision::WontPad
        );
        let all = PaddingParams {
            pad_relays: true,
            ..params
        };
        assert_ne!(
            relay.decide(0, 0, false, false, &all, &mut r),
            PadDecision::WontPad
        );
        let late = PaddingParams {
            pad_before_usage: false,
            ..params
        };
        let mut c = used(5);
        assert_eq!(
            c.decide(0, 0, false, true, &late, &mut r),
            PadDecision::WontPad
        );
        c.note_usage(false);
        assert_eq!(c.usage(), ChannelUsage::UserTraffic);
        assert_ne!(
            c.decide(0, 0, false, true, &late, &mut r),
            PadDecision::WontPad
        );
        let mut stopped = used(5);
        stopped
            .negotiate(5, &[0, 1, 0, 0, 0, 0], &params)
            .expect("STOP");
        assert_eq!(
            stopped.decide(0, 0, false, true, &params, &mut r),
            PadDecision::WontPad
        );
    }

    #[test]
    fn an_idle_connection_pads_once_per_drawn_gap_and_activity_voids_the_deadline() {
        let params = PaddingParams::default();
        let mut r = rng();
        let mut p = used(5);
        // Once a second from t = 1 s after the last activity at 0.
        let mut at = None;
        for sec in 1..=10 {
            match p.decide(sec * S, 0, false, true, &params, &mut r) {
                PadDecision::Later => {}
                PadDecision::At(t) => {
                    at = Some(t);
                    break;
                }
                d => panic!("{d:?}"),
            }
        }
        let at = at.expect("padding within 10 s");
        assert!((1500 * MS..9500 * MS).contains(&at), "{at}");
        assert_eq!(p.scheduled(), Some(at));
        assert_eq!(
            p.decide(at, 0, false, true, &params, &mut r),
            PadDecision::AlreadyScheduled
        );
        assert!(p.fire(0, false), "idle: pads");
        // Activity after the deadline was drawn: no padding at it.
        let mut q = used(5);
        let mut due = None;
        for sec in 1..=10 {
            if let PadDecision::At(t) = q.decide(sec * S, 0, false, true, &params, &mut r) {
                due = Some(t);
                break;
            }
        }
        assert!(due.is_some());
        assert!(!q.fire(due.unwrap() - MS, false), "a cell was read since");
        // Queued cells: no padding either.
        let mut w = used(5);
        assert_eq!(
            w.decide(S, 0, true, true, &params, &mut r),
            PadDecision::Later
        );
        // A deadline far in the past (housekeeping late) pads now.
        let mut late = used(5);
        assert_eq!(
            late.decide(100 * S, 0, false, true, &params, &mut r),
            PadDecision::At(100 * S)
        );
    }
}
