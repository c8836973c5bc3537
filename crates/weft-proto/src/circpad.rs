//! Circuit padding machines on the relay side (proposal 254, `Padding=2`),
//! as C Tor's `circuitpadding.c` runs them: the PADDING_NEGOTIATE cell a
//! client sends to this hop (parsed here, answered with
//! PADDING_NEGOTIATED), and the padding state of one circuit at this relay
//! ([`CircPadding`]): C's machine counter and its one machine slot, the
//! machine's state, state length, padding limits and the time its next
//! RELAY_DROP is due. The two machines are C's relay-side onion-service
//! setup machines (`circuitpadding_machines.c`:
//! `circpad_machine_relay_hide_intro_circuits`, index 0, and
//! `circpad_machine_relay_hide_rend_circuits`, index 1), written as data
//! ([`RELAY_MACHINES`]) for the generic transition rules.
//!
//! Sans-IO: the clock (ns) and the RNG come in as arguments; what the
//! caller must send comes out as [`PadAction`]s in order, and when the
//! next padding is due as [`CircPadding::due_ns`]. The caller reports every
//! non-padding relay cell it sends toward the client on a circuit with a
//! machine ([`CircPadding::nonpadding_sent`]), including the
//! PADDING_NEGOTIATED it was asked to send.
//! [C circuitpadding.c, circuitpadding_machines.c,
//! trunnel/circpad_negotiation.trunnel; padding-spec §3-4; proposal 254]

use rand::Rng;

/// Relay command PADDING_NEGOTIATE (client to a hop).
pub const PADDING_NEGOTIATE: u8 = 41;
/// Relay command PADDING_NEGOTIATED (the hop's answer).
pub const PADDING_NEGOTIATED: u8 = 42;
/// Negotiation command: stop a machine.
pub const COMMAND_STOP: u8 = 1;
/// Negotiation command: start a machine.
pub const COMMAND_START: u8 = 2;
/// PADDING_NEGOTIATED response: done.
pub const RESPONSE_OK: u8 = 1;
/// PADDING_NEGOTIATED response: refused.
pub const RESPONSE_ERR: u8 = 2;
/// C's `circpad_max_circ_queued_cells` default (`CIRCWINDOW_START_MAX`):
/// padding is not queued on a circuit with more cells waiting than this.
pub const MAX_CIRC_QUEUED_CELLS: usize = 1000;
/// The consensus's circuit padding parameters, clamped as C
/// (`circpad_new_consensus_params`). `circpad_global_allowed_cells` and
/// `circpad_global_max_padding_pct` (both 0, off, by default) are not
/// read: no global padding limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircPadParams {
    /// `circpad_padding_disabled` (default 0): schedule no padding.
    pub disabled: bool,
    /// `circpad_max_circ_queued_cells` (default 1000, 0–50000).
    pub max_queued_cells: u32,
}

impl Default for CircPadParams {
    fn default() -> Self {
        CircPadParams {
            disabled: false,
            max_queued_cells: MAX_CIRC_QUEUED_CELLS as u32,
        }
    }
}

impl CircPadParams {
    /// From the consensus: `get(name, default, min, max)` is its clamped
    /// parameter.
    pub fn from_consensus(get: &impl Fn(&str, i32, i32, i32) -> i32) -> CircPadParams {
        CircPadParams {
            disabled: get("circpad_padding_disabled", 0, 0, 1) == 1,
            max_queued_cells: get(
                "circpad_max_circ_queued_cells",
                MAX_CIRC_QUEUED_CELLS as i32,
                0,
                50 * MAX_CIRC_QUEUED_CELLS as i32,
            )
            .max(0) as u32,
        }
    }
}

/// The body length of both negotiation cells.
pub const NEGOTIATE_LEN: usize = 8;

/// A parsed PADDING_NEGOTIATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiate {
    /// [`COMMAND_START`] or [`COMMAND_STOP`].
    pub command: u8,
    /// The machine's index in C's list of relay machines.
    pub machine_type: u8,
    /// The client asks for a DROP in reply (C ignores it).
    pub echo_request: bool,
    /// The client's machine counter (0: any machine).
    pub machine_ctr: u32,
}

