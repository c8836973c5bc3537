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
//! Flow control: the authorities require SENDME v1 (`sendme_accept_min_version=1`,
//! as on the live network), so a client closes its circuit if weft stops
//! authenticating its SENDMEs, and every transfer stalls if weft stops
//! sending them. weft advertises `FlowCtrl=1-2`: with the consensus
//! defaults the clients negotiate congestion control (Vegas, XON/XOFF) in
//! ntor-v3 and the MetricsPort counts it; a second network with `cc_alg=0`
//! runs the fixed windows.
//!
//! DNS: weft's `ServerDNSResolvConfFile` names a name server the test
//! runs on 127.53.0.1:53 ([`dns`]): a name is looked up and connected to;
//! a name whose answer takes seconds holds only its own stream while
//! another stream's bytes flow on the same worker; a name that resolves
//! to an address the exit policy rejects gets END EXITPOLICY; the
//! client's tor-resolve gets a name's address (RESOLVE) and a public
//! address's name (RESOLVE_PTR, weft's PTR lookup).
//!
//! The second network's weft has `IPv6Exit 1` and starts from a state
//! file holding the byte histories of two finished days (as a previous
//! run leaves them, under C's `BWHistory*` names): the authorities accept
//! its extra-info with the `write-history`, `read-history`, `ipv6-…` and
//! `dirreq-…` lines carrying those totals, fetched back from an
//! authority's DirPort and parsed by stem; its descriptor has the
//! `ipv6-policy` summary and the authorities' microdescriptor the `p6`
//! line. After its traffic it republishes, and the authorities accept the
//! extra-info with its `padding-counts` (a 30-s interval in the test),
//! which stem parses.
//!
//! Networks live in `target/tmp/weft-net-exit-<label>-<pid>/`, kept on failure.

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

/// The test's name server and the names it knows.
#[path = "exit_streams/dns.rs"]
mod dns;

/// weft's extra torrc lines: its name server and its MetricsPort.
fn weft_lines(resolv_conf: &std::path::Path, metrics_port: u16) -> Vec<String> {
    vec![
        format!("ServerDNSResolvConfFile {}", resolv_conf.display()),
        format!("MetricsPort 127.0.0.1:{metrics_port}"),
    ]
}

