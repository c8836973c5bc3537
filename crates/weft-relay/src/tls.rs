//! TLS contexts for OR connections (OpenSSL, as C Tor uses): TLS ≥ 1.2, our
//! RSA-2048 link key and certificate as server, no client certificate, no
//! session tickets; as client, no chain verification (the peer's identity is
//! proven by its CERTS cell) while OpenSSL still checks the handshake
//! signature against the presented certificate's key. Key exchange over
//! the groups stock tor 0.4.9 takes (X25519, P-256, P-224; seen on the
//! wire: it refuses P-384 and a post-quantum hybrid share), so weft's
//! links look like C Tor's and hold no ML-KEM key share. [protocol-notes
//! §2.1; C tortls_openssl.c tor_tls_context_new()]

use openssl::ssl::{
    SslAcceptor, SslConnector, SslMethod, SslOptions, SslSessionCacheMode, SslVerifyMode,
    SslVersion,
};
use weft_crypto::keys::LinkKeys;

/// The key-exchange groups, in C Tor's order.
pub const GROUPS: &str = "X25519:P-256:P-224";

/// Build the server and client contexts for one link-key generation.
pub fn contexts(
    link: &LinkKeys,
) -> Result<(SslAcceptor, SslConnector), openssl::error::ErrorStack> {
    let cert = openssl::x509::X509::from_der(&link.tls_cert_der)?;
    let mut a = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    a.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    a.set_private_key(&link.tls_key)?;
    a.set_certificate(&cert)?;
    a.check_private_key()?;
    a.set_options(SslOptions::NO_TICKET);
    a.set_groups_list(GROUPS)?;
    // No session resumption (C Tor's `SSL_SESS_CACHE_OFF`): with TLS 1.3,
    // NO_TICKET alone still sends two stateful tickets and keeps a copy of
    // each connection's session in the context's cache (~0.9 KB per
    // connection, up to 20,480 of them). Nothing ever resumes a link.
    a.set_session_cache_mode(SslSessionCacheMode::OFF);
    a.set_num_tickets(0)?;
    a.set_verify(SslVerifyMode::NONE);
    // Read whole socket buffers at once instead of a record header and then
    // its body: half the read syscalls per relayed byte.
    a.set_read_ahead(true);
    let mut c = SslConnector::builder(SslMethod::tls_client())?;
    c.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    c.set_verify(SslVerifyMode::NONE);
    c.set_read_ahead(true);
    c.set_groups_list(GROUPS)?;
    // What a C Tor client offers (Firefox's order): AES-128-GCM first. The
    // OpenSSL default would put AES-256-GCM first, which costs ~30% more per
    // byte and makes weft's outbound links look unlike C Tor's.
    // [C src/lib/tls/ciphers_v13.inc; protocol-notes §2.1]
    c.set_ciphersuites(
        "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384",
    )?;
    Ok((a.build(), c.build()))
}

/// RFC 5705 keying material for AUTH0003 with `context`.
pub fn export_auth_material(ssl: &openssl::ssl::SslRef, context: &[u8]) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    let label = std::str::from_utf8(weft_proto::link::EXPORTER_LABEL).ok()?;
    ssl.export_keying_material(&mut out, label, Some(context))
        .ok()?;
    Some(out)
}

/// Progress of a non-blocking TLS operation.
#[derive(Debug, PartialEq, Eq)]
pub enum TlsIo {
    /// This many bytes were read or written (never 0).
    Done(usize),
    /// Nothing can happen until the socket is readable or writable again.
    WouldBlock,
    /// The peer closed the connection cleanly.
    Closed,
}

/// A TLS connection over a non-blocking mio socket. Every call returns
/// instead of blocking; the caller waits for readiness and calls again.
/// Works with edge-triggered readiness: a call returns
/// [`TlsIo::WouldBlock`] only after the socket said `EAGAIN`.
pub struct TlsLink {
    stream: openssl::ssl::SslStream<mio::net::TcpStream>,
    handshaking: bool,
    server: bool,
}

impl std::fmt::Debug for TlsLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsLink")
            .field("handshaking", &self.handshaking)
            .field("server", &self.server)
            .finish()
    }
}

fn tls_err(e: openssl::ssl::Error) -> std::io::Error {
    match e.into_io_error() {
        Ok(io) => io,
        Err(e) => std::io::Error::other(e.to_string()),
    }
}

impl TlsLink {
    /// Server side of a new connection.
    pub fn accept(acceptor: &SslAcceptor, tcp: mio::net::TcpStream) -> std::io::Result<TlsLink> {
        let ssl = openssl::ssl::Ssl::new(acceptor.context()).map_err(std::io::Error::other)?;
        let stream = openssl::ssl::SslStream::new(ssl, tcp).map_err(std::io::Error::other)?;
        Ok(TlsLink {
            stream,
            handshaking: true,
            server: true,
        })
    }

