//! The send loop's pacing per departure (Poisson, a timed replay), as logic over the times it is
//! given: [`step`] says, from the next departure's due time and the time now, whether the loop
//! polls the receiver, spins on the clock or sends, and what the send takes with it. The loop
//! (`worker::transmit`) feeds it the clock's readings; the tests here feed it a simulated clock,
//! with sends and polls of any cost and a host that stalls the loop, so that what they check
//! holds however fast or busy the machine is: no departure leaves before its time (but by half a
//! send), none is lost, the rate is kept, and the gaps between departures the host did not hold
//! up are the process's own.
//!
//! Also here: the loop's clock ([`Clock`]), the share of a core each stream with a rate gets
//! when the rates exceed what the core sends ([`Fair`]), and when a stream counts as short of
//! its rate ([`short`]).

use std::time::Instant;

/// Pacing per departure: the receiver is polled (and the send queues reclaimed) while the next
/// departure is further away than this, ns: several times what a receive burst of a few frames
/// takes (about 200 ns on the model pair), and at 1 Mpps about one exponential gap in seven
/// (e^-2) is longer.
pub(crate) const RX_SLACK_NS: u64 = 2_000;
/// A departure that leaves more than this after its due time is late, ns: the pacer's own
/// delays stay under it (the spin's clock reads, some tens of ns; a departure due while the one
/// before it is sent, and not within half of that send, waits for it, ~300-450 ns on the model
/// pair: building the frame ~110, `tx_burst` 280-340, measured per departure; a receive poll,
/// which only starts with more slack than it takes), so a late departure is one the host
/// held up (an interrupt, another thread on the CPU), or one a loop that fell behind sends in
/// its catch-up.
pub(crate) const LATE_NS: u64 = 2_000;

/// What sending one departure costs the loop, ns, from its due time to the next reading of the
/// clock (building the frame, `tx_burst`): a departure due within half of that after the one
/// being sent leaves with it, a little early, rather than after it, later by more. Each then
/// leaves at the time nearest its due time that the loop can make: waiting for the send before
/// stretches the short gaps of an exponential (a Poisson process with a minimum spacing, whose
/// coefficient of variation the simulation in this file's tests puts 5 % low at 400 ns a send),
/// joining it at half a send keeps the coefficient within 1 % of 1 in the same simulation
/// (100-500 ns a send).
#[derive(Default)]
pub(crate) struct SendCost {
    /// Exponentially weighted mean of the sends timed, ns × 16.
    mean16: u64,
}

impl SendCost {
    /// One send, `ns` long; one held up past `LATE_NS` (an interrupt, another thread) is the
    /// host's, not the send's, and left out.
    #[inline]
    pub(crate) fn sample(&mut self, ns: u64) {
        if ns <= LATE_NS {
            self.mean16 = self.mean16 - self.mean16 / 16 + ns;
        }
    }

    /// Departures due by this time leave with a send made at `elapsed_ns`.
    #[inline]
    pub(crate) fn joins_within(&self, elapsed_ns: u64) -> u64 {
        elapsed_ns + self.mean16 / 32
    }
}

/// What the loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next departure is more than the slack away: poll the receiver, reclaim, look again.
    Wait,
    /// It is due within the slack: spin on the clock until this time (ns), then step again.
    SpinUntil(u64),
    /// It is due: send what is due by `due_by` (ns; half a send ahead, `SendCost`), stamped
    /// now; `behind` when the departure is late by more than [`LATE_NS`] (the loop fell behind).
    Send { due_by: u64, behind: bool },
}

/// The step at `now` (ns from the start) when the earliest departure is due at `next`
/// (`Pacer::next_due_ns`), the receiver polled while more than `slack` ns are left.
#[inline]
pub(crate) fn step(next: u64, now: u64, slack: u64, cost: &SendCost) -> Step {
    if next > now.saturating_add(slack) {
        Step::Wait
    } else if now < next {
        Step::SpinUntil(next)
    } else {
        Step::Send {
            due_by: cost.joins_within(now),
            behind: now - next > LATE_NS,
        }
    }
}

