//! `User`: started as root, weft binds its ORPort, hands its
//! DataDirectory to the user and becomes it (uid and gid, all four of
//! each), and still serves. Needs root (the test fails, not skips,
//! without it).

mod common;

use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

#[test]
fn user_option_drops_root_after_binding() -> Result<()> {
    ensure!(
        weft_relay::privileges::effective_uid()? == 0,
        "this test needs root (as the README's test command runs)"
    );
    let nobody = weft_relay::privileges::lookup("nobody").map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    // The user must be able to reach its DataDirectory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let or_port = common::free_port();
    let data = dir.path().join("data");
    let torrc = dir.path().join("torrc");
    std::fs::write(
        &torrc,
        format!(
            "ORPort 127.0.0.1:{or_port}\nAddress 127.0.0.1\nNickname userTest\nDataDirectory {}\nLog notice file {}/notice.log\nExitRelay 0\nExitPolicy reject *:*\nConnectionThreads 2\nUser nobody\n",
            data.display(),
            dir.path().display()
        ),
    )?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("-f")
        .arg(&torrc)
        .stdout(Stdio::null())
        .spawn()?;
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            anyhow::bail!(
                "weft exited ({st}): {}",
                std::fs::read_to_string(dir.path().join("notice.log")).unwrap_or_default()
            );
        }
        let log = std::fs::read_to_string(dir.path().join("notice.log")).unwrap_or_default();
        if log.contains("running as nobody") {
            break std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
        }
        ensure!(Instant::now() < deadline, "weft did not drop root: {log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let child = Kill(child);
    for key in ["Uid:", "Gid:"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .context("status line")?;
        let want = if key == "Uid:" {
            nobody.uid
        } else {
            nobody.gid
        };
        ensure!(
            line.split_whitespace()
                .skip(1)
                .all(|v| v == want.to_string()),
            "{line}"
        );
    }
    ensure!(TcpStream::connect(("127.0.0.1", or_port)).is_ok(), "ORPort");
    for p in [
        data.clone(),
        data.join("keys"),
        data.join("keys/secret_id_key"),
    ] {
        ensure!(
            std::fs::metadata(&p)?.uid() == nobody.uid,
            "{} not given to nobody",
            p.display()
        );
    }
    drop(child);

    // An unknown user is a configuration error (as tor's --verify-config).
    let bad = std::fs::read_to_string(&torrc)?.replace("User nobody", "User nosuchuserx");
    std::fs::write(&torrc, bad)?;
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--verify-config", "-f"])
        .arg(&torrc)
        .output()?;
    ensure!(!out.status.success());
    ensure!(String::from_utf8_lossy(&out.stderr).contains("User 'nosuchuserx' not found"));
    Ok(())
}
