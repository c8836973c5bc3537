//! A keyed half's onion layer and the relay cell format that goes with it:
//! tor1 with format V0, or CGO (Counter Galois Onion, `Relay=6`) with
//! format V1. The rest of the keyed half and every room above it read
//! one layout: a V1 message for us is rewritten once, here, into the V0
//! layout ([`crate::relay::parse_header`], [`crate::relay::data`]), and a
//! message we originate is written in the hop's own format. What differs
//! and is not hidden: the most data a cell carries ([`HopLayer::data_max`]:
//! 498 bytes in V0, 488 in a V1 DATA cell) and the SENDME tag (20 bytes or
//! 16). [tor 0.4.9 relay_crypto.c, relay_msg.c; protocol-notes §6]

use weft_crypto::cgo::CgoRelayCrypto;
use weft_crypto::relay_crypto::Tor1RelayCrypto;

use super::flow;
use crate::cell::{cmd, BODY_LEN};
use crate::relay::{self, relay_cmd, RelayMsgError};
use crate::relay_v1;

/// This hop's layer (see the module docs).
// tor1 stays inline, as it was before CGO: every relayed cell of a tor1
// circuit reads it, and a box would add a pointer chase to each.
#[allow(clippy::large_enum_variant)]
pub(crate) enum HopLayer {
    /// tor1 (AES-CTR and running SHA-1 digests), relay cell format V0.
    Tor1(Tor1RelayCrypto),
    /// CGO, relay cell format V1. (Boxed: its expanded keys are larger
    /// than a tor1 layer, and few circuits run it yet.)
    Cgo(Box<CgoRelayCrypto>),
}

impl HopLayer {
    /// True for a CGO hop.
    pub(crate) fn is_cgo(&self) -> bool {
        matches!(self, HopLayer::Cgo(_))
    }

    /// Remove our layer from a cell from the client's side (`command`:
    /// RELAY or RELAY_EARLY). Ok(true) if the cell is for us, its message
    /// then in the V0 layout; Ok(false) if it goes on as it now is. Err: a
    /// V1 message for us that does not parse (C closes the circuit).
    pub(crate) fn forward(
        &mut self,
        command: u8,
        body: &mut [u8; BODY_LEN],
    ) -> Result<bool, RelayMsgError> {
        match self {
            HopLayer::Tor1(c) => Ok(c.decrypt_forward(body)),
            HopLayer::Cgo(c) => {
                if !c.forward(command, body) {
                    return Ok(false);
                }
                relay_v1::to_v0_layout(body)?;
                Ok(true)
            }
        }
    }

    /// Add our layer to a cell from the next hop, toward the client.
    pub(crate) fn backward(&mut self, body: &mut [u8; BODY_LEN]) {
        match self {
            HopLayer::Tor1(c) => c.encrypt_backward(body),
            // Cells toward the client are always RELAY. [C command.c]
            HopLayer::Cgo(c) => c.backward(cmd::RELAY, body),
        }
    }

    /// Write a message we originate toward the client into `body` in the
    /// hop's format and add our layer. Returns its SENDME tag (a CGO tag
    /// zero-padded into a tor1-sized slot, as C keeps it). Data beyond the
    /// format's room is cut, as [`relay::build`] cuts it.
    pub(crate) fn originate(
        &mut self,
        body: &mut [u8; BODY_LEN],
        command: u8,
        stream_id: u16,
        data: &[u8],
    ) -> [u8; flow::TAG_LEN] {
        match self {
            HopLayer::Tor1(c) => {
                relay::build(body, command, stream_id, data);
                c.originate_backward(body)
            }
            HopLayer::Cgo(c) => {
                let data = &data[..data.len().min(relay_v1::data_max(command))];
                let built = relay_v1::build(body, command, stream_id, data, |pad| {
                    weft_crypto::random_bytes(pad)
                });
                if built.is_err() {
                    // A stream ID against the command (a stream-level
                    // SENDME, which V1 cannot carry): a bug of ours. The
                    // cell still goes (the tag chain must not skip a
                    // cell), as DROP, which the client ignores.
                    debug_assert!(
                        false,
                        "V1 cannot carry command {command} on stream {stream_id}"
                    );
                    let _ = relay_v1::build(body, relay_cmd::DROP, 0, &[], |pad| {
                        weft_crypto::random_bytes(pad)
                    });
                }
                flow::cgo_tag_slot(&c.originate_backward(cmd::RELAY, body))
            }
        }
    }

    /// The SENDME v1 body acknowledging the last cell for us (tor1: its
    /// running digest; CGO: the tag it came with), in `out`; returns its
    /// length.
    pub(crate) fn circuit_sendme_body(&self, out: &mut [u8; 3 + flow::TAG_LEN]) -> usize {
        match self {
            HopLayer::Tor1(c) => {
                *out = flow::sendme_v1_body(&c.last_forward_digest());
                out.len()
            }
            HopLayer::Cgo(c) => {
                let b = flow::sendme_v1_cgo_body(&c.last_tag());
                out[..b.len()].copy_from_slice(&b);
                b.len()
            }
        }
    }

    /// The most data one DATA cell of this hop carries.
    pub(crate) fn data_max(&self) -> usize {
        match self {
            HopLayer::Tor1(_) => relay::RELAY_DATA_MAX,
            HopLayer::Cgo(_) => flow::DATA_MAX_V1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_message_reads_as_the_same_v0_message() {
        for (command, stream_id, data) in [
            (relay_cmd::DATA, 0x250u16, b"hello world".as_slice()),
            (relay_cmd::SENDME, 0, &[1, 0, 16, 9, 9][..]),
            (relay_cmd::BEGIN, 7, &[b'x'; 488][..]),
            (relay_cmd::EXTEND2, 0, &[3; 490][..]),
        ] {
            let mut v1 = [0u8; BODY_LEN];
            relay_v1::build(&mut v1, command, stream_id, data, |p| p.fill(0xee)).unwrap();
            relay_v1::to_v0_layout(&mut v1).unwrap();
            let h = relay::parse_header(&v1).unwrap();
            assert_eq!((h.command, h.stream_id), (command, stream_id));
            assert_eq!(relay::data(&v1, &h), data);
        }
        // An unknown command, or a length past the cell, is refused.
        let mut bad = [0u8; BODY_LEN];
        bad[16] = 200;
        assert!(relay_v1::to_v0_layout(&mut bad).is_err());
        bad[16] = relay_cmd::DATA;
        bad[17..19].copy_from_slice(&489u16.to_be_bytes());
        assert!(relay_v1::to_v0_layout(&mut bad).is_err());
    }
}
