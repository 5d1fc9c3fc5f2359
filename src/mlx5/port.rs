//! An open ConnectX port: the objects it shares between threads (context, PD, MRs, the RSS
//! steering) and the queues it builds per thread.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rdma_abi::*;

use super::discover::{self, Found};
use super::events;
use super::layout;
use crate::dv::prm::{InlineMode, MiniFormat};
use crate::dv::ring::KeepAlive;
use crate::dv::{DvCaps, DvControl, TickClock};
use crate::flow::rule::{parse_mac, FlowRule};
use crate::rx::dv::DvRxQueue;
use crate::rx::dv_striding::{params_for, DvStridingRxQueue};
use crate::rx::verbs::VerbsRxQueue;
use crate::spec::{Backend, PortOptions};
use crate::sys::rdma::{CallError, Context, Cq, DeviceList, Flow, IndTable, Mr, Pd, Qp, Rdma, Wq};
use crate::tx::dv::DvTxQueue;
use crate::tx::verbs::VerbsTxQueue;
use crate::{Error, Pool, QueueConfig, RxQueue, TxQueue};

/// What the kernel says when CAP_NET_RAW is missing (RAW_PACKET QPs and flows need it).
pub(crate) const CAP_NET_RAW_HINT: &str =
    "CAP_NET_RAW is needed: run as root or `setcap cap_net_raw,cap_ipc_lock+ep BINARY`";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Dv(DvCaps),
    Verbs,
}

pub(crate) struct Mlx5Port {
    shared: Arc<Shared>,
    /// Reads the device's asynchronous events into `shared.health` while the port is open.
    _events: Option<events::Watcher>,
}

struct Shared {
    spec: String,
    /// The RDMA device's name (with `port_num`: the port's identity).
    ibdev: String,
    /// The port's `out_of_buffer` counter file, and its value when the port opened.
    out_of_buffer: (std::path::PathBuf, Option<u64>),
    state: Mutex<State>,
    port_num: u8,
    mode: Mode,
    max_frame: u32,
    description: String,
    mac: Option<[u8; 6]>,
    /// Link speed in Mb/s, and the netdev's interface index (this namespace's), if it has one.
    speed_mbps: u64,
    ifindex: Option<u32>,
    /// The rules installed once every receive queue exists (defaults first).
    rules: Vec<FlowRule>,
    rx_queues: u16,
    pd: Arc<Pd>,
    ctx: Arc<Context>,
    health: Arc<events::Health>,
    /// What CQE timestamps count (`mlx5::clock`): ticks of `hca_core_clock`, or real time.
    clock: Option<TickClock>,
    /// The link's speed at open, bit/s (the TX watchdog's wait for a full ring).
    link_bps: Option<u64>,
    /// The netdev's PHC, the time base of real-time timestamps.
    phc: Option<super::clock::Phc>,
    /// What the port found and chose at open ([`super::report()`]).
    report: super::report::DeviceReport,
    /// The send queue facts the report gives once one exists.
    sq_seen: super::report::SqSeen,
}

/// Flows, then the RSS QPs, then the table: field order is drop order, the order the kernel
/// needs (a QP with flows, or a table under a QP, cannot be destroyed).
struct Steering {
    _flows: Vec<Flow>,
    _qps: Vec<Arc<Qp>>,
    _table: Arc<IndTable>,
}

#[derive(Default)]
struct State {
    /// One registration per pool region, alive while any queue over the pool is.
    mrs: Vec<Weak<Mr>>,
    /// Receive queue `qid`'s WQ and the token its queue holds.
    rx: Vec<Option<(Arc<Wq>, u64)>>,
    /// Send queue ids in use, with the token their queue holds.
    tx: std::collections::HashMap<u16, u64>,
    steering: Option<Steering>,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// Held by a receive queue: when it goes, its slot frees and the steering comes down (the
/// table would point at a WQ nobody drains).
struct RxToken {
    shared: Weak<Shared>,
    qid: u16,
    id: u64,
}

impl Drop for RxToken {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut st = shared.lock();
            if let Some(Some((_, id))) = st.rx.get(usize::from(self.qid)) {
                if *id == self.id {
                    st.rx[usize::from(self.qid)] = None;
                    st.steering = None;
                }
            }
        }
    }
}

/// Send queue ids a port offers: 0 to `TX_QUEUES - 1`. Each is a QP of its own, so the device
/// sets no limit this low; the bound only makes a wild id an error, and covers pktgen's most
/// (8 queues per core, and a latency queue) on a 127-core machine, as the model's does.
pub(crate) const TX_QUEUES: u16 = 1024;

/// Held by a send queue: its id is taken while it lives.
struct TxToken {
    shared: Weak<Shared>,
    qid: u16,
    id: u64,
}

impl Drop for TxToken {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut st = shared.lock();
            if st.tx.get(&self.qid) == Some(&self.id) {
                st.tx.remove(&self.qid);
            }
        }
    }
}

fn dev_err(spec: &str, e: impl std::fmt::Display) -> Error {
    Error::device(format!("{spec}: {e}"))
}

/// A verbs call that failed: its errno stays the error's source.
fn call_err(spec: &str, e: CallError) -> Error {
    dev_err(spec, e).caused_by(e.into())
}

fn layout_err(spec: &str, e: layout::LayoutError) -> Error {
    match e {
        layout::LayoutError::Call(e) => call_err(spec, e),
        layout::LayoutError::Unexpected(m) => dev_err(spec, m),
    }
}

