//! `weft --keygen` and `weft --key-expiration sign`, as tor's: the
//! `DataDirectory` and `SigningKeyLifetime` come from the torrc and the
//! command line (a keygen machine's torrc needs no ORPort), the
//! passphrase from a terminal prompt, from `--passphrase-fd FD` (read to
//! its end, newline and all, as C's `read_all_from_fd`), or none with
//! `--no-passphrase`. The key work is `weft_crypto::keygen`.

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weft_crypto::keygen::Passphrases;

use crate::cli::KeygenFlags;
use crate::config_files::{gather, Sources};

/// The options `--keygen` reads.
struct KeyOptions {
    data_dir: PathBuf,
    signing_lifetime: Duration,
}

fn key_options(src: &Sources) -> Result<KeyOptions, String> {
    let lines = gather(src).map_err(|e| e.to_string())?;
    let last = |name: &str| {
        lines
            .iter()
            .rev()
            .find(|l| l.key.eq_ignore_ascii_case(name))
            .map(|l| l.value.clone())
    };
    let signing_lifetime = match last("SigningKeyLifetime") {
        None => Duration::from_secs(30 * 86400),
        Some(v) => {
            let s = crate::config_units::interval(&v)?;
            if s < 2 * 86400 {
                return Err("SigningKeyLifetime is too short.".into());
            }
            Duration::from_secs(s)
        }
    };
    Ok(KeyOptions {
        data_dir: last("DataDirectory")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/weft")),
        signing_lifetime,
    })
}

/// C's `do_getpass`.
struct Getpass {
    flags: KeygenFlags,
    /// What was read from `--passphrase-fd` (read once: C reads the fd
    /// for each question, and a pipe has nothing more the second time).
    from_fd: Option<Vec<u8>>,
}

impl Getpass {
    fn read(&mut self, prompt: &str, twice: bool) -> Result<Vec<u8>, String> {
        if self.flags.no_passphrase {
            return Ok(Vec::new());
        }
        if let Some(fd) = self.flags.passphrase_fd {
            if let Some(v) = &self.from_fd {
                return Ok(v.clone());
            }
            // The descriptor opened anew through /proc (the same pipe or
            // file), so nothing we do not own is closed.
            let mut f = std::fs::File::open(format!("/proc/self/fd/{fd}"))
                .map_err(|e| format!("--passphrase-fd {fd}: {e}"))?;
            let mut v = Vec::new();
            f.read_to_end(&mut v)
                .map_err(|e| format!("--passphrase-fd {fd}: {e}"))?;
            v.truncate(255);
            self.from_fd = Some(v.clone());
            return Ok(v);
        }
        loop {
            let a = prompt_tty(prompt)?;
            if !twice {
                return Ok(a);
            }
            if a == prompt_tty("One more time:")? {
                return Ok(a);
            }
            eprintln!("That didn't match.");
        }
    }
}

/// Ask on the terminal with echo off (`stty -echo` on /dev/tty).
fn prompt_tty(prompt: &str) -> Result<Vec<u8>, String> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| format!("no terminal to ask for a passphrase ({e}); give --passphrase-fd or --no-passphrase"))?;
    let stty = |arg: &str| {
        std::process::Command::new("stty")
            .arg(arg)
            .stdin(tty.try_clone().map_err(|e| e.to_string())?)
            .status()
            .map_err(|e| e.to_string())
    };
    stty("-echo")?;
    let mut out = tty.try_clone().map_err(|e| e.to_string())?;
    let _ = write!(out, "{prompt} ");
    let _ = out.flush();
    let mut line = String::new();
    let r =
        std::io::BufReader::new(tty.try_clone().map_err(|e| e.to_string())?).read_line(&mut line);
    let _ = stty("echo");
    let _ = writeln!(out);
    r.map_err(|e| e.to_string())?;
    Ok(line.trim_end_matches(['\n', '\r']).as_bytes().to_vec())
}

impl Passphrases for Getpass {
    fn existing(&mut self, prompt: &str) -> Result<Vec<u8>, String> {
        self.read(prompt, false)
    }
    fn fresh(&mut self, prompt: &str) -> Result<Vec<u8>, String> {
        self.read(prompt, true)
    }
}

/// `weft --keygen`.
pub fn keygen(src: &Sources, flags: &KeygenFlags) -> Result<(), String> {
    let o = key_options(src)?;
    let mut pass = Getpass {
        flags: flags.clone(),
        from_fd: None,
    };
    let r = weft_crypto::keygen::keygen(
        &o.data_dir,
        &mut pass,
        flags.new_passphrase,
        o.signing_lifetime,
        SystemTime::now(),
    )
    .map_err(|e| e.to_string())?;
    let keys = o.data_dir.join("keys");
    if r.created_master {
        eprintln!(
            "weft: new master identity key in {} ({})",
            keys.display(),
            if r.encrypted {
                "encrypted"
            } else {
                "not encrypted"
            }
        );
    }
    if let Some(exp) = r.signing_expiry {
        eprintln!(
            "weft: new signing key and certificate in {}, valid until {}",
            keys.display(),
            iso_time(exp)
        );
    }
    Ok(())
}

/// `weft --key-expiration sign`: C prints `signing-cert-expiry: TIME` on
/// stderr (ISO 8601, in UTC here; C uses local time).
pub fn key_expiration(src: &Sources, flags: &KeygenFlags) -> Result<(), String> {
    let o = key_options(src)?;
    let exp = weft_crypto::keygen::signing_cert_expiry(&o.data_dir).map_err(|e| e.to_string())?;
    let when = if flags.timestamp {
        exp.duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            .to_string()
    } else {
        iso_time(exp)
    };
    eprintln!("signing-cert-expiry: {when}");
    Ok(())
}

fn iso_time(t: SystemTime) -> String {
    let d = time::OffsetDateTime::from(t);
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
