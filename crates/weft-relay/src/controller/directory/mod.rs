//! The controller's directory duties: build and sign the server descriptor
//! and extra-info, upload them to every authority once the ORPort answers,
//! again when something non-cosmetic changes (keys, a doubled observed
//! bandwidth), when the consensus does not list us, and at least every 12
//! hours [dir-spec §2.1; protocol-notes §10.3]; fetch and verify the
//! consensus from an authority for the network parameters and our own
//! listing, again at a random point between fresh-until and valid-until
//! (earlier as a directory cache, as C's caches) [dir-spec §5.1;
//! protocol-notes §10.5].

use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};
use weft_crypto::keys::RelayKeys;
use weft_dir::consensus::{
    fetch_verified_consensus, ConsensusSummary, FetchOptions, MicrodescKeys, NetParams, RelayEntry,
};
use weft_dir::descriptor::{
    build_extra_info_with_stats, build_server_descriptor, DescriptorParams,
};
use weft_dir::upload::{post_descriptor, UploadOutcome};
use weft_proto::origin::HopTarget;

mod self_tests;

use super::reachability::{Ipv4Reachability, Ipv6Reachability};
use crate::context::{DirAuthority, RelayConfig};

/// What we advertise in "proto": only what is implemented. [protocol-notes §12]
///
/// `HSIntro=4-5` (v3 introduction point with the DoS extension) and
/// `HSRend=1-2` (rendezvous point): C Tor clients pick rendezvous points,
/// and services introduction points, among all relays without looking at
/// these (every relay has had them for years); on one that lacks them the
/// circuit silently goes nowhere. [C circuitbuild.c choose_good_exit_server,
/// hs_client.c client_rendezvous_circ_has_opened, hs_service.c
/// pick_intro_point]
///
/// `FlowCtrl=1-2`: authenticated SENDMEs (proposal 289), which an exit's
/// streams send and check (`weft-proto` `circuit/flow.rs`), and congestion
/// control with XON/XOFF (proposal 324, `circuit/congestion.rs`): with
/// `Relay=4` (ntor-v3) it makes clients ask an exit for congestion control.
///
/// `DirCache=2`: consensus diffs served (weft-dir `cache/diffs.rs`,
/// `cache/diff_store.rs`), as C Tor's `consdiffmgr.c`.
///
/// `HSDir=2`: v3 onion-service descriptors stored and served (weft-dir
/// `hs_cache/`, `controller/hs_dir.rs`, the workers' `streams/hsdir.rs`),
/// as C Tor's `hs_cache.c`; the descriptor says `hidden-service-dir`.
///
/// `Relay=3`: IPv6 extends: an EXTEND2 naming only an IPv6 ORPort is
/// carried over IPv6 when we have one (`registry.rs` `extend_addr`, as
/// C's `circuit_choose_ip_ap_for_extend`), connections over IPv6 are
/// canonical when the peer's NETINFO lists that address, and our own
/// IPv6 ORPort is self-tested ([`super::reachability`]).
///
/// `Desc=3`, `Microdesc=3`: descriptors and microdescriptors without a
/// TAP key are parsed (the cache keeps documents whole; the self-test's
/// microdescriptors are read by tor-netdoc, whose `onion-key` object is
/// optional: `consensus.rs` test). Like stock tor 0.4.9.11, weft still
/// publishes its TAP key whatever `publish-dummy-tap-key` says: 0.4.9.11
/// authorities refuse a descriptor without one ("Missing TAP key in
/// descriptor.", seen in a loopback network with the parameter at 0).
/// `Desc=4`: `family-cert` lines, published for every `FamilyId` key
/// (`dual_stack_and_family`) and kept whole by the cache.
///
/// `Relay=5`: the ntor-v3 subprotocol request (proposal 346) is read and
/// anything in it but `Relay=6` refused, as C's
/// `relay_process_subproto_ext` (weft-proto `circuit/extensions.rs`).
/// `Relay=6`: CGO relay crypto with relay cell format V1 (proposal 359;
/// weft-crypto `cgo.rs`, weft-proto `circuit/layer.rs`): with `FlowCtrl=2`
/// and these two, a C client asks its exit (and every hop of a circuit a
/// controller extends) for CGO, an Arti client every hop.
///
/// `Padding=2`: the relay side of C's onion-service circuit-setup padding
/// machines (proposal 254; weft-proto `circpad.rs`, the workers'
/// `core/circpad.rs`), which C clients negotiate only with a middle that
/// says so.
pub const PROTO: &str =
    "Conflux=1 Cons=1-2 Desc=1-4 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=1-2 Link=4-5 LinkAuth=3 Microdesc=1-3 Padding=2 Relay=2-6";