/// The send loop's clock: nanoseconds since the run's epoch, read once per burst (the rates'
/// credit and every packet's send stamp), and on every turn of a spin toward a departure.
///
/// Where the CPU's time-stamp counter runs at one rate whatever the core's frequency and sleep
/// states (the `constant_tsc` and `nonstop_tsc` flags Linux shows in /proc/cpuinfo, its
/// reading of CPUID's invariant-TSC bit), a reading is `rdtsc`, a subtraction, a multiply and a
/// compare: `rdtsc` takes about 15 ns on the development VM, `clock_gettime` through the vDSO
/// (`Instant::now`) about 36 (a loop of five million of each, load 6), and a seventh of the
/// samples of a TX-only profile of pktgen were `clock_gettime`. The counter is tied to CLOCK_MONOTONIC, the clock the receiver
/// takes its times from (a frame's latency is one minus the other): a bracketed reading of both
/// (`anchor`) every [`ANCHOR_NS`], between which the counter's ticks are scaled by a rate
/// measured over the whole run so far. The rate's error over the first calibration's 2 ms is
/// the bracket's width over it, some 1e-5; over the 1 ms to the next anchor that is 10 ns. The
/// clock never goes back: a reading below the last one (a new anchor behind a line the old
/// rate drew a little fast) is the last one. Elsewhere, CLOCK_MONOTONIC.
pub(crate) struct Clock {
    epoch: Instant,
    tsc: Option<Tsc>,
    last: u64,
}

/// A tick count and the monotonic clock's reading with it (ns from the epoch).
type Anchor = (u64, u64);

#[derive(Clone, Copy, Debug)]
struct Tsc {
    /// Nanoseconds per tick, × 2^32.
    mult: u64,
    /// The latest anchor, and the first: the rate is measured between them.
    at: Anchor,
    first: Anchor,
    /// Ticks after the latest anchor at which a reading takes a new one (`ANCHOR_NS`).
    span: u64,
}

/// How often the TSC clock reads CLOCK_MONOTONIC again, ns.
pub(crate) const ANCHOR_NS: u64 = 1_000_000;
/// The first measurement of the counter's rate spans this much, ns.
const CALIBRATE_NS: u64 = 2_000_000;

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; it is part of the x86_64 baseline.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Whether the time-stamp counter is invariant (x86_64, and Linux says `constant_tsc` and
/// `nonstop_tsc`).
pub(crate) fn invariant_tsc() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
        let has = |name: &str| l.split_whitespace().any(|x| x == name);
        has("constant_tsc") && has("nonstop_tsc")
    })
}

impl Clock {
    /// The TSC clock where the counter is invariant, else CLOCK_MONOTONIC.
    pub(crate) fn new(epoch: Instant) -> Clock {
        if invariant_tsc() {
            if let Some(c) = Clock::tsc(epoch) {
                return c;
            }
        }
        Clock::monotonic(epoch)
    }

    pub(crate) fn monotonic(epoch: Instant) -> Clock {
        Clock {
            epoch,
            tsc: None,
            last: 0,
        }
    }

    /// The TSC clock, its rate measured over [`CALIBRATE_NS`]; None where the counter does not
    /// move at a rate between 50 MHz and 20 GHz (no counter, or not one to trust).
    pub(crate) fn tsc(epoch: Instant) -> Option<Clock> {
        let first = anchor(epoch);
        let until = Instant::now() + std::time::Duration::from_nanos(CALIBRATE_NS);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let at = anchor(epoch);
        let mult = rate(first, at)?;
        Some(Clock {
            epoch,
            tsc: Some(Tsc {
                mult,
                at,
                first,
                span: span(mult),
            }),
            last: at.1,
        })
    }

    /// Nanoseconds since the epoch.
    #[inline(always)]
    pub(crate) fn now_ns(&mut self) -> u64 {
        let t = match &self.tsc {
            Some(c) => {
                let d = ticks().wrapping_sub(c.at.0);
                // Below the span, `d * mult` is about ANCHOR_NS << 32: no overflow. A count
                // behind the anchor (another CPU's) wraps above it.
                if d < c.span {
                    c.at.1 + ((d * c.mult) >> 32)
                } else {
                    self.reanchor()
                }
            }
            None => mono(self.epoch),
        };
        self.last = self.last.max(t);
        self.last
    }

    /// A new anchor, and the rate over the run so far; returns the anchor's time.
    #[cold]
    #[inline(never)]
    fn reanchor(&mut self) -> u64 {
        let now = anchor(self.epoch);
        if let Some(c) = self.tsc.as_mut() {
            if let Some(m) = rate(c.first, now) {
                c.mult = m;
                c.span = span(m);
            }
            c.at = now;
        }
        now.1
    }
}

