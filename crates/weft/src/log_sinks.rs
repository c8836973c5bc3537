//! Where log lines go: the `Log` lines' sinks (stdout, stderr, files,
//! syslog) as one tracing layer that writes each line in C Tor's format
//! (`Nov 26 17:43:22.123 [notice] message`) to every sink whose severity
//! and domain masks ([`crate::log_domains`]) take it, and the ControlPort's
//! log feed. [`LogSinks::replace`] swaps the sinks on reload (reopening
//! files, as logrotate's HUP expects); call sites no sink wants stay
//! disabled (a worker's debug points cost nothing unless a `Log` asks).

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tracing::subscriber::Interest;
use tracing::Metadata;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::Layer;
use weft_relay::control::Severity;
use weft_relay::controller::control_port::LogSender;

use crate::config::{LogSpec, LogTarget};
use crate::log_domains::{domain_of, level_index, SeverityMasks, ALL_DOMAINS, SEVERITIES};

/// The default when no `Log` line is given: notice and above on stdout.
pub fn default_logs() -> Vec<LogSpec> {
    vec![LogSpec {
        masks: [ALL_DOMAINS, ALL_DOMAINS, ALL_DOMAINS, 0, 0],
        target: LogTarget::Stdout,
    }]
}

enum Output {
    Stdout,
    Stderr,
    File(Mutex<File>),
    Syslog(crate::syslog::Syslog),
}

struct Sink {
    masks: SeverityMasks,
    out: Output,
}

impl Sink {
    fn open(spec: &LogSpec) -> Result<Sink, String> {
        let out = match &spec.target {
            LogTarget::Stdout => Output::Stdout,
            LogTarget::Stderr => Output::Stderr,
            LogTarget::Syslog => Output::Syslog(
                crate::syslog::Syslog::connect()
                    .map_err(|e| format!("cannot reach the system logger at /dev/log: {e}"))?,
            ),
            LogTarget::File(p) => Output::File(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("cannot open log file {}: {e}", p.display()))?,
            )),
        };
        Ok(Sink {
            masks: spec.masks,
            out,
        })
    }
}

/// The `Log` lines' sinks, shared by the layer that writes and the filter
/// that decides which call sites are on.
#[derive(Clone)]
pub struct LogSinks(Arc<Shared>);

struct Shared {
    /// The union of every sink's masks: what any sink takes.
    wanted: [AtomicU64; 5],
    sinks: RwLock<Vec<Sink>>,
}

impl LogSinks {
    /// Open every sink of `specs` (the default if empty).
    pub fn open(specs: &[LogSpec]) -> Result<LogSinks, String> {
        let s = LogSinks(Arc::new(Shared {
            wanted: Default::default(),
            sinks: RwLock::new(Vec::new()),
        }));
        s.install(open_all(specs)?);
        Ok(s)
    }

    /// Reload: open the new sinks, and only if all opened, swap them in
    /// (the old files are closed) and recompute which call sites are on.
    pub fn replace(&self, specs: &[LogSpec]) -> Result<(), String> {
        let sinks = open_all(specs)?;
        self.install(sinks);
        tracing::callsite::rebuild_interest_cache();
        Ok(())
    }

    fn install(&self, sinks: Vec<Sink>) {
        let mut wanted = [0u64; 5];
        for s in &sinks {
            for (w, m) in wanted.iter_mut().zip(s.masks) {
                *w |= m;
            }
        }
        *self.0.sinks.write().unwrap_or_else(|e| e.into_inner()) = sinks;
        for (a, w) in self.0.wanted.iter().zip(wanted) {
            a.store(w, Ordering::Relaxed);
        }
    }

    fn takes(&self, meta: &Metadata<'_>) -> bool {
        self.0.wanted[level_index(meta.level())].load(Ordering::Relaxed) & domain_of(meta.target())
            != 0
    }

    fn write(&self, sev: usize, domain: u64, message: &str) {
        let sinks = self.0.sinks.read().unwrap_or_else(|e| e.into_inner());
        let mut line: Option<String> = None;
        for s in sinks.iter().filter(|s| s.masks[sev] & domain != 0) {
            let mut full = || {
                line.get_or_insert_with(|| {
                    format!(
                        "{} [{}] {message}\n",
                        tor_timestamp(std::time::SystemTime::now()),
                        SEVERITIES[sev]
                    )
                })
                .clone()
            };
            // A sink that cannot be written loses the line, never the relay.
            let _ = match &s.out {
                Output::Stdout => std::io::stdout().lock().write_all(full().as_bytes()),
                Output::Stderr => std::io::stderr().lock().write_all(full().as_bytes()),
                Output::File(f) => f
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .write_all(full().as_bytes()),
                Output::Syslog(l) => {
                    l.send(crate::syslog::priority(sev), message);
                    Ok(())
                }
            };
        }
    }
}

fn open_all(specs: &[LogSpec]) -> Result<Vec<Sink>, String> {
    let default;
    let specs = if specs.is_empty() {
        default = default_logs();
        &default[..]
    } else {
        specs
    };
    specs.iter().map(Sink::open).collect()
}

/// Writes events to the sinks.
struct SinkLayer(LogSinks);

/// Turns on the call sites some sink takes (re-asked after a reload).
struct SinkFilter(LogSinks);

