//! The memory a driver and an mlx5 device share: SQ/RQ/CQ rings, doorbell records and the UAR
//! doorbell register, as `mlx5dv_init_obj` hands them over. All raw-pointer access of the DV
//! datapath is here, in small functions; the driver (`tx::dv`, `rx::dv`) and the device model use
//! only the safe methods.
//!
//! Ordering protocol: rdma-core's, with its barriers by name ([`barrier`], `util/udma_barrier.h`),
//! as `providers/mlx5/qp.c` uses them (`_mlx5_post_send`, `mlx5_post_wq_recv`); DPDK
//! `mlx5_doorbell_ring` (`drivers/common/mlx5/mlx5_common.h`) and VPP
//! `rdma_device_output_tx_mlx5_doorbell` do the same:
//! - driver → device: descriptors are plain stores; `udma_to_device_barrier` then the doorbell
//!   record store, so the device never sees a record ahead of the descriptors it publishes (on
//!   the RX refill this is the only ordering: no UAR write follows it). The SQ doorbell then goes
//!   to the UAR: `mmio_wc_start`, one 8-byte store of the last WQE's first 8 bytes
//!   (`mmio_write64_be`), `mmio_flush_writes` so that the write-combining buffer goes out now
//!   rather than with the next burst.
//! - device → driver: the device writes a CQE's bytes 0..62 and then `op_own`; the driver loads
//!   `op_own`, then `udma_from_device_barrier` before reading the rest. Buffers handed back by a
//!   CQE were written before it, so they are visible too.
//!
//! Pointers stay valid because every view holds `keep`, the owner of the memory (the model's
//! queue objects, or the verbs objects on hardware).
#![allow(unsafe_code)]
// Accessors the DV tests read (feature `internals`; see `dv`).
#![cfg_attr(not(feature = "internals"), allow(dead_code))]

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use super::prm::{Cqe64, CtrlSeg, DataSeg, SendWqe, CQE_INVALID, SEND_WQE_BB};

/// `op_own` of the CQE at `slot`, followed by `udma_from_device_barrier`: the device stores it
/// last and atomically, so the rest of the CQE is visible after it (rdma-core
/// `mlx5_get_next_cqe`, DPDK `mlx5_rx_poll_len`: the owner test, then the barrier).
///
/// # Safety
/// `slot` points at a slot of a live CQ ring.
#[inline(always)]
unsafe fn load_op_own(slot: *const Cqe64) -> u8 {
    // Acquire is what the Rust memory model needs against the model's release store; on x86-64
    // and aarch64 it is the barrier below that orders the reads against the device's DMA.
    // SAFETY: per the contract; op_own is byte 63 of the slot, which the device stores atomically.
    let v = unsafe { (*std::ptr::addr_of!((*slot).op_own).cast::<AtomicU8>()).load(Ordering::Acquire) };
    barrier::udma_from_device_barrier();
    v
}

/// Whether `op_own` is that of a CQE the device wrote in the pass of owner parity `parity`: the
/// owner bit matches, and the opcode is not INVALID (which keeps pass 0 from matching the 0xF0
/// the slots start with; rdma-core `get_sw_cqe`).
#[inline(always)]
fn written_in_pass(op_own: u8, parity: u8) -> bool {
    op_own & 1 == parity && op_own >> 4 != CQE_INVALID
}

/// Whatever keeps ring memory alive.
pub type KeepAlive = Arc<dyn Any + Send + Sync>;

/// Mirrors `struct mlx5dv_qp`'s send-side fields for one raw-packet QP.
///
/// The infos are not `Clone`: each describes memory that one queue owns (built only by the
/// `unsafe` [`SqInfo::from_raw`] and its kin, or by the crate for a queue it creates), and the
/// queue constructors that take them are `unsafe` with the same contract.
pub struct SqInfo {
    pub(crate) buf: *mut u8,
    pub(crate) wqe_cnt: u32,
    pub(crate) stride: u32,
    /// `mlx5dv_qp.dbrec`: BE32 words, `[SND_DBR]` is the SQ PI.
    pub(crate) dbrec: *mut u32,
    /// `mlx5dv_qp.bf.reg`: where the 8-byte doorbell goes.
    pub(crate) bf_reg: *mut u8,
    pub(crate) bf_size: u32,
    pub(crate) qpn: u32,
    pub(crate) keep: KeepAlive,
}

/// Mirrors `struct mlx5dv_cq`.
pub struct CqInfo {
    pub(crate) buf: *mut u8,
    pub(crate) dbrec: *mut u32,
    pub(crate) cqe_cnt: u32,
    pub(crate) cqe_size: u32,
    pub(crate) cqn: u32,
    pub(crate) keep: KeepAlive,
    /// The CQ was created with CQE compression in this mini-CQE format (`mlx5dv_create_cq` with
    /// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`; `mlx5dv_init_obj` does not report it).
    pub(crate) comp: Option<super::prm::MiniFormat>,
}

/// Mirrors `struct mlx5dv_rwq`.
pub struct RwqInfo {
    pub(crate) buf: *mut u8,
    pub(crate) dbrec: *mut u32,
    pub(crate) wqe_cnt: u32,
    pub(crate) stride: u32,
    pub(crate) keep: KeepAlive,
}

// SAFETY: the infos are plain descriptions of device-shared memory whose lifetime is tied to
// `keep`; moving them between threads does not touch that memory.
unsafe impl Send for SqInfo {}
// SAFETY: as above.
unsafe impl Send for CqInfo {}
// SAFETY: as above.
unsafe impl Send for RwqInfo {}

impl SqInfo {
    /// Describes a send queue as `mlx5dv_init_obj` reports it.
    ///
    /// # Safety
    /// The pointers must be the live objects of one raw-packet QP (its WQE buffer of `wqe_cnt`
    /// WQEBBs, its doorbell record, its UAR register) and stay valid while `keep` is held.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_raw(
        buf: *mut u8,
        wqe_cnt: u32,
        stride: u32,
        dbrec: *mut u32,
        bf_reg: *mut u8,
        bf_size: u32,
        qpn: u32,
        keep: KeepAlive,
    ) -> SqInfo {
        SqInfo {
            buf,
            wqe_cnt,
            stride,
            dbrec,
            bf_reg,
            bf_size,
            qpn,
            keep,
        }
    }
    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// WQEs (or WQEBBs) in the ring.
    pub fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }
    /// `mlx5dv_qp.bf.size`: 0 for a doorbell-only register (the datapath never BlueFlame-copies).
    pub fn bf_size(&self) -> u32 {
        self.bf_size
    }
}

