//! Stats lines: when the next is due, and rates.

use std::time::{Duration, Instant};

use rawpkt::QueueStats;

/// Millions of packets per second.
pub fn mpps(packets: u64, secs: f64) -> f64 {
    packets as f64 / secs.max(1e-9) / 1e6
}

/// `name: R Mpps (rx N, tx N, drops N)`, the rate of what was sent over `secs`.
pub fn rate_line(name: &str, [rx, tx, drops]: [u64; 3], secs: f64) -> String {
    format!("{name}: {:.2} Mpps (rx {rx}, tx {tx}, drops {drops})", mpps(tx, secs))
}

/// What went wrong on a queue pair, for a summary: the RX queue's drops and errors, the TX
/// queue's drops, errors and recoveries.
pub fn queues(rx: &QueueStats, tx: &QueueStats) -> String {
    let (rd, nb, re) = (rx.drops, rx.no_buffers, rx.errors.total());
    let (td, te, tr) = (tx.drops, tx.errors.total(), tx.recoveries);
    format!("RX device drops {rd}, no buffers {nb}, errors {re}; TX drops {td}, errors {te}, recoveries {tr}")
}

/// When a periodic stats line is due: every `every` from `start`; never for a zero interval.
/// After a stall (a suspended process, a starved main thread) the lines missed are skipped, not
/// printed in a burst.
pub struct Ticker {
    start: Instant,
    last: Instant,
    every: Duration,
    next: Option<Instant>,
}

impl Ticker {
    pub fn new(start: Instant, every: Duration) -> Ticker {
        let next = (!every.is_zero()).then(|| start + every);
        Ticker {
            start,
            last: start,
            every,
            next,
        }
    }

    /// When the next line is due, to sleep until.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }

    /// If a line is due at `now`: the seconds since the start and since the last line.
    pub fn due(&mut self, now: Instant) -> Option<(f64, f64)> {
        let next = self.next.filter(|n| now >= *n)?;
        let mut at = next + self.every;
        while at <= now {
            at += self.every;
        }
        self.next = Some(at);
        let secs = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        Some((now.duration_since(self.start).as_secs_f64(), secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_due_each_interval_and_missed_ones_are_skipped() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = Ticker::new(t0, s);
        assert_eq!(t.due(t0 + s / 2), None);
        assert_eq!(t.due(t0 + s), Some((1.0, 1.0)));
        assert_eq!(t.due(t0 + s * 3 + s / 2), Some((3.5, 2.5)));
        assert_eq!(t.next(), Some(t0 + s * 4));
        assert_eq!(Ticker::new(t0, Duration::ZERO).due(t0 + s * 9), None);
    }
}
