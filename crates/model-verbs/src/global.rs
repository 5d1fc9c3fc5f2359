//! Process-wide state: the model NIC, the four devices, the knobs and the object registry.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mlx5_model::{Link, Nic};
use rdma_abi::ibv_device;

/// One RDMA device of the model (contract table).
pub(crate) struct DevInfo {
    pub ibdev: &'static str,
    pub uverbs: &'static str,
    pub netdev: &'static str,
    pub pci: &'static str,
    pub mac: [u8; 6],
    pub ifindex: u32,
}

/// Two back-to-back pairs: mlx5_0 <-> mlx5_1 and mlx5_2 <-> mlx5_3 (ports 0..3 of one model
/// NIC, polled by one thread). The second pair gives a cross-connect between mlx5_1 and mlx5_2
/// a free end on each side (mlx5_0 to send in, mlx5_3 to collect).
pub(crate) const DEVS: [DevInfo; 4] = [
    DevInfo {
        ibdev: "mlx5_0",
        uverbs: "uverbs0",
        netdev: "mdl0",
        pci: "0000:3b:00.0",
        mac: [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x00],
        ifindex: 1000,
    },
    DevInfo {
        ibdev: "mlx5_1",
        uverbs: "uverbs1",
        netdev: "mdl1",
        pci: "0000:3b:00.1",
        mac: [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01],
        ifindex: 1001,
    },
    DevInfo {
        ibdev: "mlx5_2",
        uverbs: "uverbs2",
        netdev: "mdl2",
        pci: "0000:3c:00.0",
        mac: [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02],
        ifindex: 1002,
    },
    DevInfo {
        ibdev: "mlx5_3",
        uverbs: "uverbs3",
        netdev: "mdl3",
        pci: "0000:3c:00.1",
        mac: [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x03],
        ifindex: 1003,
    },
];

/// The port of the other end of each device's cable.
const PEERS: [usize; 4] = [1, 0, 3, 2];

/// What an address in the registry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Context,
    Pd,
    Mr,
    Cq,
    Qp,
    Wq,
    IndTable,
    Flow,
    /// A completion channel.
    Channel,
    /// A software-steering action (`mlx5dv_dr_action_create_*`).
    DrAction,
    /// A DevX object or UAR (`mlx5dv_devx_obj_create`, `mlx5dv_devx_alloc_uar`).
    DevxObj,
}

struct Entry {
    kind: Kind,
    /// Objects created on this one and still alive (the kernel's `usecnt`): a PD with MRs, a
    /// CQ with queues, a WQ in an indirection table, a table under an RSS QP, a QP with flows.
    users: u32,
    /// The objects whose `users` this one counts in.
    holds: Vec<usize>,
}

/// Every object handed out and alive, by the address C code holds. Lets each verb refuse a
/// pointer it did not hand out (EINVAL) instead of dereferencing it, and gives the live count.
#[derive(Default)]
pub(crate) struct Registry {
    objs: HashMap<usize, Entry>,
}

impl Registry {
    pub fn check(&self, p: usize, kind: Kind) -> bool {
        self.objs.get(&p).is_some_and(|e| e.kind == kind)
    }

    pub fn add(&mut self, p: usize, kind: Kind, holds: Vec<usize>) {
        for h in &holds {
            if let Some(e) = self.objs.get_mut(h) {
                e.users += 1;
            }
        }
        self.objs.insert(p, Entry { kind, users: 0, holds });
    }

    /// Removes an object nothing depends on any more; EBUSY otherwise (the kernel's answer to
    /// destroying an object in use), EINVAL if it is not a live object of that kind.
    pub fn remove(&mut self, p: usize, kind: Kind) -> Result<(), i32> {
        match self.objs.get(&p) {
            Some(e) if e.kind == kind && e.users == 0 => {}
            Some(e) if e.kind == kind => return Err(libc::EBUSY),
            _ => return Err(libc::EINVAL),
        }
        self.force_remove(p);
        Ok(())
    }

    /// Removes an object whatever depends on it (closing a context).
    pub fn force_remove(&mut self, p: usize) -> bool {
        let Some(e) = self.objs.remove(&p) else {
            return false;
        };
        for h in e.holds {
            if let Some(h) = self.objs.get_mut(&h) {
                h.users = h.users.saturating_sub(1);
            }
        }
        true
    }

