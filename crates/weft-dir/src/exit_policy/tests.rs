//! Exit policy parsing, building and publishing; the expected policies
//! of [`from_stock_tor`] are stock tor 0.4.9.11's own (GETINFO
//! exit-policy/full and exit-policy/ipv6 of a relay started with the
//! same options and `Address 198.51.100.7`).

use std::net::IpAddr;

use super::*;

fn rules(v: &str) -> Vec<String> {
    parse_policy(v)
        .unwrap_or_else(|e| panic!("{v}: {e}"))
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn torrc_forms_parse_as_c_tor_reads_them() {
    assert_eq!(rules("accept *:80"), ["accept *4:80", "accept *6:80"]);
    assert_eq!(rules("reject *4:*"), ["reject *4:*"]);
    assert_eq!(rules("accept6 *:443"), ["accept *6:443"]);
    assert_eq!(rules("reject *6:25"), ["reject *6:25"]);
    assert_eq!(rules("accept 1.2.3.4"), ["accept 1.2.3.4:*"]);
    assert_eq!(
        rules("accept 1.2.3.4/8:1-1024"),
        ["accept 1.2.3.4/8:1-1024"]
    );
    assert_eq!(
        rules("reject 10.0.0.0/255.0.0.0:*"),
        ["reject 10.0.0.0/8:*"]
    );
    assert_eq!(rules("reject 0.0.0.0/0.0.0.0:*"), ["reject *4:*"]);
    assert_eq!(
        rules("accept [2001:db8::]/32:80-90"),
        ["accept [2001:db8::]/32:80-90"]
    );
    assert_eq!(rules("accept6 [::1]:22"), ["accept [::1]:22"]);
    assert_eq!(
        rules("accept [::ffff:1.2.3.4]/8:80"),
        ["accept [::ffff:1.2.3.4]/104:80"]
    );
    assert_eq!(
        rules(" accept *4:80 ,, reject 1.2.3.4:443,accept *:*"),
        [
            "accept *4:80",
            "reject 1.2.3.4:443",
            "accept *4:*",
            "accept *6:*"
        ]
    );
    let private = rules("reject private:25");
    assert_eq!(private.len(), 12);
    assert_eq!(private[0], "reject 0.0.0.0/8:25");
    assert_eq!(private[11], "reject [::]/127:25");
    // Port 0 is C Tor's 1-0: it matches nothing.
    let (zero, _) = parse_policy("accept *:0").unwrap();
    assert!(!zero[0].matches(ip("1.2.3.4"), 0) && !zero[0].matches(ip("1.2.3.4"), 1));
}

#[test]
fn ipv4_after_accept6_is_ignored_with_a_warning() {
    let (r, w) = parse_policy("accept6 1.2.3.4:80,accept *4:443").unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("accept6"), "{w:?}");
    let (r, w) = parse_policy("reject6 private:*").unwrap();
    assert_eq!(r.len(), 12, "private is both families even after reject6");
    assert_eq!(w.len(), 1);
}

#[test]
fn malformed_entries_fail_the_whole_policy() {
    for bad in [
        "accept",
        "accept *:80 *:443",
        "allow *:80",
        "ACCEPT *:80",
        "accept *:90-80",
        "accept *:70000",
        "accept *:http",
        "accept *:-5",
        "accept */8:80",
        "accept 1.2.3.4/33:80",
        "accept 1.2.3.4/255.0.255.0:80",
        "accept 1.2.3.256:80",
        "accept 2001:db8::1:80",
        "accept [2001:db8::1:80",
        "accept [2001:db8::]/129:80",
        "accept [2001:db8::]/255.255.0.0:80",
        "reject private",
        "reject privateer:*",
        "accept [::ffff:1.2.3.4]/40:80",
    ] {
        let e = parse_policy(&format!("accept *:22,{bad}")).expect_err(bad);
        assert!(e.to_string().contains("malformed exit policy entry"), "{e}");
    }
    let long = format!("accept 1.2.3.4:{}", "1".repeat(200));
    assert!(parse_policy(&long).is_err());
}

#[test]
fn the_first_matching_rule_decides() {
    let (rules, _) =
        parse_policy("reject 1.2.3.0/24:80,accept *:80,accept [2001:db8::]/32:*,reject *:*")
            .unwrap();
    let p = ExitPolicy {
        rules,
        ipv6_exit: true,
    };
    assert!(!p.allows(ip("1.2.3.4"), 80));
    assert!(p.allows(ip("1.2.4.4"), 80));
    assert!(!p.allows(ip("1.2.4.4"), 81));
    assert!(p.allows(ip("2001:db8::7"), 22));
    assert!(!p.allows(ip("2001:db9::7"), 22));
    assert!(
        !p.allows(ip("::ffff:1.2.3.4"), 80),
        "a v4-mapped address is its IPv4 address"
    );
    assert!(!ExitPolicy::reject_all().allows(ip("1.2.3.4"), 80));
    let open = ExitPolicy {
        rules: parse_policy("accept *:*").unwrap().0,
        ipv6_exit: true,
    };
    assert!(open.allows(ip("1.2.3.4"), 80));
    for a in ["0.0.0.0", "::", "::ffff:0.0.0.0"] {
        assert!(
            !open.allows(ip(a), 80),
            "{a}: never the unspecified address"
        );
    }
}

