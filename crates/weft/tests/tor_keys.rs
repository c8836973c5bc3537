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

/// `PROGRAM --keygen` (tor or weft) on `dir` with `pass` on its stdin
/// (`--passphrase-fd 0`, read to its end as C does).
fn keygen(program: &str, dir: &Path, pass: &str, extra: &[&str]) -> Result<String> {
    use std::io::Write;
    let torrc = dir.with_extension("keygen.torrc");
    std::fs::write(&torrc, format!("DataDirectory {}\n", dir.display()))?;
    let mut child = Command::new(program)
        .args(["--keygen", "--passphrase-fd", "0", "-f"])
        .arg(&torrc)
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(pass.as_bytes())?;
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{program} --keygen: {text}");
    Ok(text)
}

/// `PROGRAM --key-expiration sign` on `dir`: its `signing-cert-expiry:` line.
fn key_expiration(program: &str, dir: &Path) -> Result<String> {
    let torrc = dir.with_extension("keygen.torrc");
    std::fs::write(&torrc, format!("DataDirectory {}\n", dir.display()))?;
    let out = Command::new(program)
        .args(["--key-expiration", "sign", "-f"])
        .arg(&torrc)
        .output()?;
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("signing-cert-expiry: "))
        .map(str::to_owned)
        .with_context(|| format!("{program} --key-expiration sign: {text}"))
}

/// The offline master key workflow with both programs: a master key made
/// by `tor --keygen` under a passphrase opens in `weft --keygen` and the
/// other way round; each program's new signing certificate is read by the
/// other (`--key-expiration sign`); a relay given only the public key and
/// the signing key and certificate runs with the identity it names.
#[test]
fn keygen_output_works_in_both_programs() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let weft = env!("CARGO_BIN_EXE_weft");
    let pass = "correct horse battery\n";
    for (first, second) in [("tor", weft), (weft, "tor")] {
        let d = tmp.path().join(format!(
            "keygen-{}",
            first.rsplit('/').next().unwrap_or(first)
        ));
        private_dir(&d)?;
        keygen(first, &d, pass, &[])?;
        let keys = d.join("keys");
        ensure!(
            keys.join("ed25519_master_id_secret_key_encrypted").exists()
                && !keys.join("ed25519_master_id_secret_key").exists(),
            "{first} --keygen did not encrypt the master key"
        );
        let public = std::fs::read(keys.join("ed25519_master_id_public_key"))?;
        let cert1 = std::fs::read(keys.join("ed25519_signing_cert"))?;
        // The other program opens the box and signs a new key with it.
        keygen(second, &d, pass, &[])?;
        ensure!(
            std::fs::read(keys.join("ed25519_master_id_public_key"))? == public,
            "{second} --keygen changed the identity"
        );
        ensure!(
            std::fs::read(keys.join("ed25519_signing_cert"))? != cert1,
            "{second} --keygen made no new signing certificate"
        );
        let (t, w) = (key_expiration("tor", &d)?, key_expiration(weft, &d)?);
        ensure!(t == w, "tor says {t:?}, weft says {w:?}");
        // A wrong passphrase opens nothing.
        ensure!(keygen(second, &d, "wrong\n", &[]).is_err());

        // The server: the public key, the signing key and certificate.
        let s = d.with_extension("server");
        private_dir(&s.join("keys"))?;
        for f in [
            "ed25519_master_id_public_key",
            "ed25519_signing_cert",
            "ed25519_signing_secret_key",
        ] {
            std::fs::copy(keys.join(f), s.join("keys").join(f))?;
        }
        weft_fingerprint(&s)?;
        let weft_id = ed_id(&s)?;
        ensure!(tor_fingerprint(&s)?.len() > 40);
        ensure!(
            ed_id(&s)? == weft_id,
            "tor and weft name different identities"
        );
        ensure!(!s.join("keys/ed25519_master_id_secret_key").exists());
        eprintln!("[keygen] {first} made, {second} signed: {w}, Ed25519 {weft_id}");
    }
    Ok(())
}
