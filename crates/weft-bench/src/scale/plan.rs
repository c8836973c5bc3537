//! The pure part of `weft-bench scale`: parsing the steps, spreading a
//! step's circuits unevenly over its connections and choosing the bulk
//! ones, the source addresses, the per-circuit arithmetic and the printed
//! table. No I/O, so all of it is unit-tested.

use std::net::Ipv4Addr;

use serde::Serialize;

/// One step: N connections carrying M circuits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Generator connections (N).
    pub connections: usize,
    /// Circuits over all of them (M), bulk ones included.
    pub circuits: usize,
}

/// The default steps: a middle's few links with many circuits, growing to
/// 100,000 circuits, then a guard's shape at about the most connections
/// one process may hold (RLIMIT_NOFILE is often 20,000 and not raisable;
/// a step is capped below the limit and says so): 16,000 client links,
/// one or two circuits each.
pub const DEFAULT_STEPS: &str = "100:1000,1000:10000,4000:100000,16000:24000";
/// The steps of `--quick`.
pub const QUICK_STEPS: &str = "50:500,200:5000";

/// Parse `"N:M,N:M,..."` (whitespace allowed around items).
pub fn parse_steps(s: &str) -> Result<Vec<Step>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (n, m) = item
            .split_once(':')
            .ok_or_else(|| format!("step {item:?} is not N:M"))?;
        let num = |v: &str, what: &str| -> Result<usize, String> {
            let v = v.trim().replace('_', "");
            match v.parse::<usize>() {
                Ok(0) => Err(format!("step {item:?}: {what} must be at least 1")),
                Ok(x) => Ok(x),
                Err(_) => Err(format!("step {item:?}: {what} {v:?} is not a number")),
            }
        };
        out.push(Step {
            connections: num(n, "connections")?,
            circuits: num(m, "circuits")?,
        });
    }
    if out.is_empty() {
        return Err("no steps given".into());
    }
    Ok(out)
}

/// Spread `m` circuits over `n` connections unevenly, the way a relay's
/// peers differ: connection i gets a share proportional to
/// 1 / (i + 1)^`skew` (a Zipf law; 0 spreads evenly), every connection at
/// least one circuit when m ≥ n, and the counts add up to exactly m
/// (largest remainder).
pub fn split_circuits(n: usize, m: usize, skew: f64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let floor = usize::from(m >= n);
    let rest = m - floor * n;
    let w: Vec<f64> = (0..n).map(|i| ((i + 1) as f64).powf(-skew)).collect();
    let total: f64 = w.iter().sum();
    let exact: Vec<f64> = w.iter().map(|x| x / total * rest as f64).collect();
    let mut out: Vec<usize> = exact.iter().map(|x| floor + x.floor() as usize).collect();
    let mut left = m - out.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let fa = exact[a] - exact[a].floor();
        let fb = exact[b] - exact[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take(n * 2) {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

/// How many of each connection's circuits carry bulk traffic: `active`
/// circuits in all, on connections spaced evenly over the list (one each
/// while there are more connections than bulk circuits), never more than
/// a connection has.
pub fn pick_bulk(counts: &[usize], active: usize) -> Vec<usize> {
    let n = counts.len();
    let mut bulk = vec![0usize; n];
    if n == 0 {
        return bulk;
    }
    let active = active.min(counts.iter().sum());
    for j in 0..active {
        let mut g = j * n / active.max(1);
        for _ in 0..n {
            if bulk[g] < counts[g] {
                bulk[g] += 1;
                break;
            }
            g = (g + 1) % n;
        }
    }
    bulk
}

/// The loopback address generator connection `i` connects from:
/// 127.10.0.1, 127.10.0.2, … (never .0 or .255 in the last two octets).
pub fn source_addr(i: usize) -> Ipv4Addr {
    let a = 10 + (i / (250 * 250)) % 200;
    let b = 1 + (i / 250) % 250;
    let c = 1 + i % 250;
    Ipv4Addr::new(127, a as u8, b as u8, c as u8)
}

/// (after − before) / count, in bytes per unit; None without units.
pub fn per_unit(before: u64, after: u64, count: u64) -> Option<f64> {
    (count > 0).then(|| (after as f64 - before as f64) / count as f64)
}

/// CPU-seconds per GiB; None without bytes.
pub fn cpu_s_per_gib(cpu_s: f64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| cpu_s / (bytes as f64 / (1u64 << 30) as f64))
}

/// How evenly circuits shared a direction: each circuit's cells over the
/// mean, the least and the most, and Jain's index (1 when every circuit
/// got the same, 1/n when one got everything).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Fairness {
    /// Circuits counted.
    pub circuits: usize,
    /// The least a circuit got ÷ the mean.
    pub min_over_mean: f64,
    /// The most ÷ the mean.
    pub max_over_mean: f64,
    /// Jain's fairness index.
    pub jain: f64,
}

/// [`Fairness`] of per-circuit cell counts; None without cells.
pub fn fairness(cells: &[u64]) -> Option<Fairness> {
    let n = cells.len();
    let sum: f64 = cells.iter().map(|&c| c as f64).sum();
    if n == 0 || sum <= 0.0 {
        return None;
    }
    let mean = sum / n as f64;
    let squares: f64 = cells.iter().map(|&c| (c as f64) * (c as f64)).sum();
    Some(Fairness {
        circuits: n,
        min_over_mean: cells.iter().copied().min().unwrap_or(0) as f64 / mean,
        max_over_mean: cells.iter().copied().max().unwrap_or(0) as f64 / mean,
        jain: sum * sum / (n as f64 * squares),
    })
}

/// The CPU share (CPUs) over a window, per 1,000 circuits.
pub fn share_per_1k(cpu_s: f64, wall_s: f64, circuits: u64) -> Option<f64> {
    (circuits > 0 && wall_s > 0.0).then(|| cpu_s / wall_s / (circuits as f64 / 1000.0))
}

/// weft ÷ tor, when both are known and tor's is not zero.
pub fn ratio(tor: Option<f64>, weft: Option<f64>) -> Option<f64> {
    match (tor, weft) {
        (Some(t), Some(w)) if t != 0.0 && t.is_finite() && w.is_finite() => Some(w / t),
        _ => None,
    }
}

/// One row of the printed table: a step, a figure, tor's and weft's
/// values, and how to print them.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// "N:M".
    pub step: String,
    /// What the figure is.
    pub figure: String,
    /// tor's value.
    pub tor: Option<f64>,
    /// weft's value.
    pub weft: Option<f64>,
    /// weft ÷ tor.
    pub ratio: Option<f64>,
    /// Decimals to print.
    #[serde(skip)]
    pub decimals: usize,
}

