//! Who may scrape the MetricsPort, and the one-request HTTP exchange that
//! serves it.
//!
//! Two modes ([`MetricsAccess`]):
//! * **`MetricsPortPolicy` in the torrc** (C Tor's meaning): the policy's
//!   rules are tried in order, the first that matches the peer's address
//!   decides, and an address no rule matches is rejected (C appends
//!   `reject *:*`). An accepted address is served with nothing more; a
//!   rejected one has its connection closed without a reply, as C's
//!   `metrics_connection_process_inbuf` does.
//! * **No policy**: C Tor would refuse everyone; weft serves any address
//!   that presents `Authorization: Bearer <token>`, the token being the
//!   hex content of `DataDirectory/metrics_auth_cookie` (32 random bytes,
//!   written 0600 at start-up; Prometheus reads it with
//!   `authorization.credentials_file`).

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info};
use weft_dir::exit_policy::Rule;

/// How the MetricsPort decides who may scrape it.
#[derive(Debug, Clone)]
pub enum MetricsAccess {
    /// `MetricsPortPolicy`: the address decides (first matching rule,
    /// reject when none matches).
    Policy(Vec<Rule>),
    /// No policy: the bearer token decides.
    Token(String),
}

impl MetricsAccess {
    /// True if a connection from `peer` may be read at all (a policy
    /// rejecting it closes the connection unanswered).
    pub fn admits_address(&self, peer: IpAddr) -> bool {
        match self {
            MetricsAccess::Policy(rules) => rules
                .iter()
                .find(|r| r.matches(peer, 1))
                .is_some_and(|r| r.accept),
            MetricsAccess::Token(_) => true,
        }
    }

    /// True if a request head is authorised (the address was admitted).
    fn authorises(&self, head: &str) -> bool {
        match self {
            MetricsAccess::Policy(_) => true,
            MetricsAccess::Token(token) => head.split("\r\n").skip(1).any(|l| {
                l.split_once(':').is_some_and(|(k, v)| {
                    k.eq_ignore_ascii_case("authorization")
                        && v.trim().strip_prefix("Bearer ").is_some_and(|t| {
                            bool::from(subtle::ConstantTimeEq::ct_eq(
                                t.trim().as_bytes(),
                                token.as_bytes(),
                            ))
                        })
                })
            }),
        }
    }

    /// What the start-up log says of it.
    fn describe(&self) -> &'static str {
        match self {
            MetricsAccess::Policy(_) => "addresses accepted by MetricsPortPolicy",
            MetricsAccess::Token(_) => "bearer token in metrics_auth_cookie",
        }
    }
}

/// Create (or replace) the MetricsPort token file in `data_dir`; returns
/// the token.
pub fn write_cookie(data_dir: &Path) -> std::io::Result<(PathBuf, String)> {
    let token = hex::encode(weft_crypto::random_array::<32>());
    let path = data_dir.join("metrics_auth_cookie");
    weft_crypto::keys::write_private_file(&path, token.as_bytes())
        .map_err(std::io::Error::other)?;
    Ok((path, token))
}

/// Check a request head from an admitted address: `GET /metrics`,
/// authorised. Returns the HTTP status to answer.
pub fn check_request(head: &str, access: &MetricsAccess) -> u16 {
    let first = head.split("\r\n").next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        405
    } else if path != "/metrics" {
        404
    } else if !access.authorises(head) {
        401
    } else {
        200
    }
}

/// Serve one MetricsPort connection: read the request head (bounded in
/// size and time), answer it, close.
pub async fn serve_one(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    access: &MetricsAccess,
    body: impl FnOnce() -> String,
) {
    if !access.admits_address(peer.ip()) {
        debug!("metrics connection from {peer} rejected by MetricsPortPolicy");
        return;
    }
    let mut buf = vec![0u8; 8192];
    let mut used = 0;
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let n = stream.read(&mut buf[used..]).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            used += n;
            if buf[..used].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if used == buf.len() {
                return Ok(false);
            }
        }
    })
    .await;
    let complete = matches!(read, Ok(Ok(true)));
    let head = String::from_utf8_lossy(&buf[..used]);
    let status = if complete {
        check_request(&head, access)
    } else {
        400
    };
    let (reason, text) = match status {
        200 => ("OK", body()),
        401 => {
            debug!("metrics request from {peer} without the right token");
            (
                "Unauthorized",
                "missing or wrong bearer token\n".to_string(),
            )
        }
        404 => ("Not Found", "only /metrics is served\n".to_string()),
        405 => ("Method Not Allowed", "GET only\n".to_string()),
        _ => ("Bad Request", "bad request\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.0 {status} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{text}",
        text.len(),
        if status == 401 { "WWW-Authenticate: Bearer\r\n" } else { "" }
    );
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.write_all(resp.as_bytes()),
    )
    .await;
}

/// Most scrapes answered at once; a connection beyond them is closed
/// unanswered (Prometheus scrapes one at a time per target).
pub const MAX_SCRAPES_AT_ONCE: u64 = 16;

