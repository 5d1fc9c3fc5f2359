//! `rawpkt-selftest`, the real binary, on the model library (`crates/model-verbs/`,
//! docs/model-library.md): `mlx5_0` against its cabled peer `mlx5_1`, once per device profile,
//! with a reduced `--frames` (the ring wraps run their own computed counts). Each run must pass,
//! the steps the model can run (datapath, ring wraps, TX errors, timestamps) must have run and
//! passed, and the report's fields must say what the profile implies; `docs/selftest.md` must
//! name every field of the report.
//!
//! Needs root (CAP_NET_RAW for RAW_PACKET QPs and flows); CI runs it with `--include-ignored`.

use rawpkt_test_support as common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

/// Frames per receive mode and size.
const FRAMES: u64 = 1000;
/// For one run: about a million frames through the model for the ring wraps, the rest small.
const LIMIT: Duration = Duration::from_secs(600);

/// One self-test at a time: each spins a sender, a receiver and the model's thread, and CI has
/// 2 CPUs.
static LOCK: Mutex<()> = Mutex::new(());

/// What a profile implies for the report.
struct Expect {
    profile: &'static str,
    clock_mode: &'static str,
    vlan_insert: &'static str,
    inline_source: &'static str,
    wqe_id_form: &'static str,
    devx: bool,
}

fn run_selftest(profile: &str) -> Value {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let lib = common::model_verbs_lib();
    let dir = std::env::temp_dir().join(format!("rawpkt-selftest-{}-{profile}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let exe = env!("CARGO_BIN_EXE_rawpkt-selftest");
    let mut cmd = Command::new(exe);
    cmd.env("RAWPKT_LIBIBVERBS", lib)
        .env("RAWPKT_LIBMLX5", lib)
        .env("RAWPKT_MODEL_PROFILE", profile)
        .env_remove("RAWPKT_MODEL_KNOBS")
        .args(["--port", "mlx5:mlx5_0/1", "--peer", "mlx5:mlx5_1/1", "--frames"])
        .arg(FRAMES.to_string())
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let cpus = common::allowed_cpus();
    match cpus.first() {
        Some(c) if cpus.len() > 1 => cmd.env("RAWPKT_MODEL_CPU", c.to_string()),
        _ => cmd.env_remove("RAWPKT_MODEL_CPU"),
    };
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
    let out = common::output_within(child, LIMIT, &format!("rawpkt-selftest on profile {profile}"));
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{profile}: exit {}; {said}", out.status);
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{profile}: no report: {e}; {said}"));
    let _ = std::fs::remove_dir_all(&dir);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{profile}: report is not JSON: {e}"));
    // One line per step, each PASS, FAIL or SKIP(reason).
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in [
        "identity",
        "caps",
        "datapath",
        "ring_wraps",
        "tx_errors",
        "timestamps",
        "bifurcation",
        "events",
    ] {
        let lines: Vec<&str> = stdout
            .lines()
            .filter(|l| {
                l.starts_with(&format!("PASS {name}:"))
                    || l.starts_with(&format!("FAIL {name}:"))
                    || (l.starts_with("SKIP(") && l.ends_with(&format!(") {name}")))
            })
            .collect();
        assert_eq!(lines.len(), 1, "{profile}: step {name}: {lines:?}; {said}");
    }
    v
}

fn step<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["steps"]
        .as_array()
        .expect("steps[]")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}"))
}

/// Every field path of `v` (`a.b`, `a[].b`), the counter maps (`counters`, `answers`) and the
/// queue counters (QueueStats objects) as leaves, as `docs/selftest.md` lists them.
fn paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    let leaf_object = ["counters", "answers", "rawpkt.rx", "rawpkt.tx", "rawpkt_tx"]
        .iter()
        .any(|s| at.ends_with(s));
    match v {
        Value::Object(m) if !leaf_object => {
            for (k, x) in m {
                let p = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                paths(x, &p, out);
            }
        }
        Value::Array(a) if a.iter().any(Value::is_object) => {
            for x in a {
                paths(x, &format!("{at}[]"), out);
            }
        }
        _ => {
            out.insert(at.to_string());
        }
    }
}

/// The fields `docs/selftest.md`'s table names.
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(common::workspace_root().join("docs/selftest.md")).expect("docs/selftest.md");
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(k, _)| k.to_string()))
        .collect()
}

