//! Fault injection through the model: every injectable fault is counted, recovered from (or
//! reported as a failed queue), and loses no buffer.

mod common;

use common::{fill_frame, rig, Rig};
use mlx5_model::{Fault, ModelConfig};
use mlx5_prm::syndrome;
use rawpkt::{Burst, Failure, FailureKind, Pool, PoolConfig, QueueConfig, QueueError, RxQueue, TxQueue};

fn q(recover: bool) -> QueueConfig {
    QueueConfig::default().size(64).recover(recover)
}

/// Queues `n` 60-byte frames numbered from `first` on TX.
fn send(r: &mut Rig, first: u64, n: usize) -> usize {
    let mut out = Burst::new(&r.pool, n);
    for k in 0..n {
        assert_eq!(out.alloc(1, 60), 1);
        fill_frame(first + k as u64, out.data_mut(k));
    }
    r.tx.tx_burst(&mut out).unwrap()
}

/// Steps the model and drains RX; returns the frames received.
fn receive(r: &mut Rig) -> Result<usize, QueueError> {
    r.nic.step();
    let mut got = Burst::new(&r.pool, 256);
    let mut total = 0;
    loop {
        let n = r.rx.rx_burst(&mut got)?;
        got.clear();
        if n == 0 {
            return Ok(total);
        }
        total += n;
    }
}

fn settle(r: &mut Rig) {
    for _ in 0..4 {
        r.nic.step();
        let _ = r.tx.reclaim();
    }
}

fn flows_again(r: &mut Rig) {
    assert_eq!(send(r, 1000, 40), 40);
    assert_eq!(receive(r).unwrap(), 40);
    settle(r);
}

#[test]
fn tx_error_cqes_of_each_syndrome_are_counted_and_the_sq_recovers() {
    for synd in [
        syndrome::LOCAL_LENGTH,
        syndrome::LOCAL_QP_OP,
        syndrome::LOCAL_PROT,
        syndrome::BAD_RESP,
    ] {
        // A ConnectX-4 sends one WQE per packet, so the WQEs after the failing one are flushed.
        let mut r = rig(q(true), common::device_cx4(), 512);
        flows_again(&mut r);
        r.nic.inject(0, Fault::TxError { syndrome: synd });
        assert_eq!(send(&mut r, 0, 8), 8);
        assert_eq!(receive(&mut r).unwrap(), 0, "a failed SQ sends nothing");
        r.tx.reclaim().expect("recovered");
        let s = *r.tx.stats();
        let e = s.errors;
        let by_kind = match synd {
            syndrome::LOCAL_LENGTH => e.local_length,
            syndrome::LOCAL_QP_OP => e.local_qp_op,
            syndrome::LOCAL_PROT => e.local_prot,
            _ => e.other,
        };
        assert_eq!(by_kind, 1, "syndrome {synd:#x}");
        assert_eq!((s.recoveries, s.drops), (1, 8));
        assert_eq!(r.tx.in_flight(), 0);
        flows_again(&mut r);
        // The last WQE of the burst asked for a completion, so it was flushed with a CQE: in
        // the error's drain, or after the reset where the device writes flushes late
        // (`flush=late:N`), or not at all where it writes only some (`flush=partial:K`). The
        // others asked for none and report no flush (CE = 1, first error only).
        let e = r.tx.stats().errors;
        let flushes = e.flushed + e.late_flush;
        let partial = common::device().knobs.flush.partial > 1;
        assert!(flushes == 1 || partial && flushes == 0, "{e:?}");
        assert_eq!(r.nic.port_counters(0).tx_error_cqes, 1 + flushes);
        assert_eq!(r.tx.stats().recoveries, 1);
        r.teardown();
    }
}

