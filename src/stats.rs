//! Per-queue counters. Plain integers owned by the queue's core: the hot path bumps them without
//! atomics, and a stats thread gets copies through the application.

use crate::dv::prm::syndrome;

/// Completion errors by mlx5 syndrome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    pub local_length: u64,
    pub local_qp_op: u64,
    pub local_prot: u64,
    pub wr_flush: u64,
    pub other: u64,
    /// CQEs with an opcode or format the queue does not expect.
    pub bad_cqe: u64,
}

impl ErrorCounts {
    pub fn count(&mut self, synd: u8) {
        match synd {
            syndrome::LOCAL_LENGTH => self.local_length += 1,
            syndrome::LOCAL_QP_OP => self.local_qp_op += 1,
            syndrome::LOCAL_PROT => self.local_prot += 1,
            syndrome::WR_FLUSH => self.wr_flush += 1,
            _ => self.other += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.local_length + self.local_qp_op + self.local_prot + self.wr_flush + self.other + self.bad_cqe
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
