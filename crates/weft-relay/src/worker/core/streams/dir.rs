//! The directory cache's streams (part of the sans-IO circuit core): a
//! BEGIN_DIR opens a stream in the stream room with no socket behind it.
//! The client's DATA carries an HTTP request; once its head is complete,
//! weft-dir's `cache::serve` answers it from the worker's snapshot of the
//! documents (`Arc<DirDocuments>`, replaced whole by the controller, never
//! locked), and the answer leaves as DATA cells under the same budget as
//! an exit stream's socket bytes (stream and circuit windows or the
//! congestion window, and the circuit's queue high-water mark), then END
//! DONE, as a C Tor cache closes the directory connection after writing.
//! [C connection_edge.c connection_exit_begin_dir(); dircache.c]
//!
//! A big answer is a stream like any other: flow-controlled by the
//! client's SENDMEs, served a round's share at a time, never blocking the
//! worker. Onion-service descriptor requests (`/tor/hs/`) go to
//! [`crate::worker::core::streams::hsdir`].

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;
use weft_dir::cache::serve::{self, Body, Parsed, Peer, Resource};
use weft_dir::cache::DirDocuments;
use weft_dir::consensus::ConsensusFlavor;
use weft_proto::relay::{end_reason, relay_cmd};

use crate::messages::ControllerMsg;
use crate::worker::core::streams::{State, StreamOwner};
use crate::worker::core::Circuits;

/// The metric order of [`Resource`].
pub(crate) const RESOURCES: [Resource; 6] = [
    Resource::Consensus,
    Resource::Microdesc,
    Resource::Descriptor,
    Resource::ExtraInfo,
    Resource::Keys,
    Resource::Other,
];

/// A BEGIN_DIR stream's request and answer.
pub(crate) struct DirStream {
    /// The request bytes received so far (until its head is complete).
    pub(super) request: Vec<u8>,
    /// The answer's head, then its body; `sent` bytes of the two have left.
    head: Vec<u8>,
    body: Body,
    sent: usize,
    /// An onion-service descriptor upload went to the controller: the
    /// stream waits for its status (`streams/hsdir.rs`); later DATA is
    /// ignored.
    pub(super) awaiting_post: bool,
    /// A consensus being sent, for the directory statistics: its id.
    consensus: Option<u64>,
}

impl DirStream {
    /// Memory this stream holds of its own (a body made for this request,
    /// unsent; a consensus is shared with the snapshot): counted in
    /// MaxMemInQueues, so clients that ask for big answers and never read
    /// them are the OOM handler's victims, oldest first.
    pub(crate) fn held_bytes(&self) -> u64 {
        let own = match &self.body {
            Body::Owned(b) => b.len(),
            _ => 0,
        } + self.head.len()
            + self.request.len();
        let sent_own = self.sent.min(own);
        (own - sent_own) as u64
    }

    fn remaining(&self) -> usize {
        (self.head.len() + self.body.bytes().len()).saturating_sub(self.sent)
    }

    /// The next unsent bytes (at most `n`, from one of head and body).
    fn next_chunk(&self, n: usize) -> &[u8] {
        let h = self.head.len();
        let (part, off) = if self.sent < h {
            (&self.head[..], self.sent)
        } else {
            (self.body.bytes(), self.sent - h)
        };
        let end = part.len().min(off + n);
        &part[off.min(end)..end]
    }
}

impl Circuits {
    /// The worker's documents changed (or the cache started).
    pub(crate) fn set_dir_documents(&mut self, docs: Arc<DirDocuments>) {
        self.streams.dir_docs = Some(docs);
    }

    /// BEGIN_DIR: a stream served here, answered CONNECTED with no
    /// address (only reached with `DirCache` on; the keyed half answers
    /// END NOTDIRECTORY otherwise).
    pub(in crate::worker::core) fn begin_dir(&mut self, owner: StreamOwner, stream_id: u16) {
        if self.ctx.hibernating {
            // As C: no new stream of any kind while hibernating.
            let reason = [weft_proto::circuit::exit::END_HIBERNATING];
            self.send_on(owner, relay_cmd::END, stream_id, &reason);
            return;
        }
        let key = self.new_stream(owner, stream_id, State::DirRequest);
        self.streams.streams[key].dir = Some(Box::new(DirStream {
            request: Vec::new(),
            head: Vec::new(),
            body: Body::Empty,
            sent: 0,
            awaiting_post: false,
            consensus: None,
        }));
        self.streams.by_id.insert((owner, stream_id), key);
        self.streams.dir_keys.push(key);
        self.streams.counters.dir.streams += 1;
        self.streams.opened += 1;
        self.send_on(owner, relay_cmd::CONNECTED, stream_id, &[]);
    }

