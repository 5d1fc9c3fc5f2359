//! Ports opened by spec through the public API, with the model running on its own thread as a
//! NIC polling its doorbells: the ring protocol crosses real threads here.

mod common;

use common::{fill_frame, seq_of};
use rawpkt::{open, Burst, Error, Pool, PoolConfig, QueueConfig};

#[test]
fn a_threaded_model_pair_carries_100k_frames_intact() {
    let a = open("model:threaded-test/0").unwrap();
    let b = open("model:threaded-test/1").unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(8192)).unwrap();
    let cfg = QueueConfig::default();
    let mut tx = a.tx_queue(0, &pool, &cfg).unwrap();
    let mut rx = b.rx_queue(0, &pool, &cfg).unwrap();
    let total = 100_000u64;
    let (mut sent, mut next) = (0u64, 0u64);
    let mut out = Burst::new(&pool, 32);
    let mut got = Burst::new(&pool, 64);
    let mut expect = vec![0u8; 2048];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while next < total {
        assert!(std::time::Instant::now() < deadline, "stalled at {next} of {total}");
        // Keep well under the RQ size in flight so the device never has to drop.
        if out.is_empty() && sent < total && sent - next < 512 {
            let n = 32.min((total - sent) as usize);
            for _ in 0..n {
                let len = common::frame_len(sent, 60, 1514);
                out.alloc(1, len);
                let i = out.len() - 1;
                fill_frame(sent, out.data_mut(i));
                sent += 1;
            }
        }
        tx.tx_burst(&mut out).unwrap();
        rx.rx_burst(&mut got).unwrap();
        for i in 0..got.len() {
            let d = got.data(i);
            assert_eq!(seq_of(d), next);
            let len = common::frame_len(next, 60, 1514);
            fill_frame(next, &mut expect[..len]);
            assert!(d == &expect[..len], "frame {next} differs");
            next += 1;
        }
        got.clear();
    }
    while tx.in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline);
        tx.reclaim().unwrap();
    }
    let (nic, port) = rawpkt::model::nic_of(&a).unwrap();
    assert_eq!(nic.port_counters(port).tx_frames, total);
    assert_eq!(nic.counters().doorbell_mismatch, 0);
    assert_eq!(rx.stats().packets, total);
    drop((out, got, tx, rx));
    assert_eq!(pool.free_count(), pool.capacity());
}

/// An impaired wire (the knobs `wire_drop`, `wire_dup`, `wire_swap`) loses, duplicates and swaps exactly the
/// frames its rules name, in the order the rules say, and counts each.
#[test]
fn an_impaired_wire_drops_duplicates_and_swaps_the_frames_its_rules_name() {
    let knobs = ["wire_drop=10", "wire_dup=7", "wire_swap=3"].map(String::from).to_vec();
    let opts = rawpkt::PortOptions::default().model(rawpkt::ModelOptions::default().knobs(knobs));
    let a = rawpkt::open_with("model:impaired-test/0", &opts).unwrap();
    let b = rawpkt::open_with("model:impaired-test/1", &opts).unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    let cfg = QueueConfig::default();
    let mut tx = a.tx_queue(0, &pool, &cfg).unwrap();
    let mut rx = b.rx_queue(0, &pool, &cfg).unwrap();
    // Frames numbered 1..=31 (n as the rules count them): the last is no swap (31 % 3 != 0).
    let total = 31u64;
    let mut out = Burst::new(&pool, 32);
    for n in 1..=total {
        out.alloc(1, 60);
        let i = out.len() - 1;
        fill_frame(n, out.data_mut(i));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !out.is_empty() {
        assert!(std::time::Instant::now() < deadline);
        tx.tx_burst(&mut out).unwrap();
    }
    // What the rules make of 1..=31, worked by hand: 10, 20, 30 lost; 7, 14, 21, 28 twice;
    // 3, 6, 9, 12, 15, 18, 24, 27 behind the next frame that leaves (9 behind 11: 10 is
    // lost; 21 is sent twice, 30 lost).
    let want: Vec<u64> = vec![
        1, 2, 4, 3, 5, 7, 7, 6, 8, 11, 9, 13, 12, 14, 14, 16, 15, 17, 19, 18, 21, 21, 22, 23, 25, 24, 26, 28, 28, 27,
        29, 31,
    ];
    let mut seen = Vec::new();
    let mut got = Burst::new(&pool, 64);
    while seen.len() < want.len() {
        assert!(std::time::Instant::now() < deadline, "got {seen:?}");
        rx.rx_burst(&mut got).unwrap();
        seen.extend((0..got.len()).map(|i| seq_of(got.data(i))));
        got.clear();
    }
    assert_eq!(seen, want);
    let (nic, port) = rawpkt::model::nic_of(&a).unwrap();
    let c = nic.port_counters(port);
    assert_eq!(
        (c.tx_frames, c.wire_dropped, c.wire_duplicated, c.wire_swapped),
        (total, 3, 4, 8)
    );
    while tx.in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline);
        tx.reclaim().unwrap();
    }
}

