//! Every format against rdma-core's layouts and vectors.

use crate::vectors as golden;
use crate::*;
use std::mem::{align_of, offset_of, size_of};

const QPN: u32 = 0x1234;
const LKEY: u32 = 0xdead_beef;
const FRAME_VA: u64 = 0x0000_7f12_3456_7800;

fn frame() -> Vec<u8> {
    golden::bytes("frame_ipv4_udp_60")
}

fn hdr() -> [u8; 18] {
    frame()[..18].try_into().unwrap()
}

#[test]
fn layouts_match_rdma_core() {
    assert_eq!(
        golden::layout("mlx5_wqe_ctrl_seg"),
        (size_of::<CtrlSeg>(), align_of::<CtrlSeg>())
    );
    assert_eq!(
        golden::layout("mlx5_wqe_eth_seg"),
        (size_of::<EthSeg>(), align_of::<EthSeg>())
    );
    assert_eq!(
        golden::layout("mlx5_wqe_data_seg"),
        (size_of::<DataSeg>(), align_of::<DataSeg>())
    );
    assert_eq!(golden::layout("mlx5_cqe64"), (size_of::<Cqe64>(), align_of::<Cqe64>()));
    assert_eq!(
        golden::layout("mlx5_err_cqe"),
        (size_of::<ErrCqe>(), align_of::<ErrCqe>())
    );
    let f = |s, m| golden::field(s, m).0;
    assert_eq!(f("mlx5_wqe_ctrl_seg", "qpn_ds"), offset_of!(CtrlSeg, qpn_ds));
    assert_eq!(f("mlx5_wqe_ctrl_seg", "signature"), offset_of!(CtrlSeg, signature));
    assert_eq!(
        f("mlx5_wqe_ctrl_seg", "dci_stream_channel_id"),
        offset_of!(CtrlSeg, dci_stream_channel_id)
    );
    assert_eq!(f("mlx5_wqe_ctrl_seg", "fm_ce_se"), offset_of!(CtrlSeg, fm_ce_se));
    assert_eq!(f("mlx5_wqe_ctrl_seg", "imm"), offset_of!(CtrlSeg, imm));
    assert_eq!(f("mlx5_wqe_eth_seg", "cs_flags"), offset_of!(EthSeg, cs_flags));
    assert_eq!(f("mlx5_wqe_eth_seg", "mss"), offset_of!(EthSeg, mss));
    assert_eq!(
        f("mlx5_wqe_eth_seg", "inline_hdr_sz"),
        offset_of!(EthSeg, inline_hdr_sz)
    );
    // Our `inline_hdr` covers rdma-core's `inline_hdr_start[2]` + `inline_hdr[16]`.
    assert_eq!(
        golden::field("mlx5_wqe_eth_seg", "inline_hdr_start"),
        (offset_of!(EthSeg, inline_hdr), 2)
    );
    assert_eq!(f("mlx5_wqe_data_seg", "lkey"), offset_of!(DataSeg, lkey));
    assert_eq!(f("mlx5_wqe_data_seg", "addr"), offset_of!(DataSeg, addr));
    for (m, off) in [
        ("wqe_id", offset_of!(Cqe64, wqe_id)),
        ("ml_path", offset_of!(Cqe64, ml_path)),
        ("slid", offset_of!(Cqe64, slid)),
        ("flags_rqpn", offset_of!(Cqe64, flags_rqpn)),
        ("hds_ip_ext", offset_of!(Cqe64, hdr_type_etc)),
        ("vlan_info", offset_of!(Cqe64, vlan_info)),
        ("srqn_uidx", offset_of!(Cqe64, srqn_uidx)),
        ("imm_inval_pkey", offset_of!(Cqe64, imm_inval_pkey)),
        ("byte_cnt", offset_of!(Cqe64, byte_cnt)),
        ("timestamp", offset_of!(Cqe64, timestamp)),
        ("sop_drop_qpn", offset_of!(Cqe64, sop_drop_qpn)),
        ("wqe_counter", offset_of!(Cqe64, wqe_counter)),
        ("signature", offset_of!(Cqe64, signature)),
        ("op_own", offset_of!(Cqe64, op_own)),
    ] {
        assert_eq!(f("mlx5_cqe64", m), off, "mlx5_cqe64.{m}");
    }
    for (m, off) in [
        ("srqn", offset_of!(ErrCqe, srqn)),
        ("vendor_err_synd", offset_of!(ErrCqe, vendor_err_synd)),
        ("syndrome", offset_of!(ErrCqe, syndrome)),
        ("s_wqe_opcode_qpn", offset_of!(ErrCqe, s_wqe_opcode_qpn)),
        ("wqe_counter", offset_of!(ErrCqe, wqe_counter)),
        ("op_own", offset_of!(ErrCqe, op_own)),
    ] {
        assert_eq!(f("mlx5_err_cqe", m), off, "mlx5_err_cqe.{m}");
    }
}

