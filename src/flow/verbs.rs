//! A [`FlowRule`] as the attribute blob `ibv_create_flow` takes: `struct ibv_flow_attr`
//! immediately followed by its specs.
//!
//! The structs below mirror rdma-core's `libibverbs/verbs.h` (checked against Debian's
//! libibverbs-dev 44.0 header; sizes and offsets asserted at compile time). The encoder writes
//! each field at its `offset_of!` in the struct, so the bytes are what a C program filling the
//! real structs would hand over: header fields (`type`, `size`, `priority`, `flags`) in host
//! order, every match value and mask in network order, padding zero.
//!
//! Which specs a rule becomes:
//! - Always an `ibv_flow_spec_eth` first, as VPP, DPDK and perftest do: it carries the MACs, the
//!   VID (mask 0x0fff, so priority and CFI stay wildcards) and the EtherType, and the kernel
//!   reads the first spec to decide whether a stealing rule is multicast-only (such rules go to a
//!   late table of their own; see `matcher`). The promiscuous rule is that spec with zero masks,
//!   VPP's "promisc" rule.
//! - `ipv4` becomes `ibv_flow_spec_ipv4` (0x30), not `_ipv4_ext` (0x32): every provider with flow
//!   steering takes the plain spec (mlx4 knows no IPV4_EXT, and the verbs fallback backend should
//!   compile the same bytes), and the rule layer needs none of ext's tos/ttl/flags. The price is
//!   the protocol field: TCP and UDP still work, because the kernel sets `ip_protocol` from the
//!   TCP/UDP spec, but `ipv4 proto 47` cannot be expressed and is refused.
//! - `ipv6` becomes `ibv_flow_spec_ipv6` (0x31), whose `next_hdr` can carry `proto N`.
//! - `tcp`/`udp` become `ibv_flow_spec_tcp_udp` as type 0x40/0x41, ports or not.
//! - A rule with ports but no `ipv4`/`ipv6` goes out without an IP spec: the kernel then matches
//!   `ip_protocol` and the ports for both versions.

use std::mem::{offset_of, size_of};

use super::rule::{Action, FlowRule, IpMatch, RuleError};
use super::wire::{IPPROTO_TCP, IPPROTO_UDP};

pub const IBV_FLOW_ATTR_NORMAL: u32 = 0x0;
pub const IBV_FLOW_ATTR_FLAGS_DONT_TRAP: u32 = 1 << 1;
pub const IBV_FLOW_SPEC_ETH: u32 = 0x20;
pub const IBV_FLOW_SPEC_IPV4: u32 = 0x30;
pub const IBV_FLOW_SPEC_IPV6: u32 = 0x31;
pub const IBV_FLOW_SPEC_TCP: u32 = 0x40;
pub const IBV_FLOW_SPEC_UDP: u32 = 0x41;

/// The highest user priority current kernels take (`MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`);
/// above it `ibv_create_flow` fails with ENOMEM.
pub const MAX_PRIORITY: u16 = 15;

/// Each mlx5 port is its own verbs device, so the raw-packet QP is always on port 1.
pub const PORT: u8 = 1;