/// A system call's refusal keeps its errno (as the error's source) under the words that say
/// where, and stays a failure of the machine, not of the command; a malformed spec has none.
#[test]
fn a_refusal_by_the_system_keeps_its_errno() {
    let e = open("model:afpacket=rpx-nosuchif0").unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENODEV), "{e:?}");
    assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
    assert!(
        e.message().starts_with("no network interface named `rpx-nosuchif0`"),
        "{e}"
    );
    // The chain a caller walks with `source()` reaches the io::Error itself.
    let mut source = std::error::Error::source(&e);
    let mut errno = None;
    while let Some(s) = source {
        errno = errno.or(s
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error));
        source = s.source();
    }
    assert_eq!(errno, Some(libc::ENODEV), "{e:?}");

    // A trace file that cannot be created: the model NIC is not made, the file is named.
    let opts = rawpkt::PortOptions::default()
        .model(rawpkt::ModelOptions::default().trace(Some("/nonexistent-rpx-dir/trace".into())));
    let e = rawpkt::open_with("model:trace-refused/0", &opts).unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENOENT), "{e:?}");
    assert!(e.kind() == rawpkt::ErrorKind::Device && !e.is_usage(), "{e:?}");
    assert!(e.message().starts_with("trace file /nonexistent-rpx-dir/trace"), "{e}");

    let e = open("model:afpacket=").unwrap_err();
    assert!(e.kind() == rawpkt::ErrorKind::Spec && e.is_usage(), "{e:?}");
    assert_eq!(e.os_error(), None, "{e:?}");
    assert!(std::error::Error::source(&e).is_none(), "{e:?}");
}

/// Packet memory the kernel refuses is a memory error that keeps the kernel's ENOMEM. The
/// refusal comes from an address-space limit below the pool's size, set in a child process
/// (this test binary again) so that no other test feels it.
#[test]
fn refused_packet_memory_keeps_its_errno() {
    const NAME: &str = "refused_packet_memory_keeps_its_errno";
    if std::env::var_os("RAWPKT_POOL_CHILD").is_some() {
        let limit = libc::rlimit {
            rlim_cur: 16 << 30,
            rlim_max: 16 << 30,
        };
        // SAFETY: setrlimit reads one valid struct; it lowers only this child process's limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
        // 32 GiB: twice the limit.
        let e = Pool::new(PoolConfig::default().buffers(16 << 20).buf_size(2048)).unwrap_err();
        assert_eq!(e.os_error(), Some(libc::ENOMEM), "{e:?}");
        assert!(e.kind() == rawpkt::ErrorKind::Memory && !e.is_usage(), "{e:?}");
        assert!(e.to_string().starts_with("cannot map packet memory: "), "{e}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env("RAWPKT_POOL_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "the child ran the test: {stdout}");
}

#[test]
fn bad_specs_and_configs_are_one_clear_error() {
    let msg = |r: Result<rawpkt::Port, Error>| r.unwrap_err().to_string();
    assert!(msg(open("pair0")).contains("expected KIND:NAME"));
    assert!(msg(open("bogus:x")).contains("unknown port kind `bogus`"));
    assert!(msg(open("model:pair0")).contains("expected model:NAME/PORT"));
    assert!(msg(open("model:pair0/2")).contains("must be 0 or 1"));
    assert!(msg(open("model:/0")).contains("empty model name"));
    assert!(msg(open("model:afpacket=")).contains("needs an interface name"));
    assert!(msg(open("model:afpacket=nosuchif0")).contains("no network interface named `nosuchif0`"));
    let port = open("model:cfg-test/0").unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(64)).unwrap();
    for bad in [QueueConfig::default().size(100), QueueConfig::default().size(1 << 20)] {
        let e = port.tx_queue(0, &pool, &bad).err().unwrap().to_string();
        assert!(e.contains("power of two from 64 to 32768"), "{e}");
    }
    let e = port
        .tx_queue(0, &pool, &QueueConfig::default().tx_inline(2000))
        .err()
        .unwrap();
    assert!(e.to_string().contains("tx_inline 2000"), "{e}");
    assert_eq!(pool.free_count(), 64);
}

