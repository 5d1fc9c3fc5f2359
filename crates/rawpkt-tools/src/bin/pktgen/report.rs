//! One line per second and port, and the final summary, as text or JSON lines.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rawpkt_tools::stats::mpps;

use crate::cli::Config;
use crate::pace::LATE_NS;
use crate::worker::{Counters, Departed, StreamCounters};

/// `s` as a JSON string, quotes included.
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `t` as RFC 3339 in UTC, to the millisecond: "2026-11-29T06:41:31.123Z".
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's `civil_from_days`, proleptic
    // Gregorian, eras of 400 years).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// What a run was, for its JSON summary: so that a result file says what produced it.
pub(crate) struct RunInfo<'a> {
    pub args: Vec<String>,
    pub started: std::time::SystemTime,
    /// (role, spec, MAC) of each port: "tx", "rx".
    pub ports: Vec<(&'static str, String, Option<[u8; 6]>)>,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub streams: &'a [crate::stream::Stream],
    /// The CPU each transmit core ran on (None: unpinned).
    pub cores: Vec<Option<usize>>,
    /// Where the receiver ran: "thread" (a thread of its own, unpinned), "core 0" (inside the
    /// first transmit core's loop), or None without a receive port.
    pub receiver: Option<&'static str>,
    /// The model NIC's thread's CPU (`RAWPKT_MODEL_CPU`), if it has one.
    pub model_cpu: Option<String>,
}

fn mac_text(m: [u8; 6]) -> String {
    format!("{}", rawpkt_wire::rule::MacText(m))
}

/// The members of the summary that say what ran, each led by a comma.
pub(crate) fn run_json(r: &RunInfo) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let args: Vec<String> = r.args.iter().map(|a| json_str(a)).collect();
    let ports: Vec<String> = r
        .ports
        .iter()
        .map(|(role, spec, mac)| {
            format!(
                "{{\"role\":\"{role}\",\"spec\":{},\"mac\":{}}}",
                json_str(spec),
                opt(mac.map(|m| json_str(&mac_text(m))))
            )
        })
        .collect();
    let streams: Vec<String> = r.streams.iter().enumerate().map(|(i, s)| stream_json(i, s)).collect();
    let cores: Vec<String> = r
        .cores
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{{\"core\":{i},\"cpu\":{}}}", opt(c.map(|c| c.to_string()))))
        .collect();
    format!(
        ",\"version\":{},\"command_line\":[{}],\"start_time\":{},\"ports\":[{}],\"src_mac\":{},\"dst_mac\":{},\"stream_config\":[{}],\"cores\":[{}],\"receiver\":{},\"model_cpu\":{}",
        json_str(env!("CARGO_PKG_VERSION")),
        args.join(","),
        json_str(&rfc3339(r.started)),
        ports.join(","),
        json_str(&mac_text(r.src_mac)),
        json_str(&mac_text(r.dst_mac)),
        streams.join(","),
        cores.join(","),
        opt(r.receiver.map(json_str)),
        opt(r.model_cpu.as_deref().map(json_str)),
    )
}

/// One stream as it ran: its spec resolved (what the command line and a stream file gave it),
/// and the frames it was built into.
fn stream_json(id: usize, s: &crate::stream::Stream) -> String {
    use crate::cli::Size;
    use crate::template::{Encap, Field};
    let p = &s.spec;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let sizes: Vec<String> = if !s.traffic.stamped() {
        Vec::new()
    } else {
        match p.size {
            Size::Fixed(n) => vec![n.to_string()],
            Size::Imix => crate::cli::IMIX
                .iter()
                .map(|&(n, _)| n.max(crate::traffic::min_len(p)).to_string())
                .collect(),
        }
    };
    let size = match (p.size, s.traffic.stamped()) {
        (_, false) => "\"pcap\"".to_string(),
        (Size::Fixed(n), true) => n.to_string(),
        (Size::Imix, true) => "\"imix\"".to_string(),
    };
    let encap = match p.headers.encap {
        Encap::None => "none".to_string(),
        Encap::Vxlan(v) => format!("vxlan:{v}"),
        Encap::Gre => "gre".to_string(),
    };
    let ranges: Vec<String> = p
        .ranges
        .iter()
        .map(|r| {
            let f = match r.field {
                Field::SrcIp => "src-ip",
                Field::DstIp => "dst-ip",
                Field::SrcPort => "src-port",
                Field::DstPort => "dst-port",
                Field::SrcMac => "src-mac",
                Field::DstMac => "dst-mac",
            };
            json_str(&format!("{f}:{}{}", r.count, if r.random { ":random" } else { "" }))
        })
        .collect();
    let vlan: Vec<String> = p.headers.vlan.iter().map(u16::to_string).collect();
    format!(
        "{{\"id\":{id},\"name\":{},\"latency_stream\":{},\"size\":{size},\"frame_sizes\":[{}],\"templates\":{},\"rate_pps\":{},\"count\":{},\"shape\":{},\"flows\":{},\"src_ip\":\"{}\",\"dst_ip\":\"{}\",\"src_port\":{},\"dst_port\":{},\"vlan\":[{}],\"encap\":{},\"outer_src_ip\":{},\"outer_dst_ip\":{},\"ranges\":[{}]}}",
        json_str(&p.name),
        p.latency,
        sizes.join(","),
        s.traffic.templates(),
        opt(p.rate.map(|r| r.to_string())),
        opt(p.count.map(|c| c.to_string())),
        json_str(&p.shape.name()),
        p.flows,
        p.src_ip,
        p.dst_ip,
        p.src_port,
        p.dst_port,
        vlan.join(","),
        json_str(&encap),
        opt((p.headers.encap != Encap::None).then(|| json_str(&p.headers.outer.0.to_string()))),
        opt((p.headers.encap != Encap::None).then(|| json_str(&p.headers.outer.1.to_string()))),
        ranges.join(","),
    )
}