fn mono(epoch: Instant) -> u64 {
    Instant::now().saturating_duration_since(epoch).as_nanos() as u64
}

/// The tick count at the monotonic clock's reading: of five readings, each between two of the
/// counter, the one with the narrowest bracket, at its middle.
fn anchor(epoch: Instant) -> Anchor {
    let mut best = (u64::MAX, (0, 0));
    for _ in 0..5 {
        let a = ticks();
        let ns = mono(epoch);
        let b = ticks();
        let w = b.wrapping_sub(a);
        if w < best.0 {
            best = (w, (a + w / 2, ns));
        }
    }
    best.1
}

/// Nanoseconds per tick × 2^32 between two anchors at least 1 ms apart, if the counter moved
/// at a believable rate (50 MHz to 20 GHz).
fn rate(from: Anchor, to: Anchor) -> Option<u64> {
    let (ticks, ns) = (to.0.checked_sub(from.0)?, to.1.checked_sub(from.1)?);
    if ns < 1_000_000 || ticks < ns / 20 || ticks > ns * 20 {
        return None;
    }
    u64::try_from((u128::from(ns) << 32) / u128::from(ticks)).ok()
}

fn span(mult: u64) -> u64 {
    ((u128::from(ANCHOR_NS) << 32) / u128::from(mult.max(1))) as u64
}

/// How a transmit core shares the room of a burst between streams with rates when what they
/// may send exceeds it (the core is slower than the rates asked together): in proportion to
/// the rates asked, whatever the order of the streams, so that each gets the same fraction of
/// its rate. A stream that wants less than its share (it is on schedule) gets all it wants and
/// leaves the rest to the others: weighted max-min fairness, as weighted fair queueing
/// (Demers, Keshav, Shenker 1989) gives a link's capacity to flows. The room is whole packets:
/// each stream's share carries its fraction of a packet to the next burst as credit (deficit
/// round robin, Shreedhar and Varghese 1995), and the packets the rounding leaves go to the
/// streams with the most credit, so that over many bursts the shares are exact. A rate changed
/// through the control endpoint changes its stream's weight from the next burst.
pub(crate) struct Fair {
    weight: Vec<f64>,
    credit: Vec<f64>,
    grant: Vec<usize>,
    /// Some credit is carried (the last burst was shared).
    owing: bool,
}

impl Fair {
    /// Streams of these weights (their rates asked).
    pub(crate) fn new(weights: &[f64]) -> Fair {
        Fair {
            weight: weights.iter().map(|w| w.max(f64::MIN_POSITIVE)).collect(),
            credit: vec![0.0; weights.len()],
            grant: vec![0; weights.len()],
            owing: false,
        }
    }

    /// Takes the streams' weights anew (rates changed through live control), in the order
    /// given to [`Fair::new`]; a stream that lost its rate keeps its weight.
    pub(crate) fn reweigh(&mut self, weights: impl Iterator<Item = Option<f64>>) {
        for (w, new) in self.weight.iter_mut().zip(weights) {
            if let Some(new) = new {
                *w = new.max(f64::MIN_POSITIVE);
            }
        }
    }

    /// `want[i]`: packets stream `i` may make now (its pacer's allowance, each at most `room`);
    /// replaced by what it makes: all of it when the wants fit the room, else shares of the
    /// room by weight as above.
    pub(crate) fn share(&mut self, room: usize, want: &mut [usize]) {
        debug_assert_eq!(want.len(), self.weight.len());
        if want.iter().sum::<usize>() <= room {
            if self.owing {
                self.credit.fill(0.0);
                self.owing = false;
            }
            return;
        }
        self.owing = true;
        let (weight, credit, grant) = (&self.weight, &mut self.credit, &mut self.grant);
        grant.fill(0);
        for (c, &w) in credit.iter_mut().zip(want.iter()) {
            if w == 0 {
                *c = 0.0;
            }
        }
        let mut left = room;
        // Rounds: the room left is shared by weight between the streams that want more; a
        // stream whose share covers what it wants takes that and drops out (its credit with
        // it), and what it leaves is shared again.
        loop {
            let total: f64 = (0..want.len()).filter(|&i| grant[i] < want[i]).map(|i| weight[i]).sum();
            if total == 0.0 || left == 0 {
                break;
            }
            let hand = left as f64;
            let mut dropped = false;
            for i in 0..want.len() {
                if grant[i] >= want[i] {
                    continue;
                }
                credit[i] += hand * weight[i] / total;
                // Credit carried from bursts before may ask for more than the room left: a
                // stream cut short here keeps the credit for the next.
                let take = (credit[i].max(0.0) as usize).min(want[i] - grant[i]).min(left);
                left -= take;
                grant[i] += take;
                credit[i] -= take as f64;
                if grant[i] == want[i] {
                    credit[i] = 0.0;
                    dropped = true;
                }
            }
            if !dropped {
                break;
            }
        }
        // What the rounding left: a packet at a time to the stream with the most credit.
        while left > 0 {
            let Some(i) = (0..want.len())
                .filter(|&i| grant[i] < want[i])
                .max_by(|&a, &b| credit[a].total_cmp(&credit[b]))
            else {
                break;
            };
            grant[i] += 1;
            credit[i] -= 1.0;
            left -= 1;
        }
        want.copy_from_slice(grant);
    }
}