#[test]
fn a_non_exit_rejects_everything_and_ignores_its_lines() {
    let o = ExitPolicyOptions {
        exit_relay: Some(false),
        exit_policy: vec!["accept *:80".into()],
        ..Default::default()
    };
    let (p, _) = ExitPolicy::from_options(&o, &OwnAddresses::default()).unwrap();
    assert!(p.is_reject_star());
    assert_eq!(p.descriptor_lines(), ["reject *:*"]);
    assert_eq!(p.ipv6_policy_line(), None);
    // Stock tor 0.4.9: `--verify-config` says "Configuration was valid"
    // for ExitRelay 0 with "ExitPolicy accept *:80x", and refuses it with
    // ExitRelay 1 ("Error in ExitPolicy entry").
    let bad = ExitPolicyOptions {
        exit_policy: vec!["accept *:80x".into()],
        ..o
    };
    assert!(ExitPolicy::from_options(&bad, &OwnAddresses::default()).is_ok());
    let bad_exit = ExitPolicyOptions {
        exit_relay: Some(true),
        ..bad
    };
    assert!(ExitPolicy::from_options(&bad_exit, &OwnAddresses::default()).is_err());
    // ExitRelay auto with nothing else set: not an exit.
    assert!(!ExitPolicyOptions::default().is_exit());
    let auto = ExitPolicyOptions {
        exit_policy: vec!["accept *:80".into()],
        ..Default::default()
    };
    assert!(auto.is_exit());
}

#[test]
fn own_and_internal_addresses() {
    assert!(is_internal(ip("10.1.2.3")));
    assert!(is_internal(ip("100.64.0.1")));
    assert!(is_internal(ip("::ffff:192.168.1.1")));
    assert!(is_internal(ip("fe80::1")));
    assert!(is_internal(ip("::1")));
    assert!(!is_internal(ip("198.51.100.7")));
    assert!(!is_internal(ip("2001:db8::1")));
    assert!(!is_public_for_reject(ip("224.0.0.1")));
    assert!(!is_public_for_reject(ip("0.0.0.0")));
    assert!(is_public_for_reject(ip("203.0.113.9")));
}

#[test]
fn redundant_rules_go_as_in_c_tor() {
    let mut r = parse_policy("accept *:80,reject *:80,reject 1.2.3.4:80,accept *4:*,reject *4:25")
        .unwrap()
        .0;
    remove_redundancies(&mut r);
    let s: Vec<String> = r.iter().map(ToString::to_string).collect();
    assert_eq!(s, ["accept *6:80", "accept *4:*"]);
}

#[test]
fn descriptor_lines_parse_in_tor_netdoc_and_agree_with_its_matching() {
    use tor_netdoc::types::policy::{AddrPolicy, AddrPortPattern, RuleKind};
    let o = ExitPolicyOptions {
        exit_relay: Some(true),
        exit_policy: vec![
            "reject 1.2.3.0/24:*,accept 5.6.0.0/16:22-23".into(),
            "accept *:80,accept *:443,reject *:*".into(),
        ],
        ..Default::default()
    };
    let own = OwnAddresses {
        advertised: vec![ip("198.51.100.7")],
        ..Default::default()
    };
    let (p, _) = ExitPolicy::from_options(&o, &own).unwrap();
    let mut theirs = AddrPolicy::new();
    for line in p.descriptor_lines() {
        let (kind, pat) = line.split_once(' ').unwrap();
        let kind = if kind == "accept" {
            RuleKind::Accept
        } else {
            RuleKind::Reject
        };
        theirs.push(kind, pat.parse::<AddrPortPattern>().expect(&line));
    }
    for a in [
        "1.2.3.4",
        "5.6.7.8",
        "9.9.9.9",
        "198.51.100.7",
        "10.0.0.1",
        "127.0.0.1",
    ] {
        for port in [22, 23, 25, 80, 443, 8080] {
            let ours = p.allows(ip(a), port);
            let t = theirs.allows(&ip(a), port) == Some(RuleKind::Accept);
            assert_eq!(ours, t, "{a}:{port}");
        }
    }
}

