//! What a port's CQE timestamps count, decided as DPDK decides it (`drivers/net/mlx5/mlx5.c`
//! `mlx5_rt_timestamp_config`, `linux/mlx5_os.c`), and the clock they can be compared with.
//!
//! A ConnectX-6 Dx or later can run its clock in real-time mode, and then writes CQE timestamps
//! as `seconds << 32 | nanoseconds` of its PHC rather than ticks of its free-running counter.
//! Which one a receive queue gets:
//! 1. The kernel sets each WQ's timestamp format where it knows the formats
//!    (`MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS` from `mlx5dv_query_device`): free-running whenever
//!    the general caps' `rq_ts_format` allows it (`qp.c` `get_rq_ts_format`: FREE_RUNNING for
//!    the FR and FR_RT caps, else DEFAULT, the device's mode). So with that flag and DevX's
//!    `rq_ts_format` of FR or FR_RT: ticks.
//! 2. Else the device's mode decides: the MTUTC register's `time_stamp_mode` (DevX
//!    ACCESS_REGISTER_USER, as `mlx5_devx_cmd_register_read`).
//! 3. Where the register cannot be read, DPDK's rule: a device whose clock runs at 1 GHz
//!    (`hca_core_clock` 1 000 000 kHz) is in real-time mode (`mlx5_os.c`,
//!    `dev_freq_khz == NS_PER_S / MS_PER_S`). DevX is asked first because this guess is wrong
//!    for a 1 GHz free-running counter.
//! 4. Else ticks of `hca_core_clock`.
//!
//! In real-time mode the timestamps' time base is the PHC (the kernel's `lib/clock.c`
//! `mlx5_real_time_mode`: the PTP clock is the real-time clock then), which
//! [`Phc::now_ns`] reads through the netdev's `/dev/ptpN` (`ETHTOOL_GET_TS_INFO`).
#![allow(unsafe_code)] // the ethtool ioctl and clock_gettime on a PHC's fd

use crate::dv::prm::devx;
use crate::dv::TickClock;
use crate::sys::rdma::Context;

/// The clock, and where the decision came from (for the port's description).
pub(crate) struct Decided {
    pub clock: TickClock,
    pub source: &'static str,
}

/// The general caps' `rq_ts_format`, or None without DevX.
fn rq_ts_format(ctx: &Context) -> Option<u8> {
    let mut out = vec![0u8; devx::OUT_LEN];
    let cmd = devx::command(devx::QUERY_HCA_CAP, devx::OP_MOD_GENERAL_CAPS_CUR);
    ctx.devx_cmd(&cmd, &mut out).ok()?;
    Some(devx::rq_ts_format(&out))
}

/// The MTUTC register's `time_stamp_mode`, or None where it cannot be read.
fn mtutc_mode(ctx: &Context) -> Option<u8> {
    let mut out = vec![0u8; 16 + 32];
    ctx.devx_cmd(&devx::read_register(devx::REGISTER_MTUTC), &mut out)
        .ok()?;
    Some(devx::mtutc_time_stamp_mode(&out))
}

/// The decision above for a device of `khz` kHz whose `mlx5dv_query_device` flags are
/// `dv_flags`; None for a device that reports no clock (0 kHz).
pub(crate) fn decide(ctx: &Context, dv_flags: u64, khz: u64) -> Option<Decided> {
    let ticks = TickClock::from_khz(khz)?;
    let kernel_sets_format = dv_flags & u64::from(rdma_abi::MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS) != 0;
    let cap = rq_ts_format(ctx);
    if kernel_sets_format
        && matches!(
            cap,
            Some(devx::RQ_TS_FREE_RUNNING | devx::RQ_TS_FREE_RUNNING_AND_REAL_TIME)
        )
    {
        return Some(Decided {
            clock: ticks,
            source: "DevX rq_ts_format: the kernel asks free-running",
        });
    }
    if cap.is_some() {
        if let Some(mode) = mtutc_mode(ctx) {
            return Some(Decided {
                clock: if mode == devx::MTUTC_REAL_TIME {
                    TickClock::REAL_TIME
                } else {
                    ticks
                },
                source: "DevX MTUTC register",
            });
        }
    }
    if khz == 1_000_000 {
        return Some(Decided {
            clock: TickClock::REAL_TIME,
            source: "a 1 GHz clock (DPDK's rule without the MTUTC register)",
        });
    }
    Some(Decided {
        clock: ticks,
        source: "hca_core_clock",
    })
}

/// `struct ethtool_ts_info` (linux/ethtool.h), as far as `phc_index`.
#[repr(C)]
#[derive(Default)]
struct TsInfo {
    cmd: u32,
    so_timestamping: u32,
    phc_index: i32,
    tx_types: u32,
    tx_reserved: [u32; 3],
    rx_filters: u32,
    rx_reserved: [u32; 3],
}

const ETHTOOL_GET_TS_INFO: u32 = 0x41;

/// A PHC (`/dev/ptpN`) held open, read as a dynamic POSIX clock.
pub(crate) struct Phc {
    file: std::fs::File,
    /// `/dev/ptpN`.
    pub path: String,
}

impl Phc {
    /// The PHC of netdev `ifname` (`ETHTOOL_GET_TS_INFO` names its index); None where it has
    /// none or the kernel does not say.
    pub(crate) fn of(ifname: &str) -> Option<Phc> {
        let name = std::ffi::CString::new(ifname).ok()?;
        if name.as_bytes().len() >= libc::IFNAMSIZ {
            return None;
        }
        let mut info = TsInfo {
            cmd: ETHTOOL_GET_TS_INFO,
            ..TsInfo::default()
        };
        // SAFETY: an ifreq of zeroes is valid; the name fits (checked) with its NUL.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = (&mut info as *mut TsInfo).cast();
        // SAFETY: a datagram socket for the ioctl, closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: SIOCETHTOOL reads the ifreq and writes `info`, both live for the call.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr) };
        // SAFETY: our socket, closed once.
        unsafe { libc::close(fd) };
        if rc != 0 || info.phc_index < 0 {
            return None;
        }
        let path = format!("/dev/ptp{}", info.phc_index);
        let file = std::fs::File::open(&path).ok()?;
        let phc = Phc { file, path };
        phc.now_ns()?;
        Some(phc)
    }

    /// The PHC now, ns (its time base: TAI or UTC as whoever steers it chose).
    pub(crate) fn now_ns(&self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        // FD_TO_CLOCKID (linux/posix-timers.h): a dynamic clock named by its fd.
        let clock = ((!self.file.as_raw_fd()) << 3) | 3;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec; the fd stays open while `self` lives.
        if unsafe { libc::clock_gettime(clock as libc::clockid_t, &mut ts) } != 0 {
            return None;
        }
        Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}
