//! TX → model → RX through the DV datapath: bytes identical across ring wraps, owner parity over
//! many CQ passes, every buffer back at the end.

mod common;

use common::{fill_frame, frame_len, rig, seq_of, Rng};
use mlx5_model::ModelConfig;
use rawpkt::{Burst, QueueConfig, RxQueue, TxQueue};

/// Sends `total` frames of random sizes in `lo..=hi` in random bursts of 1..=max_burst and checks each
/// received frame byte for byte, in order.
fn run(dev: ModelConfig, q: QueueConfig, total: u64, lo: usize, hi: usize, max_burst: usize, seed: u64) -> common::Rig {
    let mut r = rig(q, dev, 4096);
    let mut rng = Rng(seed);
    let mut out = Burst::new(&r.pool, 64);
    let mut got = Burst::new(&r.pool, 64);
    let mut expect = vec![0u8; 2048];
    let (mut next_tx, mut next_rx) = (0u64, 0u64);
    let mut steps = 0u64;
    while next_rx < total {
        if out.is_empty() && next_tx < total {
            let n = rng.range(1, max_burst).min((total - next_tx) as usize);
            for _ in 0..n {
                let len = frame_len(next_tx, lo, hi);
                assert_eq!(out.alloc(1, len), 1, "pool ran dry");
                let i = out.len() - 1;
                fill_frame(next_tx, out.data_mut(i));
                next_tx += 1;
            }
        }
        r.tx.tx_burst(&mut out).unwrap();
        r.nic.step();
        steps += 1;
        r.rx.rx_burst(&mut got).unwrap();
        for i in 0..got.len() {
            let data = got.data(i);
            assert_eq!(seq_of(data), next_rx, "frame out of order or lost");
            let len = frame_len(next_rx, lo, hi);
            // Runts arrive padded with zeros to the Ethernet minimum.
            assert_eq!(data.len(), len.max(60), "length of frame {next_rx}");
            expect[..len.max(60)].fill(0);
            fill_frame(next_rx, &mut expect[..len]);
            assert!(data == &expect[..len.max(60)], "bytes of frame {next_rx} differ");
            next_rx += 1;
        }
        got.clear();
        assert!(steps < total * 4, "no progress");
    }
    drop((out, got));
    while r.tx.in_flight() > 0 {
        r.nic.step();
        r.tx.reclaim().unwrap();
    }
    assert_eq!(r.tx.stats().packets, total);
    assert_eq!(r.rx.stats().packets, total);
    assert_eq!(r.rx.stats().errors.total() + r.tx.stats().errors.total(), 0);
    assert_eq!(r.tx.stats().bytes, r.rx.stats().bytes);
    let c = r.nic.counters();
    assert_eq!((c.doorbell_missing, c.doorbell_mismatch, c.cq_overruns), (0, 0, 0));
    // Every WQE's control segment ends in an `imm` of 0 (SEND, eMPW, inlined, signalled or not).
    assert!(c.wqes > 0);
    assert_eq!(c.wqes_nonzero_imm, 0);
    r
}

/// A million frames through one device; returns the WQEs it executed.
fn a_million_through(dev: ModelConfig) -> u64 {
    let q = QueueConfig::default().size(256);
    let r = run(dev, q, 1_000_000, 60, 1514, 64, 0xfeed);
    // 512 CQEs per RX CQ pass (rdma-core rounding of 256): nearly 2000 passes.
    assert_eq!(r.rx_cq.cqe_cnt(), 512);
    assert!(r.rx.stats().packets / 512 >= 3, "RX CQ passes");
    let wqes = r.nic.counters().wqes;
    r.teardown();
    wqes
}

#[test]
fn a_million_random_frames_arrive_identical_on_a_connectx4() {
    // One 64-byte SEND per frame: 1e6 WQEBBs through a 256-WQEBB ring.
    assert_eq!(a_million_through(common::device_cx4()), 1_000_000);
}

#[test]
fn a_million_random_frames_arrive_identical_on_a_connectx5() {
    // Enhanced multi-packet WQEs: up to 32 frames each, data segments wrapping the ring end.
    let wqes = a_million_through(common::device());
    assert!(wqes < 1_000_000 / 8, "{wqes} eMPW WQEs for 1e6 frames");
}