/// A short stream's words: what it sent against what its rate asked, over `secs`.
fn short_text(sent: u64, asked: u64, secs: f64) -> String {
    format!(
        "sent {:.3} of the {:.3} Mpps asked ({:.1} %)",
        mpps(sent, secs),
        mpps(asked, secs),
        100.0 * sent as f64 / asked.max(1) as f64
    )
}

/// Bytes a frame takes on the wire beyond its own: FCS (4), preamble (8), inter-frame gap (12).
const L1_OVERHEAD: u64 = 24;

fn sum(counters: &[Arc<Counters>]) -> [u64; 4] {
    counters
        .iter()
        .map(|c| c.snapshot())
        .fold([0; 4], |a, s| [a[0] + s[0], a[1] + s[1], a[2] + s[2], a[3] + s[3]])
}

fn gbps(packets: u64, bytes: u64, secs: f64) -> f64 {
    (bytes + packets * L1_OVERHEAD) as f64 * 8.0 / secs / 1e9
}

pub(crate) struct Reporter {
    json: bool,
    tx_name: String,
    rx_name: Option<String>,
    epoch: Instant,
    next: Duration,
    last: ([u64; 4], [u64; 4], Duration),
    /// Stream names, and each stream's counts at the last line.
    names: Vec<String>,
    last_streams: Vec<StreamMark>,
    /// Which direction this is ("TX -> RX") in a run of several, else None.
    direction: Option<String>,
    /// Live control's changes (`--control`), and how many of them the lines have shown.
    pub events: Option<Arc<crate::control::Events>>,
    shown: usize,
    /// Each stream's (sent, asked by its rate) at the last line (`StreamCounters::short_since`).
    last_asked: Vec<[u64; 2]>,
}

/// A stream's running totals at one line, for the next line's differences.
#[derive(Clone, Copy, Default)]
struct StreamMark {
    tx: u64,
    rx: u64,
    lat_sum: u64,
    lat_n: u64,
    lost: u64,
    duplicates: u64,
    out_of_order: u64,
}

/// Values of one stream for one interval line: counts over the interval, except `in_flight`,
/// which is the count at the line's time.
#[derive(Default)]
struct StreamInterval {
    tx: u64,
    rx: u64,
    /// Sent and neither received nor known lost, now: on their way, or overtaken and still
    /// due (`StreamCounters::in_flight`). Not loss: most of it lands within microseconds.
    in_flight: u64,
    /// Numbers that became known lost in the interval (`seq`: passed by the window).
    lost: u64,
    duplicates: u64,
    out_of_order: u64,
    lat_mean: u64,
    lat_max: u64,
    jitter: u64,
}

fn stream_interval(c: &StreamCounters, last: &mut StreamMark) -> StreamInterval {
    let tx = c.tx_total()[0];
    let rx = c.rx_total()[0];
    let (sum, n) = (
        c.lat_sum_ns.load(Ordering::Relaxed),
        c.lat_samples.load(Ordering::Relaxed),
    );
    let now = StreamMark {
        tx,
        rx,
        lat_sum: sum,
        lat_n: n,
        lost: c.lost.load(Ordering::Acquire),
        duplicates: c.duplicates.load(Ordering::Acquire),
        out_of_order: c.out_of_order.load(Ordering::Acquire),
    };
    // Saturating: a stream's sent count goes down at the end by the packets made and never
    // sent (left in a burst when the run stopped), and a number known lost that arrives after
    // all leaves the count.
    let (dsum, dn) = (sum.saturating_sub(last.lat_sum), n.saturating_sub(last.lat_n));
    let i = StreamInterval {
        tx: tx.saturating_sub(last.tx),
        rx: rx.saturating_sub(last.rx),
        in_flight: c.in_flight(tx, rx),
        lost: now.lost.saturating_sub(last.lost),
        duplicates: now.duplicates.saturating_sub(last.duplicates),
        out_of_order: now.out_of_order.saturating_sub(last.out_of_order),
        lat_mean: dsum.checked_div(dn).unwrap_or(0),
        lat_max: c.lat_max_ns.swap(0, Ordering::Relaxed),
        jitter: c.jitter_ns.load(Ordering::Relaxed),
    };
    *last = now;
    i
}

