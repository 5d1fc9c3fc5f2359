//! Command line: parsed by clap, then checked into a `Config` so that every bad value becomes one
//! clear line before any port is opened.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

/// What the figures mean, in short (docs/pktgen.md has the table), then the tools' exit status
/// rule and pktgen's own kind of failure.
fn exit_status() -> String {
    let status = rawpkt_tools::fail::exit_status(
        "pktgen",
        ", or frames sent and not one received (as ping exits 1 when no reply came)",
    );
    format!(
        "Figures: every frame carries its stream and a sequence number. \"in flight\": sent, and neither \
received nor known lost (on its way, or overtaken); \"lost\": a number that never arrived (per \
second: once 65536 later ones of its core did; in the summary: after the drain); \"duplicated\": \
a number that arrived again; \"out of order\": arrived after a higher number of its core. Rates \
are over the time the cores sent (the summary's \"rates over ... of sending\", JSON seconds and active_ns); \
Gbit/s counts FCS, preamble and gap. Times: µs in the text, ns in the JSON. docs/pktgen.md \
(\"What the figures mean\") defines every field, JSON and Prometheus names alike.\n\n{}\n\n{status}",
        rawpkt_tools::env::model_profiles_help()
    )
}

/// pktgen: sends Ethernet/IP/UDP traffic from pinned cores and receives it, with per-second
/// rates, latency and capture.
///
/// With no port at all it runs on a built-in model NIC pair (no hardware needed), sending on one
/// port and receiving on the other.
#[derive(Parser, Debug)]
// No bare `about`: it would take the crate's description (the library's) instead of the doc
// comment above, which says what pktgen does.
#[command(name = "pktgen", version, after_help = exit_status())]
pub(crate) struct Args {
    /// Port to transmit on (e.g. model:pair0/0); repeat it with --rx-port for several port
    /// pairs in one run, paired in order, each direction counted apart.
    #[arg(long)]
    pub port: Vec<String>,
    /// Port to receive, count and measure latency on (every receive queue it has); one per
    /// --port when there are several.
    #[arg(long)]
    pub rx_port: Vec<String>,
    /// Send both ways: each pair's receive port also sends to its --port, which also receives
    /// (each direction counted apart).
    #[arg(long)]
    pub bidir: bool,
    /// L3 mode: frames go to this next hop's MAC, from the Linux neighbour table of the sending
    /// port's netdev (mlx5: and xdp: ports), which pktgen asks the kernel to resolve (ARP or
    /// neighbour discovery) first, waiting at most 3 s.
    #[arg(long, value_name = "IP")]
    pub gateway: Option<IpAddr>,
    #[arg(long, default_value = "02:00:00:00:00:01")]
    pub src_mac: String,
    /// Destination MAC [default: the receive port's own address when it has one (mlx5:,
    /// verbs:, xdp: ports take only frames addressed to them), else 02:00:00:00:00:02].
    #[arg(long)]
    pub dst_mac: Option<String>,
    #[arg(long, default_value = "10.0.0.1")]
    pub src_ip: IpAddr,
    #[arg(long, default_value = "10.0.0.2")]
    pub dst_ip: IpAddr,
    /// UDP source port (the first of --flows).
    #[arg(long, default_value_t = DEFAULT_SRC_PORT)]
    pub src_port: u16,
    /// UDP destination port (the latency stream's is the next one).
    #[arg(long, default_value_t = DEFAULT_DST_PORT)]
    pub dst_port: u16,
    /// Flows, varied per packet through the UDP source port (src-port .. src-port + flows - 1).
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Frame size in bytes without FCS (60..=1514), or "imix" (7:4:1 of 60, 590, 1514)
    /// [default: 60, or the smallest frame that holds --vlan/--encap headers and the stamp].
    #[arg(long)]
    pub size: Option<String>,
    /// Rate over all cores: packets per second, at least 1 (1M, 500k, 14.88Mpps); a bit rate,
    /// by default L1, as a link's line rate counts (frame, FCS, preamble, SFD and inter-frame
    /// gap: --size + 24 bytes a frame; TRex's bps_L1), e.g. 2Gbps, 500Mbps, or L2 with -l2
    /// (frame and FCS: --size + 4; TRex's bps_L2), e.g. 2Gbps-l2; or a percentage of the sending
    /// port's line rate, at L1 (50%; the port's link speed, refused where it reports none).
    /// Each stream's frames' mean size turns a bit rate into packets per second (said on stderr).
    #[arg(long)]
    pub rate: Option<String>,
    /// Stop after this many packets.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Transmit cores, each with its own pool and send queues (on an xdp: port, at most its
    /// queues: each core takes its own).
    #[arg(long, default_value_t = 1)]
    pub cores: usize,
    /// Send queues per core, 1 to 8 [default: as many as --rate per core needs at what one send
    /// queue of the device takes (a ConnectX-4's about 16 Mpps), else 1].
    #[arg(long)]
    pub queues_per_core: Option<u16>,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Replay the frames of this pcap or pcapng file instead of generating them.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Replay at the file's own pace times this factor (10: ten times as fast), or "max": back
    /// to back, as fast as the ring takes them (then --rate and --shape apply); with --pcap
    /// [default: 1].
    #[arg(long, value_name = "FACTOR|max")]
    pub pcap_speed: Option<String>,
    /// Replay the file this many times, then stop [default: until --count or --duration].
    #[arg(long, value_name = "N")]
    pub pcap_loops: Option<u64>,
    /// Write received frames to this pcap file (pcapng when its name ends in .pcapng).
    #[arg(long)]
    pub capture: Option<PathBuf>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// How departures spread at --rate: constant, poisson (exponential gaps) or bursts:N
    /// (N back to back every N / rate).
    #[arg(long, default_value = "constant")]
    pub shape: String,
    /// Several streams from a file ([[stream]] tables; docs/pktgen.md has the schema): a regular
    /// file of at most 1 MiB, or - for standard input; what a stream leaves out comes from the
    /// options above.
    // The doc comment is clap's help text, printed as written: `[[stream]]` is no link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "FILE")]
    pub streams: Option<PathBuf>,
    /// Rate of the latency stream sent beside the load on a queue of its own (on a port whose
    /// send queues the load takes, an xdp: port's, on the first core's, said on stderr), or
    /// "off" [default: 1000 with a receive port, except with --pcap]. A stream of which not one
    /// frame arrives fails the run.
    #[arg(long, value_name = "RATE|off")]
    pub latency_rate: Option<String>,
    /// VLAN ID, or two (QinQ: outer 802.1ad tag, then 802.1Q), e.g. 100 or 100,200.
    #[arg(long, value_name = "VID[,VID]")]
    pub vlan: Option<String>,
    /// Encapsulation: none, vxlan:VNI (outer UDP to 4789) or gre, over --outer-src-ip/--outer-dst-ip.
    #[arg(long, default_value = "none", value_name = "none|vxlan:VNI|gre")]
    pub encap: String,
    #[arg(long, default_value = "192.168.0.1")]
    pub outer_src_ip: IpAddr,
    #[arg(long, default_value = "192.168.0.2")]
    pub outer_dst_ip: IpAddr,
    /// A field varying per packet over N values from the template's, in turn or at random:
    /// src-ip, dst-ip, src-port, dst-port, src-mac or dst-mac (repeatable), e.g. dst-ip:256:random.
    #[arg(long, value_name = "FIELD:N[:random]")]
    pub range: Vec<String>,
    /// RFC 2544 throughput: for each --search-sizes, by binary search, the NDR (the highest
    /// rate at which a --trial loses no frame) and the PDR (at most --loss-threshold), each
    /// confirmed by a final trial at that rate; a table (or JSON) at the end.
    #[arg(long)]
    pub search: bool,
    /// Frame sizes the search measures, with --search [default: 60,124,252,508,1020,1276,1514,
    /// RFC 2544's].
    #[arg(long, value_name = "SIZES")]
    pub search_sizes: Option<String>,
    /// Seconds per search trial, with --search [default: 2].
    #[arg(long, value_name = "S")]
    pub trial: Option<f64>,
    /// Search until the bracket is this narrow: a percentage of its top, or a rate; with
    /// --search [default: 1%].
    #[arg(long, value_name = "PCT%|RATE")]
    pub resolution: Option<String>,
    /// Loss a trial may have and pass for the PDR, in percent (the NDR allows none); with
    /// --search [default: 0.5].
    #[arg(long, value_name = "PCT")]
    pub loss_threshold: Option<f64>,
    /// Latency from the device's clock: senders stamp frames with the NIC's clock
    /// (`Port::device_clock_ns`), the receiver takes each frame's receive timestamp; both ports
    /// must be on one device clock (one model NIC, or one mlx5 device).
    #[arg(long)]
    pub hw_timestamps: bool,
    /// The receive queue: cyclic (one 64-byte completion per frame), compressed (CQE
    /// compression), striding (a striding RQ, ConnectX-5 and later) or striding+compressed;
    /// mlx5: and model: ports [default: QueueConfig's, compressed].
    #[arg(long, value_name = "MODE")]
    pub rx_mode: Option<String>,
    /// Serve live counters in Prometheus text format at http://ADDR/metrics (a loopback
    /// address, e.g. 127.0.0.1:9101; port 0: one the system chooses, said on stderr and in the
    /// JSON summary).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Live control at http://ADDR (a loopback address; port 0: one the system chooses, said
    /// on stderr): GET /stats, POST /streams/ID/rate {"pps": N}, POST /streams/ID/pause and
    /// /resume, POST /stop (docs/pktgen.md).
    #[arg(long, value_name = "ADDR")]
    pub control: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    Fixed(usize),
    Imix,
}

