//! Live metrics in Prometheus's text exposition format (version 0.0.4), served over HTTP from a
//! thread of their own on a loopback address. The thread reads only the atomics the workers
//! publish anyway (as the per-second lines do), so a scrape never touches a send loop.
//!
//! No client can hold the endpoint up: `http` serves every connection at once from one thread,
//! each with a deadline and a bounded request, and at most a few dozen at a time.
//!
//! Each scrape is one consistent snapshot in the sense a loss query needs: every received count
//! is read before every sent count, and the senders publish what they send before they hand it
//! to a queue (`worker`), so no frame is counted received before it is counted sent.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::worker::{Counters, StreamCounters};

/// `--metrics ADDR`: a loopback address and port (`http::parse_loopback`).
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    crate::http::parse_loopback("--metrics", s)
}

/// What the metrics thread reads of one direction of the run (a sending port, its receiving
/// port, their streams).
pub(crate) struct Sources {
    pub tx_port: String,
    pub rx_port: Option<String>,
    pub tx: Vec<Arc<Counters>>,
    pub rx: Arc<Counters>,
    pub names: Vec<String>,
    pub streams: Arc<Vec<StreamCounters>>,
}

/// Binds now (so that a port in use is one line before the run), serves from a thread that
/// lives as long as the process (`http::serve`). Returns the address bound (the port the
/// system chose, when port 0 was asked).
pub(crate) fn serve(addr: SocketAddr, dirs: Vec<Sources>) -> Result<SocketAddr, String> {
    crate::http::serve("--metrics", addr, move |r| respond(r, &dirs))
}

