//! What the library's integration tests share: the workspace's test support, DV queue pairs on a
//! stepped model NIC (feature `internals`), and rdma-core's vectors.
#![allow(dead_code, unused_imports)]

pub use rawpkt_test_support::*;

#[cfg(feature = "internals")]
mod rig;
#[cfg(feature = "internals")]
pub use rig::*;

/// Vector `name` of rdma-core's own encoders (`mlx5_prm::vectors`).
pub fn golden(name: &str) -> Vec<u8> {
    mlx5_prm::vectors::bytes(name)
}

/// The profile the DV tests run against: `RAWPKT_MODEL_PROFILE` (`scripts/test.sh --profiles`
/// runs the DV set once per profile), else the default device. Tests may read the environment;
/// the library does not.
pub fn profile() -> String {
    std::env::var("RAWPKT_MODEL_PROFILE").unwrap_or_else(|_| "default".into())
}

/// The model device a DV test runs against: [`profile`] with `RAWPKT_MODEL_KNOBS` on top (what
/// `mlx5_model::env` reads for the tools and the model library). Replaces
/// `ModelConfig::default()` in the DV set, so that every test meets every profile's behaviour.
pub fn device() -> mlx5_model::ModelConfig {
    let e = mlx5_model::env::EnvOptions {
        profile: Some(profile()),
        ..mlx5_model::env::EnvOptions::read().unwrap_or_else(|e| panic!("{e}"))
    };
    let cfg = e.device().unwrap_or_else(|e| panic!("{e}"));
    mlx5_model::ModelConfig {
        trace: None,
        rx_capacity_pps: None,
        ..cfg
    }
}

/// A ConnectX-4 (L2 inline, no eMPW, no striding RQ) that behaves as [`device`] does
/// otherwise: the profile's knobs on a ConnectX-4's caps.
pub fn device_cx4() -> mlx5_model::ModelConfig {
    let d = device();
    mlx5_model::ModelConfig {
        inline_mode: mlx5_model::ModelConfig::connectx4().inline_mode,
        enhanced_mpw: false,
        striding_rq: mlx5_prm::mprq::Caps::NONE,
        ..d
    }
}

/// Whether the test may go on: `cond` holds of the device, else it says
/// `PROFILE-SKIP <why>` (counted by `scripts/test.sh --profiles`) and the test returns early.
/// For the rare assertion only one knob value makes true; most tests hold on every profile.
pub fn requires(cond: bool, why: &str) -> bool {
    if !cond {
        println!(
            "PROFILE-SKIP {} ({}): {why}",
            profile(),
            std::thread::current().name().unwrap_or("?")
        );
    }
    cond
}

/// `d` with knob `item` set: a test that checks exact shapes of the model's choice pins that
/// choice (`zip=regular` for session layouts) and keeps the profile's other behaviours.
pub fn with_knob(mut d: mlx5_model::ModelConfig, item: &str) -> mlx5_model::ModelConfig {
    d.knob(item).unwrap_or_else(|e| panic!("{e}"));
    d
}
