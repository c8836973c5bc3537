//! `weft-bench multipath`: Karaoglu et al.'s multipath experiment
//! ("Multi Path Considerations for Anonymized Routing", Tables I and II)
//! with conflux and weft as the exit. A local network of stock tor relays
//! whose bandwidth is limited (`BandwidthRate`, a different rate each) and
//! weft, the only exit; weft-bench's own client (this module: real links,
//! real onion layers) builds 1 to 4 two-hop circuits `relay_i → weft`,
//! links them into one conflux set (LINK / LINKED / LINKED_ACK, congestion
//! control negotiated in ntor-v3), opens one stream and downloads 300 KB
//! and 1.5 MB from a local server, reordering by sequence number as a C
//! client does and acknowledging every `sendme_inc` cells per leg. It
//! reports the transfer time, the speed-up over one leg (the fastest
//! relay), the peak of its own reorder buffer (the receiver's, as in the
//! paper) and how weft spread the cells over the legs.
//!
//! Loopback has no latency and this kernel has no `netem`, so the legs
//! differ by bandwidth only (the paper's circuits differed in both).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weft_proto::cell::{cmd, BODY_LEN};
use weft_proto::circuit::conflux::{self, ux, Link};
use weft_proto::circuit::flow::sendme_v1_body;
use weft_proto::origin::{HopTarget, OriginCircuit};
use weft_proto::relay::{self, relay_cmd};
use weft_relay::link_io::{CellFlow, IoState, LinkConn};
use weft_relay::tls::TlsLink;
use weft_testnet::{TestnetConfig, WeftNode};

use crate::load::Identity;

/// What `weft-bench multipath` does.
#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct MultipathProcedure {
    /// Legs per set to measure (each through its own relay).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4")]
    pub legs: Vec<usize>,
    /// Transfer sizes in bytes (the paper's 300 KB and 1.5 MB).
    #[arg(long, value_delimiter = ',', default_value = "300000,1500000")]
    pub sizes: Vec<u64>,
    /// Transfers per (legs, size).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// BandwidthRate of relay i in KB/s (one per relay; leg i goes
    /// through relay i).
    #[arg(long, value_delimiter = ',', default_value = "200,150,120,100")]
    pub rates_kb: Vec<u32>,
}

/// One transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// Legs of the set.
    pub legs: usize,
    /// Bytes downloaded.
    pub bytes: u64,
    /// BEGIN → last byte, seconds.
    pub seconds: f64,
    /// Peak of the client's reorder buffer, bytes of DATA.
    pub reorder_peak_bytes: u64,
    /// DATA cells that arrived on each leg.
    pub cells_per_leg: Vec<u64>,
    /// SWITCH cells weft sent.
    pub switches: u64,
}

/// The figures for one (legs, size).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Legs.
    pub legs: usize,
    /// Bytes.
    pub bytes: u64,
    /// Median transfer time, s.
    pub median_s: f64,
    /// Median time with one leg / this median.
    pub speedup: f64,
    /// Largest reorder-buffer peak, bytes.
    pub reorder_peak_bytes: u64,
    /// The paper's speed-up for this row (Table I), if it has one.
    pub paper_speedup: Option<f64>,
}

/// The paper's Table I speed-ups (2, 3, 4 circuits) for 300 KB and 1.5 MB.
fn paper_speedup(legs: usize, bytes: u64) -> Option<f64> {
    let t = match bytes {
        300_000 => [1.85, 3.01, 3.92],
        1_500_000 => [1.73, 2.28, 2.49],
        _ => return None,
    };
    legs.checked_sub(2).and_then(|i| t.get(i)).copied()
}

/// Default network directory.
pub fn default_dir() -> PathBuf {
    crate::run::default_dir().join("multipath")
}

