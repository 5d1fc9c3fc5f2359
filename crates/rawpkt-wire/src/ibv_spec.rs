//! A [`FlowRule`] as the attribute blob `ibv_create_flow` takes: `struct ibv_flow_attr`
//! immediately followed by its specs.
//!
//! The layouts are rdma-core's own: the `rdma_abi` bindings of `libibverbs/verbs.h` (rdma-core
//! 44.0), so the encoder and the parser cannot drift from the header libibverbs is built from.
//! The encoder writes each field at its `offset_of!` in those structs, so the bytes are what a C
//! program filling the real structs would hand over: header fields (`type`, `size`, `priority`,
//! `flags`) in host order, every match value and mask in network order, padding zero. Fields go
//! in one at a time rather than as whole structs because a struct's padding bytes are undefined.
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

use rdma_abi::{
    ibv_flow_attr, ibv_flow_eth_filter, ibv_flow_ipv4_ext_filter, ibv_flow_ipv4_filter, ibv_flow_ipv6_filter,
    ibv_flow_spec__bindgen_ty_1__bindgen_ty_1, ibv_flow_spec_eth, ibv_flow_spec_ipv4, ibv_flow_spec_ipv4_ext,
    ibv_flow_spec_ipv6, ibv_flow_spec_tcp_udp, ibv_flow_tcp_udp_filter, IBV_FLOW_ATTR_ALL_DEFAULT,
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP, IBV_FLOW_ATTR_FLAGS_EGRESS, IBV_FLOW_ATTR_MC_DEFAULT, IBV_FLOW_ATTR_NORMAL,
    IBV_FLOW_ATTR_SNIFFER, IBV_FLOW_SPEC_ACTION_COUNT, IBV_FLOW_SPEC_ACTION_TAG, IBV_FLOW_SPEC_ESP, IBV_FLOW_SPEC_ETH,
    IBV_FLOW_SPEC_GRE, IBV_FLOW_SPEC_INNER, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV4_EXT, IBV_FLOW_SPEC_IPV6,
    IBV_FLOW_SPEC_MPLS, IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP, IBV_FLOW_SPEC_VXLAN_TUNNEL,
};

use crate::rule::{Action, FlowRule, IpMatch, RuleError};
use crate::wire::{IPPROTO_TCP, IPPROTO_UDP};

/// verbs.h `struct ibv_flow_spec`'s `hdr`, the `{ type; size; }` every spec starts with:
/// libibverbs reads it before it knows which spec it has, and so do [`parse`] and the encoder.
/// bindgen names the anonymous struct after its place in the union.
type SpecHdr = ibv_flow_spec__bindgen_ty_1__bindgen_ty_1;

/// The highest user priority current kernels take (`MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`);
/// above it `ibv_create_flow` fails with ENOMEM.
pub const MAX_PRIORITY: u16 = 15;

/// Each mlx5 port is its own verbs device, so the raw-packet QP is always on port 1.
pub const PORT: u8 = 1;

/// The most specs the kernel takes in one rule (`IB_FLOW_SPEC_SUPPORT_LAYERS`,
/// include/rdma/ib_verbs.h; checked by `ib_uverbs_ex_create_flow`).
pub const MAX_SPECS: u8 = 10;