#[test]
fn an_error_on_an_empw_wqe_drops_all_its_packets_and_the_sq_recovers() {
    let mut r = rig(q(true), common::device(), 512);
    r.nic.inject(
        0,
        Fault::TxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    assert_eq!(send(&mut r, 0, 20), 20);
    assert_eq!(
        receive(&mut r).unwrap(),
        0,
        "the failing eMPW WQE sends none of its packets"
    );
    r.tx.reclaim().expect("recovered");
    let s = *r.tx.stats();
    assert_eq!(
        (s.errors.local_prot, s.errors.flushed, s.recoveries, s.drops),
        (1, 0, 1, 20)
    );
    assert_eq!(r.nic.counters().wqes, 1, "20 packets were one WQE");
    flows_again(&mut r);
    r.teardown();
}

#[test]
fn tx_error_without_recovery_fails_the_queue_and_returns_its_buffers() {
    let mut r = rig(q(false), common::device(), 512);
    r.nic.inject(
        0,
        Fault::TxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    assert_eq!(send(&mut r, 0, 8), 8);
    r.nic.step();
    let failed = Err(QueueError::Failed(Failure::from_mlx5(syndrome::LOCAL_PROT)));
    assert_eq!(r.tx.reclaim(), failed);
    let Err(QueueError::Failed(f)) = failed else {
        unreachable!()
    };
    assert_eq!(
        (f.kind, f.syndrome),
        (FailureKind::Protection, Some(syndrome::LOCAL_PROT))
    );
    assert_eq!(
        QueueError::Failed(f).to_string(),
        "queue failed: buffer outside the registered memory (completion syndrome 0x04)"
    );
    let mut out = Burst::new(&r.pool, 4);
    out.alloc(4, 60);
    assert_eq!(r.tx.tx_burst(&mut out), failed);
    assert_eq!(out.len(), 4, "a failed queue takes nothing");
    assert_eq!(r.tx.in_flight(), 0);
    drop(out);
    r.teardown();
}

#[test]
fn rx_local_length_loses_one_frame_and_the_queue_goes_on() {
    let mut r = rig(q(true), common::device(), 512);
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_LENGTH,
        },
    );
    assert_eq!(send(&mut r, 0, 10), 10);
    assert_eq!(receive(&mut r).unwrap(), 9);
    // A genuine one: a frame longer than the posted buffer.
    r.nic.inject_frame(1, &vec![0x33u8; 3000]);
    assert_eq!(receive(&mut r).unwrap(), 0);
    let s = *r.rx.stats();
    assert_eq!((s.errors.local_length, s.recoveries), (2, 0));
    assert_eq!(r.nic.port_counters(1).rx_error_cqes, 2);
    settle(&mut r);
    flows_again(&mut r);
    r.teardown();
}

#[test]
fn rx_critical_errors_reset_the_wq_without_losing_buffers() {
    for synd in [syndrome::LOCAL_PROT, syndrome::LOCAL_QP_OP, syndrome::WR_FLUSH] {
        let mut r = rig(q(true), common::device(), 512);
        r.nic.inject(1, Fault::RxError { syndrome: synd });
        assert_eq!(send(&mut r, 0, 10), 10);
        assert_eq!(receive(&mut r).unwrap(), 0);
        let s = *r.rx.stats();
        assert_eq!(s.recoveries, 1, "syndrome {synd:#x}");
        assert_eq!(s.errors.total(), 1);
        // The WQ was in the error state: the other nine frames were dropped by the device.
        assert_eq!(r.nic.port_counters(1).rx_wq_error, 9);
        assert_eq!(r.rx.posted(), 64, "every RQ slot posted again");
        settle(&mut r);
        flows_again(&mut r);
        r.teardown();
    }
}

