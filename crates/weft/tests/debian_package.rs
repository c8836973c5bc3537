//! The Debian package on a clean Debian. cargo-deb builds the .deb (from
//! the binary this test run built); debootstrap makes a minimal bookworm
//! (cached under the target directory); apt installs the package there:
//! the `_weft` system user, `/var/lib/weft` 0700, the conffile
//! `/etc/weft/torrc`, the systemd unit enabled. Then the unit is started
//! as systemd would, in a chroot without systemd (the equivalent the
//! docs/running.md documents): its RuntimeDirectory made, its `ExecStartPre` and
//! `ExecStart` run as its `User=` — and the relay joins a local network
//! of stock tor authorities, which list it Running; its ControlPort answers
//! on the unit's unix socket with the group-readable cookie.
//!
//! Needs root, debootstrap and cargo-deb (scripts/install-deps.sh
//! installs both).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use weft_testnet::{pick_base_port, Testnet, TestnetConfig};

const BOUND: Duration = Duration::from_secs(300);

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A minimal bookworm made by debootstrap once per target directory.
fn base_system() -> Result<PathBuf> {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("debian-bookworm-minbase");
    if cache.join("etc/debian_version").exists() {
        return Ok(cache);
    }
    let partial = cache.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    run(Command::new("debootstrap")
        .args(["--variant=minbase", "bookworm"])
        .arg(&partial)
        .arg("http://deb.debian.org/debian"))
    .context("debootstrap (scripts/install-deps.sh installs it)")?;
    std::fs::rename(&partial, &cache)?;
    Ok(cache)
}

/// A copy of the base system with /proc mounted; unmounted and removed
/// on drop (never removed while something is mounted in it).
struct Chroot {
    root: PathBuf,
    proc_mounted: bool,
    relay: Option<Child>,
}

impl Chroot {
    fn new(base: &Path, root: PathBuf) -> Result<Chroot> {
        run(Command::new("cp").arg("-a").arg(base).arg(&root))?;
        let mut c = Chroot {
            root,
            proc_mounted: false,
            relay: None,
        };
        run(Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(c.root.join("proc")))?;
        c.proc_mounted = true;
        Ok(c)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        c.arg(&self.root).args(args);
        c
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }
}

