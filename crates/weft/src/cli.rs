//! weft's command line, as tor's: `-f FILE` (default
//! `/etc/weft/torrc`), `--defaults-torrc FILE` (default
//! `/etc/weft/torrc-defaults` when it exists), `--ignore-missing-torrc`,
//! `--verify-config`, `--list-fingerprint`, `--hash-password PASSWORD`,
//! `--keygen-family NAME`, `--keygen` (with `--newpass`, `--passphrase-fd
//! FD`, `--no-passphrase`), `--key-expiration sign` (with `--format
//! iso8601|timestamp`),
//! `--version`, `--help`, `--quiet`/`--hush`, and any option as
//! `--Option value` (it replaces the files' values of that option).

use std::path::PathBuf;

use crate::config_files::Sources;

/// The default torrc.
pub const DEFAULT_TORRC: &str = "/etc/weft/torrc";
/// The default defaults file (used when it exists).
pub const DEFAULT_DEFAULTS_TORRC: &str = "/etc/weft/torrc-defaults";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run the relay.
    Run,
    /// Check the configuration and exit.
    VerifyConfig,
    /// Print the nickname and RSA fingerprint (creating keys if needed).
    ListFingerprint,
    /// Print a HashedControlPassword for this password.
    HashPassword(String),
    /// Write a new family key `NAME.secret_family_key` in the current
    /// directory and print its `FamilyId` line.
    KeygenFamily(String),
    /// Make a new signing key and certificate with the master key
    /// (creating it where there is none), as `tor --keygen`.
    Keygen,
    /// Print when the signing certificate expires (`--key-expiration
    /// sign`).
    KeyExpiration,
    /// Print the version.
    Version,
    /// Print the usage.
    Help,
}

/// The parsed command line.
#[derive(Debug, Clone)]
pub struct Cli {
    /// What to do.
    pub action: Action,
    /// Where the configuration comes from.
    pub sources: Sources,
    /// `--quiet` / `--hush`: no start-up chatter on the terminal.
    pub quiet: bool,
    /// The passphrase options of `--keygen`.
    pub keygen: KeygenFlags,
}

/// `--newpass`, `--passphrase-fd FD`, `--no-passphrase`, `--format`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeygenFlags {
    /// `--newpass`: store the master key under a new passphrase.
    pub new_passphrase: bool,
    /// `--passphrase-fd FD`: read passphrases from this descriptor.
    pub passphrase_fd: Option<i32>,
    /// `--no-passphrase`: never ask; the master key is stored in the clear.
    pub no_passphrase: bool,
    /// `--format timestamp` for `--key-expiration` (default ISO 8601).
    pub timestamp: bool,
}

/// The usage text.
pub const USAGE: &str = "\
weft: a multi-threaded Tor relay
usage: weft [-f FILE] [--defaults-torrc FILE] [--ignore-missing-torrc]
            [--verify-config | --list-fingerprint | --hash-password PW |
             --keygen-family NAME | --keygen [--newpass]
             [--passphrase-fd FD | --no-passphrase] |
             --key-expiration sign [--format iso8601|timestamp] |
             --version | --help] [--quiet] [--Option value ...]
";

