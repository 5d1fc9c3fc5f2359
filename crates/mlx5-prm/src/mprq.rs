//! The striding (multi-packet) receive queue: one WQE is a buffer cut into `2^log_num_strides`
//! strides of `2^log_stride_bytes`, and the device places many frames in it, each from the stride
//! where the previous one ended. Sources: rdma-core `mlx5dv.h` (`mlx5_wqe_srq_next_seg`,
//! `mlx5_mprq_wqe`, `mlx5dv_striding_rq_caps`, `mlx5dv_striding_rq_init_attr`), DPDK
//! `drivers/common/mlx5/mlx5_prm.h` (`mlx5_wqe_mprq`, `MLX5_MPRQ_*`: the byte count of a striding
//! completion), Linux `drivers/infiniband/hw/mlx5/mlx5_ib.h` (the stride limits the kernel
//! reports in `mlx5_ib_query_device`).

use crate::{Be16, Be32, DataSeg, DS_BYTES};

/// `struct mlx5_wqe_srq_next_seg` (16 bytes): the first octoword of a striding receive WQE
/// (rdma-core `mlx5_calc_rwq_size` adds it for `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`). A
/// cyclic striding RQ ignores `next_wqe_index`; VPP fills it with the next WQE's index anyway.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NextSeg {
    pub rsvd0: [u8; 2],
    pub next_wqe_index: Be16,
    pub signature: u8,
    pub rsvd1: [u8; 11],
}

/// `struct mlx5_mprq_wqe` (DPDK `mlx5_wqe_mprq`): the next segment and one data segment
/// covering the whole strided buffer, the form DPDK posts. A WQE with more data segments
/// (VPP: one per stride) has them back to back after `nseg`; the device concatenates them
/// and cuts the result into strides.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Wqe {
    pub nseg: NextSeg,
    pub dseg: DataSeg,
}

impl Wqe {
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..2].copy_from_slice(&self.nseg.rsvd0);
        b[2..4].copy_from_slice(&self.nseg.next_wqe_index.get().to_be_bytes());
        b[4] = self.nseg.signature;
        b[5..16].copy_from_slice(&self.nseg.rsvd1);
        b[16..].copy_from_slice(&self.dseg.to_bytes());
        b
    }
}

/// Bytes of a striding WQE of `max_sge` data segments in the ring: the next segment and the
/// data segments, rounded up to a power of two (rdma-core `mlx5_calc_rwq_size`,
/// `wqe_size = roundup_pow_of_two(16 * max_sge + 16 * is_mprq)`).
pub const fn wqe_size(max_sge: u32) -> u32 {
    let sge = if max_sge == 0 { 1 } else { max_sge };
    (DS_BYTES as u32 * (sge + 1)).next_power_of_two()
}

/// The byte count of a striding completion (`mlx5_cqe64.byte_cnt`): bits 15:0 the frame's
/// length (`MLX5_MPRQ_LEN_MASK`), bits 29:16 the strides it consumed
/// (`MLX5_MPRQ_STRIDE_NUM_MASK`), bit 31 a filler (`MLX5_MPRQ_FILLER_MASK`): no frame, the
/// strides left in the WQE, which is then done.
pub const LEN_MASK: u32 = 0x0000_ffff;
pub const STRIDE_NUM_MASK: u32 = 0x3fff_0000;
pub const STRIDE_NUM_SHIFT: u32 = 16;
pub const FILLER: u32 = 0x8000_0000;
/// With `two_byte_shift_en` the device starts every frame 2 bytes into its stride, so that
/// the IP header after a 14-byte Ethernet header is 4-byte aligned (DPDK
/// `MLX5_MPRQ_STRIDE_SHIFT_BYTE`); the frame's strides count those 2 bytes.
pub const TWO_BYTE_SHIFT: u32 = 2;

/// The byte count of a frame of `len` bytes in `strides` strides, or of a filler.
pub const fn byte_cnt(len: u32, strides: u32, filler: bool) -> Be32 {
    let f = if filler { FILLER } else { 0 };
    Be32::new(f | (strides << STRIDE_NUM_SHIFT) & STRIDE_NUM_MASK | len & LEN_MASK)
}
/// The frame length of a striding byte count (host order).
#[inline(always)]
pub const fn len(byte_cnt: u32) -> u32 {
    byte_cnt & LEN_MASK
}
/// The strides a striding byte count (host order) consumed.
#[inline(always)]
pub const fn strides(byte_cnt: u32) -> u32 {
    (byte_cnt & STRIDE_NUM_MASK) >> STRIDE_NUM_SHIFT
}
#[inline(always)]
pub const fn is_filler(byte_cnt: u32) -> bool {
    byte_cnt & FILLER != 0
}

