//! From a port's rules to the verbs flows and hash QPs that carry them out.
//!
//! **RSS.** The kernel refuses one hash QP that mixes IPv4 with IPv6 fields or TCP with UDP ports
//! (`qp.c` `create_rss_raw_qp_tir`: EINVAL), so a port has six: for each IP version one over the
//! addresses and TCP ports, one over the addresses and UDP ports, one over the addresses alone,
//! all over one indirection table. A rule is expanded into a flow per kind of frame it can match,
//! each to its QP, as DPDK's `mlx5_flow_expand_rss` expands an RSS rule into eth/ipv4/udp,
//! eth/ipv4/tcp, eth/ipv4, ... flows (`mlx5_flow.c`) and `flow_verbs_translate` gives each the
//! hash fields of its layers. UDP flows between two addresses then spread over the queues (they
//! all hashed alike when the only QP hashed TCP ports).
//!
//! **Priorities.** Two flows of one priority that both match a frame overlap, and which one wins
//! depends on the order of the kernel's flow groups (`fs.c`: one auto-grouped table per
//! priority), which nothing promises. DPDK gives every flow a sub-priority by its deepest layer
//! (`mlx5_flow_verbs.c` `flow_verbs_translate`; `mlx5_flow.c` `mlx5_flow_adjust_priority`:
//! verbs priority = 3 × rule priority + 0 for L4, 1 for L3, 2 for L2), so the more specific flow
//! comes first whatever the group order; so does this port. The expansion above gives no two
//! overlapping flows one priority, and a rule priority whose flows would need a verbs priority
//! the kernel does not have (above 15) is refused in one line.

use rawpkt_wire::ibv_spec::MAX_PRIORITY;
use rawpkt_wire::rule::{Action, FlowRule, IpMatch};
use rawpkt_wire::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_TCP, IPPROTO_UDP};
use rdma_abi::*;

/// The six hash QPs of a port, by what they hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hash {
    V4Udp,
    V4Tcp,
    V4Ip,
    V6Udp,
    V6Tcp,
    V6Ip,
}

impl Hash {
    pub(super) const ALL: [Hash; 6] = [
        Hash::V4Udp,
        Hash::V4Tcp,
        Hash::V4Ip,
        Hash::V6Udp,
        Hash::V6Tcp,
        Hash::V6Ip,
    ];

    /// The `IBV_RX_HASH_*` fields of the QP: Toeplitz over source and destination address,
    /// and the ports of its L4 protocol (VPP's `rss4 ip-udp` / `ip-tcp` choices).
    pub(super) fn fields(self) -> u64 {
        let v4 = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
        let v6 = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6;
        let udp = IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
        let tcp = IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;
        u64::from(match self {
            Hash::V4Udp => v4 | udp,
            Hash::V4Tcp => v4 | tcp,
            Hash::V4Ip => v4,
            Hash::V6Udp => v6 | udp,
            Hash::V6Tcp => v6 | tcp,
            Hash::V6Ip => v6,
        })
    }

    /// Its index in [`Hash::ALL`].
    pub(super) fn index(self) -> usize {
        Hash::ALL.iter().position(|&h| h == self).expect("in ALL")
    }
}

/// The deepest layer a flow matches: DPDK's sub-priority (`MLX5_PRIORITY_MAP_L4` 0, `L3` 1,
/// `L2` 2).
fn layer(r: &FlowRule) -> u16 {
    if r.ip_proto.is_some() {
        0
    } else if r.ip.is_some() || matches!(r.ethertype, Some(ETHERTYPE_IPV4 | ETHERTYPE_IPV6)) {
        1
    } else {
        2
    }
}

/// The verbs priority of a flow of rule priority `p` (DPDK `mlx5_flow_adjust_priority`), or
/// why there is none.
fn verbs_priority(r: &FlowRule, p: u16) -> Result<u16, String> {
    let v = 3 * u32::from(p) + u32::from(layer(r));
    u16::try_from(v).ok().filter(|&v| v <= MAX_PRIORITY).ok_or_else(|| {
        format!(
            "priority {p}: rawpkt uses three verbs priorities per rule priority (by layer, as DPDK's \
             mlx5_flow_adjust_priority) and the kernel has 0 to {MAX_PRIORITY}, so rule priorities 0 to {}",
            (MAX_PRIORITY - 2) / 3
        )
    })
}

