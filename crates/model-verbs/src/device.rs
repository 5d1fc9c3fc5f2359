//! What each model device reports about itself, as a ConnectX-5 (PCI 15b3:1017, part 4119) on
//! mlx5_ib reports it, and the libibverbs entry points that read it: GUIDs, RoCE GIDs, the
//! sysfs readers, the fork and string helpers.
//!
//! Values are from published `ibv_devinfo -v` output of ConnectX-5 hardware:
//! - openucx/ucx#9830 (fw 16.27.1016, board_id MT_0000000080) and open-mpi/ompi#6137 (fw
//!   16.23.1020, board_id MT_0000000008): vendor part 4119, max_qp 262144, max_qp_wr 32768,
//!   max_sge 30, max_cq/max_mr/max_pd 16777216, max_cqe 4194303; node_guid `ec0d:9a03:007d:7d1b`
//!   beside sys_image_guid `ec0d:9a03:007d:7d1a` (each PCI function has its own node GUID, the
//!   card's first function's is the system image GUID), i.e. the MAC `ec:0d:9a:7d:7d:1b` with
//!   `03:00` between its OUI and its last three bytes;
//! - openucx/ucx#5376 and #4770: `completion timestamp_mask 0x7fffffffffffffff`,
//!   `hca_core_clock 156250kHZ` (mlx5_ib_query_device: `timestamp_mask = 0x7FFFFFFFFFFFFFFF`,
//!   `hca_core_clock = MLX5_CAP_GEN(device_frequency_khz)`);
//! - openucx/ucx#10430 / #10420 (an mlx5 RoCE port): `packet_pacing_caps qp_rate_limit_min
//!   1kbps, qp_rate_limit_max 100000000kbps, supported_qp SUPPORT_RAW_PACKET`; `GID[0]
//!   fe80::a288:c2ff:feb4:87d6, RoCE v1`: the netdev's IPv6 link-local address (modified EUI-64
//!   of its MAC), once as RoCE v1 and once as RoCE v2 (mlx5_ib adds both types per address).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;

use rdma_abi::*;

use crate::global::{global, Kind, DEVS};
use crate::objects::Context;
use crate::{guard, set_errno};

/// `board_id` (the PSID), from open-mpi/ompi#6137; `fw_ver` and the part are the profile's
/// (`mlx5_model::profile::Identity`: 16.x is ConnectX-5 firmware).
pub(crate) const BOARD_ID: &str = "MT_0000000008";
/// `completion_timestamp_mask` (see the module docs); `hca_core_clock` is the profile's.
pub(crate) const TIMESTAMP_MASK: u64 = 0x7fff_ffff_ffff_ffff;
/// Packet pacing: the QP rate limits `ibv_modify_qp(IBV_QP_RATE_LIMIT)` accepts, in kbit/s
/// (mlx5_core `mlx5_rl_is_in_range`; 0 means unlimited). The model accepts them and does not
/// shape its wire.
pub(crate) const RATE_LIMIT_MIN_KBPS: u32 = 1;
pub(crate) const RATE_LIMIT_MAX_KBPS: u32 = 100_000_000;
/// Entries in each port's GID table (`gid_tbl_len`); the first two are the link-local GID.
pub(crate) const GID_TABLE_LEN: u32 = 256;

/// A device's node GUID as a host-order integer: Mellanox's `OUI:03:00:NIC` form of its MAC.
pub(crate) fn node_guid(port: usize) -> u64 {
    let m = DEVS[port].mac;
    u64::from_be_bytes([m[0], m[1], m[2], 0x03, 0x00, m[3], m[4], m[5]])
}

/// The system image GUID: the node GUID of the first function of the device's card (mlx5_0
/// for mlx5_0/1 on 3b:00.x, mlx5_2 for mlx5_2/3 on 3c:00.x).
pub(crate) fn sys_image_guid(port: usize) -> u64 {
    let slot = &DEVS[port].pci[..DEVS[port].pci.len() - 1];
    let first = DEVS.iter().position(|d| d.pci.starts_with(slot)).unwrap_or(port);
    node_guid(first)
}

