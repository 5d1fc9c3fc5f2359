//! The capability pages a ConnectX-5 answers to `QUERY_HCA_CAP` (the PRM's HCA capabilities,
//! `struct mlx5_ifc_cmd_hca_cap_bits` and its siblings in DPDK's drivers/common/mlx5/mlx5_prm.h
//! and the kernel's include/linux/mlx5/mlx5_ifc.h), as far as the model has what they describe.
//!
//! Fields are big-endian bit fields counted from the most significant bit of the page's first
//! dword (`MLX5_SET`): a field at bit `b` of width `w` lies in dword `b / 32` at shift
//! `32 - b % 32 - w`. Each offset below is the field's in mlx5_prm.h. A capability the model
//! does not have (LRO, TSO, tunnels, timestamps formats, E-Switch, hairpin, packet pacing
//! queues, flow counters, crypto, ...) is 0, which is what drivers fall back from; the values
//! that are set are those the verbs queries already report (`device.rs`).

use mlx5_model::profile::{Knobs, TsCap};
use mlx5_prm::InlineMode;

/// Bytes of a capability page (`union mlx5_ifc_hca_cap_union_bits`).
pub(crate) const PAGE: usize = 0x1000;

/// `QUERY_HCA_CAP` `op_mod >> 1`: which page (`MLX5_GET_HCA_CAP_OP_MOD_*`).
pub(crate) const GENERAL: u16 = 0x0;
pub(crate) const ETHERNET_OFFLOAD: u16 = 0x1;
pub(crate) const ROCE: u16 = 0x4;
pub(crate) const NIC_FLOW_TABLE: u16 = 0x7;
pub(crate) const QOS: u16 = 0xc;

/// Sets the `width`-bit field at bit `bit` of `page` to `v` (`MLX5_SET`).
pub(crate) fn set(page: &mut [u8], bit: usize, width: usize, v: u32) {
    debug_assert!(width <= 32 && bit % 32 + width <= 32);
    let at = bit / 32 * 4;
    let shift = 32 - bit % 32 - width;
    let mask = if width == 32 { u32::MAX } else { (1u32 << width) - 1 } << shift;
    let old = u32::from_be_bytes(page[at..at + 4].try_into().expect("4 bytes"));
    let new = old & !mask | (v << shift) & mask;
    page[at..at + 4].copy_from_slice(&new.to_be_bytes());
}

/// Reads the field (`MLX5_GET`), for tests.
#[cfg(test)]
pub(crate) fn get(page: &[u8], bit: usize, width: usize) -> u32 {
    let at = bit / 32 * 4;
    let shift = 32 - bit % 32 - width;
    let mask = if width == 32 { u32::MAX } else { (1u32 << width) - 1 };
    u32::from_be_bytes(page[at..at + 4].try_into().expect("4 bytes")) >> shift & mask
}

/// `cmd_hca_cap` (general device capabilities), bit offsets in mlx5_prm.h.
mod general {
    pub const VHCA_ID: (usize, usize) = (0x30, 0x10);
    pub const LOG_MAX_QP_SZ: (usize, usize) = (0x88, 8);
    pub const LOG_MAX_CQ_SZ: (usize, usize) = (0xc8, 8);
    pub const ETH_VIRT: (usize, usize) = (0x1a3, 1);
    pub const NIC_FLOW_TABLE: (usize, usize) = (0x1a6, 1);
    pub const CQE_VERSION: (usize, usize) = (0x1fc, 4);
    pub const QOS: (usize, usize) = (0x21b, 1);
    pub const ETH_NET_OFFLOADS: (usize, usize) = (0x21c, 1);
    pub const ROCE: (usize, usize) = (0x21d, 1);
    pub const LOG_MAX_RQT_SIZE: (usize, usize) = (0x393, 5);
    pub const EXT_STRIDE_NUM_RANGE: (usize, usize) = (0x3a0, 1);
    pub const RQ_TS_FORMAT: (usize, usize) = (0x442, 2);
    pub const DEVICE_FREQUENCY_KHZ: (usize, usize) = (0x4e0, 0x20);
    pub const CQE_COMPRESSION: (usize, usize) = (0x5bf, 1);
}

/// `per_protocol_networking_offload_caps`.
mod eth {
    pub const CSUM_CAP: (usize, usize) = (0x0, 1);
    pub const VLAN_CAP: (usize, usize) = (0x1, 1);
    pub const WQE_VLAN_INSERT: (usize, usize) = (0x7, 1);
    pub const WQE_INLINE_MODE: (usize, usize) = (0x12, 2);
}

/// `qos_cap`.
mod qos {
    pub const PACKET_PACING: (usize, usize) = (0x0, 1);
}

/// `per_protocol_networking_offload_caps.wqe_inline_mode` values (`MLX5_CAP_INLINE_MODE_*`).
const CAP_INLINE_MODE_L2: u32 = 0;
const CAP_INLINE_MODE_VPORT_CONTEXT: u32 = 1;
const CAP_INLINE_MODE_NOT_REQUIRED: u32 = 2;

