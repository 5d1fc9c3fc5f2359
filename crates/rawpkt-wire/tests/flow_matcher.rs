//! The software matcher against frames built by an independent library (etherparse), and the
//! rule set's kernel semantics: copy then steal, priorities, flow-group order.

use etherparse::{IpFragOffset, IpHeaders, IpNumber, Ipv4Header, PacketBuilder, VlanId};
use rawpkt_wire::matcher::{RuleSet, RuleSetError, Verdict, MAX_RULES};
use rawpkt_wire::rule::FlowRule;

const OWN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const BROADCAST: [u8; 6] = [0xff; 6];

fn rule(s: &str) -> FlowRule {
    s.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn write(b: PacketBuilderStepUdp, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    b.write(&mut f, payload).unwrap();
    f
}

type PacketBuilderStepUdp = etherparse::PacketBuilderStep<etherparse::UdpHeader>;

fn udp4(dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    write(
        PacketBuilder::ethernet2(PEER, dst_mac)
            .ipv4(src, dst, 64)
            .udp(sport, dport),
        b"payload",
    )
}

fn tcp6(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
    let a = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
    let mut f = Vec::new();
    PacketBuilder::ethernet2(PEER, OWN)
        .ipv6(a(src), a(dst), 64)
        .tcp(sport, dport, 1, 1024)
        .write(&mut f, b"x")
        .unwrap();
    f
}

fn vlan_udp4(vid: u16, dport: u16) -> Vec<u8> {
    write(
        PacketBuilder::ethernet2(PEER, OWN)
            .single_vlan(VlanId::try_new(vid).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, dport),
        b"v",
    )
}

/// etherparse writes QinQ as an outer S-tag (0x88a8) and an inner C-tag (0x8100).
fn qinq_udp4(outer: u16, inner: u16, dport: u16) -> Vec<u8> {
    write(
        PacketBuilder::ethernet2(PEER, OWN)
            .double_vlan(VlanId::try_new(outer).unwrap(), VlanId::try_new(inner).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, dport),
        b"q",
    )
}

fn ipv4_with(header: Ipv4Header, dport: u16) -> Vec<u8> {
    write(
        PacketBuilder::ethernet2(PEER, OWN)
            .ip(IpHeaders::Ipv4(header, Default::default()))
            .udp(1000, dport),
        b"0123456789abcdef",
    )
}

fn v4_header(src: [u8; 4], dst: [u8; 4]) -> Ipv4Header {
    Ipv4Header::new(0, 64, IpNumber::UDP, src, dst).unwrap()
}

#[test]
fn l2_fields() {
    let f = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1000, 53);
    assert!(FlowRule::own_mac(OWN).matches(&f));
    assert!(!FlowRule::own_mac(PEER).matches(&f));
    assert!(rule("src-mac 02:00:00:00:00:02").matches(&f));
    assert!(rule("src-mac 02:00:00:00:00:00/ff:ff:ff:00:00:00").matches(&f));
    assert!(!rule("src-mac 02:00:00:00:00:00/ff:ff:ff:ff:ff:ff").matches(&f));
    // A non-contiguous mask: only the low bit of the last byte.
    assert!(rule("src-mac 00:00:00:00:00:00/00:00:00:00:00:01").matches(&f));
    assert!(!rule("src-mac 00:00:00:00:00:01/00:00:00:00:00:01").matches(&f));
    assert!(rule("ethertype 0x0800").matches(&f));
    assert!(!rule("ethertype 0x86dd").matches(&f));
    assert!(!FlowRule::multicast_copy().matches(&f));
    assert!(FlowRule::multicast_copy().matches(&udp4(BROADCAST, [10, 0, 0, 1], [10, 0, 0, 255], 68, 67)));
    assert!(FlowRule::promiscuous().matches(&f));
    assert!(FlowRule::promiscuous().matches(&[]));
}

#[test]
fn ipv4_prefixes_protocols_and_ports() {
    let f = udp4(OWN, [192, 168, 1, 7], [10, 0, 0, 42], 1234, 4789);
    for yes in [
        "ipv4",
        "ipv4 dst 10.0.0.0/24",
        "ipv4 dst 10.0.0.42",
        "ipv4 src 192.168.0.0/16 dst 10.0.0.0/8",
        "ipv4 src 0.0.0.0/0",
        "udp",
        "proto 17",
        "udp dst-port 4789",
        "udp src-port 1234 dst-port 4789",
        "ipv4 dst 10.0.0.0/24 udp dst-port 4789",
        "ethertype 0x0800 udp",
    ] {
        assert!(rule(yes).matches(&f), "{yes}");
    }
    for no in [
        "ipv6",
        "ipv4 dst 10.0.1.0/24",
        "ipv4 src 10.0.0.0/8",
        "tcp",
        "proto 47",
        "udp dst-port 4790",
        "udp src-port 4789",
        "tcp dst-port 4789",
    ] {
        assert!(!rule(no).matches(&f), "{no}");
    }
}

