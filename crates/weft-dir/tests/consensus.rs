//! Consensus verification and summary tests on real documents made by C Tor
//! 0.4.9.6 in a chutney network (tests/data/README.md): both flavors verify
//! against the authorities' certificates, the summary carries the times,
//! params and relay entries, and every way of getting the trust wrong
//! (too few trusted signers, missing certificates, tampering, wrong time)
//! is refused. Damaged input never panics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine as _;
use weft_dir::consensus::*;
use weft_dir::DirError;

const CERTS: &str = include_str!("data/cached-certs");
const MD: &str = include_str!("data/cached-microdesc-consensus");
const NS: &str = include_str!("data/cached-consensus");

/// 2000-01-01 00:00:00 UTC plus `secs`.
fn t2000(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(946_684_800 + secs)
}

/// During the consensus' validity (valid-after 00:02:20).
fn now() -> SystemTime {
    t2000(150)
}

/// The four authorities' v3 identities, from the dir-source lines.
fn authorities() -> Vec<[u8; 20]> {
    MD.lines()
        .filter_map(|l| l.strip_prefix("dir-source "))
        .map(|l| {
            let mut id = [0u8; 20];
            hex::decode_to_slice(l.split(' ').nth(1).unwrap(), &mut id).unwrap();
            id
        })
        .collect()
}

fn fp_of(b64: &str) -> [u8; 20] {
    STANDARD_NO_PAD.decode(b64).unwrap().try_into().unwrap()
}

fn certs_for(trusted: &[[u8; 20]]) -> AuthorityCerts {
    AuthorityCerts::parse(CERTS, trusted, now()).unwrap()
}

#[test]
fn microdesc_consensus_verifies_and_summarises() {
    let auths = authorities();
    assert_eq!(auths.len(), 4);
    let certs = certs_for(&auths);
    assert_eq!(certs.len(), 4);
    let s = verify_consensus(MD, ConsensusFlavor::Microdesc, &certs, &auths, now()).unwrap();
    assert_eq!(s.flavor, ConsensusFlavor::Microdesc);
    assert_eq!(s.valid_after, t2000(140));
    assert_eq!(s.fresh_until, t2000(160));
    assert_eq!(s.valid_until, t2000(180));
    assert!(s.is_valid_at(now()));
    assert_eq!(s.signed_by.len(), 4);
    assert_eq!(s.params.get("cc_alg"), Some(2));
    assert_eq!(s.params.get("AuthDirMaxServersPerAddr"), Some(0));
    assert_eq!(s.params.circwindow(), 1000, "absent: C Tor default");
    assert!(
        s.required_relay_protocols.contains("Relay=2-4"),
        "{}",
        s.required_relay_protocols
    );
    assert!(s.recommended_relay_protocols.contains("LinkAuth=3"));
    assert_eq!(s.relays.len(), 7);
    assert!(s
        .relays
        .windows(2)
        .all(|w| w[0].rsa_identity < w[1].rsa_identity));

    let r = s.find_relay(&fp_of("JX0G8DYLsiRjiHJPEJ7AiVodQfs")).unwrap();
    assert_eq!(r.nickname, "test002a");
    assert_eq!(r.address.to_string(), "127.0.0.1");
    assert_eq!(r.or_port, 5102);
    assert_eq!(
        r.flags,
        [
            "Authority",
            "Exit",
            "Fast",
            "Guard",
            "HSDir",
            "Running",
            "Stable",
            "V2Dir",
            "Valid"
        ]
    );
    assert!(r.has_flag("Fast") && !r.has_flag("BadExit"));
    assert!(r.protocols.contains("Relay=2-6"));
    assert_eq!(r.descriptor_digest, None);
    let r = s.find_relay(&fp_of("NpsC/Qajorf0HDG53xoR8tAj68Y")).unwrap();
    assert_eq!(r.nickname, "test005r");
    assert!(!r.has_flag("Stable") && !r.has_flag("Authority"));
    assert!(s.find_relay(&[0u8; 20]).is_none());
}

#[test]
fn plain_consensus_verifies_with_descriptor_digests() {
    let auths = authorities();
    let certs = certs_for(&auths);
    let s = verify_consensus(NS, ConsensusFlavor::Plain, &certs, &auths, now()).unwrap();
    assert_eq!(s.relays.len(), 7);
    let r = s.find_relay(&fp_of("JX0G8DYLsiRjiHJPEJ7AiVodQfs")).unwrap();
    assert_eq!(
        r.descriptor_digest,
        Some(fp_of("qnWaY8X49fehOPZQPpk95WY/sBg"))
    );
    assert_eq!((r.bandwidth, r.bandwidth_measured), (208, false));
    // The flavors are not interchangeable.
    assert!(matches!(
        verify_consensus(MD, ConsensusFlavor::Plain, &certs, &auths, now()),
        Err(DirError::Parse { .. })
    ));
    assert!(matches!(
        verify_consensus(NS, ConsensusFlavor::Microdesc, &certs, &auths, now()),
        Err(DirError::Parse { .. })
    ));
}