/// Parse the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Cli, String> {
    let mut action = Action::Run;
    let mut torrc: Option<PathBuf> = None;
    let mut defaults: Option<PathBuf> = None;
    let mut ignore_missing = false;
    let mut quiet = false;
    let mut command_line = Vec::new();
    let mut keygen = KeygenFlags::default();
    let mut format: Option<String> = None;
    let mut it = args.iter();
    let set = |a: Action, action: &mut Action| -> Result<(), String> {
        if *action != Action::Run {
            return Err("give only one of --verify-config, --list-fingerprint, --hash-password, --keygen-family, --keygen, --key-expiration, --version, --help".into());
        }
        *action = a;
        Ok(())
    };
    while let Some(a) = it.next() {
        let mut value = |what: &str| -> Result<String, String> {
            it.next().cloned().ok_or(format!("{what} needs a value"))
        };
        match a.as_str() {
            "-f" | "--torrc-file" => torrc = Some(PathBuf::from(value(a)?)),
            "--defaults-torrc" => defaults = Some(PathBuf::from(value(a)?)),
            "--ignore-missing-torrc" => ignore_missing = true,
            "--verify-config" => set(Action::VerifyConfig, &mut action)?,
            "--list-fingerprint" => set(Action::ListFingerprint, &mut action)?,
            "--hash-password" => {
                let pw = value(a)?;
                set(Action::HashPassword(pw), &mut action)?
            }
            "--keygen-family" => {
                let name = value(a)?;
                set(Action::KeygenFamily(name), &mut action)?
            }
            "--keygen" => set(Action::Keygen, &mut action)?,
            "--key-expiration" => {
                let what = value(a)?;
                if what != "sign" {
                    return Err(format!(
                        "--key-expiration: '{what}' is not a key type (only 'sign')"
                    ));
                }
                set(Action::KeyExpiration, &mut action)?
            }
            "--format" => format = Some(value(a)?),
            "--newpass" => keygen.new_passphrase = true,
            "--no-passphrase" => keygen.no_passphrase = true,
            "--passphrase-fd" => {
                let v = value(a)?;
                keygen.passphrase_fd = Some(
                    v.parse()
                        .map_err(|_| format!("--passphrase-fd: '{v}' is not a descriptor"))?,
                );
            }
            "--version" => set(Action::Version, &mut action)?,
            "-h" | "--help" => set(Action::Help, &mut action)?,
            "--quiet" | "--hush" => quiet = true,
            o if o.starts_with("--") && o.len() > 2 => {
                let v = value(o)?;
                command_line.push((o[2..].to_string(), v));
            }
            other => return Err(format!("unexpected argument '{other}' (see weft --help)")),
        }
    }
    // C's handle_cmdline_* checks.
    if keygen.no_passphrase && (keygen.new_passphrase || keygen.passphrase_fd.is_some()) {
        return Err("--no-passphrase cannot go with --newpass or --passphrase-fd".into());
    }
    if (keygen != KeygenFlags::default()) && action != Action::Keygen {
        return Err("--newpass, --passphrase-fd and --no-passphrase go with --keygen".into());
    }
    match format.as_deref() {
        None | Some("iso8601") => {}
        Some("timestamp") => keygen.timestamp = true,
        Some(f) => return Err(format!("--format: '{f}' (iso8601 or timestamp)")),
    }
    if format.is_some() && action != Action::KeyExpiration {
        return Err("--format goes with --key-expiration".into());
    }
    let defaults = defaults.or_else(|| {
        let d = PathBuf::from(DEFAULT_DEFAULTS_TORRC);
        d.exists().then_some(d)
    });
    Ok(Cli {
        action,
        sources: Sources {
            torrc: torrc.unwrap_or_else(|| PathBuf::from(DEFAULT_TORRC)),
            defaults,
            ignore_missing_torrc: ignore_missing,
            command_line,
        },
        quiet,
        keygen,
    })
}

/// A fingerprint in groups of four, as `tor --list-fingerprint` prints it.
pub fn spaced_fingerprint(hex: &str) -> String {
    hex.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: &[&str]) -> Result<Cli, String> {
        parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn tor_like_arguments() {
        let c = p(&[
            "-f",
            "/x/torrc",
            "--verify-config",
            "--ORPort",
            "9001",
            "--Nickname",
            "n",
        ])
        .unwrap();
        assert_eq!(c.action, Action::VerifyConfig);
        assert_eq!(c.sources.torrc, PathBuf::from("/x/torrc"));
        assert_eq!(
            c.sources.command_line,
            vec![
                ("ORPort".into(), "9001".into()),
                ("Nickname".into(), "n".into())
            ]
        );
        assert_eq!(p(&[]).unwrap().sources.torrc, PathBuf::from(DEFAULT_TORRC));
        assert_eq!(
            p(&["--hash-password", "pw"]).unwrap().action,
            Action::HashPassword("pw".into())
        );
        assert_eq!(
            p(&["--keygen-family", "Fam"]).unwrap().action,
            Action::KeygenFamily("Fam".into())
        );
        assert!(p(&["--keygen-family"]).is_err());
        assert!(p(&["--version", "--help"]).is_err());
        assert!(p(&["-f"]).unwrap_err().contains("needs a value"));
        assert!(p(&["--ORPort"]).is_err());
        assert!(p(&["stray"]).is_err());
        assert_eq!(spaced_fingerprint("AAAABBBBCC"), "AAAA BBBB CC");
    }

    #[test]
    fn keygen_flags_as_tor_takes_them() {
        let c = p(&["--keygen", "--passphrase-fd", "3", "--newpass"]).unwrap();
        assert_eq!(c.action, Action::Keygen);
        assert_eq!(c.keygen.passphrase_fd, Some(3));
        assert!(c.keygen.new_passphrase);
        assert!(
            p(&["--keygen", "--no-passphrase"])
                .unwrap()
                .keygen
                .no_passphrase
        );
        assert!(p(&["--keygen", "--no-passphrase", "--newpass"]).is_err());
        assert!(p(&["--newpass"]).is_err());
        let c = p(&["--key-expiration", "sign", "--format", "timestamp"]).unwrap();
        assert_eq!(c.action, Action::KeyExpiration);
        assert!(c.keygen.timestamp);
        assert!(p(&["--key-expiration", "link"]).is_err());
        assert!(p(&["--key-expiration", "sign", "--format", "rfc2822"]).is_err());
        assert!(p(&["--format", "iso8601"]).is_err());
    }
}