#[test]
fn ipv4_options_are_skipped_by_the_header_length() {
    let mut h = v4_header([10, 0, 0, 1], [10, 0, 0, 2]);
    h.options = [1, 1, 1, 1, 1, 1, 1, 0].into(); // NOPs and end-of-list: IHL 7
    let f = ipv4_with(h, 4789);
    assert_eq!(f[14] & 0xf, 7);
    assert!(rule("ipv4 dst 10.0.0.2 udp dst-port 4789").matches(&f));
    assert!(rule("udp src-port 1000").matches(&f));
    assert!(!rule("udp dst-port 0x0101").matches(&f), "read the options as ports");
}

#[test]
fn fragments_have_ports_only_in_the_first() {
    let mut first = v4_header([10, 0, 0, 1], [10, 0, 0, 2]);
    first.dont_fragment = false;
    first.more_fragments = true;
    let mut later = first.clone();
    later.fragment_offset = IpFragOffset::try_new(185).unwrap();
    later.more_fragments = false;
    let first = ipv4_with(first, 4789);
    // The later fragment's payload happens to look like a UDP header; it must not be read as one.
    let later = ipv4_with(later, 4789);
    for f in [&first, &later] {
        assert!(
            rule("ipv4 dst 10.0.0.2 udp").matches(f),
            "protocol is an IP header field"
        );
    }
    assert!(rule("udp dst-port 4789").matches(&first));
    assert!(!rule("udp dst-port 4789").matches(&later));
    assert!(!rule("udp src-port 1000").matches(&later));
}

#[test]
fn ipv6_and_its_extension_headers() {
    let f = tcp6("fd00::1", "2001:db8::42", 80, 33000);
    for yes in [
        "ipv6",
        "ipv6 src fd00::/64",
        "ipv6 src fd00::1 dst 2001:db8::/32",
        "ipv6 dst ::/0",
        "tcp src-port 80",
        "ipv6 src fd00::/8 tcp src-port 80 dst-port 33000",
        "ethertype 0x86dd",
    ] {
        assert!(rule(yes).matches(&f), "{yes}");
    }
    for no in ["ipv4", "ipv6 src fd01::/64", "udp", "tcp src-port 81", "ipv4 tcp"] {
        assert!(!rule(no).matches(&f), "{no}");
    }
    // A destination-options header before TCP: Next Header is 60, and the chain is not walked.
    let mut ext = f.clone();
    ext[14 + 6] = 60;
    assert!(rule("ipv6 proto 60").matches(&ext));
    assert!(!rule("tcp").matches(&ext));
    assert!(!rule("tcp src-port 80").matches(&ext));
}

#[test]
fn vlan_matches_the_outer_c_tag_and_ethertype_the_inner_type() {
    let tagged = vlan_udp4(100, 53);
    assert!(rule("vlan 100").matches(&tagged));
    assert!(!rule("vlan 101").matches(&tagged));
    assert!(rule("vlan 100 ethertype 0x0800 ipv4 udp dst-port 53").matches(&tagged));
    assert!(
        rule("udp dst-port 53").matches(&tagged),
        "L3/L4 rules see through the tag"
    );
    assert!(!rule("vlan 100").matches(&udp4(OWN, [1, 1, 1, 1], [2, 2, 2, 2], 1, 2)));

    // The priority bits are not part of the VID.
    let mut pcp = tagged.clone();
    pcp[14] |= 0xe0;
    assert!(rule("vlan 100").matches(&pcp));

    // Outer S-tag 200, inner C-tag 100: the NIC's VID match goes with `cvlan_tag`, so neither id
    // matches, while the fields past both tags still do.
    let qinq = qinq_udp4(200, 100, 53);
    assert_eq!(&qinq[12..14], &[0x88, 0xa8]);
    assert!(!rule("vlan 200").matches(&qinq));
    assert!(!rule("vlan 100").matches(&qinq));
    assert!(rule("ethertype 0x0800 udp dst-port 53").matches(&qinq));

    // Two C-tags (the old-style QinQ): the outer one is the one matched.
    let mut cc = qinq.clone();
    cc[12..14].copy_from_slice(&[0x81, 0x00]);
    assert!(rule("vlan 200").matches(&cc));
    assert!(!rule("vlan 100").matches(&cc));
    assert!(rule("vlan 200 ipv4 dst 10.0.0.2 udp dst-port 53").matches(&cc));
}

