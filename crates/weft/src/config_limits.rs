//! The torrc options of the resource limits, with C Tor's syntax and
//! meaning: the DoS subsystem (`DoSCircuitCreation*`, `DoSConnection*`,
//! `DoSRefuseSingleHopClientRendezvous`: unset, `auto` or 0 defer to the
//! consensus), `MaxMemInQueues` (0: the default for this machine),
//! `MaxAdvertisedBandwidth` and `ConnLimit`. [C dos_options.inc, config.c]

use weft_relay::dos::{AutoBool, DosOptions};

/// C Tor's `ConnLimit` default.
pub const DEFAULT_CONN_LIMIT: u64 = 1000;

/// The parsed resource-limit options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitOptions {
    /// The DoS options.
    pub dos: DosOptions,
    /// MaxMemInQueues, bytes (None: C Tor's default for this machine).
    pub max_mem_in_queues: Option<u64>,
    /// MaxAdvertisedBandwidth, bytes/s.
    pub max_advertised_bandwidth: Option<u64>,
    /// ConnLimit.
    pub conn_limit: u64,
}

impl Default for LimitOptions {
    fn default() -> Self {
        LimitOptions {
            dos: DosOptions::default(),
            max_mem_in_queues: None,
            max_advertised_bandwidth: None,
            conn_limit: DEFAULT_CONN_LIMIT,
        }
    }
}

fn auto_bool(v: &str) -> Result<AutoBool, String> {
    match v.to_ascii_lowercase().as_str() {
        "auto" => Ok(AutoBool::Auto),
        "0" => Ok(AutoBool::Off),
        "1" => Ok(AutoBool::On),
        _ => Err(format!("expected 0, 1 or auto, got '{v}'")),
    }
}

/// A positive count; 0 means "use the consensus" (None).
fn count(v: &str) -> Result<Option<u32>, String> {
    let n: u32 = v
        .parse()
        .map_err(|_| format!("expected a whole number, got '{v}'"))?;
    Ok((n > 0).then_some(n))
}

/// A defense type: 0 (consensus), 1 (none) or 2 (refuse / close).
fn defense(v: &str) -> Result<Option<u32>, String> {
    match count(v)? {
        Some(n) if n > 2 => Err(format!("defense type must be 0, 1 or 2, got {n}")),
        n => Ok(n),
    }
}

/// A tor interval in seconds ([`crate::config_units::interval`]); 0:
/// consensus.
pub(crate) fn interval(v: &str) -> Result<Option<u32>, String> {
    let secs = crate::config_units::interval(v)? as u32;
    Ok((secs > 0).then_some(secs))
}