/// `n` with its unit, µs from ns, for the human lines: "12.3 µs".
pub(crate) fn us(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}

impl Reporter {
    pub(crate) fn new(cfg: &Config, epoch: Instant, names: Vec<String>) -> Reporter {
        Reporter {
            json: cfg.json,
            tx_name: cfg.tx_port.clone(),
            rx_name: cfg.rx_port.clone(),
            epoch,
            next: Duration::from_secs(1),
            last: ([0; 4], [0; 4], Duration::ZERO),
            last_streams: vec![StreamMark::default(); names.len()],
            last_asked: vec![[0; 2]; names.len()],
            names,
            direction: None,
            events: None,
            shown: 0,
        }
    }

    /// Names the direction in every line: a run with several (--bidir, several port pairs).
    pub(crate) fn direction(&mut self, name: String) {
        self.direction = Some(name);
    }

    /// `,"direction":"TX -> RX"` for the JSON objects of a run of several directions.
    fn direction_json(&self) -> String {
        self.direction.as_ref().map_or(String::new(), |d| {
            format!(",\"direction\":\"{}\"", crate::json_escape(d))
        })
    }

    /// Prints a line for each second that has passed (and, when `last`, for the final part).
    pub(crate) fn tick(&mut self, tx: &[Arc<Counters>], rx: &Counters, streams: &[StreamCounters], last: bool) {
        let now = self.epoch.elapsed();
        if now < self.next && !last {
            return;
        }
        let (t, r) = (sum(tx), rx.snapshot());
        let (pt, pr, at) = self.last;
        let secs = (now - at).as_secs_f64().max(1e-9);
        if last && now - at < Duration::from_millis(100) {
            return;
        }
        let d = |a: [u64; 4], b: [u64; 4]| [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]];
        let (dt, dr) = (d(t, pt), d(r, pr));
        // The part after the last full second is mostly the receiver's drain, often with nothing
        // in it: a line of zeros there would read as a stall. The summary has the totals.
        if last && dt.iter().chain(&dr).all(|&n| n == 0) {
            return;
        }
        let per: Vec<StreamInterval> = streams
            .iter()
            .zip(self.last_streams.iter_mut())
            .map(|(c, l)| stream_interval(c, l))
            .collect();
        // The port's line carries its streams' sequence counts, added up.
        let all = per.iter().fold(StreamInterval::default(), |a, i| StreamInterval {
            in_flight: a.in_flight + i.in_flight,
            lost: a.lost + i.lost,
            duplicates: a.duplicates + i.duplicates,
            out_of_order: a.out_of_order + i.out_of_order,
            ..a
        });
        let has_rx = self.rx_name.is_some();
        // Streams short of their rates in this interval: (sent, asked) where so.
        let short: Vec<Option<(u64, u64)>> = streams
            .iter()
            .zip(self.last_asked.iter_mut())
            .map(|(c, l)| match c.short_since(l) {
                (sent, asked, true) => Some((sent, asked)),
                _ => None,
            })
            .collect();
        let short_names: String = {
            short
                .iter()
                .zip(&self.names)
                .filter(|(s, _)| s.is_some())
                .map(|(_, n)| json_str(n))
                .collect::<Vec<_>>()
                .join(",")
        };
        // Per stream only when there are several: with one, its line is the port's.
        let per = if per.len() > 1 { per } else { Vec::new() };
        if self.json {
            let mut st = String::new();
            if !per.is_empty() {
                st = per
                    .iter()
                    .zip(&self.names)
                    .map(|(i, name)| {
                        format!(
                            "{{\"name\":{},\"tx_packets\":{},\"rx_packets\":{},\"in_flight\":{},\"lost\":{},\"duplicates\":{},\"out_of_order\":{},\"latency_mean_ns\":{},\"latency_max_ns\":{},\"jitter_ns\":{}}}",
                            json_str(name), i.tx, i.rx, i.in_flight, i.lost, i.duplicates, i.out_of_order, i.lat_mean, i.lat_max, i.jitter
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                st = format!(",\"streams\":[{st}]");
            }
            st += &self.new_events(|e| e.json(), ",\"events\":[", ",", "]");
            rawpkt_sys::outln!(
                "{{\"type\":\"interval\"{},\"t\":{:.3},\"tx_packets\":{},\"tx_mpps\":{:.4},\"tx_gbps\":{:.4},\"tx_drops\":{},\"tx_errors\":{},\"rx_packets\":{},\"rx_mpps\":{:.4},\"rx_gbps\":{:.4},\"rx_drops\":{},\"rx_errors\":{},\"in_flight\":{},\"lost\":{},\"duplicates\":{},\"out_of_order\":{},\"short_streams\":[{}]{st}}}",
                self.direction_json(),
                now.as_secs_f64(),
                dt[0],
                mpps(dt[0], secs),
                gbps(dt[0], dt[1], secs),
                dt[2],
                dt[3],
                dr[0],
                mpps(dr[0], secs),
                gbps(dr[0], dr[1], secs),
                dr[2],
                dr[3],
                all.in_flight,
                all.lost,
                all.duplicates,
                all.out_of_order,
                short_names
            );
        } else {
            let changes = self.new_events(|e| e.text(), "", "\n", "\n");
            let mut line = format!(
                "{changes}{:7.2} s  tx {}  {:8.3} Mpps {:7.3} Gbit/s",
                now.as_secs_f64(),
                self.tx_name,
                mpps(dt[0], secs),
                gbps(dt[0], dt[1], secs)
            );
            if let Some(rx) = &self.rx_name {
                line += &format!(
                    "  | rx {rx}  {:8.3} Mpps {:7.3} Gbit/s",
                    mpps(dr[0], secs),
                    gbps(dr[0], dr[1], secs)
                );
            }
            if has_rx {
                line += &format!(
                    "  | frames: {} in flight, {} lost, {} duplicated, {} out of order",
                    all.in_flight, all.lost, all.duplicates, all.out_of_order
                );
            }
            line += &format!(
                "  | drops {} ({} tx, {} rx), errors {} ({} tx, {} rx)",
                dt[2] + dr[2],
                dt[2],
                dr[2],
                dt[3] + dr[3],
                dt[3],
                dr[3]
            );
            if let (true, Some((sent, asked))) = (per.is_empty(), short.first().copied().flatten()) {
                line += &format!("  | SHORT of its rate: {}", short_text(sent, asked, secs));
            }
            for ((i, name), sh) in per.iter().zip(&self.names).zip(&short) {
                line += &format!(
                    "\n          {name:>10}  tx {:8.3} Mpps  rx {:8.3} Mpps  frames: {} in flight, {} lost, {} duplicated, {} out of order",
                    mpps(i.tx, secs),
                    mpps(i.rx, secs),
                    i.in_flight,
                    i.lost,
                    i.duplicates,
                    i.out_of_order
                );
                if i.rx > 0 {
                    line += &format!(
                        "  latency mean {} max {} jitter {}",
                        us(i.lat_mean),
                        us(i.lat_max),
                        us(i.jitter)
                    );
                }
                if let Some((sent, asked)) = sh {
                    line += &format!("  SHORT of its rate: {}", short_text(*sent, *asked, secs));
                }
            }
            rawpkt_sys::outln!("{line}");
        }
        self.last = (t, r, now);
        while self.next <= now {
            self.next += Duration::from_secs(1);
        }
    }

    /// The control's changes not shown yet, each as `one` makes it, joined, between `open`
    /// and `close`; "" when there are none.
    fn new_events(
        &mut self,
        one: impl Fn(&crate::control::Event) -> String,
        open: &str,
        sep: &str,
        close: &str,
    ) -> String {
        let Some(ev) = &self.events else { return String::new() };
        let new = ev.since(self.shown);
        if new.is_empty() {
            return String::new();
        }
        self.shown += new.len();
        format!("{open}{}{close}", new.iter().map(one).collect::<Vec<_>>().join(sep))
    }

    pub(crate) fn summary(&self, s: &Summary) {
        if self.json {
            let lat = match &s.latency {
                Some(l) => format!(",\"latency_clock\":\"{}\",\"latency_ns\":{}", s.clock, l.json()),
                None => String::new(),
            };
            let streams: Vec<String> = s
                .streams
                .iter()
                .map(|t| {
                    format!(
                        "{{\"name\":{},\"latency_stream\":{},\"rate_asked_packets\":{},\"short\":{},\"tx_packets\":{},\"tx_bytes\":{},\"tx_mpps\":{:.4},\"rx_packets\":{},\"rx_bytes\":{},\"lost\":{},\"duplicates\":{},\"out_of_order\":{}{}{}}}",
                        json_str(&t.name),
                        t.latency_stream,
                        t.asked,
                        t.short,
                        t.tx[0],
                        t.tx[1],
                        mpps(t.tx[0], s.seconds),
                        t.rx[0],
                        t.rx[1],
                        t.seq.lost,
                        t.seq.duplicates,
                        t.seq.out_of_order,
                        t.latency.as_ref().map_or(String::new(), |l| format!(",\"latency_ns\":{}", l.json())),
                        t.departures
                            .as_ref()
                            .map_or(String::new(), |d| format!(",\"departures_ns\":{}", d.json()))
                    )
                })
                .collect();
            let mut metrics = s.metrics.map_or(String::new(), |a| format!(",\"metrics\":\"{a}\""));
            if let Some(ev) = &self.events {
                let all: Vec<String> = ev.since(0).iter().map(crate::control::Event::json).collect();
                metrics += &format!(",\"events\":[{}]", all.join(","));
            }
            let lat = format!("{metrics}{lat},\"streams\":[{}]", streams.join(","));
            let seq = s.seq();
            rawpkt_sys::outln!(
                "{{\"type\":\"summary\"{}{},\"seconds\":{:.3},\"active_ns\":{},\"tx_packets\":{},\"tx_bytes\":{},\"tx_mpps\":{:.4},\"tx_gbps\":{:.4},\"tx_drops\":{},\"tx_errors\":{},\"rx_packets\":{},\"rx_bytes\":{},\"rx_mpps\":{:.4},\"rx_gbps\":{:.4},\"rx_drops\":{},\"rx_errors\":{},\"lost\":{},\"duplicates\":{},\"out_of_order\":{},\"send_queues_per_core\":{}{lat}}}",
                self.direction_json(),
                s.run.as_deref().unwrap_or(""),
                s.seconds,
                (s.seconds * 1e9).round() as u64,
                s.tx[0],
                s.tx[1],
                s.tx_mpps(),
                gbps(s.tx[0], s.tx[1], s.seconds.max(1e-9)),
                s.tx[2],
                s.tx[3],
                s.rx[0],
                s.rx[1],
                s.rx_mpps(),
                gbps(s.rx[0], s.rx[1], s.seconds.max(1e-9)),
                s.rx[2],
                s.rx[3],
                seq.lost,
                seq.duplicates,
                seq.out_of_order,
                s.send_queues_per_core
            );
            return;
        }
        rawpkt_sys::outln!(
            "summary{}: tx {} packets, {} bytes ({:.3} Mpps, {:.3} Gbit/s), drops {}, errors {}",
            self.direction.as_ref().map_or(String::new(), |d| format!(" {d}")),
            s.tx[0],
            s.tx[1],
            s.tx_mpps(),
            gbps(s.tx[0], s.tx[1], s.seconds.max(1e-9)),
            s.tx[2],
            s.tx[3]
        );
        if s.has_rx {
            let seq = s.seq();
            rawpkt_sys::outln!(
                "         rx {} packets, {} bytes ({:.3} Mpps, {:.3} Gbit/s), device drops {}, errors {}",
                s.rx[0],
                s.rx[1],
                s.rx_mpps(),
                gbps(s.rx[0], s.rx[1], s.seconds.max(1e-9)),
                s.rx[2],
                s.rx[3]
            );
            rawpkt_sys::outln!(
                "         frames: {} lost, {} duplicated, {} out of order (by sequence number, after the drain)",
                seq.lost,
                seq.duplicates,
                seq.out_of_order
            );
        }
        if let Some(l) = &s.latency {
            rawpkt_sys::outln!("         latency ({} clock): {}", s.clock, l.text());
        }
        rawpkt_sys::outln!(
            "         rates over {:.3} s of sending (the longest a transmit core sent, its first burst to its last)",
            s.seconds
        );
        if let [t] = &s.streams[..] {
            if t.short {
                rawpkt_sys::outln!(
                    "         SHORT of its rate: {}",
                    short_text(t.tx[0], t.asked, s.seconds)
                );
            }
        }
        if s.streams.len() > 1 {
            for t in &s.streams {
                let mut line = format!(
                    "  stream {}: tx {} packets, {} bytes ({:.3} Mpps)",
                    t.name,
                    t.tx[0],
                    t.tx[1],
                    mpps(t.tx[0], s.seconds)
                );
                if s.has_rx {
                    line += &format!(
                        ", rx {} packets; frames: {} lost, {} duplicated, {} out of order",
                        t.rx[0], t.seq.lost, t.seq.duplicates, t.seq.out_of_order
                    );
                }
                if let Some(l) = &t.latency {
                    line += &format!("; latency: {}, jitter {}", l.text(), us(l.jitter));
                }
                if let Some(d) = &t.departures {
                    line += &format!("; {}", d.text());
                }
                if t.short {
                    line += &format!("; SHORT of its rate: {}", short_text(t.tx[0], t.asked, s.seconds));
                }
                rawpkt_sys::outln!("{line}");
            }
        } else if let Some(d) = s.streams.first().and_then(|t| t.departures.as_ref()) {
            rawpkt_sys::outln!("         {}", d.text());
        }
    }
}

impl Latency {
    fn of(h: &Histogram<u64>, jitter: u64) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            samples: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            jitter,
            // Buckets doubling from 1 µs: counts of samples at most each bound.
            buckets: h
                .iter_log(1000, 2.0)
                .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
                .filter(|&(_, n)| n > 0)
                .collect(),
        })
    }

    /// "min 1.2 µs, p50 ..., max 9.9 µs (N samples)".
    fn text(&self) -> String {
        format!(
            "min {}, p50 {}, p99 {}, p99.9 {}, max {} ({} samples)",
            us(self.min),
            us(self.p50),
            us(self.p99),
            us(self.p999),
            us(self.max),
            self.samples
        )
    }

    fn json(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(|(le, n)| format!("[{le},{n}]")).collect();
        format!(
            "{{\"samples\":{},\"min\":{},\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{},\"jitter\":{},\"histogram\":[{}]}}",
            self.samples,
            self.min,
            self.p50,
            self.p99,
            self.p999,
            self.max,
            self.jitter,
            buckets.join(",")
        )
    }
}

