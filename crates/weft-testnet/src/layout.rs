//! A network's layout before anything runs: node names, directories and
//! ports for a [`TestnetConfig`], and the base directory made empty (wiping
//! only an earlier weft-testnet network whose owner is gone).

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::config::TestnetConfig;
use crate::network::{NodeInfo, Role};
use crate::ports::PortAllocator;
use crate::torrc::Ports;

/// Marker file identifying a directory as a weft-testnet network (and so safe
/// to wipe on the next start).
const MARKER: &str = ".weft-testnet";

/// Nodes, directories and ports for `config` (no I/O besides checking the
/// ports are free).
pub(crate) fn layout(config: &TestnetConfig) -> Result<Vec<NodeInfo>> {
    if config.authorities == 0 {
        bail!("a test network needs at least one authority");
    }
    let mut ports = PortAllocator::new(config.base_port);
    let mut nodes = Vec::new();
    let mut add = |role: Role, index: usize, name: String, ports: Ports| {
        nodes.push(NodeInfo {
            dir: config.base_dir.join(&name),
            name,
            role,
            index,
            or_port: ports.or_port,
            dir_port: ports.dir_port,
            control_port: ports.control_port,
            socks_port: ports.socks_port,
            service_port: ports.service_port,
            fingerprint: None,
            v3ident: None,
        });
    };
    for i in 0..config.authorities {
        let name = format!("auth{i}");
        let p = Ports {
            or_port: Some(ports.take(&format!("{name} ORPort"))?),
            dir_port: Some(ports.take(&format!("{name} DirPort"))?),
            control_port: Some(ports.take(&format!("{name} ControlPort"))?),
            ..Ports::default()
        };
        add(Role::Authority, i, name, p);
    }
    for (role, count, prefix) in [
        (Role::Relay, config.relays, "relay"),
        (Role::Exit, config.exits, "exit"),
    ] {
        for i in 0..count {
            let name = format!("{prefix}{i}");
            let p = Ports {
                or_port: Some(ports.take(&format!("{name} ORPort"))?),
                control_port: Some(ports.take(&format!("{name} ControlPort"))?),
                ..Ports::default()
            };
            add(role, i, name, p);
        }
    }
    if let Some(w) = &config.weft {
        let nick = &w.nickname;
        if nick.is_empty() || nick.len() > 19 || !nick.chars().all(|c| c.is_ascii_alphanumeric()) {
            bail!("weft nickname {nick:?} must be 1-19 letters and digits");
        }
        if w.connection_threads.is_some_and(|t| t > 1024) {
            bail!("weft connection_threads above 1024");
        }
        if !w.binary.is_file() {
            bail!(
                "weft binary {} does not exist (build it first)",
                w.binary.display()
            );
        }
        let p = Ports {
            or_port: Some(ports.take(&format!("{nick} ORPort"))?),
            ..Ports::default()
        };
        add(Role::Weft, 0, nick.clone(), p);
    }
    for i in 0..config.clients {
        let name = format!("client{i}");
        let p = Ports {
            socks_port: Some(ports.take(&format!("{name} SocksPort"))?),
            control_port: Some(ports.take(&format!("{name} ControlPort"))?),
            ..Ports::default()
        };
        add(Role::Client, i, name, p);
    }
    if config.onion_services > 0 {
        let p = Ports {
            control_port: Some(ports.take("hs0 ControlPort")?),
            service_port: Some(ports.take("hs0 service target port")?),
            ..Ports::default()
        };
        add(Role::OnionService, 0, "hs0".into(), p);
    }
    let mut names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0].eq_ignore_ascii_case(w[1])) {
        bail!(
            "two nodes would be called {:?}; pick another weft nickname",
            w[0]
        );
    }
    Ok(nodes)
}

/// Make `dir` an empty weft-testnet directory: create it, or wipe it if it
/// holds an earlier network (marker file) whose owning process is gone;
/// refuse anything else.
pub(crate) fn prepare_base_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let non_empty = fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some();
        if non_empty {
            let marker = fs::read_to_string(dir.join(MARKER)).with_context(|| {
                format!(
                    "{} is not empty and not a weft-testnet directory; refusing to use it",
                    dir.display()
                )
            })?;
            let owner = marker
                .lines()
                .find_map(|l| l.strip_prefix("pid "))
                .and_then(|p| p.trim().parse::<libc::pid_t>().ok());
            if let Some(pid) = owner.filter(|&p| p != std::process::id() as libc::pid_t) {
                // SAFETY: kill(2) with signal 0 only checks that the process
                // exists; it sends nothing.
                if unsafe { libc::kill(pid, 0) } == 0 {
                    bail!(
                        "{} is in use by a network of running process {pid}; pick another base_dir",
                        dir.display()
                    );
                }
            }
            fs::remove_dir_all(dir)
                .with_context(|| format!("wiping earlier network in {}", dir.display()))?;
        }
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(
        dir.join(MARKER),
        format!(
            "a weft-testnet network; wiped by the next start once this process is gone\npid {}\n",
            std::process::id()
        ),
    )?;
    Ok(())
}
