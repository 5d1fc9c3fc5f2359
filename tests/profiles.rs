//! Model profiles and knobs: how a `model:` port picks its device, and the driver against each
//! behaviour a ConnectX may show that the default model forgives (`mlx5_model::profile`). The
//! tests here pin the knob they test themselves, so they mean the same on every profile of
//! `scripts/test.sh --profiles`.

mod common;

use rawpkt::model::nic_of;
use rawpkt::{ErrorKind, ModelOptions, PortOptions};

/// A spec's `profile=` and `knob=` options, and `ModelOptions`, make the NIC; the other end of
/// the NIC shares it, and an end that asks for another device is told so in one line, as is a
/// profile or knob the model does not know.
#[test]
fn model_ports_take_their_device_from_the_spec_or_the_options() {
    let a = rawpkt::open("model:prof-a/0,profile=cx7,knob=zip=never").unwrap();
    let (nic, _) = nic_of(&a).unwrap();
    let cfg = nic.config();
    assert_eq!(cfg.profile, "cx7");
    assert_eq!(cfg.knobs.zip, mlx5_model::profile::Zip::Never);
    assert_eq!(cfg.identity.pci_device_id, 0x1021);
    let b = rawpkt::open("model:prof-a/1").unwrap();
    assert!(std::sync::Arc::ptr_eq(&nic, &nic_of(&b).unwrap().0));
    let e = rawpkt::open("model:prof-a/1,profile=cx5").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(
        e.to_string().contains("already open as `cx7 ") && e.to_string().contains("zip=never"),
        "{e}"
    );

    let opts = PortOptions::default().model(
        ModelOptions::default()
            .profile(Some("strict".into()))
            .knobs(vec!["vlan_insert=on".into()]),
    );
    let s = rawpkt::open_with("model:prof-b/0", &opts).unwrap();
    let cfg = nic_of(&s).unwrap().0.config();
    assert_eq!(cfg.profile, "strict");
    assert!(cfg.knobs.vlan_insert, "the options' knobs come after the profile");
    let d = rawpkt::open("model:prof-c/0").unwrap();
    assert_eq!(nic_of(&d).unwrap().0.config().behaviour(), "default");

    for (spec, want) in [
        ("model:prof-d/0,profile=cx9", "no such profile"),
        ("model:prof-d/0,knob=wqe_id=sometimes", "expected wqe_id=counter|ring"),
        ("model:prof-d/0,knob=nope=1", "no such knob"),
        ("model:prof-d/0,colour=blue", "unknown option"),
    ] {
        let e = rawpkt::open(spec).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Config | ErrorKind::Spec), "{spec}: {e}");
        let text = e.to_string();
        assert!(text.contains(want) && !text.contains('\n'), "{spec}: {text}");
    }
}