impl CqInfo {
    /// Describes a completion queue as `mlx5dv_init_obj` reports it.
    ///
    /// # Safety
    /// `buf` must be the CQ's `cqe_cnt` entries of `cqe_size` bytes and `dbrec` its doorbell
    /// record, valid while `keep` is held.
    pub unsafe fn from_raw(
        buf: *mut u8,
        dbrec: *mut u32,
        cqe_cnt: u32,
        cqe_size: u32,
        cqn: u32,
        keep: KeepAlive,
    ) -> CqInfo {
        CqInfo {
            buf,
            dbrec,
            cqe_cnt,
            cqe_size,
            cqn,
            keep,
            comp: None,
        }
    }
    /// The same CQ, created with CQE compression in format `comp`.
    pub fn with_compression(mut self, comp: Option<super::prm::MiniFormat>) -> CqInfo {
        self.comp = comp;
        self
    }
    /// The mini-CQE format the CQ was created with, if it compresses.
    pub fn compression(&self) -> Option<super::prm::MiniFormat> {
        self.comp
    }
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }
    /// CQEs in the ring.
    pub fn cqe_cnt(&self) -> u32 {
        self.cqe_cnt
    }
}

impl RwqInfo {
    /// Describes a receive WQ as `mlx5dv_init_obj` reports it.
    ///
    /// # Safety
    /// `buf` must be the WQ's `wqe_cnt` WQEs of `stride` bytes and `dbrec` its doorbell record,
    /// valid while `keep` is held.
    pub unsafe fn from_raw(buf: *mut u8, dbrec: *mut u32, wqe_cnt: u32, stride: u32, keep: KeepAlive) -> RwqInfo {
        RwqInfo {
            buf,
            dbrec,
            wqe_cnt,
            stride,
            keep,
        }
    }
    /// WQEs (or WQEBBs) in the ring.
    pub fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }
}

fn check_ring(what: &str, cnt: u32, stride: u32, want_stride: u32, buf: *mut u8, align: usize) -> Result<(), String> {
    if cnt == 0 || !cnt.is_power_of_two() {
        return Err(format!("{what}: entry count {cnt} is not a power of two"));
    }
    if stride != want_stride {
        return Err(format!("{what}: stride {stride}, the datapath needs {want_stride}"));
    }
    if buf.is_null() || !(buf as usize).is_multiple_of(align) {
        return Err(format!("{what}: ring buffer is not {align}-byte aligned"));
    }
    Ok(())
}

/// A doorbell record word (BE32 in host memory, read by the device).
struct DbrecWord(*const AtomicU32);

impl DbrecWord {
    /// # Safety
    /// `p` must be a 4-byte aligned word that stays valid while the owning view's `keep` lives.
    unsafe fn new(p: *mut u32) -> DbrecWord {
        DbrecWord(p.cast::<AtomicU32>())
    }

    /// `udma_to_device_barrier`, then the record: what the driver wrote before (descriptors, or
    /// the reads of consumed CQEs) is visible to the device before the new value is.
    #[inline(always)]
    fn store_be(&self, v: u32) {
        barrier::udma_to_device_barrier();
        // Release keeps the Rust memory model's promise to the model device; it is the barrier
        // above that orders the word against DMA on hardware (on aarch64 `stlr` alone is
        // inner-shareable only).
        // SAFETY: valid and aligned per `new`; the device only reads the word.
        unsafe { (*self.0).store(v.to_be(), Ordering::Release) }
    }
}

impl DbrecWord {
    // `RqRing::posted`, which the DV tests read (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    #[inline(always)]
    fn load_be(&self) -> u32 {
        // SAFETY: valid and aligned per `new`.
        u32::from_be(unsafe { (*self.0).load(Ordering::Acquire) })
    }
}

/// rdma-core's DMA and MMIO barriers (`util/udma_barrier.h`), each named after its macro and
/// emitting the instruction rdma-core emits on x86-64 and aarch64. Other architectures get a
/// sequentially consistent fence, which is at least as strong as the compiler can make it.
///
/// | macro | x86-64 | aarch64 |
/// |---|---|---|
/// | `udma_to_device_barrier` | compiler barrier | `dmb oshst` |
/// | `udma_from_device_barrier` | `lfence` in rdma-core; a compiler barrier here, as DPDK's `rte_io_rmb` | `dmb oshld` |
/// | `mmio_flush_writes` | `sfence` | `dsb st` |
/// | `mmio_wc_start` | `mmio_flush_writes` | `mmio_flush_writes` |
///
/// On x86-64 `udma_from_device_barrier` follows DPDK (`rte_io_rmb`, a compiler barrier, which
/// `mlx5_rx_burst` and `mlx5_tx_handle_completion` use after the owner test) rather than
/// rdma-core's `lfence`: x86 keeps loads from write-back memory in order, and CQ memory is
/// write-back; `lfence` matters only for write-combining or non-temporal loads, which the driver
/// does not make. It would cost an instruction per CQE on the receive path.
///
/// `mmio_wc_spinlock`/`mmio_wc_spinunlock` have no counterpart: a rawpkt send queue has one
/// owner (`&mut self`), so no lock orders UAR writes between threads; their barriers are
/// `mmio_wc_start` and `mmio_flush_writes`, which [`SqRing::ring_doorbell_word`] calls.
pub mod barrier {
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    use std::sync::atomic::{fence, Ordering};

    /// Emits one barrier instruction (or none: a compiler barrier). The asm has no operands and
    /// is not `nomem`, so the compiler keeps every memory access on its side of it.
    macro_rules! barrier_insn {
        ($insn:literal) => {
            // The instructions used are in the x86-64 (SSE `sfence`) and ARMv8 baselines.
            // SAFETY: a barrier instruction (or an empty string) takes no operands and accesses
            // no memory.
            unsafe { core::arch::asm!($insn, options(nostack, preserves_flags)) }
        };
    }

    /// `udma_to_device_barrier`: the device sees every store to memory made before it once it
    /// sees a store made after it (a doorbell record, a doorbell).
    #[inline(always)]
    pub fn udma_to_device_barrier() {
        #[cfg(target_arch = "x86_64")]
        barrier_insn!("");
        #[cfg(target_arch = "aarch64")]
        barrier_insn!("dmb oshst");
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        fence(Ordering::SeqCst);
    }

    /// `udma_from_device_barrier`: reads after it see what the device wrote before the store the
    /// driver just observed (a CQE's owner byte).
    #[inline(always)]
    pub fn udma_from_device_barrier() {
        #[cfg(target_arch = "x86_64")]
        barrier_insn!("");
        #[cfg(target_arch = "aarch64")]
        barrier_insn!("dmb oshld");
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        fence(Ordering::SeqCst);
    }

    /// `mmio_flush_writes`: pushes write-combining buffers out to the device now (after a UAR
    /// write), and keeps WC stores on either side from merging.
    #[inline(always)]
    pub fn mmio_flush_writes() {
        #[cfg(target_arch = "x86_64")]
        barrier_insn!("sfence");
        #[cfg(target_arch = "aarch64")]
        barrier_insn!("dsb st");
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        fence(Ordering::SeqCst);
    }

    /// `mmio_wc_start`: before a write to write-combining memory, orders it after every earlier
    /// store (it implies `udma_to_device_barrier`). rdma-core defines it as `mmio_flush_writes`.
    #[inline(always)]
    pub fn mmio_wc_start() {
        mmio_flush_writes()
    }
}

