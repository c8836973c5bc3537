//! One control connection's state machine: PROTOCOLINFO, AUTHCHALLENGE
//! and AUTHENTICATE (cookie, SAFECOOKIE, HashedControlPassword) before
//! anything else; then GETINFO, GETCONF, SETEVENTS, SIGNAL, USEFEATURE
//! and QUIT. Replies, codes and closes follow C Tor 0.4.9's control.c,
//! control_auth.c and control_cmd.c. Other commands answer `510
//! Unrecognized command`, as stock tor answers what it does not know.

use subtle::ConstantTimeEq;
use weft_crypto::control_auth::{safecookie_hashes, HashedPassword, COOKIE_LEN};

use super::parse::{self, Command};
use super::{quoted, version_string, EventSet, EVENT_NAMES};

/// How controllers may authenticate.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// The cookie, when `CookieAuthentication` is on.
    pub cookie: Option<[u8; COOKIE_LEN]>,
    /// The cookie file's absolute path (for PROTOCOLINFO).
    pub cookie_path: String,
    /// `HashedControlPassword` values.
    pub passwords: Vec<HashedPassword>,
}

/// Why GETINFO has no value for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoError {
    /// weft does not know the key: `552 Unrecognized key`.
    Unrecognized,
    /// A known key without a value now: `551 <why>`.
    Unavailable(String),
}

/// Where GETINFO and GETCONF find their answers (the controller).
pub trait ControlInfo {
    /// The value of one GETINFO key.
    fn getinfo(&self, key: &str) -> Result<String, InfoError>;
    /// An option's canonical name and values (empty: unset and no
    /// default), or `None` when weft has no such option.
    fn getconf(&self, key: &str) -> Option<(String, Vec<String>)>;
}

/// A signal a controller asked for (control-spec §3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// RELOAD / HUP: re-read the torrc.
    Reload,
    /// SHUTDOWN / INT: stop cleanly.
    Shutdown,
    /// HALT / TERM: stop now.
    Halt,
    /// DUMP / USR1: log statistics.
    Dump,
    /// HEARTBEAT: log the heartbeat now.
    Heartbeat,
    /// NEWNYM: a client's; nothing to do on a relay.
    Newnym,
    /// ACTIVE: a relay is never dormant.
    Active,
    /// DORMANT: relays ignore it, as C Tor's do.
    Dormant,
}

impl Signal {
    /// The name the SIGNAL event uses.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Reload => "RELOAD",
            Signal::Shutdown => "SHUTDOWN",
            Signal::Halt => "HALT",
            Signal::Dump => "DUMP",
            Signal::Heartbeat => "HEARTBEAT",
            Signal::Newnym => "NEWNYM",
            Signal::Active => "ACTIVE",
            Signal::Dormant => "DORMANT",
        }
    }
}

/// What the I/O side does after a command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// Reply text (CRLF line ends).
    pub reply: String,
    /// Close the connection after the reply.
    pub close: bool,
    /// A signal to act on (after the reply is sent).
    pub signal: Option<Signal>,
}

/// One control connection.
#[derive(Debug, Default)]
pub struct Session {
    authenticated: bool,
    sent_protocolinfo: bool,
    safecookie_client_hash: Option<[u8; 32]>,
    /// Events this controller subscribed to.
    pub events: EventSet,
}

fn line(code: u16, text: &str) -> String {
    format!("{code} {text}\r\n")
}

fn fail(code: u16, text: &str) -> Output {
    Output {
        reply: line(code, text),
        close: true,
        signal: None,
    }
}

fn reply(code: u16, text: &str) -> Output {
    Output {
        reply: line(code, text),
        ..Output::default()
    }
}

impl Session {
    /// A new, unauthenticated connection.
    pub fn new() -> Session {
        Session::default()
    }

    /// Whether AUTHENTICATE succeeded.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Answer one command (its text without the final line end).
    pub fn on_command(
        &mut self,
        text: &str,
        auth: &AuthSettings,
        info: &dyn ControlInfo,
    ) -> Output {
        let cmd = Command::parse(text);
        let kw = cmd.keyword.as_str();
        if kw == "QUIT" {
            return fail(250, "closing connection");
        }
        if !self.authenticated {
            let initial = match kw {
                "PROTOCOLINFO" => !self.sent_protocolinfo,
                "AUTHENTICATE" | "AUTHCHALLENGE" => true,
                _ => false,
            };
            if !initial {
                return fail(514, "Authentication required.");
            }
        }
        match kw {
            "PROTOCOLINFO" => self.protocolinfo(&cmd, auth),
            "AUTHCHALLENGE" => self.authchallenge(&cmd, auth),
            "AUTHENTICATE" => self.authenticate(&cmd, auth),
            "GETINFO" => getinfo(&cmd, info),
            "GETCONF" => getconf(&cmd, info),
            "SETEVENTS" => self.setevents(&cmd),
            "SIGNAL" => signal(&cmd),
            "USEFEATURE" => usefeature(&cmd),
            _ => reply(510, &format!("Unrecognized command \"{}\"", cmd.keyword)),
        }
    }

