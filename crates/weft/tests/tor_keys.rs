//! A relay's keys move between stock tor and weft (issue 52): tor's
//! DataDirectory read by weft gives the same RSA fingerprint and Ed25519
//! identity and changes no key file; weft's read by tor likewise; with the
//! master secret key taken away (kept offline), weft runs on the signing
//! key and writes no new master key. Stock tor makes and reads the keys
//! with `--list-fingerprint`.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};

const KEY_FILES: &[&str] = &[
    "ed25519_master_id_public_key",
    "ed25519_master_id_secret_key",
    "ed25519_signing_cert",
    "ed25519_signing_secret_key",
    "secret_id_key",
    "secret_onion_key",
    "secret_onion_key_ntor",
];

fn private_dir(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p)?;
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(())
}

/// `tor --list-fingerprint` on `dir`: its fingerprint line.
fn tor_fingerprint(dir: &Path) -> Result<String> {
    let out = Command::new("tor")
        .args([
            "--list-fingerprint",
            "--ORPort",
            "9001",
            "--Nickname",
            "keyMove",
        ])
        .args([
            "--SocksPort",
            "0",
            "--ContactInfo",
            "x",
            "--Log",
            "err stderr",
        ])
        .arg("--DataDirectory")
        .arg(dir)
        .output()
        .context("stock tor (scripts/install-deps.sh installs it)")?;
    ensure!(
        out.status.success(),
        "tor: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    last_line(&out.stdout)
}

/// `weft --list-fingerprint` on `dir`: its fingerprint line.
fn weft_fingerprint(dir: &Path) -> Result<String> {
    let torrc = dir.with_extension("torrc");
    std::fs::write(
        &torrc,
        format!(
            "ORPort 9001\nAddress 198.51.100.3\nNickname keyMove\nDataDirectory {}\n",
            dir.display()
        ),
    )?;
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("--list-fingerprint")
        .arg("-f")
        .arg(&torrc)
        .output()?;
    ensure!(
        out.status.success(),
        "weft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    last_line(&out.stdout)
}

fn last_line(out: &[u8]) -> Result<String> {
    Ok(String::from_utf8_lossy(out)
        .lines()
        .last()
        .context("no output")?
        .to_string())
}

fn key_bytes(dir: &Path) -> Result<Vec<Vec<u8>>> {
    KEY_FILES
        .iter()
        .map(|f| std::fs::read(dir.join("keys").join(f)).with_context(|| f.to_string()))
        .collect()
}

fn ed_id(dir: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(dir.join("fingerprint-ed25519"))?)
}

#[test]
fn a_relays_keys_move_from_tor_to_weft_and_back() -> Result<()> {
    let tmp = tempfile::tempdir()?;

    // tor's DataDirectory, read by weft.
    let t = tmp.path().join("from-tor");
    private_dir(&t)?;
    let tor_fp = tor_fingerprint(&t)?;
    let (tor_id, tor_keys) = (ed_id(&t)?, key_bytes(&t)?);
    ensure!(
        weft_fingerprint(&t)? == tor_fp,
        "weft read another identity"
    );
    ensure!(ed_id(&t)? == tor_id, "weft read another Ed25519 identity");
    ensure!(key_bytes(&t)? == tor_keys, "weft changed tor's key files");
    // And back to tor.
    ensure!(tor_fingerprint(&t)? == tor_fp);

    // weft's DataDirectory, read by tor.
    let w = tmp.path().join("from-weft");
    private_dir(&w)?;
    let weft_fp = weft_fingerprint(&w)?;
    let (weft_id, weft_keys) = (ed_id(&w)?, key_bytes(&w)?);
    ensure!(tor_fingerprint(&w)? == weft_fp, "tor read another identity");
    ensure!(ed_id(&w)? == weft_id, "tor read another Ed25519 identity");
    ensure!(key_bytes(&w)? == weft_keys, "tor changed weft's key files");

    // The master secret key kept offline: weft runs on the signing key
    // (the public key file says who it is) and makes no new master key.
    std::fs::remove_file(t.join("keys/ed25519_master_id_secret_key"))?;
    ensure!(weft_fingerprint(&t)? == tor_fp);
    ensure!(ed_id(&t)? == tor_id);
    ensure!(
        !t.join("keys/ed25519_master_id_secret_key").exists(),
        "weft wrote a new master key"
    );
    // Without the public key either, weft refuses rather than replace it.
    std::fs::remove_file(t.join("keys/ed25519_master_id_public_key"))?;
    ensure!(
        weft_fingerprint(&t).is_err(),
        "weft ran without its identity"
    );
    ensure!(!t.join("keys/ed25519_master_id_secret_key").exists());
    Ok(())
}
