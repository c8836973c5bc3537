//! A stock tor client that can reach no authority (their addresses point
//! at a closed port) and knows weft as its only fallback directory, and
//! optionally as its only entry: what it knows of the network starts with
//! what weft serves. Started by the caller and killed, by its own handle,
//! on drop; started again in the same folder it keeps its DataDirectory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::free_port;
use crate::{ControlClient, Testnet, TorBinaries};
use anyhow::{bail, ensure, Context, Result};

/// A stock tor client that uses weft alone.
pub struct IsolatedClient {
    child: Child,
    /// Its folder (`data/`, `torrc`, `notice.log`, `info.log`).
    pub dir: PathBuf,
    /// Its ControlPort on 127.0.0.1.
    pub control_port: u16,
}

impl Drop for IsolatedClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl IsolatedClient {
    /// Start it in `dir` with weft (`weft_fp` at ORPort `weft_or_port`)
    /// as its only fallback directory and entry.
    pub fn start(net: &Testnet, weft_fp: &str, weft_or_port: u16, dir: &Path) -> Result<Self> {
        Self::start_with(net, weft_fp, weft_or_port, dir, true)
    }

    /// Start it in `dir` with weft as its only fallback directory and, if
    /// `weft_entry`, its only entry (`EntryNodes`, `StrictNodes 1`);
    /// otherwise it picks its guards (and directory guards) from the
    /// consensus weft served.
    pub fn start_with(
        net: &Testnet,
        weft_fp: &str,
        weft_or_port: u16,
        dir: &Path,
        weft_entry: bool,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let dead = free_port()?;
        let control_port = free_port()?;
        let socks_port = free_port()?;
        let mut t = String::new();
        t.push_str("TestingTorNetwork 1\n");
        t.push_str(&format!("DataDirectory {}\n", dir.join("data").display()));
        t.push_str(&format!("SocksPort 127.0.0.1:{socks_port}\n"));
        t.push_str(&format!("ControlPort 127.0.0.1:{control_port}\n"));
        t.push_str("CookieAuthentication 1\n");
        for level in ["notice", "info"] {
            let log = dir.join(format!("{level}.log"));
            t.push_str(&format!("Log {level} file {}\n", log.display()));
        }
        for line in net.dir_authority_lines() {
            t.push_str(&dead_authority(line, dead)?);
            t.push('\n');
        }
        t.push_str(&format!(
            "FallbackDir 127.0.0.1:{dead} orport={weft_or_port} id={weft_fp}\n"
        ));
        if weft_entry {
            t.push_str(&format!(
                "EntryNodes ${weft_fp}\nStrictNodes 1\nUseEntryGuards 1\n"
            ));
        }
        let torrc = dir.join("torrc");
        std::fs::write(&torrc, t)?;
        let defaults = dir.join("torrc-defaults");
        std::fs::write(&defaults, "")?;
        let child = Command::new(&TorBinaries::locate()?.tor)
            .arg("--defaults-torrc")
            .arg(&defaults)
            .arg("-f")
            .arg(&torrc)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the isolated client")?;
        Ok(IsolatedClient {
            child,
            dir: dir.to_path_buf(),
            control_port,
        })
    }

    /// Its ControlPort, authenticated.
    pub fn control(&self) -> Result<ControlClient> {
        ControlClient::connect(
            ([127, 0, 0, 1], self.control_port).into(),
            &self.dir.join("data"),
            Duration::from_secs(30),
        )
    }

    /// Wait (at most `bound`) until it has bootstrapped to 100%.
    pub fn wait_bootstrapped(&self, bound: Duration) -> Result<()> {
        let deadline = Instant::now() + bound;
        let mut ctl = loop {
            match self.control() {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => bail!("client control port: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        };
        loop {
            let (pct, summary) = ctl.bootstrap_phase()?;
            if pct == 100 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "client stuck at {pct}% ({summary}); its log:\n{}",
                self.notice_log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Its cached microdescriptor consensus ("" if none yet).
    pub fn consensus(&self) -> String {
        read(&self.dir.join("data").join("cached-microdesc-consensus"))
    }

    /// Its notice-level log so far.
    pub fn notice_log(&self) -> String {
        read(&self.dir.join("notice.log"))
    }

    /// Its info-level log so far.
    pub fn info_log(&self) -> String {
        read(&self.dir.join("info.log"))
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The authority line with its ORPort and DirPort moved to `dead`.
fn dead_authority(line: &str, dead: u16) -> Result<String> {
    let mut out = Vec::new();
    for w in line.split(' ') {
        if w.starts_with("orport=") {
            out.push(format!("orport={dead}"));
        } else if w.starts_with("127.0.0.1:") {
            out.push(format!("127.0.0.1:{dead}"));
        } else {
            out.push(w.to_string());
        }
    }
    ensure!(out.len() > 4, "odd DirAuthority line {line}");
    Ok(out.join(" "))
}
