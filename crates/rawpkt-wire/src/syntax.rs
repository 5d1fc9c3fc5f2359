//! The command-line text of a flow rule, and back.
//!
//! ```text
//! rule   := match+ | "any"            then, anywhere: ("copy" | "steal") ("priority" N)
//! match  := ("dst-mac" | "src-mac") MAC ["/" MASK]
//!         | "vlan" VID | "ethertype" N
//!         | ("ipv4" | "ipv6") | ("src" | "dst") ADDR ["/" LEN]    (after ipv4/ipv6)
//!         | "tcp" | "udp" | "proto" N | ("src-port" | "dst-port") N  (ports need tcp/udp)
//! ```
//!
//! Numbers are decimal or `0x` hex. Each field may appear once; `proto 6` and `proto 17` are read
//! as `tcp` and `udp`. `Display` prints the canonical form (fields in the order above, defaults
//! `steal` and `priority 0` left out) and parsing it gives the rule back.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::rule::{
    check_ethertype, check_family_ethertype, check_ports_proto, check_proto_ethertype, check_vlan, proto_text, Action,
    FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch, MacText, RuleError,
};
use super::wire::{IPPROTO_TCP, IPPROTO_UDP};
use crate::text::{echo, write_escaped, ECHO_MAX};

/// A rule text that does not parse, pointing at the token at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    input: String,
    /// Index of the first offending token (the token count when a value is missing at the end).
    pub token: usize,
    /// Byte offset and byte length of the span to underline. Both ends lie on character
    /// boundaries of the input, or past its end (a value missing after the last word), where
    /// each byte stands for one column.
    pub column: usize,
    pub width: usize,
    pub message: String,
}

impl ParseError {
    pub fn input(&self) -> &str {
        &self.input
    }
}

/// The rule, then a caret line under the bad span followed by the message. `{:#}` gives one line
/// instead: ``column 10 (`10.0.0.0/33`): prefix length 33 is more than 32``. Columns count
/// characters, so the caret lines up under non-ASCII text too. The rule is shown as
/// [`crate::text::echo`] shows input, except that whitespace shows as a space: control characters
/// escaped (the caret counts the columns of the escape), and a rule longer than [`ECHO_MAX`] characters shown as a window of that many
/// around the bad span, with `…` where text was left out.
impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = self.input.as_str();
        // The parser keeps both ends on character boundaries; flooring here as well means that a
        // span edited through the public fields cannot make formatting panic.
        let start = floor_char_boundary(input, self.column);
        let end = floor_char_boundary(input, self.column.saturating_add(self.width)).max(start);
        let past_end = self.column.saturating_sub(input.len());
        let what = &input[start..end];
        if f.alternate() {
            let column = input[..start].chars().count() + past_end + 1;
            // The token once: not again where the message names it already.
            let what = echo(what).to_string();
            return match what.is_empty() || self.message.contains(&format!("`{what}`")) {
                true => write!(f, "column {column}: {}", self.message),
                false => write!(f, "column {column} (`{what}`): {}", self.message),
            };
        }
        // The line as shown, one char per column, and where the span lies in it.
        let mut shown = String::with_capacity(input.len());
        let (mut pad, mut width) = (past_end, 0);
        for (i, c) in input.char_indices() {
            // Whitespace separates tokens, as a space does.
            let c = if c.is_whitespace() { ' ' } else { c };
            let cols = write_escaped(&mut shown, c)?;
            if i < start {
                pad += cols;
            } else if i < end {
                width += cols;
            }
        }
        let line: Vec<char> = shown.chars().collect();
        let (mut lo, mut hi) = (0, line.len());
        if line.len() > ECHO_MAX {
            // A window that starts a little before the span and is cut where it must be.
            lo = pad.saturating_sub(ECHO_MAX / 4).min(line.len() - ECHO_MAX);
            hi = lo + ECHO_MAX;
        }
        let left = if lo > 0 { "…" } else { "" };
        let right = if hi < line.len() { "…" } else { "" };
        let text: String = line[lo..hi].iter().collect();
        let pad = pad - lo + left.chars().count();
        // Carets under the span's part inside the window, at least one.
        let carets = width.min((hi - lo + left.chars().count()).saturating_sub(pad)).max(1);
        write!(
            f,
            "{left}{text}{right}\n{:pad$}{} {}",
            "",
            "^".repeat(carets),
            self.message
        )
    }
}

