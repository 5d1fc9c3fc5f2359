//! How a queue fails, shared by the burst paths of every backend: the ibverbs receive and send
//! paths take their completion-status mapping and the device-fatal probe from here, so neither
//! imports the other.

use std::sync::Arc;

use rdma_abi::*;

use crate::dv::prm::syndrome;

/// Asks the port whether its device reported a fatal error and stopped.
pub(crate) type DeviceFatal = Arc<dyn Fn() -> bool + Send + Sync>;

/// The mlx5 syndrome an ibverbs completion status stands for (rdma-core
/// providers/mlx5/cq.c `mlx5_handle_error_cqe` maps them one to one), for the shared counters.
pub(crate) fn wc_syndrome(status: ibv_wc_status) -> u8 {
    match status {
        IBV_WC_LOC_LEN_ERR => syndrome::LOCAL_LENGTH,
        IBV_WC_LOC_QP_OP_ERR => syndrome::LOCAL_QP_OP,
        IBV_WC_LOC_PROT_ERR => syndrome::LOCAL_PROT,
        IBV_WC_WR_FLUSH_ERR => syndrome::WR_FLUSH,
        _ => 0xff,
    }
}