/// Results of background directory work, handled on the controller.
#[derive(Debug)]
pub enum DirEvent {
    /// An upload finished.
    Uploaded {
        /// Authority nickname.
        authority: String,
        /// Outcome or error text.
        outcome: Result<UploadOutcome, String>,
    },
    /// The microdescriptors of the two relays picked for a self-test
    /// arrived.
    SelfTestKeys {
        /// Which test.
        purpose: SelfTest,
        /// First hop.
        a: Box<RelayEntry>,
        /// Second hop.
        b: Box<RelayEntry>,
        /// Their keys, or error text.
        outcome: Result<Vec<MicrodescKeys>, String>,
    },
    /// A consensus fetch finished.
    Consensus {
        /// Authority nickname.
        authority: String,
        /// The verified summary, or error text.
        outcome: Result<Box<ConsensusSummary>, String>,
    },
    /// An authority's DirPort said what address it sees us at
    /// (`X-Your-Address-Is`).
    YourAddress {
        /// The authority's DirPort.
        authority: std::net::SocketAddr,
        /// What it said.
        seen: std::net::IpAddr,
    },
}

/// What the controller should do after a directory event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DirOutcome {
    /// The network parameters changed (rebuild what depends on them).
    pub params_changed: bool,
    /// The relays or their ORPorts changed (an exit's re-entry set and
    /// known relays).
    pub relays_changed: bool,
    /// Run a self-test through these two relays.
    pub selftest: Option<(HopTarget, HopTarget, SelfTest)>,
    /// Stop weft: the consensus requires a protocol it lacks (C's
    /// `networkstatus_check_required_protocols`; not on a testing
    /// network).
    pub stop: Option<String>,
    /// An authority's DirPort (address) said we are at this address.
    pub your_address: Option<(std::net::IpAddr, std::net::IpAddr)>,
}

/// The self-tests through two relays that end at ourselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfTest {
    /// C's bandwidth test (`crate::selftest`), to our advertised ORPort.
    Bandwidth,
    /// The reachability of our IPv4 ORPort ([`super::reachability`]).
    Ipv4(std::net::SocketAddrV4),
    /// The reachability of our IPv6 ORPort: the last extend names only it
    /// ([`super::reachability`]).
    Ipv6(std::net::SocketAddrV6),
}

/// Run the bandwidth self-test while observed bandwidth is below this
/// (bytes/s): a relay whose history already shows traffic needs none.
const SELFTEST_BELOW: u64 = 100 * 1024;

/// What a reload can change in our descriptor.
type Reconfigurable = (
    String,
    Option<String>,
    u64,
    u64,
    Vec<String>,
    Option<String>,
    Vec<String>,
);

fn reconfigurable(d: &DescriptorParams) -> Reconfigurable {
    (
        d.nickname.clone(),
        d.contact.clone(),
        d.bandwidth_avg,
        d.bandwidth_burst,
        d.exit_policy_lines.clone(),
        d.ipv6_policy.clone(),
        d.family.clone(),
    )
}

