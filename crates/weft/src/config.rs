//! The torrc-style configuration file: stock tor's syntax and meaning for the
//! options weft supports. Unknown options, malformed values and values weft
//! cannot honour yet are errors that name the line — never silently ignored.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use weft_relay::context::TorrcView;
use weft_relay::{DirAuthority, RelayConfig};

/// `WorkerSchedSlice` default: the scheduler time slice worker threads ask
/// for, in ms (see `weft_relay::sched_slice` and docs/perf.md).
pub const DEFAULT_WORKER_SCHED_SLICE_MS: u64 = 5;

/// A `Log` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A file (appended).
    File(PathBuf),
    /// The system logger (/dev/log).
    Syslog,
}

/// One `Log` line: which domains it takes at each severity, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSpec {
    /// Domains per severity (see [`crate::log_domains`]).
    pub masks: crate::log_domains::SeverityMasks,
    /// Where.
    pub target: LogTarget,
}

/// The parsed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// What the relay runtime needs.
    pub relay: RelayConfig,
    /// Log lines.
    pub logs: Vec<LogSpec>,
    /// PidFile.
    pub pid_file: Option<PathBuf>,
    /// What C Tor would warn about in this configuration (logged once
    /// logging is set up).
    pub warnings: Vec<String>,
    /// What it tells at notice level once logging is set up (how the
    /// published address was found).
    pub notices: Vec<String>,
    /// Why weft cannot start on this host although the torrc is valid (no
    /// address to publish: tor's --verify-config passes such a torrc).
    pub start_refusal: Option<String>,
}

/// A configuration error naming the line.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct ConfigError {
    file: String,
    line: usize,
    msg: String,
}

/// Map tor severities onto tracing levels (tor has one more: notice).
fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("expected 0 or 1, got '{v}'")),
    }
}

/// A byte quantity as tor reads it ([`crate::config_units::memunit`]).
fn parse_bytes(v: &str) -> Result<u64, String> {
    crate::config_units::memunit(v)
}

/// One MyFamily entry: `$HEX`, `HEX`, `$HEX~nick` or `$HEX=nick` become
/// `$HEX` (upper case); a nickname stays (true: it is one), as C Tor.
fn parse_family_entry(e: &str) -> Result<(String, bool), String> {
    let hexpart = e
        .trim_start_matches('$')
        .split(['~', '='])
        .next()
        .unwrap_or("");
    if hexpart.len() == 40 && hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok((format!("${}", hexpart.to_ascii_uppercase()), false));
    }
    if !e.starts_with('$')
        && (1..=19).contains(&e.len())
        && e.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Ok((e.to_string(), true));
    }
    Err(format!("Invalid nickname '{e}' in MyFamily line"))
}

/// Parse a `DirAuthority` line value. [tor manual: DirAuthority]
pub fn parse_dir_authority(v: &str) -> Result<DirAuthority, String> {
    let toks: Vec<&str> = v.split_whitespace().collect();
    let mut i = 0;
    let nickname = match toks.first() {
        Some(t) if !t.contains('=') && !t.contains(':') => {
            i = 1;
            t.to_string()
        }
        _ => String::new(),
    };
    let mut or_port = None;
    let mut v3ident = None;
    let mut addr = None;
    while i < toks.len() {
        let t = toks[i];
        i += 1;
        if let Some(p) = t.strip_prefix("orport=") {
            or_port = Some(p.parse::<u16>().map_err(|_| format!("bad orport '{p}'"))?);
        } else if let Some(h) = t.strip_prefix("v3ident=") {
            let mut id = [0u8; 20];
            hex::decode_to_slice(h, &mut id).map_err(|_| format!("bad v3ident '{h}'"))?;
            v3ident = Some(id);
        } else if t == "no-v2" || t == "v3" || t.starts_with("weight=") || t.starts_with("ipv6=") {
            // Flags that do not change what a relay does with the authority.
        } else if t == "bridge" || t == "hs" {
            return Err(format!("authority flag '{t}' is not supported"));
        } else if t.contains(':') {
            addr = Some(
                t.parse::<SocketAddr>()
                    .map_err(|_| format!("bad address '{t}'"))?,
            );
            break;
        } else {
            return Err(format!("unexpected '{t}'"));
        }
    }
    let dir_addr = addr.ok_or("missing address:dirport")?;
    let fp: String = toks[i..].concat();
    let mut fingerprint = [0u8; 20];
    hex::decode_to_slice(&fp, &mut fingerprint).map_err(|_| format!("bad fingerprint '{fp}'"))?;
    Ok(DirAuthority {
        nickname,
        or_port: or_port.ok_or("missing orport=")?,
        v3ident,
        dir_addr,
        fingerprint,
    })
}

