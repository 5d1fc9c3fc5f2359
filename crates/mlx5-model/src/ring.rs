//! The device side of the rings: what a NIC's DMA engine reads and writes in the memory it shares
//! with the driver. The model's own access, independent of the driver's views (`dv::ring`), so
//! that what tests the driver is not the driver; both follow the ordering the PRM and rdma-core
//! lay down (reference: /work/shared/reference/mlx5-dv.md):
//! - Doorbell records are big-endian 32-bit words (`struct mlx5_db`: rdma-core
//!   providers/mlx5/mlx5.h; the driver writes them after the WQEs and before the UAR,
//!   `mlx5_post_send` → `udma_to_device_barrier`), so the device loads them with acquire.
//! - The UAR doorbell register takes the first 8 bytes of the last WQE posted (`mlx5_bf_copy`/
//!   `mmio_write64_be` in rdma-core providers/mlx5/qp.c); the device latches the newest write.
//! - A CQE is written whole before its `op_own` byte, whose owner bit tells the driver it is
//!   valid (`get_sw_cqe` in rdma-core providers/mlx5/cq.c reads `op_own` first, then a
//!   `udma_from_device_barrier`), so the device stores `op_own` last, with release.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// Loads a BE32 doorbell record word with acquire ordering (it publishes the WQEs before it).
///
/// # Safety
/// `p` must be a valid, 4-byte aligned word.
pub(crate) unsafe fn load_dbrec(p: *const u32) -> u32 {
    // SAFETY: per the contract.
    u32::from_be(unsafe { (*p.cast::<AtomicU32>()).load(Ordering::Acquire) })
}

/// Stores a BE32 doorbell record word with release ordering (the device resetting a queue).
///
/// # Safety
/// `p` must be a valid, 4-byte aligned word.
pub(crate) unsafe fn store_dbrec(p: *mut u32, v: u32) {
    // SAFETY: per the contract.
    unsafe { (*p.cast::<AtomicU32>()).store(v.to_be(), Ordering::Release) }
}

/// Copies `out.len()` bytes of ring or buffer memory at `src` (a WQE slot, a gather range, a
/// posted receive WQE).
///
/// # Safety
/// `[src, src + out.len())` must be valid memory that the driver has published to the device
/// (a doorbelled WQE or a posted buffer) and is not writing.
pub(crate) unsafe fn read(src: *const u8, out: &mut [u8]) {
    // SAFETY: per the contract; `out` is a distinct Rust slice.
    unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) }
}

/// Writes a 64-byte CQE: bytes 0..63, then `op_own` with release, so a driver that sees the owner
/// bit sees the whole entry.
///
/// # Safety
/// `slot` must be a valid 64-byte CQ slot that the driver has consumed (or never owned).
pub(crate) unsafe fn write_cqe(slot: *mut u8, cqe: &[u8; 64]) {
    // SAFETY: per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(cqe.as_ptr(), slot, 63);
        (*slot.add(63).cast::<AtomicU8>()).store(cqe[63], Ordering::Release);
    }
}

/// Writes `bytes` at `dst` in ring memory with plain stores (mini-CQE arrays: the driver reads
/// them only after the title's `op_own`, which [`write_cqe`] stores afterwards with release).
///
/// # Safety
/// `[dst, dst + bytes.len())` must be valid ring memory that the driver has consumed.
pub(crate) unsafe fn write_bytes(dst: *mut u8, bytes: &[u8]) {
    // SAFETY: per the contract; `bytes` is a distinct Rust slice.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) }
}

/// Stamps a CQ slot's `op_own` (at creation: `CQE_INIT_OP_OWN`, an invalid CQE of owner 1, as
/// `mlx5_alloc_cq_buf` in rdma-core providers/mlx5/cq.c initialises every slot).
///
/// # Safety
/// `slot` must be a valid 64-byte CQ slot.
pub(crate) unsafe fn stamp_op_own(slot: *mut u8, v: u8) {
    // SAFETY: per the contract.
    unsafe { (*slot.add(63).cast::<AtomicU8>()).store(v, Ordering::Release) }
}