/// `mlx5dv_query_device`'s `struct mlx5dv_striding_rq_caps` (given with
/// `MLX5DV_CONTEXT_MASK_STRIDING_RQ`): the stride sizes and counts the device takes. A device
/// without striding RQs reports all zero (mlx5_ib fills it only under
/// `MLX5_CAP_GEN(mdev, striding_rq)`), so `supported_qpts` is what says yes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    pub min_log_stride_bytes: u32,
    pub max_log_stride_bytes: u32,
    pub min_log_num_strides: u32,
    pub max_log_num_strides: u32,
    /// Bit `IBV_QPT_RAW_PACKET` (8) set where raw-packet WQs may stride.
    pub supported_qpts: u32,
}

/// `IBV_QPT_RAW_PACKET` (verbs.h), the bit of [`Caps::supported_qpts`].
pub const QPT_RAW_PACKET: u32 = 8;

impl Caps {
    /// What mlx5_ib reports for a ConnectX-5 (`mlx5_ib_query_device`): strides of 2^6 to
    /// 2^13 bytes (`MLX5_MIN/MAX_SINGLE_STRIDE_LOG_NUM_BYTES`), 2^3 to 2^16 per WQE
    /// (`MLX5_EXT_MIN_SINGLE_WQE_LOG_NUM_STRIDES` under `ext_stride_num_range`, which VPP's
    /// 8-stride WQEs rely on; `MLX5_MAX_SINGLE_WQE_LOG_NUM_STRIDES`), raw-packet WQs only.
    pub const CONNECTX5: Caps = Caps {
        min_log_stride_bytes: 6,
        max_log_stride_bytes: 13,
        min_log_num_strides: 3,
        max_log_num_strides: 16,
        supported_qpts: 1 << QPT_RAW_PACKET,
    };
    /// A device without striding RQs (ConnectX-4 and 4 Lx: DPDK `doc/guides/nics/mlx5.rst`
    /// lists the Multi-Packet RQ for ConnectX-5 and later).
    pub const NONE: Caps = Caps {
        min_log_stride_bytes: 0,
        max_log_stride_bytes: 0,
        min_log_num_strides: 0,
        max_log_num_strides: 0,
        supported_qpts: 0,
    };

    pub const fn supported(&self) -> bool {
        self.supported_qpts & 1 << QPT_RAW_PACKET != 0
    }

    /// Whether a raw-packet WQ of `p` is within these caps, or why not (the checks of
    /// rdma-core `mlx5_create_wq` against `striding_rq_caps`, EINVAL there).
    pub fn check(&self, p: &Params) -> Result<(), String> {
        if !self.supported() {
            return Err("the device has no striding RQ (MLX5DV_CONTEXT_MASK_STRIDING_RQ caps \
                        name no raw-packet support)"
                .into());
        }
        let (s, n) = (u32::from(p.log_stride_bytes), u32::from(p.log_num_strides));
        if !(self.min_log_stride_bytes..=self.max_log_stride_bytes).contains(&s) {
            return Err(format!(
                "stride of 2^{s} bytes: the device takes 2^{} to 2^{}",
                self.min_log_stride_bytes, self.max_log_stride_bytes
            ));
        }
        if !(self.min_log_num_strides..=self.max_log_num_strides).contains(&n) {
            return Err(format!(
                "2^{n} strides per WQE: the device takes 2^{} to 2^{}",
                self.min_log_num_strides, self.max_log_num_strides
            ));
        }
        Ok(())
    }
}

/// `struct mlx5dv_striding_rq_init_attr`: how a striding WQ is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub log_stride_bytes: u8,
    pub log_num_strides: u8,
    pub two_byte_shift: bool,
}

impl Params {
    pub const fn stride_bytes(&self) -> u32 {
        1 << self.log_stride_bytes
    }
    pub const fn num_strides(&self) -> u32 {
        1 << self.log_num_strides
    }
    /// Strides a frame of `len` bytes takes (its 2-byte shift counted): ceil(len / stride).
    pub const fn strides_for(&self, len: u32) -> u32 {
        let len = len + if self.two_byte_shift { TWO_BYTE_SHIFT } else { 0 };
        (len + self.stride_bytes() - 1) >> self.log_stride_bytes
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NextSeg>() == 16 && offset_of!(NextSeg, next_wqe_index) == 2);
    assert!(offset_of!(NextSeg, signature) == 4);
    assert!(size_of::<Wqe>() == 32 && offset_of!(Wqe, dseg) == 16);
};