impl LimitOptions {
    /// Take option `key` (lower case) with value `val` if it is one of
    /// ours (None: not ours). `bytes` parses a tor byte quantity.
    pub fn take(
        &mut self,
        key: &str,
        val: &str,
        bytes: impl Fn(&str) -> Result<u64, String>,
    ) -> Option<Result<(), String>> {
        let d = &mut self.dos;
        let r = (|| -> Result<(), String> {
            match key {
                "doscircuitcreationenabled" => d.cc_enabled = auto_bool(val)?,
                "doscircuitcreationminconnections" => d.cc_min_concurrent = count(val)?,
                "doscircuitcreationrate" => d.cc_rate = count(val)?,
                "doscircuitcreationburst" => d.cc_burst = count(val)?,
                "doscircuitcreationdefensetype" => d.cc_defense = defense(val)?,
                "doscircuitcreationdefensetimeperiod" => d.cc_defense_time = interval(val)?,
                "dosconnectionenabled" => d.conn_enabled = auto_bool(val)?,
                "dosconnectionmaxconcurrentcount" => d.conn_max_concurrent = count(val)?,
                "dosconnectiondefensetype" => d.conn_defense = defense(val)?,
                "dosconnectionconnectrate" => d.conn_connect_rate = count(val)?,
                "dosconnectionconnectburst" => d.conn_connect_burst = count(val)?,
                "dosconnectionconnectdefensetimeperiod" => {
                    d.conn_connect_defense_time = interval(val)?
                }
                "dosrefusesinglehopclientrendezvous" => d.refuse_single_hop_rend = auto_bool(val)?,
                "dosstreamcreationenabled" => d.stream_enabled = auto_bool(val)?,
                "dosstreamcreationrate" => d.stream_rate = count(val)?,
                "dosstreamcreationburst" => d.stream_burst = count(val)?,
                "dosstreamcreationdefensetype" => {
                    d.stream_defense = match count(val)? {
                        Some(n) if n > 3 => {
                            return Err(format!("defense type must be 0, 1, 2 or 3, got {n}"))
                        }
                        n => n,
                    }
                }
                "maxmeminqueues" => {
                    let b = bytes(val)?;
                    self.max_mem_in_queues = (b > 0).then_some(b);
                }
                "maxadvertisedbandwidth" => {
                    let b = bytes(val)?;
                    if b < 76_800 {
                        return Err(format!(
                            "MaxAdvertisedBandwidth is {b} bytes/s; a relay needs at least 75 KBytes"
                        ));
                    }
                    self.max_advertised_bandwidth = Some(b);
                }
                "connlimit" => {
                    self.conn_limit = val.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("ConnLimit must be a positive number, got '{val}'")
                    })?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &str) -> Result<u64, String> {
        v.trim_end_matches(" MB")
            .parse::<u64>()
            .map(|n| n << 20)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn dos_options_parse_as_c_tor() {
        let mut o = LimitOptions::default();
        for (k, v) in [
            ("doscircuitcreationenabled", "1"),
            ("doscircuitcreationrate", "5"),
            ("doscircuitcreationburst", "0"),
            ("doscircuitcreationdefensetimeperiod", "2 hours"),
            ("dosconnectionenabled", "auto"),
            ("dosconnectiondefensetype", "1"),
            ("dosrefusesinglehopclientrendezvous", "0"),
            ("dosstreamcreationenabled", "1"),
            ("dosstreamcreationrate", "10"),
            ("dosstreamcreationdefensetype", "3"),
            ("maxmeminqueues", "100 MB"),
            ("connlimit", "2000"),
        ] {
            assert_eq!(o.take(k, v, bytes), Some(Ok(())), "{k} {v}");
        }
        assert_eq!(o.dos.cc_enabled, AutoBool::On);
        assert_eq!(o.dos.cc_rate, Some(5));
        assert_eq!(o.dos.cc_burst, None, "0 defers to the consensus");
        assert_eq!(o.dos.cc_defense_time, Some(7200));
        assert_eq!(o.dos.conn_enabled, AutoBool::Auto);
        assert_eq!(o.dos.conn_defense, Some(1));
        assert_eq!(o.dos.refuse_single_hop_rend, AutoBool::Off);
        assert_eq!(o.dos.stream_enabled, AutoBool::On);
        assert_eq!(o.dos.stream_rate, Some(10));
        assert_eq!(o.dos.stream_defense, Some(3));
        assert!(o
            .take("dosstreamcreationdefensetype", "4", bytes)
            .unwrap()
            .is_err());
        assert_eq!(o.max_mem_in_queues, Some(100 << 20));
        assert_eq!(o.conn_limit, 2000);
        assert_eq!(o.take("orport", "9001", bytes), None);
    }

    #[test]
    fn bad_values_are_refused() {
        let mut o = LimitOptions::default();
        for (k, v) in [
            ("doscircuitcreationenabled", "yes"),
            ("doscircuitcreationdefensetype", "3"),
            ("dosconnectionconnectrate", "-1"),
            ("dosconnectionconnectdefensetimeperiod", "1 fortnight"),
            ("maxadvertisedbandwidth", "0 MB"),
            ("connlimit", "0"),
        ] {
            assert!(matches!(o.take(k, v, bytes), Some(Err(_))), "{k} {v}");
        }
    }
}
