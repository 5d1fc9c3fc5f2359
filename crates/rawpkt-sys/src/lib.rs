//! rawpkt's syscall corner: thin, checked wrappers over libc and rdma-core that the engine, the
//! device model and the tools use safely (as quinn-udp holds quinn's socket calls). A leaf: it
//! depends on no other crate of the workspace but rdma-core's types (`rdma-abi`).
//!
//! - [`region`]: memory mappings a NIC can reach (hugepages, or 4 KiB pages where there are none).
//! - [`rdma`] (feature `rdma`): rdma-core loaded at run time and safe owners of its objects.
//! - [`afpacket`] (feature `afpacket`): the AF_PACKET sockets the device model's wires use.
//! - [`bpf`], [`netdev`], [`xsk`] (feature `xdp`): eBPF programs and maps, interface queries,
//!   AF_XDP sockets.
//! - [`neigh`]: the Linux neighbour table through rtnetlink (read an entry, ask for one).
//! - [`signal`]: Ctrl-C and SIGTERM as a flag, and standard output that a closed pipe ends quietly.
//! - CPU pinning and interface indices, below.

// The device model's wires.
#[cfg(feature = "afpacket")]
pub mod afpacket;
#[cfg(feature = "xdp")]
pub mod bpf;
pub mod file;
mod lib_paths;
pub mod neigh;
#[cfg(feature = "xdp")]
pub mod netdev;
pub use lib_paths::LibPaths;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod region;
pub mod signal;
#[cfg(feature = "xdp")]
pub mod xsk;

/// The CPUs the calling thread may run on (its affinity mask), ascending; empty if the kernel
/// will not say.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data and zero is an empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE, the bound of the loop.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread to one CPU. Returns false if the kernel refused (no such CPU, or not
/// in the allowed set), or the number is past what a `cpu_set_t` holds, rather than panic as an
/// out-of-range index would.
pub fn pin_current_thread(core: usize) -> bool {
    if core >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: cpu_set_t is plain data, zero is an empty set, CPU_SET stays in bounds (checked
    // above), and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The CPUs online (`/sys/devices/system/cpu/online`), ascending: the CPUs a thread may be
/// pinned to, short of a cpuset that leaves some out. A thread may widen its own affinity beyond
/// its parent's mask (a tool confined to one CPU can pin a helper thread to another), so the
/// calling thread's mask is no bound; where sysfs does not say, it is that mask.
pub fn online_cpus() -> Vec<usize> {
    if let Ok(text) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        let mut ids = Vec::new();
        for part in text.trim().split(',').filter(|p| !p.is_empty()) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(lo), Ok(hi)) = (lo.parse::<usize>(), hi.parse::<usize>()) {
                ids.extend(lo..=hi.min(lo + libc::CPU_SETSIZE as usize));
            }
        }
        if !ids.is_empty() {
            return ids;
        }
    }
    allowed_cpus()
}

/// CPU ids as ranges, `0-3,8` (ids ascending).
pub fn cpu_list(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// poll(2) over `fds` for at most `timeout_ms` (-1: no limit); the number of descriptors with
/// events, 0 on timeout or when a signal came first (the caller looks at its flags and polls
/// again).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
    // SAFETY: `fds` is a valid slice of pollfd for its whole length, which is what is passed.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        std::io::ErrorKind::Interrupted => Ok(0),
        _ => Err(e),
    }
}

/// Index of a network interface; ENODEV if there is none of that name.
pub fn if_index(name: &str) -> std::io::Result<u32> {
    // A name with a NUL in it names no interface.
    let c = std::ffi::CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: c is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// `e` with the words of the call site in front (`text`, which usually ends with `e` itself),
/// still an `io::Error` of the same kind whose errno stays readable through `source()` (as
/// `rawpkt::Error::os_error` reads it), where `io::Error::new(kind, text)` would drop it.
pub fn context(e: std::io::Error, text: String) -> std::io::Error {
    std::io::Error::new(e.kind(), Context { text, errno: e })
}

#[derive(Debug)]
struct Context {
    text: String,
    errno: std::io::Error,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.errno)
    }
}
