//! Interop with stock C Tor (/usr/sbin/tor, 0.4.9.11): a one-authority
//! test network on loopback.
//!
//! * Our descriptor + extra-info, POSTed with [`post_descriptor`], go
//!   through C Tor's own parser and its authority checks
//!   (`dirserv_add_multiple_descriptors()`): it must answer Accepted, then
//!   NotNew for the same upload, and reject a tampered copy.
//! * The consensus the authority then votes and signs is fetched with
//!   [`fetch_verified_consensus`] (both flavors, compressed and not) and
//!   verified against the certificate from `/tor/keys/all`.
//!
//! Skipped (passes with a note) when `tor` or `tor-gencert` is missing.
//! Takes about 15–30 s, most of it waiting for the first vote.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use weft_crypto::keys::RelayKeys;
use weft_dir::consensus::{fetch_verified_consensus, ConsensusFlavor, FetchOptions};
use weft_dir::descriptor::{build_descriptor_pair, signed_digest, DescriptorParams};
use weft_dir::upload::{fetch_descriptor_digest, post_descriptor, upload_body, UploadOutcome};
use weft_dir::DirError;

const TOR: &str = "/usr/sbin/tor";

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the tor process we started when the test ends.
struct TorProcess(Child);

impl Drop for TorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Authority {
    _proc: TorProcess,
    dir: PathBuf,
    dirport: SocketAddr,
    v3ident: [u8; 20],
    fingerprint: [u8; 20],
}

impl Authority {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("info.log")).unwrap_or_default()
    }
}

