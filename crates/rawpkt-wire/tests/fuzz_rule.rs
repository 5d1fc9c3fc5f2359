//! Fuzz target: the flow-rule parser and its error messages (`flow::syntax`).
//!
//! Inputs: rules built from the grammar's words with values near their limits, those rules
//! mutated byte-wise (control characters, cut and doubled words, non-ASCII), and long inputs.
//! Invariants:
//! - a rule that parses validates, prints as one line, and that line parses back to the same
//!   rule and prints the same (`Display` is the canonical form);
//! - an error keeps the input, its `{:#}` form is one line and its `Display` exactly two (the
//!   rule, then the carets and the message), with no control character and bounded length
//!   whatever the input's length, and the carets start inside the shown rule (or just past
//!   its end, for a value missing after the last word).

use rawpkt_test_support::fuzz;

use rawpkt_wire::rule::FlowRule;
use rawpkt_wire::syntax::parse;

/// Longest line an error may print, in characters, for any input: the rule is shown cut to a
/// window around the bad token and echoed tokens are cut too.
const MAX_LINE: usize = 1024;

const WORDS: &[&str] = &[
    "dst-mac",
    "src-mac",
    "vlan",
    "ethertype",
    "ipv4",
    "ipv6",
    "src",
    "dst",
    "tcp",
    "udp",
    "proto",
    "src-port",
    "dst-port",
    "any",
    "copy",
    "steal",
    "priority",
];

fn mac(rng: &mut fuzz::Rng) -> String {
    let b = rng.bytes(6);
    let m = b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":");
    match rng.below(4) {
        0 => format!(
            "{m}/{}",
            rng.bytes(6)
                .iter()
                .map(|x| format!("{x:02X}"))
                .collect::<Vec<_>>()
                .join(":")
        ),
        1 => format!("{m}/ff:ff:ff:00:00:00"),
        _ => m,
    }
}

fn number(rng: &mut fuzz::Rng, max: u64) -> String {
    let over = rng.below(2) as u64;
    let n = rng.edgy(max + 1 + over);
    match rng.below(5) {
        0 => format!("{n:#x}"),
        1 => format!("0{n}"),
        _ => n.to_string(),
    }
}

fn addr(rng: &mut fuzz::Rng, v6: bool) -> String {
    let (a, max): (String, u64) = if v6 {
        let ip = std::net::Ipv6Addr::from(u128::from(rng.next()) << 64 | u128::from(rng.next() & 0xffff));
        (ip.to_string(), 128)
    } else {
        (std::net::Ipv4Addr::from(rng.u32()).to_string(), 32)
    };
    match rng.below(3) {
        0 => a,
        _ => format!("{a}/{}", rng.edgy(max + 2)),
    }
}

/// A rule from the grammar's words, mostly well formed.
fn rule_text(rng: &mut fuzz::Rng) -> String {
    let v6 = rng.one_in(2);
    let mut words: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let w = *rng.pick(WORDS);
        words.push(w.to_string());
        match w {
            "dst-mac" | "src-mac" => words.push(mac(rng)),
            "vlan" => words.push(number(rng, 4095)),
            "ethertype" => words.push(number(rng, 0xffff)),
            "proto" => words.push(number(rng, 255)),
            "src-port" | "dst-port" => words.push(number(rng, 0xffff)),
            "priority" => words.push(number(rng, 0xffff)),
            "ipv4" | "ipv6" => {
                words.pop();
                words.push(if v6 { "ipv6" } else { "ipv4" }.into());
                for kw in ["src", "dst"] {
                    if rng.one_in(2) {
                        words.push(kw.into());
                        words.push(addr(rng, v6));
                    }
                }
            }
            "src" | "dst" => words.push(addr(rng, v6)),
            _ => {}
        }
    }
    let sep = if rng.one_in(8) {
        *rng.pick(&["  ", "\t", " \n", "\u{a0}"])
    } else {
        " "
    };
    words.join(sep)
}

