//! `model:` ports opened by spec, and the glue that hands a queue the device created
//! ([`QueueMem`]) to the driver's DV datapath as `mlx5dv_init_obj` hands a hardware queue over
//! (`dv::ring::SqInfo` and the rest).

use std::any::Any;
use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};

use crate::dv::prm::MiniFormat;
use crate::dv::ring::{CqInfo, RwqInfo, SqInfo};
use crate::dv::{DvCaps, DvControl, TickClock};
use crate::rx::dv::DvRxQueue;
use crate::rx::dv_striding::{params_for, DvStridingRxQueue};
use crate::spec::{echo, Backend, ModelOptions, Port, PortIdentity, PortOptions};
use crate::tx::dv::DvTxQueue;
use crate::{Error, Pool, QueueConfig, RxQueue, TxQueue};
use mlx5_model::{Link, ModelConfig, Nic, QueueMem, RqOptions};

/// The device `profile` and `knobs` describe (the default device, [`ModelConfig::default`], for
/// none) run as `opts` say (trace, receive rate).
fn model_config(opts: &ModelOptions, profile: Option<&str>, knobs: &[String]) -> Result<ModelConfig, String> {
    let device = ModelConfig::with_profile(profile, knobs)?;
    Ok(ModelConfig {
        trace: opts.trace.clone(),
        rx_capacity_pps: opts.rx_capacity_pps,
        rx_buffer_s: opts.rx_buffer_s.unwrap_or(device.rx_buffer_s),
        ..device
    })
}

/// What a `model:` spec says after the port: `,profile=NAME` and `,knob=NAME=VALUE` options, in
/// order (profile, knobs); one line naming a malformed one.
fn spec_options(rest: &str) -> Result<(&str, Option<&str>, Vec<String>), Error> {
    let mut parts = rest.split(',');
    let port = parts.next().unwrap_or("");
    let (mut profile, mut knobs) = (None, Vec::new());
    for opt in parts {
        if let Some(p) = opt.strip_prefix("profile=") {
            profile = Some(p);
        } else if let Some(k) = opt.strip_prefix("knob=") {
            knobs.push(k.to_string());
        } else {
            return Err(Error::spec(format!(
                "model:{}: unknown option `{}` (options: profile=NAME, knob=NAME=VALUE)",
                echo(rest),
                echo(opt)
            )));
        }
    }
    Ok((port, profile, knobs))
}

/// What the datapath learns from a model device (`mlx5dv_query_device` and `eth_min_inline` on
/// hardware).
pub fn dv_caps(cfg: &ModelConfig) -> DvCaps {
    DvCaps {
        inline_mode: cfg.inline_mode,
        enhanced_mpw: cfg.enhanced_mpw,
        max_frame: cfg.max_frame as u32,
        // As the mlx5 backend decides it from DevX (`mlx5::inline`): the cap, and no inline.
        vlan_insert: cfg.knobs.vlan_insert && cfg.inline_mode == mlx5_prm::InlineMode::None,
    }
}

/// A model NIC's queues described for the DV datapath, as `mlx5dv_init_obj` describes a
/// hardware queue: what the `model:` ports build their queues from, and the DV tests theirs.
// The DV tests use every method (feature `internals`); the ports some.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub trait NicQueues {
    /// [`Nic::alloc_cq`], described for the driver.
    fn create_cq(&self, requested: u32) -> Result<CqInfo, String>;
    /// [`Nic::alloc_cq_with`], described for the driver: a CQ compressing receive completions
    /// into mini-CQEs of format `comp`.
    fn create_cq_with(&self, requested: u32, comp: Option<MiniFormat>) -> Result<CqInfo, String>;
    /// [`Nic::alloc_sq`], described for the driver.
    fn create_sq(&self, port: usize, wqebbs: u32, cqn: u32) -> Result<SqInfo, String>;
    /// [`Nic::alloc_rq`], described for the driver, with the WQ's number.
    fn create_rq(&self, port: usize, wqes: u32, cqn: u32) -> Result<(RwqInfo, u32), String>;
    /// [`Nic::alloc_rq_with`], described for the driver, with the WQ's number.
    fn create_rq_with(&self, port: usize, wqes: u32, cqn: u32, opts: RqOptions) -> Result<(RwqInfo, u32), String>;
    /// [`Nic::alloc_wq`], described for the driver, with the WQ's number.
    fn create_wq(&self, port: usize, wqes: u32, cqn: u32) -> Result<(RwqInfo, u32), String>;
    /// The device's send-path capabilities.
    fn caps(&self) -> DvCaps;
    /// A control handle for the datapath's queue resets. It keeps the NIC (and its polling
    /// thread) alive as long as a queue holds it, as an open verbs context would.
    fn control(self: &Arc<Self>) -> Arc<dyn DvControl>;
    /// [`NicQueues::control`] for a queue on port `port` whose objects (CQ, SQ or WQ numbers)
    /// are `objects`: its attention word hears the device's events for them and for the port
    /// (`dv::attention`), its `max_frame` is the port's, its clock the device's.
    fn control_for(self: &Arc<Self>, port: usize, objects: &[u32]) -> Arc<dyn DvControl>;
}