/// Start the network, measure every (legs, size), stop everything.
pub fn run(
    base_dir: &Path,
    weft_bin: &Path,
    p: &MultipathProcedure,
) -> Result<(Vec<Transfer>, Vec<Row>)> {
    let max_legs = p.legs.iter().copied().max().unwrap_or(1);
    ensure!(
        p.rates_kb.len() >= max_legs,
        "need a relay (a --rates-kb entry) per leg"
    );
    let server = PatternServer::start()?;
    let mut cfg = TestnetConfig::new(base_dir, 0);
    cfg.relays = p.rates_kb.len();
    cfg.exits = 0;
    cfg.clients = 0;
    cfg.relay_torrc = p
        .rates_kb
        .iter()
        .map(|r| {
            vec![
                format!("BandwidthRate {r} KBytes"),
                format!("BandwidthBurst {r} KBytes"),
                // Loopback is "private": count and limit it too.
                "CountPrivateBandwidth 1".into(),
            ]
        })
        .collect();
    let mut w = WeftNode::new(weft_bin);
    w.connection_threads = Some(2);
    w.exit_policy = vec![
        format!("accept 127.0.0.1:{}", server.addr.port()),
        "reject *:*".into(),
    ];
    let (net, metrics, _) = crate::e2e::start_network(base_dir, cfg, w, &[])?;
    let weft_dir = net.weft().context("no weft")?.dir.clone();
    let weft_hop = hop_target(&weft_dir, net.weft().and_then(|w| w.or_port), true)?;
    let ident = crate::run::identity(&base_dir.join("client"), "mpclient")?;
    let mut links = Vec::new();
    for i in 0..max_legs {
        let n = net.node(&format!("relay{i}"))?;
        let hop = hop_target(&n.dir, n.or_port, false)?;
        links.push(ClientLink::open(&ident, &hop)?);
    }
    let mut transfers = Vec::new();
    for &bytes in &p.sizes {
        for &legs in &p.legs {
            // One unmeasured transfer first: the relays' token buckets
            // start full (a burst of one second's worth); back to back,
            // every measured transfer runs at the limited rates.
            transfer(&mut links[..legs], &weft_hop, server.addr, bytes)
                .with_context(|| format!("{legs} legs, {bytes} B, warm-up"))?;
            for rep in 0..p.reps {
                let t = transfer(&mut links[..legs], &weft_hop, server.addr, bytes)
                    .with_context(|| format!("{legs} legs, {bytes} B, transfer {rep}"))?;
                eprintln!(
                    "[multipath] {legs} legs, {bytes} B: {:.3} s, reorder peak {} B, cells per leg {:?}, {} switches",
                    t.seconds, t.reorder_peak_bytes, t.cells_per_leg, t.switches
                );
                transfers.push(t);
            }
        }
    }
    drop(metrics);
    drop(net);
    Ok((transfers.clone(), rows(&transfers)))
}

fn rows(ts: &[Transfer]) -> Vec<Row> {
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let mut keys: Vec<(u64, usize)> = ts.iter().map(|t| (t.bytes, t.legs)).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for (bytes, legs) in keys {
        let pick = |l: usize| -> Vec<f64> {
            ts.iter()
                .filter(|t| t.bytes == bytes && t.legs == l)
                .map(|t| t.seconds)
                .collect()
        };
        let m = median(&mut pick(legs));
        let one = median(&mut pick(1));
        out.push(Row {
            legs,
            bytes,
            median_s: m,
            speedup: if m > 0.0 && one > 0.0 { one / m } else { 0.0 },
            reorder_peak_bytes: ts
                .iter()
                .filter(|t| t.bytes == bytes && t.legs == legs)
                .map(|t| t.reorder_peak_bytes)
                .max()
                .unwrap_or(0),
            paper_speedup: paper_speedup(legs, bytes),
        });
    }
    out
}

/// The markdown table for docs/perf.md.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| size | legs | median time | speed-up vs 1 leg | paper (Table I) | client reorder peak |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} KB | {} | {:.2} s | {:.2}x | {} | {} KB |\n",
            r.bytes / 1000,
            r.legs,
            r.median_s,
            r.speedup,
            r.paper_speedup
                .map_or("—".to_string(), |x| format!("{x:.2}x")),
            r.reorder_peak_bytes / 1000
        ));
    }
    s
}

/// A node's identities and ORPort as EXTEND2 names them.
fn hop_target(data: &Path, or_port: Option<u16>, weft: bool) -> Result<HopTarget> {
    let (rsa_id, ed) = crate::target::read_fp(data)?;
    let ntor_key = if weft {
        weft_crypto::keys::read_ntor_public(data)?
    } else {
        crate::target::tor_ntor_public(&data.join("keys/secret_onion_key_ntor"))?
    };
    Ok(HopTarget {
        rsa_id,
        ed_id: Some(ed),
        ntor_key,
        addr: SocketAddrV4::new(Ipv4Addr::LOCALHOST, or_port.context("no ORPort")?).into(),
    })
}

/// The local server: each connection sends an 8-byte length, gets that
/// many pattern bytes, and is closed.
struct PatternServer {
    addr: SocketAddr,
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(31) % 251) as u8
}

impl PatternServer {
    fn start() -> Result<PatternServer> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut n = [0u8; 8];
                    if s.read_exact(&mut n).is_err() {
                        return;
                    }
                    let n = u64::from_be_bytes(n).min(1 << 30);
                    let buf: Vec<u8> = (0..n).map(pattern).collect();
                    let _ = s.write_all(&buf);
                });
            }
        });
        Ok(PatternServer { addr })
    }
}

