//! The software matcher: what the model NIC (and tests) use in place of the NIC's steering.
//!
//! Per rule ([`FlowRule::matches`]):
//! - MACs, the outer VLAN id and the EtherType are read from the frame; the EtherType is the one
//!   after up to two VLAN tags, as the NIC's parser reports it. `vlan N` needs the outer tag to be
//!   a C-tag (0x8100): the kernel matches the VID together with `cvlan_tag`, so a frame whose
//!   outer tag is an S-tag (0x88a8) does not match whatever its VID.
//! - `ipv4`/`ipv6` need a well-formed header of that version in the frame (IPv4 options are
//!   skipped by the header length); prefixes compare the addresses under their masks.
//! - `tcp`/`udp`/`proto N` compare the fixed header's Protocol / Next Header, so they match every
//!   IPv4 fragment of such a packet; IPv6 extension headers are not walked, so an IPv6 fragment
//!   has Next Header 44.
//! - Ports need the L4 header right after the IP header: unfragmented packets and first IPv4
//!   fragments. A non-first fragment has no L4 header, so no port rule matches it.
//! - A frame cut short matches only the fields whose bytes it has (see [`wire::headers`]).
//!
//! Across rules ([`RuleSet::classify`]), the kernel's table layout (mlx5_ib `fs.c`): each user
//! priority `p` becomes two tables, `2p` for copy (DONT_TRAP) rules and `2p + 1` for stealing
//! ones; a stealing rule whose destination MAC can only be multicast goes to one last multicast
//! table after all others. Tables are searched in order. In a table the first matching entry
//! decides: entries are grouped by match shape (which fields, which masks) in auto-created groups
//! searched in creation order, so within a priority the rule whose *shape* was installed first
//! wins, then the first-installed rule of that shape (docs/mlx5-notes.md, "Steering: rules of
//! one priority"; a model of the table without removals). A copy match delivers a copy and moves on to the next table; a steal match
//! delivers and ends the search; a frame nothing steals goes to Linux.

use super::rule::{Action, FlowRule, IpMatch};
use super::wire::{self, Headers, IpHeader, ETHERTYPE_VLAN, IPPROTO_TCP};

impl FlowRule {
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.matches_headers(frame, &wire::headers(frame))
    }

    /// [`FlowRule::matches`] with the frame's headers already located, to parse once per frame
    /// for a whole rule set.
    pub fn matches_headers(&self, frame: &[u8], h: &Headers) -> bool {
        if let Some(m) = &self.dst_mac {
            if !frame.get(0..6).is_some_and(|b| m.matches(b)) {
                return false;
            }
        }
        if let Some(m) = &self.src_mac {
            if !frame.get(6..12).is_some_and(|b| m.matches(b)) {
                return false;
            }
        }
        if let Some(vid) = self.vlan {
            if !matches!(h.outer_vlan, Some((ETHERTYPE_VLAN, tci)) if tci & 0x0fff == vid) {
                return false;
            }
        }
        if self.ethertype.is_some() && self.ethertype != h.ethertype {
            return false;
        }
        match (&self.ip, h.ip) {
            (None, _) => {}
            (Some(IpMatch::V4 { src, dst }), IpHeader::V4 { off, .. }) => {
                if !src.is_none_or(|p| p.contains(&frame[off + 12..off + 16]))
                    || !dst.is_none_or(|p| p.contains(&frame[off + 16..off + 20]))
                {
                    return false;
                }
            }
            (Some(IpMatch::V6 { src, dst }), IpHeader::V6 { off, .. }) => {
                if !src.is_none_or(|p| p.contains(&frame[off + 8..off + 24]))
                    || !dst.is_none_or(|p| p.contains(&frame[off + 24..off + 40]))
                {
                    return false;
                }
            }
            _ => return false,
        }
        if let Some(want) = self.ip_proto {
            let got = match h.ip {
                IpHeader::V4 { proto, .. } => proto,
                IpHeader::V6 { next, .. } => next,
                IpHeader::None => return false,
            };
            if got != want {
                return false;
            }
        }
        if self.src_port.is_some() || self.dst_port.is_some() {
            let Some(off) = h.ports else {
                return false;
            };
            let port = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
            if self.src_port.is_some_and(|p| p != port(off)) || self.dst_port.is_some_and(|p| p != port(off + 2)) {
                return false;
            }
        }
        true
    }
}

