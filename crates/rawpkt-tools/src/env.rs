//! The environment variables the tools read, in one place: the library takes the same settings
//! as options ([`ModelOptions`] and the rdma-core files in [`PortOptions`]) and reads no
//! environment itself.
//!
//! - `RAWPKT_MODEL_CPU`, `RAWPKT_MODEL_TRACE`, `RAWPKT_MODEL_RX_PPS`: how the model NIC behind
//!   `model:` ports runs (`mlx5_model::env`).
//! - `RAWPKT_LIBIBVERBS=FILE`, `RAWPKT_LIBMLX5=FILE`: `mlx5:`/`verbs:` ports load rdma-core from
//!   these files rather than by soname (a private copy, or the model library `model-verbs`); one
//!   of them alone leaves the other at its soname.

use rawpkt::LibPaths;
use rawpkt::{Error, ModelOptions, Port, PortOptions};

/// [`ModelOptions`] from the model's variables (`mlx5_model::env`).
pub fn model_options() -> ModelOptions {
    let e = mlx5_model::env::EnvOptions::read();
    ModelOptions::default()
        .cpu(e.cpu)
        .trace(e.trace)
        .rx_capacity_pps(e.rx_capacity_pps)
}

/// The rdma-core files `RAWPKT_LIBIBVERBS` and `RAWPKT_LIBMLX5` name; None if neither is set.
pub fn rdma_core() -> Option<LibPaths> {
    LibPaths::from_env()
}

/// [`rawpkt::open()`] with the model options and rdma-core files the environment gives.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// [`rawpkt::open_with`] with `opts`' model options replaced by those the environment gives, and
/// its rdma-core files by those the environment names (if it names any).
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    let opts = opts
        .clone()
        .model(model_options())
        .rdma_core(rdma_core().or_else(|| opts.rdma_core.clone()));
    rawpkt::open_with(spec, &opts)
}