/// A GUID as sysfs and `ibv_devinfo` print it: `xxxx:xxxx:xxxx:xxxx`.
pub(crate) fn guid_str(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// The port's GID at `index`: fe80::/64 with the MAC's modified EUI-64 at 0 (RoCE v1) and 1
/// (RoCE v2); zeros elsewhere (no IP address is configured on the model's netdevs).
pub(crate) fn gid(port: usize, index: u32) -> Option<([u8; 16], ibv_gid_type)> {
    let m = DEVS[port].mac;
    let ll = || {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&[m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
        g
    };
    match index {
        0 => Some((ll(), IBV_GID_TYPE_ROCE_V1)),
        1 => Some((ll(), IBV_GID_TYPE_ROCE_V2)),
        _ => None,
    }
}

/// The model port of a live context, or EINVAL.
fn ctx_port(context: *mut ibv_context) -> Result<usize, i32> {
    let g = global()?;
    if context.is_null() || !g.reg().check(context as usize, Kind::Context) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live context handed out by this library.
    Ok(unsafe { (*Context::from_ctx(context)).port })
}

/// `ibv_get_device_guid`: the node GUID in network order (`__be64`), 0 for an unknown device.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || match global().map(|g| g.port_of(device)) {
        Ok(Some(port)) => node_guid(port).to_be(),
        _ => {
            set_errno(libc::EINVAL);
            0
        }
    })
}

/// `ibv_get_device_index`: the kernel's device index (the model's device number), -1 if unknown.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    guard(-1, || match global().map(|g| g.port_of(device)) {
        Ok(Some(port)) => port as c_int,
        _ => -1,
    })
}

/// `ibv_get_sysfs_path`: where libibverbs reads sysfs from; the model's tree.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    crate::control::rawpkt_model_sysfs_root()
}

/// `ibv_read_sysfs_file` (libibverbs/sysfs.c `ibv_read_sysfs_file_at`): reads `dir/file` into
/// `buf`, a trailing newline replaced by NUL; the byte count, or -1 with errno (also when the
/// contents fill `buf` with no room for the NUL).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings from the caller (checked non-NULL).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = std::path::Path::new(std::ffi::OsStr::new(std::str::from_utf8(d.to_bytes()).unwrap_or("")))
            .join(std::str::from_utf8(f.to_bytes()).unwrap_or(""));
        // One read of at most `size` bytes, as libibverbs' single read(2); and only from a
        // regular file (sysfs attributes are), so that a FIFO named here cannot keep the
        // caller waiting nor a device feed it for ever (EINVAL).
        let data = match rawpkt_sys::file::open_read(&path).and_then(|f| {
            let mut d = Vec::with_capacity(size.min(1 << 16));
            std::io::Read::read_to_end(&mut std::io::Read::take(f, size as u64), &mut d).map(|_| d)
        }) {
            Ok(d) => d,
            Err(e) if rawpkt_sys::file::refused(&e) => {
                set_errno(libc::EINVAL);
                return -1;
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
        };
        let mut len = data.len().min(size);
        if len == 0 {
            return 0;
        }
        // SAFETY: the caller's buffer holds `size` bytes; len <= size.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        out[..len].copy_from_slice(&data[..len]);
        if out[len - 1] == b'\n' {
            len -= 1;
            out[len] = 0;
        } else if len < size {
            out[len] = 0;
        } else {
            return -1;
        }
        len as c_int
    })
}

/// `ibv_query_gid_type` (libibverbs/verbs.c): RoCE v1 or v2 by `enum ibv_gid_type_sysfs`; an
/// empty entry answers v1, as libibverbs does.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    guard(-1, || {
        let Ok(port) = ctx_port(context) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if gid_type.is_null() || port_num != 1 || index >= GID_TABLE_LEN {
            set_errno(libc::EINVAL);
            return -1;
        }
        // IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0, IBV_GID_TYPE_SYSFS_ROCE_V2 = 1.
        let t = match gid(port, index) {
            Some((_, IBV_GID_TYPE_ROCE_V2)) => 1,
            _ => 0,
        };
        // SAFETY: the caller's enum, valid for writing (checked non-NULL).
        unsafe { *gid_type = t };
        0
    })
}

fn gid_entry(port: usize, index: u32) -> Option<ibv_gid_entry> {
    let (raw, t) = gid(port, index)?;
    // SAFETY: C data, all-zero valid.
    let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
    e.gid.raw = raw;
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = t;
    e.ndev_ifindex = DEVS[port].ifindex;
    Some(e)
}

/// `_ibv_query_gid_ex` (`ibv_query_gid_ex`, libibverbs/cmd_device.c): 0, ENODATA for an empty
/// entry, EINVAL for a bad port or index, EOPNOTSUPP for flags (none are defined).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EINVAL, || {
        let Ok(port) = ctx_port(context) else {
            return libc::EINVAL;
        };
        if flags != 0 {
            return libc::EOPNOTSUPP;
        }
        if entry.is_null() || entry_size < size_of::<ibv_gid_entry>() || port_num != 1 || gid_index >= GID_TABLE_LEN {
            return libc::EINVAL;
        }
        match gid_entry(port, gid_index) {
            Some(e) => {
                // SAFETY: the caller's entry, at least sizeof(ibv_gid_entry) bytes (checked).
                unsafe { *entry = e };
                0
            }
            None => libc::ENODATA,
        }
    })
}

