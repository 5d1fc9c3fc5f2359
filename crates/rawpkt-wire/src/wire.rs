//! Fixed-offset header parsing (smoltcp `wire` style, no allocation): enough of Ethernet, VLAN,
//! IPv4, IPv6, TCP and UDP to classify a frame the way an mlx5 NIC reports it in a CQE, to hash
//! it for RSS, and to compute the checksums a send WQE asks the NIC to fill in.

/// An Ethernet header without tags (two MACs and the EtherType): also the shortest frame a
/// device sends.
pub const ETH_HEADER_LEN: usize = 14;
/// The shortest frame on an Ethernet wire, FCS not counted (IEEE 802.3 clause 4.2.3.3, the
/// kernel's `ETH_ZLEN`): a MAC pads anything shorter with zeros up to it.
pub const ETH_MIN_FRAME: usize = 60;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    None,
    Ipv4 {
        off: usize,
        hdr_len: usize,
        total_len: usize,
        proto: u8,
        frag: bool,
        first_frag: bool,
        options: bool,
    },
    Ipv6 {
        off: usize,
        payload_len: usize,
        next: u8,
        ext: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    None,
    Tcp { off: usize, flags: u8, payload_empty: bool },
    Udp { off: usize },
}

/// What a NIC's parser learns about a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub vlans: u8,
    pub ethertype: u16,
    pub l3: L3,
    pub l4: L4,
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

/// Parses up to two VLAN tags, IPv4/IPv6 and TCP/UDP. Truncated or malformed layers stop the
/// parse and are reported as absent.
pub fn parse(frame: &[u8]) -> Parsed {
    let mut p = Parsed {
        vlans: 0,
        ethertype: 0,
        l3: L3::None,
        l4: L4::None,
    };
    let Some(mut ethertype) = be16(frame, 12) else {
        return p;
    };
    let mut off = ETH_HEADER_LEN;
    while (ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ) && p.vlans < 2 {
        let Some(t) = be16(frame, off + 2) else {
            return p;
        };
        ethertype = t;
        off += 4;
        p.vlans += 1;
    }
    p.ethertype = ethertype;
    match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&vihl) = frame.get(off) else {
                return p;
            };
            let hdr_len = usize::from(vihl & 0xf) * 4;
            if vihl >> 4 != 4 || hdr_len < 20 || frame.len() < off + hdr_len {
                return p;
            }
            let total_len = usize::from(be16(frame, off + 2).unwrap_or(0));
            if total_len < hdr_len || frame.len() < off + total_len {
                return p;
            }
            let frag_field = be16(frame, off + 6).unwrap_or(0);
            let frag = frag_field & 0x3fff != 0;
            let first_frag = frag_field & 0x1fff == 0;
            let proto = frame[off + 9];
            p.l3 = L3::Ipv4 {
                off,
                hdr_len,
                total_len,
                proto,
                frag,
                first_frag,
                options: hdr_len > 20,
            };
            if !frag {
                p.l4 = parse_l4(frame, off + hdr_len, off + total_len, proto);
            }
        }
        ETHERTYPE_IPV6 => {
            if frame.len() < off + 40 || frame[off] >> 4 != 6 {
                return p;
            }
            let payload_len = usize::from(be16(frame, off + 4).unwrap_or(0));
            if frame.len() < off + 40 + payload_len {
                return p;
            }
            let next = frame[off + 6];
            let ext = next != IPPROTO_TCP && next != IPPROTO_UDP && next != 58 && next != 59;
            p.l3 = L3::Ipv6 {
                off,
                payload_len,
                next,
                ext,
            };
            p.l4 = parse_l4(frame, off + 40, off + 40 + payload_len, next);
        }
        _ => {}
    }
    p
}

