//! Traffic selection: which frames a port takes from Linux, and which of its receive queues each
//! one reaches.
//!
//! - [`rule`]: a flow rule, described once for every backend; [`syntax`]: its text form.
//! - Its compilers: [`ibv_spec`] (`ibv_flow_attr` for mlx5/verbs ports), `bpf` (the XDP program of
//!   xdp ports), and [`matcher`], the software matcher that stands in for the NIC's steering in the
//!   model NIC and the tests.
//! - [`rss`]: the Toeplitz hash that spreads a port's frames over its receive queues.
//! - [`wire`]: fixed-offset header parsing shared by the above, and the checksums a send asks for.

#[cfg(feature = "xdp")]
pub(crate) mod bpf;
#[cfg(feature = "mlx5")]
pub mod ibv_spec;
pub use rawpkt_wire::{matcher, rss, rule, syntax, wire};
