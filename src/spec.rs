//! Port specs and opening ports.
//!
//! | spec | port |
//! |---|---|
//! | `model:NAME/P[,profile=PROFILE][,knob=NAME=VALUE]…` | port P (0 or 1) of a model NIC named NAME whose two ports are back to back; both ends opened by name share one NIC, which polls its doorbells on its own thread; the device's profile and knobs as [`ModelOptions`] says |
//! | `model:afpacket=IFNAME` | a one-port model NIC wired to the Linux interface IFNAME through AF_PACKET |
//! | `mlx5:NETDEV`, `mlx5:mlx5_0/1` | a ConnectX port (by netdev, or RDMA device and port) through rdma-core: RAW_PACKET queues, flow rules steering only what they name (the netdev keeps the rest), the Direct Verbs datapath, or ibverbs when the device offers no DV |
//! | `verbs:NETDEV`, `verbs:mlx5_0/1` | the same port with the ibverbs datapath forced |
//! | `xdp:IFNAME[/QUEUE][,rule=RULE]…[,netns=NS][,mode=native\|generic][,bind=copy\|zerocopy]` | AF_XDP on IFNAME's queues (or queue QUEUE only): frames some `rule=` matches (default: to IFNAME's own MAC) go to the port's RX queues, the rest to Linux; see the README's "Port specs" |
//!
//! How the model NIC runs (its thread's CPU, a trace, a receive rate) is [`ModelOptions`] in
//! [`PortOptions`].

use std::any::Any;
use std::rc::Rc;

use crate::flow::rule::FlowRule;
pub(crate) use crate::text::echo;
pub(crate) use crate::text::needs_escape;
use crate::{Error, Pool, QueueConfig, RxQueue, TxQueue};
pub use rawpkt_sys::LibPaths;

/// What a backend must provide to be opened as a port.
pub(crate) trait Backend: Send + Sync {
    fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error>;
    fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error>;
    /// The backend itself, for code that knows which backend it opened (`model::nic_of`).
    #[cfg_attr(not(feature = "model"), allow(dead_code))]
    fn as_any(&self) -> &dyn Any;
    /// [`Port::queue_pair`]: by default the two queues one after the other; a backend whose
    /// halves share one object (xdp: one socket) overrides it.
    fn queue_pair(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<crate::QueuePair, Error> {
        Ok((self.rx_queue(qid, pool, cfg)?, self.tx_queue(qid, pool, cfg)?))
    }
    /// Which device port this is, whatever spec named it.
    fn identity(&self) -> PortIdentity;
    /// [`Port::device_drops`].
    fn device_drops(&self) -> Option<u64> {
        None
    }
    /// [`Port::device_clock_ns`].
    fn device_clock_ns(&self) -> Option<u64> {
        None
    }
    /// [`Port::rx_queues`]; by default one.
    fn rx_queues(&self) -> u16 {
        1
    }
    /// [`Port::tx_queues`]; by default as many as the device makes.
    fn tx_queues(&self) -> Option<u16> {
        None
    }
    /// [`Port::buffers_pinned`]; by default one buffer per descriptor of each queue.
    fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        2 * cfg.size as usize
    }
    /// One line about the device behind the port and what the backend chose at open time
    /// (hardware ports: link state, speed, MAC, datapath; xdp ports: modes, queues, rules).
    fn describe(&self) -> Option<String> {
        None
    }
    /// The port's own MAC address, for ports that have one and take only frames sent to it.
    fn mac(&self) -> Option<[u8; 6]> {
        None
    }
    /// [`Port::link_speed_mbps`].
    fn link_speed_mbps(&self) -> Option<u64> {
        None
    }
    /// [`Port::neighbour_mac`], for ports with a Linux netdev: its interface index, and the
    /// namespace to ask in (None: the caller's).
    fn netdev(&self) -> Option<(u32, Option<&std::os::fd::OwnedFd>)> {
        None
    }
}

