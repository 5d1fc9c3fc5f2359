//! Loss, duplicates and reordering from sequence numbers, as the receiver sees them.
//!
//! Every stamped frame carries its stream and a sequence number. A transmit core numbers the
//! frames it makes of a stream `k * cores + core` (k = 0, 1, 2, ...), so the numbers of one core
//! are one sequence, in the order they left (one core's frames go out in order); the cores'
//! sequences interleave at no fixed pace. The receiver keeps one [`SeqTracker`] per stream and
//! core, over k.
//!
//! Definitions (the ones TRex's per-stream statistics and RFC 4737 use, reduced to counts):
//! - a frame is *out of order* when a higher number of its sequence arrived before it;
//! - a *duplicate* is a number that arrived before;
//! - a number is *lost* when it never arrives. While the run goes on, a missing number is known
//!   lost only once [`WINDOW`] higher numbers have been seen after it (until then it may be a
//!   frame overtaken by others, or in flight); at the end, after the receiver's drain, every
//!   number the core sent that never arrived is lost.

/// How far behind the highest number seen a missing one may still arrive and count as out of
/// order (not lost, not a duplicate): 64 Ki numbers, 8 KiB of bits per tracker. A receive
/// queue's ring is 4096 frames, and a receiver that reads several queues in turn sees a core's
/// frames that went out on different send queues reordered by at most a few rings.
pub(crate) const WINDOW: u64 = 1 << 16;
const WORDS: usize = (WINDOW / 64) as usize;

/// One sequence's receive record: which of the last [`WINDOW`] numbers arrived, and the counts.
pub(crate) struct SeqTracker {
    /// One more than the highest number seen (0: none yet).
    next: u64,
    /// Bit `n % WINDOW` for each number n in `[next - WINDOW, next)`: set when n arrived.
    seen: Box<[u64; WORDS]>,
    /// Distinct numbers that arrived.
    pub received: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Numbers known lost: more than `WINDOW` below the highest seen, and never arrived.
    pub lost: u64,
    /// Numbers below `next` and within the window that have not arrived (yet).
    missing: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            next: 0,
            seen: Box::new([0; WORDS]),
            received: 0,
            duplicates: 0,
            out_of_order: 0,
            lost: 0,
            missing: 0,
        }
    }
}

