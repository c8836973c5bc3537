//! One target at one step of `weft-bench scale`: start it, open the
//! connections, build the circuits under the CPU cap, watch the idle
//! circuits, load the bulk ones, and reduce what /proc and the load saw to
//! [`Figures`]. Also the load side's identities, made once per run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use openssl::pkey::PKey;
use serde::Serialize;
use tor_cert::{CertType, CertifiedKey};
use tor_llcrypto::pk::ed25519;
use weft_crypto::certs;
use weft_crypto::keys::{RelayKeys, LINK_CERT_LIFETIME};
use weft_proto::circuit::HandshakeKeys;
use weft_proto::link::LinkIdentity;
use weft_proto::origin::HopTarget;

use super::{plan, ScaleEnv, ScaleProcedure};
use crate::load::many::{
    ManyConfig, ManyGen, ManyRun, ManySink, MANY_ACTIVE, MANY_BUILD, MANY_IDLE, MANY_MEASURE,
};
use crate::load::Identity;
use crate::run::{self, free_port, Percentiles, CELL_BYTES};
use crate::target::{context_switches, tasks_runtime_s, CpuCap, Target, TargetKind, TargetSpec};
use plan::Step;

/// What one target showed at one step.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// `tor` or `weft-2`.
    pub label: String,
    /// How it was started.
    pub command: String,
    /// Generator connections opened / failed.
    pub connections_open: u64,
    /// Failed or closed.
    pub connections_failed: u64,
    /// Seconds to open them.
    pub connect_s: f64,
    /// Circuits requested.
    pub circuits_requested: usize,
    /// Circuits built.
    pub circuits_built: u64,
    /// Circuits that failed while building.
    pub circuits_failed_building: u64,
    /// Circuits lost after they were built (idle and active phases).
    pub circuits_lost_later: u64,
    /// RSS before any connection, bytes.
    pub rss_base: u64,
    /// RSS with the connections only.
    pub rss_connections: u64,
    /// RSS with the circuits built and idle (median of the idle window).
    pub rss_idle: u64,
    /// RSS under bulk load (highest sample of the active window).
    pub rss_active: u64,
    /// (RSS with connections − base) / connections.
    pub rss_per_connection: Option<f64>,
    /// (RSS idle − RSS with connections) / circuits built.
    pub rss_per_idle_circuit: Option<f64>,
    /// Circuits built in the first half of the build, after which the
    /// build paused for [`Figures::rss_first_half`].
    pub circuits_first_half: u64,
    /// RSS with the first half of the circuits (median over 1 s after the
    /// settle time).
    pub rss_first_half: u64,
    /// (RSS idle − RSS with the first half) / circuits of the second half:
    /// what one more circuit costs, once the first ones have paid what
    /// comes once (code pages, rings and tables first touched).
    pub rss_per_idle_circuit_second_half: Option<f64>,
    /// (RSS active − RSS idle) / bulk circuits.
    pub rss_per_active_circuit: Option<f64>,
    /// Seconds the build took.
    pub create_s: f64,
    /// Circuits (CREATE2 + EXTEND2) per second at the cap.
    pub create_rate: Option<f64>,
    /// Target CPU-seconds while building.
    pub create_cpu_s: f64,
    /// Of the cap's CPU time, the share the target used (≈ 1: the cap
    /// bound the rate).
    pub create_cap_used: f64,
    /// Busiest load thread's CPU share while building (≥ 0.9: the load
    /// may have bound the rate).
    pub create_load_busy: f64,
    /// Idle window, s.
    pub idle_s: f64,
    /// Target CPU over the idle window, CPUs (from the threads'
    /// schedstat, ns; utime + stime if the kernel has none).
    pub idle_cpu_share: f64,
    /// The same from utime + stime (10 ms ticks).
    pub idle_cpu_share_ticks: f64,
    /// The same per 1,000 idle circuits.
    pub idle_cpu_share_per_1k: Option<f64>,
    /// Context switches per second (all threads, voluntary + not) over the
    /// idle window.
    pub idle_ctx_switches_per_s: f64,
    /// Idle cells sent / received at the sinks in the idle window.
    pub idle_cells: (u64, u64),
    /// Bulk circuits built.
    pub active_circuits: u64,
    /// Active window, s.
    pub active_s: f64,
    /// Bulk cells that arrived in the active window: (at the sinks, at the
    /// generators).
    pub active_cells: (u64, u64),
    /// Bulk bytes relayed in the active window (cells × 514).
    pub active_bytes: u64,
    /// Target CPU-seconds in the active window.
    pub active_cpu_s: f64,
    /// Bulk throughput, MiB/s (both directions).
    pub active_mib_per_s: f64,
    /// CPU-seconds per GiB of bulk traffic.
    pub cpu_s_per_gib: Option<f64>,
    /// The same less what the idle circuits cost meanwhile: the active
    /// window's CPU minus the idle phase's CPU rate (from the same
    /// clock, /proc's ticks) over the window, per GiB — the cost of the
    /// active traffic itself, which the issue asks to stay flat.
    pub cpu_s_per_gib_less_idle: Option<f64>,
    /// Node delay of the marked bulk cells (both directions), ms.
    pub delay_ms: Percentiles,
    /// The same upstream only (generator → sink).
    pub delay_up_ms: Percentiles,
    /// The same downstream only (sink → generator).
    pub delay_down_ms: Percentiles,
    /// How evenly the bulk circuits shared the up direction in the active
    /// window.
    pub fairness_up: Option<plan::Fairness>,
    /// The same, down.
    pub fairness_down: Option<plan::Fairness>,
    /// What each bulk circuit delivered (load thread, and the circuit's
    /// share), for a closer look.
    pub bulk_circuits: Vec<(usize, crate::load::many::BulkShare)>,
    /// Busiest load thread's CPU share in the active window.
    pub active_load_busy: f64,
    /// Marked cells that arrived wrong.
    pub corrupt_cells: u64,
    /// Load-side errors (first ones).
    pub errors: Vec<String>,
    /// Warnings in the target's log: count and the first few lines.
    pub log_warnings: (usize, Vec<String>),
    /// weft only, from its MetricsPort (summed over workers): cell slots
    /// its pools had allocated and cells waiting in its circuit queues,
    /// at the end of the idle window and the highest of the active
    /// window's samples — how much of the RSS under load is queued cells.
    pub weft_cells: Option<WeftCells>,
}