impl NicQueues for Nic {
    fn create_cq(&self, requested: u32) -> Result<CqInfo, String> {
        self.create_cq_with(requested, None)
    }

    fn create_cq_with(&self, requested: u32, comp: Option<MiniFormat>) -> Result<CqInfo, String> {
        let q = self.alloc_cq_with(requested, comp)?;
        let r = q.raw;
        // SAFETY: the device just created this CQ; its ring and record live while `keep` does.
        Ok(unsafe { CqInfo::from_raw(r.buf, r.dbrec, r.cnt, r.stride, r.num, q.keep) }.with_compression(comp))
    }

    fn create_sq(&self, port: usize, wqebbs: u32, cqn: u32) -> Result<SqInfo, String> {
        let q = self.alloc_sq(port, wqebbs, cqn)?;
        Ok(sq_info(q))
    }

    fn create_rq(&self, port: usize, wqes: u32, cqn: u32) -> Result<(RwqInfo, u32), String> {
        Ok(rwq_info(self.alloc_rq(port, wqes, cqn)?))
    }

    fn create_rq_with(&self, port: usize, wqes: u32, cqn: u32, opts: RqOptions) -> Result<(RwqInfo, u32), String> {
        Ok(rwq_info(self.alloc_rq_with(port, wqes, cqn, opts)?))
    }

    fn create_wq(&self, port: usize, wqes: u32, cqn: u32) -> Result<(RwqInfo, u32), String> {
        Ok(rwq_info(self.alloc_wq(port, wqes, cqn)?))
    }

    fn caps(&self) -> DvCaps {
        dv_caps(&self.config())
    }

    fn control(self: &Arc<Self>) -> Arc<dyn DvControl> {
        Arc::new(ModelControl::new(self.clone(), 0, None, None))
    }

    fn control_for(self: &Arc<Self>, port: usize, objects: &[u32]) -> Arc<dyn DvControl> {
        let ctl = ModelControl::new(self.clone(), port, None, None);
        ctl.watch(objects);
        Arc::new(ctl)
    }
}

fn sq_info(q: QueueMem) -> SqInfo {
    let r = q.raw;
    // SAFETY: the device just created this SQ; its WQEBBs, record and UAR live while `keep` does.
    unsafe { SqInfo::from_raw(r.buf, r.cnt, r.stride, r.dbrec, r.bf_reg, r.bf_size, r.num, q.keep) }
}

fn rwq_info(q: QueueMem) -> (RwqInfo, u32) {
    let r = q.raw;
    // SAFETY: the device just created this WQ; its WQEs and record live while `keep` does.
    let info = unsafe { RwqInfo::from_raw(r.buf, r.dbrec, r.cnt, r.stride, q.keep) };
    (info, r.num)
}

struct ModelControl {
    nic: Arc<Nic>,
    lkey: Option<u32>,
    /// The `model:` port's queue id, given back with the queue.
    _id: Option<IdHeld>,
    /// The port the queue is on.
    port: usize,
    /// The queue's attention word, set by the device's events ([`ModelControl::watch`]).
    word: crate::dv::AttentionWord,
}

