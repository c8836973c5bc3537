//! Exit policy summaries: the `accept`/`reject` port lists of a
//! descriptor's `ipv6-policy` line and of the authorities'
//! microdescriptors, computed as C Tor's `policy_summarize` does (a port
//! counts as accepted if an accept for every address reaches it before
//! more than a cutoff of addresses were rejected on it; rejects of the
//! private networks do not count).

use super::{parse_policy, Rule, PRIVATE_NETS};

/// IPv4: a port is rejected once more than two /8s are (2^25 addresses).
const REJECT_CUTOFF_V4: u64 = 1 << (32 - 7);
/// IPv6: counted in /64s; rejected once more than one /16 is.
const REJECT_CUTOFF_V6: u64 = 1 << (128 - 64 - 16);
/// IPv6 address counts are divided by 2^64.
const SCALE_V6: u32 = 64;
/// Longest summary C Tor writes (it cuts accept lists there).
const MAX_SUMMARY_LEN: usize = 1000;

#[derive(Debug, Clone, Copy)]
struct Item {
    min: u16,
    max: u16,
    rejects: u64,
    accepted: bool,
}

/// Split the items so `min..=max` starts and ends at item boundaries;
/// the index of the item starting at `min`.
fn split(items: &mut Vec<Item>, min: u16, max: u16) -> usize {
    let mut i = items.iter().position(|it| it.max >= min).unwrap_or(0);
    if items[i].min != min {
        let mut new = items[i];
        new.min = min;
        items[i].max = min - 1;
        items.insert(i + 1, new);
        i += 1;
    }
    let start = i;
    while items[i].max < max {
        i += 1;
    }
    if items[i].max != max {
        let mut new = items[i];
        new.min = max + 1;
        items[i].max = max;
        items.insert(i + 1, new);
    }
    start
}

fn is_private(r: &Rule) -> bool {
    PRIVATE_NETS.iter().any(|n| {
        parse_policy(&format!("reject {n}:*"))
            .ok()
            .and_then(|(rules, _)| rules.first().copied())
            .is_some_and(|p| p.net == r.net)
    })
}

/// The summary of `rules` for IPv6 (true) or IPv4: `accept PORTS` or
/// `reject PORTS`, whichever is shorter; `reject 1-65535` if nothing is
/// accepted, `accept 1-65535` if nothing is rejected.
pub fn summarize(rules: &[Rule], ipv6: bool) -> String {
    let mut items = vec![Item {
        min: 1,
        max: 65535,
        rejects: 0,
        accepted: false,
    }];
    for r in rules.iter().filter(|r| r.is_ipv6() == ipv6) {
        if r.port_min > r.port_max {
            continue;
        }
        let bits = u32::from(r.net.prefix_len());
        if r.accept {
            if bits != 0 {
                continue;
            }
            let cutoff = if ipv6 {
                REJECT_CUTOFF_V6
            } else {
                REJECT_CUTOFF_V4
            };
            let mut i = split(&mut items, r.port_min, r.port_max);
            while i < items.len() && items[i].max <= r.port_max {
                if !items[i].accepted && items[i].rejects <= cutoff {
                    items[i].accepted = true;
                }
                i += 1;
            }
        } else if !is_private(r) {
            let (addr_bits, scale) = if ipv6 { (128, SCALE_V6) } else { (32, 0) };
            let mut i = split(&mut items, r.port_min, r.port_max);
            if bits > addr_bits - scale {
                continue;
            }
            let shift = addr_bits - scale - bits;
            let count = if shift >= 64 { u64::MAX } else { 1u64 << shift };
            while i < items.len() && items[i].max <= r.port_max {
                items[i].rejects = items[i].rejects.saturating_add(count);
                i += 1;
            }
        }
    }
    let (mut accepts, mut rejects) = (Vec::new(), Vec::new());
    let mut start = 1u16;
    for i in 0..items.len() {
        let last = i + 1 == items.len();
        if last || items[i].accepted != items[i + 1].accepted {
            let range = if start == items[i].max {
                start.to_string()
            } else {
                format!("{start}-{}", items[i].max)
            };
            if items[i].accepted {
                accepts.push(range);
            } else {
                rejects.push(range);
            }
            if !last {
                start = items[i + 1].min;
            }
        }
    }
    if accepts.is_empty() {
        return "reject 1-65535".to_string();
    }
    if rejects.is_empty() {
        return "accept 1-65535".to_string();
    }
    let (a, r) = (accepts.join(","), rejects.join(","));
    if r.len() > MAX_SUMMARY_LEN - 7 && a.len() > MAX_SUMMARY_LEN - 7 {
        let cut = a[..=MAX_SUMMARY_LEN - 7].rfind(',').unwrap_or(0);
        format!("accept {}", &a[..cut])
    } else if r.len() < a.len() {
        format!("reject {r}")
    } else {
        format!("accept {a}")
    }
}
