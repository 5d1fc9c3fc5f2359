//! Which headers a port's send WQEs must inline, decided as DPDK's `mlx5_set_min_inline`
//! (`drivers/net/mlx5/mlx5.c`) decides it:
//! 1. the user's choice (the spec option `inline=none|l2|ip|tcp-udp`; DPDK's `txq_inline_min`),
//!    raised to L2 on a ConnectX-4 PF or VF, which cannot send less;
//! 2. else the device's answer through DevX (`mlx5_devx_cmd_query_hca_attr`): the ethernet
//!    offload caps' `wqe_inline_mode` is L2, not required, or "as the vport context says", and
//!    then the NIC vport context's `min_wqe_inline_mode` (none, L2, IP, TCP/UDP) decides (DPDK
//!    first reads the general caps' `eth_net_offloads` and `eth_virt` bits to know whether to
//!    ask; rawpkt asks directly and takes a refused command as no answer);
//! 3. else, where DevX is refused (no kernel support, an old libmlx5), DPDK's table by PCI device:
//!    ConnectX-4 and 4 Lx, PF and VF, L2; every later device none.
//!
//! A guess from `MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW` alone would send a ConnectX-4 Lx VF whose
//! vport asks for IP or transport headers malformed WQEs.

use crate::dv::prm::{devx, InlineMode};
use crate::sys::rdma::Context;

/// PCI device ids (DPDK `PCI_DEVICE_ID_MELLANOX_CONNECTX4*`) whose WQEs must inline the L2
/// header when nothing else says so.
const CONNECTX4: u16 = 0x1013;
const CONNECTX4_VF: u16 = 0x1014;
const CONNECTX4LX: u16 = 0x1015;
const CONNECTX4LX_VF: u16 = 0x1016;

/// The mode, and where it came from (for the port's description).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decided {
    pub mode: InlineMode,
    pub source: &'static str,
    /// The device inserts VLAN tags itself (the Ethernet segment's VLAN insertion): only where
    /// DevX says `wqe_vlan_insert` and the inline mode is "not required", as DPDK's
    /// `mlx5_set_min_inline` sets `hw_vlan_insert`; by the PCI table (no DevX) never (DPDK: 0 on
    /// ConnectX-4 and 4 Lx, and on ConnectX-5 and 5 Ex, "bug, PFC may be broken"). Otherwise
    /// the driver writes the tag into the inlined header (`mlx5_txq.c` `txq_set_params`).
    pub vlan_insert: bool,
}

/// What the device answers through DevX: Ok(None) when it cannot be asked (no DevX), Err when
/// it asks for something rawpkt does not do.
fn ask_devx(ctx: &Context) -> Result<Option<(InlineMode, &'static str, bool)>, String> {
    let mut out = vec![0u8; devx::OUT_LEN];
    let cmd = devx::command(devx::QUERY_HCA_CAP, devx::OP_MOD_ETH_OFFLOAD_CAPS_CUR);
    if ctx.devx_cmd(&cmd, &mut out).is_err() {
        return Ok(None);
    }
    let vlan = devx::wqe_vlan_insert(&out);
    match devx::wqe_inline_mode(&out) {
        devx::CAP_INLINE_MODE_L2 => return Ok(Some((InlineMode::L2, "DevX HCA caps", false))),
        devx::CAP_INLINE_MODE_NOT_REQUIRED => return Ok(Some((InlineMode::None, "DevX HCA caps", vlan))),
        devx::CAP_INLINE_MODE_VPORT_CONTEXT => {}
        // Reserved: DPDK too falls back to the table.
        _ => return Ok(None),
    }
    let mut out = vec![0u8; devx::OUT_LEN];
    let cmd = devx::command(devx::QUERY_NIC_VPORT_CONTEXT, 0);
    if ctx.devx_cmd(&cmd, &mut out).is_err() {
        return Ok(None);
    }
    let v = devx::min_wqe_inline_mode(&out);
    match InlineMode::from_prm(v) {
        Some(m) => Ok(Some((m, "DevX NIC vport context", false))),
        None => Err(format!(
            "the NIC vport asks for inner (tunnel) headers inline (min_wqe_inline_mode {v}), which rawpkt does not \
             write; open the port with inline=tcp-udp or another mode if you know better"
        )),
    }
}

/// DPDK's table for a device DevX could not ask.
fn by_pci_device(id: Option<u16>) -> InlineMode {
    match id {
        Some(CONNECTX4 | CONNECTX4_VF | CONNECTX4LX | CONNECTX4LX_VF) => InlineMode::L2,
        _ => InlineMode::None,
    }
}

/// The inline mode of a port: `choice` (the spec option) first, then DevX, then the table.
pub(crate) fn decide(ctx: &Context, pci_device: Option<u16>, choice: Option<InlineMode>) -> Result<Decided, String> {
    let asked = ask_devx(ctx)?;
    if let Some(m) = choice {
        let floor = match pci_device {
            Some(CONNECTX4 | CONNECTX4_VF) => InlineMode::L2,
            _ => InlineMode::None,
        };
        let mode = m.max(floor);
        return Ok(Decided {
            mode,
            source: "the port's inline= option",
            vlan_insert: mode == InlineMode::None && asked.is_some_and(|(_, _, v)| v),
        });
    }
    if let Some((mode, source, vlan_insert)) = asked {
        return Ok(Decided {
            mode,
            source,
            vlan_insert,
        });
    }
    Ok(Decided {
        mode: by_pci_device(pci_device),
        source: "the PCI device table (no DevX)",
        vlan_insert: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_dpdks() {
        for id in [0x1013, 0x1014, 0x1015, 0x1016] {
            assert_eq!(by_pci_device(Some(id)), InlineMode::L2, "{id:#x}");
        }
        for id in [0x1017, 0x1018, 0x1019, 0x101b, 0x101d, 0xa2d6] {
            assert_eq!(by_pci_device(Some(id)), InlineMode::None, "{id:#x}");
        }
        assert_eq!(by_pci_device(None), InlineMode::None);
    }

    #[test]
    fn devx_fields_sit_where_mlx5_ifc_puts_them() {
        let mut out = vec![0u8; devx::OUT_LEN];
        devx::set_wqe_inline_mode(&mut out, devx::CAP_INLINE_MODE_VPORT_CONTEXT);
        // per_protocol_networking_offload_caps: wqe_inline_mode[0x2] at bit 18 of dword 0.
        assert_eq!(out[16..20], [0x00, 0x00, 0x10, 0x00]);
        assert_eq!(devx::wqe_inline_mode(&out), 1);
        devx::set_min_wqe_inline_mode(&mut out, 3);
        // nic_vport_context: reserved_at_0[0x5], min_wqe_inline_mode[0x3].
        assert_eq!(out[16], 0x03);
        assert_eq!(devx::min_wqe_inline_mode(&out), 3);
        // wqe_vlan_insert[0x1] at bit 7 from the top of dword 0 of the caps.
        out[16] = 0x01;
        assert!(devx::wqe_vlan_insert(&out));
        let c = devx::command(devx::QUERY_HCA_CAP, devx::OP_MOD_ETH_OFFLOAD_CAPS_CUR);
        assert_eq!(c[..8], [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x03]);
        assert_eq!(devx::opcode_of(&c), Some((0x100, 3)));
    }
}