/// The trace of a profiled NIC says which device it is on its second line.
#[test]
fn the_trace_names_the_profile_and_its_knobs() {
    let path = std::env::temp_dir().join(format!("rawpkt-profile-trace-{}.txt", std::process::id()));
    {
        let cfg = mlx5_model::ModelConfig {
            trace: Some(path.clone()),
            ..mlx5_model::ModelConfig::with_profile(Some("cx6dx"), &["zip=never".into()]).unwrap()
        };
        let nic = mlx5_model::Nic::pair(cfg).unwrap();
        nic.flush_trace();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# rawpkt mlx5 model trace v2"));
    let second = lines.next().unwrap();
    assert!(second.starts_with("# profile cx6dx wqe_id=ring"), "{second}");
    assert!(
        second.contains("zip=never") && second.contains("clock=real-time"),
        "{second}"
    );
}

/// A device with the knobs `knobs` on a ConnectX-4's caps (one SEND WQE per frame, so several
/// WQEs in flight) or the default ConnectX-5's.
fn device_with(cx4: bool, knobs: &[&str]) -> mlx5_model::ModelConfig {
    let mut d = if cx4 {
        mlx5_model::ModelConfig::connectx4()
    } else {
        mlx5_model::ModelConfig::default()
    };
    for k in knobs {
        d.knob(k).unwrap();
    }
    d
}

mod tx {
    use super::common::{fill_frame, rig, seq_of, Rig};
    use mlx5_model::Fault;
    use mlx5_prm::syndrome;
    use rawpkt::{Burst, QueueConfig, RxQueue, TxQueue};

    /// Queues `n` 60-byte frames numbered from `first` on TX.
    pub fn send(r: &mut Rig, first: u64, n: usize) -> usize {
        let mut out = Burst::new(&r.pool, n);
        for k in 0..n {
            assert_eq!(out.alloc(1, 60), 1);
            fill_frame(first + k as u64, out.data_mut(k));
        }
        r.tx.tx_burst(&mut out).unwrap()
    }

    /// Steps the model once and drains RX; returns the sequence numbers received.
    pub fn receive(r: &mut Rig) -> Vec<u64> {
        r.nic.step();
        let mut got = Burst::new(&r.pool, 256);
        let mut seqs = Vec::new();
        loop {
            let n = r.rx.rx_burst(&mut got).unwrap();
            if n == 0 {
                return seqs;
            }
            seqs.extend((0..n).map(|k| seq_of(got.data(k))));
            got.clear();
        }
    }

    /// The flush CQEs of an SQ in error come after the driver reset the queue (the
    /// device had them in flight: `flush=late:2`), and the WQEs the driver did not ask a
    /// completion of have CE = 0 ("report every error"), which silicon answers with a flush CQE
    /// each (`flush_ce=honour_ce`). DPDK consumes WR_FLUSH_ERR CQEs without acting on them
    /// (`mlx5_tx.c` `mlx5_tx_error_cqe_handle`) and marks unsignalled WQEs
    /// `MLX5_COMP_ONLY_FIRST_ERR` (`mlx5_tx.h` `mlx5_tx_cseg_init`), so one recovery, and every
    /// frame posted after it arrives.
    #[test]
    fn a_late_flush_after_recovery_resets_nothing() {
        for cx4 in [true, false] {
            let dev = super::device_with(cx4, &["flush=late:2", "flush_ce=honour_ce"]);
            let mut r = rig(QueueConfig::default().size(64).recover(true), dev, 512);
            assert_eq!(send(&mut r, 0, 8), 8);
            assert_eq!(receive(&mut r).len(), 8);
            r.nic.inject(
                0,
                Fault::TxError {
                    syndrome: syndrome::LOCAL_PROT,
                },
            );
            // Two bursts: the second is flushed behind the first's error.
            assert_eq!(send(&mut r, 100, 8), 8);
            assert_eq!(send(&mut r, 200, 8), 8);
            assert!(receive(&mut r).is_empty(), "a failed SQ sends nothing");
            r.tx.reclaim().expect("recovered");
            assert_eq!(r.tx.stats().recoveries, 1);
            let mut got = Vec::new();
            for k in 0..6u64 {
                assert_eq!(send(&mut r, 1000 + 10 * k, 10), 10, "burst {k}");
                got.extend(receive(&mut r));
                r.tx.reclaim().expect("no second failure");
            }
            for _ in 0..4 {
                got.extend(receive(&mut r));
                r.tx.reclaim().unwrap();
            }
            let want: Vec<u64> = (0..6).flat_map(|k| (0..10).map(move |i| 1000 + 10 * k + i)).collect();
            let s = *r.tx.stats();
            assert_eq!(got, want, "cx4 {cx4}: every frame posted after the reset, in order");
            assert_eq!(
                s.recoveries, 1,
                "cx4 {cx4}: one reset, none for the late flushes: {s:?}"
            );
            assert!(s.errors.late_flush >= 1, "cx4 {cx4}: {s:?}");
            assert_eq!(r.tx.in_flight(), 0);
            r.teardown();
        }
    }
}

mod vlan {
    use super::common::{fill_frame, rig};
    use rawpkt::{Burst, QueueConfig, RxQueue, TxQueue};

    /// A device without `wqe_vlan_insert` (`vlan_insert=off`) fails a WQE that asks
    /// the Ethernet segment to insert a tag. DPDK inserts in hardware only where DevX reports the
    /// cap with inline mode "not required" (`mlx5.c` `mlx5_set_min_inline`), and otherwise
    /// writes the tag into the inlined header (`mlx5_txq.c` `txq_set_params`, `vlan_inline`);
    /// so does this queue, and 200 tagged frames arrive tagged with no recovery.
    #[test]
    fn tagged_frames_go_out_tagged_without_hw_insertion() {
        let dev = super::device_with(false, &["vlan_insert=off"]);
        let mut r = rig(QueueConfig::default().size(256), dev, 1024);
        let mut got = Vec::new();
        for b in 0..10u64 {
            let mut out = Burst::new(&r.pool, 20);
            for k in 0..20 {
                let seq = b * 20 + k as u64;
                assert_eq!(out.alloc(1, 60 + (seq as usize % 300)), 1);
                fill_frame(seq, out.data_mut(k));
                out.set_vlan(k, Some(0x0100 | (seq as u16 & 0xff)));
            }
            assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 20, "burst {b}");
            r.nic.step();
            let mut rx = Burst::new(&r.pool, 64);
            loop {
                let n = r.rx.rx_burst(&mut rx).unwrap();
                if n == 0 {
                    break;
                }
                for i in 0..n {
                    let f = rx.data(i);
                    got.push((f[12..16].to_vec(), f.len()));
                }
                rx.clear();
            }
            r.tx.reclaim().unwrap();
        }
        assert_eq!(got.len(), 200, "every tagged frame arrives");
        for (seq, (tag, len)) in got.iter().enumerate() {
            let tci = 0x0100 | (seq as u16 & 0xff);
            assert_eq!(tag[..], [0x81, 0x00, (tci >> 8) as u8, tci as u8], "frame {seq}");
            assert_eq!(*len, 64 + seq % 300, "frame {seq}: 4 bytes of tag more");
        }
        assert_eq!(r.tx.stats().recoveries, 0, "{:?}", r.tx.stats());
        r.teardown();
    }
}