#[test]
fn inlined_multi_wqebb_frames_wrap_the_ring_end() {
    // Frames up to 400 bytes are copied whole into WQEs of up to 7 WQEBBs.
    let q = QueueConfig::default().size(64).tx_inline(400);
    let r = run(common::device_cx4(), q, 200_000, 22, 600, 32, 0xbeef);
    assert!(
        r.nic.counters().wrapped_wqes > 1000,
        "wrapped {}",
        r.nic.counters().wrapped_wqes
    );
    r.teardown();
}

#[test]
fn cq_owner_parity_holds_over_many_passes_of_a_small_cq() {
    // 64 asked → 128 entries: the parity must follow 128, not 64.
    let q = QueueConfig::default().size(64).tx_completion_every(1);
    // Bursts stay below what a 64-WQE RQ still has posted while it waits to refill 16 at once.
    let r = run(common::device_cx4(), q, 5_000, 60, 60, 32, 7);
    assert_eq!(r.tx_cq.cqe_cnt(), 128);
    // One CQE per WQE on TX: 5000 CQEs = 39 passes; RX the same.
    assert!(r.nic.counters().cqes >= 10_000);
    r.teardown();
}

#[test]
fn rx_reports_checksums_types_and_hash() {
    let q = QueueConfig::default().size(64);
    let mut r = rig(q, common::device(), 256);
    let mut good = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1234, 5678)
        .write(&mut good, &[0x55; 26])
        .unwrap();
    let mut bad_l4 = good.clone();
    let n = bad_l4.len();
    bad_l4[n - 1] ^= 1;
    let mut tcp6 = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6([1; 16], [2; 16], 64)
        .tcp(80, 443, 1, 1000)
        .write(&mut tcp6, &[1, 2, 3])
        .unwrap();
    let mut out = Burst::new(&r.pool, 8);
    for f in [&good, &bad_l4, &tcp6] {
        assert!(out.push_copy(f));
    }
    r.tx.tx_burst(&mut out).unwrap();
    r.nic.step();
    let mut got = Burst::new(&r.pool, 8);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 3);
    use rawpkt::flags::*;
    let f: Vec<u32> = got.packets().iter().map(|p| p.flags()).collect();
    assert_eq!(
        f[0] & (IPV4 | UDP | L3_CSUM_OK | L4_CSUM_OK),
        IPV4 | UDP | L3_CSUM_OK | L4_CSUM_OK
    );
    assert_eq!(
        f[1] & (L3_CSUM_OK | L4_CSUM_OK),
        L3_CSUM_OK,
        "corrupt UDP payload must not be L4 ok"
    );
    assert_eq!(f[2] & (IPV6 | TCP | L4_CSUM_OK), IPV6 | TCP | L4_CSUM_OK);
    // Same flow, same hash; the hash is the Toeplitz one over addresses and ports.
    assert_eq!(got.packet(0).rss_hash(), got.packet(1).rss_hash());
    assert_ne!(got.packet(0).rss_hash(), 0);
    drop((out, got));
    while r.tx.in_flight() > 0 {
        r.nic.step();
        r.tx.reclaim().unwrap();
    }
    r.teardown();
}

#[test]
fn tx_checksum_offload_fills_in_checksums() {
    let q = QueueConfig::default().size(64);
    let mut r = rig(q, common::device(), 256);
    let mut good = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1234, 5678)
        .write(&mut good, &[0x42; 100])
        .unwrap();
    let mut zeroed = good.clone();
    zeroed[24..26].copy_from_slice(&[0, 0]);
    zeroed[40..42].copy_from_slice(&[0, 0]);
    let mut out = Burst::new(&r.pool, 8);
    out.push_copy(&zeroed);
    out.set_flags(0, rawpkt::flags::TX_L3_CSUM | rawpkt::flags::TX_L4_CSUM);
    r.tx.tx_burst(&mut out).unwrap();
    r.nic.step();
    let mut got = Burst::new(&r.pool, 8);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), 1);
    assert_eq!(got.data(0), &good[..]);
    drop((out, got));
    r.nic.step();
    r.tx.reclaim().unwrap();
    r.teardown();
}