/// weft's cell gauges over a step (`weft_worker_pool_cells`,
/// `weft_worker_queued_cells`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WeftCells {
    /// Pool slots at the end of the idle window.
    pub pool_idle: u64,
    /// Highest pool slots under load.
    pub pool_active_max: u64,
    /// Highest queued cells under load.
    pub queued_active_max: u64,
    /// Scrapes under load that answered.
    pub samples: u64,
}

/// The two cell gauges of one scrape, if the target has a MetricsPort.
fn weft_cell_gauges(target: &Target) -> Option<(u64, u64)> {
    let port = target.metrics_port?;
    let s = crate::metrics::scrape(port, &target.metrics_token).ok()?;
    let g = |k: &str| s.values.get(k).copied().unwrap_or(0.0) as u64;
    Some((g("weft_worker_pool_cells"), g("weft_worker_queued_cells")))
}

/// The load side's relay identities, made once per run.
pub(super) struct Idents {
    pub(super) gens: Vec<Arc<Identity>>,
    pub(super) sinks: Vec<Arc<Identity>>,
}

pub(super) fn identities(dir: &Path, gens: usize, sinks: usize) -> Result<Idents> {
    // Sinks are full relays (their TLS certificate is what the target
    // checks); a template for the generators' TLS material too.
    let sink_ids = (0..sinks.max(1))
        .map(|i| {
            run::identity(&dir.join(format!("sink{i}")), &format!("scaleSink{i}")).map(Arc::new)
        })
        .collect::<Result<Vec<_>>>()?;
    let template = sink_ids[0].clone();
    let names: Vec<(PathBuf, String)> = (0..gens)
        .map(|i| (dir.join(format!("gen{i}")), format!("scaleGen{i}")))
        .collect();
    // RSA key generation dominates: two threads.
    let (a, b) = names.split_at(names.len() / 2);
    let make = |part: &[(PathBuf, String)]| {
        part.iter()
            .map(|(d, n)| gen_identity(d, n, &template).map(Arc::new))
            .collect::<Result<Vec<_>>>()
    };
    let gen_ids = std::thread::scope(|s| {
        let h = s.spawn(|| make(a));
        let mine = make(b);
        let theirs = h
            .join()
            .map_err(|_| anyhow::anyhow!("identity thread panicked"))?;
        Ok::<_, anyhow::Error>([theirs?, mine?].concat())
    })?;
    Ok(Idents {
        gens: gen_ids,
        sinks: sink_ids,
    })
}