/// The driver's view of a send queue.
pub struct SqRing {
    base: *mut SendWqe,
    mask: u32,
    dbrec: DbrecWord,
    uar: *const AtomicU64,
    qpn: u32,
    _keep: KeepAlive,
}

impl SqRing {
    /// # Safety
    /// A ring lets its user hand the device descriptors it will act on, and its safe methods
    /// trust the user with the ring's discipline; so, for the ring's whole life:
    /// - it is the SQ's only driver-side view (no second `SqRing` or queue over `info`);
    /// - the caller posts only descriptors for memory the device may access and that nothing
    ///   else uses until their completion;
    /// - it writes only WQEBBs the device is not reading: those between the device's consumer
    ///   index and `pi + size` that no doorbell has published yet.
    pub unsafe fn new(info: &SqInfo) -> Result<SqRing, String> {
        check_ring("SQ", info.wqe_cnt, info.stride, SEND_WQE_BB as u32, info.buf, 64)?;
        if info.bf_reg.is_null() || !(info.bf_reg as usize).is_multiple_of(8) || info.dbrec.is_null() {
            return Err("SQ: doorbell register or record missing".into());
        }
        Ok(SqRing {
            base: info.buf.cast(),
            mask: info.wqe_cnt - 1,
            // SAFETY: `mlx5dv_qp.dbrec` points at two aligned BE32 words kept alive by `keep`.
            dbrec: unsafe { DbrecWord::new(info.dbrec.add(super::prm::SND_DBR)) },
            uar: info.bf_reg.cast(),
            qpn: info.qpn,
            _keep: info.keep.clone(),
        })
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// WQEBB number `pi` (free-running) as a one-WQEBB SEND. The caller writes only WQEBBs
    /// between the device's consumer index and `pi + size`, which the device does not read.
    #[inline(always)]
    pub fn wqe(&mut self, pi: u32) -> &mut SendWqe {
        // The caller of `new` writes only WQEBBs not yet doorbelled, which are the driver's alone.
        // SAFETY: in the ring (`pi & mask`), 64-byte aligned (checked in `new`), not the device's
        // (above), and `&mut self` makes this the only reference.
        unsafe { &mut *self.base.add((pi & self.mask) as usize) }
    }

    /// A writer for a run of WQEBBs whose ring geometry stays in registers.
    #[inline(always)]
    pub fn writer(&mut self) -> SqWriter<'_> {
        SqWriter {
            base: self.base,
            mask: self.mask,
            _ring: std::marker::PhantomData,
        }
    }

    /// WQEBB number `pi` as raw bytes, for WQEs longer than one WQEBB.
    #[inline(always)]
    pub fn wqebb_bytes(&mut self, pi: u32) -> &mut [u8; SEND_WQE_BB] {
        // SAFETY: as in `wqe`; a SendWqe is exactly one 64-byte WQEBB.
        unsafe { &mut *self.base.add((pi & self.mask) as usize).cast::<[u8; SEND_WQE_BB]>() }
    }

    /// The control segment of WQEBB `pi`, as the driver wrote it (to find its cookie).
    #[inline(always)]
    pub fn ctrl(&self, pi: u32) -> CtrlSeg {
        // SAFETY: in-ring as above; the device never writes send WQEs, so reading is race-free.
        unsafe { (*self.base.add((pi & self.mask) as usize)).ctrl }
    }

    /// Publishes WQEs up to `next_pi` and rings the doorbell with the first 8 bytes of the last
    /// WQE, which starts at WQEBB `last_pi` (VPP fix 3ef653aa886: the last, not the first).
    #[inline(always)]
    pub fn ring_doorbell(&self, next_pi: u32, last_pi: u32) {
        // The WQE is driver memory the device never writes: reading it first changes nothing.
        self.ring_doorbell_word(next_pi, u64::from_ne_bytes(self.ctrl(last_pi).doorbell_bytes()));
    }

    /// [`SqRing::ring_doorbell`] for a caller that still holds the last WQE's first 8 bytes (ctrl
    /// dwords 0–1 as they are in memory) in a register, without reading the WQE back.
    #[inline(always)]
    pub fn ring_doorbell_word(&self, next_pi: u32, ctrl_word: u64) {
        // rdma-core `_mlx5_post_send`: udma_to_device_barrier, the record (in `store_be`), then
        // mmio_wc_start, the UAR write, mmio_flush_writes. The UAR page is write-combining on
        // hardware: the first barrier keeps the doorbell behind the record, the second sends it
        // now instead of leaving it in the CPU's WC buffer until something else flushes it (DPDK
        // `mlx5_doorbell_ring` with `flash`: `rte_wmb` after the write).
        self.dbrec.store_be(next_pi & 0xffff);
        barrier::mmio_wc_start();
        // One 8-byte store, as the device requires (rdma-core `mmio_write64_be`: a relaxed
        // 8-byte atomic store; the barriers on either side order it); the bytes go out in
        // memory order.
        // SAFETY: bf_reg is an 8-byte aligned register (checked in `new`) kept alive by `keep`.
        unsafe { (*self.uar).store(ctrl_word, Ordering::Relaxed) };
        barrier::mmio_flush_writes();
    }

    /// Publishes WQEs up to `next_pi` in the record without the UAR write: what a driver that
    /// forgot the doorbell does. Only for testing that a device notices.
    #[doc(hidden)]
    // The DV tests read it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn write_record_only(&self, next_pi: u32) {
        self.dbrec.store_be(next_pi & 0xffff);
    }

    /// Zeroes the doorbell record after a queue reset (the device starts again at PI 0).
    pub fn reset_dbrec(&self) {
        self.dbrec.store_be(0);
    }
}

/// See [`SqRing::writer`]; it borrows the ring mutably, so nothing else writes it meanwhile.
pub struct SqWriter<'a> {
    base: *mut SendWqe,
    mask: u32,
    _ring: std::marker::PhantomData<&'a mut SqRing>,
}

impl SqWriter<'_> {
    /// WQEBBs `pi .. pi + n` as 64-bit words, for a run that does not cross the ring end
    /// (`(pi & mask) + n <= size`, asserted): the datapath builds each canonical SEND in
    /// registers and stores it whole.
    #[inline(always)]
    pub fn segment(&mut self, pi: u32, n: usize) -> &mut [[u64; 8]] {
        let at = (pi & self.mask) as usize;
        assert!(at + n <= self.mask as usize + 1);
        // SAFETY: in the ring (asserted), 64-byte aligned WQEBBs hold [u64; 8]; undoorbelled WQEBBs
        // are the driver's, and the writer borrows the ring mutably: the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at).cast::<[u64; 8]>(), n) }
    }
}

