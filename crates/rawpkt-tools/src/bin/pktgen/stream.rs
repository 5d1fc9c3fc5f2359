//! Streams: what a run sends, as one or more independent definitions (frame template, size,
//! rate, rate shape, flows, count), and the pacer each transmit core keeps per stream.
//!
//! One stream comes from the command line; several from a stream file, TOML of `[[stream]]`
//! tables (docs/pktgen.md has the schema), read by the `toml` crate through serde with the
//! place of every value kept (`toml::Spanned`), so that a mistake names file, line and field
//! in one line.

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
    /// Packets per second: as given, or once the frame size and the port resolve
    /// `rate_given` (`crate::rate::Rate::pps`).
    pub rate: Option<f64>,
    /// The rate as given (packets or bits per second, or a percentage of the line rate).
    pub rate_given: Option<crate::rate::Rate>,
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
            rate: cfg.rate.and_then(crate::rate::Rate::as_pps),
            rate_given: cfg.rate,
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
            rate_given: Some(crate::rate::Rate::Pps(rate)),
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
        if matches!(self.shape, Shape::Poisson | Shape::Bursts(_)) && self.rate_given.is_none() {
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

/// A stream file as TOML has it: `[[stream]]` tables, each field's value with where it is in
/// the text, read into a [`StreamSpec`] by [`parse`] so that every mistake names its line.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    stream: Vec<Spanned<StreamToml>>,
}

type Field = Option<Spanned<toml::Value>>;

/// One `[[stream]]` table. Values are taken as TOML gives them (a string, an integer, a float,
/// an array) and read by pktgen's own parsers, which say what was expected in pktgen's words.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamToml {
    name: Field,
    size: Field,
    rate: Field,
    shape: Field,
    flows: Field,
    count: Field,
    src_ip: Field,
    dst_ip: Field,
    src_port: Field,
    dst_port: Field,
    vlan: Field,
    encap: Field,
    outer_src_ip: Field,
    outer_dst_ip: Field,
    /// `outer.src_ip`, `outer.dst_ip`: the same as `outer_src_ip`, `outer_dst_ip`, written as
    /// a table (`outer = { src_ip = ... }` or dotted keys).
    outer: Option<Spanned<OuterToml>>,
    ranges: Field,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OuterToml {
    src_ip: Field,
    dst_ip: Field,
}

use toml::Spanned;

/// What a stream table may hold, for the message about a field it may not.
const FIELDS: &str = "name, size, rate, shape, flows, count, src_ip, dst_ip, src_port, dst_port, vlan, encap, \
                      outer_src_ip (or outer.src_ip), outer_dst_ip (or outer.dst_ip), ranges";