#[test]
fn a_burst_mixing_checksum_offload_flags_arrives_whole_and_in_order() {
    // One eMPW WQE carries one set of checksum flags: a mixed burst must be split at each change.
    let q = QueueConfig::default().size(64);
    let mut r = rig(q, common::device(), 256);
    let offload = [false, true, true, false, true, false, false, true];
    let mut out = Burst::new(&r.pool, 8);
    for (i, &o) in offload.iter().enumerate() {
        let mut frame = Vec::new();
        let mut payload = [0x42; 100];
        payload[18] = i as u8;
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1234, 5678)
            .write(&mut frame, &payload)
            .unwrap();
        if o {
            // The device is asked to fill these in.
            frame[24..26].copy_from_slice(&[0, 0]);
            frame[40..42].copy_from_slice(&[0, 0]);
        }
        assert!(out.push_copy(&frame));
        if o {
            out.set_flags(i, rawpkt::flags::TX_L3_CSUM | rawpkt::flags::TX_L4_CSUM);
        }
    }
    assert_eq!(r.tx.tx_burst(&mut out).unwrap(), offload.len());
    r.nic.step();
    let mut got = Burst::new(&r.pool, 8);
    assert_eq!(r.rx.rx_burst(&mut got).unwrap(), offload.len());
    for i in 0..offload.len() {
        let parsed = etherparse::SlicedPacket::from_ethernet(got.data(i)).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = parsed.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.payload().payload[8 + 18], i as u8, "frame {i} out of order");
        let hdr = ip.header().to_header();
        assert_eq!(
            hdr.header_checksum,
            hdr.calc_header_checksum(),
            "frame {i}: IPv4 checksum"
        );
        let Some(etherparse::TransportSlice::Udp(udp)) = parsed.transport else {
            panic!("not UDP")
        };
        let want = udp.to_header().calc_checksum_ipv4(&hdr, udp.payload()).unwrap();
        assert_eq!(udp.checksum(), want, "frame {i}: UDP checksum");
    }
    assert_eq!(r.tx.stats().packets, offload.len() as u64);
    drop((out, got));
    r.nic.step();
    r.tx.reclaim().unwrap();
    r.teardown();
}

/// Devices in every inline mode (none, L2, IP, TCP/UDP; SEND WQEs, as a device that asks for
/// inline headers has no eMPW) move random frames of every header stack (untagged, VLAN, QinQ,
/// IPv4 with options, IPv6, TCP, UDP, ARP) byte for byte; the model refuses any WQE that
/// inlines fewer header bytes than its mode asks, and none is refused.
#[test]
fn every_inline_mode_carries_the_headers_it_asks_for() {
    use mlx5_prm::InlineMode;
    use rawpkt::{Burst, RxQueue, TxQueue};
    for mode in [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp] {
        let dev = ModelConfig {
            inline_mode: mode,
            enhanced_mpw: mode == InlineMode::None,
            ..common::device()
        };
        let mut r = common::rig(QueueConfig::default().size(256), dev, 2048);
        let mut rng = common::Rng(0x1d7e ^ mode as u64);
        let mut sent = Vec::new();
        let mut got = Burst::new(&r.pool, 64);
        let mut received = Vec::new();
        for _ in 0..200 {
            let mut out = Burst::new(&r.pool, 16);
            for _ in 0..1 + rng.below(16) as usize {
                let payload = vec![rng.next() as u8; rng.range(0, 200)];
                let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
                let vid = |v: u16| etherparse::VlanId::try_new(v).unwrap();
                macro_rules! build {
                    ($b:expr) => {{
                        let b = $b;
                        let mut v = Vec::with_capacity(b.size(payload.len()));
                        b.write(&mut v, &payload).unwrap();
                        v
                    }};
                }
                let (v4, v6) = (([10, 0, 0, 1], [10, 0, 0, 2]), ([1; 16], [2; 16]));
                let f = match rng.below(6) {
                    0 => build!(b.ipv4(v4.0, v4.1, 64).udp(1, 2)),
                    1 => build!(b.single_vlan(vid(5)).ipv4(v4.0, v4.1, 64).tcp(1, 2, 3, 1024)),
                    2 => build!(b.double_vlan(vid(7), vid(5)).ipv4(v4.0, v4.1, 64).udp(1, 2)),
                    3 => build!(b.ipv6(v6.0, v6.1, 64).tcp(1, 2, 3, 1024)),
                    4 => build!(b.ipv6(v6.0, v6.1, 64).udp(1, 2)),
                    _ => {
                        let mut f = vec![0u8; 60];
                        f[..6].copy_from_slice(&[0xff; 6]);
                        f[12..14].copy_from_slice(&[0x08, 0x06]);
                        f
                    }
                };
                let mut f = f;
                f.resize(f.len().max(60), 0);
                assert!(out.push_copy(&f));
                sent.push(f);
            }
            while !out.is_empty() {
                r.tx.tx_burst(&mut out).unwrap();
                r.nic.step();
                r.rx.rx_burst(&mut got).unwrap();
                for i in 0..got.len() {
                    received.push(got.data(i).to_vec());
                }
                got.clear();
            }
        }
        for _ in 0..4 {
            r.nic.step();
            r.tx.reclaim().unwrap();
            r.rx.rx_burst(&mut got).unwrap();
            for i in 0..got.len() {
                received.push(got.data(i).to_vec());
            }
            got.clear();
        }
        assert_eq!(r.tx.stats().errors.total(), 0, "mode {mode:?}: {:?}", r.tx.stats());
        assert_eq!(received.len(), sent.len(), "mode {mode:?}");
        assert!(received == sent, "mode {mode:?}: frames differ");
        drop(got);
        r.teardown();
    }
}

