//! Relay cell format V1, the format of a hop that runs CGO relay crypto
//! (proposal 359), as tor 0.4.9's `relay_msg.c` reads and writes it. The
//! 509-byte body:
//!
//! | bytes | field |
//! |---|---|
//! | 0..16 | the CGO tag (ours after our layer: not part of the message) |
//! | 16 | relay command |
//! | 17..19 | length of the data, big-endian |
//! | 19..21 | stream ID, only for the stream commands ([`has_stream_id`]) |
//! | 19 or 21.. | data, then up to 4 zero bytes, then random padding |
//!
//! One message per cell (0.4.9 neither packs nor fragments). A command
//! the decoder does not know, or a length past the cell, is an error that
//! closes the circuit (in V0 an unknown command is dropped). SENDME has no
//! stream ID: V1 has no stream-level SENDMEs, hence CGO needs congestion
//! control ([`crate::circuit::extensions`]).
//!
//! Contract: every parser takes untrusted bytes, checks lengths once and
//! returns a typed error; none can panic.

use crate::cell::BODY_LEN;
use crate::relay::{relay_cmd, RelayHeader, RelayMsgError};

/// The CGO tag before the message.
pub const TAG_LEN: usize = 16;
/// Offset of the relay command.
const CMD_AT: usize = 16;
/// Offset of the length.
const LEN_AT: usize = 17;
/// Offset of the stream ID, for the commands that have one.
const STREAM_AT: usize = 19;
/// Offset of the data without a stream ID.
pub const DATA_AT_NO_STREAM: usize = 19;
/// Offset of the data with a stream ID.
pub const DATA_AT_WITH_STREAM: usize = 21;

/// True for the commands whose V1 message has a stream ID: BEGIN, DATA,
/// END, CONNECTED, RESOLVE, RESOLVED, BEGIN_DIR, XOFF, XON.
pub fn has_stream_id(command: u8) -> bool {
    use relay_cmd::*;
    matches!(
        command,
        BEGIN | DATA | END | CONNECTED | RESOLVE | RESOLVED | BEGIN_DIR | XOFF | XON
    )
}

/// True for a relay command tor 0.4.9 knows (`is_known_relay_command`):
/// 1–15, conflux 19–22, onion services and padding 32–42, XOFF/XON 43–44.
pub fn is_known_command(command: u8) -> bool {
    matches!(command, 1..=15 | 19..=22 | 32..=44)
}

/// Where a V1 message's data starts.
pub fn data_offset(command: u8) -> usize {
    if has_stream_id(command) {
        DATA_AT_WITH_STREAM
    } else {
        DATA_AT_NO_STREAM
    }
}

/// The most data a V1 message of `command` carries.
pub fn data_max(command: u8) -> usize {
    BODY_LEN - data_offset(command)
}

/// Read the header of a V1 body for us (after our CGO layer). The data is
/// `body[data_offset(h.command)..][..h.length]`.
pub fn parse_header(body: &[u8; BODY_LEN]) -> Result<RelayHeader, RelayMsgError> {
    let command = body[CMD_AT];
    if !is_known_command(command) {
        return Err(RelayMsgError::Malformed(
            "V1 relay message: unknown command",
        ));
    }
    let length = u16::from_be_bytes([body[LEN_AT], body[LEN_AT + 1]]);
    let stream_id = if has_stream_id(command) {
        u16::from_be_bytes([body[STREAM_AT], body[STREAM_AT + 1]])
    } else {
        0
    };
    if usize::from(length) > data_max(command) {
        return Err(RelayMsgError::BadLength(usize::from(length)));
    }
    Ok(RelayHeader {
        command,
        stream_id,
        length,
    })
}

/// The data of a V1 message whose header [`parse_header`] returned.
pub fn data<'a>(body: &'a [u8; BODY_LEN], h: &RelayHeader) -> &'a [u8] {
    let at = data_offset(h.command);
    &body[at..at + usize::from(h.length).min(BODY_LEN - at)]
}

/// Write a V1 message into `body`: the tag zeroed (the CGO layer puts its
/// own there), the header, the data, up to four zero bytes, then bytes from
/// `fill` (random padding). Err if the stream ID is there for a command
/// without one or missing for one with one, or the data does not fit.
pub fn build(
    body: &mut [u8; BODY_LEN],
    command: u8,
    stream_id: u16,
    data: &[u8],
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), RelayMsgError> {
    if has_stream_id(command) != (stream_id != 0) {
        return Err(RelayMsgError::Malformed(
            "V1 relay message: stream ID present or absent against its command",
        ));
    }
    if data.len() > data_max(command) {
        return Err(RelayMsgError::BadLength(data.len()));
    }
    body[..TAG_LEN].fill(0);
    body[CMD_AT] = command;
    body[LEN_AT..LEN_AT + 2].copy_from_slice(&(data.len() as u16).to_be_bytes());
    if stream_id != 0 {
        body[STREAM_AT..STREAM_AT + 2].copy_from_slice(&stream_id.to_be_bytes());
    }
    let at = data_offset(command);
    let end = at + data.len();
    body[at..end].copy_from_slice(data);
    let zeros = (BODY_LEN - end).min(4);
    body[end..end + zeros].fill(0);
    fill(&mut body[end + zeros..]);
    Ok(())
}

