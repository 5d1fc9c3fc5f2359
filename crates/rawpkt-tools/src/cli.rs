//! The command-line conventions every tool follows: a clap error is one line and exit 2,
//! `--help` is no failure even into a closed pipe, a run ends by [`finish`].

use std::process::ExitCode;
use std::time::Duration;

use super::Fail;

/// Parses the command line with clap. `--help` and `--version` print and end the tool with 0 (a
/// reader that has gone, `tool --help | head -1`, is no reason to fail); a bad command line is
/// reported by [`report`] as one line (see [`one_line`]) under `prefix` and ends it with 2.
pub fn parse<C: clap::Parser>(prefix: &str) -> Result<C, ExitCode> {
    C::try_parse().map_err(|e| {
        if e.use_stderr() {
            let line = one_line(&e);
            report(prefix, &Fail::Usage(line.trim_start_matches("error: ").to_string()))
        } else {
            let _ = e.print();
            ExitCode::SUCCESS
        }
    })
}

/// A clap error as one line: its text up to the first blank line (the usage tips follow it).
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let head: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    head.join(" ")
}

/// Writes `prefix: e` to stderr and returns the exit status that goes with `e`.
pub fn report(prefix: &str, e: &Fail) -> ExitCode {
    rawpkt_sys::errln!("{prefix}: {e}");
    ExitCode::from(e.code())
}

/// The end of a tool's `main`: reports a failed run under `prefix`; after a run that went well,
/// a closed stdout (`tool | head -1`, which stopped the run as Ctrl-C does) ends the process by
/// SIGPIPE, quietly, as any Unix filter whose reader has gone ([`rawpkt_sys::signal::finish_stdout`]).
pub fn finish(prefix: &str, run: Result<(), Fail>) -> ExitCode {
    if let Err(e) = run {
        return report(prefix, &e);
    }
    match rawpkt_sys::signal::finish_stdout() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(prefix, &Fail::Runtime(format!("standard output: {e}"))),
    }
}

fn secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err("expected a number of seconds, at least 0".into()),
    }
}

/// A clap value parser: a number of seconds, more than 0 (`--duration`).
pub fn positive_secs(s: &str) -> Result<Duration, String> {
    match secs(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err("expected a number of seconds, more than 0".into()),
    }
}

/// Shortest stats interval: 1e-9 once printed 600 000 lines a second. iperf3's bound for its
/// reports (`-i`, `MIN_INTERVAL` in iperf_api.h).
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A clap value parser: seconds between stats lines, 0 (summary only) or at least
/// [`MIN_INTERVAL`] (`--stats-interval`).
pub fn interval(s: &str) -> Result<Duration, String> {
    match secs(s) {
        Ok(d) if d.is_zero() || d >= MIN_INTERVAL => Ok(d),
        _ => Err(format!(
            "expected 0 (summary only) or a number of seconds, at least {}",
            MIN_INTERVAL.as_secs_f64()
        )),
    }
}
