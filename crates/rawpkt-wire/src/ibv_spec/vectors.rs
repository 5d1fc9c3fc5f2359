//! The verbs compiler against rdma-core's own header. Every number and byte string below came
//! from a small C program built against rdma-core's `libibverbs/verbs.h` (Debian libibverbs-dev
//! 44.0, x86-64): it printed `sizeof`/`offsetof` of each struct and dumped the blobs it built by
//! filling the real `struct ibv_flow_attr` and specs for the rules named in the tests (zeroed
//! first, values through htons/htonl, `size` = total length). The program itself is not kept.

use std::mem::{offset_of, size_of};

use super::*;
use crate::rule::FlowRule;
use rdma_abi::{
    ibv_flow_attr, ibv_flow_eth_filter, ibv_flow_ipv4_filter, ibv_flow_ipv6_filter, ibv_flow_spec_eth,
    ibv_flow_spec_ipv4, ibv_flow_spec_ipv6, ibv_flow_spec_tcp_udp, ibv_flow_tcp_udp_filter,
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP, IBV_FLOW_ATTR_NORMAL, IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV6,
    IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP,
};

/// (struct, sizeof, [(field, offsetof)]) as printed by the C program.
#[test]
fn layouts_match_verbs_h() {
    assert_eq!(size_of::<ibv_flow_attr>(), 20);
    assert_eq!(
        [
            offset_of!(ibv_flow_attr, comp_mask),
            offset_of!(ibv_flow_attr, type_),
            offset_of!(ibv_flow_attr, size),
            offset_of!(ibv_flow_attr, priority),
            offset_of!(ibv_flow_attr, num_of_specs),
            offset_of!(ibv_flow_attr, port),
            offset_of!(ibv_flow_attr, flags),
        ],
        [0, 4, 8, 10, 12, 13, 16]
    );
    assert_eq!(size_of::<ibv_flow_eth_filter>(), 16);
    assert_eq!(
        [
            offset_of!(ibv_flow_eth_filter, dst_mac),
            offset_of!(ibv_flow_eth_filter, src_mac),
            offset_of!(ibv_flow_eth_filter, ether_type),
            offset_of!(ibv_flow_eth_filter, vlan_tag),
        ],
        [0, 6, 12, 14]
    );
    assert_eq!(size_of::<ibv_flow_spec_eth>(), 40);
    assert_eq!(
        [
            offset_of!(ibv_flow_spec_eth, type_),
            offset_of!(ibv_flow_spec_eth, size),
            offset_of!(ibv_flow_spec_eth, val),
            offset_of!(ibv_flow_spec_eth, mask),
        ],
        [0, 4, 6, 22]
    );
    assert_eq!(size_of::<ibv_flow_ipv4_filter>(), 8);
    assert_eq!(
        [
            offset_of!(ibv_flow_ipv4_filter, src_ip),
            offset_of!(ibv_flow_ipv4_filter, dst_ip)
        ],
        [0, 4]
    );
    assert_eq!(size_of::<ibv_flow_spec_ipv4>(), 24);
    assert_eq!(
        [
            offset_of!(ibv_flow_spec_ipv4, type_),
            offset_of!(ibv_flow_spec_ipv4, size),
            offset_of!(ibv_flow_spec_ipv4, val),
            offset_of!(ibv_flow_spec_ipv4, mask),
        ],
        [0, 4, 8, 16]
    );
    assert_eq!(size_of::<ibv_flow_ipv6_filter>(), 40);
    assert_eq!(
        [
            offset_of!(ibv_flow_ipv6_filter, src_ip),
            offset_of!(ibv_flow_ipv6_filter, dst_ip),
            offset_of!(ibv_flow_ipv6_filter, flow_label),
            offset_of!(ibv_flow_ipv6_filter, next_hdr),
            offset_of!(ibv_flow_ipv6_filter, traffic_class),
            offset_of!(ibv_flow_ipv6_filter, hop_limit),
        ],
        [0, 16, 32, 36, 37, 38]
    );
    assert_eq!(size_of::<ibv_flow_spec_ipv6>(), 88);
    assert_eq!(
        [
            offset_of!(ibv_flow_spec_ipv6, type_),
            offset_of!(ibv_flow_spec_ipv6, size),
            offset_of!(ibv_flow_spec_ipv6, val),
            offset_of!(ibv_flow_spec_ipv6, mask),
        ],
        [0, 4, 8, 48]
    );
    assert_eq!(size_of::<ibv_flow_tcp_udp_filter>(), 4);
    assert_eq!(
        [
            offset_of!(ibv_flow_tcp_udp_filter, dst_port),
            offset_of!(ibv_flow_tcp_udp_filter, src_port)
        ],
        [0, 2]
    );
    assert_eq!(size_of::<ibv_flow_spec_tcp_udp>(), 16);
    assert_eq!(
        [
            offset_of!(ibv_flow_spec_tcp_udp, type_),
            offset_of!(ibv_flow_spec_tcp_udp, size),
            offset_of!(ibv_flow_spec_tcp_udp, val),
            offset_of!(ibv_flow_spec_tcp_udp, mask),
        ],
        [0, 4, 6, 10]
    );
    assert_eq!(
        (
            IBV_FLOW_SPEC_ETH,
            IBV_FLOW_SPEC_IPV4,
            IBV_FLOW_SPEC_IPV6,
            IBV_FLOW_SPEC_TCP,
            IBV_FLOW_SPEC_UDP
        ),
        (0x20, 0x30, 0x31, 0x40, 0x41)
    );
    assert_eq!((IBV_FLOW_ATTR_NORMAL, IBV_FLOW_ATTR_FLAGS_DONT_TRAP), (0, 2));
}

