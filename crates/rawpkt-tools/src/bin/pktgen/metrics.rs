//! Live metrics in Prometheus's text exposition format (version 0.0.4), served over HTTP from a
//! thread of their own on a loopback address. The thread reads only the atomics the workers
//! publish anyway (as the per-second lines do), so a scrape never touches a send loop.
//!
//! No client can hold the endpoint up: one thread serves every connection at once from a poll(2)
//! loop over non-blocking sockets, each connection has [`DEADLINE`] from its accept to the last
//! byte of its answer (a client that sends its request a byte at a time, or never, is cut off
//! then), and at most [`MAX_CONNECTIONS`] are open: a new one beyond that closes the oldest that
//! has sent nothing yet (else the oldest), so idle connections cannot fill the listen backlog
//! and shut scrapers out.
//!
//! Each scrape is one consistent snapshot in the sense a loss query needs: every received count
//! is read before every sent count, and the senders publish what they send before they hand it
//! to a queue (`worker`), so no frame is counted received before it is counted sent.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long a connection has, from its accept to the last byte of the answer: a scraper sends
/// its request at once (Prometheus's scrape timeout is 10 s by default, and it expects an answer
/// well within it).
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);
/// Connections open at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Longest request read: a GET's line and headers.
const MAX_REQUEST: usize = 4096;

/// Binds now (so that a port in use is one line before the run), serves from a thread that
/// lives as long as the process. Returns the address bound (the port the system chose, when
/// port 0 was asked).
pub(crate) fn serve(addr: SocketAddr, src: Sources) -> Result<SocketAddr, String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
    let bound = l.local_addr().map_err(|e| format!("--metrics {addr}: {e}"))?;
    l.set_nonblocking(true).map_err(|e| format!("--metrics {addr}: {e}"))?;
    std::thread::spawn(move || Server::default().run(&l, &src));
    Ok(bound)
}

/// One client: its request so far, then its answer as it is written out.
struct Conn {
    stream: TcpStream,
    accepted: Instant,
    request: Vec<u8>,
    /// The answer and how much of it is written, once the request is whole.
    answer: Option<(Vec<u8>, usize)>,
}

#[derive(Default)]
struct Server {
    conns: Vec<Conn>,
}

impl Server {
    fn run(&mut self, l: &TcpListener, src: &Sources) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            fds.clear();
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            for c in &self.conns {
                let events = if c.answer.is_some() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                fds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
            // Until the next deadline, and at least once a second.
            let now = Instant::now();
            let wait = self
                .conns
                .iter()
                .map(|c| (c.accepted + DEADLINE).saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            if rawpkt_tools::poll(&mut fds, wait.as_millis() as i32 + 1).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
            // The connections first (those the poll was over), then the new ones.
            let ready: Vec<bool> = fds[1..].iter().map(|p| p.revents != 0).collect();
            for (c, ready) in self.conns.iter_mut().zip(ready) {
                if ready {
                    c.step(src);
                }
            }
            let now = Instant::now();
            self.conns.retain(|c| !c.done() && now < c.accepted + DEADLINE);
            self.accept(l, src);
        }
    }

    /// Takes every connection waiting, serving each at once if its request is already there.
    fn accept(&mut self, l: &TcpListener, src: &Sources) {
        loop {
            let stream = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Out of descriptors (EMFILE), or the client gone (ECONNABORTED): the next
                // poll tries again.
                Err(_) => return,
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() >= MAX_CONNECTIONS {
                let oldest = |quiet: bool| {
                    self.conns
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| !quiet || c.request.is_empty())
                        .min_by_key(|(_, c)| c.accepted)
                        .map(|(i, _)| i)
                };
                if let Some(i) = oldest(true).or_else(|| oldest(false)) {
                    self.conns.swap_remove(i);
                }
            }
            let mut c = Conn {
                stream,
                accepted: Instant::now(),
                request: Vec::new(),
                answer: None,
            };
            c.step(src);
            if !c.done() {
                self.conns.push(c);
            }
        }
    }
}

impl Conn {
    /// Reads what has come of the request; once it is whole, writes what the socket takes of
    /// the answer.
    fn step(&mut self, src: &Sources) {
        if self.answer.is_none() {
            let mut buf = [0u8; 1024];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => {
                        // The client closed its side: answer what came, if anything.
                        if self.request.is_empty() {
                            self.answer = Some((Vec::new(), 0));
                            return;
                        }
                        break;
                    }
                    Ok(n) => {
                        self.request.extend_from_slice(&buf[..n]);
                        if self.request.len() >= MAX_REQUEST || ends_request(&self.request) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => {
                        self.answer = Some((Vec::new(), 0));
                        return;
                    }
                }
            }
            self.answer = Some((respond(&self.request, src), 0));
        }
        if let Some((out, sent)) = self.answer.as_mut() {
            while *sent < out.len() {
                match self.stream.write(&out[*sent..]) {
                    Ok(0) => {
                        *sent = out.len();
                    }
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => *sent = out.len(),
                }
            }
        }
    }

    /// The answer is out (or the client is gone): the connection closes.
    fn done(&self) -> bool {
        self.answer.as_ref().is_some_and(|(out, sent)| *sent >= out.len())
    }
}

/// Whether `req` holds a whole request line and headers (an empty line ends them).
fn ends_request(req: &[u8]) -> bool {
    req.windows(4).any(|w| w == b"\r\n\r\n") || req.windows(2).any(|w| w == b"\n\n")
}

/// The HTTP answer to `req`: the metrics for `GET /metrics` (or `/`), else 404.
fn respond(req: &[u8], src: &Sources) -> Vec<u8> {
    let line = std::str::from_utf8(req).unwrap_or("").lines().next().unwrap_or("");
    let path = line.split(' ').nth(1).unwrap_or("");
    let (status, body) = if line.starts_with("GET ") && (path == "/metrics" || path == "/") {
        ("200 OK", render(src))
    } else {
        ("404 Not Found", "only GET /metrics is served\n".to_string())
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
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
    /// Per stream: sent and received packets and bytes.
    streams: Vec<([u64; 2], [u64; 2])>,
}

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

pub(crate) fn render(src: &Sources) -> String {
    let mut out = String::new();
    let snap = Snapshot::take(src);
    let mut ports = vec![(src.tx_port.as_str(), "tx", snap.tx)];
    if let Some(rx) = &src.rx_port {
        ports.push((rx.as_str(), "rx", snap.rx));
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
    for ((n, _), (t, r)) in streams.iter().zip(&snap.streams) {
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
    for ((n, _), (t, r)) in streams.iter().zip(&snap.streams) {
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
        for ((n, c), (t, r)) in streams.iter().zip(&snap.streams) {
            let _ = writeln!(out, "{name}{{stream=\"{}\"}} {}", label(n), get(c, *t, *r));
        }
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
