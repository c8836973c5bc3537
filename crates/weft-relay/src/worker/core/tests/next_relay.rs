//! The next relay of a test circuit (the far side of a relabel half).

use super::*;
use weft_crypto::relay_crypto::Tor1RelayCrypto;

/// The next relay of a test circuit: the real ntor server handshake and
/// tor1 layer, so it reads what the client sent it and answers.
pub(super) struct NextRelay {
    pub(super) keys: &'static RelayKeys,
    crypto: Option<Tor1RelayCrypto>,
}

impl NextRelay {
    pub(super) fn new(dir: &std::path::Path) -> NextRelay {
        NextRelay {
            keys: keys(dir, "next"),
            crypto: None,
        }
    }

    /// Answer a CREATE2 body; returns the CREATED2 body.
    pub(super) fn answer(&mut self, create2: &[u8; BODY_LEN]) -> [u8; BODY_LEN] {
        let c = relay::parse_create2(create2).unwrap();
        let ntor = self.keys.ntor_keys();
        let (reply, km) = weft_crypto::ntor::server_handshake(
            &[&ntor[0]],
            &self.keys.fingerprint,
            c.hdata,
            weft_crypto::random_array(),
        )
        .unwrap();
        self.crypto = Some(Tor1RelayCrypto::from_key_material(&km));
        pad(&relay::created2_body(&reply))
    }

    /// A cell from the client: the relay command and data, if it is ours.
    pub(super) fn read(&mut self, body: &mut [u8; BODY_LEN]) -> Option<(u8, Vec<u8>)> {
        let c = self.crypto.as_mut()?;
        if !c.decrypt_forward(body) {
            return None;
        }
        let h = relay::parse_header(body).ok()?;
        Some((h.command, relay::data(body, &h).to_vec()))
    }

    /// A DATA cell toward the client.
    pub(super) fn data(&mut self, payload: &[u8]) -> [u8; BODY_LEN] {
        let mut b = [0u8; BODY_LEN];
        relay::build(&mut b, relay_cmd::DATA, 1, payload);
        self.crypto.as_mut().unwrap().originate_backward(&mut b);
        b
    }
}
