//! mlx5 Direct Verbs: the PRM formats (`prm`, the `mlx5-prm` crate) and the shared ring memory
//! ([`ring`]). The software model of the device that executes the same formats is the
//! `mlx5-model` crate; `crate::model` hands its queues to this datapath.
//!
//! The datapath itself lives in `tx::dv` and `rx::dv`; it needs from the control path only what
//! `mlx5dv_init_obj` returns ([`ring::SqInfo`], [`ring::CqInfo`], [`ring::RwqInfo`]) and a way to
//! reset a queue after a completion error ([`DvControl`]).

// The DV tests read the devices' caps and the rings' sizes (feature `internals`); the
// backends alone do not.
#![cfg_attr(not(feature = "internals"), allow(dead_code))]

pub(crate) use mlx5_prm as prm;
#[cfg(test)]
pub(crate) use mlx5_prm::vectors as golden;
pub mod ring;

/// Whether the burst paths may run their MOVBE builds (big-endian PRM fields loaded and stored
/// in one instruction); decided once per queue.
pub(crate) fn cpu_has_movbe() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("movbe");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Whether the receive paths may use AVX2: both queues' refills and compressed sessions (the
/// `rx::dv::avx2` and `rx::dv_striding::avx2` modules); decided once per queue.
pub(crate) fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// What the device requires and offers the send path: on hardware, the inline mode the device
/// reports (`mlx5::inline`: DevX, else DPDK's PCI-device table) and
/// `MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW` from `mlx5dv_query_device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DvCaps {
    /// Headers every send WQE must inline (ConnectX-4: L2, ConnectX-5 and later: none; a vport
    /// may ask for IP or TCP/UDP headers).
    pub inline_mode: prm::InlineMode,
    /// Enhanced multi-packet send (opcode 0x29) is available.
    pub enhanced_mpw: bool,
    /// Largest frame the port sends (MTU plus L2 header); a larger one fails its whole WQE with
    /// LOCAL_LENGTH and resets the queue, so the driver drops it first.
    pub max_frame: u32,
    /// The device inserts a VLAN tag the Ethernet segment asks for (`wqe_vlan_insert`, with no
    /// inline required: `mlx5::inline`); otherwise the driver inlines the tagged header.
    pub vlan_insert: bool,
}

impl DvCaps {
    /// A ConnectX-4: the L2 header inlined in every send WQE, no enhanced multi-packet send.
    pub const CONNECTX4: DvCaps = DvCaps {
        inline_mode: prm::InlineMode::L2,
        enhanced_mpw: false,
        max_frame: 9216,
        vlan_insert: false,
    };
    /// A ConnectX-5 whose DevX reports `wqe_vlan_insert`: nothing inlined, enhanced
    /// multi-packet send, VLAN insertion.
    pub const CONNECTX5: DvCaps = DvCaps {
        inline_mode: prm::InlineMode::None,
        enhanced_mpw: true,
        max_frame: 9216,
        vlan_insert: true,
    };
}

/// What a CQE's timestamp counts, as nanoseconds. Two formats (the PRM's CQE `timestamp`):
/// - a device's free-running clock, in ticks of `hca_core_clock` kHz, unless the real-time
///   format is in force (rdma-core `mlx5dv_ts_to_ns` converts the same ticks). The conversion is
///   a multiply and a shift, precomputed once per queue: ns = ticks × (10^6 / kHz) in fixed
///   point with as many fraction bits as keep the factor in 64 (61 for a ConnectX-5's 6.4 ns), a
///   64×64→128 multiply (one `mul` on x86_64), so that a day of ticks is still exact to the ns.
///   rdma-core's own conversion (`mlx5dv_ts_to_ns` over `mlx5dv_get_clock_info`) also follows
///   the kernel's PTP adjustments of the clock; this one gives ns of the free-running clock, one
///   time base per device, which is what comparing two timestamps of one device needs;
/// - real time ([`TickClock::REAL_TIME`]), which ConnectX-6 Dx and later write when their clock
///   runs in real-time mode: seconds in the high 32 bits, nanoseconds in the low (DPDK
///   `mlx5_rxtx.h` `mlx5_txpp_convert_rx_ts`), on the time base of the device's PHC. Which one a
///   device writes is decided by its backend (`mlx5::clock` from DevX, as DPDK's
///   `mlx5_rt_timestamp_config`).
///
/// The receive loops convert with [`TickClock::ns`], a multiply and a shift whatever the format:
/// for real time it is the identity, and the queue converts the burst's timestamps afterwards,
/// out of the loops. A test of the format inside the loops that hand up
/// timestamps cost the loops that do not 2 instructions a packet, by how the compiler then
/// allocated their registers (`scripts/callgrind.sh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickClock {
    /// Nanoseconds per tick, × 2^`shift`, rounded up (a whole number of ns stays whole).
    mult: u64,
    shift: u32,
    /// Timestamps in real-time format (`mult`/`shift` the identity then).
    real_time: bool,
}