/// The answer to a request: the metrics for `GET /metrics` (or `/`), else 404.
fn respond(r: &crate::http::Request, dirs: &[Sources]) -> crate::http::Response {
    let (status, body) = if r.method == "GET" && (r.path == "/metrics" || r.path == "/") {
        ("200 OK", render(dirs))
    } else {
        ("404 Not Found", "only GET /metrics is served\n".to_string())
    };
    crate::http::Response {
        status,
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body,
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The counters at one moment, as a loss query needs them: everything received is read before
/// anything sent, and a sender publishes its frames before it hands them to a queue, so a count
/// received is never above the matching count sent.
struct Snapshot {
    tx: [u64; 4],
    rx: [u64; 4],
    /// Per stream: what it sent and received.
    streams: Vec<StreamCounts>,
}

/// A stream's sent and received packets and bytes.
type StreamCounts = ([u64; 2], [u64; 2]);

impl Snapshot {
    fn take(src: &Sources) -> Snapshot {
        let rx = src.rx.snapshot();
        let rx_streams: Vec<[u64; 2]> = src.streams.iter().map(StreamCounters::rx_total).collect();
        let tx_streams: Vec<[u64; 2]> = src.streams.iter().map(StreamCounters::tx_total).collect();
        let mut tx = src
            .tx
            .iter()
            .map(|c| c.snapshot())
            .fold([0u64; 4], |a, s| [a[0] + s[0], a[1] + s[1], a[2] + s[2], a[3] + s[3]]);
        // The queues' counts are published every few hundred bursts; the streams' before every
        // send: the port has sent at least what its streams have.
        let made = tx_streams.iter().fold([0u64; 2], |a, t| [a[0] + t[0], a[1] + t[1]]);
        tx[0] = tx[0].max(made[0]);
        tx[1] = tx[1].max(made[1]);
        Snapshot {
            tx,
            rx,
            streams: tx_streams.into_iter().zip(rx_streams).collect(),
        }
    }
}

/// The metrics of every direction. A port's series are `{port, direction}`; a stream's are
/// `{stream, tx_port, rx_port}`, as every direction sends the same streams.
pub(crate) fn render(dirs: &[Sources]) -> String {
    let mut out = String::new();
    let snaps: Vec<Snapshot> = dirs.iter().map(Snapshot::take).collect();
    // A port sends in one direction at most and receives in one at most (`Config`): each
    // (port, direction) is one series.
    let mut ports: Vec<(&str, &str, [u64; 4])> = Vec::new();
    for (src, snap) in dirs.iter().zip(&snaps) {
        ports.push((src.tx_port.as_str(), "tx", snap.tx));
        if let Some(rx) = &src.rx_port {
            ports.push((rx.as_str(), "rx", snap.rx));
        }
    }
    for (i, (name, help)) in [
        (
            "pktgen_port_packets_total",
            "Packets sent (tx) or received (rx) on a port.",
        ),
        ("pktgen_port_bytes_total", "Bytes of those packets, without FCS."),
        ("pktgen_port_drops_total", "Packets the port dropped."),
        ("pktgen_port_errors_total", "Completion errors on the port's queues."),
    ]
    .into_iter()
    .enumerate()
    {
        family(&mut out, name, "counter", help);
        for (port, dir, v) in &ports {
            let _ = writeln!(out, "{name}{{port=\"{}\",direction=\"{dir}\"}} {}", label(port), v[i]);
        }
    }
    // Each stream of each direction: its labels, its counters and its snapshot.
    let streams: Vec<(String, &StreamCounters, &StreamCounts)> = dirs
        .iter()
        .zip(&snaps)
        .flat_map(|(src, snap)| {
            let pair = format!(
                "tx_port=\"{}\",rx_port=\"{}\"",
                label(&src.tx_port),
                label(src.rx_port.as_deref().unwrap_or(""))
            );
            src.names
                .iter()
                .zip(src.streams.iter())
                .zip(&snap.streams)
                .map(move |((n, c), t)| (format!("stream=\"{}\",{pair}", label(n)), c, t))
        })
        .collect();
    for (what, i, help) in [
        ("packets", 0, "Packets of a stream, sent (tx) or received (rx)."),
        ("bytes", 1, "Bytes of a stream's packets, sent (tx) or received (rx)."),
    ] {
        let name = format!("pktgen_stream_{what}_total");
        family(&mut out, &name, "counter", help);
        for (l, _, (t, r)) in &streams {
            let _ = writeln!(out, "{name}{{{l},direction=\"tx\"}} {}", t[i]);
            let _ = writeln!(out, "{name}{{{l},direction=\"rx\"}} {}", r[i]);
        }
    }
    // The sequence numbers' counts, named as in the JSON (`lost`, `duplicates`, `out_of_order`,
    // `in_flight`); read after the received counts, as the reporter reads them.
    for (name, kind, help, get) in [
        (
            "pktgen_stream_lost_total",
            "counter",
            "Frames of a stream known lost so far: numbers passed by 64 Ki higher ones without arriving.",
            (|c: &StreamCounters, _: [u64; 2], _: [u64; 2]| c.lost.load(Ordering::Acquire))
                as fn(&StreamCounters, [u64; 2], [u64; 2]) -> u64,
        ),
        (
            "pktgen_stream_duplicates_total",
            "counter",
            "Frames of a stream received again (a sequence number seen before).",
            |c, _, _| c.duplicates.load(Ordering::Acquire),
        ),
        (
            "pktgen_stream_out_of_order_total",
            "counter",
            "Frames of a stream received after a higher sequence number of their core.",
            |c, _, _| c.out_of_order.load(Ordering::Acquire),
        ),
        (
            "pktgen_stream_in_flight",
            "gauge",
            "Frames of a stream sent and neither received nor known lost: on their way, or overtaken.",
            |c, t, r| c.in_flight(t[0], r[0]),
        ),
    ] {
        family(&mut out, name, kind, help);
        for (l, c, (t, r)) in &streams {
            let _ = writeln!(out, "{name}{{{l}}} {}", get(c, *t, *r));
        }
    }
    family(
        &mut out,
        "pktgen_stream_latency_seconds",
        "summary",
        "Send stamp to receive time of a stream's frames (quantiles over the run so far).",
    );
    for (l, c, _) in &streams {
        for (q, v) in [
            ("0.5", &c.lat_p50_ns),
            ("0.99", &c.lat_p99_ns),
            ("0.999", &c.lat_p999_ns),
        ] {
            let _ = writeln!(
                out,
                "pktgen_stream_latency_seconds{{{l},quantile=\"{q}\"}} {:e}",
                v.load(Ordering::Relaxed) as f64 / 1e9
            );
        }
        let _ = writeln!(
            out,
            "pktgen_stream_latency_seconds_sum{{{l}}} {:e}\npktgen_stream_latency_seconds_count{{{l}}} {}",
            c.lat_sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            c.lat_samples.load(Ordering::Relaxed)
        );
    }
    family(
        &mut out,
        "pktgen_stream_jitter_seconds",
        "gauge",
        "RFC 3550 interarrival jitter of a stream.",
    );
    for (l, c, _) in &streams {
        let _ = writeln!(
            out,
            "pktgen_stream_jitter_seconds{{{l}}} {:e}",
            c.jitter_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
