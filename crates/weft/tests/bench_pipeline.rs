//! Acceptance 4 of "weft-bench": the bench pipeline at tiny scale against
//! weft (seconds, no timing assertions). It builds circuits through weft to
//! the sinks, moves cells both ways, writes the results JSON, and checks that
//! the JSON is well-formed and that the cell counts agree: what the sinks and
//! generators received, what weft says it relayed (its shutdown log line),
//! and what was sent. The load spreads each connection's circuits over
//! both sinks (the CLI's default), and the row reports weft's share of
//! cells that crossed workers.

use anyhow::{ensure, Context, Result};
use weft_bench::report;
use weft_bench::run::{self, BenchEnv, Procedure};
use weft_bench::target::TargetKind;

#[test]
fn bench_pipeline_against_weft() -> Result<()> {
    let tor = weft_testnet::TorBinaries::locate_or_install()?.tor;
    let dir = tempfile::tempdir()?;
    let env = BenchEnv {
        dir: dir.path().to_path_buf(),
        weft_bin: env!("CARGO_BIN_EXE_weft").into(),
        tor_bin: tor,
    };
    let mut p = Procedure::saturation(2, 2, 64, 100, 0.5, 2.0, 1.0);
    p.mark_every = 8;
    // As the CLI's default load: each connection's circuits to every sink.
    p.spread = true;
    let floor = run::measure_floor(&env, &p, 0.5)?;
    let r = run::run(&env, &p, TargetKind::weft(2), Some(&floor))?;
    ensure!(r.errors.is_empty(), "errors: {:?}", r.errors);
    ensure!(r.circuits == (4, 4, 0), "circuits {:?}", r.circuits);
    ensure!(
        r.corrupt_cells == 0,
        "{} marked cells damaged",
        r.corrupt_cells
    );
    ensure!(r.cells_relayed > 0 && r.bytes_relayed == r.cells_relayed * 514);

    // Counts agree: nothing is received that was not sent; at most a window
    // per circuit and direction is in flight when the load stops; weft's own
    // count of relayed cells lies between what arrived and what was sent
    // (plus one EXTEND2 and one EXTENDED2 per circuit).
    let t = &r.totals;
    let in_flight = 4 * p.window;
    ensure!(
        t.up_received <= t.up_sent && t.up_sent - t.up_received <= in_flight,
        "{t:?}"
    );
    ensure!(
        t.down_received <= t.down_sent && t.down_sent - t.down_received <= in_flight,
        "{t:?}"
    );
    let log = std::fs::read_to_string(dir.path().join("target-weft-2/notice.log"))?;
    let relayed: u64 = log
        .lines()
        .find_map(|l| l.split("relayed ").nth(1)?.split(' ').next()?.parse().ok())
        .context("weft's 'relayed N cells' line")?;
    let received = t.up_received + t.down_received;
    let sent = t.up_sent + t.down_sent + 2 * 4;
    ensure!(
        (received..=sent).contains(&relayed),
        "weft relayed {relayed} cells; load received {received}, sent {sent}"
    );

    // The JSON round-trips and holds every figure of the report.
    let cmp = report::Comparison {
        date: report::today().1,
        command: "bench_pipeline test".into(),
        machine: report::Machine::read(),
        tor_version: String::new(),
        floor_ms: Some(run::Percentiles::from_hist(&floor)),
        table: report::table(std::slice::from_ref(&r)),
        runs: vec![r],
        projection: None,
        paired: None,
        worker_pairs: None,
    };
    let path = dir.path().join("result.json");
    report::write_json(&path, &cmp)?;
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let run = &v["runs"][0];
    for key in [
        "samples",
        "max_sustained_bytes_per_s",
        "cpu_s_per_gib",
        "main_thread_share",
        "target_threads",
        "ttfb_ms",
        "ttlb_ms",
        "delay_up_ms",
        "delay_down_ms",
        "cdf_delay",
        "cdf_ttlb",
        "rss_per_circuit_bytes",
        "procedure",
        "totals",
    ] {
        ensure!(!run[key].is_null(), "JSON lacks {key}");
    }
    ensure!(run["samples"].as_array().is_some_and(|s| !s.is_empty()));
    ensure!(run["delay_up_ms"]["count"].as_u64() > Some(0));
    ensure!(run["ttlb_ms"]["count"].as_u64() > Some(0));
    ensure!(v["table"][0]["target"] == "weft-2");
    // weft's own count of cells that crossed workers is in the row.
    ensure!(
        v["table"][0]["cross_share"].is_number(),
        "no crossing share: {}",
        v["table"][0]
    );
    let md = report::markdown(&cmp.table);
    ensure!(md.lines().count() == 3 && md.contains("weft-2"));
    Ok(())
}
