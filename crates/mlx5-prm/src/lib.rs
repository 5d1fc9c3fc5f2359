//! mlx5 PRM formats used by raw-Ethernet queues: one definition of each segment, shared by the
//! DV datapath (which writes WQEs and reads CQEs) and the device model (which does the opposite).
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`mlx5_wqe_ctrl_seg`, `mlx5_wqe_eth_seg`,
//! `mlx5_wqe_data_seg`, `mlx5_cqe64`, `mlx5_err_cqe`), rdma-core `providers/mlx5/wqe.h`
//! (`MLX5_ETH_L2_INLINE_HEADER_SIZE`), DPDK `drivers/common/mlx5/mlx5_prm.h` (`mlx5_cqe`,
//! CQE flag bits), Linux `include/linux/mlx5/device.h` (l4 header types).
//! Every multi-byte field the NIC reads or writes is big-endian; the `Be*` wrappers keep the
//! byte order in the type so that no field can be stored in host order by accident (a model that
//! accepted host-order flags would agree with a buggy driver and disagree with the hardware).
//! Layouts are asserted at compile time and checked against rdma-core's `LAYOUT`/`FIELD` lines in
//! the golden vectors (`vectors`, feature `vectors`; generated with rdma-core's own helpers).
#![allow(unsafe_code)] // byte views of these DMA formats

/// A big-endian 16-bit field as it lies in NIC memory.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Be16(u16);
/// A big-endian 32-bit field as it lies in NIC memory.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Be32(u32);
/// A big-endian 64-bit field as it lies in NIC memory.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Be64(u64);

macro_rules! be_impl {
    ($t:ident, $n:ty) => {
        impl $t {
            #[inline(always)]
            pub const fn new(v: $n) -> Self {
                $t(v.to_be())
            }
            #[inline(always)]
            pub const fn get(self) -> $n {
                <$n>::from_be(self.0)
            }
            /// The field from its bits as they lie in memory (already big-endian).
            #[inline(always)]
            pub const fn from_bits(bits: $n) -> Self {
                $t(bits)
            }
        }
    };
}
be_impl!(Be16, u16);
be_impl!(Be32, u32);
be_impl!(Be64, u64);

// ---- constants (rdma-core mlx5dv.h unless noted) ----

pub const SEND_WQE_BB: usize = 64;
/// Octoword: the unit of `ds`.
pub const DS_BYTES: usize = 16;
/// `ds` is a 6-bit field; DPDK caps a WQE at 60 DS (`MLX5_WQE_SIZE_MAX` 960 bytes) and so do we.
pub const MAX_WQE_DS: u32 = 60;
/// Data segments a receive WQE may scatter a frame over, as the driver uses them: 16 (a
/// 256-byte WQE; rdma-core reports a ConnectX-5's `max_sge` as 30, the model takes 32).
pub const MAX_RQ_SCATTER: u32 = 16;
pub const RCV_DBR: usize = 0;
pub const SND_DBR: usize = 1;
/// rdma-core `mlx5.h` (not in the public header).
pub const CQ_SET_CI: usize = 0;
/// rdma-core `mlx5.h`: doorbell/BlueFlame registers start here in a 4 KiB UAR page.
pub const BF_OFFSET: usize = 0x800;
/// rdma-core `wqe.h`: dst MAC + src MAC + ethertype + one VLAN tag.
pub const ETH_L2_INLINE_HEADER_SIZE: usize = 18;
/// rdma-core's name for the shortest frame a send WQE may carry: an Ethernet header.
pub const ETH_L2_MIN_HEADER_SIZE: usize = 14;
/// Inline bytes start at this offset of the Ethernet segment (after `inline_hdr_sz`).
pub const ESEG_INLINE_OFFSET: usize = 14;

mod cqe;
pub mod devx;
mod inline;
mod mini;
pub mod mprq;
mod wqe;

pub use cqe::*;
pub use inline::*;
pub use mini::*;
pub use wqe::*;

/// rdma-core's vectors of these formats and layouts, for tests (feature `vectors`).
#[cfg(any(test, feature = "vectors"))]
pub mod vectors;

#[cfg(test)]
mod tests;

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<CtrlSeg>() == 16 && align_of::<CtrlSeg>() == 4);
    assert!(offset_of!(CtrlSeg, signature) == 8);
    assert!(offset_of!(CtrlSeg, dci_stream_channel_id) == 9);
    assert!(offset_of!(CtrlSeg, fm_ce_se) == 11);
    assert!(offset_of!(CtrlSeg, imm) == 12);
    assert!(size_of::<EthSeg>() == 32 && align_of::<EthSeg>() == 4);
    assert!(offset_of!(EthSeg, cs_flags) == 4);
    assert!(offset_of!(EthSeg, mss) == 6);
    assert!(offset_of!(EthSeg, inline_hdr_sz) == 12);
    assert!(offset_of!(EthSeg, inline_hdr) == ESEG_INLINE_OFFSET);
    assert!(size_of::<DataSeg>() == 16 && align_of::<DataSeg>() == 8);
    assert!(size_of::<SendWqe>() == SEND_WQE_BB);
    assert!(offset_of!(SendWqe, eth) == 16 && offset_of!(SendWqe, data) == 48);
    assert!(size_of::<Cqe64>() == 64 && align_of::<Cqe64>() == 8);
    assert!(offset_of!(Cqe64, wqe_id) == 0x02);
    assert!(offset_of!(Cqe64, rx_hash_res) == 0x0c);
    assert!(offset_of!(Cqe64, rx_hash_type) == 0x10);
    assert!(offset_of!(Cqe64, ml_path) == 0x11);
    assert!(offset_of!(Cqe64, csum) == 0x14);
    assert!(offset_of!(Cqe64, slid) == 0x16);
    assert!(offset_of!(Cqe64, flags_rqpn) == 0x18);
    assert!(offset_of!(Cqe64, hdr_type_etc) == 0x1c);
    assert!(offset_of!(Cqe64, vlan_info) == 0x1e);
    assert!(offset_of!(Cqe64, srqn_uidx) == 0x20);
    assert!(offset_of!(Cqe64, imm_inval_pkey) == 0x24);
    assert!(offset_of!(Cqe64, byte_cnt) == 0x2c);
    assert!(offset_of!(Cqe64, timestamp) == 0x30);
    assert!(offset_of!(Cqe64, sop_drop_qpn) == 0x38);
    assert!(offset_of!(Cqe64, wqe_counter) == 0x3c);
    assert!(offset_of!(Cqe64, op_own) == 0x3f);
    assert!(size_of::<ErrCqe>() == 64 && align_of::<ErrCqe>() == 4);
    assert!(offset_of!(ErrCqe, srqn) == 32);
    assert!(offset_of!(ErrCqe, vendor_err_synd) == 54);
    assert!(offset_of!(ErrCqe, syndrome) == 55);
    assert!(offset_of!(ErrCqe, s_wqe_opcode_qpn) == 56);
    assert!(offset_of!(ErrCqe, wqe_counter) == 60);
    assert!(offset_of!(ErrCqe, op_own) == 63);
};
