//! rdma-core, loaded at run time: the exported functions ([`load`]), the header-only verbs
//! re-implemented over the op tables ([`ops`]), and safe owners of the objects ([`objects`]).
//! Types come from the `rdma-abi` crate (bindgen output of rdma-core 44's verbs.h and mlx5dv.h).

pub mod load;
pub mod objects;
pub mod ops;

pub use load::{load_from, rdma, use_libraries, Rdma};
pub use load::{LibPaths, LoadError}; // rawpkt::mlx5 re-exports them
pub use objects::{CallError, Context, Cq, DeviceList, Flow, FlowAttr, IndTable, Mr, Pd, Qp, Registrable, Wq};
