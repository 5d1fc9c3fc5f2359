//! The model library as C code sees it: the built `.so` exports the contract's symbols, and a C
//! program compiled against the system's rdma-core headers (verbs.h, mlx5dv.h: their static
//! inline verbs included) and linked against the library instead of libibverbs runs a whole
//! bring-up, datapath and teardown (`tests/c/e2e.c`).

mod cprog;

use cprog::build_c;
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
    "rawpkt_model_setup_error",
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

/// `ibv_create_cq_ex` with completion timestamps, polled with rdma-core's own inline
/// `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` / `ibv_wc_read_*` (`tests/c/cq_ex.c`):
/// sends and receives complete with timestamps between two `ibv_query_rt_values_ex` readings,
/// never going back, on a clock that runs at `hca_core_clock` kHz.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_polls_extended_cqs_with_timestamps() {
    let exe = build_c("cq_ex");
    let run = Command::new(&exe).output().expect("running the C program");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the C program failed:\n{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("cq_ex ok: 16 sends and 16 receives"), "{out}");
}

/// `ibv_reg_mr` as the kernel's pinning answers (`tests/c/reg_mr.c`): EFAULT over an unmapped
/// page, a PROT_NONE one, or a read-only one asked to be written; EINVAL for a range whose end
/// wraps the address space; nothing registered either way (a range taken on trust would crash
/// the process in the next `ibv_post_send`). And `ibv_poll_cq` with `num_entries` 0 or below
/// answers 0, as libmlx5's loop does.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_registers_only_mapped_memory() {
    let run = Command::new(build_c("reg_mr")).output().expect("running the C program");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the C program failed:\n{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("reg_mr ok"), "{out}");
}

/// A striding receive WQ made with `mlx5dv_create_wq` (`tests/c/striding.c`): the caps
/// `mlx5dv_query_device` reports, rdma-core's refusals, the WQE geometry of `mlx5_calc_rwq_size`,
/// and frames, a filler and their CQEs' stride fields as the program reads them through DV.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_creates_a_striding_wq() {
    let exe = build_c("striding");
    let run = Command::new(&exe).output().expect("running the C program");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the C program failed:\n{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("striding ok: 8 frames and a filler"), "{out}");
}

/// `mlx5dv_create_cq` with CQE compression (`tests/c/cqe_comp.c`): the caps a ConnectX-5
/// reports, a format the device lacks refused, and frames doorbelled at once read back from
/// compressed sessions both as a DV program reads them (title, mini-CQE arrays, stamping) and
/// through `ibv_poll_cq`, which expands them.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_reads_compressed_cqs() {
    let run = Command::new(build_c("cqe_comp"))
        .output()
        .expect("running the C program");
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "the C program failed:\n{out}{err}");
    assert!(out.contains("cqe_comp ok: 40 frames read as a DV program"), "{out}");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn c_program_against_rdma_core_headers() {
    let exe = build_c("e2e");
    // The model's trace of a process whose NIC lives until exit is flushed at exit, whole.
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("model-verbs-e2e-{}.trace", std::process::id()));
    let run = Command::new(&exe)
        .env("RAWPKT_MODEL_TRACE", &trace)
        .output()
        .expect("running the C program");
    assert!(
        run.status.success(),
        "the C program failed:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("e2e ok"));
    let text = std::fs::read_to_string(&trace).expect("the trace file");
    let _ = std::fs::remove_file(&trace);
    assert!(
        text.starts_with("# rawpkt mlx5 model trace v2\n") && text.ends_with('\n'),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("WQE ")) && text.lines().any(|l| l.starts_with("CQE ")));
    let last = text.lines().last().unwrap();
    assert!(
        ["WQE ", "CQE ", "EV ", "MINI ", "RWQE ", "RDB ", "RXD ", "CQCI "]
            .iter()
            .any(|r| last.starts_with(r)),
        "the trace ends mid-record: {last}"
    );
}

/// `name@@VERSION` / `name@VERSION` of every symbol `lib` defines.
fn versioned_symbols(lib: &Path) -> std::collections::BTreeSet<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(lib)
        .output()
        .expect("readelf (binutils)");
    assert!(out.status.success(), "readelf {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[6] != "UND" && f[6] != "ABS" && f[7].contains('@')).then(|| f[7].to_string())
        })
        .collect()
}