/// Whether a stream fell short of its rate: it made `made` packets where the rate asked `owed`
/// (over an interval, or the run), more than 1 % fewer, and more than `slack` fewer (what a
/// stream on time may lag its rate by: the packets of a fill not yet published).
pub(crate) fn short(made: u64, owed: u64, slack: u64) -> bool {
    let lag = owed.saturating_sub(made);
    lag > slack && lag * 100 > owed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Pacer, Shape};

    /// A loop on a simulated clock: each send costs `send` ns, each receive poll `poll` ns, a
    /// spin reads the clock every 20 ns, and the host takes the CPU away for `stall` ns every
    /// `every` ns. Returns each departure's due time and send time, in the order made, up to
    /// `end` ns, and the pacer.
    fn simulate(mut p: Pacer, end: u64, send: u64, poll: u64, (every, stall): (u64, u64)) -> (Vec<(u64, u64)>, Pacer) {
        let (mut now, mut next_stall, mut out) = (0u64, every, Vec::new());
        let mut cost = SendCost::default();
        let mut sent_at = None;
        let mut hold = |now: &mut u64| {
            while stall > 0 && *now >= next_stall {
                *now += stall;
                next_stall += every;
            }
        };
        while now < end && !p.done() {
            hold(&mut now);
            if let Some(t) = sent_at.take() {
                cost.sample(now - t);
            }
            match step(p.next_due_ns(), now, RX_SLACK_NS, &cost) {
                Step::Wait => now += poll,
                Step::SpinUntil(t) => {
                    while now < t {
                        now += 20;
                    }
                }
                Step::Send { due_by, behind } => {
                    let n = p.allowed(due_by, 32);
                    assert!(n > 0, "due at {now} and nothing allowed");
                    for k in p.made..p.made + n as u64 {
                        out.push((p.due_ns_of(k), now));
                    }
                    p.made += n as u64;
                    if !behind {
                        sent_at = Some(now);
                    }
                    now += send;
                }
            }
        }
        (out, p)
    }

    fn poisson(rate: f64) -> Pacer {
        Pacer::new(Some(rate), Shape::Poisson, None, 7, 32, &[])
    }

    /// Departures in the order they were due, each sent at or after its due time but for
    /// joining the send before it (half a send, at most half of `LATE_NS`), none skipped.
    fn check_order_and_earliness(d: &[(u64, u64)], what: &str) {
        for w in d.windows(2) {
            assert!(w[0].0 <= w[1].0 && w[0].1 <= w[1].1, "{what}: out of order: {w:?}");
        }
        for &(due, at) in d {
            assert!(
                at + LATE_NS / 2 >= due,
                "{what}: due at {due}, sent at {at}: early by more than half a send"
            );
        }
    }

    /// However fast the loop's sends and polls, and however often the host holds it up, the
    /// departures are those due, in order, never early, and as many a second as asked (a loop
    /// slower than the departures sends several together, as they are due).
    #[test]
    fn departures_keep_their_times_and_the_rate_at_any_speed() {
        const END: u64 = 200_000_000;
        for send in [30, 300, 1_500, 5_000] {
            for (every, stall) in [(0, 0), (1_000_000, 100_000), (20_000_000, 5_000_000)] {
                let what = format!("{send} ns a send, {stall} ns stalls every {every} ns");
                let (d, p) = simulate(poisson(1e6), END, send, 200, (every, stall));
                check_order_and_earliness(&d, &what);
                // Those due by the end, less the last send's worth, all went.
                let due_by_end = d.iter().filter(|(due, _)| *due < END).count() as f64;
                assert!(
                    (due_by_end / 200_000.0 - 1.0).abs() < 0.01,
                    "{what}: {due_by_end} in 0.2 s"
                );
                assert_eq!(p.made as usize, d.len(), "{what}");
            }
        }
    }

    fn cv(gaps: &[f64]) -> (f64, f64) {
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        (mean, sd / mean)
    }

    /// The gaps between consecutive departures that both left on time (within `LATE_NS`) are
    /// the Poisson process's own: mean 1 / rate, coefficient of variation within 5 % of an
    /// exponential's 1, at the send costs a loop has and beside a host that holds it up.
    #[test]
    fn on_time_gaps_keep_the_exponential_spread() {
        for send in [100, 250, 400] {
            for (every, stall) in [(0, 0), (20_000_000, 2_000_000)] {
                let (d, _) = simulate(poisson(1e6), 500_000_000, send, 200, (every, stall));
                let gaps: Vec<f64> = d
                    .windows(2)
                    .filter(|w| w.iter().all(|(due, at)| at.saturating_sub(*due) <= LATE_NS))
                    .map(|w| (w[1].1 - w[0].1) as f64)
                    .collect();
                let (mean, c) = cv(&gaps);
                assert!(
                    (mean / 1000.0 - 1.0).abs() < 0.01 && (c - 1.0).abs() < 0.05,
                    "{send} ns a send, stalls {stall}: mean {mean}, cv {c}"
                );
            }
        }
    }

    /// A timed replay keeps the file's times: after the host held the loop up it sends what
    /// fell due at once, then is back on the file's schedule (not shifted by the stall), and no
    /// frame leaves before its time.
    #[test]
    fn a_timed_replay_catches_up_and_keeps_the_files_schedule() {
        // A frame every 200 µs, looped.
        let times: Vec<u64> = (0..50).map(|k| k * 200_000).collect();
        let p = Pacer::new(None, Shape::Timed(1.0), Some(500), 0, 32, &times);
        let (d, p) = simulate(p, 1_000_000_000, 300, 200, (7_000_000, 1_000_000));
        assert_eq!((d.len(), p.made), (500, 500), "every frame once");
        check_order_and_earliness(&d, "timed");
        // Each due time on the file's grid (the period is the span and one mean gap: 200 µs).
        for (k, &(due, _)) in d.iter().enumerate() {
            assert_eq!(due, k as u64 * 200_000, "frame {k}");
        }
        // Late only when a stall (1 ms from every 7th) covered the due time, and sent as it
        // ends; the rest leave within the spin's step.
        let late: Vec<_> = d.iter().filter(|(due, at)| at - due > 20).collect();
        assert_eq!(late.len(), 500 / 35 * 5, "five frames of every 35: {late:?}");
        for &&(due, at) in &late {
            let stall_end = due / 7_000_000 * 7_000_000 + 1_000_000;
            assert!(due % 7_000_000 < 1_000_000 && at == stall_end, "due {due}, sent {at}");
        }
    }

    /// A core that sends a burst of `burst` packets every `burst_ns` (a look at the clock every
    /// 10 ns when nothing is due), streams of `rates` (packets a second, constant) sharing it
    /// as the send loop shares it (`worker::build_burst`: each pacer's allowance, then `Fair`),
    /// on a simulated clock for `end` ns. Returns each stream's packets made and owed.
    fn core(rates: &[f64], burst: usize, burst_ns: u64, end: u64) -> Vec<(u64, u64)> {
        let mut pacers: Vec<Pacer> = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| Pacer::new(Some(r), Shape::Constant, None, i as u64, burst, &[]))
            .collect();
        let mut fair = Fair::new(&pacers.iter().map(|p| p.rate_per_ns().unwrap()).collect::<Vec<_>>());
        let mut want = vec![0; rates.len()];
        let mut now = 0;
        while now < end {
            for (w, p) in want.iter_mut().zip(pacers.iter_mut()) {
                *w = p.allowed(now, burst);
            }
            fair.share(burst, &mut want);
            assert!(want.iter().sum::<usize>() <= burst, "{want:?}");
            for (w, p) in want.iter().zip(pacers.iter_mut()) {
                p.made += *w as u64;
            }
            now += if want.iter().any(|&w| w > 0) { burst_ns } else { 10 };
        }
        pacers.iter().map(|p| (p.made, p.owed(end))).collect()
    }

    /// A second of a 32 Mpps core (32 packets a µs).
    fn second(rates: &[f64]) -> Vec<(u64, u64)> {
        core(rates, 32, 1_000, 1_000_000_000)
    }

    fn ratio(a: u64, b: u64) -> f64 {
        a as f64 / b.max(1) as f64
    }

    /// Streams whose rates exceed what the core sends share it in proportion to their rates,
    /// whichever comes first, the core kept busy; each is short of its rate. Streams whose
    /// rates fit get them, and none is short.
    #[test]
    fn a_core_is_shared_by_the_rates_asked_and_the_short_are_told() {
        for rates in [[1e9, 5e8], [5e8, 1e9]] {
            let got = second(&rates);
            let (big, half) = if rates[0] > rates[1] {
                (got[0], got[1])
            } else {
                (got[1], got[0])
            };
            assert!((ratio(big.0, half.0) - 2.0).abs() < 0.01, "{rates:?}: {got:?}");
            assert!(big.0 + half.0 >= 31_900_000, "the core kept busy: {got:?}");
            for (made, owed) in got {
                assert!(short(made, owed, 2), "{rates:?}: made {made} of {owed}");
            }
        }
        // Three streams, one of them a thousandth of another: the same fraction of each rate.
        let got = second(&[1e9, 2.5e8, 1e6]);
        let f: Vec<f64> = got.iter().map(|&(m, o)| ratio(m, o)).collect();
        for x in &f {
            assert!((x / f[0] - 1.0).abs() < 0.05, "fractions of the rates: {f:?} ({got:?})");
        }
        // 30 + 10 Mpps on 32: 24 and 8.
        let got = second(&[3e7, 1e7]);
        assert!((ratio(got[0].0, got[1].0) - 3.0).abs() < 0.01, "{got:?}");
        assert!(got.iter().all(|&(m, o)| short(m, o, 2)), "{got:?}");
        // 20 + 1 Mpps on 32: each its own, but for what fell due since the last burst.
        for (made, owed) in second(&[2e7, 1e6]) {
            assert!(!short(made, owed, 2) && owed - made <= 21, "made {made} of {owed}");
            assert!(owed >= 1_000_000, "{owed}");
        }
    }

    /// The shares of one burst: never more than the room or than a stream wants, all of the
    /// room when the streams want more, and all each wants when they fit; a stream on
    /// schedule (wanting less than its share) leaves the rest to the others. Over many bursts
    /// the credit carried keeps each stream within a packet of its exact share.
    #[test]
    fn a_burst_is_shared_by_weight_in_whole_packets() {
        let mut f = Fair::new(&[2.0, 1.0, 1.0]);
        let mut w = [10, 10, 10];
        f.share(40, &mut w);
        assert_eq!(w, [10, 10, 10], "they fit");
        let mut w = [32, 1, 32];
        f.share(32, &mut w);
        assert_eq!(w.iter().sum::<usize>(), 32);
        assert_eq!(w[1], 1, "on schedule: all it wants");
        // The other two share the 31 left 2:1.
        assert!((20..=21).contains(&w[0]) && (10..=11).contains(&w[2]), "{w:?}");
        let mut w = [0, 0, 5];
        f.share(4, &mut w);
        assert_eq!(w, [0, 0, 4]);
        // Bursts of 32 between weights 3:2:1 and a fourth wanting 0 to 3: totals within a
        // packet or two of the exact shares of what the three got.
        let mut f = Fair::new(&[3.0, 2.0, 1.0, 100.0]);
        let mut total = [0u64; 4];
        let mut rng = 0x1234_5678u64;
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut w = [32, 32, 32, (rng % 4) as usize];
            let asked = w[3];
            f.share(32, &mut w);
            assert_eq!(w.iter().sum::<usize>(), 32);
            assert!(w[3] <= asked);
            for (t, x) in total.iter_mut().zip(w) {
                *t += x as u64;
            }
        }
        let three = (total[0] + total[1] + total[2]) as f64;
        for (i, share) in [0.5, 1.0 / 3.0, 1.0 / 6.0].into_iter().enumerate() {
            assert!((total[i] as f64 - three * share).abs() <= 2.0, "{total:?}");
        }
    }

    /// A rate changed while the run goes on weighs from the next burst: 2:1 becomes 1:4, and a
    /// stream whose rate was taken away keeps its weight.
    #[test]
    fn new_weights_share_the_bursts_after_them() {
        let mut f = Fair::new(&[2.0, 1.0]);
        let run = |f: &mut Fair| {
            let mut total = [0u64; 2];
            for _ in 0..1000 {
                let mut w = [32, 32];
                f.share(32, &mut w);
                total[0] += w[0] as u64;
                total[1] += w[1] as u64;
            }
            total
        };
        let t = run(&mut f);
        assert!(t[0].abs_diff(2 * t[1]) <= 3, "{t:?}");
        f.reweigh([Some(1.0), Some(4.0)].into_iter());
        let t = run(&mut f);
        assert!((4 * t[0]).abs_diff(t[1]) <= 8, "{t:?}");
        f.reweigh([None, Some(1.0)].into_iter());
        let t = run(&mut f);
        assert!(t[0].abs_diff(t[1]) <= 3, "{t:?}");
    }

    #[test]
    fn short_means_more_than_one_percent_and_the_slack_behind() {
        assert!(!short(990, 1000, 2));
        assert!(short(989, 1000, 2));
        assert!(!short(97, 100, 3), "within the slack");
        assert!(short(96, 100, 3));
        assert!(
            !short(0, 0, 0) && !short(5, 3, 0),
            "nothing asked, or more sent than asked"
        );
    }

    /// The rate between two anchors: ns per tick × 2^32, none over less than 1 ms or at a rate
    /// no counter has.
    #[test]
    fn the_counters_rate_is_measured_between_anchors() {
        assert_eq!(rate((100, 0), (2_000_000_100, 1_000_000_000)), Some(1 << 31));
        assert_eq!(rate((0, 0), (3_000_000, 1_000_000)), Some((1u64 << 32) / 3));
        assert_eq!(rate((0, 0), (1_000, 999_999)), None, "under 1 ms");
        assert_eq!(rate((0, 0), (10, 1_000_000)), None, "10 kHz");
        assert_eq!(rate((5, 0), (4, 1_000_000)), None, "backwards");
        assert_eq!(span(1 << 31), 2 * ANCHOR_NS);
    }

    /// Both clocks (the TSC one where the CPU has an invariant counter) never go back and stay
    /// within 50 µs of CLOCK_MONOTONIC read around them, across several anchors.
    #[test]
    fn the_loops_clock_follows_the_monotonic_clock_and_never_goes_back() {
        let epoch = Instant::now();
        let mut clocks = vec![Clock::monotonic(epoch)];
        if invariant_tsc() {
            clocks.push(Clock::tsc(epoch).expect("an invariant counter at a believable rate"));
        }
        for mut c in clocks {
            let mut last = 0;
            let until = Instant::now() + std::time::Duration::from_millis(20);
            while Instant::now() < until {
                let before = mono(epoch);
                let t = c.now_ns();
                let after = mono(epoch);
                assert!(t >= last, "{t} after {last}");
                assert!(
                    t + 50_000 >= before && t <= after + 50_000,
                    "{before} <= {t} <= {after}"
                );
                last = t;
            }
        }
    }

    /// What a Poisson stream's rate asks (`Pacer::owed`): its departures due so far, so that a
    /// stream sent on time is never short, and one a core cannot keep up with is, by its rate.
    #[test]
    fn a_poisson_stream_owes_its_departures_due() {
        // On time: every departure sent at its due time.
        let mut p = poisson(1e6);
        while p.next_due_ns() < 1_000_000_000 {
            let now = p.next_due_ns();
            let n = p.allowed(now, 32);
            p.made += n as u64;
            assert!(
                p.owed(now) - p.made <= 1,
                "at {now}: owed {} made {}",
                p.owed(now),
                p.made
            );
        }
        assert!(!short(p.made, p.owed(1_000_000_000), 2));
        // A core that sends 8 every µs, a third of the rate: owed at the rate, short.
        let mut p = poisson(3e7);
        for now in (0..100_000_000u64).step_by(1_000) {
            let n = p.allowed(now, 32).min(8);
            p.made += n as u64;
        }
        let owed = p.owed(100_000_000);
        assert!((owed as f64 / 3e6 - 1.0).abs() < 0.01, "owed {owed}");
        assert!(
            short(p.made, owed, 2) && (799_000..=800_000).contains(&p.made),
            "made {}",
            p.made
        );
    }
}
