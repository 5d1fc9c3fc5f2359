//! What the library's integration tests share: the workspace's test support, DV queue pairs on a
//! stepped model NIC (feature `internals`), and rdma-core's vectors.
#![allow(dead_code, unused_imports)]

pub use rawpkt_test_support::*;

#[cfg(feature = "internals")]
mod rig;
#[cfg(feature = "internals")]
pub use rig::*;

/// Vector `name` of rdma-core's own encoders (`mlx5_prm::vectors`).
pub fn golden(name: &str) -> Vec<u8> {
    mlx5_prm::vectors::bytes(name)
}
