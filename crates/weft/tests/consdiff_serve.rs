//! weft serves consensus diffs to stock tor (issue 35, `DirCache=2`,
//! acceptance 1), on loopback: 3 stock authorities (a consensus every 20
//! seconds), 3 stock relays with `DirCache 0`, 1 stock exit, and weft,
//! voted V2Dir and Guard by the authorities' own rules.
//!
//! A stock client whose only directory source is weft (the authorities'
//! real identities at dead addresses, weft its only `FallbackDir` and
//! `EntryNodes`) bootstraps, is stopped (its `cached-microdesc-consensus`
//! stays in its DataDirectory), and is started again once the network has
//! a newer consensus and weft has made the diff from the client's one.
//! The client must then log C's "Applied consensus diff" for a diff from
//! weft, its consensus must equal the authorities' of the same
//! valid-after byte for byte, and weft's MetricsPort must count the diff.
//! weft's diff must equal, byte for byte, the diff stock tor's own
//! `consdiffmgr.c` made for the same two consensuses (the authorities are
//! directory caches and store theirs in `diff-cache`).

use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use weft_testnet::IsolatedClient;

use anyhow::{ensure, Context, Result};
use weft_dir::consdiff;

/// Bound on every wait.
const BOUND: Duration = Duration::from_secs(300);

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn valid_after(doc: &str) -> Option<&str> {
    doc.lines().find_map(|l| l.strip_prefix("valid-after "))
}

/// weft's stored diffs (identity form) from the consensus whose digest
/// as signed is `base`: (file name, text).
fn weft_diffs_from(weft_dir: &Path, base: &[u8; 32]) -> Vec<(String, String)> {
    let want = format!("hash {}", hex::encode_upper(base));
    let Ok(rd) = std::fs::read_dir(weft_dir.join("diff-cache")) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("diff-microdesc-") && n.ends_with(".txt"))
        .filter_map(|n| {
            let text = read(&weft_dir.join("diff-cache").join(&n));
            text.lines().nth(1)?.starts_with(&want).then_some((n, text))
        })
        .collect()
}

