//! Reading weft's own MetricsPort during a run: its node-delay histogram
//! (what the relay measured inside itself, next to what the bench measured
//! from outside), the kernel send-queue sizes its KIST scheduler saw, and
//! its allocation and cell counters. The bearer token comes from the
//! target's `metrics_auth_cookie`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The parts of one scrape the bench uses (summed over workers).
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Histogram buckets: family → (upper bound → cumulative count).
    pub buckets: BTreeMap<String, Vec<(f64, f64)>>,
    /// Counters and gauges summed over labels.
    pub values: BTreeMap<String, f64>,
}

/// GET /metrics from 127.0.0.1:`port` with the bearer token.
pub fn scrape(port: u16, token: &str) -> Result<Scrape> {
    Ok(parse(&scrape_text(port, token)?))
}

/// The MetricsPort token in weft's `data_dir`, waiting (at most 30 s) for
/// weft to write it: the MetricsPort opens after the ORPort, so on a busy
/// machine the file can appear after weft's start was seen.
pub fn read_token(data_dir: &std::path::Path) -> Result<String> {
    let path = data_dir.join("metrics_auth_cookie");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
            _ if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Ok(_) => bail!("{} is empty", path.display()),
            Err(e) => bail!("{}: {e}", path.display()),
        }
    }
}

