//! Tests of the link handshake: both ends in memory.
use super::*;
use crate::cell::next_frame;
use weft_crypto::keys::{LinkKeys, RelayKeys};

fn identity(dir: &std::path::Path) -> (Arc<LinkIdentity>, [u8; 20], [u8; 32]) {
    let now = SystemTime::now();
    let k = RelayKeys::load_or_create(dir, "t", Duration::from_secs(86400 * 28), now).unwrap();
    let l = LinkKeys::generate(&k, now).unwrap();
    let id = LinkIdentity {
        rsa_id_der: k.rsa_id_der.clone(),
        ed_id: k.ed_id,
        cert_rsa_id: l.id_cert_der.clone(),
        cert_signing: l.cert_signing.clone(),
        cert_tls_link: l.cert_tls_link.clone(),
        cert_auth: l.cert_auth.clone(),
        cert_crosscert: l.cert_crosscert.clone(),
        auth_key: ed25519::Keypair::from_bytes(l.auth_key.as_bytes()),
        tls_cert_der: l.tls_cert_der.clone(),
    };
    (Arc::new(id), k.fingerprint, k.ed_id)
}

/// Deliver `cells` to `h`, collecting replies; returns Opened if reached.
fn deliver(
    h: &mut Handshake,
    cells: Vec<Vec<u8>>,
    out: &mut Vec<Vec<u8>>,
) -> Result<Option<Opened>, LinkError> {
    let mut exporter = |ctx: &[u8]| Some(sha256(ctx));
    let mut opened = None;
    for c in cells {
        let (f, n) = next_frame(&c, h.circ_id_len()).unwrap().unwrap();
        assert_eq!(n, c.len());
        if let Some(o) = h.handle(f, SystemTime::now(), &mut exporter, out)? {
            opened = Some(o);
        }
    }
    Ok(opened)
}

#[test]
fn initiator_and_responder_authenticate_each_other() {
    let (ta, tb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, a_fp, a_ed) = identity(ta.path());
    let (b, b_fp, b_ed) = identity(tb.path());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let mut resp = Handshake::new_responder(b.clone(), ip, vec![ip]);
    let (mut init, v) = Handshake::new_initiator(
        a.clone(),
        ip,
        vec![ip],
        Some(b_fp),
        Some(b_ed),
        b.tls_cert_der.clone(),
    );
    let mut to_init = Vec::new();
    assert!(deliver(&mut resp, vec![v], &mut to_init).unwrap().is_none());
    assert_eq!(to_init.len(), 4); // VERSIONS, CERTS, AUTH_CHALLENGE, NETINFO
    let mut to_resp = Vec::new();
    let o = deliver(&mut init, to_init, &mut to_resp).unwrap().unwrap();
    assert_eq!(
        o.peer,
        PeerKind::Relay {
            rsa_fp: b_fp,
            ed_id: b_ed
        }
    );
    assert_eq!(o.link_version, 5);
    assert!(o.canonical);
    assert_eq!(to_resp.len(), 3); // CERTS, AUTHENTICATE, NETINFO
    let o = deliver(&mut resp, to_resp, &mut Vec::new())
        .unwrap()
        .unwrap();
    assert_eq!(
        o.peer,
        PeerKind::Relay {
            rsa_fp: a_fp,
            ed_id: a_ed
        }
    );
}

#[test]
fn client_without_certs_is_a_client() {
    let tb = tempfile::tempdir().unwrap();
    let (b, _, _) = identity(tb.path());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let mut resp = Handshake::new_responder(b, ip, vec![ip]);
    let mut out = Vec::new();
    deliver(
        &mut resp,
        vec![encode_var(0, 2, cmd::VERSIONS, &[0, 3, 0, 4, 0, 5])],
        &mut out,
    )
    .unwrap();
    let netinfo = {
        let mut b = vec![0, 0, 0, 0, 4, 4, 127, 0, 0, 1, 0];
        b.resize(509, 0);
        encode_fixed(0, 4, cmd::NETINFO, &b)
    };
    let o = deliver(&mut resp, vec![netinfo], &mut out)
        .unwrap()
        .unwrap();
    assert_eq!(o.peer, PeerKind::Client);
}

#[test]
fn bad_handshakes_are_refused() {
    let (ta, tb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, _, _) = identity(ta.path());
    let (b, _, _) = identity(tb.path());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    // No common version; odd length; fixed cell before VERSIONS.
    for bad in [
        encode_var(0, 2, cmd::VERSIONS, &[0, 1, 0, 2]),
        encode_var(0, 2, cmd::VERSIONS, &[0, 4, 0]),
    ] {
        let mut h = Handshake::new_responder(b.clone(), ip, vec![ip]);
        assert!(matches!(
            deliver(&mut h, vec![bad], &mut Vec::new()),
            Err(LinkError::Versions(_))
        ));
    }
    let mut h = Handshake::new_responder(b.clone(), ip, vec![ip]);
    let early = encode_fixed(0, 2, cmd::CREATE2, &[]);
    let mut ex = |_: &[u8]| None;
    let (f, _) = next_frame(&early, 2).unwrap().unwrap();
    assert!(h
        .handle(f, SystemTime::now(), &mut ex, &mut Vec::new())
        .is_err());
    // Initiator expecting another identity.
    let mut resp = Handshake::new_responder(b.clone(), ip, vec![ip]);
    let (mut init, v) = Handshake::new_initiator(
        a,
        ip,
        vec![ip],
        Some([9u8; 20]),
        None,
        b.tls_cert_der.clone(),
    );
    let mut to_init = Vec::new();
    deliver(&mut resp, vec![v], &mut to_init).unwrap();
    assert!(matches!(
        deliver(&mut init, to_init, &mut Vec::new()),
        Err(LinkError::WrongIdentity { .. })
    ));
}
