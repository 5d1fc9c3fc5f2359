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
//! the golden vectors (tests in this file and `dv::ring`).
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
pub const ETH_L2_MIN_HEADER_SIZE: usize = crate::flow::wire::ETH_HEADER_LEN;
/// Inline bytes start at this offset of the Ethernet segment (after `inline_hdr_sz`).
pub const ESEG_INLINE_OFFSET: usize = 14;

/// Which headers every send WQE must carry inline in its Ethernet segment: the NIC vport
/// context's `min_wqe_inline_mode` (PRM; Linux `mlx5_ifc.h` `MLX5_INLINE_MODE_*`, the values
/// below). The e-switch of a ConnectX-4/4 Lx steers by what is inline, so a WQE that inlines
/// less fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InlineMode {
    /// Nothing (ConnectX-5 and later).
    None = 0,
    /// The L2 header through its last VLAN or MPLS tag (at least 18 bytes).
    L2 = 1,
    /// Through the IP header.
    Ip = 2,
    /// Through the TCP or UDP header.
    TcpUdp = 3,
}

impl InlineMode {
    /// The mode of a PRM `min_wqe_inline_mode` value; None for the inner-header modes (4 and up,
    /// for tunnels) and reserved values.
    pub fn from_prm(v: u8) -> Option<InlineMode> {
        Some(match v {
            0 => InlineMode::None,
            1 => InlineMode::L2,
            2 => InlineMode::Ip,
            3 => InlineMode::TcpUdp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            InlineMode::None => "none",
            InlineMode::L2 => "l2",
            InlineMode::Ip => "ip",
            InlineMode::TcpUdp => "tcp-udp",
        }
    }

    /// The mode of a `name()`.
    pub fn from_name(s: &str) -> Option<InlineMode> {
        [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp]
            .into_iter()
            .find(|m| m.name() == s)
    }

    /// Bytes of a frame of `len` bytes, of which `head` is the start, that a send WQE must carry
    /// inline (Linux mlx5e `mlx5e_calc_min_inline`: the L2 header through every VLAN tag, the
    /// network or the transport offset, and never less than 18 bytes, DPDK's
    /// `MLX5_INLINE_HSIZE_L2`); at most `len`. Headers cut short by the end of `head` count as
    /// far as they go. A frame with no IP header needs its L2 header only, whatever the mode.
    pub fn header_bytes(self, head: &[u8], len: usize) -> usize {
        if self == InlineMode::None {
            return 0;
        }
        let (l2, ethertype) = l2_header_len(head);
        let need = match self {
            InlineMode::None | InlineMode::L2 => l2,
            InlineMode::Ip | InlineMode::TcpUdp => {
                let (l3, proto) = ip_header_len(head, l2, ethertype);
                if self == InlineMode::TcpUdp && l3 > 0 {
                    l2 + l3 + l4_header_len(head, l2 + l3, proto)
                } else {
                    l2 + l3
                }
            }
        };
        need.max(ETH_L2_INLINE_HEADER_SIZE).min(len)
    }
}

/// The two DevX commands that say which inline mode a device needs, as DPDK issues them
/// (`mlx5_devx_cmd_query_hca_attr`, `mlx5_devx_cmd_query_nic_vport_context`) through
/// `mlx5dv_devx_general_cmd`, with the field positions of Linux `mlx5_ifc.h`. Commands and
/// answers are big-endian PRM mailboxes; every answer starts with a status byte (0 = OK).
pub mod devx {
    pub const QUERY_HCA_CAP: u16 = 0x100;
    pub const QUERY_NIC_VPORT_CONTEXT: u16 = 0x754;
    /// `op_mod` of QUERY_HCA_CAP: `MLX5_GET_HCA_CAP_OP_MOD_ETHERNET_OFFLOAD_CAPS` (1) << 1 |
    /// `MLX5_HCA_CAP_OPMOD_GET_CUR` (1): the current per-protocol networking offload caps.
    pub const OP_MOD_ETH_OFFLOAD_CAPS_CUR: u16 = 1 << 1 | 1;
    /// Bytes of a command (`query_hca_cap_in`, `query_nic_vport_context_in`).
    pub const IN_LEN: usize = 16;
    /// Bytes of an answer: the 16-byte header, then the capability or context.
    pub const OUT_LEN: usize = 16 + 0x1000;
    /// `per_protocol_networking_offload_caps.wqe_inline_mode` (bits 18..20 of the first dword)
    /// values, `MLX5_CAP_INLINE_MODE_*`.
    pub const CAP_INLINE_MODE_L2: u8 = 0;
    pub const CAP_INLINE_MODE_VPORT_CONTEXT: u8 = 1;
    pub const CAP_INLINE_MODE_NOT_REQUIRED: u8 = 2;

