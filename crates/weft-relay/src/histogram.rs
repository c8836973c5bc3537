//! Log₂ histograms with fixed buckets (1 µs · 2^k for delays, 1 byte ·
//! 2^k for queue sizes): a worker counts into them without allocating and
//! sends them by value in its report. Owns nothing else; depends on nothing
//! in the crate.

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
}
