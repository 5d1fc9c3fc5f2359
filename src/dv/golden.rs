//! Test access to the golden vectors generated from rdma-core's own `mlx5dv.h` helpers
//! (`../shared/reference/mlx5-vectors/gen.c`; copied to `tests/data/mlx5-vectors.txt`).

const VECTORS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mlx5-vectors.txt"));

/// The bytes of vector `name`.
pub fn bytes(name: &str) -> Vec<u8> {
    let line = VECTORS
        .lines()
        .find(|l| l.starts_with("VEC ") && l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no vector {name}"));
    let hex = line.split_whitespace().nth(3).expect("hex column");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The number after `key` (e.g. `size=`) on a `FIELD`/`LAYOUT` line.
fn number(line: &str, key: &str) -> usize {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .expect("key")
        .parse()
        .expect("number")
}

/// `(offset, size)` of `member` in C struct `st`, from the `FIELD` lines.
pub fn field(st: &str, member: &str) -> (usize, usize) {
    let line = VECTORS
        .lines()
        .find(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some("FIELD") && w.next() == Some(st) && w.next() == Some(member)
        })
        .unwrap_or_else(|| panic!("no field {st}.{member}"));
    (number(line, "offset="), number(line, "size="))
}

/// `(size, align)` of C struct `st`, from the `LAYOUT` lines.
pub fn layout(st: &str) -> (usize, usize) {
    let line = VECTORS
        .lines()
        .find(|l| l.starts_with("LAYOUT") && l.split_whitespace().nth(1) == Some(st))
        .unwrap_or_else(|| panic!("no layout {st}"));
    (number(line, "size="), number(line, "align="))
}

#[test]
fn copy_matches_shared_reference() {
    let shared = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/reference/mlx5-vectors/vectors.txt"
    );
    if let Ok(s) = std::fs::read_to_string(shared) {
        assert_eq!(
            s, VECTORS,
            "tests/data/mlx5-vectors.txt differs from the shared reference"
        );
    }
}
