//! The resolver thread: its set-up from the torrc, its life across
//! reloads (C's `dns_reset()`), the retry of a configuration that failed
//! (C's `retry_dns_callback`, every ten minutes), the hijacking checks
//! ([`crate::dns_honesty`]) and what it tells the controller: whether the
//! name servers could be configured and whether they seem useless (C's
//! `has_dns_init_failed()` and `dns_seems_to_be_broken()`, either of
//! which makes the exit publish `reject *:*`).

use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{LookupIpStrategy, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::{info, warn};

use super::{
    lookup, random_u32, AnswerCache, DnsAnswer, DnsParams, DnsQuery, Request, ResolverRequests,
};
use crate::resolv_conf::{self, ConfOutcome, ReadStamp};

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
    pub first_check: Option<Duration>,
    /// How often a configuration that failed is read again (C's
    /// `RETRY_DNS_INTERVAL`, ten minutes; shorter only in tests).
    pub retry: Duration,
    /// The timeout and retries until a consensus says otherwise.
    pub params: DnsParams,
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
            retry: resolv_conf::RETRY_INTERVAL,
            params: DnsParams::default(),
        }
    }
}

/// What the controller is told of the exit's DNS (sent when it changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsStatus {
    /// The name servers could not be configured (C's
    /// `has_dns_init_failed()`).
    pub init_failed: bool,
    /// The name servers redirect most test addresses (C's
    /// `dns_seems_to_be_broken()`).
    pub broken: bool,
}

impl DnsStatus {
    /// The exit may claim to be one.
    pub fn usable(&self) -> bool {
        !self.init_failed && !self.broken
    }
}

/// Tells the controller when the status changes.
struct Reporter {
    last: Cell<DnsStatus>,
    send: Box<dyn Fn(DnsStatus)>,
}

impl Reporter {
    fn set(&self, s: DnsStatus) {
        if self.last.replace(s) != s {
            (self.send)(s);
        }
    }

    fn set_broken(&self) {
        let s = self.last.get();
        self.set(DnsStatus { broken: true, ..s });
    }
}

/// Why the thread stopped serving with its current name servers.
enum Next {
    Closed,
    Reload(PathBuf, bool),
    Retry,
    /// New DNS parameters from a consensus.
    Params(DnsParams),
}

impl ResolverRequests {
    /// Start the resolver thread with the name servers of
    /// `setup.resolv_conf` (default `/etc/resolv.conf`, read as C's
    /// `configure_nameservers()`, [`crate::resolv_conf`]); each answer goes
    /// to `deliver(worker, answer)`. The second value says whether the
    /// name servers could be configured (false: the exit must not claim to
    /// be one until `status` says otherwise); `status` is called on every
    /// later change: after a reload ([`super::Resolver::reload`]), the
    /// retry of a failed configuration, or checks that find the name
    /// servers useless. While the configuration fails, every lookup fails.
    pub fn spawn(
        self,
        setup: ResolverSetup,
        deliver: impl Fn(usize, DnsAnswer) + Send + Sync + 'static,
        status: impl Fn(DnsStatus) + Send + 'static,
    ) -> std::io::Result<(std::thread::JoinHandle<()>, bool)> {
        let path = setup
            .resolv_conf
            .clone()
            .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf"));
        let first = resolv_conf::read(&path, None, true);
        let usable = !matches!(first, ConfOutcome::Failed(_));
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
                let reporter = Rc::new(Reporter {
                    last: Cell::new(DnsStatus {
                        init_failed: !usable,
                        broken: false,
                    }),
                    send: Box::new(status),
                });
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, run(rx, setup, path, first, deliver, reporter));
            })?;
        Ok((handle, usable))
    }
}