/// Directory state kept by the controller.
pub struct DirState {
    authorities: Vec<DirAuthority>,
    tx: UnboundedSender<DirEvent>,
    desc: DescriptorParams,
    last_publish: Option<Instant>,
    published_observed: u64,
    dirty: bool,
    /// The exit's DNS cannot work: the descriptor says `reject *:*`
    /// whatever the torrc's policy (C's router.c, while
    /// `has_dns_init_failed()` or `dns_seems_to_be_broken()`).
    exit_withdrawn: bool,
    /// The torrc's policy lines (`accept`/`reject`, `ipv6-policy`), put
    /// back when DNS works again.
    configured_policy: (Vec<String>, Option<String>),
    /// FamilyId keys: a `family-cert` each in every descriptor.
    family_keys: Vec<weft_crypto::family_keys::FamilyKey>,
    testing: bool,
    /// The last protocol verdict logged (each is logged once).
    protocols_said: Option<String>,
    our_fp: [u8; 20],
    /// Current network parameters (C Tor's defaults until a consensus).
    pub params: NetParams,
    consensus: Option<Box<ConsensusSummary>>,
    next_fetch: Instant,
    fetching: bool,
    selftest_last: Option<Instant>,
    selftest_busy: bool,
    /// Our IPv4 ORPort's self-test (no descriptor goes out before it
    /// succeeds).
    ipv4: Ipv4Reachability,
    /// The IPv4 ORPort the 20-minute warning named, until proven.
    reachability_failed: Option<std::net::SocketAddrV4>,
    /// Our IPv6 ORPort's self-test.
    ipv6: Ipv6Reachability,
    /// Our last published descriptor and extra-info (the cache serves
    /// them; also built, not uploaded, while the ORPort is unproven).
    own: Option<(String, String)>,
    /// The statistics of the next extra-info (`crate::stats` chunks).
    extra_stats: Vec<String>,
}

impl DirState {
    /// New state from the configuration.
    pub fn new(cfg: &RelayConfig, tx: UnboundedSender<DirEvent>, dir_cache: bool) -> Self {
        let address = match cfg.advertised.ip() {
            std::net::IpAddr::V4(a) => a,
            std::net::IpAddr::V6(_) => std::net::Ipv4Addr::UNSPECIFIED,
        };
        let params = DescriptorParams {
            nickname: cfg.nickname.clone(),
            address,
            or_port: cfg.advertised.port(),
            contact: cfg.contact.clone(),
            platform: weft_dir::descriptor::default_platform(),
            proto: PROTO.to_string(),
            uptime: 0,
            // MaxAdvertisedBandwidth caps what we claim (and so our weight),
            // as C Tor's relay_get_effective_bwrate().
            bandwidth_avg: cfg
                .bandwidth_rate
                .min(cfg.max_advertised_bandwidth.unwrap_or(u64::MAX)),
            bandwidth_burst: cfg.bandwidth_burst,
            bandwidth_observed: 0,
            published: SystemTime::now(),
            onion_key_lifetime: Duration::from_secs(28 * 86400),
            exit_policy_lines: cfg.exit_policy.descriptor_lines(),
            ipv6_policy: cfg.exit_policy.ipv6_policy_line(),
            family: cfg.family.clone(),
            overload_general: None,
            tunnelled_dir_server: dir_cache,
            hidden_service_dir: dir_cache,
            hibernating: false,
            or_address_v6: None,
            family_certs: Vec::new(),
        };
        let ipv6 = Ipv6Reachability::new(
            cfg.ipv6_or_port.map(|(_, adv)| adv),
            cfg.assume_reachable,
            cfg.assume_reachable_ipv6,
            cfg.testing_tor_network,
        );
        let params = DescriptorParams {
            or_address_v6: ipv6.published(&NetParams::default()),
            ..params
        };
        DirState {
            authorities: cfg.authorities.clone(),
            tx,
            desc: params,
            last_publish: None,
            published_observed: 0,
            dirty: true,
            exit_withdrawn: false,
            configured_policy: (
                cfg.exit_policy.descriptor_lines(),
                cfg.exit_policy.ipv6_policy_line(),
            ),
            family_keys: Vec::new(),
            testing: cfg.testing_tor_network,
            protocols_said: None,
            our_fp: [0; 20],
            params: NetParams::default(),
            consensus: None,
            next_fetch: Instant::now() + Duration::from_secs(2),
            fetching: false,
            selftest_last: None,
            selftest_busy: false,
            ipv4: Ipv4Reachability::new(
                std::net::SocketAddrV4::new(address, cfg.advertised.port()),
                cfg.assume_reachable,
                cfg.reachability_warn_after,
                cfg.testing_tor_network,
                Instant::now(),
            ),
            reachability_failed: None,
            ipv6,
            own: None,
            extra_stats: Vec::new(),
        }
    }

