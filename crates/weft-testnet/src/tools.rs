//! The external programs a test network runs: locating stock `tor` and
//! `tor-gencert` (installing the Debian `tor` package when they are missing),
//! and running short-lived helper commands with a time bound.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Environment variable naming the `tor` binary to use.
pub const TOR_ENV: &str = "WEFT_TESTNET_TOR";
/// Environment variable naming the `tor-gencert` binary to use.
pub const GENCERT_ENV: &str = "WEFT_TESTNET_TOR_GENCERT";

/// Paths of the stock tor programs.
#[derive(Debug, Clone)]
pub struct TorBinaries {
    /// `tor`.
    pub tor: PathBuf,
    /// `tor-gencert`.
    pub gencert: PathBuf,
}

impl TorBinaries {
    /// Locate `tor` and `tor-gencert`: `$WEFT_TESTNET_TOR` /
    /// `$WEFT_TESTNET_TOR_GENCERT`, then `$PATH`, then `/usr/sbin`, `/usr/bin`.
    pub fn locate() -> Result<TorBinaries> {
        Ok(TorBinaries {
            tor: locate_one("tor", TOR_ENV)?,
            gencert: locate_one("tor-gencert", GENCERT_ENV)?,
        })
    }

    /// Like [`TorBinaries::locate`], but when either program is missing run
    /// `apt-get install -y tor` (through `sudo -n` when not root) first. Fails
    /// loudly (never skips) when that does not produce both programs.
    pub fn locate_or_install() -> Result<TorBinaries> {
        if let Ok(b) = TorBinaries::locate() {
            return Ok(b);
        }
        eprintln!("weft-testnet: stock tor not found; running apt-get install -y tor");
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let apt = |args: &[&str]| -> Result<()> {
            let mut cmd = if root {
                Command::new("apt-get")
            } else {
                let mut c = Command::new("sudo");
                c.args(["-n", "apt-get"]);
                c
            };
            cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            let out = run_bounded(&mut cmd, None, Duration::from_secs(600))
                .with_context(|| format!("running apt-get {}", args.join(" ")))?;
            if !out.status.success() {
                bail!(
                    "apt-get {} failed ({}): {}",
                    args.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        apt(&["update", "-qq"])?;
        apt(&["install", "-y", "-qq", "tor"])?;
        TorBinaries::locate().context("tor still missing after apt-get install -y tor")
    }

    /// `tor --version`'s first line, e.g. `Tor version 0.4.9.11.`
    pub fn version(&self) -> Result<String> {
        let out = run_bounded(
            Command::new(&self.tor).arg("--version"),
            None,
            Duration::from_secs(30),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.lines().next().unwrap_or("").trim().to_string())
    }
}

fn locate_one(name: &str, env: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        if is_executable(&p) {
            return Ok(p);
        }
        bail!("{env}={} is not an executable file", p.display());
    }
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let fixed = [
        PathBuf::from("/usr/sbin"),
        PathBuf::from("/usr/bin"),
        PathBuf::from("/usr/local/bin"),
    ];
    path_dirs
        .into_iter()
        .flatten()
        .chain(fixed)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| anyhow!("`{name}` not found in $PATH, /usr/sbin or /usr/bin (set {env})"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Run `cmd` to completion with `stdin` fed to it, killing it (SIGKILL) if it
/// is still running after `limit`. Its output is captured.
pub fn run_bounded(cmd: &mut Command, stdin: Option<&[u8]>, limit: Duration) -> Result<Output> {
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}"))?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A program that exits without reading stdin is not our error.
        let _ = pipe.write_all(data);
    }
    let collect = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = collect(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err_t = collect(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}
