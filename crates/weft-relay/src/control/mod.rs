//! The ControlPort protocol (torspec control-spec), sans-IO: reading a
//! command's keyword and arguments ([`parse`]), one connection's state
//! machine — authentication, the commands weft answers, its event
//! subscriptions — ([`session`]), and the text of replies and events. The
//! sockets, the cookie file and the values GETINFO reports live in
//! `controller::control_port`, which asks for them through
//! [`session::ControlInfo`].
//!
//! weft speaks the control protocol of the stock tor it is tested against
//! ([`TOR_COMPAT_VERSION`]); `GETINFO version` says so and names weft
//! (`0.4.9.11 (weft-0.1.0)`), because controllers such as stem gate
//! commands and events on that version.

pub mod parse;
pub mod session;
#[cfg(test)]
mod tests;

pub use session::{AuthSettings, ControlInfo, InfoError, Output, Session, Signal};

/// The stock tor whose control protocol weft speaks.
pub const TOR_COMPAT_VERSION: &str = "0.4.9.11";

/// What `GETINFO version` and PROTOCOLINFO report.
pub fn version_string() -> String {
    format!("{TOR_COMPAT_VERSION} (weft-{})", env!("CARGO_PKG_VERSION"))
}

/// Longest command weft reads (C Tor's `MAX_COMMAND_LINE_LENGTH`).
pub const MAX_COMMAND_LEN: usize = 1024 * 1024;

/// Every event name stock tor 0.4.9 accepts in SETEVENTS, in its
/// `events/names` order.
pub const EVENT_NAMES: &[&str] = &[
    "CIRC",
    "CIRC_MINOR",
    "STREAM",
    "ORCONN",
    "BW",
    "DEBUG",
    "INFO",
    "NOTICE",
    "WARN",
    "ERR",
    "NEWDESC",
    "ADDRMAP",
    "DESCCHANGED",
    "NS",
    "STATUS_GENERAL",
    "STATUS_CLIENT",
    "STATUS_SERVER",
    "GUARD",
    "STREAM_BW",
    "CLIENTS_SEEN",
    "NEWCONSENSUS",
    "BUILDTIMEOUT_SET",
    "SIGNAL",
    "CONF_CHANGED",
    "CONN_BW",
    "CELL_STATS",
    "CIRC_BW",
    "TRANSPORT_LAUNCHED",
    "HS_DESC",
    "HS_DESC_CONTENT",
    "NETWORK_LIVENESS",
    "PT_LOG",
    "PT_STATUS",
];

/// The events weft emits; the others are accepted (as by a stock relay
/// that has nothing to say about them) and never sent. DEBUG and INFO are
/// among the latter: turning on tor's debug and info levels for a
/// controller would turn on every trace point on the workers' hot path.
pub const EVENTS_EMITTED: &[&str] = &["BW", "NOTICE", "WARN", "ERR", "SIGNAL"];

/// A set of subscribed events (bit i = `EVENT_NAMES[i]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventSet(u64);

impl EventSet {
    /// The index of an event name (case-insensitive).
    pub fn index(name: &str) -> Option<usize> {
        EVENT_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
    }

    /// Add an event by index.
    pub fn insert(&mut self, i: usize) {
        self.0 |= 1 << i;
    }

    /// Whether the named event is in the set.
    pub fn has(&self, name: &str) -> bool {
        Self::index(name).is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// Log severities as tor names them (least severe first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// debug
    Debug,
    /// info
    Info,
    /// notice
    Notice,
    /// warn
    Warn,
    /// err
    Err,
}

impl Severity {
    /// The event name of this severity.
    pub fn event_name(self) -> &'static str {
        match self {
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Notice => "NOTICE",
            Severity::Warn => "WARN",
            Severity::Err => "ERR",
        }
    }
}

/// One log message for the ControlPort's log events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its severity.
    pub severity: Severity,
    /// The message.
    pub message: String,
}

/// `650 BW <read> <written>`: bytes in the last second.
pub fn bw_event(read: u64, written: u64) -> String {
    format!("650 BW {read} {written}\r\n")
}

/// A log event; a message of several lines goes on one line.
pub fn log_event(sev: Severity, msg: &str) -> String {
    let one_line: String = msg
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    format!("650 {} {}\r\n", sev.event_name(), one_line.trim_end())
}

/// `650 SIGNAL <name>` after a signal was acted on.
pub fn signal_event(s: Signal) -> String {
    format!("650 SIGNAL {}\r\n", s.name())
}

/// Quote a string as C Tor's `esc_for_log` does (for PROTOCOLINFO's
/// COOKIEFILE).
pub fn quoted(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                o.push_str(&format!("\\{:03o}", c as u32));
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Fuzzing entry: `data` as a controller's commands (one per line, `+`
/// commands to their "." line), answered by one session with cookie and
/// password authentication and fixed GETINFO/GETCONF answers, until the
/// session closes. Must never panic.
pub fn fuzz_commands(data: &[u8]) {
    struct Fixed;
    impl ControlInfo for Fixed {
        fn getinfo(&self, key: &str) -> Result<String, InfoError> {
            match key {
                "version" => Ok(version_string()),
                "config-text" => Ok("Nickname a\n.b\n".into()),
                _ => Err(InfoError::Unrecognized),
            }
        }
        fn getconf(&self, key: &str) -> Option<(String, Vec<String>)> {
            key.eq_ignore_ascii_case("nickname")
                .then(|| ("Nickname".into(), vec!["a".into()]))
        }
    }
    let auth = AuthSettings {
        cookie: Some([0x42; 32]),
        cookie_path: "/x/control_auth_cookie".into(),
        passwords: weft_crypto::control_auth::HashedPassword::parse(
            "16:A69662735A265BAC602C01B03AE915B2705F1C8715ACD45E700AF749B5",
        )
        .into_iter()
        .collect(),
    };
    let text = String::from_utf8_lossy(data);
    let mut session = Session::new();
    let mut lines = text.split('\n');
    while let Some(first) = lines.next() {
        let mut cmd = first.to_string();
        if first.starts_with('+') {
            for l in lines.by_ref() {
                if l.trim_end_matches('\r') == "." {
                    break;
                }
                cmd.push('\n');
                cmd.push_str(l);
            }
        }
        let out = session.on_command(cmd.trim_end_matches('\r'), &auth, &Fixed);
        assert!(out.reply.ends_with("\r\n"), "reply without line end");
        if out.close {
            break;
        }
    }
}