/// The identity-compressed microdesc diffs stock tor's `consdiffmgr.c`
/// stored under `data_dir/diff-cache` (C's storage-dir format: `key value`
/// label lines, a NUL, the body; no `compression` label) from the consensus whose digest as signed
/// is `base` to the one whose full digest is `target`.
fn stock_diffs(data_dir: &Path, base: &[u8; 32], target: &[u8; 32]) -> Vec<Vec<u8>> {
    let want = [
        "document-type consensus-diff".to_owned(),
        "consensus-flavor microdesc".to_owned(),
        format!("from-sha3-digest {}", hex::encode_upper(base)),
        format!("target-sha3-digest {}", hex::encode_upper(target)),
    ];
    let Ok(rd) = std::fs::read_dir(data_dir.join("diff-cache")) else {
        return Vec::new();
    };
    rd.filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .filter_map(|bytes| {
            let nul = bytes.iter().position(|b| *b == 0)?;
            let labels = String::from_utf8_lossy(&bytes[..nul]);
            let has = |l: &String| labels.lines().any(|x| x.eq_ignore_ascii_case(l));
            // NO_METHOD has no `compression` label.
            let identity = !labels.lines().any(|x| x.starts_with("compression "));
            (identity && want.iter().all(has)).then(|| bytes[nul + 1..].to_vec())
        })
        .collect()
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

#[test]
fn stock_client_with_an_older_consensus_gets_a_diff_from_weft() -> Result<()> {
    let metrics_port = common::free_port();
    let mut cfg = common::weft_only_cache_config("consdiff");
    let base_dir = cfg.base_dir.clone();
    cfg.weft = Some(common::weft_node(2, metrics_port));
    let mut net = common::start_testnet("consdiff", cfg)?;
    let weft = net.weft().context("weft")?;
    let fp = weft.fingerprint()?.to_string();
    let weft_or_port = weft.or_addr().context("weft ORPort")?.port();
    let weft_dir = weft.dir.clone();
    let auth_md = net.node("auth0")?.dir.join("cached-microdesc-consensus");
    common::wait_stock_listed(&mut net, &fp, BOUND)?;
    net.wait_until_listed(&[&fp], &["Running", "Valid", "V2Dir", "Guard"], BOUND)?;
    eprintln!("[consdiff] weft listed V2Dir and Guard");

    // 1. The client gets consensus N from weft, and stops.
    let client_dir = base_dir.join("isolated");
    let client = IsolatedClient::start(&net, &fp, weft_or_port, &client_dir)?;
    client.wait_bootstrapped(BOUND)?;
    drop(client);
    let old = read(&client_dir.join("data").join("cached-microdesc-consensus"));
    let old_va = valid_after(&old)
        .context("the client's consensus")?
        .to_owned();
    let base = consdiff::digest_as_signed(old.as_bytes());
    eprintln!("[consdiff] client stopped with the consensus of {old_va}");

    // 2. The network moves on; weft makes the diff from N.
    let deadline = Instant::now() + BOUND;
    let (name, stored) = loop {
        if let Some(d) = weft_diffs_from(&weft_dir, &base).pop() {
            break d;
        }
        ensure!(Instant::now() < deadline, "weft made no diff from {old_va}");
        std::thread::sleep(Duration::from_secs(1));
    };
    let target = consdiff::apply(&old, &stored).context("weft's stored diff")?;
    eprintln!(
        "[consdiff] weft's {name}: {} bytes (x-tor-lzma {}, x-zstd {}, gzip {}) for a \
         consensus of {} bytes (valid-after {})",
        stored.len(),
        file_size(
            &weft_dir
                .join("diff-cache")
                .join(name.replace(".txt", ".lzma"))
        ),
        file_size(
            &weft_dir
                .join("diff-cache")
                .join(name.replace(".txt", ".zst"))
        ),
        file_size(
            &weft_dir
                .join("diff-cache")
                .join(name.replace(".txt", ".gz"))
        ),
        target.len(),
        valid_after(&target).unwrap_or("?"),
    );
    // The same diff made by stock tor's own code: the authorities are
    // directory caches and keep their diffs in `diff-cache`.
    let target_digest = consdiff::digest(target.as_bytes());
    let auths: Vec<_> = ["auth0", "auth1", "auth2"]
        .iter()
        .map(|a| net.node(a).map(|n| n.dir.clone()))
        .collect::<Result<_>>()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let theirs = loop {
        if let Some(d) = auths
            .iter()
            .find_map(|a| stock_diffs(a, &base, &target_digest).pop())
        {
            break d;
        }
        ensure!(
            Instant::now() < deadline,
            "no authority stored a microdesc diff from {old_va} to weft's target"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    ensure!(
        theirs == stored.as_bytes(),
        "weft's diff differs from stock tor's for the same consensuses:\n--- weft\n{stored}\n--- tor\n{}",
        String::from_utf8_lossy(&theirs)
    );
    eprintln!(
        "[consdiff] weft's diff equals stock tor's (an authority's consdiffmgr), byte for byte ({} bytes)",
        theirs.len()
    );
    // Let weft's workers receive the snapshot with the diffs.
    std::thread::sleep(Duration::from_secs(2));

    // 3. The client starts again from N and asks weft.
    let log_before = read(&client_dir.join("info.log")).len();
    let client = IsolatedClient::start(&net, &fp, weft_or_port, &client_dir)?;
    let deadline = Instant::now() + BOUND;
    let mut applied = Vec::new();
    let mut matched = None;
    while matched.is_none() {
        ensure!(
            Instant::now() < deadline,
            "no diff applied and matched; applied: {applied:?}; client's info log:\n{}",
            client.info_log().get(log_before..).unwrap_or("")
        );
        std::thread::sleep(Duration::from_millis(500));
        applied = client
            .info_log()
            .get(log_before..)
            .unwrap_or("")
            .lines()
            .filter(|l| l.contains("Applied consensus diff"))
            .map(str::to_owned)
            .collect();
        if applied.is_empty() {
            continue;
        }
        // The client's consensus against the authorities' of the same
        // valid-after (the network may have moved on meanwhile).
        let (mine, theirs) = (client.consensus(), read(&auth_md));
        if let (Some(a), Some(b)) = (valid_after(&mine), valid_after(&theirs)) {
            if a == b {
                ensure!(
                    mine == theirs,
                    "the client's consensus of {a} differs from auth0's"
                );
                matched = Some(a.to_owned());
            }
        }
    }
    eprintln!("[consdiff] client: {}", applied[0].trim());
    eprintln!(
        "[consdiff] client's consensus of {} equals auth0's (sha3 {})",
        matched.unwrap_or_default(),
        hex::encode_upper(consdiff::digest(client.consensus().as_bytes()))
    );
    // The workers count what they serve in their once-a-second report.
    let mut body = String::new();
    let mut md = 0.0;
    for _ in 0..20 {
        body = common::testnet_metrics(&net, metrics_port)?;
        md = common::metric_sum(
            &body,
            "weft_dir_consensus_diffs_served_total{flavor=\"microdesc\"}",
        );
        if md >= 1.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    eprintln!(
        "[consdiff] weft's MetricsPort: {}",
        body.lines()
            .filter(|l| l.starts_with("weft_dir_consensus_diff"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    ensure!(md >= 1.0, "weft counted no microdesc diff served");
    drop(client);
    net.stop()?;
    Ok(())
}
