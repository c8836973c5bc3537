//! Port ranges on 127.0.0.1: a sequential allocator that hands out ports from
//! a network's `base_port` upward (refusing ports something already listens
//! on), a helper that finds a free range for a test run, and single free
//! ports ([`free_port`]); all below Linux's ephemeral range.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use anyhow::{bail, Result};

/// Environment variable that pins the base port [`pick_base_port`] returns.
pub const BASE_PORT_ENV: &str = "WEFT_TESTNET_BASE_PORT";

/// Lowest and highest port [`pick_base_port`] hands out; below Linux's
/// ephemeral range (32768+) so tor's outgoing connections never take them.
const RANGE_LOW: u16 = 10000;
const RANGE_HIGH: u16 = 32000;
/// Granularity of candidate ranges.
const STRIDE: u16 = 100;
/// Ranges picked so far by this process ([`pick_base_port`]).
static PICKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// The band [`free_port`] hands single ports from: below the networks'
/// ranges, so a port picked here is never one a network allocated and has
/// not bound yet.
const SINGLE_LOW: u16 = 5000;
const SINGLE_HIGH: u16 = RANGE_LOW;
/// Single ports picked so far by this process ([`free_port`]).
static SINGLE_PICKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether `port` on 127.0.0.1 can be bound right now.
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).is_ok()
}

/// Hands out consecutive ports from a base, checking each is free.
#[derive(Debug)]
pub(crate) struct PortAllocator {
    next: u32,
}

impl PortAllocator {
    pub(crate) fn new(base: u16) -> Self {
        PortAllocator {
            next: u32::from(base),
        }
    }

    /// The next port; an error if the range ran past 65535 or the port is
    /// already taken on 127.0.0.1.
    pub(crate) fn take(&mut self, what: &str) -> Result<u16> {
        let Ok(port) = u16::try_from(self.next) else {
            bail!("port range exhausted (past 65535) allocating {what}");
        };
        if port == 0 {
            bail!("base_port 0 is not allowed");
        }
        self.next += 1;
        if !port_is_free(port) {
            bail!(
                "port {port} (for {what}) is already in use on 127.0.0.1; \
                 pick another base_port (or set {BASE_PORT_ENV})"
            );
        }
        Ok(port)
    }
}

/// A base port for a network needing `count` consecutive ports: the value of
/// `WEFT_TESTNET_BASE_PORT` if set, else the first range of `count` free ports
/// found by scanning 10000..32000 from a starting point derived from this
/// process id (so concurrent test binaries tend to use different ranges).
pub fn pick_base_port(count: usize) -> Result<u16> {
    if let Ok(v) = std::env::var(BASE_PORT_ENV) {
        return v
            .trim()
            .parse::<u16>()
            .map_err(|_| anyhow::anyhow!("{BASE_PORT_ENV}={v:?} is not a port number"));
    }
    let count = u16::try_from(count).unwrap_or(u16::MAX);
    let span = count.div_ceil(STRIDE).max(1) * STRIDE;
    if span >= RANGE_HIGH - RANGE_LOW {
        bail!("a network needing {count} ports is too large");
    }
    let slots = (RANGE_HIGH - RANGE_LOW - span) / STRIDE;
    // Tests of one binary run in parallel and share the process id: each
    // call starts a network's width further on, so two that search at the
    // same moment (before either binds) do not pick the same range.
    let call = PICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start_slot =
        ((std::process::id() + call * u32::from(span / STRIDE)) % u32::from(slots)) as u16;
    for i in 0..slots {
        let base = RANGE_LOW + ((start_slot + i) % slots) * STRIDE;
        if (base..base + count).all(port_is_free) {
            return Ok(base);
        }
    }
    bail!("no range of {count} free ports found in {RANGE_LOW}..{RANGE_HIGH}")
}

/// A port on 127.0.0.1 that is free now, for a listener that binds it a
/// little later. Not from the kernel (`bind` to port 0): that hands out
/// ports of the ephemeral range, where any outgoing connection made in
/// between (a relay's, the load's) may take the same port and the later
/// bind fails with "address in use"; this band is never handed out by the
/// kernel. Successive calls (and processes) start at different places.
pub fn free_port() -> Result<u16> {
    let span = u32::from(SINGLE_HIGH - SINGLE_LOW);
    let call = SINGLE_PICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = (std::process::id().wrapping_mul(7919) + call.wrapping_mul(1237)) % span;
    for i in 0..span {
        let port = SINGLE_LOW + ((start + i) % span) as u16;
        if port_is_free(port) {
            return Ok(port);
        }
    }
    bail!("no free port in {SINGLE_LOW}..{SINGLE_HIGH} on 127.0.0.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_free_distinct_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        for &p in &ports {
            assert!((SINGLE_LOW..SINGLE_HIGH).contains(&p), "{p}");
            assert!(p < RANGE_LOW, "{p} inside the networks' ranges");
        }
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "{ports:?}");
        // A port something listens on is never handed out.
        let held = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, ports[0]))).unwrap();
        // Whatever the next start, the held port is skipped.
        for _ in 0..50 {
            assert_ne!(free_port().unwrap(), ports[0]);
        }
        drop(held);
    }
}
