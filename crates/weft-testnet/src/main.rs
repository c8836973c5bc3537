//! The `weft-testnet` binary: `up` starts a private network and keeps it
//! running until Ctrl-C (printing ports, fingerprints and the DirAuthority
//! lines); `demo` starts one with weft in it, pushes verified traffic through
//! a relay0 → weft → exit0 circuit and prints a summary.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use weft_testnet::{
    pick_base_port, traffic, ConsensusEntry, Direction, Role, Sink, Testnet, TestnetConfig,
    WeftNode,
};

/// Private Tor networks on loopback from stock tor, optionally with weft.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a network, wait until it works, keep it running until Ctrl-C.
    Up(NetArgs),
    /// Start a network with weft, send verified traffic through weft, report.
    Demo {
        #[command(flatten)]
        net: NetArgs,
        /// Bytes to send each way.
        #[arg(long, default_value_t = 5 << 20)]
        bytes: u64,
    },
}

#[derive(Args, Debug)]
struct NetArgs {
    /// Directory for the network (wiped if it holds an earlier one).
    #[arg(long)]
    base_dir: Option<PathBuf>,
    /// First port (default: $WEFT_TESTNET_BASE_PORT or a free range).
    #[arg(long)]
    base_port: Option<u16>,
    /// Directory authorities.
    #[arg(long, default_value_t = 3)]
    authorities: usize,
    /// Stock non-exit relays (the guards).
    #[arg(long, default_value_t = 2)]
    relays: usize,
    /// Stock exits (to 127.0.0.0/8 only).
    #[arg(long, default_value_t = 2)]
    exits: usize,
    /// Stock clients (SocksPort, streams left for the controller to attach).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// The weft binary to include as a middle relay.
    #[arg(long)]
    weft: Option<PathBuf>,
    /// weft's ConnectionThreads.
    #[arg(long)]
    weft_threads: Option<u32>,
    /// Extra torrc line for weft (repeatable).
    #[arg(long = "weft-torrc")]
    weft_torrc: Vec<String>,
    /// Bound on bootstrap and on consensus listing, in seconds.
    #[arg(long, default_value_t = 240)]
    timeout: u64,
}

