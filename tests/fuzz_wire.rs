//! Fuzz target: the header parsers (`flow::wire::parse`, what the model's CQE classification
//! and RSS read; `flow::wire::headers`, what the matcher reads) and the software matcher
//! (`FlowRule::matches`), each against an independent reading of the same bytes.
//!
//! Frames are written with etherparse's header types (Ethernet, 0–3 VLAN tags of either TPID,
//! IPv4 with options and fragment fields, IPv6, UDP, TCP with options, other protocols), then
//! half of them mutated (lengths, versions, TPIDs, cuts); a fifth are random bytes. The independent reading
//! takes every header field from etherparse's header slices (`Ethernet2HeaderSlice`,
//! `SingleVlanHeaderSlice`, `Ipv4HeaderSlice`, `Ipv6HeaderSlice`, `TcpHeaderSlice`) and applies
//! the rules documented in `flow::wire` and `flow::matcher` on them; rules are random, their
//! fields often taken from the frame so that they match, and matched here with plain integer
//! masks. Invariant: ours and the independent reading agree on every frame.

mod fuzz;

use etherparse::{
    EtherType, Ethernet2Header, Ethernet2HeaderSlice, IpFragOffset, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv4Options,
    Ipv6FlowLabel, Ipv6Header, Ipv6HeaderSlice, SingleVlanHeader, SingleVlanHeaderSlice, TcpHeader, TcpHeaderSlice,
    UdpHeader, VlanId, VlanPcp,
};
use rawpkt::flow::rule::{Action, FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch};
use rawpkt::flow::wire::{self, Headers, IpHeader, Parsed, L3, L4};

