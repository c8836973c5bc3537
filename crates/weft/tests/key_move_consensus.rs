//! A relay's identity moves from stock tor to weft and back, as the
//! authorities see it (issue 52): keys made by stock tor start weft in a
//! network of stock authorities; the authorities take weft's descriptor
//! (they pin the RSA identity to the Ed25519 one, so a new Ed25519 key
//! would be refused) and vote it Running under tor's fingerprint. Then
//! weft stops and stock tor starts on weft's DataDirectory: its descriptor
//! (platform Tor) is taken under the same two identities and listed.
//! The bandwidth history in the `state` file (C's items) goes through
//! weft and back to tor. `tests/tor_keys.rs` checks the files themselves;
//! this checks the network's verdict. The network lives in
//! `target/tmp/weft-net-keymove-<pid>/`, kept on failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use anyhow::{ensure, Context, Result};
use weft_testnet::{Testnet, TestnetConfig, WeftNode};

const BOUND: Duration = Duration::from_secs(240);

/// Two finished days of read history (whole KiB/s, so C's replay gives
/// them back exactly).
const READ_VALUES: &str = "176947200,353894400";

/// The stock tor this test starts, stopped by PID when dropped.
struct StockRelay(Child);

impl Drop for StockRelay {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The descriptor auth0 holds for `fp` (empty if none).
fn authority_descriptor(net: &Testnet, fp: &str) -> String {
    net.control("auth0")
        .and_then(|mut c| c.getinfo(&format!("desc/id/{fp}")))
        .unwrap_or_default()
}

fn line_value(doc: &str, key: &str) -> String {
    doc.lines()
        .find_map(|l| l.strip_prefix(key).map(str::trim).map(str::to_owned))
        .unwrap_or_default()
}

/// Wait (bounded) until auth0's consensus lists `nick` with RSA identity
/// `id_b64` published at or after `since` ("YYYY-MM-DD HH:MM:SS") and
/// Running.
fn wait_consensus(net: &Testnet, nick: &str, id_b64: &str, since: &str) -> Result<String> {
    let t0 = Instant::now();
    loop {
        let c = std::fs::read_to_string(net.node("auth0")?.dir.join("cached-consensus"))
            .unwrap_or_default();
        let mut lines = c.lines();
        let mut found = None;
        while let Some(l) = lines.next() {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() >= 6 && f[0] == "r" && f[1] == nick {
                let published = format!("{} {}", f[4], f[5]);
                let flags = lines.find(|l| l.starts_with("s ")).unwrap_or_default();
                found = Some((f[2] == id_b64, published, flags.to_string(), l.to_string()));
                break;
            }
        }
        if let Some((same_id, published, flags, r)) = &found {
            ensure!(*same_id, "auth0 lists {nick} under another identity: {r}");
            if published.as_str() >= since && flags.contains("Running") {
                return Ok(format!("{r} / {flags}"));
            }
        }
        ensure!(
            t0.elapsed() < BOUND,
            "auth0's consensus: {nick} not listed Running since {since}: {found:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn utc_now() -> String {
    iso(time::OffsetDateTime::now_utc())
}

fn iso(d: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

/// (relative path, bytes) of files for weft's DataDirectory.
type DataFiles = Vec<(String, Vec<u8>)>;

/// Stock tor's keys for a new relay, made by `tor --list-fingerprint`:
/// (relative path, bytes) of each key file, the RSA fingerprint, the
/// Ed25519 identity (base64, as `master-key-ed25519`).
fn tor_made_keys(dir: &Path) -> Result<(DataFiles, String, String)> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let torrc = dir.with_extension("torrc");
    std::fs::write(&torrc, "")?;
    let out = Command::new("tor")
        .args(["--list-fingerprint", "-f"])
        .arg(&torrc)
        .args(["--ORPort", "9001", "--Nickname", "weft", "--SocksPort", "0"])
        .args(["--Log", "err stderr", "--DataDirectory"])
        .arg(dir)
        .output()
        .context("stock tor (scripts/install-deps.sh installs it)")?;
    ensure!(
        out.status.success(),
        "tor: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir.join("keys"))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        files.push((format!("keys/{name}"), std::fs::read(e.path())?));
    }
    let fp = std::fs::read_to_string(dir.join("fingerprint"))?;
    let ed = std::fs::read_to_string(dir.join("fingerprint-ed25519"))?;
    let last = |s: &str| s.split_whitespace().last().unwrap_or_default().to_string();
    Ok((files, last(&fp), last(&ed)))
}

#[test]
fn a_relay_moves_from_tor_to_weft_and_back_in_the_consensus() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-keymove-{}", std::process::id()));
    let made = tempfile::tempdir()?;
    let (files, fp, ed) = tor_made_keys(&made.path().join("tor"))?;
    let fp_bytes = hex::decode(&fp)?;
    let id_b64 =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD_NO_PAD, &fp_bytes);
    eprintln!("[keymove] stock tor's keys: {fp}, Ed25519 {ed}");

    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 2;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.data_files = files;
    // tor's bandwidth history (its state file's items), to be carried on.
    let ends = iso(time::OffsetDateTime::now_utc() + time::Duration::hours(1));
    let history = format!("{READ_VALUES},0");
    w.data_files.push((
        "state".into(),
        format!(
            "# Tor state file\nBWHistoryReadEnds {ends}\nBWHistoryReadInterval 86400\nBWHistoryReadValues {history}\n"
        )
        .into_bytes(),
    ));
    cfg.weft = Some(w);
    let mut net = common::start_testnet("keymove", cfg)?;
    let weft_fp = net.weft().context("weft")?.fingerprint()?.to_string();
    ensure!(weft_fp == fp, "weft runs as {weft_fp}, not tor's {fp}");
    net.wait_until_listed(&[&fp], &["Running", "Valid"], BOUND)?;
    let desc = authority_descriptor(&net, &fp);
    ensure!(
        line_value(&desc, "master-key-ed25519 ") == ed,
        "auth0 holds weft's descriptor with another Ed25519 key: {desc}"
    );
    eprintln!(
        "[keymove] weft listed: {}",
        wait_consensus(&net, "weft", &id_b64, "0")?
    );

    // Back to stock tor, on weft's DataDirectory.
    let node = net.weft().context("weft")?.clone();
    let port = node.or_addr().context("weft's ORPort")?.port();
    net.stop_weft()?;
    let since = utc_now();
    let torrc = node.dir.join("stock-torrc");
    let mut text = format!(
        "TestingTorNetwork 1\nNickname weft\nDataDirectory {d}\nORPort 127.0.0.1:{port}\nAddress 127.0.0.1\nSocksPort 0\nAssumeReachable 1\nExitRelay 0\nExitPolicy reject *:*\nLog notice file {d}/stock-notice.log\nPathsNeededToBuildCircuits 0.67\n",
        d = node.dir.display()
    );
    for l in net.dir_authority_lines() {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&torrc, text)?;
    let defaults = net.config().base_dir.join("torrc-defaults");
    let _tor = StockRelay(
        Command::new("tor")
            .arg("--defaults-torrc")
            .arg(&defaults)
            .arg("-f")
            .arg(&torrc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting stock tor on weft's DataDirectory")?,
    );
    let t0 = Instant::now();
    let desc = loop {
        let d = authority_descriptor(&net, &fp);
        if line_value(&d, "platform ").starts_with("Tor ") {
            break d;
        }
        let log = std::fs::read_to_string(node.dir.join("stock-notice.log")).unwrap_or_default();
        ensure!(
            t0.elapsed() < BOUND,
            "auth0 never took stock tor's descriptor for {fp}; tor's log:\n{log}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    ensure!(
        line_value(&desc, "master-key-ed25519 ") == ed,
        "stock tor published another Ed25519 key: {desc}"
    );
    eprintln!(
        "[keymove] stock tor on weft's DataDirectory listed: {}",
        wait_consensus(&net, "weft", &id_b64, &since)?
    );
    // tor took weft's state file (C's items, the history carried on).
    drop(_tor);
    let state = std::fs::read_to_string(node.dir.join("state"))?;
    let read = line_value(&state, "BWHistoryReadValues ");
    ensure!(
        read.starts_with(READ_VALUES),
        "the read history did not survive weft and tor: {read:?}\n{state}"
    );
    let log = std::fs::read_to_string(node.dir.join("stock-notice.log"))?;
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("[warn]") && l.to_ascii_lowercase().contains("state"))
        .collect();
    ensure!(
        complaints.is_empty(),
        "tor complained of the state file: {complaints:?}"
    );
    eprintln!("[keymove] tor's state after weft: BWHistoryReadValues {read}");
    net.stop()?;
    let _ = std::fs::remove_dir_all(&base_dir);
    Ok(())
}