// rdma-core verbs.h as the C compiler lays it out on Linux (x86-64 and aarch64 alike). rdma-abi's
// own layout asserts are rewritten with the bindings, so they would follow a regeneration that
// moved a field; these stay, and such a regeneration breaks the build here instead of silently
// changing the blob. Each spec must also start with `SpecHdr`, as the encoder and the parser
// read and write every spec's type and size through it.
const _: () = {
    macro_rules! spec {
        ($s:ty, $size:expr, $val:expr, $mask:expr) => {
            assert!(size_of::<$s>() == $size);
            assert!(offset_of!($s, type_) == offset_of!(SpecHdr, type_));
            assert!(offset_of!($s, size) == offset_of!(SpecHdr, size));
            assert!(offset_of!($s, val) == $val);
            assert!(offset_of!($s, mask) == $mask);
        };
    }
    assert!(size_of::<ibv_flow_attr>() == 20);
    assert!(offset_of!(ibv_flow_attr, type_) == 4);
    assert!(offset_of!(ibv_flow_attr, size) == 8);
    assert!(offset_of!(ibv_flow_attr, priority) == 10);
    assert!(offset_of!(ibv_flow_attr, num_of_specs) == 12);
    assert!(offset_of!(ibv_flow_attr, port) == 13);
    assert!(offset_of!(ibv_flow_attr, flags) == 16);
    assert!(size_of::<SpecHdr>() == 8);
    assert!(offset_of!(SpecHdr, type_) == 0);
    assert!(offset_of!(SpecHdr, size) == 4);
    assert!(size_of::<ibv_flow_eth_filter>() == 16);
    assert!(offset_of!(ibv_flow_eth_filter, src_mac) == 6);
    assert!(offset_of!(ibv_flow_eth_filter, ether_type) == 12);
    assert!(offset_of!(ibv_flow_eth_filter, vlan_tag) == 14);
    spec!(ibv_flow_spec_eth, 40, 6, 22);
    assert!(size_of::<ibv_flow_ipv4_filter>() == 8);
    assert!(offset_of!(ibv_flow_ipv4_filter, dst_ip) == 4);
    spec!(ibv_flow_spec_ipv4, 24, 8, 16);
    assert!(size_of::<ibv_flow_ipv4_ext_filter>() == 12);
    assert!(offset_of!(ibv_flow_ipv4_ext_filter, dst_ip) == 4);
    assert!(offset_of!(ibv_flow_ipv4_ext_filter, proto) == 8);
    assert!(offset_of!(ibv_flow_ipv4_ext_filter, tos) == 9);
    assert!(offset_of!(ibv_flow_ipv4_ext_filter, ttl) == 10);
    assert!(offset_of!(ibv_flow_ipv4_ext_filter, flags) == 11);
    spec!(ibv_flow_spec_ipv4_ext, 32, 8, 20);
    assert!(size_of::<ibv_flow_ipv6_filter>() == 40);
    assert!(offset_of!(ibv_flow_ipv6_filter, dst_ip) == 16);
    assert!(offset_of!(ibv_flow_ipv6_filter, flow_label) == 32);
    assert!(offset_of!(ibv_flow_ipv6_filter, next_hdr) == 36);
    assert!(offset_of!(ibv_flow_ipv6_filter, traffic_class) == 37);
    assert!(offset_of!(ibv_flow_ipv6_filter, hop_limit) == 38);
    spec!(ibv_flow_spec_ipv6, 88, 8, 48);
    assert!(size_of::<ibv_flow_tcp_udp_filter>() == 4);
    assert!(offset_of!(ibv_flow_tcp_udp_filter, src_port) == 2);
    spec!(ibv_flow_spec_tcp_udp, 16, 6, 10);
};

/// The longest blob a rule compiles to: attr + eth + ipv6 + tcp/udp.
pub const MAX_LEN: usize = size_of::<ibv_flow_attr>()
    + size_of::<ibv_flow_spec_eth>()
    + size_of::<ibv_flow_spec_ipv6>()
    + size_of::<ibv_flow_spec_tcp_udp>();

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

    /// For FFI calls that take a mutable pointer (the kernel only reads it). The bytes start
    /// 8-aligned and hold an `ibv_flow_attr` followed by the `num_of_specs` specs its `size`
    /// counts: [`compile`] is the only way to build one.
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

    /// Writes the [`SpecHdr`] every spec starts with and moves past the spec.
    fn spec<S>(&mut self, type_: u32, body: impl FnOnce(&mut Self)) {
        self.u32(offset_of!(SpecHdr, type_), type_);
        self.u16(offset_of!(SpecHdr, size), size_of::<S>() as u16);
        body(self);
        self.at += size_of::<S>();
    }
}

fn eth_filter(w: &mut Writer, at: usize, f: &ibv_flow_eth_filter) {
    w.bytes(at + offset_of!(ibv_flow_eth_filter, dst_mac), &f.dst_mac);
    w.bytes(at + offset_of!(ibv_flow_eth_filter, src_mac), &f.src_mac);
    w.u16(at + offset_of!(ibv_flow_eth_filter, ether_type), f.ether_type);
    w.u16(at + offset_of!(ibv_flow_eth_filter, vlan_tag), f.vlan_tag);
}

fn ipv4_filter(w: &mut Writer, at: usize, f: &ibv_flow_ipv4_filter) {
    w.u32(at + offset_of!(ibv_flow_ipv4_filter, src_ip), f.src_ip);
    w.u32(at + offset_of!(ibv_flow_ipv4_filter, dst_ip), f.dst_ip);
}

fn ipv6_filter(w: &mut Writer, at: usize, f: &ibv_flow_ipv6_filter) {
    w.bytes(at + offset_of!(ibv_flow_ipv6_filter, src_ip), &f.src_ip);
    w.bytes(at + offset_of!(ibv_flow_ipv6_filter, dst_ip), &f.dst_ip);
    w.u32(at + offset_of!(ibv_flow_ipv6_filter, flow_label), f.flow_label);
    w.u8(at + offset_of!(ibv_flow_ipv6_filter, next_hdr), f.next_hdr);
    w.u8(at + offset_of!(ibv_flow_ipv6_filter, traffic_class), f.traffic_class);
    w.u8(at + offset_of!(ibv_flow_ipv6_filter, hop_limit), f.hop_limit);
}

