//! The flow-rule text syntax: canonical round trips and errors that point at the bad token.

mod common;

use common::Rng;
use std::net::{Ipv4Addr, Ipv6Addr};

use rawpkt_wire::rule::{Action, FlowRule, IpMatch, Ipv4Prefix, Ipv6Prefix, MacMatch};
use rawpkt_wire::syntax::parse;

fn rule(s: &str) -> FlowRule {
    parse(s).unwrap_or_else(|e| panic!("{s:?} should parse:\n{e}"))
}

#[test]
fn the_examples_parse_to_what_they_say() {
    assert_eq!(
        rule("udp dst-port 4789"),
        FlowRule {
            ip_proto: Some(17),
            dst_port: Some(4789),
            ..FlowRule::ANY
        }
    );
    assert_eq!(rule("dst-mac 02:00:00:00:00:01"), FlowRule::own_mac([2, 0, 0, 0, 0, 1]));
    assert_eq!(
        rule("ipv4 dst 10.0.0.0/24 udp"),
        FlowRule {
            ip: Some(IpMatch::V4 {
                src: None,
                dst: Some(Ipv4Prefix::new(Ipv4Addr::new(10, 0, 0, 0), 24).unwrap()),
            }),
            ip_proto: Some(17),
            ..FlowRule::ANY
        }
    );
    assert_eq!(
        rule("ipv6 src fd00::/64 tcp src-port 80"),
        FlowRule {
            ip: Some(IpMatch::V6 {
                src: Some(Ipv6Prefix::new("fd00::".parse().unwrap(), 64).unwrap()),
                dst: None,
            }),
            ip_proto: Some(6),
            src_port: Some(80),
            ..FlowRule::ANY
        }
    );
    assert_eq!(rule("vlan 100").vlan, Some(100));
    assert_eq!(rule("ethertype 0x88b5").ethertype, Some(0x88b5));
    assert_eq!(
        rule("src-mac 02:00:00:00:00:00/ff:ff:ff:00:00:00").src_mac,
        Some(MacMatch::masked([2, 0, 0, 0, 0, 0], [0xff, 0xff, 0xff, 0, 0, 0]).unwrap())
    );
    assert_eq!(rule("proto 47").ip_proto, Some(47));
    let r = rule("udp copy priority 3");
    assert_eq!((r.action, r.priority), (Action::Copy, 3));
    assert_eq!(rule("any"), FlowRule::promiscuous());
    assert_eq!(
        rule("dst-mac 01:00:00:00:00:00/01:00:00:00:00:00 copy"),
        FlowRule::multicast_copy()
    );
}

#[test]
fn display_is_canonical() {
    for (input, canonical) in [
        ("udp dst-port 4789", "udp dst-port 4789"),
        ("dst-port 4789 proto 17", "udp dst-port 4789"),
        ("proto 6", "tcp"),
        ("udp ipv4", "ipv4 udp"),
        (
            "ipv4 dst 10.0.0.1/32 src 192.168.0.0/16",
            "ipv4 src 192.168.0.0/16 dst 10.0.0.1",
        ),
        ("ipv6 dst 2001:DB8:0:0::1/128", "ipv6 dst 2001:db8::1"),
        (
            "dst-mac 02:00:00:00:00:01/ff:ff:ff:ff:ff:ff",
            "dst-mac 02:00:00:00:00:01",
        ),
        ("dst-mac 2:0:0:0:0:A", "dst-mac 02:00:00:00:00:0a"),
        ("vlan 0x64 steal", "vlan 100"),
        ("ethertype 35000", "ethertype 0x88b8"),
        ("priority 0 any", "any"),
        ("copy priority 7 any", "any copy priority 7"),
        ("  tcp\tsrc-port  80  ", "tcp src-port 80"),
        (
            "priority 2 dst-port 53 udp ipv6 src fd00::/8 vlan 7 src-mac 02:00:00:00:00:00/02:00:00:00:00:00 \
             dst-mac 33:33:00:00:00:01 copy ethertype 0x86dd src-port 5353",
            "dst-mac 33:33:00:00:00:01 src-mac 02:00:00:00:00:00/02:00:00:00:00:00 vlan 7 ethertype 0x86dd \
             ipv6 src fd00::/8 udp src-port 5353 dst-port 53 copy priority 2",
        ),
    ] {
        let r = rule(input);
        assert_eq!(r.to_string(), canonical, "from {input:?}");
        assert_eq!(rule(canonical), r, "{canonical:?}");
    }
}