pub(crate) struct Latency {
    pub samples: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    /// RFC 3550 interarrival jitter at the end, ns (0 where it does not apply).
    pub jitter: u64,
    /// (upper bound in ns, samples in the bucket), doubling from 1 µs, empty buckets left out.
    pub buckets: Vec<(u64, u64)>,
}

/// What the sequence numbers say of a stream (or of all), at the end.
#[derive(Clone, Copy, Default)]
pub(crate) struct SeqCounts {
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
}

pub(crate) struct StreamSummary {
    pub name: String,
    pub latency_stream: bool,
    /// Packets the stream's rate asked for over the run (0 without a rate), and whether it
    /// sent more than 1 % fewer (`pace::short`).
    pub asked: u64,
    pub short: bool,
    pub tx: [u64; 2],
    pub rx: [u64; 2],
    /// With a receive port: from sequence numbers where the frames carry them, else (a replay)
    /// sent minus received.
    pub seq: SeqCounts,
    pub latency: Option<Latency>,
    pub departures: Option<Departures>,
}

/// Inter-departure times of a shaped stream, from the send stamps the receiver read.
pub(crate) struct Departures {
    pub gaps: u64,
    pub mean: f64,
    /// Coefficient of variation: standard deviation / mean (1 for exponential gaps).
    pub cv: f64,
    pub p50: u64,
    pub p99: u64,
    /// Gaps longer than [`STALL_GAPS`] mean gaps: the sender lost its CPU (a shared machine
    /// stalls a thread for 1-30 ms), not the shape's spread; counted here and left out of
    /// `cv_without_stalls` (and of its mean), so that one stall, which the coefficient squares,
    /// does not hide the shape.
    pub stalls: u64,
    pub cv_without_stalls: f64,
    /// The sender's side, for departures with due times (Poisson, timed replay).
    pub timing: Option<Timing>,
}