    /// A reload changed what the descriptor says (nickname, contact,
    /// bandwidth, exit policy): publish anew at the next check.
    pub fn reconfigure(&mut self, cfg: &RelayConfig) {
        // AssumeReachable applies at once, as in C.
        if self.ipv4.set_assume(cfg.assume_reachable) {
            self.dirty = true;
        }
        let before = reconfigurable(&self.desc);
        let d = &mut self.desc;
        d.nickname = cfg.nickname.clone();
        d.contact = cfg.contact.clone();
        d.bandwidth_avg = cfg
            .bandwidth_rate
            .min(cfg.max_advertised_bandwidth.unwrap_or(u64::MAX));
        d.bandwidth_burst = cfg.bandwidth_burst;
        d.exit_policy_lines = cfg.exit_policy.descriptor_lines();
        d.ipv6_policy = cfg.exit_policy.ipv6_policy_line();
        self.configured_policy = (d.exit_policy_lines.clone(), d.ipv6_policy.clone());
        if self.exit_withdrawn {
            d.exit_policy_lines = vec!["reject *:*".into()];
            d.ipv6_policy = None;
        }
        let me = format!("${}", hex::encode_upper(self.our_fp));
        d.family = cfg.family.iter().filter(|f| **f != me).cloned().collect();
        let after = reconfigurable(&self.desc);
        if before != after {
            self.dirty = true;
        }
    }

    /// The exit's DNS changed: while its name servers cannot be used,
    /// publish `reject *:*` (clients then pick other exits), and the
    /// torrc's policy again once they can, as C's router.c does (C marks
    /// the descriptor dirty: "dns resolvers failed", "dns resolvers
    /// back", "dns hijacking confirmed"). True if the exit was withdrawn
    /// or came back.
    pub fn set_dns(&mut self, s: crate::resolver::DnsStatus) -> bool {
        if self.exit_withdrawn != s.usable() {
            return false;
        }
        self.exit_withdrawn = !s.usable();
        if self.exit_withdrawn {
            self.desc.exit_policy_lines = vec!["reject *:*".into()];
            self.desc.ipv6_policy = None;
        } else {
            (self.desc.exit_policy_lines, self.desc.ipv6_policy) = self.configured_policy.clone();
        }
        self.dirty = true;
        if self.testing {
            // C uploads at once in a testing network.
            self.last_publish = None;
        }
        true
    }

    /// True while the exit is withdrawn ([`DirState::set_dns`]): the
    /// workers admit no new stream either.
    pub fn exit_withdrawn(&self) -> bool {
        self.exit_withdrawn
    }

    /// Our last published descriptor and extra-info.
    pub fn own_documents(&self) -> Option<(String, String)> {
        self.own.clone()
    }

    /// Our flags in the latest consensus (empty when not listed).
    pub fn our_flags(&self) -> Vec<String> {
        self.consensus()
            .and_then(|c| c.find_relay(&self.our_fp))
            .map(|r| r.flags.iter().map(|f| f.to_string()).collect())
            .unwrap_or_default()
    }

    /// The latest verified consensus, if any.
    pub fn consensus(&self) -> Option<&ConsensusSummary> {
        self.consensus.as_deref()
    }