#[test]
fn segments_encode_like_rdma_core_helpers() {
    let ctrl = |idx, ds, fm| CtrlSeg {
        opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, idx, OPCODE_SEND),
        qpn_ds: CtrlSeg::qpn_ds(QPN, ds),
        fm_ce_se: fm,
        ..CtrlSeg::default()
    };
    assert_eq!(
        ctrl(5, 4, WQE_CTRL_CQ_UPDATE).to_bytes().to_vec(),
        golden::bytes("a1_ctrl_send_pi5_ds4_cqe")
    );
    assert_eq!(
        ctrl(0xffff, 6, 0).to_bytes().to_vec(),
        golden::bytes("a2_ctrl_send_pi65535_ds6_nocqe")
    );
    let eth = |cs| EthSeg {
        cs_flags: cs,
        inline_hdr_sz: Be16::new(18),
        inline_hdr: hdr(),
        ..EthSeg::default()
    };
    assert_eq!(eth(0).to_bytes().to_vec(), golden::bytes("b1_eseg_inline18_nocsum"));
    assert_eq!(
        eth(ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM).to_bytes().to_vec(),
        golden::bytes("b2_eseg_inline18_l3l4csum")
    );
    assert_eq!(
        DataSeg::new(42, LKEY, FRAME_VA + 18).to_bytes().to_vec(),
        golden::bytes("c1_dseg_len42")
    );
    assert_eq!(
        DataSeg::new(2048, 0x1000, 0x1000_0000).to_bytes().to_vec(),
        golden::bytes("f1_rwqe_1seg")
    );
    let mut f2 = DataSeg::new(2048, 0x1000, 0x1000_0000).to_bytes().to_vec();
    f2.extend_from_slice(&DataSeg::TERMINATOR.to_bytes());
    assert_eq!(f2, golden::bytes("f2_rwqe_2slot_terminated"));
}

#[test]
fn the_datapath_wqe_is_d1() {
    let qpn_ds = CtrlSeg::qpn_ds(QPN, 4);
    let d1 = SendWqe::l2_inline(5, qpn_ds, true, 0, 0, hdr(), 60, Be32::new(LKEY), FRAME_VA);
    assert_eq!(d1.as_bytes().to_vec(), golden::bytes("d1_wqe_send_1bb"));
    let d2 = SendWqe::l2_inline(5, qpn_ds, true, 0, 0xc0, hdr(), 60, Be32::new(LKEY), FRAME_VA);
    assert_eq!(d2.as_bytes().to_vec(), golden::bytes("d2_wqe_send_1bb_l3l4csum"));
    assert_eq!(d1.ctrl.doorbell_bytes().to_vec(), golden::bytes("i5_uar_doorbell_d1"));
}

#[test]
fn the_inline_wqe_is_e1() {
    let mut out = [0xa5u8; 256];
    let bbs = encode_send(6, QPN, &frame(), None, 0, true, 0, &mut out);
    assert_eq!(bbs, 2);
    assert_eq!(out[..128].to_vec(), golden::bytes("e1_wqe_send_inline60_eseg"));
}