/// Why a PADDING_NEGOTIATE did not parse (C's trunnel checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegotiateError {
    /// Fewer than 8 bytes.
    Short(usize),
    /// A version other than 0.
    Version(u8),
    /// A command other than START or STOP.
    Command(u8),
    /// An echo_request other than 0 or 1.
    Echo(u8),
}

impl std::fmt::Display for NegotiateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NegotiateError::Short(n) => write!(f, "{n} bytes, 8 needed"),
            NegotiateError::Version(v) => write!(f, "version {v}, 0 expected"),
            NegotiateError::Command(c) => write!(f, "command {c}, neither START nor STOP"),
            NegotiateError::Echo(e) => write!(f, "echo_request {e}, 0 or 1 expected"),
        }
    }
}

/// Parse a PADDING_NEGOTIATE body. As C, the bytes after the first 8 are
/// ignored. [trunnel circpad_negotiate]
pub fn parse_negotiate(data: &[u8]) -> Result<Negotiate, NegotiateError> {
    let Some(b) = data.get(..NEGOTIATE_LEN) else {
        return Err(NegotiateError::Short(data.len()));
    };
    if b[0] != 0 {
        return Err(NegotiateError::Version(b[0]));
    }
    if b[1] != COMMAND_START && b[1] != COMMAND_STOP {
        return Err(NegotiateError::Command(b[1]));
    }
    if b[3] > 1 {
        return Err(NegotiateError::Echo(b[3]));
    }
    Ok(Negotiate {
        command: b[1],
        machine_type: b[2],
        echo_request: b[3] == 1,
        machine_ctr: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    })
}

/// A PADDING_NEGOTIATED body. [trunnel circpad_negotiated]
pub fn negotiated_body(command: u8, response: u8, machine_type: u8, ctr: u32) -> [u8; 8] {
    let c = ctr.to_be_bytes();
    [0, command, response, machine_type, c[0], c[1], c[2], c[3]]
}

/// C's padding events (`circpad_event_t`), in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    NonpaddingRecv = 0,
    NonpaddingSent = 1,
    PaddingSent = 2,
    LengthCount = 6,
}

/// A machine state: START, C's BURST (the machines' OBFUSCATE_CIRC_SETUP)
/// or END.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for the first non-padding cell sent.
    Start,
    /// Padding (C's `CIRCPAD_STATE_OBFUSCATE_CIRC_SETUP`).
    Obfuscate,
    /// Done: no more padding.
    End,
}

/// What an event does in a state (C's `next_state[event]`; no relay
/// machine uses CANCEL).
#[derive(Clone, Copy)]
enum Next {
    Ignore,
    To(State),
}

/// One state of a machine specification.
struct StateSpec {
    /// By event number (0..7); [`Next::Ignore`] for the rest.
    next: [Next; 7],
    /// Uniform length distribution (param1, param2), or none (infinite).
    length: Option<(f64, f64)>,
    /// Histogram bin edges in µs (the last bin is infinity) and tokens.
    edges_us: [u32; 2],
    tokens: [u32; 2],
}

/// A relay-side machine specification (C's `circpad_machine_spec_t`, the
/// fields these machines use).
pub struct MachineSpec {
    /// C's machine name.
    pub name: &'static str,
    /// Send PADDING_NEGOTIATED STOP when the machine reaches END.
    negotiate_end: bool,
    allowed_padding_count: u16,
    max_padding_percent: u8,
    /// START and OBFUSCATE_CIRC_SETUP.
    states: [StateSpec; 2],
}

const IGNORE7: [Next; 7] = [Next::Ignore; 7];

const fn with(mut n: [Next; 7], e: Event, to: State) -> [Next; 7] {
    n[e as usize] = Next::To(to);
    n
}

/// START: the first non-padding cell sent (the PADDING_NEGOTIATED)
/// starts the padding.
const START_STATE: StateSpec = StateSpec {
    next: with(IGNORE7, Event::NonpaddingSent, State::Obfuscate),
    length: None,
    edges_us: [0, 0],
    tokens: [0, 0],
};