/// A sender that never waits, into a model NIC on its own thread: completions lag behind
/// posting, the receive queue overflows and the device drops. What arrives must still be in
/// order and intact, and what was sent must equal what arrived plus what the device dropped.
fn overload(dev: mlx5_model::ModelConfig) {
    use rawpkt::{RxQueue, TxQueue};
    let q = QueueConfig::default();
    let mut r = common::rig(q, dev, 8192);
    r.nic.start(None);
    let total = 300_000u64;
    let mut out = Burst::new(&r.pool, 32);
    let mut got = Burst::new(&r.pool, 32);
    let mut expect = vec![0u8; 2048];
    let (mut sent, mut next, mut received) = (0u64, 0u64, 0u64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Until every frame sent is either received or counted as dropped by the device: exact,
    // however the model thread is scheduled.
    while received + r.nic.port_counters(1).rx_out_of_buffer < total {
        assert!(std::time::Instant::now() < deadline, "stalled at {received} received");
        while out.room() > 0 && sent < total {
            let len = common::frame_len(sent, 60, 200);
            out.alloc(1, len);
            let i = out.len() - 1;
            fill_frame(sent, out.data_mut(i));
            sent += 1;
        }
        r.tx.tx_burst(&mut out).unwrap();
        r.rx.rx_burst(&mut got).unwrap();
        for i in 0..got.len() {
            let d = got.data(i);
            let s = seq_of(d);
            assert!(s >= next, "frame {s} after {next}: reordered or duplicated");
            let len = common::frame_len(s, 60, 200);
            fill_frame(s, &mut expect[..len]);
            assert!(d == &expect[..len], "frame {s} differs");
            next = s + 1;
            received += 1;
        }
        got.clear();
        if sent == total && out.is_empty() {
            r.tx.reclaim().unwrap();
        }
    }
    while r.tx.in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline);
        r.tx.reclaim().unwrap();
    }
    let dropped = r.nic.port_counters(1).rx_out_of_buffer;
    assert_eq!(received + dropped, total, "received {received} + dropped {dropped}");
    // The CQE drop field is 8 bits and only rides on a later completion: a lower bound.
    let reported = r.rx.stats().drops;
    assert!(
        reported <= dropped && (dropped == 0 || reported > 0),
        "{reported} reported of {dropped}"
    );
    assert_eq!(r.tx.stats().errors.total() + r.rx.stats().errors.total(), 0);
    drop((out, got));
    r.teardown();
}

#[test]
fn overload_keeps_order_and_accounts_for_every_frame_on_a_connectx4() {
    overload(mlx5_model::ModelConfig::connectx4());
}

#[test]
fn overload_keeps_order_and_accounts_for_every_frame_on_a_connectx5() {
    overload(mlx5_model::ModelConfig::default());
}

#[test]
fn queues_keep_their_device_running_after_the_ports_are_dropped() {
    let pool = Pool::new(PoolConfig::default().buffers(2048)).unwrap();
    let (mut tx, mut rx) = {
        let a = open("model:outlive/0").unwrap();
        let b = open("model:outlive/1").unwrap();
        (
            a.tx_queue(0, &pool, &QueueConfig::default()).unwrap(),
            b.rx_queue(0, &pool, &QueueConfig::default()).unwrap(),
        )
    };
    let mut out = Burst::new(&pool, 32);
    let mut got = Burst::new(&pool, 64);
    let (mut sent, mut received) = (0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while received < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the device stopped: {received} of {sent}"
        );
        if sent < 1000 && sent - received < 256 {
            out.alloc(out.room(), 60);
            sent += tx.tx_burst(&mut out).unwrap();
        }
        received += rx.rx_burst(&mut got).unwrap();
        got.clear();
    }
    drop((out, got, tx, rx));
    assert_eq!(pool.free_count(), pool.capacity());
}

#[test]
fn queues_take_their_registrations_with_them() {
    let a = open("model:mr-test/0").unwrap();
    let b = open("model:mr-test/1").unwrap();
    let nic = rawpkt::model::nic_of(&a).unwrap().0.clone();
    for _ in 0..3 {
        let pool = Pool::new(PoolConfig::default().buffers(1024)).unwrap();
        let tx = a.tx_queue(0, &pool, &QueueConfig::default()).unwrap();
        let rx = b.rx_queue(0, &pool, &QueueConfig::default()).unwrap();
        drop((tx, rx, pool));
    }
    // One registration may linger until the ports next register or close; no more.
    assert!(
        nic.live_objects() <= 1,
        "{} objects after three pools",
        nic.live_objects()
    );
    drop((a, b));
    assert_eq!(nic.live_objects(), 0);
}