impl ModelControl {
    fn new(nic: Arc<Nic>, port: usize, lkey: Option<u32>, id: Option<IdHeld>) -> ModelControl {
        ModelControl {
            nic,
            lkey,
            _id: id,
            port,
            word: crate::dv::AttentionWord::default(),
        }
    }

    /// Makes the device's events for `objects` (CQ, SQ, WQ numbers) and for the queue's port
    /// set the bits of the attention word, as the events watcher of an `mlx5:` port does
    /// (`mlx5::events`); the listener goes when the queue (its word) does.
    fn watch(&self, objects: &[u32]) {
        use crate::dv::attention as at;
        use mlx5_model::DeviceEvent as E;
        use std::sync::atomic::Ordering::AcqRel;
        let word = Arc::downgrade(&self.word);
        let (objects, port) = (objects.to_vec(), self.port);
        self.nic.on_event(Box::new(move |ev| {
            let Some(w) = word.upgrade() else {
                return false;
            };
            let mine = |n: &u32| objects.contains(n);
            match *ev {
                E::CqError { ref cqn } if mine(cqn) => w.fetch_or(at::CQ_ERROR, AcqRel),
                E::WqFatal { ref wqn } if mine(wqn) => w.fetch_or(at::QUEUE_FATAL, AcqRel),
                E::QpFatal { ref qpn } if mine(qpn) => w.fetch_or(at::QUEUE_FATAL, AcqRel),
                E::PortDown { port: p } if p == port => w.fetch_or(at::LINK_DOWN, AcqRel),
                E::PortUp { port: p } if p == port => w.fetch_and(!at::LINK_DOWN, AcqRel),
                E::Mtu { port: p, .. } if p == port => w.fetch_or(at::MTU_CHANGED, AcqRel),
                E::DeviceFatal { port: p } if p == port => w.fetch_or(at::DEVICE_FATAL, AcqRel),
                _ => 0,
            };
            true
        }));
    }
}

impl Drop for ModelControl {
    fn drop(&mut self) {
        if let Some(lkey) = self.lkey {
            self.nic.deregister_mr(lkey);
        }
    }
}

impl DvControl for ModelControl {
    fn reset_sq(&self, qpn: u32) -> Result<(), String> {
        self.nic.reset_sq(qpn)
    }

    fn reset_rq(&self, wq_num: u32) -> Result<(), String> {
        self.nic.reset_rq(wq_num)
    }

    fn clock(&self) -> Option<TickClock> {
        Some(model_clock(self.nic.timestamp_clock()))
    }

    fn attention(&self) -> crate::dv::AttentionWord {
        self.word.clone()
    }

    fn max_frame(&self) -> Option<u32> {
        Some(self.nic.max_frame(self.port) as u32)
    }

    fn now_ns(&self) -> u64 {
        // The device's clock: simulated where a test steps the NIC, so that the watchdog waits
        // in the device's time, as the link it waits for runs in it.
        self.nic.clock_ns()
    }
}

/// What the model device's CQE timestamps count (its `clock` knob): ticks of its
/// `hca_core_clock`, or real time.
fn model_clock(clock: mlx5_model::profile::Clock) -> TickClock {
    match clock {
        mlx5_model::profile::Clock::RealTime => TickClock::REAL_TIME,
        mlx5_model::profile::Clock::FreeRunning { khz } => TickClock::from_khz(khz).expect("a non-zero frequency"),
    }
}

/// For a `model:` port: the model NIC behind it and the port's number on it (counters, fault
/// injection); None for every other port.
pub fn nic_of(port: &Port) -> Option<(Arc<Nic>, usize)> {
    let m = port.backend().as_any().downcast_ref::<ModelPort>()?;
    Some((m.nic.clone(), m.port))
}

/// Model NICs opened by name, so that both ends of `model:NAME/0` and `model:NAME/1` share one,
/// with the queue ids taken on them.
static MODELS: Mutex<Vec<Opened>> = Mutex::new(Vec::new());

/// A model NIC's name, the NIC while any port or queue holds it, and its queue ids.
type Opened = (String, Weak<Nic>, Arc<QueueIds>);

/// Queue ids a `model:` port offers in each direction: 0 to `MODEL_QUEUES - 1`. The device has no
/// limit of its own this low (every RQ joins the port's RSS table, every SQ sends on its wire);
/// 1024 covers pktgen's most (8 queues per core, and a latency queue) on a 127-core machine.
pub const MODEL_QUEUES: u16 = 1024;

