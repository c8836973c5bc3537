//! The `weft` binary's library half: the torrc-style configuration parser
//! ([`config`], with the resource-limit options in [`config_limits`], the exit
//! policy's in [`config_exit`], the ControlPort's in [`config_control`] and
//! every option's canonical name and default in [`config_names`]; files,
//! `%include`, defaults and command-line options in [`config_files`]), the
//! command line ([`cli`]), the syslog log target ([`syslog`]) and the run-time allocator switch ([`alloc`]), kept out of
//! `main.rs` so that tests and the fuzz target can reach them.
#![warn(missing_docs)]

pub mod alloc;
pub mod cli;
pub mod config;
pub mod config_accepted;
pub mod config_control;
pub mod config_exit;
pub mod config_files;
pub mod config_limits;
pub mod config_names;
pub mod config_orport;
pub mod config_padding;
pub mod config_stats;
pub mod config_units;
pub mod find_address;
pub mod keygen_cli;
pub mod log_domains;
pub mod log_sinks;
pub mod syslog;
