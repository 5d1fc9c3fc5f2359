//! A DV queue pair against a stepped model NIC whose two ports are back to back.
#![allow(dead_code)]

use std::rc::Rc;
use std::sync::Arc;

use rawpkt::dv::prm::MiniFormat;
use rawpkt::dv::ring::{CqInfo, SqInfo};
use rawpkt::model::{Link, ModelConfig, Nic};
use rawpkt::rx::dv::DvRxQueue;
use rawpkt::tx::dv::DvTxQueue;
use rawpkt::{Pool, PoolConfig, QueueConfig};

// Its own file: flow::bpf's unit tests take it too.
mod rng;
pub use rng::Rng;

pub struct Rig {
    pub nic: Arc<Nic>,
    pub pool: Rc<Pool>,
    pub tx: DvTxQueue,
    pub rx: DvRxQueue,
    pub lkey: u32,
    pub sq: SqInfo,
    pub tx_cq: CqInfo,
    pub rx_cq: CqInfo,
}

pub fn rig(q: QueueConfig, model: ModelConfig, buffers: u32) -> Rig {
    rig_with(q, model, buffers, None)
}

/// [`rig`] with an RX CQ that compresses completions into mini-CQEs of format `rx_comp`.
pub fn rig_with(q: QueueConfig, model: ModelConfig, buffers: u32, rx_comp: Option<MiniFormat>) -> Rig {
    let nic = Nic::new(vec![Link::Peer(1), Link::Peer(0)], model).unwrap();
    let pool = Pool::new(PoolConfig {
        buffers,
        ..PoolConfig::default()
    })
    .unwrap();
    let lkey = nic.register_mr(pool.region());
    let tx_cq = nic.create_cq(q.size).unwrap();
    let sq = nic.create_sq(0, q.size, tx_cq.cqn()).unwrap();
    // SAFETY: the model made this SQ and CQ for this queue alone, and the infos keep them alive.
    let tx = unsafe { DvTxQueue::new(&sq, &tx_cq, lkey, &pool, &q, nic.caps(), nic.control()) }.unwrap();
    let rx_cq = nic.create_cq_with(q.size, rx_comp).unwrap();
    let (rwq, wq) = nic.create_rq(1, q.size, rx_cq.cqn()).unwrap();
    // SAFETY: the model made this RQ and CQ for this queue alone, and the infos keep them alive.
    let rx = unsafe { DvRxQueue::new(&rwq, &rx_cq, wq, lkey, &pool, &q, nic.control()) }.unwrap();
    Rig {
        nic,
        pool,
        tx,
        rx,
        lkey,
        sq,
        tx_cq,
        rx_cq,
    }
}

impl Rig {
    /// Drops the queues and checks that every buffer is back and every object is gone.
    pub fn teardown(self) {
        let Rig {
            nic,
            pool,
            tx,
            rx,
            lkey,
            sq,
            tx_cq,
            rx_cq,
        } = self;
        drop((tx, rx, sq, tx_cq, rx_cq));
        assert_eq!(pool.free_count(), pool.capacity(), "pool not full after teardown");
        nic.deregister_mr(lkey);
        assert_eq!(nic.live_objects(), 0, "model objects left after teardown");
    }
}

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

/// Vector `name` from `tests/data/mlx5-vectors.txt` (generated with rdma-core's own helpers).
pub fn golden(name: &str) -> Vec<u8> {
    let text = include_str!("../data/mlx5-vectors.txt");
    let line = text
        .lines()
        .find(|l| l.starts_with("VEC ") && l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no vector {name}"));
    let hex = line.split_whitespace().nth(3).unwrap();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
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
    rawpkt::flow::rule::parse_mac(text.trim()).unwrap_or_else(|| panic!("bad MAC address {text:?}"))
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

/// An example's executable, built once per test process with the test's own profile (cargo has
/// no `CARGO_BIN_EXE_` for examples): a release test run gets a release example.
pub fn example(name: &str) -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile dir>/deps/<test>-HASH
    let release = exe.parent().and_then(Path::parent).and_then(Path::file_name) == Some("release".as_ref());
    let profile = if release { "release" } else { "test" };
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--example",
            name,
            "--profile",
            profile,
            "--message-format=json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the {name} example: {e}"));
    assert!(out.status.success(), "building the {name} example failed");
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no {name} executable"));
    built.push((name.to_string(), path.clone()));
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
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
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
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}
