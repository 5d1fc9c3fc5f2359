//! `--search`: RFC 2544 section 26.1 throughput, by binary search per frame size, as two
//! answers (FD.io CSIT's): the NDR, the highest rate at which a trial of `--trial` seconds loses
//! no frame, and the PDR, the highest at which it loses at most `--loss-threshold` (0.5 % by
//! default), each to within `--resolution` and confirmed by a final trial at that rate.
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

/// The PDR's loss threshold by default, in percent: FD.io CSIT's (0.5 %).
pub(crate) const PDR_LOSS_PCT: f64 = 0.5;

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
        Some(l) => {
            let tx = field(l, "tx_packets").unwrap_or(0.0) as u64;
            // Loss by sequence numbers (a duplicate is no frame received more); frames counted
            // at the port only where the summary has no such count.
            let rx = match field(l, "lost") {
                Some(lost) => tx.saturating_sub(lost as u64),
                None => field(l, "rx_packets").unwrap_or(0.0) as u64,
            };
            Ok(Trial {
                tx,
                rx,
                seconds: field(l, "seconds").unwrap_or(seconds),
            })
        }
        None => {
            let err = String::from_utf8_lossy(&out.stderr);
            let why = err.lines().rfind(|l| l.starts_with("pktgen: ")).unwrap_or("no summary");
            Err(Fail::Runtime(format!(
                "--search: a trial at {size} bytes failed: {why}"
            )))
        }
    }
}

/// A rate the search found: the highest at which trials lost no more than its threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Found {
    pub pps: f64,
    /// The loss of the trial that settles it: the final verification trial's when it passed.
    pub loss: f64,
    /// A final trial at `pps`, after the search, passed too: the rate is no single trial's
    /// luck. False where [`VERIFY_ROUNDS`] verifications failed (the answer is then the last
    /// search's, unconfirmed) or where nothing passed (0).
    pub verified: bool,
}

/// Both answers for one frame size, as RFC 2544 and FD.io CSIT report them: the NDR (no drop
/// rate: no frame lost) and the PDR (partial drop rate: at most `--loss-threshold` lost).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub ndr: Found,
    pub pdr: Found,
    pub trials: u32,
}

/// Verification trials at most per answer: a failed one searches again below the rate it
/// failed at, and verifies that.
pub(crate) const VERIFY_ROUNDS: u32 = 3;

/// One frame size's search: runs trials, remembers what each found.
struct Bisect<'a, T, S> {
    s: &'a Search,
    trial: T,
    stopped: &'a dyn Fn() -> bool,
    step: S,
    trials: u32,
    /// Every trial so far: (rate asked, or reached for the fastest; loss).
    seen: Vec<(f64, f64)>,
}