    pub fn users(&self, p: usize) -> u32 {
        self.objs.get(&p).map_or(0, |e| e.users)
    }

    pub fn len(&self) -> usize {
        self.objs.len()
    }

    /// Every live object of `kind`.
    pub fn all(&self, kind: Kind) -> Vec<usize> {
        self.objs
            .iter()
            .filter(|(_, e)| e.kind == kind)
            .map(|(&p, _)| p)
            .collect()
    }
}

/// The process-wide model.
pub(crate) struct Global {
    pub nic: Arc<Nic>,
    /// What the devices are: identity, caps and knobs as the profile and knobs made them.
    pub cfg: mlx5_model::ModelConfig,
    /// The `struct ibv_device`s, one per [`DEVS`] entry, leaked: device pointers stay valid for the process, as
    /// rdma-core's do once discovered.
    devices: [usize; DEVS.len()],
    pub sysfs_root: CString,
    pub dv: AtomicBool,
    pub cap_net_raw: AtomicBool,
    pub refuse_flow: Mutex<String>,
    pub reg: Mutex<Registry>,
}

/// Why the model could not be set up: a setting of the environment that is malformed or out of
/// range (errno EINVAL), or what the system refused (its errno).
#[derive(Debug)]
pub(crate) struct SetupError {
    pub errno: i32,
    pub msg: String,
}

impl SetupError {
    /// A setting the user gave is wrong.
    fn usage(msg: impl Into<String>) -> SetupError {
        SetupError {
            errno: libc::EINVAL,
            msg: msg.into(),
        }
    }

    /// The system refused: `e`'s errno (EIO when it has none).
    fn system(msg: impl Into<String>, e: &std::io::Error) -> SetupError {
        SetupError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            msg: msg.into(),
        }
    }
}

static GLOBAL: OnceLock<Result<Global, SetupError>> = OnceLock::new();
/// Whether the setup error has been reported: on stderr by the first verb that failed on it,
/// or to a caller of `rawpkt_model_setup_error`, which reports it itself.
static SAID: AtomicBool = AtomicBool::new(false);

/// The model, created on first use: the NIC starts polling on its own thread (pinned to
/// `RAWPKT_MODEL_CPU` when set, as `model:` ports are) and the sysfs tree is written.
pub(crate) fn global() -> Result<&'static Global, i32> {
    GLOBAL.get_or_init(init).as_ref().map_err(|e| {
        // Said once: every verb after the first fails the same way.
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!("rawpkt model library: {}", e.msg);
        }
        libc::ENODEV
    })
}

/// [`global`] for a caller that reports the reason itself: the error, not said on stderr (now
/// or by a later verb).
pub(crate) fn setup_error() -> Option<&'static SetupError> {
    let e = GLOBAL.get_or_init(init).as_ref().err()?;
    SAID.store(true, Ordering::Relaxed);
    Some(e)
}

/// The wire of each device: back to back in pairs ([`PEERS`]), or as `RAWPKT_MODEL_WIRES` says:
/// `ibdev=WIRE[,ibdev=WIRE...]` with WIRE `afpacket:IFNAME` (a Linux interface, veth included,
/// through AF_PACKET: frames reach other processes and programs), `null` (sent frames vanish,
/// counted), `loopback` (they come back in) or `peer` (the default). A device rewired this way
/// takes its partner's end with it: the partner's wire becomes `null` unless it is named too.
pub(crate) fn wires(spec: Option<&str>) -> Result<Vec<Link>, SetupError> {
    let mut chosen: Vec<Option<Link>> = (0..DEVS.len()).map(|_| None).collect();
    let usage = "RAWPKT_MODEL_WIRES: expected ibdev=afpacket:IFNAME|null|loopback|peer[,...]";
    for item in spec.unwrap_or("").split(',').filter(|s| !s.trim().is_empty()) {
        let (dev, wire) = item
            .trim()
            .split_once('=')
            .ok_or_else(|| SetupError::usage(format!("{usage}, got {item:?}")))?;
        let i = ibdev_index(dev)
            .ok_or_else(|| SetupError::usage(format!("RAWPKT_MODEL_WIRES: no device {dev:?} (mlx5_0..mlx5_3)")))?;
        let w = match wire {
            "null" => Link::Null,
            "loopback" => Link::Loopback,
            "peer" => Link::Peer(PEERS[i]),
            w => match w.strip_prefix("afpacket:") {
                Some(ifname) if !ifname.is_empty() => {
                    Link::afpacket(ifname).map_err(|e| SetupError::system(e.to_string(), &e))?
                }
                _ => return Err(SetupError::usage(format!("{usage}, got {item:?}"))),
            },
        };
        chosen[i] = Some(w);
    }
    let rewired: Vec<bool> = chosen
        .iter()
        .enumerate()
        .map(|(i, w)| {
            w.as_ref()
                .is_some_and(|w| !matches!(w, Link::Peer(p) if *p == PEERS[i]))
        })
        .collect();
    Ok(chosen
        .into_iter()
        .enumerate()
        .map(|(i, w)| match w {
            Some(w) => w,
            None if rewired[PEERS[i]] => Link::Null,
            None => Link::Peer(PEERS[i]),
        })
        .collect())
}

