//! The environment variables that set how a model NIC runs, read in one place for the tools and
//! the model library (the rawpkt library itself reads no environment):
//!
//! - `RAWPKT_MODEL_CPU=N`: pin the NIC's polling thread to CPU N.
//! - `RAWPKT_MODEL_TRACE=FILE`: trace the WQEs and CQEs the NIC executes and writes
//!   (`docs/model-trace.md`).
//! - `RAWPKT_MODEL_RX_PPS=N`: each port takes at most N frames a second.
//! - `RAWPKT_MODEL_PROFILE=NAME`: the device is profile NAME (`default`, `cx5`, `cx6dx`, `cx7`,
//!   `strict`: [`crate::profile`]).
//! - `RAWPKT_MODEL_KNOBS=K=V[,K=V...]`: knobs set on top of the profile
//!   ([`crate::profile::KNOBS`]), e.g. `wqe_id=ring,flush=late:2`.

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
    /// `RAWPKT_MODEL_PROFILE`: the device profile (checked by [`EnvOptions::device`]).
    pub profile: Option<String>,
    /// `RAWPKT_MODEL_KNOBS`, split at commas (checked by [`EnvOptions::device`]).
    pub knobs: Vec<String>,
}

impl EnvOptions {
    /// The options the environment gives. A value that is not a CPU number or a positive rate is
    /// said once on stderr and left out.
    pub fn read() -> EnvOptions {
        EnvOptions {
            cpu: cpu(),
            trace: std::env::var_os("RAWPKT_MODEL_TRACE").map(Into::into),
            rx_capacity_pps: std::env::var("RAWPKT_MODEL_RX_PPS")
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|&r| r.is_finite() && r > 0.0),
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
        }
    }

    /// The device the profile and knobs describe, run as the other options say (trace,
    /// receive rate); one line naming the variable and what is wrong with it otherwise.
    pub fn device(&self) -> Result<crate::ModelConfig, String> {
        let cfg = crate::ModelConfig::with_profile(self.profile.as_deref(), &[])
            .map_err(|e| format!("RAWPKT_MODEL_PROFILE: {e}"))?;
        let mut cfg = cfg;
        for k in &self.knobs {
            cfg.knob(k).map_err(|e| format!("RAWPKT_MODEL_KNOBS: {e}"))?;
        }
        Ok(self.apply(cfg))
    }

    /// `cfg` with the trace and receive rate these options set.
    pub fn apply(&self, cfg: crate::ModelConfig) -> crate::ModelConfig {
        crate::ModelConfig {
            trace: self.trace.clone(),
            rx_capacity_pps: self.rx_capacity_pps,
            ..cfg
        }
    }
}

/// The CPU in `RAWPKT_MODEL_CPU`, if set to a CPU number; any other value is said on stderr
/// (once per process) and the model thread runs unpinned.
fn cpu() -> Option<usize> {
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
