//! Frame templates beyond Ethernet/IP/UDP: VLAN and QinQ tags, VXLAN (outer UDP to 4789, RFC
//! 7348) and GRE (RFC 2784, no options) over IPv4 or IPv6; and fields that vary per packet
//! (addresses, ports, MACs: incrementing or random over a range) with the IPv4 header checksum
//! kept right by incremental update (RFC 1624).
//!
//! UDP checksums: an IPv4 UDP checksum is 0 ("none", RFC 768) as in pktgen's plain frames and as
//! RFC 7348 recommends for VXLAN's outer header; a plain IPv6 frame has its UDP checksum
//! offloaded to the NIC; an encapsulated frame with IPv6 in it has its IPv6 UDP checksums
//! computed here, per packet (inner first, then outer), because the stamp in the payload
//! changes every packet and pktgen asks no device for tunnel checksum offload.

use std::net::IpAddr;

use rawpkt_wire::wire::{csum_add, csum_fold};

/// The VXLAN UDP port (IANA, RFC 7348).
pub(crate) const VXLAN_PORT: u16 = 4789;
const ETH: usize = 14;
const UDP: usize = 8;
const VXLAN: usize = 8;
const GRE: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encap {
    None,
    Vxlan(u32),
    Gre,
}

impl Encap {
    pub(crate) fn parse(s: &str) -> Result<Encap, String> {
        match s {
            "none" => Ok(Encap::None),
            "gre" => Ok(Encap::Gre),
            _ => match s.strip_prefix("vxlan:").map(str::parse::<u32>) {
                Some(Ok(v)) if v < 1 << 24 => Ok(Encap::Vxlan(v)),
                _ => Err(format!("{s:?}: expected none, gre or vxlan:VNI (VNI below 16777216)")),
            },
        }
    }
}

/// A field that varies per packet over `count` values from the template's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub field: Field,
    pub count: u32,
    pub random: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    SrcIp,
    DstIp,
    SrcPort,
    DstPort,
    SrcMac,
    DstMac,
}

/// Most ranges a stream has: one per field.
pub(crate) const MAX_RANGES: usize = 6;

impl Range {
    /// `FIELD:N[:random|:inc]`, FIELD one of src-ip dst-ip src-port dst-port src-mac dst-mac.
    pub(crate) fn parse(s: &str) -> Result<Range, String> {
        let mut it = s.split(':');
        let field = match it.next() {
            Some("src-ip") => Field::SrcIp,
            Some("dst-ip") => Field::DstIp,
            Some("src-port") => Field::SrcPort,
            Some("dst-port") => Field::DstPort,
            Some("src-mac") => Field::SrcMac,
            Some("dst-mac") => Field::DstMac,
            _ => {
                return Err(format!(
                    "{s:?}: expected FIELD:N[:random], FIELD one of src-ip dst-ip src-port dst-port src-mac dst-mac"
                ))
            }
        };
        let count = match it.next().map(str::parse::<u32>) {
            Some(Ok(n)) if n >= 1 => n,
            _ => return Err(format!("{s:?}: N must be a count from 1")),
        };
        let random = match it.next() {
            None | Some("inc") => false,
            Some("random") => true,
            Some(m) => return Err(format!("{s:?}: {m:?} is neither inc nor random")),
        };
        if it.next().is_some() {
            return Err(format!("{s:?}: expected FIELD:N[:random]"));
        }
        Ok(Range { field, count, random })
    }

    /// A list separated by commas (the stream file's `ranges`).
    pub(crate) fn parse_list(s: &str) -> Result<Vec<Range>, String> {
        let r: Vec<Range> = s.split(',').map(|x| Range::parse(x.trim())).collect::<Result<_, _>>()?;
        check_ranges(&r)?;
        Ok(r)
    }
}

