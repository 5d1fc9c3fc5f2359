//! A software model of an mlx5 NIC's raw-Ethernet queues, faithful to the formats the hardware
//! reads and writes, so that the DV datapath can be exercised for real without a ConnectX.
//!
//! What it does (the formats' sources are cited in `prm`, each behaviour's at its check in
//! `exec`; `docs/mlx5-notes.md` collects the rules and what the model chose where no source says
//! what the hardware does):
//! - Objects are laid out as `mlx5dv_init_obj` hands them over: an SQ of 64-byte WQEBBs with a
//!   two-word doorbell record and a UAR page whose BlueFlame register is at 0x800
//!   (`MLX5_BF_OFFSET`), two halves of [`BF_SIZE`] bytes that each take doorbells; a cyclic RQ of 16-byte WQEs with a one-word record; CQs of 64-byte CQEs
//!   rounded like rdma-core (`roundup_pow2(n + 1)`) and initialised to `op_own = 0xF0`.
//! - It executes only doorbelled WQEs: a UAR write names the last WQE; the model checks it against
//!   the doorbell record and the WQE in memory (a mismatch, or a record that advanced with no UAR
//!   write, is counted and traced), then runs WQEs up to it.
//! - Every WQE is validated (opcode, wqe_index, QPN, ds, minimum inline, every gather entry's lkey
//!   and range inside a registered MR); a violation gets the error CQE the hardware writes
//!   (REQ_ERR with LOCAL_QP_OP / LOCAL_PROT / LOCAL_LENGTH), the SQ enters the error state, and
//!   later WQEs are flushed (WR_FLUSH_ERR for signalled ones) until the queue is reset.
//! - Received frames are spread by Toeplitz RSS over the port's RQs, scattered into the next
//!   posted WQE, and completed with a RESP_SEND CQE carrying length, RSS hash, L3/L4 types and
//!   checksum-ok bits, and the drop count of frames lost for lack of buffers (`sop_drop_qpn[31:24]`).
//! - CQEs are written with `op_own` last and the owner bit of the CQ's real size; a strict mode
//!   detects CQ overrun from the published consumer index.
//! - Faults can be injected: error CQEs of any syndrome, RX buffer exhaustion, a lost doorbell.
//! - It runs stepped (`Nic::step`) for deterministic tests, or in its own thread polling its
//!   doorbells like a NIC (`Nic::start`).
//! - Wires: two ports back to back, a capture/inject wire for tests, or a Linux interface through
//!   AF_PACKET.
//! - Every executed WQE and written CQE can be traced to a file (`docs/model-trace.md`).
//! - Frame bytes are copied only where something reads them: a send WQE's frames are checked and
//!   described as pieces (inline bytes, gathered MR ranges), then copied straight from the send
//!   buffers into the receiving RQ's buffer (checksum offload is applied to that copy), or
//!   assembled once for an AF_PACKET send or a capture. Frames that reach nothing that reads
//!   bytes (a peer port with no RQ, the `Null` wire) are counted per WQE and never copied: every
//!   check of the WQE still runs first, and no device-visible state depends on those bytes.
#![allow(unsafe_code)] // the device side of DMA: ring memory and doorbell words

mod clock;
pub mod env;
mod exec;
pub use exec::{hdr_type_etc, SQ_TURN_BBS};
pub mod link;
pub mod profile;
mod ring;
mod striding;
mod trace;
mod uar;
pub use uar::UAR_PAGE;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

pub use link::Link;
use mlx5_prm::InlineMode;
use mlx5_prm::{cq_entries_for, BF_OFFSET, CQE_INIT_OP_OWN, SEND_WQE_BB};
use mlx5_prm::{Cqe64, MiniFormat};
use rawpkt_sys::region::Region;
use ring as dma;
pub use trace::Trace;

/// Mini-CQEs per compressed session at most: the `cqe_comp_caps.max_num` the model reports, as a
/// ConnectX-5 does (`mlx5dv_query_device`; the kernel takes it from the HCA cap
/// `cqe_compression_max_num`).
pub const CQE_COMP_MAX_NUM: u32 = 64;

/// Bytes in each half of an SQ's BlueFlame register (`mlx5dv_qp.bf.size`): libmlx5 gives a QP
/// half of a 512-byte register (`bf_reg_size` 1 << `log_bf_reg_size` 9, `buf_size = bf_reg_size
/// / 2`, providers/mlx5/mlx5.c) and alternates between the halves (`bf->offset ^= bf->buf_size`
/// in qp.c `post_send_db`), writing an 8-byte doorbell or a BlueFlame copy of the WQE, whose first
/// 8 bytes are the same doorbell, at either one.
pub const BF_SIZE: u32 = 256;

/// The default device clock's frequency, `hca_core_clock` in kHz (mlx5 `device_frequency_khz`): a
/// ConnectX-5's 156.25 MHz, 6.4 ns a tick (`hca_core_clock 156250kHZ` in the `ibv_devinfo -v`
/// outputs of openucx/ucx#5376 and #4770; model-verbs `device.rs`). The model's CQEs carry
/// this clock in ticks since the NIC was created, as hardware's carry its free-running clock
/// (the PRM's CQE `timestamp`; converted to ns by the driver, `dv::TickClock`).
/// Other profiles run other clocks (`profile::Clock`).
pub const HCA_CORE_CLOCK_KHZ: u64 = 156_250;

#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Headers every send WQE must inline (ConnectX-4: L2, at least 18 bytes; CX-5 and later:
    /// none); [`Nic::set_inline_mode`] changes it per port, as a vport context does.
    pub inline_mode: InlineMode,
    /// Enhanced multi-packet send (opcode 0x29; ConnectX-5 and later, never with min-inline).
    pub enhanced_mpw: bool,
    /// Largest frame the port sends or accepts.
    pub max_frame: usize,
    /// Detect CQ overrun from the consumer index the driver publishes.
    pub strict_cq: bool,
    /// Polls with WQEs behind the doorbell record but no UAR write before it counts as missing.
    pub missing_doorbell_polls: u32,
    /// Require a UAR write to name exactly the WQE that ends at the doorbell record (the UAR
    /// carries the first 8 bytes of the last WQE posted, the record the PI after it).
    /// Right when stepped; a running device may see a later record than the UAR it latched, so
    /// `start` relaxes it to "ends inside the record's window".
    pub strict_doorbell: bool,
    /// Write a trace of WQEs and CQEs here.
    pub trace: Option<std::path::PathBuf>,
    /// Frames a second each port takes at most, through a buffer of `rx_buffer_s` worth (at
    /// least 64 frames; full at the first frame), so that a run of T seconds loses nothing up to
    /// `pps × (1 + rx_buffer_s / T)`; the rest are lost before the port (`rx_wire_drops`), as
    /// behind a slower device under test. Frames the model's thread finds late (it lost its
    /// CPU) are taken as if they came while it was away: the host's scheduling loses none. None:
    /// no limit.
    pub rx_capacity_pps: Option<f64>,
    /// The buffer in front of `rx_capacity_pps`, in seconds of it: 0.05 (50 ms) by default, as a
    /// device under test has one. A deeper one rides out a sender that a busy host holds up
    /// and that then sends what it owes at once.
    pub rx_buffer_s: f64,
    /// The striding RQ limits the device reports (`mlx5dv_striding_rq_caps`): a ConnectX-5's,
    /// or none on a ConnectX-4 ([`mlx5_prm::mprq::Caps`]); a WQ asked outside them is
    /// refused, as mlx5_ib refuses it.
    pub striding_rq: mlx5_prm::mprq::Caps,
    /// The profile the device was made from (`profile`; "default" for this default device).
    pub profile: String,
    /// What the device says it is (the model library's sysfs and queries).
    pub identity: profile::Identity,
    /// How the device behaves where the sources leave it a choice ([`profile::Knobs`]).
    pub knobs: profile::Knobs,
}

/// A wire that loses, duplicates and reorders frames, deterministically, so that a test knows
/// exactly how many of each it made. Frames are numbered per sending port from 1 as they leave;
/// each rule takes every Nth of them (0: never), the first that applies winning, in this order:
/// frame n is lost when `drop_every` divides n, else sent twice when `duplicate_every` divides n,
/// else held back and sent just after the next frame that leaves the port (the two swap) when
/// `swap_every` divides n. A held frame waits for that next frame however long it takes: the
/// last frame of a run, held, never leaves. Counted in [`PortCounters`] (`wire_dropped`,
/// `wire_duplicated`, `wire_swapped`). Not something a NIC does: a lossy cable or a device
/// under test, for a generator's loss, duplicate and reorder counts. Set by the knobs
/// `wire_drop`, `wire_dup` and `wire_swap` ([`profile::KNOBS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Impairment {
    pub drop_every: u64,
    pub duplicate_every: u64,
    pub swap_every: u64,
}

impl Impairment {
    /// Whether any rule applies.
    pub fn any(&self) -> bool {
        self.drop_every + self.duplicate_every + self.swap_every > 0
    }
}

impl ModelConfig {
    /// A ConnectX-4: every send WQE inlines at least the 18-byte L2 header; no eMPW.
    pub fn connectx4() -> ModelConfig {
        ModelConfig {
            inline_mode: InlineMode::L2,
            enhanced_mpw: false,
            striding_rq: mlx5_prm::mprq::Caps::NONE,
            ..ModelConfig::default()
        }
    }
}

/// The default device is a ConnectX-5: no minimum inline, enhanced multi-packet send.
impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            inline_mode: InlineMode::None,
            enhanced_mpw: true,
            max_frame: 9216,
            strict_cq: true,
            missing_doorbell_polls: 1,
            strict_doorbell: true,
            trace: None,
            rx_capacity_pps: None,
            rx_buffer_s: 0.05,
            striding_rq: mlx5_prm::mprq::Caps::CONNECTX5,
            profile: "default".into(),
            identity: profile::Identity::CONNECTX5,
            knobs: profile::Knobs::default(),
        }
    }
}

