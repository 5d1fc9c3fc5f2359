//! What an `mlx5:`/`verbs:` port's driver found on the device and chose by, as data
//! ([`DeviceReport`]): what `Port::describe` says in one line, for a program that checks or
//! records it (the `rawpkt-selftest` tool writes it into its JSON report).

use std::sync::atomic::{AtomicU32, Ordering};

use rdma_abi::*;

use crate::sys::rdma::Context;

/// The device behind an `mlx5:`/`verbs:` port and every capability the driver chose by, read
/// when the port opened ([`report`]). The names of flags and modes are rdma-core's and the PRM's
/// (`MLX5DV_CONTEXT_FLAGS_CQE_V1` is `"CQE_V1"`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DeviceReport {
    /// The RDMA device, `mlx5_0`.
    pub ibdev: String,
    /// Its port, from 1.
    pub port_num: u8,
    /// The netdev on that port, if sysfs shows one.
    pub netdev: Option<String>,
    /// The PCI address (`0000:3b:00.0`).
    pub pci: Option<String>,
    /// The PCI device id (0x1017 for a ConnectX-5), from sysfs.
    pub pci_device_id: Option<u16>,
    /// `ibv_query_device`: vendor id, part id, hardware version, firmware version.
    pub vendor_id: u32,
    /// `vendor_part_id` (4119 for a ConnectX-5).
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `fw_ver`, as the device says it.
    pub fw_ver: String,
    /// sysfs `board_id` and `hca_type` of the RDMA device.
    pub board_id: Option<String>,
    /// sysfs `hca_type` (`MT4119`).
    pub hca_type: Option<String>,
    /// The netdev's MAC.
    pub mac: Option<[u8; 6]>,
    /// The netdev's MTU when the port opened (1500 when unknown).
    pub mtu: u32,
    /// The port's state (`ACTIVE`, `DOWN`, ...).
    pub link_state: &'static str,
    /// The link's speed, Gb/s (0 when unknown).
    pub speed_gbps: f64,
    /// `"dv"` (Direct Verbs) or `"verbs"`.
    pub datapath: &'static str,
    /// Why an `mlx5:` port runs on ibverbs (the DV probe's answer); None on the DV datapath and
    /// on `verbs:` ports.
    pub dv_refused: Option<String>,
    /// `mlx5dv_query_device` flags by name (`CQE_V1`, `MPW_ALLOWED`, `ENHANCED_MPW`,
    /// `REAL_TIME_TS`, ...).
    pub dv_flags: Vec<&'static str>,
    /// What each DevX command the driver may ask answered: (command, `"ok"` or the error).
    pub devx: Vec<(&'static str, String)>,
    /// The send WQEs' inline mode (`none`, `l2`, `ip`, `tcp-udp`), DV only.
    pub inline_mode: Option<&'static str>,
    /// Where it came from (`DevX HCA caps`, `the PCI device table (no DevX)`, ...).
    pub inline_source: Option<&'static str>,
    /// Enhanced multi-packet send WQEs are used.
    pub enhanced_mpw: bool,
    /// The device inserts VLAN tags (else the driver inlines the tagged header).
    pub vlan_insert: bool,
    /// `mlx5dv_qp.bf.size` of the last send queue made on the port (None before one): the
    /// BlueFlame register half the doorbell is written to.
    pub bf_size: Option<u32>,
    /// WQEBBs of that send queue's ring.
    pub sq_wqe_cnt: Option<u32>,
    /// Striding RQ caps (`mlx5dv_striding_rq_caps`); None where the device reports none.
    pub striding: Option<StridingCaps>,
    /// What an `rx_striding` queue is on this device: `"per-stride"` (a buffer per stride),
    /// `"cyclic"` (firmware whose fewest strides per WQE is 2^9: a cyclic queue instead), or
    /// `"none"`.
    pub striding_layout: &'static str,
    /// CQE compression caps (`cqe_comp_caps`): most CQEs per session, and the mini-CQE formats
    /// by name (`HASH`, `CSUM`, `CSUM_STRIDX`); None where the device reports none.
    pub cqe_compression: Option<(u32, Vec<&'static str>)>,
    /// `hca_core_clock`, kHz.
    pub hca_core_clock_khz: u64,
    /// What receive timestamps count: `"free-running"` (ticks) or `"real-time"`; None without a
    /// clock or on ibverbs.
    pub clock_mode: Option<&'static str>,
    /// Where that decision came from (`DevX MTUTC register`, `hca_core_clock`, ...).
    pub clock_source: Option<&'static str>,
    /// The netdev's PHC (`/dev/ptp3`), the time base of real-time timestamps; None where the
    /// clock is free-running or the netdev names none.
    pub phc: Option<String>,
    /// `ibv_query_device_ex` raw packet caps by name (`CVLAN_STRIPPING`, `SCATTER_FCS`,
    /// `IP_CSUM`, `DELAY_DROP`).
    pub raw_packet_caps: Vec<&'static str>,
    /// The largest frame the port sends (MTU + 18).
    pub max_frame: u32,
    /// The flow rules the port installs once its receive queues exist, defaults first.
    pub rules: Vec<String>,
}

/// A device's striding RQ caps as `mlx5dv_query_device` reports them
/// (`mlx5dv_striding_rq_caps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StridingCaps {
    /// Smallest stride, log2 bytes.
    pub min_log_stride_bytes: u32,
    /// Largest stride, log2 bytes.
    pub max_log_stride_bytes: u32,
    /// Fewest strides per WQE, log2 (9 on firmware without `ext_stride_num_range`).
    pub min_log_num_strides: u32,
    /// Most strides per WQE, log2.
    pub max_log_num_strides: u32,
    /// QP types whose WQs may stride, bit `ibv_qp_type` set for each (bit 8: RAW_PACKET).
    pub supported_qpts: u32,
}