fn parse_l4(frame: &[u8], off: usize, end: usize, proto: u8) -> L4 {
    match proto {
        IPPROTO_TCP if end >= off + 20 => {
            let data_off = usize::from(frame[off + 12] >> 4) * 4;
            if data_off < 20 || off + data_off > end {
                return L4::None;
            }
            L4::Tcp {
                off,
                flags: frame[off + 13],
                payload_empty: off + data_off == end,
            }
        }
        IPPROTO_UDP if end >= off + 8 => L4::Udp { off },
        _ => L4::None,
    }
}

/// The IP header a flow rule can match on: its offset and protocol field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpHeader {
    None,
    V4 { off: usize, proto: u8 },
    V6 { off: usize, next: u8 },
}

/// Where the fields a flow rule matches sit in a frame. Unlike [`parse`], which validates the
/// way the NIC's checksum logic does (the whole IP packet must be in the frame), this asks only
/// that each header's own bytes be there, so a frame cut short still matches on what it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// TPID and TCI of the outer VLAN tag.
    pub outer_vlan: Option<(u16, u16)>,
    /// The EtherType after up to two VLAN tags.
    pub ethertype: Option<u16>,
    /// A complete IPv4 header (options included, version 4, total length covering it) or the
    /// fixed IPv6 header.
    pub ip: IpHeader,
    /// Offset of the TCP or UDP ports: set only when the IP header says TCP/UDP, the ports lie
    /// inside both the frame and the IP packet's stated length, and the packet is not a
    /// non-first IPv4 fragment (those carry no L4 header). IPv6 extension headers are not
    /// walked: the ports must follow the fixed header.
    pub ports: Option<usize>,
}

pub fn headers(frame: &[u8]) -> Headers {
    let mut h = Headers {
        outer_vlan: None,
        ethertype: None,
        ip: IpHeader::None,
        ports: None,
    };
    let Some(mut ethertype) = be16(frame, 12) else {
        return h;
    };
    let mut off = 14;
    for tag in 0..2 {
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            break;
        }
        let Some(tci) = be16(frame, off) else {
            return h;
        };
        if tag == 0 {
            h.outer_vlan = Some((ethertype, tci));
        }
        let Some(inner) = be16(frame, off + 2) else {
            return h;
        };
        ethertype = inner;
        off += 4;
    }
    h.ethertype = Some(ethertype);
    let (proto, l4, end) = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&vihl) = frame.get(off) else {
                return h;
            };
            let hdr_len = usize::from(vihl & 0xf) * 4;
            if vihl >> 4 != 4 || hdr_len < 20 || frame.len() < off + hdr_len {
                return h;
            }
            let total_len = usize::from(be16(frame, off + 2).unwrap_or(0));
            if total_len < hdr_len {
                return h;
            }
            let proto = frame[off + 9];
            h.ip = IpHeader::V4 { off, proto };
            if be16(frame, off + 6).unwrap_or(0) & 0x1fff != 0 {
                return h;
            }
            (proto, off + hdr_len, off + total_len)
        }
        ETHERTYPE_IPV6 => {
            if frame.len() < off + 40 || frame[off] >> 4 != 6 {
                return h;
            }
            let next = frame[off + 6];
            h.ip = IpHeader::V6 { off, next };
            let payload_len = usize::from(be16(frame, off + 4).unwrap_or(0));
            (next, off + 40, off + 40 + payload_len)
        }
        _ => return h,
    };
    if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) && l4 + 4 <= end.min(frame.len()) {
        h.ports = Some(l4);
    }
    h
}