/// rdma-core verbs.h `struct ibv_flow_attr`; the specs follow it in memory.
#[repr(C)]
pub struct IbvFlowAttr {
    pub comp_mask: u32,
    /// `enum ibv_flow_attr_type`: a C enum, 4 bytes.
    pub type_: u32,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

/// rdma-core verbs.h `struct ibv_flow_eth_filter`; `ether_type` and `vlan_tag` are BE16.
#[repr(C)]
pub struct IbvFlowEthFilter {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ether_type: u16,
    /// 802.1Q TCI layout: priority 3 bits, CFI 1, VID 12.
    pub vlan_tag: u16,
}

/// rdma-core verbs.h `struct ibv_flow_spec_eth`.
#[repr(C)]
pub struct IbvFlowSpecEth {
    pub type_: u32,
    pub size: u16,
    pub val: IbvFlowEthFilter,
    pub mask: IbvFlowEthFilter,
}

/// rdma-core verbs.h `struct ibv_flow_ipv4_filter`; addresses BE32.
#[repr(C)]
pub struct IbvFlowIpv4Filter {
    pub src_ip: u32,
    pub dst_ip: u32,
}

/// rdma-core verbs.h `struct ibv_flow_spec_ipv4`.
#[repr(C)]
pub struct IbvFlowSpecIpv4 {
    pub type_: u32,
    pub size: u16,
    pub val: IbvFlowIpv4Filter,
    pub mask: IbvFlowIpv4Filter,
}

/// rdma-core verbs.h `struct ibv_flow_ipv6_filter`; `flow_label` BE32.
#[repr(C)]
pub struct IbvFlowIpv6Filter {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub flow_label: u32,
    pub next_hdr: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
}

/// rdma-core verbs.h `struct ibv_flow_spec_ipv6`.
#[repr(C)]
pub struct IbvFlowSpecIpv6 {
    pub type_: u32,
    pub size: u16,
    pub val: IbvFlowIpv6Filter,
    pub mask: IbvFlowIpv6Filter,
}

/// rdma-core verbs.h `struct ibv_flow_tcp_udp_filter`; ports BE16, destination first.
#[repr(C)]
pub struct IbvFlowTcpUdpFilter {
    pub dst_port: u16,
    pub src_port: u16,
}

/// rdma-core verbs.h `struct ibv_flow_spec_tcp_udp` (type 0x40 TCP, 0x41 UDP).
#[repr(C)]
pub struct IbvFlowSpecTcpUdp {
    pub type_: u32,
    pub size: u16,
    pub val: IbvFlowTcpUdpFilter,
    pub mask: IbvFlowTcpUdpFilter,
}

// Layouts as the C compiler lays out verbs.h on Linux (x86-64 and aarch64 alike).
const _: () = {
    assert!(size_of::<IbvFlowAttr>() == 20);
    assert!(offset_of!(IbvFlowAttr, type_) == 4);
    assert!(offset_of!(IbvFlowAttr, size) == 8);
    assert!(offset_of!(IbvFlowAttr, priority) == 10);
    assert!(offset_of!(IbvFlowAttr, num_of_specs) == 12);
    assert!(offset_of!(IbvFlowAttr, port) == 13);
    assert!(offset_of!(IbvFlowAttr, flags) == 16);
    assert!(size_of::<IbvFlowEthFilter>() == 16);
    assert!(offset_of!(IbvFlowEthFilter, src_mac) == 6);
    assert!(offset_of!(IbvFlowEthFilter, ether_type) == 12);
    assert!(offset_of!(IbvFlowEthFilter, vlan_tag) == 14);
    assert!(size_of::<IbvFlowSpecEth>() == 40);
    assert!(offset_of!(IbvFlowSpecEth, size) == 4);
    assert!(offset_of!(IbvFlowSpecEth, val) == 6);
    assert!(offset_of!(IbvFlowSpecEth, mask) == 22);
    assert!(size_of::<IbvFlowIpv4Filter>() == 8);
    assert!(size_of::<IbvFlowSpecIpv4>() == 24);
    assert!(offset_of!(IbvFlowSpecIpv4, val) == 8);
    assert!(offset_of!(IbvFlowSpecIpv4, mask) == 16);
    assert!(size_of::<IbvFlowIpv6Filter>() == 40);
    assert!(offset_of!(IbvFlowIpv6Filter, dst_ip) == 16);
    assert!(offset_of!(IbvFlowIpv6Filter, flow_label) == 32);
    assert!(offset_of!(IbvFlowIpv6Filter, next_hdr) == 36);
    assert!(offset_of!(IbvFlowIpv6Filter, traffic_class) == 37);
    assert!(offset_of!(IbvFlowIpv6Filter, hop_limit) == 38);
    assert!(size_of::<IbvFlowSpecIpv6>() == 88);
    assert!(offset_of!(IbvFlowSpecIpv6, val) == 8);
    assert!(offset_of!(IbvFlowSpecIpv6, mask) == 48);
    assert!(size_of::<IbvFlowTcpUdpFilter>() == 4);
    assert!(offset_of!(IbvFlowTcpUdpFilter, src_port) == 2);
    assert!(size_of::<IbvFlowSpecTcpUdp>() == 16);
    assert!(offset_of!(IbvFlowSpecTcpUdp, val) == 6);
    assert!(offset_of!(IbvFlowSpecTcpUdp, mask) == 10);
};

/// The longest blob a rule compiles to: attr + eth + ipv6 + tcp/udp.
pub const MAX_LEN: usize = size_of::<IbvFlowAttr>()
    + size_of::<IbvFlowSpecEth>()
    + size_of::<IbvFlowSpecIpv6>()
    + size_of::<IbvFlowSpecTcpUdp>();

/// A compiled rule, ready for `ibv_create_flow`. The bytes start 8-aligned, so the pointer may be
/// passed as `struct ibv_flow_attr *`.
#[repr(C, align(8))]
#[derive(Clone, PartialEq, Eq)]
pub struct VerbsFlowAttr {
    bytes: [u8; MAX_LEN],
    len: usize,
    specs: u8,
}

impl VerbsFlowAttr {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// For the FFI call, which takes a mutable pointer (the kernel only reads it).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    pub fn num_of_specs(&self) -> u8 {
        self.specs
    }
}

