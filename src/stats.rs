//! Per-queue counters. Plain integers owned by the queue's core: the hot path bumps them without
//! atomics, and a stats thread gets copies through the application.

use crate::failure::FailureKind;

/// Completion errors by [`FailureKind`] (whatever the backend's own code for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

impl ErrorCounts {
    pub fn count(&mut self, kind: FailureKind) {
        match kind {
            FailureKind::LocalLength => self.local_length += 1,
            FailureKind::LocalOperation => self.local_qp_op += 1,
            FailureKind::Protection => self.local_prot += 1,
            FailureKind::Flushed => self.flushed += 1,
            FailureKind::Other => self.other += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.local_length + self.local_qp_op + self.local_prot + self.flushed + self.other + self.bad_cqe
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub packets: u64,
    pub bytes: u64,
    /// RX: frames the device dropped for lack of posted buffers, as the CQEs report them (an
    /// 8-bit count carried by the next completion: a lower bound under heavy loss; the port's
    /// own out-of-buffer counter is exact). TX: packets given to the queue that never went out
    /// (completion error, queue reset, malformed frame).
    pub drops: u64,
    /// Times the pool had fewer buffers than a refill wanted.
    pub no_buffers: u64,
    pub errors: ErrorCounts,
    /// Queue resets after a completion error.
    pub recoveries: u64,
    /// TX doorbells rung again because completions stopped coming (a lost doorbell).
    pub doorbell_retries: u64,
    /// 1 once the queue stopped on the device's fatal error (`IBV_EVENT_DEVICE_FATAL`).
    pub device_fatal: u64,
    /// Bursts (calls that moved at least one packet).
    pub bursts: u64,
}
