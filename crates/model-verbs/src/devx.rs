//! DevX and asynchronous events, per device, as libmlx5 and libibverbs expose them:
//! - `mlx5dv_open_device` with `MLX5DV_CONTEXT_FLAGS_DEVX` (providers/mlx5/mlx5.c), refused
//!   with EOPNOTSUPP on a device whose `devx` knob is off, as on a kernel without DevX;
//! - `mlx5dv_devx_general_cmd` answering QUERY_HCA_CAP with the capability pages the model has
//!   (`devx_caps`: general, Ethernet offloads, NIC flow table, RoCE, QoS; another page is a bad
//!   parameter) and QUERY_NIC_VPORT_CONTEXT; the inline mode a driver reads there (the Ethernet
//!   offload caps' `wqe_inline_mode`, the vport context's `min_wqe_inline_mode`; layouts in
//!   `mlx5_prm::devx`) is the device's `inline` knob, which is also what the model then
//!   enforces on the port's send WQEs (DevX objects: `devx_objs`);
//! - `ibv_get_async_event` / `ibv_ack_async_event`, delivering events queued by the
//!   `async_event` knob through the context's `async_fd` (an eventfd, readable while events wait).
//!
//! Knobs (`rawpkt_model_set`), per device `<ibdev>`: `devx.<ibdev>` = 1/0; `inline.<ibdev>` =
//! none / l2 / ip / tcp-udp (none: the caps say "not required"; l2: the caps say L2; ip and
//! tcp-udp: the caps say "vport context", which says the mode); `pci_device.<ibdev>` = the PCI
//! device id sysfs shows (0x1017 by default; 0x1015 is a ConnectX-4 Lx), what a driver without
//! DevX goes by; `async_event.<ibdev>` = device_fatal (which also stops the device) / port_err /
//! `port_active` / `cq_err:<cqn>` / `wq_fatal:<wqn>` / `qp_fatal:<qpn>` (numbers in hex; the object
//! stops as the firmware would stop it, and the event names it in `element`);
//! `device.<ibdev>` = reset (a stopped device works again); `netdev.<ibdev>` = promisc / filter
//! (what the Linux netdev takes of the frames no flow stole); `mtu.<ibdev>` = N (the port's MTU,
//! in the fake sysfs and on the device).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use mlx5_prm::{devx, InlineMode};
use rdma_abi::*;

use crate::global::{global, ibdev_index, Kind, DEVS};
use crate::{guard, ptr_or_errno, set_errno};

/// Per-device DevX state and the contexts opened with DevX.
struct State {
    refused: [bool; DEVS.len()],
    devx_contexts: Vec<usize>,
    /// Events waiting per open context: (context, event type, port, the object's address for
    /// CQ, QP and WQ events).
    events: Vec<(usize, ibv_event_type, c_int, usize)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    refused: [false; DEVS.len()],
    devx_contexts: Vec::new(),
    events: Vec::new(),
});

/// Events the device raised itself (a CQ overrun under `cq_overrun=error`), heard with its lock
/// held: kept here (a lock of their own) until `ibv_get_async_event` or a knob turns them into
/// per-context events ([`deliver_pending`]).
static PENDING: Mutex<Vec<mlx5_model::DeviceEvent>> = Mutex::new(Vec::new());

/// What the device's own events become: CQ errors and WQ/QP fatal errors, for the object the
/// library made with that number (`IBV_EVENT_CQ_ERR` with `element.cq`, kernel `cq.c`
/// `mlx5_ib_cq_event`; `IBV_EVENT_WQ_FATAL` with `element.wq` and `IBV_EVENT_QP_FATAL` with
/// `element.qp`, `qp.c` `mlx5_ib_wq_event` / `mlx5_ib_qp_event`). Called once at start.
pub(crate) fn listen(nic: &mlx5_model::Nic) {
    nic.on_event(Box::new(|ev| {
        use mlx5_model::DeviceEvent as E;
        if matches!(ev, E::CqError { .. } | E::WqFatal { .. } | E::QpFatal { .. }) {
            PENDING.lock().unwrap_or_else(|e| e.into_inner()).push(*ev);
        }
        true
    }));
}

/// Turns the device's pending events into per-context events (see [`PENDING`]).
pub(crate) fn deliver_pending() {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    for ev in pending {
        if let Some((port, ty, element)) = element_of(ev) {
            raise_for(port, ty, element);
        }
    }
}