/// One's-complement sum of `data` (as big-endian 16-bit words, an odd last byte padded with
/// zero) added to `init`; fold it with [`csum_fold`]. Summing 32-bit words into a 64-bit
/// accumulator gives the same folded result with half the steps (RFC 1071 §2).
pub fn csum_add(init: u32, data: &[u8]) -> u32 {
    let mut sum = u64::from(init);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    sum += u64::from(u32::from_be_bytes(tail));
    // Fold 64 → 32 bits without losing carries (end-around carry).
    while sum > 0xffff_ffff {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    let sum = sum as u32;
    (sum & 0xffff) + (sum >> 16)
}

pub fn csum_fold(sum: u32) -> u16 {
    let mut sum = u64::from(sum);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn l4_range(p: &Parsed) -> Option<(usize, usize, u32)> {
    let (l4_off, l3) = match p.l4 {
        L4::Tcp { off, .. } | L4::Udp { off } => (off, p.l3),
        L4::None => return None,
    };
    match l3 {
        L3::Ipv4 {
            off, total_len, proto, ..
        } => Some((l4_off, off + total_len, u32::from(proto))),
        L3::Ipv6 {
            off, payload_len, next, ..
        } => Some((l4_off, off + 40 + payload_len, u32::from(next))),
        L3::None => None,
    }
}

/// The pseudo-header sum for the L4 checksum.
fn pseudo_sum(frame: &[u8], p: &Parsed, l4_len: usize, proto: u32) -> u32 {
    match p.l3 {
        L3::Ipv4 { off, .. } => csum_add(proto + l4_len as u32, &frame[off + 12..off + 20]),
        L3::Ipv6 { off, .. } => csum_add(proto + l4_len as u32, &frame[off + 8..off + 40]),
        L3::None => 0,
    }
}

pub fn ipv4_header_ok(frame: &[u8], p: &Parsed) -> bool {
    match p.l3 {
        L3::Ipv4 { off, hdr_len, .. } => csum_fold(csum_add(0, &frame[off..off + hdr_len])) == 0,
        _ => false,
    }
}

/// Whether the TCP/UDP checksum verifies (a zero UDP checksum over IPv4 means "none").
pub fn l4_checksum_ok(frame: &[u8], p: &Parsed) -> bool {
    let Some((l4, end, proto)) = l4_range(p) else {
        return false;
    };
    if let (L4::Udp { off }, L3::Ipv4 { .. }) = (p.l4, p.l3) {
        if frame[off + 6] == 0 && frame[off + 7] == 0 {
            return true;
        }
    }
    csum_fold(csum_add(pseudo_sum(frame, p, end - l4, proto), &frame[l4..end])) == 0
}

/// Fills in the IPv4 header checksum and/or the TCP/UDP checksum, as a NIC does for a send WQE
/// with `cs_flags` L3/L4. Frames without such headers are left alone.
pub fn fill_checksums(frame: &mut [u8], l3: bool, l4: bool) {
    let p = parse(frame);
    if l3 {
        if let L3::Ipv4 { off, hdr_len, .. } = p.l3 {
            frame[off + 10..off + 12].copy_from_slice(&[0, 0]);
            let c = csum_fold(csum_add(0, &frame[off..off + hdr_len]));
            frame[off + 10..off + 12].copy_from_slice(&c.to_be_bytes());
        }
    }
    if l4 {
        if let Some((l4_off, end, proto)) = l4_range(&p) {
            let field = l4_off + if matches!(p.l4, L4::Tcp { .. }) { 16 } else { 6 };
            frame[field..field + 2].copy_from_slice(&[0, 0]);
            let mut c = csum_fold(csum_add(
                pseudo_sum(frame, &p, end - l4_off, proto),
                &frame[l4_off..end],
            ));
            if c == 0 && matches!(p.l4, L4::Udp { .. }) {
                c = 0xffff;
            }
            frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// The RSS input for a frame: source and destination address, then ports for TCP/UDP
/// (the `SRC/DST_IPV4|IPV6` + `SRC/DST_PORT_TCP|UDP` field sets). Returns the bytes used.
pub fn rss_input(frame: &[u8], p: &Parsed, out: &mut [u8; 36]) -> usize {
    let mut n = match p.l3 {
        L3::Ipv4 { off, .. } => {
            out[..8].copy_from_slice(&frame[off + 12..off + 20]);
            8
        }
        L3::Ipv6 { off, .. } => {
            out[..32].copy_from_slice(&frame[off + 8..off + 40]);
            32
        }
        L3::None => return 0,
    };
    if let L4::Tcp { off, .. } | L4::Udp { off } = p.l4 {
        out[n..n + 4].copy_from_slice(&frame[off..off + 4]);
        n += 4;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1234, 5678)
            .write(&mut f, payload)
            .unwrap();
        f
    }

    #[test]
    fn checksums_match_an_independent_builder() {
        let good = udp4(b"hello rawpkt");
        let p = parse(&good);
        assert!(ipv4_header_ok(&good, &p));
        assert!(l4_checksum_ok(&good, &p));
        let mut f = good.clone();
        f[24] ^= 0xff;
        f[40] ^= 0xff;
        fill_checksums(&mut f, false, false);
        assert!(!ipv4_header_ok(&f, &parse(&f)));
        f[24] ^= 0xff;
        f[40] ^= 0xff;
        f[24..26].copy_from_slice(&[0, 0]);
        f[40..42].copy_from_slice(&[0, 0]);
        fill_checksums(&mut f, true, true);
        assert_eq!(f, good);
    }

    /// Whatever a caller hands the transmit path with checksum flags set (truncated frames,
    /// lengths that lie, options, VLAN tags), filling the checksums never reads or writes past
    /// the frame.
    #[test]
    fn filling_checksums_of_any_bytes_stays_inside_the_frame() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let v6 = {
            let mut f = Vec::new();
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv6([1; 16], [2; 16], 64)
                .tcp(1, 2, 3, 4)
                .write(&mut f, b"payload")
                .unwrap();
            f
        };
        for base in [udp4(b"hello rawpkt"), v6] {
            for _ in 0..20_000 {
                let mut f = base.clone();
                f.truncate((next() as usize) % (base.len() + 1));
                // Half the writes land on the fields parsing trusts: EtherType, IHL, the IPv4
                // total length and protocol, the IPv6 payload length and next header, TCP's offset.
                const FIELDS: [usize; 10] = [12, 13, 14, 16, 17, 18, 19, 20, 23, 66];
                for _ in 0..(next() % 4) {
                    let i = if next() % 2 == 0 {
                        FIELDS[(next() % 10) as usize]
                    } else {
                        next() as usize
                    };
                    if !f.is_empty() {
                        let i = i % f.len();
                        f[i] = next() as u8;
                    }
                }
                fill_checksums(&mut f, true, true);
            }
        }
    }

    #[test]
    fn headers_need_only_their_own_bytes() {
        let f = udp4(b"x");
        let h = headers(&f);
        assert_eq!(
            (h.ethertype, h.ip, h.ports),
            (Some(ETHERTYPE_IPV4), IpHeader::V4 { off: 14, proto: 17 }, Some(34))
        );
        // Cut inside the payload: parse() gives up on L3, headers() still has everything.
        assert_eq!(parse(&f[..40]).l3, L3::None);
        assert_eq!(headers(&f[..40]), h);
        assert_eq!(headers(&f[..37]).ports, None);
        assert_eq!(headers(&f[..33]).ip, IpHeader::None);
        assert_eq!(headers(&f[..13]).ethertype, None);
        let mut v = f[..12].to_vec();
        v.extend_from_slice(&[0x88, 0xa8, 0x20, 0x05, 0x81, 0, 0, 7]);
        v.extend_from_slice(&f[12..]);
        let h = headers(&v);
        assert_eq!(
            (h.outer_vlan, h.ethertype, h.ports),
            (Some((0x88a8, 0x2005)), Some(ETHERTYPE_IPV4), Some(42))
        );
    }

    #[test]
    fn truncation_and_vlan() {
        let f = udp4(b"x");
        for cut in 0..f.len() {
            let p = parse(&f[..cut]);
            assert!(matches!(p.l4, L4::None) || cut == f.len(), "cut {cut}");
        }
        let mut v = f[..12].to_vec();
        v.extend_from_slice(&[0x81, 0, 0, 5]);
        v.extend_from_slice(&f[12..]);
        let p = parse(&v);
        assert_eq!((p.vlans, p.ethertype), (1, ETHERTYPE_IPV4));
        assert!(matches!(p.l4, L4::Udp { off: 38 }));
    }
}