    /// Fetch the consensus if it is time (called every second).
    pub fn maybe_fetch_consensus(&mut self) {
        if self.fetching || Instant::now() < self.next_fetch {
            return;
        }
        let trusted: Vec<[u8; 20]> = self.authorities.iter().filter_map(|a| a.v3ident).collect();
        if trusted.is_empty() || self.authorities.is_empty() {
            return;
        }
        let a = &self.authorities[rand::random_range(0..self.authorities.len())];
        let (addr, name, tx) = (a.dir_addr, a.nickname.clone(), self.tx.clone());
        self.fetching = true;
        tokio::task::spawn_local(async move {
            let r = fetch_verified_consensus(
                addr,
                &trusted,
                SystemTime::now(),
                &FetchOptions::default(),
            )
            .await
            .map(Box::new)
            .map_err(|e| e.to_string());
            let _ = tx.send(DirEvent::Consensus {
                authority: name,
                outcome: r,
            });
        });
    }

    /// When to fetch again after a consensus. A directory cache fetches
    /// as C Tor's caches do (`dirclient_fetches_dir_info_early`): a
    /// random point in the half interval that starts 2 minutes (at most
    /// 1/16 of the interval) after fresh-until, before clients ask; a
    /// relay that is not a cache, a random point in the first half of
    /// [fresh-until, valid-until]. At least 10 s away.
    /// [C networkstatus.c update_consensus_networkstatus_fetch_time_impl()]
    fn schedule_after(&mut self, c: &ConsensusSummary) {
        let now = SystemTime::now();
        let after = |t: SystemTime| t.duration_since(now).unwrap_or_default();
        let (start, span) = if self.desc.tunnelled_dir_server {
            let interval = c
                .fresh_until
                .duration_since(c.valid_after)
                .unwrap_or_default();
            let slop = Duration::from_secs(120)
                .min(interval / 16)
                .max(Duration::from_secs(1));
            (after(c.fresh_until) + slop, interval / 2)
        } else {
            let fresh = after(c.fresh_until);
            (fresh, after(c.valid_until).saturating_sub(fresh) / 2)
        };
        let jitter = Duration::from_millis(rand::random_range(0..=span.as_millis() as u64));
        self.next_fetch = Instant::now() + (start + jitter).max(Duration::from_secs(10));
    }

    /// First publication, once the ORPort is listening.
    pub fn start(&mut self, keys: &RelayKeys, started: Instant, observed: u64) {
        self.our_fp = keys.fingerprint;
        // C Tor leaves itself out of its own family line.
        let me = format!("${}", hex::encode_upper(keys.fingerprint));
        self.desc.family.retain(|f| *f != me);
        self.publish(keys, started, observed, "startup");
    }

    /// Hibernation began or ended: republish (C marks the descriptor dirty
    /// when its bandwidth drops to 0 or comes back).
    pub fn set_hibernating(&mut self, on: bool) {
        if self.desc.hibernating != on {
            self.desc.hibernating = on;
            self.dirty = true;
        }
    }

    /// The family keys (loaded at startup) whose certificates every
    /// descriptor carries.
    pub fn set_family_keys(&mut self, keys: Vec<weft_crypto::family_keys::FamilyKey>) {
        self.family_keys = keys;
    }

    /// Keys changed: republish at the next check.
    pub fn keys_changed(&mut self) {
        self.dirty = true;
    }

    /// The last general overload (start of its hour), for the next
    /// descriptor we publish (C Tor does not republish for it).
    pub fn set_overload(&mut self, at: Option<SystemTime>) {
        self.desc.overload_general = at;
    }

    /// The statistics chunks the next extra-info carries (not a reason
    /// to republish by themselves, as in C).
    pub fn set_extra_stats(&mut self, chunks: Vec<String>) {
        self.extra_stats = chunks;
    }

    /// Republish if anything calls for it.
    pub fn maybe_republish(&mut self, keys: &RelayKeys, started: Instant, observed: u64) {
        let since = self
            .last_publish
            .map(|t| t.elapsed())
            .unwrap_or(Duration::MAX);
        // C Tor waits 3 h between bandwidth-driven republications (none in
        // testing networks, where we allow one every 20 s).
        let bw_interval = if self.testing {
            Duration::from_secs(20)
        } else {
            Duration::from_secs(3 * 3600)
        };
        let bw_changed = observed > 0
            && (self.published_observed == 0
                || observed >= 2 * self.published_observed
                || observed * 2 <= self.published_observed);
        if self.dirty && since >= Duration::from_secs(10) {
            self.publish(keys, started, observed, "retry or key change");
        } else if bw_changed && since >= bw_interval {
            self.publish(keys, started, observed, "observed bandwidth changed");
        } else if since >= Duration::from_secs(12 * 3600) {
            self.publish(keys, started, observed, "periodic");
        }
    }

