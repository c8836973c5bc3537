//! Numbers with units in a torrc, read as C Tor's `config_parse_units`
//! (`lib/confmgt/unitparse.c`) reads them: an integer or a decimal, then
//! optional white space, then a unit from C's table (any case; none means
//! bytes, seconds or milliseconds): `1 GB`, `1GB`, `1.5 TBytes`, `6 hours`,
//! `100 msec`. Memory units include C's bit units (`kbits` is 128 bytes).

/// C's `memory_units`: name and bytes.
const MEMORY: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("byte", 1),
    ("bytes", 1),
    ("kb", 1 << 10),
    ("kbyte", 1 << 10),
    ("kbytes", 1 << 10),
    ("kilobyte", 1 << 10),
    ("kilobytes", 1 << 10),
    ("kilobits", 1 << 7),
    ("kilobit", 1 << 7),
    ("kbits", 1 << 7),
    ("kbit", 1 << 7),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("mbyte", 1 << 20),
    ("mbytes", 1 << 20),
    ("megabyte", 1 << 20),
    ("megabytes", 1 << 20),
    ("megabits", 1 << 17),
    ("megabit", 1 << 17),
    ("mbits", 1 << 17),
    ("mbit", 1 << 17),
    ("gb", 1 << 30),
    ("gbyte", 1 << 30),
    ("gbytes", 1 << 30),
    ("gigabyte", 1 << 30),
    ("gigabytes", 1 << 30),
    ("gigabits", 1 << 27),
    ("gigabit", 1 << 27),
    ("gbits", 1 << 27),
    ("gbit", 1 << 27),
    ("tb", 1 << 40),
    ("tbyte", 1 << 40),
    ("tbytes", 1 << 40),
    ("terabyte", 1 << 40),
    ("terabytes", 1 << 40),
    ("terabits", 1 << 37),
    ("terabit", 1 << 37),
    ("tbits", 1 << 37),
    ("tbit", 1 << 37),
];

/// C's `time_units`: name and seconds.
const TIME: &[(&str, u64)] = &[
    ("", 1),
    ("second", 1),
    ("seconds", 1),
    ("minute", 60),
    ("minutes", 60),
    ("hour", 3600),
    ("hours", 3600),
    ("day", 86400),
    ("days", 86400),
    ("week", 7 * 86400),
    ("weeks", 7 * 86400),
    ("month", 2_629_728),
    ("months", 2_629_728),
];

/// C's `time_msec_units`: name and milliseconds.
const TIME_MSEC: &[(&str, u64)] = &[
    ("", 1),
    ("msec", 1),
    ("millisecond", 1),
    ("milliseconds", 1),
    ("second", 1000),
    ("seconds", 1000),
    ("minute", 60_000),
    ("minutes", 60_000),
    ("hour", 3_600_000),
    ("hours", 3_600_000),
    ("day", 86_400_000),
    ("days", 86_400_000),
    ("week", 7 * 86_400_000),
    ("weeks", 7 * 86_400_000),
];

/// `config_parse_units`: the number times its unit's multiplier, at most
/// `INT64_MAX`.
fn parse(v: &str, table: &[(&str, u64)]) -> Result<u64, String> {
    let v = v.trim();
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(v.len());
    let (num, rest) = v.split_at(end);
    let unit = rest.trim_start();
    let Some(&(_, mult)) = table.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(if num.is_empty() {
            format!("Unable to parse {v} as a number")
        } else {
            format!("Unknown unit in {v}")
        });
    };
    let overflow = || format!("Overflow while parsing {v}");
    if let Ok(n) = num.parse::<u64>() {
        let r = n.checked_mul(mult).ok_or_else(overflow)?;
        return if r > i64::MAX as u64 {
            Err(overflow())
        } else {
            Ok(r)
        };
    }
    let d: f64 = num
        .parse()
        .map_err(|_| format!("Unable to parse {v} as a number"))?;
    let r = d * mult as f64;
    if !(0.0..=i64::MAX as f64).contains(&r) {
        return Err(overflow());
    }
    Ok(r as u64)
}

/// A memory or bandwidth quantity in bytes (`config_parse_memunit`).
pub fn memunit(v: &str) -> Result<u64, String> {
    parse(v, MEMORY)
}

/// An interval in seconds (`config_parse_interval`: at most `INT_MAX`).
pub fn interval(v: &str) -> Result<u64, String> {
    let s = parse(v, TIME)?;
    if s > i32::MAX as u64 {
        return Err(format!("Interval '{v}' is too long"));
    }
    Ok(s)
}

/// An interval in milliseconds (`config_parse_msec_interval`: at most
/// `INT_MAX`).
pub fn msec_interval(v: &str) -> Result<u64, String> {
    let ms = parse(v, TIME_MSEC)?;
    if ms > i32::MAX as u64 {
        return Err(format!("Msec interval '{v}' is too long"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_c_reads_them() {
        assert_eq!(memunit("1 GB"), Ok(1 << 30));
        assert_eq!(memunit("1GB"), Ok(1 << 30), "no space needed");
        assert_eq!(memunit("1 TBytes"), Ok(1 << 40));
        assert_eq!(memunit("100 KB"), Ok(102_400));
        assert_eq!(memunit("8 kbits"), Ok(1024));
        assert_eq!(memunit("1.5 MB"), Ok(1_572_864));
        assert_eq!(memunit("500"), Ok(500));
        assert_eq!(memunit("2 M"), Ok(2 << 20));
        assert!(memunit("1 parsec").unwrap_err().contains("Unknown unit"));
        assert!(memunit("lots").unwrap_err().contains("Unable to parse"));
        assert!(memunit("-1 KB").is_err());
        assert!(memunit("9999999999 TB").unwrap_err().contains("Overflow"));
        assert_eq!(interval("6 hours"), Ok(21_600));
        assert_eq!(interval("30 days"), Ok(2_592_000));
        assert_eq!(interval("1 month"), Ok(2_629_728));
        assert_eq!(interval("10"), Ok(10));
        assert!(interval("10 s").is_err(), "C has no 's'");
        assert!(interval("100 years").is_err());
        assert!(interval("1000000 weeks").unwrap_err().contains("too long"));
        assert_eq!(msec_interval("100 msec"), Ok(100));
        assert_eq!(msec_interval("2 seconds"), Ok(2000));
        assert!(msec_interval("10 ms").is_err(), "C has no 'ms'");
    }
}
