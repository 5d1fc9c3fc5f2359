//! AF_XDP sockets (`socket(AF_XDP)`), their UMEM registration, ring set-up and `mmap`, `bind`,
//! the wake-up syscalls, and statistics: the syscall half of `crate::xsk` and `crate::xdp`. The ring protocol
//! itself (producer/consumer indices) lives in `xsk/ring.rs`.
//!
//! Layouts are those of `include/uapi/linux/if_xdp.h` (Linux 6.x) and are checked below by const
//! asserts against the sizes and offsets the kernel uses; the set-up order follows
//! `Documentation/networking/af_xdp.rst` and libxdp's `xsk_socket__create` (UMEM, fill and
//! completion rings, RX/TX rings, `XDP_MMAP_OFFSETS`, `mmap`, `bind`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const AF_XDP: libc::c_int = 44;
pub const SOL_XDP: libc::c_int = 283;

// Socket options (if_xdp.h).
pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub const XDP_RX_RING: libc::c_int = 2;
pub const XDP_TX_RING: libc::c_int = 3;
pub const XDP_UMEM_REG: libc::c_int = 4;
pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub const XDP_STATISTICS: libc::c_int = 7;
pub const XDP_OPTIONS: libc::c_int = 8;
/// Frames one `sendto` may send in copy mode (`xs->max_tx_budget`, Linux 6.17+). Before it, and
/// by default, `__xsk_generic_xmit` stops after `TX_BATCH_SIZE` (32) descriptors with EAGAIN.
pub const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

// `sxdp_flags` of bind.
pub const XDP_COPY: u16 = 1 << 1;
pub const XDP_ZEROCOPY: u16 = 1 << 2;
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

/// `flags` word of a ring: the kernel wants a syscall to make progress.
pub const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;
pub const XDP_OPTIONS_ZEROCOPY: u32 = 1 << 0;

// mmap page offsets of the four rings.
pub const XDP_PGOFF_RX_RING: libc::off_t = 0;
pub const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
pub const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
pub const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `struct xdp_umem_reg` as of Linux 6.8 (with `tx_metadata_len`). Older kernels take the
/// 24-byte v1 prefix or the padded 32-byte v2; the tail here is zero, which every version reads
/// as "no metadata" (net/xdp/xsk.c, `xsk_setsockopt`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct UmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_desc`: one RX or TX descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<SockaddrXdp>() == 16);
    assert!(offset_of!(SockaddrXdp, ifindex) == 4);
    assert!(offset_of!(SockaddrXdp, queue_id) == 8);
    assert!(offset_of!(SockaddrXdp, shared_umem_fd) == 12);
    assert!(size_of::<RingOffset>() == 32);
    assert!(size_of::<MmapOffsets>() == 128);
    assert!(offset_of!(MmapOffsets, fr) == 64);
    assert!(offset_of!(MmapOffsets, cr) == 96);
    assert!(size_of::<UmemReg>() == 32);
    assert!(offset_of!(UmemReg, chunk_size) == 16);
    assert!(offset_of!(UmemReg, flags) == 24);
    assert!(size_of::<XdpStatistics>() == 48);
    assert!(size_of::<XdpDesc>() == 16);
    assert!(offset_of!(XdpDesc, len) == 8);
};

/// A fresh, unbound AF_XDP socket.
pub fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor the kernel just created for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points to a live, initialised T of exactly the size passed; the kernel only
    // reads it during the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: &impl AsRawFd, opt: libc::c_int) -> io::Result<T> {
    let mut val = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: val is a live T of `len` bytes that the kernel may write during the call; T is
    // plain old data for which every byte pattern is valid.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), SOL_XDP, opt, (&mut val as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(val)
    }
}

