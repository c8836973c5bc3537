//! The relay's configuration as the runtime needs it ([`RelayConfig`]) and
//! the immutable snapshot every worker holds ([`SharedContext`]):
//! link-authentication material and TLS contexts for the driver, and for
//! the circuit core ([`CircuitContext`]) handshake keys, parameters and the
//! exit's settings. A new snapshot is
//! built by the controller and sent to workers when keys rotate; connections
//! keep the snapshot they started with.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use openssl::ssl::{SslAcceptor, SslConnector};
use weft_crypto::keys::{LinkKeys, RelayKeys};
use weft_proto::circuit::HandshakeKeys;
use weft_proto::link::LinkIdentity;

/// A directory authority, from a `DirAuthority` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirAuthority {
    /// Nickname.
    pub nickname: String,
    /// Its ORPort.
    pub or_port: u16,
    /// Its v3 identity (authority signing identity), if given.
    pub v3ident: Option<[u8; 20]>,
    /// DirPort address.
    pub dir_addr: SocketAddr,
    /// RSA identity fingerprint of the relay.
    pub fingerprint: [u8; 20],
}

/// C Tor's statistics options (`crate::stats`), with its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsOptions {
    /// `ExtraInfoStatistics` (default 1): statistics in the extra-info.
    pub extra_info: bool,
    /// `DirReqStatistics` (default 1): count directory requests (with a
    /// GeoIP file).
    pub dirreq: bool,
    /// `GeoIPFile` (C's default as Debian builds it).
    pub geoip_file: PathBuf,
    /// `GeoIPv6File`.
    pub geoip6_file: PathBuf,
    /// `PaddingStatistics` (default 1): `padding-counts` in the extra-info.
    pub padding: bool,
    /// `HiddenServiceStatistics` (default 1): the `hidserv-v3-*` lines.
    pub hidserv: bool,
    /// The interval of `padding-counts` in seconds (C's a day; shorter
    /// only with `TestingTorNetwork`, by weft's
    /// `TestingPaddingStatisticsInterval`).
    pub padding_interval: u64,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            extra_info: true,
            dirreq: true,
            geoip_file: PathBuf::from("/usr/share/tor/geoip"),
            geoip6_file: PathBuf::from("/usr/share/tor/geoip6"),
            padding: true,
            hidserv: true,
            padding_interval: crate::stats::padding::INTERVAL,
        }
    }
}