/// A generator's identity, made cheaply: its own RSA-1024 identity,
/// Ed25519 keys and link-authentication certificate (so the target sees
/// one relay per connection; C Tor keeps only one connection without
/// circuits per relay), but the TLS key and certificate of `template`: a
/// TLS client presents none, and AUTHENTICATE (Ed25519-SHA256-RFC5705)
/// does not cover the initiator's, so no RSA-2048 key per generator.
fn gen_identity(dir: &Path, nickname: &str, template: &Identity) -> Result<Identity> {
    let now = SystemTime::now();
    let keys = RelayKeys::load_or_create(dir, nickname, Duration::from_secs(28 * 86400), now)?;
    let id_pkey = PKey::from_rsa(keys.rsa_id.clone())?;
    let id_cert = certs::x509_cert(
        &id_pkey,
        &id_pkey,
        true,
        Duration::from_secs(365 * 86400),
        now,
    )?;
    let auth_key = ed25519::Keypair::from_bytes(&weft_crypto::random_array());
    let auth_pub: ed25519::PublicKey = (&auth_key).into();
    let cert_auth = certs::ed_cert(
        CertType::SIGNING_V_LINK_AUTH,
        CertifiedKey::Ed25519(auth_pub.into()),
        now + LINK_CERT_LIFETIME,
        &keys.signing,
        false,
    )?;
    let t = &template.link;
    let link = LinkIdentity {
        rsa_id_der: keys.rsa_id_der.clone(),
        ed_id: keys.ed_id,
        cert_rsa_id: id_cert.to_der()?,
        cert_signing: keys.signing_cert.clone(),
        cert_tls_link: t.cert_tls_link.clone(),
        cert_auth,
        cert_crosscert: keys.rsa_ed_crosscert.clone(),
        auth_key,
        tls_cert_der: t.tls_cert_der.clone(),
    };
    Ok(Identity {
        link: Arc::new(link),
        handshake: HandshakeKeys {
            rsa_fp: keys.fingerprint,
            ed_id: keys.ed_id,
            ntor: keys.ntor_keys(),
        },
        acceptor: template.acceptor.clone(),
        connector: template.connector.clone(),
    })
}

/// utime + stime of process `pid` (all its threads, ended ones too), s.
pub fn process_cpu_s(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / hz
}

/// The process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 2..].chars().next()))
        .is_some_and(|st| st != 'Z' && st != 'X')
}

/// Warning and error lines of the target's logs: how many, the first 8.
fn log_warnings(dir: &Path) -> (usize, Vec<String>) {
    // What every tor of this bench says at start-up, as root with its fake
    // authority: not about the load.
    const EXPECTED: &[&str] = &[
        "DirAuthority or AlternateDirAuthority",
        "running Tor as root",
    ];
    let mut seen = std::collections::HashSet::new();
    let mut n = 0;
    let mut first = Vec::new();
    for f in ["notice.log", "stdout.log"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        for l in text.lines() {
            let lower = l.to_ascii_lowercase();
            let warn = lower.contains("[warn]")
                || lower.contains("[err]")
                || l.contains(" WARN ")
                || l.contains(" ERROR ");
            // The same line in both files counts once.
            if warn && !EXPECTED.iter().any(|e| l.contains(e)) && seen.insert(l.to_string()) {
                n += 1;
                if first.len() < 8 {
                    first.push(l.chars().take(300).collect());
                }
            }
        }
    }
    (n, first)
}