    fn protocolinfo(&mut self, cmd: &Command, auth: &AuthSettings) -> Output {
        self.sent_protocolinfo = true;
        if let Some(bad) = cmd
            .args
            .split_whitespace()
            .find(|a| a.parse::<u64>().is_err())
        {
            return reply(513, &format!("No such version {}", quoted(bad)));
        }
        let mut methods = Vec::new();
        if auth.cookie.is_some() {
            methods.extend(["COOKIE", "SAFECOOKIE"]);
        }
        if !auth.passwords.is_empty() {
            methods.push("HASHEDPASSWORD");
        }
        if methods.is_empty() {
            methods.push("NULL");
        }
        let mut r = format!(
            "250-PROTOCOLINFO 1\r\n250-AUTH METHODS={}",
            methods.join(",")
        );
        if auth.cookie.is_some() {
            r.push_str(&format!(" COOKIEFILE={}", quoted(&auth.cookie_path)));
        }
        r.push_str(&format!(
            "\r\n250-VERSION Tor={}\r\n250 OK\r\n",
            quoted(&version_string())
        ));
        Output {
            reply: r,
            ..Output::default()
        }
    }

    fn authchallenge(&mut self, cmd: &Command, auth: &AuthSettings) -> Output {
        let Ok(args) = parse::args(&cmd.args) else {
            return fail(512, "Wrong number of arguments for AUTHCHALLENGE");
        };
        if !args
            .first()
            .is_some_and(|a| a.key.is_none() && a.value.eq_ignore_ascii_case("SAFECOOKIE"))
        {
            return fail(513, "AUTHCHALLENGE only supports SAFECOOKIE authentication");
        }
        let Some(cookie) = auth.cookie else {
            return fail(515, "Cookie authentication is disabled");
        };
        if args.len() != 2 {
            return fail(512, "Wrong number of arguments for AUTHCHALLENGE");
        }
        if args[1].key.is_some() {
            return fail(512, "AUTHCHALLENGE does not accept keyword arguments.");
        }
        let nonce = if args[1].quoted {
            args[1].value.as_bytes().to_vec()
        } else {
            match hex::decode(&args[1].value) {
                Ok(n) => n,
                Err(_) => return fail(513, "Invalid base16 client nonce"),
            }
        };
        let server_nonce: [u8; 32] = weft_crypto::random_array();
        let (server_hash, client_hash) = safecookie_hashes(&cookie, &nonce, &server_nonce);
        self.safecookie_client_hash = Some(client_hash);
        reply(
            250,
            &format!(
                "AUTHCHALLENGE SERVERHASH={} SERVERNONCE={}",
                hex::encode_upper(server_hash),
                hex::encode_upper(server_nonce)
            ),
        )
    }

    fn authenticate(&mut self, cmd: &Command, auth: &AuthSettings) -> Output {
        let Ok(args) = parse::args(&cmd.args) else {
            return fail(512, "Too many arguments to AUTHENTICATE.");
        };
        if args.len() > 1 {
            return fail(512, "Too many arguments to AUTHENTICATE.");
        }
        if args.first().is_some_and(|a| a.key.is_some()) {
            return fail(512, "AUTHENTICATE does not accept keyword arguments.");
        }
        let quoted_pw = args.first().is_some_and(|a| a.quoted);
        let secret: Vec<u8> = match args.first() {
            None => Vec::new(),
            Some(a) if a.quoted => a.value.as_bytes().to_vec(),
            Some(a) => match hex::decode(&a.value) {
                Ok(s) => s,
                Err(_) => {
                    return fail(
                        551,
                        "Invalid hexadecimal encoding.  Maybe you tried a plain text password?  If so, the standard requires that you put it in double quotes.",
                    )
                }
            },
        };
        let denied = |why: &str| fail(515, &format!("Authentication failed: {why}"));
        if let Some(expected) = self.safecookie_client_hash.take() {
            if secret.len() != 32 {
                return denied("Wrong length for safe cookie response.");
            }
            if !bool::from(expected.ct_eq(&secret)) {
                return denied("Safe cookie response did not match expected value.");
            }
            return self.accept();
        }
        if auth.cookie.is_none() && auth.passwords.is_empty() {
            return self.accept();
        }
        if let Some(cookie) = &auth.cookie {
            if secret.len() == COOKIE_LEN && bool::from(cookie.ct_eq(&secret[..])) {
                return self.accept();
            }
            if auth.passwords.is_empty() {
                return denied(if secret.len() != COOKIE_LEN {
                    "Wrong length on authentication cookie."
                } else {
                    "Authentication cookie did not match expected value."
                });
            }
        }
        if auth.passwords.iter().any(|p| p.matches(&secret)) {
            return self.accept();
        }
        if auth.cookie.is_some() {
            return denied(
                "Password did not match HashedControlPassword *or* authentication cookie.",
            );
        }
        denied(if quoted_pw {
            "Password did not match HashedControlPassword value from configuration"
        } else {
            "Password did not match HashedControlPassword value from configuration. Maybe you tried a plain text password? If so, the standard requires that you put it in double quotes."
        })
    }