fn random_mac(g: &mut Rng) -> MacMatch {
    let mask = if g.chance(50) { [0xff; 6] } else { g.bytes() };
    let addr: [u8; 6] = g.bytes();
    MacMatch::masked(std::array::from_fn(|i| addr[i] & mask[i]), mask).unwrap()
}

fn masked<const N: usize>(addr: [u8; N], len: u8) -> [u8; N] {
    std::array::from_fn(|i| {
        let bits = usize::from(len).saturating_sub(i * 8).min(8);
        addr[i] & (0xff00u16 >> bits) as u8
    })
}

fn random_rule(g: &mut Rng) -> FlowRule {
    let mut r = FlowRule::ANY;
    if g.chance(30) {
        r.dst_mac = Some(random_mac(g));
    }
    if g.chance(20) {
        r.src_mac = Some(random_mac(g));
    }
    if g.chance(20) {
        r.vlan = Some(g.below(4096) as u16);
    }
    if g.chance(50) {
        r.ip = Some(if g.chance(50) {
            let p = |g: &mut Rng| {
                let len = g.below(33) as u8;
                Ipv4Prefix::new(Ipv4Addr::from(masked(g.bytes::<4>(), len)), len).unwrap()
            };
            IpMatch::V4 {
                src: g.chance(50).then(|| p(g)),
                dst: g.chance(50).then(|| p(g)),
            }
        } else {
            let p = |g: &mut Rng| {
                let len = g.below(129) as u8;
                Ipv6Prefix::new(Ipv6Addr::from(masked(g.bytes::<16>(), len)), len).unwrap()
            };
            IpMatch::V6 {
                src: g.chance(50).then(|| p(g)),
                dst: g.chance(50).then(|| p(g)),
            }
        });
    }
    if g.chance(20) {
        r.ethertype = Some(match &r.ip {
            Some(ip) => ip.ethertype(),
            None if g.chance(50) => 0x0800,
            None => 0x0600 + g.below(0x8000 - 0x0600) as u16,
        });
    }
    let ip_ok = r.ethertype.is_none_or(|t| t == 0x0800 || t == 0x86dd);
    if ip_ok && g.chance(60) {
        r.ip_proto = Some(match g.below(3) {
            0 => 6,
            1 => 17,
            _ => g.next() as u8,
        });
    }
    if matches!(r.ip_proto, Some(6 | 17)) {
        r.src_port = g.chance(50).then(|| g.next() as u16);
        r.dst_port = g.chance(50).then(|| g.next() as u16);
    }
    if g.chance(30) {
        r.action = Action::Copy;
    }
    if g.chance(40) {
        let range = if g.chance(80) { 16 } else { 65536 };
        r.priority = g.below(range) as u16;
    }
    r
}

#[test]
fn parse_of_display_gives_the_rule_back_for_many_rules() {
    let mut g = Rng(0x5eed_f10e_0000_0001);
    for _ in 0..20_000 {
        let r = random_rule(&mut g);
        r.validate()
            .unwrap_or_else(|e| panic!("generator made an invalid rule {r:?}: {e}"));
        let text = r.to_string();
        assert_eq!(parse(&text).unwrap_or_else(|e| panic!("{e}")), r, "{text}");
    }
    for r in [
        FlowRule::own_mac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]),
        FlowRule::multicast_copy(),
        FlowRule::promiscuous(),
    ] {
        assert_eq!(parse(&r.to_string()).unwrap(), r);
    }
}

