//! `scripts/model-host.sh`: a program it runs finds what a host with the model's four
//! ConnectX-5 functions has (the soname links first in `LD_LIBRARY_PATH`, a PCI tree in
//! `SYSFS_PCI_DEVICES`, the netdevs mdl0..mdl3 with the model's MACs in a network namespace),
//! its exit status comes back, and the namespace is gone afterwards.

use std::process::Command;

fn launcher() -> Command {
    // The library the launcher links is the one the tests build.
    rawpkt_model_verbs::soname_dir();
    Command::new(rawpkt_model_verbs::workspace_root().join("scripts/model-host.sh"))
}

#[test]
#[ignore = "needs root (a network namespace)"]
fn the_launcher_sets_up_the_host_and_takes_it_down() {
    let script = r#"
        echo "ns=$(ip netns identify $$)"
        ip -br link
        d="$SYSFS_PCI_DEVICES/0000:3c:00.1"
        echo "pci=$(cat $d/vendor) $(cat $d/device) $(cat $d/class) $(basename $(readlink $d/driver))"
        grep PCI_SLOT_NAME "$d/uevent"
        echo "lib=$(readlink -f ${LD_LIBRARY_PATH%%:*}/libibverbs.so.1) $(readlink -f ${LD_LIBRARY_PATH%%:*}/libmlx5.so.1)"
        exit 3
    "#;
    let out = launcher()
        .args(["sh", "-c", script])
        .output()
        .expect("running scripts/model-host.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the program's status comes back\n{text}{err}"
    );
    let ns = text
        .lines()
        .find_map(|l| l.strip_prefix("ns="))
        .unwrap_or_else(|| panic!("{text}{err}"));
    assert!(
        ns.starts_with("rawpkt-model-"),
        "a namespace of its own: {ns:?}\n{text}"
    );
    for (dev, mac) in [
        ("mdl0@mdl1", "02:4d:4c:35:00:00"),
        ("mdl1@mdl0", "02:4d:4c:35:00:01"),
        ("mdl2@mdl3", "02:4d:4c:35:00:02"),
        ("mdl3@mdl2", "02:4d:4c:35:00:03"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(dev))
            .unwrap_or_else(|| panic!("no {dev}:\n{text}"));
        assert!(line.contains(" UP ") && line.contains(mac), "{line}");
    }
    assert!(text.contains("pci=0x15b3 0x1017 0x020000 mlx5_core"), "{text}");
    assert!(text.contains("PCI_SLOT_NAME=0000:3c:00.1"), "{text}");
    let lib = rawpkt_model_verbs::library_path().canonicalize().unwrap();
    let want = format!("lib={} {}", lib.display(), lib.display());
    assert!(text.contains(&want), "{want}\n{text}");
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(ns),
        "{ns} is still there"
    );
}

#[test]
fn the_launcher_says_how_to_use_it() {
    let out = launcher().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("model-host.sh: usage: "), "{err}");
    let out = launcher().arg("no-such-program-here").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