/// EPERM from QP or flow creation means the capability is missing; say which one.
fn perm_err(spec: &str, e: CallError) -> Error {
    if e.errno == libc::EPERM || e.errno == libc::EACCES {
        Error::device(format!("{spec}: {} refused: {CAP_NET_RAW_HINT}", e.call)).caused_by(e.into())
    } else {
        call_err(spec, e)
    }
}

/// Link speed in Gb/s from `ibv_port_attr` (rdma-core `libibverbs/examples/devinfo.c`).
fn verbs_speed_gbps(speed: u8, width: u8) -> f64 {
    let lane = match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => 0.0,
    };
    let lanes = match width {
        1 => 1.0,
        2 => 4.0,
        4 => 8.0,
        8 => 12.0,
        16 => 2.0,
        _ => 0.0,
    };
    lane * lanes
}

fn port_state_name(s: ibv_port_state) -> &'static str {
    match s {
        IBV_PORT_DOWN => "DOWN",
        IBV_PORT_INIT => "INIT",
        IBV_PORT_ARMED => "ARMED",
        IBV_PORT_ACTIVE => "ACTIVE",
        IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

/// Why the DV datapath cannot run on this context, or the caps it runs with and where its inline
/// mode came from.
fn probe_dv(
    ctx: &Context,
    found: &Found,
    max_frame: u32,
    inline: Option<InlineMode>,
) -> Result<(DvCaps, &'static str), String> {
    if !found.dv_supported {
        // mlx5dv_is_supported is false, or libmlx5 did not load.
        return Err(ctx.mlx5dv_query().err().unwrap_or_else(|| "not an mlx5 device".into()));
    }
    let attr = ctx.mlx5dv_query()?;
    // VPP `rdma_create_if`: DV needs CQE version 1 (the CQE layout the datapath parses).
    if attr.flags & u64::from(MLX5DV_CONTEXT_FLAGS_CQE_V1) == 0 {
        return Err("mlx5dv_query_device reports no CQE version 1".into());
    }
    let empw = attr.flags & u64::from(MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW) != 0;
    let d = super::inline::decide(ctx, found.pci_device_id(), inline)?;
    Ok((
        DvCaps {
            inline_mode: d.mode,
            enhanced_mpw: empw,
            max_frame,
            vlan_insert: d.vlan_insert,
        },
        d.source,
    ))
}

/// Splits `NAME[,inline=MODE]` into the name and the options; an option given twice is refused
/// rather than the last one silently winning.
fn split_options<'a>(kind: &str, rest: &'a str) -> Result<(&'a str, Option<InlineMode>), Error> {
    let echo = crate::text::echo;
    let mut parts = rest.split(',');
    let name = parts.next().unwrap_or("");
    let mut inline = None;
    for opt in parts {
        match opt.split_once('=') {
            Some(("inline", _)) if inline.is_some() => {
                return Err(Error::spec(format!(
                    "{kind}:{}: inline= given twice; give it once",
                    echo(rest)
                )))
            }
            Some(("inline", v)) => {
                inline = Some(InlineMode::from_name(v).ok_or_else(|| {
                    Error::spec(format!(
                        "{kind}:{}: inline={}: expected none, l2, ip or tcp-udp (the headers every send WQE inlines)",
                        echo(rest),
                        echo(v)
                    ))
                })?)
            }
            _ => {
                return Err(Error::spec(format!(
                    "{kind}:{}: unknown option `{}` (the one option is inline=none|l2|ip|tcp-udp)",
                    echo(rest),
                    echo(opt)
                )))
            }
        }
    }
    Ok((name, inline))
}

/// A port number past the device's ports is the user's mistake, said as such (`ibv_query_port`
/// would only answer EINVAL): the count is `ibv_query_device`'s `phys_port_cnt`.
fn check_port_number(ctx: &Context, ibdev: &str, port: u8, spec: &str) -> Result<(), Error> {
    let Ok(attr) = ctx.query_device_ex() else {
        return Ok(()); // no count to compare with: ibv_query_port answers for itself
    };
    let n = attr.orig_attr.phys_port_cnt;
    if port > n {
        let ports = if n == 1 {
            "1 port".to_string()
        } else {
            format!("{n} ports (1 to {n})")
        };
        return Err(Error::spec(format!(
            "{spec}: {ibdev} has {ports}; there is no port {port}"
        )));
    }
    Ok(())
}

impl Mlx5Port {
    pub(crate) fn open(rdma: Arc<Rdma>, kind: &str, rest: &str, opts: &PortOptions) -> Result<Mlx5Port, Error> {
        let spec = format!("{kind}:{}", crate::text::echo(rest));
        let (name, inline) = split_options(kind, rest)?;
        if kind == "verbs" && inline.is_some() {
            return Err(Error::spec(format!(
                "{spec}: inline= is for the Direct Verbs datapath; on a verbs: port libmlx5 inlines what the device needs"
            )));
        }
        let target = discover::parse_target(kind, name)?;
        // Rules are checked before touching the device, so a typo costs nothing.
        for r in &opts.rules {
            crate::flow::ibv_spec::compile(r).map_err(|e| Error::config(format!("{spec}: rule `{r}`: {e}")))?;
        }
        let list = DeviceList::get(&rdma).map_err(|e| call_err(&spec, e))?;
        let found = discover::scan(&list);
        let (dev, port_num, netdev) = discover::find(&found, &target, &spec)?;
        let ctx = list.open(dev.index, &rdma).map_err(|e| call_err(&spec, e))?;
        drop(list);
        check_port_number(&ctx, &dev.ibdev, port_num, &spec)?;
        let pattr = ctx.query_port(port_num).map_err(|e| call_err(&spec, e))?;
        if pattr.link_layer != IBV_LINK_LAYER_ETHERNET as u8 {
            return Err(dev_err(
                &spec,
                format!(
                    "{} port {port_num} is not an Ethernet port (raw packet queues need one)",
                    dev.ibdev
                ),
            ));
        }
        let attr = |a: &str| netdev.as_deref().and_then(|n| dev.netdev_attr(n, a));
        let mac = attr("address").as_deref().and_then(parse_mac);
        let mtu: u32 = attr("mtu").and_then(|m| m.parse().ok()).unwrap_or(1500);
        // The NIC's frame limit is the MTU plus the Ethernet header and one VLAN tag (mlx5e's
        // hard MTU, less the FCS the NIC appends).
        let max_frame = mtu + 18;
        let speed = attr("speed")
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&s| s > 0)
            .map(|s| s as f64 / 1000.0)
            .unwrap_or_else(|| verbs_speed_gbps(pattr.active_speed, pattr.active_width));