    /// Client side, with a random `www.<x>.com` SNI as C Tor sends.
    pub fn connect(connector: &SslConnector, tcp: mio::net::TcpStream) -> std::io::Result<TlsLink> {
        let mut cfg = connector.configure().map_err(std::io::Error::other)?;
        cfg.set_verify_hostname(false);
        let sni = format!("www.{}.com", hex::encode(weft_crypto::random_array::<5>()));
        let ssl = cfg.into_ssl(&sni).map_err(std::io::Error::other)?;
        let stream = openssl::ssl::SslStream::new(ssl, tcp).map_err(std::io::Error::other)?;
        Ok(TlsLink {
            stream,
            handshaking: true,
            server: false,
        })
    }

    /// Drive the TLS handshake; `Ok(true)` once it is complete.
    pub fn handshake(&mut self) -> std::io::Result<bool> {
        if !self.handshaking {
            return Ok(true);
        }
        let r = if self.server {
            self.stream.accept()
        } else {
            self.stream.connect()
        };
        match r {
            Ok(()) => {
                self.handshaking = false;
                Ok(true)
            }
            Err(e) if is_want(&e) => Ok(false),
            Err(e) => Err(std::io::Error::other(format!("TLS handshake: {e}"))),
        }
    }

    /// Read decrypted bytes into `buf`.
    pub fn read(&mut self, buf: &mut [u8]) -> std::io::Result<TlsIo> {
        match self.stream.ssl_read(buf) {
            Ok(0) => Ok(TlsIo::Closed),
            Ok(n) => Ok(TlsIo::Done(n)),
            Err(e) if is_want(&e) => Ok(TlsIo::WouldBlock),
            Err(e) if e.code() == openssl::ssl::ErrorCode::ZERO_RETURN => Ok(TlsIo::Closed),
            Err(e) => Err(tls_err(e)),
        }
    }

    /// Encrypt and write (a prefix of) `buf`. After `WouldBlock` the same
    /// bytes must be offered again (OpenSSL's retry rule).
    pub fn write(&mut self, buf: &[u8]) -> std::io::Result<TlsIo> {
        if buf.is_empty() {
            return Ok(TlsIo::Done(0));
        }
        match self.stream.ssl_write(buf) {
            Ok(0) => Ok(TlsIo::Closed),
            Ok(n) => Ok(TlsIo::Done(n)),
            Err(e) if is_want(&e) => Ok(TlsIo::WouldBlock),
            Err(e) => Err(tls_err(e)),
        }
    }

    /// The TLS session (exporter, peer certificate).
    pub fn ssl(&self) -> &openssl::ssl::SslRef {
        self.stream.ssl()
    }

    /// The socket (registration, TCP_INFO).
    pub fn tcp(&self) -> &mio::net::TcpStream {
        self.stream.get_ref()
    }

    /// The socket, mutably (registration).
    pub fn tcp_mut(&mut self) -> &mut mio::net::TcpStream {
        self.stream.get_mut()
    }

    /// Give OpenSSL's record buffers back (a connection that moved no
    /// byte for a second): true if it freed them, false if they hold data
    /// (or were already free). OpenSSL allocates them again on the next
    /// read or write. C Tor gets the same with `SSL_MODE_RELEASE_BUFFERS`,
    /// which frees them whenever they empty, on busy connections too; this
    /// frees an idle connection's only, so the busy ones allocate nothing.
    pub fn release_buffers(&mut self) -> bool {
        use foreign_types::ForeignTypeRef;
        extern "C" {
            // OpenSSL ≥ 1.1.1 (ssl.h): frees the SSL's read and write
            // buffers if they hold no data; 1 if they were freed.
            fn SSL_free_buffers(ssl: *mut openssl_sys::SSL) -> std::ffi::c_int;
        }
        if self.handshaking {
            return false;
        }
        let ssl = self.stream.ssl().as_ptr();
        // SAFETY: `ssl` is the live SSL this stream owns, used by no other
        // thread (`&mut self`), and not inside an OpenSSL call;
        // SSL_free_buffers checks itself that no pending record or write
        // is in the buffers and leaves them alone otherwise (it is made
        // for this use, SSL_alloc_buffers(3)). Tested in
        // `tests::idle_buffers_are_released_and_come_back`.
        unsafe { SSL_free_buffers(ssl) == 1 }
    }

    /// DER of the peer's certificate.
    pub fn peer_cert_der(&self) -> Option<Vec<u8>> {
        self.stream
            .ssl()
            .peer_certificate()
            .and_then(|c| c.to_der().ok())
    }
}

