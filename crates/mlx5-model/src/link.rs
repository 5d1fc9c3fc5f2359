//! What a model port's cable is plugged into: its link (`rawpkt_wire::wire` is another thing, the
//! header views of a frame).

use std::collections::VecDeque;

pub use rawpkt_sys::afpacket::AfPacket;

pub enum Link {
    /// Back to back with another port of the same NIC.
    Peer(usize),
    /// Frames sent come back in on the same port.
    Loopback,
    /// Frames sent are kept for a test to inspect (`Nic::take_captured`).
    Capture(VecDeque<Vec<u8>>),
    /// A Linux interface, through an AF_PACKET socket: frames reach real (veth) interfaces.
    AfPacket(AfPacket),
    /// Frames sent vanish (counted only).
    Null,
}

impl Link {
    pub fn capture() -> Link {
        Link::Capture(VecDeque::new())
    }

    /// Errors keep the system's (ENODEV for no such interface) under words that say where.
    pub fn afpacket(ifname: &str) -> std::io::Result<Link> {
        let ifindex = rawpkt_sys::if_index(ifname).map_err(|e| {
            let text = format!("no network interface named `{}`", rawpkt_wire::text::echo(ifname));
            rawpkt_sys::context(e, text)
        })?;
        AfPacket::open(ifname, ifindex).map(Link::AfPacket)
    }
}
