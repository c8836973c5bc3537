//! The `weft` binary: parse the torrc-style configuration (`weft -f FILE`),
//! set up logging as its `Log` lines say, write the PidFile, and run the
//! relay (controller on this main thread, workers on their own threads).

use weft::cli::{self, Action};
use weft::config_files::{self, Sources};

#[global_allocator]
static ALLOCATOR: weft::alloc::SwitchableAllocator = weft::alloc::SwitchableAllocator::new();

use std::path::PathBuf;
use std::process::ExitCode;

use weft::log_sinks::{self, LogSinks};
use weft_relay::controller::control_port::log_feed;
use weft_relay::controller::RelayHooks;

/// SIGHUP / SIGNAL RELOAD: read and parse the torrc again; apply its
/// `Log` lines (reopening files, for logrotate) before the controller
/// applies the rest. PidFile changes need a restart (said in the log).
fn reloader(
    sources: Sources,
    sinks: LogSinks,
    pid_file: Option<PathBuf>,
) -> weft_relay::controller::Reloader {
    Box::new(move || {
        let cfg = config_files::load(&sources).map_err(|e| format!("configuration error: {e}"))?;
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        if let Err(e) = sinks.replace(&cfg.logs) {
            tracing::warn!("reload: {e}; the old Log lines are kept");
        }
        if cfg.pid_file != pid_file {
            tracing::warn!("reload: PidFile changes need a restart (old value kept)");
        }
        Ok(cfg.relay)
    })
}

/// The relay's heap trim hook ([`weft::alloc::SwitchableAllocator::trim`]).
fn trim_heap() -> bool {
    ALLOCATOR.trim()
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
        Action::KeygenFamily(name) => {
            return match weft_crypto::family_keys::keygen(std::path::Path::new("."), name) {
                Ok(id) => {
                    println!(
                        "# Generated {name}{}",
                        weft_crypto::family_keys::SECRET_SUFFIX
                    );
                    println!("FamilyId {id}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("weft: {e}");
                    ExitCode::from(1)
                }
            };
        }
        Action::Keygen | Action::KeyExpiration => {
            let r = if cli.action == Action::Keygen {
                weft::keygen_cli::keygen(&cli.sources, &cli.keygen)
            } else {
                weft::keygen_cli::key_expiration(&cli.sources, &cli.keygen)
            };
            return match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("weft: {e}");
                    ExitCode::from(1)
                }
            };
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
    if let Some(why) = &cfg.start_refusal {
        eprintln!("weft: {why}");
        return ExitCode::from(1);
    }
    let (log_sender, log_feed) = if cfg.relay.control.listeners.is_empty() {
        (None, None)
    } else {
        let (s, f) = log_feed();
        (Some(s), Some(f))
    };
    let sinks = match log_sinks::init(&cfg.logs, log_sender) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(1);
        }
    };
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    for n in &cfg.notices {
        tracing::info!("{n}");
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
    // WEFT_HEAP_TRIM=off leaves glibc's arenas alone (to measure what
    // trimming costs and saves).
    if large_blocks_returned && std::env::var_os("WEFT_HEAP_TRIM").is_none_or(|v| v != "off") {
        relay.heap_trim = Some(trim_heap);
    }
    let hooks = RelayHooks {
        log_feed,
        reloader: Some(reloader(cli.sources.clone(), sinks, cfg.pid_file.clone())),
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