/// The thread's life: serve with the name servers of the last usable
/// configuration, read anew on a reload or (after a failure) the retry.
async fn run(
    mut rx: UnboundedReceiver<Request>,
    setup: ResolverSetup,
    mut path: PathBuf,
    mut outcome: ConfOutcome,
    deliver: impl Fn(usize, DnsAnswer) + 'static,
    reporter: Rc<Reporter>,
) {
    let deliver = Rc::new(deliver);
    let cache = Rc::new(RefCell::new(AnswerCache::default()));
    let mut randomize_case = setup.randomize_case;
    let mut stamp: Option<ReadStamp> = None;
    let mut servers: Option<(TokioResolver, TokioResolver)> = None;
    let mut checks: Option<tokio::task::JoinHandle<()>> = None;
    let mut honesty: Option<Honesty> = None;
    let mut params = setup.params;
    // The name servers in use, before `params` apply (rebuilt with new
    // ones when a consensus brings them).
    let mut in_use: Option<(ResolverConfig, ResolverOpts)> = None;
    // C's dns_honesty_first_time: the first round waits 60 to 180 s, a
    // round relaunched after a reload goes at once.
    let mut first_round = true;
    loop {
        let mut failed = None;
        match outcome {
            ConfOutcome::Unchanged => {}
            ConfOutcome::Servers(conf, new_stamp) => {
                let (conf, mut opts) = *conf;
                opts.case_randomization = randomize_case;
                in_use = Some((conf.clone(), opts.clone()));
                match build(conf, opts, params) {
                    Ok(r) => {
                        info!("DNS: name servers from {}", path.display());
                        stamp = new_stamp;
                        // C's dns_servers_relaunch_checks(): what was
                        // learned of the old servers is forgotten.
                        if let Some(c) = checks.take() {
                            c.abort();
                        }
                        if let Some(old) = &honesty {
                            old.retired.set(true);
                        }
                        let h = Honesty::new(&setup.test_addresses, reporter.clone());
                        if setup.detect_hijacking {
                            let delay = if first_round {
                                setup.first_check.unwrap_or_else(|| {
                                    crate::dns_honesty::first_check_delay(&mut rand::rng())
                                })
                            } else {
                                Duration::ZERO
                            };
                            first_round = false;
                            checks = Some(tokio::task::spawn_local(h.clone().run(
                                r.0.clone(),
                                r.1.clone(),
                                delay,
                                setup.first_check,
                            )));
                        }
                        honesty = Some(h);
                        servers = Some(r);
                        reporter.set(DnsStatus {
                            init_failed: false,
                            broken: false,
                        });
                    }
                    Err(e) => failed = Some(e),
                }
            }
            ConfOutcome::Failed(e) => failed = Some(e),
        }
        if let Some(e) = failed {
            warn!(
                "DNS: cannot use {}: {e}; every lookup fails and the exit says reject *:* until a reload or the retry in {} s finds usable name servers",
                path.display(),
                setup.retry.as_secs()
            );
            if let Some(c) = checks.take() {
                c.abort();
            }
            if let Some(old) = &honesty {
                old.retired.set(true);
            }
            (servers, honesty, stamp) = (None, None, None);
            reporter.set(DnsStatus {
                init_failed: true,
                broken: false,
            });
        }
        let retry_at = servers
            .is_none()
            .then(|| tokio::time::Instant::now() + setup.retry);
        let next = serve(&mut rx, &servers, &honesty, &cache, &deliver, retry_at).await;
        outcome = match next {
            Next::Closed => return,
            // C's dns_reset(): configure_nameservers(0), which reads a
            // changed file only (the case option needs a new resolver).
            Next::Reload(p, randomize) => {
                let force = randomize != randomize_case;
                (path, randomize_case) = (p, randomize);
                resolv_conf::read(&path, stamp.as_ref(), force)
            }
            // C's retry_dns_callback(): dns_init(), configure_nameservers(1).
            Next::Retry => resolv_conf::read(&path, None, true),
            // C's dns_new_consensus_params(): the same name servers,
            // the new timeout and retries.
            Next::Params(p) => {
                if p != params {
                    params = p;
                    info!(
                        "DNS: exit_dns_timeout {} ms, exit_dns_num_attempts {}",
                        p.timeout.as_millis(),
                        p.attempts
                    );
                    if let (Some(_), Some((conf, opts))) = (&servers, &in_use) {
                        match build(conf.clone(), opts.clone(), params) {
                            Ok(r) => servers = Some(r),
                            Err(e) => warn!("DNS: cannot apply the consensus's parameters: {e}"),
                        }
                    }
                }
                ConfOutcome::Unchanged
            }
        };
    }
}