    /// A command: opcode in bytes 0..2, op_mod in bytes 6..8 (own vport: the rest 0).
    pub fn command(opcode: u16, op_mod: u16) -> [u8; IN_LEN] {
        let mut c = [0u8; IN_LEN];
        c[0..2].copy_from_slice(&opcode.to_be_bytes());
        c[6..8].copy_from_slice(&op_mod.to_be_bytes());
        c
    }

    /// The opcode and op_mod of a command.
    pub fn opcode_of(cmd: &[u8]) -> Option<(u16, u16)> {
        Some((
            u16::from_be_bytes(cmd.get(0..2)?.try_into().ok()?),
            u16::from_be_bytes(cmd.get(6..8)?.try_into().ok()?),
        ))
    }

    /// `wqe_inline_mode` of a QUERY_HCA_CAP (ethernet offload caps) answer.
    pub fn wqe_inline_mode(out: &[u8]) -> u8 {
        (u32::from_be_bytes(out[16..20].try_into().expect("4 bytes")) >> 12) as u8 & 3
    }

    /// Sets `wqe_inline_mode` in an answer (the device side).
    pub fn set_wqe_inline_mode(out: &mut [u8], v: u8) {
        let w = u32::from_be_bytes(out[16..20].try_into().expect("4 bytes")) & !(3 << 12) | u32::from(v & 3) << 12;
        out[16..20].copy_from_slice(&w.to_be_bytes());
    }

    /// `nic_vport_context.min_wqe_inline_mode` (bits 5..8 of its first byte) of a
    /// QUERY_NIC_VPORT_CONTEXT answer.
    pub fn min_wqe_inline_mode(out: &[u8]) -> u8 {
        out[16] & 7
    }

    /// Sets `min_wqe_inline_mode` in an answer (the device side).
    pub fn set_min_wqe_inline_mode(out: &mut [u8], v: u8) {
        out[16] = out[16] & !7 | v & 7;
    }
}

fn be16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

/// Length of the L2 header through its last VLAN tag (802.1Q, 802.1ad, the old QinQ 0x9100) or
/// MPLS label (the one with bottom-of-stack set), and the EtherType after the tags (0 after MPLS:
/// what follows a label stack is not parsed).
fn l2_header_len(head: &[u8]) -> (usize, u16) {
    use crate::flow::wire::{ETHERTYPE_QINQ, ETHERTYPE_VLAN, ETH_HEADER_LEN};
    let Some(mut ethertype) = be16_at(head, 12) else {
        return (ETH_HEADER_LEN, 0);
    };
    let mut off = ETH_HEADER_LEN;
    while matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ | 0x9100) {
        off += 4;
        match be16_at(head, off - 2) {
            Some(t) => ethertype = t,
            None => return (off, 0),
        }
    }
    if matches!(ethertype, 0x8847 | 0x8848) {
        // Labels until the bottom-of-stack bit (byte 2, bit 0 of each 4-byte label).
        loop {
            off += 4;
            match head.get(off - 2) {
                Some(b) if b & 1 == 0 => {}
                _ => return (off, 0),
            }
        }
    }
    (off, ethertype)
}

/// Length of the IPv4 header (options included) or of the IPv6 header and its extension
/// headers at `off`, and the transport protocol; (0, 0) if the frame is not IP.
fn ip_header_len(head: &[u8], off: usize, ethertype: u16) -> (usize, u8) {
    use crate::flow::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
    match ethertype {
        ETHERTYPE_IPV4 => {
            let ihl = head.get(off).map_or(20, |b| usize::from(b & 0xf) * 4).max(20);
            (ihl, head.get(off + 9).copied().unwrap_or(0))
        }
        ETHERTYPE_IPV6 => {
            let mut len = 40;
            let mut next = head.get(off + 6).copied().unwrap_or(0);
            // Hop-by-hop, routing, fragment and destination options come before the transport
            // header (RFC 8200 4.1).
            while matches!(next, 0 | 43 | 44 | 60) {
                let at = off + len;
                let ext = if next == 44 {
                    8
                } else {
                    head.get(at + 1).map_or(8, |&l| (usize::from(l) + 1) * 8)
                };
                next = head.get(at).copied().unwrap_or(59);
                len += ext;
            }
            (len, next)
        }
        _ => (0, 0),
    }
}

