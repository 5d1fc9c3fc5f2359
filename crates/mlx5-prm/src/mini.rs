//! CQE compression: a session's title CQE and its arrays of eight mini-CQEs.

use crate::*;

// ---- CQE compression (basic layout; /work/shared/reference/mlx5-dv.md §3.11-3.12) ----

/// `op_own[3:2]` of a compressed session's title CQE (DPDK mlx5_prm.h `MLX5_COMPRESSED`; rdma-core
/// `mlx5dv_get_cqe_format` returns it). Formats 1 and 2 are scatter-to-CQE.
pub const CQE_FORMAT_COMPRESSED: u8 = 3;
/// `op_own & 0xfc` of a title: RESP_SEND with format 3 (VPP `rdma/input.c` accepts 0x20 and 0x2c).
pub const CQE_TITLE_OP_FMT: u8 = CQE_RESP_SEND << 4 | CQE_FORMAT_COMPRESSED << 2;
/// `op_own` a driver writes into the slots of a session it consumed, so that their stale bytes
/// never pass the owner test on a later pass (DPDK `MLX5_CQE_INVALIDATE`, `rxq_cq_decompress_v`
/// and `mlx5_rx_poll_len`): opcode INVALID, owner 0.
pub const CQE_INVALIDATE: u8 = CQE_INVALID << 4;
/// Mini-CQEs in one 64-byte slot of a session (8 bytes each; reference §3.11).
pub const MINI_CQES_PER_SLOT: u32 = 8;

/// Mini-CQE formats as the PRM's `mini_cqe_res_format` codes them (DPDK mlx5_prm.h
/// `MLX5_CQE_RESP_FORMAT_*`, Linux `MLX5_CQE_FORMAT_*`). The rdma-core API asks with other
/// values, one flag each ([`MiniFormat::dv_flag`], `enum mlx5dv_cqe_comp_res_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MiniFormat {
    /// `rx_hash_result` BE32 @0, `byte_cnt` BE32 @4: the format for a cyclic RQ.
    Hash = 0,
    /// `checksum` BE16 @0, `byte_cnt` BE32 @4.
    Csum = 1,
    /// `checksum` BE16 @0, `stride_idx` BE16 @2, `byte_cnt` BE32 @4 (MPRQ byte-count encoding):
    /// the format for a striding RQ (VPP 28aa9128ebd, DPDK `mlx5_devx.c`).
    CsumStridx = 3,
}

/// `MLX5DV_CQE_RES_FORMAT_HASH` (rdma-core mlx5dv.h).
pub const DV_CQE_RES_FORMAT_HASH: u8 = 1 << 0;
/// `MLX5DV_CQE_RES_FORMAT_CSUM`.
pub const DV_CQE_RES_FORMAT_CSUM: u8 = 1 << 1;
/// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`.
pub const DV_CQE_RES_FORMAT_CSUM_STRIDX: u8 = 1 << 2;
/// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`.
pub const DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
/// `MLX5DV_CONTEXT_MASK_CQE_COMPRESION` (sic, rdma-core's spelling).
pub const DV_CONTEXT_MASK_CQE_COMPRESSION: u64 = 1 << 0;

impl MiniFormat {
    /// The `cqe_comp_res_format` flag rdma-core's `mlx5dv_create_cq` takes for this format.
    pub const fn dv_flag(self) -> u8 {
        match self {
            MiniFormat::Hash => DV_CQE_RES_FORMAT_HASH,
            MiniFormat::Csum => DV_CQE_RES_FORMAT_CSUM,
            MiniFormat::CsumStridx => DV_CQE_RES_FORMAT_CSUM_STRIDX,
        }
    }
    /// The format one `cqe_comp_res_format` flag asks for (exactly one bit set), else None.
    pub const fn from_dv_flag(flag: u8) -> Option<MiniFormat> {
        match flag {
            DV_CQE_RES_FORMAT_HASH => Some(MiniFormat::Hash),
            DV_CQE_RES_FORMAT_CSUM => Some(MiniFormat::Csum),
            DV_CQE_RES_FORMAT_CSUM_STRIDX => Some(MiniFormat::CsumStridx),
            _ => None,
        }
    }
}

