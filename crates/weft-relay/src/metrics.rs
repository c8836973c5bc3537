//! Relay metrics: what the workers report every second, aggregated by the
//! controller and served on the MetricsPort in the Prometheus text format
//! (version 0.0.4), like C Tor's MetricsPort.
//!
//! The port listens on loopback unless configured otherwise, and every
//! request must carry `Authorization: Bearer <token>`, where the token is
//! the hex content of `DataDirectory/metrics_auth_cookie` (32 random bytes,
//! written 0600 at start-up; Prometheus reads it with
//! `authorization.credentials_file`).
//!
//! Delays are log₂ histograms with fixed buckets (1 µs · 2^k), so a worker
//! can count them without allocating and send them by value.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info};

use crate::messages::WorkerReport;

/// Buckets of a [`DelayHistogram`]: upper bounds 2 µs, 4 µs, … 2^32 µs.
pub const DELAY_BUCKETS: usize = 32;

/// A histogram with log₂ buckets: bucket k holds values in [2^k, 2^(k+1))
/// units (bucket 0 also 0 and 1). For delays the unit is 1 µs
/// ([`DelayHistogram::record`] takes nanoseconds); for queue sizes 1 byte
/// ([`DelayHistogram::record_units`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayHistogram {
    /// Counts per bucket: bucket k holds [2^k, 2^(k+1)) µs (bucket 0 also
    /// everything below 1 µs; the last also everything above).
    pub counts: [u64; DELAY_BUCKETS],
    /// Sum of all recorded values, ns.
    pub sum_ns: u64,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            counts: [0; DELAY_BUCKETS],
            sum_ns: 0,
        }
    }
}

impl DelayHistogram {
    /// Record one duration in nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.bucket(ns / 1000);
        self.sum_ns = self.sum_ns.wrapping_add(ns);
    }

    /// Record one value in the histogram's own unit (e.g. bytes); the sum
    /// then adds units.
    #[inline]
    pub fn record_units(&mut self, v: u64) {
        self.bucket(v);
        self.sum_ns = self.sum_ns.wrapping_add(v);
    }

    #[inline]
    fn bucket(&mut self, units: u64) {
        let k = if units < 2 {
            0
        } else {
            (63 - units.leading_zeros()) as usize
        };
        self.counts[k.min(DELAY_BUCKETS - 1)] += 1;
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Add another histogram.
    pub fn add(&mut self, o: &DelayHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.wrapping_add(o.sum_ns);
    }

    /// The difference `self - earlier` (both cumulative).
    pub fn since(&self, earlier: &DelayHistogram) -> DelayHistogram {
        let mut d = DelayHistogram::default();
        for (i, c) in d.counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        d.sum_ns = self.sum_ns.wrapping_sub(earlier.sum_ns);
        d
    }

    /// Upper bound of bucket `k` in seconds.
    pub fn upper_s(k: usize) -> f64 {
        (1u64 << (k + 1)) as f64 * 1e-6
    }

    /// An estimate of the `q` quantile (upper bound of its bucket), seconds.
    pub fn quantile_s(&self, q: f64) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let want = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::upper_s(k);
            }
        }
        Self::upper_s(DELAY_BUCKETS - 1)
    }
}

/// Totals of one worker since start.
#[derive(Debug, Default, Clone)]
pub struct WorkerTotals {
    /// Sum of the deltas, gauges as last reported.
    pub report: WorkerReport,
    /// CPU seconds of its thread.
    pub cpu_s: f64,
}

/// What the controller knows for the metrics page.
#[derive(Debug, Default, Clone)]
pub struct MetricsSnapshot {
    /// Per worker.
    pub workers: Vec<WorkerTotals>,
    /// CPU seconds of the main (controller) thread.
    pub main_cpu_s: f64,
    /// Connections known to the controller (open).
    pub connections: usize,
    /// Observed bandwidth (bytes/s) as published.
    pub observed_bandwidth: u64,
    /// Extends linked on the same worker / across workers.
    pub extends: (u64, u64),
    /// Seconds since start.
    pub uptime_s: u64,
}

