//! weft-proto owns the Tor protocol logic, sans-IO: channel cell framing
//! ([`cell`]), the v3 link handshake as responder and initiator ([`link`]),
//! relay-cell headers and the relay messages a relay handles ([`relay`]),
//! the state machine of a keyed circuit half with the answers of a non-exit
//! relay ([`circuit`]), the onion-service cells of introduction and
//! rendezvous points ([`onion`]), and the client side of a circuit
//! ([`origin`], for the self-test and the bench).
//! Nothing here opens a socket, reads a clock or spawns a task: callers pass
//! bytes and `now` in and get bytes and events out.
#![warn(missing_docs)]

pub mod cell;
pub mod circpad;
pub mod circuit;
#[doc(hidden)]
pub mod fuzzing;
pub mod link;
pub mod onion;
pub mod origin;
pub mod padding;
pub mod relay;
pub mod relay_v1;
