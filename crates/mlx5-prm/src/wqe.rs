//! Send WQEs: opcodes and flags, the control, Ethernet and data segments, the canonical one-WQEBB
//! SEND and its packed forms.

use crate::*;

pub const OPCODE_SEND: u8 = 0x0a;
pub const OPCODE_SEND_IMM: u8 = 0x0b;
/// Enhanced multi-packet send (ConnectX-5 and later; DPDK `MLX5_OPCODE_ENHANCED_MPSW`): a title
/// WQEBB of control + Ethernet segment without inline data, then one data segment per packet.
pub const OPCODE_ENHANCED_MPSW: u8 = 0x29;
/// Packets per eMPW WQE (DPDK `MLX5_EMPW_MAX_PACKETS`, = its completion threshold).
pub const EMPW_MAX_PACKETS: usize = 32;
/// DS of an eMPW title before its data segments: control + a 16-byte Ethernet segment.
pub const EMPW_TITLE_DS: u32 = 2;

pub const WQE_CTRL_CQ_UPDATE: u8 = 0x08;
/// CE = 1 in `fm_ce_se`, "a CQE for the first error only" (DPDK `MLX5_COMP_ONLY_FIRST_ERR <<
/// MLX5_COMP_MODE_OFFSET`): what the encoders below put in a WQE that asks for no completion, as
/// DPDK's `mlx5_tx.h` `mlx5_tx_cseg_init` does. With CE = 0 ("every error") a device writes a
/// flush CQE for each such WQE behind an error; with 1 only the failing WQE and the ones that
/// asked for a completion report.
pub const WQE_CTRL_CQ_FIRST_ERR: u8 = 0x04;
pub const WQE_CTRL_SOLICITED: u8 = 0x02;
pub const WQE_CTRL_FENCE: u8 = 0x80;

pub const ETH_WQE_L3_CSUM: u8 = 0x40;
pub const ETH_WQE_L4_CSUM: u8 = 0x80;

pub const INLINE_SEG: u32 = 0x8000_0000;
pub const INVALID_LKEY: u32 = 0x100;

// ---- send WQE segments ----

/// `struct mlx5_wqe_ctrl_seg` (16 bytes, offset 0 of every send WQE). rdma-core declares it
/// `packed, aligned(4)` because `dci_stream_channel_id` sits at the odd offset 9; holding that
/// field as bytes gives the same layout without `packed`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    /// `[31:24]` opc_mod, `[23:8]` wqe_index (SQ PI of the first WQEBB), `[7:0]` opcode.
    pub opmod_idx_opcode: Be32,
    /// `[31:8]` QP number, `[7:0]` ds (16-byte units including this segment; 6 bits valid).
    pub qpn_ds: Be32,
    pub signature: u8,
    pub dci_stream_channel_id: [u8; 2],
    /// `[7:5]` fence, `[3:2]` CE (2 = always write a CQE), `[1]` solicited.
    pub fm_ce_se: u8,
    /// Not interpreted for a raw SEND, so drivers keep a cookie here (VPP: the SQ tail after this
    /// WQE, in host order). Written as given, like `mlx5dv_set_ctrl_seg` does.
    pub imm: u32,
}

impl CtrlSeg {
    #[inline(always)]
    pub const fn opmod_idx_opcode(opmod: u8, wqe_index: u16, opcode: u8) -> Be32 {
        Be32::new((opmod as u32) << 24 | (wqe_index as u32) << 8 | opcode as u32)
    }
    #[inline(always)]
    pub const fn qpn_ds(qpn: u32, ds: u8) -> Be32 {
        Be32::new(qpn << 8 | (ds & 0x3f) as u32)
    }
    pub fn opcode(&self) -> u8 {
        self.opmod_idx_opcode.get() as u8
    }
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode.get() >> 8) as u16
    }
    pub fn qpn(&self) -> u32 {
        self.qpn_ds.get() >> 8
    }
    pub fn ds(&self) -> u32 {
        self.qpn_ds.get() & 0x3f
    }
    /// The CE field: 0/1 only on error, 2/3 always.
    pub fn completion_mode(&self) -> u8 {
        (self.fm_ce_se >> 2) & 3
    }
    /// The 8 bytes a doorbell carries to the UAR: ctrl dwords 0–1 exactly as in memory.
    pub fn doorbell_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.opmod_idx_opcode.0.to_ne_bytes());
        b[4..].copy_from_slice(&self.qpn_ds.0.to_ne_bytes());
        b
    }
}