/// Faults the model injects on demand, each consumed by the next event it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next send WQE on the port fails with this syndrome.
    TxError { syndrome: u8 },
    /// The next received frame on the port completes with a RESP_ERR of this syndrome.
    RxError { syndrome: u8 },
    /// The next `frames` received frames find no posted buffer.
    RxNoBuffer { frames: u32 },
    /// The next UAR doorbell write on the port is lost.
    LostDoorbell,
}

/// An asynchronous event of the device, as the kernel's mlx5_ib raises it for an object
/// (`qp.c` `mlx5_ib_wq_event` / `mlx5_ib_qp_event`, `cq.c` `mlx5_ib_cq_event`) or a port: what
/// `ibv_get_async_event` returns. [`Nic::raise`] makes one happen; listeners
/// ([`Nic::on_event`]) hear every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// The CQ is in error (an overrun, `IBV_EVENT_CQ_ERR`): it writes nothing more.
    CqError { cqn: u32 },
    /// The WQ is broken (`IBV_EVENT_WQ_FATAL`, from `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`): frames
    /// steered to it are dropped (`rx_wq_error`) until it is reset.
    WqFatal { wqn: u32 },
    /// The QP is broken (`IBV_EVENT_QP_FATAL`): its SQ runs nothing and writes no CQE until it
    /// is reset.
    QpFatal { qpn: u32 },
    /// The port's link went down (`IBV_EVENT_PORT_ERR`).
    PortDown { port: usize },
    /// The port's link came up (`IBV_EVENT_PORT_ACTIVE`).
    PortUp { port: usize },
    /// The port's MTU changed ([`Nic::set_mtu`]); not an ibverbs event (the netdev's).
    Mtu { port: usize, mtu: u32 },
    /// A fatal error stopped the port's device ([`Nic::set_dead`]; `IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal { port: usize },
}

/// Something that hears a device's events ([`Nic::on_event`]). Called with the device's lock
/// held: it must not call back into the NIC. It returns whether it wants to hear more (a
/// listener for a queue that is gone says no, and is dropped).
pub type EventListener = Box<dyn Fn(&DeviceEvent) -> bool + Send>;

/// Counters of one model port ("the wire side").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames dropped because the RQ had no posted WQE (`out_of_buffer`).
    pub rx_out_of_buffer: u64,
    /// Frames no queue took; on a bifurcated port these are Linux's (those its netdev accepts,
    /// see [`Nic::set_netdev_filter`]).
    pub rx_unclaimed: u64,
    /// Frames on a port behind flow steering that no bypass rule stole, the netdev did not
    /// accept and no leftovers rule took: dropped by the NIC, as mlx5e's
    /// `rx_steer_missed_packets` counts them.
    pub rx_steer_missed: u64,
    /// Frames dropped because the receiving WQ was in the error state.
    pub rx_wq_error: u64,
    pub tx_error_cqes: u64,
    pub rx_error_cqes: u64,
    /// Frames the wire refused: an AF_PACKET send the kernel did not take.
    pub tx_wire_errors: u64,
    /// Frames lost on the way in: dropped by the kernel before the model read them, or longer
    /// than the largest frame the port accepts.
    pub rx_wire_drops: u64,
    /// Frames the port's wire lost, sent twice, and held back behind the next one
    /// ([`Impairment`]).
    pub wire_dropped: u64,
    pub wire_duplicated: u64,
    pub wire_swapped: u64,
}

/// Device-wide counters of protocol violations and events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub doorbells: u64,
    /// The doorbell record advanced but no UAR write came.
    pub doorbell_missing: u64,
    /// A UAR write that disagrees with the doorbell record or with the WQE in memory.
    pub doorbell_mismatch: u64,
    pub doorbells_lost: u64,
    pub wqes: u64,
    /// WQEs whose WQEBBs run past the end of the SQ ring into its start.
    pub wrapped_wqes: u64,
    /// WQEs whose control segment `imm` word is not 0. rdma-core (`_mlx5_post_send`) and DPDK
    /// write 0 there on Ethernet SENDs, where the kernel gives the word a meaning (a per-WQE TIS
    /// number for kTLS, mlx5e `ktls_tx`); a driver should never put a cookie in it.
    pub wqes_nonzero_imm: u64,
    pub cqes: u64,
    pub cq_overruns: u64,
    /// Compressed sessions written (title + mini-CQE arrays), and the packets they carried.
    pub cqe_sessions: u64,
    pub cqe_session_packets: u64,
}

const QPN_BASE: u32 = 0x100;
const WQN_BASE: u32 = 0x200;
const CQN_BASE: u32 = 0x400;
const LKEY_BASE: u32 = 0x1000;

/// The memory an MR covers.
enum MrMem {
    /// A pool's region, shared with its owner.
    Region(Arc<Region>),
    /// A raw address range registered through the verbs ABI (`ibv_reg_mr`); the registrant
    /// keeps it mapped until the deregistration, as it must for a real HCA's pinned pages.
    Raw { addr: u64, len: u64 },
}

pub(crate) struct Mr {
    /// Holds a pool's region alive for as long as the MR exists.
    mem: MrMem,
    /// The range the MR covers, copied out of `mem` at registration: every gather entry and
    /// receive buffer is checked against it, so the check is two compares with no indirection.
    base: u64,
    len: u64,
    /// Registrations of this region; the MR goes with the last deregistration.
    refs: u32,
}

impl Mr {
    fn new(mem: MrMem) -> Mr {
        let (base, len) = match &mem {
            MrMem::Region(r) => (r.base() as u64, r.len() as u64),
            MrMem::Raw { addr, len } => (*addr, *len),
        };
        Mr {
            mem,
            base,
            len,
            refs: 1,
        }
    }

    /// Whether `[addr, addr + len)` lies inside the MR (no overflow for any inputs).
    #[inline(always)]
    fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.base && len <= self.len && addr - self.base <= self.len - len
    }
}

/// Ring memory of one queue object, shared with the driver through `KeepAlive`.
pub(crate) struct ObjMem {
    region: Region,
    dbrec_off: usize,
    /// An SQ's doorbell page, a page of the device's UAR space ([`uar`]).
    uar: Option<uar::UarPage>,
}

impl ObjMem {
    fn new(ring_bytes: usize, uar: Option<&Arc<uar::UarSpace>>) -> Result<ObjMem, String> {
        let dbrec_off = ring_bytes.max(64);
        let region = Region::small_pages(dbrec_off + 64).map_err(|e| format!("ring memory: {e}"))?;
        let mem = ObjMem {
            region,
            dbrec_off,
            uar: uar.map(|u| u.take()).transpose()?,
        };
        if mem.uar.is_some() {
            for reg in mem.bf_halves() {
                // SAFETY: the register lies in the region just mapped, 8-byte aligned (page
                // offset 0x800 or 0x900); no driver has its address yet.
                unsafe { exec::take_uar(reg) };
            }
        }
        Ok(mem)
    }
    fn ring(&self) -> *mut u8 {
        self.region.base()
    }
    fn dbrec(&self) -> *mut u32 {
        self.region.base().wrapping_add(self.dbrec_off).cast()
    }
    /// The BlueFlame register in the UAR page (null for a queue without one).
    fn bf_reg(&self) -> *mut u8 {
        self.uar
            .as_ref()
            .map_or(std::ptr::null_mut(), |u| u.base().wrapping_add(BF_OFFSET))
    }
    /// The UAR page's index in the device's UAR space (0 for a queue without one).
    fn uar_index(&self) -> u32 {
        self.uar.as_ref().map_or(0, uar::UarPage::index)
    }
    /// The doorbell words of the register's two halves (see [`BF_SIZE`]).
    fn bf_halves(&self) -> [*mut u8; 2] {
        [self.bf_reg(), self.bf_reg().wrapping_add(BF_SIZE as usize)]
    }
}

pub(crate) struct SqObj {
    mem: Arc<ObjMem>,
    wqe_cnt: u32,
    qpn: u32,
    cqn: u32,
    port: usize,
    /// WQEBBs executed (free-running).
    hw_ci: u32,
    error: bool,
    /// The firmware killed the QP ([`DeviceEvent::QpFatal`]): nothing runs until a reset.
    fatal: bool,
    /// Flushed WQEs that would have had a CQE, since the error (the `flush=partial:K` knob).
    flushes: u32,
    unrung_polls: u32,
    /// The QP is in RTS (or ERR): doorbells are acted on. A QP in RESET/INIT/RTR ignores them.
    ready: bool,
    /// The transport domain of the SQ's TIS (0: none, never "self" to any TIR).
    td: u32,
    /// The doorbell the model put back into the register for the queue's next turn
    /// (`exec.rs`, `process_sq`), so that the trace can say it is taken again.
    put_back: Option<u64>,
}

pub(crate) struct RqObj {
    mem: Arc<ObjMem>,
    wqe_cnt: u32,
    /// Bytes per WQE: 16 per data segment, a power of two.
    stride: u32,
    /// Receive offloads ([`RqOptions`]).
    scatter_fcs: bool,
    strip_cvlan: bool,
    /// One data segment per WQE and no offload: the receive path that copies the frame
    /// straight into the buffer.
    plain: bool,
    wq_num: u32,
    cqn: u32,
    hw_ci: u32,
    /// The posted counter as last read from the doorbell record. The record is read again only
    /// when `hw_ci` catches up with it, as a NIC caches the producer counter rather than
    /// fetching the record per frame: the counter only grows, so a stale copy can only make
    /// the model look again, never use a WQE that is not posted.
    posted: u32,
    error: bool,
    pending_drops: u8,
    state: RqState,
    /// A striding RQ's geometry and the stride the next frame starts at in WQE `hw_ci`.
    striding: Option<StridingState>,
}

