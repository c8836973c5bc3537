//! The configuration files of a network: stock tor's torrc for authorities,
//! relays, exits and clients (TestingTorNetwork with chutney-style fast voting
//! and explicit Guard / Exit / HSDir lists), weft's torrc, and the shared
//! `DirAuthority` lines.

use std::fmt::Write as _;
use std::path::Path;

use crate::network::Role;

/// Set to give every stock node a debug-level log (`debug.log`).
pub const DEBUG_LOG_ENV: &str = "WEFT_TESTNET_DEBUG_LOG";

/// The authorities' voting interval (and initial voting interval), in
/// seconds: a consensus every 20 s. Onion-service time periods follow from
/// it ([`crate::onion::hs_time_period_start_after`]).
pub const VOTING_INTERVAL_SECS: u64 = 20;
const VOTING_INTERVAL: &str = "20";

/// `AuthDirFastGuarantee` on the test authorities, in bytes/s.
///
/// tor 0.4.9 (voteflags.c: `dirserv_compute_performance_thresholds`) sets the
/// Fast threshold to the 12.5th percentile of the relays' credible bandwidth
/// (min(rate, observed) from the descriptor, in KB/s), falling back to the
/// 25th percentile when that is under 38 KB/s, raised to
/// `TestingMinFastFlagThreshold` (0 here) and then capped at
/// `AuthDirFastGuarantee / 1000` KB/s. A value of 0 disables the cap, so 0
/// is *not* "everyone is Fast". With 1000 the threshold is at most 1 KB/s:
/// any relay reporting at least 1000 bytes/s observed bandwidth is always
/// Fast, and one reporting less (e.g. 0) is Fast only while a quarter of the
/// relays also report under 1 KB/s — which is the case in the first minutes,
/// before stock relays have published the results of their bandwidth
/// self-tests.
pub const AUTH_DIR_FAST_GUARANTEE: u64 = 1000;

/// Everything node-independent that goes into every torrc.
#[derive(Debug, Clone)]
pub(crate) struct NetFacts {
    /// `DirAuthority ...` lines, identical for every node.
    pub(crate) dir_authority_lines: Vec<String>,
    /// Fingerprints voted Guard (the stock relays).
    pub(crate) guard_fps: Vec<String>,
    /// Fingerprints voted Exit (the stock exits).
    pub(crate) exit_fps: Vec<String>,
    /// Fingerprints voted HSDir (every stock relay, authorities included).
    pub(crate) hsdir_fps: Vec<String>,
    /// v3 onion services on the onion-service node.
    pub(crate) onion_services: usize,
    /// Clients attach their own streams.
    pub(crate) clients_choose_circuits: bool,
    /// weft's exit policy lines (empty: weft is not an exit).
    pub(crate) weft_exit_policy: Vec<String>,
    /// The authorities' ConsensusParams (empty: none).
    pub(crate) consensus_params: String,
    /// Extra lines for stock clients, by client index.
    pub(crate) client_torrc: Vec<Vec<String>>,
    /// Extra lines for every onion service.
    pub(crate) service_torrc: Vec<String>,
    /// Extra lines for stock relays, by relay index.
    pub(crate) relay_torrc: Vec<Vec<String>>,
    pub(crate) exit_torrc: Vec<Vec<String>>,
    pub(crate) authority_torrc: Vec<String>,
    /// The authorities compute Guard themselves (see
    /// `TestnetConfig::guards_by_vote`).
    pub(crate) guards_by_vote: bool,
    /// The authorities compute HSDir themselves
    /// (`TestnetConfig::hsdirs_by_vote`).
    pub(crate) hsdirs_by_vote: bool,
}

/// The ports one node listens on.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ports {
    pub(crate) or_port: Option<u16>,
    pub(crate) dir_port: Option<u16>,
    pub(crate) control_port: Option<u16>,
    pub(crate) socks_port: Option<u16>,
    pub(crate) service_port: Option<u16>,
}

/// A `DirAuthority` line for one authority.
pub(crate) fn dir_authority_line(
    nick: &str,
    or_port: u16,
    dir_port: u16,
    v3ident: &str,
    fp: &str,
) -> String {
    format!(
        "DirAuthority {nick} orport={or_port} no-v2 v3ident={v3ident} 127.0.0.1:{dir_port} {fp}"
    )
}

