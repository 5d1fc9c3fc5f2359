//! Frames and flow rules for the fuzz targets that feed frames to a classifier (`fuzz_wire`,
//! `fuzz_bpf`): frames written with etherparse's header types (not our parser's), rules whose
//! fields are often taken from the frame so that about a fifth of them match.

use etherparse::{
    EtherType, Ethernet2Header, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options, Ipv6FlowLabel, Ipv6Header,
    SingleVlanHeader, TcpHeader, UdpHeader, VlanId, VlanPcp,
};
use rawpkt_wire::rule::{Action, FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch};
use rawpkt_wire::wire::{self, IpHeader};

use super::Rng;

/// Ethernet, 0–3 VLAN tags of either TPID, IPv4 (options, fragment fields) / IPv6 / another
/// EtherType, UDP / TCP (options) / another protocol, a payload, sometimes padding to 60 bytes;
/// half of them mutated; a fifth random bytes.
pub fn frame(rng: &mut Rng) -> Vec<u8> {
    if rng.one_in(5) {
        let n = rng.below(80);
        return rng.bytes(n);
    }
    let mut f = Vec::new();
    let mac = |rng: &mut Rng| -> [u8; 6] {
        match rng.below(3) {
            0 => [2, 0, 0, 0, 0, 1 + rng.below(2) as u8],
            1 => [0xff; 6],
            _ => rng.bytes(6).try_into().unwrap(),
        }
    };
    let tags = *rng.pick(&[0, 0, 0, 1, 1, 2, 3]);
    let l3 = rng.below(4); // IPv4, IPv6, IPv4 again, other
    let ip_type = [0x0800, 0x86dd, 0x0800, *rng.pick(&[0x0806, 0x88b5, 0x0600, 0x8100])][l3];
    let tpid = |rng: &mut Rng| if rng.one_in(3) { 0x88a8 } else { 0x8100 };
    let first = if tags > 0 { tpid(rng) } else { ip_type };
    Ethernet2Header {
        source: mac(rng),
        destination: mac(rng),
        ether_type: EtherType(first),
    }
    .write(&mut f)
    .unwrap();
    for t in 0..tags {
        let next = if t + 1 < tags { tpid(rng) } else { ip_type };
        SingleVlanHeader {
            pcp: VlanPcp::try_new(rng.below(8) as u8).unwrap(),
            drop_eligible_indicator: rng.one_in(2),
            vlan_id: VlanId::try_new(rng.edgy(4095) as u16).unwrap(),
            ether_type: EtherType(next),
        }
        .write(&mut f)
        .unwrap();
    }
    let proto = *rng.pick(&[6, 6, 17, 17, 17, 1, 58, 44, 0, 255]);
    let mut l4 = Vec::new();
    match proto {
        6 => {
            let mut t = TcpHeader::new(rng.edgy(0xffff) as u16, rng.edgy(0xffff) as u16, rng.u32(), rng.u16());
            t.syn = rng.one_in(2);
            t.ack = rng.one_in(2);
            t.fin = rng.one_in(4);
            t.rst = rng.one_in(8);
            if rng.one_in(4) {
                let n = 4 * rng.below(5);
                let _ = t.set_options_raw(&rng.bytes(n));
            }
            t.write(&mut l4).unwrap();
        }
        17 => UdpHeader {
            source_port: rng.edgy(0xffff) as u16,
            destination_port: rng.edgy(0xffff) as u16,
            length: 8,
            checksum: 0,
        }
        .write(&mut l4)
        .unwrap(),
        _ => {}
    }
    let n = rng.below(40);
    l4.extend(rng.bytes(n));
    match l3 {
        0 | 2 => {
            let mut h = Ipv4Header::new(
                l4.len() as u16,
                64,
                IpNumber(proto),
                rng.bytes(4).try_into().unwrap(),
                rng.bytes(4).try_into().unwrap(),
            )
            .unwrap();
            if rng.one_in(4) {
                let n = 4 * (1 + rng.below(10));
                h.options = Ipv4Options::try_from(&rng.bytes(n)[..]).unwrap();
                h.total_len += n as u16;
            }
            if rng.one_in(4) {
                h.more_fragments = rng.one_in(2);
                h.fragment_offset = IpFragOffset::try_new(rng.edgy(0x1fff) as u16).unwrap();
            }
            h.write(&mut f).unwrap();
        }
        1 => Ipv6Header {
            traffic_class: rng.byte(),
            flow_label: Ipv6FlowLabel::ZERO,
            payload_length: l4.len() as u16,
            next_header: IpNumber(proto),
            hop_limit: 64,
            source: rng.bytes(16).try_into().unwrap(),
            destination: rng.bytes(16).try_into().unwrap(),
        }
        .write(&mut f)
        .unwrap(),
        _ => {}
    }
    f.extend(l4);
    // Padding after the IP packet, as a short frame gets on the wire.
    if rng.one_in(4) {
        f.resize(f.len().max(60), 0);
    }
    if rng.one_in(2) {
        rng.mutate(&mut f);
    }
    f
}

