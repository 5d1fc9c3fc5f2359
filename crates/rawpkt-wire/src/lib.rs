//! Packets and flow rules without I/O, shared by rawpkt's backends, its device model and its
//! tools (in the way smoltcp's `wire` and quinn's `quinn-proto` hold formats apart from sockets):
//!
//! - [`wire`]: fixed-offset views of Ethernet, VLAN, IPv4/IPv6, TCP/UDP headers, and the checksums
//!   a send asks for.
//! - [`rule`]: a flow rule, described once for every backend; [`syntax`]: its text form.
//! - [`matcher`]: a software matcher that decides what a set of rules does with a frame, as a
//!   NIC's steering would (the model NIC steers with it; the tests check the compilers with it).
//! - `ibv_spec` (feature `ibv`): a rule as rdma-core's `struct ibv_flow_attr` and its specs
//!   (what `ibv_create_flow` takes), and back, as the kernel reads them.
//! - [`rss`]: the Toeplitz hash that spreads a port's frames over its receive queues.
//! - [`text`]: how user input is echoed in one-line messages (control characters escaped, long
//!   input cut).
//!
//! ```
//! use rawpkt_wire::rule::FlowRule;
//! let rule: FlowRule = "ipv4 udp dst-port 4789".parse().unwrap();
//! assert_eq!(rule.to_string(), "ipv4 udp dst-port 4789");
//! ```
#![deny(unsafe_code)]

#[cfg(feature = "ibv")]
pub mod ibv_spec;
pub mod matcher;
pub mod rss;
pub mod rule;
pub mod syntax;
pub mod text;
pub mod wire;