/// How the departures kept their due times, as the transmit cores saw them.
pub(crate) struct Timing {
    pub departures: u64,
    /// Departures that left more than [`LATE_NS`] after their due time.
    pub late: u64,
    /// Departures that left early, with the send before them, and the most any did, ns.
    pub early: u64,
    pub early_max: u64,
    pub lateness_p50: u64,
    pub lateness_p99: u64,
    pub lateness_max: u64,
    /// Gaps between consecutive departures (of one core) that both left on time: their count,
    /// mean and coefficient of variation.
    pub on_time_gaps: u64,
    pub mean_on_time: f64,
    pub cv_on_time: f64,
}

impl Timing {
    /// Leaving out the gaps with a late end does not bias the spread of those kept when the
    /// lateness comes from the host: a departure is late when something held the loop across
    /// its due time (an interrupt, another thread on the CPU), at times that do not depend on
    /// the gaps the pacer drew, so whether a gap is kept does not depend on its length. The
    /// exception is a gap whose start was on time and whose end fell in a hold that began
    /// between them: left out with probability (holds a second) x (its length), 5e-4 for a
    /// 1 µs gap at the VM's ~540 interrupts a second, which moves the coefficient by about that
    /// much. Measured (throwaway trace of every departure, SCHED_FIFO, load 4-7): the due gaps
    /// of the pairs kept had a coefficient of 1.0005-1.0051 against 1.0021-1.0025 over all.
    /// Lateness of the loop's own making is not independent: a receive poll only starts before
    /// a gap longer than its slack, so its overruns take long gaps out (a capture's writes in
    /// those polls took the kept mean 3.4 % low); hence the loop keeps its polls within the
    /// slack. What is left out is counted (`late`) and shown in `cv` over all gaps.
    fn of(d: &Departed) -> Timing {
        let g = &d.on_time_gaps;
        Timing {
            departures: d.departures,
            late: d.late,
            early: d.early,
            early_max: d.early_max,
            lateness_p50: d.lateness.value_at_quantile(0.5),
            lateness_p99: d.lateness.value_at_quantile(0.99),
            lateness_max: d.lateness.max(),
            on_time_gaps: g.len(),
            mean_on_time: g.mean(),
            cv_on_time: g.stdev() / g.mean().max(1e-9),
        }
    }
}