/// A chained frame's SEND (m1) and a VLAN insertion (m2), as rdma-core's helpers and DPDK's
/// word lay them out; the device side reads the tag back from m2.
#[test]
fn the_scatter_and_vlan_sends_are_m1_and_m2() {
    let f = frame();
    let gathers = [
        DataSeg::new(12, LKEY, FRAME_VA + 18),
        DataSeg::new(20, LKEY, FRAME_VA + 0x1000),
        DataSeg::new(10, LKEY, FRAME_VA + 0x2000),
    ];
    let mut out = [0xa5u8; 128];
    assert_eq!(
        encode_send_sg(7, QPN, &f[..18], None, &gathers, 0, true, 0, &mut out),
        2
    );
    // Past ds (6 DS, 96 bytes) the WQE's second WQEBB is zero-padded, as the generator's.
    assert_eq!(out.to_vec(), golden::bytes("m1_wqe_send_3dseg"));
    let mut out = [0xa5u8; 64];
    let one = [DataSeg::new(60, LKEY, FRAME_VA)];
    assert_eq!(encode_send_sg(8, QPN, &[], Some(0x6123), &one, 0, true, 0, &mut out), 1);
    assert_eq!(out.to_vec(), golden::bytes("m2_wqe_send_vlan_insert"));
    assert_eq!(eseg_vlan_insert(&out[16..32]), Some(0x6123));
    assert_eq!(eseg_vlan_insert(&golden::bytes("d1_wqe_send_1bb")[16..32]), None);
}

/// The general SEND encoder writes the canonical SEND exactly as the packed form does.
#[test]
fn the_general_send_of_a_canonical_frame_is_d1() {
    let f = frame();
    let gather = DataSeg::new(60 - 18, LKEY, FRAME_VA + 18);
    for (cs, name) in [(0, "d1_wqe_send_1bb"), (0xc0, "d2_wqe_send_1bb_l3l4csum")] {
        let mut out = [0xa5u8; 64];
        assert_eq!(encode_send(5, QPN, &f[..18], Some(gather), cs, true, 0, &mut out), 1);
        assert_eq!(out.to_vec(), golden::bytes(name));
    }
}

/// The packed eMPW title is the control and Ethernet segments of the struct views (which the
/// golden vectors check), and the data segment the datapath writes in place is `c1`.
#[test]
fn the_empw_title_and_data_segment_match_the_segment_definitions() {
    for (pi, ds, cs, signal) in [
        (0u32, 3u32, 0u8, false),
        (0x1_fffe, 34, 0xc0, true),
        (7, 60, 0x40, true),
    ] {
        let title = packed::empw_title(pi, CtrlSeg::qpn_ds(QPN, 4), ds, cs, signal);
        let mut got = Vec::new();
        for w in title.iter().flatten() {
            got.extend_from_slice(&w.to_le_bytes());
        }
        let ctrl = CtrlSeg {
            opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, pi as u16, OPCODE_ENHANCED_MPSW),
            qpn_ds: CtrlSeg::qpn_ds(QPN, ds as u8),
            fm_ce_se: if signal {
                WQE_CTRL_CQ_UPDATE
            } else {
                WQE_CTRL_CQ_FIRST_ERR
            },
            ..CtrlSeg::default()
        };
        let eth = EthSeg {
            cs_flags: cs,
            ..EthSeg::default()
        };
        let mut want = ctrl.to_bytes().to_vec();
        want.extend_from_slice(&eth.to_bytes()[..16]);
        assert_eq!(got, want, "pi {pi} ds {ds} cs {cs:#x} signal {signal}");
        assert_eq!(title[0][0].to_le_bytes(), ctrl.doorbell_bytes());
    }
    let mut d = DataSeg::TERMINATOR;
    d.set(42, Be32::new(LKEY), FRAME_VA + 18);
    assert_eq!(d.to_bytes().to_vec(), golden::bytes("c1_dseg_len42"));
}

