//! The environment variables that set how a model NIC runs, read in one place for the tools and
//! the model library (the rawpkt library itself reads no environment):
//!
//! - `RAWPKT_MODEL_CPU=N`: pin the NIC's polling thread to CPU N, one that is online.
//! - `RAWPKT_MODEL_TRACE=FILE`: trace the WQEs and CQEs the NIC executes and writes
//!   (`docs/model-trace.md`); a regular file (created or truncated), nothing else.
//! - `RAWPKT_MODEL_RX_PPS=N`: each port takes at most N frames a second (a positive number),
//!   through a buffer of `RAWPKT_MODEL_RX_BUFFER=S` seconds of it (0 to 60; default 0.05).
//! - `RAWPKT_MODEL_PROFILE=NAME`: the device is profile NAME (`default`, `cx5`, `cx6dx`, `cx7`,
//!   `strict`: [`crate::profile`]).
//! - `RAWPKT_MODEL_KNOBS=K=V[,K=V...]`: knobs set on top of the profile
//!   ([`crate::profile::KNOBS`]), e.g. `wqe_id=ring,flush=late:2`.
//!
//! A value that is malformed or out of range is one line naming the variable, never ignored.

use std::path::PathBuf;

/// What the environment asks of a model NIC.
#[derive(Clone, Debug, Default)]
pub struct EnvOptions {
    /// `RAWPKT_MODEL_CPU`: the CPU the polling thread is pinned to.
    pub cpu: Option<usize>,
    /// `RAWPKT_MODEL_TRACE`: the trace file.
    pub trace: Option<PathBuf>,
    /// `RAWPKT_MODEL_RX_PPS`: frames a second each port takes at most.
    pub rx_capacity_pps: Option<f64>,
    /// `RAWPKT_MODEL_RX_BUFFER`: the buffer in front of that rate, in seconds of it.
    pub rx_buffer_s: Option<f64>,
    /// `RAWPKT_MODEL_PROFILE`: the device profile (checked by [`EnvOptions::device`]).
    pub profile: Option<String>,
    /// `RAWPKT_MODEL_KNOBS`, split at commas (checked by [`EnvOptions::device`]).
    pub knobs: Vec<String>,
}

impl EnvOptions {
    /// The options the environment gives; the error is one line naming the variable.
    pub fn read() -> Result<EnvOptions, String> {
        Ok(EnvOptions {
            cpu: cpu()?,
            trace: std::env::var_os("RAWPKT_MODEL_TRACE").map(Into::into),
            rx_capacity_pps: number(
                "RAWPKT_MODEL_RX_PPS",
                |r| r > 0.0,
                "a positive number of frames a second",
            )?,
            rx_buffer_s: number(
                "RAWPKT_MODEL_RX_BUFFER",
                |b| (0.0..=60.0).contains(&b),
                "seconds from 0 to 60",
            )?,
            profile: std::env::var("RAWPKT_MODEL_PROFILE")
                .ok()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
            knobs: std::env::var("RAWPKT_MODEL_KNOBS")
                .map(|k| {
                    k.split(',')
                        .map(str::trim)
                        .filter(|k| !k.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The device the profile and knobs describe, run as the other options say (trace,
    /// receive rate); one line naming the variable and what is wrong with it otherwise.
    pub fn device(&self) -> Result<crate::ModelConfig, String> {
        let mut cfg = crate::ModelConfig::with_profile(self.profile.as_deref(), &[])
            .map_err(|e| format!("RAWPKT_MODEL_PROFILE: {e}"))?;
        for k in &self.knobs {
            cfg.knob(k).map_err(|e| format!("RAWPKT_MODEL_KNOBS: {e}"))?;
        }
        Ok(self.apply(cfg))
    }

    /// `cfg` with the trace, receive rate and buffer these options set.
    pub fn apply(&self, cfg: crate::ModelConfig) -> crate::ModelConfig {
        crate::ModelConfig {
            trace: self.trace.clone(),
            rx_capacity_pps: self.rx_capacity_pps,
            rx_buffer_s: self.rx_buffer_s.unwrap_or(cfg.rx_buffer_s),
            ..cfg
        }
    }
}

/// A finite number in variable `var` that `ok` accepts; None where it is not set.
fn number(var: &str, ok: impl Fn(f64) -> bool, expected: &str) -> Result<Option<f64>, String> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    v.to_str()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|&x| x.is_finite() && ok(x))
        .map(Some)
        .ok_or_else(|| format!("{var}={v:?}: expected {expected}"))
}

/// The CPU in `RAWPKT_MODEL_CPU`, if set: a CPU number, and one that is online, since the
/// model's thread could be pinned nowhere else.
fn cpu() -> Result<Option<usize>, String> {
    let Some(v) = std::env::var_os("RAWPKT_MODEL_CPU") else {
        return Ok(None);
    };
    let cpu = v
        .to_str()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("RAWPKT_MODEL_CPU={v:?}: expected a CPU number"))?;
    let online = rawpkt_sys::online_cpus();
    if !online.contains(&cpu) {
        return Err(format!(
            "RAWPKT_MODEL_CPU={cpu}: no such CPU (online: {})",
            rawpkt_sys::cpu_list(&online)
        ));
    }
    Ok(Some(cpu))
}