/// An 8-byte mini-CQE (Linux `struct mlx5_mini_cqe8`, DPDK `struct mlx5_mini_cqe8`; rdma-core 44's
/// public header has none). The first word is the RSS hash in the hash format, or the checksum
/// (high half) and stride index (low half) in the checksum formats.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MiniCqe {
    pub w0: Be32,
    /// Bytes of the packet (in the MPRQ encoding on a striding RQ: strides `[29:16]`, bytes `[15:0]`).
    pub byte_cnt: Be32,
}

impl MiniCqe {
    pub const fn hash(rx_hash: u32, byte_cnt: u32) -> MiniCqe {
        MiniCqe {
            w0: Be32::new(rx_hash),
            byte_cnt: Be32::new(byte_cnt),
        }
    }
    pub const fn csum(checksum: u16, stride_idx: u16, byte_cnt: u32) -> MiniCqe {
        MiniCqe {
            w0: Be32::new((checksum as u32) << 16 | stride_idx as u32),
            byte_cnt: Be32::new(byte_cnt),
        }
    }
    /// Hash format: `rx_hash_result`.
    #[inline(always)]
    pub fn rx_hash(&self) -> u32 {
        self.w0.get()
    }
    /// Checksum formats: `checksum`.
    pub fn checksum(&self) -> u16 {
        (self.w0.get() >> 16) as u16
    }
    /// Checksum/stride-index format: `stride_idx`.
    pub fn stride_idx(&self) -> u16 {
        self.w0.get() as u16
    }
    /// Hash format: `rx_hash_result << 32 | byte_cnt`, the mini-CQE's 8 bytes read as one
    /// big-endian word (one `movbe` where the CPU has it, instead of two loads).
    #[inline(always)]
    pub fn hash_len(&self) -> u64 {
        let raw = (u64::from(self.byte_cnt.get().to_be()) << 32) | u64::from(self.w0.get().to_be());
        if cfg!(target_endian = "little") {
            raw.swap_bytes()
        } else {
            raw.rotate_left(32)
        }
    }
}

/// One 64-byte slot of mini-CQEs. Its last byte is the low byte of mini #7's `byte_cnt`, not an
/// `op_own` (reference §3.11).
pub type MiniArray = [MiniCqe; MINI_CQES_PER_SLOT as usize];

/// Offset from the title of the slot holding mini-CQE array `j`: 1 for the first, then 8, 16, ...
/// (DPDK `mlx5_rx_poll_len`: `zip->ca = ci + 1`, then `ci + 8 * j`; VPP `process_mini_cqes`).
#[inline(always)]
pub const fn mini_array_slot(j: u32) -> u32 {
    if j == 0 {
        1
    } else {
        j * MINI_CQES_PER_SLOT
    }
}

impl Cqe64 {
    /// Whether `op_own` marks this CQE as the title of a compressed session (any owner).
    #[inline(always)]
    pub fn is_title(&self) -> bool {
        self.op_own & 0xfc == CQE_TITLE_OP_FMT
    }
    /// A title: the number of mini-CQEs (packets) of the session, where `byte_cnt` is otherwise.
    pub fn mini_cqe_count(&self) -> u32 {
        self.byte_cnt.get()
    }
    /// Turns a plain RESP_SEND CQE into the title of a session of `n` packets.
    pub fn make_title(&mut self, n: u32) {
        self.byte_cnt = Be32::new(n);
        self.op_own = (self.op_own & 0x03) | CQE_TITLE_OP_FMT;
    }
}

/// Bytes of a mini-CQE array slot.
pub fn mini_array_bytes(a: &MiniArray) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (i, m) in a.iter().enumerate() {
        out[i * 8..i * 8 + 4].copy_from_slice(&m.w0.get().to_be_bytes());
        out[i * 8 + 4..i * 8 + 8].copy_from_slice(&m.byte_cnt.get().to_be_bytes());
    }
    out
}

/// The mini-CQE array of a 64-byte slot.
pub fn mini_array_from(b: &[u8; 64]) -> MiniArray {
    let mut a = [MiniCqe::default(); MINI_CQES_PER_SLOT as usize];
    for (i, m) in a.iter_mut().enumerate() {
        let w = |o: usize| u32::from_be_bytes(b[i * 8 + o..i * 8 + o + 4].try_into().expect("4 bytes"));
        *m = MiniCqe {
            w0: Be32::new(w(0)),
            byte_cnt: Be32::new(w(4)),
        };
    }
    a
}

const _: () = {
    assert!(std::mem::size_of::<MiniCqe>() == 8);
    assert!(std::mem::size_of::<MiniArray>() == 64);
};