impl TickClock {
    /// A clock that counts nanoseconds already (1 GHz).
    pub(crate) const NANOSECONDS: TickClock = TickClock {
        mult: 1 << 63,
        shift: 63,
        real_time: false,
    };

    /// CQE timestamps in real-time format: `seconds << 32 | nanoseconds`.
    pub const REAL_TIME: TickClock = TickClock {
        mult: 1 << 63,
        shift: 63,
        real_time: true,
    };

    /// Whether timestamps are in real-time format: [`TickClock::ns`] leaves them as they are,
    /// and the queue converts them after each burst.
    pub fn is_real_time(self) -> bool {
        self.real_time
    }

    /// The clock of a device that ticks at `khz` kHz (`ibv_device_attr_ex::hca_core_clock`);
    /// None for 0 (a device that reports no clock).
    pub fn from_khz(khz: u64) -> Option<TickClock> {
        if khz == 0 {
            return None;
        }
        // The most fraction bits that keep ceil(ns per tick) × 2^shift within 64 bits.
        let whole = 1_000_000u64.div_ceil(khz);
        let shift = 64 - (64 - whole.leading_zeros()).max(1);
        let mult = (1_000_000u128 << shift).div_ceil(u128::from(khz));
        Some(TickClock {
            mult: u64::try_from(mult).ok()?,
            shift,
            real_time: false,
        })
    }

    /// `ticks` of the device clock in nanoseconds (a real-time timestamp as it is).
    #[inline(always)]
    pub fn ns(self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.mult)) >> self.shift) as u64
    }

    /// A CQE timestamp in nanoseconds, whatever its format.
    pub fn timestamp_ns(self, raw: u64) -> u64 {
        if self.real_time {
            real_time_ns(raw)
        } else {
            self.ns(raw)
        }
    }
}

/// A real-time CQE timestamp in ns: DPDK `mlx5_txpp_convert_rx_ts`, `(ts & UINT32_MAX) + (ts >>
/// 32) * NS_PER_S`.
pub(crate) fn real_time_ns(raw: u64) -> u64 {
    (raw & 0xffff_ffff) + (raw >> 32) * 1_000_000_000
}

/// Converts the real-time timestamps of `packets` (those with `flags::TIMESTAMP`, which the
/// receive loops stored as the CQE had them) to ns: a queue whose clock is real-time does it
/// after each burst.
#[cold]
#[inline(never)]
pub(crate) fn convert_real_time(packets: &mut [crate::Packet]) {
    for p in packets {
        if p.flags & crate::flags::TIMESTAMP != 0 {
            p.timestamp = real_time_ns(p.timestamp);
        }
    }
}

/// `failed` value of a DV queue stopped by the device's fatal error (no mlx5 syndrome is 0xff).
pub(crate) const FAILED_DEVICE_FATAL: u8 = 0xff;
/// `failed` value of a DV queue whose CQ went into error (no mlx5 syndrome is 0xfe).
pub(crate) const FAILED_CQ_ERROR: u8 = 0xfe;

/// The error a failed DV queue returns for its `failed` value.
#[cold]
pub(crate) fn failed_error(failed: u8) -> crate::QueueError {
    match failed {
        FAILED_DEVICE_FATAL => crate::QueueError::DeviceFatal,
        FAILED_CQ_ERROR => crate::QueueError::Failed(crate::Failure::cq_error()),
        _ => crate::QueueError::Failed(crate::Failure::from_mlx5(failed)),
    }
}

/// The bits of a queue's attention word ([`DvControl::attention`]): what the device's
/// asynchronous events (and the port's watcher) tell a queue. The datapath reads the word where
/// it costs nothing it did not pay before: TX once per burst, RX on an empty burst.
pub mod attention {
    /// `IBV_EVENT_DEVICE_FATAL`: the device stopped; every queue fails.
    pub const DEVICE_FATAL: u32 = 1 << 0;
    /// `IBV_EVENT_CQ_ERR` for the queue's CQ (an overrun): it writes nothing more, the queue
    /// fails (a CQ must be made again; reopening the queue does it).
    pub const CQ_ERROR: u32 = 1 << 1;
    /// `IBV_EVENT_WQ_FATAL` / `IBV_EVENT_QP_FATAL` for the queue's WQ or QP: reset as after a
    /// completion error (kernel `qp.c` `mlx5_ib_wq_event`, `mlx5_ib_qp_event`).
    pub const QUEUE_FATAL: u32 = 1 << 2;
    /// The port's link is down (`IBV_EVENT_PORT_ERR`, cleared by `IBV_EVENT_PORT_ACTIVE`): no
    /// completion is owed, the TX watchdog waits.
    pub const LINK_DOWN: u32 = 1 << 3;
    /// The port's MTU changed: the send path takes its new largest frame
    /// ([`DvControl::max_frame`](super::DvControl::max_frame)).
    pub const MTU_CHANGED: u32 = 1 << 4;
    /// A fault injected by the queue's owner (`TxQueue::inject_fault`): armed, or applied to
    /// the burst being posted (TX).
    pub const INJECT: u32 = 1 << 5;
    /// The bits a queue acts on (all but the link state, which only the watchdog reads).
    pub const ACT: u32 = DEVICE_FATAL | CQ_ERROR | QUEUE_FATAL | MTU_CHANGED | INJECT;
}

