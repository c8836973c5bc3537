//! Test helpers: start a weft process on loopback, and a minimal Tor link
//! client (TLS + VERSIONS + NETINFO as an unauthenticated client) that can
//! send arbitrary, also malformed, cells.

#![allow(dead_code)]

pub mod origin_client;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};

/// A weft process started by a test; killed on drop.
pub struct WeftProcess {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub or_port: u16,
    pub log: PathBuf,
}

impl Drop for WeftProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- weft log ----\n{}", self.log_text());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on 127.0.0.1 outside the kernel's ephemeral range.
pub fn free_port() -> u16 {
    weft_testnet::free_port().unwrap()
}

impl WeftProcess {
    /// Start weft with no authorities (it will not publish anywhere).
    pub fn start(threads: u32, extra: &str) -> WeftProcess {
        Self::start_env(threads, extra, &[])
    }

    /// [`WeftProcess::start`] with environment variables set for weft.
    pub fn start_env(threads: u32, extra: &str, env: &[(&str, &str)]) -> WeftProcess {
        let dir = tempfile::tempdir().unwrap();
        let or_port = free_port();
        let log = dir.path().join("info.log");
        let torrc = dir.path().join("torrc");
        std::fs::write(
            &torrc,
            format!(
                "ORPort 127.0.0.1:{or_port}\nAddress 127.0.0.1\nNickname weftTest\nDataDirectory {}\nLog info file {}\nConnectionThreads {threads}\nExitRelay 0\nExitPolicy reject *:*\n{extra}",
                dir.path().join("data").display(),
                log.display()
            ),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("-f")
            .arg(&torrc)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let p = WeftProcess {
            child,
            dir,
            or_port,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", p.or_port)).is_err() {
            assert!(Instant::now() < deadline, "weft did not open its ORPort");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// Stop weft (SIGTERM: a clean stop that saves its state; bounded
    /// wait) and start it again on the same torrc and data directory.
    pub fn restart(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("-f")
            .arg(self.dir.path().join("torrc"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.or_port))
    }

    /// What a client needs to build a hop to this relay (from its data
    /// directory: fingerprint and ntor key).
    pub fn hop_target(&self) -> anyhow::Result<weft_proto::origin::HopTarget> {
        use anyhow::Context;
        let data = self.dir.path().join("data");
        let fp = std::fs::read_to_string(data.join("fingerprint"))?;
        let mut rsa_id = [0u8; 20];
        hex::decode_to_slice(
            fp.split_whitespace().nth(1).context("fingerprint")?,
            &mut rsa_id,
        )?;
        Ok(weft_proto::origin::HopTarget {
            rsa_id,
            ed_id: None,
            ntor_key: weft_crypto::keys::read_ntor_public(&data)?,
            addr: (std::net::Ipv4Addr::LOCALHOST, self.or_port).into(),
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// The MetricsPort token in `data_dir`, waiting (bounded) for weft to
/// write it ([`weft_bench::metrics::read_token`]).
pub fn metrics_token(data_dir: &Path) -> anyhow::Result<String> {
    weft_bench::metrics::read_token(data_dir)
}

/// Wait until `log` contains `needle`, bounded.
pub fn wait_for_log(p: &WeftProcess, needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if p.log_text().contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

pub const CELL_LEN: usize = 514;

/// A raw TLS link to weft.
pub struct LinkClient {
    pub tls: SslStream<TcpStream>,
    buf: Vec<u8>,
}

impl LinkClient {
    /// TLS only, no Tor handshake.
    pub fn connect_tls(addr: SocketAddr) -> LinkClient {
        let tcp = TcpStream::connect(addr).unwrap();
        Self::tls_over(tcp).expect("TLS handshake")
    }

    /// TLS from local address `from` (e.g. 127.0.0.2, another client);
    /// None if weft refused it (closed before the TLS handshake ended).
    pub fn try_connect_tls_from(addr: SocketAddr, from: std::net::IpAddr) -> Option<LinkClient> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        s.bind(&SocketAddr::new(from, 0).into()).ok()?;
        s.connect(&addr.into()).ok()?;
        Self::tls_over(s.into())
    }

    fn tls_over(tcp: TcpStream) -> Option<LinkClient> {
        tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
        b.set_verify(SslVerifyMode::NONE);
        let c = b.build();
        let mut cfg = c.configure().unwrap();
        cfg.set_verify_hostname(false);
        let tls = cfg.connect("www.example.com", tcp).ok()?;
        Some(LinkClient {
            tls,
            buf: Vec::new(),
        })
    }

    /// TLS and the v3 handshake from local address `from`; None if refused.
    pub fn try_connect_from(addr: SocketAddr, from: std::net::IpAddr) -> Option<LinkClient> {
        let mut c = Self::try_connect_tls_from(addr, from)?;
        if !c.try_send(&[0, 0, 7, 0, 6, 0, 3, 0, 4, 0, 5]) {
            return None;
        }
        c.read_var(2)?;
        c.read_var(4)?;
        c.read_var(4)?;
        c.read_fixed()?;
        let mut body = vec![0, 0, 0, 0, 4, 4, 127, 0, 0, 1, 0];
        body.resize(509, 0);
        let mut cell = vec![0, 0, 0, 0, 8];
        cell.extend_from_slice(&body);
        cell.resize(CELL_LEN, 0);
        c.try_send(&cell).then_some(c)
    }

    /// TLS plus the client side of the v3 handshake (VERSIONS, then NETINFO).
    pub fn connect(addr: SocketAddr) -> LinkClient {
        let mut c = Self::connect_tls(addr);
        c.send(&[0, 0, 7, 0, 6, 0, 3, 0, 4, 0, 5]);
        // Responder flight: VERSIONS (2-byte circ id), CERTS, AUTH_CHALLENGE, NETINFO.
        let v = c.read_var(2).expect("VERSIONS");
        assert_eq!(v.1, 7);
        assert_eq!(c.read_var(4).expect("CERTS").1, 129);
        assert_eq!(c.read_var(4).expect("AUTH_CHALLENGE").1, 130);
        let ni = c.read_fixed().expect("NETINFO");
        assert_eq!(ni.1, 8);
        let mut body = vec![0, 0, 0, 0, 4, 4, 127, 0, 0, 1, 0];
        body.resize(509, 0);
        c.send_fixed(0, 8, &body);
        c
    }

    pub fn send(&mut self, b: &[u8]) {
        self.tls.write_all(b).unwrap();
        self.tls.flush().unwrap();
    }

    pub fn try_send(&mut self, b: &[u8]) -> bool {
        self.tls.write_all(b).is_ok() && self.tls.flush().is_ok()
    }

    pub fn send_fixed(&mut self, circ: u32, cmd: u8, body: &[u8]) {
        let mut c = Vec::with_capacity(CELL_LEN);
        c.extend_from_slice(&circ.to_be_bytes());
        c.push(cmd);
        c.extend_from_slice(body);
        c.resize(CELL_LEN, 0);
        self.send(&c);
    }

    fn fill(&mut self, n: usize) -> bool {
        while self.buf.len() < n {
            let mut chunk = [0u8; 4096];
            match self.tls.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    pub fn read_var(&mut self, width: usize) -> Option<(u32, u8, Vec<u8>)> {
        if !self.fill(width + 3) {
            return None;
        }
        let circ = if width == 2 {
            u32::from(u16::from_be_bytes([self.buf[0], self.buf[1]]))
        } else {
            u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
        };
        let cmd = self.buf[width];
        let len = usize::from(u16::from_be_bytes([
            self.buf[width + 1],
            self.buf[width + 2],
        ]));
        if !self.fill(width + 3 + len) {
            return None;
        }
        let body = self.buf[width + 3..width + 3 + len].to_vec();
        self.buf.drain(..width + 3 + len);
        Some((circ, cmd, body))
    }

    /// Read the next fixed cell (skipping VPADDING/PADDING).
    pub fn read_fixed(&mut self) -> Option<(u32, u8, Vec<u8>)> {
        loop {
            if !self.fill(5) {
                return None;
            }
            let cmd = self.buf[4];
            if cmd == 7 || cmd >= 128 {
                self.read_var(4)?;
                continue;
            }
            if !self.fill(CELL_LEN) {
                return None;
            }
            let circ = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            let body = self.buf[5..CELL_LEN].to_vec();
            self.buf.drain(..CELL_LEN);
            if cmd == 0 {
                continue;
            }
            return Some((circ, cmd, body));
        }
    }

    /// True if the peer closed the connection (EOF or error) within 10 s.
    pub fn closed_by_peer(&mut self) -> bool {
        loop {
            let mut chunk = [0u8; 4096];
            match self.tls.read(&mut chunk) {
                Ok(0) => return true,
                Err(e) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    );
                }
                Ok(_) => continue,
            }
        }
    }
}

/// Path of the weft binary under test.
pub fn weft_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_weft"))
}

/// GET /metrics from a MetricsPort on 127.0.0.1 (with a bearer token if
/// given): (HTTP status, body).
pub fn scrape_metrics(port: u16, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    use anyhow::Context;
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n").as_bytes())?;
    // Read to the end of the body: Content-Length when given (stock tor
    // keeps the connection open after its answer), else to EOF.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if len.is_some_and(|len| body.len() >= len) {
                break;
            }
        }
    }
    let out = String::from_utf8_lossy(&raw).into_owned();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("status line")?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Parse a MetricsPort body with an independent Prometheus text-format
/// parser (`prometheus-parse`).
pub fn parse_metrics(body: &str) -> anyhow::Result<prometheus_parse::Scrape> {
    use anyhow::Context;
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).context("Prometheus text format")
}

/// `n` streams through the SocksPort `socks` to `sink` at once, each moving
/// `bytes` both ways, verified by SHA-256 at both ends (weft-testnet's
/// sink). The first connect is retried while the client has no usable
/// circuit yet (bounded, 180 s). Returns the bytes moved.
pub fn parallel_streams(
    socks: SocketAddr,
    sink: SocketAddr,
    n: usize,
    bytes: u64,
    label: &str,
) -> anyhow::Result<u64> {
    use anyhow::Context;
    use weft_testnet::{traffic, Direction};
    let deadline = Instant::now() + Duration::from_secs(180);
    let first = loop {
        match traffic::socks5_connect(socks, sink, Duration::from_secs(60)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("[{label}] no stream yet ({e:#}); retrying");
                std::thread::sleep(Duration::from_secs(3));
            }
            Err(e) => return Err(e).context(format!("[{label}] first stream")),
        }
    };
    let mut streams = vec![first];
    for i in 1..n {
        streams.push(
            traffic::socks5_connect(socks, sink, Duration::from_secs(60))
                .with_context(|| format!("[{label}] stream {i}"))?,
        );
    }
    let t0 = Instant::now();
    let threads: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                traffic::transfer(s, Direction::Both, bytes, Duration::from_secs(300))
            })
        })
        .collect();
    let mut moved = 0;
    for (i, t) in threads.into_iter().enumerate() {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
            .with_context(|| format!("[{label}] transfer on stream {i}"))?;
        anyhow::ensure!(r.up_bytes == bytes && r.down_bytes == bytes, "{r}");
        moved += r.up_bytes + r.down_bytes;
    }
    eprintln!(
        "[{label}] {n} streams × {} MiB both ways verified in {:.2?}",
        bytes >> 20,
        t0.elapsed()
    );
    Ok(moved)
}