/// Which device port an open port is, resolved from its spec: `model:q/0` and `model:q/00` are
/// one port, and so are `mlx5:mlx5_1/1` and `mlx5:NETDEV` for the netdev on that port. Compare
/// ports with [`Port::same_port`].
///
/// ```
/// use rawpkt::{open, PortIdentity};
/// let port = open("model:ident-doc/01").unwrap();
/// assert_eq!(port.identity(), PortIdentity::Model { nic: "ident-doc".into(), port: 1 });
/// assert_eq!(port.identity().to_string(), "port 1 of model NIC ident-doc");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PortIdentity {
    /// A port of a model NIC.
    Model {
        /// The name the NIC was opened under (`NAME` of `model:NAME/P`, or `afpacket=IFNAME`).
        nic: String,
        /// 0 or 1.
        port: usize,
    },
    /// A port of an RDMA device.
    Rdma {
        /// The device, `mlx5_0`.
        ibdev: String,
        /// Its port, from 1.
        port: u8,
    },
    /// An interface's queues through AF_XDP.
    Xdp {
        /// The network namespace, as its nsfs inode (device, inode).
        netns: (u64, u64),
        /// The interface's index in that namespace.
        ifindex: u32,
        /// The one queue the port takes, or None for all of them.
        queue: Option<u32>,
    },
}

impl std::fmt::Display for PortIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortIdentity::Model { nic, port } => write!(f, "port {port} of model NIC {nic}"),
            PortIdentity::Rdma { ibdev, port } => write!(f, "{ibdev} port {port}"),
            PortIdentity::Xdp { ifindex, queue, .. } => match queue {
                Some(q) => write!(f, "queue {q} of interface index {ifindex}"),
                None => write!(f, "interface index {ifindex}"),
            },
        }
    }
}

/// An open port. Shareable between threads; each thread creates its own queues over its own
/// pool.
pub struct Port {
    spec: String,
    backend: Box<dyn Backend>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port").field("spec", &self.spec).finish()
    }
}

