//! Every torrc option weft takes, with its canonical spelling, the type
//! C Tor's `GETINFO config/names` gives it and its default as GETCONF
//! prints it; plus a few stock tor options that controllers (nyx) ask
//! about and weft does not take, answered with what weft does. The parser
//! records each line under its canonical name for GETCONF and
//! `config-text`.

use weft_relay::context::OptionInfo;

const fn o(name: &'static str, kind: &'static str, default: &'static str) -> OptionInfo {
    OptionInfo {
        name,
        kind,
        default,
    }
}

/// The options (alphabetical, as C Tor lists them).
pub static OPTIONS: &[OptionInfo] = &[
    o("AccountingMax", "DataSize", "0"),
    o("AccountingRule", "String", "max"),
    o("AccountingStart", "String", ""),
    o("Address", "String", ""),
    o("AssumeReachable", "Boolean", "0"),
    o("AssumeReachableIPv6", "Autobool", "auto"),
    o("AvoidDiskWrites", "Boolean", "0"),
    o("BandwidthBurst", "DataSize", "1073741824"),
    o("BandwidthRate", "DataSize", "1073741824"),
    o("CellStatistics", "Boolean", "0"),
    o("CircuitPadding", "Boolean", "1"),
    o("CircuitPriorityHalflife", "Float", "-1"),
    o("ConnDirectionStatistics", "Boolean", "0"),
    o("ConnLimit", "Integer", "1000"),
    o("ConnectionPadding", "Autobool", "auto"),
    o("ConnectionThreads", "Integer", ""),
    o("ContactInfo", "String", ""),
    o("ControlPort", "LineList", ""),
    o("ControlSocket", "LineList", ""),
    o("CookieAuthentication", "Boolean", "0"),
    o("CookieAuthFile", "Filename", ""),
    o("CookieAuthFileGroupReadable", "Boolean", "0"),
    o("DataDirectory", "Filename", "/var/lib/weft"),
    o("DirAuthority", "LineList", ""),
    o("DirCache", "Boolean", "1"),
    // Checked, not used: weft has no DirPort (directory requests come
    // over BEGIN_DIR); a non-zero port gets a warning.
    o("DirPort", "LineList", ""),
    o("DirPortFrontPage", "Filename", ""),
    o("DirReqStatistics", "Boolean", "1"),
    // Checked, not used: weft does not change the process's dumpability.
    o("DisableDebuggerAttachment", "Boolean", "0"),
    o("DoSCircuitCreationBurst", "Integer", "0"),
    o("DoSCircuitCreationDefenseTimePeriod", "Interval", "0"),
    o("DoSCircuitCreationDefenseType", "Integer", "0"),
    o("DoSCircuitCreationEnabled", "Autobool", "auto"),
    o("DoSCircuitCreationMinConnections", "Integer", "0"),
    o("DoSCircuitCreationRate", "Integer", "0"),
    o("DoSConnectionConnectBurst", "Integer", "0"),
    o("DoSConnectionConnectDefenseTimePeriod", "Interval", "0"),
    o("DoSConnectionConnectRate", "Integer", "0"),
    o("DoSConnectionDefenseType", "Integer", "0"),
    o("DoSConnectionEnabled", "Autobool", "auto"),
    o("DoSConnectionMaxConcurrentCount", "Integer", "0"),
    o("DoSRefuseSingleHopClientRendezvous", "Autobool", "auto"),
    o("DoSStreamCreationBurst", "Integer", "0"),
    o("DoSStreamCreationDefenseType", "Integer", "0"),
    o("DoSStreamCreationEnabled", "Autobool", "auto"),
    o("DoSStreamCreationRate", "Integer", "0"),
    o("EntryStatistics", "Boolean", "0"),
    o("ExitPolicy", "LineList", ""),
    o("ExitPolicyRejectLocalInterfaces", "Boolean", "0"),
    o("ExitPolicyRejectPrivate", "Boolean", "1"),
    o("ExitPortStatistics", "Boolean", "0"),
    o("ExitRelay", "Autobool", "auto"),
    o("ExtendAllowPrivateAddresses", "Boolean", "0"),
    o("ExtraInfoStatistics", "Boolean", "1"),
    o("FamilyId", "LineList", ""),
    o("FamilyKeyDirectory", "Filename", ""),
    o("GeoIPFile", "Filename", "/usr/share/tor/geoip"),
    o("GeoIPv6File", "Filename", "/usr/share/tor/geoip6"),
    o("HardwareAccel", "Boolean", "0"),
    o("HashedControlPassword", "LineList", ""),
    o("HeartbeatPeriod", "Interval", "6 hours"),
    // Not taken: weft runs no onion service.
    o("HiddenServiceOptions", "Virtual", ""),
    o("HiddenServiceStatistics", "Boolean", "1"),
    o("IPv6Exit", "Boolean", "0"),
    o("KeepalivePeriod", "Interval", "5 minutes"),
    o("KISTSchedRunInterval", "Interval", "0 msec"),
    o("KISTSockBufSizeFactor", "Float", "1.0"),
    o("Log", "LineList", ""),
    o("MaxAdvertisedBandwidth", "DataSize", "1073741824"),
    o("MaxMemInQueues", "Memunit", "0"),
    o("MetricsPort", "LineList", ""),
    o("MetricsPortPolicy", "LineList", ""),
    o("MyFamily", "LineList", ""),
    o("Nickname", "String", ""),
    o("NoExec", "Boolean", "0"),
    o("NumCPUs", "Integer", "0"),
    o("OfflineMasterKey", "Boolean", "0"),
    o("ORPort", "LineList", ""),
    o("OutboundBindAddress", "LineList", ""),
    o("OutboundBindAddressExit", "LineList", ""),
    o("OutboundBindAddressOR", "LineList", ""),
    o("PaddingStatistics", "Boolean", "1"),
    o("PidFile", "Filename", ""),
    o("ReducedCircuitPadding", "Boolean", "0"),
    o("ReducedConnectionPadding", "Boolean", "0"),
    o("ReducedExitPolicy", "Boolean", "0"),
    o("RelayBandwidthBurst", "DataSize", "0"),
    o("RelayBandwidthRate", "DataSize", "0"),
    o("RunAsDaemon", "Boolean", "0"),
    o("SafeLogging", "String", "1"),
    o("Sandbox", "Boolean", "0"),
    o("Schedulers", "CommaList", "KIST,KISTLite,Vanilla"),
    o("ServerDNSDetectHijacking", "Boolean", "1"),
    o("ServerDNSRandomizeCase", "Boolean", "1"),
    o("ServerDNSResolvConfFile", "Filename", ""),
    o(
        "ServerDNSTestAddresses",
        "CommaList",
        "www.google.com,www.mit.edu,www.yahoo.com,www.slashdot.org",
    ),
    o("ShutdownWaitLength", "Interval", "30 seconds"),
    o("SigningKeyLifetime", "Interval", "30 days"),
    o("SocksPort", "LineList", "0"),
    o("TestingCrossWorkerExtends", "Boolean", "0"),
    o("TestingMigrateEvery", "Integer", "0"),
    o("TestingPaddingStatisticsInterval", "Integer", "86400"),
    o("TestingPlaceOnWorker", "Integer", ""),
    o("TestingReachabilityWarnAfter", "Interval", "20 minutes"),
    o("TestingTorNetwork", "Boolean", "0"),
    o("TokenBucketRefillInterval", "TimeMsecInterval", "100 msec"),
    o("User", "String", ""),
    // Not taken: weft uses microdescriptors, as stock tor's auto does.
    o("UseMicrodescriptors", "Autobool", "auto"),
    o("WorkerSchedSlice", "TimeMsecInterval", "5 msec"),
    // Not taken: weft watches no controller process.
    o("__OwningControllerProcess", "String", ""),
];

/// The canonical spelling of an option (`key` in any case).
pub fn canonical(key: &str) -> Option<&'static str> {
    OPTIONS
        .iter()
        .find(|o| o.name.eq_ignore_ascii_case(key))
        .map(|o| o.name)
}
