//! The exit's DNS: one resolver thread, owned by no worker, that looks up
//! the host names of BEGINs and hands each answer back to the worker that
//! asked. It runs hickory-resolver (the Rust ecosystem's well-kept
//! resolver: asynchronous, reads resolv.conf and /etc/hosts, caches by the
//! records' TTLs) on a current-thread tokio runtime, so any number of
//! lookups wait at once and a slow name server delays only the streams
//! that wait for it — never a worker, which only sends a request on a
//! channel and later finds the answer in its inbox.
//!
//! Like C Tor's evdns setup: `/etc/resolv.conf` (or
//! `ServerDNSResolvConfFile`), /etc/hosts consulted, IPv6 (AAAA) asked
//! only with `IPv6Exit`, the case of each query's name randomized (the
//! 0x20 hack, `ServerDNSRandomizeCase`, on by default as in C) and an
//! answer that does not repeat it exactly dropped as forged. Every answer, found or failed, is kept by the
//! thread (`AnswerCache`, at most 16384 names) for a fuzzy TTL, as C Tor's
//! exits keep theirs since TROVE-2021-009: the record's TTL clipped to 5
//! or 60 minutes, then moved by a uniform ±4 minutes; a failure's from 5
//! minutes. Clients get that same TTL from the first answer and from
//! every cache hit, so neither the TTL nor a hit shows when the name was
//! last looked up. Repeated names cost no query (the MetricsPort counts
//! the hits); a flood of names that do not exist costs one query per name
//! per few minutes. hickory's own cache sits behind it, as a caching
//! local resolver sits behind C Tor's evdns.
//! [C dns.c configure_nameservers(), launch_resolve(),
//! evdns_callback()]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Instant;

