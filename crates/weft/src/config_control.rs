//! The torrc options of the ControlPort, with C Tor's syntax and meaning:
//! `ControlPort [addr:]port|unix:path` (a bare port listens on
//! 127.0.0.1; 0 turns it off), `ControlSocket`, `CookieAuthentication`,
//! `CookieAuthFile`, `CookieAuthFileGroupReadable`,
//! `HashedControlPassword`. One difference, for safety: a ControlPort
//! with no authentication method gets cookie authentication (C Tor would
//! let anyone who can connect control it), with a warning.

use std::net::SocketAddr;
use std::path::PathBuf;

use weft_crypto::control_auth::HashedPassword;
use weft_relay::context::{ControlListener, ControlSettings};

/// The ControlPort options as parsed so far.
#[derive(Debug, Clone, Default)]
pub struct ControlOptions {
    settings: ControlSettings,
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("expected 0 or 1, got '{v}'")),
    }
}

/// One `ControlPort` value: `None` for 0 (off).
fn parse_listener(v: &str) -> Result<Option<ControlListener>, String> {
    let mut toks = v.split_whitespace();
    let first = toks.next().ok_or("ControlPort needs a port")?;
    if let Some(flag) = toks.next() {
        return Err(format!("ControlPort flag '{flag}' is not supported"));
    }
    if let Some(path) = first.strip_prefix("unix:") {
        let path = path.trim_matches('"');
        if !path.starts_with('/') {
            return Err(format!(
                "ControlPort unix socket path '{path}' must be absolute"
            ));
        }
        return Ok(Some(ControlListener::Unix(PathBuf::from(path))));
    }
    if first.eq_ignore_ascii_case("auto") {
        return Err("ControlPort auto is not supported; give a port".into());
    }
    let addr = match first.parse::<u16>() {
        Ok(0) => return Ok(None),
        Ok(p) => SocketAddr::from(([127, 0, 0, 1], p)),
        Err(_) => first
            .parse::<SocketAddr>()
            .map_err(|_| format!("bad ControlPort '{first}'"))?,
    };
    if addr.port() == 0 {
        return Ok(None);
    }
    Ok(Some(ControlListener::Tcp(addr)))
}

impl ControlOptions {
    /// Take a ControlPort option (`key` lower-cased); `None` if `key` is
    /// not one.
    pub fn take(&mut self, key: &str, val: &str) -> Option<Result<(), String>> {
        let s = &mut self.settings;
        let r = (|| -> Result<(), String> {
            match key {
                "controlport" => {
                    if let Some(l) = parse_listener(val)? {
                        s.listeners.push(l);
                    }
                }
                "controlsocket" => {
                    if val != "0" {
                        if !val.starts_with('/') {
                            return Err(format!("ControlSocket '{val}' must be an absolute path"));
                        }
                        s.listeners.push(ControlListener::Unix(PathBuf::from(val)));
                    }
                }
                "cookieauthentication" => s.cookie_auth = parse_bool(val)?,
                "cookieauthfile" => s.cookie_file = Some(PathBuf::from(val)),
                "cookieauthfilegroupreadable" => {
                    s.cookie_group_readable = parse_bool(val)?;
                }
                "hashedcontrolpassword" => {
                    if HashedPassword::parse(val).is_none() {
                        return Err("Bad HashedControlPassword: wrong length or bad encoding (make one with weft --hash-password)".into());
                    }
                    s.hashed_passwords.push(val.to_string());
                }
                _ => return Err(String::new()),
            }
            Ok(())
        })();
        match r {
            Err(e) if e.is_empty() => None,
            r => Some(r),
        }
    }

    /// The settings, and what to warn about.
    pub fn finish(self) -> (ControlSettings, Vec<String>) {
        let mut s = self.settings;
        let mut warnings = Vec::new();
        if s.listeners.is_empty() {
            return (s, warnings);
        }
        if !s.cookie_auth && s.hashed_passwords.is_empty() {
            s.cookie_auth = true;
            warnings.push("ControlPort without CookieAuthentication or HashedControlPassword: weft turns on CookieAuthentication (C Tor would let anyone who can connect control the relay)".into());
        }
        for l in &s.listeners {
            if let ControlListener::Tcp(a) = l {
                if !a.ip().is_loopback() {
                    warnings.push(format!("ControlPort {a} accepts connections from a non-local address: the control protocol is not encrypted; listen on 127.0.0.1 and use ssh or a unix socket to reach it from elsewhere"));
                }
            }
        }
        (s, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[(&str, &str)]) -> Result<(ControlSettings, Vec<String>), String> {
        let mut o = ControlOptions::default();
        for (k, v) in lines {
            o.take(&k.to_ascii_lowercase(), v)
                .expect("a control option")?;
        }
        Ok(o.finish())
    }

    #[test]
    fn control_port_forms() {
        let (s, w) = parse(&[("ControlPort", "9051")]).unwrap();
        assert_eq!(
            s.listeners,
            vec![ControlListener::Tcp("127.0.0.1:9051".parse().unwrap())]
        );
        assert!(s.cookie_auth, "no method given: cookie turned on");
        assert_eq!(w.len(), 1);
        let (s, w) = parse(&[
            ("ControlPort", "unix:/run/weft/control"),
            ("ControlPort", "0.0.0.0:9051"),
            (
                "HashedControlPassword",
                "16:A69662735A265BAC602C01B03AE915B2705F1C8715ACD45E700AF749B5",
            ),
        ])
        .unwrap();
        assert_eq!(s.listeners.len(), 2);
        assert!(!s.cookie_auth);
        assert!(w[0].contains("non-local"), "{w:?}");
        let (s, _) = parse(&[("ControlPort", "0")]).unwrap();
        assert!(s.listeners.is_empty() && !s.cookie_auth);
        for (k, v, why) in [
            ("ControlPort", "auto", "not supported"),
            ("ControlPort", "9051 GroupWritable", "not supported"),
            ("ControlPort", "unix:relative", "absolute"),
            ("ControlPort", "localhost:x", "bad ControlPort"),
            (
                "HashedControlPassword",
                "16:00",
                "Bad HashedControlPassword",
            ),
            ("CookieAuthentication", "yes", "expected 0 or 1"),
        ] {
            let e = parse(&[(k, v)]).unwrap_err();
            assert!(e.contains(why), "{k} {v}: {e}");
        }
    }
}
