//! Options that typical relay torrcs carry and weft takes for tor's sake:
//! each value is checked as tor checks it (a bad one is an error, as in
//! tor), and where weft does something else than tor would, a warning
//! says what. So an operator's torrc written for tor starts weft, and
//! nothing is silently ignored.
//!
//! | option | weft |
//! |---|---|
//! | `SocksPort 0` | as tor (no SOCKS); any other value is refused: weft is a relay only |
//! | `DirPort`, `DirPortFrontPage` | no DirPort is opened or advertised: the directory is served over BEGIN_DIR |
//! | `SafeLogging` | 0, 1 or `relay`; weft's logs name no client address |
//! | `AvoidDiskWrites`, `HardwareAccel`, `NoExec` | booleans; weft writes little, uses the CPU's AES instructions, never executes a program |
//! | `DisableDebuggerAttachment` | boolean; weft does not change the process's dumpability (its unit's hardening applies) |
//! | `NumCPUs` | a count; weft's workers are `ConnectionThreads` |
//! | `OfflineMasterKey` | boolean; weft runs on the signing key without the master secret key whenever that is absent |
//! | `SigningKeyLifetime` | an interval of at least 2 days: new signing certificates last that long (C's default 30 days) |
//! | `KeepalivePeriod` | a positive interval: PADDING on a connection nothing was written to for that long (C's default 5 minutes) |
//! | `Sandbox` | boolean; 1: warned, weft has no seccomp sandbox (the systemd unit restricts it) |
//! | `HiddenServiceStatistics`, `EntryStatistics`, `ExitPortStatistics`, `ConnDirectionStatistics`, `CellStatistics` | booleans; 1 for the last four is warned (weft does not count them) |

/// What the accepted options leave to say.
#[derive(Debug, Default)]
pub(crate) struct AcceptedOptions {
    /// Warnings for the log (once each).
    pub(crate) warnings: Vec<String>,
    /// `SigningKeyLifetime`, seconds (None: C's 30 days).
    pub(crate) signing_key_lifetime: Option<u64>,
    /// `KeepalivePeriod`, seconds (None: C's 5 minutes).
    pub(crate) keepalive_period: Option<u64>,
}

fn boolean(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("{key}: expected 0 or 1, got '{v}'")),
    }
}

/// A port line's first word: `auto`, a port, or `ADDRESS:PORT` (tor's
/// `parse_port_config`); the port, 0 for `auto`.
fn port_word(key: &str, v: &str) -> Result<u16, String> {
    let first = v.split_whitespace().next().unwrap_or("");
    if first.eq_ignore_ascii_case("auto") {
        return Ok(0);
    }
    let port = match first.rsplit_once(':') {
        Some((addr, p)) => {
            let addr = addr.trim_start_matches('[').trim_end_matches(']');
            if addr.parse::<std::net::IpAddr>().is_err() {
                return Err(format!("{key}: bad address in '{first}'"));
            }
            p
        }
        None => first,
    };
    port.parse::<u16>()
        .map_err(|_| format!("{key}: bad port '{first}'"))
}

impl AcceptedOptions {
    fn warn(&mut self, w: String) {
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    /// Take option `key` (lower case) with value `val` if it is one of
    /// these (None: not one).
    pub(crate) fn take(&mut self, key: &str, val: &str) -> Option<Result<(), String>> {
        let r = match key {
            "socksport" => match port_word("SocksPort", val) {
                Ok(0) if !val.trim_start().starts_with("auto") => Ok(()),
                Ok(_) => Err(format!(
                    "SocksPort {val}: weft is a relay only and runs no SOCKS listener; say SocksPort 0 (or run a tor client beside it)"
                )),
                Err(e) => Err(e),
            },
            "dirport" => port_word("DirPort", val).map(|p| {
                if p != 0 {
                    self.warn(format!(
                        "DirPort {val}: weft opens and advertises no DirPort; it serves the directory over BEGIN_DIR (DirCache), as clients and relays fetch it"
                    ));
                }
            }),
            "dirportfrontpage" => {
                self.warn("DirPortFrontPage: weft has no DirPort to show it on".into());
                Ok(())
            }
            "safelogging" => match val {
                "0" | "1" | "relay" => Ok(()),
                _ => Err(format!("Unrecognized value '{val}' in SafeLogging")),
            },
            "avoiddiskwrites" | "hardwareaccel" | "noexec" | "offlinemasterkey"
            | "disabledebuggerattachment" => {
                boolean(key, val).map(|_| ())
            }
            "entrystatistics" | "exitportstatistics" | "conndirectionstatistics"
            | "cellstatistics" => boolean(key, val).map(|on| {
                if on {
                    self.warn(format!(
                        "{key} 1: weft does not count these statistics; its extra-info has none of them"
                    ));
                }
            }),
            "sandbox" => boolean(key, val).map(|on| {
                if on {
                    self.warn(
                        "Sandbox 1: weft has no seccomp sandbox; run it under its systemd unit, which restricts it (packaging/weft.service)".into(),
                    );
                }
            }),
            "numcpus" => val
                .parse::<u32>()
                .map(|_| ())
                .map_err(|_| format!("NumCPUs: expected a number, got '{val}'")),
            "signingkeylifetime" => crate::config_units::interval(val).and_then(|s| {
                if s < 2 * 86400 {
                    return Err("SigningKeyLifetime is too short.".into());
                }
                self.signing_key_lifetime = Some(s);
                Ok(())
            }),
            "keepaliveperiod" => crate::config_units::interval(val).and_then(|s| {
                if s < 1 {
                    return Err("KeepalivePeriod option must be positive.".into());
                }
                self.keepalive_period = Some(s);
                Ok(())
            }),
            _ => return None,
        };
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_lines_are_taken_and_said() {
        let mut o = AcceptedOptions::default();
        for (k, v) in [
            ("socksport", "0"),
            ("dirport", "9030"),
            ("dirport", "127.0.0.1:9091 NoAdvertise"),
            ("dirportfrontpage", "/etc/tor/tor-exit-notice.html"),
            ("safelogging", "relay"),
            ("avoiddiskwrites", "1"),
            ("numcpus", "4"),
            ("offlinemasterkey", "1"),
            ("signingkeylifetime", "30 days"),
            ("keepaliveperiod", "5 minutes"),
            ("sandbox", "0"),
            ("cellstatistics", "0"),
        ] {
            assert_eq!(o.take(k, v), Some(Ok(())), "{k} {v}");
        }
        assert_eq!(o.warnings.len(), 3, "{:?}", o.warnings);
        assert_eq!(o.signing_key_lifetime, Some(30 * 86400));
        assert!(o.warnings[0].contains("no DirPort"));
        for (k, v) in [
            ("socksport", "9050"),
            ("socksport", "auto"),
            ("dirport", "ninety"),
            ("safelogging", "2"),
            ("numcpus", "many"),
            ("signingkeylifetime", "1 day"),
            ("keepaliveperiod", "soon"),
            ("sandbox", "yes"),
        ] {
            assert!(o.take(k, v).unwrap().is_err(), "{k} {v}");
        }
        assert!(o.take("frobnicate", "1").is_none());
    }
}