/// Answer lookups until a reload, the retry time, or the end.
async fn serve(
    rx: &mut UnboundedReceiver<Request>,
    servers: &Option<(TokioResolver, TokioResolver)>,
    honesty: &Option<Honesty>,
    cache: &Rc<RefCell<AnswerCache>>,
    deliver: &Rc<impl Fn(usize, DnsAnswer) + 'static>,
    retry_at: Option<tokio::time::Instant>,
) -> Next {
    loop {
        let req = tokio::select! {
            r = rx.recv() => r,
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)),
                if retry_at.is_some() => return Next::Retry,
        };
        let q = match req {
            None => return Next::Closed,
            Some(Request::Reload {
                resolv_conf,
                randomize_case,
            }) => {
                let p = resolv_conf.unwrap_or_else(|| PathBuf::from("/etc/resolv.conf"));
                return Next::Reload(p, randomize_case);
            }
            Some(Request::Params(p)) => return Next::Params(p),
            Some(Request::Lookup(q)) => q,
        };
        let (Some((v4, v46)), Some(honesty)) = (servers, honesty) else {
            deliver(q.worker, DnsAnswer::failed(q.key, q.tag, false));
            continue;
        };
        if let Some(a) = cache.borrow().get(&q, Instant::now()) {
            deliver(q.worker, a);
            continue;
        }
        let r = if q.want_v6 { v46.clone() } else { v4.clone() };
        let (deliver, cache, honesty) = (deliver.clone(), cache.clone(), honesty.clone());
        tokio::task::spawn_local(async move {
            let found = honesty.filter(&q.host, lookup(&r, &q).await);
            let answer = cache
                .borrow_mut()
                .put(&q, found, Instant::now(), &mut random_u32);
            deliver(q.worker, answer);
        });
    }
}