fn tcp_udp_filter(w: &mut Writer, at: usize, f: &ibv_flow_tcp_udp_filter) {
    w.u16(at + offset_of!(ibv_flow_tcp_udp_filter, dst_port), f.dst_port);
    w.u16(at + offset_of!(ibv_flow_tcp_udp_filter, src_port), f.src_port);
}

/// An optional value and its mask, both in network order (zero when absent).
fn be16(v: Option<u16>, mask: u16) -> (u16, u16) {
    v.map_or((0, 0), |v| (v.to_be(), mask.to_be()))
}

fn mac(m: Option<crate::rule::MacMatch>) -> ([u8; 6], [u8; 6]) {
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
        at: size_of::<ibv_flow_attr>(),
    };
    let mut specs = 1u8;

    let (dst, dst_mask) = mac(rule.dst_mac);
    let (src, src_mask) = mac(rule.src_mac);
    let (ether_type, ether_type_mask) = be16(rule.ethertype, 0xffff);
    let (vlan_tag, vlan_tag_mask) = be16(rule.vlan, 0x0fff);
    w.spec::<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH, |w| {
        let val = ibv_flow_eth_filter {
            dst_mac: dst,
            src_mac: src,
            ether_type,
            vlan_tag,
        };
        let mask = ibv_flow_eth_filter {
            dst_mac: dst_mask,
            src_mac: src_mask,
            ether_type: ether_type_mask,
            vlan_tag: vlan_tag_mask,
        };
        eth_filter(w, offset_of!(ibv_flow_spec_eth, val), &val);
        eth_filter(w, offset_of!(ibv_flow_spec_eth, mask), &mask);
    });

    match rule.ip {
        None => {}
        Some(IpMatch::V4 { src, dst }) => {
            specs += 1;
            // The octets are already in network order: read them as a native u32 to keep it so.
            let addr = |p: Option<crate::rule::Ipv4Prefix>| {
                p.map_or((0, 0), |p| {
                    (u32::from_ne_bytes(p.octets()), u32::from_ne_bytes(p.mask()))
                })
            };
            let ((s, sm), (d, dm)) = (addr(src), addr(dst));
            w.spec::<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4, |w| {
                let val = ibv_flow_ipv4_filter { src_ip: s, dst_ip: d };
                let mask = ibv_flow_ipv4_filter { src_ip: sm, dst_ip: dm };
                ipv4_filter(w, offset_of!(ibv_flow_spec_ipv4, val), &val);
                ipv4_filter(w, offset_of!(ibv_flow_spec_ipv4, mask), &mask);
            });
        }
        Some(IpMatch::V6 { src, dst }) => {
            specs += 1;
            let addr = |p: Option<crate::rule::Ipv6Prefix>| p.map_or(([0; 16], [0; 16]), |p| (p.octets(), p.mask()));
            let ((s, sm), (d, dm)) = (addr(src), addr(dst));
            // Protocols other than TCP/UDP travel in next_hdr; TCP/UDP go in their own spec.
            let (next, next_mask) = match rule.ip_proto {
                Some(p) if l4.is_none() => (p, 0xff),
                _ => (0, 0),
            };
            w.spec::<ibv_flow_spec_ipv6>(IBV_FLOW_SPEC_IPV6, |w| {
                let filter = |src_ip, dst_ip, next_hdr| ibv_flow_ipv6_filter {
                    src_ip,
                    dst_ip,
                    next_hdr,
                    ..Default::default()
                };
                ipv6_filter(w, offset_of!(ibv_flow_spec_ipv6, val), &filter(s, d, next));
                ipv6_filter(w, offset_of!(ibv_flow_spec_ipv6, mask), &filter(sm, dm, next_mask));
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
        w.spec::<ibv_flow_spec_tcp_udp>(type_, |w| {
            let val = ibv_flow_tcp_udp_filter {
                dst_port: dp,
                src_port: sp,
            };
            let mask = ibv_flow_tcp_udp_filter {
                dst_port: dpm,
                src_port: spm,
            };
            tcp_udp_filter(w, offset_of!(ibv_flow_spec_tcp_udp, val), &val);
            tcp_udp_filter(w, offset_of!(ibv_flow_spec_tcp_udp, mask), &mask);
        });
    }

    let len = w.at;
    w.at = 0;
    w.u32(offset_of!(ibv_flow_attr, comp_mask), 0);
    w.u32(offset_of!(ibv_flow_attr, type_), IBV_FLOW_ATTR_NORMAL);
    w.u16(offset_of!(ibv_flow_attr, size), len as u16);
    w.u16(offset_of!(ibv_flow_attr, priority), rule.priority);
    w.u8(offset_of!(ibv_flow_attr, num_of_specs), specs);
    w.u8(offset_of!(ibv_flow_attr, port), PORT);
    let flags = match rule.action {
        Action::Steal => 0,
        Action::Copy => IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
    };
    w.u32(offset_of!(ibv_flow_attr, flags), flags);
    out.len = len;
    out.specs = specs;
    Ok(out)
}

/// A flow attribute blob read back: what `ibv_create_flow` was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFlow {
    /// The match, the action (DONT_TRAP = [`Action::Copy`]) and the priority.
    pub rule: FlowRule,
    /// `ibv_flow_attr.port`.
    pub port: u8,
    /// The spec types in the order given (for refusing one, as older firmware would).
    pub spec_types: Vec<u32>,
}

