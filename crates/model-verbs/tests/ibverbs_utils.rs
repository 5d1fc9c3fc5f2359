//! Debian's unmodified ibverbs-utils (`ibv_devices`, `ibv_devinfo -v`: rdma-core 44, linked
//! with BIND_NOW) run on the model library through its soname directory, and report the four
//! devices as a ConnectX-5 would: their GUIDs, board id, clock, pacing caps and every port's
//! RoCE GIDs. The assertions are on the tools' output.

use std::process::{Command, Output};

const MACS: [[u8; 6]; 4] = [
    [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x00],
    [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01],
    [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02],
    [0x02, 0x4d, 0x4c, 0x35, 0x00, 0x03],
];

fn run(prog: &str, args: &[&str]) -> Output {
    let path = format!("/usr/bin/{prog}");
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: install ibverbs-utils (apt-get install -y ibverbs-utils)"
    );
    let out = Command::new(&path)
        .args(args)
        .env("LD_LIBRARY_PATH", rawpkt_model_verbs::soname_dir())
        .output()
        .unwrap_or_else(|e| panic!("running {path}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{prog} wrote errors:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The node GUID Mellanox firmware derives from a port's MAC: OUI, 03:00, the NIC bytes.
fn guid(mac: [u8; 6]) -> [u8; 8] {
    [mac[0], mac[1], mac[2], 0x03, 0x00, mac[3], mac[4], mac[5]]
}

#[test]
#[ignore = "needs Debian's ibverbs-utils (scripts/test.sh installs it as root)"]
fn ibv_devices_lists_the_four_devices() {
    let out = run("ibv_devices", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<(String, String)> = text
        .lines()
        .skip(2)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect();
    let want: Vec<(String, String)> = MACS
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let g: String = guid(*m).iter().map(|b| format!("{b:02x}")).collect();
            (format!("mlx5_{i}"), g)
        })
        .collect();
    assert_eq!(rows, want, "ibv_devices printed:\n{text}");
}

#[test]
#[ignore = "needs Debian's ibverbs-utils (scripts/test.sh installs it as root)"]
fn ibv_devinfo_verbose_reports_a_connectx5_per_device() {
    let out = run("ibv_devinfo", &["-v"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let devices: Vec<&str> = text.split("hca_id:").skip(1).collect();
    assert_eq!(devices.len(), 4, "{text}");
    for (i, dev) in devices.iter().enumerate() {
        let field = |name: &str| -> String {
            dev.lines()
                .find_map(|l| l.trim_start().strip_prefix(name).map(|v| v.trim().to_string()))
                .unwrap_or_else(|| panic!("mlx5_{i}: no {name} in\n{dev}"))
        };
        assert_eq!(dev.lines().next().unwrap().trim(), format!("mlx5_{i}"));
        let g = guid(MACS[i]);
        let colon = |g: [u8; 8]| {
            g.chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect::<Vec<_>>()
                .join(":")
        };
        assert_eq!(field("node_guid:"), colon(g));
        // The system image GUID is the first function's of each two-port card.
        assert_eq!(field("sys_image_guid:"), colon(guid(MACS[i & !1])));
        assert_eq!(field("vendor_id:"), "0x02c9");
        assert_eq!(field("vendor_part_id:"), "4119");
        assert_eq!(field("board_id:"), "MT_0000000008");
        assert_eq!(field("fw_ver:"), "16.35.2000");
        assert_eq!(field("hca_core_clock:"), "156250kHZ");
        assert_eq!(field("completion timestamp_mask:"), "0x7fffffffffffffff");
        assert_eq!(field("qp_rate_limit_min:"), "1kbps");
        assert_eq!(field("qp_rate_limit_max:"), "100000000kbps");
        let vectors: u32 = field("num_comp_vectors:").parse().unwrap();
        assert!(vectors >= 1, "num_comp_vectors {vectors}");
        assert_eq!(field("phys_port_cnt:"), "1");
        assert_eq!(field("port:"), "1");
        assert_eq!(field("state:"), "PORT_ACTIVE (4)");
        assert_eq!(field("link_layer:"), "Ethernet");
        // The link-local GID from the MAC's modified EUI-64, as RoCE v1 and as RoCE v2.
        let m = MACS[i];
        let eui = [
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            m[0] ^ 2,
            m[1],
            m[2],
            0xff,
            0xfe,
            m[3],
            m[4],
            m[5],
        ];
        let ip = std::net::Ipv6Addr::from(eui);
        let full: Vec<String> = eui.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
        let gids: Vec<&str> = dev.lines().filter(|l| l.contains("GID[")).map(str::trim).collect();
        assert_eq!(
            gids,
            [
                format!("GID[  0]:\t\t{}, RoCE v1", full.join(":")),
                format!("GID[  1]:\t\t{ip}, RoCE v2"),
            ],
            "mlx5_{i}"
        );
    }
}

/// Every installed program that links rdma-core (ibverbs-utils, perftest, rdmacm-utils: those
/// present) resolves all its symbols, at their versions, against the model library and the
/// libraries it pulls in (librdmacm, libefa, ...): `ldd -r` performs every relocation, as a
/// BIND_NOW start does, and names what is missing.
#[test]
#[ignore = "needs Debian's ibverbs-utils (scripts/test.sh installs it as root)"]
fn every_installed_rdma_core_program_resolves_against_the_library() {
    let dir = rawpkt_model_verbs::soname_dir();
    let mut checked = Vec::new();
    for e in std::fs::read_dir("/usr/bin").expect("/usr/bin").flatten() {
        let p = e.path();
        let d = Command::new("readelf").arg("-d").arg(&p).output();
        let Ok(d) = d else { continue };
        if !String::from_utf8_lossy(&d.stdout).contains("[libibverbs.so.1]") {
            continue;
        }
        let out = Command::new("ldd")
            .arg("-r")
            .arg(&p)
            .env("LD_LIBRARY_PATH", &dir)
            .output()
            .expect("ldd");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for bad in ["undefined symbol", "version information", "not found"] {
            assert!(!text.contains(bad), "{}:\n{text}", p.display());
        }
        // The model library under whichever of its two names the loader met first (it maps
        // one file once), and never the real rdma-core.
        let ours = format!("=> {}/", dir.display());
        assert!(text.contains(&ours), "{}:\n{text}", p.display());
        for real in ["libibverbs.so.1 => /", "libmlx5.so.1 => /"] {
            for l in text.lines().filter(|l| l.contains(real)) {
                assert!(l.contains(&ours), "{}: the real rdma-core is loaded: {l}", p.display());
            }
        }
        checked.push(p.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(
        checked.iter().any(|n| n == "ibv_devinfo"),
        "no rdma-core program found: install ibverbs-utils"
    );
    eprintln!("resolved: {}", checked.join(" "));
}