/// One value of weft's MetricsPort page (0 if the line is absent).
/// The sum of every series of family `name` (e.g. one per worker); an
/// error if there is none.
fn metric_sum(net: &Testnet, port: u16, name: &str) -> Result<f64> {
    let body = common::testnet_metrics(net, port)?;
    let values: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| matches!(l.as_bytes().get(name.len()), Some(b'{' | b' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    ensure!(!values.is_empty(), "no {name} on the MetricsPort");
    Ok(values.iter().sum())
}

fn metric(net: &Testnet, port: u16, line: &str) -> Result<f64> {
    let body = common::testnet_metrics(net, port)?;
    Ok(body
        .lines()
        .find_map(|l| l.strip_prefix(line).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0))
}

/// The network `label`; `params`: the authorities' ConsensusParams;
/// `tweak`: changes to weft's node before the start.
fn start(
    sink_port: u16,
    metrics_port: u16,
    label: &str,
    params: &str,
    tweak: &dyn Fn(&mut WeftNode),
) -> Result<(Testnet, PathBuf)> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-exit-{label}-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.consensus_params = params.into();
    cfg.exits = 0;
    cfg.clients = 1;
    cfg.clients_choose_circuits = true;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    // Beside the network's directory (which must hold only the network).
    let resolv_conf = base_dir.with_extension("resolv.conf");
    std::fs::write(
        &resolv_conf,
        "nameserver 127.53.0.1\noptions timeout:10 attempts:1\n",
    )?;
    w.extra_torrc = weft_lines(&resolv_conf, metrics_port);
    // Ports 80 and 443 make it a general-purpose exit (the Exit flag);
    // the sink's port is the one the streams use.
    w.exit_policy = vec![
        "reject 10.0.0.0/8:*".into(),
        "accept *:80".into(),
        "accept *:443".into(),
        format!("accept *:{sink_port}"),
        "reject *:*".into(),
    ];
    tweak(&mut w);
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
    common::parallel_streams(socks, sink.addr(), STREAMS, PER_STREAM, label)
}

/// The DNS checks (see the module docs), through client0.
fn dns_round(net: &Testnet, sink: &Sink) -> Result<()> {
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let port = sink.addr().port();
    let timeout = Duration::from_secs(60);

    // A name weft looks up and connects to.
    let s = traffic::socks5_connect_host(socks, "fast.weft.test", port, "fast", timeout)
        .context("[dns] stream to fast.weft.test")?;
    let r = traffic::transfer(s, Direction::Both, 1 << 20, timeout)?;
    eprintln!("[dns] fast.weft.test: {r}");

    // A lookup that takes seconds holds only its stream: another stream
    // (same circuit isolation, so the same circuit and worker) moves its
    // bytes meanwhile.
    let bulk = traffic::socks5_connect_host(socks, "fast.weft.test", port, "slow", timeout)?;
    let t0 = Instant::now();
    let slow = std::thread::spawn(move || {
        traffic::socks5_connect_host(socks, "slow.weft.test", port, "slow", timeout)
            .map(|s| (s, t0.elapsed()))
    });
    std::thread::sleep(Duration::from_millis(200));
    let r = traffic::transfer(bulk, Direction::Both, 4 << 20, timeout)?;
    let bulk_done = t0.elapsed();
    let (s, slow_connected) = slow
        .join()
        .map_err(|_| anyhow::anyhow!("slow stream thread panicked"))?
        .context("[dns] stream to slow.weft.test")?;
    eprintln!(
        "[dns] while slow.weft.test was looked up ({slow_connected:.2?}), another stream moved 8 MiB by {bulk_done:.2?}"
    );
    ensure!(
        slow_connected >= dns::SLOW && bulk_done < dns::SLOW,
        "a slow lookup held other streams: bulk done at {bulk_done:?}, slow connected at {slow_connected:?}"
    );
    ensure!(r.up_bytes == 4 << 20 && r.down_bytes == 4 << 20);
    traffic::transfer(s, Direction::Both, 1 << 20, timeout)?;

    // A name server that never answers: the lookup fails when the
    // consensus's exit_dns_timeout (7 s, one try) says, not sooner (C's
    // default 2 s) nor at resolv.conf's 10 s.
    let t0 = Instant::now();
    let silent = traffic::socks5_connect_host(socks, dns::SILENT, port, "silent", timeout);
    let failed_after = t0.elapsed();
    eprintln!("[dns] {}: failed after {failed_after:.2?}", dns::SILENT);
    ensure!(silent.is_err(), "a name nobody answers connected");
    ensure!(
        failed_after >= Duration::from_millis(6500) && failed_after < Duration::from_secs(30),
        "the silent lookup failed after {failed_after:?}, not the consensus's 7 s"
    );

    // A name that resolves to an address the policy rejects: END
    // EXITPOLICY with that address. (The client then remaps the name to
    // the address and, weft being its only exit, tries again and again;
    // the test closes the stream once it saw the END.)
    let mut ctl = net.control("client0")?;
    ctl.set_events(&["STREAM"])?;
    let refused = std::thread::spawn(move || {
        traffic::socks5_connect_host(
            socks,
            "rejected.weft.test",
            port,
            "rej",
            Duration::from_secs(30),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = None;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Some(l) = ctl.next_event(Duration::from_secs(1))? else {
            continue;
        };
        if id.is_none() && l.contains(" NEW ") && l.contains("rejected.weft.test") {
            id = l.split_whitespace().nth(1).map(str::to_string);
        }
        let Some(i) = &id else { continue };
        if l.starts_with(&format!("STREAM {i} ")) {
            seen.push(l.clone());
            if l.contains("REMOTE_REASON=EXITPOLICY") {
                ctl.command(&format!("CLOSESTREAM {i} 1"))?;
                break;
            }
        }
    }
    let r = refused
        .join()
        .map_err(|_| anyhow::anyhow!("refused stream thread panicked"))?;
    ensure!(r.is_err(), "rejected.weft.test (10.0.0.1) was connected to");
    ensure!(
        seen.iter().any(|l| l.contains("REMOTE_REASON=EXITPOLICY")),
        "no END EXITPOLICY for rejected.weft.test: {seen:?}"
    );
    ensure!(
        seen.iter()
            .any(|l| l.contains(" REMAP ") && l.contains("10.0.0.1")),
        "the END did not carry the resolved address: {seen:?}"
    );
    eprintln!("[dns] rejected.weft.test refused with END EXITPOLICY");

    // RESOLVE and RESOLVE_PTR from the stock client's tor-resolve (SOCKS
    // RESOLVE, 0xF0 and 0xF1): weft answers the name and, as C's exits,
    // looks the public address's name up (PTR) and sends it back.
    let resolve = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("tor-resolve")
            .args(args)
            .arg(socks.to_string())
            .output()
            .context("tor-resolve (Debian's tor package)")?;
        ensure!(
            out.status.success(),
            "tor-resolve {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let forward = resolve(&["-5", "fast.weft.test"])?;
    ensure!(forward == "127.0.0.1", "RESOLVE fast.weft.test: {forward}");
    let name = resolve(&["-5", "-x", "1.2.3.4"])?;
    eprintln!("[dns] tor-resolve: fast.weft.test -> {forward}, -x 1.2.3.4 -> {name}");
    ensure!(name == dns::PTR.1, "RESOLVE_PTR 1.2.3.4: {name:?}");
    Ok(())
}

#[test]
fn stock_clients_use_weft_as_their_exit() -> Result<()> {
    dns::start().context("starting the test's name server on 127.53.0.1:53")?;
    let sink_port = common::free_port();
    let sink = Sink::start_on(sink_port)?;
    let metrics_port = common::free_port();
    // SENDME v1 required both ways, as on the live network: a client
    // refuses an unauthenticated SENDME from weft, and weft one from it.
    let (mut net, base_dir) = start(
        sink_port,
        metrics_port,
        "cc",
        // The exit's resolver waits as the consensus says (C's default,
        // 1 s and two tries, would fail slow.weft.test).
        "sendme_accept_min_version=1 exit_dns_timeout=7000 exit_dns_num_attempts=1",
        &|_| {},
    )?;
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
    // The slow name needs the consensus's exit_dns_timeout: weft may
    // still be on an earlier consensus (the clients bootstrap from the
    // authorities, not from weft; one CI run looked the name up 0.8 s
    // before weft took the parameters, with C's 1 s default).
    let deadline = Instant::now() + LISTING_BOUND;
    while !net
        .grep_logs("DNS: exit_dns_timeout 7000 ms")
        .iter()
        .any(|l| l.starts_with("weft:"))
    {
        ensure!(
            Instant::now() < deadline,
            "weft never took the consensus's exit_dns_timeout"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    dns_round(&net, &sink)?;
    // The MetricsPort counted them (counters are per run of weft).
    std::thread::sleep(Duration::from_millis(1500));
    let m = |l: &str| metric(&net, metrics_port, l);
    let begins = m("tor_relay_streams_total{type=\"BEGIN\"}")?;
    let queries = m("tor_relay_exit_dns_query_total")?;
    let found = m("tor_relay_exit_dns_error_total{reason=\"success\"}")?;
    let policy_ends = m("weft_exit_stream_ends_total{reason=\"exitpolicy\"}")?;
    eprintln!("[metrics] begin {begins}, DNS queries {queries} ({found} found), END EXITPOLICY {policy_ends}");
    ensure!(begins >= (STREAMS + 3) as f64, "streams counted: {begins}");
    ensure!(
        queries >= 4.0 && found >= 3.0,
        "DNS counted: {queries} / {found}"
    );
    ensure!(policy_ends >= 1.0, "END EXITPOLICY counted: {policy_ends}");
    // weft advertises FlowCtrl=2 and Relay=4, so the clients asked for
    // congestion control in their ntor-v3 handshakes and got it: their
    // streams above ran under Vegas and XON/XOFF.
    let cc =
        m("tor_relay_congestion_control_total{state=\"cc_circuits\",action=\"circs_created\"}")?;
    eprintln!("[metrics] circuits with congestion control: {cc}");
    ensure!(cc >= 1.0, "no client negotiated congestion control");
    // And, with Relay=5-6 advertised too, CGO: a C client asks its exit
    // for it whenever congestion control is on (circuitbuild.c
    // client_circ_negotiation_message). The streams above were hashed
    // intact at both ends, so the client ran CGO with weft as well: a tor1
    // layer could not read one cell of weft's.
    let cgo = metric_sum(&net, metrics_port, "weft_worker_cgo_circuits_created_total")?;
    eprintln!("[metrics] CGO circuits: {cgo}");
    ensure!(cgo >= 1.0, "no client asked weft for CGO");
    let resolv_conf = base_dir.with_extension("resolv.conf");
    for threads in [0, 1] {
        net.restart_weft(Some(threads), weft_lines(&resolv_conf, metrics_port))?;
        net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], LISTING_BOUND)?;
        moved += round(&net, &sink, &format!("threads{threads}"))?;
    }
    std::thread::sleep(Duration::from_millis(1500));
    let from = metric(
        &net,
        metrics_port,
        "weft_exit_stream_bytes_total{direction=\"from_destination\"}",
    )?;
    let to = metric(
        &net,
        metrics_port,
        "weft_exit_stream_bytes_total{direction=\"to_destination\"}",
    )?;
    let want = (STREAMS as u64 * PER_STREAM) as f64;
    eprintln!("[metrics] last run: {from} B from destinations, {to} B to them");
    ensure!(
        from >= want && to >= want,
        "bytes counted: {from} / {to}, want {want}"
    );
    ensure!(sink.errors().is_empty(), "sink errors: {:?}", sink.errors());
    ensure!(moved == 3 * STREAMS as u64 * 2 * PER_STREAM);
    reload_exit_policy(&net, &sink, metrics_port)?;

    no_bad_closes(&net)?;
    net.stop()?;
    drop(net);
    let _ = std::fs::remove_file(base_dir.with_extension("resolv.conf"));
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}

/// An operator's reload: the torrc's ExitPolicy now rejects the sink's
/// port, SIGHUP, and weft refuses the next stream there with END
/// EXITPOLICY (the client still believes the old policy from its
/// consensus, so it asks) — the new policy applies at once, without a
/// restart.
fn reload_exit_policy(net: &Testnet, sink: &Sink, metrics_port: u16) -> Result<()> {
    let port = sink.addr().port();
    let node = net.weft().context("no weft node")?;
    let torrc = node.torrc();
    let text = std::fs::read_to_string(&torrc)?;
    let accept = format!("ExitPolicy accept *:{port}\n");
    ensure!(text.contains(&accept), "weft's torrc: {text}");
    std::fs::write(
        &torrc,
        text.replace(&accept, &format!("ExitPolicy reject *:{port}\n")),
    )?;
    let before = metric(
        net,
        metrics_port,
        "weft_exit_stream_ends_total{reason=\"exitpolicy\"}",
    )?;
    let pid = net.weft_pid().context("weft's pid")?;
    ensure!(std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()?
        .success());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(node.notice_log()).unwrap_or_default();
        if let Some(l) = log.lines().rev().find(|l| l.contains("reloaded the torrc")) {
            ensure!(l.contains("ExitPolicy"), "{l}");
            break;
        }
        ensure!(std::time::Instant::now() < deadline, "weft did not reload");
        std::thread::sleep(Duration::from_millis(200));
    }
    let socks = net
        .by_role(weft_testnet::Role::Client)
        .first()
        .and_then(|c| c.socks_addr())
        .context("client SocksPort")?;
    let target = sink.addr();
    let attempt = std::thread::spawn(move || {
        traffic::socks5_connect(socks, target, Duration::from_secs(15)).is_ok()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    loop {
        let now = metric(
            net,
            metrics_port,
            "weft_exit_stream_ends_total{reason=\"exitpolicy\"}",
        )?;
        if now > before {
            eprintln!(
                "[reload] END EXITPOLICY for port {port} after the reload ({before} -> {now})"
            );
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the reloaded ExitPolicy was not applied"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let connected = attempt
        .join()
        .map_err(|_| anyhow::anyhow!("connect thread panicked"))?;
    ensure!(
        !connected,
        "a stream to the rejected port went through after the reload"
    );
    Ok(())
}

/// No circuit closed for a flow-control or stream reason. (Circuits that
/// close for other reasons are fine: the end of a bandwidth self-test, or
/// a stock relay's reachability test asking weft to extend back to it,
/// which C Tor refuses too.)
fn no_bad_closes(net: &Testnet) -> Result<()> {
    let bad: Vec<String> = net
        .grep_logs("closing circuit")
        .into_iter()
        .filter(|l| l.starts_with("weft:"))
        .filter(|l| !l.contains("extend failed") && !l.contains("self-test"))
        .collect();
    ensure!(bad.is_empty(), "weft closed circuits: {bad:?}");
    Ok(())
}

/// The same clients with congestion control off in the consensus
/// (`cc_alg=0`): they ask for none, and the fixed windows (circuit 1000 /
/// 100, stream 500 / 50) with SENDME v1 carry the streams.
#[test]
fn stock_clients_use_the_fixed_windows_without_congestion_control() -> Result<()> {
    dns::start().context("starting the test's name server on 127.53.0.1:53")?;
    let sink_port = common::free_port();
    let sink = Sink::start_on(sink_port)?;
    let metrics_port = common::free_port();
    let history = stats::SeededHistory::new();
    let (mut net, base_dir) = start(
        sink_port,
        metrics_port,
        "fixed",
        "cc_alg=0 sendme_accept_min_version=1",
        &|w| {
            w.extra_torrc.push("IPv6Exit 1".into());
            // `padding-counts` every 30 s instead of C's day.
            w.extra_torrc
                .push("TestingPaddingStatisticsInterval 30".into());
            w.data_files
                .push(("state".into(), history.state.clone().into_bytes()));
            w.data_files.push((
                "stats/dirreq-stats".into(),
                history.dirreq.clone().into_bytes(),
            ));
        },
    )?;
    let fp = weft_fp(&net)?;
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], LISTING_BOUND)?;
    net.wait_for_bootstrap(LISTING_BOUND)?;
    stats::check_extra_info(&net, &fp, &history)?;
    stats::check_ipv6_policy(&net, &fp, &format!("accept 80,443,{sink_port}"))?;
    let allocs = |net: &Testnet| metric_sum(net, metrics_port, "weft_worker_allocations_total");
    // What the workers allocate with no traffic (reports, housekeeping,
    // the stock relays' own circuits) over as long as the round and its
    // pause take, so the bound below counts what the cells cost.
    let idle0 = allocs(&net)?;
    let idle_started = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let idle = allocs(&net)? - idle0;
    let idle_secs = idle_started.elapsed().as_secs_f64();
    let idle_per_s = idle / idle_secs;
    let a0 = allocs(&net)?;
    let round_started = Instant::now();
    let moved = round(&net, &sink, "fixed-windows")?;
    ensure!(moved == STREAMS as u64 * 2 * PER_STREAM);
    // No allocation per DATA cell on the exit path: what the round costs
    // beyond the idle rate (streams opened, retried connects, buffers
    // grown: 219 over 75,801 cells when written, idle not taken off)
    // stays below one per 50 cells (309 to 797 in debug runs of the same
    // code: the clients' circuits and retries vary); an allocation per
    // cell would be one per cell.
    std::thread::sleep(Duration::from_millis(1500));
    let cells = moved as f64 / 498.0;
    let a = allocs(&net)? - a0;
    let background = idle_per_s * round_started.elapsed().as_secs_f64();
    eprintln!(
        "[fixed-windows] {a} worker allocations over {cells:.0} DATA cells \
         ({idle} in {idle_secs:.1} s idle before)"
    );
    let a = (a - background).max(0.0);
    ensure!(
        a < cells / 50.0,
        "{a} allocations over {cells:.0} DATA cells"
    );
    // Only then (its reloads and republishing allocate, once a second
    // or per reload, not per cell): the round changed weft's observed
    // bandwidth, and it republishes with the padding counts of an
    // interval that has ended.
    stats::check_padding_counts(&net, &fp)?;
    stats::check_dns_withdrawal(&net, &fp)?;
    std::thread::sleep(Duration::from_millis(1500));
    let cc = metric(
        &net,
        metrics_port,
        "tor_relay_congestion_control_total{state=\"cc_circuits\",action=\"circs_created\"}",
    )?;
    ensure!(
        cc == 0.0,
        "congestion control negotiated with cc_alg=0: {cc}"
    );
    // No congestion control, no CGO: a C client asks for it only with
    // congestion control (and weft would refuse it without).
    let cgo = metric_sum(&net, metrics_port, "weft_worker_cgo_circuits_created_total")?;
    ensure!(cgo == 0.0, "CGO without congestion control: {cgo}");
    ensure!(sink.errors().is_empty(), "sink errors: {:?}", sink.errors());
    no_bad_closes(&net)?;
    net.stop()?;
    drop(net);
    let _ = std::fs::remove_file(base_dir.with_extension("resolv.conf"));
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}

/// The extra-info's statistics and the IPv6 exit policy summary, as the
/// authorities have them.
#[path = "exit_streams/stats.rs"]
mod stats;
