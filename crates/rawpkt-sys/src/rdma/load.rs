//! Finding rdma-core at run time: `libibverbs.so.1` and `libmlx5.so.1` are dlopen'ed by soname
//! (or from the files a [`LibPaths`] names), so the binary carries no
//! DT_NEEDED on rdma-core and starts on machines without it. DPDK does the same for the same
//! reason (meson option `ibverbs_link=dlopen`, drivers/common/mlx5/linux/mlx5_glue.c).
//!
//! Only the exported functions are looked up here. verbs.h's header-only functions are
//! re-implemented over the op tables in [`super::ops`].
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, OsStr};
use std::sync::{Arc, Mutex};

use libloading::Library;
use rdma_abi::*;

pub use crate::lib_paths::{LibPaths, LIBIBVERBS, LIBMLX5};

const INSTALL_HINT: &str =
    "install it with `apt-get install ibverbs-providers libibverbs1` (Debian/Ubuntu) or `dnf install libibverbs`";

/// rdma-core could not be loaded. The message is one line: what is missing and how to get it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The library file is not there (or the soname resolves to nothing).
    NotInstalled { what: String },
    /// The file is there but dlopen refused it (wrong architecture, a missing dependency).
    Unloadable { what: String, reason: String },
    /// The library lacks a function every rdma-core since v17 exports.
    MissingSymbol { lib: String, symbol: &'static str },
    /// The path names a FIFO, a device, a directory: nothing the loader could map, and a FIFO
    /// would keep it waiting for a writer. A mistake in the path given, not in the machine.
    NotRegular { what: String, kind: &'static str },
    /// The model library (`model-verbs`) in place of rdma-core could not set its model up
    /// (`rawpkt_model_setup_error`): a setting of its environment malformed or out of range
    /// (`usage`), or the system refused what it asks for.
    ModelSetup { reason: String, usage: bool },
}

impl LoadError {
    /// Whether the paths or settings given are at fault (a command to change) rather than the
    /// machine (rdma-core missing or broken).
    pub fn is_usage(&self) -> bool {
        match self {
            LoadError::NotRegular { .. } => true,
            LoadError::ModelSetup { usage, .. } => *usage,
            LoadError::NotInstalled { .. } | LoadError::Unloadable { .. } | LoadError::MissingSymbol { .. } => false,
        }
    }
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::NotInstalled { what } => {
                write!(f, "rdma-core is not installed: {what} not found; {INSTALL_HINT}")
            }
            LoadError::Unloadable { what, reason } => write!(f, "cannot load {what}: {reason}"),
            LoadError::MissingSymbol { lib, symbol } => {
                write!(
                    f,
                    "{lib} has no {symbol}: rdma-core is too old or not rdma-core; {INSTALL_HINT}"
                )
            }
            LoadError::NotRegular { what, kind } => write!(f, "cannot load {what}: is a {kind}, not a regular file"),
            LoadError::ModelSetup { reason, .. } => f.write_str(reason),
        }
    }
}

impl std::error::Error for LoadError {}

/// Function pointers of libibverbs' exported (non-inline) verbs, with the library kept loaded.
pub struct Ibverbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// The compat entry `ibv_query_port` (it fills the prefix of `struct ibv_port_attr` that
    /// `struct _compat_ibv_port_attr` declares); `___ibv_query_port` prefers the context op.
    pub query_port_compat: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    /// `ibv_get_async_event` / `ibv_ack_async_event`: device and port events (`mlx5::events`).
    pub get_async_event: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int>,
    pub ack_async_event: Option<unsafe extern "C" fn(*mut ibv_async_event)>,
    _lib: Library,
}

/// Function pointers of libmlx5's Direct Verbs exports.
pub struct Mlx5dv {
    pub is_supported: unsafe extern "C" fn(*mut ibv_device) -> bool,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut mlx5dv_context) -> c_int,
    pub init_obj: unsafe extern "C" fn(*mut mlx5dv_obj, u64) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex, *mut mlx5dv_cq_init_attr) -> *mut ibv_cq_ex,
    /// `mlx5dv_open_device` and `mlx5dv_devx_general_cmd` (MLX5_1.2 and 1.7): DevX, to ask the
    /// device what it needs (`mlx5::inline`). Absent from an old libmlx5: then the device is
    /// opened with `ibv_open_device` and asked nothing.
    pub open_device: Option<unsafe extern "C" fn(*mut ibv_device, *mut mlx5dv_context_attr) -> *mut ibv_context>,
    pub devx_general_cmd:
        Option<unsafe extern "C" fn(*mut ibv_context, *const c_void, usize, *mut c_void, usize) -> c_int>,
    /// `mlx5dv_create_wq` (MLX5_1.3): striding receive WQs (`QueueConfig::rx_striding`).
    pub create_wq:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr, *mut mlx5dv_wq_init_attr) -> *mut ibv_wq>,
    _lib: Library,
}