/// The line (from 1) of byte `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    1 + text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// A stream file's text as streams, those fields it leaves out taken from the command line.
/// Any TOML is read (array-of-tables headers with spaces, literal strings, hexadecimal
/// integers, dotted keys, inline tables); a mistake is one line, `FILE:LINE: field NAME: what`.
pub(crate) fn parse(file: &str, text: &str, cfg: &Config) -> Result<Vec<StreamSpec>, String> {
    let doc: FileToml = toml::from_str(text).map_err(|e| toml_error(file, text, &e))?;
    if doc.stream.is_empty() {
        return Err(format!("{file}: no [[stream]] in it"));
    }
    let mut out: Vec<(StreamSpec, usize)> = Vec::new();
    for t in &doc.stream {
        let line = line_of(text, t.span().start);
        if out.len() == MAX_STREAMS {
            return Err(format!("{file}:{line}: more than {MAX_STREAMS} streams"));
        }
        let mut s = StreamSpec::from_config(cfg);
        s.name = format!("stream{}", out.len());
        // Where each field was given: the line a check of that field names.
        let mut lines: Vec<(&'static str, usize)> = Vec::new();
        let t = t.get_ref();
        let outer = t.outer.as_ref().map(|o| o.get_ref());
        let fields: [(&'static str, &Field); 17] = [
            ("name", &t.name),
            ("size", &t.size),
            ("rate", &t.rate),
            ("shape", &t.shape),
            ("flows", &t.flows),
            ("count", &t.count),
            ("src_ip", &t.src_ip),
            ("dst_ip", &t.dst_ip),
            ("src_port", &t.src_port),
            ("dst_port", &t.dst_port),
            ("vlan", &t.vlan),
            ("encap", &t.encap),
            ("outer_src_ip", &t.outer_src_ip),
            ("outer_dst_ip", &t.outer_dst_ip),
            ("outer.src_ip", outer.map_or(&None, |o| &o.src_ip)),
            ("outer.dst_ip", outer.map_or(&None, |o| &o.dst_ip)),
            ("ranges", &t.ranges),
        ];
        for (key, v) in fields {
            let Some(v) = v else { continue };
            let at = line_of(text, v.span().start);
            // One field, two spellings.
            let canonical = key.replace('.', "_");
            if lines.iter().any(|(k, _)| k.replace('.', "_") == canonical) {
                return Err(format!("{file}:{at}: field {key}: given twice in one stream"));
            }
            set(&mut s, key, v.get_ref()).map_err(|e| format!("{file}:{at}: field {key}: {e}"))?;
            lines.push((key, at));
        }
        if let Err((field, e)) = s.check() {
            let at = lines
                .iter()
                .find(|(k, _)| k.replace('.', "_") == field)
                .map_or(line, |&(_, l)| l);
            return Err(format!("{file}:{at}: field {field}: {e}"));
        }
        out.push((s, line));
    }
    for (i, (s, line)) in out.iter().enumerate() {
        if out[..i].iter().any(|(o, _)| o.name == s.name) {
            return Err(format!("{file}:{line}: field name: {:?} names two streams", s.name));
        }
    }
    Ok(out.into_iter().map(|(s, _)| s).collect())
}

/// A mistake the TOML reader found (syntax, a key twice, a field no stream has, a table where
/// streams go) in one line: the reader's own message, where it is, and the field when there is
/// one.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> String {
    let span = e.span().unwrap_or(0..0);
    let line = line_of(text, span.start);
    let at = if e.span().is_some() {
        format!("{file}:{line}")
    } else {
        file.to_string()
    };
    let msg = e.message().trim().replace('\n', "; ");
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or("");
        return if rest.contains("expected `stream`") {
            format!("{at}: field {name}: outside any [[stream]] table (a stream file holds [[stream]] tables only)")
        } else if rest.contains("expected `src_ip`") {
            format!("{at}: field outer.{name}: unknown; outer has src_ip and dst_ip")
        } else {
            format!("{at}: field {name}: unknown; a stream has {FIELDS}")
        };
    }
    if msg.starts_with("invalid type") && msg.contains("expected a sequence") {
        return format!("{at}: field stream: expected [[stream]] tables (an array of tables), not [stream]");
    }
    // The text the reader points at, when it is a key or a short value on the line.
    let pointed = text
        .get(span.clone())
        .filter(|s| !s.is_empty() && s.len() <= 40 && !s.contains('\n'));
    if let (Some(key), true) = (pointed, msg.starts_with("duplicate key")) {
        return format!("{at}: field {}: given twice in one table", key.trim());
    }
    let shown = pointed.map_or(String::new(), |s| format!(" ({s:?})"));
    format!("{at}: {msg}{shown}")
}

/// The text of a string or a number: what pktgen's parsers of the command line read
/// (`rate = 1e6` and `rate = "1M"` both read; so does `src_port = 0x1388`).
fn text(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Err(format!("{b}: expected a string or a number")),
        other => Err(format!("expected a string or a number, not {}", other.type_str())),
    }
}

/// A list given as an array (`vlan = [100, 200]`) or as the command line's comma-separated
/// text (`vlan = "100,200"`).
fn list(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::Array(a) => Ok(a.iter().map(text).collect::<Result<Vec<_>, _>>()?.join(",")),
        v => text(v),
    }
}

fn int<T: std::str::FromStr>(v: &toml::Value, what: &str) -> Result<T, String> {
    let t = text(v)?;
    t.parse().map_err(|_| format!("{t}: expected {what}"))
}