/// Where a striding RQ is inside its current WQE (`striding.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StridingState {
    params: mlx5_prm::mprq::Params,
    /// The first free stride of WQE `hw_ci`.
    next_stride: u32,
}

/// Data segments a receive WQE may hold: a ConnectX-5's `max_wqe_sz_rq` of 512 bytes
/// (`ibv_query_device` reports `max_sge` 30, the smaller of the send and receive limits).
pub const MAX_RQ_SGE: u32 = 32;

/// How a receive WQ is made, beyond its size: the RQ context fields mlx5_ib sets from the verbs
/// create flags (drivers/infiniband/hw/mlx5/qp.c `create_raw_packet_qp_rq`, and `create_rq`
/// for a WQ).
#[derive(Clone, Copy, Debug, Default)]
pub struct RqOptions {
    /// Data segments per WQE (0 or 1: one); the device scatters a frame across them in order.
    pub max_sge: u32,
    /// `scatter_fcs`: the frame's FCS, 4 bytes, is delivered after it and counted in the CQE's
    /// byte count (`IBV_QP_CREATE_SCATTER_FCS`, `IBV_WQ_FLAGS_SCATTER_FCS`).
    pub scatter_fcs: bool,
    /// `vsd` clear: a frame's 802.1Q tag is taken out and reported in the CQE's `vlan_info`
    /// (`IBV_QP_CREATE_CVLAN_STRIPPING`, `IBV_WQ_FLAGS_CVLAN_STRIPPING`).
    pub strip_cvlan: bool,
    /// A striding (multi-packet) RQ of these strides (`mlx5dv_create_wq` with
    /// `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`): each WQE is a 16-byte next segment and
    /// `max_sge` data segments whose concatenation is cut into strides, and frames are placed
    /// one after another in them (`striding.rs`).
    pub striding: Option<mlx5_prm::mprq::Params>,
}

/// The state of a receive WQ (`enum ibv_wq_state` minus UNKNOWN). Frames steered to a WQ that
/// is not ready are dropped and counted in `rx_wq_error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqState {
    Reset,
    Ready,
    Error,
}

/// A steering destination (a TIR in PRM terms, an RSS QP in verbs): frames are hashed with
/// Toeplitz over the selected fields and land on `table[hash & (len - 1)]`.
struct TirObj {
    table: Vec<u32>,
    fields: u64,
    rss: rawpkt_wire::rss::ToeplitzTable,
    /// The TIR's transport domain (0: none) and its `self_lb_block` bits (PRM `tirc`; bit 0
    /// unicast, bit 1 multicast), which let frames sent by a TIS of the same domain in.
    td: u32,
    self_lb: u8,
}

/// `tirc.self_lb_block` bit for unicast self-loopback (mlx5_ifc.h
/// `MLX5_TIRC_SELF_LB_BLOCK_BLOCK_UNICAST`; set, it lets the TIR's own domain's unicast in, as
/// mlx5_ib sets it for `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC`).
pub const TIR_SELF_LB_UC: u8 = 1;
/// The multicast bit (`MLX5_TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST`).
pub const TIR_SELF_LB_MC: u8 = 2;

/// The verbs flow types that are no match-and-steer rule of the bypass tables: mlx5_ib
/// (`get_flow_table`, drivers/infiniband/hw/mlx5/fs.c) puts them in namespaces of their own
/// and builds their match itself, whatever specs the flow carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecialFlow {
    /// `IBV_FLOW_ATTR_SNIFFER` (`create_sniffer_rule`): one empty-match rule in
    /// `MLX5_FLOW_NAMESPACE_SNIFFER_RX` and one in `_SNIFFER_TX`, so a copy of every frame the
    /// port receives and of every frame it sends, beside (not instead of) normal steering.
    Sniffer,
    /// `IBV_FLOW_ATTR_ALL_DEFAULT` (`create_leftovers_rule`): rules in
    /// `MLX5_FLOW_NAMESPACE_LEFTOVERS`, the root after the kernel's own tables, so frames that
    /// no bypass rule stole and the netdev's tables did not take.
    AllDefault,
    /// `IBV_FLOW_ATTR_MC_DEFAULT`: the multicast rule of those only (dst MAC bit 0 set).
    McDefault,
}

/// Flow steering of a port, when the model library turned it on: the NIC's bypass tables in
/// front of the Linux netdev. Frames nothing steals are Linux's (`rx_unclaimed`) when the
/// netdev accepts them, else the leftovers rules' or dropped (`rx_steer_missed`).
#[derive(Default)]
struct Steering {
    /// (flow id, rule, TIR index) in installation order.
    flows: Vec<(u64, rawpkt_wire::rule::FlowRule, usize)>,
    set: rawpkt_wire::matcher::RuleSet,
    /// (flow id, kind, TIR index): sniffer and leftovers rules.
    special: Vec<(u64, SpecialFlow, usize)>,
    /// The unicast address the netdev's L2 table holds; `None`: the netdev takes every frame
    /// (promiscuous), so the leftovers namespace sees none.
    netdev_mac: Option<[u8; 6]>,
    /// The `flow_groups=reverse` knob: groups of one priority searched last-created first.
    reverse_groups: bool,
}

impl Steering {
    /// Whether the netdev (mlx5e's L2 table, in front of the leftovers namespace) takes a frame
    /// to `dst`: its own address, broadcast, and the multicast groups Linux joins on every
    /// interface with IPv4 and an IPv6 link-local address: 224.0.0.1 (all-hosts, `ip_mc_up`),
    /// ff02::1 (all-nodes, `ipv6_add_dev`) and the link-local address's solicited-node group
    /// (`addrconf_join_solict`), which is `33:33:ff` and the MAC's last three bytes.
    fn netdev_accepts(&self, dst: &[u8]) -> bool {
        let Some(mac) = self.netdev_mac else {
            return true;
        };
        let Ok(dst) = <[u8; 6]>::try_from(dst) else {
            return false;
        };
        dst == mac
            || dst == [0xff; 6]
            || dst == [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]
            || dst == [0x33, 0x33, 0x00, 0x00, 0x00, 0x01]
            || dst == [0x33, 0x33, 0xff, mac[3], mac[4], mac[5]]
    }

    fn sniffs(&self) -> bool {
        self.special.iter().any(|f| f.1 == SpecialFlow::Sniffer)
    }

    fn rebuild(&mut self) {
        let mut set = rawpkt_wire::matcher::RuleSet::new();
        set.reverse_groups(self.reverse_groups);
        for (_, r, _) in &self.flows {
            // Rules were validated when added; the count is bounded by `add_flow`.
            let _ = set.add(r.clone());
        }
        self.set = set;
    }
}

pub(crate) struct CqObj {
    mem: Arc<ObjMem>,
    cqe_cnt: u32,
    log2: u32,
    cqn: u32,
    pi: u32,
    /// The consumer index as last read from the doorbell record (strict mode): read again only
    /// when the producer index is a ring ahead of it. The index only grows, so a stale copy can
    /// only make the model look again before calling an overrun.
    ci_seen: u32,
    /// CQE compression asked for at creation (`mlx5dv_create_cq` with
    /// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`): the mini-CQE format.
    comp: Option<MiniFormat>,
    /// Receive completions not written yet: a compressing CQ holds a step's worth and writes
    /// them as sessions where several are ready at once (`Device::flush_held`, exec.rs).
    held: Vec<Cqe64>,
    /// In error (`cq_overrun=error`, [`DeviceEvent::CqError`]): nothing is written any more.
    error: bool,
}

impl CqObj {
    /// How many slots the driver has not consumed when the producer counter is `pi` and the
    /// doorbell record holds `ci`, as the device compares them: on the low `log2 + 1` bits only.
    ///
    /// Drivers write the record in different widths: rdma-core 24 bits (`update_cons_index`,
    /// providers/mlx5/cq.c, `cons_index & 0xffffff`), the kernel 24 (`mlx5_cq_set_ci`), DPDK's
    /// RX queues a 32-bit counter (`rxq->cq_ci`, drivers/net/mlx5/mlx5_rx.h) and its TX queues a
    /// 16-bit one written as is (`uint16_t cq_ci` in mlx5_tx.h, `*txq->cq_db =
    /// rte_cpu_to_be_32(txq->cq_ci)` in mlx5_txq.c / mlx5_tx.h `mlx5_tx_comp_flush`), on CQs
    /// created without `overrun_ignore` (only its packet-pacing CQs set it, mlx5_txpp.c) that
    /// run for days on ConnectX cards. The bits every one of them agrees on are those below the
    /// narrowest width, and a ring of 2^log2 slots needs log2 + 1 of them to tell a full ring
    /// from an empty one: the same bits the CQE owner bit is taken from (the counter's bit
    /// `log2`, PRM "CQE ownership"). A producer that checks before every write can never be
    /// more than a ring ahead, so those bits find every overrun.
    fn used(&self, pi: u32, ci: u32) -> u32 {
        pi.wrapping_sub(ci) & ((self.cqe_cnt << 1) - 1)
    }
}

