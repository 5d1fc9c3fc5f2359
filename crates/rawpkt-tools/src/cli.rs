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

/// A clap error as one line: its text up to the first blank line, and clap's tips after it
/// ("a similar argument exists: '--duration'"), each after a `; `; not the usage and the
/// pointer to `--help` that follow them.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim);
    let head: Vec<&str> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
    let tips = lines.filter(|l| l.starts_with("tip:"));
    let mut line = head.join(" ");
    for tip in tips {
        line += "; ";
        line += tip;
    }
    line
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "t")]
    struct Args {
        #[arg(long)]
        duration: Option<f64>,
        #[arg(long, value_parser = ["constant", "poisson"])]
        shape: Option<String>,
    }

    /// A misspelt option keeps clap's hint at the one it meant, in the same one line.
    #[test]
    fn clap_tips_stay_in_the_one_line() {
        let line = |args: &[&str]| super::one_line(&Args::try_parse_from(args).unwrap_err());
        let l = line(&["t", "--durration", "2"]);
        assert_eq!(
            l,
            "error: unexpected argument '--durration' found; tip: a similar argument exists: '--duration'"
        );
        assert!(!l.contains('\n') && !l.contains("Usage"), "{l}");
        let l = line(&["t", "--shape", "poison"]);
        assert!(
            l.starts_with("error: invalid value 'poison' for '--shape <SHAPE>'")
                && l.contains("tip: a similar value exists: 'poisson'"),
            "{l}"
        );
        // An error without a tip is its first lines only.
        let l = line(&["t", "--duration"]);
        assert!(
            l.starts_with("error: a value is required for '--duration <DURATION>'") && !l.contains(';'),
            "{l}"
        );
    }
}