fn check(e: Expect) {
    let v = run_selftest(e.profile);
    let p = e.profile;
    assert_eq!(v["schema"], "rawpkt-selftest/1");
    assert_eq!(v["result"], "pass", "{p}: failed steps {}", v["failed_steps"]);
    assert_eq!(v["failed_steps"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["host"]["model_library"], true);

    // Identity: the two ports, the profile the library runs.
    let ports = v["ports"].as_array().expect("ports[]");
    assert_eq!(ports.len(), 2);
    assert_eq!(
        (&ports[0]["role"], &ports[0]["ibdev"]),
        (&"dut".into(), &"mlx5_0".into())
    );
    assert_eq!(
        (&ports[1]["role"], &ports[1]["ibdev"]),
        (&"peer".into(), &"mlx5_1".into())
    );
    let prof = ports[0]["model_profile"].as_str().expect("model_profile");
    assert!(prof.split_whitespace().next() == Some(p), "{p}: {prof}");
    assert_eq!(ports[0]["netdev"], "mdl0");
    assert_eq!(ports[0]["mac"], "02:4d:4c:35:00:00");
    // No Linux netdev behind the model library's: ethtool cannot read it, and says so.
    assert!(ports[0]["ethtool"].as_str().unwrap().starts_with("unavailable"), "{p}");

    // Caps: what the profile implies.
    let caps = &v["caps"];
    assert_eq!(caps["datapath"], "dv", "{p}");
    assert_eq!(caps["clock"]["mode"], e.clock_mode, "{p}: {}", caps["clock"]);
    assert_eq!(caps["vlan_insert"]["used"], e.vlan_insert, "{p}");
    assert_eq!(caps["inline"]["mode"], "none", "{p}");
    assert_eq!(caps["inline"]["source"], e.inline_source, "{p}");
    assert_eq!(caps["devx"]["available"], e.devx, "{p}: {}", caps["devx"]);
    assert_eq!(caps["striding_rq"]["layout"], "per-stride", "{p}");
    assert_eq!(caps["sq"]["bf_size"], 256, "{p}: a ConnectX's BlueFlame half-register");
    assert!(caps["dv_flags"].as_array().unwrap().contains(&"CQE_V1".into()), "{p}");
    assert!(caps["cqe_compression"]["max_num"].as_u64() > Some(1), "{p}");

    for name in [
        "identity",
        "caps",
        "datapath",
        "ring_wraps",
        "tx_errors",
        "timestamps",
        "events",
    ] {
        assert_eq!(
            step(&v, name)["status"],
            "pass",
            "{p}: {name}: {}",
            step(&v, name)["reason"]
        );
    }
    // The model library's netdevs are no Linux interfaces.
    assert_eq!(step(&v, "bifurcation")["status"], "skip", "{p}");

    // Datapath: every mode and size up to the MTU ran, all frames arrived intact, the model's
    // counters agree with rawpkt's.
    let runs = step(&v, "datapath")["datapath"]["runs"].as_array().expect("runs[]");
    assert_eq!(runs.len(), 4 * 6, "{p}: 4 modes × 6 sizes");
    let ran: Vec<&Value> = runs.iter().filter(|r| r.get("skipped").is_none()).collect();
    assert_eq!(
        ran.len(),
        4 * 5,
        "{p}: 9000-byte frames exceed the MTU of 1500; the rest run"
    );
    for r in &ran {
        let what = format!("{p}: {} {}", r["mode"], r["size"]);
        assert_eq!(r["frames_sent"], FRAMES, "{what}");
        assert_eq!(r["frames_received"], FRAMES, "{what}");
        assert_eq!(
            (r["mismatches"].as_u64(), r["out_of_order"].as_u64()),
            (Some(0), Some(0)),
            "{what}"
        );
        assert_eq!(r["device"]["rx_port"]["source"], "model", "{what}");
        assert_eq!(r["counters_agree"], true, "{what}");
        assert_eq!(r["device"]["rx_port"]["counters"]["rx_frames"], FRAMES, "{what}");
        assert_eq!(r["device"]["tx_port"]["counters"]["tx_frames"], FRAMES, "{what}");
        assert_eq!(r["rawpkt"]["rx"]["packets"], FRAMES, "{what}");
    }

    // Ring wraps: the send ring twice past 65,536 WQEBBs, both receive rings past 65,536 WQEs,
    // the raw wqe_ids in the profile's form, sampled past the 16-bit wrap.
    let w = &step(&v, "ring_wraps")["ring_wraps"];
    assert!(
        w["tx"]["wqebbs_at_least"].as_u64() >= Some(2 * 65_536),
        "{p}: {}",
        w["tx"]
    );
    assert_eq!(w["recoveries"], 0);
    let rx = w["rx"].as_array().expect("rx[]");
    assert_eq!((&rx[0]["mode"], &rx[1]["mode"]), (&"cyclic".into(), &"striding".into()));
    for r in rx {
        assert!(r["wqes"].as_u64() > Some(65_536), "{p}: {r}");
    }
    assert_eq!(rx[1]["wqe_id_form"], e.wqe_id_form, "{p}");
    let samples = rx[1]["samples"].as_array().expect("samples[]");
    assert!(
        samples.iter().any(|s| s["sw_wqe"].as_u64() >= Some(65_536)),
        "{p}: no sample past the 16-bit wrap: {samples:?}"
    );

    // TX errors: each fault seen as its syndrome, one recovery each.
    let cases = step(&v, "tx_errors")["tx_errors"]["cases"].as_array().expect("cases[]");
    let want = [("bad_lkey", "local_prot"), ("oversize", "local_length")];
    assert_eq!(cases.len(), want.len());
    for (c, (name, syndrome)) in cases.iter().zip(want) {
        assert_eq!(c["case"], name, "{p}");
        assert_eq!(c["syndrome"], syndrome, "{p}: {c}");
        assert_eq!(c["recoveries"], 1, "{p}: {c}");
        assert_eq!(c["after"], "pass", "{p}: {c}");
        assert_eq!(c["device"]["source"], "model", "{p}");
        assert!(c["device"]["counters"]["tx_error_cqes"].as_u64() >= Some(1), "{p}: {c}");
    }

    // Timestamps: every frame had one, in order; bracketed by the device's clock where it can
    // be read (free-running), reported unavailable where not (real time, no PHC).
    let t = &step(&v, "timestamps")["timestamps"];
    assert_eq!(t["samples"], FRAMES, "{p}: {t}");
    assert_eq!(t["monotonic"], true, "{p}");
    assert_eq!(t["mode"], e.clock_mode, "{p}");
    if e.clock_mode == "free-running" {
        assert_eq!(t["bracketed"], true, "{p}: {t}");
        assert_eq!(t["mode_seen"], "free-running", "{p}");
    } else {
        assert!(t["reference"].as_str().unwrap().starts_with("unavailable"), "{p}: {t}");
    }

    // Every field is documented.
    let mut keys = BTreeSet::new();
    paths(&v, "", &mut keys);
    let doc = documented();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !doc.contains(*k) && !doc.iter().any(|d| d.starts_with(&format!("{k}[]"))))
        .collect();
    assert!(missing.is_empty(), "{p}: docs/selftest.md does not name {missing:?}");
}