/// Options and stock tor's resulting policy (`.full`: every rule as
/// GETINFO exit-policy/full writes it; `.ipv4`: exit-policy/ipv4, the
/// descriptor's lines). Regenerate with a relay started with these torrc
/// lines plus `Address 198.51.100.7`.
fn stock_tor_cases() -> Vec<(&'static str, ExitPolicyOptions, &'static str, &'static str)> {
    let opts =
        |exit: bool, lines: &[&str], private: bool, reduced: bool, v6: bool| ExitPolicyOptions {
            exit_relay: exit.then_some(true),
            exit_policy: lines.iter().map(|s| s.to_string()).collect(),
            reject_private: private,
            reduced,
            ipv6_exit: v6,
            ..Default::default()
        };
    vec![
        (
            "ExitRelay 1",
            opts(true, &[], true, false, false),
            include_str!("stock-tor/exit-relay.full"),
            include_str!("stock-tor/exit-relay.ipv4"),
        ),
        (
            "ExitPolicy lines, IPv6Exit 1",
            opts(
                true,
                &[
                    "accept *:80,accept *:443,reject 1.2.3.0/24:*",
                    "accept6 [2001:db8::]/32:22,reject *:*",
                ],
                true,
                false,
                true,
            ),
            include_str!("stock-tor/policy-lines-ipv6.full"),
            include_str!("stock-tor/policy-lines-ipv6.ipv4"),
        ),
        (
            "ReducedExitPolicy 1, IPv6Exit 1",
            opts(false, &[], true, true, true),
            include_str!("stock-tor/reduced-ipv6.full"),
            include_str!("stock-tor/reduced-ipv6.ipv4"),
        ),
        (
            "ExitPolicyRejectPrivate 0",
            opts(
                true,
                &["accept 10.0.0.0/255.0.0.0:*,reject 5.6.7.8/16:1-1024"],
                false,
                false,
                false,
            ),
            include_str!("stock-tor/no-reject-private.full"),
            include_str!("stock-tor/no-reject-private.ipv4"),
        ),
    ]
}

#[test]
fn from_stock_tor() {
    let own = OwnAddresses {
        advertised: vec![ip("198.51.100.7")],
        ..Default::default()
    };
    for (name, o, full, ipv4) in stock_tor_cases() {
        let (p, _) = ExitPolicy::from_options(&o, &own).unwrap();
        let ours: Vec<String> = p.rules().iter().map(Rule::descriptor_line).collect();
        let theirs: Vec<&str> = full.lines().collect();
        assert_eq!(ours, theirs, "{name}: every rule");
        assert_eq!(
            p.descriptor_lines(),
            ipv4.lines().collect::<Vec<_>>(),
            "{name}: descriptor"
        );
    }
}

#[test]
fn ipv6_policy_summaries() {
    let own = OwnAddresses::default();
    let build = |lines: &[&str], v6: bool| {
        let o = ExitPolicyOptions {
            exit_relay: Some(true),
            exit_policy: lines.iter().map(|s| s.to_string()).collect(),
            ipv6_exit: v6,
            ..Default::default()
        };
        ExitPolicy::from_options(&o, &own).unwrap().0
    };
    let p = build(
        &["accept *:80,accept *:443,accept6 [2001:db8::]/32:22,reject *:*"],
        true,
    );
    assert_eq!(p.ipv6_policy_line().as_deref(), Some("accept 80,443"));
    // Private rejects do not count; the default policy's rejects do.
    let p = build(&[], true);
    assert_eq!(
        p.ipv6_policy_line().as_deref(),
        Some("reject 25,119,135-139,445,563,1214,4661-4666,6346-6429,6699,6881-6999")
    );
    assert_eq!(build(&[], false).ipv6_policy_line(), None, "no IPv6Exit");
    assert_eq!(
        build(&["accept *4:*,reject *6:*"], true).ipv6_policy_line(),
        None,
        "IPv6 rejected everywhere: no line"
    );
    // A small IPv6 reject (narrower than a /64 count) does not close a port.
    let p = build(&["reject [2001:db8::1]:80,accept *:*"], true);
    assert_eq!(p.ipv6_policy_line().as_deref(), Some("accept 1-65535"));
    // IPv4: a reject of more than two /8s closes the port.
    let p = build(&["reject 1.0.0.0/6:80,accept *:*"], true);
    assert_eq!(summary::summarize(p.rules(), false), "reject 80");
    // A /7 is under the cutoff: the port stays open.
    let p = build(&["reject 1.0.0.0/7:80,accept *:*"], true);
    assert_eq!(summary::summarize(p.rules(), false), "accept 1-65535");
    let p = build(&[], true);
    for s in [
        summary::summarize(p.rules(), false),
        p.ipv6_policy_line().unwrap(),
    ] {
        s.parse::<tor_netdoc::types::policy::PortPolicy>()
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}
