//! How the library repeats user input in an error message (one convention for every message
//! and tool, re-exported as `spec::echo`). A leaf: the parsers of every room use it.

/// Longest piece of user input an error message repeats, in characters; longer input is cut
/// with a marker saying how much was left out.
pub const ECHO_MAX: usize = 64;

/// User input as an error message repeats it: control characters (a newline, an escape
/// sequence) and the invisible characters that reorder or break a line are written as escapes
/// (`\n`, `\u{1b}`), so that the message stays one line and shows what was typed; input longer
/// than [`ECHO_MAX`] columns (escapes included) is cut, with `…(N more bytes)` in place of the rest.
pub fn echo(input: &str) -> Echo<'_> {
    Echo(input)
}

/// See [`echo`].
pub struct Echo<'a>(&'a str);

impl std::fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        let mut columns = 0;
        for (i, c) in s.char_indices() {
            if columns >= ECHO_MAX {
                return write!(f, "…({} more bytes)", s.len() - i);
            }
            columns += write_escaped(f, c)?;
        }
        Ok(())
    }
}

/// Whether `c` is written as an escape when input is repeated: control characters, and the
/// format and separator characters that make a terminal break or reorder a line (zero-width
/// spaces and joiners, bidirectional overrides and isolates, the line and paragraph separators,
/// the byte-order mark).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Writes `c` as [`echo`] shows it; returns the columns it took (one per character written).
pub(crate) fn write_escaped(out: &mut impl std::fmt::Write, c: char) -> Result<usize, std::fmt::Error> {
    if needs_escape(c) {
        // `\n`, `\t`, `\r`, or `\u{…}` for the rest: all ASCII.
        let mut n = 0;
        for e in c.escape_default() {
            out.write_char(e)?;
            n += 1;
        }
        Ok(n)
    } else {
        out.write_char(c)?;
        Ok(1)
    }
}