/// The most rules a [`RuleSet`] holds: copies are reported as bits of a `u64`.
pub const MAX_RULES: usize = 64;

/// Why a rule was not added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSetError {
    Full,
    Invalid(super::rule::RuleError),
}

impl std::fmt::Display for RuleSetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleSetError::Full => write!(f, "a rule set holds at most {MAX_RULES} rules"),
            RuleSetError::Invalid(e) => write!(f, "invalid rule: {e}"),
        }
    }
}

impl std::error::Error for RuleSetError {}

/// Where one frame goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The stealing rule that took the frame from Linux, if any.
    pub stolen_by: Option<usize>,
    /// Bit `i`: copy rule `i` delivered a copy. Each delivery reaches the port's queues, so a
    /// frame copied and then stolen arrives there twice, as both NIC entries forward to the port.
    pub copies: u64,
}

impl Verdict {
    pub fn steal(&self) -> bool {
        self.stolen_by.is_some()
    }

    /// Whether Linux still gets the frame.
    pub fn to_linux(&self) -> bool {
        self.stolen_by.is_none()
    }

    /// How many times the frame reaches the port's queues.
    pub fn deliveries(&self) -> u32 {
        self.copies.count_ones() + u32::from(self.steal())
    }

    pub fn copy_rules(&self) -> impl Iterator<Item = usize> {
        let copies = self.copies;
        (0..MAX_RULES).filter(move |i| copies >> i & 1 != 0)
    }
}

/// Which match criteria a rule puts in the NIC's table (the fte_match_param mask it compiles
/// to, assuming the device matches `ip_version`); rules of one shape share a flow group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    dmac: [u8; 6],
    smac: [u8; 6],
    vlan: bool,
    ethertype: bool,
    ip_version: bool,
    // IPv4 addresses sit in the last 4 bytes of the 16-byte field, as in the NIC's layout.
    src_ip: [u8; 16],
    dst_ip: [u8; 16],
    ip_proto: bool,
    // (src, dst) for TCP and UDP: separate fields in the NIC's match set.
    tcp_ports: (bool, bool),
    udp_ports: (bool, bool),
}

fn shape(r: &FlowRule) -> Shape {
    let v4 = |p: Option<super::rule::Ipv4Prefix>| {
        let mut m = [0u8; 16];
        m[12..].copy_from_slice(&p.map_or([0; 4], |p| p.mask()));
        m
    };
    let v6 = |p: Option<super::rule::Ipv6Prefix>| p.map_or([0; 16], |p| p.mask());
    let (src_ip, dst_ip) = match r.ip {
        Some(IpMatch::V4 { src, dst }) => (v4(src), v4(dst)),
        Some(IpMatch::V6 { src, dst }) => (v6(src), v6(dst)),
        None => ([0; 16], [0; 16]),
    };
    let ports = (r.src_port.is_some(), r.dst_port.is_some());
    let tcp = r.ip_proto == Some(IPPROTO_TCP);
    Shape {
        dmac: r.dst_mac.map_or([0; 6], |m| m.mask()),
        smac: r.src_mac.map_or([0; 6], |m| m.mask()),
        vlan: r.vlan.is_some(),
        ethertype: r.ethertype.is_some(),
        ip_version: r.ip.is_some(),
        src_ip,
        dst_ip,
        ip_proto: r.ip_proto.is_some(),
        tcp_ports: if tcp { ports } else { (false, false) },
        udp_ports: if tcp { (false, false) } else { ports },
    }
}

/// The kernel's table for a rule (mlx5_ib `get_flow_table`): copy rules before stealing ones
/// of the same priority, multicast-only stealing rules after everything.
fn table(r: &FlowRule) -> u32 {
    match r.action {
        Action::Copy => 2 * u32::from(r.priority),
        Action::Steal if r.dst_mac.is_some_and(|m| m.multicast_only()) => u32::MAX,
        Action::Steal => 2 * u32::from(r.priority) + 1,
    }
}

struct Entry {
    rule: FlowRule,
    table: u32,
    /// Index of the first rule of this shape in this table: the flow group's creation order.
    group: usize,
}