/// C's relay machines, by machine number.
pub static RELAY_MACHINES: [MachineSpec; 2] = [
    // circpad_machine_relay_hide_intro_circuits: 7 to 10 DROPs, 1 to 10 ms
    // apart, each cell sent (padding or not) rescheduling the next; then
    // STOP to the client.
    MachineSpec {
        name: "relay_ip_circ",
        negotiate_end: true,
        allowed_padding_count: 10,
        max_padding_percent: 1,
        states: [
            START_STATE,
            StateSpec {
                next: with(
                    with(
                        with(IGNORE7, Event::LengthCount, State::End),
                        Event::PaddingSent,
                        State::Obfuscate,
                    ),
                    Event::NonpaddingSent,
                    State::Obfuscate,
                ),
                length: Some((7.0, 10.0)),
                edges_us: [1000, 10_000],
                tokens: [1000, 0],
            },
        ],
    },
    // circpad_machine_relay_hide_rend_circuits: one DROP within 1 ms of
    // the PADDING_NEGOTIATED, then END (no STOP).
    MachineSpec {
        name: "relay_rp_circ",
        negotiate_end: false,
        allowed_padding_count: 1,
        max_padding_percent: 1,
        states: [
            START_STATE,
            StateSpec {
                next: with(
                    with(IGNORE7, Event::PaddingSent, State::End),
                    Event::LengthCount,
                    State::End,
                ),
                length: Some((1.0, 2.0)),
                edges_us: [0, 1000],
                tokens: [1, 0],
            },
        ],
    },
];

/// What the caller must send, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadAction {
    /// A RELAY_DROP toward the client (unless more than
    /// [`MAX_CIRC_QUEUED_CELLS`] wait on the circuit).
    Drop,
    /// A PADDING_NEGOTIATED with this body, reported with
    /// [`CircPadding::nonpadding_sent`] just before it is queued (C's
    /// order: a zero-delay padding it causes goes first).
    Negotiated([u8; 8]),
}

/// What a PADDING_NEGOTIATE did (for counters and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegotiateOutcome {
    /// START: the machine runs (answered OK).
    Started(u8),
    /// START while the slot was taken (C: a bug warning; answered OK,
    /// nothing started).
    SlotBusy(u8),
    /// START of an unknown machine (answered ERR).
    Unknown(u8),
    /// STOP: the machine was freed (answered OK).
    Stopped(u8),
    /// STOP of a machine already gone (not answered).
    StopOld(u8),
    /// STOP of a machine never started here (not answered; C warns).
    StopUnknown(u8),
}

/// One running machine (C's `circpad_machine_runtime_t`, the fields these
/// machines use).
#[derive(Debug, Clone)]
struct Machine {
    num: u8,
    state: State,
    /// Padding cells left in this state (`u64::MAX`: no limit).
    state_length: u64,
    padding_sent: u16,
    nonpadding_sent: u16,
    ctr: u32,
    /// When the next DROP is due (ns), if scheduled.
    due_ns: Option<u64>,
}

/// The padding of one circuit at this relay: C's per-circuit machine
/// counter and its single relay machine slot (both relay machines use
/// index 0).
#[derive(Debug, Clone, Default)]
pub struct CircPadding {
    ctr: u32,
    machine: Option<Machine>,
    /// `circpad_padding_disabled` as of the last PADDING_NEGOTIATE (C
    /// reads it at each scheduling; a machine lives for milliseconds).
    disabled: bool,
}

impl CircPadding {
    /// The running machine's number and state, if any.
    pub fn machine(&self) -> Option<(u8, State)> {
        self.machine.as_ref().map(|m| (m.num, m.state))
    }

    /// When the next padding is due (ns), if scheduled.
    pub fn due_ns(&self) -> Option<u64> {
        self.machine.as_ref().and_then(|m| m.due_ns)
    }