/// (input, expected Display of the error) for errors whose rendering matters most.
#[test]
fn errors_show_a_caret_under_the_bad_token() {
    for (input, shown) in [
        (
            "ipv4 dst 10.0.0.0/33 udp",
            "ipv4 dst 10.0.0.0/33 udp\n         ^^^^^^^^^^^ prefix length 33 is more than 32",
        ),
        (
            "ipv4 src 10.0.0.0/8 ipv6",
            "ipv4 src 10.0.0.0/8 ipv6\n                    ^^^^ ipv6 contradicts the earlier ipv4",
        ),
        (
            "udp dst-port",
            "udp dst-port\n             ^ dst-port needs a port number (0 to 65535)",
        ),
        (
            "ipv4\tdst 300.0.0.1",
            "ipv4 dst 300.0.0.1\n         ^^^^^^^^^ `300.0.0.1` is not an IPv4 or IPv6 address",
        ),
        // Columns count characters, so the caret sits under a token that follows non-ASCII text.
        (
            "ipv4 dst é",
            "ipv4 dst é\n         ^ `é` is not an IPv4 or IPv6 address",
        ),
        (
            "udp dst-port 1 dst-port 2",
            "udp dst-port 1 dst-port 2\n               ^^^^^^^^^^ dst-port given twice",
        ),
    ] {
        let e = parse(input).unwrap_err();
        assert_eq!(e.to_string(), shown, "{input:?}");
        assert_eq!(e.input(), input);
    }
    let e = parse("ipv4 dst 10.0.0.0/33 udp").unwrap_err();
    assert_eq!((e.token, e.column, e.width), (2, 9, 11));
    assert_eq!(
        format!("{e:#}"),
        "column 10 (`10.0.0.0/33`): prefix length 33 is more than 32"
    );
}

/// (input, index of the token the error starts at, message).
#[test]
fn contradictions_and_bad_values_are_refused() {
    for (input, token, message) in [
        ("", 0, "empty rule: give at least one match, or `any` for every frame"),
        ("copy priority 2", 0, "the rule matches nothing: give at least one match, or `any`"),
        ("any udp", 1, "`any` cannot be combined with other matches"),
        ("tcp dst-port 1 udp", 3, "udp contradicts the earlier tcp"),
        ("tcp proto 6", 1, "proto 6 repeats the earlier tcp"),
        // Whitespace between `proto` and its number is not quoted into the one-line message.
        ("udp\tproto\n\t2", 1, "proto 2 contradicts the earlier udp"),
        ("ipv4 ipv4", 1, "ipv4 repeats the earlier ipv4"),
        ("copy steal udp", 1, "steal contradicts the earlier copy"),
        ("dst-port 80", 0, "dst-port needs tcp or udp in the rule"),
        ("ipv4 src-port 80 dst-port 81", 1, "src-port needs tcp or udp in the rule"),
        ("proto 47 dst-port 80", 2, "dst-port needs tcp or udp, not proto 47"),
        ("dst-port 80 proto 47", 2, "dst-port needs tcp or udp, not proto 47"),
        ("udp dst-port 70000", 2, "dst-port 70000 is more than 65535"),
        ("udp src-port -1", 2, "`-1` is not a number (src-port)"),
        ("proto 256", 1, "proto 256 is more than 255"),
        ("udp priority 70000", 2, "priority 70000 is more than 65535"),
        ("udp priority 1 priority 2", 3, "priority given twice"),
        ("vlan 4096", 1, "vlan 4096 is more than 4095"),
        ("vlan 1 vlan 2", 2, "vlan given twice"),
        ("ethertype 0x8100", 1, "ethertype 0x8100 is a VLAN tag; use `vlan N` (ethertype matches the type after the tags)"),
        ("ethertype 0x88a8", 1, "ethertype 0x88a8 is a VLAN tag; use `vlan N` (ethertype matches the type after the tags)"),
        ("ethertype 1500", 1, "ethertype 0x05dc is below 0x0600: such values are 802.3 lengths, not EtherTypes"),
        ("ethertype 0x88b5 ipv4", 2, "ipv4 contradicts ethertype 0x88b5"),
        ("ipv6 ethertype 0x0800", 1, "ethertype 0x0800 contradicts ipv6"),
        ("ethertype 0x88b5 udp", 2, "udp contradicts ethertype 0x88b5, which is not IP"),
        ("src 10.0.0.0/8", 0, "`src` needs `ipv4` or `ipv6` before it"),
        ("ipv4 dst fd00::1", 2, "fd00::1 is an IPv6 address but the rule says ipv4"),
        ("ipv6 src 10.0.0.1", 2, "10.0.0.1 is an IPv4 address but the rule says ipv6"),
        ("ipv4 dst 10.0.0.1/24", 2, "10.0.0.1/24 has bits set past the prefix length (did you mean 10.0.0.0/24?)"),
        ("ipv6 dst fd00::1/64", 2, "fd00::1/64 has bits set past the prefix length (did you mean fd00::/64?)"),
        ("ipv6 dst fd00::/129", 2, "prefix length 129 is more than 128"),
        ("ipv4 dst 10.0.0.0/300", 2, "prefix length 300 is more than 32"),
        ("ipv4 dst 10.0.0.0/", 2, "prefix length `` is not a number"),
        ("ipv4 dst 10.0.0.0/8 dst 11.0.0.0/8", 3, "dst given twice"),
        ("dst-mac 02:00:00:00:00", 1, "`02:00:00:00:00` is not a MAC address (six hex bytes, like 02:00:00:00:00:01)"),
        ("dst-mac 02:00:00:00:00:01:02", 1, "`02:00:00:00:00:01:02` is not a MAC address (six hex bytes, like 02:00:00:00:00:01)"),
        ("src-mac 02:00:00:00:00:01/ff:ff:ff:00:00:00", 1, "02:00:00:00:00:01 has bits outside the mask ff:ff:ff:00:00:00"),
        ("dst-mac 02:00:00:00:00:01 dst-mac 02:00:00:00:00:02", 2, "dst-mac given twice"),
        ("udp dst-port", 2, "dst-port needs a port number (0 to 65535)"),
        ("UDP", 0, "unknown word `UDP`; expected one of dst-mac, src-mac, vlan, ethertype, ipv4, ipv6, src, dst, tcp, udp, proto, src-port, dst-port, any, copy, steal, priority"),
    ] {
        let e = parse(input).expect_err(input);
        assert_eq!((e.token, e.message.as_str()), (token, message), "{input:?}\n{e}");
    }
}

