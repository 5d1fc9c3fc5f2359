//! The environment variables the tools read, in one place: the library takes the same settings
//! as options ([`ModelOptions`] and the rdma-core files in [`PortOptions`]) and reads no
//! environment itself.
//!
//! - `RAWPKT_MODEL_CPU`, `RAWPKT_MODEL_TRACE`, `RAWPKT_MODEL_RX_PPS`, `RAWPKT_MODEL_RX_BUFFER`,
//!   `RAWPKT_MODEL_PROFILE`, `RAWPKT_MODEL_KNOBS`: how the model NIC behind `model:` ports runs
//!   and which device it is (`mlx5_model::env`); a profile or knob the model does not know fails
//!   opening a `model:` port with one line (a usage mistake, exit 2).
//! - `RAWPKT_LIBIBVERBS=FILE`, `RAWPKT_LIBMLX5=FILE`: `mlx5:`/`verbs:` ports load rdma-core from
//!   these files rather than by soname (a private copy, or the model library `model-verbs`); one
//!   of them alone leaves the other at its soname. A path must name a regular file.
//!
//! A value that is malformed or out of range is one line saying so, a usage mistake when a port
//! is opened: never ignored.

use crate::fail::OpenError;
use rawpkt::LibPaths;
use rawpkt::{ModelOptions, Port, PortOptions};

/// [`ModelOptions`] from the model's variables (`mlx5_model::env`); the error is one line naming
/// the variable.
pub fn model_options() -> Result<ModelOptions, String> {
    let e = mlx5_model::env::EnvOptions::read()?;
    Ok(ModelOptions::default()
        .cpu(e.cpu)
        .trace(e.trace)
        .rx_capacity_pps(e.rx_capacity_pps)
        .rx_buffer_s(e.rx_buffer_s)
        .profile(e.profile)
        .knobs(e.knobs))
}

/// One line for `--help`: the model's device profiles and knobs.
pub fn model_profiles_help() -> String {
    let profiles: Vec<&str> = mlx5_model::profile::PROFILES.iter().map(|(p, _)| *p).collect();
    let knobs: Vec<String> = mlx5_model::profile::KNOBS
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "Model ports: RAWPKT_MODEL_PROFILE={} (or `,profile=NAME` in the spec) picks the model \
device; RAWPKT_MODEL_KNOBS=K=V,... (or `,knob=K=V`) sets knobs on top: {}.",
        profiles.join("|"),
        knobs.join(", ")
    )
}

/// The rdma-core files `RAWPKT_LIBIBVERBS` and `RAWPKT_LIBMLX5` name; None if neither is set.
pub fn rdma_core() -> Option<LibPaths> {
    LibPaths::from_env()
}

/// [`rawpkt::open()`] with the model options and rdma-core files the environment gives.
pub fn open(spec: &str) -> Result<Port, OpenError> {
    open_with(spec, &PortOptions::default())
}

/// [`rawpkt::open_with`] with `opts`' model options replaced by those the environment gives, and
/// its rdma-core files by those the environment names (if it names any).
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, OpenError> {
    // The model's settings matter to model ports only (the model library, behind `mlx5:` ports,
    // reads them itself); a mistake in them stops only what they would set up.
    let model = match model_options() {
        Ok(m) => m,
        Err(e) if spec.trim_start().starts_with("model:") => return Err(OpenError::Env(e)),
        Err(_) => ModelOptions::default(),
    };
    let opts = opts
        .clone()
        .model(model)
        .rdma_core(rdma_core().or_else(|| opts.rdma_core.clone()));
    Ok(rawpkt::open_with(spec, &opts)?)
}