pub(crate) struct PortState {
    link: Link,
    rqs: Vec<u32>,
    steering: Option<Steering>,
    faults: VecDeque<Fault>,
    counters: PortCounters,
    /// The vport's `min_wqe_inline_mode`: what its send WQEs must inline.
    inline_mode: InlineMode,
    /// A fatal device error stopped the port: no send WQE runs and no frame is received again
    /// (the kernel's mlx5 `mlx5_enter_error_state` stops the function's DMA).
    dead: bool,
    /// `rx_capacity_pps`: tokens left and when they were last counted (device ns), and the
    /// refill beyond the buffer's depth lent to the frames of one step, and which (`exec.rs`,
    /// `deliver`).
    bucket: (f64, u64, f64, u64),
    /// The vport's local loopback (NIC vport context `disable_uc_local_lb`/`_mc_` clear): frames
    /// the port sends to its own MAC or to a group come back in ([`Nic::set_local_lb`]).
    local_lb: bool,
    /// The port's MAC, for telling which sent frames are local ([`Nic::set_port_mac`]).
    mac: Option<[u8; 6]>,
    /// Something besides the wire reads what the port sends: a sniffer flow, or local
    /// loopback (kept by `PortState::update_taps` whenever either changes).
    taps: bool,
    /// The link ([`profile::LinkMode`]): up, down (nothing sent or received), or paused.
    link_mode: profile::LinkMode,
    /// While paused: the device time (ns) the pause ends, from the first doorbell that found
    /// the link paused.
    pause_until: Option<u64>,
    /// Largest frame the port sends or takes ([`Nic::set_mtu`]; `ModelConfig::max_frame` at
    /// first).
    max_frame: usize,
    /// Frames sent so far through an impaired wire, and the one held back to swap
    /// ([`Impairment`]).
    impaired: u64,
    held: Option<Vec<u8>>,
}

impl PortState {
    fn update_taps(&mut self) {
        self.taps = self.local_lb || self.steering.as_ref().is_some_and(Steering::sniffs);
    }
}

/// The device state behind the NIC's lock.
pub struct Device {
    cfg: ModelConfig,
    ports: Vec<PortState>,
    mrs: Vec<Option<Mr>>,
    sqs: Vec<Option<SqObj>>,
    rqs: Vec<Option<RqObj>>,
    cqs: Vec<Option<CqObj>>,
    tirs: Vec<Option<TirObj>>,
    next_flow: u64,
    counters: DeviceCounters,
    trace: Option<Trace>,
    clock: Arc<clock::DevClock>,
    /// The clock in ns and as a CQE timestamp, read at most once per step: at the first completion
    /// the step writes.
    now: Option<(u64, u64)>,
    /// Steps run so far (`rx_capacity_pps` lends a step's frames the refill of the pause
    /// before it, and only that step's; the clock of the `flush=late:N` knob).
    steps: u64,
    /// The frames of the WQE being executed, described rather than copied (taken out while a
    /// WQE executes). Bytes are copied only where something reads them (exec.rs, `Frame`).
    out: Option<Box<exec::WqeFrames>>,
    /// A frame assembled in one piece, for the consumers that need one (an AF_PACKET send, a
    /// capture, flow classification, checksums on a frame that goes to no receive buffer).
    scratch: Vec<u8>,
    /// A frame as a receive queue with offloads or several data segments gets it (checksums
    /// filled, tag stripped, FCS appended), before it is scattered.
    delivered: Vec<u8>,
    /// The receive buffer of an AF_PACKET wire.
    rxbuf: Vec<u8>,
    wqe: Vec<u8>,
    /// Toeplitz RSS with the default key (DPDK's, used by VPP).
    rss: rawpkt_wire::rss::ToeplitzTable,
    /// Files that show a port's `rx_out_of_buffer` count, as the kernel's
    /// `hw_counters/out_of_buffer` does ([`Nic::publish_out_of_buffer`]).
    published: Vec<Published>,
    /// The SQ whose WQE is executing (its TIS's domain is that of the frames it sends).
    tx_sq: usize,
    /// The largest frame its port sends (`PortState::max_frame`).
    tx_max_frame: usize,
    /// While a looped-back frame is delivered: the domain of the TIS that sent it.
    looped_from: Option<u32>,
    /// Flush CQEs in flight (`flush=late:N`): written when their step comes, whatever happened
    /// to the SQ since.
    late: VecDeque<exec::LateCqe>,
    /// The `zip=irregular` knob's generator state.
    rng: u64,
    /// Who hears the device's events ([`Nic::on_event`]).
    listeners: Vec<EventListener>,
}

/// A counter file and what was last written to it.
struct Published {
    port: usize,
    path: std::path::PathBuf,
    written: u64,
    at: Instant,
}

impl Device {
    /// Rewrites the counter files whose count changed: when the device is idle, or at most once a
    /// millisecond while it is busy (a file write per dropped frame would slow the device down
    /// exactly when it is short of buffers). So once traffic stops, the file is exact.
    fn publish(&mut self, idle: bool) {
        for p in &mut self.published {
            let now = self.ports[p.port].counters.rx_out_of_buffer;
            if now == p.written || !(idle || p.at.elapsed() >= std::time::Duration::from_millis(1)) {
                continue;
            }
            // Written aside and renamed over, so that a reader never sees half a number.
            let tmp = p.path.with_extension("tmp");
            if std::fs::write(&tmp, format!("{now}\n"))
                .and_then(|()| std::fs::rename(&tmp, &p.path))
                .is_ok()
            {
                p.written = now;
            }
            p.at = Instant::now();
        }
    }
}

/// A model NIC with its ports. Cheap to share; the device state sits behind a mutex that the
/// model's own loop takes per step and the control path takes per call. The datapath never
/// takes it: it talks to the model only through ring memory, as with hardware.
pub struct Nic {
    dev: Arc<Mutex<Device>>,
    /// The UAR pages of the SQs ([`Nic::uar_fd`]).
    uars: Arc<uar::UarSpace>,
    /// The device clock, read without the device's lock.
    clock: Arc<clock::DevClock>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock(dev: &Mutex<Device>) -> MutexGuard<'_, Device> {
    // A panic elsewhere while holding the lock leaves counters possibly stale, never memory
    // unsafe; keep going rather than cascade the panic.
    dev.lock().unwrap_or_else(|e| e.into_inner())
}

fn slot<T>(v: &mut Vec<Option<T>>, obj: T) -> usize {
    if let Some(i) = v.iter().position(Option::is_none) {
        v[i] = Some(obj);
        i
    } else {
        v.push(Some(obj));
        v.len() - 1
    }
}

impl Nic {
    /// A NIC whose ports have the given links. Fails only when the trace file cannot be
    /// created (the system's error kept, with the file named).
    pub fn new(links: Vec<Link>, cfg: ModelConfig) -> std::io::Result<Arc<Nic>> {
        let trace = match &cfg.trace {
            Some(p) => Some(Trace::create(p, &cfg.behaviour()).map_err(|e| {
                let text = format!("trace file {}: {e}", p.display());
                rawpkt_sys::context(e, text)
            })?),
            None => None,
        };
        let ports = links
            .into_iter()
            .map(|link| PortState {
                link,
                rqs: Vec::new(),
                steering: None,
                faults: VecDeque::new(),
                counters: PortCounters::default(),
                inline_mode: cfg.inline_mode,
                dead: false,
                bucket: (0.0, 0, 0.0, 0),
                local_lb: false,
                mac: None,
                taps: false,
                link_mode: cfg.knobs.link,
                pause_until: None,
                max_frame: cfg.max_frame,
                impaired: 0,
                held: None,
            })
            .collect();
        let clock = Arc::new(clock::DevClock::new(cfg.knobs.clock, cfg.knobs.clock_khz()));
        let tx_max_frame = cfg.max_frame;
        let rng = match cfg.knobs.zip {
            profile::Zip::Irregular(seed) => seed ^ 0x9e37_79b9_7f4a_7c15,
            _ => 0,
        };
        let dev = Device {
            out: Some(Box::default()),
            scratch: Vec::with_capacity(cfg.max_frame),
            delivered: Vec::with_capacity(cfg.max_frame + 4),
            rxbuf: vec![0; cfg.max_frame],
            rss: rawpkt_wire::rss::ToeplitzTable::new(&rawpkt_wire::rss::DEFAULT_KEY),
            wqe: vec![0; 64 * SEND_WQE_BB],
            cfg,
            ports,
            mrs: Vec::new(),
            sqs: Vec::new(),
            rqs: Vec::new(),
            cqs: Vec::new(),
            tirs: Vec::new(),
            next_flow: 1,
            counters: DeviceCounters::default(),
            trace,
            clock: clock.clone(),
            now: None,
            steps: 0,
            published: Vec::new(),
            tx_sq: 0,
            tx_max_frame,
            looped_from: None,
            late: VecDeque::new(),
            rng,
            listeners: Vec::new(),
        };
        Ok(Arc::new(Nic {
            dev: Arc::new(Mutex::new(dev)),
            uars: uar::UarSpace::new()?,
            clock,
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
        }))
    }

    /// The device's free-running counter now, in ticks of its `hca_core_clock`
    /// ([`profile::Knobs::clock_khz`]; what `ibv_query_rt_values_ex` reads on hardware): the
    /// time base of the CQEs' timestamps unless the clock runs in real-time format.
    pub fn clock_ticks(&self) -> u64 {
        self.clock.ticks(self.clock.ns())
    }

    /// What the CQEs' timestamps count (the `clock` knob the NIC was made with), read without
    /// the device's lock.
    pub fn timestamp_clock(&self) -> profile::Clock {
        self.clock.mode()
    }

    /// The device's clock now as a CQE's `timestamp` carries it (ticks, or real time as
    /// `seconds << 32 | nanoseconds`, as the `clock` knob says).
    pub fn clock_stamp(&self) -> u64 {
        self.clock.stamp(self.clock.ns())
    }

    /// The device's real-time clock now, ns since the Unix epoch (the PHC of a device whose
    /// clock runs in real-time mode).
    pub fn real_time_ns(&self) -> u64 {
        self.clock.real_time(self.clock.ns())
    }

    /// Stops the device's clock where it is: from now on it moves only by
    /// [`Nic::advance_clock`], so that a stepped test decides what time every CQE carries.
    pub fn simulate_clock(&self) {
        self.clock.simulate();
    }

