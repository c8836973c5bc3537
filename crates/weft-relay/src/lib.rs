//! weft-relay owns the relay's runtime: the [`controller`] on the main thread
//! (listeners, the registry of connections by relay identity, extend
//! routing, bandwidth accounting, directory duties) and the [`worker`]s, each
//! an event loop (the driver) around a sans-IO circuit core that owns its
//! connections' circuit halves, a cell pool and its ends of the cross-worker
//! [`ring`]s; [`messages`] are how all of them talk.
//!
//! Layers (a module uses only modules of lower layers; checked by the test
//! `module_layers`): leaf modules (`accounting`, `bucket`, `bwhist`, `context`, `control`, `dos`,
//! `ewma`, `histogram`, `kist`, `link_io`, `oom`, `outbound`, `pool`, `privileges`, `ring`,
//! `sched_slice`, `selftest`, `service_notify`, `stats`, `tls`, `worker_report`), then `messages`, then
//! `worker`, then
//! `controller`.
//!
//! Ownership moves only by message: no object is shared between threads
//! except immutable snapshots (`Arc`) and the rings' slots, which belong to
//! one side at a time.
#![warn(missing_docs)]

pub mod accounting;
pub mod bucket;
pub mod bwhist;
pub mod context;
pub mod control;
pub mod controller;
pub mod dns_honesty;
pub mod dos;
pub mod ewma;
pub mod histogram;
pub mod kist;
pub mod link_io;
pub mod messages;
pub mod oom;
pub mod outbound;
pub mod pool;
pub mod privileges;
pub mod resolv_conf;
pub mod resolver;
pub mod ring;
pub mod sched_slice;
pub mod selftest;
pub mod service_notify;
pub mod stats;
pub mod tls;
pub mod worker;
pub mod worker_report;

pub use context::{DirAuthority, RelayConfig};
pub use controller::run_relay;