/// Finds our IPv4 address to publish again, as at start (C's
/// `find_my_address`, which `check_descriptor_ipaddress_changed` runs every
/// minute): the address and how it was found (C's `METHOD=`), or None when
/// none is found now. The binary builds it from the torrc's `Address` and
/// `ORPort` lines, the interfaces and the host name.
#[derive(Clone)]
pub struct AddressFinder(Arc<dyn Fn() -> Option<(std::net::Ipv4Addr, &'static str)> + Send + Sync>);

impl AddressFinder {
    /// A finder that runs `f`.
    pub fn new(
        f: impl Fn() -> Option<(std::net::Ipv4Addr, &'static str)> + Send + Sync + 'static,
    ) -> Self {
        AddressFinder(Arc::new(f))
    }

    /// Look for the address now (may block on a host-name lookup, as C's).
    pub fn find(&self) -> Option<(std::net::Ipv4Addr, &'static str)> {
        (self.0)()
    }
}

impl std::fmt::Debug for AddressFinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AddressFinder")
    }
}

/// How long an unproven IPv4 ORPort goes before the operator is warned
/// (C's TIMEOUT_UNTIL_UNREACHABILITY_COMPLAINT, 20 minutes).
pub const REACHABILITY_WARN_AFTER: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// What the runtime needs from the configuration.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Nickname (1–19 alphanumerics).
    pub nickname: String,
    /// ContactInfo.
    pub contact: Option<String>,
    /// Where to listen for OR connections.
    pub or_listen: SocketAddr,
    /// The advertised IPv4 address and port.
    pub advertised: SocketAddr,
    /// Finds the IPv4 address again each minute (None: the address is
    /// fixed, as in tests that build the configuration by hand).
    pub address_finder: Option<AddressFinder>,
    /// SigningKeyLifetime: how long a new signing certificate lasts.
    pub signing_key_lifetime: std::time::Duration,
    /// KeepalivePeriod (C's 5 minutes).
    pub keepalive_period: std::time::Duration,
    /// The IPv6 ORPort: where it listens and what is advertised
    /// (`or-address`), if any.
    pub ipv6_or_port: Option<(SocketAddr, std::net::SocketAddrV6)>,
    /// DataDirectory.
    pub data_dir: PathBuf,
    /// Directory authorities.
    pub authorities: Vec<DirAuthority>,
    /// TestingTorNetwork.
    pub testing_tor_network: bool,
    /// AssumeReachable.
    pub assume_reachable: bool,
    /// How long the IPv4 ORPort may stay unproven before the operator is
    /// warned (C's 20 minutes; TestingReachabilityWarnAfter).
    pub reachability_warn_after: std::time::Duration,
    /// AssumeReachableIPv6 (None: `auto`, which follows AssumeReachable
    /// and the consensus's `assume-reachable-ipv6`).
    pub assume_reachable_ipv6: Option<bool>,
    /// Worker threads (0 = everything on the main thread).
    pub connection_threads: usize,
    /// WorkerSchedSlice: the scheduler time slice worker threads ask the
    /// kernel for (None: the kernel's default).
    pub worker_sched_slice: Option<std::time::Duration>,
    /// Allow EXTEND2 to private addresses (on with TestingTorNetwork).
    pub extend_allow_private: bool,
    /// BandwidthRate in bytes/s (advertised average).
    pub bandwidth_rate: u64,
    /// BandwidthBurst in bytes/s.
    pub bandwidth_burst: u64,
    /// AccountingMax, AccountingRule, AccountingStart (None: AccountingMax
    /// 0, no accounting).
    pub accounting: Option<crate::accounting::AccountingConfig>,
    /// TokenBucketRefillInterval.
    pub token_bucket_refill: std::time::Duration,
    /// Testing only (`TestingCrossWorkerExtends 1`, needs TestingTorNetwork):
    /// open the next-hop connection of an extend on a different worker than
    /// the circuit's keyed half, so both halves of new circuits sit on
    /// different workers.
    pub testing_cross_worker: bool,
    /// CircuitPriorityHalflife from torrc (None: the consensus decides).
    pub circuit_priority_halflife: Option<f64>,
    /// KISTSchedRunInterval from torrc in ms (None: the consensus decides;
    /// 0: KIST off).
    pub kist_run_interval_ms: Option<u64>,
    /// KISTSockBufSizeFactor.
    pub kist_sock_buf_factor: f64,
    /// CircuitPadding (default 1): 0 sends no circuit padding even when a
    /// client negotiates a machine (C's `circpad_is_padding_allowed`).
    pub circuit_padding: bool,
    /// Testing only: move a random connection to another worker every this
    /// many seconds (instead of balancing by load).
    pub testing_migrate_every: Option<u64>,
    /// Testing only: put every new connection on this worker (so that the
    /// balancer has to fix the skew).
    pub testing_place_on_worker: Option<usize>,
    /// MetricsPort address (None: off).
    pub metrics_port: Option<SocketAddr>,
    /// MetricsPortPolicy (C Tor's entrance policy: first match decides,
    /// reject when none matches). None: not in the torrc, and a scrape
    /// needs the bearer token from `metrics_auth_cookie` instead.
    pub metrics_policy: Option<Vec<weft_dir::exit_policy::Rule>>,
    /// Counts heap allocations on the calling thread (the binary installs
    /// one with its allocator); workers report it on the MetricsPort.
    pub alloc_probe: Option<fn() -> u64>,
    /// Gives the free pages inside the allocator's heaps back to the kernel
    /// (glibc's `malloc_trim`), if the binary's allocator needs it; workers
    /// call it after idle links gave their buffers back.
    pub heap_trim: Option<fn() -> bool>,
    /// The DoS options of torrc (unset ones: the consensus decides).
    pub dos: crate::dos::DosOptions,
    /// MaxMemInQueues (None: C Tor's default for this machine).
    pub max_mem_in_queues: Option<u64>,
    /// MaxAdvertisedBandwidth, bytes/s (None: no cap).
    pub max_advertised_bandwidth: Option<u64>,
    /// ConnLimit: the file descriptors weft needs at least (C Tor's default
    /// 1000).
    pub conn_limit: u64,
    /// The exit policy built from the torrc (published in the descriptor).
    pub exit_policy: weft_dir::exit_policy::ExitPolicy,
    /// ServerDNSResolvConfFile (None: /etc/resolv.conf).
    pub dns_resolv_conf: Option<PathBuf>,
    /// ServerDNSRandomizeCase (default 1): the 0x20 hack on the exit's
    /// queries; an answer whose question's case differs is dropped as
    /// forged, as C Tor's evdns drops it.
    pub dns_randomize_case: bool,
    /// ServerDNSDetectHijacking (default 1).
    pub dns_detect_hijacking: bool,
    /// ServerDNSTestAddresses (C's four well-known names by default).
    pub dns_test_addresses: Vec<String>,
    /// DirCache (default 1): serve directory documents over BEGIN_DIR
    /// when the bandwidth allows (see `controller::dir_cache`).
    pub dir_cache: bool,
    /// The extra-info's statistics options.
    pub stats: StatsOptions,
    /// OutboundBindAddress, …OR, …Exit.
    pub outbound: crate::outbound::OutboundBind,
    /// MyFamily: `$FINGERPRINT`s (upper-case hex) and nicknames, sorted,
    /// without duplicates.
    pub family: Vec<String>,
    /// FamilyId: the family keys (public) we prove membership of with a
    /// `family-cert` each.
    pub family_ids: Vec<[u8; 32]>,
    /// FamilyKeyDirectory (None: DataDirectory/keys).
    pub family_key_dir: Option<std::path::PathBuf>,
    /// User: whom to run as once the listeners are bound.
    pub user: Option<crate::privileges::RunAs>,
    /// HeartbeatPeriod (None: no heartbeat lines).
    pub heartbeat_period: Option<std::time::Duration>,
    /// ShutdownWaitLength: how long SIGINT / SIGNAL SHUTDOWN keeps relaying
    /// open circuits before exiting (zero: at once).
    pub shutdown_wait: std::time::Duration,
    /// The ControlPort (no listeners: off).
    pub control: ControlSettings,
    /// The torrc as GETCONF and `GETINFO config-text` show it.
    pub torrc: TorrcView,
}

