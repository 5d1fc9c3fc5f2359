//! The Linux neighbour table (ARP, IPv6 neighbour discovery) through rtnetlink, in the calling
//! thread's network namespace: read an entry (`RTM_GETNEIGH` dump), and ask the kernel to resolve
//! one (`RTM_NEWNEIGH` with `NTF_USE`, which `neigh_add` in net/core/neighbour.c turns into
//! `neigh_event_send`: the kernel sends its ARP requests or neighbour solicitations as for a
//! packet of its own). The formats are include/uapi/linux/{netlink,rtnetlink,neighbour}.h.
#![allow(unsafe_code)]

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NTF_USE: u8 = 0x01;

/// Neighbour states (`NUD_*`).
pub const NUD_INCOMPLETE: u16 = 0x01;
pub const NUD_REACHABLE: u16 = 0x02;
pub const NUD_STALE: u16 = 0x04;
pub const NUD_DELAY: u16 = 0x08;
pub const NUD_PROBE: u16 = 0x10;
pub const NUD_FAILED: u16 = 0x20;
pub const NUD_NOARP: u16 = 0x40;
pub const NUD_PERMANENT: u16 = 0x80;
/// States whose link-layer address can be used: confirmed, or kept while being confirmed again.
const USABLE: u16 = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

/// One entry of the table: its state and link-layer address, if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub state: u16,
    pub mac: Option<[u8; 6]>,
}

impl Entry {
    /// Whether its MAC can be sent to (REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP).
    pub fn usable(&self) -> Option<[u8; 6]> {
        self.mac.filter(|_| self.state & USABLE != 0)
    }
}

struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

fn family(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

impl Netlink {
    fn open() -> io::Result<Netlink> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A kernel that never answers must not hang the caller: reads time out.
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 500_000,
        };
        // SAFETY: tv is a live timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Netlink { fd, seq: 1 })
    }

    /// A message: nlmsghdr, ndmsg, then the attributes, each padded to 4 bytes.
    fn message(&mut self, kind: u16, flags: u16, ndm: (u8, i32, u16, u8), attrs: &[(u16, &[u8])]) -> Vec<u8> {
        self.seq += 1;
        let mut m = vec![0u8; 16];
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[6..8].copy_from_slice(&flags.to_ne_bytes());
        m[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        // struct ndmsg: family, pad1, pad2, ifindex, state, flags, type.
        m.push(ndm.0);
        m.extend_from_slice(&[0, 0, 0]);
        m.extend_from_slice(&ndm.1.to_ne_bytes());
        m.extend_from_slice(&ndm.2.to_ne_bytes());
        m.push(ndm.3);
        m.push(0);
        for (t, data) in attrs {
            m.extend_from_slice(&(4 + data.len() as u16).to_ne_bytes());
            m.extend_from_slice(&t.to_ne_bytes());
            m.extend_from_slice(data);
            m.resize(m.len().next_multiple_of(4), 0);
        }
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    fn send(&self, m: &[u8]) -> io::Result<()> {
        // SAFETY: the kernel socket address: family AF_NETLINK, pid 0, groups 0.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: m and to are live for the call, with the lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                m.as_ptr().cast(),
                m.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads replies to the last request, handing each message (type, payload) to `f`, until
    /// its ACK or the end of its dump; an error reply is returned as the errno it carries.
    fn replies(&self, mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        let mut buf = vec![0u8; 32768];
        loop {
            // SAFETY: buf is live and writable for its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut at = 0usize;
            let n = n as usize;
            while at + 16 <= n {
                let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
                let seq = u32::from_ne_bytes(buf[at + 8..at + 12].try_into().expect("4 bytes"));
                if len < 16 || at + len > n {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "short netlink message"));
                }
                let body = &buf[at + 16..at + len];
                at += len.next_multiple_of(4);
                if seq != self.seq {
                    continue;
                }
                match kind {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let e = body
                            .get(..4)
                            .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
                        return if e == 0 {
                            Ok(())
                        } else {
                            Err(io::Error::from_raw_os_error(-e))
                        };
                    }
                    k => f(k, body),
                }
            }
        }
    }
}

