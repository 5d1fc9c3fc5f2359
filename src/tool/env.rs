//! The environment variables the tools read, in one place: the library takes the same settings
//! as options ([`ModelOptions`] in [`PortOptions`]) and reads no environment itself.
//!
//! - `RAWPKT_MODEL_CPU=N`: pin the model NIC's polling thread to CPU N (a value that is not a CPU
//!   number is said once on stderr, and the thread runs unpinned).
//! - `RAWPKT_MODEL_TRACE=FILE`: trace the WQEs and CQEs the model executes and writes
//!   (`docs/model-trace.md`).
//! - `RAWPKT_MODEL_RX_PPS=N`: model ports take at most N frames a second (a value that is not a
//!   positive number is ignored).

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

/// [`crate::open()`] with the model options the environment gives.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// [`crate::open_with`] with `opts`' model options replaced by those the environment gives.
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    let opts = PortOptions {
        model: model_options(),
        ..opts.clone()
    };
    crate::open_with(spec, &opts)
}