/// The queue ids in use on one model NIC's ports: (port, TX?, id).
#[derive(Default)]
struct QueueIds(Mutex<std::collections::HashSet<(usize, bool, u16)>>);

/// Holds a queue id for as long as its queue lives (inside the queue's `DvControl`).
struct IdHeld {
    ids: Arc<QueueIds>,
    id: (usize, bool, u16),
}

impl Drop for IdHeld {
    fn drop(&mut self) {
        self.ids.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

/// Opens the `model:` port `rest` names (what follows `model:`).
pub(crate) fn open_model(rest: &str, spec: &str, opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    if !opts.rules.is_empty() || opts.rx_queues != 1 {
        return Err(Error::config(format!(
            "{}: model ports take no rules and have no RSS (every frame on the wire reaches \
             the port's queue); open them with the default rules and rx_queues 1",
            echo(spec)
        )));
    }
    let (rest, spec_profile, spec_knobs) = spec_options(rest)?;
    let profile = spec_profile.or(opts.model.profile.as_deref());
    let knobs: Vec<String> = opts.model.knobs.iter().cloned().chain(spec_knobs).collect();
    // The device these ask for, checked before anything is opened (a bad name is one line).
    let device =
        model_config(&opts.model, profile, &knobs).map_err(|e| Error::config(format!("{}: {e}", echo(spec))))?;
    let (key, port, wires) = if let Some(ifname) = rest.strip_prefix("afpacket=") {
        if ifname.is_empty() {
            return Err(Error::spec("model:afpacket= needs an interface name"));
        }
        let link = Link::afpacket(ifname).map_err(|e| Error::device(e.to_string()).caused_by(e))?;
        (format!("afpacket={ifname}"), 0, vec![link])
    } else {
        let (name, port) = rest.split_once('/').ok_or_else(|| {
            Error::spec(format!(
                "model:{}: expected model:NAME/PORT, e.g. model:pair0/0",
                echo(rest)
            ))
        })?;
        if name.is_empty() {
            return Err(Error::spec(format!("model:{}: empty model name", echo(rest))));
        }
        let port: usize = match port.parse() {
            Ok(p @ (0 | 1)) => p,
            _ => {
                return Err(Error::spec(format!(
                    "model:{}: port `{}` must be 0 or 1",
                    echo(rest),
                    echo(port)
                )))
            }
        };
        (name.to_string(), port, vec![Link::Peer(1), Link::Peer(0)])
    };
    let mut models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    models.retain(|(_, w, _)| w.strong_count() > 0);
    let found = models
        .iter()
        .find(|(k, _, _)| *k == key)
        .and_then(|(_, w, ids)| Some((w.upgrade()?, ids.clone())));
    let (nic, ids) = match found {
        Some((nic, ids)) => {
            // The other end of a NIC that exists: it is what it was made as, so a port that asks
            // for another device is told so rather than given one it did not ask for.
            let have = nic.config();
            if (profile.is_some() || !knobs.is_empty())
                && (have.profile != device.profile || have.knobs != device.knobs)
            {
                return Err(Error::config(format!(
                    "{}: model NIC {key} is already open as `{}`, not `{}`: give both ports the same profile and knobs (or none to the second)",
                    echo(spec),
                    have.behaviour(),
                    device.behaviour()
                )));
            }
            (nic, ids)
        }
        None => {
            let m = &opts.model;
            if let Some(b) = m.rx_buffer_s.filter(|b| !(b.is_finite() && (0.0..=60.0).contains(b))) {
                return Err(Error::config(format!(
                    "{}: ModelOptions::rx_buffer_s {b} must be from 0 to 60 seconds",
                    echo(spec)
                )));
            }
            if let Some(r) = m.rx_capacity_pps.filter(|r| !(r.is_finite() && *r > 0.0)) {
                return Err(Error::config(format!(
                    "{}: ModelOptions::rx_capacity_pps {r} must be a positive number of frames a second",
                    echo(spec)
                )));
            }
            if let Some(cpu) = m.cpu {
                let online = rawpkt_sys::online_cpus();
                if !online.contains(&cpu) {
                    return Err(Error::config(format!(
                        "{}: ModelOptions::cpu {cpu}: no such CPU (online: {})",
                        echo(spec),
                        rawpkt_sys::cpu_list(&online)
                    )));
                }
            }
            // A trace path that names no regular file is the caller's to change.
            let nic = Nic::new(wires, device).map_err(|e| {
                let kind = if rawpkt_sys::file::refused(&e) {
                    Error::config
                } else {
                    Error::device
                };
                kind(e.to_string()).caused_by(e)
            })?;
            nic.start(m.cpu);
            let ids = Arc::new(QueueIds::default());
            models.push((key.clone(), Arc::downgrade(&nic), ids.clone()));
            (nic, ids)
        }
    };
    let drops_at_open = nic.port_counters(port).rx_out_of_buffer;
    Ok(Box::new(ModelPort {
        nic,
        ids,
        key,
        port,
        drops_at_open,
    }))
}

struct ModelPort {
    nic: Arc<Nic>,
    /// The queue ids taken on the NIC's ports.
    ids: Arc<QueueIds>,
    /// The NIC's name in `MODELS`.
    key: String,
    port: usize,
    /// The port's `rx_out_of_buffer` when this port was opened.
    drops_at_open: u64,
}

impl ModelPort {
    /// Takes queue id `qid` of direction `tx` on this port, with a control handle for the queue
    /// holding it and one registration of the pool: both are given back when the queue goes.
    fn take(&self, tx: bool, qid: u16, pool: &Rc<Pool>) -> Result<(u32, ModelControl), Error> {
        let dir = if tx { "TX" } else { "RX" };
        if qid >= MODEL_QUEUES {
            return Err(Error::config(format!(
                "{}: {dir} queue {qid} does not exist; a model port has {dir} queues 0 to {}",
                self.identity(),
                MODEL_QUEUES - 1
            )));
        }
        let id = (self.port, tx, qid);
        if !self.ids.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id) {
            return Err(Error::config(format!(
                "{}: {dir} queue {qid} is already in use; drop that queue before creating it again",
                self.identity()
            )));
        }
        let held = IdHeld {
            ids: self.ids.clone(),
            id,
        };
        // Each queue holds a registration of its pool for as long as it lives.
        let lkey = self.nic.register_mr(pool.region());
        Ok((
            lkey,
            ModelControl::new(self.nic.clone(), self.port, Some(lkey), Some(held)),
        ))
    }
}

impl ModelPort {
    /// A receive queue on a striding RQ (`QueueConfig::rx_striding`) of `cfg.size` strides, as
    /// the device's striding caps allow (`rx::dv_striding::params_for`).
    fn striding_rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        crate::rx::dv_striding::refuse_other_options(cfg, pool)
            .map_err(|e| Error::config(format!("{}: {}", self.identity(), e.message())))?;
        let caps = self.nic.config().striding_rq;
        if caps.supported() && !crate::rx::dv_striding::takes_per_stride_wqes(&caps) {
            let max = self.nic.max_frame(self.port) as u32;
            return self.rx_queue(qid, pool, &crate::rx::dv_striding::fallback_config(cfg, pool, max));
        }
        let params = params_for(pool, &caps).map_err(|e| Error::config(format!("{}: {e}", self.identity())))?;
        let (lkey, ctl) = self.take(false, qid, pool)?;
        let strides = params.num_strides();
        let wqes = (cfg.size / strides).max(1);
        // Every stride may complete on its own, and every WQE may end with a filler.
        // Compressed in the checksum/stride-index format (the one a striding RQ reads) where
        // the queue wants it (`rx::dv_striding::wants_compression`).
        let comp = crate::rx::dv_striding::wants_compression(cfg).then_some(MiniFormat::CsumStridx);
        let cq = self
            .nic
            .create_cq_with(wqes * (strides + 1), comp)
            .map_err(Error::device)?;
        let opts = RqOptions {
            max_sge: strides,
            striding: Some(params),
            ..Default::default()
        };
        let (rwq, wq) = self
            .nic
            .create_rq_with(self.port, wqes, cq.cqn, opts)
            .map_err(Error::device)?;
        ctl.watch(&[cq.cqn, wq]);
        let ctl: Arc<dyn DvControl> = Arc::new(ctl);
        // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
        Ok(Box::new(unsafe {
            DvStridingRxQueue::new(&rwq, &cq, params, wq, lkey, pool, cfg, ctl)
        }?))
    }
}