#[test]
fn cqes_encode_and_decode_like_rdma_core() {
    let mut g1 = Cqe64::resp_send(7, 60, 0x1122_3344, 0x0628, 0x0102_0304_0506_0708, 0);
    g1.op_own |= 1;
    assert_eq!(g1.as_bytes().to_vec(), golden::bytes("g1_cqe_rx_ipv4_udp"));
    assert_eq!(
        Cqe64::req(0x0123, QPN, 0).as_bytes().to_vec(),
        golden::bytes("h1_cqe_tx_req")
    );
    let mut h2 = ErrCqe::req_err(syndrome::LOCAL_PROT, 5, OPCODE_SEND, QPN);
    h2.vendor_err_synd = 0x55;
    assert_eq!(h2.as_bytes().to_vec(), golden::bytes("h2_cqe_tx_req_err_local_prot"));
    let mut h3 = ErrCqe::resp_err(syndrome::LOCAL_LENGTH, 7, 0);
    h3.op_own |= 1;
    assert_eq!(h3.as_bytes().to_vec(), golden::bytes("h3_cqe_rx_resp_err_local_length"));
    // Decoding the reference bytes gives the fields back.
    let g = Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap());
    assert_eq!(
        (g.byte_cnt.get(), g.wqe_counter.get(), g.opcode(), g.owner()),
        (60, 7, CQE_RESP_SEND, 1)
    );
    assert_eq!(g.rx_hash_res.get(), 0x1122_3344);
    let e = Cqe64::from_bytes(&golden::bytes("h2_cqe_tx_req_err_local_prot").try_into().unwrap()).as_err();
    assert_eq!(
        (e.syndrome, e.vendor_err_synd, e.wqe_counter.get()),
        (syndrome::LOCAL_PROT, 0x55, 5)
    );
    assert_eq!(e.s_wqe_opcode_qpn.get(), u32::from(OPCODE_SEND) << 24 | QPN);
    let mut h4 = [0u8; 64];
    h4[63] = CQE_INIT_OP_OWN;
    assert_eq!(h4.to_vec(), golden::bytes("h4_cqe_init_slot"));
}

