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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::config::TestnetConfig;
use crate::control::{ConsensusEntry, ControlClient};
use crate::keys::{self, create_private_dir};
use crate::logs;
use crate::ports::PortAllocator;
use crate::process::{stop_all, ManagedChild};
use crate::tools::TorBinaries;
use crate::torrc::{self, NetFacts, Ports};

/// Marker file identifying a directory as a weft-testnet network (and so safe
/// to wipe on the next start).
const MARKER: &str = ".weft-testnet";
/// Bound on a node opening its control port (or weft its ORPort) after spawn.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Time stopped processes get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Poll interval of the waits.
const POLL: Duration = Duration::from_millis(500);
/// What tor authorities log (at info) when handling descriptor uploads
/// (dircache.c, process_descs.c).
const DESCRIPTOR_NEEDLES: &[&str] = &[
    "New descriptor post",
    "Rejected router descriptor",
    "Rejecting descriptor",
    "Dropping descriptor",
    "Did not add descriptor",
    "Not replacing descriptor",
    "Somebody attempted to publish",
    "Received bad key",
    "router descriptor",
];
/// Warnings stock tor 0.4.9 logs in a healthy loopback test network: start-up
/// notes, 404s and vote-timing complaints before the first consensus, and
/// bandwidth-weight complaints of a tiny network. Used by
/// [`Testnet::unexpected_warnings`].
pub const BENIGN_WARNINGS: &[&str] = &[
    "You have used DirAuthority or AlternateDirAuthority",
    "TestingTorNetwork is set",
    "Your log may contain sensitive information",
    "You are running Tor as root",
    "AuthVotingInterval is very low",
    "approved-routers'. That's ok.",
    "sr-state",
    "We just marked ourself as down",
    "(\"Not found\") from server",
    "Posted vote received too late",
    "posted vote from",
    "Rejected vote from",
    "We don't have enough votes to generate a consensus",
    "Not enough info to publish pending",
    "Mismatched digest",
    "good signatures from recognized authorities",
    "Consensus does not include configured authority",
    "Too much Middle bandwidth on the network",
    "Bw Weights error",
    // A stock relay's reachability self-test circuit in a network this
    // small can be [authority, itself]: the authority refuses to extend
    // back to its previous hop (circuitbuild_relay.c). Seen with stock tor
    // only; the channel is the stock relay's, never weft's.
    "Client asked me to extend back to the previous hop.",
];

/// A warning that tor logs right after another one as its consequence; it is
/// benign exactly when the warning before it was.
const FOLLOW_UP_WARNINGS: &[&str] =
    &["connection_edge_process_relay_cell (away from origin) failed."];