mod clock {
    use super::common::{fill_frame, rig};
    use rawpkt::{flags, Burst, QueueConfig, RxQueue, TxQueue};

    /// A ConnectX-6 Dx or later may run its CQE timestamps in real-time format,
    /// `seconds << 32 | nanoseconds` (DPDK `mlx5.c` `mlx5_rt_timestamp_config` reads the mode,
    /// `mlx5_rxtx.h` `mlx5_txpp_convert_rx_ts` converts). With the device's clock simulated, every
    /// frame's timestamp lies between the real-time clock read before the frame was sent and
    /// after it arrived, and they never go back. The CQE's value taken as ticks of a
    /// 156.25 MHz counter would be 4.3 s off for every second.
    #[test]
    fn real_time_timestamps_are_nanoseconds_of_the_clock() {
        for (knobs, khz) in [
            (&["clock=real-time"][..], 1_000_000),
            (&["clock=free-running:1000000"][..], 1_000_000),
        ] {
            let dev = super::device_with(false, knobs);
            assert_eq!(dev.knobs.clock_khz(), khz);
            let real_time = dev.knobs.clock == mlx5_model::profile::Clock::RealTime;
            let mut r = rig(QueueConfig::default().size(64).rx_timestamps(true), dev, 512);
            r.nic.simulate_clock();
            // The time base the timestamps are on: real time, or ns of the free-running counter.
            let now = |nic: &mlx5_model::Nic| {
                if real_time {
                    nic.real_time_ns()
                } else {
                    nic.clock_ticks() * 1_000_000 / khz
                }
            };
            let mut last = 0;
            for k in 0..50u64 {
                r.nic.advance_clock(1_000_000_000 / 3 + k * 7_777);
                let before = now(&r.nic);
                let mut out = Burst::new(&r.pool, 4);
                for i in 0..4 {
                    assert_eq!(out.alloc(1, 60), 1);
                    fill_frame(k * 4 + i as u64, out.data_mut(i));
                }
                assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 4);
                r.nic.step();
                let after = now(&r.nic);
                let mut got = Burst::new(&r.pool, 8);
                assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 4);
                for i in 0..4 {
                    let p = got.packet(i);
                    assert!(p.flags() & flags::TIMESTAMP != 0);
                    let ts = p.timestamp();
                    assert!(
                        before <= ts && ts <= after && ts >= last,
                        "{knobs:?} frame {k}/{i}: {before} <= {ts} <= {after}, after {last}"
                    );
                    last = ts;
                }
                r.tx.reclaim().unwrap();
            }
            r.teardown();
        }
    }
}