/// `struct mlx5_wqe_eth_seg` (32 bytes, at WQE offset 16). The inline header begins at byte 14
/// (`inline_hdr_start`) and runs on past the struct when more than 18 bytes are inlined.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct EthSeg {
    /// rsvd0 in rdma-core; DPDK's software-parser offsets. Always 0 here.
    pub swp_offs: u32,
    pub cs_flags: u8,
    pub swp_flags: u8,
    pub mss: Be16,
    /// rsvd2 in rdma-core; DPDK's flow metadata. Always 0 here.
    pub metadata: Be32,
    pub inline_hdr_sz: Be16,
    /// `inline_hdr_start[2]` followed by `inline_hdr[16]`.
    pub inline_hdr: [u8; ETH_L2_INLINE_HEADER_SIZE],
}

impl EthSeg {
    /// DS taken by an Ethernet segment with `inline` bytes: align16(14 + inline), at least one.
    pub const fn ds_for_inline(inline: usize) -> u32 {
        let bytes = ESEG_INLINE_OFFSET + inline;
        let ds = bytes.div_ceil(DS_BYTES) as u32;
        if ds == 0 {
            1
        } else {
            ds
        }
    }
}

/// `struct mlx5_wqe_data_seg` (16 bytes): a gather entry on send, a scatter entry on receive.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Bit 31 (`MLX5_INLINE_SEG`) marks an inline data segment.
    pub byte_count: Be32,
    pub lkey: Be32,
    pub addr: Be64,
}

impl DataSeg {
    pub const fn new(byte_count: u32, lkey: u32, addr: u64) -> DataSeg {
        DataSeg {
            byte_count: Be32::new(byte_count),
            lkey: Be32::new(lkey),
            addr: Be64::new(addr),
        }
    }
    /// Writes this entry in place, field by field: each big-endian field is then one store (a
    /// `movbe` where the CPU has it) rather than being merged into a word first. `lkey` is
    /// already big-endian (a queue converts it once).
    #[inline(always)]
    pub fn set(&mut self, byte_count: u32, lkey: Be32, addr: u64) {
        self.byte_count = Be32::new(byte_count);
        self.lkey = lkey;
        self.addr = Be64::new(addr);
    }
    /// The end-of-list entry rdma-core writes after the last posted receive SGE.
    pub const TERMINATOR: DataSeg = DataSeg::new(0, INVALID_LKEY, 0);
}

/// The canonical one-WQEBB raw SEND (ds 4): control, Ethernet segment with 18 inline bytes, one
/// gather entry for the rest of the frame. This is what the datapath writes per packet.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SendWqe {
    pub ctrl: CtrlSeg,
    pub eth: EthSeg,
    pub data: DataSeg,
}

impl SendWqe {
    /// The canonical SEND of a frame of `len >= 18` bytes at `addr`: its first 18 bytes `hdr`
    /// inline, the rest gathered from `addr + 18` (VPP `rdma_mlx5_wqe_init`). `signal` asks for a
    /// CQE; `imm` is the driver's cookie. The struct view of [`packed::send_l2_inline`], the one
    /// encoder of this WQE (the datapath stores its words directly).
    #[allow(clippy::too_many_arguments)]
    pub fn l2_inline(
        wqe_index: u16,
        qpn_ds4: Be32,
        signal: bool,
        imm: u32,
        cs_flags: u8,
        hdr: [u8; ETH_L2_INLINE_HEADER_SIZE],
        len: u32,
        lkey: Be32,
        addr: u64,
    ) -> SendWqe {
        let h = (
            u16::from_ne_bytes([hdr[0], hdr[1]]),
            u64::from_ne_bytes(hdr[2..10].try_into().expect("8 bytes")),
            u64::from_ne_bytes(hdr[10..18].try_into().expect("8 bytes")),
        );
        let words = packed::send_l2_inline(
            packed::send_index(u32::from(wqe_index)),
            qpn_ds4,
            signal,
            imm,
            cs_flags,
            h,
            len,
            lkey,
            addr,
        );
        // SAFETY: a SendWqe is 64 bytes of integer fields without padding (asserted below), so
        // every bit pattern of eight words is one.
        unsafe { std::mem::transmute::<[u64; 8], SendWqe>(words) }
    }