impl std::fmt::Debug for VerbsFlowAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerbsFlowAttr({} specs, {} bytes)", self.specs, self.len)
    }
}

/// A rule that cannot become a verbs flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerbsError {
    Invalid(RuleError),
    /// `part` is the rule text at fault, `reason` why verbs cannot express it.
    Unsupported {
        part: String,
        reason: String,
    },
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerbsError::Invalid(e) => write!(f, "invalid rule: {e}"),
            VerbsError::Unsupported { part, reason } => write!(f, "{part}: {reason}"),
        }
    }
}

impl std::error::Error for VerbsError {}

fn unsupported(part: String, reason: &str) -> VerbsError {
    VerbsError::Unsupported {
        part,
        reason: reason.into(),
    }
}

/// Places fields at their offsets in the blob: native order for verbs' own fields, and values
/// the caller already turned into network order (as C code does with htons/htonl).
struct Writer<'a> {
    buf: &'a mut [u8; MAX_LEN],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, off: usize, b: &[u8]) {
        self.buf[self.at + off..self.at + off + b.len()].copy_from_slice(b);
    }

    fn u8(&mut self, off: usize, v: u8) {
        self.bytes(off, &[v]);
    }

    fn u16(&mut self, off: usize, v: u16) {
        self.bytes(off, &v.to_ne_bytes());
    }

    fn u32(&mut self, off: usize, v: u32) {
        self.bytes(off, &v.to_ne_bytes());
    }

    /// Writes the `type` and `size` every spec starts with and moves past the spec.
    fn spec<S>(&mut self, type_: u32, body: impl FnOnce(&mut Self)) {
        // Every spec mirrors `{ enum type; uint16_t size; ... }`, so the header offsets are shared.
        self.u32(0, type_);
        self.u16(4, size_of::<S>() as u16);
        body(self);
        self.at += size_of::<S>();
    }
}

fn eth_filter(w: &mut Writer, at: usize, f: &IbvFlowEthFilter) {
    w.bytes(at + offset_of!(IbvFlowEthFilter, dst_mac), &f.dst_mac);
    w.bytes(at + offset_of!(IbvFlowEthFilter, src_mac), &f.src_mac);
    w.u16(at + offset_of!(IbvFlowEthFilter, ether_type), f.ether_type);
    w.u16(at + offset_of!(IbvFlowEthFilter, vlan_tag), f.vlan_tag);
}

fn ipv4_filter(w: &mut Writer, at: usize, f: &IbvFlowIpv4Filter) {
    w.u32(at + offset_of!(IbvFlowIpv4Filter, src_ip), f.src_ip);
    w.u32(at + offset_of!(IbvFlowIpv4Filter, dst_ip), f.dst_ip);
}

fn ipv6_filter(w: &mut Writer, at: usize, f: &IbvFlowIpv6Filter) {
    w.bytes(at + offset_of!(IbvFlowIpv6Filter, src_ip), &f.src_ip);
    w.bytes(at + offset_of!(IbvFlowIpv6Filter, dst_ip), &f.dst_ip);
    w.u32(at + offset_of!(IbvFlowIpv6Filter, flow_label), f.flow_label);
    w.u8(at + offset_of!(IbvFlowIpv6Filter, next_hdr), f.next_hdr);
    w.u8(at + offset_of!(IbvFlowIpv6Filter, traffic_class), f.traffic_class);
    w.u8(at + offset_of!(IbvFlowIpv6Filter, hop_limit), f.hop_limit);
}