        let mut inline_source = "";
        let mut dv_refused = None;
        let mode = match kind {
            "verbs" => Mode::Verbs,
            _ => match probe_dv(&ctx, &dev, max_frame, inline) {
                Ok((caps, source)) => {
                    inline_source = source;
                    Mode::Dv(caps)
                }
                Err(why) => {
                    log::warn!("{spec}: Direct Verbs unavailable ({why}); using the ibverbs datapath");
                    dv_refused = Some(why);
                    Mode::Verbs
                }
            },
        };
        // What the CQE timestamps count (`clock`): ticks, or real time on the PHC's time base.
        let clock = match mode {
            Mode::Dv(_) => ctx.query_device_ex().ok().and_then(|a| {
                let flags = ctx.mlx5dv_query().map_or(0, |q| q.flags);
                super::clock::decide(&ctx, flags, a.hca_core_clock)
            }),
            Mode::Verbs => None,
        };
        let phc = match (&clock, netdev.as_deref()) {
            (Some(c), Some(n)) if c.clock.is_real_time() => super::clock::Phc::of(n),
            _ => None,
        };
        let pd = Pd::alloc(&ctx).map_err(|e| call_err(&spec, e))?;

        let mac_text = mac.map_or("unknown".to_string(), |m| {
            m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
        });
        let description = format!(
            "{} port {port_num} ({}, PCI {}, MAC {mac_text}): link {}, {speed} Gb/s, MTU {mtu}, {} datapath",
            dev.ibdev,
            netdev.as_deref().unwrap_or("no netdev"),
            dev.pci.as_deref().unwrap_or("unknown"),
            port_state_name(pattr.state),
            match mode {
                Mode::Dv(c) => format!(
                    "Direct Verbs ({}inline headers: {}, from {inline_source}; VLAN tags inserted by the {})",
                    if c.enhanced_mpw && c.inline_mode == InlineMode::None {
                        "enhanced MPW, "
                    } else {
                        ""
                    },
                    c.inline_mode.name(),
                    if c.vlan_insert { "device" } else { "driver" }
                ),
                Mode::Verbs => "ibverbs".to_string(),
            }
        ) + &match &clock {
            Some(c) if c.clock.is_real_time() => format!(
                ", timestamps in real time (from {}){}",
                c.source,
                if phc.is_some() { "" } else { ", no PHC to read" }
            ),
            Some(c) => format!(", timestamps in clock ticks (from {})", c.source),
            None => String::new(),
        };

