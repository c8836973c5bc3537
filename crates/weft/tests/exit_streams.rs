//! weft as the exit of an unmodified stock tor client (issue 12, first
//! slice), against stock C tor from Debian on loopback: a network of 3
//! authorities, 2 stock middle/guard relays, no stock exit, and weft with
//! an exit policy; the authorities vote Exit from the descriptors, so weft
//! earns the flag from its own policy. The client picks its own circuits
//! (no ATTACHSTREAM); weft is the only exit, so every stream ends there.
//! Streams move bytes both ways, verified by SHA-256 at both ends, with
//! ConnectionThreads 2, 0 and 1 (weft restarted between them). What weft
//! answered is checked in its log and in the client's stream events.
//!
//! Networks live in `target/tmp/weft-net-exit-<pid>/`, kept on failure.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

/// Streams per round, run at once.
const STREAMS: usize = 6;
/// Bytes per stream and direction: past several circuit windows (1000
/// cells ≈ 498 KB), so SENDMEs must flow both ways.
const PER_STREAM: u64 = 3 << 20;
/// Bound on every wait for the consensus.
const LISTING_BOUND: Duration = Duration::from_secs(240);

fn start(sink_port: u16) -> Result<(Testnet, PathBuf)> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-exit-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.exits = 0;
    cfg.clients = 1;
    cfg.clients_choose_circuits = true;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    // Ports 80 and 443 make it a general-purpose exit (the Exit flag);
    // the sink's port is the one the streams use.
    w.exit_policy = vec![
        "accept *:80".into(),
        "accept *:443".into(),
        format!("accept *:{sink_port}"),
        "reject *:*".into(),
    ];
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[exit] network in {} from port {}",
        base_dir.display(),
        cfg.base_port
    );
    Ok((Testnet::start(cfg)?, base_dir))
}

fn weft_fp(net: &Testnet) -> Result<String> {
    Ok(net
        .weft()
        .context("no weft node")?
        .fingerprint()?
        .to_string())
}

/// `STREAMS` streams through client0's SocksPort to the sink, at once,
/// each verified both ways. The first connects are retried while the
/// client has no usable exit circuit yet (bounded).
fn round(net: &Testnet, sink: &Sink, label: &str) -> Result<u64> {
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let first = loop {
        match traffic::socks5_connect(socks, sink.addr(), Duration::from_secs(60)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("[{label}] no stream yet ({e:#}); retrying");
                std::thread::sleep(Duration::from_secs(3));
            }
            Err(e) => return Err(e).context(format!("[{label}] first stream")),
        }
    };
    let mut streams = vec![first];
    for i in 1..STREAMS {
        streams.push(
            traffic::socks5_connect(socks, sink.addr(), Duration::from_secs(60))
                .with_context(|| format!("[{label}] stream {i}"))?,
        );
    }
    let t0 = Instant::now();
    let threads: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                traffic::transfer(s, Direction::Both, PER_STREAM, Duration::from_secs(300))
            })
        })
        .collect();
    let mut moved = 0;
    for (i, t) in threads.into_iter().enumerate() {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
            .with_context(|| format!("[{label}] transfer on stream {i}"))?;
        ensure!(
            r.up_bytes == PER_STREAM && r.down_bytes == PER_STREAM,
            "{r}"
        );
        moved += r.up_bytes + r.down_bytes;
    }
    eprintln!(
        "[{label}] {STREAMS} streams through weft as exit: {} MiB verified in {:.2?}",
        moved >> 20,
        t0.elapsed()
    );
    Ok(moved)
}

#[test]
fn stock_clients_use_weft_as_their_exit() -> Result<()> {
    let sink_port = common::free_port();
    let sink = Sink::start_on(sink_port)?;
    let (mut net, base_dir) = start(sink_port)?;
    let stock: Vec<String> = net
        .nodes()
        .iter()
        .filter_map(|n| n.fingerprint.clone())
        .filter(|f| Some(f.as_str()) != net.weft().and_then(|w| w.fingerprint.as_deref()))
        .collect();
    net.wait_until_listed(&stock, &["Running", "Valid"], LISTING_BOUND)?;
    let fp = weft_fp(&net)?;
    // The Exit flag comes from weft's own descriptor (no authority lists
    // it in TestingDirAuthVoteExit).
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], LISTING_BOUND)?;
    net.wait_for_bootstrap(LISTING_BOUND)?;

    let mut moved = round(&net, &sink, "threads2")?;
    for threads in [0, 1] {
        net.restart_weft(Some(threads), Vec::new())?;
        net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], LISTING_BOUND)?;
        moved += round(&net, &sink, &format!("threads{threads}"))?;
    }
    ensure!(sink.errors().is_empty(), "sink errors: {:?}", sink.errors());
    ensure!(moved == 3 * STREAMS as u64 * 2 * PER_STREAM);

    // weft says it is an exit, and nothing went wrong in its log.
    let log = net.grep_logs("exit streams are incomplete");
    ensure!(
        !log.is_empty(),
        "weft did not warn that its exit is incomplete"
    );
    let bad: Vec<String> = net
        .grep_logs("closing circuit")
        .into_iter()
        .filter(|l| l.starts_with("weft:"))
        .collect();
    ensure!(bad.is_empty(), "weft closed circuits: {bad:?}");
    net.stop()?;
    drop(net);
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}