/// Checks what every error must satisfy, whatever the input: formatting (both forms) does not
/// panic, the span's ends are character boundaries (or past the end), the first line is the rule
/// with one column per character, and the caret line points inside it or just past its end.
fn check_error_renders(input: &str) {
    let Err(e) = parse(input) else { return };
    let len = input.len();
    for at in [e.column, e.column + e.width] {
        assert!(
            at > len || input.is_char_boundary(at),
            "{input:?}: byte {at} splits a character"
        );
    }
    let shown = e.to_string();
    let one_line = format!("{e:#}");
    assert!(!one_line.contains('\n'), "{input:?}: {one_line}");
    let (line, carets) = shown.split_once('\n').expect("two lines");
    let columns = input.chars().count();
    assert_eq!(line.chars().count(), columns, "{input:?}: {shown}");
    assert!(
        !line.contains(|c: char| c.is_whitespace() && c != ' '),
        "{input:?}: {shown}"
    );
    let pad = carets.chars().take_while(|&c| c == ' ').count();
    assert!(pad <= columns + 1, "{input:?}: caret past the end\n{shown}");
    assert!(carets[pad..].starts_with('^'), "{input:?}: {shown}");
    let column = format!("column {}", pad + 1);
    assert!(
        one_line.starts_with(&format!("{column}: ")) || one_line.starts_with(&format!("{column} (`")),
        "{input:?}: {one_line} / {shown}"
    );
}