use hickory_resolver::config::{LookupIpStrategy, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tracing::{info, warn};
use weft_proto::circuit::exit::clip_dns_fuzzy_ttl;

/// One family's answer: the address and its TTL (seconds, not clipped),
/// or whether the failure may be transient.
pub type FamilyAnswer<A> = Result<(A, u32), bool>;

/// A lookup a worker asks for.
#[derive(Debug, Clone)]
pub struct DnsQuery {
    /// The worker that gets the answer.
    pub worker: usize,
    /// The stream it is for (the worker's key and the stream's tag, so a
    /// late answer for a stream that is gone is recognised).
    pub key: usize,
    /// See `key`.
    pub tag: u64,
    /// The name, lower-cased.
    pub host: String,
    /// Ask for AAAA too (IPv6Exit).
    pub want_v6: bool,
    /// A reverse lookup (PTR) of this address; `host` is its
    /// `in-addr.arpa` or `ip6.arpa` name.
    pub reverse: Option<IpAddr>,
}

/// The answer to a [`DnsQuery`].
#[derive(Debug, Clone)]
pub struct DnsAnswer {
    /// The query's stream key.
    pub key: usize,
    /// The query's stream tag.
    pub tag: u64,
    /// The first IPv4 address, or why there is none.
    pub v4: FamilyAnswer<Ipv4Addr>,
    /// The first IPv6 address, or why there is none (Err(false) when not
    /// asked).
    pub v6: FamilyAnswer<Ipv6Addr>,
    /// For a reverse lookup: the first host name (no trailing dot) and
    /// its TTL; the failure is in `v4`.
    pub hostname: Option<(String, u32)>,
    /// Answered from the resolver's cache (no query went out).
    pub cached: bool,
}

impl DnsAnswer {
    /// No address for stream (`key`, `tag`); `transient`: the failure may
    /// pass (C's RESOLVED error 0xF0).
    pub fn failed(key: usize, tag: u64, transient: bool) -> DnsAnswer {
        DnsAnswer {
            key,
            tag,
            v4: Err(transient),
            v6: Err(transient),
            hostname: None,
            cached: false,
        }
    }
}

/// Most names the resolver's cache keeps (C Tor's exits cache without a
/// fixed cap, bounded by MaxMemInQueues; a fixed cap is simpler to trust).
const CACHE_MAX: usize = 16_384;

/// Answers by (name, IPv6 asked), found or failed, each family with its
/// fuzzy TTL (C Tor's `clip_dns_fuzzy_ttl`), kept until the smallest of
/// those runs out; owned by the resolver thread.
#[derive(Default)]
struct AnswerCache {
    entries: HashMap<(String, bool), (DnsAnswer, Instant)>,
}

impl AnswerCache {
    /// A live answer for `q`, with the TTLs it was kept with, unchanged:
    /// a hit tells nothing of when the name was looked up (C Tor sends the
    /// cached entry's TTL, not what is left of it).
    fn get(&self, q: &DnsQuery, now: Instant) -> Option<DnsAnswer> {
        let (a, expires) = self.entries.get(&(q.host.clone(), q.want_v6))?;
        if now >= *expires {
            return None;
        }
        Some(DnsAnswer {
            key: q.key,
            tag: q.tag,
            cached: true,
            ..a.clone()
        })
    }

    /// A fresh answer: each family's TTL made fuzzy (its own draw from
    /// `rand`, as C's A and AAAA answers each get one; a failure's from a
    /// TTL of 0, so a failed name is kept for one to nine minutes), kept
    /// until the smallest runs out, and returned as the clients get it.
    /// [C dns.c evdns_callback(), cached_resolve_add_answer(),
    /// make_pending_resolve_cached()]
    fn put(
        &mut self,
        q: &DnsQuery,
        mut a: DnsAnswer,
        now: Instant,
        rand: &mut impl FnMut() -> u32,
    ) -> DnsAnswer {
        let mut fuzz = |ttl: u32| clip_dns_fuzzy_ttl(ttl, rand());
        let v4_ttl = match &mut a.v4 {
            Ok((_, ttl)) => {
                *ttl = fuzz(*ttl);
                *ttl
            }
            Err(_) => fuzz(0),
        };
        let v6_ttl = match &mut a.v6 {
            Ok((_, ttl)) => {
                *ttl = fuzz(*ttl);
                Some(*ttl)
            }
            Err(_) if q.want_v6 => Some(fuzz(0)),
            Err(_) => None,
        };
        let name_ttl = a.hostname.as_mut().map(|(_, ttl)| {
            *ttl = fuzz(*ttl);
            *ttl
        });
        let keep = v6_ttl.map_or(v4_ttl, |t| t.min(v4_ttl));
        // A reverse lookup's answer is kept for its name's TTL.
        let keep = name_ttl.unwrap_or(keep);
        if self.entries.len() >= CACHE_MAX {
            self.entries.retain(|_, (_, e)| *e > now);
        }
        if self.entries.len() < CACHE_MAX {
            let expires = now + std::time::Duration::from_secs(u64::from(keep));
            self.entries
                .insert((q.host.clone(), q.want_v6), (a.clone(), expires));
        }
        a
    }
}

/// Where workers send lookups (cheap to clone; sending never blocks).
#[derive(Debug, Clone)]
pub struct Resolver {
    tx: UnboundedSender<DnsQuery>,
}

impl Resolver {
    /// Ask for a lookup; the answer comes to the query's worker. False if
    /// the resolver thread is gone.
    pub fn query(&self, q: DnsQuery) -> bool {
        self.tx.send(q).is_ok()
    }
}

/// The receiving end, until [`ResolverRequests::spawn`] starts the thread.
pub struct ResolverRequests {
    rx: UnboundedReceiver<DnsQuery>,
}

/// A resolver handle and its (not yet started) thread's requests.
pub fn channel() -> (Resolver, ResolverRequests) {
    let (tx, rx) = unbounded_channel();
    (Resolver { tx }, ResolverRequests { rx })
}

/// How the resolver thread is set up (the torrc's DNS options).
#[derive(Debug, Clone)]
pub struct ResolverSetup {
    /// `ServerDNSResolvConfFile` (None: `/etc/resolv.conf`).
    pub resolv_conf: Option<PathBuf>,
    /// `ServerDNSRandomizeCase`.
    pub randomize_case: bool,
    /// `ServerDNSDetectHijacking`: check now and then that names that
    /// cannot exist are not found ([`crate::dns_honesty`]).
    pub detect_hijacking: bool,
    /// `ServerDNSTestAddresses`.
    pub test_addresses: Vec<String>,
    /// Tests: the first round of checks this long after the start, and
    /// the test addresses this long after the bogus names (None: C's 60
    /// to 180 s, and 30 s).
    pub first_check: Option<std::time::Duration>,
}

impl ResolverSetup {
    /// C Tor's defaults with `resolv_conf`.
    pub fn with_conf(resolv_conf: Option<PathBuf>) -> ResolverSetup {
        ResolverSetup {
            resolv_conf,
            randomize_case: true,
            detect_hijacking: true,
            test_addresses: crate::dns_honesty::DEFAULT_TEST_ADDRESSES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            first_check: None,
        }
    }
}

impl ResolverRequests {
    /// Start the resolver thread with the name servers of
    /// `setup.resolv_conf` (default `/etc/resolv.conf`); each answer goes to
    /// `deliver(worker, answer)`. A configuration that cannot be read is
    /// logged, and every lookup then fails (RESOLVEFAILED), as C Tor's
    /// exits fail lookups without name servers; the second value says
    /// whether the name servers could be configured (false: the exit must
    /// not claim to be one). `useless()` is called once if the checks of
    /// [`crate::dns_honesty`] find the name servers useless (the exit must
    /// then withdraw).
    pub fn spawn(
        self,
        setup: ResolverSetup,
        deliver: impl Fn(usize, DnsAnswer) + Send + Sync + 'static,
        useless: impl Fn() + Send + 'static,
    ) -> std::io::Result<(std::thread::JoinHandle<()>, bool)> {
        let path = setup
            .resolv_conf
            .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf"));
        let randomize_case = setup.randomize_case;
        let config = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                hickory_resolver::system_conf::parse_resolv_conf(d).map_err(|e| e.to_string())
            });
        let usable = config.is_ok();
        let mut rx = self.rx;
        let handle = std::thread::Builder::new()
            .name("weft-resolver".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        warn!("DNS: cannot start the resolver's runtime: {e}; lookups fail");
                        return fail_all(&mut rx, &deliver);
                    }
                };
                let resolvers = match config {
                    Ok((conf, mut opts)) => {
                        opts.case_randomization = randomize_case;
                        rt.block_on(async { build(conf, opts) })
                    }
                    Err(e) => Err(e),
                };
                let (v4, v46) = match resolvers {
                    Ok(r) => {
                        info!("DNS: name servers from {}", path.display());
                        r
                    }
                    Err(e) => {
                        warn!(
                            "DNS: cannot use {}: {e}; every lookup fails until weft restarts",
                            path.display()
                        );
                        return fail_all(&mut rx, &deliver);
                    }
                };
                let deliver = std::sync::Arc::new(deliver);
                let cache = std::rc::Rc::new(std::cell::RefCell::new(AnswerCache::default()));
                let honesty = Honesty::new(&setup.test_addresses, useless);
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    if setup.detect_hijacking {
                        tokio::task::spawn_local(honesty.clone().run(
                            v4.clone(),
                            v46.clone(),
                            setup.first_check,
                        ));
                    }
                    while let Some(q) = rx.recv().await {
                        if let Some(a) = cache.borrow().get(&q, Instant::now()) {
                            deliver(q.worker, a);
                            continue;
                        }
                        let r = if q.want_v6 { v46.clone() } else { v4.clone() };
                        let (deliver, cache, honesty) =
                            (deliver.clone(), cache.clone(), honesty.clone());
                        tokio::task::spawn_local(async move {
                            let found = honesty.filter(&q.host, lookup(&r, &q).await);
                            let answer =
                                cache
                                    .borrow_mut()
                                    .put(&q, found, Instant::now(), &mut random_u32);
                            deliver(q.worker, answer);
                        });
                    }
                });
            })?;
        Ok((handle, usable))
    }
}

