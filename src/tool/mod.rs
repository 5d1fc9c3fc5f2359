//! What pktgen and the examples share, so that every tool behaves the same way: the exit codes
//! (2 for a usage mistake, 1 for a failure) and the one-line error that goes with them, clap
//! errors and `--help` on a closed pipe, the seconds options, CPU pinning, the stderr logger the
//! library's warnings reach, a run's threads and stats lines, and what l2-xconnect needs beyond
//! its forwarding loop (its command line, the model traffic of `--generate`).
//!
//! `env` and `file` are always compiled (the model library reads the model's variables, and
//! opens its files, as the tools do); the rest only with the `tools` feature (on by default),
//! which also brings in clap, core_affinity and hdrhistogram: a library user who turns it off
//! gets none of them.

#[cfg(feature = "tools")]
pub mod cli;
#[cfg(feature = "tools")]
pub mod cpu;
pub mod env;
#[cfg(feature = "tools")]
pub mod fail;
pub mod file;
#[cfg(feature = "tools")]
pub mod log;
#[cfg(feature = "tools")]
pub mod stats;
#[cfg(feature = "tools")]
pub mod threads;
#[cfg(feature = "tools")]
pub mod xconnect;
#[cfg(feature = "tools")]
pub use cli::{finish, parse};

/// poll(2) for a tool's event loop (pktgen's metrics endpoint): waits for events on `fds` at
/// most `timeout_ms` (-1: no limit); the number of descriptors with events, 0 on timeout or
/// when a signal came first.
#[cfg(feature = "tools")]
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
    crate::sys::poll(fds, timeout_ms)
}
#[cfg(feature = "tools")]
pub use fail::Fail;