impl SeqTracker {
    #[inline]
    fn bit(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Number `n` arrived.
    #[inline]
    pub(crate) fn record(&mut self, n: u64) {
        if n >= self.next {
            self.advance(n);
            let (w, b) = Self::bit(n);
            self.seen[w] |= b;
            self.received += 1;
        } else if self.next - n > WINDOW {
            // Later than the window: counted lost when it left the window, it arrived after all
            // (or is a duplicate of one that did; the window no longer says which).
            self.out_of_order += 1;
            self.received += 1;
            self.lost = self.lost.saturating_sub(1);
        } else {
            let (w, b) = Self::bit(n);
            if self.seen[w] & b != 0 {
                self.duplicates += 1;
            } else {
                self.seen[w] |= b;
                self.received += 1;
                self.out_of_order += 1;
                self.missing -= 1;
            }
        }
    }

    /// Moves the window up to `n` (>= `next`): the numbers skipped are missing, and those that
    /// leave the window without having arrived are lost.
    #[inline]
    fn advance(&mut self, n: u64) {
        let skipped = n - self.next;
        if skipped >= WINDOW {
            // The whole window leaves: what was missing in it is lost, and so are the skipped
            // numbers below the new window; the rest of the new window is missing.
            self.lost += self.missing + (n + 1 - WINDOW - self.next);
            self.missing = WINDOW - 1;
            self.seen.fill(0);
        } else {
            for m in self.next..=n {
                let (w, b) = Self::bit(m);
                // The number WINDOW below `m` leaves the window, from the slot `m` takes.
                if m >= WINDOW && self.seen[w] & b == 0 {
                    self.lost += 1;
                    self.missing -= 1;
                }
                self.seen[w] &= !b;
            }
            self.missing += skipped;
        }
        self.next = n + 1;
    }

    /// Numbers lost once the sequence is over, `sent` numbers (0 to `sent - 1`) having been
    /// sent: those known lost, those still missing in the window, and those above the highest
    /// that arrived.
    pub(crate) fn lost_of(&self, sent: u64) -> u64 {
        self.lost + self.missing + sent.saturating_sub(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> SeqTracker {
        let mut t = SeqTracker::default();
        for &n in seqs {
            t.record(n);
        }
        t
    }

    fn counts(t: &SeqTracker, sent: u64) -> (u64, u64, u64, u64) {
        (t.received, t.duplicates, t.out_of_order, t.lost_of(sent))
    }

    #[test]
    fn in_order_is_nothing_but_received() {
        let t = run(&(0..1000).collect::<Vec<_>>());
        assert_eq!(counts(&t, 1000), (1000, 0, 0, 0));
        assert_eq!(t.lost, 0);
    }

    #[test]
    fn a_gap_is_lost_at_the_end_and_not_before_the_window_passes() {
        // 3 and 7 never come; 9 is the last sent, and 10, 11 (sent) never came either.
        let t = run(&[0, 1, 2, 4, 5, 6, 8, 9]);
        assert_eq!(t.lost, 0, "not known lost while within the window");
        assert_eq!(counts(&t, 12), (8, 0, 0, 4));
    }

    #[test]
    fn a_late_frame_is_out_of_order_and_not_lost() {
        // 2 overtaken by 3 and 4; 5 and 6 swapped.
        let t = run(&[0, 1, 3, 4, 2, 6, 5, 7]);
        assert_eq!(counts(&t, 8), (8, 0, 2, 0));
    }

    #[test]
    fn a_number_seen_twice_is_a_duplicate_in_order_or_not() {
        let t = run(&[0, 0, 1, 2, 1, 3, 3, 3]);
        assert_eq!(counts(&t, 4), (4, 4, 0, 0));
    }

    #[test]
    fn drops_duplicates_and_swaps_together() {
        // What the model's impaired wire makes of 1..=31 with drop=10, dup=7, swap=3
        // (tests/ports.rs), numbered from 0 here.
        let arrived: Vec<u64> = [
            1, 2, 4, 3, 5, 7, 7, 6, 8, 11, 9, 13, 12, 14, 14, 16, 15, 17, 19, 18, 21, 21, 22, 23, 25, 24, 26, 28, 28,
            27, 29, 31,
        ]
        .iter()
        .map(|n| n - 1)
        .collect();
        let t = run(&arrived);
        // 10, 20, 30 lost; 7, 14, 21, 28 twice; 3, 6, 9, 12, 15, 18, 24, 27 late.
        assert_eq!(counts(&t, 31), (28, 4, 8, 3));
    }

    #[test]
    fn a_number_that_leaves_the_window_missing_is_known_lost() {
        let mut t = SeqTracker::default();
        t.record(0);
        // 1 skipped; WINDOW numbers after it push it out.
        for n in 2..WINDOW + 2 {
            t.record(n);
        }
        assert_eq!((t.lost, t.lost_of(WINDOW + 2)), (1, 1));
        // Arriving after all: out of order, and no longer lost.
        t.record(1);
        assert_eq!((t.lost, t.out_of_order, t.lost_of(WINDOW + 2)), (0, 1, 0));
    }

    #[test]
    fn a_jump_past_the_window_loses_what_it_skips_below_it() {
        let mut t = SeqTracker::default();
        t.record(0);
        t.record(2);
        // 1 missing; then a jump of three windows: 1 and every number up to 3W - W lost, the
        // rest of the new window missing until the end.
        let n = 3 * WINDOW;
        t.record(n);
        assert_eq!(t.lost, 1 + (n + 1 - WINDOW - 3));
        assert_eq!(t.lost_of(n + 1), n + 1 - 3);
        // One of the window's missing numbers arrives late.
        t.record(n - 5);
        assert_eq!((t.out_of_order, t.lost_of(n + 1)), (1, n + 1 - 4));
    }

    #[test]
    fn the_window_wraps_its_ring_of_bits_many_times() {
        // 5 windows' worth in order with every 1000th number missing, and each 4096th late by 3.
        let total = 5 * WINDOW;
        let mut seqs = Vec::new();
        let mut n = 0;
        while n < total {
            if n % 4096 == 4000 && n + 3 < total {
                seqs.extend([n + 1, n + 2, n + 3, n]);
                n += 4;
                continue;
            }
            if n % 1000 != 999 {
                seqs.push(n);
            }
            n += 1;
        }
        let t = run(&seqs);
        let gaps = (0..total).filter(|n| n % 1000 == 999).count() as u64;
        let late = (0..total).filter(|n| n % 4096 == 4000 && n + 3 < total).count() as u64;
        // The late runs and the gaps never meet: 4000 + 4096 k is 96 k mod 1000, a multiple
        // of 8, never 996 to 999.
        let late_gaps = (0..total)
            .filter(|n| n % 4096 == 4000 && n + 3 < total)
            .map(|n| (n..n + 4).filter(|m| m % 1000 == 999).count() as u64)
            .sum::<u64>();
        assert_eq!(late_gaps, 0, "the pattern keeps late frames and gaps apart");
        assert_eq!(counts(&t, total), (total - gaps, 0, late, gaps));
        // All but the gaps of the last window are known lost before the end.
        assert!(t.lost >= gaps - WINDOW / 1000 - 1, "{}", t.lost);
    }
}
