//! Channel cells: commands, fixed-size (514-byte) and variable-length
//! framing for link protocols 3–5, and the DESTROY reasons.
//! [tor-spec §3, §4.1, §5.4]
//!
//! Contract: [`next_frame`] performs the only length checks on untrusted
//! bytes; after it returns a frame, slicing its fields cannot panic.

/// Length of a fixed-size cell body.
pub const BODY_LEN: usize = 509;
/// Length of a fixed-size cell on link protocol ≥ 4 (4-byte circuit IDs).
pub const CELL_LEN: usize = 514;

/// Cell commands. [tor-spec §3]
#[allow(missing_docs)]
pub mod cmd {
    pub const PADDING: u8 = 0;
    pub const CREATE: u8 = 1;
    pub const CREATED: u8 = 2;
    pub const RELAY: u8 = 3;
    pub const DESTROY: u8 = 4;
    pub const CREATE_FAST: u8 = 5;
    pub const CREATED_FAST: u8 = 6;
    pub const VERSIONS: u8 = 7;
    pub const NETINFO: u8 = 8;
    pub const RELAY_EARLY: u8 = 9;
    pub const CREATE2: u8 = 10;
    pub const CREATED2: u8 = 11;
    pub const PADDING_NEGOTIATE: u8 = 12;
    pub const VPADDING: u8 = 128;
    pub const CERTS: u8 = 129;
    pub const AUTH_CHALLENGE: u8 = 130;
    pub const AUTHENTICATE: u8 = 131;
    pub const AUTHORIZE: u8 = 132;
}

/// DESTROY / TRUNCATED reasons. [tor-spec §5.4]
#[allow(missing_docs)]
pub mod destroy_reason {
    pub const NONE: u8 = 0;
    pub const PROTOCOL: u8 = 1;
    pub const INTERNAL: u8 = 2;
    pub const REQUESTED: u8 = 3;
    pub const HIBERNATING: u8 = 4;
    pub const RESOURCELIMIT: u8 = 5;
    pub const CONNECTFAILED: u8 = 6;
    pub const OR_IDENTITY: u8 = 7;
    pub const CHANNEL_CLOSED: u8 = 8;
    pub const FINISHED: u8 = 9;
    pub const TIMEOUT: u8 = 10;
    pub const DESTROYED: u8 = 11;
    pub const NOSUCHSERVICE: u8 = 12;
}

/// Is `command` a variable-length cell command? (VERSIONS and 128–255.)
pub fn is_var_cmd(command: u8) -> bool {
    command == cmd::VERSIONS || command >= 128
}

/// A name for logs.
pub fn cmd_name(command: u8) -> &'static str {
    match command {
        cmd::PADDING => "PADDING",
        cmd::CREATE => "CREATE",
        cmd::CREATED => "CREATED",
        cmd::RELAY => "RELAY",
        cmd::DESTROY => "DESTROY",
        cmd::CREATE_FAST => "CREATE_FAST",
        cmd::CREATED_FAST => "CREATED_FAST",
        cmd::VERSIONS => "VERSIONS",
        cmd::NETINFO => "NETINFO",
        cmd::RELAY_EARLY => "RELAY_EARLY",
        cmd::CREATE2 => "CREATE2",
        cmd::CREATED2 => "CREATED2",
        cmd::PADDING_NEGOTIATE => "PADDING_NEGOTIATE",
        cmd::VPADDING => "VPADDING",
        cmd::CERTS => "CERTS",
        cmd::AUTH_CHALLENGE => "AUTH_CHALLENGE",
        cmd::AUTHENTICATE => "AUTHENTICATE",
        cmd::AUTHORIZE => "AUTHORIZE",
        _ => "unknown",
    }
}

/// One framed cell, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Circuit ID (2 or 4 bytes on the wire).
    pub circ_id: u32,
    /// Command byte.
    pub command: u8,
    /// Body: exactly [`BODY_LEN`] bytes for fixed cells, the declared length
    /// for variable cells.
    pub body: &'a [u8],
    /// The whole cell as on the wire (header included), for handshake logs.
    pub raw: &'a [u8],
}

/// Framing errors. All are fatal for the connection (the byte stream can
/// no longer be split into cells).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The circuit-ID width is not 2 or 4.
    #[error("bad circuit id width {0}")]
    BadWidth(usize),
}