mod events {
    use super::common::rig;
    use super::tx::{receive, send};
    use mlx5_model::DeviceEvent;
    use rawpkt::{Burst, FailureKind, QueueConfig, QueueError, RxQueue, TxQueue};

    fn q() -> QueueConfig {
        QueueConfig::default().size(64).recover(true)
    }

    /// The firmware kills a receive WQ (`IBV_EVENT_WQ_FATAL`, kernel `qp.c`
    /// `mlx5_ib_wq_event`): it writes no CQE, so nothing but the event says so. The queue resets
    /// it on its next empty burst, and traffic resumes; unattended, the queue would return
    /// `Ok(0)` forever, every frame dropped at the WQ.
    #[test]
    fn a_wq_killed_by_the_device_is_reset_and_traffic_resumes() {
        let mut r = rig(q(), mlx5_model::ModelConfig::default(), 512);
        assert_eq!(send(&mut r, 0, 10), 10);
        assert_eq!(receive(&mut r).len(), 10);
        assert!(r.nic.raise(DeviceEvent::WqFatal { wqn: r.wq }));
        assert_eq!(send(&mut r, 100, 8), 8);
        assert!(receive(&mut r).is_empty(), "a killed WQ takes nothing");
        let mut got = Vec::new();
        for step in 0..8u64 {
            assert_eq!(send(&mut r, 1000 + 5 * step, 5), 5);
            got.extend(receive(&mut r));
            r.tx.reclaim().unwrap();
        }
        assert_eq!(
            got,
            (1000..1040).collect::<Vec<u64>>(),
            "the next 40 frames, in 8 steps"
        );
        let s = *r.rx.stats();
        assert_eq!((s.recoveries, s.errors.queue_fatal), (1, 1), "{s:?}");
        r.teardown();
    }

    /// A killed send QP (`IBV_EVENT_QP_FATAL`) is reset at the next burst; what was in flight is
    /// dropped, what comes after goes out.
    #[test]
    fn a_qp_killed_by_the_device_is_reset_at_the_next_burst() {
        let mut r = rig(q(), mlx5_model::ModelConfig::default(), 512);
        let qpn = r.sq.qpn();
        assert!(r.nic.raise(DeviceEvent::QpFatal { qpn }));
        assert_eq!(send(&mut r, 0, 8), 8);
        assert_eq!(receive(&mut r), (0..8).collect::<Vec<u64>>());
        let s = *r.tx.stats();
        assert_eq!((s.recoveries, s.errors.queue_fatal), (1, 1), "{s:?}");
        r.tx.reclaim().unwrap();
        assert_eq!(r.tx.in_flight(), 0);
        r.teardown();
    }

    /// A CQ in error (`IBV_EVENT_CQ_ERR`: under `cq_overrun=error` an overrun puts it there) writes
    /// nothing more; the queue fails on its next empty burst, in one poll, with its buffers back.
    /// Unattended, it would return `Ok(0)` forever.
    #[test]
    fn a_cq_in_error_fails_the_queue_in_one_poll() {
        let mut r = rig(q(), mlx5_model::ModelConfig::default(), 512);
        assert!(r.nic.raise(DeviceEvent::CqError { cqn: r.rx_cq.cqn() }));
        let mut got = Burst::new(&r.pool, 8);
        match r.rx.rx_burst(&mut got) {
            Err(QueueError::Failed(f)) => assert_eq!(f.kind, FailureKind::CqError, "{f}"),
            other => panic!("the queue goes on: {other:?}"),
        }
        assert_eq!(r.rx.stats().errors.cq_error, 1);
        assert!(r.rx.rx_burst(&mut got).is_err(), "and stays failed");
        // The same for a send queue: its CQ in error fails it at the next burst.
        assert!(r.nic.raise(DeviceEvent::CqError { cqn: r.tx_cq.cqn() }));
        let mut out = Burst::new(&r.pool, 1);
        assert_eq!(out.alloc(1, 60), 1);
        assert!(matches!(r.tx.tx_burst(&mut out), Err(QueueError::Failed(f)) if f.kind == FailureKind::CqError));
        drop((out, got));
        r.teardown();
    }
}