/// A queue's attention word: set by whoever hears the device's events for the queue's objects,
/// read and partly cleared by the queue.
pub type AttentionWord = std::sync::Arc<std::sync::atomic::AtomicU32>;

/// Queue state changes the datapath needs from the control path. On hardware these are
/// `ibv_modify_qp` (RESET → INIT → RTR → RTS) and `ibv_modify_wq` (RESET → RDY); on the model they
/// are calls into the device.
pub trait DvControl: Send + Sync {
    /// Resets a send queue to WQEBB 0, discarding whatever was posted.
    fn reset_sq(&self, qpn: u32) -> Result<(), String>;
    /// Resets a receive WQ to WQE 0, discarding whatever was posted.
    fn reset_rq(&self, wq_num: u32) -> Result<(), String>;
    /// The queue's attention word ([`attention`]), which the events of the device set for this
    /// queue. A queue takes it once, at creation, and reads it on its own paths; the default, for
    /// a control that hears no events, is a word nothing ever sets.
    fn attention(&self) -> AttentionWord {
        AttentionWord::default()
    }
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`): it has stopped, and with it
    /// every queue.
    fn device_fatal(&self) -> bool {
        self.attention().load(std::sync::atomic::Ordering::Acquire) & attention::DEVICE_FATAL != 0
    }
    /// The largest frame the port sends now (what [`DvCaps::max_frame`] said at open, or what
    /// an MTU change made it); None where the control does not know.
    fn max_frame(&self) -> Option<u32> {
        None
    }
    /// The time the TX watchdog counts in, ns: the host's coarse monotonic clock, or the model
    /// device's (simulated when a test steps it).
    fn now_ns(&self) -> u64 {
        coarse_now_ns()
    }
    /// The link's speed, bit/s, where known: how long a full ring may take to drain.
    fn link_bps(&self) -> Option<u64> {
        None
    }
    /// The clock the device's CQE timestamps count ([`TickClock`]); None where it is unknown,
    /// and then a queue asked for receive timestamps refuses to open rather than hand up ticks
    /// as nanoseconds.
    fn clock(&self) -> Option<TickClock> {
        None
    }
}

/// `CLOCK_MONOTONIC_COARSE` in ns: a clock read that costs no system call and no serialising
/// instruction (the vDSO returns the last tick's time), fine enough for a watchdog of ms.
pub(crate) fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec, a live local.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod clock_tests {
    use super::TickClock;

    #[test]
    fn ticks_of_a_connectx5_clock_become_nanoseconds() {
        // ConnectX-5: 156 250 kHz, 6.4 ns a tick.
        let c = TickClock::from_khz(156_250).unwrap();
        assert_eq!(c.ns(0), 0);
        assert_eq!(c.ns(5), 32);
        assert_eq!(c.ns(156_250_000), 1_000_000_000);
        // A day of ticks, still exact to the ns.
        assert_eq!(c.ns(156_250_000 * 86_400), 86_400_000_000_000);
        // 1 GHz: one ns a tick.
        assert_eq!(TickClock::from_khz(1_000_000).unwrap().ns(123_456_789), 123_456_789);
        assert_eq!(TickClock::from_khz(1_000_000), Some(TickClock::NANOSECONDS));
        // A slow clock of 1 kHz: a ms a tick, for 200 days.
        assert_eq!(
            TickClock::from_khz(1).unwrap().ns(17_280_000_000),
            17_280_000_000_000_000
        );
        assert_eq!(TickClock::from_khz(0), None);
        // Real time: 1 700 000 000 s and 123 456 789 ns, left as it is by `ns`.
        let rt = TickClock::REAL_TIME;
        let raw = (1_700_000_000u64 << 32) | 123_456_789;
        assert!(rt.is_real_time() && !c.is_real_time());
        assert_eq!((rt.ns(raw), rt.timestamp_ns(raw)), (raw, 1_700_000_000_123_456_789));
        assert_eq!(c.timestamp_ns(5), 32);
    }
}
