//! An open `xdp:` port: the interface, the steering program compiled from the port's rules, its
//! XSKMAP, and the BPF link that keeps the program attached for exactly as long as the port
//! lives (or the process: the kernel detaches it when the last descriptor closes).

use std::io;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::{AttachMode, BindMode, XdpSpec};
use crate::flow::bpf::{compile_xdp, LoadedProgram, StealAction, XskMap};
use crate::flow::rule::FlowRule;
use crate::rx::xdp::XdpRxQueue;
use crate::spec::Backend;
use crate::sys::{bpf, netdev};
use crate::tx::xdp::XdpTxQueue;
use crate::xsk::socket::{BindArgs, Socket, XDP_PACKET_HEADROOM};
use crate::{Error, Pool, QueueConfig, RxQueue, TxQueue};

/// The xdp ports open in this process, by namespace and ifindex: an interface takes one XDP
/// program, so a second port on it could only fail to attach; it is refused as what it is.
static OPEN: std::sync::Mutex<Vec<OpenPort>> = std::sync::Mutex::new(Vec::new());

/// An entry of [`OPEN`]: the namespace (nsfs device and inode), the ifindex, the port.
type OpenPort = (Option<(u64, u64)>, u32, std::sync::Weak<PortShared>);

/// The port already open on interface `ifindex` of the namespace `netns`, if any.
fn already_open(netns: Option<(u64, u64)>, ifindex: u32) -> Option<String> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, _, w)| w.strong_count() > 0);
    open.iter()
        .find(|(n, i, _)| *n == netns && *i == ifindex)
        .and_then(|(_, _, w)| w.upgrade())
        .map(|p| p.name())
}

pub(crate) struct PortShared {
    pub ifname: String,
    pub ifindex: u32,
    /// Queues of the interface, and the first and number of those this port uses.
    pub hw_queues: u32,
    pub first_queue: u32,
    pub queues: u32,
    pub bind: BindMode,
    pub attach_mode: &'static str,
    pub rules: Vec<FlowRule>,
    pub map: XskMap,
    /// How the last socket bound: 0 none yet, 1 copy, 2 zero-copy (for `describe`).
    pub bound: AtomicU8,
    /// Which of the port's queue ids have a socket (see [`Claim`]).
    claimed: std::sync::Mutex<Vec<bool>>,
    netns: OwnedFd,
    _prog: LoadedProgram,
    _link: OwnedFd,
}

impl PortShared {
    pub(crate) fn name(&self) -> String {
        format!("xdp:{}", self.ifname)
    }

    /// Runs `f` in the port's network namespace.
    pub(crate) fn in_netns<T>(&self, f: impl FnOnce() -> T) -> io::Result<T> {
        netdev::in_netns(&self.netns, f)
    }

    /// A one-line error for a failed system call on this port.
    pub(crate) fn io_error(&self, what: &str, e: io::Error) -> Error {
        io_error(&self.ifname, what, e)
    }
}

pub(crate) fn io_error(ifname: &str, what: &str, e: io::Error) -> Error {
    let why = match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => format!(
            "not permitted ({e}): AF_XDP needs root, or CAP_NET_ADMIN + CAP_NET_RAW + CAP_BPF (+ CAP_IPC_LOCK or a \
             large enough RLIMIT_MEMLOCK for the UMEM)"
        ),
        Some(libc::EAFNOSUPPORT) => {
            "this kernel has no AF_XDP sockets: needs Linux 4.18+ built with CONFIG_XDP_SOCKETS=y".to_string()
        }
        Some(libc::EBUSY) => format!(
            "the queue is already bound to another AF_XDP socket ({e}): one socket per queue; take a queue id's RX \
             and TX halves together with Port::queue_pair, and no other program on the queue"
        ),
        Some(libc::ENOBUFS | libc::ENOMEM) => {
            format!("{e}: the UMEM could not be pinned; raise RLIMIT_MEMLOCK (ulimit -l) or run as root")
        }
        _ => e.to_string(),
    };
    Error::device(format!("xdp:{ifname}: {what}: {why}")).caused_by(e)
}

