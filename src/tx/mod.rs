//! Transmit burst paths, one module per backend.

// The Direct Verbs datapath: the mlx5 backend's and the model's.
#[cfg(any(feature = "model", feature = "mlx5"))]
pub(crate) mod dv;
#[cfg(feature = "mlx5")]
pub(crate) mod verbs;
#[cfg(feature = "xdp")]
pub(crate) mod xdp;

use crate::flow::wire::{ETH_HEADER_LEN, ETH_MIN_FRAME};
use crate::mem::pool::Burst;

/// Pads packet `i` of `pkts`, if it is a runt (an Ethernet header but shorter than the minimum,
/// `ETH_MIN_FRAME`: 60 bytes without FCS), with zeros up to the minimum in its own buffer, as a
/// MAC pads a short frame on the wire.
/// Every send path does this where it cannot hand the device a runt as it is: rdma-core's mlx5
/// provider refuses a raw-packet send of fewer than 18 bytes (`providers/mlx5/qp.c`
/// `copy_eth_inline_headers`: EINVAL, which fails that WR and every one chained after it), a
/// ConnectX-4 needs those 18 bytes inline in every SEND, and veth puts a runt on the wire
/// unpadded. Returns false, changing nothing, for a frame that is no runt (shorter than an
/// Ethernet header, which no device can send, or not short at all) or whose buffer has no room
/// for the padding: the caller then drops a frame that is not fit to send, and counts it.
#[cold]
pub(crate) fn pad_runt(pkts: &mut Burst, i: usize) -> bool {
    let len = pkts.packet(i).len();
    if !(ETH_HEADER_LEN..ETH_MIN_FRAME).contains(&len) || pkts.set_len(i, ETH_MIN_FRAME).is_err() {
        return false;
    }
    pkts.data_mut(i)[len..].fill(0);
    true
}
