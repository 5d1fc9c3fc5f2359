//! Thin wrappers over `bpf(2)`: create an XSKMAP, load an XDP program (verifier log captured),
//! and run a program on one frame with `BPF_PROG_TEST_RUN`.
//!
//! `union bpf_attr` is declared per command as a small `#[repr(C)]` struct holding the leading
//! fields of that command's member, with the exact layout of `include/uapi/linux/bpf.h` (Linux
//! 6.x). The kernel accepts a shorter attribute and treats the missing tail as zero
//! (`bpf_check_uarg_tail_zero` only checks bytes *beyond* its own `union bpf_attr`), so each call
//! passes `size_of` of its struct.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_LINK_CREATE: libc::c_long = 28;

/// `enum bpf_attach_type`: `BPF_XDP`, the attach type of an XDP link.
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE` and `XDP_FLAGS_DRV_MODE` (include/uapi/linux/if_link.h).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;

/// `bpf_attr` for `BPF_MAP_CREATE` (the anonymous struct starting with `map_type`).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `bpf_attr` for `BPF_PROG_LOAD` (the struct starting with `prog_type`), up to
/// `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_PROG_TEST_RUN` (the `test` struct), through `batch_size`.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    // Explicit, so it is zero: the struct's alignment pads it to 80 bytes, and the kernel
    // refuses with EINVAL any nonzero byte after the command's last field (`CHECK_ATTR` in
    // kernel/bpf/syscall.c). Left implicit, the padding was whatever the stack held: the
    // "EINVAL on a valid frame" docs/fuzz.md records, and every run in flow::bpf's unit tests.
    _pad: u32,
}

/// `bpf_attr` for `BPF_MAP_*_ELEM` (the struct starting with `map_fd`).
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_attr` for `BPF_LINK_CREATE`, up to `flags` (XDP takes nothing more).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

const _: () = {
    assert!(std::mem::size_of::<MapElemAttr>() == 32);
    assert!(std::mem::offset_of!(MapElemAttr, key) == 8);
    assert!(std::mem::size_of::<LinkCreateAttr>() == 16);
    assert!(std::mem::size_of::<MapCreateAttr>() == 44);
    assert!(std::mem::size_of::<ProgLoadAttr>() == 72);
    assert!(std::mem::offset_of!(ProgLoadAttr, prog_name) == 48);
};

const _: () = {
    assert!(std::mem::offset_of!(TestRunAttr, repeat) == 32);
    assert!(std::mem::offset_of!(TestRunAttr, batch_size) == 72);
    assert!(std::mem::size_of::<TestRunAttr>() == 80);
};

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    // The kernel wants at most 15 characters from [A-Za-z0-9_.] and a NUL.
    for (o, c) in out[..15]
        .iter_mut()
        .zip(name.bytes().filter(|c| c.is_ascii_alphanumeric() || *c == b'_'))
    {
        *o = c;
    }
    out
}

/// Calls `bpf(cmd, attr, size_of::<T>())`; the result is the syscall's return value.
fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr points to a live, initialised #[repr(C)] struct of exactly the size passed;
    // every pointer stored inside it was set by the caller to memory that outlives this call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => " (needs root or CAP_BPF + CAP_NET_ADMIN)",
        Some(libc::ENOSYS) => " (kernel without bpf(2))",
        _ => "",
    };
    let text = format!("bpf({what}): {e}{hint}");
    crate::context(e, text)
}

fn own_fd(r: libc::c_long) -> OwnedFd {
    // SAFETY: r is a fresh descriptor the bpf syscall just returned; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(r as libc::c_int) }
}

/// `BPF_MAP_CREATE` of a `BPF_MAP_TYPE_XSKMAP`: key = queue index (u32), value = XSK fd (u32).
pub fn create_xskmap(entries: u32, name: &str) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name16(name),
        ..Default::default()
    };
    sys_bpf(BPF_MAP_CREATE, &mut attr)
        .map(own_fd)
        .map_err(|e| with_context(e, "BPF_MAP_CREATE xskmap"))
}

