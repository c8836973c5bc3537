//! The check C Tor makes of every consensus it takes
//! (`networkstatus_check_required_protocols`, called by
//! `handle_missing_protocol_warning`): a relay that lacks a protocol the
//! consensus lists as *required* for relays must not run on that network
//! (C logs at error and exits); one that lacks a *recommended* protocol is
//! warned. As C, a consensus older than this release says nothing about
//! it. On a testing network (`TestingTorNetwork`), whose authorities are
//! stock tor with its compiled-in lists, weft logs the error and runs on:
//! that is where what it lacks is built and tested. Sans-IO: the lists in,
//! the verdict out.

use std::str::FromStr;
use std::time::SystemTime;

use tor_protover::Protocols;

/// This release's date, 2026-11-27: consensuses older than it are not
/// checked (C's `tor_get_approx_release_date`).
pub fn approx_release_date() -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_737_600)
}

/// What a consensus's protocol lists say of our `proto` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolVerdict {
    /// Everything required and recommended is supported (or the
    /// consensus predates this release).
    Fine,
    /// Something recommended is missing: warn (C's text).
    Warn(String),
    /// Something required is missing: C logs this at error and exits.
    Missing(String),
}

/// Check `ours` (our descriptor's `proto` line) against a consensus's
/// `required` and `recommended` relay protocols, as C does for a relay.
pub fn check(
    ours: &str,
    required: &str,
    recommended: &str,
    valid_after: SystemTime,
) -> ProtocolVerdict {
    if valid_after < approx_release_date() {
        return ProtocolVerdict::Fine;
    }
    let Ok(ours) = Protocols::from_str(ours) else {
        return ProtocolVerdict::Fine;
    };
    let missing = |list: &str| -> Option<String> {
        let wanted = Protocols::from_str(list).ok()?;
        let gap = wanted.difference(&ours);
        (!gap.is_empty()).then(|| gap.to_string())
    };
    if let Some(m) = missing(required) {
        return ProtocolVerdict::Missing(format!(
            "At least one protocol listed as required in the consensus is not supported by this version of Tor. You should upgrade. This version of Tor will not work as a relay on the Tor network. The missing protocols are: {m}"
        ));
    }
    if let Some(m) = missing(recommended) {
        return ProtocolVerdict::Warn(format!(
            "At least one protocol listed as recommended in the consensus is not supported by this version of Tor. You should upgrade. This version of Tor will eventually stop working as a relay on the Tor network. The missing protocols are: {m}"
        ));
    }
    ProtocolVerdict::Fine
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stock tor 0.4.9's lists (the live consensus's, and compiled into
    /// its authorities).
    const REQUIRED: &str = "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4";

    fn now() -> SystemTime {
        approx_release_date() + std::time::Duration::from_secs(3600)
    }

    #[test]
    fn stock_lists_are_met_and_a_required_protocol_we_lack_is_named() {
        let ours = super::super::directory::PROTO;
        assert_eq!(
            check(ours, REQUIRED, REQUIRED, now()),
            ProtocolVerdict::Fine
        );
        let v = check("Cons=1-2 Link=4-5 Relay=2,4", REQUIRED, "", now());
        let ProtocolVerdict::Missing(text) = v else {
            panic!("{v:?}");
        };
        assert!(text.contains("not supported"), "{text}");
        assert!(text.contains("HSDir=2"), "{text}");
        assert!(text.ends_with("Relay=3"), "{text}");
    }

    #[test]
    fn recommended_only_warns_and_a_full_set_is_fine() {
        let ours = "Cons=1-2 Desc=1-2 Link=4-5 Relay=2-4";
        assert_eq!(
            check(ours, "Cons=2 Link=4", "", now()),
            ProtocolVerdict::Fine
        );
        let v = check(ours, "Cons=2", "Relay=5", now());
        assert!(
            matches!(&v, ProtocolVerdict::Warn(t) if t.ends_with("Relay=5")),
            "{v:?}"
        );
    }

    #[test]
    fn a_consensus_older_than_this_release_says_nothing() {
        let old = approx_release_date() - std::time::Duration::from_secs(1);
        assert_eq!(
            check("Link=4", REQUIRED, REQUIRED, old),
            ProtocolVerdict::Fine
        );
    }
}
