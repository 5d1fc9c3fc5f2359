//! AF_XDP ports: `xdp:IFNAME[/QUEUE][,OPTION]...`.
//!
//! | spec | meaning |
//! |---|---|
//! | `xdp:veth0` | every receive queue of veth0; queue id `q` of the port is the interface's queue `q` |
//! | `xdp:veth0/3` | only queue 3 of veth0, as the port's queue 0 |
//! | `xdp:veth0,rule=udp dst-port 4789` | steal only VXLAN (the option repeats: one rule each; the rule syntax is `flow::syntax`'s) |
//! | `xdp:veth0,rule=any` | **promiscuous: steals every frame from Linux** (ARP, SSH…), see [`FlowRule::promiscuous`] |
//! | `xdp:veth0,netns=blue` | the interface of network namespace `blue` (`/var/run/netns/blue`) |
//! | `xdp:veth0,mode=native` / `mode=generic` | attach the XDP program only in driver (native) / SKB (generic) mode; default: native, then generic |
//! | `xdp:veth0,bind=copy` / `bind=zerocopy` | force the socket's mode; default: zero-copy, then copy |
//!
//! **Which frames a port takes.** Without `rule=` options a port gets the default rules of
//! `flow::rule`: frames to the interface's own MAC are stolen ([`FlowRule::own_mac`]), and
//! multicast is copied ([`FlowRule::multicast_copy`]). XDP has one verdict per frame, so a copy
//! rule cannot be honoured: multicast and broadcast (ARP requests, neighbour discovery) simply
//! stay with Linux. With `rule=` options, those rules replace the defaults. The rules are compiled
//! at open time into an XDP program ([`crate::flow::bpf::compile_xdp`]): a frame some stealing
//! rule matches goes, through an XSKMAP indexed by the receiving queue, to the AF_XDP socket of
//! that queue (or to Linux when no RX queue is open on it); everything else is `XDP_PASS`ed to
//! Linux. The program is attached with `BPF_LINK_CREATE`, so it disappears when the port is
//! dropped or the process dies, even by SIGKILL.
//!
//! **Queues.** Each queue id gets one AF_XDP socket per thread, bound to that interface queue,
//! with all four rings (fill, completion, RX, TX) in our own Rust (`ring.rs`); its RX queue and
//! TX queue share it, so both must be created on the same thread over the same pool. The UMEM is
//! the pool's own memory (`socket.rs`): no copy between UMEM frames and pool buffers. Queues of
//! different ids go to different threads (one per core), each with its own pool.
//!
//! **Modes**, chosen automatically and reported on stderr per socket and in
//! [`Port::description`](crate::Port::description): the program in native (driver) mode if the
//! driver has it, else generic mode; the socket in zero-copy mode if the driver supports it, else
//! copy mode (veth: native + copy). `need_wakeup` is always requested: the data path makes a
//! `sendto`/`recvfrom` only when the kernel's ring flag asks for one.
//!
//! **Needs** root, or `CAP_NET_ADMIN`, `CAP_NET_RAW`, `CAP_BPF` and `CAP_IPC_LOCK` (or a memlock
//! limit covering the pool); Linux 5.9+ (XDP BPF links) with `CONFIG_XDP_SOCKETS`; pool buffers of
//! 2048 or 4096 bytes (one UMEM chunk each). Received frames start 256 bytes into their buffer
//! (`XDP_PACKET_HEADROOM`).
//!
//! [`FlowRule::own_mac`]: crate::flow::rule::FlowRule::own_mac
//! [`FlowRule::multicast_copy`]: crate::flow::rule::FlowRule::multicast_copy
//! [`FlowRule::promiscuous`]: crate::flow::rule::FlowRule::promiscuous

pub(crate) mod port;
pub(crate) mod ring;
pub(crate) mod socket;

use crate::flow::rule::FlowRule;
use crate::spec::{Backend, PortOptions};
use crate::Error;
use socket::BindMode;

/// Where the XDP program may be attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttachMode {
    Auto,
    Native,
    Generic,
}

/// A parsed `xdp:` spec.
#[derive(Clone, Debug)]
pub(crate) struct XdpSpec {
    pub ifname: String,
    pub queue: Option<u32>,
    pub rules: Option<Vec<FlowRule>>,
    pub netns: Option<String>,
    pub attach: AttachMode,
    pub bind: BindMode,
}