/// Size of the verifier log buffer used when a load fails.
const LOG_SIZE: usize = 1 << 20;

/// `BPF_PROG_LOAD` of an XDP program (`insns` is the raw 8-byte-per-instruction image).
///
/// The first attempt asks for no log (a successful load with a log can fail with `ENOSPC` when
/// the log outgrows the buffer); on failure the load is repeated with `log_level` 1 and the
/// verifier's log is appended to the error, as libbpf does.
///
/// License: the only helper used, `bpf_redirect_map`, is not `gpl_only` (net/core/filter.c,
/// `bpf_xdp_redirect_map_proto`), so any string would do; "Dual MIT/GPL" is GPL-compatible for
/// the kernel (`license_is_gpl_compatible`) and honest about the generated code.
pub fn load_xdp(insns: &[u8], name: &str) -> io::Result<OwnedFd> {
    assert!(
        insns.len().is_multiple_of(8),
        "an eBPF image is a whole number of 8-byte instructions"
    );
    let license = c"Dual MIT/GPL";
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: (insns.len() / 8) as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name16(name),
        ..Default::default()
    };
    match sys_bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(own_fd(fd)),
        Err(first) => {
            let mut log = vec![0u8; LOG_SIZE];
            attr.log_level = 1;
            attr.log_size = LOG_SIZE as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let retry = sys_bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            match retry {
                // Should not happen (the verifier is deterministic), but a program is a program.
                Ok(fd) => Ok(own_fd(fd)),
                Err(_) => {
                    let e = with_context(first, "BPF_PROG_LOAD xdp");
                    let text = format!("{e}; verifier log:\n{}", text.trim_end());
                    Err(crate::context(e, text))
                }
            }
        }
    }
}

/// `BPF_PROG_TEST_RUN`: runs the program once on `frame` (as received on queue 0) and returns
/// its return value, for XDP the verdict (`XDP_DROP` 1, `XDP_PASS` 2, `XDP_REDIRECT` 4). The
/// kernel refuses frames shorter than an Ethernet header (`ETH_HLEN`, 14) with `EINVAL`.
/// Runs a loaded program once over `frame` (`BPF_PROG_TEST_RUN`) and returns its verdict: how
/// rawpkt's tests check an XDP program against the software matcher.
pub fn test_run(prog: &OwnedFd, frame: &[u8]) -> io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    sys_bpf(BPF_PROG_TEST_RUN, &mut attr).map_err(|e| with_context(e, "BPF_PROG_TEST_RUN"))?;
    Ok(attr.retval)
}

/// `BPF_MAP_UPDATE_ELEM` of an XSKMAP: queue `key` to AF_XDP socket `sock`. The value must be
/// the socket's descriptor (anything else fails with `ENOTSOCK`).
pub fn xskmap_set(map: &OwnedFd, key: u32, sock: std::os::fd::RawFd) -> io::Result<()> {
    let value = sock as u32;
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
        .map(drop)
        .map_err(|e| with_context(e, "BPF_MAP_UPDATE_ELEM xskmap"))
}

/// `BPF_MAP_DELETE_ELEM`: unbinds queue `key` in an XSKMAP (a missing key is not an error).
pub fn xskmap_clear(map: &OwnedFd, key: u32) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        ..Default::default()
    };
    match sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(with_context(e, "BPF_MAP_DELETE_ELEM xskmap")),
        _ => Ok(()),
    }
}

/// `BPF_LINK_CREATE` of an XDP link: attaches `prog` to interface `ifindex` in the mode of
/// `flags` (`XDP_FLAGS_DRV_MODE` or `XDP_FLAGS_SKB_MODE`). The program stays attached exactly
/// as long as the returned descriptor is open, so a killed process leaves nothing behind.
/// Linux 5.9+ (commit aa8d3a716b59 "bpf, xdp: Add bpf_link-based XDP attachment API"); the
/// raw errno is kept so that callers can tell "no such mode" from "not permitted".
pub fn xdp_link_create(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    sys_bpf(BPF_LINK_CREATE, &mut attr).map(own_fd)
}