/// Why a blob is refused, with the errno the kernel (or libibverbs) returns for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowParseError {
    pub errno: i32,
    pub reason: String,
}

impl std::fmt::Display for FlowParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (errno {})", self.reason, self.errno)
    }
}

impl std::error::Error for FlowParseError {}

fn refuse(errno: i32, reason: impl Into<String>) -> FlowParseError {
    FlowParseError {
        errno,
        reason: reason.into(),
    }
}

fn einval(reason: impl Into<String>) -> FlowParseError {
    refuse(libc::EINVAL, reason)
}

/// What the model cannot express of a spec the kernel would take (a documented limitation,
/// reported as the kernel reports unsupported match fields: EOPNOTSUPP).
fn model_limit(reason: impl Into<String>) -> FlowParseError {
    refuse(libc::EOPNOTSUPP, reason)
}

/// Reads native-order header fields and network-order match fields from a spec.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&self, off: usize) -> u8 {
        self.0[off]
    }
    fn ne16(&self, off: usize) -> u16 {
        u16::from_ne_bytes([self.0[off], self.0[off + 1]])
    }
    fn ne32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }
    /// A BE16 match field as a host value.
    fn be16(&self, off: usize) -> u16 {
        u16::from_be_bytes([self.0[off], self.0[off + 1]])
    }
    fn arr<const N: usize>(&self, off: usize) -> [u8; N] {
        self.0[off..off + N].try_into().expect("N bytes")
    }
}

/// A prefix length from a mask that must be contiguous ones; `None` otherwise.
fn prefix_len(mask: &[u8]) -> Option<u8> {
    let bits: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let mut want = vec![0u8; mask.len()];
    for (i, b) in want.iter_mut().enumerate() {
        let left = bits.saturating_sub(8 * i as u32).min(8);
        *b = (0xff00u16 >> left) as u8;
    }
    (want == mask).then_some(bits as u8)
}

/// The kernel refuses a match value with bits outside its mask (mlx5_core `fs_core.c`
/// `check_valid_spec`: "invalid match value, not masked") with EINVAL.
fn check_masked(what: &str, val: &[u8], mask: &[u8]) -> Result<(), FlowParseError> {
    if val.iter().zip(mask).any(|(v, m)| v & !m != 0) {
        return Err(einval(format!("{what}: value has bits outside its mask")));
    }
    Ok(())
}

/// An exact 16-bit field: mask 0 (absent) or all ones.
fn exact16(what: &str, val: u16, mask: u16) -> Result<Option<u16>, FlowParseError> {
    check_masked(what, &val.to_be_bytes(), &mask.to_be_bytes())?;
    match mask {
        0 => Ok(None),
        0xffff => Ok(Some(val)),
        m => Err(model_limit(format!("{what}: partial mask {m:#06x}"))),
    }
}

fn v4_prefix(what: &str, val: [u8; 4], mask: [u8; 4]) -> Result<Option<crate::rule::Ipv4Prefix>, FlowParseError> {
    check_masked(what, &val, &mask)?;
    if mask == [0; 4] {
        return Ok(None);
    }
    let len = prefix_len(&mask).ok_or_else(|| model_limit(format!("{what}: mask is not a prefix")))?;
    crate::rule::Ipv4Prefix::new(std::net::Ipv4Addr::from(val), len)
        .map(Some)
        .map_err(|e| einval(format!("{what}: {e}")))
}

fn v6_prefix(what: &str, val: [u8; 16], mask: [u8; 16]) -> Result<Option<crate::rule::Ipv6Prefix>, FlowParseError> {
    check_masked(what, &val, &mask)?;
    if mask == [0; 16] {
        return Ok(None);
    }
    let len = prefix_len(&mask).ok_or_else(|| model_limit(format!("{what}: mask is not a prefix")))?;
    crate::rule::Ipv6Prefix::new(std::net::Ipv6Addr::from(val), len)
        .map(Some)
        .map_err(|e| einval(format!("{what}: {e}")))
}