pub(crate) struct XdpPort {
    shared: Arc<PortShared>,
}

/// A socket for `hw_queue` of `port` over `pool`: zero-copy, then copy mode, unless the spec
/// forces one.
fn open_socket(
    port: &Arc<PortShared>,
    hw_queue: u32,
    pool: &Rc<Pool>,
    size: u32,
    tx_budget: u32,
) -> Result<Socket, Error> {
    let name = port.name();
    let chunk = pool.buf_size();
    // Aligned mode: chunks are powers of two from XDP_UMEM_MIN_CHUNK_SIZE (2048) to the page
    // size (net/xdp/xdp_umem.c, xdp_umem_reg).
    if !(2048..=4096).contains(&chunk) {
        return Err(Error::config(format!(
            "{name}: AF_XDP needs pool buffers of 2048 or 4096 bytes (a UMEM chunk is a buffer), not {chunk}"
        )));
    }
    if pool.data_room() < XDP_PACKET_HEADROOM + 64 {
        return Err(Error::config(format!(
            "{name}: pool headroom leaves no room for frames"
        )));
    }
    let modes: &[BindMode] = match port.bind {
        BindMode::Auto => &[BindMode::ZeroCopy, BindMode::Copy],
        BindMode::ZeroCopy => &[BindMode::ZeroCopy],
        BindMode::Copy => &[BindMode::Copy],
    };
    let what = || format!("queue {hw_queue}");
    let mut last = None;
    for (k, &mode) in modes.iter().enumerate() {
        let args = BindArgs {
            pool,
            ifindex: port.ifindex,
            hw_queue,
            size,
            zerocopy: mode == BindMode::ZeroCopy,
            tx_budget,
        };
        // The socket belongs to the namespace it is created in, which decides what its bind's
        // ifindex names: create it where the port was opened.
        let bound = port
            .in_netns(crate::sys::xsk::socket)
            .and_then(|fd| Socket::bind(fd?, &args));
        match bound {
            Ok(x) => {
                port.bound.store(if x.is_zerocopy() { 2 } else { 1 }, Ordering::Relaxed);
                log::info!(
                    "{name} queue {hw_queue}: AF_XDP socket bound in {} mode, need_wakeup on, {} frames per sendto; XDP program in {} mode",
                    if x.is_zerocopy() { "zero-copy" } else { "copy" },
                    x.tx_budget().unwrap_or(32),
                    port.attach_mode,
                );
                return Ok(x);
            }
            // Zero-copy not offered by this driver (veth, most virtual devices): fall back.
            Err(e) if k + 1 < modes.len() && matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                last = Some(e)
            }
            Err(e) if mode == BindMode::ZeroCopy && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(no_zero_copy(port, hw_queue).caused_by(e))
            }
            Err(e) => return Err(port.io_error(&what(), e)),
        }
    }
    Err(port.io_error(&what(), last.unwrap_or_else(|| io::Error::other("no bind mode"))))
}

/// `bind=zerocopy` on an interface whose driver has no zero-copy AF_XDP (`XDP_ZEROCOPY` bind:
/// EOPNOTSUPP, net/xdp/xsk_buff_pool.c `xp_assign_dev`: the driver has no `ndo_xsk_wakeup` or
/// XDP_SETUP_XSK_POOL): what the user asked for cannot be had on this device.
fn no_zero_copy(port: &Arc<PortShared>, hw_queue: u32) -> Error {
    let driver = port
        .in_netns(|| netdev::driver(&port.ifname))
        .ok()
        .flatten()
        .map_or(String::new(), |d| format!(" ({d})"));
    Error::config(format!(
        "{} queue {hw_queue}: the driver of {}{driver} has no zero-copy AF_XDP; use bind=copy, or leave bind \
         unset to fall back to copy mode",
        port.name(),
        port.ifname
    ))
}