/// Two resolvers sharing nothing but configuration: IPv4 only, and both
/// families.
fn build(
    conf: ResolverConfig,
    opts: ResolverOpts,
) -> Result<(TokioResolver, TokioResolver), String> {
    let make = |strategy| {
        let mut b =
            TokioResolver::builder_with_config(conf.clone(), TokioRuntimeProvider::default());
        let mut o = opts.clone();
        o.ip_strategy = strategy;
        *b.options_mut() = o;
        b.build().map_err(|e| e.to_string())
    };
    Ok((
        make(LookupIpStrategy::Ipv4Only)?,
        make(LookupIpStrategy::Ipv4AndIpv6)?,
    ))
}

/// The resolver thread's side of [`crate::dns_honesty`]: the checks' state,
/// the rounds of checks, and the filter every answer passes.
#[derive(Clone)]
struct Honesty {
    state: std::rc::Rc<std::cell::RefCell<crate::dns_honesty::DnsHonesty>>,
    useless: std::rc::Rc<dyn Fn()>,
}

impl Honesty {
    fn new(test_addresses: &[String], useless: impl Fn() + 'static) -> Honesty {
        Honesty {
            state: std::rc::Rc::new(std::cell::RefCell::new(
                crate::dns_honesty::DnsHonesty::new(test_addresses),
            )),
            useless: std::rc::Rc::new(useless),
        }
    }