/// A routerset list tor accepts: `$FP1,$FP2`. An empty list would mean
/// "nobody", which tor spells as an unset option; callers skip it then.
fn routerset(fps: &[String]) -> String {
    fps.iter()
        .map(|f| format!("${f}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The torrc of a stock tor node.
pub(crate) fn stock_torrc(
    role: Role,
    nick: &str,
    dir: &Path,
    ports: Ports,
    facts: &NetFacts,
) -> String {
    let d = dir.display();
    let mut t = String::new();
    let mut line = |s: &str| {
        t.push_str(s);
        t.push('\n');
    };
    line(&format!(
        "# weft-testnet {role:?} {nick}; generated, do not edit"
    ));
    line("TestingTorNetwork 1");
    line(&format!("DataDirectory {d}"));
    line(&format!("PidFile {d}/pid"));
    line(&format!("Log notice file {d}/notice.log"));
    line(&format!("Log info file {d}/info.log"));
    if std::env::var_os(DEBUG_LOG_ENV).is_some() {
        // For chasing a cell by hand: every relay cell each stock node
        // sends and receives (large).
        line(&format!("Log debug file {d}/debug.log"));
    }
    line("ProtocolWarnings 1");
    line("SafeLogging 0");
    line("LogTimeGranularity 1");
    line(&format!("Nickname {nick}"));
    line(&format!("ContactInfo {nick}@weft-testnet.invalid"));
    line("Address 127.0.0.1");
    line("ShutdownWaitLength 0");
    line("DisableDebuggerAttachment 0");
    line("RunAsDaemon 0");
    // Exit when the process that started us dies (polled by tor).
    line(&format!("__OwningControllerProcess {}", std::process::id()));
    // Tiny network: build circuits with a third of the paths known.
    line("PathsNeededToBuildCircuits 0.67");
    if let Some(p) = ports.control_port {
        line(&format!("ControlPort 127.0.0.1:{p}"));
        line("CookieAuthentication 1");
    }
    for a in &facts.dir_authority_lines {
        line(a);
    }
    match role {
        Role::Authority | Role::Relay | Role::Exit => {
            if let Some(p) = ports.or_port {
                line(&format!("ORPort 127.0.0.1:{p}"));
            }
            if let Some(p) = ports.dir_port {
                line(&format!("DirPort 127.0.0.1:{p}"));
            }
            line("SocksPort 0");
            line("AssumeReachable 1");
            if role == Role::Exit {
                line("ExitRelay 1");
                line("ExitPolicyRejectPrivate 0");
                line("ExitPolicy accept 127.0.0.0/8:*");
                line("ExitPolicy reject *:*");
            } else {
                line("ExitRelay 0");
                line("ExitPolicy reject *:*");
            }
            let (prefix, extra) = match role {
                Role::Exit => ("exit", &facts.exit_torrc),
                _ => ("relay", &facts.relay_torrc),
            };
            if matches!(role, Role::Relay | Role::Exit) {
                let i: usize = nick
                    .trim_start_matches(prefix)
                    .parse()
                    .unwrap_or(usize::MAX);
                for l in extra.get(i).into_iter().flatten() {
                    line(l);
                }
            }
            if role == Role::Authority {
                for l in &facts.authority_torrc {
                    line(l);
                }
            }
        }
        Role::Client => {
            if let Some(p) = ports.socks_port {
                line(&format!("SocksPort 127.0.0.1:{p}"));
            }
            if !facts.clients_choose_circuits {
                // Streams wait for ATTACHSTREAM: tests choose the circuit.
                line("__LeaveStreamsUnattached 1");
            }
            // On loopback a client learns a circuit build timeout of about
            // 20 ms from its ~15 ms builds, and then any build that needs a
            // new TLS connection (a relay was just restarted) or meets a busy
            // core "times out". A fixed timeout, like a new client's.
            line("LearnCircuitBuildTimeout 0");
            line("CircuitBuildTimeout 30");
            // Clients are named client0, client1, ...
            let i: usize = nick
                .trim_start_matches("client")
                .parse()
                .unwrap_or(usize::MAX);
            for l in facts.client_torrc.get(i).into_iter().flatten() {
                line(l);
            }
        }
        Role::OnionService => {
            line("SocksPort 0");
            let target = ports.service_port.unwrap_or(0);
            for i in 0..facts.onion_services {
                line(&format!("HiddenServiceDir {d}/hs{i}"));
                line("HiddenServiceVersion 3");
                line(&format!("HiddenServicePort 80 127.0.0.1:{target}"));
                for l in &facts.service_torrc {
                    line(l);
                }
            }
        }
        // weft has its own torrc (weft_torrc); never generated here.
        Role::Weft => {}
    }
    if role == Role::Authority {
        let mut a = String::new();
        let _ = writeln!(a, "AuthoritativeDirectory 1");
        let _ = writeln!(a, "V3AuthoritativeDirectory 1");
        for (k, v) in [
            ("V3AuthVotingInterval", VOTING_INTERVAL),
            ("V3AuthVoteDelay", "4"),
            ("V3AuthDistDelay", "4"),
            ("TestingV3AuthInitialVotingInterval", VOTING_INTERVAL),
            ("TestingV3AuthInitialVoteDelay", "4"),
            ("TestingV3AuthInitialDistDelay", "4"),
            ("V3AuthNIntervalsValid", "2"),
            ("TestingMinFastFlagThreshold", "0"),
            ("TestingMinExitFlagThreshold", "0"),
        ] {
            let _ = writeln!(a, "{k} {v}");
        }
        let _ = writeln!(a, "AuthDirFastGuarantee {AUTH_DIR_FAST_GUARANTEE} bytes");
        if !facts.consensus_params.is_empty() {
            let _ = writeln!(a, "ConsensusParams {}", facts.consensus_params);
        }
        if !facts.weft_exit_policy.is_empty() || facts.guards_by_vote || facts.hsdirs_by_vote {
            // Clients that pick their own circuits sample only Stable
            // guards; in a young network the stock relays are not Stable
            // for a long while, so the clients would have no guard.
            let _ = writeln!(a, "AuthDirVoteStableGuaranteeMinUptime 0");
        }
        if facts.hsdirs_by_vote {
            let _ = writeln!(a, "MinUptimeHidServDirectoryV2 0 minutes");
        }
        if facts.guards_by_vote {
            let _ = writeln!(a, "AuthDirVoteGuardGuaranteeTimeKnown 30 seconds");
            let _ = writeln!(a, "AuthDirGuardBWGuarantee 10 KBytes");
        }
        for (opt, fps) in [
            ("TestingDirAuthVoteGuard", &facts.guard_fps),
            ("TestingDirAuthVoteExit", &facts.exit_fps),
            ("TestingDirAuthVoteHSDir", &facts.hsdir_fps),
        ] {
            let by_vote = (facts.guards_by_vote && opt == "TestingDirAuthVoteGuard")
                || (facts.hsdirs_by_vote && opt == "TestingDirAuthVoteHSDir");
            if !fps.is_empty() && !by_vote {
                let _ = writeln!(a, "{opt} {}", routerset(fps));
            }
            // Strict: nobody outside the list gets the flag, whatever its
            // descriptor says (weft is never Guard/Exit/HSDir unless the
            // flag is voted by the rules) — except Exit when weft is an
            // exit: it earns that flag from its descriptor's policy.
            let strict =
                !by_vote && (opt != "TestingDirAuthVoteExit" || facts.weft_exit_policy.is_empty());
            let _ = writeln!(a, "{opt}IsStrict {}", u8::from(strict));
        }
        line(a.trim_end());
    }
    t
}

/// weft's torrc (only options weft's parser supports).
pub(crate) fn weft_torrc(
    nick: &str,
    dir: &Path,
    data_dir: &Path,
    or_port: u16,
    facts: &NetFacts,
    node: &crate::WeftNode,
) -> String {
    let (threads, extra, address_lines) = (
        node.connection_threads,
        &node.extra_torrc,
        node.address_lines.as_deref(),
    );
    let d = dir.display();
    let mut t = String::new();
    let _ = writeln!(t, "# weft-testnet weft node {nick}; generated, do not edit");
    let _ = writeln!(t, "TestingTorNetwork 1");
    match address_lines {
        Some(lines) => {
            for l in lines {
                let _ = writeln!(t, "{}", l.replace("{port}", &or_port.to_string()));
            }
        }
        None => {
            let _ = writeln!(t, "ORPort 127.0.0.1:{or_port}");
            let _ = writeln!(t, "Address 127.0.0.1");
        }
    }
    let _ = writeln!(t, "Nickname {nick}");
    let _ = writeln!(t, "ContactInfo {nick}@weft-testnet.invalid");
    let _ = writeln!(t, "DataDirectory {}", data_dir.display());
    let _ = writeln!(t, "PidFile {d}/pid");
    let _ = writeln!(t, "Log notice file {d}/notice.log");
    let _ = writeln!(t, "Log info file {d}/info.log");
    let _ = writeln!(t, "AssumeReachable 1");
    if facts.weft_exit_policy.is_empty() {
        let _ = writeln!(t, "ExitRelay 0");
        let _ = writeln!(t, "ExitPolicy reject *:*");
    } else {
        let _ = writeln!(t, "ExitRelay 1");
        let _ = writeln!(t, "ExitPolicyRejectPrivate 0");
        for l in &facts.weft_exit_policy {
            let _ = writeln!(t, "ExitPolicy {l}");
        }
    }
    if let Some(n) = threads {
        let _ = writeln!(t, "ConnectionThreads {n}");
    }
    for a in &facts.dir_authority_lines {
        let _ = writeln!(t, "{a}");
    }
    for l in extra {
        let _ = writeln!(t, "{l}");
    }
    t
}