/// Multi-byte whitespace and characters at every position of rules, good and bad: every error
/// formats, and its caret sits at the character column it names.
#[test]
fn errors_format_with_multi_byte_text_anywhere() {
    const WIDE: [&str; 7] = ["\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", "é", "€", "🦀"];
    const RULES: [&str; 10] = [
        "vlan",
        "priority",
        "udp dst-port",
        "udp dst-port 53 copy",
        "ipv4 dst 10.0.0.0/33 udp",
        "dst-mac 02:00:00:00:00:01 copy priority 3",
        "ipv6 src fd00::/64 tcp src-port 80",
        "proto 47 dst-port 80",
        "ethertype 0x88b5 ipv4",
        "any udp",
    ];
    let mut checked = 0;
    for rule in RULES {
        let cuts: Vec<usize> = rule.char_indices().map(|(i, _)| i).chain([rule.len()]).collect();
        for wide in WIDE {
            for &cut in &cuts {
                // Inserted, and replacing the character at the cut.
                let next = rule[cut..].chars().next().map_or(0, char::len_utf8);
                for input in [
                    format!("{}{wide}{}", &rule[..cut], &rule[cut..]),
                    format!("{}{wide}{}", &rule[..cut], &rule[cut + next..]),
                    format!("{}{wide}{wide}{}", &rule[..cut], &rule[cut..]),
                ] {
                    check_error_renders(&input);
                    checked += 1;
                }
            }
            // Every separator replaced.
            check_error_renders(&rule.replace(' ', wide));
        }
    }
    assert!(checked > 1000, "{checked}");

    // A value missing after a keyword and trailing multi-byte whitespace: the caret one column
    // past the keyword and its separator, as with an ASCII space or nothing at all.
    for (input, caret) in [
        ("vlan", 5),
        ("vlan ", 5),
        ("vlan\u{a0}", 5),
        ("priority\u{3000}", 9),
        ("priority\u{3000}\u{3000}", 9),
        ("udp\u{a0}dst-port\u{a0}", 13),
    ] {
        let e = parse(input).unwrap_err();
        let shown = e.to_string();
        let carets = shown.split_once('\n').unwrap().1;
        assert_eq!(carets.find('^'), Some(caret), "{input:?}:\n{shown}");
        assert!(
            format!("{e:#}").starts_with(&format!("column {}: ", caret + 1)),
            "{e:#}"
        );
    }
    // The one-line form counts characters too, and names the token once.
    let e = parse("ipv4\u{a0}dst é").unwrap_err();
    assert_eq!(format!("{e:#}"), "column 10: `é` is not an IPv4 or IPv6 address");
    let e = parse("ipv4\u{a0}dst é/40").unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        "column 10 (`é/40`): `é` is not an IPv4 or IPv6 address"
    );
}

/// Pieces that hostile or clumsy input is made of: words of the syntax, values, separators,
/// control characters, characters that break or reorder a terminal line, and long runs.
fn hostile_input(rng: &mut Rng) -> String {
    const WORDS: &[&str] = &[
        "dst-port",
        "src-port",
        "udp",
        "tcp",
        "ipv4",
        "ipv6",
        "dst",
        "src",
        "dst-mac",
        "vlan",
        "ethertype",
        "proto",
        "any",
        "copy",
        "priority",
        "53",
        "0x88b5",
        "10.0.0.0/33",
        "::1/200",
        "02:00:00:00:00:01",
        "rule=",
        ",",
        "netns=",
        "mode=",
        "bind=",
        "/",
        "=",
        "é",
        "日本",
    ];
    const ODD: &[char] = &[
        '\n', '\r', '\t', '\x1b', '\0', '\x07', '\x7f', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}', '\u{200b}',
        '\u{feff}', ' ', '\u{a0}',
    ];
    let mut s = String::new();
    for _ in 0..rng.range(1, 8) {
        match rng.below(4) {
            0 | 1 => s.push_str(rng.pick(WORDS)),
            2 => s.push(rng.pick(ODD)),
            _ => {
                let c = rng.pick(&['a', '9', '\n', 'é', '\x1b', ' ']);
                s.extend(std::iter::repeat_n(c, rng.range(1, 10_000)));
            }
        }
        if rng.chance(50) {
            s.push(' ');
        }
    }
    s
}

/// A line as an error may show it: no control characters, nothing that breaks a line.
fn assert_one_clean_line(what: &str, input: &str, line: &str, max: usize) {
    let bad = line
        .chars()
        .find(|&c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202e}' | '\u{85}'));
    assert!(bad.is_none(), "{what} of {:?} has {bad:?}: {line:?}", echo_short(input));
    assert!(
        line.chars().count() <= max,
        "{what} of {:?} is {} characters: {line:?}",
        echo_short(input),
        line.len()
    );
}