#[cfg(test)]
mod tests {
    use super::{Caps, NextSeg, Params, Wqe};
    use crate::mprq;
    use crate::vectors as golden;
    use crate::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn striding_formats_match_rdma_core() {
        assert_eq!(
            golden::layout("mlx5_wqe_srq_next_seg"),
            (size_of::<NextSeg>(), align_of::<NextSeg>())
        );
        assert_eq!(
            golden::field("mlx5_wqe_srq_next_seg", "next_wqe_index"),
            (offset_of!(NextSeg, next_wqe_index), 2)
        );
        assert_eq!(
            golden::field("mlx5_wqe_srq_next_seg", "signature").0,
            offset_of!(NextSeg, signature)
        );
        assert_eq!(golden::layout("mlx5_mprq_wqe").0, size_of::<Wqe>());
        assert_eq!(golden::field("mlx5_mprq_wqe", "dseg").0, offset_of!(Wqe, dseg));
        let w = Wqe {
            nseg: NextSeg {
                next_wqe_index: Be16::new(6),
                ..NextSeg::default()
            },
            dseg: DataSeg::new(16384, 0x1000, 0x1000_0000),
        };
        assert_eq!(w.to_bytes().to_vec(), golden::bytes("fs1_mprq_wqe"));
        // rdma-core's WQE sizes: a next segment and one data segment are 32 bytes; 8 are 256.
        assert_eq!((mprq::wqe_size(1), mprq::wqe_size(0), mprq::wqe_size(8)), (32, 32, 256));
        assert_eq!(mprq::wqe_size(7), 128);
    }

    #[test]
    fn striding_completions_encode_and_decode_like_dpdk() {
        for (name, value) in [
            ("MLX5_MPRQ_LEN_MASK", mprq::LEN_MASK),
            ("MLX5_MPRQ_STRIDE_NUM_MASK", mprq::STRIDE_NUM_MASK),
            ("MLX5_MPRQ_STRIDE_NUM_SHIFT", mprq::STRIDE_NUM_SHIFT),
            ("MLX5_MPRQ_FILLER_MASK", mprq::FILLER),
            ("MLX5_MPRQ_STRIDE_SHIFT_BYTE", mprq::TWO_BYTE_SHIFT),
            ("IBV_QPT_RAW_PACKET", mprq::QPT_RAW_PACKET),
        ] {
            assert_eq!(golden::constant(name), u64::from(value), "{name}");
        }
        assert_eq!(golden::constant("MLX5DV_CONTEXT_MASK_STRIDING_RQ"), 4);
        assert_eq!(golden::constant("MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ"), 1);
        let mut c = Cqe64::resp_send(7, 0, 0, 0, 0, 0);
        c.wqe_id = Be16::new(3);
        c.byte_cnt = mprq::byte_cnt(1500, 2, false);
        assert_eq!(c.as_bytes().to_vec(), golden::bytes("fs2_cqe_mprq_1500_2strides"));
        c.wqe_counter = Be16::new(9);
        c.byte_cnt = mprq::byte_cnt(0, 7, true);
        c.op_own |= 1;
        assert_eq!(c.as_bytes().to_vec(), golden::bytes("fs3_cqe_mprq_filler_7"));
        let f = Cqe64::from_bytes(&golden::bytes("fs3_cqe_mprq_filler_7").try_into().unwrap());
        let b = f.byte_cnt.get();
        assert!(mprq::is_filler(b));
        assert_eq!(
            (mprq::strides(b), mprq::len(b), f.wqe_id.get(), f.wqe_counter.get()),
            (7, 0, 3, 9)
        );
        let g = Cqe64::from_bytes(&golden::bytes("fs2_cqe_mprq_1500_2strides").try_into().unwrap());
        let b = g.byte_cnt.get();
        assert!(!mprq::is_filler(b));
        assert_eq!((mprq::strides(b), mprq::len(b)), (2, 1500));
        // The largest stride count the field holds, and nothing leaks into the filler bit.
        assert_eq!(mprq::byte_cnt(0, 0x3fff, false).get(), 0x3fff_0000);
        assert_eq!(mprq::byte_cnt(0, 0x4000, false).get(), 0);
    }

    #[test]
    fn striding_params_and_caps() {
        let p = Params {
            log_stride_bytes: 11,
            log_num_strides: 3,
            two_byte_shift: false,
        };
        assert_eq!((p.stride_bytes(), p.num_strides()), (2048, 8));
        assert_eq!((p.strides_for(60), p.strides_for(2048), p.strides_for(2049)), (1, 1, 2));
        let shifted = Params {
            two_byte_shift: true,
            ..p
        };
        assert_eq!(shifted.strides_for(2046), 1);
        assert_eq!(shifted.strides_for(2047), 2);
        assert_eq!(Caps::CONNECTX5.check(&p), Ok(()));
        assert!(Caps::NONE.check(&p).unwrap_err().contains("no striding RQ"));
        let too_small = Params {
            log_stride_bytes: 5,
            ..p
        };
        assert!(Caps::CONNECTX5.check(&too_small).unwrap_err().contains("2^6 to 2^13"));
        let too_many = Params {
            log_num_strides: 17,
            ..p
        };
        assert!(Caps::CONNECTX5.check(&too_many).unwrap_err().contains("2^3 to 2^16"));
    }
}