/// The library object a device event is about: its port, event type and address.
fn element_of(ev: mlx5_model::DeviceEvent) -> Option<(usize, ibv_event_type, usize)> {
    use crate::objects::{Cq, Qp, QpKind, Wq};
    use mlx5_model::DeviceEvent as E;
    let g = global().ok()?;
    let reg = g.reg();
    match ev {
        E::CqError { cqn } => reg.all(Kind::Cq).into_iter().find_map(|p| {
            // SAFETY: a live CQ of this library (from the registry, whose lock is held).
            let cq = unsafe { &*(p as *const Cq) };
            (cq.info.raw.num == cqn).then_some((cq.port, IBV_EVENT_CQ_ERR, p))
        }),
        E::WqFatal { wqn } => reg.all(Kind::Wq).into_iter().find_map(|p| {
            // SAFETY: a live WQ of this library.
            let wq = unsafe { &*(p as *const Wq) };
            (wq.info.raw.num == wqn).then_some((wq.port, IBV_EVENT_WQ_FATAL, p))
        }),
        E::QpFatal { qpn } => reg.all(Kind::Qp).into_iter().find_map(|p| {
            // SAFETY: a live QP of this library.
            let qp = unsafe { &*(p as *const Qp) };
            matches!(&qp.kind, QpKind::Raw { sq, .. } if sq.raw.num == qpn).then_some((qp.port, IBV_EVENT_QP_FATAL, p))
        }),
        _ => None,
    }
}

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every device refuses DevX (`RAWPKT_MODEL_DEVX=0`, read when the model starts).
pub(crate) fn refuse_all() {
    state().refused = [true; DEVS.len()];
}

/// Handles a `devx.*`, `inline.*`, `pci_device.*`, `async_event.*`, `device.*`, `netdev.*` or `mtu.*` knob; None if
/// `key` is none of them, Some(false) for a bad device or value.
pub(crate) fn set(key: &str, value: &str) -> Option<bool> {
    let (what, ibdev) = key.split_once('.')?;
    if !matches!(
        what,
        "devx" | "inline" | "pci_device" | "async_event" | "device" | "netdev" | "mtu"
    ) {
        return None;
    }
    let (Some(port), Ok(g)) = (ibdev_index(ibdev), global()) else {
        return Some(false);
    };
    Some(match what {
        "devx" => match value {
            "1" | "0" => {
                state().refused[port] = value == "0";
                true
            }
            _ => false,
        },
        "inline" => match InlineMode::from_name(value) {
            Some(m) => {
                g.nic.set_inline_mode(port, m);
                true
            }
            None => false,
        },
        "pci_device" => {
            let Some(id) = value.strip_prefix("0x").and_then(|h| u16::from_str_radix(h, 16).ok()) else {
                return Some(false);
            };
            let path = std::path::Path::new(&*g.sysfs_root.to_string_lossy())
                .join("devices/pci0000:3a")
                .join(DEVS[port].pci);
            crate::sysfs::write_pci_identity(&path, DEVS[port].pci, id).is_ok()
        }
        // What the netdev's L2 table takes of the frames no flow stole (the rest goes to the
        // leftovers flows or is dropped): everything (`promisc`, the default) or its own MAC,
        // broadcast and the groups Linux joins (`filter`).
        "netdev" => match value {
            "promisc" => {
                g.nic.set_netdev_filter(port, None);
                true
            }
            "filter" => {
                g.nic.set_netdev_filter(port, Some(DEVS[port].mac));
                true
            }
            _ => false,
        },
        "device" => match value {
            // The kernel's health recovery: a device stopped by a fatal error works again.
            "reset" => {
                g.nic.set_dead(port, false);
                true
            }
            _ => false,
        },
        // The port's MTU (the fake sysfs `mtu` too, which a driver re-reads, and the largest
        // frame the device sends: `Nic::set_mtu`).
        "mtu" => match value.parse::<u32>() {
            Ok(mtu) if (68..=9600).contains(&mtu) => {
                let path = std::path::Path::new(&*g.sysfs_root.to_string_lossy())
                    .join("class/net")
                    .join(DEVS[port].netdev)
                    .join("mtu");
                g.nic.set_mtu(port, mtu);
                std::fs::write(path, format!("{mtu}\n")).is_ok()
            }
            _ => false,
        },
        _ => {
            // An object's event: the device puts it in error (`Nic::raise`), then every context
            // of the device hears it with the object in `element`.
            if let Some((kind, num)) = value.split_once(':') {
                let Ok(num) = u32::from_str_radix(num.trim_start_matches("0x"), 16) else {
                    return Some(false);
                };
                use mlx5_model::DeviceEvent as E;
                let ev = match kind {
                    "cq_err" => E::CqError { cqn: num },
                    "wq_fatal" => E::WqFatal { wqn: num },
                    "qp_fatal" => E::QpFatal { qpn: num },
                    _ => return Some(false),
                };
                let Some((p, ty, element)) = element_of(ev).filter(|&(p, _, _)| p == port) else {
                    return Some(false);
                };
                // The device's listener (`listen`) queues it too; taken out here so that it is
                // delivered once.
                let ok = g.nic.raise(ev);
                PENDING.lock().unwrap_or_else(|e| e.into_inner()).retain(|e| *e != ev);
                raise_for(p, ty, element);
                return Some(ok);
            }
            let event = match value {
                "device_fatal" => IBV_EVENT_DEVICE_FATAL,
                "port_err" => IBV_EVENT_PORT_ERR,
                "port_active" => IBV_EVENT_PORT_ACTIVE,
                _ => return Some(false),
            };
            if event == IBV_EVENT_DEVICE_FATAL {
                // The device stops: nothing it held is read or written again.
                g.nic.set_dead(port, true);
            }
            raise(port, event);
            true
        }
    })
}

