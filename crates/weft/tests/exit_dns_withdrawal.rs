//! An exit whose name servers cannot be configured does not claim to be
//! an exit: its descriptor says `reject *:*` whatever the torrc's policy,
//! as C Tor's router.c does while `has_dns_init_failed()`, and the log
//! says why; a reload (SIGHUP) that reads a usable configuration puts the
//! policy back ("dns resolvers back"), and one that names an unreadable
//! file withdraws it again. A missing resolv.conf is not a failure: C
//! falls back to a name server on 127.0.0.1, and so does weft. (The
//! descriptor is read back over the ControlPort, `GETINFO
//! desc/id/<fingerprint>`; the authorities' view of the same transitions
//! is checked in `exit_streams`.)

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, Ctl};

/// A running weft exit (policy `accept *:80`).
struct Exit {
    child: Child,
    torrc: PathBuf,
    torrc_base: String,
    log: PathBuf,
    ctl: Ctl,
    fp: String,
    _dir: tempfile::TempDir,
}

impl Drop for Exit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exit {
    /// Started with `resolv_conf` as its `ServerDNSResolvConfFile`.
    fn start(resolv_conf: &Path) -> Result<Exit> {
        let dir = tempfile::tempdir()?;
        let (or_port, cport) = (free_port(), free_port());
        let data = dir.path().join("data");
        let log = dir.path().join("notice.log");
        let torrc = dir.path().join("torrc");
        let torrc_base = format!(
            "ORPort 127.0.0.1:{or_port}\nAddress 127.0.0.1\nNickname weftExit\nDataDirectory {}\nLog notice file {}\nConnectionThreads 1\nExitRelay 1\nExitPolicy accept *:80\nExitPolicy reject *:*\nControlPort {cport}\nCookieAuthentication 1\n",
            data.display(),
            log.display(),
        );
        std::fs::write(
            &torrc,
            format!(
                "{torrc_base}ServerDNSResolvConfFile {}\n",
                resolv_conf.display()
            ),
        )?;
        let child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("-f")
            .arg(&torrc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", cport)).is_err() {
            ensure!(Instant::now() < deadline, "no ControlPort");
            std::thread::sleep(Duration::from_millis(100));
        }
        let fp = std::fs::read_to_string(data.join("fingerprint"))?;
        let fp = fp
            .split_whitespace()
            .nth(1)
            .context("fingerprint file")?
            .to_string();
        let mut ctl = Ctl::tcp(cport)?;
        ctl.authenticate(&data.join("control_auth_cookie"))?;
        Ok(Exit {
            child,
            torrc,
            torrc_base,
            log,
            ctl,
            fp,
            _dir: dir,
        })
    }

    /// The descriptor, asked for until `want` holds of it (bounded).
    fn descriptor_when(&mut self, what: &str, want: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.ctl.cmd(&format!("GETINFO desc/id/{}", self.fp))?;
            let desc = r.replace("\r\n", "\n");
            if r.starts_with("250+") && want(&desc) {
                return Ok(desc);
            }
            ensure!(
                Instant::now() < deadline,
                "no descriptor with {what}: {desc}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Point `ServerDNSResolvConfFile` at `resolv_conf` and reload.
    fn reload_with(&mut self, resolv_conf: &Path) -> Result<()> {
        std::fs::write(
            &self.torrc,
            format!(
                "{}ServerDNSResolvConfFile {}\n",
                self.torrc_base,
                resolv_conf.display()
            ),
        )?;
        ensure!(Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()?
            .success());
        Ok(())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait (bounded) for `line` in the log.
    fn logged(&self, line: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().contains(line) {
            ensure!(
                Instant::now() < deadline,
                "no {line:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

fn withdrawn(desc: &str) -> bool {
    desc.contains("\nreject *:*\n") && !desc.contains("accept *:80")
}

fn open(desc: &str) -> bool {
    desc.contains("\naccept *:80\nreject *:*\n")
}

#[test]
fn an_exit_without_working_dns_publishes_reject_star_until_a_reload_finds_some() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // A directory: it can be stat()ed but not read (C: "Unable to parse").
    let conf = dir.path().join("resolv.conf");
    std::fs::create_dir(&conf)?;
    let mut exit = Exit::start(&conf)?;
    exit.descriptor_when("reject *:* only", withdrawn)?;
    exit.logged("DNS does not work: not claiming to be an exit")?;

    // The operator fixes the file and reloads.
    std::fs::remove_dir(&conf)?;
    std::fs::write(
        &conf,
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )?;
    exit.reload_with(&conf)?;
    exit.descriptor_when("accept *:80", open)?;
    exit.logged("DNS works again (dns resolvers back)")?;

    // A missing file: C's fallback to 127.0.0.1, the exit stays open.
    let missing = dir.path().join("no-such-resolv.conf");
    exit.reload_with(&missing)?;
    exit.logged("falling back to local DNS at 127.0.0.1")?;
    std::thread::sleep(Duration::from_secs(1));
    exit.descriptor_when("accept *:80", open)?;
    ensure!(
        !exit.log().contains("dns resolvers failed"),
        "{}",
        exit.log()
    );

    // A reload naming a file that cannot be read: withdrawn again.
    exit.reload_with(dir.path())?;
    exit.descriptor_when("reject *:* only", withdrawn)?;
    exit.logged("DNS does not work (dns resolvers failed)")?;
    Ok(())
}

#[test]
fn a_missing_resolv_conf_falls_back_to_the_local_name_server_as_c() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut exit = Exit::start(&dir.path().join("no-such-resolv.conf"))?;
    exit.descriptor_when("accept *:80", open)?;
    exit.logged("falling back to local DNS at 127.0.0.1")?;
    ensure!(
        !exit.log().contains("not claiming to be an exit"),
        "{}",
        exit.log()
    );
    Ok(())
}
