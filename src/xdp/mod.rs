//! AF_XDP ports: `xdp:IFNAME[/QUEUE][,OPTION]...`.
//!
//! | spec | meaning |
//! |---|---|
//! | `xdp:veth0` | every receive queue of veth0; queue id `q` of the port is the interface's queue `q` |
//! | `xdp:veth0/3` | only queue 3 of veth0, as the port's queue 0 |
//! | `xdp:veth0,rule=udp dst-port 4789` | steal only VXLAN (the option repeats: one rule each; the rule syntax is `flow::syntax`'s; `copy` rules are refused, see below) |
//! | `xdp:veth0,rule=any` | **promiscuous: steals every frame from Linux** (ARP, SSH…), see [`FlowRule::promiscuous`] |
//! | `xdp:veth0,netns=blue` | the interface of network namespace `blue` (`/var/run/netns/blue`) |
//! | `xdp:veth0,mode=native` / `mode=generic` | attach the XDP program only in driver (native) / SKB (generic) mode; default: native, then generic |
//! | `xdp:veth0,bind=copy` / `bind=zerocopy` | force the socket's mode; default: zero-copy, then copy |
//!
//! **Which frames a port takes.** Without rules a port steals what
//! [`PortOptions::default_rules`] names of the frames to the interface's own MAC (by default UDP
//! and the local experimental EtherTypes, [`FlowRule::default_unicast`], so that ARP replies,
//! neighbour discovery, ping and TCP to the interface's address keep working); multicast and
//! broadcast stay with Linux. Rules, from `rule=` options or else from [`PortOptions::rules`], replace that
//! default (on mlx5 ports, `PortOptions::rules` are added to it instead); they may not come from
//! both, and [`PortOptions::promiscuous`] stands for `rule=any`. The rules are compiled at open
//! time into an XDP program ([`crate::flow::bpf::compile_xdp`]): a frame some rule matches goes,
//! through an XSKMAP indexed by the receiving queue, to the AF_XDP socket of that queue (or to
//! Linux when no RX queue is open on it); everything else is `XDP_PASS`ed to Linux. The program
//! is attached with `BPF_LINK_CREATE`, so it disappears when the port is dropped or the process
//! dies, even by SIGKILL.
//!
//! **No copy rules.** XDP gives one verdict per frame and cannot clone it: a frame goes to the
//! socket (`XDP_REDIRECT`) or to Linux (`XDP_PASS`), never both, so a `copy` rule (mlx5's
//! [`FlowRule::multicast_copy`], say) cannot be honoured. Rather than open a port on which such a
//! rule would match nothing, opening one with a copy rule fails with one line, before any system
//! call.
//!
//! **Queues.** The port's queues are the interface's receive queues (`ethtool -L` sets how many),
//! or the one named in the spec, so [`PortOptions::rx_queues`] cannot choose their number: left
//! at its default of 1 it is ignored, and any other value must be the number of queues the port
//! takes, or opening fails. Each queue id gets one AF_XDP socket, bound to that interface queue,
//! with all four rings (fill, completion, RX, TX) in our own Rust (`crate::xsk`). Both halves of
//! a queue come from one call, [`Port::queue_pair`](crate::Port::queue_pair), over one pool;
//! [`Port::rx_queue`](crate::Port::rx_queue) alone makes a socket whose TX ring stays unused, and
//! [`Port::tx_queue`](crate::Port::tx_queue) alone one that receives nothing (no XSKMAP entry).
//! A queue id is taken while any queue made from it lives: asking for it again (an RX queue
//! after a TX queue, say) fails with one line naming `queue_pair`. The UMEM is the pool's own
//! memory: no copy between UMEM frames and pool buffers. Queues of different ids may go to
//! different threads (one per core), each with its own pool.
//!
//! **Modes**, chosen automatically and reported per socket (`log::warn!`, for the tools to show) and in
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
//! [`FlowRule::default_unicast`]: crate::flow::rule::FlowRule::default_unicast
//! [`PortOptions::default_rules`]: crate::PortOptions::default_rules
//! [`FlowRule::multicast_copy`]: crate::flow::rule::FlowRule::multicast_copy
//! [`FlowRule::promiscuous`]: crate::flow::rule::FlowRule::promiscuous
//! [`PortOptions::rules`]: crate::PortOptions::rules
//! [`PortOptions::promiscuous`]: crate::PortOptions::promiscuous
//! [`PortOptions::rx_queues`]: crate::PortOptions::rx_queues