/// Ports are compared by what they are, not by how their specs are spelled.
#[test]
fn ports_are_the_same_by_identity_not_by_text() {
    let a = open("model:same-id/0").unwrap();
    let a2 = open("model:same-id/00").unwrap();
    let b = open("model:same-id/1").unwrap();
    let other = open("model:same-id2/0").unwrap();
    assert!(a.same_port(&a2) && a2.same_port(&a));
    assert_eq!(a.identity(), a2.identity());
    assert!(!a.same_port(&b) && !a.same_port(&other));
    assert_eq!(a.identity().to_string(), "port 0 of model NIC same-id");
}

/// pktgen and l2-xconnect refuse one port twice, in one line, as a usage error (exit 2).
#[test]
fn tools_refuse_the_same_port_twice() {
    let out = std::process::Command::new(common::tool("pktgen"))
        .args([
            "--port",
            "model:same-pg/0",
            "--rx-port",
            "model:same-pg/00",
            "--count",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--port and --rx-port are the same port (port 0 of model NIC same-pg)"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let out = std::process::Command::new(common::tool("l2-xconnect"))
        .args([
            "--port-a",
            "model:same-xc/0",
            "--port-b",
            "model:same-xc/00",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("same port (port 0 of model NIC same-xc)"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// A spec with a line break in it: each tool's error names the option and the spec escaped, on
/// one line, as a usage error (the library escapes its part; the tools' own prefix must too).
#[test]
fn tools_repeat_a_bad_spec_on_one_line() {
    let bad = "xdp:lo,rule=dst-port\n53";
    let runs: [(std::path::PathBuf, Vec<&str>); 4] = [
        (common::tool("pktgen"), vec!["--port", bad, "--count", "1"]),
        (
            common::tool("pktgen"),
            vec!["--port", "model:esc/0", "--rx-port", bad, "--count", "1"],
        ),
        (common::tool("l2-xconnect"), vec!["--port-a", bad, "--duration", "1"]),
        (common::tool("rx-sink"), vec![bad]),
    ];
    for (tool, args) in &runs {
        let out = std::process::Command::new(tool).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tool:?} {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{tool:?} {args:?}: {err}");
        assert!(err.contains("dst-port\\n53"), "{tool:?} {args:?}: {err}");
    }
}

/// Frames the device drops for want of receive buffers, far more than 255 in a row: the port's
/// `device_drops` is the exact count (the model's out-of-buffer counter since the port opened),
/// while the CQEs' 8-bit drop counts add up to a lower bound.
#[test]
fn device_drops_are_exact_past_255() {
    use rawpkt::{Pool, PoolConfig};
    let a = open("model:oob/0").unwrap();
    let b = open("model:oob/1").unwrap();
    let pool = Pool::new(PoolConfig::default().buffers(4096)).unwrap();
    let q = QueueConfig::default().size(64);
    let mut tx = a.tx_queue(0, &pool, &q).unwrap();
    let mut rx = b.rx_queue(0, &pool, &q).unwrap();
    assert_eq!(b.device_drops(), Some(0));
    let total = 3000u64;
    let mut out = Burst::new(&pool, 32);
    let mut sent = 0;
    // Nothing received while sending: the 64-entry receive queue fills and the rest is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sent < total || tx.in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline, "stalled at {sent}");
        while out.room() > 0 && sent < total {
            out.alloc(1, 60);
            let i = out.len() - 1;
            fill_frame(sent, out.data_mut(i));
            sent += 1;
        }
        tx.tx_burst(&mut out).unwrap();
        tx.reclaim().unwrap();
    }
    let mut got = Burst::new(&pool, 64);
    let mut received = 0u64;
    while received + b.device_drops().unwrap() < total {
        assert!(std::time::Instant::now() < deadline, "received {received}");
        received += rx.rx_burst(&mut got).unwrap() as u64;
        got.clear();
    }
    let dropped = b.device_drops().unwrap();
    assert!(dropped > 255, "{dropped}");
    assert_eq!(received + dropped, total);
    assert_eq!(
        dropped,
        rawpkt::model::nic_of(&b)
            .map(|(n, p)| n.port_counters(p).rx_out_of_buffer)
            .unwrap()
    );
    assert!(rx.stats().drops <= dropped);
    // The other port dropped nothing.
    assert_eq!(a.device_drops(), Some(0));
    drop((tx, rx, out, got));
    assert_eq!(pool.free_count(), pool.capacity());
}

/// A model port's queue ids are checked as a device's are: an id past the last (1023) or one whose
/// queue still lives is one line of `ErrorKind::Config`, on RX and TX alike; a dropped queue's id is
/// free again, and the same id in the other direction or on the other port is another queue.
#[test]
fn model_queue_ids_unknown_or_in_use_are_config_errors() {
    let a = open("model:qids/0").unwrap();
    let b = open("model:qids/1").unwrap();
    let again = open("model:qids/0").unwrap();
    let pool = Pool::new(PoolConfig::default()).unwrap();
    let q = QueueConfig::default();
    let last = rawpkt::model::MODEL_QUEUES - 1;
    for tx in [false, true] {
        let make = |p: &rawpkt::Port, id: u16| {
            if tx {
                p.tx_queue(id, &pool, &q).map(|_| ())
            } else {
                p.rx_queue(id, &pool, &q).map(|_| ())
            }
        };
        let dir = if tx { "TX" } else { "RX" };
        for id in [last + 1, u16::MAX] {
            let e = make(&a, id).unwrap_err();
            assert!(e.kind() == rawpkt::ErrorKind::Config, "{e:?}");
            let e = e.to_string();
            assert!(e.contains(&format!("{dir} queue {id} does not exist")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let held = if tx {
            (Some(a.tx_queue(last, &pool, &q).unwrap()), None)
        } else {
            (None, Some(a.rx_queue(last, &pool, &q).unwrap()))
        };
        // Twice on the port, also through another handle of the same port: in use.
        for p in [&a, &again] {
            let e = make(p, last).unwrap_err();
            assert!(e.kind() == rawpkt::ErrorKind::Config, "{e:?}");
            assert!(
                e.to_string().contains(&format!("{dir} queue {last} is already in use")),
                "{e}"
            );
        }
        // The other port has its own ids.
        make(&b, last).unwrap();
        drop(held);
        make(&a, last).unwrap();
    }
    // The same id in both directions is two queues.
    let _rx = a.rx_queue(0, &pool, &q).unwrap();
    let _tx = a.tx_queue(0, &pool, &q).unwrap();
}

/// A port says how many buffers a queue pair pins, so that callers size pools without knowing the
/// device: the default model NIC is a ConnectX-5, whose TX queue packs up to four packets into
/// each send WQEBB with enhanced multi-packet send (`tx::dv`), beside an RX ring of `size`.
#[test]
fn a_port_says_how_many_buffers_a_queue_pair_pins() {
    let port = open("model:pinned/0").unwrap();
    for size in [64u32, 1024] {
        let q = QueueConfig::default().size(size);
        assert_eq!(port.buffers_pinned(&q), 5 * size as usize, "size {size}");
    }
}

/// `flags::TIMESTAMP` is ns of the device's clock, the one `Port::device_clock_ns` reads: the
/// model's CQEs carry ticks of its 156.25 MHz clock (as hardware's do), and the DV receive path
/// converts them. A frame's timestamp falls between the clock read before it was sent and the one
/// after it arrived, and the same NIC's two ports share the clock; a pair of NICs does not.
#[test]
fn receive_timestamps_are_nanoseconds_of_the_clock_the_port_reads() {
    let a = open("model:clock-test/0").unwrap();
    let b = open("model:clock-test/1").unwrap();
    let other = open("model:clock-test-2/1").unwrap();
    assert!(a.shares_device_clock(&b));
    assert!(!a.shares_device_clock(&other));
    let pool = Pool::new(PoolConfig::default()).unwrap();
    let cfg = QueueConfig::default().rx_timestamps(true);
    let mut tx = a.tx_queue(0, &pool, &cfg).unwrap();
    let mut rx = b.rx_queue(0, &pool, &cfg).unwrap();
    let mut out = Burst::new(&pool, 1);
    let mut got = Burst::new(&pool, 1);
    for seq in 0..20u64 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(out.alloc(1, 64), 1);
        fill_frame(seq, out.data_mut(0));
        let before = a.device_clock_ns().unwrap();
        while !out.is_empty() {
            tx.tx_burst(&mut out).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.is_empty() {
            assert!(std::time::Instant::now() < deadline, "frame {seq} never arrived");
            rx.rx_burst(&mut got).unwrap();
        }
        let after = b.device_clock_ns().unwrap();
        assert_eq!(seq_of(got.data(0)), seq);
        assert!(got.packet(0).flags() & rawpkt::flags::TIMESTAMP != 0);
        // Ticks handed up as ns would read 6.4 times too small, before `before` once the NIC
        // has run a few ms (each frame waits 2 ms).
        let ts = got.packet(0).timestamp();
        assert!(
            before <= ts && ts <= after,
            "frame {seq}: {before} <= {ts} <= {after} ns"
        );
        got.clear();
    }
}
