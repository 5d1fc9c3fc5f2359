//! CAP_NET_RAW of the calling thread, through capget(2)/capset(2) with pid 0: capabilities are
//! per thread, so a test can drop CAP_NET_RAW on one thread and keep it on the others, and the
//! model checks the thread that makes the call, as the kernel does.

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_NET_RAW: u32 = 13;

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 takes two of them (capabilities 0..32, 32..64).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn header() -> Header {
    Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    }
}

/// The calling thread's capability sets, or None if capget fails.
fn get() -> Option<[Data; 2]> {
    let mut hdr = header();
    let mut data = [Data::default(); 2];
    // SAFETY: capget reads the header and writes two `__user_cap_data_struct`s (version 3), both
    // live locals of the layout the kernel expects.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) };
    (rc == 0).then_some(data)
}

/// Whether CAP_NET_RAW is in the calling thread's effective set.
pub(crate) fn thread_has_cap_net_raw() -> bool {
    get().is_some_and(|d| d[0].effective & (1 << CAP_NET_RAW) != 0)
}

/// Drops CAP_NET_RAW from the calling thread's effective set (for tests of the EPERM paths).
/// Panics if the kernel refuses.
pub fn drop_cap_net_raw_on_this_thread() {
    let mut data = get().expect("capget");
    data[0].effective &= !(1 << CAP_NET_RAW);
    let mut hdr = header();
    // SAFETY: capset reads the version-3 header and the two data structs, live locals.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}