const OWN_MAC: &str = "00000000 00000000 3c000000 01010000 00000000 20000000 28000200 00000001
    00000000 00000000 0000ffff ffffffff 00000000 00000000 00000000";
const MULTICAST_COPY: &str = "00000000 00000000 3c000000 01010000 02000000 20000000 28000100 00000000
    00000000 00000000 00000100 00000000 00000000 00000000 00000000";
const PROMISCUOUS: &str = "00000000 00000000 3c000000 01010000 00000000 20000000 28000000 00000000
    00000000 00000000 00000000 00000000 00000000 00000000 00000000";
const L2_ONLY: &str = "00000000 00000000 3c000200 01010000 00000000 20000000 28000000 00000000
    02000000 000088b5 00640000 00000000 ffffff00 0000ffff 0fff0000";
const IPV4_UDP: &str = "00000000 00000000 64000300 03010000 00000000 20000000 28000000 00000000
    00000000 00000000 00000000 00000000 00000000 00000000 00000000 30000000
    18000000 c0a80000 0a000000 ffff0000 ffffff00 41000000 100012b5 0000ffff
    00000000";
const IPV6_TCP: &str = "00000000 00000000 a4000f00 03010000 02000000 20000000 28000200 00000001
    00000000 00000000 0064ffff ffffffff 00000000 00000000 0fff0000 31000000
    58000000 fd000000 00000000 00000000 00000000 20010db8 00000000 00000000
    00000001 00000000 00000000 ffffffff ffffffff 00000000 00000000 ffffffff
    ffffffff ffffffff ffffffff 00000000 00000000 40000000 10000000 00500000
    ffff0000";
const IPV6_GRE: &str = "00000000 00000000 94000000 02010000 00000000 20000000 28000000 00000000
    00000000 00000000 00000000 00000000 00000000 00000000 00000000 31000000
    58000000 00000000 00000000 00000000 00000000 fe800000 00000000 00000000
    00000000 00000000 2f000000 00000000 00000000 00000000 00000000 ffc00000
    00000000 00000000 00000000 00000000 ff000000";
const TCP_ONLY: &str = "00000000 00000000 4c000100 02010000 00000000 20000000 28000000 00000000
    00000000 00000000 00000000 00000000 00000000 00000000 00000000 40000000
    100001bb 0000ffff 00000000";

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The blobs, rule by rule, against the C program's dump. Header fields are host order, so the
/// bytes are those of a little-endian machine.
#[cfg(target_endian = "little")]
#[test]
fn blobs_match_the_c_structs_byte_for_byte() {
    let text = |s: &str| s.parse::<FlowRule>().unwrap_or_else(|e| panic!("{e}"));
    for (name, rule, expected, specs) in [
        ("own_mac", FlowRule::own_mac([2, 0, 0, 0, 0, 1]), OWN_MAC, 1),
        ("multicast_copy", FlowRule::multicast_copy(), MULTICAST_COPY, 1),
        ("promiscuous", FlowRule::promiscuous(), PROMISCUOUS, 1),
        (
            "l2_only",
            text("src-mac 02:00:00:00:00:00/ff:ff:ff:00:00:00 ethertype 0x88b5 vlan 100 priority 2"),
            L2_ONLY,
            1,
        ),
        (
            "ipv4_udp",
            text("ipv4 src 192.168.0.0/16 dst 10.0.0.0/24 udp dst-port 4789 priority 3"),
            IPV4_UDP,
            3,
        ),
        (
            "ipv6_tcp",
            text("dst-mac 02:00:00:00:00:01 vlan 100 ipv6 src fd00::/64 dst 2001:db8::1 tcp src-port 80 copy priority 15"),
            IPV6_TCP,
            3,
        ),
        ("ipv6_gre", text("ipv6 dst fe80::/10 proto 47"), IPV6_GRE, 2),
        ("tcp_only", text("tcp dst-port 443 priority 1"), TCP_ONLY, 2),
    ] {
        let attr = compile(&rule).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(attr.as_bytes(), hex(expected), "{name}: {rule}");
        assert_eq!(attr.num_of_specs(), specs, "{name}");
        assert_eq!(attr.as_bytes().as_ptr() as usize % 8, 0, "{name}: the blob must be aligned");
    }
}

