//! The torrc options of the exit policy, with C Tor's syntax, defaults
//! and meaning: `ExitRelay` (0, 1, auto), `ExitPolicy` (repeatable comma
//! lists), `ExitPolicyRejectPrivate`, `ExitPolicyRejectLocalInterfaces`,
//! `ReducedExitPolicy`, `IPv6Exit`; and the exit's
//! `ServerDNSResolvConfFile`, `ServerDNSRandomizeCase`,
//! `ServerDNSDetectHijacking` and `ServerDNSTestAddresses`. The policy itself is built by
//! [`weft_dir::exit_policy`]. weft's exit is not complete yet (no
//! congestion control), so a configuration whose policy would accept
//! anything is refused with a clear message outside a test network (a
//! relay must never advertise an exit it cannot be); with
//! `TestingTorNetwork 1` it runs, with a warning.

use std::net::IpAddr;

use weft_dir::exit_policy::{ExitPolicy, ExitPolicyOptions, OwnAddresses};

/// The exit options as read so far.
#[derive(Debug, Clone, Default)]
pub struct ExitOptions {
    opts: ExitPolicyOptions,
    /// Malformed `ExitPolicy` values: an error for an exit, a warning
    /// for a non-exit (whose lines C Tor does not even parse).
    malformed: Vec<String>,
    /// `ServerDNSResolvConfFile`: the exit's name servers (default
    /// /etc/resolv.conf).
    pub resolv_conf: Option<std::path::PathBuf>,
    /// `ServerDNSRandomizeCase` (default 1): the 0x20 hack, as C Tor's
    /// evdns `randomize-case`. None: not set (the default).
    pub randomize_case: Option<bool>,
    /// `ServerDNSDetectHijacking` (default 1).
    pub detect_hijacking: Option<bool>,
    /// `ServerDNSTestAddresses` (a comma list; C's default four names).
    pub test_addresses: Option<Vec<String>>,
}

fn bool01(v: &str) -> Result<bool, String> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("expected 0 or 1, got '{v}'")),
    }
}

