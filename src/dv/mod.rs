//! mlx5 Direct Verbs: the PRM formats ([`prm`]) and the shared ring memory ([`ring`]). The
//! software model of the device that executes the same formats lives in its own room,
//! `crate::model` (feature `model`).
//!
//! The datapath itself lives in `tx::dv` and `rx::dv`; it needs from the control path only what
//! `mlx5dv_init_obj` returns ([`ring::SqInfo`], [`ring::CqInfo`], [`ring::RwqInfo`]) and a way to
//! reset a queue after a completion error ([`DvControl`]).

#[cfg(test)]
pub(crate) mod golden;
pub mod prm;
pub mod ring;

/// Whether the burst paths may run their MOVBE builds (big-endian PRM fields loaded and stored
/// in one instruction); decided once per queue.
pub(crate) fn cpu_has_movbe() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("movbe");
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
}

impl DvCaps {
    pub const CONNECTX4: DvCaps = DvCaps {
        inline_mode: prm::InlineMode::L2,
        enhanced_mpw: false,
        max_frame: 9216,
    };
    pub const CONNECTX5: DvCaps = DvCaps {
        inline_mode: prm::InlineMode::None,
        enhanced_mpw: true,
        max_frame: 9216,
    };
}

/// `failed` value of a DV queue stopped by the device's fatal error (no mlx5 syndrome is 0xff).
pub(crate) const FAILED_DEVICE_FATAL: u8 = 0xff;

/// The error a failed DV queue returns for its `failed` value.
#[cold]
pub(crate) fn failed_error(failed: u8) -> crate::QueueError {
    if failed == FAILED_DEVICE_FATAL {
        crate::QueueError::DeviceFatal
    } else {
        crate::QueueError::Failed(crate::Failure::from_mlx5(failed))
    }
}

/// Queue state changes the datapath needs from the control path. On hardware these are
/// `ibv_modify_qp` (RESET → INIT → RTR → RTS) and `ibv_modify_wq` (RESET → RDY); on the model they
/// are calls into the device.
pub trait DvControl: Send + Sync {
    /// Resets a send queue to WQEBB 0, discarding whatever was posted.
    fn reset_sq(&self, qpn: u32) -> Result<(), String>;
    /// Resets a receive WQ to WQE 0, discarding whatever was posted.
    fn reset_rq(&self, wq_num: u32) -> Result<(), String>;
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`): it has stopped, and with it
    /// every queue. Read on the queues' idle paths only.
    fn device_fatal(&self) -> bool {
        false
    }
}