fn median_u64(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Progress lines carry the time since the run started.
pub(super) struct Clock(pub(super) Instant);

impl Clock {
    pub(super) fn say(&self, tag: &str, msg: &str) {
        eprintln!(
            "[scale +{:>4.0}s] {tag} {msg}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

/// Sleep `secs` in slices, sampling RSS every `every` (returns the samples).
fn sample_rss(target: &Target, secs: f64, every: Duration) -> Vec<u64> {
    sample_rss_and(target, secs, every, || {})
}

/// As [`sample_rss`], calling `also` after each sample.
fn sample_rss_and(target: &Target, secs: f64, every: Duration, mut also: impl FnMut()) -> Vec<u64> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut v = Vec::new();
    while Instant::now() < end {
        std::thread::sleep(every.min(end.saturating_duration_since(Instant::now())));
        v.push(target.rss_bytes());
        also();
    }
    v
}

fn busy(before: &[u64], after: &[u64], wall_s: f64) -> f64 {
    before
        .iter()
        .zip(after)
        .map(|(a, b)| b.saturating_sub(*a) as f64 / 1e9 / wall_s.max(1e-6))
        .fold(0.0, f64::max)
}

/// Measure one target at one step.
pub(super) fn measure(
    env: &ScaleEnv,
    p: &ScaleProcedure,
    step: Step,
    kind: TargetKind,
    ids: &Idents,
    clock: &Clock,
) -> Result<Figures> {
    let label = kind.label();
    let tag = format!("[{label} {}:{}]", step.connections, step.circuits);
    let mut target = Target::start(TargetSpec {
        kind,
        weft_bin: env.weft_bin.clone(),
        tor_bin: env.tor_bin.clone(),
        dir: env.dir.join(format!("target-{label}")),
        port: free_port()?,
        cpus: String::new(),
        cpu_quota: None,
        metrics_port: free_port()?,
    })?;
    let pid = target.pid;
    let mut f = Figures {
        label: label.clone(),
        command: target.command.clone(),
        circuits_requested: step.circuits,
        ..Figures::default()
    };
    std::thread::sleep(Duration::from_secs(1));
    f.rss_base = target.rss_bytes();

    let counts = plan::split_circuits(step.connections, step.circuits, p.skew);
    let bulk = plan::pick_bulk(&counts, p.active);
    let nt = p.load_threads;
    let mut per_thread: Vec<(Vec<ManyGen>, Vec<ManySink>)> =
        (0..nt).map(|_| (Vec::new(), Vec::new())).collect();
    for s in 0..p.sinks {
        let ident = ids.sinks[s % ids.sinks.len()].clone();
        let hop = HopTarget {
            rsa_id: ident.handshake.rsa_fp,
            ed_id: Some(ident.handshake.ed_id),
            ntor_key: ident.handshake.ntor[0].public.to_bytes(),
            addr: (std::net::Ipv4Addr::LOCALHOST, free_port()?).into(),
        };
        per_thread[s % nt].1.push(ManySink { ident, hop });
    }
    for (i, (&c, &b)) in counts.iter().zip(&bulk).enumerate() {
        per_thread[i % nt].0.push(ManyGen {
            ident: ids.gens[i % ids.gens.len()].clone(),
            source: plan::source_addr(i),
            circuits: c,
            bulk: b,
        });
    }
    let cfg = ManyConfig {
        target: target.hop.clone(),
        window: p.window,
        mark_every: p.mark_every,
        in_flight: p.in_flight,
        connecting: p.connecting,
        ping_period: Duration::from_secs_f64(p.ping_s),
    };
    let load = ManyRun::start(&cfg, per_thread)?;
    let n = step.connections as u64;
    let m = step.circuits as u64;

    // Connections only.
    let t = Instant::now();
    let mut next_say = t + Duration::from_secs(5);
    loop {
        let (open, dead) = (load.sum(|c| &c.gens_open), load.sum(|c| &c.gens_dead));
        if open + dead >= n || load.any_ended() || !alive(pid) {
            break;
        }
        if t.elapsed().as_secs_f64() > p.connect_timeout_s {
            clock.say(
                &tag,
                &format!(
                    "only {open} of {n} connections open after {:.0} s; going on",
                    p.connect_timeout_s
                ),
            );
            break;
        }
        if Instant::now() >= next_say {
            clock.say(
                &tag,
                &format!("connections: {open}/{n} open, {dead} failed"),
            );
            next_say += Duration::from_secs(5);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f.connect_s = t.elapsed().as_secs_f64();
    f.connections_open = load.sum(|c| &c.gens_open);
    f.connections_failed = load.sum(|c| &c.gens_dead);
    if !alive(pid) {
        bail!(
            "{label} exited while connections opened; log: {:?}",
            log_warnings(&target.spec.dir).1
        );
    }
    std::thread::sleep(Duration::from_secs_f64(p.settle_s));
    f.rss_connections = median_u64(&mut sample_rss(&target, 1.0, Duration::from_millis(250)));
    f.rss_per_connection = plan::per_unit(f.rss_base, f.rss_connections, f.connections_open);
    clock.say(&tag, &format!(
        "{} connections open in {:.1} s ({} failed); RSS {} → {} MiB; building {m} circuits at {} CPU",
        f.connections_open, f.connect_s, f.connections_failed, f.rss_base >> 20, f.rss_connections >> 20, p.create_cap
    ));

    // Circuits, at the CPU cap.
    let cap = (p.create_cap > 0.0)
        .then(|| CpuCap::apply(pid, &format!("scale-{label}"), p.create_cap))
        .transpose()?;
    // In two halves: the RSS between them separates what a circuit costs
    // from what the first circuits pay once.
    let (cpu0, lcpu0, t0) = (process_cpu_s(pid), load.cpu_ns(), Instant::now());
    load.set_build_share(500);
    load.set_phase(MANY_BUILD);
    let mut next_say = t0 + Duration::from_secs(5);
    let mut paused = Duration::ZERO;
    let mut first_half = true;
    loop {
        let (built, failed) = (load.sum(|c| &c.built), load.sum(|c| &c.failed));
        if first_half && !load.building() {
            first_half = false;
            let pause = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(p.settle_s));
            f.circuits_first_half = built;
            f.rss_first_half =
                median_u64(&mut sample_rss(&target, 1.0, Duration::from_millis(250)));
            load.set_build_share(0);
            paused += pause.elapsed();
            continue;
        }
        if built + failed >= m || load.any_ended() || !alive(pid) {
            break;
        }
        if (t0.elapsed() - paused).as_secs_f64() > p.build_timeout_s {
            clock.say(
                &tag,
                &format!(
                    "only {built} of {m} circuits built after {:.0} s; going on",
                    p.build_timeout_s
                ),
            );
            break;
        }
        if Instant::now() >= next_say {
            clock.say(
                &tag,
                &format!(
                    "circuits: {built}/{m} built, {failed} failed, {:.0}/s",
                    built as f64 / (t0.elapsed() - paused).as_secs_f64()
                ),
            );
            next_say += Duration::from_secs(5);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f.create_s = (t0.elapsed() - paused).as_secs_f64();
    // The pause's CPU (a settled target, near nothing) is counted.
    f.create_cpu_s = process_cpu_s(pid) - cpu0;
    f.create_load_busy = busy(&lcpu0, &load.cpu_ns(), f.create_s);
    drop(cap);
    f.circuits_built = load.sum(|c| &c.built);
    f.circuits_failed_building = load.sum(|c| &c.failed);
    f.create_rate = (f.create_s > 0.0).then(|| f.circuits_built as f64 / f.create_s);
    f.create_cap_used = if p.create_cap > 0.0 {
        f.create_cpu_s / (p.create_cap * f.create_s.max(1e-6))
    } else {
        0.0
    };
    if !alive(pid) {
        bail!(
            "{label} exited while circuits were built; log: {:?}",
            log_warnings(&target.spec.dir).1
        );
    }
    clock.say(&tag, &format!(
        "{} circuits built in {:.1} s ({:.0}/s, {} failed; target used {:.0}% of its cap, busiest load thread {:.0}%)",
        f.circuits_built, f.create_s, f.create_rate.unwrap_or(0.0), f.circuits_failed_building,
        f.create_cap_used * 100.0, f.create_load_busy * 100.0
    ));

    // Idle circuits.
    load.set_phase(MANY_IDLE);
    std::thread::sleep(Duration::from_secs_f64(p.settle_s));
    let (cpu_a, run_a, cs_a, t_a) = (
        process_cpu_s(pid),
        tasks_runtime_s(pid),
        context_switches(pid),
        Instant::now(),
    );
    let pings_a = (load.sum(|c| &c.pings_sent), load.sum(|c| &c.pings_received));
    let mut rss = sample_rss(&target, p.idle_s, Duration::from_secs(1));
    f.idle_s = t_a.elapsed().as_secs_f64();
    let (cpu_b, run_b, cs_b) = (
        process_cpu_s(pid),
        tasks_runtime_s(pid),
        context_switches(pid),
    );
    let idle_cpu_s = match (run_a, run_b) {
        (Some(a), Some(b)) if b >= a => b - a,
        _ => cpu_b - cpu_a,
    };
    f.idle_cells = (
        load.sum(|c| &c.pings_sent) - pings_a.0,
        load.sum(|c| &c.pings_received) - pings_a.1,
    );
    f.rss_idle = median_u64(&mut rss);
    f.rss_per_idle_circuit = plan::per_unit(f.rss_connections, f.rss_idle, f.circuits_built);
    f.rss_per_idle_circuit_second_half = plan::per_unit(
        f.rss_first_half,
        f.rss_idle,
        f.circuits_built.saturating_sub(f.circuits_first_half),
    );
    f.idle_cpu_share = idle_cpu_s / f.idle_s.max(1e-6);
    f.idle_cpu_share_ticks = (cpu_b - cpu_a) / f.idle_s.max(1e-6);
    let idle_circuits = f
        .circuits_built
        .saturating_sub(load.sum(|c| &c.failed) - f.circuits_failed_building);
    f.idle_cpu_share_per_1k = plan::share_per_1k(idle_cpu_s, f.idle_s, idle_circuits);
    f.idle_ctx_switches_per_s =
        ((cs_b.0 + cs_b.1).saturating_sub(cs_a.0 + cs_a.1)) as f64 / f.idle_s.max(1e-6);
    clock.say(&tag, &format!(
        "idle: RSS {} MiB ({:.0} B per circuit; {:.0} B each of the second half, after {} MiB with the first {}), {:.2}% of a CPU, {:.0} context switches/s, {}/{} idle cells arrived",
        f.rss_idle >> 20, f.rss_per_idle_circuit.unwrap_or(f64::NAN),
        f.rss_per_idle_circuit_second_half.unwrap_or(f64::NAN), f.rss_first_half >> 20, f.circuits_first_half,
        f.idle_cpu_share * 100.0,
        f.idle_ctx_switches_per_s, f.idle_cells.1, f.idle_cells.0
    ));

    // Bulk load on the active circuits.
    let mut cells = weft_cell_gauges(&target).map(|(pool, _)| WeftCells {
        pool_idle: pool,
        ..WeftCells::default()
    });
    f.active_circuits = bulk.iter().sum::<usize>() as u64;
    load.set_phase(MANY_ACTIVE);
    std::thread::sleep(Duration::from_secs_f64(p.warmup_s));
    load.set_phase(MANY_MEASURE);
    let (up_a, down_a) = (load.sum(|c| &c.up_cells), load.sum(|c| &c.down_cells));
    let (cpu_a, lcpu_a, t_a) = (process_cpu_s(pid), load.cpu_ns(), Instant::now());
    let rss = sample_rss_and(&target, p.active_s, Duration::from_millis(500), || {
        if let (Some(c), Some((pool, queued))) = (cells.as_mut(), weft_cell_gauges(&target)) {
            c.pool_active_max = c.pool_active_max.max(pool);
            c.queued_active_max = c.queued_active_max.max(queued);
            c.samples += 1;
        }
    });
    f.weft_cells = cells;
    f.active_s = t_a.elapsed().as_secs_f64();
    f.active_cells = (
        load.sum(|c| &c.up_cells) - up_a,
        load.sum(|c| &c.down_cells) - down_a,
    );
    f.active_bytes = (f.active_cells.0 + f.active_cells.1) * CELL_BYTES;
    f.active_cpu_s = process_cpu_s(pid) - cpu_a;
    f.active_load_busy = busy(&lcpu_a, &load.cpu_ns(), f.active_s);
    f.rss_active = rss.iter().copied().max().unwrap_or(0);
    f.rss_per_active_circuit = plan::per_unit(f.rss_idle, f.rss_active, f.active_circuits);
    f.active_mib_per_s = f.active_bytes as f64 / f.active_s.max(1e-6) / (1u64 << 20) as f64;
    f.cpu_s_per_gib = plan::cpu_s_per_gib(f.active_cpu_s, f.active_bytes);
    f.cpu_s_per_gib_less_idle = plan::cpu_s_per_gib(
        (f.active_cpu_s - f.idle_cpu_share_ticks * f.active_s).max(0.0),
        f.active_bytes,
    );
    if let Some(c) = f.weft_cells {
        clock.say(
            &tag,
            &format!(
            "cells: pool {} slots idle, at most {} under load ({} MiB at 544 B); at most {} queued",
            c.pool_idle, c.pool_active_max, (c.pool_active_max * 544) >> 20, c.queued_active_max
        ),
        );
    }
    f.corrupt_cells = load.sum(|c| &c.corrupt);
    f.circuits_lost_later = load.sum(|c| &c.failed) - f.circuits_failed_building;
    let reports = load.finish()?;
    let mut up = hdrhistogram::Histogram::<u64>::new_with_bounds(1_000, 100_000_000_000, 3)?;
    let mut down = up.clone();
    let (mut per_up, mut per_down) = (Vec::new(), Vec::new());
    for (thread, r) in reports.into_iter().enumerate() {
        up.add(&r.delay_up)?;
        down.add(&r.delay_down)?;
        per_up.extend(r.per_circuit.iter().map(|c| c.up));
        per_down.extend(r.per_circuit.iter().map(|c| c.down));
        f.bulk_circuits
            .extend(r.per_circuit.iter().map(|&c| (thread, c)));
        for e in r.errors {
            if f.errors.len() < 12 {
                f.errors.push(e);
            }
        }
    }
    f.delay_up_ms = Percentiles::from_hist(&up);
    f.delay_down_ms = Percentiles::from_hist(&down);
    f.fairness_up = plan::fairness(&per_up);
    f.fairness_down = plan::fairness(&per_down);
    up.add(&down)?;
    f.delay_ms = Percentiles::from_hist(&up);
    let was_alive = alive(pid);
    target.stop()?;
    f.log_warnings = log_warnings(&target.spec.dir);
    clock.say(&tag, &format!(
        "active: {:.1} MiB/s (up:down cells {}:{}), {:.2} CPU-s/GiB, RSS {} MiB, delay p50 {:.2} ms p99 {:.2} ms; {} circuits lost after building, {} log warnings",
        f.active_mib_per_s,
        f.active_cells.0,
        f.active_cells.1, f.cpu_s_per_gib.unwrap_or(f64::NAN), f.rss_active >> 20, f.delay_ms.p50,
        f.delay_ms.p99, f.circuits_lost_later, f.log_warnings.0
    ));
    if !was_alive {
        bail!(
            "{label} exited during the idle or active phase; log: {:?}",
            f.log_warnings.1
        );
    }
    Ok(f)
}