fn tcp_udp_filter(w: &mut Writer, at: usize, f: &IbvFlowTcpUdpFilter) {
    w.u16(at + offset_of!(IbvFlowTcpUdpFilter, dst_port), f.dst_port);
    w.u16(at + offset_of!(IbvFlowTcpUdpFilter, src_port), f.src_port);
}

/// An optional value and its mask, both in network order (zero when absent).
fn be16(v: Option<u16>, mask: u16) -> (u16, u16) {
    v.map_or((0, 0), |v| (v.to_be(), mask.to_be()))
}

fn mac(m: Option<super::rule::MacMatch>) -> ([u8; 6], [u8; 6]) {
    m.map_or(([0; 6], [0; 6]), |m| (m.addr(), m.mask()))
}

/// Compiles `rule` for `ibv_create_flow` on [`PORT`].
pub fn compile(rule: &FlowRule) -> Result<VerbsFlowAttr, VerbsError> {
    rule.validate().map_err(VerbsError::Invalid)?;
    if rule.priority > MAX_PRIORITY {
        return Err(unsupported(
            format!("priority {}", rule.priority),
            "the kernel takes user priorities 0 to 15 (ENOMEM above)",
        ));
    }
    let l4 = match (rule.ip_proto, &rule.ip) {
        (None, _) => None,
        (Some(p @ (IPPROTO_TCP | IPPROTO_UDP)), _) => Some(p),
        (Some(_), Some(IpMatch::V6 { .. })) => None,
        (Some(p), Some(IpMatch::V4 { .. })) => {
            return Err(unsupported(
                format!("proto {p}"),
                "the verbs IPv4 spec cannot match protocols other than tcp/udp",
            ));
        }
        (Some(p), None) => {
            return Err(unsupported(
                format!("proto {p}"),
                "verbs matches protocols other than tcp/udp only in the IPv6 spec; add ipv6",
            ));
        }
    };

    let mut out = VerbsFlowAttr {
        bytes: [0; MAX_LEN],
        len: 0,
        specs: 0,
    };
    let mut w = Writer {
        buf: &mut out.bytes,
        at: size_of::<IbvFlowAttr>(),
    };
    let mut specs = 1u8;

    let (dst, dst_mask) = mac(rule.dst_mac);
    let (src, src_mask) = mac(rule.src_mac);
    let (ether_type, ether_type_mask) = be16(rule.ethertype, 0xffff);
    let (vlan_tag, vlan_tag_mask) = be16(rule.vlan, 0x0fff);
    w.spec::<IbvFlowSpecEth>(IBV_FLOW_SPEC_ETH, |w| {
        let val = IbvFlowEthFilter {
            dst_mac: dst,
            src_mac: src,
            ether_type,
            vlan_tag,
        };
        let mask = IbvFlowEthFilter {
            dst_mac: dst_mask,
            src_mac: src_mask,
            ether_type: ether_type_mask,
            vlan_tag: vlan_tag_mask,
        };
        eth_filter(w, offset_of!(IbvFlowSpecEth, val), &val);
        eth_filter(w, offset_of!(IbvFlowSpecEth, mask), &mask);
    });

    match rule.ip {
        None => {}
        Some(IpMatch::V4 { src, dst }) => {
            specs += 1;
            // The octets are already in network order: read them as a native u32 to keep it so.
            let addr = |p: Option<super::rule::Ipv4Prefix>| {
                p.map_or((0, 0), |p| {
                    (u32::from_ne_bytes(p.octets()), u32::from_ne_bytes(p.mask()))
                })
            };
            let ((s, sm), (d, dm)) = (addr(src), addr(dst));
            w.spec::<IbvFlowSpecIpv4>(IBV_FLOW_SPEC_IPV4, |w| {
                let val = IbvFlowIpv4Filter { src_ip: s, dst_ip: d };
                let mask = IbvFlowIpv4Filter { src_ip: sm, dst_ip: dm };
                ipv4_filter(w, offset_of!(IbvFlowSpecIpv4, val), &val);
                ipv4_filter(w, offset_of!(IbvFlowSpecIpv4, mask), &mask);
            });
        }
        Some(IpMatch::V6 { src, dst }) => {
            specs += 1;
            let addr = |p: Option<super::rule::Ipv6Prefix>| p.map_or(([0; 16], [0; 16]), |p| (p.octets(), p.mask()));
            let ((s, sm), (d, dm)) = (addr(src), addr(dst));
            // Protocols other than TCP/UDP travel in next_hdr; TCP/UDP go in their own spec.
            let (next, next_mask) = match rule.ip_proto {
                Some(p) if l4.is_none() => (p, 0xff),
                _ => (0, 0),
            };
            w.spec::<IbvFlowSpecIpv6>(IBV_FLOW_SPEC_IPV6, |w| {
                let filter = |src_ip, dst_ip, next_hdr| IbvFlowIpv6Filter {
                    src_ip,
                    dst_ip,
                    flow_label: 0,
                    next_hdr,
                    traffic_class: 0,
                    hop_limit: 0,
                };
                ipv6_filter(w, offset_of!(IbvFlowSpecIpv6, val), &filter(s, d, next));
                ipv6_filter(w, offset_of!(IbvFlowSpecIpv6, mask), &filter(sm, dm, next_mask));
            });
        }
    }

    if let Some(p) = l4 {
        specs += 1;
        let type_ = if p == IPPROTO_TCP {
            IBV_FLOW_SPEC_TCP
        } else {
            IBV_FLOW_SPEC_UDP
        };
        let (sp, spm) = be16(rule.src_port, 0xffff);
        let (dp, dpm) = be16(rule.dst_port, 0xffff);
        w.spec::<IbvFlowSpecTcpUdp>(type_, |w| {
            let val = IbvFlowTcpUdpFilter {
                dst_port: dp,
                src_port: sp,
            };
            let mask = IbvFlowTcpUdpFilter {
                dst_port: dpm,
                src_port: spm,
            };
            tcp_udp_filter(w, offset_of!(IbvFlowSpecTcpUdp, val), &val);
            tcp_udp_filter(w, offset_of!(IbvFlowSpecTcpUdp, mask), &mask);
        });
    }

    let len = w.at;
    w.at = 0;
    w.u32(offset_of!(IbvFlowAttr, comp_mask), 0);
    w.u32(offset_of!(IbvFlowAttr, type_), IBV_FLOW_ATTR_NORMAL);
    w.u16(offset_of!(IbvFlowAttr, size), len as u16);
    w.u16(offset_of!(IbvFlowAttr, priority), rule.priority);
    w.u8(offset_of!(IbvFlowAttr, num_of_specs), specs);
    w.u8(offset_of!(IbvFlowAttr, port), PORT);
    let flags = match rule.action {
        Action::Steal => 0,
        Action::Copy => IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
    };
    w.u32(offset_of!(IbvFlowAttr, flags), flags);
    out.len = len;
    out.specs = specs;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_mac_is_one_eth_spec() {
        let a = compile(&FlowRule::own_mac([2, 0, 0, 0, 0, 1])).unwrap();
        let b = a.as_bytes();
        assert_eq!((b.len(), a.num_of_specs()), (60, 1));
        assert_eq!(u16::from_ne_bytes([b[8], b[9]]), 60);
        assert_eq!(&b[20 + 6..20 + 12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&b[20 + 22..20 + 28], &[0xff; 6]);
        assert_eq!(b.as_ptr() as usize % 8, 0);
    }

    #[test]
    fn ipv4_proto_other_than_tcp_udp_is_refused() {
        let r: FlowRule = "ipv4 proto 47".parse().unwrap();
        assert_eq!(
            compile(&r).unwrap_err().to_string(),
            "proto 47: the verbs IPv4 spec cannot match protocols other than tcp/udp"
        );
        let r: FlowRule = "udp priority 16".parse().unwrap();
        assert!(compile(&r).unwrap_err().to_string().starts_with("priority 16: "));
    }
}