/// weft's MetricsPort page in a test network (its bearer token read from
/// weft's data directory).
pub fn testnet_metrics(net: &weft_testnet::Testnet, port: u16) -> anyhow::Result<String> {
    use anyhow::Context;
    let dir = &net.weft().context("no weft")?.dir;
    let token = metrics_token(dir)?;
    let (status, body) = scrape_metrics(port, Some(&token))?;
    anyhow::ensure!(status == 200, "MetricsPort answered {status}");
    Ok(body)
}

/// The sum of every line of `body` that starts with `prefix` (e.g. one
/// series per worker; 0 if there is none).
pub fn metric_sum(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter_map(|l| {
            l.strip_prefix(prefix)
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

/// weft-bench's load (generators and sinks in this process) through
/// `weft` by procedure `p`; the directory must outlive the load.
pub fn load_through(
    weft: &WeftProcess,
    p: &weft_bench::run::Procedure,
) -> anyhow::Result<(tempfile::TempDir, weft_bench::run::LoadRun)> {
    let hop = weft.hop_target()?;
    let dir = tempfile::tempdir()?;
    let env = weft_bench::run::BenchEnv {
        dir: dir.path().to_path_buf(),
        weft_bin: PathBuf::new(),
        tor_bin: PathBuf::new(),
    };
    let load = weft_bench::run::LoadRun::start(&env, p, Some(hop), None)?;
    Ok((dir, load))
}

/// Run nyx in a tmux terminal (160×50) against the ControlPort at
/// `port` until its screen satisfies `done` (bounded by `timeout`);
/// returns the screen. `nudge` runs once after nyx has had 5 s to start
/// (e.g. to make weft log something). The tmux session is killed after.
pub fn nyx_screen(
    port: u16,
    timeout: Duration,
    nudge: impl FnOnce() -> anyhow::Result<()>,
    done: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    use anyhow::Context;
    let session = format!("weft-nyx-{}-{port}", std::process::id());
    let status = Command::new("tmux")
        .args(["new-session", "-d", "-s", &session, "-x", "160", "-y", "50"])
        .arg(format!("nyx -i 127.0.0.1:{port}"))
        .status()
        .context("tmux (scripts/install-deps.sh installs it)")?;
    anyhow::ensure!(status.success(), "tmux did not start");
    struct KillSession(String);
    impl Drop for KillSession {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .status();
        }
    }
    let _guard = KillSession(session.clone());
    std::thread::sleep(Duration::from_secs(5));
    nudge()?;
    let deadline = Instant::now() + timeout;
    loop {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &session])
            .output()?;
        let screen = String::from_utf8_lossy(&out.stdout).to_string();
        if done(&screen) {
            return Ok(screen);
        }
        anyhow::ensure!(Instant::now() < deadline, "nyx's screen:\n{screen}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A raw control connection.
pub struct Ctl {
    pub r: BufReader<Box<dyn Read>>,
    pub w: Box<dyn Write>,
}

impl Ctl {
    pub fn tcp(port: u16) -> anyhow::Result<Ctl> {
        let s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(Ctl {
            r: BufReader::new(Box::new(s.try_clone()?)),
            w: Box::new(s),
        })
    }

    pub fn unix(path: &Path) -> anyhow::Result<Ctl> {
        let s = std::os::unix::net::UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(Ctl {
            r: BufReader::new(Box::new(s.try_clone()?)),
            w: Box::new(s),
        })
    }

    /// Send a command and read its whole reply.
    pub fn cmd(&mut self, c: &str) -> anyhow::Result<String> {
        self.w.write_all(format!("{c}\r\n").as_bytes())?;
        self.reply()
    }

    pub fn reply(&mut self) -> anyhow::Result<String> {
        let mut out = String::new();
        let mut in_data = false;
        loop {
            let mut l = String::new();
            anyhow::ensure!(
                self.r.read_line(&mut l)? > 0,
                "connection closed; got {out:?}"
            );
            out.push_str(&l);
            if in_data {
                in_data = l != ".\r\n";
                continue;
            }
            if l.len() >= 4 && &l[3..4] == "+" {
                in_data = true;
            } else if l.len() >= 4 && &l[3..4] == " " && !l.starts_with("650") {
                return Ok(out);
            }
        }
    }

    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }

    pub fn authenticate(&mut self, cookie_file: &Path) -> anyhow::Result<()> {
        let cookie = std::fs::read(cookie_file)?;
        let r = self.cmd(&format!("AUTHENTICATE {}", hex::encode(cookie)))?;
        anyhow::ensure!(r == "250 OK\r\n", "{r}");
        Ok(())
    }
}

/// weft in a test network: ConnectionThreads `threads`, a MetricsPort on
/// `metrics_port`.
pub fn weft_node(threads: u32, metrics_port: u16) -> weft_testnet::WeftNode {
    let mut w = weft_testnet::WeftNode::new(weft_bin());
    w.connection_threads = Some(threads);
    w.extra_torrc = vec![format!("MetricsPort 127.0.0.1:{metrics_port}")];
    w
}

/// Start network `cfg` on a free range of ports, saying where it lives
/// (`[label] network in … from port …`).
pub fn start_testnet(
    label: &str,
    mut cfg: weft_testnet::TestnetConfig,
) -> anyhow::Result<weft_testnet::Testnet> {
    cfg.base_port = weft_testnet::pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[{label}] network in {} from port {}",
        cfg.base_dir.display(),
        cfg.base_port
    );
    weft_testnet::Testnet::start(cfg)
}

/// A network in which weft is the only directory cache a client can use:
/// three stock relays with `DirCache 0` (one an exit), no clients, guard
/// flags by the authorities' vote; its files under the test target's
/// temporary directory, named `weft-net-<name>-<pid>`.
pub fn weft_only_cache_config(name: &str) -> weft_testnet::TestnetConfig {
    let base_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-{name}-{}", std::process::id()));
    let mut cfg = weft_testnet::TestnetConfig::new(&base_dir, 0);
    cfg.relays = 3;
    cfg.exits = 1;
    cfg.clients = 0;
    cfg.guards_by_vote = true;
    cfg.relay_torrc = vec![vec!["DirCache 0".to_string()]; 3];
    cfg
}

/// The fingerprints of the stock relays the authorities vote on
/// (authorities, relays, exits; not clients, services or weft).
pub fn stock_relays(net: &weft_testnet::Testnet) -> Vec<String> {
    use weft_testnet::Role;
    net.nodes()
        .iter()
        .filter(|n| matches!(n.role, Role::Authority | Role::Relay | Role::Exit))
        .filter_map(|n| n.fingerprint.clone())
        .collect()
}

/// Wait (each at most `bound`) until every node but weft (`weft_fp`) is
/// listed Running and Valid, and exit0 Exit: the whole network first, so
/// that a client starting from the consensus finds its exits.
pub fn wait_stock_listed(
    net: &mut weft_testnet::Testnet,
    weft_fp: &str,
    bound: std::time::Duration,
) -> anyhow::Result<()> {
    let stock: Vec<String> = net
        .nodes()
        .iter()
        .filter_map(|n| n.fingerprint.clone())
        .filter(|f| f != weft_fp)
        .collect();
    net.wait_until_listed(&stock, &["Running", "Valid"], bound)?;
    let exit = net.fingerprint("exit0")?;
    net.wait_until_listed(&[exit], &["Exit"], bound)?;
    Ok(())
}