/// The compressed title and both mini-CQE formats against the generator's vectors (k1-k3),
/// and the mini-CQE layout against Linux's `struct mlx5_mini_cqe8` as the generator mirrors it.
#[test]
fn compressed_sessions_encode_like_the_reference() {
    let mut k1 = Cqe64::resp_send(0x0100, 60, 0, 0x0628, 0x0102_0304_0506_0708, 0);
    k1.op_own |= 1;
    k1.make_title(11);
    assert_eq!(k1.as_bytes().to_vec(), golden::bytes("k1_cqe_title_n11"));
    let t = Cqe64::from_bytes(&golden::bytes("k1_cqe_title_n11").try_into().unwrap());
    assert!(t.is_title() && !g1_is_title());
    assert_eq!(
        (t.mini_cqe_count(), t.format(), t.owner()),
        (11, CQE_FORMAT_COMPRESSED, 1)
    );
    let hash: MiniArray = std::array::from_fn(|i| MiniCqe::hash(0x1122_3300 + i as u32, 60 + i as u32));
    assert_eq!(mini_array_bytes(&hash).to_vec(), golden::bytes("k2_mini_array_hash"));
    let csum: MiniArray =
        std::array::from_fn(|i| MiniCqe::csum(0xab00 + i as u16, 2 * i as u16, 1 << 16 | (60 + i as u32)));
    assert_eq!(
        mini_array_bytes(&csum).to_vec(),
        golden::bytes("k3_mini_array_csum_stridx")
    );
    let back = mini_array_from(&golden::bytes("k3_mini_array_csum_stridx").try_into().unwrap());
    assert_eq!(
        (back[5].checksum(), back[5].stride_idx(), back[5].byte_cnt.get()),
        (0xab05, 10, 1 << 16 | 65)
    );
    let back = mini_array_from(&golden::bytes("k2_mini_array_hash").try_into().unwrap());
    assert_eq!((back[7].rx_hash(), back[7].byte_cnt.get()), (0x1122_3307, 67));
    // The in-memory struct view is the byte view.
    // SAFETY: MiniArray is 64 bytes of integer fields.
    let raw: [u8; 64] = unsafe { std::mem::transmute(hash) };
    assert_eq!(raw, mini_array_bytes(&hash));
    assert_eq!(golden::layout("priv_mini_cqe8"), (size_of::<MiniCqe>(), 4));
    assert_eq!(
        golden::field("priv_mini_cqe8", "rx_hash_result"),
        (offset_of!(MiniCqe, w0), 4)
    );
    assert_eq!(
        golden::field("priv_mini_cqe8", "byte_cnt"),
        (offset_of!(MiniCqe, byte_cnt), 4)
    );
    assert_eq!(golden::field("priv_mini_cqe8", "stridx"), (2, 2));
    assert_eq!(CQE_INVALIDATE, 0xf0);
    assert_eq!((mini_array_slot(0), mini_array_slot(1), mini_array_slot(3)), (1, 8, 24));
    assert_eq!(
        MiniCqe::hash(0x1122_3344, 0x5566_7788).hash_len(),
        0x1122_3344_5566_7788
    );
    for f in [MiniFormat::Hash, MiniFormat::Csum, MiniFormat::CsumStridx] {
        assert_eq!(MiniFormat::from_dv_flag(f.dv_flag()), Some(f));
    }
    assert_eq!(MiniFormat::from_dv_flag(3), None);
    assert_eq!(golden::field("mlx5dv_cq_init_attr", "cqe_comp_res_format"), (8, 1));
}

fn g1_is_title() -> bool {
    Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap()).is_title()
}

#[test]
fn cq_rounding_follows_rdma_core() {
    assert_eq!(cq_entries_for(1024), 2048);
    assert_eq!(cq_entries_for(1023), 1024);
    assert_eq!(cq_entries_for(1), 2);
}

#[test]
fn eseg_ds() {
    assert_eq!(EthSeg::ds_for_inline(0), 1);
    assert_eq!(EthSeg::ds_for_inline(2), 1);
    assert_eq!(EthSeg::ds_for_inline(18), 2);
    assert_eq!(EthSeg::ds_for_inline(60), 5);
    assert_eq!(wqebbs(1 + EthSeg::ds_for_inline(60)), 2);
}

#[test]
fn ctrl_word_roundtrip() {
    let c = CtrlSeg {
        opmod_idx_opcode: CtrlSeg::opmod_idx_opcode(0, 0xfffe, OPCODE_SEND),
        qpn_ds: CtrlSeg::qpn_ds(0xabcdef, 4),
        fm_ce_se: WQE_CTRL_CQ_UPDATE,
        ..CtrlSeg::default()
    };
    assert_eq!(
        (c.wqe_index(), c.opcode(), c.qpn(), c.ds(), c.completion_mode()),
        (0xfffe, 0x0a, 0xabcdef, 4, 2)
    );
}

#[test]
fn inline_modes_ask_for_the_headers_linux_inlines() {
    let modes = [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp];
    for (what, f, want) in golden::inline_test_frames() {
        for (m, w) in modes.iter().zip(want) {
            assert_eq!(m.header_bytes(&f, f.len()), w, "{what} in mode {}", m.name());
        }
    }
    // Never more than the frame; a runt needs all of itself.
    assert_eq!(InlineMode::L2.header_bytes(&[0; 16], 16), 16);
    for m in modes {
        assert_eq!(InlineMode::from_prm(m as u8), Some(m));
        assert_eq!(InlineMode::from_name(m.name()), Some(m));
    }
    assert_eq!(InlineMode::from_prm(4), None);
}