impl Backend for ModelPort {
    fn rx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn RxQueue>, Error> {
        if cfg.rx_striding {
            return self.striding_rx_queue(qid, pool, cfg);
        }
        let (lkey, ctl) = self.take(false, qid, pool)?;
        let sg = crate::rx::dv::rx_segments(cfg, pool)?;
        // As the mlx5 backend (`Mlx5Port::rx_cqe_comp`): the hash format where the queue can read
        // it; the model has the caps of a ConnectX-5 (and of a ConnectX-4, which has them too).
        let comp = crate::rx::dv::wants_compression(cfg, sg).then_some(MiniFormat::Hash);
        let cq = self.nic.create_cq_with(cfg.size, comp).map_err(Error::device)?;
        // Scatter (frames longer than a buffer) and CVLAN stripping are RQ context fields, set
        // when the WQ is made (mlx5_ib `create_rq`: `log_wq_stride` from max_sge, `vsd`).
        let opts = RqOptions {
            max_sge: sg,
            strip_cvlan: cfg.rx_vlan_strip,
            ..RqOptions::default()
        };
        let (rwq, wq) = self
            .nic
            .create_rq_with(self.port, cfg.size, cq.cqn, opts)
            .map_err(Error::device)?;
        ctl.watch(&[cq.cqn, wq]);
        let ctl: Arc<dyn DvControl> = Arc::new(ctl);
        // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
        Ok(Box::new(unsafe {
            DvRxQueue::new(&rwq, &cq, wq, lkey, pool, cfg, ctl)
        }?))
    }

