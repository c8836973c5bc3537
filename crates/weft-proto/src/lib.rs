//! weft-proto owns the Tor protocol logic, sans-IO: channel cell framing
//! ([`cell`]), the v3 link handshake as responder and initiator ([`link`]),
//! relay-cell headers and the relay messages a middle relay handles
//! ([`relay`]), and the state machine of a keyed circuit half ([`circuit`]).
//! Nothing here opens a socket, reads a clock or spawns a task: callers pass
//! bytes and `now` in and get bytes and events out.
#![warn(missing_docs)]

pub mod cell;
pub mod circuit;
#[doc(hidden)]
pub mod fuzzing;
pub mod link;
pub mod origin;
pub mod relay;
