//! `rawpkt-selftest`: runs rawpkt on a ConnectX port (`mlx5:`) against a peer port cabled to it
//! and writes what it found, the device's identity and capabilities, and the result of each
//! check, as lines on stdout and one JSON report (`docs/selftest.md` documents every field).
//!
//! ```text
//! rawpkt-selftest --port mlx5:mlx5_0/1 --peer mlx5:mlx5_1/1 [--frames N] [--json FILE]
//! ```

mod bifurcation;
mod counters;
mod json;
mod steps;
mod traffic;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use json::J;
use rawpkt_tools::{self as tool, Fail};

const ABOUT: &str = "\
Runs rawpkt on a ConnectX port against a peer port cabled to it (or on one port with the \
device's local loopback) and reports the device's identity, every capability the driver chose \
by, and a check per step: frames through every receive mode and size, byte-compared, with \
rawpkt's counters against the device's; ring wraps past 65,536 WQEs with the raw wqe_ids; send \
errors injected (a bad lkey, an oversize frame) and recovered from; receive timestamps against \
the device's clock; the netdev's ARP, ND and TCP while rules steal the rest. One line per step \
(PASS, FAIL or SKIP(reason)); --json writes it all (docs/selftest.md).";

#[derive(Parser, Debug)]
#[command(name = "rawpkt-selftest", about = ABOUT, version)]
struct Args {
    /// The port under test: mlx5:NETDEV or mlx5:mlx5_0/1.
    #[arg(long, value_name = "SPEC")]
    port: String,
    /// The port cabled to it (another mlx5: port of this host).
    #[arg(long, value_name = "SPEC", conflicts_with = "loopback")]
    peer: Option<String>,
    /// No peer: frames go out and come back on the port itself (the device's local loopback).
    #[arg(long)]
    loopback: bool,
    /// Frames per receive mode and size.
    #[arg(long, default_value_t = 10_000_000, value_name = "N")]
    frames: u64,
    /// Frame sizes, comma-separated: bytes (60 to 9000) or `imix` (7:4:1 of 60, 590, 1514).
    #[arg(long, default_value = "60,128,512,1514,imix,9000", value_name = "LIST")]
    sizes: String,
    /// Receive modes, comma-separated: cyclic, compressed, striding, striding+compressed.
    #[arg(
        long,
        default_value = "cyclic,compressed,striding,striding+compressed",
        value_name = "LIST"
    )]
    modes: String,
    /// Skip a step (identity and caps always run): datapath, ring_wraps, tx_errors,
    /// timestamps, bifurcation. May be given more than once.
    #[arg(long, value_name = "STEP")]
    skip: Vec<String>,
    /// The network namespace of the peer's netdev, for the bifurcation step.
    #[arg(long, value_name = "NS")]
    peer_netns: Option<String>,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    /// Only the step lines.
    #[arg(long)]
    quiet: bool,
}

/// A size of `--sizes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Fixed(usize),
    Imix,
}

impl Size {
    pub fn name(self) -> String {
        match self {
            Size::Fixed(n) => n.to_string(),
            Size::Imix => "imix".into(),
        }
    }

    /// The length of frame `seq`.
    pub fn len(self, seq: u64) -> usize {
        match self {
            Size::Fixed(n) => n,
            // The simple IMIX: 7 of 60 bytes, 4 of 590, 1 of 1514 in every 12.
            Size::Imix => match seq % 12 {
                0..=6 => 60,
                7..=10 => 590,
                _ => 1514,
            },
        }
    }

    /// The longest frame of the size.
    pub fn max(self) -> usize {
        match self {
            Size::Fixed(n) => n,
            Size::Imix => 1514,
        }
    }
}

fn parse_sizes(s: &str) -> Result<Vec<Size>, Fail> {
    s.split(',')
        .map(|v| match v.trim() {
            "imix" => Ok(Size::Imix),
            n => match n.parse::<usize>() {
                Ok(n) if (60..=9000).contains(&n) => Ok(Size::Fixed(n)),
                _ => Err(Fail::Usage(format!(
                    "--sizes: {}: expected a number of bytes from 60 to 9000, or imix",
                    rawpkt_wire::text::echo(v)
                ))),
            },
        })
        .collect()
}