    /// An address the name servers give for names that do not exist is
    /// "not found" (C: treated as `DNS_ERR_NOTEXIST`); a test address
    /// answered with one counts toward useless DNS.
    fn filter(&self, host: &str, mut a: DnsAnswer) -> DnsAnswer {
        let mut redirected = false;
        {
            let s = self.state.borrow();
            if matches!(a.v4, Ok((ip, _)) if s.is_wildcarded(&IpAddr::V4(ip))) {
                a.v4 = Err(false);
                redirected = true;
            }
            if matches!(a.v6, Ok((ip, _)) if s.is_wildcarded(&IpAddr::V6(ip))) {
                a.v6 = Err(false);
                redirected = true;
            }
        }
        if redirected {
            tracing::debug!("DNS: {host} resolves to a hijacked address; treated as not found");
            let v = self.state.borrow_mut().test_address_redirected(host);
            if v == crate::dns_honesty::Verdict::Broken {
                warn!(
                    "Your DNS provider tried to redirect \"{host}\" to a junk address, as it did most test addresses (ServerDNSTestAddresses). I'm going to stop being an exit node for now, since our DNS seems so broken."
                );
                (self.useless)();
            }
        }
        a
    }

    /// Rounds of checks: the bogus names, 30 s later the test addresses;
    /// the first round `first` after the start (C: 60 to 180 s), the next
    /// ones 12 to 24 hours apart.
    async fn run(self, v4: TokioResolver, v46: TokioResolver, first: Option<std::time::Duration>) {
        use crate::dns_honesty::{self as h, DnsHonesty, Verdict};
        let mut rng = rand::rng();
        tokio::time::sleep(first.unwrap_or_else(|| h::first_check_delay(&mut rng))).await;
        loop {
            info!("DNS: checking whether our name servers hijack names that do not exist");
            for (name, ipv6) in DnsHonesty::bogus_names(&mut rng) {
                let (r, me) = (if ipv6 { v46.clone() } else { v4.clone() }, self.clone());
                tokio::task::spawn_local(async move {
                    let addrs: Vec<IpAddr> = match r.lookup_ip(format!("{name}.")).await {
                        Ok(found) => found.iter().collect(),
                        Err(_) => Vec::new(),
                    };
                    for v in me.state.borrow_mut().check_answered(&addrs) {
                        if let Verdict::Wildcarded(a) = v {
                            tracing::info!(
                                "Your DNS provider has given \"{a}\" as an answer for more than five different invalid addresses. Apparently they are hijacking DNS failures. I'll try to correct for this by treating future occurrences of \"{a}\" as 'not found'."
                            );
                        }
                    }
                });
            }
            tokio::time::sleep(first.unwrap_or(h::TEST_ADDRESS_DELAY)).await;
            let tests = self.state.borrow().test_addresses().to_vec();
            for host in tests {
                for r in [v4.clone(), v46.clone()] {
                    let (me, host) = (self.clone(), host.clone());
                    tokio::task::spawn_local(async move {
                        let q = DnsQuery {
                            worker: 0,
                            key: 0,
                            tag: 0,
                            host,
                            want_v6: false,
                            reverse: None,
                        };
                        let a = lookup(&r, &q).await;
                        me.filter(&q.host, a);
                    });
                }
            }
            tokio::time::sleep(h::next_check_delay(&mut rng)).await;
        }
    }
}