/// Simple IMIX: 7 small, 4 medium, 1 large (sizes without FCS).
pub(crate) const IMIX: [(usize, u32); 3] = [(60, 7), (590, 4), (1514, 1)];

#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The first direction's ports (the only ones in most runs).
    pub tx_port: String,
    pub rx_port: Option<String>,
    /// Every direction: (sending port, receiving port), the first one `tx_port`, `rx_port`.
    pub directions: Vec<(String, Option<String>)>,
    /// --gateway: the destination MAC is this next hop's, from the sending port's netdev.
    pub gateway: Option<IpAddr>,
    pub src_mac: [u8; 6],
    /// None: the receive port's MAC, else [`DEFAULT_DST_MAC`].
    pub dst_mac: Option<[u8; 6]>,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub flows: u32,
    pub size: Size,
    pub rate: Option<crate::rate::Rate>,
    pub count: Option<u64>,
    pub duration: Option<f64>,
    pub cores: usize,
    /// As asked; None: chosen from the rate and the device (`sendq::per_core`).
    pub queues_per_core: Option<u16>,
    pub burst: usize,
    pub pcap: Option<PathBuf>,
    pub capture: Option<PathBuf>,
    pub json: bool,
    pub shape: crate::stream::Shape,
    pub streams: Option<PathBuf>,
    /// The latency stream's rate, if there is one.
    pub latency_rate: Option<f64>,
    /// A replay's pace: the file's times divided by this factor; None: back to back.
    pub pcap_speed: Option<f64>,
    pub pcap_loops: Option<u64>,
    pub metrics: Option<std::net::SocketAddr>,
    pub control: Option<std::net::SocketAddr>,
    /// Stamps and latency on the ports' device clock (--hw-timestamps).
    pub hw_timestamps: bool,
    /// The receive queue's configuration before its size and timestamps: `QueueConfig`'s
    /// default, or the receive mode --rx-mode names (`QueueConfig::with_rx_mode`).
    pub rx_queue: rawpkt::QueueConfig,
    /// Whether --rx-mode was given.
    pub rx_mode_asked: bool,
    pub headers: crate::template::Headers,
    pub ranges: Vec<crate::template::Range>,
}