pub(crate) fn check_ranges(r: &[Range]) -> Result<(), String> {
    for (i, a) in r.iter().enumerate() {
        if r[..i].iter().any(|b| b.field == a.field) {
            return Err(format!("{:?} is given two ranges", a.field));
        }
    }
    Ok(())
}

/// What a template looks like: the headers it has and where its fields are.
#[derive(Clone, Debug)]
pub(crate) struct Headers {
    pub vlan: Vec<u16>,
    pub encap: Encap,
    pub outer: (IpAddr, IpAddr),
}

/// Offsets of a built template.
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    /// The inner (or only) IP header and UDP header, and whether that IP is v6.
    pub l3: usize,
    pub l4: usize,
    pub v6: bool,
    /// UDP checksums computed per packet: (IP header, UDP header, IPv6), inner first.
    pub sw_csums: Vec<(usize, usize, bool)>,
    /// Ask the NIC for the UDP checksum (a plain IPv6 frame).
    pub offload: bool,
}

fn ip_len(ip: IpAddr) -> usize {
    if ip.is_ipv4() {
        20
    } else {
        40
    }
}

/// Bytes before the stamp.
pub(crate) fn header_len(t: &Headers, inner: IpAddr) -> usize {
    let vlan = 4 * t.vlan.len();
    let inner = ip_len(inner) + UDP;
    ETH + vlan
        + match t.encap {
            Encap::None => inner,
            Encap::Vxlan(_) => ip_len(t.outer.0) + UDP + VXLAN + ETH + inner,
            Encap::Gre => ip_len(t.outer.0) + GRE + inner,
        }
}

fn ethertype(ip: IpAddr) -> u16 {
    if ip.is_ipv4() {
        0x0800
    } else {
        0x86dd
    }
}

