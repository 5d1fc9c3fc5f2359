//! A flow rule: which frames a port takes from the kernel, described once and compiled by each
//! backend (verbs specs for mlx5, BPF for AF_XDP, the software matcher for the model NIC).
//!
//! Every match field is optional (absent = wildcard). The type keeps only what every backend can
//! agree on: values are stored already masked (a MAC or prefix with bits outside its mask is
//! refused at construction), so two rules that match the same frames compare equal field by
//! field, and an IP prefix cannot exist without its address family.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, IPPROTO_TCP, IPPROTO_UDP};

/// What happens to a frame a rule matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Action {
    /// Deliver to the port's RX queues (spread by RSS) and take the frame from Linux.
    #[default]
    Steal,
    /// Deliver a copy and let matching go on, so Linux (or a later rule) still gets the frame:
    /// verbs' `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`.
    Copy,
}

/// A rule that cannot be installed as it stands: one line saying which part is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError(pub String);

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuleError {}

/// A MAC address under a mask; a frame's address matches when it equals `addr` on the mask's bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacMatch {
    addr: [u8; 6],
    mask: [u8; 6],
}

impl MacMatch {
    pub const FULL_MASK: [u8; 6] = [0xff; 6];

    pub const fn exact(addr: [u8; 6]) -> Self {
        MacMatch {
            addr,
            mask: Self::FULL_MASK,
        }
    }

    /// Refuses an address with bits outside the mask: the NIC rejects such a value
    /// (mlx5_core checks `value & ~mask == 0`) and the canonical text would not be unique.
    pub fn masked(addr: [u8; 6], mask: [u8; 6]) -> Result<Self, RuleError> {
        if addr.iter().zip(mask).any(|(a, m)| a & !m != 0) {
            return Err(RuleError(format!(
                "{} has bits outside the mask {}",
                MacText(addr),
                MacText(mask)
            )));
        }
        Ok(MacMatch { addr, mask })
    }

    pub fn addr(&self) -> [u8; 6] {
        self.addr
    }

    pub fn mask(&self) -> [u8; 6] {
        self.mask
    }

    pub fn matches(&self, mac: &[u8]) -> bool {
        mac.len() == 6 && (0..6).all(|i| mac[i] & self.mask[i] == self.addr[i])
    }

    /// The kernel's test for a rule that can only ever see multicast frames (mlx5_ib
    /// `flow_is_multicast_only`): group bit set in both value and mask.
    pub fn multicast_only(&self) -> bool {
        self.addr[0] & 1 != 0 && self.mask[0] & 1 != 0
    }
}

/// Reads a MAC address written as six colon-separated groups of one or two hex digits
/// (`02:00:00:00:00:01`, `2:0:0:0:0:1`): the one reader of the rule syntax, port specs and the
/// tools. Each group is checked to be hex digits first, because `u8::from_str_radix` alone would
/// also take a sign (`+1`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        let p = parts.next()?;
        if !(1..=2).contains(&p.len()) || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Formats six bytes as `02:00:00:00:00:01`.
pub struct MacText(pub [u8; 6]);

impl fmt::Display for MacText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// An address prefix over `N` bytes (4: IPv4, 16: IPv6), host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix<const N: usize> {
    addr: [u8; N],
    len: u8,
}

pub type Ipv4Prefix = Prefix<4>;
pub type Ipv6Prefix = Prefix<16>;

impl<const N: usize> Prefix<N> {
    const BITS: u8 = (N * 8) as u8;

    fn from_octets(addr: [u8; N], len: u8, text: impl fmt::Display) -> Result<Self, RuleError> {
        if len > Self::BITS {
            return Err(RuleError(format!("prefix length {len} is more than {}", Self::BITS)));
        }
        let p = Prefix { addr, len };
        let mask = p.mask();
        if addr.iter().zip(mask).any(|(a, m)| a & !m != 0) {
            let base = Prefix::<N> {
                addr: std::array::from_fn(|i| addr[i] & mask[i]),
                len,
            };
            return Err(RuleError(format!(
                "{text}/{len} has bits set past the prefix length (did you mean {}?)",
                base.text()
            )));
        }
        Ok(p)
    }

