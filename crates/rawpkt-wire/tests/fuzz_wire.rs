//! Fuzz target: the header parsers (`wire::parse`, what the model's CQE classification
//! and RSS read; `wire::headers`, what the matcher reads) and the software matcher
//! (`FlowRule::matches`), each against an independent reading of the same bytes.
//!
//! Frames are written with etherparse's header types (Ethernet, 0–3 VLAN tags of either TPID,
//! IPv4 with options and fragment fields, IPv6, UDP, TCP with options, other protocols), then
//! half of them mutated (lengths, versions, TPIDs, cuts); a fifth are random bytes. The independent reading
//! takes every header field from etherparse's header slices (`Ethernet2HeaderSlice`,
//! `SingleVlanHeaderSlice`, `Ipv4HeaderSlice`, `Ipv6HeaderSlice`, `TcpHeaderSlice`) and applies
//! the rules documented in `wire` and `matcher` on them; rules are random, their
//! fields often taken from the frame so that they match, and matched here with plain integer
//! masks. Invariant: ours and the independent reading agree on every frame.

use rawpkt_test_support::fuzz;

use fuzz::frames::{frame, rule};

use etherparse::{Ethernet2HeaderSlice, Ipv4HeaderSlice, Ipv6HeaderSlice, SingleVlanHeaderSlice, TcpHeaderSlice};
use rawpkt_wire::rule::{FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch};
use rawpkt_wire::wire::{self, Headers, IpHeader, Parsed, L3, L4};

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
            let m = u32::MAX.checked_shl(32 - u32::from(p.len())).unwrap_or(0);
            let a = u32::from_be_bytes(f[at..at + 4].try_into().unwrap());
            a & m == u32::from(p.addr()) & m
        })
    };
    let in6 = |p: &Option<Ipv6Prefix>, at: usize| {
        p.is_none_or(|p| {
            let m = u128::MAX.checked_shl(128 - u32::from(p.len())).unwrap_or(0);
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