        let rules = if opts.promiscuous {
            log::warn!(
                "{spec}: PROMISCUOUS: every frame on {} is taken from Linux (no ARP, no ND, no SSH over it)",
                netdev.as_deref().unwrap_or(&dev.ibdev)
            );
            vec![FlowRule::promiscuous()]
        } else {
            let mut r = Vec::new();
            match mac {
                Some(m) => r.extend(opts.default_rules.rules(m)),
                None if opts.default_rules == crate::spec::DefaultRules::None => {}
                None => {
                    return Err(dev_err(
                        &spec,
                        "the port's MAC address is unknown (no netdev in sysfs); open it by netdev name",
                    ))
                }
            }
            r.push(FlowRule::multicast_copy());
            r.extend(opts.rules.iter().cloned());
            r
        };
        let health = Arc::new(events::Health::default());
        // The watcher also follows the netdev's MTU (sysfs), as the send queues' largest frame.
        let mtu_source = netdev.as_deref().map(|n| events::MtuSource {
            path: dev.netdev_path(n, "mtu"),
            mtu,
        });
        let watcher = events::Watcher::start(ctx.clone(), port_num, spec.clone(), health.clone(), mtu_source);
        let report = {
            use super::report::*;
            let attr = ctx.query_device_ex().ok();
            let orig = attr.as_ref().map(|a| a.orig_attr);
            let dv_flags = ctx.mlx5dv_query().map_or(0, |q| q.flags);
            let striding = ctx.striding_caps();
            let striding = (striding.supported_qpts != 0).then_some(StridingCaps {
                min_log_stride_bytes: striding.min_single_stride_log_num_of_bytes,
                max_log_stride_bytes: striding.max_single_stride_log_num_of_bytes,
                min_log_num_strides: striding.min_single_wqe_log_num_of_strides,
                max_log_num_strides: striding.max_single_wqe_log_num_of_strides,
                supported_qpts: striding.supported_qpts,
            });
            let caps = match mode {
                Mode::Dv(c) => Some(c),
                Mode::Verbs => None,
            };
            let ib_attr = |a: &str| {
                std::fs::read_to_string(dev.ibdev_path.join(a))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            DeviceReport {
                ibdev: dev.ibdev.clone(),
                port_num,
                netdev: netdev.clone(),
                pci: dev.pci.clone(),
                pci_device_id: dev.pci_device_id(),
                vendor_id: orig.map_or(0, |o| o.vendor_id),
                vendor_part_id: orig.map_or(0, |o| o.vendor_part_id),
                hw_ver: orig.map_or(0, |o| o.hw_ver),
                fw_ver: orig.map_or_else(String::new, |o| c_text(&o.fw_ver)),
                board_id: ib_attr("board_id"),
                hca_type: ib_attr("hca_type"),
                mac,
                mtu,
                link_state: port_state_name(pattr.state),
                speed_gbps: speed,
                datapath: if caps.is_some() { "dv" } else { "verbs" },
                dv_refused,
                dv_flags: names(dv_flags, &DV_FLAGS),
                devx: devx_answers(&ctx),
                inline_mode: caps.map(|c| c.inline_mode.name()),
                inline_source: caps.map(|_| inline_source),
                enhanced_mpw: caps.is_some_and(|c| c.enhanced_mpw),
                vlan_insert: caps.is_some_and(|c| c.vlan_insert),
                bf_size: None,
                sq_wqe_cnt: None,
                striding_layout: match striding {
                    None => "none",
                    Some(c) => {
                        let caps = crate::dv::prm::mprq::Caps {
                            min_log_stride_bytes: c.min_log_stride_bytes,
                            max_log_stride_bytes: c.max_log_stride_bytes,
                            min_log_num_strides: c.min_log_num_strides,
                            max_log_num_strides: c.max_log_num_strides,
                            supported_qpts: c.supported_qpts,
                        };
                        if !caps.supported() {
                            "none"
                        } else if crate::rx::dv_striding::takes_per_stride_wqes(&caps) {
                            "per-stride"
                        } else {
                            "cyclic"
                        }
                    }
                },
                striding,
                cqe_compression: ctx
                    .mlx5dv_cqe_comp_caps()
                    .filter(|&(max, _)| max > 0)
                    .map(|(max, f)| (max, names(u64::from(f), &COMP_FORMATS))),
                hca_core_clock_khz: attr.as_ref().map_or(0, |a| a.hca_core_clock),
                clock_mode: clock.as_ref().map(|c| {
                    if c.clock.is_real_time() {
                        "real-time"
                    } else {
                        "free-running"
                    }
                }),
                clock_source: clock.as_ref().map(|c| c.source),
                phc: phc.as_ref().map(|p| p.path.clone()),
                raw_packet_caps: names(
                    attr.as_ref().map_or(0, |a| u64::from(a.raw_packet_caps)),
                    &RAW_PACKET_CAPS,
                ),
                max_frame,
                rules: rules.iter().map(|r| r.to_string()).collect(),
            }
        };
        Ok(Mlx5Port {
            _events: watcher,
            shared: Arc::new(Shared {
                spec,
                ibdev: dev.ibdev.clone(),
                out_of_buffer: {
                    let path = discover::out_of_buffer_path(&dev, port_num);
                    let at_open = discover::read_counter(&path);
                    (path, at_open)
                },
                state: Mutex::new(State {
                    rx: vec![None; usize::from(opts.rx_queues)],
                    ..State::default()
                }),
                port_num,
                mode,
                max_frame,
                description,
                mac,
                speed_mbps: (speed * 1000.0) as u64,
                ifindex: netdev.as_deref().and_then(|n| rawpkt_sys::if_index(n).ok()),
                rules,
                rx_queues: opts.rx_queues,
                pd,
                clock: clock.map(|c| c.clock),
                phc,
                link_bps: (speed > 0.0).then_some((speed * 1e9) as u64),
                ctx,
                health,
                report,
                sq_seen: Default::default(),
            }),
        })
    }
}

impl Mlx5Port {
    /// [`super::report()`] of this port.
    pub(super) fn report(&self) -> super::report::DeviceReport {
        let mut r = self.shared.report.clone();
        self.shared.sq_seen.fill(&mut r);
        r
    }
}

