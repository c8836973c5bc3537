//! The relay under test: stock tor or weft, started the same way for both
//! (a relay on a loopback ORPort, no directory authorities reachable, no
//! descriptor published, extends to private addresses allowed so it can
//! reach the sinks), pinned with `taskset` to the target CPUs and optionally
//! capped by a cgroup CPU quota. Also reads its identity (fingerprints, ntor
//! key) and samples its CPU time per thread and memory from /proc.

use std::fs;
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use serde::Serialize;
use weft_proto::origin::HopTarget;

/// Which relay to measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum TargetKind {
    /// Stock C tor from Debian.
    Tor {
        /// Extra torrc lines (e.g. "CircuitPriorityHalflife 0").
        options: Vec<String>,
        /// Label override.
        label: Option<String>,
    },
    /// weft with `ConnectionThreads` and an allocator (`WEFT_ALLOCATOR`).
    Weft {
        /// ConnectionThreads.
        threads: usize,
        /// system, mimalloc or jemalloc.
        allocator: String,
        /// Extra torrc lines.
        options: Vec<String>,
        /// Label override.
        label: Option<String>,
    },
}

impl TargetKind {
    /// A short label: `tor`, `weft-1`, `weft-1-mimalloc`, or the override.
    pub fn label(&self) -> String {
        match self {
            TargetKind::Tor { label: Some(l), .. } | TargetKind::Weft { label: Some(l), .. } => {
                l.clone()
            }
            TargetKind::Tor { .. } => "tor".into(),
            TargetKind::Weft {
                threads, allocator, ..
            } if allocator == "system" => format!("weft-{threads}"),
            TargetKind::Weft {
                threads, allocator, ..
            } => format!("weft-{threads}-{allocator}"),
        }
    }

    /// Stock tor with no extra options.
    pub fn tor() -> Self {
        TargetKind::Tor {
            options: Vec::new(),
            label: None,
        }
    }

    /// weft with `threads` workers and the system allocator.
    pub fn weft(threads: usize) -> Self {
        TargetKind::Weft {
            threads,
            allocator: "system".into(),
            options: Vec::new(),
            label: None,
        }
    }

    /// The same with extra torrc lines for weft (stock tor is unchanged).
    pub fn with_weft_options(mut self, extra: &[String]) -> Self {
        if let TargetKind::Weft { options, .. } = &mut self {
            options.extend_from_slice(extra);
        }
        self
    }

    /// Extra torrc lines.
    pub fn options(&self) -> &[String] {
        match self {
            TargetKind::Tor { options, .. } | TargetKind::Weft { options, .. } => options,
        }
    }
}

/// How to start the target.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    /// What.
    pub kind: TargetKind,
    /// The weft binary.
    pub weft_bin: PathBuf,
    /// The tor binary.
    pub tor_bin: PathBuf,
    /// Working directory (wiped).
    pub dir: PathBuf,
    /// ORPort on 127.0.0.1.
    pub port: u16,
    /// `taskset -c` list, e.g. "0" (empty: no pinning).
    pub cpus: String,
    /// CPU quota in CPUs (e.g. 0.5), applied with a cgroup.
    pub cpu_quota: Option<f64>,
    /// MetricsPort for weft targets.
    pub metrics_port: u16,
}

