//! The DoS subsystem's decisions, as C Tor's dos.c makes them, sans-IO:
//! the parameters (torrc wins where set, else the consensus, else C Tor's
//! defaults) and the table of client addresses with their concurrent
//! connections, connection-rate bucket and circuit-creation bucket.
//!
//! The controller owns the table (it accepts every connection and sees its
//! address first); workers only hold the addresses the table marked, and
//! refuse CREATE cells from them without asking anybody. Time is seconds on
//! the caller's clock. [C core/or/dos.c, dos.h, dos_options.inc]

use std::collections::HashMap;
use std::net::IpAddr;

/// A torrc DoS switch: `auto` (or unset) defers to the consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoBool {
    /// Use the consensus.
    #[default]
    Auto,
    /// Off.
    Off,
    /// On.
    On,
}

/// The DoS options of torrc (None: not set, the consensus decides).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DosOptions {
    /// DoSCircuitCreationEnabled.
    pub cc_enabled: AutoBool,
    /// DoSCircuitCreationMinConnections.
    pub cc_min_concurrent: Option<u32>,
    /// DoSCircuitCreationRate (circuits per second).
    pub cc_rate: Option<u32>,
    /// DoSCircuitCreationBurst.
    pub cc_burst: Option<u32>,
    /// DoSCircuitCreationDefenseType (1 none, 2 refuse the cell).
    pub cc_defense: Option<u32>,
    /// DoSCircuitCreationDefenseTimePeriod (seconds).
    pub cc_defense_time: Option<u32>,
    /// DoSConnectionEnabled.
    pub conn_enabled: AutoBool,
    /// DoSConnectionMaxConcurrentCount.
    pub conn_max_concurrent: Option<u32>,
    /// DoSConnectionDefenseType (1 none, 2 close).
    pub conn_defense: Option<u32>,
    /// DoSConnectionConnectRate (per second).
    pub conn_connect_rate: Option<u32>,
    /// DoSConnectionConnectBurst.
    pub conn_connect_burst: Option<u32>,
    /// DoSConnectionConnectDefenseTimePeriod (seconds).
    pub conn_connect_defense_time: Option<u32>,
    /// DoSRefuseSingleHopClientRendezvous.
    pub refuse_single_hop_rend: AutoBool,
    /// DoSStreamCreationEnabled.
    pub stream_enabled: AutoBool,
    /// DoSStreamCreationRate (streams per second per circuit).
    pub stream_rate: Option<u32>,
    /// DoSStreamCreationBurst.
    pub stream_burst: Option<u32>,
    /// DoSStreamCreationDefenseType (1 none, 2 refuse the stream, 3 close
    /// the circuit).
    pub stream_defense: Option<u32>,
}

/// The parameters in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DosParams {
    /// Circuit-creation mitigation on.
    pub cc_enabled: bool,
    /// Concurrent connections an address needs before it can be marked.
    pub cc_min_concurrent: u32,
    /// Circuit bucket refill per second.
    pub cc_rate: u32,
    /// Circuit bucket size.
    pub cc_burst: u32,
    /// Refuse CREATE cells of marked addresses (defense type 2).
    pub cc_refuse: bool,
    /// How long an address stays marked (plus up to half of it at random).
    pub cc_defense_time: u32,
    /// Connection mitigation on.
    pub conn_enabled: bool,
    /// Concurrent connections allowed per address.
    pub conn_max_concurrent: u32,
    /// Close refused connections (defense type 2).
    pub conn_close: bool,
    /// Connection bucket refill per second.
    pub conn_connect_rate: u32,
    /// Connection bucket size.
    pub conn_connect_burst: u32,
    /// How long an address that connects too fast stays refused.
    pub conn_connect_defense_time: u32,
    /// Silently drop ESTABLISH_RENDEZVOUS from one-hop clients.
    pub refuse_single_hop_rend: bool,
    /// Stream-creation mitigation on (an exit's BEGIN and RESOLVE).
    pub stream_enabled: bool,
    /// Stream bucket refill per second, per circuit.
    pub stream_rate: u32,
    /// Stream bucket size.
    pub stream_burst: u32,
    /// What happens to a stream over the limit: 1 nothing, 2 refused
    /// (END MISC, or a transient RESOLVED error), 3 its circuit closes.
    pub stream_defense: u32,
}