    /// A PADDING_NEGOTIATE body from the client (the relay data, or the
    /// whole rest of the cell as C reads it). On `Err` nothing changed and
    /// nothing is answered (C drops it).
    /// [C circpad_handle_padding_negotiate()]
    pub fn negotiate(
        &mut self,
        data: &[u8],
        params: &CircPadParams,
        out: &mut Vec<PadAction>,
    ) -> Result<NegotiateOutcome, NegotiateError> {
        let n = parse_negotiate(data)?;
        self.disabled = params.disabled;
        let t = n.machine_type;
        let (outcome, response) = if n.command == COMMAND_STOP {
            if self.free_matching(t, n.machine_ctr) {
                (NegotiateOutcome::Stopped(t), Some(RESPONSE_OK))
            } else if n.machine_ctr <= self.ctr {
                (NegotiateOutcome::StopOld(t), None)
            } else {
                (NegotiateOutcome::StopUnknown(t), None)
            }
        } else if usize::from(t) >= RELAY_MACHINES.len() {
            (NegotiateOutcome::Unknown(t), Some(RESPONSE_ERR))
        } else if self.machine.is_some() {
            (NegotiateOutcome::SlotBusy(t), Some(RESPONSE_OK))
        } else {
            self.ctr = self.ctr.wrapping_add(1).max(1);
            self.machine = Some(Machine {
                num: t,
                state: State::Start,
                state_length: u64::MAX,
                padding_sent: 0,
                nonpadding_sent: 0,
                ctr: self.ctr,
                due_ns: None,
            });
            // C delivers a non-padding-received event here; no relay
            // machine acts on it.
            (NegotiateOutcome::Started(t), Some(RESPONSE_OK))
        };
        if let Some(r) = response {
            out.push(PadAction::Negotiated(negotiated_body(
                n.command,
                r,
                t,
                n.machine_ctr,
            )));
        }
        Ok(outcome)
    }

    /// The client's machine counter (C's `padding_machine_ctr`).
    pub fn counter(&self) -> u32 {
        self.ctr
    }

    /// Free the machine numbered `num` if `ctr` is 0 or its counter.
    /// [C free_circ_machineinfos_with_machine_num()]
    fn free_matching(&mut self, num: u8, ctr: u32) -> bool {
        match &self.machine {
            Some(m) if m.num == num && (ctr == 0 || m.ctr == ctr) => {
                self.machine = None;
                true
            }
            _ => false,
        }
    }

    /// A non-padding relay cell was sent toward the client on this
    /// circuit (relayed or originated here).
    /// [C circpad_cell_event_nonpadding_sent()]
    pub fn nonpadding_sent(&mut self, now_ns: u64, rng: &mut impl Rng, out: &mut Vec<PadAction>) {
        let Some(m) = self.machine.as_mut() else {
            return;
        };
        m.nonpadding_sent = m.nonpadding_sent.wrapping_add(1);
        if m.nonpadding_sent == u16::MAX {
            m.padding_sent /= 2;
            m.nonpadding_sent /= 2;
        }
        if !self.check_length(now_ns, rng, out) {
            self.transition(Event::NonpaddingSent, now_ns, rng, out);
        }
    }

    /// A non-padding relay cell arrived from the client (no relay machine
    /// acts on it). [C circpad_cell_event_nonpadding_received()]
    pub fn nonpadding_received(
        &mut self,
        now_ns: u64,
        rng: &mut impl Rng,
        out: &mut Vec<PadAction>,
    ) {
        if self.machine.is_some() {
            self.transition(Event::NonpaddingRecv, now_ns, rng, out);
        }
    }

    /// The timer fired at `now_ns`: if the padding scheduled for `due_ns`
    /// is still wanted, send it. [C circpad_send_padding_cell_for_callback()]
    pub fn fire(&mut self, due_ns: u64, now_ns: u64, rng: &mut impl Rng, out: &mut Vec<PadAction>) {
        match self.machine.as_mut() {
            Some(m) if m.due_ns == Some(due_ns) => m.due_ns = None,
            _ => return,
        }
        self.send_padding(now_ns, rng, out);
    }

    /// Count and send one padding cell, then its event.
    fn send_padding(&mut self, now_ns: u64, rng: &mut impl Rng, out: &mut Vec<PadAction>) {
        let Some(m) = self.machine.as_mut() else {
            return;
        };
        if m.state_length != u64::MAX && m.state_length > 0 {
            m.state_length -= 1;
        }
        m.padding_sent = m.padding_sent.wrapping_add(1);
        if m.padding_sent == u16::MAX {
            m.padding_sent /= 2;
            m.nonpadding_sent /= 2;
        }
        out.push(PadAction::Drop);
        // [C circpad_cell_event_padding_sent()]
        if !self.check_length(now_ns, rng, out) {
            self.transition(Event::PaddingSent, now_ns, rng, out);
        }
    }