impl SqWriter<'_> {
    /// 16-byte units (DS) `ds .. ds + n` of the ring (counted from WQEBB 0: DS `4 * pi` starts
    /// WQEBB `pi`; they must not cross the ring end, asserted) as data segments, for the fields to be stored one by one (on
    /// CPUs with MOVBE each big-endian field is then one store).
    #[inline(always)]
    pub fn data_segs(&mut self, ds: u32, n: usize) -> &mut [DataSeg] {
        self.ds_units_as(ds, n)
    }

    /// [`SqWriter::data_segs`], or None where the units would cross the ring end: a caller that
    /// takes another path then needs no test of its own.
    #[inline(always)]
    pub(crate) fn try_data_segs(&mut self, ds: u32, n: usize) -> Option<&mut [DataSeg]> {
        self.try_ds_units_as(ds, n)
    }

    /// DS units `ds .. ds + n` viewed as `T`, a 16-byte, at most 16-aligned type (one per DS) of
    /// plain integers, for which any bytes the ring holds are a valid value: `[u64; 2]`, `DataSeg`.
    #[inline(always)]
    fn ds_units_as<T>(&mut self, ds: u32, n: usize) -> &mut [T] {
        self.try_ds_units_as(ds, n).expect("DS units past the SQ ring's end")
    }

    /// [`SqWriter::ds_units_as`], or None where `ds .. ds + n` crosses the ring end.
    #[inline(always)]
    fn try_ds_units_as<T>(&mut self, ds: u32, n: usize) -> Option<&mut [T]> {
        const { assert!(size_of::<T>() == 16 && align_of::<T>() <= 16) };
        let units = (self.mask as usize + 1) * 4;
        let at = ds as usize & (units - 1);
        if n > units - at {
            return None;
        }
        // Each DS is 16 bytes at a 16-byte aligned address, and T fits one (checked above).
        // SAFETY: [at, at + n) DS lie inside the ring (tested) and hold a T each; WQEBBs not yet
        // doorbelled are the driver's, and the writer borrows the ring mutably.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.cast::<T>().add(at), n) })
    }

    /// DS units in the ring.
    pub fn ds_units(&self) -> u32 {
        (self.mask + 1) * 4
    }
}

/// An array of a power-of-two length indexed modulo that length (a ring of driver-side
/// records): every index is in bounds by construction, so none is checked. The DV send queue
/// keeps its completion records here; checked indexing adds instructions to every `tx_burst`
/// (measured with `scripts/callgrind.sh`).
pub(crate) struct MaskedRing<T> {
    buf: Box<[T]>,
    mask: usize,
}

impl<T: Copy> MaskedRing<T> {
    /// `len` entries of `fill`; `len` must be a power of two (asserted).
    pub(crate) fn new(len: usize, fill: T) -> MaskedRing<T> {
        assert!(len.is_power_of_two());
        MaskedRing {
            buf: vec![fill; len].into_boxed_slice(),
            mask: len - 1,
        }
    }

    /// Entry `i mod len`.
    #[inline(always)]
    pub(crate) fn get(&self, i: u32) -> T {
        // SAFETY: `i & mask` < len, the buffer's length (a power of two, checked in `new`).
        unsafe { *self.buf.get_unchecked(i as usize & self.mask) }
    }

    /// Sets entry `i mod len`.
    #[inline(always)]
    pub(crate) fn set(&mut self, i: u32, v: T) {
        // SAFETY: as in `get`.
        unsafe { *self.buf.get_unchecked_mut(i as usize & self.mask) = v }
    }
}

/// The driver's view of a completion queue.
pub struct CqRing {
    base: *const Cqe64,
    mask: u32,
    log2: u32,
    dbrec: DbrecWord,
    _keep: KeepAlive,
    comp: Option<super::prm::MiniFormat>,
}

impl CqRing {
    /// # Safety
    /// The caller owns the CQ's consumer side for the ring's whole life (no second `CqRing` or
    /// queue over `info`): it publishes consumer indices only for entries it has finished with,
    /// so the device never overwrites an entry still being read.
    pub unsafe fn new(info: &CqInfo) -> Result<CqRing, String> {
        check_ring("CQ", info.cqe_cnt, info.cqe_size, 64, info.buf, 64)?;
        if info.dbrec.is_null() {
            return Err("CQ: doorbell record missing".into());
        }
        Ok(CqRing {
            base: info.buf.cast_const().cast(),
            mask: info.cqe_cnt - 1,
            log2: info.cqe_cnt.trailing_zeros(),
            // SAFETY: `mlx5dv_cq.dbrec` points at two aligned BE32 words kept alive by `keep`.
            dbrec: unsafe { DbrecWord::new(info.dbrec.add(super::prm::CQ_SET_CI)) },
            _keep: info.keep.clone(),
            comp: info.comp,
        })
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The mini-CQE format of a compressing CQ ([`CqInfo::with_compression`]).
    pub fn compression(&self) -> Option<super::prm::MiniFormat> {
        self.comp
    }

    /// The CQE at consumer index `ci` if the device has written it on this pass: owner bit equal
    /// to the pass parity of `ci` for the CQ's real size, and an opcode other than INVALID (which
    /// keeps pass 0 from matching the 0xF0 the slots start with; rdma-core `get_sw_cqe`).
    #[inline(always)]
    pub fn poll(&self, ci: u32) -> Option<Cqe64> {
        // SAFETY: `ci & mask` keeps the pointer in the ring, which is 64-byte aligned.
        let slot = unsafe { self.base.add((ci & self.mask) as usize) };
        // SAFETY: a slot of this ring.
        let op_own = unsafe { load_op_own(slot) };
        if !written_in_pass(op_own, ((ci >> self.log2) & 1) as u8) {
            return None;
        }
        // SAFETY: the acquire above shows the device's writes of this CQE; it rewrites the slot
        // only after the driver publishes a consumer index past it, and the copy is taken now.
        Some(unsafe { *slot })
    }

    /// A reader whose ring geometry stays in registers for a polling loop.
    #[inline(always)]
    pub(crate) fn reader(&self) -> CqReader<'_> {
        CqReader {
            base: self.base,
            mask: self.mask,
            log2: self.log2,
            _ring: std::marker::PhantomData,
        }
    }

    /// Whether the CQE at `ci` is there to poll (the test of [`CqRing::poll`] without the copy).
    #[inline(always)]
    pub fn ready(&self, ci: u32) -> bool {
        // SAFETY: `ci & mask` keeps the pointer in the ring.
        let op_own = unsafe { load_op_own(self.base.add((ci & self.mask) as usize)) };
        written_in_pass(op_own, ((ci >> self.log2) & 1) as u8)
    }

    /// Publishes the consumer index (`MLX5_CQ_SET_CI`: 24 bits, BE32).
    #[inline(always)]
    pub fn publish_ci(&self, ci: u32) {
        self.dbrec.store_be(ci & 0x00ff_ffff);
    }
}