/// Rules in the order they were added (that index names them in a [`Verdict`]), evaluated in
/// the kernel's order.
#[derive(Default)]
pub struct RuleSet {
    entries: Vec<Entry>,
    order: Vec<u8>,
    /// Flow groups of a table searched last-created first ([`RuleSet::reverse_groups`]).
    reverse: bool,
}

impl RuleSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Searches the flow groups of each table last-created first: the other order a device may
    /// keep them in. Nothing in the kernel's `fs.c` promises creation order for two groups of
    /// one priority that both match a frame (docs/mlx5-notes.md, "Steering: rules of one
    /// priority"), so a rule set whose outcome depends on it is wrong on some device; the model's
    /// `flow_groups=reverse` knob turns this on to show it.
    pub fn reverse_groups(&mut self, on: bool) {
        self.reverse = on;
        self.sort();
    }

    fn sort(&mut self) {
        let (entries, reverse) = (&self.entries, self.reverse);
        self.order.sort_by_key(|&i| {
            let e = &entries[usize::from(i)];
            let group = if reverse { usize::MAX - e.group } else { e.group };
            (e.table, group, i)
        });
    }

    /// Adds a rule and returns its index.
    pub fn add(&mut self, rule: FlowRule) -> Result<usize, RuleSetError> {
        rule.validate().map_err(RuleSetError::Invalid)?;
        if self.entries.len() == MAX_RULES {
            return Err(RuleSetError::Full);
        }
        let index = self.entries.len();
        let table = table(&rule);
        let s = shape(&rule);
        let group = self
            .entries
            .iter()
            .position(|e| e.table == table && shape(&e.rule) == s)
            .unwrap_or(index);
        self.entries.push(Entry { rule, table, group });
        self.order.push(index as u8);
        self.sort();
        Ok(index)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn rule(&self, index: usize) -> &FlowRule {
        &self.entries[index].rule
    }

    /// Rule indices in the order the NIC consults them.
    pub fn evaluation_order(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().map(|&i| usize::from(i))
    }

    /// Where a received frame goes. Parses the frame once and allocates nothing.
    pub fn classify(&self, frame: &[u8]) -> Verdict {
        let h = wire::headers(frame);
        let mut v = Verdict::default();
        let mut done_table = None;
        for i in self.evaluation_order() {
            let e = &self.entries[i];
            if done_table == Some(e.table) || !e.rule.matches_headers(frame, &h) {
                continue;
            }
            match e.rule.action {
                Action::Copy => {
                    v.copies |= 1 << i;
                    done_table = Some(e.table);
                }
                Action::Steal => {
                    v.stolen_by = Some(i);
                    break;
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (no options) + UDP 1000 -> 53 to 02:00:00:00:00:01, 60 bytes.
    fn dns() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..18].copy_from_slice(&[0x45, 0, 0, 28]);
        f[23] = 17;
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f[34..38].copy_from_slice(&[0x03, 0xe8, 0, 53]);
        f
    }

    #[test]
    fn copy_then_steal_in_kernel_order() {
        let mut s = RuleSet::new();
        s.add(FlowRule::own_mac([2, 0, 0, 0, 0, 1])).unwrap();
        s.add("udp dst-port 53 copy".parse().unwrap()).unwrap();
        assert_eq!(s.evaluation_order().collect::<Vec<_>>(), [1, 0]);
        let v = s.classify(&dns());
        assert_eq!((v.stolen_by, v.copies), (Some(0), 0b10));
        let mut other = dns();
        other[0] = 4;
        let v = s.classify(&other);
        assert!(v.to_linux() && v.copy_rules().eq([1]));
    }

    #[test]
    fn shapes_follow_the_masks() {
        let r = |s: &str| shape(&s.parse().unwrap());
        assert_eq!(r("ipv4 dst 10.0.0.0/8"), r("ipv4 dst 11.0.0.0/8"));
        assert_eq!(r("ipv4 udp"), r("ipv6 tcp"));
        assert_ne!(r("ipv4 dst 10.0.0.0/8"), r("ipv4 dst 10.0.0.0/16"));
        assert_ne!(r("tcp dst-port 1"), r("udp dst-port 1"));
        assert_eq!(table(&"udp copy priority 3".parse().unwrap()), 6);
        assert_eq!(table(&"udp priority 3".parse().unwrap()), 7);
        assert_eq!(
            table(&"dst-mac 01:00:5e:00:00:01 priority 3".parse().unwrap()),
            u32::MAX
        );
    }
}
