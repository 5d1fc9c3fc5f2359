//! The send loop's pacing per departure (Poisson, a timed replay), as logic over the times it is
//! given: [`step`] says, from the next departure's due time and the time now, whether the loop
//! polls the receiver, spins on the clock or sends, and what the send takes with it. The loop
//! (`worker::transmit`) feeds it the clock's readings; the tests here feed it a simulated clock,
//! with sends and polls of any cost and a host that stalls the loop, so that what they check
//! holds however fast or busy the machine is: no departure leaves before its time (but by half a
//! send), none is lost, the rate is kept, and the gaps between departures the host did not hold
//! up are the process's own.

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
}
