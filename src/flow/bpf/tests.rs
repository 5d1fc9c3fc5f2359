//! The eBPF assembler, and the XDP flow program against the software matcher: every frame of a
//! corpus (random frames built with etherparse plus edge cases) must get from
//! `BPF_PROG_TEST_RUN` exactly the verdict `RuleSet::classify` gives.

use crate::flow::bpf::{
    compile_xdp, Asm, AsmError, CompileError, LoadedProgram, StealAction, XskMap, BPF_JEQ, R0, R1, XDP_DROP, XDP_PASS,
};
use crate::flow::matcher::RuleSet;
use crate::flow::rule::FlowRule;
use etherparse::PacketBuilder;
// The integration tests' generator, so that the corpus stays the one these tests always used.
use rawpkt_test_support::Rng;

// ---- assembler (no root needed) ----

#[test]
fn labels_resolve_forward_and_backward() {
    let mut a = Asm::new();
    a.label("top");
    a.mov64_imm(R0, 2);
    a.jmp_imm(BPF_JEQ, R1, 7, "out"); // 1 -> 4: offset 2
    a.mov64_imm(R0, 1);
    a.ja("top"); // 3 -> 0: offset -4
    a.label("out");
    a.exit();
    let p = a.finish().unwrap();
    assert_eq!(p.insns.len(), 5);
    assert_eq!(p.insns[1].off, 2);
    assert_eq!(p.insns[3].off, -4);
    assert_eq!(p.insns[1].to_bytes(), [0x15, 0x01, 2, 0, 7, 0, 0, 0]);
    assert_eq!(p.insns[4].to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(p.bytes().len(), 40);
}

#[test]
fn ld_imm64_takes_two_slots() {
    let mut a = Asm::new();
    a.ld_imm64(R1, 0x1122_3344_5566_7788).ja("end").label("end").exit();
    let p = a.finish().unwrap();
    assert_eq!(p.insns[0].to_bytes(), [0x18, 0x01, 0, 0, 0x88, 0x77, 0x66, 0x55]);
    assert_eq!(p.insns[1].to_bytes(), [0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]);
    assert_eq!(p.insns[2].off, 0);
}

#[test]
fn label_errors() {
    let mut a = Asm::new();
    a.ja("nowhere").exit();
    assert_eq!(a.finish().unwrap_err(), AsmError::UnknownLabel("nowhere".into()));

    let mut a = Asm::new();
    a.label("x").mov64_imm(R0, 0).label("x").exit();
    assert_eq!(a.finish().unwrap_err(), AsmError::DuplicateLabel("x".into()));

    let mut a = Asm::new();
    a.ja("far");
    for _ in 0..40_000 {
        a.mov64_imm(R0, 0);
    }
    a.label("far").exit();
    assert!(matches!(a.finish().unwrap_err(), AsmError::JumpTooFar { at: 0, .. }));
}

#[test]
fn compile_refuses_invalid_rules_and_redirect_needs_a_map() {
    let bad = FlowRule {
        dst_port: Some(80),
        ..FlowRule::ANY
    };
    assert!(matches!(
        compile_xdp(&[bad], StealAction::Drop),
        Err(CompileError::Rule(_))
    ));
    let p = compile_xdp(&[rule("udp dst-port 4789")], StealAction::Redirect).unwrap();
    assert!(p.needs_map());
    assert!(!compile_xdp(&[rule("udp dst-port 4789")], StealAction::Drop)
        .unwrap()
        .needs_map());
    // No stealing rule: no steal block, no map.
    assert!(!compile_xdp(&[rule("udp copy")], StealAction::Redirect)
        .unwrap()
        .needs_map());
}

// ---- the corpus ----

fn rule(s: &str) -> FlowRule {
    s.parse().unwrap_or_else(|e| panic!("{e}"))
}

const OWN: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[derive(Clone, Copy)]
enum L3 {
    V4,
    V6,
    Other(u16),
}

/// Inserts VLAN tags (TPID, TCI) after the MACs.
fn tag(frame: &mut Vec<u8>, tags: &[(u16, u16)]) {
    let mut bytes = Vec::new();
    for &(tpid, tci) in tags {
        bytes.extend_from_slice(&tpid.to_be_bytes());
        bytes.extend_from_slice(&tci.to_be_bytes());
    }
    frame.splice(12..12, bytes);
}

fn random_frame(r: &mut Rng) -> Vec<u8> {
    let dst_mac = match r.below(4) {
        0 => OWN,
        1 => [0xff; 6],
        2 => [1, 0, 0x5e, 0, 0, 1],
        _ => r.bytes(),
    };
    let src_mac = if r.chance(50) { PEER } else { r.bytes() };
    let l3 = match r.below(10) {
        0..=4 => L3::V4,
        5..=7 => L3::V6,
        8 => L3::Other(0x88b5),
        _ => L3::Other(r.pick(&[0x0806, 0x88cc, 0x0600, 0x0042])),
    };
    let (x16, y16, z16): (u16, u16, u16) = (r.next() as u16, r.next() as u16, r.next() as u16);
    let (x4, x16b): ([u8; 4], [u8; 16]) = (r.bytes(), r.bytes());
    let sport = r.pick(&[80, 53, 4789, 1000, x16]);
    let dport = r.pick(&[80, 53, 4789, 1000, y16]);
    let tcp = r.chance(40);
    let payload_len = r.pick(&[0usize, 1, 3, 18, 64]);
    let payload = vec![0xa5u8; payload_len];
    let b = PacketBuilder::ethernet2(src_mac, dst_mac);
    let mut f = Vec::new();
    let mut ip_off = None;
    match l3 {
        L3::V4 => {
            let src = r.pick(&[[10, 0, 0, 1], [10, 0, 1, 7], [10, 0, 0, 200], [192, 168, 1, 1]]);
            let dst = r.pick(&[[10, 0, 0, 2], [10, 0, 1, 9], [10, 1, 0, 0], x4]);
            let b = b.ipv4(src, dst, 64);
            if tcp {
                b.tcp(sport, dport, 1, 1024).write(&mut f, &payload).unwrap();
            } else {
                b.udp(sport, dport).write(&mut f, &payload).unwrap();
            }
            ip_off = Some(14);
        }
        L3::V6 => {
            let src = r.pick(&[v6("fd00::1"), v6("fd00::5:1"), v6("fd00:0:0:1::1"), v6("2001:db8::1")]);
            let dst = r.pick(&[v6("fd00:0:0:1::2"), v6("fd00:0:0:2::2"), v6("fd00::2"), x16b]);
            let b = b.ipv6(src, dst, 64);
            if tcp {
                b.tcp(sport, dport, 1, 1024).write(&mut f, &payload).unwrap();
            } else {
                b.udp(sport, dport).write(&mut f, &payload).unwrap();
            }
            ip_off = Some(14);
        }
        L3::Other(t) => {
            f.extend_from_slice(&dst_mac);
            f.extend_from_slice(&src_mac);
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0x45; 46]);
        }
    }
    if let (Some(off), L3::V4) = (ip_off, l3) {
        // IPv4 options (IHL 6..15), fragments, odd protocols, malformed headers.
        if r.chance(25) {
            let words = r.below(10) as usize + 1;
            f.splice(off + 20..off + 20, vec![1u8; 4 * words]);
            f[off] = 0x45 + words as u8;
            let total = u16::from_be_bytes([f[off + 2], f[off + 3]]) + 4 * words as u16;
            f[off + 2..off + 4].copy_from_slice(&total.to_be_bytes());
        }
        match r.below(12) {
            0 => f[off + 6] = 0x20,                                                   // first fragment (MF)
            1 => f[off + 6..off + 8].copy_from_slice(&[0x20, 0x05]),                  // middle fragment
            2 => f[off + 6..off + 8].copy_from_slice(&[0x00, 0xb9]),                  // last fragment
            3 => f[off + 9] = r.pick(&[1, 47, 132]),                                  // other protocol
            4 => f[off] = r.pick(&[0x44, 0x65, 0x4f, 0x55]),                          // bad IHL / version
            5 => f[off + 2..off + 4].copy_from_slice(&[0, r.pick(&[0, 19, 22, 23])]), // short total length
            _ => {}
        }
    }
    if let (Some(off), L3::V6) = (ip_off, l3) {
        match r.below(10) {
            0 => f[off + 6] = 44,                                               // fragment header: not walked
            1 => f[off + 6] = 0,                                                // hop-by-hop
            2 => f[off + 4..off + 6].copy_from_slice(&[0, r.pick(&[0, 3, 4])]), // short payload length
            3 => f[off] = 0x45,                                                 // wrong version
            _ => {}
        }
    }
    match r.below(8) {
        0 | 1 => tag(&mut f, &[(0x8100, r.pick(&[100, 101, 0x2064, 0xf065, z16]))]),
        2 => tag(&mut f, &[(0x88a8, r.pick(&[100, 101])), (0x8100, r.pick(&[100, 101]))]),
        3 => tag(&mut f, &[(0x8100, 100), (0x8100, 101)]),
        4 => tag(&mut f, &[(0x88a8, 100)]),
        5 => tag(&mut f, &[(0x8100, 100), (0x88a8, 7), (0x8100, 9)]), // a third tag is not parsed
        _ => {}
    }
    if r.chance(15) {
        let cut = 14 + r.below((f.len() - 14) as u64 + 1) as usize;
        f.truncate(cut);
    }
    f
}

