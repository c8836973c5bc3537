//! The `weft` binary: parse the torrc-style configuration (`weft -f FILE`),
//! set up logging as its `Log` lines say, write the PidFile, and run the
//! relay (controller on this main thread, workers on their own threads).

use weft::config;

#[global_allocator]
static ALLOCATOR: weft::alloc::SwitchableAllocator = weft::alloc::SwitchableAllocator::new();

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::Layer;

/// weft: a multi-threaded Tor relay.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Configuration file (torrc syntax).
    #[arg(short = 'f', long = "config")]
    config: PathBuf,
    /// Only check the configuration and exit.
    #[arg(long)]
    verify_config: bool,
}

fn init_logging(logs: &[config::LogSpec]) -> anyhow::Result<()> {
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
    tracing_subscriber::registry()
        .with(layers)
        .with(LevelFilter::TRACE)
        .init();
    Ok(())
}

fn main() -> ExitCode {
    let large_blocks_returned = ALLOCATOR.return_large_blocks_to_os();
    let args = Args::parse();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("weft: cannot read {}: {e}", args.config.display());
            return ExitCode::from(1);
        }
    };
    let cfg = match config::parse(&text, &args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: configuration error: {e}");
            return ExitCode::from(1);
        }
    };
    if args.verify_config {
        println!("Configuration was valid");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = init_logging(&cfg.logs) {
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
    match weft_relay::run_relay(relay) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("weft stopped: {e}");
            eprintln!("weft: {e}");
            ExitCode::from(1)
        }
    }
}