/// Split the next cell off `buf`, with `circ_id_len` = 2 (before VERSIONS
/// negotiation and on link 3) or 4 (link ≥ 4). Returns `Ok(None)` when more
/// bytes are needed, else the frame and the number of bytes it used.
pub fn next_frame(
    buf: &[u8],
    circ_id_len: usize,
) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if circ_id_len != 2 && circ_id_len != 4 {
        return Err(FrameError::BadWidth(circ_id_len));
    }
    let hdr = circ_id_len + 1;
    if buf.len() < hdr {
        return Ok(None);
    }
    let circ_id = if circ_id_len == 4 {
        u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]])
    } else {
        u32::from(u16::from_be_bytes([buf[0], buf[1]]))
    };
    let command = buf[circ_id_len];
    if is_var_cmd(command) {
        if buf.len() < hdr + 2 {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([buf[hdr], buf[hdr + 1]]));
        let total = hdr + 2 + len;
        if buf.len() < total {
            return Ok(None);
        }
        Ok(Some((
            Frame {
                circ_id,
                command,
                body: &buf[hdr + 2..total],
                raw: &buf[..total],
            },
            total,
        )))
    } else {
        let total = hdr + BODY_LEN;
        if buf.len() < total {
            return Ok(None);
        }
        Ok(Some((
            Frame {
                circ_id,
                command,
                body: &buf[hdr..total],
                raw: &buf[..total],
            },
            total,
        )))
    }
}

/// Encode a variable-length cell.
pub fn encode_var(circ_id: u32, circ_id_len: usize, command: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(circ_id_len + 3 + body.len());
    push_circ_id(&mut v, circ_id, circ_id_len);
    v.push(command);
    v.extend_from_slice(&(body.len() as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Encode a fixed-size cell, padding the body with zeros to [`BODY_LEN`].
/// Bodies longer than [`BODY_LEN`] are truncated (callers never pass them).
pub fn encode_fixed(circ_id: u32, circ_id_len: usize, command: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(circ_id_len + 1 + BODY_LEN);
    push_circ_id(&mut v, circ_id, circ_id_len);
    v.push(command);
    let n = body.len().min(BODY_LEN);
    v.extend_from_slice(&body[..n]);
    v.resize(circ_id_len + 1 + BODY_LEN, 0);
    v
}

/// Write a fixed cell header into the first 5 bytes of a 514-byte buffer.
pub fn write_header(cell: &mut [u8; CELL_LEN], circ_id: u32, command: u8) {
    cell[..4].copy_from_slice(&circ_id.to_be_bytes());
    cell[4] = command;
}

fn push_circ_id(v: &mut Vec<u8>, circ_id: u32, circ_id_len: usize) {
    if circ_id_len == 4 {
        v.extend_from_slice(&circ_id.to_be_bytes());
    } else {
        v.extend_from_slice(&(circ_id as u16).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_fixed_and_var() {
        let versions = encode_var(0, 2, cmd::VERSIONS, &[0, 4, 0, 5]);
        assert_eq!(versions, vec![0, 0, 7, 0, 4, 0, 4, 0, 5]);
        let (f, n) = next_frame(&versions, 2).unwrap().unwrap();
        assert_eq!(n, 9);
        assert_eq!(f.body, &[0, 4, 0, 5]);
        let fixed = encode_fixed(0x8000_0001, 4, cmd::CREATE2, &[1, 2, 3]);
        assert_eq!(fixed.len(), CELL_LEN);
        let (f, n) = next_frame(&fixed, 4).unwrap().unwrap();
        assert_eq!(
            (f.circ_id, f.command, n),
            (0x8000_0001, cmd::CREATE2, CELL_LEN)
        );
        assert_eq!(&f.body[..3], &[1, 2, 3]);
        // Truncated input asks for more.
        for cut in 0..fixed.len() {
            assert!(next_frame(&fixed[..cut], 4).unwrap().is_none());
        }
        for cut in 0..versions.len() {
            assert!(next_frame(&versions[..cut], 2).unwrap().is_none());
        }
    }

    #[test]
    fn var_cell_of_maximum_length() {
        let body = vec![7u8; 65535];
        let c = encode_var(5, 4, cmd::VPADDING, &body);
        let (f, n) = next_frame(&c, 4).unwrap().unwrap();
        assert_eq!(n, 4 + 1 + 2 + 65535);
        assert_eq!(f.body.len(), 65535);
    }
}
