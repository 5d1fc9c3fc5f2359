//! Completion queue entries: opcodes, syndromes and flags, the 64-byte CQE and the error CQE, and
//! the CQ's owner bit and size.

use crate::*;

pub const CQE_OWNER_MASK: u8 = 0x01;
pub const CQE_REQ: u8 = 0x0;
pub const CQE_RESP_SEND: u8 = 0x2;
pub const CQE_REQ_ERR: u8 = 0xd;
pub const CQE_RESP_ERR: u8 = 0xe;
pub const CQE_INVALID: u8 = 0xf;
/// `op_own` of a slot as rdma-core `mlx5_alloc_cq_buf` leaves it: opcode INVALID, owner 0.
pub const CQE_INIT_OP_OWN: u8 = CQE_INVALID << 4;

/// Error CQE syndromes (`MLX5_CQE_SYNDROME_*`).
pub mod syndrome {
    pub const LOCAL_LENGTH: u8 = 0x01;
    pub const LOCAL_QP_OP: u8 = 0x02;
    pub const LOCAL_PROT: u8 = 0x04;
    pub const WR_FLUSH: u8 = 0x05;
    pub const MW_BIND: u8 = 0x06;
    pub const BAD_RESP: u8 = 0x10;
    pub const LOCAL_ACCESS: u8 = 0x11;
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    pub const REMOTE_ACCESS: u8 = 0x13;
    pub const REMOTE_OP: u8 = 0x14;
    pub const TRANSPORT_RETRY_EXC: u8 = 0x15;
    pub const RNR_RETRY_EXC: u8 = 0x16;
    pub const REMOTE_ABORTED: u8 = 0x22;
}

/// CQE `hdr_type_etc` bits, read as one BE16 at 0x1c (DPDK `mlx5_cqe.hdr_type_etc`; rdma-core
/// splits it into `hds_ip_ext` and `l4_hdr_type_etc`). Bit 1 is DPDK's
/// `MLX5_CQE_RX_IP_EXT_OPTS_PACKET`; VPP's value 1 for it is off by one.
pub mod cqe_flags {
    pub const L4_OK: u16 = 1 << 10;
    pub const L3_OK: u16 = 1 << 9;
    pub const L2_OK: u16 = 1 << 8;
    pub const IP_FRAG: u16 = 1 << 7;
    pub const L4_TYPE_SHIFT: u16 = 4;
    pub const L4_TYPE_MASK: u16 = 0x7 << 4;
    pub const L3_TYPE_SHIFT: u16 = 2;
    pub const L3_TYPE_MASK: u16 = 0x3 << 2;
    pub const IP_EXT_OPTS: u16 = 1 << 1;
    /// `hdr_type_etc` bit 0: the device removed a C-VLAN tag, now in the CQE's `vlan_info`
    /// (the kernel's `CQE_VLAN_STRIPPED`; the model sets it on a QP with CVLAN_STRIPPING).
    pub const VLAN_STRIPPED: u16 = 1 << 0;
    /// l4_hdr_type values (Linux `CQE_L4_HDR_TYPE_*`).
    pub const L4_NONE: u16 = 0;
    pub const L4_TCP: u16 = 1;
    pub const L4_UDP: u16 = 2;
    pub const L4_TCP_EMPTY_ACK: u16 = 3;
    pub const L4_TCP_ACK: u16 = 4;
    /// l3_hdr_type values (`MLX5_CQE_L3_HDR_TYPE_*`).
    pub const L3_IPV6: u16 = 1;
    pub const L3_IPV4: u16 = 2;
}

// ---- completion queue entries ----

/// `struct mlx5_cqe64` with the fields rdma-core leaves unnamed given their Linux/DPDK names
/// (`rx_hash_res` 0x0c, `rx_hash_type` 0x10, `csum` 0x14, and the flags word `hdr_type_etc` at
/// 0x1c, which rdma-core splits into `hds_ip_ext`/`l4_hdr_type_etc`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe64 {
    pub pkt_info: u8,
    pub rsvd1: u8,
    /// Striding RQ: index of the WQE.
    pub wqe_id: Be16,
    pub lro: [u8; 8],
    pub rx_hash_res: Be32,
    pub rx_hash_type: u8,
    pub ml_path: u8,
    pub rsvd2: [u8; 2],
    pub csum: Be16,
    pub slid: Be16,
    pub flags_rqpn: Be32,
    pub hdr_type_etc: Be16,
    pub vlan_info: Be16,
    /// CQE v1: `lro_num_seg` in `[31:24]`, user index in `[23:0]`.
    pub srqn_uidx: Be32,
    pub imm_inval_pkey: Be32,
    pub app: [u8; 4],
    /// Bytes received (RX), or the number of mini-CQEs in a compressed title.
    pub byte_cnt: Be32,
    pub timestamp: Be64,
    /// REQ: `[31:24]` WQE opcode, `[23:0]` QPN. RESP: `[31:24]` RX drop count, `[23:0]` flow tag.
    pub sop_drop_qpn: Be32,
    /// TX: wqe_index of the completed WQE; cyclic RX: WQE index.
    pub wqe_counter: Be16,
    pub signature: u8,
    /// `[7:4]` opcode, `[3:2]` format, `[1]` solicited, `[0]` owner. Written last by the NIC.
    pub op_own: u8,
}

impl Default for Cqe64 {
    fn default() -> Self {
        Cqe64::from_bytes(&[0; 64])
    }
}