impl WorkerTotals {
    /// Add a report (deltas summed, gauges replaced).
    pub fn add(&mut self, r: &WorkerReport, cpu_ns: u64) {
        let t = &mut self.report;
        t.read_bytes += r.read_bytes;
        t.written_bytes += r.written_bytes;
        t.cells_relayed += r.cells_relayed;
        t.cells_cross_worker += r.cells_cross_worker;
        t.circuits_created += r.circuits_created;
        t.wakeups_sent += r.wakeups_sent;
        t.rounds += r.rounds;
        t.busy_ns += r.busy_ns;
        t.allocations += r.allocations;
        t.migrations += r.migrations;
        t.delay.add(&r.delay);
        t.queue_wait.add(&r.queue_wait);
        t.outq.add(&r.outq);
        t.connections = r.connections;
        t.circuits = r.circuits;
        t.queued_cells = r.queued_cells;
        t.pool_slots = r.pool_slots;
        self.cpu_s = cpu_ns as f64 / 1e9;
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `scale` converts bucket units to the metric's unit (1e-6: µs → s),
/// `sum_scale` the recorded sum (1e-9: ns → s).
fn histogram(
    out: &mut String,
    name: &str,
    worker: usize,
    h: &DelayHistogram,
    scale: f64,
    sum_scale: f64,
) {
    let mut cum = 0;
    for (k, c) in h.counts.iter().enumerate() {
        cum += c;
        let _ = writeln!(
            out,
            "{name}_bucket{{worker=\"{worker}\",le=\"{}\"}} {cum}",
            (1u64 << (k + 1)) as f64 * scale
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{worker=\"{worker}\",le=\"+Inf\"}} {cum}"
    );
    let _ = writeln!(
        out,
        "{name}_sum{{worker=\"{worker}\"}} {}",
        h.sum_ns as f64 * sum_scale
    );
    let _ = writeln!(out, "{name}_count{{worker=\"{worker}\"}} {cum}");
}

/// Render the Prometheus text exposition.
pub fn render(m: &MetricsSnapshot) -> String {
    let mut o = String::with_capacity(8192);
    let per_worker =
        |o: &mut String, name: &str, kind: &str, help: &str, f: &dyn Fn(&WorkerTotals) -> f64| {
            family(o, name, kind, help);
            for (i, w) in m.workers.iter().enumerate() {
                let _ = writeln!(o, "{name}{{worker=\"{i}\"}} {}", f(w));
            }
        };
    per_worker(
        &mut o,
        "weft_worker_read_bytes_total",
        "counter",
        "TLS plaintext bytes read by the worker's connections.",
        &|w| w.report.read_bytes as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_written_bytes_total",
        "counter",
        "TLS plaintext bytes written by the worker's connections.",
        &|w| w.report.written_bytes as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_relayed_cells_total",
        "counter",
        "Relay cells the worker handed from one circuit half to the other.",
        &|w| w.report.cells_relayed as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_cross_worker_cells_total",
        "counter",
        "Of those, cells handed to a half on another worker.",
        &|w| w.report.cells_cross_worker as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_circuits_created_total",
        "counter",
        "CREATE/CREATE2 cells answered.",
        &|w| w.report.circuits_created as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_cpu_seconds_total",
        "counter",
        "CPU time (user+system) of the worker thread.",
        &|w| w.cpu_s,
    );
    per_worker(
        &mut o,
        "weft_worker_busy_seconds_total",
        "counter",
        "Time the worker spent working (not waiting for events).",
        &|w| w.report.busy_ns as f64 / 1e9,
    );
    per_worker(
        &mut o,
        "weft_worker_rounds_total",
        "counter",
        "Event-loop rounds.",
        &|w| w.report.rounds as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_wakeups_sent_total",
        "counter",
        "Wake-ups sent to other workers (at most one per published batch).",
        &|w| w.report.wakeups_sent as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_migrations_total",
        "counter",
        "Connections this worker handed to another worker (load balancing).",
        &|w| w.report.migrations as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_allocations_total",
        "counter",
        "Heap allocations made on the worker thread (counted by the weft binary's allocator).",
        &|w| w.report.allocations as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_connections",
        "gauge",
        "Open connections owned by the worker.",
        &|w| w.report.connections as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_circuit_halves",
        "gauge",
        "Circuit halves owned by the worker.",
        &|w| w.report.circuits as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_queued_cells",
        "gauge",
        "Cells waiting in the worker's circuit queues.",
        &|w| w.report.queued_cells as f64,
    );
    per_worker(
        &mut o,
        "weft_worker_pool_cells",
        "gauge",
        "Cell slots allocated in the worker's pool.",
        &|w| w.report.pool_slots as f64,
    );
    family(&mut o, "weft_node_delay_seconds", "histogram", "Time a relayed cell spent inside the relay, from the read of its TLS record to the hand-over of its write to TLS.");
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_node_delay_seconds",
            i,
            &w.report.delay,
            1e-6,
            1e-9,
        );
    }
    family(
        &mut o,
        "weft_circuit_queue_wait_seconds",
        "histogram",
        "Part of the node delay a cell spent in its circuit's queue on the writing worker.",
    );
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_circuit_queue_wait_seconds",
            i,
            &w.report.queue_wait,
            1e-6,
            1e-9,
        );
    }
    family(
        &mut o,
        "weft_kernel_send_queue_bytes",
        "histogram",
        "Bytes in a connection's kernel send queue (SIOCOUTQ) when the scheduler looked: every connection and run with KIST, one write in 64 without.",
    );
    for (i, w) in m.workers.iter().enumerate() {
        histogram(
            &mut o,
            "weft_kernel_send_queue_bytes",
            i,
            &w.report.outq,
            1.0,
            1.0,
        );
    }
    family(
        &mut o,
        "weft_main_thread_cpu_seconds_total",
        "counter",
        "CPU time of the main (controller) thread.",
    );
    let _ = writeln!(o, "weft_main_thread_cpu_seconds_total {}", m.main_cpu_s);
    family(
        &mut o,
        "weft_connections",
        "gauge",
        "Open OR connections known to the controller.",
    );
    let _ = writeln!(o, "weft_connections {}", m.connections);
    family(
        &mut o,
        "weft_observed_bandwidth_bytes",
        "gauge",
        "Observed bandwidth (largest 10 s average of min(read, written)).",
    );
    let _ = writeln!(o, "weft_observed_bandwidth_bytes {}", m.observed_bandwidth);
    family(
        &mut o,
        "weft_extends_total",
        "counter",
        "EXTEND2 requests linked, by where the two halves ended up.",
    );
    let _ = writeln!(
        o,
        "weft_extends_total{{placement=\"same_worker\"}} {}",
        m.extends.0
    );
    let _ = writeln!(
        o,
        "weft_extends_total{{placement=\"cross_worker\"}} {}",
        m.extends.1
    );
    family(
        &mut o,
        "weft_uptime_seconds",
        "gauge",
        "Seconds since start.",
    );
    let _ = writeln!(o, "weft_uptime_seconds {}", m.uptime_s);
    o
}