/// A running target.
pub struct Target {
    /// How it was started.
    pub spec: TargetSpec,
    child: Child,
    /// Its PID.
    pub pid: u32,
    /// Where clients reach it and who it is.
    pub hop: HopTarget,
    cgroup: Option<PathBuf>,
    /// The command line, for the report.
    pub command: String,
    /// weft's MetricsPort (weft targets).
    pub metrics_port: Option<u16>,
    /// Its bearer token.
    pub metrics_token: String,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn torrc(spec: &TargetSpec) -> String {
    let d = spec.dir.display();
    let common = format!(
        "ORPort 127.0.0.1:{port}\nAddress 127.0.0.1\nDataDirectory {d}/data\nLog notice file {d}/notice.log\nExitRelay 0\nExitPolicy reject *:*\nAssumeReachable 1\nExtendAllowPrivateAddresses 1\n{rate}",
        port = spec.port,
        // The same generous limit for both unless the run sets its own.
        rate = if spec.kind.options().iter().any(|o| o.starts_with("BandwidthRate")) {
            ""
        } else {
            "BandwidthRate 2000 MBytes\nBandwidthBurst 2000 MBytes\n"
        }
    );
    let extra: String = spec
        .kind
        .options()
        .iter()
        .map(|o| format!("{o}\n"))
        .collect();
    let base = match &spec.kind {
        TargetKind::Tor { .. } => format!(
            "{common}Nickname torBench\nContactInfo bench@weft.invalid\nSocksPort 0\nPublishServerDescriptor 0\n\
             # An authority that does not exist: no traffic to the public network.\n\
             DirAuthority fake orport=1 no-v2 v3ident=0000000000000000000000000000000000000001 127.0.0.1:1 0000000000000000000000000000000000000002\n"
        ),
        TargetKind::Weft { threads, .. } => format!(
            "{common}Nickname weftBench\nContactInfo bench@weft.invalid\nConnectionThreads {threads}\nMetricsPort 127.0.0.1:{}\n",
            spec.metrics_port
        ),
    };
    format!("{base}{extra}")
}

/// Parse a C Tor `secret_onion_key_ntor` file: 32-byte tag header, secret,
/// public.
pub(crate) fn tor_ntor_public(path: &Path) -> Result<[u8; 32]> {
    let b = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if b.len() != 96 || !b.starts_with(b"== c25519v1") {
        bail!("{}: not a C Tor curve25519 key file", path.display());
    }
    Ok(b[64..96].try_into()?)
}

pub(crate) fn read_fp(data: &Path) -> Result<([u8; 20], [u8; 32])> {
    let fp = fs::read_to_string(data.join("fingerprint"))?;
    let hexfp = fp
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("bad fingerprint file"))?;
    let mut rsa = [0u8; 20];
    hex::decode_to_slice(hexfp, &mut rsa)?;
    let ed = fs::read_to_string(data.join("fingerprint-ed25519"))?;
    let b64 = ed
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("bad fingerprint-ed25519 file"))?;
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(b64.trim_end_matches('='))
        .context("fingerprint-ed25519")?;
    Ok((
        rsa,
        raw.try_into().map_err(|_| anyhow!("ed25519 id length"))?,
    ))
}

/// Where the cgroup CPU controller is (v2 unified, or v1 `cpu`).
fn cgroup_create(name: &str, quota: f64) -> Result<PathBuf> {
    let period: u64 = 100_000;
    let q = ((quota * period as f64) as u64).max(1000);
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
    if v2.exists() && fs::read_to_string(v2)?.contains("cpu") {
        let root = Path::new("/sys/fs/cgroup");
        let _ = fs::write(root.join("cgroup.subtree_control"), "+cpu");
        let g = root.join(name);
        fs::create_dir_all(&g)?;
        fs::write(g.join("cpu.max"), format!("{q} {period}")).context("cpu.max")?;
        return Ok(g);
    }
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        let g = v1.join(name);
        fs::create_dir_all(&g)?;
        fs::write(g.join("cpu.cfs_period_us"), period.to_string())?;
        fs::write(g.join("cpu.cfs_quota_us"), q.to_string()).context("cpu.cfs_quota_us")?;
        return Ok(g);
    }
    bail!("no writable cgroup CPU controller (v2 cpu.max or v1 cpu.cfs_quota_us) for the CPU cap")
}

/// A CPU cap on a running process (a relay of a test network) for as long
/// as this lives: the process moves into a cgroup of its own and back to
/// the root when dropped.
pub struct CpuCap {
    group: PathBuf,
    pid: u32,
}

impl CpuCap {
    /// Cap process `pid` at `quota` CPUs.
    pub fn apply(pid: u32, label: &str, quota: f64) -> Result<CpuCap> {
        let group = cgroup_create(
            &format!("weft-bench-{}-{label}-cap", std::process::id()),
            quota,
        )?;
        fs::write(group.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", group.display()))?;
        Ok(CpuCap { group, pid })
    }
}

/// The cgroup's throttling counters (`cpu.stat`, cgroup v2; v1's
/// `cpu.stat` has the same periods under other names).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ThrottleStat {
    /// Enforcement periods (100 ms each) in which the group ran.
    pub periods: u64,
    /// Periods in which the group used its whole quota and was stopped.
    pub throttled_periods: u64,
    /// Time the group's threads spent stopped, seconds.
    pub throttled_s: f64,
}

