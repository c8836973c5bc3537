//! The `weft` binary: parse the torrc-style configuration (`weft -f FILE`),
//! set up logging as its `Log` lines say, write the PidFile, and run the
//! relay (controller on this main thread, workers on their own threads).

use weft::cli::{self, Action};
use weft::config;
use weft::config_files::{self, Sources};

#[global_allocator]
static ALLOCATOR: weft::alloc::SwitchableAllocator = weft::alloc::SwitchableAllocator::new();

use std::path::PathBuf;
use std::process::ExitCode;

use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::Layer;
use weft_relay::control::Severity;
use weft_relay::controller::control_port::{log_feed, LogSender};
use weft_relay::controller::RelayHooks;

/// Forwards notice, warn and err lines to the ControlPort's log events
/// when a controller asked for them. Filtered at tor's notice, so it turns
/// on no debug or info call site.
struct ControlLogLayer(LogSender);

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

impl<S: tracing::Subscriber> Layer<S> for ControlLogLayer {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
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

fn init_logging(logs: &[config::LogSpec], control: Option<LogSender>) -> anyhow::Result<()> {
    let mut layers: Vec<Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>> = Vec::new();
    let default = [config::LogSpec {
        min: tracing::Level::INFO,
        max: tracing::Level::ERROR,
        target: config::LogTarget::Stdout,
    }];
    let specs = if logs.is_empty() { &default[..] } else { logs };
    for spec in specs {
        let (min, max) = (spec.min, spec.max);
        // tracing orders ERROR < WARN < ... < TRACE; keep levels in [max, min].
        let f = filter_fn(move |m| *m.level() <= min && *m.level() >= max);
        let base = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_target(false);
        let layer: Box<dyn Layer<_> + Send + Sync> = match &spec.target {
            config::LogTarget::Stdout => base.with_writer(std::io::stdout).with_filter(f).boxed(),
            config::LogTarget::Stderr => base.with_writer(std::io::stderr).with_filter(f).boxed(),
            config::LogTarget::Syslog => {
                let s = weft::syslog::Syslog::connect().map_err(|e| {
                    anyhow::anyhow!("cannot reach the system logger at /dev/log: {e}")
                })?;
                base.without_time().with_writer(s).with_filter(f).boxed()
            }
            config::LogTarget::File(p) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| anyhow::anyhow!("cannot open log file {}: {e}", p.display()))?;
                base.with_writer(std::sync::Mutex::new(file))
                    .with_filter(f)
                    .boxed()
            }
        };
        layers.push(layer);
    }
    if let Some(sender) = control {
        layers.push(
            ControlLogLayer(sender)
                .with_filter(LevelFilter::INFO)
                .boxed(),
        );
    }
    tracing_subscriber::registry()
        .with(layers)
        .with(LevelFilter::TRACE)
        .init();
    Ok(())
}

/// SIGHUP / SIGNAL RELOAD: read and parse the torrc again. Log and
/// PidFile changes need a restart (said in the log).
fn reloader(
    sources: Sources,
    logs: Vec<config::LogSpec>,
    pid_file: Option<PathBuf>,
) -> weft_relay::controller::Reloader {
    Box::new(move || {
        let cfg = config_files::load(&sources).map_err(|e| format!("configuration error: {e}"))?;
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        if cfg.logs != logs || cfg.pid_file != pid_file {
            tracing::warn!("reload: Log and PidFile changes need a restart (old values kept)");
        }
        Ok(cfg.relay)
    })
}

fn main() -> ExitCode {
    let large_blocks_returned = ALLOCATOR.return_large_blocks_to_os();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cli = match cli::parse(&argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(1);
        }
    };
    match &cli.action {
        Action::Version => {
            println!(
                "weft version {} (the Tor protocol of tor {}).",
                env!("CARGO_PKG_VERSION"),
                weft_relay::control::TOR_COMPAT_VERSION
            );
            return ExitCode::SUCCESS;
        }
        Action::Help => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Action::HashPassword(pw) => {
            let salt: [u8; 8] = weft_crypto::random_array();
            println!(
                "{}",
                weft_crypto::control_auth::hash_password(pw.as_bytes(), salt)
            );
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let cfg = match config_files::load(&cli.sources) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: configuration error: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.action {
        Action::VerifyConfig => {
            if !cli.quiet {
                for w in &cfg.warnings {
                    eprintln!("weft: warning: {w}");
                }
            }
            println!("Configuration was valid");
            return ExitCode::SUCCESS;
        }
        Action::ListFingerprint => {
            let keys = match weft_crypto::keys::RelayKeys::load_or_create(
                &cfg.relay.data_dir,
                &cfg.relay.nickname,
                std::time::Duration::from_secs(28 * 86400),
                std::time::SystemTime::now(),
            ) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("weft: cannot load or create keys: {e}");
                    return ExitCode::from(1);
                }
            };
            println!(
                "{} {}",
                cfg.relay.nickname,
                cli::spaced_fingerprint(&keys.fingerprint_hex())
            );
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let (log_sender, log_feed) = if cfg.relay.control.listeners.is_empty() {
        (None, None)
    } else {
        let (s, f) = log_feed();
        (Some(s), Some(f))
    };
    if let Err(e) = init_logging(&cfg.logs, log_sender) {
        eprintln!("weft: {e}");
        return ExitCode::from(1);
    }
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    if let Some(p) = &cfg.pid_file {
        if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
            eprintln!("weft: cannot write PidFile {}: {e}", p.display());
            return ExitCode::from(1);
        }
    }
    tracing::info!(
        "memory allocator: {}{}",
        ALLOCATOR.name(),
        if large_blocks_returned {
            " (blocks of 128 KiB or more are returned to the kernel when freed)"
        } else {
            ""
        }
    );
    tracing::info!(
        "TLS library: {} ({})",
        openssl::version::version(),
        if cfg!(feature = "vendored-openssl") {
            "built in; rebuild with --no-default-features to use the system's"
        } else {
            "the system's"
        }
    );
    let mut relay = cfg.relay;
    relay.alloc_probe = Some(weft::alloc::thread_allocations);
    let hooks = RelayHooks {
        log_feed,
        reloader: Some(reloader(
            cli.sources.clone(),
            cfg.logs.clone(),
            cfg.pid_file.clone(),
        )),
    };
    match weft_relay::controller::run_relay_with(relay, hooks) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("weft stopped: {e}");
            eprintln!("weft: {e}");
            ExitCode::from(1)
        }
    }
}
