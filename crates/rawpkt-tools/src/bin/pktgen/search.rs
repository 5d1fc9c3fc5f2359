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

/// One trial's outcome: frames sent and received, over the seconds it sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trial {
    pub tx: u64,
    pub rx: u64,
    pub seconds: f64,
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

/// The search for one frame size, over trials `trial` runs (`None`: as fast as the sender
/// goes; `Some(rate)`: paced at `rate`): the fastest trial's rate is the bracket's top, or the
/// answer if it lost no more than the threshold; else the bracket `[0, top]` is halved until it
/// is narrower than the resolution, keeping the highest rate that passed. `step` is told each
/// halving. Returns the rate found, its loss and the trials run; None when `stopped` ended the
/// search first. Only the trials' counts and seconds are read, never the clock: the search ends
/// where it does however fast the machine runs.
pub(crate) fn bisect(
    s: &Search,
    mut trial: impl FnMut(Option<f64>) -> Result<Trial, Fail>,
    stopped: &dyn Fn() -> bool,
    mut step: impl FnMut(f64, &Trial, f64, f64),
) -> Result<Option<(f64, f64, u32)>, Fail> {
    // A trial that sent nothing (the host never let the sender run before its time was up)
    // says nothing of the device: it is run again, twice at most.
    let mut trial = move |rate: Option<f64>| -> Result<Trial, Fail> {
        let mut t = trial(rate)?;
        for _ in 0..2 {
            if t.tx > 0 || stopped() {
                break;
            }
            t = trial(rate)?;
        }
        Ok(t)
    };
    let top = trial(None)?;
    let max = top.tx as f64 / top.seconds.max(1e-9);
    let mut trials = 1;
    if top.loss() <= s.loss {
        return Ok((!stopped()).then_some((max, top.loss(), trials)));
    }
    let mut best = (0.0, 1.0);
    let (mut lo, mut hi) = (0.0f64, max);
    // To within the resolution of the answer (the bracket's top), not of the fastest rate,
    // which may be far above it.
    let wide = |lo: f64, hi: f64| match s.resolution {
        Resolution::Fraction(f) => hi - lo > f * hi,
        Resolution::Pps(p) => hi - lo > p,
    };
    // Down to one frame a second, the slowest trial there is: a device that passes nothing
    // ends the search there (with 0), where a bracket of [0, hi] is never narrow in proportion.
    while wide(lo, hi) && hi >= 1.0 && !stopped() {
        let mid = (lo + hi) / 2.0;
        let t = trial(Some(mid.max(1.0)))?;
        trials += 1;
        if t.loss() <= s.loss {
            lo = mid;
            best = (mid, t.loss());
        } else {
            hi = mid;
        }
        step(mid, &t, lo, hi);
    }
    Ok((!stopped()).then_some((best.0, best.1, trials)))
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
        let step = |rate: f64, t: &Trial, lo: f64, hi: f64| {
            if !json {
                rawpkt_sys::errln!(
                    "pktgen: search {size} B: {:.4} Mpps lost {:.4} % -> [{:.4}, {:.4}] Mpps",
                    rate / 1e6,
                    t.loss() * 100.0,
                    lo / 1e6,
                    hi / 1e6
                );
            }
        };
        match bisect(s, |rate| trial(base, size, rate, s.trial), &stopped, step)? {
            Some((pps, loss, trials)) => found.push(Found {
                size,
                pps,
                loss,
                trials,
            }),
            None => break,
        }
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

    /// A device under test as the model's `rx_capacity_pps` is one: `capacity` frames a second
    /// through a buffer of 50 ms worth, full at the first frame; a sender that reaches at most
    /// `fastest` frames a second; trials of `seconds`. A trial's counts are what that pair
    /// gives, with no clock read: the search's convergence on a simulated device.
    fn device(capacity: f64, fastest: f64, seconds: f64) -> impl FnMut(Option<f64>) -> Result<Trial, Fail> {
        move |rate| {
            let tx = (rate.unwrap_or(fastest).min(fastest) * seconds).floor();
            let rx = tx.min((capacity * (seconds + 0.05)).floor());
            Ok(Trial {
                tx: tx as u64,
                rx: rx as u64,
                seconds,
            })
        }
    }

    /// The fastest rate a trial of `seconds` passes at with `loss` allowed, on that device.
    fn answer(capacity: f64, seconds: f64, loss: f64) -> f64 {
        capacity * (seconds + 0.05) / (seconds * (1.0 - loss))
    }

    #[test]
    fn the_search_converges_to_the_capacity_it_is_given() {
        for (capacity, fastest, res, loss) in [
            (200_000.0, 14.88e6, "2%", 0.5),
            (20_000.0, 400_000.0, "1%", 0.0),
            (1e6, 1.3e6, "10k", 0.1),
            // A slow sender, just above the device.
            (100_000.0, 120_000.0, "0.5%", 0.0),
        ] {
            let s = Search::parse("60", 1.0, res, loss).unwrap();
            let want = answer(capacity, 1.0, s.loss);
            let mut steps = 0;
            let (pps, lost, trials) = bisect(&s, device(capacity, fastest, 1.0), &|| false, |_, _, _, _| steps += 1)
                .unwrap()
                .expect("not stopped");
            let within = match s.resolution {
                Resolution::Fraction(f) => f * want * 1.01,
                Resolution::Pps(p) => p,
            };
            assert!(
                pps <= want && want - pps <= within,
                "capacity {capacity}: found {pps}, the answer is {want} to within {within}"
            );
            assert!(lost <= s.loss, "{lost}");
            assert_eq!(trials, steps + 1, "the fastest trial, then one per halving");
        }
    }

    #[test]
    fn a_sender_slower_than_the_device_is_the_answer_in_one_trial() {
        let s = Search::parse("60", 2.0, "1%", 0.0).unwrap();
        let got = bisect(&s, device(1e6, 300_000.0, 2.0), &|| false, |_, _, _, _| {}).unwrap();
        assert_eq!(got, Some((300_000.0, 0.0, 1)));
    }

    /// A trial below the capacity that loses frames anyway (the host held the receiver up) can
    /// only lower the answer: it never passes a rate the device does not take.
    #[test]
    fn trials_lost_to_a_busy_host_never_raise_the_answer() {
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        let mut dev = device(50_000.0, 1e6, 1.0);
        let mut k = 0;
        let flaky = |rate: Option<f64>| {
            k += 1;
            let mut t = dev(rate)?;
            if k % 3 == 0 {
                t.rx = t.rx.saturating_sub(10);
            }
            Ok(t)
        };
        let (pps, _, _) = bisect(&s, flaky, &|| false, |_, _, _, _| {}).unwrap().unwrap();
        assert!(pps <= answer(50_000.0, 1.0, 0.0), "{pps}");
    }

    /// A trial in which the sender sent nothing (a host that never let it run) is run again
    /// rather than taken as the device losing everything.
    #[test]
    fn a_trial_that_sent_nothing_is_run_again() {
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        let mut dev = device(100_000.0, 1e6, 1.0);
        let mut k = 0;
        let starved = |rate: Option<f64>| {
            k += 1;
            let mut t = dev(rate)?;
            if k % 2 == 0 {
                (t.tx, t.rx) = (0, 0);
            }
            Ok(t)
        };
        let (pps, _, _) = bisect(&s, starved, &|| false, |_, _, _, _| {}).unwrap().unwrap();
        let want = answer(100_000.0, 1.0, 0.0);
        assert!(pps <= want && pps >= want * 0.98, "{pps} against {want}");
    }

    /// A device that passes nothing (a wrong address, a cable out) ends the search at one frame
    /// a second with nothing found, after a bounded number of trials (a bracket [0, hi] is never
    /// narrow in proportion, so halving alone would not end).
    #[test]
    fn a_device_that_passes_nothing_ends_the_search_with_nothing() {
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        let nothing = |rate: Option<f64>| {
            Ok(Trial {
                tx: rate.unwrap_or(1e6) as u64,
                rx: 0,
                seconds: 1.0,
            })
        };
        let (pps, loss, trials) = bisect(&s, nothing, &|| false, |_, _, _, _| {}).unwrap().unwrap();
        assert_eq!((pps, loss), (0.0, 1.0));
        assert!(trials <= 22, "{trials} trials");
        // Nothing sent either (at one frame a second, a trial may send none): still bounded.
        let silent = |_: Option<f64>| {
            Ok(Trial {
                tx: 0,
                rx: 0,
                seconds: 1.0,
            })
        };
        let (pps, _, trials) = bisect(&s, silent, &|| false, |_, _, _, _| {}).unwrap().unwrap();
        assert!(pps == 0.0 && trials <= 22, "{pps} after {trials} trials");
    }

    #[test]
    fn a_stopped_search_reports_nothing() {
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        assert_eq!(
            bisect(&s, device(1e5, 1e6, 1.0), &|| true, |_, _, _, _| {}).unwrap(),
            None
        );
    }

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