/// Hand-made edge cases, and every truncation (≥ 14 bytes, the test-run minimum) of a few bases.
fn edge_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut qinq_opts = Vec::new();
    PacketBuilder::ethernet2(PEER, OWN)
        .double_vlan(
            etherparse::VlanId::try_new(100).unwrap(),
            etherparse::VlanId::try_new(101).unwrap(),
        )
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1000, 4789)
        .write(&mut qinq_opts, b"qq")
        .unwrap();
    qinq_opts.splice(42..42, [1u8; 8]);
    qinq_opts[22] = 0x47;
    qinq_opts[25] += 8;
    let mut vlan_v6 = Vec::new();
    PacketBuilder::ethernet2(PEER, OWN)
        .single_vlan(etherparse::VlanId::try_new(100).unwrap())
        .ipv6(v6("fd00::1"), v6("fd00:0:0:1::2"), 64)
        .tcp(80, 443, 1, 1024)
        .write(&mut vlan_v6, b"six")
        .unwrap();
    let mut plain = Vec::new();
    PacketBuilder::ethernet2(PEER, OWN)
        .ipv4([10, 0, 1, 1], [10, 0, 0, 9], 64)
        .udp(53, 4789)
        .write(&mut plain, b"")
        .unwrap();
    for base in [&qinq_opts, &vlan_v6, &plain] {
        for len in 14..=base.len() {
            out.push(base[..len].to_vec());
        }
        out.push(base.clone());
    }
    // Padding after the IP packet (total length shorter than the frame) and a 0x88b5 frame.
    let mut padded = plain.clone();
    padded.extend_from_slice(&[0; 20]);
    out.push(padded);
    let mut exp = OWN.to_vec();
    exp.extend_from_slice(&PEER);
    exp.extend_from_slice(&[0x88, 0xb5, 1, 2]);
    out.push(exp);
    out
}

