//! The demo's roles part (`weft-bench demo`, issue 56) against stock tor,
//! so that the README's first command cannot rot unseen: one network of
//! stock tor with weft (2 workers), and every role's check must hold —
//! middle and exit with hashed bytes, a name weft resolves, conflux legs
//! ending at weft, a client that bootstraps from weft alone, the flags and
//! a consensus weight, weft as an onion service's rendezvous point — and
//! weft's MetricsPort must give a node-delay histogram. (The demo's
//! speed part is `weft-bench run`, which `bench_pipeline.rs` covers; its
//! report, `crates/weft-bench/tests/demo_report.rs`.)
//!
//! The network lives in `target/tmp/weft-net-demo-<pid>/`, kept on
//! failure.

use std::path::PathBuf;

#[test]
fn every_role_of_the_demo_holds_against_stock_tor() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-demo-{}", std::process::id()));
    let r = weft_bench::demo::roles::run(&dir, std::path::Path::new(env!("CARGO_BIN_EXE_weft")))?;
    let failed: Vec<_> = r.checks.iter().filter(|c| !c.ok).collect();
    anyhow::ensure!(failed.is_empty(), "roles that failed: {failed:#?}");
    let roles: Vec<&str> = r.checks.iter().map(|c| c.role.as_str()).collect();
    assert_eq!(
        roles,
        [
            "middle",
            "exit with DNS",
            "conflux exit",
            "directory cache",
            "flags",
            "rendezvous point"
        ]
    );
    let cells = r.node_delay_buckets_ms.last().map_or(0.0, |b| b.1);
    anyhow::ensure!(cells > 1000.0, "node-delay histogram with {cells} cells");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