    pub fn octets(&self) -> [u8; N] {
        self.addr
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    /// A zero-length prefix matches every address, as if the field were absent.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn mask(&self) -> [u8; N] {
        std::array::from_fn(|i| {
            let bits = usize::from(self.len).saturating_sub(i * 8).min(8);
            (0xff00u16 >> bits) as u8
        })
    }

    pub fn contains(&self, addr: &[u8]) -> bool {
        let mask = self.mask();
        addr.len() == N && (0..N).all(|i| addr[i] & mask[i] == self.addr[i])
    }

    /// `10.0.0.0/24`, or the bare address for a full-length prefix.
    pub(crate) fn text(&self) -> String {
        let addr = match N {
            4 => Ipv4Addr::from(<[u8; 4]>::try_from(&self.addr[..]).unwrap()).to_string(),
            _ => Ipv6Addr::from(<[u8; 16]>::try_from(&self.addr[..]).unwrap()).to_string(),
        };
        if self.len == Self::BITS {
            addr
        } else {
            format!("{addr}/{}", self.len)
        }
    }
}

impl Prefix<4> {
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self, RuleError> {
        Self::from_octets(addr.octets(), len, addr)
    }

    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }
}

impl Prefix<16> {
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Self, RuleError> {
        Self::from_octets(addr.octets(), len, addr)
    }

    pub fn addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }
}

/// The IP version a rule asks for, with its optional source and destination prefixes. An enum
/// so that a rule cannot hold an IPv4 source and an IPv6 destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpMatch {
    V4 {
        src: Option<Ipv4Prefix>,
        dst: Option<Ipv4Prefix>,
    },
    V6 {
        src: Option<Ipv6Prefix>,
        dst: Option<Ipv6Prefix>,
    },
}

impl IpMatch {
    pub const V4_ANY: IpMatch = IpMatch::V4 { src: None, dst: None };
    pub const V6_ANY: IpMatch = IpMatch::V6 { src: None, dst: None };

    pub fn ethertype(&self) -> u16 {
        match self {
            IpMatch::V4 { .. } => ETHERTYPE_IPV4,
            IpMatch::V6 { .. } => ETHERTYPE_IPV6,
        }
    }

    pub(crate) fn keyword(&self) -> &'static str {
        match self {
            IpMatch::V4 { .. } => "ipv4",
            IpMatch::V6 { .. } => "ipv6",
        }
    }
}

/// One steering rule. Absent fields are wildcards; a rule with none is [`FlowRule::promiscuous`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowRule {
    pub dst_mac: Option<MacMatch>,
    pub src_mac: Option<MacMatch>,
    /// VLAN id (12 bits) of the outer tag, which must be a C-tag (0x8100): the NIC matches
    /// `first_vid` together with `cvlan_tag`.
    pub vlan: Option<u16>,
    /// The EtherType after the VLAN tags (what the NIC's parser reports), not a tag's TPID.
    pub ethertype: Option<u16>,
    pub ip: Option<IpMatch>,
    /// IPv4 Protocol / IPv6 Next Header of the fixed header; 6 and 17 are `tcp` and `udp`.
    pub ip_proto: Option<u8>,
    /// Ports need `ip_proto` TCP or UDP.
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub action: Action,
    /// 0 is evaluated first. The kernel takes 0..=15 (0..=7 before Linux 4.x's 16 bypass
    /// priorities); the verbs compiler enforces that, other backends may allow more.
    pub priority: u16,
}

pub const VLAN_ID_MAX: u16 = 0x0fff;

/// EtherTypes start here; smaller values in that field are 802.3 lengths.
pub const ETHERTYPE_MIN: u16 = 0x0600;

impl FlowRule {
    /// Every field a wildcard, steal, priority 0: the base for struct-update syntax,
    /// `FlowRule { dst_port: Some(4789), ip_proto: Some(17), ..FlowRule::ANY }`.
    /// On its own it is [`FlowRule::promiscuous`], with the same warning.
    pub const ANY: FlowRule = FlowRule {
        dst_mac: None,
        src_mac: None,
        vlan: None,
        ethertype: None,
        ip: None,
        ip_proto: None,
        src_port: None,
        dst_port: None,
        action: Action::Steal,
        priority: 0,
    };