    fn publish(&mut self, keys: &RelayKeys, started: Instant, observed: u64, reason: &str) {
        if self.desc.address.is_unspecified() {
            // No address yet (C: "Don't know my address while generating
            // descriptor"): nothing to build.
            self.dirty = true;
            return;
        }
        let now = SystemTime::now();
        self.desc.published = now;
        self.desc.uptime = started.elapsed().as_secs();
        // Hibernating, we report no bandwidth. [C router.c]
        self.desc.bandwidth_observed = if self.desc.hibernating { 0 } else { observed };
        // One family-cert per family key, valid as long as our signing key.
        self.desc.family_certs = self
            .family_keys
            .iter()
            .filter_map(|k| {
                weft_crypto::family_keys::family_cert(&k.key, &keys.ed_id, keys.signing_cert_expiry)
                    .map_err(|e| warn!("cannot make the family-cert of {}: {e}", k.path.display()))
                    .ok()
            })
            .collect();
        let built = build_extra_info_with_stats(keys, &self.desc.nickname, now, &self.extra_stats);
        let (extra, digests) = match built {
            Ok(x) => x,
            Err(e) => {
                warn!("cannot build extra-info: {e}");
                return;
            }
        };
        let desc = match build_server_descriptor(keys, &self.desc, Some(&digests)) {
            Ok(d) => d,
            Err(e) => {
                warn!("cannot build server descriptor: {e}");
                return;
            }
        };
        let body = format!("{desc}{extra}");
        self.own = Some((desc, extra));
        if !self.publishable() {
            // Built (GETINFO desc/id shows it, as C's own routerinfo) but
            // not uploaded; the ORPort found reachable (or the consensus's
            // assume-reachable) makes it dirty again.
            self.dirty = false;
            return;
        }
        self.last_publish = Some(Instant::now());
        self.published_observed = observed;
        self.dirty = false;
        info!(
            "uploading descriptor to {} authorities ({reason}; observed bandwidth {observed} B/s)",
            self.authorities.len()
        );
        for a in &self.authorities {
            let tx = self.tx.clone();
            let body = body.clone();
            let addr = a.dir_addr;
            let name = a.nickname.clone();
            let reason = reason.to_string();
            tokio::task::spawn_local(async move {
                let r = post_descriptor(addr, &body, &reason, Duration::from_secs(30))
                    .await
                    .map_err(|e| e.to_string());
                let _ = tx.send(DirEvent::Uploaded {
                    authority: name,
                    outcome: r,
                });
            });
        }
    }

