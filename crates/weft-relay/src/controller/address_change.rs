//! Our IPv4 address found again, as C's `check_descriptor_ipaddress_changed`
//! does every minute (and after a reload, which may bring a new `Address`):
//! the torrc's `Address` and `ORPort` lines, the interfaces and the host
//! name are asked again (`RelayConfig::address_finder`); a different
//! address is logged with C's line, goes into the descriptor and the
//! workers' NETINFO, and the ORPort is tested again before the descriptor
//! goes out (C's `ip_address_changed`: `router_reset_reachability`,
//! `mark_my_descriptor_dirty`).
//!
//! When none of those finds an address (a host behind NAT, whose
//! interfaces have private addresses only), the authorities' word is
//! taken, as C's `relay_address_new_suggestion`: our address as an
//! authority's NETINFO gives it, if the peer is an authority (its address
//! and identity) and the address is public and not the authority's own;
//! likewise the `X-Your-Address-Is` of an authority's DirPort answer
//! (by its address). Without one, a connection is opened to an authority
//! and its DirPort asked (C's `relay_addr_learn_from_dirauth`: at most
//! every 20 minutes), and nothing is published meanwhile. A found address that goes away later is kept
//! (C would publish none).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::directory::DirState;
use crate::context::DirAuthority;
use weft_proto::link::PeerKind;

/// C's DUMMY_DOWNLOAD_INTERVAL: how often to ask an authority.
const LEARN_EVERY: Duration = Duration::from_secs(20 * 60);

/// What the authorities told us of our address, and when we last asked.
#[derive(Debug, Default)]
pub(super) struct AddressSuggestions {
    /// The last address an authority suggested (C's suggested cache).
    suggested: Option<Ipv4Addr>,
    last_learn: Option<Instant>,
    last_unknown_notice: Option<Instant>,
}

