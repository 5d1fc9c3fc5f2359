//! Receive burst paths, one module per backend.

/// Refill once this many receive slots are free, capped by each backend at a quarter of its ring
/// (DPDK's vector path: `min(64, ring / 4)`): the refill's fixed cost (a doorbell record or a
/// producer store) is spread over more packets while the ring stays at least three quarters full.
pub(crate) const REFILL_BATCH: u32 = 64;

// The Direct Verbs datapath: the mlx5 backend's and the model's.
#[cfg(any(feature = "model", feature = "mlx5"))]
pub(crate) mod dv;
#[cfg(any(feature = "model", feature = "mlx5"))]
mod dv_core;
#[cfg(any(feature = "model", feature = "mlx5"))]
pub(crate) mod dv_striding;
#[cfg(feature = "mlx5")]
pub(crate) mod verbs;
#[cfg(feature = "xdp")]
pub(crate) mod xdp;
