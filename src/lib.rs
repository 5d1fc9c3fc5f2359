//! rawpkt: userspace packet I/O in the style of VPP's native mlx5 driver.
//!
//! A [`Port`] is opened from a spec string ([`open()`]); each pinned loop builds its own [`Pool`]
//! and asks the port for an [`RxQueue`] and a [`TxQueue`] over it; packets move in [`Burst`]es
//! that own their buffers. Every backend implements the same two traits:
//!
//! | spec | port |
//! |---|---|
//! | `model:NAME/P` | port P (0 or 1) of a software ConnectX named NAME whose two ports are back to back (feature `model`) |
//! | `model:afpacket=IFNAME` | a one-port model NIC wired to the Linux interface IFNAME |
//! | `mlx5:NETDEV`, `mlx5:mlx5_0/1` | a ConnectX-4 or later through rdma-core: raw-packet queues on the Direct Verbs datapath, flow rules steering what they name while the netdev keeps the rest (feature `mlx5`) |
//! | `verbs:NETDEV`, `verbs:mlx5_0/1` | the same port on the ibverbs datapath |
//! | `xdp:IFNAME[/QUEUE][,rule=RULE]…[,netns=NS][,mode=native\|generic][,bind=copy\|zerocopy]` | AF_XDP sockets on an interface's queues (feature `xdp`) |
//!
//! # A first program
//!
//! Numbered frames from one port of the model NIC to the other, each checked on arrival (the
//! `library` example is this program with its error handling):
//!
// The example runs on the model: a build without it only compiles the example.
#![cfg_attr(feature = "model", doc = "```")]
#![cfg_attr(not(feature = "model"), doc = "```no_run")]
//! use rawpkt::{open, Burst, Pool, PoolConfig, QueueConfig};
//! // Broadcast, from a local MAC, EtherType 0x88b5 (IEEE local experimental).
//! const HEADER: [u8; 14] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
//! let (a, b) = (open("model:first/0").unwrap(), open("model:first/1").unwrap());
//! let q = QueueConfig::default().size(4096);
//! let pool = Pool::new(PoolConfig::default().buffers(16384)).unwrap();
//! let mut tx = a.tx_queue(0, &pool, &q).unwrap();
//! let mut rx = b.rx_queue(0, &pool, &q).unwrap();
//! let (mut out, mut got) = (Burst::new(&pool, 32), Burst::new(&pool, 32));
//! let (mut sent, mut received) = (0u64, 0u64);
//! while received < 100_000 {
//!     // Never more frames on the way than the receive ring holds.
//!     while sent < 100_000 && sent - received < 2048 && out.room() > 0 {
//!         out.alloc(1, 60);
//!         let f = out.data_mut(out.len() - 1);
//!         f[..14].copy_from_slice(&HEADER);
//!         f[14..22].copy_from_slice(&sent.to_be_bytes());
//!         sent += 1;
//!     }
//!     tx.tx_burst(&mut out).unwrap(); // what did not fit stays in `out`
//!     // Drain the receive queue before sending more.
//!     while rx.rx_burst(&mut got).unwrap() > 0 {
//!         for i in 0..got.len() {
//!             assert_eq!(got.data(i)[14..22], received.to_be_bytes());
//!             received += 1;
//!         }
//!         got.clear(); // buffers back to the pool
//!     }
//! }
//! assert_eq!((rx.stats().drops, b.device_drops()), (0, Some(0)));
//! ```
//!
//! # What a loop must do
//!
//! - **Size the receive ring for what can be on the way.** A device drops a frame that finds no
//!   posted buffer ([`Port::device_drops`], [`QueueStats::drops`]). The receive ring must hold
//!   what a sender can have in flight towards it between two polls: at least the sender's burst
//!   times the polls it may miss, and, where the sender is ours, a window of frames sent and not
//!   yet received no larger than the ring. The default ring is 1024; 4096 suits a sender that
//!   runs ahead.
//! - **Drain, then send.** Call `rx_burst` until it returns 0 before the next send burst; one
//!   receive burst per send burst falls behind as soon as the device delivers in steps.
//! - **Give the pool enough buffers**: each queue keeps its ring posted or in flight, and each
//!   burst holds its packets ([`Port::buffers_pinned`] says how many a queue pair takes).
//! - **One pool, one queue pair, one thread per core.** A `Pool` is not `Send`; open the port
//!   once and share it, and let each pinned loop ([`cpu::pin`]) build its own pool and queues
//!   (the `multicore` example).
//!
//! # Warnings and errors
//!
//! Opening and configuring return [`Error`]s of one line, whose [`ErrorKind`] says whether the
//! caller's input was wrong. What the library chooses silently on the caller's behalf it reports
//! through the `log` crate (`warn!`): a pool on 4 KiB pages for want of hugepages
//! ([`Pool::page_kind`] says it too), a device without the Direct Verbs datapath. A program with
//! no logger installed can read the same facts from [`Pool::page_kind`] and
//! [`Port::description`].
//!
//! # Features
//!
//! `model`, `mlx5` and `xdp` (the backends, on by default) and `internals` (the Direct Verbs
//! datapath's parts, for rawpkt's own tests and benchmark: not a stable API). The library's
//! dependencies are `libc` and `log` and the workspace's own crates; the tools (pktgen,
//! l2-xconnect, rx-sink) and their command-line dependencies are the `rawpkt-tools` crate.
#![deny(unsafe_code)]
#![deny(missing_docs)]
// What is not the public API is `pub(crate)`, so the compiler sees dead code (CI denies it). The
// DV parts `internals` exports are `pub`: the lint runs where they are reachable.
#![cfg_attr(feature = "internals", warn(unreachable_pub))]
// A build without any backend has the common parts only (CI builds it, to keep them free of
// every backend); what only backends use is unused there.
#![cfg_attr(
    not(any(feature = "model", feature = "mlx5", feature = "xdp")),
    allow(dead_code, unused_imports)
)]