    pub fn as_bytes(&self) -> &[u8; SEND_WQE_BB] {
        // SAFETY: repr(C, align(64)), 64 bytes made of padding-free segments (asserted below).
        unsafe { &*(self as *const SendWqe).cast::<[u8; SEND_WQE_BB]>() }
    }
}

/// Encodes a SEND whose Ethernet segment inlines `inline` (the frame's first bytes) and, with
/// `gather`, one data segment for the rest, into `out` (one or more WQEBBs, zero-padded); returns
/// the WQEBB count. rdma-core `_mlx5_post_send` (RAW_PACKET: `copy_eth_inline_headers`, then the
/// gather list) lays a SEND out the same way.
#[allow(clippy::too_many_arguments)]
pub fn encode_send(
    wqe_index: u16,
    qpn: u32,
    inline: &[u8],
    gather: Option<DataSeg>,
    cs_flags: u8,
    signal: bool,
    imm: u32,
    out: &mut [u8],
) -> u32 {
    encode_send_sg(
        wqe_index,
        qpn,
        inline,
        None,
        gather.as_slice(),
        cs_flags,
        signal,
        imm,
        out,
    )
}

/// VLAN insertion by the NIC (DPDK mlx5_prm.h `MLX5_ETH_WQE_VLAN_INSERT`, written by
/// mlx5_tx.h `mlx5_tx_eseg_none`): the Ethernet segment's dword at byte 12 (where
/// `inline_hdr_sz` and `inline_hdr_start` are otherwise) is BE32 `ETH_WQE_VLAN_INSERT | tci`,
/// with nothing inlined; the device puts an 802.1Q tag (TPID 0x8100, `tci`) after the frame's
/// two MAC addresses. DPDK uses it only without inline data; with inline headers (a
/// ConnectX-4's 18 bytes) it writes the tag into the inlined header itself.
pub const ETH_WQE_VLAN_INSERT: u32 = 1 << 31;
/// Offset in the Ethernet segment of the VLAN-insertion dword.
pub const ESEG_VLAN_INSERT_OFFSET: usize = 12;
/// The 802.1Q tag protocol identifier a VLAN insertion (and a CVLAN strip) is about.
pub const ETH_P_8021Q: u16 = 0x8100;