/// Rewrite a V1 message for us (after our CGO layer) into the V0 layout:
/// command, recognized 0, stream ID, digest 0, length, data at byte 11.
/// The V1 header is checked as C's `decode_v1_cell` checks it (a known
/// command, a length that fits).
pub fn to_v0_layout(body: &mut [u8; BODY_LEN]) -> Result<(), RelayMsgError> {
    let h = parse_header(body)?;
    let at = data_offset(h.command);
    let len = usize::from(h.length);
    // V1's data starts after V0's (19 or 21 against 11): a move down.
    body.copy_within(at..at + len, crate::relay::RELAY_HEADER_LEN);
    body[0] = h.command;
    body[1..3].fill(0);
    body[3..5].copy_from_slice(&h.stream_id.to_be_bytes());
    body[5..9].fill(0);
    body[9..11].copy_from_slice(&h.length.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_fill(b: &mut [u8]) {
        b.fill(0xee);
    }

    /// tor 0.4.9.11's `test_cfmt_relay_msg_encoding_simple`, V1 half.
    #[test]
    fn c_encodes_these_messages_so() {
        let mut b = [0u8; BODY_LEN];
        build(&mut b, relay_cmd::DATA, 0x250, b"hello world", no_fill).unwrap();
        let want = hex::decode(concat!(
            "00000000000000000000000000000000",
            "02",
            "000B",
            "0250",
            "68656c6c6f20776f726c64",
            "00000000"
        ))
        .unwrap();
        assert_eq!(&b[..want.len()], &want[..]);
        assert!(b[want.len()..].iter().all(|&x| x == 0xee), "random padding");
        let body: Vec<u8> = (0..20).collect();
        build(&mut b, relay_cmd::SENDME, 0, &body, no_fill).unwrap();
        let mut want = vec![0u8; 16];
        want.extend_from_slice(&[5, 0, 20]);
        want.extend_from_slice(&body);
        want.extend_from_slice(&[0; 4]);
        assert_eq!(&b[..want.len()], &want[..]);
    }

    /// `test_cfmt_relay_msg_encoding_error` and the padding cases.
    #[test]
    fn what_c_refuses_to_encode_is_refused() {
        let mut b = [0u8; BODY_LEN];
        let big = [7u8; BODY_LEN];
        assert!(build(&mut b, relay_cmd::DATA, 1, &big[..488], no_fill).is_ok());
        assert!(build(&mut b, relay_cmd::DATA, 1, &big[..489], no_fill).is_err());
        assert!(build(&mut b, relay_cmd::EXTEND2, 0, &big[..490], no_fill).is_ok());
        assert!(build(&mut b, relay_cmd::EXTEND2, 0, &big[..491], no_fill).is_err());
        assert!(build(&mut b, relay_cmd::EXTEND2, 3, b"x", no_fill).is_err());
        assert!(build(&mut b, relay_cmd::BEGIN, 0, b"x", no_fill).is_err());
        // Padding: four zero bytes when they fit, fewer at the end.
        build(&mut b, relay_cmd::DATA, 1, &big[..486], no_fill).unwrap();
        assert_eq!(&b[507..], &[0, 0]);
        build(&mut b, relay_cmd::DATA, 1, &big[..480], no_fill).unwrap();
        assert_eq!(&b[501..505], &[0; 4]);
        assert_eq!(&b[505..], &[0xee; 4]);
    }

    /// `test_cfmt_relay_msg_decoding_simple` and `..._error`, V1 cases.
    #[test]
    fn c_decodes_these_messages_so() {
        let mut b = [0u8; BODY_LEN];
        b[16] = relay_cmd::EXTENDED2;
        b[17..19].copy_from_slice(&5u16.to_be_bytes());
        b[19..24].copy_from_slice(b"hello");
        let h = parse_header(&b).unwrap();
        assert_eq!((h.command, h.stream_id, h.length), (15, 0, 5));
        assert_eq!(data(&b, &h), b"hello");
        // Up to the cell's end, no stream ID.
        b[17..19].copy_from_slice(&490u16.to_be_bytes());
        assert_eq!(parse_header(&b).unwrap().length, 490);
        b[17..19].copy_from_slice(&491u16.to_be_bytes());
        assert!(parse_header(&b).is_err());
        // With a stream ID.
        b[16] = relay_cmd::DATA;
        b[19..21].copy_from_slice(&0x1234u16.to_be_bytes());
        b[17..19].copy_from_slice(&488u16.to_be_bytes());
        let h = parse_header(&b).unwrap();
        assert_eq!((h.stream_id, h.length), (0x1234, 488));
        assert_eq!(data(&b, &h).len(), 488);
        b[17..19].copy_from_slice(&489u16.to_be_bytes());
        assert!(parse_header(&b).is_err());
        // An unknown command.
        for cmd in [0u8, 16, 18, 23, 31, 45, 200] {
            b[16] = cmd;
            b[17..19].copy_from_slice(&0u16.to_be_bytes());
            assert!(parse_header(&b).is_err(), "{cmd}");
        }
    }

    #[test]
    fn what_is_built_reads_back() {
        let mut b = [0u8; BODY_LEN];
        for cmd in (0u8..=50).filter(|&c| is_known_command(c)) {
            let sid = if has_stream_id(cmd) { 77 } else { 0 };
            let d: Vec<u8> = (0..data_max(cmd)).map(|i| i as u8).collect();
            for len in [0, 1, 17, data_max(cmd)] {
                build(&mut b, cmd, sid, &d[..len], no_fill).unwrap();
                let h = parse_header(&b).unwrap();
                assert_eq!((h.command, h.stream_id), (cmd, sid));
                assert_eq!(data(&b, &h), &d[..len]);
            }
        }
        // Conflux LINK and padding NEGOTIATED: known, no stream ID.
        assert!(is_known_command(19) && !has_stream_id(19));
        assert!(is_known_command(42) && !has_stream_id(42));
    }
}
