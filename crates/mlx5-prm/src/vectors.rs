//! Test access to the golden vectors in `tests/data/mlx5-vectors.txt`: byte images of send
//! WQEs, CQEs and doorbell words, and the C layout of the structs involved, printed by
//! `tests/data/mlx5-vectors-gen.c` using nothing but rdma-core's public `<infiniband/mlx5dv.h>`
//! (rdma-core 44: its structs, constants and static inline helpers such as
//! `mlx5dv_set_ctrl_seg` and `mlx5dv_set_data_seg`). They are therefore independent of the Rust
//! encoders and of the device model they check.

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
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mlx5-vectors-gen.c");
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
        "tests/data/mlx5-vectors.txt is not what tests/data/mlx5-vectors-gen.c prints:\n{}",
        differ.join("\n")
    );
}

/// The value of a `CONST` line (`CONST <name> 0x<hex> ...`).
pub fn constant(name: &str) -> u64 {
    let line = VECTORS
        .lines()
        .find(|l| l.starts_with("CONST ") && l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no constant {name}"));
    let hex = line.split_whitespace().nth(2).expect("value column");
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex")
}

/// Frames with every header stack the inline modes treat differently, each with the bytes a
/// WQE must inline in mode none, L2, IP and TCP/UDP (counted by hand from the layouts below).
pub fn inline_test_frames() -> Vec<(&'static str, Vec<u8>, [usize; 4])> {
    fn frame(tags: &[[u8; 4]], ethertype: u16, l3: &[u8], l4: &[u8], len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
        for t in tags {
            f.extend_from_slice(t);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f.extend_from_slice(l4);
        f.resize(len.max(f.len()), 0x5a);
        f
    }
    let ipv4 = |ihl: u8, proto: u8| {
        let mut h = vec![0u8; usize::from(ihl) * 4];
        h[0] = 0x40 | ihl;
        h[9] = proto;
        h
    };
    let udp = [0u8; 8];
    let tcp = |doff: u8| {
        let mut h = vec![0u8; usize::from(doff) * 4];
        h[12] = doff << 4;
        h
    };
    let mut ipv6_hbh = vec![0u8; 48];
    ipv6_hbh[0] = 0x60;
    ipv6_hbh[6] = 0; // hop-by-hop options, 8 bytes, then UDP
    ipv6_hbh[40] = 17;
    const VLAN: [u8; 4] = [0x81, 0x00, 0x00, 0x05];
    const SVLAN: [u8; 4] = [0x88, 0xa8, 0x00, 0x07];
    vec![
        ("ipv4 udp", frame(&[], 0x0800, &ipv4(5, 17), &udp, 60), [0, 18, 34, 42]),
        (
            "ipv4+options tcp+options",
            frame(&[], 0x0800, &ipv4(6, 6), &tcp(8), 128),
            [0, 18, 38, 70],
        ),
        (
            "ipv6 hop-by-hop udp",
            frame(&[], 0x86dd, &ipv6_hbh, &udp, 100),
            [0, 18, 62, 70],
        ),
        (
            "vlan ipv4 udp",
            frame(&[VLAN], 0x0800, &ipv4(5, 17), &udp, 64),
            [0, 18, 38, 46],
        ),
        (
            "qinq ipv4 udp",
            frame(&[SVLAN, VLAN], 0x0800, &ipv4(5, 17), &udp, 68),
            [0, 22, 42, 50],
        ),
        // Two labels, the second with bottom-of-stack; what follows is not parsed.
        (
            "mpls x2",
            frame(&[], 0x8847, &[0, 0x10, 0x00, 64, 0, 0x20, 0x01, 64], &ipv4(5, 17), 80),
            [0, 22, 22, 22],
        ),
        ("arp", frame(&[], 0x0806, &[0; 28], &[], 60), [0, 18, 18, 18]),
        (
            "ipv4 icmp",
            frame(&[], 0x0800, &ipv4(5, 1), &[0; 8], 60),
            [0, 18, 34, 34],
        ),
    ]
}