impl ThrottleStat {
    /// Parse a `cpu.stat` file (v2 names, or v1's `nr_periods`,
    /// `nr_throttled`, `throttled_time` in ns).
    pub fn parse(text: &str) -> ThrottleStat {
        let mut t = ThrottleStat::default();
        for line in text.lines() {
            let mut w = line.split_whitespace();
            let (Some(k), Some(v)) = (w.next(), w.next().and_then(|v| v.parse::<u64>().ok()))
            else {
                continue;
            };
            match k {
                "nr_periods" => t.periods = v,
                "nr_throttled" => t.throttled_periods = v,
                "throttled_usec" => t.throttled_s = v as f64 / 1e6,
                "throttled_time" => t.throttled_s = v as f64 / 1e9,
                _ => {}
            }
        }
        t
    }
}

impl CpuCap {
    /// The group's throttling counters so far (zero if unreadable).
    pub fn stat(&self) -> ThrottleStat {
        ThrottleStat::parse(&fs::read_to_string(self.group.join("cpu.stat")).unwrap_or_default())
    }
}

/// On-CPU time of process `pid`'s live threads so far, from
/// /proc/<pid>/task/*/schedstat (nanoseconds, unlike the 10 ms ticks of
/// utime + stime: an idle window's CPU is a few ticks), s. None if the
/// kernel keeps no schedstat.
pub fn tasks_runtime_s(pid: u32) -> Option<f64> {
    let rd = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns = 0u64;
    let mut any = false;
    for e in rd.flatten() {
        let Ok(s) = fs::read_to_string(e.path().join("schedstat")) else {
            continue;
        };
        if let Some(v) = s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            ns += v;
            any = true;
        }
    }
    any.then_some(ns as f64 / 1e9)
}

/// Context switches of every thread of process `pid` so far (voluntary:
/// the thread slept; involuntary: it was preempted or throttled).
pub fn context_switches(pid: u32) -> (u64, u64) {
    let mut sum = (0, 0);
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return sum;
    };
    for e in rd.flatten() {
        let s = fs::read_to_string(e.path().join("status")).unwrap_or_default();
        for l in s.lines() {
            let n = |p: &str| l.strip_prefix(p).and_then(|v| v.trim().parse::<u64>().ok());
            if let Some(v) = n("voluntary_ctxt_switches:") {
                sum.0 += v;
            } else if let Some(v) = n("nonvoluntary_ctxt_switches:") {
                sum.1 += v;
            }
        }
    }
    sum
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let root = self.group.parent().unwrap_or(Path::new("/sys/fs/cgroup"));
        let _ = fs::write(root.join("cgroup.procs"), self.pid.to_string());
        let _ = fs::remove_dir(&self.group);
    }
}

