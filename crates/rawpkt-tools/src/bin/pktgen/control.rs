//! Live control (`--control ADDR`): a loopback HTTP/1.1 endpoint with JSON bodies, served by
//! `http` as the metrics are, to read statistics, change a stream's rate, pause and resume
//! streams and stop the run while it goes on:
//!
//! - `GET /stats`: the run's and every stream's counts, each stream's asked rate and state, and
//!   the changes made so far (`events`);
//! - `POST /streams/ID/rate` with `{"pps": 200000}` (or `{"rate": "200k"}`, as `--rate` takes
//!   it): the stream's rate from now on, over all cores;
//! - `POST /streams/ID/pause`, `POST /streams/ID/resume`;
//! - `POST /stop`: ends the run as Ctrl-C does (the receiver drains, the summary is printed).
//!
//! `ID` is a stream's name or its number (from 0, in the order of the summary's `streams`).
//! The send loops read each stream's [`StreamControl`] through atomics, once per burst, in the
//! pacer (`stream::Pacer::allowed`): a change takes effect at the next burst of each core, from
//! that moment (a new rate starts from what was sent, with nothing owed; a resumed stream does
//! not make up for its pause). Every change is an [`Event`], shown in the per-second lines and
//! in the JSON (`events`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::http::{Request, Response};
use crate::worker::StreamCounters;

/// What the control endpoint sets of one stream and its pacers read: the rate asked (pps over
/// all cores; 0: none, as fast as the ring takes them), whether it is paused, and a version
/// bumped after every change, so that a pacer loads one word per burst when nothing changed.
pub(crate) struct StreamControl {
    pps_bits: AtomicU64,
    paused: AtomicBool,
    version: AtomicU64,
    /// Whether the stream has a rate to change: not a timed replay, whose pace is the file's.
    rate_settable: bool,
}

impl StreamControl {
    pub(crate) fn new(rate: Option<f64>, rate_settable: bool) -> StreamControl {
        StreamControl {
            pps_bits: AtomicU64::new(rate.unwrap_or(0.0).to_bits()),
            paused: AtomicBool::new(false),
            version: AtomicU64::new(0),
            rate_settable,
        }
    }

    /// The version of the settings: changes after each change (Acquire: the settings read
    /// after it are those of that version or newer).
    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The rate asked (pps over all cores; None: as fast as the ring takes them) and whether
    /// the stream is paused.
    #[inline]
    pub(crate) fn settings(&self) -> (Option<f64>, bool) {
        let pps = f64::from_bits(self.pps_bits.load(Ordering::Relaxed));
        ((pps > 0.0).then_some(pps), self.paused.load(Ordering::Relaxed))
    }

    /// [`StreamControl::set`], for the pacer's tests.
    #[cfg(test)]
    pub(crate) fn set_for_test(&self, pps: Option<f64>, paused: Option<bool>) {
        self.set(pps, paused)
    }

    fn set(&self, pps: Option<f64>, paused: Option<bool>) {
        if let Some(r) = pps {
            self.pps_bits.store(r.to_bits(), Ordering::Relaxed);
        }
        if let Some(p) = paused {
            self.paused.store(p, Ordering::Relaxed);
        }
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// One change made through the control endpoint.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    /// When it was made, ns from the run's start.
    pub t_ns: u64,
    /// The stream's name, or None for the run (stop).
    pub stream: Option<String>,
    /// `rate`, `pause`, `resume` or `stop`.
    pub action: &'static str,
    /// The new rate, for `rate`.
    pub pps: Option<f64>,
    /// The stream's packets sent when it was made (the run's, for stop).
    pub tx_packets: u64,
}

impl Event {
    pub(crate) fn json(&self) -> String {
        let stream = match &self.stream {
            Some(s) => format!(",\"stream\":\"{s}\""),
            None => String::new(),
        };
        let pps = self.pps.map_or(String::new(), |p| format!(",\"pps\":{p}"));
        format!(
            "{{\"t\":{:.6},\"action\":\"{}\"{stream}{pps},\"tx_packets\":{}}}",
            self.t_ns as f64 / 1e9,
            self.action,
            self.tx_packets
        )
    }

    /// One line for the per-second text.
    pub(crate) fn text(&self) -> String {
        let what = match (self.action, self.pps) {
            ("rate", Some(p)) => format!("rate {p} pps"),
            (a, _) => a.to_string(),
        };
        match &self.stream {
            Some(s) => format!("{:7.2}s  control: stream {s}: {what}", self.t_ns as f64 / 1e9),
            None => format!("{:7.2}s  control: {what}", self.t_ns as f64 / 1e9),
        }
    }
}

/// Every change so far, in order; the reporter takes those it has not shown yet.
#[derive(Default)]
pub(crate) struct Events(Mutex<Vec<Event>>);

impl Events {
    fn push(&self, e: Event) {
        if let Ok(mut v) = self.0.lock() {
            v.push(e);
        }
    }