/// [`encode_send`] with any number of gather entries (a chained packet's segments: PRM "send
/// WQE" with several data segments; `ds = 1 + eseg DS + gathers.len()`, extra WQEBBs following
/// the first) and, with `vlan_insert`, the NIC's VLAN insertion (then `inline` must be empty,
/// as in DPDK). `out` must hold the WQEBBs; at most [`MAX_WQE_DS`] DS in all (asserted).
#[allow(clippy::too_many_arguments)]
pub fn encode_send_sg(
    wqe_index: u16,
    qpn: u32,
    inline: &[u8],
    vlan_insert: Option<u16>,
    gathers: &[DataSeg],
    cs_flags: u8,
    signal: bool,
    imm: u32,
    out: &mut [u8],
) -> u32 {
    assert!(
        vlan_insert.is_none() || inline.is_empty(),
        "VLAN insertion goes with no inline header"
    );
    let eseg_ds = EthSeg::ds_for_inline(inline.len());
    let ds = 1 + eseg_ds + gathers.len() as u32;
    assert!(ds <= MAX_WQE_DS, "a send WQE of {ds} DS");
    let bbs = wqebbs(ds);
    let len = bbs as usize * SEND_WQE_BB;
    out[..len].fill(0);
    let ctrl = CtrlSeg {
        opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, wqe_index, OPCODE_SEND),
        qpn_ds: CtrlSeg::qpn_ds(qpn, ds as u8),
        fm_ce_se: if signal {
            WQE_CTRL_CQ_UPDATE
        } else {
            WQE_CTRL_CQ_FIRST_ERR
        },
        imm,
        ..CtrlSeg::default()
    };
    out[..DS_BYTES].copy_from_slice(&ctrl.to_bytes());
    // The Ethernet segment up to its inline header, then the inline bytes, which may run on past
    // the struct.
    let eth = EthSeg {
        cs_flags,
        inline_hdr_sz: Be16::new(inline.len() as u16),
        ..EthSeg::default()
    };
    out[DS_BYTES..DS_BYTES + ESEG_INLINE_OFFSET].copy_from_slice(&eth.to_bytes()[..ESEG_INLINE_OFFSET]);
    out[DS_BYTES + ESEG_INLINE_OFFSET..DS_BYTES + ESEG_INLINE_OFFSET + inline.len()].copy_from_slice(inline);
    if let Some(tci) = vlan_insert {
        let at = DS_BYTES + ESEG_VLAN_INSERT_OFFSET;
        out[at..at + 4].copy_from_slice(&(ETH_WQE_VLAN_INSERT | u32::from(tci)).to_be_bytes());
    }
    for (k, d) in gathers.iter().enumerate() {
        let at = (1 + eseg_ds as usize + k) * DS_BYTES;
        out[at..at + DS_BYTES].copy_from_slice(&d.to_bytes());
    }
    bbs
}

/// The TCI of a VLAN insertion the Ethernet segment `eseg` asks for (see
/// [`ETH_WQE_VLAN_INSERT`]): the word DPDK writes, bit 31 and a TCI with nothing inlined (bits
/// 30..16 zero). Any other word with bit 31 set is an inline size no WQE can hold, not this.
pub fn eseg_vlan_insert(eseg: &[u8]) -> Option<u16> {
    let at = ESEG_VLAN_INSERT_OFFSET;
    let w = u32::from_be_bytes(eseg[at..at + 4].try_into().expect("4 bytes"));
    (w & 0xffff_0000 == ETH_WQE_VLAN_INSERT).then_some(w as u16)
}

macro_rules! pod_bytes {
    ($t:ty, $n:expr) => {
        impl $t {
            pub fn to_bytes(&self) -> [u8; $n] {
                // SAFETY: repr(C) with integer fields only and no padding (sizes asserted below),
                // so every byte is initialised.
                unsafe { std::mem::transmute_copy(self) }
            }
        }
    };
}
pod_bytes!(CtrlSeg, 16);
pod_bytes!(EthSeg, 32);
pod_bytes!(DataSeg, 16);

/// WQEBBs taken by a WQE of `ds` octowords.
pub const fn wqebbs(ds: u32) -> u32 {
    // Not `div_ceil`: widened, the add cannot overflow, and add-and-shift is two instructions
    // where div_ceil's remainder test takes five (this runs once per burst on the send path).
    ((ds as u64 + 3) >> 2) as u32
}

// ---- packed forms: what the send fast path stores ----

// The packed forms below lay segments out as little-endian 64-bit words; on a big-endian host
// every field would land byte-swapped in the WQE. rawpkt's hosts (x86-64, aarch64) are
// little-endian; rather than carry an untested big-endian variant, refuse to build for one.
#[cfg(not(target_endian = "little"))]
compile_error!(
    "rawpkt's send path stores mlx5 WQEs as little-endian 64-bit words (mlx5_prm::packed): \
     big-endian hosts are not supported"
);

/// The send WQEs of the fast path as the 64-bit words in which they lie in memory (word `k` is
/// bytes `8k..8k + 8`, on a little-endian host: the first byte in the low bits). A queue stores
/// each word with one instruction, and the byte swaps of constant fields fold into constants;
/// the datapath's instruction count per packet depends on it. These are the one encoder of the
/// canonical SEND ([`SendWqe::l2_inline`] is their struct view) and of the eMPW title; the
/// golden vectors check them through the struct views and [`CtrlSeg`]/[`EthSeg`].
#[cfg(target_endian = "little")]
pub mod packed {
    use super::{
        Be32, ETH_L2_INLINE_HEADER_SIZE, OPCODE_ENHANCED_MPSW, OPCODE_SEND, WQE_CTRL_CQ_FIRST_ERR, WQE_CTRL_CQ_UPDATE,
    };