/// The spec type names the model library's `refuse_flow` knob takes.
pub fn spec_type_name(t: u32) -> &'static str {
    match t {
        IBV_FLOW_SPEC_ETH => "eth",
        IBV_FLOW_SPEC_IPV4 => "ipv4",
        IBV_FLOW_SPEC_IPV6 => "ipv6",
        IBV_FLOW_SPEC_IPV4_EXT => "ipv4_ext",
        IBV_FLOW_SPEC_TCP => "tcp",
        IBV_FLOW_SPEC_UDP => "udp",
        _ => "other",
    }
}

/// Reads an `ibv_flow_attr` blob (the attribute and its specs, as [`compile`] writes them or a C
/// program fills the structs) back into a rule, with the checks the stack applies on the way
/// to the NIC:
/// - libibverbs (`ibv_cmd_create_flow` / `ib_spec_to_kern_spec`, libibverbs/cmd_flow.c) walks
///   `num_of_specs` specs by their own `size` fields and ignores `ibv_flow_attr.size` (VPP leaves
///   it 0), refusing an unknown spec type with EINVAL; we also refuse a spec whose `size` is
///   smaller than its struct or runs past the blob (EINVAL).
/// - The kernel (`ib_uverbs_ex_create_flow`, drivers/infiniband/core/uverbs_cmd.c): a non-zero
///   `comp_mask` or more than [`MAX_SPECS`] specs is EINVAL, and so is DONT_TRAP on the
///   ALL_DEFAULT/MC_DEFAULT types.
/// - A port other than 1 is EINVAL (`rdma_is_port_valid` in `ib_uverbs_ex_create_flow`; older
///   kernels check `flow_attr->port > num_ports` in mlx5_ib).
/// - mlx5_ib (`mlx5_ib_create_flow`, drivers/infiniband/hw/mlx5/fs.c): flags other than
///   DONT_TRAP|EGRESS are EINVAL; a user priority above
///   [`MAX_PRIORITY`] is ENOMEM (no such flow table); values with bits outside their masks are
///   EINVAL (mlx5_core `check_valid_spec`).
///
/// Things the kernel takes but the model's [`FlowRule`] cannot express are EOPNOTSUPP: the
/// leftovers and sniffer types, EGRESS, inner (tunnel) specs, partial masks on EtherType, VLAN
/// (beyond the VID) and ports, non-prefix address masks, and the IPv6 flow label, traffic
/// class and hop limit and the IPv4 TOS/TTL/flags.
pub fn parse(bytes: &[u8]) -> Result<ParsedFlow, FlowParseError> {
    let attr_len = size_of::<ibv_flow_attr>();
    if bytes.len() < attr_len {
        return Err(einval(format!(
            "{} bytes: shorter than struct ibv_flow_attr",
            bytes.len()
        )));
    }
    let a = Reader(&bytes[..attr_len]);
    let comp_mask = a.ne32(offset_of!(ibv_flow_attr, comp_mask));
    let type_ = a.ne32(offset_of!(ibv_flow_attr, type_));
    let priority = a.ne16(offset_of!(ibv_flow_attr, priority));
    let num = a.u8(offset_of!(ibv_flow_attr, num_of_specs));
    let port = a.u8(offset_of!(ibv_flow_attr, port));
    let flags = a.ne32(offset_of!(ibv_flow_attr, flags));
    if comp_mask != 0 {
        return Err(einval(format!("comp_mask {comp_mask:#x}")));
    }
    if flags & !(IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS) != 0 {
        return Err(einval(format!("flags {flags:#x}")));
    }
    let dont_trap = flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP != 0;
    if dont_trap && matches!(type_, IBV_FLOW_ATTR_ALL_DEFAULT | IBV_FLOW_ATTR_MC_DEFAULT) {
        return Err(einval("DONT_TRAP on a default (leftovers) rule"));
    }
    if num > MAX_SPECS {
        return Err(einval(format!("{num} specs, the kernel takes at most {MAX_SPECS}")));
    }
    if port != PORT {
        return Err(einval(format!("port {port}: the device has port {PORT} only")));
    }
    match type_ {
        IBV_FLOW_ATTR_NORMAL => {}
        IBV_FLOW_ATTR_ALL_DEFAULT | IBV_FLOW_ATTR_MC_DEFAULT | IBV_FLOW_ATTR_SNIFFER => {
            return Err(model_limit(format!("flow type {type_} (leftovers/sniffer)")));
        }
        t => return Err(einval(format!("flow type {t}"))),
    }
    if priority > MAX_PRIORITY {
        return Err(refuse(
            libc::ENOMEM,
            format!("priority {priority}: the kernel has tables for 0 to {MAX_PRIORITY}"),
        ));
    }
    if flags & IBV_FLOW_ATTR_FLAGS_EGRESS != 0 {
        return Err(model_limit("egress flows"));
    }

    let mut rule = FlowRule {
        priority,
        action: if dont_trap { Action::Copy } else { Action::Steal },
        ..FlowRule::ANY
    };
    let mut spec_types = Vec::with_capacity(usize::from(num));
    let mut at = attr_len;
    for i in 0..num {
        if bytes.len() < at + size_of::<SpecHdr>() {
            return Err(einval(format!("spec {i} runs past the blob")));
        }
        let h = Reader(&bytes[at..]);
        let t = h.ne32(offset_of!(SpecHdr, type_));
        let size = usize::from(h.ne16(offset_of!(SpecHdr, size)));
        let want = match t & !IBV_FLOW_SPEC_INNER {
            IBV_FLOW_SPEC_ETH => size_of::<ibv_flow_spec_eth>(),
            IBV_FLOW_SPEC_IPV4 => size_of::<ibv_flow_spec_ipv4>(),
            IBV_FLOW_SPEC_IPV4_EXT => size_of::<ibv_flow_spec_ipv4_ext>(),
            IBV_FLOW_SPEC_IPV6 => size_of::<ibv_flow_spec_ipv6>(),
            IBV_FLOW_SPEC_TCP | IBV_FLOW_SPEC_UDP => size_of::<ibv_flow_spec_tcp_udp>(),
            // ESP, VXLAN, GRE, MPLS and the action specs are known to libibverbs and need
            // capabilities or objects the model does not have.
            IBV_FLOW_SPEC_ESP
            | IBV_FLOW_SPEC_VXLAN_TUNNEL
            | IBV_FLOW_SPEC_GRE
            | IBV_FLOW_SPEC_MPLS
            | IBV_FLOW_SPEC_ACTION_TAG..=IBV_FLOW_SPEC_ACTION_COUNT => {
                return Err(model_limit(format!("spec {i}: type {t:#x}")));
            }
            _ => return Err(einval(format!("spec {i}: unknown type {t:#x}"))),
        };
        if size < want || at + size > bytes.len() {
            return Err(einval(format!("spec {i}: size {size}, struct is {want}")));
        }
        if t & IBV_FLOW_SPEC_INNER != 0 {
            return Err(model_limit(format!("spec {i}: inner (tunnel) headers")));
        }
        spec_types.push(t);
        let s = Reader(&bytes[at..at + size]);
        match t {
            IBV_FLOW_SPEC_ETH => eth_spec(&s, &mut rule)?,
            IBV_FLOW_SPEC_IPV4 | IBV_FLOW_SPEC_IPV4_EXT => ipv4_spec(&s, t, &mut rule)?,
            IBV_FLOW_SPEC_IPV6 => ipv6_spec(&s, &mut rule)?,
            _ => l4_spec(&s, t, &mut rule)?,
        }
        at += size;
    }
    rule.validate().map_err(|e| einval(e.to_string()))?;
    Ok(ParsedFlow { rule, port, spec_types })
}