/// The entry for `ip` on interface `ifindex`, if the table has one.
pub fn lookup(ifindex: u32, ip: IpAddr) -> io::Result<Option<Entry>> {
    let mut nl = Netlink::open()?;
    let m = nl.message(RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_DUMP, (family(ip), 0, 0, 0), &[]);
    nl.send(&m)?;
    let want = ip_bytes(ip);
    let mut found = None;
    nl.replies(|kind, body| {
        if kind != RTM_NEWNEIGH || body.len() < 12 {
            return;
        }
        let index = i32::from_ne_bytes(body[4..8].try_into().expect("4 bytes"));
        if index as u32 != ifindex {
            return;
        }
        let state = u16::from_ne_bytes([body[8], body[9]]);
        let (mut dst, mut mac) = (None, None);
        let mut at = 12;
        while at + 4 <= body.len() {
            let len = usize::from(u16::from_ne_bytes([body[at], body[at + 1]]));
            let t = u16::from_ne_bytes([body[at + 2], body[at + 3]]);
            if len < 4 || at + len > body.len() {
                break;
            }
            let data = &body[at + 4..at + len];
            match t {
                NDA_DST => dst = Some(data),
                NDA_LLADDR if data.len() == 6 => mac = data.try_into().ok(),
                _ => {}
            }
            at += len.next_multiple_of(4);
        }
        if dst == Some(&want[..]) {
            found = Some(Entry { state, mac });
        }
    })?;
    Ok(found)
}

/// Asks the kernel to resolve `ip` on interface `ifindex` (`NTF_USE`: it probes as for a
/// packet of its own). Needs CAP_NET_ADMIN.
pub fn solicit(ifindex: u32, ip: IpAddr) -> io::Result<()> {
    let mut nl = Netlink::open()?;
    let dst = ip_bytes(ip);
    let m = nl.message(
        RTM_NEWNEIGH,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
        (family(ip), ifindex as i32, 0, NTF_USE),
        &[(NDA_DST, &dst)],
    );
    nl.send(&m)?;
    nl.replies(|_, _| {})
}

/// The MAC of neighbour `ip` on interface `ifindex`: from the table if it is usable there, else
/// after asking the kernel to resolve it and polling the table every 10 ms for at most `wait`.
/// Fails in one line: not permitted, no answer (the entry FAILED), or no answer in time.
pub fn resolve(ifindex: u32, ip: IpAddr, wait: Duration) -> io::Result<[u8; 6]> {
    if let Some(mac) = lookup(ifindex, ip)?.and_then(|e| e.usable()) {
        return Ok(mac);
    }
    solicit(ifindex, ip)?;
    let end = Instant::now() + wait;
    let mut asked = Instant::now();
    loop {
        let e = lookup(ifindex, ip)?;
        if let Some(mac) = e.and_then(|e| e.usable()) {
            return Ok(mac);
        }
        if e.is_some_and(|e| e.state & NUD_FAILED != 0) && asked.elapsed() > Duration::from_millis(100) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{ip} did not answer (the neighbour entry is FAILED)"),
            ));
        }
        if Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{ip} did not answer within {:.1} s", wait.as_secs_f64()),
            ));
        }
        // An entry dropped (garbage collected, or a FAILED one from before) is asked for again.
        if e.is_none() {
            solicit(ifindex, ip)?;
            asked = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_laid_out_as_the_kernel_reads_them() {
        let mut nl = Netlink {
            fd: std::fs::File::open("/dev/null").expect("/dev/null").into(),
            seq: 0,
        };
        let m = nl.message(
            RTM_NEWNEIGH,
            NLM_F_REQUEST,
            (2, 7, 0, NTF_USE),
            &[(NDA_DST, &[10, 0, 0, 1])],
        );
        // nlmsghdr 16 + ndmsg 12 + rtattr 4 + 4 bytes of address.
        assert_eq!(m.len(), 36);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 36);
        assert_eq!(
            (m[16], i32::from_ne_bytes(m[20..24].try_into().unwrap()), m[26]),
            (2, 7, NTF_USE)
        );
        assert_eq!(&m[28..36], &[8, 0, 1, 0, 10, 0, 0, 1][..]);
    }
}