/// Where a ControlPort listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlListener {
    /// A TCP address (loopback unless the torrc says otherwise).
    Tcp(SocketAddr),
    /// A unix socket (`ControlPort unix:/path`, `ControlSocket`).
    Unix(PathBuf),
}

/// The ControlPort options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlSettings {
    /// Listeners (none: no ControlPort).
    pub listeners: Vec<ControlListener>,
    /// CookieAuthentication.
    pub cookie_auth: bool,
    /// CookieAuthFile (None: `DataDirectory/control_auth_cookie`).
    pub cookie_file: Option<PathBuf>,
    /// CookieAuthFileGroupReadable: the cookie file is 0640, not 0600.
    pub cookie_group_readable: bool,
    /// HashedControlPassword values ("16:…"), checked when parsed.
    pub hashed_passwords: Vec<String>,
}

/// One option weft takes: its canonical name, the type C Tor's
/// `config/names` gives it, and its default as GETCONF prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionInfo {
    /// Canonical spelling ("BandwidthRate").
    pub name: &'static str,
    /// Type name as in `GETINFO config/names`.
    pub kind: &'static str,
    /// Default value ("" when unset by default).
    pub default: &'static str,
}

/// The configuration file as the controller shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TorrcView {
    /// The torrc's path.
    pub path: PathBuf,
    /// Every option line set, as (canonical name, value), in file order.
    pub lines: Vec<(String, String)>,
    /// Every option weft takes.
    pub options: &'static [OptionInfo],
}

impl TorrcView {
    /// GETCONF: an option's canonical name and its values (those set, or
    /// the default); `None` when weft has no such option.
    pub fn get(&self, key: &str) -> Option<(String, Vec<String>)> {
        let info = self
            .options
            .iter()
            .find(|o| o.name.eq_ignore_ascii_case(key))?;
        let set: Vec<String> = self
            .lines
            .iter()
            .filter(|(k, _)| k == info.name)
            .map(|(_, v)| v.clone())
            .collect();
        let values = if !set.is_empty() {
            set
        } else if info.default.is_empty() {
            Vec::new()
        } else {
            vec![info.default.to_string()]
        };
        Some((info.name.to_string(), values))
    }

    /// `config-text`: the options set, one per line, sorted by name as
    /// C Tor prints them.
    pub fn text(&self) -> String {
        let mut lines: Vec<&(String, String)> = self.lines.iter().collect();
        lines.sort_by_key(|(k, _)| k.to_ascii_lowercase());
        lines.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }
}

