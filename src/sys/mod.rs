//! The syscall corner: thin, checked wrappers over libc that the rest of the crate uses safely.
#![allow(unsafe_code)]

// Only the model's wires use AF_PACKET sockets.
#[cfg(feature = "model")]
pub(crate) mod afpacket;
#[cfg(feature = "xdp")]
pub(crate) mod bpf;
#[cfg(feature = "xdp")]
pub(crate) mod netdev;
#[cfg(feature = "mlx5")]
pub(crate) mod rdma;
pub(crate) mod signal;
#[cfg(feature = "xdp")]
pub(crate) mod xsk;

/// Pins the calling thread to one CPU. Returns false if the kernel refused (no such CPU, or not
/// in the allowed set).
#[cfg_attr(not(feature = "model"), allow(dead_code))] // the model's thread
pub(crate) fn pin_current_thread(core: usize) -> bool {
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

/// Index of a network interface, or None if it does not exist.
#[cfg_attr(not(any(feature = "model", feature = "xdp")), allow(dead_code))] // model wires, xdp ports
pub(crate) fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: c is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}
