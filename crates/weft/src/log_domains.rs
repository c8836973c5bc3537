//! Tor's log severities and domains: the `[domain,~domain]min-max` part of
//! a `Log` line, parsed as C Tor parses it (`parse_log_severity_config`),
//! and the domain each of weft's log call sites belongs to (by its module,
//! or by an explicit `target:` naming a domain). Sans-IO; the sinks that
//! use it are in [`crate::log_sinks`].

/// Tor's log domains, in C Tor's order (bit `i` of a mask is `DOMAINS[i]`).
pub const DOMAINS: [&str; 30] = [
    "general",
    "crypto",
    "net",
    "config",
    "fs",
    "protocol",
    "mm",
    "http",
    "app",
    "control",
    "circ",
    "rend",
    "bug",
    "dir",
    "dirserv",
    "or",
    "edge",
    "acct",
    "hist",
    "handshake",
    "heartbeat",
    "channel",
    "sched",
    "guard",
    "consdiff",
    "dos",
    "process",
    "pt",
    "btrack",
    "mesg",
];

/// Every domain.
pub const ALL_DOMAINS: u64 = (1 << DOMAINS.len()) - 1;

/// Tor's severities, most severe first: index 0 is err, 4 is debug.
pub const SEVERITIES: [&str; 5] = ["err", "warn", "notice", "info", "debug"];

/// Which domains a log takes at each severity (indexed as [`SEVERITIES`]).
pub type SeverityMasks = [u64; 5];

/// The mask of one domain, by name (any case).
pub fn domain_bit(name: &str) -> Option<u64> {
    DOMAINS
        .iter()
        .position(|d| d.eq_ignore_ascii_case(name))
        .map(|i| 1u64 << i)
}

/// The index in [`SEVERITIES`] of a severity name (any case).
pub fn severity_index(name: &str) -> Option<usize> {
    SEVERITIES.iter().position(|s| s.eq_ignore_ascii_case(name))
}

/// The [`SEVERITIES`] index of a tracing level, as weft maps tor's
/// severities (notice is tracing's INFO, info is DEBUG, debug is TRACE).
pub fn level_index(level: &tracing::Level) -> usize {
    match *level {
        tracing::Level::ERROR => 0,
        tracing::Level::WARN => 1,
        tracing::Level::INFO => 2,
        tracing::Level::DEBUG => 3,
        tracing::Level::TRACE => 4,
    }
}

