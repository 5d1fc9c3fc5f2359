//! The environment variables the tools read, in one place: the library takes the same settings
//! as options ([`ModelOptions`] and [`PortOptions::rdma_core`] in [`PortOptions`]) and reads no
//! environment itself.
//!
//! - `RAWPKT_MODEL_CPU=N`: pin the model NIC's polling thread to CPU N, one that is online.
//! - `RAWPKT_MODEL_TRACE=FILE`: trace the WQEs and CQEs the model executes and writes
//!   (`docs/model-trace.md`); a regular file (created or truncated), nothing else.
//! - `RAWPKT_MODEL_RX_PPS=N`: model ports take at most N frames a second (a positive number),
//!   through a buffer of `RAWPKT_MODEL_RX_BUFFER=S` seconds of it (0 to 60; default 0.05).
//! - `RAWPKT_LIBIBVERBS=FILE`, `RAWPKT_LIBMLX5=FILE`: `mlx5:`/`verbs:` ports load rdma-core from
//!   these files rather than by soname (a private copy, or the model library `model-verbs`); one
//!   of them alone leaves the other at its soname. A path must name a regular file.
//!
//! A value that is malformed or out of range is one line saying so, a usage mistake
//! ([`ErrorKind::Config`](crate::ErrorKind::Config)) when a port is opened: never ignored.

#[cfg(feature = "mlx5")]
use crate::mlx5::LibPaths;
use crate::spec::{ModelOptions, PortOptions};
use crate::{Error, Port};

/// [`ModelOptions`] from `RAWPKT_MODEL_CPU`, `RAWPKT_MODEL_TRACE`, `RAWPKT_MODEL_RX_PPS` and
/// `RAWPKT_MODEL_RX_BUFFER`; the error is one line naming the variable.
pub fn model_options() -> Result<ModelOptions, String> {
    let rx_capacity_pps = match std::env::var_os("RAWPKT_MODEL_RX_PPS") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|&r| r.is_finite() && r > 0.0)
                .ok_or_else(|| format!("RAWPKT_MODEL_RX_PPS={v:?}: expected a positive number of frames a second"))?,
        ),
    };
    let rx_buffer_s = match std::env::var_os("RAWPKT_MODEL_RX_BUFFER") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|&b| b.is_finite() && (0.0..=60.0).contains(&b))
                .ok_or_else(|| format!("RAWPKT_MODEL_RX_BUFFER={v:?}: expected seconds from 0 to 60"))?,
        ),
    };
    Ok(ModelOptions {
        cpu: model_cpu()?,
        trace: std::env::var_os("RAWPKT_MODEL_TRACE").map(Into::into),
        rx_capacity_pps,
        rx_buffer_s,
    })
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

/// The CPU in `RAWPKT_MODEL_CPU`, if set: a CPU number, and one that is online, since the
/// model's thread could be pinned nowhere else.
pub fn model_cpu() -> Result<Option<usize>, String> {
    let Some(v) = std::env::var_os("RAWPKT_MODEL_CPU") else {
        return Ok(None);
    };
    let cpu = v
        .to_str()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("RAWPKT_MODEL_CPU={v:?}: expected a CPU number"))?;
    let online = crate::sys::online_cpus();
    if !online.contains(&cpu) {
        return Err(format!(
            "RAWPKT_MODEL_CPU={cpu}: no such CPU (online: {})",
            crate::sys::cpu_list(&online)
        ));
    }
    Ok(Some(cpu))
}

/// [`crate::open()`] with the model options and rdma-core files the environment gives.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// [`crate::open_with`] with `opts`' model options replaced by those the environment gives, and
/// its rdma-core files by those the environment names (if it names any).
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    // The model's settings matter to model ports only (the model library, behind `mlx5:` ports,
    // reads them itself); a mistake in them stops only what they would set up.
    let model = match model_options() {
        Ok(m) => m,
        Err(e) if spec.trim_start().starts_with("model:") => return Err(Error::config(e)),
        Err(_) => ModelOptions::default(),
    };
    let opts = PortOptions {
        model,
        #[cfg(feature = "mlx5")]
        rdma_core: rdma_core().or_else(|| opts.rdma_core.clone()),
        ..opts.clone()
    };
    crate::open_with(spec, &opts)
}