impl NetArgs {
    fn config(&self) -> Result<TestnetConfig> {
        let base_dir = match &self.base_dir {
            Some(d) => d.clone(),
            None => std::env::temp_dir().join(format!("weft-testnet-{}", std::process::id())),
        };
        let mut cfg = TestnetConfig {
            base_dir,
            base_port: 0,
            authorities: self.authorities,
            relays: self.relays,
            exits: self.exits,
            clients: self.clients,
            weft: self.weft.as_ref().map(|b| WeftNode {
                binary: b.clone(),
                connection_threads: self.weft_threads,
                extra_torrc: self.weft_torrc.clone(),
                nickname: "weft".into(),
                exit_policy: Vec::new(),
                data_files: Vec::new(),
                address_lines: None,
            }),
            ..TestnetConfig::default()
        };
        cfg.base_port = match self.base_port {
            Some(p) => p,
            None => pick_base_port(cfg.ports_needed())?,
        };
        Ok(cfg)
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

/// Start the network and wait until clients bootstrapped and every relay is
/// listed (weft with Fast too). Prints progress.
fn bring_up(args: &NetArgs) -> Result<Testnet> {
    let cfg = args.config()?;
    let timeout = Duration::from_secs(args.timeout);
    println!(
        "starting {} authorities, {} relays, {} exits, {} clients{} in {} (ports from {})",
        cfg.authorities,
        cfg.relays,
        cfg.exits,
        cfg.clients,
        if cfg.weft.is_some() { ", weft" } else { "" },
        cfg.base_dir.display(),
        cfg.base_port
    );
    let t0 = Instant::now();
    let mut net = Testnet::start(cfg)?;
    println!(
        "{}; all processes up after {:.1?}",
        net.tor_version(),
        t0.elapsed()
    );
    let relays: Vec<String> = net
        .nodes()
        .iter()
        .filter(|n| matches!(n.role, Role::Authority | Role::Relay | Role::Exit))
        .filter_map(|n| n.fingerprint.clone())
        .collect();
    let waited = net.wait_until_listed(&relays, &["Running", "Valid"], timeout)?;
    println!(
        "stock relays listed Running+Valid everywhere after {:.1?} more",
        waited
    );
    if let Some(fp) = net.weft().and_then(|w| w.fingerprint.clone()) {
        let waited = net.wait_until_listed(&[fp], &["Running", "Valid", "Fast"], timeout)?;
        println!(
            "weft listed Running+Valid+Fast everywhere after {:.1?} more",
            waited
        );
    }
    let waited = net.wait_for_bootstrap(timeout)?;
    println!(
        "clients bootstrapped after {:.1?} more (total {:.1?})",
        waited,
        t0.elapsed()
    );
    Ok(net)
}

fn print_nodes(net: &Testnet) {
    for n in net.nodes() {
        let mut ports = Vec::new();
        for (k, v) in [
            ("or", n.or_port),
            ("dir", n.dir_port),
            ("control", n.control_port),
            ("socks", n.socks_port),
        ] {
            if let Some(p) = v {
                ports.push(format!("{k}={p}"));
            }
        }
        println!(
            "  {:<8} {:<9} {:<40} {}  {}",
            n.name,
            format!("{:?}", n.role),
            n.fingerprint.as_deref().unwrap_or("-"),
            ports.join(" "),
            n.dir.display()
        );
    }
    println!("DirAuthority lines:");
    for l in net.dir_authority_lines() {
        println!("  {l}");
    }
}

fn up(args: &NetArgs) -> Result<()> {
    install_signal_handlers();
    let mut net = bring_up(args)?;
    print_nodes(&net);
    println!("network running; Ctrl-C stops it");
    while !INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        net.check_alive()?;
    }
    println!("stopping");
    net.stop()
}

fn demo(args: &NetArgs, bytes: u64) -> Result<()> {
    let mut net = bring_up(args)?;
    print_nodes(&net);
    let middle = match net.weft() {
        Some(w) => w.name.clone(),
        None => {
            println!("(no --weft given: relay1 stands in as the middle)");
            "relay1".to_string()
        }
    };
    let path = [
        net.fingerprint("relay0")?,
        net.fingerprint(&middle)?,
        net.fingerprint("exit0")?,
    ];
    let client = net.node("client0")?.clone();
    let mut ctl = net.control(&client.name)?;
    if let ConsensusEntry::Listed { flags, bandwidth } = ctl.consensus_entry(&path[1])? {
        println!(
            "client0's consensus lists {middle}: {} (bandwidth {bandwidth:?})",
            flags.join(" ")
        );
    }
    let t = Instant::now();
    let circ = ctl
        .build_circuit(&path, Duration::from_secs(60))
        .with_context(|| format!("building relay0 -> {middle} -> exit0"))?;
    println!(
        "circuit {circ} relay0 -> {middle} -> exit0 built in {:.2?}",
        t.elapsed()
    );
    let sink = Sink::start()?;
    let socks = client
        .socks_addr()
        .ok_or_else(|| anyhow!("client0 has no SocksPort"))?;
    let t = Instant::now();
    let stream =
        traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), circ, Duration::from_secs(60))?;
    println!("stream to sink {} open in {:.2?}", sink.addr(), t.elapsed());
    let report = traffic::transfer(stream, Direction::Both, bytes, Duration::from_secs(600))?;
    println!("verified transfer through {middle}: {report}");
    ctl.close_circuit(circ)?;
    println!(
        "network was up for {:.1?}; logs in {}",
        net.uptime(),
        net.config().base_dir.display()
    );
    net.stop()
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match &cli.cmd {
        Cmd::Up(a) => up(a),
        Cmd::Demo { net, bytes } => demo(net, *bytes),
    }
}
