//! Streams: what a run sends, as one or more independent definitions (frame template, size,
//! rate, rate shape, flows, count), and the pacer each transmit core keeps per stream.
//!
//! One stream comes from the command line; several from a stream file, a small subset of TOML
//! (docs/pktgen.md has the schema): `[[stream]]` tables of `key = value` lines, values a quoted
//! string, a number or `true`/`false`, `#` comments. It is parsed here, in about a hundred
//! lines, rather than by the `toml` and `serde` crates, so that a mistake names file, line and
//! field in one line and pktgen gains no dependencies.

use std::net::IpAddr;
use std::path::Path;

use crate::cli::{Config, Size};
use crate::fail::Fail;

/// How departures are spread in time at a given rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Shape {
    /// Evenly: packet k leaves at k / rate (as many as are due at each burst).
    Constant,
    /// Exponential gaps of mean 1 / rate (a Poisson process), as MoonGen's `poissonDelay`.
    Poisson,
    /// Groups of N back to back, one group every N / rate.
    Bursts(u32),
    /// A replay: the file's own times, divided by this factor.
    Timed(f64),
}

impl Shape {
    pub(crate) fn parse(s: &str) -> Result<Shape, String> {
        match s {
            "constant" => Ok(Shape::Constant),
            "poisson" => Ok(Shape::Poisson),
            _ => match s.strip_prefix("bursts:").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=4096).contains(&n) => Ok(Shape::Bursts(n)),
                _ => Err(format!(
                    "{s:?}: expected constant, poisson or bursts:N (N from 1 to 4096)"
                )),
            },
        }
    }

    pub(crate) fn name(&self) -> String {
        match self {
            Shape::Constant => "constant".into(),
            Shape::Poisson => "poisson".into(),
            Shape::Bursts(n) => format!("bursts:{n}"),
            Shape::Timed(x) => format!("timed at {x}x"),
        }
    }
}

/// Most streams in a run: the stream id is one byte of the stamp.
pub(crate) const MAX_STREAMS: usize = 64;

/// One stream as asked for; the fields a stream file leaves out come from the command line.
#[derive(Clone, Debug)]
pub(crate) struct StreamSpec {
    pub name: String,
    pub size: Size,
    pub rate: Option<f64>,
    pub shape: Shape,
    pub flows: u32,
    pub count: Option<u64>,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// VLAN tags and encapsulation.
    pub headers: crate::template::Headers,
    /// Fields that vary per packet.
    pub ranges: Vec<crate::template::Range>,
    /// The latency stream: sent from the first core on a send queue of its own, so that it
    /// never waits behind the load in pktgen's own ring.
    pub latency: bool,
}

impl StreamSpec {
    /// The stream the command line describes.
    pub(crate) fn from_config(cfg: &Config) -> StreamSpec {
        StreamSpec {
            name: "load".into(),
            size: cfg.size,
            rate: cfg.rate,
            shape: cfg.shape,
            flows: cfg.flows,
            count: cfg.count,
            src_ip: cfg.src_ip,
            dst_ip: cfg.dst_ip,
            src_port: cfg.src_port,
            dst_port: cfg.dst_port,
            headers: cfg.headers.clone(),
            ranges: cfg.ranges.clone(),
            latency: false,
        }
    }

    /// The low-rate latency stream beside the load: smallest frames with the command line's
    /// headers (so that it takes the load's path), one flow of its own (the load's destination
    /// port + 1, so a capture tells them apart).
    pub(crate) fn latency(cfg: &Config, rate: f64) -> StreamSpec {
        let mut s = StreamSpec::from_config(cfg);
        s.ranges.clear();
        let min = crate::traffic::min_len(&s);
        StreamSpec {
            headers: s.headers,
            ranges: s.ranges,
            name: "latency".into(),
            size: Size::Fixed(min.max(60)),
            rate: Some(rate),
            shape: Shape::Constant,
            flows: 1,
            count: None,
            src_ip: cfg.src_ip,
            dst_ip: cfg.dst_ip,
            src_port: cfg.src_port,
            dst_port: cfg.dst_port.wrapping_add(1),
            latency: true,
        }
    }

