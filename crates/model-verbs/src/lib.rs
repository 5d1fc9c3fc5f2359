//! rawpkt's mlx5 device model behind rdma-core's C ABI: a shared library that a program loads in
//! place of `libibverbs.so.1` and `libmlx5.so.1`, so that the production control path
//! (device discovery, bring-up, flows) and both datapaths (DV rings and the ibverbs fallback)
//! run unchanged against the model.
//!
//! The interface with rawpkt's binding (`crates/rawpkt-sys/src/rdma/`) is rdma-core's own C ABI, as the
//! rdma-core 44 headers define it (the bindgen types of `crates/rdma-abi/`);
//! `docs/model-library.md` describes what is exported, the fake sysfs tree, the knobs and the
//! kernel rules enforced. In short:
//! - Four RDMA devices are the ports of one model [`Nic`], in two back-to-back pairs (`mlx5_0`
//!   with `mlx5_1`, `mlx5_2` with `mlx5_3`), running on its own thread as model ports do
//!   ([`rawpkt::model`]).
//! - Every object handed out is the real rdma-core struct (`ibv_context` inside a full
//!   `struct verbs_context`, `ibv_pd`, `ibv_mr`, `ibv_cq_ex`, `ibv_qp`, `ibv_wq`,
//!   `ibv_rwq_ind_table`, `ibv_flow`) as the first field of the model's bookkeeping.
//! - `ibv_post_send`/`ibv_post_wq_recv`/`ibv_poll_cq` write real WQEs into the model's rings and
//!   read real CQEs, as libmlx5 does, so the fallback datapath runs on the same device model.
//!
//! [`Nic`]: mlx5_model::Nic
#![allow(unsafe_code)]
// Every unsafe operation sits in its own block with its own SAFETY comment, even in unsafe fns.
#![deny(unsafe_op_in_unsafe_fn)]
// Every exported function is an rdma-core verb whose safety contract is rdma-core's (valid
// objects from this library, valid attribute structs); each one checks what it can (NULL,
// objects it did not hand out) and says why its unsafe blocks hold.
#![allow(clippy::missing_safety_doc)]

#[doc(hidden)]
pub mod abi;
mod alloc;
mod caps;
mod control;
mod counters;
mod cq_ex;
mod datapath;
mod device;
mod devx;
mod devx_caps;
mod devx_objs;
mod dr;
mod dv;
mod dv_wq;
mod events;
mod global;
mod loopback;
mod objects;
mod pin;
mod ring;
mod sysfs;
mod traffic;
mod verbs;

pub use caps::drop_cap_net_raw_on_this_thread;
pub use control::*;
pub use device::*;
pub use devx::*;
pub use devx_objs::*;
pub use dr::*;
pub use dv::*;
pub use dv_wq::*;
pub use events::*;
pub use verbs::*;

use std::path::PathBuf;
use std::sync::OnceLock;

/// Sets the calling thread's `errno`, as rdma-core's verbs do for functions returning NULL.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Runs an exported function's body, turning a panic (a bug in the model) into `fail` with
/// errno EIO instead of unwinding into C.
pub(crate) fn guard<T>(fail: T, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// A pointer-returning verb: NULL with errno on failure.
pub(crate) fn ptr_or_errno<T>(r: Result<*mut T, i32>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// An int-returning verb: 0 or the errno value (rdma-core's convention for destroy/modify).
pub(crate) fn int_errno(r: Result<(), i32>) -> libc::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Builds the model library once per process (`cargo build -p rawpkt-model-verbs --release` in
/// the workspace root, honouring `CARGO_TARGET_DIR`) and returns the path of
/// `librawpkt_model_verbs.so`, for tests that load it in place of rdma-core
/// (`RAWPKT_LIBIBVERBS` / `RAWPKT_LIBMLX5`) or link a C program against it.
///
/// Panics with cargo's output when the build fails: a test cannot go on without the library.
pub fn library_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let out = std::process::Command::new(cargo)
            .args(["build", "-p", "rawpkt-model-verbs", "--release"])
            .current_dir(&root)
            .output()
            .expect("running cargo to build the model library");
        assert!(
            out.status.success(),
            "cargo build -p rawpkt-model-verbs --release failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(t) => root.join(t),
            None => root.join("target"),
        };
        let lib = target.join("release").join("librawpkt_model_verbs.so");
        assert!(lib.exists(), "{} is missing after the build", lib.display());
        lib
    })
    .clone()
}

/// The workspace's root directory: this crate sits in `crates/model-verbs`.
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .expect("model-verbs sits in crates/ of the workspace")
        .to_path_buf()
}

/// The sonames the library stands in for: a program finds them in [`soname_dir`].
pub const SONAMES: [&str; 2] = ["libibverbs.so.1", "libmlx5.so.1"];

/// Builds the library ([`library_path`]) and returns a directory holding `libibverbs.so.1` and
/// `libmlx5.so.1` as links to it (`<target>/release/model-sonames/`): with it first in
/// `LD_LIBRARY_PATH` (or a program's rpath), any dynamically linked rdma-core program loads the
/// model instead of rdma-core. Both names resolve to one file, which the dynamic loader maps
/// once (it matches loaded objects by device and inode) and which defines both libraries'
/// symbol versions.
///
/// Panics if the directory cannot be written: a test cannot go on without it.
pub fn soname_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let lib = library_path();
        let dir = lib.with_file_name("model-sonames");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for name in SONAMES {
            let at = dir.join(name);
            // A link made beside it and renamed over the name (once per process): concurrent
            // test processes each leave a correct link, never a missing one.
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink("../librawpkt_model_verbs.so", &tmp)
                .and_then(|()| std::fs::rename(&tmp, &at))
                .unwrap_or_else(|e| panic!("{}: {e}", at.display()));
        }
        dir
    })
    .clone()
}
