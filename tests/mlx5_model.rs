//! mlx5 and verbs ports against the model library that stands in for libibverbs/libmlx5 at the C
//! ABI (`crates/model-verbs/`, see docs/model-library.md): discovery, bring-up, both
//! datapaths, flow steering, RSS, teardown and the error messages.
//!
//! The model is process-global, so every test holds `LOCK`. Its library comes from
//! `RAWPKT_MODEL_VERBS_LIB` when set, else it is built from the workspace's `model-verbs` crate
//! (`common::model_verbs_lib`); a build that fails fails the tests.

mod common;
#[path = "common/runts.rs"]
mod runts;

use std::ffi::{c_char, c_int, CString};
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rawpkt::{open_with, Burst, Pool, PoolConfig, Port, PortOptions, QueueConfig, RxQueue, TxQueue};
use rawpkt_wire::rule::FlowRule;

static LOCK: Mutex<()> = Mutex::new(());

const MAC0: [u8; 6] = [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x00];
const MAC1: [u8; 6] = [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01];
const OTHER_MAC: [u8; 6] = [0x02, 0x99, 0, 0, 0, 0x42];

/// The model's control symbols.
struct Model {
    _lib: libloading::Library,
    live_objects: unsafe extern "C" fn() -> u64,
    set: unsafe extern "C" fn(*const c_char, *const c_char) -> c_int,
    inject: unsafe extern "C" fn(*const c_char, u8, *const u8, usize) -> c_int,
    linux_frames: unsafe extern "C" fn(*const c_char, u8) -> u64,
    wire_frames: unsafe extern "C" fn(*const c_char, u8) -> u64,
}

impl Model {
    fn live_objects(&self) -> u64 {
        // SAFETY: a plain counter read exported by the model.
        unsafe { (self.live_objects)() }
    }

    fn set(&self, key: &str, value: &str) {
        let (k, v) = (CString::new(key).unwrap(), CString::new(value).unwrap());
        // SAFETY: two valid C strings for the duration of the call.
        assert_eq!(
            unsafe { (self.set)(k.as_ptr(), v.as_ptr()) },
            0,
            "rawpkt_model_set({key}, {value})"
        );
    }

    fn inject(&self, ibdev: &str, frame: &[u8]) {
        let d = CString::new(ibdev).unwrap();
        // SAFETY: valid string and frame for the duration of the call.
        assert_eq!(unsafe { (self.inject)(d.as_ptr(), 1, frame.as_ptr(), frame.len()) }, 0);
    }

    fn linux_frames(&self, ibdev: &str) -> u64 {
        let d = CString::new(ibdev).unwrap();
        // SAFETY: valid string for the duration of the call.
        unsafe { (self.linux_frames)(d.as_ptr(), 1) }
    }

    fn wire_frames(&self, ibdev: &str) -> u64 {
        let d = CString::new(ibdev).unwrap();
        // SAFETY: valid string for the duration of the call.
        unsafe { (self.wire_frames)(d.as_ptr(), 1) }
    }

    /// Back to the defaults every test starts from.
    fn reset(&self) {
        self.set("dv", "1");
        self.set("cap_net_raw", "1");
        self.set("refuse_flow", "");
        for d in ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] {
            self.set(&format!("devx.{d}"), "1");
            self.set(&format!("inline.{d}"), "none");
            self.set(&format!("pci_device.{d}"), "0x1017");
            self.set(&format!("device.{d}"), "reset");
            self.set(&format!("mtu.{d}"), "1500");
        }
        self.set("flow_groups", "creation");
    }
}

/// The lock, and the model (libraries pointed at it once).
fn setup() -> (MutexGuard<'static, ()>, &'static Model) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = common::model_verbs_lib();
    static MODEL: OnceLock<Model> = OnceLock::new();
    let model = MODEL.get_or_init(|| {
        rawpkt::mlx5::use_libraries(path, path);
        // SAFETY: the model library's initialisers only set up its own state.
        let lib = unsafe { libloading::Library::new(path) }.expect("load the model library");
        // SAFETY: the signatures are the contract's.
        unsafe {
            Model {
                live_objects: *lib.get(b"rawpkt_model_live_objects\0").unwrap(),
                set: *lib.get(b"rawpkt_model_set\0").unwrap(),
                inject: *lib.get(b"rawpkt_model_inject\0").unwrap(),
                linux_frames: *lib.get(b"rawpkt_model_linux_frames\0").unwrap(),
                wire_frames: *lib.get(b"rawpkt_model_wire_frames\0").unwrap(),
                _lib: lib,
            }
        }
    });
    model.reset();
    (guard, model)
}

fn pool() -> Rc<Pool> {
    Pool::new(PoolConfig::default().buffers(8192)).unwrap()
}

/// Rings large enough to hold every frame a test sends before it starts receiving (a full RQ
/// drops the rest, as the NIC does).
fn qcfg() -> QueueConfig {
    QueueConfig::default().size(512)
}

fn opts(rx_queues: u16, rules: &[&str]) -> PortOptions {
    PortOptions::default()
        .rules(rules.iter().map(|r| r.parse::<FlowRule>().unwrap()).collect())
        .promiscuous(false)
        .rx_queues(rx_queues)
}

fn udp(dst: [u8; 6], src_ip: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst)
        .ipv4(src_ip, [10, 0, 0, 2], 64)
        .udp(sport, dport);
    let payload = [0x5au8; 18];
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, &payload).unwrap();
    v
}

fn tcp(dst: [u8; 6], src_ip: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst)
        .ipv4(src_ip, [10, 0, 0, 2], 64)
        .tcp(sport, dport, 1, 1024);
    let payload = [0x5au8; 18];
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, &payload).unwrap();
    v
}

/// Compares frame lists without printing thousands of bytes.
fn same_frames(got: &[Vec<u8>], want: &[Vec<u8>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: frame count");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: frame {i} differs: got {:02x?}, want {:02x?}", got[i], want[i]);
    }
}

/// Receives until `want` frames arrived on `rx` (or two seconds passed); returns the frames.
fn receive(rx: &mut dyn RxQueue, pool: &Rc<Pool>, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut b = Burst::new(pool, 64);
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        if rx.rx_burst(&mut b).unwrap() == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        for i in 0..b.len() {
            // The whole frame, every segment of a chained one.
            got.push(b.segments(i).flatten().copied().collect());
        }
        b.clear();
    }
    got
}

