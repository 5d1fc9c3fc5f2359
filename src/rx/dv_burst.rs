//! The one-segment receive burst both Direct Verbs receive queues share: the cyclic queue
//! (`rx::dv::DvRxQueue`, one buffer per WQE) and the striding one (`rx::dv_striding`, one buffer
//! per stride) hand up a run of plain CQEs the same way: one frame per CQE and per buffer, the
//! buffers in ring order, so that the CQ consumer index and the buffer index move together. What
//! differs (how a CQE is read, where the buffer index lives, refill, the general path) is each
//! queue's [`SegmentRx`] implementation; the skeleton, the commit and the counting are here,
//! once. Everything is `#[inline(always)]`: the queues' bursts compile as if written out
//! (`scripts/callgrind.sh` counts the same instructions per packet as before the split).

use std::rc::Rc;

use crate::dv::failed_error;
use crate::dv::ring::{CqRing, CqSegment, RxPoll};
use crate::mem::pool::{Burst, Packet, Pool};
use crate::{same_pool, QueueError, QueueStats};

/// A Direct Verbs receive queue as the shared burst sees it.
pub(super) trait SegmentRx {
    /// The syndrome the queue failed with, if it did.
    fn failed(&self) -> Option<u8>;
    fn pool(&self) -> &Rc<Pool>;
    fn cq(&self) -> &CqRing;
    /// The buffer of each ring position (a power of two of them).
    fn bufs(&self) -> &[u32];
    /// Where a burst starts: the CQ consumer index, the buffer index (free-running; a WQE or a
    /// stride) and how many buffers are posted from it.
    fn at(&self) -> (u32, u32, usize);
    /// Receive timestamps are asked for.
    fn timestamps(&self) -> bool;
    /// Reads the plain CQEs of `seg` into `slots`, with buffers `bufs` (as many), up to the first
    /// that is not a frame in one buffer; adds their bytes and drops.
    fn poll_segment<const TIMESTAMPS: bool>(
        &self,
        slots: &mut [Packet],
        bufs: &[u32],
        seg: CqSegment<'_>,
        bytes: &mut u64,
        drops: &mut u64,
    ) -> usize;
    /// Records the burst's new consumer index and buffer index (the caller publishes the first).
    fn advance(&mut self, ci: u32, bi: u32);
    fn stats_mut(&mut self) -> &mut QueueStats;
    /// The queue's attention word (`dv::attention`), read on an empty burst.
    fn attention(&self) -> u32;
    /// Acts on what the attention word says (`attend` of each queue).
    fn attend(&mut self, a: u32) -> Result<(), QueueError>;
    /// The refill at the end of every burst.
    fn refill_after_burst(&mut self);
    /// Everything the one-segment path does not take, from the queue's own indices.
    fn general(&mut self, out: &mut Burst) -> Result<usize, QueueError>;
}

/// The [`SegmentRx`] methods both queues implement alike, over fields of the same names
/// (`failed`, `pool`, `cq`, `bufs`, `timestamps`, `stats`, `attn`, `refill_min`) and their own
/// `poll_segment`, `attend` and `refill`; each queue writes `at`, `advance` and
/// `general` itself.
macro_rules! segment_rx_fields {
    ($q:ident) => {
        #[inline(always)]
        fn failed(&self) -> Option<u8> {
            self.failed
        }
        #[inline(always)]
        fn pool(&self) -> &Rc<Pool> {
            &self.pool
        }
        #[inline(always)]
        fn cq(&self) -> &CqRing {
            &self.cq
        }
        #[inline(always)]
        fn bufs(&self) -> &[u32] {
            &self.bufs
        }
        #[inline(always)]
        fn timestamps(&self) -> bool {
            self.timestamps
        }
        #[inline(always)]
        fn poll_segment<const TIMESTAMPS: bool>(
            &self,
            slots: &mut [Packet],
            bufs: &[u32],
            seg: CqSegment<'_>,
            bytes: &mut u64,
            drops: &mut u64,
        ) -> usize {
            $q::poll_segment::<TIMESTAMPS>(self, slots, bufs, seg, bytes, drops)
        }
        #[inline(always)]
        fn stats_mut(&mut self) -> &mut QueueStats {
            &mut self.stats
        }
        #[inline(always)]
        fn attention(&self) -> u32 {
            self.attn.load(std::sync::atomic::Ordering::Relaxed)
        }
        #[inline(always)]
        fn attend(&mut self, a: u32) -> Result<(), QueueError> {
            $q::attend(self, a)
        }
        #[inline(always)]
        fn refill_after_burst(&mut self) {
            self.refill(self.refill_min);
        }
    };
}
pub(super) use segment_rx_fields;

/// `RxQueue::rx_burst`: the common burst in one segment (neither ring wraps within the room, and
/// the CQEs run to its end or to one the device has not written yet), else the queue's general
/// path, which starts again from the queue's indices: nothing is published before that.
#[inline(always)]
pub(super) fn burst<Q: SegmentRx>(q: &mut Q, out: &mut Burst) -> Result<usize, QueueError> {
    if let Some(s) = q.failed() {
        return Err(failed_error(s));
    }
    same_pool(q.pool(), out)?;
    let (ci, bi, posted) = q.at();
    // A device cannot complete more buffers than were posted: a CQ that says otherwise is
    // broken, and the slots past the posted ones hold no buffer of ours.
    let spare = out.spare();
    let room = spare.len().min(posted);
    let bufs = q.bufs();
    let (cq_at, b_at) = (ci & (q.cq().size() - 1), bi as usize & (bufs.len() - 1));
    if cq_at as usize + room <= q.cq().size() as usize && b_at + room <= bufs.len() {
        let (mut bytes, mut drops) = (0u64, 0u64);
        let seg = q.cq().reader().segment(ci, room);
        let (slots, bufs) = (&mut spare[..room], &bufs[b_at..b_at + room]);
        let n = if q.timestamps() {
            q.poll_segment::<true>(slots, bufs, seg, &mut bytes, &mut drops)
        } else {
            q.poll_segment::<false>(slots, bufs, seg, &mut bytes, &mut drops)
        };
        if n == room || matches!(q.cq().reader().poll_rx(ci.wrapping_add(n as u32)), RxPoll::Empty) {
            return done(q, out, n, (ci, bi), bytes, drops);
        }
    }
    q.general(out)
}

/// The end of a burst that took `n` frames of one buffer each (written to `out`'s spare slots)
/// from consumer index and buffer index `from`: commits them, moves and publishes the consumer
/// index, counts, stops on a fatal device error when nothing came, refills.
#[inline(always)]
pub(super) fn done<Q: SegmentRx>(
    q: &mut Q,
    out: &mut Burst,
    n: usize,
    from: (u32, u32),
    bytes: u64,
    drops: u64,
) -> Result<usize, QueueError> {
    out.commit(n);
    if n > 0 {
        let (ci, bi) = (from.0.wrapping_add(n as u32), from.1.wrapping_add(n as u32));
        q.advance(ci, bi);
        q.cq().publish_ci(ci);
        let s = q.stats_mut();
        s.packets += n as u64;
        s.bytes += bytes;
        s.drops += drops;
        s.bursts += 1;
    } else {
        let a = q.attention();
        if a & crate::dv::attention::ACT != 0 {
            q.attend(a)?;
        }
    }
    q.refill_after_burst();
    Ok(n)
}
