//! The running network: [`Testnet::start`] lays out the node directories,
//! makes every identity, writes the torrcs and launches authorities, then
//! relays / exits / weft, then clients; it owns every child process (stopped
//! by [`Testnet::stop`] or on drop, and on a failed start) and offers bounded
//! waits for bootstrap and for consensus listing, with errors that say what is
//! missing for whom and quote the relevant logs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::config::TestnetConfig;
use crate::control::ControlClient;
use crate::keys::{self, create_private_dir};
use crate::layout::{layout, prepare_base_dir};
use crate::logs;
use crate::process::{stop_all, ManagedChild};
use crate::tools::TorBinaries;
use crate::torrc::{self, NetFacts, Ports};

/// Bound on a node opening its control port (or weft its ORPort) after spawn.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Time stopped processes get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Lines of log quoted in errors.
pub(crate) const TAIL_LINES: usize = 12;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Directory authority (also a relay; never Guard/Exit).
    Authority,
    /// Stock non-exit relay; the only Guards.
    Relay,
    /// Stock exit relay (to 127.0.0.0/8); the only Exits.
    Exit,
    /// Stock client with a SocksPort.
    Client,
    /// Stock tor running the network's v3 onion services (`hs0`).
    OnionService,
    /// The weft relay.
    Weft,
}

/// One node of the network.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Name, also the nickname: `auth0`, `relay1`, `exit0`, `client0`, or
    /// weft's nickname.
    pub name: String,
    /// Kind of node.
    pub role: Role,
    /// Index within its role.
    pub index: usize,
    /// The node's directory (its DataDirectory, torrc and logs).
    pub dir: PathBuf,
    /// ORPort (relays).
    pub or_port: Option<u16>,
    /// DirPort (authorities).
    pub dir_port: Option<u16>,
    /// ControlPort (stock tor nodes).
    pub control_port: Option<u16>,
    /// SocksPort (clients).
    pub socks_port: Option<u16>,
    /// Where the onion services' `HiddenServicePort 80` points
    /// (`127.0.0.1:<port>`; the onion-service node).
    pub service_port: Option<u16>,
    /// RSA identity fingerprint, 40 upper-case hex (relays; weft's once it
    /// has started).
    pub fingerprint: Option<String>,
    /// v3 authority identity (authorities).
    pub v3ident: Option<String>,
}

impl NodeInfo {
    /// `<dir>/notice.log`.
    pub fn notice_log(&self) -> PathBuf {
        self.dir.join("notice.log")
    }

    /// `<dir>/info.log`.
    pub fn info_log(&self) -> PathBuf {
        self.dir.join("info.log")
    }

    /// `<dir>/stdout.log` (the process's stdout and stderr).
    pub fn stdout_log(&self) -> PathBuf {
        self.dir.join("stdout.log")
    }

    /// `<dir>/torrc`.
    pub fn torrc(&self) -> PathBuf {
        self.dir.join("torrc")
    }