impl Port {
    /// The spec the port was opened with, as given.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Receive queue `qid` (from 0; below [`PortOptions::rx_queues`] on ports with RSS) over
    /// `pool`, whose buffers it keeps posted: `cfg.size` of them (a power of two) plus what its
    /// bursts hold. A queue id already in use, a config the backend cannot honour, a pool too
    /// small: one-line errors.
    ///
    /// ```
    /// use rawpkt::{open, Pool, PoolConfig, QueueConfig};
    /// let port = open("model:rxq-doc/1").unwrap();
    /// let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    /// let rx = port.rx_queue(0, &pool, &QueueConfig::default()).unwrap();
    /// assert_eq!(rx.stats().packets, 0);
    /// assert!(port.rx_queue(0, &pool, &QueueConfig::default()).is_err(), "in use");
    /// ```
    pub fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        check_queue_config(cfg)?;
        self.backend.rx_queue(qid, pool, cfg)
    }

    /// Send queue `qid` (from 0) over `pool`: sent buffers come back to it as the device
    /// completes them. Errors as for [`Port::rx_queue`].
    ///
    /// ```
    /// use rawpkt::{open, Pool, PoolConfig, QueueConfig};
    /// let port = open("model:txq-doc/0").unwrap();
    /// let pool = Pool::new(PoolConfig::default().buffers(2048)).unwrap();
    /// let tx = port.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
    /// assert_eq!(tx.in_flight(), 0);
    /// ```
    pub fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        check_queue_config(cfg)?;
        self.backend.tx_queue(qid, pool, cfg)
    }

    /// Both halves of queue `qid`, over one pool: what a loop that receives and sends on the same
    /// queue (a forwarder) asks for. On `mlx5:`/`verbs:`/`model:` ports it is
    /// [`rx_queue`](Self::rx_queue) then [`tx_queue`](Self::tx_queue). On `xdp:` ports a queue's
    /// RX and TX are one AF_XDP socket, so they come only from this call: `rx_queue` alone makes a
    /// socket that only receives, `tx_queue` alone one that only sends, and asking for a queue
    /// id while a queue made from it lives (an RX queue after its TX queue, say) is an
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) that names this method.
    pub fn queue_pair(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<crate::QueuePair, Error> {
        check_queue_config(cfg)?;
        self.backend.queue_pair(qid, pool, cfg)
    }

    /// How many receive queues the port's traffic arrives on, ids `0..n`: a receiver that must
    /// see every frame reads them all. `xdp:` ports: the interface's queues the port uses (a
    /// sender's frames land on the queue the kernel chooses: a veth delivers a frame sent on
    /// its queue `q` to its peer's queue `q`); `mlx5:`/`verbs:`: the RSS queues asked for
    /// ([`PortOptions::rx_queues`]); `model:`: one.
    pub fn rx_queues(&self) -> u16 {
        self.backend.rx_queues()
    }

    /// How many send queue ids there are, `0..n`, where the port has a fixed number: an `xdp:`
    /// port's queues (one AF_XDP socket each); None where the device makes as many as asked
    /// (`mlx5:`, `verbs:`, `model:`).
    pub fn tx_queues(&self) -> Option<u16> {
        self.backend.tx_queues()
    }

    /// One line about the device and what the backend chose: link state, speed, MAC and
    /// datapath (mlx5, verbs), XDP attach mode, queues and rules (xdp), the model device's
    /// profile and knobs (model).
    pub fn describe(&self) -> Option<String> {
        self.backend.describe()
    }

    /// [`Port::describe`], or the spec for ports with nothing more to say.
    pub fn description(&self) -> String {
        self.backend.describe().unwrap_or_else(|| self.spec.clone())
    }

    /// The MAC address a NIC port (`mlx5:`, `verbs:`, `xdp:`) has and, without rules of one's
    /// own, takes frames for; None for model ports, which take every frame on their wire.
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.backend.mac()
    }

    /// The port's line rate in Mb/s, where it reports one: an `mlx5:`/`verbs:` port's link
    /// speed (its netdev's, else the verbs port's width and lane speed), an `xdp:` port's
    /// interface's (`ETHTOOL_GSET`, as `/sys/class/net/IF/speed`; None for a link that does
    /// not say), a `model:` port's 100 000 (the model is a 100 Gb/s ConnectX, as the model
    /// library's `ibv_query_port` reports: 4X EDR).
    ///
    /// ```
    /// let port = rawpkt::open("model:speed-doc/0").unwrap();
    /// assert_eq!(port.link_speed_mbps(), Some(100_000));
    /// ```
    pub fn link_speed_mbps(&self) -> Option<u64> {
        self.backend.link_speed_mbps()
    }

    /// The MAC address of the neighbour `ip` (a next hop, as TRex's L3 mode resolves its
    /// gateway) in the Linux neighbour table of the port's netdev (`mlx5:`, `verbs:`, `xdp:`
    /// ports, in the `xdp:` port's namespace): taken from the table where it is usable
    /// (REACHABLE, STALE, ...), else after asking the kernel to resolve it (ARP, neighbour
    /// discovery: `RTM_NEWNEIGH` with `NTF_USE`, which needs CAP_NET_ADMIN) and waiting at
    /// most `wait` for an answer. `model:` ports have no netdev: a config error.
    ///
    /// ```
    /// use std::time::Duration;
    /// let port = rawpkt::open("model:neigh-doc/0").unwrap();
    /// let e = port.neighbour_mac("10.0.0.1".parse().unwrap(), Duration::from_secs(1)).unwrap_err();
    /// assert!(e.is_usage() && e.message().contains("no Linux netdev"));
    /// ```
    pub fn neighbour_mac(&self, ip: std::net::IpAddr, wait: std::time::Duration) -> Result<[u8; 6], Error> {
        let Some((ifindex, netns)) = self.backend.netdev() else {
            return Err(Error::config(format!(
                "{}: the port has no Linux netdev, so no neighbour table (mlx5:, verbs: and xdp: ports have one)",
                echo(&self.spec)
            )));
        };
        let ask = || rawpkt_sys::neigh::resolve(ifindex, ip, wait);
        let r = match netns {
            Some(ns) => enter(ns, ask),
            None => ask(),
        };
        r.map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => format!("{e}: asking the kernel to resolve it needs CAP_NET_ADMIN"),
                _ => e.to_string(),
            };
            Error::device(format!("{}: neighbour {ip}: {why}", echo(&self.spec))).caused_by(e)
        })
    }

    /// Which device port this is (see [`PortIdentity`]).
    pub fn identity(&self) -> PortIdentity {
        self.backend.identity()
    }

    /// Whether the two ports are the same device port, or overlap (an `xdp:` port on every queue of
    /// an interface and one on a single queue of it), however their specs spell them. A tool that
    /// needs two distinct ports refuses such a pair: a port opened twice sends and receives on one
    /// wire, so what one end sends never reaches the other.
    pub fn same_port(&self, other: &Port) -> bool {
        match (self.identity(), other.identity()) {
            (
                PortIdentity::Xdp {
                    netns: a,
                    ifindex: i,
                    queue: q,
                },
                PortIdentity::Xdp {
                    netns: b,
                    ifindex: j,
                    queue: r,
                },
            ) => a == b && i == j && (q.is_none() || r.is_none() || q == r),
            (a, b) => a == b,
        }
    }

    /// Frames the device dropped on this port since it was opened for want of a posted receive
    /// buffer, from the device's exact counter: the port's `out_of_buffer` queue counter in
    /// sysfs (`/sys/class/infiniband/DEV/ports/P/hw_counters/out_of_buffer`) for `mlx5:`/`verbs:`
    /// ports, the model's for `model:` ports; None where there is no such counter (`xdp:`
    /// ports, a kernel without `hw_counters`). Unlike [`QueueStats::drops`](crate::QueueStats),
    /// which adds up the 8-bit drop count of the CQEs and so misses drops once more than 255
    /// pile up between two completions, this is exact; it covers every queue of the port.
    pub fn device_drops(&self) -> Option<u64> {
        self.backend.device_drops()
    }

    /// The device's clock now, in ns on the time base of the receive timestamps its queues hand
    /// up with [`QueueConfig::rx_timestamps`](crate::QueueConfig::rx_timestamps) (one clock per
    /// device, not wall-clock time): a sender stamps a frame with it so that the receiver's
    /// timestamp minus the stamp is the frame's time from send to receive, as DPDK's
    /// `rte_eth_read_clock` allows. `model:` ports read the model NIC's clock; `mlx5:` ports the
    /// device's (`ibv_query_rt_values_ex`); None where the port has no device clock (`xdp:`,
    /// `verbs:`, a device that reports no clock frequency). Two ports share a time base when
    /// [`Port::shares_device_clock`] says so.
    pub fn device_clock_ns(&self) -> Option<u64> {
        self.backend.device_clock_ns()
    }

    /// Whether both ports have a device clock ([`Port::device_clock_ns`]) and it is one clock:
    /// ports of one model NIC, or of one RDMA device.
    pub fn shares_device_clock(&self, other: &Port) -> bool {
        let one_device = match (self.identity(), other.identity()) {
            (PortIdentity::Model { nic: a, .. }, PortIdentity::Model { nic: b, .. }) => a == b,
            (PortIdentity::Rdma { ibdev: a, .. }, PortIdentity::Rdma { ibdev: b, .. }) => a == b,
            _ => false,
        };
        one_device && self.device_clock_ns().is_some() && other.device_clock_ns().is_some()
    }

    /// The backend behind the port.
    #[cfg_attr(not(feature = "model"), allow(dead_code))]
    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// A port over `backend`, opened from `spec`.
    pub(crate) fn new(spec: &str, backend: Box<dyn Backend>) -> Port {
        Port {
            spec: spec.to_string(),
            backend,
        }
    }

    /// Most buffers of its pool that one RX queue and one TX queue of this port, both opened
    /// with `cfg`, hold at once: a pool for `n` such pairs needs `n * buffers_pinned(cfg)`
    /// buffers, and the bursts in flight on top, for the queues never to run it dry. A queue
    /// holds more than its `size` where its descriptors carry more than one packet (mlx5 with
    /// enhanced multi-packet send: up to four per send WQEBB) or frames wait in two rings
    /// (AF_XDP: the TX and the completion ring).
    pub fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        self.backend.buffers_pinned(cfg)
    }
}