/// C's `relay_address_new_suggestion`: `suggested` (our address as peer
/// `peer`, with RSA identity `peer_rsa` when it came in a NETINFO, saw it)
/// is believed only from an authority, only if public, and only if it is
/// not the peer's own address.
pub(super) fn accept_suggestion(
    suggested: IpAddr,
    peer: IpAddr,
    peer_rsa: Option<&[u8; 20]>,
    authorities: &[DirAuthority],
) -> Option<Ipv4Addr> {
    let trusted_addr = authorities.iter().any(|a| a.dir_addr.ip() == peer);
    let trusted_id = peer_rsa.is_none_or(|id| authorities.iter().any(|a| a.fingerprint == *id));
    if !trusted_addr || !trusted_id {
        return None;
    }
    if weft_dir::exit_policy::is_internal(suggested) {
        return None;
    }
    if suggested == peer {
        tracing::warn!("A relay endpoint {peer} is telling us that their address is ours.");
        return None;
    }
    match suggested {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}

impl super::Controller {
    /// A connection opened: keep the address its NETINFO gave us if the
    /// peer is an authority whose word we take.
    pub(super) fn note_address_suggestion(
        &mut self,
        seen: Option<IpAddr>,
        peer: &PeerKind,
        addr: SocketAddr,
    ) {
        let PeerKind::Relay { rsa_fp, .. } = peer else {
            return;
        };
        let Some(seen) = seen else { return };
        if let Some(a) = accept_suggestion(seen, addr.ip(), Some(rsa_fp), &self.cfg.authorities) {
            if self.address.suggested != Some(a) {
                debug!("authority at {addr} says our address is {a}");
                self.address.suggested = Some(a);
            }
        }
    }

    /// An authority's DirPort said we are at `seen` (C's
    /// `X-Your-Address-Is`, believed by the same rules as NETINFO, by the
    /// authority's address only: the answer came over plain HTTP).
    pub(super) fn note_your_address(&mut self, seen: IpAddr, authority: IpAddr) {
        if let Some(a) = accept_suggestion(seen, authority, None, &self.cfg.authorities) {
            if self.address.suggested != Some(a) {
                debug!("authority at {authority} says (X-Your-Address-Is) our address is {a}");
                self.address.suggested = Some(a);
            }
        }
    }

    /// Look for our address again and follow a change (C's order: what
    /// the torrc and the host say, else the authorities' suggestion).
    pub(super) fn check_address(&mut self, dir: &mut DirState) {
        let Some(finder) = self.cfg.address_finder.clone() else {
            return;
        };
        if let Some((a, method)) = finder.find() {
            return self.change_address(a, method, dir);
        }
        if !self.cfg.advertised.ip().is_unspecified() {
            debug!(
                "address check: no address found now; keeping {}",
                self.cfg.advertised.ip()
            );
            return;
        }
        if let Some(a) = self.address.suggested {
            return self.change_address(a, "NETINFO", dir);
        }
        let now = Instant::now();
        if self
            .address
            .last_unknown_notice
            .is_none_or(|t| now - t >= Duration::from_secs(3600))
        {
            self.address.last_unknown_notice = Some(now);
            info!(
                "Unable to find IPv4 address for ORPort {}. You might want to specify IPv6Only to it or set an explicit address or set Address.",
                self.cfg.advertised.port()
            );
        }
        self.learn_address_from_authority(now, dir);
    }

    /// C's `relay_addr_learn_from_dirauth`: a connection to a random
    /// authority, whose NETINFO names our address, and a request to its
    /// DirPort, whose `X-Your-Address-Is` does too.
    fn learn_address_from_authority(&mut self, now: Instant, dir: &DirState) {
        if self
            .address
            .last_learn
            .is_some_and(|t| now - t < LEARN_EVERY)
        {
            return;
        }
        let auths = &self.cfg.authorities;
        if auths.is_empty() {
            return;
        }
        let a = &auths[rand::random_range(0..auths.len())];
        let (id, addr) = (a.fingerprint, SocketAddr::new(a.dir_addr.ip(), a.or_port));
        self.address.last_learn = Some(now);
        dir.ask_our_address(a.dir_addr);
        debug!(
            "connecting to authority {} at {addr} to learn our address",
            a.nickname
        );
        self.with_connection(id, None, addr, None, super::Waiter::LearnAddress);
    }

    /// Publish `new` (found by `method`) if it is not our address already.
    fn change_address(&mut self, new: Ipv4Addr, method: &str, dir: &mut DirState) {
        let old = self.cfg.advertised;
        if old.ip() == IpAddr::V4(new) {
            return;
        }
        if old.ip().is_unspecified() {
            info!("Guessed our IP address as {new} (source: METHOD={method}).");
        } else {
            info!(
                "Our IP Address has changed from {} to {new}; rebuilding descriptor (source: METHOD={method}).",
                old.ip()
            );
        }
        self.cfg.advertised = SocketAddr::new(IpAddr::V4(new), old.port());
        dir.set_address(new);
        self.rebuild_context(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> DirAuthority {
        DirAuthority {
            nickname: "moria1".into(),
            or_port: 9101,
            v3ident: None,
            dir_addr: "128.31.0.39:9131".parse().unwrap(),
            fingerprint: [7; 20],
        }
    }

    /// C's rules: only an authority (address, and identity when known),
    /// only a public address, never the authority's own.
    #[test]
    fn only_an_authority_suggests_a_public_address_not_its_own() {
        let auths = [auth()];
        let peer: IpAddr = "128.31.0.39".parse().unwrap();
        let ours: IpAddr = "198.51.100.7".parse().unwrap();
        let want = Some("198.51.100.7".parse().unwrap());
        assert_eq!(accept_suggestion(ours, peer, Some(&[7; 20]), &auths), want);
        // X-Your-Address-Is has no identity: the address is enough.
        assert_eq!(accept_suggestion(ours, peer, None, &auths), want);
        // A relay that is not an authority, by address or by identity.
        let other: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(accept_suggestion(ours, other, Some(&[7; 20]), &auths), None);
        assert_eq!(accept_suggestion(ours, peer, Some(&[8; 20]), &auths), None);
        // Internal addresses are never believed (so not on loopback).
        for internal in ["127.0.0.1", "10.0.0.5", "192.168.1.2", "100.64.0.1"] {
            let s: IpAddr = internal.parse().unwrap();
            assert_eq!(accept_suggestion(s, peer, Some(&[7; 20]), &auths), None);
        }
        // Its own address is not ours.
        assert_eq!(accept_suggestion(peer, peer, Some(&[7; 20]), &auths), None);
        // IPv6 is not looked for this way.
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(accept_suggestion(v6, peer, Some(&[7; 20]), &auths), None);
    }
}
