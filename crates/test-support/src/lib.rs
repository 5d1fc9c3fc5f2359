//! What rawpkt's tests share across the workspace's crates: deterministic test data ([`Rng`],
//! numbered frames), the fuzz driver ([`fuzz`]), and the host around a test (commands, child
//! processes with deadlines, signals, the workspace's binaries and the model library).
// The generators name their step `next`, as xorshift and splitmix papers do; they are not iterators.
#![allow(clippy::should_implement_trait)]

pub mod fuzz;
mod rng;
pub use rng::Rng;

/// Frame number `seq`: its length and every byte follow from `seq`, so a receiver can check it
/// without keeping what was sent.
pub fn frame_len(seq: u64, lo: usize, hi: usize) -> usize {
    lo + (Rng(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).next() % (hi - lo + 1) as u64) as usize
}

pub fn fill_frame(seq: u64, out: &mut [u8]) {
    let mut r = Rng(seq.wrapping_add(0x1234_5678_9abc_def1) | 1);
    for chunk in out.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    // Unicast destination MAC, and the sequence number right after the Ethernet header.
    out[0] &= 0xfe;
    out[14..22].copy_from_slice(&seq.to_be_bytes());
}

pub fn seq_of(frame: &[u8]) -> u64 {
    u64::from_be_bytes(frame[14..22].try_into().unwrap())
}

/// IEEE 802 local experimental EtherType: no kernel protocol answers it.
pub const ETHERTYPE: u16 = 0x88b5;

/// Runs a set-up command (ip, sysctl, id) and returns its stdout; a failure is the test's.
pub fn run(args: &[&str]) -> String {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("set-up: cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "set-up: {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command whose failure does not matter (clean-up); returns whether it succeeded.
pub fn run_quiet(args: &[&str]) -> bool {
    std::process::Command::new(args[0])
        .args(&args[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A MAC address as sysfs prints it (`02:00:00:00:00:01\n`).
pub fn mac_of(text: &str) -> [u8; 6] {
    rawpkt_wire::rule::parse_mac(text.trim()).unwrap_or_else(|| panic!("bad MAC address {text:?}"))
}

pub fn is_root() -> bool {
    run(&["id", "-u"]).trim() == "0"
}

/// A numbered test frame: `fill_frame`'s bytes under an Ethernet header of `ETHERTYPE` from `src`
/// to `dst`, the sequence number right after it.
pub fn tagged_frame(dst: [u8; 6], src: [u8; 6], seq: u64, out: &mut [u8]) {
    fill_frame(seq, out);
    out[0..6].copy_from_slice(&dst);
    out[6..12].copy_from_slice(&src);
    out[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    out[14..22].copy_from_slice(&seq.to_be_bytes());
}

/// The workspace's root directory (this crate sits in `crates/test-support`).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("test-support sits in crates/ of the workspace")
        .to_path_buf()
}

/// A tool of the workspace (`pktgen`, `l2-xconnect`, `rx-sink`, from the `rawpkt-tools` crate).
pub fn tool(name: &str) -> std::path::PathBuf {
    built("rawpkt-tools", "--bin", name)
}

/// An example of the `rawpkt` library (`examples/NAME.rs`).
pub fn example(name: &str) -> std::path::PathBuf {
    built("rawpkt", "--example", name)
}

/// A binary or example of a workspace package, built once per test process with the test's own
/// profile: a release test run gets a release build.
fn built(package: &str, kind: &str, name: &str) -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    type Built = Vec<(String, PathBuf)>;
    static BUILT: std::sync::Mutex<Built> = std::sync::Mutex::new(Vec::new());
    let key = format!("{package} {kind} {name}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| *n == key) {
        return p.clone();
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile dir>/deps/<test>-HASH
    let release = exe.parent().and_then(Path::parent).and_then(Path::file_name) == Some("release".as_ref());
    let profile = if release { "release" } else { "test" };
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            package,
            kind,
            name,
            "--profile",
            profile,
            "--message-format=json",
        ])
        .current_dir(workspace_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {name}: {e}"));
    assert!(out.status.success(), "building {name} failed");
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no {name} executable"));
    built.push((key, path.clone()));
    path
}

/// Waits for `child` and collects its output; a child still running after `limit` is killed
/// and fails the test with `what` (what the caller checks used to hang).
pub fn output_within(child: std::process::Child, limit: std::time::Duration, what: &str) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what}: waiting for it: {e}")),
        Err(_) => {
            run_quiet(&["kill", "-KILL", &pid.to_string()]);
            panic!("{what}: still running after {limit:?}; killed");
        }
    }
}

/// One HTTP/1.1 request with a JSON body to a tool's endpoint (pktgen's `--control`): the
/// status line and the body of the answer, read until the server closes (10 s at most).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (String, String) {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let (head, body) = got
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: no header end: {got}"));
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// Reads `child`'s stderr until a line starting with `prefix` (a tool saying where it serves,
/// e.g. "pktgen: control at http://"), and returns the rest of that line, trimmed, with a
/// thread that collects the rest of stderr (the lines before it included). A child that ends
/// its stderr without saying it is killed, and the test fails with what it said.
pub fn announced(child: &mut std::process::Child, prefix: &str) -> (String, std::thread::JoinHandle<String>) {
    use std::io::BufRead as _;
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let (mut line, mut before) = (String::new(), String::new());
    let said = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("no line {prefix:?} on stderr: {before}");
        }
        if let Some(rest) = line.trim_end().strip_prefix(prefix) {
            break rest.to_string();
        }
        before.push_str(&line);
    };
    let rest = std::thread::spawn(move || {
        let _ = std::io::Read::read_to_string(&mut err, &mut before);
        before
    });
    (said, rest)
}