#[test]
fn rx_error_without_recovery_fails_the_queue() {
    let mut r = rig(q(false), common::device(), 512);
    r.nic.inject(
        1,
        Fault::RxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    send(&mut r, 0, 4);
    let failed = Err(QueueError::Failed(Failure::from_mlx5(syndrome::LOCAL_PROT)));
    assert_eq!(receive(&mut r), failed);
    let mut got = Burst::new(&r.pool, 8);
    assert_eq!(r.rx.rx_burst(&mut got), failed);
    assert_eq!(r.rx.posted(), 0, "a failed RQ gives its buffers back");
    drop(got);
    settle(&mut r);
    r.teardown();
}

#[test]
fn rx_buffer_exhaustion_is_counted_and_reported_in_the_next_cqe() {
    let mut r = rig(q(true), common::device(), 512);
    r.nic.inject(1, Fault::RxNoBuffer { frames: 5 });
    assert_eq!(send(&mut r, 0, 12), 12);
    assert_eq!(receive(&mut r).unwrap(), 7);
    assert_eq!(r.nic.port_counters(1).rx_out_of_buffer, 5);
    // The device reports its drops in `sop_drop_qpn[31:24]` of the next CQE.
    assert_eq!(r.rx.stats().drops, 5);
    settle(&mut r);
    r.teardown();
}

#[test]
fn pool_exhaustion_starves_the_rq_and_traffic_resumes_when_buffers_return() {
    // 64 RX + 64 TX + a few: holding what we receive runs the pool dry.
    let mut r = rig(q(true), common::device(), 160);
    let mut held = Burst::new(&r.pool, 1024);
    for round in 0..6 {
        send(&mut r, round * 32, 32);
        r.nic.step();
        while r.rx.rx_burst(&mut held).unwrap() > 0 {}
        settle(&mut r);
    }
    assert!(r.rx.stats().no_buffers > 0, "refill must have come up short");
    assert!(r.pool.alloc_failures() > 0);
    assert!(
        r.nic.port_counters(1).rx_out_of_buffer > 0,
        "the RQ ran empty and the device dropped"
    );
    held.clear();
    // The next burst refills the RQ from the returned buffers.
    let mut got = Burst::new(&r.pool, 64);
    r.rx.rx_burst(&mut got).unwrap();
    assert_eq!(r.rx.posted(), 64);
    drop(got);
    flows_again(&mut r);
    r.teardown();
}

/// Every doorbell is flushed when written (`mmio_flush_writes`), so the re-ring watchdog stays
/// silent in normal operation: bursts separated by idle gaps longer than its 10 ms, each seen by
/// the device right away (stepped, so that a descheduled device thread on a loaded machine
/// cannot pass for a lost doorbell), complete without one.
#[test]
fn normal_operation_never_rings_a_doorbell_twice() {
    let mut r = rig(q(true), common::device(), 512);
    let mut got = Burst::new(&r.pool, 64);
    let (mut sent, mut received) = (0u64, 0usize);
    for round in 0..12u64 {
        let n = 1 + (round as usize * 5) % 32;
        let mut out = Burst::new(&r.pool, n);
        for k in 0..n {
            assert_eq!(out.alloc(1, 60), 1);
            fill_frame(sent + k as u64, out.data_mut(k));
        }
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), n);
        sent += n as u64;
        r.nic.step();
        // Idle for longer than the watchdog's period, polling as an idle loop does.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(15);
        while std::time::Instant::now() < until {
            r.tx.reclaim().unwrap();
            received += r.rx.rx_burst(&mut got).unwrap();
            got.clear();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    assert_eq!(received as u64, sent);
    assert_eq!(r.tx.in_flight(), 0);
    assert_eq!(r.tx.stats().doorbell_rerings, 0, "{:?}", r.tx.stats());
    assert_eq!(r.nic.counters().doorbell_missing, 0);
    drop(got);
    r.teardown();
}

#[test]
fn a_lost_doorbell_is_rung_again_and_nothing_is_lost() {
    let mut r = rig(q(true), common::device(), 512);
    r.nic.inject(0, Fault::LostDoorbell);
    assert_eq!(send(&mut r, 0, 8), 8);
    assert_eq!(receive(&mut r).unwrap(), 0);
    assert_eq!(r.nic.counters().doorbells_lost, 1);
    let mut received = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while received < 8 && std::time::Instant::now() < deadline {
        r.tx.reclaim().unwrap();
        received += receive(&mut r).unwrap();
    }
    assert_eq!(received, 8);
    assert!(r.tx.stats().doorbell_rerings >= 1);
    // Meanwhile the device saw WQEs behind its doorbell record that no UAR write announced.
    assert_eq!(r.nic.counters().doorbell_missing, 1);
    settle(&mut r);
    assert_eq!(r.tx.in_flight(), 0);
    r.teardown();
}

#[test]
fn a_lost_doorbell_on_a_full_ring_is_rung_again_by_tx_burst() {
    // The sender never runs out of packets, so it never calls reclaim with an empty burst.
    let mut r = rig(q(true), common::device(), 2048);
    let mut out = Burst::new(&r.pool, 32);
    while r.tx.in_flight() < 64 * 4 - 32 {
        out.alloc(out.room(), 60);
        if r.tx.tx_burst(&mut out).unwrap() == 0 {
            break;
        }
    }
    r.nic.inject(0, Fault::LostDoorbell);
    out.alloc(out.room(), 60);
    r.tx.tx_burst(&mut out).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut moved = false;
    while !moved && std::time::Instant::now() < deadline {
        out.alloc(out.room(), 60);
        r.tx.tx_burst(&mut out).unwrap();
        moved = receive(&mut r).unwrap() > 0;
    }
    assert!(
        moved,
        "nothing went out after the doorbell was lost: {:?} {:?} {:?} in flight {}",
        r.nic.counters(),
        r.nic.port_counters(0),
        r.tx.stats(),
        r.tx.in_flight()
    );
    assert!(r.tx.stats().doorbell_rerings >= 1);
    drop(out);
    settle(&mut r);
    r.teardown();
}

#[test]
fn bursts_from_another_pool_and_runts_are_refused_without_loss() {
    let mut r = rig(q(true), common::device(), 512);
    let other = Pool::new(PoolConfig::default().buffers(8)).unwrap();
    let mut foreign = Burst::new(&other, 4);
    foreign.alloc(2, 60);
    assert_eq!(r.tx.tx_burst(&mut foreign), Err(QueueError::ForeignPool));
    assert_eq!(r.rx.rx_burst(&mut foreign), Err(QueueError::ForeignPool));
    assert_eq!(foreign.len(), 2);
    drop(foreign);
    assert_eq!(other.free_count(), 8);

    let mut out = Burst::new(&r.pool, 4);
    out.alloc(1, 10);
    out.alloc(1, 60);
    assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 2);
    assert_eq!(r.tx.stats().drops, 1, "the 10-byte runt is dropped and counted");
    assert_eq!(r.tx.stats().packets, 1);
    assert_eq!(receive(&mut r).unwrap(), 1);
    drop(out);
    settle(&mut r);
    r.teardown();
}

