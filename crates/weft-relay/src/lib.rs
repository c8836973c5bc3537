//! weft-relay owns the relay's runtime: the [`controller`] on the main thread
//! (listeners, the registry of connections by relay identity, extend
//! routing, bandwidth accounting, directory duties) and the [`worker`]s, each
//! an event loop that owns its connections ([`conn`], over [`link_io`] and
//! [`tls`]), their circuit halves ([`half`]), a cell pool ([`pool`]) and its
//! ends of the cross-worker [`ring`]s; [`messages`] are how all of them talk.
//! Ownership moves only by message: no object is shared between threads
//! except immutable snapshots (`Arc`) and the rings' slots, which belong to
//! one side at a time.
#![warn(missing_docs)]

pub mod bucket;
pub mod bwhist;
pub mod conn;
pub mod context;
pub mod controller;
pub mod directory;
pub mod ewma;
pub mod half;
pub mod kist;
pub mod link_io;
pub mod messages;
pub mod metrics;
pub mod migrate;
pub mod pool;
pub mod ring;
pub mod sched_slice;
pub mod selftest;
pub mod tls;
pub mod worker;

pub use context::{DirAuthority, RelayConfig};
pub use controller::run_relay;