/// Length of the TCP (data offset) or UDP header at `off`; 0 for another protocol.
fn l4_header_len(head: &[u8], off: usize, proto: u8) -> usize {
    use crate::flow::wire::{IPPROTO_TCP, IPPROTO_UDP};
    match proto {
        IPPROTO_TCP => head.get(off + 12).map_or(20, |b| usize::from(b >> 4) * 4).max(20),
        IPPROTO_UDP => 8,
        _ => 0,
    }
}

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
pub const WQE_CTRL_SOLICITED: u8 = 0x02;
pub const WQE_CTRL_FENCE: u8 = 0x80;

pub const ETH_WQE_L3_CSUM: u8 = 0x40;
pub const ETH_WQE_L4_CSUM: u8 = 0x80;

pub const INLINE_SEG: u32 = 0x8000_0000;
pub const INVALID_LKEY: u32 = 0x100;

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

/// The striding (multi-packet) receive queue: one WQE is a buffer cut into `2^log_num_strides`
/// strides of `2^log_stride_bytes`, and the device places many frames in it, each from the stride
/// where the previous one ended. Sources: rdma-core `mlx5dv.h` (`mlx5_wqe_srq_next_seg`,
/// `mlx5_mprq_wqe`, `mlx5dv_striding_rq_caps`, `mlx5dv_striding_rq_init_attr`), DPDK
/// `drivers/common/mlx5/mlx5_prm.h` (`mlx5_wqe_mprq`, `MLX5_MPRQ_*`: the byte count of a striding
/// completion), Linux `drivers/infiniband/hw/mlx5/mlx5_ib.h` (the stride limits the kernel
/// reports in `mlx5_ib_query_device`).
pub mod mprq {
    use super::{Be16, Be32, DataSeg, DS_BYTES};

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
        fm_ce_se: if signal { WQE_CTRL_CQ_UPDATE } else { 0 },
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
    "rawpkt's send path stores mlx5 WQEs as little-endian 64-bit words (dv::prm::packed): \
     big-endian hosts are not supported"
);

/// The send WQEs of the fast path as the 64-bit words in which they lie in memory (word `k` is
/// bytes `8k..8k + 8`, on a little-endian host: the first byte in the low bits). A queue stores
/// each word with one instruction, and the byte swaps of constant fields fold into constants;
/// the datapath's 30 instructions per packet depend on it. These are the one encoder of the
/// canonical SEND ([`SendWqe::l2_inline`] is their struct view) and of the eMPW title; the
/// golden vectors check them through the struct views and [`CtrlSeg`]/[`EthSeg`].
#[cfg(target_endian = "little")]
pub mod packed {
    use super::{Be32, ETH_L2_INLINE_HEADER_SIZE, OPCODE_ENHANCED_MPSW, OPCODE_SEND, WQE_CTRL_CQ_UPDATE};

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
            join(if signal { (WQE_CTRL_CQ_UPDATE as u32) << 24 } else { 0 }, imm),
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
        let word1 = join(if signal { (WQE_CTRL_CQ_UPDATE as u32) << 24 } else { 0 }, 0);
        [[join(word0, qpn_ds), word1], [join(0, cs_flags as u32), 0]]
    }
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

/// Owner bit the NIC writes for CQ producer index `pi` on a ring of `2^log2` entries.
#[inline(always)]
pub const fn cqe_owner_for(pi: u32, log2: u32) -> u8 {
    ((pi >> log2) & 1) as u8
}

/// Entries rdma-core gives a CQ asked for `requested` (`mlx5_create_cq`: roundup_pow2(n + 1)).
pub fn cq_entries_for(requested: u32) -> u32 {
    (requested.max(1) + 1).next_power_of_two()
}

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