impl<T, S> Bisect<'_, T, S>
where
    T: FnMut(Option<f64>) -> Result<Trial, Fail>,
    S: FnMut(&str, f64, &Trial, f64, f64),
{
    /// A trial at `rate` (None: as fast as the sender goes), run again, twice at most, when it
    /// sent nothing (the host never let the sender run before its time was up: that says
    /// nothing of the device).
    fn run(&mut self, rate: Option<f64>) -> Result<Trial, Fail> {
        let mut t = (self.trial)(rate)?;
        for _ in 0..2 {
            if t.tx > 0 || (self.stopped)() {
                break;
            }
            t = (self.trial)(rate)?;
        }
        self.trials += 1;
        Ok(t)
    }

    /// Whether the bracket `[lo, hi]` is still wider than the resolution: of the answer (the
    /// bracket's top), not of the fastest rate, which may be far above it.
    fn wide(&self, lo: f64, hi: f64) -> bool {
        match self.s.resolution {
            Resolution::Fraction(f) => hi - lo > f * hi,
            Resolution::Pps(p) => hi - lo > p,
        }
    }

    /// Halves `[lo, hi]` (`lo` passed or is 0, `hi` failed) until it is narrow, keeping the
    /// highest rate that passed with at most `threshold` lost; returns it and its loss.
    fn halve(
        &mut self,
        what: &str,
        threshold: f64,
        mut lo: f64,
        mut hi: f64,
        mut best: (f64, f64),
    ) -> Result<(f64, f64), Fail> {
        // Down to one frame a second, the slowest trial there is: a device that passes nothing
        // ends the search there (with 0), where a bracket of [0, hi] is never narrow in
        // proportion.
        while self.wide(lo, hi) && hi >= 1.0 && !(self.stopped)() {
            let mid = (lo + hi) / 2.0;
            let t = self.run(Some(mid.max(1.0)))?;
            self.seen.push((mid, t.loss()));
            if t.loss() <= threshold {
                lo = mid;
                best = (mid, t.loss());
            } else {
                hi = mid;
            }
            (self.step)(what, mid, &t, lo, hi);
        }
        Ok(best)
    }

    /// The answer for `threshold`: the search in `[lo, hi]`, then a final verification trial at
    /// the rate found; one that fails searches again below that rate, [`VERIFY_ROUNDS`] times
    /// at most.
    fn answer(&mut self, what: &str, threshold: f64, lo: f64, hi: f64, best: (f64, f64)) -> Result<Found, Fail> {
        let (mut lo, mut hi, mut best) = (lo, hi, best);
        for _ in 0..VERIFY_ROUNDS {
            best = self.halve(what, threshold, lo, hi, best)?;
            if best.0 <= 0.0 || (self.stopped)() {
                break;
            }
            let t = self.run(Some(best.0.max(1.0)))?;
            self.seen.push((best.0, t.loss()));
            (self.step)(&format!("{what} verification"), best.0, &t, best.0, best.0);
            if t.loss() <= threshold {
                return Ok(Found {
                    pps: best.0,
                    loss: t.loss(),
                    verified: true,
                });
            }
            // The rate failed on a second look: below it, from the highest rate under it that
            // passed (or 0).
            hi = best.0;
            best = self.highest_passing(threshold, hi);
            lo = best.0;
        }
        Ok(Found {
            pps: best.0,
            loss: best.1,
            verified: false,
        })
    }

    /// The highest rate below `under` that a trial passed at with at most `threshold` lost,
    /// and its loss; (0, 1) where none did.
    fn highest_passing(&self, threshold: f64, under: f64) -> (f64, f64) {
        self.seen
            .iter()
            .filter(|&&(r, l)| r < under && l <= threshold)
            .fold((0.0, 1.0), |a, &(r, l)| if r > a.0 { (r, l) } else { a })
    }

    /// The lowest rate a trial lost more than `threshold` at, or None.
    fn lowest_failing(&self, threshold: f64) -> Option<f64> {
        self.seen
            .iter()
            .filter(|&&(_, l)| l > threshold)
            .map(|&(r, _)| r)
            .reduce(f64::min)
    }
}