/// Create (or replace) the MetricsPort token file in `data_dir`; returns
/// the token.
pub fn write_cookie(data_dir: &Path) -> std::io::Result<(PathBuf, String)> {
    let token = hex::encode(weft_crypto::random_array::<32>());
    let path = data_dir.join("metrics_auth_cookie");
    weft_crypto::keys::write_private_file(&path, token.as_bytes())
        .map_err(std::io::Error::other)?;
    Ok((path, token))
}

/// Check a request head: `GET /metrics` with the right bearer token.
/// Returns the HTTP status to answer.
pub fn check_request(head: &str, token: &str) -> u16 {
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let auth_ok = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("authorization")
                && v.trim().strip_prefix("Bearer ").is_some_and(|t| {
                    bool::from(subtle::ConstantTimeEq::ct_eq(
                        t.trim().as_bytes(),
                        token.as_bytes(),
                    ))
                })
        })
    });
    if method != "GET" {
        405
    } else if path != "/metrics" {
        404
    } else if !auth_ok {
        401
    } else {
        200
    }
}

/// Serve one metrics request on `stream` (bounded: 8 KiB head, 5 s).
pub async fn serve_one(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    token: &str,
    body: impl FnOnce() -> String,
) {
    let mut buf = vec![0u8; 8192];
    let mut used = 0;
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let n = stream.read(&mut buf[used..]).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            used += n;
            if buf[..used].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if used == buf.len() {
                return Ok(false);
            }
        }
    })
    .await;
    let complete = matches!(read, Ok(Ok(true)));
    let head = String::from_utf8_lossy(&buf[..used]);
    let status = if complete {
        check_request(&head, token)
    } else {
        400
    };
    let (reason, text) = match status {
        200 => ("OK", body()),
        401 => {
            debug!("metrics request from {peer} without the right token");
            (
                "Unauthorized",
                "missing or wrong bearer token\n".to_string(),
            )
        }
        404 => ("Not Found", "only /metrics is served\n".to_string()),
        405 => ("Method Not Allowed", "GET only\n".to_string()),
        _ => ("Bad Request", "bad request\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.0 {status} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{text}",
        text.len(),
        if status == 401 { "WWW-Authenticate: Bearer\r\n" } else { "" }
    );
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.write_all(resp.as_bytes()),
    )
    .await;
}

/// Bind the MetricsPort.
pub async fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    info!("MetricsPort listening on {addr} (bearer token in metrics_auth_cookie)");
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        let mut h = DelayHistogram::default();
        for ns in [500, 1_500, 2_000, 3_999, 4_000, 1_000_000] {
            h.record(ns);
        }
        assert_eq!(h.counts[0], 2, "below 2 µs");
        assert_eq!(h.counts[1], 2, "[2, 4) µs");
        assert_eq!(h.counts[2], 1, "[4, 8) µs");
        assert_eq!(h.counts[9], 1, "1 ms is in [512, 1024) µs");
        assert_eq!(h.count(), 6);
        assert_eq!(h.quantile_s(0.5), 4e-6);
        assert!((h.quantile_s(1.0) - 1.024e-3).abs() < 1e-12);
        let mut big = DelayHistogram::default();
        big.record(u64::MAX / 2);
        assert_eq!(big.counts[DELAY_BUCKETS - 1], 1);
    }

    #[test]
    fn requests_need_the_token() {
        let t = "abc";
        assert_eq!(
            check_request(
                "GET /metrics HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n",
                t
            ),
            200
        );
        assert_eq!(
            check_request(
                "GET /metrics HTTP/1.1\r\nauthorization:Bearer abc\r\n\r\n",
                t
            ),
            200
        );
        assert_eq!(check_request("GET /metrics HTTP/1.1\r\n\r\n", t), 401);
        assert_eq!(
            check_request(
                "GET /metrics HTTP/1.1\r\nAuthorization: Bearer abd\r\n\r\n",
                t
            ),
            401
        );
        assert_eq!(
            check_request("GET / HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n", t),
            404
        );
        assert_eq!(check_request("POST /metrics HTTP/1.1\r\n\r\n", t), 405);
    }
}