/// Look `q.host` up; the first address of each family with its TTL (or
/// for a reverse lookup, the first name).
async fn lookup(r: &TokioResolver, q: &DnsQuery) -> DnsAnswer {
    let mut answer = DnsAnswer::failed(q.key, q.tag, false);
    if q.reverse.is_some() {
        return reverse_lookup(r, q, answer).await;
    }
    // A trailing dot: the name as given, no search domains (C Tor's
    // evdns is configured without search domains for exits).
    let name = if q.host.ends_with('.') {
        q.host.clone()
    } else {
        format!("{}.", q.host)
    };
    match r.lookup_ip(name.as_str()).await {
        Ok(found) => {
            let ttl = ttl_left(found.valid_until());
            for ip in found.iter() {
                match ip {
                    IpAddr::V4(a) if answer.v4.is_err() => answer.v4 = Ok((a, ttl)),
                    IpAddr::V6(a) if answer.v6.is_err() => answer.v6 = Ok((a, ttl)),
                    _ => {}
                }
            }
        }
        Err(e) => {
            let transient = !(e.is_nx_domain() || e.is_no_records_found());
            answer.v4 = Err(transient);
            answer.v6 = Err(transient);
        }
    }
    answer
}

/// The PTR lookup of `q.host` (an `in-addr.arpa` or `ip6.arpa` name):
/// the first name answered, as C's evdns gives it (no trailing dot; C
/// sends at most 255 bytes of it). [C dns.c launch_one_resolve() with
/// DNS_PTR, evdns_callback()]
async fn reverse_lookup(r: &TokioResolver, q: &DnsQuery, mut answer: DnsAnswer) -> DnsAnswer {
    use hickory_resolver::proto::rr::{RData, RecordType};
    let name = format!("{}.", q.host.trim_end_matches('.'));
    match r.lookup(name.as_str(), RecordType::PTR).await {
        Ok(found) => {
            let ttl = ttl_left(found.valid_until());
            let first = found.answers().iter().find_map(|rec| match &rec.data {
                RData::PTR(p) => Some(p.0.to_string()),
                _ => None,
            });
            match first {
                Some(h) => {
                    let h = h.trim_end_matches('.');
                    if h.is_empty() || h.len() > 255 {
                        return answer;
                    }
                    answer.hostname = Some((h.to_string(), ttl));
                }
                None => answer.v4 = Err(false),
            }
        }
        Err(e) => answer.v4 = Err(!(e.is_nx_domain() || e.is_no_records_found())),
    }
    answer
}

/// Seconds from now until `until` (a lookup's record TTL, before C's
/// fuzzing).
fn ttl_left(until: Instant) -> u32 {
    until
        .saturating_duration_since(Instant::now())
        .as_secs()
        .min(u64::from(u32::MAX)) as u32
}

/// A uniform random number for the fuzzy TTLs.
fn random_u32() -> u32 {
    u32::from_le_bytes(weft_crypto::random_array::<4>())
}

