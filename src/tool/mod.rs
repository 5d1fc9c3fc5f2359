//! What the tools (pktgen, the examples, the model library) share.
pub mod env;
