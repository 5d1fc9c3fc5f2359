//! The environment variables the tools read, in one place: the library takes the same settings
//! as options ([`ModelOptions`] and [`PortOptions::rdma_core`] in [`PortOptions`]) and reads no
//! environment itself.
//!
//! - `RAWPKT_MODEL_CPU=N`: pin the model NIC's polling thread to CPU N (a value that is not a CPU
//!   number is said once on stderr, and the thread runs unpinned).
//! - `RAWPKT_MODEL_TRACE=FILE`: trace the WQEs and CQEs the model executes and writes
//!   (`docs/model-trace.md`).
//! - `RAWPKT_MODEL_RX_PPS=N`: model ports take at most N frames a second (a value that is not a
//!   positive number is ignored).
//! - `RAWPKT_LIBIBVERBS=FILE`, `RAWPKT_LIBMLX5=FILE`: `mlx5:`/`verbs:` ports load rdma-core from
//!   these files rather than by soname (a private copy, or the model library `model-verbs`); one
//!   of them alone leaves the other at its soname.

#[cfg(feature = "mlx5")]
use crate::mlx5::LibPaths;
use crate::spec::{ModelOptions, PortOptions};
use crate::{Error, Port};

/// [`ModelOptions`] from `RAWPKT_MODEL_CPU`, `RAWPKT_MODEL_TRACE` and `RAWPKT_MODEL_RX_PPS`.
pub fn model_options() -> ModelOptions {
    ModelOptions {
        cpu: model_cpu(),
        trace: std::env::var_os("RAWPKT_MODEL_TRACE").map(Into::into),
        rx_capacity_pps: std::env::var("RAWPKT_MODEL_RX_PPS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|&r| r.is_finite() && r > 0.0),
    }
}

/// The rdma-core files `RAWPKT_LIBIBVERBS` and `RAWPKT_LIBMLX5` name; None if neither is set.
#[cfg(feature = "mlx5")]
pub fn rdma_core() -> Option<LibPaths> {
    let (ibverbs, mlx5) = (
        std::env::var_os("RAWPKT_LIBIBVERBS"),
        std::env::var_os("RAWPKT_LIBMLX5"),
    );
    if ibverbs.is_none() && mlx5.is_none() {
        return None;
    }
    let sonames = LibPaths::default();
    Some(LibPaths {
        ibverbs: ibverbs.unwrap_or(sonames.ibverbs),
        mlx5: mlx5.unwrap_or(sonames.mlx5),
    })
}

/// The CPU in `RAWPKT_MODEL_CPU`, if set to a CPU number; any other value is said on stderr
/// (once per process) and the model thread runs unpinned.
pub fn model_cpu() -> Option<usize> {
    let v = std::env::var_os("RAWPKT_MODEL_CPU")?;
    match v.to_str().map(|s| s.trim().parse::<usize>()) {
        Some(Ok(cpu)) => Some(cpu),
        _ => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("rawpkt: RAWPKT_MODEL_CPU={v:?} is not a CPU number; the model thread is not pinned")
            });
            None
        }
    }
}

/// [`crate::open()`] with the model options and rdma-core files the environment gives.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// [`crate::open_with`] with `opts`' model options replaced by those the environment gives, and
/// its rdma-core files by those the environment names (if it names any).
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    let opts = PortOptions {
        model: model_options(),
        #[cfg(feature = "mlx5")]
        rdma_core: rdma_core().or_else(|| opts.rdma_core.clone()),
        ..opts.clone()
    };
    crate::open_with(spec, &opts)
}