impl DosParams {
    /// torrc's values where set, else the consensus's (`param(name,
    /// default, min, max)`), else C Tor's defaults.
    pub fn resolve(o: &DosOptions, param: impl Fn(&str, i32, i32, i32) -> i32) -> DosParams {
        let auto = |a: AutoBool, name: &str| match a {
            AutoBool::On => true,
            AutoBool::Off => false,
            AutoBool::Auto => param(name, 0, 0, 1) != 0,
        };
        let num = |v: Option<u32>, name: &str, default: i32, min: i32| -> u32 {
            v.unwrap_or_else(|| param(name, default, min, i32::MAX).max(0) as u32)
        };
        DosParams {
            cc_enabled: auto(o.cc_enabled, "DoSCircuitCreationEnabled"),
            cc_min_concurrent: num(
                o.cc_min_concurrent,
                "DoSCircuitCreationMinConnections",
                3,
                1,
            ),
            cc_rate: num(o.cc_rate, "DoSCircuitCreationRate", 3, 1),
            cc_burst: num(o.cc_burst, "DoSCircuitCreationBurst", 90, 1),
            cc_refuse: num(o.cc_defense, "DoSCircuitCreationDefenseType", 2, 1) == 2,
            cc_defense_time: num(
                o.cc_defense_time,
                "DoSCircuitCreationDefenseTimePeriod",
                3600,
                0,
            ),
            conn_enabled: auto(o.conn_enabled, "DoSConnectionEnabled"),
            conn_max_concurrent: num(
                o.conn_max_concurrent,
                "DoSConnectionMaxConcurrentCount",
                100,
                1,
            ),
            conn_close: num(o.conn_defense, "DoSConnectionDefenseType", 2, 1) == 2,
            conn_connect_rate: num(o.conn_connect_rate, "DoSConnectionConnectRate", 20, 1),
            conn_connect_burst: num(o.conn_connect_burst, "DoSConnectionConnectBurst", 40, 1),
            conn_connect_defense_time: num(
                o.conn_connect_defense_time,
                "DoSConnectionConnectDefenseTimePeriod",
                24 * 3600,
                10,
            ),
            refuse_single_hop_rend: auto(
                o.refuse_single_hop_rend,
                "DoSRefuseSingleHopClientRendezvous",
            ),
            stream_enabled: auto(o.stream_enabled, "DoSStreamCreationEnabled"),
            stream_rate: num(o.stream_rate, "DoSStreamCreationRate", 100, 1),
            stream_burst: num(o.stream_burst, "DoSStreamCreationBurst", 300, 1),
            stream_defense: num(o.stream_defense, "DoSStreamCreationDefenseType", 2, 1).min(3),
        }
    }
}

impl Default for DosParams {
    fn default() -> Self {
        DosParams::resolve(&DosOptions::default(), |_, d, _, _| d)
    }
}

/// What one address did.
#[derive(Debug, Clone, Default)]
struct ClientStats {
    /// Open connections from it.
    concurrent: u32,
    /// Connection bucket.
    connect_tokens: u32,
    connect_refilled_s: u64,
    /// Refused connections until then (0: not marked).
    conn_marked_until: u64,
    /// Circuit bucket (None: never filled).
    circuit_tokens: Option<u32>,
    circuit_refilled_s: u64,
    /// Refused CREATE cells until then (0: not marked).
    cc_marked_until: u64,
}

/// The controller's answer to a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptVerdict {
    /// Take it.
    Accept,
    /// Close it: the address connects too fast (marked).
    RefuseRate,
    /// Close it: the address has too many connections open.
    RefuseConcurrent,
}

/// Counters for the heartbeat and the MetricsPort.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DosStats {
    /// Addresses marked for circuit creation.
    pub cc_marked_addrs: u64,
    /// CREATE cells refused (reported by workers).
    pub cc_rejected_cells: u64,
    /// Connections refused: too many concurrent.
    pub conn_rejected: u64,
    /// Connections refused: connecting too fast.
    pub conn_connect_rejected: u64,
    /// ESTABLISH_RENDEZVOUS from one-hop clients dropped (reported by
    /// workers).
    pub single_hop_refused: u64,
}

/// The table of client addresses (see the module docs).
#[derive(Debug, Default)]
pub struct ClientTable {
    /// std HashMap (SipHash, random key): addresses are chosen by peers.
    by_addr: HashMap<IpAddr, ClientStats>,
    /// Counters.
    pub stats: DosStats,
}

/// A random whole second in [1, max(1, half)], as C Tor's
/// `crypto_rand_int_range(1, period / 2)`.
fn jitter(period: u32, rand: u32) -> u64 {
    let half = (period / 2).max(2);
    u64::from(1 + rand % (half - 1))
}

