//! Model profiles and knobs: how a `model:` port picks its device, and the driver against each
//! behaviour a ConnectX may show that the default model forgives (`mlx5_model::profile`). The
//! tests here pin the knob they test themselves, so they mean the same on every profile of
//! `scripts/test.sh --profiles`.

mod common;

use rawpkt::model::nic_of;
use rawpkt::{ErrorKind, ModelOptions, PortOptions};

/// A spec's `profile=` and `knob=` options, and `ModelOptions`, make the NIC; the other end of
/// the NIC shares it, and an end that asks for another device is told so in one line, as is a
/// profile or knob the model does not know.
#[test]
fn model_ports_take_their_device_from_the_spec_or_the_options() {
    let a = rawpkt::open("model:prof-a/0,profile=cx7,knob=zip=never").unwrap();
    let (nic, _) = nic_of(&a).unwrap();
    let cfg = nic.config();
    assert_eq!(cfg.profile, "cx7");
    assert_eq!(cfg.knobs.zip, mlx5_model::profile::Zip::Never);
    assert_eq!(cfg.identity.pci_device_id, 0x1021);
    let b = rawpkt::open("model:prof-a/1").unwrap();
    assert!(std::sync::Arc::ptr_eq(&nic, &nic_of(&b).unwrap().0));
    let e = rawpkt::open("model:prof-a/1,profile=cx5").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("already open as `cx7 ") && e.to_string().contains("zip=never"), "{e}");

    let opts = PortOptions::default().model(
        ModelOptions::default()
            .profile(Some("strict".into()))
            .knobs(vec!["vlan_insert=on".into()]),
    );
    let s = rawpkt::open_with("model:prof-b/0", &opts).unwrap();
    let cfg = nic_of(&s).unwrap().0.config();
    assert_eq!(cfg.profile, "strict");
    assert!(cfg.knobs.vlan_insert, "the options' knobs come after the profile");
    let d = rawpkt::open("model:prof-c/0").unwrap();
    assert_eq!(nic_of(&d).unwrap().0.config().behaviour(), "default");

    for (spec, want) in [
        ("model:prof-d/0,profile=cx9", "no such profile"),
        ("model:prof-d/0,knob=wqe_id=sometimes", "expected wqe_id=counter|ring"),
        ("model:prof-d/0,knob=nope=1", "no such knob"),
        ("model:prof-d/0,colour=blue", "unknown option"),
    ] {
        let e = rawpkt::open(spec).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Config | ErrorKind::Spec), "{spec}: {e}");
        let text = e.to_string();
        assert!(text.contains(want) && !text.contains('\n'), "{spec}: {text}");
    }
}

/// The trace of a profiled NIC says which device it is on its second line.
#[test]
fn the_trace_names_the_profile_and_its_knobs() {
    let path = std::env::temp_dir().join(format!("rawpkt-profile-trace-{}.txt", std::process::id()));
    {
        let cfg = mlx5_model::ModelConfig {
            trace: Some(path.clone()),
            ..mlx5_model::ModelConfig::with_profile(Some("cx6dx"), &["zip=never".into()]).unwrap()
        };
        let nic = mlx5_model::Nic::pair(cfg).unwrap();
        nic.flush_trace();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# rawpkt mlx5 model trace v2"));
    let second = lines.next().unwrap();
    assert!(second.starts_with("# profile cx6dx wqe_id=ring"), "{second}");
    assert!(second.contains("zip=never") && second.contains("clock=real-time"), "{second}");
}