#[test]
fn fresh_cq_slots_look_as_rdma_core_leaves_them() {
    let r = rig(q(true), common::device(), 512);
    let slot = r.nic.cq_slot(r.tx_cq.cqn(), 17).unwrap();
    let mut h4 = [0u8; 64];
    h4[63] = 0xf0;
    assert_eq!(slot, h4, "vector h4: zeros, op_own 0xF0");
    assert_eq!(common::golden("h4_cqe_init_slot"), h4.to_vec());
    r.teardown();
}

#[test]
fn garbage_cqes_never_panic_and_never_lose_a_buffer() {
    let mut rng = common::Rng(0x5eed);
    let mut detected = 0;
    for _ in 0..200 {
        let mut r = rig(q(true), common::device(), 512);
        send(&mut r, 0, 16);
        r.nic.step();
        for _ in 0..rng.range(1, 8) {
            let mut cqe = [0u8; 64];
            for b in cqe.iter_mut() {
                *b = rng.next() as u8;
            }
            // Mostly plausible opcodes, sometimes anything.
            let opcode = [0u8, 2, 13, 14, 15, 3, 12][rng.range(0, 6)];
            cqe[63] = opcode << 4 | (cqe[63] & 0x0c);
            let cqn = if rng.next() & 1 == 0 {
                r.tx_cq.cqn()
            } else {
                r.rx_cq.cqn()
            };
            r.nic.inject_cqe(cqn, &cqe);
        }
        let mut got = Burst::new(&r.pool, 64);
        for _ in 0..4 {
            // Errors are fine (a failed queue is a valid answer); panics and leaks are not.
            let _ = r.rx.rx_burst(&mut got);
            let _ = r.tx.reclaim();
            r.nic.step();
            got.clear();
        }
        detected += r.rx.stats().errors.total() + r.tx.stats().errors.total();
        drop(got);
        r.teardown();
    }
    // Most injected CQEs are inconsistent with the rings and must be noticed as such.
    assert!(detected > 200, "only {detected} bad CQEs detected");
}

#[test]
fn a_failed_queue_stops_the_device_before_its_buffers_are_reused() {
    // TX: the SQ fails (no recovery); the buffers it held go back to the pool only after the
    // device was stopped, so whatever the user writes into them next never goes out.
    let mut r = rig(q(false), common::device(), 256);
    r.nic.inject(
        0,
        Fault::TxError {
            syndrome: syndrome::LOCAL_PROT,
        },
    );
    send(&mut r, 0, 8);
    r.nic.step();
    assert!(r.tx.reclaim().is_err());
    let sent = r.nic.port_counters(0).tx_frames;
    let mut scribble = Burst::new(&r.pool, 256);
    scribble.alloc(256, 60);
    for i in 0..scribble.len() {
        scribble.data_mut(i).fill(0xaa);
    }
    for _ in 0..4 {
        r.nic.step();
    }
    assert_eq!(
        r.nic.port_counters(0).tx_frames,
        sent,
        "a stopped SQ sends nothing more"
    );

    // RX: a CQE the queue cannot explain fails it; the device must not write into buffers the
    // user owns afterwards.
    let mut r2 = rig(q(false), common::device(), 256);
    let mut bogus = [0u8; 64];
    bogus[63] = mlx5_prm::CQE_REQ << 4;
    r2.nic.inject_cqe(r2.rx_cq.cqn(), &bogus);
    let mut got = Burst::new(&r2.pool, 64);
    assert!(r2.rx.rx_burst(&mut got).is_err());
    let mut mine = Burst::new(&r2.pool, 256);
    mine.alloc(256, 60);
    for i in 0..mine.len() {
        mine.data_mut(i).fill(0x55);
    }
    r2.nic.inject_frame(1, &[0x77u8; 60]);
    assert!(
        (0..mine.len()).all(|i| mine.data(i) == [0x55u8; 60]),
        "the device wrote into a user's buffer"
    );
    assert_eq!(
        r2.nic.port_counters(1).rx_out_of_buffer,
        1,
        "the stopped WQ has nothing posted"
    );
    drop((scribble, got, mine));
    r.teardown();
    r2.teardown();
}