pub(crate) fn check_queue_config(cfg: &QueueConfig) -> Result<(), Error> {
    if !(64..=32768).contains(&cfg.size) || !cfg.size.is_power_of_two() {
        return Err(Error::config(format!(
            "queue size {} must be a power of two from 64 to 32768",
            cfg.size
        )));
    }
    if cfg.tx_completion_every == 0 {
        return Err(Error::config("tx_completion_every must be at least 1"));
    }
    Ok(())
}

/// How a port is opened: which traffic it takes from Linux and how many receive queues it
/// spreads that traffic over. What each backend does with each field is said below; a value a
/// backend cannot honour makes opening the port fail with one line rather than be ignored.
///
/// ```
/// use rawpkt::{flow::FlowRule, PortOptions};
/// let rule: FlowRule = "ipv4 udp dst-port 4789".parse().unwrap();
/// let opts = PortOptions::default().rules(vec![rule]).rx_queues(4);
/// assert_eq!(opts.rx_queues, 4);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PortOptions {
    /// Flow rules: which frames the port takes.
    /// - `mlx5:`/`verbs:`: installed besides the defaults ([`PortOptions::default_rules`],
    ///   and [`FlowRule::multicast_copy`] copied so that Linux keeps getting multicast).
    /// - `xdp:`: replace the default ([`PortOptions::default_rules`]; multicast stays with
    ///   Linux), as `rule=` options in the spec do; giving rules both ways is an error, and so is
    ///   a `copy` rule (XDP cannot deliver one frame both to the socket and to Linux).
    /// - `model:`: refused; a model port gets every frame on its wire.
    pub rules: Vec<FlowRule>,
    /// What the port takes of the frames to its own MAC without rules of one's own
    /// (`mlx5:`/`verbs:`: besides [`PortOptions::rules`]; `xdp:`: when no rule is given).
    pub default_rules: DefaultRules,
    /// Take every frame from Linux. `mlx5:`/`verbs:`: replaces the default rules (so not with
    /// rules of one's own), and the port says so on stderr when opened. `xdp:`: the one rule `any` (as `rule=any`), so not with other
    /// rules. `model:`: what a model port does anyway.
    pub promiscuous: bool,
    /// Receive queues, ids from 0.
    /// - `mlx5:`/`verbs:`: RSS spreads steered traffic over this many queues, once all of them
    ///   have been created.
    /// - `xdp:`: the port's queues are the interface's receive queues (`ethtool -L` sets how
    ///   many), or the single one its spec names, one AF_XDP socket each. 1, the default, leaves
    ///   that as it is; any other value must equal that number.
    /// - `model:`: must be 1.
    pub rx_queues: u16,
    /// How a `model:` port's NIC runs; ignored by the other kinds.
    pub model: ModelOptions,
    /// Where `mlx5:`/`verbs:` ports find rdma-core (`libibverbs` and `libmlx5`); None: the files
    /// `rawpkt::mlx5::use_libraries` named, else the sonames (`libibverbs.so.1`,
    /// `libmlx5.so.1`). The files are loaded by the first port that names them and stay loaded
    /// for the life of the process, so in practice the first `mlx5:`/`verbs:` port opened
    /// decides: give every port of a process the same files. Ignored by the other kinds. The
    /// library reads no environment; the tools fill this from `RAWPKT_LIBIBVERBS` and
    /// `RAWPKT_LIBMLX5` ([`LibPaths::from_env`]).
    pub rdma_core: Option<LibPaths>,
}