    /// What a port takes of the unicast frames to its MAC by default: UDP over IPv4 and IPv6,
    /// and the two IEEE 802 local experimental EtherTypes (0x88b5, 0x88b6). ARP, ICMP and
    /// ICMPv6 (neighbour discovery, ping), TCP and everything else to the MAC stay with the
    /// netdev, so its address keeps answering (ssh, ping) while rawpkt takes the traffic it is
    /// for. Stealing the whole MAC ([`FlowRule::own_mac`]) took unicast ARP replies and IPv6
    /// neighbour advertisements too, and Linux lost its neighbours. Host UDP to that MAC (DNS
    /// replies, DHCP renewals, NTP) is rawpkt's under this default.
    pub fn default_unicast(mac: [u8; 6]) -> Vec<Self> {
        let own = FlowRule {
            dst_mac: Some(MacMatch::exact(mac)),
            ..Self::ANY
        };
        vec![
            FlowRule {
                ip: Some(IpMatch::V4 { src: None, dst: None }),
                ip_proto: Some(crate::wire::IPPROTO_UDP),
                ..own.clone()
            },
            FlowRule {
                ip: Some(IpMatch::V6 { src: None, dst: None }),
                ip_proto: Some(crate::wire::IPPROTO_UDP),
                ..own.clone()
            },
            FlowRule {
                ethertype: Some(0x88b5),
                ..own.clone()
            },
            FlowRule {
                ethertype: Some(0x88b6),
                ..own
            },
        ]
    }

    /// Steal unicast frames to our MAC: VPP's default "ucast" rule (rawpkt's old default; see
    /// [`FlowRule::default_unicast`] for why it is not the default any more).
    pub fn own_mac(mac: [u8; 6]) -> Self {
        FlowRule {
            dst_mac: Some(MacMatch::exact(mac)),
            ..Self::ANY
        }
    }

    /// Copy every multicast (and broadcast) frame while Linux keeps getting it, so ARP and
    /// neighbour discovery go on working: VPP's "mcast" rule, DONT_TRAP.
    pub fn multicast_copy() -> Self {
        FlowRule {
            dst_mac: Some(MacMatch {
                addr: [1, 0, 0, 0, 0, 0],
                mask: [1, 0, 0, 0, 0, 0],
            }),
            action: Action::Copy,
            ..Self::ANY
        }
    }

    /// **DANGER: STEALS EVERY FRAME ON THE PORT FROM LINUX.** Zero masks match everything, so
    /// once installed the kernel sees nothing on this interface any more: no ARP, no neighbour
    /// discovery, no SSH session over it. Meant for a port dedicated to the application (VPP's
    /// "promisc" mode); a VF also needs `trust on` and `spoof off` for it to see other MACs.
    pub fn promiscuous() -> Self {
        Self::ANY
    }

    /// Whether the rule matches no field at all.
    pub fn is_any(&self) -> bool {
        self.dst_mac.is_none()
            && self.src_mac.is_none()
            && self.vlan.is_none()
            && self.ethertype.is_none()
            && self.ip.is_none()
            && self.ip_proto.is_none()
            && self.src_port.is_none()
            && self.dst_port.is_none()
    }

    /// Checks what the field types cannot: ranges, and fields that contradict each other.
    pub fn validate(&self) -> Result<(), RuleError> {
        if let Some(v) = self.vlan {
            check_vlan(v).map_err(RuleError)?;
        }
        if let Some(t) = self.ethertype {
            check_ethertype(t).map_err(RuleError)?;
            if let Some(ip) = &self.ip {
                check_family_ethertype(ip, t).map_err(RuleError)?;
            } else if let Some(p) = self.ip_proto {
                check_proto_ethertype(p, t).map_err(RuleError)?;
            }
        }
        if let Some(kw) = self.port_keyword() {
            check_ports_proto(kw, self.ip_proto).map_err(RuleError)?;
        }
        Ok(())
    }

    pub(crate) fn port_keyword(&self) -> Option<&'static str> {
        match (self.src_port, self.dst_port) {
            (Some(_), _) => Some("src-port"),
            (None, Some(_)) => Some("dst-port"),
            (None, None) => None,
        }
    }
}

// The checks below are shared by `validate` and the text parser, which points at the tokens.

pub(crate) fn check_vlan(v: u16) -> Result<(), String> {
    if v > VLAN_ID_MAX {
        return Err(format!("vlan {v} is more than {VLAN_ID_MAX}"));
    }
    Ok(())
}