/// The largest character boundary of `s` at or before byte `i` (`s.len()` for any `i` past it).
fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl std::error::Error for ParseError {}

#[derive(Clone, Copy)]
struct Token<'a> {
    text: &'a str,
    index: usize,
    start: usize,
}

/// A span of one or more tokens: what an error underlines.
#[derive(Clone, Copy)]
struct Span {
    token: usize,
    start: usize,
    end: usize,
}

impl Span {
    fn of(t: Token) -> Span {
        Span {
            token: t.index,
            start: t.start,
            end: t.start + t.text.len(),
        }
    }

    fn to(self, t: Token) -> Span {
        Span {
            end: t.start + t.text.len(),
            ..self
        }
    }

    fn later(a: Span, b: Span) -> Span {
        if a.start > b.start {
            a
        } else {
            b
        }
    }
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<Token<'a>>,
    at: usize,
}

type Result<T> = std::result::Result<T, ParseError>;

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        let mut tokens = Vec::new();
        let mut start = None;
        for (i, c) in input.char_indices().chain([(input.len(), ' ')]) {
            match (c.is_whitespace(), start) {
                (true, Some(s)) => {
                    tokens.push(Token {
                        text: &input[s..i],
                        index: tokens.len(),
                        start: s,
                    });
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        Parser { input, tokens, at: 0 }
    }

    fn error(&self, span: Span, message: impl Into<String>) -> ParseError {
        ParseError {
            input: self.input.to_string(),
            token: span.token,
            column: span.start,
            width: span.end - span.start,
            message: message.into(),
        }
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let t = self.tokens.get(self.at).copied();
        self.at += 1;
        t
    }

    /// The value after keyword `kw`, or an error just past the end saying what `kw` needs.
    fn value(&mut self, kw: Token, needs: &str) -> Result<Token<'a>> {
        match self.next() {
            Some(t) => Ok(t),
            None => {
                // An empty span one column past the keyword and the separator after it: past the
                // whitespace character that follows the keyword (by that character's own length,
                // so the offset stays on a character boundary), or one byte past the end of the
                // input, which stands for one column.
                let kw_end = kw.start + kw.text.len();
                let at = kw_end + self.input[kw_end..].chars().next().map_or(1, char::len_utf8);
                let span = Span {
                    token: self.tokens.len(),
                    start: at,
                    end: at,
                };
                Err(self.error(span, format!("{} needs {needs}", kw.text)))
            }
        }
    }

    fn number(&self, t: Token, max: u32, what: &str) -> Result<u32> {
        // Digits only: `str::parse` and `from_str_radix` would also take a sign (`+5`).
        let n = match t.text.strip_prefix("0x").or_else(|| t.text.strip_prefix("0X")) {
            Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => u32::from_str_radix(hex, 16),
            None if !t.text.is_empty() && t.text.bytes().all(|b| b.is_ascii_digit()) => t.text.parse(),
            _ => "x".parse(),
        };
        match n {
            Ok(n) if n <= max => Ok(n),
            Ok(n) => Err(self.error(Span::of(t), format!("{what} {n} is more than {max}"))),
            Err(_) => Err(self.error(Span::of(t), format!("`{}` is not a number ({what})", echo(t.text)))),
        }
    }

    fn mac(&self, t: Token) -> Result<MacMatch> {
        let bad = |s: &str| {
            self.error(
                Span::of(t),
                format!(
                    "`{}` is not a MAC address (six hex bytes, like 02:00:00:00:00:01)",
                    echo(s)
                ),
            )
        };
        let bytes = |s: &str| -> Result<[u8; 6]> { super::rule::parse_mac(s).ok_or_else(|| bad(s)) };
        match t.text.split_once('/') {
            None => Ok(MacMatch::exact(bytes(t.text)?)),
            Some((a, m)) => MacMatch::masked(bytes(a)?, bytes(m)?).map_err(|e| self.error(Span::of(t), e.0)),
        }
    }

    /// A prefix of the rule's family: `ADDR` or `ADDR/LEN`.
    fn prefix(&self, t: Token, ip: &mut IpMatch, src: bool, kw: Span) -> Result<()> {
        let span = Span::of(t);
        let (addr, len) = match t.text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (t.text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| self.error(span, format!("`{}` is not an IPv4 or IPv6 address", echo(addr))))?;
        let len = |max: u8| -> Result<u8> {
            match len {
                None => Ok(max),
                Some(l) => match l.parse::<u8>() {
                    Ok(n) if n <= max => Ok(n),
                    Ok(n) => Err(self.error(span, format!("prefix length {n} is more than {max}"))),
                    Err(_) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                        Err(self.error(span, format!("prefix length {} is more than {max}", echo(l))))
                    }
                    Err(_) => Err(self.error(span, format!("prefix length `{}` is not a number", echo(l)))),
                },
            }
        };
        let rule_err = |e: RuleError| self.error(span, e.0);
        let mismatch = |family: &str, rule: &str| {
            self.error(span, format!("{addr} is an {family} address but the rule says {rule}"))
        };
        let kw_dup = |what: &str| self.error(kw.to(t), format!("{what} given twice"));
        match (ip, addr) {
            (IpMatch::V4 { src: s, dst: d }, IpAddr::V4(a)) => {
                let slot = if src { s } else { d };
                if slot.is_some() {
                    return Err(kw_dup(if src { "src" } else { "dst" }));
                }
                *slot = Some(Ipv4Prefix::new(a, len(32)?).map_err(rule_err)?);
            }
            (IpMatch::V6 { src: s, dst: d }, IpAddr::V6(a)) => {
                let slot = if src { s } else { d };
                if slot.is_some() {
                    return Err(kw_dup(if src { "src" } else { "dst" }));
                }
                *slot = Some(Ipv6Prefix::new(a, len(128)?).map_err(rule_err)?);
            }
            (IpMatch::V4 { .. }, IpAddr::V6(_)) => return Err(mismatch("IPv6", "ipv4")),
            (IpMatch::V6 { .. }, IpAddr::V4(_)) => return Err(mismatch("IPv4", "ipv6")),
        }
        Ok(())
    }
}