#[test]
fn non_ip_and_malformed_ip() {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&OWN);
    f[6..12].copy_from_slice(&PEER);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    assert!(rule("ethertype 0x88b5").matches(&f));
    assert!(FlowRule::own_mac(OWN).matches(&f));
    for no in ["ipv4", "ipv6", "tcp", "proto 0", "ethertype 0x0800"] {
        assert!(!rule(no).matches(&f), "{no}");
    }
    // EtherType IPv4 but a version-6 header (and the other way round): not IP for the matcher.
    let mut bad = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
    bad[14] = 0x65;
    assert!(rule("ethertype 0x0800").matches(&bad));
    assert!(!rule("ipv4").matches(&bad));
    assert!(!rule("udp").matches(&bad));
    let mut bad6 = tcp6("fd00::1", "fd00::2", 1, 2);
    bad6[14] = 0x45;
    assert!(!rule("ipv6").matches(&bad6));
    // An IHL below 5 is malformed.
    let mut short = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
    short[14] = 0x44;
    assert!(!rule("ipv4").matches(&short));
}

#[test]
fn a_cut_frame_matches_only_on_the_bytes_it_has() {
    let f = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1000, 4789);
    // (rule, bytes it needs): 14 Ethernet, 20 IPv4, then the 4 bytes of ports.
    for (r, needs) in [
        ("dst-mac 02:00:00:00:00:01", 6),
        ("src-mac 02:00:00:00:00:02", 12),
        ("ethertype 0x0800", 14),
        ("ipv4", 34),
        ("ipv4 dst 10.0.0.2", 34),
        ("udp", 34),
        ("udp src-port 1000", 38),
        ("udp dst-port 4789", 38),
        ("any", 0),
    ] {
        let r = rule(r);
        for cut in 0..=f.len() {
            assert_eq!(r.matches(&f[..cut]), cut >= needs, "{r} on {cut} bytes");
        }
    }
    // Ports past the IP packet's stated length are padding, not ports.
    let mut short = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1000, 4789);
    short[16..18].copy_from_slice(&22u16.to_be_bytes());
    assert!(rule("ipv4 udp").matches(&short));
    assert!(!rule("udp dst-port 4789").matches(&short));
}

fn set(rules: &[&str]) -> RuleSet {
    let mut s = RuleSet::new();
    for (i, r) in rules.iter().enumerate() {
        assert_eq!(s.add(rule(r)).unwrap(), i);
    }
    s
}

fn verdict(stolen_by: Option<usize>, copies: &[usize]) -> Verdict {
    Verdict {
        stolen_by,
        copies: copies.iter().fold(0, |m, &i| m | 1 << i),
    }
}

#[test]
fn vpp_default_rules() {
    let mut s = RuleSet::new();
    s.add(FlowRule::own_mac(OWN)).unwrap();
    s.add(FlowRule::multicast_copy()).unwrap();
    let to_us = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
    let v = s.classify(&to_us);
    assert_eq!(v, verdict(Some(0), &[]));
    assert!(v.steal() && !v.to_linux());
    let arp_like = udp4(BROADCAST, [10, 0, 0, 1], [10, 0, 0, 255], 1, 2);
    let v = s.classify(&arp_like);
    assert_eq!(v, verdict(None, &[1]));
    assert!(v.to_linux() && v.deliveries() == 1 && v.copy_rules().eq([1]));
    let elsewhere = udp4(PEER, [10, 0, 0, 1], [10, 0, 0, 3], 1, 2);
    assert_eq!(s.classify(&elsewhere), verdict(None, &[]));
}

#[test]
fn a_copy_then_a_steal_delivers_twice() {
    let s = set(&["udp dst-port 4789 copy", "udp"]);
    let vxlan = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 4789);
    let v = s.classify(&vxlan);
    assert_eq!(v, verdict(Some(1), &[0]));
    assert_eq!(v.deliveries(), 2);
    // Promiscuous plus the multicast copy: broadcasts are copied, then stolen all the same.
    let mut p = RuleSet::new();
    p.add(FlowRule::multicast_copy()).unwrap();
    p.add(FlowRule::promiscuous()).unwrap();
    let b = udp4(BROADCAST, [10, 0, 0, 1], [10, 0, 0, 255], 1, 2);
    assert_eq!(p.classify(&b), verdict(Some(1), &[0]));
    assert_eq!(p.classify(&vxlan), verdict(Some(1), &[]));
}