impl Target {
    /// Start the target and wait (bounded) until its ORPort accepts
    /// connections and its keys are on disk.
    pub fn start(spec: TargetSpec) -> Result<Target> {
        if spec.dir.exists() {
            fs::remove_dir_all(&spec.dir)
                .with_context(|| format!("wiping {}", spec.dir.display()))?;
        }
        fs::create_dir_all(&spec.dir)?;
        let rc = spec.dir.join("torrc");
        fs::write(&rc, torrc(&spec))?;
        let (bin, allocator) = match &spec.kind {
            TargetKind::Tor { .. } => (spec.tor_bin.clone(), None),
            TargetKind::Weft { allocator, .. } => (spec.weft_bin.clone(), Some(allocator.clone())),
        };
        let mut cmd = if spec.cpus.is_empty() {
            Command::new(&bin)
        } else {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(&spec.cpus).arg(&bin);
            c
        };
        cmd.arg("-f").arg(&rc);
        if let Some(a) = &allocator {
            cmd.env("WEFT_ALLOCATOR", a);
        }
        let out = fs::File::create(spec.dir.join("stdout.log"))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let command = format!(
            "{}{} {} -f {}",
            allocator
                .as_ref()
                .map(|a| format!("WEFT_ALLOCATOR={a} "))
                .unwrap_or_default(),
            if spec.cpus.is_empty() {
                String::new()
            } else {
                format!("taskset -c {}", spec.cpus)
            },
            bin.display(),
            rc.display()
        );
        if !bin.is_file() {
            bail!(
                "{} does not exist (build it first: cargo build --release)",
                bin.display()
            );
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id();
        let mut t = Target {
            hop: HopTarget {
                rsa_id: [0; 20],
                ed_id: None,
                ntor_key: [0; 32],
                addr: (Ipv4Addr::LOCALHOST, spec.port).into(),
            },
            spec,
            child,
            pid,
            cgroup: None,
            command,
            metrics_port: None,
            metrics_token: String::new(),
        };
        if let Some(q) = t.spec.cpu_quota {
            let g = cgroup_create(
                &format!("weft-bench-{}-{}", std::process::id(), t.spec.kind.label()),
                q,
            )?;
            fs::write(g.join("cgroup.procs"), pid.to_string())
                .context("moving the target into its cgroup")?;
            t.cgroup = Some(g);
        }
        let data = t.spec.dir.join("data");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = t.child.try_wait()? {
                bail!(
                    "{} exited during start-up ({st}):\n{}",
                    t.spec.kind.label(),
                    fs::read_to_string(t.spec.dir.join("stdout.log")).unwrap_or_default()
                );
            }
            let listening =
                TcpStream::connect_timeout(&t.hop.addr, Duration::from_millis(200)).is_ok();
            if listening {
                if let Ok((rsa, ed)) = read_fp(&data) {
                    let ntor = match t.spec.kind {
                        TargetKind::Tor { .. } => {
                            tor_ntor_public(&data.join("keys/secret_onion_key_ntor"))
                        }
                        TargetKind::Weft { .. } => {
                            weft_crypto::keys::read_ntor_public(&data).map_err(Into::into)
                        }
                    };
                    // weft writes its MetricsPort token and binds the port
                    // after its ORPort: ready once a scrape with the token
                    // succeeds (reading the token earlier gave a run with no
                    // relay metrics now and then).
                    let metrics_ready = match t.spec.kind {
                        TargetKind::Tor { .. } => true,
                        TargetKind::Weft { .. } => {
                            t.metrics_token = fs::read_to_string(data.join("metrics_auth_cookie"))
                                .unwrap_or_default()
                                .trim()
                                .to_string();
                            t.metrics_port = Some(t.spec.metrics_port);
                            !t.metrics_token.is_empty()
                                && crate::metrics::scrape(t.spec.metrics_port, &t.metrics_token)
                                    .is_ok()
                        }
                    };
                    if let (Ok(ntor), true) = (ntor, metrics_ready) {
                        t.hop.rsa_id = rsa;
                        t.hop.ed_id = Some(ed);
                        t.hop.ntor_key = ntor;
                        return Ok(t);
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not come up within 60 s (ORPort, keys and, for weft, a MetricsPort scrape)",
                    t.spec.kind.label()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// CPU time (user + system) per thread, from /proc/<pid>/task/*/stat.
    pub fn thread_cpu(&self) -> Vec<ThreadCpu> {
        thread_cpu(self.pid)
    }

    /// Resident memory in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let s = fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// SIGTERM, wait up to 10 s, SIGKILL; remove the cgroup.
    pub fn stop(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.child.try_wait()?.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.child.try_wait()?.is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        if let Some(g) = self.cgroup.take() {
            let _ = fs::remove_dir(&g);
        }
        Ok(())
    }

    /// The notice log.
    pub fn log_path(&self) -> PathBuf {
        self.spec.dir.join("notice.log")
    }
}

/// CPU time of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadCpu {
    /// Thread id.
    pub tid: u32,
    /// comm name.
    pub name: String,
    /// user + system, seconds.
    pub cpu_s: f64,
    /// The process's main thread.
    pub main: bool,
}

/// Per-thread CPU of process `pid`.
pub fn thread_cpu(pid: u32) -> Vec<ThreadCpu> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the ")" of comm: state is field 3; utime 14, stime 15.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let (Some(u), Some(s)) = (f.get(11), f.get(12)) else {
            continue;
        };
        let ticks = u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0);
        let name = fs::read_to_string(e.path().join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        out.push(ThreadCpu {
            tid,
            name,
            cpu_s: ticks / hz,
            main: tid == pid,
        });
    }
    out.sort_by_key(|t| t.tid);
    out
}

/// Differences of two per-thread samples (threads that appeared count from 0).
pub fn cpu_delta(before: &[ThreadCpu], after: &[ThreadCpu]) -> Vec<ThreadCpu> {
    after
        .iter()
        .map(|a| {
            let b = before
                .iter()
                .find(|b| b.tid == a.tid)
                .map_or(0.0, |b| b.cpu_s);
            ThreadCpu {
                cpu_s: (a.cpu_s - b).max(0.0),
                ..a.clone()
            }
        })
        .collect()
}