impl Row {
    /// A row with its ratio.
    pub fn new(
        step: &Step,
        figure: &str,
        tor: Option<f64>,
        weft: Option<f64>,
        decimals: usize,
    ) -> Row {
        Row {
            step: format!("{}:{}", step.connections, step.circuits),
            figure: figure.into(),
            tor,
            weft,
            ratio: ratio(tor, weft),
            decimals,
        }
    }
}

fn cell(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "–".into(),
    }
}

/// The rows as a Markdown table (the step named on its first row only).
pub fn markdown(rows: &[Row]) -> String {
    let mut md =
        String::from("| N:M | figure | tor | weft | weft ÷ tor |\n|---|---|---:|---:|---:|\n");
    let mut last = "";
    for r in rows {
        let step = if r.step == last { "" } else { r.step.as_str() };
        last = &r.step;
        md.push_str(&format!(
            "| {step} | {} | {} | {} | {} |\n",
            r.figure,
            cell(r.tor, r.decimals),
            cell(r.weft, r.decimals),
            cell(r.ratio, 2)
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_of_even_and_uneven_shares() {
        let even = fairness(&[10, 10, 10, 10]).unwrap();
        assert_eq!((even.min_over_mean, even.max_over_mean), (1.0, 1.0));
        assert!((even.jain - 1.0).abs() < 1e-12);
        let one = fairness(&[0, 0, 0, 40]).unwrap();
        assert_eq!((one.min_over_mean, one.max_over_mean), (0.0, 4.0));
        assert!((one.jain - 0.25).abs() < 1e-12);
        assert_eq!(fairness(&[]), None);
        assert_eq!(fairness(&[0, 0]), None);
    }

    #[test]
    fn steps_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_steps(DEFAULT_STEPS).unwrap(),
            vec![
                Step {
                    connections: 100,
                    circuits: 1000
                },
                Step {
                    connections: 1000,
                    circuits: 10000
                },
                Step {
                    connections: 4000,
                    circuits: 100000
                },
                Step {
                    connections: 16000,
                    circuits: 24000
                },
            ]
        );
        assert_eq!(
            parse_steps(" 50:500 , 2_00:5_000,").unwrap(),
            vec![
                Step {
                    connections: 50,
                    circuits: 500
                },
                Step {
                    connections: 200,
                    circuits: 5000
                },
            ]
        );
        assert!(parse_steps("").is_err());
        assert!(parse_steps("100").is_err());
        assert!(parse_steps("100:x").is_err());
        assert!(parse_steps("0:10").is_err());
        assert!(parse_steps("10:0").is_err());
    }

    #[test]
    fn circuits_split_unevenly_and_add_up() {
        for (n, m) in [
            (100, 1000),
            (1000, 10000),
            (4000, 100000),
            (50, 500),
            (7, 3),
            (1, 5),
        ] {
            let v = split_circuits(n, m, 0.8);
            assert_eq!(v.len(), n);
            assert_eq!(v.iter().sum::<usize>(), m, "{n}:{m}");
            if m >= n {
                assert!(v.iter().all(|&c| c >= 1), "{n}:{m}");
            }
        }
        let v = split_circuits(4000, 100000, 0.8);
        assert!(v[0] > 50 * v[3999], "first {} last {}", v[0], v[3999]);
        // Non-increasing (up to rounding by one).
        assert!(v.windows(2).all(|w| w[0] + 1 >= w[1]));
        // Skew 0: even.
        assert_eq!(split_circuits(4, 10, 0.0), vec![3, 3, 2, 2]);
    }

    #[test]
    fn bulk_circuits_go_to_distinct_connections_while_there_are_enough() {
        let counts = split_circuits(100, 1000, 0.8);
        let b = pick_bulk(&counts, 64);
        assert_eq!(b.iter().sum::<usize>(), 64);
        assert!(b.iter().all(|&x| x <= 1));
        // Fewer connections than bulk circuits: spread, within counts.
        let b = pick_bulk(&[1, 10, 2], 8);
        assert_eq!(b.iter().sum::<usize>(), 8);
        assert!(b[0] <= 1 && b[2] <= 2);
        // More bulk than circuits: all of them.
        assert_eq!(pick_bulk(&[1, 2], 64), vec![1, 2]);
    }

    #[test]
    fn source_addresses_are_distinct_loopback_hosts() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..70_000 {
            let a = source_addr(i);
            assert!(a.is_loopback());
            let o = a.octets();
            assert!(o[2] != 0 && o[3] != 0 && o[2] != 255 && o[3] != 255);
            assert!(seen.insert(a), "{a} twice");
        }
        assert_eq!(source_addr(0), Ipv4Addr::new(127, 10, 1, 1));
        assert_eq!(source_addr(250), Ipv4Addr::new(127, 10, 2, 1));
    }

    #[test]
    fn per_circuit_arithmetic() {
        // 100 MiB → 120 MiB over 10,000 circuits: 2,097.152 bytes each.
        let d = per_unit(100 << 20, 120 << 20, 10_000).unwrap();
        assert!((d - 2097.152).abs() < 1e-9);
        // RSS can shrink: negative, not wrapped.
        assert_eq!(per_unit(2000, 1000, 10), Some(-100.0));
        assert_eq!(per_unit(1, 2, 0), None);
        // 3 CPU-s for 2 GiB.
        assert_eq!(cpu_s_per_gib(3.0, 2 << 30), Some(1.5));
        assert_eq!(cpu_s_per_gib(3.0, 0), None);
        // 0.5 CPU-s over 10 s with 20,000 circuits: 0.0025 CPUs per 1,000.
        let s = share_per_1k(0.5, 10.0, 20_000).unwrap();
        assert!((s - 0.0025).abs() < 1e-12);
        assert_eq!(ratio(Some(2.0), Some(1.0)), Some(0.5));
        assert_eq!(ratio(Some(0.0), Some(1.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
    }

    #[test]
    fn table_names_each_step_once() {
        let s = Step {
            connections: 10,
            circuits: 100,
        };
        let md = markdown(&[
            Row::new(&s, "a", Some(2.0), Some(1.0), 1),
            Row::new(&s, "b", None, Some(1.0), 0),
        ]);
        assert!(md.contains("| 10:100 | a | 2.0 | 1.0 | 0.50 |"), "{md}");
        assert!(md.contains("|  | b | – | 1 | – |"), "{md}");
    }
}