pub(crate) fn parse_spec(rest: &str) -> Result<XdpSpec, Error> {
    let bad = |m: String| Error::Spec(format!("xdp:{rest}: {m}"));
    let mut parts = rest.split(',');
    let head = parts.next().unwrap_or("");
    let (ifname, queue) = match head.split_once('/') {
        Some((i, q)) => {
            let q: u32 = q
                .parse()
                .map_err(|_| bad(format!("queue {q:?} is not a number; expected xdp:IFNAME/QUEUE")))?;
            (i, Some(q))
        }
        None => (head, None),
    };
    if ifname.is_empty() {
        return Err(bad("no interface name; expected xdp:IFNAME[/QUEUE][,rule=...]".into()));
    }
    if ifname.len() >= libc::IFNAMSIZ || ifname.contains(['\0', ' ', ':']) {
        return Err(bad(format!(
            "{ifname:?} is not an interface name (at most {} characters, no spaces)",
            libc::IFNAMSIZ - 1
        )));
    }
    let mut spec = XdpSpec {
        ifname: ifname.to_string(),
        queue,
        rules: None,
        netns: None,
        attach: AttachMode::Auto,
        bind: BindMode::Auto,
    };
    for opt in parts {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| bad(format!("option {opt:?}: expected KEY=VALUE")))?;
        match (k.trim(), v.trim()) {
            ("rule", r) => {
                let rule: FlowRule = r.parse().map_err(|e| bad(format!("rule {r:?}: {e:#}")))?;
                spec.rules.get_or_insert_with(Vec::new).push(rule);
            }
            ("netns", n) if !n.is_empty() && !n.contains('/') => spec.netns = Some(n.to_string()),
            ("mode", "auto") => spec.attach = AttachMode::Auto,
            ("mode", "native" | "drv") => spec.attach = AttachMode::Native,
            ("mode", "generic" | "skb") => spec.attach = AttachMode::Generic,
            ("bind", "auto") => spec.bind = BindMode::Auto,
            ("bind", "copy") => spec.bind = BindMode::Copy,
            ("bind", "zerocopy" | "zc") => spec.bind = BindMode::ZeroCopy,
            (k, v) => {
                return Err(bad(format!(
                    "option {k}={v:?} not understood; options: rule=RULE, netns=NAME, mode=auto|native|generic, \
                     bind=auto|copy|zerocopy"
                )))
            }
        }
    }
    Ok(spec)
}

/// Opens an xdp port. Rules given in the spec (`rule=`) come first; the options' rules (or
/// promiscuous mode) apply when the spec names none.
pub(crate) fn open_port(rest: &str, opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    let mut spec = parse_spec(rest)?;
    if spec.rules.is_none() {
        if opts.promiscuous {
            spec.rules = Some(vec![FlowRule::promiscuous()]);
        } else if !opts.rules.is_empty() {
            spec.rules = Some(opts.rules.clone());
        }
    }
    Ok(Box::new(port::open(spec)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s = parse_spec("veth0").unwrap();
        assert_eq!((s.ifname.as_str(), s.queue, s.rules.is_none()), ("veth0", None, true));
        let s = parse_spec("veth0/3,rule=udp dst-port 4789,rule=ethertype 0x88b5,netns=blue,mode=generic,bind=copy")
            .unwrap();
        assert_eq!(s.queue, Some(3));
        assert_eq!(s.rules.as_ref().unwrap().len(), 2);
        assert_eq!(s.rules.as_ref().unwrap()[0].dst_port, Some(4789));
        assert_eq!(s.netns.as_deref(), Some("blue"));
        assert_eq!((s.attach, s.bind), (AttachMode::Generic, BindMode::Copy));
    }

    #[test]
    fn bad_specs_are_one_line_errors() {
        for (spec, want) in [
            ("", "no interface name"),
            ("/1", "no interface name"),
            ("veth0/x", "not a number"),
            ("veth0,rule=udp dst-port", "rule"),
            ("veth0,colour=blue", "not understood"),
            ("veth0,mode=fast", "not understood"),
            ("averyveryverylongname0", "not an interface name"),
        ] {
            let e = parse_spec(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{spec:?}: {e}");
        }
    }
}
