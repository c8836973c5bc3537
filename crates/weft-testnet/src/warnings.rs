//! Which warnings of the stock tor nodes a test may ignore: the one list of
//! warnings stock tor 0.4.9 logs in a healthy loopback test network, each
//! with the reason it says nothing about weft, and
//! [`Testnet::unexpected_warnings`], which returns every other `[warn]` or
//! `[err]` line.
//!
//! A line that names weft (its fingerprint, `~nick` or `'nick'`) or weft's
//! ORPort is
//! never ignored, whatever pattern it matches: the list may hide the
//! network's own noise, never a complaint about weft's descriptor,
//! handshakes or cells.

use crate::logs;
use crate::network::{Role, Testnet};

/// Warnings stock tor 0.4.9 logs in a healthy loopback test network:
/// (pattern, why it is not about weft). Used by
/// [`Testnet::unexpected_warnings`].
pub const KNOWN_WARNINGS: &[(&str, &str)] = &[
    (
        "You have used DirAuthority or AlternateDirAuthority",
        "start-up notice: the test network's own authorities",
    ),
    (
        "TestingTorNetwork is set",
        "start-up notice of a test network",
    ),
    (
        "Your log may contain sensitive information",
        "start-up notice: the tests log at info without SafeLogging",
    ),
    (
        "You are running Tor as root",
        "start-up notice on CI machines",
    ),
    (
        "AuthVotingInterval is very low",
        "start-up notice: the tests vote every 20 s",
    ),
    (
        "approved-routers'. That's ok.",
        "authority start-up: no approved-routers file",
    ),
    ("sr-state", "authority start-up: no shared-random state yet"),
    (
        "We just marked ourself as down",
        "a stock relay before its first consensus",
    ),
    (
        "(\"Not found\") from server",
        "a 404 for the consensus before the first vote",
    ),
    (
        "Posted vote received too late",
        "vote timing of authorities on one loaded machine",
    ),
    ("posted vote from", "vote timing of authorities"),
    ("Rejected vote from", "vote timing of authorities"),
    (
        "We don't have enough votes to generate a consensus",
        "the first voting rounds",
    ),
    (
        "Not enough info to publish pending",
        "the first voting rounds",
    ),
    (
        "Mismatched digest",
        "authorities' consensus signatures in the first rounds",
    ),
    (
        "good signatures from recognized authorities",
        "a consensus fetched while the authorities' signatures arrive",
    ),
    (
        "Consensus does not include configured authority",
        "an authority not yet listed in the first consensus",
    ),
    (
        "Too much Middle bandwidth on the network",
        "bandwidth weights of a network of a few relays",
    ),
    (
        "Bw Weights error",
        "the authorities' bandwidth-weight arithmetic in a tiny network (dirvote.c)",
    ),
    (
        "Bw Weight Failure for",
        "every node's check of the consensus bandwidth weights in a tiny network \
         (ns_parse.c networkstatus_verify_bw_weights, e.g. \"Case 3a (E scarce): \
         NStotal != Mtotal\")",
    ),
    (
        "Failed to choose an exit server",
        "a stock relay building its own circuits while its consensus lists \
         no usable exit yet (the first voting rounds; its info log says \
         \"Found 0 servers that might support 0/0 pending connections\")",
    ),
    (
        "Could not find a node that matches the configured _HSLayer",
        "a stock node's vanguards-lite layer-2 set, in a network of a few \
         relays, has no usable member for its predicted onion-service \
         circuits; seen after weft's deliberate restart, when stock relays \
         refuse for 60 s to reconnect to a relay they failed to reach \
         (\"Can't connect ... because we failed earlier\", \
         connection_or_connect) and those circuits fail at weft's hop",
    ),
    (
        "Client asked me to extend back to the previous hop.",
        "a stock relay's reachability self-test circuit [authority, itself] in \
         a network this small; the authority refuses to extend back to the \
         previous hop (circuitbuild_relay.c)",
    ),
];

/// A warning that tor logs right after another one as its consequence; it is
/// ignored exactly when the warning before it was.
const FOLLOW_UP_WARNINGS: &[&str] =
    &["connection_edge_process_relay_cell (away from origin) failed."];

/// True if `line` matches [`KNOWN_WARNINGS`] and names none of `about`.
pub fn is_known_warning(line: &str, about: &[&str]) -> bool {
    if about.iter().any(|a| !a.is_empty() && line.contains(a)) {
        return false;
    }
    KNOWN_WARNINGS.iter().any(|(p, _)| line.contains(p))
}

impl Testnet {
    /// `[warn]` and `[err]` lines in the stock nodes' notice logs that are
    /// not known warnings ([`KNOWN_WARNINGS`]), or that name weft, as
    /// `"<node>: <line>"`. With `ProtocolWarnings 1` this is where tor
    /// complains about a peer (e.g. weft) breaking the protocol. Reads at
    /// most the last 16 MB of each log.
    pub fn unexpected_warnings(&self) -> Vec<String> {
        let mut about: Vec<String> = Vec::new();
        if let Some(w) = self.weft() {
            // tor names relays as `$FP~nick` or `'nick'`; a bare "weft" is
            // in every path of the test network.
            about.push(format!("~{}", w.name));
            about.push(format!("'{}'", w.name));
            if let Some(fp) = &w.fingerprint {
                about.push(fp.clone());
            }
            if let Some(p) = w.or_port {
                about.push(format!("127.0.0.1:{p}"));
            }
        }
        let about: Vec<&str> = about.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        for n in self.nodes().iter().filter(|n| n.role != Role::Weft) {
            let mut previous_known = false;
            for l in logs::grep_tail_any(&n.notice_log(), &["[warn]", "[err]"], usize::MAX) {
                let follow_up = FOLLOW_UP_WARNINGS.iter().any(|f| l.contains(f));
                let known = is_known_warning(&l, &about) || (follow_up && previous_known);
                if !known {
                    out.push(format!("{}: {l}", n.name));
                }
                previous_known = known;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_warnings_never_hide_weft() {
        let fp = "265B1B03E80EEFE55A6B0AA97D417F443896EB11";
        let w = "Nov 24 20:42:42.000 [warn] Bw Weight Failure for Case 3a (E scarce): NStotal 1.0 != Mtotal 2.0. G=1 M=2 E=3 D=0 T=6";
        assert!(is_known_warning(w, &[fp, "~weft"]));
        let about_weft = format!("[warn] Bw Weight Failure for Case 3a: relay ${fp}~weft");
        assert!(!is_known_warning(&about_weft, &[fp, "~weft"]));
        assert!(!is_known_warning(
            "[warn] Received a bad CERTS cell from 127.0.0.1:9000",
            &[fp]
        ));
        for (p, why) in KNOWN_WARNINGS {
            assert!(!p.is_empty() && !why.is_empty());
        }
    }
}