/// `rule` as the flows it becomes, each with its verbs priority set and the QP it delivers to.
pub(super) fn expand(rule: &FlowRule) -> Result<Vec<(FlowRule, Hash)>, String> {
    let p = rule.priority;
    let with = |r: FlowRule, h: Hash| -> Result<(FlowRule, Hash), String> {
        let priority = verbs_priority(&r, p)?;
        Ok((FlowRule { priority, ..r }, h))
    };
    // A copy (DONT_TRAP) rule passes the frame on to the next priority: split by layers, one
    // frame would be copied once per flow it meets. It stays one flow, hashed by its family.
    if rule.action == Action::Copy {
        let v6 = matches!(rule.ip, Some(IpMatch::V6 { .. })) || rule.ethertype == Some(ETHERTYPE_IPV6);
        return Ok(vec![with(rule.clone(), if v6 { Hash::V6Ip } else { Hash::V4Ip })?]);
    }
    let families: &[bool] = match (&rule.ip, rule.ethertype) {
        (Some(IpMatch::V4 { .. }), _) | (None, Some(ETHERTYPE_IPV4)) => &[false],
        (Some(IpMatch::V6 { .. }), _) | (None, Some(ETHERTYPE_IPV6)) => &[true],
        // Not IP: one flow, the addresses' hash finds no fields (hash 0, the table's first).
        (None, Some(_)) => return Ok(vec![with(rule.clone(), Hash::V4Ip)?]),
        (None, None) => &[true, false],
    };
    let mut out = Vec::new();
    for &v6 in families {
        let base = FlowRule {
            ip: Some(rule.ip.unwrap_or(if v6 {
                IpMatch::V6 { src: None, dst: None }
            } else {
                IpMatch::V4 { src: None, dst: None }
            })),
            ethertype: None,
            ..rule.clone()
        };
        let (udp, tcp, ip) = if v6 {
            (Hash::V6Udp, Hash::V6Tcp, Hash::V6Ip)
        } else {
            (Hash::V4Udp, Hash::V4Tcp, Hash::V4Ip)
        };
        match rule.ip_proto {
            Some(IPPROTO_UDP) => out.push(with(base, udp)?),
            Some(IPPROTO_TCP) => out.push(with(base, tcp)?),
            Some(_) => out.push(with(base, ip)?),
            None => {
                out.push(with(
                    FlowRule {
                        ip_proto: Some(IPPROTO_UDP),
                        ..base.clone()
                    },
                    udp,
                )?);
                out.push(with(
                    FlowRule {
                        ip_proto: Some(IPPROTO_TCP),
                        ..base.clone()
                    },
                    tcp,
                )?);
                out.push(with(base, ip)?);
            }
        }
    }
    // A rule of no IP version also takes what is not IP, after all of the above.
    if rule.ip.is_none() && rule.ethertype.is_none() && rule.ip_proto.is_none() {
        out.push(with(rule.clone(), Hash::V4Ip)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &[(FlowRule, Hash)]) -> Vec<String> {
        v.iter().map(|(r, h)| format!("{r} -> {h:?}")).collect()
    }

    #[test]
    fn rules_expand_by_layer_with_dpdks_priorities() {
        let own = FlowRule::own_mac([2, 0, 0, 0, 0, 1]);
        let e = expand(&own).unwrap();
        assert_eq!(
            e.iter().map(|(r, h)| (r.priority, *h)).collect::<Vec<_>>(),
            [
                (0, Hash::V6Udp),
                (0, Hash::V6Tcp),
                (1, Hash::V6Ip),
                (0, Hash::V4Udp),
                (0, Hash::V4Tcp),
                (1, Hash::V4Ip),
                (2, Hash::V4Ip)
            ],
            "{:?}",
            text(&e)
        );
        let udp: FlowRule = "udp dst-port 4789 priority 2".parse().unwrap();
        let e = expand(&udp).unwrap();
        assert_eq!(
            e.iter().map(|(r, h)| (r.priority, *h)).collect::<Vec<_>>(),
            [(6, Hash::V6Udp), (6, Hash::V4Udp)]
        );
        let v6: FlowRule = "ipv6 dst fc00::/7".parse().unwrap();
        assert_eq!(expand(&v6).unwrap().len(), 3);
        let exp: FlowRule = "ethertype 0x88b5".parse().unwrap();
        assert_eq!(
            expand(&exp).unwrap(),
            vec![(FlowRule { priority: 2, ..exp }, Hash::V4Ip)]
        );
        let mc = FlowRule::multicast_copy();
        assert_eq!(expand(&mc).unwrap().len(), 1, "a copy rule is not split");
        // 3 × 5 + 0 = 15 is the last verbs priority; an L2 rule of priority 5 needs 17.
        assert_eq!(expand(&"udp priority 5".parse().unwrap()).unwrap()[0].0.priority, 15);
        let e = expand(&"ethertype 0x88b5 priority 5".parse().unwrap()).unwrap_err();
        assert!(e.starts_with("priority 5: rawpkt uses three verbs priorities"), "{e}");
    }
}
