//! The rx-sink example's command-line errors: one line on stderr, exit status 2 for a usage
//! mistake and 1 for a failure, never a panic. None of these opens a queue, so no root is needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The example, built with the profile of this test (examples have no `CARGO_BIN_EXE_`).
fn rx_sink() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        // target/<profile dir>/deps/rx_sink-HASH: release tests get a release example.
        let release = exe.parent().and_then(Path::parent).and_then(Path::file_name) == Some("release".as_ref());
        let profile = if release { "release" } else { "test" };
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--example",
                "rx-sink",
                "--profile",
                profile,
                "--message-format=json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo to build the rx-sink example");
        assert!(out.status.success(), "building the rx-sink example failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "rx-sink")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo named no rx-sink executable")
    })
}

#[test]
fn bad_arguments_are_one_line_with_the_right_exit_status() {
    // More CPUs than CPU_SETSIZE (1024) made core_affinity index out of bounds and abort.
    for (code, args, want) in [
        (2, &[][..], "usage: rx-sink PORT [CPU]"),
        (2, &["model:rxs/0", "0", "extra"], "usage: rx-sink PORT [CPU]"),
        (
            2,
            &["model:rxs/0", "9999"],
            "CPU 9999 is not one this process may run on",
        ),
        (2, &["model:rxs/0", "1048576"], "CPU 1048576 is not one"),
        (2, &["model:rxs/0", "-1"], "CPU \"-1\" is not a number"),
        (2, &["bogus:x"], "bad port spec: unknown port kind"),
        (2, &["model:rxs/7"], "bad port spec"),
        (2, &["xdp:lo/7"], "queue 7 out of range"),
        (1, &["xdp:rpxcnone0"], "device error: xdp:rpxcnone0: no such interface"),
    ] {
        let out = Command::new(rx_sink())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run rx-sink");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(lines.len(), 1, "{args:?}: one line on stderr, got {err:?}");
        assert!(
            lines[0].starts_with("rx-sink: ") && lines[0].contains(want),
            "{args:?}: {want:?} not in {err:?}"
        );
    }
}
