//! Fetching directory documents from an authority's DirPort (the bounded
//! HTTP/1.0 client of [`crate::http`] underneath): the consensus, the
//! authority certificates, microdescriptors; each answer's body decoded
//! per its `Content-Encoding` without ever growing past the caller's cap.

use std::io::Read as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::consensus::{
    parse_microdescs, verify_consensus, AuthorityCerts, ConsensusSummary, FetchOptions,
    MicrodescKeys, MAX_CERTS_SIZE, MAX_MICRODESCS,
};
use crate::http;
use crate::DirError;

/// Decode a directory response body according to its `Content-Encoding`,
/// never producing more than `max` bytes.
fn decode_body(resp: &http::HttpResponse, max: usize) -> Result<Vec<u8>, DirError> {
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    let enc = resp
        .header("Content-Encoding")
        .unwrap_or("identity")
        .to_ascii_lowercase();
    let r = match enc.as_str() {
        "identity" | "" => {
            out.extend_from_slice(&resp.body);
            Ok(out.len())
        }
        "deflate" => flate2::read::ZlibDecoder::new(&resp.body[..])
            .take(limit)
            .read_to_end(&mut out),
        "gzip" | "x-gzip" => flate2::read::GzDecoder::new(&resp.body[..])
            .take(limit)
            .read_to_end(&mut out),
        _ => {
            return Err(DirError::Decompress(format!(
                "unsupported encoding {enc:?}"
            )))
        }
    };
    r.map_err(|e| DirError::Decompress(e.to_string()))?;
    if out.len() > max {
        return Err(DirError::TooLarge { limit: max });
    }
    Ok(out)
}

/// GET `path` from `dirport`, require 200, decode, return text.
pub(crate) async fn get_document(
    dirport: SocketAddr,
    path: &str,
    max: usize,
    timeout: Duration,
) -> Result<String, DirError> {
    let req = http::build_request("GET", path, dirport, &[], None)?;
    let resp = http::exchange(dirport, &req, max, timeout).await?;
    if resp.status != 200 {
        return Err(DirError::Status {
            status: resp.status,
            reason: resp.reason,
        });
    }
    let body = decode_body(&resp, max)?;
    String::from_utf8(body).map_err(|_| DirError::Parse {
        what: path_kind(path),
        why: "not UTF-8".into(),
    })
}

fn path_kind(path: &str) -> &'static str {
    if path.starts_with("/tor/micro") {
        "microdescriptors"
    } else if path.starts_with("/tor/keys") {
        "authority certificates"
    } else {
        "consensus"
    }
}

/// Fetch the current consensus text from an authority's DirPort.
pub async fn fetch_consensus_text(
    dirport: SocketAddr,
    opts: &FetchOptions,
) -> Result<String, DirError> {
    let path = if opts.compressed {
        format!("{}.z", opts.flavor.path())
    } else {
        opts.flavor.path().to_owned()
    };
    get_document(dirport, &path, opts.max_size, opts.timeout).await
}

/// Fetch the microdescriptors with these digests from `dirport` and return
/// the keys of those that match what was asked for.
pub async fn fetch_microdescs(
    dirport: SocketAddr,
    digests: &[[u8; 32]],
    timeout: Duration,
) -> Result<Vec<MicrodescKeys>, DirError> {
    use base64::Engine as _;
    let wanted: Vec<[u8; 32]> = digests.iter().take(MAX_MICRODESCS).copied().collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = wanted
        .iter()
        .map(|d| base64::engine::general_purpose::STANDARD_NO_PAD.encode(d))
        .collect();
    let path = format!("/tor/micro/d/{}", ids.join("-"));
    let text = get_document(dirport, &path, 512 * 1024, timeout).await?;
    Ok(parse_microdescs(&text)
        .into_iter()
        .filter(|m| wanted.contains(&m.digest))
        .collect())
}

/// Fetch all authority certificates the DirPort knows (`/tor/keys/all`).
pub async fn fetch_authority_certs_text(
    dirport: SocketAddr,
    timeout: Duration,
) -> Result<String, DirError> {
    get_document(dirport, "/tor/keys/all", MAX_CERTS_SIZE, timeout).await
}

/// Ask the directory server at `dirport` what address it sees us at: its
/// `X-Your-Address-Is` header (C adds it to every answer but to a nearby
/// peer's; C's `connection_dir_client_reached_eof` reads it from any
/// answer). The request is `/tor/keys/authority`, small whatever the
/// status; None when the header is missing or not an address.
pub async fn fetch_your_address(
    dirport: SocketAddr,
    timeout: Duration,
) -> Result<Option<std::net::IpAddr>, DirError> {
    let req = http::build_request("GET", "/tor/keys/authority", dirport, &[], None)?;
    let resp = http::exchange(dirport, &req, MAX_CERTS_SIZE, timeout).await?;
    Ok(your_address(&resp))
}

/// The `X-Your-Address-Is` of an answer, if it is an address.
pub fn your_address(resp: &http::HttpResponse) -> Option<std::net::IpAddr> {
    resp.header("X-Your-Address-Is")?.trim().parse().ok()
}

/// Fetch the certificates and the consensus from `dirport`, verify the
/// consensus against `trusted_v3idents` (see [`verify_consensus`]) and
/// summarise it.
pub async fn fetch_verified_consensus(
    dirport: SocketAddr,
    trusted_v3idents: &[[u8; 20]],
    now: SystemTime,
    opts: &FetchOptions,
) -> Result<ConsensusSummary, DirError> {
    let certs_text = fetch_authority_certs_text(dirport, opts.timeout).await?;
    let certs = AuthorityCerts::parse(&certs_text, trusted_v3idents, now)?;
    let text = fetch_consensus_text(dirport, opts).await?;
    verify_consensus(&text, opts.flavor, &certs, trusted_v3idents, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_your_address_is_is_read_if_it_is_an_address() {
        let resp = |v: &str| http::HttpResponse {
            status: 404,
            reason: "Not found".into(),
            headers: vec![("X-Your-Address-Is".into(), v.into())],
            body: Vec::new(),
        };
        assert_eq!(
            your_address(&resp("198.51.100.7")),
            Some("198.51.100.7".parse().unwrap())
        );
        assert_eq!(
            your_address(&resp(" 2001:db8::7 ")),
            Some("2001:db8::7".parse().unwrap())
        );
        assert_eq!(your_address(&resp("evil\r\nX: y")), None);
        assert_eq!(your_address(&resp("")), None);
    }

    #[test]
    fn decode_body_bounds_decompression() {
        use flate2::write::ZlibEncoder;
        use std::io::Write;
        let mut e = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b'a'; 1_000_000]).unwrap();
        let z = e.finish().unwrap();
        let resp = |enc: &str, body: Vec<u8>| http::HttpResponse {
            status: 200,
            reason: "OK".into(),
            headers: vec![("Content-Encoding".into(), enc.into())],
            body,
        };
        assert_eq!(
            decode_body(&resp("deflate", z.clone()), 1_000_000)
                .unwrap()
                .len(),
            1_000_000
        );
        assert!(matches!(
            decode_body(&resp("deflate", z), 999_999),
            Err(DirError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_body(&resp("deflate", b"not zlib".to_vec()), 100),
            Err(DirError::Decompress(_))
        ));
        assert!(matches!(
            decode_body(&resp("x-zstd", vec![]), 100),
            Err(DirError::Decompress(_))
        ));
        assert_eq!(
            decode_body(&resp("identity", b"abc".to_vec()), 100).unwrap(),
            b"abc"
        );
    }
}
