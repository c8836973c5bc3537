//! The global memory limit, `MaxMemInQueues`, as C Tor's OOM handler
//! applies it, sans-IO: the default limit from the machine's memory, and
//! the choice of victims — circuits whose oldest queued cell is oldest,
//! until the queues are back under 90% of the limit.
//!
//! The workers own the queues; the controller adds up what they report and,
//! over the limit, asks each for its circuits' (oldest-cell age, bytes),
//! picks one age cutoff over all of them with [`cutoff_age`], and has every
//! worker close its circuits at least that old. No lock, nothing per cell.
//! [C circuitlist.c circuits_handle_oom(); relay.c cell_queues_check_size();
//! config.c compute_real_max_mem_in_queues()]

/// What a queued cell costs (its pool slot). C Tor counts
/// `packed_cell_mem_cost()`, about as much.
pub const CELL_COST: u64 = 544;
/// C Tor's `FRACTION_OF_DATA_TO_RETAIN_ON_OOM`: recover down to this share
/// of the limit.
pub const RETAIN_FRACTION: f64 = 0.90;
/// The smallest limit a relay runs with (C Tor's `MIN_SERVER_MB`).
pub const MIN_LIMIT: u64 = 64 << 20;
/// The largest default (C Tor's `MAX_DEFAULT_MEMORY_QUEUE_SIZE`, 64-bit).
pub const MAX_DEFAULT_LIMIT: u64 = 8 << 30;

/// C Tor's default `MaxMemInQueues` for a machine with `total_ram` bytes
/// (None: unknown): 40% of it from 8 GiB up, else 75%, between 256 MiB and
/// 8 GiB; 8 GiB when the memory is unknown.
pub fn default_limit(total_ram: Option<u64>) -> u64 {
    let Some(ram) = total_ram else {
        return MAX_DEFAULT_LIMIT;
    };
    let avail = if ram >= 8 << 30 {
        ram / 5 * 2
    } else {
        ram / 4 * 3
    };
    avail.clamp(256 << 20, MAX_DEFAULT_LIMIT)
}

/// A configured limit as C Tor takes it: never below [`MIN_LIMIT`].
pub fn configured_limit(v: u64) -> u64 {
    v.max(MIN_LIMIT)
}

/// The machine's memory from `/proc/meminfo` text (`MemTotal: N kB`).
pub fn total_ram_from_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes to recover when the queues hold `total` bytes under `limit`
/// (0: nothing to do).
pub fn to_recover(total: u64, limit: u64) -> u64 {
    if total <= limit {
        return 0;
    }
    total.saturating_sub((limit as f64 * RETAIN_FRACTION) as u64)
}

/// Given every circuit's (age of its oldest queued cell, bytes queued),
/// the age from which circuits must close so that, oldest first, at least
/// `to_recover` bytes are freed. None if nothing is to be recovered.
pub fn cutoff_age(circuits: &mut [(u64, u64)], to_recover: u64) -> Option<u64> {
    if to_recover == 0 || circuits.is_empty() {
        return None;
    }
    circuits.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let mut freed = 0u64;
    let mut cutoff = circuits[0].0;
    for &(age, bytes) in circuits.iter() {
        cutoff = age;
        freed = freed.saturating_add(bytes);
        if freed >= to_recover {
            break;
        }
    }
    Some(cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_as_c_tor() {
        assert_eq!(default_limit(None), 8 << 30);
        assert_eq!(default_limit(Some(12 << 30)), (12u64 << 30) / 5 * 2);
        assert_eq!(
            default_limit(Some(24 << 30)),
            8 << 30,
            "40% capped at 8 GiB"
        );
        assert_eq!(default_limit(Some(4 << 30)), 3 << 30);
        assert_eq!(default_limit(Some(256 << 20)), 256 << 20, "floor");
        assert_eq!(default_limit(Some(64 << 30)), 8 << 30, "ceiling");
        assert_eq!(configured_limit(1 << 20), 64 << 20);
        assert_eq!(
            total_ram_from_meminfo("MemTotal:       24591620 kB\nMemFree: 1 kB\n"),
            Some(24_591_620 * 1024)
        );
    }

    #[test]
    fn the_oldest_circuits_go_first_until_under_ninety_percent() {
        assert_eq!(to_recover(90, 100), 0);
        assert_eq!(to_recover(150, 100), 60);
        let mut c = vec![(5, 10), (50, 30), (20, 40), (40, 5), (1, 100)];
        // 60 bytes: age 50 (30), 40 (5), 20 (40) → cutoff 20.
        assert_eq!(cutoff_age(&mut c, 60), Some(20));
        assert_eq!(cutoff_age(&mut c, 1), Some(50));
        assert_eq!(cutoff_age(&mut c, 10_000), Some(1), "everything");
        assert_eq!(cutoff_age(&mut c, 0), None);
    }
}
