//! Flow rules: which frames a port takes from Linux, and which of its receive queues each one
//! reaches. A rule is written once for every backend ([`FlowRule`], whose text form
//! `"ipv4 udp dst-port 4789"` parses with [`str::parse`]) and given to a port in
//! [`PortOptions::rules`](crate::PortOptions::rules); each backend compiles it: to
//! `ibv_flow_attr` specs on `mlx5:`/`verbs:` ports, to the XDP program of `xdp:` ports.
//!
//! ```
//! use rawpkt::flow::{Action, FlowRule};
//! let rule: FlowRule = "ipv4 dst 10.0.0.0/8 udp dst-port 53 copy".parse().unwrap();
//! assert_eq!((rule.dst_port, rule.action), (Some(53), Action::Copy));
//! let e = "udp dst-port 70000".parse::<FlowRule>().unwrap_err();
//! assert!(e.to_string().contains("dst-port"), "{e}");
//! ```
//!
//! The rule language, its matcher and its encodings live in the `rawpkt-wire` crate, shared with
//! the device model and the tools.

pub use rawpkt_wire::rule::{Action, FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch, Prefix, RuleError};
pub use rawpkt_wire::syntax::ParseError;

#[cfg(feature = "xdp")]
pub(crate) mod bpf;
#[cfg(feature = "mlx5")]
pub(crate) use rawpkt_wire::ibv_spec;
#[cfg(feature = "xdp")]
pub(crate) use rawpkt_wire::matcher;
#[cfg(feature = "mlx5")]
pub(crate) use rawpkt_wire::rss;
pub(crate) use rawpkt_wire::{rule, wire};
