//! Port specs and opening ports.
//!
//! | spec | port |
//! |---|---|
//! | `model:NAME/P` | port P (0 or 1) of a model NIC named NAME whose two ports are back to back; both ends opened by name share one NIC, which polls its doorbells on its own thread |
//! | `model:afpacket=IFNAME` | a one-port model NIC wired to the Linux interface IFNAME through AF_PACKET |
//! | `mlx5:NETDEV`, `mlx5:mlx5_0/1` | a ConnectX port (by netdev, or RDMA device and port) through rdma-core: RAW_PACKET queues, flow rules steering only what they name (the netdev keeps the rest), the Direct Verbs datapath, or ibverbs when the device offers no DV |
//! | `verbs:NETDEV`, `verbs:mlx5_0/1` | the same port with the ibverbs datapath forced |
//! | `xdp:IFNAME[/QUEUE][,rule=RULE]…[,netns=NS][,mode=native\|generic][,bind=copy\|zerocopy]` | AF_XDP on IFNAME's queues (or queue QUEUE only): frames some `rule=` matches (default: to IFNAME's own MAC) go to the port's RX queues, the rest to Linux; see the README's "Port specs" |
//!
//! The model thread is pinned to the CPU in `RAWPKT_MODEL_CPU` when that is set (a value that is
//! not a CPU number is reported on stderr once, and the thread is left unpinned).

use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};

use crate::dv::model::{ModelConfig, Nic, Wire};
use crate::flow::rule::FlowRule;
use crate::rx::dv::DvRxQueue;
use crate::tx::dv::DvTxQueue;
use crate::{Error, Pool, QueueConfig, RxQueue, TxQueue};

/// What a backend must provide to be opened as a port.
pub(crate) trait Backend: Send + Sync {
    fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error>;
    fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error>;
    fn model(&self) -> Option<(&Arc<Nic>, usize)>;
    /// Which device port this is, whatever spec named it.
    fn identity(&self) -> PortIdentity;
    /// [`Port::device_drops`].
    fn device_drops(&self) -> Option<u64> {
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
}

/// Which device port an open port is, resolved from its spec: `model:q/0` and `model:q/00` are
/// one port, and so are `mlx5:mlx5_1/1` and `mlx5:NETDEV` for the netdev on that port. Compare
/// ports with [`Port::same_port`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortIdentity {
    /// Port `port` of the model NIC opened under `nic` (a name, or `afpacket=IFNAME`).
    Model { nic: String, port: usize },
    /// Port `port` (from 1) of RDMA device `ibdev`.
    Rdma { ibdev: String, port: u8 },
    /// Interface `ifindex` of the network namespace whose nsfs inode is `netns` (device, inode);
    /// `queue` is the one queue the port takes, or None for all of them.
    Xdp {
        netns: (u64, u64),
        ifindex: u32,
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
    pub fn spec(&self) -> &str {
        &self.spec
    }

    pub fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        check_queue_config(cfg)?;
        self.backend.rx_queue(qid, pool, cfg)
    }

    pub fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        check_queue_config(cfg)?;
        self.backend.tx_queue(qid, pool, cfg)
    }

    /// For hardware and xdp ports, one line about the device and what the backend chose: link
    /// state, speed, MAC and datapath (mlx5, verbs), XDP attach mode, queues and rules (xdp).
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

    /// Most buffers of its pool that one RX queue and one TX queue of this port, both opened
    /// with `cfg`, hold at once: a pool for `n` such pairs needs `n * buffers_pinned(cfg)`
    /// buffers, and the bursts in flight on top, for the queues never to run it dry. A queue
    /// holds more than its `size` where its descriptors carry more than one packet (mlx5 with
    /// enhanced multi-packet send: up to four per send WQEBB) or frames wait in two rings
    /// (AF_XDP: the TX and the completion ring).
    pub fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        self.backend.buffers_pinned(cfg)
    }

    /// For model ports: the model NIC and this port's number on it (counters, fault injection).
    pub fn model(&self) -> Option<(&Arc<Nic>, usize)> {
        self.backend.model()
    }
}

fn check_queue_config(cfg: &QueueConfig) -> Result<(), Error> {
    if !(64..=32768).contains(&cfg.size) || !cfg.size.is_power_of_two() {
        return Err(Error::Config(format!(
            "queue size {} must be a power of two from 64 to 32768",
            cfg.size
        )));
    }
    if cfg.tx_completion_every == 0 {
        return Err(Error::Config("tx_completion_every must be at least 1".into()));
    }
    Ok(())
}

