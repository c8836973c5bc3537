//! The `weft` binary's library half: the torrc-style configuration parser
//! ([`config`]) and the run-time allocator switch ([`alloc`]), kept out of
//! `main.rs` so that tests and the fuzz target can reach them.
#![warn(missing_docs)]

pub mod alloc;
pub mod config;