    /// Events from index `from` on.
    pub(crate) fn since(&self, from: usize) -> Vec<Event> {
        self.0
            .lock()
            .map(|v| v.get(from..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }
}

/// What the control thread reads and sets.
pub(crate) struct Sources {
    pub epoch: Instant,
    pub names: Vec<String>,
    pub controls: Vec<Arc<StreamControl>>,
    pub streams: Arc<Vec<StreamCounters>>,
    pub events: Arc<Events>,
}

/// `--control ADDR`: a loopback address and port.
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    crate::http::parse_loopback("--control", s)
}

/// Binds now, serves from a thread of its own (`http::serve`); returns the address bound.
pub(crate) fn serve(addr: SocketAddr, src: Sources) -> Result<SocketAddr, String> {
    crate::http::serve("--control", addr, move |r| respond(r, &src))
}

fn json(status: &'static str, body: String) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: body + "\n",
    }
}

fn error(status: &'static str, what: &str) -> Response {
    json(
        status,
        format!("{{\"error\":\"{}\"}}", what.replace('\\', "\\\\").replace('"', "\\\"")),
    )
}

/// The answer to one request.
fn respond(r: &Request, src: &Sources) -> Response {
    let path = r.path.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (r.method, parts.as_slice()) {
        ("GET", ["stats"]) => json("200 OK", stats(src)),
        ("POST", ["stop"]) => {
            let tx = src.streams.iter().map(|c| c.tx_total()[0]).sum();
            src.events.push(Event {
                t_ns: src.epoch.elapsed().as_nanos() as u64,
                stream: None,
                action: "stop",
                pps: None,
                tx_packets: tx,
            });
            rawpkt_sys::signal::stop_flag().store(true, Ordering::Relaxed);
            json("200 OK", "{\"stopping\":true}".into())
        }
        ("POST", ["streams", id, action]) => {
            let Some(i) = find(src, id) else {
                return error("404 Not Found", &format!("no stream {id}; GET /stats lists them"));
            };
            let c = &src.controls[i];
            let (action, pps, paused) = match *action {
                "rate" if !c.rate_settable => {
                    return error("409 Conflict", "a timed replay keeps its file's pace; its rate is not set");
                }
                "rate" => match rate_of(r.body) {
                    Ok(p) => ("rate", Some(p), None),
                    Err(e) => return error("400 Bad Request", &e),
                },
                "pause" => ("pause", None, Some(true)),
                "resume" => ("resume", None, Some(false)),
                _ => return error("404 Not Found", "a stream's actions are rate, pause and resume"),
            };
            // The count first, then the change: the event's count is never above what was
            // sent when the pacers saw the change.
            let tx = src.streams[i].tx_total()[0];
            let t_ns = src.epoch.elapsed().as_nanos() as u64;
            c.set(pps, paused);
            src.events.push(Event {
                t_ns,
                stream: Some(src.names[i].clone()),
                action,
                pps,
                tx_packets: tx,
            });
            json("200 OK", stream_json(src, i))
        }
        (_, ["stats"] | ["stop"] | ["streams", _, _]) => error("405 Method Not Allowed", "GET /stats; POST the others"),
        _ => error(
            "404 Not Found",
            "GET /stats, POST /streams/ID/rate {\"pps\": N}, POST /streams/ID/pause, POST /streams/ID/resume, POST /stop",
        ),
    }
}

/// A stream by name or number.
fn find(src: &Sources, id: &str) -> Option<usize> {
    src.names
        .iter()
        .position(|n| n == id)
        .or_else(|| id.parse::<usize>().ok().filter(|&i| i < src.names.len()))
}

/// The rate a body asks for: `{"pps": N}` or `{"rate": "TEXT"}` (what `--rate` takes).
fn rate_of(body: &[u8]) -> Result<f64, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RateBody {
        pps: Option<f64>,
        rate: Option<String>,
    }
    let ask = "send {\"pps\": N} (packets per second) or {\"rate\": \"200k\"}";
    let b: RateBody = serde_json::from_slice(body).map_err(|e| format!("{e}; {ask}"))?;
    let text = match (b.pps, b.rate) {
        (Some(n), None) => n.to_string(),
        (None, Some(s)) => s,
        _ => return Err(ask.into()),
    };
    crate::cli::rate(&text).map_err(|e| e.replace("--rate ", ""))
}