fn init() -> Result<Global, SetupError> {
    // The settings first: a mistake in them is said before anything is created.
    let spec = match std::env::var_os("RAWPKT_MODEL_WIRES") {
        None => None,
        Some(v) => Some(
            v.into_string()
                .map_err(|v| SetupError::usage(format!("RAWPKT_MODEL_WIRES={v:?}: not UTF-8")))?,
        ),
    };
    let wires = wires(spec.as_deref())?;
    // `RAWPKT_MODEL_DEVX=0`: a host whose kernel offers no DevX (mlx5_ib without
    // `MLX5_IB_ALLOC_UCTX_DEVX`), where `mlx5dv_open_device` with DevX fails and drivers take
    // their ibverbs path (DPDK's `mlx5_open_device` falls back to `ibv_open_device`). The
    // `devx.<ibdev>` knob sets the same per device at run time.
    match std::env::var("RAWPKT_MODEL_DEVX").as_deref() {
        Err(_) | Ok("1") => {}
        Ok("0") => crate::devx::refuse_all(),
        Ok(v) => {
            return Err(SetupError::usage(format!(
                "RAWPKT_MODEL_DEVX={v:?}: expected 0 (no DevX) or 1"
            )))
        }
    }
    // This stand-in for libibverbs reads the model's variables, as the tools do: the device
    // profile and knobs (`RAWPKT_MODEL_PROFILE`, `RAWPKT_MODEL_KNOBS`) among them.
    let opts = mlx5_model::env::EnvOptions::read().map_err(SetupError::usage)?;
    let cfg = opts.device().map_err(SetupError::usage)?;
    let root = crate::sysfs::create(&cfg.identity).map_err(|msg| SetupError { errno: libc::EIO, msg })?;
    // A profile without DevX is a kernel that offers none (as `RAWPKT_MODEL_DEVX=0`).
    if cfg.knobs.devx == mlx5_model::profile::Devx::Absent {
        crate::devx::refuse_all();
    }
    let nic = Nic::new(wires, cfg.clone()).map_err(|e| {
        // A trace path that names no regular file is the user's mistake.
        let msg = e.to_string();
        if rawpkt_sys::file::refused(&e) {
            SetupError::usage(msg)
        } else {
            SetupError::system(msg, &e)
        }
    })?;
    crate::devx::listen(&nic);
    for (port, d) in DEVS.iter().enumerate() {
        // The devices are bifurcated like a real mlx5 netdev: frames go to Linux unless a flow
        // steers them to a queue.
        nic.enable_steering(port);
        nic.set_port_mac(port, d.mac);
    }
    for (port, d) in DEVS.iter().enumerate() {
        nic.publish_out_of_buffer(
            port,
            root.join("class/infiniband")
                .join(d.ibdev)
                .join(crate::sysfs::OUT_OF_BUFFER),
        );
    }
    nic.start(opts.cpu);
    let mut devices = [0usize; DEVS.len()];
    for (i, d) in DEVS.iter().enumerate() {
        // SAFETY: ibv_device is plain C data (arrays, enums, function pointers); all zeroes is
        // a valid value of it (NULL pointers, zero enums).
        let mut dev: ibv_device = unsafe { std::mem::zeroed() };
        dev.node_type = rdma_abi::IBV_NODE_CA;
        dev.transport_type = rdma_abi::IBV_TRANSPORT_IB;
        fill(&mut dev.name, d.ibdev);
        fill(&mut dev.dev_name, d.uverbs);
        let class = root.join("class");
        fill(
            &mut dev.dev_path,
            &class.join("infiniband_verbs").join(d.uverbs).to_string_lossy(),
        );
        fill(
            &mut dev.ibdev_path,
            &class.join("infiniband").join(d.ibdev).to_string_lossy(),
        );
        devices[i] = Box::into_raw(Box::new(dev)) as usize;
    }
    // A traffic thread, when asked for, opens its ports through this library: it waits for
    // GLOBAL, which is set when this returns.
    crate::traffic::start_from_env();
    let g = Global {
        nic,
        cfg,
        devices,
        sysfs_root: CString::new(root.to_string_lossy().as_bytes()).map_err(|e| SetupError {
            errno: libc::EINVAL,
            msg: e.to_string(),
        })?,
        dv: AtomicBool::new(true),
        cap_net_raw: AtomicBool::new(true),
        refuse_flow: Mutex::new(String::new()),
        reg: Mutex::new(Registry::default()),
    };
    // Its thread reads the counters through GLOBAL, which is set when this returns.
    crate::counters::start_from_env();
    Ok(g)
}