fn corpus() -> Vec<Vec<u8>> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut frames = edge_frames();
    for _ in 0..3000 {
        frames.push(random_frame(&mut r));
    }
    frames
}

fn rule_sets() -> Vec<Vec<&'static str>> {
    vec![
        vec!["udp dst-port 4789"],
        vec!["ipv4 dst 10.0.0.0/24 udp"],
        vec!["vlan 100"],
        vec!["ipv6 src fd00::/64 tcp src-port 80"],
        vec!["dst-mac 02:00:00:00:00:01"],
        vec!["ethertype 0x88b5"],
        vec!["udp copy"],
        vec!["any"],
        vec![
            "udp dst-port 53 copy",
            "dst-mac 01:00:00:00:00:00/01:00:00:00:00:00 copy",
            "ipv4 src 10.0.1.0/24 tcp dst-port 80 priority 1",
            "ipv6 dst fd00:0:0:1::/64",
            "vlan 101 udp",
            "proto 47",
            "ipv6 src fd00::1 dst fd00::/63 udp src-port 53",
            "src-mac 02:00:00:00:00:00/ff:ff:ff:00:00:00 ipv4 src 10.0.0.0/23",
            "ipv6 dst 2000::/3 priority 2",
            "dst-mac 01:00:5e:00:00:01 copy priority 3",
            "ipv4 dst 10.0.0.128/25 tcp src-port 53 dst-port 80",
        ],
    ]
}

