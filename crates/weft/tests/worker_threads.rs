//! weft's worker threads as the kernel sees them: with `WorkerSchedSlice`
//! each `weft-worker-N` thread of a running weft carries the requested
//! scheduler slice, the main thread keeps the kernel's default, and worker
//! 0 logs the outcome. On a kernel without per-thread slices (Linux before
//! 6.12) the log must say so instead.

mod common;

use std::time::Duration;

use common::WeftProcess;
use weft_relay::sched_slice::slice_of;

/// (tid, comm) of every thread of `pid`.
fn threads(pid: u32) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let e = e.unwrap();
        let tid: i32 = e.file_name().to_string_lossy().parse().unwrap();
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        v.push((tid, comm.trim().to_string()));
    }
    v
}

#[test]
fn workers_carry_the_configured_scheduler_slice() {
    let weft = WeftProcess::start(2, "WorkerSchedSlice 7 msec\n");
    let pid = weft.child.id();
    let logged = common::wait_for_log(&weft, "scheduler slice")
        || common::wait_for_log(&weft, "no per-thread time slices");
    assert!(logged, "worker 0 did not log the slice request");
    if weft.log_text().contains("no per-thread time slices") {
        eprintln!("kernel without per-thread slices: only the log line is checked");
        return;
    }
    assert!(weft
        .log_text()
        .contains("worker threads run with a 7ms scheduler slice"));
    // Worker 0 logs the slice before worker 1 is spawned: wait for both.
    assert!(common::wait_for_log(&weft, "started 2 worker threads"));
    let all = threads(pid);
    let workers: Vec<_> = all
        .iter()
        .filter(|(_, c)| c.starts_with("weft-worker-"))
        .collect();
    assert_eq!(workers.len(), 2, "threads: {all:?}");
    for (tid, comm) in workers {
        assert_eq!(
            slice_of(*tid).unwrap(),
            Duration::from_millis(7),
            "{comm} ({tid})"
        );
    }
    let main = slice_of(pid as i32).unwrap();
    assert_ne!(main, Duration::from_millis(7), "main thread left alone");
}
