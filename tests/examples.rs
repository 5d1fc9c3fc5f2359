//! The examples a newcomer copies run and check themselves: every frame arrives, in order, and
//! the device dropped none. They pace by a window of frames in flight, so a slow or busy machine
//! changes how long they take, never what they find.

mod common;

fn run(name: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(common::example(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the {name} example: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_library_example_loses_nothing() {
    let out = run("library", &["300000"]);
    assert!(
        out.starts_with("sent 300000, received 300000 in order, device drops 0"),
        "{out}"
    );
}

#[test]
fn the_multicore_example_loses_nothing_on_any_worker() {
    let out = run("multicore", &["3", "100000"]);
    assert_eq!(out.trim(), "3 workers, 300000 frames received in order, none lost");
}

#[test]
fn a_bad_frame_count_is_one_line() {
    let out = std::process::Command::new(common::example("library"))
        .arg("lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "library: FRAMES: `lots` is not a number"
    );
}