/// Where each field was given, for errors that involve two of them.
#[derive(Default)]
struct Seen {
    any: Option<Span>,
    first_match: Option<Span>,
    dst_mac: Option<Span>,
    src_mac: Option<Span>,
    vlan: Option<Span>,
    ethertype: Option<Span>,
    family: Option<Span>,
    proto: Option<Span>,
    /// The first port given, with its keyword.
    port: Option<(Span, &'static str)>,
    src_port: Option<Span>,
    dst_port: Option<Span>,
    action: Option<Span>,
    priority: Option<Span>,
}

const KEYWORDS: &str =
    "dst-mac, src-mac, vlan, ethertype, ipv4, ipv6, src, dst, tcp, udp, proto, src-port, dst-port, any, copy, steal, priority";

pub fn parse(input: &str) -> Result<FlowRule> {
    let mut p = Parser::new(input);
    let mut r = FlowRule::ANY;
    let mut seen = Seen::default();
    if p.tokens.is_empty() {
        let span = Span {
            token: 0,
            start: 0,
            end: 0,
        };
        return Err(p.error(span, "empty rule: give at least one match, or `any` for every frame"));
    }
    while let Some(kw) = p.next() {
        let k = Span::of(kw);
        // Each field takes one value: a second one is refused rather than silently winning.
        let once = |p: &Parser, slot: &mut Option<Span>, span: Span| -> Result<()> {
            if slot.is_some() {
                return Err(p.error(span, format!("{} given twice", kw.text)));
            }
            *slot = Some(span);
            Ok(())
        };
        let is_match = !matches!(kw.text, "copy" | "steal" | "priority" | "any");
        if is_match && seen.first_match.is_none() {
            seen.first_match = Some(k);
        }
        match kw.text {
            "any" => once(&p, &mut seen.any, k)?,
            "dst-mac" | "src-mac" => {
                let v = p.value(kw, "a MAC address, optionally /MASK")?;
                let (slot, field) = match kw.text {
                    "dst-mac" => (&mut seen.dst_mac, &mut r.dst_mac),
                    _ => (&mut seen.src_mac, &mut r.src_mac),
                };
                once(&p, slot, k.to(v))?;
                *field = Some(p.mac(v)?);
            }
            "vlan" => {
                let v = p.value(kw, "a VLAN id (0 to 4095)")?;
                once(&p, &mut seen.vlan, k.to(v))?;
                let n = p.number(v, u32::from(u16::MAX), "vlan")? as u16;
                check_vlan(n).map_err(|m| p.error(Span::of(v), m))?;
                r.vlan = Some(n);
            }
            "ethertype" => {
                let v = p.value(kw, "an EtherType such as 0x88b5")?;
                once(&p, &mut seen.ethertype, k.to(v))?;
                let n = p.number(v, u32::from(u16::MAX), "ethertype")? as u16;
                check_ethertype(n).map_err(|m| p.error(Span::of(v), m))?;
                r.ethertype = Some(n);
            }
            "ipv4" | "ipv6" => {
                let ip = if kw.text == "ipv4" {
                    IpMatch::V4_ANY
                } else {
                    IpMatch::V6_ANY
                };
                if let Some(prev) = &r.ip {
                    let verb = if prev.keyword() == kw.text {
                        "repeats"
                    } else {
                        "contradicts"
                    };
                    return Err(p.error(k, format!("{} {verb} the earlier {}", kw.text, prev.keyword())));
                }
                seen.family = Some(k);
                r.ip = Some(ip);
            }
            "src" | "dst" => {
                let v = p.value(kw, "an address or prefix such as 10.0.0.0/24")?;
                let Some(ip) = &mut r.ip else {
                    let msg = format!("`{}` needs `ipv4` or `ipv6` before it", kw.text);
                    return Err(p.error(k, msg));
                };
                p.prefix(v, ip, kw.text == "src", k)?;
            }
            "tcp" | "udp" | "proto" => {
                let (n, span) = match kw.text {
                    "tcp" => (IPPROTO_TCP, k),
                    "udp" => (IPPROTO_UDP, k),
                    _ => {
                        let v = p.value(kw, "an IP protocol number (0 to 255)")?;
                        (p.number(v, 255, "proto")? as u8, k.to(v))
                    }
                };
                if let Some(prev) = r.ip_proto {
                    let verb = if prev == n { "repeats" } else { "contradicts" };
                    // Said from the value, not quoted from the input: between `proto` and its
                    // number may stand any whitespace, a line break too.
                    let this = match kw.text {
                        "proto" => format!("proto {n}"),
                        word => word.to_string(),
                    };
                    let msg = format!("{this} {verb} the earlier {}", proto_text(prev));
                    return Err(p.error(span, msg));
                }
                seen.proto = Some(span);
                r.ip_proto = Some(n);
            }
            "src-port" | "dst-port" => {
                let v = p.value(kw, "a port number (0 to 65535)")?;
                let (slot, field) = match kw.text {
                    "src-port" => (&mut seen.src_port, &mut r.src_port),
                    _ => (&mut seen.dst_port, &mut r.dst_port),
                };
                once(&p, slot, k.to(v))?;
                *field = Some(p.number(v, u32::from(u16::MAX), kw.text)? as u16);
                let name = if kw.text == "src-port" { "src-port" } else { "dst-port" };
                seen.port.get_or_insert((k.to(v), name));
            }
            "copy" | "steal" => {
                let a = if kw.text == "copy" { Action::Copy } else { Action::Steal };
                if seen.action.is_some() {
                    let verb = if a == r.action { "repeats" } else { "contradicts" };
                    let prev = if r.action == Action::Copy { "copy" } else { "steal" };
                    return Err(p.error(k, format!("{} {verb} the earlier {prev}", kw.text)));
                }
                seen.action = Some(k);
                r.action = a;
            }
            "priority" => {
                let v = p.value(kw, "a priority (0 is evaluated first)")?;
                once(&p, &mut seen.priority, k.to(v))?;
                r.priority = p.number(v, u32::from(u16::MAX), "priority")? as u16;
            }
            other => {
                return Err(p.error(k, format!("unknown word `{}`; expected one of {KEYWORDS}", echo(other))));
            }
        }
    }
    cross_checks(&p, &r, &seen)?;
    Ok(r)
}

/// Contradictions between fields, reported at whichever of the two came later.
fn cross_checks(p: &Parser, r: &FlowRule, seen: &Seen) -> Result<()> {
    match (seen.any, seen.first_match) {
        (Some(a), Some(m)) => {
            return Err(p.error(Span::later(a, m), "`any` cannot be combined with other matches"));
        }
        (None, None) => {
            let span = seen.action.or(seen.priority).unwrap_or(Span::of(p.tokens[0]));
            return Err(p.error(span, "the rule matches nothing: give at least one match, or `any`"));
        }
        _ => {}
    }
    if let (Some(t), Some(e)) = (r.ethertype, seen.ethertype) {
        if let (Some(ip), Some(f)) = (&r.ip, seen.family) {
            check_family_ethertype(ip, t).map_err(|_| {
                let later = Span::later(e, f);
                let msg = if later.start == f.start {
                    format!("{} contradicts ethertype {t:#06x}", ip.keyword())
                } else {
                    format!("ethertype {t:#06x} contradicts {}", ip.keyword())
                };
                p.error(later, msg)
            })?;
        } else if let (Some(n), Some(s)) = (r.ip_proto, seen.proto) {
            check_proto_ethertype(n, t).map_err(|m| p.error(Span::later(e, s), m))?;
        }
    }
    if let Some((port, kw)) = seen.port {
        let span = seen.proto.map_or(port, |s| Span::later(port, s));
        check_ports_proto(kw, r.ip_proto).map_err(|m| p.error(span, m))?;
    }
    Ok(())
}

impl FromStr for FlowRule {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self> {
        parse(s)
    }
}

impl fmt::Display for FlowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        let mut mac = |kw: &str, m: &Option<MacMatch>| {
            if let Some(m) = m {
                match m.mask() == MacMatch::FULL_MASK {
                    true => words.push(format!("{kw} {}", MacText(m.addr()))),
                    false => words.push(format!("{kw} {}/{}", MacText(m.addr()), MacText(m.mask()))),
                }
            }
        };
        mac("dst-mac", &self.dst_mac);
        mac("src-mac", &self.src_mac);
        if let Some(v) = self.vlan {
            words.push(format!("vlan {v}"));
        }
        if let Some(t) = self.ethertype {
            words.push(format!("ethertype {t:#06x}"));
        }
        if let Some(ip) = &self.ip {
            words.push(ip.keyword().into());
            let (src, dst) = match ip {
                IpMatch::V4 { src, dst } => (src.map(|p| p.text()), dst.map(|p| p.text())),
                IpMatch::V6 { src, dst } => (src.map(|p| p.text()), dst.map(|p| p.text())),
            };
            words.extend(src.map(|s| format!("src {s}")));
            words.extend(dst.map(|d| format!("dst {d}")));
        }
        words.extend(self.ip_proto.map(proto_text));
        words.extend(self.src_port.map(|p| format!("src-port {p}")));
        words.extend(self.dst_port.map(|p| format!("dst-port {p}")));
        if words.is_empty() {
            words.push("any".into());
        }
        if self.action == Action::Copy {
            words.push("copy".into());
        }
        if self.priority != 0 {
            words.push(format!("priority {}", self.priority));
        }
        f.write_str(&words.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_under_the_bad_prefix() {
        let e = parse("ipv4 dst 10.0.0.0/33 udp").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ipv4 dst 10.0.0.0/33 udp\n         ^^^^^^^^^^^ prefix length 33 is more than 32"
        );
        assert_eq!((e.token, e.column, e.width), (2, 9, 11));
    }

    #[test]
    fn numbers_are_digits_only() {
        assert!(parse("udp dst-port 0x35").is_ok());
        for bad in [
            "udp dst-port +53",
            "udp dst-port 0x+35",
            "udp dst-port 0x",
            "vlan -1",
            "priority +1",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().contains("is not a number"), "{bad}: {e}");
        }
    }

    #[test]
    fn helpers_round_trip() {
        for r in [
            FlowRule::own_mac([2, 0, 0, 0, 0, 1]),
            FlowRule::multicast_copy(),
            FlowRule::promiscuous(),
        ] {
            assert_eq!(parse(&r.to_string()).unwrap(), r, "{r}");
        }
        assert_eq!(
            FlowRule::multicast_copy().to_string(),
            "dst-mac 01:00:00:00:00:00/01:00:00:00:00:00 copy"
        );
        assert_eq!(FlowRule::promiscuous().to_string(), "any");
    }
}
