//! weft-bench's library: the load generator and sinks ([`load`]), the relay
//! under test ([`target`]), one measured run ([`run`]), the soak ([`soak`]), the end-to-end mode
//! on a stock-tor test network ([`e2e`]), the same with the target as
//! the exit ([`exit`]), growth with connections and circuits ([`scale`]) and
//! the reports ([`report`]). The `weft-bench` binary is a thin CLI over it; tests drive it
//! directly.
#![warn(missing_docs)]

pub mod demo;
pub mod e2e;
pub mod exit;
pub mod idle;
pub mod load;
pub mod metrics;
pub mod multipath;
pub mod output;
pub mod report;
pub mod run;
pub mod scale;
pub mod soak;
pub mod target;
