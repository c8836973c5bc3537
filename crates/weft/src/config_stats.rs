//! The statistics options (C's `ExtraInfoStatistics`, `DirReqStatistics`,
//! `PaddingStatistics`, `GeoIPFile`, `GeoIPv6File`, with C's defaults),
//! and weft's `TestingPaddingStatisticsInterval` (seconds; only with
//! `TestingTorNetwork 1`), which shortens the day over which
//! `padding-counts` is counted so a test network sees the line.

use std::path::PathBuf;

use weft_relay::context::StatsOptions;

/// The statistics options as read.
#[derive(Debug, Clone, Default)]
pub struct StatsConfig {
    opts: StatsOptions,
    testing_padding_interval: Option<u64>,
}

impl StatsConfig {
    /// Take `key` (lower case) if it is a statistics option: `None` if it
    /// is not one, else whether `val` is acceptable.
    pub fn take(
        &mut self,
        key: &str,
        val: &str,
        parse_bool: impl Fn(&str) -> Result<bool, String>,
    ) -> Option<Result<(), String>> {
        let o = &mut self.opts;
        let r = match key {
            "extrainfostatistics" => parse_bool(val).map(|b| o.extra_info = b),
            "dirreqstatistics" => parse_bool(val).map(|b| o.dirreq = b),
            "paddingstatistics" => parse_bool(val).map(|b| o.padding = b),
            "hiddenservicestatistics" => parse_bool(val).map(|b| o.hidserv = b),
            "geoipfile" => {
                o.geoip_file = PathBuf::from(val);
                Ok(())
            }
            "geoipv6file" => {
                o.geoip6_file = PathBuf::from(val);
                Ok(())
            }
            "testingpaddingstatisticsinterval" => match val.parse::<u64>() {
                Ok(s) if s >= 1 => {
                    self.testing_padding_interval = Some(s);
                    Ok(())
                }
                _ => Err(format!(
                    "bad TestingPaddingStatisticsInterval '{val}' (seconds, at least 1)"
                )),
            },
            _ => return None,
        };
        Some(r)
    }

    /// The options, once the whole configuration is read (`testing`:
    /// `TestingTorNetwork`).
    pub fn finish(self, testing: bool) -> Result<StatsOptions, String> {
        let mut o = self.opts;
        if let Some(s) = self.testing_padding_interval {
            if !testing {
                return Err("TestingPaddingStatisticsInterval requires TestingTorNetwork 1".into());
            }
            o.padding_interval = s;
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_bool(v: &str) -> Result<bool, String> {
        match v {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(format!("bad boolean {v}")),
        }
    }

    #[test]
    fn defaults_are_cs_and_the_testing_interval_needs_a_testing_network() {
        let d = StatsConfig::default().finish(false).unwrap();
        assert!(d.extra_info && d.dirreq && d.padding && d.hidserv);
        assert_eq!(d.padding_interval, 86_400);
        let mut s = StatsConfig::default();
        assert!(s
            .take("paddingstatistics", "0", parse_bool)
            .unwrap()
            .is_ok());
        assert!(s
            .take("paddingstatistics", "x", parse_bool)
            .unwrap()
            .is_err());
        assert!(s.take("nickname", "x", parse_bool).is_none());
        assert!(s
            .take("testingpaddingstatisticsinterval", "0", parse_bool)
            .unwrap()
            .is_err());
        assert!(s
            .take("testingpaddingstatisticsinterval", "30", parse_bool)
            .unwrap()
            .is_ok());
        assert!(s.clone().finish(false).is_err());
        let o = s.finish(true).unwrap();
        assert!(!o.padding);
        assert_eq!(o.padding_interval, 30);
    }
}