    /// DATA on a directory stream: request bytes, answered once the head
    /// is complete. Bytes after the head (a request body) are ignored, as
    /// C Tor ignores a GET's body.
    pub(in crate::worker::core) fn dir_data(
        &mut self,
        owner: StreamOwner,
        key: usize,
        data: &[u8],
    ) {
        let s = &mut self.streams.streams[key];
        if let Err(e) = s.flow.data_received() {
            self.close_owner(
                owner,
                weft_proto::cell::destroy_reason::PROTOCOL,
                &e.to_string(),
            );
            return;
        }
        self.streams.counters.dir.request_bytes += data.len() as u64;
        let s = &mut self.streams.streams[key];
        if s.state != State::DirRequest {
            return;
        }
        let Some(d) = s.dir.as_mut() else { return };
        if d.awaiting_post {
            return;
        }
        d.request.extend_from_slice(data);
        let parsed = serve::parse_request(&d.request);
        let req = match parsed {
            Parsed::Incomplete => return,
            Parsed::TooLarge => {
                debug!(
                    "worker {}: directory request head over {} bytes; stream closed",
                    self.me,
                    serve::MAX_HEADERS
                );
                self.streams.counters.dir.too_large += 1;
                return self.end_stream(key, &[end_reason::MISC]);
            }
            Parsed::Request(r) => r,
        };
        if let Some(hs) = weft_dir::hs_cache::http::classify(&req) {
            return self.hs_dir_request(owner, key, hs);
        }
        let peer = Peer {
            addr: match owner {
                StreamOwner::Circuit { conn, .. } => self.conn(conn).map(|c| c.peer_addr.ip()),
                StreamOwner::Set(_) => None,
            },
        };
        let client = peer.addr;
        let answer = serve::respond(
            self.streams.dir_docs.as_deref(),
            &req,
            peer,
            self.wall_epoch + Duration::from_nanos(self.now_ns),
        );
        let i = RESOURCES
            .iter()
            .position(|r| *r == answer.resource)
            .unwrap_or(5);
        let c = &mut self.streams.counters.dir;
        if answer.status == 200 {
            c.served[i] += 1;
            if let Some(f) = answer.diff {
                c.consensus_diffs[usize::from(f == ConsensusFlavor::Microdesc)] += 1;
            }
        } else {
            c.refused[i] += 1;
        }
        // The directory statistics count consensus requests (C's
        // handle_get_current_consensus()).
        let mut consensus = None;
        if answer.resource == Resource::Consensus {
            use crate::stats::dirreq::NsResponse;
            let id = ((self.me as u64) << 48) | key as u64;
            let response = match answer.status {
                200 => NsResponse::Ok,
                304 => NsResponse::NotModified,
                503 => NsResponse::Busy,
                _ => NsResponse::NotFound,
            };
            consensus = (response == NsResponse::Ok).then_some(id);
            self.tell_controller(ControllerMsg::DirRequest {
                id,
                ip: client,
                response,
                size: (answer.head.len() + answer.body.bytes().len()) as u64,
            });
        }
        debug!(
            "worker {}: directory request {} {} → {} ({} bytes)",
            self.me,
            req.method,
            req.url,
            answer.status,
            answer.body.bytes().len()
        );
        self.dir_answer(key, answer.head, answer.body);
        if let Some(d) = self
            .streams
            .streams
            .get_mut(key)
            .and_then(|s| s.dir.as_mut())
        {
            d.consensus = consensus;
        }
    }

    /// Directory stream `key`'s answer is ready: send it (head, then
    /// body), then END DONE.
    pub(super) fn dir_answer(&mut self, key: usize, head: Vec<u8>, body: Body) {
        let Some(s) = self.streams.streams.get_mut(key) else {
            return;
        };
        s.state = State::Open;
        s.waiting_since_ns = self.now_ns.max(1);
        if let Some(d) = s.dir.as_mut() {
            d.request = Vec::new();
            d.awaiting_post = false;
            d.head = head;
            d.body = body;
        }
        self.streams.may_read.push(key);
    }

    /// Send what directory stream `key` may send now (at most `round`
    /// bytes); END DONE when all is sent. Returns true if the round's
    /// share ran out with bytes left (serve again next round).
    pub(in crate::worker::core) fn serve_dir(&mut self, key: usize, mut round: usize) -> bool {
        loop {
            let Some(s) = self.streams.streams.get(key) else {
                return false;
            };
            let Some(d) = s.dir.as_deref() else {
                return false;
            };
            if s.state != State::Open {
                return false;
            }
            if d.remaining() == 0 {
                if let Some(id) = d.consensus {
                    self.tell_controller(ControllerMsg::DirRequestDone { id });
                }
                self.end_stream(key, &[end_reason::DONE]);
                return false;
            }
            if round == 0 {
                return true;
            }
            let budget = self.stream_read_budget(key).min(round);
            if budget == 0 {
                // A window or the queue is full: listed again when it opens.
                return false;
            }
            // Move the answer out while its bytes are packaged (the core
            // needs itself mutably), then put it back.
            let Some(d) = self.streams.streams[key].dir.take() else {
                return false;
            };
            let chunk = d.next_chunk(budget);
            let n = chunk.len();
            self.stream_data_read(key, chunk);
            self.streams.counters.dir.bytes += n as u64;
            round -= n.min(round);
            match self.streams.streams.get_mut(key) {
                Some(s) => {
                    let mut d = d;
                    d.sent += n;
                    s.dir = Some(d);
                }
                None => return false,
            }
        }
    }
}
