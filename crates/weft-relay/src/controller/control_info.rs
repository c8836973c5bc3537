//! What GETINFO and GETCONF answer, read off the controller's state: the
//! keys stem's relay tools and nyx ask for (version, identity, address,
//! traffic, uptime, process, listeners, exit policy, our consensus entry
//! and descriptor, the name lists), with C Tor's formats. Keys about a
//! client side weft does not have answer as a stock relay with no client
//! activity does (empty circuit and stream lists).

use std::os::unix::fs::MetadataExt;

use base64::Engine;

use super::directory::DirState;
use super::Controller;
use crate::control::{session::event_names, version_string, ControlInfo, InfoError};
use weft_dir::consensus::RelayEntry;

/// C Tor's default exit policy (`exit-policy/default`).
const DEFAULT_EXIT_POLICY: &str = "reject *:25,reject *:119,reject *:135-139,reject *:445,reject *:563,reject *:1214,reject *:4661-4666,reject *:6346-6429,reject *:6699,reject *:6881-6999,accept *:*";

/// The GETINFO keys weft answers, with C Tor's descriptions.
const INFO_NAMES: &[(&str, &str)] = &[
    (
        "accounting/bytes",
        "Number of bytes read/written so far in the accounting interval.",
    ),
    (
        "accounting/bytes-left",
        "Number of bytes left to write/read so far in the accounting interval.",
    ),
    ("accounting/enabled", "Is accounting currently enabled?"),
    ("accounting/hibernating", "Are we hibernating or awake?"),
    (
        "accounting/interval-end",
        "Time when the accounting period ends.",
    ),
    (
        "accounting/interval-start",
        "Time when the accounting period starts.",
    ),
    (
        "accounting/interval-wake",
        "Time to wake up in this accounting period.",
    ),
    (
        "address",
        "IP address of this Tor host, if we can guess it.",
    ),
    ("bw-event-cache", "Cached BW events for a short interval."),
    (
        "circuit-status",
        "List of current circuits originating here.",
    ),
    ("config-file", "Current location of the \"torrc\" file."),
    (
        "config-text",
        "Return the text of the torrc as currently configured.",
    ),
    (
        "config/names",
        "List of configuration options, types, and documentation.",
    ),
    ("desc/id/*", "Server descriptor by hex ID."),
    ("dormant", "Are we dormant?"),
    (
        "events/names",
        "Events that the controller can ask for with SETEVENTS.",
    ),
    (
        "exit-policy/default",
        "The default value appended to the configured exit policy.",
    ),
    ("exit-policy/full", "The entire exit policy of onion router"),
    ("features/names", "What arguments can USEFEATURE take?"),
    ("fingerprint", "Get hash of server identity key."),
    (
        "info/names",
        "List of GETINFO options, types, and documentation.",
    ),
    ("ip-to-country/*", "Perform a GEOIP lookup"),
    (
        "net/listeners/*",
        "List of listeners of the given type (or, dir, control, socks, metrics).",
    ),
    (
        "ns/all",
        "Brief summary of router status (v3 directory format)",
    ),
    (
        "ns/id/*",
        "Brief summary of router status by ID (v3 directory format).",
    ),
    (
        "ns/name/*",
        "Brief summary of router status by nickname (v3 directory format).",
    ),
    ("orconn-status", "A list of current OR connections."),
    ("process/descriptor-limit", "File descriptor limit."),
    (
        "process/pid",
        "Process id belonging to the main tor process.",
    ),
    ("process/uid", "User id running the tor process."),
    (
        "process/user",
        "Username under which the tor process is running.",
    ),
    ("signal/names", "Supported signal names."),
    (
        "status/reachability-succeeded",
        "Whether we've found our ORPort and DirPort reachable.",
    ),
    (
        "status/reachability-succeeded/dir",
        "Whether we've found our DirPort reachable.",
    ),
    (
        "status/reachability-succeeded/or",
        "Whether we've found our ORPort reachable.",
    ),
    ("status/version/current", "Status of the current version."),
    ("stream-status", "List of current streams."),
    ("traffic/read", "Bytes read since the process was started."),
    (
        "traffic/written",
        "Bytes written since the process was started.",
    ),
    ("uptime", "Uptime of the Tor daemon in seconds."),
    ("version", "The current version of Tor."),
];

