//! What pktgen and the examples share, so that every tool behaves the same way: the exit codes
//! (2 for a usage mistake, 1 for a failure) and the one-line error that goes with them, clap
//! errors and `--help` on a closed pipe, the seconds options, CPU pinning, the stderr logger the
//! library's warnings reach, and the model traffic source `l2-xconnect --generate` runs.
//!
//! Compiled only with the `tools` feature (on by default), which also brings in clap,
//! core_affinity and hdrhistogram: a library user who turns it off gets none of them.

pub mod cli;
pub mod cpu;
pub mod fail;
pub mod log;

pub use cli::{finish, parse};
pub use fail::Fail;