/// The MetricsPort: its listener, who may scrape it, and how many
/// scrapes are being answered now.
pub struct MetricsPort {
    listener: tokio::net::TcpListener,
    access: Rc<MetricsAccess>,
    serving: Rc<Cell<u64>>,
}

impl MetricsPort {
    /// Write the token file (0600), choose the access mode from the
    /// policy (None: not in the torrc), and bind `addr`.
    pub async fn open(
        addr: SocketAddr,
        data_dir: &Path,
        policy: Option<&[Rule]>,
    ) -> anyhow::Result<MetricsPort> {
        let (cookie, token) = write_cookie(data_dir)?;
        let access = match policy {
            Some(rules) => MetricsAccess::Policy(rules.to_vec()),
            None => {
                info!("MetricsPort token in {}", cookie.display());
                MetricsAccess::Token(token)
            }
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on MetricsPort {addr}: {e}"))?;
        info!(
            "MetricsPort listening on {addr} (served to {})",
            access.describe()
        );
        Ok(MetricsPort {
            listener,
            access: Rc::new(access),
            serving: Rc::new(Cell::new(0)),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The next connection, or never when there is no MetricsPort.
    pub async fn accept(
        port: &Option<MetricsPort>,
    ) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
        match port {
            Some(p) => p.listener.accept().await,
            None => std::future::pending().await,
        }
    }

    /// True if a connection from `peer` is to be answered: its address
    /// admitted, and fewer than [`MAX_SCRAPES_AT_ONCE`] being answered
    /// (each holds a rendered page for up to 10 s); else it is dropped
    /// unanswered, before any page is rendered for it.
    pub fn admits(&self, peer: SocketAddr) -> bool {
        if !self.access.admits_address(peer.ip()) {
            debug!("metrics connection from {peer} rejected by MetricsPortPolicy");
            return false;
        }
        if self.serving.get() >= MAX_SCRAPES_AT_ONCE {
            debug!("metrics connection from {peer} dropped: {MAX_SCRAPES_AT_ONCE} scrapes already being answered");
            return false;
        }
        true
    }

    /// Scrapes being answered now.
    pub fn serving(&self) -> u64 {
        self.serving.get()
    }

    /// Answer `stream` with `body` (if its address and request are
    /// admitted) on a task of its own.
    pub fn serve(&self, stream: tokio::net::TcpStream, peer: SocketAddr, body: String) {
        let (access, serving) = (self.access.clone(), self.serving.clone());
        serving.set(serving.get() + 1);
        tokio::task::spawn_local(async move {
            serve_one(stream, peer, &access, move || body).await;
            serving.set(serving.get() - 1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_need_the_token() {
        let t = &MetricsAccess::Token("abc".into());
        let ok = "GET /metrics HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n";
        assert_eq!(check_request(ok, t), 200);
        assert_eq!(
            check_request(
                "GET /metrics HTTP/1.1\r\nauthorization:Bearer abc\r\n\r\n",
                t
            ),
            200
        );
        assert_eq!(check_request("GET /metrics HTTP/1.1\r\n\r\n", t), 401);
        assert_eq!(
            check_request(
                "GET /metrics HTTP/1.1\r\nAuthorization: Bearer abd\r\n\r\n",
                t
            ),
            401
        );
        assert_eq!(
            check_request("GET / HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n", t),
            404
        );
        assert_eq!(check_request("POST /metrics HTTP/1.1\r\n\r\n", t), 405);
        // The request line is not a header: a token there does not count.
        assert_eq!(
            check_request("GET /metrics Authorization: Bearer abc\r\n\r\n", t),
            401
        );
        assert!(t.admits_address("192.0.2.1".parse().unwrap()));
    }

    fn policy(s: &str) -> MetricsAccess {
        let (rules, _) = weft_dir::exit_policy::parse_policy(s).unwrap();
        MetricsAccess::Policy(rules)
    }

    #[test]
    fn policy_first_match_decides_and_none_rejects() {
        let p = policy("accept 127.0.0.1");
        assert!(p.admits_address("127.0.0.1".parse().unwrap()));
        assert!(!p.admits_address("127.0.0.2".parse().unwrap()));
        assert!(!p.admits_address("::1".parse().unwrap()));
        // Accepted addresses need no token.
        assert_eq!(check_request("GET /metrics HTTP/1.0\r\n\r\n", &p), 200);
        assert_eq!(check_request("GET /x HTTP/1.0\r\n\r\n", &p), 404);

        let p = policy("reject 10.0.0.5, accept 10.0.0.0/8, accept [::1]");
        assert!(!p.admits_address("10.0.0.5".parse().unwrap()));
        assert!(p.admits_address("10.9.8.7".parse().unwrap()));
        assert!(p.admits_address("::1".parse().unwrap()));
        assert!(!p.admits_address("192.0.2.1".parse().unwrap()));
        // An empty policy (only the implied reject) admits nobody.
        assert!(!MetricsAccess::Policy(Vec::new()).admits_address("127.0.0.1".parse().unwrap()));
    }
}
