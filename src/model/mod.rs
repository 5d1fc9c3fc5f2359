//! The `model:` backend: ports on the software ConnectX of the `mlx5-model` crate (re-exported
//! as [`device`]), driven by the same DV datapath as a real ConnectX. The device knows nothing of
//! the driver; this module hands the queues it creates to the driver, as `mlx5dv_init_obj` does
//! for hardware.
//!
//! Port specs: `model:NAME/0` and `model:NAME/1` are the two ports of one NIC whose wires are
//! back to back (what one sends, the other receives); `model:afpacket=IFNAME` is a one-port NIC
//! whose wire is a Linux interface.

pub use mlx5_model as device;

// Hands the device's queue memory to the DV queues, as mlx5dv_init_obj does for hardware.
#[allow(unsafe_code)]
pub(crate) mod port;
pub(crate) use port::open_model;
#[cfg(test)]
pub(crate) use port::NicQueues;
pub use port::{nic_of, MODEL_QUEUES};
