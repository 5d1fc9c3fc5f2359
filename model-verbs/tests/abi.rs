//! The model library as C code sees it: the built `.so` exports the contract's symbols, and a C
//! program compiled against the system's rdma-core headers (verbs.h, mlx5dv.h: their static
//! inline verbs included) and linked against the library instead of libibverbs runs a whole
//! bring-up, datapath and teardown (`tests/c/e2e.c`).

use std::ffi::CString;
use std::path::Path;
use std::process::Command;

/// Every symbol the binding looks up (contract), plus the test controls.
const SYMBOLS: &[&str] = &[
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_query_port",
    "ibv_query_gid",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_create_qp",
    "ibv_modify_qp",
    "ibv_destroy_qp",
    "mlx5dv_is_supported",
    "mlx5dv_query_device",
    "mlx5dv_init_obj",
    "mlx5dv_create_cq",
    "rawpkt_model_live_objects",
    "rawpkt_model_set",
    "rawpkt_model_inject",
    "rawpkt_model_linux_frames",
    "rawpkt_model_wire_frames",
];

#[test]
fn library_exports_the_contract_symbols() {
    let lib = rawpkt_model_verbs::library_path();
    let path = CString::new(lib.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: dlopen of our own library; its initialisers are Rust's (none run at load).
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    for s in SYMBOLS {
        let name = CString::new(*s).unwrap();
        // SAFETY: a symbol lookup in a live handle.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        assert!(!p.is_null(), "{s} is not exported");
    }
    // Through the handle, as the binding calls it: the device list and the live count.
    // SAFETY: the symbols have these C signatures (verbs.h and the contract).
    unsafe {
        let get: unsafe extern "C" fn(*mut i32) -> *mut *mut libc::c_void =
            std::mem::transmute(libc::dlsym(h, c"ibv_get_device_list".as_ptr()));
        let free: unsafe extern "C" fn(*mut *mut libc::c_void) =
            std::mem::transmute(libc::dlsym(h, c"ibv_free_device_list".as_ptr()));
        let live: extern "C" fn() -> u64 = std::mem::transmute(libc::dlsym(h, c"rawpkt_model_live_objects".as_ptr()));
        let mut n = 0;
        let list = get(&mut n);
        assert!(!list.is_null());
        // Two back-to-back pairs: mlx5_0 <-> mlx5_1, mlx5_2 <-> mlx5_3.
        assert_eq!(n, 4);
        assert!((*list.add(4)).is_null(), "the list is NULL-terminated");
        free(list);
        assert_eq!(live(), 0);
    }
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_against_rdma_core_headers() {
    for h in ["/usr/include/infiniband/verbs.h", "/usr/include/infiniband/mlx5dv.h"] {
        assert!(
            Path::new(h).exists(),
            "{h} is missing: install libibverbs-dev (apt-get install -y libibverbs-dev) to build the C ABI test"
        );
    }
    let lib = rawpkt_model_verbs::library_path();
    let dir = lib.parent().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/e2e.c");
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("model-verbs-e2e");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg("-lrawpkt_model_verbs")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (install a C compiler: apt-get install -y gcc)"));
    assert!(
        out.status.success(),
        "compiling {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // The program must not pull in the real rdma-core.
    let ldd = Command::new("ldd").arg(&exe).output().expect("ldd");
    let deps = String::from_utf8_lossy(&ldd.stdout);
    assert!(!deps.contains("libibverbs") && !deps.contains("libmlx5"), "{deps}");
    let run = Command::new(&exe).output().expect("running the C program");
    assert!(
        run.status.success(),
        "the C program failed:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("e2e ok"));
}