/// A client link to one relay, opened.
struct ClientLink {
    link: LinkConn,
    /// The relay, as the circuits' first hop.
    hop: HopTarget,
}

impl ClientLink {
    fn open(ident: &Identity, hop: &HopTarget) -> Result<ClientLink> {
        let addr = hop.addr;
        let tcp = mio::net::TcpStream::connect(addr)?;
        let tls = TlsLink::connect(&ident.connector, tcp)?;
        let mut link = LinkConn::outbound(
            tls,
            ident.link.clone(),
            addr.ip(),
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            Some(hop.rsa_id),
            hop.ed_id,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let _ = link.flush();
            match link.advance_handshake(SystemTime::now()) {
                Ok(Some(_)) => {
                    return Ok(ClientLink {
                        link,
                        hop: hop.clone(),
                    })
                }
                Ok(None) => {}
                Err(e) => bail!("link to {addr}: {e}"),
            }
            ensure!(Instant::now() < deadline, "link to {addr}: no handshake");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Write what is queued, read what arrived: the cells.
    fn pump(&mut self) -> Result<Vec<(u32, u8, [u8; BODY_LEN])>> {
        self.link.flush()?;
        if self.link.fill()? == IoState::Closed {
            bail!("a relay closed its link");
        }
        let mut cells = Vec::new();
        self.link
            .process_cells(|c| {
                if let weft_relay::link_io::CellIn::Fixed {
                    circ_id,
                    command,
                    body,
                } = c
                {
                    cells.push((circ_id, command, *body));
                }
                CellFlow::Continue
            })
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(cells)
    }
}

#[derive(PartialEq)]
enum LegState {
    Creating,
    Extending,
    Linking,
    Linked,
}

struct Leg {
    circ_id: u32,
    oc: OriginCircuit,
    state: LegState,
    sendme_inc: u64,
    data_cells: u64,
    recv_seq: u64,
}

fn pad(data: &[u8]) -> [u8; BODY_LEN] {
    let mut b = [0u8; BODY_LEN];
    b[..data.len()].copy_from_slice(data);
    b
}

/// Link one circuit per link into a set, download `bytes`, tear down.
fn transfer(
    links: &mut [ClientLink],
    weft: &HopTarget,
    server: SocketAddr,
    bytes: u64,
) -> Result<Transfer> {
    let nonce: [u8; 32] = weft_crypto::random_array();
    let mut legs = Vec::new();
    for l in links.iter_mut() {
        let circ_id = 0x8000_0000 | (u32::from_be_bytes(weft_crypto::random_array()) >> 1);
        let mut oc = OriginCircuit::new();
        let create2 = oc.create2(&l.hop).map_err(|e| anyhow::anyhow!("{e}"))?;
        l.link.queue_cell(circ_id, cmd::CREATE2, &pad(&create2));
        legs.push(Leg {
            circ_id,
            oc,
            state: LegState::Creating,
            sendme_inc: 31,
            data_cells: 0,
            recv_seq: 0,
        });
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut began: Option<Instant> = None;
    let mut delivered = 0u64;
    let mut reorder: BTreeMap<u64, (u8, Vec<u8>)> = BTreeMap::new();
    let mut reorder_bytes = 0u64;
    let mut peak = 0u64;
    let mut got = 0u64;
    let mut switches = 0u64;
    let mut requested = false;
    let mut done: Option<Instant> = None;
    while done.is_none() {
        ensure!(
            Instant::now() < deadline,
            "transfer did not finish in 120 s"
        );
        let mut moved = false;
        for i in 0..legs.len() {
            let cells = links[i].pump()?;
            for (circ_id, command, mut body) in cells {
                if circ_id != legs[i].circ_id {
                    continue;
                }
                moved = true;
                let leg = &mut legs[i];
                match command {
                    cmd::CREATED2 => {
                        leg.oc
                            .on_created2(&body)
                            .map_err(|e| anyhow::anyhow!("CREATED2: {e}"))?;
                        let mut b = [0u8; BODY_LEN];
                        leg.oc
                            .extend2_ntor_v3(weft, &[1, 1, 0], &mut b)
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                        links[i].link.queue_cell(circ_id, cmd::RELAY_EARLY, &b);
                        leg.state = LegState::Extending;
                    }
                    cmd::DESTROY => bail!("leg {i} destroyed (reason {})", body[0]),
                    cmd::RELAY => {
                        let (hop, h) = leg
                            .oc
                            .on_backward(&mut body)
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                        let data = relay::data(&body, &h).to_vec();
                        match h.command {
                            relay_cmd::EXTENDED2 => {
                                leg.oc
                                    .on_extended2(&data)
                                    .map_err(|e| anyhow::anyhow!("EXTENDED2: {e}"))?;
                                let m = leg.oc.server_message(1).unwrap_or_default();
                                ensure!(
                                    m.len() >= 4 && m[1] == 2,
                                    "weft did not grant congestion control: {m:?}"
                                );
                                leg.sendme_inc = u64::from(m[3].max(1));
                                let link = Link {
                                    nonce,
                                    last_seqno_sent: 0,
                                    last_seqno_recv: 0,
                                    desired_ux: ux::HIGH_THROUGHPUT,
                                };
                                let mut b = [0u8; BODY_LEN];
                                leg.oc.send(1, conflux::LINK, 0, &link.encode(), &mut b);
                                links[i].link.queue_cell(circ_id, cmd::RELAY, &b);
                                leg.state = LegState::Linking;
                            }
                            conflux::LINKED => {
                                let mut b = [0u8; BODY_LEN];
                                leg.oc.send(1, conflux::LINKED_ACK, 0, &[], &mut b);
                                links[i].link.queue_cell(circ_id, cmd::RELAY, &b);
                                leg.state = LegState::Linked;
                            }
                            conflux::SWITCH => {
                                switches += 1;
                                leg.recv_seq += u64::from(conflux::parse_switch(&data));
                            }
                            c if hop == 1 && conflux::is_multiplexed(c) => {
                                leg.recv_seq += 1;
                                if c == relay_cmd::DATA {
                                    leg.data_cells += 1;
                                    if leg.data_cells % leg.sendme_inc == 0 {
                                        let tag = leg.oc.last_backward_digest(1).unwrap_or([0; 20]);
                                        let mut b = [0u8; BODY_LEN];
                                        leg.oc.send(
                                            1,
                                            relay_cmd::SENDME,
                                            0,
                                            &sendme_v1_body(&tag),
                                            &mut b,
                                        );
                                        links[i].link.queue_cell(circ_id, cmd::RELAY, &b);
                                    }
                                }
                                if c == relay_cmd::DATA {
                                    reorder_bytes += data.len() as u64;
                                }
                                reorder.insert(leg.recv_seq, (c, data));
                            }
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
        }
        // Deliver in order.
        while let Some(e) = reorder.first_entry() {
            if *e.key() != delivered + 1 {
                break;
            }
            let (c, data) = e.remove();
            delivered += 1;
            if c == relay_cmd::DATA {
                reorder_bytes -= data.len() as u64;
            }
            match c {
                relay_cmd::CONNECTED if !requested => {
                    requested = true;
                    let mut b = [0u8; BODY_LEN];
                    legs[0]
                        .oc
                        .send(1, relay_cmd::DATA, 1, &bytes.to_be_bytes(), &mut b);
                    links[0].link.queue_cell(legs[0].circ_id, cmd::RELAY, &b);
                }
                relay_cmd::DATA => {
                    for (k, &x) in data.iter().enumerate() {
                        ensure!(
                            x == pattern(got + k as u64),
                            "byte {} corrupted",
                            got + k as u64
                        );
                    }
                    got += data.len() as u64;
                    if got >= bytes {
                        done = Some(Instant::now());
                    }
                }
                relay_cmd::END if got < bytes => {
                    bail!("stream ended after {got} of {bytes} bytes")
                }
                _ => {}
            }
        }
        peak = peak.max(reorder_bytes);
        if began.is_none() && legs.iter().all(|l| l.state == LegState::Linked) {
            let mut b = [0u8; BODY_LEN];
            let target = format!("{}:{}\0", server.ip(), server.port());
            legs[0]
                .oc
                .send(1, relay_cmd::BEGIN, 1, target.as_bytes(), &mut b);
            links[0].link.queue_cell(legs[0].circ_id, cmd::RELAY, &b);
            began = Some(Instant::now());
        }
        if !moved {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    for (i, leg) in legs.iter().enumerate() {
        links[i]
            .link
            .queue_cell(leg.circ_id, cmd::DESTROY, &pad(&[0]));
        let _ = links[i].link.flush();
    }
    let (Some(b), Some(d)) = (began, done) else {
        bail!("no transfer")
    };
    Ok(Transfer {
        legs: legs.len(),
        bytes,
        seconds: d.duration_since(b).as_secs_f64(),
        reorder_peak_bytes: peak,
        cells_per_leg: legs.iter().map(|l| l.data_cells).collect(),
        switches,
    })
}