/// Waits (up to 10 s) until the process `pid` catches `sig` (/proc's SigCgt): its handler is in
/// place, and the signal now reaches the program rather than ending it.
pub fn wait_for_handler(pid: u32, sig: i32) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(10) {
        let caught = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let hex = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim().to_string();
                u64::from_str_radix(&hex, 16).ok()
            })
            .is_some_and(|m| m & (1 << (sig - 1)) != 0);
        if caught {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Sends SIGINT to the process `pid` as early as a Ctrl-C could come: once Rust's runtime is up
/// in it (the runtime catches SIGSEGV, bit 11 of /proc's SigCgt, just before `main`), and as
/// soon as it catches SIGINT itself, or 5 ms after the runtime came up if it has not by then.
/// A process that installs its handler first thing in `main` catches it: only a scheduler that
/// keeps it off its CPU for 5 ms right then can make it miss.
pub fn sigint_at_start(pid: u32) {
    let caught = |sig: i32| -> Option<bool> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let hex = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim();
        Some(u64::from_str_radix(hex, 16).ok()? & (1 << (sig - 1)) != 0)
    };
    let start = std::time::Instant::now();
    let mut runtime_at = None;
    while start.elapsed() < std::time::Duration::from_secs(10) {
        if caught(libc::SIGINT) == Some(true) {
            break;
        }
        if caught(libc::SIGSEGV) == Some(true)
            && runtime_at.get_or_insert_with(std::time::Instant::now).elapsed() > std::time::Duration::from_millis(5)
        {
            break;
        }
    }
    run(&["kill", "-INT", &pid.to_string()]);
}

/// The model library that stands in for libibverbs/libmlx5 in child processes:
/// `RAWPKT_MODEL_VERBS_LIB` when set, else built (once per test process) from the workspace's
/// `model-verbs` crate.
pub fn model_verbs_lib() -> &'static std::path::Path {
    use std::path::PathBuf;
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os("RAWPKT_MODEL_VERBS_LIB") {
            return PathBuf::from(p);
        }
        let root = workspace_root();
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "rawpkt-model-verbs", "--release"])
            .current_dir(&root)
            .status()
            .expect("run cargo");
        assert!(status.success(), "building rawpkt-model-verbs failed");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        target.join("release/librawpkt_model_verbs.so")
    })
}

/// The CPUs this process may run on, in order (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    rawpkt_sys::allowed_cpus()
}