/// The controller's state as the ControlPort sees it.
pub(super) struct ControlView<'a> {
    pub c: &'a Controller,
    pub dir: &'a DirState,
}

/// The process owner's user name (from /etc/passwd, by the owner of
/// /proc/self).
fn process_user() -> Option<(u32, String)> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.parse().ok()?;
            (id == uid).then(|| name.to_string())
        })
        .next()
        .unwrap_or_default();
    Some((uid, name))
}

/// The soft limit on open files (/proc/self/limits).
fn descriptor_limit() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let l = limits.lines().find(|l| l.starts_with("Max open files"))?;
    l.split_whitespace().nth(3).map(str::to_string)
}

/// A consensus entry as C Tor's `ns/*` answers format it.
fn ns_entry(r: &RelayEntry, published: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let digest = r.descriptor_digest.unwrap_or([0; 20]);
    let mut o = format!(
        "r {} {} {} {} {} {} 0\n",
        r.nickname,
        b64.encode(r.rsa_identity),
        b64.encode(digest),
        published,
        r.address,
        r.or_port
    );
    for a in &r.other_addresses {
        o.push_str(&format!("a {a}\n"));
    }
    o.push_str(&format!("s {}\n", r.flags.join(" ")));
    o.push_str(&format!(
        "w Bandwidth={}{}\n",
        r.bandwidth,
        if r.bandwidth_measured {
            ""
        } else {
            " Unmeasured=1"
        }
    ));
    o
}

/// `orconn-status`: one line per OR connection, `$FP CONNECTED` for
/// relays and `address:port CONNECTED` for clients.
fn orconn_status(c: &Controller) -> String {
    c.conns
        .values()
        .map(|f| match f.peer {
            weft_proto::link::PeerKind::Relay { rsa_fp, .. } => {
                format!("${} CONNECTED\n", hex::encode_upper(rsa_fp))
            }
            _ => format!("{} CONNECTED\n", f.addr),
        })
        .collect()
}

impl ControlView<'_> {
    fn ns(&self, key: &str) -> Result<String, InfoError> {
        let Some(cons) = self.dir.consensus() else {
            return if key == "all" {
                Ok(String::new())
            } else {
                Err(InfoError::Unavailable("Consensus not available yet".into()))
            };
        };
        let published = humantime::format_rfc3339_seconds(cons.valid_after)
            .to_string()
            .replace('T', " ")
            .trim_end_matches('Z')
            .to_string();
        if key == "all" {
            return Ok(cons
                .relays
                .iter()
                .map(|r| ns_entry(r, &published))
                .collect());
        }
        let found = if let Some(id) = key.strip_prefix("id/") {
            let mut fp = [0u8; 20];
            let hex_id = id.trim_start_matches('$');
            let hex_id = hex_id.split(['~', '=']).next().unwrap_or("");
            if hex::decode_to_slice(hex_id, &mut fp).is_err() {
                return Err(InfoError::Unrecognized);
            }
            cons.find_relay(&fp)
        } else if let Some(nick) = key.strip_prefix("name/") {
            cons.relays
                .iter()
                .find(|r| r.nickname.eq_ignore_ascii_case(nick))
        } else {
            return Err(InfoError::Unrecognized);
        };
        match found {
            Some(r) => Ok(ns_entry(r, &published)),
            None => Err(InfoError::Unrecognized),
        }
    }

    /// `accounting/*`, as C answers (also with accounting off: enabled 0,
    /// nothing counted; the shutdown wait is "soft").
    fn accounting(&self, key: &str) -> Result<String, InfoError> {
        let exiting = self.c.exiting_at.is_some();
        let answer = match (&self.c.accounting, key) {
            (_, "hibernating") if exiting => Some("soft".into()),
            (Some(a), k) => a.getinfo(k),
            (None, "enabled") => Some("0".into()),
            (None, "hibernating") => Some("awake".into()),
            (None, "bytes" | "bytes-left") => Some("0 0".into()),
            (None, "interval-start" | "interval-wake" | "interval-end") => {
                Some(crate::accounting::iso_time(0))
            }
            _ => None,
        };
        answer.ok_or(InfoError::Unrecognized)
    }

    fn listeners(&self, kind: &str) -> Result<String, InfoError> {
        let cfg = &self.c.cfg;
        Ok(match kind {
            // Closed while hibernating or shutting down.
            "or" => self
                .c
                .or_listeners
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(" "),
            "metrics" => cfg
                .metrics_port
                .map(|a| format!("\"{a}\""))
                .unwrap_or_default(),
            "dir" | "socks" | "trans" | "natd" | "dns" | "extor" | "httptunnel" => String::new(),
            _ => return Err(InfoError::Unrecognized),
        })
    }
}

