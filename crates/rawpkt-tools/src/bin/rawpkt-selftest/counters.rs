//! The device's own counters, to hold rawpkt's against: `ethtool -S` of the netdev on
//! hardware (mlx5e's vport and physical-port counters, `out_of_buffer`), or, on the model
//! library, its `rawpkt_model_port_counter` export, found with `dlsym` in the libibverbs the
//! process loaded (so never on real rdma-core, which has no such symbol).
#![allow(unsafe_code)] // dlopen/dlsym of the loaded libibverbs

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};

/// The model library's `rawpkt_model_port_counter`.
type CounterFn = unsafe extern "C" fn(*const c_char, *const c_char) -> u64;

/// What the counters are read from.
pub enum Source {
    /// The model library's export, for the RDMA device `ibdev`.
    Model { counter: CounterFn, ibdev: CString },
    /// `ethtool -S NETDEV`.
    Ethtool(String),
    /// No counters: why.
    Unavailable(String),
}

/// The model library's counters, by the names its docs give.
const MODEL_NAMES: [&str; 10] = [
    "tx_frames",
    "tx_bytes",
    "rx_frames",
    "rx_bytes",
    "rx_out_of_buffer",
    "rx_unclaimed",
    "rx_steer_missed",
    "rx_wq_error",
    "tx_error_cqes",
    "rx_error_cqes",
];

/// mlx5e's counters the report keeps (`ethtool -S`; the kernel's
/// `en_stats.c` vport, physical-port and queue counters).
const ETHTOOL_NAMES: [&str; 10] = [
    "rx_vport_unicast_packets",
    "tx_vport_unicast_packets",
    "rx_vport_unicast_bytes",
    "tx_vport_unicast_bytes",
    "rx_packets_phy",
    "tx_packets_phy",
    "rx_discards_phy",
    "rx_out_of_buffer",
    "rx_packets",
    "tx_packets",
];

/// A symbol of the libibverbs this process loaded (the file `RAWPKT_LIBIBVERBS` names, else
/// the soname), without loading anything new.
fn loaded_symbol(name: &str) -> Option<*mut libc::c_void> {
    let lib = std::env::var_os("RAWPKT_LIBIBVERBS").unwrap_or_else(|| "libibverbs.so.1".into());
    let lib = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(lib.as_os_str())).ok()?;
    let name = CString::new(name).ok()?;
    // SAFETY: RTLD_NOLOAD only finds a library already loaded; both strings are NUL-terminated.
    let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a live handle (the library stays loaded: rawpkt keeps it for the process).
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!sym.is_null()).then_some(sym)
}

/// The model library's profile line (`rawpkt_model_profile`), None on real rdma-core.
pub fn model_profile() -> Option<String> {
    let sym = loaded_symbol("rawpkt_model_profile")?;
    // SAFETY: the model library's `const char *rawpkt_model_profile(void)`
    // (docs/model-library.md), a static NUL-terminated string.
    let f = unsafe { std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> *const c_char>(sym) };
    // SAFETY: as above.
    let p = unsafe { f() };
    // SAFETY: non-null, NUL-terminated, static.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Source {
    /// The source for the RDMA device `ibdev` whose netdev is `netdev`.
    pub fn find(ibdev: &str, netdev: Option<&str>) -> Source {
        if let Some(sym) = loaded_symbol("rawpkt_model_port_counter") {
            // SAFETY: the model library's `uint64_t rawpkt_model_port_counter(const char *ibdev,
            // const char *name)` (docs/model-library.md).
            let counter = unsafe { std::mem::transmute::<*mut libc::c_void, CounterFn>(sym) };
            return Source::Model {
                counter,
                ibdev: CString::new(ibdev).unwrap_or_default(),
            };
        }
        match netdev {
            Some(n) if std::path::Path::new("/sys/class/net").join(n).exists() => Source::Ethtool(n.to_string()),
            Some(n) => Source::Unavailable(format!("netdev {n} is not in /sys/class/net")),
            None => Source::Unavailable("the port has no netdev".into()),
        }
    }

    /// Whether `ethtool -S` of `netdev` can be read here: `"ok"`, or `"unavailable: why"` (the
    /// model library's netdevs exist only in its own sysfs).
    pub fn ethtool_status(netdev: Option<&str>) -> String {
        let src = match netdev {
            Some(n) if std::path::Path::new("/sys/class/net").join(n).exists() => Source::Ethtool(n.to_string()),
            Some(n) => return format!("unavailable: netdev {n} is not in /sys/class/net"),
            None => return "unavailable: the port has no netdev".into(),
        };
        match src.read() {
            Ok(_) => "ok".into(),
            Err(e) => format!("unavailable: {e}"),
        }
    }

    /// `"model"`, `"ethtool"` or `"unavailable"`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Model { .. } => "model",
            Source::Ethtool(_) => "ethtool",
            Source::Unavailable(_) => "unavailable",
        }
    }

    /// The counters now; Err(why) where they cannot be read.
    pub fn read(&self) -> Result<BTreeMap<String, u64>, String> {
        match self {
            Source::Model { counter, ibdev } => Ok(MODEL_NAMES
                .iter()
                .filter_map(|n| {
                    let c = CString::new(*n).ok()?;
                    // SAFETY: both strings are NUL-terminated and live for the call.
                    let v = unsafe { counter(ibdev.as_ptr(), c.as_ptr()) };
                    (v != u64::MAX).then(|| (n.to_string(), v))
                })
                .collect()),
            Source::Ethtool(netdev) => {
                let out = std::process::Command::new("ethtool")
                    .args(["-S", netdev])
                    .stdin(std::process::Stdio::null())
                    .output()
                    .map_err(|e| format!("ethtool -S {netdev}: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "ethtool -S {netdev}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let text = String::from_utf8_lossy(&out.stdout);
                Ok(text
                    .lines()
                    .filter_map(|l| {
                        let (k, v) = l.trim().split_once(':')?;
                        let k = k.trim();
                        ETHTOOL_NAMES
                            .contains(&k)
                            .then(|| Some((k.to_string(), v.trim().parse().ok()?)))?
                    })
                    .collect())
            }
            Source::Unavailable(why) => Err(why.clone()),
        }
    }

    /// Frames the device received and sent, and dropped for want of a receive buffer, in
    /// `c`: the names differ by source.
    pub fn rx_tx_drops(&self, c: &BTreeMap<String, u64>) -> (Option<u64>, Option<u64>, Option<u64>) {
        let g = |k: &str| c.get(k).copied();
        match self {
            Source::Model { .. } => (g("rx_frames"), g("tx_frames"), g("rx_out_of_buffer")),
            _ => (
                g("rx_vport_unicast_packets").or(g("rx_packets_phy")),
                g("tx_vport_unicast_packets").or(g("tx_packets_phy")),
                g("rx_out_of_buffer"),
            ),
        }
    }
}

/// `after - before`, counter by counter.
pub fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.wrapping_sub(before.get(k).copied().unwrap_or(0))))
        .collect()
}
