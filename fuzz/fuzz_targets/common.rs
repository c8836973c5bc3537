// Keys made once per fuzzing process, in a private temporary directory.
use std::sync::{Arc, OnceLock};

use weft_proto::circuit::HandshakeKeys;
use weft_proto::link::LinkIdentity;

pub struct Keys {
    pub link: Arc<LinkIdentity>,
    pub handshake: HandshakeKeys,
    #[allow(dead_code)]
    pub tls_cert: Vec<u8>,
    _dir: tempfile::TempDir,
}

pub fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    K.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let (link, handshake, tls_cert) = weft_proto::fuzzing::test_identity(dir.path());
        Keys { link, handshake, tls_cert, _dir: dir }
    })
}