#[test]
#[ignore = "needs root"]
fn selftest_passes_on_the_default_model() {
    check(Expect {
        profile: "default",
        clock_mode: "free-running",
        vlan_insert: "hw",
        inline_source: "DevX HCA caps",
        wqe_id_form: "free-running",
        devx: true,
    });
}

#[test]
#[ignore = "needs root"]
fn selftest_passes_on_cx5() {
    check(Expect {
        profile: "cx5",
        clock_mode: "free-running",
        vlan_insert: "hw",
        inline_source: "DevX HCA caps",
        wqe_id_form: "ring-index",
        devx: true,
    });
}

#[test]
#[ignore = "needs root"]
fn selftest_passes_on_cx6dx() {
    check(Expect {
        profile: "cx6dx",
        clock_mode: "real-time",
        vlan_insert: "hw",
        inline_source: "DevX HCA caps",
        wqe_id_form: "ring-index",
        devx: true,
    });
}

#[test]
#[ignore = "needs root"]
fn selftest_passes_on_cx7() {
    check(Expect {
        profile: "cx7",
        clock_mode: "free-running",
        vlan_insert: "hw",
        inline_source: "DevX HCA caps",
        wqe_id_form: "ring-index",
        devx: true,
    });
}

#[test]
#[ignore = "needs root"]
fn selftest_passes_on_strict() {
    check(Expect {
        profile: "strict",
        clock_mode: "real-time",
        vlan_insert: "sw",
        inline_source: "the PCI device table (no DevX)",
        wqe_id_form: "ring-index",
        devx: false,
    });
}

#[test]
fn usage_mistakes_are_one_line_and_exit_2() {
    let exe = env!("CARGO_BIN_EXE_rawpkt-selftest");
    for args in [
        &["--port", "mlx5:mlx5_0/1"][..],
        &["--port", "model:a/0", "--loopback"],
        &["--port", "mlx5:mlx5_0/1", "--loopback", "--sizes", "59"],
        &["--port", "mlx5:mlx5_0/1", "--loopback", "--modes", "scatter"],
        &["--port", "mlx5:mlx5_0/1", "--loopback", "--skip", "caps"],
        &["--port", "mlx5:mlx5_0/1", "--loopback", "--frames", "0"],
        &["--bogus"],
    ] {
        let out = Command::new(exe).args(args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("rawpkt-selftest: "), "{args:?}: {err}");
    }
}
