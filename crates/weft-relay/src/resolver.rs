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
//! `ServerDNSResolvConfFile`, read as C reads it: [`crate::resolv_conf`];
//! read again on a reload if it changed, and every ten minutes while it
//! cannot be used: [`thread`]), /etc/hosts consulted, IPv6 (AAAA) asked
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

use hickory_resolver::TokioResolver;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use weft_proto::circuit::exit::clip_dns_fuzzy_ttl;

mod thread;
pub use thread::{DnsStatus, ResolverSetup};

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
pub(crate) struct AnswerCache {
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
    tx: UnboundedSender<Request>,
}

impl Resolver {
    /// Ask for a lookup; the answer comes to the query's worker. False if
    /// the resolver thread is gone.
    pub fn query(&self, q: DnsQuery) -> bool {
        self.tx.send(Request::Lookup(q)).is_ok()
    }

    /// A reload (SIGHUP): read the name-server configuration again if it
    /// changed, as C's `dns_reset()`; the thread tells the controller
    /// what came of it.
    pub fn reload(&self, resolv_conf: Option<PathBuf>, randomize_case: bool) {
        let _ = self.tx.send(Request::Reload {
            resolv_conf,
            randomize_case,
        });
    }

    /// A consensus brought its DNS parameters: lookups from now on wait
    /// and retry as they say.
    pub fn set_params(&self, p: DnsParams) {
        let _ = self.tx.send(Request::Params(p));
    }
}

/// How long a name server gets and how often a lookup is tried again: the
/// consensus's `exit_dns_timeout` and `exit_dns_num_attempts`, which C
/// sets on its resolver over what resolv.conf says
/// (`configure_libevent_options`); C's defaults before a consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsParams {
    /// Wait for an answer this long.
    pub timeout: std::time::Duration,
    /// Tries in all, at least one (libevent's `attempts:`, which C sets
    /// from `exit_dns_num_attempts`: its default 2 makes a silent name
    /// server cost about 2 s).
    pub attempts: usize,
}

impl Default for DnsParams {
    fn default() -> Self {
        DnsParams {
            timeout: std::time::Duration::from_millis(1000),
            attempts: 2,
        }
    }
}

impl DnsParams {
    /// From a consensus's parameters.
    pub fn from_consensus(p: &weft_dir::consensus::NetParams) -> DnsParams {
        DnsParams {
            timeout: p.exit_dns_timeout(),
            attempts: p.exit_dns_num_attempts(),
        }
    }
}

/// The receiving end, until [`ResolverRequests::spawn`] starts the thread.
pub struct ResolverRequests {
    rx: UnboundedReceiver<Request>,
}

/// What the resolver thread is sent.
enum Request {
    Lookup(DnsQuery),
    Reload {
        resolv_conf: Option<PathBuf>,
        randomize_case: bool,
    },
    Params(DnsParams),
}

/// A resolver handle and its (not yet started) thread's requests.
pub fn channel() -> (Resolver, ResolverRequests) {
    let (tx, rx) = unbounded_channel();
    (Resolver { tx }, ResolverRequests { rx })
}

/// Look `q.host` up; the first address of each family with its TTL (or
/// for a reverse lookup, the first name).
pub(crate) async fn lookup(r: &TokioResolver, q: &DnsQuery) -> DnsAnswer {
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
pub(crate) fn random_u32() -> u32 {
    u32::from_le_bytes(weft_crypto::random_array::<4>())
}

#[cfg(test)]
mod tests {
    use super::*;

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