fn eth_spec(s: &Reader, rule: &mut FlowRule) -> Result<(), FlowParseError> {
    let (v, m) = (offset_of!(ibv_flow_spec_eth, val), offset_of!(ibv_flow_spec_eth, mask));
    let f = |base: usize, field: usize| base + field;
    let mac = |off: usize, what: &str| -> Result<Option<crate::rule::MacMatch>, FlowParseError> {
        let (val, mask): ([u8; 6], [u8; 6]) = (s.arr(f(v, off)), s.arr(f(m, off)));
        check_masked(what, &val, &mask)?;
        if mask == [0; 6] {
            return Ok(None);
        }
        crate::rule::MacMatch::masked(val, mask)
            .map(Some)
            .map_err(|e| einval(e.to_string()))
    };
    rule.dst_mac = mac(offset_of!(ibv_flow_eth_filter, dst_mac), "eth dst_mac")?;
    rule.src_mac = mac(offset_of!(ibv_flow_eth_filter, src_mac), "eth src_mac")?;
    let et = offset_of!(ibv_flow_eth_filter, ether_type);
    rule.ethertype = exact16("eth ether_type", s.be16(f(v, et)), s.be16(f(m, et)))?;
    let vt = offset_of!(ibv_flow_eth_filter, vlan_tag);
    let (tag, tag_mask) = (s.be16(f(v, vt)), s.be16(f(m, vt)));
    check_masked("eth vlan_tag", &tag.to_be_bytes(), &tag_mask.to_be_bytes())?;
    rule.vlan = match tag_mask {
        0 => None,
        0x0fff => Some(tag),
        m => {
            return Err(model_limit(format!(
                "eth vlan_tag: mask {m:#06x} (only the VID, 0x0fff)"
            )))
        }
    };
    Ok(())
}

