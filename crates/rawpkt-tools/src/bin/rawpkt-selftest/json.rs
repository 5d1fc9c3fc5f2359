//! The report's JSON: a value tree written by hand (the tools take no serde), objects in the
//! order their fields were added, so that the file reads in the order `docs/selftest.md` gives.

use std::fmt::Write;

/// A JSON value.
#[derive(Clone, Debug)]
pub enum J {
    Null,
    Bool(bool),
    Int(i128),
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    /// An empty object.
    pub fn obj() -> J {
        J::Obj(Vec::new())
    }

    /// This object with `key` set to `v` (replaced if present).
    pub fn with(mut self, key: &str, v: impl Into<J>) -> J {
        self.set(key, v);
        self
    }

    /// Sets `key` to `v` in an object (replaced if present); nothing on other values.
    pub fn set(&mut self, key: &str, v: impl Into<J>) {
        if let J::Obj(fields) = self {
            let v = v.into();
            match fields.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = v,
                None => fields.push((key.to_string(), v)),
            }
        }
    }

    /// The boolean at `key` of an object.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        match self {
            J::Obj(fields) => fields.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
                J::Bool(b) => Some(*b),
                _ => None,
            }),
            _ => None,
        }
    }

    /// Pretty text, two spaces per level, short arrays of scalars on one line.
    pub fn pretty(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, 0);
        s.push('\n');
        s
    }

    fn scalar(&self) -> bool {
        !matches!(self, J::Arr(_) | J::Obj(_))
    }

    fn write(&self, out: &mut String, depth: usize) {
        let pad = |out: &mut String, d: usize| {
            for _ in 0..d {
                out.push_str("  ");
            }
        };
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Num(f) if f.is_finite() => {
                let _ = write!(out, "{f}");
            }
            J::Num(_) => out.push_str("null"),
            J::Str(s) => quote(out, s),
            J::Arr(items) if items.is_empty() => out.push_str("[]"),
            J::Arr(items) if items.len() <= 16 && items.iter().all(J::scalar) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write(out, depth);
                }
                out.push(']');
            }
            J::Arr(items) => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    pad(out, depth + 1);
                    v.write(out, depth + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push(']');
            }
            J::Obj(fields) if fields.is_empty() => out.push_str("{}"),
            J::Obj(fields) => {
                out.push_str("{\n");
                for (i, (k, v)) in fields.iter().enumerate() {
                    pad(out, depth + 1);
                    quote(out, k);
                    out.push_str(": ");
                    v.write(out, depth + 1);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push('}');
            }
        }
    }
}

fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<bool> for J {
    fn from(v: bool) -> J {
        J::Bool(v)
    }
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl From<$t> for J {
            fn from(v: $t) -> J {
                J::Int(v as i128)
            }
        }
    )*};
}
ints!(u8, u16, u32, u64, usize, i32, i64);

impl From<f64> for J {
    fn from(v: f64) -> J {
        J::Num(v)
    }
}

impl From<&str> for J {
    fn from(v: &str) -> J {
        J::Str(v.to_string())
    }
}

impl From<String> for J {
    fn from(v: String) -> J {
        J::Str(v)
    }
}

impl<T: Into<J>> From<Option<T>> for J {
    fn from(v: Option<T>) -> J {
        v.map_or(J::Null, Into::into)
    }
}

impl<T: Into<J>> From<Vec<T>> for J {
    fn from(v: Vec<T>) -> J {
        J::Arr(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_a_json_reader_reads() {
        let j = J::obj()
            .with("a", 1u32)
            .with("s", "x\"y\n")
            .with("n", Option::<u32>::None)
            .with("v", vec![1u8, 2])
            .with("o", J::obj().with("t", true));
        assert_eq!(
            j.pretty(),
            "{\n  \"a\": 1,\n  \"s\": \"x\\\"y\\n\",\n  \"n\": null,\n  \"v\": [1, 2],\n  \"o\": {\n    \"t\": true\n  }\n}\n"
        );
    }
}
