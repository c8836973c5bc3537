//! Node identities made before any tor starts: authority keys and
//! certificates from `tor-gencert`, relay RSA identities from
//! `tor --list-fingerprint`, and reading fingerprints back (`<datadir>/fingerprint`,
//! the `fingerprint` line of `authority_certificate`) for stock tor and weft alike.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::tools::{run_bounded, TorBinaries};

/// Time bound for one key-generation command (tor-gencert makes a 3072-bit
/// RSA key; under load this can take several seconds).
const KEYGEN_LIMIT: Duration = Duration::from_secs(120);

/// Create `<keys_dir>/authority_{identity_key,signing_key,certificate}` for an
/// authority whose DirPort is `127.0.0.1:<dir_port>`; returns its v3ident (the
/// certificate's `fingerprint`, 40 upper-case hex digits).
pub fn make_authority_keys(bins: &TorBinaries, keys_dir: &Path, dir_port: u16) -> Result<String> {
    create_private_dir(keys_dir)?;
    let out = run_bounded(
        Command::new(&bins.gencert)
            .current_dir(keys_dir)
            .arg("--create-identity-key")
            .args(["-m", "12"])
            .args(["-a", &format!("127.0.0.1:{dir_port}")])
            .args(["-i", "authority_identity_key"])
            .args(["-s", "authority_signing_key"])
            .args(["-c", "authority_certificate"])
            .args(["--passphrase-fd", "0"]),
        Some(b"\n"),
        KEYGEN_LIMIT,
    )?;
    if !out.status.success() {
        bail!(
            "tor-gencert failed in {} ({}): {}{}",
            keys_dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    read_v3ident(&keys_dir.join("authority_certificate"))
}

/// The v3 identity fingerprint inside an `authority_certificate`.
pub fn read_v3ident(cert: &Path) -> Result<String> {
    let text = fs::read_to_string(cert).with_context(|| format!("reading {}", cert.display()))?;
    let fp = text
        .lines()
        .find_map(|l| l.strip_prefix("fingerprint "))
        .with_context(|| format!("no fingerprint line in {}", cert.display()))?;
    normalize_fingerprint(fp).with_context(|| format!("in {}", cert.display()))
}

/// Generate the RSA (and Ed25519) relay identity in `data_dir` without starting
/// tor, the way chutney does; returns the RSA fingerprint.
pub fn make_relay_identity(bins: &TorBinaries, data_dir: &Path, nickname: &str) -> Result<String> {
    create_private_dir(data_dir)?;
    let empty = data_dir.join("empty-torrc");
    fs::write(&empty, "").with_context(|| format!("writing {}", empty.display()))?;
    let out = run_bounded(
        Command::new(&bins.tor)
            .arg("--defaults-torrc")
            .arg(&empty)
            .arg("-f")
            .arg(&empty)
            .arg("--list-fingerprint")
            .args(["--orport", "1"])
            .args(["--nickname", nickname])
            .args([
                "--dirserver",
                "xyzzy 127.0.0.1:1 ffffffffffffffffffffffffffffffffffffffff",
            ])
            .arg("--datadirectory")
            .arg(data_dir)
            .arg("--quiet"),
        None,
        KEYGEN_LIMIT,
    )?;
    let _ = fs::remove_file(&empty);
    if !out.status.success() {
        bail!(
            "tor --list-fingerprint failed for {} ({}): {}{}",
            data_dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let (_, fp) = read_fingerprint(data_dir)?;
    Ok(fp)
}

/// Read `<data_dir>/fingerprint` (`<nickname> <40 hex>`, as written by tor and
/// by weft): returns (nickname, upper-case hex fingerprint).
pub fn read_fingerprint(data_dir: &Path) -> Result<(String, String)> {
    let path = data_dir.join("fingerprint");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let line = text.lines().next().unwrap_or("").trim();
    let (nick, fp) = line.split_once(' ').with_context(|| {
        format!(
            "{}: expected '<nickname> <fingerprint>', got {line:?}",
            path.display()
        )
    })?;
    let fp = normalize_fingerprint(fp).with_context(|| format!("in {}", path.display()))?;
    Ok((nick.to_string(), fp))
}

/// Wait (bounded) until `<data_dir>/fingerprint` exists and parses — for a
/// relay that writes it at start-up, such as weft.
pub fn wait_for_fingerprint(data_dir: &Path, timeout: Duration) -> Result<(String, String)> {
    let deadline = Instant::now() + timeout;
    loop {
        match read_fingerprint(data_dir) {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("no usable fingerprint file after {timeout:?}")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Upper-case a fingerprint, dropping spaces and a leading `$`; an error
/// unless 40 hex digits remain.
pub fn normalize_fingerprint(fp: &str) -> Result<String> {
    let s: String = fp
        .trim()
        .trim_start_matches('$')
        .split_whitespace()
        .collect();
    if s.len() != 40 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("not a 40-hex-digit fingerprint: {fp:?}");
    }
    Ok(s.to_ascii_uppercase())
}

/// Create `dir` (and parents) with mode 0700, as tor insists for its
/// DataDirectory and keys directory.
pub(crate) fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 700 {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_normalize() {
        let fp =
            normalize_fingerprint("$05d6 4B82 9FEE AD16 7460 5BDE C6EA 4911 4E7D 428a").unwrap();
        assert_eq!(fp, "05D64B829FEEAD1674605BDEC6EA49114E7D428A");
        assert!(normalize_fingerprint("05D6").is_err());
        assert!(normalize_fingerprint(&"G".repeat(40)).is_err());
    }

    #[test]
    fn reads_fingerprint_file() {
        let dir = std::env::temp_dir().join(format!("weft-testnet-fp-{}", std::process::id()));
        create_private_dir(&dir).unwrap();
        fs::write(
            dir.join("fingerprint"),
            "relay0 05D64B829FEEAD1674605BDEC6EA49114E7D428A\n",
        )
        .unwrap();
        let (nick, fp) = read_fingerprint(&dir).unwrap();
        assert_eq!(nick, "relay0");
        assert_eq!(fp, "05D64B829FEEAD1674605BDEC6EA49114E7D428A");
        fs::remove_dir_all(&dir).unwrap();
    }
}