fn parse_modes(s: &str) -> Result<Vec<&'static str>, Fail> {
    s.split(',')
        .map(|v| {
            rawpkt::QueueConfig::RX_MODES
                .iter()
                .find(|m| m.0 == v.trim())
                .map(|m| m.0)
                .ok_or_else(|| {
                    Fail::Usage(format!(
                        "--modes: {}: expected cyclic, compressed, striding or striding+compressed",
                        rawpkt_wire::text::echo(v)
                    ))
                })
        })
        .collect()
}

/// The steps, in order.
pub const STEPS: [&str; 8] = [
    "identity",
    "caps",
    "datapath",
    "ring_wraps",
    "tx_errors",
    "timestamps",
    "bifurcation",
    "events",
];

fn main() -> ExitCode {
    tool::log::init();
    let args = match tool::parse::<Args>("rawpkt-selftest") {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(args) {
        Ok(true) => match rawpkt_sys::signal::finish_stdout() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        },
        Ok(false) => ExitCode::from(1),
        Err(e) => tool::cli::report("rawpkt-selftest", &e),
    }
}

/// Runs the steps; Ok(true) when none failed.
fn run(args: Args) -> Result<bool, Fail> {
    let sizes = parse_sizes(&args.sizes)?;
    let modes = parse_modes(&args.modes)?;
    if args.frames == 0 {
        return Err(Fail::Usage("--frames: at least 1".into()));
    }
    for s in &args.skip {
        if !STEPS[2..].contains(&s.as_str()) {
            return Err(Fail::Usage(format!(
                "--skip {}: expected one of {}",
                rawpkt_wire::text::echo(s),
                STEPS[2..].join(", ")
            )));
        }
    }
    if args.peer.is_none() && !args.loopback {
        return Err(Fail::Usage(
            "give --peer SPEC (a port cabled to --port) or --loopback".into(),
        ));
    }
    if !args.port.starts_with("mlx5:") || args.peer.as_deref().is_some_and(|p| !p.starts_with("mlx5:")) {
        return Err(Fail::Usage(
            "--port and --peer are mlx5: ports (mlx5:NETDEV or mlx5:mlx5_0/1)".into(),
        ));
    }
    let _ = rawpkt_sys::signal::stop_flag();
    let started = std::time::SystemTime::now();
    let t0 = Instant::now();
    let mut env = steps::Env::open(&args.port, args.peer.as_deref(), args.quiet)?;
    let cfg = steps::Config {
        frames: args.frames,
        sizes,
        modes,
        skip: args.skip.clone(),
        peer_netns: args.peer_netns.clone(),
    };
    let results = steps::run_all(&mut env, &cfg);
    let failed: Vec<String> = results
        .iter()
        .filter(|s| s.status == steps::Status::Fail)
        .map(|s| s.name.to_string())
        .collect();
    let report = J::obj()
        .with("schema", "rawpkt-selftest/1")
        .with("tool_version", env!("CARGO_PKG_VERSION"))
        .with(
            "started_at",
            started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        )
        .with("duration_s", t0.elapsed().as_secs_f64())
        .with("result", if failed.is_empty() { "pass" } else { "fail" })
        .with("failed_steps", failed.clone())
        .with("host", steps::host())
        .with("ports", env.ports_json())
        .with("caps", env.caps_json())
        .with("steps", J::Arr(results.iter().map(steps::StepResult::json).collect()));
    if let Some(path) = &args.json {
        std::fs::write(path, report.pretty()).map_err(|e| Fail::Runtime(format!("--json {}: {e}", path.display())))?;
    }
    if !args.quiet {
        rawpkt_sys::outln!(
            "{}: {} steps, {} failed{}",
            if failed.is_empty() { "PASS" } else { "FAIL" },
            results.len(),
            failed.len(),
            if failed.is_empty() {
                String::new()
            } else {
                format!(" ({})", failed.join(", "))
            }
        );
    }
    Ok(failed.is_empty())
}