/// What a receive poll found at a consumer index.
pub(crate) enum RxPoll<'a> {
    /// A plain RESP_SEND CQE of this pass (no compression, no scatter-to-CQE).
    Packet(&'a Cqe64),
    /// A CQE of this pass with another opcode or format (an error, or something unexpected).
    Other(&'a Cqe64),
    /// Nothing new yet.
    Empty,
}

/// See [`CqRing::reader`].
pub(crate) struct CqReader<'a> {
    base: *const Cqe64,
    mask: u32,
    log2: u32,
    _ring: std::marker::PhantomData<&'a CqRing>,
}

impl<'a> CqReader<'a> {
    /// Classifies the CQE at `ci` with one load and, on the fast path, one compare: a valid
    /// plain RESP_SEND of this pass has `op_own & 0xfd == 0x20 | parity` (opcode 2, format 0,
    /// any solicited bit, owner bit equal to the pass parity of the CQ's real size).
    #[inline(always)]
    pub(crate) fn poll_rx(&self, ci: u32) -> RxPoll<'a> {
        // SAFETY: `ci & mask` keeps the pointer in the ring, which is 64-byte aligned.
        let slot = unsafe { self.base.add((ci & self.mask) as usize) };
        // SAFETY: a slot of this ring.
        let op_own = unsafe { load_op_own(slot) };
        let parity = ((ci >> self.log2) & 1) as u8;
        if op_own & 0xfd == (super::prm::CQE_RESP_SEND << 4) | parity {
            // SAFETY: the acquire above makes the device's writes of this CQE visible; it does not
            // write the slot again before the driver publishes a consumer index past it.
            return RxPoll::Packet(unsafe { &*slot });
        }
        if !written_in_pass(op_own, parity) {
            return RxPoll::Empty;
        }
        // SAFETY: as above.
        RxPoll::Other(unsafe { &*slot })
    }
}

impl<'a> CqReader<'a> {
    /// A copy of the mini-CQE array in the slot of index `ci` (a compressed session's, at the
    /// title + 1 or + 8j: reference §3.11). No owner test: the slot's last byte is data, and the
    /// title's `op_own`, read with acquire, published the arrays written before it.
    #[inline(always)]
    pub(crate) fn mini_array(&self, ci: u32) -> super::prm::MiniArray {
        // SAFETY: `ci & mask` keeps the pointer in the ring; a MiniArray is 64 bytes of integer
        // fields that any bit pattern makes valid, read before the consumer index passes the slot.
        unsafe { std::ptr::read(self.base.add((ci & self.mask) as usize).cast()) }
    }

    /// Marks the slot of index `ci`, consumed as part of a compressed session, invalid: its stale
    /// bytes must not pass the owner test a ring pass or two later (DPDK writes
    /// `MLX5_CQE_INVALIDATE` into `op_own` in `mlx5_rx_poll_len` and `rxq_cq_decompress_v`).
    #[inline(always)]
    pub(crate) fn invalidate(&self, ci: u32) {
        // SAFETY: `ci & mask` keeps the pointer in the ring; op_own is the slot's last byte, which
        // the device does not write before the consumer index passes the slot.
        unsafe {
            (*std::ptr::addr_of!((*self.base.add((ci & self.mask) as usize)).op_own).cast::<AtomicU8>())
                .store(super::prm::CQE_INVALIDATE, Ordering::Relaxed)
        }
    }
}

impl<'a> CqReader<'a> {
    /// [`CqReader::invalidate`] for the `n` slots from index `ci` on (one byte store each).
    #[inline(always)]
    pub(crate) fn invalidate_run(&self, ci: u32, n: u32) {
        let at = ci & self.mask;
        if at + n <= self.mask + 1 {
            for i in 0..n as usize {
                // SAFETY: `at + i` < ring size; op_own is the slot's last byte, which the device
                // does not write before the consumer index passes the slot.
                unsafe {
                    (*std::ptr::addr_of!((*self.base.add(at as usize + i)).op_own).cast::<AtomicU8>())
                        .store(super::prm::CQE_INVALIDATE, Ordering::Relaxed)
                }
            }
        } else {
            for i in 0..n {
                self.invalidate(ci.wrapping_add(i));
            }
        }
    }
}

impl<'a> CqReader<'a> {
    /// The compressed session of `n` packets titled at `ci`, its mini-CQE arrays read in place
    /// (as DPDK `rxq_cq_decompress_v`: sound while the consumer index has not passed them), when
    /// its slots do not cross the ring's end: both queues' whole-session fast paths. Their slow
    /// paths copy arrays with [`CqReader::mini_array`], wherever the ring puts them.
    #[inline(always)]
    pub(crate) fn session(&self, ci: u32, n: u32) -> Option<Session<'a>> {
        let at = ci & self.mask;
        // A session of one packet still has its array at title + 1.
        (at + n.max(2) <= self.mask + 1).then(|| Session {
            // SAFETY: `at` < ring size keeps the pointer in the ring.
            title: unsafe { self.base.add(at as usize) },
            n,
            _ring: std::marker::PhantomData,
        })
    }

    /// The CQE at `ci` if it is the title of a compressed receive session of this pass
    /// (`op_own & 0xfd == 0x2c | parity`: one load and one compare, as [`CqReader::poll_rx`]);
    /// else whether the slot is still the device's (`Err(true)`) or holds something else.
    #[inline(always)]
    pub(crate) fn poll_title(&self, ci: u32) -> Result<&'a Cqe64, bool> {
        // SAFETY: `ci & mask` keeps the pointer in the ring, which is 64-byte aligned.
        let slot = unsafe { self.base.add((ci & self.mask) as usize) };
        // SAFETY: a slot of this ring.
        let op_own = unsafe { load_op_own(slot) };
        let parity = ((ci >> self.log2) & 1) as u8;
        if op_own & 0xfd == super::prm::CQE_TITLE_OP_FMT | parity {
            // SAFETY: as in `poll_rx`.
            return Ok(unsafe { &*slot });
        }
        Err(!written_in_pass(op_own, parity))
    }
}

/// See [`CqReader::session`]: slots `title .. title + n`, all in the ring.
pub(crate) struct Session<'a> {
    title: *const Cqe64,
    n: u32,
    _ring: std::marker::PhantomData<&'a CqRing>,
}