fn set_ip(rule: &mut FlowRule, ip: IpMatch) -> Result<(), FlowParseError> {
    match (&rule.ip, &ip) {
        (Some(IpMatch::V4 { .. }), IpMatch::V6 { .. }) | (Some(IpMatch::V6 { .. }), IpMatch::V4 { .. }) => {
            Err(einval("IPv4 and IPv6 specs in one rule"))
        }
        _ => {
            rule.ip = Some(ip);
            Ok(())
        }
    }
}

fn set_proto(rule: &mut FlowRule, p: u8) -> Result<(), FlowParseError> {
    match rule.ip_proto {
        Some(q) if q != p => Err(einval(format!("protocols {q} and {p} in one rule"))),
        _ => {
            rule.ip_proto = Some(p);
            Ok(())
        }
    }
}

fn ipv4_spec(s: &Reader, t: u32, rule: &mut FlowRule) -> Result<(), FlowParseError> {
    // Both specs carry the addresses; only ext has proto/tos/ttl/flags.
    let ext = t == IBV_FLOW_SPEC_IPV4_EXT;
    let (v, m, so, dof) = if ext {
        (
            offset_of!(ibv_flow_spec_ipv4_ext, val),
            offset_of!(ibv_flow_spec_ipv4_ext, mask),
            offset_of!(ibv_flow_ipv4_ext_filter, src_ip),
            offset_of!(ibv_flow_ipv4_ext_filter, dst_ip),
        )
    } else {
        (
            offset_of!(ibv_flow_spec_ipv4, val),
            offset_of!(ibv_flow_spec_ipv4, mask),
            offset_of!(ibv_flow_ipv4_filter, src_ip),
            offset_of!(ibv_flow_ipv4_filter, dst_ip),
        )
    };
    let src = v4_prefix("ipv4 src_ip", s.arr(v + so), s.arr(m + so))?;
    let dst = v4_prefix("ipv4 dst_ip", s.arr(v + dof), s.arr(m + dof))?;
    set_ip(rule, IpMatch::V4 { src, dst })?;
    if ext {
        let po = offset_of!(ibv_flow_ipv4_ext_filter, proto);
        let (proto, proto_mask) = (s.u8(v + po), s.u8(m + po));
        check_masked("ipv4 proto", &[proto], &[proto_mask])?;
        match proto_mask {
            0 => {}
            0xff => set_proto(rule, proto)?,
            _ => return Err(model_limit("ipv4 proto: partial mask")),
        }
        let rest = [
            offset_of!(ibv_flow_ipv4_ext_filter, tos),
            offset_of!(ibv_flow_ipv4_ext_filter, ttl),
            offset_of!(ibv_flow_ipv4_ext_filter, flags),
        ];
        if rest.iter().any(|&o| s.u8(m + o) != 0) {
            return Err(model_limit("ipv4 tos/ttl/flags"));
        }
    }
    Ok(())
}

fn ipv6_spec(s: &Reader, rule: &mut FlowRule) -> Result<(), FlowParseError> {
    let (v, m) = (
        offset_of!(ibv_flow_spec_ipv6, val),
        offset_of!(ibv_flow_spec_ipv6, mask),
    );
    let (so, dof) = (
        offset_of!(ibv_flow_ipv6_filter, src_ip),
        offset_of!(ibv_flow_ipv6_filter, dst_ip),
    );
    let src = v6_prefix("ipv6 src_ip", s.arr(v + so), s.arr(m + so))?;
    let dst = v6_prefix("ipv6 dst_ip", s.arr(v + dof), s.arr(m + dof))?;
    set_ip(rule, IpMatch::V6 { src, dst })?;
    let nh = offset_of!(ibv_flow_ipv6_filter, next_hdr);
    let (next, next_mask) = (s.u8(v + nh), s.u8(m + nh));
    check_masked("ipv6 next_hdr", &[next], &[next_mask])?;
    match next_mask {
        0 => {}
        0xff => set_proto(rule, next)?,
        _ => return Err(model_limit("ipv6 next_hdr: partial mask")),
    }
    let fl = offset_of!(ibv_flow_ipv6_filter, flow_label);
    let tc = offset_of!(ibv_flow_ipv6_filter, traffic_class);
    let hl = offset_of!(ibv_flow_ipv6_filter, hop_limit);
    if s.ne32(m + fl) != 0 || s.u8(m + tc) != 0 || s.u8(m + hl) != 0 {
        return Err(model_limit("ipv6 flow_label/traffic_class/hop_limit"));
    }
    Ok(())
}