/// Copies `s` into a C char array, NUL-terminated and truncated to fit.
pub(crate) fn fill(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

impl Global {
    pub fn device(&self, i: usize) -> *mut ibv_device {
        self.devices[i] as *mut ibv_device
    }

    /// The port (index into [`DEVS`]) of a device pointer this library handed out.
    pub fn port_of(&self, dev: *const ibv_device) -> Option<usize> {
        self.devices.iter().position(|&d| d == dev as usize)
    }

    pub fn reg(&self) -> MutexGuard<'_, Registry> {
        self.reg.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn dv_enabled(&self) -> bool {
        self.dv.load(Ordering::Relaxed)
    }

    /// Whether the caller may create RAW_PACKET QPs and flows: the calling thread's effective
    /// capability set holds CAP_NET_RAW (what `capable(CAP_NET_RAW)` in the kernel's
    /// `create_qp`/`ib_uverbs_ex_create_flow` asks; since Linux 6.16 against the device's net
    /// namespace owner, which is the initial one here), and the `cap_net_raw` knob is on.
    pub fn may_use_raw(&self) -> bool {
        self.cap_net_raw.load(Ordering::Relaxed) && crate::caps::thread_has_cap_net_raw()
    }
}

pub(crate) fn ibdev_index(name: &str) -> Option<usize> {
    DEVS.iter().position(|d| d.ibdev == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wires_from_the_environment() {
        let w = wires(None).unwrap();
        assert!(matches!(
            w[..],
            [Link::Peer(1), Link::Peer(0), Link::Peer(3), Link::Peer(2)]
        ));
        // mlx5_0 wired to nothing takes mlx5_1's other end away; the second pair is untouched.
        let w = wires(Some("mlx5_0=null")).unwrap();
        assert!(matches!(w[..], [Link::Null, Link::Null, Link::Peer(3), Link::Peer(2)]));
        let w = wires(Some("mlx5_2=loopback, mlx5_3=null")).unwrap();
        assert!(matches!(
            w[..],
            [Link::Peer(1), Link::Peer(0), Link::Loopback, Link::Null]
        ));
        assert!(matches!(
            wires(Some("mlx5_1=peer")).unwrap()[..2],
            [Link::Peer(1), Link::Peer(0)]
        ));
        for bad in ["mlx5_9=null", "mlx5_0", "mlx5_0=cable", "mlx5_0=afpacket:"] {
            assert!(wires(Some(bad)).is_err(), "{bad}");
        }
        for bad in ["mlx5_9=null", "mlx5_0", "mlx5_0=cable"] {
            assert_eq!(wires(Some(bad)).err().unwrap().errno, libc::EINVAL, "{bad}");
        }
        let e = wires(Some("mlx5_0=afpacket:no-such-if0")).err().unwrap();
        assert!(e.msg.contains("no-such-if0"), "{e:?}");
        assert_ne!(
            e.errno,
            libc::EINVAL,
            "the system's refusal, not a malformed setting: {e:?}"
        );
    }
}
