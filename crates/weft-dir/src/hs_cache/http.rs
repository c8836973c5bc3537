//! The HSDir's HTTP side (sans-IO), as C Tor's `dircache.c` answers it:
//! which requests are onion-service ones (`GET /tor/hs/3/<blinded key>`,
//! `POST /tor/hs/…`), where an upload's body ends, and the exact answers
//! (`handle_get_hs_descriptor_v3`, `directory_handle_command_post` and
//! `handle_post_hs_descriptor`):
//!
//! | request | answer |
//! |---|---|
//! | either, over a one-hop circuit | 503 "Rejecting single hop HS v3 descriptor request" / "Rejecting single hop HS descriptor post" |
//! | GET, key cached | 200, the descriptor (no Content-Encoding, `Pragma: no-cache`) |
//! | GET, anything else | 404 "Not found" |
//! | POST stored | 200 "HS descriptor stored successfully." |
//! | POST refused (any cause, version not 3, not `/publish`) | 400 "Invalid HS descriptor. Rejected." |
//! | POST while too many wait for their check (weft's own) | 503 "Directory busy, try again later" |

use std::time::SystemTime;

use crate::cache::serve::Request;

/// C's `HS_VERSION_THREE`.
const HS_VERSION: u32 = 3;

/// An onion-service request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HsRequest {
    /// `GET /tor/hs/3/<key>`: the base64 text after the prefix.
    Fetch(String),
    /// `POST /tor/hs/…`: Some(version) if the URL is
    /// `/tor/hs/<version>/publish…` (C's `parse_hs_version_from_post`).
    Publish(Option<u32>),
}

/// Classify a request: None if it is not an onion-service one (the
/// directory cache answers it).
pub fn classify(req: &Request) -> Option<HsRequest> {
    match req.method.as_str() {
        "GET" => req
            .url
            .strip_prefix("/tor/hs/3/")
            .map(|k| HsRequest::Fetch(k.to_owned())),
        "POST" => req
            .url
            .strip_prefix("/tor/hs/")
            .map(|rest| HsRequest::Publish(publish_version(rest))),
        _ => None,
    }
}

/// After `/tor/hs/`: decimal digits, then `/publish` (C uses strtol and
/// `strcmpstart`, so anything may follow `/publish`).
fn publish_version(rest: &str) -> Option<u32> {
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let version: u32 = rest[..digits].parse().ok()?;
    rest[digits..].starts_with("/publish").then_some(version)
}

/// True if `version` is one this cache stores.
pub fn version_supported(version: u32) -> bool {
    version == HS_VERSION
}

/// Where an upload's body stands in the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostBody<'a> {
    /// More bytes are announced (`Content-Length`).
    Incomplete,
    /// The announced body is bigger than `max` (answer 400 now: C reads
    /// it all and refuses it for its size).
    TooLarge,
    /// The body.
    Complete(&'a [u8]),
}

/// The body of the request in `buf` (its head complete): `Content-Length`
/// bytes after the head, or without that header whatever has arrived (C's
/// `fetch_from_buf_http`).
pub fn post_body(buf: &[u8], max: usize) -> PostBody<'_> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return PostBody::Incomplete;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let body = &buf[head_end + 4..];
    let length = head.split("\r\n").skip(1).find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    match length {
        Some(n) if n > max => PostBody::TooLarge,
        Some(n) if body.len() < n => PostBody::Incomplete,
        Some(n) => PostBody::Complete(&body[..n]),
        None if body.len() > max => PostBody::TooLarge,
        None => PostBody::Complete(body),
    }
}

/// The answer to an upload refused or stored, or a fetch not found: C's
/// `write_short_http_response`.
pub fn short_response(status: u16, reason: &str, now: SystemTime) -> Vec<u8> {
    format!(
        "HTTP/1.0 {status} {reason}\r\nDate: {}\r\n\r\n",
        httpdate::fmt_http_date(now)
    )
    .into_bytes()
}

/// How an upload is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostAnswer {
    /// Stored: 200.
    Stored,
    /// Refused, for any cause: 400 (C gives one answer to all).
    Refused,
    /// Over a one-hop circuit: 503.
    SingleHop,
    /// Too many uploads wait for their check: 503 (weft's own; C checks
    /// each as it arrives).
    Busy,
}

impl PostAnswer {
    /// The status code.
    pub fn status(self) -> u16 {
        match self {
            PostAnswer::Stored => 200,
            PostAnswer::Refused => 400,
            PostAnswer::SingleHop | PostAnswer::Busy => 503,
        }
    }

    /// The reason phrase (C's, but for `Busy`).
    pub fn reason(self) -> &'static str {
        match self {
            PostAnswer::Stored => "HS descriptor stored successfully.",
            PostAnswer::Refused => "Invalid HS descriptor. Rejected.",
            PostAnswer::SingleHop => "Rejecting single hop HS descriptor post",
            PostAnswer::Busy => "Directory busy, try again later",
        }
    }

    /// The whole answer (C's `write_short_http_response`).
    pub fn response(self, now: SystemTime) -> Vec<u8> {
        short_response(self.status(), self.reason(), now)
    }
}

/// C's 503 for a fetch over a one-hop circuit.
pub const FETCH_SINGLE_HOP: &str = "Rejecting single hop HS v3 descriptor request";

/// The head of a descriptor fetch's 200 (C's `write_http_response_header`
/// with `NO_METHOD` and no cache lifetime).
pub fn descriptor_head(len: usize, now: SystemTime) -> Vec<u8> {
    format!(
        "HTTP/1.0 200 OK\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\nPragma: no-cache\r\n\r\n",
        httpdate::fmt_http_date(now)
    )
    .into_bytes()
}