mod link {
    use super::common::{fill_frame, rig, Rig};
    use super::tx::{receive, send};
    use mlx5_model::profile::LinkMode;
    use rawpkt::{Burst, QueueConfig, TxQueue};
    use std::time::Duration;

    fn q() -> QueueConfig {
        QueueConfig::default().size(64).recover(true)
    }

    /// One ms of device time and one of the host's, then the queues' work.
    fn tick(r: &mut Rig, got: &mut Vec<u64>) {
        r.nic.advance_clock(1_000_000);
        std::thread::sleep(Duration::from_millis(1));
        got.extend(receive(r));
        r.tx.reclaim().unwrap();
    }

    /// A link paused by its peer (PFC or 802.3x pause: `link=pause:50`) stops completions for
    /// 50 ms of device time with no doorbell lost. The watchdog waits in the device's time
    /// (`DvControl::now_ns`: simulated here, and the host slept as long, so a wall-clock 10 ms
    /// watchdog fires too), counts one stall, re-rings after 10 ms and then twice as long each
    /// time, and nothing is lost (not a re-ring every 10 ms, each counted as a missed
    /// doorbell). Upper bounds only: a slow host cannot fail it.
    #[test]
    fn a_paused_link_is_not_a_lost_doorbell() {
        let dev = super::device_with(false, &["link=pause:50"]);
        let mut r = rig(q(), dev, 512);
        r.nic.simulate_clock();
        assert_eq!(send(&mut r, 0, 16), 16);
        let mut got = Vec::new();
        for _ in 0..60 {
            tick(&mut r, &mut got);
        }
        for _ in 0..4 {
            tick(&mut r, &mut got);
        }
        assert_eq!(got, (0..16).collect::<Vec<u64>>(), "nothing lost");
        let s = *r.tx.stats();
        assert!(s.doorbell_rerings <= 3, "{s:?}");
        assert_eq!(s.tx_stalls, 1, "{s:?}");
        assert_eq!(r.tx.in_flight(), 0);
        r.teardown();
    }

    /// A down link (`IBV_EVENT_PORT_ERR`: the attention word's LINK_DOWN) owes no completion;
    /// the watchdog rings nothing for 50 ms, and the frames go when the link comes back.
    #[test]
    fn a_down_link_rings_nothing() {
        let mut r = rig(q(), mlx5_model::ModelConfig::default(), 512);
        r.nic.simulate_clock();
        r.nic.set_link(0, LinkMode::Down);
        assert_eq!(send(&mut r, 0, 16), 16);
        let mut got = Vec::new();
        for _ in 0..50 {
            tick(&mut r, &mut got);
        }
        assert!(got.is_empty());
        assert_eq!((r.tx.stats().doorbell_rerings, r.tx.stats().tx_stalls), (0, 0));
        r.nic.set_link(0, LinkMode::Up);
        for _ in 0..4 {
            tick(&mut r, &mut got);
        }
        assert_eq!(got, (0..16).collect::<Vec<u64>>());
        r.teardown();
    }

    /// Sends `n` frames of `len` bytes numbered from `first`; returns how many the queue took.
    fn send_len(r: &mut Rig, first: u64, n: usize, len: usize) -> usize {
        let mut out = Burst::new(&r.pool, n);
        for k in 0..n {
            assert_eq!(out.alloc(1, len), 1);
            fill_frame(first + k as u64, out.data_mut(k));
        }
        r.tx.tx_burst(&mut out).unwrap()
    }

