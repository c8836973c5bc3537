//! Reading the exit's name-server configuration as C Tor's
//! `configure_nameservers()` does: which outcomes make the exit withdraw
//! (C's `has_dns_init_failed()`), which fall back to a local name server,
//! and when a reload reads the file again. No resolver is built here; the
//! resolver thread (`resolver/thread.rs`) builds one from what this returns.
//!
//! As C 0.4.9 (`dns.c`, with libevent's `evdns_base_resolv_conf_parse`):
//! - a file that cannot be stat()ed (missing) or is empty: a warning, and
//!   the name server at 127.0.0.1 — not a failure;
//! - a file that cannot be read (a directory, no permission, over 65535
//!   bytes, libevent's limit): a failure — the exit says `reject *:*`
//!   until a reload or the retry every ten minutes reads a usable file;
//! - a file without a usable `nameserver` line: a warning, and 127.0.0.1;
//! - on a reload, the same file with the same mtime is not read again
//!   ("No change"), unless the last attempt failed or the read is forced.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hickory_resolver::config::{ResolverConfig, ResolverOpts};
use tracing::{info, warn};

/// libevent's limit on a resolv.conf (`evdns_base_resolv_conf_parse`).
pub const MAX_RESOLV_CONF: u64 = 65535;

/// C's `RETRY_DNS_INTERVAL`: how often a relay whose name servers could
/// not be configured tries again.
pub const RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// The file a configuration was read from, and its mtime then (C's
/// `resolv_conf_fname` and `resolv_conf_mtime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadStamp {
    path: PathBuf,
    mtime: Option<SystemTime>,
}

/// What reading the configuration gave.
#[derive(Debug)]
pub enum ConfOutcome {
    /// The file did not change since `last` (C: "No change to '%s'").
    Unchanged,
    /// Name servers to use, and the stamp to compare later reads with
    /// (none when the file was missing: C keeps no name then either).
    Servers(Box<(ResolverConfig, ResolverOpts)>, Option<ReadStamp>),
    /// The configuration cannot be used: C's `nameserver_config_failed`.
    Failed(String),
}

/// Read `path` as C's `configure_nameservers(force)`, given the stamp of
/// the last successful read.
pub fn read(path: &Path, last: Option<&ReadStamp>, force: bool) -> ConfOutcome {
    let meta = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) => {
            warn!(
                "Unable to stat resolver configuration in '{}': {e}",
                path.display()
            );
            None
        }
    };
    let stamp = meta.as_ref().map(|m| ReadStamp {
        path: path.to_path_buf(),
        mtime: m.modified().ok(),
    });
    if !force && stamp.is_some() && stamp.as_ref() == last {
        info!("No change to '{}'", path.display());
        return ConfOutcome::Unchanged;
    }
    let data = match &meta {
        // C falls back when stat() says size 0, a regular file or not (a
        // FIFO or a device says 0 too).
        Some(m) if m.len() == 0 => None,
        None => None,
        Some(m) if m.len() > MAX_RESOLV_CONF => {
            return failed(path, &format!("larger than {MAX_RESOLV_CONF} bytes"))
        }
        Some(_) => match read_bounded(path) {
            Ok(d) if d.len() as u64 > MAX_RESOLV_CONF => {
                return failed(path, &format!("larger than {MAX_RESOLV_CONF} bytes"))
            }
            Ok(d) => Some(d),
            Err(e) => return failed(path, &e.to_string()),
        },
    };
    let Some(mut data) = data else {
        warn!(
            "Could not read your DNS config from '{}' - please investigate your DNS configuration. This is possibly a problem. Meanwhile, falling back to local DNS at 127.0.0.1.",
            path.display()
        );
        return servers(b"nameserver 127.0.0.1\n".to_vec(), None);
    };
    if hickory_resolver::system_conf::parse_resolv_conf(&data).is_err() {
        // libevent's "no name servers" (6): it falls back to 127.0.0.1.
        warn!("Unable to find any nameservers in '{}'.", path.display());
        data.extend_from_slice(b"\nnameserver 127.0.0.1\n");
    }
    info!("Parsing resolver configuration in '{}'", path.display());
    servers(data, stamp)
}