impl Cqe64 {
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }
    pub fn owner(&self) -> u8 {
        self.op_own & CQE_OWNER_MASK
    }
    pub fn format(&self) -> u8 {
        (self.op_own >> 2) & 3
    }
    /// `hdr_type_etc` in the high half and `vlan_info` in the low half: one big-endian 32-bit
    /// load (a single `movbe` where the CPU has it) for a receive loop that wants the former.
    #[inline(always)]
    pub fn hdr_type_vlan(&self) -> u32 {
        let b = self.as_bytes();
        u32::from_be_bytes([b[0x1c], b[0x1d], b[0x1e], b[0x1f]])
    }
    pub fn as_bytes(&self) -> &[u8; 64] {
        // SAFETY: Cqe64 is repr(C), 64 bytes, with no padding (asserted below) and only
        // integer fields, so every byte is initialised.
        unsafe { &*(self as *const Cqe64).cast::<[u8; 64]>() }
    }
    pub fn from_bytes(b: &[u8; 64]) -> Cqe64 {
        // SAFETY: every bit pattern is a valid Cqe64 (integer fields only); read_unaligned
        // copes with the byte array's alignment of 1.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Cqe64>()) }
    }
    /// A send completion for the WQE at `wqe_counter` (rdma-core `cq.c` reads the WQE opcode and
    /// QPN from `sop_drop_qpn`). The owner bit is the writer's business.
    pub fn req(wqe_counter: u16, qpn: u32, timestamp: u64) -> Cqe64 {
        Cqe64 {
            wqe_counter: Be16::new(wqe_counter),
            sop_drop_qpn: Be32::new(u32::from(OPCODE_SEND) << 24 | qpn),
            timestamp: Be64::new(timestamp),
            op_own: CQE_REQ << 4,
            ..Cqe64::default()
        }
    }

    /// A receive completion of `len` bytes into the WQE at `wqe_counter`.
    pub fn resp_send(wqe_counter: u16, len: u32, rx_hash: u32, hdr_type_etc: u16, timestamp: u64, drops: u8) -> Cqe64 {
        Cqe64 {
            byte_cnt: Be32::new(len),
            rx_hash_res: Be32::new(rx_hash),
            hdr_type_etc: Be16::new(hdr_type_etc),
            timestamp: Be64::new(timestamp),
            sop_drop_qpn: Be32::new(u32::from(drops) << 24),
            wqe_counter: Be16::new(wqe_counter),
            op_own: CQE_RESP_SEND << 4,
            ..Cqe64::default()
        }
    }

    /// Frames the device dropped for lack of receive WQEs before this one (RESP CQEs keep the
    /// count in `sop_drop_qpn[31:24]`, the first byte in memory).
    #[inline(always)]
    pub fn rx_drops(&self) -> u8 {
        self.sop_drop_qpn.0.to_ne_bytes()[0]
    }

    /// The error view of the same 64 bytes.
    pub fn as_err(&self) -> ErrCqe {
        ErrCqe::from_bytes(self.as_bytes())
    }
}

/// `struct mlx5_err_cqe`: the same 64-byte slot when the opcode is REQ_ERR or RESP_ERR.
/// rdma-core types `srqn`, `s_wqe_opcode_qpn` and `wqe_counter` as host integers, but the
/// hardware writes them big-endian (Linux declares them `__be32`/`__be16`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrCqe {
    pub rsvd0: [u8; 32],
    pub srqn: Be32,
    pub rsvd1: [u8; 18],
    pub vendor_err_synd: u8,
    pub syndrome: u8,
    /// `[31:24]` opcode of the failing WQE, `[23:0]` QPN.
    pub s_wqe_opcode_qpn: Be32,
    pub wqe_counter: Be16,
    pub signature: u8,
    pub op_own: u8,
}

impl ErrCqe {
    pub fn new() -> ErrCqe {
        ErrCqe::from_bytes(&[0; 64])
    }
    /// A send error for the WQE at `wqe_counter` whose opcode was `wqe_opcode`.
    pub fn req_err(synd: u8, wqe_counter: u16, wqe_opcode: u8, qpn: u32) -> ErrCqe {
        ErrCqe {
            syndrome: synd,
            s_wqe_opcode_qpn: Be32::new(u32::from(wqe_opcode) << 24 | qpn),
            wqe_counter: Be16::new(wqe_counter),
            op_own: CQE_REQ_ERR << 4,
            ..ErrCqe::new()
        }
    }
    /// A receive error for the WQE at `wqe_counter` of WQ `wq_num`.
    pub fn resp_err(synd: u8, wqe_counter: u16, wq_num: u32) -> ErrCqe {
        ErrCqe {
            syndrome: synd,
            srqn: Be32::new(wq_num),
            wqe_counter: Be16::new(wqe_counter),
            op_own: CQE_RESP_ERR << 4,
            ..ErrCqe::new()
        }
    }
    pub fn as_bytes(&self) -> &[u8; 64] {
        // SAFETY: repr(C), 64 bytes, no padding (asserted below), integer fields only.
        unsafe { &*(self as *const ErrCqe).cast::<[u8; 64]>() }
    }
    pub fn from_bytes(b: &[u8; 64]) -> ErrCqe {
        // SAFETY: every bit pattern is valid; read_unaligned copes with alignment 1.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<ErrCqe>()) }
    }
}

impl Default for ErrCqe {
    fn default() -> Self {
        ErrCqe::new()
    }
}

/// Owner bit the NIC writes for CQ producer index `pi` on a ring of `2^log2` entries.
#[inline(always)]
pub const fn cqe_owner_for(pi: u32, log2: u32) -> u8 {
    ((pi >> log2) & 1) as u8
}

/// Entries rdma-core gives a CQ asked for `requested` (`mlx5_create_cq`: roundup_pow2(n + 1)).
pub fn cq_entries_for(requested: u32) -> u32 {
    (requested.max(1) + 1).next_power_of_two()
}