setters!(PortOptions {
    rules: Vec<FlowRule>,
    default_rules: DefaultRules,
    promiscuous: bool,
    rx_queues: u16,
    model: ModelOptions,
    rdma_core: Option<LibPaths>,
});

/// What a NIC port takes of the unicast frames to its own MAC by default.
///
/// ```
/// use rawpkt::{DefaultRules, PortOptions};
/// assert_eq!(PortOptions::default().default_rules, DefaultRules::UdpAndExperimental);
/// let whole = PortOptions::default().default_rules(DefaultRules::WholeMac);
/// assert_eq!(whole.default_rules, DefaultRules::WholeMac);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DefaultRules {
    /// UDP over IPv4 and IPv6 and the IEEE local experimental EtherTypes 0x88b5 and 0x88b6
    /// ([`FlowRule::default_unicast`]): ARP, neighbour discovery, ICMP (ping), TCP (ssh) and the
    /// rest to the MAC stay with the netdev, whose address keeps working. Host UDP to that MAC
    /// (DNS replies, DHCP renewals, NTP) is the port's; [`DefaultRules::None`] and rules naming
    /// exactly the port's traffic are the remedy where that matters.
    #[default]
    UdpAndExperimental,
    /// Every unicast frame to the port's MAC ([`FlowRule::own_mac`], VPP's "ucast" rule): the
    /// netdev's address stops answering (no ARP replies, no neighbour advertisements, no ping,
    /// no ssh over it).
    WholeMac,
    /// Nothing: only [`PortOptions::rules`] (and the multicast copy on `mlx5:`/`verbs:`).
    None,
}