/// A gap this many times the mean counts as a stall: an exponential gap is that long with
/// probability e^-50, about 2e-22.
pub(crate) const STALL_GAPS: f64 = 50.0;

impl Departures {
    fn of(g: &Histogram<u64>, sent: Option<&Departed>) -> Departures {
        let mean = g.mean();
        let limit = (STALL_GAPS * mean) as u64;
        // Count, sum and sum of squares of the gaps up to the limit.
        let (mut n, mut sum, mut sq) = (0u64, 0f64, 0f64);
        for v in g.iter_recorded() {
            let (x, c) = (v.value_iterated_to(), v.count_at_value());
            if x <= limit {
                n += c;
                sum += x as f64 * c as f64;
                sq += (x as f64).powi(2) * c as f64;
            }
        }
        let m = sum / n.max(1) as f64;
        let sd = (sq / n.max(1) as f64 - m * m).max(0.0).sqrt();
        Departures {
            gaps: g.len(),
            mean,
            cv: g.stdev() / mean.max(1e-9),
            p50: g.value_at_quantile(0.5),
            p99: g.value_at_quantile(0.99),
            stalls: g.len() - n,
            cv_without_stalls: sd / m.max(1e-9),
            timing: sent.filter(|d| d.departures > 0).map(Timing::of),
        }
    }