/// Frames with every header stack the inline modes treat differently, each with the bytes a
/// WQE must inline in mode none, L2, IP and TCP/UDP (counted by hand from the layouts below).
#[cfg(test)]
pub(crate) fn inline_test_frames() -> Vec<(&'static str, Vec<u8>, [usize; 4])> {
    fn frame(tags: &[[u8; 4]], ethertype: u16, l3: &[u8], l4: &[u8], len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
        for t in tags {
            f.extend_from_slice(t);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f.extend_from_slice(l4);
        f.resize(len.max(f.len()), 0x5a);
        f
    }
    let ipv4 = |ihl: u8, proto: u8| {
        let mut h = vec![0u8; usize::from(ihl) * 4];
        h[0] = 0x40 | ihl;
        h[9] = proto;
        h
    };
    let udp = [0u8; 8];
    let tcp = |doff: u8| {
        let mut h = vec![0u8; usize::from(doff) * 4];
        h[12] = doff << 4;
        h
    };
    let mut ipv6_hbh = vec![0u8; 48];
    ipv6_hbh[0] = 0x60;
    ipv6_hbh[6] = 0; // hop-by-hop options, 8 bytes, then UDP
    ipv6_hbh[40] = 17;
    const VLAN: [u8; 4] = [0x81, 0x00, 0x00, 0x05];
    const SVLAN: [u8; 4] = [0x88, 0xa8, 0x00, 0x07];
    vec![
        ("ipv4 udp", frame(&[], 0x0800, &ipv4(5, 17), &udp, 60), [0, 18, 34, 42]),
        (
            "ipv4+options tcp+options",
            frame(&[], 0x0800, &ipv4(6, 6), &tcp(8), 128),
            [0, 18, 38, 70],
        ),
        (
            "ipv6 hop-by-hop udp",
            frame(&[], 0x86dd, &ipv6_hbh, &udp, 100),
            [0, 18, 62, 70],
        ),
        (
            "vlan ipv4 udp",
            frame(&[VLAN], 0x0800, &ipv4(5, 17), &udp, 64),
            [0, 18, 38, 46],
        ),
        (
            "qinq ipv4 udp",
            frame(&[SVLAN, VLAN], 0x0800, &ipv4(5, 17), &udp, 68),
            [0, 22, 42, 50],
        ),
        // Two labels, the second with bottom-of-stack; what follows is not parsed.
        (
            "mpls x2",
            frame(&[], 0x8847, &[0, 0x10, 0x00, 64, 0, 0x20, 0x01, 64], &ipv4(5, 17), 80),
            [0, 22, 22, 22],
        ),
        ("arp", frame(&[], 0x0806, &[0; 28], &[], 60), [0, 18, 18, 18]),
        (
            "ipv4 icmp",
            frame(&[], 0x0800, &ipv4(5, 1), &[0; 8], 60),
            [0, 18, 34, 34],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dv::golden;
    use std::mem::{align_of, offset_of, size_of};

    const QPN: u32 = 0x1234;
    const LKEY: u32 = 0xdead_beef;
    const FRAME_VA: u64 = 0x0000_7f12_3456_7800;

    fn frame() -> Vec<u8> {
        golden::bytes("frame_ipv4_udp_60")
    }

    fn hdr() -> [u8; 18] {
        frame()[..18].try_into().unwrap()
    }

    #[test]
    fn layouts_match_rdma_core() {
        assert_eq!(
            golden::layout("mlx5_wqe_ctrl_seg"),
            (size_of::<CtrlSeg>(), align_of::<CtrlSeg>())
        );
        assert_eq!(
            golden::layout("mlx5_wqe_eth_seg"),
            (size_of::<EthSeg>(), align_of::<EthSeg>())
        );
        assert_eq!(
            golden::layout("mlx5_wqe_data_seg"),
            (size_of::<DataSeg>(), align_of::<DataSeg>())
        );
        assert_eq!(golden::layout("mlx5_cqe64"), (size_of::<Cqe64>(), align_of::<Cqe64>()));
        assert_eq!(
            golden::layout("mlx5_err_cqe"),
            (size_of::<ErrCqe>(), align_of::<ErrCqe>())
        );
        let f = |s, m| golden::field(s, m).0;
        assert_eq!(f("mlx5_wqe_ctrl_seg", "qpn_ds"), offset_of!(CtrlSeg, qpn_ds));
        assert_eq!(f("mlx5_wqe_ctrl_seg", "signature"), offset_of!(CtrlSeg, signature));
        assert_eq!(
            f("mlx5_wqe_ctrl_seg", "dci_stream_channel_id"),
            offset_of!(CtrlSeg, dci_stream_channel_id)
        );
        assert_eq!(f("mlx5_wqe_ctrl_seg", "fm_ce_se"), offset_of!(CtrlSeg, fm_ce_se));
        assert_eq!(f("mlx5_wqe_ctrl_seg", "imm"), offset_of!(CtrlSeg, imm));
        assert_eq!(f("mlx5_wqe_eth_seg", "cs_flags"), offset_of!(EthSeg, cs_flags));
        assert_eq!(f("mlx5_wqe_eth_seg", "mss"), offset_of!(EthSeg, mss));
        assert_eq!(
            f("mlx5_wqe_eth_seg", "inline_hdr_sz"),
            offset_of!(EthSeg, inline_hdr_sz)
        );
        // Our `inline_hdr` covers rdma-core's `inline_hdr_start[2]` + `inline_hdr[16]`.
        assert_eq!(
            golden::field("mlx5_wqe_eth_seg", "inline_hdr_start"),
            (offset_of!(EthSeg, inline_hdr), 2)
        );
        assert_eq!(f("mlx5_wqe_data_seg", "lkey"), offset_of!(DataSeg, lkey));
        assert_eq!(f("mlx5_wqe_data_seg", "addr"), offset_of!(DataSeg, addr));
        for (m, off) in [
            ("wqe_id", offset_of!(Cqe64, wqe_id)),
            ("ml_path", offset_of!(Cqe64, ml_path)),
            ("slid", offset_of!(Cqe64, slid)),
            ("flags_rqpn", offset_of!(Cqe64, flags_rqpn)),
            ("hds_ip_ext", offset_of!(Cqe64, hdr_type_etc)),
            ("vlan_info", offset_of!(Cqe64, vlan_info)),
            ("srqn_uidx", offset_of!(Cqe64, srqn_uidx)),
            ("imm_inval_pkey", offset_of!(Cqe64, imm_inval_pkey)),
            ("byte_cnt", offset_of!(Cqe64, byte_cnt)),
            ("timestamp", offset_of!(Cqe64, timestamp)),
            ("sop_drop_qpn", offset_of!(Cqe64, sop_drop_qpn)),
            ("wqe_counter", offset_of!(Cqe64, wqe_counter)),
            ("signature", offset_of!(Cqe64, signature)),
            ("op_own", offset_of!(Cqe64, op_own)),
        ] {
            assert_eq!(f("mlx5_cqe64", m), off, "mlx5_cqe64.{m}");
        }
        for (m, off) in [
            ("srqn", offset_of!(ErrCqe, srqn)),
            ("vendor_err_synd", offset_of!(ErrCqe, vendor_err_synd)),
            ("syndrome", offset_of!(ErrCqe, syndrome)),
            ("s_wqe_opcode_qpn", offset_of!(ErrCqe, s_wqe_opcode_qpn)),
            ("wqe_counter", offset_of!(ErrCqe, wqe_counter)),
            ("op_own", offset_of!(ErrCqe, op_own)),
        ] {
            assert_eq!(f("mlx5_err_cqe", m), off, "mlx5_err_cqe.{m}");
        }
    }

    #[test]
    fn segments_encode_like_rdma_core_helpers() {
        let ctrl = |idx, ds, fm| CtrlSeg {
            opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, idx, OPCODE_SEND),
            qpn_ds: CtrlSeg::qpn_ds(QPN, ds),
            fm_ce_se: fm,
            ..CtrlSeg::default()
        };
        assert_eq!(
            ctrl(5, 4, WQE_CTRL_CQ_UPDATE).to_bytes().to_vec(),
            golden::bytes("a1_ctrl_send_pi5_ds4_cqe")
        );
        assert_eq!(
            ctrl(0xffff, 6, 0).to_bytes().to_vec(),
            golden::bytes("a2_ctrl_send_pi65535_ds6_nocqe")
        );
        let eth = |cs| EthSeg {
            cs_flags: cs,
            inline_hdr_sz: Be16::new(18),
            inline_hdr: hdr(),
            ..EthSeg::default()
        };
        assert_eq!(eth(0).to_bytes().to_vec(), golden::bytes("b1_eseg_inline18_nocsum"));
        assert_eq!(
            eth(ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM).to_bytes().to_vec(),
            golden::bytes("b2_eseg_inline18_l3l4csum")
        );
        assert_eq!(
            DataSeg::new(42, LKEY, FRAME_VA + 18).to_bytes().to_vec(),
            golden::bytes("c1_dseg_len42")
        );
        assert_eq!(
            DataSeg::new(2048, 0x1000, 0x1000_0000).to_bytes().to_vec(),
            golden::bytes("f1_rwqe_1seg")
        );
        let mut f2 = DataSeg::new(2048, 0x1000, 0x1000_0000).to_bytes().to_vec();
        f2.extend_from_slice(&DataSeg::TERMINATOR.to_bytes());
        assert_eq!(f2, golden::bytes("f2_rwqe_2slot_terminated"));
    }

    #[test]
    fn the_datapath_wqe_is_d1() {
        let qpn_ds = CtrlSeg::qpn_ds(QPN, 4);
        let d1 = SendWqe::l2_inline(5, qpn_ds, true, 0, 0, hdr(), 60, Be32::new(LKEY), FRAME_VA);
        assert_eq!(d1.as_bytes().to_vec(), golden::bytes("d1_wqe_send_1bb"));
        let d2 = SendWqe::l2_inline(5, qpn_ds, true, 0, 0xc0, hdr(), 60, Be32::new(LKEY), FRAME_VA);
        assert_eq!(d2.as_bytes().to_vec(), golden::bytes("d2_wqe_send_1bb_l3l4csum"));
        assert_eq!(d1.ctrl.doorbell_bytes().to_vec(), golden::bytes("i5_uar_doorbell_d1"));
    }

    #[test]
    fn the_inline_wqe_is_e1() {
        let mut out = [0xa5u8; 256];
        let bbs = encode_send(6, QPN, &frame(), None, 0, true, 0, &mut out);
        assert_eq!(bbs, 2);
        assert_eq!(out[..128].to_vec(), golden::bytes("e1_wqe_send_inline60_eseg"));
    }

    /// A chained frame's SEND (m1) and a VLAN insertion (m2), as rdma-core's helpers and DPDK's
    /// word lay them out; the device side reads the tag back from m2.
    #[test]
    fn the_scatter_and_vlan_sends_are_m1_and_m2() {
        let f = frame();
        let gathers = [
            DataSeg::new(12, LKEY, FRAME_VA + 18),
            DataSeg::new(20, LKEY, FRAME_VA + 0x1000),
            DataSeg::new(10, LKEY, FRAME_VA + 0x2000),
        ];
        let mut out = [0xa5u8; 128];
        assert_eq!(
            encode_send_sg(7, QPN, &f[..18], None, &gathers, 0, true, 0, &mut out),
            2
        );
        // Past ds (6 DS, 96 bytes) the WQE's second WQEBB is zero-padded, as the generator's.
        assert_eq!(out.to_vec(), golden::bytes("m1_wqe_send_3dseg"));
        let mut out = [0xa5u8; 64];
        let one = [DataSeg::new(60, LKEY, FRAME_VA)];
        assert_eq!(encode_send_sg(8, QPN, &[], Some(0x6123), &one, 0, true, 0, &mut out), 1);
        assert_eq!(out.to_vec(), golden::bytes("m2_wqe_send_vlan_insert"));
        assert_eq!(eseg_vlan_insert(&out[16..32]), Some(0x6123));
        assert_eq!(eseg_vlan_insert(&golden::bytes("d1_wqe_send_1bb")[16..32]), None);
    }

    /// The general SEND encoder writes the canonical SEND exactly as the packed form does.
    #[test]
    fn the_general_send_of_a_canonical_frame_is_d1() {
        let f = frame();
        let gather = DataSeg::new(60 - 18, LKEY, FRAME_VA + 18);
        for (cs, name) in [(0, "d1_wqe_send_1bb"), (0xc0, "d2_wqe_send_1bb_l3l4csum")] {
            let mut out = [0xa5u8; 64];
            assert_eq!(encode_send(5, QPN, &f[..18], Some(gather), cs, true, 0, &mut out), 1);
            assert_eq!(out.to_vec(), golden::bytes(name));
        }
    }

    /// The packed eMPW title is the control and Ethernet segments of the struct views (which the
    /// golden vectors check), and the data segment the datapath writes in place is `c1`.
    #[test]
    fn the_empw_title_and_data_segment_match_the_segment_definitions() {
        for (pi, ds, cs, signal) in [
            (0u32, 3u32, 0u8, false),
            (0x1_fffe, 34, 0xc0, true),
            (7, 60, 0x40, true),
        ] {
            let title = packed::empw_title(pi, CtrlSeg::qpn_ds(QPN, 4), ds, cs, signal);
            let mut got = Vec::new();
            for w in title.iter().flatten() {
                got.extend_from_slice(&w.to_le_bytes());
            }
            let ctrl = CtrlSeg {
                opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, pi as u16, OPCODE_ENHANCED_MPSW),
                qpn_ds: CtrlSeg::qpn_ds(QPN, ds as u8),
                fm_ce_se: if signal { WQE_CTRL_CQ_UPDATE } else { 0 },
                ..CtrlSeg::default()
            };
            let eth = EthSeg {
                cs_flags: cs,
                ..EthSeg::default()
            };
            let mut want = ctrl.to_bytes().to_vec();
            want.extend_from_slice(&eth.to_bytes()[..16]);
            assert_eq!(got, want, "pi {pi} ds {ds} cs {cs:#x} signal {signal}");
            assert_eq!(title[0][0].to_le_bytes(), ctrl.doorbell_bytes());
        }
        let mut d = DataSeg::TERMINATOR;
        d.set(42, Be32::new(LKEY), FRAME_VA + 18);
        assert_eq!(d.to_bytes().to_vec(), golden::bytes("c1_dseg_len42"));
    }

    #[test]
    fn cqes_encode_and_decode_like_rdma_core() {
        let mut g1 = Cqe64::resp_send(7, 60, 0x1122_3344, 0x0628, 0x0102_0304_0506_0708, 0);
        g1.op_own |= 1;
        assert_eq!(g1.as_bytes().to_vec(), golden::bytes("g1_cqe_rx_ipv4_udp"));
        assert_eq!(
            Cqe64::req(0x0123, QPN, 0).as_bytes().to_vec(),
            golden::bytes("h1_cqe_tx_req")
        );
        let mut h2 = ErrCqe::req_err(syndrome::LOCAL_PROT, 5, OPCODE_SEND, QPN);
        h2.vendor_err_synd = 0x55;
        assert_eq!(h2.as_bytes().to_vec(), golden::bytes("h2_cqe_tx_req_err_local_prot"));
        let mut h3 = ErrCqe::resp_err(syndrome::LOCAL_LENGTH, 7, 0);
        h3.op_own |= 1;
        assert_eq!(h3.as_bytes().to_vec(), golden::bytes("h3_cqe_rx_resp_err_local_length"));
        // Decoding the reference bytes gives the fields back.
        let g = Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap());
        assert_eq!(
            (g.byte_cnt.get(), g.wqe_counter.get(), g.opcode(), g.owner()),
            (60, 7, CQE_RESP_SEND, 1)
        );
        assert_eq!(g.rx_hash_res.get(), 0x1122_3344);
        let e = Cqe64::from_bytes(&golden::bytes("h2_cqe_tx_req_err_local_prot").try_into().unwrap()).as_err();
        assert_eq!(
            (e.syndrome, e.vendor_err_synd, e.wqe_counter.get()),
            (syndrome::LOCAL_PROT, 0x55, 5)
        );
        assert_eq!(e.s_wqe_opcode_qpn.get(), u32::from(OPCODE_SEND) << 24 | QPN);
        let mut h4 = [0u8; 64];
        h4[63] = CQE_INIT_OP_OWN;
        assert_eq!(h4.to_vec(), golden::bytes("h4_cqe_init_slot"));
    }

    /// The compressed title and both mini-CQE formats against the generator's vectors (k1-k3),
    /// and the mini-CQE layout against Linux's `struct mlx5_mini_cqe8` as the generator mirrors it.
    #[test]
    fn compressed_sessions_encode_like_the_reference() {
        let mut k1 = Cqe64::resp_send(0x0100, 60, 0, 0x0628, 0x0102_0304_0506_0708, 0);
        k1.op_own |= 1;
        k1.make_title(11);
        assert_eq!(k1.as_bytes().to_vec(), golden::bytes("k1_cqe_title_n11"));
        let t = Cqe64::from_bytes(&golden::bytes("k1_cqe_title_n11").try_into().unwrap());
        assert!(t.is_title() && !g1_is_title());
        assert_eq!(
            (t.mini_cqe_count(), t.format(), t.owner()),
            (11, CQE_FORMAT_COMPRESSED, 1)
        );
        let hash: MiniArray = std::array::from_fn(|i| MiniCqe::hash(0x1122_3300 + i as u32, 60 + i as u32));
        assert_eq!(mini_array_bytes(&hash).to_vec(), golden::bytes("k2_mini_array_hash"));
        let csum: MiniArray =
            std::array::from_fn(|i| MiniCqe::csum(0xab00 + i as u16, 2 * i as u16, 1 << 16 | (60 + i as u32)));
        assert_eq!(
            mini_array_bytes(&csum).to_vec(),
            golden::bytes("k3_mini_array_csum_stridx")
        );
        let back = mini_array_from(&golden::bytes("k3_mini_array_csum_stridx").try_into().unwrap());
        assert_eq!(
            (back[5].checksum(), back[5].stride_idx(), back[5].byte_cnt.get()),
            (0xab05, 10, 1 << 16 | 65)
        );
        let back = mini_array_from(&golden::bytes("k2_mini_array_hash").try_into().unwrap());
        assert_eq!((back[7].rx_hash(), back[7].byte_cnt.get()), (0x1122_3307, 67));
        // The in-memory struct view is the byte view.
        // SAFETY: MiniArray is 64 bytes of integer fields.
        let raw: [u8; 64] = unsafe { std::mem::transmute(hash) };
        assert_eq!(raw, mini_array_bytes(&hash));
        assert_eq!(golden::layout("priv_mini_cqe8"), (size_of::<MiniCqe>(), 4));
        assert_eq!(
            golden::field("priv_mini_cqe8", "rx_hash_result"),
            (offset_of!(MiniCqe, w0), 4)
        );
        assert_eq!(
            golden::field("priv_mini_cqe8", "byte_cnt"),
            (offset_of!(MiniCqe, byte_cnt), 4)
        );
        assert_eq!(golden::field("priv_mini_cqe8", "stridx"), (2, 2));
        assert_eq!(CQE_INVALIDATE, 0xf0);
        assert_eq!((mini_array_slot(0), mini_array_slot(1), mini_array_slot(3)), (1, 8, 24));
        assert_eq!(
            MiniCqe::hash(0x1122_3344, 0x5566_7788).hash_len(),
            0x1122_3344_5566_7788
        );
        for f in [MiniFormat::Hash, MiniFormat::Csum, MiniFormat::CsumStridx] {
            assert_eq!(MiniFormat::from_dv_flag(f.dv_flag()), Some(f));
        }
        assert_eq!(MiniFormat::from_dv_flag(3), None);
        assert_eq!(golden::field("mlx5dv_cq_init_attr", "cqe_comp_res_format"), (8, 1));
    }

    fn g1_is_title() -> bool {
        Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap()).is_title()
    }

    #[test]
    fn cq_rounding_follows_rdma_core() {
        assert_eq!(cq_entries_for(1024), 2048);
        assert_eq!(cq_entries_for(1023), 1024);
        assert_eq!(cq_entries_for(1), 2);
    }

    #[test]
    fn eseg_ds() {
        assert_eq!(EthSeg::ds_for_inline(0), 1);
        assert_eq!(EthSeg::ds_for_inline(2), 1);
        assert_eq!(EthSeg::ds_for_inline(18), 2);
        assert_eq!(EthSeg::ds_for_inline(60), 5);
        assert_eq!(wqebbs(1 + EthSeg::ds_for_inline(60)), 2);
    }

    #[test]
    fn ctrl_word_roundtrip() {
        let c = CtrlSeg {
            opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, 0xfffe, OPCODE_SEND),
            qpn_ds: CtrlSeg::qpn_ds(0xabcdef, 4),
            fm_ce_se: WQE_CTRL_CQ_UPDATE,
            ..CtrlSeg::default()
        };
        assert_eq!(
            (c.wqe_index(), c.opcode(), c.qpn(), c.ds(), c.completion_mode()),
            (0xfffe, 0x0a, 0xabcdef, 4, 2)
        );
    }

    #[test]
    fn inline_modes_ask_for_the_headers_linux_inlines() {
        let modes = [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp];
        for (what, f, want) in inline_test_frames() {
            for (m, w) in modes.iter().zip(want) {
                assert_eq!(m.header_bytes(&f, f.len()), w, "{what} in mode {}", m.name());
            }
        }
        // Never more than the frame; a runt needs all of itself.
        assert_eq!(InlineMode::L2.header_bytes(&[0; 16], 16), 16);
        for m in modes {
            assert_eq!(InlineMode::from_prm(m as u8), Some(m));
            assert_eq!(InlineMode::from_name(m.name()), Some(m));
        }
        assert_eq!(InlineMode::from_prm(4), None);
    }
}

#[cfg(test)]
mod mprq_tests {
    use super::mprq::{self, Caps, NextSeg, Params, Wqe};
    use super::*;
    use crate::dv::golden;
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
