//! weft-dir owns the relay's participation in the Tor directory system
//! (protocol-notes §10):
//!
//! * [`descriptor`] builds and signs the server descriptor and the
//!   extra-info document (sans-IO: keys and parameters in, text out);
//! * [`upload`] posts them to a directory authority's DirPort;
//! * [`consensus`] fetches the consensus and the authority certificates,
//!   verifies the signatures against the configured authorities, and turns
//!   the result into a [`consensus::ConsensusSummary`] (validity times,
//!   network parameters with C Tor's defaults, the relay list);
//! * [`exit_policy`] builds the exit policy from the torrc as C Tor does,
//!   checks streams against it and writes its descriptor lines;
//! * [`cache`] is the directory cache: documents fetched from the
//!   authorities, answered over BEGIN_DIR as C Tor's caches answer;
//! * [`dirport`] fetches documents from an authority's DirPort;
//! * [`http`] is the small, bounded HTTP/1.0 client both use;
//! * [`consdiff`] makes and applies consensus diffs (proposal 140) exactly
//!   as C Tor's `consdiff.c` does (sans-IO: documents in, text out);
//! * [`hs_cache`] is the HSDir's v3 onion-service descriptor cache
//!   (`HSDir=2`): uploads checked and stored, fetches answered, expiry
//!   and the OOM handler, as C Tor's `hs_cache.c`.
//!
//! Everything read from the network is untrusted: sizes are capped before
//! parsing, every network operation has a deadline, and no input can make
//! this crate panic.
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cache;
pub mod consdiff;
pub mod consensus;
pub mod descriptor;
pub mod dirport;
pub mod exit_policy;
#[doc(hidden)]
pub mod fuzzing;
pub mod hs_cache;
pub mod http;
pub mod upload;

pub use descriptor::DescError;

/// Errors of the network-facing parts of this crate (upload, fetch,
/// consensus parsing and verification).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirError {
    /// Connecting, reading or writing failed.
    #[error("I/O error talking to {addr}: {source}")]
    Io {
        /// The directory server.
        addr: std::net::SocketAddr,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The whole exchange did not finish within its deadline.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The response (or its decompressed body) exceeded the size cap.
    #[error("response larger than the {limit}-byte limit")]
    TooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The response was not well-formed HTTP.
    #[error("malformed HTTP response: {0}")]
    BadHttp(&'static str),
    /// The server answered with a status other than 200.
    #[error("HTTP status {status}: {reason}")]
    Status {
        /// The status code.
        status: u16,
        /// The reason phrase (sanitised).
        reason: String,
    },
    /// The compressed body could not be decompressed.
    #[error("cannot decompress body: {0}")]
    Decompress(String),
    /// A document could not be parsed.
    #[error("cannot parse {what}: {why}")]
    Parse {
        /// Which document.
        what: &'static str,
        /// The parser's message.
        why: String,
    },
    /// The consensus is not signed by more than half of the configured
    /// authorities (or a signature failed to verify).
    #[error("consensus signature check failed: {0}")]
    Signatures(String),
    /// The consensus is too old or too far in the future to be used.
    #[error("consensus not timely: {0}")]
    NotTimely(String),
    /// A request argument was invalid (e.g. a header with a newline).
    #[error("invalid request: {0}")]
    BadRequest(&'static str),
    /// Building a document failed.
    #[error(transparent)]
    Desc(#[from] DescError),
}
