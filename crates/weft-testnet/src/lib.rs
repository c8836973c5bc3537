//! Private Tor networks on loopback, built from stock C tor (authorities,
//! relays, exits, clients) plus optionally one weft relay, for integration
//! tests and the demo.
//!
//! ```no_run
//! use std::time::Duration;
//! use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig};
//!
//! # fn main() -> anyhow::Result<()> {
//! let mut cfg = TestnetConfig::new("/tmp/net", 0);
//! cfg.base_port = pick_base_port(cfg.ports_needed())?;
//! let mut net = Testnet::start(cfg)?;
//! let (r0, r1, e0) = (net.fingerprint("relay0")?, net.fingerprint("relay1")?, net.fingerprint("exit0")?);
//! net.wait_for_bootstrap(Duration::from_secs(120))?;
//! net.wait_until_listed(&[&r0, &r1, &e0], &["Running", "Valid"], Duration::from_secs(120))?;
//! let mut ctl = net.control("client0")?;
//! let circ = ctl.build_circuit(&[&r0, &r1, &e0], Duration::from_secs(60))?;
//! let sink = Sink::start()?;
//! let socks = net.node("client0")?.socks_addr().unwrap();
//! let stream = traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), circ, Duration::from_secs(60))?;
//! let report = traffic::transfer(stream, Direction::Both, 5 << 20, Duration::from_secs(120))?;
//! println!("{report}");
//! net.stop()?;
//! # Ok(()) }
//! ```
//!
//! Modules: [`config`] (what to build), [`network`] (the running network),
//! [`control`] (control-port client), [`traffic`] (sink, SOCKS5, verified
//! transfers), [`keys`] (identities and fingerprints), [`torrc`] (generated
//! configurations), [`isolated_client`] (a client that knows weft
//! as its only directory), [`tools`] (locating/installing tor), [`ports`], [`logs`].

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod config;
pub mod control;
pub mod dns;
pub mod isolated_client;
pub mod keys;
mod layout;
pub mod logs;
pub mod network;
pub mod onion;
pub mod ports;
mod process;
pub mod tools;
pub mod torrc;
pub mod traffic;
mod waits;
pub mod warnings;

pub use config::{TestnetConfig, WeftNode};
pub use control::{ConsensusEntry, ControlClient};
pub use isolated_client::IsolatedClient;
pub use keys::{read_fingerprint, wait_for_fingerprint};
pub use network::{NodeInfo, Role, Testnet};
pub use onion::{HsCircuitCount, UploadWatch};
pub use ports::{free_port, pick_base_port};
pub use tools::TorBinaries;
pub use traffic::{Direction, Sink, TransferReport};
pub use warnings::KNOWN_WARNINGS;