/// `ModelConfig::rx_capacity_pps`: a burst that reaches the port within one step gets the
/// buffer (50 ms worth) and what the step's own time refills, no more; frames the model's thread
/// finds after a pause (the host took its CPU) are taken as if they came while it was away, so
/// a busy host loses none of them. Counts against bounds from the times measured around each
/// step, which hold however long the host makes the step or the pause.
#[test]
fn the_receive_capacity_takes_a_late_step_whole_and_a_burst_up_to_its_buffer() {
    // 10 000 frames a second: a buffer of 500.
    const PPS: f64 = 10_000.0;
    let dev = ModelConfig {
        rx_capacity_pps: Some(PPS),
        ..ModelConfig::default()
    };
    let q = QueueConfig::default().size(1024);
    let mut r = rig(q, dev, 8192);
    let mut out = Burst::new(&r.pool, 64);
    let mut got = Burst::new(&r.pool, 64);
    // Posts `n` frames without stepping, then runs one step; returns what arrived and how long
    // the step took.
    let mut round = |r: &mut common::Rig, n: u64| {
        let mut posted = 0;
        while posted < n {
            let k = out.alloc(((n - posted) as usize).min(64), 60);
            for i in 0..k {
                fill_frame(posted + i as u64, out.data_mut(i));
            }
            posted += r.tx.tx_burst(&mut out).unwrap() as u64;
            assert!(out.is_empty(), "the send ring took every frame");
        }
        let t = std::time::Instant::now();
        r.nic.step();
        let took = t.elapsed().as_secs_f64();
        let mut arrived = 0;
        while r.rx.rx_burst(&mut got).unwrap() > 0 {
            arrived += got.len() as u64;
            got.clear();
        }
        while r.tx.in_flight() > 0 {
            r.nic.step();
            r.tx.reclaim().unwrap();
        }
        (arrived, took)
    };
    // 900 frames in one step (as many as the receive ring surely has buffers for): the buffer's
    // 500, and what the step's time refilled.
    let (arrived, took) = round(&mut r, 900);
    let most = 500 + (PPS * took).ceil() as u64 + 1;
    assert!(
        (500..=most.min(900)).contains(&arrived),
        "{arrived} of a burst of 900 in a step of {took} s"
    );
    assert_eq!(r.nic.port_counters(1).rx_wire_drops, 900 - arrived);
    // A pause of at least 200 ms (2000 frames of refill), then 900 frames in one step: all.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        round(&mut r, 900).0,
        900,
        "a step after a pause takes what came meanwhile"
    );
    assert_eq!(r.nic.port_counters(1).rx_wire_drops, 900 - arrived);
    drop((out, got));
    r.teardown();
}