pub(crate) mod port;

use crate::flow::rule::{Action, FlowRule};
use crate::spec::{echo, needs_escape, Backend, PortOptions};
use crate::Error;

/// How to bind a socket: let the kernel's driver decide, or force one mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindMode {
    Auto,
    Copy,
    ZeroCopy,
}

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
    /// [`PortOptions::rx_queues`]: 1 (any number of queues), or the number the port must take.
    pub rx_queues: u16,
    /// [`PortOptions::default_rules`]: what the port takes when no rule is given.
    pub default_rules: crate::spec::DefaultRules,
}

/// Why a copy rule is refused on an xdp port (see the module documentation).
const NO_COPY: &str = "xdp ports cannot copy a frame to both the socket and Linux; use steal (the default)";

pub(crate) fn parse_spec(rest: &str) -> Result<XdpSpec, Error> {
    let bad = |m: String| Error::spec(format!("xdp:{}: {m}", echo(rest)));
    let mut parts = rest.split(',');
    let head = parts.next().unwrap_or("");
    let (ifname, queue) = match head.split_once('/') {
        Some((i, q)) => {
            let q: u32 = q.parse().map_err(|_| {
                bad(format!(
                    "queue `{}` is not a number; expected xdp:IFNAME/QUEUE",
                    echo(q)
                ))
            })?;
            (i, Some(q))
        }
        None => (head, None),
    };
    if ifname.is_empty() {
        return Err(bad("no interface name; expected xdp:IFNAME[/QUEUE][,rule=...]".into()));
    }
    // Linux's `dev_valid_name`: no whitespace, no `/` or `:`.
    if ifname.len() >= libc::IFNAMSIZ || ifname.chars().any(|c| c.is_whitespace() || c == ':' || needs_escape(c)) {
        return Err(bad(format!(
            "`{}` is not an interface name (at most {} characters, no spaces)",
            echo(ifname),
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
        rx_queues: 1,
        default_rules: crate::spec::DefaultRules::default(),
    };
    // Options other than `rule=` take one value: a second one is refused rather than winning.
    let mut given: Vec<(&str, &str)> = Vec::new();
    let mut rules = 0;
    for opt in parts {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| bad(format!("option `{}`: expected KEY=VALUE", echo(opt))))?;
        let (k, v) = (k.trim(), v.trim());
        if k != "rule" {
            if let Some((_, first)) = given.iter().find(|(g, _)| *g == k) {
                return Err(bad(format!(
                    "option {k}= given twice ({k}={}, then {k}={}); give it once",
                    echo(first),
                    echo(v)
                )));
            }
            given.push((k, v));
        }
        match (k, v) {
            ("rule", r) => {
                rules += 1;
                // Named by its place: the spec before the colon shows its text already.
                let rule: FlowRule = r.parse().map_err(|e| bad(format!("rule {rules}: {e:#}")))?;
                if rule.action == Action::Copy {
                    return Err(bad(format!("rule `{}`: {NO_COPY}", echo(r))));
                }
                spec.rules.get_or_insert_with(Vec::new).push(rule);
            }
            ("netns", n) if !n.is_empty() && !n.contains('/') && !n.chars().any(needs_escape) => {
                spec.netns = Some(n.to_string())
            }
            ("mode", "auto") => spec.attach = AttachMode::Auto,
            ("mode", "native" | "drv") => spec.attach = AttachMode::Native,
            ("mode", "generic" | "skb") => spec.attach = AttachMode::Generic,
            ("bind", "auto") => spec.bind = BindMode::Auto,
            ("bind", "copy") => spec.bind = BindMode::Copy,
            ("bind", "zerocopy" | "zc") => spec.bind = BindMode::ZeroCopy,
            (k, v) => {
                return Err(bad(format!(
                    "option `{}={}` not understood; options: rule=RULE, netns=NAME, mode=auto|native|generic, \
                     bind=auto|copy|zerocopy",
                    echo(k),
                    echo(v)
                )))
            }
        }
    }
    Ok(spec)
}

/// Opens an xdp port. Its rules come from the spec (`rule=`) or from the options (their rules, or
/// promiscuous mode), not both; either replaces the default (the interface's own MAC).
pub(crate) fn open_port(rest: &str, opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    Ok(Box::new(port::open(spec_with_options(rest, opts)?)?))
}

/// [`parse_spec`], then the options checked and merged in: everything that can be refused
/// without a system call is refused here.
pub(crate) fn spec_with_options(rest: &str, opts: &PortOptions) -> Result<XdpSpec, Error> {
    let mut spec = parse_spec(rest)?;
    let bad = |m: String| Error::config(format!("xdp:{rest}: {m}"));
    if let Some(r) = opts.rules.iter().find(|r| r.action == Action::Copy) {
        return Err(bad(format!("PortOptions rule \"{r}\": {NO_COPY}")));
    }
    let from_options = if opts.promiscuous {
        Some(vec![FlowRule::promiscuous()])
    } else if !opts.rules.is_empty() {
        Some(opts.rules.clone())
    } else {
        None
    };
    match (&spec.rules, from_options) {
        (Some(_), Some(_)) => {
            return Err(bad(format!(
                "rules in both the spec (rule=) and PortOptions ({}); give them in one place",
                if opts.promiscuous { "promiscuous" } else { "rules" }
            )))
        }
        (None, Some(r)) => spec.rules = Some(r),
        _ => {}
    }
    spec.rx_queues = opts.rx_queues;
    spec.default_rules = opts.default_rules;
    Ok(spec)
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
            (
                "veth0,netns=A,netns=B",
                "option netns= given twice (netns=A, then netns=B)",
            ),
            ("veth0,mode=native,mode=generic", "option mode= given twice"),
            ("veth0,mode=native,rule=udp,mode=native", "option mode= given twice"),
            ("veth0,bind=copy,bind=zerocopy", "option bind= given twice"),
            (
                "veth0,rule=udp dst-port 53,rule=udp\x07",
                r"rule 2: column 1: unknown word `udp\u{7}`",
            ),
            ("veth\n0", "not an interface name"),
            ("veth0,netns=a\nb", "not understood"),
            ("averyveryverylongname0", "not an interface name"),
            (
                "veth0,rule=udp dst-port 53 copy",
                "cannot copy a frame to both the socket and Linux",
            ),
            (
                "veth0,rule=udp dst-port 53,rule=any copy priority 1",
                "use steal (the default)",
            ),
        ] {
            let e = parse_spec(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{spec:?}: {e}");
        }
    }

    fn opts(rules: &[&str], promiscuous: bool, rx_queues: u16) -> PortOptions {
        PortOptions {
            rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
            promiscuous,
            rx_queues,
            ..PortOptions::default()
        }
    }

    #[test]
    fn options_merge_into_the_spec() {
        let s = spec_with_options("veth0", &opts(&["udp dst-port 53"], false, 1)).unwrap();
        assert_eq!(s.rules.unwrap(), vec!["udp dst-port 53".parse::<FlowRule>().unwrap()]);
        let s = spec_with_options("veth0", &opts(&[], true, 4)).unwrap();
        assert_eq!((s.rules.unwrap(), s.rx_queues), (vec![FlowRule::promiscuous()], 4));
        let s = spec_with_options("veth0,rule=ethertype 0x88b5", &PortOptions::default()).unwrap();
        assert_eq!(s.rules.unwrap().len(), 1);
        assert!(spec_with_options("veth0", &PortOptions::default())
            .unwrap()
            .rules
            .is_none());
    }

    /// Options an xdp port cannot honour are refused before any system call, in one line.
    #[test]
    fn options_that_cannot_be_honoured_are_refused() {
        for (spec, o, want) in [
            (
                "veth0",
                opts(&["udp dst-port 53 copy"], false, 1),
                "cannot copy a frame",
            ),
            ("veth0", opts(&["udp", "vlan 3"], true, 1), "both rules and promiscuous"),
            (
                "veth0,rule=udp",
                opts(&["vlan 3"], false, 1),
                "both the spec (rule=) and PortOptions (rules)",
            ),
            (
                "veth0,rule=udp",
                opts(&[], true, 1),
                "both the spec (rule=) and PortOptions (promiscuous)",
            ),
        ] {
            // Through open_with: rules beside promiscuous are refused there, for every backend.
            let e = crate::open_with(&format!("xdp:{spec}"), &o)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{spec:?}: {e}");
        }
    }
}