impl<'a> Session<'a> {
    /// Mini-CQE array `j` (slot `mini_array_slot(j)`), a slot before the session's end: its
    /// packets `8j ..`, all 8 positions (past the session's last packet, stale bytes).
    #[inline(always)]
    pub(crate) fn array(&self, j: u32) -> &'a super::prm::MiniArray {
        let at = super::prm::mini_array_slot(j);
        assert!(at < self.n.max(2));
        // The title's acquire published the arrays, and the device does not rewrite them
        // before the consumer index passes them. A session of one packet has its array at
        // title + 1 all the same, hence `max(2)` in the assert and in `session`.
        // SAFETY: the slot (title + 1 or + 8j) is inside the session's slots (asserted), so in
        // the ring (`session`); a MiniArray is 64 bytes of integers, any bit pattern valid.
        unsafe { &*self.title.add(at as usize).cast() }
    }

    /// The mini-CQE arrays of the session's whole groups of eight packets (`n / 8` of them):
    /// the first (at the title + 1), then the others (at + 8j), each with the slots of its
    /// eight packets to invalidate once it is read.
    #[inline(always)]
    pub(crate) fn full_arrays(&self) -> (Option<ZipArray<'a, 1>>, impl Iterator<Item = ZipArray<'a, 0>> + 'a) {
        const M: usize = super::prm::MINI_CQES_PER_SLOT as usize;
        let (title, groups) = (self.title, self.n as usize / M);
        let first = (groups > 0).then_some(ZipArray {
            group: title,
            _ring: std::marker::PhantomData,
        });
        let rest = (1..groups).map(move |j| ZipArray {
            // SAFETY: j < n / 8, so the group's eight slots lie inside the run, hence the ring.
            group: unsafe { title.add(j * M) },
            _ring: std::marker::PhantomData,
        });
        (first, rest)
    }

    /// [`CqReader::invalidate`] for slots `from .. to` of the session (`1 <= from <= to <= n`,
    /// asserted: never the title's, which the device's next write of it replaces), once the
    /// arrays among them are read. One byte store each.
    #[inline(always)]
    pub(crate) fn invalidate_range(&self, from: usize, to: usize) {
        assert!(from >= 1 && from <= to && to <= self.n as usize);
        for i in from..to {
            self.invalidate_slot(i);
        }
    }

    /// [`CqReader::invalidate`] for every slot of the session but the title (which the device's
    /// next write of the slot replaces), as [`CqReader::invalidate_run`], without the wrap test.
    /// Sessions of 8 and 16 (a striding WQE's strides) in straight-line code.
    #[inline(always)]
    pub(crate) fn invalidate(self) {
        match self.n {
            16 => self.invalidate_n::<16>(),
            8 => self.invalidate_n::<8>(),
            n => (1..n as usize).for_each(|i| self.invalidate_slot(i)),
        }
    }

    #[inline(always)]
    fn invalidate_n<const N: usize>(&self) {
        for i in 1..N {
            self.invalidate_slot(i);
        }
    }

    /// Slot `i` < n of the session.
    #[inline(always)]
    fn invalidate_slot(&self, i: usize) {
        debug_assert!(i < self.n as usize);
        // op_own is the slot's last byte, which the device does not write before the consumer
        // index passes the slot.
        // SAFETY: `i` < n (the callers' loops) keeps the slot in the ring (`session`).
        unsafe {
            (*std::ptr::addr_of!((*self.title.add(i)).op_own).cast::<AtomicU8>())
                .store(super::prm::CQE_INVALIDATE, Ordering::Relaxed)
        }
    }
}

/// One whole group of eight packets of a [`Session`]: its mini-CQE array is in the group's slot
/// `FIRST` (1 for the first group, whose slot 0 is the title; 0 for the others).
pub(crate) struct ZipArray<'a, const FIRST: usize> {
    /// The slot of the group's first packet; the seven after it are the group's too.
    group: *const Cqe64,
    _ring: std::marker::PhantomData<&'a CqRing>,
}

impl<'a, const FIRST: usize> ZipArray<'a, FIRST> {
    /// The group's mini-CQEs, in place (as [`Session::array`]).
    #[inline(always)]
    pub(crate) fn minis(&self) -> &'a super::prm::MiniArray {
        // SAFETY: FIRST < 8 keeps the slot inside the group, hence the ring; as in
        // `Session::array`, any bits are a valid MiniArray and the slot is not rewritten yet.
        unsafe { &*self.group.add(FIRST).cast() }
    }

    /// Invalidates the group's slots from `FIRST` on (not the title), once its array is read.
    #[inline(always)]
    pub(crate) fn invalidate(self) {
        for i in FIRST..super::prm::MINI_CQES_PER_SLOT as usize {
            // SAFETY: i < 8 keeps the slot inside the group; op_own is the slot's last byte,
            // which the device does not write before the consumer index passes the slot.
            unsafe {
                (*std::ptr::addr_of!((*self.group.add(i)).op_own).cast::<AtomicU8>())
                    .store(super::prm::CQE_INVALIDATE, Ordering::Relaxed)
            }
        }
    }
}

/// What [`CqReader::poll_req_run`] found: the REQ CQEs of this pass from a consumer index on.
pub(crate) struct ReqRun {
    /// How many consecutive REQ CQEs.
    pub n: u32,
    /// `wqe_counter` of the last of them (0 when `n` is 0).
    pub counter: u32,
    /// `op_own` of the CQE the run stopped at, and the owner parity of its slot's pass.
    stop: u8,
    parity: u8,
}

impl ReqRun {
    /// The run ended at a CQE of this pass that is not a plain REQ (an error CQE, or something
    /// unexpected), rather than at one the device has not written yet.
    #[inline(always)]
    pub(crate) fn other(&self) -> bool {
        written_in_pass(self.stop, self.parity)
    }
}

impl<'a> CqReader<'a> {
    /// Scans the REQ CQEs of this pass from `ci` on, with one load and one compare per CQE (the
    /// test of [`CqReader::poll_rx`] with the REQ opcode): a send queue only needs to know how
    /// many there are and what the last one says (every CQE answers the oldest outstanding
    /// request).
    #[inline(always)]
    pub(crate) fn poll_req_run(&self, ci: u32) -> ReqRun {
        // Byte offsets of slots rather than indices: one shift less per CQE looked at.
        const SLOT: usize = size_of::<Cqe64>();
        let bytes_mask = (self.mask as usize + 1) * SLOT - 1;
        let mut at = (ci & self.mask) as usize * SLOT;
        // A REQ CQE of this pass: opcode 0, format 0, owner bit equal to the pass parity.
        let mut expect = ((ci >> self.log2) & 1) as u8 | (super::prm::CQE_REQ << 4);
        let (mut n, mut last) = (0u32, at);
        let stop = loop {
            // SAFETY: `at` <= bytes_mask - 63 keeps the pointer on a slot of the ring, which is
            // 64-byte aligned.
            let slot = unsafe { self.base.byte_add(at) };
            // SAFETY: a slot of this ring.
            let op_own = unsafe { load_op_own(slot) };
            if op_own & 0xfd != expect {
                break op_own;
            }
            n += 1;
            last = at;
            at = (at + SLOT) & bytes_mask;
            if at == 0 {
                expect ^= 1;
            }
        };
        let counter = if n == 0 {
            0
        } else {
            // SAFETY: the CQE at `last` was seen above as a REQ of this pass (acquire): the
            // device wrote it whole and does not rewrite it before the consumer index passes it.
            u32::from(unsafe { (*self.base.byte_add(last)).wqe_counter.get() })
        };
        ReqRun {
            n,
            counter,
            stop,
            parity: expect & 1,
        }
    }
}