fn input(rng: &mut fuzz::Rng) -> String {
    match rng.below(10) {
        // Long inputs: echoes must be cut.
        0 => {
            let base = rule_text(rng);
            let filler = rng
                .pick(&["a", "udp ", "é", "\u{1b}[31m", "1", "🦀", "dst-port "])
                .repeat(1 + rng.below(3000));
            match rng.below(3) {
                0 => format!("{filler}{base}"),
                1 => format!("{base} {filler}"),
                _ => format!("{base} dst-port {filler}"),
            }
        }
        // Raw bytes, taken as UTF-8 where they are.
        1 => {
            let n = rng.below(40);
            String::from_utf8_lossy(&rng.bytes(n)).into_owned()
        }
        // Non-ASCII and control characters spliced into a rule.
        2 => {
            let mut s = rule_text(rng);
            for _ in 0..1 + rng.below(3) {
                let c = *rng.pick(&[
                    '\n', '\r', '\0', '\u{7f}', '\u{85}', '\u{202e}', '\u{2028}', 'ß', '中', '\u{feff}',
                ]);
                let mut at = rng.below(s.len() + 1);
                while !s.is_char_boundary(at) {
                    at -= 1;
                }
                s.insert(at, c);
            }
            s
        }
        3..=5 => {
            let mut b = rule_text(rng).into_bytes();
            rng.mutate(&mut b);
            String::from_utf8_lossy(&b).into_owned()
        }
        _ => rule_text(rng),
    }
}

fn check_line(what: &str, line: &str, input: &str) {
    assert!(
        !line.chars().any(char::is_control),
        "{what} has a control character: {line:?} (input {input:?})"
    );
    let n = line.chars().count();
    assert!(
        n <= MAX_LINE,
        "{what} is {n} characters long (input of {} bytes)",
        input.len()
    );
}

fn check(s: &str, ok: &mut u64) {
    match parse(s) {
        Ok(r) => {
            *ok += 1;
            r.validate()
                .unwrap_or_else(|e| panic!("{s:?} parsed to {r:?}, which does not validate: {e}"));
            let text = r.to_string();
            assert!(!text.chars().any(char::is_control), "{s:?} prints as {text:?}");
            let back: FlowRule =
                parse(&text).unwrap_or_else(|e| panic!("{s:?} prints as {text:?}, which does not parse:\n{e}"));
            assert_eq!(back, r, "{s:?} prints as {text:?}, which parses to another rule");
            assert_eq!(back.to_string(), text, "{s:?}: the canonical form is not a fixed point");
        }
        Err(e) => {
            assert_eq!(e.input(), s);
            assert!(!e.message.is_empty(), "{s:?}: empty message");
            assert!(
                e.column <= s.len() + 1,
                "{s:?}: column {} is beyond the input ({} bytes)",
                e.column,
                s.len()
            );
            let one = format!("{e:#}");
            assert_eq!(one.lines().count(), 1, "{s:?}: {{:#}} is not one line: {one:?}");
            check_line("{:#}", &one, s);
            let shown = e.to_string();
            let lines: Vec<&str> = shown.split('\n').collect();
            assert_eq!(
                lines.len(),
                2,
                "{s:?}: the error is not the rule and a caret line: {shown:?}"
            );
            check_line("the rule line", lines[0], s);
            check_line("the caret line", lines[1], s);
            let pad = lines[1].chars().take_while(|&c| c == ' ').count();
            assert!(
                lines[1][pad..].starts_with('^'),
                "{s:?}: the caret line does not start with carets: {:?}",
                lines[1]
            );
            let width = lines[0].chars().count();
            assert!(
                pad <= width + 1,
                "{s:?}: the carets start at column {pad}, past the shown rule ({width} columns): {shown:?}"
            );
        }
    }
}

#[test]
fn fuzz_rule() {
    let mut ok = 0;
    let n = fuzz::run("fuzz_rule", 200_000, |rng, _| check(&input(rng), &mut ok));
    // A generator that only made errors would test half of the invariants. Random keyword
    // sequences mostly contradict themselves: 9 590 of the default seed's 2e5 inputs parse
    // (4.8 %), so a fall below 2.5 % means the generator or the parser changed.
    assert!(n < 1000 || ok * 40 > n, "only {ok} of {n} inputs parsed");
}
