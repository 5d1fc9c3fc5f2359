//! Per-queue counters. Plain integers owned by the queue's core: the hot path bumps them without
//! atomics, and a stats thread gets copies through the application.

// `ErrorCounts::count` serves the completion paths of the mlx5 and model backends.
#![cfg_attr(not(any(feature = "model", feature = "mlx5")), allow(dead_code))]

use crate::failure::FailureKind;

/// Completion errors by [`FailureKind`] (whatever the backend's own code for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorCounts {
    /// [`FailureKind::LocalLength`].
    pub local_length: u64,
    /// [`FailureKind::LocalOperation`].
    pub local_qp_op: u64,
    /// [`FailureKind::Protection`].
    pub local_prot: u64,
    /// [`FailureKind::Flushed`].
    pub flushed: u64,
    /// [`FailureKind::Other`], and backend errors of no kind above (AF_XDP wake-ups the kernel
    /// failed).
    pub other: u64,
    /// CQEs with an opcode or format the queue does not expect.
    pub bad_cqe: u64,
    /// TX: flush CQEs (WR_FLUSH_ERR) of WQEs a recovery had already dropped, which the device
    /// wrote after the reset; consumed without another reset (DPDK `mlx5_tx_error_cqe_handle`
    /// does nothing for them). Not an error of the queue's, so not in [`ErrorCounts::total`].
    pub late_flush: u64,
    /// [`FailureKind::CqError`]: the device put the queue's CQ in error (an overrun).
    pub cq_error: u64,
    /// The device reported the queue's WQ or QP broken (`IBV_EVENT_WQ_FATAL`,
    /// `IBV_EVENT_QP_FATAL`); the queue was reset as after a completion error.
    pub queue_fatal: u64,
}

impl ErrorCounts {
    pub(crate) fn count(&mut self, kind: FailureKind) {
        match kind {
            FailureKind::LocalLength => self.local_length += 1,
            FailureKind::LocalOperation => self.local_qp_op += 1,
            FailureKind::Protection => self.local_prot += 1,
            FailureKind::Flushed => self.flushed += 1,
            FailureKind::Other => self.other += 1,
            FailureKind::CqError => self.cq_error += 1,
        }
    }

    /// Every error counted, of whatever kind.
    ///
    /// ```
    /// let stats = rawpkt::QueueStats::default();
    /// assert_eq!(stats.errors.total(), 0);
    /// ```
    pub fn total(&self) -> u64 {
        self.local_length
            + self.local_qp_op
            + self.local_prot
            + self.flushed
            + self.other
            + self.bad_cqe
            + self.cq_error
            + self.queue_fatal
    }
}

/// A queue's counters ([`RxQueue::stats`](crate::RxQueue::stats),
/// [`TxQueue::stats`](crate::TxQueue::stats)). A receive loop that loses nothing keeps `drops` at
/// 0; the port's own count of frames the device dropped is
/// [`Port::device_drops`](crate::Port::device_drops).
///
/// ```
/// use rawpkt::{open, Pool, PoolConfig, QueueConfig};
/// let port = open("model:stats-doc/1").unwrap();
/// let pool = Pool::new(PoolConfig::default().buffers(2048)).unwrap();
/// let rx = port.rx_queue(0, &pool, &QueueConfig::default()).unwrap();
/// let s = rx.stats();
/// assert_eq!((s.packets, s.drops, s.errors.total()), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Packets received (RX) or handed to the device (TX).
    pub packets: u64,
    /// Their bytes (frames without FCS).
    pub bytes: u64,
    /// RX: frames the device dropped for lack of posted buffers, as the CQEs report them (an
    /// 8-bit count carried by the next completion: a lower bound under heavy loss; the port's
    /// own out-of-buffer counter is exact). TX: packets given to the queue that never went out
    /// (completion error, queue reset, malformed frame).
    pub drops: u64,
    /// Times the pool had fewer buffers than a refill wanted.
    pub no_buffers: u64,
    /// Completion errors by kind.
    pub errors: ErrorCounts,
    /// Queue resets after a completion error.
    pub recoveries: u64,
    /// TX: times completions stopped while frames were in flight for longer than the watchdog
    /// waits (10 ms, or the time a full ring takes to drain on the link if longer); the link
    /// being down does not count. A paused (PFC) or slow link, a model thread that was not
    /// scheduled, or a lost doorbell may be why: not an error by itself, nothing is lost.
    pub tx_stalls: u64,
    /// TX: doorbells rung again during those stalls (the first after the wait, then after
    /// twice as long each time, up to a second apart): harmless to a device that already ran
    /// the WQEs, and what brings back one that missed a doorbell.
    pub doorbell_rerings: u64,
    /// 1 once the queue stopped on the device's fatal error (`IBV_EVENT_DEVICE_FATAL`).
    pub device_fatal: u64,
    /// Bursts (calls that moved at least one packet).
    pub bursts: u64,
}
