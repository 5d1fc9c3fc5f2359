//! The two DevX commands that say which inline mode a device needs, as DPDK issues them
//! (`mlx5_devx_cmd_query_hca_attr`, `mlx5_devx_cmd_query_nic_vport_context`) through
//! `mlx5dv_devx_general_cmd`, with the field positions of Linux `mlx5_ifc.h`. Commands and
//! answers are big-endian PRM mailboxes; every answer starts with a status byte (0 = OK).
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

/// `per_protocol_networking_offload_caps.wqe_vlan_insert` (bit 7 from the top of the first
/// dword, mlx5_ifc.h) of a QUERY_HCA_CAP (ethernet offload caps) answer: the send WQE's Ethernet
/// segment may ask the device to insert a VLAN tag.
pub fn wqe_vlan_insert(out: &[u8]) -> bool {
    out[16] & 1 != 0
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

/// `op_mod` of QUERY_HCA_CAP for the current general device caps (`cmd_hca_cap`):
/// `MLX5_GET_HCA_CAP_OP_MOD_GENERAL_DEVICE` (0) << 1 | `MLX5_HCA_CAP_OPMOD_GET_CUR` (1).
pub const OP_MOD_GENERAL_CAPS_CUR: u16 = 1;

/// ACCESS_REGISTER for user contexts (`MLX5_CMD_OP_ACCESS_REGISTER_USER`, which DPDK's
/// `mlx5_devx_cmd_register_read` issues), its read op_mod, and the MTUTC register (the clock's
/// mode, `MLX5_REGISTER_ID_MTUTC`).
pub const ACCESS_REGISTER_USER: u16 = 0xb0c;
pub const ACCESS_REGISTER_READ: u16 = 1;
pub const REGISTER_MTUTC: u16 = 0x9055;
/// `register_mtutc.time_stamp_mode` values (`MLX5_MTUTC_TIMESTAMP_MODE_*`).
pub const MTUTC_INTERNAL_TIMER: u8 = 0;
pub const MTUTC_REAL_TIME: u8 = 1;

/// `cmd_hca_cap.rq_ts_format` values (`MLX5_RQ_TIMESTAMP_FORMAT_CAP_*`).
pub const RQ_TS_FREE_RUNNING: u8 = 0;
pub const RQ_TS_REAL_TIME: u8 = 1;
pub const RQ_TS_FREE_RUNNING_AND_REAL_TIME: u8 = 2;

/// The `width`-bit field at bit `bit` of a capability or register in an answer (after its
/// 16-byte header), as `MLX5_GET` counts: from the top of the first dword.
pub fn field(out: &[u8], bit: usize, width: usize) -> u32 {
    let at = 16 + bit / 32 * 4;
    let shift = 32 - bit % 32 - width;
    let mask = if width == 32 { u32::MAX } else { (1 << width) - 1 };
    u32::from_be_bytes(out[at..at + 4].try_into().expect("4 bytes")) >> shift & mask
}

/// `cmd_hca_cap.rq_ts_format` (bits 0x442..0x444) of a QUERY_HCA_CAP (general caps) answer.
pub fn rq_ts_format(out: &[u8]) -> u8 {
    field(out, 0x442, 2) as u8
}

/// `cmd_hca_cap.device_frequency_khz` (bit 0x4e0) of a general caps answer.
pub fn device_frequency_khz(out: &[u8]) -> u32 {
    field(out, 0x4e0, 32)
}

/// `cmd_hca_cap.ext_stride_num_range` (bit 0x3a0) of a general caps answer.
pub fn ext_stride_num_range(out: &[u8]) -> bool {
    field(out, 0x3a0, 1) != 0
}

/// The ACCESS_REGISTER_USER command that reads register `reg` (`access_register_in`: opcode,
/// op_mod at bytes 6..8, `register_id` at bytes 10..12, `argument` 0).
pub fn read_register(reg: u16) -> [u8; IN_LEN] {
    let mut c = command(ACCESS_REGISTER_USER, ACCESS_REGISTER_READ);
    c[10..12].copy_from_slice(&reg.to_be_bytes());
    c
}

/// The register a command reads (`register_id`).
pub fn register_id(cmd: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(cmd.get(10..12)?.try_into().ok()?))
}

/// `register_mtutc.time_stamp_mode` (the top two bits of the register) of an MTUTC read's
/// answer (`access_register_out`: the register from byte 16).
pub fn mtutc_time_stamp_mode(out: &[u8]) -> u8 {
    out[16] >> 6
}