    /// A word of two 32-bit halves, `lo` first in memory.
    #[inline(always)]
    const fn join(lo: u32, hi: u32) -> u64 {
        lo as u64 | (hi as u64) << 32
    }

    /// `opmod_idx_opcode` (host order, opmod 0) of a SEND at WQEBB counter `pi` (free-running:
    /// the bits above the 16-bit `wqe_index` are dropped when it is stored). Consecutive WQEBBs
    /// differ by [`WQE_INDEX_STEP`].
    #[inline(always)]
    pub const fn send_index(pi: u32) -> u32 {
        pi << 8 | OPCODE_SEND as u32
    }

    /// One WQEBB in the `wqe_index` field of `opmod_idx_opcode`.
    pub const WQE_INDEX_STEP: u32 = 1 << 8;

    /// The canonical one-WQEBB SEND ([`super::SendWqe`]): control (`index` from [`send_index`],
    /// `qpn_ds4` the queue's `qpn_ds` with ds 4, a CQE if `signal`, `imm` as given), an Ethernet
    /// segment with `cs_flags` and the frame's first 18 bytes inline (`hdr`: bytes 0..2, 2..10
    /// and 10..18 as they lie in memory), and one gather entry for bytes 18..`len` at
    /// `addr + 18`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn send_l2_inline(
        index: u32,
        qpn_ds4: Be32,
        signal: bool,
        imm: u32,
        cs_flags: u8,
        hdr: (u16, u64, u64),
        len: u32,
        lkey: Be32,
        addr: u64,
    ) -> [u64; 8] {
        const L2: u32 = ETH_L2_INLINE_HEADER_SIZE as u32;
        // Ethernet segment bytes 8..16: metadata 0, inline_hdr_sz (BE16), the first 2 inline bytes.
        const HDR_SZ: u64 = join(0, (L2 as u16).to_be() as u32);
        [
            join((index & 0x00ff_ffff).to_be(), qpn_ds4.0),
            // signature, stream id, fm_ce_se (byte 11), imm.
            join(
                (if signal {
                    WQE_CTRL_CQ_UPDATE
                } else {
                    WQE_CTRL_CQ_FIRST_ERR
                } as u32)
                    << 24,
                imm,
            ),
            // swp_offs 0, cs_flags (byte 4), swp_flags 0, mss 0.
            join(0, cs_flags as u32),
            HDR_SZ | (hdr.0 as u64) << 48,
            hdr.1,
            hdr.2,
            join((len - L2).to_be(), lkey.0),
            (addr + L2 as u64).to_be(),
        ]
    }

    /// The title of an enhanced multi-packet send (DPDK `mlx5_tx_burst_empw_simple`): control
    /// (opcode 0x29 at WQEBB `pi`, the queue's `qpn_ds` with its ds replaced by `ds`, a CQE if
    /// `signal`, `imm` 0) and a 16-byte Ethernet segment with `cs_flags`, no inline header and
    /// no metadata. Its first word is also the doorbell's.
    #[inline(always)]
    pub fn empw_title(pi: u32, qpn_ds: Be32, ds: u32, cs_flags: u8, signal: bool) -> [[u64; 2]; 2] {
        let word0 = ((pi & 0xffff) << 8 | OPCODE_ENHANCED_MPSW as u32).to_be();
        // `ds` is the low byte of the big-endian qpn_ds word: replaced in place, no byte swaps.
        let qpn_ds = qpn_ds.0 & !0xffu32.to_be() | (ds & 0x3f).to_be();
        let word1 = join(
            (if signal {
                WQE_CTRL_CQ_UPDATE
            } else {
                WQE_CTRL_CQ_FIRST_ERR
            } as u32)
                << 24,
            0,
        );
        [[join(word0, qpn_ds), word1], [join(0, cs_flags as u32), 0]]
    }
}