    /// The port's MTU changes while the queue runs (mlx5e `mlx5e_change_mtu` sets the port's
    /// PMTU; the model's `Nic::set_mtu`). Raised, the queue sends the longer frames it dropped
    /// before; lowered again, it drops them itself rather than post WQEs the device fails
    /// (LOCAL_LENGTH, and a reset), rather than keep the MTU of open time for good.
    #[test]
    fn an_mtu_change_is_taken_without_reopening() {
        let dev = mlx5_model::ModelConfig {
            max_frame: 1518,
            ..mlx5_model::ModelConfig::default()
        };
        let mut r = rig(q(), dev, 512);
        let mut got = Vec::new();
        assert_eq!(send_len(&mut r, 0, 10, 1600), 10);
        got.extend(receive(&mut r));
        assert!(got.is_empty(), "longer than the MTU: dropped by the queue");
        assert_eq!(r.tx.stats().drops, 10);
        r.nic.set_mtu(0, 1600);
        assert_eq!(send_len(&mut r, 100, 10, 1600), 10);
        got.extend(receive(&mut r));
        r.tx.reclaim().unwrap();
        assert_eq!(got, (100..110).collect::<Vec<u64>>(), "the raised MTU is used");
        r.nic.set_mtu(0, 1500);
        assert_eq!(send_len(&mut r, 200, 10, 1600), 10);
        got.extend(receive(&mut r));
        r.tx.reclaim().unwrap();
        assert_eq!(got.len(), 10, "longer than the lowered MTU: dropped again");
        let s = *r.tx.stats();
        assert_eq!((s.drops, s.recoveries), (20, 0), "{s:?}");
        r.teardown();
    }
}

mod striding {
    use super::common::{fill_frame, frame_len, seq_of};
    use rawpkt::{Burst, Pool, PoolConfig, QueueConfig};
    use std::time::{Duration, Instant};

    /// Firmware without `ext_stride_num_range` takes striding WQEs of 2^9 strides and
    /// up (kernel `main.c` `mlx5_ib_query_device`), more than this driver's one buffer per stride
    /// (at most 16 per WQE) can post. DPDK falls back to a regular RQ when its MPRQ cannot be
    /// enabled (`mlx5_rxq.c` `mlx5_mprq_prepare`); so does a queue asked for `rx_striding` there:
    /// it opens, says so, and 20 000 random frames of 60 to 9000 bytes arrive identical, where
    /// the queue would otherwise not open ("need 2^9 per WQE").
    #[test]
    fn striding_works_on_firmware_without_the_extended_range() {
        const N: u64 = 20_000;
        let name = format!("ext-strides-{}", std::process::id());
        let tx_port = rawpkt::open(&format!("model:{name}/0,knob=ext_strides=off")).unwrap();
        let rx_port = rawpkt::open(&format!("model:{name}/1")).unwrap();
        let pool = Pool::new(PoolConfig::default().buffers(8192)).unwrap();
        let q = QueueConfig::default().size(512).rx_striding(true);
        let mut tx = tx_port.tx_queue(0, &pool, &q).unwrap();
        let mut rx = rx_port
            .rx_queue(0, &pool, &q)
            .expect("a striding queue on a 2^9-stride device");
        let (mut out, mut got) = (Burst::new(&pool, 16), Burst::new(&pool, 64));
        let (mut sent, mut recv) = (0u64, 0u64);
        let mut frame = vec![0u8; 9000];
        let mut data = vec![0u8; 9000];
        let deadline = Instant::now() + Duration::from_secs(120);
        while recv < N {
            assert!(Instant::now() < deadline, "stuck at {recv} of {N}");
            // At most 256 frames ahead of the receiver: the RQ holds 512.
            while sent < N && sent < recv + 256 && out.room() > 0 {
                let len = frame_len(sent, 60, 9000);
                fill_frame(sent, &mut frame[..len]);
                assert!(out.push_frame(&frame[..len]), "pool ran dry");
                sent += 1;
            }
            tx.tx_burst(&mut out).unwrap();
            rx.rx_burst(&mut got).unwrap();
            for i in 0..got.len() {
                let n = got.copy_frame(i, &mut data).expect("a frame of at most 9000 bytes");
                assert_eq!(seq_of(&data[..n]), recv, "frame lost or out of order");
                let len = frame_len(recv, 60, 9000);
                fill_frame(recv, &mut frame[..len]);
                assert!(n == len && data[..n] == frame[..len], "frame {recv} differs");
                recv += 1;
            }
            got.clear();
        }
        assert_eq!((rx.stats().packets, rx.stats().recoveries), (N, 0));
        assert_eq!(rx.stats().errors.total(), 0);
        drop((out, got, tx, rx));
        assert_eq!(pool.free_count(), pool.capacity());
    }
}