fn frame(rng: &mut fuzz::Rng) -> Vec<u8> {
    if rng.one_in(5) {
        let n = rng.below(80);
        return rng.bytes(n);
    }
    let mut f = Vec::new();
    let mac = |rng: &mut fuzz::Rng| -> [u8; 6] {
        match rng.below(3) {
            0 => [2, 0, 0, 0, 0, 1 + rng.below(2) as u8],
            1 => [0xff; 6],
            _ => rng.bytes(6).try_into().unwrap(),
        }
    };
    let tags = *rng.pick(&[0, 0, 0, 1, 1, 2, 3]);
    let l3 = rng.below(4); // IPv4, IPv6, IPv4 again, other
    let ip_type = [0x0800, 0x86dd, 0x0800, *rng.pick(&[0x0806, 0x88b5, 0x0600, 0x8100])][l3];
    let tpid = |rng: &mut fuzz::Rng| if rng.one_in(3) { 0x88a8 } else { 0x8100 };
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

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// The L2 walk, from etherparse's slices: (outer tag, tags read, EtherType after them, offset),
/// or where it stopped.
struct L2 {
    outer: Option<(u16, u16)>,
    tags: u8,
    /// None: the frame ends inside a tag.
    ethertype: Option<u16>,
    off: usize,
}

fn l2(f: &[u8]) -> Option<L2> {
    let eth = Ethernet2HeaderSlice::from_slice(f).ok()?;
    let mut r = L2 {
        outer: None,
        tags: 0,
        ethertype: Some(eth.ether_type().0),
        off: 14,
    };
    while r.tags < 2 && matches!(r.ethertype, Some(0x8100 | 0x88a8)) {
        let tpid = r.ethertype.unwrap();
        match SingleVlanHeaderSlice::from_slice(&f[r.off..]) {
            Ok(v) => {
                let tci = u16::from(v.priority_code_point().value()) << 13
                    | u16::from(v.drop_eligible_indicator()) << 12
                    | v.vlan_identifier().value();
                if r.tags == 0 {
                    r.outer = Some((tpid, tci));
                }
                r.ethertype = Some(v.ether_type().0);
                r.tags += 1;
                r.off += 4;
            }
            Err(_) => {
                // Cut inside the tag: `headers` still reports an outer TCI whose two bytes are
                // there (documented: a frame cut short matches on what it has).
                if r.tags == 0 && f.len() >= r.off + 2 {
                    r.outer = Some((tpid, be16(f, r.off)));
                }
                r.ethertype = None;
                return Some(r);
            }
        }
    }
    Some(r)
}

fn tcp_flags(t: &TcpHeaderSlice) -> u8 {
    [t.fin(), t.syn(), t.rst(), t.psh(), t.ack(), t.urg(), t.ece(), t.cwr()]
        .iter()
        .enumerate()
        .fold(0, |b, (i, &on)| b | u8::from(on) << i)
}

/// `wire::parse` as documented: the whole IP packet in the frame, L4 of unfragmented packets.
fn want_parsed(f: &[u8]) -> Parsed {
    let mut p = Parsed {
        vlans: 0,
        ethertype: 0,
        l3: L3::None,
        l4: L4::None,
    };
    let Some(l) = l2(f) else { return p };
    p.vlans = l.tags;
    let Some(et) = l.ethertype else { return p };
    p.ethertype = et;
    let off = l.off;
    let (proto, start, end) = match et {
        0x0800 => {
            let Ok(ip) = Ipv4HeaderSlice::from_slice(&f[off..]) else {
                return p;
            };
            let (hl, tl) = (usize::from(ip.ihl()) * 4, usize::from(ip.total_len()));
            if tl < hl || f.len() < off + tl {
                return p;
            }
            let frag_off = ip.fragments_offset().value();
            let frag = ip.more_fragments() || frag_off != 0;
            p.l3 = L3::Ipv4 {
                off,
                hdr_len: hl,
                total_len: tl,
                proto: ip.protocol().0,
                frag,
                first_frag: frag_off == 0,
                options: hl > 20,
            };
            if frag {
                return p;
            }
            (ip.protocol().0, off + hl, off + tl)
        }
        0x86dd => {
            let Ok(ip) = Ipv6HeaderSlice::from_slice(&f[off..]) else {
                return p;
            };
            let pl = usize::from(ip.payload_length());
            if f.len() < off + 40 + pl {
                return p;
            }
            let next = ip.next_header().0;
            p.l3 = L3::Ipv6 {
                off,
                payload_len: pl,
                next,
                ext: ![6, 17, 58, 59].contains(&next),
            };
            (next, off + 40, off + 40 + pl)
        }
        _ => return p,
    };
    p.l4 = match proto {
        6 => match TcpHeaderSlice::from_slice(&f[start..end]) {
            Ok(t) => L4::Tcp {
                off: start,
                flags: tcp_flags(&t),
                payload_empty: start + usize::from(t.data_offset()) * 4 == end,
            },
            Err(_) => L4::None,
        },
        17 if end - start >= 8 => L4::Udp { off: start },
        _ => L4::None,
    };
    p
}

/// `wire::headers` as documented: each header's own bytes, ports of unfragmented packets and
/// first fragments inside both the frame and the IP packet's stated length.
fn want_headers(f: &[u8]) -> Headers {
    let mut h = Headers {
        outer_vlan: None,
        ethertype: None,
        ip: IpHeader::None,
        ports: None,
    };
    let Some(l) = l2(f) else { return h };
    h.outer_vlan = l.outer;
    h.ethertype = l.ethertype;
    let off = l.off;
    let (proto, start, end) = match l.ethertype {
        Some(0x0800) => {
            let Ok(ip) = Ipv4HeaderSlice::from_slice(&f[off..]) else {
                return h;
            };
            let (hl, tl) = (usize::from(ip.ihl()) * 4, usize::from(ip.total_len()));
            if tl < hl {
                return h;
            }
            h.ip = IpHeader::V4 {
                off,
                proto: ip.protocol().0,
            };
            if ip.fragments_offset().value() != 0 {
                return h;
            }
            (ip.protocol().0, off + hl, off + tl)
        }
        Some(0x86dd) => {
            let Ok(ip) = Ipv6HeaderSlice::from_slice(&f[off..]) else {
                return h;
            };
            h.ip = IpHeader::V6 {
                off,
                next: ip.next_header().0,
            };
            (
                ip.next_header().0,
                off + 40,
                off + 40 + usize::from(ip.payload_length()),
            )
        }
        _ => return h,
    };
    if (proto == 6 || proto == 17) && start + 4 <= end.min(f.len()) {
        h.ports = Some(start);
    }
    h
}

fn rule(rng: &mut fuzz::Rng, f: &[u8]) -> FlowRule {
    let mut r = FlowRule::ANY;
    // A field from the frame when it has one (so rules match), else random.
    let from = |rng: &mut fuzz::Rng, at: usize, n: usize| -> Vec<u8> {
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

/// The matcher's documented semantics on the independent reading, with integer masks.
fn want_match(r: &FlowRule, f: &[u8]) -> bool {
    let h = want_headers(f);
    let mac_ok = |m: &Option<MacMatch>, at: usize| {
        m.is_none_or(|m| {
            f.get(at..at + 6)
                .is_some_and(|b| (0..6).all(|i| b[i] & m.mask()[i] == m.addr()[i] & m.mask()[i]))
        })
    };
    if !mac_ok(&r.dst_mac, 0) || !mac_ok(&r.src_mac, 6) {
        return false;
    }
    if r.vlan
        .is_some_and(|v| !matches!(h.outer_vlan, Some((0x8100, tci)) if tci & 0xfff == v))
    {
        return false;
    }
    if r.ethertype.is_some_and(|t| h.ethertype != Some(t)) {
        return false;
    }
    let in4 = |p: &Option<Ipv4Prefix>, at: usize| {
        p.is_none_or(|p| {
            let m = if p.len() == 0 { 0 } else { u32::MAX << (32 - p.len()) };
            let a = u32::from_be_bytes(f[at..at + 4].try_into().unwrap());
            a & m == u32::from(p.addr()) & m
        })
    };
    let in6 = |p: &Option<Ipv6Prefix>, at: usize| {
        p.is_none_or(|p| {
            let m = if p.len() == 0 { 0 } else { u128::MAX << (128 - p.len()) };
            let a = u128::from_be_bytes(f[at..at + 16].try_into().unwrap());
            a & m == u128::from(p.addr()) & m
        })
    };
    let proto = match (&r.ip, h.ip) {
        (None, IpHeader::V4 { proto, .. }) | (None, IpHeader::V6 { next: proto, .. }) => Some(proto),
        (None, IpHeader::None) => None,
        (Some(IpMatch::V4 { src, dst }), IpHeader::V4 { off, proto }) => {
            if !in4(src, off + 12) || !in4(dst, off + 16) {
                return false;
            }
            Some(proto)
        }
        (Some(IpMatch::V6 { src, dst }), IpHeader::V6 { off, next }) => {
            if !in6(src, off + 8) || !in6(dst, off + 24) {
                return false;
            }
            Some(next)
        }
        _ => return false,
    };
    if r.ip_proto.is_some() && r.ip_proto != proto {
        return false;
    }
    if r.src_port.is_some() || r.dst_port.is_some() {
        let Some(at) = h.ports else { return false };
        if r.src_port.is_some_and(|p| p != be16(f, at)) || r.dst_port.is_some_and(|p| p != be16(f, at + 2)) {
            return false;
        }
    }
    true
}

#[test]
fn fuzz_wire() {
    let (mut l4, mut matched, mut rules) = (0u64, 0u64, 0u64);
    let n = fuzz::run("fuzz_wire", 200_000, |rng, _| {
        let f = frame(rng);
        let p = wire::parse(&f);
        assert_eq!(p, want_parsed(&f), "wire::parse of {f:02x?}");
        assert_eq!(wire::headers(&f), want_headers(&f), "wire::headers of {f:02x?}");
        l4 += u64::from(p.l4 != L4::None);
        for _ in 0..4 {
            let r = rule(rng, &f);
            let got = r.matches(&f);
            assert_eq!(got, want_match(&r, &f), "rule `{r}` on {f:02x?}");
            rules += 1;
            matched += u64::from(got);
        }
    });
    eprintln!("fuzz_wire: {l4} of {n} frames with an L4 header; {matched} of {rules} rule checks matched");
    // Both outcomes must be common, or the generator misses half of the matcher.
    assert!(n < 1000 || (l4 * 8 > n && matched * 10 > rules && matched * 10 < rules * 9));
}