#[test]
fn symbol_versions_and_soname_are_rdma_core_44s() {
    let lib = rawpkt_model_verbs::library_path();
    let ours = versioned_symbols(&lib);
    let table: std::collections::BTreeSet<String> = rawpkt_model_verbs::abi::EXPORTS
        .iter()
        .map(|(n, v, default, _, _)| format!("{n}{}{v}", if *default { "@@" } else { "@" }))
        .collect();
    assert_eq!(ours, table, "the .so's versioned symbols are not abi/exports.tsv's");
    assert!(table.contains("ibv_get_device_list@@IBVERBS_1.1"));
    assert!(table.contains("ibv_get_device_list@IBVERBS_1.0"));
    assert!(table.contains("mlx5dv_init_obj@@MLX5_1.2"));
    assert!(table.len() > 300, "{} symbols", table.len());
    let d = Command::new("readelf").arg("-d").arg(&lib).output().expect("readelf");
    assert!(String::from_utf8_lossy(&d.stdout).contains("Library soname: [libibverbs.so.1]"));
    // Against Debian's rdma-core when it is installed (libibverbs1, ibverbs-providers).
    let sys = Path::new("/usr/lib/x86_64-linux-gnu");
    let real = [sys.join("libibverbs.so.1"), sys.join("libmlx5.so.1")];
    if real.iter().all(|p| p.exists()) {
        let mut want = versioned_symbols(&real[0]);
        want.extend(versioned_symbols(&real[1]));
        assert_eq!(ours, want, "not the installed rdma-core's symbol@version list");
    }
}

#[test]
fn unmodelled_symbols_answer_as_unsupported_verbs() {
    let lib = rawpkt_model_verbs::library_path();
    let path = CString::new(lib.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: dlopen of our own library.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null());
    // SAFETY: lookups in a live handle, called with their rdma-core signatures (NULL arguments
    // are never read by a stub).
    unsafe {
        let srq: unsafe extern "C" fn(*mut libc::c_void, *mut libc::c_void) -> *mut libc::c_void =
            std::mem::transmute(libc::dlsym(h, c"ibv_create_srq".as_ptr()));
        *libc::__errno_location() = 0;
        assert!(srq(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
        assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
        let cmd: unsafe extern "C" fn(*mut libc::c_void) -> i32 =
            std::mem::transmute(libc::dlsym(h, c"ibv_cmd_alloc_pd".as_ptr()));
        assert_eq!(cmd(std::ptr::null_mut()), libc::EOPNOTSUPP);
    }
    let stubs = rawpkt_model_verbs::abi::EXPORTS.iter().filter(|e| !e.4).count();
    assert!(stubs > 0 && stubs < rawpkt_model_verbs::abi::EXPORTS.len());
}

/// The exported-symbol table of docs/model-library.md, from the library's own `EXPORTS`: one row
/// per symbol with its versions (default in bold) and what it does.
fn exports_table() -> String {
    let mut rows: Vec<(String, Vec<String>, bool, &str)> = Vec::new();
    for (name, ver, default, kind, implemented) in rawpkt_model_verbs::abi::EXPORTS {
        let v = if *default {
            format!("**{ver}**")
        } else {
            ver.to_string()
        };
        match rows.iter_mut().find(|r| r.0 == *name) {
            Some(r) => {
                r.1.push(v);
                r.2 |= *implemented && *default;
            }
            None => rows.push((name.to_string(), vec![v], *implemented && *default, kind)),
        }
    }
    let mut t = String::from("| symbol | versions | in the model |\n|---|---|---|\n");
    for (name, vers, implemented, kind) in rows {
        let what = if implemented {
            "modelled".to_string()
        } else {
            match kind {
                "ptr" => "not modelled: NULL, errno EOPNOTSUPP".into(),
                "int" => "not modelled: EOPNOTSUPP".into(),
                "neg" => "not modelled: -1, errno EOPNOTSUPP".into(),
                "void" => "not modelled: no effect".into(),
                k => format!("not modelled: 0 ({k})"),
            }
        };
        t.push_str(&format!("| `{name}` | {} | {what} |\n", vers.join(", ")));
    }
    t
}

/// docs/model-library.md's table is the library's: `RAWPKT_BLESS_DOCS=1` rewrites it
/// (scripts/model-abi-table.sh).
#[test]
fn docs_table_lists_every_export() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/model-library.md");
    let text = std::fs::read_to_string(&doc).expect("docs/model-library.md");
    let (begin, end) = ("<!-- exports:begin -->\n", "<!-- exports:end -->");
    let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
        panic!("docs/model-library.md has no {begin:?} .. {end:?} markers");
    };
    let table = exports_table();
    let current = &text[a + begin.len()..b];
    if std::env::var_os("RAWPKT_BLESS_DOCS").is_some() {
        let new = format!("{}{table}{}", &text[..a + begin.len()], &text[b..]);
        std::fs::write(&doc, new).expect("writing docs/model-library.md");
        return;
    }
    assert_eq!(
        current, table,
        "docs/model-library.md's symbol table is stale: run scripts/model-abi-table.sh"
    );
}