impl Shared {
    /// The receive offloads `cfg` asks for, checked against the datapath and the device: the
    /// data segments per receive WQE (several for frames longer than a buffer), and CVLAN
    /// stripping where the device has it (`IBV_RAW_PACKET_CAP_CVLAN_STRIPPING`). The verbs
    /// datapath hands up one buffer per packet and no tag, so it refuses both.
    fn rx_offloads(&self, pool: &Pool, cfg: &QueueConfig) -> Result<u32, Error> {
        let sge = crate::rx::dv::rx_segments(cfg, pool)?;
        if self.mode == Mode::Verbs && (sge > 1 || cfg.rx_vlan_strip) {
            return Err(Error::config(format!(
                "{}: rx_max_frame beyond one buffer ({} bytes) and rx_vlan_strip need the Direct Verbs datapath",
                self.spec,
                pool.data_room()
            )));
        }
        if cfg.rx_vlan_strip {
            let caps = self.ctx.query_device_ex().map(|a| a.raw_packet_caps).unwrap_or(0);
            if caps & IBV_RAW_PACKET_CAP_CVLAN_STRIPPING == 0 {
                return Err(Error::config(format!(
                    "{}: the device cannot strip VLAN tags (no IBV_RAW_PACKET_CAP_CVLAN_STRIPPING); \
                     leave rx_vlan_strip off",
                    self.spec
                )));
            }
        }
        Ok(sge)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool's MR: registered by the first queue over the pool, shared by the rest.
    fn mr_for(&self, pool: &Rc<Pool>) -> Result<Arc<Mr>, Error> {
        let mut st = self.lock();
        st.mrs.retain(|w| w.strong_count() > 0);
        if let Some(mr) = st
            .mrs
            .iter()
            .filter_map(Weak::upgrade)
            .find(|m| m.base() == pool.region().base())
        {
            return Ok(mr);
        }
        let mr = Mr::register(&self.pd, pool.region()).map_err(|e| {
            if matches!(e.errno, libc::ENOMEM | libc::EPERM | libc::EAGAIN) {
                Error::device(format!(
                    "{}: {e}: pinning {} bytes exceeds RLIMIT_MEMLOCK; raise `ulimit -l` or grant CAP_IPC_LOCK",
                    self.spec,
                    pool.region().len()
                ))
                .caused_by(e.into())
            } else {
                call_err(&self.spec, e)
            }
        })?;
        st.mrs.push(Arc::downgrade(&mr));
        Ok(mr)
    }

    /// The mini-CQE format a receive CQ with `sge` buffers per WQE asks for: the hash format,
    /// where the queue can read it (`rx::dv::wants_compression`: asked for, on by default as
    /// DPDK's `rxq_cqe_comp_en`, no timestamps), the datapath is DV, and
    /// `mlx5dv_query_device`'s `cqe_comp_caps` has the format; else None, and where the queue asked
    /// for it, one line says why. Never for send CQs (VPP learned that TX CQs must not compress).
    fn rx_cqe_comp(&self, cfg: &QueueConfig, sge: u32) -> Option<MiniFormat> {
        self.rx_cqe_comp_in(crate::rx::dv::wants_compression(cfg, sge), MiniFormat::Hash)
    }

    /// [`Self::rx_cqe_comp`] for a striding queue: the checksum/stride-index format
    /// (`rx::dv_striding::wants_compression`), where `cqe_comp_caps` has it.
    fn rx_cqe_comp_striding(&self, cfg: &QueueConfig) -> Option<MiniFormat> {
        self.rx_cqe_comp_in(crate::rx::dv_striding::wants_compression(cfg), MiniFormat::CsumStridx)
    }

    /// `fmt` when `wanted`, the datapath is DV and the device's `cqe_comp_caps` has the format;
    /// else None, with one line where it was wanted.
    fn rx_cqe_comp_in(&self, wanted: bool, fmt: MiniFormat) -> Option<MiniFormat> {
        if !wanted || !matches!(self.mode, Mode::Dv(_)) {
            return None;
        }
        match self.ctx.mlx5dv_cqe_comp_caps() {
            Some((max, formats)) if max >= 2 && formats & u32::from(fmt.dv_flag()) != 0 => Some(fmt),
            _ => {
                log::info!(
                    "{}: the device reports no CQE compression in the {fmt:?} format (cqe_comp_caps); \
                     receive completions stay uncompressed",
                    self.spec
                );
                None
            }
        }
    }

    fn cq(&self, size: u32) -> Result<Arc<Cq>, Error> {
        match self.mode {
            Mode::Dv(_) => Cq::create_dv(&self.ctx, size),
            Mode::Verbs => Cq::create(&self.ctx, size),
        }
        .map_err(|e| call_err(&self.spec, e))
    }

    /// The striding parameters of a receive queue asked for `rx_striding` (None when not
    /// asked): the Direct Verbs datapath only, within the caps `mlx5dv_query_device` reports;
    /// one line saying why not otherwise.
    fn striding_params(&self, pool: &Pool, cfg: &QueueConfig) -> Result<Option<crate::dv::prm::mprq::Params>, Error> {
        if !cfg.rx_striding {
            return Ok(None);
        }
        if self.mode == Mode::Verbs {
            return Err(Error::config(format!(
                "{}: rx_striding needs the Direct Verbs datapath (this port runs on plain verbs)",
                self.spec
            )));
        }
        crate::rx::dv_striding::refuse_other_options(cfg, pool)
            .map_err(|e| Error::config(format!("{}: {}", self.spec, e.message())))?;
        let caps = self.striding_caps(cfg).unwrap_or(crate::dv::prm::mprq::Caps::NONE);
        params_for(pool, &caps)
            .map(Some)
            .map_err(|e| Error::config(format!("{}: {e}", self.spec)))
    }

    /// The striding RQ caps `mlx5dv_query_device` reports, for a DV queue asked `rx_striding`.
    fn striding_caps(&self, cfg: &QueueConfig) -> Option<crate::dv::prm::mprq::Caps> {
        if !cfg.rx_striding || self.mode == Mode::Verbs {
            return None;
        }
        let c = self.ctx.striding_caps();
        Some(crate::dv::prm::mprq::Caps {
            min_log_stride_bytes: c.min_single_stride_log_num_of_bytes,
            max_log_stride_bytes: c.max_single_stride_log_num_of_bytes,
            min_log_num_strides: c.min_single_wqe_log_num_of_strides,
            max_log_num_strides: c.max_single_wqe_log_num_of_strides,
            supported_qpts: c.supported_qpts,
        })
    }

    /// Builds the indirection table, the RSS QPs and the flows over the complete set of WQs.
    fn steer(&self, wqs: &[Arc<Wq>]) -> Result<Steering, Error> {
        // VPP `rdma_rxq_finalize`: a power-of-two table filled round robin. For a queue count
        // that is not a power of two, the largest table the device takes evens out the spread.
        let n = wqs.len();
        let size = if n.is_power_of_two() {
            n
        } else {
            let max = self
                .ctx
                .query_device_ex()
                .map(|a| a.rss_caps.max_rwq_indirection_table_size as usize)
                .unwrap_or(0);
            let want = n.next_power_of_two().max(max.min(4096));
            if want.is_power_of_two() {
                want
            } else {
                n.next_power_of_two()
            }
        };
        let table: Vec<Arc<Wq>> = (0..size).map(|i| wqs[i % n].clone()).collect();
        let table = IndTable::create(&self.ctx, &table).map_err(|e| call_err(&self.spec, e))?;
        let key = crate::flow::rss::DEFAULT_KEY;
        // One hash QP per IP version and L4 protocol over the one table (`flows`).
        let qps = super::flows::Hash::ALL
            .iter()
            .map(|h| Qp::create_rss(&self.pd, &table, &key, h.fields()).map_err(|e| perm_err(&self.spec, e)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut flows = Vec::new();
        for rule in &self.rules {
            // Each kind of frame the rule can match to the QP that hashes it, the more specific
            // flows at the higher priorities (`flows`).
            let expanded =
                super::flows::expand(rule).map_err(|e| Error::config(format!("{}: rule `{rule}`: {e}", self.spec)))?;
            for (r, hash) in expanded {
                let qp = &qps[hash.index()];
                let mut attr = crate::flow::ibv_spec::compile(&r)
                    .map(CompiledFlow)
                    .map_err(|e| Error::config(format!("{}: rule `{rule}`: {e}", self.spec)))?;
                let flow = Flow::create(qp, &mut attr, self.port_num).map_err(|e| match e.errno {
                    libc::EPERM | libc::EACCES => perm_err(&self.spec, e),
                    _ => Error::device(format!(
                        "{}: the NIC refused rule `{rule}`: {}",
                        self.spec,
                        std::io::Error::from(e)
                    ))
                    .caused_by(e.into()),
                })?;
                flows.push(flow);
            }
        }
        Ok(Steering {
            _flows: flows,
            _qps: qps,
            _table: table,
        })
    }
}

/// Queue resets for the DV datapath after a completion error, through the verbs state machine.
struct SqControl {
    qp: Arc<Qp>,
    port: u8,
    health: Arc<events::Health>,
    /// The queue's attention word, set by the events watcher for its QP and CQ.
    word: crate::dv::AttentionWord,
    /// The link's speed (for the watchdog's wait), bit/s.
    link_bps: Option<u64>,
}

impl DvControl for SqControl {
    fn reset_sq(&self, _qpn: u32) -> Result<(), String> {
        self.qp.reset().map_err(|e| e.to_string())?;
        self.qp.to_rts(self.port).map_err(|e| e.to_string())
    }

    fn reset_rq(&self, _wq_num: u32) -> Result<(), String> {
        Err("a send queue has no receive WQ".into())
    }

    fn attention(&self) -> crate::dv::AttentionWord {
        self.word.clone()
    }

    fn device_fatal(&self) -> bool {
        self.health.fatal()
    }

    fn max_frame(&self) -> Option<u32> {
        self.health.max_frame()
    }

    fn link_bps(&self) -> Option<u64> {
        self.link_bps
    }
}

struct RqControl {
    wq: Arc<Wq>,
    health: Arc<events::Health>,
    clock: Option<TickClock>,
    /// The queue's attention word, set by the events watcher for its WQ and CQ.
    word: crate::dv::AttentionWord,
}

impl DvControl for RqControl {
    fn reset_sq(&self, _qpn: u32) -> Result<(), String> {
        Err("a receive WQ has no send queue".into())
    }

    fn reset_rq(&self, _wq_num: u32) -> Result<(), String> {
        // RDY → RESET discards what was posted (and zeroes the doorbell record: rdma-core
        // `mlx5_modify_wq`), RESET → RDY takes WQEs from index 0 again (DPDK `mlx5_rx_err_handle`).
        self.wq.set_state(IBV_WQS_RESET).map_err(|e| e.to_string())?;
        self.wq.set_state(IBV_WQS_RDY).map_err(|e| e.to_string())
    }

    fn attention(&self) -> crate::dv::AttentionWord {
        self.word.clone()
    }

    fn device_fatal(&self) -> bool {
        self.health.fatal()
    }

    fn clock(&self) -> Option<TickClock> {
        self.clock
    }
}

impl Backend for Mlx5Port {
    fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        let sh = &self.shared;
        if qid >= sh.rx_queues {
            return Err(Error::config(format!(
                "{}: receive queue {qid} does not exist; the port was opened with {} (PortOptions::rx_queues)",
                sh.spec, sh.rx_queues
            )));
        }
        let exists = || Error::config(format!("{}: receive queue {qid} already exists", sh.spec));
        if sh.lock().rx[usize::from(qid)].is_some() {
            return Err(exists());
        }
        if cfg.rx_timestamps && sh.mode == Mode::Verbs {
            return Err(Error::config(format!(
                "{}: receive timestamps need the Direct Verbs datapath",
                sh.spec
            )));
        }
        let fallback;
        let cfg = match sh.striding_caps(cfg) {
            Some(caps) if caps.supported() && !crate::rx::dv_striding::takes_per_stride_wqes(&caps) => {
                fallback =
                    crate::rx::dv_striding::fallback_config(cfg, pool, sh.health.max_frame().unwrap_or(sh.max_frame));
                &fallback
            }
            _ => cfg,
        };
        let striding = sh.striding_params(pool, cfg)?;
        let mr = sh.mr_for(pool)?;
        let (cq, wq, comp) = match &striding {
            None => {
                let sge = sh.rx_offloads(pool, cfg)?;
                let comp = sh.rx_cqe_comp(cfg, sge);
                let cq = match comp {
                    Some(f) => Cq::create_dv_comp(&sh.ctx, cfg.size, f.dv_flag()).map_err(|e| call_err(&sh.spec, e))?,
                    None => sh.cq(cfg.size)?,
                };
                let wq = Wq::create_with(&sh.pd, &cq, cfg.size, sge, cfg.rx_vlan_strip)
                    .map_err(|e| perm_err(&sh.spec, e))?;
                (cq, wq, comp)
            }
            Some(p) => {
                // `cfg.size` strides, one buffer each; every stride may complete on its own and
                // every WQE end with a filler.
                let n = p.num_strides();
                let wqes = (cfg.size / n).max(1);
                let comp = sh.rx_cqe_comp_striding(cfg);
                let cq = match comp {
                    Some(f) => {
                        Cq::create_dv_comp(&sh.ctx, wqes * (n + 1), f.dv_flag()).map_err(|e| call_err(&sh.spec, e))?
                    }
                    None => sh.cq(wqes * (n + 1))?,
                };
                let attr = mlx5dv_striding_rq_init_attr {
                    single_stride_log_num_of_bytes: u32::from(p.log_stride_bytes),
                    single_wqe_log_num_of_strides: u32::from(p.log_num_strides),
                    two_byte_shift_en: u8::from(p.two_byte_shift),
                };
                let wq = Wq::create_striding(&sh.pd, &cq, wqes, n, attr).map_err(|e| perm_err(&sh.spec, e))?;
                (cq, wq, comp)
            }
        };
        wq.set_state(IBV_WQS_RDY).map_err(|e| call_err(&sh.spec, e))?;
        let id = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let token = Arc::new(RxToken {
            shared: Arc::downgrade(sh),
            qid,
            id,
        });
        let queue: Box<dyn RxQueue> = match sh.mode {
            Mode::Dv(_) => {
                let keep: KeepAlive = Arc::new((wq.clone(), cq.clone(), mr.clone(), token));
                let stride = striding.map(|p| crate::dv::prm::mprq::wqe_size(p.num_strides()));
                let rwq = layout::rwq_info(&wq, keep.clone(), stride).map_err(|e| layout_err(&sh.spec, e))?;
                let cqi = layout::cq_info(&cq, keep)
                    .map_err(|e| layout_err(&sh.spec, e))?
                    .with_compression(comp);
                let ctl = Arc::new(RqControl {
                    wq: wq.clone(),
                    health: sh.health.clone(),
                    clock: sh.clock,
                    word: sh.health.register(&[wq.addr(), cq.addr()]),
                });
                let (num, lkey) = (wq.wq_num(), mr.lkey());
                if let Some(p) = striding {
                    #[allow(unsafe_code)]
                    // SAFETY: `wq` (made striding with `p`) and `cq` were created above for this
                    // queue alone, and `keep` holds them (and the MR) as long as the queue lives.
                    let q = unsafe { DvStridingRxQueue::new(&rwq, &cqi, p, num, lkey, pool, cfg, ctl) }?;
                    Box::new(q)
                } else {
                    #[allow(unsafe_code)]
                    // SAFETY: `wq` and `cq` were created above for this queue alone, and `keep` holds them
                    // (and the MR) for as long as the infos, hence the queue, live.
                    let q = unsafe { DvRxQueue::new(&rwq, &cqi, num, lkey, pool, cfg, ctl) }?;
                    Box::new(q)
                }
            }
            Mode::Verbs => {
                let health = sh.health.clone();
                let fatal = Arc::new(move || health.fatal());
                Box::new(VerbsRxQueue::new(wq.clone(), cq, mr, pool, cfg, token, fatal)?)
            }
        };
        // Register the queue; once the set is complete, steer traffic to it. On failure the
        // slot is cleared before the queue (and its token) goes, outside the lock.
        let res = {
            let mut st = sh.lock();
            if st.rx[usize::from(qid)].is_some() {
                // Another thread created it meanwhile.
                return Err(exists());
            }
            st.rx[usize::from(qid)] = Some((wq, id));
            let all: Option<Vec<Arc<Wq>>> = st.rx.iter().map(|s| s.as_ref().map(|(w, _)| w.clone())).collect();
            match all {
                Some(wqs) if st.steering.is_none() => match sh.steer(&wqs) {
                    Ok(s) => {
                        st.steering = Some(s);
                        Ok(())
                    }
                    Err(e) => {
                        st.rx[usize::from(qid)] = None;
                        Err(e)
                    }
                },
                _ => Ok(()),
            }
        };
        res.map(|()| queue)
    }

    fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        let sh = &self.shared;
        if qid >= TX_QUEUES {
            return Err(Error::config(format!(
                "{}: send queue {qid} does not exist; a port has send queues 0 to {}",
                sh.spec,
                TX_QUEUES - 1
            )));
        }
        // Taken before anything is built; if the build fails, the token goes and frees the id.
        let token = {
            let mut st = sh.lock();
            if st.tx.contains_key(&qid) {
                return Err(Error::config(format!("{}: send queue {qid} already exists", sh.spec)));
            }
            let id = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
            st.tx.insert(qid, id);
            Arc::new(TxToken {
                shared: Arc::downgrade(sh),
                qid,
                id,
            })
        };
        let mr = sh.mr_for(pool)?;
        // The QP is told what the queue inlines whole (rdma-core sizes its WQEs, and refuses
        // more than the device's largest send WQE); the DV path checks the same bound first.
        // The ibverbs datapath inlines nothing itself (libmlx5 copies the minimum inline
        // headers into the Ethernet segment without it).
        let inline = match sh.mode {
            Mode::Dv(_) => u32::from(cfg.tx_inline),
            Mode::Verbs => 0,
        };
        // One CQE per WQEBB at worst: the CQ covers the ring rdma-core will build.
        let cq = sh.cq(Qp::raw_tx_wqebbs(cfg.size, inline).max(cfg.size))?;
        let qp = Qp::create_raw_tx(&sh.pd, &cq, cfg.size, inline).map_err(|e| match e.errno {
            libc::EINVAL if inline > 0 => Error::config(format!(
                "{}: tx_inline {inline}: the device refuses a send queue that inlines that much ({e})",
                sh.spec
            ))
            .caused_by(e.into()),
            _ => perm_err(&sh.spec, e),
        })?;
        qp.to_rts(sh.port_num).map_err(|e| call_err(&sh.spec, e))?;
        match sh.mode {
            Mode::Dv(caps) => {
                let keep: KeepAlive = Arc::new((qp.clone(), cq.clone(), mr.clone(), token));
                let sq = layout::sq_info(&qp, keep.clone()).map_err(|e| layout_err(&sh.spec, e))?;
                sh.sq_seen.record(sq.bf_size(), sq.wqe_cnt());
                let cqi = layout::cq_info(&cq, keep).map_err(|e| layout_err(&sh.spec, e))?;
                let ctl = Arc::new(SqControl {
                    word: sh.health.register(&[qp.addr(), cq.addr()]),
                    qp,
                    port: sh.port_num,
                    health: sh.health.clone(),
                    link_bps: sh.link_bps,
                });
                // The port's largest frame now: an MTU changed since the port opened counts.
                let caps = DvCaps {
                    max_frame: sh.health.max_frame().unwrap_or(caps.max_frame),
                    ..caps
                };
                #[allow(unsafe_code)]
                // SAFETY: `qp` and `cq` were created above for this queue alone, and `keep` holds them
                // (and the MR) for as long as the infos, hence the queue, live.
                Ok(Box::new(unsafe {
                    DvTxQueue::new(&sq, &cqi, mr.lkey(), pool, cfg, caps, ctl)
                }?))
            }
            Mode::Verbs => {
                let health = sh.health.clone();
                let fatal = Arc::new(move || health.fatal());
                Ok(Box::new(VerbsTxQueue::new(
                    qp,
                    cq,
                    mr,
                    pool,
                    cfg,
                    sh.max_frame,
                    sh.port_num,
                    fatal,
                    token,
                )?))
            }
        }
    }

    fn rx_queues(&self) -> u16 {
        self.shared.rx_queues
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        let tx = match self.shared.mode {
            // The SQ rdma-core builds for `tx_queue`'s QP, and what the DV queue keeps on it.
            Mode::Dv(caps) => {
                let wqebbs = Qp::raw_tx_wqebbs(cfg.size, u32::from(cfg.tx_inline));
                crate::tx::dv::tx_buffers(wqebbs, &caps) as usize
            }
            // One buffer per posted send WR.
            Mode::Verbs => cfg.size as usize,
        };
        cfg.size as usize + tx
    }

    fn describe(&self) -> Option<String> {
        let sh = &self.shared;
        let mut d = sh.description.clone();
        let n = sh.health.port_events();
        if n > 0 {
            d += &format!("; {n} link state changes since open");
        }
        if sh.health.fatal() {
            d += "; DEVICE FATAL ERROR: queues stopped";
        }
        Some(d)
    }

    fn mac(&self) -> Option<[u8; 6]> {
        self.shared.mac
    }

    fn link_speed_mbps(&self) -> Option<u64> {
        Some(self.shared.speed_mbps).filter(|&s| s > 0)
    }

    fn netdev(&self) -> Option<(u32, Option<&std::os::fd::OwnedFd>)> {
        self.shared.ifindex.map(|i| (i, None))
    }

    fn device_drops(&self) -> Option<u64> {
        let (path, at_open) = &self.shared.out_of_buffer;
        Some(discover::read_counter(path)?.wrapping_sub((*at_open)?))
    }

    fn device_clock_ns(&self) -> Option<u64> {
        // The DV datapath's timestamps only: a verbs: port hands up none.
        if self.shared.mode == Mode::Verbs {
            return None;
        }
        let clock = self.shared.clock?;
        if clock.is_real_time() {
            // Real-time timestamps are on the PHC's time base (kernel `lib/clock.c`
            // `mlx5_real_time_mode`); the free-running counter is another clock.
            return self.shared.phc.as_ref()?.now_ns();
        }
        Some(clock.ns(self.shared.ctx.raw_clock()?))
    }

    fn identity(&self) -> crate::PortIdentity {
        crate::PortIdentity::Rdma {
            ibdev: self.shared.ibdev.clone(),
            port: self.shared.port_num,
        }
    }
}

impl Drop for Mlx5Port {
    fn drop(&mut self) {
        // The flows go with the port, so Linux gets its traffic back at once even if queues
        // (which keep their own objects alive) outlive it.
        let steering = self.shared.lock().steering.take();
        drop(steering);
    }
}

/// A compiled rule as `ibv_create_flow` takes it.
struct CompiledFlow(crate::flow::ibv_spec::VerbsFlowAttr);

// SAFETY: a `VerbsFlowAttr` is built only by `ibv_spec::compile` and starts 8-aligned (its
// `repr(C, align(8))`): an ibv_flow_attr followed by the specs its `size` counts, all inside it;
// reached through `&mut self`, so writable and valid for the borrow.
#[allow(unsafe_code)]
unsafe impl crate::sys::rdma::FlowAttr for CompiledFlow {
    fn as_attr_ptr(&mut self) -> *mut rdma_abi::ibv_flow_attr {
        self.0.as_mut_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(verbs_speed_gbps(32, 2), 100.0);
    }
}