/// Queues `event` on every open context of device `port` and makes their async fds readable.
fn raise(port: usize, event: ibv_event_type) {
    raise_for(port, event, 0);
}

/// [`raise`] for the object at `element` (0 for a device or port event).
fn raise_for(port: usize, event: ibv_event_type, element: usize) {
    let Ok(g) = global() else { return };
    let contexts: Vec<usize> = g.reg().all(Kind::Context);
    let mut st = state();
    for c in contexts {
        let ctx = c as *mut ibv_context;
        // SAFETY: a live context of this library (from the registry).
        let (dev, fd) = unsafe { ((*ctx).device, (*ctx).async_fd) };
        if g.port_of(dev) != Some(port) {
            continue;
        }
        st.events.push((c, event, 1, element));
        // SAFETY: writing 8 bytes to the context's own eventfd.
        unsafe { libc::write(fd, (&1u64 as *const u64).cast(), 8) };
    }
}

/// Whether `ctx` was opened with DevX (`mlx5dv_open_device` with `MLX5DV_CONTEXT_FLAGS_DEVX`).
pub(crate) fn is_devx(ctx: *mut ibv_context) -> bool {
    state().devx_contexts.contains(&(ctx as usize))
}

/// Forgets what belonged to a context being closed.
pub(crate) fn forget(ctx: usize) {
    let mut st = state();
    st.devx_contexts.retain(|&c| c != ctx);
    st.events.retain(|e| e.0 != ctx);
}

/// rdma-core `mlx5dv_open_device`: DevX when asked and the device offers it, else a plain open.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_open_device(
    device: *mut ibv_device,
    attr: *mut mlx5dv_context_attr,
) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let Ok(g) = global() else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        let Some(port) = g.port_of(device) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let flags = if attr.is_null() {
            0
        } else {
            // SAFETY: the caller's attribute struct (checked non-NULL).
            unsafe { (*attr).flags }
        };
        if flags & !MLX5DV_CONTEXT_FLAGS_DEVX != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let want_devx = flags & MLX5DV_CONTEXT_FLAGS_DEVX != 0;
        if want_devx && state().refused[port] {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        // SAFETY: a device of this library.
        let ctx = unsafe { crate::verbs::ibv_open_device(device) };
        if !ctx.is_null() && want_devx {
            state().devx_contexts.push(ctx as usize);
        }
        ptr_or_errno(if ctx.is_null() { Err(libc::ENOMEM) } else { Ok(ctx) })
    })
}