/// rdma-core as loaded: libibverbs always, libmlx5 when present (without it only the ibverbs
/// datapath is possible, and `dv_missing` says why).
pub struct Rdma {
    pub ibv: Ibverbs,
    pub dv: Option<Mlx5dv>,
    pub dv_missing: Option<String>,
}

fn open(path: &OsStr) -> Result<Library, LoadError> {
    // A name with a slash is a path (dlopen(3)), opened by the loader with a plain open(2): a
    // FIFO there would keep it waiting for a writer, so only a regular file is let through.
    // (A bare soname is looked up in the loader's own directories.)
    if path.as_encoded_bytes().contains(&b'/') {
        if let Err(e) = crate::file::check_regular(std::path::Path::new(path)) {
            if let Some(kind) = crate::file::not_regular(&e) {
                let what = path.to_string_lossy().into_owned();
                return Err(LoadError::NotRegular { what, kind });
            }
        }
    }
    // SAFETY: loading runs the library's initialisers; rdma-core's (and the model's) only set
    // up their own globals. The library stays loaded for as long as `Rdma` lives.
    match unsafe { Library::new(path) } {
        Ok(lib) => Ok(lib),
        Err(e) => {
            let reason = e.to_string();
            let what = path.to_string_lossy().into_owned();
            if reason.contains("No such file") || reason.contains("cannot open shared object") {
                Err(LoadError::NotInstalled { what })
            } else {
                Err(LoadError::Unloadable { what, reason })
            }
        }
    }
}

/// Looks up `name` as a function of type `T`.
///
/// # Safety
/// `T` must be the function's real C signature.
unsafe fn sym<T: Copy>(lib: &Library, libname: &str, name: &'static str) -> Result<T, LoadError> {
    let mut z = Vec::with_capacity(name.len() + 1);
    z.extend_from_slice(name.as_bytes());
    z.push(0);
    // SAFETY: the caller vouches for the type; the pointer stays valid while `lib` is loaded,
    // and every struct that copies it out also owns `lib`.
    match unsafe { lib.get::<T>(&z) } {
        Ok(s) => Ok(*s),
        Err(_) => Err(LoadError::MissingSymbol {
            lib: libname.into(),
            symbol: name,
        }),
    }
}

impl Rdma {
    /// Loads rdma-core from `paths`. A missing libmlx5 is not an error: it only rules out DV.
    pub fn load(paths: &LibPaths) -> Result<Rdma, LoadError> {
        let lib = open(&paths.ibverbs)?;
        // Errors name the file loaded, which is not the soname when the environment chose it.
        let name = paths.ibverbs.to_string_lossy();
        let n = &*name;
        // The model library in rdma-core's place (model-verbs) says why its model could not be
        // set up when asked, rather than on stderr beside the error of the verb that failed.
        type SetupError = unsafe extern "C" fn(*mut c_char, usize) -> c_int;
        // SAFETY: `int rawpkt_model_setup_error(char *buf, size_t len)` of the model library's
        // contract (docs/model-library.md); absent from rdma-core.
        let setup = unsafe { sym::<SetupError>(&lib, n, "rawpkt_model_setup_error") };
        if let Ok(setup) = setup {
            let mut buf = [0 as c_char; 512];
            // SAFETY: as above; the buffer holds `buf.len()` bytes and outlives the call.
            let rc = unsafe { setup(buf.as_mut_ptr(), buf.len()) };
            if rc != 0 {
                // SAFETY: the library NUL-terminates what it writes within the buffer, which
                // is zeroed to begin with.
                let reason = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
                return Err(LoadError::ModelSetup {
                    reason,
                    usage: rc == libc::EINVAL,
                });
            }
        }
        // SAFETY: for every `sym` below, the types are those of verbs.h (rdma-core 44), which the
        // rdma-abi types were generated from.
        let ibv = unsafe {
            Ibverbs {
                get_device_list: sym(&lib, n, "ibv_get_device_list")?,
                free_device_list: sym(&lib, n, "ibv_free_device_list")?,
                get_device_name: sym(&lib, n, "ibv_get_device_name")?,
                open_device: sym(&lib, n, "ibv_open_device")?,
                close_device: sym(&lib, n, "ibv_close_device")?,
                query_device: sym(&lib, n, "ibv_query_device")?,
                query_port_compat: sym(&lib, n, "ibv_query_port")?,
                alloc_pd: sym(&lib, n, "ibv_alloc_pd")?,
                dealloc_pd: sym(&lib, n, "ibv_dealloc_pd")?,
                reg_mr: sym(&lib, n, "ibv_reg_mr")?,
                dereg_mr: sym(&lib, n, "ibv_dereg_mr")?,
                create_cq: sym(&lib, n, "ibv_create_cq")?,
                destroy_cq: sym(&lib, n, "ibv_destroy_cq")?,
                create_qp: sym(&lib, n, "ibv_create_qp")?,
                modify_qp: sym(&lib, n, "ibv_modify_qp")?,
                destroy_qp: sym(&lib, n, "ibv_destroy_qp")?,
                get_async_event: sym(&lib, n, "ibv_get_async_event").ok(),
                ack_async_event: sym(&lib, n, "ibv_ack_async_event").ok(),
                _lib: lib,
            }
        };
        // rdma-core allocates the rings itself: `ibv_fork_init` (before any other verb) makes it
        // mark them, and every MR, MADV_DONTFORK; on kernels that copy pinned pages at fork
        // (5.13 and later) it does nothing and needs nothing. Packet memory is marked by
        // `mem::region` either way.
        // SAFETY: `ibv_fork_init(void)` of verbs.h, called before any context is opened.
        if let Ok(fork_init) = unsafe { sym::<unsafe extern "C" fn() -> c_int>(&ibv._lib, n, "ibv_fork_init") } {
            // SAFETY: as above.
            let rc = unsafe { fork_init() };
            if rc != 0 {
                log::warn!(
                    "ibv_fork_init failed ({}): a fork() may corrupt rings rdma-core allocates",
                    std::io::Error::from_raw_os_error(rc)
                );
            }
        }
        let (dv, dv_missing) = match Self::load_mlx5(paths) {
            Ok(dv) => (Some(dv), None),
            // A path that names no regular file is a mistake to say, not a libmlx5 to do without.
            Err(e) if e.is_usage() => return Err(e),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Rdma { ibv, dv, dv_missing })
    }

