//! Memory a NIC can reach: mapped regions and the packet-buffer pools carved from them.

pub mod pool;
pub use rawpkt_sys::region;
