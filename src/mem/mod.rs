//! Memory a NIC can reach: mapped regions and the packet-buffer pools carved from them.

pub(crate) mod pool;
pub(crate) use rawpkt_sys::region;