    fn tx_queue(&self, qid: u16, pool: &Rc<Pool>, cfg: &QueueConfig) -> Result<Box<dyn TxQueue>, Error> {
        let (lkey, ctl) = self.take(true, qid, pool)?;
        let cq = self.nic.create_cq(cfg.size).map_err(Error::device)?;
        let sq = self.nic.create_sq(self.port, cfg.size, cq.cqn).map_err(Error::device)?;
        ctl.watch(&[cq.cqn, sq.qpn()]);
        let ctl: Arc<dyn DvControl> = Arc::new(ctl);
        // The port's largest frame now (an MTU change since the NIC was made included).
        let caps = DvCaps {
            max_frame: self.nic.max_frame(self.port) as u32,
            ..self.nic.caps()
        };
        // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
        Ok(Box::new(unsafe {
            DvTxQueue::new(&sq, &cq, lkey, pool, cfg, caps, ctl)
        }?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn buffers_pinned(&self, cfg: &QueueConfig) -> usize {
        // `create_sq` gives the SQ `cfg.size` WQEBBs (a power of two), as `tx_queue` asks.
        cfg.size as usize + crate::tx::dv::tx_buffers(cfg.size, &self.nic.caps()) as usize
    }

    fn device_drops(&self) -> Option<u64> {
        Some(self.nic.port_counters(self.port).rx_out_of_buffer - self.drops_at_open)
    }

    fn link_speed_mbps(&self) -> Option<u64> {
        // A 100 Gb/s ConnectX, as the model library's `ibv_query_port` says (4X EDR).
        Some(100_000)
    }

    fn device_clock_ns(&self) -> Option<u64> {
        // On the time base of the CQE timestamps: the model's real-time clock (its PHC) where
        // they are in real-time format.
        let clock = model_clock(self.nic.timestamp_clock());
        Some(if clock.is_real_time() {
            self.nic.real_time_ns()
        } else {
            clock.ns(self.nic.clock_ticks())
        })
    }

    fn describe(&self) -> Option<String> {
        Some(format!(
            "port {} of model NIC {}: profile {}",
            self.port,
            self.key,
            self.nic.config().behaviour()
        ))
    }

    fn identity(&self) -> PortIdentity {
        PortIdentity::Model {
            nic: self.key.clone(),
            port: self.port,
        }
    }
}
