//! A minimal HTTP/1.0 client for talking to directory authorities' DirPorts:
//! one request per TCP connection, the response read until the server closes
//! (or until `Content-Length` bytes have arrived), with a hard cap on the
//! response size and one deadline for the whole exchange.
//!
//! Parsing ([`parse_response`]) is sans-IO and total: any byte string gives
//! either a response or a [`DirError`], never a panic. Only [`exchange`]
//! touches the network.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::DirError;

/// Largest header section we accept (status line + headers).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most header lines we keep.
const MAX_HEADERS: usize = 64;
/// Longest reason phrase we keep (it ends up in logs).
const MAX_REASON: usize = 256;

/// A parsed HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code, e.g. 200.
    pub status: u16,
    /// Reason phrase, with control characters removed and length capped.
    pub reason: String,
    /// Header lines as (name, value), in order; values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (after `Content-Length` truncation, if any).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header called `name` (case-insensitive), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Keep printable ASCII only (so peer text cannot forge log lines) and cap
/// the length.
pub(crate) fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(max)
        .collect()
}

/// Where the header section ends: (index of the first body byte).
fn header_end(raw: &[u8]) -> Option<usize> {
    let lim = raw.len().min(MAX_HEADER_BYTES + 4);
    let head = &raw[..lim];
    let crlf = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    let lf = head.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parse a complete HTTP/1.x response (as read until EOF).
pub fn parse_response(raw: &[u8]) -> Result<HttpResponse, DirError> {
    let end = match header_end(raw) {
        Some(e) => e,
        None if raw.len() > MAX_HEADER_BYTES => {
            return Err(DirError::BadHttp("header section too long"))
        }
        None => return Err(DirError::BadHttp("incomplete header section")),
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let status_line = lines.next().ok_or(DirError::BadHttp("no status line"))?;
    let (version, rest) = status_line
        .split_once(' ')
        .ok_or(DirError::BadHttp("bad status line"))?;
    if !version.starts_with("HTTP/1.") {
        return Err(DirError::BadHttp("not an HTTP/1.x response"));
    }
    let rest = rest.trim_start();
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DirError::BadHttp("bad status code"));
    }
    let status: u16 = code
        .parse()
        .map_err(|_| DirError::BadHttp("bad status code"))?;
    let reason = sanitize(reason.trim(), MAX_REASON);

    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if headers.len() >= MAX_HEADERS {
            return Err(DirError::BadHttp("too many headers"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(DirError::BadHttp("header line without ':'"));
        };
        headers.push((sanitize(name.trim(), 128), sanitize(value.trim(), 1024)));
    }
    let mut resp = HttpResponse {
        status,
        reason,
        headers,
        body: raw[end..].to_vec(),
    };
    if let Some(cl) = resp.header("Content-Length") {
        let n: usize = cl
            .parse()
            .map_err(|_| DirError::BadHttp("bad Content-Length"))?;
        if resp.body.len() < n {
            return Err(DirError::BadHttp("body shorter than Content-Length"));
        }
        resp.body.truncate(n);
    }
    Ok(resp)
}

/// If the header section is complete and carries a Content-Length, the total
/// number of bytes the response will have.
fn expected_total(raw: &[u8]) -> Option<usize> {
    let end = header_end(raw)?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    head.split('\n').skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        if n.trim().eq_ignore_ascii_case("Content-Length") {
            end.checked_add(v.trim().parse::<usize>().ok()?)
        } else {
            None
        }
    })
}

fn check_header_value(v: &str) -> Result<(), DirError> {
    if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(DirError::BadRequest(
            "newline or NUL in request line or header",
        ));
    }
    Ok(())
}