/// The search for one frame size, over trials `trial` runs (`None`: as fast as the sender
/// goes; `Some(rate)`: paced at `rate`). The fastest trial's rate is the bracket's top, or the
/// PDR if it lost no more than the threshold; else the bracket `[0, top]` is halved until it is
/// narrower than the resolution, keeping the highest rate that passed; a final trial at that
/// rate verifies it. The NDR's search then starts from what the PDR's trials showed (the
/// highest rate that lost nothing, the lowest that lost anything), as FD.io CSIT's MLRsearch
/// shares trials between its two answers. `step` is told each trial after the first, with what
/// it was for ("PDR", "NDR", "... verification") and the bracket after it. Returns None when
/// `stopped` ended the search first. Only the trials' counts and seconds are read, never the
/// clock: the search ends where it does however fast the machine runs.
pub(crate) fn bisect(
    s: &Search,
    trial: impl FnMut(Option<f64>) -> Result<Trial, Fail>,
    stopped: &dyn Fn() -> bool,
    step: impl FnMut(&str, f64, &Trial, f64, f64),
) -> Result<Option<Outcome>, Fail> {
    let mut b = Bisect {
        s,
        trial,
        stopped,
        step,
        trials: 0,
        seen: Vec::new(),
    };
    let top = b.run(None)?;
    let max = top.tx as f64 / top.seconds.max(1e-9);
    b.seen.push((max, top.loss()));
    let start = |threshold: f64| {
        if top.loss() <= threshold {
            (max, max, (max, top.loss()))
        } else {
            (0.0, max, (0.0, 1.0))
        }
    };
    let (lo, hi, best) = start(s.loss);
    let pdr = b.answer("PDR", s.loss, lo, hi, best)?;
    // No frame lost at the PDR's verification: that is the NDR too.
    let ndr = if pdr.verified && pdr.loss == 0.0 {
        pdr
    } else {
        let (lo, hi, best) = start(0.0);
        let passed = b.highest_passing(0.0, f64::INFINITY);
        let (lo, best) = if passed.0 > lo { (passed.0, passed) } else { (lo, best) };
        let hi = b.lowest_failing(0.0).map_or(hi, |f| f.min(hi)).max(lo);
        b.answer("NDR", 0.0, lo, hi, best)?
    };
    Ok((!stopped()).then_some(Outcome {
        ndr,
        pdr,
        trials: b.trials,
    }))
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
        let step = |what: &str, rate: f64, t: &Trial, lo: f64, hi: f64| {
            if !json {
                rawpkt_sys::errln!(
                    "pktgen: search {size} B, {what}: {:.4} Mpps lost {:.4} % -> [{:.4}, {:.4}] Mpps",
                    rate / 1e6,
                    t.loss() * 100.0,
                    lo / 1e6,
                    hi / 1e6
                );
            }
        };
        match bisect(s, |rate| trial(base, size, rate, s.trial), &stopped, step)? {
            Some(o) => found.push((size, o)),
            None => break,
        }
    }
    let gbps = |size: usize, pps: f64| pps * (size as f64 + 24.0) * 8.0 / 1e9;
    if json {
        let one = |size: usize, f: &Found| {
            format!(
                "{{\"rate_pps\":{:.0},\"mpps\":{:.4},\"gbps\":{:.4},\"loss\":{:.6},\"verified\":{}}}",
                f.pps,
                f.pps / 1e6,
                gbps(size, f.pps),
                f.loss,
                f.verified
            )
        };
        for (size, o) in &found {
            rawpkt_sys::outln!(
                "{{\"type\":\"search\",\"size\":{size},\"loss_threshold\":{},\"ndr\":{},\"pdr\":{},\"trials\":{}}}",
                s.loss,
                one(*size, &o.ndr),
                one(*size, &o.pdr),
                o.trials
            );
        }
    } else {
        rawpkt_sys::outln!(
            "  size  NDR Mpps  Gbit/s  loss %  | PDR Mpps  Gbit/s  loss % (<= {} %)  | trials",
            s.loss * 100.0
        );
        let mark = |f: &Found| if f.verified { " " } else { "?" };
        for (size, o) in &found {
            rawpkt_sys::outln!(
                "{:6} {:9.4}{} {:7.3} {:7.4}  | {:8.4}{} {:7.3} {:7.4}{:14}  | {:6}",
                size,
                o.ndr.pps / 1e6,
                mark(&o.ndr),
                gbps(*size, o.ndr.pps),
                o.ndr.loss * 100.0,
                o.pdr.pps / 1e6,
                mark(&o.pdr),
                gbps(*size, o.pdr.pps),
                o.pdr.loss * 100.0,
                "",
                o.trials
            );
        }
        if found.iter().any(|(_, o)| !o.ndr.verified || !o.pdr.verified) {
            rawpkt_sys::outln!("  ? : no final trial at this rate passed (verified {VERIFY_ROUNDS} times and failed)");
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

    fn quiet(_: &str, _: f64, _: &Trial, _: f64, _: f64) {}

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
            let mut steps = 0;
            let o = bisect(&s, device(capacity, fastest, 1.0), &|| false, |_, _, _, _, _| {
                steps += 1
            })
            .unwrap()
            .expect("not stopped");
            for (what, f, allowed) in [("NDR", o.ndr, 0.0), ("PDR", o.pdr, s.loss)] {
                let want = answer(capacity, 1.0, allowed);
                let within = match s.resolution {
                    Resolution::Fraction(f) => f * want * 1.01,
                    Resolution::Pps(p) => p,
                };
                assert!(
                    f.pps <= want && want - f.pps <= within,
                    "capacity {capacity}: {what} {}, the answer is {want} to within {within}",
                    f.pps
                );
                assert!(f.loss <= allowed && f.verified, "{what}: {f:?}");
            }
            assert!(o.ndr.pps <= o.pdr.pps, "{o:?}");
            assert_eq!(o.trials, steps + 1, "the fastest trial, then one per step");
        }
    }

    #[test]
    fn a_sender_slower_than_the_device_is_the_answer_verified_once() {
        let s = Search::parse("60", 2.0, "1%", 0.0).unwrap();
        let got = bisect(&s, device(1e6, 300_000.0, 2.0), &|| false, quiet).unwrap();
        let f = Found {
            pps: 300_000.0,
            loss: 0.0,
            verified: true,
        };
        // The fastest trial, and its verification: no frame lost, so the NDR is the PDR.
        assert_eq!(
            got,
            Some(Outcome {
                ndr: f,
                pdr: f,
                trials: 2
            })
        );
    }

    /// A rate that passed once by luck is not the answer: its final verification trial fails,
    /// and the search goes on below it until a rate passes a second look.
    #[test]
    fn a_rate_that_passed_by_luck_fails_its_verification_and_the_search_goes_below() {
        const CAPACITY: f64 = 100_000.0;
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        let true_answer = answer(CAPACITY, 1.0, 0.0);
        let mut dev = device(CAPACITY, 1e6, 1.0);
        let mut lucky = true;
        // The first trial up to 10 % above the answer loses nothing, whatever it sends.
        let fluke = |rate: Option<f64>| {
            let mut t = dev(rate)?;
            if let Some(r) = rate.filter(|&r| r > true_answer && r < 1.1 * true_answer && lucky) {
                lucky = false;
                t.rx = t.tx;
                assert!(r > true_answer);
            }
            Ok(t)
        };
        let mut failed_verifications = 0;
        let o = bisect(&s, fluke, &|| false, |what, _, t, _, _| {
            if what.ends_with("verification") && t.loss() > 0.0 {
                failed_verifications += 1;
            }
        })
        .unwrap()
        .unwrap();
        assert!(!lucky, "the fluke happened");
        assert_eq!(failed_verifications, 1);
        assert!(
            o.pdr.verified && o.pdr.pps <= true_answer && o.pdr.pps >= 0.97 * true_answer,
            "{o:?}"
        );
    }

    /// A trial below the capacity that loses frames anyway (the host held the receiver up) can
    /// only lower the answer: it never passes a rate the device does not take.
    #[test]
    fn trials_lost_to_a_busy_host_never_raise_the_answer() {
        let s = Search::parse("60", 1.0, "1%", 0.5).unwrap();
        let mut dev = device(50_000.0, 1e6, 1.0);
        let mut k = 0;
        let flaky = |rate: Option<f64>| {
            k += 1;
            let mut t = dev(rate)?;
            if k % 3 == 0 {
                t.rx = t.rx.saturating_sub(1000);
            }
            Ok(t)
        };
        let o = bisect(&s, flaky, &|| false, quiet).unwrap().unwrap();
        assert!(o.ndr.pps <= answer(50_000.0, 1.0, 0.0), "{o:?}");
        assert!(o.pdr.pps <= answer(50_000.0, 1.0, 0.005), "{o:?}");
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
        let o = bisect(&s, starved, &|| false, quiet).unwrap().unwrap();
        let want = answer(100_000.0, 1.0, 0.0);
        assert!(o.pdr.pps <= want && o.pdr.pps >= want * 0.98, "{o:?} against {want}");
    }

    /// A device that passes nothing (a wrong address, a cable out) ends the search at one frame
    /// a second with nothing found, after a bounded number of trials (a bracket [0, hi] is never
    /// narrow in proportion, so halving alone would not end).
    #[test]
    fn a_device_that_passes_nothing_ends_the_search_with_nothing() {
        let s = Search::parse("60", 1.0, "1%", 0.5).unwrap();
        let nothing = |rate: Option<f64>| {
            Ok(Trial {
                tx: rate.unwrap_or(1e6) as u64,
                rx: 0,
                seconds: 1.0,
            })
        };
        let o = bisect(&s, nothing, &|| false, quiet).unwrap().unwrap();
        let none = Found {
            pps: 0.0,
            loss: 1.0,
            verified: false,
        };
        assert_eq!((o.ndr, o.pdr), (none, none));
        assert!(o.trials <= 24, "{} trials", o.trials);
        // Nothing sent either (at one frame a second, a trial may send none): still bounded.
        let silent = |_: Option<f64>| {
            Ok(Trial {
                tx: 0,
                rx: 0,
                seconds: 1.0,
            })
        };
        let o = bisect(&s, silent, &|| false, quiet).unwrap().unwrap();
        assert!(o.pdr.pps == 0.0 && o.ndr.pps == 0.0 && o.trials <= 3 * 24, "{o:?}");
    }

    #[test]
    fn a_stopped_search_reports_nothing() {
        let s = Search::parse("60", 1.0, "1%", 0.0).unwrap();
        assert_eq!(bisect(&s, device(1e5, 1e6, 1.0), &|| true, quiet).unwrap(), None);
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