/// How a port is opened: which traffic it takes from Linux and how many receive queues it
/// spreads that traffic over. What each backend does with each field is said below; a value a
/// backend cannot honour makes opening the port fail with one line rather than be ignored.
#[derive(Clone, Debug)]
pub struct PortOptions {
    /// Flow rules: which frames the port takes.
    /// - `mlx5:`/`verbs:`: installed besides the defaults ([`FlowRule::own_mac`] stolen,
    ///   [`FlowRule::multicast_copy`] copied so that ARP and ND keep reaching Linux).
    /// - `xdp:`: replace the default (the interface's own MAC stolen; multicast stays with
    ///   Linux), as `rule=` options in the spec do; giving rules both ways is an error, and so is
    ///   a `copy` rule (XDP cannot deliver one frame both to the socket and to Linux).
    /// - `model:`: refused; a model port gets every frame on its wire.
    pub rules: Vec<FlowRule>,
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
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            rules: Vec::new(),
            promiscuous: false,
            rx_queues: 1,
        }
    }
}

/// Opens a port from its spec (see the module docs for the forms) with the default options.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// Opens a port from its spec with the given rules and queue count.
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    if opts.rx_queues == 0 {
        return Err(Error::Config("a port needs at least one receive queue".into()));
    }
    // A spec is one line of text: what the tools repeat of it (`Port::spec`) stays one line.
    if let Some((at, c)) = spec.char_indices().find(|&(_, c)| needs_escape(c)) {
        return Err(Error::Spec(format!(
            "`{}` has a control character ({}) at column {}; a spec is one line of text",
            echo(spec),
            echo(&c.to_string()),
            spec[..at].chars().count() + 1
        )));
    }
    let (kind, rest) = spec.split_once(':').ok_or_else(|| {
        Error::Spec(format!(
            "`{}` has no kind; expected KIND:NAME, e.g. model:pair0/0",
            echo(spec)
        ))
    })?;
    // Promiscuous replaces the rules wherever a port has rules, so asking for both is a mistake.
    if opts.promiscuous && !opts.rules.is_empty() {
        return Err(Error::Config(format!(
            "{}: PortOptions has both rules and promiscuous, which takes every frame; give one of them",
            echo(spec)
        )));
    }
    let backend: Box<dyn Backend> = match kind {
        "model" => {
            if !opts.rules.is_empty() || opts.rx_queues != 1 {
                return Err(Error::Config(format!(
                    "{}: model ports take no rules and have no RSS (every frame on the wire reaches \
                     the port's queue); open them with the default rules and rx_queues 1",
                    echo(spec)
                )));
            }
            Box::new(open_model(rest)?)
        }
        "mlx5" | "verbs" => crate::mlx5::open_port(kind, rest, opts)?,
        "xdp" => crate::xdp::open_port(rest, opts)?,
        _ => {
            return Err(Error::Spec(format!(
                "unknown port kind `{}` in `{}`; known kinds: model, mlx5, verbs, xdp",
                echo(kind),
                echo(spec)
            )))
        }
    };
    Ok(Port {
        spec: spec.to_string(),
        backend,
    })
}

/// Longest piece of user input an error message repeats, in characters; longer input is cut
/// with a marker saying how much was left out.
pub const ECHO_MAX: usize = 64;

/// User input as an error message repeats it: control characters (a newline, an escape
/// sequence) and the invisible characters that reorder or break a line are written as escapes
/// (`\n`, `\u{1b}`), so that the message stays one line and shows what was typed; input longer
/// than [`ECHO_MAX`] columns (escapes included) is cut, with `…(N more bytes)` in place of the rest.
pub fn echo(input: &str) -> Echo<'_> {
    Echo(input)
}

/// See [`echo`].
pub struct Echo<'a>(&'a str);

impl std::fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        let mut columns = 0;
        for (i, c) in s.char_indices() {
            if columns >= ECHO_MAX {
                return write!(f, "…({} more bytes)", s.len() - i);
            }
            columns += write_escaped(f, c)?;
        }
        Ok(())
    }
}

/// Whether `c` is written as an escape when input is repeated: control characters, and the
/// format and separator characters that make a terminal break or reorder a line (zero-width
/// spaces and joiners, bidirectional overrides and isolates, the line and paragraph separators,
/// the byte-order mark).
pub(crate) fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Writes `c` as [`echo`] shows it; returns the columns it took (one per character written).
pub(crate) fn write_escaped(out: &mut impl std::fmt::Write, c: char) -> Result<usize, std::fmt::Error> {
    if needs_escape(c) {
        // `\n`, `\t`, `\r`, or `\u{…}` for the rest: all ASCII.
        let mut n = 0;
        for e in c.escape_default() {
            out.write_char(e)?;
            n += 1;
        }
        Ok(n)
    } else {
        out.write_char(c)?;
        Ok(1)
    }
}

static MODELS: Mutex<Vec<(String, Weak<Nic>)>> = Mutex::new(Vec::new());

