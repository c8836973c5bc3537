//! The HSDir's side of directory streams (part of the sans-IO circuit
//! core): `GET /tor/hs/3/<blinded key>` answered from the worker's own
//! copy of the descriptor cache (`HsDirIndex`, kept by the controller's
//! `CoreMsg::HsDirUpdate` messages; the texts are shared, never locked),
//! and `POST /tor/hs/3/publish` handed, once its body is complete, to the
//! controller, which checks it off the workers and owns the store
//! (`controller/hs_dir.rs`); its status comes back in
//! `CoreMsg::HsDescPosted`. Both are refused over a one-hop circuit, as
//! C's `connection_dir_is_anonymous`: the circuit must come from a relay.
//! [C dircache.c handle_get_hs_descriptor_v3(),
//! directory_handle_command_post(); hs_cache.c]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::debug;
use weft_dir::cache::serve::Body;
use weft_dir::hs_cache::http::{self, HsRequest, PostAnswer, PostBody};
use weft_dir::hs_cache::parse::parse_blinded_key;
use weft_dir::hs_cache::HsDirUpdate;

use crate::messages::ControllerMsg;
use crate::worker::core::streams::StreamOwner;
use crate::worker::core::Circuits;

/// Index of [`crate::messages::DirCounters::hs_fetches`].
pub(crate) const FETCH_HIT: usize = 0;
/// See [`FETCH_HIT`].
pub(crate) const FETCH_MISS: usize = 1;
/// See [`FETCH_HIT`].
pub(crate) const FETCH_SINGLE_HOP: usize = 2;
/// Index of [`crate::messages::DirCounters::hs_posts_refused`]: uploads
/// refused here, before the controller: over a one-hop circuit, announced
/// bigger than the limit, not a v3 `/publish` URL.
pub(crate) const POST_SINGLE_HOP: usize = 0;
/// See [`POST_SINGLE_HOP`].
pub(crate) const POST_TOO_LARGE: usize = 1;
/// See [`POST_SINGLE_HOP`].
pub(crate) const POST_BAD_URL: usize = 2;

impl Circuits {
    /// The controller's store changed.
    pub(crate) fn apply_hs_dir_update(&mut self, u: &HsDirUpdate) {
        self.streams.hs_index.apply(u);
    }

    fn wall_now(&self) -> SystemTime {
        self.wall_epoch + Duration::from_nanos(self.now_ns)
    }

    /// An onion-service request on directory stream `key` (its head is
    /// complete; a POST may still wait for its body).
    pub(super) fn hs_dir_request(&mut self, owner: StreamOwner, key: usize, hs: HsRequest) {
        let now = self.wall_now();
        // C's connection_dir_is_anonymous: the circuit's previous hop is a
        // relay (a conflux set's legs were all checked to be).
        let single_hop = match owner {
            StreamOwner::Circuit { conn, .. } => self.conn(conn).is_none_or(|c| c.client),
            StreamOwner::Set(_) => false,
        };
        match hs {
            HsRequest::Fetch(b64) => {
                let counters = &mut self.streams.counters.dir;
                if single_hop {
                    counters.hs_fetches[FETCH_SINGLE_HOP] += 1;
                    let head = http::short_response(503, http::FETCH_SINGLE_HOP, now);
                    return self.dir_answer(key, head, Body::Empty);
                }
                let unix = now
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let found = parse_blinded_key(&b64)
                    .and_then(|k| self.streams.hs_index.get(&k, unix))
                    .cloned();
                let (head, body) = match found {
                    Some(text) => {
                        counters.hs_fetches[FETCH_HIT] += 1;
                        (http::descriptor_head(text.len(), now), Body::Shared(text))
                    }
                    None => {
                        counters.hs_fetches[FETCH_MISS] += 1;
                        (http::short_response(404, "Not found", now), Body::Empty)
                    }
                };
                debug!(
                    "worker {}: onion-service descriptor fetch: {}",
                    self.me,
                    if body.bytes().is_empty() {
                        "not found"
                    } else {
                        "found"
                    }
                );
                self.dir_answer(key, head, body);
            }
            HsRequest::Publish(version) => {
                if single_hop {
                    return self.refuse_post(key, POST_SINGLE_HOP, PostAnswer::SingleHop, now);
                }
                let max = self.ctx.hs_max_desc_size;
                let Some(d) = self
                    .streams
                    .streams
                    .get_mut(key)
                    .and_then(|s| s.dir.as_mut())
                else {
                    return;
                };
                let body = match http::post_body(&d.request, max) {
                    PostBody::Incomplete => return,
                    PostBody::TooLarge => {
                        debug!(
                            "worker {}: onion-service descriptor upload over {max} bytes refused",
                            self.me
                        );
                        return self.refuse_post(key, POST_TOO_LARGE, PostAnswer::Refused, now);
                    }
                    PostBody::Complete(b) => b.to_vec(),
                };
                if !version.is_some_and(http::version_supported) {
                    return self.refuse_post(key, POST_BAD_URL, PostAnswer::Refused, now);
                }
                d.request = Vec::new();
                d.awaiting_post = true;
                let tag = self.streams.streams[key].tag;
                self.tell_controller(ControllerMsg::HsDescPost {
                    worker: self.me,
                    stream: key,
                    tag,
                    body,
                });
            }
        }
    }

    fn refuse_post(&mut self, key: usize, counter: usize, answer: PostAnswer, now: SystemTime) {
        self.streams.counters.dir.hs_posts_refused[counter] += 1;
        self.dir_answer(key, answer.response(now), Body::Empty);
    }

    /// The controller's status for the upload of stream `stream` (`tag`
    /// tells a stream that closed and whose slot was reused meanwhile).
    pub(crate) fn hs_desc_posted(&mut self, stream: usize, tag: u64, answer: PostAnswer) {
        let waiting = self
            .streams
            .streams
            .get(stream)
            .is_some_and(|s| s.tag == tag && s.dir.as_ref().is_some_and(|d| d.awaiting_post));
        if !waiting {
            return;
        }
        let head = answer.response(self.wall_now());
        self.dir_answer(stream, head, Body::Empty);
    }
}
