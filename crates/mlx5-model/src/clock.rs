//! The device's clock: ns since the NIC was made (the host's monotonic clock, or a simulated one
//! that tests advance by hand), and what a CQE's `timestamp` carries of it: ticks of the
//! free-running counter at `hca_core_clock` kHz, or real time as `seconds << 32 | nanoseconds`
//! (the profile's `clock` knob, [`crate::profile::Clock`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::profile::Clock;

/// Not simulated (the value of [`DevClock::sim`] while the host's clock runs the device).
const WALL: u64 = u64::MAX;

/// One NIC's clock, shared by its device state and the `Nic` handle (read without the lock).
pub(crate) struct DevClock {
    epoch: Instant,
    /// ns of simulated time since `epoch`, or [`WALL`].
    sim: AtomicU64,
    /// The real-time clock's reading (ns since the Unix epoch) when the NIC was made.
    rt_base: u64,
    khz: u64,
    real_time: bool,
}

impl DevClock {
    pub(crate) fn new(mode: Clock, khz: u64) -> DevClock {
        let rt_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        DevClock {
            epoch: Instant::now(),
            sim: AtomicU64::new(WALL),
            rt_base,
            khz,
            real_time: mode == Clock::RealTime,
        }
    }

    /// The format of the CQE timestamps (the `clock` knob the NIC was made with).
    pub(crate) fn mode(&self) -> Clock {
        if self.real_time {
            Clock::RealTime
        } else {
            Clock::FreeRunning { khz: self.khz }
        }
    }

    /// ns since the NIC was made.
    pub(crate) fn ns(&self) -> u64 {
        match self.sim.load(Ordering::Acquire) {
            WALL => self.epoch.elapsed().as_nanos() as u64,
            t => t,
        }
    }

    /// From now on the clock stands still at its current reading, and moves only by
    /// [`DevClock::advance`].
    pub(crate) fn simulate(&self) {
        let now = self.ns();
        let _ = self
            .sim
            .compare_exchange(WALL, now, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Moves a simulated clock `ns` forward (nothing for the host's clock).
    pub(crate) fn advance(&self, ns: u64) {
        let _ = self.sim.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            (t != WALL).then(|| t.saturating_add(ns).min(WALL - 1))
        });
    }

    /// `ns` as ticks of the free-running counter (`ibv_query_rt_values_ex`'s raw clock).
    pub(crate) fn ticks(&self, ns: u64) -> u64 {
        (u128::from(ns) * u128::from(self.khz) / 1_000_000) as u64
    }

    /// Real time at `ns`, in ns since the Unix epoch (the PHC of a real-time device).
    pub(crate) fn real_time(&self, ns: u64) -> u64 {
        self.rt_base.wrapping_add(ns)
    }

    /// What a CQE's `timestamp` says at `ns`.
    pub(crate) fn stamp(&self, ns: u64) -> u64 {
        if self.real_time {
            let t = self.real_time(ns);
            ((t / 1_000_000_000) << 32) | (t % 1_000_000_000)
        } else {
            self.ticks(ns)
        }
    }
}