    fn json(&self) -> String {
        let timing = self.timing.as_ref().map_or(String::new(), |t| {
            format!(
                ",\"departures\":{},\"late\":{},\"late_after_ns\":{LATE_NS},\"early\":{},\"early_max\":{},\"lateness_p50\":{},\"lateness_p99\":{},\"lateness_max\":{},\"on_time_gaps\":{},\"mean_on_time\":{:.1},\"cv_on_time\":{:.4}",
                t.departures, t.late, t.early, t.early_max, t.lateness_p50, t.lateness_p99, t.lateness_max, t.on_time_gaps, t.mean_on_time, t.cv_on_time
            )
        });
        format!(
            "{{\"gaps\":{},\"mean\":{:.1},\"cv\":{:.4},\"p50\":{},\"p99\":{},\"stalls\":{},\"cv_without_stalls\":{:.4}{timing}}}",
            self.gaps, self.mean, self.cv, self.p50, self.p99, self.stalls, self.cv_without_stalls
        )
    }

    /// The summary's words for these departures: times in µs, as every human line has them.
    fn text(&self) -> String {
        let us3 = |ns: f64| format!("{:.3} µs", ns / 1e3);
        let mut line = format!(
            "gaps between departures: mean {} cv {:.3} p50 {} p99 {}, {} stalls (cv {:.3} without)",
            us3(self.mean),
            self.cv,
            us3(self.p50 as f64),
            us3(self.p99 as f64),
            self.stalls,
            self.cv_without_stalls
        );
        if let Some(t) = &self.timing {
            line += &format!(
                "; {} of {} late (> {} after due; lateness p50 {} p99 {} max {}), {} early (with the send before; at most {}), on-time gaps mean {} cv {:.3}",
                t.late,
                t.departures,
                us3(LATE_NS as f64),
                us3(t.lateness_p50 as f64),
                us3(t.lateness_p99 as f64),
                us3(t.lateness_max as f64),
                t.early,
                us3(t.early_max as f64),
                us3(t.mean_on_time),
                t.cv_on_time
            );
        }
        line
    }
}

pub(crate) struct Summary {
    /// The sending time the rates are over: the longest a transmit core sent, from its first
    /// burst to its last (not the set-up before, nor the receiver's drain after).
    pub seconds: f64,
    /// What ran, as JSON members each led by a comma (`run_json`): version, command line, start
    /// time, ports, streams, cores.
    pub run: Option<String>,
    pub tx: [u64; 4],
    pub rx: [u64; 4],
    pub has_rx: bool,
    /// Of every stamped frame, all streams together.
    pub latency: Option<Latency>,
    pub streams: Vec<StreamSummary>,
    /// The clock the stamps and latencies were read on: "software" (the run's monotonic clock)
    /// or "device" (the NIC's, --hw-timestamps).
    pub clock: &'static str,
    /// Send queues each transmit core sent on (`sendq::per_core`).
    pub send_queues_per_core: u16,
    /// Where the metrics endpoint served (--metrics; the port the system chose for port 0).
    pub metrics: Option<std::net::SocketAddr>,
}