impl DefaultRules {
    /// The rules this default installs for a port whose MAC is `mac`.
    pub fn rules(self, mac: [u8; 6]) -> Vec<FlowRule> {
        match self {
            DefaultRules::UdpAndExperimental => FlowRule::default_unicast(mac),
            DefaultRules::WholeMac => vec![FlowRule::own_mac(mac)],
            DefaultRules::None => Vec::new(),
        }
    }
}

/// How the model NIC behind `model:` ports runs. Taken when a spec creates the NIC: a port opened
/// on a NIC that already exists (the other end of `model:NAME/0` and `model:NAME/1`) shares it as
/// it is. The library reads no environment; the tools fill this from `RAWPKT_MODEL_CPU`,
/// `RAWPKT_MODEL_TRACE`, `RAWPKT_MODEL_RX_PPS`, `RAWPKT_MODEL_RX_BUFFER`, `RAWPKT_MODEL_PROFILE`
/// and `RAWPKT_MODEL_KNOBS` (`mlx5_model::env`).
///
/// The device profile and knobs can also be given in the spec: `model:pair0/0,profile=cx7` and
/// `model:pair0/0,knob=wqe_id=ring,knob=flush=late:2` (the spec's profile wins over this one;
/// its knobs come after these). The profiles and knobs are the `mlx5-model` crate's
/// (`mlx5_model::profile`; `docs/model-library.md` lists them).
///
/// ```
/// use rawpkt::{ModelOptions, PortOptions};
/// let opts = PortOptions::default().model(ModelOptions::default().rx_capacity_pps(Some(1e6)));
/// assert_eq!(opts.model.rx_capacity_pps, Some(1e6));
/// let m = ModelOptions::default().profile(Some("cx6dx".into())).knobs(vec!["zip=never".into()]);
/// let port = rawpkt::open_with("model:profile-doc/0", &PortOptions::default().model(m)).unwrap();
/// assert!(rawpkt::open("model:profile-doc2/0,profile=cx9").is_err());
/// # drop(port);
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ModelOptions {
    /// The CPU the NIC's polling thread is pinned to, one that is online (else opening the port
    /// is an [`ErrorKind::Config`](crate::ErrorKind::Config); a cpuset that leaves it out is said
    /// as a warning when the thread starts, and it runs unpinned); None: unpinned.
    pub cpu: Option<usize>,
    /// Write a trace of the WQEs the NIC executes and the CQEs it writes to this file
    /// (`docs/model-trace.md`): a regular file, created or truncated; a path that names anything
    /// else (a FIFO, a device) is an [`ErrorKind::Config`](crate::ErrorKind::Config).
    pub trace: Option<std::path::PathBuf>,
    /// Frames a second each port takes at most (the model's `rx_capacity_pps`); None: no limit.
    pub rx_capacity_pps: Option<f64>,
    /// How much of `rx_capacity_pps` the port buffers, in seconds of it (the model's
    /// `rx_buffer_s`); None: its default, 50 ms.
    pub rx_buffer_s: Option<f64>,
    /// The device profile: `default` (None: the same), `cx5`, `cx6dx`, `cx7` or `strict`; an
    /// unknown name fails the open with one line.
    pub profile: Option<String>,
    /// Knobs set on top of the profile, each `name=value` (e.g. `wqe_id=ring`), in order.
    pub knobs: Vec<String>,
}

setters!(ModelOptions {
    cpu: Option<usize>,
    trace: Option<std::path::PathBuf>,
    rx_capacity_pps: Option<f64>,
    rx_buffer_s: Option<f64>,
    profile: Option<String>,
    knobs: Vec<String>,
});

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            rules: Vec::new(),
            default_rules: DefaultRules::default(),
            promiscuous: false,
            rx_queues: 1,
            model: ModelOptions::default(),
            rdma_core: None,
        }
    }
}

/// Runs `f` in the namespace `ns` (an `xdp:` port's).
#[cfg(feature = "xdp")]
fn enter<T>(ns: &std::os::fd::OwnedFd, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    rawpkt_sys::netdev::in_netns(ns, f)?
}

#[cfg(not(feature = "xdp"))]
fn enter<T>(_: &std::os::fd::OwnedFd, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    f()
}