    /// Checks that hold for a stream from anywhere; `Err` is the reason, without the source.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.src_ip.is_ipv4() != self.dst_ip.is_ipv4() {
            return Err(("dst_ip", "src_ip and dst_ip must both be IPv4 or both IPv6".into()));
        }
        let h = &self.headers;
        if h.encap != crate::template::Encap::None && h.outer.0.is_ipv4() != h.outer.1.is_ipv4() {
            return Err((
                "outer_dst_ip",
                "outer_src_ip and outer_dst_ip must both be IPv4 or both IPv6".into(),
            ));
        }
        let min = crate::traffic::min_len(self);
        if let Size::Fixed(n) = self.size {
            if n < min {
                return Err((
                    "size",
                    format!("{n}: these headers and pktgen's stamp need at least {min} bytes"),
                ));
            }
        }
        for r in &self.ranges {
            let base = match r.field {
                crate::template::Field::SrcPort => self.src_port,
                crate::template::Field::DstPort => self.dst_port,
                _ => continue,
            };
            if u64::from(base) + u64::from(r.count) - 1 > 65535 {
                return Err((
                    "ranges",
                    format!("a port range of {} from {base} passes 65535", r.count),
                ));
            }
        }
        if self.flows == 0 || u64::from(self.src_port) + u64::from(self.flows) - 1 > 65535 {
            return Err((
                "flows",
                format!(
                    "{}: must be at least 1 and keep src_port + flows - 1 <= 65535",
                    self.flows
                ),
            ));
        }
        if matches!(self.shape, Shape::Poisson | Shape::Bursts(_)) && self.rate.is_none() {
            return Err(("shape", format!("{} needs a rate", self.shape.name())));
        }
        if self.count == Some(0) {
            return Err(("count", "0: nothing to send".into()));
        }
        Ok(())
    }
}

/// A stream ready to send: what was asked for and its frames.
pub(crate) struct Stream {
    pub spec: StreamSpec,
    pub traffic: crate::traffic::Traffic,
}

/// Longest stream file read, in bytes: 64 streams of every field take a few kilobytes.
pub(crate) const MAX_FILE: u64 = 1 << 20;

/// Reads a stream file, a regular file of at most [`MAX_FILE`] bytes or `-` for standard input;
/// every mistake in it is `FILE:LINE: field NAME: what is wrong`, and a path that is no regular
/// file (a FIFO, a device, a directory) or a file too long is refused before a byte is read:
/// usage mistakes. A file that cannot be read is a failure. Ctrl-C or SIGTERM end the wait for
/// standard input.
pub(crate) fn read_file(path: &Path, cfg: &Config) -> Result<Vec<StreamSpec>, Fail> {
    use rawpkt_tools::file;
    let stdin = path == Path::new("-");
    let name = if stdin {
        "(stdin)".to_string()
    } else {
        path.display().to_string()
    };
    let data = if stdin {
        file::read_stdin_at_most(MAX_FILE, rawpkt_sys::signal::stop_flag())
    } else {
        file::read_at_most(path, MAX_FILE)
    };
    let data = data.map_err(|e| {
        let what = format!("--streams {}: {e}", path.display());
        if e.kind() == std::io::ErrorKind::Interrupted {
            Fail::Runtime(format!("--streams {}: interrupted before its end", path.display()))
        } else if file::refused(&e) {
            Fail::Usage(what)
        } else {
            Fail::Runtime(what)
        }
    })?;
    parse_bytes(&name, &data, cfg).map_err(Fail::Usage)
}

/// [`parse`] of a file's bytes: a line that is not UTF-8 is a mistake at that line.
pub(crate) fn parse_bytes(file: &str, data: &[u8], cfg: &Config) -> Result<Vec<StreamSpec>, String> {
    let text = std::str::from_utf8(data).map_err(|e| {
        let at = e.valid_up_to();
        let line = 1 + data[..at].iter().filter(|&&b| b == b'\n').count();
        let column = 1 + at - data[..at].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        format!(
            "{file}:{line}: not UTF-8 text (byte {:#04x} at column {column})",
            data[at]
        )
    })?;
    parse(file, text, cfg)
}

