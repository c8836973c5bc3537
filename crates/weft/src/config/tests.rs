//! Tests of the torrc parser: what it takes, what it refuses and how it
//! names the line.

use super::*;

const GOOD: &str = "\
# a comment
ORPort 127.0.0.1:5000
Address 127.0.0.1
Nickname weft1
ContactInfo ops@example.org
DataDirectory /tmp/weft
Log notice file /tmp/weft/notice.log
DirAuthority auth0 orport=5100 no-v2 v3ident=0123456789ABCDEF0123456789ABCDEF01234567 127.0.0.1:7000 AAAA BBBB CCCC DDDD EEEE FFFF 0000 1111 2222 3333
TestingTorNetwork 1
AssumeReachable 1
ExitRelay 0
ExitPolicy reject *:*
ConnectionThreads 2
";

#[test]
fn parses_a_relay_config() {
    let c = parse(GOOD, Path::new("torrc")).unwrap();
    assert_eq!(c.relay.nickname, "weft1");
    assert_eq!(c.relay.connection_threads, 2);
    assert_eq!(c.relay.or_listen, "127.0.0.1:5000".parse().unwrap());
    assert_eq!(c.relay.authorities.len(), 1);
    assert_eq!(c.relay.authorities[0].or_port, 5100);
    assert_eq!(
        hex::encode_upper(c.relay.authorities[0].fingerprint),
        "AAAABBBBCCCCDDDDEEEEFFFF0000111122223333"
    );
    assert!(c.relay.extend_allow_private);
    assert_eq!(
        c.relay.worker_sched_slice,
        Some(std::time::Duration::from_millis(
            DEFAULT_WORKER_SCHED_SLICE_MS
        ))
    );
    let off = parse(&format!("{GOOD}WorkerSchedSlice 0\n"), Path::new("torrc")).unwrap();
    assert_eq!(off.relay.worker_sched_slice, None);
    let ten = parse(
        &format!("{GOOD}WorkerSchedSlice 10 msec\n"),
        Path::new("torrc"),
    )
    .unwrap();
    assert_eq!(
        ten.relay.worker_sched_slice,
        Some(std::time::Duration::from_millis(10))
    );
    assert_eq!(
        c.logs[0].target,
        LogTarget::File("/tmp/weft/notice.log".into())
    );
}

#[test]
fn circuit_padding_options() {
    let c = parse(GOOD, Path::new("torrc")).unwrap();
    assert!(c.relay.circuit_padding);
    // A relay cannot turn it off, as C (`options_validate_relay_padding`).
    for line in ["CircuitPadding 0", "ReducedCircuitPadding 1"] {
        let e = parse(&format!("{GOOD}{line}\n"), Path::new("torrc")).unwrap_err();
        assert!(e.to_string().contains("Relays cannot set"), "{e}");
    }
    let on = parse(
        &format!("{GOOD}CircuitPadding 1\nReducedCircuitPadding 0\n"),
        Path::new("torrc"),
    )
    .unwrap();
    assert!(on.relay.circuit_padding);
    assert!(parse(&format!("{GOOD}CircuitPadding maybe\n"), Path::new("torrc")).is_err());
}

#[test]
fn errors_name_the_line() {
    for (bad, what) in [
        ("Frobnicate 1", "unknown option"),
        ("ConnectionPadding 1", "must use 'auto'"),
        (
            "ReducedConnectionPadding 1",
            "cannot set ReducedConnectionPadding",
        ),
        ("ExitRelay maybe", "expected 0, 1 or auto"),
        ("ConnectionThreads many", "ConnectionThreads"),
        ("Nickname this-is-bad", "Nickname"),
        ("TestingTorNetwork yes", "expected 0 or 1"),
        ("Log notice nowhere", "not supported"),
        ("DirAuthority x 127.0.0.1:1 ZZ", "DirAuthority"),
        ("ORPort 5000 NoAdvertise", "not supported"),
        ("WorkerSchedSlice 200 msec", "above 100 msec"),
        ("WorkerSchedSlice soon", "Unable to parse"),
    ] {
        let text = format!("{GOOD}{bad}\n");
        let e = parse(&text, Path::new("torrc")).unwrap_err().to_string();
        assert!(e.contains("torrc:14:"), "{bad}: {e}");
        assert!(e.contains(what), "{bad}: {e}");
    }
}

#[test]
fn missing_required_options() {
    let e = parse("Nickname x\n", Path::new("t"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ORPort is required"), "{e}");
}

#[test]
fn byte_units() {
    assert_eq!(parse_bytes("1 MB").unwrap(), 1 << 20);
    assert_eq!(parse_bytes("100").unwrap(), 100);
    assert!(parse_bytes("1 parsec").is_err());
}