fn parse_log(v: &str) -> Result<LogSpec, String> {
    let (masks, dest) = crate::log_domains::parse_severities(v)?;
    let toks: Vec<&str> = dest.split_whitespace().collect();
    let target = match toks.first().map(|t| t.to_ascii_lowercase()).as_deref() {
        Some("stdout") => LogTarget::Stdout,
        Some("stderr") => LogTarget::Stderr,
        Some("syslog") => LogTarget::Syslog,
        Some("file") => {
            let p = toks
                .get(1..)
                .filter(|r| !r.is_empty())
                .ok_or("missing file name")?
                .join(" ");
            LogTarget::File(PathBuf::from(p))
        }
        Some(other) => return Err(format!("log destination '{other}' is not supported")),
        None => LogTarget::Stdout,
    };
    if !matches!(target, LogTarget::File(_)) && toks.len() > 1 {
        return Err("trailing words".into());
    }
    Ok(LogSpec { masks, target })
}

/// A tor interval in milliseconds ([`crate::config_units::msec_interval`]).
fn parse_msec(v: &str) -> Result<u64, String> {
    crate::config_units::msec_interval(v)
}

/// `MetricsPort [address:]port [prometheus]` (C Tor's syntax); a bare
/// port listens on 127.0.0.1, port 0 turns it off.
fn parse_metrics_port(v: &str) -> Result<Option<SocketAddr>, String> {
    let mut toks = v.split_whitespace();
    let first = toks.next().ok_or("MetricsPort needs a port")?;
    match toks.next() {
        None | Some("prometheus") => {}
        Some(f) => {
            return Err(format!(
                "MetricsPort format '{f}' is not supported (only prometheus)"
            ))
        }
    }
    if toks.next().is_some() {
        return Err("MetricsPort: trailing words".into());
    }
    let addr = match first.parse::<u16>() {
        Ok(0) => return Ok(None),
        Ok(p) => SocketAddr::from(([127, 0, 0, 1], p)),
        Err(_) => first
            .parse::<SocketAddr>()
            .map_err(|_| format!("bad MetricsPort '{first}'"))?,
    };
    if addr.port() == 0 {
        return Ok(None);
    }
    Ok(Some(addr))
}

/// One `MetricsPortPolicy` line (a comma list of `accept`/`reject`
/// patterns, as C Tor's `parse_metrics_port_policy`): rules added to
/// `rules`; ports are ignored, with a warning, as C Tor does.
fn parse_metrics_policy(
    v: &str,
    rules: &mut Vec<weft_dir::exit_policy::Rule>,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    let (parsed, warns) = weft_dir::exit_policy::parse_policy(v)
        .map_err(|e| format!("bad MetricsPortPolicy entry '{}': {}", e.entry, e.reason))?;
    warnings.extend(warns);
    for mut r in parsed {
        if r.port_min > 1 || r.port_max != 65535 {
            warnings.push("Ignoring ports in MetricsPortPolicy option.".into());
            (r.port_min, r.port_max) = (1, 65535);
        }
        rules.push(r);
    }
    Ok(())
}

impl ConfigError {
    /// An error at `file`:`line` (0: the file as a whole).
    pub fn new(file: &str, line: usize, msg: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
}

/// Parse a configuration from one file's text (`%include` is not
/// followed here; [`crate::config_files::load`] does that).
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let lines = crate::config_files::split(text, &file.display().to_string())?;
    parse_lines(&lines, file)
}

