//! An exit whose name servers cannot be configured does not claim to be
//! an exit: its descriptor says `reject *:*` whatever the torrc's policy,
//! as C Tor's router.c does while `has_dns_init_failed()`, and the log
//! says why. With usable name servers the same torrc publishes its
//! policy. (The descriptor is read back over the ControlPort,
//! `GETINFO desc/id/<fingerprint>`.)

mod common;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, Ctl};

/// A weft exit (policy `accept *:80`) with `resolv_conf` as its
/// `ServerDNSResolvConfFile`: its descriptor and log.
fn exit_descriptor(resolv_conf: &std::path::Path) -> Result<(String, String)> {
    let dir = tempfile::tempdir()?;
    let (or_port, cport) = (free_port(), free_port());
    let data = dir.path().join("data");
    let log = dir.path().join("notice.log");
    let torrc = dir.path().join("torrc");
    std::fs::write(
        &torrc,
        format!(
            "ORPort 127.0.0.1:{or_port}\nAddress 127.0.0.1\nNickname weftExit\nDataDirectory {}\nLog notice file {}\nConnectionThreads 1\nExitRelay 1\nExitPolicy accept *:80\nExitPolicy reject *:*\nServerDNSResolvConfFile {}\nControlPort {cport}\nCookieAuthentication 1\n",
            data.display(),
            log.display(),
            resolv_conf.display()
        ),
    )?;
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _weft = Kill(
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("-f")
            .arg(&torrc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", cport)).is_err() {
        ensure!(Instant::now() < deadline, "no ControlPort");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fp = std::fs::read_to_string(data.join("fingerprint"))?;
    let fp = fp.split_whitespace().nth(1).context("fingerprint file")?;
    let mut c = Ctl::tcp(cport)?;
    c.authenticate(&data.join("control_auth_cookie"))?;
    // The descriptor is built at start; ask until it is there (bounded).
    let desc = loop {
        let r = c.cmd(&format!("GETINFO desc/id/{fp}"))?;
        if r.starts_with("250+") {
            break r.replace("\r\n", "\n");
        }
        ensure!(Instant::now() < deadline, "no descriptor: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    Ok((desc, std::fs::read_to_string(&log).unwrap_or_default()))
}

#[test]
fn an_exit_without_working_dns_publishes_reject_star() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("no-such-resolv.conf");
    let (desc, log) = exit_descriptor(&missing)?;
    ensure!(desc.contains("\nreject *:*\n"), "{desc}");
    ensure!(!desc.contains("accept *:80"), "{desc}");
    ensure!(
        log.contains("DNS does not work: not claiming to be an exit"),
        "{log}"
    );

    let good = dir.path().join("resolv.conf");
    std::fs::write(
        &good,
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )?;
    let (desc, log) = exit_descriptor(&good)?;
    ensure!(desc.contains("\naccept *:80\nreject *:*\n"), "{desc}");
    ensure!(!log.contains("not claiming to be an exit"), "{log}");
    Ok(())
}