    /// The state length ran out: the LENGTH_COUNT event. True if it
    /// changed the state. [C check_machine_token_supply()]
    fn check_length(&mut self, now_ns: u64, rng: &mut impl Rng, out: &mut Vec<PadAction>) -> bool {
        match &self.machine {
            Some(m) if m.state_length == 0 => self.transition(Event::LengthCount, now_ns, rng, out),
            _ => false,
        }
    }

    /// C's generic transition: true if the state changed.
    /// [C circpad_machine_spec_transition()]
    fn transition(
        &mut self,
        e: Event,
        now_ns: u64,
        rng: &mut impl Rng,
        out: &mut Vec<PadAction>,
    ) -> bool {
        let Some(m) = self.machine.as_mut() else {
            return false;
        };
        let spec = &RELAY_MACHINES[usize::from(m.num)];
        let here = match m.state {
            State::Start => &spec.states[0],
            State::Obfuscate => &spec.states[1],
            State::End => return false,
        };
        let Next::To(s) = here.next[e as usize] else {
            return false;
        };
        if s == m.state {
            return self.schedule(now_ns, rng, out);
        }
        m.state = s;
        // [C circpad_choose_state_length()]: a uniform draw, truncated.
        m.state_length = match s {
            State::Obfuscate => match spec.states[1].length {
                Some((a, b)) => {
                    let x: f64 = rng.random();
                    (a + x * (b - a)).max(0.0) as u64
                }
                None => u64::MAX,
            },
            _ => u64::MAX,
        };
        if s == State::End {
            // [C circpad_machine_spec_transitioned_to_end()]
            if spec.negotiate_end {
                let (num, ctr) = (m.num, m.ctr);
                self.machine = None;
                out.push(PadAction::Negotiated(negotiated_body(
                    COMMAND_STOP,
                    RESPONSE_OK,
                    num,
                    ctr,
                )));
            }
            return true;
        }
        self.schedule(now_ns, rng, out);
        true
    }

    /// Draw the next padding delay and schedule it (or send now).
    /// True if that changed the state. [C circpad_machine_schedule_padding()]
    fn schedule(&mut self, now_ns: u64, rng: &mut impl Rng, out: &mut Vec<PadAction>) -> bool {
        let Some(m) = self.machine.as_mut() else {
            return false;
        };
        let spec = &RELAY_MACHINES[usize::from(m.num)];
        let st = match m.state {
            State::Start => &spec.states[0],
            State::Obfuscate => &spec.states[1],
            State::End => return false,
        };
        if self.disabled {
            return false; // C: padding disabled, nothing scheduled.
        }
        // The machine's padding limit.
        if spec.max_padding_percent > 0 && m.padding_sent >= spec.allowed_padding_count {
            let total = u32::from(m.padding_sent) + u32::from(m.nonpadding_sent);
            if 100 * u32::from(m.padding_sent) / total > u32::from(spec.max_padding_percent) {
                // C returns before cancelling a scheduled padding.
                return false;
            }
        }
        m.due_ns = None;
        // [C circpad_machine_sample_delay()]: an immutable histogram.
        let total: u64 = st.tokens.iter().map(|&t| u64::from(t)).sum();
        if total == 0 {
            return false; // C: infinite delay, the INFINITY event (unused).
        }
        let choice = rng.random_range(0..total);
        let mut bin = 0;
        while st.tokens[bin] == 0 {
            bin += 1;
        }
        let mut weight = u64::from(st.tokens[bin]);
        while weight < choice {
            bin += 1;
            weight += u64::from(st.tokens[bin]);
        }
        if bin >= st.tokens.len() - 1 {
            return false; // the infinity bin: no padding.
        }
        let (lo, hi) = (
            u64::from(st.edges_us[bin]),
            st.edges_us
                .get(bin + 1)
                .map_or(u64::from(u32::MAX), |&e| u64::from(e)),
        );
        let delay_us = if lo < hi {
            rng.random_range(lo..hi)
        } else {
            lo
        };
        if m.state_length == 0 {
            return false;
        }
        if delay_us == 0 {
            let state = m.state;
            self.send_padding(now_ns, rng, out);
            return self.machine.as_ref().map(|m| m.state) != Some(state);
        }
        m.due_ns = Some(now_ns + delay_us * 1000);
        false
    }
}

#[cfg(test)]
#[path = "circpad_tests.rs"]
mod tests;