/// Lines of log quoted in errors.
const TAIL_LINES: usize = 12;

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
    config: TestnetConfig,
    nodes: Vec<NodeInfo>,
    children: Vec<ManagedChild>,
    dir_authority_lines: Vec<String>,
    tor_version: String,
    started: Instant,
    stopped: bool,
    /// When each node was last sent `SIGNAL RELOAD` to refetch the consensus.
    nudged: HashMap<String, Instant>,
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
                    torrc::weft_torrc(
                        &n.name,
                        &n.dir,
                        &n.dir,
                        n.or_port.unwrap_or(0),
                        w.connection_threads,
                        &facts,
                        &w.extra_torrc,
                    )
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

    /// Stop the weft node (SIGTERM, bounded wait, then SIGKILL) and start it
    /// again from the same DataDirectory with `threads` and `extra_torrc`
    /// (replacing the earlier extra lines); returns once its ORPort accepts
    /// connections again. The fingerprint read after the restart is stored
    /// in the node's [`NodeInfo::fingerprint`]; callers compare it with the
    /// one from before.
    pub fn restart_weft(&mut self, threads: Option<u32>, extra_torrc: Vec<String>) -> Result<()> {
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
        let text = torrc::weft_torrc(
            &n.name,
            &n.dir,
            &n.dir,
            n.or_port.unwrap_or(0),
            w.connection_threads,
            &facts,
            &w.extra_torrc,
        );
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

    /// Wait until every client reports `PROGRESS=100` in
    /// `status/bootstrap-phase`; returns the time waited.
    pub fn wait_for_bootstrap(&mut self, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let clients: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| matches!(n.role, Role::Client | Role::OnionService))
            .cloned()
            .collect();
        let mut conns: HashMap<String, ControlClient> = HashMap::new();
        loop {
            self.check_alive()?;
            self.nudge_consensus_fetches(&mut conns);
            let mut pending = Vec::new();
            for c in &clients {
                let phase = open_control(&mut conns, c).and_then(|cc| cc.bootstrap_phase());
                match phase {
                    Ok((100, _)) => {}
                    Ok((_, v)) => pending.push((c, v)),
                    Err(e) => {
                        conns.remove(&c.name);
                        pending.push((c, format!("control port error: {e:#}")));
                    }
                }
            }
            if pending.is_empty() {
                return Ok(t0.elapsed());
            }
            if Instant::now() >= deadline {
                let mut msg = format!("clients not bootstrapped after {timeout:?}:");
                for (c, v) in &pending {
                    let _ = write!(msg, "\n  {}: {v}", c.name);
                }
                for (c, _) in &pending {
                    let _ = write!(
                        msg,
                        "\n{}",
                        section(
                            &format!("{} notice.log", c.name),
                            &logs::tail(&c.notice_log(), TAIL_LINES)
                        )
                    );
                }
                bail!(msg);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Wait until the consensus of every authority, exit and client lists
    /// each relay in `fingerprints` with every flag in `flags` (e.g.
    /// `["Running", "Valid", "Fast"]`); returns the time waited. On timeout
    /// the error names what is missing for whom ("client0: weft not in
    /// consensus; exit1: weft lacks Fast") and quotes the observers' logs, the
    /// missing relays' logs and what the authorities logged about them.
    pub fn wait_until_listed<S: AsRef<str>>(
        &mut self,
        fingerprints: &[S],
        flags: &[&str],
        timeout: Duration,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let fps = fingerprints
            .iter()
            .map(|f| keys::normalize_fingerprint(f.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let observers: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.role,
                    Role::Authority | Role::Exit | Role::Client | Role::OnionService
                )
            })
            .cloned()
            .collect();
        let mut conns: HashMap<String, ControlClient> = HashMap::new();
        loop {
            self.check_alive()?;
            self.nudge_consensus_fetches(&mut conns);
            let mut missing: Vec<(String, String, String)> = Vec::new(); // (observer, relay, problem)
            for o in &observers {
                for fp in &fps {
                    let relay = self.name_of(fp);
                    let entry = open_control(&mut conns, o).and_then(|c| c.consensus_entry(fp));
                    // (problem, whether to skip this observer's other relays)
                    let (problem, skip_rest) = match entry {
                        Ok(ConsensusEntry::Listed { flags: have, .. }) => {
                            let lacks: Vec<&str> = flags
                                .iter()
                                .copied()
                                .filter(|f| !have.iter().any(|h| h == f))
                                .collect();
                            if lacks.is_empty() {
                                continue;
                            }
                            let p = format!(
                                "{relay} lacks {} (has {})",
                                lacks.join(" "),
                                have.join(" ")
                            );
                            (p, false)
                        }
                        Ok(ConsensusEntry::NotListed) => {
                            (format!("{relay} not in consensus"), false)
                        }
                        Ok(ConsensusEntry::NoConsensus) => ("no consensus yet".to_string(), true),
                        Err(e) => {
                            conns.remove(&o.name);
                            (format!("control port error: {e:#}"), true)
                        }
                    };
                    // An observer-wide problem is about no relay in particular.
                    let about = if skip_rest { String::new() } else { relay };
                    missing.push((o.name.clone(), about, problem));
                    if skip_rest {
                        break;
                    }
                }
            }
            if missing.is_empty() {
                return Ok(t0.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(anyhow!(self.listing_report(&missing, &fps, flags, timeout)));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Make stock nodes that still have no consensus fetch it now that an
    /// authority has one. Before the first consensus exists every fetch gets
    /// a 404, and tor backs off with decorrelated jitter (dlstatus.c: next
    /// delay random in [1, 3 x previous]), so a node can be 10-20 s late.
    /// `SIGNAL RELOAD` (HUP) resets those schedules and fetches at once
    /// (main.c: do_hup -> router_reset_descriptor_download_failures,
    /// update_networkstatus_downloads). At most once per node every 5 s.
    fn nudge_consensus_fetches(&mut self, conns: &mut HashMap<String, ControlClient>) {
        const NUDGE_EVERY: Duration = Duration::from_secs(5);
        let has_consensus =
            |conns: &mut HashMap<String, ControlClient>, n: &NodeInfo| -> Option<bool> {
                let c = open_control(conns, n).ok()?;
                match c.getinfo("consensus/valid-after") {
                    Ok(v) => Some(!v.trim().is_empty()),
                    Err(_) => {
                        conns.remove(&n.name);
                        None
                    }
                }
            };
        let stock: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| n.role != Role::Weft && n.control_port.is_some())
            .cloned()
            .collect();
        let authority_has = stock
            .iter()
            .filter(|n| n.role == Role::Authority)
            .any(|a| has_consensus(conns, a) == Some(true));
        if !authority_has {
            return;
        }
        for n in stock.iter().filter(|n| n.role != Role::Authority) {
            if self
                .nudged
                .get(&n.name)
                .is_some_and(|t| t.elapsed() < NUDGE_EVERY)
            {
                continue;
            }
            if has_consensus(conns, n) == Some(false) {
                if let Ok(c) = open_control(conns, n) {
                    let _ = c.command("SIGNAL RELOAD");
                }
                self.nudged.insert(n.name.clone(), Instant::now());
            }
        }
    }

    fn listing_report(
        &self,
        missing: &[(String, String, String)],
        fps: &[String],
        flags: &[&str],
        timeout: Duration,
    ) -> String {
        let summary: Vec<String> = missing
            .iter()
            .map(|(o, _, p)| format!("{o}: {p}"))
            .collect();
        let mut msg = format!(
            "relays not listed with [{}] after {timeout:?} ({}): {}",
            flags.join(" "),
            self.tor_version,
            summary.join("; ")
        );
        let mut observers: Vec<&str> = missing.iter().map(|(o, _, _)| o.as_str()).collect();
        observers.dedup();
        for o in observers {
            if let Ok(n) = self.node(o) {
                let _ = write!(
                    msg,
                    "\n{}",
                    section(
                        &format!("{o} notice.log"),
                        &logs::tail(&n.notice_log(), TAIL_LINES)
                    )
                );
            }
        }
        for fp in fps {
            let relay = self.name_of(fp);
            if !missing.iter().any(|(_, r, _)| *r == relay) {
                continue;
            }
            if let Some(n) = self
                .nodes
                .iter()
                .find(|n| n.fingerprint.as_deref() == Some(fp.as_str()))
            {
                let _ = write!(
                    msg,
                    "\n{}",
                    section(
                        &format!("{relay} notice.log"),
                        &logs::tail(&n.notice_log(), TAIL_LINES)
                    )
                );
            }
            for a in self.by_role(Role::Authority) {
                // tor names relays as `$FP~nick` or `'nick'`.
                let (tilde, quoted) = (format!("~{relay}"), format!("'{relay}'"));
                let mentions =
                    logs::grep_tail_any(&a.info_log(), &[fp, &tilde, &quoted], usize::MAX);
                // Prefer what the authority decided (descriptor handling,
                // reachability tests) over circuits through the relay.
                let decisions: Vec<String> = mentions
                    .iter()
                    .filter(|l| {
                        ["dirserv", "rep_hist", "descriptor", "reachab"]
                            .iter()
                            .any(|k| l.contains(k))
                    })
                    .cloned()
                    .collect();
                let chosen = if decisions.is_empty() {
                    mentions
                } else {
                    decisions
                };
                let mut hits = chosen[chosen.len().saturating_sub(6)..].to_vec();
                let title = if hits.is_empty() {
                    // Nothing names the relay: show what the authority said
                    // about descriptor uploads in general.
                    hits = logs::grep_tail_any(&a.info_log(), DESCRIPTOR_NEEDLES, 8);
                    format!(
                        "{} info.log: nothing names {relay}; latest descriptor handling",
                        a.name
                    )
                } else {
                    format!("{} info.log about {relay}", a.name)
                };
                let _ = write!(msg, "\n{}", section(&title, &hits.join("\n")));
            }
        }
        msg
    }

    /// The node name for a fingerprint, or the fingerprint itself.
    fn name_of(&self, fp: &str) -> String {
        self.nodes
            .iter()
            .find(|n| n.fingerprint.as_deref() == Some(fp))
            .map(|n| n.name.clone())
            .unwrap_or_else(|| fp.to_string())
    }

    /// `[warn]` and `[err]` lines in the stock nodes' notice logs that are not
    /// in [`BENIGN_WARNINGS`], as `"<node>: <line>"`. With `ProtocolWarnings 1`
    /// this is where tor complains about a peer (e.g. weft) breaking the
    /// protocol. Reads at most the last 16 MB of each log.
    pub fn unexpected_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for n in self.nodes.iter().filter(|n| n.role != Role::Weft) {
            let mut previous_benign = false;
            for l in logs::grep_tail_any(&n.notice_log(), &["[warn]", "[err]"], usize::MAX) {
                let follow_up = FOLLOW_UP_WARNINGS.iter().any(|f| l.contains(f));
                let benign =
                    BENIGN_WARNINGS.iter().any(|b| l.contains(b)) || (follow_up && previous_benign);
                if !benign {
                    out.push(format!("{}: {l}", n.name));
                }
                previous_benign = benign;
            }
        }
        out
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

fn open_control<'a>(
    conns: &'a mut HashMap<String, ControlClient>,
    n: &NodeInfo,
) -> Result<&'a mut ControlClient> {
    if !conns.contains_key(&n.name) {
        let addr = n
            .control_addr()
            .ok_or_else(|| anyhow!("{} has no control port", n.name))?;
        let c = ControlClient::connect(addr, &n.dir, Duration::from_secs(5))?;
        conns.insert(n.name.clone(), c);
    }
    conns
        .get_mut(&n.name)
        .ok_or_else(|| anyhow!("control connection vanished"))
}

fn section(title: &str, body: &str) -> String {
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

/// Nodes, directories and ports for `config` (no I/O besides checking the
/// ports are free).
fn layout(config: &TestnetConfig) -> Result<Vec<NodeInfo>> {
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
fn prepare_base_dir(dir: &Path) -> Result<()> {
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
