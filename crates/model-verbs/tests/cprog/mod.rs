//! Building the C test programs (`tests/c/*.c`) against rdma-core's headers and the model
//! library, for the test binaries that run them.

use std::path::Path;
use std::process::Command;

/// Compiles `tests/c/<name>.c` against the system's rdma-core headers and links it against the
/// library's soname directory instead of `-libverbs` (rpath there), checking with ldd that the
/// program loads the model, not rdma-core. Returns the executable.
pub fn build_c(name: &str) -> std::path::PathBuf {
    for h in ["/usr/include/infiniband/verbs.h", "/usr/include/infiniband/mlx5dv.h"] {
        assert!(
            Path::new(h).exists(),
            "{h} is missing: install libibverbs-dev (apt-get install -y libibverbs-dev) to build the C ABI test"
        );
    }
    let dir = rawpkt_model_verbs::soname_dir();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("model-verbs-{name}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg("-l:libibverbs.so.1")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (install a C compiler: apt-get install -y gcc)"));
    assert!(
        out.status.success(),
        "compiling {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // The program must load the model, not the real rdma-core: its libibverbs.so.1 (the
    // library's SONAME) resolves through the rpath to the soname directory.
    let ldd = Command::new("ldd").arg(&exe).output().expect("ldd");
    let deps = String::from_utf8_lossy(&ldd.stdout);
    let want = format!("libibverbs.so.1 => {}", dir.join("libibverbs.so.1").display());
    assert!(deps.contains(&want), "{deps}");
    exe
}