/// `XDP_UMEM_REG`: registers `[addr, addr + len)` as the socket's UMEM in `chunk`-byte frames.
/// The memory must stay mapped until the socket is closed (the kernel pins the pages).
pub fn umem_reg(fd: &OwnedFd, addr: u64, len: u64, chunk: u32, headroom: u32) -> io::Result<()> {
    let reg = UmemReg {
        addr,
        len,
        chunk_size: chunk,
        headroom,
        ..UmemReg::default()
    };
    setsockopt(fd, XDP_UMEM_REG, &reg)
}

/// Sets the size (descriptors, a power of two) of one of the four rings.
pub fn ring_size(fd: &OwnedFd, which: libc::c_int, size: u32) -> io::Result<()> {
    setsockopt(fd, which, &size)
}

pub fn mmap_offsets(fd: &OwnedFd) -> io::Result<MmapOffsets> {
    getsockopt(fd, XDP_MMAP_OFFSETS)
}

pub fn statistics(fd: RawFd) -> io::Result<XdpStatistics> {
    getsockopt(&fd, XDP_STATISTICS)
}

/// Whether the bound socket runs in zero-copy mode (`XDP_OPTIONS`, Linux 5.3+).
pub fn is_zerocopy(fd: &OwnedFd) -> io::Result<bool> {
    getsockopt::<u32>(fd, XDP_OPTIONS).map(|f| f & XDP_OPTIONS_ZEROCOPY != 0)
}

/// Maps one ring of `len` bytes at page offset `pgoff`.
pub fn mmap_ring(fd: &OwnedFd, len: usize, pgoff: libc::off_t) -> io::Result<*mut u8> {
    // SAFETY: a shared mapping of the socket's ring at a kernel-chosen address aliases no Rust
    // object; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            pgoff,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// Unmaps a ring mapped by [`mmap_ring`].
///
/// # Safety
/// `ptr`/`len` must be exactly a live mapping from `mmap_ring`, and nothing may use it afterwards.
pub unsafe fn munmap_ring(ptr: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        libc::munmap(ptr.cast(), len);
    }
}

pub fn bind(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sa = SockaddrXdp {
        family: AF_XDP as u16,
        flags,
        ifindex,
        queue_id: queue,
        shared_umem_fd: 0,
    };
    // SAFETY: sa is a live sockaddr_xdp of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const SockaddrXdp).cast(),
            std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Lets one copy-mode `sendto` send up to `budget` frames. The kernel takes 32 ..= the TX ring's
/// size and answers EACCES outside that range or before the TX ring exists
/// (`xsk_setsockopt`, net/xdp/xsk.c); kernels before 6.17 answer ENOPROTOOPT.
pub fn set_tx_budget(fd: &OwnedFd, budget: u32) -> io::Result<()> {
    setsockopt(fd, XDP_MAX_TX_SKB_BUDGET, &budget)
}

/// TX wake-up: `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`, as libxdp's samples and DPDK's
/// `af_xdp` PMD do (`kick_tx`). Returns the errno on failure; EAGAIN, EBUSY and ENOBUFS mean
/// "the kernel is busy, try again later" and are not errors.
#[inline]
pub fn kick_tx(fd: RawFd) -> Result<(), i32> {
    // SAFETY: a zero-length send with null buffer and address; the kernel reads nothing.
    let r = unsafe { libc::sendto(fd, std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
    if r < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

/// RX wake-up when the fill ring asks for one: `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL,
/// NULL)` (DPDK `af_xdp_rx_zc`, xdpsock `rx_drop`). Returns the errno on failure: ENXIO once the
/// interface is gone (the socket unbound), ENETDOWN while it is down (net/xdp/xsk.c
/// `__xsk_recvmsg`).
#[inline]
pub fn kick_rx(fd: RawFd) -> Result<(), i32> {
    // SAFETY: a zero-length receive into a null buffer; the kernel writes nothing.
    let r = unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

/// Waits up to `timeout_ms` for the socket to become readable (`poll(POLLIN)`); returns whether
/// it did.
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, count 1.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) > 0 }
}
