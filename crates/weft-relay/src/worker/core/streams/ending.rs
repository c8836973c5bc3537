//! How an exit stream ends (part of the core's stream room,
//! [`crate::worker::core::streams`]): END for EOF or an error, END
//! counted by reason, the stream forgotten and its socket closed (the
//! room's byte counts and lists kept true), and every stream of an owner
//! (a circuit or a conflux set) that is gone — found by the owner's range
//! of the stream index, never by a walk over every stream.

use weft_proto::relay::{end_reason, relay_cmd};

use crate::worker::core::streams::{State, StreamIo, StreamOwner};
use crate::worker::core::Circuits;

impl Circuits {
    /// Stream `key`'s socket reached EOF: END DONE.
    pub(in crate::worker::core) fn stream_eof(&mut self, key: usize) {
        self.end_stream(key, &[end_reason::DONE]);
    }

    /// Send END with `body` for stream `key` (unless the client ended it)
    /// and forget it.
    pub(in crate::worker::core) fn end_stream(&mut self, key: usize, body: &[u8]) {
        let Some(s) = self.streams.streams.get(key) else {
            return;
        };
        let (owner, sid, state) = (s.owner, s.stream_id, s.state);
        if state != State::Flushing {
            self.streams.by_id.remove(&(owner, sid));
            self.count_end(body);
            self.send_on(owner, relay_cmd::END, sid, body);
        }
        self.free_stream(key);
    }

    /// Count an END we send (its reason is the body's first byte).
    pub(in crate::worker::core) fn count_end(&mut self, body: &[u8]) {
        if let Some(r) = body
            .first()
            .and_then(|&r| self.streams.counters.end_reasons.get_mut(usize::from(r)))
        {
            *r += 1;
        }
    }

    /// Forget stream `key` and have its socket closed.
    pub(in crate::worker::core) fn free_stream(&mut self, key: usize) {
        if let Some(s) = self.streams.streams.try_remove(key) {
            self.streams.to_dest_bytes -= s.to_dest.len() as u64;
            if s.dir.is_some() {
                self.streams.dir_keys.retain(|&k| k != key);
            }
            if s.state == State::Flushing {
                self.streams.flushing.retain(|&k| k != key);
            }
            if self.streams.by_id.get(&(s.owner, s.stream_id)) == Some(&key) {
                self.streams.by_id.remove(&(s.owner, s.stream_id));
            }
            self.streams.io.push_back(StreamIo::Close { key });
        }
    }

    /// `owner` (a circuit, or a conflux set) is gone: so are its streams.
    pub(crate) fn forget_streams(&mut self, owner: StreamOwner) {
        if !self.streams.limiter.is_empty() {
            self.streams.limiter.remove(&owner);
        }
        if self.streams.streams.is_empty() {
            return;
        }
        // The owner's range of the index, and its flushing streams: no
        // walk over every stream when one circuit of many closes.
        let st = &self.streams;
        let keys: Vec<usize> = st
            .by_id
            .range(owner.ids())
            .map(|(_, &k)| k)
            .chain(
                st.flushing
                    .iter()
                    .copied()
                    .filter(|&k| st.streams.get(k).is_some_and(|s| s.owner == owner)),
            )
            .collect();
        for k in keys {
            self.free_stream(k);
        }
    }
}
