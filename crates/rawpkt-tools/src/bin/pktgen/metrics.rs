//! Live metrics in Prometheus's text exposition format (version 0.0.4), served over HTTP from a
//! thread of their own on a loopback address. The thread reads only the atomics the workers
//! publish anyway (as the per-second lines do), so a scrape never touches a send loop.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::worker::{Counters, StreamCounters};

/// `--metrics ADDR`: a loopback address and port. Anything else is refused: the endpoint has no
/// authentication, and a generator's counters are nobody else's business.
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s
        .parse()
        .map_err(|_| format!("--metrics {s:?}: expected a loopback address and port, like 127.0.0.1:9101"))?;
    if !a.ip().is_loopback() {
        return Err(format!(
            "--metrics {s}: serves only on a loopback address (127.0.0.0/8 or ::1): it has no authentication"
        ));
    }
    Ok(a)
}

/// What the metrics thread reads.
pub(crate) struct Sources {
    pub tx_port: String,
    pub rx_port: Option<String>,
    pub tx: Vec<Arc<Counters>>,
    pub rx: Arc<Counters>,
    pub names: Vec<String>,
    pub streams: Arc<Vec<StreamCounters>>,
}

/// Binds now (so that a port in use is one line before the run), serves from a thread that
/// lives as long as the process.
pub(crate) fn serve(addr: SocketAddr, src: Sources) -> Result<(), String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            // One scraper at a time is plenty; a slow or silent one is given a second.
            let _ = answer(conn, &src);
        }
    });
    Ok(())
}

fn answer(mut c: TcpStream, src: &Sources) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(1)))?;
    c.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut req = [0u8; 4096];
    let mut n = 0;
    while n < req.len() {
        let k = c.read(&mut req[n..])?;
        if k == 0 {
            break;
        }
        n += k;
        if req[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let line = std::str::from_utf8(&req[..n])
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    let path = line.split(' ').nth(1).unwrap_or("");
    let (status, body) = if line.starts_with("GET ") && (path == "/metrics" || path == "/") {
        ("200 OK", render(src))
    } else {
        ("404 Not Found", "only GET /metrics is served\n".to_string())
    };
    write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) fn render(src: &Sources) -> String {
    let mut out = String::new();
    let tx = src
        .tx
        .iter()
        .map(|c| c.snapshot())
        .fold([0u64; 4], |a, s| [a[0] + s[0], a[1] + s[1], a[2] + s[2], a[3] + s[3]]);
    let mut ports = vec![(src.tx_port.as_str(), "tx", tx)];
    if let Some(rx) = &src.rx_port {
        ports.push((rx.as_str(), "rx", src.rx.snapshot()));
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
    let streams: Vec<(&String, &StreamCounters)> = src.names.iter().zip(src.streams.iter()).collect();
    family(
        &mut out,
        "pktgen_stream_packets_total",
        "counter",
        "Packets of a stream, sent (tx) or received (rx).",
    );
    for (n, c) in &streams {
        let (t, r) = (c.tx_total(), c.rx_total());
        let _ = writeln!(
            out,
            "pktgen_stream_packets_total{{stream=\"{}\",direction=\"tx\"}} {}",
            label(n),
            t[0]
        );
        let _ = writeln!(
            out,
            "pktgen_stream_packets_total{{stream=\"{}\",direction=\"rx\"}} {}",
            label(n),
            r[0]
        );
    }
    family(
        &mut out,
        "pktgen_stream_bytes_total",
        "counter",
        "Bytes of a stream's packets, sent (tx) or received (rx).",
    );
    for (n, c) in &streams {
        let (t, r) = (c.tx_total(), c.rx_total());
        let _ = writeln!(
            out,
            "pktgen_stream_bytes_total{{stream=\"{}\",direction=\"tx\"}} {}",
            label(n),
            t[1]
        );
        let _ = writeln!(
            out,
            "pktgen_stream_bytes_total{{stream=\"{}\",direction=\"rx\"}} {}",
            label(n),
            r[1]
        );
    }
    family(
        &mut out,
        "pktgen_stream_latency_seconds",
        "summary",
        "Send stamp to receive time of a stream's frames (quantiles over the run so far).",
    );
    for (n, c) in &streams {
        let n = label(n);
        for (q, v) in [
            ("0.5", &c.lat_p50_ns),
            ("0.99", &c.lat_p99_ns),
            ("0.999", &c.lat_p999_ns),
        ] {
            let _ = writeln!(
                out,
                "pktgen_stream_latency_seconds{{stream=\"{n}\",quantile=\"{q}\"}} {:e}",
                v.load(Ordering::Relaxed) as f64 / 1e9
            );
        }
        let _ = writeln!(
            out,
            "pktgen_stream_latency_seconds_sum{{stream=\"{n}\"}} {:e}\npktgen_stream_latency_seconds_count{{stream=\"{n}\"}} {}",
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
    for (n, c) in &streams {
        let _ = writeln!(
            out,
            "pktgen_stream_jitter_seconds{{stream=\"{}\"}} {:e}",
            label(n),
            c.jitter_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(parse_addr("127.0.0.1:9101").is_ok());
        assert!(parse_addr("[::1]:9101").is_ok());
        assert!(parse_addr("0.0.0.0:9101").unwrap_err().contains("loopback"));
        assert!(parse_addr("localhost")
            .unwrap_err()
            .contains("expected a loopback address"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