pub(crate) fn parse(file: &str, text: &str, cfg: &Config) -> Result<Vec<StreamSpec>, String> {
    let mut out: Vec<(StreamSpec, usize)> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at = |field: &str, what: String| {
            if field.is_empty() {
                format!("{file}:{line}: {what}")
            } else {
                format!("{file}:{line}: field {field}: {what}")
            }
        };
        let l = strip_comment(raw).trim();
        if l.is_empty() {
            continue;
        }
        if l == "[[stream]]" {
            if out.len() == MAX_STREAMS {
                return Err(at("", format!("more than {MAX_STREAMS} streams")));
            }
            let mut s = StreamSpec::from_config(cfg);
            s.name = format!("stream{}", out.len());
            out.push((s, line));
            seen.clear();
            continue;
        }
        if l.starts_with('[') {
            return Err(at("", format!("{l}: the only table is [[stream]]")));
        }
        let Some((key, value)) = l.split_once('=') else {
            return Err(at("", format!("{l:?}: expected key = value or [[stream]]")));
        };
        let (key, value) = (key.trim(), value.trim());
        let Some((s, _)) = out.last_mut() else {
            return Err(at(key, "comes before the first [[stream]]".into()));
        };
        if seen.contains(&key) {
            return Err(at(key, "given twice in one stream".into()));
        }
        let v = Value::parse(value).map_err(|e| at(key, e))?;
        set(s, key, &v).map_err(|e| at(key, e))?;
        // `key` borrows `text`, which outlives `seen`.
        seen.push(key);
    }
    if out.is_empty() {
        return Err(format!("{file}: no [[stream]] in it"));
    }
    for (s, line) in &out {
        if let Err((field, e)) = s.check() {
            return Err(format!("{file}:{line}: field {field}: {e}"));
        }
    }
    for (i, (s, line)) in out.iter().enumerate() {
        if out[..i].iter().any(|(o, _)| o.name == s.name) {
            return Err(format!("{file}:{line}: field name: {:?} names two streams", s.name));
        }
    }
    Ok(out.into_iter().map(|(s, _)| s).collect())
}

fn strip_comment(l: &str) -> &str {
    let mut quoted = false;
    for (i, c) in l.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &l[..i],
            _ => {}
        }
    }
    l
}

enum Value {
    Str(String),
    Num(String),
    Bool(bool),
}

impl Value {
    fn parse(v: &str) -> Result<Value, String> {
        if let Some(rest) = v.strip_prefix('"') {
            return match rest.strip_suffix('"') {
                Some(s) if !s.contains('"') && !s.contains('\\') => Ok(Value::Str(s.to_string())),
                _ => Err(format!("{v}: a string is \"...\" without escapes")),
            };
        }
        match v {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ if !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || "+-._".contains(c)) => {
                Ok(Value::Num(v.replace('_', "")))
            }
            _ => Err(format!("{v:?}: expected a \"string\", a number, true or false")),
        }
    }

    /// The text of a string or a number (`rate = 1e6` and `rate = "1M"` both read).
    fn text(&self) -> Result<&str, String> {
        match self {
            Value::Str(s) | Value::Num(s) => Ok(s),
            Value::Bool(b) => Err(format!("{b}: expected a value, not true/false")),
        }
    }

    fn int<T: std::str::FromStr>(&self, what: &str) -> Result<T, String> {
        let t = self.text()?;
        t.parse().map_err(|_| format!("{t}: expected {what}"))
    }
}