/// The sum of every line of a scrape's text that starts with `prefix`
/// (a name with its labels, e.g. one series per worker; 0 if none).
pub fn sum_lines(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter_map(|l| {
            l.strip_prefix(prefix)
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

/// GET /metrics from 127.0.0.1:`port` with the bearer token: the text.
pub fn scrape_text(port: u16, token: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP body")?;
    if !head.starts_with("HTTP/1.0 200") {
        bail!("MetricsPort answered {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}

/// Parse the Prometheus text format (only what weft emits).
pub fn parse(body: &str) -> Scrape {
    let mut out = Scrape::default();
    let mut by_le: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match key.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (key, ""),
        };
        if let Some(family) = name.strip_suffix("_bucket") {
            let le = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix("le=\""))
                .map(|x| x.trim_end_matches('"'));
            let bound = match le {
                Some("+Inf") => f64::INFINITY,
                Some(x) => x.parse().unwrap_or(f64::INFINITY),
                None => continue,
            };
            *by_le
                .entry(family.to_string())
                .or_default()
                .entry(bound.to_bits())
                .or_default() += v;
        } else {
            *out.values.entry(name.to_string()).or_default() += v;
        }
    }
    for (family, m) in by_le {
        let mut v: Vec<(f64, f64)> = m.into_iter().map(|(b, c)| (f64::from_bits(b), c)).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.buckets.insert(family, v);
    }
    out
}

/// What weft reported over an interval.
#[derive(Debug, Clone, Serialize)]
pub struct RelayMetrics {
    /// Cells weft relayed.
    pub cells: f64,
    /// Heap allocations on its worker threads.
    pub worker_allocations: f64,
    /// Node delay (weft's own histogram): median bucket bound, ms.
    pub node_delay_p50_ms: f64,
    /// 99th percentile bucket bound, ms.
    pub node_delay_p99_ms: f64,
    /// The node-delay histogram over the interval: (bucket's upper bound
    /// in ms, cells at or under it), cumulative as Prometheus keeps it.
    pub node_delay_buckets_ms: Vec<(f64, f64)>,
    /// Kernel send-queue samples (KIST on).
    pub outq_samples: f64,
    /// Median kernel send queue, bytes (bucket bound).
    pub outq_p50_bytes: f64,
    /// 99th percentile, bytes.
    pub outq_p99_bytes: f64,
    /// Main thread CPU seconds.
    pub main_cpu_s: f64,
    /// Of `cells`, those handed to a half on another worker.
    pub cross_cells: f64,
    /// Event-loop rounds of all workers.
    pub rounds: f64,
    /// Wake-ups one worker sent another (eventfd writes for ring batches).
    pub wakeups: f64,
}

/// Bucket deltas `b − a`: (upper bound, cumulative count).
fn delta(a: Option<&Vec<(f64, f64)>>, b: Option<&Vec<(f64, f64)>>) -> Vec<(f64, f64)> {
    let Some(b) = b else { return Vec::new() };
    b.iter()
        .map(|(le, c)| {
            let before = a
                .and_then(|a| a.iter().find(|x| x.0 == *le))
                .map_or(0.0, |x| x.1);
            (*le, c - before)
        })
        .collect()
}

/// The `q` quantile of bucket deltas `b − a` (the bucket's upper bound).
fn quantile(a: Option<&Vec<(f64, f64)>>, b: Option<&Vec<(f64, f64)>>, q: f64) -> (f64, f64) {
    let delta = delta(a, b);
    let total = delta.last().map_or(0.0, |x| x.1);
    if total <= 0.0 {
        return (0.0, 0.0);
    }
    let want = total * q;
    let v = delta
        .iter()
        .find(|x| x.1 >= want)
        .map_or(f64::INFINITY, |x| x.0);
    (v, total)
}

impl RelayMetrics {
    /// The change from scrape `a` to scrape `b`.
    pub fn between(a: &Scrape, b: &Scrape) -> Self {
        let d = |k: &str| {
            b.values.get(k).copied().unwrap_or(0.0) - a.values.get(k).copied().unwrap_or(0.0)
        };
        let nd = "weft_node_delay_seconds";
        let oq = "weft_kernel_send_queue_bytes";
        let (p50, _) = quantile(a.buckets.get(nd), b.buckets.get(nd), 0.5);
        let (p99, _) = quantile(a.buckets.get(nd), b.buckets.get(nd), 0.99);
        let (o50, n) = quantile(a.buckets.get(oq), b.buckets.get(oq), 0.5);
        let (o99, _) = quantile(a.buckets.get(oq), b.buckets.get(oq), 0.99);
        RelayMetrics {
            cells: d("weft_worker_relayed_cells_total"),
            worker_allocations: d("weft_worker_allocations_total"),
            node_delay_p50_ms: p50 * 1e3,
            node_delay_p99_ms: p99 * 1e3,
            node_delay_buckets_ms: delta(a.buckets.get(nd), b.buckets.get(nd))
                .into_iter()
                .map(|(le, c)| (le * 1e3, c))
                .collect(),
            outq_samples: n,
            outq_p50_bytes: o50,
            outq_p99_bytes: o99,
            main_cpu_s: d("weft_main_thread_cpu_seconds_total"),
            cross_cells: d("weft_worker_cross_worker_cells_total"),
            rounds: d("weft_worker_rounds_total"),
            wakeups: d("weft_worker_wakeups_sent_total"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_and_quantiles_from_buckets() {
        let a = parse("weft_node_delay_seconds_bucket{worker=\"0\",le=\"0.001\"} 10\nweft_node_delay_seconds_bucket{worker=\"0\",le=\"+Inf\"} 10\nweft_worker_relayed_cells_total{worker=\"0\"} 100\n");
        let b = parse("# HELP x\nweft_node_delay_seconds_bucket{worker=\"0\",le=\"0.001\"} 60\nweft_node_delay_seconds_bucket{worker=\"1\",le=\"0.001\"} 0\nweft_node_delay_seconds_bucket{worker=\"0\",le=\"0.002\"} 109\nweft_node_delay_seconds_bucket{worker=\"0\",le=\"+Inf\"} 110\nweft_worker_relayed_cells_total{worker=\"0\"} 150\nweft_worker_relayed_cells_total{worker=\"1\"} 50\n");
        let m = RelayMetrics::between(&a, &b);
        assert_eq!(m.cells, 100.0);
        assert_eq!(m.node_delay_p50_ms, 1.0, "50 of 100 new cells under 1 ms");
        assert_eq!(m.node_delay_p99_ms, 2.0);
        assert_eq!(
            m.node_delay_buckets_ms,
            [(1.0, 50.0), (2.0, 109.0), (f64::INFINITY, 100.0)]
        );
    }
}