fn echo_short(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Every error that repeats user input is one line (the caret form: the rule line and the caret
/// line) with control characters escaped and long input cut, over many generated inputs.
#[test]
fn errors_that_echo_input_are_one_bounded_line() {
    // Echoed input is cut at 64 characters (plus a marker); messages add their own words.
    const MAX: usize = 400;
    let mut rng = Rng(0x1b_0a_0d);
    let (mut rule_errors, mut spec_errors) = (0, 0);
    for _ in 0..3000 {
        let input = hostile_input(&mut rng);
        if let Err(e) = parse(&input) {
            rule_errors += 1;
            assert_one_clean_line("{:#}", &input, &format!("{e:#}"), MAX);
            let shown = e.to_string();
            let lines: Vec<&str> = shown.split('\n').collect();
            assert_eq!(lines.len(), 2, "caret form of {:?}: {shown:?}", echo_short(&input));
            assert_one_clean_line("rule line", &input, lines[0], 70);
            assert_one_clean_line("caret line", &input, lines[1], MAX);
            // The carets stand under the escaped text of the span when the line is not cut.
            let caret = lines[1].find('^').unwrap();
            if !lines[0].contains('…') && e.width > 0 {
                let span = &input[e.column..e.column + e.width];
                let under: String = lines[0].chars().skip(caret).collect();
                let want: String = span
                    .chars()
                    .map(|c| {
                        if c.is_whitespace() {
                            " ".into()
                        } else {
                            rawpkt_wire::text::echo(&c.to_string()).to_string()
                        }
                    })
                    .collect();
                assert!(
                    under.starts_with(&want),
                    "{:?}: {shown:?} (span {span:?})",
                    echo_short(&input)
                );
            }
        }
        // Specs of every kind, the rule inside an xdp spec, and options around it. The xdp
        // interface name is one no machine has, so a spec that parses fails at the lookup.
        for spec in [
            input.clone(),
            format!("model:{input}"),
            format!("model:{input}/0"),
            format!("mlx5:{input}"),
            format!("verbs:{input}/1"),
            format!("xdp:{input}"),
            format!("xdp:rpnone0,rule={input}"),
            format!("xdp:rpnone0,mode=native,netns={input}"),
            format!("xdp:rpnone0/{input}"),
        ] {
            if let Err(e) = rawpkt::open(&spec) {
                spec_errors += 1;
                assert_one_clean_line("spec error", &spec, &e.to_string(), MAX);
            }
        }
    }
    assert!(
        rule_errors > 2000 && spec_errors > 20_000,
        "{rule_errors} {spec_errors}"
    );
}

/// The examples of the issue: a newline inside a rule, and a 10 000-character spec.
#[test]
fn a_newline_in_a_rule_and_a_huge_spec_stay_one_short_line() {
    let e = rawpkt::open("xdp:rpnone0,rule=dst-port\n53").unwrap_err().to_string();
    assert!(!e.contains('\n') && e.contains("dst-port\\n53"), "{e}");
    assert!(e.contains("has a control character (\\n) at column 26"), "{e}");
    let huge = format!("xdp:rpnone0,rule=udp dst-port {}", "9".repeat(10_000));
    let e = rawpkt::open(&huge).unwrap_err().to_string();
    assert!(
        e.len() < 400 && e.contains("more bytes)"),
        "{} bytes: {}",
        e.len(),
        &e[..e.len().min(300)]
    );
    let e = parse(&format!("udp dst-port {}", "9".repeat(10_000)))
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].ends_with('…') && lines[1].contains('^'),
        "{e}"
    );
    // Far into a long rule, the window starts just before the bad token.
    let e = parse(&format!("{}udp dst-port 70000", " ".repeat(2_000)))
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].starts_with('…') && !lines[0].ends_with('…'),
        "{e}"
    );
    let caret = lines[1].find('^').unwrap();
    assert!(lines[0].chars().skip(caret).collect::<String>() == "70000", "{e}");
}