fn set(s: &mut StreamSpec, key: &str, v: &toml::Value) -> Result<(), String> {
    match key {
        "name" => match v {
            toml::Value::String(n)
                if !n.is_empty()
                    && n.len() <= 64
                    && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
            {
                s.name = n.clone()
            }
            _ => return Err("expected a quoted name of letters, digits, '-', '_' or '.' (64 at most)".into()),
        },
        "size" => s.size = crate::cli::size(&text(v)?).map_err(|e| e.replace("--size ", ""))?,
        "rate" => {
            let r = crate::rate::parse_rate(&text(v)?)?;
            (s.rate, s.rate_given) = (r.as_pps(), Some(r));
        }
        "shape" => s.shape = Shape::parse(&text(v)?)?,
        "flows" => s.flows = int(v, "a number of flows from 1")?,
        "count" => s.count = Some(int(v, "a number of packets")?),
        "src_ip" => s.src_ip = int(v, "an IPv4 or IPv6 address")?,
        "dst_ip" => s.dst_ip = int(v, "an IPv4 or IPv6 address")?,
        "src_port" => s.src_port = int(v, "a UDP port, 0 to 65535")?,
        "dst_port" => s.dst_port = int(v, "a UDP port, 0 to 65535")?,
        "vlan" => s.headers.vlan = crate::cli::vlans(&list(v)?)?,
        "encap" => s.headers.encap = crate::template::Encap::parse(&text(v)?)?,
        "outer_src_ip" | "outer.src_ip" => s.headers.outer.0 = int(v, "an IPv4 or IPv6 address")?,
        "outer_dst_ip" | "outer.dst_ip" => s.headers.outer.1 = int(v, "an IPv4 or IPv6 address")?,
        "ranges" => s.ranges = crate::template::Range::parse_list(&list(v)?)?,
        _ => return Err(format!("unknown; a stream has {FIELDS}")),
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
    /// Live control (`--control`): the stream's settings, read once per burst, and what this
    /// pacer last applied of them.
    control: Option<Control>,
    /// Constant and bursts: the rate's credit counts from `base_ns`, when `base_made` packets
    /// were made (0 and 0 but after a change of rate or a pause).
    base_ns: u64,
    base_made: u64,
}

/// What a pacer under live control keeps.
struct Control {
    settings: std::sync::Arc<crate::control::StreamControl>,
    /// The settings' version applied.
    seen: u64,
    paused: bool,
    /// When the pause began (ns from the start): a timed replay's schedule moves by the pause.
    paused_at: u64,
    /// The stream's rate is shared by this many pacers (cores).
    share_of: f64,
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
            control: None,
            base_ns: 0,
            base_made: 0,
        };
        p.next_ns = if p.times.is_empty() { p.gap() } else { 0.0 };
        p
    }

    /// Puts the pacer under live control: `settings` are the stream's, whose rate this pacer
    /// takes a `share_of`-th of.
    pub(crate) fn controlled(
        mut self,
        settings: std::sync::Arc<crate::control::StreamControl>,
        share_of: u64,
    ) -> Pacer {
        self.control = Some(Control {
            seen: settings.version(),
            settings,
            paused: false,
            paused_at: 0,
            share_of: share_of.max(1) as f64,
        });
        self
    }

    /// Whether the stream is paused at `elapsed_ns`, applying the settings first when they
    /// changed since the last look: one atomic load when they did not.
    #[inline]
    fn paused(&mut self, elapsed_ns: u64) -> bool {
        let Some(c) = &self.control else { return false };
        if c.settings.version() != c.seen {
            self.apply(elapsed_ns);
        }
        self.control.as_ref().is_some_and(|c| c.paused)
    }

    /// Applies changed settings at `elapsed_ns`: a new rate counts from now, from the packets
    /// made (nothing owed is sent at once, nothing sent is taken back); a pause stops the
    /// departures, and a resumed stream starts afresh (a timed replay's schedule moves by the
    /// length of the pause).
    #[cold]
    #[inline(never)]
    fn apply(&mut self, elapsed_ns: u64) {
        let Some(c) = self.control.as_mut() else { return };
        c.seen = c.settings.version();
        let (pps, paused) = c.settings.settings();
        let was_paused = std::mem::replace(&mut c.paused, paused);
        if paused && !was_paused {
            c.paused_at = elapsed_ns;
        }
        let t = elapsed_ns as f64;
        if let Shape::Timed(_) = self.shape {
            if was_paused && !paused && !self.times.is_empty() {
                let shift = t - c.paused_at as f64;
                self.base += shift;
                self.next_ns += shift;
            }
            return;
        }
        let share_of = c.share_of;
        self.per_ns = pps.map(|r| r / share_of / 1e9);
        (self.base_ns, self.base_made) = (elapsed_ns, self.made);
        // Poisson: departures due and not made are dropped, and the next one is a gap of the
        // new rate away.
        self.due = self.made;
        if self.shape == Shape::Poisson {
            self.next_ns = t + self.gap();
        }
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
        if let Some(c) = &self.control {
            // Changed settings are applied by the next `allowed`: due now, so that the loop
            // calls it; a paused stream has nothing due.
            if c.settings.version() != c.seen {
                return 0;
            }
            if c.paused {
                return u64::MAX;
            }
        }
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
        if self.paused(elapsed_ns) {
            return 0;
        }
        let left = self.limit - self.made;
        let room = room.min(self.share) as u64;
        // The rate's credit runs from the start, or from its last change.
        let since = elapsed_ns.saturating_sub(self.base_ns) as f64;
        let n = match (self.per_ns, self.shape) {
            (_, Shape::Timed(_)) if !self.times.is_empty() => self.due_by(elapsed_ns, room),
            (None, _) | (_, Shape::Timed(_)) => room,
            // Packets made so far may not run ahead of rate × time since the start.
            (Some(r), Shape::Constant) => ((since * r) as u64 + self.base_made).saturating_sub(self.made),
            (Some(r), Shape::Bursts(b)) => {
                let b = u64::from(b);
                (((since * r) as u64) / b * b + self.base_made).saturating_sub(self.made)
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
        assert_eq!(s[1].dst_port, crate::cli::DEFAULT_DST_PORT, "from the command line");
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
            (
                "[[stream]]\nsizes = 60\n",
                "s.toml:2: field sizes: unknown; a stream has name, size",
            ),
            ("rate = 1\n", "s.toml:1: field rate: outside any [[stream]] table"),
            (
                "[[stream]]\nrate = 1\nrate = 2\n",
                "s.toml:3: field rate: given twice in one table",
            ),
            ("[[stream]]\noutside_ip = 1\n", "s.toml:2: field outside_ip: unknown"),
            (
                "[[stream]]\nouter_src_ip = \"10.0.0.1\"\nouter.src_ip = \"10.0.0.2\"\n",
                "s.toml:3: field outer.src_ip: given twice in one stream",
            ),
            (
                "[[stream]]\nouter.vni = 3\n",
                "s.toml:2: field outer.vni: unknown; outer has src_ip and dst_ip",
            ),
            ("[[stream]]\nflows 3\n", "s.toml:2: "),
            ("[stream]\n", "s.toml:1: field stream: expected [[stream]] tables"),
            (
                "[[stream]]\ncount = true\n",
                "s.toml:2: field count: true: expected a string or a number",
            ),
            (
                "[[stream]]\nflows = [1, 2]\n",
                "s.toml:2: field flows: expected a string or a number, not array",
            ),
            (
                "[[stream]]\nsize = { a = 1 }\n",
                "s.toml:2: field size: expected a string or a number, not table",
            ),
            (
                "[[stream]]\nshape = \"poisson\"\n",
                "s.toml:2: field shape: poisson needs a rate",
            ),
            (
                "[[stream]]\nsrc_ip = \"fd00::1\"\n",
                "s.toml:1: field dst_ip: src_ip and dst_ip",
            ),
            (
                "[[stream]]\nencap = \"vxlan:1\"\n\nouter.dst_ip = \"fd00::1\"\n",
                "s.toml:4: field outer_dst_ip: outer_src_ip and outer_dst_ip",
            ),
            (
                "[[stream]]\nname = \"a\"\n[[stream]]\nname = \"a\"\n",
                "s.toml:3: field name: \"a\" names two",
            ),
            (
                "[[stream]]\ncount = -1\n",
                "s.toml:2: field count: -1: expected a number",
            ),
            ("[[stream]]\nname = \"x\"y\"\n", "s.toml:2: "),
            ("[[stream]]\nname = \"unterminated\n", "s.toml:2: "),
            ("# nothing\n", "s.toml: no [[stream]]"),
            ("", "s.toml: no [[stream]]"),
        ] {
            let e = parse("s.toml", text, &cfg()).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// Valid TOML reads as TOML reads it: spaces inside the array-of-tables brackets, literal
    /// strings, hexadecimal, octal and binary integers, underscores, dotted keys and inline
    /// tables, arrays for lists, and an inline array of tables.
    #[test]
    fn any_valid_toml_reads() {
        let text = "[[ stream ]]\nname = 'lit.eral'\nsrc_port = 0x1388\ndst_port = 0o17\nflows = 0b100\nsize = 256\n\
                    count = 1_000\nencap = 'vxlan:42'\nouter.src_ip = '10.9.0.1'\nouter . dst_ip = \"10.9.0.2\"\n\
                    vlan = [100, 200]\nranges = ['dst-ip:4', \"src-port:2\"]\n\
                    [[stream]]\nouter = { src_ip = 'fd00::1', dst_ip = 'fd00::2' }\nencap = 'vxlan:1'\nsize = 256\nrate = 2.5e5\n";
        let s = parse("s.toml", text, &cfg()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].name.as_str(), s[0].src_port, s[0].dst_port, s[0].flows, s[0].count),
            ("lit.eral", 5000, 15, 4, Some(1000))
        );
        assert_eq!(
            s[0].headers.outer,
            ("10.9.0.1".parse().unwrap(), "10.9.0.2".parse().unwrap())
        );
        assert_eq!(s[0].headers.vlan, vec![100, 200]);
        assert_eq!(s[0].ranges.len(), 2);
        assert_eq!(
            (s[1].rate, s[1].headers.outer.1),
            (Some(2.5e5), "fd00::2".parse().unwrap())
        );
        let inline = parse(
            "s.toml",
            "stream = [{ name = 'a' }, { name = 'b', size = 128 }]\n",
            &cfg(),
        )
        .unwrap();
        assert_eq!((inline[1].name.as_str(), inline[1].size), ("b", Size::Fixed(128)));
    }

    /// The manual's example stream file is one that reads.
    #[test]
    fn the_manuals_example_reads() {
        let doc = include_str!("../../../../../docs/pktgen.md");
        let block = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap();
        let s = parse("pktgen.md", block, &cfg()).unwrap();
        assert_eq!(
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["small", "tunnel"]
        );
    }

    /// What a fuzzer or a careless pipe gives: deep nesting, long lines, binary-like text. One
    /// line each, no panic, no overflow of the stack.
    #[test]
    fn hostile_text_is_one_line() {
        let deep = format!("[[stream]]\nsize = {}\n", "[".repeat(200_000));
        let keys = format!("[[stream]]\n{} = 1\n", vec!["a"; 50_000].join("."));
        let long = format!("[[stream]]\nname = '{}'\n", "x".repeat(500_000));
        let many = "[[stream]]\n".repeat(MAX_STREAMS + 1);
        for text in [
            deep,
            keys,
            long,
            many,
            "\u{0}\u{1}".into(),
            "[[stream]]\nrate = nan\n".into(),
        ] {
            let e = parse("s.toml", &text, &cfg()).unwrap_err();
            assert!(e.starts_with("s.toml:") && !e.contains('\n') && e.len() < 400, "{e}");
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

    /// Under live control, on a simulated clock: a rate change counts from the moment the
    /// pacer sees it, with nothing owed; a pause stops the departures at the next burst; a
    /// resumed stream does not make up for its pause.
    #[test]
    fn a_controlled_pacer_follows_rate_changes_and_pauses() {
        use crate::control::StreamControl;
        for shape in [Shape::Constant, Shape::Bursts(8), Shape::Poisson] {
            let ctl = std::sync::Arc::new(StreamControl::new(Some(1e5), true));
            // Two cores: this pacer takes half the stream's rate.
            let mut p = Pacer::new(Some(5e4), shape, None, 3, usize::MAX, &[]).controlled(ctl.clone(), 2);
            let mut made_at = Vec::new();
            for now in (0..4_000_000_000u64).step_by(10_000) {
                match now {
                    1_000_000_000 => ctl.set_for_test(Some(2e5), None),
                    2_000_000_000 => ctl.set_for_test(None, Some(true)),
                    3_000_000_000 => ctl.set_for_test(None, Some(false)),
                    _ => {}
                }
                if p.next_due_ns() > now && p.per_departure() {
                    continue;
                }
                let n = p.allowed(now, 64);
                p.made += n as u64;
                made_at.push((now, p.made));
            }
            let at = |t: u64| made_at.iter().rev().find(|(n, _)| *n <= t).map_or(0, |m| m.1);
            let second = |k: u64| at(k * 1_000_000_000 + 999_990_000) - at(k * 1_000_000_000 - 10_000);
            let (s0, s1, s2, s3) = (at(999_990_000), second(1), second(2), second(3));
            let tol = if shape == Shape::Poisson { 0.03 } else { 0.001 };
            assert!(
                (s0 as f64 / 5e4 - 1.0).abs() < tol,
                "{shape:?}: {s0} in the first second"
            );
            assert!(
                (s1 as f64 / 1e5 - 1.0).abs() < tol,
                "{shape:?}: {s1} after the change to 2e5 / 2"
            );
            assert!(s2 <= 8, "{shape:?}: {s2} while paused");
            assert!(
                (s3 as f64 / 1e5 - 1.0).abs() < tol,
                "{shape:?}: {s3} after the resume, with nothing made up"
            );
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