/// Scheduling and circuit-handling parameters, from the configuration and
/// the consensus (torrc wins where it sets them, as in C Tor).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedParams {
    /// AllowNonearlyExtend.
    pub allow_nonearly_extend: bool,
    /// CircuitPriorityHalflife, seconds (≤ 0: off).
    pub halflife_s: f64,
    /// KISTSchedRunInterval (zero: KIST off).
    pub kist_interval: std::time::Duration,
    /// KISTSockBufSizeFactor.
    pub kist_factor: f64,
    /// INTRODUCE2 limits of new introduction points (consensus).
    pub intro_dos: (bool, u32, u32),
    /// The DoS parameters in force.
    pub dos: crate::dos::DosParams,
    /// The consensus's `sendme_accept_min_version` (default 0).
    pub sendme_accept_min: u8,
    /// Congestion control (the consensus's `cc_*` parameters).
    pub cc: weft_proto::circuit::congestion::CcParams,
    /// Conflux at the exit (the consensus's `cfx_*` parameters).
    pub cfx: weft_proto::circuit::conflux::CfxParams,
    /// The consensus's `nf_conntimeout_relays` (seconds, default 3600): a
    /// canonical relay connection without circuits closes after 75% to
    /// 125% of it.
    pub conn_timeout_relays_s: u32,
    /// Connection padding (the consensus's `nf_ito_*`, `nf_pad_*`).
    pub padding: weft_proto::padding::PaddingParams,
    /// The consensus's `HSV3MaxDescriptorSize` (bytes, default 50,000):
    /// an onion-service descriptor at least this big is refused.
    pub hs_max_desc_size: usize,
    /// KeepalivePeriod: PADDING on a connection nothing was written to
    /// for this long (C's `run_connection_housekeeping`).
    pub keepalive: std::time::Duration,
}

impl Default for SchedParams {
    fn default() -> Self {
        SchedParams {
            allow_nonearly_extend: false,
            halflife_s: crate::ewma::DEFAULT_HALFLIFE_S,
            kist_interval: std::time::Duration::from_millis(2),
            kist_factor: 1.0,
            intro_dos: (false, 25, 200),
            dos: crate::dos::DosParams::default(),
            sendme_accept_min: 0,
            cc: Default::default(),
            cfx: Default::default(),
            conn_timeout_relays_s: 3600,
            padding: Default::default(),
            hs_max_desc_size: weft_dir::hs_cache::HS_DESC_MAX_LEN,
            keepalive: std::time::Duration::from_secs(300),
        }
    }
}

/// What an exit relay's workers need to admit streams.
#[derive(Debug, Clone)]
pub struct ExitSettings {
    /// The exit policy (ExitPolicyRejectPrivate's rules included).
    pub policy: weft_dir::exit_policy::ExitPolicy,
    /// IPv6Exit.
    pub ipv6_exit: bool,
    /// The ORPorts of the relays in the consensus and the authorities'
    /// ORPorts and DirPorts: an exit stream may not connect back into the
    /// network (C Tor's re-entry rule) unless `allow_reentry`.
    pub reentry: std::collections::HashSet<SocketAddr>,
    /// The consensus's `allow-network-reentry`.
    pub allow_reentry: bool,
    /// The RSA identities the consensus lists (None: no consensus yet).
    pub known_relays: Option<std::collections::HashSet<[u8; 20]>>,
    /// The consensus's `refuseunknownexits` (default on): streams only
    /// from circuits whose previous hop the consensus lists.
    pub refuse_unknown_exits: bool,
}

/// Immutable snapshot shared by all workers: the driver's part (TLS
/// contexts, link certificates, the resolver's channel) and the circuit
/// core's ([`CircuitContext`], which it derefs to).
pub struct SharedContext {
    /// Link-authentication material (certs for CERTS cells).
    pub link: Arc<LinkIdentity>,
    /// TLS server context.
    pub acceptor: SslAcceptor,
    /// TLS client context.
    pub connector: SslConnector,
    /// Where an exit's host names are looked up (None: they fail).
    pub resolver: Option<crate::resolver::Resolver>,
    /// What the circuit core reads (no socket, TLS or channel in it).
    pub circuits: Arc<CircuitContext>,
}

impl std::ops::Deref for SharedContext {
    type Target = CircuitContext;
    fn deref(&self) -> &CircuitContext {
        &self.circuits
    }
}