#[test]
fn lower_priority_numbers_go_first() {
    let s = set(&["udp priority 1", "udp dst-port 53 priority 0"]);
    assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [1, 0]);
    let dns = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 53);
    assert_eq!(s.classify(&dns), verdict(Some(1), &[]));
    let other = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 54);
    assert_eq!(s.classify(&other), verdict(Some(0), &[]));
    // A steal ends the search, so a copy at a later priority never sees the frame.
    let s = set(&["udp", "udp copy priority 1"]);
    assert_eq!(s.classify(&dns), verdict(Some(0), &[]));
}

#[test]
fn copies_come_before_steals_of_the_same_priority() {
    let s = set(&["udp priority 4", "udp dst-port 53 copy priority 4"]);
    assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [1, 0]);
    let dns = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 53);
    assert_eq!(s.classify(&dns), verdict(Some(0), &[1]));
}

#[test]
fn one_entry_per_table_so_two_copies_of_one_priority_deliver_once() {
    let dns = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 53);
    let same = set(&["udp dst-port 53 copy", "ipv4 copy"]);
    assert_eq!(same.classify(&dns), verdict(None, &[0]));
    let apart = set(&["udp dst-port 53 copy", "ipv4 copy priority 1"]);
    assert_eq!(apart.classify(&dns), verdict(None, &[0, 1]));
}

#[test]
fn within_a_priority_the_first_created_flow_group_wins() {
    // Rules 0 and 2 share a shape (dst /8), so 2 joins the group rule 0 created, which the NIC
    // searches before the group of rule 1.
    let s = set(&["ipv4 dst 10.0.0.0/8", "udp dst-port 53", "ipv4 dst 11.0.0.0/8"]);
    assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [0, 2, 1]);
    let f = udp4(OWN, [10, 0, 0, 1], [11, 0, 0, 2], 1, 53);
    assert_eq!(s.classify(&f), verdict(Some(2), &[]));
    // The same rule twice: the first one installed answers.
    let twice = set(&["udp dst-port 53", "udp dst-port 53"]);
    assert_eq!(twice.classify(&f), verdict(Some(0), &[]));
    // A different prefix length is a different mask, hence its own group, in creation order.
    let s = set(&["udp dst-port 53", "ipv4 dst 11.0.0.0/16", "ipv4 dst 11.0.0.0/8"]);
    assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(s.classify(&f), verdict(Some(0), &[]));
}

#[test]
fn multicast_only_steals_go_after_every_priority() {
    let s = set(&[
        "dst-mac 01:00:5e:00:00:01",
        "udp priority 9",
        "dst-mac 01:00:5e:00:00:01 copy",
    ]);
    assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [2, 1, 0]);
    let mcast = |dport| udp4([0x01, 0, 0x5e, 0, 0, 1], [10, 0, 0, 1], [224, 0, 0, 1], 1, dport);
    assert_eq!(s.classify(&mcast(5000)), verdict(Some(1), &[2]));
    let mut not_udp = mcast(5000);
    not_udp[14 + 9] = 47;
    assert_eq!(s.classify(&not_udp), verdict(Some(0), &[2]));
}

#[test]
fn sixty_four_rules_at_most_and_only_valid_ones() {
    let mut s = RuleSet::new();
    for port in 0..MAX_RULES as u16 {
        s.add(FlowRule {
            ip_proto: Some(17),
            dst_port: Some(port),
            ..FlowRule::ANY
        })
        .unwrap();
    }
    let e = s.add(FlowRule::promiscuous()).unwrap_err();
    assert_eq!(e, RuleSetError::Full);
    assert_eq!(e.to_string(), "a rule set holds at most 64 rules");
    assert_eq!(s.len(), 64);
    let last = udp4(OWN, [10, 0, 0, 1], [10, 0, 0, 2], 1, 63);
    assert_eq!(s.classify(&last), verdict(Some(63), &[]));

    let bad = FlowRule {
        dst_port: Some(80),
        ..FlowRule::ANY
    };
    let e = RuleSet::new().add(bad).unwrap_err();
    assert_eq!(e.to_string(), "invalid rule: dst-port needs tcp or udp in the rule");
}