/// rdma-core `mlx5dv_devx_general_cmd`: QUERY_HCA_CAP and QUERY_NIC_VPORT_CONTEXT; anything
/// else is a bad opcode (status 0x2, `MLX5_CMD_STAT_BAD_OP_ERR`), which the kernel reports as
/// EIO.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_devx_general_cmd(
    ctx: *mut ibv_context,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    guard(libc::EINVAL, || {
        let Ok(g) = global() else { return libc::ENODEV };
        if ctx.is_null() || !g.reg().check(ctx as usize, Kind::Context) || inp.is_null() || out.is_null() {
            return libc::EINVAL;
        }
        if !state().devx_contexts.contains(&(ctx as usize)) {
            return libc::EOPNOTSUPP;
        }
        if inlen < devx::IN_LEN || outlen < 16 {
            return libc::EINVAL;
        }
        // SAFETY: the caller's buffers of inlen and outlen bytes (checked non-NULL).
        let (cmd, out) = unsafe {
            (
                std::slice::from_raw_parts(inp.cast::<u8>(), inlen),
                std::slice::from_raw_parts_mut(out.cast::<u8>(), outlen),
            )
        };
        // SAFETY: a live context of this library.
        let Some(port) = g.port_of(unsafe { (*ctx).device }) else {
            return libc::EINVAL;
        };
        let mode = g.nic.inline_mode(port);
        out.fill(0);
        match devx::opcode_of(cmd) {
            // Any page the model has (`devx_caps`), current or maximum (op_mod bit 0: the
            // model's are the same), as much of it as the answer holds.
            Some((devx::QUERY_HCA_CAP, op_mod)) => {
                match crate::devx_caps::page(op_mod >> 1, port, mode, &g.cfg.knobs) {
                    Some(page) => {
                        let n = (outlen - 16).min(page.len());
                        out[16..16 + n].copy_from_slice(&page[..n]);
                        0
                    }
                    None => {
                        // MLX5_CMD_STAT_BAD_PARAM_ERR: a capability type the device does not have.
                        out[0] = 0x3;
                        libc::EIO
                    }
                }
            }
            Some((devx::QUERY_NIC_VPORT_CONTEXT, 0)) if outlen >= 17 => {
                devx::set_min_wqe_inline_mode(out, mode as u8);
                0
            }
            // The MTUTC register (the clock's mode: free-running or real time), as DPDK's
            // `mlx5_rt_timestamp_config` reads it; a device whose profile gives user contexts
            // no register access (`devx=inline-only`) fails it as an unknown command.
            Some((devx::ACCESS_REGISTER_USER, devx::ACCESS_REGISTER_READ))
                if g.cfg.knobs.devx == mlx5_model::profile::Devx::Full
                    && devx::register_id(cmd) == Some(devx::REGISTER_MTUTC)
                    && outlen >= 32 =>
            {
                out[16] = match g.cfg.knobs.clock {
                    mlx5_model::profile::Clock::RealTime => devx::MTUTC_REAL_TIME,
                    mlx5_model::profile::Clock::FreeRunning { .. } => devx::MTUTC_INTERNAL_TIMER,
                } << 6;
                0
            }
            _ => {
                out[0] = 0x2;
                libc::EIO
            }
        }
    })
}

/// libibverbs `ibv_get_async_event`: the oldest event waiting on `context`. The model's events
/// are raised by the `async_event` knob; a caller polls `async_fd` first, as VPP and DPDK do
/// (with nothing waiting the call fails with EAGAIN rather than block, as on a non-blocking fd).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    guard(-1, || {
        let Ok(g) = global() else { return -1 };
        if context.is_null() || event.is_null() || !g.reg().check(context as usize, Kind::Context) {
            set_errno(libc::EINVAL);
            return -1;
        }
        deliver_pending();
        let mut st = state();
        let Some(i) = st.events.iter().position(|e| e.0 == context as usize) else {
            set_errno(libc::EAGAIN);
            return -1;
        };
        let (_, ty, port, element) = st.events.remove(i);
        if !st.events.iter().any(|e| e.0 == context as usize) {
            // Drain the eventfd: not readable until the next event.
            let mut v = 0u64;
            // SAFETY: reading 8 bytes from the context's own eventfd into a local.
            unsafe { libc::read((*context).async_fd, (&mut v as *mut u64).cast(), 8) };
        }
        // SAFETY: the caller's event struct (checked non-NULL).
        unsafe {
            (*event).event_type = ty;
            match ty {
                IBV_EVENT_CQ_ERR => (*event).element.cq = element as *mut ibv_cq,
                IBV_EVENT_WQ_FATAL => (*event).element.wq = element as *mut ibv_wq,
                IBV_EVENT_QP_FATAL => (*event).element.qp = element as *mut ibv_qp,
                _ => (*event).element.port_num = port,
            }
        }
        0
    })
}

/// libibverbs `ibv_ack_async_event`: nothing to release in the model.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