/// Opens the port described by `spec`, in the calling thread's namespace or the one it names.
pub(crate) fn open(spec: XdpSpec) -> Result<XdpPort, Error> {
    let here = netdev::current_netns().map_err(|e| Error::device(format!("xdp:{}: {e}", spec.ifname)).caused_by(e))?;
    let netns = match &spec.netns {
        None => here,
        Some(ns) => {
            let path = format!("/var/run/netns/{ns}");
            std::fs::File::open(&path).map(OwnedFd::from).map_err(|e| {
                Error::device(format!(
                    "xdp:{}: network namespace `{}`: {e} (see `ip netns list`)",
                    spec.ifname,
                    crate::spec::echo(ns)
                ))
                .caused_by(e)
            })?
        }
    };
    let shared = netdev::in_netns(&netns, || open_here(&spec)).map_err(|e| {
        Error::device(format!("xdp:{}: cannot enter the network namespace: {e}", spec.ifname)).caused_by(e)
    })??;
    let Opened {
        ifindex,
        hw_queues,
        first_queue,
        queues,
        rules,
        prog,
        map,
        link,
        attach_mode,
    } = shared;
    let port = XdpPort {
        shared: Arc::new(PortShared {
            ifname: spec.ifname.clone(),
            ifindex,
            hw_queues,
            first_queue,
            queues,
            bind: spec.bind,
            attach_mode,
            rules,
            map,
            bound: AtomicU8::new(0),
            claimed: std::sync::Mutex::new(vec![false; queues as usize]),
            netns,
            _prog: prog,
            _link: link,
        }),
    };
    let key = (netdev::ns_id(&port.shared.netns), port.shared.ifindex);
    OPEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key.0, key.1, Arc::downgrade(&port.shared)));
    Ok(port)
}

/// What opening the port inside its namespace made; the namespace's descriptor joins it after.
struct Opened {
    ifindex: u32,
    hw_queues: u32,
    first_queue: u32,
    queues: u32,
    rules: Vec<FlowRule>,
    prog: LoadedProgram,
    map: XskMap,
    link: OwnedFd,
    attach_mode: &'static str,
}