/// The default UDP ports: frames that tshark shows as plain UDP data, not as some other
/// protocol's (malformed) packets. Wireshark's UDP dissector hands a datagram to the dissector
/// registered for its lower port, else for its higher one, so both must be free of
/// registrations, and so must the source ports --flows adds (src-port .. src-port + flows - 1)
/// and the latency stream's destination (dst-port + 1). UDP 5678 is MikroTik's MNDP (Wireshark's
/// `packet-mndp.c`); TRex's 1025 and 12 are free in Wireshark but not in IANA's registry (1025 is
/// "blackjack"). These are in IANA's dynamic range, 49152-65535, which RFC 6335 keeps from
/// assignment, and inside the widest span of it that no dissector of Wireshark 4.0 registers
/// (`tshark -G decodes`: nothing between 49999, nxp_802154_sniffer, and 54328, elasticsearch):
/// 4328 flows from 50000 stay in it.
pub(crate) const DEFAULT_SRC_PORT: u16 = 50000;
pub(crate) const DEFAULT_DST_PORT: u16 = 51000;

/// Where frames go when neither --dst-mac nor the receive port names an address.
pub(crate) const DEFAULT_DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn mac(what: &str, s: &str) -> Result<[u8; 6], String> {
    rawpkt_wire::rule::parse_mac(s)
        .ok_or_else(|| format!("--{what} {s:?}: expected six hex bytes like 02:00:00:00:00:01"))
}

