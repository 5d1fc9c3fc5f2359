//! Network-interface facts through ioctls on a socket of the calling thread's network namespace
//! (not sysfs, which shows the namespace of whoever mounted it): flags, MAC, queue counts
//! (`ETHTOOL_GCHANNELS`), the list of interfaces; and entering a named namespace for a while.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `struct ifreq` with the union as raw bytes (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

/// `struct ethtool_channels` (include/uapi/linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

const _: () = {
    assert!(std::mem::size_of::<IfReq>() == 40);
    assert!(std::mem::size_of::<EthtoolChannels>() == 36);
};

fn dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(name: &str) -> io::Result<IfReq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"));
    }
    let mut r = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: [0; 24],
    };
    r.name[..name.len()].copy_from_slice(name.as_bytes());
    Ok(r)
}

fn ioctl(req: libc::c_ulong, r: &mut IfReq) -> io::Result<()> {
    let s = dgram_socket()?;
    // SAFETY: r is a live ifreq the kernel reads and writes within its 40 bytes; for
    // SIOCETHTOOL its data pointer points to a live ethtool struct set by the caller.
    if unsafe { libc::ioctl(s.as_raw_fd(), req as _, r as *mut IfReq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SIOCGIFFLAGS`.
pub fn flags(name: &str) -> io::Result<u32> {
    let mut r = ifreq(name)?;
    ioctl(libc::SIOCGIFFLAGS as _, &mut r)?;
    Ok(u32::from(u16::from_ne_bytes([r.data[0], r.data[1]])))
}

pub fn is_up(name: &str) -> io::Result<bool> {
    flags(name).map(|f| f & libc::IFF_UP as u32 != 0)
}

/// `SIOCGIFHWADDR`: the interface's MAC address.
pub fn mac(name: &str) -> io::Result<[u8; 6]> {
    let mut r = ifreq(name)?;
    ioctl(libc::SIOCGIFHWADDR as _, &mut r)?;
    // struct sockaddr: sa_family (2 bytes), then the address.
    let mut m = [0u8; 6];
    m.copy_from_slice(&r.data[2..8]);
    Ok(m)
}

/// Receive queues in use: `max(rx_count, combined_count)` of `ETHTOOL_GCHANNELS`, or None when
/// the driver does not report channels.
pub fn rx_queues(name: &str) -> io::Result<Option<u32>> {
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    let mut r = ifreq(name)?;
    r.data[..8].copy_from_slice(&((&mut ch as *mut EthtoolChannels) as u64).to_ne_bytes());
    match ioctl(SIOCETHTOOL, &mut r) {
        Ok(()) => Ok(Some(ch.rx_count.max(ch.combined_count).max(1))),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The interface's driver (`ETHTOOL_GDRVINFO`'s `driver`: "veth", "mlx5_core"), or None when
/// it does not say.
pub fn driver(name: &str) -> Option<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x3;
    // struct ethtool_drvinfo (include/uapi/linux/ethtool.h): cmd, then driver[32], the rest
    // (version, firmware, bus, erom, reserved, five u32 counts) unread: 196 bytes in all.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    let mut r = ifreq(name).ok()?;
    r.data[..8].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    ioctl(SIOCETHTOOL, &mut r).ok()?;
    let d = &info[4..36];
    let d = &d[..d.iter().position(|&b| b == 0).unwrap_or(d.len())];
    (!d.is_empty()).then(|| String::from_utf8_lossy(d).into_owned())
}

/// The link speed in Mb/s (`ETHTOOL_GSET`, what `/sys/class/net/IF/speed` reads, in the calling
/// thread's namespace), or None when the driver reports none or an unknown one (a link that
/// is down, a driver without link settings).
pub fn speed_mbps(name: &str) -> Option<u32> {
    const ETHTOOL_GSET: u32 = 0x1;
    // struct ethtool_cmd (include/uapi/linux/ethtool.h), 44 bytes: cmd, supported, advertising,
    // speed (u16 at 12), duplex .. mdio_support, maxtxpkt, maxrxpkt, speed_hi (u16 at 28), ...
    let mut cmd = [0u8; 44];
    cmd[..4].copy_from_slice(&ETHTOOL_GSET.to_ne_bytes());
    let mut r = ifreq(name).ok()?;
    r.data[..8].copy_from_slice(&(cmd.as_mut_ptr() as u64).to_ne_bytes());
    ioctl(SIOCETHTOOL, &mut r).ok()?;
    let speed =
        u32::from(u16::from_ne_bytes([cmd[12], cmd[13]])) | u32::from(u16::from_ne_bytes([cmd[28], cmd[29]])) << 16;
    // SPEED_UNKNOWN is -1.
    (speed != 0 && speed != u32::MAX).then_some(speed)
}

/// Names of the interfaces of the calling thread's namespace.
pub fn names() -> Vec<String> {
    // SAFETY: if_nameindex returns a heap array terminated by a zero entry, or null; it is
    // read before if_freenameindex releases it.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            out.push(std::ffi::CStr::from_ptr((*p).if_name).to_string_lossy().into_owned());
            p = p.add(1);
        }
        libc::if_freenameindex(list);
        out
    }
}

/// The calling thread's network namespace, as an open descriptor.
pub fn current_netns() -> io::Result<OwnedFd> {
    std::fs::File::open("/proc/thread-self/ns/net").map(OwnedFd::from)
}

/// `setns(fd, CLONE_NEWNET)` for the calling thread.
pub fn enter_netns(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fd is a live namespace descriptor; setns only changes this thread's namespace.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The namespace a descriptor names, as its nsfs device and inode.
pub fn ns_id(fd: &OwnedFd) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed, live stat buffer.
    unsafe {
        let mut s: libc::stat = std::mem::zeroed();
        (libc::fstat(fd.as_raw_fd(), &mut s) == 0).then_some((s.st_dev, s.st_ino))
    }
}

/// Whether two namespace descriptors name the same namespace (same nsfs inode).
pub fn same_ns(a: &OwnedFd, b: &OwnedFd) -> bool {
    matches!((ns_id(a), ns_id(b)), (Some(x), Some(y)) if x == y)
}

/// Runs `f` with the calling thread in namespace `ns` (if it is not there already), then
/// returns the thread to where it was.
pub fn in_netns<T>(ns: &OwnedFd, f: impl FnOnce() -> T) -> io::Result<T> {
    let here = current_netns()?;
    if same_ns(&here, ns) {
        return Ok(f());
    }
    enter_netns(ns)?;
    let out = f();
    enter_netns(&here)?;
    Ok(out)
}