/// What [`DeviceReport`] knows only once a send queue exists.
#[derive(Default)]
pub(crate) struct SqSeen {
    bf_size: AtomicU32,
    wqe_cnt: AtomicU32,
}

impl SqSeen {
    pub(crate) fn record(&self, bf_size: u32, wqe_cnt: u32) {
        self.bf_size.store(bf_size, Ordering::Relaxed);
        self.wqe_cnt.store(wqe_cnt, Ordering::Relaxed);
    }

    pub(crate) fn fill(&self, r: &mut DeviceReport) {
        let nz = |v: u32| (v != 0).then_some(v);
        r.bf_size = nz(self.bf_size.load(Ordering::Relaxed));
        r.sq_wqe_cnt = nz(self.wqe_cnt.load(Ordering::Relaxed));
    }
}

/// The report of `port`, an `mlx5:` or `verbs:` port; None for other kinds.
///
/// ```no_run
/// // Needs a ConnectX (or the model library, through PortOptions::rdma_core).
/// let port = rawpkt::open("mlx5:mlx5_0/1").unwrap();
/// let r = rawpkt::mlx5::report(&port).unwrap();
/// println!("{} fw {}: inline {:?} from {:?}", r.ibdev, r.fw_ver, r.inline_mode, r.inline_source);
/// assert!(rawpkt::mlx5::report(&rawpkt::open("model:report-doc/0").unwrap()).is_none());
/// ```
pub fn report(port: &crate::Port) -> Option<DeviceReport> {
    let p = port.backend().as_any().downcast_ref::<super::port::Mlx5Port>()?;
    Some(p.report())
}

/// `flags` by the names of `table`.
pub(crate) fn names(flags: u64, table: &[(u32, &'static str)]) -> Vec<&'static str> {
    table
        .iter()
        .filter(|(bit, _)| flags & u64::from(*bit) != 0)
        .map(|(_, n)| *n)
        .collect()
}

pub(crate) const DV_FLAGS: [(u32, &str); 8] = [
    (MLX5DV_CONTEXT_FLAGS_CQE_V1, "CQE_V1"),
    (MLX5DV_CONTEXT_FLAGS_OBSOLETE, "OBSOLETE"),
    (MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED, "MPW_ALLOWED"),
    (MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW, "ENHANCED_MPW"),
    (MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP, "CQE_128B_COMP"),
    (MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD, "CQE_128B_PAD"),
    (
        MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE,
        "PACKET_BASED_CREDIT_MODE",
    ),
    (MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS, "REAL_TIME_TS"),
];

pub(crate) const RAW_PACKET_CAPS: [(u32, &str); 4] = [
    (IBV_RAW_PACKET_CAP_CVLAN_STRIPPING, "CVLAN_STRIPPING"),
    (IBV_RAW_PACKET_CAP_SCATTER_FCS, "SCATTER_FCS"),
    (IBV_RAW_PACKET_CAP_IP_CSUM, "IP_CSUM"),
    (IBV_RAW_PACKET_CAP_DELAY_DROP, "DELAY_DROP"),
];

pub(crate) const COMP_FORMATS: [(u32, &str); 3] = [
    (MLX5DV_CQE_RES_FORMAT_HASH, "HASH"),
    (MLX5DV_CQE_RES_FORMAT_CSUM, "CSUM"),
    (MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX, "CSUM_STRIDX"),
];

/// What the DevX commands the driver may send answer on `ctx`: `"ok"`, or the error.
pub(crate) fn devx_answers(ctx: &Context) -> Vec<(&'static str, String)> {
    use crate::dv::prm::devx;
    let cmds: [(&str, [u8; devx::IN_LEN]); 4] = [
        (
            "query_hca_cap_general",
            devx::command(devx::QUERY_HCA_CAP, devx::OP_MOD_GENERAL_CAPS_CUR),
        ),
        (
            "query_hca_cap_eth",
            devx::command(devx::QUERY_HCA_CAP, devx::OP_MOD_ETH_OFFLOAD_CAPS_CUR),
        ),
        (
            "query_nic_vport_context",
            devx::command(devx::QUERY_NIC_VPORT_CONTEXT, 0),
        ),
        ("access_register_mtutc", devx::read_register(devx::REGISTER_MTUTC)),
    ];
    cmds.iter()
        .map(|(name, cmd)| {
            let mut out = vec![0u8; devx::OUT_LEN];
            let a = match ctx.devx_cmd(cmd, &mut out) {
                Ok(()) => "ok".to_string(),
                Err(e) => std::io::Error::from_raw_os_error(e.errno).to_string(),
            };
            (*name, a)
        })
        .collect()
}

/// A C string of a fixed array, up to its NUL.
pub(crate) fn c_text(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