/// Writes an IP header at `f[0..]` for a packet whose IP part is `f.len()` bytes long.
fn write_ip(f: &mut [u8], src: IpAddr, dst: IpAddr, proto: u8) {
    let total = f.len();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut f[..20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = 64;
            h[9] = proto;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = csum_fold(csum_add(0, h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = &mut f[..40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            h[6] = proto;
            h[7] = 64;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
        }
        _ => unreachable!("checked: both addresses of one family"),
    }
}

fn write_udp(f: &mut [u8], src: u16, dst: u16) {
    let len = f.len() as u16;
    f[0..2].copy_from_slice(&src.to_be_bytes());
    f[2..4].copy_from_slice(&dst.to_be_bytes());
    f[4..6].copy_from_slice(&len.to_be_bytes());
}

/// Inner MACs of a VXLAN frame (locally administered).
const INNER_MACS: ([u8; 6], [u8; 6]) = ([2, 0, 0, 0, 1, 2], [2, 0, 0, 0, 1, 1]);

/// Builds a template of `len` bytes: (frame, layout). The payload after the headers is zero.
pub(crate) fn build(
    t: &Headers,
    macs: ([u8; 6], [u8; 6]),
    ips: (IpAddr, IpAddr),
    ports: (u16, u16),
    len: usize,
) -> (Vec<u8>, Layout) {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&macs.1);
    f[6..12].copy_from_slice(&macs.0);
    let mut off = 12;
    let tpids: &[u16] = match t.vlan.len() {
        0 => &[],
        1 => &[0x8100],
        _ => &[0x88a8, 0x8100],
    };
    for (tpid, vid) in tpids.iter().zip(&t.vlan) {
        f[off..off + 2].copy_from_slice(&tpid.to_be_bytes());
        f[off + 2..off + 4].copy_from_slice(&vid.to_be_bytes());
        off += 4;
    }
    let l2_end = off + 2;
    let outer_type = if t.encap == Encap::None {
        ethertype(ips.0)
    } else {
        ethertype(t.outer.0)
    };
    f[off..l2_end].copy_from_slice(&outer_type.to_be_bytes());
    let mut lay = Layout::default();
    let inner_l3 = match t.encap {
        Encap::None => l2_end,
        Encap::Vxlan(vni) => {
            let ol4 = l2_end + ip_len(t.outer.0);
            write_ip(&mut f[l2_end..], t.outer.0, t.outer.1, 17);
            // The outer source port is the flow's entropy (RFC 7348 section 5); one flow here.
            write_udp(&mut f[ol4..], 49152, VXLAN_PORT);
            let vx = ol4 + UDP;
            f[vx] = 0x08; // I flag: the VNI is valid
            f[vx + 4..vx + 8].copy_from_slice(&(vni << 8).to_be_bytes());
            let ie = vx + VXLAN;
            f[ie..ie + 6].copy_from_slice(&INNER_MACS.0);
            f[ie + 6..ie + 12].copy_from_slice(&INNER_MACS.1);
            f[ie + 12..ie + 14].copy_from_slice(&ethertype(ips.0).to_be_bytes());
            if t.outer.0.is_ipv6() {
                lay.sw_csums.push((l2_end, ol4, true));
            }
            ie + ETH
        }
        Encap::Gre => {
            let gre = l2_end + ip_len(t.outer.0);
            write_ip(&mut f[l2_end..], t.outer.0, t.outer.1, 47);
            f[gre + 2..gre + 4].copy_from_slice(&ethertype(ips.0).to_be_bytes());
            gre + GRE
        }
    };
    let l4 = inner_l3 + ip_len(ips.0);
    write_ip(&mut f[inner_l3..], ips.0, ips.1, 17);
    write_udp(&mut f[l4..], ports.0, ports.1);
    lay.l3 = inner_l3;
    lay.l4 = l4;
    lay.v6 = ips.0.is_ipv6();
    if lay.v6 {
        if t.encap == Encap::None {
            lay.offload = true;
        } else {
            lay.sw_csums.insert(0, (inner_l3, l4, true));
        }
    }
    (f, lay)
}

/// The UDP checksum of the datagram at `f[l4..]` in the IPv6 packet at `f[l3..]`, written in.
pub(crate) fn udp6_csum(f: &mut [u8], l3: usize, l4: usize) {
    f[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
    let len = (f.len() - l4) as u32;
    let mut s = csum_add(0, &f[l3 + 8..l3 + 40]);
    s = csum_add(s, &len.to_be_bytes());
    s = csum_add(s, &17u32.to_be_bytes());
    s = csum_add(s, &f[l4..]);
    let c = match csum_fold(s) {
        0 => 0xffff, // 0 means "no checksum", which IPv6 forbids (RFC 8200 section 8.1)
        c => c,
    };
    f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
}

/// Replaces the 16-bit words `old` by `new` under the IPv4 header checksum at `c` (RFC 1624
/// eqn. 3: HC' = ~(~HC + ~m + m')).
pub(crate) fn csum_replace(c: &mut [u8], old: &[u8], new: &[u8]) {
    let hc = u16::from_be_bytes([c[0], c[1]]);
    let mut s = u32::from(!hc);
    for w in old.chunks(2) {
        s += u32::from(!u16::from_be_bytes([w[0], w[1]]));
    }
    s = csum_add(s, new);
    c.copy_from_slice(&csum_fold(s).to_be_bytes());
}

/// A stream whose packets are all one template, differing only in the stamp's sequence number
/// and send time and, with several flows, the UDP source port: no checksum pktgen computes
/// covers any of them (see `traffic.rs`). The send loop's fast path writes these fields and
/// nothing else into a buffer that already holds the template; a buffer that holds another
/// gets the whole template first.
pub(crate) struct Plain {
    pub frame: Box<[u8]>,
    /// What `Held` says of a buffer that holds this template.
    pub held: u32,
    /// Where the sequence number goes; the send time follows it.
    pub seq_off: usize,
    /// The stream id, in the sequence number's top byte.
    pub id: u64,
    /// Flows: the UDP source port of flow `f` is `src_port + f`, at `port_off`.
    pub flows: u32,
    pub src_port: u16,
    pub port_off: usize,
    /// The send offloads each packet asks for (the IPv6 UDP checksum).
    pub tx_flags: u32,
}

impl Plain {
    /// Puts the whole template into `frame`, a buffer that held something else (`held` says
    /// what), and says it holds this one now. Out of line: after the first lap of the pool,
    /// buffers come back holding their template, and the send loop keeps its values in
    /// registers without this call's.
    #[cold]
    #[inline(never)]
    pub(crate) fn put(&self, frame: &mut [u8], held: &mut u32) {
        frame.copy_from_slice(&self.frame);
        *held = self.held;
    }
}

/// Writes a stamp's varying part at `off`: the sequence number with the stream id, and the
/// send time, already big-endian.
#[inline(always)]
pub(crate) fn stamp(frame: &mut [u8], off: usize, seq_id: u64, now_be: [u8; 8]) {
    let s = &mut frame[off..off + 16];
    s[..8].copy_from_slice(&seq_id.to_be_bytes());
    s[8..].copy_from_slice(&now_be);
}

/// Where the stamp of a frame pktgen built sits: after the (inner) UDP header, through VLAN
/// tags, VXLAN and GRE.
#[inline]
pub(crate) fn stamp_offset_of(f: &[u8]) -> Option<usize> {
    let be16 = |o: usize| -> Option<u16> { Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?])) };
    let mut off = 12;
    let mut et = be16(off)?;
    while et == 0x8100 || et == 0x88a8 {
        off += 4;
        et = be16(off)?;
    }
    off += 2;
    for depth in 0..2 {
        let (proto, l4) = match et {
            0x0800 => (*f.get(off + 9)?, off + usize::from(f.get(off)? & 0xf) * 4),
            0x86dd => (*f.get(off + 6)?, off + 40),
            _ => return None,
        };
        match proto {
            17 if depth == 0 && be16(l4 + 2)? == VXLAN_PORT && *f.get(l4 + UDP)? == 0x08 => {
                let ie = l4 + UDP + VXLAN;
                et = be16(ie + 12)?;
                off = ie + ETH;
            }
            17 => return Some(l4 + UDP),
            47 if depth == 0 => {
                et = be16(l4 + 2)?;
                off = l4 + GRE;
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_encaps_parse() {
        assert_eq!(
            Range::parse("dst-ip:256:random"),
            Ok(Range {
                field: Field::DstIp,
                count: 256,
                random: true
            })
        );
        assert!(!Range::parse("src-port:10").unwrap().random);
        for bad in ["ip:3", "src-ip:0", "src-ip", "src-ip:3:often", "src-ip:3:inc:x"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
        assert!(Range::parse_list("src-ip:2,src-ip:3").is_err());
        assert_eq!(Encap::parse("vxlan:42"), Ok(Encap::Vxlan(42)));
        assert!(Encap::parse("vxlan:16777216").is_err());
    }

    #[test]
    fn incremental_checksum_update_equals_a_fresh_one() {
        let (mut f, lay) = build(
            &Headers {
                vlan: vec![],
                encap: Encap::None,
                outer: ("0.0.0.0".parse().unwrap(), "0.0.0.0".parse().unwrap()),
            },
            ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]),
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()),
            (1, 2),
            60,
        );
        let old = f[lay.l3 + 16..lay.l3 + 20].to_vec();
        let new = [10, 9, 255, 254];
        let (h, rest) = f.split_at_mut(lay.l3 + 16);
        rest[..4].copy_from_slice(&new);
        csum_replace(&mut h[lay.l3 + 10..lay.l3 + 12], &old, &new);
        let mut check = f[lay.l3..lay.l3 + 20].to_vec();
        check[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(
            u16::from_be_bytes([f[lay.l3 + 10], f[lay.l3 + 11]]),
            csum_fold(csum_add(0, &check))
        );
    }
}