    /// Handle the result of background work.
    pub fn on_event(&mut self, ev: DirEvent) -> DirOutcome {
        let mut out = DirOutcome::default();
        match ev {
            DirEvent::Uploaded { authority, outcome } => match outcome {
                Ok(UploadOutcome::Accepted) => {
                    info!("descriptor accepted by authority {authority}")
                }
                Ok(UploadOutcome::NotNew) => info!("authority {authority}: descriptor not new"),
                Ok(UploadOutcome::Rejected { status, reason }) => {
                    warn!("authority {authority} rejected our descriptor: {status} {reason}");
                }
                Err(e) => {
                    warn!("upload to authority {authority} failed: {e}; will retry");
                    self.dirty = true;
                }
            },
            DirEvent::SelfTestKeys {
                purpose,
                a,
                b,
                outcome,
            } => {
                self.selftest_busy = false;
                match outcome {
                    Ok(keys) => {
                        let find =
                            |r: &RelayEntry| keys.iter().find(|k| Some(k.digest) == r.md_digest);
                        match (find(&a), find(&b)) {
                            (Some(ka), Some(kb)) => {
                                out.selftest = Some((
                                    crate::selftest::hop(&a, ka),
                                    crate::selftest::hop(&b, kb),
                                    purpose,
                                ));
                            }
                            _ => info!(
                                "{purpose:?} self-test: microdescriptors missing; will try again"
                            ),
                        }
                    }
                    Err(e) => info!("{purpose:?} self-test: cannot fetch microdescriptors: {e}"),
                }
            }
            DirEvent::YourAddress { authority, seen } => {
                out.your_address = Some((seen, authority.ip()));
            }
            DirEvent::Consensus { authority, outcome } => {
                self.fetching = false;
                match outcome {
                    Ok(c) => {
                        self.schedule_after(&c);
                        match c.find_relay(&self.our_fp) {
                            Some(me) => info!(
                                "consensus from {authority} ({} relays) lists us: {} (bandwidth {})",
                                c.relays.len(),
                                me.flags.join(" "),
                                me.bandwidth
                            ),
                            None => {
                                // Not listed although our descriptor is older
                                // than this consensus: upload again.
                                let ours = self.last_publish.map(|t| t.elapsed());
                                let after = c.valid_after.elapsed().unwrap_or_default();
                                if ours.is_some_and(|o| o > after + Duration::from_secs(60)) {
                                    info!("consensus from {authority} does not list us; republishing");
                                    self.dirty = true;
                                } else {
                                    info!("consensus from {authority} does not list us yet");
                                }
                            }
                        }
                        out.stop = self.check_protocols(&c);
                        out.params_changed = c.params != self.params;
                        type Ports = ([u8; 20], std::net::Ipv4Addr, u16, Vec<std::net::SocketAddr>);
                        let ports = |c: &ConsensusSummary| -> Vec<Ports> {
                            c.relays
                                .iter()
                                .map(|r| {
                                    (
                                        r.rsa_identity,
                                        r.address,
                                        r.or_port,
                                        r.other_addresses.clone(),
                                    )
                                })
                                .collect()
                        };
                        out.relays_changed =
                            self.consensus.as_deref().map(ports) != Some(ports(&c));
                        let could = self.publishable();
                        self.params = c.params.clone();
                        if !could && self.publishable() {
                            // The consensus's assume-reachable.
                            self.dirty = true;
                        }
                        self.consensus = Some(c);
                        self.update_ipv6_address("the consensus's assume-reachable parameters");
                    }
                    Err(e) => {
                        // No consensus yet (404 in a young network) or a bad
                        // one: try again soon.
                        let retry = if self.testing { 5 } else { 60 };
                        info!("consensus fetch from {authority} failed: {e}; retrying in {retry}s");
                        self.next_fetch = Instant::now() + Duration::from_secs(retry);
                    }
                }
            }
        }
        out
    }

    /// C's check of a consensus's relay protocol lists against ours
    /// ([`super::protocols`]): a required one missing stops weft (on a
    /// testing network it is logged at error and weft runs on), a
    /// recommended one missing is warned; each verdict logged once.
    fn check_protocols(&mut self, c: &ConsensusSummary) -> Option<String> {
        use super::protocols::{check, ProtocolVerdict};
        let v = check(
            PROTO,
            &c.required_relay_protocols,
            &c.recommended_relay_protocols,
            c.valid_after,
        );
        let text = match &v {
            ProtocolVerdict::Fine => return None,
            ProtocolVerdict::Warn(t) | ProtocolVerdict::Missing(t) => t.clone(),
        };
        let new = self.protocols_said.as_deref() != Some(text.as_str());
        self.protocols_said = Some(text.clone());
        match v {
            ProtocolVerdict::Missing(_) if !self.testing => {
                tracing::error!("{text}");
                Some(text)
            }
            ProtocolVerdict::Missing(_) if new => {
                tracing::error!("{text} (TestingTorNetwork: running on)");
                None
            }
            ProtocolVerdict::Warn(_) if new => {
                tracing::warn!("{text}");
                None
            }
            _ => None,
        }
    }
}
