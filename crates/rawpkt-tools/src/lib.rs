//! rawpkt's tools, pktgen, l2-xconnect and rx-sink, and what they share so that every tool
//! behaves the same way: the exit codes (2 for a usage mistake, 1 for a failure) and the
//! one-line error that goes with them, clap errors and `--help` on a closed pipe, the seconds
//! options, CPU pinning, the stderr logger the library's warnings reach, a run's threads and stats
//! lines, pcap files, and what l2-xconnect needs beyond its forwarding loop (its command line, the
//! model traffic of `--generate`).
//!
//! The tools use the `rawpkt` library's public API only; their command-line and statistics
//! dependencies (clap, hdrhistogram, ...) are theirs, not the library's.

pub mod cli;
pub mod cpu;
pub mod env;
pub mod fail;
pub mod file;
pub mod log;
pub mod pcap;
pub mod stats;
pub mod threads;
pub mod xconnect;
pub use cli::{finish, parse};
pub use fail::Fail;
pub use rawpkt_sys::{errln, outln};

/// poll(2) for a tool's event loop (pktgen's metrics endpoint): waits for events on `fds` at
/// most `timeout_ms` (-1: no limit); the number of descriptors with events, 0 on timeout or
/// when a signal came first.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
    rawpkt_sys::poll(fds, timeout_ms)
}
