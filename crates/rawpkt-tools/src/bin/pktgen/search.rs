//! `--search`: RFC 2544 section 26.1 throughput, by binary search per frame size: the highest
//! rate at which a trial of `--trial` seconds loses at most `--loss-threshold` of its frames,
//! to within `--resolution`.
//!
//! Each trial is pktgen itself, run again with the same ports and options plus `--size`,
//! `--rate`, `--duration` and `--json`, so that a trial is exactly a run a user could make by
//! hand (ports opened and torn down, queues drained, the summary's counts), and the search
//! holds no state a failed trial could leave behind.

use std::process::Command;

use crate::fail::Fail;

pub(crate) struct Search {
    pub sizes: Vec<usize>,
    pub trial: f64,
    /// Stop when the bracket is this narrow: a fraction of its top, or pps.
    pub resolution: Resolution,
    /// Largest fraction of frames a passing trial may lose.
    pub loss: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Resolution {
    Fraction(f64),
    Pps(f64),
}

/// RFC 2544 section 9.1's Ethernet sizes, without the 4-byte FCS.
pub(crate) const RFC2544_SIZES: &str = "60,124,252,508,1020,1276,1514";

/// Options pktgen's own trials set, so the user may not.
pub(crate) const TRIAL_OPTIONS: [&str; 8] = [
    "--size",
    "--rate",
    "--duration",
    "--count",
    "--streams",
    "--pcap",
    "--metrics",
    "--shape",
];

impl Search {
    pub(crate) fn parse(sizes: &str, trial: f64, resolution: &str, loss_pct: f64) -> Result<Search, String> {
        let sizes = sizes
            .split(',')
            .map(|s| match s.trim().parse::<usize>() {
                Ok(n) if (60..=1514).contains(&n) => Ok(n),
                _ => Err(format!(
                    "--search-sizes {s:?}: expected frame sizes from 60 to 1514, like 60,512,1514"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !(trial.is_finite() && (0.1..=3600.0).contains(&trial)) {
            return Err(format!("--trial {trial}: must be from 0.1 to 3600 seconds"));
        }
        let resolution = match resolution.strip_suffix('%') {
            Some(p) => match p.parse::<f64>() {
                Ok(f) if f > 0.0 && f < 100.0 => Resolution::Fraction(f / 100.0),
                _ => return Err(format!("--resolution {resolution}: a percentage above 0 and below 100")),
            },
            None => Resolution::Pps(crate::cli::rate(resolution).map_err(|e| e.replacen("--rate", "--resolution", 1))?),
        };
        if !(loss_pct.is_finite() && (0.0..100.0).contains(&loss_pct)) {
            return Err(format!("--loss-threshold {loss_pct}: a percentage from 0, below 100"));
        }
        Ok(Search {
            sizes,
            trial,
            resolution,
            loss: loss_pct / 100.0,
        })
    }
}

/// One trial's outcome.
#[derive(Clone, Copy, Debug)]
struct Trial {
    tx: u64,
    rx: u64,
    seconds: f64,
}

impl Trial {
    fn loss(&self) -> f64 {
        if self.tx == 0 {
            1.0
        } else {
            self.tx.saturating_sub(self.rx) as f64 / self.tx as f64
        }
    }
}

/// The number after `"key":` in pktgen's own JSON summary line.
fn field(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let end = line[at..].find([',', '}']).map_or(line.len(), |e| at + e);
    line[at..end].parse().ok()
}

fn trial(base: &[String], size: usize, rate: Option<f64>, seconds: f64) -> Result<Trial, Fail> {
    let exe = std::env::current_exe().map_err(|e| Fail::Runtime(format!("--search: pktgen's own path: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(base)
        .args([
            "--size",
            &size.to_string(),
            "--duration",
            &seconds.to_string(),
            "--json",
        ])
        .args(["--latency-rate", "off"]);
    if let Some(r) = rate {
        cmd.args(["--rate", &format!("{r:.0}")]);
    }
    let out = cmd
        .output()
        .map_err(|e| Fail::Runtime(format!("--search: running a trial: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().rev().find(|l| l.contains("\"type\":\"summary\""));
    match summary {
        Some(l) => Ok(Trial {
            tx: field(l, "tx_packets").unwrap_or(0.0) as u64,
            rx: field(l, "rx_packets").unwrap_or(0.0) as u64,
            seconds: field(l, "seconds").unwrap_or(seconds),
        }),
        None => {
            let err = String::from_utf8_lossy(&out.stderr);
            let why = err.lines().rfind(|l| l.starts_with("pktgen: ")).unwrap_or("no summary");
            Err(Fail::Runtime(format!(
                "--search: a trial at {size} bytes failed: {why}"
            )))
        }
    }
}

/// Result for one frame size.
struct Found {
    size: usize,
    pps: f64,
    loss: f64,
    trials: u32,
}

pub(crate) fn run(s: &Search, base: &[String], json: bool) -> Result<(), Fail> {
    let mut found = Vec::new();
    // Ctrl-C reaches the trial running (same process group), which stops and reports; the
    // search then stops too, with the sizes it finished.
    let stopped = || rawpkt_sys::signal::stop_flag().load(std::sync::atomic::Ordering::Relaxed);
    for &size in &s.sizes {
        if stopped() {
            break;
        }
        // As fast as pktgen sends: the bracket's top, or the answer if nothing is lost.
        let top = trial(base, size, None, s.trial)?;
        let max = top.tx as f64 / top.seconds.max(1e-9);
        let mut trials = 1;
        let mut best = (0.0, 1.0);
        if top.loss() <= s.loss {
            best = (max, top.loss());
        } else {
            let (mut lo, mut hi) = (0.0f64, max);
            // To within the resolution of the answer (the bracket's top), not of the fastest
            // rate, which may be far above it.
            let wide = |lo: f64, hi: f64| match s.resolution {
                Resolution::Fraction(f) => hi - lo > f * hi,
                Resolution::Pps(p) => hi - lo > p,
            };
            while wide(lo, hi) && !stopped() {
                let mid = (lo + hi) / 2.0;
                let t = trial(base, size, Some(mid.max(1.0)), s.trial)?;
                trials += 1;
                if t.loss() <= s.loss {
                    lo = mid;
                    best = (mid, t.loss());
                } else {
                    hi = mid;
                }
                if !json {
                    rawpkt_sys::errln!(
                        "pktgen: search {size} B: {:.4} Mpps lost {:.4} % -> [{:.4}, {:.4}] Mpps",
                        mid / 1e6,
                        t.loss() * 100.0,
                        lo / 1e6,
                        hi / 1e6
                    );
                }
            }
        }
        if stopped() {
            break;
        }
        found.push(Found {
            size,
            pps: best.0,
            loss: best.1,
            trials,
        });
    }
    let gbps = |f: &Found| f.pps * (f.size as f64 + 24.0) * 8.0 / 1e9;
    if json {
        for f in &found {
            rawpkt_sys::outln!(
                "{{\"type\":\"search\",\"size\":{},\"rate_pps\":{:.0},\"mpps\":{:.4},\"gbps\":{:.4},\"loss\":{:.6},\"trials\":{}}}",
                f.size,
                f.pps,
                f.pps / 1e6,
                gbps(f),
                f.loss,
                f.trials
            );
        }
    } else {
        rawpkt_sys::outln!("  size      Mpps   Gbit/s   loss %  trials");
        for f in &found {
            rawpkt_sys::outln!(
                "{:6} {:9.4} {:8.3} {:8.4} {:7}",
                f.size,
                f.pps / 1e6,
                gbps(f),
                f.loss * 100.0,
                f.trials
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_json_fields_read() {
        let s = Search::parse("60, 512,1514", 1.0, "0.5%", 0.1).unwrap();
        assert_eq!(s.sizes, [60, 512, 1514]);
        assert_eq!(s.resolution, Resolution::Fraction(0.005));
        assert_eq!(
            Search::parse("60", 1.0, "10k", 0.0).unwrap().resolution,
            Resolution::Pps(1e4)
        );
        assert!(Search::parse("59", 1.0, "1%", 0.0).is_err());
        assert!(Search::parse("60", 0.0, "1%", 0.0).is_err());
        assert!(Search::parse("60", 1.0, "100%", 0.0).is_err());
        assert!(Search::parse("60", 1.0, "1%", 100.0).is_err());
        let l = "{\"type\":\"summary\",\"seconds\":1.000,\"tx_packets\":12,\"rx_packets\":10}";
        assert_eq!(
            (field(l, "tx_packets"), field(l, "rx_packets")),
            (Some(12.0), Some(10.0))
        );
        assert_eq!(field(l, "seconds"), Some(1.0));
    }
}
