//! Moving an exit stream's bytes (part of the sans-IO circuit core): the
//! core writes the bytes waiting for the destination into the stream's
//! socket and reads from it what the windows allow, through
//! [`StreamSocket`] — the driver's TCP socket on a relay
//! ([`crate::worker::stream_io`]), a pipe in the tests. The driver only says
//! which streams to pump ([`crate::worker::core::Effect::PumpStream`], readiness)
//! and keeps its readiness flags from what [`Pumped`] says. Directory
//! streams have no socket: the core serves them itself, a share per round
//! ([`Circuits::serve_dir_ready`]).

use std::io::ErrorKind;

use weft_proto::circuit::flow::DATA_MAX;

use crate::worker::core::streams::State;
use crate::worker::core::Circuits;

/// Most bytes read from one stream's socket (or served to one directory
/// stream) per round: others get a turn.
pub(crate) const STREAM_READ_BUDGET: usize = 64 * 1024;
/// Bytes read per read call (whole DATA cells).
pub(crate) const STREAM_CHUNK: usize = 16 * DATA_MAX;

/// An exit stream's socket as the core uses it: non-blocking reads and
/// writes (`WouldBlock` when it has nothing or takes nothing now).
pub(crate) trait StreamSocket {
    /// Read into `buf`; 0 at EOF.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    /// Write from `buf`; the bytes taken.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize>;
}

/// What one [`Circuits::pump_stream`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pumped {
    /// Bytes read from the socket.
    pub(crate) read: u64,
    /// Bytes written to it.
    pub(crate) written: u64,
    /// The socket had nothing more to read (until its next readiness).
    pub(crate) read_blocked: bool,
    /// The socket took no more (until its next readiness).
    pub(crate) write_blocked: bool,
    /// The round's share ran out with bytes left: pump again next round.
    pub(crate) again: bool,
}

impl Circuits {
    /// Pump exit stream `key` through `sock`: if `writable`, write what
    /// waits for the destination (then the SENDMEs or XON that follow); if
    /// `readable`, read what its windows allow, up to the round's share,
    /// as DATA cells toward the client. EOF ends the stream (END DONE), an
    /// error ends it with C Tor's reason for it.
    pub(crate) fn pump_stream(
        &mut self,
        key: usize,
        sock: &mut impl StreamSocket,
        readable: bool,
        writable: bool,
    ) -> Pumped {
        let mut p = Pumped::default();
        if writable && !self.pump_writes(key, sock, &mut p) {
            return p;
        }
        if readable {
            self.pump_reads(key, sock, &mut p);
        }
        p
    }

    /// The write half of [`Circuits::pump_stream`]; false if the stream
    /// ended.
    fn pump_writes(&mut self, key: usize, sock: &mut impl StreamSocket, p: &mut Pumped) -> bool {
        let Some(s) = self.streams.streams.get_mut(key) else {
            return false;
        };
        if s.to_dest.is_empty() && s.state != State::Flushing {
            return true;
        }
        let mut failed = None;
        loop {
            let (front, _) = s.to_dest.as_slices();
            if front.is_empty() {
                break;
            }
            match sock.write(front) {
                Ok(n) => {
                    s.to_dest.drain(..n);
                    self.streams.to_dest_bytes -= n as u64;
                    p.written += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    p.write_blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            Some(e) => {
                self.stream_failed(key, &e);
                false
            }
            None => {
                self.stream_wrote(key);
                self.streams.streams.contains(key)
            }
        }
    }

    /// The read half of [`Circuits::pump_stream`].
    fn pump_reads(&mut self, key: usize, sock: &mut impl StreamSocket, p: &mut Pumped) {
        let mut buf = std::mem::take(&mut self.streams.read_buf);
        buf.resize(STREAM_CHUNK, 0);
        let mut round = STREAM_READ_BUDGET;
        loop {
            if round == 0 {
                p.again = true;
                break;
            }
            let budget = self.stream_read_budget(key).min(round).min(buf.len());
            if budget == 0 {
                // A window or the circuit's queue is full (or the stream
                // is gone): it is listed again when that changes.
                break;
            }
            match sock.read(&mut buf[..budget]) {
                Ok(0) => {
                    self.stream_eof(key);
                    break;
                }
                Ok(n) => {
                    round -= n.min(round);
                    p.read += n as u64;
                    self.stream_data_read(key, &buf[..n]);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    p.read_blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.stream_failed(key, &e);
                    break;
                }
            }
        }
        self.streams.read_buf = buf;
    }

    /// Serve the directory streams that may send (their answer is ready,
    /// or a window opened): each its share of the round; those with bytes
    /// left go on next round ([`Circuits::poll_timeout`] says so).
    pub(crate) fn serve_dir_ready(&mut self) {
        let mut ready = std::mem::take(&mut self.streams.dir_ready);
        ready.sort_unstable();
        ready.dedup();
        for &key in &ready {
            if self.serve_dir(key, STREAM_READ_BUDGET) {
                self.streams.dir_again.push(key);
            }
        }
        ready.clear();
        if self.streams.dir_ready.is_empty() {
            self.streams.dir_ready = ready;
        }
    }
}