fn l4_spec(s: &Reader, t: u32, rule: &mut FlowRule) -> Result<(), FlowParseError> {
    // The kernel sets ip_protocol from the spec type (mlx5_ib `parse_flow_attr`).
    set_proto(
        rule,
        if t == IBV_FLOW_SPEC_TCP {
            IPPROTO_TCP
        } else {
            IPPROTO_UDP
        },
    )?;
    let (v, m) = (
        offset_of!(ibv_flow_spec_tcp_udp, val),
        offset_of!(ibv_flow_spec_tcp_udp, mask),
    );
    let (dp, sp) = (
        offset_of!(ibv_flow_tcp_udp_filter, dst_port),
        offset_of!(ibv_flow_tcp_udp_filter, src_port),
    );
    rule.dst_port = exact16("dst_port", s.be16(v + dp), s.be16(m + dp))?;
    rule.src_port = exact16("src_port", s.be16(v + sp), s.be16(m + sp))?;
    Ok(())
}

// The compiler against rdma-core's own header: sizes, offsets and blobs a C program printed.
#[cfg(test)]
mod vectors;

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let rule: FlowRule = text.parse().unwrap();
        let blob = compile(&rule).unwrap();
        let back = parse(blob.as_bytes()).unwrap();
        assert_eq!(back.rule, rule, "{text}");
        assert_eq!(back.spec_types.len(), usize::from(blob.num_of_specs()));
    }

    #[test]
    fn parse_inverts_compile() {
        for text in [
            "dst-mac 02:00:00:00:00:01",
            "dst-mac 01:00:00:00:00:00/01:00:00:00:00:00 copy",
            "vlan 7 ethertype 0x88cc priority 3",
            "ipv4 src 10.0.0.0/8 dst 192.168.1.1/32 udp dst-port 4789",
            "ipv6 dst fc00::/7 tcp src-port 22 priority 15",
            "ipv6 proto 47",
            "tcp dst-port 80",
            "src-mac 02:aa:bb:cc:dd:ee udp",
        ] {
            round_trip(text);
        }
        round_trip_rule(&FlowRule::own_mac([2, 0x4d, 0x4c, 0x35, 0, 0]));
        round_trip_rule(&FlowRule::multicast_copy());
        round_trip_rule(&FlowRule::promiscuous());
    }

    fn round_trip_rule(rule: &FlowRule) {
        assert_eq!(&parse(compile(rule).unwrap().as_bytes()).unwrap().rule, rule);
    }

    #[test]
    fn parse_applies_the_kernel_checks() {
        let good = compile(&"udp dst-port 53".parse().unwrap()).unwrap();
        let errno = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.as_bytes().to_vec();
            f(&mut b);
            parse(&b).map(|_| 0).unwrap_or_else(|e| e.errno)
        };
        // attr.size is ignored, as libibverbs ignores it (VPP leaves it 0).
        assert_eq!(errno(&|b| b[8..10].copy_from_slice(&0u16.to_ne_bytes())), 0);
        assert_eq!(errno(&|b| b[0] = 1), libc::EINVAL); // comp_mask
        assert_eq!(errno(&|b| b[16] = 1), libc::EINVAL); // deprecated flag bit 0
        assert_eq!(errno(&|b| b[10] = 16), libc::ENOMEM); // priority 16
        assert_eq!(errno(&|b| b[12] = 11), libc::EINVAL); // 11 specs
        assert_eq!(errno(&|b| b[13] = 2), libc::EINVAL); // port 2
        assert_eq!(errno(&|b| b[4] = 9), libc::EINVAL); // flow type
        assert_eq!(errno(&|b| b[4] = 3), libc::EOPNOTSUPP); // sniffer
        assert_eq!(errno(&|b| b[20] = 0x21), libc::EINVAL); // unknown spec type
        assert_eq!(errno(&|b| b[24] = 8), libc::EINVAL); // eth spec size too small
        assert_eq!(errno(&|b| b.truncate(b.len() - 1)), libc::EINVAL);
        // A value bit outside the mask: dst_mac byte 0 with a zero mask.
        assert_eq!(errno(&|b| b[26] = 1), libc::EINVAL);
        // A partial port mask is beyond what a FlowRule holds.
        let l4 = 20 + 40;
        assert_eq!(errno(&|b| b[l4 + 10] = 0x0f), libc::EOPNOTSUPP);
        // DONT_TRAP reads back as a copy rule.
        let copy = parse(compile(&"udp copy".parse().unwrap()).unwrap().as_bytes()).unwrap();
        assert_eq!(copy.rule.action, Action::Copy);
        assert_eq!(copy.spec_types, [IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_UDP]);
    }

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_len(&[255, 255, 240, 0]), Some(20));
        assert_eq!(prefix_len(&[0; 4]), Some(0));
        assert_eq!(prefix_len(&[255, 0, 255, 0]), None);
    }

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