    fn accept(&mut self) -> Output {
        self.authenticated = true;
        reply(250, "OK")
    }

    fn setevents(&mut self, cmd: &Command) -> Output {
        let mut set = EventSet::default();
        for name in cmd.args.split_whitespace() {
            if name.eq_ignore_ascii_case("EXTENDED") {
                continue;
            }
            match EventSet::index(name) {
                Some(i) => set.insert(i),
                None => return reply(552, &format!("Unrecognized event \"{name}\"")),
            }
        }
        self.events = set;
        reply(250, "OK")
    }
}

/// A value in a GETINFO reply: one line, or a `+` data block with
/// dot-stuffing.
fn info_line(key: &str, value: &str) -> String {
    if value.contains('\n') {
        let mut o = format!("250+{key}=\r\n");
        for l in value.trim_end_matches('\n').split('\n') {
            let l = l.trim_end_matches('\r');
            if l.starts_with('.') {
                o.push('.');
            }
            o.push_str(l);
            o.push_str("\r\n");
        }
        o.push_str(".\r\n");
        o
    } else {
        format!("250-{key}={value}\r\n")
    }
}

fn getinfo(cmd: &Command, info: &dyn ControlInfo) -> Output {
    let mut r = String::new();
    for key in cmd.args.split_whitespace() {
        match info.getinfo(key) {
            Ok(v) => r.push_str(&info_line(key, &v)),
            Err(InfoError::Unrecognized) => {
                return reply(552, &format!("Unrecognized key \"{key}\""))
            }
            Err(InfoError::Unavailable(why)) => return reply(551, &why),
        }
    }
    r.push_str("250 OK\r\n");
    Output {
        reply: r,
        ..Output::default()
    }
}

fn getconf(cmd: &Command, info: &dyn ControlInfo) -> Output {
    let mut lines = Vec::new();
    let mut unknown = Vec::new();
    for key in cmd.args.split_whitespace() {
        match info.getconf(key) {
            Some((name, values)) if values.is_empty() => lines.push(name),
            Some((name, values)) => lines.extend(values.into_iter().map(|v| format!("{name}={v}"))),
            None => unknown.push(format!("Unrecognized configuration key \"{key}\"")),
        }
    }
    let (code, items) = if unknown.is_empty() {
        (250, lines)
    } else {
        (552, unknown)
    };
    if items.is_empty() {
        return reply(250, "OK");
    }
    let mut r = String::new();
    for (i, l) in items.iter().enumerate() {
        let sep = if i + 1 == items.len() { ' ' } else { '-' };
        r.push_str(&format!("{code}{sep}{l}\r\n"));
    }
    Output {
        reply: r,
        ..Output::default()
    }
}

fn signal(cmd: &Command) -> Output {
    let name = cmd.args.split_whitespace().next().unwrap_or("");
    if cmd.args.split_whitespace().count() != 1 {
        return reply(512, "syntax error: SIGNAL takes one argument");
    }
    let s = match name.to_ascii_uppercase().as_str() {
        "RELOAD" | "HUP" => Signal::Reload,
        "SHUTDOWN" | "INT" => Signal::Shutdown,
        "HALT" | "TERM" => Signal::Halt,
        "DUMP" | "USR1" => Signal::Dump,
        "HEARTBEAT" => Signal::Heartbeat,
        "NEWNYM" => Signal::Newnym,
        "ACTIVE" => Signal::Active,
        "DORMANT" => Signal::Dormant,
        "DEBUG" | "USR2" | "CLEARDNSCACHE" => {
            return reply(
                551,
                &format!("weft does not act on signal {name} (see README: ControlPort)"),
            )
        }
        _ => return reply(552, &format!("Unrecognized signal code \"{name}\"")),
    };
    Output {
        reply: line(250, "OK"),
        close: false,
        signal: Some(s),
    }
}

fn usefeature(cmd: &Command) -> Output {
    for f in cmd.args.split_whitespace() {
        if !f.eq_ignore_ascii_case("VERBOSE_NAMES") && !f.eq_ignore_ascii_case("EXTENDED_EVENTS") {
            return reply(552, &format!("Unrecognized feature \"{f}\""));
        }
    }
    reply(250, "OK")
}

/// `events/names`: every event SETEVENTS accepts.
pub fn event_names() -> String {
    EVENT_NAMES.join(" ")
}