fn set(s: &mut StreamSpec, key: &str, v: &Value) -> Result<(), String> {
    match key {
        "name" => match v {
            Value::Str(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) => {
                s.name = n.clone()
            }
            _ => return Err("expected a quoted name of letters, digits, '-', '_' or '.'".into()),
        },
        "size" => s.size = crate::cli::size(v.text()?).map_err(|e| e.replace("--size ", ""))?,
        "rate" => s.rate = Some(crate::cli::rate(v.text()?).map_err(|e| e.replace("--rate ", ""))?),
        "shape" => s.shape = Shape::parse(v.text()?)?,
        "flows" => s.flows = v.int("a number of flows from 1")?,
        "count" => s.count = Some(v.int("a number of packets")?),
        "src_ip" => s.src_ip = v.int("an IPv4 or IPv6 address")?,
        "dst_ip" => s.dst_ip = v.int("an IPv4 or IPv6 address")?,
        "src_port" => s.src_port = v.int("a UDP port, 0 to 65535")?,
        "dst_port" => s.dst_port = v.int("a UDP port, 0 to 65535")?,
        "vlan" => s.headers.vlan = crate::cli::vlans(v.text()?)?,
        "encap" => s.headers.encap = crate::template::Encap::parse(v.text()?)?,
        "outer_src_ip" => s.headers.outer.0 = v.int("an IPv4 or IPv6 address")?,
        "outer_dst_ip" => s.headers.outer.1 = v.int("an IPv4 or IPv6 address")?,
        "ranges" => s.ranges = crate::template::Range::parse_list(v.text()?)?,
        _ => {
            return Err(
                "unknown; a stream has name, size, rate, shape, flows, count, src_ip, dst_ip, src_port, \
                 dst_port, vlan, encap, outer_src_ip, outer_dst_ip, ranges"
                    .into(),
            )
        }
    }
    Ok(())
}

/// When a stream's packets may leave, kept by each transmit core for each stream: its share of
/// the rate and of the count, and how many it has made.
pub(crate) struct Pacer {
    /// Packets per nanosecond (this core's share), or none: as fast as the ring takes them.
    per_ns: Option<f64>,
    shape: Shape,
    pub made: u64,
    pub limit: u64,
    /// Poisson: departures due so far, the next one's time (ns from the start) and the
    /// generator's state.
    due: u64,
    next_ns: f64,
    rng: u64,
    /// Timed: the replay's times over the factor, the period of one loop (its span and one
    /// mean gap, so that the loops follow each other as the frames within one do), where the
    /// next departure is in them, and the start of the current loop.
    times: Vec<f64>,
    period: f64,
    slot: usize,
    base: f64,
    /// Room a stream without a rate takes of each burst, when several share it.
    share: usize,
    /// Poisson and timed: when each departure not yet made was due (ns from the start, rounded
    /// down), departure `k` at `k % DUE_RING`; at most a burst is due ahead of those made.
    dues: [u64; DUE_RING],
}

/// Departures a pacer remembers the due time of: the largest burst (`--burst` takes at most
/// 256), since no more than a burst is ever due ahead of those made.
const DUE_RING: usize = 256;

impl Pacer {
    pub(crate) fn new(
        rate: Option<f64>,
        shape: Shape,
        limit: Option<u64>,
        seed: u64,
        share: usize,
        times: &[u64],
    ) -> Pacer {
        let (times, period) = match shape {
            Shape::Timed(x) if !times.is_empty() => {
                let t: Vec<f64> = times.iter().map(|&t| t as f64 / x).collect();
                let span = t[t.len() - 1];
                (t.clone(), span + span / (t.len().max(2) - 1) as f64)
            }
            _ => (Vec::new(), 0.0),
        };
        let mut p = Pacer {
            times,
            period,
            slot: 0,
            base: 0.0,
            per_ns: rate.map(|r| r / 1e9),
            shape,
            made: 0,
            limit: limit.unwrap_or(u64::MAX),
            due: 0,
            next_ns: 0.0,
            // xorshift64* needs a state other than 0.
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            share: share.clamp(1, DUE_RING),
            dues: [0; DUE_RING],
        };
        p.next_ns = if p.times.is_empty() { p.gap() } else { 0.0 };
        p
    }

    /// Timed: the departure after the one at `next_ns`.
    fn next_timed(&mut self) -> f64 {
        self.slot += 1;
        if self.slot == self.times.len() {
            self.slot = 0;
            self.base += self.period;
        }
        self.base + self.times[self.slot]
    }

    pub(crate) fn done(&self) -> bool {
        self.made >= self.limit
    }

    /// This core's share of the stream's rate, packets per ns, if it has one.
    pub(crate) fn rate_per_ns(&self) -> Option<f64> {
        self.per_ns
    }