/// Without name servers: answer every request with a failure.
fn fail_all(rx: &mut UnboundedReceiver<DnsQuery>, deliver: &impl Fn(usize, DnsAnswer)) {
    while let Some(q) = rx.blocking_recv() {
        deliver(q.worker, DnsAnswer::failed(q.key, q.tag, false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn setup(resolv_conf: Option<PathBuf>, randomize_case: bool) -> ResolverSetup {
        ResolverSetup {
            randomize_case,
            detect_hijacking: false,
            ..ResolverSetup::with_conf(resolv_conf)
        }
    }

    /// A resolver whose only source is a hosts-style answer: the resolv.conf
    /// names a server that does not exist, /etc/hosts knows `localhost`.
    #[test]
    fn localhost_resolves_from_the_hosts_file_and_answers_reach_their_worker() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("resolv.conf");
        std::fs::write(
            &conf,
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .unwrap();
        let (resolver, requests) = channel();
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let (_, usable) = requests
            .spawn(
                setup(Some(conf), true),
                move |w, a| {
                    tx.lock().unwrap().send((w, a)).unwrap();
                },
                || {},
            )
            .unwrap();
        assert!(usable);
        assert!(resolver.query(DnsQuery {
            worker: 3,
            key: 7,
            tag: 11,
            host: "localhost".into(),
            want_v6: false,
            reverse: None,
        }));
        let (w, a) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!((w, a.key, a.tag), (3, 7, 11));
        assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::LOCALHOST), "{a:?}");
    }

    #[test]
    fn an_unreadable_configuration_fails_every_lookup() {
        let (resolver, requests) = channel();
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let (_, usable) = requests
            .spawn(
                setup(Some("/nonexistent/resolv.conf".into()), true),
                move |w, a| {
                    tx.lock().unwrap().send((w, a)).unwrap();
                },
                || {},
            )
            .unwrap();
        assert!(!usable, "the exit must withdraw");
        resolver.query(DnsQuery {
            worker: 0,
            key: 1,
            tag: 2,
            host: "example.com".into(),
            want_v6: true,
            reverse: None,
        });
        let (_, a) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(a.v4.is_err() && a.v6.is_err());
    }

    #[test]
    fn answers_are_kept_with_a_fuzzy_ttl_that_hits_repeat() {
        let mut cache = AnswerCache::default();
        let q = |host: &str| DnsQuery {
            worker: 0,
            key: 7,
            tag: 9,
            host: host.into(),
            want_v6: false,
            reverse: None,
        };
        let now = Instant::now();
        let found = DnsAnswer {
            key: 1,
            tag: 2,
            v4: Ok((Ipv4Addr::new(198, 51, 100, 3), 60)),
            v6: Err(false),
            hostname: None,
            cached: false,
        };
        // A 60 s record: clipped to 300, moved by rand % 481 - 240.
        let mut rand = || 100;
        let given = cache.put(&q("a.example"), found.clone(), now, &mut rand);
        assert_eq!(given.v4, Ok((Ipv4Addr::new(198, 51, 100, 3), 160)));
        // A hit later gives the same TTL, not what is left of it.
        let hit = cache
            .get(&q("a.example"), now + std::time::Duration::from_secs(150))
            .unwrap();
        assert!(hit.cached);
        assert_eq!((hit.key, hit.tag), (7, 9), "the asking stream's");
        assert_eq!(hit.v4, given.v4);
        assert!(cache
            .get(&q("a.example"), now + std::time::Duration::from_secs(160))
            .is_none());
        // A failure is kept too, for a fuzzy 5 minutes.
        let failed = DnsAnswer {
            v4: Err(false),
            ..found.clone()
        };
        let mut rand = || 480;
        cache.put(&q("b.example"), failed, now, &mut rand);
        let hit = cache
            .get(&q("b.example"), now + std::time::Duration::from_secs(539))
            .unwrap();
        assert_eq!(hit.v4, Err(false));
        assert!(cache
            .get(&q("b.example"), now + std::time::Duration::from_secs(540))
            .is_none());
        // A long record: around an hour; each family drawn apart, the
        // entry kept for the smaller.
        let both = DnsAnswer {
            v4: Ok((Ipv4Addr::new(198, 51, 100, 4), 86400)),
            v6: Ok((Ipv6Addr::LOCALHOST, 86400)),
            ..found
        };
        let mut draws = [0u32, 480].into_iter();
        let mut rand = || draws.next().unwrap();
        let q6 = DnsQuery {
            want_v6: true,
            ..q("c.example")
        };
        let given = cache.put(&q6, both, now, &mut rand);
        assert_eq!(given.v4.map(|x| x.1), Ok(3360));
        assert_eq!(given.v6.map(|x| x.1), Ok(3840));
        assert!(cache
            .get(&q6, now + std::time::Duration::from_secs(3359))
            .is_some());
        assert!(cache
            .get(&q6, now + std::time::Duration::from_secs(3360))
            .is_none());
        assert!(
            cache.get(&q("c.example"), now).is_none(),
            "asked without IPv6: another entry"
        );
        // A reverse lookup's name: its own fuzzy TTL, kept for it (the
        // failed families' draws do not shorten it).
        let named = DnsAnswer {
            hostname: Some(("ptr.example".into(), 7200)),
            ..DnsAnswer::failed(1, 2, false)
        };
        let mut draws = [0u32, 480].into_iter();
        let mut rand = || draws.next().unwrap();
        let qr = DnsQuery {
            reverse: Some(IpAddr::from([192, 0, 2, 1])),
            ..q("1.2.0.192.in-addr.arpa")
        };
        let given = cache.put(&qr, named, now, &mut rand);
        assert_eq!(given.hostname, Some(("ptr.example".into(), 3840)));
        let hit = cache
            .get(&qr, now + std::time::Duration::from_secs(3839))
            .unwrap();
        assert_eq!(hit.hostname, given.hostname);
    }
}
