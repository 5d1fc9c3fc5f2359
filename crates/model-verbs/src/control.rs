//! `rawpkt_model_*`: the test-only control symbols of the contract.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::Ordering;

use crate::global::{global, ibdev_index};
use crate::guard;

/// Contexts + PDs + MRs + CQs + QPs + WQs + indirection tables + flows + completion channels
/// alive (0 after a clean teardown).
#[no_mangle]
pub extern "C" fn rawpkt_model_live_objects() -> u64 {
    guard(0, || global().map_or(0, |g| g.reg().len() as u64))
}

/// Sets a knob: "dv" = "1"/"0", "cap_net_raw" = "1"/"0", "refuse_flow" = a spec type name
/// ("eth", "ipv4", "ipv6", "ipv4_ext", "tcp", "udp") or "", "flow_groups" = "creation" /
/// "reverse", "knob" = any device knob as `name=value` (`mlx5_model::profile::KNOBS`; the clock
/// is fixed at start); the per-device ones of `devx::set`. 0, or -1 for an unknown key/value.
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_set(key: *const c_char, value: *const c_char) -> c_int {
    guard(-1, || {
        if key.is_null() || value.is_null() {
            return -1;
        }
        let Ok(g) = global() else { return -1 };
        // SAFETY: the caller passes NUL-terminated strings (checked non-NULL).
        let (k, v) = unsafe {
            (
                CStr::from_ptr(key).to_string_lossy(),
                CStr::from_ptr(value).to_string_lossy(),
            )
        };
        let flag = match &*v {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        };
        if let Some(ok) = crate::devx::set(&k, &v) {
            return if ok { 0 } else { -1 };
        }
        match (&*k, flag) {
            ("dv", Some(f)) => g.dv.store(f, Ordering::Relaxed),
            ("cap_net_raw", Some(f)) => g.cap_net_raw.store(f, Ordering::Relaxed),
            ("refuse_flow", _) if matches!(&*v, "" | "eth" | "ipv4" | "ipv6" | "ipv4_ext" | "tcp" | "udp") => {
                *crate::objects::lock(&g.refuse_flow) = v.into_owned();
            }
            // Which of two overlapping flows of one priority wins (the profile's knob, at run
            // time): the older match shape (`creation`) or the newer (`reverse`).
            ("flow_groups", _) if matches!(&*v, "creation" | "reverse") => {
                g.nic.set_flow_groups_reverse(v == "reverse")
            }
            // Any device knob (`mlx5_model::profile::KNOBS`) at run time: "knob" = "wqe_id=ring".
            ("knob", _) => {
                if let Err(e) = g.nic.set_knob(&v) {
                    eprintln!("rawpkt model library: {e}");
                    return -1;
                }
            }
            _ => return -1,
        }
        0
    })
}

fn port_of(ibdev: *const c_char, port_num: u8) -> Option<usize> {
    if ibdev.is_null() || port_num != 1 {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string (checked non-NULL).
    ibdev_index(&unsafe { CStr::from_ptr(ibdev) }.to_string_lossy())
}

/// A frame arrives from the wire at `ibdev`'s port and is steered (flows, else Linux).
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_inject(
    ibdev: *const c_char,
    port_num: u8,
    frame: *const u8,
    len: usize,
) -> c_int {
    guard(-1, || {
        let (Ok(g), Some(port)) = (global(), port_of(ibdev, port_num)) else {
            return -1;
        };
        if frame.is_null() && len > 0 {
            return -1;
        }
        let bytes = if len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's frame of len bytes (checked non-NULL).
            unsafe { std::slice::from_raw_parts(frame, len) }
        };
        g.nic.inject_frame(port, bytes);
        0
    })
}

/// Frames delivered to the Linux side of `ibdev`'s netdev: those no flow stole (DONT_TRAP
/// matches included).
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_linux_frames(ibdev: *const c_char, port_num: u8) -> u64 {
    guard(0, || match (global(), port_of(ibdev, port_num)) {
        (Ok(g), Some(port)) => g.nic.port_counters(port).rx_unclaimed,
        _ => 0,
    })
}