fn stream_json(src: &Sources, i: usize) -> String {
    let c = &src.streams[i];
    // Received before sent, as the metrics read them: never more received than sent.
    let rx = c.rx_total();
    let tx = c.tx_total();
    let (pps, paused) = src.controls[i].settings();
    format!(
        "{{\"id\":{i},\"name\":\"{}\",\"pps\":{},\"paused\":{paused},\"tx_packets\":{},\"tx_bytes\":{},\"rx_packets\":{},\"rx_bytes\":{}}}",
        src.names[i],
        pps.map_or("null".to_string(), |p| p.to_string()),
        tx[0],
        tx[1],
        rx[0],
        rx[1]
    )
}

/// `GET /stats`: every stream, its counts read before the time given with them (`t`, seconds
/// from the start), so a count never runs ahead of its time, and the events so far.
fn stats(src: &Sources) -> String {
    let streams: Vec<String> = (0..src.names.len()).map(|i| stream_json(src, i)).collect();
    let t = src.epoch.elapsed().as_secs_f64();
    let events: Vec<String> = src.events.since(0).iter().map(Event::json).collect();
    format!(
        "{{\"t\":{t:.6},\"streams\":[{}],\"events\":[{}]}}",
        streams.join(","),
        events.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Sources {
        Sources {
            epoch: Instant::now(),
            names: vec!["a".into(), "b".into()],
            controls: vec![
                Arc::new(StreamControl::new(Some(1e5), true)),
                Arc::new(StreamControl::new(None, false)),
            ],
            streams: Arc::new(vec![StreamCounters::new(1, false), StreamCounters::new(1, false)]),
            events: Arc::new(Events::default()),
        }
    }

    fn call(src: &Sources, method: &str, path: &str, body: &str) -> Response {
        respond(
            &Request {
                method,
                path,
                body: body.as_bytes(),
            },
            src,
        )
    }

    #[test]
    fn rates_pauses_and_their_events() {
        let src = sources();
        let v0 = src.controls[0].version();
        let r = call(&src, "POST", "/streams/a/rate", "{\"pps\": 200000}");
        assert_eq!(r.status, "200 OK", "{}", r.body);
        assert!(r.body.contains("\"pps\":200000"), "{}", r.body);
        assert_ne!(src.controls[0].version(), v0);
        assert_eq!(src.controls[0].settings(), (Some(2e5), false));
        assert_eq!(
            call(&src, "POST", "/streams/0/rate", "{\"rate\": \"1M\"}").status,
            "200 OK"
        );
        assert_eq!(src.controls[0].settings(), (Some(1e6), false));
        assert_eq!(call(&src, "POST", "/streams/1/pause", "").status, "200 OK");
        assert_eq!(src.controls[1].settings(), (None, true));
        assert_eq!(call(&src, "POST", "/streams/b/resume", "").status, "200 OK");
        assert_eq!(src.controls[1].settings(), (None, false));
        let ev = src.events.since(0);
        let what: Vec<_> = ev.iter().map(|e| (e.stream.as_deref(), e.action, e.pps)).collect();
        assert_eq!(
            what,
            [
                (Some("a"), "rate", Some(2e5)),
                (Some("a"), "rate", Some(1e6)),
                (Some("b"), "pause", None),
                (Some("b"), "resume", None)
            ]
        );
        let stats = call(&src, "GET", "/stats", "");
        let v: serde_json::Value = serde_json::from_str(&stats.body).unwrap();
        assert_eq!(v["streams"][0]["pps"], 1e6);
        assert_eq!(v["events"].as_array().unwrap().len(), 4);
        assert_eq!(src.events.since(3).len(), 1);
    }

    #[test]
    fn mistakes_are_answered_not_applied() {
        let src = sources();
        for (m, p, b, status) in [
            ("POST", "/streams/c/pause", "", "404 Not Found"),
            ("POST", "/streams/9/pause", "", "404 Not Found"),
            ("POST", "/streams/a/rate", "{\"pps\": 0}", "400 Bad Request"),
            ("POST", "/streams/a/rate", "{\"pps\": \"fast\"}", "400 Bad Request"),
            ("POST", "/streams/a/rate", "not json", "400 Bad Request"),
            ("POST", "/streams/a/rate", "{\"rate\": \"lots\"}", "400 Bad Request"),
            ("POST", "/streams/b/rate", "{\"pps\": 5}", "409 Conflict"),
            ("POST", "/streams/a/jump", "", "404 Not Found"),
            ("GET", "/streams/a/pause", "", "405 Method Not Allowed"),
            ("GET", "/", "", "404 Not Found"),
        ] {
            let r = call(&src, m, p, b);
            assert_eq!(r.status, status, "{m} {p} {b}: {}", r.body);
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            assert!(v["error"].is_string(), "{}", r.body);
        }
        assert!(src.events.since(0).is_empty());
        assert_eq!(src.controls[0].settings(), (Some(1e5), false));
    }
}