/// Parse the severity part of a `Log` value (everything before the
/// destination): one or more `[domains]min[-max]` ranges, at most one of
/// them without domains. Returns the masks and the rest (the destination).
pub fn parse_severities(value: &str) -> Result<(SeverityMasks, &str), String> {
    let mut masks = [0u64; 5];
    let mut rest = value.trim_start();
    let mut unqualified = 0;
    let mut got_any = false;
    while !rest.is_empty() {
        let mut domains = ALL_DOMAINS;
        if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').ok_or("a '[' without its ']'")?;
            let (mut pos, mut neg) = (0u64, 0u64);
            for d in after[..close].split(',').map(str::trim) {
                if d == "*" {
                    pos = ALL_DOMAINS;
                } else if let Some(n) = d.strip_prefix('~') {
                    neg |= domain_bit(n).ok_or(format!("no such logging domain as '{n}'"))?;
                } else {
                    pos |= domain_bit(d).ok_or(format!("no such logging domain as '{d}'"))?;
                }
            }
            domains = if pos == 0 && neg != 0 {
                ALL_DOMAINS & !neg
            } else {
                pos & !neg
            };
            rest = after[close + 1..].trim_start();
        } else {
            unqualified += 1;
        }
        if ["file", "stderr", "stdout", "syslog"]
            .iter()
            .any(|d| starts_with_ignore_case(rest, d))
        {
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        if unqualified > 1 {
            return Err(
                match severity_index(word.split('-').next().unwrap_or(word)) {
                    Some(_) => "more than one severity without [domains]".into(),
                    None => format!("log destination '{word}' is not supported"),
                },
            );
        }
        let (lo, hi) = word.split_once('-').unwrap_or((word, "err"));
        let lo_i = severity_index(lo).ok_or(format!("bad severity '{lo}'"))?;
        let hi_i = severity_index(hi).ok_or(format!("bad severity '{hi}'"))?;
        for m in masks.iter_mut().take(lo_i + 1).skip(hi_i) {
            *m |= domains;
        }
        got_any = true;
        rest = rest[end..].trim_start();
    }
    if !got_any {
        return Err("missing severity".into());
    }
    Ok((masks, rest))
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The domain a log call site belongs to, from its tracing target: a
/// target that is a domain's name (`info!(target: "heartbeat", …)`) is that
/// domain; otherwise the module path decides (the first rule whose prefix
/// matches); anything else is `general`.
pub fn domain_of(target: &str) -> u64 {
    if let Some(b) = domain_bit(target) {
        return b;
    }
    let module = target
        .strip_prefix("weft_relay::")
        .or_else(|| target.strip_prefix("weft::"))
        .unwrap_or(target);
    for (prefix, domain) in MODULE_DOMAINS {
        if module.starts_with(prefix) {
            return domain_bit(domain).unwrap_or(1);
        }
    }
    1
}

/// Module path (after `weft_relay::` or `weft::`) → tor domain, as C Tor
/// files the same work.
const MODULE_DOMAINS: &[(&str, &str)] = &[
    ("weft_crypto", "crypto"),
    ("weft_proto", "protocol"),
    ("weft_dir", "dir"),
    ("config", "config"),
    ("cli", "config"),
    ("context", "config"),
    ("privileges", "config"),
    ("alloc", "mm"),
    ("oom", "mm"),
    ("pool", "mm"),
    ("control::", "control"),
    ("controller::control", "control"),
    ("controller::signals", "control"),
    ("controller::directory", "dir"),
    ("controller::dir_cache", "dirserv"),
    ("controller::onion", "rend"),
    ("controller::conflux", "circ"),
    ("controller::limits", "dos"),
    ("dos", "dos"),
    ("worker::limits", "dos"),
    ("tls", "handshake"),
    ("link_io", "or"),
    ("worker::conn", "or"),
    ("worker::io", "net"),
    ("outbound", "net"),
    ("bucket", "net"),
    ("worker::streams", "edge"),
    ("worker::stream", "edge"),
    ("worker::dir_streams", "dirserv"),
    ("resolver", "edge"),
    ("worker::extend", "circ"),
    ("worker::half", "circ"),
    ("worker::onion", "rend"),
    ("worker::origin", "circ"),
    ("worker::conflux", "circ"),
    ("worker::dispatch", "protocol"),
    ("worker::handoff", "channel"),
    ("worker::inbox", "channel"),
    ("worker::migrate", "channel"),
    ("ring", "channel"),
    ("kist", "sched"),
    ("ewma", "sched"),
    ("sched_slice", "sched"),
    ("worker::sched", "sched"),
    ("bwhist", "hist"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn bit(d: &str) -> u64 {
        domain_bit(d).unwrap()
    }

    #[test]
    fn severities_as_c_tor_reads_them() {
        let (m, rest) = parse_severities("notice stdout").unwrap();
        assert_eq!(m, [ALL_DOMAINS, ALL_DOMAINS, ALL_DOMAINS, 0, 0]);
        assert_eq!(rest, "stdout");
        let (m, rest) = parse_severities("info-warn file /var/log/x").unwrap();
        assert_eq!(m, [0, ALL_DOMAINS, ALL_DOMAINS, ALL_DOMAINS, 0]);
        assert_eq!(rest, "file /var/log/x");
        // The manual's example.
        let (m, _) = parse_severities("[handshake]debug [~net,~mm]info notice stdout").unwrap();
        let not_net_mm = ALL_DOMAINS & !bit("net") & !bit("mm");
        assert_eq!(m[4], bit("handshake"));
        assert_eq!(m[3], bit("handshake") | not_net_mm);
        assert_eq!(m[2], ALL_DOMAINS);
        assert_eq!(m[0], ALL_DOMAINS);
        let (m, _) = parse_severities("[*]warn [circ,EDGE]info stderr").unwrap();
        assert_eq!(m[1], ALL_DOMAINS);
        assert_eq!(m[3], bit("circ") | bit("edge"));
        assert_eq!(m[2], bit("circ") | bit("edge"));
        // Domains and a severity with no destination: stdout (the caller's default).
        assert_eq!(parse_severities("[dos]notice").unwrap().1, "");
    }

    #[test]
    fn bad_severities_are_refused() {
        for bad in [
            "",
            "stdout",
            "[nosuch]notice stdout",
            "[net notice stdout",
            "notice info stdout",
            "blah stdout",
            "notice-blah stdout",
            "[net]loud stdout",
        ] {
            assert!(parse_severities(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn call_sites_fall_in_tor_domains() {
        assert_eq!(domain_of("heartbeat"), bit("heartbeat"));
        assert_eq!(domain_of("weft_relay::worker::extend"), bit("circ"));
        assert_eq!(domain_of("weft_relay::worker::stream_io"), bit("edge"));
        assert_eq!(
            domain_of("weft_relay::controller::control_port"),
            bit("control")
        );
        assert_eq!(domain_of("weft_relay::controller::directory"), bit("dir"));
        assert_eq!(domain_of("weft_relay::controller"), bit("general"));
        assert_eq!(domain_of("weft::config_files"), bit("config"));
        assert_eq!(domain_of("weft_crypto::keys"), bit("crypto"));
        assert_eq!(domain_of("tokio::runtime"), bit("general"));
        assert_eq!(DOMAINS.len(), 30);
        assert!(MODULE_DOMAINS.iter().all(|(_, d)| domain_bit(d).is_some()));
    }
}
