//! A circuit built by the test itself, as a relay or client would build
//! it, for what stock tor's controllers cannot ask for (an EXTEND2 naming
//! only an IPv6 address, uploads a stock tor would refuse to send): a
//! link that authenticates as a relay (weft-bench's identity, weft-relay's
//! `LinkConn`), CREATE2 to the first hop, EXTEND2 to further hops, and
//! relay cells to and from any hop (weft-proto's sans-IO `OriginCircuit`).
//! Every wait is bounded.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use weft_proto::cell::{cmd, BODY_LEN};
use weft_proto::origin::{HopTarget, OriginCircuit};
use weft_proto::relay::{self, relay_cmd, RelayHeader};
use weft_relay::link_io::{CellFlow, CellIn, IoState, LinkConn};
use weft_relay::tls::TlsLink;

/// One circuit on its own link.
pub struct OriginClient {
    link: LinkConn,
    circ_id: u32,
    /// The circuit's crypto and hops.
    pub oc: OriginCircuit,
    next_stream: u16,
}

/// A relay cell that came back: the hop it came from, its header, its
/// body (decrypted).
pub type RelayIn = (usize, RelayHeader, [u8; BODY_LEN]);

impl OriginClient {
    /// A link to `hop` as the relay `ident`, and a one-hop circuit.
    pub fn open(ident: &weft_bench::load::Identity, hop: &HopTarget) -> Result<OriginClient> {
        let tcp = mio::net::TcpStream::connect(hop.addr)?;
        let tls = TlsLink::connect(&ident.connector, tcp)?;
        let mine = match hop.addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        let mut link = LinkConn::outbound(
            tls,
            ident.link.clone(),
            hop.addr.ip(),
            vec![mine],
            Some(hop.rsa_id),
            hop.ed_id,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while link
            .advance_handshake(std::time::SystemTime::now())
            .map_err(|e| anyhow::anyhow!("link to {}: {e}", hop.addr))?
            .is_none()
        {
            let _ = link.flush();
            ensure!(
                Instant::now() < deadline,
                "link to {}: no handshake",
                hop.addr
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let circ_id = 0x8000_0001;
        let mut oc = OriginCircuit::new();
        let create2 = oc.create2(hop).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut c = OriginClient {
            link,
            circ_id,
            oc,
            next_stream: 1,
        };
        c.link.queue_cell(circ_id, cmd::CREATE2, &pad(&create2));
        for (command, body) in c.cells_until(|k| k == cmd::CREATED2)? {
            ensure!(command == cmd::CREATED2, "no CREATED2 from {}", hop.addr);
            c.oc.on_created2(&body)
                .map_err(|e| anyhow::anyhow!("CREATED2: {e}"))?;
        }
        Ok(c)
    }

    /// Extend the circuit to `hop` (EXTEND2 in RELAY_EARLY naming only
    /// `hop.addr`'s family) and wait for EXTENDED2.
    pub fn extend(&mut self, hop: &HopTarget) -> Result<()> {
        let mut body = [0u8; BODY_LEN];
        self.oc
            .extend2(hop, &mut body)
            .map_err(|e| anyhow::anyhow!("EXTEND2: {e}"))?;
        self.link.queue_cell(self.circ_id, cmd::RELAY_EARLY, &body);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for (hop_i, h, body) in self.relay_cells()? {
                match h.command {
                    relay_cmd::EXTENDED2 => {
                        return self
                            .oc
                            .on_extended2(relay::data(&body, &h))
                            .map_err(|e| anyhow::anyhow!("EXTENDED2: {e}"));
                    }
                    relay_cmd::TRUNCATED => bail!("hop {hop_i} could not extend to {}", hop.addr),
                    _ => {}
                }
            }
            ensure!(Instant::now() < deadline, "no EXTENDED2 for {}", hop.addr);
        }
    }

    /// A new stream ID.
    pub fn new_stream(&mut self) -> u16 {
        let s = self.next_stream;
        self.next_stream += 1;
        s
    }

    /// Send a relay cell to hop `hop`.
    pub fn send(&mut self, hop: usize, command: u8, stream: u16, data: &[u8]) {
        let mut b = [0u8; BODY_LEN];
        self.oc.send(hop, command, stream, data, &mut b);
        self.link.queue_cell(self.circ_id, cmd::RELAY, &b);
    }

    /// The relay cells that arrive in the next wait for a RELAY cell
    /// (bounded, 30 s); a DESTROY is an error.
    pub fn relay_cells(&mut self) -> Result<Vec<RelayIn>> {
        let mut out = Vec::new();
        for (command, mut body) in self.cells_until(|c| c == cmd::RELAY)? {
            ensure!(command != cmd::DESTROY, "the circuit was destroyed");
            if let Ok((hop, h)) = self.oc.on_backward(&mut body) {
                out.push((hop, h, body));
            }
        }
        Ok(out)
    }

    /// The cells of our circuit until one of command `until` (bounded).
    pub fn cells_until(&mut self, until: impl Fn(u8) -> bool) -> Result<Vec<(u8, [u8; BODY_LEN])>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        loop {
            self.link.flush()?;
            if self.link.fill()? == IoState::Closed {
                bail!("the first hop closed the link");
            }
            let mut done = false;
            let circ = self.circ_id;
            self.link
                .process_cells(|c| {
                    if let CellIn::Fixed {
                        circ_id,
                        command,
                        body,
                    } = c
                    {
                        if circ_id == circ {
                            done |= until(command) || command == cmd::DESTROY;
                            out.push((command, *body));
                        }
                    }
                    CellFlow::Continue
                })
                .map_err(|e| anyhow::anyhow!(e))?;
            if done {
                return Ok(out);
            }
            ensure!(
                Instant::now() < deadline,
                "no answer on the circuit in 30 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Open a stream to `target` ("host:port") at the last hop and wait
    /// for CONNECTED. Returns the stream ID.
    pub fn begin(&mut self, target: &str) -> Result<u16> {
        let sid = self.new_stream();
        let last = self.oc.len() - 1;
        let mut req = target.as_bytes().to_vec();
        req.push(0);
        self.send(last, relay_cmd::BEGIN, sid, &req);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for (_, h, body) in self.relay_cells()? {
                if h.stream_id != sid {
                    continue;
                }
                match h.command {
                    relay_cmd::CONNECTED => return Ok(sid),
                    relay_cmd::END => bail!(
                        "BEGIN {target} refused: END reason {:?}",
                        relay::data(&body, &h).first()
                    ),
                    _ => {}
                }
            }
            ensure!(Instant::now() < deadline, "no CONNECTED for {target}");
        }
    }

    /// Send `data` on stream `sid` to the last hop and read until `want`
    /// bytes came back on it (stays within the first windows: at most 400
    /// cells each way, no SENDME needed).
    pub fn exchange(&mut self, sid: u16, data: &[u8], want: usize) -> Result<Vec<u8>> {
        let max = weft_proto::circuit::flow::DATA_MAX;
        ensure!(
            data.len() <= 400 * max && want <= 400 * max,
            "more than a window"
        );
        let last = self.oc.len() - 1;
        for chunk in data.chunks(max) {
            self.send(last, relay_cmd::DATA, sid, chunk);
        }
        let mut got = Vec::with_capacity(want);
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < want {
            for (_, h, body) in self.relay_cells()? {
                if h.stream_id == sid && h.command == relay_cmd::DATA {
                    got.extend_from_slice(relay::data(&body, &h));
                }
                ensure!(
                    !(h.stream_id == sid && h.command == relay_cmd::END),
                    "stream {sid} ended after {} bytes",
                    got.len()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "{} of {want} bytes back",
                got.len()
            );
        }
        Ok(got)
    }
}

/// A cell body with `data` at its start.
pub fn pad(data: &[u8]) -> [u8; BODY_LEN] {
    let mut b = [0u8; BODY_LEN];
    b[..data.len()].copy_from_slice(data);
    b
}

/// The hop description of relay `fp` from a stock client's microdescriptor
/// (`GETINFO md/id/<fp>`: its ntor key and Ed25519 identity), reached at
/// `addr`.
pub fn hop_from_md(md: &str, fp: &str, addr: std::net::SocketAddr) -> Result<HopTarget> {
    use base64::Engine as _;
    let b64 = |s: &str| -> Result<Vec<u8>> {
        let s = s.trim().trim_end_matches('=');
        Ok(base64::engine::general_purpose::STANDARD_NO_PAD.decode(s)?)
    };
    let ntor = md
        .lines()
        .find_map(|l| l.strip_prefix("ntor-onion-key "))
        .context("no ntor-onion-key in the microdescriptor")?;
    let ed = md
        .lines()
        .find_map(|l| l.strip_prefix("id ed25519 "))
        .context("no ed25519 id in the microdescriptor")?;
    let mut rsa_id = [0u8; 20];
    hex::decode_to_slice(fp.trim_start_matches('$'), &mut rsa_id)?;
    Ok(HopTarget {
        rsa_id,
        ed_id: Some(b64(ed)?.try_into().ok().context("ed25519 id length")?),
        ntor_key: b64(ntor)?.try_into().ok().context("ntor key length")?,
        addr,
    })
}