#[test]
fn needs_more_than_half_of_the_trusted_authorities() {
    let auths = authorities();
    let fake = |b: u8| [b; 20];
    let all_certs = certs_for(&auths);
    let ok = |trusted: &[[u8; 20]]| {
        verify_consensus(MD, ConsensusFlavor::Microdesc, &all_certs, trusted, now()).is_ok()
    };
    assert!(ok(&auths));
    assert!(ok(&[auths[0], auths[1], auths[2], fake(1)]), "3 of 4");
    assert!(
        !ok(&[auths[0], auths[1], fake(1), fake(2)]),
        "2 of 4 is not more than half"
    );
    assert!(!ok(&[auths[0], fake(1), fake(2)]), "1 of 3");
    assert!(
        ok(&[auths[0], auths[0], auths[0]]),
        "duplicates count once: 1 of 1"
    );
    assert!(!ok(&[]), "no trusted authorities");
    // Certificates of untrusted authorities never count, even if given.
    let only_two = AuthorityCerts::parse(CERTS, &auths[..2], now()).unwrap();
    assert_eq!(only_two.len(), 2);
    let e = verify_consensus(MD, ConsensusFlavor::Microdesc, &only_two, &auths, now());
    assert!(matches!(e, Err(DirError::Signatures(_))), "{e:?}");
    let none = AuthorityCerts::parse(CERTS, &[fake(9)], now()).unwrap();
    assert!(none.is_empty());
    // Expired certificates are dropped.
    let later = t2000(2 * 365 * 86400);
    assert!(AuthorityCerts::parse(CERTS, &auths, later)
        .unwrap()
        .is_empty());
}

#[test]
fn tampering_and_wrong_times_are_refused() {
    let auths = authorities();
    let certs = certs_for(&auths);
    let tampered = MD.replacen(
        "s Exit Fast Guard HSDir Running V2Dir Valid",
        "s Exit Fast Guard HSDir Running Stable V2Dir Valid",
        1,
    );
    assert_ne!(tampered, MD);
    let e = verify_consensus(&tampered, ConsensusFlavor::Microdesc, &certs, &auths, now());
    assert!(matches!(e, Err(DirError::Signatures(_))), "{e:?}");

    let v = |t| verify_consensus(MD, ConsensusFlavor::Microdesc, &certs, &auths, t);
    assert!(
        v(t2000(180 + 86400 - 1)).is_ok(),
        "reasonably live after valid-until"
    );
    assert!(matches!(
        v(t2000(180 + 86400 + 1)),
        Err(DirError::NotTimely(_))
    ));
    assert!(
        v(t2000(140) - Duration::from_secs(3600)).is_ok(),
        "an hour of clock skew is tolerated"
    );
    assert!(matches!(
        v(t2000(0) - Duration::from_secs(86400)),
        Err(DirError::NotTimely(_))
    ));
}

#[test]
fn damaged_documents_never_panic() {
    let auths = authorities();
    let certs = certs_for(&auths);
    // Truncations.
    for cut in (0..MD.len()).step_by(37) {
        if let Some(prefix) = MD.get(..cut) {
            assert!(
                verify_consensus(prefix, ConsensusFlavor::Microdesc, &certs, &auths, now())
                    .is_err()
            );
        }
    }
    for cut in (0..CERTS.len()).step_by(101) {
        if let Some(prefix) = CERTS.get(..cut) {
            let _ = AuthorityCerts::parse(prefix, &auths, now());
        }
    }
    // Byte flips (ASCII stays ASCII so the text stays a str).
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut b = MD.as_bytes().to_vec();
        let i = (rng as usize) % b.len();
        b[i] = b" \n-=+/0aZ9\t"[(rng >> 32) as usize % 11];
        let s = String::from_utf8(b).unwrap();
        let _ = verify_consensus(&s, ConsensusFlavor::Microdesc, &certs, &auths, now());
        let _ = verify_consensus(&s, ConsensusFlavor::Plain, &certs, &auths, now());
    }
    // Garbage.
    for g in [
        "",
        "\n\n\n",
        "network-status-version 3 microdesc\n",
        "\u{0}\u{1}",
    ] {
        assert!(verify_consensus(g, ConsensusFlavor::Microdesc, &certs, &auths, now()).is_err());
    }
}
