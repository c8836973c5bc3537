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
//! only with `IPv6Exit`. The TTLs given to clients are clipped by the
//! stream room (`clip_dns_ttl`). Found answers are kept by the thread
//! for their TTL (`AnswerCache`, at most 16384 names; failures are not
//! kept), so repeated names cost no query and the MetricsPort can count
//! cache hits; hickory's own cache sits behind it.
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
    /// Answered from the resolver's cache (no query went out).
    pub cached: bool,
}

/// Most names the resolver's cache keeps (C Tor's exits cache without a
/// fixed cap, bounded by MaxMemInQueues; a fixed cap is simpler to trust).
const CACHE_MAX: usize = 16_384;

/// Found answers by (name, IPv6 asked), until their TTL runs out; owned by
/// the resolver thread. Failures are not kept.
#[derive(Default)]
struct AnswerCache {
    found: HashMap<(String, bool), (DnsAnswer, Instant)>,
}

impl AnswerCache {
    /// A live answer for `q`, its TTLs counted down.
    fn get(&self, q: &DnsQuery, now: Instant) -> Option<DnsAnswer> {
        let (a, expires) = self.found.get(&(q.host.clone(), q.want_v6))?;
        let left = expires.checked_duration_since(now)?.as_secs() as u32;
        Some(DnsAnswer {
            key: q.key,
            tag: q.tag,
            v4: a.v4.map(|(ip, _)| (ip, left)),
            v6: a.v6.map(|(ip, _)| (ip, left)),
            cached: true,
        })
    }

    /// Keep a found answer for its TTL (the smaller of the families').
    fn put(&mut self, q: &DnsQuery, a: &DnsAnswer, now: Instant) {
        let ttl = [a.v4.ok().map(|x| x.1), a.v6.ok().map(|x| x.1)]
            .into_iter()
            .flatten()
            .min();
        let Some(ttl) = ttl.filter(|&t| t > 0) else {
            return;
        };
        if self.found.len() >= CACHE_MAX {
            self.found.retain(|_, (_, e)| *e > now);
            if self.found.len() >= CACHE_MAX {
                return;
            }
        }
        let expires = now + std::time::Duration::from_secs(u64::from(ttl));
        self.found
            .insert((q.host.clone(), q.want_v6), (a.clone(), expires));
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

impl ResolverRequests {
    /// Start the resolver thread with the name servers of `resolv_conf`
    /// (default `/etc/resolv.conf`); each answer goes to
    /// `deliver(worker, answer)`. A configuration that cannot be read is
    /// logged, and every lookup then fails (RESOLVEFAILED), as C Tor's
    /// exits fail lookups without name servers.
    pub fn spawn(
        self,
        resolv_conf: Option<PathBuf>,
        deliver: impl Fn(usize, DnsAnswer) + Send + Sync + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let path = resolv_conf.unwrap_or_else(|| PathBuf::from("/etc/resolv.conf"));
        let config = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                hickory_resolver::system_conf::parse_resolv_conf(d).map_err(|e| e.to_string())
            });
        let mut rx = self.rx;
        std::thread::Builder::new()
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
                    Ok((conf, opts)) => rt.block_on(async { build(conf, opts) }),
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
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    while let Some(q) = rx.recv().await {
                        if let Some(a) = cache.borrow().get(&q, Instant::now()) {
                            deliver(q.worker, a);
                            continue;
                        }
                        let r = if q.want_v6 { v46.clone() } else { v4.clone() };
                        let (deliver, cache) = (deliver.clone(), cache.clone());
                        tokio::task::spawn_local(async move {
                            let answer = lookup(&r, &q).await;
                            cache.borrow_mut().put(&q, &answer, Instant::now());
                            deliver(q.worker, answer);
                        });
                    }
                });
            })
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

/// Look `q.host` up; the first address of each family with its TTL.
async fn lookup(r: &TokioResolver, q: &DnsQuery) -> DnsAnswer {
    let mut answer = DnsAnswer {
        key: q.key,
        tag: q.tag,
        v4: Err(false),
        v6: Err(false),
        cached: false,
    };
    // A trailing dot: the name as given, no search domains (C Tor's
    // evdns is configured without search domains for exits).
    let name = if q.host.ends_with('.') {
        q.host.clone()
    } else {
        format!("{}.", q.host)
    };
    match r.lookup_ip(name.as_str()).await {
        Ok(found) => {
            let ttl = found
                .valid_until()
                .saturating_duration_since(Instant::now())
                .as_secs()
                .min(u64::from(u32::MAX)) as u32;
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

/// Without name servers: answer every request with a failure.
fn fail_all(rx: &mut UnboundedReceiver<DnsQuery>, deliver: &impl Fn(usize, DnsAnswer)) {
    while let Some(q) = rx.blocking_recv() {
        deliver(
            q.worker,
            DnsAnswer {
                key: q.key,
                tag: q.tag,
                v4: Err(false),
                v6: Err(false),
                cached: false,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

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
        requests
            .spawn(Some(conf), move |w, a| {
                tx.lock().unwrap().send((w, a)).unwrap();
            })
            .unwrap();
        assert!(resolver.query(DnsQuery {
            worker: 3,
            key: 7,
            tag: 11,
            host: "localhost".into(),
            want_v6: false,
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
        requests
            .spawn(Some("/nonexistent/resolv.conf".into()), move |w, a| {
                tx.lock().unwrap().send((w, a)).unwrap();
            })
            .unwrap();
        resolver.query(DnsQuery {
            worker: 0,
            key: 1,
            tag: 2,
            host: "example.com".into(),
            want_v6: true,
        });
        let (_, a) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(a.v4.is_err() && a.v6.is_err());
    }

    #[test]
    fn found_answers_are_kept_for_their_ttl_and_failures_are_not() {
        let mut cache = AnswerCache::default();
        let q = |host: &str| DnsQuery {
            worker: 0,
            key: 7,
            tag: 9,
            host: host.into(),
            want_v6: false,
        };
        let now = Instant::now();
        let found = DnsAnswer {
            key: 1,
            tag: 2,
            v4: Ok((Ipv4Addr::new(198, 51, 100, 3), 60)),
            v6: Err(false),
            cached: false,
        };
        cache.put(&q("a.example"), &found, now);
        let failed = DnsAnswer {
            v4: Err(true),
            ..found.clone()
        };
        cache.put(&q("b.example"), &failed, now);
        let hit = cache
            .get(&q("a.example"), now + std::time::Duration::from_secs(20))
            .unwrap();
        assert!(hit.cached);
        assert_eq!((hit.key, hit.tag), (7, 9), "the asking stream's");
        assert_eq!(hit.v4, Ok((Ipv4Addr::new(198, 51, 100, 3), 40)));
        assert!(cache.get(&q("b.example"), now).is_none());
        assert!(cache
            .get(&q("a.example"), now + std::time::Duration::from_secs(61))
            .is_none());
    }
}