/// Builder methods for a config struct, one per field: `T::default().field(value)`, so that a
/// `#[non_exhaustive]` config can be built outside the crate and gain fields without breaking it.
macro_rules! setters {
    ($t:ty { $($field:ident: $ty:ty),* $(,)? }) => {
        impl $t {
            $(
                #[doc = concat!("This value with [`", stringify!($field), "`](Self::", stringify!($field), ") set to `value`.")]
                #[must_use]
                pub fn $field(mut self, value: $ty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

#[cfg(any(feature = "model", feature = "mlx5"))]
mod dv;
mod error;
mod failure;
pub mod flow;
mod mem;
#[cfg(feature = "mlx5")]
pub mod mlx5;
#[cfg(feature = "model")]
pub mod model;
mod open;
mod rx;
mod spec;
mod stats;
#[cfg(any(feature = "mlx5", feature = "xdp"))]
use rawpkt_sys as sys;
use rawpkt_wire::text;
mod tx;
#[cfg(feature = "xdp")]
mod xdp;
#[cfg(feature = "xdp")]
mod xsk;

use std::rc::Rc;

pub use error::{Error, ErrorKind};
pub use failure::{Failure, FailureKind};
pub use mem::pool::{flags, Burst, Packet, Pool, PoolConfig, TakeError};
pub use open::{open, open_with};
pub use rawpkt_sys::region::PageKind;
pub use spec::{DefaultRules, LibPaths, ModelOptions, Port, PortIdentity, PortOptions};
pub use stats::{ErrorCounts, QueueStats};

/// The Direct Verbs datapath's parts, for rawpkt's own tests and benchmark (feature
/// `internals`): DV queues built over raw rings, the ring views, and the model's queues described
/// for the driver. Not a stable API: a program opens ports with [`open()`] and asks them for
/// queues.
#[cfg(feature = "internals")]
pub mod internals {
    pub use crate::dv::ring;
    pub use crate::dv::{attention, AttentionWord, DvCaps, DvControl, TickClock};
    pub use crate::model::port::{dv_caps, NicQueues};
    pub use crate::rx::dv::DvRxQueue;
    pub use crate::rx::dv_striding::{params_for, DvStridingRxQueue, STRIDES_LOG};
    pub use crate::tx::dv::{DvTxQueue, MAX_TX_INLINE};

    /// The memory region behind a pool, for a model NIC to register (`Nic::register_mr`).
    pub fn pool_region(pool: &crate::Pool) -> &std::sync::Arc<rawpkt_sys::region::Region> {
        pool.region()
    }
}

/// The CPUs a pinned loop may run on, and pinning to one: a queue pair's loop belongs on a CPU of
/// its own, as VPP's and DPDK's workers are.
///
/// ```
/// let cpus = rawpkt::cpu::allowed();
/// assert!(!cpus.is_empty());
/// assert!(rawpkt::cpu::pin(cpus[0]));
/// assert!(!rawpkt::cpu::pin(usize::MAX));
/// ```
pub mod cpu {
    /// The CPUs the calling thread may run on (its affinity mask), ascending; empty if the
    /// kernel will not say.
    pub fn allowed() -> Vec<usize> {
        rawpkt_sys::allowed_cpus()
    }

    /// Pins the calling thread to `cpu`; false if the kernel refused or `cpu` is no CPU of the
    /// machine.
    pub fn pin(cpu: usize) -> bool {
        rawpkt_sys::pin_current_thread(cpu)
    }
}

/// Errors of the data path, returned by bursts. Everything else (drops, pool exhaustion,
/// completion errors that were recovered) is counted in [`QueueStats`] instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue hit a completion error it could not recover from (or recovery is off): what
    /// kind, and the device's code for it. The queue's buffers are back in the pool.
    Failed(Failure),
    /// The burst's buffers belong to another pool; nothing was done.
    ForeignPool,
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`) and stopped; the queue's
    /// buffers are back in the pool.
    DeviceFatal,
    /// The queue's device is gone (its interface deleted: `errno` ENXIO) or down (ENETDOWN), so
    /// the queue can move nothing more; it has failed, as on a completion error it cannot
    /// recover from. The buffers the kernel held come back when the queue is dropped.
    DeviceGone {
        /// ENXIO (the interface was deleted) or ENETDOWN (it is down).
        errno: i32,
    },
}

impl std::fmt::Display for QueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueError::Failed(failure) => write!(f, "queue failed: {failure}"),
            QueueError::ForeignPool => write!(f, "the burst's buffers belong to another pool"),
            QueueError::DeviceFatal => write!(
                f,
                "the device reported a fatal error and stopped (IBV_EVENT_DEVICE_FATAL)"
            ),
            QueueError::DeviceGone { errno } => {
                let what = if *errno == libc::ENETDOWN {
                    "its interface is down or being deleted"
                } else {
                    "its interface is gone (deleted)"
                };
                write!(
                    f,
                    "queue failed: {what} ({})",
                    std::io::Error::from_raw_os_error(*errno)
                )
            }
        }
    }
}

impl std::error::Error for QueueError {}

/// Per-queue settings.
///
/// ```
/// use rawpkt::QueueConfig;
/// let q = QueueConfig::default().size(4096).rx_timestamps(true);
/// assert_eq!((q.size, q.rx_mode()), (4096, "compressed"));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct QueueConfig {
    /// Descriptors in the ring (a power of two).
    pub size: u32,
    /// Frames up to this many bytes are copied whole into the send WQE. With 0, a ConnectX-4
    /// inlines only the 18-byte L2 header (as VPP does) and a ConnectX-5 inlines nothing
    /// (enhanced multi-packet send).
    pub tx_inline: u16,
    /// Ask for a send completion at least every this many packets (and at the end of each
    /// burst).
    pub tx_completion_every: u32,
    /// Recover a queue after a completion error (as DPDK does) instead of failing it (as VPP
    /// does).
    pub recover: bool,
    /// Report the NIC's receive timestamp per packet (`flags::TIMESTAMP`), in ns of the device's
    /// clock (see [`Packet::timestamp`](crate::mem::pool::Packet::timestamp)). Off by default, like
    /// DPDK's timestamp offload: it costs a load and a store per packet that most loops never read.
    pub rx_timestamps: bool,
    /// `xdp:` ports in copy mode: the most frames one wake-up (`sendto`) sends, capped at `size`
    /// (the socket option `XDP_MAX_TX_SKB_BUDGET`, Linux 6.17+; older kernels keep their 32).
    /// From 32; the default 256 lets one call send what a burst posted. Other backends ignore it.
    pub xdp_tx_budget: u32,
    /// Receive on a striding (multi-packet) RQ: the device fetches one receive WQE per 8 or 16
    /// frames (strides of one pool buffer each) instead of one per frame, which saves PCIe
    /// descriptor reads at small frames (DPDK's `mprq_en`, VPP's striding mode). mlx5 Direct
    /// Verbs (and model) ports only, on devices that have it (ConnectX-5 and later); asked
    /// where the device has none, opening the queue fails with one line saying so. Off by
    /// default, as in DPDK: the cyclic RQ works on every device, and on the CPU side the two cost
    /// about the same (`docs/benchmarks.md`).
    pub rx_striding: bool,
    /// Largest frame a receive queue takes, in bytes; a frame longer than one buffer's data room
    /// arrives chained over several buffers ([`Packet::is_chained`]). 0: one buffer (frames
    /// longer than the pool's data room are dropped by the device). On `mlx5:` and `model:`
    /// ports the receive WQEs get `ceil(rx_max_frame / data room)` data segments.
    pub rx_max_frame: u32,
    /// Ask the NIC to strip a frame's 802.1Q tag and report it per packet
    /// ([`flags::VLAN_STRIPPED`], [`Packet::vlan_tci`]). Off by default; refused with one line
    /// where the device cannot (`IBV_RAW_PACKET_CAP_CVLAN_STRIPPING`).
    pub rx_vlan_strip: bool,
    /// Receive CQs compress completions (mlx5 DV and `model:` ports): the device may write a
    /// title CQE and arrays of 8-byte mini-CQEs for several packets instead of a 64-byte CQE
    /// each, halving what it writes over PCIe at small frames. On by default, as DPDK's
    /// `rxq_cqe_comp_en`; off by itself where timestamps are asked for (mini-CQEs carry none) or
    /// the device's `cqe_comp_caps` lack the hash format. Send CQs never compress.
    pub rx_cqe_compression: bool,
    /// The Direct Verbs burst paths run their builds for the CPU's MOVBE and AVX2 where it has
    /// them (detected once per queue). False keeps the portable builds, as DPDK's
    /// `--force-max-simd-bitwidth=64`: to compare them on one machine (`scripts/callgrind.sh
    /// --portable`) or to rule the vector code out. On by default.
    pub cpu_vector: bool,
}

setters!(QueueConfig {
    size: u32,
    tx_inline: u16,
    tx_completion_every: u32,
    recover: bool,
    rx_timestamps: bool,
    xdp_tx_budget: u32,
    rx_striding: bool,
    rx_max_frame: u32,
    rx_vlan_strip: bool,
    rx_cqe_compression: bool,
    cpu_vector: bool,
});

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            size: 1024,
            tx_inline: 0,
            tx_completion_every: 32,
            recover: true,
            rx_timestamps: false,
            xdp_tx_budget: 256,
            rx_striding: false,
            rx_max_frame: 0,
            rx_vlan_strip: false,
            rx_cqe_compression: true,
            cpu_vector: true,
        }
    }
}

/// Receive modes by name: the one naming of the two fields that choose a receive queue's kind,
/// shared by pktgen's `--rx-mode`, the `dv_burst` bench's and `scripts/callgrind.sh --json`'s
/// `rx_mode`.
impl QueueConfig {
    /// Every receive mode: (name, `rx_striding`, `rx_cqe_compression`).
    pub const RX_MODES: [(&'static str, bool, bool); 4] = [
        ("cyclic", false, false),
        ("compressed", false, true),
        ("striding", true, false),
        ("striding+compressed", true, true),
    ];

    /// This configuration with `rx_striding` and `rx_cqe_compression` as the receive mode
    /// `name` says; None for a name that is not one of [`QueueConfig::RX_MODES`].
    pub fn with_rx_mode(self, name: &str) -> Option<QueueConfig> {
        let &(_, rx_striding, rx_cqe_compression) = Self::RX_MODES.iter().find(|m| m.0 == name)?;
        Some(QueueConfig {
            rx_striding,
            rx_cqe_compression,
            ..self
        })
    }

    /// The name of the receive mode `rx_striding` and `rx_cqe_compression` ask for (what the
    /// device grants may be less: compression is off with timestamps, or where the device's
    /// caps lack it).
    pub fn rx_mode(&self) -> &'static str {
        Self::RX_MODES
            .iter()
            .find(|m| (m.1, m.2) == (self.rx_striding, self.rx_cqe_compression))
            .map_or("cyclic", |m| m.0)
    }
}

/// Receives packets in bursts.
pub trait RxQueue {
    /// Appends up to `out.room()` received packets to `out`; returns how many.
    fn rx_burst(&mut self, out: &mut Burst) -> Result<usize, QueueError>;
    /// The queue's counters: packets and bytes received, drops the device reported, errors.
    fn stats(&self) -> &QueueStats;
    /// Sleeps until packets may have arrived or `timeout` passes, for loops that would rather
    /// give the CPU away than spin on an empty queue (VPP's interrupt mode). Returns false at
    /// once when the backend has no way to wait (then the caller just polls again).
    fn wait(&mut self, _timeout: std::time::Duration) -> bool {
        false
    }
    /// Striding receive queues (`rx_striding` on `mlx5:` and `model:` ports): the raw WQE
    /// index the device wrote into the CQEs (`wqe_id`) beside the queue's own WQE counter, for
    /// a self-test to see which form a device uses (a counter, or an index in the ring: the
    /// queue compares only the ring's bits, as DPDK does). Sampled where the queue reads a
    /// WQE's first completion on its slow path (frames of more than one stride, fillers): the
    /// first WQEs, the edges of the first four ring passes and each 16-bit wrap of the counter,
    /// at most 64, since the queue was made or last reset. Empty for every other queue.
    ///
    /// ```
    /// use rawpkt::{open, Pool, PoolConfig, QueueConfig};
    /// let port = open("model:ids-doc/1").unwrap();
    /// let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    /// let rx = port.rx_queue(0, &pool, &QueueConfig::default().rx_striding(true)).unwrap();
    /// assert!(rx.wqe_id_samples().is_empty(), "nothing received yet");
    /// ```
    fn wqe_id_samples(&self) -> Vec<WqeIdSample> {
        Vec::new()
    }
}

/// One CQE's WQE numbers on a striding receive queue ([`RxQueue::wqe_id_samples`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WqeIdSample {
    /// The queue's own count of WQEs it consumed before this one (free-running).
    pub sw_wqe: u32,
    /// The CQE's `wqe_id`, as the device wrote it.
    pub wqe_id: u16,
    /// The CQE's `wqe_counter` (on a striding RQ: the first stride of the frame in its WQE).
    pub wqe_counter: u16,
}

