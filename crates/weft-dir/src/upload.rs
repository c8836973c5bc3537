//! Uploading the server descriptor (and extra-info) to one directory
//! authority: `POST /tor/` over plain HTTP/1.0 to its DirPort
//! (protocol-notes §10.3; dir-spec §2.1; C Tor
//! `directory_handle_command_post()` in src/feature/dircache/dircache.c).
//!
//! The authority answers `200` when it accepted the descriptor, `200` with
//! `X-Descriptor-Not-New: Yes` when it already had it (or an equivalent
//! one), and `400 <reason>` when it rejected it. Calling this for each
//! configured authority, and when, is the caller's business.

use std::net::SocketAddr;
use std::time::Duration;

use crate::http::{self, HttpResponse};
use crate::DirError;

/// Largest answer we read from an authority for an upload.
pub const MAX_UPLOAD_RESPONSE: usize = 64 * 1024;
/// Longest `X-Desc-Gen-Reason` value we send.
const MAX_REASON: usize = 200;

/// What the authority made of an upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadOutcome {
    /// `200`: no error. Usually the descriptor was added, but C Tor also
    /// answers a plain `200` when it could not *parse* the body (a bad
    /// signature or syntax is logged at the authority and the document
    /// dropped, not answered with `400`). Confirm with
    /// [`fetch_descriptor_digest`].
    Accepted,
    /// `200` with `X-Descriptor-Not-New: Yes`: nothing new (identical, or
    /// only cosmetic changes within the last 2 hours). Not an error.
    NotNew,
    /// Any other status; for `400` the reason is the authority's rejection
    /// message (e.g. "Missing TAP key in descriptor.").
    Rejected {
        /// HTTP status code.
        status: u16,
        /// Status-line reason phrase (sanitised).
        reason: String,
    },
}

/// The upload body: the descriptor immediately followed by the extra-info.
pub fn upload_body(descriptor: &str, extra_info: Option<&str>) -> String {
    let mut b = String::with_capacity(descriptor.len() + extra_info.map_or(0, str::len));
    b.push_str(descriptor);
    if let Some(ei) = extra_info {
        b.push_str(ei);
    }
    b
}

/// Classify an authority's answer to `POST /tor/` (sans-IO).
pub fn interpret_response(r: &HttpResponse) -> UploadOutcome {
    if r.status == 200 {
        let not_new = r
            .header("X-Descriptor-Not-New")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes"));
        if not_new {
            UploadOutcome::NotNew
        } else {
            UploadOutcome::Accepted
        }
    } else {
        UploadOutcome::Rejected {
            status: r.status,
            reason: r.reason.clone(),
        }
    }
}

/// POST `body` (see [`upload_body`]) to the authority at `dirport`, with
/// `reason` as the informative `X-Desc-Gen-Reason` header (control
/// characters replaced, length capped). The whole exchange is bounded by
/// `timeout` and by [`MAX_UPLOAD_RESPONSE`].
pub async fn post_descriptor(
    dirport: SocketAddr,
    body: &str,
    reason: &str,
    timeout: Duration,
) -> Result<UploadOutcome, DirError> {
    let reason = http::sanitize(reason, MAX_REASON);
    let req = http::build_request(
        "POST",
        "/tor/",
        dirport,
        &[("X-Desc-Gen-Reason", &reason)],
        Some(body.as_bytes()),
    )?;
    let resp = http::exchange(dirport, &req, MAX_UPLOAD_RESPONSE, timeout).await?;
    let outcome = interpret_response(&resp);
    tracing::debug!(%dirport, ?outcome, "descriptor upload answered");
    Ok(outcome)
}

/// Ask the authority at `dirport` which server descriptor it holds for the
/// relay with RSA identity `fingerprint` (`GET /tor/server/fp/<hex>`), and
/// return that descriptor's digest ([`crate::descriptor::signed_digest`]),
/// or `None` when it has none (404). Comparing it with the digest of what
/// we uploaded tells whether the upload really took effect.
pub async fn fetch_descriptor_digest(
    dirport: SocketAddr,
    fingerprint: &[u8; 20],
    timeout: Duration,
) -> Result<Option<[u8; 20]>, DirError> {
    let path = format!("/tor/server/fp/{}", hex::encode_upper(fingerprint));
    let req = http::build_request("GET", &path, dirport, &[], None)?;
    let resp = http::exchange(dirport, &req, MAX_UPLOAD_RESPONSE, timeout).await?;
    match resp.status {
        200 => {}
        404 => return Ok(None),
        status => {
            return Err(DirError::Status {
                status,
                reason: resp.reason,
            })
        }
    }
    if resp
        .header("Content-Encoding")
        .is_some_and(|e| !e.eq_ignore_ascii_case("identity"))
    {
        return Err(DirError::Decompress("unexpected Content-Encoding".into()));
    }
    let text = std::str::from_utf8(&resp.body).map_err(|_| DirError::Parse {
        what: "server descriptor",
        why: "not UTF-8".into(),
    })?;
    if text.is_empty() {
        return Ok(None);
    }
    let start = text.find("router ").ok_or(DirError::Parse {
        what: "server descriptor",
        why: "no router item".into(),
    })?;
    crate::descriptor::signed_digest(&text[start..])
        .map(Some)
        .ok_or(DirError::Parse {
            what: "server descriptor",
            why: "no router-signature item".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot fake DirPort: records the request, sends `answer`.
    async fn fake_dirport(answer: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = Vec::new();
            let mut b = [0u8; 4096];
            // Read headers + Content-Length body.
            loop {
                let n = s.read(&mut b).await.unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&b[..n]);
                if let Some(p) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&req[..p]).to_string();
                    let cl: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    if req.len() >= p + 4 + cl {
                        break;
                    }
                }
            }
            s.write_all(answer).await.unwrap();
            req
        });
        (addr, h)
    }

    #[tokio::test]
    async fn outcomes() {
        let t = Duration::from_secs(5);
        let (a, h) = fake_dirport(b"HTTP/1.0 200 OK\r\nDate: x\r\n\r\n").await;
        let body = upload_body("router x\n", Some("extra-info x\n"));
        assert_eq!(
            post_descriptor(a, &body, "testing\r\nEvil: yes", t)
                .await
                .unwrap(),
            UploadOutcome::Accepted
        );
        let req = String::from_utf8(h.await.unwrap()).unwrap();
        assert!(req.starts_with("POST /tor/ HTTP/1.0\r\n"), "{req}");
        assert!(req.contains("\r\nContent-Length: 22\r\n"), "{req}");
        assert!(
            req.contains("\r\nX-Desc-Gen-Reason: testing??Evil: yes\r\n"),
            "{req}"
        );
        assert!(req.ends_with("\r\n\r\nrouter x\nextra-info x\n"), "{req}");

        let (a, _h) =
            fake_dirport(b"HTTP/1.0 200 OK\r\nDate: x\r\nX-Descriptor-Not-New: Yes\r\n\r\n").await;
        assert_eq!(
            post_descriptor(a, "x", "r", t).await.unwrap(),
            UploadOutcome::NotNew
        );
        let (a, _h) = fake_dirport(b"HTTP/1.0 400 Missing TAP key in descriptor.\r\n\r\n").await;
        assert_eq!(
            post_descriptor(a, "x", "r", t).await.unwrap(),
            UploadOutcome::Rejected {
                status: 400,
                reason: "Missing TAP key in descriptor.".into()
            }
        );
        let (a, _h) = fake_dirport(b"garbage\r\n\r\n").await;
        assert!(matches!(
            post_descriptor(a, "x", "r", t).await,
            Err(DirError::BadHttp(_))
        ));
    }
}