impl<S> Filter<S> for SinkFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.0.takes(meta)
    }
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.0.takes(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        let most_verbose = (0..5)
            .rev()
            .find(|&i| self.0 .0.wanted[i].load(Ordering::Relaxed) != 0);
        Some(match most_verbose {
            None => LevelFilter::OFF,
            Some(0) => LevelFilter::ERROR,
            Some(1) => LevelFilter::WARN,
            Some(2) => LevelFilter::INFO,
            Some(3) => LevelFilter::DEBUG,
            Some(_) => LevelFilter::TRACE,
        })
    }
}

impl<S: tracing::Subscriber> Layer<S> for SinkLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut m = MessageText(String::new());
        event.record(&mut m);
        self.0
            .write(level_index(meta.level()), domain_of(meta.target()), &m.0);
    }
}

/// Forwards notice, warn and err lines to the ControlPort's log events
/// when a controller asked for them. Filtered at tor's notice, so it turns
/// on no debug or info call site.
struct ControlLogLayer(LogSender);

impl<S: tracing::Subscriber> Layer<S> for ControlLogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let sev = match *event.metadata().level() {
            tracing::Level::ERROR => Severity::Err,
            tracing::Level::WARN => Severity::Warn,
            tracing::Level::INFO => Severity::Notice,
            _ => return,
        };
        if !self.0.wants(sev) {
            return;
        }
        let mut m = MessageText(String::new());
        event.record(&mut m);
        self.0.send(sev, m.0);
    }
}

/// Collects an event's message and fields into one line.
struct MessageText(String);

impl tracing::field::Visit for MessageText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// Install the global subscriber: the `Log` sinks and, with a ControlPort,
/// its log feed. Returns the sinks for reload.
pub fn init(logs: &[LogSpec], control: Option<LogSender>) -> Result<LogSinks, String> {
    let sinks = LogSinks::open(logs)?;
    let mut layers: Vec<Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>> =
        vec![SinkLayer(sinks.clone())
            .with_filter(SinkFilter(sinks.clone()))
            .boxed()];
    if let Some(sender) = control {
        layers.push(
            ControlLogLayer(sender)
                .with_filter(LevelFilter::INFO)
                .boxed(),
        );
    }
    tracing_subscriber::registry().with(layers).init();
    Ok(sinks)
}

/// C Tor's log timestamp, `Nov 26 17:43:22.123` (UTC).
pub fn tor_timestamp(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    // A clock beyond the calendar's range gives an empty stamp, no panic.
    let Some(dt) = time::Duration::try_from(d)
        .ok()
        .and_then(|d| time::OffsetDateTime::UNIX_EPOCH.checked_add(d))
    else {
        return String::new();
    };
    let fmt = time::macros::format_description!(
        "[month repr:short] [day] [hour]:[minute]:[second].[subsecond digits:3]"
    );
    dt.format(&fmt).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_as_c_tor_writes_them() {
        // 2026-11-26 17:43:22.123 UTC.
        let t = UNIX_EPOCH + Duration::from_millis(1_795_715_002_123);
        assert_eq!(tor_timestamp(t), "Nov 26 17:43:22.123");
        assert_eq!(tor_timestamp(UNIX_EPOCH), "Jan 01 00:00:00.000");
        // A leap day.
        let t = UNIX_EPOCH + Duration::from_secs(1_709_164_800 + 3661);
        assert_eq!(tor_timestamp(t), "Feb 29 01:01:01.000");
        // A clock past year 9999 gives an empty stamp, not a panic.
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(tor_timestamp(far), "");
    }

    #[test]
    fn sinks_take_their_domains_and_reload_reopens_files() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
        let spec = |v: &str| {
            let (masks, dest) = crate::log_domains::parse_severities(v).unwrap();
            let path = dest.strip_prefix("file ").unwrap();
            LogSpec {
                masks,
                target: LogTarget::File(path.into()),
            }
        };
        let sinks = LogSinks::open(&[
            spec(&format!("[circ]info file {}", a.display())),
            spec(&format!("[~circ]notice file {}", b.display())),
        ])
        .unwrap();
        let circ = crate::log_domains::domain_bit("circ").unwrap();
        let dir_d = crate::log_domains::domain_bit("dir").unwrap();
        sinks.write(3, circ, "an info line about a circuit");
        sinks.write(2, dir_d, "a notice about the directory");
        sinks.write(3, dir_d, "an info line about the directory");
        let a_text = std::fs::read_to_string(&a).unwrap();
        let b_text = std::fs::read_to_string(&b).unwrap();
        assert!(
            a_text.ends_with("[info] an info line about a circuit\n"),
            "{a_text}"
        );
        assert_eq!(a_text.lines().count(), 1);
        assert!(
            b_text.ends_with("[notice] a notice about the directory\n"),
            "{b_text}"
        );
        assert_eq!(b_text.lines().count(), 1);
        // logrotate moves the file away and sends HUP: the sink reopens it.
        std::fs::rename(&a, dir.path().join("a.log.1")).unwrap();
        sinks
            .replace(&[spec(&format!("[circ]info file {}", a.display()))])
            .unwrap();
        sinks.write(3, circ, "after the rotation");
        assert!(std::fs::read_to_string(&a)
            .unwrap()
            .ends_with("[info] after the rotation\n"));
        // A new sink that cannot open keeps the old ones.
        let bad = spec("notice file /nonexistent-dir/x.log");
        assert!(sinks.replace(&[bad]).is_err());
        sinks.write(3, circ, "still here");
        assert!(std::fs::read_to_string(&a)
            .unwrap()
            .ends_with("[info] still here\n"));
    }
}
