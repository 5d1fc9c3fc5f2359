//! The rx-sink example's command-line errors: one line on stderr, exit status 2 for a usage
//! mistake and 1 for a failure, never a panic. None of these opens a queue, so no root is needed.

use std::process::{Command, Stdio};

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
        (2, &["--bogus"], "unknown option \"--bogus\"; usage: rx-sink PORT [CPU]"),
        (2, &["model:rxs/7"], "bad port spec"),
        (2, &["xdp:lo/7"], "queue 7 out of range"),
        (1, &["xdp:rpxcnone0"], "device error: xdp:rpxcnone0: no such interface"),
    ] {
        let out = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_rx-sink")))
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

/// `--help` is help, not "bad port spec".
#[test]
fn help_is_help() {
    for arg in ["--help", "-h"] {
        let out = Command::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_rx-sink")))
            .arg(arg)
            .stdin(Stdio::null())
            .output()
            .expect("run rx-sink");
        let help = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty(), "{arg}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            help.starts_with("rx-sink: receives and drops") && help.contains("Usage: rx-sink PORT [CPU]"),
            "{help}"
        );
    }
}