fn open_model(rest: &str) -> Result<ModelPort, Error> {
    let (key, port, wires) = if let Some(ifname) = rest.strip_prefix("afpacket=") {
        if ifname.is_empty() {
            return Err(Error::Spec("model:afpacket= needs an interface name".into()));
        }
        let wire = Wire::afpacket(ifname).map_err(Error::Device)?;
        (format!("afpacket={ifname}"), 0, vec![wire])
    } else {
        let (name, port) = rest.split_once('/').ok_or_else(|| {
            Error::Spec(format!(
                "model:{}: expected model:NAME/PORT, e.g. model:pair0/0",
                echo(rest)
            ))
        })?;
        if name.is_empty() {
            return Err(Error::Spec(format!("model:{}: empty model name", echo(rest))));
        }
        let port: usize = match port.parse() {
            Ok(p @ (0 | 1)) => p,
            _ => {
                return Err(Error::Spec(format!(
                    "model:{}: port `{}` must be 0 or 1",
                    echo(rest),
                    echo(port)
                )))
            }
        };
        (name.to_string(), port, vec![Wire::Peer(1), Wire::Peer(0)])
    };
    let mut models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    models.retain(|(_, w)| w.strong_count() > 0);
    let nic = match models.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
        Some(nic) => nic,
        None => {
            let nic = Nic::new(wires, ModelConfig::default()).map_err(Error::Device)?;
            nic.start(model_cpu());
            models.push((key.clone(), Arc::downgrade(&nic)));
            nic
        }
    };
    let drops_at_open = nic.port_counters(port).rx_out_of_buffer;
    Ok(ModelPort {
        nic,
        key,
        port,
        drops_at_open,
    })
}

/// The CPU in `RAWPKT_MODEL_CPU`, if set to a CPU number; any other value is reported on stderr
/// (once per process) and the model thread runs unpinned.
pub fn model_cpu() -> Option<usize> {
    let v = std::env::var_os("RAWPKT_MODEL_CPU")?;
    match v.to_str().map(|s| s.trim().parse::<usize>()) {
        Some(Ok(cpu)) => Some(cpu),
        _ => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("rawpkt: RAWPKT_MODEL_CPU={v:?} is not a CPU number; the model thread is not pinned")
            });
            None
        }
    }
}

struct ModelPort {
    nic: Arc<Nic>,
    /// The NIC's name in `MODELS`.
    key: String,
    port: usize,
    /// The port's `rx_out_of_buffer` when this port was opened.
    drops_at_open: u64,
}

impl Backend for ModelPort {
    fn rx_queue(&self, _qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        // Each queue holds a registration of its pool for as long as it lives.
        let lkey = self.nic.register_mr(pool.region());
        let ctl = self.nic.control_holding_mr(lkey);
        let cq = self.nic.create_cq(cfg.size).map_err(Error::Device)?;
        let (rwq, wq) = self.nic.create_rq(self.port, cfg.size, cq.cqn).map_err(Error::Device)?;
        Ok(Box::new(DvRxQueue::new(&rwq, &cq, wq, lkey, pool, cfg, ctl)?))
    }

    fn tx_queue(&self, _qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        let lkey = self.nic.register_mr(pool.region());
        let ctl = self.nic.control_holding_mr(lkey);
        let cq = self.nic.create_cq(cfg.size).map_err(Error::Device)?;
        let sq = self.nic.create_sq(self.port, cfg.size, cq.cqn).map_err(Error::Device)?;
        Ok(Box::new(DvTxQueue::new(
            &sq,
            &cq,
            lkey,
            pool,
            cfg,
            self.nic.caps(),
            ctl,
        )?))
    }

    fn model(&self) -> Option<(&Arc<Nic>, usize)> {
        Some((&self.nic, self.port))
    }

    fn device_drops(&self) -> Option<u64> {
        Some(self.nic.port_counters(self.port).rx_out_of_buffer - self.drops_at_open)
    }

    fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        // `create_sq` gives the SQ `cfg.size` WQEBBs (a power of two), as `tx_queue` asks.
        cfg.size as usize + crate::tx::dv::tx_buffers(cfg.size, &self.nic.caps()) as usize
    }

    fn identity(&self) -> PortIdentity {
        PortIdentity::Model {
            nic: self.key.clone(),
            port: self.port,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ports_refuse_options_they_would_ignore() {
        let rules = PortOptions {
            rules: vec!["udp dst-port 53".parse().unwrap()],
            ..PortOptions::default()
        };
        let queues = PortOptions {
            rx_queues: 2,
            ..PortOptions::default()
        };
        for o in [rules, queues] {
            let e = open_with("model:spec-opts/0", &o).unwrap_err().to_string();
            assert!(e.contains("model ports take no rules and have no RSS"), "{e}");
        }
        let promiscuous = PortOptions {
            promiscuous: true,
            ..PortOptions::default()
        };
        assert!(open_with("model:spec-opts/0", &promiscuous).is_ok());
    }
}
