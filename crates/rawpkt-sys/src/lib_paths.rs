//! Where rdma-core's two libraries are loaded from: plain data, there whether or not this build
//! loads rdma-core (feature `rdma`), so that options naming them need no feature of their own.

use std::ffi::OsString;

/// Soname of libibverbs (rdma-core's `libibverbs/libibverbs.map.in`: IBVERBS_1.x).
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// Soname of the mlx5 provider, which also exports the `mlx5dv_*` functions (MLX5_1.x).
pub const LIBMLX5: &str = "libmlx5.so.1";

/// Where the two libraries come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LibPaths {
    /// libibverbs: a soname the dynamic loader looks up, or a file path.
    pub ibverbs: OsString,
    /// libmlx5, likewise.
    pub mlx5: OsString,
}

/// The sonames, as the dynamic loader finds them.
impl Default for LibPaths {
    fn default() -> LibPaths {
        LibPaths {
            ibverbs: LIBIBVERBS.into(),
            mlx5: LIBMLX5.into(),
        }
    }
}

impl LibPaths {
    /// The files `RAWPKT_LIBIBVERBS` and `RAWPKT_LIBMLX5` name (a private copy of rdma-core, or
    /// the model library), the soname for the one not set; None if neither is. The library never
    /// reads them itself: the tools and the model library's own traffic do.
    pub fn from_env() -> Option<LibPaths> {
        let (ibverbs, mlx5) = (
            std::env::var_os("RAWPKT_LIBIBVERBS"),
            std::env::var_os("RAWPKT_LIBMLX5"),
        );
        if ibverbs.is_none() && mlx5.is_none() {
            return None;
        }
        let sonames = LibPaths::default();
        Some(LibPaths {
            ibverbs: ibverbs.unwrap_or(sonames.ibverbs),
            mlx5: mlx5.unwrap_or(sonames.mlx5),
        })
    }
}