/// The circuit core's part of the snapshot: keys for CREATE2, consensus
/// parameters, the exit's settings.
#[derive(Clone)]
pub struct CircuitContext {
    /// Handshake keys for CREATE2.
    pub handshake: Arc<HandshakeKeys>,
    /// Our advertised addresses (for NETINFO).
    pub our_addrs: Vec<IpAddr>,
    /// Our RSA fingerprint.
    pub rsa_fp: [u8; 20],
    /// AllowNonearlyExtend consensus parameter.
    pub allow_nonearly_extend: bool,
    /// EWMA half-life in seconds (≤ 0: round robin).
    pub halflife_s: f64,
    /// KIST scheduling interval (zero: KIST off, write every round).
    pub kist_interval: std::time::Duration,
    /// KISTSockBufSizeFactor.
    pub kist_factor: f64,
    /// INTRODUCE2 limits of new introduction points: (enabled, rate/s,
    /// burst), from the consensus.
    pub intro_dos: (bool, u32, u32),
    /// The DoS parameters in force.
    pub dos: crate::dos::DosParams,
    /// The exit's settings, if we relay exit streams.
    pub exit: Option<Arc<ExitSettings>>,
    /// The consensus's `sendme_accept_min_version`.
    pub sendme_accept_min: u8,
    /// Congestion control offered to clients that ask (the consensus's
    /// `cc_*` parameters).
    pub cc: weft_proto::circuit::congestion::CcParams,
    /// Conflux limits (the consensus's `cfx_*` parameters).
    pub cfx: weft_proto::circuit::conflux::CfxParams,
    /// The consensus's `nf_conntimeout_relays`, seconds.
    pub conn_timeout_relays_s: u32,
    /// Connection padding parameters (proposal 251).
    pub padding: weft_proto::padding::PaddingParams,
    /// The consensus's `HSV3MaxDescriptorSize`.
    pub hs_max_desc_size: usize,
    /// KeepalivePeriod in nanoseconds.
    pub keepalive_ns: u64,
    /// We are a directory cache (BEGIN_DIR served).
    pub dir_cache: bool,
    /// Source addresses of outbound connections.
    pub outbound: crate::outbound::OutboundBind,
    /// Hibernating (shutting down after SIGINT, or the accounting limit):
    /// new circuits get DESTROY and new exit streams END, reason
    /// HIBERNATING; open ones go on. [C command.c, connection_edge.c]
    pub hibernating: bool,
    /// When the snapshot was made.
    pub created: SystemTime,
}

impl SharedContext {
    /// Build a snapshot from the relay keys and fresh link keys.
    pub fn build(
        keys: &RelayKeys,
        link: &LinkKeys,
        our_addrs: Vec<IpAddr>,
        sched: &SchedParams,
    ) -> Result<SharedContext, openssl::error::ErrorStack> {
        let (acceptor, connector) = crate::tls::contexts(link)?;
        let lid = LinkIdentity::from_keys(keys, link);
        Ok(SharedContext {
            link: Arc::new(lid),
            acceptor,
            connector,
            resolver: None,
            circuits: Arc::new(CircuitContext {
                handshake: Arc::new(HandshakeKeys {
                    rsa_fp: keys.fingerprint,
                    ed_id: keys.ed_id,
                    ntor: keys.ntor_keys(),
                }),
                our_addrs,
                rsa_fp: keys.fingerprint,
                allow_nonearly_extend: sched.allow_nonearly_extend,
                halflife_s: sched.halflife_s,
                kist_interval: sched.kist_interval,
                kist_factor: sched.kist_factor,
                intro_dos: sched.intro_dos,
                dos: sched.dos,
                exit: None,
                sendme_accept_min: sched.sendme_accept_min,
                cc: sched.cc,
                cfx: sched.cfx,
                conn_timeout_relays_s: sched.conn_timeout_relays_s,
                padding: sched.padding,
                hs_max_desc_size: sched.hs_max_desc_size,
                keepalive_ns: sched.keepalive.as_nanos().min(u128::from(u64::MAX)) as u64,
                dir_cache: false,
                hibernating: false,
                outbound: Default::default(),
                created: SystemTime::now(),
            }),
        })
    }

    /// The core's part, to change while building.
    fn circuits_mut(&mut self) -> &mut CircuitContext {
        Arc::make_mut(&mut self.circuits)
    }

    /// The same snapshot for an exit with `exit` settings (None: not an
    /// exit), looking host names up with `resolver`.
    pub fn with_exit(
        mut self,
        exit: Option<Arc<ExitSettings>>,
        resolver: Option<crate::resolver::Resolver>,
    ) -> SharedContext {
        self.circuits_mut().exit = exit;
        self.resolver = resolver;
        self
    }

    /// The same context with these outbound source addresses.
    pub fn with_outbound(mut self, b: crate::outbound::OutboundBind) -> SharedContext {
        self.circuits_mut().outbound = b;
        self
    }

    /// The same context, serving BEGIN_DIR or not.
    pub fn with_dir_cache(mut self, on: bool) -> SharedContext {
        self.circuits_mut().dir_cache = on;
        self
    }

    /// The same context, hibernating or not.
    pub fn with_hibernating(mut self, on: bool) -> SharedContext {
        self.circuits_mut().hibernating = on;
        self
    }
}

impl std::fmt::Debug for CircuitContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitContext")
            .field("rsa_fp", &hex::encode_upper(self.rsa_fp))
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SharedContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedContext")
            .field("rsa_fp", &hex::encode_upper(self.rsa_fp))
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}