/// Loads `prog`, failing the test with a clear message if this kernel has no usable `bpf(2)`.
fn load(rules: &[FlowRule], steal: StealAction, map: &XskMap) -> LoadedProgram {
    let prog = compile_xdp(rules, steal).unwrap();
    LoadedProgram::load(&prog, Some(map)).unwrap_or_else(|e| panic!("loading the XDP program failed: {e}"))
}

fn xskmap() -> XskMap {
    XskMap::new(1).unwrap_or_else(|e| {
        panic!("this test needs bpf(2) with XDP and XSKMAP support as root (CI runs as root on this kernel): {e}")
    })
}

#[test]
#[ignore = "needs root"]
fn xdp_verdicts_match_the_software_matcher() {
    let frames = corpus();
    assert!(frames.len() >= 1000);
    let map = xskmap();
    let (mut total_steal, mut total_pass) = (0usize, 0usize);
    for texts in rule_sets() {
        let rules: Vec<FlowRule> = texts.iter().map(|s| rule(s)).collect();
        let mut set = RuleSet::new();
        for r in &rules {
            set.add(r.clone()).unwrap();
        }
        let prog = load(&rules, StealAction::Drop, &map);
        let (mut steal, mut pass) = (0usize, 0usize);
        for f in &frames {
            // Every frame is ≥ 14 bytes: XDP test-run refuses shorter ones (EINVAL), so the
            // corpus does not contain them.
            let got = prog.test_run(f).unwrap_or_else(|e| panic!("{e}"));
            let want = if set.classify(f).steal() { XDP_DROP } else { XDP_PASS };
            assert_eq!(got, want, "rules {texts:?}, frame {:02x?} ({} bytes)", f, f.len());
            if want == XDP_DROP {
                steal += 1;
            } else {
                pass += 1;
            }
        }
        println!("{texts:?}: {} frames, {steal} stolen, {pass} passed", frames.len());
        let all_copy = rules.iter().all(|r| r.action == crate::flow::rule::Action::Copy);
        let any = texts == ["any"];
        assert!(
            steal > 0 || all_copy,
            "{texts:?} stole nothing: the corpus does not exercise it"
        );
        assert!(pass > 0 || any, "{texts:?} passed nothing");
        total_steal += steal;
        total_pass += pass;
    }
    println!(
        "corpus {} frames x {} rule sets: {total_steal} steal, {total_pass} pass",
        frames.len(),
        rule_sets().len()
    );
}

/// The production variant: with no socket bound in the XSKMAP, `bpf_redirect_map` falls back to
/// its flags argument, XDP_PASS, for every frame.
#[test]
#[ignore = "needs root"]
fn redirect_variant_loads_and_falls_back_to_pass() {
    let map = xskmap();
    let rules: Vec<FlowRule> = rule_sets().last().unwrap().iter().map(|s| rule(s)).collect();
    let prog = load(&rules, StealAction::Redirect, &map);
    for f in corpus().iter().take(500) {
        assert_eq!(prog.test_run(f).unwrap(), XDP_PASS);
    }
}