    fn load_mlx5(paths: &LibPaths) -> Result<Mlx5dv, LoadError> {
        let lib = open(&paths.mlx5)?;
        let name = paths.mlx5.to_string_lossy();
        let n = &*name;
        // SAFETY: for every `sym` below, the types are those of mlx5dv.h (rdma-core 44).
        unsafe {
            Ok(Mlx5dv {
                is_supported: sym(&lib, n, "mlx5dv_is_supported")?,
                query_device: sym(&lib, n, "mlx5dv_query_device")?,
                init_obj: sym(&lib, n, "mlx5dv_init_obj")?,
                create_cq: sym(&lib, n, "mlx5dv_create_cq")?,
                open_device: sym(&lib, n, "mlx5dv_open_device").ok(),
                devx_general_cmd: sym(&lib, n, "mlx5dv_devx_general_cmd").ok(),
                create_wq: sym(&lib, n, "mlx5dv_create_wq").ok(),
                _lib: lib,
            })
        }
    }
}

/// Libraries loaded so far, by path: loaded once, kept for the life of the process (objects
/// hold function pointers into them, and unloading rdma-core is never safe while a context is
/// open anyway).
static LOADED: Mutex<Vec<(LibPaths, Arc<Rdma>)>> = Mutex::new(Vec::new());
/// Paths set by [`use_libraries`], for ports whose options name none.
static CHOSEN: Mutex<Option<LibPaths>> = Mutex::new(None);

/// Loads (or returns the already loaded) rdma-core from `paths`.
pub fn load_from(paths: &LibPaths) -> Result<Arc<Rdma>, LoadError> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = loaded.iter().find(|(p, _)| p == paths) {
        return Ok(r.clone());
    }
    let r = Arc::new(Rdma::load(paths)?);
    loaded.push((paths.clone(), r.clone()));
    Ok(r)
}

/// Where ports find rdma-core from now on when their options name no files (instead of the
/// sonames).
pub fn use_libraries(paths: LibPaths) {
    *CHOSEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(paths);
}

/// rdma-core for opening a port: the files its options name, else [`use_libraries`]'s choice,
/// else the sonames.
pub fn rdma(paths: Option<&LibPaths>) -> Result<Arc<Rdma>, LoadError> {
    match paths {
        Some(p) => load_from(p),
        None => {
            let chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner()).clone();
            load_from(&chosen.unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library that loads but is not rdma-core: the error names the file given, not the soname
    /// it stands in for.
    #[test]
    fn missing_symbol_names_the_file_loaded() {
        let paths = LibPaths {
            ibverbs: "libc.so.6".into(),
            mlx5: "libc.so.6".into(),
        };
        let e = Rdma::load(&paths).err().expect("libc is not libibverbs");
        assert_eq!(
            e,
            LoadError::MissingSymbol {
                lib: "libc.so.6".into(),
                symbol: "ibv_get_device_list"
            }
        );
        assert!(
            e.to_string().starts_with("libc.so.6 has no ibv_get_device_list: "),
            "{e}"
        );
        let e = Rdma::load_mlx5(&paths).err().expect("libc is not libmlx5");
        assert!(
            e.to_string().starts_with("libc.so.6 has no mlx5dv_is_supported: "),
            "{e}"
        );
    }
}