impl Drop for Chroot {
    fn drop(&mut self) {
        if let Some(mut r) = self.relay.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
        if self.proc_mounted {
            let ok = Command::new("umount")
                .arg(self.root.join("proc"))
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("could not unmount {}/proc; leaving it", self.root.display());
                return;
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The values of `Key=` lines in a systemd unit.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn deb_installs_and_its_unit_runs_a_relay_that_joins_the_network() -> Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = tempfile::tempdir()?;
    let deb = tmp.path().join("weft.deb");
    // The binary this test run built (a test build; a release package is
    // `cargo deb -p weft`).
    run(Command::new("cargo")
        .current_dir(&workspace)
        .args(["deb", "-p", "weft", "--no-build", "--profile", "dev", "-o"])
        .arg(&deb))
    .context("cargo-deb (scripts/install-deps.sh installs it)")?;
    let info = run(Command::new("dpkg-deb").arg("-I").arg(&deb))?;
    ensure!(
        info.contains("Package: weft") && info.contains("adduser"),
        "{info}"
    );

    let base = base_system()?;
    let mut root = Chroot::new(&base, tmp.path().join("root"))?;
    std::fs::copy(&deb, root.path("/tmp/weft.deb"))?;
    run(&mut root.cmd(&["apt-get", "install", "-y", "-q", "/tmp/weft.deb"]))?;

    // What the package set up.
    let passwd = std::fs::read_to_string(root.path("/etc/passwd"))?;
    let weft_user = passwd
        .lines()
        .find(|l| l.starts_with("_weft:"))
        .context("no _weft user")?;
    let uid: u32 = weft_user.split(':').nth(2).context("uid")?.parse()?;
    let data = std::fs::metadata(root.path("/var/lib/weft"))?;
    ensure!(
        data.uid() == uid && data.permissions().mode() & 0o777 == 0o700,
        "/var/lib/weft: {data:?}"
    );
    ensure!(
        std::fs::read_to_string(root.path("/var/lib/dpkg/info/weft.conffiles"))?
            .contains("/etc/weft/torrc"),
        "torrc is not a conffile"
    );
    ensure!(
        // An absolute link inside the chroot: look at the link itself.
        std::fs::symlink_metadata(
            root.path("/etc/systemd/system/multi-user.target.wants/weft.service")
        )
        .is_ok(),
        "the unit is not enabled"
    );
    let unit = std::fs::read_to_string(root.path("/usr/lib/systemd/system/weft.service"))
        .or_else(|_| std::fs::read_to_string(root.path("/lib/systemd/system/weft.service")))?;
    // The sample torrc names no Address: it verifies where weft finds a
    // public address (a server's interface or host name), else it says to
    // set one.
    let sample = std::fs::read_to_string(root.path("/etc/weft/torrc"))?;
    let verify = root
        .cmd(&["/usr/bin/weft", "--verify-config", "-f", "/etc/weft/torrc"])
        .output()?;
    let said = String::from_utf8_lossy(&verify.stderr);
    ensure!(
        verify.status.success() || said.contains("Set Address"),
        "the sample torrc: neither verified nor asked for Address: {said}"
    );

    // A local network of stock tor authorities.
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-deb-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 0;
    cfg.exits = 0;
    cfg.clients = 0;
    cfg.base_port = pick_base_port(cfg.ports_needed() + 1)?;
    let or_port = cfg.base_port + cfg.ports_needed() as u16;
    let mut net = Testnet::start(cfg)?;

    // The operator's edit: Address, ORPort, the network's authorities.
    let mut torrc: String = sample
        .lines()
        .filter(|l| !l.starts_with("ORPort") && !l.starts_with("Log "))
        .map(|l| format!("{l}\n"))
        .collect();
    torrc.push_str(&format!(
        "Address 127.0.0.1\nORPort 127.0.0.1:{or_port}\nLog notice file /var/log/weft/notice.log\nTestingTorNetwork 1\nAssumeReachable 1\nConnectionThreads 2\n"
    ));
    for l in net.dir_authority_lines() {
        torrc.push_str(l);
        torrc.push('\n');
    }
    std::fs::write(root.path("/etc/weft/torrc"), torrc)?;

    // `systemctl start weft`, without systemd: the unit's RuntimeDirectory,
    // then ExecStartPre and ExecStart as its User.
    let user = unit_values(&unit, "User").pop().context("User=")?;
    let runtime = unit_values(&unit, "RuntimeDirectory")
        .pop()
        .context("RuntimeDirectory=")?;
    run(&mut root.cmd(&[
        "install",
        "-d",
        "-o",
        &user,
        "-g",
        &user,
        "-m",
        "0750",
        &format!("/run/{runtime}"),
    ]))?;
    let as_user = |cmdline: &str| -> Command {
        let mut args = vec![
            "setpriv",
            "--reuid",
            &user,
            "--regid",
            &user,
            "--init-groups",
        ];
        args.extend(cmdline.split_whitespace());
        root.cmd(&args)
    };
    for pre in unit_values(&unit, "ExecStartPre") {
        run(&mut as_user(&pre)).context("ExecStartPre")?;
    }
    let start = unit_values(&unit, "ExecStart")
        .pop()
        .context("ExecStart=")?;
    // Type=notify: systemd's notification socket, as the service sees it.
    ensure!(unit_values(&unit, "Type") == ["notify"], "Type=notify");
    let notify_path = "/run/weft-test-notify";
    let _ = std::fs::remove_file(root.path(notify_path));
    let notify = std::os::unix::net::UnixDatagram::bind(root.path(notify_path))?;
    std::fs::set_permissions(
        root.path(notify_path),
        std::fs::Permissions::from_mode(0o666),
    )?;
    notify.set_read_timeout(Some(Duration::from_secs(60)))?;
    let relay = as_user(&start)
        .env("NOTIFY_SOCKET", notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    root.relay = Some(relay);

    let fp_file = root.path("/var/lib/weft/fingerprint");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !fp_file.exists() {
        if let Some(r) = root.relay.as_mut() {
            if let Some(st) = r.try_wait()? {
                bail!(
                    "weft exited ({st}); its log:\n{}",
                    std::fs::read_to_string(root.path("/var/log/weft/notice.log"))
                        .unwrap_or_default()
                );
            }
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "weft wrote no fingerprint"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let fp = std::fs::read_to_string(&fp_file)?
        .split_whitespace()
        .nth(1)
        .context("fingerprint file")?
        .to_string();
    let key = std::fs::metadata(root.path("/var/lib/weft/keys/secret_id_key"))
        .or_else(|_| std::fs::metadata(root.path("/var/lib/weft/secret_id_key")))?;
    ensure!(
        key.uid() == uid && key.permissions().mode() & 0o077 == 0,
        "identity key {key:?}"
    );

    let mut buf = [0u8; 512];
    let n = notify
        .recv(&mut buf)
        .context("no READY=1 on NOTIFY_SOCKET")?;
    let ready = String::from_utf8_lossy(&buf[..n]);
    ensure!(ready.starts_with("READY=1\n"), "{ready}");

    let t = net.wait_until_listed(&[&fp], &["Running", "Valid"], BOUND)?;
    eprintln!("[deb] the packaged relay {fp} listed Running after {t:?}");

    // The ControlPort on the unit's socket, with the group-readable cookie.
    let cookie_path = root.path("/var/lib/weft/control_auth_cookie");
    let cookie = std::fs::metadata(&cookie_path)?;
    ensure!(
        cookie.permissions().mode() & 0o777 == 0o640,
        "cookie mode {:o}",
        cookie.permissions().mode()
    );
    let sock =
        std::os::unix::net::UnixStream::connect(root.path(&format!("/run/{runtime}/control")))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = sock.try_clone()?;
    let mut r = BufReader::new(sock);
    write!(
        w,
        "AUTHENTICATE {}\r\nGETINFO fingerprint\r\n",
        hex::encode(std::fs::read(&cookie_path)?)
    )?;
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut l = String::new();
        r.read_line(&mut l)?;
        lines.push(l);
    }
    ensure!(
        lines[0] == "250 OK\r\n" && lines[1] == format!("250-fingerprint={fp}\r\n"),
        "{lines:?}"
    );
    net.stop()?;
    Ok(())
}