/// Sends every frame, retrying while the ring is full, then waits for the completions.
fn send(tx: &mut dyn TxQueue, pool: &Rc<Pool>, frames: &[Vec<u8>]) {
    let mut b = Burst::new(pool, 64);
    for chunk in frames.chunks(32) {
        for f in chunk {
            assert!(b.push_copy(f));
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !b.is_empty() {
            tx.tx_burst(&mut b).unwrap();
            assert!(Instant::now() < deadline, "send stalled");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while tx.in_flight() > 0 && Instant::now() < deadline {
        tx.reclaim().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(tx.in_flight(), 0, "completions missing");
}

fn open(spec: &str, o: &PortOptions) -> Port {
    open_with(spec, o).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

#[test]
fn loader_names_the_missing_library_and_how_to_install_it() {
    let e = rawpkt::mlx5::probe("/nonexistent/libibverbs.so.1", "/nonexistent/libmlx5.so.1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rdma-core is not installed: /nonexistent/libibverbs.so.1 not found")
            && e.contains("apt-get install ibverbs-providers libibverbs1")
            && e.contains("dnf install libibverbs")
            && !e.contains('\n'),
        "{e}"
    );
}

/// A port's options name the rdma-core files it loads, ahead of `use_libraries` (which `setup`
/// points at the model library): the library reads no environment.
#[test]
fn port_options_name_the_rdma_core_files() {
    let (_g, model) = setup();
    let missing = PortOptions::default().rdma_core(Some(rawpkt::LibPaths {
        ibverbs: "/nonexistent/rpx-libibverbs.so.1".into(),
        mlx5: "/nonexistent/rpx-libmlx5.so.1".into(),
    }));
    let e = open_with("mlx5:mlx5_0/1", &missing).unwrap_err();
    assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
    assert!(
        e.to_string()
            .contains("rdma-core is not installed: /nonexistent/rpx-libibverbs.so.1 not found"),
        "{e}"
    );
    let lib = common::model_verbs_lib();
    let model_lib = PortOptions::default().rdma_core(Some(rawpkt::LibPaths {
        ibverbs: lib.into(),
        mlx5: lib.into(),
    }));
    let p = open("mlx5:mlx5_0/1", &model_lib);
    assert!(p.describe().unwrap().contains("mlx5_0 port 1"), "{:?}", p.describe());
    drop(p);
    assert_eq!(model.live_objects(), 0);
}

#[test]
fn ports_open_with_both_datapaths_and_describe_the_link() {
    let (_g, model) = setup();
    {
        let p = open("mlx5:mlx5_0/1", &PortOptions::default());
        let d = p.describe().unwrap();
        assert!(
            d.contains("mlx5_0 port 1") && d.contains("mdl0") && d.contains("0000:3b:00.0"),
            "{d}"
        );
        assert!(
            d.contains("02:4d:4c:35:00:00") && d.contains("ACTIVE") && d.contains("Direct Verbs"),
            "{d}"
        );
        let v = open("verbs:mdl1", &PortOptions::default());
        let d = v.describe().unwrap();
        assert!(d.contains("mlx5_1 port 1") && d.contains("ibverbs"), "{d}");
    }
    assert_eq!(model.live_objects(), 0);
}

/// An RDMA device and port, and the netdev on it, are one port; pktgen refuses it twice.
#[test]
fn a_port_by_device_and_by_netdev_is_the_same_port() {
    let (_g, model) = setup();
    {
        let a = open("mlx5:mlx5_1/1", &PortOptions::default());
        let b = open("mlx5:mdl1", &PortOptions::default());
        let c = open("verbs:mdl0", &PortOptions::default());
        assert!(a.same_port(&b), "{} {}", a.identity(), b.identity());
        assert!(!a.same_port(&c));
        assert_eq!(b.identity().to_string(), "mlx5_1 port 1");
    }
    assert_eq!(model.live_objects(), 0);
    let lib = common::model_verbs_lib();
    let out = std::process::Command::new(common::tool("pktgen"))
        .env("RAWPKT_LIBIBVERBS", lib)
        .env("RAWPKT_LIBMLX5", lib)
        .args(["--port", "mlx5:mlx5_1/1", "--rx-port", "mlx5:mdl1", "--count", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("same port (mlx5_1 port 1)") && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// 10 % runts and frames shorter than an Ethernet header through the DV datapath and the
/// ibverbs fallback (whose `ibv_post_send` refuses a frame under 18 bytes): the runts arrive padded
/// to 60 bytes, each tiny frame is one counted drop, and nothing else is lost.
fn runts_through(kind: &str) {
    let (_g, model) = setup();
    {
        let a = open(&format!("{kind}:mlx5_0/1"), &opts(1, &[]));
        let b = open(&format!("{kind}:mdl1"), &opts(1, &[]));
        let pool = pool();
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
        runts::send_runts(tx.as_mut(), rx.as_mut(), &pool, MAC1, 20_000, || {});
        drop((tx, rx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
    assert_eq!(model.live_objects(), 0);
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn runts_direct_verbs() {
    runts_through("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn runts_ibverbs() {
    runts_through("verbs");
}

/// Receive buffers exhausted on a port of the model library: far more than 255 frames dropped in
/// a row, and the port's `device_drops` (read from the sysfs `hw_counters/out_of_buffer` file the
/// library keeps, as the kernel does) is exactly the frames that did not arrive; pktgen reports
/// the same counter as its device drops.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn device_drops_are_the_out_of_buffer_counter() {
    let (_g, model) = setup();
    {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        let b = open("mlx5:mdl1", &opts(1, &[]));
        let before = b.device_drops();
        assert_eq!(
            before,
            Some(0),
            "the counter file is there and reads 0 since the port opened"
        );
        let pool = pool();
        let small = qcfg().size(64);
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = b.rx_queue(0, &pool, &small).unwrap();
        let frames: Vec<Vec<u8>> = (0..2000)
            .map(|i| udp(MAC1, [10, 0, 1, i as u8], 1000 + i, 53))
            .collect();
        send(tx.as_mut(), &pool, &frames);
        let got = receive(rx.as_mut(), &pool, frames.len()).len() as u64;
        // The file is rewritten once the device is idle.
        let deadline = Instant::now() + Duration::from_secs(2);
        while b.device_drops() != Some(2000 - got) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(b.device_drops(), Some(2000 - got), "received {got}");
        assert!(2000 - got > 255 && got > 0, "received {got}");
        assert_eq!(a.device_drops(), Some(0));
        drop((tx, rx));
    }
    assert_eq!(model.live_objects(), 0);
}

fn traffic_both_ways(kind: &str) {
    let (_g, model) = setup();
    {
        // A takes every frame to its MAC (TCP included, which the default leaves to Linux).
        let a = open(
            &format!("{kind}:mlx5_0/1"),
            &opts(1, &[]).default_rules(rawpkt::DefaultRules::WholeMac),
        );
        let b = open(&format!("{kind}:mdl1"), &opts(1, &[]));
        let pool = pool();
        let mut a_tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut b_tx = b.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut a_rx = a.rx_queue(0, &pool, &qcfg()).unwrap();
        let mut b_rx = b.rx_queue(0, &pool, &qcfg()).unwrap();

        let to_b: Vec<Vec<u8>> = (0..300).map(|i| udp(MAC1, [10, 0, 1, i as u8], 1000 + i, 53)).collect();
        let wire0 = model.wire_frames("mlx5_0");
        send(a_tx.as_mut(), &pool, &to_b);
        assert_eq!(model.wire_frames("mlx5_0") - wire0, 300);
        let got = receive(b_rx.as_mut(), &pool, 300);
        same_frames(&got, &to_b, &format!("{kind}: a -> b"));

        let to_a: Vec<Vec<u8>> = (0..300).map(|i| tcp(MAC0, [10, 0, 2, i as u8], 2000 + i, 80)).collect();
        send(b_tx.as_mut(), &pool, &to_a);
        same_frames(&receive(a_rx.as_mut(), &pool, 300), &to_a, &format!("{kind}: b -> a"));

        assert_eq!(a_tx.stats().packets, 300);
        assert_eq!(b_rx.stats().packets, 300);
        assert_eq!(b_rx.stats().bytes, to_b.iter().map(|f| f.len() as u64).sum::<u64>());
        // Everything comes back to the pool once the queues are gone.
        drop((a_tx, b_tx, a_rx, b_rx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
    assert_eq!(model.live_objects(), 0, "{kind}: objects left after teardown");
}

/// A queue id is checked in both directions: one the port does not have, or one whose queue
/// still lives, is a configuration error; the id is free again once its queue is gone.
fn queue_ids_are_checked(kind: &str) {
    let (_g, model) = setup();
    {
        let a = open(&format!("{kind}:mlx5_0/1"), &opts(2, &[]));
        let pool = pool();
        let config_error = |r: Result<(), rawpkt::Error>, want: &str| match r {
            Err(e) if e.kind() == rawpkt::ErrorKind::Config => {
                let m = e.message();
                assert!(m.contains(want) && !m.contains('\n'), "{kind}: {m}")
            }
            other => panic!("{kind}: expected a config error saying `{want}`, got {other:?}"),
        };
        config_error(
            a.rx_queue(2, &pool, &qcfg()).map(|_| ()),
            "receive queue 2 does not exist",
        );
        config_error(
            a.tx_queue(1024, &pool, &qcfg()).map(|_| ()),
            "send queue 1024 does not exist",
        );
        let tx = a.tx_queue(7, &pool, &qcfg()).unwrap();
        let rx = a.rx_queue(1, &pool, &qcfg()).unwrap();
        config_error(a.tx_queue(7, &pool, &qcfg()).map(|_| ()), "send queue 7 already exists");
        config_error(
            a.rx_queue(1, &pool, &qcfg()).map(|_| ()),
            "receive queue 1 already exists",
        );
        let last = a.tx_queue(1023, &pool, &qcfg()).unwrap();
        drop((tx, rx));
        let again = (
            a.tx_queue(7, &pool, &qcfg()).unwrap(),
            a.rx_queue(1, &pool, &qcfg()).unwrap(),
        );
        drop((again, last));
    }
    assert_eq!(model.live_objects(), 0, "{kind}: objects left after teardown");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn queue_ids_are_checked_direct_verbs() {
    queue_ids_are_checked("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn queue_ids_are_checked_ibverbs() {
    queue_ids_are_checked("verbs");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn traffic_both_ways_direct_verbs() {
    traffic_both_ways("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn traffic_both_ways_ibverbs() {
    traffic_both_ways("verbs");
}

fn rules_steer_exactly_the_matching_frames(kind: &str) {
    let (_g, model) = setup();
    {
        let port = open(&format!("{kind}:mlx5_1/1"), &opts(1, &["ipv4 udp dst-port 4789"]));
        let pool = pool();
        let mut rx = port.rx_queue(0, &pool, &qcfg()).unwrap();
        let linux0 = model.linux_frames("mlx5_1");
        let mut want = Vec::new();
        for i in 0..50u16 {
            // Matches the rule (to another MAC): ours, Linux does not see it.
            let vx = udp(OTHER_MAC, [10, 9, 0, i as u8], 5000 + i, 4789);
            model.inject("mlx5_1", &vx);
            want.push(vx);
            // Another port to another MAC: Linux's.
            model.inject("mlx5_1", &udp(OTHER_MAC, [10, 9, 1, i as u8], 5000 + i, 53));
            // UDP to our MAC (the default rules): ours.
            let own = udp(MAC1, [10, 9, 2, i as u8], 6000 + i, 53);
            model.inject("mlx5_1", &own);
            want.push(own);
            // TCP to our MAC (ssh to the netdev's address): Linux keeps it under the defaults.
            model.inject("mlx5_1", &tcp(MAC1, [10, 9, 2, i as u8], 6000 + i, 22));
        }
        let mut got = receive(rx.as_mut(), &pool, want.len());
        std::thread::sleep(Duration::from_millis(20));
        got.extend(receive(rx.as_mut(), &pool, 0));
        got.sort();
        want.sort();
        same_frames(&got, &want, &format!("{kind}: exactly the matching frames"));
        assert_eq!(
            model.linux_frames("mlx5_1") - linux0,
            100,
            "{kind}: the rest reach Linux"
        );
        // Broadcast: copied to us and Linux keeps it (the multicast default rule, DONT_TRAP).
        let linux1 = model.linux_frames("mlx5_1");
        model.inject("mlx5_1", &udp([0xff; 6], [10, 9, 3, 1], 67, 68));
        assert_eq!(receive(rx.as_mut(), &pool, 1).len(), 1);
        assert_eq!(model.linux_frames("mlx5_1") - linux1, 1);
    }
    // With the port gone, Linux gets everything again.
    let linux0 = model.linux_frames("mlx5_1");
    model.inject("mlx5_1", &tcp(MAC1, [10, 9, 4, 1], 1, 22));
    assert_eq!(model.linux_frames("mlx5_1") - linux0, 1);
    assert_eq!(model.live_objects(), 0);
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn rules_steer_exactly_the_matching_frames_direct_verbs() {
    rules_steer_exactly_the_matching_frames("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn rules_steer_exactly_the_matching_frames_ibverbs() {
    rules_steer_exactly_the_matching_frames("verbs");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn rss_spreads_flows_evenly_over_four_queues() {
    let (_g, model) = setup();
    {
        // TCP flows to the port's MAC: the whole MAC (the default leaves TCP to Linux).
        let port = open(
            "mlx5:mlx5_0/1",
            &opts(4, &[]).default_rules(rawpkt::DefaultRules::WholeMac),
        );
        let pool = pool();
        let cfg = QueueConfig::default().size(2048);
        let mut rxs: Vec<Box<dyn RxQueue>> = (0..4).map(|q| port.rx_queue(q, &pool, &cfg).unwrap()).collect();
        for i in 0..1000u32 {
            let ip = [10, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8];
            model.inject("mlx5_0", &tcp(MAC0, ip, 1024 + (i as u16 * 7), 443));
        }
        let mut counts = [0usize; 4];
        let deadline = Instant::now() + Duration::from_secs(3);
        while counts.iter().sum::<usize>() < 1000 && Instant::now() < deadline {
            for (q, rx) in rxs.iter_mut().enumerate() {
                counts[q] += receive(rx.as_mut(), &pool, 0).len();
                let mut b = Burst::new(&pool, 64);
                counts[q] += rx.rx_burst(&mut b).unwrap();
            }
        }
        assert_eq!(counts.iter().sum::<usize>(), 1000, "{counts:?}");
        for c in counts {
            assert!((188..=312).contains(&c), "not within 25% of even: {counts:?}");
        }
    }
    assert_eq!(model.live_objects(), 0);
}

/// A port past the device's ports is a usage error that says how many ports there are.
#[test]
fn a_port_the_device_does_not_have_is_a_usage_error() {
    let (_g, model) = setup();
    for spec in ["mlx5:mlx5_0/2", "verbs:mlx5_1/9"] {
        let e = open_with(spec, &PortOptions::default()).unwrap_err();
        let m = e.to_string();
        assert!(e.is_usage(), "{spec}: {m}");
        assert!(
            m.contains("has 1 port; there is no port") && !m.contains('\n'),
            "{spec}: {m}"
        );
    }
    assert_eq!(model.live_objects(), 0);
    let lib = common::model_verbs_lib();
    let out = std::process::Command::new(common::tool("pktgen"))
        .env("RAWPKT_LIBIBVERBS", lib)
        .env("RAWPKT_LIBMLX5", lib)
        .args(["--port", "mlx5:mlx5_0/2", "--count", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("mlx5_0 has 1 port; there is no port 2"), "{err}");
}

#[test]
fn no_such_device_lists_what_exists() {
    let (_g, _model) = setup();
    for spec in ["mlx5:nosuch0", "mlx5:mlx5_7/1", "verbs:eth42"] {
        let e = open_with(spec, &PortOptions::default()).unwrap_err();
        // Not the command's fault, and no system call failed: rawpkt looked the name up in the
        // device list, so there is no errno to keep.
        assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
        assert_eq!(e.os_error(), None, "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("mlx5_0/1 (mdl0, 0000:3b:00.0)")
                && e.contains("mlx5_1/1 (mdl1, 0000:3b:00.1)")
                && e.contains("mlx5_2/1 (mdl2, 0000:3c:00.0)")
                && e.contains("mlx5_3/1 (mdl3, 0000:3c:00.1)")
                && !e.contains('\n'),
            "{spec}: {e}"
        );
    }
}

/// Drops CAP_NET_RAW from the calling thread's effective set (capset(2) acts per thread).
fn drop_cap_net_raw() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs, as capabilities(7) says.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()), 0);
        data[0].effective &= !(1 << CAP_NET_RAW);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()), 0);
    }
}

#[test]
fn missing_cap_net_raw_says_how_to_get_it() {
    let (_g, model) = setup();
    for kind in ["mlx5", "verbs"] {
        let spec = format!("{kind}:mlx5_0/1");
        let msg = std::thread::spawn(move || {
            drop_cap_net_raw();
            let port = open_with(&spec, &PortOptions::default()).unwrap();
            let pool = pool();
            let tx = port.tx_queue(0, &pool, &qcfg()).map(|_| ()).unwrap_err().to_string();
            let rx = port.rx_queue(0, &pool, &qcfg()).map(|_| ()).unwrap_err().to_string();
            (tx, rx)
        })
        .join()
        .unwrap();
        for e in [msg.0, msg.1] {
            assert!(
                e.contains("CAP_NET_RAW is needed: run as root or `setcap cap_net_raw,cap_ipc_lock+ep BINARY`"),
                "{kind}: {e}"
            );
        }
    }
    // The model's switch behaves the same on any thread.
    model.set("cap_net_raw", "0");
    let port = open("mlx5:mlx5_0/1", &PortOptions::default());
    let e = port.tx_queue(0, &pool(), &qcfg()).map(|_| ()).unwrap_err();
    // The errno the library answered with stays the error's source.
    assert_eq!(e.os_error(), Some(libc::EPERM), "{e:?}");
    assert!(std::error::Error::source(&e).is_some() && !e.is_usage(), "{e:?}");
    assert_eq!(e.kind(), rawpkt::ErrorKind::Device);
    let e = e.to_string();
    assert!(e.contains("CAP_NET_RAW is needed"), "{e}");
    model.set("cap_net_raw", "1");
    drop(port);
    assert_eq!(model.live_objects(), 0);
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn without_direct_verbs_mlx5_falls_back_to_ibverbs() {
    let (_g, model) = setup();
    model.set("dv", "0");
    {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        assert!(a.describe().unwrap().contains("ibverbs datapath"), "{:?}", a.describe());
        let b = open("mlx5:mlx5_1/1", &opts(1, &[]));
        let pool = pool();
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
        let frames: Vec<Vec<u8>> = (0..10).map(|i| udp(MAC1, [10, 0, 0, i], 1, 2)).collect();
        send(tx.as_mut(), &pool, &frames);
        same_frames(&receive(rx.as_mut(), &pool, 10), &frames, "fallback");
    }
    model.set("dv", "1");
    assert_eq!(model.live_objects(), 0);
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn a_rule_the_nic_refuses_is_named() {
    let (_g, model) = setup();
    model.set("refuse_flow", "ipv6");
    {
        // No default rules: the default's IPv6 UDP rule would be refused first.
        let port = open(
            "mlx5:mlx5_0/1",
            &opts(1, &["ipv4 udp dst-port 4789", "ipv6 tcp dst-port 179"]).default_rules(rawpkt::DefaultRules::None),
        );
        let e = port.rx_queue(0, &pool(), &qcfg()).map(|_| ()).unwrap_err();
        assert_eq!(e.os_error(), Some(libc::EOPNOTSUPP), "{e:?}");
        assert!(!e.is_usage(), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("the NIC refused rule `ipv6 tcp dst-port 179`"), "{e}");
        assert!(!e.contains("4789") && !e.contains('\n'), "{e}");
    }
    model.set("refuse_flow", "");
    assert_eq!(model.live_objects(), 0);
    // A rule verbs cannot express is refused before the device is touched.
    let e = open_with("mlx5:mlx5_0/1", &opts(1, &["ipv4 proto 47"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rule `ipv4 proto 47`"), "{e}");
    // Promiscuous replaces the rules, so rules of one's own beside it are a mistake, not ignored.
    let both = (opts(1, &["udp dst-port 4789"])).promiscuous(true);
    let e = open_with("mlx5:mlx5_0/1", &both).unwrap_err().to_string();
    assert!(e.contains("both rules and promiscuous") && !e.contains('\n'), "{e}");
}

/// Against the system's rdma-core when installed: every symbol resolves, and the device list
/// comes back (empty on a machine without RDMA hardware).
#[test]
fn system_rdma_core_loads_when_installed() {
    match rawpkt::mlx5::probe("libibverbs.so.1", "libmlx5.so.1") {
        Ok(devices) => eprintln!("system rdma-core: devices {devices:?}"),
        Err(e) => assert!(e.to_string().contains("rdma-core is not installed"), "{e}"),
    }
}

/// Runs `cmd` (pktgen) with the model library's NIC thread on a CPU of its own, as pktgen does
/// for its built-in `model:` ports, and pktgen on one other CPU.
///
/// pktgen plans its CPUs (one per transmit core, then one for a receiver thread) for a NIC
/// that polls in hardware; it cannot tell that an `mlx5:` port is the model library, whose
/// NIC thread spins on a host CPU too. On a 2-CPU machine that is three spinning threads on two
/// CPUs, and the receiver, a thread of its own that does not pace the sender, is off its CPU
/// for 10 to 85 ms at a time under load while the sender (catching up on its rate credit) and
/// the NIC thread go on filling the 4096-entry receive queue: the model then counts
/// `rx_out_of_buffer` drops, as a real NIC would for a receiver descheduled that long. With
/// pktgen on one CPU the receiver runs in the transmit loop (pktgen's layout when it has no CPU
/// to spare), so nothing is sent while it is descheduled: the receive queue only ever holds
/// what the send queue had in flight (at most ~3,700 frames on the DV path, ~1,100 through
/// ibverbs), and every frame lost is a fault of the datapath, not of the scheduler.
fn with_model_nic_cpu(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let cpus = common::allowed_cpus();
    let (Some(&first), Some(&last)) = (cpus.first(), cpus.last()) else {
        return;
    };
    if first == last {
        return; // one CPU: everything shares it, and the receiver is in the transmit loop anyway
    }
    cmd.env("RAWPKT_MODEL_CPU", last.to_string());
    // SAFETY: cpu_set_t is plain data (all zeroes is the empty set) and `first` is below
    // CPU_SETSIZE (it came from a cpu_set_t).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut set);
        set
    };
    // SAFETY: between fork and exec the closure only makes the sched_setaffinity system call,
    // which is async-signal-safe, on a set built before the fork; the NIC thread the model
    // library starts in the child pins itself to RAWPKT_MODEL_CPU, outside this set.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// pktgen from `KIND:mlx5_0/1` to `KIND:mlx5_1/1` on the model library (it stands in for
/// rdma-core in the child process): 20 000 frames at 100 kpps, JSON, and `args`; without the
/// latency stream pktgen sends beside the load by default, so that the port counts are the 20 000.
fn pktgen_on_pair(kind: &str, args: &[&str]) -> std::process::Output {
    let lib = common::model_verbs_lib();
    let mut cmd = std::process::Command::new(common::tool("pktgen"));
    cmd.env("RAWPKT_LIBIBVERBS", lib)
        .env("RAWPKT_LIBMLX5", lib)
        .args([
            "--port",
            &format!("{kind}:mlx5_0/1"),
            "--rx-port",
            &format!("{kind}:mlx5_1/1"),
        ])
        .args(["--count", "20000", "--rate", "100k", "--json", "--latency-rate", "off"])
        .args(args);
    with_model_nic_cpu(&mut cmd);
    cmd.output().expect("run pktgen")
}

/// pktgen, as a user runs it, on a ConnectX pair. Every frame sent reaches the receiving port,
/// whose default rules steal what is addressed to its MAC, which pktgen addresses them to with
/// no --dst-mac (it used to send to 02:00:00:00:00:02 and report 100 % lost); latency
/// percentiles come back from the stamps.
fn pktgen_on(kind: &str) {
    let (_g, _model) = setup();
    let out = pktgen_on_pair(kind, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pktgen on {kind}: failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("pktgen printed a summary");
    let s: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
    assert_eq!(s["type"], "summary", "{s}");
    assert_eq!(s["tx_packets"], 20_000, "{s}");
    assert_eq!(s["rx_packets"], s["tx_packets"], "{kind}: {s}");
    assert_eq!(s["lost"], 0, "{s}");
    let lat = &s["latency_ns"];
    assert_eq!(lat["samples"], 20_000, "{s}");
    assert!(
        lat["p50"].as_u64().expect("p50") <= lat["p99"].as_u64().expect("p99"),
        "{s}"
    );
    if kind == "verbs" {
        assert!(!stderr.contains("Direct Verbs unavailable"), "{stderr}");
    }
}

/// Ctrl-C as soon as pktgen runs, on ports that take 15 to 120 ms to open (rdma-core is loaded,
/// the devices opened): pktgen installed its handler after opening them, and a Ctrl-C before
/// that killed it with no summary. Now it stops in order, prints the summary and exits 0.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn pktgen_takes_a_ctrl_c_while_it_opens_mlx5_ports() {
    let (_g, _model) = setup();
    let lib = common::model_verbs_lib();
    for run in 0..5 {
        let child = std::process::Command::new(common::tool("pktgen"))
            .env("RAWPKT_LIBIBVERBS", lib)
            .env("RAWPKT_LIBMLX5", lib)
            .args(["--port", "mlx5:mlx5_0/1", "--rx-port", "mlx5:mlx5_1/1", "--json"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run pktgen");
        common::sigint_at_start(child.id());
        let out = common::output_within(child, Duration::from_secs(60), "pktgen after an early Ctrl-C");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "run {run}: {:?}: {stderr}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let s: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("a summary")).unwrap();
        assert_eq!(s["type"], "summary", "run {run}: {s}");
    }
}

/// An explicit --dst-mac wins over the receive port's; sent elsewhere, nothing arrives, which
/// pktgen says in one line, exiting 1.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn pktgen_says_when_nothing_arrives_at_an_mlx5_port() {
    let (_g, _model) = setup();
    let other = OTHER_MAC.map(|b| format!("{b:02x}")).join(":");
    let out = pktgen_on_pair("mlx5", &["--dst-mac", &other]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let want = format!(
        "pktgen: none of the 20000 frames sent arrived at --rx-port mlx5:mlx5_1/1; they were addressed to {other}"
    );
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("pktgen: ")).collect();
    assert_eq!(said, [want.as_str()], "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let s: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("a summary")).unwrap();
    assert_eq!(
        (s["tx_packets"].as_u64(), s["rx_packets"].as_u64()),
        (Some(20_000), Some(0)),
        "{s}"
    );
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn pktgen_runs_on_mlx5_ports_direct_verbs() {
    pktgen_on("mlx5");
}

#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn pktgen_runs_on_mlx5_ports_ibverbs() {
    pktgen_on("verbs");
}

/// The send QP is created for what the queue inlines (`max_inline_data` = `tx_inline`), so
/// rdma-core sizes its WQEs for it and refuses what the largest send WQE cannot hold: 908 bytes
/// fit (48 bytes of control and Ethernet segment, a 4-byte inline header, 960 in all), 909 do
/// not, although the datapath itself could build a WQE for up to 930.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn the_send_qp_is_created_for_what_the_queue_inlines() {
    let (_g, model) = setup();
    {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        let b = open("mlx5:mdl1", &opts(1, &[]));
        let pool = pool();
        let big = qcfg().tx_inline(908);
        let mut tx = a.tx_queue(0, &pool, &big).unwrap();
        let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
        let frames: Vec<Vec<u8>> = (0..100).map(|i| udp(MAC1, [10, 0, 3, i as u8], 3000 + i, 53)).collect();
        send(tx.as_mut(), &pool, &frames);
        same_frames(&receive(rx.as_mut(), &pool, 100), &frames, "inlined whole");
        let too_big = qcfg().tx_inline(909);
        let e = a
            .tx_queue(1, &pool, &too_big)
            .err()
            .expect("909 inline bytes refused")
            .to_string();
        assert!(
            e.contains("tx_inline 909") && e.contains("refuses") && !e.contains('\n'),
            "{e}"
        );
        drop((tx, rx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
    assert_eq!(model.live_objects(), 0);
}

/// An IPv4/UDP frame to `dst` behind two VLAN tags (802.1ad outer, 802.1Q inner): 22 bytes of
/// L2 header.
fn qinq_udp(dst: [u8; 6], sport: u16) -> Vec<u8> {
    let vid = |v: u16| etherparse::VlanId::try_new(v).unwrap();
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst)
        .double_vlan(vid(100), vid(200))
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(sport, 53);
    let payload = [0x5au8; 30];
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, &payload).unwrap();
    v
}

/// Opens `spec`, sends plain and QinQ UDP frames from it to mdl1, and returns the port's
/// description and (frames received at mdl1, frames on the wire, TX error CQEs).
fn send_through(model: &Model, spec: &str) -> (String, usize, u64, u64) {
    let a = open(spec, &opts(1, &[]));
    let b = open("mlx5:mdl1", &opts(1, &[]));
    let pool = pool();
    let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
    let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
    let plain: Vec<Vec<u8>> = (0..64).map(|i| udp(MAC1, [10, 0, 4, i as u8], 4000 + i, 53)).collect();
    let tagged: Vec<Vec<u8>> = (0..16).map(|i| qinq_udp(MAC1, 5000 + i)).collect();
    let wire0 = model.wire_frames("mlx5_0");
    let mut out = Burst::new(&pool, 64);
    for f in plain.iter().chain(&tagged) {
        assert!(out.push_copy(f));
        if out.len() == 32 {
            while !out.is_empty() {
                tx.tx_burst(&mut out).unwrap();
            }
        }
    }
    while !out.is_empty() {
        tx.tx_burst(&mut out).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while tx.in_flight() > 0 && Instant::now() < deadline {
        tx.reclaim().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let got = receive(rx.as_mut(), &pool, plain.len());
    let wire = model.wire_frames("mlx5_0") - wire0;
    let errors = tx.stats().errors.total();
    let d = a.describe().unwrap();
    drop((out, tx, rx));
    assert_eq!(pool.free_count(), pool.capacity(), "{spec}: buffers lost");
    (d, got.len(), wire, errors)
}

/// A device that answers DevX says which headers it needs (HCA caps, then the NIC vport
/// context), the port inlines exactly those, and the model (which enforces the same mode)
/// sends every frame, QinQ ones with all 22 bytes of L2 header inline in L2 mode.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn the_inline_mode_is_asked_of_the_device_through_devx() {
    let (_g, model) = setup();
    for (mode, from) in [
        ("none", "DevX HCA caps"),
        ("l2", "DevX HCA caps"),
        ("ip", "DevX NIC vport context"),
        ("tcp-udp", "DevX NIC vport context"),
    ] {
        model.set("inline.mlx5_0", mode);
        let (d, received, wire, errors) = send_through(model, "mlx5:mlx5_0/1");
        assert!(d.contains(&format!("inline headers: {mode}, from {from}")), "{d}");
        assert_eq!((received, wire, errors), (64, 80, 0), "mode {mode}: {d}");
    }
    assert_eq!(model.live_objects(), 0);
}

/// Without DevX the port goes by DPDK's PCI-device table: a ConnectX-4 Lx (0x1015) inlines L2
/// headers, which its vport needs; a ConnectX-5 id (0x1017) on a vport that wants IP headers is
/// the case the table gets wrong: the model refuses its WQEs (nothing reaches the wire, the
/// errors are counted, no buffer is lost), and the `inline=` option puts it right.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn without_devx_the_pci_table_decides_and_the_option_overrides_it() {
    let (_g, model) = setup();
    model.set("devx.mlx5_0", "0");
    model.set("inline.mlx5_0", "l2");
    model.set("pci_device.mlx5_0", "0x1015");
    let (d, received, wire, errors) = send_through(model, "mlx5:mlx5_0/1");
    assert!(d.contains("inline headers: l2, from the PCI device table"), "{d}");
    assert_eq!((received, wire, errors), (64, 80, 0), "{d}");

    model.set("pci_device.mlx5_0", "0x1017");
    model.set("inline.mlx5_0", "ip");
    let (d, received, wire, errors) = send_through(model, "mlx5:mlx5_0/1");
    assert!(d.contains("inline headers: none, from the PCI device table"), "{d}");
    assert_eq!((received, wire), (0, 0), "{d}");
    assert!(errors > 0, "{d}");

    let (d, received, wire, errors) = send_through(model, "mlx5:mlx5_0/1,inline=ip");
    assert!(d.contains("inline headers: ip, from the port's inline= option"), "{d}");
    assert_eq!((received, wire, errors), (64, 80, 0), "{d}");

    for (spec, want) in [
        ("mlx5:mlx5_0/1,inline=l3", "inline=l3: expected none, l2, ip or tcp-udp"),
        ("mlx5:mlx5_0/1,speed=9", "unknown option `speed=9`"),
        ("verbs:mlx5_0/1,inline=l2", "inline= is for the Direct Verbs datapath"),
    ] {
        let Err(e) = open_with(spec, &opts(1, &[])) else {
            panic!("{spec} opened")
        };
        let e = e.to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{spec}: {e}");
    }
    assert_eq!(model.live_objects(), 0);
}

/// A device's fatal error (IBV_EVENT_DEVICE_FATAL, injected) fails every queue of the port with
/// one clear error, counted in the queues' stats, and every buffer comes back; a link change is
/// counted on the port.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn a_fatal_device_error_fails_the_queues_and_loses_no_buffer() {
    let (_g, model) = setup();
    // Both datapaths: Direct Verbs, and the ibverbs fallback (`verbs:`).
    for kind in ["mlx5", "verbs"] {
        // The event is injected once per device; each kind gets a device of its own.
        let (dev_a, dev_b) = if kind == "mlx5" {
            ("mlx5_2", "mlx5_3")
        } else {
            ("mlx5_0", "mlx5_1")
        };
        let a = open(&format!("{kind}:{dev_a}/1"), &opts(1, &[]));
        let b = open(&format!("{kind}:{dev_b}/1"), &opts(1, &[]));
        let pool = pool();
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = a.rx_queue(0, &pool, &qcfg()).unwrap();
        let mut b_rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
        let peer = b.describe().unwrap();
        let mac = peer.split("MAC ").nth(1).unwrap()[..17].to_string();
        let dst: Vec<u8> = mac.split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        let frames: Vec<Vec<u8>> = (0..32)
            .map(|i| udp(dst[..].try_into().unwrap(), [10, 0, 5, i as u8], 6000 + i, 53))
            .collect();
        send(tx.as_mut(), &pool, &frames);
        assert_eq!(receive(b_rx.as_mut(), &pool, 32).len(), 32);

        model.set(&format!("async_event.{dev_a}"), "port_err");
        model.set(&format!("async_event.{dev_a}"), "port_active");
        model.set(&format!("async_event.{dev_a}"), "device_fatal");
        // Frames in flight when it dies: the device reads none of them any more.
        let mut out = Burst::new(&pool, 32);
        for f in &frames {
            assert!(out.push_copy(f));
        }
        let (mut tx_err, mut rx_err) = (None, None);
        let mut got = Burst::new(&pool, 64);
        let deadline = Instant::now() + Duration::from_secs(2);
        while (tx_err.is_none() || rx_err.is_none()) && Instant::now() < deadline {
            if tx_err.is_none() {
                tx_err = tx.tx_burst(&mut out).and_then(|_| tx.reclaim()).err();
            }
            if rx_err.is_none() {
                rx_err = rx.rx_burst(&mut got).err();
                got.clear();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(tx_err, Some(rawpkt::QueueError::DeviceFatal), "{kind}");
        assert_eq!(rx_err, Some(rawpkt::QueueError::DeviceFatal), "{kind}");
        assert_eq!(tx_err.unwrap().to_string().lines().count(), 1);
        assert_eq!((tx.stats().device_fatal, rx.stats().device_fatal), (1, 1), "{kind}");
        // It stays failed.
        assert_eq!(tx.reclaim().err(), Some(rawpkt::QueueError::DeviceFatal), "{kind}");
        let d = a.describe().unwrap();
        assert!(
            d.contains("2 link state changes") && d.contains("DEVICE FATAL"),
            "{kind}: {d}"
        );
        drop((out, got, tx, rx, b_rx));
        assert_eq!(pool.free_count(), pool.capacity(), "{kind}: buffers lost");
    }
    assert_eq!(model.live_objects(), 0);
}

/// An mlx5 port's receive timestamps are ns of the device clock: the CQEs' ticks converted with
/// the `hca_core_clock` that `ibv_query_device_ex` reports, and `Port::device_clock_ns` reads the
/// same clock through `ibv_query_rt_values_ex`; a frame's stamp falls between the reads before
/// it was sent and after it arrived. A verbs: port hands up no timestamps and has no such clock.
#[test]
fn mlx5_receive_timestamps_are_nanoseconds_of_the_device_clock() {
    let (_g, _model) = setup();
    let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
    let b = open("mlx5:mlx5_1/1", &opts(1, &[]));
    let v = open("verbs:mlx5_0/1", &opts(1, &[]));
    assert_eq!(v.device_clock_ns(), None);
    assert!(!a.shares_device_clock(&b), "two RDMA devices, two clocks");
    let pool = pool();
    let cfg = qcfg().rx_timestamps(true);
    let mut tx = a.tx_queue(0, &pool, &cfg).unwrap();
    let mut rx = b.rx_queue(0, &pool, &cfg).unwrap();
    let mut got = Burst::new(&pool, 1);
    for i in 0..10u16 {
        std::thread::sleep(Duration::from_millis(2));
        let before = a.device_clock_ns().expect("the model library reads its clock");
        send(tx.as_mut(), &pool, &[udp(MAC1, [10, 0, 3, 1], 3000 + i, 53)]);
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.is_empty() {
            assert!(Instant::now() < deadline, "frame {i} never arrived");
            rx.rx_burst(&mut got).unwrap();
        }
        let after = b.device_clock_ns().unwrap();
        assert!(got.packet(0).flags() & rawpkt::flags::TIMESTAMP != 0);
        let ts = got.packet(0).timestamp();
        assert!(before <= ts && ts <= after, "frame {i}: {before} <= {ts} <= {after} ns");
        got.clear();
    }
}

/// A striding receive queue on the Direct Verbs datapath through the model library
/// (`mlx5dv_create_wq` with the striding caps `mlx5dv_query_device` reports), with its CQ
/// uncompressed and compressed in the checksum/stride-index format (`mlx5dv_create_cq`,
/// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`): frames of one and of two strides (chained) arrive
/// identical, the pool is full after teardown; plain verbs ports refuse `rx_striding` in one line.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn striding_receive_queues_direct_verbs() {
    let (_g, model) = setup();
    for compressed in [false, true] {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        let b = open("mlx5:mdl1", &opts(1, &[]));
        let pool = pool();
        let striding = qcfg().rx_striding(true).rx_cqe_compression(compressed);
        let mut a_tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut b_rx = b.rx_queue(0, &pool, &striding).unwrap();
        // 60..1500-byte frames: strides of 1 KiB, so many take two and WQEs end in fillers.
        let to_b: Vec<Vec<u8>> = (0..400u16)
            .map(|i| {
                let mut f = udp(MAC1, [10, 0, 1, i as u8], 1000 + i, 53);
                f.resize(60 + usize::from(i) * 37 % 1441, i as u8);
                f
            })
            .collect();
        send(a_tx.as_mut(), &pool, &to_b[..200]);
        same_frames(&receive(b_rx.as_mut(), &pool, 200), &to_b[..200], "striding: first 200");
        send(a_tx.as_mut(), &pool, &to_b[200..]);
        same_frames(&receive(b_rx.as_mut(), &pool, 200), &to_b[200..], "striding: next 200");
        assert_eq!(b_rx.stats().errors.total(), 0);
        drop((a_tx, b_rx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
    assert_eq!(model.live_objects(), 0, "objects left after teardown");
    let v = open("verbs:mlx5_1/1", &opts(1, &[]));
    let pool = pool();
    let cfg = qcfg().rx_striding(true);
    let e = v.rx_queue(0, &pool, &cfg).err().unwrap().to_string();
    assert!(
        e.contains("rx_striding needs the Direct Verbs datapath") && !e.contains('\n'),
        "{e}"
    );
}

/// Frames longer than a buffer through the mlx5 backend on the model library: with 1024-byte
/// buffers a 1000..1442-byte frame is a chain of two, sent as one multi-segment SEND by the DV
/// datapath and received over eleven-segment receive WQEs (`rx_max_frame`, the WQ's `max_sge`);
/// 9000-byte frames from the wire arrive whole, their 802.1Q tag stripped and handed up
/// (`rx_vlan_strip`). The ibverbs fallback refuses `rx_max_frame`, drops a chain and counts it.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn chained_frames_and_stripped_tags_through_the_model_library() {
    let (_g, model) = setup();
    {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        let b = open("mlx5:mdl1", &opts(1, &[]));
        let pool = Pool::new(PoolConfig::default().buffers(8192).buf_size(1024).headroom(128)).unwrap();
        let q = qcfg().rx_max_frame(9000).rx_vlan_strip(true);
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = b.rx_queue(0, &pool, &q).unwrap();
        let frames: Vec<Vec<u8>> = (0..200u16)
            .map(|i| {
                let mut f = udp(MAC1, [10, 0, 3, i as u8], 3000 + i, 53);
                f.extend((0..1000 + usize::from(i) * 2).map(|k| (k as u8) ^ (i as u8)));
                f
            })
            .collect();
        let mut out = Burst::new(&pool, 32);
        for chunk in frames.chunks(16) {
            for f in chunk {
                assert!(out.push_frame(f));
                assert!(out.packet(out.len() - 1).is_chained());
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while !out.is_empty() {
                tx.tx_burst(&mut out).unwrap();
                assert!(Instant::now() < deadline, "send stalled");
            }
        }
        // Every frame sent is on the wire before the two jumbo frames come in (one tagged).
        let deadline = Instant::now() + Duration::from_secs(2);
        while tx.in_flight() > 0 && Instant::now() < deadline {
            tx.reclaim().unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(tx.in_flight(), 0, "completions missing");
        let jumbo = |tag: Option<u16>| {
            let mut f = udp(MAC1, [10, 0, 4, 1], 4000, 53);
            f.extend((0..8958usize).map(|k| (k * 7) as u8));
            if let Some(t) = tag {
                f.splice(12..12, [0x81, 0x00, (t >> 8) as u8, t as u8]);
            }
            f
        };
        model.inject("mlx5_1", &jumbo(None));
        model.inject("mlx5_1", &jumbo(Some(0x2abc)));
        let mut got = Burst::new(&pool, 64);
        let mut seen: Vec<(Vec<u8>, u32, u16)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while seen.len() < frames.len() + 2 && Instant::now() < deadline {
            rx.rx_burst(&mut got).unwrap();
            for i in 0..got.len() {
                let mut f = vec![0u8; got.packet(i).len()];
                got.copy_frame(i, &mut f).unwrap();
                seen.push((f, got.packet(i).flags(), got.packet(i).vlan_tci()));
            }
            got.clear();
            tx.reclaim().unwrap();
        }
        assert_eq!(seen.len(), frames.len() + 2);
        for (k, f) in frames.iter().enumerate() {
            assert!(
                seen[k].0 == *f,
                "frame {k}: {} bytes {:02x?}.. want {} {:02x?}..",
                seen[k].0.len(),
                &seen[k].0[..48.min(seen[k].0.len())],
                f.len(),
                &f[..48]
            );
            assert_eq!(seen[k].1 & rawpkt::flags::VLAN_STRIPPED, 0);
        }
        let (plain, tagged) = (&seen[frames.len()], &seen[frames.len() + 1]);
        assert!(plain.0 == jumbo(None) && plain.1 & rawpkt::flags::VLAN_STRIPPED == 0);
        assert!(tagged.0 == jumbo(None), "the tag is stripped");
        assert_eq!(
            (tagged.1 & rawpkt::flags::VLAN_STRIPPED, tagged.2),
            (rawpkt::flags::VLAN_STRIPPED, 0x2abc)
        );
        drop((out, got, tx, rx));
        assert_eq!(pool.free_count(), pool.capacity());

        // The ibverbs fallback: one line for rx_max_frame, a counted drop for a chain.
        let v = open("verbs:mlx5_2/1", &opts(1, &[]));
        let err = v.rx_queue(0, &pool, &q).err().expect("refused").to_string();
        assert!(err.contains("need the Direct Verbs datapath"), "{err}");
        let mut vtx = v.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut out = Burst::new(&pool, 4);
        assert!(out.push_frame(&frames[0]));
        assert_eq!(vtx.tx_burst(&mut out).unwrap(), 1);
        assert_eq!(vtx.stats().drops, 1);
        drop((out, vtx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
    assert_eq!(model.live_objects(), 0);
}

/// pktgen through the model library in every receive mode (`--rx-mode`): every frame sent
/// arrives; a `verbs:` port, which has no receive modes, refuses one in one line (exit 2).
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn pktgen_receives_what_it_sent_in_every_receive_mode_on_mlx5_ports() {
    let (_g, _model) = setup();
    for (mode, _, _) in rawpkt::QueueConfig::RX_MODES {
        let out = pktgen_on_pair("mlx5", &["--rx-mode", mode]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--rx-mode {mode}: failed: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().expect("pktgen printed a summary");
        let s: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
        assert_eq!(s["tx_packets"], 20_000, "{mode}: {s}");
        assert_eq!(s["rx_packets"], s["tx_packets"], "{mode}: {s}");
        assert_eq!(
            (s["lost"].as_u64(), s["rx_errors"].as_u64()),
            (Some(0), Some(0)),
            "{mode}: {s}"
        );
    }
    let out = pktgen_on_pair("verbs", &["--rx-mode", "compressed"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("rawpkt: warning")).collect();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("has no receive modes"), "{stderr}");
}

/// A frame of `len` bytes to `dst` (UDP, payload padded).
fn udp_len(dst: [u8; 6], len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst)
        .ipv4([10, 0, 9, 1], [10, 0, 0, 2], 64)
        .udp(4000, 4001);
    let payload = vec![0x3cu8; len - 42];
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, &payload).unwrap();
    v
}

/// The MTU of the netdev changes while the port is open (`mtu.mlx5_0`: the fake sysfs `mtu`
/// and the device's, as `ip link set mtu` and mlx5e's `mlx5e_change_mtu` would): the port's
/// events watcher re-reads it (every 250 ms; DPDK hears link changes through netlink) and the
/// open send queue takes frames of the raised size, then drops them itself once it is lowered
/// again. Bounded waits only: the watcher's period is the whole delay. A frame sent between the
/// device's change and the watcher's next read fails on the device (one reset at most); after
/// that the queue drops such frames itself and nothing more fails.
#[test]
fn a_raised_mtu_is_used_without_reopening() {
    let (_g, model) = setup();
    let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
    let b = open("mlx5:mlx5_1/1", &opts(1, &[]));
    let pool = pool();
    let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
    let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
    let big = udp_len(MAC1, 1600);
    let mut got = Burst::new(&pool, 64);
    let send_one = |tx: &mut Box<dyn TxQueue>| {
        let mut out = Burst::new(&pool, 1);
        assert!(out.push_copy(&big));
        tx.tx_burst(&mut out).unwrap();
        let _ = tx.reclaim();
    };
    send_one(&mut tx);
    assert_eq!(tx.stats().drops, 1, "longer than MTU 1500 + 18: dropped by the queue");
    model.set("mtu.mlx5_0", "1600");
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.is_empty() {
        assert!(Instant::now() < deadline, "the raised MTU was never taken");
        send_one(&mut tx);
        std::thread::sleep(Duration::from_millis(20));
        rx.rx_burst(&mut got).unwrap();
    }
    assert_eq!(got.packet(0).len(), 1600);
    model.set("mtu.mlx5_0", "1500");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        assert!(Instant::now() < deadline, "the lowered MTU was never taken");
        std::thread::sleep(Duration::from_millis(20));
        let s = *tx.stats();
        send_one(&mut tx);
        // Dropped by the queue itself: not handed to the device, no reset.
        if tx.stats().packets == s.packets && tx.stats().recoveries == s.recoveries {
            break;
        }
    }
    let recoveries = tx.stats().recoveries;
    for _ in 0..10 {
        send_one(&mut tx);
    }
    std::thread::sleep(Duration::from_millis(20));
    let _ = tx.reclaim();
    assert_eq!(
        tx.stats().recoveries,
        recoveries,
        "dropped by the queue, not failed: {:?}",
        tx.stats()
    );
    got.clear();
}

/// Receives on every queue of `rxs` until `n` frames came (or 3 s passed): (queue, RSS hash,
/// frame) of each.
fn receive_hashed(rxs: &mut [Box<dyn RxQueue>], pool: &Rc<Pool>, n: usize) -> Vec<(usize, u32, Vec<u8>)> {
    let mut got = Vec::new();
    let mut b = Burst::new(pool, 64);
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < n && Instant::now() < deadline {
        for (q, rx) in rxs.iter_mut().enumerate() {
            rx.rx_burst(&mut b).unwrap();
            for i in 0..b.len() {
                got.push((q, b.packet(i).rss_hash(), b.data(i).to_vec()));
            }
            b.clear();
        }
    }
    got
}

/// Toeplitz with the default key (the one the port's hash QPs use) over `input`.
fn toeplitz(input: &[u8]) -> u32 {
    rawpkt_wire::rss::ToeplitzTable::new(&rawpkt_wire::rss::DEFAULT_KEY).hash(input)
}

/// UDP flows between two IPv4 addresses that differ only in their ports (pktgen's `--flows`)
/// spread over the queues: each frame is hashed over the addresses and its UDP ports (a hash QP
/// of its own, as DPDK's `mlx5_flow_expand_rss` gives eth/ipv4/udp its flow). With one IPv4
/// hash QP hashing TCP ports, every UDP frame would hash alike and one queue take them all.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn udp_flows_spread_over_queues() {
    let (_g, model) = setup();
    {
        let port = open("mlx5:mlx5_1/1", &opts(4, &[]));
        let pool = pool();
        let cfg = QueueConfig::default().size(512);
        let mut rxs: Vec<Box<dyn RxQueue>> = (0..4).map(|q| port.rx_queue(q, &pool, &cfg).unwrap()).collect();
        for i in 0..64u16 {
            model.inject("mlx5_1", &udp(MAC1, [10, 0, 7, 1], 1024 + i, 9000));
        }
        let got = receive_hashed(&mut rxs, &pool, 64);
        assert_eq!(got.len(), 64);
        let mut used = [false; 4];
        for (q, hash, f) in &got {
            used[*q] = true;
            // Source and destination address, then the UDP ports (the TIR's input order).
            let mut input = Vec::new();
            input.extend_from_slice(&f[26..34]);
            input.extend_from_slice(&f[34..38]);
            assert_eq!(*hash, toeplitz(&input), "queue {q}");
        }
        assert!(used.iter().filter(|&&u| u).count() >= 3, "{used:?}");
    }
    assert_eq!(model.live_objects(), 0);
}

/// A UDP frame over IPv6 from fd00::1 port `sport` to fd00::2 port 9000.
fn udp6(dst: [u8; 6], sport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst)
        .ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .udp(sport, 9000);
    let payload = [0x5au8; 18];
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, &payload).unwrap();
    v
}

/// 6: two flows of one priority that both match a frame overlap, and which wins is the order of
/// the kernel's flow groups (`flow_groups=reverse` takes the other one). The port gives each
/// flow a priority by its deepest layer, as DPDK's `mlx5_flow_adjust_priority`, so IPv6 UDP
/// frames are hashed by the IPv6 UDP QP whatever the group order. With flows of one priority
/// and groups reversed, the catch-all IPv4 flow would take them: hash 0, one queue.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn ipv6_frames_are_hashed_by_the_ipv6_qp_whatever_the_group_order() {
    let (_g, model) = setup();
    for order in ["reverse", "creation"] {
        model.set("flow_groups", order);
        // The whole MAC (the old default), the rule that overlapped its own IPv6 copy.
        let o = opts(4, &[]).default_rules(rawpkt::DefaultRules::WholeMac);
        let port = open("mlx5:mlx5_1/1", &o);
        let pool = pool();
        let cfg = QueueConfig::default().size(512);
        let mut rxs: Vec<Box<dyn RxQueue>> = (0..4).map(|q| port.rx_queue(q, &pool, &cfg).unwrap()).collect();
        for i in 0..256u16 {
            model.inject("mlx5_1", &udp6(MAC1, 2000 + i));
        }
        let got = receive_hashed(&mut rxs, &pool, 256);
        assert_eq!(got.len(), 256, "{order}");
        let mut used = [false; 4];
        for (q, hash, f) in &got {
            used[*q] = true;
            let mut input = Vec::new();
            input.extend_from_slice(&f[22..54]);
            input.extend_from_slice(&f[54..58]);
            assert_eq!(*hash, toeplitz(&input), "{order}: queue {q}");
        }
        assert!(used.iter().filter(|&&u| u).count() >= 3, "{order}: {used:?}");
        drop(rxs);
    }
    assert_eq!(model.live_objects(), 0);
}

/// The knobs at run time (`rawpkt_model_set("knob", ...)`), the profile line that says them
/// (`rawpkt_model_profile`) and a port's counters by name (`rawpkt_model_port_counter`): what a
/// program checking itself against the device reads.
#[test]
fn knobs_profile_and_counters_are_read_through_the_library() {
    let (_g, model) = setup();
    let lib = common::model_verbs_lib();
    // SAFETY: the model library's initialisers only set up its own state (it is loaded already).
    let l = unsafe { libloading::Library::new(lib) }.unwrap();
    // SAFETY: the signature is the contract's (docs/model-library.md, Knobs and test controls).
    let profile: libloading::Symbol<extern "C" fn() -> *const c_char> =
        unsafe { l.get(b"rawpkt_model_profile\0") }.unwrap();
    // SAFETY: as above.
    let counter: libloading::Symbol<unsafe extern "C" fn(*const c_char, *const c_char) -> u64> =
        unsafe { l.get(b"rawpkt_model_port_counter\0") }.unwrap();
    let text = || {
        let p = profile();
        assert!(!p.is_null());
        // SAFETY: a NUL-terminated string the library keeps until the next call.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    let read = |dev: &str, name: &str| {
        let (dev, name) = (CString::new(dev).unwrap(), CString::new(name).unwrap());
        // SAFETY: two NUL-terminated strings that live across the call.
        unsafe { counter(dev.as_ptr(), name.as_ptr()) }
    };
    let before = text();
    model.set("knob", "zip=never");
    assert!(text().split(' ').any(|k| k == "zip=never"), "{}", text());
    model.set("knob", "zip=regular");
    assert_eq!(text(), before);
    let n = read("mlx5_1", "rx_unclaimed");
    model.inject("mlx5_1", &tcp(MAC1, [10, 9, 9, 9], 1, 22));
    assert_eq!(read("mlx5_1", "rx_unclaimed"), n + 1);
    assert_eq!(read("mlx5_1", "nope"), u64::MAX);
}

/// 4 through the model library: the firmware kills a receive WQ (`async_event.mlx5_1` =
/// `wq_fatal:200`, the port's one WQ: the WQ stops and `IBV_EVENT_WQ_FATAL` names it in
/// `element.wq`, as mlx5_ib's `mlx5_ib_wq_event`). The port's events watcher finds the queue by
/// that object and sets its attention word; the queue resets the WQ on its next empty burst, and
/// frames arrive again; unattended, a killed WQ takes nothing, for good.
#[test]
#[ignore = "needs root (CAP_NET_RAW: RAW_PACKET QPs and flows, as on a real NIC)"]
fn a_wq_killed_by_the_device_is_reset_through_its_event() {
    let (_g, model) = setup();
    {
        let a = open("mlx5:mlx5_0/1", &opts(1, &[]));
        let b = open("mlx5:mlx5_1/1", &opts(1, &[]));
        let pool = pool();
        let mut tx = a.tx_queue(0, &pool, &qcfg()).unwrap();
        let mut rx = b.rx_queue(0, &pool, &qcfg()).unwrap();
        let frames: Vec<Vec<u8>> = (0..10).map(|i| udp(MAC1, [10, 0, 8, i], 1, 2)).collect();
        send(tx.as_mut(), &pool, &frames);
        assert_eq!(receive(rx.as_mut(), &pool, 10).len(), 10);
        // The first WQ the device made since every object went (`setup`): number 0x200.
        model.set("async_event.mlx5_1", "wq_fatal:200");
        let mut got = Burst::new(&pool, 64);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut i = 0u8;
        while got.is_empty() {
            assert!(
                Instant::now() < deadline,
                "no frame after the WQ was killed: {:?}",
                rx.stats()
            );
            send(tx.as_mut(), &pool, &[udp(MAC1, [10, 0, 9, i], 1, 2)]);
            i = i.wrapping_add(1);
            std::thread::sleep(Duration::from_millis(10));
            rx.rx_burst(&mut got).unwrap();
        }
        let s = *rx.stats();
        assert_eq!((s.recoveries, s.errors.queue_fatal), (1, 1), "{s:?}");
        drop(got);
    }
    assert_eq!(model.live_objects(), 0);
}

/// 2 through the model library: what a port decides its receive timestamps count, for each
/// profile's device (rx-sink says the port's description on its first line): ticks where DevX
/// says the kernel asks free-running (cx7: `rq_ts_format` FR and RT), real time where the MTUTC
/// register says so (cx6dx), real time by DPDK's 1 GHz rule where there is no DevX (strict),
/// ticks of the 156.25 MHz clock otherwise (the default device).
#[test]
fn the_timestamp_clock_is_decided_as_dpdk_decides_it() {
    let lib = common::model_verbs_lib();
    for (profile, want) in [
        ("default", "timestamps in clock ticks (from hca_core_clock)"),
        ("cx7", "timestamps in clock ticks (from DevX rq_ts_format"),
        ("cx6dx", "timestamps in real time (from DevX MTUTC register)"),
        ("strict", "timestamps in real time (from a 1 GHz clock"),
    ] {
        let mut child = std::process::Command::new(common::tool("rx-sink"))
            .env("RAWPKT_LIBIBVERBS", lib)
            .env("RAWPKT_LIBMLX5", lib)
            .env("RAWPKT_MODEL_PROFILE", profile)
            .arg("mlx5:mlx5_1/1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(line.contains(want), "{profile}: {line}");
    }
}
