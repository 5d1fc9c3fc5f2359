//! Test access to the golden vectors in `tests/data/mlx5-vectors.txt`: byte images of send
//! WQEs, CQEs and doorbell words, and the C layout of the structs involved, printed by
//! `scripts/mlx5-vectors-gen.c` using nothing but rdma-core's public `<infiniband/mlx5dv.h>`
//! (rdma-core 44: its structs, constants and static inline helpers such as
//! `mlx5dv_set_ctrl_seg` and `mlx5dv_set_data_seg`). They are therefore independent of the Rust
//! encoders and of the device model they check.

const VECTORS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mlx5-vectors.txt"));

/// The bytes of vector `name`.
pub(crate) fn bytes(name: &str) -> Vec<u8> {
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
pub(crate) fn field(st: &str, member: &str) -> (usize, usize) {
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
pub(crate) fn layout(st: &str) -> (usize, usize) {
    let line = VECTORS
        .lines()
        .find(|l| l.starts_with("LAYOUT") && l.split_whitespace().nth(1) == Some(st))
        .unwrap_or_else(|| panic!("no layout {st}"));
    (number(line, "size="), number(line, "align="))
}

/// The committed vectors are what the generator prints against the system's rdma-core headers.
/// Only the size of `struct mlx5dv_obj` may differ: rdma-core 55 appended a member to it, and the
/// vectors were made with rdma-core 44's header.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn generator_reproduces_the_vectors() {
    use std::process::Command;
    let header = "/usr/include/infiniband/mlx5dv.h";
    assert!(
        std::path::Path::new(header).exists(),
        "{header} is missing: install libibverbs-dev (apt-get install -y libibverbs-dev)"
    );
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mlx5-vectors-gen.c");
    let dir = std::env::temp_dir().join(format!("rawpkt-mlx5-vectors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join("gen");
    let cc = Command::new("cc")
        .args(["-O0", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .output()
        .expect("run cc (install gcc)");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().expect("run the generator");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.status.success(),
        "generator failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let made = String::from_utf8(run.stdout).expect("ASCII output");
    let may_differ = |l: &str| l.starts_with("LAYOUT mlx5dv_obj ");
    let (a, b): (Vec<&str>, Vec<&str>) = (made.lines().collect(), VECTORS.lines().collect());
    assert_eq!(
        a.len(),
        b.len(),
        "the generator prints {} lines, the committed vectors have {}",
        a.len(),
        b.len()
    );
    let differ: Vec<String> = a
        .iter()
        .zip(&b)
        .enumerate()
        .filter(|(_, (x, y))| x != y && !(may_differ(x) && may_differ(y)))
        .map(|(i, (x, y))| format!("line {}:\n  generated {x}\n  committed {y}", i + 1))
        .collect();
    assert!(
        differ.is_empty(),
        "tests/data/mlx5-vectors.txt is not what scripts/mlx5-vectors-gen.c prints:\n{}",
        differ.join("\n")
    );
}

/// The value of a `CONST` line (`CONST <name> 0x<hex> ...`).
pub(crate) fn constant(name: &str) -> u64 {
    let line = VECTORS
        .lines()
        .find(|l| l.starts_with("CONST ") && l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no constant {name}"));
    let hex = line.split_whitespace().nth(2).expect("value column");
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex")
}