/// A rate in packets per second only: "1M", "500k", "14.88M", "1e6", "250000".
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    match crate::rate::parse_rate(s) {
        Ok(crate::rate::Rate::Pps(p)) => Ok(p),
        Ok(_) => Err(format!("--rate {s:?}: expected packets per second, like 1M or 500k")),
        Err(e) => Err(format!(
            "--rate {}",
            e.replace(crate::rate::SYNTAX, "expected packets per second, like 1M or 500k")
        )),
    }
}

/// "100" or "100,200": one VLAN ID or two (QinQ), each from 0 to 4094 (IEEE 802.1Q reserves
/// 4095, and a bridge discards frames that carry it; 0 is a priority tag, no VLAN).
pub(crate) fn vlans(s: &str) -> Result<Vec<u16>, String> {
    let v: Vec<u16> = s
        .split(',')
        .map(|x| x.trim().parse::<u16>().ok().filter(|&v| v < 4095))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!("{s:?}: expected a VLAN ID from 0 to 4094 (4095 is reserved), or two (QinQ) like 100,200")
        })?;
    if v.len() > 2 {
        return Err(format!("{s:?}: at most two VLAN tags (QinQ)"));
    }
    Ok(v)
}

/// "60" .. "1514", or "imix".
pub(crate) fn size(s: &str) -> Result<Size, String> {
    match s {
        "imix" | "IMIX" => Ok(Size::Imix),
        s => match s.parse::<usize>() {
            Ok(n) if (60..=1514).contains(&n) => Ok(Size::Fixed(n)),
            _ => Err(format!(
                "--size {s:?}: expected a frame size from 60 to 1514 bytes, or imix"
            )),
        },
    }
}

/// The latency stream's rate: 1000 packets a second by default, as TRex's latency streams and
/// MoonGen's timestamping examples send about a thousand a second: enough for percentiles each
/// second, and too few to change the load or to queue behind one another.
pub(crate) const LATENCY_RATE: f64 = 1000.0;