    /// Packets the rate asks of this pacer by `elapsed_ns` (its count at most), for telling a
    /// stream that falls short of its rate: what `allowed` lets through when the room is there.
    /// 0 for a stream without a rate (as fast as the ring takes, or a replay at its own times).
    pub(crate) fn owed(&self, elapsed_ns: u64) -> u64 {
        let t = elapsed_ns as f64;
        let owed = match (self.per_ns, self.shape) {
            (None, _) | (_, Shape::Timed(_)) => return 0,
            (Some(r), Shape::Constant) => (t * r) as u64,
            (Some(r), Shape::Bursts(b)) => (t * r) as u64 / u64::from(b) * u64::from(b),
            // The departures drawn, and those due since at the rate (`due_by` draws no more
            // than a burst ahead of those made).
            (Some(r), Shape::Poisson) if self.next_ns <= t => self.due + 1 + ((t - self.next_ns) * r) as u64,
            (Some(_), Shape::Poisson) => self.due,
        };
        owed.min(self.limit)
    }

    /// Whether each departure has a time of its own (Poisson, timed replay), which a sender
    /// can wait for and keep, rather than a credit that bursts may spend (constant, bursts).
    pub(crate) fn per_departure(&self) -> bool {
        match self.shape {
            Shape::Poisson => self.per_ns.is_some(),
            Shape::Timed(_) => !self.times.is_empty(),
            Shape::Constant | Shape::Bursts(_) => false,
        }
    }

    /// When the next departure is due, in ns from the start: 0 when one is due and not yet
    /// made, `u64::MAX` when the count is done. Meant for `per_departure` pacers.
    #[inline]
    pub(crate) fn next_due_ns(&self) -> u64 {
        if self.done() {
            u64::MAX
        } else if self.due > self.made {
            0
        } else {
            // `next_ns` is never negative; the cast rounds up so that waiting until it has
            // passed makes the departure due.
            self.next_ns.ceil() as u64
        }
    }

    /// When departure `k` (counting from 0, one that is due and not yet made) was due, ns from
    /// the start: what its lateness is measured against.
    #[inline]
    pub(crate) fn due_ns_of(&self, k: u64) -> u64 {
        debug_assert!(k >= self.made && k < self.due, "departure {k} is not due and unmade");
        self.dues[(k % DUE_RING as u64) as usize]
    }

    /// Exponential gap of mean 1 / rate, by inversion of a uniform in (0, 1].
    fn gap(&mut self) -> f64 {
        let Some(per_ns) = self.per_ns else { return 0.0 };
        // xorshift64* (Vigna 2016): plenty for spacing packets, and no dependency.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let u = ((self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        -u.ln() / per_ns
    }

    /// How many packets may be made now, `elapsed_ns` after the start, into `room` free slots.
    #[inline]
    pub(crate) fn allowed(&mut self, elapsed_ns: u64, room: usize) -> usize {
        let left = self.limit - self.made;
        let room = room.min(self.share) as u64;
        let n = match (self.per_ns, self.shape) {
            (_, Shape::Timed(_)) if !self.times.is_empty() => self.due_by(elapsed_ns, room),
            (None, _) | (_, Shape::Timed(_)) => room,
            // Packets made so far may not run ahead of rate × time since the start.
            (Some(r), Shape::Constant) => ((elapsed_ns as f64 * r) as u64).saturating_sub(self.made),
            (Some(r), Shape::Bursts(b)) => {
                let b = u64::from(b);
                (((elapsed_ns as f64 * r) as u64) / b * b).saturating_sub(self.made)
            }
            (Some(_), Shape::Poisson) => self.due_by(elapsed_ns, room),
        };
        n.min(room).min(left) as usize
    }