/// Frames the port put on the wire.
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_wire_frames(ibdev: *const c_char, port_num: u8) -> u64 {
    guard(0, || match (global(), port_of(ibdev, port_num)) {
        (Ok(g), Some(port)) => g.nic.port_counters(port).tx_frames,
        _ => 0,
    })
}

/// The root of the fake sysfs tree (`<root>/class/infiniband/...`), NUL-terminated and valid
/// for the process; NULL if the model could not start.
#[no_mangle]
pub extern "C" fn rawpkt_model_sysfs_root() -> *const c_char {
    guard(std::ptr::null(), || {
        global().map_or(std::ptr::null(), |g| g.sysfs_root.as_ptr())
    })
}

/// Sets the model up if it is not yet and says whether it could: 0, or why not, as an errno
/// (EINVAL: a setting of the environment is malformed or out of range, such as
/// `RAWPKT_MODEL_WIRES` or `RAWPKT_MODEL_CPU`; another errno: what the system refused) with the
/// reason copied into `buf` (`len` bytes, NUL-terminated, cut to fit; `buf` may be NULL when
/// `len` is 0). A caller that asks reports the reason itself: the library then does not print
/// it on stderr, as it does once for a program that goes straight to the verbs (which fail with
/// ENODEV). rawpkt's loader asks, so a tool says one line, not the library's and its own.
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_setup_error(buf: *mut c_char, len: usize) -> c_int {
    guard(libc::EIO, || {
        let Some(e) = crate::global::setup_error() else {
            return 0;
        };
        if !buf.is_null() && len > 0 {
            // SAFETY: the caller's buffer of `len` bytes (checked non-NULL).
            let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
            crate::global::fill(out, &e.msg);
        }
        e.errno
    })
}

/// The devices' profile and the knobs that differ from the default, as the trace's `# profile`
/// line says them (`cx5 wqe_id=ring flush=late:2 ...`; `default` for the default device):
/// NUL-terminated, valid until the next call; NULL if the model could not start.
#[no_mangle]
pub extern "C" fn rawpkt_model_profile() -> *const c_char {
    guard(std::ptr::null(), || {
        static LAST: std::sync::Mutex<Option<std::ffi::CString>> = std::sync::Mutex::new(None);
        let Ok(g) = global() else { return std::ptr::null() };
        let text = std::ffi::CString::new(g.nic.config().behaviour()).unwrap_or_default();
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        last.insert(text).as_ptr()
    })
}

/// One counter of `ibdev`'s port as the device keeps it (`mlx5_model::PortCounters`, by field
/// name: `tx_frames`, `tx_bytes`, `rx_frames`, `rx_bytes`, `rx_out_of_buffer`, `rx_unclaimed`,
/// `rx_steer_missed`, `rx_wq_error`, `tx_error_cqes`, `rx_error_cqes`, `tx_wire_errors`,
/// `rx_wire_drops`): what a program compares its own counters with, as it would `ethtool -S`
/// on hardware. `UINT64_MAX` for an unknown device or name.
#[no_mangle]
pub unsafe extern "C" fn rawpkt_model_port_counter(ibdev: *const c_char, name: *const c_char) -> u64 {
    guard(u64::MAX, || {
        if name.is_null() {
            return u64::MAX;
        }
        let (Ok(g), Some(port)) = (global(), port_of(ibdev, 1)) else {
            return u64::MAX;
        };
        let c = g.nic.port_counters(port);
        // SAFETY: the caller passes a NUL-terminated string (checked non-NULL).
        match &*unsafe { CStr::from_ptr(name) }.to_string_lossy() {
            "tx_frames" => c.tx_frames,
            "tx_bytes" => c.tx_bytes,
            "rx_frames" => c.rx_frames,
            "rx_bytes" => c.rx_bytes,
            "rx_out_of_buffer" => c.rx_out_of_buffer,
            "rx_unclaimed" => c.rx_unclaimed,
            "rx_steer_missed" => c.rx_steer_missed,
            "rx_wq_error" => c.rx_wq_error,
            "tx_error_cqes" => c.tx_error_cqes,
            "rx_error_cqes" => c.rx_error_cqes,
            "tx_wire_errors" => c.tx_wire_errors,
            "rx_wire_drops" => c.rx_wire_drops,
            _ => u64::MAX,
        }
    })
}
