//! What a test network consists of: [`TestnetConfig`] (counts of each kind of
//! stock tor node, where the network lives on disk, which ports it may use)
//! and [`WeftNode`] (how to run the one optional weft relay in it).

use std::path::PathBuf;

/// The shape of a private Tor network on loopback.
///
/// Ports are allocated sequentially from `base_port` upward (see
/// [`TestnetConfig::ports_needed`]), so concurrent networks only need
/// disjoint ranges.
#[derive(Debug, Clone)]
pub struct TestnetConfig {
    /// Directory holding one sub-directory per node. Created if missing; if it
    /// exists it must be empty or hold an earlier test network (it then gets
    /// wiped).
    pub base_dir: PathBuf,
    /// First port of the range this network uses on 127.0.0.1.
    pub base_port: u16,
    /// Directory authorities (also relays). At least 1; default 3.
    pub authorities: usize,
    /// Stock non-exit relays; the only nodes voted Guard. Default 2.
    pub relays: usize,
    /// Stock exit relays (exit to 127.0.0.0/8 only); the only nodes voted
    /// Exit. Default 2.
    pub exits: usize,
    /// Stock clients with a SocksPort and `__LeaveStreamsUnattached 1`.
    /// Default 1.
    pub clients: usize,
    /// The weft relay, if any. It never gets Guard (unless
    /// `guards_by_vote`), Exit (unless an exit) or HSDir (unless
    /// `hsdirs_by_vote`).
    pub weft: Option<WeftNode>,
    /// v3 onion services run by one stock tor node (`hs0`), each
    /// `HiddenServicePort 80` to the same local port
    /// ([`crate::NodeInfo::service_port`], where the test runs its sink).
    /// Default 0 (no such node).
    pub onion_services: usize,
    /// The clients pick their own circuits (no `__LeaveStreamsUnattached`),
    /// as an ordinary user's tor does; needed for onion-service connections.
    /// Default false: tests attach streams with ATTACHSTREAM.
    pub clients_choose_circuits: bool,
    /// The authorities' `ConsensusParams` (e.g.
    /// `sendme_accept_min_version=1 cc_alg=0`); empty: none, the
    /// defaults of every parameter apply.
    pub consensus_params: String,
    /// Extra torrc lines for stock client `i` (`client_torrc[i]`, e.g.
    /// `ConfluxClientUX latency`); clients past the end get none.
    pub client_torrc: Vec<Vec<String>>,
    /// Extra torrc lines for every onion service (after its
    /// `HiddenServicePort`, e.g. `HiddenServiceNumIntroductionPoints 5`).
    pub service_torrc: Vec<String>,
    /// Extra torrc lines for stock relay `i` (`relay_torrc[i]`, e.g.
    /// `BandwidthRate 300 KBytes`).
    pub relay_torrc: Vec<Vec<String>>,
    /// Extra torrc lines for stock exit `i` (`exit_torrc[i]`).
    pub exit_torrc: Vec<Vec<String>>,
    /// Extra torrc lines for every authority (e.g.
    /// `AuthDirHasIPv6Connectivity 1`).
    pub authority_torrc: Vec<String>,
    /// The authorities compute the Guard flag themselves (C Tor's rules:
    /// Fast, Stable, a directory cache, time known and uptime over the
    /// network's thresholds) instead of voting it for the stock relays
    /// only; the thresholds are lowered for a young network
    /// (`AuthDirVoteGuardGuaranteeTimeKnown 30 seconds`,
    /// `AuthDirGuardBWGuarantee 10 KBytes`,
    /// `AuthDirVoteStableGuaranteeMinUptime 0`). weft can then earn Guard.
    pub guards_by_vote: bool,
    /// The authorities compute the HSDir flag themselves (C Tor's
    /// `dirserv_thinks_router_is_hs_dir`: `hidden-service-dir` and
    /// `tunnelled-dir-server` in the descriptor, Stable, Fast, Running,
    /// Valid, uptime at least `MinUptimeHidServDirectoryV2`) for every
    /// relay, weft included, instead of voting it for the stock relays
    /// only; lowered for a young network: `MinUptimeHidServDirectoryV2 0
    /// minutes`, `AuthDirVoteStableGuaranteeMinUptime 0`.
    pub hsdirs_by_vote: bool,
}

impl TestnetConfig {
    /// A default-shaped network (3 authorities, 2 relays, 2 exits, 1 client,
    /// no weft) in `base_dir` using ports from `base_port`.
    pub fn new(base_dir: impl Into<PathBuf>, base_port: u16) -> Self {
        TestnetConfig {
            base_dir: base_dir.into(),
            base_port,
            ..TestnetConfig::default()
        }
    }

    /// How many consecutive ports from `base_port` this network uses.
    pub fn ports_needed(&self) -> usize {
        // Authority: ORPort, DirPort, ControlPort. Relay/exit: ORPort,
        // ControlPort. Client: SocksPort, ControlPort. weft: ORPort. Onion
        // services: ControlPort and the services' target port.
        3 * self.authorities
            + 2 * (self.relays + self.exits)
            + 2 * self.clients
            + usize::from(self.weft.is_some())
            + if self.onion_services > 0 { 2 } else { 0 }
    }
}

impl Default for TestnetConfig {
    fn default() -> Self {
        TestnetConfig {
            base_dir: std::env::temp_dir().join("weft-testnet"),
            base_port: 20000,
            authorities: 3,
            relays: 2,
            exits: 2,
            clients: 1,
            weft: None,
            onion_services: 0,
            clients_choose_circuits: false,
            consensus_params: String::new(),
            client_torrc: Vec::new(),
            service_torrc: Vec::new(),
            relay_torrc: Vec::new(),
            exit_torrc: Vec::new(),
            authority_torrc: Vec::new(),
            guards_by_vote: false,
            hsdirs_by_vote: false,
        }
    }
}

/// How to run weft inside the network.
#[derive(Debug, Clone)]
pub struct WeftNode {
    /// The `weft` executable (started as `weft -f <torrc>`).
    pub binary: PathBuf,
    /// `ConnectionThreads` (None: leave weft's default, one per core).
    pub connection_threads: Option<u32>,
    /// Extra torrc lines appended verbatim to weft's generated torrc.
    pub extra_torrc: Vec<String>,
    /// weft's `Nickname` (1-19 alphanumerics).
    pub nickname: String,
    /// `ExitPolicy` lines that make weft an exit (`ExitRelay 1`,
    /// `ExitPolicyRejectPrivate 0`); the authorities then vote Exit from
    /// the descriptors, weft's included. Empty: not an exit.
    pub exit_policy: Vec<String>,
    /// Files written into weft's DataDirectory before its first start:
    /// (relative path, contents), e.g. a `state` file a previous run would
    /// have left, or a stock tor relay's `keys/` (written 0600, in a 0700
    /// `keys/`).
    pub data_files: Vec<(String, Vec<u8>)>,
    /// Lines in place of `ORPort 127.0.0.1:{port}` and `Address
    /// 127.0.0.1` (`{port}` is replaced by weft's ORPort), e.g. a bare
    /// `ORPort {port}` that leaves weft to find its address. None: those
    /// two.
    pub address_lines: Option<Vec<String>>,
}

impl WeftNode {
    /// weft at `binary`, nickname `weft`, default threads, no extra lines.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        WeftNode {
            binary: binary.into(),
            connection_threads: None,
            extra_torrc: Vec::new(),
            nickname: "weft".into(),
            exit_policy: Vec::new(),
            data_files: Vec::new(),
            address_lines: None,
        }
    }
}