    /// Moves a simulated clock ([`Nic::simulate_clock`]) `ns` forward.
    pub fn advance_clock(&self, ns: u64) {
        self.clock.advance(ns);
    }

    /// The device clock, ns since the NIC was made (simulated or the host's).
    pub fn clock_ns(&self) -> u64 {
        self.clock.ns()
    }

    /// The file holding the SQs' UAR pages: `mmap(fd, UAR_PAGE, uar_page * UAR_PAGE)` maps the
    /// doorbell page of the SQ whose [`RawQueue::uar_page`] that is, as the uverbs fd does for a
    /// process on hardware (`uar` module). Owned by the NIC; callers dup it to keep it.
    pub fn uar_fd(&self) -> std::os::fd::RawFd {
        self.uars.fd()
    }

    /// A UAR page of the device that no queue rings (what `mlx5dv_devx_alloc_uar` hands a
    /// DevX user): mapped at [`UarHandle::base`], page [`UarHandle::index`] of [`Nic::uar_fd`].
    /// Doorbells written there reach nothing until a queue is bound to the page, which the
    /// model does not do; the page goes back to the device when the handle drops.
    pub fn alloc_uar(&self) -> Result<UarHandle, String> {
        self.uars.take().map(UarHandle)
    }

    /// Two ports connected back to back.
    pub fn pair(cfg: ModelConfig) -> std::io::Result<Arc<Nic>> {
        Nic::new(vec![Link::Peer(1), Link::Peer(0)], cfg)
    }