impl<'a> CqReader<'a> {
    /// Slots `ci .. ci + n`, which must not cross the ring end (asserted): inside it the owner
    /// parity is one value, so a receive loop tests each CQE with one load and one compare.
    #[inline(always)]
    pub(crate) fn segment(&self, ci: u32, n: usize) -> CqSegment<'a> {
        let at = (ci & self.mask) as usize;
        assert!(at + n <= self.mask as usize + 1);
        let parity = ((ci >> self.log2) & 1) as u8;
        CqSegment {
            // SAFETY: `at` < ring size, so the pointer stays in the ring.
            base: unsafe { self.base.add(at) },
            len: n,
            expect: (super::prm::CQE_RESP_SEND << 4) | parity,
            _ring: std::marker::PhantomData,
        }
    }
}

/// See [`CqReader::segment`].
pub(crate) struct CqSegment<'a> {
    base: *const Cqe64,
    len: usize,
    expect: u8,
    _ring: std::marker::PhantomData<&'a CqRing>,
}

impl<'a> CqSegment<'a> {
    /// The CQE at position `k` of the segment if it is a plain RESP_SEND of this pass
    /// (`op_own & 0xfd == 0x20 | parity`); None for anything else, including nothing yet.
    #[inline(always)]
    pub(crate) fn packet(&self, k: usize) -> Option<&'a Cqe64> {
        assert!(k < self.len);
        // SAFETY: k < len keeps the slot inside the segment, hence the ring.
        let slot = unsafe { self.base.add(k) };
        // SAFETY: a slot of the segment's ring.
        let op_own = unsafe { load_op_own(slot) };
        // SAFETY: the acquire makes the device's writes of this CQE visible; it does not write
        // the slot again before the driver publishes a consumer index past it.
        (op_own & 0xfd == self.expect).then(|| unsafe { &*slot })
    }
}

/// The driver's view of a cyclic receive WQ with one data segment per WQE.
pub struct RqRing {
    base: *mut DataSeg,
    mask: u32,
    dbrec: DbrecWord,
    _keep: KeepAlive,
}

impl RqRing {
    /// # Safety
    /// As [`SqRing::new`]: the WQ's only driver-side view for the ring's whole life; posted
    /// receive WQEs must point at memory the device may write and that nothing else uses until
    /// the completion says so, and only WQEs the device does not own are rewritten.
    pub unsafe fn new(info: &RwqInfo) -> Result<RqRing, String> {
        check_ring("RQ", info.wqe_cnt, info.stride, 16, info.buf, 16)?;
        if info.dbrec.is_null() {
            return Err("RQ: doorbell record missing".into());
        }
        Ok(RqRing {
            base: info.buf.cast(),
            mask: info.wqe_cnt - 1,
            // SAFETY: `mlx5dv_rwq.dbrec` is one aligned BE32 word kept alive by `keep`.
            dbrec: unsafe { DbrecWord::new(info.dbrec) },
            _keep: info.keep.clone(),
        })
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Receive WQE number `pi` (free-running); the driver writes only WQEs it has not posted.
    #[inline(always)]
    pub fn wqe(&mut self, pi: u32) -> &mut DataSeg {
        // SAFETY: in-ring by the mask, 16-byte stride checked in `new`; unposted WQEs are not
        // read by the device, and `&mut self` makes this the only reference.
        unsafe { &mut *self.base.add((pi & self.mask) as usize) }
    }

    /// A writer for refilling whose ring geometry stays in registers.
    #[inline(always)]
    pub fn writer(&mut self) -> RqWriter<'_> {
        RqWriter {
            base: self.base,
            mask: self.mask,
            _ring: std::marker::PhantomData,
        }
    }

    /// Posts receive WQEs up to `pi` (16-bit WQE counter, rdma-core `mlx5_post_wq_recv`).
    #[inline(always)]
    pub fn ring_doorbell(&self, pi: u32) {
        self.dbrec.store_be(pi & 0xffff);
    }

    /// WQEs posted and not yet consumed by the device. The DV tests read it (feature
    /// `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn posted(&self) -> u32 {
        self.dbrec.load_be()
    }
}

/// Receive WQEs of several data segments (scatter, for frames longer than one buffer).
impl RqRing {
    /// A view of a cyclic WQ whose WQEs hold `stride / 16` data segments (rdma-core: the WQ's
    /// `max_sge` rounded up to a power of two, `mlx5_calc_rwq_size`), as a ring of
    /// `wqe_cnt × stride / 16` segments: segment `j` of WQE `w` is [`RqRing::wqe`]`(w × segs +
    /// j)`, and [`RqRing::ring_doorbell`] still counts WQEs. Returns the view and the segments
    /// per WQE.
    ///
    /// # Safety
    /// As [`RqRing::new`].
    pub unsafe fn new_scatter(info: &RwqInfo) -> Result<(RqRing, u32), String> {
        let stride = info.stride;
        if !stride.is_power_of_two() || !(16..=4096).contains(&stride) {
            return Err(format!("RQ: stride {stride} is not a power of two from 16 to 4096"));
        }
        let segs = stride / 16;
        let view = RwqInfo {
            wqe_cnt: info.wqe_cnt.checked_mul(segs).ok_or("RQ: too many WQEs")?,
            stride: 16,
            keep: info.keep.clone(),
            ..*info
        };
        // SAFETY: the same memory, described as 16-byte entries; the caller's contract holds.
        Ok((unsafe { RqRing::new(&view) }?, segs))
    }
}

/// See [`RqRing::writer`]; it borrows the ring mutably.
pub struct RqWriter<'a> {
    base: *mut DataSeg,
    mask: u32,
    _ring: std::marker::PhantomData<&'a mut RqRing>,
}

impl RqWriter<'_> {
    /// Receive WQEs `pi .. pi + n` (not yet posted), which must not cross the ring end
    /// (asserted); a refill rewrites only their addresses.
    #[inline(always)]
    pub fn segment(&mut self, pi: u32, n: usize) -> &mut [DataSeg] {
        let at = (pi & self.mask) as usize;
        assert!(at + n <= self.mask as usize + 1);
        // SAFETY: in the ring (asserted), 16-byte stride checked in `new`; the device reads no
        // unposted WQE, and the writer borrows the ring mutably: the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at), n) }
    }
}

/// The driver's view of a striding receive WQ (`mlx5dv_create_wq` with
/// `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`): WQEs of a 16-byte next segment and `sges` data
/// segments, `mprq::wqe_size(sges)` bytes apart (rdma-core `mlx5_calc_rwq_size`). The doorbell
/// record counts WQEs.
pub struct StridingRqRing {
    base: *mut u8,
    mask: u32,
    stride: usize,
    sges: usize,
    dbrec: DbrecWord,
    _keep: KeepAlive,
}