impl ControlInfo for ControlView<'_> {
    fn getinfo(&self, key: &str) -> Result<String, InfoError> {
        let c = self.c;
        let cfg = &c.cfg;
        Ok(match key {
            "version" => version_string(),
            "config-file" => cfg.torrc.path.display().to_string(),
            "config-text" => cfg.torrc.text(),
            "config/names" => cfg
                .torrc
                .options
                .iter()
                .map(|o| format!("{} {}\n", o.name, o.kind))
                .collect(),
            "config/defaults" => cfg
                .torrc
                .options
                .iter()
                .filter(|o| !o.default.is_empty())
                .map(|o| format!("{} {}\n", o.name, o.default))
                .collect(),
            "fingerprint" => c.keys.fingerprint_hex(),
            // C: 551 until the address is known.
            "address" | "address/v4" if cfg.advertised.ip().is_unspecified() => {
                return Err(InfoError::Unavailable("Address unknown".into()))
            }
            "address" | "address/v4" => cfg.advertised.ip().to_string(),
            "address/v6" => cfg
                .ipv6_or_port
                .map(|(_, a)| a.ip().to_string())
                .ok_or(InfoError::Unrecognized)?,
            "traffic/read" => c.bw.total_read.to_string(),
            "traffic/written" => c.bw.total_written.to_string(),
            "uptime" => c.started.elapsed().as_secs().to_string(),
            "process/pid" => std::process::id().to_string(),
            "process/uid" => process_user().map(|u| u.0.to_string()).unwrap_or_default(),
            "process/user" => process_user().map(|u| u.1).unwrap_or_default(),
            "process/descriptor-limit" => descriptor_limit().unwrap_or_default(),
            k if k.starts_with("accounting/") => return self.accounting(&k[11..]),
            "dormant" => "0".into(),
            "status/version/current" => "unknown".into(),
            // C's getinfo_helper_events; weft has no DirPort to test
            // (C 0.4.9 tests none either), so DIR is 1.
            "status/reachability-succeeded/or" => {
                u8::from(self.dir.orports_seem_reachable()).to_string()
            }
            "status/reachability-succeeded/dir" => "1".into(),
            "status/reachability-succeeded" => {
                format!("OR={} DIR=1", u8::from(self.dir.orports_seem_reachable()))
            }
            "circuit-status" | "stream-status" => String::new(),
            "orconn-status" => orconn_status(c),
            "exit-policy/default" => DEFAULT_EXIT_POLICY.into(),
            "exit-policy/full" => cfg.exit_policy.descriptor_lines().join("\n"),
            "events/names" => event_names(),
            "features/names" => "VERBOSE_NAMES EXTENDED_EVENTS".into(),
            "signal/names" => {
                "RELOAD HUP SHUTDOWN DUMP USR1 HALT TERM INT NEWNYM HEARTBEAT ACTIVE DORMANT".into()
            }
            "info/names" => INFO_NAMES
                .iter()
                .map(|(k, d)| format!("{k} -- {d}\n"))
                .collect(),
            k if k.starts_with("ip-to-country/") => "??".into(),
            k if k.starts_with("net/listeners/") => return self.listeners(&k[14..]),
            k if k.starts_with("ns/") => return self.ns(&k[3..]),
            k if k.starts_with("desc/id/") => {
                let want = k[8..].trim_start_matches('$').to_ascii_uppercase();
                match self.dir.own_documents() {
                    Some((desc, _)) if want == c.keys.fingerprint_hex() => desc,
                    _ => return Err(InfoError::Unrecognized),
                }
            }
            _ => return Err(InfoError::Unrecognized),
        })
    }

    fn getconf(&self, key: &str) -> Option<(String, Vec<String>)> {
        self.c.cfg.torrc.get(key)
    }
}