#[test]
fn what_verbs_cannot_express_is_refused_by_name() {
    let err = |s: &str| compile(&s.parse().unwrap()).unwrap_err().to_string();
    assert_eq!(
        err("ipv4 proto 47"),
        "proto 47: the verbs IPv4 spec cannot match protocols other than tcp/udp"
    );
    assert_eq!(
        err("proto 47"),
        "proto 47: verbs matches protocols other than tcp/udp only in the IPv6 spec; add ipv6"
    );
    assert_eq!(
        err("udp priority 16"),
        "priority 16: the kernel takes user priorities 0 to 15 (ENOMEM above)"
    );
    let invalid = FlowRule {
        src_port: Some(1),
        ip_proto: Some(47),
        ..FlowRule::ANY
    };
    assert_eq!(
        compile(&invalid).unwrap_err().to_string(),
        "invalid rule: src-port needs tcp or udp, not proto 47"
    );
    // IPv6 keeps the protocol in the IPv6 spec; TCP/UDP over IPv4 need no protocol field.
    assert!(compile(&"ipv6 proto 58".parse().unwrap()).is_ok());
    assert!(compile(&"ipv4 proto 17".parse().unwrap()).is_ok());
    assert!(compile(&"udp priority 15".parse().unwrap()).is_ok());
}

/// Structural checks every compiled rule must pass, over many rules: the walk libibverbs does
/// (spec by spec, by each spec's `size`) lands exactly on the end, no value has bits outside its
/// mask (mlx5_core refuses such entries), and the flags say copy or steal.
#[cfg(target_endian = "little")]
#[test]
fn every_blob_walks_like_libibverbs_walks_it() {
    let rules = [
        "any",
        "vlan 4095",
        "ipv4",
        "ipv6",
        "udp",
        "ipv4 dst 0.0.0.0/0 tcp",
        "dst-mac 33:33:00:00:00:00/ff:ff:00:00:00:00 ipv6 dst ff02::/16 udp dst-port 5353 copy",
        "ethertype 0x0800 ipv4 src 10.1.2.3 tcp src-port 1 dst-port 65535 priority 9",
        "src-mac 00:00:00:00:00:01/00:00:00:00:00:01 ipv6 src ::1 proto 0",
    ];
    for text in rules {
        let rule: FlowRule = text.parse().unwrap();
        let attr = compile(&rule).unwrap();
        let b = attr.as_bytes();
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        assert_eq!(usize::from(u16_at(8)), b.len(), "{text}: attr.size");
        assert_eq!(u16_at(10), rule.priority);
        assert_eq!((b[12], b[13]), (attr.num_of_specs(), PORT));
        let copy = rule.action == crate::rule::Action::Copy;
        assert_eq!(u32_at(16), if copy { IBV_FLOW_ATTR_FLAGS_DONT_TRAP } else { 0 });
        let mut at = size_of::<ibv_flow_attr>();
        for i in 0..attr.num_of_specs() {
            let (ty, size) = (u32_at(at), usize::from(u16_at(at + 4)));
            let (val, mask, len) = match ty {
                IBV_FLOW_SPEC_ETH => (6, 22, 16),
                IBV_FLOW_SPEC_IPV4 => (8, 16, 8),
                IBV_FLOW_SPEC_IPV6 => (8, 48, 40),
                IBV_FLOW_SPEC_TCP | IBV_FLOW_SPEC_UDP => (6, 10, 4),
                t => panic!("{text}: spec {i} has type {t:#x}"),
            };
            assert_eq!(i == 0, ty == IBV_FLOW_SPEC_ETH, "{text}: the ETH spec comes first");
            for k in 0..len {
                let (v, m) = (b[at + val + k], b[at + mask + k]);
                assert_eq!(v & !m, 0, "{text}: spec {i} byte {k} has value bits outside the mask");
            }
            at += size;
        }
        assert_eq!(at, b.len(), "{text}");
    }
}