impl Config {
    pub(crate) fn from_args(a: Args) -> Result<Config, String> {
        let mut directions: Vec<(String, Option<String>)> = match (a.port.len(), a.rx_port.len()) {
            (0, 0) => vec![("model:pktgen/0".to_string(), Some("model:pktgen/1".to_string()))],
            (0, _) => return Err("--rx-port needs --port to say where to transmit".into()),
            (1, 0) => vec![(a.port[0].clone(), None)],
            (n, m) if n == m => a
                .port
                .iter()
                .cloned()
                .zip(a.rx_port.iter().cloned().map(Some))
                .collect(),
            (n, m) => {
                return Err(format!(
                    "{n} --port and {m} --rx-port: several pairs need one --rx-port per --port, paired in order"
                ))
            }
        };
        if a.bidir {
            if directions.iter().any(|d| d.1.is_none()) {
                return Err("--bidir needs --rx-port (or no port at all: the model pair)".into());
            }
            directions = directions
                .into_iter()
                .flat_map(|(tx, rx)| {
                    let rx = rx.unwrap_or_default();
                    [(tx.clone(), Some(rx.clone())), (rx, Some(tx))]
                })
                .collect();
        }
        let (tx_port, rx_port) = directions[0].clone();
        if directions.len() > 1 {
            for (given, name) in [
                (a.control.is_some(), "--control"),
                (a.capture.is_some(), "--capture"),
                (a.pcap.is_some(), "--pcap"),
            ] {
                if given {
                    return Err(format!(
                        "{name} takes one direction: one --port and --rx-port, without --bidir"
                    ));
                }
            }
        }
        if a.gateway.is_some() && a.dst_mac.is_some() {
            return Err("--gateway and --dst-mac both name the destination MAC: give one".into());
        }
        if a.capture.is_some() && rx_port.is_none() {
            return Err("--capture needs --rx-port (or no port at all: the model pair)".into());
        }
        let given = a.size.as_deref().map(size).transpose()?;
        if a.src_ip.is_ipv4() != a.dst_ip.is_ipv4() {
            return Err("--src-ip and --dst-ip must both be IPv4 or both IPv6".into());
        }
        let headers = crate::template::Headers {
            vlan: a
                .vlan
                .as_deref()
                .map(vlans)
                .transpose()
                .map_err(|e| format!("--vlan {e}"))?
                .unwrap_or_default(),
            encap: crate::template::Encap::parse(&a.encap).map_err(|e| format!("--encap {e}"))?,
            outer: (a.outer_src_ip, a.outer_dst_ip),
        };
        if headers.encap != crate::template::Encap::None && a.outer_src_ip.is_ipv4() != a.outer_dst_ip.is_ipv4() {
            return Err("--outer-src-ip and --outer-dst-ip must both be IPv4 or both IPv6".into());
        }
        let ranges: Vec<crate::template::Range> = a
            .range
            .iter()
            .map(|r| crate::template::Range::parse(r).map_err(|e| format!("--range {e}")))
            .collect::<Result<_, _>>()?;
        crate::template::check_ranges(&ranges).map_err(|e| format!("--range: {e}"))?;
        let min = crate::template::header_len(&headers, a.src_ip) + crate::traffic::STAMP_LEN;
        let size = given.unwrap_or(Size::Fixed(min.max(60)));
        if let Size::Fixed(n) = size {
            if n < min && a.pcap.is_none() {
                return Err(format!(
                    "--size {n}: these headers and pktgen's stamp need at least {min} bytes"
                ));
            }
        }
        for r in &ranges {
            let base = match r.field {
                crate::template::Field::SrcPort => a.src_port,
                crate::template::Field::DstPort => a.dst_port,
                _ => continue,
            };
            if u64::from(base) + u64::from(r.count) - 1 > 65535 {
                return Err(format!("--range: a port range of {} from {base} passes 65535", r.count));
            }
        }
        if a.flows == 0 || u64::from(a.src_port) + u64::from(a.flows) - 1 > 65535 {
            return Err(format!(
                "--flows {}: must be at least 1 and keep src-port + flows - 1 <= 65535",
                a.flows
            ));
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if a.cores == 0 || a.cores > cpus {
            return Err(format!("--cores {}: this machine has {cpus} CPUs for pktgen", a.cores));
        }
        if let Some(n) = a
            .queues_per_core
            .filter(|n| !(1..=crate::sendq::MAX_PER_CORE).contains(n))
        {
            return Err(format!(
                "--queues-per-core {n}: must be from 1 to {}",
                crate::sendq::MAX_PER_CORE
            ));
        }
        if !(1..=256).contains(&a.burst) {
            return Err(format!("--burst {}: must be from 1 to 256", a.burst));
        }
        if let Some(d) = a.duration {
            // A year is plenty, and keeps `Instant + duration` far from overflow.
            if !(d.is_finite() && d > 0.0 && d <= 31_536_000.0) {
                return Err(format!(
                    "--duration {d}: must be a positive number of seconds, at most a year"
                ));
            }
        }
        if a.count == Some(0) {
            return Err("--count 0: nothing to send".into());
        }
        let shape = crate::stream::Shape::parse(&a.shape).map_err(|e| format!("--shape {e}"))?;
        let load_rate = a
            .rate
            .as_deref()
            .map(crate::rate::parse_rate)
            .transpose()
            .map_err(|e| format!("--rate {e}"))?;
        if shape != crate::stream::Shape::Constant && a.rate.is_none() {
            return Err(format!("--shape {}: needs --rate", a.shape));
        }
        if a.streams.is_some() && a.pcap.is_some() {
            return Err("--streams and --pcap do not go together: a replay is one stream".into());
        }
        // Options that only mean something beside another are refused without it, rather than
        // taken and ignored.
        for (given, name) in [
            (a.search_sizes.is_some(), "--search-sizes"),
            (a.trial.is_some(), "--trial"),
            (a.resolution.is_some(), "--resolution"),
            (a.loss_threshold.is_some(), "--loss-threshold"),
        ] {
            if given {
                return Err(format!("{name} needs --search"));
            }
        }
        if a.pcap_speed.is_some() && a.pcap.is_none() {
            return Err("--pcap-speed needs --pcap".into());
        }
        if !a.range.is_empty() && a.pcap.is_some() {
            return Err(
                "--range varies generated frames; a replay (--pcap) sends the file's frames as they are".into(),
            );
        }
        let pcap_speed = match a.pcap_speed.as_deref().unwrap_or("1") {
            "max" => None,
            x => match x.parse::<f64>() {
                Ok(f) if f.is_finite() && (1e-3..=1e6).contains(&f) => Some(f),
                _ => {
                    return Err(format!(
                        "--pcap-speed {x:?}: expected a factor from 0.001 to 1e6, or max"
                    ))
                }
            },
        };
        if a.pcap.is_some() && pcap_speed.is_some() {
            if a.rate.is_some() || shape != crate::stream::Shape::Constant {
                return Err("--rate and --shape pace a back-to-back replay: add --pcap-speed max".into());
            }
            if a.cores > 1 {
                return Err("a timed replay (--pcap-speed) runs on one core; --pcap-speed max on several".into());
            }
        }
        if let Some(n) = a.pcap_loops {
            if a.pcap.is_none() {
                return Err("--pcap-loops needs --pcap".into());
            }
            if n == 0 || a.count.is_some() {
                return Err(format!("--pcap-loops {n}: must be at least 1, and not with --count"));
            }
        }
        if a.hw_timestamps && (rx_port.is_none() || a.pcap.is_some()) {
            return Err(
                "--hw-timestamps measures the stamped streams at a receive port: it needs --rx-port, and not --pcap"
                    .into(),
            );
        }
        let rx_queue = match a.rx_mode.as_deref() {
            None => rawpkt::QueueConfig::default(),
            Some(_) if rx_port.is_none() => {
                return Err("--rx-mode chooses the receive queue: it needs a receive port".into())
            }
            Some(m) => rawpkt::QueueConfig::default().with_rx_mode(m).ok_or_else(|| {
                let names: Vec<_> = rawpkt::QueueConfig::RX_MODES.iter().map(|m| m.0).collect();
                format!(
                    "--rx-mode {}: expected one of {}",
                    rawpkt_wire::text::echo(m),
                    names.join(", ")
                )
            })?,
        };
        let latency_rate = match a.latency_rate.as_deref() {
            Some("off") => None,
            Some(r) => {
                if rx_port.is_none() {
                    return Err("--latency-rate needs a receive port to measure at".into());
                }
                Some(rate(r).map_err(|e| e.replacen("--rate", "--latency-rate", 1))?)
            }
            None if rx_port.is_some() && a.pcap.is_none() => Some(LATENCY_RATE),
            None => None,
        };
        Ok(Config {
            headers,
            ranges,
            metrics: a.metrics.as_deref().map(crate::metrics::parse_addr).transpose()?,
            control: a.control.as_deref().map(crate::control::parse_addr).transpose()?,
            pcap_speed,
            pcap_loops: a.pcap_loops,
            hw_timestamps: a.hw_timestamps,
            rx_queue,
            rx_mode_asked: a.rx_mode.is_some(),
            shape,
            streams: a.streams,
            latency_rate,
            tx_port,
            rx_port,
            directions,
            gateway: a.gateway,
            src_mac: mac("src-mac", &a.src_mac)?,
            dst_mac: a.dst_mac.as_deref().map(|m| mac("dst-mac", m)).transpose()?,
            src_ip: a.src_ip,
            dst_ip: a.dst_ip,
            src_port: a.src_port,
            dst_port: a.dst_port,
            flows: a.flows,
            size,
            rate: load_rate,
            count: a.count,
            duration: a.duration,
            cores: a.cores,
            queues_per_core: a.queues_per_core,
            burst: a.burst,
            pcap: a.pcap,
            capture: a.capture,
            json: a.json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let a =
            Args::try_parse_from(std::iter::once("pktgen").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_args(a)
    }

    #[test]
    fn rates_parse_with_suffixes() {
        assert_eq!(rate("1M").unwrap(), 1e6);
        assert_eq!(rate("500k").unwrap(), 5e5);
        assert_eq!(rate("14.88M").unwrap(), 14.88e6);
        assert_eq!(rate("1").unwrap(), 1.0);
        for low in ["0", "0.5", "1e-300", "-1M", "0.0001k"] {
            assert!(rate(low).unwrap_err().contains("at least 1 packet per second"), "{low}");
        }
        assert!(rate("fast").unwrap_err().contains("expected packets per second"));
    }

    #[test]
    fn bad_values_are_one_clear_line() {
        for (args, want) in [
            (&["--size", "59"][..], "from 60 to 1514"),
            (&["--size", "big"], "from 60 to 1514"),
            (&["--rate", "0"], "at least 1 packet per second"),
            (&["--count", "1", "--rate", "1e-300"], "at least 1 packet per second"),
            (&["--rate", "inf"], "at least 1 packet per second"),
            (&["--rate", "NaN"], "at least 1 packet per second"),
            (&["--cores", "0"], "CPUs"),
            (&["--cores", "999"], "CPUs"),
            (&["--src-mac", "zz"], "six hex bytes"),
            (&["--dst-mac", "0:0:0:0:0:+1"], "six hex bytes"),
            (&["--dst-mac", "002:00:00:00:00:01"], "six hex bytes"),
            (&["--dst-mac", "02:00:00:00:00:"], "six hex bytes"),
            (&["--dst-mac", "02:00:00:00:00:01:"], "six hex bytes"),
            (&["--dst-mac", "02::00:00:00:00"], "six hex bytes"),
            (&["--dst-mac", "02:00:00:00:00: 1"], "six hex bytes"),
            (&["--flows", "0"], "at least 1"),
            (&["--src-ip", "::1"], "both be IPv4 or both IPv6"),
            (&["--rx-port", "model:x/1"], "needs --port"),
            (
                &["--port", "model:x/0", "--capture", "x.pcap"],
                "--capture needs --rx-port",
            ),
            (&["--burst", "1000"], "from 1 to 256"),
            (&["--duration", "1e20"], "at most a year"),
            (&["--flows", "4294967295"], "src-port + flows - 1"),
            (&["--vlan", "4095"], "from 0 to 4094 (4095 is reserved)"),
            (&["--vlan", "100,4095"], "from 0 to 4094 (4095 is reserved)"),
            (&["--trial", "1"], "--trial needs --search"),
            (&["--search-sizes", "60"], "--search-sizes needs --search"),
            (&["--resolution", "2%"], "--resolution needs --search"),
            (&["--loss-threshold", "1"], "--loss-threshold needs --search"),
            (&["--pcap-speed", "2"], "--pcap-speed needs --pcap"),
            (
                &["--pcap", "x.pcap", "--range", "dst-ip:4"],
                "--range varies generated frames",
            ),
        ] {
            let e = cfg(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
            assert!(!e.trim_end().contains('\n'), "{args:?}: more than one line: {e}");
        }
    }

    #[test]
    fn macs_are_six_groups_of_one_or_two_hex_digits() {
        assert_eq!(mac("m", "02:00:00:00:00:01").unwrap(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(mac("m", "2:0:0:0:0:A").unwrap(), [2, 0, 0, 0, 0, 0xa]);
        assert_eq!(mac("m", "ff:FF:fF:Ff:00:0f").unwrap(), [0xff, 0xff, 0xff, 0xff, 0, 0xf]);
        for bad in [
            "",
            "02:00:00:00:00",
            "+2:00:00:00:00:01",
            "-0:00:00:00:00:01",
            "0x2:0:0:0:0:1",
            "02-00-00-00-00-01",
        ] {
            assert!(mac("m", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_port_means_the_model_pair() {
        let c = cfg(&[]).unwrap();
        assert_eq!(
            (c.tx_port.as_str(), c.rx_port.as_deref()),
            ("model:pktgen/0", Some("model:pktgen/1"))
        );
        assert_eq!(c.size, Size::Fixed(60));
    }
}
