//! A raw AF_PACKET socket bound to one interface: how a model port reaches real Linux
//! interfaces (veth pairs in test namespaces).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct AfPacket {
    fd: OwnedFd,
    ifindex: i32,
}

const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): do not hand our own transmissions back to us.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

impl AfPacket {
    /// Binds to interface `ifindex` (`sys::if_index`); `ifname` only names it in errors. The
    /// caller looks the name up, so that it can repeat a name that does not exist as it shows
    /// user input (`spec::echo`), which this leaf does not know.
    pub fn open(ifname: &str, ifindex: u32) -> io::Result<AfPacket> {
        // SAFETY: plain socket(2) call; the result is checked and owned immediately.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ALL_BE),
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let text = if e.raw_os_error() == Some(libc::EPERM) {
                format!("AF_PACKET socket on {ifname}: {e} (needs CAP_NET_RAW)")
            } else {
                format!("AF_PACKET socket on {ifname}: {e}")
            };
            return Err(crate::context(e, text));
        }
        // SAFETY: raw is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        // SAFETY: setsockopt reads one c_int from a valid pointer; failure only means an older
        // kernel, where outgoing frames are filtered below instead.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        // The model thread is the only reader; a deep buffer rides out its scheduling gaps.
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            let bytes: libc::c_int = 8 << 20;
            // SAFETY: setsockopt reads one c_int from a valid pointer; without CAP_NET_ADMIN the
            // kernel refuses and the default size stays, which only makes drops likelier.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&bytes as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL_BE;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: bind reads exactly size_of::<sockaddr_ll>() bytes from a valid pointer.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            let text = format!("bind AF_PACKET to {ifname}: {e}");
            return Err(crate::context(e, text));
        }
        Ok(AfPacket {
            fd,
            ifindex: ifindex as i32,
        })
    }

    /// Sends one frame; returns false if the kernel did not take it (buffer full, frame over the
    /// interface MTU, link down).
    pub fn send(&mut self, frame: &[u8]) -> bool {
        // SAFETY: send reads frame.len() bytes from a valid slice.
        let rc = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        rc == frame.len() as isize
    }

    /// Frames the kernel dropped because this socket's buffer was full, since the last call
    /// (`PACKET_STATISTICS` resets on read).
    pub fn kernel_drops(&mut self) -> u64 {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into a valid tpacket_stats.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            u64::from(st.tp_drops)
        } else {
            0
        }
    }

    /// Receives one frame into `buf` without blocking; None when nothing is waiting.
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<Received> {
        loop {
            // SAFETY: sockaddr_ll is plain data.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: recvfrom writes at most buf.len() bytes into buf and at most from_len
            // bytes into `from`, both valid for writes.
            let rc = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut from_len,
                )
            };
            if rc < 0 {
                return None;
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING || from.sll_ifindex != self.ifindex {
                continue;
            }
            let len = rc as usize;
            return Some(if len > buf.len() {
                Received::Truncated(len)
            } else {
                Received::Frame(len)
            });
        }
    }
}

/// One receive: a whole frame of this length, or one longer than the buffer (its real length).
pub enum Received {
    Frame(usize),
    Truncated(usize),
}