pub(crate) fn check_ethertype(t: u16) -> Result<(), String> {
    if t < ETHERTYPE_MIN {
        return Err(format!(
            "ethertype {t:#06x} is below {ETHERTYPE_MIN:#06x}: such values are 802.3 lengths, not EtherTypes"
        ));
    }
    if t == ETHERTYPE_VLAN || t == ETHERTYPE_QINQ {
        return Err(format!(
            "ethertype {t:#06x} is a VLAN tag; use `vlan N` (ethertype matches the type after the tags)"
        ));
    }
    Ok(())
}

pub(crate) fn check_family_ethertype(ip: &IpMatch, t: u16) -> Result<(), String> {
    if ip.ethertype() != t {
        return Err(format!("ethertype {t:#06x} contradicts {}", ip.keyword()));
    }
    Ok(())
}

pub(crate) fn check_proto_ethertype(p: u8, t: u16) -> Result<(), String> {
    if t != ETHERTYPE_IPV4 && t != ETHERTYPE_IPV6 {
        return Err(format!(
            "{} contradicts ethertype {t:#06x}, which is not IP",
            proto_text(p)
        ));
    }
    Ok(())
}

pub(crate) fn check_ports_proto(keyword: &str, proto: Option<u8>) -> Result<(), String> {
    match proto {
        Some(IPPROTO_TCP | IPPROTO_UDP) => Ok(()),
        Some(p) => Err(format!("{keyword} needs tcp or udp, not {}", proto_text(p))),
        None => Err(format!("{keyword} needs tcp or udp in the rule")),
    }
}

/// `tcp`, `udp` or `proto N`.
pub(crate) fn proto_text(p: u8) -> String {
    match p {
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_UDP => "udp".into(),
        p => format!("proto {p}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_six_groups_of_one_or_two_hex_digits() {
        assert_eq!(parse_mac("02:4d:4c:35:00:01"), Some([2, 0x4d, 0x4c, 0x35, 0, 1]));
        assert_eq!(parse_mac("2:0:0:0:0:FF"), Some([2, 0, 0, 0, 0, 0xff]));
        for bad in [
            "02:4d",
            "0:0:0:0:0:+1",
            "002:0:0:0:0:1",
            "0:0:0:0:0:0:0",
            "0:0:0:0:0:",
            "0:0:0:0:0:g",
            "",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prefix_masks_and_host_bits() {
        let p = Ipv4Prefix::new(Ipv4Addr::new(10, 0, 0, 0), 20).unwrap();
        assert_eq!(p.mask(), [255, 255, 240, 0]);
        assert!(p.contains(&[10, 0, 15, 1]) && !p.contains(&[10, 0, 16, 1]));
        let e = Ipv4Prefix::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap_err();
        assert_eq!(
            e.to_string(),
            "10.0.0.1/24 has bits set past the prefix length (did you mean 10.0.0.0/24?)"
        );
        assert!(Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 33).is_err());
        let v6 = Ipv6Prefix::new("fc00::".parse().unwrap(), 7).unwrap();
        assert_eq!(v6.mask()[..2], [0xfe, 0]);
        assert_eq!(Ipv6Prefix::new(Ipv6Addr::UNSPECIFIED, 128).unwrap().mask(), [0xff; 16]);
        assert!(Ipv6Prefix::new(Ipv6Addr::UNSPECIFIED, 0).unwrap().contains(&[0x20; 16]));
    }

    #[test]
    fn helpers_and_validation() {
        assert!(FlowRule::promiscuous().is_any());
        assert!(FlowRule::multicast_copy().dst_mac.unwrap().multicast_only());
        assert!(!FlowRule::own_mac([2, 0, 0, 0, 0, 1]).dst_mac.unwrap().multicast_only());
        let ports = FlowRule {
            dst_port: Some(80),
            ..FlowRule::ANY
        };
        assert_eq!(ports.validate().unwrap_err().0, "dst-port needs tcp or udp in the rule");
        let bad = FlowRule {
            ethertype: Some(ETHERTYPE_IPV6),
            ip: Some(IpMatch::V4_ANY),
            ..FlowRule::ANY
        };
        assert_eq!(bad.validate().unwrap_err().0, "ethertype 0x86dd contradicts ipv4");
        assert!(MacMatch::masked([2, 0, 0, 0, 0, 1], [0xff, 0xff, 0xff, 0, 0, 0]).is_err());
    }
}