/// Build an HTTP/1.0 request. `headers` must not contain CR, LF or NUL
/// (checked); `Content-Length` is added when `body` is given.
pub fn build_request(
    method: &str,
    path: &str,
    host: SocketAddr,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Vec<u8>, DirError> {
    check_header_value(method)?;
    check_header_value(path)?;
    if path.contains(' ') || !path.starts_with('/') {
        return Err(DirError::BadRequest(
            "path must start with '/' and have no spaces",
        ));
    }
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {host}\r\n");
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    for (n, v) in headers {
        check_header_value(n)?;
        check_header_value(v)?;
        if n.is_empty() || n.contains(':') {
            return Err(DirError::BadRequest("bad header name"));
        }
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    Ok(out)
}

/// Send `request` to `addr` and read the response: at most `max_response`
/// bytes (headers included), everything within `timeout`.
///
/// We never half-close our side: a C Tor directory server closes a
/// connection on EOF before it has answered.
pub async fn exchange(
    addr: SocketAddr,
    request: &[u8],
    max_response: usize,
    timeout: Duration,
) -> Result<HttpResponse, DirError> {
    let io = |source| DirError::Io { addr, source };
    let fut = async {
        let mut s = TcpStream::connect(addr).await.map_err(io)?;
        s.write_all(request).await.map_err(io)?;
        s.flush().await.map_err(io)?;
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let n = s.read(&mut chunk).await.map_err(io)?;
            if n == 0 {
                break;
            }
            if buf.len() + n > max_response {
                return Err(DirError::TooLarge {
                    limit: max_response,
                });
            }
            buf.extend_from_slice(&chunk[..n]);
            if expected_total(&buf).is_some_and(|t| buf.len() >= t) {
                break;
            }
        }
        parse_response(&buf)
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| DirError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_c_tor_style_responses() {
        let r = parse_response(b"HTTP/1.0 200 OK\r\nDate: x\r\n\r\n").unwrap();
        assert_eq!((r.status, r.reason.as_str()), (200, "OK"));
        assert!(r.body.is_empty());
        let r = parse_response(
            b"HTTP/1.0 400 Looks like your keypair has changed? This could be a MITM.\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.status, 400);
        assert!(r.reason.starts_with("Looks like"));
        let r = parse_response(b"HTTP/1.0 200 OK\r\nDate: x\r\nX-Descriptor-Not-New: Yes\r\n\r\n")
            .unwrap();
        assert_eq!(r.header("x-descriptor-not-new"), Some("Yes"));
        let r = parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabcdef").unwrap();
        assert_eq!(r.body, b"abc");
        let r = parse_response(b"HTTP/1.1 404\n\nbody").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), &r.body[..]),
            (404, "", &b"body"[..])
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            &b""[..],
            b"\r\n\r\n",
            b"HTTP/1.0\r\n\r\n",
            b"HTTP/1.0 2000 OK\r\n\r\n",
            b"HTTP/1.0 2x0 OK\r\n\r\n",
            b"SSH-2.0 200 OK\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            b"HTTP/1.0 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nno colon here\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n",
            b"\xff\xfe\xfd 200 \xff\r\n\r\n",
        ] {
            assert!(parse_response(bad).is_err(), "{bad:?}");
        }
        let long = vec![b'a'; MAX_HEADER_BYTES + 10];
        assert!(parse_response(&long).is_err());
        // Control characters in the reason are neutralised.
        let r = parse_response(b"HTTP/1.0 400 bad\x1b[31m\x07 thing\r\n\r\n").unwrap();
        assert_eq!(r.reason, "bad?[31m? thing");
    }

    #[test]
    fn request_building_refuses_header_injection() {
        let a: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let r = build_request("POST", "/tor/", a, &[("X-A", "b")], Some(b"xyz")).unwrap();
        assert_eq!(
            r,
            b"POST /tor/ HTTP/1.0\r\nHost: 127.0.0.1:7000\r\nContent-Length: 3\r\nX-A: b\r\n\r\nxyz"
        );
        assert!(build_request("GET", "/tor/", a, &[("X-A", "b\r\nEvil: 1")], None).is_err());
        assert!(build_request("GET", "/tor/ x", a, &[], None).is_err());
        assert!(build_request("GET", "tor", a, &[], None).is_err());
    }

    #[tokio::test]
    async fn exchange_caps_size_and_time() {
        use tokio::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // 1: endless body; 2: never answers; 3: Content-Length, kept open.
            for i in 0..3 {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    let _ = s.read(&mut b).await;
                    match i {
                        0 => {
                            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await;
                            let junk = vec![b'x'; 64 * 1024];
                            for _ in 0..64 {
                                if s.write_all(&junk).await.is_err() {
                                    break;
                                }
                            }
                        }
                        1 => tokio::time::sleep(Duration::from_secs(5)).await,
                        _ => {
                            let _ = s
                                .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                                .await;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                    }
                });
            }
        });
        let req = build_request("GET", "/tor/", addr, &[], None).unwrap();
        let e = exchange(addr, &req, 100_000, Duration::from_secs(5)).await;
        assert!(
            matches!(e, Err(DirError::TooLarge { limit: 100_000 })),
            "{e:?}"
        );
        let e = exchange(addr, &req, 100_000, Duration::from_millis(300)).await;
        assert!(matches!(e, Err(DirError::Timeout(_))), "{e:?}");
        let r = exchange(addr, &req, 100_000, Duration::from_secs(3))
            .await
            .unwrap();
        assert_eq!(r.body, b"ok");
        server.abort();
    }
}