#[test]
fn more_completions_than_posted_wqes_are_refused_not_believed() {
    // 10 buffers in all: the RQ has at most 10 posted WQEs, and a CQ claiming 20 packets lies.
    let mut r = rig(q(true), common::device(), 10);
    let posted = r.rx.posted();
    assert!(posted <= 10);
    for k in 0..20u16 {
        let cqe = mlx5_prm::Cqe64::resp_send(k, 60, 0, 0, 0, 0);
        r.nic.inject_cqe(r.rx_cq.cqn(), cqe.as_bytes());
    }
    let mut got = Burst::new(&r.pool, 64);
    let n = r.rx.rx_burst(&mut got).unwrap();
    assert_eq!(n as u32, posted, "only as many packets as WQEs were posted");
    // With every buffer in the user's hands nothing is posted, so the surplus is not read.
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 0);
    got.clear();
    for _ in 0..4 {
        let _ = r.rx.rx_burst(&mut got);
        got.clear();
    }
    drop(got);
    r.teardown();
}

#[test]
fn an_oversized_frame_is_dropped_alone_and_the_queue_goes_on() {
    // The device sends frames of at most 1000 bytes; buffers hold 1920.
    for dev in [common::device(), common::device_cx4()] {
        let dev = ModelConfig { max_frame: 1000, ..dev };
        let mut r = rig(q(true), dev, 512);
        let mut out = Burst::new(&r.pool, 32);
        for k in 0..32u64 {
            let len = if k == 7 { 1500 } else { 60 };
            out.alloc(1, len);
            let i = out.len() - 1;
            fill_frame(k, out.data_mut(i));
        }
        assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 32);
        assert_eq!(receive(&mut r).unwrap(), 31, "every frame but the long one");
        let s = *r.tx.stats();
        assert_eq!((s.drops, s.recoveries, s.errors.total()), (1, 0, 0));
        drop(out);
        settle(&mut r);
        r.teardown();
    }
}

/// The model enforces the port's inline mode: a queue that inlines only the 18-byte L2 header
/// while the vport asks for TCP/UDP headers (a queue built on a wrong guess) gets LOCAL_QP_OP
/// on its first WQE, the rest flushed, nothing on the wire; the queue recovers and nothing is
/// lost. With the mode it was built for, traffic flows again.
#[test]
fn a_wqe_inlining_fewer_headers_than_the_vport_asks_is_refused() {
    use mlx5_prm::InlineMode;
    let mut r = rig(q(true), common::device_cx4(), 512);
    flows_again(&mut r);
    r.nic.set_inline_mode(0, InlineMode::TcpUdp);
    // IPv4/UDP frames: the vport wants 42 header bytes inline, the queue writes 18.
    let udp = common::golden("frame_ipv4_udp_60");
    let mut out = Burst::new(&r.pool, 8);
    for _ in 0..8 {
        assert!(out.push_copy(&udp));
    }
    assert_eq!(r.tx.tx_burst(&mut out).unwrap(), 8);
    assert_eq!(receive(&mut r).unwrap(), 0, "nothing may reach the wire");
    r.tx.reclaim().expect("recovered");
    let s = *r.tx.stats();
    assert_eq!(s.errors.local_qp_op, 1, "{s:?}");
    assert_eq!(s.recoveries, 1);
    r.nic.set_inline_mode(0, InlineMode::L2);
    flows_again(&mut r);
    r.teardown();
}
