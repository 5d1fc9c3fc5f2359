//! The fake sysfs tree, shaped like the kernel's, that the devices' `ibdev_path`/`dev_path`
//! point into, so the binding maps netdev <-> ibdev with the same code as on a real machine:
//!
//! ```text
//! <root>/class/infiniband/mlx5_0/device -> <root>/devices/pci0000:3a/0000:3b:00.0
//! <root>/class/infiniband/mlx5_0/{node_type,fw_ver,hca_type,ports/1/{state,link_layer,rate,hw_counters/out_of_buffer}}
//! <root>/class/infiniband_verbs/uverbs0/{ibdev,abi_version,device -> same PCI dir}
//! <root>/class/net/mdl0 -> <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0
//! <root>/devices/pci0000:3a/0000:3b:00.0/{vendor,device,driver -> <root>/bus/pci/drivers/mlx5_core}
//! <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0/{address,operstate,mtu,speed,ifindex,device}
//! ```

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::global::DEVS;

fn write(p: &Path, s: &str) -> Result<(), String> {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))
}

fn link(target: &Path, at: &Path) -> Result<(), String> {
    if let Some(d) = at.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    symlink(target, at).map_err(|e| format!("{} -> {}: {e}", at.display(), target.display()))
}

/// The port's `out_of_buffer` queue counter under a device's directory: frames dropped for want
/// of a posted receive buffer (the kernel's mlx5_ib `hw_counters`, `mlx5_ib_q_counters`).
pub(crate) const OUT_OF_BUFFER: &str = "ports/1/hw_counters/out_of_buffer";

/// Writes the tree in a fresh directory of the temp dir (once per process) and returns it.
pub(crate) fn create() -> Result<PathBuf, String> {
    let root = std::env::temp_dir().join(format!("rawpkt-model-sysfs-{}", std::process::id()));
    // A previous process with our pid (pid reuse) may have left one behind.
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let driver = root.join("bus/pci/drivers/mlx5_core");
    fs::create_dir_all(&driver).map_err(|e| format!("{}: {e}", driver.display()))?;
    for d in &DEVS {
        let pci = root.join("devices/pci0000:3a").join(d.pci);
        write(&pci.join("vendor"), "0x15b3\n")?;
        write(&pci.join("device"), "0x1017\n")?;
        link(&driver, &pci.join("driver"))?;
        let net = pci.join("net").join(d.netdev);
        let mac = d.mac.map(|b| format!("{b:02x}")).join(":");
        write(&net.join("address"), &format!("{mac}\n"))?;
        write(&net.join("operstate"), "up\n")?;
        write(&net.join("mtu"), "1500\n")?;
        write(&net.join("speed"), "100000\n")?;
        write(&net.join("ifindex"), &format!("{}\n", d.ifindex))?;
        link(&pci, &net.join("device"))?;
        link(&net, &root.join("class/net").join(d.netdev))?;

        let ib = root.join("class/infiniband").join(d.ibdev);
        link(&pci, &ib.join("device"))?;
        write(&ib.join("node_type"), "1: CA\n")?;
        write(&ib.join("fw_ver"), "16.35.2000\n")?;
        write(&ib.join("hca_type"), "MT4119\n")?;
        write(&ib.join("ports/1/state"), "4: ACTIVE\n")?;
        write(&ib.join("ports/1/phys_state"), "5: LinkUp\n")?;
        write(&ib.join("ports/1/link_layer"), "Ethernet\n")?;
        write(&ib.join("ports/1/rate"), "100 Gb/sec (4X EDR)\n")?;
        // Kept up to date by the model (`Nic::publish_out_of_buffer`, from `global::init`).
        write(&ib.join(OUT_OF_BUFFER), "0\n")?;
        fs::create_dir_all(pci.join("infiniband").join(d.ibdev)).map_err(|e| e.to_string())?;

        let uv = root.join("class/infiniband_verbs").join(d.uverbs);
        write(&uv.join("ibdev"), &format!("{}\n", d.ibdev))?;
        write(&uv.join("abi_version"), "1\n")?;
        link(&pci, &uv.join("device"))?;
    }
    // Removed at exit (a process killed by a signal leaves it; the next one with the same pid
    // replaces it).
    // SAFETY: registering a plain extern "C" fn with no arguments; it runs at normal exit.
    unsafe { libc::atexit(remove_at_exit) };
    Ok(root)
}

extern "C" fn remove_at_exit() {
    let root = std::env::temp_dir().join(format!("rawpkt-model-sysfs-{}", std::process::id()));
    let _ = std::panic::catch_unwind(|| fs::remove_dir_all(root));
}
