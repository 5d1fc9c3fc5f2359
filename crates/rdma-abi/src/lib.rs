//! The C types of rdma-core's `infiniband/verbs.h` and `infiniband/mlx5dv.h`, as bindgen generates
//! them (see `scripts/gen-rdma-bindings.sh`), shared by rawpkt's binding
//! (`crates/rawpkt-sys/src/rdma`) and the model library that stands in for libibverbs/libmlx5 in
//! tests. Only types and constants:
//! functions are looked up at run time, and the header-only verbs are re-implemented over the
//! context's op tables by the binding.
//!
//! `struct mlx5_wqe_ctrl_seg` is left out on purpose: it is `__packed__ __aligned__(4)` and bindgen
//! makes it 20 bytes instead of 16. The `mlx5-prm` crate defines the hot-path WQE and CQE layouts
//! by hand and checks them against rdma-core's sizes and offsets.
#![no_std]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]
#![allow(clippy::all)]

include!("generated.rs");
