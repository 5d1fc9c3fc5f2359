//! The fake sysfs tree of a process that dies without cleaning up (SIGKILL skips atexit) does
//! not pile up in $TMPDIR: the next process to start the model removes it, and never the tree
//! of a process still alive. Each child is python3 loading the library with ctypes and starting
//! the model (`ibv_get_device_list`), in a private TMPDIR.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn start(lib: &Path, tmp: &Path, stay: bool) -> Child {
    let script = format!(
        "import ctypes, sys, time\n\
         l = ctypes.CDLL({lib:?})\n\
         l.ibv_get_device_list.restype = ctypes.c_void_p\n\
         assert l.ibv_get_device_list(None)\n\
         print('up', flush=True)\n\
         time.sleep(60 if {stay} else 0)\n",
        lib = lib.to_string_lossy(),
        stay = if stay { "True" } else { "False" },
    );
    let mut c = Command::new("python3")
        .args(["-c", &script])
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (apt-get install -y python3)");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "up\n", "the child did not start the model");
    c
}

fn tree(tmp: &Path, pid: u32) -> PathBuf {
    tmp.join(format!("rawpkt-model-sysfs-{pid}"))
}

#[test]
fn trees_of_killed_processes_are_removed_by_the_next_one() {
    let lib = rawpkt_model_verbs::library_path();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sysfs-tree-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();

    let mut killed = start(&lib, &tmp, true);
    let mut alive = start(&lib, &tmp, true);
    let (k, a) = (tree(&tmp, killed.id()), tree(&tmp, alive.id()));
    assert!(k.join("class/infiniband/mlx5_0/board_id").exists());
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(k.exists(), "SIGKILL leaves the tree (no atexit)");

    // A process that starts the model and exits normally: removes the dead one's tree, keeps
    // the live one's, and removes its own at exit.
    let mut next = start(&lib, &tmp, false);
    let n = tree(&tmp, next.id());
    assert!(next.wait().unwrap().success());
    assert!(!k.exists(), "the killed process's tree is still in {}", tmp.display());
    assert!(
        a.join("class/infiniband/mlx5_0/board_id").exists(),
        "a live process's tree was removed"
    );
    assert!(!n.exists(), "a normal exit leaves its tree");

    alive.kill().unwrap();
    alive.wait().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}