    fn dev(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// Registers a memory region (an `ibv_reg_mr` over a whole pool); returns its lkey.
    /// Registering the same region again returns the same key.
    pub fn register_mr(&self, region: &Arc<Region>) -> u32 {
        let mut d = self.dev();
        if let Some(i) = d.mrs.iter().position(|m| {
            m.as_ref()
                .is_some_and(|m| matches!(&m.mem, MrMem::Region(r) if Arc::ptr_eq(r, region)))
        }) {
            if let Some(m) = d.mrs[i].as_mut() {
                m.refs += 1;
            }
            return LKEY_BASE + i as u32;
        }
        LKEY_BASE + slot(&mut d.mrs, Mr::new(MrMem::Region(region.clone()))) as u32
    }

    /// Registers `[addr, addr + len)` as a memory region of its own (what `ibv_reg_mr` does for
    /// the model library); returns its lkey. Every call makes a new MR, as on hardware.
    ///
    /// # Safety
    /// The range must stay mapped and writable until [`Nic::deregister_mr`] of the returned key:
    /// the device reads send buffers from it and writes received frames into it.
    pub unsafe fn register_mr_raw(&self, addr: u64, len: u64) -> u32 {
        let mut d = self.dev();
        LKEY_BASE + slot(&mut d.mrs, Mr::new(MrMem::Raw { addr, len })) as u32
    }

    /// Drops one registration of `lkey`; the MR (and its hold on the memory) goes with the last.
    pub fn deregister_mr(&self, lkey: u32) {
        let mut d = self.dev();
        if let Some(m) = d.mrs.get_mut(lkey.wrapping_sub(LKEY_BASE) as usize) {
            if let Some(mr) = m.as_mut() {
                mr.refs -= 1;
                if mr.refs == 0 {
                    *m = None;
                }
            }
        }
    }

    /// Creates a CQ of at least `requested` entries (rounded as rdma-core does).
    pub fn alloc_cq(&self, requested: u32) -> Result<QueueMem, String> {
        self.alloc_cq_with(requested, None)
    }

    /// Creates a CQ as [`Nic::alloc_cq`], compressing receive completions into sessions of
    /// mini-CQEs of format `comp` when several are ready at once (at most [`CQE_COMP_MAX_NUM`]
    /// per session, the `cqe_comp_caps.max_num` the model reports).
    pub fn alloc_cq_with(&self, requested: u32, comp: Option<MiniFormat>) -> Result<QueueMem, String> {
        let cqe_cnt = cq_entries_for(requested);
        if cqe_cnt > 1 << 22 {
            return Err(format!("CQ of {requested} entries is larger than the device allows"));
        }
        let mem = Arc::new(ObjMem::new(cqe_cnt as usize * 64, None)?);
        for i in 0..cqe_cnt as usize {
            // SAFETY: slot i lies inside the ring just mapped; nobody else sees it yet.
            unsafe_stamp(mem.ring().wrapping_add(i * 64), CQE_INIT_OP_OWN);
        }
        let mut d = self.dev();
        let idx = slot(
            &mut d.cqs,
            CqObj {
                mem: mem.clone(),
                cqe_cnt,
                log2: cqe_cnt.trailing_zeros(),
                cqn: 0,
                pi: 0,
                ci_seen: 0,
                comp,
                held: Vec::new(),
                error: false,
            },
        );
        let cqn = CQN_BASE + idx as u32;
        d.cqs[idx].as_mut().expect("just inserted").cqn = cqn;
        let keep = self.handle(Obj::Cq(cqn), mem.clone());
        Ok(QueueMem {
            raw: RawQueue {
                buf: mem.ring(),
                dbrec: mem.dbrec(),
                bf_reg: std::ptr::null_mut(),
                bf_size: 0,
                uar_page: 0,
                cnt: cqe_cnt,
                stride: 64,
                num: cqn,
            },
            keep,
        })
    }

    /// Creates a raw-packet send queue of at least `wqebbs` WQEBBs on `port`, completing to `cqn`.
    pub fn alloc_sq(&self, port: usize, wqebbs: u32, cqn: u32) -> Result<QueueMem, String> {
        let wqe_cnt = wqebbs.max(1).next_power_of_two();
        let mut d = self.dev();
        if port >= d.ports.len() {
            return Err(format!("model port {port} does not exist"));
        }
        if d.cq(cqn).is_none() {
            return Err(format!("CQ {cqn:#x} does not exist"));
        }
        let mem = Arc::new(ObjMem::new(wqe_cnt as usize * SEND_WQE_BB, Some(&self.uars))?);
        let idx = slot(
            &mut d.sqs,
            SqObj {
                mem: mem.clone(),
                wqe_cnt,
                qpn: 0,
                cqn,
                port,
                hw_ci: 0,
                error: false,
                fatal: false,
                flushes: 0,
                unrung_polls: 0,
                ready: true,
                td: 0,
                put_back: None,
            },
        );
        let qpn = QPN_BASE + idx as u32;
        d.sqs[idx].as_mut().expect("just inserted").qpn = qpn;
        drop(d);
        let keep = self.handle(Obj::Sq(qpn), mem.clone());
        Ok(QueueMem {
            raw: RawQueue {
                buf: mem.ring(),
                dbrec: mem.dbrec(),
                bf_reg: mem.bf_reg(),
                bf_size: BF_SIZE,
                uar_page: mem.uar_index(),
                cnt: wqe_cnt,
                stride: SEND_WQE_BB as u32,
                num: qpn,
            },
            keep,
        })
    }

    /// Creates a cyclic receive WQ (one data segment per WQE) on `port`, completing to `cqn`,
    /// and adds it to the port's RSS table. The WQ number is `raw.num`.
    pub fn alloc_rq(&self, port: usize, wqes: u32, cqn: u32) -> Result<QueueMem, String> {
        self.new_rq(port, wqes, cqn, true, RqOptions::default())
    }

    /// Creates a cyclic receive WQ as `ibv_create_wq` does: in RESET, and in no RSS table until a
    /// TIR ([`Nic::create_tir`]) names it.
    pub fn alloc_wq(&self, port: usize, wqes: u32, cqn: u32) -> Result<QueueMem, String> {
        self.new_rq(port, wqes, cqn, false, RqOptions::default())
    }

    /// [`Nic::alloc_rq`] (a WQ in the port's RSS set, ready) made as `opts` say: WQEs of several
    /// data segments, receive offloads, or the `model:` backend's striding receive queues.
    pub fn alloc_rq_with(&self, port: usize, wqes: u32, cqn: u32, opts: RqOptions) -> Result<QueueMem, String> {
        self.new_rq(port, wqes, cqn, true, opts)
    }

    /// [`Nic::alloc_wq`] with WQEs of several data segments and receive offloads.
    pub fn alloc_wq_with(&self, port: usize, wqes: u32, cqn: u32, opts: RqOptions) -> Result<QueueMem, String> {
        self.new_rq(port, wqes, cqn, false, opts)
    }

    fn new_rq(&self, port: usize, wqes: u32, cqn: u32, port_rss: bool, opts: RqOptions) -> Result<QueueMem, String> {
        if opts.max_sge > MAX_RQ_SGE {
            return Err(format!(
                "{} data segments per receive WQE (at most {MAX_RQ_SGE})",
                opts.max_sge
            ));
        }
        let wqe_cnt = wqes.max(1).next_power_of_two();
        // A WQE is its data segments, rounded up to a power of two (the RQ's `log_wq_stride`);
        // a striding one starts with a next segment (rdma-core `mlx5_calc_rwq_size`).
        let stride = match opts.striding {
            Some(_) => mlx5_prm::mprq::wqe_size(opts.max_sge),
            None => 16 * opts.max_sge.max(1).next_power_of_two(),
        };
        let mut d = self.dev();
        if let Some(p) = &opts.striding {
            d.cfg.striding_rq.check(p)?;
            if opts.scatter_fcs || opts.strip_cvlan {
                return Err("the model's striding RQs take no FCS scatter or VLAN stripping".into());
            }
            if stride > 16 * MAX_RQ_SGE {
                return Err(format!(
                    "a striding WQE of {} data segments is {stride} bytes, more than the device's {}",
                    opts.max_sge,
                    16 * MAX_RQ_SGE
                ));
            }
        }
        if port >= d.ports.len() {
            return Err(format!("model port {port} does not exist"));
        }
        if d.cq(cqn).is_none() {
            return Err(format!("CQ {cqn:#x} does not exist"));
        }
        let mem = Arc::new(ObjMem::new(wqe_cnt as usize * stride as usize, None)?);
        let idx = slot(
            &mut d.rqs,
            RqObj {
                mem: mem.clone(),
                wqe_cnt,
                stride,
                scatter_fcs: opts.scatter_fcs,
                strip_cvlan: opts.strip_cvlan,
                plain: stride == 16 && !opts.scatter_fcs && !opts.strip_cvlan,
                wq_num: 0,
                cqn,
                hw_ci: 0,
                posted: 0,
                error: false,
                pending_drops: 0,
                state: if port_rss { RqState::Ready } else { RqState::Reset },
                striding: opts.striding.map(|params| StridingState { params, next_stride: 0 }),
            },
        );
        let wq_num = WQN_BASE + idx as u32;
        d.rqs[idx].as_mut().expect("just inserted").wq_num = wq_num;
        if port_rss {
            d.ports[port].rqs.push(wq_num);
        }
        drop(d);
        let keep = self.handle(Obj::Rq(wq_num), mem.clone());
        Ok(QueueMem {
            raw: RawQueue {
                buf: mem.ring(),
                dbrec: mem.dbrec(),
                bf_reg: std::ptr::null_mut(),
                bf_size: 0,
                uar_page: 0,
                cnt: wqe_cnt,
                stride,
                num: wq_num,
            },
            keep,
        })
    }

    /// Moves a send queue in or out of the ready state (the QP entering RTS, or leaving it for
    /// RESET). Leaving it resets the queue to WQEBB 0, as `ibv_modify_qp(RESET)` does; `error`
    /// puts it in the error state, where later WQEs are flushed.
    pub fn set_sq_state(&self, qpn: u32, ready: bool, error: bool) -> Result<(), String> {
        let mut d = self.dev();
        let sq = d.sq_mut(qpn).ok_or_else(|| format!("no SQ {qpn:#x}"))?;
        if !ready {
            reset_sq_obj(sq);
        }
        sq.ready = ready || error;
        sq.error = error;
        Ok(())
    }

    /// Sets a receive WQ's state (`ibv_modify_wq`). RESET rewinds the WQ to WQE 0 and clears
    /// its record, as rdma-core's `mlx5_modify_wq` does before the kernel call.
    pub fn set_rq_state(&self, wq_num: u32, state: RqState) -> Result<(), String> {
        let mut d = self.dev();
        let rq = d.rq_mut(wq_num).ok_or_else(|| format!("no WQ {wq_num:#x}"))?;
        match state {
            RqState::Reset => reset_rq_obj(rq),
            RqState::Ready => rq.error = false,
            RqState::Error => rq.error = true,
        }
        rq.state = state;
        Ok(())
    }

    /// Creates a TIR spreading frames over `table` (WQ numbers; the length must be a power of
    /// two) with Toeplitz under `key` over the `IBV_RX_HASH_*` fields in `fields`. Returns its
    /// index for [`Nic::add_flow`].
    pub fn create_tir(&self, table: Vec<u32>, key: &[u8; 40], fields: u64) -> Result<usize, String> {
        if table.is_empty() || !table.len().is_power_of_two() {
            return Err(format!("indirection table of {} entries", table.len()));
        }
        let mut d = self.dev();
        if let Some(w) = table.iter().find(|&&w| d.rq_mut(w).is_none()) {
            return Err(format!("no WQ {w:#x}"));
        }
        let tir = TirObj {
            table,
            fields,
            rss: rawpkt_wire::rss::ToeplitzTable::new(key),
            td: 0,
            self_lb: 0,
        };
        Ok(slot(&mut d.tirs, tir))
    }

    /// Puts an SQ's TIS in transport domain `td` (an `ibv_context`'s, as mlx5_ib creates a raw
    /// QP's TIS with its ucontext's `tdn`).
    pub fn set_sq_domain(&self, qpn: u32, td: u32) {
        if let Some(sq) = self.dev().sq_mut(qpn) {
            sq.td = td;
        }
    }

    /// Puts a TIR in transport domain `td` with `self_lb` ([`TIR_SELF_LB_UC`],
    /// [`TIR_SELF_LB_MC`]): looped-back frames sent by a TIS of the same domain reach it only
    /// for the kinds of address those bits allow.
    pub fn set_tir_domain(&self, tir: usize, td: u32, self_lb: u8) {
        if let Some(t) = self.dev().tirs.get_mut(tir).and_then(Option::as_mut) {
            t.td = td;
            t.self_lb = self_lb;
        }
    }

    /// Turns the port's local loopback on or off (what `mlx5_nic_vport_update_local_lb` writes
    /// into the NIC vport context; off at start, as mlx5_core's `mlx5_core_set_hca_defaults`
    /// leaves an Ethernet port). On, a frame the port sends to its own MAC
    /// ([`Nic::set_port_mac`]), to a group or broadcast also comes back in on the port, and is
    /// steered like a received one, except that a TIR of the sending TIS's transport domain
    /// takes it only if its self-loopback bits allow.
    pub fn set_local_lb(&self, port: usize, on: bool) {
        if let Some(p) = self.dev().ports.get_mut(port) {
            p.local_lb = on;
            p.update_taps();
        }
    }

    /// The port's own MAC (the unicast address local loopback recognises).
    pub fn set_port_mac(&self, port: usize, mac: [u8; 6]) {
        if let Some(p) = self.dev().ports.get_mut(port) {
            p.mac = Some(mac);
        }
    }

    /// Whether the port's local loopback is on.
    pub fn local_lb(&self, port: usize) -> bool {
        self.dev().ports.get(port).is_some_and(|p| p.local_lb)
    }

    /// Destroys a TIR; flows still pointing at it stop delivering.
    pub fn destroy_tir(&self, tir: usize) {
        let mut d = self.dev();
        if let Some(t) = d.tirs.get_mut(tir) {
            *t = None;
        }
        for p in &mut d.ports {
            if let Some(st) = p.steering.as_mut() {
                st.flows.retain(|f| f.2 != tir);
                st.special.retain(|f| f.2 != tir);
                st.rebuild();
            }
            p.update_taps();
        }
    }

    /// Puts the port behind flow steering (the model library's devices): from now on only
    /// flows deliver to its queues, and what no flow steals goes to Linux.
    pub fn enable_steering(&self, port: usize) {
        let mut d = self.dev();
        let reverse_groups = d.cfg.knobs.flow_groups_reverse;
        if let Some(p) = d.ports.get_mut(port) {
            p.steering.get_or_insert_with(|| Steering {
                reverse_groups,
                ..Steering::default()
            });
        }
    }

    /// Installs a flow on a steered port, delivering to `tir`; returns its id.
    pub fn add_flow(&self, port: usize, rule: rawpkt_wire::rule::FlowRule, tir: usize) -> Result<u64, String> {
        rule.validate().map_err(|e| e.to_string())?;
        let mut d = self.dev();
        let id = d.next_flow;
        let st = d.steering_to(port, tir)?;
        if st.flows.len() == rawpkt_wire::matcher::MAX_RULES {
            return Err(format!("port {port} holds {} flows already", st.flows.len()));
        }
        st.flows.push((id, rule, tir));
        st.rebuild();
        d.next_flow += 1;
        Ok(id)
    }

    /// Installs a sniffer or leftovers flow on a steered port, delivering to `tir`; returns its
    /// id. Every such flow gets its copy: a second rule of the same (empty or fixed) match in
    /// the kernel's table joins the first one's entry as one more destination.
    pub fn add_special_flow(&self, port: usize, kind: SpecialFlow, tir: usize) -> Result<u64, String> {
        let mut d = self.dev();
        let id = d.next_flow;
        let st = d.steering_to(port, tir)?;
        if st.special.len() == rawpkt_wire::matcher::MAX_RULES {
            return Err(format!("port {port} holds {} such flows already", st.special.len()));
        }
        st.special.push((id, kind, tir));
        d.ports[port].update_taps();
        d.next_flow += 1;
        Ok(id)
    }

    /// Gives a steered port's netdev the unicast address its L2 table holds: from then on it
    /// takes only frames to that address, broadcast and the groups Linux joins
    /// (`Steering::netdev_accepts`), and the rest goes to the leftovers rules or is dropped.
    /// `None` (the default): the netdev takes every frame no rule stole, as a promiscuous one.
    pub fn set_netdev_filter(&self, port: usize, mac: Option<[u8; 6]>) {
        if let Some(st) = self.dev().ports.get_mut(port).and_then(|p| p.steering.as_mut()) {
            st.netdev_mac = mac;
        }
    }

    /// Sets a knob ([`profile::KNOBS`], `name=value`) while the NIC runs: from the next WQE,
    /// frame or completion on. The clock is the NIC's from its making (its format and rate are
    /// what the driver decided by), so `clock` is refused; `link` sets every port's link
    /// ([`Nic::set_link`]); `ext_strides` changes the caps new WQs are made against.
    pub fn set_knob(&self, item: &str) -> Result<(), String> {
        let mut k = self.config().knobs;
        k.set(item)?;
        let mut d = self.dev();
        if k.clock != d.cfg.knobs.clock {
            return Err(format!(
                "model knob {item}: the clock is fixed when the NIC is made (RAWPKT_MODEL_KNOBS, the profile)"
            ));
        }
        let link_changed = k.link != d.cfg.knobs.link;
        d.cfg.knob(item)?;
        if let profile::Zip::Irregular(seed) = k.zip {
            d.rng = seed ^ 0x9e37_79b9_7f4a_7c15;
        }
        let reverse = k.flow_groups_reverse;
        drop(d);
        self.set_flow_groups_reverse(reverse);
        if link_changed {
            for port in 0..self.ports() {
                self.set_link(port, k.link);
            }
        }
        Ok(())
    }

    /// Searches the flow groups of one priority last-created first (`reverse`) or in creation
    /// order, on every steered port from now on (the `flow_groups` knob at run time).
    pub fn set_flow_groups_reverse(&self, reverse: bool) {
        let mut d = self.dev();
        d.cfg.knobs.flow_groups_reverse = reverse;
        for p in &mut d.ports {
            if let Some(st) = p.steering.as_mut() {
                st.reverse_groups = reverse;
                st.rebuild();
            }
        }
    }

    /// Removes a flow; false when no port has it.
    pub fn remove_flow(&self, id: u64) -> bool {
        let mut d = self.dev();
        for p in &mut d.ports {
            if let Some(st) = p.steering.as_mut() {
                if let Some(i) = st.special.iter().position(|f| f.0 == id) {
                    st.special.remove(i);
                    p.update_taps();
                    return true;
                }
                if let Some(i) = st.flows.iter().position(|f| f.0 == id) {
                    st.flows.remove(i);
                    st.rebuild();
                    return true;
                }
            }
        }
        false
    }

    /// Flows installed on a port.
    pub fn flows(&self, port: usize) -> usize {
        self.dev()
            .ports
            .get(port)
            .and_then(|p| p.steering.as_ref())
            .map_or(0, |s| s.flows.len() + s.special.len())
    }

    fn handle(&self, obj: Obj, mem: Arc<ObjMem>) -> Arc<dyn std::any::Any + Send + Sync> {
        Arc::new(ObjHandle {
            dev: Arc::downgrade(&self.dev),
            obj,
            _mem: mem,
        })
    }

    /// The device's configuration (its send-path capabilities among it).
    pub fn config(&self) -> ModelConfig {
        self.dev().cfg.clone()
    }

    /// Sets what port `port`'s send WQEs must inline (a vport context's `min_wqe_inline_mode`),
    /// checked from the next WQE on.
    pub fn set_inline_mode(&self, port: usize, mode: InlineMode) {
        if let Some(p) = self.dev().ports.get_mut(port) {
            p.inline_mode = mode;
        }
    }

    /// A fatal error of port `port`'s device (what raises `IBV_EVENT_DEVICE_FATAL`) with
    /// `dead`: from now on it executes nothing and receives nothing, so no buffer is written or
    /// read again. Without: the device is back, as after the kernel's health recovery.
    pub fn set_dead(&self, port: usize, dead: bool) {
        let mut d = self.dev();
        if let Some(p) = d.ports.get_mut(port) {
            let was = std::mem::replace(&mut p.dead, dead);
            if dead && !was {
                d.emit(DeviceEvent::DeviceFatal { port });
            }
        }
    }

    /// What port `port`'s send WQEs must inline.
    pub fn inline_mode(&self, port: usize) -> InlineMode {
        let d = self.dev();
        d.ports.get(port).map_or(d.cfg.inline_mode, |p| p.inline_mode)
    }

    /// Resets a send queue to WQEBB 0, discarding whatever was posted (`ibv_modify_qp` to RESET
    /// and back to RTS).
    pub fn reset_sq(&self, qpn: u32) -> Result<(), String> {
        let mut d = self.dev();
        let sq = d.sq_mut(qpn).ok_or_else(|| format!("no SQ {qpn:#x}"))?;
        reset_sq_obj(sq);
        d.trace_event(format_args!("RESET-SQ qpn={qpn:#x}"));
        Ok(())
    }

    /// Resets a receive WQ to WQE 0, discarding whatever was posted (`ibv_modify_wq` to RESET
    /// and back to RDY).
    pub fn reset_rq(&self, wq_num: u32) -> Result<(), String> {
        let mut d = self.dev();
        // Completions the device holds for compression are written before the reset returns.
        d.flush_held();
        let rq = d.rq_mut(wq_num).ok_or_else(|| format!("no WQ {wq_num:#x}"))?;
        reset_rq_obj(rq);
        d.trace_event(format_args!("RESET-RQ wqn={wq_num:#x}"));
        Ok(())
    }

    /// Runs the device once: doorbells, WQEs, frames arriving on the wires. Returns the work
    /// done (WQEs executed + frames received), 0 when idle.
    pub fn step(&self) -> usize {
        self.dev().step()
    }

    /// Starts the device's own loop on a thread (pinned to `core` when given), as a NIC that
    /// polls its doorbells. Stopped when the NIC is dropped.
    pub fn start(&self, core: Option<usize>) {
        let mut t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_some() {
            return;
        }
        {
            let mut d = self.dev();
            // The driver writes the record before the UAR; give a running device slack.
            d.cfg.missing_doorbell_polls = d.cfg.missing_doorbell_polls.max(1 << 20);
            d.cfg.strict_doorbell = false;
        }
        let dev = self.dev.clone();
        let stop = self.stop.clone();
        *t = Some(std::thread::spawn(move || {
            if let Some(core) = core.filter(|&c| !rawpkt_sys::pin_current_thread(c)) {
                log::warn!("the model NIC's thread could not be pinned to CPU {core} (not in this process's cpuset?); it runs unpinned");
            }
            let mut idle = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let work = {
                    let mut d = lock(&dev);
                    let work = d.step();
                    if !d.published.is_empty() {
                        d.publish(work == 0);
                    }
                    work
                };
                if work > 0 {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                    if idle > 200_000 {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    } else if idle > 2_000 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }));
    }

    /// Makes the device's own loop ([`Nic::start`]) keep the file at `path` showing `port`'s
    /// [`PortCounters::rx_out_of_buffer`] as a decimal line, the way the kernel shows a port's
    /// `hw_counters/out_of_buffer` in sysfs: exact whenever the device is idle.
    pub fn publish_out_of_buffer(&self, port: usize, path: impl Into<std::path::PathBuf>) {
        let mut d = self.dev();
        let path = path.into();
        let written = d.ports.get(port).map_or(0, |p| p.counters.rx_out_of_buffer);
        if std::fs::write(&path, format!("{written}\n")).is_ok() {
            d.published.push(Published {
                port,
                path,
                written,
                at: Instant::now(),
            });
        }
    }

    /// Makes `event` happen, as the firmware would: a CQ enters the error state and writes
    /// nothing more; a WQ drops what is steered to it; a QP's SQ runs nothing; a port's link
    /// goes down or up; then every listener ([`Nic::on_event`]) hears it. False for an object
    /// or port that does not exist.
    pub fn raise(&self, event: DeviceEvent) -> bool {
        self.dev().raise(event)
    }

    /// Adds a listener that hears every event the device raises from now on (an overrun CQ
    /// under `cq_overrun=error`, [`Nic::raise`], a link or MTU change).
    pub fn on_event(&self, listener: EventListener) {
        self.dev().listeners.push(listener);
    }

    /// Sets port `port`'s link ([`profile::LinkMode`]); raises PORT_ERR / PORT_ACTIVE where the
    /// link goes down or comes up.
    pub fn set_link(&self, port: usize, mode: profile::LinkMode) {
        let mut d = self.dev();
        let Some(p) = d.ports.get_mut(port) else { return };
        let was_down = p.link_mode == profile::LinkMode::Down;
        p.link_mode = mode;
        p.pause_until = None;
        let down = mode == profile::LinkMode::Down;
        if down != was_down {
            d.emit(if down {
                DeviceEvent::PortDown { port }
            } else {
                DeviceEvent::PortUp { port }
            });
        }
    }

    /// Sets port `port`'s MTU: from the next WQE on it sends and takes frames of up to
    /// `mtu` + 18 bytes (Ethernet header, a VLAN tag, as `max_frame` counts them), as the port
    /// MTU register (PMTU) mlx5e sets in `mlx5e_change_mtu` would; listeners hear
    /// [`DeviceEvent::Mtu`].
    pub fn set_mtu(&self, port: usize, mtu: u32) {
        let mut d = self.dev();
        if let Some(p) = d.ports.get_mut(port) {
            p.max_frame = mtu as usize + 18;
            d.emit(DeviceEvent::Mtu { port, mtu });
        }
    }

    /// The largest frame port `port` sends or takes now.
    pub fn max_frame(&self, port: usize) -> usize {
        let d = self.dev();
        d.ports.get(port).map_or(d.cfg.max_frame, |p| p.max_frame)
    }

    pub fn inject(&self, port: usize, fault: Fault) {
        if let Some(p) = self.dev().ports.get_mut(port) {
            p.faults.push_back(fault);
        }
    }

    pub fn port_counters(&self, port: usize) -> PortCounters {
        let mut d = self.dev();
        let Some(p) = d.ports.get_mut(port) else {
            return PortCounters::default();
        };
        if let Link::AfPacket(sock) = &mut p.link {
            p.counters.rx_wire_drops += sock.kernel_drops();
        }
        p.counters
    }

    pub fn counters(&self) -> DeviceCounters {
        self.dev().counters
    }

    /// Queue objects and MRs still alive (0 after a clean teardown).
    pub fn live_objects(&self) -> usize {
        let d = self.dev();
        let n = |v: usize| v;
        n(d.sqs.iter().flatten().count())
            + d.rqs.iter().flatten().count()
            + d.cqs.iter().flatten().count()
            + d.mrs.iter().flatten().count()
            + d.tirs.iter().flatten().count()
    }

    pub fn ports(&self) -> usize {
        self.dev().ports.len()
    }

    /// Delivers `frame` to `port` as if it arrived on the port's wire.
    pub fn inject_frame(&self, port: usize, frame: &[u8]) {
        let mut slot = exec::Piece::default();
        let mut d = self.dev();
        d.deliver(port, &exec::Frame::of_slice(frame, &mut slot));
        d.flush_held();
    }

    /// Takes the frames a `Link::Capture` port has sent so far.
    pub fn take_captured(&self, port: usize) -> Vec<Vec<u8>> {
        match self.dev().ports.get_mut(port).map(|p| &mut p.link) {
            Some(Link::Capture(q)) => q.drain(..).collect(),
            _ => Vec::new(),
        }
    }

    /// Writes an arbitrary CQE (owner bit set for its slot) as a broken device would: for testing
    /// that a driver survives whatever the rings contain.
    pub fn inject_cqe(&self, cqn: u32, cqe: &[u8; 64]) -> bool {
        let mut d = self.dev();
        let ok = d.write_cqe(cqn, cqe);
        d.flush_held();
        ok
    }

    /// The 64 bytes of slot `i` of CQ `cqn`, as they are now (for tests and debugging).
    pub fn cq_slot(&self, cqn: u32, i: u32) -> Option<[u8; 64]> {
        let d = self.dev();
        let cq = d.cq(cqn)?;
        let mut out = [0u8; 64];
        let at = cq.mem.ring().wrapping_add(((i & (cq.cqe_cnt - 1)) as usize) * 64);
        // SAFETY: the slot lies inside this live CQ's ring.
        unsafe { dma::read(at, &mut out) };
        Some(out)
    }

    /// Flushes the trace file.
    pub fn flush_trace(&self) {
        if let Some(t) = self.dev().trace.as_mut() {
            t.flush();
        }
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        self.flush_trace();
    }
}

fn unsafe_stamp(slot: *mut u8, v: u8) {
    // SAFETY: callers pass a slot inside a CQ ring they own; see `dma::stamp_op_own`.
    unsafe { dma::stamp_op_own(slot, v) }
}

enum Obj {
    Sq(u32),
    Rq(u32),
    Cq(u32),
}

/// Keeps an object's ring memory alive for the driver, and destroys the object (as
/// `ibv_destroy_qp`/`_wq`/`_cq` would) when the driver lets go.
struct ObjHandle {
    dev: Weak<Mutex<Device>>,
    obj: Obj,
    _mem: Arc<ObjMem>,
}

impl Drop for ObjHandle {
    fn drop(&mut self) {
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        let mut d = lock(&dev);
        match self.obj {
            Obj::Sq(qpn) => {
                if let Some(s) = d.sqs.get_mut((qpn - QPN_BASE) as usize) {
                    *s = None;
                }
            }
            Obj::Rq(wq) => {
                if let Some(s) = d.rqs.get_mut((wq - WQN_BASE) as usize) {
                    *s = None;
                }
                for p in &mut d.ports {
                    p.rqs.retain(|&w| w != wq);
                }
            }
            Obj::Cq(cqn) => {
                if let Some(s) = d.cqs.get_mut((cqn - CQN_BASE) as usize) {
                    *s = None;
                }
                // Late flush CQEs for it have nowhere to go (and must not reach a new CQ that
                // takes its number).
                d.late.retain(|l| l.cqn != cqn);
            }
        }
    }
}

// SAFETY: ObjMem is ring memory whose access is governed by the doorbell/owner protocol in
// `ring`; the raw addresses it hands out are only dereferenced under that protocol.
unsafe impl Send for ObjMem {}
// SAFETY: as above.
unsafe impl Sync for ObjMem {}

fn reset_sq_obj(sq: &mut SqObj) {
    sq.hw_ci = 0;
    sq.error = false;
    sq.fatal = false;
    sq.flushes = 0;
    sq.put_back = None;
    sq.unrung_polls = 0;
    // SAFETY: the dbrec and UAR words belong to this live SQ; a reset drops a pending UAR
    // write and zeroes the record (the driver zeroes its record too).
    unsafe {
        for reg in sq.mem.bf_halves() {
            exec::take_uar(reg);
        }
        dma::store_dbrec(sq.mem.dbrec().wrapping_add(mlx5_prm::SND_DBR), 0);
    }
}

fn reset_rq_obj(rq: &mut RqObj) {
    rq.hw_ci = 0;
    rq.posted = 0;
    rq.error = false;
    rq.pending_drops = 0;
    if let Some(s) = rq.striding.as_mut() {
        s.next_stride = 0;
    }
    // SAFETY: the record word belongs to this live RQ.
    unsafe {
        dma::store_dbrec(rq.mem.dbrec(), 0);
    }
}

/// One queue the device created: where its memory is, and what keeps that memory (and the
/// object) alive. Dropping the last `keep` destroys the object, as `ibv_destroy_qp`/`_wq`/`_cq`
/// would.
pub struct QueueMem {
    pub raw: RawQueue,
    pub keep: Arc<dyn std::any::Any + Send + Sync>,
}

/// A UAR page of the device held by a user ([`Nic::alloc_uar`]).
pub struct UarHandle(uar::UarPage);

impl UarHandle {
    /// Where the page is mapped in this process.
    pub fn base(&self) -> *mut u8 {
        self.0.base()
    }

    /// The page's index in the UAR file: its mmap offset is `index * UAR_PAGE`.
    pub fn index(&self) -> u32 {
        self.0.index()
    }
}

/// The addresses and geometry of a queue's memory, as C code receives them from
/// `mlx5dv_init_obj` (`struct mlx5dv_qp`/`mlx5dv_cq`/`mlx5dv_rwq` in rdma-core's mlx5dv.h).
#[derive(Clone, Copy, Debug)]
pub struct RawQueue {
    pub buf: *mut u8,
    pub dbrec: *mut u32,
    /// SQs: the UAR doorbell register (`mlx5dv_qp.bf.reg`); null for other queues.
    pub bf_reg: *mut u8,
    pub bf_size: u32,
    /// SQs: the index of `bf_reg`'s page in the UAR file ([`Nic::uar_fd`]); 0 for others.
    pub uar_page: u32,
    /// Entries: WQEBBs, WQEs or CQEs.
    pub cnt: u32,
    /// Bytes per entry.
    pub stride: u32,
    /// QPN, CQN or WQ number.
    pub num: u32,
}

impl Device {
    fn cq(&self, cqn: u32) -> Option<&CqObj> {
        self.cqs.get(cqn.wrapping_sub(CQN_BASE) as usize)?.as_ref()
    }
    fn sq_mut(&mut self, qpn: u32) -> Option<&mut SqObj> {
        self.sqs.get_mut(qpn.wrapping_sub(QPN_BASE) as usize)?.as_mut()
    }
    /// The flow table of steered port `port`, for a flow that delivers to TIR `tir`.
    fn steering_to(&mut self, port: usize, tir: usize) -> Result<&mut Steering, String> {
        if self.tirs.get(tir).and_then(Option::as_ref).is_none() {
            return Err(format!("no TIR {tir}"));
        }
        self.ports
            .get_mut(port)
            .and_then(|p| p.steering.as_mut())
            .ok_or_else(|| format!("port {port} has no flow steering"))
    }
    fn rq_mut(&mut self, wq: u32) -> Option<&mut RqObj> {
        self.rqs.get_mut(wq.wrapping_sub(WQN_BASE) as usize)?.as_mut()
    }
    /// The device clock: read at most once per step and doorbell (`exec.rs`, `process_sq`), so
    /// the completions of one poll cycle share a timestamp (a clock read per CQE would cost more
    /// than the rest of the CQE), and an idle step reads no clock at all.
    fn now_ns(&mut self) -> u64 {
        self.now().0
    }
    /// The device clock as CQEs carry it (`DevClock::stamp`): the step's reading.
    fn now_stamp(&mut self) -> u64 {
        self.now().1
    }
    /// See [`Nic::raise`].
    fn raise(&mut self, event: DeviceEvent) -> bool {
        match event {
            DeviceEvent::CqError { cqn } => match exec::cq_of(&mut self.cqs, cqn) {
                Some(cq) => cq.error = true,
                None => return false,
            },
            DeviceEvent::WqFatal { wqn } => match self.rq_mut(wqn) {
                Some(rq) => rq.error = true,
                None => return false,
            },
            DeviceEvent::QpFatal { qpn } => match self.sq_mut(qpn) {
                Some(sq) => sq.fatal = true,
                None => return false,
            },
            DeviceEvent::PortDown { port }
            | DeviceEvent::PortUp { port }
            | DeviceEvent::Mtu { port, .. }
            | DeviceEvent::DeviceFatal { port } => {
                if port >= self.ports.len() {
                    return false;
                }
            }
        }
        self.emit(event);
        true
    }

    /// Tells every listener, and the trace.
    fn emit(&mut self, event: DeviceEvent) {
        match event {
            DeviceEvent::CqError { cqn } => self.trace_event(format_args!("CQ-ERROR cqn={cqn:#x}")),
            DeviceEvent::WqFatal { wqn } => self.trace_event(format_args!("WQ-FATAL wqn={wqn:#x}")),
            DeviceEvent::QpFatal { qpn } => self.trace_event(format_args!("QP-FATAL qpn={qpn:#x}")),
            DeviceEvent::PortDown { port } => self.trace_event(format_args!("LINK port={port} state=down")),
            DeviceEvent::PortUp { port } => self.trace_event(format_args!("LINK port={port} state=up")),
            DeviceEvent::Mtu { port, mtu } => self.trace_event(format_args!("MTU port={port} mtu={mtu}")),
            DeviceEvent::DeviceFatal { port } => self.trace_event(format_args!("DEVICE-FATAL port={port}")),
        }
        self.listeners.retain(|l| l(&event));
    }

    fn now(&mut self) -> (u64, u64) {
        *self.now.get_or_insert_with(|| {
            let ns = self.clock.ns();
            (ns, self.clock.stamp(ns))
        })
    }
}