impl ClientTable {
    /// Addresses tracked.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// True when no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// A connection from `ip` arrives: refuse it (connecting too fast, too
    /// many open) or count it. [C connection.c connection_handle_listener_read,
    /// dos_conn_addr_get_defense_type(), dos_new_client_conn()]
    pub fn on_accept(&mut self, p: &DosParams, ip: IpAddr, now_s: u64, rand: u32) -> AcceptVerdict {
        if p.conn_enabled {
            if let Some(s) = self.by_addr.get_mut(&ip) {
                if s.conn_marked_until >= now_s && p.conn_close {
                    self.stats.conn_connect_rejected += 1;
                    return AcceptVerdict::RefuseRate;
                }
                if s.conn_marked_until < now_s {
                    s.conn_marked_until = 0;
                }
                if s.concurrent > p.conn_max_concurrent && p.conn_close {
                    self.stats.conn_rejected += 1;
                    return AcceptVerdict::RefuseConcurrent;
                }
            }
        }
        let s = self.by_addr.entry(ip).or_default();
        s.concurrent += 1;
        if p.conn_enabled {
            // The connect bucket: a token bucket refilled by whole seconds.
            if s.connect_refilled_s == 0 {
                s.connect_tokens = p.conn_connect_burst;
                s.connect_refilled_s = now_s;
            } else if now_s > s.connect_refilled_s {
                let add =
                    (now_s - s.connect_refilled_s).saturating_mul(u64::from(p.conn_connect_rate));
                s.connect_tokens =
                    (u64::from(s.connect_tokens) + add).min(u64::from(p.conn_connect_burst)) as u32;
                s.connect_refilled_s = now_s;
            }
            s.connect_tokens = s.connect_tokens.saturating_sub(1);
            if s.connect_tokens == 0 && s.conn_marked_until == 0 {
                s.conn_marked_until = now_s
                    + u64::from(p.conn_connect_defense_time)
                    + jitter(p.conn_connect_defense_time, rand);
            }
        }
        AcceptVerdict::Accept
    }

    /// A counted connection from `ip` closed.
    pub fn on_close(&mut self, ip: IpAddr) {
        if let Some(s) = self.by_addr.get_mut(&ip) {
            s.concurrent = s.concurrent.saturating_sub(1);
        }
    }

    /// A CREATE cell from a client connection of `ip`: take a token; if the
    /// bucket is empty and the address has enough connections open, mark it
    /// (or keep it marked). Returns how long (seconds) the workers must
    /// refuse its CREATE cells, when that is new or extended by more than a
    /// minute. [C dos.c dos_cc_new_create_cell(), cc_stats_refill_bucket()]
    pub fn on_create(&mut self, p: &DosParams, ip: IpAddr, now_s: u64, rand: u32) -> Option<u64> {
        if !p.cc_enabled {
            return None;
        }
        let s = self.by_addr.entry(ip).or_default();
        let tokens = match s.circuit_tokens {
            None => p.cc_burst,
            Some(t) if now_s > s.circuit_refilled_s => {
                let add = (now_s - s.circuit_refilled_s).saturating_mul(u64::from(p.cc_rate));
                (u64::from(t) + add).min(u64::from(p.cc_burst)) as u32
            }
            // The clock went back: fill it, as C Tor does.
            Some(_) if now_s < s.circuit_refilled_s => p.cc_burst,
            Some(t) => t,
        };
        s.circuit_refilled_s = now_s;
        let tokens = tokens.saturating_sub(1);
        s.circuit_tokens = Some(tokens);
        if tokens == 0 && s.concurrent >= p.cc_min_concurrent {
            if s.cc_marked_until == 0 {
                self.stats.cc_marked_addrs += 1;
            }
            let until = now_s + u64::from(p.cc_defense_time) + jitter(p.cc_defense_time, rand);
            let tell = s.cc_marked_until < now_s || until > s.cc_marked_until + 60;
            s.cc_marked_until = until;
            if tell && p.cc_refuse {
                return Some(until - now_s);
            }
        }
        None
    }