/// Parse a configuration from its option lines; `file` is the torrc
/// (GETINFO config-file).
pub fn parse_lines(
    lines: &[crate::config_files::SourceLine],
    file: &Path,
) -> Result<Config, ConfigError> {
    let fname = file.display().to_string();
    let mut or_ports = crate::config_orport::OrPortLines::default();
    let mut nickname: Option<String> = None;
    let mut contact = None;
    let mut data_dir: Option<PathBuf> = None;
    let mut logs = Vec::new();
    let mut authorities = Vec::new();
    let mut testing = false;
    let mut assume_reachable = false;
    let mut assume_reachable_ipv6 = None;
    let mut threads: Option<usize> = None;
    let mut sched_slice_ms: u64 = DEFAULT_WORKER_SCHED_SLICE_MS;
    let mut pid_file = None;
    let mut rate: u64 = 1 << 30;
    let mut burst: u64 = 1 << 30;
    let (mut relay_rate, mut relay_burst) = (0u64, 0u64);
    let mut user = None;
    let mut outbound = weft_relay::outbound::OutboundBind::default();
    let mut family: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut extend_private: Option<bool> = None;
    let mut cross_worker = false;
    let mut metrics_port: Option<SocketAddr> = None;
    let mut metrics_policy: Option<Vec<weft_dir::exit_policy::Rule>> = None;
    let mut halflife: Option<f64> = None;
    let mut kist_interval: Option<u64> = None;
    let mut kist_factor = 1.0f64;
    let mut padding = crate::config_padding::PaddingOptions::default();
    let mut schedulers_kist = true;
    let mut refill_ms: u64 = 100;
    let mut migrate_every: Option<u64> = None;
    let mut warn_unreachable: Option<u64> = None;
    let mut place_on: Option<usize> = None;
    let mut limits = crate::config_limits::LimitOptions::default();
    let mut dir_cache = true;
    let mut stats = crate::config_stats::StatsConfig::default();
    // C Tor's HeartbeatPeriod default: 6 hours (0: none).
    let mut heartbeat: Option<u32> = Some(6 * 3600);
    // C Tor's ShutdownWaitLength default: 30 seconds.
    let mut shutdown_wait: u32 = 30;
    let mut family_ids: Vec<[u8; 32]> = Vec::new();
    let mut family_key_dir: Option<PathBuf> = None;
    let mut accounting = weft_relay::accounting::AccountingConfig {
        max: 0,
        rule: Default::default(),
        start: Default::default(),
    };
    let mut exit = crate::config_exit::ExitOptions::default();
    let mut control = crate::config_control::ControlOptions::default();
    let mut accepted = crate::config_accepted::AcceptedOptions::default();
    let mut view_lines = Vec::new();
    for sl in lines {
        let line = sl.line;
        let err = |msg: String| ConfigError {
            file: sl.file.clone(),
            line,
            msg,
        };
        let (key, val) = (sl.key.as_str(), sl.value.as_str());
        if val.is_empty() {
            return Err(err(format!("option {key} needs a value")));
        }
        let lower = key.to_ascii_lowercase();
        view_lines.push((
            crate::config_names::canonical(key)
                .unwrap_or(key)
                .to_string(),
            val.to_string(),
        ));
        if let Some(r) = control.take(&lower, val) {
            r.map_err(|e| err(format!("{key}: {e}")))?;
            continue;
        }
        if let Some(r) = accepted.take(&lower, val) {
            r.map_err(err)?;
            continue;
        }
        if let Some(r) = padding.take(&lower, val, parse_bool) {
            r.map_err(err)?;
            continue;
        }
        if let Some(r) = stats.take(&lower, val, parse_bool) {
            r.map_err(err)?;
            continue;
        }
        if let Some(r) = limits.take(&lower, val, parse_bytes) {
            r.map_err(|e| err(format!("{key}: {e}")))?;
            continue;
        }
        if let Some(r) = exit.take(&lower, val) {
            r.map_err(|e| err(format!("{key}: {e}")))?;
            continue;
        }
        match lower.as_str() {
            "orport" => or_ports.or_port(val).map_err(err)?,
            "address" => or_ports.address(val).map_err(err)?,
            "nickname" => {
                if val.is_empty()
                    || val.len() > 19
                    || !val.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    return Err(err(format!(
                        "Nickname '{val}' must be 1-19 letters and digits"
                    )));
                }
                nickname = Some(val.to_string());
            }
            "contactinfo" => contact = Some(val.to_string()),
            "datadirectory" => data_dir = Some(PathBuf::from(val)),
            "log" => logs.push(parse_log(val).map_err(err)?),
            "dirauthority" => authorities
                .push(parse_dir_authority(val).map_err(|m| err(format!("DirAuthority: {m}")))?),
            "testingtornetwork" => testing = parse_bool(val).map_err(err)?,
            "assumereachable" => assume_reachable = parse_bool(val).map_err(err)?,
            "assumereachableipv6" if val.eq_ignore_ascii_case("auto") => {
                assume_reachable_ipv6 = None
            }
            "assumereachableipv6" => assume_reachable_ipv6 = Some(parse_bool(val).map_err(err)?),
            "dircache" => dir_cache = parse_bool(val).map_err(err)?,
            "outboundbindaddress" | "outboundbindaddressor" | "outboundbindaddressexit" => {
                let ip: IpAddr = val
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .map_err(|_| err(format!("Unable to parse {key} '{val}'")))?;
                outbound.set(&lower, ip).map_err(err)?;
            }
            "familyid" => family_ids.push(
                weft_crypto::family_keys::parse_family_id(val)
                    .ok_or_else(|| err(format!("Invalid FamilyId {val}")))?,
            ),
            "familykeydirectory" => family_key_dir = Some(PathBuf::from(val)),
            "myfamily" => {
                for e in val.split([',', ' ']).filter(|e| !e.is_empty()) {
                    let (entry, nick) = parse_family_entry(e).map_err(err)?;
                    if nick {
                        warnings.push(format!("MyFamily entry '{e}' is a nickname: anyone can take a nickname; list $fingerprints"));
                    }
                    family.push(entry);
                }
            }
            "user" => {
                user = Some(weft_relay::privileges::lookup(val).map_err(err)?);
            }
            "shutdownwaitlength" => {
                shutdown_wait = crate::config_limits::interval(val)
                    .map_err(|e| err(format!("ShutdownWaitLength: {e}")))?
                    .unwrap_or(0)
            }
            "heartbeatperiod" => {
                heartbeat = crate::config_limits::interval(val)
                    .map_err(|e| err(format!("HeartbeatPeriod: {e}")))?
            }
            "connectionthreads" => {
                let n: usize = val
                    .parse()
                    .map_err(|_| err(format!("bad ConnectionThreads '{val}'")))?;
                if n > 1024 {
                    return Err(err("ConnectionThreads above 1024".into()));
                }
                threads = Some(n);
            }
            "workerschedslice" => {
                let ms = parse_msec(val).map_err(err)?;
                if ms > 100 {
                    return Err(err(format!(
                        "WorkerSchedSlice '{val}' above 100 msec (the kernel's maximum)"
                    )));
                }
                sched_slice_ms = ms;
            }
            "pidfile" => pid_file = Some(PathBuf::from(val)),
            "bandwidthrate" => rate = parse_bytes(val).map_err(err)?,
            "accountingmax" => accounting.max = parse_bytes(val).map_err(err)?,
            "accountingrule" => {
                accounting.rule = weft_relay::accounting::parse_rule(val).map_err(err)?
            }
            "accountingstart" => {
                accounting.start = weft_relay::accounting::parse_start(val).map_err(err)?
            }
            "bandwidthburst" => burst = parse_bytes(val).map_err(err)?,
            "relaybandwidthrate" => relay_rate = parse_bytes(val).map_err(err)?,
            "relaybandwidthburst" => relay_burst = parse_bytes(val).map_err(err)?,
            "extendallowprivateaddresses" => extend_private = Some(parse_bool(val).map_err(err)?),
            "testingcrossworkerextends" => cross_worker = parse_bool(val).map_err(err)?,
            "metricsport" => metrics_port = parse_metrics_port(val).map_err(err)?,
            "metricsportpolicy" => parse_metrics_policy(
                val,
                metrics_policy.get_or_insert_with(Vec::new),
                &mut warnings,
            )
            .map_err(err)?,
            "circuitpriorityhalflife" => {
                let v: f64 = val.parse().map_err(|_| {
                    err(format!(
                        "bad CircuitPriorityHalflife '{val}' (seconds; -1 = from the consensus)"
                    ))
                })?;
                // C Tor: negative means "use the consensus"; 0 turns EWMA off.
                halflife = (v >= 0.0).then_some(v);
            }
            "kistschedruninterval" => {
                let ms = parse_msec(val).map_err(err)?;
                if ms > 100 {
                    return Err(err("KISTSchedRunInterval above 100 msec".into()));
                }
                // C Tor: 0 means "use the consensus value".
                kist_interval = (ms > 0).then_some(ms);
            }
            "testingmigrateevery" => {
                let n: u64 = val
                    .parse()
                    .map_err(|_| err(format!("bad TestingMigrateEvery '{val}' (seconds)")))?;
                migrate_every = (n > 0).then_some(n);
            }
            "testingreachabilitywarnafter" => {
                warn_unreachable = Some(crate::config_units::interval(val).map_err(err)?);
            }
            "testingplaceonworker" => {
                place_on = Some(
                    val.parse()
                        .map_err(|_| err(format!("bad TestingPlaceOnWorker '{val}'")))?,
                );
            }
            "tokenbucketrefillinterval" => {
                refill_ms = parse_msec(val).map_err(err)?;
                if !(1..=1000).contains(&refill_ms) {
                    return Err(err(
                        "TokenBucketRefillInterval must be between 1 and 1000 msec".into(),
                    ));
                }
            }
            "kistsockbufsizefactor" => {
                kist_factor = val
                    .parse()
                    .ok()
                    .filter(|f: &f64| *f >= 0.0 && f.is_finite())
                    .ok_or_else(|| err(format!("bad KISTSockBufSizeFactor '{val}'")))?;
            }
            "schedulers" => {
                // The first scheduler in the list that weft has wins.
                let pick = val.split(',').map(str::trim).find(|x| {
                    matches!(
                        x.to_ascii_lowercase().as_str(),
                        "kist" | "kistlite" | "vanilla"
                    )
                });
                match pick.map(str::to_ascii_lowercase).as_deref() {
                    Some("kist") | Some("kistlite") => schedulers_kist = true,
                    Some("vanilla") => schedulers_kist = false,
                    _ => {
                        return Err(err(format!(
                            "Schedulers '{val}': none of KIST, KISTLite, Vanilla"
                        )))
                    }
                }
            }
            "runasdaemon" => {
                if parse_bool(val).map_err(err)? {
                    return Err(err(
                        "RunAsDaemon 1 is not supported; run weft under a service manager".into(),
                    ));
                }
            }
            _ => return Err(err(format!("unknown option '{key}'"))),
        }
    }
    let at_end = |msg: &str| ConfigError {
        file: fname.clone(),
        line: 0,
        msg: msg.to_string(),
    };
    let custom_authorities = !authorities.is_empty();
    // C finds its address again every minute (an IP change, a host
    // name that now resolves elsewhere): the same lines, asked again.
    let finder_lines = or_ports.clone();
    let address_finder = weft_relay::context::AddressFinder::new(move || {
        let p = finder_lines
            .clone()
            .finish(custom_authorities, &crate::find_address::SystemAddresses)
            .ok()
            .filter(|p| p.unresolved.is_none() && p.undiscovered.is_none())?;
        match p.advertised.ip() {
            std::net::IpAddr::V4(a) => Some((a, p.method.as_str())),
            std::net::IpAddr::V6(_) => None,
        }
    });
    let ports = or_ports
        .finish(custom_authorities, &crate::find_address::SystemAddresses)
        .map_err(|e| at_end(&e))?;
    warnings.extend(ports.warnings.iter().cloned());
    let start_refusal = ports.unresolved.clone();
    warnings.extend(
        start_refusal
            .iter()
            .map(|e| format!("{e} weft will not start on this host.")),
    );
    warnings.extend(ports.undiscovered.iter().map(|e| {
        format!("{e}. weft starts, asks the directory authorities (as tor does) and publishes nothing until it knows its address.")
    }));
    let signing_key_lifetime =
        std::time::Duration::from_secs(accepted.signing_key_lifetime.unwrap_or(30 * 86400));
    let keepalive_period = std::time::Duration::from_secs(accepted.keepalive_period.unwrap_or(300));
    warnings.extend(accepted.warnings);
    let notices = match ports.method {
        crate::find_address::Method::Configured => Vec::new(),
        m => vec![format!(
            "Address found: {} (METHOD={})",
            ports.advertised.ip(),
            m.as_str()
        )],
    };
    // Tor's compiled-in default is /var/lib/tor; weft's package keeps its
    // state in /var/lib/weft.
    let data_dir = data_dir.unwrap_or_else(|| PathBuf::from("/var/lib/weft"));
    let adv_ip = ports.advertised.ip();
    let (exit_policy, exit_warnings) = exit.finish(adv_ip).map_err(|e| at_end(&e))?;
    warnings.extend(exit_warnings);
    warnings.dedup();
    if metrics_port.is_some_and(|a| !a.ip().is_loopback()) && metrics_policy.is_none() {
        warnings.push("MetricsPort listens beyond loopback without a MetricsPortPolicy: every scrape needs the bearer token from metrics_auth_cookie".into());
    }
    family.sort();
    family.dedup();
    if !family_ids.is_empty() && family.is_empty() {
        warnings.push("FamilyId was configured, but MyFamily was not. FamilyId is good, but the Tor network still requires MyFamily while clients are migrating to use family keys instead (as C Tor)".into());
    }
    if let Some(h) = heartbeat.filter(|h| *h < 1800 && !testing) {
        warnings.push(format!(
            "HeartbeatPeriod {h} seconds is too short; raising to 30 minutes (as C Tor)"
        ));
        heartbeat = Some(1800);
    }
    let (control, control_warnings) = control.finish();
    warnings.extend(control_warnings);
    if control.cookie_auth && !view_lines.iter().any(|(k, _)| k == "CookieAuthentication") {
        // Turned on for a ControlPort without a method: GETCONF says so.
        view_lines.push(("CookieAuthentication".into(), "1".into()));
    }
    if (migrate_every.is_some() || place_on.is_some() || warn_unreachable.is_some()) && !testing {
        return Err(at_end("TestingMigrateEvery / TestingPlaceOnWorker / TestingReachabilityWarnAfter are for tests (they need TestingTorNetwork 1)"));
    }
    let stats = stats.finish(testing).map_err(|e| at_end(&e))?;
    if cross_worker && !testing {
        return Err(at_end(
            "TestingCrossWorkerExtends requires TestingTorNetwork 1",
        ));
    }
    if rate < 76_800 {
        return Err(at_end(
            "BandwidthRate must be at least 75 KBytes for a relay (C Tor's minimum)",
        ));
    }
    if burst < rate {
        return Err(at_end(
            "BandwidthBurst must be at least equal to BandwidthRate (as C Tor)",
        ));
    }
    // RelayBandwidthRate/Burst, as C Tor's relay_config.c: each defaults
    // to the other; they raise BandwidthRate/Burst when higher; and since
    // every byte weft moves is relayed, the buckets take the lower.
    if relay_rate > 0 && relay_burst == 0 {
        relay_burst = relay_rate;
    }
    if relay_burst > 0 && relay_rate == 0 {
        relay_rate = relay_burst;
    }
    if relay_rate > 0 && relay_rate < 76_800 {
        return Err(at_end(&format!(
            "RelayBandwidthRate is set to {relay_rate} bytes/second. For servers, it must be at least 76800."
        )));
    }
    if relay_rate > relay_burst {
        return Err(at_end(
            "RelayBandwidthBurst must be at least equal to RelayBandwidthRate.",
        ));
    }
    if relay_rate > 0 {
        // C raises BandwidthRate/Burst to these when lower and limits
        // relayed bytes to these: for weft, these are the limits.
        rate = relay_rate;
        burst = relay_burst;
    }
    if accounting.max > 0 && ports.advertised.port() < 1024 {
        warnings.push("You have set AccountingMax to use hibernation. You have also chosen a low ORPort: weft may not be able to bind it again when it wakes up (as C Tor)".into());
    }
    if let Some(u) = &user {
        weft_relay::privileges::check_data_dir(u, &data_dir).map_err(|e| at_end(&e))?;
    }
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    Ok(Config {
        relay: RelayConfig {
            nickname: nickname.unwrap_or_else(|| "Unnamed".into()),
            contact,
            or_listen: ports.listen,
            advertised: ports.advertised,
            address_finder: Some(address_finder),
            signing_key_lifetime,
            keepalive_period,
            ipv6_or_port: ports.ipv6.map(|p| (p.listen, p.advertised)),
            data_dir,
            authorities,
            testing_tor_network: testing,
            assume_reachable,
            assume_reachable_ipv6,
            reachability_warn_after: warn_unreachable
                .map(std::time::Duration::from_secs)
                .unwrap_or(weft_relay::context::REACHABILITY_WARN_AFTER),
            connection_threads: threads,
            worker_sched_slice: (sched_slice_ms > 0)
                .then(|| std::time::Duration::from_millis(sched_slice_ms)),
            extend_allow_private: extend_private.unwrap_or(testing),
            bandwidth_rate: rate,
            bandwidth_burst: burst,
            accounting: (accounting.max > 0).then_some(accounting),
            token_bucket_refill: std::time::Duration::from_millis(refill_ms),
            testing_migrate_every: migrate_every,
            testing_place_on_worker: place_on,
            testing_cross_worker: cross_worker,
            metrics_port,
            metrics_policy,
            alloc_probe: None,
            heap_trim: None,
            circuit_priority_halflife: halflife,
            kist_run_interval_ms: if schedulers_kist {
                kist_interval
            } else {
                Some(0)
            },
            kist_sock_buf_factor: kist_factor,
            circuit_padding: padding.circuit_padding,
            dos: limits.dos,
            max_mem_in_queues: limits.max_mem_in_queues,
            max_advertised_bandwidth: limits.max_advertised_bandwidth,
            conn_limit: limits.conn_limit,
            exit_policy,
            dns_resolv_conf: exit.resolv_conf.clone(),
            dns_randomize_case: exit.randomize_case.unwrap_or(true),
            dns_detect_hijacking: exit.detect_hijacking.unwrap_or(true),
            dns_test_addresses: exit.test_addresses.clone().unwrap_or_else(|| {
                weft_relay::dns_honesty::DEFAULT_TEST_ADDRESSES
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }),
            dir_cache,
            stats,
            control,
            user,
            family,
            family_ids,
            family_key_dir,
            outbound,
            heartbeat_period: heartbeat.map(|h| std::time::Duration::from_secs(h.into())),
            shutdown_wait: std::time::Duration::from_secs(shutdown_wait.into()),
            torrc: TorrcView {
                path: std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()),
                lines: view_lines,
                options: crate::config_names::OPTIONS,
            },
        },
        logs,
        pid_file,
        warnings,
        notices,
        start_refusal,
    })
}

#[cfg(test)]
mod tests;
