//! Inline modes: which headers a send WQE must carry in its Ethernet segment, and how long they
//! are in a given frame.

// IEEE 802.3 / IANA numbers the header walk needs.
use crate::ETH_L2_INLINE_HEADER_SIZE;

const ETH_HEADER_LEN: usize = 14;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// Which headers every send WQE must carry inline in its Ethernet segment: the NIC vport
/// context's `min_wqe_inline_mode` (PRM; Linux `mlx5_ifc.h` `MLX5_INLINE_MODE_*`, the values
/// below). The e-switch of a ConnectX-4/4 Lx steers by what is inline, so a WQE that inlines
/// less fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InlineMode {
    /// Nothing (ConnectX-5 and later).
    None = 0,
    /// The L2 header through its last VLAN or MPLS tag (at least 18 bytes).
    L2 = 1,
    /// Through the IP header.
    Ip = 2,
    /// Through the TCP or UDP header.
    TcpUdp = 3,
}

impl InlineMode {
    /// The mode of a PRM `min_wqe_inline_mode` value; None for the inner-header modes (4 and up,
    /// for tunnels) and reserved values.
    pub fn from_prm(v: u8) -> Option<InlineMode> {
        Some(match v {
            0 => InlineMode::None,
            1 => InlineMode::L2,
            2 => InlineMode::Ip,
            3 => InlineMode::TcpUdp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            InlineMode::None => "none",
            InlineMode::L2 => "l2",
            InlineMode::Ip => "ip",
            InlineMode::TcpUdp => "tcp-udp",
        }
    }

    /// The mode of a `name()`.
    pub fn from_name(s: &str) -> Option<InlineMode> {
        [InlineMode::None, InlineMode::L2, InlineMode::Ip, InlineMode::TcpUdp]
            .into_iter()
            .find(|m| m.name() == s)
    }

    /// Bytes of a frame of `len` bytes, of which `head` is the start, that a send WQE must carry
    /// inline (Linux mlx5e `mlx5e_calc_min_inline`: the L2 header through every VLAN tag, the
    /// network or the transport offset, and never less than 18 bytes, DPDK's
    /// `MLX5_INLINE_HSIZE_L2`); at most `len`. Headers cut short by the end of `head` count as
    /// far as they go. A frame with no IP header needs its L2 header only, whatever the mode.
    pub fn header_bytes(self, head: &[u8], len: usize) -> usize {
        if self == InlineMode::None {
            return 0;
        }
        let (l2, ethertype) = l2_header_len(head);
        let need = match self {
            InlineMode::None | InlineMode::L2 => l2,
            InlineMode::Ip | InlineMode::TcpUdp => {
                let (l3, proto) = ip_header_len(head, l2, ethertype);
                if self == InlineMode::TcpUdp && l3 > 0 {
                    l2 + l3 + l4_header_len(head, l2 + l3, proto)
                } else {
                    l2 + l3
                }
            }
        };
        need.max(ETH_L2_INLINE_HEADER_SIZE).min(len)
    }
}

fn be16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

/// Length of the L2 header through its last VLAN tag (802.1Q, 802.1ad, the old QinQ 0x9100) or
/// MPLS label (the one with bottom-of-stack set), and the EtherType after the tags (0 after MPLS:
/// what follows a label stack is not parsed).
fn l2_header_len(head: &[u8]) -> (usize, u16) {
    let Some(mut ethertype) = be16_at(head, 12) else {
        return (ETH_HEADER_LEN, 0);
    };
    let mut off = ETH_HEADER_LEN;
    while matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ | 0x9100) {
        off += 4;
        match be16_at(head, off - 2) {
            Some(t) => ethertype = t,
            None => return (off, 0),
        }
    }
    if matches!(ethertype, 0x8847 | 0x8848) {
        // Labels until the bottom-of-stack bit (byte 2, bit 0 of each 4-byte label).
        loop {
            off += 4;
            match head.get(off - 2) {
                Some(b) if b & 1 == 0 => {}
                _ => return (off, 0),
            }
        }
    }
    (off, ethertype)
}

/// Length of the IPv4 header (options included) or of the IPv6 header and its extension
/// headers at `off`, and the transport protocol; (0, 0) if the frame is not IP.
fn ip_header_len(head: &[u8], off: usize, ethertype: u16) -> (usize, u8) {
    match ethertype {
        ETHERTYPE_IPV4 => {
            let ihl = head.get(off).map_or(20, |b| usize::from(b & 0xf) * 4).max(20);
            (ihl, head.get(off + 9).copied().unwrap_or(0))
        }
        ETHERTYPE_IPV6 => {
            let mut len = 40;
            let mut next = head.get(off + 6).copied().unwrap_or(0);
            // Hop-by-hop, routing, fragment and destination options come before the transport
            // header (RFC 8200 4.1).
            while matches!(next, 0 | 43 | 44 | 60) {
                let at = off + len;
                let ext = if next == 44 {
                    8
                } else {
                    head.get(at + 1).map_or(8, |&l| (usize::from(l) + 1) * 8)
                };
                next = head.get(at).copied().unwrap_or(59);
                len += ext;
            }
            (len, next)
        }
        _ => (0, 0),
    }
}

/// Length of the TCP (data offset) or UDP header at `off`; 0 for another protocol.
fn l4_header_len(head: &[u8], off: usize, proto: u8) -> usize {
    match proto {
        IPPROTO_TCP => head.get(off + 12).map_or(20, |b| usize::from(b >> 4) * 4).max(20),
        IPPROTO_UDP => 8,
        _ => 0,
    }
}