fn start_authority(base: &Path, gencert: &Path) -> Authority {
    let dir = base.join("auth");
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    let or_port = free_port();
    let dir_port = free_port();

    // Authority key + certificate.
    let mut g = Command::new(gencert)
        .current_dir(&keys)
        .args([
            "--create-identity-key",
            "--passphrase-fd",
            "0",
            "-i",
            "authority_identity_key",
            "-s",
            "authority_signing_key",
            "-c",
            "authority_certificate",
            "-m",
            "12",
            "-a",
        ])
        .arg(format!("127.0.0.1:{dir_port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    g.stdin
        .take()
        .unwrap()
        .write_all(b"weft-test-passphrase\n")
        .unwrap();
    let out = g.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tor-gencert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert = std::fs::read_to_string(keys.join("authority_certificate")).unwrap();
    let mut v3ident = [0u8; 20];
    let v3hex = cert
        .lines()
        .find_map(|l| l.strip_prefix("fingerprint "))
        .unwrap();
    hex::decode_to_slice(v3hex.trim(), &mut v3ident).unwrap();

    // Relay identity of the authority, made here so that its fingerprint is
    // known before tor starts (C Tor reads a PKCS#1 PEM secret_id_key).
    let rsa = openssl::rsa::Rsa::generate(1024).unwrap();
    std::fs::write(
        keys.join("secret_id_key"),
        rsa.private_key_to_pem().unwrap(),
    )
    .unwrap();
    std::fs::set_permissions(
        keys.join("secret_id_key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    use sha1::Digest;
    let fingerprint: [u8; 20] = sha1::Sha1::digest(rsa.public_key_to_der_pkcs1().unwrap()).into();

    let d = dir.display();
    let torrc = format!(
        "DataDirectory {d}\n\
         PidFile {d}/pid\n\
         RunAsDaemon 0\n\
         TestingTorNetwork 1\n\
         Nickname weftTestAuth\n\
         ContactInfo weft-test@example.org\n\
         Address 127.0.0.1\n\
         ORPort 127.0.0.1:{or_port}\n\
         DirPort 127.0.0.1:{dir_port}\n\
         SocksPort 0\n\
         AuthoritativeDirectory 1\n\
         V3AuthoritativeDirectory 1\n\
         DirAuthority weftTestAuth orport={or_port} no-v2 v3ident={v3} 127.0.0.1:{dir_port} {fp}\n\
         AssumeReachable 1\n\
         ExitPolicy reject *:*\n\
         V3AuthVotingInterval 10\n\
         V3AuthVoteDelay 2\n\
         V3AuthDistDelay 2\n\
         V3AuthNIntervalsValid 2\n\
         TestingV3AuthInitialVotingInterval 10\n\
         TestingV3AuthInitialVoteDelay 2\n\
         TestingV3AuthInitialDistDelay 2\n\
         ProtocolWarnings 1\n\
         Log notice stderr\n\
         Log info file {d}/info.log\n",
        v3 = hex::encode_upper(v3ident),
        fp = hex::encode_upper(fingerprint),
    );
    std::fs::write(dir.join("torrc"), torrc).unwrap();
    std::fs::write(dir.join("torrc-defaults"), "").unwrap();
    let proc = Command::new(TOR)
        .arg("-f")
        .arg(dir.join("torrc"))
        .arg("--defaults-torrc")
        .arg(dir.join("torrc-defaults"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Authority {
        _proc: TorProcess(proc),
        dir,
        dirport: SocketAddr::from((Ipv4Addr::LOCALHOST, dir_port)),
        v3ident,
        fingerprint,
    }
}

/// Retry `f` until it succeeds or `limit` passes.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DirError>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(_) if start.elapsed() < limit => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{what}: still failing after {limit:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn stock_tor_authority_accepts_descriptor_and_serves_verifiable_consensus() {
    let Some(gencert) = find_tool("tor-gencert") else {
        eprintln!("SKIPPED: tor-gencert not installed");
        return;
    };
    if !Path::new(TOR).is_file() {
        eprintln!("SKIPPED: {TOR} not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let auth = start_authority(tmp.path(), &gencert);
    let t = Duration::from_secs(10);

    // The DirPort is up once it serves the authority's certificate.
    eventually(Duration::from_secs(30), "DirPort up", || {
        weft_dir::consensus::fetch_authority_certs_text(auth.dirport, t)
    })
    .await;

    // Our descriptor through C Tor's parser and authority checks.
    let keys = RelayKeys::load_or_create(
        &tmp.path().join("relay"),
        "weftInterop",
        Duration::from_secs(28 * 86400),
        SystemTime::now(),
    )
    .unwrap();
    let mut p = DescriptorParams::new(
        "weftInterop",
        Ipv4Addr::LOCALHOST,
        free_port(),
        SystemTime::now(),
    );
    p.contact = Some("weft test <weft@example.org>".into());
    p.bandwidth_observed = 50_000;
    let (desc, ei) = build_descriptor_pair(&keys, &p).unwrap();
    let body = upload_body(&desc, Some(&ei));
    let outcome = post_descriptor(auth.dirport, &body, "weft-dir interop test", t)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        UploadOutcome::Accepted,
        "authority log:\n{}",
        auth.log()
    );
    let again = post_descriptor(auth.dirport, &body, "again", t)
        .await
        .unwrap();
    assert_eq!(again, UploadOutcome::NotNew);

    // Authority policy failures come back as 400 with the reason.
    let mut future = p.clone();
    future.published = SystemTime::now() + Duration::from_secs(13 * 3600);
    let (fdesc, _) = build_descriptor_pair(&keys, &future).unwrap();
    match post_descriptor(auth.dirport, &fdesc, "future", t)
        .await
        .unwrap()
    {
        UploadOutcome::Rejected {
            status: 400,
            reason,
        } => {
            assert!(reason.contains("too far in the future"), "{reason}")
        }
        other => panic!("descriptor from the future: {other:?}"),
    }
    // The authority holds exactly what we uploaded.
    let ours = signed_digest(&desc).unwrap();
    assert_eq!(
        fetch_descriptor_digest(auth.dirport, &keys.fingerprint, t)
            .await
            .unwrap(),
        Some(ours)
    );
    assert_eq!(
        fetch_descriptor_digest(auth.dirport, &[0x42; 20], t)
            .await
            .unwrap(),
        None
    );
    // A descriptor whose signature does not verify is dropped by C Tor's
    // parser (a warning in its log) yet answered with a plain 200: only
    // fetching it back shows that it did not take.
    let tampered = desc.replacen("bandwidth 1073741824", "bandwidth 1073741825", 1);
    assert_ne!(tampered, desc);
    assert_eq!(
        post_descriptor(auth.dirport, &tampered, "tampered", t)
            .await
            .unwrap(),
        UploadOutcome::Accepted
    );
    assert_eq!(
        fetch_descriptor_digest(auth.dirport, &keys.fingerprint, t)
            .await
            .unwrap(),
        Some(ours)
    );

    // C Tor's log about our descriptor: accepted, without complaints.
    let log = auth.log();
    let fp_hex = hex::encode_upper(keys.fingerprint);
    // (Everything before the deliberately tampered upload.)
    let log = &log[..log.find("because: tampered").unwrap_or(log.len())];
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("[warn]") || l.contains("[err]"))
        .filter(|l| l.contains(&fp_hex) || l.contains("weftInterop") || l.contains("escriptor"))
        .collect();
    assert!(complaints.is_empty(), "C Tor complained: {complaints:#?}");

    // C's X-Your-Address-Is is never sent to an internal peer
    // (`is_local_to_resolve_addr`: "Internal address is always local"), so
    // on loopback no tor learns its address from an authority's answer;
    // the request itself goes through.
    let seen = weft_dir::dirport::fetch_your_address(auth.dirport, t)
        .await
        .unwrap();
    assert_eq!(seen, None);

    // A consensus signed by the authority, verified with its certificate.
    let trusted = [auth.v3ident];
    for (flavor, compressed) in [
        (ConsensusFlavor::Microdesc, true),
        (ConsensusFlavor::Plain, false),
    ] {
        let opts = FetchOptions {
            flavor,
            compressed,
            timeout: t,
            ..FetchOptions::default()
        };
        let s = eventually(Duration::from_secs(60), "verified consensus", || {
            fetch_verified_consensus(auth.dirport, &trusted, SystemTime::now(), &opts)
        })
        .await;
        assert_eq!(s.flavor, flavor);
        assert_eq!(s.signed_by, vec![auth.v3ident]);
        assert!(s.valid_after < s.fresh_until && s.fresh_until < s.valid_until);
        let me = s
            .find_relay(&auth.fingerprint)
            .expect("authority lists itself");
        assert_eq!(me.nickname, "weftTestAuth");
        assert!(
            me.has_flag("Authority") && me.has_flag("Running"),
            "{:?}",
            me.flags
        );
        if flavor == ConsensusFlavor::Plain {
            assert!(me.descriptor_digest.is_some());
        }
        // Our relay has no ORPort listening, so it fails the reachability
        // test and is not Running: not in the consensus.
        assert!(s.find_relay(&keys.fingerprint).is_none());

        // Trusting an extra, absent authority: 1 of 2 is not a majority.
        let e = fetch_verified_consensus(
            auth.dirport,
            &[auth.v3ident, [0x42; 20]],
            SystemTime::now(),
            &opts,
        )
        .await;
        assert!(matches!(e, Err(DirError::Signatures(_))), "{e:?}");
    }
}