fn open_here(spec: &XdpSpec) -> Result<Opened, Error> {
    let ifname = spec.ifname.as_str();
    let dev = |m: String| Error::device(format!("xdp:{ifname}: {m}"));
    let ifindex = match crate::sys::if_index(ifname) {
        Ok(i) => i,
        Err(e) => {
            let mut names = netdev::names();
            names.sort();
            return Err(dev(format!(
                "no such interface; interfaces here: {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
            .caused_by(e));
        }
    };
    let here = netdev::current_netns().ok().and_then(|fd| netdev::ns_id(&fd));
    if let Some(other) = already_open(here, ifindex) {
        return Err(Error::config(format!(
            "xdp:{ifname}: the interface is already open in this process (port {other}); an interface \
             takes one port, whose queues are its queues: open it once"
        )));
    }
    if !netdev::is_up(ifname).map_err(|e| dev(e.to_string()).caused_by(e))? {
        return Err(dev(format!(
            "interface is down; bring it up with `ip link set {ifname} up`"
        )));
    }
    let hw_queues = match netdev::rx_queues(ifname) {
        Ok(Some(n)) => n,
        // No channel report (some virtual devices): one queue, as the kernel's default.
        Ok(None) | Err(_) => 1,
    };
    let (first_queue, queues) = match spec.queue {
        Some(q) if q >= hw_queues => {
            return Err(Error::config(format!(
                "xdp:{ifname}/{q}: queue {q} out of range: {ifname} has {hw_queues} receive queue{} (0..={})",
                if hw_queues == 1 { "" } else { "s" },
                hw_queues - 1
            )))
        }
        Some(q) => (q, 1),
        None => (0, hw_queues),
    };
    if spec.rx_queues != 1 && u32::from(spec.rx_queues) != queues {
        return Err(Error::config(format!(
            "xdp:{ifname}: {} receive queues asked for, but an xdp port has one queue per interface queue it \
             uses, {queues} here; set the interface's with `ethtool -L {ifname} combined N`, or leave rx_queues at 1",
            spec.rx_queues
        )));
    }
    // AF_XDP first: its absence or a missing capability is the clearest thing to report.
    drop(crate::sys::xsk::socket().map_err(|e| io_error(ifname, "AF_XDP socket", e))?);
    let rules = match &spec.rules {
        Some(r) => r.clone(),
        None => {
            let mac = netdev::mac(ifname).map_err(|e| dev(format!("reading its MAC address: {e}")).caused_by(e))?;
            // mlx5's default also copies multicast; XDP cannot copy (see the module docs), so
            // multicast simply stays with Linux.
            spec.default_rules.rules(mac)
        }
    };
    let program =
        compile_xdp(&rules, StealAction::Redirect).map_err(|e| Error::config(format!("xdp:{ifname}: {e}")))?;
    let map = XskMap::new(hw_queues).map_err(|e| io_error(ifname, "creating the XSKMAP", e))?;
    let prog = LoadedProgram::load(&program, Some(&map)).map_err(|e| io_error(ifname, "loading the XDP program", e))?;
    let (link, attach_mode) = attach(ifname, ifindex, &prog, spec.attach)?;
    Ok(Opened {
        ifindex,
        hw_queues,
        first_queue,
        queues,
        rules,
        prog,
        map,
        link,
        attach_mode,
    })
}

/// `BPF_LINK_CREATE` in native (driver) mode, then generic (SKB) mode.
fn attach(
    ifname: &str,
    ifindex: u32,
    prog: &LoadedProgram,
    want: AttachMode,
) -> Result<(OwnedFd, &'static str), Error> {
    let tries: &[(u32, &'static str)] = match want {
        AttachMode::Auto => &[
            (bpf::XDP_FLAGS_DRV_MODE, "native"),
            (bpf::XDP_FLAGS_SKB_MODE, "generic"),
        ],
        AttachMode::Native => &[(bpf::XDP_FLAGS_DRV_MODE, "native")],
        AttachMode::Generic => &[(bpf::XDP_FLAGS_SKB_MODE, "generic")],
    };
    let mut errs = Vec::new();
    let mut last = None;
    for &(flags, name) in tries {
        match bpf::xdp_link_create(prog.fd(), ifindex, flags) {
            Ok(link) => return Ok((link, name)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => return Err(io_error(ifname, "attaching the XDP program", e)),
                Some(libc::EBUSY | libc::EEXIST) => {
                    return Err(Error::device(format!(
                        "xdp:{ifname}: another XDP program is already attached ({e}); see `ip link show {ifname}`, \
                         detach it with `ip link set {ifname} xdp off`"
                    ))
                    .caused_by(e))
                }
                _ => {
                    errs.push(format!("{name} mode: {e}"));
                    last = Some(e);
                }
            },
        }
    }
    let all_einval = errs.iter().all(|m| m.contains("os error 22"));
    let err = Error::device(format!(
        "xdp:{ifname}: cannot attach the XDP program ({}){}",
        errs.join("; "),
        if all_einval {
            "; attaching XDP through a BPF link needs Linux 5.9 or later"
        } else {
            ""
        }
    ));
    // Every mode was tried (`tries` is never empty): the last one's errno.
    Err(match last {
        Some(e) => err.caused_by(e),
        None => err,
    })
}

/// A port's hold on one of its queue ids while a socket is bound to it: one socket per interface
/// queue (the kernel refuses a second bind with EBUSY), and a queue id asked for twice says so in
/// words of the API rather than the kernel's.
struct Claim {
    port: Arc<PortShared>,
    qid: u16,
}

impl Claim {
    fn take(port: &Arc<PortShared>, qid: u16) -> Result<Claim, Error> {
        let mut claimed = port.claimed.lock().unwrap_or_else(|e| e.into_inner());
        if std::mem::replace(&mut claimed[usize::from(qid)], true) {
            return Err(Error::config(format!(
                "{}: queue {qid} is already in use by a queue that is still open; a queue id is taken once at a \
                 time, and its RX and TX halves together come from Port::queue_pair",
                port.name()
            )));
        }
        Ok(Claim {
            port: port.clone(),
            qid,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = self.port.claimed.lock().unwrap_or_else(|e| e.into_inner());
        claimed[usize::from(self.qid)] = false;
    }
}

/// Stops the XDP program sending frames to a queue's socket when its RX queue is dropped.
struct Steering {
    port: Arc<PortShared>,
    hw_queue: u32,
}

impl Drop for Steering {
    fn drop(&mut self) {
        let _ = bpf::xskmap_clear(self.port.map.fd(), self.hw_queue);
    }
}

impl XdpPort {
    /// A socket for queue `qid`, bound to its interface queue: the queue id is taken until the
    /// socket closes (every queue made from it dropped).
    fn socket(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<(Rc<Socket>, u32), Error> {
        let hw = self.hw_queue(qid)?;
        if cfg.xdp_tx_budget < 32 {
            // The kernel's floor (xsk_setsockopt): below it the option is refused.
            return Err(Error::config(format!(
                "{}: xdp_tx_budget {} is below 32, the fewest frames per sendto the kernel takes",
                self.shared.name(),
                cfg.xdp_tx_budget
            )));
        }
        let claim = Claim::take(&self.shared, qid)?;
        let x = open_socket(&self.shared, hw, pool, cfg.size, cfg.xdp_tx_budget)?;
        Ok((Rc::new(x.owned_by(Box::new(claim))), hw))
    }

    /// The RX queue over `xsk`, its fill ring filled, then entered in the XSKMAP.
    fn rx(&self, xsk: Rc<Socket>, hw_queue: u32) -> Result<XdpRxQueue, Error> {
        let port = &self.shared;
        let name = format!("{} queue {hw_queue}", port.name());
        let mut q = XdpRxQueue::new(xsk, &name)?;
        // Only now does the program send frames here: the fill ring has buffers.
        bpf::xskmap_set(port.map.fd(), hw_queue, q.raw_fd())
            .map_err(|e| port.io_error("binding the queue in the XSKMAP", e))?;
        q.steered_by(Box::new(Steering {
            port: port.clone(),
            hw_queue,
        }));
        Ok(q)
    }

    fn tx(&self, xsk: Rc<Socket>, hw_queue: u32) -> Result<XdpTxQueue, Error> {
        XdpTxQueue::new(xsk, &format!("{} queue {hw_queue}", self.shared.name()))
    }

    fn hw_queue(&self, qid: u16) -> Result<u32, Error> {
        let s = &self.shared;
        if u32::from(qid) >= s.queues {
            return Err(Error::config(format!(
                "{}: queue {qid} out of range: the port has {} queue{} (0..={})",
                s.name(),
                s.queues,
                if s.queues == 1 { "" } else { "s" },
                s.queues - 1
            )));
        }
        Ok(s.first_queue + u32::from(qid))
    }

    pub(crate) fn describe(&self) -> String {
        let s = &self.shared;
        let rules: Vec<String> = s.rules.iter().map(|r| r.to_string()).collect();
        let bound = match s.bound.load(Ordering::Relaxed) {
            0 => "no socket yet",
            1 => "sockets in copy mode",
            _ => "sockets in zero-copy mode",
        };
        format!(
            "xdp:{} ifindex {} queues {}..{} of {}, XDP program in {} mode, {bound}, rules [{}]",
            s.ifname,
            s.ifindex,
            s.first_queue,
            s.first_queue + s.queues,
            s.hw_queues,
            s.attach_mode,
            rules.join("; ")
        )
    }
}

impl Backend for XdpPort {
    /// A socket whose TX ring stays unused (see [`crate::Port::queue_pair`]).
    fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        no_rx_offloads(pool, cfg)?;
        let (xsk, hw) = self.socket(qid, pool, cfg)?;
        Ok(Box::new(self.rx(xsk, hw)?))
    }

    /// A socket that receives nothing: no XSKMAP entry points at it.
    fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        let (xsk, hw) = self.socket(qid, pool, cfg)?;
        Ok(Box::new(self.tx(xsk, hw)?))
    }

    /// Both halves of one socket.
    fn queue_pair(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<crate::QueuePair, Error> {
        no_rx_offloads(pool, cfg)?;
        let (xsk, hw) = self.socket(qid, pool, cfg)?;
        Ok((Box::new(self.rx(xsk.clone(), hw)?), Box::new(self.tx(xsk, hw)?)))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn rx_queues(&self) -> u16 {
        self.shared.queues.min(u32::from(u16::MAX)) as u16
    }

    fn tx_queues(&self) -> Option<u16> {
        Some(self.rx_queues())
    }

    fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        // RX: the fill and RX rings together hold at most `size` posted frames. TX: a frame is
        // ours again only once it reaches the completion ring, and the kernel takes from the TX
        // ring only while the completion ring has room: up to both rings' worth in flight.
        3 * cfg.size as usize
    }

    fn describe(&self) -> Option<String> {
        Some(XdpPort::describe(self))
    }

    fn mac(&self) -> Option<[u8; 6]> {
        let s = &self.shared;
        s.in_netns(|| netdev::mac(&s.ifname).ok()).ok().flatten()
    }

    fn link_speed_mbps(&self) -> Option<u64> {
        let s = &self.shared;
        s.in_netns(|| netdev::speed_mbps(&s.ifname))
            .ok()
            .flatten()
            .map(u64::from)
    }

    fn netdev(&self) -> Option<(u32, Option<&OwnedFd>)> {
        Some((self.shared.ifindex, Some(&self.shared.netns)))
    }

    fn identity(&self) -> crate::PortIdentity {
        let s = &self.shared;
        crate::PortIdentity::Xdp {
            netns: netdev::ns_id(&s.netns).unwrap_or_default(),
            ifindex: s.ifindex,
            // A port on every queue of the interface overlaps any port on one of them.
            queue: (s.queues != s.hw_queues || s.first_queue != 0).then_some(s.first_queue),
        }
    }
}

/// An AF_XDP socket receives each frame into one chunk (no multi-buffer frames here), from a
/// ring of chunks (no striding RQ), with no tag stripping and no receive timestamp (no XDP
/// metadata is asked for): the receive options that ask for any of them are refused in one line
/// naming them. CQE compression, on by default, is a device's bus saving with nothing to see
/// from above, and so is nothing to refuse.
fn no_rx_offloads(pool: &Pool, cfg: &QueueConfig) -> Result<(), Error> {
    let asked: Vec<String> = [
        (cfg.rx_max_frame > pool.data_room()).then(|| {
            format!(
                "rx_max_frame {} (one {}-byte buffer per frame)",
                cfg.rx_max_frame,
                pool.data_room()
            )
        }),
        cfg.rx_vlan_strip.then(|| "rx_vlan_strip".to_string()),
        cfg.rx_striding.then(|| "rx_striding".to_string()),
        cfg.rx_timestamps.then(|| "rx_timestamps".to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !asked.is_empty() {
        return Err(Error::config(format!(
            "xdp ports do not take {}: ask an mlx5 or model port",
            asked.join(", ")
        )));
    }
    Ok(())
}