/// Read at most one byte over [`MAX_RESOLV_CONF`] (the file can grow, or
/// not be a regular file, between the stat() and the read).
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_RESOLV_CONF + 1)
        .read_to_end(&mut data)?;
    Ok(data)
}

fn servers(data: Vec<u8>, stamp: Option<ReadStamp>) -> ConfOutcome {
    match hickory_resolver::system_conf::parse_resolv_conf(data) {
        Ok(c) => ConfOutcome::Servers(Box::new(c), stamp),
        Err(e) => ConfOutcome::Failed(e.to_string()),
    }
}

fn failed(path: &Path, why: &str) -> ConfOutcome {
    warn!(
        "Unable to parse '{}', or no nameservers in '{}' ({why})",
        path.display(),
        path.display()
    );
    ConfOutcome::Failed(why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers_of(o: &ConfOutcome) -> Vec<String> {
        match o {
            ConfOutcome::Servers(c, _) => {
                c.0.name_servers()
                    .iter()
                    .map(|n| n.ip.to_string())
                    .collect()
            }
            o => panic!("no name servers: {o:?}"),
        }
    }

    #[test]
    fn a_missing_or_empty_file_falls_back_to_the_local_name_server() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("resolv.conf");
        assert_eq!(servers_of(&read(&missing, None, false)), ["127.0.0.1"]);
        std::fs::write(&missing, "").unwrap();
        assert_eq!(servers_of(&read(&missing, None, false)), ["127.0.0.1"]);
        std::fs::write(&missing, "# nothing\nsearch example.com\n").unwrap();
        assert_eq!(servers_of(&read(&missing, None, false)), ["127.0.0.1"]);
    }

    #[test]
    fn an_unreadable_file_fails_and_a_readable_one_is_used() {
        let dir = tempfile::tempdir().unwrap();
        // A directory: stat() works, reading does not (libevent's 5).
        assert!(matches!(
            read(dir.path(), None, false),
            ConfOutcome::Failed(_)
        ));
        let big = dir.path().join("big.conf");
        std::fs::write(&big, "#".repeat(MAX_RESOLV_CONF as usize + 1)).unwrap();
        assert!(matches!(read(&big, None, false), ConfOutcome::Failed(_)));
        // A device that never ends: stat() says 0 bytes, so C falls back
        // (and nothing reads it without bound).
        assert_eq!(
            servers_of(&read(Path::new("/dev/zero"), None, false)),
            ["127.0.0.1"]
        );
        let data = read_bounded(Path::new("/dev/zero")).unwrap();
        assert_eq!(data.len() as u64, MAX_RESOLV_CONF + 1);
        let good = dir.path().join("resolv.conf");
        std::fs::write(&good, "nameserver 127.53.0.9\nbogus line\n").unwrap();
        assert_eq!(servers_of(&read(&good, None, false)), ["127.53.0.9"]);
    }

    #[test]
    fn a_reload_reads_the_file_again_only_when_it_changed_or_is_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 127.53.0.9\n").unwrap();
        let ConfOutcome::Servers(_, Some(stamp)) = read(&path, None, false) else {
            panic!("no stamp")
        };
        assert!(matches!(
            read(&path, Some(&stamp), false),
            ConfOutcome::Unchanged
        ));
        assert_eq!(servers_of(&read(&path, Some(&stamp), true)), ["127.53.0.9"]);
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
        assert!(matches!(
            read(&path, Some(&stamp), false),
            ConfOutcome::Servers(..)
        ));
        let other = dir.path().join("other.conf");
        std::fs::copy(&path, &other).unwrap();
        assert!(matches!(
            read(&other, Some(&stamp), false),
            ConfOutcome::Servers(..)
        ));
    }
}