fn put(page: &mut [u8], f: (usize, usize), v: u32) {
    set(page, f.0, f.1, v);
}

/// `cmd_hca_cap.rq_ts_format` values (`MLX5_RQ_TIMESTAMP_FORMAT_CAP_*`, mlx5_ifc.h).
const RQ_TS_FREE_RUNNING: u32 = 0;
const RQ_TS_REAL_TIME: u32 = 1;
const RQ_TS_FREE_RUNNING_AND_REAL_TIME: u32 = 2;

/// The page `which` of device `port` (its vport's inline mode `inline`, the device's `knobs`),
/// or None for a page the model does not answer (the command then fails as for a bad
/// parameter).
pub(crate) fn page(which: u16, port: usize, inline: InlineMode, knobs: &Knobs) -> Option<Vec<u8>> {
    let mut p = vec![0u8; PAGE];
    match which {
        GENERAL => {
            // One function per port: its vHCA id.
            put(&mut p, general::VHCA_ID, port as u32);
            // max_qp_wr 32768 and max_cqe 4194303, as ibv_query_device reports them.
            put(&mut p, general::LOG_MAX_QP_SZ, 15);
            put(&mut p, general::LOG_MAX_CQ_SZ, 22);
            // The vport context says the inline mode (eth_virt), and the pages below exist.
            put(&mut p, general::ETH_VIRT, 1);
            put(&mut p, general::NIC_FLOW_TABLE, 1);
            put(&mut p, general::QOS, 1);
            put(&mut p, general::ETH_NET_OFFLOADS, 1);
            put(&mut p, general::ROCE, 1);
            // CQE version 1 (user index in CQEs), as mlx5dv_query_device's CQE_V1.
            put(&mut p, general::CQE_VERSION, 1);
            // RSS tables of up to 2048 entries (max_rwq_indirection_table_size).
            put(&mut p, general::LOG_MAX_RQT_SIZE, 11);
            put(&mut p, general::DEVICE_FREQUENCY_KHZ, knobs.clock_khz() as u32);
            // 2^3 strides per striding WQE and up, or 2^9 (kernel `mlx5_ib_query_device`).
            put(&mut p, general::EXT_STRIDE_NUM_RANGE, u32::from(knobs.ext_strides));
            let ts = match knobs.rq_ts_cap {
                TsCap::Fr => RQ_TS_FREE_RUNNING,
                TsCap::Rt => RQ_TS_REAL_TIME,
                TsCap::FrRt => RQ_TS_FREE_RUNNING_AND_REAL_TIME,
            };
            put(&mut p, general::RQ_TS_FORMAT, ts);
            put(&mut p, general::CQE_COMPRESSION, 1);
        }
        ETHERNET_OFFLOAD => {
            put(&mut p, eth::CSUM_CAP, 1);
            put(&mut p, eth::VLAN_CAP, 1);
            put(&mut p, eth::WQE_VLAN_INSERT, u32::from(knobs.vlan_insert));
            let mode = match inline {
                InlineMode::None => CAP_INLINE_MODE_NOT_REQUIRED,
                InlineMode::L2 => CAP_INLINE_MODE_L2,
                InlineMode::Ip | InlineMode::TcpUdp => CAP_INLINE_MODE_VPORT_CONTEXT,
            };
            put(&mut p, eth::WQE_INLINE_MODE, mode);
        }
        // Packet pacing on raw QPs (ibv_query_device_ex's packet_pacing_caps).
        QOS => put(&mut p, qos::PACKET_PACING, 1),
        // Flow table properties and RoCE: none of their optional features (all 0: the
        // timestamp formats are the free-running counter's, format 0).
        NIC_FLOW_TABLE | ROCE => {}
        _ => return None,
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_mlx5_set_puts_them() {
        let mut p = vec![0u8; 16];
        // wqe_inline_mode: bits 18..20 of the first dword from the top, shift 12.
        set(&mut p, 0x12, 2, 2);
        assert_eq!(u32::from_be_bytes(p[0..4].try_into().unwrap()), 2 << 12);
        set(&mut p, 0x40, 32, 156_250);
        assert_eq!(u32::from_be_bytes(p[8..12].try_into().unwrap()), 156_250);
        assert_eq!((get(&p, 0x12, 2), get(&p, 0x40, 32)), (2, 156_250));
        let k = Knobs::default();
        let g = page(GENERAL, 1, InlineMode::None, &k).unwrap();
        assert_eq!(get(&g, 0x21c, 1), 1, "eth_net_offloads");
        assert_eq!(get(&g, 0x4e0, 32), 156_250, "device_frequency_khz");
        assert_eq!(get(&g, 0x3a0, 1), 1, "ext_stride_num_range");
        let e = page(ETHERNET_OFFLOAD, 0, InlineMode::L2, &k).unwrap();
        assert_eq!(get(&e, 0x7, 1), 1, "wqe_vlan_insert");
        assert_eq!(mlx5_prm::devx::wqe_inline_mode(&[&[0u8; 16][..], &e].concat()), 0);
        assert!(page(0x20, 0, InlineMode::None, &k).is_none());
    }
}
