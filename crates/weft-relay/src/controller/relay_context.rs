//! What the workers' relay context is built from: the scheduling and
//! congestion parameters (the torrc where set, else the consensus, else
//! C Tor's defaults), the exit's admission settings (policy, re-entry
//! set, the consensus's relays), our own addresses; and the start of the
//! exit's resolver thread, whose status withdraws or restores the exit.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use weft_dir::consensus::NetParams;
use weft_proto::circuit::congestion::CcParams;

use super::directory::DirState;
use crate::context::{RelayConfig, SchedParams};

/// Scheduling parameters: torrc where set, else the consensus (C Tor's
/// `CircuitPriorityHalflifeMsec`, `KISTSchedRunInterval`), else defaults.
pub(super) fn sched_params(cfg: &RelayConfig, p: &NetParams) -> SchedParams {
    let halflife_s = cfg.circuit_priority_halflife.unwrap_or_else(|| {
        f64::from(p.get_clamped("CircuitPriorityHalflifeMsec", 30_000, -1, i32::MAX)) / 1000.0
    });
    let kist_ms = cfg
        .kist_run_interval_ms
        .unwrap_or_else(|| p.get_clamped("KISTSchedRunInterval", 2, 0, 100) as u64);
    SchedParams {
        allow_nonearly_extend: p.allow_nonearly_extend(),
        halflife_s,
        kist_interval: Duration::from_millis(kist_ms),
        kist_factor: cfg.kist_sock_buf_factor,
        intro_dos: p.intro_dos(),
        dos: crate::dos::DosParams::resolve(&cfg.dos, |name, d, min, max| {
            p.get_clamped(name, d, min, max)
        }),
        sendme_accept_min: p.get_clamped("sendme_accept_min_version", 0, 0, 255) as u8,
        cc: CcParams::from_consensus(|name, d, min, max| p.get_clamped(name, d, min, max)),
        cfx: cfx_params(p),
        // [C channelpadding.c channelpadding_new_consensus_params()]
        conn_timeout_relays_s: p.get_clamped("nf_conntimeout_relays", 3600, 60, 7 * 24 * 3600)
            as u32,
        padding: {
            let mut pp = weft_proto::padding::PaddingParams::from_consensus(|name, d, min, max| {
                p.get_clamped(name, d, min, max)
            });
            // [C circuitpadding.c circpad_is_padding_allowed()]
            pp.circ.disabled |= !cfg.circuit_padding;
            pp
        },
        // [C hs_cache.c hs_cache_get_max_descriptor_size()]
        hs_max_desc_size: p.get_clamped(
            "HSV3MaxDescriptorSize",
            weft_dir::hs_cache::HS_DESC_MAX_LEN as i32,
            1,
            i32::MAX,
        ) as usize,
        keepalive: cfg.keepalive_period,
    }
}

/// The conflux parameters of the consensus (`cfx_enabled`, the kill switch
/// the core checks on every conflux cell, and the set limits).
fn cfx_params(p: &NetParams) -> weft_proto::circuit::conflux::CfxParams {
    weft_proto::circuit::conflux::CfxParams::from_consensus(
        |name, d, min, max| p.get_clamped(name, d, min, max),
        weft_proto::circuit::conflux::DEFAULT_MAX_OOO_BYTES,
    )
}

/// The exit settings workers admit streams with, if the policy accepts
/// anything and the exit was not withdrawn (DNS useless: the published
/// policy is `reject *:*`, and C admits by the published policy).
pub(super) fn exit_settings(
    cfg: &RelayConfig,
    dir: Option<&DirState>,
) -> Option<Arc<crate::context::ExitSettings>> {
    if cfg.exit_policy.is_reject_star() || dir.is_some_and(DirState::exit_withdrawn) {
        return None;
    }
    // The re-entry set as C Tor's nodelist builds it: every listed relay's
    // ORPort, the authorities' ORPorts and DirPorts.
    let mut reentry = std::collections::HashSet::new();
    for a in &cfg.authorities {
        reentry.insert(SocketAddr::new(a.dir_addr.ip(), a.or_port));
        reentry.insert(a.dir_addr);
    }
    if let Some(c) = dir.and_then(|d| d.consensus()) {
        for r in &c.relays {
            reentry.insert(SocketAddr::from((r.address, r.or_port)));
        }
    }
    let param = |name, default| dir.map_or(default, |d| d.params.get_clamped(name, default, 0, 1));
    let allow_reentry = param("allow-network-reentry", 0) == 1;
    let refuse_unknown_exits = param("refuseunknownexits", 1) == 1;
    let known_relays = dir
        .and_then(|d| d.consensus())
        .map(|c| c.relays.iter().map(|r| r.rsa_identity).collect());
    Some(Arc::new(crate::context::ExitSettings {
        policy: cfg.exit_policy.clone(),
        ipv6_exit: !cfg.exit_policy.rejects_all_of(true),
        reentry,
        allow_reentry,
        known_relays,
        refuse_unknown_exits,
    }))
}

pub(super) fn our_addrs(cfg: &RelayConfig) -> Vec<IpAddr> {
    // An unknown address (0.0.0.0 until the authorities tell us) is not
    // said in NETINFO.
    let mut a: Vec<IpAddr> = Some(cfg.advertised.ip())
        .filter(|ip| !ip.is_unspecified())
        .into_iter()
        .collect();
    a.extend(cfg.ipv6_or_port.map(|(_, adv)| IpAddr::V6(*adv.ip())));
    a
}

/// Start the exit's resolver thread (`ServerDNS*` options), its answers
/// going to the asking worker and its changes of status to the
/// controller; false if the name servers cannot be configured (the exit
/// starts withdrawn).
pub(super) fn start_resolver(
    cfg: &RelayConfig,
    requests: crate::resolver::ResolverRequests,
    workers: Vec<crate::worker::WorkerHandle>,
    to_controller: tokio::sync::mpsc::UnboundedSender<crate::messages::ControllerMsg>,
) -> std::io::Result<bool> {
    let conf = crate::resolver::ResolverSetup {
        resolv_conf: cfg.dns_resolv_conf.clone(),
        randomize_case: cfg.dns_randomize_case,
        detect_hijacking: cfg.dns_detect_hijacking,
        test_addresses: cfg.dns_test_addresses.clone(),
        first_check: None,
        retry: crate::resolv_conf::RETRY_INTERVAL,
        // C's defaults until a consensus says (`Controller::params_changed`).
        params: crate::resolver::DnsParams::default(),
    };
    let (_, usable) = requests.spawn(
        conf,
        move |w, answer| {
            if let Some(h) = workers.get(w) {
                h.send(crate::worker::CoreMsg::Resolved(answer));
            }
        },
        move |s| {
            let _ = to_controller.send(crate::messages::ControllerMsg::Dns(s));
        },
    )?;
    Ok(usable)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consensus's `params` line with `cfx_enabled=0` turns conflux off
    /// in what the workers' context is built from (the core then refuses
    /// every LINK: `worker/core/tests/conflux.rs`); without it, or with 1,
    /// it stays on.
    #[test]
    fn the_consensus_kill_switch_reaches_the_context() {
        let off = NetParams::parse_line("cc_alg=2 cfx_enabled=0 cfx_max_legs_set=4");
        assert!(!cfx_params(&off).enabled);
        assert!(cfx_params(&NetParams::parse_line("cfx_enabled=1")).enabled);
        assert!(cfx_params(&NetParams::default()).enabled);
        // Out of range: clamped into 0..=1, as C clamps parameters.
        assert!(cfx_params(&NetParams::parse_line("cfx_enabled=7")).enabled);
    }
}