impl Summary {
    pub(crate) fn collect(
        tx: &[Arc<Counters>],
        rx: &Counters,
        tx_time: Duration,
        streams: (&[crate::stream::Stream], &[StreamCounters]),
        hists: Option<&[crate::worker::RxHists]>,
        departed: &[Option<Departed>],
        has_rx: bool,
    ) -> Summary {
        let all = hists.and_then(|hs| {
            let mut all = hs.first()?.latency.clone();
            all.reset();
            for h in hs {
                all.add(&h.latency).ok()?;
            }
            Some(all)
        });
        let latency = all.as_ref().and_then(|h| Latency::of(h, 0));
        let streams = streams
            .0
            .iter()
            .zip(streams.1)
            .enumerate()
            .map(|(i, (s, c))| StreamSummary {
                name: s.spec.name.clone(),
                latency_stream: s.spec.latency,
                asked: c.owed_total(),
                short: c.short_since(&mut [0, 0]).2,
                tx: c.tx_total(),
                // A replay is the run's one stream, its frames unstamped: what the port got.
                rx: if s.traffic.stamped() {
                    c.rx_total()
                } else {
                    [rx.snapshot()[0], rx.snapshot()[1]]
                },
                seq: match hists.and_then(|h| h.get(i)).filter(|_| has_rx && s.traffic.stamped()) {
                    // Each core's numbers 0 to what it sent, less one (`SeqTracker::lost_of`).
                    Some(h) => SeqCounts {
                        lost: h
                            .seqs
                            .iter()
                            .zip(&c.tx)
                            .map(|(q, sent)| q.lost_of(sent[0].load(Ordering::Acquire)))
                            .sum(),
                        duplicates: h.seqs.iter().map(|q| q.duplicates).sum(),
                        out_of_order: h.seqs.iter().map(|q| q.out_of_order).sum(),
                    },
                    None if has_rx => SeqCounts {
                        lost: c.tx_total()[0].saturating_sub(rx.snapshot()[0]),
                        ..SeqCounts::default()
                    },
                    None => SeqCounts::default(),
                },
                latency: hists
                    .and_then(|h| h.get(i))
                    .and_then(|h| Latency::of(&h.latency, c.jitter_ns.load(Ordering::Relaxed))),
                departures: hists
                    .and_then(|h| h.get(i)?.gaps.as_ref())
                    .filter(|g| !g.is_empty())
                    .map(|g| Departures::of(g, departed.get(i).and_then(Option::as_ref))),
            })
            .collect();
        Summary {
            seconds: tx_time.as_secs_f64(),
            run: None,
            tx: sum(tx),
            rx: rx.snapshot(),
            has_rx,
            latency,
            streams,
            clock: "software",
            send_queues_per_core: 1,
            metrics: None,
        }
    }

    fn tx_mpps(&self) -> f64 {
        mpps(self.tx[0], self.seconds)
    }

    fn rx_mpps(&self) -> f64 {
        mpps(self.rx[0], self.seconds)
    }

    /// The streams' sequence counts added up (0 without a receive port).
    pub(crate) fn seq(&self) -> SeqCounts {
        self.streams.iter().fold(SeqCounts::default(), |a, t| SeqCounts {
            lost: a.lost + t.seq.lost,
            duplicates: a.duplicates + t.seq.duplicates,
            out_of_order: a.out_of_order + t.seq.out_of_order,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_and_strings_json() {
        let at = |s: u64, ms: u64| rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(s * 1000 + ms));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // Leap days of a century year divisible by 400 and of an ordinary leap year.
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_709_164_800 + 86_399, 999), "2024-02-29T23:59:59.999Z");
        assert_eq!(at(4_102_444_800, 0), "2100-01-01T00:00:00.000Z");
        assert_eq!(json_str("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\u000a\\u0001é\"");
    }

    /// A stall is counted apart and left out of the coefficient it would dominate: a steady
    /// 1 µs stream with one 10 ms gap has a coefficient of 10, and of 0 without the stall.
    #[test]
    fn a_stall_is_counted_apart_from_the_spread() {
        let mut g = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        g.record_n(1000, 9999).unwrap();
        g.record(10_000_000).unwrap();
        let d = Departures::of(&g, None);
        assert_eq!((d.gaps, d.stalls), (10_000, 1));
        assert!(d.cv > 9.0, "{}", d.cv);
        assert!(d.cv_without_stalls < 1e-6, "{}", d.cv_without_stalls);
        // Exponential-like spread without stalls keeps its coefficient: gaps 0..=4000 ns
        // spread evenly have a coefficient of 1/sqrt(3).
        let mut u = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for x in 1..=4000u64 {
            u.record(x).unwrap();
        }
        let d = Departures::of(&u, None);
        assert_eq!(d.stalls, 0);
        assert!(
            (d.cv_without_stalls - d.cv).abs() < 1e-3 && (d.cv - 0.577).abs() < 0.01,
            "{}",
            d.cv
        );
    }
}