impl StridingRqRing {
    /// # Safety
    /// As [`RqRing::new`], for a WQ created striding with WQEs of `sges` data segments.
    pub unsafe fn new(info: &RwqInfo, sges: u32) -> Result<StridingRqRing, String> {
        let want = super::prm::mprq::wqe_size(sges);
        check_ring("striding RQ", info.wqe_cnt, info.stride, want, info.buf, 16)?;
        if info.dbrec.is_null() {
            return Err("striding RQ: doorbell record missing".into());
        }
        Ok(StridingRqRing {
            base: info.buf,
            mask: info.wqe_cnt - 1,
            stride: want as usize,
            sges: sges as usize,
            // SAFETY: `mlx5dv_rwq.dbrec` is one aligned BE32 word kept alive by `keep`.
            dbrec: unsafe { DbrecWord::new(info.dbrec) },
            _keep: info.keep.clone(),
        })
    }

    /// WQEs in the ring.
    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The next segment of WQE `pi` (free-running), not posted yet.
    #[inline(always)]
    pub fn next_seg(&mut self, pi: u32) -> &mut super::prm::mprq::NextSeg {
        // A WQE's start is 16-byte aligned: the ring is, and WQEs are a power of two of at least
        // 32 bytes apart.
        // SAFETY: in the ring by the mask, aligned (above); unposted WQEs are not read by the
        // device, and `&mut self` makes this the only reference.
        unsafe { &mut *self.base.add((pi & self.mask) as usize * self.stride).cast() }
    }

    /// The data segments of WQE `pi` (free-running), not posted yet.
    #[inline(always)]
    pub fn segs(&mut self, pi: u32) -> &mut [DataSeg] {
        // SAFETY: as `next_seg`; the segments follow the 16-byte next segment inside the WQE
        // (`check_ring` made sure of its size).
        unsafe {
            let at = self.base.add((pi & self.mask) as usize * self.stride + 16);
            std::slice::from_raw_parts_mut(at.cast(), self.sges)
        }
    }

    /// Ends WQE `pi`'s scatter list after its `sges` segments with the invalid-lkey entry, where
    /// the WQE has room for more (rdma-core `mlx5_post_wq_recv` does so when a WQE holds fewer
    /// segments than its `max_gs`; the rest of the WQE is padding the device would read).
    pub fn terminate(&mut self, pi: u32) {
        if 16 + (self.sges + 1) * 16 <= self.stride {
            // SAFETY: as `segs`, one segment further, inside the WQE (checked just above).
            unsafe {
                let at = self
                    .base
                    .add((pi & self.mask) as usize * self.stride + 16 + self.sges * 16);
                *at.cast::<DataSeg>() = DataSeg::TERMINATOR;
            }
        }
    }

    /// Posts WQEs up to `pi` (16-bit WQE counter).
    #[inline(always)]
    pub fn ring_doorbell(&self, pi: u32) {
        self.dbrec.store_be(pi & 0xffff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dv::golden;
    use crate::dv::prm::{Be32, CtrlSeg, SendWqe};
    use crate::mem::region::Region;

    /// A region standing in for device memory: ring at 0, records at 4096, UAR page at 8192.
    fn mem() -> Arc<Region> {
        Arc::new(Region::small_pages(3 * 4096).unwrap())
    }

    fn word_bytes(p: *const u8, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        for (i, b) in v.iter_mut().enumerate() {
            // SAFETY: test memory from `mem()`, valid for n bytes at the offsets used below; the
            // volatile reads see what the views stored, as the device's DMA would.
            *b = unsafe { p.add(i).read_volatile() };
        }
        v
    }

    #[test]
    fn doorbells_write_what_rdma_core_writes() {
        let m = mem();
        let base = m.base();
        let keep: KeepAlive = m.clone();
        let dbrec = base.wrapping_add(4096).cast::<u32>();
        let info = SqInfo {
            buf: base,
            wqe_cnt: 64,
            stride: 64,
            dbrec,
            bf_reg: base.wrapping_add(8192 + 0x800),
            bf_size: 0,
            qpn: 0x1234,
            keep: keep.clone(),
        };
        // SAFETY: test memory that no device reads; the test posts only its own bytes.
        let mut sq = unsafe { SqRing::new(&info) }.unwrap();
        let hdr: [u8; 18] = golden::bytes("frame_ipv4_udp_60")[..18].try_into().unwrap();
        *sq.wqe(5) = SendWqe::l2_inline(
            5,
            CtrlSeg::qpn_ds(0x1234, 4),
            true,
            0,
            0,
            hdr,
            60,
            Be32::new(0xdead_beef),
            0x7f12_3456_7800,
        );
        sq.ring_doorbell(6, 5);
        assert_eq!(word_bytes(dbrec.cast(), 8), golden::bytes("i4_dbrec_qp_after_d1"));
        assert_eq!(word_bytes(info.bf_reg, 8), golden::bytes("i5_uar_doorbell_d1"));
        assert_eq!(
            word_bytes(base.wrapping_add(5 * 64), 64),
            golden::bytes("d1_wqe_send_1bb")
        );

        // i1: the same QP record with an RQ counter in [MLX5_RCV_DBR].
        let rwq = RwqInfo {
            buf: base,
            dbrec,
            wqe_cnt: 64,
            stride: 16,
            keep: keep.clone(),
        };
        // SAFETY: as above.
        let rq = unsafe { RqRing::new(&rwq) }.unwrap();
        rq.ring_doorbell(0x42);
        sq.ring_doorbell(0x1234, 5);
        assert_eq!(word_bytes(dbrec.cast(), 8), golden::bytes("i1_dbrec_qp_rq0042_sq1234"));
        assert_eq!(word_bytes(dbrec.cast(), 4), golden::bytes("i3_dbrec_rwq_0042"));

        let cq_rec = base.wrapping_add(4096 + 64).cast::<u32>();
        // SAFETY: as above.
        let cq = unsafe {
            CqRing::new(&CqInfo {
                buf: base,
                dbrec: cq_rec,
                cqe_cnt: 64,
                cqe_size: 64,
                cqn: 1,
                keep,
                comp: None,
            })
        }
        .unwrap();
        cq.publish_ci(0xabcdef);
        assert_eq!(word_bytes(cq_rec.cast(), 8), golden::bytes("i2_dbrec_cq_ci00abcdef"));
        // 24 bits only: a free-running index past 2^24 publishes its low bits.
        cq.publish_ci(0x01ab_cdef);
        assert_eq!(word_bytes(cq_rec.cast(), 8), golden::bytes("i2_dbrec_cq_ci00abcdef"));
    }

    #[test]
    fn rings_refuse_what_the_datapath_cannot_drive() {
        let m = mem();
        let keep: KeepAlive = m.clone();
        let info = |cnt, stride| CqInfo {
            buf: m.base(),
            dbrec: m.base().cast(),
            cqe_cnt: cnt,
            cqe_size: stride,
            cqn: 1,
            keep: keep.clone(),
            comp: None,
        };
        // SAFETY: the rings are only checked, never used.
        unsafe {
            assert!(CqRing::new(&info(100, 64)).is_err());
            assert!(CqRing::new(&info(64, 128)).err().unwrap().contains("stride 128"));
            assert!(CqRing::new(&info(64, 64)).is_ok());
        }
    }
}