    /// Forget addresses with nothing open and no mark in force.
    pub fn expire(&mut self, now_s: u64) {
        self.by_addr.retain(|_, s| {
            s.concurrent > 0 || s.conn_marked_until >= now_s || s.cc_marked_until >= now_s
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> DosParams {
        DosParams {
            cc_enabled: true,
            conn_enabled: true,
            ..DosParams::default()
        }
    }

    #[test]
    fn defaults_are_c_tors() {
        let p = DosParams::default();
        assert!(!p.cc_enabled && !p.conn_enabled && !p.refuse_single_hop_rend);
        assert_eq!((p.cc_min_concurrent, p.cc_rate, p.cc_burst), (3, 3, 90));
        assert_eq!(
            (
                p.conn_max_concurrent,
                p.conn_connect_rate,
                p.conn_connect_burst
            ),
            (100, 20, 40)
        );
        assert!(p.cc_refuse && p.conn_close);
        assert_eq!(
            (p.cc_defense_time, p.conn_connect_defense_time),
            (3600, 86400)
        );
        // torrc beats the consensus; the consensus beats the default.
        let o = DosOptions {
            cc_enabled: AutoBool::On,
            cc_burst: Some(5),
            ..DosOptions::default()
        };
        let p = DosParams::resolve(&o, |name, d, _, _| {
            if name == "DoSCircuitCreationRate" {
                7
            } else {
                d
            }
        });
        assert!(p.cc_enabled);
        assert_eq!((p.cc_rate, p.cc_burst), (7, 5));
    }

    #[test]
    fn a_circuit_flood_marks_its_address_only_with_enough_connections() {
        let p = DosParams {
            cc_burst: 10,
            cc_rate: 1,
            ..params()
        };
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut t = ClientTable::default();
        for _ in 0..3 {
            t.on_accept(&p, a, 100, 7);
        }
        t.on_accept(&p, b, 100, 7);
        // b has one connection: never marked, however fast it creates.
        assert!((0..50).all(|_| t.on_create(&p, b, 100, 7).is_none()));
        // a: 9 circuits pass, the 10th empties the bucket and marks it.
        assert!((0..9).all(|_| t.on_create(&p, a, 100, 7).is_none()));
        let d = t.on_create(&p, a, 100, 7).expect("marked");
        assert!((3601..=3600 + 1800).contains(&d), "{d}");
        assert_eq!(t.stats.cc_marked_addrs, 1);
        // Still exhausted: marked again, but not re-announced within a minute.
        assert!(t.on_create(&p, a, 101, 7).is_none());
        assert_eq!(t.stats.cc_marked_addrs, 1);
    }

    #[test]
    fn connections_are_limited_per_address() {
        let p = DosParams {
            conn_max_concurrent: 3,
            conn_connect_burst: 100,
            ..params()
        };
        let ip: IpAddr = "10.0.0.3".parse().unwrap();
        let mut t = ClientTable::default();
        // C Tor refuses once more than the maximum are open.
        for _ in 0..4 {
            assert_eq!(t.on_accept(&p, ip, 5, 1), AcceptVerdict::Accept);
        }
        assert_eq!(t.on_accept(&p, ip, 5, 1), AcceptVerdict::RefuseConcurrent);
        t.on_close(ip);
        t.on_close(ip);
        assert_eq!(t.on_accept(&p, ip, 5, 1), AcceptVerdict::Accept);
        // Connecting too fast: the bucket of 3 empties, the address is
        // refused for a day and more.
        let p = DosParams {
            conn_connect_burst: 3,
            conn_connect_rate: 1,
            ..params()
        };
        let ip2: IpAddr = "10.0.0.4".parse().unwrap();
        let mut t = ClientTable::default();
        for _ in 0..3 {
            assert_eq!(t.on_accept(&p, ip2, 5, 1), AcceptVerdict::Accept);
            t.on_close(ip2);
        }
        assert_eq!(t.on_accept(&p, ip2, 6, 1), AcceptVerdict::RefuseRate);
        assert_eq!(
            t.on_accept(&p, ip2, 5 + 86_400, 1),
            AcceptVerdict::RefuseRate
        );
        assert_eq!(
            t.on_accept(&p, ip2, 5 + 86_400 + 43_201, 1),
            AcceptVerdict::Accept
        );
        // Nothing open, no mark: forgotten.
        t.on_close(ip2);
        t.expire(1 << 40);
        assert!(t.is_empty());
    }

    #[test]
    fn disabled_counts_connections_but_refuses_nothing() {
        let p = DosParams::default();
        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        let mut t = ClientTable::default();
        for _ in 0..1000 {
            assert_eq!(t.on_accept(&p, ip, 1, 0), AcceptVerdict::Accept);
            assert!(t.on_create(&p, ip, 1, 0).is_none());
        }
        assert_eq!(t.len(), 1);
    }
}