    /// `127.0.0.1:<ControlPort>`.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_port.map(loopback)
    }

    /// `127.0.0.1:<SocksPort>`.
    pub fn socks_addr(&self) -> Option<SocketAddr> {
        self.socks_port.map(loopback)
    }

    /// `127.0.0.1:<ORPort>`.
    pub fn or_addr(&self) -> Option<SocketAddr> {
        self.or_port.map(loopback)
    }

    /// The fingerprint, or an error naming the node.
    pub fn fingerprint(&self) -> Result<&str> {
        self.fingerprint
            .as_deref()
            .ok_or_else(|| anyhow!("{} has no fingerprint", self.name))
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A running private Tor network on loopback.
#[derive(Debug)]
pub struct Testnet {
    pub(crate) config: TestnetConfig,
    pub(crate) nodes: Vec<NodeInfo>,
    pub(crate) children: Vec<ManagedChild>,
    pub(crate) dir_authority_lines: Vec<String>,
    pub(crate) tor_version: String,
    pub(crate) started: Instant,
    pub(crate) stopped: bool,
    /// When each node was last sent `SIGNAL RELOAD` to refetch the consensus.
    pub(crate) nudged: HashMap<String, Instant>,
}

impl Testnet {
    /// Lay out, key and launch the network described by `config`
    /// (authorities, then relays / exits / weft, then clients). Returns once
    /// every stock node's control port answers and weft's ORPort accepts
    /// connections; the consensus comes later (see
    /// [`Testnet::wait_until_listed`]). On error everything started is
    /// stopped and the error quotes the failing node's logs.
    ///
    /// weft is started with `PR_SET_PDEATHSIG`: it gets SIGTERM when the
    /// *thread* calling `start` exits, so keep the network on that thread.
    /// Stock tor nodes exit by themselves (`__OwningControllerProcess`) within
    /// seconds of this process dying.
    pub fn start(mut config: TestnetConfig) -> Result<Testnet> {
        // Nodes run in their own directories: make every path absolute.
        config.base_dir = std::path::absolute(&config.base_dir)
            .with_context(|| format!("resolving {}", config.base_dir.display()))?;
        if let Some(w) = &mut config.weft {
            w.binary = fs::canonicalize(&w.binary)
                .with_context(|| format!("weft binary {} (build it first)", w.binary.display()))?;
        }
        let bins = TorBinaries::locate_or_install()?;
        let tor_version = bins.version().unwrap_or_default();
        let mut net = Testnet {
            nodes: layout(&config)?,
            config,
            children: Vec::new(),
            dir_authority_lines: Vec::new(),
            tor_version,
            started: Instant::now(),
            stopped: false,
            nudged: HashMap::new(),
        };
        match net.launch(&bins) {
            Ok(()) => Ok(net),
            Err(e) => {
                let _ = net.stop();
                Err(e)
            }
        }
    }

    fn launch(&mut self, bins: &TorBinaries) -> Result<()> {
        prepare_base_dir(&self.config.base_dir)?;
        self.make_identities(bins)?;
        let facts = self.net_facts();
        self.dir_authority_lines = facts.dir_authority_lines.clone();
        for n in &self.nodes {
            let text = match n.role {
                Role::Weft => {
                    let w = self
                        .config
                        .weft
                        .as_ref()
                        .ok_or_else(|| anyhow!("weft node without config"))?;
                    create_private_dir(&n.dir)?;
                    for (name, bytes) in &w.data_files {
                        let path = n.dir.join(name);
                        if let Some(parent) = path.parent() {
                            create_private_dir(parent)?;
                        }
                        fs::write(&path, bytes)
                            .with_context(|| format!("writing {}", path.display()))?;
                        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
                    }
                    torrc::weft_torrc(&n.name, &n.dir, &n.dir, n.or_port.unwrap_or(0), &facts, w)
                }
                role => {
                    create_private_dir(&n.dir)?;
                    let ports = Ports {
                        or_port: n.or_port,
                        dir_port: n.dir_port,
                        control_port: n.control_port,
                        socks_port: n.socks_port,
                        service_port: n.service_port,
                    };
                    torrc::stock_torrc(role, &n.name, &n.dir, ports, &facts)
                }
            };
            fs::write(n.torrc(), text)
                .with_context(|| format!("writing {}", n.torrc().display()))?;
        }
        let empty_defaults = self.config.base_dir.join("torrc-defaults");
        fs::write(&empty_defaults, "")?;

        for group in [
            &[Role::Authority][..],
            &[Role::Relay, Role::Exit, Role::Weft],
            &[Role::Client, Role::OnionService],
        ] {
            let idx: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| group.contains(&self.nodes[i].role))
                .collect();
            for &i in &idx {
                self.spawn_node(i, bins, &empty_defaults)?;
            }
            for &i in &idx {
                self.wait_node_up(i)?;
            }
        }
        Ok(())
    }

    /// Keys for every stock relay (in parallel: tor-gencert is slow).
    fn make_identities(&mut self, bins: &TorBinaries) -> Result<()> {
        let results: Vec<Result<(Option<String>, Option<String>)>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|n| {
                    s.spawn(move || -> Result<(Option<String>, Option<String>)> {
                        match n.role {
                            Role::Authority => {
                                let dir_port = n
                                    .dir_port
                                    .ok_or_else(|| anyhow!("authority without DirPort"))?;
                                let v3 =
                                    keys::make_authority_keys(bins, &n.dir.join("keys"), dir_port)?;
                                let fp = keys::make_relay_identity(bins, &n.dir, &n.name)?;
                                Ok((Some(fp), Some(v3)))
                            }
                            Role::Relay | Role::Exit => Ok((
                                Some(keys::make_relay_identity(bins, &n.dir, &n.name)?),
                                None,
                            )),
                            Role::Client | Role::OnionService | Role::Weft => Ok((None, None)),
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("key generation thread panicked")))
                })
                .collect()
        });
        for (n, r) in self.nodes.iter_mut().zip(results) {
            let (fp, v3) = r.with_context(|| format!("making keys for {}", n.name))?;
            n.fingerprint = fp;
            n.v3ident = v3;
        }
        Ok(())
    }

    fn net_facts(&self) -> NetFacts {
        let fps = |roles: &[Role]| -> Vec<String> {
            self.nodes
                .iter()
                .filter(|n| roles.contains(&n.role))
                .filter_map(|n| n.fingerprint.clone())
                .collect()
        };
        NetFacts {
            dir_authority_lines: self
                .nodes
                .iter()
                .filter(|n| n.role == Role::Authority)
                .map(|n| {
                    torrc::dir_authority_line(
                        &n.name,
                        n.or_port.unwrap_or(0),
                        n.dir_port.unwrap_or(0),
                        n.v3ident.as_deref().unwrap_or(""),
                        n.fingerprint.as_deref().unwrap_or(""),
                    )
                })
                .collect(),
            onion_services: self.config.onion_services,
            clients_choose_circuits: self.config.clients_choose_circuits,
            consensus_params: self.config.consensus_params.clone(),
            client_torrc: self.config.client_torrc.clone(),
            service_torrc: self.config.service_torrc.clone(),
            relay_torrc: self.config.relay_torrc.clone(),
            exit_torrc: self.config.exit_torrc.clone(),
            authority_torrc: self.config.authority_torrc.clone(),
            guards_by_vote: self.config.guards_by_vote,
            hsdirs_by_vote: self.config.hsdirs_by_vote,
            weft_exit_policy: self
                .config
                .weft
                .as_ref()
                .map(|w| w.exit_policy.clone())
                .unwrap_or_default(),
            guard_fps: fps(&[Role::Relay]),
            exit_fps: fps(&[Role::Exit]),
            hsdir_fps: fps(&[Role::Authority, Role::Relay, Role::Exit]),
        }
    }

    fn spawn_node(&mut self, i: usize, bins: &TorBinaries, defaults: &Path) -> Result<()> {
        let n = &self.nodes[i];
        let child = if n.role == Role::Weft {
            let w = self
                .config
                .weft
                .as_ref()
                .ok_or_else(|| anyhow!("weft node without config"))?;
            let mut cmd = Command::new(&w.binary);
            cmd.arg("-f").arg(n.torrc()).current_dir(&n.dir);
            ManagedChild::spawn(&n.name, &mut cmd, &n.stdout_log(), true)?
        } else {
            let mut cmd = Command::new(&bins.tor);
            cmd.arg("--defaults-torrc")
                .arg(defaults)
                .arg("-f")
                .arg(n.torrc())
                .current_dir(&n.dir);
            ManagedChild::spawn(&n.name, &mut cmd, &n.stdout_log(), false)?
        };
        self.children.push(child);
        Ok(())
    }

    /// Wait until node `i` is up: control port authenticates (stock tor), or
    /// fingerprint written and ORPort accepting (weft).
    fn wait_node_up(&mut self, i: usize) -> Result<()> {
        let deadline = Instant::now() + NODE_START_TIMEOUT;
        loop {
            self.check_alive()?;
            let n = &self.nodes[i];
            let up = match n.role {
                Role::Weft => {
                    let fp = keys::read_fingerprint(&n.dir).ok().map(|(_, fp)| fp);
                    let listening = n.or_addr().is_some_and(|a| {
                        TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok()
                    });
                    match fp {
                        Some(fp) if listening => {
                            self.nodes[i].fingerprint = Some(fp);
                            true
                        }
                        _ => false,
                    }
                }
                _ => match n.control_addr() {
                    Some(a) => {
                        ControlClient::connect(a, &n.dir, Duration::from_millis(200)).is_ok()
                    }
                    None => true,
                },
            };
            if up {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let n = &self.nodes[i];
                bail!(
                    "{} did not come up within {NODE_START_TIMEOUT:?}\n{}",
                    n.name,
                    node_logs(n, TAIL_LINES)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An error naming every node whose process has exited (with its status
    /// and log tails), or Ok if all are running.
    pub fn check_alive(&mut self) -> Result<()> {
        let mut dead = String::new();
        for c in &mut self.children {
            if let Some(st) = c.exited() {
                let _ = writeln!(dead, "{} (pid {}) exited: {st}", c.name(), c.pid());
                if let Some(n) = self.nodes.iter().find(|n| n.name == c.name()) {
                    dead.push_str(&node_logs(n, TAIL_LINES));
                }
            }
        }
        if dead.is_empty() {
            Ok(())
        } else {
            bail!("node process died:\n{dead}")
        }
    }

    /// Every node, in start order within each role: authorities, relays,
    /// exits, weft, clients.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// The node called `name` (`auth0`, `relay1`, `exit0`, `client0`, weft's
    /// nickname).
    pub fn node(&self, name: &str) -> Result<&NodeInfo> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| anyhow!("no node named {name:?}"))
    }

    /// The nodes with role `role`, by index.
    pub fn by_role(&self, role: Role) -> Vec<&NodeInfo> {
        self.nodes.iter().filter(|n| n.role == role).collect()
    }

    /// The RSA fingerprint of node `name`.
    pub fn fingerprint(&self, name: &str) -> Result<String> {
        Ok(self.node(name)?.fingerprint()?.to_string())
    }

    /// The weft node, if the network has one.
    pub fn weft(&self) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.role == Role::Weft)
    }

    /// The weft node's process id (to send it a signal, as an operator
    /// would), if it runs.
    pub fn weft_pid(&self) -> Option<u32> {
        let name = &self.weft()?.name;
        self.children
            .iter()
            .find(|c| c.name() == name)
            .map(|c| c.pid())
    }

    /// The weft executable that the next [`Testnet::restart_weft`] starts
    /// (A/B runs of two builds in one network).
    pub fn set_weft_binary(&mut self, binary: std::path::PathBuf) -> Result<()> {
        let w = self
            .config
            .weft
            .as_mut()
            .ok_or_else(|| anyhow!("this network has no weft node"))?;
        w.binary = binary;
        Ok(())
    }

    /// The ORPort and Address lines of weft's torrc from the next
    /// [`Testnet::restart_weft`] on ([`crate::WeftNode::address_lines`]).
    pub fn set_weft_address_lines(&mut self, lines: Option<Vec<String>>) -> Result<()> {
        let w = self
            .config
            .weft
            .as_mut()
            .ok_or_else(|| anyhow!("this network has no weft node"))?;
        w.address_lines = lines;
        Ok(())
    }

    /// Stop the weft node (SIGTERM, bounded wait, then SIGKILL) and forget
    /// its process (the network's checks no longer expect it); its index
    /// among the nodes. Its DataDirectory stays, e.g. for a stock tor to
    /// run on.
    pub fn stop_weft(&mut self) -> Result<usize> {
        let i = self
            .nodes
            .iter()
            .position(|n| n.role == Role::Weft)
            .ok_or_else(|| anyhow!("this network has no weft node"))?;
        let name = self.nodes[i].name.clone();
        let c = self
            .children
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| anyhow!("weft process not found"))?;
        let mut old = self.children.remove(c);
        let killed = stop_all(std::slice::from_mut(&mut old), STOP_GRACE);
        if !killed.is_empty() {
            eprintln!("weft-testnet: weft needed SIGKILL after {STOP_GRACE:?}");
        }
        Ok(i)
    }

    /// Stop the weft node (SIGTERM, bounded wait, then SIGKILL) and start it
    /// again from the same DataDirectory with `threads` and `extra_torrc`
    /// (replacing the earlier extra lines); returns once its ORPort accepts
    /// connections again. The fingerprint read after the restart is stored
    /// in the node's [`NodeInfo::fingerprint`]; callers compare it with the
    /// one from before.
    pub fn restart_weft(&mut self, threads: Option<u32>, extra_torrc: Vec<String>) -> Result<()> {
        let i = self.stop_weft()?;
        let w = self
            .config
            .weft
            .as_mut()
            .ok_or_else(|| anyhow!("weft node without config"))?;
        w.connection_threads = threads;
        w.extra_torrc = extra_torrc;
        let facts = self.net_facts();
        let n = &self.nodes[i];
        let w = self
            .config
            .weft
            .as_ref()
            .ok_or_else(|| anyhow!("weft node without config"))?;
        let text = torrc::weft_torrc(&n.name, &n.dir, &n.dir, n.or_port.unwrap_or(0), &facts, w);
        fs::write(n.torrc(), text).with_context(|| format!("writing {}", n.torrc().display()))?;
        self.nodes[i].fingerprint = None;
        let bins = TorBinaries::locate()?;
        let defaults = self.config.base_dir.join("torrc-defaults");
        self.spawn_node(i, &bins, &defaults)?;
        self.wait_node_up(i)
    }

    /// The `DirAuthority ...` lines every node uses (for building a weft
    /// torrc by hand).
    pub fn dir_authority_lines(&self) -> &[String] {
        &self.dir_authority_lines
    }

    /// The configuration this network was started with.
    pub fn config(&self) -> &TestnetConfig {
        &self.config
    }

    /// `tor --version`'s first line.
    pub fn tor_version(&self) -> &str {
        &self.tor_version
    }

    /// Time since [`Testnet::start`] began.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A new authenticated control connection to stock node `name`.
    pub fn control(&self, name: &str) -> Result<ControlClient> {
        let n = self.node(name)?;
        let addr = n
            .control_addr()
            .ok_or_else(|| anyhow!("{name} has no control port"))?;
        ControlClient::connect(addr, &n.dir, Duration::from_secs(10))
    }

    /// Lines containing `needle` (case-insensitive) in every node's info log
    /// (which includes notice and warn), as `"<node>: <line>"`.
    pub fn grep_logs(&self, needle: &str) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|n| {
                logs::grep_tail(&n.info_log(), needle, usize::MAX)
                    .into_iter()
                    .map(move |l| format!("{}: {l}", n.name))
            })
            .collect()
    }

    /// The last `lines` lines of node `name`'s notice log.
    pub fn log_tail(&self, name: &str, lines: usize) -> Result<String> {
        Ok(logs::tail(&self.node(name)?.notice_log(), lines))
    }

    /// Stop every process this network started: SIGTERM, then SIGKILL after
    /// 10 s. Idempotent. An error if a node had died before `stop` was called
    /// (everything is stopped regardless).
    pub fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let died = self.check_alive();
        let killed = stop_all(&mut self.children, STOP_GRACE);
        if !killed.is_empty() {
            eprintln!(
                "weft-testnet: needed SIGKILL after {STOP_GRACE:?}: {}",
                killed.join(", ")
            );
        }
        died
    }
}

impl Drop for Testnet {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

pub(crate) fn section(title: &str, body: &str) -> String {
    let body = if body.trim().is_empty() {
        "(empty)"
    } else {
        body.trim_end()
    };
    format!("---- {title} ----\n{body}")
}

/// The tails of a node's logs (stdout.log holds tor's early errors).
fn node_logs(n: &NodeInfo, lines: usize) -> String {
    let mut s = section(
        &format!("{} stdout.log", n.name),
        &logs::tail(&n.stdout_log(), lines),
    );
    s.push('\n');
    s.push_str(&section(
        &format!("{} notice.log", n.name),
        &logs::tail(&n.notice_log(), lines),
    ));
    s.push('\n');
    s
}