/// A random rule, its fields often taken from `f`.
pub fn rule(rng: &mut Rng, f: &[u8]) -> FlowRule {
    let mut r = FlowRule::ANY;
    // A field from the frame when it has one (so rules match), else random.
    let from = |rng: &mut Rng, at: usize, n: usize| -> Vec<u8> {
        match f.get(at..at + n) {
            Some(b) if !rng.one_in(4) => b.to_vec(),
            _ => rng.bytes(n),
        }
    };
    let h = wire::headers(f);
    if rng.one_in(3) {
        let mask: [u8; 6] = match rng.below(3) {
            0 => MacMatch::FULL_MASK,
            1 => [1, 0, 0, 0, 0, 0],
            _ => rng.bytes(6).try_into().unwrap(),
        };
        let addr: [u8; 6] = from(rng, 0, 6).try_into().unwrap();
        let addr = std::array::from_fn(|i| addr[i] & mask[i]);
        r.dst_mac = MacMatch::masked(addr, mask).ok();
    }
    if rng.one_in(4) {
        let addr: [u8; 6] = from(rng, 6, 6).try_into().unwrap();
        r.src_mac = Some(MacMatch::exact(addr));
    }
    if rng.one_in(4) {
        r.vlan = Some(match h.outer_vlan {
            Some((_, tci)) if !rng.one_in(4) => tci & 0xfff,
            _ => rng.below(4096) as u16,
        });
    }
    if rng.one_in(4) {
        r.ethertype = Some(match h.ethertype {
            Some(t) if !rng.one_in(4) => t,
            _ => *rng.pick(&[0x0800, 0x86dd, 0x88b5]),
        });
    }
    let v6 = match h.ip {
        IpHeader::V6 { .. } => !rng.one_in(4),
        IpHeader::V4 { .. } => rng.one_in(4),
        IpHeader::None => rng.one_in(2),
    };
    let ip_off = match h.ip {
        IpHeader::V4 { off, .. } | IpHeader::V6 { off, .. } => off,
        IpHeader::None => 14,
    };
    if rng.one_in(2) {
        let mut src = None;
        let mut dst = None;
        if v6 {
            for (slot, at) in [(&mut src, 8), (&mut dst, 24)] {
                if rng.one_in(2) {
                    let a: [u8; 16] = from(rng, ip_off + at, 16).try_into().unwrap();
                    let len = rng.below(129) as u8;
                    let bits = u128::from_be_bytes(a) & if len == 0 { 0 } else { u128::MAX << (128 - len) };
                    *slot = Some(Ipv6Prefix::new(bits.into(), len).unwrap());
                }
            }
            r.ip = Some(IpMatch::V6 { src, dst });
        } else {
            let mut src4 = None;
            let mut dst4 = None;
            for (slot, at) in [(&mut src4, 12), (&mut dst4, 16)] {
                if rng.one_in(2) {
                    let a: [u8; 4] = from(rng, ip_off + at, 4).try_into().unwrap();
                    let len = rng.below(33) as u8;
                    let bits = u32::from_be_bytes(a) & if len == 0 { 0 } else { u32::MAX << (32 - len) };
                    *slot = Some(Ipv4Prefix::new(bits.into(), len).unwrap());
                }
            }
            r.ip = Some(IpMatch::V4 { src: src4, dst: dst4 });
        }
    }
    if rng.one_in(2) {
        r.ip_proto = Some(*rng.pick(&[6, 17, 6, 17, 1, 58, 44]));
        if matches!(r.ip_proto, Some(6 | 17)) {
            let ports = h.ports.unwrap_or(0);
            if rng.one_in(2) {
                r.src_port = Some(u16::from_be_bytes(from(rng, ports, 2).try_into().unwrap()));
            }
            if rng.one_in(2) {
                r.dst_port = Some(u16::from_be_bytes(from(rng, ports + 2, 2).try_into().unwrap()));
            }
        }
    }
    if rng.one_in(2) {
        r.action = Action::Copy;
    }
    r
}