    /// Poisson and timed: the departures due by `elapsed_ns`, at most `room` ahead of those
    /// made. Out of line: the send loop that inlines `allowed` keeps its registers.
    #[inline(never)]
    fn due_by(&mut self, elapsed_ns: u64, room: u64) -> u64 {
        let t = elapsed_ns as f64;
        let timed = !self.times.is_empty();
        while self.next_ns <= t && self.due - self.made < room {
            self.dues[(self.due % DUE_RING as u64) as usize] = self.next_ns as u64;
            self.due += 1;
            self.next_ns = if timed {
                self.next_timed()
            } else {
                self.next_ns + self.gap()
            };
        }
        self.due - self.made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg() -> Config {
        Config::from_args(crate::cli::Args::try_parse_from(["pktgen"]).unwrap()).unwrap()
    }

    #[test]
    fn a_stream_file_reads_and_takes_the_rest_from_the_command_line() {
        let s = parse(
            "s.toml",
            "# two streams\n[[stream]]\nname = \"small\"\nsize = 60\nrate = \"1M\" # pps\n\n[[stream]]\nsize = \"imix\"\nrate = 2e5\nflows = 8\nshape = \"poisson\"\ncount = 1_000\n",
            &cfg(),
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].name.as_str(), s[0].size, s[0].rate),
            ("small", Size::Fixed(60), Some(1e6))
        );
        assert_eq!(
            (s[1].name.as_str(), s[1].size, s[1].rate),
            ("stream1", Size::Imix, Some(2e5))
        );
        assert_eq!((s[1].flows, s[1].shape, s[1].count), (8, Shape::Poisson, Some(1000)));
        assert_eq!(s[1].dst_port, 5678, "from the command line");
    }

    #[test]
    fn a_mistake_names_file_line_and_field_in_one_line() {
        for (text, want) in [
            (
                "[[stream]]\nrate = \"fast\"\n",
                "s.toml:2: field rate: \"fast\": expected packets per second",
            ),
            (
                "[[stream]]\nsize = 59\n",
                "s.toml:2: field size: \"59\": expected a frame size",
            ),
            ("[[stream]]\nsizes = 60\n", "s.toml:2: field sizes: unknown"),
            ("rate = 1\n", "s.toml:1: field rate: comes before the first [[stream]]"),
            ("[[stream]]\nrate = 1\nrate = 2\n", "s.toml:3: field rate: given twice"),
            ("[[stream]]\nflows 3\n", "s.toml:2: \"flows 3\": expected key = value"),
            ("[stream]\n", "s.toml:1: [stream]: the only table is [[stream]]"),
            (
                "[[stream]]\nshape = \"poisson\"\n",
                "s.toml:1: field shape: poisson needs a rate",
            ),
            (
                "[[stream]]\nsrc_ip = \"fd00::1\"\n",
                "s.toml:1: field dst_ip: src_ip and dst_ip",
            ),
            (
                "[[stream]]\nname = \"a\"\n[[stream]]\nname = \"a\"\n",
                "s.toml:3: field name: \"a\" names two",
            ),
            (
                "[[stream]]\ncount = -1\n",
                "s.toml:2: field count: -1: expected a number",
            ),
            ("[[stream]]\nname = \"x\"y\"\n", "s.toml:2: field name:"),
            ("# nothing\n", "s.toml: no [[stream]]"),
        ] {
            let e = parse("s.toml", text, &cfg()).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_a_mistake_at_that_line() {
        let e = parse_bytes("s.toml", b"[[stream]]\nsize = 60\nname = \"\xff\"\n", &cfg()).unwrap_err();
        assert_eq!(e, "s.toml:3: not UTF-8 text (byte 0xff at column 9)");
        let e = parse_bytes("s.toml", b"\xc3", &cfg()).unwrap_err();
        assert_eq!(e, "s.toml:1: not UTF-8 text (byte 0xc3 at column 1)");
    }

    #[test]
    fn shapes_parse() {
        assert_eq!(Shape::parse("bursts:8"), Ok(Shape::Bursts(8)));
        for bad in ["bursts:0", "bursts:", "burst", "Poisson"] {
            assert!(Shape::parse(bad).is_err(), "{bad}");
        }
    }

    /// Departures the pacer allows with a burst every 100 ns for a simulated second.
    fn departures(shape: Shape) -> Vec<u64> {
        let mut p = Pacer::new(Some(1e6), shape, None, 7, usize::MAX, &[]);
        let mut t = Vec::new();
        for now in (0..1_000_000_000u64).step_by(100) {
            let n = p.allowed(now, 64);
            p.made += n as u64;
            t.extend(std::iter::repeat_n(now, n));
        }
        t
    }

    #[test]
    fn poisson_gaps_have_the_mean_and_spread_of_an_exponential() {
        let t = departures(Shape::Poisson);
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((t.len() as f64 - 1e6).abs() < 1e4, "{} departures in a second", t.len());
        assert!((sd / mean - 1.0).abs() < 0.05, "cv {}", sd / mean);
    }

    /// Departures as the send loop makes them when it paces per departure: it waits until
    /// the next one is due (`next_due_ns`), sends what is due then as one burst stamped with
    /// that time, and the send costs `cost_ns` before it looks again.
    fn waited_departures(cost_ns: u64) -> Vec<u64> {
        let mut p = Pacer::new(Some(1e6), Shape::Poisson, None, 7, usize::MAX, &[]);
        assert!(p.per_departure());
        let (mut now, mut t) = (0, Vec::new());
        while now < 1_000_000_000 {
            now = now.max(p.next_due_ns());
            let n = p.allowed(now, 32);
            assert!(n > 0, "due at {now} and nothing allowed");
            // Each departure was due by now, and no earlier than the cost of a send before.
            for k in p.made..p.made + n as u64 {
                let due = p.due_ns_of(k);
                assert!(
                    due <= now && now - due <= cost_ns + 1,
                    "departure {k} due {due}, sent {now}"
                );
            }
            p.made += n as u64;
            t.extend(std::iter::repeat_n(now, n));
            now += cost_ns;
        }
        t
    }

    fn cv(t: &[u64]) -> (f64, f64) {
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        (mean, sd / mean)
    }

    #[test]
    fn waiting_for_each_departure_keeps_the_exponential_shape() {
        // No cost: every departure alone, at its own time (ns rounded up).
        let (mean, c) = cv(&waited_departures(0));
        assert!(
            (mean - 1000.0).abs() < 10.0 && (c - 1.0).abs() < 0.02,
            "mean {mean}, cv {c}"
        );
        // 250 ns a send, what the model pair costs (measured in the loop): departures due while
        // one is sent leave together after it; the spread stays within 5 % of an exponential's.
        let (mean, c) = cv(&waited_departures(250));
        assert!(
            (mean - 1000.0).abs() < 10.0 && (c - 1.0).abs() < 0.05,
            "mean {mean}, cv {c}"
        );
    }

    #[test]
    fn a_timed_replay_follows_the_file_scaled_and_loops() {
        let times = [0, 1000, 1500, 4000];
        for x in [1.0, 10.0] {
            let mut p = Pacer::new(None, Shape::Timed(x), Some(8), 0, 64, &times);
            let mut out = Vec::new();
            for now in (0..20_000u64).step_by(10) {
                let n = p.allowed(now, 64);
                p.made += n as u64;
                out.extend(std::iter::repeat_n(now, n));
            }
            // Loop 2 starts one period (span 4000 + mean gap 1333) after loop 1.
            let want: Vec<f64> = [0.0, 1000.0, 1500.0, 4000.0, 5333.3, 6333.3, 6833.3, 9333.3]
                .iter()
                .map(|t| t / x)
                .collect();
            assert_eq!(out.len(), 8, "the count stops it");
            for (got, want) in out.iter().zip(&want) {
                assert!((*got as f64 - want).abs() <= 10.0, "{x}x: {out:?} against {want:?}");
            }
        }
    }

    #[test]
    fn constant_and_bursts_keep_the_rate() {
        let c = departures(Shape::Constant);
        assert!((c.len() as i64 - 1_000_000).abs() <= 1, "{}", c.len());
        let b = departures(Shape::Bursts(8));
        assert!((b.len() as i64 - 1_000_000).abs() <= 8, "{}", b.len());
        // Groups of 8 leave together, every 8 µs.
        assert!(b.chunks(8).all(|g| g.iter().all(|&x| x == g[0])));
        assert_eq!(b[8] - b[0], 8000);
    }
}