/// Two resolvers sharing nothing but configuration: IPv4 only, and both
/// families; the consensus's timeout and retries over resolv.conf's, as C.
fn build(
    conf: ResolverConfig,
    mut opts: ResolverOpts,
    params: DnsParams,
) -> Result<(TokioResolver, TokioResolver), String> {
    opts.timeout = params.timeout;
    // libevent's `attempts:` (what C sets) counts every try, at least one;
    // hickory's counts the tries after the first.
    opts.attempts = params.attempts.max(1) - 1;
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

/// The resolver thread's side of [`crate::dns_honesty`] for one set of
/// name servers: the checks' state, the rounds of checks, and the filter
/// every answer passes.
#[derive(Clone)]
struct Honesty {
    state: Rc<RefCell<crate::dns_honesty::DnsHonesty>>,
    reporter: Rc<Reporter>,
    /// Set when a reload replaced these name servers: a late answer of
    /// theirs says nothing of the new ones.
    retired: Rc<Cell<bool>>,
}

impl Honesty {
    fn new(test_addresses: &[String], reporter: Rc<Reporter>) -> Honesty {
        Honesty {
            state: Rc::new(RefCell::new(crate::dns_honesty::DnsHonesty::new(
                test_addresses,
            ))),
            reporter,
            retired: Rc::new(Cell::new(false)),
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
                if !self.retired.get() {
                    self.reporter.set_broken();
                }
            }
        }
        a
    }

    /// Rounds of checks: the bogus names, 30 s later (`test_delay` in
    /// tests) the test addresses; the first round `first` from now, the
    /// next ones 12 to 24 hours apart.
    async fn run(
        self,
        v4: TokioResolver,
        v46: TokioResolver,
        first: Duration,
        test_delay: Option<Duration>,
    ) {
        use crate::dns_honesty::{self as h, DnsHonesty, Verdict};
        let mut rng = rand::rng();
        tokio::time::sleep(first).await;
        loop {
            info!("DNS: checking whether our name servers hijack names that do not exist");
            for (name, ipv6) in DnsHonesty::bogus_names(&mut rng) {
                let (r, me) = (if ipv6 { v46.clone() } else { v4.clone() }, self.clone());
                tokio::task::spawn_local(async move {
                    let addrs: Vec<IpAddr> = match r.lookup_ip(format!("{name}.")).await {
                        Ok(found) => DnsHonesty::probe_answers(found.iter(), ipv6),
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
            tokio::time::sleep(test_delay.unwrap_or(h::TEST_ADDRESS_DELAY)).await;
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

/// Without a runtime: answer every request with a failure.
fn fail_all(rx: &mut UnboundedReceiver<Request>, deliver: &impl Fn(usize, DnsAnswer)) {
    while let Some(r) = rx.blocking_recv() {
        if let Request::Lookup(q) = r {
            deliver(q.worker, DnsAnswer::failed(q.key, q.tag, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel;
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::mpsc;

    fn setup(resolv_conf: PathBuf) -> ResolverSetup {
        ResolverSetup {
            detect_hijacking: false,
            ..ResolverSetup::with_conf(Some(resolv_conf))
        }
    }

    fn localhost(key: usize) -> DnsQuery {
        DnsQuery {
            worker: 3,
            key,
            tag: 11,
            host: "localhost".into(),
            want_v6: false,
            reverse: None,
        }
    }

    type Started = (
        super::super::Resolver,
        mpsc::Receiver<(usize, DnsAnswer)>,
        mpsc::Receiver<DnsStatus>,
        bool,
    );

    fn start(setup: ResolverSetup) -> Started {
        let (resolver, requests) = channel();
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let (status_tx, status_rx) = mpsc::channel();
        let (_, usable) = requests
            .spawn(
                setup,
                move |w, a| {
                    tx.lock().unwrap().send((w, a)).unwrap();
                },
                move |s| {
                    let _ = status_tx.send(s);
                },
            )
            .unwrap();
        (resolver, rx, status_rx, usable)
    }

    const LOCAL: &str = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

    /// A resolver whose only source is a hosts-style answer: the resolv.conf
    /// names a server that does not exist, /etc/hosts knows `localhost`.
    #[test]
    fn localhost_resolves_from_the_hosts_file_and_answers_reach_their_worker() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("resolv.conf");
        std::fs::write(&conf, LOCAL).unwrap();
        let (resolver, rx, _, usable) = start(setup(conf));
        assert!(usable);
        assert!(resolver.query(localhost(7)));
        let (w, a) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!((w, a.key, a.tag), (3, 7, 11));
        assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::LOCALHOST), "{a:?}");
    }

    /// C's `has_dns_init_failed()` and `dns_reset()`: a configuration that
    /// cannot be read fails every lookup; a reload that finds a usable one
    /// tells the controller ("dns resolvers back") and lookups work; a
    /// reload of the same unchanged file changes nothing.
    #[test]
    fn an_unreadable_configuration_fails_lookups_until_a_reload_reads_a_usable_one() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("resolv.conf");
        std::fs::create_dir(&conf).unwrap();
        let (resolver, rx, status, usable) = start(setup(conf.clone()));
        assert!(!usable, "the exit must withdraw");
        resolver.query(DnsQuery {
            want_v6: true,
            ..localhost(1)
        });
        let (_, a) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(a.v4.is_err() && a.v6.is_err());
        // The same unreadable file again: still failed, nothing to say.
        resolver.reload(Some(conf.clone()), true);
        assert!(status.recv_timeout(Duration::from_millis(500)).is_err());
        std::fs::remove_dir(&conf).unwrap();
        std::fs::write(&conf, LOCAL).unwrap();
        resolver.reload(Some(conf.clone()), true);
        let s = status.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(s.usable(), "{s:?}");
        assert!(resolver.query(localhost(2)));
        let (_, a) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::LOCALHOST), "{a:?}");
        // Unchanged: no new status; a reload naming a file that cannot be
        // read withdraws the exit again.
        resolver.reload(Some(conf.clone()), true);
        assert!(status.recv_timeout(Duration::from_millis(500)).is_err());
        resolver.reload(Some(dir.path().to_path_buf()), true);
        let s = status.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(s.init_failed && !s.usable(), "{s:?}");
    }

    /// C's `retry_dns_callback()`: while the configuration fails it is
    /// read again every `retry` (ten minutes), without a reload.
    #[test]
    fn a_failed_configuration_is_read_again_at_the_retry() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("resolv.conf");
        std::fs::create_dir(&conf).unwrap();
        let (resolver, rx, status, usable) = start(ResolverSetup {
            retry: Duration::from_millis(300),
            ..setup(conf.clone())
        });
        assert!(!usable);
        std::thread::sleep(Duration::from_millis(700));
        assert!(status.try_recv().is_err(), "still failing: nothing new");
        std::fs::remove_dir(&conf).unwrap();
        std::fs::write(&conf, LOCAL).unwrap();
        let s = status.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(s.usable(), "{s:?}");
        assert!(resolver.query(localhost(3)));
        let (_, a) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(a.v4.map(|(ip, _)| ip), Ok(Ipv4Addr::LOCALHOST), "{a:?}");
    }
}
