//! Traffic selection: which frames a queue receives. For now the RSS hash that spreads a port's
//! frames over its receive queues; flow rules and their compilers build on this module.

pub mod bpf;
pub mod matcher;
pub mod rss;
pub mod rule;
pub mod syntax;
pub mod verbs;
pub mod wire;
