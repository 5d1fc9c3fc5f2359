//! ConnectX ports through rdma-core: `mlx5:` (Direct Verbs when the device offers what the DV
//! datapath needs, else ibverbs) and `verbs:` (ibverbs, forced).
//!
//! Bring-up follows VPP's `src/plugins/rdma/device.c` (rdma_dev_init, rdma_txq_init,
//! rdma_rxq_init, rdma_rxq_finalize) and rdma-core's man pages (`ibv_create_wq(3)`,
//! `ibv_create_rwq_ind_table(3)`, `ibv_create_qp_ex(3)`, `ibv_create_flow(3)`,
//! `mlx5dv_init_obj(3)`):
//! - at open: the device (found through sysfs, `discover`), its port, the DV probe, a PD;
//! - per pool: one MR over the whole pool, registered by the first queue over that pool and
//!   kept while any queue over it lives;
//! - per `tx_queue`: a CQ (64-byte CQEs forced in DV mode) and a RAW_PACKET QP with a send queue
//!   only, RESET → INIT(port) → RTR → RTS;
//! - per `rx_queue`: a CQ and a receive WQ (`IBV_WQT_RQ`), RDY;
//! - once all `rx_queues` receive queues exist: the indirection table, the RSS QPs, then the
//!   flows. Dropping any receive queue takes the flows away again (Linux gets its traffic back)
//!   until the set is complete once more.
//!
//! Everything is released in reverse through reference counts (see `sys::rdma::objects`):
//! flows, RSS QPs, indirection table, WQs, QPs, CQs, MRs, PD, context.

mod clock;
mod discover;
mod events;
mod flows;
mod inline;
mod layout;
mod port;
mod report;

pub use report::{report, DeviceReport, StridingCaps};

use crate::spec::{Backend, PortOptions};
use crate::Error;

use crate::sys::rdma::{LibPaths, LoadError};

/// Opens `kind:rest` (`mlx5:` picks DV when it can, `verbs:` forces ibverbs).
pub(crate) fn open_port(kind: &str, rest: &str, opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    let rdma = crate::sys::rdma::rdma(opts.rdma_core.as_ref()).map_err(load_error)?;
    Ok(Box::new(port::Mlx5Port::open(rdma, kind, rest, opts)?))
}

/// Makes ports find rdma-core at these files from now on, instead of the sonames, unless their
/// [`PortOptions::rdma_core`] names others (for tests and for applications that ship their own
/// copy).
pub fn use_libraries(libibverbs: impl Into<std::ffi::OsString>, libmlx5: impl Into<std::ffi::OsString>) {
    crate::sys::rdma::use_libraries(LibPaths {
        ibverbs: libibverbs.into(),
        mlx5: libmlx5.into(),
    });
}

/// Checks that rdma-core loads from these files and lists the RDMA devices it sees
/// (`mlx5_0/1 (ens1f0, 0000:3b:00.0)`). The error is one line saying what is missing and how to
/// install it.
pub fn probe(
    libibverbs: impl Into<std::ffi::OsString>,
    libmlx5: impl Into<std::ffi::OsString>,
) -> Result<Vec<String>, Error> {
    let rdma = crate::sys::rdma::load_from(&LibPaths {
        ibverbs: libibverbs.into(),
        mlx5: libmlx5.into(),
    })
    .map_err(load_error)?;
    discover::list_devices(&rdma)
}

/// rdma-core not loaded: the paths given at fault (`LoadError::is_usage`) or the machine.
fn load_error(e: LoadError) -> Error {
    if e.is_usage() {
        Error::config(e.to_string())
    } else {
        Error::device(e.to_string())
    }
}
