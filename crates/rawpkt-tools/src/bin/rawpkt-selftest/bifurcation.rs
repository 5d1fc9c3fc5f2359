//! The bifurcation step: with rawpkt's default rules installed on the port under test (its
//! receive queue open), Linux keeps the netdev's address: ARP, neighbour discovery, ICMP echo and
//! a TCP connection from a peer namespace work, while UDP to the address is rawpkt's. Runs
//! `ip`, `ping` and `bash` in the peer namespace (root).

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rawpkt::{Burst, Pool, PoolConfig, Port, QueueConfig};

use crate::json::J;
use crate::steps::Status;

/// UDP datagrams the peer sends to the address.
const UDP_DATAGRAMS: u64 = 100;

fn sh(args: &[&str]) -> Option<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first address of `family` (`-4`, `-6`) and `scope` on `dev` (`ip -o addr`), in namespace
/// `ns` if given: (address, device).
fn address(ns: Option<&str>, family: &str, scope: &str, dev: Option<&str>) -> Option<(String, String)> {
    let mut args = vec!["ip"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend([family, "-o", "addr", "show"]);
    if let Some(d) = dev {
        args.extend(["dev", d]);
    }
    args.extend(["scope", scope]);
    let text = sh(&args)?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let dev = f.get(1)?.trim_end_matches(':').to_string();
        let at = f.iter().position(|w| *w == "inet" || *w == "inet6")?;
        let addr = f.get(at + 1)?.split('/').next()?.to_string();
        (dev != "lo").then_some((addr, dev))
    })
}

/// Linux's UDP datagrams received (`/proc/net/snmp`, Udp InDatagrams).
fn udp_in() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = udp.next()?.split_whitespace().collect();
    let values: Vec<&str> = udp.next()?.split_whitespace().collect();
    let at = names.iter().position(|n| *n == "InDatagrams")?;
    values.get(at)?.parse().ok()
}

pub fn run(dut: &Port, netdev: &str, ns: &str) -> (Status, String, J) {
    // SAFETY: geteuid has no preconditions.
    #[allow(unsafe_code)]
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        return (Status::Skip, "needs root (ip netns exec)".into(), J::obj());
    }
    let Some((v4, _)) = address(None, "-4", "global", Some(netdev)) else {
        return (Status::Skip, format!("{netdev} has no IPv4 address"), J::obj());
    };
    let v6 = address(None, "-6", "link", Some(netdev)).map(|a| a.0);
    let Some((_, peer_if)) = address(Some(ns), "-4", "global", None) else {
        return (
            Status::Skip,
            format!("namespace {ns} has no interface with an IPv4 address"),
            J::obj(),
        );
    };
    // rawpkt's queue: its default rules take UDP and the experimental EtherTypes to the MAC.
    let pool = match Pool::new(PoolConfig::default().buffers(8192)) {
        Ok(p) => p,
        Err(e) => return (Status::Fail, format!("packet pool: {e}"), J::obj()),
    };
    let mut rx = match dut.rx_queue(0, &pool, &QueueConfig::default()) {
        Ok(q) => q,
        Err(e) => return (Status::Fail, format!("receive queue: {e}"), J::obj()),
    };
    let listener = match v4.parse().map(|ip| TcpListener::bind(SocketAddr::new(ip, 0))) {
        Ok(Ok(l)) => l,
        _ => return (Status::Fail, format!("cannot listen on {v4}"), J::obj()),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let _ = listener.set_nonblocking(true);
    let exec = |cmd: &[&str]| {
        let mut args = vec!["ip", "netns", "exec", ns];
        args.extend(cmd);
        sh(&args).is_some()
    };
    let _ = sh(&["ip", "-n", ns, "neigh", "flush", "dev", &peer_if]);
    let icmp4 = exec(&["ping", "-c", "2", "-W", "2", &v4]);
    let arp = sh(&["ip", "-n", ns, "neigh", "show", &v4, "dev", &peer_if]).is_some_and(|t| t.contains("lladdr"));
    let target6 = v6.as_ref().map(|a| format!("{a}%{peer_if}"));
    let icmp6 = target6.as_ref().map(|t| exec(&["ping", "-6", "-c", "2", "-W", "2", t]));
    let nd = v6.as_ref().map(|a| {
        sh(&["ip", "-n", ns, "-6", "neigh", "show", a, "dev", &peer_if]).is_some_and(|t| t.contains("lladdr"))
    });
    let connect = format!("exec 3<>/dev/tcp/{v4}/{port}");
    let tcp_client = exec(&["timeout", "5", "bash", "-c", &connect]);
    let t = Instant::now();
    let mut accepted = false;
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.read(&mut [0u8; 1]);
            accepted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let tcp = tcp_client && accepted;
    // UDP to the address: rawpkt's, not Linux's.
    let udp_before = udp_in();
    let send = format!("for i in $(seq {UDP_DATAGRAMS}); do echo x > /dev/udp/{v4}/9; done");
    let _ = exec(&["bash", "-c", &send]);
    let mut got = Burst::new(&pool, 64);
    let mut rawpkt_rx = 0u64;
    let t = Instant::now();
    while rawpkt_rx < UDP_DATAGRAMS && t.elapsed() < Duration::from_secs(5) {
        match rx.rx_burst(&mut got) {
            Ok(0) => std::thread::sleep(Duration::from_millis(1)),
            Ok(_) => {
                for i in 0..got.len() {
                    let d = got.data(i);
                    // IPv4, UDP, to port 9.
                    if d.len() >= 38 && d[12..14] == [0x08, 0x00] && d[23] == 17 && d[36..38] == [0, 9] {
                        rawpkt_rx += 1;
                    }
                }
                got.clear();
            }
            Err(_) => break,
        }
    }
    let udp_delta = match (udp_before, udp_in()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let udp_ok = rawpkt_rx == UDP_DATAGRAMS;
    let checks = J::obj()
        .with("arp", arp)
        .with("nd", nd)
        .with("icmp4", icmp4)
        .with("icmp6", icmp6)
        .with("tcp", tcp);
    let fields = J::obj()
        .with("addr_v4", v4.as_str())
        .with("addr_v6", v6.clone())
        .with("peer_netns", ns)
        .with("peer_if", peer_if.as_str())
        .with("checks", checks)
        .with(
            "udp",
            J::obj()
                .with("sent", UDP_DATAGRAMS)
                .with("rawpkt_rx", rawpkt_rx)
                .with("linux_udp_in_delta", udp_delta),
        );
    let mut bad = Vec::new();
    for (name, ok) in [
        ("ARP", Some(arp)),
        ("ND", nd),
        ("ICMP", Some(icmp4)),
        ("ICMPv6", icmp6),
        ("TCP", Some(tcp)),
        ("UDP to rawpkt", Some(udp_ok)),
    ] {
        if ok == Some(false) {
            bad.push(name);
        }
    }
    if bad.is_empty() {
        (
            Status::Pass,
            format!(
                "ARP, {}ping and TCP to {v4} from {ns} work; {rawpkt_rx} UDP datagrams went to rawpkt",
                if v6.is_some() { "ND, " } else { "" }
            ),
            fields,
        )
    } else {
        (Status::Fail, format!("{} failed", bad.join(", ")), fields)
    }
}