/// Sends packets in bursts.
///
/// A caller need not know how a backend completes its sends: every frame `tx_burst` takes is
/// handed to the device (or counted in `stats().drops`) without any other call, and its buffer
/// comes back to the pool on a later `tx_burst` or `reclaim`, or when the queue is dropped. A
/// backend that must hold frames back while a device's queue drains (xdp, after the kernel's
/// EBUSY) sends them on the next call, even an empty `tx_burst`, or when the queue is dropped
/// (which waits for them a bounded time).
pub trait TxQueue {
    /// Takes packets from the front of `pkts` while the ring has room; returns how many it took.
    /// The rest stay in `pkts` for the caller to retry or drop.
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError>;
    /// Collects completions and frees sent buffers without sending new frames (for a loop that
    /// has nothing to send but keeps the queue); returns buffers freed.
    fn reclaim(&mut self) -> Result<usize, QueueError>;
    /// Packets handed to the device and not yet completed.
    fn in_flight(&self) -> usize;
    /// The queue's counters: packets and bytes sent, drops, errors, recoveries.
    fn stats(&self) -> &QueueStats;
    /// Makes the device see `fault` in the frames of the next `tx_burst` only, so that a
    /// self-test can watch the queue fail and recover ([`QueueConfig::recover`]) on the device
    /// itself (`rawpkt-selftest` does). The frames of that burst are lost, and so may be
    /// others in flight: not for a production loop. Returns false where the backend cannot (the
    /// default; the Direct Verbs datapath of `mlx5:` and `model:` ports can).
    ///
    /// ```
    /// use rawpkt::{open, Burst, Pool, PoolConfig, QueueConfig, TxFault};
    /// let port = open("model:inject-doc/0").unwrap();
    /// let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    /// let mut tx = port.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
    /// assert!(tx.inject_fault(TxFault::BadLkey));
    /// let mut b = Burst::new(&pool, 1);
    /// b.alloc(1, 60);
    /// tx.tx_burst(&mut b).unwrap(); // posted with a key the device does not know
    /// let t0 = std::time::Instant::now();
    /// while tx.stats().recoveries == 0 && t0.elapsed().as_secs() < 30 {
    ///     tx.reclaim().unwrap();
    /// }
    /// assert_eq!((tx.stats().recoveries, tx.stats().errors.local_prot), (1, 1));
    /// ```
    fn inject_fault(&mut self, _fault: TxFault) -> bool {
        false
    }
}

/// What [`TxQueue::inject_fault`] makes the device see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxFault {
    /// The burst's frames are posted under a memory key the device never gave out: it fails
    /// the WQE with a local protection error.
    BadLkey,
    /// The queue's own length check is off for the burst: a frame longer than the port sends
    /// (its MTU + 18) reaches the device, which fails it rather than send it.
    Oversize,
}

/// Both halves of one queue, from [`Port::queue_pair`]: (RX, TX).
pub type QueuePair = (Box<dyn RxQueue>, Box<dyn TxQueue>);

/// Makes sure a burst uses the queue's own pool (checked once per burst, not per packet).
#[inline(always)]
pub(crate) fn same_pool(a: &Rc<Pool>, b: &Burst) -> Result<(), QueueError> {
    if Rc::ptr_eq(a, b.pool()) {
        Ok(())
    } else {
        Err(QueueError::ForeignPool)
    }
}