/// `_ibv_query_gid_table` (`ibv_query_gid_table`): the non-empty entries of every port, their
/// count, or a negative errno (-EINVAL when they do not fit).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EINVAL as isize), || {
        let Ok(port) = ctx_port(context) else {
            return -(libc::EINVAL as isize);
        };
        if flags != 0 {
            return -(libc::EOPNOTSUPP as isize);
        }
        if entry_size < size_of::<ibv_gid_entry>() || (entries.is_null() && max_entries > 0) {
            return -(libc::EINVAL as isize);
        }
        let all: Vec<ibv_gid_entry> = (0..GID_TABLE_LEN).filter_map(|i| gid_entry(port, i)).collect();
        if all.len() > max_entries {
            return -(libc::EINVAL as isize);
        }
        for (i, e) in all.iter().enumerate() {
            // SAFETY: the caller's array of max_entries entries of entry_size bytes; i < it.
            unsafe { *entries.cast::<u8>().add(i * entry_size).cast::<ibv_gid_entry>() = *e };
        }
        all.len() as isize
    })
}

/// `ibv_query_pkey`: an Ethernet port's one P_Key, the default 0xffff (big-endian in `pkey`).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        if ctx_port(context).is_err() || pkey.is_null() || port_num != 1 || index != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's __be16 (checked non-NULL).
        unsafe { *pkey = 0xffffu16.to_be() };
        0
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order) in the table, -1 if absent.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    guard(-1, || {
        if ctx_port(context).is_ok() && port_num == 1 && u16::from_be(pkey) == 0xffff {
            0
        } else {
            set_errno(libc::EINVAL);
            -1
        }
    })
}

/// `ibv_fork_init`: 0. The model's memory is ordinary process memory; nothing is pinned
/// against a child's copy-on-write.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: IBV_FORK_UNNEEDED, what libibverbs answers on a kernel that
/// copes with fork by itself.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    IBV_FORK_UNNEEDED
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `verbs_register_driver_34`: another provider (libefa, pulled in by perftest) registers itself
/// from its constructor. The model's devices are its own; the registration is accepted and unused.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

fn static_str(s: &'static CStr) -> *const c_char {
    s.as_ptr()
}

/// `ibv_node_type_str` (libibverbs/enum_strs.c).
#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    static_str(match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    })
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    static_str(match s {
        0 => c"no state change (NOP)",
        1 => c"down",
        2 => c"init",
        3 => c"armed",
        4 => c"active",
        5 => c"active defer",
        _ => c"unknown",
    })
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(s: c_int) -> *const c_char {
    const S: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    static_str(
        usize::try_from(s)
            .ok()
            .and_then(|i| S.get(i))
            .copied()
            .unwrap_or(c"unknown"),
    )
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(e: c_int) -> *const c_char {
    const S: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    static_str(
        usize::try_from(e)
            .ok()
            .and_then(|i| S.get(i))
            .copied()
            .unwrap_or(c"unknown"),
    )
}

/// Every `enum ibv_rate` with its multiple of 2.5 Gb/s (-1 for the rates that are none) and its
/// Mb/s, as libibverbs/verbs.c tabulates them (`ibv_rate_to_mult`, `ibv_rate_to_mbps` and their
/// inverses).
const RATES: [(ibv_rate, c_int, c_int); 23] = [
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    RATES.iter().find(|r| r.2 == mbps).map_or(IBV_RATE_MAX, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_as_libibverbs_tabulates_them() {
        assert_eq!(ibv_rate_to_mult(IBV_RATE_40_GBPS), 16);
        assert_eq!(mult_to_ibv_rate(16), IBV_RATE_40_GBPS);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_100_GBPS), -1, "not a multiple of 2.5 Gb/s");
        assert_eq!(mult_to_ibv_rate(-1), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
        assert_eq!(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
        assert_eq!(mbps_to_ibv_rate(100000), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
        for r in RATES {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(r.0)), r.0);
        }
    }

    #[test]
    fn guids_and_gids_from_the_mac() {
        assert_eq!(guid_str(node_guid(1)), "024d:4c03:0035:0001");
        assert_eq!(sys_image_guid(1), node_guid(0));
        assert_eq!(sys_image_guid(3), node_guid(2));
        let (g, t) = gid(1, 1).unwrap();
        assert_eq!(t, IBV_GID_TYPE_ROCE_V2);
        assert_eq!(std::net::Ipv6Addr::from(g).to_string(), "fe80::4d:4cff:fe35:1");
        assert!(gid(1, 2).is_none());
    }
}