fn is_want(e: &openssl::ssl::Error) -> bool {
    matches!(
        e.code(),
        openssl::ssl::ErrorCode::WANT_READ | openssl::ssl::ErrorCode::WANT_WRITE
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use weft_crypto::keys::RelayKeys;

    fn pump(f: &mut dyn FnMut() -> bool) {
        for _ in 0..2000 {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("no progress in 2 s");
    }

    fn link_keys(dir: &std::path::Path) -> LinkKeys {
        let now = SystemTime::now();
        let relay =
            RelayKeys::load_or_create(&dir.join("k"), "tlstest", Duration::from_secs(86400), now)
                .unwrap();
        LinkKeys::generate(&relay, now).unwrap()
    }

    /// A client and a server link over loopback TCP, not yet shaken hands.
    fn pair(acceptor: &SslAcceptor, connector: &SslConnector) -> (TlsLink, TlsLink) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client_tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_tcp, _) = listener.accept().unwrap();
        for s in [&client_tcp, &server_tcp] {
            s.set_nonblocking(true).unwrap();
        }
        (
            TlsLink::connect(connector, mio::net::TcpStream::from_std(client_tcp)).unwrap(),
            TlsLink::accept(acceptor, mio::net::TcpStream::from_std(server_tcp)).unwrap(),
        )
    }

    /// The groups a client offering only `groups` gets from weft's server
    /// context: the negotiated group's name, or None if the handshake
    /// fails.
    fn negotiated(acceptor: &SslAcceptor, groups: &str) -> Option<String> {
        let mut c = SslConnector::builder(SslMethod::tls_client()).unwrap();
        c.set_verify(SslVerifyMode::NONE);
        if c.set_groups_list(groups).is_err() {
            return None;
        }
        let (mut client, mut server) = pair(acceptor, &c.build());
        let mut failed = false;
        pump(&mut || {
            match (client.handshake(), server.handshake()) {
                (Ok(c), Ok(s)) => return c && s,
                _ => failed = true,
            }
            true
        });
        if failed {
            return None;
        }
        let key = client.ssl().peer_tmp_key().ok()?;
        Some(match key.id() {
            openssl::pkey::Id::X25519 => "X25519".to_string(),
            openssl::pkey::Id::EC => key
                .ec_key()
                .ok()?
                .group()
                .curve_name()?
                .short_name()
                .ok()?
                .to_string(),
            other => format!("{other:?}"),
        })
    }

    /// As stock tor 0.4.9's ORPort (checked with `openssl s_client
    /// -groups`): X25519 first, P-256, no P-384, no post-quantum hybrid;
    /// weft's own client and server agree on X25519.
    #[test]
    fn key_exchange_groups_are_c_tors() {
        let dir = tempfile::tempdir().unwrap();
        let (acceptor, _) = contexts(&link_keys(dir.path())).unwrap();
        assert_eq!(
            negotiated(&acceptor, "X25519:P-256").as_deref(),
            Some("X25519")
        );
        assert_eq!(
            negotiated(&acceptor, "P-256").as_deref(),
            Some("prime256v1")
        );
        assert_eq!(negotiated(&acceptor, "P-384"), None);
        // Offered alone, the hybrid share is refused (OpenSSL ≥ 3.5 knows
        // it; an older one cannot even offer it).
        assert_eq!(negotiated(&acceptor, "X25519MLKEM768"), None);
    }

    /// A TLS pair on loopback: bytes both ways, the buffers released
    /// while idle (not while a record waits unread), and bytes both ways
    /// again.
    #[test]
    fn idle_buffers_are_released_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let link = link_keys(dir.path());
        let (acceptor, connector) = contexts(&link).unwrap();
        let (mut client, mut server) = pair(&acceptor, &connector);
        assert!(!server.release_buffers(), "not during the handshake");
        pump(&mut || {
            let c = client.handshake().unwrap();
            let s = server.handshake().unwrap();
            c && s
        });
        // No session tickets: nothing to keep per connection for a
        // resumption that never comes.
        assert_eq!(server.ssl().num_tickets(), 0);
        let mut buf = [0u8; 1024];
        for round in 0..3u8 {
            let msg = [round; 600];
            assert_eq!(client.write(&msg).unwrap(), TlsIo::Done(600));
            let mut got = 0;
            pump(&mut || {
                if let TlsIo::Done(n) = server.read(&mut buf[got..]).unwrap() {
                    got += n;
                }
                got == 600
            });
            assert_eq!(&buf[..600], &msg[..]);
            assert_eq!(server.write(&msg[..100]).unwrap(), TlsIo::Done(100));
            // A record waits unread in the client's socket, not in its
            // buffers: they may go; the server's are idle too.
            assert!(server.release_buffers(), "round {round}");
            let mut got = 0;
            pump(&mut || {
                if let TlsIo::Done(n) = client.read(&mut buf[got..]).unwrap() {
                    got += n;
                }
                got == 100
            });
            assert_eq!(&buf[..100], &msg[..100]);
            client.release_buffers();
        }
    }
}