impl ExitOptions {
    /// Take `key` (lower case) if it is an exit option: Some(result), or
    /// None for other options.
    pub fn take(&mut self, key: &str, val: &str) -> Option<Result<(), String>> {
        let o = &mut self.opts;
        let r = (|| -> Result<(), String> {
            match key {
                "exitrelay" => {
                    o.exit_relay = match val.to_ascii_lowercase().as_str() {
                        "auto" => None,
                        "0" => Some(false),
                        "1" => Some(true),
                        _ => return Err(format!("expected 0, 1 or auto, got '{val}'")),
                    }
                }
                "exitpolicy" => {
                    if let Err(e) = weft_dir::exit_policy::parse_policy(val) {
                        self.malformed.push(e.to_string());
                    }
                    o.exit_policy.push(val.to_string());
                }
                "exitpolicyrejectprivate" => o.reject_private = bool01(val)?,
                "exitpolicyrejectlocalinterfaces" => o.reject_local_interfaces = bool01(val)?,
                "reducedexitpolicy" => o.reduced = bool01(val)?,
                "ipv6exit" => o.ipv6_exit = bool01(val)?,
                "serverdnsresolvconffile" => {
                    self.resolv_conf = Some(std::path::PathBuf::from(val));
                }
                "serverdnsrandomizecase" => self.randomize_case = Some(bool01(val)?),
                "serverdnsdetecthijacking" => self.detect_hijacking = Some(bool01(val)?),
                "serverdnstestaddresses" => {
                    self.test_addresses = Some(
                        val.split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect(),
                    )
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

    /// Build the policy for a relay advertising `address` (a malformed
    /// entry fails an exit, as in C Tor, and is a warning for a non-exit).
    /// Returns the policy and the warnings about it.
    pub fn finish(&self, address: IpAddr) -> Result<(ExitPolicy, Vec<String>), String> {
        // The machine's interface addresses, as C Tor's
        // get_interface_address6_list (only public ones end up rejected).
        let interfaces = if self.opts.reject_local_interfaces {
            if_addrs::get_if_addrs()
                .map_err(|e| format!("ExitPolicyRejectLocalInterfaces: listing interfaces: {e}"))?
                .into_iter()
                .map(|i| i.ip())
                .collect()
        } else {
            Vec::new()
        };
        self.finish_with(address, &interfaces)
    }

    /// [`Self::finish`] with the interface addresses given.
    pub fn finish_with(
        &self,
        address: IpAddr,
        interfaces: &[IpAddr],
    ) -> Result<(ExitPolicy, Vec<String>), String> {
        let own = OwnAddresses {
            advertised: vec![address],
            interfaces: interfaces.to_vec(),
            ..Default::default()
        };
        let (policy, mut warnings) =
            ExitPolicy::from_options(&self.opts, &own).map_err(|e| e.to_string())?;
        for m in &self.malformed {
            warnings.push(format!(
                "ExitPolicy: {m}; ignored, as stock tor ignores it, because this relay is not an exit"
            ));
        }
        Ok((policy, warnings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(lines: &[(&str, &str)]) -> Result<ExitPolicy, String> {
        let mut e = ExitOptions::default();
        for (k, v) in lines {
            e.take(k, v).expect("an exit option")?;
        }
        e.finish("198.51.100.7".parse().unwrap()).map(|(p, _)| p)
    }

    #[test]
    fn a_non_exit_configuration_is_accepted_and_publishes_reject_all() {
        for lines in [
            &[][..],
            &[("exitrelay", "0")][..],
            &[("exitrelay", "auto"), ("exitpolicy", "reject *:*")][..],
            &[("exitrelay", "0"), ("exitpolicy", "accept *:80")][..],
            &[("exitpolicy", "reject *4:*,reject *6:*")][..],
        ] {
            let p = finish(lines).unwrap_or_else(|e| panic!("{lines:?}: {e}"));
            assert_eq!(p.descriptor_lines(), ["reject *:*"], "{lines:?}");
        }
    }

    #[test]
    fn an_exit_configuration_makes_an_exit_as_in_c_tor() {
        for (lines, port) in [
            (&[("exitrelay", "1")][..], 80),
            (&[("exitpolicy", "accept *:443")][..], 443),
            (&[("reducedexitpolicy", "1")][..], 443),
            (&[("ipv6exit", "1")][..], 80),
        ] {
            let p = finish(lines).unwrap_or_else(|e| panic!("{lines:?}: {e}"));
            assert!(!p.is_reject_star(), "{lines:?}");
            assert!(p.allows("203.0.113.9".parse().unwrap(), port), "{lines:?}");
            assert!(
                !p.allows("10.0.0.1".parse().unwrap(), port),
                "private: {lines:?}"
            );
        }
    }

    #[test]
    fn an_exit_to_loopback_only_for_test_networks() {
        let mut e = ExitOptions::default();
        for (k, v) in [
            ("exitrelay", "1"),
            ("exitpolicyrejectprivate", "0"),
            ("exitpolicy", "accept 127.0.0.1:*, reject *:*"),
        ] {
            e.take(k, v).unwrap().unwrap();
        }
        let (p, w) = e.finish("127.0.0.1".parse().unwrap()).unwrap();
        assert!(p.allows("127.0.0.1".parse().unwrap(), 5000));
        assert!(!p.allows("127.0.0.2".parse().unwrap(), 5000));
        // C Tor's note about the default policy after `reject *:*`, and
        // nothing about being an exit.
        assert!(w.iter().all(|w| w.contains("redundant")), "{w:?}");
    }

    #[test]
    fn reject_local_interfaces_rejects_the_public_interface_addresses() {
        let mut e = ExitOptions::default();
        for (k, v) in [
            ("exitrelay", "1"),
            ("exitpolicyrejectlocalinterfaces", "1"),
            ("exitpolicy", "accept *:*"),
        ] {
            e.take(k, v).unwrap().unwrap();
        }
        let ifs: Vec<IpAddr> = vec!["203.0.113.5".parse().unwrap(), "10.1.1.1".parse().unwrap()];
        let (p, _) = e
            .finish_with("198.51.100.7".parse().unwrap(), &ifs)
            .unwrap();
        assert!(!p.allows("203.0.113.5".parse().unwrap(), 80));
        assert!(p.allows("203.0.113.6".parse().unwrap(), 80));
        assert!(
            p.descriptor_lines()
                .iter()
                .any(|l| l == "reject 203.0.113.5:*"),
            "{:?}",
            p.descriptor_lines()
        );
        // The real interfaces can be listed (loopback at least; private
        // ones are rejected by ExitPolicyRejectPrivate anyway).
        assert!(e.finish("198.51.100.7".parse().unwrap()).is_ok());
    }

    #[test]
    fn bad_values_are_named() {
        let mut e = ExitOptions::default();
        assert!(e.take("exitrelay", "yes").unwrap().is_err());
        assert!(e.take("ipv6exit", "2").unwrap().is_err());
        assert!(e.take("orport", "9001").is_none());
        let err = finish(&[("exitrelay", "1"), ("exitpolicy", "accept *:80x")]).unwrap_err();
        assert!(err.contains("malformed exit policy entry"), "{err}");
        // As stock tor: a non-exit's malformed line is not an error.
        let mut e = ExitOptions::default();
        e.take("exitrelay", "0").unwrap().unwrap();
        e.take("exitpolicy", "accept *:80x").unwrap().unwrap();
        let (p, w) = e.finish("198.51.100.7".parse().unwrap()).unwrap();
        assert!(p.is_reject_star());
        assert!(w.iter().any(|w| w.contains("accept *:80x")), "{w:?}");
    }
}
